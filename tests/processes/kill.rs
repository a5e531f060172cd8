//! Real process kills. A worker process (this test binary, re-run as
//! `worker_process`) applies payments to the ledger and is killed with
//! SIGKILL; later workers pick the stream up where Lambda would redeliver it.
//!
//! `KILL_TEST_KILLS` sets how many kills each mode's storm makes (default
//! 200), `KILL_TEST_SEED` replays a storm's schedule.
//!
//! The storms run on the store `TEST_STORE` names (`dynamodb`, the default,
//! `postgres`, `redis` or `redis-cluster`: `infra/test.sh` runs the ledger
//! storms on each).
//!
//! The charge storm runs a handler on the locking path that calls a real
//! downstream payment API (`support::charges`, loopback HTTP) with the
//! fencing token's idempotency key, and kills its workers or steals their
//! leases (SIGSTOP until another worker takes the key over, then SIGCONT)
//! at random points: every payment must be charged exactly once.

use crate::support;

use aws_sdk_dynamodb::types::TransactWriteItem;
use exactly_once::store::{Operator, Store};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use exactly_once::config::StoreConfig;
use exactly_once::dynamodb::CountRequests as _;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::engine::{
    CommitPath, Completion, Engine, EngineConfig, FencingToken, HandlerError, RecordHandler,
};
use exactly_once::lambda::BatchFunction;
use exactly_once::lambda::Record;
use exactly_once::outbox::{Answers, Outgoing, SendError, Sender};
use exactly_once::postgres::PostgresStore;
use exactly_once::store::Status;
use exactly_once::store::requests::RequestCounter;
use ledger::{LedgerHandler, LedgerMode, Payment};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use support::msk::{
    account, balance, event, header_keys, invoke, payment, reported, stream_balances,
};
use support::sources::Encoding;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

const WORKER_ENV: &str = "EXACTLY_ONCE_KILL_WORKER";

/// What a worker process is told to do.
#[derive(Debug, Serialize, Deserialize)]
struct WorkerConfig {
    key_prefix: String,
    /// The ledger mode, as `LEDGER_MODE` spells it.
    mode: String,
    lock_ms: u64,
    /// A JSON file holding the list of batches (MSK events).
    batches: PathBuf,
    /// The first batch not yet acknowledged.
    first_batch: usize,
    /// Stop forever inside the first handler call, before the effect.
    pause_in_handler: bool,
    /// Charge each payment at this payment API instead of the ledger (the
    /// locking path, the effect outside DynamoDB).
    charge_api: Option<SocketAddr>,
    /// Invocations the worker's one container serves at once: each delivery
    /// of a batch goes to this many of them (Lambda Managed Instances, with
    /// the overlap of a rebalance).
    invocations: usize,
    /// The source whose events the batches are.
    encoding: Encoding,
    /// The SQS queue the ledger announces each applied payment to (its
    /// messages committed with the payment, sent after it).
    announce_to: Option<String>,
}

fn store_config(config: &WorkerConfig) -> StoreConfig {
    StoreConfig {
        key_prefix: config.key_prefix.clone(),
        lock_timeout: Duration::from_millis(config.lock_ms),
        ..StoreConfig::new(support::env("IDEMPOTENCY_TABLE"))
    }
}

fn ledger(client: aws_sdk_dynamodb::Client, mode: &str) -> LedgerHandler {
    let mode = LedgerMode::parse(mode).expect("a ledger mode");
    LedgerHandler::new(client, support::env("LEDGER_TABLE"), mode)
}

/// The store the storms run on (`TEST_STORE`; worker processes inherit it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TestStore {
    DynamoDb,
    Postgres,
    Redis,
    /// The local Redis Cluster (`REDIS_CLUSTER_URL`), every name tagged.
    RedisCluster,
}

fn test_store() -> TestStore {
    match std::env::var("TEST_STORE").as_deref() {
        Ok("postgres") => TestStore::Postgres,
        Ok("redis") => TestStore::Redis,
        Ok("redis-cluster") => TestStore::RedisCluster,
        _ => TestStore::DynamoDb,
    }
}

/// `(balance_cents, payment_count)` of `account` in the ledger of the
/// store the storms run on.
async fn ledger_entry(account: &str) -> (i64, i64) {
    let ledger = support::env("LEDGER_TABLE");
    match test_store() {
        TestStore::Postgres => {
            support::postgres::ledger_entry(&support::postgres::pool().await, account).await
        }
        TestStore::Redis => {
            let store = support::redis::store(Duration::from_secs(1));
            support::redis::ledger_entry(&store, &ledger, account).await
        }
        TestStore::RedisCluster => {
            let store = support::redis::cluster_store(Duration::from_secs(1));
            let ledger = support::redis::tagged(&ledger);
            support::redis::ledger_entry(&store, &ledger, account).await
        }
        TestStore::DynamoDb => support::msk::ledger_entry(account).await,
    }
}

