//! A claimed message on the locking path, stage by stage: its work run
//! under its renewed lease (refreshed first if the heartbeat fell behind),
//! a failure settled (FAILED, or released for a retry), a completion
//! written remembered. A lane takes its messages through these stages with
//! their claims and completions batched (`lane.rs`); a message on its own
//! takes them one request at a time (`alone.rs`). The lock-free path runs
//! its handler and settles its failures here too.

use std::future::Future;
use std::pin::Pin;

use tracing::Instrument as _;

use crate::clock::duration_ms;
use crate::store::outbox::{Message, Pending};
use crate::store::{Lease, Store};

use super::cache::Completed;
use super::deadline::Deadline;
use super::handler::{FencingToken, HandlerError, RecordHandler};
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
    /// Runs the business logic under `lease` (renewed by `leases`'
    /// heartbeat): the completion to record, or how it ended otherwise.
    pub(super) async fn run_claimed(
        &self,
        work: &Work<H::Record>,
        lease: Lease,
        deadline: Deadline,
        leases: &Leases,
    ) -> Ran<S::Effect> {
        let _permit = self.pacing.permit().await;
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
}
