//! `inspect`: an item in readable form and what the next delivery of its key
//! will do. Pure functions of the item and the time, so they are unit-tested.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;

use exactly_once::clock::ms_to_s;
use exactly_once::store::{Status, StoredItem, attr};

/// The attributes [`StoredItem`] holds; [`others`] returns the rest.
/// Attributes shown by name (or, `started_shard` and `outbox_shard`, kept
/// for the sparse indexes only), not among the others.
const KNOWN: [&str; 17] = [
    attr::STARTED_SHARD,
    "outbox_shard",
    attr::OUTBOX,
    attr::PK,
    attr::STATUS,
    attr::VERSION,
    attr::OWNER,
    attr::PAYLOAD_HASH,
    attr::LOCK_EXPIRES_AT,
    attr::EXPIRES_AT,
    attr::CREATED_AT,
    attr::UPDATED_AT,
    attr::ATTEMPTS,
    attr::ORIGIN,
    attr::RESULT,
    attr::ERROR,
    attr::SCOPE,
];

/// The attributes of `raw` that [`StoredItem`] does not hold (e.g.
/// `last_error` of a retried key), as text.
pub fn others(raw: &HashMap<String, AttributeValue>) -> BTreeMap<String, String> {
    raw.iter()
        .filter(|(name, _)| !KNOWN.contains(&name.as_str()))
        .map(|(name, value)| (name.clone(), value_text(value)))
        .collect()
}

/// The readable form of a stored item at `now_ms`, ending with what the
/// next delivery of the key will do.
pub fn render(
    key: &str,
    item: &StoredItem,
    others: &BTreeMap<String, String>,
    now_ms: u64,
) -> String {
    let mut out = String::new();
    let mut row = |name: &str, value: &str| {
        let _ = writeln!(out, "{name:<16} {value}");
    };
    row("key", &format!("{key:?}"));
    row(attr::PK, &format!("{:?}", item.pk));
    row(attr::STATUS, item.status.as_str());
    row(attr::VERSION, &item.version.to_string());
    row(attr::OWNER, &item.owner);
    if let Some(invocation) = invocation(&item.owner) {
        row("held by", &invocation);
    }
    row(attr::SCOPE, &scope_text(item.scope.as_deref()));
    row(attr::PAYLOAD_HASH, &item.payload_hash);
    row(attr::LOCK_EXPIRES_AT, &lock_text(item, now_ms));
    row(attr::EXPIRES_AT, &expiry_text(item.expires_at_s, now_ms));
    row(attr::CREATED_AT, &optional_time(item.created_at_ms, now_ms));
    row(attr::UPDATED_AT, &optional_time(item.updated_at_ms, now_ms));
    row(
        attr::ATTEMPTS,
        &item.attempts.map_or("-".into(), |a| a.to_string()),
    );
    row(attr::ORIGIN, item.origin.as_deref().unwrap_or("-"));
    row(attr::RESULT, &optional_text(item.result.as_deref()));
    if let Some(outbox) = &item.outbox {
        row(attr::OUTBOX, &outbox_text(outbox));
    }
    row(attr::ERROR, &optional_text(item.error.as_deref()));
    for (name, value) in others {
        row(name, value);
    }
    for line in next_delivery(key, item, now_ms) {
        row("next delivery", &line);
    }
    out
}

/// An outbox as the messages it holds: how many, and where to (never their
/// bodies, which may hold payload content).
fn outbox_text(outbox: &str) -> String {
    match exactly_once::outbox::decode(outbox) {
        Ok(messages) => {
            let mut destinations: Vec<&str> =
                messages.iter().map(|m| m.destination.as_str()).collect();
            destinations.dedup();
            format!(
                "{} message(s) not yet sent, to {}: the next delivery of the key or the \
                 scheduled sweep sends them (exactly-once-ops unsent --send)",
                messages.len(),
                destinations.join(", ")
            )
        }
        Err(err) => format!("unreadable ({err})"),
    }
}

