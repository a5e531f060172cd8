//! Fault injection under the DynamoDB client: an HTTP client wrapper that
//! sits between the SDK (signing, retries, timeouts) and the real connection
//! to DynamoDB Local, so every request and every SDK retry meets the faults.
//!
//! Each kind is switched on by a probability in [`FaultPlan`] and drawn from a
//! seeded generator. It also tells an [`Observer`] what every request was and
//! how DynamoDB answered it, with sequence numbers for send and receipt.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::byte_stream::ByteStream;

use super::transactions::{InFlight, transaction_items};

/// The kinds of fault, in the order of [`FaultCounts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 400 `ThrottlingException`; the request never reaches DynamoDB.
    Throttle,
    /// 500 `InternalServerError`; the request never reaches DynamoDB.
    ServerError,
    /// The connection fails before the request is sent.
    DispatchFailure,
    /// The request IS applied, then its answer is replaced by a 500: the
    /// caller cannot know whether its write happened.
    ResponseLost,
    /// The request waits before it is sent.
    Latency,
    /// A `TransactWriteItems` touching an item that another transaction in
    /// flight touches: counted always; cancelled with `TransactionConflict`
    /// (never reaching DynamoDB) when [`FaultPlan::transaction_conflicts`]
    /// is on, as DynamoDB in AWS does.
    TransactionConflict,
}

impl Fault {
    pub const ALL: [Fault; 6] = [
        Fault::Throttle,
        Fault::ServerError,
        Fault::DispatchFailure,
        Fault::ResponseLost,
        Fault::Latency,
        Fault::TransactionConflict,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Throttle => "throttle",
            Fault::ServerError => "server-error",
            Fault::DispatchFailure => "dispatch-failure",
            Fault::ResponseLost => "response-lost",
            Fault::Latency => "latency",
            Fault::TransactionConflict => "transaction-conflict",
        }
    }
}

/// Per request, the probability of each fault (0 = off).
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    pub throttle: f64,
    pub server_error: f64,
    pub dispatch_failure: f64,
    pub response_lost: f64,
    pub latency: f64,
    /// Added latency, milliseconds, drawn uniformly from this range.
    pub latency_ms: (u64, u64),
    /// Cancel transactions that meet another in flight on an item.
    pub transaction_conflicts: bool,
    /// The first this many `TransactWriteItems` meet this fault (counted as
    /// it), whatever the draws: [`Fault::Throttle`] (the SDK gives up on a
    /// commit after its attempts) or [`Fault::ResponseLost`] (a commit
    /// applied and every SDK attempt at it failed, as a queue past the
    /// attempt timeout leaves it).
    pub first_transactions: Option<(Fault, u64)>,
}

/// Faults injected so far, by kind (indexed as [`Fault::ALL`]).
#[derive(Debug, Default)]
pub struct FaultCounts([AtomicU64; 6]);

impl FaultCounts {
    fn add(&self, fault: Fault) {
        self.0[fault as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, fault: Fault) -> u64 {
        self.0[fault as usize].load(Ordering::Relaxed)
    }
}

/// One request and DynamoDB's answer to it.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The operation (`PutItem`, `UpdateItem`, `TransactWriteItems`, ...).
    pub operation: String,
    pub body: Vec<u8>,
    /// DynamoDB's answer, for a `BatchExecuteStatement` (whose statements
    /// each succeed or fail on their own); empty for the others.
    pub answer: Vec<u8>,
    /// [`sequence`] when the request left for DynamoDB and when its answer came.
    pub sent: u64,
    pub received: u64,
    /// DynamoDB's status code (200: applied), before any [`Fault::ResponseLost`].
    pub status: u16,
    /// The caller never saw this answer: it got a 500 instead
    /// ([`Fault::ResponseLost`]), or had stopped waiting (an attempt timeout,
    /// an abort).
    pub answer_lost: bool,
}

/// Told about every request that reached DynamoDB.
pub trait Observer: Send + Sync + 'static {
    fn exchanged(&self, exchange: Exchange);
}

/// A process-wide clock of events: later calls return larger numbers.
pub fn sequence() -> u64 {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    SEQUENCE.fetch_add(1, Ordering::SeqCst)
}

