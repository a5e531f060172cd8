//! Property tests (fuzzing) of the event decoder and of key derivation: no
//! DynamoDB needed.
//!
//! - `decode_event` never panics, on arbitrary JSON and on mutations of
//!   valid MSK events (random base64 fields, header arrays of any i64,
//!   random offsets and timestamps, fields of the wrong type, missing ones).
//! - It loses nothing: either the whole event is an `EventError` (exactly
//!   when a model says it must be), or every record of the input comes out
//!   exactly once, in its partition, in offset order, decoded exactly as a
//!   model decodes it (or failed alone when the model says it is unreadable).
//! - `KeySpec::key_for` never panics, never returns a key for a record one
//!   of whose key parts it cannot read, and composite keys of different part
//!   tuples never collide.
//!
//! Budget: 2,000 cases per property unless `PROPTEST_CASES` says otherwise.
//! A longer run: `PROPTEST_CASES=200000 cargo test --release --test batch decode_props::`.
//! A failure prints the minimized input; add it to `tests/corpus/` as a case.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use exactly_once::lambda::KafkaRecord as DecodedRecord;
use exactly_once::lambda::keys::{KeySpec, MissingKeyPolicy, ParsedValue};
use exactly_once::lambda::{Coordinates, EventError, Record, decode_event};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Map, Value, json};

/// 2,000 cases per property, or `PROPTEST_CASES`.
fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000);
    Config {
        cases,
        // Minimized failures go to tests/corpus/ by hand, not to a
        // proptest-regressions folder.
        failure_persistence: None,
        ..Config::default()
    }
}

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

/// Any JSON value (bounded depth and size).
fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "\\PC{0,12}".prop_map(Value::String),
        prop::sample::select(vec![
            "aws:kafka",
            "SelfManagedKafka",
            "offset",
            "YWNj",
            "=",
            "1.5",
            "",
        ])
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((field_name(), inner), 0..6)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}

/// Object keys: the event's own field names often, anything else sometimes.
fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "eventSource",
            "records",
            "payments-0",
            "topic",
            "partition",
            "offset",
            "timestamp",
            "key",
            "value",
            "headers",
            "idempotency-key",
        ])
        .prop_map(String::from),
        "\\PC{0,8}",
    ]
}

/// A field that may be absent (`None`), valid, or anything.
fn field(valid: BoxedStrategy<Value>) -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        30 => valid.prop_map(Some),
        1 => Just(None),
        1 => arbitrary_json().prop_map(Some),
    ]
}

fn integer_like() -> BoxedStrategy<Value> {
    prop_oneof![
        300 => (0..50i64).prop_map(Value::from),
        100 => any::<i64>().prop_map(Value::from),
        1 => Just(json!(i64::MAX)),
        1 => Just(json!(i64::MIN)),
        1 => Just(json!(u64::MAX)),
        1 => Just(json!(9_223_372_036_854_775_808_u64)),
        1 => Just(json!(3.0)),
        1 => Just(json!(2.5)),
        1 => Just(json!("3")),
        1 => Just(Value::Null),
    ]
    .boxed()
}

fn timestamp_like() -> BoxedStrategy<Value> {
    prop_oneof![
        80 => (0..4_000_000_000_000u64).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => (-1e16f64..1e16).prop_map(Value::from),
        1 => Just(json!(1_545_084_650_987.5)),
        1 => Just(json!(1e-300)),
        1 => Just(json!(1e300)),
        1 => prop::sample::select(vec!["1545084650987", "1.5", "-1", "abc", "", "inf", "NaN", "1e3"])
            .prop_map(|s| Value::String(s.into())),
        1 => Just(Value::Null),
    ]
    .boxed()
}

