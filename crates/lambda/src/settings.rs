//! The function's configuration, read from environment variables once per
//! container and validated with one clear error naming the bad variable.

use std::time::Duration;

use exactly_once_core::config::{LongKeyPolicy, SettingsError, StoreConfig, parsed, required};
use exactly_once_core::engine::{EngineConfig, PoisonPolicy};

use super::OrderingMode;
use super::fingerprint::Fingerprint;
use super::keys::{KeySpec, MissingKeyPolicy};
use super::report::KeyLogging;
use super::sources::Source;
use super::telemetry::TracingExport;

/// The environment variables this crate reads (PostgreSQL's are in
/// `exactly_once_postgres::connect::ENV_VARS`, Redis's in
/// `exactly_once_redis::connect::ENV_VARS` and
/// `exactly_once_redis::cache::ENV_VARS`).
pub const ENV_VARS: &[&str] = &[
    "IDEMPOTENCY_STORE",
    "IDEMPOTENCY_TABLE",
    "IDEMPOTENCY_KEY_HEADER",
    "IDEMPOTENCY_KEY_SOURCE",
    "MISSING_KEY_POLICY",
    "IDEMPOTENCY_KEY_PREFIX",
    "IDEMPOTENCY_SCOPE",
    "LONG_KEY_POLICY",
    "PAYLOAD_HASH",
    "LOCK_TIMEOUT_SECONDS",
    "RECORD_RETENTION_SECONDS",
    "SAFETY_MARGIN_MS",
    "ORDERING_MODE",
    "MAX_IN_FLIGHT",
    "CLAIM_AHEAD",
    "COMPLETED_CACHE_SIZE",
    "MAX_RECORDS_PER_TRANSACTION",
    "POISON_POLICY",
    "DEAD_LETTER_QUEUE_URL",
    "LOG_KEYS",
    "TRACING_EXPORT",
    "EVENT_SOURCES",
];

/// Which backend holds the idempotency items (`IDEMPOTENCY_STORE`), chosen
/// at start by `exactly_once::run`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StoreKind {
    /// DynamoDB (the default): the tables of sam/exactly-once.yaml.
    #[default]
    DynamoDb,
    /// PostgreSQL: `DATABASE_URL` (the `exactly-once-postgres` crate).
    Postgres,
    /// Redis or Valkey: `REDIS_URL` (the `exactly-once-redis` crate).
    Redis,
}

impl StoreKind {
    /// The variable's value that names it, and the facade's cargo feature
    /// that builds it in.
    pub fn name(self) -> &'static str {
        match self {
            Self::DynamoDb => "dynamodb",
            Self::Postgres => "postgres",
            Self::Redis => "redis",
        }
    }

    /// Parses `IDEMPOTENCY_STORE`: `dynamodb`, `postgres` or `redis`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "dynamodb" => Ok(Self::DynamoDb),
            "postgres" => Ok(Self::Postgres),
            "redis" => Ok(Self::Redis),
            other => Err(format!(
                "unknown store {other:?}; expected dynamodb, postgres or redis"
            )),
        }
    }

    /// `IDEMPOTENCY_STORE` read through `lookup` (unset or empty: DynamoDB).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let var = |name: &str| lookup(name).filter(|value| !value.is_empty());
        parsed(var, "IDEMPOTENCY_STORE", Self::DynamoDb, Self::parse)
    }
}

/// Default of `SAFETY_MARGIN_MS`: no record starts within 5 s of the
/// invocation's deadline, and running work is cut 2.5 s before it, which
/// leaves a record's last write time to finish on a store that answers
/// (on one slower than that, Lambda may cut the write at the deadline: the
/// batch then comes again whole, and each record finds its own write).
pub const DEFAULT_SAFETY_MARGIN: Duration = Duration::from_millis(5000);

/// How the edge reads an event: which sources, keys, order, time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionSettings {
    /// Where idempotency keys come from.
    pub keys: KeySpec,
    /// What makes two deliveries of a key the same payload.
    pub fingerprint: Fingerprint,
    /// Which records may run concurrently.
    pub ordering: OrderingMode,
    /// No record starts within this of the invocation's deadline.
    pub safety_margin: Duration,
    /// How keys appear in the logs.
    pub log_keys: KeyLogging,
    /// The SQS queue parked records are forwarded to, whole (none: the
    /// FAILED item is their only record).
    pub dead_letter_queue_url: Option<String>,
    /// Whether invocations and records get spans (`TRACING_EXPORT`).
    pub tracing: TracingExport,
    /// The only sources served (`EVENT_SOURCES`); `None`: every source the
    /// handler's record type takes.
    pub sources: Option<Vec<Source>>,
}

