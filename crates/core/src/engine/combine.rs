//! Group commit across lanes (lock-free path). Lanes whose groups are ready
//! at the same moment commit them in ONE transaction when their items are
//! distinct: in `key` and `none` ordering a lane often holds one record, so
//! this is what lets their records share transactions too. Nothing changes
//! for a lane: its group commits whole or not at all, at one instant. If a
//! shared transaction is not committed (refused, failed), every lane in it
//! commits its group on its own, which then says what happened.

use std::sync::{Arc, Mutex};

use tokio::sync::{Semaphore, oneshot};
use tokio::task::{AbortHandle, JoinSet};

use super::footprint::{Footprint, ItemLocks, Limits};
use super::sizing::{Answer, GroupSizer};
use crate::store::{CommitOutcome, NewCommit, Store, requests};

/// Times the flusher lets other tasks run before it takes the queue, so
/// that lanes ready at the same moment meet.
const LINGER_YIELDS: usize = 3;

/// One lane's group, waiting to be combined.
pub(super) struct Submission<E> {
    pub commits: Vec<NewCommit<E>>,
    /// The items its effects touch.
    pub footprint: Footprint,
    /// `Some(expires_at_s)` once committed with others; `None`: commit it
    /// alone.
    pub done: oneshot::Sender<Option<u64>>,
}

/// The groups waiting, and whether a flusher is on its way for them.
struct Queue<E> {
    waiting: Vec<Submission<E>>,
    flushing: bool,
    /// The latest flusher, stopped with its batch ([`Combiner::stop`]).
    flusher: Option<AbortHandle>,
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Self {
            waiting: Vec::new(),
            flushing: false,
            flusher: None,
        }
    }
}

/// Shared by the lanes of one batch.
pub(super) struct Combiner<S: Store> {
    queue: Mutex<Queue<S::Effect>>,
    store: S,
    permits: Arc<Semaphore>,
    items: Arc<ItemLocks>,
    /// How many records a shared transaction may hold now, and what it
    /// learns from each.
    sizer: Arc<GroupSizer>,
}

impl<S: Store> Combiner<S> {
    pub fn new(
        store: S,
        permits: Arc<Semaphore>,
        items: Arc<ItemLocks>,
        sizer: Arc<GroupSizer>,
    ) -> Arc<Self> {
        Arc::new(Self {
            queue: Mutex::default(),
            store,
            permits,
            items,
            sizer,
        })
    }

    /// Stops the flusher: its batch is gone (the invocation ended or was
    /// dropped), so no shared transaction may start or go on after it.
    pub fn stop(&self) {
        if let Some(flusher) = self.lock().flusher.take() {
            flusher.abort();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue<S::Effect>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a group of `records` may share a transaction with others.
    pub fn accepts(&self, records: usize) -> bool {
        records < self.sizer.limit()
    }

    /// Commits `commits` with other lanes' groups if it can: `Some` with the
    /// items' `expires_at` when committed, `None` when the caller must commit
    /// them itself (no partner, or the shared transaction was not committed).
    pub async fn commit(
        self: &Arc<Self>,
        commits: Vec<NewCommit<S::Effect>>,
        footprint: Footprint,
    ) -> Option<u64> {
        let (done, answer) = oneshot::channel();
        let start_flusher = {
            let mut queue = self.lock();
            queue.waiting.push(Submission {
                commits,
                footprint,
                done,
            });
            !std::mem::replace(&mut queue.flushing, true)
        };
        if start_flusher {
            let flusher = tokio::spawn(requests::inherit(Arc::clone(self).flush())).abort_handle();
            self.lock().flusher = Some(flusher);
        }
        answer.await.ok().flatten()
    }

    /// Sends what is waiting, shared transactions side by side, until
    /// nothing is.
    async fn flush(self: Arc<Self>) {
        loop {
            for _ in 0..LINGER_YIELDS {
                tokio::task::yield_now().await;
            }
            let waiting = {
                let mut queue = self.lock();
                if queue.waiting.is_empty() {
                    queue.flushing = false;
                    return;
                }
                std::mem::take(&mut queue.waiting)
            };
            let mut sends = JoinSet::new();
            for shared in pack(waiting, Limits::of::<S>(self.sizer.limit())) {
                if shared.len() < 2 {
                    // No partner: the lane commits alone, without delay.
                    for submission in shared {
                        let _ = submission.done.send(None);
                    }
                    continue;
                }
                let this = Arc::clone(&self);
                sends.spawn(requests::inherit(async move { this.send(shared).await }));
            }
            while sends.join_next().await.is_some() {}
        }
    }

    /// One shared transaction; every lane in it learns whether it committed.
    async fn send(&self, shared: Vec<Submission<S::Effect>>) {
        let mut commits = Vec::new();
        let mut answers = Vec::new();
        let _hold = self.items.hold(shared.iter().map(|s| &s.footprint)).await;
        for submission in shared {
            commits.extend(submission.commits);
            answers.push(submission.done);
        }
        let committed = {
            let _permit = self.permits.acquire().await;
            let (records, sent) = (commits.len(), std::time::Instant::now());
            let result = self.store.commit_new(commits).await;
            self.sizer
                .observe(records, sent.elapsed(), Answer::of(&result));
            match result {
                Ok(CommitOutcome::Committed { expires_at_s, .. }) => Some(expires_at_s),
                _ => None,
            }
        };
        for answer in answers {
            // A lane that stopped waiting (its task ended) needs no answer.
            let _ = answer.send(committed);
        }
    }
}

/// Groups submissions into shared transactions, first fit: each within
/// `limits`, an item written by at most one of them (an incremented one by
/// any number, merged).
fn pack<E>(waiting: Vec<Submission<E>>, limits: Limits) -> Vec<Vec<Submission<E>>> {
    let mut bins: Vec<(Footprint, Vec<Submission<E>>)> = Vec::new();
    for submission in waiting {
        // `join` changes a bin only when the submission fits it.
        let fits = bins
            .iter_mut()
            .position(|(footprint, _)| footprint.join(&submission.footprint, limits));
        match fits {
            Some(bin) => bins[bin].1.push(submission),
            None => bins.push((submission.footprint.clone(), vec![submission])),
        }
    }
    bins.into_iter().map(|(_, members)| members).collect()
}