/// The ledger, announcing each key whose work runs (after its claim on the
/// locking path) on stdout; or, with `charge_api`, a payment API's client.
struct Announced {
    ledger: LedgerHandler,
    pause: bool,
    charge_api: Option<SocketAddr>,
}

impl<E: Clone + Send + Sync + 'static> RecordHandler<E> for Announced {
    type Record = Record;

    fn commit_path(&self) -> CommitPath {
        match self.charge_api {
            Some(_) => CommitPath::Locking,
            None => self.ledger.commit_path(),
        }
    }

    async fn handle(
        &self,
        token: &FencingToken,
        record: &Record,
    ) -> Result<Completion<E>, HandlerError> {
        println!("WORKER CLAIMED {} v{}", token.key, token.version);
        if self.pause {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        let Some(api) = self.charge_api else {
            return self.ledger.handle(token, record).await;
        };
        let payment = Payment::parse(&record.body())?;
        support::charges::charge(api, token.idempotency_key(), &payment.payment_id)
            .await
            .map_err(HandlerError::Retryable)?;
        // Between the charge and the completion: where a kill or a stolen
        // lease makes another worker charge again.
        tokio::time::sleep(Duration::from_millis(fastrand::u64(0..40))).await;
        Ok(Completion::done(payment.payment_id))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the worker process of the kill tests, which start it themselves"]
async fn worker_process() {
    let config: WorkerConfig =
        serde_json::from_str(&std::env::var(WORKER_ENV).expect("run by the kill tests only"))
            .expect("worker config");
    let batches: Vec<Value> =
        serde_json::from_slice(&std::fs::read(&config.batches).expect("batches file"))
            .expect("batches");
    let announced = |ledger| Announced {
        ledger,
        pause: config.pause_in_handler,
        charge_api: config.charge_api,
    };
    let mode = LedgerMode::parse(&config.mode).expect("a ledger mode");
    let table = support::env("LEDGER_TABLE");
    // Every request the worker's store sends, by operation.
    let counter = RequestCounter::default();
    match test_store() {
        TestStore::Postgres => {
            let pool = support::postgres::pool().await;
            let store = PostgresStore::new(pool, store_config(&config), support::postgres::TIMEOUT)
                .expect("store")
                .with_request_counter(counter.clone());
            let ledger = LedgerHandler::on_postgres(store.clone(), table, mode)
                .with_events(config.announce_to.clone());
            work(store, announced(ledger), &batches, &config, &counter).await;
        }
        TestStore::Redis => {
            let store =
                support::redis::store_with(&support::env("REDIS_URL"), store_config(&config))
                    .with_request_counter(counter.clone());
            let ledger = LedgerHandler::on_redis(store.clone(), table, mode)
                .with_events(config.announce_to.clone());
            work(store, announced(ledger), &batches, &config, &counter).await;
        }
        TestStore::RedisCluster => {
            let store = support::redis::cluster_store_with(store_config(&config))
                .with_request_counter(counter.clone());
            let table = support::redis::tagged(&table);
            let ledger = LedgerHandler::on_redis(store.clone(), table, mode)
                .with_events(config.announce_to.clone());
            work(store, announced(ledger), &batches, &config, &counter).await;
        }
        TestStore::DynamoDb => {
            let client = counter.attach(&support::client().await);
            let store = DynamoDbStore::new(client.clone(), store_config(&config));
            let ledger =
                LedgerHandler::new(client, table, mode).with_events(config.announce_to.clone());
            work(store, announced(ledger), &batches, &config, &counter).await;
        }
    }
}

/// The locking path's batched requests among `counter`'s: claims and
/// fenced writes of several keys in one request (DynamoDB's PartiQL
/// batches, PostgreSQL's and Redis's batch statements and scripts).
fn batched_requests(counter: &RequestCounter) -> u64 {
    let counts = counter.counts();
    [
        "BatchExecuteStatement",
        "claim (batch)",
        "fenced write (batch)",
    ]
    .iter()
    .filter_map(|operation| counts.get(*operation))
    .sum()
}

/// A worker's life: each batch from `first`, delivered again until nothing
/// is reported, as Lambda does.
async fn work<S: Operator>(
    store: S,
    handler: Announced,
    batches: &[Value],
    config: &WorkerConfig,
    counter: &RequestCounter,
) where
    Announced: RecordHandler<S::Effect, Record: exactly_once::lambda::FromRecord>,
{
    // The default configuration: groups sized from the store's answers.
    let mut engine = Engine::new(store, handler, EngineConfig::default());
    if config.announce_to.is_some() {
        let sqs = exactly_once::lambda::destinations::SqsSender::new(support::sqs::client().await);
        engine = engine.with_sender(std::sync::Arc::new(DyingSender(sqs)));
    }
    let function = BatchFunction::new(engine, support::msk::settings(config.encoding.keys()));
    for (index, batch) in batches.iter().enumerate().skip(config.first_batch) {
        // Like Lambda: the batch comes again until nothing is reported, to
        // as many invocations of the container at once as it serves.
        loop {
            let deliveries = (0..config.invocations.max(1)).map(|_| {
                function.handle(lambda_runtime::LambdaEvent::new(
                    batch.clone(),
                    lambda_runtime::Context::default(),
                ))
            });
            let answers = futures_util::future::join_all(deliveries).await;
            if answers.iter().all(|answer| {
                answer
                    .as_ref()
                    .is_ok_and(|r| r.batch_item_failures.is_empty())
            }) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The group size the worker's transactions are sized to now.
        println!("WORKER GROUP {}", function.engine().group_size());
        println!("WORKER BATCHED {}", batched_requests(counter));
        println!("WORKER DONE {index}");
    }
    println!("WORKER FINISHED");
}

/// How many streams of a storm announce their payments, and the most kills
/// made while one runs: every kill resends what its worker had not
/// cleared, and the local SQS (moto's server) slows with every message a
/// queue holds.
const ANNOUNCING_STREAMS: usize = 1;
const ANNOUNCING_KILLS: usize = 20;

/// SQS, through which a worker dies (exits at once, like a SIGKILL) at the
/// points of the send that matter, and which fails as a destination does:
/// of the sends, a tenth each dies after the commit but before anything
/// reached SQS, dies after SQS took the messages but before their answer
/// was seen (the outboxes not cleared), is refused (throttled, a 500), or
/// loses its answer after SQS took the messages.
struct DyingSender(exactly_once::lambda::destinations::SqsSender);

impl Sender for DyingSender {
    fn check(&self, message: &exactly_once::outbox::Message) -> Result<(), SendError> {
        self.0.check(message)
    }

    fn batch_limit(&self, destination: &str) -> usize {
        self.0.batch_limit(destination)
    }

    fn send<'a>(&'a self, destination: &'a str, messages: &'a [Outgoing]) -> Answers<'a> {
        Box::pin(async move {
            let dies = |point: &str| -> ! {
                println!("WORKER DIES {point}");
                std::process::exit(9)
            };
            let each = |answer: fn() -> SendError| messages.iter().map(|_| Err(answer())).collect();
            match fastrand::u8(0..10) {
                0 => dies("between the commit and the send"),
                1 => {
                    self.0.send(destination, messages).await;
                    dies("after SQS took the messages")
                }
                2 => each(|| SendError::Refused {
                    code: "ThrottlingException".into(),
                    message: "rate exceeded".into(),
                }),
                3 => {
                    self.0.send(destination, messages).await;
                    each(|| SendError::NoAnswer("the answer was lost".into()))
                }
                _ => self.0.send(destination, messages).await,
            }
        })
    }
}

struct Worker {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    /// The group sizes it reported after its batches.
    groups: Vec<usize>,
    /// The batched requests of the locking path it sent so far.
    batched: u64,
}

impl Worker {
    fn start(config: &WorkerConfig) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "kill::worker_process",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(WORKER_ENV, serde_json::to_string(config).expect("config"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start a worker process");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Self {
            child,
            lines,
            groups: Vec::new(),
            batched: 0,
        }
    }

    /// The next line the worker printed (`WORKER ...`), `None` at its end.
    async fn next(&mut self) -> Option<String> {
        while let Some(line) = self.lines.next_line().await.expect("read the worker") {
            // libtest may print "test worker_process ... " before it.
            if let Some((_, message)) = line.split_once("WORKER ") {
                return Some(message.to_owned());
            }
        }
        None
    }

    /// Follows the worker until it finishes (true) or `stop_at` comes
    /// (false); each batch it acknowledges moves `config.first_batch` on,
    /// where the next worker starts.
    async fn run_until(
        &mut self,
        stop_at: Option<tokio::time::Instant>,
        config: &mut WorkerConfig,
        seed: u64,
    ) -> bool {
        loop {
            let line = match stop_at {
                Some(at) => match tokio::time::timeout_at(at, self.next()).await {
                    Ok(line) => line,
                    Err(_) => return false, // time to interrupt it
                },
                None => self.next().await,
            };
            match line.as_deref() {
                Some("FINISHED") => return true,
                // It died on its own, at a point of the send (DyingSender).
                Some(dies) if dies.starts_with("DIES ") => return false,
                Some(done) if done.starts_with("DONE ") => {
                    config.first_batch = done[5..].parse::<usize>().expect("batch index") + 1;
                }
                Some(group) if group.starts_with("GROUP ") => {
                    let size = group[6..].parse::<usize>().expect("a group size");
                    self.groups.push(size);
                }
                Some(batched) if batched.starts_with("BATCHED ") => {
                    self.batched = batched[8..].parse().expect("a count");
                }
                Some(_) => {}
                None => panic!("a worker ended without finishing (seed {seed})"),
            }
        }
    }

    async fn kill(mut self) {
        self.child.kill().await.expect("SIGKILL the worker");
    }

    /// Sends SIGSTOP or SIGCONT.
    async fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("a running worker").to_string();
        let status = Command::new("kill")
            .args([signal, &pid])
            .status()
            .await
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Steals the worker's lease: stops it (its heartbeat with it) for two
    /// lock timeouts, long enough for the next worker to take its key over,
    /// lets it go on for a while (its fenced writes must all fail, and its
    /// charge calls must all be answered as repeats), then kills it.
    fn steal_lease(self, lock_ms: u64) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            self.signal("-STOP").await;
            tokio::time::sleep(Duration::from_millis(2 * lock_ms)).await;
            self.signal("-CONT").await;
            tokio::time::sleep(Duration::from_millis(fastrand::u64(20..200))).await;
            self.kill().await;
        })
    }
}

