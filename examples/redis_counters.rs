//! A handler whose effects are Redis writes: each payment adds to its
//! account's hash (`HINCRBY`, refused below a zero balance) and creates its
//! receipt hash, in the SAME Lua script as its key's completion, on the
//! lock-free path: all or nothing. An overdraft is FAILED (parked).
//!
//! Needs `IDEMPOTENCY_STORE=redis` and `REDIS_URL`. On a Redis Cluster
//! (`REDIS_CLUSTER=true`) every key shares the idempotency table's hash
//! tag, e.g. `IDEMPOTENCY_TABLE={payments}idempotency` and the keys
//! `{payments}account:...` below.

use exactly_once::prelude::*;
use exactly_once::redis::RedisEffect;

#[derive(serde::Deserialize)]
struct Payment {
    payment_id: String,
    account_id: String,
    amount_cents: i64,
}

struct Counters;

impl RecordHandler<RedisEffect> for Counters {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        CommitPath::LockFree // the writes are the whole effect
    }

    async fn handle(
        &self,
        _: &FencingToken,
        record: &KafkaRecord,
    ) -> Result<Completion<RedisEffect>, HandlerError> {
        let payment: Payment = serde_json::from_slice(&record.value)
            .map_err(|e| HandlerError::Permanent(format!("not a payment: {}", json_error(&e))))?;
        let account = format!("{{payments}}account:{}", payment.account_id);
        let writes = vec![
            RedisEffect::add(&account, "balance_cents", payment.amount_cents, Some(0)),
            RedisEffect::put_new(
                format!("{{payments}}receipt:{}", payment.payment_id),
                [("account_id", payment.account_id.as_str())],
            ),
        ];
        Ok(Completion {
            on_condition_failure: ConditionFailure::Permanent, // an overdraft: FAILED
            ..Completion::transactional(format!("paid {}", payment.payment_id), writes)
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), StartError> {
    // Its effects are Redis writes: Redis alone (IDEMPOTENCY_STORE).
    exactly_once::run(exactly_once::redis::only(Counters)).await
}
