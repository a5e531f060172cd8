//! Listings for operators (`exactly-once-ops stuck`, `failed`): one Scan
//! (optionally in parallel segments), filtered on the server with the same
//! judgement as [`Listing::matches`]; it still reads, and is billed for,
//! every item of the table.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};
use tokio::task::JoinSet;

use super::codec::{RawItem, n, parse, s};
use super::write::names_in;
use super::{DynamoDbStore, sdk_error};
use crate::clock::{duration_ms, ms_to_s};
use crate::store::{Listed, Listing, ListingCost, Status, Store, StoreError};

/// How a listing scans the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanOptions {
    /// Parallel scan segments (1: a plain scan).
    pub segments: u32,
    /// DynamoDB's `Limit` per page (items evaluated); `None`: 1 MB pages.
    pub page_size: Option<u32>,
}

impl Default for ScanOptions {
    fn default() -> Self {
        Self {
            segments: 1,
            page_size: None,
        }
    }
}

/// STARTED, still live (not past its TTL), and either its lock ended or it
/// is older than the cutoff.
const STUCK: &str = "#status = :started AND #expires_at >= :now_s \
                     AND (#lock_expires_at < :now_ms OR #created_at < :cutoff_ms)";
/// FAILED and still live (not past its TTL).
const FAILED: &str = "#status = :failed AND #expires_at >= :now_s";
const UNDER_PREFIX: &str = " AND begins_with(#pk, :prefix)";
/// Everything but the result (up to 64 KiB, which a listing never shows).
const PROJECTION: &str = "#pk, #status, #version, #owner, #payload_hash, #lock_expires_at, \
                          #expires_at, #created_at, #updated_at, #attempts, #origin, #error, \
                          #last_error";

impl DynamoDbStore {
    /// Scans the table for `listing`: every segment pages with
    /// ExclusiveStartKey until DynamoDB returns no LastEvaluatedKey.
    pub(super) async fn scan_listing(&self, listing: Listing) -> Result<Listed, StoreError> {
        let filter = self.filter_expression(listing);
        let values = self.filter_values(listing);
        let mut segments = JoinSet::new();
        for segment in 0..self.scan.segments.max(1) {
            let (store, filter, values) = (self.clone(), filter.clone(), values.clone());
            segments.spawn(async move { store.scan_segment(&filter, values, segment).await });
        }
        let mut listed = Listed::default();
        while let Some(joined) = segments.join_next().await {
            let (items, cost) = joined.map_err(|err| StoreError::Unavailable {
                operation: "list (Scan)",
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

    /// The filter of `listing`, under the key prefix when there is one.
    pub fn filter_expression(&self, listing: Listing) -> String {
        let filter = match listing {
            Listing::Stuck { .. } => STUCK,
            Listing::Failed => FAILED,
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
                (":started".to_owned(), Status::Started.value()),
                (":now_ms".to_owned(), n(now)),
                (
                    ":cutoff_ms".to_owned(),
                    n(now.saturating_sub(duration_ms(older_than))),
                ),
            ]),
            Listing::Failed => {
                values.insert(":failed".to_owned(), Status::Failed.value());
            }
        }
        if !self.config.key_prefix.is_empty() {
            values.insert(":prefix".into(), s(&self.config.key_prefix));
        }
        values
    }

    async fn scan_segment(
        &self,
        filter: &str,
        values: HashMap<String, AttributeValue>,
        segment: u32,
    ) -> Result<(Vec<RawItem>, ListingCost), StoreError> {
        let names = names_in(&[filter, PROJECTION]);
        let parallel = self.scan.segments > 1;
        let mut found = Vec::new();
        let mut cost = ListingCost::default();
        let mut start_key = None;
        loop {
            let output = self
                .client
                .scan()
                .table_name(&self.config.table_name)
                .filter_expression(filter)
                .projection_expression(PROJECTION)
                .set_expression_attribute_names(Some(names.clone()))
                .set_expression_attribute_values(Some(values.clone()))
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .set_limit(self.scan.page_size.map(|limit| limit as i32))
                .set_segment(parallel.then_some(segment as i32))
                .set_total_segments(parallel.then_some(self.scan.segments as i32))
                .set_exclusive_start_key(start_key.take())
                .send()
                .await
                .map_err(|err| sdk_error("list (Scan)", err))?;
            cost.requests += 1;
            cost.read += output.scanned_count().max(0) as u64;
            cost.capacity_units += output
                .consumed_capacity()
                .and_then(|capacity| capacity.capacity_units())
                .unwrap_or(0.0);
            found.extend(output.items().iter().cloned());
            match output.last_evaluated_key {
                Some(key) if !key.is_empty() => start_key = Some(key),
                _ => return Ok((found, cost)),
            }
        }
    }
}
