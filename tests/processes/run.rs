//! `exactly_once::run` is the one composition root: a `main` built on it
//! (the shipped `msk-handler`, on `run_with`; the examples, on `run`)
//! honours every variable of the function's configuration. Each case
//! starts the real binary against a Lambda Runtime API stand-in, hands it
//! an MSK event and checks what a user would see: the response, the items
//! in the store the variables name, the dead letter in SQS, the spans at
//! the collector, the metrics on stdout, the start-up error.

use crate::support;

use std::time::Duration;

use exactly_once::config::StoreConfig;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::redis::redis::AsyncCommands as _;
use exactly_once::store::{Status, Store};
use serde_json::{Value, json};
use support::msk::{Rec, event, payment};
use support::runtime_api::{Answer, Collector, Function, RuntimeApi};

/// How long the function may take to answer one event.
const DEADLINE: Duration = Duration::from_secs(30);

/// A fresh key prefix on the test tables.
fn config() -> StoreConfig {
    support::store_config(Duration::from_secs(30))
}

/// The variables every case shares: the test tables, the prefix, and the
/// local stand-ins of AWS (infra/test.sh exports them).
fn base_env(config: &StoreConfig) -> Vec<(&'static str, String)> {
    vec![
        ("IDEMPOTENCY_TABLE", config.table_name.clone()),
        ("IDEMPOTENCY_KEY_PREFIX", config.key_prefix.clone()),
        ("LEDGER_TABLE", support::env("LEDGER_TABLE")),
    ]
}

/// Two payments on `payments-0`.
fn two_payments() -> Value {
    event(vec![(
        "payments-0",
        vec![
            payment(1, "p-1", "acc-1", 100),
            payment(2, "p-2", "acc-1", 250),
        ],
    )])
}

/// `binary` started with `env`, handed `event`: its answer and the
/// function (for its lines).
async fn serve(binary: &str, env: &[(&str, String)], event: &Value) -> (Answer, Function) {
    let api = RuntimeApi::start().await;
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let function = Function::start(&support::binary(binary), &api, &env);
    let (answer, _) = tokio::time::timeout(DEADLINE, api.invoke(event, DEADLINE))
        .await
        .unwrap_or_else(|_| panic!("no answer; the function wrote {:#?}", function.lines()));
    (answer, function)
}

fn empty_response() -> Answer {
    Answer::Response(json!({ "batchItemFailures": [] }))
}

/// The EMF document of the invocation (the one that counts records).
async fn metrics(function: &Function) -> Value {
    function
        .documents(1, DEADLINE)
        .await
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no EMF document in {:#?}", function.lines()))
}

async fn assert_completed<S: Store>(store: &S, keys: &[&str]) {
    for key in keys {
        let item = store.get(key).await.expect("read").expect("an item");
        assert_eq!(item.status, Status::Completed, "{key}");
    }
}

#[tokio::test]
async fn by_default_it_runs_on_dynamodb_and_reports_its_requests() {
    let config = config();
    let (answer, function) = serve("msk-handler", &base_env(&config), &two_payments()).await;
    assert_eq!(answer, empty_response());
    let store = DynamoDbStore::new(support::client().await, config);
    assert_completed(&store, &["p-1", "p-2"]).await;
    // The request counter is wired: the invocation's own requests.
    let metrics = metrics(&function).await;
    assert_eq!(metrics["Records"].as_f64(), Some(2.0), "{metrics}");
    assert!(
        metrics["StoreRequests"].as_f64() >= Some(1.0),
        "StoreRequests in {metrics}"
    );
}

#[tokio::test]
async fn idempotency_store_postgres_puts_the_items_in_postgresql_only() {
    let config = config();
    support::postgres::migrate(&support::postgres::pool().await).await;
    let mut env = base_env(&config);
    env.extend([
        ("IDEMPOTENCY_STORE", "postgres".to_owned()),
        ("DATABASE_URL", support::env("DATABASE_URL")),
    ]);
    let (answer, function) = serve("msk-handler", &env, &two_payments()).await;
    assert_eq!(answer, empty_response());
    let postgres = support::postgres::store(Duration::from_secs(30)).await;
    let postgres = postgres.with_config(config.clone());
    assert_completed(&postgres, &["p-1", "p-2"]).await;
    let dynamodb = DynamoDbStore::new(support::client().await, config);
    assert_eq!(dynamodb.get("p-1").await.expect("read"), None);
    assert!(metrics(&function).await["StoreRequests"].as_f64() >= Some(1.0));
}

#[tokio::test]
async fn on_postgresql_a_table_never_migrated_stops_the_function_at_start() {
    let config = config();
    let mut env = base_env(&config);
    env.extend([
        ("IDEMPOTENCY_STORE", "postgres".to_owned()),
        ("DATABASE_URL", support::env("DATABASE_URL")),
        ("IDEMPOTENCY_TABLE", "never_migrated".to_owned()),
    ]);
    let api = RuntimeApi::start().await;
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut function = Function::start(&support::binary("msk-handler"), &api, &env);
    let code = function.exit_code(DEADLINE).await;
    assert_eq!(code, Some(1), "{:#?}", function.lines());
    let said = function.lines().join("\n");
    assert!(
        said.contains("\"never_migrated\" is at schema version 0")
            && said.contains("run `exactly-once-ops migrate`"),
        "{said}"
    );
    // Also told to the Runtime API, which answers the invocation with it
    // (`cargo lambda invoke` prints it instead of waiting).
    let reported = api.init_error().expect("an init error posted");
    assert_eq!(reported["errorType"], "StartError", "{reported}");
    let message = reported["errorMessage"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"never_migrated\" is at schema version 0"),
        "{message}"
    );
}

