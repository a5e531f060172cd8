//! Copies of one key inside one batch: the first runs, later ones wait for
//! its outcome instead of racing it for the lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::Outcome;

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

/// Whether this copy of a key runs first or waits.
pub enum Turn {
    First(watch::Sender<Option<Settled>>),
    Later(watch::Receiver<Option<Settled>>),
}

/// The keys started in one batch.
#[derive(Default)]
pub struct InFlight {
    keys: Mutex<HashMap<String, watch::Receiver<Option<Settled>>>>,
}

impl InFlight {
    pub fn turn(&self, key: &str) -> Turn {
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(receiver) = keys.get(key) {
            return Turn::Later(receiver.clone());
        }
        let (sender, receiver) = watch::channel(None);
        keys.insert(key.to_owned(), receiver);
        Turn::First(sender)
    }
}

/// The stored result if the copy with `payload_hash` is a duplicate of its
/// first copy (waited for); `None` if the first copy did not finish, was
/// abandoned or had another payload.
pub async fn duplicate_of(
    mut receiver: watch::Receiver<Option<Settled>>,
    payload_hash: &str,
) -> Option<Option<Arc<str>>> {
    let settled = receiver.wait_for(Option::is_some).await.ok()?.clone()?;
    settled.duplicate_of(payload_hash)
}
