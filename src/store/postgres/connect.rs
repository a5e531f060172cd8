//! Connecting to PostgreSQL: the settings the function reads, the small
//! pool of one container, TLS (on by default, as RDS requires), and the
//! password from Secrets Manager or an RDS IAM authentication token.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_config::SdkConfig;
use aws_credential_types::provider::ProvideCredentials;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use serde::Deserialize;
use tokio::task::JoinHandle;
use tokio_postgres::config::Host;
use tokio_postgres::tls::NoTls;
use tokio_postgres::{Client, Config, Error};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::{SettingsError, parsed};

/// The environment variables of the PostgreSQL store.
pub const ENV_VARS: &[&str] = &[
    "DATABASE_URL",
    "DATABASE_SECRET_ARN",
    "DATABASE_IAM_AUTH",
    "DATABASE_POOL_SIZE",
    "DATABASE_CONNECT_TIMEOUT_MS",
    "DATABASE_STATEMENT_TIMEOUT_MS",
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
}

impl DatabaseSettings {
    /// How much longer than the server the client waits for a statement:
    /// enough for the server's cancellation to arrive.
    pub const CLIENT_GRACE: Duration = Duration::from_millis(500);

    /// The longest a store call may take before the client gives up and the
    /// record is reported: the statement timeout and [`Self::CLIENT_GRACE`]
    /// (2 s by default, as DynamoDB's operation timeout).
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

/// The rustls configuration of `mode`.
fn tls_config(mode: &SslMode) -> Result<ClientConfig, ConnectError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|err| ConnectError::Tls(err.to_string()))?;
    let config = match mode {
        SslMode::VerifyFull { root_cert } => {
            let mut roots = RootCertStore::empty();
            match root_cert {
                Some(path) => {
                    for cert in CertificateDer::pem_file_iter(path)
                        .map_err(|err| ConnectError::Tls(format!("sslrootcert {path}: {err}")))?
                    {
                        let cert = cert.map_err(|err| {
                            ConnectError::Tls(format!("sslrootcert {path}: {err}"))
                        })?;
                        roots
                            .add(cert)
                            .map_err(|err| ConnectError::Tls(err.to_string()))?;
                    }
                }
                None => {
                    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
                }
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        _ => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(EncryptOnly(provider)))
            .with_no_client_auth(),
    };
    Ok(config)
}

/// `sslmode=require`: the connection is encrypted, the server's
/// certificate not checked (libpq's meaning of `require`).
#[derive(Debug)]
struct EncryptOnly(Arc<CryptoProvider>);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
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

/// The fields of an RDS secret.
#[derive(Debug, Deserialize)]
struct Secret {
    username: Option<String>,
    password: Option<String>,
    host: Option<String>,
    port: Option<u16>,
    dbname: Option<String>,
}

async fn read_secret(aws: &SdkConfig, arn: &str) -> Result<Secret, ConnectError> {
    let client = aws_sdk_secretsmanager::Client::new(aws);
    let value = client
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|err| {
            ConnectError::Secret(
                aws_sdk_secretsmanager::error::DisplayErrorContext(err).to_string(),
            )
        })?;
    let text = value
        .secret_string()
        .ok_or_else(|| ConnectError::Secret("the secret has no SecretString".into()))?;
    // serde's message could quote the secret: only its position is kept.
    serde_json::from_str(text).map_err(|err| {
        ConnectError::Secret(format!(
            "not an RDS secret (JSON with username, password, host, port, dbname) at line {} column {}",
            err.line(),
            err.column()
        ))
    })
}

fn apply_secret(config: &mut Config, secret: &Secret) -> Result<(), ConnectError> {
    // A new configuration: a host given by the secret replaces the URL's
    // hosts (and their ports) whole.
    let host = match (&secret.host, config.get_hosts().first()) {
        (Some(host), _) => host.clone(),
        (None, Some(Host::Tcp(host))) => host.clone(),
        _ => {
            return Err(ConnectError::Secret(
                "neither the secret nor DATABASE_URL names a TCP host".into(),
            ));
        }
    };
    let mut merged = Config::new();
    merged.host(&host).port(
        secret
            .port
            .or(config.get_ports().first().copied())
            .unwrap_or(5432),
    );
    if let Some(user) = secret.username.as_deref().or(config.get_user()) {
        merged.user(user);
    }
    if let Some(password) = secret
        .password
        .as_deref()
        .map(str::as_bytes)
        .or(config.get_password())
    {
        merged.password(password);
    }
    if let Some(dbname) = secret.dbname.as_deref().or(config.get_dbname()) {
        merged.dbname(dbname);
    }
    *config = merged;
    Ok(())
}

