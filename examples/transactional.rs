//! A handler whose whole effect is DynamoDB writes: an order takes items
//! from stock, on the lock-free path. The engine commits the writes in ONE
//! transaction with the key's COMPLETED item (no claim, no lock); the stock
//! condition failing makes the order FAILED (parked), never half applied.
//!
//! Needs a `STOCK_TABLE` (hash key `sku`, number `available`) beside the
//! settings of README: Configuration.

use exactly_once::dynamodb::aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use exactly_once::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    order_id: String,
    sku: String,
    quantity: u32,
}

struct Stock {
    table: String,
}

impl RecordHandler<TransactWriteItem> for Stock {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        CommitPath::LockFree // no side effect: the writes are the whole effect
    }

    async fn handle(
        &self,
        _: &FencingToken,
        record: &KafkaRecord,
    ) -> Result<Completion<TransactWriteItem>, HandlerError> {
        let order: Order = serde_json::from_slice(&record.value)
            .map_err(|e| HandlerError::Permanent(format!("not an order: {}", json_error(&e))))?;
        let take = Update::builder()
            .table_name(&self.table)
            .key("sku", AttributeValue::S(order.sku.clone()))
            .update_expression("ADD available :minus")
            .condition_expression("available >= :quantity")
            .expression_attribute_values(
                ":minus",
                AttributeValue::N(format!("-{}", order.quantity)),
            )
            .expression_attribute_values(":quantity", AttributeValue::N(order.quantity.to_string()))
            .build()
            .map_err(|e| HandlerError::Permanent(e.to_string()))?;
        Ok(Completion {
            on_condition_failure: ConditionFailure::Permanent, // out of stock: FAILED
            ..Completion::transactional(
                format!(
                    "order {} took {} of {}",
                    order.order_id, order.quantity, order.sku
                ),
                vec![TransactWriteItem::builder().update(take).build()],
            )
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), StartError> {
    let table = required_var("STOCK_TABLE")?;
    // Its effects are DynamoDB writes: DynamoDB alone (IDEMPOTENCY_STORE).
    exactly_once::run(exactly_once::dynamodb::only(Stock { table })).await
}
