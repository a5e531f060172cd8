//! What operators and the engine read, and the operators' writes: an item,
//! many items (one pipelined round trip), a listing (stuck keys through the
//! sorted set of STARTED items, unsent messages through the sorted set of
//! unsent items, FAILED keys by a `SCAN` of the table's keys), and release
//! / retry fenced on the status and version the operator saw.

use std::collections::HashMap;

use redis::Script;

use super::codec::item_of;
use super::{Answer, RedisStore, found_item};
use exactly_once_core::store::{Listed, Listing, Status, Store, StoreError, StoredItem};

/// An operator's write: `KEYS[1]` the item, `KEYS[2]` the set of STARTED
/// items, `ARGV[1]` the status and
/// `ARGV[2]` the version the operator saw, `ARGV[3]` now (ms). A STARTED
/// item's lock ends now; a FAILED item becomes STARTED with its lock ended,
/// its error kept as `last_error`. Answers 1, or the item found.
pub(super) const OPERATOR: &str = r"
local found = redis.call('HMGET', KEYS[1], 'status', 'version')
-- Invariant: only the item in the status and at the version the operator
-- saw changes; one taken over or finished since does not.
if found[1] ~= ARGV[1] or found[2] ~= ARGV[2] then
  return {'found', redis.call('HGETALL', KEYS[1])}
end
if ARGV[1] == 'FAILED' then
  local error = redis.call('HGET', KEYS[1], 'error') or '(no error text)'
  redis.call('HSET', KEYS[1], 'status', 'STARTED', 'last_error', error)
  redis.call('HDEL', KEYS[1], 'error')
end
redis.call('HSET', KEYS[1], 'lock_expires_at', '0', 'updated_at', ARGV[3])
-- STARTED (again): in the set of STARTED items.
redis.call('ZADD', KEYS[2], redis.call('HGET', KEYS[1], 'created_at') or ARGV[3], KEYS[1])
return 1
";

/// Prune the set of STARTED items (`KEYS[1]`) of the members `KEYS[2..]`
/// whose item is gone (deleted by Redis past its TTL) or no longer STARTED
/// (replaced by the lock-free path after it expired). Answers 1.
pub(super) const PRUNE: &str = r"
for i = 2, #KEYS do
  -- Invariant: only a member whose item is not STARTED leaves the set;
  -- every write that makes an item STARTED adds it, atomically.
  if redis.call('HGET', KEYS[i], 'status') ~= 'STARTED' then
    redis.call('ZREM', KEYS[1], KEYS[i])
  end
end
return 1
";

/// Prune the set of unsent items (`KEYS[1]`) of the members `KEYS[2..]`
/// whose item has nothing left to send (cleared, gone past its TTL, or
/// replaced). Answers 1.
pub(super) const PRUNE_UNSENT: &str = r"
for i = 2, #KEYS do
  -- Invariant: only a member whose item holds no outbox leaves the set;
  -- every write of an outbox adds it, atomically.
  if redis.call('HEXISTS', KEYS[i], 'outbox') == 0 then
    redis.call('ZREM', KEYS[1], KEYS[i])
  end
end
return 1
";

/// Keys a listing's `SCAN` asks for per page.
const SCAN_PAGE: usize = 500;

/// The live items of `keys` (invalid keys skipped), in one round trip.
pub(super) async fn batch_get(
    store: &RedisStore,
    keys: &[&str],
) -> Result<HashMap<String, StoredItem>, StoreError> {
    let valid: Vec<(&str, String)> = keys
        .iter()
        .filter_map(|key| Some((*key, store.pk(key).ok()?)))
        .collect();
    if valid.is_empty() {
        return Ok(HashMap::new());
    }
    let mut pipe = redis::pipe();
    for (_, pk) in &valid {
        pipe.hgetall(store.item_key(pk));
    }
    let found: Vec<HashMap<String, String>> = store.query("batch get", &pipe).await?;
    let now = store.now_ms();
    let mut items = HashMap::new();
    for ((key, _), fields) in valid.into_iter().zip(found) {
        if let Some(item) = item_of(fields)?.filter(|item| !item.is_expired(now)) {
            items.insert(key.to_owned(), item);
        }
    }
    Ok(items)
}

/// The live items under the key prefix that `listing` names: stuck
/// keys through the set of STARTED items, unsent messages through the
/// set of unsent items, FAILED keys by a `SCAN`.
pub(super) async fn list(store: &RedisStore, listing: Listing) -> Result<Listed, StoreError> {
    match listing {
        Listing::Stuck { .. } => {
            let set = (store.started_set(), &store.scripts.prune);
            let started = |item: &StoredItem| item.status == Status::Started;
            store.list_indexed(listing, set, started, "+inf").await
        }
        Listing::Unsent { older_than } => {
            // Scored by `updated_at`: only those last written before.
            let before_ms = store.now_ms().saturating_sub(older_than.as_millis() as u64);
            let set = (store.unsent_set(), &store.scripts.prune_unsent);
            let unsent = |item: &StoredItem| item.outbox.is_some();
            store
                .list_indexed(listing, set, unsent, &format!("({before_ms}"))
                .await
        }
        Listing::Failed => store.scan_items(listing).await,
    }
}

/// Operator release: the STARTED item at `version` becomes claimable at
/// once ([`OPERATOR`]).
pub(super) async fn release_version(
    store: &RedisStore,
    key: &str,
    version: u64,
) -> Result<(), StoreError> {
    store.operator_write(key, version, Status::Started).await
}

