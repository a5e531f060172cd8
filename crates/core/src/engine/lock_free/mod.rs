//! The lock-free path ([`CommitPath::LockFree`]): no claim, no lock, no
//! lease. A message's effect (the handler's writes, computed without side
//! effects) commits in ONE transaction with its COMPLETED item, conditioned
//! on the key being new. Consecutive messages of a lane whose writes touch
//! distinct items share one transaction ("group commit"): all or nothing,
//! which gives the same state as committing them one after another. When a
//! shared transaction is refused, the messages before the refused one commit
//! again together and the refused one alone, which says what it was
//! (`commit/`). Groups of several lanes ready at once may share a
//! transaction too (`combine.rs`).
//!
//! [`CommitPath::LockFree`]: super::CommitPath::LockFree

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;

use crate::store::outbox::Pending;

use crate::store::{
    ClaimRequest, Commit, CommitOutcome, Conditional, Status, Store, StoreError, StoredItem,
    increment,
};

mod group;
mod lane;

pub(super) use group::{Group, Planned};

use super::cache::Completed;
use super::coalesce::{FirstCopy, Settled, Turn};
use super::footprint::{Footprint, Limits};
use super::handler::{Completion, ConditionFailure, FencingToken, HandlerError, RecordHandler};
use super::judge::{Found, Judged, LeaseWait, NOT_FROM_AN_ITEM};
use super::log::{LaneLog, Ticket};
use super::outcome::store_failure;
use super::resend::resending;
use super::sizing::Answer;
use super::{Batch, Engine, Message, Outcome, StopReason, Work};

/// A claim-free commit finds the key's item gone (expired) and tries again
/// at most this often.
const COMMIT_ROUNDS: usize = 4;

/// Why a message has no effect to commit.
enum Unplanned {
    /// The handler refused it.
    Refused(HandlerError),
    /// Its key cannot be stored.
    InvalidKey(StoreError),
    /// The handler was still running when the deadline came near.
    Cut,
}

/// What a message of a lane needs next.
enum Next<R, E> {
    /// Unreadable: settled without a write.
    Invalid(String),
    /// Known COMPLETED before the batch, with the stored result.
    Known(Work<R>, Option<Arc<str>>),
    /// Planned: may join the lane's next transaction.
    Planned(Box<Planned<R, E>>),
    /// A later copy of a key in flight: waits for the first copy.
    Copy(Work<R>, watch::Receiver<Option<Settled>>),
    /// No effect to commit; settled after the messages before it.
    Unplanned(Work<R>, Unplanned, FirstCopy),
}

impl<H, S> Engine<H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
{
    /// Settles what needs no write, or computes the message's effect.
    async fn plan_next(
        &self,
        message: Message<H::Record>,
        batch: &Batch<S>,
        started: Instant,
        ticket: Ticket,
    ) -> Next<H::Record, S::Effect> {
        let work = match message {
            Ok(work) => work,
            Err(reason) => return Next::Invalid(reason),
        };
        if let Some(result) = self.known_duplicate(&work, batch) {
            return Next::Known(work, result);
        }
        let first_copy = match batch.in_flight.turn(&work.key) {
            Turn::Later(first) => return Next::Copy(work, first),
            Turn::First(first) => first,
        };
        match self.plan(work, started, batch, ticket).await {
            Ok(planned) => Next::Planned(Box::new(Planned {
                first_copy: Some(first_copy),
                ..planned
            })),
            Err((work, why)) => Next::Unplanned(work, why, first_copy),
        }
    }

    /// Runs the handler for `work` (cut at the deadline): its effect, or why
    /// there is none.
    async fn plan(
        &self,
        work: Work<H::Record>,
        started: Instant,
        batch: &Batch<S>,
        ticket: Ticket,
    ) -> Result<Planned<H::Record, S::Effect>, (Work<H::Record>, Unplanned)> {
        let pk = match self.store.pk(&work.key) {
            Ok(pk) => pk,
            Err(err) => return Err((work, Unplanned::InvalidKey(err))),
        };
        let token = FencingToken {
            key: pk,
            version: 1,
            owner: work.new_owner(),
        };
        let deadline = batch.guard.deadline();
        let planned = tokio::select! {
            planned = self.handling(&token, &work) => planned,
            () = deadline.cut() => return Err((work, Unplanned::Cut)),
        };
        let planned = planned.and_then(|completion| match completion.refusal(self.sender()) {
            Some(error) => Err(error),
            None => Ok(completion),
        });
        match planned {
            Ok(completion) => Ok(Planned {
                footprint: Footprint::of_completion::<S, _>(&work, &completion),
                work,
                token,
                completion,
                first_copy: None,
                started,
                ticket,
                held: None,
            }),
            Err(error) => Err((work, Unplanned::Refused(error))),
        }
    }

