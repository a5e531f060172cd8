//! The life of one message: claim, run under a renewed lease, record.

use std::time::Duration;

use tracing::Instrument as _;

use crate::clock::duration_ms;
use crate::store::{ClaimOutcome, ClaimRequest, Lease, Store, StoreError, StoredItem};

use super::cache::Completed;
use super::deadline::Deadline;
use super::footprint::Footprint;
use super::handler::{ConditionFailure, FencingToken, HandlerError, RecordHandler};
use super::lease::{Held, hold};
use super::{Engine, Outcome, Work};

impl<H, S> Engine<H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
{
    /// One message on its own: claim, run, record, one after the other (a
    /// duplicate handed to the handler's `on_duplicate`). `deadline` bounds
    /// the lease and cuts the work.
    pub async fn run_once(&self, work: &Work<H::Record>, deadline: Deadline) -> Outcome {
        let outcome = self.claim_and_run(work, deadline).await;
        self.replayed(work, outcome).await
    }

    /// Claim, run, record; a duplicate comes back as [`Outcome::Duplicate`]
    /// for the caller to hand to the handler, once.
    pub(super) async fn claim_and_run(
        &self,
        work: &Work<H::Record>,
        deadline: Deadline,
    ) -> Outcome {
        match self
            .claim(
                &work.key,
                &work.payload_hash,
                &work.origin,
                work.holder.as_deref(),
                deadline,
            )
            .await
        {
            Ok(lease) => self.work(work, lease, deadline).await,
            Err(outcome) => outcome,
        }
    }

