//! What an invocation tells operators: one JSON log line per record (its
//! coordinates, key, outcome, time spent; never its payload), one summary
//! line, and one CloudWatch Embedded Metric Format document on stdout.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use exactly_once_core::engine::{Parking, RecordOutcome};
use exactly_once_core::store::payload_hash;
use exactly_once_core::store::requests::RequestStats;

use super::emf::{MAX_VALUES, METRICS_NAMESPACE, Metric, emf};
use super::sources::Coordinates;

/// A record's log line at `level`: a Kafka record named by `partition` and
/// `offset`, another source's by `partition` (its ordering unit) and `id`
/// (its message id or sequence number); then `fields` and the message.
macro_rules! record_line {
    ($level:ident, $at:expr, $message:literal, $($fields:tt)*) => {
        match &$at.id {
            None => tracing::$level!(partition = %$at.partition, offset = $at.offset, $($fields)* $message),
            Some(id) => tracing::$level!(partition = %$at.partition, id = %id, $($fields)* $message),
        }
    };
}

/// How keys appear in logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyLogging {
    /// As they are.
    Plain,
    /// As the first 16 hex digits of their SHA-256, for sensitive keys.
    Hash,
}

/// A key as `LOG_KEYS=hash` shows it: `sha256:` and the first 16 hex digits
/// of its SHA-256.
pub fn key_hash(key: &str) -> String {
    format!("sha256:{}", &payload_hash(key.as_bytes())[..16])
}

impl KeyLogging {
    /// Parses `LOG_KEYS`: `plain` or `hash`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "plain" => Ok(Self::Plain),
            "hash" => Ok(Self::Hash),
            other => Err(format!(
                "unknown key logging {other:?}; expected plain or hash"
            )),
        }
    }

    /// `key` as logs show it.
    pub fn show(self, key: &str) -> String {
        match self {
            Self::Plain => key.to_owned(),
            Self::Hash => key_hash(key),
        }
    }
}

/// Counts of one invocation.
#[derive(Debug)]
pub struct InvocationReport {
    started: Instant,
    outcomes: BTreeMap<&'static str, u64>,
    /// Records of the invocation.
    pub records: u64,
    /// Records processed or found duplicate.
    pub finished: u64,
    /// Stored FAILED and not reported (`POISON_POLICY=park`).
    pub parked: u64,
    /// Records listed in the response.
    pub reported: u64,
}

impl InvocationReport {
    /// An empty report, its clock started.
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            outcomes: BTreeMap::new(),
            records: 0,
            finished: 0,
            parked: 0,
            reported: 0,
        }
    }

    /// Logs one record's outcome and counts it; whether it is reported.
    /// `unparked`: why a record that would be parked could not be (its
    /// dead-letter message was not sent): it is reported instead.
    pub fn record(
        &mut self,
        at: &Coordinates,
        key: Option<&str>,
        result: &RecordOutcome,
        keys: KeyLogging,
        parking: Parking,
        unparked: Option<&str>,
    ) -> bool {
        let outcome = &result.outcome;
        let name = outcome.name();
        let key = key.map(|k| keys.show(k)).unwrap_or_default();
        let elapsed_ms = result.elapsed.as_secs_f64() * 1000.0;
        self.records += 1;
        *self.outcomes.entry(name).or_default() += 1;
        if outcome.is_finished() {
            record_line!(info, at, "record finished", %key, outcome = name, elapsed_ms,);
            self.finished += 1;
            false
        } else if parking.parks(outcome) && unparked.is_none() {
            let detail = outcome.detail().unwrap_or_default();
            record_line!(warn, at, "record failed permanently, parked", %key, outcome = name, elapsed_ms, %detail,);
            self.parked += 1;
            false
        } else {
            let mut detail = outcome.detail().unwrap_or_default();
            if let Some(why) = unparked {
                detail = format!("{detail}; not parked, {why}");
            }
            record_line!(warn, at, "record not finished, reported", %key, outcome = name, elapsed_ms, %detail,);
            self.reported += 1;
            true
        }
    }

    /// Time since the invocation started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The invocation's EMF documents: counts per outcome (`Processed`,
    /// `TakenOver`, `LockLost`, `UnrecordedEffects`, ...), batch size,
    /// records reported, whether it failed closed (`FailedClosed`: the store
    /// was unavailable), the store's requests (`StoreRequests`) and their
    /// round trips (`StoreLatency`, one value per request so that CloudWatch
    /// computes percentiles; at most [`MAX_VALUES`] per document, the rest in
    /// documents of their own), and how far the container's clock is known
    /// to be off the store's (`ClockSkewMs`, once the store has looked).
    pub fn metrics(
        &self,
        function_name: &str,
        requests: &StoreRequests,
        failed_closed: bool,
        timestamp_ms: u64,
    ) -> Vec<Value> {
        let mut metrics = vec![
            Metric::count("Records", self.records),
            Metric::count("Reported", self.reported),
            Metric::count("Parked", self.parked),
            Metric::count("FailedClosed", u64::from(failed_closed)),
            Metric::one(
                "BatchDuration",
                self.elapsed().as_secs_f64() * 1000.0,
                "Milliseconds",
            ),
        ];
        for name in ALL_OUTCOMES {
            let count = self.outcomes.get(name).copied().unwrap_or(0);
            metrics.push(Metric::count(&camel(name), count));
        }
        let count: u64 = requests.stats.values().map(|s| s.count).sum();
        metrics.push(Metric::count("StoreRequests", count));
        let mut latencies = requests.latencies.chunks(MAX_VALUES);
        if let Some(first) = latencies.next() {
            metrics.push(Metric::latencies(first));
        }
        if let Some(skew_ms) = requests.clock_skew_ms {
            metrics.push(Metric::one(
                "ClockSkewMs",
                skew_ms.unsigned_abs() as f64,
                "Milliseconds",
            ));
        }
        let dimensions = [("FunctionName", function_name)];
        let mut documents = vec![emf(METRICS_NAMESPACE, &dimensions, &metrics, timestamp_ms)];
        documents.extend(latencies.map(|chunk| {
            emf(
                METRICS_NAMESPACE,
                &dimensions,
                &[Metric::latencies(chunk)],
                timestamp_ms,
            )
        }));
        documents
    }
}