    /// A message with no effect to commit: FAILED for a permanent error,
    /// reported otherwise.
    async fn refused(&self, work: &Work<H::Record>, why: Unplanned, batch: &Batch<S>) -> Outcome {
        match why {
            Unplanned::Refused(HandlerError::Permanent(error)) => {
                self.fail_new(work, error, batch).await
            }
            Unplanned::Refused(HandlerError::Retryable(error)) => Outcome::Retrying { error },
            Unplanned::InvalidKey(err) => Outcome::StoreFailed(err),
            Unplanned::Cut => Outcome::TimedOut,
        }
    }

    /// A later copy of a key whose first copy did not finish: on its own.
    async fn plan_and_commit(
        &self,
        work: Work<H::Record>,
        batch: &Batch<S>,
        ticket: Ticket,
    ) -> Outcome {
        match self.plan(work, Instant::now(), batch, ticket).await {
            Ok(planned) => self.commit_alone(planned, batch).await,
            Err((work, why)) => {
                let outcome = self.refused(&work, why, batch).await;
                self.replayed(&work, outcome).await
            }
        }
    }

    /// What a transaction may hold now: the sizer's records, the store's
    /// actions and bytes.
    fn limits(&self) -> Limits {
        Limits::of::<S>(self.pacing.groups.sizer.limit())
    }

    /// One transaction group, sent when the window has room for it (and a
    /// permit is free), its answer told to the sizer and the window.
    pub(super) async fn commit_sized(
        &self,
        commits: Vec<Commit<S::Effect>>,
    ) -> Result<CommitOutcome, StoreError> {
        let (pacing, records) = (&self.pacing, commits.len());
        pacing
            .send(
                &pacing.groups,
                records,
                self.store.commit(commits),
                Answer::of,
            )
            .await
    }

    /// Records a message committed with others.
    pub(super) fn committed(
        &self,
        planned: Planned<H::Record, S::Effect>,
        expires_at_s: u64,
        log: &mut LaneLog,
        batch: &Batch<S>,
    ) {
        let outcome = self.processed(&planned, expires_at_s, batch);
        announce(&planned, &outcome);
        log.resolve(planned.ticket, outcome, planned.started, batch);
    }

    /// A message whose COMPLETED item was written: remembered in the cache.
    fn processed(
        &self,
        planned: &Planned<H::Record, S::Effect>,
        expires_at_s: u64,
        batch: &Batch<S>,
    ) -> Outcome {
        let work = &planned.work;
        let token = &planned.token;
        let completed = Completed::new(&work.payload_hash, planned.completion.result.as_deref());
        let result = completed.result.clone();
        let unsent = Pending::emitted(&token.key, &token.owner, &planned.completion.messages);
        // A key with messages still to send is no duplicate to skip yet.
        if unsent.is_none() {
            self.cache.insert(&work.key, completed, expires_at_s);
        }
        self.let_go(planned, batch);
        Outcome::Processed {
            version: token.version,
            result,
            unsent,
        }
    }

    /// A held key's last write is done (or will never be): its lease is no
    /// longer renewed.
    fn let_go(&self, planned: &Planned<H::Record, S::Effect>, batch: &Batch<S>) {
        if let Some(lease) = &planned.held {
            batch.leases.release(lease);
        }
    }

    /// A message whose commit failed with `outcome`, its lease let go.
    pub(super) fn unsettled(
        &self,
        planned: &Planned<H::Record, S::Effect>,
        outcome: Outcome,
        batch: &Batch<S>,
    ) -> Outcome {
        self.let_go(planned, batch);
        announce(planned, &outcome);
        outcome
    }

