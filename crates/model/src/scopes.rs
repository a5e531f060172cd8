//! The scopes explored: each small enough to be explored whole, each aimed
//! at a part of the protocol ([`ci`]); bigger ones on demand ([`larger`]).

use crate::protocol::{Path, Scope, WorkerSpec};

fn worker(scope: &'static str, keys: &[u8], skew_ms: i64) -> WorkerSpec {
    WorkerSpec {
        scope,
        keys: keys.to_vec(),
        skew_ms,
    }
}

/// The base: leases of 2 ticks, items kept 60 ticks, a 4-tick deadline,
/// time up to tick 6, one re-send, two invocations per worker.
fn base(workers: Vec<WorkerSpec>, path: Path) -> Scope {
    Scope {
        workers,
        path,
        lease_ticks: 2,
        retention_ticks: 60,
        deadline_ticks: 4,
        horizon: 6,
        crashes: 0,
        faults: 0,
        destination_faults: 0,
        resends: 1,
        invocations: 2,
        shared_cache: true,
        emits: false,
    }
}

/// A named scope.
pub struct Named {
    /// Its name (`explore <name>`).
    pub name: &'static str,
    /// What it is for.
    pub about: &'static str,
    /// The scope.
    pub scope: Scope,
    /// The `sometimes` properties it must show (so that none of what it
    /// is for holds vacuously).
    pub shows: &'static [&'static str],
}

/// The scopes CI explores whole.
pub fn ci() -> Vec<Named> {
    vec![
        Named {
            name: "overlap",
            shows: &[
                "sometimes: a take-over",
                "sometimes: claims given back before a wait",
                "sometimes: a record known done from a cache",
                "sometimes: a redelivered batch ends finished",
                "sometimes: a store effect applied",
            ],
            about: "two containers, the same two keys in opposite orders, claims made ahead",
            scope: Scope {
                horizon: 4,
                deadline_ticks: 3,
                ..base(
                    vec![worker("fn-a", &[0, 1], 0), worker("fn-a", &[1, 0], 400)],
                    Path::Transactional,
                )
            },
        },
        Named {
            name: "crash",
            shows: &[
                "sometimes: a take-over",
                "sometimes: a late write arrives",
                "sometimes: a redelivered batch ends finished",
            ],
            about: "a crash at any step, a take-over, late writes of the crashed invocation",
            scope: Scope {
                crashes: 1,
                ..base(
                    vec![worker("fn-a", &[0], 0), worker("fn-a", &[0], -400)],
                    Path::Transactional,
                )
            },
        },
        Named {
            name: "faults",
            shows: &[
                "sometimes: a claim sent again finds its own item",
                "sometimes: a group commit sent again in halves",
                "sometimes: a completion sent again finds itself made",
                "sometimes: a late write arrives",
                "sometimes: a take-over",
            ],
            about: "requests lost, answers lost, requests duplicated or delayed past a re-send; group commits re-sent in halves",
            scope: Scope {
                faults: 1,
                horizon: 3,
                deadline_ticks: 3,
                ..base(
                    vec![worker("fn-a", &[0, 1], 0), worker("fn-a", &[0], 400)],
                    Path::Transactional,
                )
            },
        },
        Named {
            name: "outside",
            shows: &[
                "sometimes: a take-over",
                "sometimes: a late write arrives",
                "sometimes: an effect outside runs again, handed the same key",
            ],
            about: "effects outside the store (direct mode): completions alone, a crash",
            scope: Scope {
                crashes: 1,
                ..base(
                    vec![worker("fn-a", &[0], 0), worker("fn-a", &[0], 400)],
                    Path::Direct,
                )
            },
        },
        Named {
            name: "scopes",
            shows: &[
                "sometimes: another scope's key left alone",
                "sometimes: a crash between commit and answer",
                "sometimes: a take-over",
            ],
            about: "two functions sharing a table and a key, items kept 3 ticks, a crash, a fault",
            scope: Scope {
                crashes: 1,
                faults: 1,
                retention_ticks: 3,
                ..base(
                    vec![worker("fn-a", &[0], -400), worker("fn-b", &[0], 400)],
                    Path::Transactional,
                )
            },
        },
        Named {
            name: "lock-free",
            shows: &[
                "sometimes: a completion sent again finds itself made",
                "sometimes: a group commit sent again in halves",
                "sometimes: a record known done from a cache",
                "sometimes: a store effect applied",
            ],
            about: "the lock-free path: two containers, one key in common, group commits, a crash, a fault",
            scope: Scope {
                crashes: 1,
                faults: 1,
                ..base(
                    vec![worker("fn-a", &[0, 1], 0), worker("fn-a", &[1], 400)],
                    Path::LockFree,
                )
            },
        },
        Named {
            name: "outbox",
            shows: &[
                "sometimes: a crash between commit and send",
                "sometimes: a crash between send and clear",
                "sometimes: a duplicate finds messages left to send",
                "sometimes: a message sent again under its id",
                "sometimes: a redelivered batch ends finished",
            ],
            about: "each completion emits a message, kept on its item, sent after the commit, its outbox cleared; a crash, a fault of the destination (its answer or the request lost)",
            scope: Scope {
                crashes: 1,
                horizon: 4,
                destination_faults: 1,
                emits: true,
                ..base(
                    vec![worker("fn-a", &[0], 0), worker("fn-a", &[0], 400)],
                    Path::Transactional,
                )
            },
        },
        Named {
            name: "ttl",
            shows: &[
                "sometimes: a take-over",
                "sometimes: a store effect applied",
            ],
            about: "items kept 3 ticks: a key past its TTL claimed again beside its old holder",
            scope: Scope {
                crashes: 1,
                retention_ticks: 3,
                ..base(
                    vec![worker("fn-a", &[0], 0), worker("fn-a", &[0], 400)],
                    Path::Transactional,
                )
            },
        },
    ]
}

/// Bigger scopes, on demand (`cargo run --release -p exactly-once-model
/// --example explore -- <name>`).
pub fn larger() -> Vec<Named> {
    vec![Named {
        name: "three",
        shows: &[],
        about: "three containers over two keys, a crash and a fault",
        scope: Scope {
            crashes: 1,
            faults: 1,
            ..base(
                vec![
                    worker("fn-a", &[0, 1], 0),
                    worker("fn-a", &[1, 0], 400),
                    worker("fn-a", &[0], -400),
                ],
                Path::Transactional,
            )
        },
    }]
}
