//! The operator CLI `exactly-once-ops`: look at a key, find stuck keys, and
//! move a key on by hand with the fenced operator transitions of the store;
//! on PostgreSQL, also create or upgrade the schema and purge expired rows.
//!
//! The binary (`src/main.rs`) only parses [`Cli`] and calls
//! [`run`]. Exit codes: 0 done / found; 1 the key is absent (inspect) or a
//! fenced write was refused (release, retry-failed); 2 usage or
//! configuration error; 3 the store failed.

#![deny(missing_docs)]

pub mod inspect;
pub mod redrive;
pub mod stuck;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use exactly_once::config::{LongKeyPolicy, StoreConfig};
use exactly_once::dynamodb::{DynamoDbStore, ScanOptions};
use exactly_once::lambda::StoreKind;
use exactly_once::postgres::PostgresStore;
use exactly_once::postgres::schema;
use exactly_once::store::{Listing, Operator, Status, Store, StoreError, StoredItem};
use exactly_once::{Backend, Patience};

/// Variable naming the table when `--table` is not given.
pub const TABLE_ENV: &str = "IDEMPOTENCY_TABLE";
/// Variable holding the key prefix when `--key-prefix` is not given.
pub const KEY_PREFIX_ENV: &str = "IDEMPOTENCY_KEY_PREFIX";

/// Operator tool for the idempotency table of msk-exactly-once.
///
/// The store is the function's: IDEMPOTENCY_STORE=dynamodb (the default)
/// talks to DynamoDB through the standard AWS environment (credentials,
/// AWS_REGION; AWS_ENDPOINT_URL_DYNAMODB for DynamoDB Local);
/// IDEMPOTENCY_STORE=postgres to PostgreSQL through DATABASE_URL (or
/// DATABASE_SECRET_ARN, DATABASE_IAM_AUTH); IDEMPOTENCY_STORE=redis to
/// Redis through REDIS_URL. Keys are given without the
/// table's key prefix. Times are printed in UTC (RFC 3339).
/// Exit codes: 0 done, 1 absent or refused, 2 usage, 3 store error.
#[derive(Debug, Parser)]
#[command(name = "exactly-once-ops")]
pub struct Cli {
    /// The idempotency table [default: $IDEMPOTENCY_TABLE].
    #[arg(long, global = true, value_name = "NAME")]
    pub table: Option<String>,
    /// The function's key prefix [default: $IDEMPOTENCY_KEY_PREFIX, or empty].
    #[arg(long, global = true, value_name = "PREFIX")]
    pub key_prefix: Option<String>,
    #[command(subcommand)]
    /// What to do.
    pub command: Command,
}

