//! How many records share one request, learned from what the store
//! answers: one sizer per engine (a container, on one store) for lock-free
//! and locking transaction groups, and one for batches of claims.
//!
//! The rule is TCP's: slow start, then additive-increase,
//! multiplicative-decrease (AIMD):
//! - a new container starts from the store's
//!   [`START_SIZE`](crate::store::Store::START_SIZE) (by default
//!   [`GROUP_START`](crate::store::GROUP_START)) and DOUBLES on every
//!   request answered quickly (under [`slow_answer`]) while the size limited
//!   it (it held as many records as allowed), until the store first pushes
//!   back: a new container's first batch should be about as fast as a warm
//!   one's;
//! - after the first pushback the size grows by one per such answer. Not
//!   faster: many lanes send at once, and a size that doubled on each of
//!   their answers would send a burst of the biggest requests before the
//!   first slow answer could say the store queues them;
//! - for transaction groups, a slow answer (at least [`slow_answer`]: half
//!   the store's request timeout) takes a quarter off; the store was
//!   queueing, and a larger transaction holds its
//!   locks (DynamoDB's items, PostgreSQL's rows, Redis's whole server while
//!   its script runs) longer. A batch of claims or fenced writes holds no
//!   lock across its items (each is written on its own): its latency says
//!   nothing a smaller batch would improve, so only an overload shrinks it;
//! - an overloaded store (a timeout, throttling, a transaction conflict or
//!   the store unreachable) halves it;
//! - a refusal of the records themselves (a key taken, a condition, a floor)
//!   says nothing of the store's load, and changes nothing.
//!
//! Why: a bigger request amortises a round trip over more records (one hot
//! account's 1,000 payments: 0.101 requests per record at 10, 0.013 at 99),
//! but under a heavy load big transactions queue inside the store past the
//! clients' timeouts (DynamoDB Local, 10,000 records in `key` order: 8,650
//! reported at a fixed 50). A request's latency is the earliest honest
//! signal of that queue, long before a timeout.
//!
//! The size stays within `[1, cap]`: for groups `cap` is
//! `MAX_RECORDS_PER_TRANSACTION` (default: the store's most, 99), what one
//! transaction may hold besides (DynamoDB's 100 actions and 4 MB) being the
//! footprint's to keep; for claims, the store's batch
//! ([`crate::store::Store::MAX_BATCH`]). Where records land changes no
//! record's outcome: a refused merged group splits as before, a claim
//! refused in a batch is settled alone.

use std::ops::RangeInclusive;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::{CommitOutcome, StoreError};

/// A transaction answered after this long, on a store that gives a
/// request up after `request_timeout`, is slow: the store is queueing,
/// half-way to giving requests up ([`crate::store::Store::request_timeout`];
/// 1.5 s with DynamoDB's default attempt timeout of 3 s). Latency below it
/// says nothing a smaller group would improve: a store far away, or under
/// strain but answering, is not shrunk to one record a round trip.
pub fn slow_answer(request_timeout: Duration) -> Duration {
    request_timeout / 2
}

/// What a transaction's answer says of the store's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Committed (or refused for its records' own sake): the store coped.
    Served,
    /// A timeout, throttling, a conflict, the store unreachable; or a commit
    /// the store had to send again for a conflict or throttling.
    Overloaded,
}

impl Answer {
    /// The signal in a lock-free commit's result.
    pub fn of(result: &Result<CommitOutcome, StoreError>) -> Self {
        match result {
            // Committed only after conflicts or throttling: contended.
            Ok(CommitOutcome::Committed { contended, .. }) if *contended > 0 => Self::Overloaded,
            Ok(_) => Self::Served,
            Err(err) if err.is_retryable() => Self::Overloaded,
            // Rejected, invalid: about the request, not the load.
            Err(_) => Self::Served,
        }
    }
}

/// A change of size, for the benchmark's chart and the tests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resized {
    /// When.
    pub at: Instant,
    /// The new size, in records.
    pub size: usize,
}

/// A size learned from a store's answers as TCP learns its window: the
/// rules the sizer and the window of records in flight share.
pub(super) struct Aimd {
    /// The size as a real number, so that a quarter off and one more add up.
    size: f64,
    /// The least and the most it may be.
    bounds: RangeInclusive<f64>,
    /// Still growing fast: the store has not pushed back yet.
    slow_start: bool,
    /// Every change (bounded).
    history: Vec<Resized>,
}

/// At most this many changes are kept.
const HISTORY: usize = 10_000;

impl Aimd {
    /// From `start`, within `bounds` (at least 1).
    pub fn new(start: usize, bounds: RangeInclusive<usize>) -> Self {
        let floor = (*bounds.start()).max(1);
        let cap = (*bounds.end()).max(floor);
        let size = start.clamp(floor, cap);
        Self {
            size: size as f64,
            bounds: floor as f64..=cap as f64,
            slow_start: true,
            history: vec![Resized {
                at: Instant::now(),
                size,
            }],
        }
    }

    /// The size now, in records.
    pub fn limit(&self) -> usize {
        self.size as usize
    }

    /// Learns from an answer: an overload halves the size, a `slow` one
    /// takes a quarter off (each ends the slow start); a quick one adds what
    /// `grow` says, given the size and whether the slow start goes on.
    pub fn learn(&mut self, answer: Answer, slow: bool, grow: impl FnOnce(f64, bool) -> f64) {
        let before = self.limit();
        match answer {
            Answer::Overloaded => self.back_off(0.5),
            Answer::Served if slow => self.back_off(0.75),
            Answer::Served => self.size += grow(self.size, self.slow_start),
        }
        self.size = self.size.clamp(*self.bounds.start(), *self.bounds.end());
        let after = self.limit();
        if after != before && self.history.len() < HISTORY {
            self.history.push(Resized {
                at: Instant::now(),
                size: after,
            });
        }
    }