impl FunctionSettings {
    /// `keys`, in partition order, with the default safety margin.
    pub fn new(keys: KeySpec) -> Self {
        Self {
            keys,
            fingerprint: Fingerprint::Raw,
            ordering: OrderingMode::Partition,
            safety_margin: DEFAULT_SAFETY_MARGIN,
            log_keys: KeyLogging::Plain,
            dead_letter_queue_url: None,
            tracing: TracingExport::Off,
            sources: None,
        }
    }
}

/// Everything the function needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Which backend holds the items (`IDEMPOTENCY_STORE`).
    pub store_kind: StoreKind,
    /// The idempotency store's settings.
    pub store: StoreConfig,
    /// The engine's settings.
    pub engine: EngineConfig,
    /// The edge's settings.
    pub function: FunctionSettings,
}

impl Settings {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads variables through `lookup` (the environment, or a test's map).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let var = |name: &str| lookup(name).filter(|value| !value.is_empty());
        let table_name = required(var, "IDEMPOTENCY_TABLE")?;
        let positive_seconds = |text: &str| match text.parse::<u64>() {
            Ok(secs) if secs > 0 => Ok(Duration::from_secs(secs)),
            _ => Err("expected a whole number of seconds above 0".to_owned()),
        };
        let count = |text: &str| match text.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err("expected a whole number above 0".to_owned()),
        };
        let store = StoreConfig {
            key_prefix: parsed(var, "IDEMPOTENCY_KEY_PREFIX", String::new(), |text| {
                StoreConfig::check_prefix(text).map(|()| text.to_owned())
            })?,
            scope: scope(var)?,
            long_keys: parsed(
                var,
                "LONG_KEY_POLICY",
                LongKeyPolicy::Reject,
                LongKeyPolicy::parse,
            )?,
            lock_timeout: parsed(
                var,
                "LOCK_TIMEOUT_SECONDS",
                StoreConfig::DEFAULT_LOCK_TIMEOUT,
                positive_seconds,
            )?,
            retention: parsed(
                var,
                "RECORD_RETENTION_SECONDS",
                StoreConfig::DEFAULT_RETENTION,
                positive_seconds,
            )?,
            ..StoreConfig::new(table_name)
        };
        let defaults = EngineConfig::default();
        let mut engine = EngineConfig {
            max_in_flight: parsed(var, "MAX_IN_FLIGHT", defaults.max_in_flight, count)?,
            claim_ahead: parsed(var, "CLAIM_AHEAD", defaults.claim_ahead, count)?,
            completed_cache: parsed(
                var,
                "COMPLETED_CACHE_SIZE",
                defaults.completed_cache,
                |text| {
                    text.parse::<usize>()
                        .map_err(|_| "expected a whole number (0 disables the cache)".to_owned())
                },
            )?,
            max_records_per_transaction: parsed(
                var,
                "MAX_RECORDS_PER_TRANSACTION",
                defaults.max_records_per_transaction,
                |text| match text.parse::<usize>() {
                    Ok(n) if (1..=99).contains(&n) => Ok(n),
                    _ => Err("expected a whole number from 1 to 99".to_owned()),
                },
            )?,
            poison: parsed(
                var,
                "POISON_POLICY",
                PoisonPolicy::Park,
                PoisonPolicy::parse,
            )?,
            park_refused: false,
        };
        let header = var("IDEMPOTENCY_KEY_HEADER").unwrap_or_else(|| "idempotency-key".into());
        let missing = parsed(
            var,
            "MISSING_KEY_POLICY",
            MissingKeyPolicy::Reject,
            MissingKeyPolicy::parse,
        )?;
        let keys = parsed(var, "IDEMPOTENCY_KEY_SOURCE", None, |source| {
            KeySpec::parse(source, header.clone(), missing).map(Some)
        })?
        .map_or_else(|| KeySpec::parse("header", header.clone(), missing), Ok)
        .map_err(|reason| SettingsError {
            variable: "IDEMPOTENCY_KEY_SOURCE",
            reason,
        })?;
        let function = FunctionSettings {
            keys,
            fingerprint: parsed(var, "PAYLOAD_HASH", Fingerprint::Raw, Fingerprint::parse)?,
            ordering: parsed(
                var,
                "ORDERING_MODE",
                OrderingMode::Partition,
                OrderingMode::parse,
            )?,
            safety_margin: parsed(var, "SAFETY_MARGIN_MS", DEFAULT_SAFETY_MARGIN, |text| {
                text.parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| "expected a whole number of milliseconds".to_owned())
            })?,
            log_keys: parsed(var, "LOG_KEYS", KeyLogging::Plain, KeyLogging::parse)?,
            dead_letter_queue_url: parsed(var, "DEAD_LETTER_QUEUE_URL", None, |url| {
                match url.starts_with("https://") || url.starts_with("http://") {
                    true => Ok(Some(url.to_owned())),
                    false => Err("expected the queue's URL (https://sqs...)".to_owned()),
                }
            })?,
            tracing: parsed(
                var,
                "TRACING_EXPORT",
                TracingExport::Off,
                TracingExport::parse,
            )?,
            sources: parsed(var, "EVENT_SOURCES", None, |names| {
                names
                    .split(',')
                    .map(|name| Source::parse(name.trim()))
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some)
            })?,
        };
        // Refused records are parked only where they go whole to a queue.
        engine.park_refused = function.dead_letter_queue_url.is_some();
        Ok(Self {
            store_kind: StoreKind::from_lookup(var)?,
            store,
            engine,
            function,
        })
    }
}

