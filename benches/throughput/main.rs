//! Throughput of the real MSK function against DynamoDB Local.
//!
//!     infra/bench.sh                  # starts DynamoDB Local, creates the tables, runs this
//!
//! Drives `BatchFunction::handle` (the code the Lambda runs) over generated MSK
//! batches, and a baseline that processes the same records strictly one after
//! another with `Engine::run_once` (one claim and one completion each, no
//! pre-check, no cache, no claim-ahead), the way common idempotency libraries
//! do. Prints per scenario, mode and simulated round trip: records per second,
//! DynamoDB requests per record by operation (counted by the SDK interceptor
//! `RequestCounter`, every HTTP request sent, retries included), capacity
//! units per record (counted by the test support's `CapacityCounter`), p50/p99
//! batch latency. Writes `bench/results.csv` and `bench/batch-time-vs-rtt.svg`;
//! the per-source comparison with Powertools (`sources.rs`) writes
//! `bench/sources.csv`.
//!
//! DynamoDB Local on loopback answers in about a millisecond; in AWS a request
//! costs a network round trip of several. Every DynamoDB HTTP request of the
//! benchmark's clients first waits the simulated round trip (`DelayedHttpClient`,
//! a wrapper around the SDK's HTTP connector), so concurrency shows as it would.
//!
//! Environment: IDEMPOTENCY_TABLE, LEDGER_TABLE and AWS_ENDPOINT_URL_DYNAMODB
//! (set by infra/bench.sh); BENCH_REPS multiplies the repetitions (default 1;
//! 0.5 halves them, at least one each); BENCH_OUT is the output directory
//! (default `bench`); BENCH_ONLY, comma-separated substrings of
//! `<scenario>/<mode>/<rtt>ms` (e.g. `new-1000x4p/key/5ms`), runs only the
//! measurements that match one (after the warm-up) and writes no files but
//! those of `sizing` (`sizing/<scenario>/<mode>/<rtt>ms`) and `sources`
//! (`sources/<scenario>/<path>/<rtt>ms`); `announce` runs only the rows
//! announcing every payment to SQS (`announce/new-1000x4p/<mode>/5ms`,
//! which needs AWS_ENDPOINT_URL_SQS) and to a Kafka topic
//! (`announce-kafka/new-1000x4p/<mode>/5ms`, which needs
//! KAFKA_BOOTSTRAP_SERVERS; `announce-kafka` runs only those);
//! MAX_IN_FLIGHT and CLAIM_AHEAD, if set, configure the function as in Lambda.

mod announce;
mod batches;
// Shared with tests/batch/throughput.rs; the benchmark uses part of it.
#[allow(dead_code)]
#[path = "../../tests/support/capacity.rs"]
mod capacity;
mod chart;
mod columns;
mod containers;
mod latency;
mod measure;
mod processor;
mod report;
mod row;
mod scenarios;
mod sizing;
mod source_events;
mod sources;
mod targets;
// Shared with tests/support/faults.rs; the benchmark uses part of it.
#[allow(dead_code)]
#[path = "../../tests/support/transactions.rs"]
mod transactions;

use std::path::PathBuf;
use std::time::Instant;

use aws_sdk_dynamodb::Client;

/// The run's client, tables and counters.
struct Env {
    base: Client,
    idempotency_table: String,
    ledger_table: String,
    run_id: String,
    /// Makes every key prefix and account of the run unique.
    sequence: std::cell::Cell<u64>,
    reps_factor: f64,
    /// BENCH_ONLY's substrings (empty: everything).
    only: Vec<String>,
}

impl Env {
    fn fresh_tag(&self) -> String {
        let n = self.sequence.get();
        self.sequence.set(n + 1);
        format!("{}-{n}", self.run_id)
    }

    fn reps(&self, wanted: usize) -> usize {
        ((wanted as f64 * self.reps_factor).round() as usize).max(1)
    }

    /// Whether BENCH_ONLY selects the measurement `label`.
    fn selected(&self, label: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|part| label.contains(part.as_str()))
    }

    /// Whether BENCH_ONLY selects some measurement labelled `<group>/...`.
    fn selected_under(&self, group: &str) -> bool {
        self.selected(group)
            || (self.only.iter()).any(|part| part.starts_with(&format!("{group}/")))
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(run());
}

