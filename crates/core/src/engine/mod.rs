//! Runs a batch of messages exactly once per idempotency key: claim, run the
//! business logic, record the outcome. Knows nothing of Kafka or Lambda.
//!
//! A batch is a list of lanes (a Kafka partition, or one Kafka key of it, at
//! the edge). Lanes run concurrently; inside a lane messages finish in order,
//! and after a message that did not finish the rest of its lane is not
//! started. The handler chooses the path ([`CommitPath`]):
//! - locking (`lane.rs`, `record.rs`; a message on its own: `alone.rs`):
//!   the business logic runs one message after another while the claims of
//!   the next messages are already made ("claim ahead"), many in one
//!   request (`batched.rs`); completions go together too: direct ones in
//!   batches of fenced writes, ones with an effect in the store in group
//!   transactions; one heartbeat renews every lease of the batch
//!   (`lease.rs`); claims made ahead of a message that did not finish are
//!   released at once;
//! - lock-free (`lock_free/`): the handler's writes commit with the
//!   COMPLETED item in one transaction, consecutive messages together, and
//!   the groups of lanes ready at once together (`combine.rs`), the
//!   increments of one item merged into one update.
//!
//! What the store answered about a key (a claim's answer, or the item a
//! lock-free write found in its way) is judged in one place for both paths
//! (`judge.rs`): a lease, an outcome, or a wait for another worker's lease.
//!
//! On both paths, two commits touching a common item are never in flight at
//! the same time (`footprint.rs`): the function never conflicts with
//! itself.

mod ahead;
mod alone;
mod batched;
mod cache;
mod coalesce;
mod combine;
mod commit;
mod deadline;
pub(crate) mod deliver;
mod footprint;
mod gather;
mod handler;
mod judge;
mod lane;
mod lease;
mod lock_free;
mod log;
mod outcome;
mod pacing;
mod precheck;
mod record;
mod resend;
pub(crate) mod send;
mod sizing;
mod window;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::task::JoinSet;
use tracing::Instrument as _;

pub use cache::{Completed, Entry as CachedEntry, SharedCache};
pub use deadline::{Deadline, LEASE_GRACE, StopReason};
pub use deliver::{Swept, send_unsent};
pub use handler::{
    CommitPath, Completion, ConditionFailure, FencingToken, HandlerError, RecordHandler,
};
pub use lane::{COMPLETION_LINGER, gives_back_while_waiting};
pub use outcome::{Outcome, Parking, PoisonPolicy};
pub use sizing::{Resized, slow_answer};
pub use window::WINDOW_GROUPS;
// The store's (the default of `Store::START_SIZE`), named here too for
// those who size the engine.
pub use crate::store::GROUP_START;

use crate::store::{Store, StoreError, requests};
use batched::Batched;
use cache::CompletedCache;
use coalesce::{InFlight, Running};
use combine::Combiner;
use deadline::BatchGuard;
use footprint::ItemLocks;
use lease::Leases;
use pacing::Pacing;
use send::Sender;

/// One message ready to run.
#[derive(Debug, Clone)]
pub struct Work<R> {
    /// The idempotency key (without the table's prefix).
    pub key: String,
    /// The message's fingerprint (hex SHA-256), stored as `payload_hash`: a
    /// key seen again with another fingerprint is rejected.
    pub payload_hash: String,
    /// Where it came from, kept on the item for operators and named in the
    /// engine's log lines (never the key or the payload).
    pub origin: String,
    /// The message itself, handed to the handler as it is.
    pub record: R,
    /// The span the handler runs in (the edge's, with where the message
    /// came from; `Span::none()` without tracing).
    pub span: tracing::Span,
    /// Who runs it (on Lambda the invocation: `<request id>/<function
    /// version>/<log stream>`): the start of every owner token written for
    /// it, so that an item leads to its invocation's logs.
    pub holder: Option<Arc<str>>,
}

impl<R> Work<R> {
    /// A new owner token for an attempt at this message (a claim, a
    /// lock-free commit or failure), after its holder.
    pub(super) fn new_owner(&self) -> String {
        crate::store::new_owner(self.holder.as_deref())
    }
}

