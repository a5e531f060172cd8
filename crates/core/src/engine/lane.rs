//! One lane on the locking path: messages whose work must run in order. The
//! work runs one message at a time; nothing else waits in its way:
//! - the next messages are claimed ahead, up to `claim_ahead`, half a window
//!   at a time, handed in together (with the other lanes' claims, one
//!   request per store batch: `batched.rs`), so a message's claim is made
//!   long before its turn and costs a fraction of a request;
//! - a completion with no effect in the store (the effect happened outside:
//!   direct mode) waits in the lane's buffer and goes with its neighbours'
//!   (one request per store batch, each fenced on its own lease), handed in
//!   when the buffer is full or its oldest completion has waited
//!   [`COMPLETION_LINGER`], and answered while the next messages run;
//! - a completion with an effect in the store joins the lane's group:
//!   consecutive messages commit in ONE transaction, each item fenced on
//!   its lease, as the lock-free path's groups do (`lock_free/`).
//!
//! Every lease the lane holds (claimed ahead, running, waiting to be
//! recorded) is renewed by the batch's one heartbeat (`lease.rs`). When the
//! lane stops, the claims made ahead are released together. Outcomes are
//! recorded in the lane's order whatever order they are learned in
//! (`log.rs`); one that is not done stops the lane as soon as it is known.
//!
//! **A lane waits holding nothing.** When the message at its head must wait
//! (for another worker's live lease on its key, `judge/waiting.rs`, or for the
//! first copy of its key elsewhere in the container, `coalesce.rs`), the
//! lane first records what it has under way and gives back every claim it
//! made ahead (released together; the messages keep their place and are
//! claimed again once the head goes on). Two workers that each held keys
//! the other waits for would otherwise wait in a circle, each renewing its
//! leases by heartbeat, until their deadlines: release before wait breaks
//! the "hold and wait" that such a circle needs, across containers as
//! within one.
//!
//! A message's walk reads top to bottom below: its turn, its claim made
//! ahead judged (`judge.rs`), its work run under the lease (`record.rs`),
//! its outcome settled, or its completion grouped or buffered, handed in and
//! answered. A message waiting for its key is claimed again alone
//! (`alone.rs`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use crate::store::{FencedWrite, Lease, Store, StoreError};

use super::ahead::Ahead;
use super::batched::WriteAnswer;
use super::coalesce::{self, FirstCopy, Settled, Turn, Waited};
use super::footprint::{Footprint, Limits};
use super::judge::{Found, Judged, LeaseWait, NOT_FROM_A_CLAIM};
use super::lock_free::{Group, Planned};
use super::log::{LaneLog, Ticket};
use super::record::Ran;
use super::{Batch, Engine, FencingToken, Message, Outcome, RecordHandler, RecordOutcome, Work};

/// The longest a direct completion waits in the lane's buffer for
/// neighbours (counting the next message's work, as long as the last
/// one's): the widest a crash's window of effects done but not recorded
/// grows by. Its neighbours make it cheap: at 5 ms per message, about 20
/// completions share a request.
pub const COMPLETION_LINGER: Duration = Duration::from_millis(100);

/// What is prepared for a message before its turn.
enum Step {
    /// Settled without a claim: unreadable, or known COMPLETED.
    Done(Outcome),
    /// The first copy of its key in the batch: its claim, made ahead.
    Claiming(Ahead, FirstCopy),
    /// A later copy of a key in flight (in this batch or another of the
    /// container): waits for the first copy's outcome.
    Waiting(watch::Receiver<Option<Settled>>),
}

type Prepared<R> = (Option<Work<R>>, Step);

/// A direct completion on its way.
struct Direct {
    ticket: Ticket,
    started: Instant,
    work_key: String,
    payload_hash: String,
    result: Option<String>,
    lease: Lease,
    first_copy: FirstCopy,
    /// When it joined the buffer.
    buffered: Instant,
}

/// What a lane has under way besides the message whose work runs.
struct Lane<R, E> {
    prepared: VecDeque<Prepared<R>>,
    group: Group<R, E>,
    buffer: Vec<Direct>,
    /// Handed in, not yet answered.
    sent: Vec<(Direct, WriteAnswer)>,
    /// How long the last message's work took.
    last_work: Duration,
}

impl<R, E> Default for Lane<R, E> {
    fn default() -> Self {
        Self {
            prepared: VecDeque::new(),
            group: Group::default(),
            buffer: Vec::new(),
            sent: Vec::new(),
            last_work: Duration::ZERO,
        }
    }
}

/// One lane's run on the locking path: the engine and the batch it runs
/// in, the lane's log of outcomes, and what the lane has under way.
struct LaneRun<'a, H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
{
    engine: &'a Engine<H, S>,
    batch: &'a Batch<S>,
    log: LaneLog,
    lane: Lane<H::Record, S::Effect>,
}