/// An invocation's store requests: counts per operation, and a sample of
/// their round trips ([`exactly_once_core::store::requests::RequestCounter`]).
#[derive(Debug, Clone, Default)]
pub struct StoreRequests {
    /// Requests and round trips per operation.
    pub stats: BTreeMap<String, RequestStats>,
    /// Round trips, ms, in the order sent.
    pub latencies: Vec<f64>,
    /// How far this container's clock is known to be off the store's
    /// (positive: ahead), from what the store's answers told of its time;
    /// `None` before the store's first look (`ClockSkewMs`, unsigned).
    pub clock_skew_ms: Option<i64>,
}

impl Default for InvocationReport {
    fn default() -> Self {
        Self::new()
    }
}

/// The metrics of an invocation's documents, by name (the outcomes' counts
/// included).
pub fn metric_names() -> impl Iterator<Item = String> {
    let fixed = [
        "Records",
        "Reported",
        "Parked",
        "FailedClosed",
        "BatchDuration",
    ];
    let stores = ["StoreRequests", "StoreLatency", "ClockSkewMs"];
    fixed
        .into_iter()
        .map(str::to_owned)
        .chain(ALL_OUTCOMES.iter().map(|name| camel(name)))
        .chain(stores.into_iter().map(str::to_owned))
}

/// Every outcome name (see `Outcome::name`), so that every metric is
/// emitted, zeros included (alarms then see data, not gaps).
const ALL_OUTCOMES: &[&str] = &[
    "processed",
    "taken-over",
    "duplicate",
    "replay-failed",
    "unsent",
    "in-progress",
    "rejected",
    "scope-conflict",
    "previously-failed",
    "failed",
    "retrying",
    "lock-lost",
    "store-error",
    "invalid",
    "timed-out",
    "not-started",
    "unrecorded-effects",
];

