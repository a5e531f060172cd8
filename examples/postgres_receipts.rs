//! A handler whose effect is a SQL row: each payment's receipt is inserted
//! in ONE transaction with its key's COMPLETED row, on the lock-free path
//! (no claim, no lock): both or neither, whatever crashes when. A receipt
//! that already exists (the same payment under another key) refuses the
//! transaction, and the record is FAILED (parked), never half applied.
//!
//! Needs `IDEMPOTENCY_STORE=postgres`, `DATABASE_URL`, the idempotency
//! table (`exactly-once-ops migrate`) and a receipts table:
//! `CREATE TABLE receipts (payment_id TEXT PRIMARY KEY, account_id TEXT
//! NOT NULL, amount_cents BIGINT NOT NULL)`.

use exactly_once::postgres::SqlEffect;
use exactly_once::prelude::*;

#[derive(serde::Deserialize)]
struct Payment {
    payment_id: String,
    account_id: String,
    amount_cents: i64,
}

struct Receipts;

impl RecordHandler<SqlEffect> for Receipts {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        CommitPath::LockFree // the row is the whole effect
    }

    async fn handle(
        &self,
        _: &FencingToken,
        record: &KafkaRecord,
    ) -> Result<Completion<SqlEffect>, HandlerError> {
        let payment: Payment = serde_json::from_slice(&record.value)
            .map_err(|e| HandlerError::Permanent(format!("not a payment: {}", json_error(&e))))?;
        let receipt = SqlEffect::new(
            "INSERT INTO receipts (payment_id, account_id, amount_cents) VALUES ($1, $2, $3)",
        )
        .bind(payment.payment_id.clone())
        .bind(payment.account_id)
        .bind(payment.amount_cents)
        // The one row it writes: receipts of other payments share transactions.
        .on_row("receipts", "payment_id", &payment.payment_id);
        Ok(Completion::transactional(
            format!("receipt {}", payment.payment_id),
            vec![receipt],
        ))
    }
}

#[tokio::main]
async fn main() -> Result<(), StartError> {
    // Its effects are SQL statements: PostgreSQL alone (IDEMPOTENCY_STORE).
    exactly_once::run(exactly_once::postgres::only(Receipts)).await
}
