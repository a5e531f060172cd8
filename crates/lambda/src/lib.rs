//! The Lambda edge for the batch sources Lambda delivers at least once:
//! Amazon MSK and self-managed Kafka, SQS (standard and FIFO), Kinesis,
//! DynamoDB Streams and Amazon MQ (RabbitMQ, ActiveMQ). Decode the event (the
//! source recognised from it), derive keys, run the engine, answer with the
//! source's partial batch response (Amazon MQ, which has none: an invocation
//! error while a message is unfinished, so the batch comes again whole).

#![deny(missing_docs)]

pub mod dead_letter;
pub mod destinations;
mod encode;
mod fingerprint;
pub mod keys;
mod record;
mod report;
mod response;
pub mod schema;
mod settings;
pub mod sources;
mod stuck_check;
pub mod telemetry;

use std::collections::HashMap;
use std::sync::Arc;

use lambda_runtime::LambdaEvent;
use serde_json::Value;
use tracing::{Instrument as _, Span, field};

use dead_letter::{DeadLetters, Parked};
pub use encode::encode_event;
use exactly_once_core::clock::now_ms;
use exactly_once_core::engine::{
    Deadline, Engine, Message, Parking, RecordHandler, RecordOutcome, Swept, Tagged, Work,
};
use exactly_once_core::store::requests::{self, RequestCounter};
use exactly_once_core::store::{Listing, Operator, Store, StoreError};
pub use fingerprint::Fingerprint;
pub use record::{KafkaRecord, SchemaMetadata};
use report::{InvocationReport, StoreRequests};
pub use report::{KeyLogging, METRICS_NAMESPACE, key_hash, metric_names};
pub use response::{BatchItemFailure, BatchResponse, ItemIdentifier};
pub use settings::{DEFAULT_SAFETY_MARGIN, ENV_VARS, FunctionSettings, Settings, StoreKind};
pub use sources::{
    ActiveMqMessage, BasicProperties, Batch, Coordinates, Decoded, EventError, FromRecord,
    KinesisRecord, MessageAttribute, PropertyValue, RabbitMqMessage, Record, Source, SqsMessage,
    StreamRecord, decode_event,
};
pub use stuck_check::{SWEEP_AFTER, StartedKeys};
use telemetry::TracingExport;

/// Why an invocation failed as a whole (Lambda then retries the batch).
#[derive(Debug, thiserror::Error)]
pub enum InvocationError {
    #[error(transparent)]
    /// The event itself cannot be processed.
    Event(#[from] EventError),
    /// DynamoDB was unavailable and no record could be finished.
    #[error(
        "the idempotency store is unavailable: no record of the batch could be processed ({reported} reported)"
    )]
    StoreUnavailable {
        /// Records reported.
        reported: usize,
    },
    /// The scheduled stuck-key check could not list the STARTED keys.
    #[error("the stuck-key check could not list the STARTED keys: {0}")]
    StuckKeyCheck(StoreError),
    /// The scheduled sweeper could not list or clear the unsent messages.
    #[error("the sweeper of unsent messages failed: {0}")]
    Sweep(StoreError),
    /// Messages of a source without a partial batch response (Amazon MQ)
    /// were left unfinished: the batch fails whole, and Lambda delivers it
    /// again (the broker's redelivery limit and dead-letter queue apply).
    #[error(
        "{left} of {records} {source} messages not finished ({why}); {source} has no partial \
         batch response, so the batch fails whole: Lambda delivers it again, and the finished \
         messages come as duplicates, skipped",
        source = .event_source.title()
    )]
    BatchNotFinished {
        /// The batch's source.
        event_source: Source,
        /// Messages left unfinished.
        left: usize,
        /// Messages of the batch.
        records: usize,
        /// The outcomes of the ones left, counted (`2 in-progress, 1 failed`).
        why: String,
    },
}