/// `lock-lost` -> `LockLost`.
fn camel(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|first| first.to_uppercase().chain(chars).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use exactly_once_core::engine::PoisonPolicy;
    use serde_json::json;

    const REPORT: Parking = Parking {
        poison: PoisonPolicy::Report,
        refused: false,
    };
    use exactly_once_core::engine::Outcome;

    /// The rules of the EMF specification a document must follow.
    fn assert_valid_emf(doc: &Value) {
        let aws = &doc["_aws"];
        assert!(aws["Timestamp"].is_u64(), "Timestamp: epoch ms");
        let directives = aws["CloudWatchMetrics"]
            .as_array()
            .expect("CloudWatchMetrics: array");
        assert_eq!(directives.len(), 1);
        for directive in directives {
            let namespace = directive["Namespace"].as_str().expect("Namespace: string");
            assert!(!namespace.is_empty() && namespace.len() <= 1024);
            let sets = directive["Dimensions"]
                .as_array()
                .expect("Dimensions: array of arrays");
            for set in sets {
                let names = set.as_array().expect("a dimension set is an array");
                assert!(names.len() <= 30, "at most 30 dimensions a set");
                for name in names {
                    let name = name.as_str().expect("dimension name: string");
                    assert!(
                        doc[name].is_string(),
                        "dimension {name} has a string value at the root"
                    );
                }
            }
            let metrics = directive["Metrics"].as_array().expect("Metrics: array");
            assert!(
                !metrics.is_empty() && metrics.len() <= 100,
                "1 to 100 metrics"
            );
            let mut names: Vec<&str> = Vec::new();
            for metric in metrics {
                let name = metric["Name"].as_str().expect("Name: string");
                assert!(!name.is_empty() && name.len() <= 1024);
                let value = &doc[name];
                let values = value.as_array().map_or(1, Vec::len);
                assert!(
                    value.is_number()
                        || value
                            .as_array()
                            .is_some_and(|values| values.iter().all(Value::is_number)),
                    "metric {name} has a number or an array of numbers at the root"
                );
                assert!((1..=100).contains(&values), "{name}: 1 to 100 values");
                let unit = metric["Unit"].as_str().expect("Unit: string");
                assert!(
                    ["Count", "Milliseconds", "Seconds"].contains(&unit),
                    "{unit}"
                );
                names.push(name);
            }
            let count = names.len();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), count, "metric names are unique");
        }
    }

    #[test]
    fn an_invocation_report_is_a_valid_emf_document_with_every_outcome() {
        let mut report = InvocationReport::new();
        let at = |offset| Coordinates::kafka("payments-0", offset);
        let record = |outcome| RecordOutcome {
            outcome,
            elapsed: Duration::from_millis(3),
        };
        report.record(
            &at(1),
            Some("p-1"),
            &record(Outcome::Processed {
                version: 1,
                result: None,
                unsent: None,
            }),
            KeyLogging::Hash,
            REPORT,
            None,
        );
        report.record(
            &at(2),
            Some("p-2"),
            &record(Outcome::Processed {
                version: 2,
                result: None,
                unsent: None,
            }),
            KeyLogging::Plain,
            REPORT,
            None,
        );
        report.record(
            &at(3),
            None,
            &record(Outcome::LockLost),
            KeyLogging::Plain,
            REPORT,
            None,
        );
        let requests = StoreRequests {
            stats: BTreeMap::from([
                (
                    "PutItem".to_owned(),
                    RequestStats {
                        count: 120,
                        total_ms: 480.0,
                        max_ms: 5.0,
                    },
                ),
                (
                    "TransactWriteItems".to_owned(),
                    RequestStats {
                        count: 130,
                        total_ms: 780.0,
                        max_ms: 7.0,
                    },
                ),
            ]),
            latencies: (0..250).map(f64::from).collect(),
            clock_skew_ms: Some(-1_250),
        };
        let documents = report.metrics("msk-handler", &requests, true, 1_700_000_000_000);
        assert_eq!(documents.len(), 3, "250 round trips: 100 + 100 + 50");
        for doc in &documents {
            assert_valid_emf(doc);
            assert_eq!(doc["FunctionName"], "msk-handler");
            assert_eq!(
                doc["_aws"]["CloudWatchMetrics"][0]["Namespace"],
                METRICS_NAMESPACE
            );
            assert_eq!(
                doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
                json!([["FunctionName"]])
            );
        }
        let doc = &documents[0];
        for (metric, value) in [
            ("Records", 3.0),
            ("Reported", 1.0),
            ("Processed", 1.0),
            ("TakenOver", 1.0),
            ("LockLost", 1.0),
            ("Duplicate", 0.0),
            ("NotStarted", 0.0),
            ("UnrecordedEffects", 0.0),
            ("FailedClosed", 1.0),
            ("StoreRequests", 250.0),
            ("ClockSkewMs", 1_250.0),
        ] {
            assert_eq!(doc[metric].as_f64(), Some(value), "{metric}");
        }
        let latencies = |doc: &Value| -> Vec<f64> {
            serde_json::from_value(doc["StoreLatency"].clone()).expect("an array of ms")
        };
        let all: Vec<f64> = documents.iter().flat_map(latencies).collect();
        assert_eq!(all, requests.latencies, "every sampled round trip, once");
        assert_eq!(
            documents[2]["_aws"]["CloudWatchMetrics"][0]["Metrics"],
            json!([{ "Name": "StoreLatency", "Unit": "Milliseconds" }]),
            "the overflow documents carry the latencies only"
        );
        let quiet = report.metrics("f", &StoreRequests::default(), false, 1);
        assert_eq!(quiet.len(), 1);
        assert!(
            quiet[0].get("StoreLatency").is_none(),
            "no requests: no latency data"
        );
        assert_eq!(quiet[0]["FailedClosed"], 0.0);
        assert!(
            quiet[0].get("ClockSkewMs").is_none(),
            "no look at the store's clock yet: no skew claimed"
        );
    }

    #[test]
    fn sensitive_keys_are_logged_as_a_hash_prefix() {
        assert_eq!(KeyLogging::Plain.show("p-1"), "p-1");
        let hashed = KeyLogging::Hash.show("p-1");
        assert!(
            hashed.starts_with("sha256:") && hashed.len() == 7 + 16,
            "{hashed}"
        );
        assert!(!hashed.contains("p-1"));
    }
}
