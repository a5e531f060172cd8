//! The properties an Amazon MQ message carries beside its body: a RabbitMQ
//! message's AMQP headers, an ActiveMQ message's JMS properties. Lambda
//! spells an AMQP string as `{"bytes":[…]}` and passes numbers, booleans and
//! JMS strings as JSON has them.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// One header or property value as Lambda delivered it.
#[derive(Debug, Clone, PartialEq)]
pub enum PropertyValue {
    /// An AMQP string (RabbitMQ's long string), delivered as `{"bytes":[…]}`.
    Bytes(Vec<u8>),
    /// A string.
    Text(String),
    /// A number, as its JSON text (`5`, `2.5`).
    Number(String),
    /// A boolean.
    Bool(bool),
    /// Anything else (a table, a list), as delivered.
    Other(Value),
}

impl PropertyValue {
    /// Its bytes as a key or a trace context reads them: an AMQP string's,
    /// a string's UTF-8, a number's text; `None` for a boolean or a table.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Self::Bytes(bytes) => Some(bytes),
            Self::Text(text) | Self::Number(text) => Some(text.as_bytes()),
            Self::Bool(_) | Self::Other(_) => None,
        }
    }

    /// The value of `name` as delivered; an AMQP string whose bytes are not
    /// bytes is an error naming it (never its content).
    fn read(name: &str, value: &Value) -> Result<Self, String> {
        Ok(match value {
            Value::String(text) => Self::Text(text.clone()),
            Value::Number(number) => Self::Number(number.to_string()),
            Value::Bool(flag) => Self::Bool(*flag),
            Value::Object(fields) if fields.len() == 1 && fields.contains_key("bytes") => {
                let bytes = fields["bytes"]
                    .as_array()
                    .ok_or_else(|| format!("header {name:?}: `bytes` is not a list"))?;
                // Unsigned (AWS's samples) or Java's signed bytes alike.
                let byte = |b: &Value| {
                    b.as_i64()
                        .filter(|b| (-128..=255).contains(b))
                        .map(|b| b as u8)
                        .ok_or_else(|| format!("header {name:?}: `bytes` holds a non-byte"))
                };
                Self::Bytes(bytes.iter().map(byte).collect::<Result<_, _>>()?)
            }
            other => Self::Other(other.clone()),
        })
    }
}

/// The object `field` of `fields` as properties by name (absent or null:
/// none).
pub(super) fn read_properties(
    fields: &Map<String, Value>,
    field: &str,
) -> Result<BTreeMap<String, PropertyValue>, String> {
    match fields.get(field) {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(name, value)| Ok((name.clone(), PropertyValue::read(name, value)?)))
            .collect(),
        Some(_) => Err(format!("field `{field}` is not an object")),
    }
}
