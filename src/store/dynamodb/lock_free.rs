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
use super::transact::{condition_failed, transaction_error};
use super::write::{NEW_KEY, names_in, new_item, parse_old};
use super::{DynamoDbStore, MAX_EFFECT_WRITES};
use crate::clock::ms_to_s;
use crate::store::{
    ClaimRequest, CommitOutcome, Conditional, NewCommit, Status, Store, StoreError, bounded,
};

impl DynamoDbStore {
    /// Absent | expired ──commit──▶ COMPLETED v1, with the effect: each
    /// message's COMPLETED item (condition [`NEW_KEY`], the stored item
    /// returned on failure) and its writes, all in ONE transaction. Several
    /// messages commit together only if all can (the caller makes sure their
    /// writes touch distinct items); at most 100 actions in all.
    /// Returns the items' `expires_at`, or why nothing was written.
    pub(super) async fn commit_items(
        &self,
        commits: Vec<NewCommit<TransactWriteItem>>,
    ) -> Result<CommitOutcome, StoreError> {
        let actions: usize = commits.iter().map(|c| 1 + c.effects.len()).sum();
        if actions > MAX_EFFECT_WRITES + 1 {
            return Err(StoreError::TooManyWrites {
                count: actions - commits.len(),
                limit: MAX_EFFECT_WRITES,
            });
        }
        let now = self.now_ms();
        let expires_at_s = self.config.expires_at_s(now);
        // Which message, and which of its writes (None: its item), each action is.
        let mut owners: Vec<(usize, Option<usize>)> = Vec::with_capacity(actions);
        let mut items = Vec::with_capacity(actions);
        for (index, commit) in commits.into_iter().enumerate() {
            let request = commit.request();
            let pk = self.pk(request.key)?;
            let mut item = new_item(&pk, Status::Completed, &commit.owner, request, now);
            item.insert("expires_at".to_owned(), n(expires_at_s));
            if let Some(result) = &commit.result {
                item.insert("result".to_owned(), s(result));
            }
            items.push(self.put_new(item, now)?);
            owners.push((index, None));
            owners.extend((0..commit.effects.len()).map(|effect| (index, Some(effect))));
            items.extend(commit.effects);
        }
        let (reasons, err) = match self.transact(items).await {
            Ok(()) => return Ok(CommitOutcome::Committed { expires_at_s }),
            Err(failure) => failure,
        };
        let Some(action) = reasons.iter().position(condition_failed) else {
            return Err(transaction_error(
                "commit (TransactWriteItems)",
                &reasons,
                err,
            ));
        };
        // The earliest message with a failed condition; its own item before
        // its writes.
        let index = owners[action].0;
        let first = owners
            .iter()
            .position(|(i, _)| *i == index)
            .unwrap_or(action);
        Ok(match (reasons.get(first), owners[action].1) {
            (Some(reason), _) if condition_failed(reason) => CommitOutcome::KeyTaken {
                index,
                item: parse_old(reason.item())?,
            },
            (_, effect) => CommitOutcome::EffectRefused {
                index,
                effect: effect.unwrap_or(0),
                message: reasons[action].message().unwrap_or_default().to_owned(),
            },
        })
    }

    /// Absent | expired ──fail──▶ FAILED v1: a poison message on the
    /// lock-free path, so that its redeliveries are refused without running
    /// the work; else the item found (the key is not new).
    pub(super) async fn put_failed(
        &self,
        request: ClaimRequest<'_>,
        owner: &str,
        error: &str,
    ) -> Result<Conditional<()>, StoreError> {
        let pk = self.pk(request.key)?;
        let now = self.now_ms();
        let mut item = new_item(&pk, Status::Failed, owner, request, now);
        item.insert("expires_at".to_owned(), n(self.config.expires_at_s(now)));
        item.insert("error".to_owned(), s(bounded(error)));
        // Invariant: one live item per key (see NEW_KEY).
        self.put_if_new(item, now, (), "fail new (PutItem)").await
    }

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
