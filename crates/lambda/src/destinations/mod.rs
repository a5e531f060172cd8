//! Where the messages a handler emits go: the engine keeps them on the
//! key's COMPLETED item and sends them after the commit
//! ([`exactly_once_core::outbox`]); this module is the edge that sends.
//! [`Destinations`] tells a destination's kind from its name and hands it
//! to that kind's sender, one file each, each behind its cargo feature:
//! SQS queues (`sqs`), SNS topics (`sns`), EventBridge buses
//! (`eventbridge`), Kinesis streams (`kinesis`), Kafka topics (`kafka`).

#[cfg(feature = "eventbridge")]
mod eventbridge;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "kinesis")]
mod kinesis;
#[cfg(feature = "sns")]
mod sns;
#[cfg(feature = "sqs")]
mod sqs;

use std::sync::Arc;

use exactly_once_core::outbox::{Answers, Message, Outgoing, SendError, Sender};

#[cfg(feature = "eventbridge")]
pub use eventbridge::{EventBridgeSender, ID_FIELD};
#[cfg(feature = "kafka")]
pub use kafka::KafkaSender;
#[cfg(feature = "kinesis")]
pub use kinesis::KinesisSender;
#[cfg(feature = "sns")]
pub use sns::SnsSender;
#[cfg(feature = "sqs")]
pub use sqs::SqsSender;

/// The message attribute an SQS message's or an SNS notification's stable
/// id travels in, and the header of a Kafka record's: where a consumer on
/// this crate reads its key by default (`IDEMPOTENCY_KEY_SOURCE=header`).
pub const ID_ATTRIBUTE: &str = "idempotency-key";

/// What a destination is, told from how it is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An SQS queue, named by its URL.
    SqsQueue,
    /// An SNS topic, named by its ARN.
    SnsTopic,
    /// An EventBridge event bus, named by its ARN.
    EventBus,
    /// A Kinesis data stream, named by its ARN.
    KinesisStream,
    /// A Kafka topic, named `kafka://host:port[,host:port]/topic[?auth=…]`.
    KafkaTopic,
}

impl Kind {
    /// The kind `destination` names, if any: an `http(s)://` URL is an SQS
    /// queue's, a `kafka://` one a Kafka topic's; an ARN's service says the
    /// rest.
    pub fn of(destination: &str) -> Option<Self> {
        if destination.starts_with("https://") || destination.starts_with("http://") {
            return Some(Self::SqsQueue);
        }
        if destination.starts_with("kafka://") {
            return Some(Self::KafkaTopic);
        }
        let mut parts = destination.split(':');
        let (Some("arn"), Some(_partition), Some(service)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        match service {
            "sns" => Some(Self::SnsTopic),
            "events" => Some(Self::EventBus),
            "kinesis" => Some(Self::KinesisStream),
            _ => None,
        }
    }

    /// What it is, in words.
    pub fn name(self) -> &'static str {
        match self {
            Self::SqsQueue => "an SQS queue",
            Self::SnsTopic => "an SNS topic",
            Self::EventBus => "an EventBridge bus",
            Self::KinesisStream => "a Kinesis stream",
            Self::KafkaTopic => "a Kafka topic",
        }
    }

    /// The cargo feature that builds this kind's sender in.
    pub fn feature(self) -> &'static str {
        match self {
            Self::SqsQueue => "sqs",
            Self::SnsTopic => "sns",
            Self::EventBus => "eventbridge",
            Self::KinesisStream => "kinesis",
            Self::KafkaTopic => "kafka",
        }
    }
}

/// Sends every message to its destination's sender: the function's one
/// [`Sender`], with a sender of each kind its build has.
#[derive(Default, Clone)]
pub struct Destinations {
    senders: Vec<(Kind, Arc<dyn Sender>)>,
}

impl Destinations {
    /// No destination yet: every message is refused until a sender is added.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends the destinations of `kind` with `sender`.
    pub fn with(mut self, kind: Kind, sender: impl Sender) -> Self {
        self.senders.retain(|(known, _)| *known != kind);
        self.senders.push((kind, Arc::new(sender)));
        self
    }

    /// The sender of `destination`, or why none.
    fn sender_of(&self, destination: &str) -> Result<&dyn Sender, SendError> {
        let kind = Kind::of(destination).ok_or_else(|| {
            SendError::Unsupported(format!(
                "{destination:?} is not a destination: an SQS queue URL, an SNS topic's, an \
                 EventBridge bus's or a Kinesis stream's ARN, or kafka://brokers/topic"
            ))
        })?;
        self.senders
            .iter()
            .find(|(known, _)| *known == kind)
            .map(|(_, sender)| sender.as_ref())
            .ok_or_else(|| {
                SendError::Unsupported(format!(
                    "{destination:?} names {}, and this build sends to none (cargo \
                     feature `{}` of exactly-once)",
                    kind.name(),
                    kind.feature()
                ))
            })
    }
}

impl Sender for Destinations {
    fn check(&self, message: &Message) -> Result<(), SendError> {
        self.sender_of(&message.destination)?.check(message)
    }

    fn batch_limit(&self, destination: &str) -> usize {
        self.sender_of(destination)
            .map_or(1, |sender| sender.batch_limit(destination))
    }

