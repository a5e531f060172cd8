//! Recording the invocation: its summary log line, the totals on the
//! batch's span, and its EMF documents.

use lambda_runtime::Context;

use exactly_once_core::clock::now_ms;
use exactly_once_core::engine::RecordHandler;
use exactly_once_core::store::Store;

use super::BatchFunction;
use super::answer::Answer;
use super::run::Ran;
use crate::report::StoreRequests;
use crate::sources::FromRecord;

impl<H, S> BatchFunction<H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
    H::Record: FromRecord,
{
    /// Logs the batch's summary (`batch done`), records what it reported
    /// and the store requests it made on its span, and writes its EMF
    /// documents.
    pub(super) fn record(&self, context: &Context, ran: &Ran, answer: &Answer) {
        let report = &answer.report;
        tracing::info!(
            target: super::TARGET,
            request_id = %context.request_id,
            records = report.records,
            finished = report.finished,
            parked = report.parked,
            reported = report.reported,
            store_unavailable = ran.store_unavailable,
            elapsed_ms = report.elapsed().as_secs_f64() * 1000.0,
            "batch done"
        );
        let requests = StoreRequests {
            stats: ran.requests.stats(),
            latencies: ran.requests.take_latencies(),
            clock_skew_ms: self.engine.store().clock_skew_ms(),
        };
        ran.batch_span
            .record("exactly_once.reported", report.reported);
        ran.batch_span.record(
            "exactly_once.store_requests",
            requests
                .stats
                .values()
                .map(|stats| stats.count)
                .sum::<u64>(),
        );
        if let Some(write) = &self.metrics {
            let function_name = &context.env_config.function_name;
            let failed_closed = ran.store_unavailable;
            for document in report.metrics(function_name, &requests, failed_closed, now_ms()) {
                write(&document.to_string());
            }
        }
    }
}
