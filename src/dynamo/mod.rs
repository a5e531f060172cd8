//! The DynamoDB client: built once per container and shared.

mod requests;

pub use crate::store::requests::{RequestCounter, RequestStats};

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::Client;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use std::time::Duration;

/// A client configured from the standard AWS environment (credentials,
/// `AWS_REGION`, `AWS_ENDPOINT_URL_DYNAMODB` for DynamoDB Local), with an
/// HTTPS client on rustls + ring and bounded retries and timeouts.
pub async fn connect() -> Client {
    Client::new(&sdk_config().await)
}

/// The AWS configuration every client of the function shares (the SQS
/// dead-letter queue's too): the standard environment, rustls + ring,
/// 3 attempts, 1 s per attempt, 2 s per operation.
pub async fn sdk_config() -> aws_config::SdkConfig {
    let http_client = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https();
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(http_client)
        .retry_config(RetryConfig::standard().with_max_attempts(3))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(1))
                .operation_attempt_timeout(Duration::from_secs(1))
                .operation_timeout(Duration::from_secs(2))
                .build(),
        )
        .load()
        .await
}
