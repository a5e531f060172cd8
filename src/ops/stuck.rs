//! `stuck`: STARTED keys whose lock expired (or was released) and nobody
//! took over, or that were created longer ago than a given age; `failed`:
//! FAILED keys (poison records, parked under `POISON_POLICY=park`), with
//! their error. One Scan (optionally in parallel segments), filtered and
//! projected on the server; it still reads, and is billed for, every item of
//! the table.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};
use tokio::task::JoinSet;

use super::inspect::{span_ms, span_s, time_ms};
use crate::clock::{duration_ms, ms_to_s};
use crate::store::{StoreError, names_in};

/// What to look for.
#[derive(Debug, Clone)]
pub struct Query {
    /// The idempotency table.
    pub table: String,
    /// Only keys under this prefix are listed (all when empty).
    pub key_prefix: String,
    /// The time the scan judges locks and ages by (epoch ms).
    pub now_ms: u64,
    /// Which keys to list.
    pub listing: Listing,
    /// Parallel scan segments (1: a plain scan).
    pub segments: u32,
    /// DynamoDB's `Limit` per page (items evaluated); `None`: 1 MB pages.
    pub page_size: Option<u32>,
}

/// Which keys a scan lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// STARTED keys whose lock ended, or created before `now - older_than`.
    Stuck {
        /// STARTED keys created longer ago are listed too.
        older_than: Duration,
    },
    /// FAILED keys: the durable record of every poison record.
    Failed,
}

impl Query {
    /// Epoch ms before which a creation counts as too old (stuck keys).
    pub fn cutoff_ms(&self) -> u64 {
        match self.listing {
            Listing::Stuck { older_than } => self.now_ms.saturating_sub(duration_ms(older_than)),
            Listing::Failed => 0,
        }
    }
}

/// A stuck key, with what the scan read of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckKey {
    /// The idempotency key, without the prefix.
    pub key: String,
    /// The key's version.
    pub version: u64,
    /// Lease end, epoch ms (0: released).
    pub lock_expires_at_ms: Option<u64>,
    /// Epoch ms of the first claim.
    pub created_at_ms: Option<u64>,
    /// Epoch ms of the last write.
    pub updated_at_ms: Option<u64>,
    /// Claims and takeovers so far.
    pub attempts: Option<u64>,
    /// Where the first claimer's record came from.
    pub origin: Option<String>,
    /// The error of a FAILED key.
    pub error: Option<String>,
}

/// What the scan cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScanStats {
    /// Scan calls (pages), over all segments.
    pub pages: u64,
    /// Items DynamoDB read (before the filter): what is billed.
    pub scanned: u64,
    /// Items that passed the filter.
    pub matched: u64,
    /// Read capacity units consumed (ReturnConsumedCapacity TOTAL).
    pub capacity_units: f64,
}

impl ScanStats {
    fn add(&mut self, other: &ScanStats) {
        self.pages += other.pages;
        self.scanned += other.scanned;
        self.matched += other.matched;
        self.capacity_units += other.capacity_units;
    }
}

/// STARTED, still live (not past its TTL), and either its lock ended or it
/// is older than the cutoff; under the prefix when there is one.
const STUCK: &str = "#status = :started AND #expires_at >= :now_s \
                     AND (#lock_expires_at < :now_ms OR #created_at < :cutoff_ms)";
/// FAILED and still live (not past its TTL).
const FAILED: &str = "#status = :failed AND #expires_at >= :now_s";
const UNDER_PREFIX: &str = " AND begins_with(#pk, :prefix)";
/// Only what a line shows is returned.
const PROJECTION: &str =
    "#pk, #version, #lock_expires_at, #created_at, #updated_at, #attempts, #origin, #error";

/// The filter expression for `query`.
pub fn filter_expression(query: &Query) -> String {
    let filter = match query.listing {
        Listing::Stuck { .. } => STUCK,
        Listing::Failed => FAILED,
    };
    if query.key_prefix.is_empty() {
        filter.to_owned()
    } else {
        format!("{filter}{UNDER_PREFIX}")
    }
}

fn filter_values(query: &Query) -> HashMap<String, AttributeValue> {
    let n = |v: u64| AttributeValue::N(v.to_string());
    let mut values = HashMap::from([(":now_s".to_owned(), n(ms_to_s(query.now_ms)))]);
    match query.listing {
        Listing::Stuck { .. } => values.extend([
            (":started".to_owned(), AttributeValue::S("STARTED".into())),
            (":now_ms".to_owned(), n(query.now_ms)),
            (":cutoff_ms".to_owned(), n(query.cutoff_ms())),
        ]),
        Listing::Failed => {
            values.insert(":failed".to_owned(), AttributeValue::S("FAILED".into()));
        }
    }
    if !query.key_prefix.is_empty() {
        values.insert(
            ":prefix".into(),
            AttributeValue::S(query.key_prefix.clone()),
        );
    }
    values
}

