//! The locking path's writes, batched: several claims, or several fenced
//! writes (complete, fail, release, extend), in ONE statement each, every
//! row under its single write's condition, next to it here. A claim
//! refused in a batch is settled alone by the store trait's claim loop
//! ([`exactly_once_core::store::Store::claim_many`]).

use super::rows::{new_row, number};
use super::transaction::Statement;
use super::{PostgresStore, SqlValue};
use exactly_once_core::store::{
    ClaimRequest, Conditional, FencedWrite, Lease, NewItem, Store, StoreError, bounded,
    distinct_rounds,
};

/// The most claims or fenced writes of one statement.
pub(super) const MAX_ROWS: usize = 100;

/// Claims: each key's STARTED row at version 1, in one `INSERT` of several
/// rows; `$1` now (s), then per row the parameters of
/// [`super::rows::new_row`] but the last.
/// Invariant: one live row per key; a claim never replaces a row that has
/// not passed its TTL (the conflicting row is replaced only when expired).
/// The keys written come back; the others are settled alone. The rows go
/// in key order, the order [`UPDATE_FENCED`] locks them in.
const INSERT_STARTED: &str = "INSERT INTO {table} AS item (pk, status, version, owner, \
    payload_hash, lock_expires_at, expires_at, created_at, updated_at, attempts, origin, result, \
    error, scope) VALUES {rows} \
    ON CONFLICT (pk) DO UPDATE SET status = excluded.status, version = 1, \
    owner = excluded.owner, payload_hash = excluded.payload_hash, \
    lock_expires_at = excluded.lock_expires_at, expires_at = excluded.expires_at, \
    created_at = excluded.created_at, updated_at = excluded.updated_at, attempts = 1, \
    origin = excluded.origin, result = excluded.result, error = excluded.error, \
    last_error = NULL, scope = excluded.scope, outbox = NULL \
    WHERE item.expires_at < $1 RETURNING item.pk";

/// Fenced writes of several rows in one `UPDATE`; per row (`v`): the key,
/// version and owner of its lease, what to write (`complete`, `fail`,
/// `release`, `extend`), the result, the error, the new `expires_at`, the
/// lease's new end, and now (ms). The rows are locked first, in key order
/// (`locked`), as the claims' `INSERT` takes them: two workers' batches
/// over the same keys queue behind each other instead of deadlocking (a
/// deadlock costs `deadlock_timeout`, a second, which a short lease may not
/// have).
/// Invariant: only the current owner of a STARTED row writes to it; a
/// worker taken over (new version, new owner) is fenced out, alone (its
/// row is not returned: the lock is lost).
const UPDATE_FENCED: &str = "WITH v(pk, version, owner, kind, result, error, expires_at, until, \
    now) AS (VALUES {rows}), \
    locked AS MATERIALIZED (SELECT item.pk FROM {table} AS item JOIN v ON item.pk = v.pk \
        ORDER BY item.pk FOR UPDATE OF item) \
    UPDATE {table} AS item SET \
    status = CASE v.kind WHEN 'complete' THEN 'COMPLETED' WHEN 'fail' THEN 'FAILED' \
        ELSE item.status END, \
    result = CASE v.kind WHEN 'complete' THEN COALESCE(v.result, item.result) \
        ELSE item.result END, \
    error = CASE v.kind WHEN 'fail' THEN v.error ELSE item.error END, \
    expires_at = CASE WHEN v.kind IN ('complete', 'fail') THEN v.expires_at \
        ELSE item.expires_at END, \
    lock_expires_at = CASE v.kind WHEN 'release' THEN 0 WHEN 'extend' THEN v.until \
        ELSE NULL END, \
    updated_at = v.now \
    FROM v JOIN locked ON locked.pk = v.pk \
    WHERE item.pk = v.pk AND item.status = 'STARTED' AND item.version = v.version \
    AND item.owner = v.owner RETURNING item.pk";

