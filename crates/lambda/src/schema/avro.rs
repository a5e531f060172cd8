//! Avro values framed by Confluent or AWS Glue, read with the writer
//! schemas the function ships (`apache-avro`).

use std::collections::HashMap;

/// The Avro library this module reads with (its `Schema`, to parse the
/// schemas a function ships).
pub use apache_avro;
use apache_avro::Schema;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use serde::de::DeserializeOwned;

use super::{DataFormat, Framing, SchemaError, SchemaRef, unframe};

/// The Avro schemas a function ships, by registry id (Confluent's number or
/// Glue's schema version UUID), and optionally the reader schema the
/// handler wants every value resolved to (Avro schema evolution).
#[derive(Debug, Default)]
pub struct AvroDecoder {
    writers: HashMap<String, Schema>,
    reader: Option<Schema>,
}

impl AvroDecoder {
    /// A decoder that knows no schema yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Values whose header names `schema_id` were written with `schema`.
    pub fn with_writer(mut self, schema_id: impl Into<String>, schema: Schema) -> Self {
        self.writers.insert(schema_id.into(), schema);
        self
    }

    /// Resolve every value to `schema` (fields added with defaults, removed
    /// ones dropped), whichever writer schema it came with.
    pub fn with_reader(mut self, schema: Schema) -> Self {
        self.reader = Some(schema);
        self
    }

    /// The schema the value was written with, and the value as Avro.
    /// `framing`: [`Framing::of`] the record's schema metadata.
    pub fn decode(
        &self,
        value: &[u8],
        framing: Framing<'_>,
    ) -> Result<(SchemaRef, Value), SchemaError> {
        let framed = unframe(value, DataFormat::Avro, framing)?;
        let schema_id = framed.schema.schema_id();
        let writer = self
            .writers
            .get(&schema_id)
            .ok_or_else(|| SchemaError::UnknownSchema(schema_id.clone()))?;
        let mut datum = framed.payload.as_ref();
        let decoded = GenericDatumReader::builder(writer)
            .maybe_reader_schema(self.reader.as_ref())
            .build()
            .and_then(|reader| reader.read_value(&mut datum))
            .map_err(|_| undecodable(&schema_id, "not a datum of that schema"))?;
        // A datum shorter than the value: the writer used another schema.
        if !datum.is_empty() {
            return Err(undecodable(&schema_id, "bytes left after the datum"));
        }
        Ok((framed.schema, decoded))
    }

    /// The value deserialized into `T` (a `serde` type matching the schema).
    pub fn decode_into<T: DeserializeOwned>(
        &self,
        value: &[u8],
        framing: Framing<'_>,
    ) -> Result<T, SchemaError> {
        let (schema, decoded) = self.decode(value, framing)?;
        apache_avro::from_value(&decoded)
            .map_err(|_| undecodable(&schema.schema_id(), "does not fit the handler's type"))
    }
}

// apache-avro's errors may quote the datum; only a fixed reason is kept.
fn undecodable(schema_id: &str, reason: &str) -> SchemaError {
    SchemaError::Undecodable {
        format: "Avro",
        schema_id: schema_id.to_owned(),
        reason: reason.to_owned(),
    }
}
