//! Transaction groups sized by the store's answers, with the DEFAULT
//! configuration (no `MAX_RECORDS_PER_TRANSACTION` of one's own): one hot
//! account and 200 accounts against AWS Powertools (Python) on the same
//! batches (`benches/powertools/bench.py`, run first by infra/bench.sh, which
//! writes `bench/powertools.csv`), with DynamoDB Local's floor (0 ms RTT)
//! beside each row; and the overload of 10,000 records in `key` order. Each
//! batch goes to a fresh container (its sizing starts at 10). Draws the
//! group size over time of the hot account and of the overload
//! (`bench/group-size.svg`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use exactly_once::engine::Resized;
use exactly_once::store::requests::RequestCounter;
use plotters::prelude::*;

use crate::Env;
use crate::batches::Batch;
use crate::latency::{ServiceTime, client_with};
use crate::processor::{Mode, Processor};

/// One measured scenario, at one round trip.
pub struct SizingRow {
    pub scenario: &'static str,
    pub rtt_ms: u64,
    pub records: usize,
    pub batch_ms: Vec<f64>,
    pub requests: u64,
    pub unfinished: usize,
    /// The group sizes of the last repetition, ms from its start.
    pub sizes: Vec<(f64, usize)>,
}

impl SizingRow {
    pub fn p50(&self) -> f64 {
        let mut sorted = self.batch_ms.clone();
        sorted.sort_by(f64::total_cmp);
        sorted[(sorted.len() - 1) / 2]
    }

    pub fn requests_per_record(&self) -> f64 {
        self.requests as f64 / (self.records * self.batch_ms.len()).max(1) as f64
    }
}

/// The scenarios of the targets.
pub async fn run(env: &Env) -> Vec<SizingRow> {
    let hot = |tag: &str| Batch::hot_payments(tag, 1000, 4, None);
    let spread = |tag: &str| Batch::new_payments(tag, 1000, 4);
    let overload = |tag: &str| Batch::new_payments(tag, 10_000, 4);
    let mut rows = Vec::new();
    for rtt in [5, 0] {
        for (scenario, make) in [
            ("hot-1000x4p", &hot as &dyn Fn(&str) -> Batch),
            ("new-1000x4p", &spread),
        ] {
            rows.push(
                measure(
                    env,
                    scenario,
                    make,
                    Mode::LockFreePartition,
                    rtt,
                    env.reps(3),
                )
                .await,
            );
        }
    }
    rows.push(measure(env, "new-10000x4p", &overload, Mode::LockFreeKey, 5, 1).await);
    rows
}

async fn measure(
    env: &Env,
    scenario: &'static str,
    make: &dyn Fn(&str) -> Batch,
    mode: Mode,
    rtt_ms: u64,
    reps: usize,
) -> SizingRow {
    let counter = RequestCounter::default();
    let client = client_with(&env.base, rtt_ms, &counter, &ServiceTime::default());
    let mut row = SizingRow {
        scenario,
        rtt_ms,
        records: 0,
        batch_ms: Vec::new(),
        requests: 0,
        unfinished: 0,
        sizes: Vec::new(),
    };
    for _ in 0..reps {
        let tag = env.fresh_tag();
        let batch = make(&tag);
        row.records = batch.len();
        let (event, works) = (batch.event(), batch.works());
        // The default configuration: no group size of its own.
        let processor = Processor::new(env, &client, mode, &format!("bench-{tag}#"), None);
        counter.reset();
        let started = Instant::now();
        row.unfinished += processor.process(&batch, &event, &works).await;
        row.batch_ms.push(ms(started.elapsed()));
        row.requests += counter.total();
        row.sizes = match &processor {
            Processor::Function(function) => timeline(&function.engine().group_sizes(), started),
            Processor::Baseline(_) => Vec::new(),
        };
    }
    eprintln!(
        "  {:<14} {:<18} rtt {rtt_ms} ms: p50 {:>7.0} ms  {:.3} req/record  sizes {}..{}{}",
        scenario,
        mode.name(),
        row.p50(),
        row.requests_per_record(),
        row.sizes.iter().map(|(_, s)| *s).min().unwrap_or(0),
        row.sizes.iter().map(|(_, s)| *s).max().unwrap_or(0),
        match row.unfinished {
            0 => String::new(),
            n => format!("  ({n} records NOT finished)"),
        }
    );
    row
}

/// A container's group sizes, ms after `started` (the start at 0).
fn timeline(history: &[Resized], started: Instant) -> Vec<(f64, usize)> {
    history
        .iter()
        .map(|resized| {
            let at = resized.at.saturating_duration_since(started);
            (ms(at), resized.size)
        })
        .collect()
}

fn ms(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1000.0
}