/// A message of a batch: ready to run, or unreadable (with the reason).
pub type Message<R> = Result<Work<R>, String>;

/// How much the engine does at once, and what it remembers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// At most this many claims and pieces of work at once across a batch:
    /// the bound on in-flight DynamoDB requests. Default 64.
    pub max_in_flight: usize,
    /// Messages of a lane claimed ahead of the one whose work runs (half of
    /// them at a time, in batches). Default 50: two of DynamoDB's batches.
    pub claim_ahead: usize,
    /// Keys of the warm container's cache of COMPLETED keys; 0 disables it.
    /// Default 10,000.
    pub completed_cache: usize,
    /// On the lock-free path, at most this many messages share one
    /// transaction (consecutive ones of a lane, or the groups of lanes ready
    /// at once; 1: each alone; at most 99): the cap of the sizing, which
    /// learns the size from the store's answers (see `sizing.rs`). Default
    /// 99: the store's most.
    pub max_records_per_transaction: usize,
    /// Whether a message stored FAILED stops its lane. Default: park.
    pub poison: PoisonPolicy,
    /// Under park, refused messages (unreadable, keyless, key reused) are
    /// parked too: only for an edge that forwards them whole to a
    /// dead-letter queue (it reports the ones it cannot send). Default: no.
    pub park_refused: bool,
}

impl EngineConfig {
    /// Which messages that can never succeed are parked.
    pub fn parking(&self) -> Parking {
        Parking {
            poison: self.poison,
            refused: self.park_refused,
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 64,
            claim_ahead: 50,
            completed_cache: 10_000,
            max_records_per_transaction: 99,
            poison: PoisonPolicy::Park,
            park_refused: false,
        }
    }
}

/// How one message of a batch ended, and how long its turn took.
#[derive(Debug)]
pub struct RecordOutcome {
    /// How it ended.
    pub outcome: Outcome,
    /// How long its turn took.
    pub elapsed: std::time::Duration,
}

/// The outcomes of a batch: each message's, under the tag the caller gave
/// it.
#[derive(Debug)]
pub struct BatchResult<T> {
    /// One outcome per message, with its tag (lane by lane).
    pub outcomes: Vec<(T, RecordOutcome)>,
    /// The store failed during the batch, so records were not started.
    pub store_unavailable: bool,
}

/// A message of a batch under the caller's tag (e.g. the record's
/// coordinates), which its outcome carries back.
pub type Tagged<T, R> = (T, Message<R>);

/// State shared by the lanes of one batch.
struct Batch<S: Store> {
    in_flight: InFlight,
    /// Groups of several lanes in one transaction. One per batch, so that
    /// `in_flight` keeps its idempotency keys distinct.
    combiner: Combiner<S>,
    /// Locking path: the lanes' claims and fenced writes, batched.
    batched: Batched,
    /// Every lease the batch holds, renewed by one heartbeat.
    leases: Arc<Leases>,
    heartbeat: tokio::task::AbortHandle,
    guard: BatchGuard,
    parking: Parking,
    /// Keys known COMPLETED before the batch started.
    completed: HashMap<String, Completed>,
}

impl<S: Store> Drop for Batch<S> {
    /// Nothing of a batch outlives it: an invocation dropped midway (Lambda
    /// freezing or ending the container) must not write on its own later.
    fn drop(&mut self) {
        self.combiner.stop();
        self.batched.stop();
        self.heartbeat.abort();
    }
}

/// The idempotency engine: a store, the business logic, and a cache.
/// Generic over the backend ([`Store`]); the handler's effects are the
/// store's ([`RecordHandler`] for `S::Effect`).
pub struct Engine<H, S> {
    store: S,
    handler: H,
    config: EngineConfig,
    cache: CompletedCache,
    /// How fast it sends: the bound on requests in flight, and for
    /// transaction groups and batched requests how many records one holds
    /// and how many are in flight at once, learned from the store's answers.
    pacing: Arc<Pacing>,
    /// The items of the commits in flight, across batches.
    items: Arc<ItemLocks>,
    /// The first copies of keys running, across batches (the invocations
    /// a container serves at once).
    running: Arc<Running>,
    /// Sends the messages handlers emit ([`Completion::emit`]).
    sender: Option<Arc<dyn Sender>>,
}

