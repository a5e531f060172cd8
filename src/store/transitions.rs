//! The key state machine, top to bottom. Every transition is ONE conditional
//! write; its condition sits next to it with the invariant it keeps.
//!
//! ```text
//! absent | expired ──claim──▶ STARTED v1
//! STARTED, lock expired ──take over──▶ STARTED v+1 (new owner)
//! STARTED ──complete──▶ COMPLETED          ┐ (optionally in one transaction
//!                                          │  with the work's own writes)
//! STARTED ──fail──▶ FAILED                 │ fenced: status STARTED
//! STARTED ──release──▶ STARTED, lock ended │ AND version AND owner
//! STARTED ──extend──▶ STARTED, lock later  ┘
//! STARTED v ──operator release──▶ STARTED v, lock ended  ┐ fenced: status
//! FAILED v ──operator retry──▶ STARTED v, lock ended     ┘ AND version
//! ```
//!
//! Expression placeholders are the attribute names with `#` in front
//! (`#status` is `status`); [`names_in`] derives the name map from them.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
    Update,
};

use super::item::{n, s};
use super::{
    ClaimOutcome, ClaimRequest, IdempotencyStore, Lease, Status, StoreError, StoredItem, bounded,
};
use crate::clock::{duration_ms, ms_to_s, now_ms};

/// DynamoDB's limit of 100 actions per transaction, less the completion.
pub const MAX_EFFECT_WRITES: usize = 99;

/// A claim that keeps racing (item expiring, takeovers by others) gives up
/// after this many looks at the stored item and reports contention.
const MAX_CLAIM_ROUNDS: usize = 4;

/// The condition of every write after the claim.
/// Invariant: only the current owner of a STARTED item writes to it; a worker
/// whose lock was taken over (new version, new owner) is fenced out.
const FENCE: &str = "#status = :started AND #version = :version AND #owner = :owner";

/// An item as DynamoDB returns it.
pub(super) type RawItem = HashMap<String, AttributeValue>;

/// Result of a conditional write that returns the stored item on conflict.
enum Conditional<T> {
    Written(T),
    /// The condition failed; the item as it was (None if there was none).
    Conflict(Option<Box<StoredItem>>),
}

impl IdempotencyStore {
    /// Claims `request.key`, or says why the work must not run now.
    pub async fn claim(&self, request: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let pk = self.pk(request.key)?;
        let mut observed = match self.put_started(&pk, request).await? {
            Conditional::Written(lease) => return Ok(ClaimOutcome::Acquired(lease)),
            Conditional::Conflict(item) => item,
        };
        for _ in 0..MAX_CLAIM_ROUNDS {
            let now = now_ms();
            // An item past its TTL counts as absent even if DynamoDB still has it.
            let Some(item) = observed.filter(|item| !item.is_expired(now)) else {
                observed = match self.put_started(&pk, request).await? {
                    Conditional::Written(lease) => return Ok(ClaimOutcome::Acquired(lease)),
                    Conditional::Conflict(item) => item,
                };
                continue;
            };
            let item = *item;
            if item.payload_hash != request.payload_hash {
                return Ok(ClaimOutcome::PayloadMismatch(item));
            }
            match item.status {
                Status::Completed => return Ok(ClaimOutcome::Duplicate(item)),
                Status::Failed => return Ok(ClaimOutcome::PreviouslyFailed(item)),
                Status::Started if !item.lock_expired(now) => {
                    return Ok(ClaimOutcome::InProgress(item));
                }
                Status::Started => match self.take_over(&item, request.lease_cap_ms).await? {
                    Conditional::Written(lease) => return Ok(ClaimOutcome::TakenOver(lease)),
                    Conditional::Conflict(item) => observed = item,
                },
            }
        }
        Err(StoreError::Contention { key: pk })
    }

