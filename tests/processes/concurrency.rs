//! Many invocations in one container (Lambda Managed Instances): the real
//! `msk-handler` started with `AWS_LAMBDA_MAX_CONCURRENCY=4` against a
//! Lambda Runtime API stand-in, on each store's real server. It serves
//! invocations at once; every payment applies once, also when the same
//! batch is handed to several of them at once (a rebalance gives a
//! partition to two pollers); and each invocation's metrics count its own
//! store requests, never another's.

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::msk::{event, payment};
use support::runtime_api::{Answer, Function, RuntimeApi, Span};
use support::shipped::{self, Store, balance, metric};

/// How long the function may take to answer one event.
const DEADLINE: Duration = Duration::from_secs(60);
/// The workers the runtime starts.
const CONCURRENCY: usize = 4;

/// The function's variables on `store`, in `mode`, under a fresh prefix,
/// its runtime serving `CONCURRENCY` invocations at once.
async fn env(store: Store, mode: &str) -> Vec<(&'static str, String)> {
    let mut env = shipped::env(store, mode, Duration::from_secs(30), None).await;
    env.push(("AWS_LAMBDA_MAX_CONCURRENCY", CONCURRENCY.to_string()));
    env
}

/// A batch of 2 partitions x 10 payments of 1 cent to `account` (keys
/// `<account>-<n>`).
fn batch(account: &str) -> Value {
    let partition = |p: i64| {
        (0..10)
            .map(|i| payment(i, &format!("{account}-{p}-{i}"), account, 1))
            .collect()
    };
    event(vec![
        ("payments-0", partition(0)),
        ("payments-1", partition(1)),
    ])
}

/// The function started on `env`, its workers polling.
async fn start(env: &[(&str, String)]) -> (RuntimeApi, Function) {
    shipped::start(env, CONCURRENCY, DEADLINE).await
}

/// Hands every event at once; their answers and spans, in order.
async fn invoke_all(api: &RuntimeApi, events: &[Value]) -> Vec<(Answer, Span)> {
    let answers = futures_util::future::join_all(events.iter().map(|e| api.invoke(e, DEADLINE)));
    tokio::time::timeout(DEADLINE, answers)
        .await
        .expect("every event answered")
}

fn nothing_reported(answers: &[(Answer, Span)]) {
    for (answer, _) in answers {
        assert_eq!(
            *answer,
            Answer::Response(serde_json::json!({ "batchItemFailures": [] }))
        );
    }
}

/// Four different batches handed at once are in flight at once (every one
/// handed before the first is answered), and each payment applies once.
async fn four_batches_run_at_once(store: Store) {
    let (api, function) = start(&env(store, "lock-free").await).await;
    let accounts: Vec<String> = (0..CONCURRENCY)
        .map(|i| format!("acc-{}-{i}", uuid::Uuid::new_v4()))
        .collect();
    let events: Vec<Value> = accounts.iter().map(|account| batch(account)).collect();
    let answers = invoke_all(&api, &events).await;
    nothing_reported(&answers);
    let last_handed = answers.iter().map(|(_, span)| span.handed).max();
    let first_answered = answers.iter().map(|(_, span)| span.answered).min();
    assert!(
        last_handed < first_answered,
        "the batches ran one after another: {:?}",
        answers.iter().map(|(_, span)| span).collect::<Vec<_>>()
    );
    for account in &accounts {
        assert_eq!(balance(store, account).await, 20, "{account}");
    }
    let docs = function.documents(CONCURRENCY, DEADLINE).await;
    assert_eq!(docs.len(), CONCURRENCY);
    assert!(docs.iter().all(|doc| metric(doc, "Records") == 20.0));
}

/// The same batch handed to four invocations at once: each payment applies
/// once, one invocation processes each record and the others get
/// duplicates, and none reports a record (the container never races itself
/// for a key).
async fn one_batch_to_four_invocations_at_once(store: Store, mode: &str) {
    let (api, function) = start(&env(store, mode).await).await;
    let account = format!("acc-{}", uuid::Uuid::new_v4());
    let events = vec![batch(&account); CONCURRENCY];
    let answers = invoke_all(&api, &events).await;
    nothing_reported(&answers);
    assert_eq!(balance(store, &account).await, 20);
    let docs = function.documents(CONCURRENCY, DEADLINE).await;
    let sum = |name| docs.iter().map(|doc| metric(doc, name)).sum::<f64>();
    assert_eq!(
        (sum("Processed"), sum("Duplicate")),
        (20.0, 60.0),
        "{docs:?}"
    );
}

/// An invocation of new payments beside one replaying a finished batch
/// (answered from the warm cache, no store request): each document counts
/// its own invocation's requests.
async fn each_invocation_counts_its_own_requests(store: Store) {
    let (api, function) = start(&env(store, "lock-free").await).await;
    let (old, new) = (
        format!("acc-{}", uuid::Uuid::new_v4()),
        format!("acc-{}", uuid::Uuid::new_v4()),
    );
    nothing_reported(&invoke_all(&api, &[batch(&old)]).await);
    // Its document first, before the next two.
    function.documents(1, DEADLINE).await;
    let answers = invoke_all(&api, &[batch(&new), batch(&old)]).await;
    nothing_reported(&answers);
    let docs = function.documents(3, DEADLINE).await;
    let (replayed, fresh): (Vec<&Value>, Vec<&Value>) = docs[1..]
        .iter()
        .partition(|doc| metric(doc, "Duplicate") == 20.0);
    assert_eq!((replayed.len(), fresh.len()), (1, 1), "{docs:?}");
    assert_eq!(metric(replayed[0], "StoreRequests"), 0.0, "{}", replayed[0]);
    // The pre-check read and at least one transaction of its own.
    assert!(metric(fresh[0], "StoreRequests") >= 2.0, "{}", fresh[0]);
    assert_eq!(balance(store, &new).await, 20);
}

macro_rules! on_every_store {
    ($($store:ident: $kind:expr),* $(,)?) => {
        $(
            mod $store {
                use super::*;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn four_batches_handed_at_once_run_at_once_and_apply_once() {
                    four_batches_run_at_once($kind).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn lock_free_one_batch_handed_to_four_invocations_applies_once() {
                    one_batch_to_four_invocations_at_once($kind, "lock-free").await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn transactional_one_batch_handed_to_four_invocations_applies_once() {
                    one_batch_to_four_invocations_at_once($kind, "transactional").await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn each_invocation_reports_its_own_store_requests() {
                    each_invocation_counts_its_own_requests($kind).await;
                }
            }
        )*
    };
}

on_every_store!(
    dynamodb: Store::DynamoDb,
    postgres: Store::Postgres,
    redis: Store::Redis,
);
