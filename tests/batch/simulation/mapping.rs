//! Lambda's Kafka event source mapping around the real handler: each
//! partition is a log with a committed offset; a batch takes up to
//! `BatchSize` records from the committed offsets; a partial batch response
//! moves each partition to its lowest reported offset; an invocation error
//! retries the batch (bisected with `BisectBatchOnFunctionError`); after
//! `MaximumRetryAttempts` failed deliveries the records go to the on-failure
//! destination and the offsets move past them.
//!
//! Chaos on top: invocations aborted at a random time or killed at a short
//! deadline (the container is replaced, as after a crash), a second poller
//! delivering the same batch at once, committed ranges delivered again.
//!
//! Every record that lands in the destination is classified by the cause of
//! its last failed delivery (what the function said of it, or how the
//! invocation ended), so that the destination's contents can be explained.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use exactly_once::clock::now_ms;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::engine::PoisonPolicy;
use exactly_once::lambda::{BatchFunction, BatchItemFailure, ItemIdentifier, RecordReport};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;
use tokio::task::JoinSet;

use super::container::Containers;
use super::schedule::Schedule;
use super::slow::SlowLedger;
use crate::support::msk::{Rec, event_of, record_json};
use crate::support::sources::Encoding;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;

/// A record's place: (partition index, offset).
pub type At = (usize, usize);

/// Kinesis sequence numbers: `<shard> * SHARD_SPAN + <offset>`.
const SHARD_SPAN: u64 = 1_000_000_000;

/// A mapping that has not drained after this many batches has not converged.
const MAX_BATCHES: usize = 400;
/// Rewinds of committed offsets per schedule, at most.
const MAX_REWINDS: u32 = 3;

/// What the mapping did and met.
#[derive(Debug, Default, Clone)]
pub struct MappingCounts {
    pub invocations: u64,
    pub aborted: u64,
    pub short_deadlines: u64,
    pub deadline_kills: u64,
    pub invocation_errors: u64,
    pub concurrent_pollers: u64,
    /// Of those, the ones that ran in the poller's own container, beside
    /// its invocation.
    pub shared_container: u64,
    /// Of those, the ones handed the records in another order (an SQS
    /// message back after its visibility ran out, beside its first
    /// delivery): overlapping deliveries that wait on each other's keys.
    pub reordered: u64,
    pub rewinds: u64,
    pub bisections: u64,
    pub dead_lettered: u64,
}

enum Answer {
    /// The function answered; these records were reported.
    Reported(BTreeSet<At>),
    /// An invocation error, a timeout or a crash.
    Failed,
}

/// Why a record's delivery failed, as the destination's contents are
/// explained: the function's outcome for it, or how the invocation ended.
fn cause_of(record: &RecordReport, blocker: Option<&str>) -> String {
    let detail = record.detail.as_deref().unwrap_or_default();
    match record.outcome {
        "failed" | "previously-failed" => "poison".into(),
        "invalid" => "keyless or malformed".into(),
        "rejected" => "reused key".into(),
        "store-error" => "store outage".into(),
        "in-progress" => "live lease".into(),
        "timed-out" => "deadline".into(),
        "lock-lost" => "lock lost".into(),
        "retrying" => "retryable error".into(),
        "not-started" if detail.contains("unavailable") => "store outage".into(),
        "not-started" if detail.contains("deadline") => "deadline".into(),
        "not-started" => format!("behind {}", blocker.unwrap_or("an unknown record")),
        other => other.into(),
    }
}

pub struct Mapping {
    schedule: Arc<Schedule>,
    containers: Containers,
    /// The container of the mapping's poller, and of a second poller.
    poller: Arc<BatchFunction<SlowLedger, DynamoDbStore>>,
    second_poller: Arc<BatchFunction<SlowLedger, DynamoDbStore>>,
    committed: Vec<usize>,
    /// Per partition: the offset at its head and how often it was reported.
    head_failures: Vec<(usize, u32)>,
    /// The on-failure destination.
    pub destination: BTreeSet<At>,
    /// Each destination record's cause, and the last cause of every record
    /// delivered without success.
    pub destination_causes: BTreeMap<At, String>,
    last_cause: HashMap<At, String>,
    pub counts: MappingCounts,
    pub violations: Vec<String>,
    rng: fastrand::Rng,
    /// Second pollers still running.
    background: JoinSet<()>,
}

