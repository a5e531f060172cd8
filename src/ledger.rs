//! The demo business logic: a payments ledger. Each payment adds its amount
//! to an account's balance with DynamoDB's `ADD`, which is deliberately not
//! idempotent by itself: a repeated payment shows as a wrong balance.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::AttributeValue;
use serde::Deserialize;

use crate::engine::{FencingToken, HandlerError, RecordHandler};

/// A payment message, as producers write it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Payment {
    pub payment_id: String,
    pub account_id: String,
    pub amount_cents: i64,
    pub currency: String,
}

impl Payment {
    /// Reads a payment; a clear, permanent error for anything else.
    pub fn parse(payload: &[u8]) -> Result<Self, HandlerError> {
        let payment: Self = serde_json::from_slice(payload)
            .map_err(|err| HandlerError::Permanent(format!("not a payment: {err}")))?;
        if payment.account_id.is_empty() {
            return Err(HandlerError::Permanent("account_id is empty".into()));
        }
        Ok(payment)
    }
}

/// Applies payments to the balances of the ledger table (hash key
/// `account_id`, attribute `balance_cents`).
pub struct LedgerHandler {
    client: Client,
    table: String,
}

impl LedgerHandler {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

impl RecordHandler for LedgerHandler {
    async fn handle(
        &self,
        _token: &FencingToken,
        payload: &[u8],
    ) -> Result<Option<String>, HandlerError> {
        let payment = Payment::parse(payload)?;
        self.client
            .update_item()
            .table_name(&self.table)
            .key("account_id", AttributeValue::S(payment.account_id.clone()))
            .update_expression("ADD balance_cents :amount, payment_count :one")
            .expression_attribute_values(
                ":amount",
                AttributeValue::N(payment.amount_cents.to_string()),
            )
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .send()
            .await
            // The payment itself is fine: a ledger write that fails is retried.
            .map_err(|err| {
                HandlerError::Retryable(format!(
                    "ledger update failed: {}",
                    DisplayErrorContext(&err)
                ))
            })?;
        Ok(Some(format!(
            "{} {} {} to {}",
            payment.payment_id, payment.amount_cents, payment.currency, payment.account_id
        )))
    }
}
