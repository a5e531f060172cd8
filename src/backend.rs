//! The idempotency store `IDEMPOTENCY_STORE` names, connected as the
//! environment configures it: built in this one place for the function
//! ([`run`](crate::run)), the operator tool and the tests.

use std::time::Duration;

use exactly_once_core::config::StoreConfig;
use exactly_once_lambda::StoreKind;

use crate::StartError;

/// A store connected by [`Backend::connect`]: one variant per store of the
/// build. [`run_with`](crate::run_with) hands it to the handler's builder,
/// which may need the store's own client (a handler writing a table of its
/// own beside the idempotency table).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Backend {
    /// DynamoDB (`IDEMPOTENCY_STORE=dynamodb`, the default).
    #[cfg(feature = "dynamodb")]
    DynamoDb(exactly_once_dynamodb::DynamoDbStore),
    /// PostgreSQL (`IDEMPOTENCY_STORE=postgres`).
    #[cfg(feature = "postgres")]
    Postgres(exactly_once_postgres::PostgresStore),
    /// Redis (`IDEMPOTENCY_STORE=redis`).
    #[cfg(feature = "redis")]
    Redis(exactly_once_redis::RedisStore),
}

/// How long one store call may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Patience {
    /// A function's: a few seconds, so that a store that hangs is given up
    /// instead of eating the invocation, while a slow one is answered (the
    /// store's own variables set it: `DYNAMODB_ATTEMPT_TIMEOUT_MS` and
    /// `DYNAMODB_OPERATION_TIMEOUT_MS`, `DATABASE_STATEMENT_TIMEOUT_MS`,
    /// `REDIS_TIMEOUT_MS`).
    #[default]
    Function,
    /// An operator's: a listing page or a purge may take up to a minute.
    Operator,
}

impl Backend {
    /// The store `kind` names, for the items `config` describes, reached
    /// as the environment says (the AWS environment for DynamoDB;
    /// `DATABASE_*` for PostgreSQL, whose idempotency table's schema is
    /// checked; `REDIS_*` for Redis). A store this build leaves out is
    /// [`StartError::FeatureOff`].
    pub async fn connect(
        kind: StoreKind,
        config: StoreConfig,
        patience: Patience,
    ) -> Result<Self, StartError> {
        match kind {
            #[cfg(feature = "dynamodb")]
            StoreKind::DynamoDb => {
                let client = match patience {
                    Patience::Function => {
                        let settings =
                            exactly_once_dynamodb::DynamoDbSettings::from_lookup(env_var)?;
                        if let Some(warning) = settings.warning(config.lock_timeout) {
                            tracing::warn!(%warning, "DynamoDB timeouts against the lease");
                        }
                        crate::aws::dynamodb_client_with(&settings).await
                    }
                    Patience::Operator => operator_client(crate::aws::dynamodb_client().await),
                };
                Ok(Self::DynamoDb(exactly_once_dynamodb::DynamoDbStore::new(
                    client, config,
                )))
            }
            #[cfg(feature = "postgres")]
            StoreKind::Postgres => {
                let store = |reason: String| StartError::Store {
                    store: "PostgreSQL",
                    reason,
                };
                let mut database = exactly_once_postgres::DatabaseSettings::from_lookup(env_var)?;
                if patience == Patience::Operator {
                    database.statement_timeout = Duration::from_secs(60);
                }
                // The AWS environment only for a secret or an IAM token.
                let aws = match database.secret_arn.is_some() || database.iam_auth {
                    true => Some(crate::aws::sdk_config().await),
                    false => None,
                };
                let pool = database
                    .pool(aws.as_ref())
                    .await
                    .map_err(|err| store(err.to_string()))?;
                let timeout = database.call_timeout();
                let table = config.table_name.clone();
                let postgres = exactly_once_postgres::PostgresStore::new(pool, config, timeout)
                    .map_err(|err| store(err.to_string()))?;
                if patience == Patience::Function {
                    use exactly_once_postgres::schema;
                    check_schema(&postgres, schema::IDEMPOTENCY, &table).await?;
                }
                Ok(Self::Postgres(postgres))
            }
            #[cfg(feature = "redis")]
            StoreKind::Redis => {
                let store = |reason: String| StartError::Store {
                    store: "Redis",
                    reason,
                };
                let mut redis = exactly_once_redis::RedisSettings::from_lookup(env_var)?;
                if patience == Patience::Operator {
                    redis.timeout = Duration::from_secs(20);
                }
                // Cluster mode: the keys of one function in one slot.
                redis.check_names(&[&config.table_name]).map_err(store)?;
                let connection = redis.connect().map_err(store)?;
                Ok(Self::Redis(exactly_once_redis::RedisStore::new(
                    connection, config, &redis,
                )))
            }
            #[allow(unreachable_patterns)]
            other => Err(StartError::FeatureOff {
                variable: "IDEMPOTENCY_STORE",
                value: other.name().to_owned(),
                feature: other.name(),
            }),
        }
    }

