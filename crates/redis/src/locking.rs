//! The locking path on Redis, top to bottom: claim, take over, then
//! complete (alone or with the effect, in one script), fail, release or
//! extend. Every transition is ONE script; its first lines are its
//! condition, with the invariant it keeps. The claim loop that judges a
//! found item is the store trait's ([`exactly_once_core::store::Store::claim`]).

use serde_json::json;

use super::codec::{deleted_at_ms, new_fields};
use super::effect::Change;
use super::lua::{effects_lua, live_lua};
use super::{Answer, RedisEffect, RedisStore, found_item, text};
use exactly_once_core::clock::ms_to_s;
use exactly_once_core::store::{
    ClaimRequest, Conditional, Effects, Lease, NewItem, Status, Store, StoreError, StoredItem,
    attr, bounded, increment, transaction_effects,
};

/// Create a new item (the claim's STARTED one, or the lock-free path's
/// FAILED one): `KEYS[1]` the item, `KEYS[2]` the set of STARTED items,
/// `ARGV[1]` now (s), `ARGV[2]` when Redis deletes it (ms), `ARGV[3..]` its
/// fields. Answers 1, or the item found.
pub(super) const CREATE: &str = concat!(
    live_lua!(),
    r#"
-- Invariant: one live item per key; a new item never replaces one that
-- has not passed its TTL.
if live(KEYS[1], tonumber(ARGV[1])) then
  return {'found', redis.call('HGETALL', KEYS[1])}
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
-- Invariant: the set of STARTED items holds every STARTED item (by its
-- creation time) and no other written since.
if redis.call('HGET', KEYS[1], 'status') == 'STARTED' then
  redis.call('ZADD', KEYS[2], redis.call('HGET', KEYS[1], 'created_at'), KEYS[1])
else
  redis.call('ZREM', KEYS[2], KEYS[1])
end
return 1
"#
);

/// Take over (`KEYS[2]` the set of STARTED items): `ARGV[1]` the version
/// observed, `ARGV[2]` now (ms), then the new owner, version, lease end,
/// `expires_at`, deletion time and this store's scope ('' for none).
pub(super) const TAKE_OVER: &str = r#"
local found = redis.call('HMGET', KEYS[1], 'version', 'status', 'lock_expires_at', 'scope')
-- Invariant: of all takers that saw this version, exactly one wins, only
-- while the lock is still abandoned (not renewed, not finished), and only
-- of its own scope's item (or one written before scopes, which then takes
-- this scope).
if found[1] ~= ARGV[1] or found[2] ~= 'STARTED'
    or tonumber(found[3] or '0') >= tonumber(ARGV[2])
    or (found[4] and found[4] ~= ARGV[8]) then
  return {'found', redis.call('HGETALL', KEYS[1])}
end
redis.call('HSET', KEYS[1], 'owner', ARGV[3], 'version', ARGV[4],
  'lock_expires_at', ARGV[5], 'expires_at', ARGV[6], 'updated_at', ARGV[2])
if ARGV[8] ~= '' then redis.call('HSET', KEYS[1], 'scope', ARGV[8]) end
redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('PEXPIREAT', KEYS[1], ARGV[7])
-- Still STARTED: in the set of STARTED items.
redis.call('ZADD', KEYS[2], redis.call('HGET', KEYS[1], 'created_at') or ARGV[2], KEYS[1])
return 1
"#;

/// A write of the lease holder (complete, fail, release, extend): `KEYS[2]`
/// the set of STARTED items, `ARGV[1]` version, `ARGV[2]` owner, `ARGV[3]`
/// the new deletion time ('' keeps it), `ARGV[4]` the change as JSON:
/// fields to set and to delete, and the work's effects (keys at
/// `KEYS[3..]`). Answers 1, `{'lock_lost'}`, or the effect refused.
pub(super) const FENCED: &str = concat!(
    effects_lua!(),
    r#"
local found = redis.call('HMGET', KEYS[1], 'status', 'version', 'owner')
-- Invariant: only the current owner of a STARTED item writes to it; a
-- worker taken over (new version, new owner) is fenced out, effects included.
if found[1] ~= 'STARTED' or found[2] ~= ARGV[1] or found[3] ~= ARGV[2] then
  return {'lock_lost'}
end
local change = cjson.decode(ARGV[4])
local refusal = refused(change, 2)
if refusal then return refusal end
apply(change, 2)
redis.call('HSET', KEYS[1], unpack(change.set))
if #change.del > 0 then redis.call('HDEL', KEYS[1], unpack(change.del)) end
if ARGV[3] ~= '' then redis.call('PEXPIREAT', KEYS[1], ARGV[3]) end
-- Completed or failed: no longer in the set of STARTED items.
if redis.call('HGET', KEYS[1], 'status') ~= 'STARTED' then
  redis.call('ZREM', KEYS[2], KEYS[1])
end
return 1
"#
);

