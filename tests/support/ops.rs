//! Runs the real `exactly-once-ops` binary on a store, and the claims its
//! tests set up.

use std::process::Command;

use exactly_once::config::StoreConfig;
use exactly_once::store::ClaimOutcome;
use exactly_once::store::ClaimRequest;
use exactly_once::store::Lease;
use exactly_once::store::Store;

/// What a run printed and its exit code.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Whether stdout says `phrase`.
    pub fn has(&self, phrase: &str) -> bool {
        self.stdout.contains(phrase)
    }
}

/// `exactly-once-ops args` with `IDEMPOTENCY_STORE=store` on `config`'s
/// table and key prefix.
pub fn ops(store: &str, config: &StoreConfig, args: &[&str]) -> Run {
    let output = Command::new(super::binary("exactly-once-ops"))
        .args(args)
        .args(["--table", &config.table_name])
        .args(["--key-prefix", &config.key_prefix])
        .env("IDEMPOTENCY_STORE", store)
        .env_remove("LEDGER_TABLE")
        .output()
        .expect("run exactly-once-ops");
    Run {
        code: output.status.code().expect("an exit code"),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A new claim of `key` (it must be free).
pub async fn acquire<S: Store>(store: &S, key: &str) -> Lease {
    let request = ClaimRequest {
        key,
        payload_hash: "hash-1",
        origin: Some("payments-0@15"),
        lease_cap_ms: None,
        owner: None,
    };
    match store.claim(request).await.expect("claim") {
        ClaimOutcome::Acquired(lease) => lease,
        other => panic!("expected to acquire {key}, got {other:?}"),
    }
}
