//! What one invocation became: the answer Lambda gets, and each record's
//! outcome.

use crate::error::InvocationError;
use crate::response::BatchResponse;
use crate::sources::{Coordinates, Source};

/// One invocation's answer, and what became of each record.
#[derive(Debug)]
pub struct Invocation {
    /// The event's source (`None` for an event without records).
    pub source: Option<Source>,
    /// The records to deliver again, as the partial batch response names
    /// them.
    pub response: BatchResponse,
    /// Every record of the event, in the lanes' order.
    pub records: Vec<RecordReport>,
}

impl Invocation {
    /// What Lambda is answered: the partial batch response, or, for a
    /// source without one (Amazon MQ) with a message left unfinished,
    /// [`InvocationError::BatchNotFinished`], so the batch comes again whole.
    pub fn into_answer(self) -> Result<BatchResponse, InvocationError> {
        let source = match self.source {
            Some(source) if !source.has_partial_batch_response() => source,
            _ => return Ok(self.response),
        };
        let mut left = std::collections::BTreeMap::<&str, usize>::new();
        for record in self.records.iter().filter(|record| record.reported) {
            *left.entry(record.outcome).or_default() += 1;
        }
        if left.is_empty() {
            return Ok(self.response);
        }
        let why = left
            .iter()
            .map(|(outcome, count)| format!("{count} {outcome}"))
            .collect::<Vec<_>>()
            .join(", ");
        Err(InvocationError::BatchNotFinished {
            event_source: source,
            left: left.values().sum(),
            records: self.records.len(),
            why,
        })
    }
}

/// What became of one record (what its log line says).
#[derive(Debug, Clone)]
pub struct RecordReport {
    /// Where the record sits.
    pub at: Coordinates,
    /// The outcome's name (`processed`, `duplicate`, `failed`, ...).
    pub outcome: &'static str,
    /// Why it did not finish, if so (never payload content).
    pub detail: Option<String>,
    /// Listed in the response's failures.
    pub reported: bool,
}
