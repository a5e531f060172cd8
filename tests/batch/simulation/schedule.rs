//! A schedule, generated from one seed: what the producer wrote to each
//! partition, how the event source mapping and the function are configured,
//! and which faults are switched on (with what probability).

use std::time::Duration;

use exactly_once::engine::PoisonPolicy;
use exactly_once::lambda::OrderingMode;
use ledger::LedgerMode;

use crate::support::faults::FaultPlan;
use crate::support::msk::payment_json;
use crate::support::sources::Encoding;

/// Every ledger mode the simulator runs. A new mode is added here.
pub const LEDGER_MODES: &[LedgerMode] = &[
    LedgerMode::LockFree,
    LedgerMode::Transactional,
    LedgerMode::Direct,
];

/// A record as the producer wrote it; its offset is its index in the log.
#[derive(Debug, Clone)]
pub struct Produced {
    /// The `idempotency-key` header (none: the record is rejected).
    pub key: Option<String>,
    pub value: Vec<u8>,
}

/// Faults outside DynamoDB, each a probability (0 = off).
#[derive(Debug, Clone, Default)]
pub struct Chaos {
    /// Per invocation: the task is aborted after a random time (a crash
    /// between any two steps of its records).
    pub abort: f64,
    pub abort_within_ms: u64,
    /// Per invocation: a short deadline; Lambda ends the invocation there.
    pub short_deadline: f64,
    /// Per handler call: the business logic is slower than the lock.
    pub slow_handler: f64,
    /// Per batch: a second poller delivers the same batch at the same time
    /// (as after a rebalance).
    pub concurrent_poller: f64,
    /// The second poller's invocations run in the poller's own container,
    /// at the same time as its invocation (Lambda Managed Instances: one
    /// execution environment serves several invocations at once); a crash
    /// ends them all.
    pub shared_container: bool,
    /// Per batch: a partition's committed offset goes back, so an already
    /// committed range comes again.
    pub rewind: f64,
    /// Each container's clock is off by up to this, either way (0: off);
    /// at most a quarter of the lock.
    pub clock_skew_ms: u64,
}

#[derive(Debug, Clone)]
pub struct Schedule {
    pub seed: u64,
    pub ledger_mode: LedgerMode,
    pub ordering: OrderingMode,
    /// The log of each partition `payments-<index>`.
    pub partitions: Vec<Vec<Produced>>,
    /// The accounts the payments go to (unique to this schedule).
    pub accounts: Vec<String>,
    /// Lambda's `BatchSize`.
    pub batch_size: usize,
    /// `MaximumRetryAttempts`.
    pub max_retries: u32,
    /// `BisectBatchOnFunctionError`.
    pub bisect: bool,
    pub lock_timeout: Duration,
    /// The function's timeout: every invocation's deadline, unless a short
    /// deadline (chaos) comes first. Longer than a lease plus the safety
    /// margin, as the template's defaults are (120 s against 30 s + 5 s).
    pub function_timeout: Duration,
    pub safety_margin: Duration,
    pub poison: PoisonPolicy,
    /// Parked records (and, then, refused ones) go whole to a dead-letter
    /// queue (an SQS queue on moto's server).
    pub dead_letter_queue: bool,
    pub claim_ahead: usize,
    pub dynamo: FaultPlan,
    pub chaos: Chaos,
    /// Whose events the mapping delivers: Kafka's (a log per partition), an
    /// SQS FIFO queue's (a message group per partition) or Kinesis's (a
    /// shard per partition, one shard per batch).
    pub encoding: Encoding,
}

/// `probability` with a chance of `on` of being switched on at all.
fn maybe(rng: &mut fastrand::Rng, on: f64, low: f64, high: f64) -> f64 {
    if rng.f64() < on {
        low + rng.f64() * (high - low)
    } else {
        0.0
    }
}

