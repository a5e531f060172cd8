//! Amazon DynamoDB Streams: `Records` of one shard in sequence order, each
//! an item's change (`INSERT`, `MODIFY`, `REMOVE`) with its keys and images
//! in DynamoDB's typed JSON, read here as plain JSON (`{"N":"5"}` is `5`).
//! An event holds one shard's records, the ordering unit: a failed record
//! stops the rest, and Lambda resumes the shard from the lowest sequence
//! number reported. A record is named by its `dynamodb.SequenceNumber`.

use serde_json::{Map, Number, Value};

use std::borrow::Cow;

use super::fields::{arn_resource, identified, text};
use super::record::{SourceRecord, one_source};
use super::{Coordinates, Decoded, Edge, EventError, Record, Shape, Source};

/// DynamoDB Streams: `aws:dynamodb` on each record.
pub(super) static EDGE: Edge = Edge {
    name: "dynamodb-streams",
    title: "DynamoDB Streams",
    event_sources: &["aws:dynamodb"],
    partial_batch_response: true,
    messaging_system: "aws_dynamodb_streams",
    shape: Shape::Records { decode },
};

one_source!(StreamRecord, DynamoDb, DynamoDbStreams);

/// No attributes: a stream record has none.
impl SourceRecord for StreamRecord {
    fn body(&self) -> Cow<'_, [u8]> {
        Cow::Owned(StreamRecord::body(self))
    }

    fn key(&self) -> Option<Cow<'_, [u8]>> {
        Some(Cow::Owned(self.keys.to_string().into_bytes()))
    }

    fn destination(&self) -> &str {
        self.table_name()
    }
}

/// A DynamoDB Streams record, whole: what a handler gets for
/// `aws:dynamodb` events. Keys and images are plain JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamRecord {
    /// The stream's ARN (`...:table/<table>/stream/<label>`).
    pub event_source_arn: String,
    /// The record's id.
    pub event_id: String,
    /// `INSERT`, `MODIFY` or `REMOVE`.
    pub event_name: String,
    /// The sequence number: what the partial batch response names it by.
    pub sequence_number: String,
    /// The item's key attributes.
    pub keys: Value,
    /// The item after the change (with a view type that has it).
    pub new_image: Option<Value>,
    /// The item before the change (with a view type that has it).
    pub old_image: Option<Value>,
    /// When the change happened, epoch seconds.
    pub approximate_creation_date_time: Option<f64>,
    /// The record's size.
    pub size_bytes: Option<u64>,
    /// `KEYS_ONLY`, `NEW_IMAGE`, `OLD_IMAGE` or `NEW_AND_OLD_IMAGES`.
    pub stream_view_type: Option<String>,
    /// The table's region.
    pub aws_region: Option<String>,
}

impl StreamRecord {
    /// The table's name (from the stream's ARN).
    pub fn table_name(&self) -> &str {
        let resource = arn_resource(&self.event_source_arn, ":table/").unwrap_or_default();
        resource.split('/').next().unwrap_or_default()
    }

    /// The item as the change left it, as JSON bytes (what the function
    /// keys and fingerprints): the new image; a `REMOVE`'s old image; the
    /// keys on a `KEYS_ONLY` stream.
    pub fn body(&self) -> Vec<u8> {
        let item = self.new_image.as_ref().or(self.old_image.as_ref());
        item.unwrap_or(&self.keys).to_string().into_bytes()
    }
}

/// The event's records, one shard in sequence order.
fn decode(records: &[Value]) -> Result<Vec<Vec<Decoded>>, EventError> {
    let mut unit = Vec::with_capacity(records.len());
    for (index, record) in records.iter().enumerate() {
        fn id_of(fields: &Map<String, Value>) -> Option<&str> {
            fields.get("dynamodb")?.get("SequenceNumber")?.as_str()
        }
        let (fields, sequence_number) = identified(
            Source::DynamoDbStreams,
            index,
            record,
            id_of,
            "dynamodb.SequenceNumber",
        )?;
        let arn = text(fields, "eventSourceARN")
            .ok()
            .flatten()
            .unwrap_or_default();
        let at = Coordinates {
            partition: arn_resource(arn, ":table/").unwrap_or(arn).to_owned(),
            offset: index as i64,
            id: Some(sequence_number.clone()),
        };
        unit.push((
            at,
            stream_record(fields, sequence_number).map(Record::DynamoDb),
        ));
    }
    Ok(match unit.is_empty() {
        true => Vec::new(),
        false => vec![unit],
    })
}

