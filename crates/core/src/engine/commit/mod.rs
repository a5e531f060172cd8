//! How a group's completions reach the store, and how a refused group
//! splits. A lane's group (`lock_free/group.rs`, on both paths) commits in
//! one transaction, with the groups of other lanes ready at once when the
//! combiner takes it (`combine.rs`); otherwise in chunks (`chunks.rs`): all
//! its members together at first, and after a refusal the members before
//! the refused one together again, then the refused one alone, which says
//! what became of it (`split.rs`). A chunk whose commit met an overloaded
//! store is sent again in halves, after a pause. The lane's stop is
//! checked before every chunk.

mod chunks;
mod split;

use crate::store::{Store, StoreError};

use super::handler::RecordHandler;
use super::lock_free::{Group, Planned, new_commit};
use super::log::LaneLog;
use super::outcome::store_failure;
use super::resend;
use super::{Batch, Engine, StopReason};

use chunks::Chunks;
use split::{Answered, answered, halves};

impl<H, S> Engine<H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
{
    /// Commits a group's messages in order: together while they can, the
    /// one a shared transaction refused alone. Records their outcomes. (The
    /// locking path's groups too: their items completed under their
    /// leases.)
    pub(super) async fn commit_group(
        &self,
        group: Group<H::Record, S::Effect>,
        log: &mut LaneLog,
        batch: &Batch<S>,
    ) {
        if !group.members.is_empty()
            && batch.combiner.accepts(group.members.len())
            && log.stop_before_commit(batch).is_none()
        {
            let commits = group.members.iter().map(new_commit).collect();
            if let Some(expires_at_s) = batch.combiner.commit(commits, group.footprint).await {
                for planned in group.members {
                    self.committed(planned, expires_at_s, log, batch);
                }
                return;
            }
        }
        let mut chunks = Chunks::new(group.members);
        // A group whose commit met an overloaded store is sent again, in
        // halves (see below).
        let mut resent = 0;
        let deadline = batch.guard.deadline();
        while !chunks.is_empty() {
            if let Some(reason) = log.stop_before_commit(batch) {
                self.abandon_all(chunks, reason, log, batch).await;
                return;
            }
            let mut chunk = chunks.next();
            if chunk.len() == 1
                && let Some(planned) = chunk.pop()
            {
                // Alone, the commit says exactly what became of it.
                let (started, ticket) = (planned.started, planned.ticket);
                let outcome = self.commit_alone(planned, batch).await;
                log.resolve(ticket, outcome, started, batch);
                continue;
            }
            let result = {
                let _hold = self.items.hold(chunk.iter().map(|p| &p.footprint)).await;
                self.commit_sized(chunk.iter().map(new_commit).collect())
                    .await
            };
            match answered(&chunk, result) {
                Answered::Committed(expires_at_s) => {
                    for planned in chunk {
                        self.committed(planned, expires_at_s, log, batch);
                    }
                }
                Answered::Split(sizes) => chunks.split(chunk, sizes),
                // Sending it again cannot apply an effect twice: a commit
                // that was applied is refused as a whole (its keys are
                // taken, its fences moved on) and each of its messages then
                // finds its own write (a new key's item under its owner, a
                // held key's completed at its version and owner). In
                // halves, after a pause (`resend.rs`): an overloaded store
                // (a burst of big transactions queued past the client's
                // timeout) has had the time to drain; a store that fails
                // every send fails closed.
                Answered::Resend(err) => match resend::pause(resent, &deadline) {
                    Some(pause) => {
                        tracing::warn!(
                            // Where this line was logged before commit/ was cut
                            // out of it: log filters name it.
                            target: "exactly_once_core::engine::lock_free",
                            records = chunk.len(),
                            error = %err,
                            resend = resent + 1,
                            "group commit failed: sent again in halves"
                        );
                        tokio::time::sleep(pause).await;
                        resent += 1;
                        let sizes = halves(chunk.len());
                        chunks.split(chunk, sizes);
                    }
                    None => self.fail_first(chunk, err, &mut chunks, log, batch),
                },
                Answered::Failed(err) => self.fail_first(chunk, err, &mut chunks, log, batch),
            }
        }
    }

    /// The lane stopped before the members left were committed: each is
    /// abandoned and recorded.
    async fn abandon_all(
        &self,
        mut chunks: Chunks<H::Record, S::Effect>,
        reason: StopReason,
        log: &mut LaneLog,
        batch: &Batch<S>,
    ) {
        for planned in chunks.drain() {
            let outcome = self.abandoned(&planned, reason, batch).await;
            log.resolve(planned.ticket, outcome, planned.started, batch);
        }
    }

    /// A chunk whose commit failed with `err`: its first member is recorded
    /// with it, the others go back to be committed.
    fn fail_first(
        &self,
        chunk: Vec<Planned<H::Record, S::Effect>>,
        err: StoreError,
        chunks: &mut Chunks<H::Record, S::Effect>,
        log: &mut LaneLog,
        batch: &Batch<S>,
    ) {
        let mut chunk = chunk.into_iter();
        if let Some(first) = chunk.next() {
            let outcome = self.unsettled(&first, store_failure(err), batch);
            log.resolve(first.ticket, outcome, first.started, batch);
        }
        chunks.put_back(chunk.collect());
    }
}
