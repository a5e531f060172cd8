//! The DynamoDB backend: one item per key in the idempotency table, each
//! transition ONE conditional write (`PutItem`, `UpdateItem`, or
//! `TransactWriteItems` with the effect; up to 25 claims or fenced writes
//! in one PartiQL `BatchExecuteStatement`, each conditioned on its own).
//! One file per path, each read top to bottom with its conditions, each
//! transition a function named as the [`Store`] method it is: `locking.rs`,
//! `batched.rs`, `lock_free.rs`, `operator.rs`; reads in `read.rs`, the
//! listing scan in `listing.rs`.

#![deny(missing_docs)]

mod batched;
mod clock;
mod codec;
mod increment;
mod listing;
mod lock_free;
mod locking;
mod operator;
mod read;
mod requests;
pub mod settings;
mod transact;
mod write;

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

/// The AWS SDK for DynamoDB this crate is built with: its `Client` and
/// `types::TransactWriteItem` (the effects a DynamoDB handler returns) at the
/// version the store expects.
pub use aws_sdk_dynamodb;
pub use aws_sdk_dynamodb::Client;
pub use aws_sdk_dynamodb::types::TransactWriteItem;
pub use codec::RawItem;
use codec::{n, s};
pub use listing::{STARTED_INDEX, STARTED_SHARDS, ScanOptions, UNSENT_INDEX};
pub use requests::CountRequests;
pub use settings::DynamoDbSettings;

use exactly_once_core::clock::ClockWatch;
use exactly_once_core::config::StoreConfig;
use exactly_once_core::outbox::Pending;
use exactly_once_core::store::{
    ClaimRequest, Commit, CommitOutcome, Conditional, Effects, FencedWrite, Lease, Listed, Listing,
    Operator, Status, Store, StoreError, StoredItem, bounded,
};

/// DynamoDB's limit of 100 actions per transaction, less the completion.
pub const MAX_EFFECT_WRITES: usize = 99;
/// DynamoDB's limit on a partition key value, in bytes.
pub const MAX_KEY_BYTES: usize = 2048;

/// The idempotency table in DynamoDB, seen through the transitions of its
/// keys.
#[derive(Debug, Clone)]
pub struct DynamoDbStore {
    client: Client,
    config: StoreConfig,
    scan: ScanOptions,
    clock: Arc<ClockWatch>,
}

impl DynamoDbStore {
    /// The store on `client` as `config` says. Its requests count for the
    /// invocation they are sent for (`store::requests::counted`), and each
    /// answer's `Date` is read against this process's clock.
    pub fn new(client: Client, config: StoreConfig) -> Self {
        let clock = Arc::<ClockWatch>::default();
        let client = client
            .config()
            .to_builder()
            .interceptor(requests::in_scope())
            .interceptor(clock::date_header(Arc::clone(&clock)))
            .build();
        Self {
            client: Client::from_conf(client),
            config,
            scan: ScanOptions::default(),
            clock,
        }
    }

    /// Its DynamoDB client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The same store, its listings scanning as `scan` says.
    pub fn with_scan(self, scan: ScanOptions) -> Self {
        Self { scan, ..self }
    }
}

impl Store for DynamoDbStore {
    type Effect = TransactWriteItem;
    const NAME: &'static str = "DynamoDB";
    const MAX_EFFECTS: usize = MAX_EFFECT_WRITES;
    const MAX_KEY_BYTES: usize = MAX_KEY_BYTES;
    /// DynamoDB's limit on a transaction's aggregate size.
    const MAX_TRANSACTION_BYTES: usize = 4_000_000;
    /// PartiQL's `BatchExecuteStatement`: 25 statements.
    const MAX_BATCH: usize = batched::MAX_STATEMENTS;

    fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// From the `Date` of its answers: whole seconds.
    fn clock_skew_ms(&self) -> Option<i64> {
        self.clock.skew_ms(self.config.clock_offset_ms)
    }

    /// The client's attempt timeout (`DYNAMODB_ATTEMPT_TIMEOUT_MS`).
    fn request_timeout(&self) -> std::time::Duration {
        let timeouts = self.client.config().timeout_config();
        timeouts
            .and_then(aws_smithy_types::timeout::TimeoutConfig::operation_attempt_timeout)
            .unwrap_or(DynamoDbSettings::default().attempt_timeout)
    }

