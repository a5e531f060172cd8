//! Reads, operator transitions and housekeeping on PostgreSQL. Every read
//! judges expiry itself (`expires_at >= now`): a row past its TTL counts as
//! absent whether or not `purge-expired` has deleted it yet. An operator
//! holds no lease, so its writes are fenced on the status and the version
//! the operator saw.

use std::collections::HashMap;

use super::rows::{item_of, number};
use super::transaction::Statement;
use super::{PostgresStore, SqlValue};
use exactly_once_core::clock::{duration_ms, ms_to_s};
use exactly_once_core::store::{
    Listed, Listing, ListingCost, Status, Store, StoreError, StoredItem,
};

/// The row of `$1`, as stored.
pub(super) const GET: &str = "SELECT {columns} FROM {table} WHERE pk = $1";
/// The live rows of `$1` (a text array) at `$2` (epoch s).
pub(super) const GET_MANY: &str =
    "SELECT {columns} FROM {table} WHERE pk = ANY($1) AND expires_at >= $2";
/// Stuck keys under the prefix `$2`, live at `$1` (epoch s): STARTED, the
/// lock ended before `$3` or created before `$4` (the partial index of
/// STARTED rows).
pub(super) const LIST_STUCK: &str = "SELECT {columns} FROM {table} WHERE status = 'STARTED' \
    AND (lock_expires_at < $3 OR created_at < $4) AND expires_at >= $1 \
    AND starts_with(pk, $2) ORDER BY pk";
/// FAILED keys under the prefix `$2`, live at `$1` (the partial index of
/// FAILED rows).
pub(super) const LIST_FAILED: &str = "SELECT {columns} FROM {table} WHERE status = 'FAILED' \
    AND expires_at >= $1 AND starts_with(pk, $2) ORDER BY pk";
/// COMPLETED keys under the prefix `$2`, live at `$1`, whose messages are
/// not known sent, completed before `$3` (the partial index of such rows):
/// what the sweeper sends.
pub(super) const LIST_UNSENT: &str = "SELECT {columns} FROM {table} WHERE status = 'COMPLETED' \
    AND outbox IS NOT NULL AND updated_at < $3 AND expires_at >= $1 AND starts_with(pk, $2) \
    ORDER BY updated_at";
/// At most `$2` rows past their TTL at `$1` (epoch s).
/// Invariant: only rows past their TTL are deleted; a row being written
/// (locked) is skipped, not waited for.
pub(super) const PURGE: &str = "DELETE FROM {table} WHERE pk IN (SELECT pk FROM {table} \
    WHERE expires_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED) AND expires_at < $1";

/// The live rows of `keys` (invalid keys skipped), by key, in ONE
/// statement.
pub(super) async fn batch_get(
    store: &PostgresStore,
    keys: &[&str],
) -> Result<HashMap<String, StoredItem>, StoreError> {
    let mut by_pk: HashMap<String, String> = HashMap::new();
    for key in keys {
        if let Ok(pk) = store.pk(key) {
            by_pk.insert(pk, (*key).to_owned());
        }
    }
    if by_pk.is_empty() {
        return Ok(HashMap::new());
    }
    let pks: Vec<String> = by_pk.keys().cloned().collect();
    let now_s = ms_to_s(store.now_ms());
    let params = vec![SqlValue::TextArray(pks), number(Some(now_s))];
    let statement = Statement::new(store.sql.get_many.as_str(), params);
    let rows = store.rows("batch get", statement).await?;
    let mut items = HashMap::new();
    for row in &rows {
        let item = item_of(row)?;
        if let Some(key) = by_pk.get(&item.pk) {
            items.insert(key.clone(), item);
        }
    }
    Ok(items)
}

/// Operator release of `$1` at version `$2` (`$3` now).
/// Invariant: only the STARTED row at the version the operator saw is
/// released; one taken over since (newer version) or finished is not.
pub(super) const OPERATOR_RELEASE: &str = "UPDATE {table} SET lock_expires_at = 0, \
    updated_at = $3 WHERE pk = $1 AND status = 'STARTED' AND version = $2 RETURNING 1";

/// Operator release: a STARTED key becomes claimable at once (the same
/// write as a release), so the next delivery takes it over as the next
/// version.
pub(super) async fn release_version(
    store: &PostgresStore,
    key: &str,
    version: u64,
) -> Result<(), StoreError> {
    let sql = store.sql.operator_release.as_str();
    store
        .operator_write("operator release", key, version, Status::Started, sql)
        .await
}

/// Operator retry of `$1` at version `$2` (`$3` now).
/// Invariant: only the FAILED row at the version the operator saw goes back
/// to STARTED; it keeps its version, owner and payload_hash, so the next
/// claim with the same payload takes it over as version + 1.
pub(super) const OPERATOR_RETRY: &str = "UPDATE {table} SET status = 'STARTED', \
    lock_expires_at = 0, updated_at = $3, last_error = COALESCE(error, '(no error text)'), \
    error = NULL WHERE pk = $1 AND status = 'FAILED' AND version = $2 RETURNING 1";

