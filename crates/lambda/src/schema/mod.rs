//! Reading values a schema registry framed (`EventRecordFormat: SOURCE`):
//! the registry header ([`wire`]), then the datum with a schema the function
//! ships: Avro (the module `avro`, feature `avro`) or Protobuf (the module
//! `protobuf`, feature `protobuf`), both off by default (`exactly-once`'s
//! features of the same names, or `full`).
//!
//! With `EventRecordFormat: JSON` Lambda has already decoded the value to
//! JSON text and none of this is needed: keys (`json:/pointer`), fingerprints
//! and handlers read it like any JSON value.

#[cfg(feature = "avro")]
pub mod avro;
#[cfg(feature = "protobuf")]
pub mod protobuf;
pub mod wire;

pub use wire::{DataFormat, Framed, Framing, SchemaRef, WireError, unframe};

use exactly_once_core::engine::HandlerError;

/// Why a framed value could not be read. Messages name the schema and the
/// kind of failure, never the value's bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// No registry header: permanent.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The header names a schema this function does not ship: retryable,
    /// since deploying the function with that schema reads the record (it
    /// stays in its partition until then, or until the retries run out).
    #[error("the value was written with schema {0}, which this function does not ship")]
    UnknownSchema(String),
    /// The datum does not decode with the schema it names: permanent.
    #[error("the value does not decode as {format} with schema {schema_id}: {reason}")]
    Undecodable {
        /// `Avro` or `Protobuf`.
        format: &'static str,
        /// The schema the header names.
        schema_id: String,
        /// What was wrong, without the value's bytes.
        reason: String,
    },
}

impl SchemaError {
    /// Whether the same bytes fail the same way on every delivery.
    pub fn is_permanent(&self) -> bool {
        !matches!(self, Self::UnknownSchema(_))
    }
}

/// A permanent error fails the record (FAILED, parked); an unknown schema is
/// retried.
impl From<SchemaError> for HandlerError {
    fn from(err: SchemaError) -> Self {
        if err.is_permanent() {
            Self::Permanent(err.to_string())
        } else {
            Self::Retryable(err.to_string())
        }
    }
}
