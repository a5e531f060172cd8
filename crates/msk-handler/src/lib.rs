//! The demo business logic: a payments ledger. Each payment adds its amount
//! to an account's balance, which is deliberately not idempotent by itself:
//! a repeated payment shows as a wrong balance. The balance update is an
//! [`Increment`] (DynamoDB `ADD`), so a hot account's payments merge into
//! shared transactions, and the ledger runs on every store (its table a
//! DynamoDB table, a SQL table `account_id TEXT PRIMARY KEY,
//! balance_cents BIGINT, payment_count BIGINT`, or on Redis one hash per
//! account, `<table>:<account_id>`, with those two numbers as fields).
//!
//! With `LEDGER_EVENTS_DESTINATION` set (or its older name
//! `LEDGER_EVENTS_QUEUE_URL`), every applied payment also emits one message
//! there (`{"payment_id", "account_id", "amount_cents"}`, grouped by
//! account: an SQS queue's group, a Kafka record's key), committed with the
//! payment and sent after it under a stable id ([`exactly_once::outbox`]):
//! a payment refused (below `LEDGER_MIN_BALANCE_CENTS`) emits nothing.

#![deny(missing_docs)]

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::AttributeValue;
use exactly_once::Backend;
use exactly_once::config::{self, SettingsError};
use exactly_once::postgres::PostgresStore;
use exactly_once::postgres::schema::TableSchema;
use exactly_once::prelude::*;
use exactly_once::redis::RedisStore;
use serde::Deserialize;

/// A payment message, as producers write it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Payment {
    /// The payment's own id (the usual idempotency key).
    pub payment_id: String,
    /// The account credited.
    pub account_id: String,
    /// The amount in cents (negative: a debit).
    pub amount_cents: i64,
    /// ISO currency code; empty in another ledger's announcement
    /// (`{"payment_id", "account_id", "amount_cents"}`), which a second
    /// hop applies to its projection as a payment.
    #[serde(default)]
    pub currency: String,
}

impl Payment {
    /// Reads a payment; a clear, permanent error for anything else (that
    /// names what is wrong, never a value of the payload).
    pub fn parse(payload: &[u8]) -> Result<Self, HandlerError> {
        let payment: Self = serde_json::from_slice(payload).map_err(|err| {
            HandlerError::Permanent(format!("not a payment: {}", json_error(&err)))
        })?;
        if payment.account_id.is_empty() {
            return Err(HandlerError::Permanent("account_id is empty".into()));
        }
        Ok(payment)
    }

    fn summary(&self) -> String {
        format!(
            "{} {} {} to {}",
            self.payment_id, self.amount_cents, self.currency, self.account_id
        )
    }
}

/// How the ledger applies a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerMode {
    /// The lock-free path: the balance update commits in ONE transaction
    /// with the COMPLETED item, which succeeds only if the key is new. No
    /// claim, no lock: one request per payment (or less, grouped). Exactly
    /// once, even if the process dies at any point. The default.
    LockFree,
    /// The locking path: claim, then the balance update commits in one
    /// transaction with the fenced completion. Exactly once as well; two
    /// requests per payment.
    Transactional,
    /// The balance is updated first, the completion written after: a crash
    /// between the two applies the payment again on redelivery. Kept to show
    /// the window that transactional mode closes.
    Direct,
}

impl LedgerMode {
    /// Parses `LEDGER_MODE`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "lock-free" => Ok(Self::LockFree),
            "transactional" => Ok(Self::Transactional),
            "direct" => Ok(Self::Direct),
            other => Err(format!(
                "unknown ledger mode {other:?}; expected lock-free, transactional or direct"
            )),
        }
    }
}

/// The variable naming the ledger's table.
pub const TABLE_ENV: &str = "LEDGER_TABLE";

/// The ledger's table on PostgreSQL (`exactly-once-ops migrate
/// --ledger-table`): one row per account.
pub const LEDGER_SCHEMA: TableSchema = TableSchema {
    kind: "ledger",
    migrations: &[include_str!("migrations/ledger_v1.sql")],
    columns: Some("account_id, balance_cents, payment_count"),
};

/// The environment variables the ledger reads.
pub const ENV_VARS: &[&str] = &[
    "LEDGER_TABLE",
    "LEDGER_MODE",
    "LEDGER_MIN_BALANCE_CENTS",
    "LEDGER_EVENTS_DESTINATION",
    "LEDGER_EVENTS_QUEUE_URL",
];

