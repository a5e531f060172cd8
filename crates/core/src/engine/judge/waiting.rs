//! Waiting for another worker's live lease on a key, bounded.
//!
//! A message whose key another worker holds is not reported at once: that
//! worker may have crashed (its lease then ends within one lock timeout of
//! its last renewal, and the key is taken over here), or may finish soon
//! (the message is then a duplicate). So the message waits, holding
//! nothing (its lane gave back what it claimed ahead, see `lane.rs`), and
//! looks again:
//! - soon at first, then twice as late each time, never later than the
//!   lease's end as last seen, nor than a quarter of the lock timeout
//!   ([`MAX_LOOK`] at most): a holder that finishes is noticed quickly;
//! - for at most one lock timeout in all (or until the lease first seen
//!   ends, if later): a crashed holder's lease has ended by then. A holder
//!   still renewing its lease after that is alive and working on the key:
//!   the message is reported in progress, and its redelivery finds the
//!   key finished (a duplicate) or free;
//! - only while the message could still start when it looks again (its
//!   invocation's deadline less the safety margin): under a lease no
//!   longer than one lock timeout (a live holder of the same function,
//!   renewing it as it works, which may finish any moment), up to that
//!   cut whenever the lease ends; under a longer lease (another
//!   configuration, an operator's hold), only if the lease ends before the
//!   cut. Otherwise, and with no known deadline, it is reported at once.
//!
//! A 30 s lease in a 30 s invocation is the first kind. When only a lease
//! ending before the cut was waited for, it was reported at once: every
//! key another container was about to finish came back, and four
//! containers on one batch needed 6 to 9 redeliveries to settle.

use std::time::Duration;

use crate::clock::now_ms;
use crate::store::StoredItem;

use crate::engine::deadline::Deadline;

/// The first look again comes this soon.
const FIRST_LOOK: Duration = Duration::from_millis(10);
/// Looks again come at least this often.
pub const MAX_LOOK: Duration = Duration::from_millis(500);
/// How far past one lock timeout from now a live holder's lease may end:
/// its clock ahead of ours (docs/guarantees.md assumes 400 ms at most).
const CLOCK_SLACK_MS: u64 = 1_000;

/// One message's wait for the live leases it finds on its key.
#[derive(Debug, Default)]
pub(in crate::engine) struct LeaseWait {
    /// When the wait gives up (store clock, epoch ms), from the first look.
    until_ms: Option<u64>,
    /// Looks so far.
    looks: u32,
}

