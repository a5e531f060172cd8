//! Every write DynamoDB applied to the schedule's idempotency items, read
//! from the requests themselves (the fault layer's observer sees each request
//! and DynamoDB's status, before any injected loss of the answer), and the
//! invariants of the key state machine checked on that history:
//!
//! - each version of a key is acquired (claim: version 1; takeover: the
//!   observed version + 1) by exactly one owner, and the stored item ends at
//!   the highest version acquired: versions only grow;
//! - every fenced write (complete, fail, release, extend) is by the owner of
//!   its version, and none was SENT after the takeover of that version had
//!   been answered, nor after the key's completion had been answered: no
//!   write by a worker after its lock was taken over;
//! - at most one terminal write (COMPLETED or FAILED) per key.
//!
//! A `BatchExecuteStatement` (the locking path's batched claims and fenced
//! writes) is read statement by statement, each counted only if DynamoDB's
//! answer shows it applied.
//!
//! A `TransactWriteItems` retried by the SDK after a lost answer carries the
//! same `ClientRequestToken`; DynamoDB answers it without applying it again,
//! so it counts once. The log also counts, per account, the ledger's own
//! writes (direct mode) that were applied but whose answer the caller never
//! saw (lost, or it had stopped waiting: an attempt timeout): the
//! SDK sends such a write again, a repeat outside the idempotency protocol.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

use exactly_once::store::StoredItem;
use serde_json::Value;

use crate::support::faults::{Exchange, Observer};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    /// Claim or takeover: `owner` now holds `version`.
    Acquire { version: u64, owner: String },
    /// A write fenced on `version` + `owner`; `terminal` when it set
    /// COMPLETED or FAILED.
    Fenced {
        version: u64,
        owner: String,
        terminal: bool,
    },
}

#[derive(Debug, Clone)]
struct Write {
    change: Change,
    sent: u64,
    received: u64,
}

/// The applied writes to items of one table under one key prefix, by key.
pub struct WriteLog {
    table: String,
    prefix: String,
    ledger_table: String,
    writes: Mutex<BTreeMap<String, Vec<Write>>>,
    transaction_tokens: Mutex<HashSet<String>>,
    /// Per account: applied ledger writes whose answer was lost.
    lost_ledger_answers: Mutex<HashMap<String, u64>>,
    /// Requests that could not be read (a violation of the log itself).
    unreadable: Mutex<Vec<String>>,
    /// Items created by each path (see [`PathCounts`]).
    paths: Mutex<PathCounts>,
}

/// Which commit path created the schedule's items: claims (a Put of a
/// STARTED item: the locking path) and lock-free creations (a Put of a
/// COMPLETED or FAILED item); and the locking path's writes applied from
/// batches (`BatchExecuteStatement`).
#[derive(Debug, Default, Clone, Copy)]
pub struct PathCounts {
    pub claims: u64,
    pub lock_free: u64,
    pub batched: u64,
}

impl WriteLog {
    pub fn new(table: String, prefix: String, ledger_table: String) -> Self {
        Self {
            table,
            prefix,
            ledger_table,
            writes: Mutex::default(),
            transaction_tokens: Mutex::default(),
            lost_ledger_answers: Mutex::default(),
            unreadable: Mutex::default(),
            paths: Mutex::default(),
        }
    }

