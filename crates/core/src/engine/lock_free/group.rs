//! A lane's consecutive planned messages, and which of them may share one
//! transaction ([`Footprint::join`]): distinct items or increments of one
//! item, within the store's limits and the number of messages the sizer
//! allows now.

use std::time::Instant;

use crate::engine::coalesce::FirstCopy;
use crate::engine::footprint::{Footprint, Limits};
use crate::engine::log::Ticket;
use crate::engine::{Completion, FencingToken, Work};
use crate::store::Lease;

/// A message whose effect is computed and not yet committed.
pub(in crate::engine) struct Planned<R, E> {
    pub work: Work<R>,
    pub token: FencingToken,
    pub completion: Completion<E>,
    /// The items its effect touches.
    pub footprint: Footprint,
    /// Set for the first copy of its key in the batch: later copies wait
    /// for its outcome.
    pub first_copy: Option<FirstCopy>,
    pub started: Instant,
    /// Its place in the lane's outcomes.
    pub ticket: Ticket,
    /// The locking path: the lease its key is held by (its completion is
    /// fenced on it). `None`: a new key, the lock-free path.
    pub held: Option<Lease>,
}

/// Consecutive planned messages that commit in one transaction.
pub(in crate::engine) struct Group<R, E> {
    pub members: Vec<Planned<R, E>>,
    pub footprint: Footprint,
}

impl<R, E> Default for Group<R, E> {
    fn default() -> Self {
        Self {
            members: Vec::new(),
            footprint: Footprint::default(),
        }
    }
}

impl<R, E> Group<R, E> {
    /// Adds `planned` if it may share this group's transaction within
    /// `limits`; gives it back if not. An empty group takes any message.
    pub fn add(&mut self, planned: Planned<R, E>, limits: Limits) -> Option<Planned<R, E>> {
        if !self.footprint.join(&planned.footprint, limits) {
            return Some(planned);
        }
        self.members.push(planned);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Increment;
    use crate::store::increment::item_name;

    /// DynamoDB's limits: 100 actions, 4 MB.
    fn limits(records: usize) -> Limits {
        Limits {
            records,
            actions: 100,
            bytes: 4_000_000,
        }
    }

    /// An opaque write of the account `account` of `table`, named as a
    /// store's `touched` names it.
    fn update(table: &str, account: &str) -> Option<String> {
        Some(item_name(table, "account_id", account))
    }

    /// A write whose item the store cannot tell (a DynamoDB Put).
    fn put() -> Option<String> {
        None
    }

    fn footprint(writes: &[Option<String>], increments: &[Increment]) -> Footprint {
        Footprint::of(writes.iter().cloned(), increments)
    }

    fn joins(group: &Footprint, next: &Footprint, limit: usize) -> bool {
        group.clone().join(next, limits(limit))
    }

    fn credit(account: &str, by: i64) -> Increment {
        Increment::new("ledger", "account_id", account).add_at_least("balance_cents", by, 0)
    }

    #[test]
    fn a_transaction_never_writes_an_item_twice_and_keeps_its_limits() {
        let group = footprint(&[update("ledger", "a")], &[]);
        assert!(!joins(
            &group,
            &footprint(&[update("ledger", "a")], &[]),
            10
        ));
        assert!(joins(&group, &footprint(&[update("other", "a")], &[]), 10));
        assert!(joins(&group, &footprint(&[update("ledger", "b")], &[]), 10));
        assert!(!joins(&group, &footprint(&[update("ledger", "b")], &[]), 1));
        // A write whose item is unknown commits alone.
        assert!(!joins(&group, &footprint(&[put()], &[]), 10));
        assert!(joins(&Footprint::default(), &footprint(&[put()], &[]), 10));
        // 100 actions at most: 49 writes + 1 item already, 50 more is one too many.
        let wide = |prefix: &str, n: usize| {
            let writes: Vec<_> = (0..n)
                .map(|i| update("ledger", &format!("{prefix}{i}")))
                .collect();
            footprint(&writes, &[])
        };
        assert!(joins(&wide("x", 49), &wide("y", 49), 10));
        assert!(!joins(&wide("x", 49), &wide("y", 50), 10));
        // 4 MB at most: records weighing 3 MB each do not share one.
        let weighing = |bytes| footprint(&[], &[]).weighing(bytes);
        assert!(!joins(&weighing(3_000_000), &weighing(3_000_000), 10));
        assert!(joins(&weighing(3_000_000), &weighing(900_000), 10));
    }

    #[test]
    fn increments_of_one_item_share_a_transaction_as_one_action() {
        let mut group = Footprint::default();
        for _ in 0..99 {
            assert!(group.join(&footprint(&[], &[credit("hot", 1)]), limits(100)));
        }
        // 99 items + 1 merged update: full.
        assert_eq!(group.actions(), 100);
        assert!(!joins(&group, &footprint(&[], &[credit("hot", 1)]), 100));
        // An opaque write of an incremented item never joins its increments.
        let hot = footprint(&[], &[credit("a", 1)]);
        assert!(!joins(&hot, &footprint(&[update("ledger", "a")], &[]), 10));
        assert!(!joins(&footprint(&[update("ledger", "a")], &[]), &hot, 10));
        // A sum beyond i64 does not merge.
        let huge = footprint(&[], &[credit("a", i64::MAX)]);
        assert!(!joins(&hot, &huge, 10));
    }
}
