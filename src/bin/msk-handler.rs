//! The Lambda function: MSK events in, payments applied to the ledger exactly
//! once, a partial batch response out.

use exactly_once::engine::Engine;
use exactly_once::lambda::settings::{self, SettingsError};
use exactly_once::lambda::{MskFunction, Settings};
use exactly_once::ledger::{LedgerHandler, LedgerMode};
use exactly_once::{IdempotencyStore, dynamo};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let settings = Settings::from_env()?;
    let (ledger_table, mode) = ledger_settings()?;
    let client = dynamo::connect().await;
    let store = IdempotencyStore::new(client.clone(), settings.store);
    let function = MskFunction::new(
        Engine::new(store, LedgerHandler::new(client, ledger_table, mode)),
        settings.keys,
        settings.safety_margin,
    );
    let function = &function;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        function.handle(event).await
    }))
    .await
}

/// `LEDGER_TABLE` (required) and `LEDGER_MODE` (transactional, the default,
/// or direct).
fn ledger_settings() -> Result<(String, LedgerMode), SettingsError> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let table = settings::required(var, "LEDGER_TABLE")?;
    let mode = match var("LEDGER_MODE") {
        None => LedgerMode::Transactional,
        Some(text) => LedgerMode::parse(&text).map_err(|reason| SettingsError {
            variable: "LEDGER_MODE",
            reason,
        })?,
    };
    Ok((table, mode))
}
