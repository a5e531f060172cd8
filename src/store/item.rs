//! The idempotency item: one per key. Its attribute names are a public
//! contract that operators query and `template.yaml` declares.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::StoreError;

/// Attribute names of the idempotency item.
pub mod attr {
    /// Partition key: key prefix + idempotency key.
    pub const PK: &str = "pk";
    /// `STARTED`, `COMPLETED` or `FAILED`.
    pub const STATUS: &str = "status";
    /// Fencing number: 1 on claim, +1 on every takeover.
    pub const VERSION: &str = "version";
    /// Token unique to each claim; every later write is conditioned on it.
    pub const OWNER: &str = "owner";
    /// Hex SHA-256 of the payload that claimed the key.
    pub const PAYLOAD_HASH: &str = "payload_hash";
    /// Lease end, epoch milliseconds; meaningful while STARTED.
    pub const LOCK_EXPIRES_AT: &str = "lock_expires_at";
    /// The table's TTL attribute, epoch seconds. Written on every item.
    pub const EXPIRES_AT: &str = "expires_at";
    /// Epoch milliseconds of the first claim.
    pub const CREATED_AT: &str = "created_at";
    /// Epoch milliseconds of the last write.
    pub const UPDATED_AT: &str = "updated_at";
    /// Number of claims and takeovers so far.
    pub const ATTEMPTS: &str = "attempts";
    /// Where the first claimer's message came from (e.g. `payments-0@15`).
    pub const ORIGIN: &str = "origin";
    /// Bounded result text of a COMPLETED item.
    pub const RESULT: &str = "result";
    /// Bounded error text of a FAILED item.
    pub const ERROR: &str = "error";
}

/// The lifecycle state of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Claimed: the work may be running under a lease.
    Started,
    /// Done: redeliveries are duplicates.
    Completed,
    /// Failed for good: redeliveries are refused.
    Failed,
}

impl Status {
    /// The stored text (`STARTED`, `COMPLETED`, `FAILED`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "STARTED",
            Self::Completed => "COMPLETED",
            Self::Failed => "FAILED",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "STARTED" => Some(Self::Started),
            "COMPLETED" => Some(Self::Completed),
            "FAILED" => Some(Self::Failed),
            _ => None,
        }
    }

    pub(crate) fn value(self) -> AttributeValue {
        AttributeValue::S(self.as_str().to_owned())
    }
}

/// What a found item means for a new message of the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Past its TTL: counts as absent (DynamoDB deletes lazily).
    Expired,
    /// The key was used with another payload: the work never runs.
    OtherPayload,
    /// Done for this payload: a duplicate.
    Completed,
    /// Failed permanently for this payload: refused again.
    Failed,
    /// STARTED under a live lease: in progress elsewhere.
    Locked,
    /// STARTED with its lease ended: may be taken over.
    Abandoned,
}

/// An idempotency item as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredItem {
    /// Partition key: prefix + idempotency key.
    pub pk: String,
    /// The key's state.
    pub status: Status,
    /// Fencing number.
    pub version: u64,
    /// The current claim's token.
    pub owner: String,
    /// The fingerprint the key was claimed with.
    pub payload_hash: String,
    /// Lease end, epoch ms, while STARTED.
    pub lock_expires_at_ms: Option<u64>,
    /// TTL, epoch seconds.
    pub expires_at_s: u64,
    /// Epoch ms of the first claim.
    pub created_at_ms: Option<u64>,
    /// Epoch ms of the last write.
    pub updated_at_ms: Option<u64>,
    /// Claims and takeovers so far.
    pub attempts: Option<u64>,
    /// Where the first claimer's message came from.
    pub origin: Option<String>,
    /// The handler's result (COMPLETED).
    pub result: Option<String>,
    /// The error (FAILED).
    pub error: Option<String>,
}

impl StoredItem {
    /// Past its TTL: DynamoDB may not have deleted it yet, but it counts as
    /// absent. Mirrors the claim condition `expires_at < :now_s`.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expires_at_s < crate::clock::ms_to_s(now_ms)
    }

    /// A STARTED item whose lease ran out. Mirrors the takeover condition
    /// `lock_expires_at < :now_ms`.
    pub fn lock_expired(&self, now_ms: u64) -> bool {
        self.lock_expires_at_ms.unwrap_or(0) < now_ms
    }

    /// What this item means for a message with `payload_hash` at `now_ms`:
    /// the one place where a found item is judged (claims, lock-free commits).
    pub fn standing(&self, payload_hash: &str, now_ms: u64) -> Standing {
        if self.is_expired(now_ms) {
            Standing::Expired
        } else if self.payload_hash != payload_hash {
            Standing::OtherPayload
        } else {
            match self.status {
                Status::Completed => Standing::Completed,
                Status::Failed => Standing::Failed,
                Status::Started if self.lock_expired(now_ms) => Standing::Abandoned,
                Status::Started => Standing::Locked,
            }
        }
    }

    pub(crate) fn parse(item: &HashMap<String, AttributeValue>) -> Result<Self, StoreError> {
        let pk = string(item, attr::PK, "?")?;
        let status_text = string(item, attr::STATUS, &pk)?;
        let status = Status::parse(&status_text).ok_or_else(|| StoreError::MalformedItem {
            key: pk.clone(),
            reason: format!("unknown status {status_text:?}"),
        })?;
        Ok(Self {
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
            error: optional_string(item, attr::ERROR),
            pk,
        })
    }
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
pub(crate) fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// `AttributeValue::N` from a whole number.
pub(crate) fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}
