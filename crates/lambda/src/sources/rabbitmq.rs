//! Amazon MQ for RabbitMQ: `rmqMessagesByQueue` keyed `<queue>::<virtual
//! host>`, each message's AMQP `basicProperties` and base64 `data`. A queue
//! is the ordering unit (a message is placed by its index in its queue's
//! list). There is no partial batch response: a message left unfinished
//! fails the invocation, and Lambda delivers the batch again whole.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use std::borrow::Cow;

use super::fields::{flag, integer, text};
use super::properties::{PropertyValue, read_properties};
use super::record::{SourceRecord, one_source};
use super::{Coordinates, Decoded, Edge, EventError, MESSAGE_GROUP, Record, Shape, Source};

/// RabbitMQ: `aws:rmq` at the event's top; no partial batch response.
pub(super) static EDGE: Edge = Edge {
    name: "rabbitmq",
    title: "RabbitMQ",
    event_sources: &["aws:rmq"],
    partial_batch_response: false,
    messaging_system: "rabbitmq",
    shape: Shape::Top {
        decode,
        raw_record,
        dead_letter_fields: &[],
    },
};

one_source!(RabbitMqMessage, RabbitMq, RabbitMq);

/// Its attributes are its headers; its key, the JMS message group header.
impl SourceRecord for RabbitMqMessage {
    fn body(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }

    fn key(&self) -> Option<Cow<'_, [u8]>> {
        SourceRecord::attribute(self, MESSAGE_GROUP).map(Cow::Borrowed)
    }

    fn attribute(&self, name: &str) -> Option<&[u8]> {
        self.header(name)?.as_bytes()
    }

    fn attribute_names(&self) -> Vec<&str> {
        self.properties.headers.keys().map(String::as_str).collect()
    }

    fn message_id(&self) -> Option<&str> {
        self.properties.message_id.as_deref()
    }

    fn destination(&self) -> &str {
        &self.queue
    }
}

/// A RabbitMQ message, whole: what a handler gets for `aws:rmq` events.
#[derive(Debug, Clone, PartialEq)]
pub struct RabbitMqMessage {
    /// The queue.
    pub queue: String,
    /// The queue's virtual host (`/` by default).
    pub virtual_host: String,
    /// The broker's ARN.
    pub event_source_arn: String,
    /// The AMQP properties the producer set.
    pub properties: BasicProperties,
    /// Whether the broker delivered it before.
    pub redelivered: bool,
    /// The body's bytes (base64 undone).
    pub data: Vec<u8>,
}

/// A RabbitMQ message's AMQP properties, as Lambda delivers them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BasicProperties {
    /// `contentType`.
    pub content_type: Option<String>,
    /// `contentEncoding`.
    pub content_encoding: Option<String>,
    /// The headers, by name.
    pub headers: BTreeMap<String, PropertyValue>,
    /// `deliveryMode`: 1 transient, 2 persistent.
    pub delivery_mode: Option<i64>,
    /// `priority`.
    pub priority: Option<i64>,
    /// `correlationId`.
    pub correlation_id: Option<String>,
    /// `replyTo`.
    pub reply_to: Option<String>,
    /// `expiration`: the per-message TTL, milliseconds as text.
    pub expiration: Option<String>,
    /// `messageId`, if the producer set one.
    pub message_id: Option<String>,
    /// `timestamp`, as Lambda spells it (`Jan 1, 1970, 12:33:41 AM`).
    pub timestamp: Option<String>,
    /// `type`.
    pub message_type: Option<String>,
    /// `userId`.
    pub user_id: Option<String>,
    /// `appId`.
    pub app_id: Option<String>,
    /// `clusterId`.
    pub cluster_id: Option<String>,
    /// `bodySize`.
    pub body_size: Option<i64>,
}

impl RabbitMqMessage {
    /// The header of that name.
    pub fn header(&self, name: &str) -> Option<&PropertyValue> {
        self.properties.headers.get(name)
    }
}

