//! Reliability proof: randomized schedules of Lambda's Kafka event source
//! mapping (tests/batch/simulation/mapping.rs) around the real handler, with
//! DynamoDB faults, crashes, deadlines, slow handlers, concurrent pollers and
//! redeliveries, and the invariants checked against DynamoDB Local after
//! every schedule (tests/batch/simulation/invariants.rs, writes.rs).
//!
//! `SIM_SCHEDULES` (default 1000) schedules run, `SIM_PARALLEL` (default 24)
//! at once, from `SIM_SEED` (default: random); schedule `i` has seed
//! `SIM_SEED + i`. A failing schedule prints its one-line reproduction
//! (`infra/simulate.sh 1 <seed>`: the same schedule, faults and chaos; the
//! interleaving with DynamoDB's timing may differ).

use crate::support;

mod container;
mod invariants;
mod mapping;
mod schedule;
mod slow;
mod writes;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use container::{ClockSkew, Containers};
use exactly_once::config::StoreConfig;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::engine::PoisonPolicy;
use exactly_once::lambda::dead_letter::DeadLetterQueue;
use invariants::{check, final_items};
use ledger::LedgerMode;
use mapping::Mapping;
use schedule::Schedule;
use slow::Slowness;
use support::faults::{Fault, Faults};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use writes::WriteLog;

/// A schedule that takes longer than this has not converged.
const SCHEDULE_LIMIT: Duration = Duration::from_secs(120);

/// What one schedule did and found.
#[derive(Debug, Default)]
struct Report {
    records: u64,
    completed: u64,
    parked: u64,
    produced_bad: u64,
    dead_lettered: u64,
    /// Destination records by cause.
    causes: BTreeMap<String, u64>,
    /// Schedules run in lock-free mode (their path asserted).
    lock_free_schedules: u64,
    /// Deliveries overlapping another in another order on the locking path
    /// (its path asserted).
    reordered_on_locking: u64,
    /// Schedules by the source whose events the mapping delivered.
    by_source: BTreeMap<String, u64>,
    /// Per poison setup: records, records in the destination, good records
    /// in the destination (any cause but being poison, keyless or a reused
    /// key themselves).
    by_setup: BTreeMap<&'static str, [u64; 3]>,
    repeats: u64,
    invocations: u64,
    /// Invocation errors (batches retried whole) and bisections of them.
    invocation_errors: u64,
    bisections: u64,
    writes: u64,
    /// Faults injected, by kind.
    faults: BTreeMap<&'static str, u64>,
    /// Changes of the containers' lock-free group sizes (the default
    /// sizing, learning from the store's answers).
    resizes: u64,
    violations: Vec<String>,
}

impl Report {
    fn add(&mut self, other: &Report) {
        self.records += other.records;
        self.completed += other.completed;
        self.parked += other.parked;
        self.produced_bad += other.produced_bad;
        self.lock_free_schedules += other.lock_free_schedules;
        self.reordered_on_locking += other.reordered_on_locking;
        for (source, count) in &other.by_source {
            *self.by_source.entry(source.clone()).or_default() += count;
        }
        for (setup, counts) in &other.by_setup {
            let total = self.by_setup.entry(setup).or_default();
            for (total, count) in total.iter_mut().zip(counts) {
                *total += count;
            }
        }
        for (cause, count) in &other.causes {
            *self.causes.entry(cause.clone()).or_default() += count;
        }
        self.dead_lettered += other.dead_lettered;
        self.repeats += other.repeats;
        self.invocations += other.invocations;
        self.invocation_errors += other.invocation_errors;
        self.bisections += other.bisections;
        self.writes += other.writes;
        for (kind, count) in &other.faults {
            *self.faults.entry(kind).or_default() += count;
        }
        self.resizes += other.resizes;
    }
}

