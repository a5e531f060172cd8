//! The connection to Redis: `REDIS_URL` (`redis://` or, with TLS,
//! `rediss://`; a password or `user:password` in it for AUTH), one
//! multiplexed connection per container that reconnects by itself; or, with
//! `REDIS_CLUSTER=true`, a cluster client that follows the slot map.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;

use super::connection::RedisConnection;

use exactly_once_core::config::{SettingsError, parsed, required};

/// The variables this module reads.
pub const ENV_VARS: &[&str] = &[
    "REDIS_URL",
    "REDIS_TIMEOUT_MS",
    "REDIS_WAIT_REPLICAS",
    "REDIS_CA_FILE",
    "REDIS_CLUSTER",
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
    /// `REDIS_CLUSTER`: `true` for Redis Cluster (ElastiCache cluster mode,
    /// MemoryDB; `REDIS_URL` is then one of its nodes or its configuration
    /// endpoint). Default `false`.
    pub cluster: bool,
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password.
        f.debug_struct("RedisSettings")
            .field("timeout", &self.timeout)
            .field("wait_replicas", &self.wait_replicas)
            .field("ca_file", &self.ca_file)
            .field("cluster", &self.cluster)
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
                Duration::from_secs(3),
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
            cluster: parsed(var, "REDIS_CLUSTER", false, |text| match text {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err("expected true or false".to_owned()),
            })?,
        })
    }

    /// In cluster mode, every key a script touches must be in one hash
    /// slot: the names (`IDEMPOTENCY_TABLE`, and `LEDGER_TABLE` when its
    /// hashes are the effects) must share one `{tag}`, e.g.
    /// `{payments}idempotency` and `{payments}ledger`. (Standalone: any
    /// names.)
    pub fn check_names(&self, names: &[&str]) -> Result<(), String> {
        match self.cluster {
            true => one_slot(names),
            false => Ok(()),
        }
    }

    /// The container's connection. Connects lazily: the first call opens
    /// it, and a call that finds Redis down fails (the record is reported)
    /// while the connection keeps trying in the background.
    pub fn connect(&self) -> Result<RedisConnection, String> {
        let certificates = match &self.ca_file {
            None => None,
            Some(path) => Some(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(
                    std::fs::read(path).map_err(|err| format!("REDIS_CA_FILE {path}: {err}"))?,
                ),
            }),
        };
        if self.cluster {
            let mut builder = ClusterClient::builder(vec![self.url.as_str()])
                .connection_timeout(self.timeout)
                .response_timeout(self.timeout)
                .retries(1);
            if let Some(certificates) = certificates {
                builder = builder.certs(certificates);
            }
            let client = builder.build().map_err(|err| format!("REDIS_URL: {err}"))?;
            return Ok(RedisConnection::cluster(client));
        }
        let client = match certificates {
            None => redis::Client::open(self.url.as_str()),
            Some(certificates) => redis::Client::build_with_tls(self.url.as_str(), certificates),
        }
        .map_err(|err| format!("REDIS_URL: {err}"))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        ConnectionManager::new_lazy_with_config(client, config)
            .map(RedisConnection::Single)
            .map_err(|err| err.to_string())
    }
}

/// The hash tag of a key or name: what stands between its first `{` and
/// the first `}` after it, when that is not empty (Redis Cluster hashes only
/// that part).
/// Whether `names` share one hash tag, so that their keys are in one slot.
pub(super) fn one_slot(names: &[&str]) -> Result<(), String> {
    let tags: Vec<Option<&str>> = names.iter().map(|name| hash_tag(name)).collect();
    match tags.first() {
        Some(Some(tag)) if tags.iter().all(|t| *t == Some(tag)) => Ok(()),
        _ => Err(format!(
            "with REDIS_CLUSTER=true the names {names:?} must share one hash tag \
             (e.g. {{payments}}idempotency and {{payments}}ledger), so that a \
             transition's keys are in one hash slot"
        )),
    }
}

fn hash_tag(name: &str) -> Option<&str> {
    let open = name.find('{')?;
    let close = name[open + 1..].find('}')?;
    Some(&name[open + 1..open + 1 + close]).filter(|tag| !tag.is_empty())
}
