//! The locking path on PostgreSQL, top to bottom: claim, take over, then
//! complete (alone or with the effect, in one transaction), fail, release
//! or extend, and the outbox cleared once its messages are sent. Every
//! transition is ONE statement, a function named as the [`Store`] method
//! it is; its `WHERE` is its condition, the statement's template just above
//! it with the invariant it keeps (rendered for the table once per store,
//! `statements.rs`). The claim loop that judges a found row is the store
//! trait's ([`Store::claim`]).

use super::rows::{conditional, new_row, number};
use super::transaction::{Answer, Statement, begin_with, end};
use super::{PostgresStore, SqlEffect, SqlValue, pg_error};
use crate::increment::increment_statement;
use exactly_once_core::outbox::Pending;
use exactly_once_core::store::{
    ClaimRequest, Conditional, Effects, Lease, NewItem, Status, Store, StoreError, StoredItem,
    bounded, increment, transaction_effects,
};

/// Creates a key's row: `$1` pk, `$2` status, `$3` owner, `$4`
/// payload_hash, `$5` lock_expires_at, `$6` expires_at, `$7` now (ms),
/// `$8` origin, `$9` result, `$10` error, `$11` now (s), `$12` scope, `$13`
/// outbox (the messages a COMPLETED row's record emitted).
/// Invariant: one live row per key; a write never replaces a row that has
/// not passed its TTL (the conflicting row is replaced only when expired,
/// which counts as absent).
pub(super) const INSERT_NEW: &str = "INSERT INTO {table} AS item (pk, status, version, owner, payload_hash, \
    lock_expires_at, expires_at, created_at, updated_at, attempts, origin, result, error, scope, \
    outbox) VALUES ($1, $2, 1, $3, $4, $5, $6, $7, $7, 1, $8, $9, $10, $12, $13) \
    ON CONFLICT (pk) DO UPDATE SET status = excluded.status, version = 1, \
    owner = excluded.owner, payload_hash = excluded.payload_hash, \
    lock_expires_at = excluded.lock_expires_at, expires_at = excluded.expires_at, \
    created_at = excluded.created_at, updated_at = excluded.updated_at, attempts = 1, \
    origin = excluded.origin, result = excluded.result, error = excluded.error, \
    last_error = NULL, scope = excluded.scope, outbox = excluded.outbox \
    WHERE item.expires_at < $11";

/// Claim: create the STARTED row at version 1 (or replace an expired
/// one); else the row found.
pub(super) async fn create_started(
    store: &PostgresStore,
    pk: &str,
    request: ClaimRequest<'_>,
) -> Result<Conditional<Lease>, StoreError> {
    let now = store.now_ms();
    let lease = Lease::claimed(pk.to_owned(), 1, &store.config, now, &request);
    let row = NewItem::started(&lease, request, &store.config, now);
    // Invariant: one live row per key (see INSERT_NEW).
    let statement = Statement::new(store.sql.insert_new.as_str(), new_row(&row));
    store.conditional_write("claim", statement, lease).await
}

/// Take over (`$7` the version observed, `$6` now, `$8` this store's scope).
/// Invariant: of all takers that saw this version, exactly one wins (the
/// others wait on the row, then find another version), only while the lock
/// is still abandoned (not renewed, not finished), and only of its own
/// scope's row (or one written before scopes, which then takes this scope).
pub(super) const TAKE_OVER: &str = "UPDATE {table} SET owner = $2, version = $3, \
    lock_expires_at = $4, expires_at = $5, updated_at = $6, attempts = COALESCE(attempts, 0) + 1, \
    scope = COALESCE(scope, $8) \
    WHERE pk = $1 AND version = $7 AND status = 'STARTED' AND lock_expires_at < $6 \
    AND (scope IS NULL OR scope = $8)";
