//! A slow store is a slow store, not an outage. A function built on the
//! crate, with its default settings, on each store behind a proxy that
//! answers every request 0.3 to 1.5 s late (a store under strain, not
//! down): 1,000 new payments over 4 partitions are all finished within the
//! template's default timeout (120 s), nothing reported, each applied once,
//! on both paths:
//! - the lock-free path and the locking path with the effect in the store:
//!   the shipped function (`msk-handler`, the demo ledger), `lock-free`
//!   and `transactional`;
//! - the locking path with the effect outside the store (direct
//!   completions in batches of fenced writes): `examples/payment_api.rs`,
//!   charging a payment API on loopback (not slowed) once per payment.
//!
//! Before the store's timeouts gave such answers room, transaction groups
//! stopped shrinking on latency alone, and the engine sent an unanswered
//! request again (recognising its own write), the lock-free path reported
//! most of such a batch and the locking path answered `StoreUnavailable`.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::charges::ChargeApi;
use support::msk::{event, payment};
use support::proxy::{Chaos, Proxy};
use support::shipped::{self, Store, metric, reported};

/// The template's default function timeout.
const DEADLINE: Duration = Duration::from_secs(120);
/// Payments, over 4 partitions.
const PAYMENTS: usize = 1_000;
const PARTITIONS: usize = 4;
/// Accounts the payments go to (5 cents each: a balance of 50 per account).
const ACCOUNTS: usize = 100;

/// 1,000 new payments of 5 cents (`pay-<tag>-<n>`) over 4 partitions, to
/// 100 accounts.
fn batch(tag: &str, accounts: &[String]) -> Value {
    let per_partition = PAYMENTS / PARTITIONS;
    let partitions = ["payments-0", "payments-1", "payments-2", "payments-3"]
        .into_iter()
        .enumerate()
        .map(|(p, name)| {
            let records = (0..per_partition)
                .map(|i| {
                    let n = p * per_partition + i;
                    payment(
                        i as i64,
                        &format!("pay-{tag}-{n}"),
                        &accounts[n % ACCOUNTS],
                        5,
                    )
                })
                .collect();
            (name, records)
        })
        .collect();
    event(partitions)
}

/// What runs the batch.
#[derive(Clone, Copy, Debug)]
enum Function {
    /// The demo ledger in this `LEDGER_MODE`.
    Ledger(&'static str),
    /// `examples/payment_api.rs`: a charge per payment at a payment API.
    PaymentApi,
}

/// One test at a time: each is of a slow store, not of a CPU its siblings
/// share. Two at once, on a 2-core machine with one core busy (CI slowed),
/// left the function, the proxy and the store one core between two
/// batches: answers past the store's timeout, transaction groups halved to
/// a few records (234 requests for 644 payments), the batch out of time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn every_payment_applies_once_on_a_slow_store(store: Store, function: Function) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let proxy = Proxy::start_with(store.address(), Chaos::slow(300, 1_500)).await;
    let lock = Duration::from_secs(30);
    let charges = ChargeApi::start().await;
    let (api, process) = match function {
        Function::Ledger(mode) => {
            let env = shipped::env(store, mode, lock, Some(&proxy)).await;
            shipped::start(&env, 1, Duration::from_secs(60)).await
        }
        Function::PaymentApi => {
            let mut env = shipped::env(store, "lock-free", lock, Some(&proxy)).await;
            env.push(("PAYMENTS_API_URL", format!("http://{}", charges.addr)));
            let binary = support::example("payment_api");
            shipped::start_binary(&binary, &env, 1, Duration::from_secs(60)).await
        }
    };
    let tag = uuid::Uuid::new_v4().to_string();
    let accounts: Vec<String> = (0..ACCOUNTS).map(|i| format!("acc-{tag}-{i}")).collect();
    let started = Instant::now();
    let (answer, _) = api.invoke(&batch(&tag, &accounts), DEADLINE).await;
    let took = started.elapsed();
    let docs = process.documents(1, Duration::from_secs(10)).await;
    assert_eq!(
        reported(&answer),
        Ok(vec![]),
        "{function:?} on {store:?}, after {took:?}: {docs:?}"
    );
    let doc = docs.first().expect("the invocation's metrics");
    assert_eq!(metric(doc, "Processed"), PAYMENTS as f64, "{doc}");
    match function {
        Function::Ledger(_) => {
            for account in &accounts {
                assert_eq!(shipped::balance(store, account).await, 50, "{account}");
            }
        }
        Function::PaymentApi => {
            assert_eq!(charges.double_charged(), Vec::<String>::new());
            assert_eq!(charges.charged(), PAYMENTS as u64);
        }
    }
    eprintln!("{function:?} on {store:?}: {PAYMENTS} payments in {took:?} behind a slow proxy");
}

macro_rules! on_every_store {
    ($($store:ident: $kind:expr),* $(,)?) => {
        $(
            mod $store {
                use super::*;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn lock_free_applies_every_payment_once_behind_a_slow_proxy() {
                    every_payment_applies_once_on_a_slow_store($kind, Function::Ledger("lock-free")).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn transactional_applies_every_payment_once_behind_a_slow_proxy() {
                    every_payment_applies_once_on_a_slow_store($kind, Function::Ledger("transactional")).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn a_payment_api_charges_every_payment_once_behind_a_slow_proxy() {
                    every_payment_applies_once_on_a_slow_store($kind, Function::PaymentApi).await;
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