impl<H, S> Engine<H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
{
    /// Runs a lane in order, stopping at the first message not finished.
    pub(super) async fn run_lane(
        self: Arc<Self>,
        messages: Vec<Message<H::Record>>,
        batch: Arc<Batch<S>>,
    ) -> Vec<RecordOutcome> {
        let run = LaneRun {
            engine: &self,
            batch: &batch,
            log: LaneLog::new(messages.len()),
            lane: Lane::default(),
        };
        run.in_order(messages).await
    }
}

impl<H, S> LaneRun<'_, H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
{
    /// The lane's messages in order, up to the first not finished: one
    /// outcome each.
    async fn in_order(mut self, messages: Vec<Message<H::Record>>) -> Vec<RecordOutcome> {
        let mut pending = messages.into_iter();
        let window = self.engine.config.claim_ahead.max(1);
        loop {
            self.answered(false).await;
            if self.log.stop_reason(self.batch).is_some() {
                self.abandon().await;
                break;
            }
            if self.lane.prepared.len() <= window / 2 {
                let room = window - self.lane.prepared.len();
                self.prepare(pending.by_ref().take(room));
            }
            // The store not answering: no new work until the lane's own
            // requests are answered (or failed, which stops it).
            if self.batch.batched.unanswered() {
                self.record_all().await;
                self.batch.batched.answered().await;
                continue;
            }
            self.take_back();
            let Some((work, step)) = self.lane.prepared.pop_front() else {
                break;
            };
            let ticket = self.log.reserve();
            self.turn(work, step, ticket).await;
        }
        self.record_all().await;
        self.log.finish(pending)
    }

    /// Settles what can be settled without a claim, and hands in the claims
    /// of the others (together: nothing yields between them).
    fn prepare(&mut self, messages: impl Iterator<Item = Message<H::Record>>) {
        let batch = self.batch;
        for message in messages {
            let work = match message {
                Ok(work) => work,
                Err(reason) => {
                    let invalid = Step::Done(Outcome::Invalid { reason });
                    self.lane.prepared.push_back((None, invalid));
                    continue;
                }
            };
            let step = if let Some(result) = self.engine.known_duplicate(&work, batch) {
                Step::Done(Outcome::known_duplicate(result))
            } else {
                match batch.in_flight.turn(&work.key) {
                    Turn::Later(first) => Step::Waiting(first),
                    Turn::First(first_copy) => {
                        Step::Claiming(Ahead::send(&work, batch), first_copy)
                    }
                }
            };
            self.lane.prepared.push_back((Some(work), step));
        }
    }

    /// Takes back (together) the claims the lane gave back while it waited.
    fn take_back(&mut self) {
        let given_back = |(_, step): &Prepared<H::Record>| match step {
            Step::Claiming(ahead, _) => ahead.is_given_back(),
            _ => false,
        };
        if !self.lane.prepared.iter().any(given_back) {
            return;
        }
        for (work, step) in std::mem::take(&mut self.lane.prepared) {
            let step = match (step, &work) {
                (Step::Claiming(ahead, first_copy), Some(work)) => Step::Claiming(
                    ahead.take_back(work, &self.engine.store, self.batch),
                    first_copy,
                ),
                (step, _) => step,
            };
            self.lane.prepared.push_back((work, step));
        }
    }

    /// The message's turn: its work runs (or its first copy's outcome
    /// counts); a duplicate goes to the handler's `on_duplicate`.
    async fn turn(&mut self, work: Option<Work<H::Record>>, step: Step, ticket: Ticket) {
        let engine = self.engine;
        let started = Instant::now();
        let deadline = self.batch.guard.deadline();
        let outcome = match (step, work) {
            (Step::Done(outcome), Some(work)) => engine.replayed(&work, outcome).await,
            (Step::Done(outcome), None) => outcome,
            (Step::Waiting(first), Some(work)) => {
                // The first copy may be this lane's own, still on its way;
                // the lane waits holding nothing.
                self.record_all().await;
                self.give_back().await;
                let outcome =
                    match coalesce::wait_for_first(first, &work.payload_hash, &deadline).await {
                        Waited::Duplicate(result) => Outcome::known_duplicate(result),
                        Waited::OnItsOwn => {
                            engine
                                .claim_and_run(&work, deadline, &self.batch.leases)
                                .await
                        }
                        Waited::Cut => Outcome::NotStarted(super::StopReason::DeadlineNear),
                    };
                engine.replayed(&work, outcome).await
            }
            (Step::Claiming(ahead, first_copy), Some(work)) => {
                match self.run_claim(&work, ahead).await {
                    Ok(lease) => {
                        return self.run(work, lease, first_copy, ticket, started).await;
                    }
                    Err(outcome) => {
                        first_copy.settle(Settled::new(&work.payload_hash, &outcome));
                        engine.replayed(&work, outcome).await
                    }
                }
            }
            // A step other than Done always carries its message.
            (_, None) => Outcome::NotStarted(super::StopReason::EarlierRecordUnfinished),
        };
        self.settle(ticket, outcome, started).await;
    }

