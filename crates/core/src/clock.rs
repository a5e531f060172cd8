//! Wall-clock time in the units the item schema uses.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (the unit of `lock_expires_at`).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as u64
}

/// Whole seconds since the Unix epoch (the unit of `expires_at`, the TTL).
pub fn ms_to_s(ms: u64) -> u64 {
    ms / 1000
}

/// A duration in whole milliseconds.
pub fn duration_ms(d: Duration) -> u64 {
    d.as_millis() as u64
}
