//! The key state machine on a real redis-server (`infra/redis-local.sh`):
//! the conformance suite (`exactly_once::store::conformance`), and what only Redis has
//! (its hash fields, its own expiry, its errors).

use crate::support;
use exactly_once::store::Operator as _;
use exactly_once::store::conformance;
use exactly_once::store::{conformance_suite, operator_conformance_suite};

use std::time::Duration;

use std::collections::HashMap;

use ::redis::AsyncCommands;
use conformance::{Backend, LONG_LOCK, acquire, request};
use exactly_once::clock::now_ms;
use exactly_once::config::StoreConfig;
use exactly_once::redis::{RedisEffect, RedisSettings, RedisStore};
use exactly_once::store::ClaimOutcome;
use exactly_once::store::Store;
use exactly_once::store::StoreError;
use exactly_once::store::{Effects, Increment};
use support::redis::{self, LocalRedis};

/// The test server; counters are hashes of the ledger table.
struct Redis;

impl Backend for Redis {
    type S = RedisStore;

    async fn store(&self, lock: Duration) -> RedisStore {
        redis::store(lock)
    }

    fn with_config(&self, store: &RedisStore, config: StoreConfig) -> RedisStore {
        store.with_config(config)
    }

    fn effect(&self, _: &RedisStore, counter: &str, add: i64, floor: Option<i64>) -> RedisEffect {
        let key = format!("{}:{counter}", support::env("LEDGER_TABLE"));
        RedisEffect::add(key, "balance_cents", add, floor)
    }

    async fn counter(&self, store: &RedisStore, counter: &str) -> i64 {
        let ledger = support::env("LEDGER_TABLE");
        redis::ledger_entry(store, &ledger, counter).await.0
    }

    fn ledger_table(&self) -> String {
        support::env("LEDGER_TABLE")
    }

    async fn number(&self, store: &RedisStore, increment: &Increment, attribute: &str) -> i128 {
        redis::number(store, increment, attribute).await.into()
    }
}

conformance_suite!(Redis);

operator_conformance_suite!(Redis);

/// The same suite on a Redis Cluster of 3 primaries (`REDIS_CLUSTER=true`):
/// the table and the ledger share the hash tag `{test}`.
mod cluster {
    use super::*;

    struct RedisCluster;

    impl Backend for RedisCluster {
        type S = RedisStore;

        async fn store(&self, lock: Duration) -> RedisStore {
            redis::cluster_store(lock)
        }

        fn with_config(&self, store: &RedisStore, config: StoreConfig) -> RedisStore {
            store.with_config(config)
        }

        fn effect(
            &self,
            _: &RedisStore,
            counter: &str,
            add: i64,
            floor: Option<i64>,
        ) -> RedisEffect {
            RedisEffect::add(
                format!("{}:{counter}", self.ledger_table()),
                "balance_cents",
                add,
                floor,
            )
        }

        async fn counter(&self, store: &RedisStore, counter: &str) -> i64 {
            redis::ledger_entry(store, &self.ledger_table(), counter)
                .await
                .0
        }

        fn ledger_table(&self) -> String {
            redis::tagged(&support::env("LEDGER_TABLE"))
        }

        async fn number(&self, store: &RedisStore, increment: &Increment, attribute: &str) -> i128 {
            redis::number(store, increment, attribute).await.into()
        }
    }

    conformance_suite!(RedisCluster);

    operator_conformance_suite!(RedisCluster);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_demo_function_applies_each_payment_once_on_the_cluster() {
        use exactly_once::engine::{Engine, EngineConfig};
        use exactly_once::lambda::BatchFunction;
        use ledger::{LedgerHandler, LedgerMode};
        use support::msk::{account, event, header_keys, invoke, payment, reported};

        for mode in [LedgerMode::LockFree, LedgerMode::Transactional] {
            let store = redis::cluster_store(LONG_LOCK);
            let ledger = RedisCluster.ledger_table();
            let handler = LedgerHandler::on_redis(store.clone(), &ledger, mode);
            let function = BatchFunction::new(
                Engine::new(store.clone(), handler, EngineConfig::default()),
                support::msk::settings(header_keys()),
            )
            .without_metrics();
            let a = account();
            let records = (0..20)
                .map(|i| payment(i, &format!("c-{i}"), &a, i + 1))
                .collect();
            let batch = event(vec![("payments-0", records)]);
            for _ in 0..2 {
                assert_eq!(
                    reported(&invoke(&function, &batch).await),
                    Vec::<String>::new()
                );
            }
            assert_eq!(
                redis::ledger_entry(&store, &ledger, &a).await,
                (210, 20),
                "{mode:?}"
            );
            let listed = store
                .list(exactly_once::store::Listing::Failed)
                .await
                .expect("a listing on the slot's node");
            assert!(listed.items.is_empty());
            assert_eq!(listed.cost.read, 20, "{mode:?}: the SCAN found every key");
        }
    }

