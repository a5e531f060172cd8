//! Why an invocation fails as a whole, and how Lambda is told (its
//! `errorType`).

use exactly_once_core::store::StoreError;

use crate::sources::{EventError, Source};

/// Why an invocation failed as a whole (Lambda then retries the batch).
#[derive(Debug, thiserror::Error)]
pub enum InvocationError {
    #[error(transparent)]
    /// The event itself cannot be processed.
    Event(#[from] EventError),
    /// DynamoDB was unavailable and no record could be finished.
    #[error(
        "the idempotency store is unavailable: no record of the batch could be processed ({reported} reported)"
    )]
    StoreUnavailable {
        /// Records reported.
        reported: usize,
    },
    /// The scheduled stuck-key check could not list the STARTED keys.
    #[error("the stuck-key check could not list the STARTED keys: {0}")]
    StuckKeyCheck(StoreError),
    /// The scheduled sweeper could not list or clear the unsent messages.
    #[error("the sweeper of unsent messages failed: {0}")]
    Sweep(StoreError),
    /// Messages of a source without a partial batch response (Amazon MQ)
    /// were left unfinished: the batch fails whole, and Lambda delivers it
    /// again (the broker's redelivery limit and dead-letter queue apply).
    #[error(
        "{left} of {records} {source} messages not finished ({why}); {source} has no partial \
         batch response, so the batch fails whole: Lambda delivers it again, and the finished \
         messages come as duplicates, skipped",
        source = .event_source.title()
    )]
    BatchNotFinished {
        /// The batch's source.
        event_source: Source,
        /// Messages left unfinished.
        left: usize,
        /// Messages of the batch.
        records: usize,
        /// The outcomes of the ones left, counted (`2 in-progress, 1 failed`).
        why: String,
    },
}

impl From<InvocationError> for lambda_runtime::Diagnostic {
    fn from(err: InvocationError) -> Self {
        let error_type = match &err {
            InvocationError::Event(EventError::UnknownSource(_)) => "UnknownEventSource",
            InvocationError::Event(EventError::NotServed { .. }) => "EventSourceNotServed",
            InvocationError::Event(EventError::Malformed(_)) => "MalformedEvent",
            InvocationError::StoreUnavailable { .. } => "StoreUnavailable",
            InvocationError::StuckKeyCheck(_) => "StuckKeyCheckFailed",
            InvocationError::Sweep(_) => "SweepFailed",
            InvocationError::BatchNotFinished { .. } => "BatchNotFinished",
        };
        Self {
            error_type: error_type.into(),
            error_message: err.to_string(),
        }
    }
}
