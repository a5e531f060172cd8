//! `DUPLICATE_CACHE=redis`: Redis as the cache of COMPLETED keys that every
//! container shares, in front of a durable store (DynamoDB, PostgreSQL). An
//! entry is a hash at `<IDEMPOTENCY_TABLE>:completed:<pk>` holding the
//! payload hash, the durable item's `expires_at`, its result and the scope
//! of the function that wrote it, deleted by Redis just after that
//! `expires_at`. The engine writes an entry only with what the durable
//! store said COMPLETED, and trusts it only for the same payload hash
//! before `expires_at` ([`exactly_once_core::engine::SharedCache`]); this
//! cache hands out only the entries of its own scope (or of none), so two
//! functions sharing a table never read each other's keys as duplicates.
//!
//! Every call is bounded by `DUPLICATE_CACHE_TIMEOUT_MS`: a Redis that is
//! slow, down or flushed is a miss, and the durable store decides.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::codec::deleted_at_ms;
use super::connect::RedisSettings;
use super::connection::RedisConnection;
use exactly_once_core::config::{SettingsError, StoreConfig, parsed};
use exactly_once_core::engine::{CachedEntry, Completed, SharedCache};

/// The variables this module reads (with those of [`RedisSettings`]).
pub const ENV_VARS: &[&str] = &["DUPLICATE_CACHE", "DUPLICATE_CACHE_TIMEOUT_MS"];

/// The shared cache of COMPLETED keys in Redis.
pub struct RedisDuplicateCache {
    connection: RedisConnection,
    /// `<table>:completed:<key prefix>`: the keys of one function.
    namespace: String,
    /// The store's configuration: whose entries are this cache's own.
    store: StoreConfig,
    timeout: Duration,
}

impl RedisDuplicateCache {
    /// The cache `DUPLICATE_CACHE` asks for (`None` when unset or `none`),
    /// for the idempotency keys of `store`'s table and key prefix.
    pub fn from_lookup(
        store: &StoreConfig,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, SettingsError> {
        let var = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());
        let wanted = parsed(var, "DUPLICATE_CACHE", false, |text| match text {
            "none" => Ok(false),
            "redis" => Ok(true),
            _ => Err("expected none or redis".to_owned()),
        })?;
        if !wanted {
            return Ok(None);
        }
        let timeout = parsed(
            var,
            "DUPLICATE_CACHE_TIMEOUT_MS",
            Duration::from_millis(50),
            |text| match text.parse::<u64>() {
                Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
                _ => Err("expected a whole number of milliseconds above 0".to_owned()),
            },
        )?;
        let mut settings = RedisSettings::from_lookup(lookup)?;
        settings.timeout = timeout;
        // Cluster mode: one batch's entries are one pipeline, in one slot.
        settings
            .check_names(&[&store.table_name])
            .map_err(|reason| SettingsError {
                variable: "IDEMPOTENCY_TABLE",
                reason,
            })?;
        let connection = settings.connect().map_err(|reason| SettingsError {
            variable: "REDIS_URL",
            reason,
        })?;
        Ok(Some(Self::new(connection, store, timeout)))
    }

    /// The cache on `connection` for `store`'s keys; every call gives up
    /// (a miss) after `timeout`.
    pub fn new(connection: RedisConnection, store: &StoreConfig, timeout: Duration) -> Self {
        Self {
            connection,
            namespace: format!("{}:completed:{}", store.table_name, store.key_prefix),
            store: store.clone(),
            timeout,
        }
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.namespace)
    }
}

/// An entry's `payload_hash`, `expires_at`, `result` and `scope`.
type Fields = (Option<String>, Option<u64>, Option<String>, Option<String>);

impl SharedCache for RedisDuplicateCache {
    fn get<'a>(&'a self, keys: &'a [&'a str]) -> BoxFuture<'a, HashMap<String, CachedEntry>> {
        Box::pin(async move {
            let mut pipe = redis::pipe();
            for key in keys {
                pipe.cmd("HMGET")
                    .arg(self.key(key))
                    .arg(&["payload_hash", "expires_at", "result", "scope"][..]);
            }
            let mut connection = self.connection.clone();
            let found = tokio::time::timeout(
                self.timeout,
                pipe.query_async::<Vec<Fields>>(&mut connection),
            )
            .await;
            let found = match found {
                Ok(Ok(found)) => found,
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, "duplicate cache unavailable; reading the store");
                    return HashMap::new();
                }
                Err(_) => {
                    tracing::warn!("duplicate cache too slow; reading the store");
                    return HashMap::new();
                }
            };
            keys.iter()
                .zip(found)
                .filter_map(|(key, entry)| match entry {
                    // Another function's key is never this one's duplicate.
                    (_, _, _, scope) if !self.store.owns(scope.as_deref()) => None,
                    (Some(hash), Some(expires_at_s), result, _) => Some((
                        (*key).to_owned(),
                        (Completed::new(&hash, result.as_deref()), expires_at_s),
                    )),
                    _ => None,
                })
                .collect()
        })
    }

    fn put(&self, entries: Vec<(String, CachedEntry)>) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let mut pipe = redis::pipe();
            for (key, (completed, expires_at_s)) in &entries {
                let key = self.key(key);
                let mut fields = vec![
                    ("payload_hash", completed.payload_hash.clone()),
                    ("expires_at", expires_at_s.to_string()),
                ];
                if let Some(result) = &completed.result {
                    fields.push(("result", result.to_string()));
                }
                if let Some(scope) = &self.store.scope {
                    fields.push(("scope", scope.clone()));
                }
                pipe.hset_multiple(&key, &fields)
                    .ignore()
                    .pexpire_at(&key, deleted_at_ms(*expires_at_s) as i64)
                    .ignore();
            }
            let mut connection = self.connection.clone();
            match tokio::time::timeout(self.timeout, pipe.query_async::<()>(&mut connection)).await
            {
                Ok(Ok(())) => {}
                Ok(Err(err)) => tracing::warn!(error = %err, "duplicate cache not written"),
                Err(_) => tracing::warn!("duplicate cache too slow; not written"),
            }
        })
    }
}
