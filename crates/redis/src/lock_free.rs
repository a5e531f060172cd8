//! The lock-free path on Redis: each message's COMPLETED item at version 1
//! and the work's effects in ONE script, which writes only if every key is
//! new. (A poison record's FAILED item is created as a claim's is, by the
//! `CREATE` script: `Store::fail_new`, in `lib.rs`.)

use std::collections::HashMap;

use serde_json::json;

use super::codec::{deleted_at_ms, new_fields};
use super::effect::Change;
use super::locking::index;
use super::lua::{effects_lua, holds_lua, live_lua, unsent_lua};
use super::{Answer, RedisEffect, RedisStore, fields, found_item, text};
use exactly_once_core::clock::ms_to_s;
use exactly_once_core::store::{
    Commit, CommitOutcome, Increment, NewItem, Store, StoreError, increment, transaction_effects,
};

/// Commit: `KEYS[1..n]` the items, then the effects' keys, then the set of
/// STARTED items and the set of unsent items; `ARGV[1]` now (s), `ARGV[2]` when Redis deletes the items
/// (ms), `ARGV[3]` JSON: each item's fields and fence (a held key's version
/// and owner; none for a new key), and the effects. Answers 1,
/// `{'taken', i, item}`, or the effect refused.
pub(super) const COMMIT: &str = concat!(
    live_lua!(),
    holds_lua!(),
    effects_lua!(),
    unsent_lua!(),
    r#"
local commit = cjson.decode(ARGV[3])
local n = #commit.items
local started, unsent = KEYS[#KEYS - 1], KEYS[#KEYS]
for i = 1, n do
  local fence = commit.fences[i]
  if #fence > 0 then
    -- Invariant: a held key is completed only under its lease (see holds).
    if not holds(KEYS[i], fence[1], fence[2]) then
      return {'taken', i - 1, redis.call('HGETALL', KEYS[i])}
    end
  -- Invariant: one live item per key; the effects happen only together
  -- with every new key's first (COMPLETED) item.
  elseif live(KEYS[i], tonumber(ARGV[1])) then
    return {'taken', i - 1, redis.call('HGETALL', KEYS[i])}
  end
end
local refusal = refused(commit, n)
if refusal then return refusal end
apply(commit, n)
for i, item in ipairs(commit.items) do
  if #commit.fences[i] > 0 then
    redis.call('HSET', KEYS[i], unpack(item))
    redis.call('HDEL', KEYS[i], 'lock_expires_at')
    -- Completed: no longer in the set of STARTED items.
    redis.call('ZREM', started, KEYS[i])
  else
    redis.call('DEL', KEYS[i])
    redis.call('HSET', KEYS[i], unpack(item))
  end
  redis.call('PEXPIREAT', KEYS[i], ARGV[2])
  index_unsent(KEYS[i], unsent)
end
return 1
"#
);

/// Commit of `commits`, new keys and held ones (see
/// [`exactly_once_core::store::Store::commit`]).
pub(super) async fn commit(
    store: &RedisStore,
    commits: Vec<Commit<RedisEffect>>,
) -> Result<CommitOutcome, StoreError> {
    let room = (super::MAX_EFFECTS + 1).saturating_sub(commits.len());
    let increments = transaction_effects(commits.iter().map(|c| &c.effects), room)?;
    let now = store.now_ms();
    let expires_at_s = store.config.expires_at_s(now);
    let mut keys = Vec::with_capacity(commits.len());
    let mut items = Vec::with_capacity(commits.len());
    let mut fences = Vec::with_capacity(commits.len());
    // Which message and which of its effects each write is.
    let mut positions = Vec::new();
    for (index, commit) in commits.iter().enumerate() {
        let pk = store.pk(&commit.key)?;
        match &commit.held {
            Some(lease) => {
                let outbox = commit.effects.outbox.as_deref();
                items.push(store.completion_fields(commit.result.clone(), outbox, now));
                fences.push(vec![lease.version.to_string(), lease.owner.clone()]);
            }
            None => {
                items.push(new_fields(&NewItem::completed(
                    &pk,
                    commit,
                    &store.config,
                    now,
                )));
                fences.push(Vec::new());
            }
        }
        keys.push(store.item_key(&pk));
        positions.extend((0..commit.effects.writes.len()).map(|effect| (index, effect)));
    }
    let change = Change::of(commits.iter().flat_map(|c| &c.effects.writes), &increments);
    let answer = store
        .commit_script(now, expires_at_s, keys, (items, fences), change)
        .await?;
    Ok(match answer {
        Answer::Written => CommitOutcome::Committed {
            expires_at_s,
            contended: 0,
        },
        Answer::Refused(tag, values) => match tag.as_str() {
            "taken" => CommitOutcome::KeyTaken {
                index: index(&values),
                item: found_item(values.get(1..).unwrap_or_default())?,
            },
            "effect" => {
                let (index, effect) = positions.get(index(&values)).copied().unwrap_or_default();
                CommitOutcome::EffectRefused {
                    index,
                    effect,
                    message: values.get(1).map(text).unwrap_or_default(),
                }
            }
            _ => {
                let refused = increments.get(index(&values));
                CommitOutcome::IncrementRefused {
                    item: refused.map(Increment::item).unwrap_or_default(),
                    current: Some(numbers(fields(values.get(2)))),
                }
            }
        },
    })
}

impl RedisStore {
    /// Runs [`COMMIT`]: `items`, each item's fields and fence.
    async fn commit_script(
        &self,
        now_ms: u64,
        expires_at_s: u64,
        keys: Vec<String>,
        (items, fences): (Vec<Vec<String>>, Vec<Vec<String>>),
        change: Change,
    ) -> Result<Answer, StoreError> {
        let lua = json!({
            "items": items,
            "fences": fences,
            "writes": change.writes,
            "increments": change.increments,
        });
        let mut invocation = self.scripts.commit.key(keys);
        invocation
            .key(change.keys)
            .key(self.started_set())
            .key(self.unsent_set())
            .arg(ms_to_s(now_ms))
            .arg(deleted_at_ms(expires_at_s))
            .arg(lua.to_string());
        self.run("commit", &invocation).await
    }

    /// `increment` on its own: [`COMMIT`] with no item.
    pub(super) async fn apply_increment(&self, increment: &Increment) -> Result<(), StoreError> {
        let now = self.now_ms();
        let increments = [increment.clone()];
        let change = Change::of([], &increments);
        match self
            .commit_script(now, 0, Vec::new(), (Vec::new(), Vec::new()), change)
            .await?
        {
            Answer::Written => Ok(()),
            Answer::Refused(..) => Err(StoreError::EffectConditionFailed {
                effect: 0,
                message: increment::BELOW_FLOOR.into(),
            }),
        }
    }
}

/// The numbers of an incremented hash (fields that are not numbers left
/// out).
fn numbers(fields: HashMap<String, String>) -> HashMap<String, i128> {
    fields
        .into_iter()
        .filter_map(|(name, value)| Some((name, value.parse().ok()?)))
        .collect()
}
