//! A loopback TCP proxy in front of DynamoDB Local that a test can cut and
//! restore, to make DynamoDB "go away" mid-batch.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub port: u16,
    up: Arc<AtomicBool>,
    /// Dropping every open connection when the proxy is cut.
    generation: watch::Sender<u64>,
}

impl Proxy {
    /// Starts forwarding a free loopback port to `target` (host:port).
    pub async fn start(target: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let up = Arc::new(AtomicBool::new(true));
        let (generation, _) = watch::channel(0u64);
        let (accept_up, accept_generation) = (up.clone(), generation.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !accept_up.load(Ordering::SeqCst) {
                    continue; // refused: dropped at once
                }
                let target = target.clone();
                let mut cut = accept_generation.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    // The cut first: a request written after the cut must
                    // never be forwarded (unbiased, the copy could be polled
                    // first and forward it, and only its answer be lost).
                    tokio::select! {
                        biased;
                        _ = cut.changed() => {}
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
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

    /// DynamoDB unreachable: open connections die, new ones are dropped.
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
}
