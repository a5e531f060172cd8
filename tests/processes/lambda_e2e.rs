//! End-to-end test of the `msk-handler` binary as Lambda runs it: polling
//! the Lambda Runtime API of `cargo lambda watch --only-lambda-apis` and
//! invoked with `cargo lambda invoke`, against the DynamoDB tables of
//! infra/test.sh. The binary is the one the tests' build built (`cargo
//! lambda watch` building a crate itself is the quick start's:
//! infra/quickstart.sh runs the README's blocks).
//!
//! Needs what infra/test.sh provides: cargo-lambda on PATH ($EXACTLY_ONCE_TOOLS/venv/bin),
//! DynamoDB Local (`AWS_ENDPOINT_URL_DYNAMODB`), its tables
//! (`IDEMPOTENCY_TABLE`, `LEDGER_TABLE`) and dummy credentials and region.
//! Without them the test fails and says what is missing; it never skips.
//!
//! It sends events/two-partitions.json with the account ids made unique to
//! this run (the tables are shared with other tests and runs), and a unique
//! `IDEMPOTENCY_KEY_PREFIX`: the first delivery moves the balances by the
//! event's amounts, the same batch again changes nothing, and an SNS event
//! (not a batch source) is an invocation error.
//!
//! The second test redrives failed batches through the same function with
//! `exactly-once-ops redrive`: from invocation records in S3 (moto's, at
//! `AWS_ENDPOINT_URL_SQS`, as the mapping's S3 destination writes them) and
//! from a file of Kafka-topic destination records, each redriven twice.

use crate::support;

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

/// Until the function, started beside the watch, answers (seconds on a
/// loaded machine).
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// One invocation of a ready function.
const INVOKE_TIMEOUT: Duration = Duration::from_secs(120);
/// Variables the function reads that this test does not set: removed from the
/// inherited environment so the function runs with its defaults.
const FUNCTION_SETTINGS: &[&str] = &[
    "IDEMPOTENCY_KEY_HEADER",
    "IDEMPOTENCY_KEY_SOURCE",
    "MISSING_KEY_POLICY",
    "LOCK_TIMEOUT_SECONDS",
    "RECORD_RETENTION_SECONDS",
    "SAFETY_MARGIN_MS",
];

#[test]
fn msk_handler_through_cargo_lambda_watch() {
    let env = Env::from_process();
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let work = TempDir::new(&format!("lambda-e2e-{run_id}"));

    // The sample event, with account ids unique to this run.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (event, expected) = unique_accounts(&root.join("events/two-partitions.json"), &run_id);
    assert_eq!(
        expected.len(),
        2,
        "events/two-partitions.json should pay into 2 accounts"
    );
    let event_file = work.path.join("two-partitions.json");
    fs::write(&event_file, serde_json::to_vec_pretty(&event).unwrap()).unwrap();

    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let client = runtime.block_on(exactly_once::aws::dynamodb_client());
    let balances = |what: &str| {
        let got = runtime.block_on(read_balances(&client, &env.ledger_table, &expected));
        progress(&format!("balances {what}: {got:?}"));
        got
    };
    let before = balances("before");
    assert!(
        before.values().all(|&b| b == (0, 0)),
        "fresh accounts should have no balance: {before:?}"
    );

    let mut watch = Watch::start(root, &env, &format!("e2e-{run_id}#"), &work.path);
    watch.wait_ready(&work.path);

    // First delivery: every payment processed.
    let answer = watch.invoke(&event_file);
    assert_eq!(
        answer.json(),
        json!({"batchItemFailures": []}),
        "first delivery\n{answer}\n{}",
        watch.log_tail(40)
    );
    let after_first = balances("after the first delivery");
    assert_eq!(after_first, expected, "balances after the first delivery");

    // Lambda delivers the same batch again: all duplicates, nothing changes.
    let answer = watch.invoke(&event_file);
    assert_eq!(
        answer.json(),
        json!({"batchItemFailures": []}),
        "redelivery\n{answer}\n{}",
        watch.log_tail(40)
    );
    let after_replay = balances("after the redelivery");
    assert_eq!(
        after_replay, expected,
        "the redelivered batch must not change the balances"
    );

    // Not an event of a batch source (an SNS notification): an invocation
    // error, so Lambda would retry it whole.
    let answer = watch.invoke(&root.join("events/not-a-batch-source.json"));
    assert!(
        !answer.status.success(),
        "an SNS event must be an invocation error\n{answer}"
    );
    assert!(
        answer
            .flat_text()
            .contains("not an event of a batch source"),
        "the error should say \"not an event of a batch source\"\n{answer}"
    );
    // `watch` is dropped here (and on any panic above): the watch process
    // group, with the function it started, is killed.
}

