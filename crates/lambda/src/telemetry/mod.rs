//! Traces, off unless `TRACING_EXPORT=otlp`: one span per invocation (from
//! `lambda_runtime`'s OpenTelemetry layer), one per batch, one per record,
//! exported over OTLP/HTTP (`OTEL_EXPORTER_OTLP_ENDPOINT`, default
//! `http://localhost:4318`: the ADOT Lambda layer's collector). A record
//! that carries a W3C `traceparent` header continues the producer's trace.
//!
//! Spans name a record by its coordinates and its key's hash, never the key
//! or the payload.

#[cfg(feature = "opentelemetry")]
mod otlp;

#[cfg(feature = "opentelemetry")]
pub use otlp::subscriber;

use tracing::{Span, field};

use crate::report::key_hash;
use crate::sources::{Coordinates, Record};
use exactly_once_core::engine::Outcome;

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
}

/// A tracer provider whose spans are flushed after each invocation
/// (`lambda_runtime`'s `OpenTelemetryLayer` does it).
#[cfg(feature = "opentelemetry")]
pub type Traces = opentelemetry_sdk::trace::SdkTracerProvider;

/// Nothing to flush: without the `opentelemetry` feature spans go nowhere.
#[cfg(not(feature = "opentelemetry"))]
pub type Traces = std::convert::Infallible;

/// Installs the function's subscriber: Lambda's default logging, plus the
/// span exporter with [`TracingExport::Otlp`] (feature `opentelemetry`;
/// without it, an error naming the feature). The provider returned must be
/// flushed after each invocation.
pub fn init(export: TracingExport) -> Result<Option<Traces>, String> {
    match export {
        TracingExport::Off => {
            lambda_runtime::tracing::init_default_subscriber();
            Ok(None)
        }
        #[cfg(feature = "opentelemetry")]
        TracingExport::Otlp => otlp::init().map(Some),
        #[cfg(not(feature = "opentelemetry"))]
        TracingExport::Otlp => Err("TRACING_EXPORT=otlp needs the `opentelemetry` feature of \
             exactly-once, which this build does not have"
            .to_owned()),
    }
}

/// The span a record's work runs in: its coordinates and key hash, child of
/// the producer's span when the record carries a `traceparent` (a Kafka
/// header, an SQS message attribute, a RabbitMQ header, an ActiveMQ
/// property), else of the batch's. Its attributes
/// are OpenTelemetry's messaging conventions for the record's source.
pub fn record_span(at: &Coordinates, record: &Record) -> Span {
    let system = record.source().edge().messaging_system;
    let destination = record.destination();
    let span = tracing::info_span!(
        "messaging.record",
        otel.name = %format!("{destination} process"),
        otel.kind = "consumer",
        otel.status_code = field::Empty,
        messaging.system = system,
        messaging.operation.type = "process",
        messaging.destination.name = %destination,
        messaging.destination.partition.id = field::Empty,
        messaging.kafka.offset = field::Empty,
        messaging.message.id = field::Empty,
        idempotency.key_hash = field::Empty,
        exactly_once.outcome = field::Empty,
        exactly_once.reported = field::Empty,
    );
    match record {
        Record::Kafka(kafka) => {
            span.record("messaging.destination.partition.id", kafka.partition);
            span.record("messaging.kafka.offset", at.offset);
        }
        _ => {
            span.record("messaging.destination.partition.id", at.partition.as_str());
            span.record("messaging.message.id", at.id.as_deref().unwrap_or_default());
        }
    }
    #[cfg(feature = "opentelemetry")]
    otlp::continue_trace(&span, record);
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
