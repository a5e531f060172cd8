//! The password (and where the database is) from a Secrets Manager secret
//! in the RDS format, read once per container.

use aws_config::SdkConfig;
use serde::Deserialize;
use tokio_postgres::Config;
use tokio_postgres::config::Host;

use super::ConnectError;

/// The fields of an RDS secret.
#[derive(Debug, Deserialize)]
pub(super) struct Secret {
    username: Option<String>,
    password: Option<String>,
    host: Option<String>,
    port: Option<u16>,
    dbname: Option<String>,
}

pub(super) async fn read_secret(aws: &SdkConfig, arn: &str) -> Result<Secret, ConnectError> {
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

pub(super) fn apply_secret(config: &mut Config, secret: &Secret) -> Result<(), ConnectError> {
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