/// Scans the table for stuck keys: every segment pages with
/// ExclusiveStartKey until DynamoDB returns no LastEvaluatedKey.
pub async fn scan(
    client: &Client,
    query: &Query,
) -> Result<(Vec<StuckKey>, ScanStats), StoreError> {
    let mut segments = JoinSet::new();
    for segment in 0..query.segments {
        let (client, query) = (client.clone(), query.clone());
        segments.spawn(async move { scan_segment(&client, &query, segment).await });
    }
    let mut found = Vec::new();
    let mut stats = ScanStats::default();
    while let Some(joined) = segments.join_next().await {
        let (keys, segment_stats) = joined.map_err(|err| StoreError::Unavailable {
            operation: "stuck (Scan)",
            message: err.to_string(),
        })??;
        found.extend(keys);
        stats.add(&segment_stats);
    }
    Ok((found, stats))
}

async fn scan_segment(
    client: &Client,
    query: &Query,
    segment: u32,
) -> Result<(Vec<StuckKey>, ScanStats), StoreError> {
    let filter = filter_expression(query);
    let names = names_in(&[&filter, PROJECTION]);
    let values = filter_values(query);
    let parallel = query.segments > 1;
    let mut found = Vec::new();
    let mut stats = ScanStats::default();
    let mut start_key = None;
    loop {
        let output = client
            .scan()
            .table_name(&query.table)
            .filter_expression(&filter)
            .projection_expression(PROJECTION)
            .set_expression_attribute_names(Some(names.clone()))
            .set_expression_attribute_values(Some(values.clone()))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .set_limit(query.page_size.map(|limit| limit as i32))
            .set_segment(parallel.then_some(segment as i32))
            .set_total_segments(parallel.then_some(query.segments as i32))
            .set_exclusive_start_key(start_key.take())
            .send()
            .await
            .map_err(|err| StoreError::from_sdk("stuck (Scan)", err))?;
        stats.pages += 1;
        stats.scanned += output.scanned_count().max(0) as u64;
        stats.matched += output.count().max(0) as u64;
        stats.capacity_units += output
            .consumed_capacity()
            .and_then(|capacity| capacity.capacity_units())
            .unwrap_or(0.0);
        for item in output.items() {
            found.push(parse(item, &query.key_prefix)?);
        }
        match output.last_evaluated_key {
            Some(key) if !key.is_empty() => start_key = Some(key),
            _ => return Ok((found, stats)),
        }
    }
}

fn parse(item: &HashMap<String, AttributeValue>, prefix: &str) -> Result<StuckKey, StoreError> {
    let pk = item
        .get("pk")
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default();
    let number = |name: &str| -> Result<Option<u64>, StoreError> {
        item.get(name)
            .map(|v| {
                v.as_n().ok().and_then(|n| n.parse().ok()).ok_or_else(|| {
                    StoreError::MalformedItem {
                        key: pk.clone(),
                        reason: format!("{name} is not a whole number: {v:?}"),
                    }
                })
            })
            .transpose()
    };
    Ok(StuckKey {
        key: pk.strip_prefix(prefix).unwrap_or(&pk).to_owned(),
        version: number("version")?.unwrap_or(0),
        lock_expires_at_ms: number("lock_expires_at")?,
        created_at_ms: number("created_at")?,
        updated_at_ms: number("updated_at")?,
        attempts: number("attempts")?,
        origin: item.get("origin").and_then(|v| v.as_s().ok()).cloned(),
        error: item.get("error").and_then(|v| v.as_s().ok()).cloned(),
    })
}

/// Why a key is listed.
pub fn reasons(key: &StuckKey, query: &Query) -> Vec<String> {
    let mut reasons = Vec::new();
    match key.lock_expires_at_ms {
        Some(0) => reasons.push("lock released".to_owned()),
        Some(at) if at < query.now_ms => reasons.push("lock expired".to_owned()),
        None => reasons.push("no lock".to_owned()),
        Some(_) => {}
    }
    if let Listing::Stuck { older_than } = query.listing
        && key.created_at_ms.is_some_and(|at| at < query.cutoff_ms())
    {
        reasons.push(format!(
            "older than {}",
            humantime::format_duration(older_than)
        ));
    }
    reasons
}

/// One line per listed key: the key first, then `name=value` fields.
pub fn line(key: &StuckKey, query: &Query) -> String {
    if query.listing == Listing::Failed {
        return format!(
            "{}\tversion={}\tfailed_at={}\tattempts={}\torigin={}\terror={}",
            key.key,
            key.version,
            key.updated_at_ms.map_or("-".to_owned(), time_ms),
            key.attempts.map_or("-".to_owned(), |a| a.to_string()),
            key.origin.as_deref().unwrap_or("-"),
            key.error.as_deref().unwrap_or("-"),
        );
    }
    let lock = match key.lock_expires_at_ms {
        None => "none".to_owned(),
        Some(0) => "released".to_owned(),
        Some(at) if at < query.now_ms => {
            format!(
                "expired {} ({} ago)",
                time_ms(at),
                span_ms(query.now_ms - at)
            )
        }
        Some(at) => format!("live until {}", time_ms(at)),
    };
    let created = key.created_at_ms.map_or("-".to_owned(), |at| {
        let age = ms_to_s(query.now_ms.saturating_sub(at));
        format!("{} ({} ago)", time_ms(at), span_s(age))
    });
    format!(
        "{}\tversion={}\tlock={lock}\tcreated_at={created}\tupdated_at={}\tattempts={}\torigin={}\treason={}",
        key.key,
        key.version,
        key.updated_at_ms.map_or("-".to_owned(), time_ms),
        key.attempts.map_or("-".to_owned(), |a| a.to_string()),
        key.origin.as_deref().unwrap_or("-"),
        reasons(key, query).join(", "),
    )
}

