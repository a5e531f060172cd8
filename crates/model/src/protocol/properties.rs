//! What must hold in every state the protocol reaches, and the companions
//! that show each is not kept vacuously.

use exactly_once_core::outbox::message_id;
use exactly_once_core::store::Status;

use super::{Action, Delivery, Keyed, Path, Phase, Protocol, Scope, Slot, State};
use crate::checker::{Expect, Model, On, Property};

/// What a step did (bits of [`State::flags`]): the first group breaks a
/// property, the second shows that a case happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    /// A fenced write was accepted from a worker not holding the key.
    FencedOutWriteAccepted,
    /// A take-over wrote a version already written (two owners of it).
    VersionReused,
    /// A COMPLETED item was changed.
    CompletedChanged,
    /// Another scope's item was taken over or written.
    OtherScopeTaken,
    /// Another scope's COMPLETED item was taken for a duplicate.
    OtherScopeSkipped,
    /// A record was answered done while its key was not finished.
    DoneNotFinished,
    /// A record was answered done while its messages were not accepted.
    DoneUnsent,
    /// A lease was taken over before it ran out.
    LiveLeaseTaken,
    /// An item was replaced before its TTL.
    LiveItemReplaced,
    /// An effect outside was handed another downstream key than before.
    DownstreamKeyChanged,
    /// An effect outside ran again, with the same downstream key.
    OutsideEffectAgain,
    /// A take-over was written.
    TookOver,
    /// A request arrived after its sender crashed or its invocation ended.
    LateWriteArrived,
    /// A crash fell between a completion written and its answer heard.
    CrashAfterCommit,
    /// A claim sent again found its own item.
    OwnClaimRecognised,
    /// A group commit was sent again in halves.
    SentInHalves,
    /// A commit sent again found its own completion made.
    OwnCommitRecognised,
    /// A record was known done from a cache.
    CacheHit,
    /// A claim found another scope's item and left it alone.
    OtherScopeRefused,
    /// A lane gave back a claim made ahead before waiting.
    GaveBack,
    /// A batch delivered again ended with nothing reported.
    RedeliveredFinished,
    /// A crash fell between a commit made and its messages sent.
    CrashBeforeSend,
    /// A crash fell between messages accepted and their outbox cleared.
    CrashBeforeClear,
    /// A claim found its key completed with messages left to send.
    LeftOverFound,
    /// The destination accepted a copy of a message it had.
    MessageCopy,
}

impl Flag {
    /// Its bit.
    pub fn bit(self) -> u32 {
        1 << self as u32
    }
}

fn seen(state: &State, flag: Flag) -> bool {
    state.flags.has(flag)
}

