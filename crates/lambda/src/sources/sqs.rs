//! Amazon SQS: `Records` of messages, the body as text, message attributes
//! typed (`String`, `Number`, `Binary` in base64). A standard queue has no
//! order: each message is a unit of its own, and a failed one reports only
//! itself. A FIFO queue (`.fifo`) orders each message group: a failed
//! message stops its group (the rest of the group is reported), other
//! groups go on, as Powertools' `SqsFifoPartialProcessor` with
//! `skip_group_on_error`. A message is named by its `messageId`.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use std::borrow::Cow;

use super::fields::{identified, text};
use super::record::{SourceRecord, one_source};
use super::{Coordinates, Decoded, Edge, EventError, Record, Shape, Source};

/// SQS: `aws:sqs` on each record.
pub(super) static EDGE: Edge = Edge {
    name: "sqs",
    title: "SQS",
    event_sources: &["aws:sqs"],
    partial_batch_response: true,
    messaging_system: "aws_sqs",
    shape: Shape::Records { decode },
};

one_source!(SqsMessage, Sqs, Sqs);

/// No key: an SQS message has none.
impl SourceRecord for SqsMessage {
    fn body(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.body)
    }

    fn attribute(&self, name: &str) -> Option<&[u8]> {
        self.attribute(name).map(|a| a.value.as_slice())
    }

    fn attribute_names(&self) -> Vec<&str> {
        self.message_attributes.keys().map(String::as_str).collect()
    }

    fn message_id(&self) -> Option<&str> {
        Some(&self.message_id)
    }

    fn destination(&self) -> &str {
        self.queue_name()
    }
}

/// One message attribute: its type and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageAttribute {
    /// `String`, `Number` or `Binary` (with any custom suffix, `String.uuid`).
    pub data_type: String,
    /// A String's or Number's text as UTF-8, a Binary's bytes.
    pub value: Vec<u8>,
}

/// An SQS message, whole: what a handler gets for `aws:sqs` events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsMessage {
    /// The message's id: what the partial batch response names it by.
    pub message_id: String,
    /// The receipt handle of this delivery.
    pub receipt_handle: Option<String>,
    /// The body's bytes (the text as UTF-8).
    pub body: Vec<u8>,
    /// System attributes (`ApproximateReceiveCount`, `SentTimestamp`,
    /// FIFO's `MessageGroupId`, `MessageDeduplicationId`, `SequenceNumber`).
    pub attributes: BTreeMap<String, String>,
    /// Message attributes, by name.
    pub message_attributes: BTreeMap<String, MessageAttribute>,
    /// The MD5 of the body, as SQS computed it.
    pub md5_of_body: Option<String>,
    /// The queue's ARN.
    pub event_source_arn: String,
    /// The queue's region.
    pub aws_region: Option<String>,
}

impl SqsMessage {
    /// The queue's name (the ARN's last part).
    pub fn queue_name(&self) -> &str {
        self.event_source_arn
            .rsplit(':')
            .next()
            .unwrap_or(&self.event_source_arn)
    }

    /// Whether the queue is a FIFO queue (its name ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.queue_name().ends_with(".fifo")
    }

    /// A FIFO message's group.
    pub fn message_group_id(&self) -> Option<&str> {
        self.attributes.get("MessageGroupId").map(String::as_str)
    }

    /// A FIFO message's deduplication id.
    pub fn deduplication_id(&self) -> Option<&str> {
        self.attributes
            .get("MessageDeduplicationId")
            .map(String::as_str)
    }

    /// A FIFO message's sequence number.
    pub fn sequence_number(&self) -> Option<&str> {
        self.attributes.get("SequenceNumber").map(String::as_str)
    }

    /// How often SQS has handed the message out, this time included.
    pub fn approximate_receive_count(&self) -> Option<u64> {
        self.attributes
            .get("ApproximateReceiveCount")
            .and_then(|count| count.parse().ok())
    }

    /// The message attribute of that name.
    pub fn attribute(&self, name: &str) -> Option<&MessageAttribute> {
        self.message_attributes.get(name)
    }
}

