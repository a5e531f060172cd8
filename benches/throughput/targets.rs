//! The targets, each MET or MISSED.

use std::fmt::Write as _;

use crate::processor::Mode;
use crate::row::Row;

pub fn targets(rows: &[Row]) -> String {
    let find = |scenario: &str, mode: Mode, rtt: u64| {
        rows.iter()
            .find(|r| r.scenario == scenario && r.mode == mode && r.rtt_ms == rtt)
    };
    let mut out = String::new();
    let mut line = |met: Option<bool>, text: String| {
        let mark = match met {
            Some(true) => "MET   ",
            Some(false) => "MISSED",
            None => "n/a   ",
        };
        let _ = writeln!(out, "[{mark}] {text}");
    };
    for mode in Mode::LOCKING {
        if let Some(r) = find("new-1000x4p", mode, 0) {
            let put = r.per_record(Some("PutItem"));
            let txn = r.per_record(Some("TransactWriteItems"));
            let upd = r.per_record(Some("UpdateItem"));
            let bget = r.requests.get("BatchGetItem").copied().unwrap_or(0) as f64
                / r.batch_ms.len() as f64;
            let writes = put + txn + upd;
            line(
                Some((writes - 2.0).abs() < 1e-9),
                format!(
                    "2 writes per new record ({}): {writes:.3} (PutItem {put:.3} + TransactWriteItems {txn:.3} + UpdateItem {upd:.3}), BatchGetItem {bget:.1} per batch, {:.4} requests per record in all",
                    mode.name(),
                    r.per_record(None)
                ),
            );
        }
    }
    for mode in Mode::LOCK_FREE {
        if let Some(r) = find("new-1000x4p", mode, 0) {
            let writes: f64 = ["PutItem", "TransactWriteItems", "UpdateItem"]
                .iter()
                .map(|op| r.per_record(Some(op)))
                .sum();
            line(
                Some(writes <= 1.0),
                format!(
                    "at most 1 write request per new record on the lock-free path ({}): {writes:.3} TransactWriteItems, {:.4} requests per record in all",
                    mode.name(),
                    r.per_record(None)
                ),
            );
        }
    }
    for scenario in ["replay-cold-1000x4p", "replay-warm-1000x4p"] {
        for mode in Mode::LOCKING.into_iter().chain(Mode::LOCK_FREE) {
            if let Some(r) = find(scenario, mode, 0) {
                let v = r.per_record(None);
                line(
                    Some(v <= 0.02),
                    format!(
                        "replayed batch <= 0.02 requests/record ({scenario}, {}): {v:.4}",
                        mode.name()
                    ),
                );
            }
        }
    }
    for (mode, than, wanted) in [
        (Mode::Partition, Mode::Baseline, 6.0),
        (Mode::Key, Mode::Baseline, 25.0),
        (Mode::LockFreePartition, Mode::Baseline, 6.0),
        (Mode::LockFreeKey, Mode::Baseline, 25.0),
        (Mode::LockFreePartition, Mode::Partition, 2.0),
    ] {
        let (b, m) = (find("new-1000x4p", than, 5), find("new-1000x4p", mode, 5));
        if let (Some(b), Some(m)) = (b, m) {
            let speedup = b.p(0.5) / m.p(0.5);
            line(
                Some(speedup >= wanted),
                format!(
                    "5 ms RTT, 1,000 new records over 4 partitions, {} >= {wanted}x faster than {}: {speedup:.1}x ({:.0} ms vs {:.0} ms)",
                    mode.name(),
                    than.name(),
                    m.p(0.5),
                    b.p(0.5)
                ),
            );
        }
    }
    for mode in [Mode::Partition, Mode::LockFreePartition] {
        let sizes: Vec<(usize, f64)> = ["new-100x4p", "new-1000x4p", "new-10000x4p"]
            .iter()
            .filter_map(|s| find(s, mode, 5))
            .map(|r| (r.records, r.ms_per_record()))
            .collect();
        if sizes.len() < 3 {
            continue;
        }
        let min = sizes.iter().map(|s| s.1).fold(f64::MAX, f64::min);
        let max = sizes.iter().map(|s| s.1).fold(0.0, f64::max);
        let text: Vec<String> = sizes
            .iter()
            .map(|(n, ms)| format!("{n}: {ms:.3} ms"))
            .collect();
        line(
            Some(max <= min * 1.25),
            format!(
                "time per record within 25% from 100 to 10,000 records ({}, 5 ms RTT): {} (max/min {:.2})",
                mode.name(),
                text.join(", "),
                max / min
            ),
        );
    }
    for mode in Mode::LOCK_FREE {
        if let Some(hot) = find("hot-1000x4p", mode, 5) {
            let v = hot.per_record(None);
            line(
                Some(v <= 0.15),
                format!(
                    "one hot account, 5 ms RTT, <= 0.15 requests per record ({}): {v:.3}",
                    mode.name()
                ),
            );
            if let Some(alone) = find("hot-1000x4p-1pertx", mode, 5) {
                let speedup = alone.p(0.5) / hot.p(0.5);
                line(
                    Some(speedup >= 3.0),
                    format!(
                        "one hot account, 5 ms RTT, >= 3x faster than a transaction per record ({}): {speedup:.1}x ({:.0} ms vs {:.0} ms)",
                        mode.name(),
                        hot.p(0.5),
                        alone.p(0.5)
                    ),
                );
            }
        }
        if let (Some(floor), Some(at5)) =
            (find("new-1000x4p", mode, 0), find("new-1000x4p", mode, 5))
        {
            let ratio = at5.p(0.5) / floor.p(0.5);
            line(
                Some(ratio <= 1.5),
                format!(
                    "200 accounts, 5 ms RTT within 1.5x of the store's floor at 0 ms ({}): {ratio:.2}x ({:.0} ms vs {:.0} ms)",
                    mode.name(),
                    at5.p(0.5),
                    floor.p(0.5)
                ),
            );
        }
    }
    let hot_rows = rows
        .iter()
        .filter(|r| r.scenario.starts_with("hot-") || r.scenario.starts_with("overdraw-"));
    let (measured, overlaps) = hot_rows.fold((0, 0), |(n, o), r| (n + 1, o + r.overlaps));
    if measured > 0 {
        line(
            Some(overlaps == 0),
            format!(
                "no transaction on the hot account while another is in flight (what AWS cancels as TransactionConflict), {measured} rows: {overlaps}"
            ),
        );
    }
    let unfinished: usize = rows.iter().map(|r| r.failures).sum();
    line(
        Some(unfinished == 0),
        format!("every record finished in every scenario: {unfinished} not finished"),
    );
    out
}
