//! How many records may be in transactions in flight at once, in one
//! container: a congestion window over the records of every transaction
//! group (lock-free, and the locking path's completions), learned from the
//! same answers as their size ([`super::sizing`]).
//!
//! Why: the size of a group says how many records share a round trip, not
//! how many the store is asked to write at once. A warm container whose
//! groups grew to 99 on one partition, then handed a batch of 200 lanes
//! (`key` order), would send 64 groups (`MAX_IN_FLIGHT`) at once, thousands
//! of records, before any answer could say the store queues them: on
//! DynamoDB Local they waited past the SDK's attempt timeout and failed the
//! batch closed (10,000 records in `key` order: 250 to 7,650 reported).
//!
//! The rule is TCP's congestion window, in records:
//! - a group is sent when the records in flight and its own fit in the
//!   window, or when nothing is in flight (a group bigger than the window
//!   goes alone);
//! - it starts at [`WINDOW_GROUPS`] full groups (of the most records a
//!   group may hold) and grows to at most `MAX_IN_FLIGHT` of them;
//! - only a group that had to wait says a bigger window would do: while
//!   the store has not pushed back, its quick answer adds its records (the
//!   window doubles per round of answers), after that one group per round;
//! - a slow answer (half the store's request timeout,
//!   [`super::sizing::slow_answer`]) takes a quarter off, an
//!   overload halves it, as for the groups' size; never below one full
//!   group nor `MAX_IN_FLIGHT` records (groups that shrank to one record
//!   still go `MAX_IN_FLIGHT` at once, as before there was a window: a
//!   store slow on every answer keeps that much).
//!
//! Where and when a record is sent changes no record's outcome.

use std::ops::RangeInclusive;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;

use super::sizing::{Aimd, Answer, Resized};

/// A new container's window: this many full groups in flight at once (a
/// batch of four partitions, each lane's group side by side), whatever
/// size the groups start at.
pub const WINDOW_GROUPS: usize = 4;

struct State {
    /// Records in transactions sent and not yet answered.
    in_flight: usize,
    /// The window.
    size: Aimd,
}

/// Records in flight, from the answers of the store.
pub struct Window {
    state: Mutex<State>,
    /// Told when records leave the window.
    released: Notify,
    /// An answer after this long is slow (`None`: latency is no signal).
    slow: Option<Duration>,
}

impl Window {
    /// A window of transaction groups' records from `start` records, within
    /// `bounds`: an answer after `slow` ([`super::sizing::slow_answer`]) is
    /// slow.
    pub fn new(start: usize, bounds: RangeInclusive<usize>, slow: Duration) -> Self {
        Self::with(start, bounds, Some(slow))
    }

    /// A window of the records of batched claims and fenced writes (the
    /// locking path's), within `bounds`: only an overload shrinks it, since
    /// such a batch holds no lock across its items and a slower answer says
    /// nothing fewer of them at once would improve (as for their size,
    /// `sizing.rs`).
    pub fn batches(start: usize, bounds: RangeInclusive<usize>) -> Self {
        Self::with(start, bounds, None)
    }

    fn with(start: usize, bounds: RangeInclusive<usize>, slow: Option<Duration>) -> Self {
        Self {
            state: Mutex::new(State {
                in_flight: 0,
                size: Aimd::new(start, bounds),
            }),
            released: Notify::new(),
            slow,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records that may be in flight now.
    pub fn limit(&self) -> usize {
        self.lock().size.limit()
    }

    /// Waits until a group of `records` fits in the window (or nothing is in
    /// flight); it stays in the window until the returned guard is dropped.
    pub async fn admit(&self, records: usize) -> Admitted<'_> {
        let mut waited = false;
        loop {
            // Registered before the check, so a release in between wakes it.
            let released = self.released.notified();
            {
                let mut state = self.lock();
                if state.in_flight == 0 || state.in_flight + records <= state.size.limit() {
                    state.in_flight += records;
                    return Admitted {
                        window: self,
                        records,
                        waited,
                    };
                }
            }
            waited = true;
            released.await;
        }
    }

    /// Every change of [`Self::limit`] so far, the first being the start.
    pub fn history(&self) -> Vec<Resized> {
        self.lock().size.history()
    }

    fn learn(&self, records: usize, waited: bool, elapsed: Duration, answer: Answer) {
        let records = records as f64;
        let slow = self.slow.is_some_and(|slow| elapsed >= slow);
        // Only a group the window held back says a bigger one would do.
        self.lock().size.learn(answer, slow, |size, slow_start| {
            match (waited, slow_start) {
                (false, _) => 0.0,
                (true, true) => records,
                (true, false) => records * records / size,
            }
        });
    }
}

/// A group's records in the window, until dropped.
pub struct Admitted<'a> {
    window: &'a Window,
    records: usize,
    /// The window held it back.
    waited: bool,
}

