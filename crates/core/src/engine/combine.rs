//! Group commit across lanes (lock-free path). Lanes whose groups are ready
//! at the same moment commit them in ONE transaction when their items are
//! distinct: in `key` and `none` ordering a lane often holds one record, so
//! this is what lets their records share transactions too. Nothing changes
//! for a lane: its group commits whole or not at all, at one instant. If a
//! shared transaction is not committed (refused, failed), every lane in it
//! commits its group on its own, which then says what happened.

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::task::JoinSet;

use super::footprint::{Footprint, ItemLocks, Limits};
use super::gather::Gather;
use super::pacing::Pacing;
use super::sizing::Answer;
use crate::store::{Commit, CommitOutcome, Store, requests};

/// One lane's group, waiting to be combined.
pub(super) struct Submission<E> {
    pub commits: Vec<Commit<E>>,
    /// The items its effects touch.
    pub footprint: Footprint,
    /// `Some(expires_at_s)` once committed with others; `None`: commit it
    /// alone.
    pub done: oneshot::Sender<Option<u64>>,
}

/// What sends shared transactions.
struct Sender<S: Store> {
    store: S,
    /// How many records a shared transaction may hold now, and how many
    /// may be in flight: the engine's groups' pace.
    pacing: Arc<Pacing>,
    items: Arc<ItemLocks>,
}

/// Shared by the lanes of one batch.
pub(super) struct Combiner<S: Store> {
    gather: Arc<Gather<Submission<S::Effect>>>,
    pacing: Arc<Pacing>,
}

impl<S: Store> Combiner<S> {
    pub fn new(store: S, pacing: Arc<Pacing>, items: Arc<ItemLocks>) -> Self {
        let sender = Arc::new(Sender {
            store,
            pacing: Arc::clone(&pacing),
            items,
        });
        let gather = Gather::new(Arc::new(move |waiting| {
            let sender = Arc::clone(&sender);
            Box::pin(async move { sender.send_all(waiting).await })
        }));
        Self { gather, pacing }
    }

    /// Stops the flusher: its batch is gone (the invocation ended or was
    /// dropped), so no shared transaction may start or go on after it.
    pub fn stop(&self) {
        self.gather.stop();
    }

    /// Whether a group of `records` may share a transaction with others.
    pub fn accepts(&self, records: usize) -> bool {
        records < self.pacing.groups.sizer.limit()
    }

    /// Commits `commits` with other lanes' groups if it can: `Some` with the
    /// items' `expires_at` when committed, `None` when the caller must commit
    /// them itself (no partner, or the shared transaction was not committed).
    pub async fn commit(
        &self,
        commits: Vec<Commit<S::Effect>>,
        footprint: Footprint,
    ) -> Option<u64> {
        let (done, answer) = oneshot::channel();
        self.gather.hand_in([Submission {
            commits,
            footprint,
            done,
        }]);
        answer.await.ok().flatten()
    }
}

impl<S: Store> Sender<S> {
    /// The groups handed in at once, in shared transactions side by side.
    async fn send_all(self: Arc<Self>, waiting: Vec<Submission<S::Effect>>) {
        let mut sends = JoinSet::new();
        for shared in pack(waiting, Limits::of::<S>(self.pacing.groups.sizer.limit())) {
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

    /// One shared transaction; every lane in it learns whether it committed.
    async fn send(&self, shared: Vec<Submission<S::Effect>>) {
        let mut commits = Vec::new();
        let mut answers = Vec::new();
        let _hold = self.items.hold(shared.iter().map(|s| &s.footprint)).await;
        for submission in shared {
            commits.extend(submission.commits);
            answers.push(submission.done);
        }
        let (pacing, records) = (&self.pacing, commits.len());
        let result = pacing
            .send(
                &pacing.groups,
                records,
                self.store.commit(commits),
                Answer::of,
            )
            .await;
        let committed = match result {
            Ok(CommitOutcome::Committed { expires_at_s, .. }) => Some(expires_at_s),
            _ => None,
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