impl Mapping {
    pub fn new(schedule: Arc<Schedule>, containers: Containers) -> Self {
        let partitions = schedule.partitions.len();
        Self {
            rng: fastrand::Rng::with_seed(schedule.seed.rotate_left(29)),
            poller: containers.start(),
            second_poller: containers.start(),
            containers,
            committed: vec![0; partitions],
            head_failures: vec![(usize::MAX, 0); partitions],
            destination: BTreeSet::new(),
            destination_causes: BTreeMap::new(),
            last_cause: HashMap::new(),
            counts: MappingCounts::default(),
            violations: Vec::new(),
            background: JoinSet::new(),
            schedule,
        }
    }

    /// How often the containers' group sizes changed.
    pub fn resizes(&self) -> u64 {
        self.containers.resizes()
    }

    /// Delivers until every partition is drained (or reports that it did not).
    pub async fn run(&mut self) {
        let mut drained = false;
        for _ in 0..MAX_BATCHES {
            self.maybe_rewind();
            let batch = self.next_batch();
            if batch.is_empty() {
                drained = true;
                break;
            }
            self.deliver(batch).await;
        }
        while self.background.join_next().await.is_some() {}
        if !drained {
            self.violations.push(format!(
                "the partitions did not drain within {MAX_BATCHES} batches (committed {:?})",
                self.committed
            ));
        }
    }

    fn maybe_rewind(&mut self) {
        if self.counts.rewinds >= u64::from(MAX_REWINDS)
            || self.rng.f64() >= self.schedule.chaos.rewind
        {
            return;
        }
        let partition = self.rng.usize(..self.committed.len());
        let committed = self.committed[partition];
        if committed > 0 {
            let back = self.rng.usize(1..=committed.min(self.schedule.batch_size));
            self.committed[partition] = committed - back;
            self.counts.rewinds += 1;
        }
    }

    /// Up to `BatchSize` records from the committed offsets, partitions in
    /// a random order, each partition's records in offset order; on
    /// Kinesis, one shard's (Lambda reads each shard on its own).
    fn next_batch(&mut self) -> Vec<At> {
        let mut order: Vec<usize> = (0..self.committed.len()).collect();
        self.rng.shuffle(&mut order);
        if self.schedule.encoding == Encoding::Kinesis {
            let pending = |&p: &usize| self.committed[p] < self.schedule.partitions[p].len();
            order = order.into_iter().filter(pending).take(1).collect();
        }
        let mut batch = Vec::new();
        for partition in order {
            let log = self.schedule.partitions[partition].len();
            let room = self.schedule.batch_size - batch.len();
            let from = self.committed[partition];
            batch.extend((from..log.min(from + room)).map(|offset| (partition, offset)));
        }
        batch.sort_unstable();
        batch
    }

    /// One batch, with Lambda's retries of invocation errors.
    async fn deliver(&mut self, batch: Vec<At>) {
        let mut queue = VecDeque::from([batch]);
        let mut retries = 0;
        while let Some(batch) = queue.pop_front() {
            match self.invoke(&batch).await {
                Answer::Reported(reported) => {
                    retries = 0;
                    if let Some(failures) = self.commit(&batch, &reported) {
                        // The rest comes again from the committed offsets.
                        self.backoff(failures).await;
                        return;
                    }
                }
                Answer::Failed => {
                    retries += 1;
                    for &at in &batch {
                        // The invocation's end stands for every record of it.
                        self.last_cause
                            .entry(at)
                            .or_insert_with(|| "invocation failed".into());
                    }
                    if retries > self.schedule.max_retries {
                        for &at in &batch {
                            self.dead_letter(at);
                        }
                        retries = 0;
                        continue;
                    }
                    if self.schedule.bisect && batch.len() > 1 {
                        self.counts.bisections += 1;
                        let (first, second) = batch.split_at(batch.len() / 2);
                        queue.push_front(second.to_vec());
                        queue.push_front(first.to_vec());
                    } else {
                        queue.push_front(batch);
                    }
                    self.backoff(retries).await;
                }
            }
        }
    }

