//! The Lambda function: MSK events in, payments applied to the ledger exactly
//! once, a partial batch response out. The idempotency store is chosen at
//! start (`IDEMPOTENCY_STORE`): DynamoDB (the default), PostgreSQL or Redis.

use exactly_once::dynamo::{self, RequestCounter};
use std::sync::Arc;

use exactly_once::engine::{Engine, RecordHandler, SharedCache};
use exactly_once::lambda::dead_letter::DeadLetterQueue;
use exactly_once::lambda::telemetry::{self, TracingExport};
use exactly_once::lambda::{KafkaRecord, MskFunction, Settings};
use exactly_once::ledger::{LedgerHandler, LedgerSettings};
use exactly_once::store::postgres::schema::{self, SchemaError, TableKind};
use exactly_once::store::postgres::{DatabaseSettings, PostgresStore};
use exactly_once::store::redis::{RedisDuplicateCache, RedisSettings, RedisStore};
use exactly_once::{DynamoDbStore, Store, StoreKind};
use lambda_runtime::layers::{OpenTelemetryFaasTrigger, OpenTelemetryLayer};
use lambda_runtime::{Error, LambdaEvent, Runtime, service_fn};
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let traces = telemetry::init(TracingExport::from_env()?)?;
    let settings = Settings::from_env()?;
    let ledger = LedgerSettings::from_lookup(|name| std::env::var(name).ok())?;
    let aws = dynamo::sdk_config().await;
    let dead_letters = settings
        .function
        .dead_letter_queue_url
        .clone()
        .map(|url| DeadLetterQueue::new(aws_sdk_sqs::Client::new(&aws), url));
    // Redis's cache of COMPLETED keys shared by every container, in front
    // of a durable store (DUPLICATE_CACHE=redis).
    let shared_cache =
        RedisDuplicateCache::from_lookup(&settings.store, |name| std::env::var(name).ok())?
            .map(|cache| Arc::new(cache) as Arc<dyn SharedCache>);
    if shared_cache.is_some() && settings.store_kind == StoreKind::Redis {
        return Err(
            "DUPLICATE_CACHE=redis sits in front of DynamoDB or PostgreSQL; \
                    with IDEMPOTENCY_STORE=redis the store itself answers duplicates"
                .into(),
        );
    }
    // Every store's requests, counted and timed for the metrics.
    let requests = RequestCounter::default();
    match settings.store_kind {
        StoreKind::DynamoDb => {
            let client = requests.attach(&aws_sdk_dynamodb::Client::new(&aws));
            let store = DynamoDbStore::new(client.clone(), settings.store);
            let handler = LedgerHandler::from_settings(client, ledger);
            let function = MskFunction::new(
                with_cache(Engine::new(store, handler, settings.engine), &shared_cache),
                settings.function,
            )
            .with_request_counter(requests);
            serve(function, dead_letters, traces).await
        }
        StoreKind::Postgres => {
            let database = DatabaseSettings::from_lookup(|name| std::env::var(name).ok())?;
            let pool = database.pool(Some(&aws)).await?;
            for (kind, table) in [
                (TableKind::Idempotency, &settings.store.table_name),
                (TableKind::Ledger, &ledger.table),
            ] {
                match schema::check(&pool, kind, table).await {
                    Ok(()) => {}
                    // Down now: every record fails closed (reported) until it is back.
                    Err(SchemaError::Unreachable(reason)) => {
                        tracing::warn!(%reason, "PostgreSQL unreachable at start; schema not checked");
                    }
                    Err(wrong) => return Err(wrong.into()),
                }
            }
            let store = PostgresStore::new(pool, settings.store, database.call_timeout())?
                .with_request_counter(requests.clone());
            let handler = LedgerHandler::from_settings_on_postgres(store.clone(), ledger);
            let function = MskFunction::new(
                with_cache(Engine::new(store, handler, settings.engine), &shared_cache),
                settings.function,
            )
            .with_request_counter(requests);
            serve(function, dead_letters, traces).await
        }
        StoreKind::Redis => {
            let redis = RedisSettings::from_lookup(|name| std::env::var(name).ok())?;
            // Cluster mode: the keys and the ledger's hashes in one slot.
            redis.check_names(&[&settings.store.table_name, &ledger.table])?;
            let store = RedisStore::new(redis.connect()?, settings.store, &redis)
                .with_request_counter(requests.clone());
            let handler = LedgerHandler::from_settings_on_redis(store.clone(), ledger);
            let function = MskFunction::new(
                Engine::new(store, handler, settings.engine),
                settings.function,
            )
            .with_request_counter(requests);
            serve(function, dead_letters, traces).await
        }
    }
}

/// `engine` backed by the shared cache, if there is one.
fn with_cache<H, S>(engine: Engine<H, S>, cache: &Option<Arc<dyn SharedCache>>) -> Engine<H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
{
    match cache {
        Some(cache) => engine.with_shared_cache(cache.clone()),
        None => engine,
    }
}

/// Runs `function` (forwarding parked records to `dead_letters`, if any)
/// until the runtime stops; with `traces`, each invocation is a span and
/// the spans are flushed before the next invocation.
async fn serve<H, S>(
    function: MskFunction<H, S>,
    dead_letters: Option<DeadLetterQueue>,
    traces: Option<SdkTracerProvider>,
) -> Result<(), Error>
where
    S: Store,
    H: RecordHandler<S::Effect, Record = KafkaRecord>,
{
    let function = match dead_letters {
        Some(queue) => function.with_dead_letter_queue(queue),
        None => function,
    };
    let function = &function;
    let handler =
        service_fn(move |event: LambdaEvent<Value>| async move { function.handle(event).await });
    match traces {
        None => lambda_runtime::run(handler).await,
        Some(provider) => {
            let flush = move || {
                if let Err(err) = provider.force_flush() {
                    tracing::warn!(error = %err, "spans not exported");
                }
            };
            let traced =
                OpenTelemetryLayer::new(flush).with_trigger(OpenTelemetryFaasTrigger::PubSub);
            Runtime::new(handler).layer(traced).run().await
        }
    }
}
