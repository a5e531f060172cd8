//! The function: one per container, shared by every invocation. An
//! invocation is four stages, each in its own file but the first: decode
//! the event (its source recognised and served), run the batch (`run`),
//! answer Lambda (`answer`), record the invocation's telemetry and metrics
//! (`record`). EventBridge's schedule runs the checks of `scheduled`
//! instead.

mod answer;
mod fit;
mod record;
mod run;
mod scheduled;
#[cfg(feature = "sqs")]
mod visibility;

use std::sync::Arc;

use lambda_runtime::LambdaEvent;
use serde_json::Value;

use exactly_once_core::engine::{Engine, RecordHandler};
use exactly_once_core::store::{Operator, Store};

use crate::dead_letter::DeadLetters;
use crate::error::InvocationError;
use crate::invocation::Invocation;
use crate::report::InvocationReport;
use crate::response::BatchResponse;
use crate::settings::FunctionSettings;
use crate::sources::{self, Batch, EventError, FromRecord, Source};
use crate::stuck_check;

/// The target of the function's own log lines and spans: the crate's, as
/// before they moved into this module (a log filter, a subscriber that
/// prints targets, or a test may name it).
const TARGET: &str = "exactly_once_lambda";

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
    /// Whether its settings were checked against an invocation's time.
    fit: fit::FitChecked,
    /// Reads an SQS source queue's visibility timeout, once.
    #[cfg(feature = "sqs")]
    visibility: Option<visibility::VisibilityCheck>,
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
            fit: fit::FitChecked::default(),
            #[cfg(feature = "sqs")]
            visibility: None,
        }
    }

    /// Checks, on the container's first SQS invocation, that its queue's
    /// visibility timeout is at least six times the function's timeout
    /// (read with `client`; warned about once).
    #[cfg(feature = "sqs")]
    pub fn with_visibility_check(mut self, client: aws_sdk_sqs::Client) -> Self {
        self.visibility = Some(visibility::VisibilityCheck::new(client));
        self
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
    /// metrics, or a wrapper of the runtime): the event decoded, its batch
    /// run, Lambda's answer settled, the invocation recorded (its summary
    /// line, spans and metrics).
    pub async fn invoke(&self, event: LambdaEvent<Value>) -> Result<Invocation, InvocationError> {
        // The invocation's clock starts before its event is read.
        let report = InvocationReport::new();
        let batch = self.decode(&event.payload)?;
        #[cfg(feature = "sqs")]
        if let (Some(check), Some(Source::Sqs)) = (&self.visibility, batch.source) {
            check.check(&event.payload, event.context.deadline);
        }
        let ran = self.run(batch, &event.context).await;
        let answer = self.answer(&event.payload, &ran, report).await;
        self.record(&event.context, &ran, &answer);
        answer.into_invocation()
    }

    /// The event's records by ordering unit, if this function serves its
    /// source.
    fn decode(&self, payload: &Value) -> Result<Batch, EventError> {
        let batch = sources::decode_event(payload)?;
        if let Some(source) = batch.source {
            self.serves(source)?;
        }
        Ok(batch)
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
}

/// The scheduled checks need the store's listings ([`Operator`]); every
/// store of this library has them.
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
}