async fn run_schedule(seed: u64, base: Client) -> Report {
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let schedule = Arc::new(Schedule::generate(seed, &run_id[..12]));
    let store = StoreConfig {
        key_prefix: format!("sim-{run_id}#"),
        lock_timeout: schedule.lock_timeout,
        ..StoreConfig::new(support::env("IDEMPOTENCY_TABLE"))
    };
    let log = Arc::new(WriteLog::new(
        store.table_name.clone(),
        store.key_prefix.clone(),
        support::env("LEDGER_TABLE"),
    ));
    let faults = Faults::new(schedule.dynamo.clone(), seed, Some(log.clone()));
    let slowness = Arc::new(Slowness {
        probability: schedule.chaos.slow_handler,
        lock_timeout: schedule.lock_timeout,
        rng: Mutex::new(fastrand::Rng::with_seed(seed.rotate_left(17))),
        slowed: AtomicU64::new(0),
    });
    let skew = Arc::new(ClockSkew {
        max_ms: schedule.chaos.clock_skew_ms,
        rng: Mutex::new(fastrand::Rng::with_seed(seed.rotate_left(29))),
        skewed: AtomicU64::new(0),
    });
    let queue = match schedule.dead_letter_queue {
        true => Some(support::sqs::queue().await),
        false => None,
    };
    let containers = Containers {
        client: faults.attach(&base),
        store: store.clone(),
        ledger_table: support::env("LEDGER_TABLE"),
        schedule: Arc::clone(&schedule),
        slowness: Arc::clone(&slowness),
        skew: Arc::clone(&skew),
        dead_letters: queue
            .as_ref()
            .map(|(client, url)| DeadLetterQueue::new(client.clone(), url)),
        started: Mutex::default(),
    };
    let mut mapping = Mapping::new(Arc::clone(&schedule), containers);
    mapping.run().await;
    faults.settle().await;

    let mut report = Report::default();
    for fault in Fault::ALL {
        report.faults.insert(fault.name(), faults.counts.get(fault));
    }
    let counts = &mapping.counts;
    report.faults.insert("abort", counts.aborted);
    report
        .faults
        .insert("short-deadline", counts.short_deadlines);
    report.faults.insert("deadline-kill", counts.deadline_kills);
    report
        .faults
        .insert("concurrent-poller", counts.concurrent_pollers);
    report
        .faults
        .insert("shared-container", counts.shared_container);
    report.faults.insert("rewind", counts.rewinds);
    report
        .faults
        .insert("slow-handler", slowness.slowed.load(Ordering::Relaxed));
    report
        .faults
        .insert("clock-skew", skew.skewed.load(Ordering::Relaxed));

    // Checked through a client without faults, patient with a busy DynamoDB Local.
    let patient = patient(&base);
    let checker = DynamoDbStore::new(patient.clone(), store);
    let items = final_items(&schedule, &checker).await;
    let queued: BTreeSet<(usize, usize)> = match &queue {
        Some((client, url)) => support::sqs::drain(client, url)
            .await
            .iter()
            .filter_map(|message| {
                use exactly_once::lambda::ItemIdentifier;
                let id = match message["id"].as_str() {
                    Some(id) => ItemIdentifier::Id(id.to_owned()),
                    None => ItemIdentifier::Kafka {
                        partition: message["partition"].as_str()?.to_owned(),
                        offset: message["offset"].as_i64()?,
                    },
                };
                mapping::at_of(&id)
            })
            .collect(),
        None => BTreeSet::new(),
    };
    let findings = check(
        &schedule,
        &checker,
        &patient,
        &items,
        &mapping.destination,
        &queued,
        &log,
    )
    .await;
    report.records = findings.records;
    report.completed = findings.completed;
    report.parked = findings.parked;
    report.produced_bad = findings.produced_bad;
    for cause in mapping.destination_causes.values() {
        *report.causes.entry(cause.clone()).or_default() += 1;
    }
    let setup = match (schedule.poison, schedule.dead_letter_queue) {
        (PoisonPolicy::Report, _) => "report",
        (PoisonPolicy::Park, false) => "park",
        (PoisonPolicy::Park, true) => "park + queue",
    };
    let good = mapping
        .destination_causes
        .values()
        .filter(|cause| !["poison", "keyless or malformed", "reused key"].contains(&cause.as_str()))
        .count() as u64;
    let in_destination = mapping.destination_causes.len() as u64;
    report
        .by_setup
        .insert(setup, [findings.records, in_destination, good]);
    report.dead_lettered = findings.dead_lettered;
    report.repeats = findings.repeats;
    report.invocations = counts.invocations;
    report.resizes = mapping.resizes();
    report.invocation_errors = counts.invocation_errors + counts.aborted + counts.deadline_kills;
    report.bisections = counts.bisections;
    report.writes = log.len() as u64;
    report.violations = mapping.violations.clone();
    report.violations.extend(findings.violations);
    report
        .violations
        .extend(path_violations(&schedule, &log, report.completed));
    report.lock_free_schedules = u64::from(schedule.ledger_mode == LedgerMode::LockFree);
    if schedule.ledger_mode != LedgerMode::LockFree {
        report.reordered_on_locking = counts.reordered;
    }
    report
        .by_source
        .insert(format!("{:?}", schedule.encoding), 1);
    report.violations.extend(log.check(&items));
    report
}

