//! Consumed capacity, for the throughput test and the benchmark (not part of
//! the library): [`CapacityCounter`], an SDK interceptor that asks every
//! request for its consumed capacity and adds up the units the responses
//! report, by operation.
//!
//! In DynamoDB's JSON protocol it asks in the request body
//! (`"ReturnConsumedCapacity":"TOTAL"`) and reads the answer from the
//! response body, successful or not.
//!
//! DynamoDB Local (3.3.0) answers `TOTAL` with `TableName` and
//! `CapacityUnits` only: an object for single-item operations and Query/Scan,
//! a list (one entry per table) for BatchGetItem, BatchWriteItem,
//! BatchExecuteStatement and the transactions. DynamoDB itself may add `ReadCapacityUnits` and
//! `WriteCapacityUnits`; when present they are used, otherwise
//! `CapacityUnits` count as read units for reads and write units for writes.
//!
//! `benches/throughput` includes this file with `#[path]`: one copy. Its
//! tests are in tests/batch/throughput.rs (`capacity_parser`).

use std::collections::BTreeMap;
use std::ops::Add;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::interceptors::{
    BeforeTransmitInterceptorContextMut, FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_types::body::SdkBody;
use serde_json::{Map, Value};

/// The operations whose request accepts `ReturnConsumedCapacity`.
pub const ACCEPTING: [&str; 11] = [
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "GetItem",
    "BatchGetItem",
    "BatchWriteItem",
    "TransactWriteItems",
    "TransactGetItems",
    "BatchExecuteStatement",
    "Query",
    "Scan",
];

/// The operations among them that read.
const READS: [&str; 5] = [
    "GetItem",
    "BatchGetItem",
    "TransactGetItems",
    "Query",
    "Scan",
];

/// Capacity units consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CapacityUnits {
    /// Read capacity units.
    pub read: f64,
    /// Write capacity units.
    pub write: f64,
}

impl Add for CapacityUnits {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        Self {
            read: self.read + other.read,
            write: self.write + other.write,
        }
    }
}

/// Capacity units consumed, by operation name (`PutItem`, ...): an SDK
/// interceptor that adds `"ReturnConsumedCapacity":"TOTAL"` to the request
/// body of every operation that accepts it (unless the request chooses
/// already) and adds up the read and write units each response reports,
/// failed ones and retries included. Attach it next to the library's
/// `RequestCounter`, which counts the requests.
#[derive(Debug, Clone, Default)]
pub struct CapacityCounter {
    units: Arc<Mutex<BTreeMap<String, CapacityUnits>>>,
}

impl CapacityCounter {
    /// `client` with this counter attached (shares the client's connections
    /// and keeps its interceptors).
    pub fn attach(&self, client: &Client) -> Client {
        Client::from_conf(
            client
                .config()
                .to_builder()
                .interceptor(self.clone())
                .build(),
        )
    }

    /// Units per operation so far (an operation appears once a response
    /// of it arrived, with or without units).
    pub fn units(&self) -> BTreeMap<String, CapacityUnits> {
        self.lock().clone()
    }

    /// Units so far, all operations.
    pub fn total(&self) -> CapacityUnits {
        self.lock()
            .values()
            .fold(CapacityUnits::default(), |sum, units| sum + *units)
    }

    /// Starts counting from zero.
    pub fn reset(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, CapacityUnits>> {
        self.units
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Intercept for CapacityCounter {
    fn name(&self) -> &'static str {
        "CapacityCounter"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request_mut();
        let asked = request
            .body()
            .bytes()
            .and_then(|body| ask_for_total(operation(cfg), body));
        if let Some(body) = asked {
            request
                .headers_mut()
                .insert("content-length", body.len().to_string());
            *request.body_mut() = SdkBody::from(body);
        }
        Ok(())
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // An attempt without a response reported nothing.
        let Some(response) = context.response() else {
            return Ok(());
        };
        let operation = operation(cfg);
        let units = response
            .body()
            .bytes()
            .and_then(|body| consumed(operation, body))
            .unwrap_or_default();
        let mut all = self.lock();
        let entry = all.entry(operation.to_owned()).or_default();
        *entry = *entry + units;
        Ok(())
    }
}

/// The name of the operation being sent (`PutItem`, ...).
fn operation(cfg: &ConfigBag) -> &str {
    cfg.load::<Metadata>()
        .map_or("unknown", |metadata| metadata.name())
}

/// `body` with `"ReturnConsumedCapacity":"TOTAL"` added, if `operation`
/// accepts it and the body is a JSON object that does not choose already;
/// `None` leaves the request as it is.
pub fn ask_for_total(operation: &str, body: &[u8]) -> Option<Vec<u8>> {
    if !ACCEPTING.contains(&operation) {
        return None;
    }
    let mut request: Map<String, Value> = serde_json::from_slice(body).ok()?;
    if request.contains_key("ReturnConsumedCapacity") {
        return None;
    }
    request.insert("ReturnConsumedCapacity".into(), "TOTAL".into());
    serde_json::to_vec(&request).ok()
}

/// The capacity a response body of `operation` reports (`ConsumedCapacity`,
/// one object or a list of them), or `None` if it reports none.
pub fn consumed(operation: &str, body: &[u8]) -> Option<CapacityUnits> {
    let response: Map<String, Value> = serde_json::from_slice(body).ok()?;
    let entries = match response.get("ConsumedCapacity")? {
        Value::Array(entries) => entries.iter().collect(),
        entry => vec![entry],
    };
    let reads = READS.contains(&operation);
    Some(entries.into_iter().map(|entry| units(entry, reads)).fold(
        CapacityUnits::default(),
        |sum, units| CapacityUnits {
            read: sum.read + units.read,
            write: sum.write + units.write,
        },
    ))
}

/// One `ConsumedCapacity` entry: its read and write units if it names them,
/// else its `CapacityUnits` as reads or writes.
fn units(entry: &Value, reads: bool) -> CapacityUnits {
    let field = |name: &str| entry.get(name).and_then(Value::as_f64);
    match (field("ReadCapacityUnits"), field("WriteCapacityUnits")) {
        (None, None) => {
            let total = field("CapacityUnits").unwrap_or(0.0);
            if reads {
                CapacityUnits {
                    read: total,
                    write: 0.0,
                }
            } else {
                CapacityUnits {
                    read: 0.0,
                    write: total,
                }
            }
        }
        (read, write) => CapacityUnits {
            read: read.unwrap_or(0.0),
            write: write.unwrap_or(0.0),
        },
    }
}
