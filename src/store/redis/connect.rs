//! The connection to Redis: `REDIS_URL` (`redis://` or, with TLS,
//! `rediss://`; a password or `user:password` in it for AUTH), one
//! multiplexed connection per container that reconnects by itself.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::config::{SettingsError, parsed, required};

/// The variables this module reads.
pub const ENV_VARS: &[&str] = &[
    "REDIS_URL",
    "REDIS_TIMEOUT_MS",
    "REDIS_WAIT_REPLICAS",
    "REDIS_CA_FILE",
];

/// How to reach Redis.
#[derive(Clone)]
pub struct RedisSettings {
    /// `REDIS_URL`.
    pub url: String,
    /// `REDIS_TIMEOUT_MS`: the longest a call (connecting included) may
    /// take before the record is reported (default 1000).
    pub timeout: Duration,
    /// `REDIS_WAIT_REPLICAS`: after each write, `WAIT` for this many
    /// replicas to acknowledge it; fewer within the timeout: the record is
    /// reported (default 0: the primary's acknowledgement).
    pub wait_replicas: u32,
    /// `REDIS_CA_FILE`: a PEM file of the CA that signed the server's
    /// certificate, instead of the system's roots (`rediss://` only).
    pub ca_file: Option<String>,
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password.
        f.debug_struct("RedisSettings")
            .field("timeout", &self.timeout)
            .field("wait_replicas", &self.wait_replicas)
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl RedisSettings {
    /// Reads [`ENV_VARS`] through `lookup`; `REDIS_URL` is required.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let var = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());
        let url = required(var, "REDIS_URL")?;
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(SettingsError {
                variable: "REDIS_URL",
                reason: "expected redis://host:port or rediss://host:port (TLS)".into(),
            });
        }
        Ok(Self {
            url,
            timeout: parsed(
                var,
                "REDIS_TIMEOUT_MS",
                Duration::from_secs(1),
                |text| match text.parse::<u64>() {
                    Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
                    _ => Err("expected a whole number of milliseconds above 0".to_owned()),
                },
            )?,
            wait_replicas: parsed(var, "REDIS_WAIT_REPLICAS", 0, |text| {
                text.parse()
                    .map_err(|_| "expected a number of replicas".to_owned())
            })?,
            ca_file: var("REDIS_CA_FILE"),
        })
    }

    /// The container's connection. Connects lazily: the first call opens
    /// it, and a call that finds Redis down fails (the record is reported)
    /// while the connection keeps trying in the background.
    pub fn connect(&self) -> Result<ConnectionManager, String> {
        let client = match &self.ca_file {
            None => redis::Client::open(self.url.as_str()),
            Some(path) => {
                let root_cert =
                    std::fs::read(path).map_err(|err| format!("REDIS_CA_FILE {path}: {err}"))?;
                let certificates = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(root_cert),
                };
                redis::Client::build_with_tls(self.url.as_str(), certificates)
            }
        }
        .map_err(|err| format!("REDIS_URL: {err}"))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        ConnectionManager::new_lazy_with_config(client, config).map_err(|err| err.to_string())
    }
}
