//! The send port: how the messages of a record's outbox leave
//! ([`Sender`], the edge's: SQS, SNS, EventBridge, Kinesis on Lambda), each
//! as its destination receives it ([`Outgoing`], under its stable id) and
//! answered ([`SendError`]). What the item keeps of them is the store's
//! (`store/outbox.rs`); when they are sent, `deliver.rs`.

use std::future::Future;
use std::pin::Pin;

use crate::store::outbox::{Message, Pending, message_id};

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

impl Pending {
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
