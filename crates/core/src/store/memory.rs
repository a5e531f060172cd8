//! The in-memory backend: the same state machine over a map behind one
//! mutex, each transition checked and applied under the lock (so each is
//! atomic, as one conditional write is in the other backends). It passes
//! the conformance suite, which is what makes it fit for fast engine tests
//! and for trying the library without a database. Not durable, one process:
//! never for production.
//!
//! Its effects are increments of named counters ([`CounterEffect`]), with a
//! floor checked in the same step as the completion: enough to model a
//! ledger's balances. [`Increment`]s are kept per item and attribute
//! ([`MemoryStore::number`]), merged per item as every backend merges them. Its clock is tokio's, so tests with paused time see
//! leases end without waiting.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::transition::{self, fence_holds, may_create, may_take_over, operator_may};
use super::{
    ClaimRequest, Commit, CommitOutcome, Conditional, Effects, FencedWrite, Increment, Lease,
    Listed, Listing, NewItem, Operator, Status, Store, StoreError, StoredItem, increment,
    transaction_effects,
};
use crate::config::StoreConfig;

/// An effect on the in-memory store: add `add` to the counter `counter`,
/// refused (nothing of the transaction happens) if the result would be
/// below `floor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterEffect {
    /// The counter's name (e.g. an account id).
    pub counter: String,
    /// What to add (negative: subtract).
    pub add: i64,
    /// The lowest value the counter may reach; `None`: unbounded.
    pub floor: Option<i64>,
}

/// The items and counters, shared by every clone.
#[derive(Debug, Default)]
struct State {
    items: HashMap<String, StoredItem>,
    counters: HashMap<String, i64>,
    /// Incremented numbers: item ([`Increment::item`]) → attribute → value.
    numbers: HashMap<String, HashMap<String, i128>>,
}

/// The in-memory store. Clones share the same items; [`Self::with_config`]
/// gives another view of them (e.g. another clock offset).
#[derive(Debug, Clone)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    config: StoreConfig,
    /// The epoch ms at `started`, so that the clock follows tokio's.
    epoch_ms: u64,
    started: tokio::time::Instant,
}

impl MemoryStore {
    /// An empty store as `config` says.
    pub fn new(config: StoreConfig) -> Self {
        Self {
            state: Arc::default(),
            config,
            epoch_ms: crate::clock::now_ms(),
            started: tokio::time::Instant::now(),
        }
    }

    /// The same items, seen under `config` (prefix, lock, clock offset).
    pub fn with_config(&self, config: StoreConfig) -> Self {
        Self {
            config,
            ..self.clone()
        }
    }

    /// The number `attribute` of the incremented `item` (named as
    /// [`Increment::item`] names it; 0 if never incremented).
    pub fn number(&self, item: &str, attribute: &str) -> i128 {
        let state = self.lock();
        let numbers = state.numbers.get(item);
        numbers.and_then(|n| n.get(attribute)).copied().unwrap_or(0)
    }

    /// The value of `counter` (0 if never written).
    pub fn counter(&self, counter: &str) -> i64 {
        self.lock().counters.get(counter).copied().unwrap_or(0)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The live item of `pk` (one past its TTL counts as absent).
    fn live<'a>(&self, state: &'a State, pk: &str) -> Option<&'a StoredItem> {
        let now = self.now_ms();
        state.items.get(pk).filter(|item| !item.is_expired(now))
    }

    /// The lease holder's STARTED item, for a fenced write
    /// ([`fence_holds`]).
    fn fenced<'a>(state: &'a mut State, lease: &Lease) -> Result<&'a mut StoredItem, StoreError> {
        match state.items.get_mut(&lease.pk) {
            Some(item) if fence_holds(Some(item), lease) => Ok(item),
            _ => Err(StoreError::LockLost {
                key: lease.pk.clone(),
                version: lease.version,
            }),
        }
    }

    /// `counters` with `effects` applied, if every floor holds; else which
    /// effect is refused and why.
    /// `increments` (merged) applied to `numbers`; else the index of the
    /// one refused.
    fn incremented(
        mut numbers: HashMap<String, HashMap<String, i128>>,
        increments: &[Increment],
    ) -> Result<HashMap<String, HashMap<String, i128>>, usize> {
        for (index, increment) in increments.iter().enumerate() {
            let values = numbers.entry(increment.item()).or_default();
            // Invariant: no number falls below its floor.
            if !increment.apply(values) {
                return Err(index);
            }
        }
        Ok(numbers)
    }

    fn applied(
        mut counters: HashMap<String, i64>,
        effects: &[CounterEffect],
    ) -> Result<HashMap<String, i64>, (usize, String)> {
        for (index, effect) in effects.iter().enumerate() {
            let value = counters.entry(effect.counter.clone()).or_insert(0);
            *value = value.saturating_add(effect.add);
            if effect.floor.is_some_and(|floor| *value < floor) {
                return Err((
                    index,
                    format!("{} would fall below its floor", effect.counter),
                ));
            }
        }
        Ok(counters)
    }

    /// An operator's write: `change` applies only to the item in `expected`
    /// status at `version`; else [`StoreError::NotInState`].
    fn operator_write(
        &self,
        key: &str,
        version: u64,
        expected: Status,
        change: impl FnOnce(&mut StoredItem),
    ) -> Result<(), StoreError> {
        let pk = self.pk(key)?;
        let now = self.now_ms();
        let mut state = self.lock();
        let found = match state.items.get_mut(&pk) {
            Some(item) if operator_may(item, expected, version) => {
                change(item);
                item.lock_expires_at_ms = Some(0);
                item.updated_at_ms = Some(now);
                return Ok(());
            }
            Some(item) => {
                let ttl = match item.is_expired(now) {
                    true => ", past its TTL: counts as absent",
                    false => "",
                };
                format!("{} at version {}{ttl}", item.status.as_str(), item.version)
            }
            None => "absent".to_owned(),
        };
        Err(StoreError::NotInState {
            key: pk,
            expected: expected.as_str(),
            version,
            found,
        })
    }
}

