//! The locking path on PostgreSQL, top to bottom: claim, take over, then
//! complete (alone or with the effect, in one transaction), fail, release
//! or extend. Every transition is ONE statement; its `WHERE` is its
//! condition, next to it with the invariant it keeps. The claim loop that
//! judges a found row is the store trait's ([`exactly_once_core::store::Store::claim`]).

use super::rows::{conditional, new_row, number};
use super::transaction::{Answer, Statement, begin_with, end};
use super::{PostgresStore, SqlEffect, pg_error};
use crate::increment::increment_statement;
use exactly_once_core::store::{
    ClaimRequest, Conditional, Effects, Lease, NewItem, Status, Store, StoreError, StoredItem,
    bounded, increment, transaction_effects,
};

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
/// Complete (fenced).
pub(super) const COMPLETE: &str = fenced!(
    "status = 'COMPLETED', expires_at = $4, updated_at = $5, result = COALESCE($6, result), \
     outbox = $7, lock_expires_at = NULL"
);
/// The outboxes of completions whose messages were sent (`$1` the keys,
/// `$2` their owners), cleared in one statement.
/// Invariant: only the messages of the completion that was sent are
/// cleared (COMPLETED under its owner); a row that changed since (past its
/// TTL, claimed again) keeps its own.
pub(super) const CLEAR_OUTBOX: &str = "UPDATE {table} AS item SET outbox = NULL \
    FROM unnest($1::text[], $2::text[]) AS sent(pk, owner) \
    WHERE item.pk = sent.pk AND item.owner = sent.owner AND item.status = 'COMPLETED' \
    AND item.outbox IS NOT NULL";
/// Fail (fenced).
pub(super) const FAIL: &str = fenced!(
    "status = 'FAILED', error = $4, expires_at = $5, updated_at = $6, lock_expires_at = NULL"
);
/// Release (fenced): the lock ends now.
pub(super) const RELEASE: &str = fenced!("lock_expires_at = 0, updated_at = $4");
/// Extend (fenced): the lock ends at `$4`.
pub(super) const EXTEND: &str = fenced!("lock_expires_at = $4, updated_at = $5");

impl PostgresStore {
    /// Claim: create the STARTED row at version 1 (or replace an expired
    /// one); else the row found.
    pub(super) async fn insert_started(
        &self,
        pk: &str,
        request: ClaimRequest<'_>,
    ) -> Result<Conditional<Lease>, StoreError> {
        let now = self.now_ms();
        let lease = Lease::claimed(pk.to_owned(), 1, &self.config, now, &request);
        let row = NewItem::started(&lease, request, &self.config, now);
        // Invariant: one live row per key (see Statements::insert_new).
        let statement = Statement::new(self.sql.insert_new.as_str(), new_row(&row));
        self.conditional_write("claim", statement, lease).await
    }

    /// Take over: become the owner of an abandoned STARTED row, version + 1.
    pub(super) async fn take_over_row(
        &self,
        observed: &StoredItem,
        request: ClaimRequest<'_>,
    ) -> Result<Conditional<Lease>, StoreError> {
        let now = self.now_ms();
        let next = observed.version + 1;
        let lease = Lease::claimed(observed.pk.clone(), next, &self.config, now, &request);
        // Invariant: see TAKE_OVER.
        let params = vec![
            lease.pk.as_str().into(),
            lease.owner.as_str().into(),
            number(Some(lease.version)),
            number(Some(lease.lock_expires_at_ms)),
            number(Some(self.config.expires_at_s(now))),
            number(Some(now)),
            number(Some(observed.version)),
            self.config.scope.as_deref().into(),
        ];
        let statement = Statement::new(self.sql.take_over.as_str(), params);
        self.conditional_write("take over", statement, lease).await
    }

    /// Complete: the work is done; redeliveries become duplicates until the
    /// retention ends. Returns the row's new `expires_at` (epoch seconds).
    pub(super) async fn complete_alone(
        &self,
        lease: &Lease,
        texts: (Option<&str>, Option<&str>),
    ) -> Result<u64, StoreError> {
        let (statement, expires_at_s) = self.completion(lease, texts);
        let completed = Some(Status::Completed);
        // Made before (sent again): the row's own expiry.
        let made = self.fenced("complete", lease, completed, statement).await?;
        Ok(made.unwrap_or(expires_at_s))
    }

    /// Complete together with the work's own SQL, in ONE transaction: the
    /// fenced completion first, then the effect's statements, then the
    /// merged increments; either all commit or none.
    pub(super) async fn complete_with(
        &self,
        lease: &Lease,
        result: Option<&str>,
        effects: Effects<SqlEffect>,
    ) -> Result<u64, StoreError> {
        let increments = transaction_effects([&effects], super::MAX_EFFECTS)?;
        let texts = (result, effects.outbox.as_deref());
        let (completion, expires_at_s) = self.completion(lease, texts);
        let writes = effects.writes.len();
        let mut statements = vec![completion];
        statements.extend(effects.writes.iter().map(effect_statement));
        for increment in &increments {
            statements.push(increment_statement(increment)?);
        }
        const OPERATION: &str = "complete (transaction)";
        let completed = self
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
                let found = self.row_at(&lease.pk).await?;
                lease.refused(Some(Status::Completed), found.as_ref())
            }
            completed => completed,
        }
    }

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

    /// Fail permanently: redeliveries are refused without running the work.
    pub(super) async fn fail_row(&self, lease: &Lease, error: &str) -> Result<(), StoreError> {
        let now = self.now_ms();
        let mut params = fence_params(lease);
        params.extend([
            bounded(error).into(),
            number(Some(self.config.expires_at_s(now))),
            number(Some(now)),
        ]);
        self.fenced(
            "fail",
            lease,
            Some(Status::Failed),
            Statement::new(self.sql.fail.as_str(), params),
        )
        .await
        .map(|_| ())
    }

    /// Release after a retryable error: the lock ends now, so the next claim
    /// takes the key over at once (as version + 1, keeping the history).
    pub(super) async fn release_row(&self, lease: &Lease) -> Result<(), StoreError> {
        let mut params = fence_params(lease);
        params.push(number(Some(self.now_ms())));
        self.fenced(
            "release",
            lease,
            None,
            Statement::new(self.sql.release.as_str(), params),
        )
        .await
        .map(|_| ())
    }

    /// Extend (heartbeat): push the lease's end to `until_ms`.
    pub(super) async fn extend_row(
        &self,
        lease: &Lease,
        until_ms: u64,
    ) -> Result<Lease, StoreError> {
        let mut params = fence_params(lease);
        params.extend([number(Some(until_ms)), number(Some(self.now_ms()))]);
        self.fenced(
            "extend",
            lease,
            None,
            Statement::new(self.sql.extend.as_str(), params),
        )
        .await?;
        Ok(Lease {
            lock_expires_at_ms: until_ms,
            ..lease.clone()
        })
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

    /// An [`or_found`](super::rows::or_found) statement: `written`, or the
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