    pub fn paths(&self) -> PathCounts {
        *self
            .paths
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Successful (applied) writes seen so far.
    pub fn len(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<Write>>> {
        self.writes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Applied ledger writes of `account` whose answer was lost.
    pub fn lost_ledger_answers(&self, account: &str) -> u64 {
        let lost = self.lost_ledger_answers.lock();
        let lost = lost.unwrap_or_else(std::sync::PoisonError::into_inner);
        lost.get(account).copied().unwrap_or(0)
    }

    /// Notes a ledger write (an `UpdateItem` of the ledger table) whose
    /// answer was lost.
    fn ledger_answer_lost(&self, body: &Value) {
        if body["TableName"].as_str() != Some(self.ledger_table.as_str()) {
            return;
        }
        if let Some(account) = body["Key"]["account_id"]["S"].as_str() {
            let mut lost = self
                .lost_ledger_answers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *lost.entry(account.to_owned()).or_default() += 1;
        }
    }

    /// Whether a transaction with this token was seen before.
    fn replayed(&self, body: &Value) -> bool {
        let Some(token) = body["ClientRequestToken"].as_str() else {
            return false;
        };
        let mut tokens = self
            .transaction_tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        !tokens.insert(token.to_owned())
    }

    /// The changes an action (a `PutItem` or `Put` body, or an `Update`
    /// body) makes to an item of this table, with its key. A Put of a
    /// COMPLETED or FAILED item (the lock-free path) acquires version 1 and
    /// finishes the key in one write.
    fn change(&self, action: &Value, put: bool) -> Option<Result<(String, Vec<Change>), String>> {
        if action["TableName"].as_str() != Some(self.table.as_str()) {
            return None;
        }
        let s = |value: &Value| value["S"].as_str().map(str::to_owned);
        let n = |value: &Value| value["N"].as_str().and_then(|n| n.parse::<u64>().ok());
        if put {
            let item = &action["Item"];
            let pk = s(&item["pk"])?;
            pk.starts_with(&self.prefix).then_some(())?;
            let (version, owner) = (n(&item["version"])?, s(&item["owner"])?);
            let mut changes = vec![Change::Acquire {
                version,
                owner: owner.clone(),
            }];
            let lock_free = matches!(s(&item["status"]).as_deref(), Some("COMPLETED" | "FAILED"));
            let mut paths = self
                .paths
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if lock_free {
                paths.lock_free += 1;
            } else {
                paths.claims += 1;
            }
            drop(paths);
            if lock_free {
                changes.push(Change::Fenced {
                    version,
                    owner,
                    terminal: true,
                });
            }
            return Some(Ok((pk, changes)));
        }
        let pk = s(&action["Key"]["pk"])?;
        pk.starts_with(&self.prefix).then_some(())?;
        let values = &action["ExpressionAttributeValues"];
        let change = if let (Some(observed), Some(next), Some(owner)) = (
            n(&values[":observed"]),
            n(&values[":next"]),
            s(&values[":owner"]),
        ) {
            if next != observed + 1 {
                return Some(Err(format!("{pk}: a takeover from v{observed} to v{next}")));
            }
            Change::Acquire {
                version: next,
                owner,
            }
        } else if let (Some(version), Some(owner)) = (n(&values[":version"]), s(&values[":owner"]))
        {
            let terminal = !values[":completed"].is_null() || !values[":failed"].is_null();
            Change::Fenced {
                version,
                owner,
                terminal,
            }
        } else {
            return Some(Err(format!("{pk}: a write of unknown kind: {action}")));
        };
        Some(Ok((pk, vec![change])))
    }

    /// The change a PartiQL statement of a batch made (the locking path's
    /// `INSERT` of a STARTED item, or fenced `UPDATE`), with its key.
    fn statement(&self, statement: &Value) -> Option<Result<(String, Vec<Change>), String>> {
        let text = statement["Statement"].as_str()?;
        let parameters = statement["Parameters"].as_array()?;
        let table = format!("\"{}\"", self.table);
        if let Some(rest) = text.strip_prefix(&format!("INSERT INTO {table} VALUE {{")) {
            // `'name': ?` for each parameter, in order.
            let names = rest.trim_end_matches('}').split(", ").map(|field| {
                field
                    .split(':')
                    .next()
                    .unwrap_or_default()
                    .trim_matches('\'')
            });
            let item: serde_json::Map<String, Value> = names
                .zip(parameters)
                .map(|(name, value)| (name.to_owned(), value.clone()))
                .collect();
            let put = serde_json::json!({"TableName": self.table, "Item": item});
            return self.change(&put, true);
        }
        let rest = text.strip_prefix(&format!("UPDATE {table}"))?;
        // SET "a" = ? ... REMOVE "b" ... WHERE "pk" = ? AND "status" = ?
        // AND "version" = ? AND "owner" = ?: the SET values, then the fence.
        let set: Vec<&str> = rest
            .split(" SET \"")
            .skip(1)
            .filter_map(|part| part.split('"').next())
            .collect();
        let fence = parameters.get(set.len()..)?;
        let s = |value: &Value| value["S"].as_str().map(str::to_owned);
        let pk = s(&fence[0])?;
        pk.starts_with(&self.prefix).then_some(())?;
        let (version, owner) = (
            fence.get(2)?["N"].as_str()?.parse::<u64>().ok()?,
            s(fence.get(3)?)?,
        );
        let terminal = set
            .iter()
            .zip(parameters)
            .any(|(name, value)| *name == "status" && s(value).is_some_and(|v| v != "STARTED"));
        Some(Ok((
            pk,
            vec![Change::Fenced {
                version,
                owner,
                terminal,
            }],
        )))
    }

    /// Checks the history against the items as they ended; returns the
    /// violations.
    pub fn check(&self, items: &HashMap<String, StoredItem>) -> Vec<String> {
        let mut violations = self
            .unreadable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for (pk, writes) in self.lock().iter() {
            violations.extend(check_key(pk, writes, items.get(pk)));
        }
        violations
    }
}

fn check_key(pk: &str, writes: &[Write], item: Option<&StoredItem>) -> Vec<String> {
    let mut violations = Vec::new();
    // version -> (owner, when its acquisition was answered)
    let mut acquired: BTreeMap<u64, (&str, u64)> = BTreeMap::new();
    for write in writes {
        if let Change::Acquire { version, owner } = &write.change
            && let Some((other, _)) = acquired.insert(*version, (owner, write.received))
        {
            violations.push(format!(
                "{pk}: v{version} acquired twice ({other}, {owner})"
            ));
        }
    }
    let terminal: Vec<&Write> = writes
        .iter()
        .filter(|w| matches!(w.change, Change::Fenced { terminal: true, .. }))
        .collect();
    if terminal.len() > 1 {
        violations.push(format!(
            "{pk}: {} terminal writes (COMPLETED/FAILED)",
            terminal.len()
        ));
    }
    let finished_at = terminal.first().map(|w| w.received);
    for write in writes {
        let Change::Fenced { version, owner, .. } = &write.change else {
            continue;
        };
        match acquired.get(version) {
            Some((holder, _)) if holder == owner => {}
            Some((holder, _)) => violations.push(format!(
                "{pk}: a write fenced on v{version} by {owner}, which {holder} holds"
            )),
            None => violations.push(format!(
                "{pk}: a write fenced on v{version}, never acquired"
            )),
        }
        if let Some((_, taken)) = acquired.get(&(version + 1))
            && write.sent > *taken
        {
            violations.push(format!(
                "{pk}: a write by the owner of v{version} sent after v{} took the key over",
                version + 1
            ));
        }
        if finished_at.is_some_and(|at| write.sent > at) {
            violations.push(format!("{pk}: a write sent after the key was finished"));
        }
    }
    let highest = acquired.keys().next_back().copied();
    match (item, highest) {
        (Some(item), Some(highest)) if item.version != highest => violations.push(format!(
            "{pk}: the item is at v{}, the highest version acquired is v{highest}",
            item.version
        )),
        (None, Some(_)) => violations.push(format!("{pk}: acquired, but the item is gone")),
        _ => {}
    }
    violations
}

impl Observer for WriteLog {
    fn exchanged(&self, exchange: Exchange) {
        let actions: Vec<(Value, bool)> = match exchange.operation.as_str() {
            _ if exchange.status != 200 => return,
            "PutItem" | "UpdateItem" => match serde_json::from_slice::<Value>(&exchange.body) {
                Ok(body) => {
                    if exchange.answer_lost {
                        self.ledger_answer_lost(&body);
                    }
                    vec![(body, exchange.operation == "PutItem")]
                }
                Err(err) => {
                    self.unreadable
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(format!("an unreadable {} body: {err}", exchange.operation));
                    return;
                }
            },
            "BatchExecuteStatement" => {
                let body: Value = serde_json::from_slice(&exchange.body).unwrap_or_default();
                let answer: Value = serde_json::from_slice(&exchange.answer).unwrap_or_default();
                let answers = answer["Responses"].as_array().cloned().unwrap_or_default();
                let statements = body["Statements"].as_array().cloned().unwrap_or_default();
                for (statement, answer) in statements.iter().zip(&answers) {
                    // Each statement succeeds or fails on its own.
                    if !answer["Error"].is_null() {
                        continue;
                    }
                    if let Some(change) = self.statement(statement) {
                        self.paths
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .batched += 1;
                        self.record(change, &exchange);
                    }
                }
                return;
            }
            "TransactWriteItems" => {
                let body: Value = serde_json::from_slice(&exchange.body).unwrap_or_default();
                if self.replayed(&body) {
                    return;
                }
                body["TransactItems"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|action| match (&action["Update"], &action["Put"]) {
                        (Value::Object(_), _) => Some((action["Update"].clone(), false)),
                        (_, Value::Object(_)) => Some((action["Put"].clone(), true)),
                        _ => None,
                    })
                    .collect()
            }
            _ => return,
        };
        for (action, put) in actions {
            if let Some(change) = self.change(&action, put) {
                self.record(change, &exchange);
            }
        }
    }
}

impl WriteLog {
    /// Logs an applied write of `exchange`.
    fn record(&self, change: Result<(String, Vec<Change>), String>, exchange: &Exchange) {
        match change {
            Ok((pk, changes)) => {
                self.lock()
                    .entry(pk)
                    .or_default()
                    .extend(changes.into_iter().map(|change| Write {
                        change,
                        sent: exchange.sent,
                        received: exchange.received,
                    }));
            }
            Err(message) => self
                .unreadable
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(message),
        }
    }
}
