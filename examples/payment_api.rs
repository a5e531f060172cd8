//! A handler on the locking path that charges a payment API: the effect is
//! outside DynamoDB, so the engine claims the key first, and the handler
//! passes the fencing token's idempotency key to the API, the same for every
//! delivery, takeover and release of the key, so the API charges once.
//!
//! Run it like the demo function, with `PAYMENTS_API_URL` (e.g.
//! `http://127.0.0.1:8080`) and the settings of README: Configuration.

use bytes::Bytes;
use exactly_once::prelude::*;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

#[derive(serde::Deserialize)]
struct Payment {
    payment_id: String,
    amount_cents: i64,
}

struct PaymentApi {
    http: Client<HttpConnector, Full<Bytes>>,
    url: String,
}

impl<E: Send + Sync + 'static> RecordHandler<E> for PaymentApi {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        CommitPath::Locking // the effect is outside DynamoDB: claim, then call
    }

    async fn handle(
        &self,
        token: &FencingToken,
        record: &KafkaRecord,
    ) -> Result<Completion<E>, HandlerError> {
        let payment: Payment = serde_json::from_slice(&record.value)
            .map_err(|e| HandlerError::Permanent(format!("not a payment: {}", json_error(&e))))?;
        let body =
            serde_json::json!({"payment": payment.payment_id, "amount": payment.amount_cents});
        let request = hyper::Request::post(format!("{}/charges", self.url))
            .header("content-type", "application/json")
            .header("idempotency-key", token.idempotency_key())
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| HandlerError::Permanent(format!("bad request: {e}")))?;
        let response = self
            .http
            .request(request)
            .await
            .map_err(|e| HandlerError::Retryable(format!("payment API unreachable: {e}")))?;
        let status = response.status();
        let receipt = response
            .into_body()
            .collect()
            .await
            .map_err(|e| HandlerError::Retryable(format!("payment API answer lost: {e}")))?
            .to_bytes();
        match status.as_u16() {
            200..=299 => Ok(Completion::done(String::from_utf8_lossy(&receipt))),
            // The API refused this payment for good (e.g. card declined).
            400..=499 => Err(HandlerError::Permanent(format!("payment API: {status}"))),
            _ => Err(HandlerError::Retryable(format!("payment API: {status}"))),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), StartError> {
    let url = required_var("PAYMENTS_API_URL")?;
    let http = Client::builder(TokioExecutor::new()).build_http();
    // No writes for the store to commit: runs on every store.
    exactly_once::run(PaymentApi { http, url }).await
}
