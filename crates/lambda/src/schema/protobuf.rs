//! Protobuf values framed by Confluent or AWS Glue, read into a message
//! type the function ships (`prost`).

/// The Protobuf library this module decodes with (`#[derive(prost::Message)]`
/// needs `prost` among the crate's own dependencies, at this version).
pub use prost;
use prost::Message;

use super::{DataFormat, Framing, SchemaError, SchemaRef, unframe};

/// Which message of its `.proto` file a type is, in each registry's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageIndex<'a> {
    /// Confluent's path of indexes (`[0]`: the file's first message).
    pub confluent: &'a [i32],
    /// Glue's index: the position among the file's message types (nested
    /// ones included) sorted by full name.
    pub glue: i32,
}

impl MessageIndex<'static> {
    /// The only message of a one-message `.proto` file.
    pub const ONLY: Self = Self {
        confluent: &[0],
        glue: 0,
    };
}

/// The schema the value was written with, and the value as `M`. A value of
/// another message than `index` (another message of the same file) is
/// refused, not misread. `framing`: [`Framing::of`] the record's metadata.
pub fn decode<M: Message + Default>(
    value: &[u8],
    framing: Framing<'_>,
    index: MessageIndex<'_>,
) -> Result<(SchemaRef, M), SchemaError> {
    let framed = unframe(value, DataFormat::Protobuf, framing)?;
    let schema_id = framed.schema.schema_id();
    let expected = match framed.schema {
        SchemaRef::Confluent { .. } => index.confluent,
        SchemaRef::Glue { .. } => std::slice::from_ref(&index.glue),
    };
    if framed.message_indexes != expected {
        return Err(SchemaError::UnknownSchema(format!(
            "{schema_id} (message {:?})",
            framed.message_indexes
        )));
    }
    // prost's errors name the message and the wire problem, not the bytes.
    let message = M::decode(framed.payload.as_ref()).map_err(|err| SchemaError::Undecodable {
        format: "Protobuf",
        schema_id,
        reason: err.to_string(),
    })?;
    Ok((framed.schema, message))
}
