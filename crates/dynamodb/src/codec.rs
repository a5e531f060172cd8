//! The idempotency item as DynamoDB holds it: attribute values in and out.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use exactly_once_core::store::{Status, StoreError, StoredItem, attr};

/// An item as DynamoDB returns it.
pub type RawItem = HashMap<String, AttributeValue>;

/// A status as the item's `status` attribute holds it.
pub(super) fn status_value(status: Status) -> AttributeValue {
    AttributeValue::S(status.as_str().to_owned())
}

/// The stored item of a raw one.
pub(super) fn parse(item: &RawItem) -> Result<StoredItem, StoreError> {
    let pk = string(item, attr::PK, "?")?;
    let status_text = string(item, attr::STATUS, &pk)?;
    let status = Status::parse(&status_text).ok_or_else(|| StoreError::MalformedItem {
        key: pk.clone(),
        reason: format!("unknown status {status_text:?}"),
    })?;
    Ok(StoredItem {
        status,
        version: number(item, attr::VERSION, &pk)?,
        owner: string(item, attr::OWNER, &pk)?,
        payload_hash: string(item, attr::PAYLOAD_HASH, &pk)?,
        lock_expires_at_ms: optional_number(item, attr::LOCK_EXPIRES_AT, &pk)?,
        expires_at_s: number(item, attr::EXPIRES_AT, &pk)?,
        created_at_ms: optional_number(item, attr::CREATED_AT, &pk)?,
        updated_at_ms: optional_number(item, attr::UPDATED_AT, &pk)?,
        attempts: optional_number(item, attr::ATTEMPTS, &pk)?,
        origin: optional_string(item, attr::ORIGIN),
        result: optional_string(item, attr::RESULT),
        outbox: optional_string(item, attr::OUTBOX),
        error: optional_string(item, attr::ERROR),
        last_error: optional_string(item, attr::LAST_ERROR),
        scope: optional_string(item, attr::SCOPE),
        pk,
    })
}

fn malformed(pk: &str, reason: String) -> StoreError {
    StoreError::MalformedItem {
        key: pk.to_owned(),
        reason,
    }
}

fn string(
    item: &HashMap<String, AttributeValue>,
    name: &str,
    pk: &str,
) -> Result<String, StoreError> {
    optional_string(item, name).ok_or_else(|| malformed(pk, format!("missing string {name}")))
}

fn optional_string(item: &HashMap<String, AttributeValue>, name: &str) -> Option<String> {
    item.get(name)?.as_s().ok().cloned()
}

fn number(item: &HashMap<String, AttributeValue>, name: &str, pk: &str) -> Result<u64, StoreError> {
    optional_number(item, name, pk)?.ok_or_else(|| malformed(pk, format!("missing number {name}")))
}

fn optional_number(
    item: &HashMap<String, AttributeValue>,
    name: &str,
    pk: &str,
) -> Result<Option<u64>, StoreError> {
    match item.get(name) {
        None => Ok(None),
        Some(value) => value
            .as_n()
            .ok()
            .and_then(|n| n.parse().ok())
            .map(Some)
            .ok_or_else(|| malformed(pk, format!("{name} is not a whole number: {value:?}"))),
    }
}

/// `AttributeValue::S` from anything string-like.
pub(super) fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// `AttributeValue::N` from a whole number.
pub(super) fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}
