//! A lane's claims made ahead of their turn, and what becomes of them when
//! the lane must wait (`lane.rs`): given back (the lease released, so that
//! the lane holds nothing another worker may be waiting for), then taken
//! back when the lane goes on: the same lease extended again under its
//! fence (STARTED, its version and owner). No new version, no take-over:
//! unless another worker took the key over meanwhile, which the fence then
//! refuses, and a new claim finds what became of the key.

use tokio::sync::oneshot;

use crate::store::{Claim, ClaimOutcome, FencedWrite, Lease, Store, StoreError};

use super::batched::{ClaimAnswer, WriteAnswer};
use super::{Batch, Work};

/// Where a claim made ahead stands.
pub(super) enum Ahead {
    /// Handed in; its answer to come (or known).
    Sent(ClaimAnswer),
    /// Given back while the lane waited: its lease, released.
    GivenBack(Lease),
    /// Being taken back: the released lease's extension, fenced.
    TakingBack(Lease, WriteAnswer),
    /// Given back and taken over by another worker meanwhile (or not known
    /// to be held): claimed anew.
    Lost,
}

impl Ahead {
    /// The claim of `work`'s key, handed in now (with whatever the batch's
    /// lanes hand in at the same moment, in one request), under a new owner
    /// (the same on every send of it).
    pub fn send<R, S: Store>(work: &Work<R>, batch: &Batch<S>) -> Self {
        Self::Sent(claim(work, batch))
    }

    /// Gives the claim back if it holds a lease: the lease, to be released
    /// (together with the lane's others). A claim that came to something
    /// else (a duplicate, a key in progress) keeps its answer.
    pub async fn give_back<S: Store>(self, batch: &Batch<S>) -> (Self, Option<Lease>) {
        match self {
            Self::Sent(answer) => match answer.await {
                Ok(Ok(ClaimOutcome::Acquired(lease) | ClaimOutcome::TakenOver(lease))) => {
                    (Self::GivenBack(lease.clone()), Some(lease))
                }
                answered => (Self::Sent(ready(answered)), None),
            },
            Self::TakingBack(lease, answer) => match answer.await {
                // Taken over meanwhile: not ours to hold.
                Ok(Err(StoreError::LockLost { .. })) => {
                    batch.leases.release(&lease);
                    (Self::Lost, None)
                }
                // Held again, or perhaps (not answered): released again,
                // under its fence, either way.
                answered => {
                    let until_ms = match answered {
                        Ok(Ok(until_ms)) => until_ms,
                        _ => lease.lock_expires_at_ms,
                    };
                    let lease = Lease {
                        lock_expires_at_ms: until_ms,
                        ..lease
                    };
                    (Self::GivenBack(lease.clone()), Some(lease))
                }
            },
            given => (given, None),
        }
    }

    /// Takes the claim back if it was given back (handed in now, with the
    /// lane's others), or claims anew if it was lost. A lease taken back is
    /// held at once, as extended (the batch's heartbeat renews it until its
    /// turn; if another worker took the key over meanwhile, the renewal is
    /// refused as the extension is).
    pub fn take_back<R, S: Store>(self, work: &Work<R>, store: &S, batch: &Batch<S>) -> Self {
        match self {
            Self::GivenBack(lease) => {
                let until_ms = store
                    .config()
                    .lease_end(store.now_ms(), batch.guard.deadline().lease_cap_ms());
                let extension = (lease.clone(), FencedWrite::Extend { until_ms });
                match batch.batched.write(vec![extension]).pop() {
                    Some(answer) => {
                        batch.leases.hold(&Lease {
                            lock_expires_at_ms: until_ms,
                            ..lease.clone()
                        });
                        Self::TakingBack(lease, answer)
                    }
                    None => Self::Lost,
                }
            }
            Self::Lost => Self::send(work, batch),
            sent => sent,
        }
    }

    /// Whether it waits to be taken back (or claimed anew).
    pub fn is_given_back(&self) -> bool {
        matches!(self, Self::GivenBack(_) | Self::Lost)
    }

    /// The claim's answer at its message's turn: a lease taken back is held
    /// again (renewed by the batch's heartbeat); one the fence refused is
    /// claimed anew.
    pub async fn answer<R, S: Store>(
        self,
        work: &Work<R>,
        store: &S,
        batch: &Batch<S>,
    ) -> Result<ClaimOutcome, StoreError> {
        let taken_back = match self.take_back(work, store, batch) {
            Self::Sent(answer) => return answer.await.unwrap_or_else(|_| Err(ended())),
            Self::TakingBack(lease, answer) => (lease, answer.await),
            Self::GivenBack(_) | Self::Lost => return Err(ended()),
        };
        match taken_back {
            (lease, Ok(Ok(until_ms))) => {
                let lease = Lease {
                    lock_expires_at_ms: until_ms,
                    ..lease
                };
                batch.leases.hold(&lease);
                Ok(match lease.version {
                    1 => ClaimOutcome::Acquired(lease),
                    _ => ClaimOutcome::TakenOver(lease),
                })
            }
            // Taken over meanwhile: what became of the key, claimed anew.
            (lease, Ok(Err(StoreError::LockLost { .. }))) => {
                batch.leases.release(&lease);
                claim(work, batch).await.unwrap_or_else(|_| Err(ended()))
            }
            (lease, Ok(Err(err))) => {
                batch.leases.release(&lease);
                Err(err)
            }
            (lease, Err(_)) => {
                batch.leases.release(&lease);
                Err(ended())
            }
        }
    }
}

/// The claim of `work`'s key, handed in now.
fn claim<R, S: Store>(work: &Work<R>, batch: &Batch<S>) -> ClaimAnswer {
    batch.batched.claim(Claim {
        key: work.key.clone(),
        payload_hash: work.payload_hash.clone(),
        origin: Some(work.origin.clone()),
        lease_cap_ms: batch.guard.deadline().lease_cap_ms(),
        owner: work.new_owner(),
    })
}

/// A claim's answer already known.
fn ready(
    answer: Result<Result<ClaimOutcome, StoreError>, oneshot::error::RecvError>,
) -> ClaimAnswer {
    let (sender, receiver) = oneshot::channel();
    let _ = sender.send(answer.unwrap_or_else(|_| Err(ended())));
    receiver
}

/// The answer of a claim whose batch ended before it was answered.
fn ended() -> StoreError {
    StoreError::Unavailable {
        operation: "claim",
        message: "the claim's batch ended before it was answered".into(),
    }
}