    #[test]
    fn names_without_a_shared_hash_tag_are_refused_in_cluster_mode() {
        let settings = RedisSettings::from_lookup(|name| match name {
            "REDIS_URL" => Some("redis://127.0.0.1:7000".into()),
            "REDIS_CLUSTER" => Some("true".into()),
            _ => None,
        })
        .expect("settings");
        assert!(
            settings
                .check_names(&["{p}idempotency", "{p}ledger"])
                .is_ok()
        );
        for names in [
            ["idempotency", "ledger"],
            ["{p}idempotency", "{q}ledger"],
            ["{}idempotency", "{}ledger"],
        ] {
            let err = settings.check_names(&names).expect_err("refused");
            assert!(err.contains("must share one hash tag"), "{err}");
        }
    }
}

/// The hash of `pk`'s item, as Redis holds it.
async fn hash(store: &RedisStore, pk: &str) -> HashMap<String, String> {
    let key = format!("{}:{pk}", store.config().table_name);
    store.connection().hgetall(key).await.expect("HGETALL")
}

#[tokio::test]
async fn a_claim_writes_the_documented_fields_and_redis_expires_the_item_itself() {
    let store = redis::store(LONG_LOCK);
    let before = now_ms();
    let lease = acquire(&store, "p-1", "h1").await;
    let fields = hash(&store, &lease.pk).await;
    let number = |name: &str| fields[name].parse::<u64>().expect(name);
    assert_eq!(fields["pk"], lease.pk);
    assert_eq!(fields["status"], "STARTED");
    assert_eq!(number("version"), 1);
    assert_eq!(fields["owner"], lease.owner);
    assert_eq!(fields["payload_hash"], "h1");
    assert_eq!(fields["origin"], "payments-0@15");
    assert_eq!(number("attempts"), 1);
    assert_eq!(number("lock_expires_at"), lease.lock_expires_at_ms);
    let created = number("created_at");
    assert!(created >= before && created <= now_ms());
    assert_eq!(number("updated_at"), created);
    let expires_at = number("expires_at");
    assert_eq!(expires_at, created / 1000 + 8 * 24 * 3600, "epoch seconds");
    for absent in ["result", "error", "last_error"] {
        assert!(!fields.contains_key(absent), "{absent}");
    }
    // Redis deletes it just after the second `expires_at` names.
    let key = format!("{}:{}", store.config().table_name, lease.pk);
    let deleted_at: i64 = ::redis::cmd("PEXPIRETIME")
        .arg(&key)
        .query_async(&mut store.connection())
        .await
        .expect("PEXPIRETIME");
    assert_eq!(deleted_at, (expires_at as i64 + 1) * 1000);

    store
        .complete(&lease, Some("done"), Effects::default())
        .await
        .expect("complete");
    let fields = hash(&store, &lease.pk).await;
    assert_eq!(fields["status"], "COMPLETED");
    assert_eq!(fields["result"], "done");
    assert!(
        !fields.contains_key("lock_expires_at"),
        "no lease once finished"
    );
}

