//! Connecting to PostgreSQL: the settings the function reads and the small
//! pool of one container (here); TLS, on by default as RDS requires
//! (`tls.rs`); the password from Secrets Manager (`secret.rs`) or an RDS
//! IAM authentication token (`iam.rs`).

mod iam;
mod secret;
mod tls;

use std::time::Duration;

use aws_config::SdkConfig;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::task::JoinHandle;
use tokio_postgres::tls::NoTls;
use tokio_postgres::{Client, Config, Error};
use tokio_postgres_rustls::MakeRustlsConnect;

use iam::IamToken;
use secret::{apply_secret, read_secret};
use tls::tls_config;

use exactly_once_core::config::{SettingsError, parsed};

/// The environment variables of the PostgreSQL store.
pub const ENV_VARS: &[&str] = &[
    "DATABASE_URL",
    "DATABASE_SECRET_ARN",
    "DATABASE_IAM_AUTH",
    "DATABASE_POOL_SIZE",
    "DATABASE_CONNECT_TIMEOUT_MS",
    "DATABASE_STATEMENT_TIMEOUT_MS",
    "DATABASE_MIGRATE",
];

/// How the connection is encrypted (`sslmode` of `DATABASE_URL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS (`sslmode=disable`): only for a local server.
    Disable,
    /// TLS, the server's certificate not verified (`require`, the default,
    /// as libpq's `require`).
    Require,
    /// TLS, the server's certificate verified against `sslrootcert` (a PEM
    /// file, e.g. the RDS CA bundle) or the system's roots, and its name
    /// against the host (`verify-full`).
    VerifyFull {
        /// A PEM file of trusted roots; `None`: the system's.
        root_cert: Option<String>,
    },
}

/// Where the database is and how the function talks to it.
#[derive(Debug, Clone)]
pub struct DatabaseSettings {
    /// `DATABASE_URL` without its `sslmode` and `sslrootcert` (and without
    /// a password when it has none).
    pub config: Config,
    /// `sslmode`: `require` unless the URL says otherwise.
    pub ssl: SslMode,
    /// `DATABASE_SECRET_ARN`: a Secrets Manager secret in the RDS format
    /// (`username`, `password`, `host`, `port`, `dbname`), whose fields
    /// override the URL's.
    pub secret_arn: Option<String>,
    /// `DATABASE_IAM_AUTH=true`: the password is an RDS IAM authentication
    /// token made for each new connection.
    pub iam_auth: bool,
    /// `DATABASE_POOL_SIZE`: connections of one container (default 4: the
    /// engine's lanes share them; see the README for sizing against
    /// `max_connections`).
    pub pool_size: usize,
    /// `DATABASE_CONNECT_TIMEOUT_MS`: the longest wait for a connection
    /// (default 3000).
    pub connect_timeout: Duration,
    /// `DATABASE_STATEMENT_TIMEOUT_MS`: the server cancels a statement
    /// that runs longer (`statement_timeout`, sent when connecting), so a
    /// statement waiting on a row lock writes nothing once the call has
    /// given up (default 1500; the client gives up
    /// [`Self::CLIENT_GRACE`] later, see [`Self::call_timeout`]).
    pub statement_timeout: Duration,
    /// `DATABASE_MIGRATE=true`: the function applies this build's schema to
    /// its tables at start (as `exactly-once-ops migrate` does: one
    /// transaction, serialised with any other) before it checks them.
    /// Default `false`: the tables are only checked, and a role without
    /// DDL rights suffices.
    pub migrate: bool,
}

/// `DATABASE_MIGRATE` read through `lookup`: `true` or `false` (unset:
/// false).
pub fn migrate_requested(lookup: impl Fn(&str) -> Option<String>) -> Result<bool, SettingsError> {
    let var = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());
    parsed(var, "DATABASE_MIGRATE", false, |text| match text {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("expected true or false".to_owned()),
    })
}

impl DatabaseSettings {
    /// How much longer than the server the client waits for a call: its
    /// round trips (a transaction takes two), enough for a network or a
    /// proxy under strain, and for the server's cancellation to arrive.
    pub const CLIENT_GRACE: Duration = Duration::from_millis(3500);

    /// The longest a store call may take before the client gives up (and
    /// the engine sends it again, then reports the record): the statement
    /// timeout and [`Self::CLIENT_GRACE`] (5 s by default).
    pub fn call_timeout(&self) -> Duration {
        self.statement_timeout + Self::CLIENT_GRACE
    }