/// Powertools' p50 and requests per record by scenario, at 5 ms, from
/// `bench/powertools.csv` (written by benches/powertools/bench.py).
pub fn powertools(out_dir: &Path) -> BTreeMap<String, (f64, f64)> {
    let Ok(text) = std::fs::read_to_string(out_dir.join("powertools.csv")) else {
        return BTreeMap::new();
    };
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            Some((
                fields.first()?.to_string(),
                (fields.get(3)?.parse().ok()?, fields.get(5)?.parse().ok()?),
            ))
        })
        .collect()
}

/// The table against Powertools, the floor beside each row, and the targets.
pub fn table(rows: &[SizingRow], powertools: &BTreeMap<String, (f64, f64)>) -> String {
    let mut out = String::from(
        "| default configuration, 5 ms RTT | p50 | requests / record | Powertools p50 | vs Powertools | floor (0 ms) |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    let at = |scenario: &str, rtt: u64| {
        rows.iter()
            .find(|r| r.scenario == scenario && r.rtt_ms == rtt)
    };
    let mut targets = Vec::new();
    for (scenario, label, wanted) in [
        (
            "hot-1000x4p",
            "1,000 payments to ONE account, 4 partitions",
            30.0,
        ),
        (
            "new-1000x4p",
            "1,000 payments to 200 accounts, 4 partitions",
            35.0,
        ),
    ] {
        let (Some(row), floor) = (at(scenario, 5), at(scenario, 0)) else {
            continue;
        };
        let versus = powertools.get(scenario).map(|(p50, _)| p50 / row.p50());
        out.push_str(&format!(
            "| {label} | {:.0} ms | {:.3} | {} | {} | {} |\n",
            row.p50(),
            row.requests_per_record(),
            powertools
                .get(scenario)
                .map_or("-".into(), |(p50, _)| format!("{p50:.0} ms")),
            versus.map_or("-".into(), |x| format!("{x:.1}x")),
            floor.map_or("-".into(), |f| format!("{:.0} ms", f.p50())),
        ));
        targets.push(match versus {
            Some(x) if x >= wanted => {
                format!("[MET   ] {scenario}: {x:.1}x Powertools (target {wanted}x)")
            }
            Some(x) => format!("[MISSED] {scenario}: {x:.1}x Powertools (target {wanted}x)"),
            None => format!("[  -   ] {scenario}: no bench/powertools.csv"),
        });
    }
    if let Some(hot) = at("hot-1000x4p", 5) {
        let per = hot.requests_per_record();
        let met = if per <= 0.05 { "MET   " } else { "MISSED" };
        targets.push(format!(
            "[{met}] hot account: {per:.3} requests per record (target <= 0.05)"
        ));
    }
    if let Some(overload) = rows.iter().find(|r| r.scenario == "new-10000x4p") {
        let met = if overload.unfinished == 0 {
            "MET   "
        } else {
            "MISSED"
        };
        targets.push(format!(
            "[{met}] 10,000 records in key order: {} reported (target 0), p50 {:.0} ms, {:.3} requests per record",
            overload.unfinished,
            overload.p50(),
            overload.requests_per_record()
        ));
    }
    out.push('\n');
    out.push_str(&targets.join("\n"));
    out.push('\n');
    out
}

/// The group size over time of the hot account and of the overload.
pub fn chart(rows: &[SizingRow], path: &Path) -> Result<(), String> {
    let series: Vec<(&str, &SizingRow)> = [
        ("one hot account, 1,000 payments", "hot-1000x4p", 5),
        ("10,000 records in key order (overload)", "new-10000x4p", 5),
    ]
    .into_iter()
    .filter_map(|(label, scenario, rtt)| {
        rows.iter()
            .find(|r| r.scenario == scenario && r.rtt_ms == rtt)
            .map(|row| (label, row))
    })
    .collect();
    let end = series
        .iter()
        .map(|(_, row)| row.batch_ms.last().copied().unwrap_or(1.0))
        .fold(1.0, f64::max);
    let root = SVGBackend::new(path, (800, 420)).into_drawing_area();
    let error = |err: &dyn std::fmt::Display| err.to_string();
    root.fill(&WHITE).map_err(|e| error(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Records per lock-free transaction, learned from DynamoDB's answers (5 ms RTT)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..end, 0usize..100usize)
        .map_err(|e| error(&e))?;
    chart
        .configure_mesh()
        .x_desc("ms since the batch started")
        .y_desc("group size (records)")
        .draw()
        .map_err(|e| error(&e))?;
    for (index, (label, row)) in series.iter().enumerate() {
        let color = Palette99::pick(index).to_rgba();
        // A step line: a size holds until the next change.
        let mut points = Vec::new();
        for pair in row.sizes.windows(2) {
            points.push(pair[0]);
            points.push((pair[1].0, pair[0].1));
        }
        if let Some(&(at, size)) = row.sizes.last() {
            points.push((at, size));
            points.push((row.batch_ms.last().copied().unwrap_or(at), size));
        }
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| error(&e))?
            .label(*label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .draw()
        .map_err(|e| error(&e))?;
    root.present().map_err(|e| error(&e))
}
