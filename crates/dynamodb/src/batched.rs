//! The locking path's writes, batched: up to 25 claims, or 25 fenced writes
//! (complete, fail, release, extend), in ONE PartiQL `BatchExecuteStatement`.
//! Each statement is written or refused on its own (not a transaction) and
//! costs what its single request costs (1 WCU per KB, the `started` index's
//! entry besides); each keeps its single write's condition, next to it
//! here. A claim refused in a batch is settled alone by the store trait's
//! claim loop ([`exactly_once_core::store::Store::claim_many`]).

use std::collections::HashSet;

use futures_util::{StreamExt as _, TryStreamExt as _, stream};

use aws_sdk_dynamodb::types::{
    AttributeValue, BatchStatementErrorCodeEnum, BatchStatementRequest, BatchStatementResponse,
    ReturnValuesOnConditionCheckFailure,
};

use super::codec::{RawItem, n, s, status_value};
use super::write::parse_old;
use super::{DynamoDbStore, sdk_error};
use exactly_once_core::outbox::Pending;
use exactly_once_core::store::{
    ClaimRequest, Conditional, FencedWrite, Lease, Status, Store, StoreError, bounded,
};

/// DynamoDB's most statements per `BatchExecuteStatement`.
pub(super) const MAX_STATEMENTS: usize = 25;

/// The outbox clears' `BatchExecuteStatement`s in flight at once (the
/// claims and fenced writes go one at a time, within the engine's
/// `MAX_IN_FLIGHT`).
const CLEARS_IN_FLIGHT: usize = 8;

/// A statement and its parameters.
type Statement = (String, Vec<AttributeValue>);

