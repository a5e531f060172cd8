//! A handler that reads the whole record: the record key, every header (a
//! name may repeat), the coordinates and timestamp, and the schema
//! registry's metadata. It only logs them (no payload, which may be
//! sensitive) and stores a summary as its result.

use exactly_once::engine::{
    CommitPath, Completion, Engine, FencingToken, HandlerError, RecordHandler,
};
use exactly_once::lambda::{KafkaRecord, MskFunction, Settings};
use exactly_once::{DynamoDbStore, dynamo};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;

struct Audit;

impl<E: Send + 'static> RecordHandler<E> for Audit {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        CommitPath::Locking
    }

    async fn handle(
        &self,
        token: &FencingToken,
        record: &KafkaRecord,
    ) -> Result<Completion<E>, HandlerError> {
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        let tags: Vec<String> = record.headers_named("tag").map(text).collect();
        let trace = record.header("traceparent").map(text);
        let format = record
            .value_schema
            .as_ref()
            .and_then(|s| s.data_format.clone());
        tracing::info!(
            topic = %record.topic,
            partition = record.partition,
            offset = record.offset,
            timestamp_ms = record.timestamp_ms,
            timestamp_type = record.timestamp_type.as_deref().unwrap_or("-"),
            has_key = record.key.is_some(),
            tags = ?tags,
            trace = trace.as_deref().unwrap_or("-"),
            format = format.as_deref().unwrap_or("raw"),
            version = token.version,
            "record seen"
        );
        Ok(Completion::done(format!(
            "{}-{}@{}: {} header(s), tags {tags:?}",
            record.topic,
            record.partition,
            record.offset,
            record.headers.len()
        )))
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let settings = Settings::from_env()?;
    let store = DynamoDbStore::new(dynamo::connect().await, settings.store);
    let function = &MskFunction::new(
        Engine::new(store, Audit, settings.engine),
        settings.function,
    );
    let handle = move |event: LambdaEvent<Value>| async move { function.handle(event).await };
    lambda_runtime::run(service_fn(handle)).await
}
