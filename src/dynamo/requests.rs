//! Counting and timing DynamoDB requests by operation, with an SDK
//! interceptor: every HTTP request the client sends (retries included).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::interceptors::{
    BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_types::config_bag::{Storable, StoreReplace};

/// Requests of one operation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RequestStats {
    /// Requests sent (retries included).
    pub count: u64,
    /// Sum of the requests' round trips, milliseconds.
    pub total_ms: f64,
    /// The longest round trip, ms.
    pub max_ms: f64,
}

impl RequestStats {
    /// The requests since `earlier` was read (`max_ms`: the largest so far).
    pub fn since(&self, earlier: &RequestStats) -> RequestStats {
        RequestStats {
            count: self.count - earlier.count,
            total_ms: self.total_ms - earlier.total_ms,
            max_ms: self.max_ms,
        }
    }
}

/// Requests sent, by operation name (`PutItem`, `BatchGetItem`, ...).
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    stats: Arc<Mutex<BTreeMap<String, RequestStats>>>,
}

/// When the current attempt was handed to the HTTP client.
#[derive(Debug, Clone)]
struct AttemptStart(Instant);

impl Storable for AttemptStart {
    type Storer = StoreReplace<Self>;
}

impl RequestCounter {
    /// `client` with this counter attached (shares the client's connections).
    pub fn attach(&self, client: &Client) -> Client {
        Client::from_conf(
            client
                .config()
                .to_builder()
                .interceptor(self.clone())
                .build(),
        )
    }

    /// Requests per operation so far.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.lock()
            .iter()
            .map(|(operation, stats)| (operation.clone(), stats.count))
            .collect()
    }

    /// Counts and round trips per operation so far.
    pub fn stats(&self) -> BTreeMap<String, RequestStats> {
        self.lock().clone()
    }

    /// Requests so far, all operations.
    pub fn total(&self) -> u64 {
        self.lock().values().map(|stats| stats.count).sum()
    }

    /// Starts counting from zero.
    pub fn reset(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, RequestStats>> {
        self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        cfg.interceptor_state()
            .store_put(AttemptStart(Instant::now()));
        Ok(())
    }

    fn read_after_attempt(
        &self,
        _context: &FinalizerInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // An attempt that never reached the HTTP client sent nothing.
        let Some(AttemptStart(started)) = cfg.load::<AttemptStart>().cloned() else {
            return Ok(());
        };
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let mut stats = self.lock();
        let entry = stats.entry(operation(cfg).to_owned()).or_default();
        entry.count += 1;
        entry.total_ms += ms;
        entry.max_ms = entry.max_ms.max(ms);
        Ok(())
    }
}

/// The name of the operation being sent (`PutItem`, ...).
fn operation(cfg: &ConfigBag) -> &str {
    cfg.load::<Metadata>()
        .map_or("unknown", |metadata| metadata.name())
}