impl Store for MemoryStore {
    type Effect = CounterEffect;
    const NAME: &'static str = "the in-memory store";
    const MAX_EFFECTS: usize = 99;
    const MAX_KEY_BYTES: usize = 2048;
    const MAX_BATCH: usize = 25;

    fn config(&self) -> &StoreConfig {
        &self.config
    }

    fn now_ms(&self) -> u64 {
        let elapsed = self.started.elapsed().as_millis() as u64;
        (self.epoch_ms + elapsed).saturating_add_signed(self.config.clock_offset_ms)
    }

    fn touched(effect: &CounterEffect) -> Option<String> {
        Some(effect.counter.clone())
    }

    async fn create_started(
        &self,
        pk: &str,
        request: ClaimRequest<'_>,
    ) -> Result<Conditional<Lease>, StoreError> {
        let now = self.now_ms();
        let mut state = self.lock();
        let found = state.items.get(pk);
        if !may_create(found, now) {
            return Ok(Conditional::Conflict(found.cloned().map(Box::new)));
        }
        let lease = Lease::claimed(pk.to_owned(), 1, &self.config, now, &request);
        let item = NewItem::started(&lease, request, &self.config, now).item();
        state.items.insert(pk.to_owned(), item);
        Ok(Conditional::Written(lease))
    }

    async fn take_over(
        &self,
        observed: &StoredItem,
        request: ClaimRequest<'_>,
    ) -> Result<Conditional<Lease>, StoreError> {
        let now = self.now_ms();
        let mut state = self.lock();
        let Some(item) = state.items.get_mut(&observed.pk) else {
            return Ok(Conditional::Conflict(None));
        };
        if !may_take_over(item, observed.version, &self.config, now) {
            return Ok(Conditional::Conflict(Some(Box::new(item.clone()))));
        }
        let lease = Lease::taking_over(observed, &self.config, now, &request);
        transition::take_over(item, &lease, &self.config, now);
        Ok(Conditional::Written(lease))
    }

    async fn complete(
        &self,
        lease: &Lease,
        result: Option<&str>,
        effects: Effects<CounterEffect>,
    ) -> Result<u64, StoreError> {
        let increments = transaction_effects([&effects], Self::MAX_EFFECTS)?;
        let now = self.now_ms();
        let mut state = self.lock();
        // The fence first: a worker taken over changes nothing, effects
        // included (nor does this completion sent again once made); a
        // refused effect changes nothing either.
        if Self::fenced(&mut state, lease).is_err() {
            return FencedWrite::Complete { result: None }
                .refused(lease, state.items.get(&lease.pk));
        }
        let counters = Self::applied(state.counters.clone(), &effects.writes)
            .map_err(|(effect, message)| StoreError::EffectConditionFailed { effect, message })?;
        let numbers = Self::incremented(state.numbers.clone(), &increments).map_err(|index| {
            StoreError::EffectConditionFailed {
                effect: effects.writes.len() + index,
                message: increment::BELOW_FLOOR.into(),
            }
        })?;
        (state.counters, state.numbers) = (counters, numbers);
        let item = Self::fenced(&mut state, lease)?;
        let result = result.map(str::to_owned);
        let outbox = effects.outbox;
        Ok(transition::complete(
            item,
            result,
            outbox,
            &self.config,
            now,
        ))
    }

    async fn fail(&self, lease: &Lease, error: &str) -> Result<(), StoreError> {
        let now = self.now_ms();
        let mut state = self.lock();
        let Ok(item) = Self::fenced(&mut state, lease) else {
            let found = state.items.get(&lease.pk);
            let write = FencedWrite::Fail {
                error: String::new(),
            };
            return write.refused(lease, found).map(|_| ());
        };
        transition::fail(item, error, &self.config, now);
        Ok(())
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.extend(lease, 0).await.map(|_| ())
    }

    async fn extend(&self, lease: &Lease, until_ms: u64) -> Result<Lease, StoreError> {
        let now = self.now_ms();
        let mut state = self.lock();
        let item = Self::fenced(&mut state, lease)?;
        transition::extend(item, until_ms, now);
        Ok(lease.until(until_ms))
    }

