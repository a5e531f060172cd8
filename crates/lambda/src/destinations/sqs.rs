//! SQS queues, standard and FIFO, named by URL: `SendMessageBatch`, 10
//! messages a request, each with its stable id as the message attribute
//! [`ID_ATTRIBUTE`] and, on a FIFO queue, as its `MessageDeduplicationId`
//! (SQS drops a copy sent within 5 minutes; the consumer's key drops the
//! rest), its group as `MessageGroupId`.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use exactly_once_core::outbox::{Answers, Message, Outgoing, SendError, Sender};

use super::{ID_ATTRIBUTE, answers_by_index, send_batch};

/// SQS's most messages per `SendMessageBatch`.
const MAX_BATCH: usize = 10;

/// Sends emitted messages to the SQS queues they name by URL.
#[derive(Debug, Clone)]
pub struct SqsSender {
    client: Client,
}

impl SqsSender {
    /// Sends with `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    async fn send_batch(&self, url: &str, messages: &[Outgoing]) -> Vec<Result<(), SendError>> {
        let fifo = is_fifo(url);
        let request = self.client.send_message_batch().queue_url(url);
        send_batch(
            messages,
            |(index, message)| entry(index, message, fifo),
            async |entries| {
                let sent = request.set_entries(Some(entries)).send().await;
                sent.map_err(|err| DisplayErrorContext(err).to_string())
            },
            |count, output| {
                answers_by_index(
                    count,
                    output
                        .successful()
                        .iter()
                        .map(aws_sdk_sqs::types::SendMessageBatchResultEntry::id),
                    output
                        .failed()
                        .iter()
                        .map(|failed| (failed.id(), failed.code(), failed.message())),
                )
            },
        )
        .await
    }
}

impl Sender for SqsSender {
    fn check(&self, message: &Message) -> Result<(), SendError> {
        let url = message.destination.as_str();
        if is_fifo(url) && message.group.is_none() {
            return Err(SendError::Unsupported(format!(
                "{url:?} is a FIFO queue: emit with a group (Message::in_group)"
            )));
        }
        Ok(())
    }

    fn batch_limit(&self, _destination: &str) -> usize {
        MAX_BATCH
    }

    fn send<'a>(&'a self, destination: &'a str, messages: &'a [Outgoing]) -> Answers<'a> {
        Box::pin(self.send_batch(destination, messages))
    }
}

/// Whether the queue at `url` is a FIFO queue (its name ends in `.fifo`).
fn is_fifo(url: &str) -> bool {
    url.trim_end_matches('/').ends_with(".fifo")
}

/// `message` as entry `index` of a batch.
fn entry(
    index: usize,
    message: &Outgoing,
    fifo: bool,
) -> Result<SendMessageBatchRequestEntry, SendError> {
    let id = MessageAttributeValue::builder()
        .data_type("String")
        .string_value(&message.id)
        .build()
        .map_err(|err| SendError::Unsupported(err.to_string()))?;
    let mut entry = SendMessageBatchRequestEntry::builder()
        .id(index.to_string())
        .message_body(&message.body)
        .message_attributes(ID_ATTRIBUTE, id);
    if fifo {
        entry = entry
            .message_deduplication_id(&message.id)
            .set_message_group_id(message.group.clone());
    }
    entry
        .build()
        .map_err(|err| SendError::Unsupported(err.to_string()))
}
