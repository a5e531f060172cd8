//! The idempotency protocol as a model: workers (containers, their
//! invocations) claiming, taking over, running and finishing keys in one
//! store, over a network that loses, duplicates and delays requests, with
//! crashes, clocks that disagree within a bound, leases that run out, the
//! warm and shared caches, two scopes, batches delivered again, and the
//! messages a completion emits (kept on its item, sent after the commit to
//! a destination that keeps what it accepted).
//!
//! The store's guards, the item changes they allow, the judge of a found
//! item ([`StoredItem::standing`]), a re-send's recognition of its own
//! write ([`Lease::finished_as`], [`Lease::refused`],
//! [`ClaimOutcome::of_own_item`]), the cache's trust
//! ([`StoredItem::proves_completed`]), the lane's rule on claims made
//! ahead ([`gives_back_while_waiting`]), the key handed downstream
//! ([`FencingToken::idempotency_key`]), and the outbox's (its text
//! [`encode`]d, the messages still to send [`Pending`], their ids
//! [`message_id`], its clearing [`may_clear_outbox`]) are the core crate's
//! own functions, the ones the memory store and the engine run. What the
//! model writes itself is the order of the worker's steps (`worker.rs`,
//! `claims.rs`, `completion.rs`, `outbox.rs`), the network, the
//! destination, and the checks (`properties.rs`).
//!
//! [`gives_back_while_waiting`]: exactly_once_core::engine::gives_back_while_waiting
//! [`FencingToken::idempotency_key`]: exactly_once_core::engine::FencingToken::idempotency_key
//! [`encode`]: exactly_once_core::outbox::encode
//! [`Pending`]: exactly_once_core::outbox::Pending
//! [`message_id`]: exactly_once_core::outbox::message_id
//! [`may_clear_outbox`]: exactly_once_core::store::transition::may_clear_outbox

mod claims;
mod completion;
mod describe;
mod outbox;
mod properties;
mod store;
mod worker;

use exactly_once_core::config::StoreConfig;
use exactly_once_core::outbox::Pending;
use exactly_once_core::store::{ClaimOutcome, Lease, StoredItem};

use crate::checker::{Model, Property};

pub use properties::{Flag, PROPERTIES};

/// One model tick, in milliseconds: leases and TTLs are whole ticks.
pub const TICK_MS: u64 = 1_000;
/// True time at tick 0 (so that a clock behind it stays positive).
const EPOCH_MS: u64 = 100_000;

/// What is explored: the workers and their batches, the timing, and how
/// many faults of each kind may happen on one path.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The workers, each a container receiving one batch, delivered again
    /// until nothing of it is reported.
    pub workers: Vec<WorkerSpec>,
    /// The path the records take.
    pub path: Path,
    /// A lease's length, in ticks.
    pub lease_ticks: u64,
    /// An item's TTL, in ticks.
    pub retention_ticks: u64,
    /// An invocation's deadline, in ticks after its start.
    pub deadline_ticks: u8,
    /// Time stops here (ticks).
    pub horizon: u8,
    /// Crashes on one path.
    pub crashes: u8,
    /// Requests lost, answers lost, requests duplicated or delayed past a
    /// re-send, on one path.
    pub faults: u8,
    /// The destination's faults (its answer lost, or the request to it
    /// lost), on one path: each kind of fault happens while the faults so
    /// far (of any kind) are fewer than its own bound.
    pub destination_faults: u8,
    /// Times a request is sent again after it went unanswered.
    pub resends: u8,
    /// Invocations per worker (the first delivery and the redeliveries).
    pub invocations: u8,
    /// Whether the workers share a cache of completed keys (beside each
    /// one's warm cache).
    pub shared_cache: bool,
    /// Whether each record's completion emits one message (kept on its
    /// key's COMPLETED item, sent after the commit).
    pub emits: bool,
}

/// A worker: its scope (function), the keys of its batch in its order,
/// and how far its clock is from true time.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// The function's scope (`fn-a`, `fn-b`).
    pub scope: &'static str,
    /// Its batch: one record per entry, by key index.
    pub keys: Vec<u8>,
    /// Its clock's offset from true time, ms (within the stated bound).
    pub skew_ms: i64,
}