    /// Moves the committed offsets after an answer: past every partition
    /// that finished, to the lowest reported offset of the others (whose
    /// records go to the destination after `MaximumRetryAttempts` failed
    /// deliveries). Returns how often the most retried head failed, if any
    /// record was reported.
    fn commit(&mut self, batch: &[At], reported: &BTreeSet<At>) -> Option<u32> {
        let mut most_failures = None;
        for partition in partitions_of(batch) {
            let last = batch.iter().filter(|at| at.0 == partition).map(|at| at.1);
            let last = last.max().expect("the partition is in the batch");
            let lowest = reported.iter().find(|at| at.0 == partition).map(|at| at.1);
            let Some(lowest) = lowest else {
                self.committed[partition] = self.committed[partition].max(last + 1);
                continue;
            };
            self.committed[partition] = lowest;
            let (head, failures) = self.head_failures[partition];
            let failures = if head == lowest { failures + 1 } else { 1 };
            self.head_failures[partition] = (lowest, failures);
            if failures > self.schedule.max_retries {
                // The reported records go; the finished ones are committed.
                let given_up: Vec<At> = reported
                    .iter()
                    .filter(|at| at.0 == partition)
                    .copied()
                    .collect();
                for at in given_up {
                    self.dead_letter(at);
                }
                self.committed[partition] = last + 1;
            }
            most_failures = most_failures.max(Some(failures));
        }
        most_failures
    }

    fn dead_letter(&mut self, (partition, offset): At) {
        let cause = self
            .last_cause
            .get(&(partition, offset))
            .cloned()
            .unwrap_or_else(|| "unknown".into());
        let parked_causes: &[&str] = match (self.schedule.poison, self.schedule.dead_letter_queue) {
            (PoisonPolicy::Report, _) => &[],
            (PoisonPolicy::Park, false) => &["poison", "behind poison"],
            // With a queue, refused records are parked too.
            (PoisonPolicy::Park, true) => &[
                "poison",
                "behind poison",
                "keyless or malformed",
                "behind keyless or malformed",
                "reused key",
                "behind reused key",
            ],
        };
        if parked_causes.contains(&cause.as_str()) {
            self.violations.push(format!(
                "payments-{partition}@{offset} went to the destination ({cause}) although \
                 such records are parked"
            ));
        }
        self.destination_causes.insert((partition, offset), cause);
        self.destination.insert((partition, offset));
        self.counts.dead_lettered += 1;
        self.committed[partition] = self.committed[partition].max(offset + 1);
        self.head_failures[partition] = (usize::MAX, 0);
    }

    /// Lambda's pause before a retry: a fifth of the lock, doubling.
    async fn backoff(&mut self, retries: u32) {
        let lock = self.schedule.lock_timeout;
        let pause = (lock / 5 * 2u32.pow(retries.saturating_sub(1).min(4))).min(lock * 2);
        tokio::time::sleep(pause.mul_f64(0.75 + self.rng.f64() * 0.5)).await;
    }