    async fn commit(
        &self,
        commits: Vec<Commit<CounterEffect>>,
    ) -> Result<CommitOutcome, StoreError> {
        let room = (Self::MAX_EFFECTS + 1).saturating_sub(commits.len());
        let increments = transaction_effects(commits.iter().map(|c| &c.effects), room)?;
        let mut pks = Vec::with_capacity(commits.len());
        for commit in &commits {
            pks.push(self.pk(&commit.key)?);
        }
        let now = self.now_ms();
        let mut state = self.lock();
        let mut counters = state.counters.clone();
        for (index, (commit, pk)) in commits.iter().zip(&pks).enumerate() {
            let found = state.items.get(pk);
            let taken = match &commit.held {
                Some(lease) => !fence_holds(found, lease),
                // The effect happens only together with the key's first
                // COMPLETED item.
                None => !may_create(found, now),
            };
            if taken {
                let item = state.items.get(pk).cloned().map(Box::new);
                return Ok(CommitOutcome::KeyTaken { index, item });
            }
            counters = match Self::applied(counters, &commit.effects.writes) {
                Ok(counters) => counters,
                Err((effect, message)) => {
                    return Ok(CommitOutcome::EffectRefused {
                        index,
                        effect,
                        message,
                    });
                }
            };
        }
        // Invariant: the increments, merged, keep every floor.
        let numbers = match Self::incremented(state.numbers.clone(), &increments) {
            Ok(numbers) => numbers,
            Err(index) => {
                let item = increments[index].item();
                let current = state.numbers.get(&item).cloned().unwrap_or_default();
                return Ok(CommitOutcome::IncrementRefused {
                    item,
                    current: Some(current),
                });
            }
        };
        (state.counters, state.numbers) = (counters, numbers);
        let expires_at_s = self.config.expires_at_s(now);
        for (commit, pk) in commits.iter().zip(pks) {
            match &commit.held {
                Some(lease) => {
                    let item = Self::fenced(&mut state, lease)?;
                    let (result, outbox) = (commit.result.clone(), commit.effects.outbox.clone());
                    transition::complete(item, result, outbox, &self.config, now);
                }
                None => {
                    let item = NewItem::completed(&pk, commit, &self.config, now).item();
                    state.items.insert(pk, item);
                }
            }
        }
        Ok(CommitOutcome::Committed {
            expires_at_s,
            contended: 0,
        })
    }

    async fn fail_new(
        &self,
        request: ClaimRequest<'_>,
        owner: &str,
        error: &str,
    ) -> Result<Conditional<()>, StoreError> {
        let pk = self.pk(request.key)?;
        let now = self.now_ms();
        let mut state = self.lock();
        let found = state.items.get(&pk);
        if !may_create(found, now) {
            return Ok(Conditional::Conflict(found.cloned().map(Box::new)));
        }
        let item = NewItem::failed(&pk, request, owner, error, &self.config, now).item();
        state.items.insert(pk, item);
        Ok(Conditional::Written(()))
    }

    async fn outbox_sent(&self, sent: &[super::outbox::Pending]) -> Result<(), StoreError> {
        let mut state = self.lock();
        for pending in sent {
            if let Some(item) = state.items.get_mut(&pending.pk)
                && transition::may_clear_outbox(Some(item), &pending.owner)
            {
                item.outbox = None;
            }
        }
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<Option<StoredItem>, StoreError> {
        let pk = self.pk(key)?;
        Ok(self.live(&self.lock(), &pk).cloned())
    }

    async fn batch_get(&self, keys: &[&str]) -> Result<HashMap<String, StoredItem>, StoreError> {
        let state = self.lock();
        Ok(keys
            .iter()
            .filter_map(|key| {
                let pk = self.pk(key).ok()?;
                Some(((*key).to_owned(), self.live(&state, &pk)?.clone()))
            })
            .collect())
    }
}

/// The operator's transitions and listings (`exactly-once-ops`).
impl Operator for MemoryStore {
    async fn release_version(&self, key: &str, version: u64) -> Result<(), StoreError> {
        self.operator_write(key, version, Status::Started, |_| ())
    }

    async fn retry_failed(&self, key: &str, version: u64) -> Result<(), StoreError> {
        self.operator_write(key, version, Status::Failed, |item| {
            item.status = Status::Started;
            item.last_error = Some(
                item.error
                    .take()
                    .unwrap_or_else(|| "(no error text)".to_owned()),
            );
        })
    }

    async fn list(&self, listing: Listing) -> Result<Listed, StoreError> {
        let now = self.now_ms();
        let state = self.lock();
        let items = state
            .items
            .values()
            .filter(|item| item.pk.starts_with(&self.config.key_prefix))
            .filter(|item| !item.is_expired(now) && listing.matches(item, now))
            .cloned()
            .collect();
        Ok(Listed {
            items,
            cost: super::ListingCost {
                requests: 1,
                read: state.items.len() as u64,
                capacity_units: 0.0,
            },
        })
    }
}
