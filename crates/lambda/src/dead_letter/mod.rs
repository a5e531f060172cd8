//! Parked records, forwarded whole to a dead-letter queue
//! (`DEAD_LETTER_QUEUE_URL`, an SQS queue): the event source mapping's own
//! on-failure destination keeps only a record's coordinates, and a parked
//! record is never sent there at all. Each message holds the record exactly
//! as Lambda delivered it (a Kafka record with its base64 key and value and
//! headers, an SQS message, a Kinesis or DynamoDB Streams record), why it
//! was parked and the event's source, so that it can be inspected and fed
//! through the function again. Sent at least once: a parked record
//! delivered again is sent again.

#[cfg(feature = "sqs")]
mod sqs;

use std::future::Future;
use std::pin::Pin;

use serde_json::{Value, json};

use crate::sources::{Coordinates, Shape, Source, raw_record};
#[cfg(feature = "sqs")]
pub use sqs::DeadLetterQueue;

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

/// The parked records a destination could not take, with why.
pub type Unsent = Vec<(Coordinates, String)>;

/// A destination's answer, once it has tried every record.
pub type Forwarding<'a> = Pin<Box<dyn Future<Output = Unsent> + Send + 'a>>;

/// Where parked records are forwarded, whole: an SQS queue
/// (`DeadLetterQueue`, feature `sqs`), or a destination of your own.
pub trait DeadLetters: Send + Sync + 'static {
    /// Sends every parked record of `event` (the invocation's payload, as
    /// Lambda sent it); returns the ones that could not be sent, with why:
    /// the function reports them, so that nothing is lost. Each message is
    /// [`message`]'s.
    fn forward<'a>(&'a self, event: &'a Value, parked: Vec<Parked>) -> Forwarding<'a>;
}

/// The message of one parked record: why it was parked, where it sits (a
/// Kafka record's `partition` and `offset`; another source's `partition`,
/// its ordering unit, and `id`, or an Amazon MQ message without an id its
/// `offset`, its index in its queue), the event's source, and the record as
/// Lambda sent it (`None` if `event` does not hold it).
pub fn message(event: &Value, parked: &Parked) -> Option<String> {
    let record = raw_record(event, &parked.at)?;
    let at = &parked.at;
    let mut message = json!({
        "reason": parked.outcome,
        "error": parked.error,
        "partition": at.partition,
        "record": record,
    });
    match &at.id {
        None => message["offset"] = json!(at.offset),
        Some(id) => message["id"] = json!(id),
    }
    match Source::at_top(event).map(|source| &source.edge().shape) {
        // Kafka and Amazon MQ name their source once, at the top.
        Some(Shape::Top {
            dead_letter_fields, ..
        }) => {
            message["eventSource"] = json!(event.get("eventSource"));
            message["eventSourceArn"] = json!(event.get("eventSourceArn"));
            for field in *dead_letter_fields {
                message[*field] = json!(event.get(*field));
            }
        }
        _ => {
            message["eventSource"] = json!(record.get("eventSource"));
            message["eventSourceArn"] = json!(record.get("eventSourceARN"));
        }
    }
    Some(message.to_string())
}

/// A shared destination.
impl<T: DeadLetters + ?Sized> DeadLetters for std::sync::Arc<T> {
    fn forward<'a>(&'a self, event: &'a Value, parked: Vec<Parked>) -> Forwarding<'a> {
        (**self).forward(event, parked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parked_amazon_mq_message_names_its_broker_and_its_place() {
        let event = json!({
            "eventSource": "aws:rmq",
            "eventSourceArn": "arn:aws:mq:us-east-1:123456789012:broker:b:b-1",
            "rmqMessagesByQueue": {"payments::/": [{"data": "e30=", "basicProperties": {}}]}
        });
        let parked = Parked {
            at: Coordinates {
                partition: "payments::/".into(),
                offset: 0,
                id: None,
            },
            outcome: "failed",
            error: Some("amount_cents is not a number".into()),
        };
        let sent: Value =
            serde_json::from_str(&message(&event, &parked).expect("held")).expect("JSON");
        assert_eq!(
            sent,
            json!({
                "reason": "failed", "error": "amount_cents is not a number",
                "partition": "payments::/", "offset": 0,
                "record": {"data": "e30=", "basicProperties": {}},
                "eventSource": "aws:rmq",
                "eventSourceArn": "arn:aws:mq:us-east-1:123456789012:broker:b:b-1"
            })
        );
    }
}