#[tokio::test]
async fn a_redis_that_is_down_is_a_retryable_error_and_never_a_claim() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    drop(listener);
    let store = redis::store_with(
        &format!("redis://127.0.0.1:{port}"),
        support::store_config(LONG_LOCK),
    );
    match store.claim(request("p-1", "h1")).await {
        Err(err @ StoreError::Unavailable { .. }) => {
            assert!(err.is_retryable());
            assert!(err.to_string().contains("claim"), "{err}");
        }
        other => panic!("expected the store unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn scripts_are_called_by_sha_and_loaded_again_after_a_flush() {
    let store = redis::store(LONG_LOCK);
    acquire(&store, "p-1", "h1").await;
    let mut connection = store.connection();
    let _: () = ::redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut connection)
        .await
        .expect("SCRIPT FLUSH");
    // As after a failover to a server that never saw the scripts.
    acquire(&store, "p-2", "h2").await;
    let stats: String = ::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut connection)
        .await
        .expect("INFO");
    assert!(stats.contains("cmdstat_evalsha:"), "{stats}");
}

#[tokio::test]
async fn a_key_holding_another_type_is_a_permanent_rejection() {
    let store = redis::store(LONG_LOCK);
    let pk = store.pk("p-1").expect("pk");
    let key = format!("{}:{pk}", store.config().table_name);
    let _: () = store
        .connection()
        .set(&key, "not a hash")
        .await
        .expect("SET");
    match store.claim(request("p-1", "h1")).await {
        Err(err @ StoreError::Rejected { .. }) => assert!(!err.is_retryable(), "{err}"),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[tokio::test]
async fn tls_with_auth_connects_and_a_wrong_password_is_rejected() {
    let server = LocalRedis::start(&["--tls"]);
    let ca = server.ca.clone().expect("a CA");
    let settings = |url: &str| {
        RedisSettings::from_lookup(|name| match name {
            "REDIS_URL" => Some(url.to_owned()),
            "REDIS_CA_FILE" => Some(ca.clone()),
            _ => None,
        })
        .expect("settings")
    };
    let store = |url: &str| {
        let settings = settings(url);
        RedisStore::new(
            settings.connect().expect("a connection"),
            support::store_config(LONG_LOCK),
            &settings,
        )
    };
    assert!(
        server.url.starts_with("rediss://default:"),
        "{}",
        server.url
    );
    let claimed = store(&server.url).claim(request("p-1", "h1")).await;
    assert!(
        matches!(claimed, Ok(ClaimOutcome::Acquired(_))),
        "{claimed:?}"
    );
    let wrong = server.url.replace("local-secret", "wrong");
    match store(&wrong).claim(request("p-1", "h1")).await {
        Err(StoreError::Rejected { message, .. }) => {
            assert!(
                !message.contains("wrong"),
                "no password in errors: {message}"
            );
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    // Without the CA, the server's certificate is not trusted.
    let untrusted =
        RedisSettings::from_lookup(|name| (name == "REDIS_URL").then(|| server.url.clone()))
            .expect("settings");
    let store = RedisStore::new(
        untrusted.connect().expect("a connection"),
        support::store_config(LONG_LOCK),
        &untrusted,
    );
    assert!(store.claim(request("p-2", "h1")).await.is_err());
}

/// The score of `pk`'s item in the table's set of STARTED items (none when
/// it is not a member).
async fn started_score(store: &RedisStore, pk: &str) -> Option<f64> {
    let table = &store.config().table_name;
    let member = format!("{table}:{pk}");
    store
        .connection()
        .zscore(table, member)
        .await
        .expect("ZSCORE")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_set_of_started_items_loses_only_members_whose_item_left_started() {
    let store = redis::store(LONG_LOCK);
    let listing = exactly_once::store::Listing::Stuck {
        older_than: Duration::ZERO,
    };
    // An item Redis deleted past its TTL leaves a member behind: the next
    // listing skips it and prunes it.
    let gone = acquire(&store, "gone", "h1").await;
    let created = hash(&store, &gone.pk).await["created_at"].clone();
    assert_eq!(
        started_score(&store, &gone.pk).await,
        Some(created.parse().expect("ms"))
    );
    let key = format!("{}:{}", store.config().table_name, gone.pk);
    let _: () = store.connection().del(&key).await.expect("DEL");
    tokio::time::sleep(Duration::from_millis(2)).await;
    let listed = store.list(listing).await.expect("list");
    assert!(listed.items.iter().all(|item| item.pk != gone.pk));
    assert_eq!(started_score(&store, &gone.pk).await, None, "pruned");

    // Listings pruning while claims re-create deleted items, concurrently:
    // a member whose item is STARTED is never pruned.
    let keys: Vec<String> = (0..40).map(|i| format!("k-{i}")).collect();
    let claims = {
        let (store, keys) = (store.clone(), keys.clone());
        tokio::spawn(async move {
            for key in &keys {
                let lease = acquire(&store, key, "h1").await;
                let item = format!("{}:{}", store.config().table_name, lease.pk);
                let _: () = store.connection().del(&item).await.expect("DEL");
                acquire(&store, key, "h1").await;
            }
        })
    };
    let pruning: Vec<_> = (0..4)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..20 {
                    store.list(listing).await.expect("list");
                }
            })
        })
        .collect();
    claims.await.expect("claims");
    for task in pruning {
        task.await.expect("listings");
    }
    for key in &keys {
        let pk = store.pk(key).expect("pk");
        assert!(
            started_score(&store, &pk).await.is_some(),
            "{key} is STARTED and listed"
        );
    }
    tokio::time::sleep(Duration::from_millis(2)).await;
    assert_eq!(
        store.list(listing).await.expect("list").items.len(),
        keys.len()
    );
}

/// The score of `pk`'s item in the table's set of unsent items.
async fn unsent_score(store: &RedisStore, pk: &str) -> Option<f64> {
    let table = &store.config().table_name;
    store
        .connection()
        .zscore(format!("{table};unsent"), format!("{table}:{pk}"))
        .await
        .expect("ZSCORE")
}

#[tokio::test]
async fn the_unsent_listing_reads_only_the_items_with_messages_left_and_prunes_the_rest() {
    use exactly_once::outbox::{self, Message};
    use exactly_once::store::{Commit, Listing};
    // A table of its own: its set holds this test's keys only.
    let config = StoreConfig {
        table_name: format!("unsent-{}", uuid::Uuid::new_v4().simple()),
        ..support::store_config(LONG_LOCK)
    };
    let store = redis::store_with(&support::env("REDIS_URL"), config);
    let commit = |key: String, emits: bool| Commit::<RedisEffect> {
        payload_hash: "h1".into(),
        origin: Some(format!("payments-0@{key}")),
        owner: uuid::Uuid::new_v4().to_string(),
        result: Some("applied".into()),
        effects: Effects {
            outbox: emits
                .then(|| outbox::encode(&[Message::new("https://sqs/1/q", "{}")]))
                .flatten(),
            ..Effects::default()
        },
        held: None,
        key,
    };
    // 40 completions, 2 of them with messages.
    let commits: Vec<_> = (0..40)
        .map(|i| commit(format!("k-{i}"), i % 20 == 0))
        .collect();
    let emitting: Vec<(String, String)> = commits
        .iter()
        .filter(|c| c.effects.outbox.is_some())
        .map(|c| (store.pk(&c.key).expect("pk"), c.owner.clone()))
        .collect();
    store.commit(commits).await.expect("commit");
    for (pk, _) in &emitting {
        let updated_at = hash(&store, pk).await["updated_at"].parse().expect("ms");
        assert_eq!(unsent_score(&store, pk).await, Some(updated_at));
    }
    tokio::time::sleep(Duration::from_millis(2)).await;
    let unsent = Listing::Unsent {
        older_than: Duration::ZERO,
    };
    let listed = store.list(unsent).await.expect("list");
    assert_eq!(listed.items.len(), 2);
    assert_eq!(
        listed.cost.read, 2,
        "only the set's members were read, not the table's 40 keys"
    );
    // Cleared: out of the set. Gone past its TTL: pruned by the listing.
    let (cleared, cleared_owner) = emitting[0].clone();
    let sent = outbox::Pending {
        pk: cleared.clone(),
        owner: cleared_owner,
        messages: Vec::new(),
    };
    store.outbox_sent(&[sent]).await.expect("clear");
    assert_eq!(unsent_score(&store, &cleared).await, None);
    let gone = &emitting[1].0;
    let key = format!("{}:{gone}", store.config().table_name);
    let _: () = store.connection().del(&key).await.expect("DEL");
    assert!(store.list(unsent).await.expect("list").items.is_empty());
    assert_eq!(unsent_score(&store, gone).await, None, "pruned");
}
