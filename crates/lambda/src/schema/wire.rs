//! The header a schema-registry serializer writes before the encoded value,
//! so that a reader knows which schema wrote it:
//!
//! - Confluent: byte `0`, the schema id (4 bytes, big-endian); for Protobuf
//!   then the message indexes (which message of the `.proto` file): a
//!   zig-zag varint count and that many zig-zag varints, or one `0` byte for
//!   the first message.
//! - AWS Glue: byte `3` (header version), a compression byte (`0` none, `5`
//!   zlib), the schema version id (a 16-byte UUID); for Protobuf then the
//!   message's index (one unsigned varint).
//!
//! Two framings reach a function:
//! - [`Framing::Producer`]: the bytes as the serializer wrote them, header
//!   included (a mapping without `SchemaRegistryConfig`).
//! - [`Framing::Lambda`]: the mapping validated the record against the
//!   registry and delivered it with `EventRecordFormat: SOURCE`: Lambda
//!   removed the header and names the schema in `valueSchemaMetadata`
//!   (`schemaId`); Protobuf's message indexes stay in the bytes (as AWS's
//!   Powertools reads them).
//!
//! With `EventRecordFormat: JSON` Lambda has already decoded the value to
//! JSON text and none of this is needed.

use std::borrow::Cow;
use std::io::Read as _;

use uuid::Uuid;

use crate::SchemaMetadata;

/// The data formats a registry frames (Lambda's `dataFormat`). Only
/// Protobuf adds message indexes to Confluent's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataFormat {
    /// Apache Avro, binary encoding of one datum.
    Avro,
    /// Protocol Buffers.
    Protobuf,
    /// JSON Schema: UTF-8 JSON text.
    Json,
}

impl DataFormat {
    /// Lambda's `dataFormat` (`AVRO`, `PROTOBUF`, `JSON`), any case.
    pub fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_uppercase().as_str() {
            "AVRO" => Some(Self::Avro),
            "PROTOBUF" => Some(Self::Protobuf),
            "JSON" => Some(Self::Json),
            _ => None,
        }
    }
}

/// How the value reached the function (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing<'a> {
    /// The registry header is in the bytes.
    Producer,
    /// Lambda removed the header; this is the record's `schemaId`.
    Lambda {
        /// `keySchemaMetadata.schemaId` or `valueSchemaMetadata.schemaId`.
        schema_id: &'a str,
    },
}

impl<'a> Framing<'a> {
    /// [`Framing::Lambda`] when the mapping named the schema (the record's
    /// metadata has a `schemaId`), [`Framing::Producer`] otherwise.
    pub fn of(metadata: Option<&'a SchemaMetadata>) -> Self {
        match metadata.and_then(|m| m.schema_id.as_deref()) {
            Some(schema_id) => Self::Lambda { schema_id },
            None => Self::Producer,
        }
    }
}

/// The registry a schema id belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaRef {
    /// Confluent Schema Registry: the schema's id.
    Confluent {
        /// The registry's schema id.
        schema_id: u32,
    },
    /// AWS Glue Schema Registry: the schema version's id.
    Glue {
        /// The schema version id.
        schema_version_id: Uuid,
    },
}

impl SchemaRef {
    /// The id as Lambda's `schemaId` spells it: Confluent's number, Glue's
    /// UUID.
    pub fn schema_id(&self) -> String {
        match self {
            Self::Confluent { schema_id } => schema_id.to_string(),
            Self::Glue { schema_version_id } => schema_version_id.hyphenated().to_string(),
        }
    }

    /// A `schemaId` as Lambda names it: a UUID is Glue's, a number
    /// Confluent's.
    pub fn parse(schema_id: &str) -> Result<Self, WireError> {
        if let Ok(schema_id) = schema_id.parse::<u32>() {
            return Ok(Self::Confluent { schema_id });
        }
        Uuid::parse_str(schema_id)
            .map(|schema_version_id| Self::Glue { schema_version_id })
            .map_err(|_| WireError::SchemaId)
    }
}

