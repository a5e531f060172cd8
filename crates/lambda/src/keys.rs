//! Where a record's idempotency key comes from.

use serde_json::Value;

use super::sources::{Coordinates, Record};
use exactly_once_core::redact::{json_error, json_type};

/// A record's value parsed as JSON, when something needs it (parsed once per
/// record for keys and fingerprint alike).
pub type ParsedValue = Option<Result<Value, serde_json::Error>>;

/// One source of (part of) the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart {
    /// The attribute `IDEMPOTENCY_KEY_HEADER` names: a Kafka header, an SQS
    /// message attribute (a String's text), a RabbitMQ header or an ActiveMQ
    /// property (an AMQP string's bytes, a string, a number's text).
    Header,
    /// A string or number in the JSON payload, by JSON pointer
    /// (`/payment_id`): Kafka's value, SQS's body, Kinesis's and Amazon MQ's data,
    /// DynamoDB Streams' new image.
    JsonPointer(String),
    /// The record's key: Kafka's record key, Kinesis's partition key,
    /// DynamoDB Streams' item keys (as JSON), an Amazon MQ message's JMS
    /// message group (`JMSXGroupID`).
    RecordKey,
    /// An SQS FIFO message's deduplication id.
    DeduplicationId,
    /// The message's own id ([`Record::message_id`]): SQS's `messageId`,
    /// RabbitMQ's `messageId` property, ActiveMQ's `messageID`.
    MessageId,
}

/// What to do with a record whose key is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingKeyPolicy {
    /// A permanent failure of that record (the default).
    Reject,
    /// Key on the record's coordinates: dedupes Lambda's redeliveries only.
    /// An Amazon MQ message is keyed by its message id (ActiveMQ's
    /// `messageID`, RabbitMQ's `messageId` property); one without (a
    /// RabbitMQ producer that set none) fails permanently, since its place
    /// in a batch changes between deliveries.
    RecordCoordinates,
    /// Key on the payload's SHA-256: equal payloads count as one.
    PayloadHash,
}

impl MissingKeyPolicy {
    /// Parses `MISSING_KEY_POLICY`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "reject" => Ok(Self::Reject),
            "record-coordinates" => Ok(Self::RecordCoordinates),
            "payload-hash" => Ok(Self::PayloadHash),
            other => Err(format!(
                "unknown policy {other:?}; expected reject, record-coordinates or payload-hash"
            )),
        }
    }
}

/// How keys are derived: one part, or several joined into a composite key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpec {
    parts: Vec<KeyPart>,
    header: String,
    missing: MissingKeyPolicy,
}

impl KeySpec {
    /// Parses `IDEMPOTENCY_KEY_SOURCE`: comma-separated parts, each `header`,
    /// `record-key`, `deduplication-id`, `message-id` or `json:<JSON pointer>`.
    pub fn parse(source: &str, header: String, missing: MissingKeyPolicy) -> Result<Self, String> {
        let parts = source
            .split(',')
            .map(|part| match part.trim() {
                "header" => Ok(KeyPart::Header),
                "record-key" => Ok(KeyPart::RecordKey),
                "deduplication-id" => Ok(KeyPart::DeduplicationId),
                "message-id" => Ok(KeyPart::MessageId),
                other => match other.strip_prefix("json:") {
                    Some(pointer) if pointer.starts_with('/') => {
                        Ok(KeyPart::JsonPointer(pointer.to_owned()))
                    }
                    Some(pointer) => Err(format!(
                        "JSON pointer {pointer:?} must start with '/', e.g. json:/payment_id"
                    )),
                    None => Err(format!(
                        "unknown key source {other:?}; expected header, record-key, \
                         deduplication-id, message-id or json:/pointer"
                    )),
                },
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            parts,
            header,
            missing,
        })
    }

    /// The parts, in order.
    pub fn parts(&self) -> &[KeyPart] {
        &self.parts
    }

    /// What happens to a record whose key is missing.
    pub fn missing(&self) -> MissingKeyPolicy {
        self.missing
    }

    /// Whether a part reads the value as JSON.
    pub fn reads_json(&self) -> bool {
        self.parts
            .iter()
            .any(|part| matches!(part, KeyPart::JsonPointer(_)))
    }