/// The path the records take (`LEDGER_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// No claim: the work runs, and its effect commits with the key's first
    /// (COMPLETED) item, in one transaction per group.
    LockFree,
    /// Claimed; the effect in the store, committed in the completion's
    /// transaction (grouped).
    Transactional,
    /// Claimed; the effect outside (a payment API), run before the
    /// completion is written.
    Direct,
}

/// The whole system at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// True time, ticks.
    pub now: u8,
    /// The store: each key's item, if any.
    pub items: Vec<Option<Keyed>>,
    /// The workers.
    pub workers: Vec<Worker>,
    /// Requests in flight (sorted, so that equal networks are one state).
    pub net: Vec<Request>,
    /// The key each key's effects outside were handed downstream (the
    /// first one's).
    pub downstream: Vec<Option<String>>,
    /// The shared cache: a key's entry, if cached: its expiry (epoch s)
    /// and the scope that wrote it (handed out to that scope only).
    pub shared: Vec<Option<(u64, &'static str)>>,
    /// The messages the destination accepted (sorted; a copy of one
    /// accepted before is kept once).
    pub destination: Vec<Delivered>,
    /// Crashes so far.
    pub crashes: u8,
    /// Faults so far.
    pub faults: u8,
    /// What the step into this state did ([`Flag`]s).
    pub flags: Events,
}

/// What a step did, as [`Flag`] bits: read by the checks of that step, and
/// no part of the state's identity (two states that differ only in how
/// they were reached are one).
#[derive(Debug, Clone, Copy, Default)]
pub struct Events(pub u32);

impl Events {
    /// Notes `flag`.
    pub fn note(&mut self, flag: Flag) {
        self.0 |= flag.bit();
    }

    /// Whether `flag` was noted.
    pub fn has(self, flag: Flag) -> bool {
        self.0 & flag.bit() != 0
    }
}

impl PartialEq for Events {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Events {}

impl std::hash::Hash for Events {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

/// A key's item, and the effects applied since it was created (an item
/// past its TTL replaced by a new one starts again at 0).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Keyed {
    /// The item as stored.
    pub item: StoredItem,
    /// Store effects applied.
    pub store_effects: u8,
    /// Effects run outside.
    pub outside_effects: u8,
}

/// A message as the destination accepted it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Delivered {
    /// Its body (which record's message it is).
    pub body: String,
    /// The id it was sent under.
    pub id: String,
}

/// A worker (a container) and its current invocation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Worker {
    /// Invocations started.
    pub invocation: u8,
    /// Where it is.
    pub phase: Phase,
    /// Its records' progress in this invocation, in batch order.
    pub slots: Vec<Slot>,
    /// Records answered as done (bits by batch index).
    pub done: u8,
    /// The warm cache: a key's entry expiry (epoch s), if cached.
    pub warm: Vec<Option<u64>>,
    /// Owner tokens made so far (each claim gets a new one).
    pub owners: u8,
}

impl Worker {
    /// The invocation ends in `phase`: its records' progress is gone (what
    /// it answered done stays in [`Self::done`]; its owner tokens are not
    /// made again: the next invocation's carry its number).
    fn end(&mut self, phase: Phase) {
        self.phase = phase;
        self.slots.iter_mut().for_each(|slot| *slot = Slot::Open);
    }
}

/// A worker's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// A delivery of its records is due.
    Due,
    /// Running an invocation that ends at `deadline` (tick, its clock).
    Running {
        /// The deadline, in ticks of true time.
        deadline: u8,
    },
    /// Answered Lambda with nothing reported.
    Finished,
}

