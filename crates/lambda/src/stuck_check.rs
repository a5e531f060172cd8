//! The scheduled stuck-key check. EventBridge's `Scheduled Event` (the
//! template's `StuckKeyCheck`, every 5 minutes) makes the function list the
//! STARTED keys through the store's index of STARTED items (a sparse GSI on
//! DynamoDB, a partial index on PostgreSQL, a sorted set on Redis: the cost
//! follows their number, not the table's size) and emit `StuckKeys` (STARTED
//! keys whose lock ended) and `OldestStartedAgeSeconds`, which alarm when a
//! key stays STARTED long after its work should have ended.
//!
//! The same schedule runs the sweeper of emitted messages
//! ([`exactly_once_core::outbox`]): those of keys COMPLETED more than
//! [`SWEEP_AFTER`] ago and still unsent (their record never came back) are
//! sent, under their stable ids; `UnsentRecords`, `SweptRecords` and
//! `OldestUnsentAgeSeconds` (the oldest still unsent after the sweep)
//! alarm when messages stay unsent.

use serde_json::Value;

use std::time::Duration;

use exactly_once_core::clock::ms_to_s;
use exactly_once_core::engine::Swept;
use exactly_once_core::store::StoredItem;

use super::emf::{METRICS_NAMESPACE, Metric, emf};

/// The metrics of the check's documents, by name.
pub const METRIC_NAMES: [&str; 6] = [
    "StartedKeys",
    "StuckKeys",
    "OldestStartedAgeSeconds",
    "UnsentRecords",
    "SweptRecords",
    "OldestUnsentAgeSeconds",
];

/// The sweeper sends the messages of keys COMPLETED at least this long ago:
/// Lambda's longest invocation, so that it never races the invocation that
/// committed them (which sends them at its end).
pub const SWEEP_AFTER: Duration = Duration::from_secs(15 * 60);

/// The sweep's EMF document (namespace and dimension as an invocation's).
pub fn sweep_metrics(swept: &Swept, function_name: &str, timestamp_ms: u64) -> Value {
    emf(
        METRICS_NAMESPACE,
        &[("FunctionName", function_name)],
        &[
            Metric::count(METRIC_NAMES[3], swept.found as u64),
            Metric::count(METRIC_NAMES[4], swept.sent as u64),
            Metric::one(METRIC_NAMES[5], swept.oldest_left_age_s as f64, "Seconds"),
        ],
        timestamp_ms,
    )
}

/// Whether `payload` is EventBridge's scheduled event (`source`
/// `aws.events`, `detail-type` `Scheduled Event`).
pub fn is_scheduled_event(payload: &Value) -> bool {
    payload["source"] == "aws.events" && payload["detail-type"] == "Scheduled Event"
}

/// What the STARTED keys of the table look like at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StartedKeys {
    /// STARTED keys (live: not past their TTL).
    pub started: usize,
    /// Those whose lock ended (expired or released) and nobody took over.
    pub stuck: usize,
    /// The age of the oldest, seconds (0 when there is none).
    pub oldest_age_s: u64,
}

impl StartedKeys {
    /// The summary of `items` (STARTED, live) at `now_ms`.
    pub fn of(items: &[StoredItem], now_ms: u64) -> Self {
        let oldest = items.iter().filter_map(|item| item.created_at_ms).min();
        Self {
            started: items.len(),
            stuck: items
                .iter()
                .filter(|item| item.lock_expired(now_ms))
                .count(),
            oldest_age_s: oldest.map_or(0, |at| ms_to_s(now_ms.saturating_sub(at))),
        }
    }

    /// The check's EMF document (namespace and dimension as an invocation's).
    pub fn metrics(&self, function_name: &str, timestamp_ms: u64) -> Value {
        emf(
            METRICS_NAMESPACE,
            &[("FunctionName", function_name)],
            &[
                Metric::count(METRIC_NAMES[0], self.started as u64),
                Metric::count(METRIC_NAMES[1], self.stuck as u64),
                Metric::one(METRIC_NAMES[2], self.oldest_age_s as f64, "Seconds"),
            ],
            timestamp_ms,
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_eventbridge_schedules_are_checks() {
        let scheduled = json!({
            "version": "0", "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
            "detail-type": "Scheduled Event", "source": "aws.events",
            "account": "123456789012", "time": "2026-11-23T12:00:00Z",
            "region": "us-east-1", "resources": [], "detail": {}
        });
        assert!(is_scheduled_event(&scheduled));
        assert!(!is_scheduled_event(
            &json!({"eventSource": "aws:kafka", "records": {}})
        ));
        assert!(!is_scheduled_event(
            &json!({"source": "aws.events", "detail-type": "EC2 Instance State-change Notification"})
        ));
    }
}
