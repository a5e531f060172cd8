//! How many records share one lock-free transaction, learned from what the
//! store answers: one sizer per engine (a container, on one store).
//!
//! The rule is additive-increase, multiplicative-decrease (AIMD, as TCP
//! sizes its window):
//! - a transaction that committed quickly (under [`SLOW_COMMIT`]) while the
//!   size limited it (it held as many records as allowed) lets the size
//!   grow by one record. Not faster: many lanes commit at once, and a size
//!   that doubled on each of their answers would send a burst of the
//!   biggest transactions before the first slow answer could say the store
//!   queues them;
//! - a slow answer (at least [`SLOW_COMMIT`]) takes a quarter off; the store
//!   was busy, and a larger transaction holds its locks (DynamoDB's items,
//!   PostgreSQL's rows, Redis's whole server while its script runs) longer;
//! - an overloaded store (a timeout, throttling, a transaction conflict or
//!   the store unreachable) halves it;
//! - a refusal of the records themselves (a key taken, a condition, a floor)
//!   says nothing of the store's load, and changes nothing.
//!
//! Why: a bigger transaction amortises a round trip over more records (one
//! hot account's 1,000 payments: 0.101 requests per record at 10, 0.013 at
//! 99), but under a heavy load big transactions queue inside the store past
//! the clients' timeouts (DynamoDB Local, 10,000 records in `key` order:
//! 8,650 reported at a fixed 50). A transaction's latency is the earliest
//! honest signal of that queue, long before a timeout.
//!
//! The size stays within `[1, cap]`: `cap` is `MAX_RECORDS_PER_TRANSACTION`
//! (default: the store's most, 99); what one transaction may hold besides
//! (DynamoDB's 100 actions and 4 MB) is the footprint's to keep. Where
//! records land changes no record's outcome: a refused merged group splits
//! as before.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::{CommitOutcome, StoreError};

/// A transaction answered after this long is slow: the store is queueing.
/// A quarter of DynamoDB's 1 s attempt timeout (and of the other stores'
/// default call timeouts of 1 to 2 s), so that groups shrink long before a
/// request times out.
pub const SLOW_COMMIT: Duration = Duration::from_millis(250);

/// The size a sizer starts from (the former fixed default).
pub const START: usize = 10;

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

struct State {
    /// The size as a real number, so that a quarter off and one more add up.
    size: f64,
    /// Every change (bounded).
    history: Vec<Resized>,
}

/// Records per lock-free transaction, from the answers of the store.
pub struct GroupSizer {
    cap: usize,
    state: Mutex<State>,
}

/// At most this many changes are kept.
const HISTORY: usize = 10_000;

impl GroupSizer {
    /// A sizer within `[1, cap]`, from [`START`] (or `cap`, if smaller).
    pub fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        let size = START.min(cap);
        Self {
            cap,
            state: Mutex::new(State {
                size: size as f64,
                history: vec![Resized {
                    at: Instant::now(),
                    size,
                }],
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a transaction may hold now.
    pub fn limit(&self) -> usize {
        (self.lock().size as usize).clamp(1, self.cap)
    }

    /// Learns from a transaction of `records` answered after `elapsed`.
    pub fn observe(&self, records: usize, elapsed: Duration, answer: Answer) {
        let mut state = self.lock();
        let before = (state.size as usize).clamp(1, self.cap);
        match answer {
            Answer::Overloaded => state.size = (state.size / 2.0).max(1.0),
            Answer::Served if elapsed >= SLOW_COMMIT => state.size = (state.size * 0.75).max(1.0),
            // Only a transaction the size limited says a bigger one would do.
            Answer::Served if records >= before => {
                state.size = (state.size + 1.0).min(self.cap as f64);
            }
            Answer::Served => {}
        }
        let after = (state.size as usize).clamp(1, self.cap);
        if after != before && state.history.len() < HISTORY {
            state.history.push(Resized {
                at: Instant::now(),
                size: after,
            });
        }
    }

    /// Every change of size so far, the first being the start.
    pub fn history(&self) -> Vec<Resized> {
        self.lock().history.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUICK: Duration = Duration::from_millis(20);

    #[test]
    fn quick_full_transactions_grow_it_to_the_cap_and_trouble_shrinks_it() {
        let sizer = GroupSizer::new(99);
        assert_eq!(sizer.limit(), 10);
        // One more per full transaction committed quickly, up to the cap.
        for expected in (11..=99).chain([99]) {
            sizer.observe(sizer.limit(), QUICK, Answer::Served);
            assert_eq!(sizer.limit(), expected);
        }
        // A transaction below the size says nothing.
        sizer.observe(3, QUICK, Answer::Served);
        assert_eq!(sizer.limit(), 99);
        // Slow: a quarter off; overloaded: half; a refusal of its own
        // records (a served answer) quickly: nothing.
        sizer.observe(99, SLOW_COMMIT, Answer::Served);
        assert_eq!(sizer.limit(), 74);
        sizer.observe(74, QUICK, Answer::Overloaded);
        assert_eq!(sizer.limit(), 37);
        sizer.observe(37, QUICK, Answer::Served);
        assert_eq!(sizer.limit(), 38);
        for _ in 0..20 {
            sizer.observe(1, QUICK, Answer::Overloaded);
        }
        assert_eq!(sizer.limit(), 1, "never below one");
        let sizes: Vec<usize> = sizer.history().iter().map(|r| r.size).collect();
        assert_eq!(&sizes[..3], [10, 11, 12]);
        assert_eq!(&sizes[89..92], [99, 74, 37]);
    }

    #[test]
    fn the_cap_bounds_it_from_the_start() {
        let sizer = GroupSizer::new(4);
        assert_eq!(sizer.limit(), 4);
        sizer.observe(4, QUICK, Answer::Served);
        assert_eq!(sizer.limit(), 4);
        assert_eq!(GroupSizer::new(1).limit(), 1);
    }
}
