//! The lock-free path on PostgreSQL, for work whose whole effect is SQL in
//! the same database: no claim and no lock. Each message's COMPLETED row
//! and its effect commit in ONE transaction, the row created only if its
//! key is new (see `INSERT_NEW`, locking.rs); a concurrent duplicate waits
//! on the key's unique index, then finds the row and is, by construction, a
//! duplicate.

use super::increment::increment_statement;
use super::locking::{Refusal, effect_statement, refusal};
use super::rows::{flag, item_of, new_row};
use super::transaction::{Statement, begin_with, end};
use tokio_postgres::Row;

use super::{PostgresStore, SqlEffect, pg_error};
use exactly_once_core::store::{
    Commit, CommitOutcome, NewItem, Store, StoreError, transaction_effects,
};

/// What a statement of a lock-free commit is.
#[derive(Debug, Clone, Copy)]
enum Action {
    /// Message `index`'s COMPLETED row, created.
    Row(usize),
    /// Message `index`'s held row, completed under its fence.
    Held(usize),
    /// Statement `.1` of message `.0`'s effect.
    Write(usize, usize),
    /// Merged increment `index`.
    Increment(usize),
}

/// Absent | expired ──commit──▶ COMPLETED v1, with the effect: each
/// message's row and its statements, then the increments merged per
/// row, in ONE transaction of two round trips (everything pipelined,
/// then COMMIT or ROLLBACK). Returns the rows' `expires_at`, or why
/// nothing was written.
pub(super) async fn commit(
    store: &PostgresStore,
    commits: Vec<Commit<SqlEffect>>,
) -> Result<CommitOutcome, StoreError> {
    let room = (super::MAX_EFFECTS + 1).saturating_sub(commits.len());
    let increments = transaction_effects(commits.iter().map(|c| &c.effects), room)?;
    let now = store.now_ms();
    let expires_at_s = store.config.expires_at_s(now);
    let mut actions = Vec::new();
    let mut statements = Vec::new();
    for (index, commit) in commits.iter().enumerate() {
        match &commit.held {
            // A held key (the locking path): completed under its fence
            // (see locking.rs, COMPLETE); no row changed: taken.
            Some(lease) => {
                let texts = (commit.result.as_deref(), commit.effects.outbox.as_deref());
                statements.push(store.completion(lease, texts).0);
                actions.push(Action::Held(index));
            }
            None => {
                let pk = store.pk(&commit.key)?;
                let row = NewItem::completed(&pk, commit, &store.config, now);
                // Invariant: one live row per key (see locking.rs, INSERT_NEW).
                statements.push(Statement::new(store.sql.insert_new.as_str(), new_row(&row)));
                actions.push(Action::Row(index));
            }
        }
        for (w, write) in commit.effects.writes.iter().enumerate() {
            statements.push(effect_statement(write));
            actions.push(Action::Write(index, w));
        }
    }
    for (merged, increment) in increments.iter().enumerate() {
        statements.push(increment_statement(increment)?);
        actions.push(Action::Increment(merged));
    }
    const OPERATION: &str = "commit (transaction)";
    let committed = store
        .with_client(OPERATION, async |client| {
            let answers = begin_with(client, &statements)
                .await
                .map_err(|err| pg_error(OPERATION, err))?;
            // Decided without returning early: the transaction must end.
            let mut outcome = None;
            for (action, answer) in actions.iter().zip(answers) {
                outcome = match (*action, answer) {
                    // The row statement returns a row either way: written,
                    // or the row that stopped it (none: not visible yet).
                    (Action::Row(index), Ok(answer)) => key_taken(index, &answer.rows),
                    (Action::Row(_) | Action::Held(_), Err(err)) => {
                        Some(Err(pg_error(OPERATION, err)))
                    }
                    (Action::Held(index), Ok(answer)) => (answer.affected == 0)
                        .then_some(Ok(CommitOutcome::KeyTaken { index, item: None })),
                    (Action::Write(index, effect), answer) => {
                        refusal(answer).map(|reason| match reason {
                            Refusal::Store(err) => Err(err),
                            Refusal::NoRow => Ok(CommitOutcome::EffectRefused {
                                index,
                                effect,
                                message: "the statement changed no row".to_owned(),
                            }),
                            Refusal::Data(message) => Ok(CommitOutcome::EffectRefused {
                                index,
                                effect,
                                message,
                            }),
                        })
                    }
                    (Action::Increment(merged), answer) => match refusal(answer) {
                        None => None,
                        Some(Refusal::Store(err)) => Some(Err(err)),
                        Some(_) => Some(Ok(CommitOutcome::IncrementRefused {
                            item: increments[merged].item(),
                            current: None,
                        })),
                    },
                };
                if outcome.is_some() {
                    break;
                }
            }
            end(client, outcome.is_none())
                .await
                .map_err(|err| pg_error(OPERATION, err))?;
            match outcome {
                None => Ok(CommitOutcome::Committed {
                    expires_at_s,
                    contended: 0,
                }),
                Some(Ok(CommitOutcome::IncrementRefused { item, .. })) => {
                    // The numbers as they are now, after the rollback.
                    let increment = increments.iter().find(|i| i.item() == item);
                    let current = match increment {
                        Some(increment) => store.numbers_now(client, increment).await,
                        None => None,
                    };
                    Ok(CommitOutcome::IncrementRefused { item, current })
                }
                Some(decided) => decided,
            }
        })
        .await;
    match committed {
        // A held row's fence refused: the row as it is now, by which
        // the engine tells this very completion made before (the
        // transaction sent again) from the lock lost.
        Ok(CommitOutcome::KeyTaken { index, item: None })
            if let Some(lease) = &commits[index].held =>
        {
            let item = store.row_at(&lease.pk).await?.map(Box::new);
            Ok(CommitOutcome::KeyTaken { index, item })
        }
        committed => committed,
    }
}

/// The outcome of message `index`'s row statement: `None` when it wrote
/// the row; else the key is taken, by the row found (none: not visible to
/// the statement yet).
fn key_taken(index: usize, rows: &[Row]) -> Option<Result<CommitOutcome, StoreError>> {
    let row = rows.first();
    match row.map(flag).transpose() {
        Ok(Some(true)) => None,
        Ok(_) => Some(
            row.map(item_of)
                .transpose()
                .map(|item| CommitOutcome::KeyTaken {
                    index,
                    item: item.map(Box::new),
                }),
        ),
        Err(err) => Some(Err(err)),
    }
}
