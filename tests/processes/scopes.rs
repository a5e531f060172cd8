//! Two functions on one idempotency table and one key prefix, each the real
//! `msk-handler` binary under its own function name, on DynamoDB (with the
//! shared Redis cache of COMPLETED keys), PostgreSQL and Redis: a record
//! whose key the other function completed is never answered as done
//! without the handler running. It is reported, its log line names both
//! functions and the fix, `ScopeConflict` counts it, and the balance shows
//! one payment. A third function that sets the first one's scope
//! (`IDEMPOTENCY_SCOPE`) shares its keys on purpose (duplicates); the
//! second one with a key prefix of its own does its own work.

use crate::support;

use std::time::Duration;

use exactly_once::redis::redis::AsyncCommands as _;
use serde_json::{Value, json};
use support::msk::{account, event, payment};
use support::runtime_api::{Answer, Function, RuntimeApi};

/// How long a function may take to answer one event.
const DEADLINE: Duration = Duration::from_secs(30);

#[derive(Clone, Copy)]
enum Kind {
    DynamoDb,
    Postgres,
    Redis,
}

/// The variables of a function named `name` on `kind` under `prefix`.
fn env(kind: Kind, name: &str, prefix: &str) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("AWS_LAMBDA_FUNCTION_NAME", name.to_owned()),
        ("IDEMPOTENCY_TABLE", support::env("IDEMPOTENCY_TABLE")),
        ("IDEMPOTENCY_KEY_PREFIX", prefix.to_owned()),
        ("LEDGER_TABLE", support::env("LEDGER_TABLE")),
    ];
    match kind {
        // Every COMPLETED key also goes to the cache every container reads.
        Kind::DynamoDb => env.extend([
            ("DUPLICATE_CACHE", "redis".to_owned()),
            ("REDIS_URL", support::env("REDIS_URL")),
        ]),
        Kind::Postgres => env.extend([
            ("IDEMPOTENCY_STORE", "postgres".to_owned()),
            ("DATABASE_URL", support::env("DATABASE_URL")),
        ]),
        Kind::Redis => env.extend([
            ("IDEMPOTENCY_STORE", "redis".to_owned()),
            ("REDIS_URL", support::env("REDIS_URL")),
        ]),
    }
    env
}

/// A fresh key prefix (no other test's keys).
fn prefix() -> String {
    support::store_config(Duration::from_secs(30)).key_prefix
}

/// The real binary with `env` and `extra`, handed `event`: its answer and
/// the function (its log lines and EMF documents).
async fn serve(
    env: &[(&str, String)],
    extra: &[(&str, &str)],
    event: &Value,
) -> (Answer, Function) {
    let api = RuntimeApi::start().await;
    let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    all.extend_from_slice(extra);
    let function = Function::start(&support::binary("msk-handler"), &api, &all);
    let (answer, _) = tokio::time::timeout(DEADLINE, api.invoke(event, DEADLINE))
        .await
        .unwrap_or_else(|_| panic!("no answer; the function wrote {:#?}", function.lines()));
    (answer, function)
}

