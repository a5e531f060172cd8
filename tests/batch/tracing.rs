//! `TRACING_EXPORT=otlp`: the spans of an invocation, read back from an
//! in-process exporter. The batch's span, one per record (coordinates, key
//! hash, outcome), the handler's own spans inside its record's, and the
//! producer's trace continued from a record's W3C `traceparent` header.

use crate::support;

use exactly_once::engine::{
    CommitPath, Completion, Engine, EngineConfig, FencingToken, HandlerError, RecordHandler,
};
use exactly_once::lambda::telemetry::{self, TracingExport};
use exactly_once::lambda::{BatchFunction, FunctionSettings, KafkaRecord};
use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use support::msk::{
    Rec, commit_path, event, header, header_keys, invoke, payment, record_json, reported,
};

const PRODUCER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_SPAN: &str = "00f067aa0ba902b7";

/// Does what the ledger would, inside a span of its own (a downstream call).
struct Charge;

impl<E: Send + 'static> RecordHandler<E> for Charge {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        commit_path()
    }

    async fn handle(
        &self,
        _: &FencingToken,
        _: &KafkaRecord,
    ) -> Result<Completion<E>, HandlerError> {
        let _charge = tracing::info_span!("charge").entered();
        Ok(Completion::done("charged"))
    }
}

fn attribute(span: &SpanData, name: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == name)
        .map(|kv| kv.value.to_string())
}

/// The values of `names` on `span`, in order (`-` for an absent one).
fn attributes(span: &SpanData, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|name| attribute(span, name).unwrap_or_else(|| "-".into()))
        .collect()
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// Spans go to an in-process exporter (this thread, while the guard lives).
struct Exported {
    exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
    _subscriber: tracing::subscriber::DefaultGuard,
}

impl Exported {
    fn new() -> Self {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let _subscriber = tracing::subscriber::set_default(telemetry::subscriber(&provider));
        Self {
            exporter,
            provider,
            _subscriber,
        }
    }

    fn spans(&self) -> Vec<SpanData> {
        self.provider.force_flush().expect("flush");
        self.exporter.get_finished_spans().expect("spans")
    }
}

/// The function with `Charge` on DynamoDB Local, spans as `tracing` says.
async fn function(
    tracing: TracingExport,
) -> BatchFunction<Charge, exactly_once::dynamodb::DynamoDbStore> {
    let store = support::store(std::time::Duration::from_secs(30)).await;
    let settings = FunctionSettings {
        tracing,
        ..support::msk::settings(header_keys())
    };
    BatchFunction::new(
        Engine::new(store, Charge, EngineConfig::default()),
        settings,
    )
    .without_metrics()
}

#[tokio::test]
async fn an_invocation_exports_its_batch_its_records_and_the_producers_parent() {
    let exported = Exported::new();
    let function = function(TracingExport::Otlp).await;
    let traced = {
        let mut record = record_json("payments-0", &payment(7, "key-traced", "acc", 5));
        let parent = format!("00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01");
        record["headers"]
            .as_array_mut()
            .expect("headers")
            .push(header("traceparent", parent.as_bytes()));
        record
    };
    let keyless = Rec {
        key: None,
        ..payment(8, "unused", "acc", 5)
    };
    let mut event = event(vec![("payments-0", vec![keyless])]);
    event["records"]["payments-0"]
        .as_array_mut()
        .expect("records")
        .insert(0, traced);
    let response = invoke(&function, &event).await;
    assert_eq!(reported(&response), ["payments-0@8"]);
    let spans = exported.spans();

    let batch = named(&spans, "kafka batch");
    assert_eq!(batch.len(), 1, "one batch span");
    let batch = batch[0];
    assert_eq!(
        attributes(
            batch,
            &["messaging.batch.message_count", "exactly_once.reported"]
        ),
        ["2", "1"]
    );

    let records = named(&spans, "payments process");
    let at = |offset: &str| {
        *records
            .iter()
            .find(|s| attribute(s, "messaging.kafka.offset").as_deref() == Some(offset))
            .unwrap_or_else(|| panic!("a span for offset {offset}"))
    };
    // The traced record continues the producer's trace.
    let first = at("7");
    assert_eq!(first.span_kind, SpanKind::Consumer);
    assert_eq!(
        first.span_context.trace_id(),
        TraceId::from_hex(PRODUCER_TRACE).expect("hex")
    );
    assert_eq!(
        first.parent_span_id,
        SpanId::from_hex(PRODUCER_SPAN).expect("hex")
    );
    assert!(first.parent_span_is_remote);
    assert_eq!(
        attributes(
            first,
            &[
                "exactly_once.outcome",
                "messaging.destination.name",
                "messaging.destination.partition.id"
            ]
        ),
        ["processed", "payments", "0"]
    );
    let key_hash = attribute(first, "idempotency.key_hash").expect("a key hash");
    assert!(key_hash.starts_with("sha256:") && !key_hash.contains("key-traced"));
    assert_eq!(first.status, Status::Unset);

    // The record without a key: in the batch's trace, under its span, failed.
    let second = at("8");
    assert_eq!(
        second.span_context.trace_id(),
        batch.span_context.trace_id()
    );
    assert_eq!(second.parent_span_id, batch.span_context.span_id());
    assert_eq!(
        attributes(
            second,
            &[
                "exactly_once.outcome",
                "exactly_once.reported",
                "idempotency.key_hash"
            ]
        ),
        ["invalid", "true", "-"]
    );
    assert!(matches!(second.status, Status::Error { .. }));

    // The handler's span runs inside its record's.
    let charge = named(&spans, "charge");
    assert_eq!(charge.len(), 1, "the handler ran once");
    assert_eq!(charge[0].parent_span_id, first.span_context.span_id());
    assert_eq!(
        charge[0].span_context.trace_id(),
        first.span_context.trace_id()
    );
}

#[tokio::test]
async fn without_tracing_no_span_is_made() {
    let exported = Exported::new();
    let function = function(TracingExport::Off).await;
    let event = event(vec![("payments-0", vec![payment(1, "k-1", "acc", 5)])]);
    assert_eq!(
        reported(&invoke(&function, &event).await),
        Vec::<String>::new()
    );
    let names: Vec<String> = exported
        .spans()
        .iter()
        .map(|s| s.name.to_string())
        .collect();
    assert_eq!(names, ["charge"], "only the handler's own span");
}
