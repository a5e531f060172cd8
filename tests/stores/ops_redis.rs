//! The operator CLI `exactly-once-ops` on Redis (`IDEMPOTENCY_STORE=redis`,
//! `REDIS_URL`): the real binary inspects, lists stuck and failed keys (a
//! `SCAN` of the table's keys), and releases and retries at a version.

use crate::support;

use std::time::Duration;

use exactly_once::config::StoreConfig;
use exactly_once::store::Status;
use exactly_once::store::Store;

fn ops(config: &StoreConfig, args: &[&str]) -> support::ops::Run {
    support::ops::ops("redis", config, args)
}

#[tokio::test]
async fn stuck_failed_inspect_release_and_retry_on_redis() {
    let store = support::redis::store(Duration::from_secs(60));
    let short = store.with_config(StoreConfig {
        lock_timeout: Duration::from_millis(200),
        ..store.config().clone()
    });
    let config = store.config().clone();
    let _live = support::ops::acquire(&store, "live").await;
    let stuck = support::ops::acquire(&short, "stuck").await;
    let failed = support::ops::acquire(&store, "failed").await;
    store
        .fail(&failed, "insufficient funds")
        .await
        .expect("fail");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let listed = ops(&config, &["stuck", "--older-than", "1h"]);
    assert_eq!(listed.code, 0, "{listed:?}");
    assert!(listed.stdout.contains("stuck"), "{listed:?}");
    assert!(!listed.stdout.contains("live"), "{listed:?}");
    assert!(
        listed.stdout.contains("1 stuck STARTED key(s)")
            && listed
                .stdout
                .contains("item(s) through the sorted set of STARTED keys"),
        "{listed:?}"
    );
    let failures = ops(&config, &["failed"]);
    assert!(
        failures.stdout.contains("insufficient funds"),
        "{failures:?}"
    );

    let inspected = ops(&config, &["inspect", "stuck"]);
    assert_eq!(inspected.code, 0, "{inspected:?}");
    assert!(inspected.stdout.contains("STARTED"), "{inspected:?}");
    let absent = ops(&config, &["inspect", "never"]);
    assert_eq!(absent.code, 1, "{absent:?}");

    let refused = ops(&config, &["release", "stuck", "--version", "7"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("found: STARTED at version 1"),
        "{refused:?}"
    );
    let version = stuck.version.to_string();
    let released = ops(&config, &["release", "stuck", "--version", &version]);
    assert_eq!(released.code, 0, "{released:?}");
    let item = store.get("stuck").await.expect("get").expect("item");
    assert_eq!(item.lock_expires_at_ms, Some(0));

    let retried = ops(&config, &["retry-failed", "failed", "--version", "1"]);
    assert_eq!(retried.code, 0, "{retried:?}");
    let item = store.get("failed").await.expect("get").expect("item");
    assert_eq!(item.status, Status::Started);
    assert_eq!(item.last_error.as_deref(), Some("insufficient funds"));

    // purge-expired is PostgreSQL's: Redis expires its keys itself.
    let purge = ops(&config, &["purge-expired"]);
    assert_eq!(purge.code, 2, "{purge:?}");
    assert!(
        purge.stderr.contains("Redis expires its keys itself"),
        "{purge:?}"
    );
}
