//! Settings that must fit the time an invocation has: checked on a
//! container's first invocation with a deadline (the first time the
//! function's timeout is known: it is no variable) and warned about once,
//! naming the settings and the fix (an SQS source queue's visibility
//! timeout: `visibility.rs`, feature `sqs`). docs/configuration.md ("Settings that
//! work together") lists them with who checks each.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use exactly_once_core::clock;

use super::TARGET;

/// Whether this container checked its settings against an invocation yet.
#[derive(Default)]
pub(super) struct FitChecked(AtomicBool);

impl FitChecked {
    /// On the first invocation with a deadline (`deadline_ms`, epoch ms):
    /// warns once if the settings do not fit the time it has.
    pub(super) fn check(&self, deadline_ms: u64, lock_timeout: Duration, margin: Duration) {
        let now = clock::now_ms();
        if deadline_ms <= now || self.0.swap(true, Ordering::Relaxed) {
            return;
        }
        let has = Duration::from_millis(deadline_ms - now);
        if let Some(why) = misfit(has, lock_timeout, margin) {
            tracing::warn!(target: TARGET, has_ms = has.as_millis() as u64, "{why}");
        }
    }
}

/// What does not fit an invocation that has `has`, or nothing.
pub(super) fn misfit(has: Duration, lock_timeout: Duration, margin: Duration) -> Option<String> {
    let (has_ms, margin_ms) = (has.as_millis(), margin.as_millis());
    // The margin is kept free at the end of every invocation.
    if has <= margin {
        return Some(format!(
            "SAFETY_MARGIN_MS={margin_ms} leaves nothing of the invocation's {has_ms} ms: no \
             record starts, and every batch comes back whole; lower SAFETY_MARGIN_MS or raise \
             the function's timeout"
        ));
    }
    // Waiting out a crashed container's lease takes the lease and the margin.
    if has <= lock_timeout + margin {
        return Some(format!(
            "LOCK_TIMEOUT_SECONDS={} and SAFETY_MARGIN_MS={margin_ms} outlast the invocation's \
             {has_ms} ms: a record whose lease a crashed container left is reported, not \
             waited out, and comes again; raise the function's timeout above {} s or lower \
             LOCK_TIMEOUT_SECONDS",
            lock_timeout.as_secs(),
            (lock_timeout + margin).as_secs_f64().ceil() as u64
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_margin_as_long_as_the_invocation_starts_nothing() {
        assert_eq!(
            misfit(S(3), S(30), S(5)).as_deref(),
            Some(
                "SAFETY_MARGIN_MS=5000 leaves nothing of the invocation's 3000 ms: no record \
                 starts, and every batch comes back whole; lower SAFETY_MARGIN_MS or raise the \
                 function's timeout"
            )
        );
    }

    #[test]
    fn a_lease_and_margin_longer_than_the_invocation_cannot_be_waited_out() {
        assert_eq!(
            misfit(S(30), S(30), S(5)).as_deref(),
            Some(
                "LOCK_TIMEOUT_SECONDS=30 and SAFETY_MARGIN_MS=5000 outlast the invocation's \
                 30000 ms: a record whose lease a crashed container left is reported, not waited \
                 out, and comes again; raise the function's timeout above 35 s or lower \
                 LOCK_TIMEOUT_SECONDS"
            )
        );
    }

    #[test]
    fn the_templates_defaults_fit() {
        assert_eq!(misfit(S(120), S(30), S(5)), None);
        assert_eq!(misfit(S(36), S(30), S(5)), None);
    }

    #[test]
    fn a_container_warns_once_and_only_with_a_deadline() {
        let checked = FitChecked::default();
        // No deadline (a test's context): not checked, so the next one is.
        checked.check(0, S(30), S(5));
        assert!(!checked.0.load(Ordering::Relaxed));
        checked.check(clock::now_ms() + 3_000, S(30), S(5));
        assert!(checked.0.load(Ordering::Relaxed));
    }
}
