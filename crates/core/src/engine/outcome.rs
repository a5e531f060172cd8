//! What became of one message.

use std::sync::Arc;

use crate::store::StoreError;
use crate::store::outbox::Pending;

use super::StopReason;

/// The end of one message's processing in one invocation.
#[derive(Debug)]
pub enum Outcome {
    /// The work ran and the key is COMPLETED with `result`. `version` > 1
    /// means the key was taken over from an abandoned lock.
    Processed {
        /// The version that completed (1: a first claim).
        version: u64,
        /// The result stored with it.
        result: Option<Arc<str>>,
        /// The messages it emitted, to send before it counts as finished.
        unsent: Option<Box<Pending>>,
    },
    /// The key was already COMPLETED for this payload with `result`; the work
    /// did not run ([`super::RecordHandler::on_duplicate`] did).
    Duplicate {
        /// The result stored by the first delivery.
        result: Option<Arc<str>>,
        /// Messages of the first delivery still in the item's outbox (its
        /// send failed, or its invocation ended before): sent by this one.
        unsent: Option<Box<Pending>>,
    },
    /// A verified duplicate whose [`super::RecordHandler::on_duplicate`]
    /// failed: reported, so that it comes again.
    ReplayFailed {
        /// Why the handler's `on_duplicate` failed.
        error: String,
    },
    /// The key is COMPLETED (this delivery's work, or an earlier one's) but
    /// not every message it emitted was accepted by its destination:
    /// reported, so that a redelivery sends what is left (under the same
    /// ids); the work does not run again.
    Unsent {
        /// Why (the destination's answer).
        error: String,
    },
    /// Another worker holds the key's lock; the work did not run here.
    InProgress,
    /// The key was used before with another payload; the work never runs.
    PayloadMismatch,
    /// Another function (another scope) holds the key in the same table
    /// under the same key prefix: its item is not this function's, so the
    /// work does not run and the message is reported until the functions'
    /// keys are told apart (`IDEMPOTENCY_KEY_PREFIX`) or deliberately
    /// shared (`IDEMPOTENCY_SCOPE`).
    OtherScope {
        /// The scope on the item found (the other function's name).
        theirs: String,
        /// This function's scope (`None`: it writes none).
        ours: Option<String>,
    },
    /// The key failed permanently before; the work never runs again.
    PreviouslyFailed {
        /// The stored error.
        error: Option<String>,
    },
    /// The business logic failed permanently; the key is now FAILED.
    Failed {
        /// The handler's error, as stored.
        error: String,
    },
    /// The business logic failed for now; the key was released.
    Retrying {
        /// The handler's error.
        error: String,
    },
    /// The lock was taken over while the work ran; the result was not recorded.
    LockLost,
    /// The idempotency table could not be used; see the error.
    StoreFailed(StoreError),
    /// The message could not be read (undecodable, no usable key).
    Invalid {
        /// Why (never payload content).
        reason: String,
    },
    /// The invocation's deadline came near while the work ran: it was
    /// stopped and the key released.
    TimedOut,
    /// Not started, for the reason given.
    NotStarted(StopReason),
    /// The work ran and returned its effect as done outside the store (no
    /// store effects: "direct mode"), but its completion could not be
    /// written (the store failed, or the lock was taken over meanwhile): a
    /// redelivery may run the effect again. Reported, and counted apart
    /// (`UnrecordedEffects`) because an operator must check the effect.
    Unrecorded(StoreError),
}

/// Why a key of another scope is refused, naming both functions and the fix.
fn scope_conflict(theirs: &str, ours: Option<&str>) -> String {
    let (ours, prefix) = match ours {
        Some(ours) => (
            format!("{ours:?}"),
            ours.chars().take(64).collect::<String>(),
        ),
        None => ("unscoped".to_owned(), "consumer-b".to_owned()),
    };
    format!(
        "the key belongs to function {theirs:?}, not to this one ({ours}): both use the same \
         idempotency table and key prefix. Set IDEMPOTENCY_KEY_PREFIX on one of them \
         (e.g. {prefix}#) to give it keys of its own, or the same IDEMPOTENCY_SCOPE on both \
         to share keys on purpose; the record is reported until then"
    )
}

/// What becomes of a message whose permanent failure is durably stored
/// (its key FAILED, with the error): `POISON_POLICY`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PoisonPolicy {
    /// It counts as done: its lane goes on, it is not redelivered. The
    /// FAILED item is the durable record (listed by `exactly-once-ops
    /// failed`, counted in the `Parked` metric, alarmed on). The default.
    #[default]
    Park,
    /// It is reported, and the rest of its lane with it: the event source
    /// mapping redelivers them until its retries run out, then sends them
    /// all to the on-failure destination.
    Report,
}

