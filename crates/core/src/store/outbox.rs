//! The outbox attribute of a COMPLETED item: the messages a record emitted
//! ([`Message`]), as the item keeps them ([`encode`], [`decode`]; at most
//! [`MAX_OUTBOX_BYTES`]), the stable id each is sent under
//! ([`message_id`]), and what an item still has to send ([`Pending`]: what
//! [`Store::outbox_sent`](super::Store::outbox_sent) clears). Sending them
//! is the engine's (`engine/send.rs`, `engine/deliver.rs`).

use serde::{Deserialize, Serialize};

use super::StoredItem;

/// The most a record's messages may weigh together (their JSON on the
/// item), within DynamoDB's 400 KB item beside a 64 KiB result.
pub const MAX_OUTBOX_BYTES: usize = 256 * 1024;

/// One message a handler emits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Message {
    /// Where it goes: an SQS queue URL (`https://sqs.<region>.amazonaws.com/
    /// <account>/<queue>`; a FIFO queue's ends in `.fifo`).
    pub destination: String,
    /// The message body, as the destination receives it.
    pub body: String,
    /// The ordering group (an SQS or SNS FIFO `MessageGroupId`, a Kinesis
    /// shard): the messages of one group are sent in order, and none after
    /// one that failed. Required by a FIFO queue or topic; refused by an
    /// EventBridge bus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

impl Message {
    /// `body` for `destination`.
    pub fn new(destination: impl Into<String>, body: impl Into<String>) -> Self {
        Self {
            destination: destination.into(),
            body: body.into(),
            group: None,
        }
    }

    /// In ordering group `group` (an SQS or SNS FIFO `MessageGroupId`, a
    /// Kinesis stream's shard).
    pub fn in_group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }
}

/// The outbox attribute's text for `messages` (`None` for none).
pub fn encode(messages: &[Message]) -> Option<String> {
    if messages.is_empty() {
        return None;
    }
    serde_json::to_string(messages).ok()
}

/// The messages an outbox attribute holds.
pub fn decode(text: &str) -> Result<Vec<Message>, serde_json::Error> {
    serde_json::from_str(text)
}

/// The id of message `index` (0-based, in emitting order) of the record
/// whose item is `pk`: hex SHA-256 of both, the same on every attempt,
/// takeover and resend, and never the key itself (which may be hashed for
/// a reason). It travels as the SQS message attribute `idempotency-key`
/// (and a FIFO queue's `MessageDeduplicationId`), where a consumer built on
/// this crate reads its key by default.
pub fn message_id(pk: &str, index: usize) -> String {
    crate::store::payload_hash(format!("{pk}\n{index}").as_bytes())
}

/// A record's messages still to send, from its COMPLETED item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// The item's partition key (the ids derive from it).
    pub pk: String,
    /// The owner the item was completed under: clearing the outbox is
    /// fenced on it, so a later item of the key (past its TTL, claimed
    /// again) never loses its own messages.
    pub owner: String,
    /// The messages, in emitting order.
    pub messages: Vec<Message>,
}

impl Pending {
    /// The messages a completion under `owner` of `pk` emitted, if any.
    pub fn emitted(pk: &str, owner: &str, messages: &[Message]) -> Option<Box<Self>> {
        (!messages.is_empty()).then(|| {
            Box::new(Self {
                pk: pk.to_owned(),
                owner: owner.to_owned(),
                messages: messages.to_vec(),
            })
        })
    }

    /// What `item` still has to send: `None` when its outbox is empty, or
    /// unreadable (logged: it is left for an operator, never sent wrong).
    pub fn of_item(item: &StoredItem) -> Option<Self> {
        let text = item.outbox.as_deref()?;
        match decode(text) {
            Ok(messages) => Some(Self {
                pk: item.pk.clone(),
                owner: item.owner.clone(),
                messages,
            }),
            Err(err) => {
                tracing::error!(error = %err, "an item's outbox is unreadable; left to the operator");
                None
            }
        }
    }
}
