//! Keeping leases while their messages wait and run. A batch's leases (its
//! claims made ahead, the work running, the completions on their way) are
//! held in ONE registry; its heartbeat renews, every third of the lock
//! timeout, every lease more than a third through, in batches of fenced
//! writes ([`Store::write_fenced`]) sized from the store's answers as the
//! batch's other fenced writes are, but sent at once: never behind the
//! work they keep alive (which holds the in-flight permits) nor behind
//! requests being sent again; never past the invocation's deadline (plus
//! [`super::deadline::LEASE_GRACE`]). A lease the store refuses to renew
//! (taken over) is lost: the work running under it is stopped and never
//! recorded.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::clock::duration_ms;
use crate::store::{FencedWrite, Lease, Store, StoreError};

use super::deadline::Deadline;
use super::sizing::{Answer, Sizer};

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

#[derive(Default)]
struct State {
    /// By `pk`: the leases held, as last renewed.
    held: HashMap<String, Lease>,
    /// The `pk`s whose lease was lost while held.
    lost: HashSet<String>,
}

/// The leases a batch holds.
pub struct Leases {
    state: Mutex<State>,
    /// Says that a lease was lost.
    changed: watch::Sender<u64>,
}

impl Default for Leases {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            changed: watch::channel(0).0,
        }
    }
}

impl Leases {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Holds `lease` until [`Self::release`]: the heartbeat renews it.
    pub fn hold(&self, lease: &Lease) {
        let mut state = self.lock();
        state.lost.remove(&lease.pk);
        state.held.insert(lease.pk.clone(), lease.clone());
    }

    /// `lease` as last renewed (itself if it is not held).
    pub fn latest(&self, lease: &Lease) -> Lease {
        self.lock()
            .held
            .get(&lease.pk)
            .cloned()
            .unwrap_or_else(|| lease.clone())
    }

    /// Stops renewing `lease`: its item was written for the last time
    /// (completed, failed, released) or the lease is given up. Only that
    /// lease (its version and owner): a newer one held for the key since
    /// (the key given back, taken over, claimed again) stays held.
    pub fn release(&self, lease: &Lease) {
        let mut state = self.lock();
        if state
            .held
            .get(&lease.pk)
            .is_some_and(|held| same(held, lease))
        {
            state.held.remove(&lease.pk);
            state.lost.remove(&lease.pk);
        }
    }

    /// Resolves once the lease of `pk` is lost.
    pub async fn lost(&self, pk: &str) {
        let mut changed = self.changed.subscribe();
        loop {
            if self.lock().lost.contains(pk) {
                return;
            }
            if changed.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// `lease` is lost, if it is still the one held for its key (not a
    /// newer one: a claim given back and taken over, then claimed again,
    /// while a renewal of the old one was on its way).
    fn mark_lost(&self, lease: &Lease) {
        let mut state = self.lock();
        if state
            .held
            .get(&lease.pk)
            .is_some_and(|held| same(held, lease))
        {
            state.held.remove(&lease.pk);
            state.lost.insert(lease.pk.clone());
            drop(state);
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// The heartbeat: renews the leases held, for ever (the caller stops it
    /// with its batch), in lots `sizer` sizes (and learns from). Renewals
    /// take no permit and wait in no window or queue: a lease must never
    /// wait for its renewal behind the work it keeps alive, nor behind
    /// requests being sent again.
    pub async fn beat<S: Store>(&self, store: &S, sizer: &Sizer, deadline: Deadline) {
        let lock_timeout = store.config().lock_timeout;
        let every = (lock_timeout / 3).max(Duration::from_millis(10));
        loop {
            tokio::time::sleep(every).await;
            self.renew(store, sizer, deadline, duration_ms(lock_timeout))
                .await;
        }
    }

    /// One beat: every lease held more than a third through its lock
    /// timeout extends to a full one (capped by the deadline).
    async fn renew<S: Store>(
        &self,
        store: &S,
        sizer: &Sizer,
        deadline: Deadline,
        lock_timeout_ms: u64,
    ) {
        let now = store.now_ms();
        let wanted = now + lock_timeout_ms;
        let until = deadline
            .lease_cap_ms()
            .map_or(wanted, |cap| wanted.min(cap));
        let due: Vec<Lease> = self
            .lock()
            .held
            .values()
            .filter(|lease| lease.lock_expires_at_ms < now + lock_timeout_ms * 2 / 3)
            .cloned()
            .collect();
        let mut writes = Vec::new();
        for lease in due {
            if lease.lock_expires_at_ms <= now {
                tracing::warn!(
                    version = lease.version,
                    "lease ran out before it could be renewed"
                );
                self.mark_lost(&lease);
            } else if until > lease.lock_expires_at_ms {
                // Capped by the deadline otherwise: nothing to gain.
                writes.push((lease, FencedWrite::Extend { until_ms: until }));
            }
        }
        let size = sizer.limit().min(S::MAX_BATCH).max(1);
        let lots = writes.chunks(size).map(|lot| async move {
            let sent = Instant::now();
            let answers = store.write_fenced(lot).await;
            let overloaded = answers
                .iter()
                .any(|answer| answer.as_ref().is_err_and(StoreError::is_retryable));
            let answer = match overloaded {
                true => Answer::Overloaded,
                false => Answer::Served,
            };
            sizer.observe(lot.len(), sent.elapsed(), answer);
            answers
        });
        let answers = futures_util::future::join_all(lots).await;
        for ((lease, _), answer) in writes.iter().zip(answers.into_iter().flatten()) {
            match answer {
                Ok(until_ms) => {
                    if let Some(held) = self.lock().held.get_mut(&lease.pk)
                        && same(held, lease)
                    {
                        held.lock_expires_at_ms = until_ms;
                    }
                }
                Err(StoreError::LockLost { .. }) => self.mark_lost(lease),
                // Tried again at the next beat, while the lease still holds.
                Err(err) => tracing::warn!(error = %err, "lease renewal failed"),
            }
        }
    }
}

/// Whether `held` is `lease` (its version and owner), however renewed.
fn same(held: &Lease, lease: &Lease) -> bool {
    (held.version, &held.owner) == (lease.version, &lease.owner)
}

/// Runs `work` under `lease`, held in `leases` (whose heartbeat renews it),
/// until it finishes, the lease is lost, or the deadline cuts it.
pub async fn hold<T>(
    leases: &Leases,
    lease: &Lease,
    deadline: Deadline,
    work: impl Future<Output = T>,
) -> Held<T> {
    tokio::select! {
        value = work => Held::Finished { value, lease: leases.latest(lease) },
        () = leases.lost(&lease.pk) => Held::LockLost,
        () = deadline.cut() => Held::Cut { lease: leases.latest(lease) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(version: u64, owner: &str) -> Lease {
        Lease {
            pk: "k".into(),
            version,
            owner: owner.into(),
            lock_expires_at_ms: u64::MAX,
        }
    }

    #[tokio::test]
    async fn a_renewal_refused_for_an_older_lease_leaves_the_newer_one_held() {
        let leases = Leases::default();
        // Given back at version 1, taken over elsewhere, claimed again here
        // at version 3; the renewal of version 1 was still on its way.
        leases.hold(&lease(3, "again"));
        leases.mark_lost(&lease(1, "first"));
        assert_eq!(leases.latest(&lease(3, "again")).version, 3);
        let lost = leases.lost("k");
        assert!(futures_util::poll!(Box::pin(lost)).is_pending());
        // Its own renewal refused: lost.
        leases.mark_lost(&lease(3, "again"));
        leases.lost("k").await;
    }
}
