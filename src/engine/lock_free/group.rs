//! A lane's consecutive planned messages, and which of them may share one
//! transaction: distinct items, at most 100 actions and the configured
//! number of messages.

use std::collections::HashSet;
use std::time::Instant;

use tokio::sync::watch;

use crate::engine::Work;
use crate::engine::coalesce::Settled;
use crate::engine::{Completion, FencingToken};

/// A message whose effect is computed and not yet committed.
pub(super) struct Planned<R, E> {
    pub work: Work<R>,
    pub token: FencingToken,
    pub completion: Completion<E>,
    /// The items its writes touch, or None if one is unknown (e.g. a
    /// DynamoDB Put, whose key attributes the store cannot tell): it then
    /// commits alone.
    pub touches: Option<Vec<String>>,
    /// Set for the first copy of its key in the batch: later copies wait
    /// for its outcome.
    pub first_copy: Option<watch::Sender<Option<Settled>>>,
    pub started: Instant,
}

/// Consecutive planned messages that commit in one transaction.
pub(super) struct Group<R, E> {
    pub members: Vec<Planned<R, E>>,
    pub touched: HashSet<String>,
    actions: usize,
}

impl<R, E> Default for Group<R, E> {
    fn default() -> Self {
        Self {
            members: Vec::new(),
            touched: HashSet::new(),
            actions: 0,
        }
    }
}

impl<R, E> Group<R, E> {
    /// Whether `planned` may share this group's transaction: room left (at
    /// most `limit` messages, `max_effects` + 1 actions), and no item touched
    /// twice (DynamoDB refuses that, and order would matter).
    pub fn admits(&self, planned: &Planned<R, E>, limit: usize, max_effects: usize) -> bool {
        let Some(touches) = &planned.touches else {
            return self.members.is_empty();
        };
        self.members.is_empty()
            || (self.members.len() < limit
                && self.members.iter().all(|m| m.touches.is_some())
                && self.actions + 1 + touches.len() <= max_effects + 1
                && touches.iter().all(|item| !self.touched.contains(item)))
    }

    pub fn add(&mut self, planned: Planned<R, E>) {
        self.actions += 1 + planned.completion.writes.len();
        self.touched
            .extend(planned.touches.iter().flatten().cloned());
        self.members.push(planned);
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};

    use super::*;
    use crate::store::Store;
    use crate::store::dynamodb::{DynamoDbStore, MAX_EFFECT_WRITES};

    fn update(table: &str, account: &str) -> TransactWriteItem {
        let update = Update::builder()
            .table_name(table)
            .key("account_id", AttributeValue::S(account.into()))
            .update_expression("ADD balance_cents :one")
            .build()
            .expect("an update");
        TransactWriteItem::builder().update(update).build()
    }

    fn put(table: &str) -> TransactWriteItem {
        let put = Put::builder()
            .table_name(table)
            .item("account_id", AttributeValue::S("a".into()))
            .build()
            .expect("a put");
        TransactWriteItem::builder().put(put).build()
    }

    fn planned(writes: Vec<TransactWriteItem>) -> Planned<(), TransactWriteItem> {
        Planned {
            touches: writes.iter().map(DynamoDbStore::touched).collect(),
            work: Work {
                key: "k".into(),
                payload_hash: "h".into(),
                origin: "t-0@0".into(),
                record: (),
            },
            token: FencingToken {
                key: "k".into(),
                version: 1,
                owner: "o".into(),
            },
            completion: Completion::transactional("r", writes),
            first_copy: None,
            started: Instant::now(),
        }
    }

    #[test]
    fn a_group_never_touches_an_item_twice_and_keeps_its_limits() {
        let mut group = Group::default();
        group.add(planned(vec![update("ledger", "a")]));
        assert!(!group.admits(&planned(vec![update("ledger", "a")]), 10, MAX_EFFECT_WRITES));
        assert!(group.admits(&planned(vec![update("other", "a")]), 10, MAX_EFFECT_WRITES));
        assert!(group.admits(&planned(vec![update("ledger", "b")]), 10, MAX_EFFECT_WRITES));
        assert!(!group.admits(&planned(vec![update("ledger", "b")]), 1, MAX_EFFECT_WRITES));
        // A Put's key is unknown: it commits alone.
        assert!(!group.admits(&planned(vec![put("ledger")]), 10, MAX_EFFECT_WRITES));
        assert!(Group::default().admits(&planned(vec![put("ledger")]), 10, MAX_EFFECT_WRITES));
        // 100 actions at most: 49 writes + 1 item already, 50 more is one too many.
        let wide = |prefix: &str, n: usize| {
            planned(
                (0..n)
                    .map(|i| update("ledger", &format!("{prefix}{i}")))
                    .collect(),
            )
        };
        let mut group = Group::default();
        group.add(wide("x", 49));
        assert!(group.admits(&wide("y", 49), 10, MAX_EFFECT_WRITES));
        assert!(!group.admits(&wide("y", 50), 10, MAX_EFFECT_WRITES));
    }
}