    /// One invocation of the function with `batch`, under the schedule's chaos.
    async fn invoke(&mut self, batch: &[At]) -> Answer {
        self.counts.invocations += 1;
        let event = self.event(batch);
        let chaos = self.schedule.chaos.clone();
        if self.rng.f64() < chaos.concurrent_poller {
            self.counts.concurrent_pollers += 1;
            let container = match chaos.shared_container {
                true => {
                    self.counts.shared_container += 1;
                    &self.poller
                }
                false => &self.second_poller,
            };
            // Half of them get the records in another order.
            let event = match self.rng.bool() {
                true => event.clone(),
                false => {
                    self.counts.reordered += 1;
                    let mut reordered = batch.to_vec();
                    self.rng.shuffle(&mut reordered);
                    self.event(&reordered)
                }
            };
            let function = Arc::clone(container);
            self.background.spawn(async move {
                // Its answer goes nowhere: the partition was rebalanced away.
                let _ = function
                    .handle(LambdaEvent::new(event, Context::default()))
                    .await;
            });
        }
        // Every invocation has the function's timeout as its deadline, or a
        // shorter one (chaos); Lambda ends it there.
        let short = (self.rng.f64() < chaos.short_deadline).then(|| self.rng.u64(150..=1200));
        if short.is_some() {
            self.counts.short_deadlines += 1;
        }
        let deadline_in = short.unwrap_or(self.schedule.function_timeout.as_millis() as u64);
        let abort_in =
            (self.rng.f64() < chaos.abort).then(|| self.rng.u64(0..=chaos.abort_within_ms));
        let mut context = Context::default();
        context.deadline = now_ms() + deadline_in;
        let function = Arc::clone(&self.poller);
        let mut task =
            tokio::spawn(async move { function.invoke(LambdaEvent::new(event, context)).await });
        let ms = abort_in.map_or(deadline_in, |abort| abort.min(deadline_in));
        let Ok(joined) = tokio::time::timeout(Duration::from_millis(ms), &mut task).await else {
            task.abort();
            let cause = if Some(ms) == abort_in {
                self.counts.aborted += 1;
                "crash"
            } else {
                self.counts.deadline_kills += 1;
                "deadline"
            };
            for &at in batch {
                self.last_cause.insert(at, cause.into());
            }
            // The crashed container is replaced by a cold one; what
            // else it ran ends with it.
            if chaos.shared_container {
                self.background.abort_all();
            }
            self.poller = self.containers.start();
            return Answer::Failed;
        };
        match joined {
            // Amazon MQ: no partial batch response, the batch fails whole
            // while a message is unfinished.
            Ok(Ok(invocation)) if self.schedule.encoding == Encoding::RabbitMq => {
                self.note_causes(&invocation.records, batch);
                match invocation.into_answer() {
                    Ok(_) => Answer::Reported(BTreeSet::new()),
                    Err(_) => {
                        self.counts.invocation_errors += 1;
                        Answer::Failed
                    }
                }
            }
            Ok(Ok(invocation)) => {
                self.note_causes(&invocation.records, batch);
                let mut reported = BTreeSet::new();
                for failure in invocation.response.batch_item_failures {
                    let id = failure.item_identifier;
                    match self.place(&id, batch) {
                        Some(at) => {
                            reported.insert(at);
                        }
                        None => self.violations.push(format!(
                            "the response reports {id:?}, which is not in the batch"
                        )),
                    }
                }
                Answer::Reported(reported)
            }
            Ok(Err(_)) => {
                self.counts.invocation_errors += 1;
                for &at in batch {
                    // The function's only invocation error: DynamoDB down.
                    self.last_cause.insert(at, "store outage".into());
                }
                Answer::Failed
            }
            Err(err) => {
                self.violations
                    .push(format!("the invocation panicked or vanished: {err}"));
                Answer::Failed
            }
        }
    }

    /// Notes why each reported record of an answer was not finished; a
    /// record not started behind another takes that one's cause.
    fn note_causes(&mut self, records: &[RecordReport], batch: &[At]) {
        let mut blockers: HashMap<String, String> = HashMap::new();
        for record in records.iter().filter(|r| r.reported) {
            let Some(at) = self.place(
                &BatchItemFailure::from(record.at.clone()).item_identifier,
                batch,
            ) else {
                continue;
            };
            let blocker = blockers.get(&record.at.partition).map(String::as_str);
            let cause = cause_of(record, blocker);
            if record.outcome != "not-started" {
                blockers.insert(record.at.partition.clone(), cause.clone());
            }
            self.last_cause.insert(at, cause);
        }
    }

    /// The record an answer names, if it is in `batch`.
    fn place(&self, id: &ItemIdentifier, batch: &[At]) -> Option<At> {
        at_of(id).filter(|at| batch.contains(at))
    }

    /// The event of `batch`, as the schedule's source delivers it.
    fn event(&self, batch: &[At]) -> Value {
        match self.schedule.encoding {
            Encoding::Kafka => self.kafka_event(batch),
            Encoding::SqsFifo | Encoding::Kinesis => self.records_event(batch),
            Encoding::RabbitMq => self.rabbitmq_event(batch),
        }
    }

    /// A RabbitMQ event: a queue per partition, the key as the
    /// `idempotency-key` header (an AMQP string), the message id naming
    /// the record as [`at_of`] reads it.
    fn rabbitmq_event(&self, batch: &[At]) -> Value {
        let mut queues = serde_json::Map::new();
        for &(partition, offset) in batch {
            let produced = &self.schedule.partitions[partition][offset];
            let headers = match &produced.key {
                Some(key) => json!({"idempotency-key": {"bytes": key.as_bytes()}}),
                None => json!({}),
            };
            let queue = format!("{}::/", Schedule::partition_name(partition));
            let messages = queues.entry(queue).or_insert_with(|| json!([]));
            if let Some(messages) = messages.as_array_mut() {
                messages.push(json!({
                    "basicProperties": {"headers": headers, "deliveryMode": 2,
                                        "messageId": format!("m-{partition}-{offset}"),
                                        "bodySize": produced.value.len()},
                    "redelivered": false,
                    "data": STANDARD.encode(&produced.value)
                }));
            }
        }
        json!({
            "eventSource": "aws:rmq",
            "eventSourceArn": "arn:aws:mq:us-east-1:123456789012:broker:payments:b-1",
            "rmqMessagesByQueue": queues
        })
    }