/// Operator retry: the FAILED item at `version` becomes STARTED with its
/// lock ended ([`OPERATOR`]).
pub(super) async fn retry_failed(
    store: &RedisStore,
    key: &str,
    version: u64,
) -> Result<(), StoreError> {
    store.operator_write(key, version, Status::Failed).await
}

impl RedisStore {
    /// Operator release (`Started`) or retry (`Failed`) of `key` at `version`.
    async fn operator_write(
        &self,
        key: &str,
        version: u64,
        expected: Status,
    ) -> Result<(), StoreError> {
        let pk = self.pk(key)?;
        let now = self.now_ms();
        let mut invocation = self.scripts.operator.key(self.item_key(&pk));
        invocation
            .key(self.started_set())
            .arg(expected.as_str())
            .arg(version)
            .arg(now);
        let operation = match expected {
            Status::Failed => "retry failed",
            _ => "release",
        };
        match self.run(operation, &invocation).await? {
            Answer::Written => Ok(()),
            Answer::Refused(_, found) => {
                let found = found_item(&found)?;
                Err(StoreError::not_in_state(
                    pk,
                    expected,
                    version,
                    found.as_deref(),
                    now,
                ))
            }
        }
    }

    /// The item of `key` as Redis holds it, even past its TTL (for
    /// operators; the engine reads [`exactly_once_core::store::Store::get`]).
    pub async fn stored(&self, key: &str) -> Result<Option<StoredItem>, StoreError> {
        let pk = self.pk(key)?;
        let mut pipe = redis::pipe();
        pipe.hgetall(self.item_key(&pk));
        let (found,): (HashMap<String, String>,) = self.query("get", &pipe).await?;
        item_of(found)
    }

    /// The members of an index of the table's items (the set of STARTED
    /// items, or of unsent items: `set` and the script that prunes it)
    /// scored up to `max` (oldest first), each page's items read in one
    /// round trip: the cost follows the size of the index, not the table's.
    /// Members whose item is no longer `indexed` are pruned on the way.
    async fn list_indexed(
        &self,
        listing: Listing,
        (set, prune): (String, &Script),
        indexed: fn(&StoredItem) -> bool,
        max: &str,
    ) -> Result<Listed, StoreError> {
        let now = self.now_ms();
        let mut listed = Listed::default();
        let mut ranged = redis::pipe();
        ranged.zrangebyscore(&set, "-inf", max);
        let (members,): (Vec<String>,) = self.query("list", &ranged).await?;
        listed.cost.requests += 1;
        let under_prefix = self.item_key(&self.config.key_prefix);
        for page in members.chunks(SCAN_PAGE) {
            let mut pipe = redis::pipe();
            for member in page {
                pipe.hgetall(member);
            }
            let found: Vec<HashMap<String, String>> = self.query("list", &pipe).await?;
            listed.cost.requests += 1;
            listed.cost.read += found.len() as u64;
            let mut gone = Vec::new();
            for (member, fields) in page.iter().zip(found) {
                match item_of(fields).ok().flatten() {
                    Some(item) if indexed(&item) => {
                        let live = member.starts_with(&under_prefix) && !item.is_expired(now);
                        if live && listing.matches(&item, now) {
                            listed.items.push(item);
                        }
                    }
                    _ => gone.push(member.as_str()),
                }
            }
            if !gone.is_empty() {
                let mut pruning = prune.key(&set);
                pruning.key(gone);
                self.run("prune", &pruning).await?;
                listed.cost.requests += 1;
            }
        }
        Ok(listed)
    }

    /// The live items `listing` names, by a `SCAN` of the table's keys,
    /// each page's items read in one round trip.
    async fn scan_items(&self, listing: Listing) -> Result<Listed, StoreError> {
        let pattern = format!("{}*", glob_escape(&self.item_key(&self.config.key_prefix)));
        let now = self.now_ms();
        let mut listed = Listed::default();
        let mut cursor = 0_u64;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_PAGE);
            // In cluster mode, the node of the table's slot holds its keys.
            let (next, keys): (u64, Vec<String>) = self.scan(&scan).await?;
            listed.cost.requests += 1;
            if !keys.is_empty() {
                let mut pipe = redis::pipe();
                for key in &keys {
                    pipe.hgetall(key);
                }
                let found: Vec<HashMap<String, String>> = self.query("list", &pipe).await?;
                listed.cost.requests += 1;
                listed.cost.read += found.len() as u64;
                for item in found.into_iter().filter_map(|f| item_of(f).ok().flatten()) {
                    if !item.is_expired(now) && listing.matches(&item, now) {
                        listed.items.push(item);
                    }
                }
            }
            if next == 0 {
                return Ok(listed);
            }
            cursor = next;
        }
    }
}

impl RedisStore {
    /// One `SCAN` page, on the node of the table's keys.
    async fn scan(&self, scan: &redis::Cmd) -> Result<(u64, Vec<String>), StoreError> {
        let mut connection = self.connection.clone();
        let node = self.item_key("");
        let answer = tokio::time::timeout(self.timeout, connection.on_node_of(&node, scan))
            .await
            .map_err(|_| self.timed_out("list"))?
            .map_err(|err| super::redis_error("list", err))?;
        redis::from_redis_value(answer).map_err(|err| super::redis_error("list", err.into()))
    }
}

/// `text` with the glob characters of `SCAN MATCH` escaped.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}
