//! Requests the store did not answer are sent again. A timeout, throttling
//! or an unreachable store leaves a request undecided: perhaps not applied,
//! perhaps applied with its answer lost or late. The engine sends such a
//! request again, a few times, pausing longer each time, while the
//! invocation's deadline allows; every request it sends again recognises
//! its own earlier write, so nothing is applied twice and nothing is
//! misread as another worker's:
//! - a claim carries the same owner token, and finds its own item
//!   ([`crate::store::Standing::Ours`]);
//! - a fenced write finds the version and owner it wrote
//!   ([`crate::store::Lease::finished_as`]);
//! - a lock-free commit or failure finds its own owner's item.
//!
//! A slow store is a slow store: only one that fails every send of a
//! request fails the batch closed.

use std::future::Future;
use std::time::Duration;

use crate::clock::now_ms;
use crate::store::StoreError;

use super::deadline::Deadline;

/// A request is sent again at most this many times.
pub const RESENDS: u32 = 3;

/// The pause before the first re-send; each next one is four times longer
/// (100 ms, 400 ms, 1.6 s), so the store has had about two seconds to
/// recover before the last.
const FIRST_PAUSE: Duration = Duration::from_millis(100);

/// The pause before re-send `sent` (0 for the first), or `None` when none
/// may go: [`RESENDS`] went already, or the pause would end past the point
/// where the deadline cuts running work. Up to a quarter longer, at random,
/// so that workers failed together do not all come back at once.
pub(super) fn pause(sent: u32, deadline: &Deadline) -> Option<Duration> {
    if sent >= RESENDS {
        return None;
    }
    let base = FIRST_PAUSE * 4u32.pow(sent);
    let pause = base + base * (now_ms() % 25) as u32 / 100;
    let end = now_ms() + pause.as_millis() as u64;
    deadline
        .cut_at_ms()
        .is_none_or(|cut| end < cut)
        .then_some(pause)
}

/// Sends a request (`send`) until it is answered: again, after a pause,
/// while its error is retryable and [`pause`] allows. The request must
/// recognise its own earlier write when sent again (see the module).
pub(super) async fn resending<T, F, Fut>(
    operation: &str,
    deadline: Deadline,
    mut send: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut sent = 0;
    loop {
        match send().await {
            Err(err) if err.is_retryable() => match pause(sent, &deadline) {
                Some(pause) => {
                    tracing::warn!(operation, error = %err, resend = sent + 1, "store request failed: sent again");
                    tokio::time::sleep(pause).await;
                    sent += 1;
                }
                None => return Err(err),
            },
            answer => return answer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_and_stop_after_the_last_resend() {
        let none = Deadline::NONE;
        let first = pause(0, &none).expect("a first re-send");
        assert!(
            first >= FIRST_PAUSE && first < FIRST_PAUSE * 5 / 4,
            "{first:?}"
        );
        let third = pause(2, &none).expect("a third re-send");
        assert!(third >= FIRST_PAUSE * 16, "{third:?}");
        assert_eq!(pause(RESENDS, &none), None);
    }

    #[test]
    fn no_resend_pauses_past_the_cut() {
        // Cut in 200 ms (a margin of 0): the third pause (1.6 s) is too long.
        let soon = Deadline::new(now_ms() + 200, Duration::ZERO);
        assert!(pause(0, &soon).is_some());
        assert_eq!(pause(2, &soon), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_retryable_error_is_sent_again_and_a_rejection_is_not() {
        let mut sends = 0;
        let answer = resending("claim", Deadline::NONE, || {
            sends += 1;
            let answer = match sends {
                1 | 2 => Err(StoreError::Unavailable {
                    operation: "claim",
                    message: "timed out".into(),
                }),
                _ => Ok(sends),
            };
            async move { answer }
        })
        .await;
        assert_eq!(answer.expect("answered the third time"), 3);

        let mut sends = 0;
        let answer: Result<(), _> = resending("claim", Deadline::NONE, || {
            sends += 1;
            async {
                Err(StoreError::Rejected {
                    operation: "claim",
                    message: "no such table".into(),
                })
            }
        })
        .await;
        assert!(matches!(answer, Err(StoreError::Rejected { .. })));
        assert_eq!(sends, 1);
    }
}