/// The schedule ran the commit path its ledger mode declares: lock-free
/// schedules created their items lock-free (no claim at all: a wrapper that
/// lost the path would show here), locking ones by claims only, batched
/// (claims and fenced writes of several keys per request: one record at a
/// time would show here).
fn path_violations(schedule: &Schedule, log: &WriteLog, completed: u64) -> Vec<String> {
    let paths = log.paths();
    let wrong = match schedule.ledger_mode {
        LedgerMode::LockFree => paths.claims > 0 || (completed > 0 && paths.lock_free == 0),
        LedgerMode::Transactional | LedgerMode::Direct => {
            paths.lock_free > 0 || (paths.claims > 0 && paths.batched == 0)
        }
    };
    wrong
        .then(|| {
            format!(
                "{:?} mode ran another path: {} claims, {} lock-free creations, {} batched writes",
                schedule.ledger_mode, paths.claims, paths.lock_free, paths.batched
            )
        })
        .into_iter()
        .collect()
}

/// `client` with long timeouts and many retries: for the checks' reads.
fn patient(client: &Client) -> Client {
    let config = client
        .config()
        .to_builder()
        .retry_config(RetryConfig::standard().with_max_attempts(10))
        .timeout_config(
            TimeoutConfig::builder()
                .operation_attempt_timeout(Duration::from_secs(10))
                .operation_timeout(Duration::from_secs(60))
                .build(),
        )
        .build();
    Client::from_conf(config)
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |value| {
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number"))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn randomized_schedules_keep_every_invariant() {
    let schedules = env_number("SIM_SCHEDULES", 1000);
    let seed = env_number("SIM_SEED", fastrand::u64(..1 << 48));
    let parallel = env_number("SIM_PARALLEL", 24) as usize;
    let base = support::client().await;
    let started = Instant::now();
    let permits = Arc::new(Semaphore::new(parallel));
    let mut tasks = JoinSet::new();
    let mut total = Report::default();
    let mut failures: Vec<(u64, Vec<String>)> = Vec::new();
    let mut collect = |seed: u64, report: Report| {
        total.add(&report);
        if !report.violations.is_empty() {
            failures.push((seed, report.violations));
        }
    };
    for index in 0..schedules {
        let permit = Arc::clone(&permits).acquire_owned().await;
        let (seed, base) = (seed.wrapping_add(index), base.clone());
        tasks.spawn(async move {
            let _permit = permit;
            let report = tokio::time::timeout(SCHEDULE_LIMIT, run_schedule(seed, base))
                .await
                .unwrap_or_else(|_| Report {
                    violations: vec![format!("did not finish within {SCHEDULE_LIMIT:?}")],
                    ..Report::default()
                });
            (seed, report)
        });
        while let Some(done) = tasks.try_join_next() {
            let (seed, report) = done.expect("a schedule task");
            collect(seed, report);
        }
    }
    while let Some(done) = tasks.join_next().await {
        let (seed, report) = done.expect("a schedule task");
        collect(seed, report);
    }
    let faults: Vec<String> = total
        .faults
        .iter()
        .map(|(kind, count)| format!("{kind} {count}"))
        .collect();
    let share = |n: u64| 100.0 * n as f64 / total.records.max(1) as f64;
    let causes: Vec<String> = total
        .causes
        .iter()
        .map(|(cause, count)| format!("{cause} {count} ({:.1}%)", share(*count)))
        .collect();
    let setups: Vec<String> = total
        .by_setup
        .iter()
        .map(|(setup, [records, destination, good])| {
            let pct = |n: &u64| 100.0 * *n as f64 / (*records).max(1) as f64;
            format!(
                "{setup}: {records} records, {:.1}% in the destination, good ones {:.1}%",
                pct(destination),
                pct(good)
            )
        })
        .collect();
    let summary = format!(
        "simulation: seed {seed}, {schedules} schedules ({} lock-free, path asserted; by source {:?}; \
         {} deliveries overlapping another in another order on the locking path) in {:.1} s, \
         {} invocations ({} invocation errors, {} bisections), \
         faults injected: {} ({}), records checked {} ({} produced bad: {:.1}%; {} completed, \
         {} parked, {} in the destination: {:.1}%, by cause: {}), \
         per poison setup: {}; group sizes changed {} times; writes checked {}, \
         direct-mode repeats {}, violations: {}",
        total.lock_free_schedules,
        total.by_source,
        total.reordered_on_locking,
        started.elapsed().as_secs_f64(),
        total.invocations,
        total.invocation_errors,
        total.bisections,
        total.faults.values().sum::<u64>(),
        faults.join(", "),
        total.records,
        total.produced_bad,
        share(total.produced_bad),
        total.completed,
        total.parked,
        total.dead_lettered,
        share(total.dead_lettered),
        causes.join(", "),
        setups.join("; "),
        total.resizes,
        total.writes,
        total.repeats,
        failures.iter().map(|(_, v)| v.len()).sum::<usize>(),
    );
    // Straight to stderr: shown even when the test passes.
    let _ = writeln!(std::io::stderr(), "{summary}");
    // Several invocations at once in one container were run, not dropped
    // by a change of the mapping (half the schedules share the poller's
    // container with a second poller's invocations).
    if schedules >= 50 {
        let shared = total.faults.get("shared-container").copied().unwrap_or(0);
        assert!(shared > 0, "no invocation shared its container: {summary}");
        // The containers sized their groups from the store's answers (the
        // default sizing, under the schedules' latency and throttling).
        assert!(total.resizes > 0, "no group was ever resized: {summary}");
        // Every source's mapping ran: Kafka's, SQS FIFO's, Kinesis's and
        // RabbitMQ's (whole-batch retries).
        assert_eq!(total.by_source.len(), 4, "a source never ran: {summary}");
        // Deliveries overlapped in another order on the locking path (whose
        // schedules claimed, batched: `path_violations`).
        assert!(
            total.reordered_on_locking > 0,
            "no overlapping delivery in another order on the locking path: {summary}"
        );
    }
    if !failures.is_empty() {
        let details: Vec<String> = failures
            .iter()
            .map(|(seed, violations)| {
                format!(
                    "schedule {seed}: {}\n  reproduce: infra/simulate.sh 1 {seed}",
                    violations.join("; ")
                )
            })
            .collect();
        panic!("{summary}\n{}", details.join("\n"));
    }
}
