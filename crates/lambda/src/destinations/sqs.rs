//! SQS queues, standard and FIFO: `SendMessageBatch`, 10 messages a
//! request, each with its stable id as the message attribute
//! `idempotency-key` (where a consumer on this crate reads its key by
//! default) and, on a FIFO queue, as its `MessageDeduplicationId` (SQS
//! drops a copy sent within 5 minutes; the consumer's key drops the rest),
//! its group as `MessageGroupId`.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use exactly_once_core::outbox::{Answers, Message, Outgoing, SendError, Sender};

/// The message attribute a message's stable id travels in.
pub const ID_ATTRIBUTE: &str = "idempotency-key";

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
        let entries: Result<Vec<_>, _> = messages
            .iter()
            .enumerate()
            .map(|(index, message)| entry(index, message, fifo))
            .collect();
        let entries = match entries {
            Ok(entries) => entries,
            Err(err) => return messages.iter().map(|_| Err(err.clone())).collect(),
        };
        let sent = self
            .client
            .send_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await;
        let output = match sent {
            Ok(output) => output,
            Err(err) => {
                let err = SendError::NoAnswer(format!("{}", DisplayErrorContext(&err)));
                return messages.iter().map(|_| Err(err.clone())).collect();
            }
        };
        let mut answers: Vec<Result<(), SendError>> = messages
            .iter()
            .map(|_| {
                Err(SendError::NoAnswer(
                    "SQS answered neither success nor failure for it".into(),
                ))
            })
            .collect();
        for ok in output.successful() {
            if let Some(answer) = ok
                .id()
                .parse::<usize>()
                .ok()
                .and_then(|i| answers.get_mut(i))
            {
                *answer = Ok(());
            }
        }
        for failed in output.failed() {
            if let Some(answer) = failed
                .id()
                .parse::<usize>()
                .ok()
                .and_then(|i| answers.get_mut(i))
            {
                *answer = Err(SendError::Refused {
                    code: failed.code().to_owned(),
                    message: failed.message().unwrap_or_default().to_owned(),
                });
            }
        }
        answers
    }
}

impl Sender for SqsSender {
    fn check(&self, message: &Message) -> Result<(), SendError> {
        let url = message.destination.as_str();
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(SendError::Unsupported(format!(
                "{url:?} is not an SQS queue URL (SNS topics, EventBridge buses and Kinesis \
                 streams are not destinations yet)"
            )));
        }
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