/// RDS IAM authentication: a token is a SigV4-presigned
/// `connect` request for the user at the host, valid 15 minutes.
struct IamToken {
    aws: SdkConfig,
    host: String,
    port: u16,
    user: String,
}

impl IamToken {
    fn new(aws: &SdkConfig, config: &Config) -> Result<Self, ConnectError> {
        let host = match config.get_hosts().first() {
            Some(Host::Tcp(host)) => host.clone(),
            _ => return Err(ConnectError::Iam("DATABASE_URL names no TCP host".into())),
        };
        let user = config
            .get_user()
            .ok_or_else(|| ConnectError::Iam("DATABASE_URL names no user".into()))?;
        Ok(Self {
            aws: aws.clone(),
            host,
            port: config.get_ports().first().copied().unwrap_or(5432),
            user: user.to_owned(),
        })
    }

    async fn token(&self) -> Result<String, String> {
        use aws_sigv4::http_request::{
            SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
        };
        let provider = self
            .aws
            .credentials_provider()
            .ok_or("no AWS credentials provider")?;
        let credentials = provider
            .provide_credentials()
            .await
            .map_err(|err| err.to_string())?;
        let region = self.aws.region().ok_or("no AWS region")?.to_string();
        let identity = credentials.into();
        let mut settings = SigningSettings::default();
        settings.expires_in = Some(Duration::from_secs(900));
        settings.signature_location = SignatureLocation::QueryParams;
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(&region)
            .name("rds-db")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .map_err(|err| err.to_string())?
            .into();
        let mut url = url::Url::parse(&format!("https://{}:{}/", self.host, self.port))
            .map_err(|err| err.to_string())?;
        url.query_pairs_mut()
            .append_pair("Action", "connect")
            .append_pair("DBUser", &self.user);
        let request = SignableRequest::new(
            "GET",
            url.as_str(),
            std::iter::empty(),
            SignableBody::Bytes(&[]),
        )
        .map_err(|err| err.to_string())?;
        let (instructions, _) = sign(request, &params)
            .map_err(|err| err.to_string())?
            .into_parts();
        for (name, value) in instructions.params() {
            url.query_pairs_mut().append_pair(name, value);
        }
        Ok(url.as_str().trim_start_matches("https://").to_owned())
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
        assert_eq!(ok.call_timeout(), Duration::from_secs(2));
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

    #[tokio::test]
    async fn an_iam_token_is_a_presigned_connect_request_for_the_user() {
        use aws_credential_types::Credentials;
        use aws_credential_types::provider::SharedCredentialsProvider;
        let aws = SdkConfig::builder()
            .region(aws_config::Region::new("eu-west-1"))
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                "AKIDEXAMPLE",
                "secret",
                None,
                None,
                "test",
            )))
            .build();
        let config: Config = "postgres://app@db.example.com:6543/ledger"
            .parse()
            .expect("url");
        let token = IamToken::new(&aws, &config)
            .expect("IAM settings")
            .token()
            .await
            .expect("a token");
        let prefix = "db.example.com:6543/?Action=connect&DBUser=app&X-Amz-Algorithm=AWS4-HMAC-SHA256\
                      &X-Amz-Credential=AKIDEXAMPLE%2F";
        assert!(token.starts_with(prefix), "{token}");
        for part in [
            "%2Feu-west-1%2Frds-db%2Faws4_request",
            "&X-Amz-Expires=900",
            "&X-Amz-SignedHeaders=host",
            "&X-Amz-Signature=",
        ] {
            assert!(token.contains(part), "{part} in {token}");
        }
        assert!(!token.contains("secret"), "never the secret key");
    }
}