/// Where the ledger is and how it applies payments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerSettings {
    /// The ledger table.
    pub table: String,
    /// How payments are applied.
    pub mode: LedgerMode,
    /// The lowest balance a payment may leave (e.g. 0: no overdraft); a
    /// payment that would go below fails permanently (FAILED, "insufficient
    /// funds"). `None`: unbounded.
    pub min_balance_cents: Option<i64>,
    /// Where every applied payment is announced: an SQS queue's URL, a
    /// Kafka topic (`kafka://brokers/topic`) or any destination of
    /// [`exactly_once::outbox`] (`LEDGER_EVENTS_DESTINATION`, or
    /// `LEDGER_EVENTS_QUEUE_URL` when it is unset); `None`: nowhere.
    pub events_destination: Option<String>,
}

impl LedgerSettings {
    /// [`Self::from_lookup`] of the process environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// `LEDGER_TABLE` (required), `LEDGER_MODE` (lock-free, the default,
    /// transactional or direct) and `LEDGER_MIN_BALANCE_CENTS` (unset:
    /// unbounded; not with direct mode, which has no transaction to refuse),
    /// read through `lookup`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let var = |name: &str| lookup(name).filter(|value| !value.is_empty());
        let table = config::required(var, "LEDGER_TABLE")?;
        let mode = config::parsed(var, "LEDGER_MODE", LedgerMode::LockFree, LedgerMode::parse)?;
        let floor = |text: &str| {
            let floor = text
                .trim()
                .parse::<i64>()
                .map(Some)
                .map_err(|e| e.to_string())?;
            match mode {
                LedgerMode::Direct => Err("direct mode cannot keep a floor".to_owned()),
                _ => Ok(floor),
            }
        };
        let min_balance_cents = config::parsed(var, "LEDGER_MIN_BALANCE_CENTS", None, floor)?;
        Ok(Self {
            table,
            mode,
            min_balance_cents,
            events_destination: var("LEDGER_EVENTS_DESTINATION")
                .or_else(|| var("LEDGER_EVENTS_QUEUE_URL"))
                .map(|destination| destination.trim().to_owned()),
        })
    }
}

/// The balance update of one payment.
const ADD_PAYMENT: &str = "ADD balance_cents :amount, payment_count :one";

/// Applies payments to the balances of the ledger table (hash key
/// `account_id`, attributes `balance_cents` and `payment_count`).
pub struct LedgerHandler {
    direct: DirectWriter,
    table: String,
    mode: LedgerMode,
    min_balance_cents: Option<i64>,
    events_destination: Option<String>,
}

/// Where `direct` mode writes a balance on its own, outside the completion.
enum DirectWriter {
    DynamoDb(Client),
    Postgres(Box<PostgresStore>),
    Redis(Box<RedisStore>),
}

impl LedgerHandler {
    /// A ledger on the DynamoDB table `table`, applying payments as `mode`
    /// says, unbounded.
    pub fn new(client: Client, table: impl Into<String>, mode: LedgerMode) -> Self {
        Self::with_writer(DirectWriter::DynamoDb(client), table.into(), mode)
    }

    /// A ledger on the SQL table `table` of `store`'s database.
    pub fn on_postgres(store: PostgresStore, table: impl Into<String>, mode: LedgerMode) -> Self {
        Self::with_writer(DirectWriter::Postgres(Box::new(store)), table.into(), mode)
    }

    /// A ledger on Redis: each account a hash `<table>:<account_id>` with
    /// the numbers `balance_cents` and `payment_count`.
    pub fn on_redis(store: RedisStore, table: impl Into<String>, mode: LedgerMode) -> Self {
        Self::with_writer(DirectWriter::Redis(Box::new(store)), table.into(), mode)
    }

    fn with_writer(direct: DirectWriter, table: String, mode: LedgerMode) -> Self {
        Self {
            direct,
            table,
            mode,
            min_balance_cents: None,
            events_destination: None,
        }
    }

    /// A ledger on DynamoDB as `settings` say.
    pub fn from_settings(client: Client, settings: LedgerSettings) -> Self {
        Self::new(client, settings.table, settings.mode)
            .with_floor(settings.min_balance_cents)
            .with_events(settings.events_destination)
    }

    /// A ledger on PostgreSQL as `settings` say.
    pub fn from_settings_on_postgres(store: PostgresStore, settings: LedgerSettings) -> Self {
        Self::on_postgres(store, settings.table, settings.mode)
            .with_floor(settings.min_balance_cents)
            .with_events(settings.events_destination)
    }

    /// A ledger on Redis as `settings` say.
    pub fn from_settings_on_redis(store: RedisStore, settings: LedgerSettings) -> Self {
        Self::on_redis(store, settings.table, settings.mode)
            .with_floor(settings.min_balance_cents)
            .with_events(settings.events_destination)
    }

