//! The Lambda function: MSK events in, payments applied to the ledger exactly
//! once, a partial batch response out.

use exactly_once::DynamoDbStore;
use exactly_once::dynamo::{self, RequestCounter};
use exactly_once::engine::Engine;
use exactly_once::lambda::dead_letter::DeadLetterQueue;
use exactly_once::lambda::{MskFunction, Settings};
use exactly_once::ledger::{LedgerHandler, LedgerSettings};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let settings = Settings::from_env()?;
    let ledger = LedgerSettings::from_lookup(|name| std::env::var(name).ok())?;
    let requests = RequestCounter::default();
    let aws = dynamo::sdk_config().await;
    let client = requests.attach(&aws_sdk_dynamodb::Client::new(&aws));
    let dead_letters = settings
        .function
        .dead_letter_queue_url
        .clone()
        .map(|url| DeadLetterQueue::new(aws_sdk_sqs::Client::new(&aws), url));
    let store = DynamoDbStore::new(client.clone(), settings.store);
    let handler = LedgerHandler::from_settings(client, ledger);
    let function = MskFunction::new(
        Engine::new(store, handler, settings.engine),
        settings.function,
    )
    .with_request_counter(requests);
    let function = match dead_letters {
        Some(queue) => function.with_dead_letter_queue(queue),
        None => function,
    };
    let function = &function;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        function.handle(event).await
    }))
    .await
}
