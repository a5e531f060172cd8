//! Configuration of the idempotency store: a plain struct, filled from the
//! environment by the Lambda edge (see `lambda::settings`).

use std::time::Duration;

/// How the store names, locks and retains idempotency items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The DynamoDB table holding one item per idempotency key.
    pub table_name: String,
    /// Prepended to every idempotency key to form the item's `pk`
    /// (lets several functions share one table). Default: empty.
    pub key_prefix: String,
    /// Length of a claim's lease. A crashed worker's key becomes claimable
    /// again after this long. Default: 30 s.
    pub lock_timeout: Duration,
    /// How long an item is kept (its `expires_at`, the table's TTL) after
    /// every write. Default: 8 days, longer than MSK's default 7-day topic
    /// retention, so a record cannot outlive the memory of having been done.
    pub retention: Duration,
    /// Added to this process's clock wherever the store writes or judges a
    /// time. 0 in production; tests set it to model clock skew between
    /// workers.
    pub clock_offset_ms: i64,
}

impl StoreConfig {
    pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(30);
    pub const DEFAULT_RETENTION: Duration = Duration::from_secs(8 * 24 * 3600);

    /// A configuration with the defaults for everything but the table.
    pub fn new(table_name: impl Into<String>) -> Self {
        Self {
            table_name: table_name.into(),
            key_prefix: String::new(),
            lock_timeout: Self::DEFAULT_LOCK_TIMEOUT,
            retention: Self::DEFAULT_RETENTION,
            clock_offset_ms: 0,
        }
    }
}