    fn send<'a>(&'a self, destination: &'a str, messages: &'a [Outgoing]) -> Answers<'a> {
        match self.sender_of(destination) {
            Ok(sender) => sender.send(destination, messages),
            Err(err) => Box::pin(std::future::ready(every(messages, err))),
        }
    }
}

/// The same answer for each of `messages` (a request that failed whole).
fn every(messages: &[Outgoing], err: SendError) -> Vec<Result<(), SendError>> {
    messages.iter().map(|_| Err(err.clone())).collect()
}

/// One batch request of `messages`, as every sender makes it: each message
/// made an `entry` (one that cannot be refuses the whole batch), the
/// entries sent (`send`: the request's output, or why it has none), each
/// message's answer read from the output (`answered`, given how many).
#[cfg(any(
    feature = "sqs",
    feature = "sns",
    feature = "eventbridge",
    feature = "kinesis"
))]
async fn send_batch<T, O, E: std::fmt::Display>(
    messages: &[Outgoing],
    entry: impl FnMut((usize, &Outgoing)) -> Result<T, SendError>,
    send: impl AsyncFnOnce(Vec<T>) -> Result<O, E>,
    answered: impl FnOnce(usize, O) -> Vec<Result<(), SendError>>,
) -> Vec<Result<(), SendError>> {
    let entries = match messages.iter().enumerate().map(entry).collect() {
        Ok(entries) => entries,
        Err(err) => return every(messages, err),
    };
    match send(entries).await {
        Ok(output) => answered(messages.len(), output),
        Err(err) => every(messages, SendError::NoAnswer(err.to_string())),
    }
}

/// The answers of a batch whose entries are named by their index (SQS's
/// and SNS's `Id`): each successful id accepted, each failed one refused
/// with its code, and an entry named in neither left unanswered.
#[cfg(any(feature = "sqs", feature = "sns"))]
fn answers_by_index<'o>(
    count: usize,
    successful: impl IntoIterator<Item = &'o str>,
    failed: impl IntoIterator<Item = (&'o str, &'o str, Option<&'o str>)>,
) -> Vec<Result<(), SendError>> {
    let mut answers: Vec<Result<(), SendError>> = (0..count)
        .map(|_| {
            Err(SendError::NoAnswer(
                "the destination answered neither success nor failure for it".into(),
            ))
        })
        .collect();
    let index = |id: &str| id.parse::<usize>().ok().filter(|i| *i < count);
    for id in successful {
        if let Some(i) = index(id) {
            answers[i] = Ok(());
        }
    }
    for (id, code, message) in failed {
        if let Some(i) = index(id) {
            answers[i] = Err(SendError::Refused {
                code: code.to_owned(),
                message: message.unwrap_or_default().to_owned(),
            });
        }
    }
    answers
}

/// The answers of a batch answered entry by entry in order (EventBridge's
/// and Kinesis's): an entry with an error code refused, one without
/// accepted, one missing unanswered.
#[cfg(any(feature = "eventbridge", feature = "kinesis"))]
fn answers_in_order<'o>(
    count: usize,
    errors: impl IntoIterator<Item = (Option<&'o str>, Option<&'o str>)>,
) -> Vec<Result<(), SendError>> {
    let mut answers: Vec<Result<(), SendError>> = errors
        .into_iter()
        .take(count)
        .map(|(code, message)| match code {
            None => Ok(()),
            Some(code) => Err(SendError::Refused {
                code: code.to_owned(),
                message: message.unwrap_or_default().to_owned(),
            }),
        })
        .collect();
    while answers.len() < count {
        answers.push(Err(SendError::NoAnswer(
            "the destination answered fewer entries than it was sent".into(),
        )));
    }
    answers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_destination_kind_is_told_from_its_name() {
        let cases = [
            (
                "https://sqs.eu-west-1.amazonaws.com/1/q",
                Some(Kind::SqsQueue),
            ),
            ("http://127.0.0.1:5000/1/q.fifo", Some(Kind::SqsQueue)),
            ("arn:aws:sns:eu-west-1:1:payments", Some(Kind::SnsTopic)),
            (
                "arn:aws-cn:events:cn-north-1:1:event-bus/b",
                Some(Kind::EventBus),
            ),
            (
                "arn:aws:kinesis:eu-west-1:1:stream/s",
                Some(Kind::KinesisStream),
            ),
            (
                "kafka://b-1:9098/ledger-events?auth=iam",
                Some(Kind::KafkaTopic),
            ),
            ("arn:aws:sqs:eu-west-1:1:q", None),
            ("payments", None),
            ("", None),
        ];
        for (name, kind) in cases {
            assert_eq!(Kind::of(name), kind, "{name}");
        }
    }

    #[test]
    fn a_destination_no_sender_takes_is_refused_naming_its_feature() {
        let message = Message::new("arn:aws:kinesis:eu-west-1:1:stream/s", "{}");
        match Destinations::new().check(&message) {
            Err(SendError::Unsupported(reason)) => {
                assert!(reason.contains("`kinesis`"), "{reason}");
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
        match Destinations::new().check(&Message::new("queue", "{}")) {
            Err(SendError::Unsupported(reason)) => {
                assert!(reason.contains("not a destination"), "{reason}");
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }
}
