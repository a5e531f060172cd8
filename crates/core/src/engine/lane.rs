//! One lane: messages whose work must run in order. The work runs one message
//! at a time; the claims of up to `claim_ahead` following messages are made
//! meanwhile, so a message's claim does not wait for the previous effect.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

use crate::store::{Lease, Store, StoreError, requests};

use super::coalesce::{self, FirstCopy, Settled, Turn, Waited};
use super::{Batch, Engine, Message, Outcome, RecordHandler, RecordOutcome, StopReason, Work};

/// The outcomes of a lane so far, and why it stopped starting messages.
pub(super) struct LaneLog {
    outcomes: Vec<RecordOutcome>,
    pub stop: Option<StopReason>,
}

impl LaneLog {
    pub fn new(len: usize) -> Self {
        Self {
            outcomes: Vec::with_capacity(len),
            stop: None,
        }
    }

    /// Why the next message must not start, if so: the lane's own stop, or
    /// the batch's (deadline near, DynamoDB down).
    pub fn stop_reason<S: Store>(&mut self, batch: &Batch<S>) -> Option<StopReason> {
        self.stop = self.stop.or_else(|| batch.guard.stop_reason());
        self.stop
    }

    /// Why a computed lock-free commit must not be sent, if so: the lane's
    /// own stop, or the store down. Near the deadline it still goes: its
    /// work is done and one request finishes it, as the locking path still
    /// completes work that ended (the safety margin is for that).
    pub fn stop_before_commit<S: Store>(&self, batch: &Batch<S>) -> Option<StopReason> {
        match self.stop {
            None | Some(StopReason::DeadlineNear) => batch
                .guard
                .is_store_down()
                .then_some(StopReason::StoreUnavailable),
            own => own,
        }
    }

    /// Records the next message's outcome. One not done (finished, or
    /// parked) stops the lane; the store unavailable stops the whole batch
    /// (fail closed).
    pub fn push<S: Store>(&mut self, outcome: Outcome, started: Instant, batch: &Batch<S>) {
        if let Outcome::StoreFailed(err) | Outcome::Unrecorded(err) = &outcome
            && err.is_retryable()
        {
            tracing::error!(error = %err, "store unavailable: failing closed, no further record of this batch starts");
            batch.guard.store_failed();
        }
        if !outcome.is_done(batch.parking) {
            self.stop = self.stop.or(Some(StopReason::EarlierRecordUnfinished));
        }
        self.outcomes.push(RecordOutcome {
            outcome,
            elapsed: started.elapsed(),
        });
    }

    /// The outcomes, the messages never looked at reported as not started.
    pub fn finish<T>(mut self, rest: impl Iterator<Item = T>) -> Vec<RecordOutcome> {
        let reason = self.stop.unwrap_or(StopReason::EarlierRecordUnfinished);
        self.outcomes.extend(rest.map(|_| RecordOutcome {
            outcome: Outcome::NotStarted(reason),
            elapsed: Duration::ZERO,
        }));
        self.outcomes
    }
}

/// What is prepared for a message before its turn.
enum Step {
    /// Settled without a claim: unreadable, or known COMPLETED.
    Done(Outcome),
    /// The first copy of its key in the batch: its claim, running ahead (a
    /// claim dropped unawaited, with its invocation, stops where it is).
    Claiming(AbortOnDropHandle<Result<Lease, Outcome>>, FirstCopy),
    /// A later copy of a key in flight (in this batch or another of the
    /// container): waits for the first copy's outcome.
    Waiting(watch::Receiver<Option<Settled>>),
}

type Prepared<R> = (Option<Work<R>>, Step);