/// The invocation an owner token names (`<request id>/<function
/// version>/<log stream>/<uuid>`, see [`crate::store::ClaimRequest::holder`]),
/// with the CloudWatch Logs Insights filter that finds its log lines.
fn invocation(owner: &str) -> Option<String> {
    let (request_id, rest) = owner.split_once('/')?;
    let (version, rest) = rest.split_once('/')?;
    let (log_stream, _unique) = rest.rsplit_once('/')?;
    Some(format!(
        "invocation {request_id} (function version {version}, log stream {log_stream}); \
         its logs (CloudWatch Logs Insights): filter @logStream = \"{log_stream}\" \
         and @message like \"{request_id}\""
    ))
}

/// The text for a key that has no item.
pub fn render_absent(key: &str, pk: &str) -> String {
    format!(
        "key {key:?} is absent (no item under pk {pk:?})\n\
         {:<16} claimed fresh as version 1 and the work runs\n",
        "next delivery"
    )
}

/// The text for an item the store cannot read (written by someone else).
pub fn render_malformed(key: &str, raw: &HashMap<String, AttributeValue>, reason: &str) -> String {
    let mut out = format!("key {key:?}: MALFORMED item ({reason})\n");
    let sorted: BTreeMap<_, _> = raw.iter().collect();
    for (name, value) in sorted {
        let _ = writeln!(out, "{name:<16} {}", value_text(value));
    }
    let _ = writeln!(
        out,
        "{:<16} fails with a malformed-item error until an operator repairs or deletes the item",
        "next delivery"
    );
    out
}

/// What the next delivery of the key does, mirroring the claim's decisions
/// (`Store::claim`): TTL first, then payload, then status.
pub fn next_delivery(key: &str, item: &StoredItem, now_ms: u64) -> Vec<String> {
    if item.is_expired(now_ms) {
        return vec![
            "the item is past its expires_at, so it counts as absent: claimed fresh as \
             version 1 (the old item is replaced) and the work runs"
                .into(),
        ];
    }
    let mismatch = "with another payload: rejected (payload mismatch), the work never runs";
    match item.status {
        Status::Completed => vec![
            "with the same payload: skipped as a duplicate (already completed)".into(),
            mismatch.into(),
        ],
        Status::Failed => vec![
            format!(
                "refused without running the work (failed permanently) until {}; to run it \
                 again: exactly-once-ops retry-failed {key:?} --version {}",
                time_s(item.expires_at_s),
                item.version
            ),
            mismatch.into(),
        ],
        Status::Started if !item.lock_expired(now_ms) => vec![
            format!(
                "reported as in progress until {} (retried later, the work does not run twice)",
                time_ms(item.lock_expires_at_ms.unwrap_or(0))
            ),
            mismatch.into(),
        ],
        Status::Started => {
            let why = match item.lock_expires_at_ms {
                Some(0) | None => "lock released",
                Some(_) => "lock expired",
            };
            vec![
                format!(
                    "{why}: taken over as version {} (new owner; the old one is fenced out) \
                     and the work runs again",
                    item.version + 1
                ),
                mismatch.into(),
            ]
        }
    }
}

/// Whose item it is: a function's (its scope), or any function's.
fn scope_text(scope: Option<&str>) -> String {
    match scope {
        Some(scope) => format!(
            "{scope:?}: the function whose item it is; another function (another \
             IDEMPOTENCY_SCOPE) that finds it refuses its record as scope-conflict"
        ),
        None => "- (written before scopes: whichever function finds it takes it as its own)".into(),
    }
}

fn lock_text(item: &StoredItem, now_ms: u64) -> String {
    match (item.status, item.lock_expires_at_ms) {
        (_, None) => "- (no lock)".into(),
        (_, Some(0)) => "0: released, the key is claimable at once".into(),
        (Status::Started, Some(at)) if at >= now_ms => format!(
            "{} ({at}): live, {} remaining",
            time_ms(at),
            span_ms(at - now_ms)
        ),
        (_, Some(at)) if at >= now_ms => format!("{} ({at})", time_ms(at)),
        (_, Some(at)) => format!(
            "{} ({at}): expired {} ago",
            time_ms(at),
            span_ms(now_ms - at)
        ),
    }
}

