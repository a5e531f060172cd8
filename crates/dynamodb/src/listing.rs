//! Listings for operators (`exactly-once-ops stuck`, `failed`) and the
//! scheduled stuck-key check. Stuck keys are found through the sparse index
//! `started`, which holds STARTED items only (their `started_shard` is set by
//! the claim and the take-over and removed by completion and failure): one
//! Query per shard, so the cost follows the number of STARTED items, not the
//! table's size. FAILED keys (and stuck keys with [`ScanOptions::full_scan`],
//! for items written before the index existed) are found by a Scan
//! (optionally in parallel segments), filtered on the server with the same
//! judgement as [`Listing::matches`]: it reads, and is billed for, every item
//! of the table.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, ConsumedCapacity, ReturnConsumedCapacity};
use exactly_once_core::store::requests;
use tokio::task::JoinSet;

use super::codec::{RawItem, n, parse, s, status_value};
use super::write::names_in;
use super::{DynamoDbStore, sdk_error};
use exactly_once_core::clock::{duration_ms, ms_to_s};
use exactly_once_core::store::{Listed, Listing, ListingCost, Status, Store, StoreError};

/// The sparse global secondary index of STARTED items (sam/exactly-once.yaml):
/// hash key `started_shard` (no range key, so that the listing's filter may
/// name `created_at` and `lock_expires_at`), all attributes.
pub const STARTED_INDEX: &str = "started";
/// The shards of [`STARTED_INDEX`]: every key's STARTED item sits in one
/// (by a hash of its `pk`), so that claims spread their index writes over
/// this many partitions instead of one.
pub const STARTED_SHARDS: u64 = 16;

/// The sparse global secondary index of COMPLETED items whose messages are
/// not known sent (sam/exactly-once.yaml): hash key `outbox_shard` (the shard of the
/// key, set with the item's `outbox` and removed with it), all attributes:
/// what the sweeper sends, at a cost that follows their number.
pub const UNSENT_INDEX: &str = "unsent";

/// The shard of `pk` in [`STARTED_INDEX`] and [`UNSENT_INDEX`] (FNV-1a of its bytes): the same
/// for every writer of the key.
pub(super) fn key_shard(pk: &str) -> u64 {
    let hash = pk.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    hash % STARTED_SHARDS
}

/// How a listing reads the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanOptions {
    /// Parallel scan segments (1: a plain scan).
    pub segments: u32,
    /// DynamoDB's `Limit` per page (items evaluated); `None`: 1 MB pages.
    pub page_size: Option<u32>,
    /// Stuck keys by a Scan of the whole table instead of the index of
    /// STARTED items (which misses STARTED items written before it existed).
    pub full_scan: bool,
}

impl Default for ScanOptions {
    fn default() -> Self {
        Self {
            segments: 1,
            page_size: None,
            full_scan: false,
        }
    }
}

/// STARTED, still live (not past its TTL), and either its lock ended or it
/// is older than the cutoff.
const STUCK: &str = "#status = :started AND #expires_at >= :now_s \
                     AND (#lock_expires_at < :now_ms OR #created_at < :cutoff_ms)";
/// FAILED and still live (not past its TTL).
const FAILED: &str = "#status = :failed AND #expires_at >= :now_s";
/// COMPLETED, still live, with messages not known sent, completed before
/// the cutoff.
const UNSENT: &str = "#status = :completed AND #expires_at >= :now_s \
                      AND attribute_exists(#outbox) AND #updated_at < :cutoff_ms";
const UNDER_PREFIX: &str = " AND begins_with(#pk, :prefix)";
/// The attributes every listing reads ([`projection`]).
const PROJECTION: &str = "#pk, #status, #version, #owner, #payload_hash, #lock_expires_at, \
                          #expires_at, #created_at, #updated_at, #attempts, #origin, #error, \
                          #last_error";

/// The keys `listing` names: stuck keys through the index of STARTED
/// items, unsent messages through the index of them (unless
/// [`ScanOptions::full_scan`]), FAILED keys by a Scan.
pub(super) async fn list(store: &DynamoDbStore, listing: Listing) -> Result<Listed, StoreError> {
    match listing {
        Listing::Stuck { .. } if !store.scan.full_scan => {
            store
                .query_index(listing, STARTED_INDEX, "#started_shard = :shard")
                .await
        }
        Listing::Unsent { .. } if !store.scan.full_scan => {
            store
                .query_index(listing, UNSENT_INDEX, "#outbox_shard = :shard")
                .await
        }
        _ => store.scan_listing(listing).await,
    }
}

impl DynamoDbStore {
    /// Queries every shard of the sparse index `index` (whose shard the key
    /// condition `in_shard` names), at once, with the listing's filter.
    async fn query_index(
        &self,
        listing: Listing,
        index: &'static str,
        in_shard: &'static str,
    ) -> Result<Listed, StoreError> {
        let filter = self.filter_expression(listing);
        let values = self.filter_values(listing);
        let projection = projection(listing);
        let mut shards = JoinSet::new();
        for shard in 0..STARTED_SHARDS {
            let (store, filter, values) = (self.clone(), filter.clone(), values.clone());
            let projection = projection.clone();
            shards.spawn(requests::inherit(async move {
                let query = (index, in_shard, projection.as_str());
                store.query_shard(query, &filter, values, shard).await
            }));
        }
        self.gather(shards, "list (Query)").await
    }