/// The faults of one client: its plan, a seeded generator, the counts.
pub struct Faults {
    plan: FaultPlan,
    rng: Mutex<fastrand::Rng>,
    pub counts: FaultCounts,
    observer: Option<Arc<dyn Observer>>,
    /// Requests sent and not yet answered.
    in_flight: Arc<AtomicU64>,
    /// Transactions sent and not yet answered, with their items.
    transactions: Arc<Mutex<InFlight>>,
    /// `TransactWriteItems` sent so far.
    transactions_sent: AtomicU64,
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faults").field("plan", &self.plan).finish()
    }
}

impl Faults {
    pub fn new(plan: FaultPlan, seed: u64, observer: Option<Arc<dyn Observer>>) -> Arc<Self> {
        Arc::new(Self {
            plan,
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            counts: FaultCounts::default(),
            observer,
            in_flight: Arc::default(),
            transactions: Arc::default(),
            transactions_sent: AtomicU64::new(0),
        })
    }

    /// Waits until every request sent (also by aborted callers) is answered.
    pub async fn settle(&self) {
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// `client` sending through these faults (shares its connections).
    pub fn attach(self: &Arc<Self>, client: &Client) -> Client {
        let inner = client
            .config()
            .http_client()
            .expect("the client has an HTTP client");
        let config = client
            .config()
            .to_builder()
            .http_client(FaultyHttpClient {
                inner,
                faults: Arc::clone(self),
            })
            .build();
        Client::from_conf(config)
    }

    /// Draws whether `fault` happens to this request (and counts it).
    fn strikes(&self, fault: Fault) -> bool {
        let probability = match fault {
            Fault::Throttle => self.plan.throttle,
            Fault::ServerError => self.plan.server_error,
            Fault::DispatchFailure => self.plan.dispatch_failure,
            Fault::ResponseLost => self.plan.response_lost,
            Fault::Latency => self.plan.latency,
            Fault::TransactionConflict => 0.0,
        };
        let hit = probability > 0.0 && self.rng().f64() < probability;
        if hit {
            self.counts.add(fault);
        }
        hit
    }

    /// The most records (idempotency items) in transactions in flight at
    /// once so far.
    pub fn peak_records_in_flight(&self) -> usize {
        self.transactions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .peak_keys()
    }

    /// The fault the plan scripts for this request, if it is one of the
    /// first `TransactWriteItems` (counted).
    fn scripted(&self, operation: &str) -> Option<Fault> {
        let (fault, count) = self.plan.first_transactions?;
        if operation != "TransactWriteItems"
            || self.transactions_sent.fetch_add(1, Ordering::SeqCst) >= count
        {
            return None;
        }
        self.counts.add(fault);
        Some(fault)
    }

    fn latency(&self) -> Duration {
        let (low, high) = self.plan.latency_ms;
        Duration::from_millis(self.rng().u64(low..=high.max(low)))
    }

    fn rng(&self) -> std::sync::MutexGuard<'_, fastrand::Rng> {
        self.rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn exchange(
        self: Arc<Self>,
        inner: SharedHttpConnector,
        request: HttpRequest,
    ) -> Result<HttpResponse, ConnectorError> {
        let operation = request
            .headers()
            .get("x-amz-target")
            .and_then(|target| target.rsplit('.').next())
            .unwrap_or("unknown")
            .to_owned();
        let scripted = self.scripted(&operation);
        if self.strikes(Fault::Latency) {
            tokio::time::sleep(self.latency()).await;
        }
        if self.strikes(Fault::DispatchFailure) {
            return Err(ConnectorError::io("injected: connection refused".into()));
        }
        if scripted == Some(Fault::Throttle) || self.strikes(Fault::Throttle) {
            return Ok(error_response(
                400,
                "ThrottlingException",
                "injected: rate exceeded",
            ));
        }
        if self.strikes(Fault::ServerError) {
            return Ok(error_response(
                500,
                "InternalServerError",
                "injected: internal error",
            ));
        }
        let body = request.body().bytes().unwrap_or_default().to_vec();
        let ticket = {
            let items = transaction_items(&operation, &body);
            let mut transactions = self
                .transactions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let conflicts = transactions.conflicts(&items);
            if conflicts.contains(&true) {
                self.counts.add(Fault::TransactionConflict);
                if self.plan.transaction_conflicts {
                    return Ok(conflict_response(&conflicts));
                }
            }
            transactions.send(items)
        };
        let answer_lost =
            scripted == Some(Fault::ResponseLost) || self.strikes(Fault::ResponseLost);
        let observer = self.observer.clone();
        let in_flight = Arc::clone(&self.in_flight);
        let transactions = Arc::clone(&self.transactions);
        in_flight.fetch_add(1, Ordering::SeqCst);
        // Sent on a task of its own: a request on the wire reaches DynamoDB
        // (and is observed) even if its caller stops waiting (an SDK attempt
        // timeout) or is aborted meanwhile.
        let (answer, answered) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let sent = sequence();
            let mut response = inner.call(request).await;
            let received = sequence();
            // A batch's answer says which of its statements were applied:
            // read it whole, and hand the caller the same bytes.
            let mut answer_body = Vec::new();
            if operation == "BatchExecuteStatement"
                && let Ok(response) = response.as_mut()
            {
                let body = ByteStream::new(response.take_body()).collect().await;
                answer_body = body.map(|b| b.into_bytes().to_vec()).unwrap_or_default();
                *response.body_mut() = SdkBody::from(answer_body.clone());
            }
            transactions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .answered(ticket);
            let status = response.as_ref().ok().map(|r| r.status().as_u16());
            let delivered = answer.send(response).is_ok();
            if let (Some(status), Some(observer)) = (status, observer) {
                observer.exchanged(Exchange {
                    operation,
                    body,
                    answer: answer_body,
                    sent,
                    received,
                    status,
                    answer_lost: answer_lost || !delivered,
                });
            }
            in_flight.fetch_sub(1, Ordering::SeqCst);
        });
        let response = answered
            .await
            .map_err(|err| ConnectorError::other(err.into(), None))??;
        if answer_lost {
            return Ok(error_response(
                500,
                "InternalServerError",
                "injected: answer lost",
            ));
        }
        Ok(response)
    }
}

