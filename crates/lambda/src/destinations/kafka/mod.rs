//! Kafka topics (Amazon MSK, self-managed Kafka), named
//! `kafka://host:port[,host:port]/topic[?auth=…]` ([`KafkaTopic`]). Each message
//! is one record: its body the value, its group the key, its stable id the
//! header [`ID_ATTRIBUTE`] (where a Kafka consumer on this crate reads its
//! key by default). The key picks the partition as Kafka's own producers
//! pick it (murmur2 of the key), so one group's messages land on one
//! partition in the order sent, beside what other producers wrote for that
//! key. A request's messages go one produce request per partition, every
//! partition at once, `acks=all`: a message is accepted once every in-sync
//! replica has it.
//!
//! The client is `rskafka` (pure Rust; docs/design.md says why): it has no
//! idempotent producer, so a send retried after a lost answer may write a
//! record twice; the header's id is what the consumer drops the copy by.

mod connect;
mod topic;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use aws_types::SdkConfig;
use exactly_once_core::outbox::{Answers, Message, Outgoing, SendError, Sender};
use rskafka::client::Client;
use rskafka::client::error::Error as KafkaError;
use rskafka::client::partition::{Compression, PartitionClient, UnknownTopicHandling};
use rskafka::record::Record;
use tokio::sync::Mutex;

use super::{ID_ATTRIBUTE, every};
pub use connect::msk_iam_token;
use connect::{REQUEST_TIMEOUT, connect};
pub use topic::{Auth, Cluster, KafkaTopic};

/// Messages per `send`: split into one produce request per partition.
const MAX_BATCH: usize = 500;

/// The most bytes of records in one produce request: under the broker's
/// default `message.max.bytes` (1 MB), so a request of 256 KiB outbox
/// messages is never refused whole.
const MAX_REQUEST_BYTES: usize = 900_000;

/// How long a topic's partition count is trusted (Kafka producers'
/// `metadata.max.age.ms`).
const METADATA_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(300);

/// Sends emitted messages to the Kafka topics they name, one connection
/// per cluster, opened on the first message to it.
pub struct KafkaSender {
    aws: SdkConfig,
    clusters: Mutex<HashMap<Cluster, Arc<Connection>>>,
}

impl std::fmt::Debug for KafkaSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSender").finish_non_exhaustive()
    }
}

/// One cluster's client, its partitions' clients and topics' sizes.
struct Connection {
    client: Client,
    partitions: Mutex<HashMap<(String, i32), Arc<PartitionClient>>>,
    counts: Mutex<HashMap<String, (usize, Instant)>>,
}

impl KafkaSender {
    /// Sends with `aws`'s credentials and region where a cluster asks for
    /// them (MSK IAM, a SCRAM secret).
    pub fn new(aws: SdkConfig) -> Self {
        Self {
            aws,
            clusters: Mutex::default(),
        }
    }

    /// The connection to `cluster`, opened if there is none.
    async fn connection(&self, cluster: &Cluster) -> Result<Arc<Connection>, SendError> {
        let mut clusters = self.clusters.lock().await;
        if let Some(connection) = clusters.get(cluster) {
            return Ok(Arc::clone(connection));
        }
        let client = tokio::time::timeout(REQUEST_TIMEOUT, connect(cluster, &self.aws))
            .await
            .map_err(|_| {
                format!(
                    "no answer from {} in {REQUEST_TIMEOUT:?}",
                    cluster.brokers.join(",")
                )
            })
            .and_then(|connected| connected)
            .map_err(|err| SendError::NoAnswer(format!("connecting to Kafka: {err}")))?;
        let connection = Arc::new(Connection {
            client,
            partitions: Mutex::default(),
            counts: Mutex::default(),
        });
        clusters.insert(cluster.clone(), Arc::clone(&connection));
        Ok(connection)
    }

    async fn produce(
        &self,
        destination: &str,
        messages: &[Outgoing],
    ) -> Vec<Result<(), SendError>> {
        let topic = match KafkaTopic::parse(destination) {
            Ok(topic) => topic,
            Err(err) => return every(messages, err),
        };
        let connection = match self.connection(&topic.cluster).await {
            Ok(connection) => connection,
            Err(err) => return every(messages, err),
        };
        let count = match connection.partition_count(&topic.topic).await {
            Ok(count) => count,
            Err(err) => return every(messages, err),
        };
        let mut by_partition: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
        for (index, message) in messages.iter().enumerate() {
            by_partition
                .entry(partition_of(message, count))
                .or_default()
                .push(index);
        }
        let sends = by_partition.into_iter().map(|(partition, indexes)| {
            let connection = &connection;
            let topic = &topic.topic;
            async move {
                let answers = connection
                    .produce_in_order(topic, partition, &indexes, messages)
                    .await;
                indexes.into_iter().zip(answers)
            }
        });
        let mut answers = vec![Ok(()); messages.len()];
        for (index, answer) in futures_util::future::join_all(sends)
            .await
            .into_iter()
            .flatten()
        {
            answers[index] = answer;
        }
        answers
    }
}