/// `DATABASE_MIGRATE=true`: tables never migrated are created at start
/// (the idempotency table, and the ledger's through `check_schema`), and
/// the function serves; a second start changes nothing.
#[tokio::test]
async fn on_postgresql_database_migrate_creates_the_tables_at_start() {
    let config = config();
    let unique = uuid::Uuid::new_v4().simple().to_string();
    let (table, ledger) = (format!("keys_{unique}"), format!("ledger_{unique}"));
    let mut env = base_env(&config);
    env.extend([
        ("IDEMPOTENCY_STORE", "postgres".to_owned()),
        ("DATABASE_URL", support::env("DATABASE_URL")),
        ("DATABASE_MIGRATE", "true".to_owned()),
        ("IDEMPOTENCY_TABLE", table.clone()),
        ("LEDGER_TABLE", ledger.clone()),
    ]);
    for _ in 0..2 {
        let (answer, _) = serve("msk-handler", &env, &two_payments()).await;
        assert_eq!(answer, empty_response());
    }
    let pool = support::postgres::pool().await;
    for (schema, table) in [
        (exactly_once::postgres::schema::IDEMPOTENCY, &table),
        (ledger::LEDGER_SCHEMA, &ledger),
    ] {
        exactly_once::postgres::schema::check(&pool, schema, table, support::postgres::TIMEOUT)
            .await
            .unwrap_or_else(|err| panic!("{table}: {err}"));
    }
    let config = StoreConfig {
        table_name: table,
        ..config
    };
    let postgres =
        exactly_once::postgres::PostgresStore::new(pool, config, support::postgres::TIMEOUT)
            .expect("store");
    assert_completed(&postgres, &["p-1", "p-2"]).await;
}

#[tokio::test]
async fn idempotency_store_redis_puts_the_items_in_redis() {
    let config = config();
    let mut env = base_env(&config);
    env.extend([
        ("IDEMPOTENCY_STORE", "redis".to_owned()),
        ("REDIS_URL", support::env("REDIS_URL")),
    ]);
    let (answer, _) = serve("msk-handler", &env, &two_payments()).await;
    assert_eq!(answer, empty_response());
    let redis = support::redis::store_with(&support::env("REDIS_URL"), config.clone());
    assert_completed(&redis, &["p-1", "p-2"]).await;
    let dynamodb = DynamoDbStore::new(support::client().await, config);
    assert_eq!(dynamodb.get("p-1").await.expect("read"), None);
}

