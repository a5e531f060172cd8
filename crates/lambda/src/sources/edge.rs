//! What one source knows of its events, in one place: each source's file
//! fills an [`Edge`] (its names, the `eventSource` values that name it, how
//! its event holds its records, its partial batch response), and
//! `Source::edge` hands it out: the one dispatch over the sources.

use serde_json::Value;

use super::{Coordinates, Decoded, EventError};

/// An event's records by ordering unit, or why the event cannot be read.
pub(crate) type Units = Result<Vec<Vec<Decoded>>, EventError>;

/// One source's facts, as its own file fills them.
pub(crate) struct Edge {
    /// Its name in `EVENT_SOURCES`, logs and messages.
    pub(crate) name: &'static str,
    /// Its name in prose.
    pub(crate) title: &'static str,
    /// The `eventSource` values that name it.
    pub(crate) event_sources: &'static [&'static str],
    /// Whether Lambda reads a partial batch response for it.
    pub(crate) partial_batch_response: bool,
    /// Its `messaging.system` in OpenTelemetry's conventions.
    pub(crate) messaging_system: &'static str,
    /// How its event names it and holds its records.
    pub(crate) shape: Shape,
}

/// How an event names its source and holds its records.
pub(crate) enum Shape {
    /// Named once, at the event's top (Kafka, Amazon MQ), its records held
    /// its own way.
    Top {
        /// The event's records by ordering unit.
        decode: fn(&Value) -> Units,
        /// The record at some coordinates as the event holds it.
        raw_record: for<'a> fn(&'a Value, &Coordinates) -> Option<&'a Value>,
        /// The top's fields a dead-letter message carries besides
        /// `eventSource` and `eventSourceArn`.
        dead_letter_fields: &'static [&'static str],
    },
    /// A `Records` list, each record naming its source (SQS, Kinesis,
    /// DynamoDB Streams); a record found again by its place in the list.
    Records {
        /// The list's records by ordering unit.
        decode: fn(&[Value]) -> Units,
    },
}

impl Edge {
    /// Whether its events name it once, at their top.
    pub(crate) fn at_top(&self) -> bool {
        matches!(self.shape, Shape::Top { .. })
    }
}
