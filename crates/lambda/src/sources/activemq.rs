//! Amazon MQ for ActiveMQ: `messages` of one queue (`eventSource` `aws:mq`,
//! `aws:amq` in older events), each with its JMS headers, `properties` and
//! base64 `data`. A destination is the ordering unit (a message is placed
//! by its index in the event). There is no partial batch response: a
//! message left unfinished fails the invocation, and Lambda delivers the
//! batch again whole.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use std::borrow::Cow;

use super::fields::{flag, integer, text};
use super::properties::{PropertyValue, read_properties};
use super::record::{SourceRecord, one_source};
use super::{Coordinates, Decoded, Edge, EventError, MESSAGE_GROUP, Record, Shape, Source};

/// ActiveMQ: `aws:mq`, and `aws:amq` as older events spell it, at the
/// event's top; no partial batch response.
pub(super) static EDGE: Edge = Edge {
    name: "activemq",
    title: "ActiveMQ",
    event_sources: &["aws:mq", "aws:amq"],
    partial_batch_response: false,
    messaging_system: "activemq",
    shape: Shape::Top {
        decode,
        raw_record,
        dead_letter_fields: &[],
    },
};

one_source!(ActiveMqMessage, ActiveMq, ActiveMq);

/// Its attributes are its JMS properties; its key, the message group.
impl SourceRecord for ActiveMqMessage {
    fn body(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }

    fn key(&self) -> Option<Cow<'_, [u8]>> {
        SourceRecord::attribute(self, MESSAGE_GROUP).map(Cow::Borrowed)
    }

    fn attribute(&self, name: &str) -> Option<&[u8]> {
        self.property(name)?.as_bytes()
    }

    fn attribute_names(&self) -> Vec<&str> {
        self.properties.keys().map(String::as_str).collect()
    }

    fn message_id(&self) -> Option<&str> {
        self.message_id.as_deref()
    }

    fn destination(&self) -> &str {
        &self.destination
    }
}

/// An ActiveMQ message, whole: what a handler gets for `aws:mq` events.
#[derive(Debug, Clone, PartialEq)]
pub struct ActiveMqMessage {
    /// `messageID` (JMSMessageID).
    pub message_id: Option<String>,
    /// `messageType`: `jms/text-message`, `jms/bytes-message`.
    pub message_type: Option<String>,
    /// The queue (`destination.physicalName`).
    pub destination: String,
    /// The body's bytes (base64 undone).
    pub data: Vec<u8>,
    /// The JMS properties the producer set, by name.
    pub properties: BTreeMap<String, PropertyValue>,
    /// Whether the broker delivered it before.
    pub redelivered: bool,
    /// `deliveryMode`.
    pub delivery_mode: Option<i64>,
    /// `persistent`.
    pub persistent: Option<bool>,
    /// `priority`.
    pub priority: Option<i64>,
    /// `correlationId` (JMSCorrelationID).
    pub correlation_id: Option<String>,
    /// `replyTo`.
    pub reply_to: Option<String>,
    /// `type` (JMSType).
    pub jms_type: Option<String>,
    /// `expiration`, epoch milliseconds (0: never); a string is read as
    /// its number.
    pub expiration: Option<i64>,
    /// `timestamp`, epoch milliseconds.
    pub timestamp: Option<i64>,
    /// `brokerInTime`, epoch milliseconds.
    pub broker_in_time: Option<i64>,
    /// `brokerOutTime`, epoch milliseconds.
    pub broker_out_time: Option<i64>,
    /// `connectionId`.
    pub connection_id: Option<String>,
    /// The broker's ARN.
    pub event_source_arn: String,
}

impl ActiveMqMessage {
    /// The property of that name.
    pub fn property(&self, name: &str) -> Option<&PropertyValue> {
        self.properties.get(name)
    }
}

