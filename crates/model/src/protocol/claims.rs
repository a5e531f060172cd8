//! A worker's claims: made ahead of their records' turn, each on its own;
//! each found item judged by the core crate's judge; a lane that waits
//! gives back its claims made ahead; heartbeats.

use exactly_once_core::engine::gives_back_while_waiting;
use exactly_once_core::store::{ClaimOutcome, Lease, Standing};

use super::{Flag, LeaseKey, Op, Protocol, Reply, Settled, Slot, State, TICK_MS, Write, settled};

impl Protocol {
    /// Claims slot `index` of worker `w` under a new owner.
    pub(super) fn claim(&self, state: &mut State, w: usize, index: usize) {
        let owner = Self::new_owner(state, w);
        self.send_claim(state, w, index, Slot::claiming(owner, None, 1, 0));
    }

    /// Slot `index` of worker `w` becomes `claiming` (a [`Slot::Claiming`])
    /// and its request is sent: a take-over of the version it observed, or
    /// a create.
    pub(super) fn send_claim(&self, state: &mut State, w: usize, index: usize, claiming: Slot) {
        let Slot::Claiming {
            owner, observed, ..
        } = &claiming
        else {
            return;
        };
        let owner = owner.clone();
        let op = match *observed {
            Some(observed) => Op::TakeOver { owner, observed },
            None => Op::Create { owner },
        };
        state.workers[w].slots[index] = claiming;
        self.send(state, w, index, op);
    }

    /// A claim's answer, settled as the store's `settle_claim` does: the
    /// item found judged ([`exactly_once_core::store::StoredItem::standing`]),
    /// an abandoned one taken over, a vanished or expired one created again.
    pub(super) fn settle_claim(
        &self,
        state: &mut State,
        w: usize,
        index: usize,
        owner: &str,
        rounds: u8,
        reply: Reply,
    ) {
        let key = self.scope.workers[w].keys[index];
        let again = |observed| Slot::claiming(owner.to_owned(), observed, 1, rounds + 1);
        let outcome = match reply {
            Reply::Claimed(lease) if lease.version == 1 => ClaimOutcome::Acquired(lease),
            Reply::Claimed(lease) => {
                state.flags.note(Flag::TookOver);
                ClaimOutcome::TakenOver(lease)
            }
            Reply::Conflict(_) if rounds >= 3 => {
                state.workers[w].slots[index] = Slot::Unfinished;
                return;
            }
            Reply::Conflict(None) => {
                self.send_claim(state, w, index, again(None));
                return;
            }
            Reply::Conflict(Some(item)) => {
                let now = self.clock(w, state.now);
                let payload = Self::payload(key);
                match item.standing(&self.configs[w], &payload, owner, now) {
                    Standing::Expired => {
                        self.send_claim(state, w, index, again(None));
                        return;
                    }
                    Standing::Abandoned => {
                        self.send_claim(state, w, index, again(Some(item.version)));
                        return;
                    }
                    Standing::Ours => {
                        state.flags.note(Flag::OwnClaimRecognised);
                        ClaimOutcome::of_own_item(item)
                    }
                    Standing::OtherScope => {
                        state.flags.note(Flag::OtherScopeRefused);
                        ClaimOutcome::OtherScope(item)
                    }
                    Standing::OtherPayload => ClaimOutcome::PayloadMismatch(item),
                    Standing::Completed => {
                        if !self.configs[w].owns(item.scope.as_deref()) {
                            state.flags.note(Flag::OtherScopeSkipped);
                        }
                        // Cached only with nothing left to send.
                        if item.outbox.is_none() {
                            self.remember(state, w, key as usize, item.expires_at_s);
                        }
                        ClaimOutcome::Duplicate(item)
                    }
                    Standing::Failed => ClaimOutcome::PreviouslyFailed(item),
                    Standing::Locked => ClaimOutcome::InProgress(item),
                }
            }
            Reply::Made | Reply::LockLost | Reply::KeyTaken { .. } => return,
        };
        state.workers[w].slots[index] = match settled(outcome) {
            // The lane waits: a claim made ahead is given back as soon as
            // it is answered (the lane awaits its answer to give it back).
            Settled::Held(lease) if self.lane_waits(state, w) => {
                self.give_back(state, w, index, &lease);
                Slot::Open
            }
            Settled::Held(lease) => Slot::Held(lease),
            Settled::Done(None) => Slot::Done,
            // A duplicate whose messages were left: they are sent now.
            Settled::Done(Some(pending)) => {
                state.flags.note(Flag::LeftOverFound);
                Slot::Unsent {
                    owner: pending.owner,
                }
            }
            Settled::InProgress => Slot::InProgress,
            Settled::Refused => Slot::Unfinished,
        };
    }

    /// The head is in progress elsewhere: the lane waits, having given back
    /// every claim it made ahead (released; claimed again after the wait).
    pub(super) fn wait(&self, state: &mut State, w: usize) {
        let Some(head) = Self::head(&state.workers[w]) else {
            return;
        };
        state.workers[w].slots[head] = Slot::Waiting { since: state.now };
        if !gives_back_while_waiting() {
            return;
        }
        for index in head + 1..state.workers[w].slots.len() {
            if let Slot::Held(lease) = state.workers[w].slots[index].clone() {
                state.workers[w].slots[index] = Slot::Open;
                self.give_back(state, w, index, &lease);
            }
        }
    }

    /// Whether worker `w`'s lane waits (its head waits on a foreign lease)
    /// holding nothing: so, under the lane's rule, not while claims ahead
    /// are kept.
    pub(super) fn lane_waits(&self, state: &State, w: usize) -> bool {
        gives_back_while_waiting()
            && matches!(
                Self::head(&state.workers[w]).map(|i| &state.workers[w].slots[i]),
                Some(Slot::Waiting { .. })
            )
    }

    /// Gives back `lease` of slot `index`: released, under its fence.
    pub(super) fn give_back(&self, state: &mut State, w: usize, index: usize, lease: &Lease) {
        let op = Op::Fenced {
            lease: LeaseKey::of(lease),
            write: Write::Release,
        };
        self.send(state, w, index, op);
        state.flags.note(Flag::GaveBack);
    }

    /// After the wait: the head and the records given back claimed again.
    pub(super) fn reclaim(&self, state: &mut State, w: usize) {
        for index in 0..state.workers[w].slots.len() {
            if matches!(
                state.workers[w].slots[index],
                Slot::Open | Slot::Waiting { .. }
            ) {
                self.claim(state, w, index);
            }
        }
    }

    /// A heartbeat: slot `index`'s lease extended by a lease from now.
    pub(super) fn renew(&self, state: &mut State, w: usize, index: usize) {
        let (Slot::Held(lease) | Slot::Ran(lease)) = state.workers[w].slots[index].clone() else {
            return;
        };
        let until_ms = self.clock(w, state.now) + self.scope.lease_ticks * TICK_MS;
        let op = Op::Fenced {
            lease: LeaseKey::of(&lease),
            write: Write::Extend { until_ms },
        };
        self.send(state, w, index, op);
    }
}
