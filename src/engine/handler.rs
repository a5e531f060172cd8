//! The business logic's side of the contract.

use std::future::Future;

use crate::store::Lease;

/// Handed to the business logic with every message it runs.
///
/// `key` + `version` identify this attempt at the work uniquely: a takeover
/// raises the version. Pass [`FencingToken::idempotency_key`] to a downstream
/// system's own idempotency mechanism (a payment API's `Idempotency-Key`
/// header, a conditional write on `version`), so that a worker whose lock was
/// taken over cannot get a second call accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencingToken {
    /// The item's partition key (key prefix + idempotency key).
    pub key: String,
    /// Grows with every takeover of the key.
    pub version: u64,
    /// Unique to this claim.
    pub owner: String,
}

impl FencingToken {
    /// `<key>#v<version>`: the same for every retry of one attempt, new for
    /// every takeover.
    pub fn idempotency_key(&self) -> String {
        format!("{}#v{}", self.key, self.version)
    }
}

impl From<&Lease> for FencingToken {
    fn from(lease: &Lease) -> Self {
        Self {
            key: lease.pk.clone(),
            version: lease.version,
            owner: lease.owner.clone(),
        }
    }
}

/// Why the business logic did not finish a message, and whether trying again
/// can help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// A passing problem (a dependency down, throttling): the key is released
    /// and the message comes again.
    #[error("retryable: {0}")]
    Retryable(String),
    /// The message itself is wrong (a poison record): the key is stored as
    /// FAILED and its redeliveries never run the work again.
    #[error("permanent: {0}")]
    Permanent(String),
}

/// The business logic run once per idempotency key.
pub trait RecordHandler: Send + Sync + 'static {
    /// Does the work for `payload`. On success, returns a short text kept on
    /// the COMPLETED item for operators (cut to 1 KiB), if any.
    fn handle(
        &self,
        token: &FencingToken,
        payload: &[u8],
    ) -> impl Future<Output = Result<Option<String>, HandlerError>> + Send;
}