impl PoisonPolicy {
    /// Parses `POISON_POLICY`: `park` or `report`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "park" => Ok(Self::Park),
            "report" => Ok(Self::Report),
            other => Err(format!(
                "unknown poison policy {other:?}; expected park or report"
            )),
        }
    }
}

/// Which messages that can never succeed count as done (not reported, their
/// lane goes on): `POISON_POLICY`, and whether refused messages (unreadable,
/// without a key, a key reused with another payload) are parked too, which
/// the edge asks for only when it forwards them whole to a dead-letter queue
/// (they have no FAILED item to be their durable record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parking {
    /// `POISON_POLICY`.
    pub poison: PoisonPolicy,
    /// Whether refused messages (unreadable, keyless, key reused) are parked too.
    pub refused: bool,
}

impl Parking {
    /// Whether `outcome` is parked.
    pub fn parks(&self, outcome: &Outcome) -> bool {
        self.poison == PoisonPolicy::Park
            && match outcome {
                Outcome::Failed { .. } | Outcome::PreviouslyFailed { .. } => true,
                Outcome::Invalid { .. } | Outcome::PayloadMismatch => self.refused,
                _ => false,
            }
    }
}

impl Outcome {
    /// A verified duplicate known before its claim (the pre-check, the
    /// caches, a copy in flight): its item had nothing left to send.
    pub(super) fn known_duplicate(result: Option<Arc<str>>) -> Self {
        Self::Duplicate {
            result,
            unsent: None,
        }
    }

    /// Processed or a verified duplicate: the key is COMPLETED.
    pub fn is_finished(&self) -> bool {
        matches!(self, Self::Processed { .. } | Self::Duplicate { .. })
    }

    /// A permanent failure durably stored: the key is FAILED.
    pub fn is_failed(&self) -> bool {
        matches!(self, Self::Failed { .. } | Self::PreviouslyFailed { .. })
    }

    /// Needs no redelivery: finished, or parked. Every other message is
    /// reported, and the rest of its lane is not started.
    pub fn is_done(&self, parking: Parking) -> bool {
        self.is_finished() || parking.parks(self)
    }

    /// The result stored for the key, when the key is COMPLETED.
    pub fn stored_result(&self) -> Option<Arc<str>> {
        match self {
            Self::Processed { result, .. } | Self::Duplicate { result, .. } => result.clone(),
            _ => None,
        }
    }

    /// A short, stable name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Processed { version: 1, .. } => "processed",
            Self::Processed { .. } => "taken-over",
            Self::Duplicate { .. } => "duplicate",
            Self::ReplayFailed { .. } => "replay-failed",
            Self::Unsent { .. } => "unsent",
            Self::InProgress => "in-progress",
            Self::PayloadMismatch => "rejected",
            Self::OtherScope { .. } => "scope-conflict",
            Self::PreviouslyFailed { .. } => "previously-failed",
            Self::Failed { .. } => "failed",
            Self::Retrying { .. } => "retrying",
            Self::LockLost => "lock-lost",
            Self::StoreFailed(_) => "store-error",
            Self::Invalid { .. } => "invalid",
            Self::TimedOut => "timed-out",
            Self::NotStarted(_) => "not-started",
            Self::Unrecorded(_) => "unrecorded-effects",
        }
    }

    /// Why a message was not finished, for the log line.
    pub fn detail(&self) -> Option<String> {
        match self {
            Self::PreviouslyFailed { error } => error.clone(),
            Self::Failed { error }
            | Self::Retrying { error }
            | Self::ReplayFailed { error }
            | Self::Unsent { error } => Some(error.clone()),
            Self::StoreFailed(err) => Some(err.to_string()),
            Self::Unrecorded(err) => Some(format!(
                "the work's effect happened but its completion was not recorded: {err}"
            )),
            Self::Invalid { reason } => Some(reason.clone()),
            Self::PayloadMismatch => Some("key reused with another payload".into()),
            Self::OtherScope { theirs, ours } => Some(scope_conflict(theirs, ours.as_deref())),
            Self::NotStarted(reason) => Some(reason.text().into()),
            _ => None,
        }
    }
}

/// The outcome of a record whose store request failed: its lease lost, or
/// the store's error (retryable or not) as it came.
pub(super) fn store_failure(err: StoreError) -> Outcome {
    match err {
        StoreError::LockLost { .. } => Outcome::LockLost,
        err => Outcome::StoreFailed(err),
    }
}