impl RedisStore {
    /// Claim: create the STARTED item at version 1 (or replace an expired
    /// one); else the item found.
    pub(super) async fn claim_new(
        &self,
        pk: &str,
        request: ClaimRequest<'_>,
    ) -> Result<Conditional<Lease>, StoreError> {
        let now = self.now_ms();
        let lease = Lease::claimed(pk.to_owned(), 1, &self.config, now, &request);
        let item = NewItem::started(&lease, request, &self.config, now);
        self.create("claim", item)
            .await
            .map(|written| match written {
                Conditional::Written(()) => Conditional::Written(lease),
                Conditional::Conflict(found) => Conditional::Conflict(found),
            })
    }

    /// Runs [`CREATE`] for `item`.
    pub(super) async fn create(
        &self,
        operation: &'static str,
        item: NewItem<'_>,
    ) -> Result<Conditional<()>, StoreError> {
        let mut invocation = self.scripts.create.key(self.item_key(item.pk));
        invocation.key(self.started_set());
        invocation
            .arg(ms_to_s(item.now_ms))
            .arg(deleted_at_ms(item.expires_at_s))
            .arg(new_fields(&item));
        match self.run(operation, &invocation).await? {
            Answer::Written => Ok(Conditional::Written(())),
            Answer::Refused(_, found) => Ok(Conditional::Conflict(found_item(&found)?)),
        }
    }

    /// Take over: become the owner of an abandoned STARTED item, version + 1.
    pub(super) async fn take_over_item(
        &self,
        observed: &StoredItem,
        request: ClaimRequest<'_>,
    ) -> Result<Conditional<Lease>, StoreError> {
        let now = self.now_ms();
        let next = observed.version + 1;
        let lease = Lease::claimed(observed.pk.clone(), next, &self.config, now, &request);
        let expires_at_s = self.config.expires_at_s(now);
        let mut invocation = self.scripts.take_over.key(self.item_key(&observed.pk));
        invocation
            .key(self.started_set())
            .arg(observed.version)
            .arg(now)
            .arg(&lease.owner)
            .arg(lease.version)
            .arg(lease.lock_expires_at_ms)
            .arg(expires_at_s)
            .arg(deleted_at_ms(expires_at_s))
            .arg(self.config.scope.as_deref().unwrap_or_default());
        match self.run("take over", &invocation).await? {
            Answer::Written => Ok(Conditional::Written(lease)),
            Answer::Refused(_, found) => Ok(Conditional::Conflict(found_item(&found)?)),
        }
    }

    /// Complete, together with the work's own writes and increments in the
    /// same script: either all happen or none. Returns the item's new
    /// `expires_at` (epoch seconds).
    pub(super) async fn complete_item(
        &self,
        lease: &Lease,
        result: Option<&str>,
        effects: Effects<RedisEffect>,
    ) -> Result<u64, StoreError> {
        let increments = transaction_effects([&effects], super::MAX_EFFECTS)?;
        let now = self.now_ms();
        let expires_at_s = self.config.expires_at_s(now);
        let mut set = vec![
            (attr::STATUS, Status::Completed.as_str().to_owned()),
            (attr::EXPIRES_AT, expires_at_s.to_string()),
            (attr::UPDATED_AT, now.to_string()),
        ];
        if let Some(result) = result {
            set.push((attr::RESULT, result.to_owned()));
        }
        let change = Change::of_effects(&effects, &increments);
        let writes = effects.writes.len();
        let expires = Some(expires_at_s);
        self.fenced(
            "complete",
            lease,
            set,
            &[attr::LOCK_EXPIRES_AT],
            expires,
            change,
        )
        .await
        .map_err(|refusal| refusal.into_error(writes))?;
        Ok(expires_at_s)
    }