/// Take over: become the owner of an abandoned STARTED row, version + 1.
pub(super) async fn take_over(
    store: &PostgresStore,
    observed: &StoredItem,
    request: ClaimRequest<'_>,
) -> Result<Conditional<Lease>, StoreError> {
    let now = store.now_ms();
    let lease = Lease::taking_over(observed, &store.config, now, &request);
    // Invariant: see TAKE_OVER.
    let params = vec![
        lease.pk.as_str().into(),
        lease.owner.as_str().into(),
        number(Some(lease.version)),
        number(Some(lease.lock_expires_at_ms)),
        number(Some(store.config.expires_at_s(now))),
        number(Some(now)),
        number(Some(observed.version)),
        store.config.scope.as_deref().into(),
    ];
    let statement = Statement::new(store.sql.take_over.as_str(), params);
    store.conditional_write("take over", statement, lease).await
}

/// An `UPDATE` of the row `$1` setting `$set`, under the condition of every
/// write after the claim: `$2` version, `$3` owner.
/// Invariant: only the current owner of a STARTED row writes to it; a worker
/// whose lock was taken over (new version, new owner) is fenced out. No row
/// changed: the lock is lost.
macro_rules! fenced {
    ($set:literal) => {
        concat!(
            "UPDATE {table} SET ",
            $set,
            " WHERE pk = $1 AND status = 'STARTED' AND version = $2 AND owner = $3 RETURNING 1"
        )
    };
}

/// Complete (fenced).
pub(super) const COMPLETE: &str = fenced!(
    "status = 'COMPLETED', expires_at = $4, updated_at = $5, result = COALESCE($6, result), \
     outbox = $7, lock_expires_at = NULL"
);
/// Complete: the work is done; redeliveries become duplicates until the
/// retention ends. Messages alone ride on the completion's own `UPDATE`;
/// writes or increments commit with it in ONE transaction. Returns the
/// row's new `expires_at` (epoch seconds).
pub(super) async fn complete(
    store: &PostgresStore,
    lease: &Lease,
    result: Option<&str>,
    effects: Effects<SqlEffect>,
) -> Result<u64, StoreError> {
    if effects.touches_items() {
        complete_with(store, lease, result, effects).await
    } else {
        let texts = (result, effects.outbox.as_deref());
        complete_alone(store, lease, texts).await
    }
}

/// [`complete`] with no effect beside it: the fenced `UPDATE` alone.
async fn complete_alone(
    store: &PostgresStore,
    lease: &Lease,
    texts: (Option<&str>, Option<&str>),
) -> Result<u64, StoreError> {
    let (statement, expires_at_s) = store.completion(lease, texts);
    let completed = Some(Status::Completed);
    // Made before (sent again): the row's own expiry.
    let made = store
        .fenced("complete", lease, completed, statement)
        .await?;
    Ok(made.unwrap_or(expires_at_s))
}