/// A record's progress in an invocation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Slot {
    /// Not claimed (or its claim given back).
    Open,
    /// A claim in flight: a create, or a take-over of `observed`.
    Claiming {
        /// The claim's owner token.
        owner: String,
        /// The version seen abandoned (a take-over), if any.
        observed: Option<u64>,
        /// Sends so far.
        sent: u8,
        /// Looks at the stored item so far (the store gives up at 4).
        rounds: u8,
    },
    /// Held, its work not run yet.
    Held(Lease),
    /// In progress elsewhere: waits for the lease to end.
    InProgress,
    /// Waiting since `since` (tick) before claiming again.
    Waiting {
        /// When the wait began.
        since: u8,
    },
    /// Run; its completion buffered (store effects: the group commit).
    Ran(Lease),
    /// Lock-free: run without a claim, its commit buffered (the group
    /// commit creates its COMPLETED item with the effect).
    Computed {
        /// The attempt's owner token.
        owner: String,
    },
    /// Lock-free: its commit in flight.
    Committing {
        /// The attempt's owner token.
        owner: String,
        /// Sends so far.
        sent: u8,
        /// The slots committed in the same request.
        group: Vec<u8>,
    },
    /// Its completion (or group commit) in flight.
    Completing {
        /// The lease.
        lease: Lease,
        /// Sends so far.
        sent: u8,
        /// The slots completed in the same request.
        group: Vec<u8>,
    },
    /// Finished in the store (completed, or found completed), its
    /// messages still on the item completed under `owner`: sent once the
    /// batch's lanes are done.
    Unsent {
        /// The owner the item was completed under (its clearing's fence).
        owner: String,
    },
    /// Its messages accepted by the destination, the item's outbox not
    /// cleared yet.
    Sent {
        /// The owner the item was completed under.
        owner: String,
    },
    /// Finished: completed, a duplicate, failed for good.
    Done,
    /// Given up: reported to Lambda, delivered again.
    Unfinished,
}

impl Slot {
    /// A claim in flight: under `owner`, of the version `observed` (a
    /// take-over) or of none (a create), its `sent`-th send, after `rounds`
    /// looks at the stored item.
    fn claiming(owner: String, observed: Option<u64>, sent: u8, rounds: u8) -> Self {
        Self::Claiming {
            owner,
            observed,
            sent,
            rounds,
        }
    }
}

/// A request in flight.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    /// The sender: worker, invocation, slot.
    pub from: (u8, u8, u8),
    /// The sender's clock when it was made (conditions compare to it).
    pub at_ms: u64,
    /// Delayed: it may arrive after time passed.
    pub late: bool,
    /// What it asks.
    pub op: Op,
}

/// What a request asks of the store.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// A claim: create the STARTED item.
    Create {
        /// The claim's owner token.
        owner: String,
    },
    /// A take-over of the version seen abandoned.
    TakeOver {
        /// The claim's owner token.
        owner: String,
        /// The version seen.
        observed: u64,
    },
    /// A fenced write of one lease.
    Fenced {
        /// The lease (pk, version, owner, end).
        lease: LeaseKey,
        /// What it writes.
        write: Write,
    },
    /// Completions of held keys with their store effects, in ONE
    /// transaction (the group commit).
    Commit {
        /// Each member's slot and lease.
        members: Vec<(u8, LeaseKey)>,
    },
    /// Lock-free: new keys' COMPLETED items with their effects, in ONE
    /// transaction (each only where the key is absent or past its TTL).
    CommitNew {
        /// Each member's slot and owner token.
        members: Vec<(u8, String)>,
    },
    /// The outbox of the item completed under `owner` cleared (its
    /// messages were accepted).
    ClearOutbox {
        /// The owner the item was completed under.
        owner: String,
    },
}

/// A lease, as a request carries it (ordered, for the sorted network).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseKey {
    /// The item's pk.
    pub pk: String,
    /// The version.
    pub version: u64,
    /// The owner.
    pub owner: String,
    /// The lease's end (ms).
    pub until_ms: u64,
}

impl LeaseKey {
    fn of(lease: &Lease) -> Self {
        Self {
            pk: lease.pk.clone(),
            version: lease.version,
            owner: lease.owner.clone(),
            until_ms: lease.lock_expires_at_ms,
        }
    }

    fn lease(&self) -> Lease {
        Lease {
            pk: self.pk.clone(),
            version: self.version,
            owner: self.owner.clone(),
            lock_expires_at_ms: self.until_ms,
        }
    }
}

