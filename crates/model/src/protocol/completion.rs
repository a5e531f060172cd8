//! A worker's work and completions: the head run in turn, completions sent
//! alone (effects outside) or as one group commit (effects in the store),
//! lock-free commits of new keys, re-sends (in halves) that recognise their
//! own writes.

use exactly_once_core::engine::FencingToken;
use exactly_once_core::outbox::Pending;
use exactly_once_core::store::{Lease, Standing, Status};

use super::{Flag, LeaseKey, Op, Path, Protocol, Reply, Slot, State, Write};

impl Protocol {
    /// A completion of slot `index` made, or found made (or refused: the
    /// lock lost). The item, just written or found, has its messages still
    /// to send, if any (sent once the lanes are done); with none, the key is
    /// cached.
    pub(super) fn finish(&self, state: &mut State, w: usize, index: usize, made: bool) {
        if !made {
            state.workers[w].slots[index] = Slot::Unfinished;
            return;
        }
        let key = self.scope.workers[w].keys[index] as usize;
        let item = state.items[key].as_ref().map(|k| &k.item);
        if let Some(pending) = item.and_then(Pending::of_item) {
            let owner = pending.owner;
            state.workers[w].slots[index] = Slot::Unsent { owner };
            return;
        }
        state.workers[w].slots[index] = Slot::Done;
        let expires = item.map_or(0, |item| item.expires_at_s);
        self.remember(state, w, key, expires);
    }

    /// A group commit's answer: all made, or one member's fence refused
    /// (that member made already by this very lease, its earlier send
    /// applied; or its lock lost) and the others buffered again.
    pub(super) fn settle_commit(
        &self,
        state: &mut State,
        w: usize,
        members: &[(u8, LeaseKey)],
        reply: Reply,
    ) {
        match reply {
            Reply::Made => {
                for (slot, _) in members {
                    self.finish(state, w, *slot as usize, true);
                }
            }
            Reply::KeyTaken { index, item } => {
                for (i, (slot, lease)) in members.iter().enumerate() {
                    let slot = *slot as usize;
                    if i != index {
                        state.workers[w].slots[slot] = Slot::Ran(lease.lease());
                        continue;
                    }
                    let made = item
                        .as_ref()
                        .is_some_and(|item| lease.lease().finished_as(item, Status::Completed));
                    if made {
                        state.flags.note(Flag::OwnCommitRecognised);
                    }
                    self.finish(state, w, slot, made);
                }
            }
            _ => {}
        }
    }

    /// A lock-free group commit's answer: all made, or one member's key
    /// found not new, that item judged (its own commit, made by an earlier
    /// send: done; a duplicate: done; anything else: reported), and the
    /// others buffered again.
    pub(super) fn settle_commit_new(
        &self,
        state: &mut State,
        w: usize,
        members: &[(u8, String)],
        reply: Reply,
    ) {
        let (index, item) = match reply {
            Reply::Made => {
                for (slot, _) in members {
                    self.finish(state, w, *slot as usize, true);
                }
                return;
            }
            Reply::KeyTaken { index, item } => (index, item),
            _ => return,
        };
        for (i, (slot, owner)) in members.iter().enumerate() {
            let slot = *slot as usize;
            if i != index {
                state.workers[w].slots[slot] = Slot::Computed {
                    owner: owner.clone(),
                };
                continue;
            }
            let key = self.scope.workers[w].keys[slot];
            let now = self.clock(w, state.now);
            let standing = item
                .as_ref()
                .map(|item| item.standing(&self.configs[w], &Self::payload(key), owner, now));
            match standing {
                Some(Standing::Ours) => {
                    state.flags.note(Flag::OwnCommitRecognised);
                    self.finish(state, w, slot, true);
                }
                Some(Standing::Completed | Standing::Failed) => {
                    self.finish(state, w, slot, true);
                }
                Some(Standing::OtherScope) => {
                    state.flags.note(Flag::OtherScopeRefused);
                    self.finish(state, w, slot, false);
                }
                // Gone or past its TTL since: committed again.
                None | Some(Standing::Expired) => {
                    state.workers[w].slots[slot] = Slot::Computed {
                        owner: owner.clone(),
                    };
                }
                Some(Standing::Locked | Standing::Abandoned | Standing::OtherPayload) => {
                    self.finish(state, w, slot, false);
                }
            }
        }
    }

    /// Slot `index` of worker `w` went unanswered: its request sent again
    /// (the same owner, the same lease: it recognises its own write), a
    /// group commit in halves; after the last send, the record is given up.
    pub(super) fn resend(&self, state: &mut State, w: usize, index: usize) {
        match state.workers[w].slots[index].clone() {
            Slot::Claiming {
                owner,
                observed,
                sent,
                rounds,
            } => {
                if sent > self.scope.resends {
                    state.workers[w].slots[index] = Slot::Unfinished;
                    return;
                }
                let claiming = Slot::claiming(owner, observed, sent + 1, rounds);
                self.send_claim(state, w, index, claiming);
            }
            Slot::Committing { sent, group, .. } | Slot::Completing { sent, group, .. } => {
                if sent > self.scope.resends {
                    for slot in group {
                        state.workers[w].slots[slot as usize] = Slot::Unfinished;
                    }
                    return;
                }
                if group.len() > 1 {
                    state.flags.note(Flag::SentInHalves);
                }
                for slot in group {
                    self.send_alone(state, w, slot as usize, sent + 1);
                }
            }
            _ => {}
        }
    }

