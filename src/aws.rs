//! The AWS configuration the function's clients share: DynamoDB, the SQS
//! dead-letter queue, the destinations of emitted messages, and
//! PostgreSQL's Secrets Manager secret or IAM token.

use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};

pub use aws_config::SdkConfig;

/// The standard AWS environment (credentials, `AWS_REGION`,
/// `AWS_ENDPOINT_URL_DYNAMODB` for DynamoDB Local, ...), with an HTTPS
/// client on rustls + ring (no OpenSSL in the binary), 3 attempts, 3 s per
/// attempt and 10 s per operation (the DynamoDB client's own come from
/// its settings: [`dynamodb_client_with`]): a call that hangs is given up
/// instead of eating the invocation, a slow one is answered.
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
                .operation_attempt_timeout(Duration::from_secs(3))
                .operation_timeout(Duration::from_secs(10))
                .build(),
        )
        .load()
        .await
}

/// A DynamoDB client of [`sdk_config`], with the default timeouts of
/// [`exactly_once_dynamodb::DynamoDbSettings`].
#[cfg(feature = "dynamodb")]
pub async fn dynamodb_client() -> exactly_once_dynamodb::Client {
    dynamodb_client_with(&exactly_once_dynamodb::DynamoDbSettings::default()).await
}

/// A DynamoDB client of [`sdk_config`] with the timeouts of `settings`
/// (`DYNAMODB_ATTEMPT_TIMEOUT_MS`, `DYNAMODB_OPERATION_TIMEOUT_MS`).
#[cfg(feature = "dynamodb")]
pub async fn dynamodb_client_with(
    settings: &exactly_once_dynamodb::DynamoDbSettings,
) -> exactly_once_dynamodb::Client {
    let config =
        exactly_once_dynamodb::aws_sdk_dynamodb::config::Builder::from(&sdk_config().await)
            .timeout_config(settings.timeout_config())
            .build();
    exactly_once_dynamodb::Client::from_conf(config)
}

/// A sender of each destination kind this build has (features `sqs`,
/// `sns`, `eventbridge`, `kinesis`, `kafka`), its clients of
/// [`sdk_config`] (Kafka's signs MSK IAM tokens and reads SCRAM secrets
/// with it).
#[cfg(any(
    feature = "sqs",
    feature = "sns",
    feature = "eventbridge",
    feature = "kinesis",
    feature = "kafka"
))]
pub async fn destinations() -> exactly_once_lambda::destinations::Destinations {
    use exactly_once_lambda::destinations::{self as to, Kind};
    let config = sdk_config().await;
    let destinations = to::Destinations::new();
    #[cfg(feature = "sqs")]
    let destinations = destinations.with(
        Kind::SqsQueue,
        to::SqsSender::new(aws_sdk_sqs::Client::new(&config)),
    );
    #[cfg(feature = "sns")]
    let destinations = destinations.with(
        Kind::SnsTopic,
        to::SnsSender::new(aws_sdk_sns::Client::new(&config)),
    );
    #[cfg(feature = "eventbridge")]
    let destinations = destinations.with(
        Kind::EventBus,
        to::EventBridgeSender::new(aws_sdk_eventbridge::Client::new(&config)),
    );
    #[cfg(feature = "kinesis")]
    let destinations = destinations.with(
        Kind::KinesisStream,
        to::KinesisSender::new(aws_sdk_kinesis::Client::new(&config)),
    );
    #[cfg(feature = "kafka")]
    let destinations = destinations.with(Kind::KafkaTopic, to::KafkaSender::new(config.clone()));
    destinations
}
