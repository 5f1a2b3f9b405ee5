//! Several hookhost processes on one PostgreSQL database: the real binary, twice, with
//! the same configuration. Exactly-once receipts, leasing and per-resource order must
//! hold across processes, and a killed process's leases must be taken over.

use crate::support::*;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Idempotency key → deliveries that arrived with it.
#[derive(Clone, Default)]
struct Downstream {
    seen: Arc<Mutex<HashMap<String, usize>>>,
}

impl Downstream {
    async fn serve(&self, delay: Duration) -> u16 {
        let app = axum::Router::new()
            .route("/apply", axum::routing::post(apply))
            .with_state((self.clone(), delay));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        port
    }

    fn counts(&self) -> HashMap<String, usize> {
        self.seen.lock().expect("lock").clone()
    }
}

async fn apply(State((d, delay)): State<(Downstream, Duration)>, headers: HeaderMap) -> StatusCode {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    *d.seen.lock().expect("lock").entry(key).or_default() += 1;
    tokio::time::sleep(delay).await;
    StatusCode::OK
}

/// `hookhost serve` on its own port, on `database`, delivering to `downstream`.
async fn start(
    dir: &std::path::Path,
    name: &str,
    database: &PgDatabase,
    downstream: u16,
) -> Process {
    let config = format!(
        "store = \"{}\"\n\
         [delivery]\nworkers = 8\npoll_ms = 20\nlease_seconds = 2\n\
         [[endpoint]]\nid = \"stripe\"\nplugin = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n\
         retry_schedule_seconds = [0, 1, 1, 1, 1]\n\
         [endpoint.destination]\nurl = \"http://127.0.0.1:{downstream}/apply\"\nsecret = \"whsec_{}\"\n",
        database.url(),
        b64(b"cluster test destination key"),
    );
    Process::start(dir, name, &config).await
}

/// A signed Stripe event for `id` on a resource of its own.
fn event(id: &str) -> (Vec<(&'static str, String)>, String) {
    let t = now();
    let body = stripe_event(id, "customer.updated", &format!("cus_{id}"), t);
    (stripe_headers(&[STRIPE_SECRET], t, &body), body)
}

async fn post(
    addr: std::net::SocketAddr,
    headers: &[(&str, String)],
    body: &str,
) -> (u16, serde_json::Value) {
    request(
        addr,
        "POST",
        "/webhooks/stripe",
        headers,
        body.to_owned().into(),
    )
    .await
}

/// Accept `ids` through the processes in turn, `concurrency` requests at a time.
async fn accept_all(processes: &[std::net::SocketAddr], ids: Vec<String>, concurrency: usize) {
    let ids = Arc::new(Mutex::new(ids.into_iter().enumerate().collect::<Vec<_>>()));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (ids, processes) = (ids.clone(), processes.to_vec());
        tasks.push(tokio::spawn(async move {
            loop {
                // The guard goes at the end of this statement, before any await.
                let Some((i, id)) = ids.lock().expect("lock").pop() else {
                    break;
                };
                let (headers, body) = event(&id);
                let (status, answer) = post(processes[i % processes.len()], &headers, &body).await;
                assert_eq!(
                    (status, answer["status"].as_str()),
                    (200, Some("accepted")),
                    "{id}: {answer}"
                );
            }
        }));
    }
    for task in tasks {
        task.await.expect("sender");
    }
}

/// Rows of `SELECT state, count(*)` in the test's database.
fn states(database: &PgDatabase) -> HashMap<String, i64> {
    let out = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            &database.name,
            "-tAF",
            ",",
        ])
        .args(["-c", "SELECT state, count(*) FROM receipts GROUP BY state"])
        .output()
        .expect("psql");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(','))
        .map(|(s, n)| (s.to_string(), n.trim().parse().unwrap_or(0)))
        .collect()
}

async fn wait_delivered(database: &PgDatabase, total: i64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let states = states(database);
        if states.get("delivered").copied().unwrap_or(0) == total && states.len() == 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not all {total} delivered: {states:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_event_fifty_times_across_two_processes_is_one_receipt_and_one_delivery() {
    let database = PgDatabase::create();
    let downstream = Downstream::default();
    let port = downstream.serve(Duration::ZERO).await;
    let dir = tempfile::tempdir().expect("dir");
    let a = start(dir.path(), "a", &database, port).await;
    let b = start(dir.path(), "b", &database, port).await;
    let (headers, body) = event("evt_same");
    let mut tasks = Vec::new();
    for i in 0..50 {
        let addr = if i % 2 == 0 { a.addr } else { b.addr };
        let (headers, body) = (headers.clone(), body.clone());
        tasks.push(tokio::spawn(
            async move { post(addr, &headers, &body).await },
        ));
    }
    let mut accepted = 0;
    for task in tasks {
        let (status, answer) = task.await.expect("request");
        assert_eq!(status, 200, "{answer}");
        match answer["status"].as_str() {
            Some("accepted") => accepted += 1,
            Some("duplicate") => {}
            other => panic!("unexpected answer {other:?}: {answer}"),
        }
    }
    assert_eq!(accepted, 1, "exactly one request was the first");
    wait_delivered(&database, 1, Duration::from_secs(30)).await;
    // Give a second (wrong) delivery time to show up before counting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let key = hookhost::worker::idempotency_key("stripe", "evt_same");
    assert_eq!(downstream.counts(), HashMap::from([(key, 1)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_drain_two_thousand_events_once_and_survive_a_sigkill() {
    let database = PgDatabase::create();
    let downstream = Downstream::default();
    // Each delivery takes a moment, so a drain lasts long enough to kill a process in it.
    let port = downstream.serve(Duration::from_millis(5)).await;
    let dir = tempfile::tempdir().expect("dir");
    let a = start(dir.path(), "a", &database, port).await;
    let b = start(dir.path(), "b", &database, port).await;

    // 1,000 events drained by both: every one delivered exactly once.
    let first: Vec<String> = (0..1000).map(|i| format!("evt_one_{i}")).collect();
    accept_all(&[a.addr, b.addr], first, 16).await;
    wait_delivered(&database, 1000, Duration::from_secs(120)).await;
    let counts = downstream.counts();
    assert_eq!(counts.len(), 1000);
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");

    // 1,000 more; SIGKILL one process mid-drain. The other takes over its leases
    // once they expire, and every event is delivered; only those the killed process
    // had in flight may arrive twice (with the same idempotency key).
    let second: Vec<String> = (0..1000).map(|i| format!("evt_two_{i}")).collect();
    accept_all(&[a.addr, b.addr], second, 16).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while downstream.counts().len() < 1200 {
        assert!(Instant::now() < deadline, "the drain did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.kill();
    wait_delivered(&database, 2000, Duration::from_secs(120)).await;
    let counts = downstream.counts();
    assert_eq!(counts.len(), 2000, "every event reached the downstream");
    let repeated = counts.values().filter(|n| **n > 1).count();
    // The killed process held at most its 8 workers' leases, and at most 16 answers
    // it had not recorded yet.
    assert!(repeated <= 24, "{repeated} events arrived twice");
    drop(b);
}