    /// The record's idempotency key, or why it has none usable.
    pub fn key_for(
        &self,
        record: &Record,
        json: &ParsedValue,
        at: &Coordinates,
        payload_hash: &str,
    ) -> Result<String, String> {
        // A DynamoDB Streams change of an item already there (MODIFY,
        // REMOVE) is an event of its own, keyed by its sequence number: it
        // runs once however often the stream delivers it, and never takes
        // the key of the item's INSERT (whose image it would not match).
        if let Record::DynamoDb(change) = record
            && change.event_name != "INSERT"
        {
            return Ok(format!("record:{at}"));
        }
        // Every part is read first: a part that cannot be read fails the
        // record whatever the order of the parts and the missing-key policy.
        let mut values = Vec::with_capacity(self.parts.len());
        let mut missing = None;
        for part in &self.parts {
            match self.part(part, record, json)? {
                Some(value) => values.push(value),
                None => missing = missing.or(Some(part)),
            }
        }
        if let Some(part) = missing {
            return self.when_missing(part, record, at, payload_hash);
        }
        Ok(match values.as_slice() {
            [single] => single.clone(),
            // Escaped so that different parts can never join into one key.
            _ => values
                .iter()
                .map(|v| v.replace('\\', "\\\\").replace('|', "\\|"))
                .collect::<Vec<_>>()
                .join("|"),
        })
    }

    fn part(
        &self,
        part: &KeyPart,
        record: &Record,
        json: &ParsedValue,
    ) -> Result<Option<String>, String> {
        let text = |bytes: &[u8], what: &str| {
            String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what} is not valid UTF-8"))
        };
        let value = match part {
            KeyPart::Header => match record.attribute(&self.header) {
                Some(bytes) => Some(text(bytes, &format!("header {:?}", self.header))?),
                None => None,
            },
            KeyPart::RecordKey => match record.key() {
                Some(bytes) => Some(text(&bytes, "the record key")?),
                None => None,
            },
            KeyPart::DeduplicationId => match record {
                Record::Sqs(message) => message.deduplication_id().map(str::to_owned),
                _ => None,
            },
            KeyPart::MessageId => record.message_id().map(str::to_owned),
            KeyPart::JsonPointer(pointer) => {
                let json = match json {
                    Some(Ok(json)) => json,
                    Some(Err(err)) => {
                        return Err(format!(
                            "payload is not JSON, cannot read {pointer}: {}",
                            json_error(err)
                        ));
                    }
                    None => return Err(format!("payload not parsed, cannot read {pointer}")),
                };
                match json.pointer(pointer) {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(Value::Number(n)) => Some(n.to_string()),
                    Some(other) => {
                        return Err(format!(
                            "{pointer} is not a string or number (it is {})",
                            json_type(other)
                        ));
                    }
                }
            }
        };
        Ok(value.filter(|v| !v.is_empty()))
    }

    fn when_missing(
        &self,
        part: &KeyPart,
        record: &Record,
        at: &Coordinates,
        payload_hash: &str,
    ) -> Result<String, String> {
        let missing = match part {
            KeyPart::Header => format!("header {:?}", self.header),
            KeyPart::RecordKey => "the record key".into(),
            KeyPart::DeduplicationId => "the SQS FIFO deduplication id".into(),
            KeyPart::MessageId => "the message id".into(),
            KeyPart::JsonPointer(pointer) => format!("payload field {pointer}"),
        };
        let source = record.source();
        match self.missing {
            MissingKeyPolicy::Reject => Err(format!(
                "no idempotency key: {missing} is missing or empty (MISSING_KEY_POLICY=reject)"
            )),
            // A batch without a partial response is placed by index, which
            // changes between deliveries: only a message id is stable.
            MissingKeyPolicy::RecordCoordinates
                if !source.has_partial_batch_response() && at.id.is_none() =>
            {
                Err(format!(
                    "no idempotency key: {missing} is missing or empty, and this {} message has \
                     no message id for MISSING_KEY_POLICY=record-coordinates (its place in a \
                     batch changes between deliveries); have the producer set one, or key on a \
                     header or the body",
                    source.title()
                ))
            }
            MissingKeyPolicy::RecordCoordinates => Ok(format!("record:{at}")),
            MissingKeyPolicy::PayloadHash => Ok(format!("sha256:{payload_hash}")),
        }
    }
}