    fn touched(effect: &TransactWriteItem) -> Option<String> {
        write::touched_item(effect)
    }

    async fn create_started(
        &self,
        pk: &str,
        request: ClaimRequest<'_>,
    ) -> Result<Conditional<Lease>, StoreError> {
        locking::create_started(self, pk, request).await
    }

    async fn create_started_many(
        &self,
        claims: &[(String, ClaimRequest<'_>)],
    ) -> Result<Vec<Conditional<Lease>>, StoreError> {
        batched::create_started_many(self, claims).await
    }

    async fn write_fenced(&self, writes: &[(Lease, FencedWrite)]) -> Vec<Result<u64, StoreError>> {
        batched::write_fenced(self, writes).await
    }

    async fn take_over(
        &self,
        observed: &StoredItem,
        request: ClaimRequest<'_>,
    ) -> Result<Conditional<Lease>, StoreError> {
        locking::take_over(self, observed, request).await
    }

    async fn complete(
        &self,
        lease: &Lease,
        result: Option<&str>,
        effects: Effects<TransactWriteItem>,
    ) -> Result<u64, StoreError> {
        locking::complete(self, lease, result, effects).await
    }

    async fn outbox_sent(&self, sent: &[Pending]) -> Result<(), StoreError> {
        batched::outbox_sent(self, sent).await
    }

    async fn fail(&self, lease: &Lease, error: &str) -> Result<(), StoreError> {
        locking::fail(self, lease, error).await
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        locking::release(self, lease).await
    }

    async fn extend(&self, lease: &Lease, until_ms: u64) -> Result<Lease, StoreError> {
        locking::extend(self, lease, until_ms).await
    }

    async fn commit(
        &self,
        commits: Vec<Commit<TransactWriteItem>>,
    ) -> Result<CommitOutcome, StoreError> {
        lock_free::commit(self, commits).await
    }

    async fn fail_new(
        &self,
        request: ClaimRequest<'_>,
        owner: &str,
        error: &str,
    ) -> Result<Conditional<()>, StoreError> {
        // Absent | expired ──fail──▶ FAILED v1, a poison message on the
        // lock-free path: the conditional PutItem of a claim (write.rs).
        let pk = self.pk(request.key)?;
        let now = self.now_ms();
        let mut item = self.new_item(&pk, Status::Failed, owner, request, now);
        item.insert("expires_at".to_owned(), n(self.config.expires_at_s(now)));
        item.insert("error".to_owned(), s(bounded(error)));
        // Invariant: one live item per key (see NEW_KEY).
        self.put_if_new(item, now, (), "fail new (PutItem)").await
    }

    async fn get(&self, key: &str) -> Result<Option<StoredItem>, StoreError> {
        read::get(self, key).await
    }

    async fn batch_get(&self, keys: &[&str]) -> Result<HashMap<String, StoredItem>, StoreError> {
        read::batch_get(self, keys).await
    }
}

/// The operator's transitions and listings (`exactly-once-ops`).
impl Operator for DynamoDbStore {
    async fn release_version(&self, key: &str, version: u64) -> Result<(), StoreError> {
        operator::release_version(self, key, version).await
    }

    async fn retry_failed(&self, key: &str, version: u64) -> Result<(), StoreError> {
        operator::retry_failed(self, key, version).await
    }

    async fn list(&self, listing: Listing) -> Result<Listed, StoreError> {
        listing::list(self, listing).await
    }
}

/// Classifies an SDK error that is not a conditional-check failure.
pub(crate) fn sdk_error<E, R>(operation: &'static str, err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let message = DisplayErrorContext(&err).to_string();
    match &err {
        SdkError::ServiceError(service) if !is_transient_code(service.err().code()) => {
            StoreError::Rejected { operation, message }
        }
        _ => StoreError::Unavailable { operation, message },
    }
}

/// DynamoDB error codes that go away by themselves.
fn is_transient_code(code: Option<&str>) -> bool {
    matches!(
        code,
        Some(
            "ThrottlingException"
                | "ProvisionedThroughputExceededException"
                | "RequestLimitExceeded"
                | "InternalServerError"
                | "ServiceUnavailable"
                | "TransactionConflictException"
                | "TransactionInProgressException"
                | "LimitExceededException"
        )
    )
}