/// [`complete`] together with the work's own SQL, in ONE transaction: the
/// fenced completion first, then the effect's statements, then the merged
/// increments; either all commit or none.
async fn complete_with(
    store: &PostgresStore,
    lease: &Lease,
    result: Option<&str>,
    effects: Effects<SqlEffect>,
) -> Result<u64, StoreError> {
    let increments = transaction_effects([&effects], super::MAX_EFFECTS)?;
    let texts = (result, effects.outbox.as_deref());
    let (completion, expires_at_s) = store.completion(lease, texts);
    let writes = effects.writes.len();
    let mut statements = vec![completion];
    statements.extend(effects.writes.iter().map(effect_statement));
    for increment in &increments {
        statements.push(increment_statement(increment)?);
    }
    const OPERATION: &str = "complete (transaction)";
    let completed = store
        .with_client(OPERATION, async |client| {
            let answers = begin_with(client, &statements)
                .await
                .map_err(|err| pg_error(OPERATION, err))?;
            // The first refusal in order: our fence, an effect, an increment.
            let refusal = answers.into_iter().enumerate().find_map(|(i, answer)| {
                refusal(answer).map(|reason| match (i, reason) {
                    (_, Refusal::Store(err)) => err,
                    (0, _) => StoreError::LockLost {
                        key: lease.pk.clone(),
                        version: lease.version,
                    },
                    (i, Refusal::NoRow) if i > writes => StoreError::EffectConditionFailed {
                        effect: i - 1,
                        message: increment::BELOW_FLOOR.to_owned(),
                    },
                    (i, Refusal::NoRow) => StoreError::EffectConditionFailed {
                        effect: i - 1,
                        message: "the statement changed no row".to_owned(),
                    },
                    (i, Refusal::Data(message)) => StoreError::EffectConditionFailed {
                        effect: i - 1,
                        message,
                    },
                })
            });
            end(client, refusal.is_none())
                .await
                .map_err(|err| pg_error(OPERATION, err))?;
            match refusal {
                None => Ok(expires_at_s),
                Some(err) => Err(err),
            }
        })
        .await;
    match completed {
        // The fence refused: judged from the row (this very completion
        // made before, the transaction sent again; or the lock lost).
        Err(StoreError::LockLost { .. }) => {
            let found = store.row_at(&lease.pk).await?;
            lease.refused(Some(Status::Completed), found.as_ref())
        }
        completed => completed,
    }
}

/// The outboxes of completions whose messages were sent (`$1` the keys,
/// `$2` their owners), cleared in one statement.
/// Invariant: only the messages of the completion that was sent are
/// cleared (COMPLETED under its owner); a row that changed since (past its
/// TTL, claimed again) keeps its own.
pub(super) const CLEAR_OUTBOX: &str = "UPDATE {table} AS item SET outbox = NULL \
    FROM unnest($1::text[], $2::text[]) AS sent(pk, owner) \
    WHERE item.pk = sent.pk AND item.owner = sent.owner AND item.status = 'COMPLETED' \
    AND item.outbox IS NOT NULL";
/// The messages of these completions were sent: their outboxes cleared in
/// ONE statement ([`CLEAR_OUTBOX`]).
pub(super) async fn outbox_sent(store: &PostgresStore, sent: &[Pending]) -> Result<(), StoreError> {
    let pks = sent.iter().map(|pending| pending.pk.clone()).collect();
    let owners = sent.iter().map(|pending| pending.owner.clone()).collect();
    let params = vec![SqlValue::TextArray(pks), SqlValue::TextArray(owners)];
    let statement = Statement::new(store.sql.clear_outbox.as_str(), params);
    store.run("clear outbox", &statement).await.map(|_| ())
}

/// Fail (fenced).
pub(super) const FAIL: &str = fenced!(
    "status = 'FAILED', error = $4, expires_at = $5, updated_at = $6, lock_expires_at = NULL"
);
/// Fail permanently: redeliveries are refused without running the work.
pub(super) async fn fail(
    store: &PostgresStore,
    lease: &Lease,
    error: &str,
) -> Result<(), StoreError> {
    let now = store.now_ms();
    let mut params = fence_params(lease);
    params.extend([
        bounded(error).into(),
        number(Some(store.config.expires_at_s(now))),
        number(Some(now)),
    ]);
    let statement = Statement::new(store.sql.fail.as_str(), params);
    let failed = Some(Status::Failed);
    store
        .fenced("fail", lease, failed, statement)
        .await
        .map(|_| ())
}

/// Release (fenced): the lock ends now.
pub(super) const RELEASE: &str = fenced!("lock_expires_at = 0, updated_at = $4");
/// Release after a retryable error: the lock ends now, so the next claim
/// takes the key over at once (as version + 1, keeping the history).
pub(super) async fn release(store: &PostgresStore, lease: &Lease) -> Result<(), StoreError> {
    let mut params = fence_params(lease);
    params.push(number(Some(store.now_ms())));
    let statement = Statement::new(store.sql.release.as_str(), params);
    store
        .fenced("release", lease, None, statement)
        .await
        .map(|_| ())
}

