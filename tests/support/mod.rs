//! Shared by the integration tests: a DynamoDB Local client and isolated keys.
//!
//! `infra/test.sh` starts DynamoDB Local, creates the tables from
//! template.yaml and exports their names; every test then works under its own
//! random key prefix, so tests run in parallel on one table.
#![allow(dead_code)] // each test binary uses its own part of this module

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use exactly_once::{IdempotencyStore, StoreConfig};

/// A variable `infra/test.sh` exports; a clear failure without it.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the tests with infra/test.sh (it starts DynamoDB Local)")
    })
}

pub async fn client() -> Client {
    env("AWS_ENDPOINT_URL_DYNAMODB");
    exactly_once::dynamo::connect().await
}

/// A client whose endpoint nothing listens on.
pub async fn unreachable_client() -> Client {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let port = listener.local_addr().expect("local address").port();
    drop(listener);
    let config = client()
        .await
        .config()
        .to_builder()
        .endpoint_url(format!("http://127.0.0.1:{port}"))
        .build();
    Client::from_conf(config)
}

/// A store configuration on the test table under a fresh key prefix.
pub fn store_config(lock_timeout: Duration) -> StoreConfig {
    StoreConfig {
        key_prefix: format!("test-{}#", uuid::Uuid::new_v4()),
        lock_timeout,
        ..StoreConfig::new(env("IDEMPOTENCY_TABLE"))
    }
}

pub async fn store(lock_timeout: Duration) -> IdempotencyStore {
    IdempotencyStore::new(client().await, store_config(lock_timeout))
}

/// The raw item under `pk`, as DynamoDB holds it (TTL not applied).
pub async fn raw_item(
    client: &Client,
    table: &str,
    pk: &str,
) -> Option<HashMap<String, AttributeValue>> {
    client
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem on DynamoDB Local")
        .item
}

pub fn number(item: &HashMap<String, AttributeValue>, name: &str) -> u64 {
    item[name]
        .as_n()
        .expect("a number")
        .parse()
        .expect("whole number")
}

pub fn string<'a>(item: &'a HashMap<String, AttributeValue>, name: &str) -> &'a str {
    item[name].as_s().expect("a string")
}

pub fn sha256_hex(payload: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(payload))
}