    /// The ledger as `settings` say, on the store `run_with` connected:
    /// its table checked there (on PostgreSQL its schema; on a Redis
    /// Cluster that its hashes share the idempotency table's slot).
    pub async fn connect(backend: &Backend, settings: LedgerSettings) -> Result<Self, String> {
        match backend {
            Backend::DynamoDb(store) => Ok(Self::from_settings(store.client().clone(), settings)),
            Backend::Postgres(store) => {
                exactly_once::postgres::check_schema(store, LEDGER_SCHEMA, &settings.table)
                    .await
                    .map_err(|err| err.to_string())?;
                Ok(Self::from_settings_on_postgres(store.clone(), settings))
            }
            Backend::Redis(store) => {
                store.check_names(&[&settings.table])?;
                Ok(Self::from_settings_on_redis(store.clone(), settings))
            }
            other => Err(format!("the ledger does not run on {:?}", other.kind())),
        }
    }

    /// Payments may not take a balance below `min_balance_cents` (`None`:
    /// unbounded). Not kept by direct mode.
    pub fn with_floor(mut self, min_balance_cents: Option<i64>) -> Self {
        self.min_balance_cents = min_balance_cents;
        self
    }

    /// Every applied payment is announced to `destination` (`None`:
    /// nowhere).
    pub fn with_events(mut self, destination: Option<String>) -> Self {
        self.events_destination = destination;
        self
    }

    /// The completion of an applied `payment`: its summary, and its
    /// announcement when there is a destination for it.
    fn applied<E>(&self, payment: &Payment) -> Completion<E> {
        let completion = Completion::done(payment.summary());
        match &self.events_destination {
            Some(destination) => {
                let body = serde_json::json!({
                    "payment_id": payment.payment_id,
                    "account_id": payment.account_id,
                    "amount_cents": payment.amount_cents,
                });
                // One account's announcements in order (a FIFO queue's
                // group, a Kafka record's key).
                let message =
                    Message::new(destination, body.to_string()).in_group(&payment.account_id);
                completion.emit_message(message)
            }
            None => completion,
        }
    }

    /// The path its mode takes (also what its [`RecordHandler`] answers,
    /// for every store).
    pub fn commit_path(&self) -> CommitPath {
        match self.mode {
            LedgerMode::LockFree => CommitPath::LockFree,
            LedgerMode::Transactional | LedgerMode::Direct => CommitPath::Locking,
        }
    }

    /// The balance update of `payment`: its amount, and one more payment.
    pub fn increment(&self, payment: &Payment) -> Increment {
        let account = Increment::new(&self.table, "account_id", &payment.account_id);
        let account = match self.min_balance_cents {
            Some(floor) => account.add_at_least("balance_cents", payment.amount_cents, floor),
            None => account.add("balance_cents", payment.amount_cents),
        };
        account.add("payment_count", 1)
    }

    /// Direct mode: the balance update on its own, committed at once.
    async fn apply_now(&self, payment: &Payment) -> Result<(), HandlerError> {
        // The payment itself is fine: a ledger write that fails is retried.
        let failed =
            |message: String| HandlerError::Retryable(format!("ledger update failed: {message}"));
        match &self.direct {
            DirectWriter::DynamoDb(client) => {
                let (name, key) = Self::key(payment);
                client
                    .update_item()
                    .table_name(&self.table)
                    .key(name, key)
                    .update_expression(ADD_PAYMENT)
                    .set_expression_attribute_values(Some(Self::values(payment)))
                    .send()
                    .await
                    .map_err(|err| failed(DisplayErrorContext(&err).to_string()))?;
            }
            DirectWriter::Postgres(store) => store
                .apply(&self.increment(payment))
                .await
                .map_err(|err| failed(err.to_string()))?,
            DirectWriter::Redis(store) => store
                .apply(&self.increment(payment))
                .await
                .map_err(|err| failed(err.to_string()))?,
        }
        Ok(())
    }

    fn values(payment: &Payment) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (
                ":amount".to_owned(),
                AttributeValue::N(payment.amount_cents.to_string()),
            ),
            (":one".to_owned(), AttributeValue::N("1".into())),
        ])
    }

    fn key(payment: &Payment) -> (String, AttributeValue) {
        (
            "account_id".to_owned(),
            AttributeValue::S(payment.account_id.clone()),
        )
    }
}