/// Extend (fenced): the lock ends at `$4`.
pub(super) const EXTEND: &str = fenced!("lock_expires_at = $4, updated_at = $5");

/// Extend (heartbeat): push the lease's end to `until_ms`.
pub(super) async fn extend(
    store: &PostgresStore,
    lease: &Lease,
    until_ms: u64,
) -> Result<Lease, StoreError> {
    let mut params = fence_params(lease);
    params.extend([number(Some(until_ms)), number(Some(store.now_ms()))]);
    let statement = Statement::new(store.sql.extend.as_str(), params);
    store.fenced("extend", lease, None, statement).await?;
    Ok(lease.until(until_ms))
}

impl PostgresStore {
    /// The fenced statement that marks a row COMPLETED, and its expiry.
    /// `texts`: its result and its outbox (the messages emitted).
    pub(super) fn completion(
        &self,
        lease: &Lease,
        (result, outbox): (Option<&str>, Option<&str>),
    ) -> (Statement<'_>, u64) {
        let now = self.now_ms();
        let expires_at_s = self.config.expires_at_s(now);
        let mut params = fence_params(lease);
        params.extend([
            number(Some(expires_at_s)),
            number(Some(now)),
            result.into(),
            outbox.into(),
        ]);
        (
            Statement::new(self.sql.complete.as_str(), params),
            expires_at_s,
        )
    }

    /// A statement guarded by the fence ([`fenced!`]), finishing the key as
    /// `finishing` (a completion, a failure) or not: `None` once written.
    /// No row changed: judged from the row ([`Lease::refused`]): this very
    /// write made before (sent again after its answer was lost), with what
    /// it answers (a completion the row's `expires_at`), or the lock lost.
    async fn fenced(
        &self,
        operation: &'static str,
        lease: &Lease,
        finishing: Option<Status>,
        statement: Statement<'_>,
    ) -> Result<Option<u64>, StoreError> {
        match self.run(operation, &statement).await?.affected {
            0 => {
                let found = self.row_at(&lease.pk).await?;
                lease.refused(finishing, found.as_ref()).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// An `or_found` statement (`statements.rs`): `written`, or the
    /// row that stopped it.
    pub(super) async fn conditional_write<T>(
        &self,
        operation: &'static str,
        statement: Statement<'_>,
        written: T,
    ) -> Result<Conditional<T>, StoreError> {
        conditional(&self.run(operation, &statement).await?.rows, written)
    }
}

/// `$1` pk, `$2` version, `$3` owner: what the fence reads.
fn fence_params(lease: &Lease) -> Vec<super::SqlValue> {
    vec![
        lease.pk.as_str().into(),
        number(Some(lease.version)),
        lease.owner.as_str().into(),
    ]
}

/// An effect as a statement of the transaction.
pub(super) fn effect_statement(effect: &SqlEffect) -> Statement<'_> {
    Statement::new(effect.sql(), effect.params())
}

/// Why a statement of a transaction refuses it.
pub(super) enum Refusal {
    /// It changed no row (a condition in its `WHERE` did not hold).
    NoRow,
    /// The server refused its data (a constraint, a check, an invalid
    /// value): the server's message.
    Data(String),
    /// The store failed (connection, timeout, a statement it rejects).
    Store(StoreError),
}

/// Whether `answer` refuses its transaction, and why.
pub(super) fn refusal(answer: Result<Answer, tokio_postgres::Error>) -> Option<Refusal> {
    match answer {
        Ok(answer) if answer.affected == 0 => Some(Refusal::NoRow),
        Ok(_) => None,
        Err(err) => {
            let data = err
                .code()
                .is_some_and(|code| ["22", "23"].iter().any(|c| code.code().starts_with(c)));
            match (data, err.as_db_error()) {
                (true, Some(db)) => Some(Refusal::Data(db.message().to_owned())),
                _ => Some(Refusal::Store(pg_error("transaction", err))),
            }
        }
    }
}
