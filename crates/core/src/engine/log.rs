//! A lane's outcomes, in the lane's order although they may be known out
//! of it (a completion still on its way while the next message runs): each
//! message takes a [`Ticket`] at its turn and its outcome fills it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::store::Store;

use super::{Batch, Outcome, RecordOutcome, StopReason};

/// A message's place in its lane's outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ticket(usize);

/// The outcomes of a lane so far, and why it stopped starting messages.
pub(super) struct LaneLog {
    /// In order, every one before the first still unknown.
    known: Vec<RecordOutcome>,
    /// From the first still unknown on.
    waiting: VecDeque<Option<RecordOutcome>>,
    pub stop: Option<StopReason>,
}

impl LaneLog {
    pub fn new(len: usize) -> Self {
        Self {
            known: Vec::with_capacity(len),
            waiting: VecDeque::new(),
            stop: None,
        }
    }

    /// Why the next message must not start, if so: the lane's own stop, or
    /// the batch's (deadline near, DynamoDB down).
    pub fn stop_reason<S: Store>(&mut self, batch: &Batch<S>) -> Option<StopReason> {
        self.stop = self.stop.or_else(|| batch.guard.stop_reason());
        self.stop
    }

    /// Why a computed commit must not be sent, if so: the lane's own stop,
    /// or the store down. Near the deadline it still goes: its work is done
    /// and one request finishes it (the safety margin is for that).
    pub fn stop_before_commit<S: Store>(&self, batch: &Batch<S>) -> Option<StopReason> {
        match self.stop {
            None | Some(StopReason::DeadlineNear) => batch
                .guard
                .is_store_down()
                .then_some(StopReason::StoreUnavailable),
            own => own,
        }
    }

    /// The next message's place.
    pub fn reserve(&mut self) -> Ticket {
        self.waiting.push_back(None);
        Ticket(self.known.len() + self.waiting.len() - 1)
    }

    /// Records the outcome of the message at `ticket`. One not done
    /// (finished, or parked) stops the lane at once, whatever is still
    /// unknown before it; the store unavailable stops the whole batch (fail
    /// closed).
    pub fn resolve<S: Store>(
        &mut self,
        ticket: Ticket,
        outcome: Outcome,
        started: Instant,
        batch: &Batch<S>,
    ) {
        if let Outcome::StoreFailed(err) | Outcome::Unrecorded(err) = &outcome
            && err.is_retryable()
        {
            tracing::error!(error = %err, "store unavailable: failing closed, no further record of this batch starts");
            batch.guard.store_failed();
        }
        if !outcome.is_done(batch.parking) {
            self.stop = self.stop.or(Some(StopReason::EarlierRecordUnfinished));
        }
        let slot = self.waiting.get_mut(ticket.0 - self.known.len());
        if let Some(slot) = slot {
            *slot = Some(RecordOutcome {
                outcome,
                elapsed: started.elapsed(),
            });
        }
        while let Some(Some(_)) = self.waiting.front() {
            self.known.extend(self.waiting.pop_front().flatten());
        }
    }

    /// Records the next message's outcome.
    pub fn push<S: Store>(&mut self, outcome: Outcome, started: Instant, batch: &Batch<S>) {
        let ticket = self.reserve();
        self.resolve(ticket, outcome, started, batch);
    }

    /// The outcomes, the messages never looked at reported as not started.
    pub fn finish<T>(mut self, rest: impl Iterator<Item = T>) -> Vec<RecordOutcome> {
        let reason = self.stop.unwrap_or(StopReason::EarlierRecordUnfinished);
        let not_started = || RecordOutcome {
            outcome: Outcome::NotStarted(reason),
            elapsed: Duration::ZERO,
        };
        // Every ticket is filled before a lane finishes; one that was not
        // is reported, so nothing is lost.
        let waiting = std::mem::take(&mut self.waiting);
        self.known.extend(
            waiting
                .into_iter()
                .map(|slot| slot.unwrap_or_else(not_started)),
        );
        self.known.extend(rest.map(|_| not_started()));
        self.known
    }
}
