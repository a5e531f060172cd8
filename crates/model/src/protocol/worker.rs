//! The worker's side: an invocation's steps in the engine's order. The
//! pre-check and the caches, the batched claims (each claim on its own,
//! every one made ahead of its record's turn), each found item judged by
//! the core crate's judge, the lane's head run in turn, completions sent
//! alone (effects outside) or as one group commit (effects in the store),
//! heartbeats, re-sends that recognise their own writes, the claims made
//! ahead given back before a wait, the answer to Lambda.

use exactly_once_core::clock::ms_to_s;
use exactly_once_core::engine::{FencingToken, gives_back_while_waiting};
use exactly_once_core::store::{ClaimOutcome, Lease, Standing, Status};

use super::{
    Action, Flag, LeaseKey, Op, Path, Phase, Protocol, Reply, Request, Settled, Slot, State,
    TICK_MS, Write, settled,
};

impl Protocol {
    /// The steps worker `w` may take in `state`.
    pub(super) fn worker_actions(&self, state: &State, w: usize, actions: &mut Vec<Action>) {
        let worker = &state.workers[w];
        let id = w as u8;
        let Phase::Running { deadline } = worker.phase else {
            if worker.phase == Phase::Due
                && worker.invocation < self.scope.invocations
                && state.now < self.scope.horizon
            {
                actions.push(Action::Start(id));
            }
            return;
        };
        if state.crashes < self.scope.crashes {
            actions.push(Action::Crash(id));
        }
        for (index, slot) in worker.slots.iter().enumerate() {
            let awaiting = matches!(
                slot,
                Slot::Claiming { .. } | Slot::Completing { .. } | Slot::Committing { .. }
            );
            let in_flight = self.in_flight(state, w, index);
            // Sent again only when unanswered: its request or answer lost,
            // or the request delayed.
            if awaiting && !self.prompt(state, w, index) {
                actions.push(Action::Resend(id, index as u8));
            }
            if let Slot::Held(lease) | Slot::Ran(lease) = slot {
                let now = self.clock(w, state.now);
                if lease.lock_expires_at_ms <= now + TICK_MS && !in_flight {
                    actions.push(Action::Renew(id, index as u8));
                }
            }
        }
        if worker
            .slots
            .iter()
            .any(|s| matches!(s, Slot::Ran(_) | Slot::Computed { .. }))
        {
            actions.push(Action::Flush(id));
        }
        if let Some(Slot::Waiting { since }) = Self::head(worker).map(|i| &worker.slots[i])
            && state.now > *since
            && state.now < deadline
        {
            actions.push(Action::Reclaim(id));
        }
    }

    /// The steps a worker takes at once, with no choice of when: a lane
    /// runs its head as soon as it is held, waits as soon as its head is
    /// found in progress elsewhere, and the invocation answers once every
    /// record is settled or its deadline came. Taken after every step (so
    /// the checker never interleaves them, which changes nothing: each
    /// touches the worker alone, but for the requests it sends).
    pub(super) fn eager(&self, state: &mut State) {
        for w in 0..state.workers.len() {
            while let Phase::Running { deadline } = state.workers[w].phase {
                let worker = &state.workers[w];
                let settled = |slot: &Slot| matches!(slot, Slot::Done | Slot::Unfinished);
                if worker.slots.iter().all(settled) || state.now >= deadline {
                    self.answer(state, w);
                    break;
                }
                match Self::head(worker).map(|i| &worker.slots[i]) {
                    Some(Slot::Held(_)) => self.run(state, w),
                    Some(Slot::InProgress) => self.wait(state, w),
                    _ => break,
                }
            }
        }
    }

    /// The lane's head: its first record not run yet.
    fn head(worker: &super::Worker) -> Option<usize> {
        worker.slots.iter().position(|slot| {
            !matches!(
                slot,
                Slot::Done
                    | Slot::Unfinished
                    | Slot::Ran(_)
                    | Slot::Completing { .. }
                    | Slot::Computed { .. }
                    | Slot::Committing { .. }
            )
        })
    }

    /// Whether a request of worker `w`'s slot `index` (this invocation) is
    /// on its way, not delayed.
    fn prompt(&self, state: &State, w: usize, index: usize) -> bool {
        self.requests_of(state, w, index).any(|r| !r.late)
    }