    /// Claim: create the STARTED item at version 1.
    async fn put_started(
        &self,
        pk: &str,
        request: ClaimRequest<'_>,
    ) -> Result<Conditional<Lease>, StoreError> {
        let now = now_ms();
        let lease = Lease {
            pk: pk.to_owned(),
            version: 1,
            owner: uuid::Uuid::new_v4().to_string(),
            lock_expires_at_ms: self.lease_end(now, request.lease_cap_ms),
        };
        let mut item = HashMap::from([
            ("pk".to_owned(), s(pk)),
            ("status".to_owned(), Status::Started.value()),
            ("version".to_owned(), n(lease.version)),
            ("owner".to_owned(), s(&lease.owner)),
            ("payload_hash".to_owned(), s(request.payload_hash)),
            ("lock_expires_at".to_owned(), n(lease.lock_expires_at_ms)),
            ("expires_at".to_owned(), n(self.expires_at_s(now))),
            ("created_at".to_owned(), n(now)),
            ("updated_at".to_owned(), n(now)),
            ("attempts".to_owned(), n(1)),
        ]);
        if let Some(origin) = request.origin {
            item.insert("origin".to_owned(), s(bounded(origin)));
        }
        // Invariant: one live item per key; a claim never replaces an item
        // that has not passed its TTL.
        let condition = "attribute_not_exists(#pk) OR #expires_at < :now_s";
        let result = self
            .client
            .put_item()
            .table_name(&self.config.table_name)
            .set_item(Some(item))
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names_in(&[condition])))
            .expression_attribute_values(":now_s", n(ms_to_s(now)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        conditional(result, lease, "claim (PutItem)", |err| match err {
            PutItemError::ConditionalCheckFailedException(conflict) => Some(conflict.item()),
            _ => None,
        })
    }

    /// Take over: become the owner of an abandoned STARTED item, version + 1.
    async fn take_over(
        &self,
        observed: &StoredItem,
        lease_cap_ms: Option<u64>,
    ) -> Result<Conditional<Lease>, StoreError> {
        let now = now_ms();
        let lease = Lease {
            pk: observed.pk.clone(),
            version: observed.version + 1,
            owner: uuid::Uuid::new_v4().to_string(),
            lock_expires_at_ms: self.lease_end(now, lease_cap_ms),
        };
        let update = "SET #owner = :owner, #version = :next, #lock_expires_at = :lock, \
                      #expires_at = :exp, #updated_at = :now_ms ADD #attempts :one";
        // Invariant: of all takers that saw this version, exactly one wins, and
        // only while the lock is still abandoned (not renewed, not finished).
        let condition =
            "#version = :observed AND #status = :started AND #lock_expires_at < :now_ms";
        let result = self
            .client
            .update_item()
            .table_name(&self.config.table_name)
            .key("pk", s(&observed.pk))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names_in(&[update, condition])))
            .set_expression_attribute_values(Some(HashMap::from([
                (":owner".to_owned(), s(&lease.owner)),
                (":next".to_owned(), n(lease.version)),
                (":lock".to_owned(), n(lease.lock_expires_at_ms)),
                (":exp".to_owned(), n(self.expires_at_s(now))),
                (":now_ms".to_owned(), n(now)),
                (":one".to_owned(), n(1)),
                (":observed".to_owned(), n(observed.version)),
                (":started".to_owned(), Status::Started.value()),
            ])))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        conditional(result, lease, "take over (UpdateItem)", |err| match err {
            UpdateItemError::ConditionalCheckFailedException(conflict) => Some(conflict.item()),
            _ => None,
        })
    }

    /// Complete: the work is done; redeliveries become duplicates until the
    /// retention ends. `result` is cut to [`super::MAX_TEXT_BYTES`]. Returns
    /// the item's new `expires_at` (epoch seconds).
    pub async fn complete(&self, lease: &Lease, result: Option<&str>) -> Result<u64, StoreError> {
        let (update, values, expires_at_s) = self.completion(result);
        self.fenced_update(lease, "complete (UpdateItem)", update, values)
            .await?;
        Ok(expires_at_s)
    }

    /// Complete together with the work's own DynamoDB writes, in ONE
    /// transaction: either the effect and COMPLETED both happen, or neither.
    /// The completion is the transaction's first action, fenced like
    /// [`Self::complete`]; at most [`MAX_EFFECT_WRITES`] writes fit beside it.
    pub async fn complete_with(
        &self,
        lease: &Lease,
        result: Option<&str>,
        writes: Vec<TransactWriteItem>,
    ) -> Result<u64, StoreError> {
        if writes.len() > MAX_EFFECT_WRITES {
            return Err(StoreError::TooManyWrites {
                count: writes.len(),
            });
        }
        let (update, values, expires_at_s) = self.completion(result);
        let completion = Update::builder()
            .table_name(&self.config.table_name)
            .key("pk", s(&lease.pk))
            .update_expression(update)
            .condition_expression(FENCE)
            .set_expression_attribute_names(Some(names_in(&[update, FENCE])))
            .set_expression_attribute_values(Some(fenced_values(lease, values)))
            .build()
            .map_err(|err| StoreError::Rejected {
                operation: "complete (TransactWriteItems)",
                message: err.to_string(),
            })?;
        let actions = std::iter::once(TransactWriteItem::builder().update(completion).build())
            .chain(writes)
            .collect();
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(actions))
            .send()
            .await;
        let Err(err) = result else {
            return Ok(expires_at_s);
        };
        let reasons = match err.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => {
                cancelled.cancellation_reasons().to_vec()
            }
            _ => Vec::new(),
        };
        Err(failed_transaction(lease, &reasons, err))
    }

    /// The update that marks an item COMPLETED, its values and its expiry.
    fn completion(
        &self,
        result: Option<&str>,
    ) -> (&'static str, Vec<(&'static str, AttributeValue)>, u64) {
        let now = now_ms();
        let expires_at_s = self.expires_at_s(now);
        let mut values = vec![
            (":completed", Status::Completed.value()),
            (":exp", n(expires_at_s)),
            (":now_ms", n(now)),
        ];
        let update = match result {
            Some(text) => {
                values.push((":result", s(bounded(text))));
                "SET #status = :completed, #expires_at = :exp, #updated_at = :now_ms, \
                 #result = :result REMOVE #lock_expires_at"
            }
            None => {
                "SET #status = :completed, #expires_at = :exp, #updated_at = :now_ms \
                 REMOVE #lock_expires_at"
            }
        };
        (update, values, expires_at_s)
    }

    /// Fail permanently: redeliveries are refused without running the work.
    pub async fn fail(&self, lease: &Lease, error: &str) -> Result<(), StoreError> {
        let now = now_ms();
        let update = "SET #status = :failed, #error = :error, #expires_at = :exp, \
                      #updated_at = :now_ms REMOVE #lock_expires_at";
        let values = vec![
            (":failed", Status::Failed.value()),
            (":error", s(bounded(error))),
            (":exp", n(self.expires_at_s(now))),
            (":now_ms", n(now)),
        ];
        self.fenced_update(lease, "fail (UpdateItem)", update, values)
            .await
    }

    /// Release after a retryable error: the lock ends now, so the next claim
    /// takes the key over at once (as version + 1, keeping the history).
    pub async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let update = "SET #lock_expires_at = :zero, #updated_at = :now_ms";
        let values = vec![(":zero", n(0)), (":now_ms", n(now_ms()))];
        self.fenced_update(lease, "release (UpdateItem)", update, values)
            .await
    }

    /// Extend (heartbeat): push the lease's end to `until_ms`.
    pub async fn extend(&self, lease: &Lease, until_ms: u64) -> Result<Lease, StoreError> {
        let update = "SET #lock_expires_at = :until, #updated_at = :now_ms";
        let values = vec![(":until", n(until_ms)), (":now_ms", n(now_ms()))];
        self.fenced_update(lease, "extend (UpdateItem)", update, values)
            .await?;
        Ok(Lease {
            lock_expires_at_ms: until_ms,
            ..lease.clone()
        })
    }

    /// A write guarded by [`FENCE`]; a failed guard means the lock was lost.
    async fn fenced_update(
        &self,
        lease: &Lease,
        operation: &'static str,
        update: &str,
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<(), StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.config.table_name)
            .key("pk", s(&lease.pk))
            .update_expression(update)
            .condition_expression(FENCE)
            .set_expression_attribute_names(Some(names_in(&[update, FENCE])))
            .set_expression_attribute_values(Some(fenced_values(lease, values)))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(err) => match err.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(_)) => {
                    Err(StoreError::LockLost {
                        key: lease.pk.clone(),
                        version: lease.version,
                    })
                }
                _ => Err(StoreError::from_sdk(operation, err)),
            },
        }
    }

    /// A new lease's end: one lock timeout from now, but not past `cap_ms`.
    fn lease_end(&self, now_ms: u64, cap_ms: Option<u64>) -> u64 {
        let full = now_ms + duration_ms(self.config.lock_timeout);
        cap_ms.map_or(full, |cap| full.min(cap))
    }

    fn expires_at_s(&self, now_ms: u64) -> u64 {
        ms_to_s(now_ms) + self.config.retention.as_secs()
    }
}