impl Connection {
    /// How many partitions `topic` has: from the cluster's metadata, at
    /// most [`METADATA_MAX_AGE`] old.
    async fn partition_count(&self, topic: &str) -> Result<usize, SendError> {
        if let Some((count, read)) = self.counts.lock().await.get(topic)
            && read.elapsed() < METADATA_MAX_AGE
        {
            return Ok(*count);
        }
        let topics = tokio::time::timeout(REQUEST_TIMEOUT, self.client.list_topics())
            .await
            .map_err(|_| SendError::NoAnswer("no metadata from Kafka in time".into()))?
            .map_err(|err| SendError::NoAnswer(format!("reading Kafka's metadata: {err}")))?;
        let count = topics
            .iter()
            .find(|known| known.name == topic)
            .map(|known| known.partitions.len())
            .filter(|count| *count > 0)
            .ok_or_else(|| SendError::Refused {
                code: "UnknownTopicOrPartition".into(),
                message: format!("the cluster has no topic {topic:?}: create it"),
            })?;
        self.counts
            .lock()
            .await
            .insert(topic.to_owned(), (count, Instant::now()));
        Ok(count)
    }

    /// The client of one partition, made on its first use.
    async fn partition(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Arc<PartitionClient>, SendError> {
        let key = (topic.to_owned(), partition);
        if let Some(client) = self.partitions.lock().await.get(&key) {
            return Ok(Arc::clone(client));
        }
        let made = self
            .client
            .partition_client(topic, partition, UnknownTopicHandling::Error);
        let client = Arc::new(
            tokio::time::timeout(REQUEST_TIMEOUT, made)
                .await
                .map_err(|_| SendError::NoAnswer("no partition leader from Kafka in time".into()))?
                .map_err(|err| answer_of(&err))?,
        );
        self.partitions
            .lock()
            .await
            .insert(key, Arc::clone(&client));
        Ok(client)
    }

    /// Produces the messages at `indexes` to one partition, in order, in
    /// requests of at most [`MAX_REQUEST_BYTES`]; once one is not
    /// accepted, the rest are not sent (their order kept for the next
    /// attempt). Each message's answer, in the order of `indexes`.
    async fn produce_in_order(
        &self,
        topic: &str,
        partition: i32,
        indexes: &[usize],
        messages: &[Outgoing],
    ) -> Vec<Result<(), SendError>> {
        let client = match self.partition(topic, partition).await {
            Ok(client) => client,
            Err(err) => return indexes.iter().map(|_| Err(err.clone())).collect(),
        };
        let mut answers = Vec::with_capacity(indexes.len());
        let mut failed: Option<SendError> = None;
        for request in requests(indexes, messages) {
            let answer = match &failed {
                Some(_) => Err(SendError::NoAnswer(
                    "an earlier message of its partition was not accepted".into(),
                )),
                None => {
                    let records = request.iter().map(|&i| record(&messages[i])).collect();
                    let produced = client.produce(records, Compression::NoCompression);
                    match tokio::time::timeout(REQUEST_TIMEOUT, produced).await {
                        Ok(Ok(_offsets)) => Ok(()),
                        Ok(Err(err)) => Err(answer_of(&err)),
                        Err(_) => Err(SendError::NoAnswer(format!(
                            "no answer from Kafka in {REQUEST_TIMEOUT:?}"
                        ))),
                    }
                }
            };
            if let Err(err) = &answer {
                failed.get_or_insert_with(|| err.clone());
            }
            answers.extend(request.iter().map(|_| answer.clone()));
        }
        answers
    }
}

impl Sender for KafkaSender {
    fn check(&self, message: &Message) -> Result<(), SendError> {
        // Any body fits a record (the outbox's 256 KiB < 1 MB).
        KafkaTopic::parse(&message.destination).map(|_| ())
    }

    fn batch_limit(&self, _destination: &str) -> usize {
        MAX_BATCH
    }

    fn send<'a>(&'a self, destination: &'a str, messages: &'a [Outgoing]) -> Answers<'a> {
        Box::pin(self.produce(destination, messages))
    }
}

