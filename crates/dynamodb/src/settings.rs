//! How long the function waits on DynamoDB: each attempt of a request, and
//! the request with all its attempts (the SDK sends a request up to 3
//! times; the engine sends one that still failed again, `RESENDS` more
//! times, each recognising its own earlier write).
//!
//! A request that takes longer is not answered; a slow one is. So the
//! attempt timeout is what separates "slow" from "gone": long enough for a
//! store under strain (answers of a second or more), short enough that a
//! connection that hangs is given up within a few seconds. Keep the
//! operation timeout at most a third of `LOCK_TIMEOUT_SECONDS` (the
//! heartbeat renews every third of it: a renewal then answers, or fails,
//! before the next) and under the invocation's time left once the safety
//! margin begins (`SAFETY_MARGIN_MS`: work is cut at half of it, leaving
//! the other half for the last write).

use std::time::Duration;

use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use exactly_once_core::config::{SettingsError, parsed};

/// The variables [`DynamoDbSettings::from_lookup`] reads.
pub const ENV_VARS: &[&str] = &[
    "DYNAMODB_ATTEMPT_TIMEOUT_MS",
    "DYNAMODB_OPERATION_TIMEOUT_MS",
];

/// The DynamoDB client's timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DynamoDbSettings {
    /// `DYNAMODB_ATTEMPT_TIMEOUT_MS`: the longest one attempt of a request
    /// may take (default 3000).
    pub attempt_timeout: Duration,
    /// `DYNAMODB_OPERATION_TIMEOUT_MS`: the longest a request may take,
    /// all its attempts and the pauses between them included (default
    /// 10000; at least the attempt timeout).
    pub operation_timeout: Duration,
}

impl Default for DynamoDbSettings {
    fn default() -> Self {
        Self {
            attempt_timeout: Duration::from_secs(3),
            operation_timeout: Duration::from_secs(10),
        }
    }
}

impl DynamoDbSettings {
    /// How long a new connection may take to open.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

    /// Reads [`ENV_VARS`] through `lookup` (unset: the defaults).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let var = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());
        let millis = |text: &str| match text.parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
            _ => Err("expected a whole number of milliseconds above 0".to_owned()),
        };
        let defaults = Self::default();
        let attempt_timeout = parsed(
            var,
            "DYNAMODB_ATTEMPT_TIMEOUT_MS",
            defaults.attempt_timeout,
            millis,
        )?;
        let operation_timeout = parsed(
            var,
            "DYNAMODB_OPERATION_TIMEOUT_MS",
            defaults.operation_timeout,
            |text| match millis(text)? {
                ms if ms >= attempt_timeout => Ok(ms),
                _ => Err(format!(
                    "expected at least DYNAMODB_ATTEMPT_TIMEOUT_MS ({} ms)",
                    attempt_timeout.as_millis()
                )),
            },
        )?;
        Ok(Self {
            attempt_timeout,
            operation_timeout,
        })
    }

    /// The client's timeouts.
    pub fn timeout_config(&self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(Self::CONNECT_TIMEOUT)
            .operation_attempt_timeout(self.attempt_timeout)
            .operation_timeout(self.operation_timeout)
            .build()
    }

    /// What is off, against the lease of `lock_timeout`: an operation
    /// timeout beyond a third of it lets one renewal outlast the heartbeat's
    /// period (a lease may then end while its renewal waits).
    pub fn warning(&self, lock_timeout: Duration) -> Option<String> {
        (self.operation_timeout > lock_timeout / 3).then(|| {
            format!(
                "DYNAMODB_OPERATION_TIMEOUT_MS ({} ms) is more than a third of \
                 LOCK_TIMEOUT_SECONDS ({} s): a lease may end while its renewal waits",
                self.operation_timeout.as_millis(),
                lock_timeout.as_secs_f64()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<DynamoDbSettings, SettingsError> {
        DynamoDbSettings::from_lookup(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn timeouts_default_and_are_read_and_checked() {
        assert_eq!(settings(&[]), Ok(DynamoDbSettings::default()));
        let set = settings(&[
            ("DYNAMODB_ATTEMPT_TIMEOUT_MS", "500"),
            ("DYNAMODB_OPERATION_TIMEOUT_MS", "1500"),
        ])
        .expect("valid");
        assert_eq!(
            (set.attempt_timeout, set.operation_timeout),
            (Duration::from_millis(500), Duration::from_millis(1500))
        );
        let shorter = settings(&[("DYNAMODB_OPERATION_TIMEOUT_MS", "2000")]).expect_err("shorter");
        assert_eq!(shorter.variable, "DYNAMODB_OPERATION_TIMEOUT_MS");
        assert!(shorter.reason.contains("3000 ms"), "{shorter}");
        let zero = settings(&[("DYNAMODB_ATTEMPT_TIMEOUT_MS", "0")]).expect_err("zero");
        assert_eq!(zero.variable, "DYNAMODB_ATTEMPT_TIMEOUT_MS");
    }

    #[test]
    fn an_operation_timeout_beyond_a_third_of_the_lease_is_named() {
        let defaults = DynamoDbSettings::default();
        assert_eq!(defaults.warning(Duration::from_secs(30)), None);
        let warning = defaults.warning(Duration::from_secs(2)).expect("a warning");
        assert!(warning.contains("LOCK_TIMEOUT_SECONDS"), "{warning}");
    }
}