/// The event's messages by queue, each queue's in the event's order.
fn decode(event: &Value) -> Result<Vec<Vec<Decoded>>, EventError> {
    let malformed = |problem: String| EventError::malformed(Some(Source::RabbitMq), problem);
    let queues = match event.get("rmqMessagesByQueue") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(queues)) => queues,
        Some(_) => return Err(malformed("rmqMessagesByQueue is not an object".into())),
    };
    let arn = event
        .get("eventSourceArn")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut units = Vec::new();
    for (queue_key, messages) in queues {
        let messages = messages
            .as_array()
            .ok_or_else(|| malformed(format!("the messages of {queue_key:?} are not a list")))?;
        let (queue, virtual_host) = queue_key.split_once("::").unwrap_or((queue_key, "/"));
        let unit = messages
            .iter()
            .enumerate()
            .map(|(index, message)| {
                let read = message
                    .as_object()
                    .ok_or_else(|| "malformed RabbitMQ message: not an object".to_owned())
                    .and_then(|fields| rabbitmq_message(fields, queue, virtual_host, arn));
                let at = Coordinates {
                    partition: queue_key.clone(),
                    offset: index as i64,
                    id: read
                        .as_ref()
                        .ok()
                        .and_then(|m| m.properties.message_id.clone()),
                };
                (at, read.map(Record::RabbitMq))
            })
            .collect();
        units.push(unit);
    }
    Ok(units)
}

/// The message at `at` as the event holds it.
fn raw_record<'a>(event: &'a Value, at: &Coordinates) -> Option<&'a Value> {
    event
        .get("rmqMessagesByQueue")?
        .get(&at.partition)?
        .get(usize::try_from(at.offset).ok()?)
}

/// One message's fields, or why it cannot be read.
fn rabbitmq_message(
    fields: &Map<String, Value>,
    queue: &str,
    virtual_host: &str,
    arn: &str,
) -> Result<RabbitMqMessage, String> {
    let malformed = |reason: String| format!("malformed RabbitMQ message: {reason}");
    let data = text(fields, "data").map_err(malformed)?.unwrap_or_default();
    let data = STANDARD
        .decode(data)
        .map_err(|_| malformed("field `data` is not valid base64".into()))?;
    let properties = match fields.get("basicProperties") {
        None | Some(Value::Null) => BasicProperties::default(),
        Some(Value::Object(properties)) => basic_properties(properties).map_err(malformed)?,
        Some(_) => return Err(malformed("field `basicProperties` is not an object".into())),
    };
    Ok(RabbitMqMessage {
        queue: queue.to_owned(),
        virtual_host: virtual_host.to_owned(),
        event_source_arn: arn.to_owned(),
        properties,
        redelivered: flag(fields, "redelivered").map_err(malformed)?,
        data,
    })
}

