//! The schema as a public contract: embedded, versioned SQL per table kind
//! (`migrations/`), applied by `exactly-once-ops migrate` and checked by the
//! function at start.
//!
//! `exactly_once_schema` records, per table, the version of its kind's
//! migrations applied. `migrate` applies the missing ones in ONE
//! transaction under an advisory lock, so concurrent runs are harmless and
//! a second run changes nothing.

use deadpool_postgres::Pool;

use super::pg_error;
use super::rows::{COLUMNS, quote_identifier};
use exactly_once_core::store::StoreError;

/// A table's schema: its kind, recorded per table in
/// `exactly_once_schema`, and its migrations in order (version `i + 1` is
/// `migrations[i]`; `{table}` and `{index_prefix}` in them stand for the
/// quoted table name and the prefix of its index names). A handler whose
/// effects write tables of their own gives them a schema too (the demo
/// ledger's `LEDGER_SCHEMA`), so that `exactly-once-ops migrate` creates
/// them and the function checks them at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableSchema {
    /// What the table holds (`idempotency`).
    pub kind: &'static str,
    /// Its migrations, in order.
    pub migrations: &'static [&'static str],
    /// The columns the code reads, checked at start (a `SELECT` list);
    /// `None`: the version alone is checked.
    pub columns: Option<&'static str>,
}

impl TableSchema {
    /// The version this build expects.
    pub fn latest(&self) -> i32 {
        self.migrations.len() as i32
    }
}

/// The idempotency table (one row per key).
pub const IDEMPOTENCY: TableSchema = TableSchema {
    kind: "idempotency",
    migrations: &[
        include_str!("migrations/idempotency_v1.sql"),
        include_str!("migrations/idempotency_v2.sql"),
        include_str!("migrations/idempotency_v3.sql"),
    ],
    columns: Some(COLUMNS),
};

/// The bookkeeping table of applied migrations.
const SCHEMA_TABLE: &str = "CREATE TABLE IF NOT EXISTS exactly_once_schema (
    table_name TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)";

/// What `migrate` did to one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrated {
    /// The table.
    pub table: String,
    /// Its version before.
    pub from: i32,
    /// Its version now.
    pub to: i32,
}

/// Creates or upgrades `tables` to this build's schema, in ONE transaction
/// (all or nothing), serialised with any concurrent `migrate`.
pub async fn migrate(
    pool: &Pool,
    tables: &[(TableSchema, &str)],
) -> Result<Vec<Migrated>, StoreError> {
    const OPERATION: &str = "migrate";
    let error = |err| pg_error(OPERATION, err);
    let mut client = pool.get().await.map_err(|err| StoreError::Unavailable {
        operation: OPERATION,
        message: err.to_string(),
    })?;
    let transaction = client.transaction().await.map_err(error)?;
    transaction
        .batch_execute("SELECT pg_advisory_xact_lock(hashtext('exactly_once_schema'))")
        .await
        .map_err(error)?;
    transaction
        .batch_execute(SCHEMA_TABLE)
        .await
        .map_err(error)?;
    let mut migrated = Vec::new();
    for (schema, table) in tables {
        let quoted = quote_identifier(table).map_err(|message| StoreError::Rejected {
            operation: OPERATION,
            message,
        })?;
        let from: i32 = transaction
            .query_opt(
                "SELECT version FROM exactly_once_schema WHERE table_name = $1",
                &[table],
            )
            .await
            .map_err(error)?
            .map_or(0, |row| row.get(0));
        for sql in schema.migrations.iter().skip(from.max(0) as usize) {
            let sql = sql
                .replace("{table}", &quoted)
                .replace("{index_prefix}", &index_prefix(table));
            transaction.batch_execute(&sql).await.map_err(error)?;
        }
        let to = schema.latest().max(from);
        transaction
            .execute(
                "INSERT INTO exactly_once_schema (table_name, kind, version) VALUES ($1, $2, $3) \
                 ON CONFLICT (table_name) DO UPDATE SET version = excluded.version, applied_at = now()",
                &[table, &schema.kind, &to],
            )
            .await
            .map_err(error)?;
        migrated.push(Migrated {
            table: (*table).to_owned(),
            from,
            to,
        });
    }
    transaction.commit().await.map_err(error)?;
    Ok(migrated)
}