/// The partition of `message` among `count`: Kafka's default partitioner
/// on its key (the group), so a group's records share a partition with
/// every other producer's records of that key; a message without a group
/// by its id.
pub fn partition_of(message: &Outgoing, count: usize) -> i32 {
    let key = message.group.as_deref().unwrap_or(&message.id);
    let hash = murmur2::murmur2(key.as_bytes(), murmur2::KAFKA_SEED) & 0x7fff_ffff;
    // Below `count`, itself a partition count: fits an i32.
    i32::try_from(hash as usize % count).unwrap_or_default()
}

/// `message` as a record: the group its key, the id its header.
fn record(message: &Outgoing) -> Record {
    Record {
        key: message
            .group
            .as_ref()
            .map(|group| group.as_bytes().to_vec()),
        value: Some(message.body.as_bytes().to_vec()),
        headers: BTreeMap::from([(ID_ATTRIBUTE.to_owned(), message.id.as_bytes().to_vec())]),
        timestamp: now(),
    }
}

/// The record's create time: now, to the millisecond (Kafka's resolution).
fn now() -> rskafka::chrono::DateTime<rskafka::chrono::Utc> {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        });
    rskafka::chrono::DateTime::from_timestamp_millis(millis).unwrap_or_default()
}

/// `indexes` cut into produce requests of at most [`MAX_REQUEST_BYTES`].
fn requests<'i>(indexes: &'i [usize], messages: &[Outgoing]) -> Vec<&'i [usize]> {
    let mut requests = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (at, &index) in indexes.iter().enumerate() {
        let message = &messages[index];
        let size =
            message.body.len() + message.id.len() + message.group.as_ref().map_or(0, String::len);
        if at > start && bytes + size > MAX_REQUEST_BYTES {
            requests.push(&indexes[start..at]);
            (start, bytes) = (at, 0);
        }
        bytes += size;
    }
    if start < indexes.len() {
        requests.push(&indexes[start..]);
    }
    requests
}

/// What the broker's error says of a message: a protocol error is the
/// broker's refusal (its code); anything else left it unanswered.
fn answer_of(err: &KafkaError) -> SendError {
    match err {
        KafkaError::ServerError {
            protocol_error,
            error_message,
            ..
        } => SendError::Refused {
            code: format!("{protocol_error:?}"),
            message: error_message.clone().unwrap_or_default(),
        },
        other => SendError::NoAnswer(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outgoing(id: &str, group: Option<&str>, body: usize) -> Outgoing {
        Outgoing {
            id: id.into(),
            body: "x".repeat(body),
            group: group.map(Into::into),
        }
    }

    #[test]
    fn a_group_lands_where_kafkas_default_partitioner_puts_its_key() {
        // Kafka's own murmur2 test vectors (UtilsTest.testMurmur2), each
        // made positive and taken modulo 1000 as the partitioner does.
        for (key, murmur) in [
            ("21", -973_932_308_i32),
            ("foobar", -790_332_482),
            ("a-little-bit-long-string", -985_981_536),
            (
                "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
        ] {
            let expected = (murmur & 0x7fff_ffff) % 1000;
            let message = outgoing("id", Some(key), 1);
            assert_eq!(partition_of(&message, 1000), expected, "{key}");
        }
        let a = outgoing("a", Some("account-1"), 1);
        let b = outgoing("b", Some("account-1"), 1);
        assert_eq!(partition_of(&a, 12), partition_of(&b, 12));
    }

    #[test]
    fn a_record_is_keyed_by_the_group_and_carries_the_id_in_its_header() {
        let with_group = record(&outgoing("m-1", Some("acc"), 3));
        assert_eq!(with_group.key.as_deref(), Some(&b"acc"[..]));
        assert_eq!(with_group.value.as_deref(), Some(&b"xxx"[..]));
        assert_eq!(
            with_group.headers,
            BTreeMap::from([("idempotency-key".to_owned(), b"m-1".to_vec())])
        );
        assert_eq!(record(&outgoing("m-2", None, 1)).key, None);
    }

    #[test]
    fn a_partitions_messages_are_cut_into_requests_under_the_size_limit_in_order() {
        let messages: Vec<Outgoing> = (0..8)
            .map(|n| outgoing(&n.to_string(), None, 256 * 1024))
            .collect();
        let indexes: Vec<usize> = (0..8).collect();
        let cut = requests(&indexes, &messages);
        assert_eq!(cut, [&[0, 1, 2][..], &[3, 4, 5], &[6, 7]]);
        let small: Vec<Outgoing> = (0..500)
            .map(|n| outgoing(&n.to_string(), None, 100))
            .collect();
        let all: Vec<usize> = (0..500).collect();
        assert_eq!(requests(&all, &small).len(), 1);
    }
}