/// Operator retry of a permanent failure: a FAILED key becomes STARTED
/// with its lock ended, so the next delivery takes it over as version + 1
/// and runs the work again. The error text moves to `last_error`.
pub(super) async fn retry_failed(
    store: &PostgresStore,
    key: &str,
    version: u64,
) -> Result<(), StoreError> {
    let sql = store.sql.operator_retry.as_str();
    store
        .operator_write("operator retry", key, version, Status::Failed, sql)
        .await
}

/// The live rows under the key prefix that `listing` names: found
/// through the partial index of STARTED (or FAILED) rows, so the cost
/// follows their number, not the table's size.
pub(super) async fn list(store: &PostgresStore, listing: Listing) -> Result<Listed, StoreError> {
    let rows = store.rows("list", store.listing(listing)).await?;
    let items = rows.iter().map(item_of).collect::<Result<Vec<_>, _>>()?;
    let cost = ListingCost {
        requests: 1,
        read: items.len() as u64,
        capacity_units: 0.0,
    };
    Ok(Listed { items, cost })
}

impl PostgresStore {
    /// The row of `key` as stored, even past its TTL (for operators).
    pub async fn stored(&self, key: &str) -> Result<Option<StoredItem>, StoreError> {
        self.row_at(&self.pk(key)?).await
    }

    /// The row at `pk` as stored: what a fenced write the store refused
    /// found there (judged by [`exactly_once_core::store::Lease::refused`]).
    pub(super) async fn row_at(&self, pk: &str) -> Result<Option<StoredItem>, StoreError> {
        let statement = Statement::new(self.sql.get.as_str(), vec![pk.into()]);
        let rows = self.rows("get", statement).await?;
        rows.first().map(item_of).transpose()
    }

    /// An operator's `sql` on `key` (`$1` pk, `$2` version, `$3` now);
    /// no row changed: [`StoreError::NotInState`], saying what the key holds.
    async fn operator_write(
        &self,
        operation: &'static str,
        key: &str,
        version: u64,
        expected: Status,
        sql: &str,
    ) -> Result<(), StoreError> {
        let pk = self.pk(key)?;
        let params = vec![
            pk.as_str().into(),
            number(Some(version)),
            number(Some(self.now_ms())),
        ];
        let written = self.rows(operation, Statement::new(sql, params)).await?;
        if !written.is_empty() {
            return Ok(());
        }
        let found = self.stored(key).await?;
        Err(StoreError::not_in_state(
            pk,
            expected,
            version,
            found.as_ref(),
            self.now_ms(),
        ))
    }

    /// How PostgreSQL runs `listing`'s statement, run for real: `EXPLAIN
    /// (ANALYZE, BUFFERS)`, one line per row of the plan. Operators (and the
    /// tests) see that it reads the partial index of STARTED (or FAILED)
    /// rows, and how many rows and pages it read.
    pub async fn explain_listing(&self, listing: Listing) -> Result<Vec<String>, StoreError> {
        let statement = self.listing(listing);
        let explain = statement.explained("EXPLAIN (ANALYZE, BUFFERS) ");
        let rows = self.rows("explain list", explain).await?;
        rows.iter()
            .map(|row| {
                row.try_get::<_, String>(0)
                    .map_err(|err| StoreError::Rejected {
                        operation: "explain list",
                        message: err.to_string(),
                    })
            })
            .collect()
    }

    /// The statement of `listing` at the store's now.
    fn listing(&self, listing: Listing) -> Statement<'_> {
        let now = self.now_ms();
        let mut params = vec![
            number(Some(ms_to_s(now))),
            self.config.key_prefix.as_str().into(),
        ];
        let sql = match listing {
            Listing::Stuck { older_than } => {
                let cutoff = now.saturating_sub(duration_ms(older_than));
                params.extend([number(Some(now)), number(Some(cutoff))]);
                self.sql.list_stuck.as_str()
            }
            Listing::Failed => self.sql.list_failed.as_str(),
            Listing::Unsent { older_than } => {
                params.push(number(Some(now.saturating_sub(duration_ms(older_than)))));
                self.sql.list_unsent.as_str()
            }
        };
        Statement::new(sql, params)
    }

    /// Deletes rows past their TTL (under any prefix: they count as absent
    /// for everyone), at most `batch` per statement and `batches`
    /// statements, so no statement holds many locks. Returns how many rows
    /// were deleted.
    pub async fn purge_expired(&self, batch: u32, batches: u32) -> Result<u64, StoreError> {
        let mut deleted = 0;
        for _ in 0..batches {
            let now_s = ms_to_s(self.now_ms());
            let params = vec![number(Some(now_s)), SqlValue::BigInt(Some(batch.into()))];
            let statement = Statement::new(self.sql.purge.as_str(), params);
            let answer = self.run("purge expired", &statement).await?;
            deleted += answer.affected;
            if answer.affected < u64::from(batch) {
                break;
            }
        }
        Ok(deleted)
    }

    /// The rows `statement` returns (autocommit).
    async fn rows(
        &self,
        operation: &'static str,
        statement: Statement<'_>,
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        Ok(self.run(operation, &statement).await?.rows)
    }
}
