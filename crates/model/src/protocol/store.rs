//! The store's side: a request applied as one conditional write (a commit:
//! one transaction), guarded by the core crate's own conditions
//! (`exactly_once_core::store::transition`), its change the same functions'.
//! Beside each, the checks of what the write did ([`Flag`]).

use exactly_once_core::clock::ms_to_s;
use exactly_once_core::store::transition::{
    self, fence_holds, may_clear_outbox, may_create, may_take_over,
};
use exactly_once_core::store::{ClaimRequest, Commit, Effects, Lease, NewItem, Status};

use super::{Flag, Keyed, Op, Protocol, Reply, Request, State, Write};

impl Protocol {
    /// Applies `request` to the store in `state`; what the store answers.
    pub(super) fn apply(&self, state: &mut State, request: &Request) -> Reply {
        let (w, invocation, _) = request.from;
        let config = &self.configs[w as usize];
        let now = request.at_ms;
        let sender = &state.workers[w as usize];
        if sender.invocation != invocation || !matches!(sender.phase, super::Phase::Running { .. })
        {
            state.flags.note(Flag::LateWriteArrived);
        }
        match &request.op {
            Op::Create { owner } => {
                let key = self.key_of(request);
                let pk = Self::pk(key);
                let payload = Self::payload(key);
                let found = state.items[key as usize].as_ref().map(|k| &k.item);
                if !may_create(found, now) {
                    return Reply::Conflict(found.cloned());
                }
                // Replaced only past its TTL by true time (give or take the
                // clocks' bound).
                let latest_s = ms_to_s(self.latest_ms(state.now));
                if found.is_some_and(|item| item.expires_at_s >= latest_s) {
                    state.flags.note(Flag::LiveItemReplaced);
                }
                let claim = Self::claim_request(&pk, &payload, owner);
                let lease = Lease::claimed(pk.clone(), 1, config, now, &claim);
                let item = NewItem::started(&lease, claim, config, now).item();
                state.items[key as usize] = Some(Keyed {
                    item,
                    store_effects: 0,
                    outside_effects: 0,
                });
                Reply::Claimed(lease)
            }
            Op::TakeOver { owner, observed } => {
                let key = self.key_of(request);
                let Some(keyed) = state.items[key as usize].as_mut() else {
                    return Reply::Conflict(None);
                };
                if !may_take_over(&keyed.item, *observed, config, now) {
                    return Reply::Conflict(Some(keyed.item.clone()));
                }
                if !config.owns(keyed.item.scope.as_deref()) {
                    state.flags.note(Flag::OtherScopeTaken);
                }
                if keyed.item.status == Status::Completed {
                    state.flags.note(Flag::CompletedChanged);
                }
                // Taken only once its lease ran out by true time (give or
                // take the clocks' bound).
                if keyed.item.lock_expires_at_ms.unwrap_or(0) >= self.latest_ms(state.now) {
                    state.flags.note(Flag::LiveLeaseTaken);
                }
                let (pk, payload) = (Self::pk(key), Self::payload(key));
                let claim = Self::claim_request(&pk, &payload, owner);
                let lease = Lease::claimed(pk.clone(), observed + 1, config, now, &claim);
                // Versions only grow: one written again has two owners.
                if lease.version <= keyed.item.version {
                    state.flags.note(Flag::VersionReused);
                }
                transition::take_over(&mut keyed.item, &lease, config, now);
                Reply::Claimed(lease)
            }
            Op::Fenced { lease, write } => {
                let lease = lease.lease();
                let key = self.key_of(request);
                let slot = &mut state.items[key as usize];
                let found = slot.as_ref().map(|k| &k.item);
                if !fence_holds(found, &lease) {
                    let finishing = matches!(write, Write::Complete).then_some(Status::Completed);
                    return match lease.refused(finishing, found) {
                        Ok(_) => Reply::Made,
                        Err(_) => Reply::LockLost,
                    };
                }
                let Some(keyed) = slot.as_mut() else {
                    return Reply::LockLost;
                };
                state.flags.0 |= Self::accepted(keyed, &lease, config);
                match write {
                    Write::Complete => {
                        let outbox = self.outbox(key);
                        transition::complete(&mut keyed.item, None, outbox, config, now);
                    }
                    Write::Release => transition::extend(&mut keyed.item, 0, now),
                    Write::Extend { until_ms } => {
                        transition::extend(&mut keyed.item, *until_ms, now);
                    }
                }
                Reply::Made
            }
            Op::CommitNew { members } => {
                // ONE transaction: every member's key new, or nothing.
                for (index, (slot, _)) in members.iter().enumerate() {
                    let key = self.scope.workers[w as usize].keys[*slot as usize];
                    let found = state.items[key as usize].as_ref().map(|k| &k.item);
                    if !may_create(found, now) {
                        return Reply::KeyTaken {
                            index,
                            item: found.cloned(),
                        };
                    }
                }
                for (slot, owner) in members {
                    let key = self.scope.workers[w as usize].keys[*slot as usize];
                    let latest_s = ms_to_s(self.latest_ms(state.now));
                    let found = state.items[key as usize].as_ref().map(|k| &k.item);
                    if found.is_some_and(|item| item.expires_at_s >= latest_s) {
                        state.flags.note(Flag::LiveItemReplaced);
                    }
                    let pk = Self::pk(key);
                    let commit = Commit::<()> {
                        key: pk.clone(),
                        payload_hash: Self::payload(key),
                        origin: None,
                        owner: owner.clone(),
                        result: None,
                        effects: Effects {
                            outbox: self.outbox(key),
                            ..Effects::default()
                        },
                        held: None,
                    };
                    let item = NewItem::completed(&pk, &commit, config, now).item();
                    state.items[key as usize] = Some(Keyed {
                        item,
                        store_effects: 1,
                        outside_effects: 0,
                    });
                }
                Reply::Made
            }
            Op::Commit { members } => {
                // ONE transaction: every member's fence holds, or nothing.
                for (index, (_, lease)) in members.iter().enumerate() {
                    let key = Self::key_of_pk(&lease.pk);
                    let found = state.items[key as usize].as_ref().map(|k| &k.item);
                    if !fence_holds(found, &lease.lease()) {
                        return Reply::KeyTaken {
                            index,
                            item: found.cloned(),
                        };
                    }
                }
                for (_, lease) in members {
                    let lease = lease.lease();
                    let key = Self::key_of_pk(&lease.pk);
                    let Some(keyed) = state.items[key as usize].as_mut() else {
                        continue;
                    };
                    state.flags.0 |= Self::accepted(keyed, &lease, config);
                    let outbox = self.outbox(key);
                    transition::complete(&mut keyed.item, None, outbox, config, now);
                    keyed.store_effects += 1;
                }
                Reply::Made
            }
            Op::ClearOutbox { owner } => {
                let key = self.key_of(request);
                let slot = &mut state.items[key as usize];
                if !may_clear_outbox(slot.as_ref().map(|k| &k.item), owner) {
                    return Reply::LockLost;
                }
                if let Some(keyed) = slot.as_mut() {
                    keyed.item.outbox = None;
                }
                Reply::Made
            }
        }
    }