    /// Fail permanently: redeliveries are refused.
    pub(super) async fn fail_item(&self, lease: &Lease, error: &str) -> Result<(), StoreError> {
        let now = self.now_ms();
        let expires_at_s = self.config.expires_at_s(now);
        let set = vec![
            (attr::STATUS, Status::Failed.as_str().to_owned()),
            (attr::ERROR, bounded(error).to_owned()),
            (attr::EXPIRES_AT, expires_at_s.to_string()),
            (attr::UPDATED_AT, now.to_string()),
        ];
        let no_effects = Change::of([], &[]);
        self.fenced(
            "fail",
            lease,
            set,
            &[attr::LOCK_EXPIRES_AT],
            Some(expires_at_s),
            no_effects,
        )
        .await
        .map_err(|refusal| refusal.into_error(0))
    }

    /// Extend (heartbeat) the lease to `until_ms`; 0 releases it (the next
    /// claim takes the key over at once).
    pub(super) async fn extend_item(
        &self,
        lease: &Lease,
        until_ms: u64,
    ) -> Result<Lease, StoreError> {
        let set = vec![
            (attr::LOCK_EXPIRES_AT, until_ms.to_string()),
            (attr::UPDATED_AT, self.now_ms().to_string()),
        ];
        let operation = if until_ms == 0 { "release" } else { "extend" };
        self.fenced(operation, lease, set, &[], None, Change::of([], &[]))
            .await
            .map_err(|refusal| refusal.into_error(0))?;
        Ok(Lease {
            lock_expires_at_ms: until_ms,
            ..lease.clone()
        })
    }

    /// Runs [`FENCED`]: `set` and `delete` on the lease's item, with
    /// `change`'s effects, and its deletion moved to just after
    /// `expires_at_s` when given.
    async fn fenced(
        &self,
        operation: &'static str,
        lease: &Lease,
        set: Vec<(&str, String)>,
        delete: &[&str],
        expires_at_s: Option<u64>,
        change: Change,
    ) -> Result<(), Refusal> {
        let set: Vec<String> = set
            .into_iter()
            .flat_map(|(name, value)| [name.to_owned(), value])
            .collect();
        let lua = json!({
            "set": set,
            "del": delete,
            "writes": change.writes,
            "increments": change.increments,
        });
        let mut invocation = self.scripts.fenced.key(self.item_key(&lease.pk));
        invocation
            .key(self.started_set())
            .key(change.keys)
            .arg(lease.version)
            .arg(&lease.owner)
            .arg(expires_at_s.map_or(String::new(), |at| deleted_at_ms(at).to_string()))
            .arg(lua.to_string());
        match self
            .run(operation, &invocation)
            .await
            .map_err(Refusal::Store)?
        {
            Answer::Written => Ok(()),
            Answer::Refused(tag, values) => Err(match tag.as_str() {
                "effect" => {
                    Refusal::Effect(index(&values), values.get(1).map(text).unwrap_or_default())
                }
                "increment" => Refusal::Increment(index(&values)),
                _ => Refusal::Store(StoreError::LockLost {
                    key: lease.pk.clone(),
                    version: lease.version,
                }),
            }),
        }
    }
}

/// Why a fenced write wrote nothing.
enum Refusal {
    Store(StoreError),
    /// Write `0` was refused for reason `1`.
    Effect(usize, String),
    /// Merged increment `0` would cross a floor.
    Increment(usize),
}

impl Refusal {
    /// The error of the transition refused, effects numbered as
    /// [`StoreError::EffectConditionFailed`] numbers them: the `writes`
    /// first, then the merged increments.
    fn into_error(self, writes: usize) -> StoreError {
        match self {
            Refusal::Store(err) => err,
            Refusal::Effect(effect, message) => {
                StoreError::EffectConditionFailed { effect, message }
            }
            Refusal::Increment(index) => StoreError::EffectConditionFailed {
                effect: writes + index,
                message: increment::BELOW_FLOOR.into(),
            },
        }
    }
}

/// The 0-based index a refusal names first.
pub(super) fn index(values: &[redis::Value]) -> usize {
    match values.first() {
        Some(redis::Value::Int(i)) => usize::try_from(*i).unwrap_or_default(),
        _ => 0,
    }
}
