//! Time limits of one batch, from the invocation's deadline, and the batch's
//! stop switch (deadline near, or the store gone).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::clock::{duration_ms, now_ms};

/// How far past the invocation's deadline a lease may reach: Lambda ends the
/// invocation at the deadline, so a longer lease would only delay takeover.
pub const LEASE_GRACE: Duration = Duration::from_secs(1);

/// 2001-09-09 in epoch ms: any real deadline is later.
const EARLIEST_PLAUSIBLE_MS: u64 = 1_000_000_000_000;

/// When to stop starting work, when to cut running work, how long a lease may
/// reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    /// Epoch ms the invocation ends; `None` when unknown (no limit).
    at_ms: Option<u64>,
    margin_ms: u64,
}

impl Deadline {
    /// No deadline: work is never cut.
    pub const NONE: Self = Self {
        at_ms: None,
        margin_ms: 0,
    };

    /// The invocation ends at `at_ms` (epoch ms). No record starts within
    /// `margin` of it; running work is cut at half the margin, leaving the
    /// other half for its last DynamoDB write.
    ///
    /// A value that is not a time since 2001 counts as unknown (no limit):
    /// emulators send 0 or a fixed duration (cargo lambda watch: 600000).
    pub fn new(at_ms: u64, margin: Duration) -> Self {
        let known = at_ms >= EARLIEST_PLAUSIBLE_MS;
        if !known {
            tracing::debug!(
                at_ms,
                "the invocation's deadline is not an epoch time: no deadline"
            );
        }
        Self {
            at_ms: known.then_some(at_ms),
            margin_ms: duration_ms(margin),
        }
    }

    /// Whether a new record may start now.
    pub fn may_start(&self) -> bool {
        self.at_ms.is_none_or(|at| now_ms() + self.margin_ms < at)
    }

    /// Whether a record could still start at `at_ms` (epoch ms). Only with a
    /// known deadline: without one nothing is worth waiting for.
    pub fn may_start_at(&self, at_ms: u64) -> bool {
        self.at_ms
            .is_some_and(|at| at_ms.saturating_add(self.margin_ms) < at)
    }

    /// Epoch ms at which running work is cut.
    pub fn cut_at_ms(&self) -> Option<u64> {
        self.at_ms.map(|at| at.saturating_sub(self.margin_ms / 2))
    }

    /// Completes when running work must be cut; never without a deadline.
    pub async fn cut(&self) {
        match self.cut_at_ms() {
            Some(at) => {
                tokio::time::sleep(Duration::from_millis(at.saturating_sub(now_ms()))).await;
            }
            None => std::future::pending().await,
        }
    }

    /// The latest a lease may end.
    pub fn lease_cap_ms(&self) -> Option<u64> {
        self.at_ms.map(|at| at + duration_ms(LEASE_GRACE))
    }
}

/// Why a lane stopped starting records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// An earlier record of the lane did not finish (order is kept).
    EarlierRecordUnfinished,
    /// The invocation's deadline is within the safety margin.
    DeadlineNear,
    /// DynamoDB failed for another record of the batch: fail closed.
    StoreUnavailable,
}

impl StopReason {
    /// The reason as a log detail.
    pub fn text(self) -> &'static str {
        match self {
            Self::EarlierRecordUnfinished => "an earlier record of its partition did not finish",
            Self::DeadlineNear => "the invocation's deadline is within the safety margin",
            Self::StoreUnavailable => "the store is unavailable: failing closed",
        }
    }
}

/// Shared by the lanes of one batch.
#[derive(Debug)]
pub struct BatchGuard {
    deadline: Deadline,
    store_down: AtomicBool,
}

impl BatchGuard {
    pub fn new(deadline: Deadline) -> Self {
        Self {
            deadline,
            store_down: AtomicBool::new(false),
        }
    }

    pub fn deadline(&self) -> Deadline {
        self.deadline
    }

    /// Why no new record may start now, if so.
    pub fn stop_reason(&self) -> Option<StopReason> {
        if self.store_down.load(Ordering::Relaxed) {
            Some(StopReason::StoreUnavailable)
        } else if !self.deadline.may_start() {
            Some(StopReason::DeadlineNear)
        } else {
            None
        }
    }

    /// DynamoDB failed: no record of this batch starts any more.
    pub fn store_failed(&self) {
        self.store_down.store(true, Ordering::Relaxed);
    }

    pub fn is_store_down(&self) -> bool {
        self.store_down.load(Ordering::Relaxed)
    }
}