impl LeaseWait {
    /// How long to wait before looking again at a key found STARTED under
    /// another worker's live lease (`item`), at `store_now_ms` (the
    /// store's clock, which the lease's end is in), with leases of
    /// `lock_timeout`; `None`: do not wait, the key is reported in progress.
    pub fn next(
        &mut self,
        item: &StoredItem,
        store_now_ms: u64,
        lock_timeout: Duration,
        deadline: Deadline,
    ) -> Option<Duration> {
        // Just past the lease's end: the takeover condition is strict.
        let lease_end = item.lock_expires_at_ms?.saturating_add(1);
        let lock_ms = crate::clock::duration_ms(lock_timeout);
        let now = store_now_ms;
        let until = *self
            .until_ms
            .get_or_insert(lease_end.max(now.saturating_add(lock_ms)));
        if now >= until {
            return None;
        }
        let cap = MAX_LOOK.min(lock_timeout / 4).max(FIRST_LOOK);
        let step = FIRST_LOOK.saturating_mul(1 << self.looks.min(16)).min(cap);
        self.looks += 1;
        // A little spread, so that waiting takers do not all come at once.
        let spread = now % 20;
        let wake = lease_end
            .min(now.saturating_add(crate::clock::duration_ms(step)))
            .min(until)
            .saturating_add(spread);
        let delay = wake.saturating_sub(now);
        // The deadline is on the process's clock, the lease on the store's.
        let local_now = now_ms();
        // A live holder of the same function: it may finish before the
        // message looks again, as long as the message could start then.
        let holder_like_us = lease_end <= now.saturating_add(lock_ms + CLOCK_SLACK_MS);
        // Any holder: once the lease ends the key is taken over, if the
        // message could start then.
        let left = lease_end.saturating_sub(now).saturating_add(spread);
        let worth_it = (holder_like_us && deadline.may_start_at(local_now.saturating_add(delay)))
            || deadline.may_start_at(local_now.saturating_add(left));
        worth_it.then(|| Duration::from_millis(delay))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Status;

    const LOCK: Duration = Duration::from_secs(2);

    fn held_until(lock_expires_at_ms: u64) -> StoredItem {
        StoredItem {
            pk: "k".into(),
            status: Status::Started,
            version: 1,
            owner: "them".into(),
            payload_hash: "h".into(),
            lock_expires_at_ms: Some(lock_expires_at_ms),
            expires_at_s: u64::MAX / 1000,
            created_at_ms: None,
            updated_at_ms: None,
            attempts: None,
            origin: None,
            result: None,
            outbox: None,
            error: None,
            last_error: None,
            scope: None,
        }
    }

    fn far() -> Deadline {
        Deadline::new(now_ms() + 600_000, Duration::from_secs(5))
    }

    #[test]
    fn looks_come_soon_then_twice_as_late_within_the_lease() {
        let mut wait = LeaseWait::default();
        let now = now_ms();
        let item = held_until(now + 1_500);
        let waits: Vec<u64> = (0..8)
            .map(|_| {
                wait.next(&item, now, LOCK, far())
                    .expect("waits")
                    .as_millis() as u64
            })
            .collect();
        let spread = now % 20;
        let expected: Vec<u64> = [10, 20, 40, 80, 160, 320, 500, 500]
            .iter()
            .map(|ms| ms + spread)
            .collect();
        assert_eq!(waits, expected);
        // Never past the lease's end.
        let item = held_until(now + 5);
        assert_eq!(
            LeaseWait::default().next(&item, now, LOCK, far()),
            Some(Duration::from_millis(6 + spread))
        );
    }

    #[test]
    fn a_holder_renewing_for_a_whole_lock_timeout_is_reported() {
        let mut wait = LeaseWait::default();
        let start = now_ms();
        assert!(
            wait.next(&held_until(start + 1_000), start, LOCK, far())
                .is_some()
        );
        // Renewed again and again: still waited for within the lock timeout.
        let later = start + 1_900;
        assert!(
            wait.next(&held_until(later + 2_000), later, LOCK, far())
                .is_some()
        );
        let after = start + 2_000;
        assert_eq!(
            wait.next(&held_until(after + 2_000), after, LOCK, far()),
            None
        );
    }

    #[test]
    fn a_live_holders_lease_is_looked_at_until_the_message_could_no_longer_start() {
        // A 30 s lease in an invocation with 30 s left (the defaults): the
        // lease outlives the cut, yet its holder may finish any moment.
        let lock = Duration::from_secs(30);
        let now = now_ms();
        let deadline = Deadline::new(now + 30_000, Duration::from_secs(5));
        let mut wait = LeaseWait::default();
        assert!(
            wait.next(&held_until(now + 30_000), now, lock, deadline)
                .is_some()
        );
        // Renewed 20 s later: still looked at, the message could start.
        let later = now + 20_000;
        let late = Deadline::new(now_ms() + 10_000, Duration::from_secs(5));
        assert!(
            wait.next(&held_until(later + 30_000), later, lock, late)
                .is_some()
        );
        // Past the cut: reported.
        let past = Deadline::new(now_ms() + 4_000, Duration::from_secs(5));
        assert_eq!(
            wait.next(&held_until(later + 30_000), later, lock, past),
            None
        );
    }

    #[test]
    fn a_longer_lease_that_outlives_the_invocation_is_reported_at_once() {
        let now = now_ms();
        let soon = Deadline::new(now + 3_000, Duration::from_secs(1));
        let mut wait = LeaseWait::default();
        // 4.5 s: longer than this function's 2 s leases (another
        // configuration, an operator's hold), ending past the cut.
        assert_eq!(wait.next(&held_until(now + 4_500), now, LOCK, soon), None);
        // One that ends before the cut is waited out.
        assert!(
            LeaseWait::default()
                .next(&held_until(now + 1_000), now, LOCK, soon)
                .is_some()
        );
        // Without a known deadline nothing is worth waiting for.
        let mut wait = LeaseWait::default();
        assert_eq!(
            wait.next(&held_until(now + 100), now, LOCK, Deadline::NONE),
            None
        );
    }
}
