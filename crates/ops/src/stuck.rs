//! `stuck` and `failed` as lines: STARTED keys whose lock expired (or was
//! released) and nobody took over, or that were created longer ago than a
//! given age; FAILED keys (poison records, parked under
//! `POISON_POLICY=park`), with their error. The store finds them
//! ([`exactly_once::store::Operator::list`]); this module only shows them.

use exactly_once::clock::{duration_ms, ms_to_s};
use exactly_once::dynamodb::{STARTED_SHARDS, ScanOptions};
use exactly_once::store::{Listing, ListingCost, StoredItem};

use super::inspect::{span_ms, span_s, time_ms};

/// What was asked, as the lines show it.
#[derive(Debug, Clone)]
pub struct Query {
    /// Only keys under this prefix are listed (all when empty): stripped
    /// from the keys shown.
    pub key_prefix: String,
    /// The time the listing judges locks and ages by (epoch ms).
    pub now_ms: u64,
    /// Which keys to list.
    pub listing: Listing,
    /// How DynamoDB was read (index or Scan, segments).
    pub scan: ScanOptions,
    /// The store's name ([`exactly_once::store::Store::NAME`]): how it found them.
    pub store: &'static str,
}

impl Query {
    /// Epoch ms before which a creation counts as too old (stuck keys).
    pub fn cutoff_ms(&self) -> u64 {
        match self.listing {
            Listing::Stuck { older_than } | Listing::Unsent { older_than } => {
                self.now_ms.saturating_sub(duration_ms(older_than))
            }
            Listing::Failed => 0,
        }
    }

    /// The key of `item`, without the prefix.
    fn key<'a>(&self, item: &'a StoredItem) -> &'a str {
        item.pk.strip_prefix(&self.key_prefix).unwrap_or(&item.pk)
    }
}

/// Why a key is listed.
pub fn reasons(key: &StoredItem, query: &Query) -> Vec<String> {
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
pub fn line(key: &StoredItem, query: &Query) -> String {
    if let Listing::Unsent { .. } = query.listing {
        let messages = key
            .outbox
            .as_deref()
            .map(exactly_once::outbox::decode)
            .and_then(Result::ok)
            .unwrap_or_default();
        let mut destinations: Vec<&str> = messages.iter().map(|m| m.destination.as_str()).collect();
        destinations.dedup();
        return format!(
            "{}\tversion={}\tcompleted_at={}\tmessages={}\tdestinations={}\torigin={}\tscope={}",
            query.key(key),
            key.version,
            key.updated_at_ms.map_or("-".to_owned(), time_ms),
            messages.len(),
            destinations.join(","),
            key.origin.as_deref().unwrap_or("-"),
            key.scope.as_deref().unwrap_or("-"),
        );
    }
    if query.listing == Listing::Failed {
        return format!(
            "{}\tversion={}\tfailed_at={}\tattempts={}\torigin={}\tscope={}\terror={}",
            query.key(key),
            key.version,
            key.updated_at_ms.map_or("-".to_owned(), time_ms),
            key.attempts.map_or("-".to_owned(), |a| a.to_string()),
            key.origin.as_deref().unwrap_or("-"),
            key.scope.as_deref().unwrap_or("-"),
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
        "{}\tversion={}\tlock={lock}\tcreated_at={created}\tupdated_at={}\tattempts={}\torigin={}\tscope={}\treason={}",
        query.key(key),
        key.version,
        key.updated_at_ms.map_or("-".to_owned(), time_ms),
        key.attempts.map_or("-".to_owned(), |a| a.to_string()),
        key.origin.as_deref().unwrap_or("-"),
        key.scope.as_deref().unwrap_or("-"),
        reasons(key, query).join(", "),
    )
}

/// The closing summary: how many were found and what the scan cost.
pub fn summary(found: usize, cost: &ListingCost, query: &Query) -> String {
    let what = match query.listing {
        Listing::Stuck { .. } => format!(
            "stuck STARTED key(s) (lock ended before {}, or created before {})",
            time_ms(query.now_ms),
            time_ms(query.cutoff_ms())
        ),
        Listing::Failed => "FAILED key(s) (poison records: parked, or refused)".to_owned(),
        Listing::Unsent { .. } => format!(
            "COMPLETED key(s) with messages not known sent (completed before {})",
            time_ms(query.cutoff_ms())
        ),
    };
    let by_index = matches!(
        query.listing,
        Listing::Stuck { .. } | Listing::Unsent { .. }
    ) && !query.scan.full_scan;
    let index = match query.listing {
        Listing::Unsent { .. } => "unsent messages",
        _ => "STARTED items",
    };
    match query.store {
        "DynamoDB" if by_index => format!(
            "{found} {what}; read {} item(s) of the index of {index} in {} page(s) \
             over {STARTED_SHARDS} shard(s); consumed {:.1} read capacity units",
            cost.read, cost.requests, cost.capacity_units,
        ),
        "DynamoDB" => format!(
            "{found} {what}; scanned {} item(s) in {} page(s) over {} segment(s); \
             consumed {:.1} read capacity units",
            cost.read, cost.requests, query.scan.segments, cost.capacity_units,
        ),
        "Redis" if matches!(query.listing, Listing::Stuck { .. }) => format!(
            "{found} {what}; read {} item(s) through the sorted set of STARTED keys in {} \
             request(s)",
            cost.read, cost.requests
        ),
        "Redis" => format!(
            "{found} {what}; scanned {} key(s) of the table in {} request(s)",
            cost.read, cost.requests
        ),
        store => format!(
            "{found} {what}; read {} row(s) through the {store} index of STARTED, FAILED \
             and unsent rows in {} statement(s)",
            cost.read, cost.requests
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use exactly_once::store::Status;

    /// 2025-01-01T00:00:00Z
    const NOW: u64 = 1_735_689_600_000;

    fn query(prefix: &str) -> Query {
        Query {
            key_prefix: prefix.into(),
            now_ms: NOW,
            listing: Listing::Stuck {
                older_than: Duration::from_secs(300),
            },
            scan: ScanOptions::default(),
            store: "DynamoDB",
        }
    }

    fn stuck(lock: Option<u64>, created: u64) -> StoredItem {
        StoredItem {
            pk: "p#k-1".into(),
            status: Status::Started,
            version: 2,
            owner: "o".into(),
            payload_hash: "h".into(),
            lock_expires_at_ms: lock,
            expires_at_s: NOW / 1000 + 3600,
            created_at_ms: Some(created),
            updated_at_ms: Some(created),
            attempts: Some(2),
            origin: Some("payments-0@7".into()),
            result: None,
            outbox: None,
            error: None,
            last_error: None,
            scope: None,
        }
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
        let mut q = query("p#");
        q.listing = Listing::Failed;
        let text = line(&stuck(Some(0), NOW), &q);
        assert!(text.starts_with("k-1\tversion=2\tfailed_at="), "{text}");
    }

    #[test]
    fn the_summary_reports_the_cost() {
        let cost = ListingCost {
            requests: 3,
            read: 250,
            capacity_units: 4.5,
        };
        let mut q = query("");
        let text = summary(2, &cost, &q);
        assert!(text.starts_with("2 stuck STARTED key(s)"), "{text}");
        assert!(text.contains("read 250 item(s) of the index of STARTED items in 3 page(s) over 16 shard(s); consumed 4.5 read capacity units"), "{text}");
        q.scan.full_scan = true;
        let text = summary(2, &cost, &q);
        assert!(text.contains("scanned 250 item(s) in 3 page(s) over 1 segment(s); consumed 4.5 read capacity units"), "{text}");
    }
}
