//! Answering Lambda: the parked records forwarded to the dead-letter queue,
//! then each record judged (finished, parked or reported), logged and its
//! span finished; the answer is the partial batch response, or an
//! invocation error when the store was out and nothing could be done.

use std::collections::HashMap;

use serde_json::Value;

use exactly_once_core::engine::{Parking, RecordHandler, RecordOutcome};
use exactly_once_core::store::Store;

use super::BatchFunction;
use super::run::Ran;
use crate::dead_letter::Parked;
use crate::error::InvocationError;
use crate::invocation::{Invocation, RecordReport};
use crate::report::InvocationReport;
use crate::response::BatchResponse;
use crate::sources::{Coordinates, FromRecord, Source};
use crate::telemetry;

/// What Lambda is answered, each record judged.
pub(super) struct Answer {
    /// The event's source.
    source: Option<Source>,
    /// Whether the store was unavailable.
    store_unavailable: bool,
    /// The invocation's counts, its clock started with it.
    pub(super) report: InvocationReport,
    /// Every record, in the lanes' order.
    records: Vec<RecordReport>,
    /// The records the response lists.
    failures: Vec<Coordinates>,
}

impl Answer {
    /// The invocation: the partial batch response, or, when the store was
    /// unavailable and no record could be finished, an invocation error
    /// that retries the batch.
    pub(super) fn into_invocation(mut self) -> Result<Invocation, InvocationError> {
        let report = &self.report;
        if self.store_unavailable && report.finished == 0 && report.reported > 0 {
            // Nothing could be done: an invocation error retries the batch.
            return Err(InvocationError::StoreUnavailable {
                reported: report.reported as usize,
            });
        }
        self.failures.sort();
        Ok(Invocation {
            source: self.source,
            response: BatchResponse {
                batch_item_failures: self.failures.into_iter().map(Into::into).collect(),
            },
            records: self.records,
        })
    }
}

impl<H, S> BatchFunction<H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
    H::Record: FromRecord,
{
    /// Forwards the parked records of `ran`, then judges every record:
    /// finished, parked, or reported (also a parked one whose dead-letter
    /// message was not sent); each logged, its span finished.
    pub(super) async fn answer(
        &self,
        event: &Value,
        ran: &Ran,
        mut report: InvocationReport,
    ) -> Answer {
        let parking = self.engine.config().parking();
        let unsent = self.forward_parked(event, &ran.results, parking).await;
        let (mut records, mut failures) = (Vec::new(), Vec::new());
        let log_keys = self.settings.log_keys;
        for (at, key, result) in &ran.results {
            let unparked = unsent.get(at).map(String::as_str);
            let reported = report.record(at, key.as_deref(), result, log_keys, parking, unparked);
            if let Some(span) = ran.spans.get(at) {
                telemetry::finish_record(span, &result.outcome, reported);
            }
            records.push(RecordReport {
                outcome: result.outcome.name(),
                detail: result.outcome.detail(),
                reported,
                at: at.clone(),
            });
            if reported {
                failures.push(at.clone());
            }
        }
        Answer {
            source: ran.source,
            store_unavailable: ran.store_unavailable,
            report,
            records,
            failures,
        }
    }

    /// Sends the parked records to the dead-letter queue, if there is one;
    /// the ones that could not be sent, with why. Without a queue, a parked
    /// record that has no FAILED item (a refused one) cannot be parked: it
    /// would leave no trace.
    async fn forward_parked(
        &self,
        event: &Value,
        results: &[(Coordinates, Option<String>, RecordOutcome)],
        parking: Parking,
    ) -> HashMap<Coordinates, String> {
        let parked = results
            .iter()
            .filter(|(_, _, result)| parking.parks(&result.outcome));
        let Some(queue) = &self.dead_letters else {
            return parked
                .filter(|(_, _, result)| !result.outcome.is_failed())
                .map(|(at, _, _)| (at.clone(), "no dead-letter queue".to_owned()))
                .collect();
        };
        let parked: Vec<Parked> = parked
            .map(|(at, _, result)| Parked {
                at: at.clone(),
                outcome: result.outcome.name(),
                error: result.outcome.detail(),
            })
            .collect();
        if parked.is_empty() {
            return HashMap::new();
        }
        queue.forward(event, parked).await.into_iter().collect()
    }
}
