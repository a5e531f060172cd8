//! The vocabulary of CloudWatch's Embedded Metric Format, which an
//! invocation's report and the scheduled check both write in: the
//! namespace, a metric, a document.

use serde_json::{Map, Value, json};

/// The CloudWatch namespace of the function's metrics.
pub const METRICS_NAMESPACE: &str = "MskExactlyOnce";

/// At most this many values in one metric of one EMF document.
pub const MAX_VALUES: usize = 100;

/// One metric of an EMF document: one value, or several (each counted by
/// CloudWatch as a sample, as percentiles need).
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// Its name.
    pub name: String,
    /// Its values (one, or at most [`MAX_VALUES`]).
    pub values: Vec<f64>,
    /// Its CloudWatch unit (`Count`, `Milliseconds`, `Seconds`).
    pub unit: &'static str,
}

impl Metric {
    /// One value.
    pub fn one(name: &str, value: f64, unit: &'static str) -> Self {
        Self {
            name: name.to_owned(),
            values: vec![value],
            unit,
        }
    }

    /// One count.
    pub fn count(name: &str, count: u64) -> Self {
        Self::one(name, count as f64, "Count")
    }

    /// `StoreLatency`: round trips, ms.
    pub(crate) fn latencies(values: &[f64]) -> Self {
        Self {
            name: "StoreLatency".to_owned(),
            values: values.to_vec(),
            unit: "Milliseconds",
        }
    }
}

/// An Embedded Metric Format document: one metric directive, the dimension
/// values and metric values at the root (a number, or an array of them).
pub fn emf(
    namespace: &str,
    dimensions: &[(&str, &str)],
    metrics: &[Metric],
    timestamp_ms: u64,
) -> Value {
    let mut root = Map::new();
    for (name, value) in dimensions {
        root.insert((*name).to_owned(), Value::String((*value).to_owned()));
    }
    for metric in metrics {
        let value = match metric.values.as_slice() {
            [one] => json!(one),
            many => json!(many),
        };
        root.insert(metric.name.clone(), value);
    }
    let definitions: Vec<Value> = metrics
        .iter()
        .map(|metric| json!({ "Name": metric.name, "Unit": metric.unit }))
        .collect();
    let dimension_set: Vec<&str> = dimensions.iter().map(|(name, _)| *name).collect();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [dimension_set],
                "Metrics": definitions,
            }],
        }),
    );
    Value::Object(root)
}
