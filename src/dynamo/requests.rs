//! Counting DynamoDB requests by operation, with an SDK interceptor: every
//! HTTP request the client sends (retries included) is counted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;

/// Requests sent, by operation name (`PutItem`, `BatchGetItem`, ...).
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
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
        self.lock().clone()
    }

    /// Requests so far, all operations.
    pub fn total(&self) -> u64 {
        self.lock().values().sum()
    }

    /// Starts counting from zero.
    pub fn reset(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
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
        let operation = cfg
            .load::<Metadata>()
            .map_or("unknown", |metadata| metadata.name())
            .to_owned();
        *self.lock().entry(operation).or_default() += 1;
        Ok(())
    }
}
