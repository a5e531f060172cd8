//! Decoding the events of the `Records` sources, and what every source
//! shares.

use super::*;
use crate::record::KafkaRecord;
use serde_json::json;

fn sqs_message(id: &str, queue: &str, group: Option<&str>, body: &str) -> Value {
    let mut attributes = json!({"ApproximateReceiveCount": "1"});
    if let Some(group) = group {
        attributes["MessageGroupId"] = json!(group);
        attributes["MessageDeduplicationId"] = json!(format!("d-{id}"));
    }
    json!({
        "messageId": id,
        "receiptHandle": "AQEB",
        "body": body,
        "attributes": attributes,
        "messageAttributes": {
            "idempotency-key": {"stringValue": format!("k-{id}"), "dataType": "String"},
            "blob": {"binaryValue": "AAH/", "dataType": "Binary"}
        },
        "eventSource": "aws:sqs",
        "eventSourceARN": format!("arn:aws:sqs:us-east-1:123456789012:{queue}"),
        "awsRegion": "us-east-1"
    })
}

fn units(batch: &Batch) -> Vec<Vec<String>> {
    let unit = |records: &Vec<Decoded>| records.iter().map(|(at, _)| at.to_string()).collect();
    batch.units.iter().map(unit).collect()
}

#[test]
fn a_standard_queue_has_no_order_and_a_fifo_queue_orders_each_group() {
    let standard = json!({"Records": [
        sqs_message("m-1", "payments", None, "a"),
        sqs_message("m-2", "payments", None, "b"),
    ]});
    let batch = decode_event(&standard).expect("an SQS event");
    assert_eq!(batch.source, Some(Source::Sqs));
    assert_eq!(units(&batch), [["payments@m-1"], ["payments@m-2"]]);
    let Ok(Record::Sqs(message)) = &batch.units[0][0].1 else {
        panic!("an SQS message: {:?}", batch.units[0][0]);
    };
    assert_eq!(message.body, b"a");
    assert_eq!(
        message.attribute("blob").map(|a| a.value.clone()),
        Some(vec![0, 1, 255])
    );
    assert_eq!(
        Record::Sqs(message.clone()).attribute("idempotency-key"),
        Some(&b"k-m-1"[..])
    );
    assert!(!message.is_fifo());

    let fifo = json!({"Records": [
        sqs_message("m-1", "payments.fifo", Some("acc-1"), "a"),
        sqs_message("m-2", "payments.fifo", Some("acc-2"), "b"),
        sqs_message("m-3", "payments.fifo", Some("acc-1"), "c"),
        // Unreadable (the body is not text): a unit of its own.
        json!({"messageId": "m-4", "body": 7, "eventSource": "aws:sqs",
               "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:payments.fifo"}),
    ]});
    let batch = decode_event(&fifo).expect("an SQS event");
    assert_eq!(
        units(&batch),
        [
            vec!["payments.fifo/acc-1@m-1", "payments.fifo/acc-1@m-3"],
            vec!["payments.fifo/acc-2@m-2"],
            vec!["payments.fifo@m-4"],
        ]
    );
    let Ok(Record::Sqs(message)) = &batch.units[0][1].1 else {
        panic!("a message");
    };
    assert_eq!(
        (
            message.message_group_id(),
            message.deduplication_id(),
            message.is_fifo()
        ),
        (Some("acc-1"), Some("d-m-3"), true)
    );
    assert_eq!(
        batch.units[2][0].1,
        Err("malformed SQS message: field `body` is not a string".into())
    );
    // The response names each message by its id.
    assert_eq!(batch.units[2][0].0.id.as_deref(), Some("m-4"));
}

