//! The simulated network round trip: a wrapper around the SDK's HTTP client
//! that delays every DynamoDB request and times DynamoDB Local's own part.
//! It also counts the transactions sent while another one touching a common
//! item was in flight (DynamoDB in AWS cancels those with
//! `TransactionConflict`; DynamoDB Local queues them), and the transactions
//! refused (a condition failed: the cost of splitting a group).

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use exactly_once::dynamodb::CountRequests as _;
use exactly_once::store::requests::RequestCounter;

use crate::transactions::{InFlight, transaction_items};

/// An HTTP client whose every request first waits `delay`, and which times
/// the real request (DynamoDB Local's answer, without the simulated delay).
#[derive(Debug, Clone)]
struct DelayedHttpClient {
    inner: SharedHttpClient,
    delay: Duration,
    served: ServiceTime,
}

/// Requests sent to DynamoDB Local and the time they took there (from the
/// hand-over to the real HTTP client to the response: loopback, queueing in
/// the server and its work), excluding the simulated round trip.
#[derive(Debug, Clone, Default)]
pub struct ServiceTime {
    pub requests: Arc<AtomicU64>,
    pub micros: Arc<AtomicU64>,
    /// Transactions sent while another on a common item was in flight.
    pub overlaps: Arc<AtomicU64>,
    /// Transactions answered 400 (cancelled: a condition failed).
    pub refused: Arc<AtomicU64>,
    transactions: Arc<Mutex<InFlight>>,
}

impl ServiceTime {
    pub fn reset(&self) {
        for counter in [&self.requests, &self.micros, &self.overlaps, &self.refused] {
            counter.store(0, Relaxed);
        }
    }

    pub fn read(&self) -> (u64, u64) {
        (self.requests.load(Relaxed), self.micros.load(Relaxed))
    }

    /// Overlapping and refused transactions.
    pub fn transactions(&self) -> (u64, u64) {
        (self.overlaps.load(Relaxed), self.refused.load(Relaxed))
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, InFlight> {
        self.transactions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Tokio's timer has millisecond ticks and rounds a sleep up to the next
/// tick: sleeping half a tick less makes the mean delay the one asked for.
const TIMER_ROUNDING: Duration = Duration::from_micros(500);

impl HttpClient for DelayedHttpClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(DelayedConnector {
            inner: self.inner.http_connector(settings, components),
            delay: self.delay,
            served: self.served.clone(),
        })
    }
}

#[derive(Debug)]
struct DelayedConnector {
    inner: SharedHttpConnector,
    delay: Duration,
    served: ServiceTime,
}

impl HttpConnector for DelayedConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let (inner, delay, served) = (self.inner.clone(), self.delay, self.served.clone());
        HttpConnectorFuture::new(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay.saturating_sub(TIMER_ROUNDING)).await;
            }
            let operation = request
                .headers()
                .get("x-amz-target")
                .and_then(|target| target.rsplit('.').next())
                .unwrap_or_default()
                .to_owned();
            let items = transaction_items(&operation, request.body().bytes().unwrap_or_default());
            let ticket = {
                let mut in_flight = served.in_flight();
                if in_flight.conflicts(&items).contains(&true) {
                    served.overlaps.fetch_add(1, Relaxed);
                }
                in_flight.send(items)
            };
            let started = Instant::now();
            let response = inner.call(request).await;
            served.in_flight().answered(ticket);
            let refused = response.as_ref().is_ok_and(|r| r.status().as_u16() == 400);
            if operation == "TransactWriteItems" && refused {
                served.refused.fetch_add(1, Relaxed);
            }
            served.requests.fetch_add(1, Relaxed);
            served
                .micros
                .fetch_add(started.elapsed().as_micros() as u64, Relaxed);
            response
        })
    }
}

/// `base` with `rtt` added to every request, timed by `served`, and
/// `counter` attached.
pub fn client_with(
    base: &Client,
    rtt_ms: u64,
    counter: &RequestCounter,
    served: &ServiceTime,
) -> Client {
    let inner = base
        .config()
        .http_client()
        .expect("connect() sets an HTTP client");
    let delayed = DelayedHttpClient {
        inner,
        delay: Duration::from_millis(rtt_ms),
        served: served.clone(),
    };
    counter.attach(&Client::from_conf(
        base.config().to_builder().http_client(delayed).build(),
    ))
}

/// `base`, an SQS client, with `rtt` added to every request as to
/// DynamoDB's (the same wrapper), its requests counted by `served`.
pub fn sqs_client_with(
    base: &aws_sdk_sqs::Client,
    rtt_ms: u64,
    served: &ServiceTime,
) -> aws_sdk_sqs::Client {
    let inner = base
        .config()
        .http_client()
        .expect("sdk_config() sets an HTTP client");
    let delayed = DelayedHttpClient {
        inner,
        delay: Duration::from_millis(rtt_ms),
        served: served.clone(),
    };
    aws_sdk_sqs::Client::from_conf(base.config().to_builder().http_client(delayed).build())
}
