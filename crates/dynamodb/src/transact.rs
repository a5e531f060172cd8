//! One TransactWriteItems: sent again while it is cancelled only by
//! transaction conflicts or throttling (the SDK does not retry a cancelled
//! transaction), and its cancellation reasons read.

use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{CancellationReason, TransactWriteItem};

use super::{DynamoDbStore, sdk_error};
use exactly_once_core::clock::now_ms;
use exactly_once_core::store::StoreError;

/// Attempts of a transaction cancelled only by transaction conflicts or
/// throttling (the SDK does not retry a cancelled transaction).
const TRANSACT_ATTEMPTS: u32 = 4;

impl DynamoDbStore {
    /// One TransactWriteItems, sent again (with backoff) while it is
    /// cancelled only by transaction conflicts or throttling, which the SDK
    /// does not retry: how often it was sent again before it committed. On
    /// failure: the cancellation reasons (empty if it failed otherwise) and
    /// the error.
    pub(super) async fn transact(
        &self,
        actions: Vec<TransactWriteItem>,
    ) -> Result<u32, (Vec<CancellationReason>, TransactError)> {
        let mut attempt = 0;
        loop {
            let result = self
                .client
                .transact_write_items()
                .set_transact_items(Some(actions.clone()))
                .send()
                .await;
            let Err(err) = result else { return Ok(attempt) };
            let reasons = cancellation_reasons(&err);
            attempt += 1;
            if attempt >= TRANSACT_ATTEMPTS || reasons.is_empty() || !reasons.iter().all(transient)
            {
                return Err((reasons, err));
            }
            tokio::time::sleep(backoff(attempt)).await;
        }
    }
}

/// The error of a TransactWriteItems call.
pub(super) type TransactError =
    SdkError<TransactWriteItemsError, aws_smithy_runtime_api::http::Response>;

/// The cancellation reasons of a failed transaction (empty if it failed
/// otherwise).
fn cancellation_reasons(err: &TransactError) -> Vec<CancellationReason> {
    match err.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => {
            cancelled.cancellation_reasons().to_vec()
        }
        _ => Vec::new(),
    }
}

pub(super) fn condition_failed(reason: &CancellationReason) -> bool {
    reason.code() == Some("ConditionalCheckFailed")
}

/// A reason that goes away by itself (`None`: that action was fine).
fn transient(reason: &CancellationReason) -> bool {
    matches!(
        reason.code(),
        None | Some(
            "None" | "TransactionConflict" | "ThrottlingError" | "ProvisionedThroughputExceeded"
        )
    )
}

/// 10, 20, 40 ms ... with up to 100% jitter (from the clock's low bits).
fn backoff(attempt: u32) -> Duration {
    let base = 10u64 << attempt.min(6);
    Duration::from_millis(base + now_ms() % base)
}

/// A transaction that failed without a condition failing: cancelled only by
/// conflicts or throttling (still, after retries) is DynamoDB unavailable for
/// now; anything else is classified as any other error.
pub(super) fn transaction_error(
    operation: &'static str,
    reasons: &[CancellationReason],
    err: TransactError,
) -> StoreError {
    if !reasons.is_empty() && reasons.iter().all(transient) {
        return StoreError::Unavailable {
            operation,
            message: aws_sdk_dynamodb::error::DisplayErrorContext(&err).to_string(),
        };
    }
    sdk_error(operation, err)
}