/// A base64 field: valid base64 of random bytes, broken base64, null.
fn base64_like() -> BoxedStrategy<Value> {
    prop_oneof![
        60 => prop::collection::vec(any::<u8>(), 0..40).prop_map(|b| Value::String(STANDARD.encode(b))),
        1 => "[A-Za-z0-9+/=_\\-\\. ]{0,12}".prop_map(Value::String),
        1 => prop::collection::vec(any::<u8>(), 1..20)
            .prop_map(|b| Value::String(STANDARD.encode(b).trim_end_matches('=').to_owned())),
        1 => Just(Value::Null),
        1 => "\\PC{0,6}".prop_map(Value::String),
    ]
    .boxed()
}

fn header_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just("idempotency-key".to_owned()),
        1 => Just("trace".to_owned()),
        1 => "\\PC{0,6}",
    ]
}

/// A header list: one-entry (sometimes several-entry) maps of byte arrays,
/// the bytes any i64 sometimes.
fn headers_like() -> BoxedStrategy<Value> {
    let wild_byte = prop_oneof![
        4 => (-128i64..=127).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => (128i64..=255).prop_map(Value::from),
        1 => Just(json!(1.0)),
    ];
    let bytes = prop_oneof![
        30 => prop::collection::vec((-128i64..=127).prop_map(Value::from), 0..12).prop_map(Value::Array),
        2 => prop::collection::vec(wild_byte, 1..6).prop_map(Value::Array),
        1 => arbitrary_json(),
    ];
    let header = prop::collection::vec((header_name(), bytes), 0..3)
        .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>()));
    prop_oneof![
        20 => prop::collection::vec(header, 0..4).prop_map(Value::Array),
        1 => arbitrary_json(),
    ]
    .boxed()
}

/// A record: each field valid, wrong, or absent; sometimes extra fields,
/// sometimes not an object at all.
fn record_like() -> impl Strategy<Value = Value> {
    let object = (
        field("\\PC{0,10}".prop_map(Value::String).boxed()),
        field(integer_like()),
        field(integer_like()),
        field(timestamp_like()),
        field(base64_like()),
        field(base64_like()),
        field(headers_like()),
        prop::option::weighted(0.2, ("\\PC{1,8}", arbitrary_json())),
    )
        .prop_map(
            |(topic, partition, offset, timestamp, key, value, headers, extra)| {
                let mut record = Map::new();
                for (name, field) in [
                    ("topic", topic),
                    ("partition", partition),
                    ("offset", offset),
                    ("timestamp", timestamp),
                    ("key", key),
                    ("value", value),
                    ("headers", headers),
                ] {
                    if let Some(field) = field {
                        record.insert(name.into(), field);
                    }
                }
                if let Some((name, value)) = extra {
                    record.insert(name, value);
                }
                Value::Object(record)
            },
        );
    prop_oneof![40 => object, 1 => arbitrary_json()]
}

/// An event close to a valid MSK event, with mutations everywhere.
fn event_like() -> impl Strategy<Value = Value> {
    let source = prop_oneof![
        30 => Just(Some(json!("aws:kafka"))),
        10 => Just(Some(json!("SelfManagedKafka"))),
        1 => Just(Some(json!("aws:sqs"))),
        1 => Just(None),
        1 => arbitrary_json().prop_map(Some),
    ];
    let partition_name = prop_oneof![
        prop::sample::select(vec!["payments-0", "payments-1", "t-0", "ключ-7", "", "-"])
            .prop_map(String::from),
        "\\PC{0,10}",
    ];
    let partition = prop_oneof![
        30 => prop::collection::vec(record_like(), 0..8).prop_map(Value::Array),
        1 => arbitrary_json(),
    ];
    let records = prop_oneof![
        30 => prop::collection::vec((partition_name, partition), 0..4)
            .prop_map(|ps| Value::Object(ps.into_iter().collect())),
        1 => Just(None::<Value>).prop_map(|_| Value::Null),
        1 => arbitrary_json(),
    ];
    (
        source,
        prop::option::weighted(0.95, records),
        prop::option::weighted(0.1, arbitrary_json()),
    )
        .prop_map(|(source, records, extra)| {
            let mut event = Map::new();
            if let Some(source) = source {
                event.insert("eventSource".into(), source);
            }
            if let Some(records) = records {
                event.insert("records".into(), records);
            }
            if let Some(extra) = extra {
                event.insert("bootstrapServers".into(), extra);
            }
            Value::Object(event)
        })
}

