//! The OTLP/HTTP span exporter (feature `opentelemetry`), and the
//! producer's trace a record continues.

use lambda_runtime::tracing::subscriber::Layer;
use lambda_runtime::tracing::subscriber::filter::{EnvFilter, LevelFilter};
use lambda_runtime::tracing::subscriber::layer::SubscriberExt as _;
use lambda_runtime::tracing::subscriber::{Registry, fmt};
use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::{Span, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::sources::Record;

/// The OTLP/HTTP exporter (`OTEL_EXPORTER_OTLP_ENDPOINT`), installed with
/// Lambda's log lines as the global subscriber.
pub(super) fn init() -> Result<SdkTracerProvider, String> {
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
    Ok(provider)
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

/// Makes `span` a child of the producer's span, when `record` carries a
/// W3C `traceparent` (a Kafka header, an SQS message attribute).
pub(super) fn continue_trace(span: &Span, record: &Record) {
    if record.attribute("traceparent").is_some() {
        let parent = TraceContextPropagator::new().extract(&Attributes(record));
        // Fails only without the OpenTelemetry layer, where spans go nowhere.
        let _ = span.set_parent(parent);
    }
}

/// A record's attributes as the W3C propagator reads them (`traceparent`,
/// `tracestate`; the last of a repeated Kafka header, as its `lastHeader`).
struct Attributes<'a>(&'a Record);

impl Extractor for Attributes<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .attribute(key)
            .and_then(|value| std::str::from_utf8(value).ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.attribute_names()
    }
}
