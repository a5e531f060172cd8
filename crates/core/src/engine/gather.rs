//! Group commit: what the lanes of a batch hand in at about the same moment
//! goes to the store together. The first hand-in starts a flusher; it lets
//! the other tasks run a few times (so that lanes ready at once meet), then
//! sends everything waiting, and goes on until nothing is. What is handed in
//! while a send is in flight waits for the next one: nothing waits longer
//! than the request before it. One flusher at a time per gatherer; it
//! stops with its batch ([`Gather::stop`]), so no request of a batch starts
//! after the batch is gone.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::task::AbortHandle;

use crate::store::requests;

/// Times the flusher lets other tasks run before it takes the queue.
const LINGER_YIELDS: usize = 3;

/// What sends a gathered lot (and answers everyone in it).
pub(super) type SendLot<T> =
    Arc<dyn Fn(Vec<T>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

struct Queue<T> {
    waiting: Vec<T>,
    flushing: bool,
    /// The latest flusher, stopped with its batch.
    flusher: Option<AbortHandle>,
}

/// A queue of hand-ins and the flusher that sends them.
pub(super) struct Gather<T> {
    queue: Mutex<Queue<T>>,
    send: SendLot<T>,
}

impl<T: Send + 'static> Gather<T> {
    /// A gatherer whose lots `send` sends.
    pub fn new(send: SendLot<T>) -> Arc<Self> {
        Arc::new(Self {
            queue: Mutex::new(Queue {
                waiting: Vec::new(),
                flushing: false,
                flusher: None,
            }),
            send,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Queue<T>> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Hands in `items`; a flusher sends them soon.
    pub fn hand_in(self: &Arc<Self>, items: impl IntoIterator<Item = T>) {
        let start_flusher = {
            let mut queue = self.lock();
            queue.waiting.extend(items);
            !queue.waiting.is_empty() && !std::mem::replace(&mut queue.flushing, true)
        };
        if start_flusher {
            let flusher = tokio::spawn(requests::inherit(Arc::clone(self).flush())).abort_handle();
            self.lock().flusher = Some(flusher);
        }
    }

    /// Stops the flusher: its batch is gone (the invocation ended or was
    /// dropped).
    pub fn stop(&self) {
        if let Some(flusher) = self.lock().flusher.take() {
            flusher.abort();
        }
    }

    /// Sends what is waiting until nothing is.
    async fn flush(self: Arc<Self>) {
        loop {
            for _ in 0..LINGER_YIELDS {
                tokio::task::yield_now().await;
            }
            let waiting = {
                let mut queue = self.lock();
                if queue.waiting.is_empty() {
                    queue.flushing = false;
                    return;
                }
                std::mem::take(&mut queue.waiting)
            };
            (self.send)(waiting).await;
        }
    }
}