impl<H, S> Engine<H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
{
    /// Runs a lane in order, stopping at the first message not finished.
    pub(super) async fn run_lane(
        self: Arc<Self>,
        lane: Vec<Message<H::Record>>,
        batch: Arc<Batch<S>>,
    ) -> Vec<RecordOutcome> {
        let mut log = LaneLog::new(lane.len());
        let mut pending = lane.into_iter();
        let mut prepared: VecDeque<Prepared<H::Record>> = VecDeque::new();
        loop {
            while log.stop.is_none() && prepared.len() < self.config.claim_ahead.max(1) {
                let Some(item) = pending.next() else { break };
                prepared.push_back(self.prepare(item, &batch));
            }
            let Some((work, step)) = prepared.pop_front() else {
                break;
            };
            let started = Instant::now();
            let outcome = match (log.stop_reason(&batch), work) {
                (Some(reason), work) => {
                    self.abandon(step, work.as_ref().map_or("", |w| &w.origin))
                        .await;
                    Outcome::NotStarted(reason)
                }
                (None, work) => self.finish(work, step, &batch).await,
            };
            log.push(outcome, started, &batch);
        }
        log.finish(pending)
    }

    /// Settles what can be settled without a claim, or starts the claim.
    fn prepare(
        self: &Arc<Self>,
        message: Message<H::Record>,
        batch: &Batch<S>,
    ) -> Prepared<H::Record> {
        let work = match message {
            Ok(work) => work,
            Err(reason) => return (None, Step::Done(Outcome::Invalid { reason })),
        };
        if let Some(result) = self.known_duplicate(&work, batch) {
            return (Some(work), Step::Done(Outcome::Duplicate { result }));
        }
        let step = match batch.in_flight.turn(&work.key) {
            Turn::Later(receiver) => Step::Waiting(receiver),
            Turn::First(sender) => {
                let (engine, deadline) = (Arc::clone(self), batch.guard.deadline());
                let (key, hash, origin, holder) = (
                    work.key.clone(),
                    work.payload_hash.clone(),
                    work.origin.clone(),
                    work.holder.clone(),
                );
                Step::Claiming(
                    AbortOnDropHandle::new(tokio::spawn(requests::inherit(async move {
                        let holder = holder.as_deref();
                        engine.claim(&key, &hash, &origin, holder, deadline).await
                    }))),
                    sender,
                )
            }
        };
        (Some(work), step)
    }

    /// The message's turn: its work runs (or its first copy's outcome
    /// counts); a duplicate goes to the handler's `on_duplicate`.
    async fn finish(&self, work: Option<Work<H::Record>>, step: Step, batch: &Batch<S>) -> Outcome {
        let deadline = batch.guard.deadline();
        let outcome = match (step, &work) {
            (Step::Done(outcome), _) => outcome,
            (Step::Claiming(claim, first), Some(work)) => {
                let outcome = match claim.await {
                    Ok(Ok(lease)) => self.work(work, lease, deadline).await,
                    Ok(Err(outcome)) => outcome,
                    Err(err) => Outcome::StoreFailed(StoreError::Unavailable {
                        operation: "claim",
                        message: format!("the claim's task failed: {err}"),
                    }),
                };
                first.settle(Settled::new(&work.payload_hash, &outcome));
                outcome
            }
            (Step::Waiting(first), Some(work)) => {
                match coalesce::wait_for_first(first, &work.payload_hash, &deadline).await {
                    Waited::Duplicate(result) => Outcome::Duplicate { result },
                    Waited::OnItsOwn => self.claim_and_run(work, deadline).await,
                    Waited::Cut => Outcome::NotStarted(StopReason::DeadlineNear),
                }
            }
            // A step other than Done always carries its message.
            (_, None) => Outcome::NotStarted(StopReason::EarlierRecordUnfinished),
        };
        match &work {
            Some(work) => self.replayed(work, outcome).await,
            None => outcome,
        }
    }

    /// A message that will not run: a claim made ahead for it is released at
    /// once, so that its redelivery need not wait for the lease to end.
    async fn abandon(&self, step: Step, origin: &str) {
        if let Step::Claiming(claim, _) = step
            && let Ok(Ok(lease)) = claim.await
        {
            self.release(&lease, origin).await;
        }
    }
}