    fn back_off(&mut self, factor: f64) {
        self.slow_start = false;
        self.size *= factor;
    }

    /// Every change of size so far, the first being the start.
    pub fn history(&self) -> Vec<Resized> {
        self.history.clone()
    }
}

/// Records per request, from the answers of the store.
pub struct Sizer {
    /// An answer after this long is slow (`None`: latency is no signal).
    slow: Option<Duration>,
    state: Mutex<Aimd>,
}

impl Sizer {
    /// A sizer of transaction groups within `[1, cap]`, from `start` (or
    /// `cap`, if smaller): an answer after `slow` ([`slow_answer`]) is slow.
    pub fn groups(start: usize, cap: usize, slow: Duration) -> Self {
        Self::new(start, cap, Some(slow))
    }

    /// A sizer of batches (claims, fenced writes) within `[1, cap]`, from
    /// `start`: only an overload shrinks it.
    pub fn batches(start: usize, cap: usize) -> Self {
        Self::new(start, cap, None)
    }

    fn new(start: usize, cap: usize, slow: Option<Duration>) -> Self {
        Self {
            slow,
            state: Mutex::new(Aimd::new(start, 1..=cap)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Aimd> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a request may hold now.
    pub fn limit(&self) -> usize {
        self.lock().limit()
    }

    /// Learns from a request of `records` answered after `elapsed`.
    pub fn observe(&self, records: usize, elapsed: Duration, answer: Answer) {
        let mut state = self.lock();
        // Only a request the size limited says a bigger one would do.
        let limited = records >= state.limit();
        let slow = self.slow.is_some_and(|slow| elapsed >= slow);
        state.learn(answer, slow, |size, slow_start| {
            match (limited, slow_start) {
                (false, _) => 0.0,
                (true, true) => size,
                (true, false) => 1.0,
            }
        });
    }

    /// Every change of size so far, the first being the start.
    pub fn history(&self) -> Vec<Resized> {
        self.lock().history()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::GROUP_START;

    const QUICK: Duration = Duration::from_millis(20);
    const SLOW: Duration = Duration::from_millis(500);

    #[test]
    fn it_doubles_until_the_store_pushes_back_then_grows_by_one() {
        let sizer = Sizer::groups(GROUP_START, 99, SLOW);
        assert_eq!(sizer.limit(), 25);
        // Slow start: twice the size per full request answered quickly.
        sizer.observe(25, QUICK, Answer::Served);
        assert_eq!(sizer.limit(), 50);
        // A request below the size says nothing.
        sizer.observe(3, QUICK, Answer::Served);
        assert_eq!(sizer.limit(), 50);
        sizer.observe(50, QUICK, Answer::Served);
        assert_eq!(sizer.limit(), 99, "capped");
        // Slow: a quarter off, and the slow start is over.
        sizer.observe(99, SLOW, Answer::Served);
        assert_eq!(sizer.limit(), 74);
        sizer.observe(74, QUICK, Answer::Served);
        assert_eq!(sizer.limit(), 75, "one more, no longer twice");
        // Overloaded: half; a refusal of its own records (a served answer)
        // quickly: one more as any quick full answer.
        sizer.observe(75, QUICK, Answer::Overloaded);
        assert_eq!(sizer.limit(), 37);
        sizer.observe(37, QUICK, Answer::Served);
        assert_eq!(sizer.limit(), 38);
        for _ in 0..20 {
            sizer.observe(1, QUICK, Answer::Overloaded);
        }
        assert_eq!(sizer.limit(), 1, "never below one");
        let sizes: Vec<usize> = sizer.history().iter().map(|r| r.size).collect();
        assert_eq!(&sizes[..7], [25, 50, 99, 74, 75, 37, 38]);
    }

    #[test]
    fn an_overload_ends_the_slow_start_too() {
        let sizer = Sizer::groups(8, 99, SLOW);
        sizer.observe(8, QUICK, Answer::Overloaded);
        assert_eq!(sizer.limit(), 4);
        sizer.observe(4, QUICK, Answer::Served);
        assert_eq!(sizer.limit(), 5);
    }

    #[test]
    fn the_cap_bounds_it_from_the_start() {
        let sizer = Sizer::groups(GROUP_START, 4, SLOW);
        assert_eq!(sizer.limit(), 4);
        sizer.observe(4, QUICK, Answer::Served);
        assert_eq!(sizer.limit(), 4);
        assert_eq!(Sizer::groups(GROUP_START, 1, SLOW).limit(), 1);
        assert_eq!(Sizer::batches(0, 10).limit(), 1);
    }

    #[test]
    fn a_batch_shrinks_only_when_the_store_is_overloaded() {
        let sizer = Sizer::batches(GROUP_START, 100);
        sizer.observe(25, SLOW * 4, Answer::Served);
        assert_eq!(sizer.limit(), 50, "slow but served: still doubling");
        sizer.observe(50, QUICK, Answer::Overloaded);
        assert_eq!(sizer.limit(), 25);
        sizer.observe(25, SLOW, Answer::Served);
        assert_eq!(sizer.limit(), 26);
    }
}
