//! The shipped function driven by `infra/poller.py`, the local stand-in
//! for Lambda's event source mappings, on real local servers: a queue, a
//! stream or a broker of the run's own, the poller's summary and
//! transcript, and a store on the run's key prefix to hold keys and read
//! items (tests/processes/sources.rs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use exactly_once::config::StoreConfig;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::store::{ClaimOutcome, ClaimRequest, Lease, Status, Store as _};
use serde_json::Value;

/// The seconds before a reported record comes again.
pub const REDELIVERY_DELAY: &str = "1";

/// One test's run: its key prefix, its work directory, the binary.
pub struct Run {
    pub source: &'static str,
    pub name: String,
    pub prefix: String,
    pub dir: PathBuf,
    pub env: Vec<String>,
    /// A Kafka broker of the test's own (`KAFKA_BOOTSTRAP_SERVERS` for the
    /// poller), instead of the run's.
    pub kafka_servers: Option<String>,
}

impl Run {
    /// A queue, stream or table of its own (`create` with `extra`), and a
    /// key prefix of its own; the function's settings in `env`.
    pub fn new(source: &'static str, extra: &[&str], env: &[&str]) -> Self {
        Self::build(source, None, extra, env)
    }

    /// [`Self::new`], a Kafka topic on the broker at `servers` (a test's
    /// own: [`super::kafka::DurableBroker`]).
    pub fn on_broker(source: &'static str, servers: &str, extra: &[&str], env: &[&str]) -> Self {
        Self::build(source, Some(servers.to_owned()), extra, env)
    }

    fn build(
        source: &'static str,
        kafka_servers: Option<String>,
        extra: &[&str],
        env: &[&str],
    ) -> Self {
        super::env("AWS_ENDPOINT_URL_DYNAMODB");
        match source {
            "rabbitmq" => super::env("RABBITMQ_URL"),
            "activemq" => super::env("ACTIVEMQ_STOMP_URL"),
            "kinesis" => super::env("AWS_ENDPOINT_URL_KINESIS"),
            "msk" | "self-managed-kafka" if kafka_servers.is_none() => {
                super::env("KAFKA_BOOTSTRAP_SERVERS")
            }
            // The test's own broker.
            "msk" | "self-managed-kafka" => String::new(),
            _ => super::env("AWS_ENDPOINT_URL_SQS"),
        };
        // Built first: a build must not eat into a lease the test holds.
        super::binary("msk-handler");
        let id = uuid::Uuid::new_v4().simple().to_string();
        let name = match source {
            "sqs-fifo" => format!("payments-{id}.fifo"),
            _ => format!("payments-{id}"),
        };
        let dir = std::env::temp_dir().join(format!("sources-{id}"));
        std::fs::create_dir_all(&dir).expect("a work directory");
        let prefix = format!("src-{id}#");
        let mut all = vec![format!("IDEMPOTENCY_KEY_PREFIX={prefix}")];
        all.extend(env.iter().map(|e| (*e).to_owned()));
        let run = Self {
            source,
            name,
            prefix,
            dir,
            env: all,
            kafka_servers,
        };
        let mut args = vec!["create", source, &run.name];
        args.extend(extra);
        run.poller(&args);
        run
    }

    /// `infra/poller.py ARGS`: its stdout as JSON (the last line).
    pub fn poller(&self, args: &[&str]) -> Value {
        self.poller_exiting(args, &[0])
    }

