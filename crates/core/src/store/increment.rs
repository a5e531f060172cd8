//! Commutative effects: "add N to a number of one item", optionally only
//! while the number stays at least a floor (`balance >= 0`). Unlike an
//! opaque write, increments of one item from many messages can be merged
//! into ONE update: the sum, checked so that the merged update succeeds
//! exactly when the messages, applied one after another, would all have
//! succeeded. That is what lets a hot item's messages share a transaction.
//!
//! Every backend applies an [`Increment`] in the same transaction as the
//! completion it belongs to: DynamoDB `ADD` with a condition, SQL
//! `UPDATE ... SET n = n + $1 WHERE ...`, Redis `HINCRBY` in the script.

use std::collections::HashMap;

/// The reason of a refused increment, as every backend and the engine give
/// it (never a key or an amount).
pub const BELOW_FLOOR: &str = "a number would fall below its floor";

/// One number of an increment: add `by`, and (with a floor) only if the
/// value after is at least `floor`. A missing number counts as 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Add {
    /// The numeric attribute (DynamoDB attribute, SQL column).
    pub attribute: String,
    /// What to add (negative: subtract).
    pub by: i64,
    /// The lowest value the attribute may have afterwards; `None`:
    /// unbounded.
    pub floor: Option<i64>,
}

/// A commutative effect on one item: the item named by `table` and its
/// string key (`key_name` = `key`), created if absent, its numbers added
/// to. Build it with [`Increment::new`], [`Increment::add`] and
/// [`Increment::add_at_least`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Increment {
    /// The table (DynamoDB table, SQL table, Redis hash).
    pub table: String,
    /// The name of the item's key attribute (`account_id`).
    pub key_name: String,
    /// The item's key (a string).
    pub key: String,
    /// The numbers added, each attribute at most once.
    pub adds: Vec<Add>,
}

impl Increment {
    /// An increment of the item `key_name = key` of `table`, adding nothing
    /// yet.
    pub fn new(
        table: impl Into<String>,
        key_name: impl Into<String>,
        key: impl Into<String>,
    ) -> Self {
        Self {
            table: table.into(),
            key_name: key_name.into(),
            key: key.into(),
            adds: Vec::new(),
        }
    }

    /// Also adds `by` to `attribute`, unbounded.
    pub fn add(self, attribute: impl Into<String>, by: i64) -> Self {
        self.with(attribute.into(), by, None)
    }

    /// Also adds `by` to `attribute`, refused (with the whole transaction)
    /// if the value after would be below `floor`.
    pub fn add_at_least(self, attribute: impl Into<String>, by: i64, floor: i64) -> Self {
        self.with(attribute.into(), by, Some(floor))
    }

    fn with(mut self, attribute: String, by: i64, floor: Option<i64>) -> Self {
        self.adds.push(Add {
            attribute,
            by,
            floor,
        });
        self
    }

    /// The item it touches, named as the store names items of its own
    /// writes (`table/key_name="key"`): writes on one item are never in
    /// flight together, and only increments of it may share a transaction.
    pub fn item(&self) -> String {
        item_name(&self.table, &self.key_name, &self.key)
    }

    /// This increment followed by `next` (of the same item) as ONE: the
    /// sums, each floor moved so that the merged increment is accepted
    /// exactly when both, one after the other, would be. `None` if a number
    /// would leave the range of `i64`.
    pub fn then(&self, next: &Increment) -> Option<Increment> {
        let mut merged = self.clone();
        for add in &next.adds {
            match merged
                .adds
                .iter_mut()
                .find(|a| a.attribute == add.attribute)
            {
                Some(first) => *first = first.then(add)?,
                None => merged.adds.push(add.clone()),
            }
        }
        Some(merged)
    }

    /// Applies it to `values` (attribute → number; missing: 0) as the store
    /// would: all its numbers, or, if one would fall below its floor, none
    /// (false).
    pub fn apply(&self, values: &mut HashMap<String, i128>) -> bool {
        let after: Vec<i128> = self
            .adds
            .iter()
            .map(|add| values.get(&add.attribute).copied().unwrap_or(0) + i128::from(add.by))
            .collect();
        let refused = self
            .adds
            .iter()
            .zip(&after)
            .any(|(add, after)| add.floor.is_some_and(|floor| *after < i128::from(floor)));
        if !refused {
            for (add, after) in self.adds.iter().zip(after) {
                values.insert(add.attribute.clone(), after);
            }
        }
        !refused
    }
}