/// Whose items the function's are: `IDEMPOTENCY_SCOPE`, else the Lambda
/// function's name (`AWS_LAMBDA_FUNCTION_NAME`, which Lambda sets), else
/// none (a caller outside Lambda; its items belong to whoever finds them).
fn scope(var: impl Fn(&str) -> Option<String>) -> Result<Option<String>, SettingsError> {
    let check = |text: &str| StoreConfig::check_scope(text).map(|()| Some(text.to_owned()));
    match parsed(&var, "IDEMPOTENCY_SCOPE", None, check)? {
        Some(scope) => Ok(Some(scope)),
        None => parsed(&var, "AWS_LAMBDA_FUNCTION_NAME", None, check),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::KeyPart;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|name| vars.get(name).cloned())
    }

    #[test]
    fn defaults_need_only_the_table() {
        let settings = settings(&[("IDEMPOTENCY_TABLE", "t")]).expect("valid");
        assert_eq!(settings.store, StoreConfig::new("t"));
        assert_eq!(settings.store.lock_timeout, Duration::from_secs(30));
        assert_eq!(settings.store.retention, Duration::from_secs(691_200));
        assert_eq!(settings.engine, EngineConfig::default());
        let keys = KeySpec::parse("header", "idempotency-key".into(), MissingKeyPolicy::Reject)
            .expect("valid");
        assert_eq!(settings.function, FunctionSettings::new(keys));
        assert_eq!(settings.function.safety_margin, Duration::from_secs(5));
    }

    #[test]
    fn every_variable_is_read() {
        let settings = settings(&[
            ("IDEMPOTENCY_TABLE", "t"),
            ("IDEMPOTENCY_KEY_HEADER", "x-id"),
            ("IDEMPOTENCY_KEY_SOURCE", "record-key,json:/payment_id"),
            ("MISSING_KEY_POLICY", "payload-hash"),
            ("IDEMPOTENCY_KEY_PREFIX", "payments#"),
            ("LONG_KEY_POLICY", "hash"),
            ("PAYLOAD_HASH", "json:/payment_id,/amount_cents"),
            ("LOCK_TIMEOUT_SECONDS", "12"),
            ("RECORD_RETENTION_SECONDS", "3600"),
            ("SAFETY_MARGIN_MS", "750"),
            ("ORDERING_MODE", "key"),
            ("MAX_IN_FLIGHT", "8"),
            ("CLAIM_AHEAD", "4"),
            ("COMPLETED_CACHE_SIZE", "0"),
            ("MAX_RECORDS_PER_TRANSACTION", "1"),
            ("POISON_POLICY", "report"),
            ("LOG_KEYS", "hash"),
            (
                "DEAD_LETTER_QUEUE_URL",
                "https://sqs.us-east-1.amazonaws.com/1/parked",
            ),
        ])
        .expect("valid");
        assert_eq!(settings.store.key_prefix, "payments#");
        assert_eq!(settings.store.long_keys, LongKeyPolicy::Hash);
        assert_eq!(
            settings.function.fingerprint,
            Fingerprint::Fields(vec!["/payment_id".into(), "/amount_cents".into()])
        );
        assert_eq!(settings.store.lock_timeout, Duration::from_secs(12));
        assert_eq!(settings.store.retention, Duration::from_secs(3600));
        let function = &settings.function;
        assert_eq!(function.safety_margin, Duration::from_millis(750));
        assert_eq!(function.ordering, OrderingMode::Key);
        assert_eq!(function.log_keys, KeyLogging::Hash);
        assert_eq!(
            function.dead_letter_queue_url.as_deref(),
            Some("https://sqs.us-east-1.amazonaws.com/1/parked")
        );
        assert_eq!(
            function.keys.parts(),
            [
                KeyPart::RecordKey,
                KeyPart::JsonPointer("/payment_id".into())
            ]
        );
        assert_eq!(function.keys.missing(), MissingKeyPolicy::PayloadHash);
        assert_eq!(
            settings.engine,
            EngineConfig {
                max_in_flight: 8,
                claim_ahead: 4,
                completed_cache: 0,
                max_records_per_transaction: 1,
                poison: PoisonPolicy::Report,
                park_refused: true,
            }
        );
    }

    #[test]
    fn a_bad_variable_is_named_in_the_error() {
        let cases = [
            (vec![], "IDEMPOTENCY_TABLE"),
            (
                vec![("LOCK_TIMEOUT_SECONDS", "soon")],
                "LOCK_TIMEOUT_SECONDS",
            ),
            (vec![("LOCK_TIMEOUT_SECONDS", "0")], "LOCK_TIMEOUT_SECONDS"),
            (
                vec![("RECORD_RETENTION_SECONDS", "-1")],
                "RECORD_RETENTION_SECONDS",
            ),
            (vec![("MISSING_KEY_POLICY", "ignore")], "MISSING_KEY_POLICY"),
            (
                vec![("IDEMPOTENCY_KEY_PREFIX", "p#v2#")],
                "IDEMPOTENCY_KEY_PREFIX",
            ),
            (vec![("LONG_KEY_POLICY", "truncate")], "LONG_KEY_POLICY"),
            (vec![("PAYLOAD_HASH", "md5")], "PAYLOAD_HASH"),
            (vec![("SAFETY_MARGIN_MS", "5s")], "SAFETY_MARGIN_MS"),
            (vec![("ORDERING_MODE", "offset")], "ORDERING_MODE"),
            (vec![("MAX_IN_FLIGHT", "0")], "MAX_IN_FLIGHT"),
            (vec![("CLAIM_AHEAD", "many")], "CLAIM_AHEAD"),
            (
                vec![("MAX_RECORDS_PER_TRANSACTION", "100")],
                "MAX_RECORDS_PER_TRANSACTION",
            ),
            (vec![("COMPLETED_CACHE_SIZE", "-1")], "COMPLETED_CACHE_SIZE"),
            (vec![("POISON_POLICY", "skip")], "POISON_POLICY"),
            (
                vec![("DEAD_LETTER_QUEUE_URL", "parked")],
                "DEAD_LETTER_QUEUE_URL",
            ),
            (
                vec![("IDEMPOTENCY_KEY_SOURCE", "json:payment_id")],
                "IDEMPOTENCY_KEY_SOURCE",
            ),
            (
                vec![("IDEMPOTENCY_KEY_SOURCE", "cookie")],
                "IDEMPOTENCY_KEY_SOURCE",
            ),
        ];
        for (vars, variable) in cases {
            let mut vars = vars;
            if variable != "IDEMPOTENCY_TABLE" {
                vars.push(("IDEMPOTENCY_TABLE", "t"));
            }
            let err = settings(&vars).expect_err(variable);
            assert_eq!(err.variable, variable, "{err}");
            assert!(
                err.to_string()
                    .starts_with(&format!("environment variable {variable}: "))
            );
        }
    }

    #[test]
    fn the_scope_is_the_functions_name_unless_set() {
        let scope = |vars: &[(&str, &str)]| {
            let mut all = vec![("IDEMPOTENCY_TABLE", "t")];
            all.extend_from_slice(vars);
            settings(&all).map(|settings| settings.store.scope)
        };
        assert_eq!(scope(&[]), Ok(None));
        assert_eq!(
            scope(&[("AWS_LAMBDA_FUNCTION_NAME", "payments-a")]),
            Ok(Some("payments-a".into()))
        );
        assert_eq!(
            scope(&[
                ("AWS_LAMBDA_FUNCTION_NAME", "payments-green"),
                ("IDEMPOTENCY_SCOPE", "payments")
            ]),
            Ok(Some("payments".into()))
        );
        let refused = scope(&[("IDEMPOTENCY_SCOPE", "a b")]).expect_err("not a scope");
        assert_eq!(refused.variable, "IDEMPOTENCY_SCOPE");
    }
}
