//! Reading an event's JSON field by field, so that an error names the
//! field and never echoes a value: what every source's file reads with.

use serde_json::{Map, Value};

use super::{EventError, Source};

/// The `Records` list of an SQS, Kinesis or DynamoDB Streams event
/// ([`Source::of`] checked that it is one).
pub(super) fn records(event: &Value) -> &[Value] {
    event
        .get("Records")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A text field of a record's JSON object: `None` when absent or null.
pub(super) fn text<'a>(
    fields: &'a Map<String, Value>,
    name: &str,
) -> Result<Option<&'a str>, String> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(format!("field `{name}` is not a string")),
    }
}

/// An integer field of a record's JSON object, given as a number or as its
/// text (Amazon MQ's events spell some both ways): `None` when absent or
/// null.
pub(super) fn integer(fields: &Map<String, Value>, name: &str) -> Result<Option<i64>, String> {
    let not_a_number = || format!("field `{name}` is not an integer");
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => number.as_i64().map(Some).ok_or_else(not_a_number),
        Some(Value::String(text)) => text.trim().parse().map(Some).map_err(|_| not_a_number()),
        Some(_) => Err(not_a_number()),
    }
}

/// A boolean field of a record's JSON object: `false` when absent or null.
pub(super) fn flag(fields: &Map<String, Value>, name: &str) -> Result<bool, String> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(flag)) => Ok(*flag),
        Some(_) => Err(format!("field `{name}` is not a boolean")),
    }
}

/// The `index`-th record of a `Records` event: its object, and the
/// identifier its partial batch response names it by (`id_of`). Without an
/// identifier the record cannot be reported: an invocation error.
pub(super) fn identified<'a>(
    source: Source,
    index: usize,
    record: &'a Value,
    id_of: fn(&Map<String, Value>) -> Option<&str>,
    id_name: &str,
) -> Result<(&'a Map<String, Value>, String), EventError> {
    let missing = || {
        EventError::malformed(
            Some(source),
            format_args!("record {index} has no string {id_name}, so it could not be reported"),
        )
    };
    let fields = record.as_object().ok_or_else(missing)?;
    let id = id_of(fields)
        .filter(|id| !id.is_empty())
        .ok_or_else(missing)?;
    Ok((fields, id.to_owned()))
}

/// The last segment of an ARN's resource (`arn:...:table/t/stream/x` →
/// after `prefix`).
pub(super) fn arn_resource<'a>(arn: &'a str, prefix: &str) -> Option<&'a str> {
    arn.split_once(prefix).map(|(_, rest)| rest)
}