impl<H, S> Engine<H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
{
    /// An engine running `handler` over `store`.
    pub fn new(store: S, handler: H, config: EngineConfig) -> Self {
        Self {
            cache: CompletedCache::new(config.completed_cache),
            pacing: Arc::new(Pacing::new::<S>(&config, store.request_timeout())),
            items: Arc::default(),
            running: Arc::default(),
            store,
            handler,
            config,
            sender: None,
        }
    }

    /// Sends the messages handlers emit with `sender` (on Lambda the edge's,
    /// to SQS). Without one, a completion that emits is refused (retryable:
    /// its record is reported).
    pub fn with_sender(mut self, sender: Arc<dyn Sender>) -> Self {
        self.sender = Some(sender);
        self
    }

    /// The sweeper of messages left unsent: those of this function's keys
    /// COMPLETED more than `older_than` ago (their record never came back)
    /// sent now, under the same ids (see [`Swept`]).
    pub async fn send_unsent(&self, older_than: std::time::Duration) -> Result<Swept, StoreError>
    where
        S: crate::store::Operator,
    {
        deliver::send_unsent(&self.store, self.sender(), older_than).await
    }

    /// The sender of emitted messages, if any.
    pub(super) fn sender(&self) -> Option<&dyn Sender> {
        self.sender.as_deref()
    }

    /// Backs the container's cache of COMPLETED keys with a cache every
    /// container shares (`DUPLICATE_CACHE=redis`).
    pub fn with_shared_cache(mut self, shared: Arc<dyn SharedCache>) -> Self {
        self.cache = self.cache.with_shared(shared);
        self
    }

    /// The idempotency store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The business logic.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// How many records a transaction group may hold now (the sizing
    /// learns it from the store's answers, within
    /// [`EngineConfig::max_records_per_transaction`]).
    pub fn group_size(&self) -> usize {
        self.pacing.groups.sizer.limit()
    }

    /// Every change of [`Self::group_size`] so far, the first being where it
    /// started: what the benchmark charts.
    pub fn group_sizes(&self) -> Vec<Resized> {
        self.pacing.groups.sizer.history()
    }

    /// How many claims (or fenced writes) one batched request may hold now,
    /// within the store's batch ([`Store::MAX_BATCH`]).
    pub fn claim_batch_size(&self) -> usize {
        self.pacing.batches.sizer.limit().min(S::MAX_BATCH)
    }

    /// How many records transaction groups in flight may hold at once now
    /// (learned from the store's answers as [`Self::group_size`] is).
    pub fn records_in_flight_limit(&self) -> usize {
        self.pacing.groups.window.limit()
    }

    /// Every change of [`Self::records_in_flight_limit`] so far, the first
    /// being where it started.
    pub fn records_in_flight_limits(&self) -> Vec<Resized> {
        self.pacing.groups.window.history()
    }

    /// Every change of [`Self::claim_batch_size`] so far, the first being
    /// where it started.
    pub fn claim_batch_sizes(&self) -> Vec<Resized> {
        self.pacing.batches.sizer.history()
    }