// ---------------------------------------------------------------------------
// A model of the decoder
// ---------------------------------------------------------------------------

/// What the model says about one record.
#[derive(Debug)]
enum RecordModel {
    /// It decodes to exactly this.
    Valid(Box<DecodedRecord>),
    /// It must fail alone.
    Invalid,
    /// The model does not decide (an exotic timestamp that
    /// the decoder may or may not accept); it must not panic.
    Either,
}

/// The model of a whole event: an error (which kind), or per partition the
/// records in offset order.
type EventModel = Result<BTreeMap<String, Vec<(i64, RecordModel)>>, &'static str>;

fn model_event(event: &Value) -> EventModel {
    match event.get("eventSource").and_then(Value::as_str) {
        Some("aws:kafka" | "SelfManagedKafka") => {}
        _ => return Err("NotKafka"),
    }
    let map = match event.get("records") {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map,
        Some(_) => return Err("Malformed"),
    };
    if map.values().any(|list| !list.is_array()) {
        return Err("Malformed");
    }
    let mut partitions = BTreeMap::new();
    for (name, list) in map {
        let mut records = Vec::new();
        for record in list.as_array().expect("checked above") {
            let Some(offset) = record.get("offset").and_then(Value::as_i64) else {
                return Err("Malformed");
            };
            records.push((offset, model_record(record)));
        }
        // Stable, like the decoder: equal offsets keep their input order.
        records.sort_by_key(|(offset, _)| *offset);
        partitions.insert(name.clone(), records);
    }
    Ok(partitions)
}

fn model_record(record: &Value) -> RecordModel {
    let Some(record) = record.as_object() else {
        return RecordModel::Invalid;
    };
    if record.get("partition").and_then(Value::as_i64).is_none() {
        return RecordModel::Invalid;
    }
    if record
        .get("topic")
        .is_some_and(|t| !t.is_null() && !t.is_string())
    {
        return RecordModel::Invalid;
    }
    if record
        .get("timestampType")
        .is_some_and(|t| !t.is_null() && !t.is_string())
    {
        return RecordModel::Invalid;
    }
    let base64 = |name: &str| -> Result<Option<Vec<u8>>, ()> {
        match record.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => STANDARD.decode(text).map(Some).map_err(|_| ()),
            Some(_) => Err(()),
        }
    };
    let (Ok(key), Ok(value)) = (base64("key"), base64("value")) else {
        return RecordModel::Invalid;
    };
    let Some(headers) = model_headers(record.get("headers")) else {
        return RecordModel::Invalid;
    };
    let decoded = decoded(key, value.unwrap_or_default(), headers);
    match record.get("timestamp") {
        // Whole milliseconds within chrono's range: certainly accepted.
        Some(Value::Number(n)) if n.as_u64().is_some_and(|ms| ms < 8_000_000_000_000_000) => {
            RecordModel::Valid(Box::new(decoded))
        }
        // Strings and other numbers: the crate decides; never a panic.
        Some(Value::Number(_) | Value::String(_)) => RecordModel::Either,
        _ => RecordModel::Invalid,
    }
}

fn model_headers(headers: Option<&Value>) -> Option<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    for header in headers?.as_array()? {
        for (name, bytes) in header.as_object()? {
            let bytes = bytes
                .as_array()?
                .iter()
                .map(|b| {
                    b.as_i64()
                        .and_then(|b| i8::try_from(b).ok())
                        .map(|b| b as u8)
                })
                .collect::<Option<Vec<u8>>>()?;
            out.push((name.clone(), bytes));
        }
    }
    Some(out)
}