    /// The lease of a message's claim made ahead, or the outcome that makes
    /// its work unnecessary or impossible now. A key held elsewhere whose
    /// lease ends while records may still start is waited for (what the
    /// lane has under way recorded first) and claimed again alone.
    async fn run_claim(&mut self, work: &Work<H::Record>, ahead: Ahead) -> Result<Lease, Outcome> {
        let (engine, batch) = (self.engine, self.batch);
        let deadline = batch.guard.deadline();
        let claim = ahead.answer(work, &engine.store, batch).await;
        let mut waiting = LeaseWait::default();
        match engine.judge(&work.key, Found::of_claim(claim), deadline, &mut waiting) {
            Judged::Lease(lease) => Ok(lease),
            Judged::Settled(outcome) => Err(outcome),
            Judged::WaitAndRetry(wait) => {
                // Waits holding nothing (see the module).
                self.record_all().await;
                self.give_back().await;
                tokio::time::sleep(wait).await;
                engine
                    .claim(work, deadline, &batch.leases, &mut waiting)
                    .await
            }
            Judged::Absent | Judged::TakeOver => unreachable!("{NOT_FROM_A_CLAIM}"),
        }
    }

    /// Runs a claimed message's work; its completion joins the buffer or
    /// the group, any other outcome is recorded at once.
    async fn run(
        &mut self,
        work: Work<H::Record>,
        lease: Lease,
        first_copy: FirstCopy,
        ticket: Ticket,
        started: Instant,
    ) {
        let (engine, batch) = (self.engine, self.batch);
        let deadline = batch.guard.deadline();
        let held = lease.clone();
        let ran = engine
            .run_claimed(&work, lease, deadline, &batch.leases)
            .await;
        self.lane.last_work = started.elapsed();
        match ran {
            Ran::Settled(outcome) => {
                batch.leases.release(&held);
                first_copy.settle(Settled::new(&work.payload_hash, &outcome));
                let outcome = engine.replayed(&work, outcome).await;
                self.settle(ticket, outcome, started).await;
            }
            Ran::Completed(completion, lease) if completion.is_bare() => {
                self.lane.buffer.push(Direct {
                    ticket,
                    started,
                    work_key: work.key,
                    payload_hash: work.payload_hash,
                    result: completion.result,
                    lease,
                    first_copy,
                    buffered: Instant::now(),
                });
                let full = self.lane.buffer.len() >= self.batch_size();
                let waited = self.lane.buffer[0].buffered.elapsed() + self.lane.last_work;
                if full || waited >= COMPLETION_LINGER {
                    self.hand_in();
                }
            }
            Ran::Completed(completion, lease) => {
                let planned = Planned {
                    footprint: Footprint::of_completion::<S, _>(&work, &completion),
                    token: FencingToken::from(&lease),
                    work,
                    completion,
                    first_copy: Some(first_copy),
                    started,
                    ticket,
                    held: Some(lease),
                };
                let limits = Limits::of::<S>(engine.pacing.groups.sizer.limit());
                if let Some(refused) = self.lane.group.add(planned, limits) {
                    let full = std::mem::take(&mut self.lane.group);
                    engine.commit_group(full, &mut self.log, batch).await;
                    // An empty group takes any message.
                    let _ = self.lane.group.add(refused, limits);
                }
            }
        }
    }

    /// Records the outcome of the message at `ticket`. One that stops the
    /// lane first lets the messages before it in the group commit: they
    /// finished before it.
    async fn settle(&mut self, ticket: Ticket, outcome: Outcome, started: Instant) {
        if !outcome.is_done(self.batch.parking) && !self.lane.group.members.is_empty() {
            let group = std::mem::take(&mut self.lane.group);
            self.engine
                .commit_group(group, &mut self.log, self.batch)
                .await;
        }
        self.log.resolve(ticket, outcome, started, self.batch);
    }

    /// How many fenced writes share a request now.
    fn batch_size(&self) -> usize {
        self.engine
            .pacing
            .batches
            .sizer
            .limit()
            .min(S::MAX_BATCH)
            .max(1)
    }

    /// Hands in the buffer's completions, each fenced on its lease.
    fn hand_in(&mut self) {
        if self.lane.buffer.is_empty() {
            return;
        }
        let buffer = std::mem::take(&mut self.lane.buffer);
        let writes = buffer
            .iter()
            .map(|direct| {
                let result = direct.result.clone();
                (direct.lease.clone(), FencedWrite::Complete { result })
            })
            .collect();
        let answers = self.batch.batched.write(writes);
        self.lane.sent.extend(buffer.into_iter().zip(answers));
    }