/// Checks that `table` is at this build's schema version and has every
/// column the code reads; else a clear error that names the command to run.
/// Each of its round trips gives up after `timeout` (a database that does
/// not answer is [`SchemaError::Unreachable`], never a wrong schema).
pub async fn check(
    pool: &Pool,
    schema: TableSchema,
    table: &str,
    timeout: std::time::Duration,
) -> Result<(), SchemaError> {
    let client = within(timeout, "connect", async {
        pool.get()
            .await
            .map_err(|err| SchemaError::Unreachable(err.to_string()))
    })
    .await?;
    let version: i32 = within(timeout, "read the schema version", async {
        match client
            .query_opt(
                "SELECT version FROM exactly_once_schema WHERE table_name = $1",
                &[&table],
            )
            .await
        {
            Ok(row) => Ok(row.map_or(0, |row| row.get(0))),
            // No bookkeeping table: nothing was ever migrated.
            Err(err) if is_undefined(&err) => Ok(0),
            Err(err) => Err(SchemaError::Unreachable(err.to_string())),
        }
    })
    .await?;
    let expected = schema.latest();
    if version < expected {
        return Err(SchemaError::Behind {
            table: table.to_owned(),
            found: version,
            expected,
        });
    }
    if version > expected {
        return Err(SchemaError::Ahead {
            table: table.to_owned(),
            found: version,
            expected,
        });
    }
    if let Some(columns) = schema.columns {
        let quoted = quote_identifier(table).map_err(SchemaError::Unreachable)?;
        let sql = format!("SELECT {columns} FROM {quoted} LIMIT 0");
        within(timeout, "read the columns", async {
            match client.query(&sql, &[]).await {
                Ok(_) => Ok(()),
                // The server's own word that a column (or the table) is
                // missing; anything else (a connection closed, a timeout)
                // says nothing of the schema.
                Err(err) if is_undefined(&err) => Err(SchemaError::Columns {
                    table: table.to_owned(),
                    message: pg_error("check", err).to_string(),
                }),
                Err(err) => Err(SchemaError::Unreachable(err.to_string())),
            }
        })
        .await?;
    }
    Ok(())
}

/// `step` of the check, given up after `timeout`.
async fn within<T>(
    timeout: std::time::Duration,
    step: &str,
    step_done: impl Future<Output = Result<T, SchemaError>>,
) -> Result<T, SchemaError> {
    match tokio::time::timeout(timeout, step_done).await {
        Ok(answer) => answer,
        Err(_) => Err(SchemaError::Unreachable(format!(
            "{step}: no answer within {} ms",
            timeout.as_millis()
        ))),
    }
}

/// The server said a table or column does not exist (`42P01`, `42703`).
fn is_undefined(err: &tokio_postgres::Error) -> bool {
    err.code()
        .is_some_and(|code| matches!(code.code(), "42P01" | "42703"))
}

/// The prefix of a table's index names: the table name, dots as `_` (a
/// checked identifier: quoted in the SQL as `"{index_prefix}_started"`).
fn index_prefix(table: &str) -> String {
    table.replace('.', "_")
}

/// Why the function cannot use a table.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The database did not answer the check (unreachable, a connection
    /// closed or reset, no answer in time): nothing is known of the schema.
    #[error("store unavailable: could not check the schema: {0}")]
    Unreachable(String),
    /// The database refused the migration (`DATABASE_MIGRATE=true`): the
    /// server's reason (a role without DDL rights, say).
    #[error("the migration was refused: {0}")]
    Migration(String),
    /// The table is missing or older than this build.
    #[error(
        "table {table:?} is at schema version {found}, this build needs {expected}: \
         run `exactly-once-ops migrate` (with DATABASE_URL set) before deploying"
    )]
    Behind {
        /// The table.
        table: String,
        /// Its version (0: never migrated).
        found: i32,
        /// This build's.
        expected: i32,
    },
    /// The table was migrated by a newer build.
    #[error(
        "table {table:?} is at schema version {found}, newer than this build's {expected}: \
         deploy the newer build"
    )]
    Ahead {
        /// The table.
        table: String,
        /// Its version.
        found: i32,
        /// This build's.
        expected: i32,
    },
    /// A column the code reads is missing.
    #[error(
        "table {table:?} lacks a column of the schema ({message}): \
         run `exactly-once-ops migrate`, or repair the table by hand"
    )]
    Columns {
        /// The table.
        table: String,
        /// The server's message.
        message: String,
    },
}
