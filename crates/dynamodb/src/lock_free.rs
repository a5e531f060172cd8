//! The lock-free path on DynamoDB, for work whose whole effect is DynamoDB
//! writes: no
//! claim and no lock. The effect and the COMPLETED item commit in ONE
//! transaction that succeeds only if the key is new ([`NEW_KEY`]); a
//! concurrent duplicate loses that condition and is, by construction, a
//! duplicate.
//!
//! [`NEW_KEY`]: super::write::NEW_KEY

use aws_sdk_dynamodb::types::{Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem};

use super::codec::{RawItem, n, s};
use super::increment::{increment_action, numbers_found};
use super::listing::key_shard;
use super::transact::{condition_failed, transaction_error};
use super::write::{NEW_KEY, names_in, parse_old};
use super::{DynamoDbStore, MAX_EFFECT_WRITES};
use exactly_once_core::clock::ms_to_s;
use exactly_once_core::store::{
    Commit, CommitOutcome, Status, Store, StoreError, transaction_effects,
};

/// Absent | expired ──commit──▶ COMPLETED v1, with the effect: each
/// message's COMPLETED item (condition [`NEW_KEY`], the stored item
/// returned on failure; a held key's completion under its fence) and its
/// writes, all in ONE transaction. Several
/// messages commit together only if all can (the caller makes sure their
/// writes touch distinct items); at most 100 actions in all.
/// Returns the items' `expires_at`, or why nothing was written.
pub(super) async fn commit(
    store: &DynamoDbStore,
    commits: Vec<Commit<TransactWriteItem>>,
) -> Result<CommitOutcome, StoreError> {
    // At most 100 actions: the items, the writes, the merged increments.
    let room = (MAX_EFFECT_WRITES + 1).saturating_sub(commits.len());
    let increments = transaction_effects(commits.iter().map(|c| &c.effects), room)?;
    let now = store.now_ms();
    let expires_at_s = store.config.expires_at_s(now);
    // What each action is, in order: each message's item and writes,
    // then the increments merged per item.
    let mut actions: Vec<Action> = Vec::new();
    let mut items = Vec::new();
    for (index, commit) in commits.into_iter().enumerate() {
        match &commit.held {
            // A held key (the locking path): completed under its fence
            // (see locking.rs, FENCE), the item returned when it fails.
            Some(lease) => {
                let texts = (commit.result.as_deref(), commit.effects.outbox.as_deref());
                items.push(store.completion_action(lease, texts, now)?.0);
            }
            None => {
                let request = commit.request();
                let pk = store.pk(request.key)?;
                let mut item = store.new_item(&pk, Status::Completed, &commit.owner, request, now);
                item.insert("expires_at".to_owned(), n(expires_at_s));
                if let Some(result) = &commit.result {
                    item.insert("result".to_owned(), s(result));
                }
                // The messages it emits, in the very item of the effect.
                if let Some(outbox) = &commit.effects.outbox {
                    item.insert("outbox".to_owned(), s(outbox));
                    item.insert("outbox_shard".to_owned(), n(key_shard(&pk)));
                }
                items.push(store.put_new(item, now)?);
            }
        }
        actions.push(Action::Item(index));
        actions.extend((0..commit.effects.writes.len()).map(|w| Action::Write(index, w)));
        items.extend(commit.effects.writes);
    }
    for (merged, increment) in increments.iter().enumerate() {
        items.push(increment_action(increment)?);
        actions.push(Action::Increment(merged));
    }
    let (reasons, err) = match store.transact(items).await {
        Ok(contended) => {
            return Ok(CommitOutcome::Committed {
                expires_at_s,
                contended,
            });
        }
        Err(failure) => failure,
    };
    // The first action refused, in order: a message's item before its
    // writes, the merged increments last.
    let Some((action, reason)) = actions
        .iter()
        .zip(&reasons)
        .find(|(_, reason)| condition_failed(reason))
    else {
        return Err(transaction_error(
            "commit (TransactWriteItems)",
            &reasons,
            err,
        ));
    };
    Ok(match *action {
        Action::Item(index) => CommitOutcome::KeyTaken {
            index,
            item: parse_old(reason.item())?,
        },
        Action::Write(index, effect) => CommitOutcome::EffectRefused {
            index,
            effect,
            message: reason.message().unwrap_or_default().to_owned(),
        },
        Action::Increment(merged) => CommitOutcome::IncrementRefused {
            item: increments[merged].item(),
            current: numbers_found(&increments[merged], reason),
        },
    })
}

impl DynamoDbStore {
    /// The transaction action creating `item` under [`NEW_KEY`].
    fn put_new(&self, item: RawItem, now: u64) -> Result<TransactWriteItem, StoreError> {
        // Invariant: one live item per key (see NEW_KEY).
        let put = Put::builder()
            .table_name(&self.config.table_name)
            .set_item(Some(item))
            .condition_expression(NEW_KEY)
            .set_expression_attribute_names(Some(names_in(&[NEW_KEY])))
            .expression_attribute_values(":now_s", n(ms_to_s(now)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|err| StoreError::Rejected {
                operation: "commit (TransactWriteItems)",
                message: err.to_string(),
            })?;
        Ok(TransactWriteItem::builder().put(put).build())
    }
}

/// What an action of a lock-free commit is.
#[derive(Debug, Clone, Copy)]
enum Action {
    /// Message `index`'s COMPLETED item.
    Item(usize),
    /// Write `.1` of message `.0`.
    Write(usize, usize),
    /// Merged increment `index`.
    Increment(usize),
}