/// The same on every store: the balance update is an increment, which every
/// backend commits.
///
/// A payment is the JSON body of a record of any source: a Kafka record's
/// value, an SQS message's body, a Kinesis record's data, or the new image
/// of an item a DynamoDB Streams record INSERTs (a change of another kind
/// is not a payment, and is done without effect).
impl<E: Clone + Send + Sync + 'static> RecordHandler<E> for LedgerHandler {
    type Record = Record;

    fn commit_path(&self) -> CommitPath {
        LedgerHandler::commit_path(self)
    }

    async fn handle(
        &self,
        _: &FencingToken,
        record: &Record,
    ) -> Result<Completion<E>, HandlerError> {
        if let Record::DynamoDb(change) = record
            && change.event_name != "INSERT"
        {
            return Ok(Completion::done(format!(
                "not a payment: {} of an item",
                change.event_name
            )));
        }
        let payment = Payment::parse(&record.body())?;
        match self.mode {
            // The effect as an increment, committed by the engine (no side
            // effect); below the floor: insufficient funds, permanent.
            LedgerMode::LockFree | LedgerMode::Transactional => {
                Ok(self.applied(&payment).increment(self.increment(&payment)))
            }
            LedgerMode::Direct => {
                self.apply_now(&payment).await?;
                Ok(self.applied(&payment))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_is_lock_free_unless_told_otherwise() {
        let settings = |mode: Option<&str>| {
            LedgerSettings::from_lookup(|name| match name {
                "LEDGER_TABLE" => Some("ledger".into()),
                "LEDGER_MODE" => mode.map(str::to_owned),
                _ => None,
            })
        };
        assert_eq!(settings(None).map(|s| s.mode), Ok(LedgerMode::LockFree));
        assert_eq!(
            settings(Some("transactional")).map(|s| s.mode),
            Ok(LedgerMode::Transactional)
        );
        assert_eq!(
            settings(Some("direct")).map(|s| s.mode),
            Ok(LedgerMode::Direct)
        );
        let floor = |mode: &str, floor: &str| {
            LedgerSettings::from_lookup(|name| match name {
                "LEDGER_TABLE" => Some("ledger".into()),
                "LEDGER_MODE" => Some(mode.into()),
                "LEDGER_MIN_BALANCE_CENTS" => Some(floor.into()),
                _ => None,
            })
        };
        assert_eq!(settings(None).map(|s| s.min_balance_cents), Ok(None));
        assert_eq!(
            floor("lock-free", "0").map(|s| s.min_balance_cents),
            Ok(Some(0))
        );
        assert_eq!(
            floor("lock-free", "").map(|s| s.min_balance_cents),
            Ok(None)
        );
        for (mode, bad) in [("lock-free", "zero"), ("direct", "0")] {
            let err = floor(mode, bad).expect_err("refused");
            assert_eq!(err.variable, "LEDGER_MIN_BALANCE_CENTS");
        }
        let err = settings(Some("eventually")).expect_err("unknown mode");
        assert_eq!(err.variable, "LEDGER_MODE");
        let err = LedgerSettings::from_lookup(|_| None).expect_err("no table");
        assert_eq!(
            err.to_string(),
            "environment variable LEDGER_TABLE: is required and not set"
        );
    }

    #[test]
    fn the_events_destination_is_read_under_its_new_name_then_its_old_one() {
        let destination = |vars: &[(&str, &str)]| {
            LedgerSettings::from_lookup(|name| match name {
                "LEDGER_TABLE" => Some("ledger".into()),
                _ => vars
                    .iter()
                    .find(|(var, _)| *var == name)
                    .map(|(_, value)| (*value).to_owned()),
            })
            .map(|settings| settings.events_destination)
        };
        let queue = "https://sqs.eu-west-1.amazonaws.com/1/ledger-events";
        let topic = "kafka://b-1:9098/ledger-events?auth=iam";
        assert_eq!(destination(&[]), Ok(None));
        assert_eq!(
            destination(&[("LEDGER_EVENTS_QUEUE_URL", queue)]),
            Ok(Some(queue.to_owned()))
        );
        assert_eq!(
            destination(&[("LEDGER_EVENTS_DESTINATION", topic)]),
            Ok(Some(topic.to_owned()))
        );
        assert_eq!(
            destination(&[
                ("LEDGER_EVENTS_DESTINATION", topic),
                ("LEDGER_EVENTS_QUEUE_URL", queue)
            ]),
            Ok(Some(topic.to_owned()))
        );
    }

    #[test]
    fn payments_are_checked_with_clear_permanent_errors() {
        let ok =
            br#"{"payment_id":"p-1","account_id":"acc-1","amount_cents":1250,"currency":"EUR"}"#;
        assert_eq!(Payment::parse(ok).map(|p| p.amount_cents), Ok(1250));
        for (payload, expected) in [
            (
                &b"{not json"[..],
                "not a payment: not valid JSON (at line 1 column 2)",
            ),
            (
                br#"{"payment_id":"p","account_id":"a","amount_cents":12.5,"currency":"EUR"}"#,
                "not a payment: wrong type or value, expected i64 (at line 1 column 54)",
            ),
            (
                br#"{"payment_id":"p","account_id":"a","currency":"EUR"}"#,
                "not a payment: missing field `amount_cents`",
            ),
            (
                br#"{"payment_id":"p","account_id":"","amount_cents":1,"currency":"EUR"}"#,
                "account_id is empty",
            ),
        ] {
            match Payment::parse(payload) {
                Err(HandlerError::Permanent(message)) => {
                    assert!(message.starts_with(expected), "{message}");
                }
                other => panic!("expected a permanent error, got {other:?}"),
            }
        }
    }
}