/// Claims: each key's STARTED item at version 1, as `INSERT`s.
/// Invariant: one live item per key. An `INSERT` never replaces an item
/// (DynamoDB answers `DuplicateItem`, without the item): such a claim,
/// and one refused for any other reason, comes back `Conflict(None)` and
/// is settled alone, by the conditional `PutItem` that also takes over
/// an item past its TTL (see locking.rs, `create_started`).
pub(super) async fn create_started_many(
    store: &DynamoDbStore,
    claims: &[(String, ClaimRequest<'_>)],
) -> Result<Vec<Conditional<Lease>>, StoreError> {
    let now = store.now_ms();
    let mut leases = Vec::with_capacity(claims.len());
    let mut statements = Vec::with_capacity(claims.len());
    for (pk, request) in claims {
        let (item, lease) = store.started_item(pk, *request, now);
        statements.push(store.insert(&item));
        leases.push(lease);
    }
    let pks: Vec<&str> = claims.iter().map(|(pk, _)| pk.as_str()).collect();
    let answers = store
        .execute("claim (BatchExecuteStatement)", &pks, statements, 1)
        .await?;
    Ok(leases
        .into_iter()
        .zip(answers)
        .map(|(lease, answer)| match answer.error() {
            None => Conditional::Written(lease),
            Some(_) => Conditional::Conflict(None),
        })
        .collect())
}

/// Fenced writes, as `UPDATE`s, each conditioned on the fence.
/// Invariant: only the current owner of a STARTED item writes to it; a
/// worker whose lock was taken over (new version, new owner) is fenced
/// out (`ConditionalCheckFailed`: the lock is lost), alone. A write
/// refused because it was already made (sent again after its answer
/// was lost) recognises itself from the item returned.
pub(super) async fn write_fenced(
    store: &DynamoDbStore,
    writes: &[(Lease, FencedWrite)],
) -> Vec<Result<u64, StoreError>> {
    const OPERATION: &str = "fenced write (BatchExecuteStatement)";
    let now = store.now_ms();
    let expires_at_s = store.config.expires_at_s(now);
    let mut statements = Vec::with_capacity(writes.len());
    let mut answers = Vec::with_capacity(writes.len());
    for (lease, write) in writes {
        let (set, remove, mut values): (&[&str], &[&str], Vec<AttributeValue>) = match write {
            FencedWrite::Complete { result } => {
                let mut values = vec![status_value(Status::Completed), n(expires_at_s)];
                values.push(n(now));
                match result {
                    Some(result) => {
                        values.push(s(result.as_str()));
                        (
                            &["status", "expires_at", "updated_at", "result"],
                            &["lock_expires_at", "started_shard"],
                            values,
                        )
                    }
                    None => (
                        &["status", "expires_at", "updated_at"],
                        &["lock_expires_at", "started_shard"],
                        values,
                    ),
                }
            }
            FencedWrite::Fail { error } => (
                &["status", "error", "expires_at", "updated_at"],
                &["lock_expires_at", "started_shard"],
                vec![
                    status_value(Status::Failed),
                    s(bounded(error)),
                    n(expires_at_s),
                    n(now),
                ],
            ),
            FencedWrite::Release => (&["lock_expires_at", "updated_at"], &[], vec![n(0), n(now)]),
            FencedWrite::Extend { until_ms } => (
                &["lock_expires_at", "updated_at"],
                &[],
                vec![n(*until_ms), n(now)],
            ),
        };
        // The fence: STARTED, at this version, held by this owner.
        values.extend([
            s(lease.pk.as_str()),
            status_value(Status::Started),
            n(lease.version),
            s(lease.owner.as_str()),
        ]);
        statements.push((store.fenced_statement(set, remove), values));
        answers.push(write.answer(expires_at_s));
    }
    let pks: Vec<&str> = writes.iter().map(|(lease, _)| lease.pk.as_str()).collect();
    match store.execute(OPERATION, &pks, statements, 1).await {
        Err(err) => writes.iter().map(|_| Err(err.clone())).collect(),
        Ok(responses) => responses
            .iter()
            .zip(writes)
            .zip(answers)
            .map(
                |((response, (lease, write)), answer)| match response.error() {
                    None => Ok(answer),
                    Some(error) => match error.code() {
                        // Judged from the item found: this very write made
                        // before (sent again), or the lock lost.
                        Some(BatchStatementErrorCodeEnum::ConditionalCheckFailed) => {
                            let found = parse_old(error.item())?;
                            write.refused(lease, found.as_deref())
                        }
                        code => Err(statement_error(OPERATION, code, error.message())),
                    },
                },
            )
            .collect(),
    }
}

/// The outboxes of completions whose messages were sent, removed as
/// `UPDATE`s, 25 to a request.
/// Invariant: only the messages of the completion that was sent are
/// cleared (COMPLETED under its owner); an item that changed since (past
/// its TTL, claimed again) is refused (`ConditionalCheckFailed`) and
/// keeps its own.
pub(super) async fn outbox_sent(store: &DynamoDbStore, sent: &[Pending]) -> Result<(), StoreError> {
    const OPERATION: &str = "clear outbox (BatchExecuteStatement)";
    let statement = format!(
        "UPDATE \"{}\" REMOVE \"outbox\" REMOVE \"outbox_shard\" WHERE \"pk\" = ? \
         AND \"status\" = ? AND \"owner\" = ?",
        store.config.table_name
    );
    let statements = sent
        .iter()
        .map(|pending| {
            let parameters = vec![
                s(&pending.pk),
                status_value(Status::Completed),
                s(&pending.owner),
            ];
            (statement.clone(), parameters)
        })
        .collect();
    let pks: Vec<&str> = sent.iter().map(|pending| pending.pk.as_str()).collect();
    // The batch's lanes are done: its clears go out at once.
    let responses = store
        .execute(OPERATION, &pks, statements, CLEARS_IN_FLIGHT)
        .await?;
    let refused = responses.iter().filter_map(BatchStatementResponse::error);
    match refused
        .filter(|error| error.code() != Some(&BatchStatementErrorCodeEnum::ConditionalCheckFailed))
        .map(|error| statement_error(OPERATION, error.code(), error.message()))
        .next()
    {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

impl DynamoDbStore {
    /// `INSERT INTO "<table>" VALUE {'name': ?, ...}` of `item`.
    fn insert(&self, item: &RawItem) -> Statement {
        let mut names: Vec<&String> = item.keys().collect();
        names.sort();
        let fields: Vec<String> = names.iter().map(|name| format!("'{name}': ?")).collect();
        let statement = format!(
            "INSERT INTO \"{}\" VALUE {{{}}}",
            self.config.table_name,
            fields.join(", ")
        );
        (
            statement,
            names.iter().map(|name| item[*name].clone()).collect(),
        )
    }

    /// `UPDATE "<table>" SET "a" = ? ... REMOVE "b" ... WHERE` the fence
    /// (`pk`, then status, version and owner as parameters).
    fn fenced_statement(&self, set: &[&str], remove: &[&str]) -> String {
        let set: String = set
            .iter()
            .map(|name| format!(" SET \"{name}\" = ?"))
            .collect();
        let remove: String = remove
            .iter()
            .map(|name| format!(" REMOVE \"{name}\""))
            .collect();
        format!(
            "UPDATE \"{}\"{set}{remove} WHERE \"pk\" = ? AND \"status\" = ? AND \"version\" = ? \
             AND \"owner\" = ?",
            self.config.table_name
        )
    }

    /// Runs `statements` (of the items `pks`, in order), as many
    /// `BatchExecuteStatement`s as needed: at most 25 statements each, no
    /// item twice in one (DynamoDB refuses the whole request otherwise), up
    /// to `in_flight` at once (a round's requests touch distinct items).
    /// Each statement's answer, in order.
    async fn execute(
        &self,
        operation: &'static str,
        pks: &[&str],
        statements: Vec<Statement>,
        in_flight: usize,
    ) -> Result<Vec<BatchStatementResponse>, StoreError> {
        let mut answers: Vec<Option<BatchStatementResponse>> = vec![None; statements.len()];
        let mut pending: Vec<usize> = (0..statements.len()).collect();
        while !pending.is_empty() {
            let mut seen = HashSet::new();
            let (round, later): (Vec<usize>, Vec<usize>) =
                pending.iter().partition(|&&i| seen.insert(pks[i]));
            let chunks: Vec<&[usize]> = round.chunks(MAX_STATEMENTS).collect();
            // Collected first: a stream over the iterator's closure is not
            // `Send` enough for the store's futures.
            let requests: Vec<_> = chunks
                .iter()
                .map(|chunk| self.execute_chunk(operation, chunk, &statements))
                .collect();
            let outputs: Vec<Vec<BatchStatementResponse>> = stream::iter(requests)
                .buffered(in_flight)
                .try_collect()
                .await?;
            for (chunk, responses) in chunks.iter().zip(outputs) {
                for (&i, response) in chunk.iter().zip(responses) {
                    answers[i] = Some(response);
                }
            }
            pending = later;
        }
        Ok(answers.into_iter().flatten().collect())
    }

    /// One `BatchExecuteStatement` of the `statements` at `chunk`: their
    /// answers, in order.
    async fn execute_chunk(
        &self,
        operation: &'static str,
        chunk: &[usize],
        statements: &[Statement],
    ) -> Result<Vec<BatchStatementResponse>, StoreError> {
        let requests = chunk
            .iter()
            .map(|&i| {
                let (statement, parameters) = &statements[i];
                BatchStatementRequest::builder()
                    .statement(statement)
                    .set_parameters(Some(parameters.clone()))
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    )
                    .build()
                    .map_err(|err| StoreError::Rejected {
                        operation,
                        message: err.to_string(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let output = self
            .client
            .batch_execute_statement()
            .set_statements(Some(requests))
            .send()
            .await
            .map_err(|err| sdk_error(operation, err))?;
        let responses = output.responses();
        if responses.len() != chunk.len() {
            return Err(StoreError::Unavailable {
                operation,
                message: format!("{} answers to {} statements", responses.len(), chunk.len()),
            });
        }
        Ok(responses.to_vec())
    }
}

/// A statement's own error, as a store error: throttling and the like go
/// away by themselves (retryable), the rest is about the request.
fn statement_error(
    operation: &'static str,
    code: Option<&BatchStatementErrorCodeEnum>,
    message: Option<&str>,
) -> StoreError {
    let message = format!(
        "{}: {}",
        code.map_or("unknown", |code| code.as_str()),
        message.unwrap_or_default()
    );
    match code {
        Some(
            BatchStatementErrorCodeEnum::ProvisionedThroughputExceeded
            | BatchStatementErrorCodeEnum::RequestLimitExceeded
            | BatchStatementErrorCodeEnum::ThrottlingError
            | BatchStatementErrorCodeEnum::InternalServerError
            | BatchStatementErrorCodeEnum::TransactionConflict,
        ) => StoreError::Unavailable { operation, message },
        _ => StoreError::Rejected { operation, message },
    }
}