impl From<InvocationError> for lambda_runtime::Diagnostic {
    fn from(err: InvocationError) -> Self {
        let error_type = match &err {
            InvocationError::Event(EventError::UnknownSource(_)) => "UnknownEventSource",
            InvocationError::Event(EventError::NotServed { .. }) => "EventSourceNotServed",
            InvocationError::Event(EventError::Malformed(_)) => "MalformedEvent",
            InvocationError::StoreUnavailable { .. } => "StoreUnavailable",
            InvocationError::StuckKeyCheck(_) => "StuckKeyCheckFailed",
            InvocationError::Sweep(_) => "SweepFailed",
            InvocationError::BatchNotFinished { .. } => "BatchNotFinished",
        };
        Self {
            error_type: error_type.into(),
            error_message: err.to_string(),
        }
    }
}

/// How records of one ordering unit (a Kafka partition, an SQS FIFO
/// message group, a shard) may run relative to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderingMode {
    /// Strict order within the unit, one record at a time (the default).
    Partition,
    /// Records with the same key ([`Record::key`]: Kafka's record key,
    /// Kinesis's partition key, DynamoDB Streams' item keys) in order;
    /// different keys concurrently (records without a key form one group).
    Key,
    /// Every record on its own.
    Unordered,
}

impl OrderingMode {
    /// Parses `ORDERING_MODE`: `partition`, `key` or `none`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "partition" => Ok(Self::Partition),
            "key" => Ok(Self::Key),
            "none" => Ok(Self::Unordered),
            other => Err(format!(
                "unknown ordering mode {other:?}; expected partition, key or none"
            )),
        }
    }
}

/// One invocation's answer, and what became of each record.
#[derive(Debug)]
pub struct Invocation {
    /// The event's source (`None` for an event without records).
    pub source: Option<Source>,
    /// The records to deliver again, as the partial batch response names
    /// them.
    pub response: BatchResponse,
    /// Every record of the event, in the lanes' order.
    pub records: Vec<RecordReport>,
}

impl Invocation {
    /// What Lambda is answered: the partial batch response, or, for a
    /// source without one (Amazon MQ) with a message left unfinished,
    /// [`InvocationError::BatchNotFinished`], so the batch comes again whole.
    pub fn into_answer(self) -> Result<BatchResponse, InvocationError> {
        let source = match self.source {
            Some(source) if !source.has_partial_batch_response() => source,
            _ => return Ok(self.response),
        };
        let mut left = std::collections::BTreeMap::<&str, usize>::new();
        for record in self.records.iter().filter(|record| record.reported) {
            *left.entry(record.outcome).or_default() += 1;
        }
        if left.is_empty() {
            return Ok(self.response);
        }
        let why = left
            .iter()
            .map(|(outcome, count)| format!("{count} {outcome}"))
            .collect::<Vec<_>>()
            .join(", ");
        Err(InvocationError::BatchNotFinished {
            event_source: source,
            left: left.values().sum(),
            records: self.records.len(),
            why,
        })
    }
}

/// What became of one record (what its log line says).
#[derive(Debug, Clone)]
pub struct RecordReport {
    /// Where the record sits.
    pub at: Coordinates,
    /// The outcome's name (`processed`, `duplicate`, `failed`, ...).
    pub outcome: &'static str,
    /// Why it did not finish, if so (never payload content).
    pub detail: Option<String>,
    /// Listed in the response's failures.
    pub reported: bool,
}

/// A record's coordinates and, if it has one, its idempotency key.
type Label = (Coordinates, Option<String>);

/// A batch's lanes of tagged records, and each record's span.
type TaggedLanes<R> = (Vec<Vec<Tagged<Label, R>>>, HashMap<Coordinates, Span>);

/// Where a function's EMF documents go, one JSON line each.
pub type MetricsWriter = Arc<dyn Fn(&str) + Send + Sync>;

/// The function: one per container, shared by every invocation. It serves
/// every source its handler's record type takes ([`FromRecord`]), each
/// recognised from the event.
pub struct BatchFunction<H, S> {
    engine: Arc<Engine<H, S>>,
    settings: FunctionSettings,
    /// Where each invocation's EMF documents go (stdout by default).
    metrics: Option<MetricsWriter>,
    /// Where parked records are forwarded, whole.
    dead_letters: Option<Arc<dyn DeadLetters>>,
}