/// The lease of a write that returns the stored item when its condition
/// fails (`conflict` picks that item out of the service error).
fn conditional<O, E, R>(
    result: Result<O, SdkError<E, R>>,
    lease: Lease,
    operation: &'static str,
    conflict: fn(&E) -> Option<Option<&RawItem>>,
) -> Result<Conditional<Lease>, StoreError>
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match result {
        Ok(_) => Ok(Conditional::Written(lease)),
        Err(err) => match err.as_service_error().and_then(conflict) {
            Some(item) => Ok(Conditional::Conflict(parse_old(item)?)),
            None => Err(StoreError::from_sdk(operation, err)),
        },
    }
}

/// `values` plus the ones [`FENCE`] reads from the lease.
fn fenced_values(
    lease: &Lease,
    values: Vec<(&str, AttributeValue)>,
) -> HashMap<String, AttributeValue> {
    let mut values: HashMap<String, AttributeValue> = values
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect();
    values.insert(":started".into(), Status::Started.value());
    values.insert(":version".into(), n(lease.version));
    values.insert(":owner".into(), s(&lease.owner));
    values
}

/// Why a completion transaction failed: our fence (action 0) failed, a
/// condition of the work's own writes failed, or DynamoDB itself failed.
fn failed_transaction<E, R>(
    lease: &Lease,
    reasons: &[CancellationReason],
    err: SdkError<E, R>,
) -> StoreError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let failed = |reason: &CancellationReason| reason.code() == Some("ConditionalCheckFailed");
    if reasons.first().is_some_and(failed) {
        return StoreError::LockLost {
            key: lease.pk.clone(),
            version: lease.version,
        };
    }
    if let Some(index) = reasons.iter().position(failed) {
        return StoreError::EffectConditionFailed {
            write: index - 1,
            message: reasons[index].message().unwrap_or_default().to_owned(),
        };
    }
    StoreError::from_sdk("complete (TransactWriteItems)", err)
}