/// The closing summary: how many were found and what the scan cost.
pub fn summary(found: usize, stats: &ScanStats, query: &Query) -> String {
    let what = match query.listing {
        Listing::Stuck { .. } => format!(
            "stuck STARTED key(s) (lock ended before {}, or created before {})",
            time_ms(query.now_ms),
            time_ms(query.cutoff_ms())
        ),
        Listing::Failed => "FAILED key(s) (poison records: parked, or refused)".to_owned(),
    };
    format!(
        "{found} {what}; \
         scanned {} item(s) in {} page(s) over {} segment(s); consumed {:.1} read capacity units",
        stats.scanned, stats.pages, query.segments, stats.capacity_units,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2025-01-01T00:00:00Z
    const NOW: u64 = 1_735_689_600_000;

    fn query(prefix: &str) -> Query {
        Query {
            table: "t".into(),
            key_prefix: prefix.into(),
            now_ms: NOW,
            listing: Listing::Stuck {
                older_than: Duration::from_secs(300),
            },
            segments: 1,
            page_size: None,
        }
    }

    fn stuck(lock: Option<u64>, created: u64) -> StuckKey {
        StuckKey {
            key: "k-1".into(),
            version: 2,
            lock_expires_at_ms: lock,
            created_at_ms: Some(created),
            updated_at_ms: Some(created),
            attempts: Some(2),
            origin: Some("payments-0@7".into()),
            error: None,
        }
    }

    #[test]
    fn the_filter_names_every_placeholder_and_the_prefix_only_when_set() {
        let all = filter_expression(&query(""));
        assert!(!all.contains("begins_with"));
        let under = filter_expression(&query("p#"));
        assert!(under.ends_with("begins_with(#pk, :prefix)"));
        let names = names_in(&[&under, PROJECTION]);
        for name in [
            "pk",
            "status",
            "version",
            "lock_expires_at",
            "expires_at",
            "created_at",
            "updated_at",
            "attempts",
            "origin",
        ] {
            assert_eq!(
                names.get(&format!("#{name}")).map(String::as_str),
                Some(name)
            );
        }
        let values = filter_values(&query("p#"));
        assert_eq!(
            values[":cutoff_ms"],
            AttributeValue::N((NOW - 300_000).to_string())
        );
        assert_eq!(
            values[":now_s"],
            AttributeValue::N((NOW / 1000).to_string())
        );
    }

    #[test]
    fn a_line_says_why_a_key_is_stuck() {
        let q = query("p#");
        let expired = line(&stuck(Some(NOW - 1_500), NOW - 60_000), &q);
        assert!(
            expired.starts_with(
                "k-1\tversion=2\tlock=expired 2024-12-31T23:59:58.500Z (1s 500ms ago)"
            ),
            "{expired}"
        );
        assert!(expired.ends_with("reason=lock expired"), "{expired}");
        let old = line(&stuck(Some(NOW + 10_000), NOW - 600_000), &q);
        assert!(
            old.contains("lock=live until 2025-01-01T00:00:10.000Z"),
            "{old}"
        );
        assert!(
            old.contains("created_at=2024-12-31T23:50:00.000Z (10m ago)"),
            "{old}"
        );
        assert!(old.ends_with("reason=older than 5m"), "{old}");
        let both = line(&stuck(Some(0), NOW - 600_000), &q);
        assert!(
            both.ends_with("reason=lock released, older than 5m"),
            "{both}"
        );
    }

    #[test]
    fn the_prefix_is_stripped_from_the_key() {
        let item = HashMap::from([
            ("pk".to_owned(), AttributeValue::S("p#k-9".into())),
            ("version".to_owned(), AttributeValue::N("4".into())),
            ("lock_expires_at".to_owned(), AttributeValue::N("0".into())),
        ]);
        let key = parse(&item, "p#").unwrap();
        assert_eq!(
            (key.key.as_str(), key.version, key.lock_expires_at_ms),
            ("k-9", 4, Some(0))
        );
    }

    #[test]
    fn the_summary_reports_the_cost() {
        let stats = ScanStats {
            pages: 3,
            scanned: 250,
            matched: 2,
            capacity_units: 4.5,
        };
        let text = summary(2, &stats, &query(""));
        assert!(text.starts_with("2 stuck STARTED key(s)"), "{text}");
        assert!(text.contains("scanned 250 item(s) in 3 page(s) over 1 segment(s); consumed 4.5 read capacity units"), "{text}");
    }
}
