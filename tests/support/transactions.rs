//! The items a DynamoDB write request touches, read from its JSON body, and
//! which requests in flight at the same time touch a common item: what
//! DynamoDB in AWS cancels with `TransactionConflict` (DynamoDB Local
//! queues them instead). For the fault injection of the simulation, the
//! hot-items tests and the benchmark (`#[path]`-included there).

use std::collections::HashSet;

use serde_json::Value;

/// The key attributes of the project's tables (idempotency: `pk`; ledger:
/// `account_id`): a Put names its item by them.
const KEY_ATTRIBUTES: [&str; 2] = ["pk", "account_id"];

/// `table/attribute=value` of the item of each action of a
/// `TransactWriteItems` body, in order; empty for anything else.
pub fn transaction_items(operation: &str, body: &[u8]) -> Vec<String> {
    if operation != "TransactWriteItems" {
        return Vec::new();
    }
    let Ok(json) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let actions = json["TransactItems"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    actions
        .iter()
        .filter_map(|action| {
            let (kind, body) = action.as_object()?.iter().next()?;
            let table = body["TableName"].as_str()?;
            let key = match kind.as_str() {
                "Put" => &body["Item"],
                _ => &body["Key"],
            };
            let mut parts: Vec<String> = KEY_ATTRIBUTES
                .iter()
                .filter_map(|name| Some(format!("{name}={}", key.get(*name)?)))
                .collect();
            parts.sort();
            Some(format!("{table}/{}", parts.join("/")))
        })
        .collect()
}

/// Transactions between being sent and answered, with their items.
#[derive(Debug, Default)]
pub struct InFlight {
    next: u64,
    open: Vec<(u64, Vec<String>)>,
    /// The most idempotency items (`pk`) ever in flight at once.
    peak_keys: usize,
}

impl InFlight {
    /// Which of `items` a transaction in flight touches (a conflict in AWS).
    pub fn conflicts(&self, items: &[String]) -> Vec<bool> {
        let open: HashSet<&String> = self.open.iter().flat_map(|(_, i)| i).collect();
        items.iter().map(|item| open.contains(item)).collect()
    }

    /// A transaction leaves with `items`: its ticket.
    pub fn send(&mut self, items: Vec<String>) -> u64 {
        self.next += 1;
        self.open.push((self.next, items));
        let keys = (self.open.iter().flat_map(|(_, items)| items))
            .filter(|item| item.contains("/pk="))
            .count();
        self.peak_keys = self.peak_keys.max(keys);
        self.next
    }

    /// The most records (their idempotency items) that were ever in
    /// transactions in flight at once.
    pub fn peak_keys(&self) -> usize {
        self.peak_keys
    }

    /// The transaction of `ticket` is answered.
    pub fn answered(&mut self, ticket: u64) {
        self.open.retain(|(t, _)| *t != ticket);
    }
}