    /// One shard of an index, page by page.
    async fn query_shard(
        &self,
        (index, in_shard, projection): (&str, &str, &str),
        filter: &str,
        mut values: HashMap<String, AttributeValue>,
        shard: u64,
    ) -> Result<(Vec<RawItem>, ListingCost), StoreError> {
        values.insert(":shard".to_owned(), n(shard));
        let names = names_in(&[in_shard, filter, projection]);
        let mut pages = self
            .client
            .query()
            .table_name(&self.config.table_name)
            .index_name(index)
            .key_condition_expression(in_shard)
            .filter_expression(filter)
            .projection_expression(projection)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .into_paginator()
            .send();
        let mut listed = (Vec::new(), ListingCost::default());
        while let Some(page) = pages.next().await {
            let page = page.map_err(|err| sdk_error("list (Query)", err))?;
            add_page(
                &mut listed.1,
                page.scanned_count(),
                page.consumed_capacity(),
            );
            listed.0.extend(page.items.unwrap_or_default());
        }
        Ok(listed)
    }

    /// The items and costs of parallel requests, parsed.
    async fn gather(
        &self,
        mut requests: JoinSet<Result<(Vec<RawItem>, ListingCost), StoreError>>,
        operation: &'static str,
    ) -> Result<Listed, StoreError> {
        let mut listed = Listed::default();
        while let Some(joined) = requests.join_next().await {
            let (items, cost) = joined.map_err(|err| StoreError::Unavailable {
                operation,
                message: err.to_string(),
            })??;
            listed.cost.requests += cost.requests;
            listed.cost.read += cost.read;
            listed.cost.capacity_units += cost.capacity_units;
            for raw in items {
                listed.items.push(parse(&raw)?);
            }
        }
        Ok(listed)
    }

    /// Scans the table for `listing`: every segment pages with
    /// ExclusiveStartKey until DynamoDB returns no LastEvaluatedKey.
    async fn scan_listing(&self, listing: Listing) -> Result<Listed, StoreError> {
        let filter = self.filter_expression(listing);
        let values = self.filter_values(listing);
        let projection = projection(listing);
        let mut segments = JoinSet::new();
        for segment in 0..self.scan.segments.max(1) {
            let (store, filter, values) = (self.clone(), filter.clone(), values.clone());
            let projection = projection.clone();
            segments.spawn(requests::inherit(async move {
                store
                    .scan_segment(&filter, &projection, values, segment)
                    .await
            }));
        }
        self.gather(segments, "list (Scan)").await
    }

    /// The filter of `listing`, under the key prefix when there is one.
    pub fn filter_expression(&self, listing: Listing) -> String {
        let filter = match listing {
            Listing::Stuck { .. } => STUCK,
            Listing::Failed => FAILED,
            Listing::Unsent { .. } => UNSENT,
        };
        match self.config.key_prefix.is_empty() {
            true => filter.to_owned(),
            false => format!("{filter}{UNDER_PREFIX}"),
        }
    }

    fn filter_values(&self, listing: Listing) -> HashMap<String, AttributeValue> {
        let now = self.now_ms();
        let mut values = HashMap::from([(":now_s".to_owned(), n(ms_to_s(now)))]);
        match listing {
            Listing::Stuck { older_than } => values.extend([
                (":started".to_owned(), status_value(Status::Started)),
                (":now_ms".to_owned(), n(now)),
                (
                    ":cutoff_ms".to_owned(),
                    n(now.saturating_sub(duration_ms(older_than))),
                ),
            ]),
            Listing::Failed => {
                values.insert(":failed".to_owned(), status_value(Status::Failed));
            }
            Listing::Unsent { older_than } => values.extend([
                (":completed".to_owned(), status_value(Status::Completed)),
                (
                    ":cutoff_ms".to_owned(),
                    n(now.saturating_sub(duration_ms(older_than))),
                ),
            ]),
        }
        if !self.config.key_prefix.is_empty() {
            values.insert(":prefix".into(), s(&self.config.key_prefix));
        }
        values
    }

    async fn scan_segment(
        &self,
        filter: &str,
        projection: &str,
        values: HashMap<String, AttributeValue>,
        segment: u32,
    ) -> Result<(Vec<RawItem>, ListingCost), StoreError> {
        let names = names_in(&[filter, projection]);
        let parallel = self.scan.segments > 1;
        let mut pages = self
            .client
            .scan()
            .table_name(&self.config.table_name)
            .filter_expression(filter)
            .projection_expression(projection)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .set_limit(self.scan.page_size.map(|limit| limit as i32))
            .set_segment(parallel.then_some(segment as i32))
            .set_total_segments(parallel.then_some(self.scan.segments as i32))
            .into_paginator()
            .send();
        let mut listed = (Vec::new(), ListingCost::default());
        while let Some(page) = pages.next().await {
            let page = page.map_err(|err| sdk_error("list (Scan)", err))?;
            add_page(
                &mut listed.1,
                page.scanned_count(),
                page.consumed_capacity(),
            );
            listed.0.extend(page.items.unwrap_or_default());
        }
        Ok(listed)
    }
}

/// What a listing reads of each item: everything but the result (up to 64
/// KiB, which a listing never shows); the sweeper's, the outbox too (it
/// sends it).
fn projection(listing: Listing) -> String {
    match listing {
        Listing::Unsent { .. } => format!("{PROJECTION}, #outbox"),
        _ => PROJECTION.to_owned(),
    }
}

/// `cost` and one more page, which read `scanned` items for `capacity`.
fn add_page(cost: &mut ListingCost, scanned: i32, capacity: Option<&ConsumedCapacity>) {
    cost.requests += 1;
    cost.read += scanned.max(0) as u64;
    cost.capacity_units += capacity
        .and_then(aws_sdk_dynamodb::types::ConsumedCapacity::capacity_units)
        .unwrap_or(0.0);
}