/// Claims of several keys, each written or not on its own: as few
/// statements ([`INSERT_STARTED`]) as there are rounds of distinct keys (a
/// statement writes a row once: a key met again goes in the next), of at
/// most [`MAX_ROWS`] rows each.
pub(super) async fn create_started_many(
    store: &PostgresStore,
    claims: &[(String, ClaimRequest<'_>)],
) -> Result<Vec<Conditional<Lease>>, StoreError> {
    let mut answers: Vec<Option<Conditional<Lease>>> = vec![None; claims.len()];
    for round in distinct_rounds(claims.iter().map(|(pk, _)| pk.as_str())) {
        for chunk in round.chunks(MAX_ROWS) {
            let part: Vec<(String, ClaimRequest<'_>)> =
                chunk.iter().map(|&i| claims[i].clone()).collect();
            let written = insert_started(store, &part).await?;
            for (&i, answer) in chunk.iter().zip(written) {
                answers[i] = Some(answer);
            }
        }
    }
    Ok(answers
        .into_iter()
        .map(|answer| answer.unwrap_or(Conditional::Conflict(None)))
        .collect())
}

/// Claims of several distinct keys in one statement ([`INSERT_STARTED`]).
async fn insert_started(
    store: &PostgresStore,
    claims: &[(String, ClaimRequest<'_>)],
) -> Result<Vec<Conditional<Lease>>, StoreError> {
    let now = store.now_ms();
    let leases: Vec<Lease> = claims
        .iter()
        .map(|(pk, request)| Lease::claimed(pk.clone(), 1, &store.config, now, request))
        .collect();
    let mut params: Vec<SqlValue> = vec![number(Some(now / 1000))];
    let mut rows = Vec::with_capacity(claims.len());
    // The rows in key order (see INSERT_STARTED).
    let mut in_key_order: Vec<usize> = (0..claims.len()).collect();
    in_key_order.sort_by(|&a, &b| claims[a].0.cmp(&claims[b].0));
    for i in in_key_order {
        let (lease, request) = (&leases[i], &claims[i].1);
        let row = new_row(&NewItem::started(lease, *request, &store.config, now));
        // new_row's parameters, but its last (now, s: `$1` here).
        let [
            pk,
            status,
            owner,
            hash,
            lock,
            expires,
            at,
            origin,
            result,
            error,
            _,
            scope,
            _outbox,
        ] = <[SqlValue; 13]>::try_from(row).map_err(|_| StoreError::Rejected {
            operation: "claim (batch)",
            message: "a new row has 13 parameters".into(),
        })?;
        let first = params.len() + 1;
        params.extend([
            pk, status, owner, hash, lock, expires, at, origin, result, error, scope,
        ]);
        let n = |i: usize| format!("${}", first + i);
        rows.push(format!(
            "({}, {}, 1, {}, {}, {}, {}, {}, {}, 1, {}, {}, {}, {})",
            n(0),
            n(1),
            n(2),
            n(3),
            n(4),
            n(5),
            n(6),
            n(6),
            n(7),
            n(8),
            n(9),
            n(10)
        ));
    }
    let sql = store
        .sql
        .render(INSERT_STARTED)
        .replace("{rows}", &rows.join(", "));
    let statement = Statement::new(sql, params);
    let answer = store.run("claim (batch)", &statement).await?;
    let written: std::collections::HashSet<String> = answer
        .rows
        .iter()
        .filter_map(|row| row.try_get(0).ok())
        .collect();
    Ok(leases
        .into_iter()
        .map(|lease| match written.contains(&lease.pk) {
            true => Conditional::Written(lease),
            false => Conditional::Conflict(None),
        })
        .collect())
}

/// Fenced writes of several leases, each on its own: as few statements
/// ([`UPDATE_FENCED`]) as there are rounds of distinct keys, of at most
/// [`MAX_ROWS`] rows each.
pub(super) async fn write_fenced(
    store: &PostgresStore,
    writes: &[(Lease, FencedWrite)],
) -> Vec<Result<u64, StoreError>> {
    let mut answers: Vec<Option<Result<u64, StoreError>>> = vec![None; writes.len()];
    for round in distinct_rounds(writes.iter().map(|(lease, _)| lease.pk.as_str())) {
        for chunk in round.chunks(MAX_ROWS) {
            let part: Vec<(Lease, FencedWrite)> =
                chunk.iter().map(|&i| writes[i].clone()).collect();
            for (&i, answer) in chunk.iter().zip(update_fenced(store, &part).await) {
                answers[i] = Some(answer);
            }
        }
    }
    answers
        .into_iter()
        .map(|answer| answer.unwrap_or(Err(StoreError::Contention { key: String::new() })))
        .collect()
}

/// Fenced writes of several distinct rows in one statement ([`UPDATE_FENCED`]).
async fn update_fenced(
    store: &PostgresStore,
    writes: &[(Lease, FencedWrite)],
) -> Vec<Result<u64, StoreError>> {
    let now = store.now_ms();
    let expires_at_s = store.config.expires_at_s(now);
    let mut params: Vec<SqlValue> = Vec::with_capacity(writes.len() * 9);
    let mut rows = Vec::with_capacity(writes.len());
    let mut in_key_order: Vec<usize> = (0..writes.len()).collect();
    in_key_order.sort_by(|&a, &b| writes[a].0.pk.cmp(&writes[b].0.pk));
    let mut answers = vec![0; writes.len()];
    for i in in_key_order {
        let (lease, write) = &writes[i];
        let (kind, result, error, until) = match write {
            FencedWrite::Complete { result } => ("complete", result.as_deref(), None, None),
            FencedWrite::Fail { error } => ("fail", None, Some(bounded(error)), None),
            FencedWrite::Release => ("release", None, None, None),
            FencedWrite::Extend { until_ms } => ("extend", None, None, Some(*until_ms)),
        };
        let first = params.len() + 1;
        params.extend([
            lease.pk.as_str().into(),
            number(Some(lease.version)),
            lease.owner.as_str().into(),
            kind.into(),
            result.into(),
            error.into(),
            number(Some(expires_at_s)),
            number(until),
            number(Some(now)),
        ]);
        let placeholders: Vec<String> = (0..9).map(|i| format!("${}", first + i)).collect();
        rows.push(format!("({})", placeholders.join(", ")));
        answers[i] = write.answer(expires_at_s);
    }
    let sql = store
        .sql
        .render(UPDATE_FENCED)
        .replace("{rows}", &rows.join(", "));
    let statement = Statement::new(sql, params);
    match store.run("fenced write (batch)", &statement).await {
        Err(err) => writes.iter().map(|_| Err(err.clone())).collect(),
        Ok(answer) => {
            let written: std::collections::HashSet<String> = answer
                .rows
                .iter()
                .filter_map(|row| row.try_get(0).ok())
                .collect();
            let answers = writes.iter().zip(answers).map(|((lease, write), answer)| {
                let written = written.contains(&lease.pk);
                async move {
                    match written {
                        true => Ok(answer),
                        // Judged from the row: this very write made
                        // before (sent again), or the lock lost.
                        false => {
                            let found = store.row_at(&lease.pk).await?;
                            write.refused(lease, found.as_ref())
                        }
                    }
                }
            });
            futures_util::future::join_all(answers).await
        }
    }
}
