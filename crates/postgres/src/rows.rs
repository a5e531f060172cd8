//! What every path shares: the table's columns, the statement that creates
//! a row ([`Statements::insert_new`], under the one condition every creating
//! write keeps), a conditional write that returns the row that stopped it,
//! and the codec from a row to a [`StoredItem`].

use tokio_postgres::Row;

use super::SqlValue;
use exactly_once_core::store::{Conditional, NewItem, Status, StoreError, StoredItem};

/// Every column of the idempotency table (the item's attributes).
pub(super) const COLUMNS: &str = "pk, status, version, owner, payload_hash, lock_expires_at, \
                                  expires_at, created_at, updated_at, attempts, origin, result, \
                                  error, last_error, scope, outbox";

/// The statements of one table, written once when the store is made from
/// the templates each path keeps beside its transition.
#[derive(Debug)]
pub(super) struct Statements {
    /// The table's name, quoted.
    pub table: String,
    /// Creates a key's row (claim, lock-free commit, lock-free failure),
    /// returning it; or, when the key is not new, the row found.
    pub insert_new: String,
    pub take_over: String,
    pub complete: String,
    pub fail: String,
    pub release: String,
    pub extend: String,
    pub get: String,
    pub get_many: String,
    pub operator_release: String,
    pub operator_retry: String,
    pub list_stuck: String,
    pub list_failed: String,
    pub list_unsent: String,
    pub clear_outbox: String,
    pub purge: String,
}

/// Creates a key's row: `$1` pk, `$2` status, `$3` owner, `$4`
/// payload_hash, `$5` lock_expires_at, `$6` expires_at, `$7` now (ms),
/// `$8` origin, `$9` result, `$10` error, `$11` now (s), `$12` scope, `$13`
/// outbox (the messages a COMPLETED row's record emitted).
/// Invariant: one live row per key; a write never replaces a row that has
/// not passed its TTL (the conflicting row is replaced only when expired,
/// which counts as absent).
const INSERT_NEW: &str = "INSERT INTO {table} AS item (pk, status, version, owner, payload_hash, \
    lock_expires_at, expires_at, created_at, updated_at, attempts, origin, result, error, scope, \
    outbox) VALUES ($1, $2, 1, $3, $4, $5, $6, $7, $7, 1, $8, $9, $10, $12, $13) \
    ON CONFLICT (pk) DO UPDATE SET status = excluded.status, version = 1, \
    owner = excluded.owner, payload_hash = excluded.payload_hash, \
    lock_expires_at = excluded.lock_expires_at, expires_at = excluded.expires_at, \
    created_at = excluded.created_at, updated_at = excluded.updated_at, attempts = 1, \
    origin = excluded.origin, result = excluded.result, error = excluded.error, \
    last_error = NULL, scope = excluded.scope, outbox = excluded.outbox \
    WHERE item.expires_at < $11";

impl Statements {
    /// A statement template of the table (`{table}`, `{columns}`), as the
    /// statements of one call are built (a batch's rows vary in number).
    pub(super) fn render(&self, template: &str) -> String {
        template
            .replace("{table}", &self.table)
            .replace("{columns}", COLUMNS)
    }

    pub(super) fn for_table(table: &str) -> Result<Self, StoreError> {
        use super::{locking, operator};
        let table = quote_identifier(table).map_err(|message| StoreError::Rejected {
            operation: "open the idempotency table",
            message,
        })?;
        let render = |template: &str| {
            template
                .replace("{table}", &table)
                .replace("{columns}", COLUMNS)
        };
        Ok(Self {
            insert_new: or_found(&table, &render(INSERT_NEW)),
            take_over: or_found(&table, &render(locking::TAKE_OVER)),
            complete: render(locking::COMPLETE),
            fail: render(locking::FAIL),
            release: render(locking::RELEASE),
            extend: render(locking::EXTEND),
            get: render(operator::GET),
            get_many: render(operator::GET_MANY),
            operator_release: render(operator::OPERATOR_RELEASE),
            operator_retry: render(operator::OPERATOR_RETRY),
            list_stuck: render(operator::LIST_STUCK),
            list_failed: render(operator::LIST_FAILED),
            list_unsent: render(operator::LIST_UNSENT),
            clear_outbox: render(locking::CLEAR_OUTBOX),
            purge: render(operator::PURGE),
            table,
        })
    }
}

/// `write` (an INSERT or UPDATE of the row `pk = $1`), returning the row it
/// wrote flagged `written`; when it wrote nothing, the row that stopped it,
/// flagged not written. ONE statement: the write and the look at the row
/// it did not write are one round trip.
fn or_found(table: &str, write: &str) -> String {
    format!(
        "WITH written AS ({write} RETURNING {COLUMNS}) \
         SELECT true AS written, {COLUMNS} FROM written \
         UNION ALL \
         SELECT false AS written, {COLUMNS} FROM {table} \
         WHERE pk = $1 AND NOT EXISTS (SELECT 1 FROM written)"
    )
}

