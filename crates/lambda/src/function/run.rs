//! Running the batch: its records tagged with their keys and fingerprints,
//! in lanes as `ORDERING_MODE` says, under the batch's span; the engine runs
//! them before the deadline, this invocation's store requests counted.

use std::collections::HashMap;
use std::sync::Arc;

use lambda_runtime::Context;
use tracing::{Instrument as _, Span, field};

use exactly_once_core::engine::{Deadline, Message, RecordHandler, RecordOutcome, Tagged, Work};
use exactly_once_core::store::Store;
use exactly_once_core::store::requests::{self, RequestCounter};

use super::BatchFunction;
use crate::sources::{Batch, Coordinates, Decoded, FromRecord, Record, Source};
use crate::telemetry::{self, TracingExport};

/// A record's coordinates and, if it has one, its idempotency key.
type Label = (Coordinates, Option<String>);

/// A batch's lanes of tagged records, and each record's span.
type TaggedLanes<R> = (Vec<Vec<Tagged<Label, R>>>, HashMap<Coordinates, Span>);

/// A batch the engine ran: what became of each record, and what the
/// invocation's record reads. Its spans end when it is dropped, at the end
/// of the invocation: the records' first, then the batch's.
pub(super) struct Ran {
    /// The event's source (`None` for an event without records).
    pub(super) source: Option<Source>,
    /// Each record's coordinates, key and outcome, in the lanes' order.
    pub(super) results: Vec<(Coordinates, Option<String>, RecordOutcome)>,
    /// Whether the store was unavailable.
    pub(super) store_unavailable: bool,
    /// This invocation's store requests alone, however many others the
    /// container serves at once.
    pub(super) requests: RequestCounter,
    /// With tracing, each record's span.
    pub(super) spans: HashMap<Coordinates, Span>,
    /// The batch's span (none without tracing).
    pub(super) batch_span: Span,
}

impl<H, S> BatchFunction<H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
    H::Record: FromRecord,
{
    /// Runs `batch` under its span, before the invocation's deadline.
    pub(super) async fn run(&self, batch: Batch, context: &Context) -> Ran {
        let requests = RequestCounter::default();
        let traced = self.settings.tracing != TracingExport::Off;
        let batch_span = match traced {
            true => batch_span(&batch),
            false => Span::none(),
        };
        let holder = holder(context);
        let source = batch.source;
        let (lanes, spans) = batch_span.in_scope(|| self.tag(batch.units, holder, traced));
        let lock_timeout = self.engine.store().config().lock_timeout;
        self.fit
            .check(context.deadline, lock_timeout, self.settings.safety_margin);
        let deadline = Deadline::new(context.deadline, self.settings.safety_margin);
        let ran = requests::counted(
            requests.clone(),
            self.engine
                .run_batch(lanes, deadline)
                .instrument(batch_span.clone()),
        )
        .await;
        let results = ran
            .outcomes
            .into_iter()
            .map(|((at, key), result)| (at, key, result))
            .collect();
        Ran {
            source,
            results,
            store_unavailable: ran.store_unavailable,
            requests,
            spans,
            batch_span,
        }
    }

    /// The records in lanes, each tagged with its coordinates and key (for
    /// the log); with tracing, each record's span, to record its outcome on.
    fn tag(
        &self,
        units: Vec<Vec<Decoded>>,
        holder: Option<Arc<str>>,
        traced: bool,
    ) -> TaggedLanes<H::Record> {
        let mut spans = HashMap::new();
        let lanes = units
            .into_iter()
            .flat_map(|records| self.settings.ordering.lanes(records))
            .map(|lane| {
                lane.into_iter()
                    .map(|(at, record)| {
                        let span = match (traced, &record) {
                            (true, Ok(record)) => telemetry::record_span(&at, record),
                            _ => Span::none(),
                        };
                        let message =
                            self.message(at.clone(), record, span.clone(), holder.clone());
                        let key = message.as_ref().ok().map(|work| work.key.clone());
                        if traced {
                            telemetry::record_key(&span, key.as_deref());
                            spans.insert(at.clone(), span);
                        }
                        ((at, key), message)
                    })
                    .collect()
            })
            .collect();
        (lanes, spans)
    }

    /// A decoded record as the engine runs it: its key and fingerprint, or
    /// why it has none (an error of that record only).
    fn message(
        &self,
        at: Coordinates,
        record: Result<Record, String>,
        span: Span,
        holder: Option<Arc<str>>,
    ) -> Message<H::Record> {
        let record = record?;
        let (keys, fingerprint) = (&self.settings.keys, &self.settings.fingerprint);
        let body = record.body();
        let json =
            (keys.reads_json() || fingerprint.reads_json()).then(|| serde_json::from_slice(&body));
        let payload_hash = fingerprint.of(&body, json.as_ref())?;
        let key = keys.key_for(&record, &json, &at, &payload_hash)?;
        drop(body);
        let source = record.source();
        let record = H::Record::from_record(record)
            .ok_or_else(|| format!("the handler takes no {source} record"))?;
        Ok(Work {
            key,
            payload_hash,
            origin: at.to_string(),
            record,
            span,
            holder,
        })
    }
}

/// The batch's span: its source and size; what it reported and the store
/// requests it made are recorded on it at the end.
fn batch_span(batch: &Batch) -> Span {
    let source = batch.source.map_or("", Source::name);
    tracing::info_span!(
        target: super::TARGET,
        "messaging.batch",
        otel.name = %format!("{source} batch"),
        messaging.batch.message_count = batch.records().count(),
        exactly_once.source = source,
        exactly_once.reported = field::Empty,
        exactly_once.store_requests = field::Empty,
    )
}

/// The invocation as owner tokens name it: `<request id>/<function
/// version>/<log stream>` (the log stream is the container; `-` for what
/// the context lacks); none without a request id.
fn holder(context: &Context) -> Option<Arc<str>> {
    if context.request_id.is_empty() {
        return None;
    }
    let or_dash = |text: &str| match text {
        "" => "-".to_owned(),
        text => text.to_owned(),
    };
    let config = &context.env_config;
    let holder = format!(
        "{}/{}/{}",
        context.request_id,
        or_dash(&config.version),
        or_dash(&config.log_stream)
    );
    Some(holder.into())
}
