//! The AWS configuration the function's clients share: DynamoDB, the SQS
//! dead-letter queue, and PostgreSQL's Secrets Manager secret or IAM token.

use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};

pub use aws_config::SdkConfig;

/// The standard AWS environment (credentials, `AWS_REGION`,
/// `AWS_ENDPOINT_URL_DYNAMODB` for DynamoDB Local, ...), with an HTTPS
/// client on rustls + ring (no OpenSSL in the binary), 3 attempts, 1 s per
/// attempt and 2 s per operation: a store call that hangs reports its
/// record instead of eating the invocation.
pub async fn sdk_config() -> SdkConfig {
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

/// A DynamoDB client of [`sdk_config`].
#[cfg(feature = "dynamodb")]
pub async fn dynamodb_client() -> exactly_once_dynamodb::Client {
    exactly_once_dynamodb::Client::new(&sdk_config().await)
}
