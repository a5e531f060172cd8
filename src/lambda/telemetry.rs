//! Traces, off unless `TRACING_EXPORT=otlp`: one span per invocation (from
//! `lambda_runtime`'s OpenTelemetry layer), one per batch, one per record,
//! exported over OTLP/HTTP (`OTEL_EXPORTER_OTLP_ENDPOINT`, default
//! `http://localhost:4318`: the ADOT Lambda layer's collector). A record
//! that carries a W3C `traceparent` header continues the producer's trace.
//!
//! Spans name a record by its coordinates and its key's hash, never the key
//! or the payload.

use lambda_runtime::tracing::subscriber::Layer;
use lambda_runtime::tracing::subscriber::filter::{EnvFilter, LevelFilter};
use lambda_runtime::tracing::subscriber::layer::SubscriberExt as _;
use lambda_runtime::tracing::subscriber::{Registry, fmt};
use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::{Span, Subscriber, field};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::decode::Coordinates;
use super::record::KafkaRecord;
use super::report::key_hash;
use crate::engine::Outcome;

/// Where spans go (`TRACING_EXPORT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TracingExport {
    /// No spans (the default): logs only.
    #[default]
    Off,
    /// Spans exported with OTLP over HTTP.
    Otlp,
}

impl TracingExport {
    /// Parses `TRACING_EXPORT`: `off` (or empty) or `otlp`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "" | "off" => Ok(Self::Off),
            "otlp" => Ok(Self::Otlp),
            other => Err(format!(
                "unknown TRACING_EXPORT {other:?}; expected off or otlp"
            )),
        }
    }

    /// From the environment (before [`init`], which [`super::Settings`]'
    /// errors are logged through).
    pub fn from_env() -> Result<Self, String> {
        Self::parse(std::env::var("TRACING_EXPORT").as_deref().unwrap_or(""))
    }
}

/// Installs the function's subscriber: Lambda's default logging, plus the
/// span exporter with [`TracingExport::Otlp`]. The provider returned must
/// be flushed after each invocation (`lambda_runtime`'s
/// `OpenTelemetryLayer` does it).
pub fn init(export: TracingExport) -> Result<Option<SdkTracerProvider>, String> {
    match export {
        TracingExport::Off => {
            lambda_runtime::tracing::init_default_subscriber();
            Ok(None)
        }
        TracingExport::Otlp => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .build()
                .map_err(|err| format!("the OTLP span exporter: {err}"))?;
            let name = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_default();
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(
                    opentelemetry_sdk::Resource::builder()
                        .with_service_name(name)
                        .build(),
                )
                .build();
            tracing::subscriber::set_global_default(subscriber(&provider))
                .map_err(|err| format!("the tracing subscriber: {err}"))?;
            Ok(Some(provider))
        }
    }
}

/// Lambda's log lines (JSON under `AWS_LAMBDA_LOG_FORMAT=JSON`, level from
/// `AWS_LAMBDA_LOG_LEVEL`), and every span sent to `provider`.
pub fn subscriber(provider: &SdkTracerProvider) -> impl Subscriber + Send + Sync + use<> {
    let level = std::env::var("AWS_LAMBDA_LOG_LEVEL")
        .or_else(|_| std::env::var("RUST_LOG"))
        .ok()
        .and_then(|level| level.parse::<LevelFilter>().ok())
        .unwrap_or(LevelFilter::INFO);
    let filter = EnvFilter::builder()
        .with_default_directive(level.into())
        .from_env_lossy();
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    // The log lines stay as without tracing: no span fields in them.
    let logs = fmt::layer().with_target(false).without_time();
    let logs: Box<dyn Layer<Registry> + Send + Sync> = if json {
        logs.json()
            .with_current_span(false)
            .with_span_list(false)
            .boxed()
    } else {
        logs.boxed()
    };
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("msk-exactly-once"))
        .boxed();
    Registry::default().with(vec![logs, spans]).with(filter)
}

/// The span a record's work runs in: its coordinates and key hash, child of
/// the producer's span when the record has a `traceparent` header, else of
/// the batch's.
pub fn record_span(at: &Coordinates, record: &KafkaRecord) -> Span {
    let span = tracing::info_span!(
        "kafka.record",
        otel.name = %format!("{} process", record.topic),
        otel.kind = "consumer",
        otel.status_code = field::Empty,
        messaging.system = "kafka",
        messaging.operation.type = "process",
        messaging.destination.name = %record.topic,
        messaging.destination.partition.id = %record.partition,
        messaging.kafka.offset = at.offset,
        idempotency.key_hash = field::Empty,
        exactly_once.outcome = field::Empty,
        exactly_once.reported = field::Empty,
    );
    if record.header("traceparent").is_some() {
        let parent = TraceContextPropagator::new().extract(&Headers(record));
        // Fails only without the OpenTelemetry layer, where spans go nowhere.
        let _ = span.set_parent(parent);
    }
    span
}

/// Names the record's idempotency key on its span, by its hash.
pub fn record_key(span: &Span, key: Option<&str>) {
    if let Some(key) = key {
        span.record("idempotency.key_hash", key_hash(key));
    }
}

/// Records what became of the record on its span.
pub fn finish_record(span: &Span, outcome: &Outcome, reported: bool) {
    span.record("exactly_once.outcome", outcome.name());
    span.record("exactly_once.reported", reported);
    if reported || outcome.is_failed() {
        span.record("otel.status_code", "ERROR");
    }
}

/// A record's headers as the W3C propagator reads them (`traceparent`,
/// `tracestate`; the last of a repeated name, as Kafka's `lastHeader`).
struct Headers<'a>(&'a KafkaRecord);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .header(key)
            .and_then(|value| std::str::from_utf8(value).ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .headers
            .iter()
            .map(|(name, _)| name.as_str())
            .collect()
    }
}