impl Add {
    /// `self` then `next` on the same attribute: the sum, and the floor
    /// after the sum that stands for both floors. Before both, the value
    /// must be at least `floor₁ - by₁` and `floor₂ - by₁ - by₂`; the larger
    /// of the two, plus the sum, is the merged floor.
    fn then(&self, next: &Add) -> Option<Add> {
        let by = self.by.checked_add(next.by)?;
        let least_before = [
            self.floor.map(|f| i128::from(f) - i128::from(self.by)),
            next.floor.map(|f| i128::from(f) - i128::from(by)),
        ]
        .into_iter()
        .flatten()
        .max();
        let floor = match least_before {
            Some(least) => Some(i64::try_from(least + i128::from(by)).ok()?),
            None => None,
        };
        Some(Add {
            attribute: self.attribute.clone(),
            by,
            floor,
        })
    }

    /// The least value before the add that keeps the floor: the condition
    /// a store checks on the stored number (`n >= floor - by`).
    pub fn least_before(&self) -> Option<i128> {
        self.floor
            .map(|floor| i128::from(floor) - i128::from(self.by))
    }
}

/// The name of the item `key_name = key` of `table`, as [`Increment::item`]
/// and the stores' `touched` give it.
pub fn item_name(table: &str, key_name: &str, key: &str) -> String {
    format!("{table}/{key_name}={key:?}")
}

/// `increments`, in order, merged per item (first-appearance order): what a
/// store applies for a transaction's messages (increments adding nothing
/// left out). `None` if a sum would leave
/// the range of `i64`.
pub fn merged<'a>(increments: impl IntoIterator<Item = &'a Increment>) -> Option<Vec<Increment>> {
    let mut merged: Vec<Increment> = Vec::new();
    for increment in increments.into_iter().filter(|i| !i.adds.is_empty()) {
        let item = increment.item();
        match merged.iter_mut().find(|m| m.item() == item) {
            Some(first) => *first = first.then(increment)?,
            None => merged.push(increment.clone()),
        }
    }
    Some(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn balance(by: i64, floor: Option<i64>) -> Increment {
        let increment = Increment::new("ledger", "account_id", "a");
        match floor {
            Some(floor) => increment.add_at_least("balance", by, floor),
            None => increment.add("balance", by),
        }
    }

    /// Whether applying `increments` one by one from `start` all succeed.
    fn one_by_one(start: i128, increments: &[Increment]) -> bool {
        let mut values = HashMap::from([("balance".to_owned(), start)]);
        increments.iter().all(|i| i.apply(&mut values))
    }

    #[test]
    fn a_merged_increment_is_accepted_exactly_when_every_step_would_be() {
        let sequences = [
            vec![balance(-5, Some(0)), balance(10, Some(0))],
            vec![balance(10, Some(0)), balance(-5, Some(0))],
            vec![balance(-5, None), balance(3, Some(0))],
            vec![
                balance(7, Some(5)),
                balance(-4, Some(0)),
                balance(-9, Some(-3)),
            ],
            vec![balance(1, None), balance(2, None)],
        ];
        for sequence in &sequences {
            let merged = merged(sequence).expect("no overflow");
            assert_eq!(merged.len(), 1);
            for start in -20..=20 {
                let mut values = HashMap::from([("balance".to_owned(), start)]);
                assert_eq!(
                    merged[0].apply(&mut values),
                    one_by_one(start, sequence),
                    "{sequence:?} from {start}"
                );
            }
        }
        // The sum, wherever it is accepted.
        let merged = merged(&sequences[1]).expect("no overflow");
        assert_eq!(merged[0].adds[0].by, 5);
    }

    #[test]
    fn distinct_items_and_attributes_stay_apart_and_overflow_is_refused() {
        let a = Increment::new("ledger", "account_id", "a").add("balance", 1);
        let b = Increment::new("ledger", "account_id", "b").add("balance", 2);
        let count = Increment::new("ledger", "account_id", "a").add("count", 1);
        let all = merged([&a, &b, &count]).expect("no overflow");
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].adds.len(), 2, "two numbers of item a");
        assert_eq!(a.item(), r#"ledger/account_id="a""#);
        let huge = Increment::new("ledger", "account_id", "a").add("balance", i64::MAX);
        assert_eq!(merged([&huge, &a]), None);
    }
}
