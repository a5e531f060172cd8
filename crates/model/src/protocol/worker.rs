//! The worker's side: an invocation's steps in the engine's order. The
//! pre-check and the caches, the claims (`claims.rs`), the lane's head run
//! in turn and its completion (`completion.rs`), the messages sent
//! (`outbox.rs`), the answer to Lambda.

use exactly_once_core::clock::ms_to_s;
use exactly_once_core::store::{Lease, Status};

use super::{
    Action, Flag, LeaseKey, Op, Path, Phase, Protocol, Reply, Request, Slot, State, TICK_MS, Write,
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
        self.delivery_actions(state, w, actions);
    }

    /// The steps a worker takes at once, with no choice of when: a lane
    /// runs its head as soon as it is held, waits as soon as its head is
    /// found in progress elsewhere, and the invocation answers once every
    /// record is settled (its messages sent and their outbox cleared) or
    /// its deadline came. Taken after every step (so the checker never
    /// interleaves them, which changes nothing: each touches the worker
    /// alone, but for the requests it sends).
    pub(super) fn eager(&self, state: &mut State) {
        for w in 0..state.workers.len() {
            while let Phase::Running { deadline } = state.workers[w].phase {
                let worker = &state.workers[w];
                let settled = |slot: &Slot| matches!(slot, Slot::Done | Slot::Unfinished);
                if worker.slots.iter().all(settled) || state.now >= deadline {
                    // At the deadline, a record whose messages were not
                    // accepted is reported; one whose were is finished, its
                    // outbox left.
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
    pub(super) fn head(worker: &super::Worker) -> Option<usize> {
        worker.slots.iter().position(|slot| {
            !matches!(
                slot,
                Slot::Done
                    | Slot::Unfinished
                    | Slot::Unsent { .. }
                    | Slot::Sent { .. }
                    | Slot::Ran(_)
                    | Slot::Completing { .. }
                    | Slot::Computed { .. }
                    | Slot::Committing { .. }
            )
        })
    }

    /// Whether a request of worker `w`'s slot `index` (this invocation) is
    /// on its way, not delayed.
    pub(super) fn prompt(&self, state: &State, w: usize, index: usize) -> bool {
        self.requests_of(state, w, index).any(|r| !r.late)
    }

    /// Whether a request of worker `w`'s slot `index` (this invocation) is
    /// in flight.
    pub(super) fn in_flight(&self, state: &State, w: usize, index: usize) -> bool {
        self.requests_of(state, w, index).next().is_some()
    }

    /// The requests in flight for worker `w`'s slot `index` (this
    /// invocation): its own, and a group commit it is a member of.
    pub(super) fn requests_of<'s>(
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
    pub(super) fn send(&self, state: &mut State, w: usize, index: usize, op: Op) {
        let request = Request {
            from: (w as u8, state.workers[w].invocation, index as u8),
            at_ms: self.clock(w, state.now),
            late: false,
            op,
        };
        state.net.push(request);
    }

    /// A new owner token of worker `w`.
    pub(super) fn new_owner(state: &mut State, w: usize) -> String {
        let worker = &mut state.workers[w];
        worker.owners += 1;
        format!("w{w}.{}.{}", worker.invocation, worker.owners)
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
                    self.handler_returned(state, key as u8, &owner);
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
                self.settle_commit(state, w, members, reply);
            }
            (Op::CommitNew { members }, Slot::Committing { owner, .. }, reply)
                if members.iter().any(|(_, o)| *o == owner) =>
            {
                self.settle_commit_new(state, w, members, reply);
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

    /// Keeps `key` as completed (until `expires_at_s`) in worker `w`'s warm
    /// cache, and in the shared cache.
    pub(super) fn remember(&self, state: &mut State, w: usize, key: usize, expires_at_s: u64) {
        state.workers[w].warm[key] = Some(expires_at_s);
        if self.scope.shared_cache {
            state.shared[key] = Some((expires_at_s, self.scope.workers[w].scope));
        }
    }

    /// The invocation answers Lambda: the records done, the others reported
    /// (their leases given back). A record answered done must be finished in
    /// the store.
    pub(super) fn answer(&self, state: &mut State, w: usize) {
        for index in 0..state.workers[w].slots.len() {
            let key = self.scope.workers[w].keys[index] as usize;
            match state.workers[w].slots[index].clone() {
                Slot::Done | Slot::Sent { .. } => {
                    let finished = state.items[key].as_ref().is_some_and(|k| {
                        matches!(k.item.status, Status::Completed | Status::Failed)
                            && self.configs[w].owns(k.item.scope.as_deref())
                    });
                    if !finished {
                        state.flags.note(Flag::DoneNotFinished);
                    }
                    if !self.delivered(state, key as u8) {
                        state.flags.note(Flag::DoneUnsent);
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
    /// never heard; messages committed and not sent, or sent and their
    /// outbox not cleared.
    pub(super) fn note_crash(&self, state: &mut State, w: usize) {
        for slot in &state.workers[w].slots {
            match slot {
                Slot::Unsent { .. } => state.flags.note(Flag::CrashBeforeSend),
                Slot::Sent { .. } => state.flags.note(Flag::CrashBeforeClear),
                _ => {}
            }
        }
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
