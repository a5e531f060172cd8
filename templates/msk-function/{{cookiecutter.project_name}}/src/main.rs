use exactly_once::prelude::*;

/// A payment as the producers write it.
#[derive(serde::Deserialize)]
struct Payment {
    payment_id: String,
    account_id: String,
    amount_cents: i64,
}

/// Adds each payment to its account's balance, once per idempotency key.
struct Ledger {
    table: String,
}

// Generic over the store's effect: runs on DynamoDB, PostgreSQL and Redis.
impl<E: Send + Sync + 'static> RecordHandler<E> for Ledger {
    type Record = Record;

    fn commit_path(&self) -> CommitPath {
        // No side effect of its own: the increment below commits in ONE
        // transaction with the key's COMPLETED item (no claim, no lock).
        CommitPath::LockFree
    }

    async fn handle(
        &self,
        _: &FencingToken,
        record: &Record,
    ) -> Result<Completion<E>, HandlerError> {
        let payment: Payment = serde_json::from_slice(&record.body())
            // Permanent: stored FAILED, never retried; names no value.
            .map_err(|e| HandlerError::Permanent(format!("not a payment: {}", json_error(&e))))?;
        let credit = Increment::new(&self.table, "account_id", &payment.account_id)
            .add("balance_cents", payment.amount_cents);
        Ok(Completion::done(format!("paid {}", payment.payment_id)).increment(credit))
    }
}

#[tokio::main]
async fn main() -> Result<(), StartError> {
    let table = required_var("LEDGER_TABLE")?;
    exactly_once::run(Ledger { table }).await
}

#[cfg(test)]
mod tests;
