//! One measured row: a scenario in one mode at one round trip.

use std::collections::BTreeMap;

use crate::capacity::CapacityUnits;
use crate::processor::Mode;

/// Operations shown in their own column; anything else is counted as `other`.
const OPERATIONS: [&str; 5] = [
    "PutItem",
    "UpdateItem",
    "TransactWriteItems",
    "BatchGetItem",
    "GetItem",
];

#[derive(Debug, Clone)]
pub struct Row {
    pub scenario: &'static str,
    pub mode: Mode,
    pub rtt_ms: u64,
    pub records: usize,
    pub batch_ms: Vec<f64>,
    pub requests: BTreeMap<String, u64>,
    /// Capacity units the requests consumed, as DynamoDB Local reports them.
    pub units: CapacityUnits,
    /// Requests that reached DynamoDB Local, and their time there (µs).
    pub served: (u64, u64),
    /// Transactions sent while another touching a common item was in
    /// flight (what DynamoDB in AWS cancels), and transactions refused.
    pub overlaps: u64,
    pub refused: u64,
    pub failures: usize,
}

impl Row {
    pub fn p(&self, q: f64) -> f64 {
        let mut sorted = self.batch_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    /// Mean time of a request in DynamoDB Local (without the simulated RTT).
    pub fn service_ms(&self) -> f64 {
        self.served.1 as f64 / 1000.0 / self.served.0.max(1) as f64
    }

    pub fn records_per_s(&self) -> f64 {
        self.records as f64 / (self.p(0.5) / 1000.0)
    }

    pub fn ms_per_record(&self) -> f64 {
        self.p(0.5) / self.records as f64
    }

    /// Capacity units per record.
    pub fn units_per_record(&self) -> CapacityUnits {
        let processed = self.processed();
        CapacityUnits {
            read: self.units.read / processed,
            write: self.units.write / processed,
        }
    }

    /// Records processed, all repetitions.
    fn processed(&self) -> f64 {
        (self.records * self.batch_ms.len()) as f64
    }

    /// Overlapping transactions per record: 0 means the function never
    /// conflicts with itself.
    pub fn overlaps_per_record(&self) -> f64 {
        self.overlaps as f64 / self.processed()
    }

    /// Refused transactions per record (the cost of split groups).
    pub fn refused_per_record(&self) -> f64 {
        self.refused as f64 / self.processed()
    }

    /// Requests per record of `operation` (None: all).
    pub fn per_record(&self, operation: Option<&str>) -> f64 {
        let count: u64 = match operation {
            None => self.requests.values().sum(),
            Some("other") => self
                .requests
                .iter()
                .filter(|(op, _)| !OPERATIONS.contains(&op.as_str()))
                .map(|(_, n)| n)
                .sum(),
            Some(op) => self.requests.get(op).copied().unwrap_or(0),
        };
        count as f64 / self.processed()
    }
}
