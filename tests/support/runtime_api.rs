//! A Lambda Runtime API stand-in for tests: starts a function binary the
//! way Lambda does (`AWS_LAMBDA_RUNTIME_API` and the Lambda environment),
//! hands it events (several at once when asked, as Lambda Managed
//! Instances do) and collects its answers, stdout (the EMF documents) and
//! stderr (the log lines). Also stands in for an OTLP/HTTP collector.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};

const PREFIX: &str = "/2018-06-01/runtime";

/// What the function answered for one event.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// `POST .../response`.
    Response(Value),
    /// `POST .../error`.
    Error(Value),
}

/// When an invocation was handed out and answered (for concurrency).
#[derive(Debug, Clone, Copy)]
pub struct Span {
    pub handed: Instant,
    pub answered: Instant,
}

/// An event to hand out: request id, body, deadline (epoch ms).
type Event = (String, Vec<u8>, u64);

/// Events waiting for an `invocation/next`, shared by every poll.
type Queue = Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Event>>>;

/// An invocation handed out: when, and who waits for its answer.
type Waiting = (Instant, oneshot::Sender<(Answer, Span)>);

#[derive(Default)]
struct State {
    /// Answers awaited, by request id.
    waiting: Mutex<HashMap<String, Waiting>>,
    /// `POST /init/error`'s body, if the function failed to start.
    init_error: Mutex<Option<Value>>,
    /// `invocation/next` polls waiting for an event.
    polling: std::sync::atomic::AtomicUsize,
}

/// The stand-in, listening on a loopback port.
pub struct RuntimeApi {
    address: SocketAddr,
    events: mpsc::UnboundedSender<Event>,
    state: Arc<State>,
}