/// A fenced write without a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Write {
    /// COMPLETED (the effect ran outside).
    Complete,
    /// The lease given back (ends now).
    Release,
    /// A heartbeat: the lease ends later.
    Extend {
        /// The new end (ms).
        until_ms: u64,
    },
}

/// One step of the system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Time passes one tick.
    Tick,
    /// Worker `0` starts an invocation (a delivery, or a redelivery).
    Start(u8),
    /// The store applies request `index`; `answer` says whether the sender
    /// hears the answer (else it is lost).
    Apply {
        /// The request's index in the network.
        index: usize,
        /// Whether the answer reaches the sender.
        answer: bool,
    },
    /// Request `index` is lost.
    Lose(usize),
    /// Request `index` is delayed: it may arrive any time later (after its
    /// sender sent it again, crashed or answered: a partition that heals).
    Delay(usize),
    /// Worker `.0` sends the request of slot `.1` again (unanswered), or
    /// gives the record up after its last send.
    Resend(u8, u8),
    /// Worker `0` sends its buffered completions (the group commit).
    Flush(u8),
    /// Worker `0` claims its waiting head again.
    Reclaim(u8),
    /// Worker `.0` renews the lease of slot `.1` (a heartbeat).
    Renew(u8, u8),
    /// Worker `0` is killed.
    Crash(u8),
    /// Worker `.0`'s lanes are done: it sends its records' messages to the
    /// destination, which answers as `.1` says.
    Send(u8, Delivery),
    /// Worker `0` clears the outboxes of the records whose messages were
    /// accepted.
    Clear(u8),
}

/// What became of a worker's messages sent to the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Accepted, and the worker heard so.
    Accepted,
    /// Accepted, the answer lost (the worker reports them unsent).
    AnswerLost,
    /// The request lost: none accepted.
    Lost,
}

/// The protocol at a scope.
pub struct Protocol {
    /// What is explored.
    pub scope: Scope,
    configs: Vec<StoreConfig>,
    keys: usize,
}

impl Protocol {
    /// The protocol at `scope`.
    pub fn new(scope: Scope) -> Self {
        let configs = scope
            .workers
            .iter()
            .map(|spec| {
                let mut config = StoreConfig::new("model");
                config.scope = Some(spec.scope.to_owned());
                config.lock_timeout = std::time::Duration::from_millis(scope.lease_ticks * TICK_MS);
                config.retention =
                    std::time::Duration::from_millis(scope.retention_ticks * TICK_MS);
                config
            })
            .collect();
        let keys = scope
            .workers
            .iter()
            .flat_map(|w| w.keys.iter())
            .map(|k| *k as usize + 1)
            .max()
            .unwrap_or(0);
        Self {
            scope,
            configs,
            keys,
        }
    }

    /// Worker `w`'s clock at true tick `now`, ms.
    fn clock(&self, w: usize, now: u8) -> u64 {
        self.clock_at(now)
            .saturating_add_signed(self.scope.workers[w].skew_ms)
    }

    /// True time at tick `now`, ms.
    fn clock_at(&self, now: u8) -> u64 {
        EPOCH_MS + u64::from(now) * TICK_MS
    }

    /// The pk of key index `key`.
    fn pk(key: u8) -> String {
        format!("k{key}")
    }

