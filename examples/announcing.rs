//! A handler that debits an account and announces it: the debit is an
//! increment (refused below a zero balance), the announcement a message to
//! the SQS queue `PAYMENTS_APPLIED_QUEUE_URL`. Both commit together, on the
//! lock-free path: the message is kept on the key's COMPLETED item, written
//! in the transaction of the debit, and sent after it under an id that is
//! the same on every attempt (the message attribute `idempotency-key`, and
//! the deduplication id on a FIFO queue). A refused debit announces
//! nothing; a redelivery never announces twice under two ids; the record
//! counts as done only once SQS took its message. docs/outbox.md says what
//! this guarantees and what it does not.
//!
//! Runs on every store (increments are every store's); the function needs
//! the `sqs` feature of `exactly-once` to send.

use exactly_once::prelude::*;

#[derive(serde::Deserialize)]
struct Payment {
    payment_id: String,
    account_id: String,
    amount_cents: i64,
}

struct Announcing {
    /// Where applied payments are announced.
    queue_url: String,
    /// The accounts' table (`LEDGER_TABLE`).
    table: String,
}

impl<E: Send + Sync + 'static> RecordHandler<E> for Announcing {
    type Record = Record;

    fn commit_path(&self) -> CommitPath {
        CommitPath::LockFree // the debit and the message are the whole effect
    }

    async fn handle(
        &self,
        _: &FencingToken,
        record: &Record,
    ) -> Result<Completion<E>, HandlerError> {
        let payment: Payment = serde_json::from_slice(&record.body())
            .map_err(|e| HandlerError::Permanent(format!("not a payment: {}", json_error(&e))))?;
        let debit = Increment::new(&self.table, "account_id", &payment.account_id).add_at_least(
            "balance_cents",
            -payment.amount_cents,
            0,
        );
        let applied = serde_json::json!({
            "type": "PaymentApplied",
            "payment_id": payment.payment_id,
            "account_id": payment.account_id,
            "amount_cents": payment.amount_cents,
        });
        // One account's announcements in order (a FIFO queue's group).
        let message =
            Message::new(&self.queue_url, applied.to_string()).in_group(&payment.account_id);
        Ok(Completion::done(format!("debited {}", payment.payment_id))
            .increment(debit) // refused below 0: FAILED, and nothing announced
            .emit_message(message))
    }
}

#[tokio::main]
async fn main() -> Result<(), StartError> {
    exactly_once::run(Announcing {
        queue_url: required_var("PAYMENTS_APPLIED_QUEUE_URL")?,
        table: required_var("LEDGER_TABLE")?,
    })
    .await
}
