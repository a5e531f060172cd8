//! The simulated network round trip for PostgreSQL: a loopback TCP proxy
//! that delays every chunk by half the round trip in each direction, in
//! order, so a pipeline of statements costs one round trip as it would over
//! a network. It counts the round trips: the client's sends that follow an
//! answer of the server (a pipeline counts once).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Tokio's timer rounds a sleep up to the next millisecond: waking half a
/// tick early makes the mean delay the one asked for.
const TIMER_ROUNDING: Duration = Duration::from_micros(500);

pub struct DelayProxy {
    pub port: u16,
    round_trips: Arc<AtomicU64>,
}

/// Which way a pipe copies, and what it tells the round-trip count.
#[derive(Clone)]
enum Side {
    /// Client to server: a send after an answer starts a round trip.
    Client {
        count: Arc<AtomicU64>,
        answered: Arc<AtomicBool>,
    },
    /// Server to client: an answer.
    Server { answered: Arc<AtomicBool> },
}

impl DelayProxy {
    /// Forwards a free loopback port to `target`, each direction delayed by
    /// `rtt / 2`.
    pub async fn start(target: String, rtt: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let round_trips = Arc::new(AtomicU64::new(0));
        let count = round_trips.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&target).await else {
                    continue;
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                let answered = Arc::new(AtomicBool::new(true));
                let client_side = Side::Client {
                    count: count.clone(),
                    answered: answered.clone(),
                };
                tokio::spawn(pipe(client_read, server_write, rtt / 2, client_side));
                tokio::spawn(pipe(
                    server_read,
                    client_write,
                    rtt / 2,
                    Side::Server { answered },
                ));
            }
        });
        Self { port, round_trips }
    }

    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }
}

/// Copies `from` to `to`, each chunk delayed by `delay`, in order.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration, side: Side) {
    let (send, mut receive) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = receive.recv().await {
            tokio::time::sleep_until(due.checked_sub(TIMER_ROUNDING).unwrap_or(due)).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
    });
    let mut buffer = vec![0u8; 64 * 1024];
    while let Ok(read @ 1..) = from.read(&mut buffer).await {
        match &side {
            Side::Client { count, answered } => {
                if answered.swap(false, Ordering::Relaxed) {
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
            Side::Server { answered } => answered.store(true, Ordering::Relaxed),
        }
        if send
            .send((Instant::now() + delay, buffer[..read].to_vec()))
            .is_err()
        {
            break;
        }
    }
    drop(send);
    let _ = writer.await;
}
