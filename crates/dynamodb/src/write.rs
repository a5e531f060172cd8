//! What the writes of both paths share: the condition of every write that
//! creates an item, the attributes a new item starts with, the conditional
//! PutItem that returns the stored item on conflict, the UpdateItem of one
//! item, and the expression attribute names.
//!
//! Expression placeholders are the attribute names with `#` in front
//! (`#status` is `status`); [`names_in`] derives the name map from them.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};

use super::codec::{RawItem, n, parse, s, status_value};
use super::{DynamoDbStore, sdk_error};
use exactly_once_core::clock::ms_to_s;
use exactly_once_core::store::{
    ClaimRequest, Conditional, Status, StoreError, StoredItem, bounded,
};

/// The condition of every write that creates an item (claim, lock-free
/// commit, lock-free failure).
/// Invariant: one live item per key; a write never replaces an item that has
/// not passed its TTL.
pub(super) const NEW_KEY: &str = "attribute_not_exists(#pk) OR #expires_at < :now_s";

impl DynamoDbStore {
    /// PutItem of a new item under [`NEW_KEY`]: `written`, or the stored
    /// item when the key is not new.
    pub(super) async fn put_if_new<T>(
        &self,
        item: RawItem,
        now: u64,
        written: T,
        operation: &'static str,
    ) -> Result<Conditional<T>, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.config.table_name)
            .set_item(Some(item))
            .condition_expression(NEW_KEY)
            .set_expression_attribute_names(Some(names_in(&[NEW_KEY])))
            .expression_attribute_values(":now_s", n(ms_to_s(now)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        conditional(result, written, operation, |err| match err {
            PutItemError::ConditionalCheckFailedException(conflict) => Some(conflict.item()),
            _ => None,
        })
    }

    /// An UpdateItem of the item `pk`: `update` under `condition`, the
    /// attribute names taken from their placeholders.
    pub(super) fn update_item(
        &self,
        pk: &str,
        update: &str,
        condition: &str,
        values: HashMap<String, AttributeValue>,
    ) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.config.table_name)
            .key("pk", s(pk))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names_in(&[update, condition])))
            .set_expression_attribute_values(Some(values))
    }

    /// The attributes every new item starts with (version 1, one attempt,
    /// this store's scope); the caller adds `expires_at` and what its status
    /// needs.
    pub(super) fn new_item(
        &self,
        pk: &str,
        status: Status,
        owner: &str,
        request: ClaimRequest<'_>,
        now: u64,
    ) -> RawItem {
        let mut item = HashMap::from([
            ("pk".to_owned(), s(pk)),
            ("status".to_owned(), status_value(status)),
            ("version".to_owned(), n(1)),
            ("owner".to_owned(), s(owner)),
            ("payload_hash".to_owned(), s(request.payload_hash)),
            ("created_at".to_owned(), n(now)),
            ("updated_at".to_owned(), n(now)),
            ("attempts".to_owned(), n(1)),
        ]);
        if let Some(origin) = request.origin {
            item.insert("origin".to_owned(), s(bounded(origin)));
        }
        if let Some(scope) = &self.config.scope {
            item.insert("scope".to_owned(), s(scope));
        }
        item
    }
}
/// `written` for a write that succeeded, or the stored item when its
/// condition failed (`conflict` picks that item out of the service error).
pub(super) fn conditional<T, O, E, R>(
    result: Result<O, SdkError<E, R>>,
    written: T,
    operation: &'static str,
    conflict: fn(&E) -> Option<Option<&RawItem>>,
) -> Result<Conditional<T>, StoreError>
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match result {
        Ok(_) => Ok(Conditional::Written(written)),
        Err(err) => match err.as_service_error().and_then(conflict) {
            Some(item) => Ok(Conditional::Conflict(parse_old(item)?)),
            None => Err(sdk_error(operation, err)),
        },
    }
}

pub(super) fn parse_old(item: Option<&RawItem>) -> Result<Option<Box<StoredItem>>, StoreError> {
    item.map(|item| parse(item).map(Box::new)).transpose()
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

/// The table and key of the item a write touches, named as
/// [`exactly_once_core::store::Increment::item`] names an incremented one
/// (`table/key_name="key"` for a string key); None for a Put (its key
/// attributes are not known here).
pub(super) fn touched_item(write: &TransactWriteItem) -> Option<String> {
    let (table, key) = if let Some(update) = write.update() {
        (update.table_name(), update.key())
    } else if let Some(delete) = write.delete() {
        (delete.table_name(), delete.key())
    } else if let Some(check) = write.condition_check() {
        (check.table_name(), check.key())
    } else {
        return None;
    };
    let mut parts: Vec<String> = key
        .iter()
        .map(|(name, value)| match value {
            AttributeValue::S(text) => format!("{name}={text:?}"),
            other => format!("{name}={other:?}"),
        })
        .collect();
    parts.sort_unstable();
    Some(format!("{table}/{}", parts.join("/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_is_named_by_its_table_and_key() {
        use aws_sdk_dynamodb::types::{Put, Update};
        let update = Update::builder()
            .table_name("ledger")
            .key("account_id", AttributeValue::S("a".into()))
            .update_expression("ADD balance_cents :one")
            .build()
            .expect("an update");
        let update = TransactWriteItem::builder().update(update).build();
        assert_eq!(
            touched_item(&update).as_deref(),
            Some(r#"ledger/account_id="a""#)
        );
        // A Put's key attributes are not known here: it commits alone.
        let put = Put::builder()
            .table_name("ledger")
            .item("account_id", AttributeValue::S("a".into()))
            .build()
            .expect("a put");
        assert_eq!(
            touched_item(&TransactWriteItem::builder().put(put).build()),
            None
        );
    }

    #[test]
    fn names_are_derived_from_placeholders() {
        let names = names_in(&[
            "SET #status = :s ADD #attempts :one",
            "#version = :version AND #owner = :owner",
        ]);
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