/// One record's fields, or why it cannot be read.
fn stream_record(
    fields: &Map<String, Value>,
    sequence_number: String,
) -> Result<StreamRecord, String> {
    let malformed = |reason: String| format!("malformed DynamoDB Streams record: {reason}");
    let change = fields
        .get("dynamodb")
        .and_then(Value::as_object)
        .ok_or_else(|| malformed("field `dynamodb` is not an object".into()))?;
    let image = |name: &str| match change.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => unmarshal_item(value)
            .map(Some)
            .map_err(|reason| malformed(format!("{name}: {reason}"))),
    };
    let number = |name: &str| match change.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_f64()
            .map(Some)
            .ok_or_else(|| malformed(format!("field `{name}` is not a number"))),
    };
    Ok(StreamRecord {
        event_source_arn: text(fields, "eventSourceARN")
            .map_err(malformed)?
            .unwrap_or_default()
            .to_owned(),
        event_id: text(fields, "eventID")
            .map_err(malformed)?
            .unwrap_or_default()
            .to_owned(),
        event_name: text(fields, "eventName")
            .map_err(malformed)?
            .ok_or_else(|| malformed("missing field `eventName`".into()))?
            .to_owned(),
        sequence_number,
        keys: image("Keys")?.unwrap_or(Value::Object(Map::new())),
        new_image: image("NewImage")?,
        old_image: image("OldImage")?,
        approximate_creation_date_time: number("ApproximateCreationDateTime")?,
        size_bytes: number("SizeBytes")?.map(|size| size as u64),
        stream_view_type: text(change, "StreamViewType")
            .map_err(malformed)?
            .map(str::to_owned),
        aws_region: text(fields, "awsRegion")
            .map_err(malformed)?
            .map(str::to_owned),
    })
}

/// An item (`{"name": {"S": "..."}, ...}`) as a JSON object.
fn unmarshal_item(item: &Value) -> Result<Value, String> {
    let fields = item.as_object().ok_or("an image is not an object")?;
    fields
        .iter()
        .map(|(name, value)| {
            Ok((
                name.clone(),
                unmarshal(value).map_err(|r| format!("{name}: {r}"))?,
            ))
        })
        .collect::<Result<Map<String, Value>, String>>()
        .map(Value::Object)
}

/// One DynamoDB attribute value as plain JSON: `S` a string, `N` a number
/// (kept as its text when JSON's numbers cannot hold it exactly), `B` its
/// base64 text, `BOOL`, `NULL`, `M` an object, `L` a list, `SS`, `NS`,
/// `BS` lists.
pub fn unmarshal(value: &Value) -> Result<Value, String> {
    let fields = value.as_object().filter(|f| f.len() == 1).ok_or(
        "an attribute value is not an object of one type (S, N, B, BOOL, NULL, M, L, SS, NS, BS)",
    )?;
    let (kind, inner) = fields.iter().next().ok_or("an empty attribute value")?;
    fn list<'v>(kind: &str, inner: &'v Value) -> Result<&'v Vec<Value>, String> {
        inner
            .as_array()
            .ok_or_else(|| format!("{kind} is not a list"))
    }
    Ok(match kind.as_str() {
        "S" | "B" => Value::String(
            inner
                .as_str()
                .ok_or(format!("{kind} is not a string"))?
                .into(),
        ),
        "N" => number(inner.as_str().ok_or("N is not a string")?),
        "BOOL" => Value::Bool(inner.as_bool().ok_or("BOOL is not a boolean")?),
        "NULL" => Value::Null,
        "M" => unmarshal_item(inner)?,
        "L" => Value::Array(
            list(kind, inner)?
                .iter()
                .map(unmarshal)
                .collect::<Result<_, _>>()?,
        ),
        "SS" | "BS" => Value::Array(list(kind, inner)?.clone()),
        "NS" => Value::Array(
            list(kind, inner)?
                .iter()
                .map(|n| n.as_str().map(number).ok_or("NS holds a non-string"))
                .collect::<Result<_, _>>()?,
        ),
        other => return Err(format!("unknown attribute type {other:?}")),
    })
}

/// A DynamoDB number as a JSON number when one holds it exactly (integers
/// within 64 bits, decimals whose shortest form is the same text), else
/// its text: no digit of a 38-digit number is lost.
fn number(text: &str) -> Value {
    if let Ok(n) = text.parse::<i64>() {
        return Value::Number(n.into());
    }
    if let Ok(n) = text.parse::<u64>() {
        return Value::Number(n.into());
    }
    match text.parse::<f64>().ok().and_then(Number::from_f64) {
        Some(n) if n.to_string() == text => Value::Number(n),
        _ => Value::String(text.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn attribute_values_read_as_plain_json() {
        let item = json!({
            "id": {"S": "p-1"},
            "amount": {"N": "5"},
            "rate": {"N": "1.5"},
            "huge": {"N": "123456789012345678901234567890"},
            "paid": {"BOOL": true},
            "note": {"NULL": true},
            "tags": {"SS": ["a", "b"]},
            "scores": {"NS": ["1", "2.5"]},
            "blob": {"B": "AAE="},
            "nested": {"M": {"list": {"L": [{"N": "7"}, {"S": "x"}]}}}
        });
        assert_eq!(
            unmarshal_item(&item),
            Ok(json!({
                "id": "p-1",
                "amount": 5,
                "rate": 1.5,
                "huge": "123456789012345678901234567890",
                "paid": true,
                "note": null,
                "tags": ["a", "b"],
                "scores": [1, 2.5],
                "blob": "AAE=",
                "nested": {"list": [7, "x"]}
            }))
        );
        for bad in [
            json!({"amount": {"X": "1"}}),
            json!({"amount": {"S": "a", "N": "1"}}),
        ] {
            assert!(unmarshal_item(&bad).is_err(), "{bad}");
        }
    }
}
