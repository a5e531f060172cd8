//! The idempotency item as a Redis hash: one field per attribute of the
//! DynamoDB item ([`exactly_once_core::store::attr`]), every value a decimal or text
//! string; an attribute without a value has no field.

use std::collections::HashMap;

use exactly_once_core::store::{NewItem, Status, StoreError, StoredItem, attr, bounded};

/// A new item's fields (field, value, field, value, ...), as `HSET` takes
/// them.
pub(super) fn new_fields(item: &NewItem<'_>) -> Vec<String> {
    let mut fields = vec![
        (attr::PK, item.pk.to_owned()),
        (attr::STATUS, item.status.as_str().to_owned()),
        (attr::VERSION, "1".to_owned()),
        (attr::OWNER, item.owner.to_owned()),
        (attr::PAYLOAD_HASH, item.payload_hash.to_owned()),
        (attr::EXPIRES_AT, item.expires_at_s.to_string()),
        (attr::CREATED_AT, item.now_ms.to_string()),
        (attr::UPDATED_AT, item.now_ms.to_string()),
        (attr::ATTEMPTS, "1".to_owned()),
    ];
    let optional = [
        (
            attr::LOCK_EXPIRES_AT,
            item.lock_expires_at_ms.map(|at| at.to_string()),
        ),
        (attr::ORIGIN, item.origin.map(|o| bounded(o).to_owned())),
        (attr::RESULT, item.result.map(str::to_owned)),
        (attr::OUTBOX, item.outbox.map(str::to_owned)),
        (attr::ERROR, item.error.map(|e| bounded(e).to_owned())),
        (attr::SCOPE, item.scope.map(str::to_owned)),
    ];
    fields.extend(
        optional
            .into_iter()
            .filter_map(|(name, value)| Some((name, value?))),
    );
    fields
        .into_iter()
        .flat_map(|(name, value)| [name.to_owned(), value])
        .collect()
}

/// When Redis deletes an item whose TTL is `expires_at_s`: after the last
/// second in which every backend still counts it live (`expires_at < now`
/// is expired), so that Redis never forgets an item earlier than a read
/// judges it expired.
pub(super) fn deleted_at_ms(expires_at_s: u64) -> u64 {
    (expires_at_s + 1) * 1000
}

/// The item of `HGETALL`'s answer; `None` for an empty hash (no item).
pub(super) fn item_of(fields: HashMap<String, String>) -> Result<Option<StoredItem>, StoreError> {
    if fields.is_empty() {
        return Ok(None);
    }
    let pk = fields.get(attr::PK).cloned().unwrap_or_default();
    let malformed = |reason: String| StoreError::MalformedItem {
        key: pk.clone(),
        reason,
    };
    let text = |name: &str| fields.get(name).cloned();
    let required = |name: &str| text(name).ok_or_else(|| malformed(format!("{name} is missing")));
    let number = |name: &str| -> Result<Option<u64>, StoreError> {
        text(name)
            .map(|value| {
                value
                    .parse::<u64>()
                    .map_err(|_| malformed(format!("{name} is not a whole number")))
            })
            .transpose()
    };
    let status_text = required(attr::STATUS)?;
    let status = Status::parse(&status_text)
        .ok_or_else(|| malformed(format!("unknown status {status_text:?}")))?;
    Ok(Some(StoredItem {
        pk: required(attr::PK)?,
        status,
        version: number(attr::VERSION)?.ok_or_else(|| malformed("version is missing".into()))?,
        owner: required(attr::OWNER)?,
        payload_hash: required(attr::PAYLOAD_HASH)?,
        lock_expires_at_ms: number(attr::LOCK_EXPIRES_AT)?,
        expires_at_s: number(attr::EXPIRES_AT)?
            .ok_or_else(|| malformed("expires_at is missing".into()))?,
        created_at_ms: number(attr::CREATED_AT)?,
        updated_at_ms: number(attr::UPDATED_AT)?,
        attempts: number(attr::ATTEMPTS)?,
        origin: text(attr::ORIGIN),
        result: text(attr::RESULT),
        outbox: text(attr::OUTBOX),
        error: text(attr::ERROR),
        last_error: text(attr::LAST_ERROR),
        scope: text(attr::SCOPE),
    }))
}
