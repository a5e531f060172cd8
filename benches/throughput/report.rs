//! The printed table and `results.csv`.

use std::fmt::Write as _;

use crate::processor::Mode;
use crate::row::Row;

pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:<9} {:>3} {:>6} {:>3} {:>10} {:>10} {:>9} {:>8} {:>7} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>8} {:>5}",
        "scenario",
        "mode",
        "rtt",
        "recs",
        "n",
        "p50 ms",
        "p99 ms",
        "rec/s",
        "ms/rec",
        "req/rec",
        "Put",
        "Upd",
        "Txn",
        "BGet",
        "other",
        "ddb ms",
        "speedup",
        "fail"
    );
    for row in rows {
        let baseline = rows.iter().find(|b| {
            b.mode == Mode::Baseline && b.scenario == row.scenario && b.rtt_ms == row.rtt_ms
        });
        let speedup = baseline.map_or_else(
            || "-".to_owned(),
            |b| format!("{:.1}x", b.p(0.5) / row.p(0.5)),
        );
        let m = row.measures();
        // GetItem and other operations share one column in the table.
        let shown = [
            m[0],
            m[1],
            m[2],
            m[3],
            m[4],
            m[5],
            m[6],
            m[7],
            m[8],
            m[9] + m[10],
            m[11],
        ];
        let widths = [
            (10, 1),
            (10, 1),
            (9, 0),
            (8, 3),
            (7, 3),
            (6, 3),
            (6, 3),
            (6, 3),
            (6, 3),
            (6, 3),
            (7, 2),
        ];
        let _ = write!(
            out,
            "{:<22} {:<9} {:>3} {:>6} {:>3}",
            row.scenario,
            row.mode.name(),
            row.rtt_ms,
            row.records,
            row.batch_ms.len()
        );
        for (value, (width, precision)) in shown.iter().zip(widths) {
            let _ = write!(out, " {value:>width$.precision$}");
        }
        let _ = writeln!(out, " {speedup:>8} {:>5}", row.failures);
    }
    out
}

pub fn csv(rows: &[Row]) -> String {
    let mut out = String::from(
        "scenario,mode,rtt_ms,records,repetitions,batch_ms_p50,batch_ms_p99,records_per_s,\
         ms_per_record,requests_per_record,put_item_per_record,update_item_per_record,\
         transact_write_items_per_record,batch_get_item_per_record,get_item_per_record,\
         other_per_record,dynamodb_local_ms_per_request,unfinished_records\n",
    );
    let precisions = [2, 2, 1, 4, 4, 4, 4, 4, 4, 4, 4, 3];
    for row in rows {
        let measures: Vec<String> = row
            .measures()
            .iter()
            .zip(precisions)
            .map(|(value, precision)| format!("{value:.precision$}"))
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
