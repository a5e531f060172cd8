//! What the store's answer to a chunk's commit means for the chunk:
//! committed, cut again (before the refused message, the refused one
//! alone), sent again in halves, or failed.

use std::collections::{HashMap, VecDeque};

use crate::engine::lock_free::Planned;
use crate::store::{CommitOutcome, StoreError};

/// What becomes of a chunk after its commit's answer.
pub(super) enum Answered {
    /// Every member's COMPLETED item is written, to expire at this time.
    Committed(u64),
    /// Nothing was written: the chunk goes back, cut to these sizes.
    Split(VecDeque<usize>),
    /// The store may or may not have applied it (timed out, throttled,
    /// unreachable): sent again, in halves.
    Resend(StoreError),
    /// Failed: its first member with this error, the others go back.
    Failed(StoreError),
}

/// What `result`, the answer to the commit of `chunk`, means for it.
pub(super) fn answered<R, E>(
    chunk: &[Planned<R, E>],
    result: Result<CommitOutcome, StoreError>,
) -> Answered {
    match result {
        Ok(CommitOutcome::Committed { expires_at_s, .. }) => Answered::Committed(expires_at_s),
        // Nothing was written. The ones before the refused message commit
        // together again, then the refused one alone.
        Ok(CommitOutcome::KeyTaken { index, .. } | CommitOutcome::EffectRefused { index, .. }) => {
            Answered::Split(before_and_alone(index))
        }
        // A merged increment overdraws: the messages before the first that
        // would be refused alone commit together, then that one alone
        // (without the numbers found: the first).
        Ok(CommitOutcome::IncrementRefused { item, current }) => {
            let refused = current.and_then(|current| first_refused(chunk, &item, current));
            Answered::Split(before_and_alone(refused.unwrap_or(0)))
        }
        // E.g. the request grew too large: the first alone, then the rest
        // together again.
        Err(StoreError::Rejected { .. }) => Answered::Split(VecDeque::from([1])),
        Err(err) if err.is_retryable() && chunk.len() > 1 => Answered::Resend(err),
        Err(err) => Answered::Failed(err),
    }
}

/// The sizes of a chunk `len` long cut in halves.
pub(super) fn halves(len: usize) -> VecDeque<usize> {
    let half = len / 2;
    VecDeque::from([half, len - half])
}

/// The messages before `index` together (if any), then message `index`
/// alone.
fn before_and_alone(index: usize) -> VecDeque<usize> {
    [index, 1].into_iter().filter(|&n| n > 0).collect()
}

/// Which message of `chunk`, applied alone after the ones before it, a
/// floor of `item` refuses, starting from the numbers `current`; `None` if
/// none would be (the numbers changed since).
fn first_refused<R, E>(
    chunk: &[Planned<R, E>],
    item: &str,
    mut current: HashMap<String, i128>,
) -> Option<usize> {
    chunk.iter().position(|planned| {
        let mut after = current.clone();
        let accepted = planned
            .completion
            .increments
            .iter()
            .filter(|increment| increment.item() == item)
            .all(|increment| increment.apply(&mut after));
        current = after;
        !accepted
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_chunk_is_cut_before_the_refused_message_then_alone() {
        assert_eq!(before_and_alone(0), [1]);
        assert_eq!(before_and_alone(3), [3, 1]);
        assert_eq!(halves(5), [2, 3]);
        assert_eq!(halves(2), [1, 1]);
    }
}