    /// Whether a request of worker `w`'s slot `index` (this invocation) is
    /// in flight.
    fn in_flight(&self, state: &State, w: usize, index: usize) -> bool {
        self.requests_of(state, w, index).next().is_some()
    }

    /// The requests in flight for worker `w`'s slot `index` (this
    /// invocation): its own, and a group commit it is a member of.
    fn requests_of<'s>(
        &self,
        state: &'s State,
        w: usize,
        index: usize,
    ) -> impl Iterator<Item = &'s Request> {
        let invocation = state.workers[w].invocation;
        state.net.iter().filter(move |r| {
            let member = match &r.op {
                Op::Commit { members } => members.iter().any(|(slot, _)| *slot as usize == index),
                Op::CommitNew { members } => {
                    members.iter().any(|(slot, _)| *slot as usize == index)
                }
                _ => r.from.2 as usize == index,
            };
            (r.from.0, r.from.1) == (w as u8, invocation) && member
        })
    }

    /// Worker `w` sends `op` for slot `index`, stamped with its clock.
    fn send(&self, state: &mut State, w: usize, index: usize, op: Op) {
        let request = Request {
            from: (w as u8, state.workers[w].invocation, index as u8),
            at_ms: self.clock(w, state.now),
            late: false,
            op,
        };
        state.net.push(request);
    }

    /// A new owner token of worker `w`.
    fn new_owner(state: &mut State, w: usize) -> String {
        let worker = &mut state.workers[w];
        worker.owners += 1;
        format!("w{w}.{}.{}", worker.invocation, worker.owners)
    }

    /// Claims slot `index` of worker `w` under a new owner.
    fn claim(&self, state: &mut State, w: usize, index: usize) {
        let owner = Self::new_owner(state, w);
        state.workers[w].slots[index] = Slot::Claiming {
            owner: owner.clone(),
            observed: None,
            sent: 1,
            rounds: 0,
        };
        self.send(state, w, index, Op::Create { owner });
    }

    /// An invocation begins: the records not answered done yet, each known
    /// completed from a cache or the pre-check read, or claimed.
    pub(super) fn start(&self, state: &mut State, w: usize) {
        let worker = &mut state.workers[w];
        worker.invocation += 1;
        worker.owners = 0;
        worker.phase = Phase::Running {
            deadline: state.now + self.scope.deadline_ticks,
        };
        let config = &self.configs[w];
        let now = self.clock(w, state.now);
        for index in 0..worker.slots.len() {
            let key = self.scope.workers[w].keys[index] as usize;
            let worker = &mut state.workers[w];
            if worker.done & (1 << index) != 0 {
                worker.slots[index] = Slot::Done;
                continue;
            }
            let live = |expires: u64| expires >= ms_to_s(now);
            // The shared cache hands out its own scope's entries only.
            let shared = state.shared[key]
                .is_some_and(|(expires, scope)| live(expires) && config.owns(Some(scope)));
            if worker.warm[key].is_some_and(live) || (self.scope.shared_cache && shared) {
                worker.slots[index] = Slot::Done;
                state.flags.note(Flag::CacheHit);
                continue;
            }
            let read = state.items[key]
                .as_ref()
                .map(|k| &k.item)
                .filter(|item| !item.is_expired(now));
            match read {
                Some(item)
                    if item.proves_completed(config)
                        && item.payload_hash == Self::payload(key as u8) =>
                {
                    let expires = item.expires_at_s;
                    state.workers[w].slots[index] = Slot::Done;
                    self.remember(state, w, key, expires);
                }
                _ if self.scope.path == Path::LockFree => {
                    let owner = Self::new_owner(state, w);
                    state.workers[w].slots[index] = Slot::Computed { owner };
                }
                _ => self.claim(state, w, index),
            }
        }
    }

    /// Worker `w` hears the store's `reply` to `request` (if it is still the
    /// invocation that sent it, and the record still waits for it).
    pub(super) fn hear(&self, state: &mut State, request: &Request, reply: Reply) {
        let (w, invocation, index) = request.from;
        let (w, index) = (w as usize, index as usize);
        let worker = &state.workers[w];
        if worker.invocation != invocation || !matches!(worker.phase, Phase::Running { .. }) {
            return;
        }
        match (&request.op, worker.slots[index].clone(), reply) {
            (
                Op::Create { owner } | Op::TakeOver { owner, .. },
                Slot::Claiming {
                    owner: o, rounds, ..
                },
                reply,
            ) if *owner == o => self.settle_claim(state, w, index, owner, rounds, reply),
            (
                Op::Fenced {
                    lease,
                    write: Write::Complete,
                },
                Slot::Completing { lease: held, .. },
                reply,
            ) if *lease == LeaseKey::of(&held) => {
                self.finish(state, w, index, matches!(reply, Reply::Made));
            }
            (Op::Commit { members }, Slot::Completing { lease: held, .. }, reply)
                if members.iter().any(|(_, l)| *l == LeaseKey::of(&held)) =>
            {
                self.settle_commit(state, w, members, reply)
            }
            (Op::CommitNew { members }, Slot::Committing { owner, .. }, reply)
                if members.iter().any(|(_, o)| *o == owner) =>
            {
                self.settle_commit_new(state, w, members, reply)
            }
            (
                Op::Fenced {
                    lease,
                    write: Write::Extend { until_ms },
                },
                Slot::Held(held) | Slot::Ran(held),
                reply,
            ) if lease.owner == held.owner => {
                let slot = &mut state.workers[w].slots[index];
                match reply {
                    Reply::Made => {
                        let renewed = Lease {
                            lock_expires_at_ms: *until_ms,
                            ..held
                        };
                        *slot = match slot {
                            Slot::Held(_) => Slot::Held(renewed),
                            _ => Slot::Ran(renewed),
                        };
                    }
                    _ => *slot = Slot::Unfinished,
                }
            }
            _ => {}
        }
    }

    /// A claim's answer, settled as the store's `settle_claim` does: the
    /// item found judged ([`exactly_once_core::store::StoredItem::standing`]),
    /// an abandoned one taken over, a vanished or expired one created again.
    fn settle_claim(
        &self,
        state: &mut State,
        w: usize,
        index: usize,
        owner: &str,
        rounds: u8,
        reply: Reply,
    ) {
        let key = self.scope.workers[w].keys[index];
        let again = |observed: Option<u64>| Slot::Claiming {
            owner: owner.to_owned(),
            observed,
            sent: 1,
            rounds: rounds + 1,
        };
        let outcome = match reply {
            Reply::Claimed(lease) if lease.version == 1 => ClaimOutcome::Acquired(lease),
            Reply::Claimed(lease) => {
                state.flags.note(Flag::TookOver);
                ClaimOutcome::TakenOver(lease)
            }
            Reply::Conflict(found) if rounds >= 3 => {
                let _ = found;
                state.workers[w].slots[index] = Slot::Unfinished;
                return;
            }
            Reply::Conflict(None) => {
                state.workers[w].slots[index] = again(None);
                self.send(
                    state,
                    w,
                    index,
                    Op::Create {
                        owner: owner.to_owned(),
                    },
                );
                return;
            }
            Reply::Conflict(Some(item)) => {
                let now = self.clock(w, state.now);
                let payload = Self::payload(key);
                match item.standing(&self.configs[w], &payload, owner, now) {
                    Standing::Expired => {
                        state.workers[w].slots[index] = again(None);
                        self.send(
                            state,
                            w,
                            index,
                            Op::Create {
                                owner: owner.to_owned(),
                            },
                        );
                        return;
                    }
                    Standing::Abandoned => {
                        state.workers[w].slots[index] = again(Some(item.version));
                        let observed = item.version;
                        self.send(
                            state,
                            w,
                            index,
                            Op::TakeOver {
                                owner: owner.to_owned(),
                                observed,
                            },
                        );
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
                        self.remember(state, w, key as usize, item.expires_at_s);
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
            Settled::Done => Slot::Done,
            Settled::InProgress => Slot::InProgress,
            Settled::Refused => Slot::Unfinished,
        };
    }

    /// A completion of slot `index` made (or refused: the lock lost).
    fn finish(&self, state: &mut State, w: usize, index: usize, made: bool) {
        state.workers[w].slots[index] = match made {
            true => Slot::Done,
            false => Slot::Unfinished,
        };
        if made {
            let key = self.scope.workers[w].keys[index] as usize;
            let expires = state.items[key].as_ref().map_or(0, |k| k.item.expires_at_s);
            self.remember(state, w, key, expires);
        }
    }

    /// A group commit's answer: all made, or one member's fence refused
    /// (that member made already by this very lease, its earlier send
    /// applied; or its lock lost) and the others buffered again.
    fn settle_commit(&self, state: &mut State, w: usize, members: &[(u8, LeaseKey)], reply: Reply) {
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
    fn settle_commit_new(
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

    /// Keeps `key` as completed (until `expires_at_s`) in worker `w`'s warm
    /// cache, and in the shared cache.
    fn remember(&self, state: &mut State, w: usize, key: usize, expires_at_s: u64) {
        state.workers[w].warm[key] = Some(expires_at_s);
        if self.scope.shared_cache {
            state.shared[key] = Some((expires_at_s, self.scope.workers[w].scope));
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
                state.workers[w].slots[index] = Slot::Claiming {
                    owner: owner.clone(),
                    observed,
                    sent: sent + 1,
                    rounds,
                };
                let op = match observed {
                    Some(observed) => Op::TakeOver { owner, observed },
                    None => Op::Create { owner },
                };
                self.send(state, w, index, op);
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
    fn send_alone(&self, state: &mut State, w: usize, index: usize, sent: u8) {
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
    fn send_completion(&self, state: &mut State, w: usize, members: &[(usize, Lease)]) {
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
    fn run(&self, state: &mut State, w: usize) {
        let Some(index) = Self::head(&state.workers[w]) else {
            return;
        };
        let Slot::Held(lease) = state.workers[w].slots[index].clone() else {
            return;
        };
        if self.scope.path == Path::Direct {
            let key = self.scope.workers[w].keys[index] as usize;
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

    /// The head is in progress elsewhere: the lane waits, having given back
    /// every claim it made ahead (released; claimed again after the wait).
    fn wait(&self, state: &mut State, w: usize) {
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
    fn lane_waits(&self, state: &State, w: usize) -> bool {
        gives_back_while_waiting()
            && matches!(
                Self::head(&state.workers[w]).map(|i| &state.workers[w].slots[i]),
                Some(Slot::Waiting { .. })
            )
    }

    /// Gives back `lease` of slot `index`: released, under its fence.
    fn give_back(&self, state: &mut State, w: usize, index: usize, lease: &Lease) {
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

    /// The invocation answers Lambda: the records done, the others reported
    /// (their leases given back). A record answered done must be finished in
    /// the store.
    fn answer(&self, state: &mut State, w: usize) {
        for index in 0..state.workers[w].slots.len() {
            let key = self.scope.workers[w].keys[index] as usize;
            match state.workers[w].slots[index].clone() {
                Slot::Done => {
                    let finished = state.items[key].as_ref().is_some_and(|k| {
                        matches!(k.item.status, Status::Completed | Status::Failed)
                            && self.configs[w].owns(k.item.scope.as_deref())
                    });
                    if !finished {
                        state.flags.note(Flag::DoneNotFinished);
                    }
                    state.workers[w].done |= 1 << index;
                }
                Slot::Held(lease) | Slot::Ran(lease) => {
                    let op = Op::Fenced {
                        lease: LeaseKey::of(&lease),
                        write: Write::Release,
                    };
                    self.send(state, w, index, op);
                }
                _ => {}
            }
        }
        let worker = &mut state.workers[w];
        let all = (1u8 << worker.slots.len()) - 1;
        match worker.done == all {
            true => {
                worker.end(Phase::Finished);
                if worker.invocation > 1 {
                    state.flags.note(Flag::RedeliveredFinished);
                }
            }
            false => worker.end(Phase::Due),
        }
    }

    /// Notes what a crash of worker `w` cut: a commit made whose answer it
    /// never heard.
    pub(super) fn note_crash(&self, state: &mut State, w: usize) {
        let cut = state.workers[w].slots.iter().any(|slot| match slot {
            Slot::Completing { lease, .. } => {
                let key = Self::key_of_pk(&lease.pk) as usize;
                state.items[key]
                    .as_ref()
                    .is_some_and(|k| lease.finished_as(&k.item, Status::Completed))
            }
            Slot::Committing { owner, .. } => state
                .items
                .iter()
                .flatten()
                .any(|k| k.item.owner == *owner && k.item.status == Status::Completed),
            _ => false,
        });
        if cut {
            state.flags.note(Flag::CrashAfterCommit);
        }
    }
}
