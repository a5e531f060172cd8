//! The locking path on DynamoDB, top to bottom: claim, take over, then
//! complete (alone or with the effect), fail, release or extend. Every
//! transition is ONE conditional write, a function named as the store
//! trait's method it is; its condition sits next to it with the invariant
//! it keeps. The claim's condition ([`NEW_KEY`]) and the
//! helpers both paths share are in `write.rs`; the claim loop that judges a
//! found item is the store trait's ([`exactly_once_core::store::Store::claim`]).
//!
//! [`NEW_KEY`]: super::write::NEW_KEY

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
    Update,
};

use super::codec::{RawItem, n, s, status_value};
use super::increment::increment_action;
use super::listing::key_shard;
use super::transact::{TransactError, condition_failed, transaction_error};
use super::write::{conditional, names_in, parse_old};
use super::{DynamoDbStore, MAX_EFFECT_WRITES, sdk_error};
use exactly_once_core::store::{
    ClaimRequest, Conditional, Effects, Lease, Status, Store, StoreError, StoredItem, bounded,
    increment, transaction_effects,
};

/// The condition of every write after the claim.
/// Invariant: only the current owner of a STARTED item writes to it; a worker
/// whose lock was taken over (new version, new owner) is fenced out.
const FENCE: &str = "#status = :started AND #version = :version AND #owner = :owner";

/// Claim: create the STARTED item at version 1.
pub(super) async fn create_started(
    store: &DynamoDbStore,
    pk: &str,
    request: ClaimRequest<'_>,
) -> Result<Conditional<Lease>, StoreError> {
    let now = store.now_ms();
    let (item, lease) = store.started_item(pk, request, now);
    // Invariant: one live item per key (see NEW_KEY).
    store.put_if_new(item, now, lease, "claim (PutItem)").await
}

/// Take over: become the owner of an abandoned STARTED item, version + 1.
pub(super) async fn take_over(
    store: &DynamoDbStore,
    observed: &StoredItem,
    request: ClaimRequest<'_>,
) -> Result<Conditional<Lease>, StoreError> {
    let now = store.now_ms();
    let lease = Lease::taking_over(observed, &store.config, now, &request);
    // Invariant: of all takers that saw this version, exactly one wins,
    // only while the lock is still abandoned (not renewed, not finished),
    // and only of its own scope's item (or one written before scopes,
    // which then takes this scope).
    let (update, condition) = match &store.config.scope {
        Some(_) => (
            "SET #owner = :owner, #version = :next, #lock_expires_at = :lock, \
             #expires_at = :exp, #updated_at = :now_ms, #started_shard = :shard, \
             #scope = :scope ADD #attempts :one",
            "#version = :observed AND #status = :started AND #lock_expires_at < :now_ms \
             AND (attribute_not_exists(#scope) OR #scope = :scope)",
        ),
        None => (
            "SET #owner = :owner, #version = :next, #lock_expires_at = :lock, \
             #expires_at = :exp, #updated_at = :now_ms, #started_shard = :shard \
             ADD #attempts :one",
            "#version = :observed AND #status = :started AND #lock_expires_at < :now_ms \
             AND attribute_not_exists(#scope)",
        ),
    };
    let mut values = HashMap::from([
        (":owner".to_owned(), s(&lease.owner)),
        (":next".to_owned(), n(lease.version)),
        (":lock".to_owned(), n(lease.lock_expires_at_ms)),
        (":exp".to_owned(), n(store.config.expires_at_s(now))),
        (":now_ms".to_owned(), n(now)),
        (":one".to_owned(), n(1)),
        (":observed".to_owned(), n(observed.version)),
        (":started".to_owned(), status_value(Status::Started)),
        (":shard".to_owned(), n(key_shard(&observed.pk))),
    ]);
    if let Some(scope) = &store.config.scope {
        values.insert(":scope".to_owned(), s(scope));
    }
    let result = store
        .update_item(&observed.pk, update, condition, values)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .send()
        .await;
    conditional(result, lease, "take over (UpdateItem)", |err| match err {
        UpdateItemError::ConditionalCheckFailedException(conflict) => Some(conflict.item()),
        _ => None,
    })
}

/// Complete: the work is done; redeliveries become duplicates until the
/// retention ends. Messages alone ride on the completion's own
/// UpdateItem ([`complete_alone`]); writes or increments commit with it in
/// ONE transaction ([`complete_with`]). Returns the item's new
/// `expires_at` (epoch seconds).
pub(super) async fn complete(
    store: &DynamoDbStore,
    lease: &Lease,
    result: Option<&str>,
    effects: Effects<TransactWriteItem>,
) -> Result<u64, StoreError> {
    if effects.touches_items() {
        complete_with(store, lease, result, effects).await
    } else {
        let texts = (result, effects.outbox.as_deref());
        complete_alone(store, lease, texts).await
    }
}