/// The event's messages by destination, each in the event's order.
fn decode(event: &Value) -> Result<Vec<Vec<Decoded>>, EventError> {
    let messages = match event.get("messages") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(messages)) => messages,
        Some(_) => {
            return Err(EventError::malformed(
                Some(Source::ActiveMq),
                "messages is not a list",
            ));
        }
    };
    let arn = event
        .get("eventSourceArn")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut units: Vec<(String, Vec<Decoded>)> = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let read = message
            .as_object()
            .ok_or_else(|| "malformed ActiveMQ message: not an object".to_owned())
            .and_then(|fields| activemq_message(fields, arn));
        let destination = read
            .as_ref()
            .map_or_else(|_| String::new(), |m| m.destination.clone());
        let at = Coordinates {
            partition: destination.clone(),
            offset: index as i64,
            id: read.as_ref().ok().and_then(|m| m.message_id.clone()),
        };
        let decoded = (at, read.map(Record::ActiveMq));
        match units.iter_mut().find(|(name, _)| *name == destination) {
            Some((_, unit)) => unit.push(decoded),
            None => units.push((destination, vec![decoded])),
        }
    }
    Ok(units.into_iter().map(|(_, unit)| unit).collect())
}

/// The message at `at` as the event holds it.
fn raw_record<'a>(event: &'a Value, at: &Coordinates) -> Option<&'a Value> {
    event.get("messages")?.get(usize::try_from(at.offset).ok()?)
}

