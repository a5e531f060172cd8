//! How fast the engine sends, learned from the store's answers. For each
//! kind of request that carries many records, a [`Pace`]: how many records
//! one request holds (its sizer, `sizing.rs`) and how many may be in flight
//! at once (its window, `window.rs`); above both, the container's bound on
//! requests in flight. One value the engine owns and every batch shares:
//! what one batch learns, the next starts from.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit};

use super::EngineConfig;
use super::sizing::{Answer, Sizer, slow_answer};
use super::window::{WINDOW_GROUPS, Window};
use crate::store::Store;

/// The engine's pacing: the bound on requests in flight and the pace of
/// each kind of request.
pub(super) struct Pacing {
    /// At most [`EngineConfig::max_in_flight`] requests (claims, pieces of
    /// work, commits) at once across the container's batches.
    permits: Semaphore,
    /// Transaction groups: lock-free commits, and completions with an
    /// effect in the store.
    pub groups: Pace,
    /// Batched claims and fenced writes (direct completions, failures,
    /// releases), and the heartbeat's renewals, in lots of its size.
    pub batches: Pace,
}

impl Pacing {
    /// The pacing of an engine over `S` with `config`, whose store answers
    /// within `request_timeout`.
    pub fn new<S: Store>(config: &EngineConfig, request_timeout: Duration) -> Self {
        let group_cap = config.max_records_per_transaction.min(S::MAX_EFFECTS);
        let max_in_flight = config.max_in_flight.max(1);
        let slow = slow_answer(request_timeout);
        Self {
            permits: Semaphore::new(max_in_flight),
            groups: Pace {
                sizer: Sizer::groups(S::START_SIZE, group_cap, slow),
                // Never below one full group nor MAX_IN_FLIGHT records:
                // groups shrunk to one record still go MAX_IN_FLIGHT at once.
                window: Window::new(
                    WINDOW_GROUPS * group_cap,
                    group_cap.max(max_in_flight)..=max_in_flight * group_cap,
                    slow,
                ),
            },
            batches: Pace {
                sizer: Sizer::batches(S::START_SIZE, S::MAX_BATCH),
                // As for groups: a few full batches at first, at most
                // MAX_IN_FLIGHT of them, never below one.
                window: Window::batches(
                    WINDOW_GROUPS * S::MAX_BATCH,
                    S::MAX_BATCH..=max_in_flight * S::MAX_BATCH,
                ),
            },
        }
    }

    /// A request's turn: waits for a free one of the
    /// [`EngineConfig::max_in_flight`] (held until dropped; the semaphore is
    /// never closed).
    pub async fn permit(&self) -> Option<SemaphorePermit<'_>> {
        self.permits.acquire().await.ok()
    }

    /// Sends one request of `records` records at `pace`: once its window
    /// admits them and a permit is free (`request` is a future: nothing of
    /// it runs before its turn). What `answer` reads in its result teaches
    /// the sizer and the window.
    pub async fn send<T>(
        &self,
        pace: &Pace,
        records: usize,
        request: impl Future<Output = T>,
        answer: impl FnOnce(&T) -> Answer,
    ) -> T {
        let admitted = pace.window.admit(records).await;
        let _permit = self.permit().await;
        let sent = Instant::now();
        let result = request.await;
        let (elapsed, answer) = (sent.elapsed(), answer(&result));
        pace.sizer.observe(records, elapsed, answer);
        admitted.answered(elapsed, answer);
        result
    }
}

/// The pace of one kind of request.
pub(super) struct Pace {
    /// How many records one request may hold now.
    pub sizer: Sizer,
    /// How many records requests in flight may hold at once now.
    pub window: Window,
}
