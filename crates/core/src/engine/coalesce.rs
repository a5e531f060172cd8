//! Copies of one key: the first runs, later ones wait for its outcome
//! instead of racing it for the lock. Inside one batch, and across the
//! invocations a container serves at once (Lambda Managed Instances; a
//! rebalance can hand the same records to two of them): while a key's
//! first copy runs anywhere in the container, a copy in another invocation
//! waits for it too, so the container never races itself for a key.
//!
//! No wait can close a circle: a copy waits only for a first copy
//! registered before it, and a lane registers its messages in its order, so
//! a first copy never waits behind a later copy of its own lane for
//! something registered after it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use super::Outcome;
use super::deadline::Deadline;

/// How the first copy of a key ended.
#[derive(Debug, Clone)]
pub struct Settled {
    pub payload_hash: String,
    pub finished: bool,
    /// The key's stored result, when it is COMPLETED.
    pub result: Option<Arc<str>>,
}

impl Settled {
    pub fn new(payload_hash: &str, outcome: &Outcome) -> Self {
        Self {
            payload_hash: payload_hash.to_owned(),
            finished: outcome.is_finished(),
            result: outcome.stored_result(),
        }
    }

    /// The stored result if a copy with `payload_hash` is a duplicate of
    /// this finished first copy; `None` if it must run on its own.
    pub fn duplicate_of(self, payload_hash: &str) -> Option<Option<Arc<str>>> {
        (self.finished && self.payload_hash == payload_hash).then_some(self.result)
    }
}

type Waiters = watch::Receiver<Option<Settled>>;

/// Whether this copy of a key runs first or waits.
pub enum Turn {
    First(FirstCopy),
    Later(Waiters),
}

/// The first copies of keys running in the container, every invocation's:
/// one per engine.
#[derive(Default)]
pub struct Running {
    keys: Mutex<HashMap<String, Waiters>>,
}

impl Running {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Waiters>> {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The first copy of a key: tells the later copies how it ended. Once it
/// has (or is dropped unsettled, its invocation gone), the key no longer
/// runs in the container.
pub struct FirstCopy {
    key: String,
    sender: watch::Sender<Option<Settled>>,
    running: Arc<Running>,
}

impl FirstCopy {
    /// Settles every copy waiting for it, in this batch or another.
    pub fn settle(&self, settled: Settled) {
        self.sender.send_replace(Some(settled));
    }
}

impl Drop for FirstCopy {
    fn drop(&mut self) {
        let mut running = self.running.lock();
        // Only its own entry: a later first copy may have taken the key.
        if running
            .get(&self.key)
            .is_some_and(|waiters| waiters.same_channel(&self.sender.subscribe()))
        {
            running.remove(&self.key);
        }
    }
}

/// The keys started in one batch (settled ones included: a later copy in
/// the batch is a duplicate of its finished first copy without a request).
pub struct InFlight {
    keys: Mutex<HashMap<String, Waiters>>,
    running: Arc<Running>,
}

impl InFlight {
    /// A batch's keys, in the container whose first copies are `running`.
    pub fn new(running: Arc<Running>) -> Self {
        Self {
            keys: Mutex::default(),
            running,
        }
    }

    pub fn turn(&self, key: &str) -> Turn {
        // Lock order: the batch's map, then the container's.
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(waiters) = keys.get(key) {
            return Turn::Later(waiters.clone());
        }
        let mut running = self.running.lock();
        if let Some(waiters) = running.get(key) {
            keys.insert(key.to_owned(), waiters.clone());
            return Turn::Later(waiters.clone());
        }
        let (sender, waiters) = watch::channel(None);
        keys.insert(key.to_owned(), waiters.clone());
        running.insert(key.to_owned(), waiters);
        Turn::First(FirstCopy {
            key: key.to_owned(),
            sender,
            running: Arc::clone(&self.running),
        })
    }
}

/// What waiting for a key's first copy came to.
pub enum Waited {
    /// It finished for the same payload: a duplicate, with its stored
    /// result.
    Duplicate(Option<Arc<str>>),
    /// It did not finish, was abandoned or had another payload: this copy
    /// runs on its own.
    OnItsOwn,
    /// This copy's invocation reached the point where running work is cut
    /// before the first copy settled (it runs in another invocation, whose
    /// deadline may be later): this copy does not start.
    Cut,
}

/// Waits for the first copy's outcome, at most until `deadline` cuts
/// running work.
pub async fn wait_for_first(
    mut waiters: Waiters,
    payload_hash: &str,
    deadline: &Deadline,
) -> Waited {
    let settled = tokio::select! {
        settled = waiters.wait_for(Option::is_some) => settled.ok().and_then(|settled| settled.clone()),
        () = deadline.cut() => return Waited::Cut,
    };
    match settled.and_then(|settled| settled.duplicate_of(payload_hash)) {
        Some(result) => Waited::Duplicate(result),
        None => Waited::OnItsOwn,
    }
}
