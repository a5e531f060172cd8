//! The statements of one table: each path keeps its statements as
//! templates beside their transitions (`locking.rs`, `operator.rs`), each
//! `WHERE` next to the write it guards; they are rendered here once per
//! store, for its table.

use super::rows::{COLUMNS, quote_identifier};
use super::{locking, operator};
use exactly_once_core::store::StoreError;

/// The statements of one table, written once when the store is made from
/// the templates each path keeps beside its transition.
#[derive(Debug)]
pub(super) struct Statements {
    /// The table's name, quoted.
    pub table: String,
    /// Creates a key's row (claim, lock-free commit, lock-free failure),
    /// returning it; or, when the key is not new, the row found.
    pub insert_new: String,
    pub take_over: String,
    pub complete: String,
    pub fail: String,
    pub release: String,
    pub extend: String,
    pub get: String,
    pub get_many: String,
    pub operator_release: String,
    pub operator_retry: String,
    pub list_stuck: String,
    pub list_failed: String,
    pub list_unsent: String,
    pub clear_outbox: String,
    pub purge: String,
}

impl Statements {
    /// A statement template of the table (`{table}`, `{columns}`), as the
    /// statements of one call are built (a batch's rows vary in number).
    pub(super) fn render(&self, template: &str) -> String {
        template
            .replace("{table}", &self.table)
            .replace("{columns}", COLUMNS)
    }

    /// The statements of `table` (`name` or `schema.name`), rendered.
    pub(super) fn for_table(table: &str) -> Result<Self, StoreError> {
        let table = quote_identifier(table).map_err(|message| StoreError::Rejected {
            operation: "open the idempotency table",
            message,
        })?;
        let render = |template: &str| {
            template
                .replace("{table}", &table)
                .replace("{columns}", COLUMNS)
        };
        Ok(Self {
            insert_new: or_found(&table, &render(locking::INSERT_NEW)),
            take_over: or_found(&table, &render(locking::TAKE_OVER)),
            complete: render(locking::COMPLETE),
            fail: render(locking::FAIL),
            release: render(locking::RELEASE),
            extend: render(locking::EXTEND),
            get: render(operator::GET),
            get_many: render(operator::GET_MANY),
            operator_release: render(operator::OPERATOR_RELEASE),
            operator_retry: render(operator::OPERATOR_RETRY),
            list_stuck: render(operator::LIST_STUCK),
            list_failed: render(operator::LIST_FAILED),
            list_unsent: render(operator::LIST_UNSENT),
            clear_outbox: render(locking::CLEAR_OUTBOX),
            purge: render(operator::PURGE),
            table,
        })
    }
}

/// `write` (an INSERT or UPDATE of the row `pk = $1`), returning the row it
/// wrote flagged `written`; when it wrote nothing, the row that stopped it,
/// flagged not written. ONE statement: the write and the look at the row
/// it did not write are one round trip.
fn or_found(table: &str, write: &str) -> String {
    format!(
        "WITH written AS ({write} RETURNING {COLUMNS}) \
         SELECT true AS written, {COLUMNS} FROM written \
         UNION ALL \
         SELECT false AS written, {COLUMNS} FROM {table} \
         WHERE pk = $1 AND NOT EXISTS (SELECT 1 FROM written)"
    )
}