/// Headers sorted inside each run of one header map cannot be compared in
/// order (a map's entries come out in any order): compare them sorted, and
/// compare what `header(name)` answers for every name.
fn same_headers(got: &DecodedRecord, want: &DecodedRecord) -> Result<(), TestCaseError> {
    let mut a = got.headers.clone();
    let mut b = want.headers.clone();
    a.sort();
    b.sort();
    prop_assert_eq!(a, b);
    for (name, _) in &want.headers {
        let last = want
            .headers
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice());
        prop_assert_eq!(got.header(name), last, "last header {:?}", name);
    }
    Ok(())
}

/// The decoder against the model: same error kind, or every record exactly
/// once, in place, decoded as the model says.
fn check_decode(event: &Value) -> Result<(), TestCaseError> {
    let got = decode_event(event).map(|batch| batch.units);
    let want = model_event(event);
    match (got, want) {
        (Err(EventError::UnknownSource(_)), Err("NotKafka"))
        | (Err(EventError::Malformed(_)), Err("Malformed")) => Ok(()),
        (Ok(partitions), Ok(model)) => {
            prop_assert_eq!(partitions.len(), model.len(), "partitions");
            for (records, (name, want)) in partitions.iter().zip(&model) {
                let offsets: Vec<i64> = want.iter().map(|(offset, _)| *offset).collect();
                let got_at: Vec<Coordinates> = records.iter().map(|(at, _)| at.clone()).collect();
                let want_at: Vec<Coordinates> = offsets
                    .iter()
                    .map(|&offset| Coordinates::kafka(name.clone(), offset))
                    .collect();
                prop_assert_eq!(got_at, want_at, "records of {:?}", name);
                for ((at, got), (_, want)) in records.iter().zip(want) {
                    match (got, want) {
                        (Ok(Record::Kafka(got)), RecordModel::Valid(want)) => {
                            prop_assert_eq!(&got.key, &want.key, "key of {}", at);
                            prop_assert_eq!(&got.value, &want.value, "value of {}", at);
                            same_headers(got, want)?;
                        }
                        (Err(_), RecordModel::Invalid) | (_, RecordModel::Either) => {}
                        (got, want) => {
                            prop_assert!(false, "{at}: decoded {got:?}, model {want:?}");
                        }
                    }
                }
            }
            Ok(())
        }
        (got, want) => {
            prop_assert!(false, "decoded {got:?}, model {want:?}");
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------
// Key derivation
// ---------------------------------------------------------------------------

fn key_spec() -> impl Strategy<Value = KeySpec> {
    let part = prop::sample::select(vec![
        "header",
        "record-key",
        "json:/payment_id",
        "json:/a/b",
        "json:/n",
    ]);
    let policy = prop::sample::select(vec![
        MissingKeyPolicy::Reject,
        MissingKeyPolicy::RecordCoordinates,
        MissingKeyPolicy::PayloadHash,
    ]);
    (prop::collection::vec(part, 1..4), policy).prop_map(|(parts, policy)| {
        KeySpec::parse(&parts.join(","), "idempotency-key".into(), policy)
            .expect("a valid key source")
    })
}

/// Text that is often not UTF-8, often empty, often full of `|` and `\`.
fn key_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => "[a|\\\\ ]{0,6}".prop_map(String::into_bytes),
        1 => "\\PC{0,6}".prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..6),
        1 => Just(vec![0xff, 0xfe]),
    ]
}