/// [`complete`] with no effect beside it: the fenced UpdateItem alone.
/// `result` is stored whole (the engine keeps it within
/// [`exactly_once_core::store::MAX_RESULT_BYTES`]). Returns the item's new
/// `expires_at` (epoch seconds).
async fn complete_alone(
    store: &DynamoDbStore,
    lease: &Lease,
    texts: (Option<&str>, Option<&str>),
) -> Result<u64, StoreError> {
    let (update, values, expires_at_s) = store.completion(&lease.pk, texts, store.now_ms());
    let completed = Some(Status::Completed);
    store
        .fenced_update(lease, completed, "complete (UpdateItem)", &update, values)
        .await?;
    Ok(expires_at_s)
}

/// [`complete`] together with the work's own DynamoDB writes, in ONE
/// transaction: either the effect and COMPLETED both happen, or neither.
/// The completion is the transaction's first action, fenced like
/// [`complete_alone`]; at most [`MAX_EFFECT_WRITES`] writes fit beside it.
async fn complete_with(
    store: &DynamoDbStore,
    lease: &Lease,
    result: Option<&str>,
    effects: Effects<TransactWriteItem>,
) -> Result<u64, StoreError> {
    let increments = transaction_effects([&effects], MAX_EFFECT_WRITES)?;
    let texts = (result, effects.outbox.as_deref());
    let (completion, expires_at_s) = store.completion_action(lease, texts, store.now_ms())?;
    let mut actions = vec![completion];
    let writes = effects.writes.len();
    actions.extend(effects.writes);
    for increment in &increments {
        actions.push(increment_action(increment)?);
    }
    match store.transact(actions).await {
        Ok(_) => Ok(expires_at_s),
        Err((reasons, err)) => failed_transaction(lease, writes, &reasons, err),
    }
}

/// Fail permanently: redeliveries are refused without running the work.
pub(super) async fn fail(
    store: &DynamoDbStore,
    lease: &Lease,
    error: &str,
) -> Result<(), StoreError> {
    let now = store.now_ms();
    let update = "SET #status = :failed, #error = :error, #expires_at = :exp, \
                  #updated_at = :now_ms REMOVE #lock_expires_at, #started_shard";
    let values = vec![
        (":failed", status_value(Status::Failed)),
        (":error", s(bounded(error))),
        (":exp", n(store.config.expires_at_s(now))),
        (":now_ms", n(now)),
    ];
    store
        .fenced_update(
            lease,
            Some(Status::Failed),
            "fail (UpdateItem)",
            update,
            values,
        )
        .await
        .map(|_| ())
}

/// Release after a retryable error: the lock ends now, so the next claim
/// takes the key over at once (as version + 1, keeping the history).
pub(super) async fn release(store: &DynamoDbStore, lease: &Lease) -> Result<(), StoreError> {
    let update = "SET #lock_expires_at = :zero, #updated_at = :now_ms";
    let values = vec![(":zero", n(0)), (":now_ms", n(store.now_ms()))];
    store
        .fenced_update(lease, None, "release (UpdateItem)", update, values)
        .await
        .map(|_| ())
}

/// Extend (heartbeat): push the lease's end to `until_ms`.
pub(super) async fn extend(
    store: &DynamoDbStore,
    lease: &Lease,
    until_ms: u64,
) -> Result<Lease, StoreError> {
    let update = "SET #lock_expires_at = :until, #updated_at = :now_ms";
    let values = vec![(":until", n(until_ms)), (":now_ms", n(store.now_ms()))];
    store
        .fenced_update(lease, None, "extend (UpdateItem)", update, values)
        .await?;
    Ok(lease.until(until_ms))
}

impl DynamoDbStore {
    /// A claim's STARTED item at version 1 and its lease, from `now`.
    pub(super) fn started_item(
        &self,
        pk: &str,
        request: ClaimRequest<'_>,
        now: u64,
    ) -> (RawItem, Lease) {
        let lease = Lease::claimed(pk.to_owned(), 1, &self.config, now, &request);
        let mut item = self.new_item(pk, Status::Started, &lease.owner, request, now);
        item.insert("lock_expires_at".to_owned(), n(lease.lock_expires_at_ms));
        item.insert("expires_at".to_owned(), n(self.config.expires_at_s(now)));
        // In the index of STARTED items until completed or failed.
        item.insert("started_shard".to_owned(), n(key_shard(pk)));
        (item, lease)
    }