#[test]
fn kinesis_records_run_per_shard_with_their_data_decoded() {
    let record = |shard: &str, seq: &str, key: &str, data: &str| {
        json!({
            "kinesis": {"kinesisSchemaVersion": "1.0", "partitionKey": key,
                        "sequenceNumber": seq, "data": data,
                        "approximateArrivalTimestamp": 1545084650.987},
            "eventSource": "aws:kinesis", "eventID": format!("{shard}:{seq}"),
            "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/payments",
            "awsRegion": "us-east-1"
        })
    };
    let event = json!({"Records": [
        record("shardId-000000000000", "101", "acc-1", "eyJhIjoxfQ=="),
        record("shardId-000000000001", "201", "acc-2", "e30="),
        record("shardId-000000000000", "102", "acc-1", "not base64!"),
    ]});
    let batch = decode_event(&event).expect("a Kinesis event");
    assert_eq!(batch.source, Some(Source::Kinesis));
    assert_eq!(
        units(&batch),
        [
            vec![
                "payments/shardId-000000000000@101",
                "payments/shardId-000000000000@102"
            ],
            vec!["payments/shardId-000000000001@201"],
        ]
    );
    let Ok(record) = &batch.units[0][0].1 else {
        panic!("a record");
    };
    assert_eq!(record.body().as_ref(), br#"{"a":1}"#);
    assert_eq!(record.key().as_deref(), Some(&b"acc-1"[..]));
    let Record::Kinesis(kinesis) = record else {
        panic!("a Kinesis record");
    };
    assert_eq!(
        (
            kinesis.stream_name(),
            kinesis.shard_id.as_str(),
            kinesis.approximate_arrival_timestamp
        ),
        ("payments", "shardId-000000000000", Some(1545084650.987))
    );
    assert_eq!(batch.units[0][1].1, Err("data is not valid base64".into()));
    // A record without a sequence number cannot be reported.
    let mut unnamed = event.clone();
    unnamed["Records"][1]["kinesis"]["sequenceNumber"] = Value::Null;
    assert!(matches!(
        decode_event(&unnamed),
        Err(EventError::Malformed(_))
    ));
}

#[test]
fn a_dynamodb_stream_record_carries_its_images_as_plain_json() {
    let event = json!({"Records": [{
        "eventID": "1", "eventName": "INSERT", "eventVersion": "1.1",
        "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
        "dynamodb": {
            "Keys": {"payment_id": {"S": "p-1"}},
            "NewImage": {"payment_id": {"S": "p-1"}, "amount_cents": {"N": "250"}},
            "SequenceNumber": "111", "SizeBytes": 26, "StreamViewType": "NEW_AND_OLD_IMAGES",
            "ApproximateCreationDateTime": 1428537600
        },
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/payments/stream/2015-06-27T00:48:05.899"
    }]});
    let batch = decode_event(&event).expect("a DynamoDB Streams event");
    assert_eq!(batch.source, Some(Source::DynamoDbStreams));
    assert_eq!(
        units(&batch),
        [["payments/stream/2015-06-27T00:48:05.899@111"]]
    );
    let Ok(record) = &batch.units[0][0].1 else {
        panic!("a record");
    };
    let body: Value = serde_json::from_slice(&record.body()).expect("JSON");
    assert_eq!(body, json!({"payment_id": "p-1", "amount_cents": 250}));
    assert_eq!(
        record.key().as_deref(),
        Some(&br#"{"payment_id":"p-1"}"#[..])
    );
    let Record::DynamoDb(change) = record else {
        panic!("a stream record");
    };
    assert_eq!(
        (change.event_name.as_str(), change.table_name()),
        ("INSERT", "payments")
    );
}

#[test]
fn an_event_of_no_known_source_is_refused_and_an_empty_one_has_no_records() {
    let sns = json!({"Records": [{"EventSource": "aws:sns", "Sns": {}}]});
    assert!(matches!(
        decode_event(&sns),
        Err(EventError::UnknownSource(_))
    ));
    assert!(matches!(
        decode_event(&json!({})),
        Err(EventError::UnknownSource(_))
    ));
    let mixed = json!({"Records": [
        sqs_message("m-1", "payments", None, "a"),
        {"eventSource": "aws:kinesis", "kinesis": {}}
    ]});
    assert!(matches!(
        decode_event(&mixed),
        Err(EventError::Malformed(_))
    ));
    let empty = decode_event(&json!({"Records": []})).expect("no records");
    assert_eq!((empty.source, empty.units.len()), (None, 0));
    assert_eq!(
        Source::parse("dynamodb-streams"),
        Ok(Source::DynamoDbStreams)
    );
    assert!(Source::parse("sns").is_err());
}

#[test]
fn a_record_is_found_again_in_its_event_by_its_coordinates() {
    let event = json!({"Records": [
        sqs_message("m-1", "payments", None, "a"),
        sqs_message("m-2", "payments", None, "b"),
    ]});
    let batch = decode_event(&event).expect("an SQS event");
    let at = &batch.units[1][0].0;
    assert_eq!(
        raw_record(&event, at).map(|r| &r["messageId"]),
        Some(&json!("m-2"))
    );
}

#[test]
fn a_handler_takes_the_sources_its_record_type_takes() {
    assert!(Source::ALL.iter().all(|&source| Record::accepts(source)));
    assert!(KafkaRecord::accepts(Source::Kafka) && !KafkaRecord::accepts(Source::Sqs));
    assert!(SqsMessage::accepts(Source::Sqs) && !SqsMessage::accepts(Source::Kinesis));
    assert!(StreamRecord::accepts(Source::DynamoDbStreams));
}

#[test]
fn every_source_is_named_by_its_edge_where_its_events_name_it() {
    for source in Source::ALL {
        let edge = source.edge();
        assert_eq!(Source::parse(edge.name), Ok(source));
        for text in edge.event_sources {
            assert_eq!(Source::named(text, edge.at_top()), Some(source), "{text}");
            assert_eq!(Source::named(text, !edge.at_top()), None, "{text}");
        }
    }
}