/// A value split into the schema it names and the encoded datum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framed<'a> {
    /// The schema the producer wrote with.
    pub schema: SchemaRef,
    /// Protobuf only: which message of the `.proto` file. Confluent: the
    /// path of indexes (`[0]`: the first message); Glue: one index, the
    /// message's position among all its message types sorted by full name.
    pub message_indexes: Vec<i32>,
    /// The datum in the format's own encoding (decompressed for Glue's zlib).
    pub payload: Cow<'a, [u8]>,
}

/// Why a value does not carry a registry header. Permanent: the same bytes
/// fail the same way on every delivery. The messages never quote the bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// An empty value (a tombstone has no schema).
    #[error("the value is empty: no schema registry header")]
    Empty,
    /// The first byte is neither Confluent's `0` nor Glue's `3`.
    #[error("unknown schema registry header: first byte {0} (Confluent writes 0, AWS Glue 3)")]
    UnknownMagic(u8),
    /// Fewer bytes than the header needs.
    #[error("the value ends inside its {0} header")]
    Truncated(&'static str),
    /// Protobuf's message indexes are not well-formed varints.
    #[error("malformed Protobuf message indexes")]
    MessageIndexes,
    /// The record's `schemaId` is neither a number nor a UUID.
    #[error("the record's schemaId is neither a Confluent number nor an AWS Glue UUID")]
    SchemaId,
    /// Glue's compression byte names no known compression.
    #[error("unknown AWS Glue compression byte {0} (0 none, 5 zlib)")]
    UnknownCompression(u8),
    /// Glue said zlib, and the bytes do not inflate.
    #[error("the value does not inflate as zlib (AWS Glue compression 5)")]
    Inflate,
    /// Glue said zlib, and the bytes inflate beyond [`MAX_INFLATED_BYTES`].
    #[error("the value inflates beyond {MAX_INFLATED_BYTES} bytes (AWS Glue compression 5)")]
    TooLarge,
}

/// The most a Glue-compressed value may inflate to: far above a Kafka
/// record's size, far below what would exhaust a function's memory.
pub const MAX_INFLATED_BYTES: u64 = 64 * 1024 * 1024;

const CONFLUENT_MAGIC: u8 = 0;
const GLUE_HEADER_VERSION: u8 = 3;
const GLUE_NO_COMPRESSION: u8 = 0;
const GLUE_ZLIB: u8 = 5;

/// Splits a value into the schema it was written with and its datum.
pub fn unframe<'a>(
    value: &'a [u8],
    format: DataFormat,
    framing: Framing<'_>,
) -> Result<Framed<'a>, WireError> {
    let (schema, payload) = match framing {
        Framing::Lambda { schema_id } => (SchemaRef::parse(schema_id)?, Cow::Borrowed(value)),
        Framing::Producer => match value.first() {
            None => return Err(WireError::Empty),
            Some(&CONFLUENT_MAGIC) => confluent_header(&value[1..])?,
            Some(&GLUE_HEADER_VERSION) => glue_header(&value[1..])?,
            Some(&other) => return Err(WireError::UnknownMagic(other)),
        },
    };
    let (message_indexes, payload) = match (format, &schema) {
        (DataFormat::Protobuf, SchemaRef::Confluent { .. }) => {
            let mut rest = payload.as_ref();
            let indexes = confluent_message_indexes(&mut rest)?;
            (indexes, Cow::Owned(rest.to_vec()))
        }
        (DataFormat::Protobuf, SchemaRef::Glue { .. }) => {
            let mut rest = payload.as_ref();
            let index = varint(&mut rest)?;
            let index = i32::try_from(index).map_err(|_| WireError::MessageIndexes)?;
            (vec![index], Cow::Owned(rest.to_vec()))
        }
        (DataFormat::Avro | DataFormat::Json, _) => (Vec::new(), payload),
    };
    Ok(Framed {
        schema,
        message_indexes,
        payload,
    })
}

