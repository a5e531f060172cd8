//! The SQS dead-letter queue (feature `sqs`): one `SendMessage` per
//! parked record, all at once.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::DisplayErrorContext;
use serde_json::Value;
use tokio::task::JoinSet;

use super::{DeadLetters, Forwarding, Parked, message};
use crate::sources::Coordinates;

/// An SQS queue parked records go to (`DEAD_LETTER_QUEUE_URL`).
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
    pub async fn send(&self, event: &Value, parked: Vec<Parked>) -> Vec<(Coordinates, String)> {
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

impl DeadLetters for DeadLetterQueue {
    fn forward<'a>(&'a self, event: &'a Value, parked: Vec<Parked>) -> Forwarding<'a> {
        Box::pin(self.send(event, parked))
    }
}
