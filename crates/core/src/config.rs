//! Configuration of the idempotency store: a plain struct, filled from the
//! environment by the Lambda edge (see `lambda::settings`); and the helpers
//! every reader of environment variables shares (the edge, the demo ledger).

use std::time::Duration;

/// How the store names, locks and retains idempotency items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The table (DynamoDB table, SQL table, Redis key namespace) holding
    /// one item per idempotency key.
    pub table_name: String,
    /// Prepended to every idempotency key to form the item's `pk`
    /// (lets several functions share one table). Empty (the default), or
    /// letters, digits, `_`, `-`, `.`, `:` ending in ONE `#`: since no prefix
    /// holds a `#` before its end, a `pk` names its prefix unambiguously and
    /// two prefixes can never map two keys to one item (see
    /// [`StoreConfig::check_prefix`]). Functions that share a table must each
    /// set one.
    pub key_prefix: String,
    /// Whose items these are: written on every item this store creates
    /// (`scope`) and checked on every item it finds, so that two functions
    /// sharing one table and one key prefix never take each other's items
    /// for their own (a key another scope holds is refused, never a
    /// duplicate). On Lambda the function's name unless
    /// `IDEMPOTENCY_SCOPE` says otherwise; functions that set the same
    /// scope share their keys deliberately. An item without a scope
    /// (written before scopes, or by a caller without one) belongs to
    /// whoever finds it. `None`: this store writes no scope.
    pub scope: Option<String>,
    /// What a key too long for the store's partition key becomes.
    pub long_keys: LongKeyPolicy,
    /// Length of a claim's lease. A crashed worker's key becomes claimable
    /// again after this long. Default: 30 s.
    pub lock_timeout: Duration,
    /// How long an item is kept (its `expires_at`, the table's TTL) after
    /// every write. Default: 8 days, longer than MSK's default 7-day topic
    /// retention, so a record cannot outlive the memory of having been done.
    pub retention: Duration,
    /// Added to this process's clock wherever the store writes or judges a
    /// time. 0 in production; tests set it to model clock skew between
    /// workers.
    pub clock_offset_ms: i64,
}

impl StoreConfig {
    /// The default lease of a claim: 30 s.
    pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(30);
    /// The default retention of an item: 8 days.
    pub const DEFAULT_RETENTION: Duration = Duration::from_secs(8 * 24 * 3600);

    /// A configuration with the defaults for everything but the table.
    pub fn new(table_name: impl Into<String>) -> Self {
        Self {
            table_name: table_name.into(),
            key_prefix: String::new(),
            scope: None,
            long_keys: LongKeyPolicy::Reject,
            lock_timeout: Self::DEFAULT_LOCK_TIMEOUT,
            retention: Self::DEFAULT_RETENTION,
            clock_offset_ms: 0,
        }
    }

    /// A new lease's end: one lock timeout from `now_ms`, not past `cap_ms`.
    pub fn lease_end(&self, now_ms: u64, cap_ms: Option<u64>) -> u64 {
        let full = now_ms + crate::clock::duration_ms(self.lock_timeout);
        cap_ms.map_or(full, |cap| full.min(cap))
    }

    /// The TTL (epoch seconds) of an item written at `now_ms`.
    pub fn expires_at_s(&self, now_ms: u64) -> u64 {
        crate::clock::ms_to_s(now_ms) + self.retention.as_secs()
    }
}

impl StoreConfig {
    /// Checks a key prefix: empty, or at most 64 letters, digits, `_`, `-`,
    /// `.` or `:` followed by one `#` (e.g. `payments#`).
    pub fn check_prefix(prefix: &str) -> Result<(), String> {
        if prefix.is_empty() {
            return Ok(());
        }
        let body = prefix.strip_suffix('#').unwrap_or("");
        let allowed = |c: char| c.is_ascii_alphanumeric() || "_-.:".contains(c);
        if body.is_empty() || body.len() > 64 || !body.chars().all(allowed) {
            return Err(
                "a key prefix is 1 to 64 letters, digits, '_', '-', '.' or ':' followed \
                        by one '#' (e.g. payments#), so that no two prefixes can map two keys \
                        to one item"
                    .to_owned(),
            );
        }
        Ok(())
    }
}

