//! Parked records, forwarded whole to a dead-letter queue
//! (`DEAD_LETTER_QUEUE_URL`, an SQS queue): the event source mapping's own
//! on-failure destination keeps only a record's coordinates, and a parked
//! record is never sent there at all. Each message holds the record exactly
//! as Lambda delivered it (base64 key and value, headers), why it was parked
//! and the event's source, so that it can be inspected and fed through the
//! function again. Sent at least once: a parked record delivered again is
//! sent again.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::DisplayErrorContext;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use super::decode::Coordinates;

/// One parked record to forward.
#[derive(Debug, Clone)]
pub struct Parked {
    /// Where the record sits.
    pub at: Coordinates,
    /// The outcome's name (`failed`, `previously-failed`).
    pub outcome: &'static str,
    /// The stored error (never payload content from this crate).
    pub error: Option<String>,
}

/// The queue parked records go to.
#[derive(Debug, Clone)]
pub struct DeadLetterQueue {
    client: Client,
    url: String,
}

impl DeadLetterQueue {
    /// The queue at `url`, sent to with `client`.
    pub fn new(client: Client, url: impl Into<String>) -> Self {
        Self {
            client,
            url: url.into(),
        }
    }

    /// Sends every parked record of `event` (one SendMessage each, at
    /// once); returns the ones that could not be sent, with why: the caller
    /// reports them, so that nothing is lost.
    pub async fn forward(&self, event: &Value, parked: Vec<Parked>) -> Vec<(Coordinates, String)> {
        let mut sends = JoinSet::new();
        for record in parked {
            let (client, url) = (self.client.clone(), self.url.clone());
            let body = message(event, &record);
            sends.spawn(async move {
                let Some(body) = body else {
                    return Some((record.at, "the record is not in the event".to_owned()));
                };
                let sent = client
                    .send_message()
                    .queue_url(url)
                    .message_body(body)
                    .send()
                    .await;
                sent.err().map(|err| {
                    let why = format!("dead-letter queue: {}", DisplayErrorContext(&err));
                    (record.at, why)
                })
            });
        }
        let mut unsent = Vec::new();
        while let Some(joined) = sends.join_next().await {
            match joined {
                Ok(None) => {}
                Ok(Some(failure)) => unsent.push(failure),
                Err(err) => tracing::error!(error = %err, "a dead-letter send failed"),
            }
        }
        unsent
    }
}

/// The message of one parked record: the record as Lambda sent it.
fn message(event: &Value, parked: &Parked) -> Option<String> {
    let records = event
        .get("records")?
        .get(&parked.at.partition)?
        .as_array()?;
    let record = records
        .iter()
        .find(|r| r.get("offset").and_then(Value::as_i64) == Some(parked.at.offset))?;
    Some(
        json!({
            "reason": parked.outcome,
            "error": parked.error,
            "partition": parked.at.partition,
            "offset": parked.at.offset,
            "eventSource": event.get("eventSource"),
            "eventSourceArn": event.get("eventSourceArn"),
            "bootstrapServers": event.get("bootstrapServers"),
            "record": record,
        })
        .to_string(),
    )
}
