//! The work's own writes in Redis, committed in the same script as its
//! completion, and the JSON a script reads its effects from.

use serde_json::{Value, json};

use exactly_once_core::store::{Effects, Increment};

/// One write of a work's effect on the hash at a key, in the script of
/// the completion it belongs to. A write refused by its condition refuses
/// the whole transition (nothing of it happens), like a DynamoDB write's
/// condition expression.
///
/// ```
/// use exactly_once_redis::RedisEffect;
///
/// let receipt = RedisEffect::put_new("receipts:p-1", [("amount_cents", "1250")]);
/// assert_eq!(receipt.key(), "receipts:p-1");
/// let debit = RedisEffect::add("wallets:w-7", "balance_cents", -1250, Some(0));
/// assert_eq!(debit.key(), "wallets:w-7");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisEffect {
    key: String,
    write: Write,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Write {
    /// `HSET` of the fields; with `only_new`, refused if the key exists.
    Put {
        fields: Vec<(String, String)>,
        only_new: bool,
    },
    /// `HINCRBY` of one field; refused if it would end below `floor`.
    Add {
        field: String,
        by: i64,
        floor: Option<i64>,
    },
}

impl RedisEffect {
    /// Sets `fields` on the hash at `key` (created if absent).
    pub fn put<F: Into<String>, V: Into<String>>(
        key: impl Into<String>,
        fields: impl IntoIterator<Item = (F, V)>,
    ) -> Self {
        Self::put_with(key.into(), fields, false)
    }

    /// Creates the hash at `key` with `fields`; refused if the key exists.
    pub fn put_new<F: Into<String>, V: Into<String>>(
        key: impl Into<String>,
        fields: impl IntoIterator<Item = (F, V)>,
    ) -> Self {
        Self::put_with(key.into(), fields, true)
    }

    /// Adds `by` to the number `field` of the hash at `key` (a missing one
    /// counts as 0); refused if it would end below `floor`.
    pub fn add(
        key: impl Into<String>,
        field: impl Into<String>,
        by: i64,
        floor: Option<i64>,
    ) -> Self {
        Self {
            key: key.into(),
            write: Write::Add {
                field: field.into(),
                by,
                floor,
            },
        }
    }

    fn put_with<F: Into<String>, V: Into<String>>(
        key: String,
        fields: impl IntoIterator<Item = (F, V)>,
        only_new: bool,
    ) -> Self {
        let fields = fields
            .into_iter()
            .map(|(f, v)| (f.into(), v.into()))
            .collect();
        Self {
            key,
            write: Write::Put { fields, only_new },
        }
    }

    /// The key it writes.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// What `refused` and `apply` read of it (see `lua.rs`).
    fn lua(&self) -> Value {
        match &self.write {
            Write::Put { fields, only_new } => {
                let kind = if *only_new { "put_new" } else { "put" };
                let fields: Vec<&str> = fields
                    .iter()
                    .flat_map(|(f, v)| [f.as_str(), v.as_str()])
                    .collect();
                json!([kind, fields])
            }
            Write::Add { field, by, floor } => {
                let floor = floor.map_or(String::new(), |f| f.to_string());
                json!(["add", field, by.to_string(), floor])
            }
        }
    }
}

/// The Redis key of an incremented item: `<table>:<key>`, one field per
/// number (the demo ledger: `HGET ledger:acct-1 balance_cents`).
pub fn increment_key(increment: &Increment) -> String {
    format!("{}:{}", increment.table, increment.key)
}

/// What a script's `refused` and `apply` read (see `lua.rs`), and the keys
/// they touch, in order: the writes' keys, then the increments'.
pub(super) struct Change {
    pub keys: Vec<String>,
    pub writes: Vec<Value>,
    pub increments: Vec<Value>,
}

impl Change {
    /// `writes` (of every message, in order) and the merged `increments`.
    pub fn of<'a>(
        writes: impl IntoIterator<Item = &'a RedisEffect>,
        increments: &[Increment],
    ) -> Self {
        let mut keys = Vec::new();
        let mut lua_writes = Vec::new();
        for write in writes {
            keys.push(write.key.clone());
            lua_writes.push(write.lua());
        }
        let mut lua_increments = Vec::new();
        for increment in increments {
            keys.push(increment_key(increment));
            let adds: Vec<Value> = increment
                .adds
                .iter()
                .map(|add| {
                    let least = add.least_before().map_or(String::new(), |l| l.to_string());
                    json!([add.attribute, add.by.to_string(), least])
                })
                .collect();
            lua_increments.push(Value::Array(adds));
        }
        Self {
            keys,
            writes: lua_writes,
            increments: lua_increments,
        }
    }

    /// Only these effects of a message.
    pub fn of_effects(effects: &Effects<RedisEffect>, increments: &[Increment]) -> Self {
        Self::of(&effects.writes, increments)
    }
}
