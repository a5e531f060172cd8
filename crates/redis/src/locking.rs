//! The locking path on Redis, top to bottom: claim, take over, then
//! complete (alone or with the effect, in one script), fail, release or
//! extend. Every transition is ONE script; its first lines are its
//! condition, with the invariant it keeps. The claim loop that judges a
//! found item is the store trait's ([`exactly_once_core::store::Store::claim`]).

use serde_json::json;

use super::codec::{deleted_at_ms, new_fields};
use super::effect::Change;
use super::lua::{create_lua, effects_lua, holds_lua, live_lua, unsent_lua};
use super::{Answer, RedisEffect, RedisStore, found_item, text};
use exactly_once_core::clock::ms_to_s;
use exactly_once_core::outbox::Pending;
use exactly_once_core::store::{
    ClaimRequest, Conditional, Effects, FencedWrite, Lease, NewItem, Status, Store, StoreError,
    StoredItem, attr, bounded, increment, transaction_effects,
};

/// Create a new item (the claim's STARTED one, or the lock-free path's
/// FAILED one): `KEYS[1]` the item, `KEYS[2]` the set of STARTED items,
/// `ARGV[1]` now (s), `ARGV[2]` when Redis deletes it (ms), `ARGV[3..]` its
/// fields. Answers 1, or the item found.
pub(super) const CREATE: &str = concat!(
    live_lua!(),
    create_lua!(),
    "return create(KEYS[1], KEYS[2], tonumber(ARGV[1]), ARGV[2], {unpack(ARGV, 3)})"
);