#[derive(Debug, Subcommand)]
/// The operator tool's commands.
pub enum Command {
    /// Show a key's item (every attribute) and what its next delivery will do.
    ///
    /// One strongly consistent GetItem (1 RCU per 4 KB). Exit code 0 when a
    /// live item exists, 1 when the key is absent or past its TTL (an expired
    /// item is still printed: it counts as absent).
    Inspect {
        /// The idempotency key, without the prefix.
        key: String,
    },
    /// List STARTED keys whose lock expired or that were created too long ago.
    ///
    /// COST: it reads the STARTED items only, not the table: on DynamoDB one
    /// Query per shard of the sparse index `started` (16), on PostgreSQL its
    /// partial index of STARTED rows, on Redis its sorted set of STARTED
    /// keys. The summary prints what was read (and, on DynamoDB, the
    /// capacity consumed).
    ///
    /// With --scan (DynamoDB), a Scan instead: it reads EVERY item of the
    /// table (about 0.5 RCU per 4 KB; 1 million items of 1 KB cost about
    /// 122,000 RCU), which finds STARTED items written before the index
    /// existed. Only keys under the key prefix are listed; items past their
    /// TTL are skipped (they count as absent).
    Stuck {
        /// Also list STARTED keys created longer ago than this (e.g. 5m, 1h
        /// 30m), even with a live lock.
        #[arg(long, value_name = "AGE", value_parser = humantime::parse_duration)]
        older_than: Duration,
        /// DynamoDB: Scan the whole table instead of querying the index of
        /// STARTED items.
        #[arg(long)]
        scan: bool,
        /// Parallel scan segments (1 to 1000).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
        segments: u32,
        /// Items DynamoDB evaluates per page (its `Limit`); default: 1 MB pages.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        page_size: Option<u32>,
    },
    /// List FAILED keys, with their error: every poison record (parked by
    /// `POISON_POLICY=park`, or refused on every delivery).
    ///
    /// COST: on DynamoDB and Redis, a Scan (it reads every item of the
    /// table: about 0.5 RCU per 4 KB read on DynamoDB, see `stuck --scan`);
    /// on PostgreSQL, a partial index of FAILED rows. A FAILED key runs again
    /// only after `retry-failed` and a redelivery of its record.
    Failed {
        /// Parallel scan segments (1 to 1000).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
        segments: u32,
        /// Items DynamoDB evaluates per page (its `Limit`); default: 1 MB pages.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        page_size: Option<u32>,
    },
    /// List COMPLETED keys whose emitted messages are not known sent, and
    /// with --send send them (the sweeper the scheduled check runs).
    ///
    /// A record's messages are sent by the invocation that completes it;
    /// those left (the destination refused them and the record never came
    /// back) wait on the item. COST: on DynamoDB one Query per shard of the
    /// sparse index `unsent` (16), on PostgreSQL its partial index, on
    /// Redis a Scan. --send: SendMessageBatch to each SQS queue (standard
    /// AWS environment), under the messages' stable ids (a consumer on this
    /// crate drops copies); the outboxes of those accepted are cleared.
    Unsent {
        /// Only keys completed longer ago than this (younger ones are still
        /// being sent by their invocation).
        #[arg(long, value_name = "AGE", default_value = "15m", value_parser = humantime::parse_duration)]
        older_than: Duration,
        /// Send them now.
        #[arg(long)]
        send: bool,
    },
    /// Make a STARTED key claimable at once (its lock ends now).
    ///
    /// The next delivery takes it over as version + 1. Fenced: written only
    /// if the key is STARTED at exactly --version (see `inspect`); otherwise
    /// nothing is written and the exit code is 1. Use it for a key whose
    /// worker is known dead, instead of waiting for its lease to run out.
    Release {
        /// The idempotency key, without the prefix.
        key: String,
        /// The version the key must still have (from `inspect` or `stuck`).
        #[arg(long)]
        version: u64,
    },
    /// Let a FAILED key run again: it becomes STARTED with its lock ended.
    ///
    /// The next delivery of the same payload takes it over as version + 1
    /// and runs the work again (a FAILED key is otherwise refused until its
    /// TTL). The error text is kept as `last_error`. Fenced: written only if
    /// the key is FAILED at --version (default: the version read just
    /// before); otherwise nothing is written and the exit code is 1. The
    /// record itself must still be delivered again (redrive it from the
    /// dead-letter queue or replay the topic).
    RetryFailed {
        /// The idempotency key, without the prefix.
        key: String,
        /// The version the key must still have [default: read it now].
        #[arg(long)]
        version: Option<u64>,
    },
    /// PostgreSQL: create or upgrade the schema of the idempotency table
    /// (and the demo ledger's table), idempotently.
    ///
    /// Embedded, versioned SQL, applied in ONE transaction under an advisory
    /// lock: concurrent runs are harmless, a second run changes nothing. The
    /// function checks the version at start and refuses to run on an older
    /// schema.
    Migrate {
        /// Also the demo ledger's table [default: $LEDGER_TABLE, if set].
        #[arg(long, value_name = "NAME")]
        ledger_table: Option<String>,
    },
    /// Feed the records an on-failure destination kept back through the
    /// function (safe to repeat: finished records are duplicates).
    ///
    /// --from s3://BUCKET[/PREFIX]: the mapping's S3 destination (objects in
    /// key order). --from PATH: invocation records as JSON files, or one per
    /// line (the Kafka-topic destination saved with kafka-console-consumer).
    /// Each record's event is sent with Lambda's Invoke API (standard AWS
    /// environment; AWS_ENDPOINT_URL_LAMBDA / _S3 for local stand-ins).
    /// Exit 0: every record finished; 1: some reported again or without a
    /// payload (listed with their offsets); 3: S3 or Lambda failed.
    Redrive {
        /// s3://BUCKET[/PREFIX], or a file or directory of invocation records.
        #[arg(long, value_name = "SOURCE")]
        from: String,
        /// The function's name or ARN.
        #[arg(long, value_name = "NAME")]
        function: String,
        /// Delete each S3 object whose records all finished.
        #[arg(long)]
        delete: bool,
    },
    /// PostgreSQL: delete rows past their `expires_at` (PostgreSQL has no
    /// TTL; reads already treat them as absent).
    ///
    /// At most --batch rows per statement (rows being written are skipped),
    /// until fewer are left or --max-batches ran. Schedule it (cron, pg_cron,
    /// an EventBridge rule): see docs/stores.md.
    PurgeExpired {
        /// Rows per DELETE.
        #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        batch: u32,
        /// DELETE statements at most.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
        max_batches: u32,
    },
}