pub(super) fn parse_old(item: Option<&RawItem>) -> Result<Option<Box<StoredItem>>, StoreError> {
    item.map(|item| StoredItem::parse(item).map(Box::new))
        .transpose()
}

/// The expression attribute names used in `expressions`: `#name` -> `name`.
pub(crate) fn names_in(expressions: &[&str]) -> HashMap<String, String> {
    let mut names = HashMap::new();
    for expression in expressions {
        for (start, _) in expression.match_indices('#') {
            let name: String = expression[start + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            names.insert(format!("#{name}"), name);
        }
    }
    names
}

// Operator transitions (the `exactly-once-ops` CLI). An operator holds no
// lease, so these are fenced on the status and the version the operator saw:
// a takeover or a finish in between makes them fail without writing.

impl IdempotencyStore {
    /// Operator release: a STARTED key becomes claimable at once (the same
    /// write as [`Self::release`]), so the next delivery takes it over as
    /// version + 1. Fails with [`StoreError::NotInState`] if the key is not
    /// STARTED at `version`.
    pub async fn release_version(&self, key: &str, version: u64) -> Result<(), StoreError> {
        let update = "SET #lock_expires_at = :zero, #updated_at = :now_ms";
        // Invariant: only the STARTED item at the version the operator saw is
        // released; one taken over since (newer version) or finished is not.
        let condition = "#status = :started AND #version = :version";
        let values = vec![
            (":zero", n(0)),
            (":now_ms", n(now_ms())),
            (":started", Status::Started.value()),
        ];
        self.operator_write(key, version, Status::Started, update, condition, values)
            .await
    }

    /// Operator retry of a permanent failure: a FAILED key becomes STARTED
    /// with its lock ended, so the next delivery takes it over as version + 1
    /// and runs the work again. The error text moves to `last_error` (so a
    /// later COMPLETED item carries no `error`). Fails with
    /// [`StoreError::NotInState`] if the key is not FAILED at `version`.
    pub async fn retry_failed(&self, key: &str, version: u64) -> Result<(), StoreError> {
        let update = "SET #status = :started, #lock_expires_at = :zero, #updated_at = :now_ms, \
                      #last_error = if_not_exists(#error, :no_error) REMOVE #error";
        // Invariant: only the FAILED item at the version the operator saw goes
        // back to STARTED; it keeps its version, owner and payload_hash, so the
        // next claim with the same payload takes it over as version + 1.
        let condition = "#status = :failed AND #version = :version";
        let values = vec![
            (":started", Status::Started.value()),
            (":zero", n(0)),
            (":now_ms", n(now_ms())),
            (":no_error", s("(no error text)")),
            (":failed", Status::Failed.value()),
        ];
        self.operator_write(key, version, Status::Failed, update, condition, values)
            .await
    }

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
            .client
            .update_item()
            .table_name(&self.config.table_name)
            .key("pk", s(&pk))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names_in(&[update, condition])))
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let operation = match expected {
            Status::Failed => "operator retry (UpdateItem)",
            _ => "operator release (UpdateItem)",
        };
        operator_outcome(result, pk, expected, version, operation)
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
) -> Result<(), StoreError>
where
    R: std::fmt::Debug,
{
    let err = match result {
        Ok(_) => return Ok(()),
        Err(err) => err,
    };
    let Some(UpdateItemError::ConditionalCheckFailedException(conflict)) = err.as_service_error()
    else {
        return Err(StoreError::from_sdk(operation, err));
    };
    let found = match parse_old(conflict.item())? {
        None => "absent".to_owned(),
        Some(item) => {
            let ttl = if item.is_expired(now_ms()) {
                ", past its TTL: counts as absent"
            } else {
                ""
            };
            format!("{} at version {}{ttl}", item.status.as_str(), item.version)
        }
    };
    Err(StoreError::NotInState {
        key: pk,
        expected: expected.as_str(),
        version,
        found,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_derived_from_placeholders() {
        let names = names_in(&["SET #status = :s ADD #attempts :one", FENCE]);
        let mut keys: Vec<_> = names.iter().map(|(k, v)| format!("{k}={v}")).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "#attempts=attempts",
                "#owner=owner",
                "#status=status",
                "#version=version"
            ]
        );
    }
}
