//! Start-up against a store whose connections are reset or held back. The
//! shipped function (the real `msk-handler` under a Lambda Runtime API
//! stand-in) starts through a proxy that resets half the new connections
//! and holds the others back up to 1.5 s:
//! - on PostgreSQL (the one store checked at start: the schemas of the
//!   idempotency and ledger tables), three functions at once each start
//!   within the start-up budget, never hang, never name a healthy table's
//!   schema wrong ("lacks a column", "run `exactly-once-ops migrate`"), and
//!   apply their payments once; with the database unreachable for the whole
//!   start the function starts all the same and says "store unavailable";
//! - on DynamoDB and Redis, which connect lazily (no check at start), the
//!   function starts at once and applies its payments once.
//!
//! Before the check bounded each round trip and told a lost connection from
//! a missing column, such functions wrote nothing for 150 s, or exited
//! sending an operator to migrate a healthy table.

use crate::support;

use std::time::{Duration, Instant};

use exactly_once::postgres::START_CHECK_BUDGET;
use serde_json::Value;
use support::msk::{event, payment};
use support::proxy::{Chaos, Proxy};
use support::runtime_api::{Function, RuntimeApi};
use support::shipped::{self, Store, reported};

/// The invocation's deadline.
const DEADLINE: Duration = Duration::from_secs(30);

/// Half the new connections reset, the others held back up to 1.5 s, each
/// request up to 0.3 s late.
fn flaky() -> Chaos {
    Chaos {
        reset: 0.5,
        connect_delay_ms: Some((0, 1_500)),
        delay_ms: Some((0, 300)),
    }
}

/// 10 payments of 1 cent to `account`.
fn payments(account: &str) -> Value {
    let records = (0..10)
        .map(|i| payment(i, &format!("{account}-{i}"), account, 1))
        .collect();
    event(vec![("payments-0", records)])
}

/// Lines that would send an operator to repair a table.
fn wrong_schema(function: &Function) -> Vec<String> {
    function
        .lines()
        .into_iter()
        .filter(|line| line.contains("lacks a column") || line.contains("exactly-once-ops migrate"))
        .collect()
}

/// The shipped function on `store` through `proxy` (lock-free) started:
/// it must poll for events within the start-up budget and a margin, or it
/// hangs; the time it took.
async fn start_through(store: Store, proxy: &Proxy) -> (RuntimeApi, Function, Duration) {
    let env = shipped::env(store, "lock-free", Duration::from_secs(30), Some(proxy)).await;
    let started = Instant::now();
    let (api, function) =
        shipped::start(&env, 1, START_CHECK_BUDGET + Duration::from_secs(10)).await;
    (api, function, started.elapsed())
}

/// Hands `event` until nothing is reported (each answer within its
/// deadline); the number of invocations it took.
async fn invoke_until_done(api: &RuntimeApi, function: &Function, event: &Value) -> usize {
    for invocation in 1..=10 {
        let answer = tokio::time::timeout(
            DEADLINE + Duration::from_secs(5),
            api.invoke(event, DEADLINE),
        )
        .await
        .map(|(answer, _)| answer)
        .unwrap_or_else(|_| panic!("no answer within its deadline: {:#?}", function.lines()));
        if reported(&answer) == Ok(vec![]) {
            return invocation;
        }
    }
    panic!(
        "still reporting records after 10 invocations: {:#?}",
        function.lines()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_functions_on_postgres_start_through_reset_connections_and_apply_once() {
    let proxy = Proxy::start_with(Store::Postgres.address(), flaky()).await;
    let starts = (0..3).map(|_| start_through(Store::Postgres, &proxy));
    let functions = futures_util::future::join_all(starts).await;
    for (api, function, took) in &functions {
        let account = format!("acc-{}", uuid::Uuid::new_v4());
        invoke_until_done(api, function, &payments(&account)).await;
        assert_eq!(shipped::balance(Store::Postgres, &account).await, 10);
        assert_eq!(
            wrong_schema(function),
            Vec::<String>::new(),
            "started in {took:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_starts_with_postgres_unreachable_and_says_so() {
    let proxy = Proxy::start(Store::Postgres.address()).await;
    proxy.cut();
    let (api, function, took) = start_through(Store::Postgres, &proxy).await;
    assert!(
        took >= START_CHECK_BUDGET / 2,
        "asked the database again within its budget before starting: {took:?}"
    );
    assert!(
        function
            .lines()
            .iter()
            .any(|line| line.contains("store unavailable at start")),
        "{:#?}",
        function.lines()
    );
    assert_eq!(wrong_schema(&function), Vec::<String>::new());
    // The database back: the payments apply.
    proxy.restore();
    let account = format!("acc-{}", uuid::Uuid::new_v4());
    invoke_until_done(&api, &function, &payments(&account)).await;
    assert_eq!(shipped::balance(Store::Postgres, &account).await, 10);
}

async fn starts_at_once_and_applies_once(store: Store) {
    let proxy = Proxy::start_with(store.address(), flaky()).await;
    let (api, function, _) = start_through(store, &proxy).await;
    let account = format!("acc-{}", uuid::Uuid::new_v4());
    invoke_until_done(&api, &function, &payments(&account)).await;
    assert_eq!(shipped::balance(store, &account).await, 10);
    assert!(
        !function
            .lines()
            .iter()
            .any(|line| line.contains("StartError")),
        "{:#?}",
        function.lines()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_on_dynamodb_starts_through_reset_connections_and_applies_once() {
    starts_at_once_and_applies_once(Store::DynamoDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_on_redis_starts_through_reset_connections_and_applies_once() {
    starts_at_once_and_applies_once(Store::Redis).await;
}
