//! The delivery phase's destination: a local HTTP server inside this process, on its own
//! thread and runtime (so the load generator's work does not delay its clock), that
//! answers every delivery `200` and records when each `webhook-id` first arrived. It
//! also checks what hookhost promises a destination: the Standard Webhooks signature and
//! a stable `idempotency-key` (a key seen twice is a duplicate delivery).

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The path deliveries are POSTed to.
pub const PATH: &str = "/deliveries";

/// How often `wait` looks at what arrived.
const POLL: Duration = Duration::from_millis(5);

/// What arrived.
#[derive(Debug, Default)]
pub struct Record {
    /// Since the last `reset`: the first arrival of each `webhook-id`.
    pub arrivals: HashMap<String, Instant>,
    /// Every delivery since the start, duplicates included.
    pub deliveries: u64,
    /// Deliveries whose `idempotency-key` had been seen before, since the start.
    pub duplicates: u64,
    /// Deliveries that broke the contract (no id, no key, a bad signature), by reason,
    /// since the start. They are answered 200 all the same.
    pub faults: BTreeMap<&'static str, u64>,
    keys: HashSet<String>,
}

impl Record {
    /// The latest first arrival since the last `reset`.
    pub fn last_arrival(&self) -> Option<Instant> {
        self.arrivals.values().max().copied()
    }

    fn fault(&mut self, what: &'static str) {
        *self.faults.entry(what).or_default() += 1;
    }
}

struct Shared {
    key: Vec<u8>,
    record: Mutex<Record>,
}

/// The running server; stopped (its runtime dropped) when this is dropped.
pub struct Downstream {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Downstream {
    /// Listen on a free loopback port; deliveries are checked against `key` (the
    /// destination secret's decoded bytes).
    pub fn start(key: &[u8]) -> anyhow::Result<Downstream> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .context("cannot bind the downstream's loopback port")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            key: key.to_vec(),
            record: Mutex::new(Record::default()),
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the downstream's runtime")?;
        let (stop, stopped) = oneshot::channel::<()>();
        let app = Router::new()
            .route(PATH, post(receive))
            .with_state(shared.clone());
        let thread = std::thread::Builder::new()
            .name("downstream".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(error) => {
                            eprintln!("downstream: {error}");
                            return;
                        }
                    };
                    // Returns when told to stop (or the sender is dropped); the runtime
                    // then goes, and the connections with it.
                    tokio::select! {
                        served = axum::serve(listener, app) => {
                            if let Err(error) = served {
                                eprintln!("downstream: {error}");
                            }
                        }
                        _ = stopped => {}
                    }
                });
            })
            .context("cannot start the downstream's thread")?;
        Ok(Downstream {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}{PATH}", self.addr)
    }

    pub fn record(&self) -> MutexGuard<'_, Record> {
        lock(&self.shared.record)
    }

    /// Forget the arrivals so far (duplicate and fault counts run on).
    pub fn reset(&self) {
        self.record().arrivals.clear();
    }

    /// Wait until `done` holds for what arrived, or `limit` passes; whether it held.
    pub async fn wait(&self, limit: Duration, mut done: impl FnMut(&Record) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if done(&self.record()) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for Downstream {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(()); // already gone is fine
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock(record: &Mutex<Record>) -> MutexGuard<'_, Record> {
    // A panic elsewhere cannot leave a count half-written: keep counting.
    record
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn receive(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let arrived = Instant::now();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let id = header("webhook-id");
    let signed = match (id, header("webhook-timestamp"), header("webhook-signature")) {
        (Some(id), Some(timestamp), Some(signatures)) => {
            signature_matches(&shared.key, id, timestamp, &body, signatures)
        }
        _ => false,
    };
    let mut record = lock(&shared.record);
    record.deliveries += 1;
    if !signed {
        record.fault("missing or invalid webhook-signature");
    }
    match header("idempotency-key") {
        Some(key) => {
            if !record.keys.insert(key.to_owned()) {
                record.duplicates += 1;
            }
        }
        None => record.fault("no idempotency-key"),
    }
    match id {
        Some(id) => {
            record.arrivals.entry(id.to_owned()).or_insert(arrived);
        }
        None => record.fault("no webhook-id"),
    }
    StatusCode::OK
}

/// Standard Webhooks: one of the space-separated `v1,<base64>` signatures is the
/// HMAC-SHA256 of `{id}.{timestamp}.{body}`.
fn signature_matches(key: &[u8], id: &str, timestamp: &str, body: &[u8], signatures: &str) -> bool {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return false;
    };
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    let expected = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    signatures
        .split(' ')
        .any(|s| s.strip_prefix("v1,") == Some(expected.as_str()))
}
