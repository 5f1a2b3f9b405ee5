//! Crash safety against the real binary: SIGKILL (a) after receipts commit and before
//! any lease, (b) while holding leases before the downstream answers, (c) after the
//! downstream applied the event and before hookhost recorded the result. After a
//! restart every accepted event reaches the downstream, which, deduplicating by
//! idempotency key, applies each exactly once.

use crate::support::*;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Default)]
struct Downstream {
    /// Idempotency key → how many times it arrived.
    seen: Arc<Mutex<HashMap<String, usize>>>,
    /// While set, requests are applied and then never answered.
    stall: Arc<AtomicBool>,
}

impl Downstream {
    /// Serve on a free loopback port; returns it.
    async fn serve(&self) -> u16 {
        let app = axum::Router::new()
            .route("/apply", axum::routing::post(apply))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        port
    }
}

async fn apply(State(d): State<Downstream>, headers: HeaderMap) -> StatusCode {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    *d.seen.lock().expect("lock").entry(key).or_default() += 1;
    if d.stall.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    StatusCode::OK
}

/// Leases short enough that the crash test sees killed workers' leases expire.
const LEASE: &str = "lease_seconds = 2";

struct Receiver(Process);

impl Receiver {
    /// Start `hookhost serve` on a config written to `dir`; `downstream` is the
    /// destination's port (none: the endpoint has no destination, so nothing is ever
    /// leased); `delivery` adds to the `[delivery]` table.
    async fn start(dir: &std::path::Path, downstream: Option<u16>, delivery: &str) -> Receiver {
        let destination = downstream.map_or(String::new(), |p| {
            format!(
                "[endpoint.destination]\nurl = \"http://127.0.0.1:{p}/apply\"\nsecret = \"whsec_{}\"\n",
                b64(b"crash test destination key")
            )
        });
        let config = format!(
            "[delivery]\npoll_ms = 20\n{delivery}\n\
             [[endpoint]]\nid = \"stripe\"\nplugin = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n\
             retry_schedule_seconds = [0, 1, 1, 1, 1]\n{destination}"
        );
        Receiver(Process::start(dir, "hookhost", &config).await)
    }

    async fn accept(&self, id: &str) {
        let t = now();
        let body = stripe_event(id, "customer.updated", &format!("cus_{id}"), t);
        let headers = stripe_headers(&[STRIPE_SECRET], t, &body);
        let (status, answer) = request(
            self.0.addr,
            "POST",
            "/webhooks/stripe",
            &headers,
            body.into(),
        )
        .await;
        assert_eq!(
            (status, answer["status"].as_str()),
            (200, Some("accepted")),
            "{answer}"
        );
    }

    /// SIGKILL: no shutdown, no flush, no lease given back.
    fn kill(self) {
        self.0.kill();
    }

    fn stop(self) {
        let _ = self.0.terminate();
    }

    /// SIGTERM, and the exit status.
    fn terminate(self) -> std::process::ExitStatus {
        self.0.terminate().0
    }
}

async fn states(db: &std::path::Path) -> HashMap<String, String> {
    let mut conn = open_db(db).await;
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT event_id, state FROM receipts")
        .fetch_all(&mut conn)
        .await
        .expect("query");
    rows.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_accepted_event_is_applied_exactly_once_across_sigkills() {
    let downstream = Downstream::default();
    let downstream_port = downstream.serve().await;
    let dir = tempfile::tempdir().expect("dir");

    // (a) Receipts commit; no destination is configured yet, so nothing is leased. Kill.
    let receiver = Receiver::start(dir.path(), None, LEASE).await;
    receiver.accept("evt_a1").await;
    receiver.accept("evt_a2").await;
    receiver.kill();
    assert!(
        downstream.seen.lock().expect("lock").is_empty(),
        "nothing was leased before the kill"
    );

    // (b, c) The downstream applies what arrives but never answers: hookhost holds the
    // leases and never records a result. Kill while it waits.
    downstream.stall.store(true, Ordering::SeqCst);
    let receiver = Receiver::start(dir.path(), Some(downstream_port), LEASE).await;
    receiver.accept("evt_b1").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while downstream.seen.lock().expect("lock").len() < 3 {
        assert!(Instant::now() < deadline, "deliveries did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    receiver.kill();

    // Restart with a downstream that answers: expired leases are taken again.
    downstream.stall.store(false, Ordering::SeqCst);
    let receiver = Receiver::start(dir.path(), Some(downstream_port), LEASE).await;
    receiver.accept("evt_c1").await;
    let db = dir.path().join("hookhost.db");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let states = states(&db).await;
        if states.len() == 4 && states.values().all(|s| s == "delivered") {
            break;
        }
        assert!(Instant::now() < deadline, "not all delivered: {states:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    receiver.stop();

    // Every event reached the downstream; deduplicating by idempotency key, each is
    // applied once. Those in flight at the kill arrived twice with the same key.
    let seen = downstream.seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 4, "{seen:?}");
    for id in ["evt_a1", "evt_a2", "evt_b1"] {
        let key = hookhost::worker::idempotency_key("stripe", id);
        assert!(
            seen.get(&key).is_some_and(|n| *n >= 2),
            "{id} was in flight at the kill: {seen:?}"
        );
    }
    let key = hookhost::worker::idempotency_key("stripe", "evt_c1");
    assert_eq!(seen.get(&key), Some(&1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_waits_the_grace_period_then_leaves_the_cut_off_lease_to_expire() {
    let downstream = Downstream::default();
    downstream.stall.store(true, Ordering::SeqCst);
    let downstream_port = downstream.serve().await;
    let dir = tempfile::tempdir().expect("dir");

    let lease = "lease_seconds = 4\ngrace_seconds = 1";
    let receiver = Receiver::start(dir.path(), Some(downstream_port), lease).await;
    receiver.accept("evt_term").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while downstream.seen.lock().expect("lock").is_empty() {
        assert!(Instant::now() < deadline, "delivery did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The downstream applies the event and never answers: SIGTERM must still end the
    // process, cleanly, after the grace period.
    let started = Instant::now();
    let status = receiver.terminate();
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );

    // The attempt cut off may still be applied downstream: its lease is kept.
    let db = dir.path().join("hookhost.db");
    let (owner, expires_at_ms): (Option<String>, Option<i64>) = sqlx::query_as(
        "SELECT lease_owner, lease_expires_at_ms FROM receipts WHERE event_id = 'evt_term'",
    )
    .fetch_one(&mut open_db(&db).await)
    .await
    .expect("query");
    assert!(
        owner.is_some(),
        "the cut-off attempt's lease was given back"
    );
    let expires_at_ms = expires_at_ms.expect("lease expiry");

    // The next process sends it again only once that lease has expired.
    downstream.stall.store(false, Ordering::SeqCst);
    let receiver = Receiver::start(dir.path(), Some(downstream_port), lease).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while states(&db).await.get("evt_term").map(String::as_str) != Some("delivered") {
        assert!(
            Instant::now() < deadline,
            "the expired lease was not taken again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    receiver.stop();
    let (attempts, first_started_at_ms): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), MIN(started_at_ms) FROM attempts WHERE event_id = 'evt_term'",
    )
    .fetch_one(&mut open_db(&db).await)
    .await
    .expect("query");
    assert_eq!(attempts, 1, "only the next process's attempt is recorded");
    assert!(
        first_started_at_ms >= expires_at_ms,
        "sent again at {first_started_at_ms}, before the lease expired at {expires_at_ms}"
    );
    let key = hookhost::worker::idempotency_key("stripe", "evt_term");
    assert_eq!(downstream.seen.lock().expect("lock").get(&key), Some(&2));
}
