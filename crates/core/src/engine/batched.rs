//! The locking path's requests, batched across a batch's lanes: claims
//! ([`Store::claim_many`]) and fenced writes without an effect (direct
//! completions, failures, releases, claims taken back:
//! [`Store::write_fenced`]; the heartbeat's renewals go apart, `lease.rs`).
//! What the lanes hand in at about the same moment goes together
//! ([`Gather`]), in lots of the size the engine's pacing of batched
//! requests allows now (within the store's batch), side by side as its
//! window of records in flight admits them (`pacing.rs`); each lot's answer
//! teaches both. Every claim and write is still judged on its own: a
//! conflict is settled alone, a fence that fails fails for its own write
//! only. One the store did not answer (timed out, throttled, unreachable) is
//! sent again (`resend.rs`), and recognises its own earlier write.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;

use super::deadline::Deadline;
use super::gather::Gather;
use super::lease::Leases;
use super::pacing::Pacing;
use super::resend;
use super::sizing::Answer;
use crate::store::{
    Claim, ClaimOutcome, FencedWrite, Lease, Store, StoreError, distinct_rounds, requests,
};

/// A claim's answer, once settled.
pub(super) type ClaimAnswer = oneshot::Receiver<Result<ClaimOutcome, StoreError>>;

/// A fenced write's answer (see [`Store::write_fenced`]).
pub(super) type WriteAnswer = oneshot::Receiver<Result<u64, StoreError>>;

type Handed<T, A> = (T, oneshot::Sender<Result<A, StoreError>>);

/// Items the store did not answer, each with its error: sent again, or
/// answered with the error once no re-send may go.
type Unanswered<T, A> = Vec<(Handed<T, A>, StoreError)>;

/// What the engine's batched requests share: the store, the engine's
/// pacing (their lots sized and their records in flight bounded by its
/// `batches` pace), the batch's leases and deadline.
struct Sender<S> {
    store: S,
    pacing: Arc<Pacing>,
    leases: Arc<Leases>,
    deadline: Deadline,
    /// Lots waiting to be sent again (the store did not answer them).
    unanswered: Arc<watch::Sender<usize>>,
}

/// A batch's gatherers of claims and of fenced writes.
#[derive(Clone)]
pub(super) struct Batched {
    claims: Arc<Gather<Handed<Claim, ClaimOutcome>>>,
    writes: Arc<Gather<Handed<(Lease, FencedWrite), u64>>>,
    unanswered: Arc<watch::Sender<usize>>,
}

impl Batched {
    pub fn new<S: Store>(
        store: S,
        pacing: Arc<Pacing>,
        leases: Arc<Leases>,
        deadline: Deadline,
    ) -> Self {
        let unanswered = Arc::new(watch::channel(0).0);
        let sender = Arc::new(Sender {
            store,
            pacing,
            leases,
            deadline,
            unanswered: Arc::clone(&unanswered),
        });
        let claims = {
            let sender = Arc::clone(&sender);
            Gather::new(Arc::new(move |handed| {
                let sender = Arc::clone(&sender);
                Box::pin(async move {
                    sender
                        .in_lots(handed, claimed_key, |sender, lot| async move {
                            sender.claim(lot).await
                        })
                        .await;
                })
            }))
        };
        let writes = Gather::new(Arc::new(move |handed| {
            let sender = Arc::clone(&sender);
            Box::pin(async move {
                sender
                    .in_lots(handed, written_item, |sender, lot| async move {
                        sender.write(lot).await
                    })
                    .await;
            })
        }));
        Self {
            claims,
            writes,
            unanswered,
        }
    }

    /// Whether requests of the batch wait to be sent again: the store did
    /// not answer them. A lane then starts no new work until its own are
    /// answered (a direct completion that cannot be written is an effect
    /// done and not recorded: none more while the store may be down).
    pub fn unanswered(&self) -> bool {
        *self.unanswered.borrow() > 0
    }

    /// Resolves once no request of the batch waits to be sent again.
    pub async fn answered(&self) {
        let _ = self
            .unanswered
            .subscribe()
            .wait_for(|lots| *lots == 0)
            .await;
    }

    /// Claims `claim`'s key (distinct from every other claim in flight);
    /// the answer comes once settled. Claims handed in without a yield
    /// between them go together.
    pub fn claim(&self, claim: Claim) -> ClaimAnswer {
        let (sender, answer) = oneshot::channel();
        self.claims.hand_in([(claim, sender)]);
        answer
    }

    /// Writes `writes` (distinct keys), each fenced on its lease.
    pub fn write(&self, writes: Vec<(Lease, FencedWrite)>) -> Vec<WriteAnswer> {
        let (handed, answers) = handed(writes);
        self.writes.hand_in(handed);
        answers
    }

    /// Stops both flushers: the batch is gone.
    pub fn stop(&self) {
        self.claims.stop();
        self.writes.stop();
    }
}

/// The key a claim claims.
fn claimed_key(claim: &Claim) -> &str {
    &claim.key
}

/// The item a fenced write writes.
fn written_item((lease, _): &(Lease, FencedWrite)) -> &str {
    &lease.pk
}

/// Each item with the sender of its answer, and the receivers.
#[allow(clippy::type_complexity)]
fn handed<T, A>(
    items: Vec<T>,
) -> (
    Vec<Handed<T, A>>,
    Vec<oneshot::Receiver<Result<A, StoreError>>>,
) {
    items
        .into_iter()
        .map(|item| {
            let (sender, receiver) = oneshot::channel();
            ((item, sender), receiver)
        })
        .unzip()
}