fn payload() -> impl Strategy<Value = Vec<u8>> {
    let field = prop_oneof![
        Just(Value::Null),
        "[a|\\\\ ]{0,6}".prop_map(Value::String),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        any::<bool>().prop_map(Value::Bool),
        Just(json!({"b": "x"})),
        Just(json!([1])),
    ];
    let object = (
        prop::option::of(field.clone()),
        prop::option::of(field.clone()),
        prop::option::of(field),
    )
        .prop_map(|(id, ab, n)| {
            let mut object = Map::new();
            if let Some(id) = id {
                object.insert("payment_id".into(), id);
            }
            if let Some(ab) = ab {
                object.insert("a".into(), json!({ "b": ab }));
            }
            if let Some(n) = n {
                object.insert("n".into(), n);
            }
            Value::Object(object).to_string().into_bytes()
        });
    prop_oneof![
        6 => object,
        1 => Just(Vec::new()),
        1 => Just(b"{not json".to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..10),
        1 => Just(b"[]".to_vec()),
    ]
}

fn decoded_record() -> impl Strategy<Value = DecodedRecord> {
    (
        prop::option::of(key_bytes()),
        payload(),
        prop::collection::vec((header_name(), key_bytes()), 0..3),
    )
        .prop_map(|(key, value, headers)| decoded(key, value, headers))
}

/// A record with these bytes (the coordinates are not modelled).
fn decoded(key: Option<Vec<u8>>, value: Vec<u8>, headers: Vec<(String, Vec<u8>)>) -> DecodedRecord {
    DecodedRecord {
        topic: "payments".into(),
        partition: 0,
        offset: 0,
        timestamp_ms: 0,
        timestamp_type: None,
        key,
        value,
        headers,
        key_schema: None,
        value_schema: None,
    }
}

/// The value parsed as the edge parses it for JSON key parts.
fn json_of(record: &DecodedRecord) -> ParsedValue {
    Some(serde_json::from_slice(&record.value))
}

/// What one part of a key reads, by the README's rules: `Err` if it cannot
/// be read, `Ok(None)` if it is missing or empty.
fn model_part(part: &str, record: &DecodedRecord) -> Result<Option<String>, ()> {
    let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).map_err(|_| ());
    let value = match part {
        "header" => record.header("idempotency-key").map(text).transpose()?,
        "record-key" => record.key.as_deref().map(text).transpose()?,
        pointer => {
            let pointer = pointer.strip_prefix("json:").expect("json part");
            let json: Value = serde_json::from_slice(&record.value).map_err(|_| ())?;
            match json.pointer(pointer) {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                Some(_) => return Err(()),
            }
        }
    };
    Ok(value.filter(|v| !v.is_empty()))
}

fn part_name(part: &exactly_once::lambda::keys::KeyPart) -> String {
    use exactly_once::lambda::keys::KeyPart;
    match part {
        KeyPart::Header => "header".into(),
        KeyPart::RecordKey => "record-key".into(),
        KeyPart::JsonPointer(pointer) => format!("json:{pointer}"),
        KeyPart::DeduplicationId => "deduplication-id".into(),
        KeyPart::MessageId => "message-id".into(),
    }
}

fn check_key(spec: &KeySpec, record: &DecodedRecord) -> Result<(), TestCaseError> {
    let at = Coordinates::kafka("payments-0", 7);
    let hash = exactly_once::store::payload_hash(&record.value);
    let got = spec.key_for(&Record::Kafka(record.clone()), &json_of(record), &at, &hash);
    let parts: Vec<Result<Option<String>, ()>> = spec
        .parts()
        .iter()
        .map(|part| model_part(&part_name(part), record))
        .collect();
    if parts.iter().any(Result::is_err) {
        prop_assert!(
            got.is_err(),
            "a key {got:?} for a record with an unreadable part"
        );
        return Ok(());
    }
    let values: Vec<String> = parts.into_iter().filter_map(|p| p.ok().flatten()).collect();
    if values.len() < spec.parts().len() {
        match spec.missing() {
            MissingKeyPolicy::Reject => prop_assert!(got.is_err(), "{got:?}"),
            MissingKeyPolicy::RecordCoordinates => {
                prop_assert_eq!(got, Ok("record:payments-0@7".to_owned()));
            }
            MissingKeyPolicy::PayloadHash => prop_assert_eq!(got, Ok(format!("sha256:{hash}"))),
        }
        return Ok(());
    }
    let key = got.map_err(|err| TestCaseError::fail(format!("no key: {err}")))?;
    prop_assert!(!key.is_empty());
    if let [single] = values.as_slice() {
        prop_assert_eq!(&key, single);
    } else {
        // The escaping is reversible: the key splits back into its parts.
        prop_assert_eq!(unescape(&key), values);
    }
    Ok(())
}