/// Claims together: `KEYS[1..n]` the items, `KEYS[n + 1]` the set of
/// STARTED items, `ARGV[1]` now (s), `ARGV[2]` when Redis deletes them
/// (ms), `ARGV[3]` JSON: each item's fields. Each is [`CREATE`]d on its own;
/// answers each one's answer, in order.
pub(super) const CREATE_MANY: &str = concat!(
    live_lua!(),
    create_lua!(),
    r#"
local items = cjson.decode(ARGV[3])
local answers = {}
for i, fields in ipairs(items) do
  answers[i] = create(KEYS[i], KEYS[#items + 1], tonumber(ARGV[1]), ARGV[2], fields)
end
return answers
"#
);

/// Clears the outboxes of completions whose messages were sent: `KEYS[i]`
/// an item, `ARGV[i]` the owner it was completed under, `KEYS[#KEYS]` the
/// set of unsent items.
pub(super) const CLEAR_OUTBOX: &str = r"
local unsent = KEYS[#KEYS]
for i = 1, #KEYS - 1 do
  local key = KEYS[i]
  local found = redis.call('HMGET', key, 'status', 'owner')
  -- Invariant: only the messages of the completion that was sent are
  -- cleared (COMPLETED under its owner); an item that changed since (past
  -- its TTL, claimed again) keeps its own.
  if found[1] == 'COMPLETED' and found[2] == ARGV[i] then
    redis.call('HDEL', key, 'outbox')
  end
  -- Nothing left to send: out of the set of unsent items.
  if redis.call('HEXISTS', key, 'outbox') == 0 then
    redis.call('ZREM', unsent, key)
  end
end
return {}
";

/// Take over (`KEYS[2]` the set of STARTED items): `ARGV[1]` the version
/// observed, `ARGV[2]` now (ms), then the new owner, version, lease end,
/// `expires_at`, deletion time and this store's scope ('' for none).
pub(super) const TAKE_OVER: &str = r"
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
";

/// `fenced(key, started, version, owner, deleted_at_ms, change, base)`: the
/// write of [`FENCED`], its effects' keys at `KEYS[base + 1 ..]`.
macro_rules! fenced_lua {
    () => {
        r#"
local function fenced(key, started, version, owner, deleted_at_ms, change, base)
  if not holds(key, version, owner) then
    -- The item as found, by which the caller tells its own write made
    -- before (sent again) from the lock lost.
    return {'lock_lost', redis.call('HGETALL', key)}
  end
  local refusal = refused(change, base)
  if refusal then return refusal end
  apply(change, base)
  redis.call('HSET', key, unpack(change.set))
  if #change.del > 0 then redis.call('HDEL', key, unpack(change.del)) end
  if deleted_at_ms ~= '' then redis.call('PEXPIREAT', key, deleted_at_ms) end
  -- Completed or failed: no longer in the set of STARTED items.
  if redis.call('HGET', key, 'status') ~= 'STARTED' then
    redis.call('ZREM', started, key)
  end
  return 1
end
"#
    };
}

/// A write of the lease holder (complete, fail, release, extend): `KEYS[2]`
/// the set of STARTED items, `KEYS[3]` the set of unsent items, `ARGV[1]`
/// version, `ARGV[2]` owner, `ARGV[3]` the new deletion time ('' keeps
/// it), `ARGV[4]` the change as JSON: fields to set and to delete (a
/// completion's outbox among them), and the work's effects (keys at
/// `KEYS[4..]`). Answers 1, `{'lock_lost', item}`, or the effect refused.
pub(super) const FENCED: &str = concat!(
    holds_lua!(),
    effects_lua!(),
    fenced_lua!(),
    unsent_lua!(),
    r#"
local answer = fenced(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], cjson.decode(ARGV[4]), 3)
if answer == 1 then index_unsent(KEYS[1], KEYS[3]) end
return answer
"#
);

/// Writes of several leases' holders, none with an effect: `KEYS[1..n]`
/// the items, `KEYS[n + 1]` the set of STARTED items, `ARGV[1]` JSON: each
/// one's version, owner, deletion time ('' keeps it), and change (fields
/// to set and to delete). Each is [`FENCED`] on its own; answers each
/// one's answer, in order.
pub(super) const FENCED_MANY: &str = concat!(
    holds_lua!(),
    effects_lua!(),
    fenced_lua!(),
    r#"
local writes = cjson.decode(ARGV[1])
local answers = {}
for i, write in ipairs(writes) do
  answers[i] = fenced(KEYS[i], KEYS[#writes + 1], write[1], write[2], write[3], write[4], #KEYS)
end
return answers
"#
);

/// Claim: create the STARTED item at version 1 (or replace an expired
/// one); else the item found.
pub(super) async fn create_started(
    store: &RedisStore,
    pk: &str,
    request: ClaimRequest<'_>,
) -> Result<Conditional<Lease>, StoreError> {
    let now = store.now_ms();
    let lease = Lease::claimed(pk.to_owned(), 1, &store.config, now, &request);
    let item = NewItem::started(&lease, request, &store.config, now);
    store
        .create("claim", item)
        .await
        .map(|written| match written {
            Conditional::Written(()) => Conditional::Written(lease),
            Conditional::Conflict(found) => Conditional::Conflict(found),
        })
}

/// Take over: become the owner of an abandoned STARTED item, version + 1.
pub(super) async fn take_over(
    store: &RedisStore,
    observed: &StoredItem,
    request: ClaimRequest<'_>,
) -> Result<Conditional<Lease>, StoreError> {
    let now = store.now_ms();
    let lease = Lease::taking_over(observed, &store.config, now, &request);
    let expires_at_s = store.config.expires_at_s(now);
    let mut invocation = store.scripts.take_over.key(store.item_key(&observed.pk));
    invocation
        .key(store.started_set())
        .arg(observed.version)
        .arg(now)
        .arg(&lease.owner)
        .arg(lease.version)
        .arg(lease.lock_expires_at_ms)
        .arg(expires_at_s)
        .arg(deleted_at_ms(expires_at_s))
        .arg(store.config.scope.as_deref().unwrap_or_default());
    match store.run("take over", &invocation).await? {
        Answer::Written => Ok(Conditional::Written(lease)),
        Answer::Refused(_, found) => Ok(Conditional::Conflict(found_item(&found)?)),
    }
}

/// Claims together, each as [`create_started`] alone: ONE script.
pub(super) async fn create_started_many(
    store: &RedisStore,
    claims: &[(String, ClaimRequest<'_>)],
) -> Result<Vec<Conditional<Lease>>, StoreError> {
    if claims.is_empty() {
        return Ok(Vec::new());
    }
    let now = store.now_ms();
    let mut leases = Vec::with_capacity(claims.len());
    let mut items = Vec::with_capacity(claims.len());
    let mut invocation = store.scripts.create_many.prepare_invoke();
    for (pk, request) in claims {
        let lease = Lease::claimed(pk.clone(), 1, &store.config, now, request);
        items.push(new_fields(&NewItem::started(
            &lease,
            *request,
            &store.config,
            now,
        )));
        invocation.key(store.item_key(pk));
        leases.push(lease);
    }
    invocation
        .key(store.started_set())
        .arg(ms_to_s(now))
        .arg(deleted_at_ms(store.config.expires_at_s(now)))
        .arg(json!(items).to_string());
    let answers = store
        .run_many("claim (batch)", &invocation, elements)
        .await?;
    leases
        .into_iter()
        .zip(answers)
        .map(|(lease, answer)| match answer {
            Answer::Written => Ok(Conditional::Written(lease)),
            Answer::Refused(_, found) => Ok(Conditional::Conflict(found_item(&found)?)),
        })
        .collect()
}

/// Fenced writes together, each as alone (no effects): ONE script.
pub(super) async fn write_fenced(
    store: &RedisStore,
    writes: &[(Lease, FencedWrite)],
) -> Vec<Result<u64, StoreError>> {
    if writes.is_empty() {
        return Vec::new();
    }
    let now = store.now_ms();
    let mut invocation = store.scripts.fenced_many.prepare_invoke();
    let mut lua = Vec::with_capacity(writes.len());
    let mut answers = Vec::with_capacity(writes.len());
    for (lease, write) in writes {
        let transition = store.transition(write, now);
        invocation.key(store.item_key(&lease.pk));
        lua.push(json!([
            lease.version.to_string(),
            lease.owner,
            transition.deleted_at(),
            transition.change(&Change::of([], &[])),
        ]));
        answers.push(transition.answer);
    }
    invocation
        .key(store.started_set())
        .arg(json!(lua).to_string());
    match store
        .run_many("fenced write (batch)", &invocation, elements)
        .await
    {
        Err(err) => writes.iter().map(|_| Err(err.clone())).collect(),
        Ok(written) => written
            .into_iter()
            .zip(writes)
            .zip(answers)
            .map(|((written, (lease, write)), answer)| match written {
                Answer::Written => Ok(answer),
                // Judged from the item found: this very write made
                // before (sent again), or the lock lost.
                Answer::Refused(_, found) => write.refused(lease, found_item(&found)?.as_deref()),
            })
            .collect(),
    }
}

/// The outboxes of completions whose messages were sent, cleared in ONE
/// script ([`CLEAR_OUTBOX`]).
pub(super) async fn outbox_sent(store: &RedisStore, sent: &[Pending]) -> Result<(), StoreError> {
    if sent.is_empty() {
        return Ok(());
    }
    let mut invocation = store.scripts.clear_outbox.prepare_invoke();
    for pending in sent {
        invocation.key(store.item_key(&pending.pk));
        invocation.arg(&pending.owner);
    }
    invocation.key(store.unsent_set());
    store
        .run_many("clear outbox", &invocation, |_| Vec::new())
        .await
        .map(|_| ())
}

/// Complete, together with the work's own writes and increments in the
/// same script: either all happen or none. Returns the item's new
/// `expires_at` (epoch seconds).
pub(super) async fn complete(
    store: &RedisStore,
    lease: &Lease,
    result: Option<&str>,
    effects: Effects<RedisEffect>,
) -> Result<u64, StoreError> {
    let increments = transaction_effects([&effects], super::MAX_EFFECTS)?;
    let result = result.map(str::to_owned);
    let change = Change::of_effects(&effects, &increments);
    let writes = effects.writes.len();
    let complete = FencedWrite::Complete { result };
    let outbox = effects.outbox.as_deref();
    store
        .fenced("complete", lease, (&complete, outbox), change)
        .await
        .map_err(|refusal| refusal.into_error(writes))
}

/// Fail permanently: redeliveries are refused.
pub(super) async fn fail(store: &RedisStore, lease: &Lease, error: &str) -> Result<(), StoreError> {
    let error = error.to_owned();
    store
        .fenced(
            "fail",
            lease,
            (&FencedWrite::Fail { error }, None),
            Change::of([], &[]),
        )
        .await
        .map(|_| ())
        .map_err(|refusal| refusal.into_error(0))
}

/// Release after a retryable error: the lock ends now, so the next claim
/// takes the key over at once (as an extension to 0).
pub(super) async fn release(store: &RedisStore, lease: &Lease) -> Result<(), StoreError> {
    extend(store, lease, 0).await.map(|_| ())
}

/// Extend (heartbeat) the lease to `until_ms`; 0 releases it (the next
/// claim takes the key over at once).
pub(super) async fn extend(
    store: &RedisStore,
    lease: &Lease,
    until_ms: u64,
) -> Result<Lease, StoreError> {
    let (operation, write) = match until_ms {
        0 => ("release", FencedWrite::Release),
        _ => ("extend", FencedWrite::Extend { until_ms }),
    };
    store
        .fenced(operation, lease, (&write, None), Change::of([], &[]))
        .await
        .map_err(|refusal| refusal.into_error(0))?;
    Ok(lease.until(until_ms))
}

impl RedisStore {
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

    /// What a fenced write sets and deletes on the item, where it moves
    /// its deletion, and what it answers.
    fn transition(&self, write: &FencedWrite, now: u64) -> Transition {
        let expires_at_s = self.config.expires_at_s(now);
        let finished = |status: Status, extra: Option<(&'static str, String)>| Transition {
            set: [
                (attr::STATUS, status.as_str().to_owned()),
                (attr::EXPIRES_AT, expires_at_s.to_string()),
                (attr::UPDATED_AT, now.to_string()),
            ]
            .into_iter()
            .chain(extra)
            .collect(),
            delete: &[attr::LOCK_EXPIRES_AT],
            expires_at_s: Some(expires_at_s),
            answer: write.answer(expires_at_s),
        };
        let lease_until = |until_ms: u64| Transition {
            set: vec![
                (attr::LOCK_EXPIRES_AT, until_ms.to_string()),
                (attr::UPDATED_AT, now.to_string()),
            ],
            delete: &[],
            expires_at_s: None,
            answer: write.answer(expires_at_s),
        };
        match write {
            FencedWrite::Complete { result } => finished(
                Status::Completed,
                result.as_ref().map(|result| (attr::RESULT, result.clone())),
            ),
            FencedWrite::Fail { error } => finished(
                Status::Failed,
                Some((attr::ERROR, bounded(error).to_owned())),
            ),
            FencedWrite::Release => lease_until(0),
            FencedWrite::Extend { until_ms } => lease_until(*until_ms),
        }
    }

    /// A held key's fields once completed with `result` and `outbox` (the
    /// group commit's, `lock_free.rs`).
    pub(super) fn completion_fields(
        &self,
        result: Option<String>,
        outbox: Option<&str>,
        now: u64,
    ) -> Vec<String> {
        let mut transition = self.transition(&FencedWrite::Complete { result }, now);
        transition.emitting(outbox);
        transition
            .set
            .into_iter()
            .flat_map(|(name, value)| [name.to_owned(), value])
            .collect()
    }

    /// Runs [`FENCED`]: `write` on the lease's item, with `change`'s
    /// effects; what it answers (see [`Store::write_fenced`]). A fence that
    /// refuses is judged from the item found ([`FencedWrite::refused`]):
    /// this very write made before (sent again, effects and all), or the
    /// lock lost.
    /// `outbox`: the messages a completion's record emitted, kept on it.
    async fn fenced(
        &self,
        operation: &'static str,
        lease: &Lease,
        (write, outbox): (&FencedWrite, Option<&str>),
        change: Change,
    ) -> Result<u64, Refusal> {
        let mut transition = self.transition(write, self.now_ms());
        transition.emitting(outbox);
        let lua = transition.change(&change);
        let mut invocation = self.scripts.fenced.key(self.item_key(&lease.pk));
        invocation
            .key(self.started_set())
            .key(self.unsent_set())
            .key(change.keys)
            .arg(lease.version)
            .arg(&lease.owner)
            .arg(transition.deleted_at())
            .arg(lua.to_string());
        match self
            .run(operation, &invocation)
            .await
            .map_err(Refusal::Store)?
        {
            Answer::Written => Ok(transition.answer),
            Answer::Refused(tag, values) => Err(match tag.as_str() {
                "effect" => {
                    Refusal::Effect(index(&values), values.get(1).map(text).unwrap_or_default())
                }
                "increment" => Refusal::Increment(index(&values)),
                _ => {
                    let found = found_item(&values).map_err(Refusal::Store)?;
                    return write
                        .refused(lease, found.as_deref())
                        .map_err(Refusal::Store);
                }
            }),
        }
    }
}

/// What a fenced write does to its item.
struct Transition {
    set: Vec<(&'static str, String)>,
    delete: &'static [&'static str],
    /// Where the item's deletion moves (just after), if it does.
    expires_at_s: Option<u64>,
    /// What [`Store::write_fenced`] answers for it.
    answer: u64,
}

impl Transition {
    /// Also keeps `outbox` (the messages a completion's record emitted).
    fn emitting(&mut self, outbox: Option<&str>) {
        if let Some(outbox) = outbox {
            self.set.push((attr::OUTBOX, outbox.to_owned()));
        }
    }

    /// The new deletion time ('' keeps it).
    fn deleted_at(&self) -> String {
        self.expires_at_s
            .map_or(String::new(), |at| deleted_at_ms(at).to_string())
    }

    /// The script's change: fields to set and delete, and `effects`.
    fn change(&self, effects: &Change) -> serde_json::Value {
        let set: Vec<&str> = self
            .set
            .iter()
            .flat_map(|(name, value)| [*name, value.as_str()])
            .collect();
        json!({
            "set": set,
            "del": self.delete,
            "writes": effects.writes,
            "increments": effects.increments,
        })
    }
}

/// The items' answers in a batched script's answer.
fn elements(value: redis::Value) -> Vec<redis::Value> {
    match value {
        redis::Value::Array(values) => values,
        other => vec![other],
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
