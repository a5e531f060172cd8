//! Schema-registry records end to end: the sample events of every kind
//! (`events/schema-*.json`) through `examples/schema_registry.rs`'s handler
//! and the demo ledger, on DynamoDB Local; the registry headers read or
//! refused byte by byte.

use crate::support;

#[path = "../../examples/schema_registry.rs"]
#[allow(dead_code)]
mod example;

use std::io::Write as _;

use exactly_once::lambda::keys::{KeySpec, MissingKeyPolicy};
use exactly_once::schema::protobuf::{self, MessageIndex};
use exactly_once::schema::{DataFormat, Framing, SchemaError, SchemaRef, WireError, unframe};
use exactly_once::store::Status;
use exactly_once::store::Store as _;
use example::{ProtoPayment, RecordFormat, SchemaPayments};
use prost::Message as _;
use serde_json::Value;
use support::msk::{balance, function_with, header_keys, invoke, ledger_function, reported};

fn sample(name: &str) -> Value {
    let path = format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("read {path}"));
    serde_json::from_str(&text).expect("a JSON event")
}

async fn example_function(
    format: RecordFormat,
) -> exactly_once::lambda::BatchFunction<SchemaPayments, exactly_once::dynamodb::DynamoDbStore> {
    let handler = SchemaPayments::new(format, support::env("LEDGER_TABLE")).expect("the schema");
    let store = support::store(std::time::Duration::from_secs(30)).await;
    function_with(store, handler, header_keys())
}

/// Sends `event` twice to a fresh function; the account's balance must grow
/// by `credited` once, and the replay must be all duplicates.
async fn applies_once(function_format: RecordFormat, event: &str, account: &str, credited: i64) {
    let function = example_function(function_format).await;
    let event = sample(event);
    let before = balance(account).await;
    let response = invoke(&function, &event).await;
    assert_eq!(reported(&response), Vec::<String>::new());
    assert_eq!(balance(account).await - before, credited);
    let replay = invoke(&function, &event).await;
    assert_eq!(reported(&replay), Vec::<String>::new());
    assert_eq!(balance(account).await - before, credited, "applied once");
}

#[tokio::test]
async fn avro_validated_by_the_mapping_confluent_and_glue_is_applied_once() {
    applies_once(
        RecordFormat::Source,
        "schema-source-avro.json",
        "acc-13",
        6000,
    )
    .await;
}

#[tokio::test]
async fn protobuf_validated_by_the_mapping_confluent_and_glue_is_applied_once() {
    applies_once(
        RecordFormat::Source,
        "schema-source-protobuf.json",
        "acc-14",
        900,
    )
    .await;
}

#[tokio::test]
async fn avro_as_the_serializers_wrote_it_header_and_zlib_included_is_applied_once() {
    applies_once(
        RecordFormat::Source,
        "schema-framed-avro.json",
        "acc-15",
        1500,
    )
    .await;
}

/// `EventRecordFormat: JSON`: the registry's records arrive as JSON text
/// with their metadata; the demo ledger, keyed by a JSON pointer, applies
/// them like any payment, and the handler sees the metadata.
#[tokio::test]
async fn json_delivered_records_work_with_json_pointer_keys_and_the_ledger() {
    let event = sample("schema-json.json");
    let keys = KeySpec::parse("json:/payment_id", String::new(), MissingKeyPolicy::Reject)
        .expect("a key spec");
    let function = ledger_function(keys).await;
    let before = balance("acc-12").await;
    assert_eq!(
        reported(&invoke(&function, &event).await),
        Vec::<String>::new()
    );
    assert_eq!(
        reported(&invoke(&function, &event).await),
        Vec::<String>::new()
    );
    assert_eq!(balance("acc-12").await - before, 2925, "applied once");
    // Keyed by payment_id, not by the header.
    let stored = function.engine().store().get("p-sr-3").await.expect("get");
    assert_eq!(stored.map(|item| item.status), Some(Status::Completed));

    let metadata: Vec<(String, Option<String>, Option<String>)> = support::msk::decoded(&event)
        .into_iter()
        .map(|(at, record)| {
            let schema = record.value_schema.expect("metadata");
            (at.to_string(), schema.data_format, schema.schema_id)
        })
        .collect();
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        metadata,
        vec![
            ("payments-0@60".into(), some("AVRO"), some("42")),
            ("payments-0@61".into(), some("AVRO"), some("42")),
            (
                "payments-1@70".into(),
                some("PROTOBUF"),
                some("0f1e2d3c-4b5a-4697-8877-665544332211")
            ),
        ]
    );
    // The example's handler reads the same JSON when told the mapping's format.
    let example = SchemaPayments::new(RecordFormat::Json, "ledger").expect("the schema");
    let (_, first) = support::msk::decoded(&event).remove(0);
    let payment = example.payment(&first).expect("a payment");
    assert_eq!(
        (payment.account_id.as_str(), payment.amount_cents),
        ("acc-12", 2500)
    );
}

/// The sample event with its first record only (the other tests' accounts
/// stay untouched), edited by `f`.
fn first_record_edited(name: &str, f: impl FnOnce(&mut serde_json::Map<String, Value>)) -> Value {
    let mut event = sample(name);
    let records = event["records"].as_object_mut().expect("records");
    records.retain(|partition, _| partition == "payments-0");
    let list = records["payments-0"].as_array_mut().expect("a list");
    list.truncate(1);
    f(list[0].as_object_mut().expect("an object"));
    event
}