    /// A planned message that will not be committed (the lane stopped): a
    /// held key is released at once, so that its redelivery need not wait
    /// for its lease to end.
    pub(super) async fn abandoned(
        &self,
        planned: &Planned<H::Record, S::Effect>,
        reason: StopReason,
        batch: &Batch<S>,
    ) -> Outcome {
        if let Some(lease) = &planned.held {
            let deadline = batch.guard.deadline();
            self.release(lease, &planned.work.origin, deadline).await;
        }
        self.unsettled(planned, Outcome::NotStarted(reason), batch)
    }

    /// Commits one message and says exactly what became of it (a duplicate
    /// handed to the handler's `on_duplicate`).
    pub(super) async fn commit_alone(
        &self,
        planned: Planned<H::Record, S::Effect>,
        batch: &Batch<S>,
    ) -> Outcome {
        let outcome = self.commit_one(&planned, batch).await;
        self.let_go(&planned, batch);
        announce(&planned, &outcome);
        self.replayed(&planned.work, outcome).await
    }

    async fn commit_one(
        &self,
        planned: &Planned<H::Record, S::Effect>,
        batch: &Batch<S>,
    ) -> Outcome {
        let work = &planned.work;
        let deadline = batch.guard.deadline();
        let mut waiting = LeaseWait::default();
        let mut rounds = 0;
        while rounds < COMMIT_ROUNDS {
            // Sent again, a commit made recognises itself (below).
            let result = resending("commit", deadline, || async {
                let _hold = self.items.hold([&planned.footprint]).await;
                self.commit_sized(vec![new_commit(planned)]).await
            })
            .await;
            let item = match result {
                Ok(CommitOutcome::Committed { expires_at_s, .. }) => {
                    return self.processed(planned, expires_at_s, batch);
                }
                Ok(CommitOutcome::KeyTaken { item, .. }) if let Some(lease) = &planned.held => {
                    // Completed already under this very lease: a commit sent
                    // again after the first was applied.
                    if let Some(item) =
                        item.filter(|item| lease.finished_as(item, Status::Completed))
                    {
                        return self.processed(planned, item.expires_at_s, batch);
                    }
                    // The fence failed: taken over, this worker is fenced
                    // out and records nothing.
                    tracing::warn!(
                        origin = work.origin,
                        version = planned.token.version,
                        "lock lost: the work is not recorded"
                    );
                    return Outcome::LockLost;
                }
                Ok(CommitOutcome::KeyTaken { item, .. }) => item,
                // Nothing was written: the effect's own condition decides.
                Ok(
                    refused @ (CommitOutcome::EffectRefused { .. }
                    | CommitOutcome::IncrementRefused { .. }),
                ) => {
                    let error = effect_refused(&planned.completion, refused).to_string();
                    let error = match planned.completion.on_condition_failure {
                        ConditionFailure::Permanent => HandlerError::Permanent(error),
                        ConditionFailure::Retryable => HandlerError::Retryable(error),
                    };
                    return self.refuse(planned, error, batch).await;
                }
                Err(err @ StoreError::TooManyWrites { .. }) => {
                    let error = HandlerError::Permanent(err.to_string());
                    return self.refuse(planned, error, batch).await;
                }
                Err(err) => return store_failure(err),
            };
            let owner = &planned.token.owner;
            match self.found(work, item, owner, &mut waiting, batch).await {
                Ok(outcome) => return outcome,
                Err(Again::Waited) => {}
                Err(Again::Expired) => rounds += 1,
            }
        }
        Outcome::StoreFailed(StoreError::Contention {
            key: planned.token.key.clone(),
        })
    }

    /// A planned message whose effect may not happen: a permanent error
    /// makes its key FAILED (a held key under its lease), a retryable one
    /// leaves it for the redelivery (a held key released).
    async fn refuse(
        &self,
        planned: &Planned<H::Record, S::Effect>,
        error: HandlerError,
        batch: &Batch<S>,
    ) -> Outcome {
        match (&planned.held, error) {
            (Some(lease), error) => {
                let deadline = batch.guard.deadline();
                self.settle_failure(lease, error, &planned.work.origin, deadline)
                    .await
            }
            (None, HandlerError::Permanent(error)) => {
                self.fail_new(&planned.work, error, batch).await
            }
            (None, HandlerError::Retryable(error)) => Outcome::Retrying { error },
        }
    }

