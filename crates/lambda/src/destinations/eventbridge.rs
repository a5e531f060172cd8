//! EventBridge event buses, named by ARN: `PutEvents`, 10 events a
//! request. A message's body is the event as EventBridge shows it to its
//! targets, `{"source": …, "detail-type": …, "detail": {…}}`; its stable
//! id is added to the detail as the field [`ID_FIELD`] (a consumer on this
//! crate behind an SQS target reads it with
//! `IDEMPOTENCY_KEY_SOURCE=json:/detail/idempotency-key`). A bus keeps no
//! order: a message with a group is refused.

use aws_sdk_eventbridge::Client;
use aws_sdk_eventbridge::error::DisplayErrorContext;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use exactly_once_core::outbox::{Answers, Message, Outgoing, SendError, Sender};
use serde_json::{Map, Value};

use super::{answers_in_order, send_batch};

/// The detail field an event's stable id travels in.
pub const ID_FIELD: &str = "idempotency-key";

/// EventBridge's most entries per `PutEvents`.
const MAX_BATCH: usize = 10;

/// Sends emitted messages to the EventBridge buses they name by ARN.
#[derive(Debug, Clone)]
pub struct EventBridgeSender {
    client: Client,
}

impl EventBridgeSender {
    /// Sends with `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    async fn put_events(&self, bus: &str, messages: &[Outgoing]) -> Vec<Result<(), SendError>> {
        let request = self.client.put_events();
        send_batch(
            messages,
            |(_, message)| entry(bus, message),
            async |entries| {
                let put = request.set_entries(Some(entries)).send().await;
                put.map_err(|err| DisplayErrorContext(err).to_string())
            },
            |count, output| {
                answers_in_order(
                    count,
                    output
                        .entries()
                        .iter()
                        .map(|entry| (entry.error_code(), entry.error_message())),
                )
            },
        )
        .await
    }
}

impl Sender for EventBridgeSender {
    fn check(&self, message: &Message) -> Result<(), SendError> {
        if message.group.is_some() {
            return Err(SendError::Unsupported(
                "an EventBridge bus keeps no order: emit without a group".into(),
            ));
        }
        Event::parse(&message.body).map(|_| ())
    }

    fn batch_limit(&self, _destination: &str) -> usize {
        MAX_BATCH
    }

    fn send<'a>(&'a self, destination: &'a str, messages: &'a [Outgoing]) -> Answers<'a> {
        Box::pin(self.put_events(destination, messages))
    }
}

/// A message's body read as an event.
struct Event {
    source: String,
    detail_type: String,
    detail: Map<String, Value>,
}

impl Event {
    /// `body` as `{"source": text, "detail-type": text, "detail": object}`,
    /// or what is wrong with it (naming fields, never their values).
    fn parse(body: &str) -> Result<Self, SendError> {
        let wrong = |what: &str| {
            SendError::Unsupported(format!(
                "an EventBridge message's body is {{\"source\": text, \"detail-type\": text, \
                 \"detail\": object}}: {what}"
            ))
        };
        let Ok(Value::Object(mut event)) = serde_json::from_str::<Value>(body) else {
            return Err(wrong("it is not a JSON object"));
        };
        let mut text = |field: &str| match event.remove(field) {
            Some(Value::String(text)) if !text.is_empty() => Ok(text),
            _ => Err(wrong(&format!("{field:?} is missing or not a text"))),
        };
        let (source, detail_type) = (text("source")?, text("detail-type")?);
        let Some(Value::Object(detail)) = event.remove("detail") else {
            return Err(wrong("\"detail\" is missing or not an object"));
        };
        if detail.contains_key(ID_FIELD) {
            return Err(wrong(&format!(
                "its detail has a field {ID_FIELD:?}, the id's own"
            )));
        }
        Ok(Self {
            source,
            detail_type,
            detail,
        })
    }
}

/// `message` as an entry for `bus`, its id added to its detail.
fn entry(bus: &str, message: &Outgoing) -> Result<PutEventsRequestEntry, SendError> {
    let mut event = Event::parse(&message.body)?;
    event
        .detail
        .insert(ID_FIELD.to_owned(), Value::String(message.id.clone()));
    Ok(PutEventsRequestEntry::builder()
        .event_bus_name(bus)
        .source(event.source)
        .detail_type(event.detail_type)
        .detail(Value::Object(event.detail).to_string())
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_that_is_not_an_event_is_refused_naming_the_field() {
        for (body, names) in [
            ("[]", "not a JSON object"),
            (r#"{"detail-type":"T","detail":{}}"#, "\"source\""),
            (
                r#"{"source":"s","detail-type":"T","detail":[]}"#,
                "\"detail\"",
            ),
            (
                r#"{"source":"s","detail-type":"T","detail":{"idempotency-key":"x"}}"#,
                "the id's own",
            ),
        ] {
            match Event::parse(body) {
                Err(SendError::Unsupported(reason)) => assert!(reason.contains(names), "{reason}"),
                Err(other) => panic!("{body}: {other:?}"),
                Ok(_) => panic!("{body}: accepted"),
            }
        }
    }
}
