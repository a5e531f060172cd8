//! The handler on DynamoDB Local, through exactly the function
//! `exactly_once::run` serves (`exactly_once::Function::from_vars`): every
//! payment of `events/payments.json`, delivered twice, moves its account's
//! balance once. Run it with DynamoDB Local listening (README.md: "Test"):
//!
//! ```sh
//! AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 cargo test
//! ```

use std::collections::HashMap;

use exactly_once::Function;
use exactly_once::aws::dynamodb_client;
use exactly_once::dynamodb::Client;
use exactly_once::dynamodb::aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use exactly_once::lambda::decode_event;
use serde_json::{Value, json};

use super::*;

/// A new table on DynamoDB Local with the string hash key `key`.
async fn table(client: &Client, name: &str, key: &str) {
    client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(key)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("an attribute"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(key)
                .key_type(KeyType::Hash)
                .build()
                .expect("a key"),
        )
        .send()
        .await
        .expect("CreateTable on DynamoDB Local (is it running? see README.md)");
}

/// Each account's balance after `event`'s payments, each applied once.
fn balances(event: &Value) -> HashMap<String, i64> {
    let mut balances = HashMap::new();
    for record in decode_event(event)
        .expect("the sample event")
        .units
        .into_iter()
        .flatten()
    {
        let record = record.1.expect("a readable record");
        let payment: Payment = serde_json::from_slice(&record.body()).expect("a payment");
        *balances.entry(payment.account_id).or_default() += payment.amount_cents;
    }
    balances
}

#[tokio::test]
async fn each_payment_is_applied_once_however_often_it_is_delivered() {
    assert!(
        std::env::var("AWS_ENDPOINT_URL_DYNAMODB").is_ok(),
        "set AWS_ENDPOINT_URL_DYNAMODB to a running DynamoDB Local (see README.md)"
    );
    let client = dynamodb_client().await;
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock")
        .as_nanos();
    let (idempotency, ledger) = (format!("idempotency-{run}"), format!("ledger-{run}"));
    table(&client, &idempotency, "pk").await;
    table(&client, &ledger, "account_id").await;
    // Exactly what `run` serves with these variables (template.yaml sets
    // them so), on DynamoDB: the store, the senders, the checks at start.
    let handler = Ledger {
        table: ledger.clone(),
    };
    let function = Function::from_vars(handler, |name| match name {
        "IDEMPOTENCY_TABLE" => Some(idempotency.clone()),
        "EVENT_SOURCES" => Some("{{ cookiecutter.event_source }}".to_owned()),
{%- if cookiecutter.event_source == "kinesis" or cookiecutter.event_source == "dynamodb-streams" %}
        "IDEMPOTENCY_KEY_SOURCE" => Some("json:/payment_id".to_owned()),
{%- endif %}
        _ => None,
    })
    .await
    .expect("the function starts");

    let event: Value =
        serde_json::from_str(include_str!("../events/payments.json")).expect("the sample event");
    for delivery in 1..=2 {
        let answer = function
            .invoke(event.clone())
            .await
            .expect("a {{ cookiecutter.event_source }} event is never an invocation error");
        assert_eq!(
            answer,
            json!({"batchItemFailures": []}),
            "delivery {delivery}"
        );
    }
    let expected = balances(&event);
    assert!(!expected.is_empty(), "the sample event holds payments");
    for (account, cents) in expected {
        let item = client
            .get_item()
            .table_name(&ledger)
            .key("account_id", AttributeValue::S(account.clone()))
            .consistent_read(true)
            .send()
            .await
            .expect("GetItem")
            .item
            .unwrap_or_default();
        let balance = item
            .get("balance_cents")
            .and_then(|value| value.as_n().ok())
            .and_then(|number| number.parse::<i64>().ok());
        assert_eq!(balance, Some(cents), "{account}: applied once");
    }
}