    /// [`Self::poller`], exiting with one of `codes` (`poll` exits 1,
    /// its summary printed, when it could not drain in time).
    pub fn poller_exiting(&self, args: &[&str], codes: &[i32]) -> Value {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("infra/poller.py");
        let mut command = Command::new("python3");
        command.arg(&script).args(args);
        if let Some(servers) = &self.kafka_servers {
            command.env("KAFKA_BOOTSTRAP_SERVERS", servers);
        }
        let out = command
            .output()
            .expect("run python3 infra/poller.py (python3 with boto3 on PATH: $EXACTLY_ONCE_TOOLS/venv/bin)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("poller {}: {}\n{stderr}", args.join(" "), out.status);
        assert!(
            out.status.code().is_some_and(|code| codes.contains(&code)),
            "infra/poller.py {}: {}\n{stdout}\n{stderr}\nfunction log: {}",
            args.join(" "),
            out.status,
            self.dir.join("function.log").display()
        );
        let last = stdout.lines().last().unwrap_or("null");
        serde_json::from_str(last).unwrap_or_else(|_| panic!("not JSON: {last}"))
    }

    /// Produces `messages` (infra/poller.py's format): what the source
    /// answered per message.
    pub fn produce(&self, messages: &Value) -> Vec<Value> {
        let file = self
            .dir
            .join(format!("produce-{}.json", uuid::Uuid::new_v4()));
        std::fs::write(&file, messages.to_string()).expect("write the messages");
        let produced = self.poller(&[
            "produce",
            self.source,
            &self.name,
            "--messages",
            file.to_str().expect("UTF-8 path"),
        ]);
        produced.as_array().expect("a list").clone()
    }

    /// Every record of this run's Kafka topic, from its start
    /// (`infra/poller.py read`): `{partition, offset, key, value, headers:
    /// [[name, value]]}`, keys, values and header values as text.
    pub fn read(&self) -> Vec<Value> {
        let read = self.poller(&["read", self.source, &self.name]);
        read["records"].as_array().expect("the records").clone()
    }

    /// Polls as the mapping does (`--max-batches` when `max_batches`, else
    /// until drained): the poller's summary and the batches delivered.
    pub fn poll(&self, max_batches: Option<usize>) -> (Value, Vec<Batch>) {
        self.poll_within(max_batches, 60)
    }

    /// [`Self::poll`], giving up after `timeout` seconds (the summary says
    /// whether it drained).
    pub fn poll_within(&self, max_batches: Option<usize>, timeout: u64) -> (Value, Vec<Batch>) {
        self.poll_args(max_batches, timeout, &[])
    }

    /// [`Self::poll`] with more of the poller's arguments (`--events FILE`).
    pub fn poll_with(&self, max_batches: Option<usize>, extra: &[&str]) -> (Value, Vec<Batch>) {
        self.poll_args(max_batches, 60, extra)
    }

    fn poll_args(
        &self,
        max_batches: Option<usize>,
        timeout: u64,
        extra: &[&str],
    ) -> (Value, Vec<Batch>) {
        let timeout = timeout.to_string();
        let transcript = self
            .dir
            .join(format!("transcript-{}.jsonl", uuid::Uuid::new_v4()));
        let checkpoint = self.dir.join("checkpoint.json");
        let log = self.dir.join("function.log");
        let binary = super::binary("msk-handler");
        let max = max_batches.map(|n| n.to_string());
        let mut args: Vec<&str> = vec![
            "poll",
            self.source,
            &self.name,
            "--bootstrap",
            binary.to_str().expect("UTF-8 path"),
            "--batch-size",
            "100",
            "--redelivery-delay",
            REDELIVERY_DELAY,
            "--timeout",
            &timeout,
            "--checkpoint",
            checkpoint.to_str().expect("UTF-8 path"),
            "--transcript",
            transcript.to_str().expect("UTF-8 path"),
            "--function-log",
            log.to_str().expect("UTF-8 path"),
        ];
        if self.source.starts_with("sqs") {
            // One ReceiveMessage returns at most 10 messages.
            args[6] = "10";
        }
        if let Some(max) = &max {
            args.extend(["--max-batches", max]);
        }
        for e in &self.env {
            args.extend(["--env", e]);
        }
        args.extend(extra);
        let summary = self.poller_exiting(&args, &[0, 1]);
        let batches = std::fs::read_to_string(&transcript)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a transcript line"))
            .map(Batch)
            .collect();
        (summary, batches)
    }

    /// A store on the function's keys (its prefix), for holding a key and
    /// reading items.
    pub async fn store(&self) -> DynamoDbStore {
        let config = StoreConfig {
            key_prefix: self.prefix.clone(),
            // Far beyond the invocation's deadline (the stand-in gives 60 s):
            // the function reports the key in progress instead of waiting
            // the lease out.
            lock_timeout: Duration::from_secs(600),
            ..StoreConfig::new(super::env("IDEMPOTENCY_TABLE"))
        };
        DynamoDbStore::new(super::client().await, config)
    }

    /// Another worker holds `key` under a live lease (10 min) for the payload
    /// whose fingerprint is `hash`: the function finds it in progress.
    pub async fn hold(&self, key: &str, hash: &str) -> Lease {
        let claimed = self
            .store()
            .await
            .claim(ClaimRequest {
                key,
                payload_hash: hash,
                origin: None,
                lease_cap_ms: None,
                owner: None,
            })
            .await
            .expect("claim");
        match claimed {
            ClaimOutcome::Acquired(lease) => lease,
            other => panic!("hold {key}: {other:?}"),
        }
    }

    /// The worker gives its key up (a retryable failure): the next delivery
    /// takes it over at once.
    pub async fn release(&self, lease: &Lease) {
        self.store().await.release(lease).await.expect("release");
    }

    /// The status of `key`'s item.
    pub async fn status(&self, key: &str) -> Option<Status> {
        let item = self.store().await.get(key).await.expect("get");
        item.map(|item| item.status)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        // Kept after a failure: the function's log and the transcripts.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// One batch the poller delivered (a line of its transcript).
pub struct Batch(pub Value);

impl Batch {
    /// The identifiers of its records (message ids, sequence numbers).
    pub fn ids(&self) -> Vec<String> {
        self.0["records"]
            .as_array()
            .expect("records")
            .iter()
            .map(|r| r["id"].as_str().expect("an id").to_owned())
            .collect()
    }

    /// Its records' payloads (SQS body, Kinesis data; DynamoDB's keys).
    pub fn payloads(&self) -> Vec<String> {
        self.0["records"]
            .as_array()
            .expect("records")
            .iter()
            .map(|r| r["payload"].as_str().expect("a payload").to_owned())
            .collect()
    }

    pub fn reported(&self) -> Vec<String> {
        self.0["reported"]
            .as_array()
            .expect("reported")
            .iter()
            .map(|r| r.as_str().expect("an id").to_owned())
            .collect()
    }

    pub fn unit(&self) -> &str {
        self.0["unit"].as_str().expect("a unit")
    }

    pub fn receive_counts(&self) -> Vec<u64> {
        self.0["records"]
            .as_array()
            .expect("records")
            .iter()
            .map(|r| r["receive_count"].as_u64().expect("a receive count"))
            .collect()
    }
}