    /// A poison message: its key becomes FAILED (if it is new), so that its
    /// redeliveries are refused without running the work.
    async fn fail_new(&self, work: &Work<H::Record>, error: String, batch: &Batch<S>) -> Outcome {
        let owner = work.new_owner();
        let deadline = batch.guard.deadline();
        let mut waiting = LeaseWait::default();
        let mut rounds = 0;
        while rounds < COMMIT_ROUNDS {
            // Sent again, a failure made recognises itself (its owner).
            let result = resending("fail", deadline, || async {
                let _permit = self.pacing.permit().await;
                self.store.fail_new(request(work), &owner, &error).await
            })
            .await;
            let item = match result {
                Ok(Conditional::Written(())) => return Outcome::Failed { error },
                Ok(Conditional::Conflict(item)) => item,
                Err(err) => return store_failure(err),
            };
            match self.found(work, item, &owner, &mut waiting, batch).await {
                Ok(outcome) => return outcome,
                Err(Again::Waited) => {}
                Err(Again::Expired) => rounds += 1,
            }
        }
        Outcome::StoreFailed(StoreError::Contention {
            key: work.key.clone(),
        })
    }

    /// What the item found under a message's key (written or not by this
    /// very attempt, under `owner`) means for it (`judge.rs`), or why to
    /// try again: the item expired, or a live lease was waited for (as
    /// `waiting` allows). An abandoned lock of the locking path is taken
    /// over by the locking path.
    async fn found(
        &self,
        work: &Work<H::Record>,
        item: Option<Box<StoredItem>>,
        owner: &str,
        waiting: &mut LeaseWait,
        batch: &Batch<S>,
    ) -> Result<Outcome, Again> {
        let found = Found::of_item(item, &self.store, &work.payload_hash, owner);
        match self.judge(&work.key, found, batch.guard.deadline(), waiting) {
            Judged::Settled(outcome) => Ok(outcome),
            Judged::Absent => Err(Again::Expired),
            Judged::WaitAndRetry(wait) => {
                tokio::time::sleep(wait).await;
                Err(Again::Waited)
            }
            Judged::TakeOver => Ok(self
                .claim_and_run(work, batch.guard.deadline(), &batch.leases)
                .await),
            Judged::Lease(_) => unreachable!("{NOT_FROM_AN_ITEM}"),
        }
    }
}

/// Why a lock-free write is tried again.
enum Again {
    /// The item found has expired: it counts as absent.
    Expired,
    /// Another worker's live lease was waited for.
    Waited,
}

/// The claim request a message's new FAILED item is written with (its
/// owner passed beside).
fn request<R>(work: &Work<R>) -> ClaimRequest<'_> {
    ClaimRequest {
        key: &work.key,
        payload_hash: &work.payload_hash,
        origin: Some(&work.origin),
        lease_cap_ms: None,
        owner: None,
    }
}

/// The commit of `planned`'s key with its effect.
pub(super) fn new_commit<R, E: Clone>(planned: &Planned<R, E>) -> Commit<E> {
    let work = &planned.work;
    Commit {
        key: work.key.clone(),
        payload_hash: work.payload_hash.clone(),
        origin: Some(work.origin.clone()),
        owner: planned.token.owner.clone(),
        result: planned.completion.result.clone(),
        effects: planned.completion.effects(),
        held: planned.held.clone(),
    }
}

/// The error of a single message's refused effect: a write's condition, or
/// a floor (the increments counted after the writes).
fn effect_refused<E>(completion: &Completion<E>, refused: CommitOutcome) -> StoreError {
    match refused {
        CommitOutcome::EffectRefused {
            effect, message, ..
        } => StoreError::EffectConditionFailed { effect, message },
        CommitOutcome::IncrementRefused { item, .. } => {
            let merged = increment::merged(&completion.increments).unwrap_or_default();
            let index = merged.iter().position(|i| i.item() == item).unwrap_or(0);
            StoreError::EffectConditionFailed {
                effect: completion.writes.len() + index,
                message: increment::BELOW_FLOOR.into(),
            }
        }
        other => StoreError::Rejected {
            operation: "commit",
            message: format!("not a refused effect: {other:?}"),
        },
    }
}

/// Tells later copies of a first copy's key how it ended.
fn announce<R, E>(planned: &Planned<R, E>, outcome: &Outcome) {
    if let Some(first_copy) = &planned.first_copy {
        first_copy.settle(Settled::new(&planned.work.payload_hash, outcome));
    }
}