    /// Claims a message's key: the lease to do its work, or the outcome
    /// that makes the work unnecessary or impossible now. (The payload itself
    /// is not needed: claims made ahead do not copy it.)
    /// A key held by another worker whose lease ends while records may
    /// still start is waited for and claimed again (taken over if that
    /// worker crashed, a duplicate if it finished).
    pub(super) async fn claim(
        &self,
        key: &str,
        payload_hash: &str,
        origin: &str,
        holder: Option<&str>,
        deadline: Deadline,
    ) -> Result<Lease, Outcome> {
        loop {
            let claim = {
                let _permit = self.permits.acquire().await;
                self.store
                    .claim(ClaimRequest {
                        key,
                        payload_hash,
                        origin: Some(origin),
                        lease_cap_ms: deadline.lease_cap_ms(),
                        holder,
                    })
                    .await
            };
            return match claim {
                Ok(ClaimOutcome::Acquired(lease) | ClaimOutcome::TakenOver(lease)) => Ok(lease),
                Ok(ClaimOutcome::Duplicate(item)) => {
                    let completed = Completed::new(&item.payload_hash, item.result.as_deref());
                    let result = completed.result.clone();
                    self.cache.insert(key, completed, item.expires_at_s);
                    Err(Outcome::Duplicate { result })
                }
                Ok(ClaimOutcome::InProgress(item)) => match self.lease_wait(&item, deadline) {
                    Some(wait) => {
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                    None => Err(Outcome::InProgress),
                },
                Ok(ClaimOutcome::PayloadMismatch(_)) => Err(Outcome::PayloadMismatch),
                Ok(ClaimOutcome::OtherScope(item)) => Err(self.other_scope(item)),
                Ok(ClaimOutcome::PreviouslyFailed(item)) => {
                    Err(Outcome::PreviouslyFailed { error: item.error })
                }
                Err(err) => Err(store_failure(err)),
            };
        }
    }

    /// A key another scope holds: refused, naming both scopes.
    pub(super) fn other_scope(&self, item: StoredItem) -> Outcome {
        Outcome::OtherScope {
            theirs: item.scope.unwrap_or_default(),
            ours: self.store.config().scope.clone(),
        }
    }

    /// How long to wait for another worker's lease on a key to end, if it
    /// ends while records of this invocation may still start: a crashed
    /// container's key is then taken over here, instead of the record being
    /// reported (and redelivered at once, again and again) until the event
    /// source mapping's retries run out and it lands in the on-failure
    /// destination although nothing is wrong with it. `None` without a
    /// known deadline, or when the lease outlives the invocation.
    pub(super) fn lease_wait(&self, item: &StoredItem, deadline: Deadline) -> Option<Duration> {
        let now = self.store.now_ms();
        // Just past the lease's end (the takeover condition is strict), with
        // a little spread so that waiting takers do not all come at once.
        let left = item.lock_expires_at_ms?.saturating_sub(now) + 1 + now % 20;
        deadline
            .may_start_at(crate::clock::now_ms() + left)
            .then(|| Duration::from_millis(left))
    }

    /// Runs the business logic under `lease` and records its outcome.
    pub(super) async fn work(
        &self,
        work: &Work<H::Record>,
        lease: Lease,
        deadline: Deadline,
    ) -> Outcome {
        let _permit = self.permits.acquire().await;
        let lease = match self.refresh(lease, deadline).await {
            Ok(lease) => lease,
            Err(outcome) => return outcome,
        };
        let token = FencingToken::from(&lease);
        let run = self
            .handler
            .handle(&token, &work.record)
            .instrument(work.span.clone());
        let origin = work.origin.as_str();
        let (completion, lease) = match hold(&self.store, lease, deadline, run, origin).await {
            Held::Finished {
                value: Ok(completion),
                lease,
            } => (completion, lease),
            Held::Finished {
                value: Err(error),
                lease,
            } => {
                return self.settle_failure(&lease, error, origin).await;
            }
            Held::LockLost => {
                tracing::warn!(
                    origin,
                    version = token.version,
                    "lock lost: the work was stopped and is not recorded"
                );
                return Outcome::LockLost;
            }
            Held::Cut { lease } => {
                self.release(&lease, origin).await;
                return Outcome::TimedOut;
            }
        };
        if let Some(error) = completion.refusal() {
            return self.settle_failure(&lease, error, origin).await;
        }
        let policy = completion.on_condition_failure;
        // The work's effect, if any, happened outside the store.
        let direct = completion.writes.is_empty() && completion.increments.is_empty();
        let result = completion.result.as_deref();
        let recorded = {
            let footprint = Footprint::of(
                completion.writes.iter().map(S::touched),
                &completion.increments,
            );
            // Never in flight with another commit touching its items.
            let _hold = self.items.hold([&footprint]).await;
            self.store
                .complete(&lease, result, completion.effects())
                .await
        };
        match recorded {
            Ok(expires_at_s) => {
                let completed = Completed::new(&work.payload_hash, result);
                let result = completed.result.clone();
                self.cache.insert(&work.key, completed, expires_at_s);
                Outcome::Processed {
                    version: lease.version,
                    result,
                }
            }
            // Nothing was written: the effect's own condition decides.
            Err(err @ StoreError::EffectConditionFailed { .. }) => {
                let error = err.to_string();
                let error = match policy {
                    ConditionFailure::Permanent => HandlerError::Permanent(error),
                    ConditionFailure::Retryable => HandlerError::Retryable(error),
                };
                self.settle_failure(&lease, error, origin).await
            }
            Err(err @ StoreError::TooManyWrites { .. }) => {
                self.settle_failure(&lease, HandlerError::Permanent(err.to_string()), origin)
                    .await
            }
            // Direct mode's window: done, but not recorded as done.
            Err(err) if direct => Outcome::Unrecorded(err),
            Err(err) => store_failure(err),
        }
    }

    /// A lease claimed ahead may have waited for its turn: with less than
    /// half a lock timeout left, it is renewed (fenced) before the work starts.
    async fn refresh(&self, lease: Lease, deadline: Deadline) -> Result<Lease, Outcome> {
        let lock_timeout = duration_ms(self.store.config().lock_timeout);
        let now = self.store.now_ms();
        if lease.lock_expires_at_ms >= now + lock_timeout / 2 {
            return Ok(lease);
        }
        let wanted = now + lock_timeout;
        let until = deadline
            .lease_cap_ms()
            .map_or(wanted, |cap| wanted.min(cap));
        self.store
            .extend(&lease, until)
            .await
            .map_err(store_failure)
    }

    /// Records a failed attempt: FAILED for good, or released for a retry.
    async fn settle_failure(&self, lease: &Lease, error: HandlerError, origin: &str) -> Outcome {
        match error {
            HandlerError::Permanent(error) => match self.store.fail(lease, &error).await {
                Ok(()) => Outcome::Failed { error },
                Err(err) => store_failure(err),
            },
            HandlerError::Retryable(error) => {
                self.release(lease, origin).await;
                Outcome::Retrying { error }
            }
        }
    }

    /// Makes the key claimable at once; if that fails the lease still ends
    /// by itself, and the record is reported either way. Logged by the
    /// message's origin: log lines never carry keys.
    pub(super) async fn release(&self, lease: &Lease, origin: &str) {
        if let Err(err) = self.store.release(lease).await {
            tracing::warn!(origin, error = %err, "could not release the key");
        }
    }
}

pub(super) fn store_failure(err: StoreError) -> Outcome {
    match err {
        StoreError::LockLost { .. } => Outcome::LockLost,
        err => Outcome::StoreFailed(err),
    }
}
