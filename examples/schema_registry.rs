//! A handler for a topic whose producers write payments through a schema
//! registry (Confluent or AWS Glue), in Avro or Protobuf, with the schemas
//! the function ships (`events/schemas/`). Each payment is added to the
//! ledger table on the lock-free path.
//!
//! How the values arrive depends on the mapping (README: Schema registry):
//! - `EVENT_RECORD_FORMAT=SOURCE` (the default here): the bytes, either as
//!   the serializer wrote them (a mapping without `SchemaRegistryConfig`:
//!   registry header included) or validated by the mapping (header removed,
//!   the schema named in `valueSchemaMetadata`). [`Framing::of`] tells which.
//! - `EVENT_RECORD_FORMAT=JSON`: the mapping decoded them to JSON text.
//!
//! Try it: `cargo lambda watch --example schema_registry`, then
//! `cargo lambda invoke --data-file events/schema-source-avro.json`
//! (or `schema-source-protobuf.json`, `schema-framed-avro.json`).

use exactly_once::BoxError;
use exactly_once::prelude::*;
use exactly_once::schema::avro::{AvroDecoder, apache_avro};
use exactly_once::schema::protobuf::{self, MessageIndex};
use exactly_once::schema::{DataFormat, Framing};

/// The Avro schema, as registered: Confluent id 42, Glue version below.
const PAYMENT_AVSC: &str = include_str!("../events/schemas/payment.avsc");
const CONFLUENT_AVRO_ID: &str = "42";
const GLUE_AVRO_ID: &str = "6d3c9bd0-4d5e-4b7a-9a3e-1c2f4e5d6a7b";

/// `events/schemas/payment.proto`'s `Payment`, as `prost` reads it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoPayment {
    #[prost(string, tag = "1")]
    pub payment_id: String,
    #[prost(string, tag = "2")]
    pub account_id: String,
    #[prost(int64, tag = "3")]
    pub amount_cents: i64,
    #[prost(string, tag = "4")]
    pub currency: String,
}

/// A payment, whichever format it came in.
#[derive(Debug, serde::Deserialize)]
pub struct Payment {
    pub account_id: String,
    pub amount_cents: i64,
}

/// What the mapping delivers: its `EventRecordFormat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordFormat {
    Json,
    Source,
}

pub struct SchemaPayments {
    avro: AvroDecoder,
    format: RecordFormat,
    ledger_table: String,
}

impl SchemaPayments {
    pub fn new(format: RecordFormat, ledger_table: impl Into<String>) -> Result<Self, BoxError> {
        let schema = apache_avro::Schema::parse_str(PAYMENT_AVSC)?;
        Ok(Self {
            avro: AvroDecoder::new()
                .with_writer(CONFLUENT_AVRO_ID, schema.clone())
                .with_writer(GLUE_AVRO_ID, schema),
            format,
            ledger_table: ledger_table.into(),
        })
    }

    /// The payment in the record's value. A value that does not decode is
    /// permanent (FAILED, parked); a schema this function does not ship is
    /// retried (deploy it).
    pub fn payment(&self, record: &KafkaRecord) -> Result<Payment, HandlerError> {
        let metadata = record.value_schema.as_ref();
        let format = metadata
            .and_then(|m| m.data_format.as_deref())
            .and_then(DataFormat::parse);
        let framing = Framing::of(metadata);
        match (self.format, format) {
            (RecordFormat::Json, _) | (RecordFormat::Source, Some(DataFormat::Json)) => {
                serde_json::from_slice(&record.value).map_err(|err| {
                    HandlerError::Permanent(format!("not a payment: {}", json_error(&err)))
                })
            }
            (RecordFormat::Source, Some(DataFormat::Protobuf)) => {
                let (_, p) =
                    protobuf::decode::<ProtoPayment>(&record.value, framing, MessageIndex::ONLY)?;
                Ok(Payment {
                    account_id: p.account_id,
                    amount_cents: p.amount_cents,
                })
            }
            // Avro, or no metadata: this topic's producers write Avro.
            (RecordFormat::Source, Some(DataFormat::Avro) | None) => {
                Ok(self.avro.decode_into(&record.value, framing)?)
            }
        }
    }
}

impl<E: Clone + Send + Sync + 'static> RecordHandler<E> for SchemaPayments {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        CommitPath::LockFree // the ledger increment is the whole effect
    }

    async fn handle(
        &self,
        _: &FencingToken,
        record: &KafkaRecord,
    ) -> Result<Completion<E>, HandlerError> {
        let payment = self.payment(record)?;
        let credit = Increment::new(&self.ledger_table, "account_id", &payment.account_id)
            .add("balance_cents", payment.amount_cents)
            .add("payment_count", 1);
        Ok(Completion::done("paid").increment(credit))
    }
}

#[tokio::main]
async fn main() -> Result<(), exactly_once::BoxError> {
    let format = match std::env::var("EVENT_RECORD_FORMAT").as_deref() {
        Ok("JSON") => RecordFormat::Json,
        _ => RecordFormat::Source,
    };
    let ledger_table = required_var("LEDGER_TABLE")?;
    exactly_once::run(SchemaPayments::new(format, ledger_table)?).await?;
    Ok(())
}