/// Every property, by name.
pub const PROPERTIES: &[Property<Protocol>] = &[
    Property {
        name: "a store effect applied at most once per key",
        on: On::State,
        expect: Expect::Always,
        holds: |_, s| s.items.iter().flatten().all(|k| k.store_effects <= 1),
    },
    Property {
        name: "no write of a fenced-out worker accepted",
        on: On::Step,
        expect: Expect::Always,
        holds: |_, s| !seen(s, Flag::FencedOutWriteAccepted) && !seen(s, Flag::VersionReused),
    },
    Property {
        name: "a lease taken over only once it ran out",
        on: On::Step,
        expect: Expect::Always,
        holds: |_, s| !seen(s, Flag::LiveLeaseTaken),
    },
    Property {
        name: "an item replaced only past its TTL",
        on: On::Step,
        expect: Expect::Always,
        holds: |_, s| !seen(s, Flag::LiveItemReplaced),
    },
    Property {
        name: "a record's downstream key the same on every attempt",
        on: On::Step,
        expect: Expect::Always,
        holds: |_, s| !seen(s, Flag::DownstreamKeyChanged),
    },
    Property {
        name: "each claim held by one worker",
        on: On::State,
        expect: Expect::Always,
        holds: |_, s| one_holder_per_claim(s),
    },
    Property {
        name: "a COMPLETED item never changes",
        on: On::Step,
        expect: Expect::Always,
        holds: |_, s| !seen(s, Flag::CompletedChanged),
    },
    Property {
        name: "another scope's key never taken, skipped or written",
        on: On::Step,
        expect: Expect::Always,
        holds: |_, s| !seen(s, Flag::OtherScopeTaken) && !seen(s, Flag::OtherScopeSkipped),
    },
    Property {
        name: "a record answered done only when its key is finished",
        on: On::Step,
        expect: Expect::Always,
        holds: |_, s| !seen(s, Flag::DoneNotFinished),
    },
    Property {
        name: "a message sent only for an effect applied",
        on: On::State,
        expect: Expect::Always,
        holds: |m, s| m.no_phantom(s),
    },
    Property {
        name: "a record answered done only once its messages were accepted",
        on: On::Step,
        expect: Expect::Always,
        holds: |_, s| !seen(s, Flag::DoneUnsent),
    },
    Property {
        name: "every copy of a record's message carries the same id",
        on: On::State,
        expect: Expect::Always,
        holds: |m, s| m.stable_ids(s),
    },
    Property {
        name: "no circular wait between live workers",
        on: On::State,
        expect: Expect::Always,
        holds: |m, s| !m.circular_wait(s),
    },
    Property {
        name: "every record ends finished once faults stop",
        on: On::State,
        expect: Expect::Always,
        holds: |m, s| s.now < m.scope.horizon || m.finishes_calmly(s),
    },
    Property {
        name: "sometimes: a take-over",
        on: On::Step,
        expect: Expect::Sometimes,
        holds: |_, s| seen(s, Flag::TookOver),
    },
    Property {
        name: "sometimes: a late write arrives",
        on: On::Step,
        expect: Expect::Sometimes,
        holds: |_, s| seen(s, Flag::LateWriteArrived),
    },
    Property {
        name: "sometimes: a crash between commit and answer",
        on: On::Step,
        expect: Expect::Sometimes,
        holds: |_, s| seen(s, Flag::CrashAfterCommit),
    },
    Property {
        name: "sometimes: a claim sent again finds its own item",
        on: On::Step,
        expect: Expect::Sometimes,
        holds: |_, s| seen(s, Flag::OwnClaimRecognised),
    },
    Property {
        name: "sometimes: a completion sent again finds itself made",
        on: On::Step,
        expect: Expect::Sometimes,
        holds: |_, s| seen(s, Flag::OwnCommitRecognised),
    },
    Property {
        name: "sometimes: a group commit sent again in halves",
        on: On::Step,
        expect: Expect::Sometimes,
        holds: |_, s| seen(s, Flag::SentInHalves),
    },
    Property {
        name: "sometimes: a record known done from a cache",
        on: On::Step,
        expect: Expect::Sometimes,
        holds: |_, s| seen(s, Flag::CacheHit),
    },
    Property {
        name: "sometimes: another scope's key left alone",
        on: On::Step,
        expect: Expect::Sometimes,
        holds: |_, s| seen(s, Flag::OtherScopeRefused),
    },
    Property {
        name: "sometimes: claims given back before a wait",
        on: On::Step,
        expect: Expect::Sometimes,
        holds: |_, s| seen(s, Flag::GaveBack),
    },
    Property {
        name: "sometimes: a redelivered batch ends finished",
        on: On::Step,
        expect: Expect::Sometimes,
        holds: |_, s| seen(s, Flag::RedeliveredFinished),
    },
    Property {
        name: "sometimes: an effect outside runs again, handed the same key",
        on: On::Step,
        expect: Expect::Sometimes,
        holds: |_, s| seen(s, Flag::OutsideEffectAgain),
    },
    Property {
        name: "sometimes: a crash between commit and send",
        on: On::Step,
        expect: Expect::Sometimes,
        holds: |_, s| seen(s, Flag::CrashBeforeSend),
    },
    Property {
        name: "sometimes: a crash between send and clear",
        on: On::Step,
        expect: Expect::Sometimes,
        holds: |_, s| seen(s, Flag::CrashBeforeClear),
    },
    Property {
        name: "sometimes: a duplicate finds messages left to send",
        on: On::Step,
        expect: Expect::Sometimes,
        holds: |_, s| seen(s, Flag::LeftOverFound),
    },
    Property {
        name: "sometimes: a message sent again under its id",
        on: On::Step,
        expect: Expect::Sometimes,
        holds: |_, s| seen(s, Flag::MessageCopy),
    },
    Property {
        name: "sometimes: a store effect applied",
        on: On::State,
        expect: Expect::Sometimes,
        holds: |m, s| {
            m.scope.path != Path::Direct && s.items.iter().flatten().any(|k| k.store_effects == 1)
        },
    },
];

/// Whether no two workers hold a lease of the same owner token.
fn one_holder_per_claim(state: &State) -> bool {
    let mut owners: Vec<&str> = state
        .workers
        .iter()
        .flat_map(|w| &w.slots)
        .filter_map(|slot| match slot {
            Slot::Held(lease) | Slot::Ran(lease) | Slot::Completing { lease, .. } => {
                Some(lease.owner.as_str())
            }
            _ => None,
        })
        .collect();
    let held = owners.len();
    owners.sort_unstable();
    owners.dedup();
    owners.len() == held
}

