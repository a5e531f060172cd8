//! An [`Increment`] as a transaction action: ONE `Update` with `ADD` of
//! every number, under the floors' condition, returning the item as it was
//! when the condition fails (so the engine can tell which message
//! overdraws).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
    Update,
};

use super::codec::s;
use exactly_once_core::store::{Increment, StoreError};

/// The `Update` action of a (merged) increment.
pub(super) fn increment_action(increment: &Increment) -> Result<TransactWriteItem, StoreError> {
    let mut names = HashMap::new();
    let mut values = HashMap::new();
    let mut adds = Vec::new();
    let mut floors = Vec::new();
    for (i, add) in increment.adds.iter().enumerate() {
        names.insert(format!("#n{i}"), add.attribute.clone());
        values.insert(format!(":by{i}"), AttributeValue::N(add.by.to_string()));
        adds.push(format!("#n{i} :by{i}"));
        if let Some(least) = add.least_before() {
            values.insert(format!(":least{i}"), AttributeValue::N(least.to_string()));
            // Invariant: the number after the add stays at least the floor
            // (`n + by >= floor`); a missing number is 0 to ADD.
            floors.push(match least <= 0 {
                true => format!("(attribute_not_exists(#n{i}) OR #n{i} >= :least{i})"),
                false => format!("#n{i} >= :least{i}"),
            });
        }
    }
    let update = Update::builder()
        .table_name(&increment.table)
        .key(&increment.key_name, s(&increment.key))
        .update_expression(format!("ADD {}", adds.join(", ")))
        .set_condition_expression((!floors.is_empty()).then(|| floors.join(" AND ")))
        .set_expression_attribute_names(Some(names))
        .set_expression_attribute_values(Some(values))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(|err| StoreError::Rejected {
            operation: "increment (TransactWriteItems)",
            message: err.to_string(),
        })?;
    Ok(TransactWriteItem::builder().update(update).build())
}

/// The numbers of `increment`'s item as a refusal returned them (missing:
/// 0); `None` if one is not an integer.
pub(super) fn numbers_found(
    increment: &Increment,
    reason: &CancellationReason,
) -> Option<HashMap<String, i128>> {
    let item = reason.item();
    increment
        .adds
        .iter()
        .map(|add| {
            let value = match item.and_then(|item| item.get(&add.attribute)) {
                None => 0,
                Some(AttributeValue::N(number)) => number.parse().ok()?,
                Some(_) => return None,
            };
            Some((add.attribute.clone(), value))
        })
        .collect()
}