/// An invocation record as the mapping's on-failure destination writes it
/// (S3: the event as a JSON string; a Kafka topic: as an object).
fn invocation_record(event: Option<&Value>, as_string: bool) -> Value {
    let payload = match (event, as_string) {
        (Some(event), true) => Value::String(event.to_string()),
        (Some(event), false) => event.clone(),
        (None, _) => Value::Null,
    };
    let condition = match event {
        Some(_) => "RetryAttemptsExhausted",
        None => "MaximumPayloadSizeExceeded",
    };
    json!({
        "requestContext": {
            "requestId": uuid::Uuid::new_v4().to_string(),
            "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:msk-handler",
            "condition": condition,
            "approximateInvokeCount": 6
        },
        "responseContext": null,
        "version": "1.0",
        "timestamp": "2026-11-23T10:00:00.000Z",
        "KafkaBatchInfo": {
            "batchSize": 6,
            "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/demo/abc-1",
            "bootstrapServers": "b-1.demo.kafka.us-east-1.amazonaws.com:9092",
            "payloadSize": 3022,
            "recordsInfo": {
                "payments-0": {
                    "firstRecordOffset": "100",
                    "lastRecordOffset": "102",
                    "firstRecordTimestamp": "2025-01-01T00:00:00.000Z",
                    "lastRecordTimestamp": "2025-01-01T00:00:02.000Z"
                }
            }
        },
        "payload": payload
    })
}