/// One message's fields, or why it cannot be read.
fn activemq_message(fields: &Map<String, Value>, arn: &str) -> Result<ActiveMqMessage, String> {
    let malformed = |reason: String| format!("malformed ActiveMQ message: {reason}");
    let owned = |name: &str| Ok::<_, String>(text(fields, name)?.map(str::to_owned));
    let data = text(fields, "data").map_err(malformed)?.unwrap_or_default();
    let data = STANDARD
        .decode(data)
        .map_err(|_| malformed("field `data` is not valid base64".into()))?;
    let destination = match fields.get("destination") {
        Some(Value::Object(destination)) => text(destination, "physicalName")
            .and_then(|name| match name {
                Some(name) => Ok(Some(name)),
                None => text(destination, "physicalname"),
            })
            .map_err(|_| malformed("field `destination.physicalName` is not a string".into()))?
            .unwrap_or_default()
            .to_owned(),
        None | Some(Value::Null) => String::new(),
        Some(_) => return Err(malformed("field `destination` is not an object".into())),
    };
    let persistent = match fields.get("persistent") {
        None | Some(Value::Null) => None,
        Some(_) => Some(flag(fields, "persistent").map_err(malformed)?),
    };
    let correlation_id = match owned("correlationId").map_err(malformed)? {
        Some(id) => Some(id),
        None => owned("correlationID").map_err(malformed)?,
    };
    let number = |name: &str| integer(fields, name).map_err(malformed);
    Ok(ActiveMqMessage {
        message_id: owned("messageID")
            .map_err(malformed)?
            .filter(|id| !id.is_empty()),
        message_type: owned("messageType").map_err(malformed)?,
        destination,
        data,
        properties: read_properties(fields, "properties").map_err(malformed)?,
        redelivered: flag(fields, "redelivered").map_err(malformed)?,
        delivery_mode: number("deliveryMode")?,
        persistent,
        priority: number("priority")?,
        correlation_id,
        reply_to: owned("replyTo").map_err(malformed)?,
        jms_type: owned("type").map_err(malformed)?,
        expiration: number("expiration")?,
        timestamp: number("timestamp")?,
        broker_in_time: number("brokerInTime")?,
        broker_out_time: number("brokerOutTime")?,
        connection_id: owned("connectionId").map_err(malformed)?,
        event_source_arn: arn.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Record, Source, decode_event, raw_record};
    use super::*;
    use serde_json::json;

    /// AWS's sample event (Lambda developer guide): two messages, the
    /// second a bytes message.
    fn sample() -> Value {
        json!({
            "eventSource": "aws:mq",
            "eventSourceArn": "arn:aws:mq:us-west-2:111122223333:broker:test:b-9bcfa592-423a-4942-879d-eb284b418fc8",
            "messages": [
                {
                    "messageID": "ID:b-9bcfa592-423a-4942-879d-eb284b418fc8-1.mq.us-west-2.amazonaws.com-37557-1234520418293-4:1:1:1:1",
                    "messageType": "jms/text-message",
                    "deliveryMode": 1, "replyTo": null, "type": null,
                    "expiration": "60000", "priority": 1,
                    "correlationId": "myJMSCoID", "redelivered": false,
                    "destination": {"physicalName": "testQueue"},
                    "data": "QUJDOkFBQUE=",
                    "timestamp": 1598827811958_i64, "brokerInTime": 1598827811958_i64,
                    "brokerOutTime": 1598827811959_i64,
                    "properties": {"index": "1", "doAlarm": "false", "myCustomProperty": "value"}
                },
                {
                    "messageID": "ID:b-9bcfa592-423a-4942-879d-eb284b418fc8-1.mq.us-west-2.amazonaws.com-37557-1234520418293-4:1:1:1:1",
                    "messageType": "jms/bytes-message",
                    "deliveryMode": 1, "replyTo": null, "type": null,
                    "expiration": 0, "priority": 2,
                    "correlationID": "myJMSCoID1", "redelivered": false,
                    "destination": {"physicalname": "testQueue"},
                    "data": "LQaGQ82S48k=",
                    "timestamp": 1598827811958_i64, "brokerInTime": 1598827811958_i64,
                    "brokerOutTime": 1598827811959_i64,
                    "properties": null
                }
            ]
        })
    }

    #[test]
    fn every_field_of_awss_sample_is_read_both_spellings_alike() {
        let batch = decode_event(&sample()).expect("an ActiveMQ event");
        assert_eq!(batch.source, Some(Source::ActiveMq));
        assert_eq!(batch.units.len(), 1, "one queue, one unit");
        let read: Vec<&ActiveMqMessage> = batch.units[0]
            .iter()
            .map(|(_, record)| match record {
                Ok(Record::ActiveMq(message)) => message,
                other => panic!("an ActiveMQ message: {other:?}"),
            })
            .collect();
        let (text, bytes) = (read[0], read[1]);
        assert_eq!(text.data, b"ABC:AAAA");
        assert_eq!(
            (text.destination.as_str(), bytes.destination.as_str()),
            ("testQueue", "testQueue")
        );
        // `expiration` as a string and as a number; `correlationId` and
        // `correlationID`.
        assert_eq!((text.expiration, bytes.expiration), (Some(60_000), Some(0)));
        assert_eq!(bytes.correlation_id.as_deref(), Some("myJMSCoID1"));
        assert_eq!(
            (text.timestamp, text.broker_in_time, text.broker_out_time),
            (
                Some(1598827811958),
                Some(1598827811958),
                Some(1598827811959)
            )
        );
        assert_eq!(
            (text.priority, bytes.priority, text.delivery_mode),
            (Some(1), Some(2), Some(1))
        );
        assert_eq!(text.message_type.as_deref(), Some("jms/text-message"));
        assert_eq!(
            text.property("myCustomProperty"),
            Some(&PropertyValue::Text("value".into()))
        );
        assert!(bytes.properties.is_empty());
        let at = &batch.units[0][1].0;
        assert_eq!((at.partition.as_str(), at.offset), ("testQueue", 1));
        assert!(
            at.id
                .as_deref()
                .is_some_and(|id| id.starts_with("ID:b-9bcfa592"))
        );
        assert_eq!(raw_record(&sample(), at), Some(&sample()["messages"][1]));
        let record = Record::ActiveMq(text.clone());
        assert_eq!(record.attribute("index"), Some(&b"1"[..]));
        // The older `aws:amq` spelling.
        let mut older = sample();
        older["eventSource"] = json!("aws:amq");
        assert_eq!(
            decode_event(&older).expect("an event").source,
            Some(Source::ActiveMq)
        );
    }

    #[test]
    fn a_field_of_the_wrong_type_fails_its_message_alone_naming_the_field() {
        let cases = [
            (
                "expiration",
                json!("soon"),
                "field `expiration` is not an integer",
            ),
            (
                "timestamp",
                json!(true),
                "field `timestamp` is not an integer",
            ),
            (
                "properties",
                json!("x"),
                "field `properties` is not an object",
            ),
            (
                "destination",
                json!("q"),
                "field `destination` is not an object",
            ),
            ("messageID", json!(5), "field `messageID` is not a string"),
            (
                "redelivered",
                json!(1),
                "field `redelivered` is not a boolean",
            ),
        ];
        for (field, value, problem) in cases {
            let mut event = sample();
            event["messages"][0][field] = value;
            let batch = decode_event(&event).expect("an event");
            let (_, record) = batch.records().next().expect("a record");
            assert_eq!(
                record,
                &Err(format!("malformed ActiveMQ message: {problem}")),
                "{field}"
            );
        }
        let not_a_list = json!({"eventSource": "aws:mq", "messages": {}});
        assert!(matches!(
            decode_event(&not_a_list),
            Err(EventError::Malformed(_))
        ));
    }
}