impl Admitted<'_> {
    /// The group was answered after `elapsed`: the window learns from it
    /// (and lets its records go).
    pub fn answered(self, elapsed: Duration, answer: Answer) {
        self.window
            .learn(self.records, self.waited, elapsed, answer);
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.window.lock().in_flight -= self.records;
        self.window.released.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const QUICK: Duration = Duration::from_millis(20);
    const SLOW: Duration = Duration::from_millis(500);

    /// A group of `then` records, held back by one of `first` in flight
    /// until that one's answer (quick, served): the one held back.
    async fn held_back(window: &Window, first: usize, then: usize) -> Admitted<'_> {
        let first = window.admit(first).await;
        let mut held = Box::pin(window.admit(then));
        assert!(futures_util::poll!(held.as_mut()).is_pending());
        first.answered(QUICK, Answer::Served);
        let held = held.await;
        assert!(held.waited);
        held
    }

    #[tokio::test]
    async fn groups_wait_for_room_and_a_big_one_goes_alone() {
        let window = Window::new(100, 1..=1_000, SLOW);
        let first = window.admit(60).await;
        let second = window.admit(40).await;
        // Full: the next waits until records leave.
        let mut third = Box::pin(window.admit(10));
        assert!(futures_util::poll!(third.as_mut()).is_pending());
        drop(second);
        drop((first, third.await));
        // Bigger than the window: alone, when nothing is in flight.
        let big = window.admit(250).await;
        assert!(!big.waited);
        let mut next = Box::pin(window.admit(1));
        assert!(futures_util::poll!(next.as_mut()).is_pending());
        drop(big);
        assert_eq!(next.await.records, 1);
    }

    #[tokio::test]
    async fn it_grows_only_when_it_held_a_group_back() {
        let window = Window::new(100, 1..=1_000, SLOW);
        // Not held back: a quick answer changes nothing.
        window.admit(50).await.answered(QUICK, Answer::Served);
        assert_eq!(window.limit(), 100);
        // Held back (slow start): its records more.
        held_back(&window, 80, 50)
            .await
            .answered(QUICK, Answer::Served);
        assert_eq!(window.limit(), 150);
        // Slow: a quarter off, and the slow start is over; overloaded: half.
        window.admit(10).await.answered(SLOW, Answer::Served);
        assert_eq!(window.limit(), 112);
        window.admit(10).await.answered(QUICK, Answer::Overloaded);
        assert_eq!(window.limit(), 56);
        // After the slow start: a group's share per answer (50 x 50 / 56).
        held_back(&window, 50, 50)
            .await
            .answered(QUICK, Answer::Served);
        assert_eq!(window.limit(), 100);
    }

    #[tokio::test]
    async fn it_stays_within_its_bounds() {
        let window = Window::new(0, 2..=60, SLOW);
        assert_eq!(window.limit(), 2);
        for _ in 0..3 {
            held_back(&window, 40, 40)
                .await
                .answered(QUICK, Answer::Served);
        }
        assert_eq!(window.limit(), 60);
        for _ in 0..10 {
            window.admit(1).await.answered(QUICK, Answer::Overloaded);
        }
        assert_eq!(window.limit(), 2);
        let sizes: Vec<usize> = window.history().iter().map(|r| r.size).collect();
        assert_eq!(&sizes[..4], [2, 42, 60, 30]);
    }
}
