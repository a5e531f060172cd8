//! SNS topics, standard and FIFO, named by ARN: `PublishBatch`, 10
//! messages a request, each with its stable id as the message attribute
//! [`ID_ATTRIBUTE`] (an SQS queue subscribed with raw message delivery
//! gets it as its message attribute, where a consumer on this crate reads
//! its key by default) and, on a FIFO topic, as its
//! `MessageDeduplicationId`, its group as `MessageGroupId`.

use aws_sdk_sns::Client;
use aws_sdk_sns::error::DisplayErrorContext;
use aws_sdk_sns::types::{MessageAttributeValue, PublishBatchRequestEntry};
use exactly_once_core::outbox::{Answers, Message, Outgoing, SendError, Sender};

use super::{ID_ATTRIBUTE, answers_by_index, send_batch};

/// SNS's most messages per `PublishBatch`.
const MAX_BATCH: usize = 10;

/// Sends emitted messages to the SNS topics they name by ARN.
#[derive(Debug, Clone)]
pub struct SnsSender {
    client: Client,
}

impl SnsSender {
    /// Sends with `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    async fn publish_batch(
        &self,
        topic: &str,
        messages: &[Outgoing],
    ) -> Vec<Result<(), SendError>> {
        let fifo = is_fifo(topic);
        let request = self.client.publish_batch().topic_arn(topic);
        send_batch(
            messages,
            |(index, message)| entry(index, message, fifo),
            async |entries| {
                let published = request
                    .set_publish_batch_request_entries(Some(entries))
                    .send()
                    .await;
                published.map_err(|err| DisplayErrorContext(err).to_string())
            },
            |count, output| {
                answers_by_index(
                    count,
                    output.successful().iter().filter_map(|ok| ok.id()),
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

impl Sender for SnsSender {
    fn check(&self, message: &Message) -> Result<(), SendError> {
        let topic = message.destination.as_str();
        if is_fifo(topic) && message.group.is_none() {
            return Err(SendError::Unsupported(format!(
                "{topic:?} is a FIFO topic: emit with a group (Message::in_group)"
            )));
        }
        Ok(())
    }

    fn batch_limit(&self, _destination: &str) -> usize {
        MAX_BATCH
    }

    fn send<'a>(&'a self, destination: &'a str, messages: &'a [Outgoing]) -> Answers<'a> {
        Box::pin(self.publish_batch(destination, messages))
    }
}

/// Whether the topic `arn` names is a FIFO topic (its name ends in `.fifo`).
fn is_fifo(arn: &str) -> bool {
    arn.ends_with(".fifo")
}

/// `message` as entry `index` of a batch.
fn entry(
    index: usize,
    message: &Outgoing,
    fifo: bool,
) -> Result<PublishBatchRequestEntry, SendError> {
    let id = MessageAttributeValue::builder()
        .data_type("String")
        .string_value(&message.id)
        .build()
        .map_err(|err| SendError::Unsupported(err.to_string()))?;
    let mut entry = PublishBatchRequestEntry::builder()
        .id(index.to_string())
        .message(&message.body)
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
