//! The operator CLI `exactly-once-ops` against DynamoDB Local: the real
//! binary, run with `--table` and `--key-prefix` of a fresh test prefix.

use crate::support;

use exactly_once::store::Store;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use exactly_once::clock::now_ms;
use exactly_once::config::StoreConfig;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::store::ClaimOutcome;
use exactly_once::store::ClaimRequest;
use exactly_once::store::Lease;
use support::ops::Run;
use support::{number, raw_item, string};

const LONG_LOCK: Duration = Duration::from_secs(60);
const SHORT_LOCK: Duration = Duration::from_millis(300);
const HASH: &str = "hash-1";

/// The binary on DynamoDB Local.
fn ops(config: &StoreConfig, args: &[&str]) -> Run {
    support::ops::ops("dynamodb", config, args)
}

/// Two stores on one fresh prefix: one with a long lock, one with a short.
async fn stores() -> (DynamoDbStore, DynamoDbStore) {
    let client = support::client().await;
    let config = support::store_config(LONG_LOCK);
    let short = StoreConfig {
        lock_timeout: SHORT_LOCK,
        ..config.clone()
    };
    (
        DynamoDbStore::new(client.clone(), config),
        DynamoDbStore::new(client, short),
    )
}

fn request(key: &str) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        payload_hash: HASH,
        origin: Some("payments-0@15"),
        lease_cap_ms: None,
        owner: None,
    }
}

async fn acquire(store: &DynamoDbStore, key: &str) -> Lease {
    match store.claim(request(key)).await.expect("claim") {
        ClaimOutcome::Acquired(lease) => lease,
        other => panic!("expected to acquire {key}, got {other:?}"),
    }
}

async fn completed(store: &DynamoDbStore, key: &str) {
    let lease = acquire(store, key).await;
    store
        .complete(&lease, Some("applied"), vec![].into())
        .await
        .expect("complete");
}

async fn failed(store: &DynamoDbStore, key: &str) {
    let lease = acquire(store, key).await;
    store.fail(&lease, "not a payment").await.expect("fail");
}

async fn wait_for_lock_expiry() {
    tokio::time::sleep(SHORT_LOCK + Duration::from_millis(200)).await;
}

async fn raw(
    store: &DynamoDbStore,
    key: &str,
) -> std::collections::HashMap<String, AttributeValue> {
    let pk = format!("{}{key}", store.config().key_prefix);
    raw_item(&support::client().await, &store.config().table_name, &pk)
        .await
        .expect("the item exists")
}