    /// Reads the variables of [`ENV_VARS`] through `lookup`; `DATABASE_URL`
    /// is required unless a secret names the host.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let var = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());
        let secret_arn = var("DATABASE_SECRET_ARN");
        let url = match (var("DATABASE_URL"), &secret_arn) {
            (Some(url), _) => url,
            (None, Some(_)) => "postgres://".to_owned(),
            (None, None) => {
                return Err(SettingsError {
                    variable: "DATABASE_URL",
                    reason: "is required with IDEMPOTENCY_STORE=postgres (or DATABASE_SECRET_ARN)"
                        .into(),
                });
            }
        };
        let (config, ssl) = parse_url(&url).map_err(|reason| SettingsError {
            variable: "DATABASE_URL",
            reason,
        })?;
        let millis = |text: &str| match text.parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
            _ => Err("expected a whole number of milliseconds above 0".to_owned()),
        };
        let iam_auth = parsed(var, "DATABASE_IAM_AUTH", false, |text| match text {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err("expected true or false".to_owned()),
        })?;
        let pool_size = parsed(var, "DATABASE_POOL_SIZE", 4, |text| match text.parse() {
            Ok(size @ 1..=100) => Ok(size),
            _ => Err("expected 1 to 100 connections".to_owned()),
        })?;
        Ok(Self {
            config,
            ssl,
            secret_arn,
            iam_auth,
            pool_size,
            connect_timeout: parsed(
                var,
                "DATABASE_CONNECT_TIMEOUT_MS",
                Duration::from_secs(3),
                millis,
            )?,
            statement_timeout: parsed(
                var,
                "DATABASE_STATEMENT_TIMEOUT_MS",
                Duration::from_millis(1500),
                millis,
            )?,
            migrate: migrate_requested(&lookup)?,
        })
    }

    /// The container's pool. With a secret, reads it first (one call to
    /// Secrets Manager per container); with IAM authentication, each new
    /// connection signs a fresh token with the function's role. Connects
    /// lazily: the first call opens the first connection.
    pub async fn pool(&self, aws: Option<&SdkConfig>) -> Result<Pool, ConnectError> {
        let mut config = self.config.clone();
        if let Some(arn) = &self.secret_arn {
            let aws = aws.ok_or(ConnectError::NoAws("DATABASE_SECRET_ARN"))?;
            apply_secret(&mut config, &read_secret(aws, arn).await?)?;
        }
        let statement_ms = self.statement_timeout.as_millis();
        // Never plain text when TLS is asked for (tokio-postgres would
        // fall back to it under its default, `prefer`).
        let ssl_mode = match self.ssl {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            _ => tokio_postgres::config::SslMode::Require,
        };
        config
            .ssl_mode(ssl_mode)
            .connect_timeout(self.connect_timeout)
            .options(format!("-c statement_timeout={statement_ms}"))
            .application_name("msk-exactly-once");
        let iam = match self.iam_auth {
            false => None,
            true => Some(IamToken::new(
                aws.ok_or(ConnectError::NoAws("DATABASE_IAM_AUTH"))?,
                &config,
            )?),
        };
        let tls = match &self.ssl {
            SslMode::Disable => None,
            mode => Some(MakeRustlsConnect::new(tls_config(mode)?)),
        };
        let manager = Manager::from_connect(
            config,
            Connector { tls, iam },
            ManagerConfig {
                // Every call that fails or times out closes its connection
                // (see PostgresStore), so a pooled one is known good.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        Pool::builder(manager)
            .max_size(self.pool_size)
            .wait_timeout(Some(self.connect_timeout))
            .create_timeout(Some(self.connect_timeout))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|err| ConnectError::Pool(err.to_string()))
    }
}

/// Splits `sslmode` and `sslrootcert` off `url` (tokio-postgres knows
/// neither `verify-full` nor root files) and parses the rest.
fn parse_url(url: &str) -> Result<(Config, SslMode), String> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut kept = Vec::new();
    let (mut mode, mut root_cert) = (None, None);
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        match pair.split_once('=') {
            Some(("sslmode", value)) => mode = Some(value.to_owned()),
            Some(("sslrootcert", value)) => root_cert = Some(value.to_owned()),
            _ => kept.push(pair),
        }
    }
    let ssl = match mode.as_deref() {
        None | Some("require") => SslMode::Require,
        Some("verify-full") => SslMode::VerifyFull { root_cert },
        Some("disable") => SslMode::Disable,
        Some(other) => {
            return Err(format!(
                "sslmode={other} is not supported; use require (the default), verify-full \
                 (with sslrootcert=<PEM file> for the RDS CA bundle) or disable"
            ));
        }
    };
    let rest = match kept.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", kept.join("&")),
    };
    // The parser's message may quote the URL, password included: not shown.
    let config: Config = rest
        .parse()
        .map_err(|_| "is not a postgres:// URL libpq would accept".to_owned())?;
    Ok((config, ssl))
}

