//! A group's members not committed yet, in order, and the sizes the next
//! chunks are cut to: a refused chunk goes back in front of them, to be
//! sent again cut as its refusal says (`split.rs`).

use std::collections::VecDeque;

use crate::engine::lock_free::Planned;

/// The members of a group still to commit, and how the next chunks are cut.
pub(super) struct Chunks<R, E> {
    /// The members left, in the lane's order.
    members: VecDeque<Planned<R, E>>,
    /// The sizes of the next chunks, when a refusal planned them; with none
    /// planned, all the members left commit together.
    plan: VecDeque<usize>,
}

impl<R, E> Chunks<R, E> {
    /// All of `members`, none planned.
    pub(super) fn new(members: Vec<Planned<R, E>>) -> Self {
        Self {
            members: members.into(),
            plan: VecDeque::new(),
        }
    }

    /// Whether every member has been taken.
    pub(super) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The next chunk: as many members as planned (one at least), or all
    /// those left. Called with members left.
    pub(super) fn next(&mut self) -> Vec<Planned<R, E>> {
        let take = self
            .plan
            .pop_front()
            .unwrap_or(self.members.len())
            .clamp(1, self.members.len());
        self.members.drain(..take).collect()
    }

    /// Puts a refused `chunk` back in front, the next chunks cut to `sizes`
    /// (what was planned before is dropped).
    pub(super) fn split(&mut self, chunk: Vec<Planned<R, E>>, sizes: VecDeque<usize>) {
        self.plan = sizes;
        self.put_back(chunk);
    }

    /// Puts `chunk` back in front, in order, the plan kept.
    pub(super) fn put_back(&mut self, chunk: Vec<Planned<R, E>>) {
        for planned in chunk.into_iter().rev() {
            self.members.push_front(planned);
        }
    }

    /// Takes every member left, in order.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = Planned<R, E>> + '_ {
        self.members.drain(..)
    }
}
