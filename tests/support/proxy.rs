//! A loopback TCP proxy in front of a store (DynamoDB Local, PostgreSQL,
//! Redis) that a test can cut and restore, to make the store "go away"
//! mid-batch; or that slows it down ([`Chaos`]): every request answered
//! late, new connections reset or held back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to the traffic besides forwarding it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Chaos {
    /// Every request waits this long (ms, drawn uniformly) before it is
    /// forwarded: a store under strain, answering each request late (a
    /// request is what the client sends after the store's last answer,
    /// however many reads it takes).
    pub delay_ms: Option<(u64, u64)>,
    /// A new connection is reset at once with this probability.
    pub reset: f64,
    /// A new connection waits this long (ms, drawn uniformly) before it is
    /// forwarded.
    pub connect_delay_ms: Option<(u64, u64)>,
}

impl Chaos {
    /// Every request answered `low` to `high` ms late.
    pub fn slow(low: u64, high: u64) -> Self {
        Self {
            delay_ms: Some((low, high)),
            ..Self::default()
        }
    }
}

fn draw((low, high): (u64, u64)) -> Duration {
    Duration::from_millis(fastrand::u64(low..=high.max(low)))
}

pub struct Proxy {
    pub port: u16,
    up: Arc<AtomicBool>,
    /// Dropping every open connection when the proxy is cut.
    generation: watch::Sender<u64>,
}

impl Proxy {
    /// Starts forwarding a free loopback port to `target` (host:port).
    pub async fn start(target: String) -> Self {
        Self::start_with(target, Chaos::default()).await
    }

    /// Starts forwarding a free loopback port to `target` (host:port), with
    /// `chaos`.
    pub async fn start_with(target: String, chaos: Chaos) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let up = Arc::new(AtomicBool::new(true));
        let (generation, _) = watch::channel(0u64);
        let (accept_up, accept_generation) = (up.clone(), generation.clone());
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if !accept_up.load(Ordering::SeqCst) || fastrand::f64() < chaos.reset {
                    continue; // refused, or reset: dropped at once
                }
                let target = target.clone();
                let mut cut = accept_generation.subscribe();
                tokio::spawn(async move {
                    if let Some(range) = chaos.connect_delay_ms {
                        tokio::time::sleep(draw(range)).await;
                    }
                    let Ok(outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    // The cut first: a request written after the cut must
                    // never be forwarded (unbiased, the copy could be polled
                    // first and forward it, and only its answer be lost).
                    tokio::select! {
                        biased;
                        _ = cut.changed() => {}
                        () = forward(inbound, outbound, chaos.delay_ms) => {}
                    }
                });
            }
        });
        Self {
            port,
            up,
            generation,
        }
    }

    /// The store unreachable: open connections die, new ones are dropped.
    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// Forwards both ways until either side closes; each request (the first
/// read after the store's last answer) waits a draw of `delay_ms` first.
async fn forward(inbound: TcpStream, outbound: TcpStream, delay_ms: Option<(u64, u64)>) {
    let (mut from_client, mut to_client) = inbound.into_split();
    let (mut from_store, mut to_store) = outbound.into_split();
    let answered = Arc::new(AtomicBool::new(true));
    let requests = {
        let answered = Arc::clone(&answered);
        async move {
            let mut buffer = vec![0u8; 64 * 1024];
            loop {
                let n = match from_client.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if let Some(range) = delay_ms
                    && answered.swap(false, Ordering::SeqCst)
                {
                    tokio::time::sleep(draw(range)).await;
                }
                if to_store.write_all(&buffer[..n]).await.is_err() {
                    break;
                }
            }
            let _ = to_store.shutdown().await;
        }
    };
    let answers = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let n = match from_store.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            answered.store(true, Ordering::SeqCst);
            if to_client.write_all(&buffer[..n]).await.is_err() {
                break;
            }
        }
        let _ = to_client.shutdown().await;
    };
    tokio::join!(requests, answers);
}