/// The outcome of an [`or_found`] statement: `written` when it wrote, or
/// the row found (`None` when the row is not visible to the statement: it
/// was created or deleted concurrently; the caller looks again).
pub(super) fn conditional<T>(rows: &[Row], written: T) -> Result<Conditional<T>, StoreError> {
    match rows.first() {
        Some(row) if flag(row)? => Ok(Conditional::Written(written)),
        Some(row) => Ok(Conditional::Conflict(Some(Box::new(item_of(row)?)))),
        None => Ok(Conditional::Conflict(None)),
    }
}

/// The `written` flag of an [`or_found`] row.
pub(super) fn flag(row: &Row) -> Result<bool, StoreError> {
    row.try_get("written").map_err(|err| malformed(row, err))
}

/// The parameters of [`Statements::insert_new`] for `item`.
pub(super) fn new_row(item: &NewItem<'_>) -> Vec<SqlValue> {
    vec![
        item.pk.into(),
        item.status.as_str().into(),
        item.owner.into(),
        item.payload_hash.into(),
        number(item.lock_expires_at_ms),
        number(Some(item.expires_at_s)),
        number(Some(item.now_ms)),
        item.origin.map(exactly_once_core::store::bounded).into(),
        item.result.into(),
        item.error.map(exactly_once_core::store::bounded).into(),
        number(Some(exactly_once_core::clock::ms_to_s(item.now_ms))),
        item.scope.into(),
        item.outbox.into(),
    ]
}

/// An epoch time or count as a BIGINT parameter (saturating: no time this
/// library writes comes near `i64::MAX`).
pub(super) fn number(value: Option<u64>) -> SqlValue {
    SqlValue::BigInt(value.map(|v| i64::try_from(v).unwrap_or(i64::MAX)))
}

/// A row of the idempotency table as a [`StoredItem`].
pub(super) fn item_of(row: &Row) -> Result<StoredItem, StoreError> {
    let text = |name: &str| -> Result<Option<String>, StoreError> {
        row.try_get::<_, Option<String>>(name)
            .map_err(|err| malformed(row, err))
    };
    let count = |name: &str| -> Result<Option<u64>, StoreError> {
        row.try_get::<_, Option<i64>>(name)
            .map_err(|err| malformed(row, err))?
            .map(|value| {
                u64::try_from(value).map_err(|_| StoreError::MalformedItem {
                    key: pk_of(row),
                    reason: format!("{name} is negative"),
                })
            })
            .transpose()
    };
    let required = |name: &str, value: Option<String>| {
        value.ok_or_else(|| StoreError::MalformedItem {
            key: pk_of(row),
            reason: format!("{name} is NULL"),
        })
    };
    let status_text = required("status", text("status")?)?;
    let status = Status::parse(&status_text).ok_or_else(|| StoreError::MalformedItem {
        key: pk_of(row),
        reason: format!("unknown status {status_text:?}"),
    })?;
    Ok(StoredItem {
        pk: required("pk", text("pk")?)?,
        status,
        version: count("version")?.unwrap_or_default(),
        owner: required("owner", text("owner")?)?,
        payload_hash: required("payload_hash", text("payload_hash")?)?,
        lock_expires_at_ms: count("lock_expires_at")?,
        expires_at_s: count("expires_at")?.unwrap_or_default(),
        created_at_ms: count("created_at")?,
        updated_at_ms: count("updated_at")?,
        attempts: count("attempts")?,
        origin: text("origin")?,
        result: text("result")?,
        error: text("error")?,
        last_error: text("last_error")?,
        scope: text("scope")?,
        outbox: text("outbox")?,
    })
}

fn pk_of(row: &Row) -> String {
    row.try_get::<_, String>("pk").unwrap_or_default()
}

fn malformed(row: &Row, err: tokio_postgres::Error) -> StoreError {
    StoreError::MalformedItem {
        key: pk_of(row),
        reason: err.to_string(),
    }
}

/// `name` (or `schema.name`) quoted as a SQL identifier: each part letters,
/// digits, `_` or `-`, not starting with a digit, at most 63 bytes (PostgreSQL's
/// limit).
pub fn quote_identifier(name: &str) -> Result<String, String> {
    let parts: Vec<&str> = name.split('.').collect();
    let valid = |part: &&str| {
        !part.is_empty()
            && part.len() <= 63
            && !part.starts_with(|c: char| c.is_ascii_digit())
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    if parts.len() > 2 || !parts.iter().all(valid) {
        return Err(format!(
            "{name:?} is not a table name: one or two dot-separated parts of letters, digits, \
             '_' or '-', at most 63 bytes each"
        ));
    }
    Ok(parts
        .iter()
        .map(|part| format!("\"{part}\""))
        .collect::<Vec<_>>()
        .join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_quoted_identifiers() {
        assert_eq!(
            quote_identifier("idempotency").as_deref(),
            Ok("\"idempotency\"")
        );
        assert_eq!(
            quote_identifier("app.idempotency-test").as_deref(),
            Ok("\"app\".\"idempotency-test\"")
        );
        for bad in ["", "a.b.c", "x\"; DROP TABLE y; --", "1abc", "a b", "a..b"] {
            assert!(quote_identifier(bad).is_err(), "{bad}");
        }
    }
}
