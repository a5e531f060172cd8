//! The function's configuration, read from environment variables once per
//! container and validated with one clear error naming the bad variable.

use std::time::Duration;

use crate::config::StoreConfig;

use super::keys::{KeySpec, MissingKeyPolicy};

/// The environment variables this crate reads (the ledger's `LEDGER_TABLE`
/// is read by the demo binary).
pub const ENV_VARS: &[&str] = &[
    "IDEMPOTENCY_TABLE",
    "IDEMPOTENCY_KEY_HEADER",
    "IDEMPOTENCY_KEY_SOURCE",
    "MISSING_KEY_POLICY",
    "IDEMPOTENCY_KEY_PREFIX",
    "LOCK_TIMEOUT_SECONDS",
    "RECORD_RETENTION_SECONDS",
    "SAFETY_MARGIN_MS",
];

/// Default of `SAFETY_MARGIN_MS`: no record starts within 5 s of the
/// invocation's deadline, and running work is cut 2.5 s before it, which
/// leaves a DynamoDB write (2 s at most, retries included) time to finish.
pub const DEFAULT_SAFETY_MARGIN: Duration = Duration::from_millis(5000);

/// A variable that is missing or holds a value the function cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("environment variable {variable}: {reason}")]
pub struct SettingsError {
    pub variable: &'static str,
    pub reason: String,
}

/// Everything the MSK function needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub store: StoreConfig,
    pub keys: KeySpec,
    pub safety_margin: Duration,
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
        let store = StoreConfig {
            key_prefix: var("IDEMPOTENCY_KEY_PREFIX").unwrap_or_default(),
            lock_timeout: seconds(
                var,
                "LOCK_TIMEOUT_SECONDS",
                StoreConfig::DEFAULT_LOCK_TIMEOUT,
            )?,
            retention: seconds(
                var,
                "RECORD_RETENTION_SECONDS",
                StoreConfig::DEFAULT_RETENTION,
            )?,
            ..StoreConfig::new(table_name)
        };
        let header = var("IDEMPOTENCY_KEY_HEADER").unwrap_or_else(|| "idempotency-key".into());
        let source = var("IDEMPOTENCY_KEY_SOURCE").unwrap_or_else(|| "header".into());
        let missing = match var("MISSING_KEY_POLICY") {
            None => MissingKeyPolicy::Reject,
            Some(text) => MissingKeyPolicy::parse(&text).map_err(|reason| SettingsError {
                variable: "MISSING_KEY_POLICY",
                reason,
            })?,
        };
        let keys = KeySpec::parse(&source, header, missing).map_err(|reason| SettingsError {
            variable: "IDEMPOTENCY_KEY_SOURCE",
            reason,
        })?;
        let safety_margin = match var("SAFETY_MARGIN_MS") {
            None => DEFAULT_SAFETY_MARGIN,
            Some(text) => text
                .trim()
                .parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| SettingsError {
                    variable: "SAFETY_MARGIN_MS",
                    reason: format!("expected a whole number of milliseconds, got {text:?}"),
                })?,
        };
        Ok(Self {
            store,
            keys,
            safety_margin,
        })
    }
}

/// A variable that must be set and not empty.
pub fn required(
    var: impl Fn(&str) -> Option<String>,
    variable: &'static str,
) -> Result<String, SettingsError> {
    var(variable).ok_or_else(|| SettingsError {
        variable,
        reason: "is required and not set".into(),
    })
}

fn seconds(
    var: impl Fn(&str) -> Option<String>,
    variable: &'static str,
    default: Duration,
) -> Result<Duration, SettingsError> {
    let Some(text) = var(variable) else {
        return Ok(default);
    };
    match text.trim().parse::<u64>() {
        Ok(secs) if secs > 0 => Ok(Duration::from_secs(secs)),
        _ => Err(SettingsError {
            variable,
            reason: format!("expected a whole number of seconds above 0, got {text:?}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lambda::keys::KeyPart;
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
        assert_eq!(settings.safety_margin, Duration::from_secs(5));
        assert_eq!(
            settings.keys,
            KeySpec::parse("header", "idempotency-key".into(), MissingKeyPolicy::Reject)
                .expect("valid")
        );
    }

    #[test]
    fn every_variable_is_read() {
        let settings = settings(&[
            ("IDEMPOTENCY_TABLE", "t"),
            ("IDEMPOTENCY_KEY_HEADER", "x-id"),
            ("IDEMPOTENCY_KEY_SOURCE", "record-key,json:/payment_id"),
            ("MISSING_KEY_POLICY", "payload-hash"),
            ("IDEMPOTENCY_KEY_PREFIX", "payments#"),
            ("LOCK_TIMEOUT_SECONDS", "12"),
            ("RECORD_RETENTION_SECONDS", "3600"),
            ("SAFETY_MARGIN_MS", "750"),
        ])
        .expect("valid");
        assert_eq!(settings.store.key_prefix, "payments#");
        assert_eq!(settings.store.lock_timeout, Duration::from_secs(12));
        assert_eq!(settings.store.retention, Duration::from_secs(3600));
        assert_eq!(settings.safety_margin, Duration::from_millis(750));
        assert_eq!(
            settings.keys.parts(),
            [
                KeyPart::RecordKey,
                KeyPart::JsonPointer("/payment_id".into())
            ]
        );
        assert_eq!(settings.keys.missing(), MissingKeyPolicy::PayloadHash);
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
            (vec![("SAFETY_MARGIN_MS", "5s")], "SAFETY_MARGIN_MS"),
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
}
