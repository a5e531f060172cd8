//! A transaction in two round trips: `BEGIN` and every statement pipelined
//! (sent together, answered in order), then, once the caller has looked at
//! the answers, `COMMIT` or `ROLLBACK`. A statement that changes no row or
//! fails does not end the transaction by itself: the caller finds the first
//! refusal in order and rolls back.

use std::borrow::Cow;
use std::pin::pin;

use futures_util::TryStreamExt;
use futures_util::future::join_all;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row};

use super::SqlValue;

/// One statement (the store's own, borrowed; or built for the call) and
/// its parameters.
#[derive(Debug, Clone)]
pub(super) struct Statement<'a> {
    sql: Cow<'a, str>,
    params: Cow<'a, [SqlValue]>,
}

/// What a statement returned.
#[derive(Debug)]
pub(super) struct Answer {
    /// Its rows.
    pub rows: Vec<Row>,
    /// The rows it inserted, updated or deleted.
    pub affected: u64,
}

impl<'a> Statement<'a> {
    pub(super) fn new(
        sql: impl Into<Cow<'a, str>>,
        params: impl Into<Cow<'a, [SqlValue]>>,
    ) -> Self {
        Self {
            sql: sql.into(),
            params: params.into(),
        }
    }

    /// The same statement behind `prefix` (`EXPLAIN ...`), same parameters.
    pub(super) fn explained(&self, prefix: &str) -> Statement<'a> {
        Statement {
            sql: format!("{prefix}{}", self.sql).into(),
            params: self.params.clone(),
        }
    }

    /// Runs it (one round trip; several at once are pipelined).
    pub(super) async fn query(&self, client: &Client) -> Result<Answer, tokio_postgres::Error> {
        let params = self
            .params
            .iter()
            .map(|value| (value as &(dyn ToSql + Sync), value.sql_type()));
        let mut stream = pin!(client.query_typed_raw(&self.sql, params).await?);
        let mut rows = Vec::new();
        while let Some(row) = stream.try_next().await? {
            rows.push(row);
        }
        let affected = stream.rows_affected().unwrap_or(0);
        Ok(Answer { rows, affected })
    }
}

/// `BEGIN` and `statements` in one round trip: the answer of each, in
/// order. The transaction is left open: the caller ends it with [`end`],
/// whatever the answers (a pooled connection must never hold an open
/// transaction). `BEGIN` fails only with its connection, and then so does
/// every statement after it.
pub(super) async fn begin_with(
    client: &Client,
    statements: &[Statement<'_>],
) -> Result<Vec<Result<Answer, tokio_postgres::Error>>, tokio_postgres::Error> {
    let begin = Statement::new("BEGIN", Vec::new());
    let mut answers = join_all(
        std::iter::once(&begin)
            .chain(statements)
            .map(|statement| statement.query(client)),
    )
    .await;
    let statements = answers.split_off(1);
    match answers.pop() {
        Some(Err(err)) => Err(err),
        _ => Ok(statements),
    }
}

/// Ends the open transaction: `COMMIT` if `commit`, else `ROLLBACK`.
pub(super) async fn end(client: &Client, commit: bool) -> Result<(), tokio_postgres::Error> {
    let end = if commit { "COMMIT" } else { "ROLLBACK" };
    Statement::new(end, Vec::new())
        .query(client)
        .await
        .map(drop)
}
