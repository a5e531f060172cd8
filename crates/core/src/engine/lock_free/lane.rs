//! The lock-free path's lane driver: one value holding the engine, the
//! batch, the lane's log and the group of consecutive messages it is
//! filling. A planned message joins the group; anything else commits the
//! group before it, in order, then is settled.

use std::sync::Arc;
use std::time::Instant;

use super::{Group, Next};
use crate::engine::coalesce::{self, Settled, Waited};
use crate::engine::log::{LaneLog, Ticket};
use crate::engine::{Batch, Engine, Message, Outcome, RecordHandler, RecordOutcome, StopReason};
use crate::store::Store;

/// One lane's run on the lock-free path: the engine and the batch it runs
/// in, the lane's log of outcomes, and the group of consecutive messages
/// it is filling.
struct LockFreeRun<'a, H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
{
    engine: &'a Engine<H, S>,
    batch: &'a Batch<S>,
    log: LaneLog,
    group: Group<H::Record, S::Effect>,
}

impl<H, S> LockFreeRun<'_, H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
{
    /// The lane's messages in order, up to the first not finished: one
    /// outcome each. A planned message joins the group; anything else
    /// commits the group before it, in order, then is settled.
    async fn in_order(mut self, messages: Vec<Message<H::Record>>) -> Vec<RecordOutcome> {
        let (engine, batch) = (self.engine, self.batch);
        let mut pending = messages.into_iter();
        while self.log.stop_reason(batch).is_none() {
            let Some(message) = pending.next() else { break };
            let started = Instant::now();
            let ticket = self.log.reserve();
            let next = match engine.plan_next(message, batch, started, ticket).await {
                Next::Planned(planned) => match self.group.add(*planned, engine.limits()) {
                    None => continue,
                    Some(refused) => Next::Planned(Box::new(refused)),
                },
                next => next,
            };
            self.commit_group().await;
            if let Some(outcome) = self.settle(next, ticket).await {
                self.log.resolve(ticket, outcome, started, batch);
            }
        }
        self.commit_group().await;
        self.log.finish(pending)
    }

    /// Commits the group filled so far (nothing if empty).
    async fn commit_group(&mut self) {
        let group = std::mem::take(&mut self.group);
        self.engine
            .commit_group(group, &mut self.log, self.batch)
            .await;
    }

    /// The outcome of a message that did not join the group before it:
    /// `None` for one planned, which starts the next group.
    async fn settle(
        &mut self,
        next: Next<H::Record, S::Effect>,
        ticket: Ticket,
    ) -> Option<Outcome> {
        let (engine, batch) = (self.engine, self.batch);
        let outcome = match (self.log.stop_reason(batch), next) {
            (Some(reason), _) => Outcome::NotStarted(reason),
            (None, Next::Invalid(reason)) => Outcome::Invalid { reason },
            (None, Next::Planned(planned)) => {
                // An empty group takes any message.
                let _ = self.group.add(*planned, engine.limits());
                return None;
            }
            (None, Next::Known(work, result)) => {
                engine
                    .replayed(&work, Outcome::known_duplicate(result))
                    .await
            }
            (None, Next::Unplanned(work, why, first_copy)) => {
                let outcome = engine.refused(&work, why, batch).await;
                first_copy.settle(Settled::new(&work.payload_hash, &outcome));
                engine.replayed(&work, outcome).await
            }
            (None, Next::Copy(work, first)) => {
                let deadline = batch.guard.deadline();
                match coalesce::wait_for_first(first, &work.payload_hash, &deadline).await {
                    Waited::Duplicate(result) => {
                        engine
                            .replayed(&work, Outcome::known_duplicate(result))
                            .await
                    }
                    Waited::OnItsOwn => engine.plan_and_commit(work, batch, ticket).await,
                    Waited::Cut => Outcome::NotStarted(StopReason::DeadlineNear),
                }
            }
        };
        Some(outcome)
    }
}

impl<H, S> Engine<H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
{
    /// Runs a lane on the lock-free path, in order, stopping at the first
    /// message not finished.
    pub(in crate::engine) async fn run_lane_lock_free(
        self: Arc<Self>,
        messages: Vec<Message<H::Record>>,
        batch: Arc<Batch<S>>,
    ) -> Vec<RecordOutcome> {
        let run = LockFreeRun {
            engine: &self,
            batch: &batch,
            log: LaneLog::new(messages.len()),
            group: Group::default(),
        };
        run.in_order(messages).await
    }
}