    /// An SQS FIFO event (a message group per partition, the key as the
    /// `idempotency-key` message attribute) or a Kinesis one (a shard per
    /// partition, the key as the partition key), records in batch order.
    fn records_event(&self, batch: &[At]) -> Value {
        let records: Vec<Value> = batch
            .iter()
            .map(|&(partition, offset)| {
                let produced = &self.schedule.partitions[partition][offset];
                let body = String::from_utf8_lossy(&produced.value).into_owned();
                let key = produced.key.clone().unwrap_or_default();
                match self.schedule.encoding {
                    Encoding::Kinesis => {
                        let sequence = partition as u64 * SHARD_SPAN + offset as u64;
                        json!({
                            "kinesis": {"kinesisSchemaVersion": "1.0", "partitionKey": key,
                                        "sequenceNumber": sequence.to_string(),
                                        "data": STANDARD.encode(&produced.value),
                                        "approximateArrivalTimestamp": 1764076800.5},
                            "eventSource": "aws:kinesis", "eventVersion": "1.0",
                            "eventID": format!("shardId-{partition:012}:{sequence}"),
                            "eventName": "aws:kinesis:record", "awsRegion": "us-east-1",
                            "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/payments"
                        })
                    }
                    _ => {
                        let attributes = match &produced.key {
                            Some(key) => json!({"idempotency-key": {"stringValue": key, "dataType": "String"}}),
                            None => json!({}),
                        };
                        json!({
                            "messageId": format!("m-{partition}-{offset}"),
                            "receiptHandle": "AQEB", "body": body,
                            "attributes": {"ApproximateReceiveCount": "1",
                                           "MessageGroupId": Schedule::partition_name(partition),
                                           "MessageDeduplicationId": format!("{partition}-{offset}")},
                            "messageAttributes": attributes,
                            "eventSource": "aws:sqs", "awsRegion": "us-east-1",
                            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:payments.fifo"
                        })
                    }
                }
            })
            .collect();
        json!({ "Records": records })
    }

    /// The MSK event of `batch`.
    fn kafka_event(&self, batch: &[At]) -> Value {
        let names: Vec<String> = (0..self.schedule.partitions.len())
            .map(Schedule::partition_name)
            .collect();
        let partitions = partitions_of(batch)
            .into_iter()
            .map(|partition| {
                let records = batch
                    .iter()
                    .filter(|at| at.0 == partition)
                    .map(|&(_, offset)| {
                        let produced = &self.schedule.partitions[partition][offset];
                        let rec = Rec {
                            offset: offset as i64,
                            key: produced.key.clone(),
                            value: produced.value.clone(),
                        };
                        record_json(&names[partition], &rec)
                    })
                    .collect();
                (names[partition].as_str(), records)
            })
            .collect();
        event_of(partitions)
    }
}

/// The record a partial batch response (or a dead letter) names: Kafka's
/// `payments-<partition>` and offset, an SQS message id
/// `m-<partition>-<offset>`, a Kinesis sequence number
/// `<partition> * SHARD_SPAN + <offset>`.
pub fn at_of(id: &ItemIdentifier) -> Option<At> {
    match id {
        ItemIdentifier::Kafka { partition, offset } => {
            let index = partition.strip_prefix("payments-")?.parse().ok()?;
            Some((index, usize::try_from(*offset).ok()?))
        }
        ItemIdentifier::Id(id) => match id.strip_prefix("m-") {
            Some(rest) => {
                let (index, offset) = rest.split_once('-')?;
                Some((index.parse().ok()?, offset.parse().ok()?))
            }
            None => {
                let n: u64 = id.parse().ok()?;
                Some(((n / SHARD_SPAN) as usize, (n % SHARD_SPAN) as usize))
            }
        },
    }
}

/// The partitions `batch` holds records of, ascending.
fn partitions_of(batch: &[At]) -> Vec<usize> {
    let set: BTreeSet<usize> = batch.iter().map(|at| at.0).collect();
    set.into_iter().collect()
}
