//! The function [`run`](crate::run) serves, assembled from the variables
//! that configure it: its store, its handler, the senders of what it emits,
//! its dead-letter queue, the shared cache. [`Function::from_vars`] (and
//! [`Function::from_vars_with`], for `run_with`'s handlers) hands it to a
//! test instead of the Lambda runtime, so that a test delivers events to
//! exactly what Lambda would run.

use std::pin::Pin;
use std::sync::Arc;

use exactly_once_core::config::SettingsError;
use exactly_once_core::engine::{Engine, RecordHandler, SharedCache};
use exactly_once_core::outbox::Sender;
use exactly_once_core::store::Operator;
use exactly_once_lambda::dead_letter::DeadLetters;
use exactly_once_lambda::{
    BatchFunction, BatchResponse, FromRecord, InvocationError, Settings, StoreKind,
};
use lambda_runtime::{Context, Diagnostic, LambdaEvent};
use serde_json::Value;

use crate::backend::{Backend, Patience};
use crate::error::BoxError;
use crate::{Serve, StartError};

/// The function as its variables configure it, ready to answer invocations:
/// what [`run`](crate::run) serves, built by [`Function::from_vars`] for a
/// test.
///
/// ```no_run
/// # use exactly_once::prelude::*;
/// # struct Ledger { table: String }
/// # impl<E: Send + Sync + 'static> RecordHandler<E> for Ledger {
/// #     type Record = Record;
/// #     fn commit_path(&self) -> CommitPath { CommitPath::LockFree }
/// #     async fn handle(&self, _: &FencingToken, _: &Record) -> Result<Completion<E>, HandlerError> {
/// #         Ok(Completion::done("paid"))
/// #     }
/// # }
/// # async fn test(event: serde_json::Value) -> Result<(), StartError> {
/// let function = exactly_once::Function::from_vars(Ledger { table: "ledger".into() }, |name| {
///     match name {
///         "IDEMPOTENCY_TABLE" => Some("idempotency".to_owned()),
///         "EVENT_SOURCES" => Some("sqs".to_owned()),
///         _ => None,
///     }
/// })
/// .await?;
/// let answer = function.invoke(event).await.expect("not an invocation error");
/// assert_eq!(answer, serde_json::json!({"batchItemFailures": []}));
/// # Ok(())
/// # }
/// ```
pub struct Function {
    batch: Arc<dyn Handles>,
}

impl Function {
    /// The function [`run`](crate::run) would serve with `handler`, its
    /// variables read from `vars` instead of the process environment (the
    /// same names: docs/configuration.md; `None` for a variable unset), and
    /// the same start-up errors. The store and the destinations are reached
    /// as `run` reaches them: the AWS SDK's own configuration from the
    /// process environment (`AWS_ENDPOINT_URL_DYNAMODB`,
    /// `AWS_ENDPOINT_URL_SQS`, ...: DynamoDB Local, moto). Logging and
    /// tracing are the test's.
    pub async fn from_vars<H: Serve>(
        handler: H,
        vars: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, StartError> {
        Self::from_vars_with(vars, async |_: &Backend| Ok::<_, BoxError>(handler)).await
    }

    /// The function [`run_with`](crate::run_with) would serve with `build`:
    /// [`Function::from_vars`] for a handler built once the store is
    /// connected (its tables reached through the [`Backend`]'s client or
    /// pool). An error of `build` is the start-up error `run_with` stops
    /// with ([`StartError::Handler`]).
    ///
    /// ```no_run
    /// # use exactly_once::prelude::*;
    /// # use exactly_once::Backend;
    /// # struct Ledger { table: String }
    /// # impl Ledger {
    /// #     async fn connect(_: &Backend, table: String) -> Result<Self, String> { Ok(Self { table }) }
    /// # }
    /// # impl<E: Send + Sync + 'static> RecordHandler<E> for Ledger {
    /// #     type Record = Record;
    /// #     fn commit_path(&self) -> CommitPath { CommitPath::Locking }
    /// #     async fn handle(&self, _: &FencingToken, _: &Record) -> Result<Completion<E>, HandlerError> {
    /// #         Ok(Completion::done("paid"))
    /// #     }
    /// # }
    /// # async fn test() -> Result<(), StartError> {
    /// // main: exactly_once::run_with(async |backend| Ledger::connect(backend, table).await)
    /// let function = exactly_once::Function::from_vars_with(
    ///     |name| (name == "IDEMPOTENCY_TABLE").then(|| "idempotency".to_owned()),
    ///     async |backend| Ledger::connect(backend, "ledger".into()).await,
    /// )
    /// .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn from_vars_with<F, H, E>(
        vars: impl Fn(&str) -> Option<String>,
        build: F,
    ) -> Result<Self, StartError>
    where
        F: AsyncFnOnce(&Backend) -> Result<H, E>,
        H: Serve,
        E: Into<BoxError>,
    {
        crate::features::check(&vars)?;
        Self::assemble(vars, build).await
    }

