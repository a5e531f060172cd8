//! The Lambda function: MSK events in, payments applied to the ledger exactly
//! once, a partial batch response out. Everything else (the idempotency
//! store `IDEMPOTENCY_STORE` names, the shared duplicate cache, the
//! dead-letter queue, spans, metrics) is `exactly_once::run`'s.

use exactly_once::StartError;
use ledger::{LedgerHandler, LedgerSettings};

#[tokio::main]
async fn main() -> Result<(), StartError> {
    let ledger = LedgerSettings::from_env()?;
    exactly_once::run_with(async |backend| LedgerHandler::connect(backend, ledger).await).await
}
