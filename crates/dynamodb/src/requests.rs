//! Counting and timing DynamoDB requests by operation, with an SDK
//! interceptor: every HTTP request the client sends (retries included),
//! into the current invocation's scope (every store's client has it, see
//! [`crate::DynamoDbStore::new`]) or into a [`RequestCounter`] attached to
//! the client.

use std::time::Instant;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::interceptors::{
    BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_types::config_bag::{Storable, StoreReplace};

use exactly_once_core::store::requests::{self, RequestCounter};

/// When the current attempt was handed to the HTTP client.
#[derive(Debug, Clone)]
struct AttemptStart(Instant);

impl Storable for AttemptStart {
    type Storer = StoreReplace<Self>;
}

/// Counts a DynamoDB client's requests into a [`RequestCounter`].
pub trait CountRequests {
    /// `client` with this counter attached (shares the client's
    /// connections): every HTTP request it sends, retries included, is
    /// counted and timed by operation (`PutItem`, ...).
    fn attach(&self, client: &Client) -> Client;
}

impl CountRequests for RequestCounter {
    fn attach(&self, client: &Client) -> Client {
        Client::from_conf(
            client
                .config()
                .to_builder()
                .interceptor(Counting(Some(self.clone())))
                .build(),
        )
    }
}

/// The interceptor counting every request into the invocation it is sent
/// for (`requests::counted`).
pub(crate) fn in_scope() -> impl Intercept + 'static {
    Counting(None)
}

/// The SDK interceptor counting into an attached [`RequestCounter`], or
/// (`None`) into the current invocation's scope.
#[derive(Debug)]
struct Counting(Option<RequestCounter>);

impl Intercept for Counting {
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
        match &self.0 {
            Some(counter) => counter.record(operation(cfg), started.elapsed()),
            None => requests::record_in_scope(operation(cfg), started.elapsed()),
        }
        Ok(())
    }
}

/// The name of the operation being sent (`PutItem`, ...).
fn operation(cfg: &ConfigBag) -> &str {
    cfg.load::<Metadata>()
        .map_or("unknown", |metadata| metadata.name())
}