    /// Which store it is.
    pub fn kind(&self) -> StoreKind {
        match self {
            #[cfg(feature = "dynamodb")]
            Self::DynamoDb(_) => StoreKind::DynamoDb,
            #[cfg(feature = "postgres")]
            Self::Postgres(_) => StoreKind::Postgres,
            #[cfg(feature = "redis")]
            Self::Redis(_) => StoreKind::Redis,
        }
    }
}

/// A variable of the process environment.
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// How long a PostgreSQL table's start-up check (and migration) may take
/// in all, attempt after attempt: Lambda gives an on-demand function's
/// init 10 s, and the rest of the start needs some of them.
#[cfg(feature = "postgres")]
pub const START_CHECK_BUDGET: Duration = Duration::from_secs(8);

/// Checks `table` against `schema` on `store`'s database: a table behind
/// (or ahead of) this build stops the function at start. A database that
/// does not answer (unreachable, connections reset, answers too slow: each
/// round trip bounded by the store's call timeout, each connection by
/// `DATABASE_CONNECT_TIMEOUT_MS`) is asked again, pausing longer each time,
/// within [`START_CHECK_BUDGET`]; still unreachable, the function starts
/// with a warning that names the cause, never a wrong schema (every record
/// is then sent again, then reported, until the database answers). With
/// `DATABASE_MIGRATE=true` the missing migrations are applied first (one
/// transaction, serialised with any concurrent `migrate`), so a local
/// database or a function allowed DDL needs no migration step of its own.
#[cfg(feature = "postgres")]
pub async fn check_schema(
    store: &exactly_once_postgres::PostgresStore,
    schema: exactly_once_postgres::schema::TableSchema,
    table: &str,
) -> Result<(), StartError> {
    use exactly_once_core::store::Store as _;
    use exactly_once_postgres::schema::{self, SchemaError};
    let started = std::time::Instant::now();
    let left = || START_CHECK_BUDGET.saturating_sub(started.elapsed());
    let mut pause = Duration::from_millis(100);
    let migrate = exactly_once_postgres::connect::migrate_requested(env_var)?;
    loop {
        let attempt = async {
            if migrate {
                let migrated = schema::migrate(store.pool(), &[(schema, table)])
                    .await
                    .map_err(|err| match err.is_retryable() {
                        true => SchemaError::Unreachable(err.to_string()),
                        false => SchemaError::Migration(err.to_string()),
                    })?;
                for done in migrated.iter().filter(|done| done.from != done.to) {
                    tracing::info!(
                        table,
                        from = done.from,
                        to = done.to,
                        "schema migrated at start"
                    );
                }
            }
            schema::check(store.pool(), schema, table, store.request_timeout()).await
        };
        let checked = tokio::time::timeout(left(), attempt)
            .await
            .unwrap_or_else(|_| {
                Err(SchemaError::Unreachable(
                    "no answer within the start-up budget".into(),
                ))
            });
        match checked {
            Ok(()) => return Ok(()),
            Err(SchemaError::Unreachable(reason)) if pause < left() => {
                tracing::warn!(%reason, table, "PostgreSQL did not answer at start; asking again");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            // Down now: records are sent again, then reported, until it
            // answers; the schema is checked by nothing else, so say so.
            Err(SchemaError::Unreachable(reason)) => {
                tracing::warn!(
                    %reason,
                    table,
                    "store unavailable at start: PostgreSQL did not answer; the schema was not checked"
                );
                return Ok(());
            }
            Err(SchemaError::Migration(reason)) => {
                return Err(StartError::Store {
                    store: "PostgreSQL",
                    reason: format!("DATABASE_MIGRATE=true: could not migrate {table:?}: {reason}"),
                });
            }
            Err(wrong) => {
                return Err(StartError::Store {
                    store: "PostgreSQL",
                    reason: wrong.to_string(),
                });
            }
        }
    }
}

/// `client` with an operator's patience: a Scan page may take longer than
/// the function allows a request (`DYNAMODB_ATTEMPT_TIMEOUT_MS`).
#[cfg(feature = "dynamodb")]
fn operator_client(client: exactly_once_dynamodb::Client) -> exactly_once_dynamodb::Client {
    use exactly_once_dynamodb::aws_sdk_dynamodb::config::timeout::TimeoutConfig;
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(3))
        .operation_attempt_timeout(Duration::from_secs(20))
        .operation_timeout(Duration::from_secs(60))
        .build();
    exactly_once_dynamodb::Client::from_conf(
        client
            .config()
            .to_builder()
            .timeout_config(timeouts)
            .build(),
    )
}
