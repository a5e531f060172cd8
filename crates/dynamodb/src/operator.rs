//! Operator transitions (the `exactly-once-ops` CLI). An operator holds no
//! lease, so these are fenced on the status and the version the operator saw:
//! a takeover or a finish in between makes them fail without writing.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};

use super::codec::{n, s, status_value};
use super::listing::key_shard;
use super::write::parse_old;
use super::{DynamoDbStore, sdk_error};
use exactly_once_core::store::{Status, Store, StoreError};

/// Operator release: a STARTED key becomes claimable at once (the same
/// write as a release), so the next delivery takes it over as the next
/// version. Fails with [`StoreError::NotInState`] if the key is not
/// STARTED at `version`.
pub(super) async fn release_version(
    store: &DynamoDbStore,
    key: &str,
    version: u64,
) -> Result<(), StoreError> {
    let update = "SET #lock_expires_at = :zero, #updated_at = :now_ms";
    // Invariant: only the STARTED item at the version the operator saw is
    // released; one taken over since (newer version) or finished is not.
    let condition = "#status = :started AND #version = :version";
    let values = vec![
        (":zero", n(0)),
        (":now_ms", n(store.now_ms())),
        (":started", status_value(Status::Started)),
    ];
    store
        .operator_write(key, version, Status::Started, update, condition, values)
        .await
}

/// Operator retry of a permanent failure: a FAILED key becomes STARTED
/// with its lock ended, so the next delivery takes it over as version + 1
/// and runs the work again. The error text moves to `last_error` (so a
/// later COMPLETED item carries no `error`). Fails with
/// [`StoreError::NotInState`] if the key is not FAILED at `version`.
pub(super) async fn retry_failed(
    store: &DynamoDbStore,
    key: &str,
    version: u64,
) -> Result<(), StoreError> {
    let update = "SET #status = :started, #lock_expires_at = :zero, #updated_at = :now_ms, \
                  #last_error = if_not_exists(#error, :no_error), #started_shard = :shard \
                  REMOVE #error";
    // Invariant: only the FAILED item at the version the operator saw goes
    // back to STARTED; it keeps its version, owner and payload_hash, so the
    // next claim with the same payload takes it over as version + 1.
    let condition = "#status = :failed AND #version = :version";
    let values = vec![
        (":started", status_value(Status::Started)),
        (":zero", n(0)),
        (":now_ms", n(store.now_ms())),
        (":no_error", s("(no error text)")),
        (":failed", status_value(Status::Failed)),
        (":shard", n(key_shard(&store.pk(key)?))),
    ];
    store
        .operator_write(key, version, Status::Failed, update, condition, values)
        .await
}

impl DynamoDbStore {
    /// An operator's UpdateItem on `key`, its `condition` reading `:version`.
    async fn operator_write(
        &self,
        key: &str,
        version: u64,
        expected: Status,
        update: &str,
        condition: &str,
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<(), StoreError> {
        let pk = self.pk(key)?;
        let mut values: HashMap<String, AttributeValue> = values
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect();
        values.insert(":version".into(), n(version));
        let result = self
            .update_item(&pk, update, condition, values)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let operation = match expected {
            Status::Failed => "operator retry (UpdateItem)",
            _ => "operator release (UpdateItem)",
        };
        operator_outcome(result, pk, expected, version, operation, self.now_ms())
    }
}

/// The result of an operator write; a failed condition becomes
/// [`StoreError::NotInState`] saying what the key holds instead.
fn operator_outcome<O, R>(
    result: Result<O, SdkError<UpdateItemError, R>>,
    pk: String,
    expected: Status,
    version: u64,
    operation: &'static str,
    now_ms: u64,
) -> Result<(), StoreError>
where
    R: std::fmt::Debug,
{
    let Err(err) = result else {
        return Ok(());
    };
    let Some(UpdateItemError::ConditionalCheckFailedException(conflict)) = err.as_service_error()
    else {
        return Err(sdk_error(operation, err));
    };
    let found = parse_old(conflict.item())?;
    Err(StoreError::not_in_state(
        pk,
        expected,
        version,
        found.as_deref(),
        now_ms,
    ))
}
