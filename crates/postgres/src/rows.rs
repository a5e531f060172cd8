//! The rows of the idempotency table: its columns, its name quoted, the
//! parameters of a new row, and the codec from a row to a [`StoredItem`]
//! (and from the answer of a write that returns the row that stopped it).

use tokio_postgres::Row;

use super::SqlValue;
use exactly_once_core::store::{Conditional, NewItem, Status, StoreError, StoredItem};

/// Every column of the idempotency table (the item's attributes).
pub(super) const COLUMNS: &str = "pk, status, version, owner, payload_hash, lock_expires_at, \
                                  expires_at, created_at, updated_at, attempts, origin, result, \
                                  error, last_error, scope, outbox";

/// The outcome of a write that returns the row that stopped it (`or_found`,
/// `statements.rs`): `written` when it wrote, or the row found (`None` when
/// the row is not visible to the statement: it was created or deleted
/// concurrently; the caller looks again).
pub(super) fn conditional<T>(rows: &[Row], written: T) -> Result<Conditional<T>, StoreError> {
    match rows.first() {
        Some(row) if flag(row)? => Ok(Conditional::Written(written)),
        Some(row) => Ok(Conditional::Conflict(Some(Box::new(item_of(row)?)))),
        None => Ok(Conditional::Conflict(None)),
    }
}

/// The `written` flag of a row of such a write (`or_found`).
pub(super) fn flag(row: &Row) -> Result<bool, StoreError> {
    row.try_get("written").map_err(|err| malformed(row, err))
}

/// The parameters of the statement that creates a row (`INSERT_NEW`, in
/// `locking.rs`) for `item`.
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
