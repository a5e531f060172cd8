//! The composition root: the function as the environment configures it,
//! served until the Lambda runtime stops.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use exactly_once_core::config::SettingsError;
use exactly_once_lambda::telemetry::{self, Traces, TracingExport};
use lambda_runtime::{LambdaEvent, service_fn};
use serde_json::Value;
use tracing::Instrument as _;

use crate::backend::Backend;
use crate::error::BoxError;
use crate::{Function, Serve, StartError};

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
/// direct mode). An error of `build` stops the function at start. A test
/// builds the same function with [`Function::from_vars_with`].
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
    let function = Function::assemble(env, build).await?;
    serve(function, traces).await
}

/// Serves `function` until the runtime stops: one invocation at a time, or
/// as many at once as Lambda asks (`AWS_LAMBDA_MAX_CONCURRENCY`, Lambda
/// Managed Instances), all sharing the one function: its store's
/// connections, its warm cache, its holds on the items in flight.
async fn serve(function: Function, traces: Option<Traces>) -> Result<(), StartError> {
    let function = Arc::new(function);
    let traces = traces.map(Arc::new);
    let cold = Arc::new(AtomicBool::new(true));
    let handler = service_fn(move |event: LambdaEvent<Value>| {
        let (function, traces) = (Arc::clone(&function), traces.clone());
        let span = match traces {
            Some(_) => invocation_span(&event.context, cold.swap(false, Ordering::Relaxed)),
            None => tracing::Span::none(),
        };
        async move {
            let answer = function.handle(event).instrument(span).await;
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