#[tokio::test]
async fn inspect_a_completed_key() {
    let (store, _) = stores().await;
    completed(&store, "done").await;
    let run = ops(store.config(), &["inspect", "done"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.has("status           COMPLETED"), "{run:?}");
    assert!(run.has("version          1"), "{run:?}");
    assert!(run.has("result           \"applied\""), "{run:?}");
    assert!(run.has("origin           payments-0@15"), "{run:?}");
    assert!(run.has("lock_expires_at  - (no lock)"), "{run:?}");
    assert!(run.has("Z ("), "times in UTC RFC 3339: {run:?}");
    assert!(run.has("kept for"), "{run:?}");
    assert!(
        run.has("with the same payload: skipped as a duplicate"),
        "{run:?}"
    );
    assert!(
        run.has("with another payload: rejected (payload mismatch)"),
        "{run:?}"
    );
}

#[tokio::test]
async fn inspect_a_failed_key() {
    let (store, _) = stores().await;
    failed(&store, "poison").await;
    let run = ops(store.config(), &["inspect", "poison"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.has("status           FAILED"), "{run:?}");
    assert!(run.has("error            \"not a payment\""), "{run:?}");
    assert!(run.has("refused without running the work"), "{run:?}");
    assert!(
        run.has("exactly-once-ops retry-failed \"poison\" --version 1"),
        "{run:?}"
    );
}

#[tokio::test]
async fn inspect_a_key_with_a_live_lock() {
    let (store, _) = stores().await;
    let lease = acquire(&store, "busy").await;
    let run = ops(store.config(), &["inspect", "busy"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.has("status           STARTED"), "{run:?}");
    assert!(run.has("remaining"), "{run:?}");
    assert!(
        run.has(&format!("owner            {}", lease.owner)),
        "{run:?}"
    );
    assert!(run.has("reported as in progress until "), "{run:?}");
}

#[tokio::test]
async fn inspect_a_key_whose_lock_expired() {
    let (_, short) = stores().await;
    acquire(&short, "crashed").await;
    wait_for_lock_expiry().await;
    let run = ops(short.config(), &["inspect", "crashed"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.has("ago"), "{run:?}");
    assert!(run.has("lock expired: taken over as version 2"), "{run:?}");
}

#[tokio::test]
async fn inspect_an_absent_key() {
    let (store, _) = stores().await;
    let run = ops(store.config(), &["inspect", "nobody"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.has("key \"nobody\" is absent"), "{run:?}");
    assert!(run.has("claimed fresh as version 1"), "{run:?}");
}

#[tokio::test]
async fn inspect_an_item_past_its_ttl_says_it_counts_as_absent() {
    let (store, _) = stores().await;
    let pk = format!("{}old", store.config().key_prefix);
    let n = |v: u64| AttributeValue::N(v.to_string());
    let s = |v: &str| AttributeValue::S(v.to_owned());
    support::client()
        .await
        .put_item()
        .table_name(&store.config().table_name)
        .item("pk", s(&pk))
        .item("status", s("COMPLETED"))
        .item("version", n(2))
        .item("owner", s("o"))
        .item("payload_hash", s(HASH))
        .item("expires_at", n(now_ms() / 1000 - 100))
        .send()
        .await
        .expect("put an expired item");
    let run = ops(store.config(), &["inspect", "old"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.has("status           COMPLETED"), "{run:?}");
    assert!(run.has("the item counts as absent"), "{run:?}");
    assert!(run.has("claimed fresh as version 1"), "{run:?}");
}

/// The keys a `stuck` run listed (first field of every line but the summary).
fn listed(run: &Run) -> BTreeSet<String> {
    listed_as(run, " stuck STARTED key(s)")
}

/// The keys a listing run printed, its summary holding `summary`.
fn listed_as(run: &Run, summary_holds: &str) -> BTreeSet<String> {
    let lines: Vec<&str> = run.stdout.lines().collect();
    let (summary, keys) = lines.split_last().expect("a summary line");
    assert!(summary.contains(summary_holds), "{run:?}");
    keys.iter()
        .map(|line| line.split('\t').next().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn stuck_lists_exactly_the_stale_started_keys() {
    let (store, short) = stores().await;
    acquire(&short, "stale-1").await;
    acquire(&short, "stale-2").await;
    acquire(&store, "live").await;
    completed(&store, "done").await;
    failed(&store, "poison").await;
    wait_for_lock_expiry().await;
    let set = |keys: &[&str]| {
        keys.iter()
            .map(std::string::ToString::to_string)
            .collect::<BTreeSet<_>>()
    };

    let run = ops(store.config(), &["stuck", "--older-than", "1h"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(listed(&run), set(&["stale-1", "stale-2"]), "{run:?}");
    assert!(run.has("version=1\tlock=expired "), "{run:?}");
    assert!(run.has("reason=lock expired"), "{run:?}");
    assert!(
        run.stdout.lines().last().unwrap().starts_with("2 stuck"),
        "{run:?}"
    );
    assert!(run.has("read capacity units"), "{run:?}");
    assert!(run.has("of the index of STARTED items"), "{run:?}");

    // Old enough: the live key is listed too, never the finished ones; by
    // a Scan of the whole table, as the same listing.
    let run = ops(
        store.config(),
        &[
            "stuck",
            "--older-than",
            "100ms",
            "--scan",
            "--segments",
            "3",
            "--page-size",
            "50",
        ],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        listed(&run),
        set(&["live", "stale-1", "stale-2"]),
        "{run:?}"
    );
    assert!(run.has("lock=live until "), "{run:?}");
    assert!(run.has("reason=older than 100ms"), "{run:?}");
    assert!(run.has("over 3 segment(s)"), "{run:?}");
}

#[tokio::test]
async fn failed_lists_exactly_the_failed_keys_with_their_error() {
    let (store, _) = stores().await;
    acquire(&store, "live").await;
    completed(&store, "done").await;
    failed(&store, "poison-1").await;
    failed(&store, "poison-2").await;
    let run = ops(store.config(), &["failed", "--segments", "2"]);
    assert_eq!(run.code, 0, "{run:?}");
    let expected: BTreeSet<String> = ["poison-1", "poison-2"].map(String::from).into();
    assert_eq!(listed_as(&run, "2 FAILED key(s)"), expected, "{run:?}");
    assert!(run.has("\terror=not a payment"), "{run:?}");
}

#[tokio::test]
async fn release_with_the_right_version_makes_the_key_claimable() {
    let (store, _) = stores().await;
    acquire(&store, "held").await;
    assert!(matches!(
        store.claim(request("held")).await.expect("claim"),
        ClaimOutcome::InProgress(_)
    ));

    let run = ops(store.config(), &["release", "held", "--version", "1"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.has("takes it over as version 2"), "{run:?}");
    assert_eq!(number(&raw(&store, "held").await, "lock_expires_at"), 0);
    match store.claim(request("held")).await.expect("claim") {
        ClaimOutcome::TakenOver(lease) => assert_eq!(lease.version, 2),
        other => panic!("expected a takeover, got {other:?}"),
    }
}

#[tokio::test]
async fn release_with_a_wrong_version_or_state_writes_nothing() {
    let (store, _) = stores().await;
    acquire(&store, "held").await;
    let before = raw(&store, "held").await;
    let run = ops(store.config(), &["release", "held", "--version", "2"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("refused"), "{run:?}");
    assert!(
        run.stderr.contains("found: STARTED at version 1"),
        "{run:?}"
    );
    assert_eq!(raw(&store, "held").await, before, "unchanged");

    completed(&store, "done").await;
    let before = raw(&store, "done").await;
    let run = ops(store.config(), &["release", "done", "--version", "1"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("found: COMPLETED at version 1"),
        "{run:?}"
    );
    assert_eq!(raw(&store, "done").await, before, "unchanged");

    let run = ops(store.config(), &["release", "nobody", "--version", "1"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("found: absent"), "{run:?}");
    assert!(
        raw_item(
            &support::client().await,
            &store.config().table_name,
            &format!("{}nobody", store.config().key_prefix)
        )
        .await
        .is_none(),
        "no item created"
    );
}

#[tokio::test]
async fn retry_failed_lets_the_next_claim_take_the_key_over() {
    let (store, _) = stores().await;
    failed(&store, "poison").await;
    assert!(matches!(
        store.claim(request("poison")).await.expect("claim"),
        ClaimOutcome::PreviouslyFailed(_)
    ));

    let run = ops(store.config(), &["retry-failed", "poison"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.has("takes it over as version 2"), "{run:?}");
    let item = raw(&store, "poison").await;
    assert_eq!(string(&item, "status"), "STARTED");
    assert_eq!(number(&item, "lock_expires_at"), 0);
    assert_eq!(string(&item, "last_error"), "not a payment");
    assert!(!item.contains_key("error"), "error moved to last_error");

    let inspect = ops(store.config(), &["inspect", "poison"]);
    assert!(
        inspect.has("last_error       \"not a payment\""),
        "{inspect:?}"
    );
    assert!(
        inspect.has("lock released: taken over as version 2"),
        "{inspect:?}"
    );

    match store.claim(request("poison")).await.expect("claim") {
        ClaimOutcome::TakenOver(lease) => {
            assert_eq!(lease.version, 2);
            store
                .complete(&lease, None, vec![].into())
                .await
                .expect("complete");
        }
        other => panic!("expected a takeover, got {other:?}"),
    }
}

#[tokio::test]
async fn retry_failed_refuses_a_key_that_is_not_failed() {
    let (store, _) = stores().await;
    completed(&store, "done").await;
    let before = raw(&store, "done").await;
    let run = ops(store.config(), &["retry-failed", "done"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("is COMPLETED at version 1, not FAILED"),
        "{run:?}"
    );
    let run = ops(store.config(), &["retry-failed", "done", "--version", "1"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("found: COMPLETED at version 1"),
        "{run:?}"
    );
    assert_eq!(raw(&store, "done").await, before, "unchanged");

    failed(&store, "poison").await;
    let before = raw(&store, "poison").await;
    let run = ops(
        store.config(),
        &["retry-failed", "poison", "--version", "7"],
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("found: FAILED at version 1"), "{run:?}");
    assert_eq!(raw(&store, "poison").await, before, "unchanged");

    let run = ops(store.config(), &["retry-failed", "nobody"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("is absent"), "{run:?}");
}

#[test]
fn usage_errors_exit_with_2() {
    let config = StoreConfig::new("any-table");
    let run = ops(&config, &["stuck", "--older-than", "soon"]);
    assert_eq!(run.code, 2, "{run:?}");
    let help = Command::new(support::binary("exactly-once-ops"))
        .args(["stuck", "--help"])
        .output()
        .expect("run --help");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("reads EVERY item"), "{help}");
}

/// A handler whose payment API is down: the key is released (STARTED, its
/// lock ended) and the record reported, for a later delivery.
struct ApiDown;

impl exactly_once::engine::RecordHandler<aws_sdk_dynamodb::types::TransactWriteItem> for ApiDown {
    type Record = exactly_once::lambda::KafkaRecord;

    fn commit_path(&self) -> exactly_once::engine::CommitPath {
        exactly_once::engine::CommitPath::Locking
    }

    async fn handle(
        &self,
        _: &exactly_once::engine::FencingToken,
        _: &exactly_once::lambda::KafkaRecord,
    ) -> Result<
        exactly_once::engine::Completion<aws_sdk_dynamodb::types::TransactWriteItem>,
        exactly_once::engine::HandlerError,
    > {
        Err(exactly_once::engine::HandlerError::Retryable(
            "payment API unavailable".into(),
        ))
    }
}

#[tokio::test]
async fn a_started_key_names_the_invocation_that_holds_it() {
    use support::msk::{event, header_keys, payment};
    let (store, _) = stores().await;
    let function = support::msk::function_with(store.clone(), ApiDown, header_keys());
    let mut context = lambda_runtime::Context::default();
    context.request_id = "8f5c2a4e-7d1b-4c3e-9a6f-0b1d2e3f4a5b".into();
    context.env_config = std::sync::Arc::new(lambda_runtime::Config {
        function_name: "payments".into(),
        version: "7".into(),
        log_stream: "2026/11/23/[7]0123abcdef".into(),
        ..lambda_runtime::Config::default()
    });
    let batch = event(vec![("payments-0", vec![payment(0, "p-1", "acc", 1)])]);
    let response = function
        .handle(lambda_runtime::LambdaEvent::new(batch, context))
        .await
        .expect("handled");
    assert_eq!(response.batch_item_failures.len(), 1);

    let item = store.get("p-1").await.expect("get").expect("the item");
    let holder = "8f5c2a4e-7d1b-4c3e-9a6f-0b1d2e3f4a5b/7/2026/11/23/[7]0123abcdef/";
    assert!(item.owner.starts_with(holder), "{}", item.owner);
    let run = ops(store.config(), &["inspect", "p-1"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.has(
            "held by          invocation 8f5c2a4e-7d1b-4c3e-9a6f-0b1d2e3f4a5b (function version 7, \
             log stream 2026/11/23/[7]0123abcdef); its logs (CloudWatch Logs Insights): filter \
             @logStream = \"2026/11/23/[7]0123abcdef\" and @message like \
             \"8f5c2a4e-7d1b-4c3e-9a6f-0b1d2e3f4a5b\""
        ),
        "{run:?}"
    );
}
