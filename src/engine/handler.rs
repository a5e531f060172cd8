//! The business logic's side of the contract.

use std::future::Future;

use aws_sdk_dynamodb::types::TransactWriteItem;

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

/// What finished work leaves for the engine to record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Completion {
    /// A short text kept on the COMPLETED item for operators (cut to 1 KiB).
    pub result: Option<String>,
    /// The work's effect as DynamoDB writes (Put, Update, Delete,
    /// ConditionCheck on any table), committed in ONE transaction with the
    /// completion: either both happen or neither. At most 99. Empty when the
    /// work performed its effects itself.
    pub writes: Vec<TransactWriteItem>,
    /// What it means when a condition of `writes` fails.
    pub on_condition_failure: ConditionFailure,
}

/// How the engine treats a failed condition of a handler's own writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ConditionFailure {
    /// The message can never succeed (e.g. insufficient funds): FAILED.
    #[default]
    Permanent,
    /// The condition may hold later: release the key, redeliver.
    Retryable,
}

impl Completion {
    /// The work performed its effects itself.
    pub fn done(result: impl Into<String>) -> Self {
        Self {
            result: Some(result.into()),
            ..Self::default()
        }
    }

    /// The work's effect is `writes`, to commit with the completion.
    pub fn transactional(result: impl Into<String>, writes: Vec<TransactWriteItem>) -> Self {
        Self {
            result: Some(result.into()),
            writes,
            on_condition_failure: ConditionFailure::Permanent,
        }
    }
}

/// How the engine commits a handler's work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CommitPath {
    /// Claim the key (a lock), run the work under a renewed lease, record
    /// the outcome with fenced writes: for work with effects outside
    /// DynamoDB. Two requests per new message.
    #[default]
    Locking,
    /// No claim, no lock: the work's whole effect is the DynamoDB writes it
    /// returns in [`Completion::writes`], computed WITHOUT side effects (the
    /// engine may compute them ahead, and drop them). They commit in ONE
    /// transaction with the COMPLETED item, which succeeds only if the key is
    /// new. One request per new message, or less: consecutive messages of a
    /// lane whose writes touch distinct items share a transaction.
    LockFree,
}

/// The business logic run once per idempotency key.
pub trait RecordHandler: Send + Sync + 'static {
    /// How this handler's work is committed (default: [`CommitPath::Locking`]).
    /// Answer [`CommitPath::LockFree`] only if `handle` performs no side
    /// effect and derives its writes from the payload alone.
    fn commit_path(&self) -> CommitPath {
        CommitPath::Locking
    }

    /// Does the work for `payload`, or returns it as writes to commit (see
    /// [`Completion`]).
    fn handle(
        &self,
        token: &FencingToken,
        payload: &[u8],
    ) -> impl Future<Output = Result<Completion, HandlerError>> + Send;
}
