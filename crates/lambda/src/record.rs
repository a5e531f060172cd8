//! One Kafka record as the handler receives it: everything Lambda delivers,
//! decoded (base64 undone, header bytes unsigned).

/// Lambda's `keySchemaMetadata` / `valueSchemaMetadata`: added to each
/// record when the event source mapping validates records against a schema
/// registry (AWS Glue or Confluent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaMetadata {
    /// `AVRO`, `PROTOBUF`, `JSON`, as Lambda spells it.
    pub data_format: Option<String>,
    /// The schema's id in the registry.
    pub schema_id: Option<String>,
}

/// A Kafka record, whole: what [`exactly_once_core::engine::RecordHandler::handle`]
/// gets for MSK and self-managed Kafka events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaRecord {
    /// The topic.
    pub topic: String,
    /// The partition number.
    pub partition: i64,
    /// The offset in the partition.
    pub offset: i64,
    /// Epoch milliseconds, as Kafka stamped the record.
    pub timestamp_ms: i64,
    /// `CREATE_TIME` or `LOG_APPEND_TIME` (absent in some events).
    pub timestamp_type: Option<String>,
    /// The record key's bytes; `None` for a record without a key.
    pub key: Option<Vec<u8>>,
    /// The value's bytes; empty for a null value (a tombstone).
    pub value: Vec<u8>,
    /// Every header in the order Kafka delivered them; a name may repeat.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The schema registry's metadata of the key, if the mapping validated it.
    pub key_schema: Option<SchemaMetadata>,
    /// The schema registry's metadata of the value, if the mapping validated it.
    pub value_schema: Option<SchemaMetadata>,
}

impl KafkaRecord {
    /// The last header of that name (Kafka's `lastHeader`).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.as_slice())
    }

    /// Every value of the headers of that name, in order.
    pub fn headers_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, value)| value.as_slice())
    }
}