#[tokio::test]
async fn duplicate_cache_redis_shares_the_completed_keys_in_redis() {
    let config = config();
    let mut env = base_env(&config);
    env.extend([
        ("DUPLICATE_CACHE", "redis".to_owned()),
        ("REDIS_URL", support::env("REDIS_URL")),
    ]);
    let (answer, _) = serve("msk-handler", &env, &two_payments()).await;
    assert_eq!(answer, empty_response());
    let redis = support::redis::store_with(&support::env("REDIS_URL"), config.clone());
    let mut connection = redis.connection();
    let cached = format!("{}:completed:{}p-1", config.table_name, config.key_prefix);
    let exists: bool = connection.exists(&cached).await.expect("EXISTS");
    assert!(exists, "{cached} is not in the shared cache");
}

#[tokio::test]
async fn dead_letter_queue_url_sends_a_parked_record_whole_to_sqs() {
    let config = config();
    let (sqs, url) = support::sqs::queue().await;
    let mut env = base_env(&config);
    env.push(("DEAD_LETTER_QUEUE_URL", url.clone()));
    // No idempotency-key header: refused, so parked (a queue takes it).
    let keyless = Rec {
        offset: 3,
        key: None,
        value: br#"{"payment_id":"p-3"}"#.to_vec(),
    };
    let event = event(vec![("payments-0", vec![keyless])]);
    let (answer, _) = serve("msk-handler", &env, &event).await;
    assert_eq!(answer, empty_response());
    let letters = support::sqs::drain(&sqs, &url).await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0]["partition"], "payments-0");
    assert_eq!(letters[0]["offset"], 3);
    assert_eq!(letters[0]["record"]["offset"], 3);
}

#[tokio::test]
async fn tracing_export_otlp_sends_the_spans_to_the_collector() {
    let config = config();
    let collector = Collector::start().await;
    let mut env = base_env(&config);
    env.extend([
        ("TRACING_EXPORT", "otlp".to_owned()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint()),
    ]);
    let (answer, _function) = serve("msk-handler", &env, &two_payments()).await;
    assert_eq!(answer, empty_response());
    // Flushed after the invocation; the export may take a moment.
    let spans = ["msk-handler", "kafka batch", "payments process"];
    for _ in 0..100 {
        if spans.iter().all(|span| collector.has_span(span)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the collector did not get every span of {spans:?}");
}

#[tokio::test]
async fn a_handler_tied_to_dynamodb_stops_at_start_on_another_store() {
    let config = config();
    let mut env = base_env(&config);
    env.extend([
        ("IDEMPOTENCY_STORE", "postgres".to_owned()),
        ("DATABASE_URL", support::env("DATABASE_URL")),
        ("STOCK_TABLE", "stock".to_owned()),
    ]);
    support::postgres::migrate(&support::postgres::pool().await).await;
    let api = RuntimeApi::start().await;
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut function = Function::start(&support::example("transactional"), &api, &env);
    let code = function.exit_code(DEADLINE).await;
    assert_eq!(code, Some(1), "{:#?}", function.lines());
    let said = function.lines().join("\n");
    assert!(
        said.contains(
            "this handler's effects are dynamodb writes, which IDEMPOTENCY_STORE=postgres \
             cannot commit"
        ),
        "{said}"
    );
}

#[tokio::test]
async fn a_generic_handler_built_on_run_serves_on_the_store_it_is_given() {
    let config = config();
    let mut env = base_env(&config);
    env.extend([
        ("IDEMPOTENCY_STORE", "redis".to_owned()),
        ("REDIS_URL", support::env("REDIS_URL")),
    ]);
    let api = RuntimeApi::start().await;
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let function = Function::start(&support::example("record_metadata"), &api, &env);
    let (answer, _) = tokio::time::timeout(DEADLINE, api.invoke(&two_payments(), DEADLINE))
        .await
        .unwrap_or_else(|_| panic!("no answer; the function wrote {:#?}", function.lines()));
    assert_eq!(answer, empty_response());
    let redis = support::redis::store_with(&support::env("REDIS_URL"), config);
    assert_completed(&redis, &["p-1", "p-2"]).await;
}