/// Opens the pool's connections: TLS or not, and with IAM authentication a
/// fresh token as the password of each.
struct Connector {
    tls: Option<MakeRustlsConnect>,
    iam: Option<IamToken>,
}

type Connected = (Client, JoinHandle<()>);

impl deadpool_postgres::Connect for Connector {
    fn connect(
        &self,
        config: &Config,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Connected, Error>> + Send + '_>> {
        let mut config = config.clone();
        Box::pin(async move {
            if let Some(iam) = &self.iam {
                // A token that cannot be made fails the connection, as a
                // wrong password would.
                match iam.token().await {
                    Ok(token) => config.password(token),
                    Err(message) => {
                        tracing::warn!(error = %message, "no RDS IAM authentication token");
                        &mut config
                    }
                };
            }
            match &self.tls {
                Some(tls) => {
                    let (client, connection) = config.connect(tls.clone()).await?;
                    Ok((client, tokio::spawn(drive(connection))))
                }
                None => {
                    let (client, connection) = config.connect(NoTls).await?;
                    Ok((client, tokio::spawn(drive(connection))))
                }
            }
        })
    }
}

/// Runs a connection until it closes; a lost connection shows at the next
/// call on it, which reports the record.
async fn drive<F: Future<Output = Result<(), Error>>>(connection: F) {
    if let Err(err) = connection.await {
        tracing::debug!(error = %err, "database connection closed");
    }
}

/// Why the pool could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// A setting needs the AWS configuration, which the caller did not give.
    #[error("{0} needs the AWS configuration (region, credentials)")]
    NoAws(&'static str),
    /// The secret could not be read or is not in the RDS format.
    #[error("DATABASE_SECRET_ARN: {0}")]
    Secret(String),
    /// RDS IAM authentication cannot be set up.
    #[error("DATABASE_IAM_AUTH: {0}")]
    Iam(String),
    /// The TLS configuration is unusable (e.g. an unreadable sslrootcert).
    #[error("DATABASE_URL TLS: {0}")]
    Tls(String),
    /// The pool could not be built.
    #[error("database pool: {0}")]
    Pool(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<DatabaseSettings, SettingsError> {
        DatabaseSettings::from_lookup(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn tls_is_on_unless_disabled_and_sslmode_is_honoured() {
        let url = |query: &str| {
            settings(&[(
                "DATABASE_URL",
                &format!("postgres://app@db:5432/ledger{query}"),
            )])
        };
        assert_eq!(url("").map(|s| s.ssl), Ok(SslMode::Require));
        assert_eq!(url("?sslmode=disable").map(|s| s.ssl), Ok(SslMode::Disable));
        assert_eq!(
            url("?sslmode=verify-full&sslrootcert=/opt/rds.pem&application_name=x").map(|s| s.ssl),
            Ok(SslMode::VerifyFull {
                root_cert: Some("/opt/rds.pem".into())
            })
        );
        let err = url("?sslmode=prefer").expect_err("prefer may fall back to plain text");
        assert_eq!(err.variable, "DATABASE_URL");
        assert!(
            err.reason.contains("sslmode=prefer is not supported"),
            "{err}"
        );
    }

    #[test]
    fn defaults_and_bad_values_are_named() {
        let ok = settings(&[("DATABASE_URL", "postgres://app:pw@db/ledger")]).expect("valid");
        assert_eq!(ok.pool_size, 4);
        assert_eq!(ok.connect_timeout, Duration::from_secs(3));
        assert_eq!(ok.statement_timeout, Duration::from_millis(1500));
        assert_eq!(ok.call_timeout(), Duration::from_secs(5));
        assert!(!ok.iam_auth);
        assert_eq!(ok.config.get_dbname(), Some("ledger"));
        let missing = settings(&[]).expect_err("no URL, no secret");
        assert_eq!(missing.variable, "DATABASE_URL");
        // The secret alone is enough (it names the host).
        assert!(settings(&[("DATABASE_SECRET_ARN", "arn:aws:secretsmanager:x")]).is_ok());
        for (name, bad) in [
            ("DATABASE_POOL_SIZE", "0"),
            ("DATABASE_IAM_AUTH", "yes"),
            ("DATABASE_STATEMENT_TIMEOUT_MS", "soon"),
        ] {
            let err =
                settings(&[("DATABASE_URL", "postgres://db/x"), (name, bad)]).expect_err("refused");
            assert_eq!(err.variable, name);
        }
        // A URL that does not parse is refused without echoing it (it may
        // hold a password).
        let err = settings(&[("DATABASE_URL", "postgres://u:secret@db:notaport/x")])
            .expect_err("bad port");
        assert!(!err.to_string().contains("secret"), "{err}");
    }
}