/// Splits a composite key on unescaped `|` and undoes the escaping.
fn unescape(key: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = key.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => parts
                .last_mut()
                .expect("a part")
                .push(chars.next().expect("an escaped char")),
            '|' => parts.push(String::new()),
            c => parts.last_mut().expect("a part").push(c),
        }
    }
    parts
}

/// A record whose JSON payload holds `parts` as fields p0, p1, ...
fn record_with_fields(parts: &[String]) -> DecodedRecord {
    let object: Map<String, Value> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("p{i}"), Value::String(p.clone())))
        .collect();
    decoded(
        None,
        Value::Object(object).to_string().into_bytes(),
        Vec::new(),
    )
}

// ---------------------------------------------------------------------------
// The properties
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    #[test]
    fn decoding_arbitrary_json_never_panics_and_matches_the_model(event in arbitrary_json()) {
        check_decode(&event)?;
    }

    #[test]
    fn decoding_mutated_events_loses_no_record(event in event_like()) {
        check_decode(&event)?;
    }

    #[test]
    fn key_for_never_panics_nor_keys_an_unreadable_record(
        spec in key_spec(),
        record in decoded_record(),
    ) {
        check_key(&spec, &record)?;
    }

    #[test]
    fn composite_keys_of_different_parts_never_collide(
        (a, b) in (2usize..5).prop_flat_map(|n| {
            let part = "[a|\\\\]{1,4}";
            (prop::collection::vec(part, n), prop::collection::vec(part, n))
        }),
    ) {
        let source: Vec<String> = (0..a.len()).map(|i| format!("json:/p{i}")).collect();
        let spec = KeySpec::parse(&source.join(","), "idempotency-key".into(), MissingKeyPolicy::Reject)
            .expect("valid key source");
        let at = Coordinates::kafka("t-0", 0);
        let key = |parts: &[String]| {
            let record = record_with_fields(parts);
            let hash = exactly_once::store::payload_hash(&record.value);
            spec.key_for(&Record::Kafka(record.clone()), &json_of(&record), &at, &hash)
                .expect("every part present")
        };
        let (ka, kb) = (key(&a), key(&b));
        prop_assert_eq!(a == b, ka == kb, "{:?} -> {:?}, {:?} -> {:?}", a, ka, b, kb);
    }
}

/// The known crash, pinned: a fractional timestamp made `aws_lambda_events`
/// panic (an `assert_eq!` in its millisecond deserializer), failing the whole
/// invocation on every delivery. Now that record alone is invalid.
#[test]
fn a_fractional_timestamp_fails_its_record_alone() {
    for timestamp in [json!(1_545_084_650_987.5), json!("1.5"), json!(1e-300)] {
        let event = json!({
            "eventSource": "aws:kafka",
            "records": {"payments-0": [
                {"topic": "payments", "partition": 0, "offset": 1, "timestamp": timestamp,
                 "key": null, "value": "e30=", "headers": []},
                {"topic": "payments", "partition": 0, "offset": 2, "timestamp": 1,
                 "key": null, "value": "e30=", "headers": []},
            ]},
        });
        let partitions = decode_event(&event).expect("a Kafka event").units;
        assert_eq!(partitions.len(), 1);
        assert!(
            partitions[0][0].1.is_err(),
            "{timestamp}: {:?}",
            partitions[0][0]
        );
        assert!(partitions[0][1].1.is_ok());
    }
}