/// The event's messages by unit: each message alone on a standard queue;
/// a FIFO queue's by message group, in the event's order (SQS delivers a
/// group in order).
fn decode(records: &[Value]) -> Result<Vec<Vec<Decoded>>, EventError> {
    let mut units: Vec<Vec<Decoded>> = Vec::new();
    let mut unit_of: BTreeMap<String, usize> = BTreeMap::new();
    for (index, record) in records.iter().enumerate() {
        fn id_of(fields: &Map<String, Value>) -> Option<&str> {
            fields.get("messageId")?.as_str()
        }
        let (fields, message_id) = identified(Source::Sqs, index, record, id_of, "messageId")?;
        let message = message(fields, message_id.clone());
        let arn = text(fields, "eventSourceARN")
            .ok()
            .flatten()
            .unwrap_or_default();
        let queue = arn.rsplit(':').next().unwrap_or(arn);
        let group = match &message {
            Ok(message) if queue.ends_with(".fifo") => {
                message.message_group_id().map(str::to_owned)
            }
            _ => None,
        };
        let at = Coordinates {
            partition: match &group {
                Some(group) => format!("{queue}/{group}"),
                None => queue.to_owned(),
            },
            offset: index as i64,
            id: Some(message_id),
        };
        let decoded = (at, message.map(Record::Sqs));
        match group {
            // A group's messages run in order, one unit.
            Some(group) => {
                let unit = *unit_of.entry(group).or_insert_with(|| {
                    units.push(Vec::new());
                    units.len() - 1
                });
                units[unit].push(decoded);
            }
            // No order: a unit of its own (also a FIFO message that could
            // not be read, which has no group to stop).
            None => units.push(vec![decoded]),
        }
    }
    Ok(units)
}

/// One message's fields, or why it cannot be read.
fn message(fields: &Map<String, Value>, message_id: String) -> Result<SqsMessage, String> {
    let malformed = |reason: String| format!("malformed SQS message: {reason}");
    let body = text(fields, "body").map_err(malformed)?.unwrap_or_default();
    let attributes = match fields.get("attributes") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(map)) => map
            .iter()
            .filter_map(|(name, value)| Some((name.clone(), value.as_str()?.to_owned())))
            .collect(),
        Some(_) => return Err(malformed("field `attributes` is not an object".into())),
    };
    Ok(SqsMessage {
        message_id,
        receipt_handle: text(fields, "receiptHandle")
            .map_err(malformed)?
            .map(str::to_owned),
        body: body.as_bytes().to_vec(),
        attributes,
        message_attributes: message_attributes(fields.get("messageAttributes"))
            .map_err(malformed)?,
        md5_of_body: text(fields, "md5OfBody")
            .map_err(malformed)?
            .map(str::to_owned),
        event_source_arn: text(fields, "eventSourceARN")
            .map_err(malformed)?
            .unwrap_or_default()
            .to_owned(),
        aws_region: text(fields, "awsRegion")
            .map_err(malformed)?
            .map(str::to_owned),
    })
}

/// `{"name": {"dataType": "String", "stringValue": "..."}}` (a Binary's
/// `binaryValue` in base64); an attribute without a value is left out.
fn message_attributes(value: Option<&Value>) -> Result<BTreeMap<String, MessageAttribute>, String> {
    let map = match value {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map,
        Some(_) => return Err("field `messageAttributes` is not an object".into()),
    };
    let mut attributes = BTreeMap::new();
    for (name, attribute) in map {
        let fields = attribute
            .as_object()
            .ok_or_else(|| format!("message attribute {name:?} is not an object"))?;
        let data_type = text(fields, "dataType")?.unwrap_or("String").to_owned();
        let value = match (text(fields, "stringValue")?, text(fields, "binaryValue")?) {
            (Some(text), _) => text.as_bytes().to_vec(),
            (None, Some(base64)) => STANDARD
                .decode(base64)
                .map_err(|_| format!("message attribute {name:?} is not valid base64"))?,
            (None, None) => continue,
        };
        attributes.insert(name.clone(), MessageAttribute { data_type, value });
    }
    Ok(attributes)
}
