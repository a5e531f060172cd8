//! The locking path's requests, batched across a batch's lanes: claims
//! ([`Store::claim_many`]) and fenced writes without an effect (direct
//! completions, failures, releases: [`Store::write_fenced`]). What the lanes
//! hand in at about the same moment goes together ([`Gather`]), in lots of
//! what the batch sizer allows now (within the store's batch), side by
//! side; each lot's answer teaches the sizer. Every claim and write is
//! still judged on its own: a conflict is settled alone, a fence that
//! fails fails for its own write only.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{Semaphore, oneshot};
use tokio::task::JoinSet;

use super::gather::Gather;
use super::lease::Leases;
use super::sizing::{Answer, Sizer};
use crate::store::{Claim, ClaimOutcome, FencedWrite, Lease, Store, StoreError, requests};

/// A claim's answer, once settled.
pub(super) type ClaimAnswer = oneshot::Receiver<Result<ClaimOutcome, StoreError>>;

/// A fenced write's answer (see [`Store::write_fenced`]).
pub(super) type WriteAnswer = oneshot::Receiver<Result<u64, StoreError>>;

type Handed<T, A> = (T, oneshot::Sender<Result<A, StoreError>>);

/// What the engine's batched requests share: the store, the bound on
/// requests in flight, the sizer of their lots, the batch's leases.
struct Sender<S> {
    store: S,
    permits: Arc<Semaphore>,
    sizer: Arc<Sizer>,
    leases: Arc<Leases>,
}

/// A batch's gatherers of claims and of fenced writes.
pub(super) struct Batched {
    claims: Arc<Gather<Handed<Claim, ClaimOutcome>>>,
    writes: Arc<Gather<Handed<(Lease, FencedWrite), u64>>>,
}

impl Batched {
    pub fn new<S: Store>(
        store: S,
        permits: Arc<Semaphore>,
        sizer: Arc<Sizer>,
        leases: Arc<Leases>,
    ) -> Self {
        let sender = Arc::new(Sender {
            store,
            permits,
            sizer,
            leases,
        });
        let claims = {
            let sender = Arc::clone(&sender);
            Gather::new(Arc::new(move |handed| {
                let sender = Arc::clone(&sender);
                Box::pin(async move {
                    sender
                        .in_lots(handed, |sender, lot| async move { sender.claim(lot).await })
                        .await;
                })
            }))
        };
        let writes = Gather::new(Arc::new(move |handed| {
            let sender = Arc::clone(&sender);
            Box::pin(async move {
                sender
                    .in_lots(handed, |sender, lot| async move { sender.write(lot).await })
                    .await;
            })
        }));
        Self { claims, writes }
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
    /// Sends `handed` in lots of the sizer's size, side by side.
    async fn in_lots<T, A, F, Fut>(self: Arc<Self>, handed: Vec<Handed<T, A>>, send: F)
    where
        T: std::marker::Send + 'static,
        A: std::marker::Send + 'static,
        F: Fn(Arc<Self>, Vec<Handed<T, A>>) -> Fut,
        Fut: Future<Output = ()> + std::marker::Send + 'static,
    {
        let size = self.sizer.limit().min(S::MAX_BATCH).max(1);
        let mut sends = JoinSet::new();
        let mut handed = handed.into_iter().peekable();
        while handed.peek().is_some() {
            let lot: Vec<_> = handed.by_ref().take(size).collect();
            sends.spawn(requests::inherit(send(Arc::clone(&self), lot)));
        }
        while sends.join_next().await.is_some() {}
    }

    /// One lot of claims; a lease acquired is held (renewed) at once.
    async fn claim(&self, lot: Vec<Handed<Claim, ClaimOutcome>>) {
        let (claims, senders): (Vec<Claim>, Vec<_>) = lot.into_iter().unzip();
        let senders = Mutex::new(senders.into_iter().map(Some).collect::<Vec<_>>());
        let overloaded = AtomicBool::new(false);
        let _permit = self.permits.acquire().await;
        let sent = Instant::now();
        self.store
            .claim_many(&claims, |i, outcome| {
                match &outcome {
                    Ok(ClaimOutcome::Acquired(lease) | ClaimOutcome::TakenOver(lease)) => {
                        self.leases.hold(lease);
                    }
                    Err(err) if err.is_retryable() => overloaded.store(true, Ordering::Relaxed),
                    _ => {}
                }
                let sender = senders.lock().unwrap_or_else(|p| p.into_inner())[i].take();
                let Some(sender) = sender else { return };
                // A lane that stopped waiting never hears of its lease: not
                // renewed, it ends by itself.
                if let Err(Ok(ClaimOutcome::Acquired(lease) | ClaimOutcome::TakenOver(lease))) =
                    sender.send(outcome)
                {
                    self.leases.release(&lease.pk);
                }
            })
            .await;
        self.observe(claims.len(), sent, overloaded.into_inner());
    }

    /// One lot of fenced writes.
    async fn write(&self, lot: Vec<Handed<(Lease, FencedWrite), u64>>) {
        let (writes, senders): (Vec<_>, Vec<_>) = lot.into_iter().unzip();
        let _permit = self.permits.acquire().await;
        let sent = Instant::now();
        let answers = self.store.write_fenced(&writes).await;
        let overloaded = answers
            .iter()
            .any(|answer| answer.as_ref().is_err_and(StoreError::is_retryable));
        self.observe(writes.len(), sent, overloaded);
        for (sender, answer) in senders.into_iter().zip(answers) {
            let _ = sender.send(answer);
        }
    }

    fn observe(&self, records: usize, sent: Instant, overloaded: bool) {
        let answer = if overloaded {
            Answer::Overloaded
        } else {
            Answer::Served
        };
        self.sizer.observe(records, sent.elapsed(), answer);
    }
}