    /// What a fenced write accepted under `lease` says about the fence:
    /// the writer must be the item's owner (the last to claim or take it
    /// over), the item not yet COMPLETED, and its scope the writer's.
    fn accepted(
        keyed: &Keyed,
        lease: &Lease,
        config: &exactly_once_core::config::StoreConfig,
    ) -> u32 {
        let mut flags = 0;
        if lease.owner != keyed.item.owner {
            flags |= Flag::FencedOutWriteAccepted.bit();
        }
        if keyed.item.status == Status::Completed {
            flags |= Flag::CompletedChanged.bit();
        }
        if !config.owns(keyed.item.scope.as_deref()) {
            flags |= Flag::OtherScopeTaken.bit();
        }
        flags
    }

    /// The latest any worker's clock may read at true tick `now`.
    fn latest_ms(&self, now: u8) -> u64 {
        let bound = self
            .scope
            .workers
            .iter()
            .map(|w| w.skew_ms.unsigned_abs())
            .max();
        self.clock_at(now) + bound.unwrap_or(0)
    }

    /// The claim a worker's request makes.
    fn claim_request<'a>(pk: &'a str, payload: &'a str, owner: &'a str) -> ClaimRequest<'a> {
        ClaimRequest {
            key: pk,
            payload_hash: payload,
            origin: None,
            lease_cap_ms: None,
            owner: Some(owner),
        }
    }

    /// The key a claim or fenced write is about.
    fn key_of(&self, request: &Request) -> u8 {
        let (w, _, slot) = request.from;
        self.scope.workers[w as usize].keys[slot as usize]
    }

    /// The key index of `pk`.
    pub(super) fn key_of_pk(pk: &str) -> u8 {
        pk[1..].parse().unwrap_or(0)
    }
}