impl RuntimeApi {
    /// Listens on a free loopback port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let (events, receiver) = mpsc::unbounded_channel();
        let receiver = Arc::new(tokio::sync::Mutex::new(receiver));
        let state = Arc::new(State::default());
        let served = Arc::clone(&state);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (state, receiver) = (Arc::clone(&served), Arc::clone(&receiver));
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        route(Arc::clone(&state), Arc::clone(&receiver), request)
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            address,
            events,
            state,
        }
    }

    /// `host:port`, for `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.address.to_string()
    }

    /// Hands `event` to the next `invocation/next` (deadline in
    /// `deadline`) and waits for its answer.
    pub async fn invoke(&self, event: &Value, deadline: Duration) -> (Answer, Span) {
        let request_id = uuid::Uuid::new_v4().to_string();
        let (sender, answer) = oneshot::channel();
        self.state
            .waiting
            .lock()
            .unwrap()
            .insert(request_id.clone(), (Instant::now(), sender));
        let deadline_ms = exactly_once::clock::now_ms() + deadline.as_millis() as u64;
        self.events
            .send((request_id, event.to_string().into_bytes(), deadline_ms))
            .expect("the stand-in is listening");
        answer.await.expect("the stand-in answers every event")
    }

    /// Waits (at most `within`) until `polls` `invocation/next` polls wait
    /// for an event: the function's workers, ready.
    pub async fn wait_for_polls(&self, polls: usize, within: Duration) {
        let started = Instant::now();
        while self.state.polling.load(std::sync::atomic::Ordering::SeqCst) < polls {
            assert!(
                started.elapsed() < within,
                "fewer than {polls} polls of invocation/next"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The function's init error, if it reported one.
    pub fn init_error(&self) -> Option<Value> {
        self.state.init_error.lock().unwrap().clone()
    }
}

async fn route(
    state: Arc<State>,
    events: Queue,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let Some(rest) = path.strip_prefix(PREFIX) else {
        return Ok(status(StatusCode::NOT_FOUND));
    };
    let parts: Vec<String> = rest
        .trim_matches('/')
        .split('/')
        .map(str::to_owned)
        .collect();
    if parts == ["invocation", "next"] {
        // One event per poll, in order; concurrent polls wait their turn.
        use std::sync::atomic::Ordering::SeqCst;
        state.polling.fetch_add(1, SeqCst);
        let next = events.lock().await.recv().await;
        state.polling.fetch_sub(1, SeqCst);
        let Some((request_id, body, deadline_ms)) = next else {
            return Ok(status(StatusCode::GONE));
        };
        if let Some((handed, _)) = state.waiting.lock().unwrap().get_mut(&request_id) {
            *handed = Instant::now();
        }
        let response = Response::builder()
            .header("content-type", "application/json")
            .header("lambda-runtime-aws-request-id", &request_id)
            .header("lambda-runtime-deadline-ms", deadline_ms.to_string())
            .header(
                "lambda-runtime-invoked-function-arn",
                "arn:aws:lambda:us-east-1:123456789012:function:msk-handler",
            )
            .header(
                "lambda-runtime-trace-id",
                "Root=1-00000000-000000000000000000000000;Sampled=0",
            )
            .body(Full::new(Bytes::from(body)))
            .expect("a response");
        return Ok(response);
    }
    let body = request
        .into_body()
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .unwrap_or_default();
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match parts.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["init", "error"] => *state.init_error.lock().unwrap() = Some(json),
        ["invocation", request_id, kind @ ("response" | "error")] => {
            let waiting = state.waiting.lock().unwrap().remove(request_id);
            if let Some((handed, sender)) = waiting {
                let answer = match kind {
                    "response" => Answer::Response(json),
                    _ => Answer::Error(json),
                };
                let span = Span {
                    handed,
                    answered: Instant::now(),
                };
                let _ = sender.send((answer, span));
            }
        }
        _ => return Ok(status(StatusCode::NOT_FOUND)),
    }
    Ok(status(StatusCode::ACCEPTED))
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    Response::builder()
        .status(code)
        .body(Full::new(Bytes::from_static(b"{}")))
        .expect("a response")
}

/// A function process served by a [`RuntimeApi`]: its stdout lines (EMF
/// documents, and the log lines) are kept.
pub struct Function {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    readers: Vec<tokio::task::JoinHandle<()>>,
}

impl Function {
    /// Starts `binary` against `api`, with the Lambda environment and
    /// `env` on top of this process's.
    pub fn start(binary: &Path, api: &RuntimeApi, env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(binary);
        command
            .env("AWS_LAMBDA_RUNTIME_API", api.address())
            .env("AWS_LAMBDA_FUNCTION_NAME", "msk-handler")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/msk-handler")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "2026/11/24/[$LATEST]test")
            .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("start the function");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        for stream in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        ]
        .into_iter()
        .flatten()
        {
            let lines = Arc::clone(&lines);
            readers.push(tokio::spawn(async move {
                let mut reader = BufReader::new(stream).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    lines.lock().unwrap().push(line);
                }
            }));
        }
        Self {
            child,
            lines,
            readers,
        }
    }

    /// Every line it wrote so far (stdout and stderr).
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Its EMF documents (the ones that count records), in the order
    /// written, once `at_least` of them are there or `within` has passed: a
    /// worker writes its document after posting the answer, so the last
    /// may trail the answers.
    pub async fn documents(&self, at_least: usize, within: Duration) -> Vec<serde_json::Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let docs: Vec<serde_json::Value> = self
                .lines()
                .iter()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .filter(|doc| doc.get("Records").is_some())
                .collect();
            if docs.len() >= at_least || tokio::time::Instant::now() >= deadline {
                return docs;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits (at most `within`) for it to exit, and for every line it
    /// wrote; its exit code.
    pub async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        let code = tokio::time::timeout(within, self.child.wait())
            .await
            .ok()
            .and_then(std::result::Result::ok)
            .and_then(|status| status.code());
        for reader in self.readers.drain(..) {
            let _ = tokio::time::timeout(within, reader).await;
        }
        code
    }
}

/// An OTLP/HTTP collector stand-in: counts the exports and keeps their bodies.
pub struct Collector {
    address: SocketAddr,
    bodies: Arc<Mutex<Vec<Bytes>>>,
}

impl Collector {
    /// Listens on a free loopback port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&bodies);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let kept = Arc::clone(&kept);
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let kept = Arc::clone(&kept);
                        async move {
                            let traces = request.uri().path() == "/v1/traces";
                            let body = request.into_body().collect().await;
                            if let (true, Ok(body)) = (traces, body) {
                                kept.lock().unwrap().push(body.to_bytes());
                            }
                            Ok::<_, Infallible>(status(StatusCode::OK))
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { address, bodies }
    }

    /// `http://host:port`, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Whether some export names `span` (protobuf keeps strings as UTF-8).
    pub fn has_span(&self, span: &str) -> bool {
        self.bodies.lock().unwrap().iter().any(|body| {
            body.windows(span.len())
                .any(|window| window == span.as_bytes())
        })
    }
}
