//! Kinesis data streams, named by ARN: `PutRecords`, 16 records a request
//! (16 of the largest outbox, 256 KiB, fill Kinesis's 5 MiB a request).
//! A message's body is the record's data; its stable id is the record's
//! partition key (a consumer on this crate reads it with
//! `IDEMPOTENCY_KEY_SOURCE=record-key`). A message's group picks the shard:
//! the explicit hash key is a hash of the group, so a group's records go
//! to one shard, in the order sent.

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::error::DisplayErrorContext;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use exactly_once_core::outbox::{Answers, Message, Outgoing, SendError, Sender};
use exactly_once_core::store::payload_hash;

use super::{answers_in_order, send_batch};

/// Records per `PutRecords`.
const MAX_BATCH: usize = 16;

/// Sends emitted messages to the Kinesis streams they name by ARN.
#[derive(Debug, Clone)]
pub struct KinesisSender {
    client: Client,
}

impl KinesisSender {
    /// Sends with `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    async fn put_records(&self, stream: &str, messages: &[Outgoing]) -> Vec<Result<(), SendError>> {
        let request = self.client.put_records().stream_arn(stream);
        send_batch(
            messages,
            |(_, message)| entry(message),
            async |entries| {
                let put = request.set_records(Some(entries)).send().await;
                put.map_err(|err| DisplayErrorContext(err).to_string())
            },
            |count, output| {
                answers_in_order(
                    count,
                    output
                        .records()
                        .iter()
                        .map(|record| (record.error_code(), record.error_message())),
                )
            },
        )
        .await
    }
}

impl Sender for KinesisSender {
    fn check(&self, _message: &Message) -> Result<(), SendError> {
        // Any body fits a record (the outbox's 256 KiB < Kinesis's 1 MiB).
        Ok(())
    }

    fn batch_limit(&self, _destination: &str) -> usize {
        MAX_BATCH
    }

    fn send<'a>(&'a self, destination: &'a str, messages: &'a [Outgoing]) -> Answers<'a> {
        Box::pin(self.put_records(destination, messages))
    }
}

/// `message` as a record: keyed by its id, on its group's shard.
fn entry(message: &Outgoing) -> Result<PutRecordsRequestEntry, SendError> {
    PutRecordsRequestEntry::builder()
        .data(Blob::new(message.body.as_bytes()))
        .partition_key(&message.id)
        .set_explicit_hash_key(message.group.as_deref().map(hash_key))
        .build()
        .map_err(|err| SendError::Unsupported(err.to_string()))
}

/// The explicit hash key of `group`: the first 128 bits of its SHA-256, in
/// decimal (Kinesis's hash key space is 0 to 2^128 - 1).
fn hash_key(group: &str) -> String {
    let digest = payload_hash(group.as_bytes());
    u128::from_str_radix(&digest[..32], 16)
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_has_one_hash_key_in_kinesis_range() {
        assert_eq!(hash_key("account-1"), hash_key("account-1"));
        assert_ne!(hash_key("account-1"), hash_key("account-2"));
        assert!(hash_key("account-1").parse::<u128>().is_ok());
    }
}
