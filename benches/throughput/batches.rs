//! Generated MSK batches of ledger payments.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use exactly_once::engine::Work;
use exactly_once::lambda::KafkaRecord;
use exactly_once::store::payload_hash;
use serde_json::{Value, json};

/// Distinct Kafka record keys (= ledger accounts) of every generated batch.
const ACCOUNTS: usize = 200;

#[derive(Debug, Clone)]
pub struct Record {
    pub partition: usize,
    /// Kafka record key: the account (what ORDERING_MODE=key orders by).
    pub account: String,
    pub idempotency_key: String,
    pub value: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct Batch {
    pub partitions: usize,
    /// In generation order; each partition's records in offset order.
    pub records: Vec<Record>,
}

impl Batch {
    /// `count` new payments over `partitions` partitions and `ACCOUNTS`
    /// accounts (an account always in the same partition, as Kafka's key
    /// partitioner does), tagged with `tag` so runs never share accounts.
    pub fn new_payments(tag: &str, count: usize, partitions: usize) -> Self {
        let records = (0..count)
            .map(|n| payment(tag, n, n % ACCOUNTS, partitions))
            .collect();
        Self {
            partitions,
            records,
        }
    }

    /// `count` new payments over `partitions` partitions, all to ONE
    /// account (a merchant's: the hot item), each from one of `ACCOUNTS`
    /// customers (the Kafka key; a customer always in the same partition).
    /// Every `overdraw`-th payment (if any) is a debit that no balance
    /// covers: the ledger's floor refuses it.
    pub fn hot_payments(
        tag: &str,
        count: usize,
        partitions: usize,
        overdraw: Option<usize>,
    ) -> Self {
        let merchant = format!("merchant-{tag}");
        let records = (0..count)
            .map(|n| {
                let mut record = payment(tag, n, n % ACCOUNTS, partitions);
                let mut value: Value = serde_json::from_slice(&record.value).expect("json");
                value["account_id"] = json!(merchant);
                if overdraw.is_some_and(|every| n % every == every - 1) {
                    value["amount_cents"] = json!(-1_000_000_000_i64);
                }
                record.value = serde_json::to_vec(&value).expect("json");
                record
            })
            .collect();
        Self {
            partitions,
            records,
        }
    }

    /// `count` records of which `duplicates` are copies (same key, same
    /// payload, same partition) of earlier records, placed 1 to 50 records
    /// after their original.
    pub fn with_duplicates(tag: &str, count: usize, duplicates: usize, partitions: usize) -> Self {
        let mut rng = fastrand::Rng::with_seed(7);
        let unique = count - duplicates;
        let mut records: Vec<Record> = (0..unique)
            .map(|n| payment(tag, n, n % ACCOUNTS, partitions))
            .collect();
        let mut originals: Vec<usize> = (0..unique).collect();
        rng.shuffle(&mut originals);
        let mut copies: Vec<(usize, Record)> = originals[..duplicates]
            .iter()
            .map(|&n| (n + rng.usize(1..=50), records[n].clone()))
            .collect();
        // Insert from the back so that earlier positions stay valid.
        copies.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        for (at, copy) in copies {
            records.insert(at.min(records.len()), copy);
        }
        Self {
            partitions,
            records,
        }
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Per partition, in offset order, with the offsets.
    fn by_partition(&self) -> Vec<Vec<(i64, &Record)>> {
        let mut lists: Vec<Vec<(i64, &Record)>> = vec![Vec::new(); self.partitions];
        for record in &self.records {
            let list = &mut lists[record.partition];
            let offset = 1000 + list.len() as i64;
            list.push((offset, record));
        }
        lists
    }

    /// The MSK event Lambda would send (see events/generate.py).
    pub fn event(&self) -> Value {
        let mut records = serde_json::Map::new();
        for (partition, list) in self.by_partition().into_iter().enumerate() {
            if list.is_empty() {
                continue;
            }
            let list: Vec<Value> = list
                .into_iter()
                .map(|(offset, record)| {
                    let header: Vec<i8> = record.idempotency_key.bytes().map(|b| b as i8).collect();
                    json!({
                        "topic": "payments",
                        "partition": partition,
                        "offset": offset,
                        "timestamp": 1_735_689_600_000_i64 + offset,
                        "timestampType": "CREATE_TIME",
                        "key": BASE64.encode(&record.account),
                        "value": BASE64.encode(&record.value),
                        "headers": [{ "idempotency-key": header }],
                    })
                })
                .collect();
            records.insert(format!("payments-{partition}"), Value::Array(list));
        }
        json!({
            "eventSource": "aws:kafka",
            "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/bench/abc-1",
            "bootstrapServers": "b-1.bench.kafka.us-east-1.amazonaws.com:9092",
            "records": records,
        })
    }

    /// The baseline's input: the records flattened partition by partition,
    /// in offset order.
    pub fn works(&self) -> Vec<Work<exactly_once::lambda::Record>> {
        self.by_partition()
            .into_iter()
            .enumerate()
            .flat_map(|(partition, list)| {
                list.into_iter().map(move |(offset, record)| Work {
                    key: record.idempotency_key.clone(),
                    payload_hash: payload_hash(&record.value),
                    origin: format!("payments-{partition}@{offset}"),
                    record: exactly_once::lambda::Record::Kafka(KafkaRecord {
                        topic: "payments".into(),
                        partition: partition as i64,
                        offset,
                        timestamp_ms: 0,
                        timestamp_type: None,
                        key: None,
                        value: record.value.clone(),
                        headers: Vec::new(),
                        key_schema: None,
                        value_schema: None,
                    }),
                    span: tracing::Span::none(),
                    holder: None,
                })
            })
            .collect()
    }
}

fn payment(tag: &str, n: usize, account: usize, partitions: usize) -> Record {
    let account_id = format!("acc-{tag}-{account:03}");
    let payment_id = format!("pay-{tag}-{n:05}");
    let value = json!({
        "payment_id": payment_id,
        "account_id": account_id,
        "amount_cents": 100 + (n % 900) as i64,
        "currency": "EUR",
    });
    Record {
        partition: account % partitions,
        account: account_id,
        idempotency_key: payment_id,
        value: serde_json::to_vec(&value).expect("json"),
    }
}