impl<S: Store> Sender<S> {
    /// Sends `handed` in lots of the sizer's size, side by side: in rounds
    /// of distinct items (named by `item`), in the order handed in, since a
    /// request writes an item once. Those the store did not answer go
    /// again, after a pause, while `resend::pause` allows once their round
    /// is over; the rest are answered with their error.
    async fn in_lots<T, A, F, Fut>(
        self: Arc<Self>,
        handed: Vec<Handed<T, A>>,
        item: fn(&T) -> &str,
        send: F,
    ) where
        T: std::marker::Send + 'static,
        A: std::marker::Send + 'static,
        F: Fn(Arc<Self>, Vec<Handed<T, A>>) -> Fut,
        Fut: Future<Output = Unanswered<T, A>> + std::marker::Send + 'static,
    {
        let mut handed = handed;
        let mut sent = 0;
        loop {
            let size = self.pacing.batches.sizer.limit().min(S::MAX_BATCH).max(1);
            let rounds = distinct_rounds(handed.iter().map(|(t, _)| item(t)));
            let mut slots: Vec<Option<Handed<T, A>>> = handed.into_iter().map(Some).collect();
            let mut again = Vec::new();
            for round in rounds {
                let mut sends = JoinSet::new();
                let mut items = round.into_iter().filter_map(|i| slots[i].take()).peekable();
                while items.peek().is_some() {
                    let lot: Vec<_> = items.by_ref().take(size).collect();
                    sends.spawn(requests::inherit(send(Arc::clone(&self), lot)));
                }
                while let Some(joined) = sends.join_next().await {
                    again.extend(joined.unwrap_or_default());
                }
            }
            if again.is_empty() {
                return;
            }
            // Decided once the round is over: its sends may have taken a
            // whole operation timeout.
            let Some(pause) = resend::pause(sent, &self.deadline) else {
                for ((_, answer), err) in again {
                    let _ = answer.send(Err(err));
                }
                return;
            };
            tracing::warn!(
                requests = again.len(),
                resend = sent + 1,
                "batched store requests failed: sent again"
            );
            self.unanswered.send_modify(|lots| *lots += 1);
            tokio::time::sleep(pause).await;
            self.unanswered.send_modify(|lots| *lots -= 1);
            handed = again.into_iter().map(|(handed, _)| handed).collect();
            sent += 1;
        }
    }

    /// One lot of claims; a lease acquired is held (renewed) at once. The
    /// claims the store did not answer come back unanswered, to be sent
    /// again (each with its owner: one that was written recognises itself).
    async fn claim(
        &self,
        lot: Vec<Handed<Claim, ClaimOutcome>>,
    ) -> Unanswered<Claim, ClaimOutcome> {
        let (claims, senders): (Vec<Claim>, Vec<_>) = lot.into_iter().unzip();
        let senders = Mutex::new(senders.into_iter().map(Some).collect::<Vec<_>>());
        let again = Mutex::new(Vec::new());
        let overloaded = AtomicBool::new(false);
        let request = self.store.claim_many(&claims, |i, outcome| {
            let sender = senders
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)[i]
                .take();
            let Some(sender) = sender else { return };
            let outcome = match outcome {
                Err(err) if err.is_retryable() => {
                    overloaded.store(true, Ordering::Relaxed);
                    let mut again = again
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    again.push(((claims[i].clone(), sender), err));
                    return;
                }
                outcome => outcome,
            };
            if let Ok(ClaimOutcome::Acquired(lease) | ClaimOutcome::TakenOver(lease)) = &outcome {
                self.leases.hold(lease);
            }
            // A lane that stopped waiting never hears of its lease: not
            // renewed, it ends by itself.
            if let Err(Ok(ClaimOutcome::Acquired(lease) | ClaimOutcome::TakenOver(lease))) =
                sender.send(outcome)
            {
                self.leases.release(&lease);
            }
        });
        let pacing = &self.pacing;
        pacing
            .send(&pacing.batches, claims.len(), request, |()| {
                served_unless(overloaded.load(Ordering::Relaxed))
            })
            .await;
        again
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One lot of fenced writes; those the store did not answer come back
    /// unanswered, to be sent again (a completion or failure that was made
    /// recognises itself: the version and owner it wrote).
    async fn write(
        &self,
        lot: Vec<Handed<(Lease, FencedWrite), u64>>,
    ) -> Unanswered<(Lease, FencedWrite), u64> {
        let (writes, senders): (Vec<_>, Vec<_>) = lot.into_iter().unzip();
        let pacing = &self.pacing;
        let answers = pacing
            .send(
                &pacing.batches,
                writes.len(),
                self.store.write_fenced(&writes),
                |answers| {
                    served_unless(
                        answers
                            .iter()
                            .any(|answer| answer.as_ref().is_err_and(StoreError::is_retryable)),
                    )
                },
            )
            .await;
        let mut again = Vec::new();
        for ((write, sender), answer) in writes.into_iter().zip(senders).zip(answers) {
            match answer {
                Err(err) if err.is_retryable() => again.push(((write, sender), err)),
                answer => {
                    let _ = sender.send(answer);
                }
            }
        }
        again
    }
}

/// What a batched request's answer teaches: overloaded if the store turned
/// any of its items away (throttled, timed out), served otherwise.
fn served_unless(overloaded: bool) -> Answer {
    if overloaded {
        Answer::Overloaded
    } else {
        Answer::Served
    }
}
