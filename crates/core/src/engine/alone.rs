//! One message on its own on the locking path: claim, run under a renewed
//! lease, record, one request at a time (a later copy whose first copy did
//! not finish, [`Engine::run_once`]; a lane's message whose key it waited
//! for, claimed again alone). Its claim is judged as a lane's (`judge.rs`);
//! its work runs, its failure is settled and its completion remembered as a
//! lane's (`record.rs`).

use crate::store::{ClaimRequest, Lease, Store, StoreError};

use super::deadline::Deadline;
use super::footprint::Footprint;
use super::handler::{ConditionFailure, HandlerError, RecordHandler};
use super::judge::{Found, Judged, LeaseWait, NOT_FROM_A_CLAIM};
use super::lease::Leases;
use super::outcome::store_failure;
use super::record::Ran;
use super::resend::resending;
use super::{Completion, Engine, Outcome, Work};

impl<H, S> Engine<H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
{
    /// One message on its own: claim, run, record, one after the other (a
    /// duplicate handed to the handler's `on_duplicate`), then its messages
    /// sent, as a batch's are. `deadline` bounds the lease and cuts the
    /// work.
    pub async fn run_once(&self, work: &Work<H::Record>, deadline: Deadline) -> Outcome {
        let leases = Leases::default();
        let outcome = tokio::select! {
            outcome = self.claim_and_run(work, deadline, &leases) => outcome,
            () = leases.beat(&self.store, &self.pacing.batches.sizer, deadline) => unreachable!("the heartbeat never ends"),
        };
        let outcome = self.replayed(work, outcome).await;
        let elapsed = std::time::Duration::ZERO;
        let mut alone = [((), super::RecordOutcome { outcome, elapsed })];
        super::deliver::deliver(&self.store, self.sender(), &mut alone, deadline).await;
        let [((), recorded)] = alone;
        recorded.outcome
    }

    /// Claim, run, record; a duplicate comes back as [`Outcome::Duplicate`]
    /// for the caller to hand to the handler, once.
    pub(super) async fn claim_and_run(
        &self,
        work: &Work<H::Record>,
        deadline: Deadline,
        leases: &Leases,
    ) -> Outcome {
        let mut waiting = LeaseWait::default();
        match self.claim(work, deadline, leases, &mut waiting).await {
            Ok(lease) => self.work(work, lease, deadline, leases).await,
            Err(outcome) => outcome,
        }
    }

    /// Claims a message's key alone: the lease to do its work (held in
    /// `leases`), or the outcome that makes the work unnecessary or
    /// impossible now. A key held by another worker whose lease ends while
    /// records may still start is waited for and claimed again (taken over
    /// if that worker crashed, a duplicate if it finished).
    pub(super) async fn claim(
        &self,
        work: &Work<H::Record>,
        deadline: Deadline,
        leases: &Leases,
        waiting: &mut LeaseWait,
    ) -> Result<Lease, Outcome> {
        // One owner for every send of the claim: a claim sent again
        // recognises its own item.
        let owner = work.new_owner();
        loop {
            let request = ClaimRequest {
                key: &work.key,
                payload_hash: &work.payload_hash,
                origin: Some(&work.origin),
                lease_cap_ms: deadline.lease_cap_ms(),
                owner: Some(&owner),
            };
            let claim = resending("claim", deadline, || async {
                let _permit = self.pacing.permit().await;
                self.store.claim(request).await
            })
            .await;
            match self.judge(&work.key, Found::of_claim(claim), deadline, waiting) {
                Judged::Lease(lease) => {
                    leases.hold(&lease);
                    return Ok(lease);
                }
                Judged::Settled(outcome) => return Err(outcome),
                Judged::WaitAndRetry(wait) => tokio::time::sleep(wait).await,
                Judged::Absent | Judged::TakeOver => unreachable!("{NOT_FROM_A_CLAIM}"),
            }
        }
    }

    /// Runs the business logic under `lease` and records its outcome, one
    /// request.
    pub(super) async fn work(
        &self,
        work: &Work<H::Record>,
        lease: Lease,
        deadline: Deadline,
        leases: &Leases,
    ) -> Outcome {
        let held = lease.clone();
        let outcome = match self.run_claimed(work, lease, deadline, leases).await {
            Ran::Settled(outcome) => outcome,
            Ran::Completed(completion, lease) => {
                self.complete(work, completion, &lease, deadline).await
            }
        };
        leases.release(&held);
        outcome
    }

    /// Records a finished work's completion under `lease`, with its effect
    /// in the same transaction.
    async fn complete(
        &self,
        work: &Work<H::Record>,
        completion: Completion<S::Effect>,
        lease: &Lease,
        deadline: Deadline,
    ) -> Outcome {
        let origin = work.origin.as_str();
        let policy = completion.on_condition_failure;
        // The work's effect, if any, happened outside the store.
        let direct = completion.is_direct();
        let result = completion.result.as_deref();
        let recorded = {
            let footprint = Footprint::of(
                completion.writes.iter().map(S::touched),
                &completion.increments,
            );
            // Never in flight with another commit touching its items.
            let _hold = self.items.hold([&footprint]).await;
            // Sent again, a completion made recognises itself (its version
            // and owner), effects included.
            resending("complete", deadline, || {
                self.store.complete(lease, result, completion.effects())
            })
            .await
        };
        match recorded {
            Ok(expires_at_s) => self.remember(
                &work.key,
                &work.payload_hash,
                result,
                &completion.messages,
                lease,
                expires_at_s,
            ),
            // Nothing was written: the effect's own condition decides.
            Err(err @ StoreError::EffectConditionFailed { .. }) => {
                let error = err.to_string();
                let error = match policy {
                    ConditionFailure::Permanent => HandlerError::Permanent(error),
                    ConditionFailure::Retryable => HandlerError::Retryable(error),
                };
                self.settle_failure(lease, error, origin, deadline).await
            }
            Err(err @ StoreError::TooManyWrites { .. }) => {
                let error = HandlerError::Permanent(err.to_string());
                self.settle_failure(lease, error, origin, deadline).await
            }
            Err(err) => unrecorded(err, direct),
        }
    }
}

/// A completion that could not be written: in direct mode the effect
/// happened all the same (its window: done, but not recorded as done).
pub(super) fn unrecorded(err: StoreError, direct: bool) -> Outcome {
    if direct {
        Outcome::Unrecorded(err)
    } else {
        store_failure(err)
    }
}
