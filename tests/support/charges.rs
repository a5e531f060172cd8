//! A downstream payment API on loopback, the kind a handler on the locking
//! path calls: `POST /charges` with an `Idempotency-Key` header applies a
//! charge once per key (a repeated key gets the first answer back, as Stripe
//! and most payment APIs do) and counts what it applied, per payment.
//!
//! Plain HTTP/1.1 over tokio, one request per connection: enough for a test
//! double that must be real (a socket, another process), not a mock.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// What the API applied.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Idempotency keys seen (each applied its charge once).
    keys: HashSet<String>,
    /// Charges applied per payment id.
    applied: HashMap<String, u64>,
    /// Requests that came with a key already seen (answered, not applied).
    pub replays: u64,
}

/// The running API; stops when dropped.
pub struct ChargeApi {
    pub addr: SocketAddr,
    ledger: Arc<Mutex<Ledger>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ChargeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ChargeApi {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("address");
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let shared = Arc::clone(&ledger);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&shared)));
            }
        });
        Self { addr, ledger, task }
    }

    /// Charges applied for `payment`.
    pub fn charges(&self, payment: &str) -> u64 {
        let ledger = self.ledger.lock().expect("ledger");
        ledger.applied.get(payment).copied().unwrap_or(0)
    }

    /// Charges applied, of every payment.
    pub fn charged(&self) -> u64 {
        let ledger = self.ledger.lock().expect("ledger");
        ledger.applied.values().sum()
    }

    /// Payments charged more than once.
    pub fn double_charged(&self) -> Vec<String> {
        let ledger = self.ledger.lock().expect("ledger");
        let mut doubles: Vec<String> = ledger
            .applied
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(p, _)| p.clone())
            .collect();
        doubles.sort();
        doubles
    }

    pub fn replays(&self) -> u64 {
        self.ledger.lock().expect("ledger").replays
    }
}

async fn serve(stream: TcpStream, ledger: Arc<Mutex<Ledger>>) {
    let mut reader = BufReader::new(stream);
    let (mut key, mut length) = (None, 0usize);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            match name.trim().to_ascii_lowercase().as_str() {
                "idempotency-key" => key = Some(value.trim().to_owned()),
                "content-length" => length = value.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).await.is_err() {
        return;
    }
    let payment = String::from_utf8_lossy(&body).into_owned();
    let status = match key {
        None => "400 Bad Request",
        Some(key) => {
            let mut ledger = ledger.lock().expect("ledger");
            if ledger.keys.insert(key) {
                *ledger.applied.entry(payment).or_default() += 1;
            } else {
                ledger.replays += 1;
            }
            "200 OK"
        }
    };
    let response = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    let _ = reader.get_mut().write_all(response.as_bytes()).await;
}

/// `POST /charges` for `payment` with `Idempotency-Key: key`; Ok once the
/// API answered 200.
pub async fn charge(api: SocketAddr, key: &str, payment: &str) -> Result<(), String> {
    let mut stream = TcpStream::connect(api).await.map_err(|e| e.to_string())?;
    let request = format!(
        "POST /charges HTTP/1.1\r\nhost: {api}\r\nidempotency-key: {key}\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{payment}",
        payment.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    if answer.starts_with("HTTP/1.1 200") {
        Ok(())
    } else {
        Err(format!(
            "the charge API answered {:?}",
            answer.lines().next()
        ))
    }
}
