//! Reads of the idempotency table. Every read treats an item past its
//! `expires_at` as absent: DynamoDB deletes expired items lazily.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::KeysAndAttributes;
use exactly_once_core::store::requests;
use tokio::task::JoinSet;

use super::codec::{RawItem, parse, s};
use super::write::parse_old;
use super::{DynamoDbStore, sdk_error};
use exactly_once_core::store::{Store, StoreError, StoredItem};

/// BatchGetItem reads at most this many keys a call.
const KEYS_PER_BATCH_GET: usize = 100;
/// Rounds of retrying UnprocessedKeys before giving up on the rest.
const UNPROCESSED_RETRIES: u32 = 5;

/// The stored item of `key`, read consistently; `None` when absent or
/// past its TTL.
pub(super) async fn get(
    store: &DynamoDbStore,
    key: &str,
) -> Result<Option<StoredItem>, StoreError> {
    let raw = store.raw_item(&store.pk(key)?).await?;
    let now = store.now_ms();
    Ok(parse_old(raw.as_ref())?
        .map(|item| *item)
        .filter(|item| !item.is_expired(now)))
}

/// The stored items of `keys` (without prefix; invalid keys are skipped),
/// by key, read with BatchGetItem: 100 keys a call, calls concurrently,
/// UnprocessedKeys retried with backoff. Eventually consistent: a hint,
/// never a reason to skip a conditional write except for a COMPLETED item
/// (COMPLETED never goes back).
pub(super) async fn batch_get(
    store: &DynamoDbStore,
    keys: &[&str],
) -> Result<HashMap<String, StoredItem>, StoreError> {
    // Each key by its pk (a long key's pk may be its hash).
    let key_of: HashMap<String, &str> = keys
        .iter()
        .filter_map(|key| Some((store.pk(key).ok()?, *key)))
        .collect();
    let pks: Vec<String> = key_of.keys().cloned().collect();
    let mut calls = JoinSet::new();
    for chunk in pks.chunks(KEYS_PER_BATCH_GET) {
        let (store, chunk) = (store.clone(), chunk.to_vec());
        calls.spawn(requests::inherit(async move {
            store.batch_get_chunk(chunk).await
        }));
    }
    let now = store.now_ms();
    let mut found = HashMap::new();
    while let Some(joined) = calls.join_next().await {
        let items = joined.map_err(|err| StoreError::Unavailable {
            operation: "read (BatchGetItem)",
            message: err.to_string(),
        })??;
        for raw in items {
            let item = parse(&raw)?;
            // Only items asked for count; an expired one is absent.
            if let Some(key) = key_of.get(&item.pk).filter(|_| !item.is_expired(now)) {
                found.insert((*key).to_owned(), item);
            }
        }
    }
    Ok(found)
}

impl DynamoDbStore {
    /// The item under `pk` as DynamoDB holds it, every attribute, read
    /// consistently, TTL not applied (operators see expired items too).
    pub async fn raw_item(&self, pk: &str) -> Result<Option<RawItem>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.config.table_name)
            .key("pk", s(pk))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| sdk_error("read (GetItem)", err))?;
        Ok(output.item)
    }

    /// The stored item of a raw one (an error names what is malformed).
    pub fn parse_item(raw: &RawItem) -> Result<StoredItem, StoreError> {
        parse(raw)
    }

    async fn batch_get_chunk(&self, pks: Vec<String>) -> Result<Vec<RawItem>, StoreError> {
        let keys = pks
            .into_iter()
            .map(|pk| HashMap::from([("pk".to_owned(), s(pk))]))
            .collect();
        let mut request = KeysAndAttributes::builder()
            .set_keys(Some(keys))
            .build()
            .map_err(|err| StoreError::Rejected {
                operation: "read (BatchGetItem)",
                message: err.to_string(),
            })?;
        let mut items = Vec::new();
        for round in 0..=UNPROCESSED_RETRIES {
            if round > 0 {
                tokio::time::sleep(Duration::from_millis(10 << round)).await;
            }
            let mut output = self
                .client
                .batch_get_item()
                .request_items(&self.config.table_name, request)
                .send()
                .await
                .map_err(|err| sdk_error("read (BatchGetItem)", err))?;
            if let Some(found) = output
                .responses
                .as_mut()
                .and_then(|r| r.remove(&self.config.table_name))
            {
                items.extend(found);
            }
            match output
                .unprocessed_keys
                .and_then(|mut u| u.remove(&self.config.table_name))
            {
                Some(rest) if !rest.keys().is_empty() => request = rest,
                _ => return Ok(items),
            }
        }
        Err(StoreError::Unavailable {
            operation: "read (BatchGetItem)",
            message: "keys stayed unprocessed after retries".into(),
        })
    }
}