impl StoreConfig {
    /// Checks a scope (`IDEMPOTENCY_SCOPE`, or a Lambda function's name):
    /// 1 to 140 letters, digits, `_`, `-`, `.` or `:` (a function name, or
    /// a partial ARN).
    pub fn check_scope(scope: &str) -> Result<(), String> {
        let allowed = |c: char| c.is_ascii_alphanumeric() || "_-.:".contains(c);
        match !scope.is_empty() && scope.len() <= 140 && scope.chars().all(allowed) {
            true => Ok(()),
            false => Err("a scope is 1 to 140 letters, digits, '_', '-', '.' or ':' \
                          (a Lambda function's name, e.g. payments-consumer)"
                .to_owned()),
        }
    }

    /// Whether an item written with `scope` is this store's own: written
    /// with this store's scope, or with none (before scopes existed).
    pub fn owns(&self, scope: Option<&str>) -> bool {
        scope.is_none() || scope == self.scope.as_deref()
    }
}

/// What happens to an idempotency key longer than the store's limit on a
/// partition key (2048 bytes with its prefix on DynamoDB).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LongKeyPolicy {
    /// The record fails permanently with a clear error (the default).
    #[default]
    Reject,
    /// The key is stored as `sha256:<64 hex digits>` of its UTF-8 bytes
    /// (after the prefix): any length fits, and equal keys still meet.
    Hash,
}

impl LongKeyPolicy {
    /// Parses `LONG_KEY_POLICY`: `reject` or `hash`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "reject" => Ok(Self::Reject),
            "hash" => Ok(Self::Hash),
            other => Err(format!(
                "unknown long key policy {other:?}; expected reject or hash"
            )),
        }
    }
}

/// A variable that is missing or holds a value the function cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("environment variable {variable}: {reason}")]
pub struct SettingsError {
    /// The variable's name.
    pub variable: &'static str,
    /// What is wrong with its value.
    pub reason: String,
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

/// A variable of the process environment that must be set and not empty
/// (the table of a handler's own, say): its value, or an error naming it.
pub fn required_var(variable: &'static str) -> Result<String, SettingsError> {
    required(
        |name| std::env::var(name).ok().filter(|value| !value.is_empty()),
        variable,
    )
}

/// An optional variable read with `parse`, or `default` when unset.
pub fn parsed<T>(
    var: impl Fn(&str) -> Option<String>,
    variable: &'static str,
    default: T,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, SettingsError> {
    match var(variable) {
        None => Ok(default),
        Some(text) => parse(text.trim()).map_err(|reason| SettingsError {
            variable,
            reason: format!("{reason}, got {text:?}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_can_never_collide() {
        for ok in ["", "payments#", "test-1f2e.v2:a_b#"] {
            assert_eq!(StoreConfig::check_prefix(ok), Ok(()), "{ok}");
        }
        // "p#" + "v2#x" and "p#v2#" + "x" would be the same item.
        for bad in [
            "p#v2#",
            "payments",
            "#",
            "a b#",
            "p##",
            &format!("{}#", "x".repeat(65)),
        ] {
            assert!(StoreConfig::check_prefix(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_item_is_its_scopes_own_or_everyones_without_one() {
        let scoped = StoreConfig {
            scope: Some("payments-a".into()),
            ..StoreConfig::new("t")
        };
        assert!(scoped.owns(Some("payments-a")));
        assert!(scoped.owns(None), "an item from before scopes stays usable");
        assert!(!scoped.owns(Some("payments-b")));
        let unscoped = StoreConfig::new("t");
        assert!(unscoped.owns(None));
        assert!(!unscoped.owns(Some("payments-a")));
        for ok in [
            "payments-a",
            "arn:aws:lambda:eu-west-1:1:function:f",
            "a.b_c",
        ] {
            assert_eq!(StoreConfig::check_scope(ok), Ok(()), "{ok}");
        }
        for bad in ["", "a b", "a/b", &"x".repeat(141)] {
            assert!(StoreConfig::check_scope(bad).is_err(), "{bad}");
        }
    }
}
