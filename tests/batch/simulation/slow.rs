//! The demo ledger, sometimes slower than the lock: before its effect (the
//! heartbeat must keep the lease) or after it (widening the window between
//! effect and completion in direct mode).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::TransactWriteItem;
use exactly_once::engine::{CommitPath, Completion, FencingToken, HandlerError, RecordHandler};
use exactly_once::lambda::Record;
use ledger::LedgerHandler;

pub struct SlowLedger {
    pub ledger: LedgerHandler,
    pub slowness: Arc<Slowness>,
}

/// How often and how long calls are slow; shared by a schedule's containers.
pub struct Slowness {
    /// Probability that a call is slow.
    pub probability: f64,
    pub lock_timeout: Duration,
    pub rng: Mutex<fastrand::Rng>,
    /// Slow calls so far.
    pub slowed: AtomicU64,
}

impl Slowness {
    /// A pause longer than the lock, and whether it comes after the effect.
    fn pause(&self) -> Option<(Duration, bool)> {
        if self.probability == 0.0 {
            return None;
        }
        let mut rng = self
            .rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if rng.f64() >= self.probability {
            return None;
        }
        self.slowed.fetch_add(1, Ordering::Relaxed);
        let stretch = 1.1 + rng.f64() * 0.5;
        Some((self.lock_timeout.mul_f64(stretch), rng.bool()))
    }
}

impl RecordHandler<TransactWriteItem> for SlowLedger {
    type Record = Record;

    /// The ledger's own path: a wrapper that answered anything else would
    /// run every lock-free schedule on the locking path.
    fn commit_path(&self) -> CommitPath {
        self.ledger.commit_path()
    }

    async fn handle(
        &self,
        token: &FencingToken,
        record: &Record,
    ) -> Result<Completion<TransactWriteItem>, HandlerError> {
        let pause = self.slowness.pause();
        if let Some((pause, false)) = pause {
            tokio::time::sleep(pause).await;
        }
        let completion = self.ledger.handle(token, record).await;
        if let Some((pause, true)) = pause {
            tokio::time::sleep(pause).await;
        }
        completion
    }
}