    /// How much it does at once, what it remembers, what it parks.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Runs every lane; returns each message's outcome under its tag, and
    /// whether the store failed during the batch. Every message gets one:
    /// those of a lane whose task failed (a panicking handler) come back as
    /// not started, so the caller reports them and nothing is lost.
    pub async fn run_batch<T>(
        self: &Arc<Self>,
        lanes: Vec<Vec<Tagged<T, H::Record>>>,
        deadline: Deadline,
    ) -> BatchResult<T> {
        let mut tags: Vec<Vec<T>> = Vec::with_capacity(lanes.len());
        let mut messages: Vec<Vec<Message<H::Record>>> = Vec::with_capacity(lanes.len());
        for lane in lanes {
            let (lane_tags, lane_messages) = lane.into_iter().unzip();
            tags.push(lane_tags);
            messages.push(lane_messages);
        }
        let lanes = messages;
        let leases = Arc::new(Leases::default());
        let batched = self.batched(&leases, deadline);
        let heartbeat = {
            let (leases, store) = (Arc::clone(&leases), self.store.clone());
            let pacing = Arc::clone(&self.pacing);
            tokio::spawn(requests::inherit(async move {
                leases.beat(&store, &pacing.batches.sizer, deadline).await;
            }))
            .abort_handle()
        };
        let batch = Arc::new(Batch {
            completed: self.known_completed(&lanes).await,
            in_flight: InFlight::new(Arc::clone(&self.running)),
            combiner: Combiner::new(
                self.store.clone(),
                Arc::clone(&self.pacing),
                Arc::clone(&self.items),
            ),
            batched,
            leases,
            heartbeat,
            guard: BatchGuard::new(deadline),
            parking: self.config.parking(),
        });
        let mut tasks = JoinSet::new();
        for (index, lane) in lanes.into_iter().enumerate() {
            let (engine, batch) = (Arc::clone(self), Arc::clone(&batch));
            tasks.spawn(requests::inherit(async move {
                // Boxed, as the handler's work is (`handling`): the batch's
                // future holds a pointer, not the lane's whole layout.
                let outcomes = match engine.handler.commit_path() {
                    CommitPath::Locking => Box::pin(engine.run_lane(lane, batch)).await,
                    CommitPath::LockFree => Box::pin(engine.run_lane_lock_free(lane, batch)).await,
                };
                (index, outcomes)
            }));
        }
        let mut results: Vec<Vec<RecordOutcome>> = tags.iter().map(|_| Vec::new()).collect();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((index, outcomes)) => results[index] = outcomes,
                Err(err) => tracing::error!(error = %err, "a lane's task failed"),
            }
        }
        // A lane answers its messages in order, one outcome each.
        let mut outcomes: Vec<(T, RecordOutcome)> = tags
            .into_iter()
            .zip(results)
            .flat_map(|(tags, outcomes)| {
                let mut outcomes = outcomes.into_iter();
                tags.into_iter().map(move |tag| {
                    let outcome = outcomes.next().unwrap_or(RecordOutcome {
                        outcome: Outcome::NotStarted(StopReason::EarlierRecordUnfinished),
                        elapsed: std::time::Duration::ZERO,
                    });
                    (tag, outcome)
                })
            })
            .collect();
        // The messages the finished records emitted, sent before they count.
        deliver::deliver(&self.store, self.sender(), &mut outcomes, deadline).await;
        // What the durable store said COMPLETED, for the other containers.
        self.cache.share().await;
        BatchResult {
            outcomes,
            store_unavailable: batch.guard.is_store_down(),
        }
    }

    /// The gatherers of a batch's claims and fenced writes, holding the
    /// leases they acquire in `leases`.
    fn batched(&self, leases: &Arc<Leases>, deadline: Deadline) -> Batched {
        Batched::new(
            self.store.clone(),
            Arc::clone(&self.pacing),
            Arc::clone(leases),
            deadline,
        )
    }

    /// The stored result of `work`'s key if it is known COMPLETED for its
    /// payload: before the batch (its pre-check), or since, by any
    /// invocation of the container (the warm cache).
    fn known_duplicate(
        &self,
        work: &Work<H::Record>,
        batch: &Batch<S>,
    ) -> Option<Option<Arc<str>>> {
        let known = batch
            .completed
            .get(&work.key)
            .cloned()
            .or_else(|| self.cache.get(&work.key, self.store.now_ms()))?;
        (known.payload_hash == work.payload_hash).then_some(known.result)
    }

    /// A message's final outcome: a verified duplicate is handed to the
    /// handler's [`RecordHandler::on_duplicate`] with its stored result (once
    /// per delivery, at the message's turn in its lane); any other outcome
    /// stays as it is.
    async fn replayed(&self, work: &Work<H::Record>, outcome: Outcome) -> Outcome {
        let Outcome::Duplicate { result, unsent } = outcome else {
            return outcome;
        };
        match self
            .handler
            .on_duplicate(&work.record, result.as_deref())
            .instrument(work.span.clone())
            .await
        {
            Ok(()) => Outcome::Duplicate { result, unsent },
            Err(err) => Outcome::ReplayFailed {
                error: err.to_string(),
            },
        }
    }
}