/// Exit code: the key is absent, or a fenced write was refused.
const EXIT_REFUSED: u8 = 1;
/// Exit code: bad usage or configuration (also clap's).
const EXIT_USAGE: u8 = 2;
/// Exit code: the store failed or refused the request.
const EXIT_ERROR: u8 = 3;

/// Runs one command; prints to stdout, problems to stderr.
pub async fn run(cli: Cli) -> ExitCode {
    // A redrive goes through the function, not the store.
    if let Command::Redrive {
        from,
        function,
        delete,
    } = &cli.command
    {
        return match redrive::Source::parse(from) {
            Ok(source) => redrive::redrive(source, function, *delete).await,
            Err(message) => {
                eprintln!("error: {message}");
                ExitCode::from(EXIT_USAGE)
            }
        };
    }
    let env = |name: &str| std::env::var(name).ok();
    let config = store_config(&cli, env).and_then(|config| {
        let kind = StoreKind::from_lookup(env).map_err(|err| err.to_string())?;
        Ok((config, kind))
    });
    let (config, kind) = match config {
        Ok(config) => config,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let backend = match Backend::connect(kind, config, Patience::Operator).await {
        Ok(backend) => backend,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let result = Ops { backend }.run(cli.command).await;
    match result {
        Ok(code) => code,
        Err(err @ StoreError::NotInState { .. }) => {
            eprintln!("refused: {err}");
            eprintln!(
                "the key changed since you looked (or is not in that state): inspect it again"
            );
            ExitCode::from(EXIT_REFUSED)
        }
        Err(err @ StoreError::InvalidKey(_)) => {
            eprintln!("error: {err}");
            ExitCode::from(EXIT_USAGE)
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// Writes to stdout; false when it is closed (e.g. piped into `head`), so
/// the output ends quietly instead of with a panic.
fn emit(text: &str) -> bool {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

/// The store configuration from the flags, else the environment.
pub fn store_config(
    cli: &Cli,
    env: impl Fn(&str) -> Option<String>,
) -> Result<StoreConfig, String> {
    let table = cli
        .table
        .clone()
        .or_else(|| env(TABLE_ENV))
        .filter(|table| !table.is_empty())
        .ok_or_else(|| format!("no table: pass --table or set {TABLE_ENV}"))?;
    let key_prefix = cli
        .key_prefix
        .clone()
        .or_else(|| env(KEY_PREFIX_ENV))
        .unwrap_or_default();
    StoreConfig::check_prefix(&key_prefix).map_err(|reason| format!("--key-prefix: {reason}"))?;
    // The function's policy, so that a long key names the same item.
    let long_keys = match env("LONG_KEY_POLICY").filter(|policy| !policy.is_empty()) {
        Some(policy) => {
            LongKeyPolicy::parse(&policy).map_err(|e| format!("LONG_KEY_POLICY: {e}"))?
        }
        None => LongKeyPolicy::Reject,
    };
    Ok(StoreConfig {
        key_prefix,
        long_keys,
        ..StoreConfig::new(table)
    })
}

/// `$body` with `$store` bound to the backend's store, whichever it is.
macro_rules! on_store {
    ($backend:expr, $store:ident => $body:expr) => {
        match $backend {
            Backend::DynamoDb($store) => $body,
            Backend::Postgres($store) => $body,
            Backend::Redis($store) => $body,
            other => Err(unknown_store(other)),
        }
    };
}

struct Ops {
    backend: Backend,
}

impl Ops {
    async fn run(&self, command: Command) -> Result<ExitCode, StoreError> {
        match command {
            Command::Inspect { key } => match &self.backend {
                Backend::DynamoDb(store) => inspect_item(store, &key).await,
                Backend::Postgres(store) => inspect_stored(store, &key, store.stored(&key).await?),
                Backend::Redis(store) => inspect_stored(store, &key, store.stored(&key).await?),
                other => Err(unknown_store(other)),
            },
            Command::Stuck {
                older_than,
                scan,
                segments,
                page_size,
            } => {
                let full_scan = scan;
                let scan = ScanOptions {
                    segments,
                    page_size,
                    full_scan,
                };
                self.list(Listing::Stuck { older_than }, scan).await
            }
            Command::Failed {
                segments,
                page_size,
            } => {
                let scan = ScanOptions {
                    segments,
                    page_size,
                    full_scan: true,
                };
                self.list(Listing::Failed, scan).await
            }
            Command::Unsent { older_than, send } => match send {
                false => {
                    let listing = Listing::Unsent { older_than };
                    self.list(listing, ScanOptions::default()).await
                }
                true => on_store!(&self.backend, store => send_unsent(store, older_than).await),
            },
            Command::Release { key, version } => {
                on_store!(&self.backend, store => release(store, &key, version).await)
            }
            Command::RetryFailed { key, version } => {
                on_store!(&self.backend, store => retry_failed(store, &key, version).await)
            }
            // Handled by `run`, before any store is opened.
            Command::Redrive { .. } => Ok(ExitCode::from(EXIT_USAGE)),
            Command::Migrate { ledger_table } => match self.postgres() {
                Some(store) => migrate(store, ledger_table).await,
                None => Ok(not_postgres("migrate")),
            },
            Command::PurgeExpired { batch, max_batches } => match self.postgres() {
                Some(store) => purge(store, batch, max_batches).await,
                None => Ok(not_postgres("purge-expired")),
            },
        }
    }

    fn postgres(&self) -> Option<&PostgresStore> {
        match &self.backend {
            Backend::Postgres(store) => Some(store),
            _ => None,
        }
    }

    async fn list(&self, listing: Listing, scan: ScanOptions) -> Result<ExitCode, StoreError> {
        match &self.backend {
            Backend::DynamoDb(store) => list(&store.clone().with_scan(scan), listing, scan).await,
            Backend::Postgres(store) => list(store, listing, ScanOptions::default()).await,
            Backend::Redis(store) => list(store, listing, ScanOptions::default()).await,
            other => Err(unknown_store(other)),
        }
    }
}

/// A store this tool does not know (none: every store of the library is
/// built in).
fn unknown_store(backend: &Backend) -> StoreError {
    StoreError::Rejected {
        operation: "connect",
        message: format!(
            "exactly-once-ops does not know the store {:?}",
            backend.kind()
        ),
    }
}

/// A PostgreSQL command on another store: a usage error.
fn not_postgres(command: &str) -> ExitCode {
    eprintln!(
        "error: {command} is for IDEMPOTENCY_STORE=postgres (DynamoDB tables come from \
         sam/exactly-once.yaml or the CDK construct and expire by TTL; Redis expires its keys itself)"
    );
    ExitCode::from(EXIT_USAGE)
}

/// Creates or upgrades the idempotency table (and the ledger's, if named).
async fn migrate(
    store: &PostgresStore,
    ledger_table: Option<String>,
) -> Result<ExitCode, StoreError> {
    let ledger_table = ledger_table.or_else(|| {
        std::env::var(ledger::TABLE_ENV)
            .ok()
            .filter(|t| !t.is_empty())
    });
    let mut tables = vec![(schema::IDEMPOTENCY, store.config().table_name.as_str())];
    tables.extend(
        ledger_table
            .as_deref()
            .map(|table| (ledger::LEDGER_SCHEMA, table)),
    );
    for migrated in schema::migrate(store.pool(), &tables).await? {
        let done = match migrated.from == migrated.to {
            true => format!("already at version {}: nothing to do", migrated.to),
            false => format!("migrated from version {} to {}", migrated.from, migrated.to),
        };
        emit(&format!("{:?}: {done}\n", migrated.table));
    }
    Ok(ExitCode::SUCCESS)
}

/// Deletes expired rows in bounded batches.
async fn purge(store: &PostgresStore, batch: u32, batches: u32) -> Result<ExitCode, StoreError> {
    let deleted = store.purge_expired(batch, batches).await?;
    emit(&format!(
        "deleted {deleted} expired row(s) of {:?}\n",
        store.config().table_name
    ));
    Ok(ExitCode::SUCCESS)
}

async fn inspect_item(store: &DynamoDbStore, key: &str) -> Result<ExitCode, StoreError> {
    let pk = store.pk(key)?;
    let raw = store.raw_item(&pk).await?;
    let Some(raw) = raw else {
        emit(&inspect::render_absent(key, &pk));
        return Ok(ExitCode::from(EXIT_REFUSED));
    };
    let item = match DynamoDbStore::parse_item(&raw) {
        Ok(item) => item,
        Err(err) => {
            emit(&inspect::render_malformed(key, &raw, &err.to_string()));
            return Ok(ExitCode::SUCCESS);
        }
    };
    Ok(show(key, &item, &inspect::others(&raw), store.now_ms()))
}

/// Prints the item a SQL row or a Redis hash holds (`stored`, read even
/// past its TTL).
fn inspect_stored<S: Store>(
    store: &S,
    key: &str,
    stored: Option<StoredItem>,
) -> Result<ExitCode, StoreError> {
    let pk = store.pk(key)?;
    match stored {
        None => {
            emit(&inspect::render_absent(key, &pk));
            Ok(ExitCode::from(EXIT_REFUSED))
        }
        Some(item) => {
            let others = item
                .last_error
                .iter()
                .map(|text| ("last_error".to_owned(), format!("{text:?}")))
                .collect();
            Ok(show(key, &item, &others, store.now_ms()))
        }
    }
}

/// Prints `item`; exit code 1 when it is past its TTL (it counts as absent).
fn show(
    key: &str,
    item: &StoredItem,
    others: &std::collections::BTreeMap<String, String>,
    now: u64,
) -> ExitCode {
    emit(&inspect::render(key, item, others, now));
    match item.is_expired(now) {
        true => ExitCode::from(EXIT_REFUSED),
        false => ExitCode::SUCCESS,
    }
}

async fn list<S: Operator>(
    store: &S,
    listing: Listing,
    scan: ScanOptions,
) -> Result<ExitCode, StoreError> {
    let query = stuck::Query {
        key_prefix: store.config().key_prefix.clone(),
        now_ms: store.now_ms(),
        listing,
        scan,
        store: S::NAME,
    };
    let mut listed = store.list(listing).await?;
    listed.items.sort_by(|a, b| a.pk.cmp(&b.pk));
    for item in &listed.items {
        if !emit(&format!("{}\n", stuck::line(item, &query))) {
            return Ok(ExitCode::SUCCESS);
        }
    }
    emit(&format!(
        "{}\n",
        stuck::summary(listed.items.len(), &listed.cost, &query)
    ));
    Ok(ExitCode::SUCCESS)
}

/// Sends what is left unsent, as the scheduled check does.
async fn send_unsent<S: Operator>(store: &S, older_than: Duration) -> Result<ExitCode, StoreError> {
    let sender = exactly_once::aws::destinations().await;
    let swept = exactly_once::engine::send_unsent(store, Some(&sender), older_than).await?;
    emit(&format!(
        "sent the messages of {} of {} record(s) left unsent; {}\n",
        swept.sent,
        swept.found,
        match swept.found - swept.sent {
            0 => "none left".to_owned(),
            left => format!(
                "{left} still refused by their destination (the oldest completed {} s ago)",
                swept.oldest_left_age_s
            ),
        }
    ));
    match swept.found == swept.sent {
        true => Ok(ExitCode::SUCCESS),
        false => Ok(ExitCode::from(EXIT_REFUSED)),
    }
}

async fn release<S: Operator>(store: &S, key: &str, version: u64) -> Result<ExitCode, StoreError> {
    store.release_version(key, version).await?;
    emit(&format!(
        "released {key:?} at version {version}: its lock ended now; the next delivery \
         takes it over as version {}\n",
        version + 1
    ));
    Ok(ExitCode::SUCCESS)
}

async fn retry_failed<S: Operator>(
    store: &S,
    key: &str,
    version: Option<u64>,
) -> Result<ExitCode, StoreError> {
    let version = match version {
        Some(version) => version,
        None => match store.get(key).await? {
            None => {
                eprintln!(
                    "refused: {key:?} is absent (or past its TTL): nothing to retry; \
                     its next delivery claims it fresh as version 1"
                );
                return Ok(ExitCode::from(EXIT_REFUSED));
            }
            Some(item) if item.status != Status::Failed => {
                eprintln!(
                    "refused: {key:?} is {} at version {}, not FAILED: nothing written",
                    item.status.as_str(),
                    item.version
                );
                return Ok(ExitCode::from(EXIT_REFUSED));
            }
            Some(item) => item.version,
        },
    };
    store.retry_failed(key, version).await?;
    emit(&format!(
        "{key:?} (FAILED at version {version}) is STARTED with its lock ended: the next \
         delivery of the same payload takes it over as version {} and runs the work again \
         (the error text is kept as last_error)\n",
        version + 1
    ));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_and_prefix_come_from_flags_then_the_environment() {
        let env = |name: &str| match name {
            TABLE_ENV => Some("from-env".to_owned()),
            KEY_PREFIX_ENV => Some("env#".to_owned()),
            _ => None,
        };
        let cli = Cli::parse_from(["exactly-once-ops", "inspect", "k"]);
        let config = store_config(&cli, env).unwrap();
        assert_eq!(
            (config.table_name.as_str(), config.key_prefix.as_str()),
            ("from-env", "env#")
        );
        let cli = Cli::parse_from([
            "exactly-once-ops",
            "inspect",
            "k",
            "--table",
            "t",
            "--key-prefix",
            "",
        ]);
        let config = store_config(&cli, env).unwrap();
        assert_eq!(
            (config.table_name.as_str(), config.key_prefix.as_str()),
            ("t", "")
        );
        assert!(store_config(&cli_without_table(), |_| None).is_err());
        // The function's rules: a prefix that could collide is refused, and
        // a long key is found under the function's policy.
        let cli = Cli::parse_from(["exactly-once-ops", "inspect", "k", "--key-prefix", "p#v2#"]);
        assert!(store_config(&cli, env).is_err());
        let hashing = |name: &str| match name {
            "LONG_KEY_POLICY" => Some("hash".to_owned()),
            other => env(other),
        };
        let config = store_config(
            &Cli::parse_from(["exactly-once-ops", "inspect", "k"]),
            hashing,
        );
        assert_eq!(config.map(|c| c.long_keys), Ok(LongKeyPolicy::Hash));
    }

    fn cli_without_table() -> Cli {
        Cli::parse_from(["exactly-once-ops", "release", "k", "--version", "3"])
    }

    #[test]
    fn durations_are_human() {
        let cli = Cli::parse_from([
            "exactly-once-ops",
            "stuck",
            "--older-than",
            "1h 5m",
            "--segments",
            "4",
        ]);
        match cli.command {
            Command::Stuck {
                older_than,
                segments,
                ..
            } => {
                assert_eq!(older_than, Duration::from_secs(3900));
                assert_eq!(segments, 4);
            }
            other => panic!("parsed as {other:?}"),
        }
        assert!(
            Cli::try_parse_from(["exactly-once-ops", "stuck", "--older-than", "soon"]).is_err()
        );
        assert!(
            Cli::try_parse_from([
                "exactly-once-ops",
                "stuck",
                "--older-than",
                "5m",
                "--segments",
                "0"
            ])
            .is_err()
        );
    }

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