    /// Sends the commit or completion of slot `index` again, alone (its
    /// `sent`-th send).
    pub(super) fn send_alone(&self, state: &mut State, w: usize, index: usize, sent: u8) {
        let group = vec![index as u8];
        match state.workers[w].slots[index].clone() {
            Slot::Completing { lease, .. } => {
                let slot = Slot::Completing {
                    lease: lease.clone(),
                    sent,
                    group,
                };
                state.workers[w].slots[index] = slot;
                self.send_completion(state, w, &[(index, lease)]);
            }
            Slot::Committing { owner, .. } => {
                let slot = Slot::Committing {
                    owner: owner.clone(),
                    sent,
                    group,
                };
                state.workers[w].slots[index] = slot;
                let members = vec![(index as u8, owner)];
                self.send(state, w, index, Op::CommitNew { members });
            }
            _ => {}
        }
    }

    /// Sends the completion of `members` (slot, lease): each alone with its
    /// effect outside, or one group commit with the effects in the store.
    pub(super) fn send_completion(&self, state: &mut State, w: usize, members: &[(usize, Lease)]) {
        match self.scope.path {
            Path::Direct => {
                for (slot, lease) in members {
                    let op = Op::Fenced {
                        lease: LeaseKey::of(lease),
                        write: Write::Complete,
                    };
                    self.send(state, w, *slot, op);
                }
            }
            // (A lock-free worker holds no lease.)
            Path::Transactional | Path::LockFree => {
                let op = Op::Commit {
                    members: members
                        .iter()
                        .map(|(slot, lease)| (*slot as u8, LeaseKey::of(lease)))
                        .collect(),
                };
                self.send(state, w, members[0].0, op);
            }
        }
    }

    /// The head's turn: its work runs (an effect outside happens now, handed
    /// the token's downstream key); its completion waits to be sent (a
    /// crash may fall between).
    pub(super) fn run(&self, state: &mut State, w: usize) {
        let Some(index) = Self::head(&state.workers[w]) else {
            return;
        };
        let Slot::Held(lease) = state.workers[w].slots[index].clone() else {
            return;
        };
        let key = self.scope.workers[w].keys[index];
        self.handler_returned(state, key, &lease.owner);
        if self.scope.path == Path::Direct {
            let key = key as usize;
            if let Some(keyed) = state.items[key].as_mut() {
                keyed.outside_effects += 1;
            }
            // The effect is handed the token's downstream key.
            let token = FencingToken::from(&lease);
            let downstream = token.idempotency_key();
            match &state.downstream[key] {
                None => state.downstream[key] = Some(downstream.to_owned()),
                Some(first) if first != downstream => {
                    state.flags.note(Flag::DownstreamKeyChanged);
                }
                Some(_) => state.flags.note(Flag::OutsideEffectAgain),
            }
        }
        state.workers[w].slots[index] = Slot::Ran(lease);
    }

    /// The buffered completions sent: one group commit (effects in the
    /// store), or each alone (effects outside).
    pub(super) fn flush(&self, state: &mut State, w: usize) {
        if self.scope.path == Path::LockFree {
            let members: Vec<(u8, String)> = state.workers[w]
                .slots
                .iter()
                .enumerate()
                .filter_map(|(i, slot)| match slot {
                    Slot::Computed { owner } => Some((i as u8, owner.clone())),
                    _ => None,
                })
                .collect();
            let group: Vec<u8> = members.iter().map(|(i, _)| *i).collect();
            for (slot, owner) in &members {
                state.workers[w].slots[*slot as usize] = Slot::Committing {
                    owner: owner.clone(),
                    sent: 1,
                    group: group.clone(),
                };
            }
            let first = members[0].0 as usize;
            self.send(state, w, first, Op::CommitNew { members });
            return;
        }
        let members: Vec<(usize, Lease)> = state.workers[w]
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| match slot {
                Slot::Ran(lease) => Some((i, lease.clone())),
                _ => None,
            })
            .collect();
        let group: Vec<u8> = members.iter().map(|(i, _)| *i as u8).collect();
        for (slot, lease) in &members {
            // Effects outside: each completion its own write.
            let group = match self.scope.path {
                Path::Direct => vec![*slot as u8],
                _ => group.clone(),
            };
            state.workers[w].slots[*slot] = Slot::Completing {
                lease: lease.clone(),
                sent: 1,
                group,
            };
        }
        self.send_completion(state, w, &members);
    }
}