    /// Records the direct completions answered (all of them, waiting for
    /// the answers, when `wait`).
    async fn answered(&mut self, wait: bool) {
        let (engine, batch) = (self.engine, self.batch);
        let mut still = Vec::new();
        for (direct, mut answer) in std::mem::take(&mut self.lane.sent) {
            let written = match answer.try_recv() {
                Ok(written) => written,
                Err(oneshot::error::TryRecvError::Empty) if !wait => {
                    still.push((direct, answer));
                    continue;
                }
                Err(oneshot::error::TryRecvError::Empty) => {
                    answer.await.unwrap_or_else(|_| Err(ended()))
                }
                Err(oneshot::error::TryRecvError::Closed) => Err(ended()),
            };
            let outcome = match written {
                Ok(expires_at_s) => {
                    let result = direct.result.as_deref();
                    engine.remember(
                        &direct.work_key,
                        &direct.payload_hash,
                        result,
                        &[],
                        &direct.lease,
                        expires_at_s,
                    )
                }
                // The effect happened all the same: done, not recorded.
                Err(err) => Outcome::Unrecorded(err),
            };
            batch.leases.release(&direct.lease);
            direct
                .first_copy
                .settle(Settled::new(&direct.payload_hash, &outcome));
            self.log
                .resolve(direct.ticket, outcome, direct.started, batch);
        }
        self.lane.sent = still;
    }

    /// Records everything the lane has under way: the group committed, the
    /// buffer handed in, every answer waited for.
    async fn record_all(&mut self) {
        let group = std::mem::take(&mut self.lane.group);
        self.engine
            .commit_group(group, &mut self.log, self.batch)
            .await;
        self.hand_in();
        self.answered(true).await;
    }

    /// Before the lane waits: gives back every claim it made ahead, so that
    /// it holds nothing another worker may be waiting for (the leases are
    /// released together; the messages keep their place, and their claims
    /// are taken back when the lane goes on, see `ahead.rs`).
    async fn give_back(&mut self) {
        if !gives_back_while_waiting() {
            return;
        }
        let mut released = Vec::new();
        for (work, step) in std::mem::take(&mut self.lane.prepared) {
            let step = match step {
                Step::Claiming(ahead, first_copy) => {
                    let (ahead, lease) = ahead.give_back(self.batch).await;
                    if let Some(lease) = lease {
                        let origin = work.as_ref().map(|w| w.origin.clone()).unwrap_or_default();
                        released.push((lease, origin));
                    }
                    Step::Claiming(ahead, first_copy)
                }
                step => step,
            };
            self.lane.prepared.push_back((work, step));
        }
        self.release_together(released).await;
    }

    /// The lane stopped: the messages prepared will not run. Their claims
    /// made ahead are released together, so that their redeliveries need
    /// not wait for the leases to end.
    async fn abandon(&mut self) {
        let batch = self.batch;
        let reason = self
            .log
            .stop
            .unwrap_or(super::StopReason::EarlierRecordUnfinished);
        let mut leases = Vec::new();
        for (work, step) in std::mem::take(&mut self.lane.prepared) {
            if let Step::Claiming(ahead, _first_copy) = step
                && let (_, Some(lease)) = ahead.give_back(batch).await
            {
                leases.push((lease, work.map(|w| w.origin).unwrap_or_default()));
            }
            self.log
                .push(Outcome::NotStarted(reason), Instant::now(), batch);
        }
        self.release_together(leases).await;
    }

    /// Releases `leases` (each with its message's origin, for the log)
    /// together: no longer renewed, claimable at once by their redelivery.
    async fn release_together(&self, leases: Vec<(Lease, String)>) {
        let batch = self.batch;
        for (lease, _) in &leases {
            batch.leases.release(lease);
        }
        let releases = leases
            .iter()
            .map(|(lease, _)| (lease.clone(), FencedWrite::Release))
            .collect();
        let answers = batch.batched.write(releases);
        for ((_, origin), answer) in leases.iter().zip(answers) {
            if let Ok(Err(err)) = answer.await {
                tracing::warn!(origin, error = %err, "could not release the key");
            }
        }
    }
}

/// Whether a lane gives back its claims made ahead before it waits (always,
/// but under the model checker's mutation `ClaimsKeptWhileWaiting`): the
/// lane's rule that the model (`crates/model`) follows too.
pub fn gives_back_while_waiting() -> bool {
    !mutated!(ClaimsKeptWhileWaiting)
}

/// The answer of a write whose batch ended before it was sent.
fn ended() -> StoreError {
    StoreError::Unavailable {
        operation: "complete",
        message: "the batch ended before the completion was answered".into(),
    }
}