/// DynamoDB's answer to a transaction that met another in flight: cancelled,
/// `TransactionConflict` for each action whose item was busy.
fn conflict_response(conflicts: &[bool]) -> HttpResponse {
    let reasons: Vec<serde_json::Value> = conflicts
        .iter()
        .map(|&busy| match busy {
            true => serde_json::json!({"Code": "TransactionConflict",
                "Message": "Transaction is ongoing for the item"}),
            false => serde_json::json!({"Code": "None"}),
        })
        .collect();
    let body = serde_json::json!({
        "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
        "Message": "Transaction cancelled, please refer cancellation reasons for specific reasons",
        "CancellationReasons": reasons,
    });
    json_response(400, body)
}

/// An error answer in DynamoDB's JSON protocol.
fn error_response(status: u16, error_type: &str, message: &str) -> HttpResponse {
    let body = serde_json::json!({
        "__type": format!("com.amazonaws.dynamodb.v20120810#{error_type}"),
        "message": message,
    });
    json_response(status, body)
}

fn json_response(status: u16, body: serde_json::Value) -> HttpResponse {
    let mut response = HttpResponse::new(
        StatusCode::try_from(status).expect("a valid status code"),
        SdkBody::from(body.to_string()),
    );
    response
        .headers_mut()
        .insert("content-type", "application/x-amz-json-1.0");
    response
}

#[derive(Debug)]
struct FaultyHttpClient {
    inner: SharedHttpClient,
    faults: Arc<Faults>,
}

impl HttpClient for FaultyHttpClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(FaultyConnector {
            inner: self.inner.http_connector(settings, components),
            faults: Arc::clone(&self.faults),
        })
    }
}

#[derive(Debug)]
struct FaultyConnector {
    inner: SharedHttpConnector,
    faults: Arc<Faults>,
}

impl HttpConnector for FaultyConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let (faults, inner) = (Arc::clone(&self.faults), self.inner.clone());
        HttpConnectorFuture::new(faults.exchange(inner, request))
    }
}