    /// Delivers `event` as Lambda does, with a default context (no
    /// deadline: nothing is cut, no lease waited for): the answer Lambda gets
    /// (`{"batchItemFailures": [...]}`), or the invocation error it gets
    /// instead (`errorType`, `errorMessage`).
    pub async fn invoke(&self, event: Value) -> Result<Value, Diagnostic> {
        match self
            .handle(LambdaEvent::new(event, Context::default()))
            .await
        {
            Ok(response) => Ok(serde_json::to_value(response).unwrap_or(Value::Null)),
            Err(err) => Err(Diagnostic::from(err)),
        }
    }

    /// One invocation, as the runtime hands it over.
    pub(crate) fn handle(&self, event: LambdaEvent<Value>) -> Handled<'_> {
        self.batch.handle(event)
    }

    /// Reads the variables (their parts are in this build: checked by the
    /// caller), connects the store, builds the handler and the function.
    pub(crate) async fn assemble<F, H, E>(
        vars: impl Fn(&str) -> Option<String>,
        build: F,
    ) -> Result<Self, StartError>
    where
        F: AsyncFnOnce(&Backend) -> Result<H, E>,
        H: Serve,
        E: Into<BoxError>,
    {
        let settings = Settings::from_lookup(&vars)?;
        let backend = Backend::connect(
            settings.store_kind,
            settings.store.clone(),
            Patience::Function,
        )
        .await?;
        let parts = Parts {
            shared_cache: shared_cache(&settings, &vars)?,
            dead_letters: dead_letters(&settings).await?,
            sender: sender().await,
            #[cfg(feature = "sqs")]
            queues: aws_sdk_sqs::Client::new(&crate::aws::sdk_config().await),
            settings,
        };
        let handler = build(&backend)
            .await
            .map_err(|err| StartError::Handler(err.into()))?;
        Ok(match backend {
            #[cfg(feature = "dynamodb")]
            Backend::DynamoDb(store) => Self::of(store, handler.on_dynamodb()?, parts),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => Self::of(store, handler.on_postgres()?, parts),
            #[cfg(feature = "redis")]
            Backend::Redis(store) => Self::of(store, handler.on_redis()?, parts),
        })
    }

    /// The function of `store` and `handler`, with its parts.
    fn of<S, H>(store: S, handler: H, parts: Parts) -> Self
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
        #[cfg(feature = "sqs")]
        {
            function = function.with_visibility_check(parts.queues);
        }
        Self {
            batch: Arc::new(function),
        }
    }
}

/// An invocation's answer, to come. Boxed: the batch's future is deep
/// (lanes, group commits, the outbox's delivery), and a `main` awaiting it
/// inline would need a `recursion_limit` to lay it out.
pub(crate) type Handled<'a> =
    Pin<Box<dyn Future<Output = Result<BatchResponse, InvocationError>> + Send + 'a>>;

/// A batch function of any store and handler, behind one type.
trait Handles: Send + Sync {
    fn handle(&self, event: LambdaEvent<Value>) -> Handled<'_>;
}

impl<H, S> Handles for BatchFunction<H, S>
where
    S: Operator,
    H: RecordHandler<S::Effect>,
    H::Record: FromRecord,
{
    fn handle(&self, event: LambdaEvent<Value>) -> Handled<'_> {
        Box::pin(BatchFunction::handle(self, event))
    }
}

/// What the function is made of, beside its store and handler.
struct Parts {
    settings: Settings,
    shared_cache: Option<Arc<dyn SharedCache>>,
    dead_letters: Option<Arc<dyn DeadLetters>>,
    /// Sends the messages handlers emit.
    sender: Arc<dyn Sender>,
    /// Reads an SQS source queue's visibility timeout.
    #[cfg(feature = "sqs")]
    queues: aws_sdk_sqs::Client,
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
