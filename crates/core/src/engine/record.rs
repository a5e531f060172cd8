//! The life of one message on the locking path: claim, run under a renewed
//! lease, record. A lane's messages go through the same steps with their
//! claims and completions batched (`lane.rs`); a message on its own (a
//! later copy whose first copy did not finish, [`Engine::run_once`]) takes
//! them one request at a time.

use std::future::Future;
use std::pin::Pin;

use tracing::Instrument as _;

use crate::clock::duration_ms;
use crate::store::outbox::{Message, Pending};
use crate::store::{ClaimRequest, Lease, Store, StoreError};

use super::cache::Completed;
use super::deadline::Deadline;
use super::footprint::Footprint;
use super::handler::{ConditionFailure, FencingToken, HandlerError, RecordHandler};
use super::judge::{Found, Judged, LeaseWait, NOT_FROM_A_CLAIM};
use super::lease::{Held, Leases, hold};
use super::outcome::store_failure;
use super::resend::resending;
use super::{Completion, Engine, Outcome, Work};

/// What running a claimed message's business logic came to.
pub(super) enum Ran<E> {
    /// It finished with `completion` to record, under `lease`.
    Completed(Completion<E>, Lease),
    /// It ended otherwise, already settled (a failure recorded, the lock
    /// lost, the work cut and the key released).
    Settled(Outcome),
}

/// The handler's work for one record, boxed (see [`Engine::handling`]).
pub(super) type Handling<'a, E> =
    Pin<Box<dyn Future<Output = Result<Completion<E>, HandlerError>> + Send + 'a>>;

impl<H, S> Engine<H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
{
    /// The handler's work for `work`'s record under `token`, in the record's
    /// span, boxed: however deeply a handler nests its own futures, the
    /// engine's stay within the compiler's recursion limit in the user's
    /// crate (an async block's layout is computed through every future it
    /// holds).
    pub(super) fn handling<'a>(
        &'a self,
        token: &'a FencingToken,
        work: &'a Work<H::Record>,
    ) -> Handling<'a, S::Effect> {
        Box::pin(
            self.handler
                .handle(token, &work.record)
                .instrument(work.span.clone()),
        )
    }

    /// One message on its own: claim, run, record, one after the other (a
    /// duplicate handed to the handler's `on_duplicate`), then its messages
    /// sent, as a batch's are. `deadline` bounds the lease and cuts the
    /// work.
    pub async fn run_once(&self, work: &Work<H::Record>, deadline: Deadline) -> Outcome {
        let leases = Leases::default();
        let outcome = tokio::select! {
            outcome = self.claim_and_run(work, deadline, &leases) => outcome,
            () = leases.beat(&self.store, &self.batch_sizer, deadline) => unreachable!("the heartbeat never ends"),
        };
        let outcome = self.replayed(work, outcome).await;
        let elapsed = std::time::Duration::ZERO;
        let mut alone = [((), super::RecordOutcome { outcome, elapsed })];
        super::deliver::deliver(&self.store, self.sender(), &mut alone, deadline).await;
        let [(_, recorded)] = alone;
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
                let _permit = self.permits.acquire().await;
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

    /// Runs the business logic under `lease` (renewed by `leases`'
    /// heartbeat): the completion to record, or how it ended otherwise.
    pub(super) async fn run_claimed(
        &self,
        work: &Work<H::Record>,
        lease: Lease,
        deadline: Deadline,
        leases: &Leases,
    ) -> Ran<S::Effect> {
        let _permit = self.permits.acquire().await;
        let lease = match self.refresh(leases.latest(&lease), deadline, leases).await {
            Ok(lease) => lease,
            Err(outcome) => return Ran::Settled(outcome),
        };
        let token = FencingToken::from(&lease);
        let run = self.handling(&token, work);
        let origin = work.origin.as_str();
        match hold(leases, &lease, deadline, run).await {
            Held::Finished {
                value: Ok(completion),
                lease,
            } => match completion.refusal(self.sender()) {
                Some(error) => {
                    Ran::Settled(self.settle_failure(&lease, error, origin, deadline).await)
                }
                None => Ran::Completed(completion, lease),
            },
            Held::Finished {
                value: Err(error),
                lease,
            } => Ran::Settled(self.settle_failure(&lease, error, origin, deadline).await),
            Held::LockLost => {
                tracing::warn!(
                    origin,
                    version = token.version,
                    "lock lost: the work was stopped and is not recorded"
                );
                Ran::Settled(Outcome::LockLost)
            }
            Held::Cut { lease } => {
                self.release(&lease, origin, deadline).await;
                Ran::Settled(Outcome::TimedOut)
            }
        }
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

    /// A completion of `key` written under `lease`, with `messages` on its
    /// item: remembered in the cache once nothing is left to send.
    pub(super) fn remember(
        &self,
        key: &str,
        payload_hash: &str,
        result: Option<&str>,
        messages: &[Message],
        lease: &Lease,
        expires_at_s: u64,
    ) -> Outcome {
        let completed = Completed::new(payload_hash, result);
        let result = completed.result.clone();
        let unsent = Pending::emitted(&lease.pk, &lease.owner, messages);
        // A key with messages still to send is no duplicate to skip yet.
        if unsent.is_none() {
            self.cache.insert(key, completed, expires_at_s);
        }
        Outcome::Processed {
            version: lease.version,
            result,
            unsent,
        }
    }

    /// A lease claimed ahead has waited for its turn, renewed by the
    /// heartbeat; with less than a quarter of a lock timeout left (the
    /// heartbeat failed), it is renewed (fenced) before the work starts.
    async fn refresh(
        &self,
        lease: Lease,
        deadline: Deadline,
        leases: &Leases,
    ) -> Result<Lease, Outcome> {
        let lock_timeout = duration_ms(self.store.config().lock_timeout);
        let now = self.store.now_ms();
        if lease.lock_expires_at_ms >= now + lock_timeout / 4 {
            return Ok(lease);
        }
        let wanted = now + lock_timeout;
        let until = deadline
            .lease_cap_ms()
            .map_or(wanted, |cap| wanted.min(cap));
        let renewed = resending("extend", deadline, || self.store.extend(&lease, until))
            .await
            .map_err(store_failure)?;
        leases.hold(&renewed);
        Ok(renewed)
    }

    /// Records a failed attempt: FAILED for good, or released for a retry.
    pub(super) async fn settle_failure(
        &self,
        lease: &Lease,
        error: HandlerError,
        origin: &str,
        deadline: Deadline,
    ) -> Outcome {
        match error {
            HandlerError::Permanent(error) => {
                // Sent again, a failure made recognises itself.
                match resending("fail", deadline, || self.store.fail(lease, &error)).await {
                    Ok(()) => Outcome::Failed { error },
                    Err(err) => store_failure(err),
                }
            }
            HandlerError::Retryable(error) => {
                self.release(lease, origin, deadline).await;
                Outcome::Retrying { error }
            }
        }
    }

    /// Makes the key claimable at once; if that fails the lease still ends
    /// by itself, and the record is reported either way. Logged by the
    /// message's origin: log lines never carry keys.
    pub(super) async fn release(&self, lease: &Lease, origin: &str, deadline: Deadline) {
        if let Err(err) = resending("release", deadline, || self.store.release(lease)).await {
            tracing::warn!(origin, error = %err, "could not release the key");
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