/// Whether `keyed`'s effect applied: its item COMPLETED, with its effect
/// (in the store, or run outside).
fn applied(keyed: &Keyed) -> bool {
    keyed.item.status == Status::Completed && keyed.store_effects + keyed.outside_effects > 0
}

impl Protocol {
    /// Whether every message the destination accepted is one of a record
    /// whose effect applied (judged on its key's item: a scope that emits
    /// keeps its items past its horizon).
    fn no_phantom(&self, state: &State) -> bool {
        state.destination.iter().all(|delivered| {
            self.message_of(&delivered.body)
                .and_then(|(key, _)| state.items[key as usize].as_ref())
                .is_some_and(applied)
        })
    }

    /// Whether every message the destination accepted carries the id of
    /// its key and place ([`message_id`]), whichever attempt sent it.
    fn stable_ids(&self, state: &State) -> bool {
        state.destination.iter().all(|delivered| {
            self.message_of(&delivered.body)
                .is_some_and(|(key, place)| delivered.id == message_id(&Self::pk(key), place))
        })
    }

    /// Whether some live workers wait in a circle: each one's head waits on
    /// a key that another live worker holds (ahead of its own head, renewing
    /// it), so that only a deadline ends the wait.
    pub fn circular_wait(&self, state: &State) -> bool {
        let waits_on = |w: usize| -> Option<usize> {
            let worker = &state.workers[w];
            if !matches!(worker.phase, Phase::Running { .. }) {
                return None;
            }
            let head = worker
                .slots
                .iter()
                .position(|s| matches!(s, Slot::Waiting { .. }))?;
            let key = self.scope.workers[w].keys[head] as usize;
            let item = &state.items[key].as_ref()?.item;
            if item.status != Status::Started {
                return None;
            }
            (0..state.workers.len()).find(|&v| {
                v != w
                    && matches!(state.workers[v].phase, Phase::Running { .. })
                    && state.workers[v]
                        .slots
                        .iter()
                        .any(|s| matches!(s, Slot::Held(l) if l.owner == item.owner))
            })
        };
        (0..state.workers.len()).any(|start| {
            let mut at = start;
            for _ in 0..state.workers.len() {
                match waits_on(at) {
                    Some(next) if next == start => return true,
                    Some(next) => at = next,
                    None => return false,
                }
            }
            false
        })
    }

    /// Whether, from `state`, with no more faults or crashes and time going
    /// on, every record ends answered done (the event source mapping
    /// delivering what was reported again), but another scope's, and every
    /// effect applied has its messages accepted.
    pub fn finishes_calmly(&self, state: &State) -> bool {
        let calm = Protocol::new(Scope {
            horizon: u8::MAX,
            invocations: self.scope.invocations + 6,
            crashes: 0,
            faults: 0,
            destination_faults: 0,
            ..self.scope.clone()
        });
        let mut state = state.clone();
        let mut actions = Vec::new();
        for _ in 0..400 {
            if calm.all_done(&state) {
                return true;
            }
            actions.clear();
            calm.actions(&state, &mut actions);
            let Some(action) = actions.iter().min_by_key(|a| calm_rank(a)) else {
                return false;
            };
            match calm.next(&state, action) {
                Some(next) => state = next,
                None => return false,
            }
        }
        false
    }

    /// Whether every worker answered each of its records done, but those
    /// whose key another scope holds (never this function's to run: they
    /// are reported until an operator tells the functions' keys apart), and
    /// the destination accepted the messages of every effect applied.
    fn all_done(&self, state: &State) -> bool {
        let sent = state.items.iter().enumerate().all(|(key, keyed)| {
            keyed.as_ref().is_none_or(|k| !applied(k)) || self.delivered(state, key as u8)
        });
        sent && state.workers.iter().enumerate().all(|(w, worker)| {
            self.scope.workers[w]
                .keys
                .iter()
                .enumerate()
                .all(|(index, key)| {
                    worker.done & (1 << index) != 0
                        || state.items[*key as usize]
                            .as_ref()
                            .is_some_and(|k| !self.configs[w].owns(k.item.scope.as_deref()))
                })
        })
    }
}

/// The order a calm continuation prefers steps in: the store answers,
/// workers go on, time passes last.
fn calm_rank(action: &Action) -> u8 {
    match action {
        Action::Apply { answer: true, .. } => 0,
        Action::Flush(_) | Action::Send(_, Delivery::Accepted) | Action::Clear(_) => 1,
        Action::Start(_) | Action::Reclaim(_) | Action::Resend(..) => 2,
        Action::Renew(..) => 3,
        Action::Tick => 4,
        Action::Apply { .. }
        | Action::Lose(_)
        | Action::Delay(_)
        | Action::Crash(_)
        | Action::Send(..) => 5,
    }
}