fn confluent_header(rest: &[u8]) -> Result<(SchemaRef, Cow<'_, [u8]>), WireError> {
    let (id, rest) = rest
        .split_first_chunk::<4>()
        .ok_or(WireError::Truncated("Confluent"))?;
    let schema_id = u32::from_be_bytes(*id);
    Ok((SchemaRef::Confluent { schema_id }, Cow::Borrowed(rest)))
}

/// A zig-zag varint count, then that many indexes; a count of 0 (the single
/// byte `0`) means `[0]`, the first message.
fn confluent_message_indexes(bytes: &mut &[u8]) -> Result<Vec<i32>, WireError> {
    let count = zigzag_varint(bytes)?;
    if count == 0 {
        return Ok(vec![0]);
    }
    // Each index takes at least one byte: a count beyond the bytes left is
    // malformed, and is refused before anything is allocated for it.
    let count = usize::try_from(count)
        .ok()
        .filter(|&count| count <= bytes.len())
        .ok_or(WireError::MessageIndexes)?;
    (0..count).map(|_| zigzag_varint(bytes)).collect()
}

/// Kafka's `ByteUtils.readVarint`: a zig-zag 32-bit varint.
fn zigzag_varint(bytes: &mut &[u8]) -> Result<i32, WireError> {
    let raw = varint(bytes)?;
    Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

/// An unsigned 32-bit varint, at most 5 bytes.
fn varint(bytes: &mut &[u8]) -> Result<u32, WireError> {
    let mut raw: u32 = 0;
    for shift in (0..35).step_by(7) {
        let (&byte, rest) = bytes.split_first().ok_or(WireError::MessageIndexes)?;
        *bytes = rest;
        raw |= u32::from(byte & 0x7f)
            .checked_shl(shift)
            .ok_or(WireError::MessageIndexes)?;
        if byte & 0x80 == 0 {
            return Ok(raw);
        }
    }
    Err(WireError::MessageIndexes)
}

fn glue_header(rest: &[u8]) -> Result<(SchemaRef, Cow<'_, [u8]>), WireError> {
    let (&compression, rest) = rest.split_first().ok_or(WireError::Truncated("AWS Glue"))?;
    if ![GLUE_NO_COMPRESSION, GLUE_ZLIB].contains(&compression) {
        return Err(WireError::UnknownCompression(compression));
    }
    let (id, rest) = rest
        .split_first_chunk::<16>()
        .ok_or(WireError::Truncated("AWS Glue"))?;
    let payload = if compression == GLUE_ZLIB {
        let mut inflated = Vec::new();
        flate2::read::ZlibDecoder::new(rest)
            .take(MAX_INFLATED_BYTES + 1)
            .read_to_end(&mut inflated)
            .map_err(|_| WireError::Inflate)?;
        if inflated.len() as u64 > MAX_INFLATED_BYTES {
            return Err(WireError::TooLarge);
        }
        Cow::Owned(inflated)
    } else {
        Cow::Borrowed(rest)
    };
    let schema_version_id = Uuid::from_bytes(*id);
    Ok((SchemaRef::Glue { schema_version_id }, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_varints_decode_as_confluent_writes_them() {
        for (bytes, want) in [
            (&[0x00][..], 0),
            (&[0x02], 1),
            (&[0x01], -1),
            (&[0x04], 2),
            (&[0xac, 0x02], 150),
        ] {
            let mut rest = bytes;
            assert_eq!(zigzag_varint(&mut rest), Ok(want), "{bytes:?}");
            assert!(rest.is_empty());
        }
        let mut endless: &[u8] = &[0xff; 6];
        assert_eq!(zigzag_varint(&mut endless), Err(WireError::MessageIndexes));
    }
}