fn basic_properties(fields: &Map<String, Value>) -> Result<BasicProperties, String> {
    let owned = |name: &str| Ok::<_, String>(text(fields, name)?.map(str::to_owned));
    Ok(BasicProperties {
        content_type: owned("contentType")?,
        content_encoding: owned("contentEncoding")?,
        headers: read_properties(fields, "headers")?,
        delivery_mode: integer(fields, "deliveryMode")?,
        priority: integer(fields, "priority")?,
        correlation_id: owned("correlationId")?,
        reply_to: owned("replyTo")?,
        // A string in AMQP; a number is taken as its text.
        expiration: match fields.get("expiration") {
            Some(Value::Number(ms)) => Some(ms.to_string()),
            _ => owned("expiration")?,
        },
        message_id: owned("messageId")?.filter(|id| !id.is_empty()),
        timestamp: owned("timestamp")?,
        message_type: owned("type")?,
        user_id: owned("userId")?,
        app_id: owned("appId")?,
        cluster_id: owned("clusterId")?,
        body_size: integer(fields, "bodySize")?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Record, Source, decode_event, raw_record};
    use super::*;
    use serde_json::json;

    /// AWS's sample event (Lambda developer guide), one message.
    fn sample() -> Value {
        json!({
            "eventSource": "aws:rmq",
            "eventSourceArn": "arn:aws:mq:us-west-2:111122223333:broker:pizzaBroker:b-9bcfa592-423a-4942-879d-eb284b418fc8",
            "rmqMessagesByQueue": {
                "pizzaQueue::/": [{
                    "basicProperties": {
                        "contentType": "text/plain", "contentEncoding": null,
                        "headers": {
                            "header1": {"bytes": [118, 97, 108, 117, 101, 49]},
                            "header2": {"bytes": [118, 97, 108, 117, 101, 50]},
                            "numberInHeader": 10
                        },
                        "deliveryMode": 1, "priority": 34, "correlationId": null,
                        "replyTo": null, "expiration": "60000", "messageId": null,
                        "timestamp": "Jan 1, 1970, 12:33:41 AM", "type": null,
                        "userId": "AIDACKCEVSQ6C2EXAMPLE", "appId": null,
                        "clusterId": null, "bodySize": 80
                    },
                    "redelivered": false,
                    "data": "eyJ0aW1lb3V0IjowLCJkYXRhIjoiQ1pybWYwR3c4T3Y0YnFMUXhENEUifQ=="
                }]
            }
        })
    }

    #[test]
    fn every_field_of_awss_sample_is_read() {
        let batch = decode_event(&sample()).expect("a RabbitMQ event");
        assert_eq!(batch.source, Some(Source::RabbitMq));
        let (at, record) = &batch.units[0][0];
        assert_eq!(
            (at.to_string(), at.id.as_deref()),
            ("pizzaQueue::/@0".into(), None)
        );
        let Ok(Record::RabbitMq(message)) = record else {
            panic!("a RabbitMQ message: {record:?}");
        };
        assert_eq!(
            (message.queue.as_str(), message.virtual_host.as_str()),
            ("pizzaQueue", "/")
        );
        assert_eq!(
            message.data,
            br#"{"timeout":0,"data":"CZrmf0Gw8Ov4bqLQxD4E"}"#
        );
        let properties = &message.properties;
        assert_eq!(
            (
                properties.delivery_mode,
                properties.priority,
                properties.body_size
            ),
            (Some(1), Some(34), Some(80))
        );
        assert_eq!(properties.expiration.as_deref(), Some("60000"));
        assert_eq!(
            properties.timestamp.as_deref(),
            Some("Jan 1, 1970, 12:33:41 AM")
        );
        assert_eq!(properties.user_id.as_deref(), Some("AIDACKCEVSQ6C2EXAMPLE"));
        assert_eq!(properties.content_type.as_deref(), Some("text/plain"));
        assert!(!message.redelivered && message.event_source_arn.ends_with("eb284b418fc8"));
        // An AMQP string's bytes, a number's text.
        let record = Record::RabbitMq(message.clone());
        assert_eq!(record.attribute("header1"), Some(&b"value1"[..]));
        assert_eq!(record.attribute("numberInHeader"), Some(&b"10"[..]));
        assert_eq!(
            message.header("numberInHeader"),
            Some(&PropertyValue::Number("10".into()))
        );
        assert_eq!(record.key(), None);
        assert_eq!(
            raw_record(&sample(), at),
            Some(&sample()["rmqMessagesByQueue"]["pizzaQueue::/"][0])
        );
    }

    #[test]
    fn a_message_id_names_the_message_and_signed_bytes_read_as_java_wrote_them() {
        let mut event = sample();
        let message = &mut event["rmqMessagesByQueue"]["pizzaQueue::/"][0];
        message["basicProperties"]["messageId"] = json!("m-1");
        message["basicProperties"]["headers"]["JMSXGroupID"] = json!({"bytes": [-61, -87]});
        let batch = decode_event(&event).expect("an event");
        let (at, Ok(record)) = &batch.units[0][0] else {
            panic!("readable");
        };
        assert_eq!(at.to_string(), "pizzaQueue::/@m-1");
        assert_eq!(record.key().as_deref(), Some("é".as_bytes()));
    }

    #[test]
    fn a_field_of_the_wrong_type_fails_its_message_alone_naming_the_field() {
        let cases = [
            (
                "/basicProperties/priority",
                json!("high"),
                "field `priority` is not an integer",
            ),
            (
                "/basicProperties/headers",
                json!([1]),
                "field `headers` is not an object",
            ),
            (
                "/basicProperties/headers/h",
                json!({"bytes": [300]}),
                "header \"h\": `bytes` holds a non-byte",
            ),
            (
                "/redelivered",
                json!("no"),
                "field `redelivered` is not a boolean",
            ),
            (
                "/data",
                json!("not base64!"),
                "field `data` is not valid base64",
            ),
            (
                "/basicProperties",
                json!(7),
                "field `basicProperties` is not an object",
            ),
        ];
        for (pointer, value, problem) in cases {
            let mut event = sample();
            let message = &mut event["rmqMessagesByQueue"]["pizzaQueue::/"][0];
            let (parent, field) = pointer.rsplit_once('/').expect("a pointer");
            let parent = if parent.is_empty() {
                message
            } else {
                message.pointer_mut(parent).expect("parent")
            };
            parent[field] = value;
            let batch = decode_event(&event).expect("an event");
            assert_eq!(
                batch.units[0][0].1,
                Err(format!("malformed RabbitMQ message: {problem}")),
                "{pointer}"
            );
        }
        let not_a_list = json!({"eventSource": "aws:rmq", "rmqMessagesByQueue": {"q::/": 1}});
        assert!(matches!(
            decode_event(&not_a_list),
            Err(EventError::Malformed(_))
        ));
    }
}
