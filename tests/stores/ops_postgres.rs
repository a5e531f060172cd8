//! The operator CLI `exactly-once-ops` on PostgreSQL (`IDEMPOTENCY_STORE=
//! postgres`, `DATABASE_URL`): the real binary migrates (idempotently),
//! inspects, lists stuck and failed keys through the partial indexes,
//! releases at a version, and purges expired rows.

use crate::support;

use std::process::Command;
use std::time::Duration;

use exactly_once::config::StoreConfig;
use exactly_once::postgres::PostgresStore;
use exactly_once::store::Store;
use support::ops::acquire;
use support::postgres;

fn ops(config: &StoreConfig, args: &[&str]) -> support::ops::Run {
    support::ops::ops("postgres", config, args)
}

#[tokio::test]
async fn migrate_creates_the_schema_once_and_names_what_it_did() {
    let mut config = support::store_config(Duration::from_secs(60));
    config.table_name = format!("ops_{}", uuid::Uuid::new_v4().simple());
    let ledger = format!("{}_ledger", config.table_name);
    let first = ops(&config, &["migrate", "--ledger-table", &ledger]);
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(
        first.stdout,
        format!(
            "{:?}: migrated from version 0 to 3\n{ledger:?}: migrated from version 0 to 1\n",
            config.table_name
        )
    );
    let again = ops(&config, &["migrate", "--ledger-table", &ledger]);
    assert_eq!(
        again.stdout,
        format!(
            "{:?}: already at version 3: nothing to do\n{ledger:?}: already at version 1: nothing to do\n",
            config.table_name
        )
    );
    // The function's store works on what migrate made.
    let pool = postgres::pool().await;
    let store = PostgresStore::new(pool, config, postgres::TIMEOUT).expect("store");
    acquire(&store, "k-1").await;
}

#[tokio::test]
async fn stuck_failed_release_and_purge_on_postgres() {
    let store = postgres::store(Duration::from_secs(60)).await;
    let short = store.with_config(StoreConfig {
        lock_timeout: Duration::from_millis(200),
        ..store.config().clone()
    });
    let config = store.config().clone();
    let _live = acquire(&store, "live").await;
    let stuck = acquire(&short, "stuck").await;
    let failed = acquire(&store, "failed").await;
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
        listed
            .stdout
            .contains("1 stuck STARTED key(s)")
            && listed
                .stdout
                .contains("read 1 row(s) through the PostgreSQL index of STARTED, FAILED and unsent rows in 1 statement(s)"),
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

    let refused = ops(&config, &["release", "stuck", "--version", "7"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("found: STARTED at version 1"),
        "{refused:?}"
    );
    let released = ops(
        &config,
        &["release", "stuck", "--version", &stuck.version.to_string()],
    );
    assert_eq!(released.code, 0, "{released:?}");
    let item = store.get("stuck").await.expect("get").expect("row");
    assert_eq!(item.lock_expires_at_ms, Some(0));

    let purged = ops(&config, &["purge-expired", "--batch", "100"]);
    assert_eq!(purged.code, 0, "{purged:?}");
    assert!(purged.stdout.starts_with("deleted "), "{purged:?}");

    // On DynamoDB, migrate is a usage error naming the right store.
    let output = Command::new(support::binary("exactly-once-ops"))
        .args(["migrate", "--table", "t"])
        .env("IDEMPOTENCY_STORE", "dynamodb")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("migrate is for IDEMPOTENCY_STORE=postgres"),
        "{stderr}"
    );
    assert_eq!(output.status.code(), Some(2));
}
