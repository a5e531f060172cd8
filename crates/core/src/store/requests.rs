//! Counting and timing the requests a store sends, by operation: what the
//! invocation's metrics report (`StoreRequests`, and `StoreLatency` as one
//! value per request, so that CloudWatch computes percentiles). DynamoDB
//! feeds it from an SDK interceptor (every HTTP request, retries included),
//! PostgreSQL per call on a pooled connection, Redis per command or script.
//!
//! Two ways to count:
//! - an **invocation's scope** ([`counted`]): every request the stores send
//!   for a future, and for the tasks the engine spawns on its behalf
//!   ([`inherit`]), goes to that invocation's counter alone, however many
//!   invocations run at once in the container (Lambda Managed Instances);
//! - a **counter attached** to a store or a client, which sees every
//!   request that store sends, whoever it is for (a test's, a benchmark's).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

tokio::task_local! {
    /// The counter of the invocation the current task works for.
    static SCOPE: RequestCounter;
}

/// Runs `work`, counting every store request sent for it into `counter`:
/// the requests of its own task, and of the tasks spawned through
/// [`inherit`] (the engine's lanes, claims made ahead, shared transactions).
pub async fn counted<F: Future>(counter: RequestCounter, work: F) -> F::Output {
    SCOPE.scope(counter, work).await
}

/// `work` in the current task's scope: for a task spawned on its behalf,
/// so that its requests count for the same invocation.
pub fn inherit<F: Future>(work: F) -> impl Future<Output = F::Output> {
    let scope = SCOPE.try_with(Clone::clone).ok();
    async move {
        match scope {
            Some(counter) => SCOPE.scope(counter, work).await,
            None => work.await,
        }
    }
}

/// Counts one request of `operation` that took `elapsed` for the invocation
/// the current task works for, if it works for one (what a store's
/// instrumentation calls for every request).
pub fn record_in_scope(operation: &str, elapsed: Duration) {
    let _ = SCOPE.try_with(|counter| counter.record(operation, elapsed));
}

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
        self.counted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One request being timed ([`RequestCounter::timer`]).
#[derive(Debug)]
pub struct RequestTimer<'a> {
    counter: &'a RequestCounter,
    operation: &'a str,
    started: Instant,
}

/// Counted in the timer's counter and in the current invocation's scope.
impl Drop for RequestTimer<'_> {
    fn drop(&mut self) {
        let elapsed = self.started.elapsed();
        self.counter.record(self.operation, elapsed);
        record_in_scope(self.operation, elapsed);
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

    #[tokio::test]
    async fn an_invocations_scope_counts_its_own_requests_and_its_spawned_tasks() {
        let (attached, first, second) = (
            RequestCounter::default(),
            RequestCounter::default(),
            RequestCounter::default(),
        );
        let request = |attached: RequestCounter| async move {
            let _timer = attached.timer("claim");
        };
        let one = counted(first.clone(), async {
            request(attached.clone()).await;
            // A task spawned on its behalf counts for it too.
            tokio::spawn(inherit(request(attached.clone())))
                .await
                .expect("the task");
        });
        let other = counted(second.clone(), request(attached.clone()));
        tokio::join!(one, other);
        // Outside any scope: the attached counter only.
        request(attached.clone()).await;
        assert_eq!(first.total(), 2);
        assert_eq!(second.total(), 1);
        assert_eq!(attached.total(), 4);
    }

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