fn base64(bytes: &[u8]) -> Value {
    use base64::Engine as _;
    Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// A schema the function does not ship is retried (reported, not FAILED:
/// deploying the schema reads it); bytes that are not a datum of the schema
/// they name are FAILED, and no error text quotes the value.
#[tokio::test]
async fn an_unknown_schema_is_retried_and_an_undecodable_value_fails_alone() {
    let function = example_function(RecordFormat::Source).await;
    let unknown = first_record_edited("schema-source-avro.json", |record| {
        record["valueSchemaMetadata"]["schemaId"] = "99".into();
    });
    let response = invoke(&function, &unknown).await;
    assert_eq!(reported(&response), ["payments-0@80"]);
    let store = function.engine().store();
    assert_eq!(
        store.get("pay-avro-1").await.expect("get"),
        None,
        "released"
    );

    let truncated = first_record_edited("schema-source-avro.json", |record| {
        record["value"] = base64(b"\x14p-avro-1");
    });
    let response = invoke(&function, &truncated).await;
    assert_eq!(reported(&response), Vec::<String>::new(), "parked");
    let failed = store.get("pay-avro-1").await.expect("get").expect("item");
    assert_eq!(failed.status, Status::Failed);
    let error = failed.error.expect("an error");
    assert_eq!(
        error,
        "the value does not decode as Avro with schema 42: not a datum of that schema"
    );
    assert!(!error.contains("p-avro"), "no payload in the error");
}

fn zigzag_varint(n: i32) -> Vec<u8> {
    let mut raw = ((n << 1) ^ (n >> 31)) as u32;
    let mut out = Vec::new();
    loop {
        let byte = (raw & 0x7f) as u8;
        raw >>= 7;
        if raw == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

fn proto_payment() -> Vec<u8> {
    ProtoPayment {
        payment_id: "p-1".into(),
        account_id: "acc-1".into(),
        amount_cents: -250,
        currency: "EUR".into(),
    }
    .encode_to_vec()
}

/// Confluent's message indexes: the single `0` byte is `[0]`; a longer path
/// is read as zig-zag varints and a value of another message is refused.
#[test]
fn confluent_protobuf_message_indexes_pick_the_message() {
    let mut value = vec![0, 0, 0, 0, 43];
    value.extend(zigzag_varint(2)); // two indexes: [1, 0]
    value.extend(zigzag_varint(1));
    value.extend(zigzag_varint(0));
    value.extend(proto_payment());
    let framed = unframe(&value, DataFormat::Protobuf, Framing::Producer).expect("framed");
    assert_eq!(framed.schema, SchemaRef::Confluent { schema_id: 43 });
    assert_eq!(framed.message_indexes, [1, 0]);
    let refused = protobuf::decode::<ProtoPayment>(&value, Framing::Producer, MessageIndex::ONLY);
    assert_eq!(
        refused.map(|(_, p)| p),
        Err(SchemaError::UnknownSchema("43 (message [1, 0])".into()))
    );
    let nested = MessageIndex {
        confluent: &[1, 0],
        glue: 0,
    };
    let (_, payment) =
        protobuf::decode::<ProtoPayment>(&value, Framing::Producer, nested).expect("the message");
    assert_eq!(payment.amount_cents, -250);

    let mut first = vec![0, 0, 0, 0, 43, 0];
    first.extend(proto_payment());
    let (_, payment) =
        protobuf::decode::<ProtoPayment>(&first, Framing::Producer, MessageIndex::ONLY)
            .expect("the first message");
    assert_eq!(payment.account_id, "acc-1");
}

/// Glue's header: version 3, compression, the schema version UUID; zlib
/// inflated, but never beyond the cap (a zlib bomb is refused).
#[test]
fn glue_headers_are_read_and_zlib_bombs_refused() {
    let id = uuid::Uuid::new_v4();
    let mut value = vec![3, 0];
    value.extend(id.as_bytes());
    value.push(0); // Protobuf: message index 0
    value.extend(proto_payment());
    let (schema, payment) =
        protobuf::decode::<ProtoPayment>(&value, Framing::Producer, MessageIndex::ONLY)
            .expect("decodes");
    assert_eq!(schema.schema_id(), id.hyphenated().to_string());
    assert_eq!(payment.payment_id, "p-1");

    let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..65 {
        zlib.write_all(&chunk).expect("compress");
    }
    let mut bomb = vec![3, 5];
    bomb.extend(id.as_bytes());
    bomb.extend(zlib.finish().expect("compress"));
    assert!(bomb.len() < 200_000, "{} bytes", bomb.len());
    assert_eq!(
        unframe(&bomb, DataFormat::Avro, Framing::Producer).map(|f| f.payload.len()),
        Err(WireError::TooLarge)
    );
}

#[test]
fn values_without_a_registry_header_are_refused_with_the_reason() {
    let producer = |value: &[u8]| unframe(value, DataFormat::Avro, Framing::Producer).err();
    assert_eq!(producer(b""), Some(WireError::Empty));
    assert_eq!(producer(b"{\"a\":1}"), Some(WireError::UnknownMagic(b'{')));
    assert_eq!(
        producer(&[0, 0, 42]),
        Some(WireError::Truncated("Confluent"))
    );
    assert_eq!(
        producer(&[3, 0, 1, 2]),
        Some(WireError::Truncated("AWS Glue"))
    );
    assert_eq!(producer(&[3, 9]), Some(WireError::UnknownCompression(9)));
    let lambda = Framing::Lambda {
        schema_id: "not-an-id",
    };
    assert_eq!(
        unframe(b"x", DataFormat::Avro, lambda).err(),
        Some(WireError::SchemaId)
    );
    // A count of indexes beyond the bytes left is malformed, not allocated.
    let mut huge = vec![0, 0, 0, 0, 1];
    huge.extend(zigzag_varint(i32::MAX));
    assert_eq!(
        unframe(&huge, DataFormat::Protobuf, Framing::Producer).err(),
        Some(WireError::MessageIndexes)
    );
}