fn expiry_text(expires_at_s: u64, now_ms: u64) -> String {
    let now_s = ms_to_s(now_ms);
    if expires_at_s < now_s {
        format!(
            "{} ({expires_at_s}): PAST, {} ago: the item counts as absent (DynamoDB \
             deletes expired items lazily)",
            time_s(expires_at_s),
            span_s(now_s - expires_at_s)
        )
    } else {
        format!(
            "{} ({expires_at_s}): kept for {} more",
            time_s(expires_at_s),
            span_s(expires_at_s - now_s)
        )
    }
}

fn optional_time(at_ms: Option<u64>, now_ms: u64) -> String {
    match at_ms {
        None => "-".into(),
        Some(at) if at <= now_ms => {
            format!(
                "{} ({at}), {} ago",
                time_ms(at),
                span_s((now_ms - at) / 1000)
            )
        }
        Some(at) => format!("{} ({at})", time_ms(at)),
    }
}

fn optional_text(text: Option<&str>) -> String {
    text.map_or("-".into(), |t| format!("{t:?}"))
}

/// An epoch-milliseconds time in UTC, RFC 3339.
pub fn time_ms(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// An epoch-seconds time in UTC, RFC 3339.
pub fn time_s(s: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(s)).to_string()
}

/// A span in milliseconds, e.g. `25s 120ms`.
pub fn span_ms(ms: u64) -> String {
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

/// A span in seconds, e.g. `7days 23h 59m`.
pub fn span_s(s: u64) -> String {
    if s == 0 {
        return "0s".into();
    }
    humantime::format_duration(Duration::from_secs(s)).to_string()
}

/// One attribute value as text: strings quoted, numbers bare.
fn value_text(value: &AttributeValue) -> String {
    match value {
        AttributeValue::S(s) => format!("{s:?}"),
        AttributeValue::N(n) => n.clone(),
        AttributeValue::Bool(b) => b.to_string(),
        AttributeValue::Null(_) => "NULL".into(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2025-01-01T00:00:00Z
    const NOW: u64 = 1_735_689_600_000;

    fn item(status: Status) -> StoredItem {
        StoredItem {
            pk: "p#k-1".into(),
            status,
            version: 3,
            owner: "owner-1".into(),
            payload_hash: "ab12".into(),
            lock_expires_at_ms: None,
            expires_at_s: NOW / 1000 + 8 * 24 * 3600,
            created_at_ms: Some(NOW - 60_000),
            updated_at_ms: Some(NOW - 1_000),
            attempts: Some(3),
            origin: Some("payments-0@15".into()),
            result: None,
            outbox: None,
            error: None,
            last_error: None,
            scope: None,
        }
    }

    fn text(item: &StoredItem) -> String {
        render("k-1", item, &BTreeMap::new(), NOW)
    }

    #[test]
    fn an_item_names_the_function_whose_it_is() {
        let scoped = StoredItem {
            scope: Some("payments-a".into()),
            ..item(Status::Completed)
        };
        let text = text(&scoped);
        assert!(
            text.contains("scope            \"payments-a\": the function whose item it is"),
            "{text}"
        );
        let text = super::tests::text(&item(Status::Completed));
        assert!(
            text.contains("scope            - (written before scopes"),
            "{text}"
        );
    }

    #[test]
    fn a_completed_key_is_a_duplicate_for_the_same_payload_only() {
        let item = StoredItem {
            result: Some("applied".into()),
            ..item(Status::Completed)
        };
        let text = text(&item);
        assert!(text.contains("status           COMPLETED"), "{text}");
        assert!(text.contains("result           \"applied\""), "{text}");
        assert!(
            text.contains("same payload: skipped as a duplicate"),
            "{text}"
        );
        assert!(
            text.contains("another payload: rejected (payload mismatch)"),
            "{text}"
        );
        assert!(text.contains("lock_expires_at  - (no lock)"), "{text}");
        assert!(
            text.contains(
                "expires_at       2025-01-09T00:00:00Z (1736380800): kept for 8days more"
            ),
            "{text}"
        );
        assert!(
            text.contains("created_at       2024-12-31T23:59:00.000Z (1735689540000), 1m ago"),
            "{text}"
        );
    }

    #[test]
    fn a_failed_key_is_refused_and_can_be_retried() {
        let item = StoredItem {
            error: Some("not a payment".into()),
            ..item(Status::Failed)
        };
        let text = text(&item);
        assert!(
            text.contains("error            \"not a payment\""),
            "{text}"
        );
        assert!(text.contains("refused without running the work"), "{text}");
        assert!(text.contains("retry-failed \"k-1\" --version 3"), "{text}");
    }

    #[test]
    fn a_live_lock_is_in_progress_until_its_end() {
        let item = StoredItem {
            lock_expires_at_ms: Some(NOW + 25_120),
            ..item(Status::Started)
        };
        let text = text(&item);
        assert!(text.contains("live, 25s 120ms remaining"), "{text}");
        assert!(
            text.contains("reported as in progress until 2025-01-01T00:00:25.120Z"),
            "{text}"
        );
    }

    #[test]
    fn an_expired_or_released_lock_is_taken_over_as_the_next_version() {
        let expired = StoredItem {
            lock_expires_at_ms: Some(NOW - 2_000),
            ..item(Status::Started)
        };
        let text = text(&expired);
        assert!(text.contains("expired 2s ago"), "{text}");
        assert!(
            text.contains("lock expired: taken over as version 4"),
            "{text}"
        );
        let released = StoredItem {
            lock_expires_at_ms: Some(0),
            ..item(Status::Started)
        };
        let text = render("k-1", &released, &BTreeMap::new(), NOW);
        assert!(text.contains("0: released"), "{text}");
        assert!(
            text.contains("lock released: taken over as version 4"),
            "{text}"
        );
    }

    #[test]
    fn an_item_past_its_ttl_counts_as_absent() {
        let item = StoredItem {
            expires_at_s: NOW / 1000 - 10,
            ..item(Status::Completed)
        };
        let text = text(&item);
        assert!(
            text.contains("PAST, 10s ago: the item counts as absent"),
            "{text}"
        );
        assert!(text.contains("claimed fresh as version 1"), "{text}");
        assert!(!text.contains("duplicate"), "{text}");
    }

    #[test]
    fn other_attributes_are_shown_too() {
        let raw = HashMap::from([
            ("pk".to_owned(), AttributeValue::S("p#k-1".into())),
            ("last_error".to_owned(), AttributeValue::S("boom".into())),
            ("x".to_owned(), AttributeValue::N("7".into())),
        ]);
        let others = others(&raw);
        let text = render("k-1", &item(Status::Started), &others, NOW);
        assert!(text.contains("last_error       \"boom\""), "{text}");
        assert!(text.contains("x                7"), "{text}");
    }

    #[test]
    fn an_owner_token_leads_to_its_invocation() {
        let owner = "8f5c2a4e-7d1b-4c3e-9a6f-0b1d2e3f4a5b/7/2026/11/23/[7]0123abcd/d1e2f3a4";
        assert_eq!(
            invocation(owner).as_deref(),
            Some(
                "invocation 8f5c2a4e-7d1b-4c3e-9a6f-0b1d2e3f4a5b (function version 7, log stream \
                 2026/11/23/[7]0123abcd); its logs (CloudWatch Logs Insights): filter \
                 @logStream = \"2026/11/23/[7]0123abcd\" and @message like \
                 \"8f5c2a4e-7d1b-4c3e-9a6f-0b1d2e3f4a5b\""
            )
        );
        assert_eq!(invocation("d1e2f3a4-5b6c-7d8e-9f00-112233445566"), None);
    }

    #[test]
    fn an_absent_key_is_claimed_fresh() {
        let text = render_absent("k-1", "p#k-1");
        assert!(text.contains("is absent"), "{text}");
        assert!(text.contains("claimed fresh as version 1"), "{text}");
    }
}