fn batches_file(batches: &[Value]) -> PathBuf {
    let path = std::env::temp_dir().join(format!("kill-batches-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&path, serde_json::to_vec(batches).expect("json")).expect("write batches");
    path
}

/// A worker process claims k-1 of `batch` (a lock of `lock_ms`) and is
/// killed before its effect: the key is left STARTED v1. Its configuration.
async fn orphaned_claim(batch: &Value, lock_ms: u64) -> WorkerConfig {
    let config = WorkerConfig {
        key_prefix: format!("kill-{}#", uuid::Uuid::new_v4()),
        mode: "direct".into(),
        lock_ms,
        batches: batches_file(std::slice::from_ref(batch)),
        first_batch: 0,
        pause_in_handler: true,
        charge_api: None,
        invocations: 1,
        encoding: Encoding::Kafka,
        announce_to: None,
    };
    let mut worker = Worker::start(&config);
    let claimed = worker.next().await.expect("the worker claims");
    assert!(claimed.ends_with("k-1 v1"), "{claimed}");
    worker.kill().await;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_between_claim_and_completion_is_taken_over_after_its_lock() {
    let a = account();
    let batch = event(vec![("payments-0", vec![payment(0, "k-1", &a, 250)])]);
    let config = orphaned_claim(&batch, 1000).await;

    let client = support::client().await;
    let store = DynamoDbStore::new(client.clone(), store_config(&config));
    let orphan = store.get("k-1").await.expect("get").expect("item");
    assert_eq!((orphan.status, orphan.version), (Status::Started, 1));
    let function = BatchFunction::new(
        Engine::new(
            store.clone(),
            ledger(client, "direct"),
            EngineConfig::default(),
        ),
        support::msk::settings(header_keys()),
    );
    // Until the dead worker's lock expires, the key is in progress.
    assert_eq!(reported(&invoke(&function, &batch).await), ["payments-0@0"]);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    let item = store.get("k-1").await.expect("get").expect("item");
    assert_eq!((item.status, item.version), (Status::Completed, 2));
    assert_eq!(balance(&a).await, 250);
}

/// The event with a deadline `ms` from now (a real invocation's context).
async fn invoke_within<
    H: RecordHandler<TransactWriteItem, Record: exactly_once::lambda::FromRecord>,
>(
    function: &BatchFunction<H, DynamoDbStore>,
    event: &Value,
    ms: u64,
) -> Vec<String> {
    let mut context = lambda_runtime::Context::default();
    context.deadline = exactly_once::clock::now_ms() + ms;
    let response = function
        .handle(lambda_runtime::LambdaEvent::new(event.clone(), context))
        .await
        .expect("not an invocation error");
    reported(&response)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_workers_lease_is_waited_out_and_taken_over_within_the_invocation() {
    for mode in ["transactional", "lock-free"] {
        let a = account();
        let batch = event(vec![(
            "payments-0",
            vec![payment(0, "k-1", &a, 250), payment(1, "k-2", &a, 5)],
        )]);
        let config = orphaned_claim(&batch, 1500).await;

        let client = support::client().await;
        let store = DynamoDbStore::new(client.clone(), store_config(&config));
        let function = BatchFunction::new(
            Engine::new(store.clone(), ledger(client, mode), EngineConfig::default()),
            support::msk::settings(header_keys()),
        )
        .without_metrics();
        // The lease outlives the time records may start (deadline in 5.5 s,
        // safety margin 5 s): looked at until then, reported as in
        // progress, the key left to its holder.
        assert_eq!(
            invoke_within(&function, &batch, 5_500).await,
            ["payments-0@0", "payments-0@1"],
            "{mode}"
        );
        let item = store.get("k-1").await.expect("get").expect("item");
        assert_eq!((item.status, item.version), (Status::Started, 1), "{mode}");
        // A real invocation (a minute left): the lease is waited out and the
        // key taken over in this invocation; nothing goes back to Lambda.
        assert_eq!(
            invoke_within(&function, &batch, 60_000).await,
            Vec::<String>::new(),
            "{mode}"
        );
        let item = store.get("k-1").await.expect("get").expect("item");
        assert_eq!(
            (item.status, item.version),
            (Status::Completed, 2),
            "{mode}"
        );
        assert_eq!(balance(&a).await, 255, "{mode}");
    }
}

/// What a storm of kills did to one mode's ledger.
#[derive(Debug, Default)]
struct Storm {
    kills: usize,
    payments: i64,
    /// Payments applied more than once (`payment_count` beyond one each).
    double_applications: i64,
    /// Accounts whose balance is not the sum of their unique payments.
    wrong_balances: usize,
    /// Accounts whose balance is below it: a payment lost.
    short_balances: usize,
    /// The group sizes the workers reported (the default sizing's).
    groups: Vec<usize>,
    /// The locking path's batched requests the workers sent.
    batched: u64,
    /// Streams whose payments were announced.
    announced_streams: usize,
    /// Announcements received (copies included).
    announcements: usize,
    /// Applied payments with no announcement at all.
    unannounced: usize,
    /// Announcements of no payment of the stream, or whose body is not
    /// its payment's.
    phantom_announcements: usize,
    /// Payments whose copies came under more than one id, or not under
    /// the id of their key.
    unstable_ids: usize,
}

impl Storm {
    /// Adds a finished stream's ledger (80 payments to `accounts`): each
    /// account's balance against the stream's, its payments counted.
    async fn settle(&mut self, accounts: &[String]) {
        let mut counted = 0i64;
        for (account, expected) in accounts.iter().zip(stream_balances(accounts, 8)) {
            let (balance, payments) = ledger_entry(account).await;
            counted += payments;
            self.wrong_balances += usize::from(balance != expected);
            self.short_balances += usize::from(balance < expected);
        }
        self.payments += 80;
        self.double_applications += counted - 80;
    }

    /// Adds what the queue at `url` received for the stream (80 payments
    /// `{stream}-{n}` of n + 1 cents to `accounts`, keys under
    /// `key_prefix`): each applied payment announced at least once, every
    /// copy under its key's id, nothing else.
    async fn settle_announcements(
        &mut self,
        url: &str,
        stream: &str,
        accounts: &[String],
        key_prefix: &str,
    ) {
        self.announced_streams += 1;
        let client = support::sqs::client().await;
        let mut ids: std::collections::HashMap<String, std::collections::BTreeSet<String>> =
            std::collections::HashMap::default();
        for message in support::sqs::receive_all(&client, url).await {
            self.announcements += 1;
            let body: Value = serde_json::from_str(message.body().unwrap_or("null")).expect("JSON");
            let id = support::sqs::id_of(&message);
            let payment = body["payment_id"].as_str().unwrap_or_default();
            let n = payment
                .strip_prefix(&format!("{stream}-"))
                .and_then(|n| n.parse::<usize>().ok());
            let expected = n.filter(|n| *n < 80).map(|n| {
                serde_json::json!({
                    "payment_id": payment,
                    "account_id": accounts[n % accounts.len()],
                    "amount_cents": n + 1,
                })
            });
            if expected.as_ref() != Some(&body) {
                self.phantom_announcements += 1;
                continue;
            }
            ids.entry(payment.to_owned())
                .or_default()
                .insert(id.to_owned());
        }
        for n in 0..80 {
            let key = format!("{stream}-{n}");
            let own = exactly_once::outbox::message_id(&format!("{key_prefix}{key}"), 0);
            match ids.get(&key) {
                None => self.unannounced += 1,
                Some(seen) if seen.len() != 1 || !seen.contains(&own) => self.unstable_ids += 1,
                Some(_) => {}
            }
        }
        // The queue goes: moto's server keeps every queue and message.
        let _ = client.delete_queue().queue_url(url).send().await;
    }
}

/// Runs streams of payments through worker processes, killing them at
/// random points, until `kills` kills were made; checks every stream's ledger.
async fn storm(
    mode: &str,
    kills: usize,
    seed: u64,
    invocations: usize,
    encoding: Encoding,
) -> Storm {
    let mut rng = fastrand::Rng::with_seed(seed);
    let made = AtomicUsize::new(0);
    let mut storm = Storm::default();
    while made.load(Ordering::SeqCst) < kills {
        let accounts: Vec<String> = (0..4).map(|_| account()).collect();
        let stream = format!("s-{}", uuid::Uuid::new_v4());
        let batches = support::sources::payment_stream(encoding, &stream, &accounts, 8);
        // The first stream announces every payment (its workers dying
        // around the sends as well, at most ANNOUNCING_KILLS kills); the
        // rest do not, which keeps the local SQS off the storm's time.
        let announcing = storm.announced_streams < ANNOUNCING_STREAMS;
        let url = match announcing {
            true => Some(support::sqs::queue().await.1),
            false => None,
        };
        let key_prefix = format!("storm-{}#", uuid::Uuid::new_v4());
        let config = WorkerConfig {
            key_prefix: key_prefix.clone(),
            mode: mode.into(),
            lock_ms: 150,
            batches: batches_file(&batches),
            first_batch: 0,
            pause_in_handler: false,
            charge_api: None,
            invocations,
            encoding,
            announce_to: url.clone(),
        };
        let limit = match announcing {
            true => kills.min(made.load(Ordering::SeqCst) + ANNOUNCING_KILLS),
            false => kills,
        };
        let (mut groups, batched) = container_life(config, seed, rng.fork(), &made, limit).await;
        storm.groups.append(&mut groups);
        storm.batched += batched;
        storm.settle(&accounts).await;
        if let Some(url) = url {
            storm
                .settle_announcements(&url, &stream, &accounts, &key_prefix)
                .await;
        }
    }
    storm.kills = made.load(Ordering::SeqCst);
    storm
}

/// One container's life on `config`'s stream: a worker process started,
/// killed at a random point while fewer than `kills` kills were `made`,
/// started again where it stopped, until one finishes. The group sizes and
/// the batched requests its workers reported.
async fn container_life(
    mut config: WorkerConfig,
    seed: u64,
    mut rng: fastrand::Rng,
    made: &AtomicUsize,
    kills: usize,
) -> (Vec<usize>, u64) {
    let (mut groups, mut batched) = (Vec::new(), 0);
    loop {
        let mut worker = Worker::start(&config);
        let kill_at = (made.load(Ordering::SeqCst) < kills)
            .then(|| tokio::time::Instant::now() + Duration::from_millis(rng.u64(5..120)));
        let finished = worker.run_until(kill_at, &mut config, seed).await;
        groups.append(&mut worker.groups);
        batched += worker.batched;
        if finished {
            break;
        }
        worker.kill().await;
        made.fetch_add(1, Ordering::SeqCst);
    }
    let _ = std::fs::remove_file(&config.batches);
    (groups, batched)
}

/// A Kafka stream's batches with each partition's records in an order
/// drawn by `rng`: what another container handed the same records gets
/// when deliveries overlap (a retry beside the invocation it retries).
fn shuffled(batches: &[Value], rng: &mut fastrand::Rng) -> Vec<Value> {
    let mut batches = batches.to_vec();
    for batch in &mut batches {
        if let Some(partitions) = batch["records"].as_object_mut() {
            for records in partitions.values_mut() {
                if let Some(records) = records.as_array_mut() {
                    rng.shuffle(records);
                }
            }
        }
    }
    batches
}

/// Overlapping deliveries across containers: `containers` worker processes
/// at once on one stream (one function, one key prefix), each handed every
/// batch with its records in its own order, each killed at random and
/// started again where it stopped, until `kills` kills were made in all
/// (and 4 streams at least ran); checks every stream's ledger.
async fn overlapping_storm(mode: &str, kills: usize, seed: u64, containers: usize) -> Storm {
    let mut rng = fastrand::Rng::with_seed(seed);
    let made = AtomicUsize::new(0);
    let mut storm = Storm::default();
    while made.load(Ordering::SeqCst) < kills || storm.payments < 4 * 80 {
        let accounts: Vec<String> = (0..4).map(|_| account()).collect();
        let stream = format!("s-{}", uuid::Uuid::new_v4());
        let batches = support::msk::payment_stream(&stream, &accounts, 8);
        let key_prefix = format!("overlap-{}#", uuid::Uuid::new_v4());
        let lives: Vec<_> = (0..containers)
            .map(|_| {
                let config = WorkerConfig {
                    key_prefix: key_prefix.clone(),
                    mode: mode.into(),
                    lock_ms: 150,
                    batches: batches_file(&shuffled(&batches, &mut rng)),
                    first_batch: 0,
                    pause_in_handler: false,
                    charge_api: None,
                    invocations: 1,
                    encoding: Encoding::Kafka,
                    announce_to: None,
                };
                container_life(config, seed, rng.fork(), &made, kills)
            })
            .collect();
        for (mut groups, batched) in futures_util::future::join_all(lives).await {
            storm.groups.append(&mut groups);
            storm.batched += batched;
        }
        storm.settle(&accounts).await;
    }
    storm.kills = made.load(Ordering::SeqCst);
    storm
}

fn kills_wanted() -> usize {
    std::env::var("KILL_TEST_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(200)
}

fn seed() -> u64 {
    std::env::var("KILL_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..))
}

/// A storm in an exactly-once mode: no payment applied twice, none lost;
/// each worker serving `invocations` invocations at once, the batches
/// events of `encoding`'s source.
async fn exactly_once_storm(mode: &str, kills: usize, invocations: usize, encoding: Encoding) {
    let seed = seed();
    let storm = storm(mode, kills, seed, invocations, encoding).await;
    let store = test_store();
    println!(
        "{mode} storm on {store:?}, {encoding:?} events, {invocations} invocation(s) at once \
         (KILL_TEST_SEED={seed}): {storm:?}"
    );
    assert!(storm.kills >= kills);
    // The workers ran the default sizing, and reported its sizes.
    let sizes = (storm.groups.iter().min(), storm.groups.iter().max());
    assert!(
        !storm.groups.is_empty() && sizes.0 >= Some(&1) && sizes.1 <= Some(&99),
        "group sizes {sizes:?}"
    );
    // The locking path ran batched: claims and completions of several keys
    // per request, not one record at a time.
    if mode != "lock-free" {
        assert!(storm.batched > 0, "no batched request: {storm:?}");
    }
    assert_eq!(
        (storm.double_applications, storm.wrong_balances),
        (0, 0),
        "seed {seed}: {storm:?}"
    );
    // Exactly once out: every applied payment announced, each copy under
    // its key's one id, no announcement of anything else.
    assert_eq!(
        (
            storm.unannounced,
            storm.unstable_ids,
            storm.phantom_announcements
        ),
        (0, 0, 0),
        "seed {seed}: {storm:?}"
    );
    assert!(storm.announced_streams >= 1, "{storm:?}");
    assert!(
        storm.announcements >= 80 * storm.announced_streams,
        "{storm:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_mode_never_applies_a_payment_twice_under_sigkill() {
    exactly_once_storm("transactional", kills_wanted(), 1, Encoding::Kafka).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_free_mode_never_applies_a_payment_twice_under_sigkill() {
    exactly_once_storm("lock-free", kills_wanted(), 1, Encoding::Kafka).await;
}

/// Lambda Managed Instances: every delivery of a batch goes to 4
/// invocations of the worker's container at once, and the kills end them
/// all together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_mode_with_4_invocations_at_once_never_applies_a_payment_twice() {
    exactly_once_storm("transactional", kills_wanted() / 2, 4, Encoding::Kafka).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_free_mode_with_4_invocations_at_once_never_applies_a_payment_twice() {
    exactly_once_storm("lock-free", kills_wanted() / 2, 4, Encoding::Kafka).await;
}

/// Overlapping deliveries across containers on the locking path: 3 worker
/// processes at once, each handed every batch in its own order, killed at
/// random. Each waits for the others' keys holding nothing of its own
/// (`engine/lane.rs`), and takes over what a killed one held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_mode_with_3_containers_on_overlapping_deliveries_never_applies_a_payment_twice()
 {
    let seed = seed();
    let storm = overlapping_storm("transactional", kills_wanted() / 2, seed, 3).await;
    println!(
        "transactional storm on {:?}, 3 containers on overlapping deliveries \
         (KILL_TEST_SEED={seed}): {storm:?}",
        test_store()
    );
    // The locking path ran, batched (the lock-free path sends no claim).
    assert!(storm.batched > 0, "no batched request: {storm:?}");
    assert_eq!(
        (storm.double_applications, storm.wrong_balances),
        (0, 0),
        "seed {seed}: {storm:?}"
    );
}

/// The storms on SQS FIFO events (a message group per account) and on
/// Kinesis events (one shard, keys from the payload): the same payments,
/// the same checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_free_mode_on_sqs_fifo_never_applies_a_payment_twice_under_sigkill() {
    exactly_once_storm("lock-free", kills_wanted() / 4, 1, Encoding::SqsFifo).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_mode_on_sqs_fifo_never_applies_a_payment_twice_under_sigkill() {
    exactly_once_storm("transactional", kills_wanted() / 4, 1, Encoding::SqsFifo).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_free_mode_on_kinesis_never_applies_a_payment_twice_under_sigkill() {
    exactly_once_storm("lock-free", kills_wanted() / 4, 1, Encoding::Kinesis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_mode_on_kinesis_never_applies_a_payment_twice_under_sigkill() {
    exactly_once_storm("transactional", kills_wanted() / 4, 1, Encoding::Kinesis).await;
}

/// The storms on RabbitMQ events (one queue, keys from an AMQP header):
/// no partial batch response, so every unfinished batch fails whole and
/// comes again, its finished messages as duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_free_mode_on_rabbitmq_never_applies_a_payment_twice_under_sigkill() {
    exactly_once_storm("lock-free", kills_wanted() / 4, 1, Encoding::RabbitMq).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_mode_on_rabbitmq_never_applies_a_payment_twice_under_sigkill() {
    exactly_once_storm("transactional", kills_wanted() / 4, 1, Encoding::RabbitMq).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_mode_shows_the_window_between_effect_and_completion() {
    let seed = seed();
    let storm = storm("direct", kills_wanted() / 2, seed, 1, Encoding::Kafka).await;
    // Direct mode may repeat a payment killed between its effect and its
    // completion, and only then: never a lost payment.
    println!("direct storm (KILL_TEST_SEED={seed}): {storm:?}");
    assert!(storm.batched > 0, "no batched request: {storm:?}");
    assert!(
        storm.double_applications >= 0,
        "a payment was lost: {storm:?}"
    );
}

/// What a storm of kills and stolen leases did to the payment API.
#[derive(Debug, Default)]
struct ChargeStorm {
    kills: usize,
    steals: usize,
    payments: usize,
    /// Payments the API charged more than once.
    double_charges: usize,
    /// Payments never charged.
    lost: usize,
    /// Calls the API answered as repeats of a key it had applied.
    replayed_calls: u64,
    /// The locking path's batched requests the workers sent.
    batched: u64,
}

/// Streams of payments through workers that call the payment API, killed
/// (SIGKILL) or stopped until their lease is taken over, at random points.
async fn charge_storm(interruptions: usize, seed: u64) -> ChargeStorm {
    let api = support::charges::ChargeApi::start().await;
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut storm = ChargeStorm::default();
    let lock_ms = 150;
    while storm.kills + storm.steals < interruptions {
        let stream = format!("c-{}", uuid::Uuid::new_v4());
        let ids: Vec<String> = (0..48).map(|n| format!("{stream}-{n}")).collect();
        let batches: Vec<Value> = ids
            .chunks(8)
            .enumerate()
            .map(|(b, chunk)| {
                let partition = |p: usize| {
                    chunk[p * 4..p * 4 + 4]
                        .iter()
                        .enumerate()
                        .map(|(i, id)| payment((b * 4 + i) as i64, id, "merchant", 100))
                        .collect()
                };
                event(vec![
                    ("payments-0", partition(0)),
                    ("payments-1", partition(1)),
                ])
            })
            .collect();
        let mut config = WorkerConfig {
            key_prefix: format!("charges-{}#", uuid::Uuid::new_v4()),
            mode: "direct".into(),
            lock_ms,
            batches: batches_file(&batches),
            first_batch: 0,
            pause_in_handler: false,
            charge_api: Some(api.addr),
            invocations: 1,
            encoding: Encoding::Kafka,
            announce_to: None,
        };
        let mut stolen = Vec::new();
        loop {
            let mut worker = Worker::start(&config);
            let interrupt_at = (storm.kills + storm.steals < interruptions)
                .then(|| tokio::time::Instant::now() + Duration::from_millis(rng.u64(5..150)));
            let finished = worker.run_until(interrupt_at, &mut config, seed).await;
            storm.batched += worker.batched;
            if finished {
                break;
            }
            // Every third interruption steals the lease instead of killing.
            if (storm.kills + storm.steals) % 3 == 2 {
                stolen.push(worker.steal_lease(lock_ms));
                storm.steals += 1;
            } else {
                worker.kill().await;
                storm.kills += 1;
            }
        }
        for old in stolen {
            old.await.expect("a stolen worker is stopped");
        }
        let _ = std::fs::remove_file(&config.batches);
        for id in &ids {
            match api.charges(id) {
                0 => storm.lost += 1,
                1 => {}
                _ => storm.double_charges += 1,
            }
        }
        storm.payments += ids.len();
    }
    storm.replayed_calls = api.replays();
    storm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_api_charges_once_through_kills_and_stolen_leases() {
    let seed = seed();
    let storm = charge_storm(kills_wanted(), seed).await;
    println!("charge storm (KILL_TEST_SEED={seed}): {storm:?}");
    assert!(storm.kills >= kills_wanted() / 2, "{storm:?}");
    assert!(storm.steals >= kills_wanted() / 4, "{storm:?}");
    assert_eq!(
        (storm.double_charges, storm.lost),
        (0, 0),
        "seed {seed}: {storm:?}"
    );
    // The storm did hit the window between charge and completion: some
    // retries reached the API with a key it had already applied.
    assert!(storm.replayed_calls > 0, "{storm:?}");
    // Claims and completions went in batches.
    assert!(storm.batched > 0, "{storm:?}");
}
