//! Copies of one key inside one batch: the first runs, later ones wait for
//! its outcome instead of racing it for the lock.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

/// How the first copy of a key ended.
#[derive(Debug, Clone)]
pub struct Settled {
    pub payload_hash: String,
    pub finished: bool,
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

/// Waits for the first copy's outcome; `None` if it was abandoned.
pub async fn settled(mut receiver: watch::Receiver<Option<Settled>>) -> Option<Settled> {
    let settled = receiver.wait_for(Option::is_some).await.ok()?;
    settled.clone()
}
