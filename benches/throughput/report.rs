//! The printed table and `results.csv`: a row's identity, then every column
//! of `COLUMNS`, then (table only) the speedup, then unfinished records.

use std::fmt::Write as _;

use crate::columns::COLUMNS;
use crate::processor::Mode;
use crate::row::Row;

pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "{:<22} {:<9} {:>3} {:>6} {:>3}",
        "scenario", "mode", "rtt", "recs", "n"
    );
    for column in &COLUMNS {
        let _ = write!(out, " {:>width$}", column.table, width = column.width);
    }
    let _ = writeln!(out, " {:>8} {:>5}", "speedup", "fail");
    for row in rows {
        let baseline = rows.iter().find(|b| {
            b.mode == Mode::Baseline && b.scenario == row.scenario && b.rtt_ms == row.rtt_ms
        });
        let speedup = baseline.map_or_else(
            || "-".to_owned(),
            |b| format!("{:.1}x", b.p(0.5) / row.p(0.5)),
        );
        let _ = write!(
            out,
            "{:<22} {:<9} {:>3} {:>6} {:>3}",
            row.scenario,
            row.mode.name(),
            row.rtt_ms,
            row.records,
            row.batch_ms.len()
        );
        for column in &COLUMNS {
            let _ = write!(
                out,
                " {:>width$.decimals$}",
                (column.value)(row),
                width = column.width,
                decimals = column.table_decimals
            );
        }
        let _ = writeln!(out, " {speedup:>8} {:>5}", row.failures);
    }
    out
}

pub fn csv(rows: &[Row]) -> String {
    let headers: Vec<&str> = COLUMNS.iter().map(|column| column.csv).collect();
    let mut out = format!(
        "scenario,mode,rtt_ms,records,repetitions,{},unfinished_records\n",
        headers.join(",")
    );
    for row in rows {
        let measures: Vec<String> = COLUMNS
            .iter()
            .map(|column| {
                format!(
                    "{:.decimals$}",
                    (column.value)(row),
                    decimals = column.csv_decimals
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{}",
            row.scenario,
            row.mode.name(),
            row.rtt_ms,
            row.records,
            row.batch_ms.len(),
            measures.join(","),
            row.failures,
        );
    }
    out
}