async fn run() {
    let var = |name: &str| {
        std::env::var(name)
            .unwrap_or_else(|_| panic!("{name} is not set: run the benchmark with infra/bench.sh"))
    };
    let env = Env {
        base: exactly_once::aws::dynamodb_client().await,
        idempotency_table: var("IDEMPOTENCY_TABLE"),
        ledger_table: var("LEDGER_TABLE"),
        run_id: format!(
            "{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_millis()
        ),
        sequence: std::cell::Cell::new(0),
        reps_factor: std::env::var("BENCH_REPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1.0),
        only: std::env::var("BENCH_ONLY")
            .map(|only| only.split(',').map(str::to_owned).collect())
            .unwrap_or_default(),
    };
    let out_dir = PathBuf::from(std::env::var("BENCH_OUT").unwrap_or_else(|_| "bench".into()));
    let started = Instant::now();

    // The simulated round trip really applies.
    eprintln!("simulated round trip check (100 sequential GetItem each):");
    for rtt in [0, 5] {
        let (ms, served) = measure::get_item_ms(&env, rtt, 100).await;
        eprintln!(
            "  rtt {rtt} ms: {ms:.2} ms per GetItem, of which {served:.2} ms in DynamoDB Local: {:.2} ms added",
            ms - served
        );
        assert!(ms - served >= rtt as f64 * 0.9, "the delay is not applied");
    }

    let rows = scenarios::run(&env).await;
    eprintln!("(9) invocations at once: one container against as many containers:");
    let containers = containers::run(&env).await;
    eprintln!("(10) the default sizing against Powertools, and the overload:");
    let sized = match env.selected_under("sizing") {
        true => sizing::run(&env).await,
        false => Vec::new(),
    };
    eprintln!("(11) per source, against Powertools' BatchProcessor:");
    let sourced = sources::run(&env).await;
    eprintln!(
        "(12) announcing every payment (exactly once out), against Powertools + send_message:"
    );
    let announced = announce::run(&env).await;

    println!();
    println!(
        "DynamoDB requests per record counted by RequestCounter (every HTTP request, retries included);"
    );
    println!(
        "batch time p50/p99 over n repetitions (nearest rank: with few repetitions p99 is the slowest); rec/s = records / p50."
    );
    println!("speedup = baseline p50 / p50 for the same scenario and RTT.");
    println!(
        "ddb ms = mean time a request spent in DynamoDB Local (loopback, queueing, work), without the simulated RTT."
    );
    println!(
        "RCU/rec, WCU/rec = read and write capacity units per record, as DynamoDB Local reports them (ReturnConsumedCapacity=TOTAL)."
    );
    println!();
    print!("{}", report::table(&rows));
    println!();
    print!("{}", targets::targets(&rows));
    println!();
    print!("{}", containers::table(&containers));
    println!();
    let (powertools, others) = (sizing::powertools(&out_dir), sizing::other_stores(&out_dir));
    print!("{}", sizing::table(&sized, &powertools, &others));
    println!();
    if env.only.is_empty() {
        std::fs::create_dir_all(&out_dir).expect("output directory");
        let csv_path = out_dir.join("results.csv");
        std::fs::write(&csv_path, report::csv(&rows)).expect("write results.csv");
        let svg_path = out_dir.join("batch-time-vs-rtt.svg");
        chart::chart(&rows, "new-1000x4p", &svg_path).expect("chart");
        let hot_path = out_dir.join("hot-account.svg");
        chart::hot_chart(&rows, 5, &hot_path).expect("chart");
        let containers_path = out_dir.join("containers.csv");
        std::fs::write(&containers_path, containers::csv(&containers))
            .expect("write containers.csv");
        println!(
            "wrote {}, {} and {}",
            csv_path.display(),
            svg_path.display(),
            hot_path.display()
        );
    }
    if !sourced.is_empty() {
        let by_source = sources::powertools(&out_dir);
        print!("{}", sources::table(&sourced, &by_source));
        println!();
        std::fs::create_dir_all(&out_dir).expect("output directory");
        let path = out_dir.join("sources.csv");
        let text = sources::merged_csv(&path, &sources::csv(&sourced, &by_source));
        std::fs::write(&path, text).expect("write sources.csv");
        println!("wrote {}", path.display());
    }
    for out in [announce::Out::Sqs, announce::Out::Kafka] {
        if announced.iter().any(|row| row.out == out) {
            let powertools = announce::powertools(&out_dir, out);
            print!("{}", announce::table(&announced, out, powertools));
            println!();
        }
    }
    // The chart draws the whole sizing run: `sizing/` is selected only when
    // all of it is.
    if !sized.is_empty() && env.selected("sizing/") {
        std::fs::create_dir_all(&out_dir).expect("output directory");
        let path = out_dir.join("group-size.svg");
        sizing::chart(&sized, &path).expect("chart");
        println!("wrote {}", path.display());
    }
    println!("in {:.0} s", started.elapsed().as_secs_f64());
}
