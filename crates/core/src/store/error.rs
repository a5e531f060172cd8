//! What can go wrong talking to the idempotency store (any backend), and
//! what the caller should do about it.

/// Errors of the idempotency store. [`StoreError::is_retryable`] tells the
/// caller whether the same record may succeed on a later delivery.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached, timed out, throttled or failed on its
    /// side. Nothing was decided: report the record so that it comes again.
    #[error("store unavailable during {operation}: {message}")]
    Unavailable {
        /// The request that failed.
        operation: &'static str,
        /// The client's error.
        message: String,
    },
    /// The store refused the request itself (missing table, no permission,
    /// invalid request). Retrying will not help until the configuration is
    /// fixed; the record still must not be dropped.
    #[error("the store rejected {operation}: {message}")]
    Rejected {
        /// The request refused.
        operation: &'static str,
        /// The store's reason.
        message: String,
    },
    /// The fenced write found the item no longer ours: another worker took the
    /// lock over (a newer version) or the item left STARTED. The work must
    /// not be completed by this worker. (No error text names a key: keys may
    /// be sensitive, and log lines show them only as `LOG_KEYS` allows.)
    #[error("lock lost: version {version} is no longer ours")]
    LockLost {
        /// The item's partition key (never shown in the message).
        key: String,
        /// The version this worker held.
        version: u64,
    },
    /// The idempotency key cannot be stored (empty, or longer than the
    /// store's limit, e.g. DynamoDB's 2048-byte partition key). Permanent for
    /// this record.
    #[error("invalid idempotency key: {0}")]
    InvalidKey(String),
    /// The stored item lacks an attribute this library writes, or holds it
    /// with the wrong type: someone else wrote it. Permanent until an operator
    /// repairs or deletes it.
    #[error("malformed idempotency item: {reason}")]
    MalformedItem {
        /// The item's partition key (never shown in the message).
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A condition of the work's own writes failed, so the completion
    /// transaction wrote nothing. The handler decides whether that is
    /// permanent or retryable.
    #[error("a condition of effect write {effect} failed: {message}")]
    EffectConditionFailed {
        /// Which of the handler's effects (0-based).
        effect: usize,
        /// The store's reason.
        message: String,
    },
    /// The work returned more effects than fit in one transaction beside
    /// the completion. Permanent: the handler must split its effect.
    #[error(
        "the effect has {count} writes; one transaction holds at most {limit} beside the completion"
    )]
    TooManyWrites {
        /// How many writes the effect had.
        count: usize,
        /// How many fit ([`super::Store::MAX_EFFECTS`]).
        limit: usize,
    },
    /// Other workers kept changing the item while this one tried to claim it.
    /// Retryable.
    #[error("the claim kept racing with other workers")]
    Contention {
        /// The item's partition key (never shown in the message).
        key: String,
    },
    /// An operator's write (release, retry-failed) found the key not in the
    /// status and version the operator named: absent, in another status, or
    /// at another version (someone took it over). Nothing was written.
    #[error("the key is not {expected} at version {version} (found: {found}); nothing written")]
    NotInState {
        /// The key.
        key: String,
        /// The status the operator named.
        expected: &'static str,
        /// The version the operator named.
        version: u64,
        /// What the key holds instead.
        found: String,
    },
}

impl StoreError {
    /// An operator's write on `key` found it not `expected` at `version`:
    /// what the key holds instead (`found`, as read at `now_ms`).
    pub fn not_in_state(
        key: String,
        expected: super::Status,
        version: u64,
        found: Option<&super::StoredItem>,
        now_ms: u64,
    ) -> Self {
        let found = match found {
            None => "absent".to_owned(),
            Some(item) => {
                let ttl = match item.is_expired(now_ms) {
                    true => ", past its TTL: counts as absent",
                    false => "",
                };
                format!("{} at version {}{ttl}", item.status.as_str(), item.version)
            }
        };
        Self::NotInState {
            key,
            expected: expected.as_str(),
            version,
            found,
        }
    }

    /// True when the same request may succeed later without any change.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable { .. } | Self::Contention { .. })
    }
}