/// `exactly-once-ops redrive` against the watch's Invoke API and the local
/// S3: its exit code and stdout.
fn redrive(watch: &Watch, from: &str, extra: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(support::binary("exactly-once-ops"))
        .args(["redrive", "--from", from, "--function", "msk-handler"])
        .args(extra)
        .env(
            "AWS_ENDPOINT_URL_LAMBDA",
            format!("http://127.0.0.1:{}", watch.port),
        )
        .env("AWS_ENDPOINT_URL_S3", s3_endpoint())
        .stdin(Stdio::null())
        .output()
        .expect("run exactly-once-ops");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    progress(&format!(
        "redrive --from {from}: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    ));
    (out.status.code(), stdout)
}

/// moto serves S3 beside SQS.
fn s3_endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL_SQS").expect("AWS_ENDPOINT_URL_SQS: moto, from infra/test.sh")
}

#[test]
fn failed_batches_are_redriven_from_s3_and_files_applying_each_record_once() {
    let env = Env::from_process();
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let work = TempDir::new(&format!("lambda-redrive-{run_id}"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Two events of different keys (a key must keep its payload).
    let (from_s3, s3_expected) = unique_accounts(&root.join("events/two-partitions.json"), &run_id);
    let (from_file, file_expected) =
        unique_accounts(&root.join("events/self-managed.json"), &run_id);

    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let client = runtime.block_on(exactly_once::aws::dynamodb_client());
    let balances = |expected: &BTreeMap<String, (i64, i64)>| {
        runtime.block_on(read_balances(&client, &env.ledger_table, expected))
    };
    // The mapping's S3 destination: one object per failed invocation.
    let s3 = runtime.block_on(async {
        let sdk = exactly_once::aws::sdk_config().await;
        aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::config::Builder::from(&sdk)
                .endpoint_url(s3_endpoint())
                .force_path_style(true)
                .build(),
        )
    });
    let bucket = format!("failed-{run_id}");
    let prefix = "aws/lambda/7f3c/payments-0/2026/11/23/";
    let objects = [
        (
            "2026-11-23T10.00.00-a",
            invocation_record(Some(&from_s3), true),
        ),
        ("2026-11-23T10.05.00-b", invocation_record(None, true)),
    ];
    runtime.block_on(async {
        s3.create_bucket()
            .bucket(&bucket)
            .send()
            .await
            .expect("create the bucket");
        for (name, record) in &objects {
            s3.put_object()
                .bucket(&bucket)
                .key(format!("{prefix}{name}"))
                .body(record.to_string().into_bytes().into())
                .send()
                .await
                .expect("put an invocation record");
        }
    });
    // The Kafka-topic destination's messages, saved one per line: the same
    // batch failed twice (both are redriven; the second is all duplicates).
    let topic_dump = work.path.join("failure-topic.jsonl");
    let message = invocation_record(Some(&from_file), false);
    fs::write(&topic_dump, format!("{message}\n{message}\n")).unwrap();

    let mut watch = Watch::start(root, &env, &format!("redrive-{run_id}#"), &work.path);
    watch.wait_ready(&work.path);
    let from = format!("s3://{bucket}/aws/lambda/");
    for attempt in ["first", "second"] {
        let (code, out) = redrive(&watch, &from, &[]);
        assert_eq!(code, Some(1), "{attempt}: one record has no payload\n{out}");
        assert!(
            out.contains(&format!(
                "s3://{bucket}/{prefix}2026-11-23T10.00.00-a: 6 record(s), all finished"
            )),
            "{attempt}\n{out}"
        );
        assert!(
            out.contains("no payload kept (condition MaximumPayloadSizeExceeded); read these records again from Kafka: {\"recordsInfo\""),
            "{attempt}\n{out}"
        );
        assert!(out.contains("2 invocation record(s), 6 record(s) redriven through msk-handler; 0 reported again, 0 failed invocation(s), 1 without a payload"), "{out}");
        assert_eq!(
            balances(&s3_expected),
            s3_expected,
            "{attempt} redrive: applied once"
        );
    }
    for attempt in ["first", "second"] {
        let (code, out) = redrive(&watch, topic_dump.to_str().unwrap(), &[]);
        assert_eq!(code, Some(0), "{attempt}\n{out}");
        for line in [1, 2] {
            let finished = format!("failure-topic.jsonl:{line}: 2 record(s), all finished");
            assert!(out.contains(&finished), "{out}");
        }
        assert_eq!(
            balances(&file_expected),
            file_expected,
            "{attempt} redrive: applied once"
        );
    }
    // --delete removes what finished and keeps the record without a payload.
    let (code, out) = redrive(&watch, &from, &["--delete"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("all finished; deleted"), "{out}");
    let left: Vec<String> = runtime.block_on(async {
        let listed = s3
            .list_objects_v2()
            .bucket(&bucket)
            .send()
            .await
            .expect("list");
        listed
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect()
    });
    assert_eq!(left, [format!("{prefix}2026-11-23T10.05.00-b")]);
    assert_eq!(balances(&s3_expected), s3_expected);
}

/// What infra/test.sh provides; a clear failure when something is missing.
struct Env {
    idempotency_table: String,
    ledger_table: String,
    endpoint: String,
}

impl Env {
    fn from_process() -> Self {
        let var = |name: &str| {
            std::env::var(name).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| {
                panic!(
                    "{name} is not set. This test needs DynamoDB Local and the project's tables: \
                     run it through infra/test.sh (which exports AWS_ENDPOINT_URL_DYNAMODB, \
                     IDEMPOTENCY_TABLE, LEDGER_TABLE, AWS_REGION and dummy credentials)"
                )
            })
        };
        let env = Self {
            idempotency_table: var("IDEMPOTENCY_TABLE"),
            ledger_table: var("LEDGER_TABLE"),
            endpoint: var("AWS_ENDPOINT_URL_DYNAMODB"),
        };
        for name in ["AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
            var(name);
        }
        match support::cargo("cargo")
            .args(["lambda", "--version"])
            .stdin(Stdio::null())
            .output()
        {
            Ok(out) if out.status.success() => progress(&format!(
                "using {}",
                String::from_utf8_lossy(&out.stdout).trim()
            )),
            result => panic!(
                "cargo-lambda is not available ({}). Run this test through infra/test.sh, which \
                 installs it into $EXACTLY_ONCE_TOOLS/venv (infra/tools.sh) and puts its bin/ on PATH",
                match result {
                    Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                    Err(err) => err.to_string(),
                }
            ),
        }
        env
    }
}

/// Rewrites the event's account ids to ones unique to this run; returns the
/// event and the balances it should produce: account -> (cents, payments).
fn unique_accounts(path: &Path, run_id: &str) -> (Value, BTreeMap<String, (i64, i64)>) {
    let text = fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    let mut event: Value = serde_json::from_str(&text).expect("sample event is JSON");
    let mut expected = BTreeMap::new();
    let partitions = event["records"]
        .as_object_mut()
        .expect("records is an object");
    for record in partitions.values_mut().flat_map(|list| {
        list.as_array_mut()
            .expect("a partition is a list")
            .iter_mut()
    }) {
        let value = STANDARD
            .decode(record["value"].as_str().expect("value is a string"))
            .expect("value is base64");
        let mut payment: Value = serde_json::from_slice(&value).expect("value is a payment");
        let account = format!("e2e-{run_id}-{}", payment["account_id"].as_str().unwrap());
        let amount = payment["amount_cents"].as_i64().expect("integer amount");
        payment["account_id"] = Value::String(account.clone());
        let entry = expected.entry(account).or_insert((0, 0));
        *entry = (entry.0 + amount, entry.1 + 1);
        record["value"] = Value::String(STANDARD.encode(serde_json::to_vec(&payment).unwrap()));
    }
    (event, expected)
}

/// (balance_cents, payment_count) of each account; (0, 0) when absent.
async fn read_balances(
    client: &Client,
    table: &str,
    accounts: &BTreeMap<String, (i64, i64)>,
) -> BTreeMap<String, (i64, i64)> {
    let number = |item: &std::collections::HashMap<String, AttributeValue>, name: &str| {
        item.get(name).map_or(0, |v| {
            v.as_n()
                .expect("a number attribute")
                .parse::<i64>()
                .expect("an integer")
        })
    };
    let mut balances = BTreeMap::new();
    for account in accounts.keys() {
        let out = client
            .get_item()
            .table_name(table)
            .key("account_id", AttributeValue::S(account.clone()))
            .consistent_read(true)
            .send()
            .await
            .unwrap_or_else(|err| {
                panic!(
                    "get_item {account} from {table}: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(&err)
                )
            });
        let balance = out.item().map_or((0, 0), |item| {
            (number(item, "balance_cents"), number(item, "payment_count"))
        });
        balances.insert(account.clone(), balance);
    }
    balances
}

/// `cargo lambda watch --only-lambda-apis` in its own process group, and
/// the function in the same group, polling the watch's Runtime API as
/// `msk-handler`: both killed when dropped.
struct Watch {
    child: Child,
    /// The function, once started.
    function: Option<Child>,
    port: u16,
    log: PathBuf,
}

impl Watch {
    fn start(root: &Path, env: &Env, key_prefix: &str, work: &Path) -> Self {
        let port = free_port();
        let log = work.join("watch.log");
        let log_file = fs::File::create(&log).unwrap();
        // From the workspace's root: the watch takes invocations for the
        // binaries its manifest names.
        let child = support::cargo("cargo")
            .current_dir(root)
            .args(["lambda", "watch", "--only-lambda-apis"])
            .args(["--invoke-address", "127.0.0.1", "--invoke-port"])
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file.try_clone().unwrap())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start cargo lambda watch: {err}"));
        let mut watch = Self {
            child,
            function: None,
            port,
            log,
        };
        watch.wait_listening();
        // The variables `cargo lambda watch` gives a function it starts, and
        // what the function needs.
        let runtime_api = format!("http://127.0.0.1:{port}/.rt/msk-handler");
        let vars = [
            ("AWS_LAMBDA_RUNTIME_API", runtime_api),
            ("AWS_LAMBDA_FUNCTION_NAME", "msk-handler".to_owned()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "1".to_owned()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "4096".to_owned()),
            ("IDEMPOTENCY_TABLE", env.idempotency_table.clone()),
            ("LEDGER_TABLE", env.ledger_table.clone()),
            ("IDEMPOTENCY_KEY_PREFIX", key_prefix.to_owned()),
            ("AWS_ENDPOINT_URL_DYNAMODB", env.endpoint.clone()),
            ("AWS_REGION", std::env::var("AWS_REGION").unwrap()),
            (
                "AWS_ACCESS_KEY_ID",
                std::env::var("AWS_ACCESS_KEY_ID").unwrap(),
            ),
            (
                "AWS_SECRET_ACCESS_KEY",
                std::env::var("AWS_SECRET_ACCESS_KEY").unwrap(),
            ),
            ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
        ];
        let mut function = Command::new(support::binary("msk-handler"));
        for name in FUNCTION_SETTINGS {
            function.env_remove(name);
        }
        let function = function
            .envs(vars)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .process_group(i32::try_from(watch.child.id()).expect("a pid"))
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start msk-handler: {err}"));
        watch.function = Some(function);
        progress(&format!(
            "cargo lambda watch on 127.0.0.1:{port} and msk-handler polling it (group {}, log {})",
            watch.child.id(),
            watch.log.display()
        ));
        watch
    }

    /// Waits until the watch listens (the function's first poll must find
    /// it).
    fn wait_listening(&self) {
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "cargo lambda watch did not listen on {} within {} s\n{}",
                self.port,
                READY_TIMEOUT.as_secs(),
                self.log_tail(60)
            );
            sleep(Duration::from_millis(100));
        }
    }

    /// Waits until an empty Kafka event gets its answer: the function is
    /// running.
    fn wait_ready(&mut self, work: &Path) {
        let probe = work.join("probe.json");
        fs::write(&probe, r#"{"eventSource": "aws:kafka", "records": {}}"#).unwrap();
        let started = Instant::now();
        progress(&format!(
            "waiting for the function (up to {} s)",
            READY_TIMEOUT.as_secs()
        ));
        loop {
            let left = READY_TIMEOUT.saturating_sub(started.elapsed());
            let answer = self.try_invoke(&probe, left.max(Duration::from_secs(1)));
            let ready = answer.is_some_and(|answer| {
                answer.status.success()
                    && serde_json::from_str::<Value>(&answer.stdout).ok()
                        == Some(json!({"batchItemFailures": []}))
            });
            if ready {
                progress(&format!(
                    "function ready after {:.1} s",
                    started.elapsed().as_secs_f64()
                ));
                return;
            }
            // A watch that exited will never answer.
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "cargo lambda watch exited ({status}) before the function answered\n{}",
                    self.log_tail(60)
                );
            }
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "the function did not answer within {} s\n{}",
                READY_TIMEOUT.as_secs(),
                self.log_tail(60)
            );
            sleep(Duration::from_millis(500));
        }
    }

    /// Invokes the function with a file's event; fails the test on a timeout.
    fn invoke(&self, file: &Path) -> Answer {
        let started = Instant::now();
        let answer = self.try_invoke(file, INVOKE_TIMEOUT).unwrap_or_else(|| {
            panic!(
                "cargo lambda invoke {} did not return within {} s\n{}",
                file.display(),
                INVOKE_TIMEOUT.as_secs(),
                self.log_tail(60)
            )
        });
        progress(&format!(
            "invoked {} in {} ms: {}",
            file.file_name().unwrap().to_string_lossy(),
            started.elapsed().as_millis(),
            if answer.status.success() {
                answer.stdout.split_whitespace().collect::<String>()
            } else {
                format!("error: {}", answer.flat_text())
            }
        ));
        answer
    }

    /// `cargo lambda invoke`, killed after `timeout` (then `None`).
    fn try_invoke(&self, file: &Path, timeout: Duration) -> Option<Answer> {
        let mut child = support::cargo("cargo")
            .args(["lambda", "invoke", "msk-handler", "--output-format", "json"])
            .args(["--invoke-address", "127.0.0.1", "--invoke-port"])
            .arg(self.port.to_string())
            .arg("--data-file")
            .arg(file)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot run cargo lambda invoke");
        // Read both pipes on threads: a full pipe must not block the child.
        let mut stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let out = std::thread::spawn(move || {
            let mut s = String::new();
            stdout.read_to_string(&mut s).ok();
            s
        });
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            stderr.read_to_string(&mut s).ok();
            s
        });
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for cargo lambda invoke") {
                break Some(status);
            }
            if started.elapsed() >= timeout {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            sleep(Duration::from_millis(50));
        };
        let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
        status.map(|status| Answer {
            status,
            stdout,
            stderr,
        })
    }

    fn log_tail(&self, lines: usize) -> String {
        let log = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        let tail = all[all.len().saturating_sub(lines)..].join("\n");
        format!(
            "--- last {lines} lines of {} ---\n{tail}",
            self.log.display()
        )
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let signal = |name: &str| {
            let _ = Command::new("kill")
                .args([name, "--", &group])
                .stderr(Stdio::null())
                .status();
        };
        signal("-TERM");
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            sleep(Duration::from_millis(100));
        }
        // The group's other member, the function, too.
        signal("-KILL");
        let _ = self.child.wait();
        if let Some(function) = &mut self.function {
            let _ = function.wait();
        }
    }
}

/// The outcome of one `cargo lambda invoke`.
struct Answer {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Answer {
    fn json(&self) -> Value {
        assert!(self.status.success(), "invocation failed\n{self}");
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|err| panic!("the response is not JSON ({err})\n{self}"))
    }

    /// stdout and stderr as one line: the error report wraps and decorates
    /// long messages (`│`, `×`).
    fn flat_text(&self) -> String {
        format!("{} {}", self.stdout, self.stderr)
            .replace(['│', '×'], " ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cargo lambda invoke: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// A directory removed when dropped.
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(name);
        fs::create_dir_all(&path).unwrap();
        Self { path }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Kept after a failure: the watch log is in it.
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

fn progress(message: &str) {
    eprintln!("lambda_e2e: {message}");
}
