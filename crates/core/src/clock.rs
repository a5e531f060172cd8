//! Wall-clock time in the units the item schema uses.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (the unit of `lock_expires_at`).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as u64
}

/// Whole seconds since the Unix epoch (the unit of `expires_at`, the TTL).
pub fn ms_to_s(ms: u64) -> u64 {
    ms / 1000
}

/// A duration in whole milliseconds.
pub fn duration_ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// What the guarantees assume of every clock: within this of true time
/// (docs/guarantees.md). A clock known further off is said so, in the log
/// and in the `ClockSkewMs` metric.
pub const CLOCK_BOUND_MS: i64 = 400;

/// One look at a store's clock on a request sent anyway: this process's
/// clock when the request left and when its answer came, and the server's
/// time in the answer, truncated to `resolution_ms` (1000 for an HTTP
/// `Date` header, 1 for PostgreSQL's `clock_timestamp()` or Redis `TIME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockReading {
    /// This process's clock when the request left, epoch ms.
    pub sent_ms: u64,
    /// This process's clock when the answer came, epoch ms.
    pub received_ms: u64,
    /// The server's time in the answer, epoch ms, truncated.
    pub server_ms: u64,
    /// How finely the server's time is given, ms.
    pub resolution_ms: u64,
}

impl ClockReading {
    /// The offsets (this clock minus the server's) the reading allows:
    /// the server stamped its time somewhere between the request's leaving
    /// and its answer's coming, and its true time lies within one
    /// resolution step above what it wrote.
    fn offsets(&self) -> (i64, i64) {
        let server = self.server_ms as i64;
        let lowest = self.sent_ms as i64 - (server + self.resolution_ms as i64);
        let highest = self.received_ms as i64 - server;
        (lowest, highest)
    }
}

/// A container's knowledge of its clock against its store's, from the
/// latest [`ClockReading`]; shared by the clones of a store.
#[derive(Debug, Default)]
pub struct ClockWatch {
    /// The offsets the latest reading allows, lowest and highest.
    offsets: std::sync::Mutex<Option<(i64, i64)>>,
    /// When a store that must ask for the time (PostgreSQL, Redis) may ask
    /// again, epoch ms.
    next_look_ms: std::sync::atomic::AtomicU64,
}

/// How often a store that must ask for the time looks at it: at the first
/// request of a container, then at most once a minute.
pub const LOOK_INTERVAL_MS: u64 = 60_000;

impl ClockWatch {
    /// Keeps `reading` as the latest.
    pub fn observe(&self, reading: ClockReading) {
        *self
            .offsets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(reading.offsets());
    }

    /// How far a clock `extra_ms` ahead of this process's is known to be off
    /// the store's: the offset of the allowed range nearest zero (positive:
    /// ahead), 0 when the range holds zero; `None` before any reading.
    pub fn skew_ms(&self, extra_ms: i64) -> Option<i64> {
        let offsets = *self
            .offsets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (lowest, highest) = offsets?;
        let (lowest, highest) = (lowest + extra_ms, highest + extra_ms);
        Some(if lowest > 0 {
            lowest
        } else if highest < 0 {
            highest
        } else {
            0
        })
    }

    /// Whether a store that must ask for the time should ask now: true for
    /// one caller at a time, at most once per [`LOOK_INTERVAL_MS`].
    pub fn look_due(&self, now_ms: u64) -> bool {
        use std::sync::atomic::Ordering;
        let next = self.next_look_ms.load(Ordering::Relaxed);
        now_ms >= next
            && self
                .next_look_ms
                .compare_exchange(
                    next,
                    now_ms + LOOK_INTERVAL_MS,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(sent_ms: u64, received_ms: u64, server_ms: u64, resolution_ms: u64) -> ClockReading {
        ClockReading {
            sent_ms,
            received_ms,
            server_ms,
            resolution_ms,
        }
    }

    #[test]
    fn a_whole_second_date_proves_only_what_lies_beyond_its_second_and_the_round_trip() {
        let watch = ClockWatch::default();
        assert_eq!(watch.skew_ms(0), None, "nothing known before a reading");
        // Sent at .200, answered at .260, the server wrote second 10: its
        // time was 10.000 to 10.999, so this clock is 1.000 behind to 0.260
        // ahead: nothing proven.
        watch.observe(reading(10_200, 10_260, 10_000, 1000));
        assert_eq!(watch.skew_ms(0), Some(0));
        // The same answer to a clock 90 s ahead: at least 89.2 s ahead.
        assert_eq!(watch.skew_ms(90_000), Some(89_200));
        // And to one 5 s behind: at least 4.74 s behind.
        assert_eq!(watch.skew_ms(-5_000), Some(-4_740));
    }

    #[test]
    fn a_millisecond_clock_proves_an_offset_beyond_the_round_trip() {
        let watch = ClockWatch::default();
        // The server read 1.000 s while this clock went from 1.500 to 1.520.
        watch.observe(reading(1_500, 1_520, 1_000, 1));
        assert_eq!(watch.skew_ms(0), Some(499));
        // A later reading replaces it.
        watch.observe(reading(2_000, 2_030, 2_010, 1));
        assert_eq!(watch.skew_ms(0), Some(0));
    }

    #[test]
    fn the_time_is_asked_for_once_a_minute() {
        let watch = ClockWatch::default();
        assert!(watch.look_due(1_000), "the first request looks");
        assert!(!watch.look_due(1_001));
        assert!(!watch.look_due(1_000 + LOOK_INTERVAL_MS - 1));
        assert!(watch.look_due(1_000 + LOOK_INTERVAL_MS));
    }
}
