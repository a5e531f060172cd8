//! Exactly-once out: the messages a handler emits
//! ([`crate::engine::Completion::emit`]) are kept on its key's COMPLETED
//! item (attribute `outbox`), written by the very write that completes the
//! key, in the transaction of its effect: a record's messages exist if and
//! only if its effect applied. After the commit the engine sends them, each
//! under an id derived from the key and its place among the record's
//! messages ([`message_id`]), the same on every attempt, and clears the
//! outbox (fenced on the item's owner). A record counts as finished only
//! once its messages were accepted; a redelivery of it finds the outbox
//! still there and sends what was left; the operator's sweeper sends what
//! never comes back.

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

use crate::store::StoredItem;

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

/// Whether a record's messages are sent only after the write that completes
/// its key (always: the engine delivers them once the batch's lanes are
/// done, `engine/deliver.rs`), but under the model checker's mutation
/// `SendBeforeCommit`: the order that the model (`crates/model`) re-states,
/// sending them as the handler returns when it is off.
pub fn sent_after_commit() -> bool {
    !mutated!(SendBeforeCommit)
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

    /// The messages as sent: each with its stable id.
    pub fn outgoing(&self) -> impl Iterator<Item = (&Message, Outgoing)> + '_ {
        self.messages.iter().enumerate().map(|(index, message)| {
            (
                message,
                Outgoing {
                    id: message_id(&self.pk, index),
                    body: message.body.clone(),
                    group: message.group.clone(),
                },
            )
        })
    }
}

/// One message as a destination receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// Its stable id ([`message_id`]).
    pub id: String,
    /// The body.
    pub body: String,
    /// Its ordering group.
    pub group: Option<String>,
}

/// Why a destination did not accept a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The destination answered, refusing it (throttled, a server error, a
    /// message it cannot take): the record is reported and the message sent
    /// again later.
    #[error("the destination refused the message ({code}): {message}")]
    Refused {
        /// The destination's error code.
        code: String,
        /// Its message.
        message: String,
    },
    /// No answer (the request failed or timed out): whether it was accepted
    /// is unknown; it is sent again under the same id.
    #[error("the destination did not answer: {0}")]
    NoAnswer(String),
    /// This function cannot send there (an unknown kind of destination, a
    /// FIFO queue without a group): fix the handler or the configuration.
    #[error("cannot send to this destination: {0}")]
    Unsupported(String),
}

/// The answers of one request, one per message, in order.
pub type Answers<'a> = Pin<Box<dyn Future<Output = Vec<Result<(), SendError>>> + Send + 'a>>;

/// Sends messages to their destinations: the edge's (SQS, SNS,
/// EventBridge, Kinesis on Lambda); the engine knows none.
pub trait Sender: Send + Sync + 'static {
    /// Whether `message` can be sent from here: checked before its record
    /// commits, so that nothing is committed that could never be sent.
    fn check(&self, message: &Message) -> Result<(), SendError>;

    /// How many messages one request to `destination` carries.
    fn batch_limit(&self, destination: &str) -> usize;

    /// Sends `messages` (at most [`Self::batch_limit`]) to `destination` in
    /// one request: each message's answer, in order.
    fn send<'a>(&'a self, destination: &'a str, messages: &'a [Outgoing]) -> Answers<'a>;
}
