//! What finding stuck keys costs, against the table's size: a table of
//! many COMPLETED items (`STUCK_COST_COMPLETED`, 10,000 by default, as CI
//! runs it; `STUCK_COST_COMPLETED=100000` for the size) and 10
//! stuck STARTED keys, on each real server. The listing reads the index of
//! STARTED items (DynamoDB's sparse GSI, PostgreSQL's partial index,
//! Redis's sorted set): what it reads grows by the 10 stuck keys, not by
//! the completed ones (nor by keys that were STARTED, then completed or
//! failed); the full scan beside it reads them all.
//!
//! One test per backend in a module run alone (`infra/test-area.sh`), so that no other test writes
//! STARTED items to the same table while a cost is measured.

use crate::support;

use std::time::Duration;

use exactly_once::dynamodb::ScanOptions;
use exactly_once::store::Operator;
use exactly_once::store::{Commit, Listed, Listing, ListingCost, Store};
use futures_util::StreamExt;
use support::ops::acquire;

const STUCK: usize = 10;

/// Stuck keys: lock released (or expired), or created over an hour ago.
const LISTING: Listing = Listing::Stuck {
    older_than: Duration::from_secs(3600),
};

fn completed() -> usize {
    std::env::var("STUCK_COST_COMPLETED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000)
}

/// `n` COMPLETED items, written by the lock-free path 25 to a commit, 4
/// commits at a time.
async fn load_completed<S: Store>(store: &S, n: usize) {
    let commits: Vec<Vec<Commit<S::Effect>>> = (0..n)
        .collect::<Vec<_>>()
        .chunks(25)
        .map(|chunk| {
            chunk
                .iter()
                .map(|i| Commit {
                    key: format!("done-{i}"),
                    payload_hash: "h".into(),
                    origin: Some(format!("payments-0@{i}")),
                    owner: format!("o-{i}"),
                    result: None,
                    effects: Vec::new().into(),
                    held: None,
                })
                .collect()
        })
        .collect();
    let mut commits = futures_util::stream::iter(commits)
        .map(|commits| commit(store, commits))
        .buffer_unordered(4);
    while commits.next().await.is_some() {}
}

/// One commit, again while the server is too slow to answer in time (a
/// cold DynamoDB Local): a retry of one that did commit finds its keys
/// taken, which is as good.
async fn commit<S: Store>(store: &S, commits: Vec<Commit<S::Effect>>) {
    for _ in 0..5 {
        match store.commit(commits.clone()).await {
            Ok(_) => return,
            Err(err) if err.is_retryable() => eprintln!("commit again: {err}"),
            Err(err) => panic!("commit: {err}"),
        }
    }
    panic!("commit: the server never answered in time");
}

/// Keys that went through the locking path and left STARTED: 50 claimed
/// and completed, 50 claimed and failed (each left the index).
async fn finish_locked<S: Store>(store: &S) {
    let mut finished = futures_util::stream::iter(0..100)
        .map(|i| async move {
            let lease = acquire(store, &format!("locked-{i}")).await;
            match i % 2 {
                0 => store
                    .complete(&lease, None, Vec::new().into())
                    .await
                    .map(drop),
                _ => store.fail(&lease, "not a payment").await,
            }
        })
        .buffer_unordered(4);
    while let Some(finished) = finished.next().await {
        finished.expect("complete or fail");
    }
}

/// 10 keys claimed and released: STARTED, their lock ended.
async fn make_stuck<S: Store>(store: &S) {
    for i in 0..STUCK {
        let lease = acquire(store, &format!("stuck-{i}")).await;
        store.release(&lease).await.expect("release");
    }
}

async fn list<S: Operator>(store: &S) -> Listed {
    store.list(LISTING).await.expect("list")
}

/// Loads the table around `store`'s prefix (see [`load_completed`],
/// [`finish_locked`], [`make_stuck`]), then lists its stuck keys through the
/// index and by reading the whole table (`read_all`). The index read grows
/// by the stuck keys only (every STARTED item of the table, all prefixes,
/// is in the index; no other test of this binary writes to this store);
/// the full read covers every item. Returns the costs: the index's before
/// and after, and the full read's.
async fn index_against_table<S: Operator>(
    store: &S,
    read_all: impl AsyncFnOnce(&S) -> Listed,
) -> [ListingCost; 3] {
    let n = completed();
    let before = list(store).await.cost;
    load_completed(store, n).await;
    finish_locked(store).await;
    make_stuck(store).await;
    let listed = list(store).await;
    assert_eq!(listed.items.len(), STUCK);
    let all = read_all(store).await;
    assert_eq!(
        listed.cost.read - before.read,
        STUCK as u64,
        "the index grew by the stuck keys only"
    );
    assert!(all.cost.read >= (n + STUCK) as u64, "{:?}", all.cost);
    [before, listed.cost, all.cost]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_dynamodb_stuck_keys_cost_what_the_started_items_cost() {
    let store = support::store(Duration::from_secs(60)).await;
    // Pages of 1,000 items: each answered well within the client's 2 s
    // (DynamoDB Local's 1 MB pages of a 100,000-item table are not).
    let scan = ScanOptions {
        full_scan: true,
        page_size: Some(1000),
        ..ScanOptions::default()
    };
    let [before, index, table] = index_against_table(&store, async |store| {
        let scanning = store.clone().with_scan(scan);
        scanning.list(LISTING).await.expect("scan")
    })
    .await;
    eprintln!(
        "DynamoDB, {} completed + {STUCK} stuck: the index read {} item(s) ({:.1} RCU, {} \
         before), the scan {} item(s) ({:.1} RCU)",
        completed(),
        index.read,
        index.capacity_units,
        before.read,
        table.read,
        table.capacity_units
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_redis_stuck_keys_cost_what_the_started_items_cost() {
    let store = support::redis::store(Duration::from_secs(60));
    // The FAILED listing is a SCAN of the table: every key under the prefix.
    let [before, index, table] = index_against_table(&store, async |store| {
        store.list(Listing::Failed).await.expect("scan")
    })
    .await;
    eprintln!(
        "Redis, {} completed + {STUCK} stuck: the sorted set led to {} item(s) ({} before), \
         a SCAN reads {} item(s)",
        completed(),
        index.read,
        before.read,
        table.read
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgres_stuck_keys_are_read_through_the_partial_index() {
    let store = support::postgres::store(Duration::from_secs(60)).await;
    let n = completed();
    load_completed(&store, n).await;
    finish_locked(&store).await;
    make_stuck(&store).await;
    // Statistics as autovacuum keeps them (a fresh bulk load has none).
    let table = support::env("IDEMPOTENCY_TABLE");
    let client = support::postgres::pool()
        .await
        .get()
        .await
        .expect("a connection");
    let analyze = format!("ANALYZE \"{table}\"");
    client.batch_execute(&analyze).await.expect("analyze");
    assert_eq!(list(&store).await.items.len(), STUCK);
    let plan = store.explain_listing(LISTING).await.expect("explain");
    let plan = plan.join("\n");
    eprintln!("PostgreSQL, {n} completed + {STUCK} stuck:\n{plan}");
    let index = format!("{}_started", table.replace('.', "_"));
    assert!(
        plan.contains(&format!("Index Scan using \"{index}\""))
            || plan.contains(&format!("Bitmap Index Scan on \"{index}\""))
            || plan.contains(&format!("Index Scan using {index}"))
            || plan.contains(&format!("Bitmap Index Scan on {index}")),
        "the partial index of STARTED rows is read:\n{plan}"
    );
    assert!(!plan.contains("Seq Scan"), "no scan of the table:\n{plan}");
    let every_row = format!("{}_expires_at", table.replace('.', "_"));
    assert!(
        !plan.contains(&every_row),
        "nor of an index of every row:\n{plan}"
    );
}