/// The invocation's EMF document.
async fn metrics(function: &Function) -> Value {
    let documents = function.documents(1, DEADLINE).await;
    documents
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no EMF document in {:#?}", function.lines()))
}

/// `account`'s balance in the ledger of `kind`.
async fn balance(kind: Kind, account: &str) -> i64 {
    match kind {
        Kind::DynamoDb => support::msk::balance(account).await,
        Kind::Postgres => {
            let pool = support::postgres::pool().await;
            support::postgres::ledger_entry(&pool, account).await.0
        }
        Kind::Redis => {
            let store = support::redis::store(Duration::from_secs(30));
            support::redis::ledger_entry(&store, &support::env("LEDGER_TABLE"), account)
                .await
                .0
        }
    }
}

fn reported(offsets: &[i64]) -> Answer {
    let failures: Vec<Value> = offsets
        .iter()
        .map(|offset| json!({ "itemIdentifier": { "partition": "payments-0", "offset": offset } }))
        .collect();
    Answer::Response(json!({ "batchItemFailures": failures }))
}

fn none_reported() -> Answer {
    reported(&[])
}

/// The scenario on `kind`: payments-a, then payments-b on both paths,
/// then payments-green sharing payments-a's scope, then payments-b with a
/// key prefix of its own.
async fn two_functions_on_one_table(kind: Kind) {
    if let Kind::Postgres = kind {
        support::postgres::migrate(&support::postgres::pool().await).await;
    }
    let (prefix, account) = (prefix(), account());
    let event = event(vec![(
        "payments-0",
        vec![
            payment(1, "p-1", &account, 100),
            payment(2, "p-2", &account, 250),
        ],
    )]);
    let (answer, _) = serve(&env(kind, "payments-a", &prefix), &[], &event).await;
    assert_eq!(answer, none_reported());
    assert_eq!(balance(kind, &account).await, 350);
    if let Kind::DynamoDb = kind {
        // payments-a's keys are in the shared cache, with its scope.
        let store = support::redis::store(Duration::from_secs(30));
        let mut redis = store.connection();
        let entry = format!(
            "{}:completed:{prefix}p-1",
            support::env("IDEMPOTENCY_TABLE")
        );
        let scope: Option<String> = redis.hget(&entry, "scope").await.expect("HGET");
        assert_eq!(scope.as_deref(), Some("payments-a"), "{entry}");
    }

    // payments-b on the same keys, on the locking and the lock-free path:
    // reported, the handler never ran, named in the log and the metrics.
    for mode in ["transactional", "lock-free"] {
        let b = env(kind, "payments-b", &prefix);
        let (answer, function) = serve(&b, &[("LEDGER_MODE", mode)], &event).await;
        assert_eq!(answer, reported(&[1, 2]), "{mode}");
        assert_eq!(
            balance(kind, &account).await,
            350,
            "{mode}: B's handler ran"
        );
        let metrics = metrics(&function).await;
        assert_eq!(
            metrics["ScopeConflict"].as_f64(),
            Some(1.0),
            "{mode}: {metrics}"
        );
        let lines = function.lines();
        let line = lines
            .iter()
            .find(|line| line.contains("\"scope-conflict\""))
            .unwrap_or_else(|| panic!("{mode}: no scope-conflict line in {lines:#?}"));
        for needle in [
            "payments-a",
            "payments-b",
            "IDEMPOTENCY_KEY_PREFIX",
            "IDEMPOTENCY_SCOPE",
        ] {
            assert!(line.contains(needle), "{mode}: {needle} not in {line}");
        }
    }

    // payments-green, a new version of payments-a deployed beside it,
    // shares its keys on purpose: duplicates, nothing runs again.
    let green = env(kind, "payments-green", &prefix);
    let (answer, function) = serve(&green, &[("IDEMPOTENCY_SCOPE", "payments-a")], &event).await;
    assert_eq!(answer, none_reported());
    assert_eq!(metrics(&function).await["Duplicate"].as_f64(), Some(2.0));
    assert_eq!(balance(kind, &account).await, 350);

    // payments-b with a key prefix of its own does its own work.
    let (answer, _) = serve(&env(kind, "payments-b", &self::prefix()), &[], &event).await;
    assert_eq!(answer, none_reported());
    assert_eq!(balance(kind, &account).await, 700);
}

#[tokio::test]
async fn on_dynamodb_with_the_shared_cache_a_key_of_another_function_is_never_a_duplicate() {
    two_functions_on_one_table(Kind::DynamoDb).await;
}

#[tokio::test]
async fn on_postgresql_a_key_of_another_function_is_never_a_duplicate() {
    two_functions_on_one_table(Kind::Postgres).await;
}

#[tokio::test]
async fn on_redis_a_key_of_another_function_is_never_a_duplicate() {
    two_functions_on_one_table(Kind::Redis).await;
}