    /// The payload fingerprint every record of `key` carries.
    fn payload(key: u8) -> String {
        format!("p{key}")
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init(&self) -> Vec<State> {
        let workers = self
            .scope
            .workers
            .iter()
            .map(|spec| Worker {
                invocation: 0,
                phase: Phase::Due,
                slots: vec![Slot::Open; spec.keys.len()],
                done: 0,
                warm: vec![None; self.keys],
                owners: 0,
            })
            .collect();
        vec![State {
            now: 0,
            items: vec![None; self.keys],
            workers,
            net: Vec::new(),
            shared: vec![None; self.keys],
            downstream: vec![None; self.keys],
            destination: Vec::new(),
            crashes: 0,
            faults: 0,
            flags: Events::default(),
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        // A request reaches the store within the tick it is sent in, unless
        // a fault delays it: time passes only when nothing else is on its way.
        if state.now < self.scope.horizon && state.net.iter().all(|r| r.late) {
            actions.push(Action::Tick);
        }
        for (index, request) in state.net.iter().enumerate() {
            actions.push(Action::Apply {
                index,
                answer: true,
            });
            if state.faults < self.scope.faults {
                actions.push(Action::Apply {
                    index,
                    answer: false,
                });
                actions.push(Action::Lose(index));
                if !request.late {
                    actions.push(Action::Delay(index));
                }
            }
        }
        for w in 0..state.workers.len() {
            self.worker_actions(state, w, actions);
        }
    }

    fn next(&self, state: &State, action: &Action) -> Option<State> {
        let mut next = state.clone();
        next.flags = Events::default();
        match *action {
            Action::Tick => next.now += 1,
            Action::Apply { index, answer } => {
                let request = next.net.remove(index);
                if !answer {
                    next.faults += 1;
                }
                let reply = self.apply(&mut next, &request);
                forget_bookkeeping(&mut next);
                if answer {
                    self.hear(&mut next, &request, reply);
                }
            }
            Action::Lose(index) => {
                next.net.remove(index);
                next.faults += 1;
            }
            Action::Delay(index) => {
                next.net[index].late = true;
                next.faults += 1;
            }
            Action::Resend(w, slot) => self.resend(&mut next, w as usize, slot as usize),
            Action::Flush(w) => self.flush(&mut next, w as usize),
            Action::Reclaim(w) => self.reclaim(&mut next, w as usize),
            Action::Renew(w, slot) => self.renew(&mut next, w as usize, slot as usize),
            Action::Start(w) => self.start(&mut next, w as usize),
            Action::Crash(w) => {
                self.note_crash(&mut next, w as usize);
                // The invocation fails; the event source mapping delivers
                // the batch again.
                next.workers[w as usize].end(Phase::Due);
                next.crashes += 1;
            }
            Action::Send(w, delivery) => self.send_messages(&mut next, w as usize, delivery),
            Action::Clear(w) => self.clear(&mut next, w as usize),
        }
        self.eager(&mut next);
        next.net.sort();
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        PROPERTIES.to_vec()
    }
}

/// Clears what no guard, judge or check reads (when an item was created
/// and last written, its attempts), so that states differing only there
/// are one.
fn forget_bookkeeping(state: &mut State) {
    for keyed in state.items.iter_mut().flatten() {
        keyed.item.created_at_ms = None;
        keyed.item.updated_at_ms = None;
        keyed.item.attempts = None;
    }
}

/// What the store answered a request.
#[derive(Debug, Clone)]
enum Reply {
    /// A claim or take-over written: the lease.
    Claimed(Lease),
    /// A claim or take-over refused: the item found.
    Conflict(Option<StoredItem>),
    /// A fenced write or commit made (or found made by this very lease).
    Made,
    /// A fenced write refused: the lock is lost.
    LockLost,
    /// A commit refused for member `index`: the item found.
    KeyTaken {
        /// Which member.
        index: usize,
        /// The item found.
        item: Option<StoredItem>,
    },
}

/// A claim's outcome as the engine settles it (the store's `settle_claim`).
fn settled(outcome: ClaimOutcome) -> Settled {
    match outcome {
        ClaimOutcome::Acquired(lease) | ClaimOutcome::TakenOver(lease) => Settled::Held(lease),
        ClaimOutcome::Duplicate(item) => Settled::Done(Pending::of_item(&item)),
        ClaimOutcome::PreviouslyFailed(_) => Settled::Done(None),
        ClaimOutcome::InProgress(_) => Settled::InProgress,
        ClaimOutcome::PayloadMismatch(_) | ClaimOutcome::OtherScope(_) => Settled::Refused,
    }
}

/// Where a settled claim leaves its record (done: with the messages still
/// to send of the item found, if any).
enum Settled {
    Held(Lease),
    Done(Option<Pending>),
    InProgress,
    Refused,
}
