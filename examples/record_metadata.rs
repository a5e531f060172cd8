//! A handler that reads the whole record: the record key, every header (a
//! name may repeat), the coordinates and timestamp, and the schema
//! registry's metadata. It only logs them (no payload, which may be
//! sensitive) and stores a summary as its result.
//!
//! Its test (`cargo test --example record_metadata`) runs the handler on the
//! in-memory store: a record delivered twice runs once, and what the store
//! keeps is checked; no AWS needed.

use exactly_once::prelude::*;

struct Audit;

impl<E: Send + Sync + 'static> RecordHandler<E> for Audit {
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
async fn main() -> Result<(), StartError> {
    exactly_once::run(Audit).await
}

#[cfg(test)]
mod tests {
    use exactly_once::config::StoreConfig;
    use exactly_once::engine::{Engine, EngineConfig};
    use exactly_once::lambda::keys::{KeySpec, MissingKeyPolicy};
    use exactly_once::lambda::{BatchFunction, FunctionSettings, encode_event};
    use exactly_once::lambda_runtime::{Context, LambdaEvent};
    use exactly_once::store::memory::MemoryStore;
    use exactly_once::store::{Status, Store};

    use super::*;

    fn record() -> KafkaRecord {
        KafkaRecord {
            topic: "payments".into(),
            partition: 0,
            offset: 15,
            timestamp_ms: 1_545_084_650_987,
            timestamp_type: Some("CREATE_TIME".into()),
            key: Some(b"acc-1".to_vec()),
            value: br#"{"payment_id":"p-1"}"#.to_vec(),
            headers: vec![
                ("idempotency-key".into(), b"p-1".to_vec()),
                ("tag".into(), b"eu".to_vec()),
                ("tag".into(), b"card".to_vec()),
            ],
            key_schema: None,
            value_schema: None,
        }
    }

    #[tokio::test]
    async fn a_record_delivered_twice_runs_once() {
        let store = MemoryStore::new(StoreConfig::new("idempotency"));
        let keys = KeySpec::parse("header", "idempotency-key".into(), MissingKeyPolicy::Reject)
            .expect("the default key source");
        let function = BatchFunction::new(
            Engine::new(store.clone(), Audit, EngineConfig::default()),
            FunctionSettings::new(keys),
        )
        .without_metrics();
        let event = encode_event(&[record()]);
        for delivery in ["processed", "duplicate"] {
            let done = function
                .invoke(LambdaEvent::new(event.clone(), Context::default()))
                .await
                .expect("a Kafka event");
            assert!(done.response.batch_item_failures.is_empty());
            assert_eq!(done.records[0].outcome, delivery);
        }
        let item = store
            .get("p-1")
            .await
            .expect("read")
            .expect("the key's item");
        assert_eq!(item.status, Status::Completed);
        assert_eq!(item.version, 1);
        assert_eq!(
            item.result.as_deref(),
            Some(r#"payments-0@15: 3 header(s), tags ["eu", "card"]"#)
        );
    }
}