    /// The transaction action completing `lease`'s item at `now`, fenced as
    /// [`FENCE`] says (the item returned when the fence fails), and the
    /// item's new expiry.
    /// `texts`: the result and the outbox (the messages emitted), either
    /// optional.
    pub(super) fn completion_action(
        &self,
        lease: &Lease,
        (result, outbox): (Option<&str>, Option<&str>),
        now: u64,
    ) -> Result<(TransactWriteItem, u64), StoreError> {
        let (update, values, expires_at_s) = self.completion(&lease.pk, (result, outbox), now);
        let completion = Update::builder()
            .table_name(&self.config.table_name)
            .key("pk", s(&lease.pk))
            .update_expression(&update)
            .condition_expression(FENCE)
            .set_expression_attribute_names(Some(names_in(&[&update, FENCE])))
            .set_expression_attribute_values(Some(fenced_values(lease, values)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|err| StoreError::Rejected {
                operation: "complete (TransactWriteItems)",
                message: err.to_string(),
            })?;
        let action = TransactWriteItem::builder().update(completion).build();
        Ok((action, expires_at_s))
    }

    /// The update that marks an item COMPLETED at `now` with its result
    /// and outbox (the messages emitted, [`exactly_once_core::outbox`]),
    /// its values and its expiry.
    fn completion(
        &self,
        pk: &str,
        (result, outbox): (Option<&str>, Option<&str>),
        now: u64,
    ) -> (String, Vec<(&'static str, AttributeValue)>, u64) {
        let expires_at_s = self.config.expires_at_s(now);
        let mut values = vec![
            (":completed", status_value(Status::Completed)),
            (":exp", n(expires_at_s)),
            (":now_ms", n(now)),
        ];
        let mut update =
            String::from("SET #status = :completed, #expires_at = :exp, #updated_at = :now_ms");
        if let Some(text) = result {
            values.push((":result", s(text)));
            update.push_str(", #result = :result");
        }
        // The messages emitted, and their entry in the sparse index of
        // them (the sweeper's).
        if let Some(text) = outbox {
            values.push((":outbox", s(text)));
            values.push((":outbox_shard", n(key_shard(pk))));
            update.push_str(", #outbox = :outbox, #outbox_shard = :outbox_shard");
        }
        update.push_str(" REMOVE #lock_expires_at, #started_shard");
        (update, values, expires_at_s)
    }

    /// A write guarded by [`FENCE`], finishing the key as `finishing` (a
    /// completion, a failure) or not (a release, an extension). A failed
    /// guard is judged from the item it returns ([`Lease::refused`]): the
    /// write already made by this lease (sent again after its answer was
    /// lost, by the SDK or the engine), or the lock lost.
    async fn fenced_update(
        &self,
        lease: &Lease,
        finishing: Option<Status>,
        operation: &'static str,
        update: &str,
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<u64, StoreError> {
        let result = self
            .update_item(&lease.pk, update, FENCE, fenced_values(lease, values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(0),
            Err(err) => match err.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(refused)) => {
                    let found = parse_old(refused.item())?;
                    lease.refused(finishing, found.as_deref())
                }
                _ => Err(sdk_error(operation, err)),
            },
        }
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
    values.insert(":started".into(), status_value(Status::Started));
    values.insert(":version".into(), n(lease.version));
    values.insert(":owner".into(), s(&lease.owner));
    values
}

/// Why a completion transaction failed: our fence (action 0) failed (the
/// lock lost, unless the item shows this very completion already made: the
/// transaction sent again after its answer was lost), a condition of the
/// work's own writes failed, or DynamoDB itself failed.
fn failed_transaction(
    lease: &Lease,
    writes: usize,
    reasons: &[CancellationReason],
    err: TransactError,
) -> Result<u64, StoreError> {
    if let Some(fence) = reasons.first().filter(|reason| condition_failed(reason)) {
        let found = parse_old(fence.item())?;
        return lease.refused(Some(Status::Completed), found.as_deref());
    }
    // The completion, its writes, then the increments.
    if let Some(index) = reasons.iter().position(condition_failed) {
        let message = match index > writes {
            true => increment::BELOW_FLOOR,
            false => reasons[index].message().unwrap_or_default(),
        };
        return Err(StoreError::EffectConditionFailed {
            effect: index - 1,
            message: message.to_owned(),
        });
    }
    Err(transaction_error(
        "complete (TransactWriteItems)",
        reasons,
        err,
    ))
}
