//! The measured columns, shared by the printed table and `results.csv`.

use crate::row::Row;

/// One measure of a row.
pub struct Column {
    /// Its name in the CSV header.
    pub csv: &'static str,
    /// Its header in the printed table, and the table's width and decimals.
    pub table: &'static str,
    pub width: usize,
    pub table_decimals: usize,
    /// Decimals in the CSV.
    pub csv_decimals: usize,
    pub value: fn(&Row) -> f64,
}

/// In order: batch time, throughput, requests per record (all, then by
/// operation), capacity units per record, DynamoDB Local's own time.
pub const COLUMNS: [Column; 16] = [
    Column {
        csv: "batch_ms_p50",
        table: "p50 ms",
        width: 10,
        table_decimals: 1,
        csv_decimals: 2,
        value: |row| row.p(0.5),
    },
    Column {
        csv: "batch_ms_p99",
        table: "p99 ms",
        width: 10,
        table_decimals: 1,
        csv_decimals: 2,
        value: |row| row.p(0.99),
    },
    Column {
        csv: "records_per_s",
        table: "rec/s",
        width: 9,
        table_decimals: 0,
        csv_decimals: 1,
        value: Row::records_per_s,
    },
    Column {
        csv: "ms_per_record",
        table: "ms/rec",
        width: 8,
        table_decimals: 3,
        csv_decimals: 4,
        value: Row::ms_per_record,
    },
    Column {
        csv: "requests_per_record",
        table: "req/rec",
        width: 7,
        table_decimals: 3,
        csv_decimals: 4,
        value: |row| row.per_record(None),
    },
    Column {
        csv: "put_item_per_record",
        table: "Put",
        width: 6,
        table_decimals: 3,
        csv_decimals: 4,
        value: |row| row.per_record(Some("PutItem")),
    },
    Column {
        csv: "update_item_per_record",
        table: "Upd",
        width: 6,
        table_decimals: 3,
        csv_decimals: 4,
        value: |row| row.per_record(Some("UpdateItem")),
    },
    Column {
        csv: "transact_write_items_per_record",
        table: "Txn",
        width: 6,
        table_decimals: 3,
        csv_decimals: 4,
        value: |row| row.per_record(Some("TransactWriteItems")),
    },
    Column {
        csv: "batch_get_item_per_record",
        table: "BGet",
        width: 6,
        table_decimals: 3,
        csv_decimals: 4,
        value: |row| row.per_record(Some("BatchGetItem")),
    },
    Column {
        csv: "get_item_per_record",
        table: "Get",
        width: 6,
        table_decimals: 3,
        csv_decimals: 4,
        value: |row| row.per_record(Some("GetItem")),
    },
    Column {
        csv: "other_per_record",
        table: "other",
        width: 6,
        table_decimals: 3,
        csv_decimals: 4,
        value: |row| row.per_record(Some("other")),
    },
    Column {
        csv: "rcu_per_record",
        table: "RCU/rec",
        width: 7,
        table_decimals: 3,
        csv_decimals: 4,
        value: |row| row.units_per_record().read,
    },
    Column {
        csv: "wcu_per_record",
        table: "WCU/rec",
        width: 7,
        table_decimals: 3,
        csv_decimals: 4,
        value: |row| row.units_per_record().write,
    },
    Column {
        csv: "dynamodb_local_ms_per_request",
        table: "ddb ms",
        width: 7,
        table_decimals: 2,
        csv_decimals: 3,
        value: Row::service_ms,
    },
    Column {
        csv: "overlapping_transactions_per_record",
        table: "overlap",
        width: 7,
        table_decimals: 3,
        csv_decimals: 4,
        value: Row::overlaps_per_record,
    },
    Column {
        csv: "refused_transactions_per_record",
        table: "refused",
        width: 7,
        table_decimals: 3,
        csv_decimals: 4,
        value: Row::refused_per_record,
    },
];
