//! Counting and timing the requests a store sends, by operation: what the
//! invocation's metrics report (`StoreRequests`, and `StoreLatency` as one
//! value per request, so that CloudWatch computes percentiles). DynamoDB
//! feeds it from an SDK interceptor (every HTTP request, retries included),
//! PostgreSQL per call on a pooled connection, Redis per command or script.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Requests of one operation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RequestStats {
    /// Requests sent (retries included).
    pub count: u64,
    /// Sum of the requests' round trips, milliseconds.
    pub total_ms: f64,
    /// The longest round trip, ms.
    pub max_ms: f64,
}

impl RequestStats {
    /// The requests since `earlier` was read (`max_ms`: the largest so far).
    pub fn since(&self, earlier: &RequestStats) -> RequestStats {
        RequestStats {
            count: self.count - earlier.count,
            total_ms: self.total_ms - earlier.total_ms,
            max_ms: self.max_ms,
        }
    }
}

/// Round trips kept between two [`RequestCounter::take_latencies`]: beyond
/// this many, every other one is dropped and only every second request is
/// kept from then on (an even sample of any number of requests).
pub const MAX_LATENCY_SAMPLES: usize = 1000;

/// Requests sent, by operation name (`PutItem`, `claim`, ...), and a sample
/// of their round trips. Cloned, it counts into the same totals.
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    counted: Arc<Mutex<Counted>>,
}

#[derive(Debug, Default)]
struct Counted {
    stats: BTreeMap<String, RequestStats>,
    latencies: Vec<f64>,
    /// Every `stride`-th request's round trip is kept (1, 2, 4, ...).
    stride: u64,
    seen: u64,
}

impl RequestCounter {
    /// Counts one request of `operation` that took `elapsed`.
    pub fn record(&self, operation: &str, elapsed: Duration) {
        let ms = elapsed.as_secs_f64() * 1000.0;
        let mut counted = self.lock();
        let entry = counted.stats.entry(operation.to_owned()).or_default();
        entry.count += 1;
        entry.total_ms += ms;
        entry.max_ms = entry.max_ms.max(ms);
        counted.sample(ms);
    }

    /// Times one request of `operation`: counted when the timer is dropped,
    /// however the request ended (answered, failed, or given up on).
    pub fn timer<'a>(&'a self, operation: &'a str) -> RequestTimer<'a> {
        RequestTimer {
            counter: self,
            operation,
            started: Instant::now(),
        }
    }

    /// Requests per operation so far.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.lock()
            .stats
            .iter()
            .map(|(operation, stats)| (operation.clone(), stats.count))
            .collect()
    }

    /// Counts and round trips per operation so far.
    pub fn stats(&self) -> BTreeMap<String, RequestStats> {
        self.lock().stats.clone()
    }

    /// Requests so far, all operations.
    pub fn total(&self) -> u64 {
        self.lock().stats.values().map(|stats| stats.count).sum()
    }

    /// The round trips (ms) sampled since the last call, in the order sent:
    /// all of them up to [`MAX_LATENCY_SAMPLES`], an even sample beyond.
    pub fn take_latencies(&self) -> Vec<f64> {
        let mut counted = self.lock();
        counted.stride = 1;
        counted.seen = 0;
        std::mem::take(&mut counted.latencies)
    }

    /// Starts counting from zero.
    pub fn reset(&self) {
        *self.lock() = Counted::default();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counted> {
        self.counted.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One request being timed ([`RequestCounter::timer`]).
#[derive(Debug)]
pub struct RequestTimer<'a> {
    counter: &'a RequestCounter,
    operation: &'a str,
    started: Instant,
}

impl Drop for RequestTimer<'_> {
    fn drop(&mut self) {
        self.counter.record(self.operation, self.started.elapsed());
    }
}

impl Counted {
    fn sample(&mut self, ms: f64) {
        let stride = self.stride.max(1);
        self.seen += 1;
        if !(self.seen - 1).is_multiple_of(stride) {
            return;
        }
        if self.latencies.len() == MAX_LATENCY_SAMPLES {
            let mut index = 0;
            self.latencies.retain(|_| {
                index += 1;
                index % 2 == 1
            });
            self.stride = stride * 2;
            if !(self.seen - 1).is_multiple_of(self.stride) {
                return;
            }
        }
        self.latencies.push(ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_are_kept_whole_up_to_the_cap_then_evenly_sampled() {
        let whole =
            |sample: Vec<f64>| -> Vec<u64> { sample.iter().map(|ms| ms.round() as u64).collect() };
        let counter = RequestCounter::default();
        for ms in 0..10 {
            counter.record("PutItem", Duration::from_millis(ms));
        }
        assert_eq!(whole(counter.take_latencies()), (0..10).collect::<Vec<_>>());
        assert!(counter.take_latencies().is_empty(), "taken: gone");
        for ms in 0..2500 {
            counter.record("claim", Duration::from_millis(ms));
        }
        // 2,500 requests: every 4th kept (0, 4, 8, ...).
        let every_4th: Vec<u64> = (0..2500).step_by(4).collect();
        assert_eq!(whole(counter.take_latencies()), every_4th);
        assert_eq!(counter.total(), 2510, "every request is counted");
        assert_eq!(counter.stats()["claim"].max_ms.round(), 2499.0);
    }
}
