//! Keeping a lease while the business logic runs: a heartbeat renews it every
//! third of the lock timeout, never past the invocation's deadline (plus
//! [`super::deadline::LEASE_GRACE`]).

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use crate::clock::duration_ms;
use crate::store::{Lease, Store, StoreError};

use super::deadline::Deadline;

/// How a piece of work run under a lease ended.
pub enum Held<T> {
    /// It finished; `lease` is the lease as last renewed.
    Finished { value: T, lease: Lease },
    /// The lease was lost (taken over, or not renewed in time): the work was
    /// stopped and must not be recorded.
    LockLost,
    /// The invocation's deadline came near; the work was stopped.
    Cut { lease: Lease },
}

/// Runs `work` while renewing `lease`; log lines name the message by its
/// `origin`, never by its key.
pub async fn hold<T, S: Store>(
    store: &S,
    lease: Lease,
    deadline: Deadline,
    work: impl Future<Output = T>,
    origin: &str,
) -> Held<T> {
    let lock_timeout = store.config().lock_timeout;
    let current = Mutex::new(lease);
    let latest = || current.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let heartbeat = async {
        let every = (lock_timeout / 3).max(Duration::from_millis(10));
        loop {
            tokio::time::sleep(every).await;
            let now = store.now_ms();
            let lease = latest();
            if lease.lock_expires_at_ms <= now {
                tracing::warn!(origin, "lease ran out before it could be renewed");
                return;
            }
            let wanted = now + duration_ms(lock_timeout);
            let until = deadline
                .lease_cap_ms()
                .map_or(wanted, |cap| wanted.min(cap));
            if until <= lease.lock_expires_at_ms {
                continue; // capped by the deadline: nothing to gain
            }
            match store.extend(&lease, until).await {
                Ok(renewed) => *current.lock().unwrap_or_else(|p| p.into_inner()) = renewed,
                Err(StoreError::LockLost { .. }) => return,
                // Try again at the next beat, while the lease still holds.
                Err(err) => tracing::warn!(origin, error = %err, "lease renewal failed"),
            }
        }
    };
    let cut = deadline.cut();
    tokio::select! {
        value = work => Held::Finished { value, lease: latest() },
        () = heartbeat => Held::LockLost,
        () = cut => Held::Cut { lease: latest() },
    }
}
