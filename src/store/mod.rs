//! Persistence of idempotency keys in DynamoDB: the key state machine.
//!
//! [`IdempotencyStore`] owns the transitions; each is ONE conditional write
//! (see `locking.rs` and `lock_free.rs`, one file per path, each read top
//! to bottom).

mod error;
mod item;
mod lock_free;
mod locking;
mod operator;
mod read;
mod transact;
mod write;

use aws_sdk_dynamodb::Client;

pub use error::StoreError;
pub use item::{Standing, Status, StoredItem, attr};
pub use lock_free::{CommitOutcome, NewCommit};
pub use locking::MAX_EFFECT_WRITES;
pub(crate) use write::names_in;

use crate::config::{LongKeyPolicy, StoreConfig};
use crate::engine::payload_hash;

/// DynamoDB's limit on a partition key value, in bytes.
pub const MAX_KEY_BYTES: usize = 2048;
/// Error texts (and origins) are cut to this many bytes before they are
/// stored.
pub const MAX_TEXT_BYTES: usize = 1024;
/// The largest result a COMPLETED item keeps (64 KiB, well within
/// DynamoDB's 400 KB item). Results are stored whole, never cut: the engine
/// fails a message whose result is larger.
pub const MAX_RESULT_BYTES: usize = 64 * 1024;

/// The idempotency table, seen through the transitions of its keys.
#[derive(Debug, Clone)]
pub struct IdempotencyStore {
    client: Client,
    config: StoreConfig,
}

/// What a claimer knows about the message whose key it claims.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    /// The idempotency key, without the table's key prefix.
    pub key: &'a str,
    /// Hex SHA-256 of the payload.
    pub payload_hash: &'a str,
    /// Where the message came from, kept on the item for operators.
    pub origin: Option<&'a str>,
    /// The latest the lease may end (epoch ms), e.g. just after the
    /// invocation's deadline; `None`: a full lock timeout.
    pub lease_cap_ms: Option<u64>,
}

/// The right to do a key's work, held until completion, failure or release.
/// Every write made with it is fenced on `version` + `owner`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The item's partition key (prefix + idempotency key).
    pub pk: String,
    /// Fencing number: grows with every takeover.
    pub version: u64,
    /// This claim's unique token.
    pub owner: String,
    /// Lease end, epoch milliseconds.
    pub lock_expires_at_ms: u64,
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The key was free (absent, expired): this worker holds it at version 1.
    Acquired(Lease),
    /// The key's previous owner abandoned it (lease ran out or released):
    /// this worker holds it at the next version; the old owner is fenced out.
    TakenOver(Lease),
    /// The key was already completed for this same payload: skip the work.
    Duplicate(StoredItem),
    /// The key was used before with another payload: never run the work.
    PayloadMismatch(StoredItem),
    /// The key failed permanently before: never run the work again.
    PreviouslyFailed(StoredItem),
    /// Another worker holds a live lease on the key: try again later.
    InProgress(StoredItem),
}

impl IdempotencyStore {
    /// The store on `client` as `config` says.
    pub fn new(client: Client, config: StoreConfig) -> Self {
        Self { client, config }
    }

    /// Its configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// Epoch milliseconds as this store sees them (the process's clock plus
    /// [`StoreConfig::clock_offset_ms`]).
    pub fn now_ms(&self) -> u64 {
        crate::clock::now_ms().saturating_add_signed(self.config.clock_offset_ms)
    }

    /// The partition key for an idempotency key, checked against DynamoDB's
    /// limits: a longer key is refused, or hashed under
    /// [`LongKeyPolicy::Hash`].
    pub fn pk(&self, key: &str) -> Result<String, StoreError> {
        if key.is_empty() {
            return Err(StoreError::InvalidKey("the key is empty".into()));
        }
        let prefix = &self.config.key_prefix;
        let bytes = prefix.len() + key.len();
        if bytes <= MAX_KEY_BYTES {
            return Ok(format!("{prefix}{key}"));
        }
        match self.config.long_keys {
            LongKeyPolicy::Hash => Ok(format!("{prefix}sha256:{}", payload_hash(key.as_bytes()))),
            LongKeyPolicy::Reject => Err(StoreError::InvalidKey(format!(
                "the key is {bytes} bytes with its prefix; DynamoDB allows at most \
                 {MAX_KEY_BYTES} (LONG_KEY_POLICY=hash stores a SHA-256 of it instead)"
            ))),
        }
    }
}

/// Cuts `text` to at most [`MAX_TEXT_BYTES`], on a character boundary.
fn bounded(text: &str) -> &str {
    let mut end = text.len().min(MAX_TEXT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