impl Schedule {
    /// The schedule of `seed`; `run_id` makes its accounts unique.
    pub fn generate(seed: u64, run_id: &str) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let accounts: Vec<String> = (0..rng.usize(1..=3))
            .map(|index| format!("acc-sim-{run_id}-{index}"))
            .collect();
        let mut partitions: Vec<Vec<Produced>> = vec![Vec::new(); rng.usize(1..=3)];
        let mut payments: Vec<Produced> = Vec::new();
        for index in 0..rng.usize(4..=20) {
            let roll = rng.f64();
            let key = format!("p{index}");
            let account = &accounts[rng.usize(..accounts.len())];
            let amount = rng.i64(1..=1000);
            let record = if roll < 0.10 && !payments.is_empty() {
                // The producer retried: the same payment again.
                payments[rng.usize(..payments.len())].clone()
            } else if roll < 0.13 && !payments.is_empty() {
                // A key reused with another payload: rejected, never applied.
                let reused = payments[rng.usize(..payments.len())].key.clone();
                let id = reused.clone().unwrap_or_default();
                Produced {
                    key: reused,
                    value: payment_json(&id, account, amount).into_bytes(),
                }
            } else if roll < 0.16 {
                // Poison: not a payment (FAILED).
                Produced {
                    key: Some(key),
                    value: b"{not a payment".to_vec(),
                }
            } else if roll < 0.18 {
                // No idempotency key: rejected.
                Produced {
                    key: None,
                    value: payment_json(&key, account, amount).into_bytes(),
                }
            } else {
                let payment = Produced {
                    value: payment_json(&key, account, amount).into_bytes(),
                    key: Some(key),
                };
                payments.push(payment.clone());
                payment
            };
            let partition = rng.usize(..partitions.len());
            partitions[partition].push(record);
        }
        let lock_timeout = Duration::from_millis(rng.u64(300..=800));
        let safety_margin = Duration::from_millis(rng.u64(20..=300));
        Self {
            seed,
            ledger_mode: LEDGER_MODES[rng.usize(..LEDGER_MODES.len())],
            ordering: [
                OrderingMode::Partition,
                OrderingMode::Key,
                OrderingMode::Unordered,
            ][rng.usize(..3)],
            partitions,
            accounts,
            batch_size: rng.usize(1..=10),
            max_retries: rng.u32(2..=6),
            bisect: rng.bool(),
            lock_timeout,
            function_timeout: lock_timeout * rng.u32(3..=6) + safety_margin,
            safety_margin,
            poison: [PoisonPolicy::Park, PoisonPolicy::Report][rng.usize(..2)],
            dead_letter_queue: rng.bool(),
            claim_ahead: rng.usize(1..=4),
            dynamo: FaultPlan {
                throttle: maybe(&mut rng, 0.3, 0.01, 0.08),
                server_error: maybe(&mut rng, 0.3, 0.01, 0.05),
                dispatch_failure: maybe(&mut rng, 0.2, 0.01, 0.04),
                response_lost: maybe(&mut rng, 0.3, 0.01, 0.05),
                latency: maybe(&mut rng, 0.3, 0.05, 0.3),
                latency_ms: (5, 120),
                // As DynamoDB in AWS: concurrent transactions on one item
                // (a hot account) cancel each other.
                transaction_conflicts: true,
                ..FaultPlan::default()
            },
            chaos: Chaos {
                abort: maybe(&mut rng, 0.3, 0.05, 0.25),
                abort_within_ms: rng.u64(5..=200),
                short_deadline: maybe(&mut rng, 0.2, 0.05, 0.25),
                slow_handler: maybe(&mut rng, 0.2, 0.05, 0.2),
                concurrent_poller: maybe(&mut rng, 0.3, 0.1, 0.4),
                shared_container: rng.bool(),
                rewind: maybe(&mut rng, 0.3, 0.05, 0.2),
                clock_skew_ms: if rng.f64() < 0.3 {
                    rng.u64(1..=lock_timeout.as_millis() as u64 / 4)
                } else {
                    0
                },
            },
            // A draw of its own, so that a seed's other choices stay as they were.
            encoding: [
                Encoding::Kafka,
                Encoding::Kafka,
                Encoding::SqsFifo,
                Encoding::Kinesis,
                Encoding::RabbitMq,
            ][fastrand::Rng::with_seed(seed ^ 0x5ce5_0f1e_5eed).usize(..5)],
        }
    }

    pub fn partition_name(index: usize) -> String {
        format!("payments-{index}")
    }
}
