//! The scenarios, in order, after a warm-up.

use crate::Env;
use crate::batches::Batch;
use crate::measure::{Measure, WARM_UP, measure, measure_grouped};
use crate::processor::Mode;
use crate::row::Row;

/// Simulated round trips of the main scenarios and of the chart.
const RTT_MAIN_MS: [u64; 2] = [0, 5];
const RTT_SWEEP_MS: [u64; 5] = [0, 1, 2, 5, 10];

/// `MAX_RECORDS_PER_TRANSACTION` values of the group-size sweep (99: a hot
/// account's 99 records and its one merged update fill DynamoDB's 100
/// actions; distinct accounts fill it at 50).
pub const GROUP_SIZES: [usize; 4] = [10, 25, 50, 99];

/// A batch generator: the batch of a run's tag.
type MakeBatch = dyn Fn(&str) -> Batch;

/// Every `OVERDRAW_EVERY`-th payment of the overdraft scenario is refused.
const OVERDRAW_EVERY: usize = 50;

/// Warm-up rounds, each a batch of 1,000 new records in every concurrent mode.
const WARM_UP_ROUNDS: usize = 3;

/// Repetitions of a scenario: 3 (scaled by BENCH_REPS), but one for the
/// baseline under a simulated round trip, which takes many seconds a run.
fn slow_once(env: &Env, mode: Mode, rtt: u64) -> usize {
    if mode == Mode::Baseline && rtt > 0 {
        1
    } else {
        env.reps(3)
    }
}

/// Every scenario's rows, after a warm-up that is not recorded.
pub async fn run(env: &Env) -> Vec<Row> {
    // Warm-up (DynamoDB Local is a JVM): not recorded. Its JIT keeps making
    // batches faster for about the first ten batches of 1,000 records (30%
    // to 40% between the fifth and the tenth); fewer would leave the first
    // measurements, or all of a BENCH_ONLY run, on a cold server.
    eprintln!("warm-up...");
    let new_1000 = |tag: &str| Batch::new_payments(tag, 1000, 4);
    for _ in 0..WARM_UP_ROUNDS {
        for mode in Mode::LOCKING.into_iter().chain(Mode::LOCK_FREE) {
            measure(env, WARM_UP, &new_1000, Measure::New, mode, 0, 1).await;
        }
    }
    measure(env, WARM_UP, &new_1000, Measure::New, Mode::Baseline, 0, 1).await;

    let mut rows = Vec::new();
    let big = |tag: &str| Batch::new_payments(tag, 10_000, 4);
    let small = |tag: &str| Batch::new_payments(tag, 100, 4);
    let dup = |tag: &str| Batch::with_duplicates(tag, 1000, 100, 4);
    let chain = |tag: &str| Batch::new_payments(tag, 1000, 1);

    eprintln!("(1) 1,000 new records over 4 partitions, RTT sweep:");
    for rtt in RTT_SWEEP_MS {
        for mode in Mode::ALL {
            let reps = match (mode, rtt) {
                (Mode::Baseline, 0) => env.reps(3),
                (Mode::Baseline, _) => env.reps(1),
                _ => env.reps(5),
            };
            rows.extend(
                measure(env, "new-1000x4p", &new_1000, Measure::New, mode, rtt, reps).await,
            );
        }
    }
    eprintln!("(2) the same batch replayed:");
    for rtt in RTT_MAIN_MS {
        for mode in Mode::ALL {
            let reps = slow_once(env, mode, rtt);
            rows.extend(measure(env, "1000x4p", &new_1000, Measure::Replay, mode, rtt, reps).await);
        }
    }
    eprintln!("(3) 1,000 records with 10% in-batch duplicates:");
    for rtt in RTT_MAIN_MS {
        for mode in Mode::ALL {
            let reps = slow_once(env, mode, rtt);
            rows.extend(measure(env, "dup10-1000x4p", &dup, Measure::New, mode, rtt, reps).await);
        }
    }
    eprintln!("(4) 10,000 new records over 4 partitions (baseline only without RTT):");
    for rtt in RTT_MAIN_MS {
        for mode in Mode::ALL {
            if mode == Mode::Baseline && rtt > 0 {
                continue;
            }
            rows.extend(measure(env, "new-10000x4p", &big, Measure::New, mode, rtt, 1).await);
        }
    }
    eprintln!("(5) a long chain: 1,000 records in one partition:");
    for rtt in RTT_MAIN_MS {
        for mode in Mode::ALL {
            let reps = slow_once(env, mode, rtt);
            rows.extend(measure(env, "chain-1000x1p", &chain, Measure::New, mode, rtt, reps).await);
        }
    }
    eprintln!("(6) 100 new records over 4 partitions (time per record vs batch size):");
    for rtt in RTT_MAIN_MS {
        for mode in Mode::ALL {
            rows.extend(
                measure(
                    env,
                    "new-100x4p",
                    &small,
                    Measure::New,
                    mode,
                    rtt,
                    env.reps(10),
                )
                .await,
            );
        }
    }

    eprintln!("(7) hot items: 1,000 payments over 4 partitions to ONE account:");
    let hot = |tag: &str| Batch::hot_payments(tag, 1000, 4, None);
    for rtt in RTT_MAIN_MS {
        for mode in Mode::LOCK_FREE.into_iter().chain([Mode::Partition]) {
            rows.extend(
                measure(
                    env,
                    "hot-1000x4p",
                    &hot,
                    Measure::New,
                    mode,
                    rtt,
                    env.reps(3),
                )
                .await,
            );
        }
        // Each record in a transaction of its own: what a hot account cost
        // before its increments merged.
        for mode in [Mode::LockFreePartition, Mode::LockFreeKey] {
            let reps = env.reps(2);
            let one = Some(1);
            rows.extend(
                measure_grouped(
                    env,
                    "hot-1000x4p-1pertx",
                    &hot,
                    Measure::New,
                    mode,
                    rtt,
                    reps,
                    one,
                )
                .await,
            );
        }
    }
    eprintln!("(8) group size (MAX_RECORDS_PER_TRANSACTION), lock-free, 5 ms round trip:");
    let debit = |tag: &str| Batch::hot_payments(tag, 1000, 4, Some(OVERDRAW_EVERY));
    for group in GROUP_SIZES {
        let scenarios: [(&str, &MakeBatch); 3] = [
            ("new-1000x4p", &new_1000),
            ("hot-1000x4p", &hot),
            ("overdraw-1000x4p", &debit),
        ];
        for (scenario, make) in scenarios {
            let name: &'static str = Box::leak(format!("{scenario}-g{group}").into_boxed_str());
            for mode in [Mode::LockFreePartition, Mode::LockFreeKey] {
                let reps = env.reps(3);
                rows.extend(
                    measure_grouped(env, name, make, Measure::New, mode, 5, reps, Some(group))
                        .await,
                );
            }
        }
    }

    rows
}