impl<H, S> BatchFunction<H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
    H::Record: FromRecord,
{
    /// The function of `engine`, reading events as `settings` say.
    pub fn new(engine: Engine<H, S>, settings: FunctionSettings) -> Self {
        Self {
            engine: Arc::new(engine),
            settings,
            metrics: Some(Arc::new(|line: &str| println!("{line}"))),
            dead_letters: None,
        }
    }

    /// Forwards every parked record (`POISON_POLICY=park`) to `queue` (an
    /// SQS `dead_letter::DeadLetterQueue`, feature `sqs`, or your own),
    /// payload included; a record that cannot be sent is reported instead.
    pub fn with_dead_letter_queue(mut self, queue: impl DeadLetters) -> Self {
        self.dead_letters = Some(Arc::new(queue));
        self
    }

    /// Prints no EMF document (benchmarks and tests, where stdout is not
    /// read by CloudWatch).
    pub fn without_metrics(mut self) -> Self {
        self.metrics = None;
        self
    }

    /// Hands each EMF document, one JSON line, to `writer` instead of
    /// printing it (tests read them; a wrapper may add its own).
    pub fn with_metrics_writer(mut self, writer: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.metrics = Some(Arc::new(writer));
        self
    }

    /// The engine it runs.
    pub fn engine(&self) -> &Engine<H, S> {
        &self.engine
    }

    /// [`Self::handle`], with what became of each record (for tests, custom
    /// metrics, or a wrapper of the runtime).
    pub async fn invoke(&self, event: LambdaEvent<Value>) -> Result<Invocation, InvocationError> {
        let mut reports = Vec::new();
        let mut report = InvocationReport::new();
        // This invocation's store requests alone, however many others the
        // container serves at once.
        let counter = RequestCounter::default();
        let batch = sources::decode_event(&event.payload)?;
        if let Some(source) = batch.source {
            self.serves(source)?;
        }
        let traced = self.settings.tracing != TracingExport::Off;
        let batch_span = match traced {
            true => {
                let source = batch.source.map_or("", Source::name);
                tracing::info_span!(
                    "messaging.batch",
                    otel.name = %format!("{source} batch"),
                    messaging.batch.message_count = batch.records().count(),
                    exactly_once.source = source,
                    exactly_once.reported = field::Empty,
                    exactly_once.store_requests = field::Empty,
                )
            }
            false => Span::none(),
        };
        let holder = holder(&event.context);
        let (lanes, spans) = batch_span.in_scope(|| self.tag(batch.units, holder, traced));
        let deadline = Deadline::new(event.context.deadline, self.settings.safety_margin);
        let ran = requests::counted(
            counter.clone(),
            self.engine
                .run_batch(lanes, deadline)
                .instrument(batch_span.clone()),
        )
        .await;
        let results: Vec<(Coordinates, Option<String>, RecordOutcome)> = ran
            .outcomes
            .into_iter()
            .map(|((at, key), result)| (at, key, result))
            .collect();
        let parking = self.engine.config().parking();
        let unsent = self.forward_parked(&event.payload, &results, parking).await;
        let (mut failures, log_keys) = (Vec::new(), self.settings.log_keys);
        for (at, key, result) in results {
            let unparked = unsent.get(&at).map(String::as_str);
            let reported = report.record(&at, key.as_deref(), &result, log_keys, parking, unparked);
            if let Some(span) = spans.get(&at) {
                telemetry::finish_record(span, &result.outcome, reported);
            }
            reports.push(RecordReport {
                outcome: result.outcome.name(),
                detail: result.outcome.detail(),
                reported,
                at: at.clone(),
            });
            if reported {
                failures.push(at);
            }
        }
        tracing::info!(
            request_id = %event.context.request_id,
            records = report.records,
            finished = report.finished,
            parked = report.parked,
            reported = report.reported,
            store_unavailable = ran.store_unavailable,
            elapsed_ms = report.elapsed().as_secs_f64() * 1000.0,
            "batch done"
        );
        let requests = StoreRequests {
            stats: counter.stats(),
            latencies: counter.take_latencies(),
        };
        batch_span.record("exactly_once.reported", report.reported);
        batch_span.record(
            "exactly_once.store_requests",
            requests
                .stats
                .values()
                .map(|stats| stats.count)
                .sum::<u64>(),
        );
        if let Some(write) = &self.metrics {
            let function_name = &event.context.env_config.function_name;
            let failed_closed = ran.store_unavailable;
            for document in report.metrics(function_name, &requests, failed_closed, now_ms()) {
                write(&document.to_string());
            }
        }
        if ran.store_unavailable && report.finished == 0 && report.reported > 0 {
            // Nothing could be done: an invocation error retries the batch.
            return Err(InvocationError::StoreUnavailable {
                reported: report.reported as usize,
            });
        }
        failures.sort();
        Ok(Invocation {
            source: batch.source,
            response: BatchResponse {
                batch_item_failures: failures.into_iter().map(Into::into).collect(),
            },
            records: reports,
        })
    }

    /// Sends the parked records to the dead-letter queue, if there is one;
    /// the ones that could not be sent, with why. Without a queue, a parked
    /// record that has no FAILED item (a refused one) cannot be parked: it
    /// would leave no trace.
    async fn forward_parked(
        &self,
        event: &Value,
        results: &[(Coordinates, Option<String>, RecordOutcome)],
        parking: Parking,
    ) -> HashMap<Coordinates, String> {
        let parked = results
            .iter()
            .filter(|(_, _, result)| parking.parks(&result.outcome));
        let Some(queue) = &self.dead_letters else {
            return parked
                .filter(|(_, _, result)| !result.outcome.is_failed())
                .map(|(at, _, _)| (at.clone(), "no dead-letter queue".to_owned()))
                .collect();
        };
        let parked: Vec<Parked> = parked
            .map(|(at, _, result)| Parked {
                at: at.clone(),
                outcome: result.outcome.name(),
                error: result.outcome.detail(),
            })
            .collect();
        if parked.is_empty() {
            return HashMap::new();
        }
        queue.forward(event, parked).await.into_iter().collect()
    }

    /// Whether this function serves `source`'s events: its handler's
    /// record type takes them, and `EVENT_SOURCES` (if set) names it.
    fn serves(&self, source: Source) -> Result<(), EventError> {
        let refused = |reason: String| EventError::NotServed {
            event_source: source,
            reason,
        };
        if !H::Record::accepts(source) {
            return Err(refused(format!(
                "the handler's record type is {}, which takes no {source} record; write it \
                 against exactly_once::lambda::Record to serve every source",
                std::any::type_name::<H::Record>()
            )));
        }
        match &self.settings.sources {
            Some(sources) if !sources.contains(&source) => Err(refused(format!(
                "EVENT_SOURCES is {}",
                sources
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>()
                    .join(",")
            ))),
            _ => Ok(()),
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
            .flat_map(|records| self.lanes(records))
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

    /// Splits an ordering unit's records (in order) into lanes that keep
    /// the configured order.
    fn lanes(&self, records: Vec<Decoded>) -> Vec<Vec<Decoded>> {
        match self.settings.ordering {
            OrderingMode::Partition => vec![records],
            OrderingMode::Unordered => records.into_iter().map(|record| vec![record]).collect(),
            OrderingMode::Key => {
                let mut lanes: Vec<Vec<Decoded>> = Vec::new();
                let mut lane_of: HashMap<Option<Vec<u8>>, usize> = HashMap::new();
                for record in records {
                    // An undecodable record has no key: it joins the keyless lane.
                    let key = record
                        .1
                        .as_ref()
                        .ok()
                        .and_then(|r| Some(r.key()?.into_owned()));
                    let lane = *lane_of.entry(key).or_insert_with(|| {
                        lanes.push(Vec::new());
                        lanes.len() - 1
                    });
                    lanes[lane].push(record);
                }
                lanes
            }
        }
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

/// The scheduled stuck-key check needs the store's listings
/// ([`Operator`]); every store of this library has them.
impl<H, S> BatchFunction<H, S>
where
    S: Operator,
    H: RecordHandler<S::Effect>,
    H::Record: FromRecord,
{
    /// Handles one invocation. Every record is either finished (processed or
    /// a verified duplicate), parked (FAILED, under `POISON_POLICY=park`) or
    /// listed in the response's failures; for Amazon MQ, which has no
    /// partial batch response, a record left unfinished fails the
    /// invocation ([`InvocationError::BatchNotFinished`]). EventBridge's scheduled event runs
    /// the stuck-key check instead ([`Self::check_started_keys`]), answered
    /// with an empty response.
    pub async fn handle(
        &self,
        event: LambdaEvent<Value>,
    ) -> Result<BatchResponse, InvocationError> {
        if stuck_check::is_scheduled_event(&event.payload) {
            let function_name = &event.context.env_config.function_name;
            self.check_started_keys(function_name).await?;
            self.sweep_unsent(function_name).await?;
            return Ok(BatchResponse::default());
        }
        self.invoke(event).await?.into_answer()
    }

    /// The sweeper: sends the messages of this function's keys COMPLETED
    /// more than [`SWEEP_AFTER`] ago and still unsent, and
    /// writes its EMF document (`UnsentRecords`, `SweptRecords`,
    /// `OldestUnsentAgeSeconds`).
    pub async fn sweep_unsent(&self, function_name: &str) -> Result<Swept, InvocationError> {
        let swept = self
            .engine
            .send_unsent(stuck_check::SWEEP_AFTER)
            .await
            .map_err(InvocationError::Sweep)?;
        tracing::info!(
            unsent = swept.found,
            sent = swept.sent,
            oldest_left_age_s = swept.oldest_left_age_s,
            "sweep of unsent messages"
        );
        if let Some(write) = &self.metrics {
            write(&stuck_check::sweep_metrics(&swept, function_name, now_ms()).to_string());
        }
        Ok(swept)
    }

    /// Lists the STARTED keys through the store's index of them, logs the
    /// stuck ones (lock ended, not taken over: by origin, owner and version,
    /// the key as `LOG_KEYS` shows keys) and writes the check's EMF document
    /// (`StartedKeys`, `StuckKeys`, `OldestStartedAgeSeconds`).
    pub async fn check_started_keys(
        &self,
        function_name: &str,
    ) -> Result<StartedKeys, InvocationError> {
        let store = self.engine.store();
        // Every STARTED key: the lock ended, or created before now.
        let all_started = Listing::Stuck {
            older_than: std::time::Duration::ZERO,
        };
        let mut listed = store
            .list(all_started)
            .await
            .map_err(InvocationError::StuckKeyCheck)?;
        // This function's keys: another function sharing the table checks
        // its own.
        let config = store.config();
        listed
            .items
            .retain(|item| config.owns(item.scope.as_deref()));
        let now = store.now_ms();
        let prefix = &store.config().key_prefix;
        for item in listed.items.iter().filter(|item| item.lock_expired(now)) {
            let key = item.pk.strip_prefix(prefix.as_str()).unwrap_or(&item.pk);
            tracing::warn!(
                key = %self.settings.log_keys.show(key),
                version = item.version,
                owner = %item.owner,
                origin = item.origin.as_deref().unwrap_or("-"),
                "stuck key: STARTED, its lock ended and nobody took it over"
            );
        }
        let keys = StartedKeys::of(&listed.items, now);
        tracing::info!(
            started = keys.started,
            stuck = keys.stuck,
            oldest_age_s = keys.oldest_age_s,
            items_read = listed.cost.read,
            requests = listed.cost.requests,
            "stuck-key check"
        );
        if let Some(write) = &self.metrics {
            write(&keys.metrics(function_name, now_ms()).to_string());
        }
        Ok(keys)
    }
}

/// The invocation as owner tokens name it: `<request id>/<function
/// version>/<log stream>` (the log stream is the container; `-` for what
/// the context lacks); none without a request id.
fn holder(context: &lambda_runtime::Context) -> Option<Arc<str>> {
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
