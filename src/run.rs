//! The composition root: the function as the environment configures it,
//! served until the Lambda runtime stops.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use exactly_once_core::config::SettingsError;
use exactly_once_core::engine::{Engine, RecordHandler, SharedCache};
use exactly_once_core::outbox::Sender;
use exactly_once_core::store::Operator;
use exactly_once_lambda::dead_letter::DeadLetters;
use exactly_once_lambda::telemetry::{self, Traces, TracingExport};
use exactly_once_lambda::{BatchFunction, FromRecord, Settings, StoreKind};
use lambda_runtime::{LambdaEvent, service_fn};
use serde_json::Value;
use tracing::Instrument as _;

use crate::backend::{Backend, Patience};
use crate::error::BoxError;
use crate::{Serve, StartError};

/// Serves `handler` as the function until the Lambda runtime stops, for
/// every batch source its record type takes (Kafka, SQS, Kinesis, DynamoDB
/// Streams: [`exactly_once_lambda::FromRecord`]), each recognised from the
/// event:
/// every variable of docs/configuration.md read and checked at start
/// (a wrong one stops the function with a [`StartError`] that names it).
///
/// - the store `IDEMPOTENCY_STORE` names (`dynamodb`, the default;
///   `postgres`; `redis`), connected as its variables say, its requests
///   counted into each invocation's metrics; on PostgreSQL the idempotency
///   table's schema is checked;
/// - `DUPLICATE_CACHE=redis`: Redis's cache of COMPLETED keys, shared by
///   every container, in front of DynamoDB or PostgreSQL;
/// - `DEAD_LETTER_QUEUE_URL`: parked records forwarded whole to SQS;
/// - `TRACING_EXPORT=otlp`: spans exported over OTLP/HTTP;
/// - the engine's and the edge's settings (keys, fingerprints, ordering,
///   concurrency, the poison policy, ...).
///
/// A part whose cargo feature is off is a start-up error naming the
/// feature. `handler` is generic over the store's effect and runs on every
/// store, or is tied to one store ([`crate::dynamodb::only`]) and stops the
/// function at start on another.
///
/// ```no_run
/// use exactly_once::prelude::*;
///
/// struct Audit;
///
/// impl<E: Send + Sync + 'static> RecordHandler<E> for Audit {
///     type Record = KafkaRecord;
///
///     fn commit_path(&self) -> CommitPath {
///         CommitPath::Locking
///     }
///
///     async fn handle(&self, _: &FencingToken, record: &KafkaRecord) -> Result<Completion<E>, HandlerError> {
///         Ok(Completion::done(format!("{} bytes", record.value.len())))
///     }
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<(), StartError> {
///     exactly_once::run(Audit).await
/// }
/// ```
pub async fn run<H: Serve>(handler: H) -> Result<(), StartError> {
    run_with(async |_: &Backend| Ok::<_, BoxError>(handler)).await
}

/// [`run`], with the handler built once the store is connected: `build`
/// gets the [`Backend`] (its client, its pool), for a handler that writes
/// tables of its own beside the idempotency table (the demo ledger's
/// direct mode). An error of `build` stops the function at start.
///
/// A start-up error is also posted to the Lambda Runtime API
/// (`/runtime/init/error`): Lambda reports it as the invocation's error, and
/// `cargo lambda invoke` prints it instead of waiting.
pub async fn run_with<F, H, E>(build: F) -> Result<(), StartError>
where
    F: AsyncFnOnce(&Backend) -> Result<H, E>,
    H: Serve,
    E: Into<BoxError>,
{
    let served = start_and_serve(build).await;
    match &served {
        // The runtime itself stopped: it has reported what it could.
        Err(StartError::Runtime(_)) | Ok(()) => {}
        Err(err) => crate::init_error::report(err).await,
    }
    served
}

/// Reads the environment, connects the store, builds the handler and
/// serves it.
async fn start_and_serve<F, H, E>(build: F) -> Result<(), StartError>
where
    F: AsyncFnOnce(&Backend) -> Result<H, E>,
    H: Serve,
    E: Into<BoxError>,
{
    let env = |name: &str| std::env::var(name).ok();
    // Every part the environment asks for is in this build.
    crate::features::check(env)?;
    let traces = telemetry::init(tracing_export(env)?).map_err(StartError::Telemetry)?;
    let settings = Settings::from_env()?;
    let backend = Backend::connect(
        settings.store_kind,
        settings.store.clone(),
        Patience::Function,
    )
    .await?;
    let parts = Parts {
        shared_cache: shared_cache(&settings, env)?,
        dead_letters: dead_letters(&settings).await?,
        sender: sender().await,
        traces,
        settings,
    };
    let handler = build(&backend)
        .await
        .map_err(|err| StartError::Handler(err.into()))?;
    match backend {
        #[cfg(feature = "dynamodb")]
        Backend::DynamoDb(store) => serve(store, handler.on_dynamodb()?, parts).await,
        #[cfg(feature = "postgres")]
        Backend::Postgres(store) => serve(store, handler.on_postgres()?, parts).await,
        #[cfg(feature = "redis")]
        Backend::Redis(store) => serve(store, handler.on_redis()?, parts).await,
    }
}

/// What the function is made of, beside its store and handler.
struct Parts {
    settings: Settings,
    shared_cache: Option<Arc<dyn SharedCache>>,
    dead_letters: Option<Arc<dyn DeadLetters>>,
    /// Sends the messages handlers emit.
    sender: Arc<dyn Sender>,
    traces: Option<Traces>,
}

/// Serves the function of `store` and `handler` until the runtime stops:
/// one invocation at a time, or as many at once as Lambda asks
/// (`AWS_LAMBDA_MAX_CONCURRENCY`, Lambda Managed Instances), all sharing
/// the one function: its store's connections, its warm cache, its holds
/// on the items in flight.
async fn serve<S, H>(store: S, handler: H, parts: Parts) -> Result<(), StartError>
where
    S: Operator,
    H: RecordHandler<S::Effect>,
    H::Record: FromRecord,
{
    let mut engine = Engine::new(store, handler, parts.settings.engine);
    if let Some(cache) = parts.shared_cache {
        engine = engine.with_shared_cache(cache);
    }
    engine = engine.with_sender(parts.sender);
    let mut function = BatchFunction::new(engine, parts.settings.function);
    if let Some(queue) = parts.dead_letters {
        function = function.with_dead_letter_queue(queue);
    }
    let function = Arc::new(function);
    let traces = parts.traces.map(Arc::new);
    let cold = Arc::new(AtomicBool::new(true));
    let handler = service_fn(move |event: LambdaEvent<Value>| {
        let (function, traces) = (Arc::clone(&function), traces.clone());
        let span = match traces {
            Some(_) => invocation_span(&event.context, cold.swap(false, Ordering::Relaxed)),
            None => tracing::Span::none(),
        };
        async move {
            // Boxed: the batch's future is deep (lanes, group commits, the
            // outbox's delivery), and a `main` awaiting it inline would
            // need a `recursion_limit` to lay it out.
            let batch: Pin<Box<dyn Future<Output = _> + Send>> =
                Box::pin(function.handle(event).instrument(span));
            let answer = batch.await;
            if let Some(traces) = traces {
                flush(traces).await;
            }
            answer
        }
    });
    // Falls back to one invocation at a time when Lambda does not ask for
    // more (`AWS_LAMBDA_MAX_CONCURRENCY` unset or 1).
    lambda_runtime::run_concurrent(handler)
        .await
        .map_err(StartError::Runtime)
}

/// The invocation's span, parent of its batch's (the attributes
/// `lambda_runtime`'s OpenTelemetry layer gives it, which cannot serve
/// invocations at once).
fn invocation_span(context: &lambda_runtime::Context, cold: bool) -> tracing::Span {
    let name = &context.env_config.function_name;
    tracing::info_span!(
        "Lambda function invocation",
        otel.name = %name,
        faas.name = %name,
        faas.trigger = "pubsub",
        faas.invocation_id = %context.request_id,
        faas.coldstart = cold,
    )
}

/// Exports the spans of the invocation that just ended before Lambda may
/// freeze the container, without blocking the other invocations' threads.
#[cfg(feature = "opentelemetry")]
async fn flush(traces: Arc<Traces>) {
    let flushed = tokio::task::spawn_blocking(move || traces.force_flush()).await;
    if let Ok(Err(err)) = flushed {
        tracing::warn!(error = %err, "spans not exported");
    }
}

/// Nothing to export without the `opentelemetry` feature.
#[cfg(not(feature = "opentelemetry"))]
async fn flush(traces: Arc<Traces>) {
    match *traces {}
}

/// Where spans go (`TRACING_EXPORT`; this build can send them there:
/// [`crate::features::check`]).
fn tracing_export(env: impl Fn(&str) -> Option<String>) -> Result<TracingExport, StartError> {
    let text = env("TRACING_EXPORT").unwrap_or_default();
    let export = TracingExport::parse(&text).map_err(|reason| SettingsError {
        variable: "TRACING_EXPORT",
        reason,
    })?;
    Ok(export)
}

/// The cache of COMPLETED keys every container shares
/// (`DUPLICATE_CACHE=redis`), in front of DynamoDB or PostgreSQL.
fn shared_cache(
    settings: &Settings,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Arc<dyn SharedCache>>, StartError> {
    #[cfg(feature = "redis")]
    let cache = exactly_once_redis::RedisDuplicateCache::from_lookup(&settings.store, env)?
        .map(|cache| Arc::new(cache) as Arc<dyn SharedCache>);
    // Without the feature, DUPLICATE_CACHE=redis stopped the start
    // (crate::features::check).
    #[cfg(not(feature = "redis"))]
    let cache: Option<Arc<dyn SharedCache>> = {
        let _ = env;
        None
    };
    if cache.is_some() && settings.store_kind == StoreKind::Redis {
        return Err(SettingsError {
            variable: "DUPLICATE_CACHE",
            reason: "the cache sits in front of DynamoDB or PostgreSQL; with \
                     IDEMPOTENCY_STORE=redis the store itself answers duplicates"
                .to_owned(),
        }
        .into());
    }
    Ok(cache)
}

/// What sends the messages handlers emit: a sender of each destination
/// kind this build has; a message to another kind has its record reported,
/// the log naming the feature.
async fn sender() -> Arc<dyn Sender> {
    #[cfg(any(
        feature = "sqs",
        feature = "sns",
        feature = "eventbridge",
        feature = "kinesis",
        feature = "kafka"
    ))]
    let destinations = crate::aws::destinations().await;
    #[cfg(not(any(
        feature = "sqs",
        feature = "sns",
        feature = "eventbridge",
        feature = "kinesis",
        feature = "kafka"
    )))]
    let destinations = exactly_once_lambda::destinations::Destinations::new();
    Arc::new(destinations)
}

/// The SQS queue parked records go to (`DEAD_LETTER_QUEUE_URL`).
async fn dead_letters(settings: &Settings) -> Result<Option<Arc<dyn DeadLetters>>, StartError> {
    let Some(url) = &settings.function.dead_letter_queue_url else {
        return Ok(None);
    };
    #[cfg(feature = "sqs")]
    {
        let client = aws_sdk_sqs::Client::new(&crate::aws::sdk_config().await);
        let queue = exactly_once_lambda::dead_letter::DeadLetterQueue::new(client, url);
        Ok(Some(Arc::new(queue)))
    }
    // Without the feature, a queue stopped the start
    // (crate::features::check).
    #[cfg(not(feature = "sqs"))]
    {
        let _ = url;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_tracing_export_names_the_variable() {
        let env = |name: &str| (name == "TRACING_EXPORT").then(|| "xray".to_owned());
        match tracing_export(env) {
            Err(StartError::Settings(err)) => assert_eq!(err.variable, "TRACING_EXPORT"),
            other => panic!("expected a settings error, got {other:?}"),
        }
    }
}
