//! Delivery to a real downstream server on loopback: retries, quarantine, dead
//! letters, Retry-After, the destination's signature, and leases that expire.
//! `https` repeats the essentials over TLS.

mod https;

use crate::support::*;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use hookhost::store::{AttemptRecord, Next, ReceiptRow};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DESTINATION_KEY: &[u8] = b"destination signing key 32 bytes";

/// One request the downstream received.
#[derive(Debug, Clone)]
pub struct Received {
    pub at: Instant,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

/// Scripted answers: status and optional `Retry-After` seconds, in order.
type Script = HashMap<String, VecDeque<(u16, Option<u64>)>>;

/// A downstream whose answers are scripted per `webhook-id` (then 200).
#[derive(Clone, Default)]
pub struct Downstream {
    script: Arc<Mutex<Script>>,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Downstream {
    pub async fn start() -> (Downstream, u16) {
        let downstream = Downstream::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let app = downstream.router();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (downstream, port)
    }

    /// `POST /hook`, answered by [`answer`].
    fn router(&self) -> axum::Router {
        axum::Router::new()
            .route("/hook", axum::routing::post(answer))
            .with_state(self.clone())
    }

    fn script(&self, event_id: &str, answers: &[(u16, Option<u64>)]) {
        let mut script = self.script.lock().expect("lock");
        script.insert(event_id.to_string(), answers.iter().copied().collect());
    }

    pub fn received(&self, event_id: &str) -> Vec<Received> {
        let received = self.received.lock().expect("lock");
        received
            .iter()
            .filter(|r| r.headers.get("webhook-id").is_some_and(|v| v == event_id))
            .cloned()
            .collect()
    }
}

async fn answer(
    State(downstream): State<Downstream>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> (StatusCode, HeaderMap) {
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    downstream.received.lock().expect("lock").push(Received {
        at: Instant::now(),
        headers,
        body: body.to_vec(),
    });
    let next = downstream
        .script
        .lock()
        .expect("lock")
        .get_mut(&id)
        .and_then(VecDeque::pop_front);
    let (status, retry_after) = next.unwrap_or((200, None));
    let mut reply = HeaderMap::new();
    if let Some(seconds) = retry_after {
        reply.insert("retry-after", seconds.to_string().parse().expect("header"));
    }
    (StatusCode::from_u16(status).expect("status"), reply)
}

async fn start(port: u16, schedule: &str) -> Server {
    Server::start(&config(
        &format!("http://127.0.0.1:{port}/hook"),
        schedule,
        "",
    ))
    .await
}

/// A Stripe endpoint delivering to `url`; `extra` adds keys to its destination.
fn config(url: &str, schedule: &str, extra: &str) -> String {
    format!(
        "[delivery]\nworkers = 4\npoll_ms = 20\nlease_seconds = 30\n\
         [[endpoint]]\nid = \"stripe\"\nplugin = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n\
         retry_schedule_seconds = {schedule}\n\
         [endpoint.destination]\nurl = \"{url}\"\nsecret = \"whsec_{}\"\n{extra}",
        b64(DESTINATION_KEY)
    )
}

async fn accept(server: &Server, id: &str) -> String {
    let t = now();
    let body = stripe_event(id, "customer.updated", &format!("cus_{id}"), t);
    let (status, answer) = server.post_stripe(&[STRIPE_SECRET], t, &body).await;
    assert_eq!(
        (status, answer["status"].as_str()),
        (200, Some("accepted")),
        "{answer}"
    );
    body
}

/// Pause or resume the `stripe` endpoint's delivery.
async fn set_paused(server: &Server, paused: bool) {
    server
        .app
        .store
        .set_paused("stripe", paused, 0)
        .await
        .expect("pause or resume");
}

/// Poll the store until the receipt reaches `state` (20 s at most).
async fn settled(server: &Server, id: &str, state: &str) -> ReceiptRow {
    let within = Duration::from_secs(20);
    server
        .receipt_once("stripe", id, within, |row| row.state == state)
        .await
}

crate::both_stores! {
async fn failures_are_retried_and_every_attempt_carries_the_same_identity() {
    let (downstream, port) = Downstream::start().await;
    let server = start(port, "[0, 0, 0]").await;
    downstream.script("evt_flaky", &[(503, None), (503, None)]);
    let body = accept(&server, "evt_flaky").await;

    let row = settled(&server, "evt_flaky", "delivered").await;
    assert_eq!(row.attempts, 3);
    let attempts = server
        .app
        .store
        .attempts("stripe", "evt_flaky")
        .await
        .expect("attempts");
    let statuses: Vec<Option<i64>> = attempts.iter().map(|a| a.1).collect();
    assert_eq!(statuses, vec![Some(503), Some(503), Some(200)]);

    let seen = downstream.received("evt_flaky");
    assert_eq!(seen.len(), 3);
    let key = seen[0]
        .headers
        .get("idempotency-key")
        .expect("idempotency-key")
        .clone();
    for request in &seen {
        let h = &request.headers;
        assert_eq!(request.body, body.as_bytes(), "the original raw body");
        assert_eq!(h.get("idempotency-key"), Some(&key));
        assert_eq!(
            h.get("content-type").expect("content type"),
            "application/json"
        );
        assert_eq!(h.get("hookhost-endpoint").expect("endpoint"), "stripe");
        assert_eq!(h.get("hookhost-provider").expect("provider"), "stripe");
        assert_eq!(
            h.get("hookhost-event-type").expect("type"),
            "customer.updated"
        );
        assert_eq!(
            h.get("hookhost-resource").expect("resource"),
            "customer/cus_evt_flaky"
        );
        // Standard Webhooks, with the destination's own key.
        let ts = h
            .get("webhook-timestamp")
            .and_then(|v| v.to_str().ok())
            .expect("timestamp");
        let signed = format!("evt_flaky.{ts}.");
        let expected = b64(&hmac_sha256(
            DESTINATION_KEY,
            &[signed.as_bytes(), &request.body],
        ));
        assert_eq!(
            h.get("webhook-signature").expect("signature"),
            &format!("v1,{expected}")
        );
    }
}
}

crate::both_stores! {
async fn a_refusal_is_quarantined_and_endless_failure_is_a_dead_letter() {
    let (downstream, port) = Downstream::start().await;
    let server = start(port, "[0, 0, 0]").await;
    downstream.script("evt_gone", &[(404, None)]);
    downstream.script("evt_broken", &[(500, None); 10]);
    accept(&server, "evt_gone").await;
    accept(&server, "evt_broken").await;

    let gone = settled(&server, "evt_gone", "quarantined").await;
    assert_eq!(
        (gone.attempts, gone.last_error.as_deref()),
        (1, Some("HTTP 404"))
    );
    let dead = settled(&server, "evt_broken", "dead").await;
    assert_eq!(
        (dead.attempts, dead.last_error.as_deref()),
        (3, Some("HTTP 500"))
    );
    // The dead letter keeps its evidence: body, headers, every attempt.
    assert!(!dead.body.is_empty() && dead.headers.contains("stripe-signature"));
    assert_eq!(
        server
            .app
            .store
            .attempts("stripe", "evt_broken")
            .await
            .expect("attempts")
            .len(),
        3
    );
    // Nothing more is tried once the schedule is spent.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(downstream.received("evt_broken").len(), 3);
    assert_eq!(downstream.received("evt_gone").len(), 1);
}
}

crate::both_stores! {
async fn retry_after_is_honoured() {
    let (downstream, port) = Downstream::start().await;
    let server = start(port, "[0, 0, 0]").await;
    downstream.script("evt_slow_down", &[(429, Some(1))]);
    accept(&server, "evt_slow_down").await;
    settled(&server, "evt_slow_down", "delivered").await;
    let seen = downstream.received("evt_slow_down");
    assert_eq!(seen.len(), 2);
    let gap = seen[1].at - seen[0].at;
    assert!(
        gap >= Duration::from_millis(950),
        "second attempt after {gap:?}"
    );
}
}

crate::both_stores! {
async fn a_status_in_time_is_the_answer_whatever_its_body_then_does() {
    // A destination that answers 200, promises a 100-byte body, sends 10 bytes and
    // holds the connection: the status is what the attempt is judged by.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let requests: Arc<Mutex<usize>> = Arc::default();
    let seen = requests.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut held = Vec::new();
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut head = vec![0; 64 * 1024];
            if socket.read(&mut head).await.is_ok() {
                *seen.lock().expect("lock") += 1;
                let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789";
                let _ = socket.write_all(answer).await;
            }
            held.push(socket);
        }
    });
    let url = format!("http://127.0.0.1:{port}/hook");
    let server = Server::start(&config(&url, "[0, 0, 0]", "timeout_ms = 500\n")).await;
    accept(&server, "evt_trickle").await;
    settled(&server, "evt_trickle", "delivered").await;
    let attempts = server
        .app
        .store
        .attempts("stripe", "evt_trickle")
        .await
        .expect("attempts");
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0].1, Some(200));
    assert_eq!(*requests.lock().expect("lock"), 1);
}
}

crate::both_stores! {
async fn an_attempt_slower_than_its_lease_is_given_up_while_the_lease_holds() {
    // A destination that takes connections and never answers; the attempt's own
    // timeout (15 s by default) is far longer than the 3 s lease.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let seen = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            seen.lock().expect("lock").push(Instant::now());
            held.push(socket);
        }
    });
    let text = config(&format!("http://127.0.0.1:{port}/hook"), "[0, 0]", "")
        .replace("lease_seconds = 30", "lease_seconds = 3");
    let server = Server::start(&text).await;
    accept(&server, "evt_slow").await;
    settled(&server, "evt_slow", "dead").await;
    // Each attempt ended at three quarters of the lease and was recorded under it; the
    // next began only after: never two at once, never an expired lease's leftovers.
    let attempts = server
        .app
        .store
        .attempts("stripe", "evt_slow")
        .await
        .expect("attempts");
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    for (_, status, error) in &attempts {
        assert_eq!(*status, None);
        let error = error.as_deref().unwrap_or_default();
        assert!(error.starts_with("no answer within "), "{error}");
        assert!(error.contains("by three quarters of the lease"), "{error}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let accepted = accepted.lock().expect("lock").clone();
    assert_eq!(accepted.len(), 2, "one connection per attempt");
    let gap = accepted[1] - accepted[0];
    assert!(gap >= Duration::from_millis(2_000), "second attempt after {gap:?}");
}
}

crate::both_stores! {
async fn a_stored_body_that_does_not_open_is_quarantined_not_retried() {
    let (downstream, port) = Downstream::start().await;
    let server = start(port, "[0, 0, 0]").await;
    // A body marked sealed that no key opens (no [tenancy] here; an altered row would
    // do the same): it can never be sent.
    let mut receipt = new_receipt("evt_sealed", "cus_sealed", Some(1), now() * 1000);
    receipt.body = [hookhost::tenancy::SEALED_BODY, b"not a sealed body".as_slice()].concat();
    server.app.store.record(receipt).await.expect("record");
    let row = settled(&server, "evt_sealed", "quarantined").await;
    let error = row.last_error.unwrap_or_default();
    assert!(error.starts_with("the sealed body does not open: "), "{error}");
    let attempts = server
        .app
        .store
        .attempts("stripe", "evt_sealed")
        .await
        .expect("attempts");
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert!(downstream.received("evt_sealed").is_empty());
}
}

crate::both_stores! {
async fn a_lease_that_expires_lets_another_worker_take_the_event() {
    // No destination: the server's own workers leave the event alone.
    let server = Server::start(&stripe_config("")).await;
    accept(&server, "evt_leased").await;
    let store = &server.app.store;
    let endpoints = vec!["stripe".to_string()];
    // One base instant: reading the clock per call could cross a second boundary
    // and put worker-b's "100 ms later" past the lease.
    let base_ms = now() * 1000;
    let now = |extra_ms: i64| base_ms + extra_ms;
    let lease = Duration::from_millis(500);
    let first = store
        .lease_due("worker-a", &endpoints, now(0), lease, 10)
        .await
        .expect("lease");
    assert_eq!(first.len(), 1);
    // Held: nobody else gets it.
    assert!(
        store
            .lease_due("worker-b", &endpoints, now(100), lease, 10)
            .await
            .expect("lease")
            .is_empty()
    );
    // worker-a died; once the lease expires worker-b takes it.
    let second = store
        .lease_due("worker-b", &endpoints, now(2_000), lease, 10)
        .await
        .expect("lease");
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].event_id, "evt_leased");
}
}

crate::both_stores! {
async fn events_of_one_resource_received_in_the_same_millisecond_are_leased_one_at_a_time() {
    // No destination: the server's own workers leave the events alone.
    let server = Server::start(&stripe_config("")).await;
    let store = &server.app.store;
    let now_ms = now() * 1000;
    // Same resource, no version, same arrival: the event id breaks the tie.
    for id in ["evt_tie_b", "evt_tie_a"] {
        store
            .record(new_receipt(id, "cus_tie", None, now_ms))
            .await
            .expect("record");
    }
    let endpoints = vec!["stripe".to_string()];
    let lease = Duration::from_secs(60);
    let first = store
        .lease_due("w", &endpoints, now_ms, lease, 10)
        .await
        .expect("lease");
    let ids: Vec<&str> = first.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, ["evt_tie_a"]);
    // While it is in flight its twin waits.
    let held = store
        .lease_due("w", &endpoints, now_ms + 1, lease, 10)
        .await
        .expect("lease");
    assert!(held.is_empty(), "{held:?}");
}
}

crate::both_stores! {
async fn at_one_version_a_delete_is_delivered_after_the_event_accepted_before_it() {
    // No destination: the server's own workers leave the events alone.
    let server = Server::start(&stripe_config("")).await;
    let store = &server.app.store;
    let now_ms = now() * 1000;
    // The update's plugin call ended first, so the gate took it first; the delete,
    // received earlier, then tombstoned version 5. (Judged the other way round, the
    // update would have been refused as deleted.)
    let update = new_receipt("evt_update", "cus_same", Some(5), now_ms);
    let mut delete = new_receipt("evt_delete", "cus_same", Some(5), now_ms - 2);
    delete.resource.as_mut().expect("a resource").deleted = true;
    for receipt in [update, delete] {
        assert_eq!(
            store.record(receipt).await.expect("record"),
            hookhost::store::Outcome::Accepted
        );
    }
    let endpoints = vec!["stripe".to_string()];
    let lease = Duration::from_secs(60);
    let first = store
        .lease_due("w", &endpoints, now_ms + 1, lease, 10)
        .await
        .expect("lease");
    let ids: Vec<&str> = first.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, ["evt_update"], "the delete must not bring the object back");
}
}

/// Lease the Stripe endpoint's due events `rounds` times (a round takes each
/// resource's next event) and finish each as answered 200, in the state `next` names.
async fn finish_rounds(
    store: &hookhost::store::Store,
    now_ms: i64,
    rounds: usize,
    next: impl Fn(&str) -> Next,
) {
    let endpoints = vec!["stripe".to_string()];
    for _ in 0..rounds {
        let leased = store
            .lease_due("w", &endpoints, now_ms + 10, Duration::from_secs(60), 10)
            .await
            .expect("lease");
        for event in leased {
            let next = next(&event.event_id);
            let attempt = answered_ok(now_ms);
            store
                .finish_attempt(&event, "w", &attempt, &next)
                .await
                .expect("finish");
        }
    }
}

/// An attempt the destination answered 200 at `now_ms`, as these tests finish one.
fn answered_ok(now_ms: i64) -> AttemptRecord {
    AttemptRecord {
        started_at_ms: now_ms,
        ended_at_ms: now_ms + 1,
        status: Some(200),
        error: None,
    }
}

crate::both_stores! {
async fn a_replay_does_not_bring_a_deleted_resource_back() {
    // At receipt, a tombstone refuses the resource's events at or under its version,
    // and those without one. A replay keeps to it: an update at the deletion's version
    // and an unversioned event (dead before the deletion came) stay where they are;
    // the deletion itself may go again.
    let server = Server::start(&stripe_config("")).await;
    let store = &server.app.store;
    let now_ms = now() * 1000;
    let mut deletion = new_receipt("evt_gone", "cus_gone", Some(5), now_ms + 2);
    if let Some(resource) = deletion.resource.as_mut() {
        resource.deleted = true;
    }
    for receipt in [
        new_receipt("evt_update", "cus_gone", Some(5), now_ms),
        new_receipt("evt_plain", "cus_gone", None, now_ms + 1),
        deletion,
    ] {
        store.record(receipt).await.expect("record");
    }
    // One at a time: each round leases the resource's next event.
    finish_rounds(store, now_ms, 3, |id| if id == "evt_plain" { Next::Dead } else { Next::Delivered }).await;
    for (id, state) in [("evt_update", "delivered"), ("evt_plain", "dead"), ("evt_gone", "delivered")] {
        assert_eq!(server.receipt("stripe", id).await.state, state, "{id}");
    }
    let replay = |id: &str| {
        let filter = hookhost::store::Filter::one("stripe", id);
        async move { store.replay(&filter).await.expect("replay") }
    };
    assert_eq!(replay("evt_update").await, 0);
    assert_eq!(replay("evt_plain").await, 0);
    assert_eq!(replay("evt_gone").await, 1);
}
}

crate::both_stores! {
async fn a_replay_does_not_send_an_earlier_change_over_a_later_one_of_one_version() {
    // Two changes a provider stamped with one version are delivered in arrival order:
    // the earlier, replayed, would go over the later one.
    let server = Server::start(&stripe_config("")).await;
    let store = &server.app.store;
    let now_ms = now() * 1000;
    for (id, at) in [("evt_first", now_ms), ("evt_second", now_ms + 1)] {
        let receipt = new_receipt(id, "cus_same", Some(7), at);
        store.record(receipt).await.expect("record");
    }
    finish_rounds(store, now_ms, 2, |_| Next::Delivered).await;
    let replay = |id: &str| {
        let filter = hookhost::store::Filter::one("stripe", id);
        async move { store.replay(&filter).await.expect("replay") }
    };
    assert_eq!(replay("evt_first").await, 0);
    assert_eq!(replay("evt_second").await, 1);
}
}

crate::both_stores! {
async fn a_replay_leaves_an_event_whose_attempt_is_on_the_wire() {
    // Discarded while its attempt is on the wire, an event keeps its lease. A replay
    // then would clear that lease, and the event would go out again beside the
    // attempt: it is left until the attempt ends, then replayed.
    let server = Server::start(&stripe_config("")).await;
    let store = &server.app.store;
    let now_ms = now() * 1000;
    store
        .record(new_receipt("evt_wire", "cus_replay", Some(1), now_ms))
        .await
        .expect("record");
    let endpoints = vec!["stripe".to_string()];
    let lease = || store.lease_due("w", &endpoints, now_ms + 1, Duration::from_secs(60), 10);
    let first = lease().await.expect("lease");
    assert_eq!(first.len(), 1);
    assert!(store.discard("stripe", "evt_wire", "by hand").await.expect("discard"));
    let this_one = hookhost::store::Filter {
        event_id: Some("evt_wire".into()),
        ..Default::default()
    };
    assert_eq!(store.replay(&this_one).await.expect("replay"), 0);
    assert!(lease().await.expect("lease").is_empty(), "leased twice at once");

    let attempt = answered_ok(now_ms);
    store
        .finish_attempt(&first[0], "w", &attempt, &Next::Delivered)
        .await
        .expect("finish");
    assert_eq!(store.replay(&this_one).await.expect("replay"), 1);
    let again = lease().await.expect("lease");
    let ids: Vec<&str> = again.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, ["evt_wire"]);
}
}

/// Record `versions` (event id, version) of one resource, received at `at`.
async fn record_versions(
    store: &hookhost::store::Store,
    resource: &str,
    versions: &[(&str, u64)],
    at: i64,
) {
    for &(id, version) in versions {
        store
            .record(new_receipt(id, resource, Some(version), at))
            .await
            .expect("record");
    }
}

/// Versions 1 and 2 of `resource` under `ids`, leased at `now_ms` in turn: version 1
/// dead, version 2 discarded while its attempt is on the wire. Version 2's lease, for
/// finishing that attempt.
async fn discarded_on_the_wire(
    store: &hookhost::store::Store,
    resource: &str,
    ids: [&str; 2],
    now_ms: i64,
) -> hookhost::store::Leased {
    record_versions(store, resource, &[(ids[0], 1), (ids[1], 2)], now_ms).await;
    let endpoints = vec!["stripe".to_string()];
    let lease = || store.lease_due("w", &endpoints, now_ms + 1, Duration::from_secs(60), 10);
    let first = lease().await.expect("lease");
    assert_eq!(first[0].event_id, ids[0]);
    let attempt = answered_ok(now_ms);
    store
        .finish_attempt(&first[0], "w", &attempt, &Next::Dead)
        .await
        .expect("finish");
    let mut second = lease().await.expect("lease");
    assert_eq!(second[0].event_id, ids[1]);
    assert!(
        store
            .discard("stripe", ids[1], "sent by hand")
            .await
            .expect("discard")
    );
    second.remove(0)
}

crate::both_stores! {
async fn a_version_discarded_on_the_wire_but_delivered_is_not_replayed_over() {
    // Discarded while its attempt was on the wire, then answered 2xx, version 2 is at
    // the destination all the same: version 1, a dead letter, replayed after it would
    // be sent over it.
    let server = Server::start(&stripe_config("")).await;
    let store = &server.app.store;
    let now_ms = now() * 1000;
    let second = discarded_on_the_wire(store, "cus_sent", ["evt_v1", "evt_v2"], now_ms).await;
    let attempt = answered_ok(now_ms);
    store.finish_attempt(&second, "w", &attempt, &Next::Delivered).await.expect("finish");
    assert_eq!(server.receipt("stripe", "evt_v2").await.state, "discarded");
    let dead = hookhost::store::Filter {
        endpoint: Some("stripe".into()),
        states: vec!["dead".into()],
        ..Default::default()
    };
    assert_eq!(store.replay(&dead).await.expect("replay"), 0);
    assert_eq!(server.receipt("stripe", "evt_v1").await.state, "dead");

    // Failed instead, a discarded version never reached the destination: the older
    // one may go.
    let second = discarded_on_the_wire(store, "cus_unsent", ["evt_w1", "evt_w2"], now_ms).await;
    store.finish_attempt(&second, "w", &attempt, &Next::Dead).await.expect("finish");
    assert_eq!(store.replay(&dead).await.expect("replay"), 1);
    assert_eq!(server.receipt("stripe", "evt_w1").await.state, "pending");
    assert_eq!(server.receipt("stripe", "evt_v1").await.state, "dead");
}
}

crate::both_stores! {
async fn a_remapped_version_gates_later_pushes_as_one_received() {
    // Mapped at first without a resource (an older plugin's mistake), an event is
    // replayed with the version it should have had. A push of an older version that
    // comes after must be stale, as if the event had been mapped right at receipt.
    let server = Server::start(&stripe_config("")).await;
    let store = &server.app.store;
    let now_ms = now() * 1000;
    let mut unmapped = new_receipt("evt_unmapped", "cus_remap", None, now_ms);
    unmapped.resource = None;
    store.record(unmapped).await.expect("record");
    let endpoints = vec!["stripe".to_string()];
    let leased = store
        .lease_due("w", &endpoints, now_ms + 1, Duration::from_secs(60), 10)
        .await
        .expect("lease");
    store
        .finish_attempt(&leased[0], "w", &answered_ok(now_ms), &Next::Delivered)
        .await
        .expect("finish");
    let resource = hookhost::store::Resource {
        kind: "customer".into(),
        id: "cus_remap".into(),
        version: Some(10),
        deleted: false,
    };
    let replayed = store
        .remap_replay("stripe", "evt_unmapped", "customer.updated", Some(&resource), "2", "d")
        .await
        .expect("remap");
    assert_eq!(replayed, 1);
    let late = store
        .record(new_receipt("evt_late", "cus_remap", Some(7), now_ms + 5))
        .await
        .expect("record");
    assert_eq!(late, hookhost::store::Outcome::StaleVersion);
    let newer = store
        .record(new_receipt("evt_newer", "cus_remap", Some(11), now_ms + 6))
        .await
        .expect("record");
    assert_eq!(newer, hookhost::store::Outcome::Accepted);
}
}

crate::both_stores! {
async fn a_version_once_delivered_holds_older_ones_back_whatever_became_of_it() {
    // Version 2 is delivered, then replayed and this time refused: the destination has
    // it all the same, so version 1, delivered before it, is not replayed over it, nor
    // after a purge that keeps dead letters a day and delivered receipts 30.
    let server = Server::start(&stripe_config("")).await;
    let store = &server.app.store;
    let now_ms = now() * 1000;
    record_versions(store, "cus_once", &[("evt_v1", 1), ("evt_v2", 2)], now_ms).await;
    let endpoints = vec!["stripe".to_string()];
    let lease = || store.lease_due("w", &endpoints, now_ms + 1, Duration::from_secs(60), 10);
    let attempt = answered_ok(now_ms);
    for (id, next) in [("evt_v1", Next::Delivered), ("evt_v2", Next::Delivered)] {
        let leased = lease().await.expect("lease");
        assert_eq!(leased[0].event_id, id);
        store.finish_attempt(&leased[0], "w", &attempt, &next).await.expect("finish");
    }
    let v2 = hookhost::store::Filter::one("stripe", "evt_v2");
    assert_eq!(store.replay(&v2).await.expect("replay"), 1);
    let leased = lease().await.expect("lease");
    assert_eq!(leased[0].event_id, "evt_v2");
    store.finish_attempt(&leased[0], "w", &attempt, &Next::Dead).await.expect("finish");
    assert_eq!(server.receipt("stripe", "evt_v2").await.state, "dead");
    let v1 = hookhost::store::Filter::one("stripe", "evt_v1");
    assert_eq!(store.replay(&v1).await.expect("replay"), 0);
    let retention = hookhost::config::RetentionConfig {
        dead: Some(Duration::from_secs(86_400)),
        ..Default::default()
    };
    let purged = store.purge(now_ms + 2 * 86_400_000, &retention).await.expect("purge");
    assert_eq!(purged.receipts, 0, "version 2 is kept while version 1 may be replayed");
    assert_eq!(store.replay(&v1).await.expect("replay"), 0);
    assert_eq!(server.receipt("stripe", "evt_v1").await.state, "delivered");

    // Version 2 discarded while its attempt is on the wire may yet be delivered:
    // version 1, a dead letter, waits for the attempt's end, and goes once it failed.
    let second = discarded_on_the_wire(store, "cus_wire", ["evt_w1", "evt_w2"], now_ms).await;
    let w1 = hookhost::store::Filter::one("stripe", "evt_w1");
    assert_eq!(store.replay(&w1).await.expect("replay"), 0, "version 2 is on the wire");
    store.finish_attempt(&second, "w", &attempt, &Next::Dead).await.expect("finish");
    assert_eq!(store.replay(&w1).await.expect("replay"), 1);
    assert_eq!(server.receipt("stripe", "evt_w1").await.state, "pending");
}
}

crate::both_stores! {
async fn an_event_discarded_on_the_wire_holds_its_resource_until_the_attempt_ends() {
    // No destination: the server's own workers leave the events alone.
    let server = Server::start(&stripe_config("")).await;
    let store = &server.app.store;
    let now_ms = now() * 1000;
    record_versions(store, "cus_wire", &[("evt_on_wire", 1), ("evt_next", 2)], now_ms).await;
    let endpoints = vec!["stripe".to_string()];
    let lease = || store.lease_due("w", &endpoints, now_ms + 1, Duration::from_secs(60), 10);
    let first = lease().await.expect("lease");
    let ids: Vec<&str> = first.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, ["evt_on_wire"]);
    assert!(
        store
            .discard("stripe", "evt_on_wire", "sent by hand")
            .await
            .expect("discard")
    );
    // Its attempt is still on the wire: version 2 must not overtake it.
    let held = lease().await.expect("lease");
    assert!(held.is_empty(), "{held:?}");
    let attempt = answered_ok(now_ms);
    store
        .finish_attempt(&first[0], "w", &attempt, &Next::Delivered)
        .await
        .expect("finish");
    // The attempt is recorded; the operator's discard stands.
    let row = server.receipt("stripe", "evt_on_wire").await;
    assert_eq!(
        (row.state.as_str(), row.state_reason.as_deref()),
        ("discarded", Some("sent by hand"))
    );
    let attempts = store
        .attempts("stripe", "evt_on_wire")
        .await
        .expect("attempts");
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    let next = lease().await.expect("lease");
    let ids: Vec<&str> = next.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, ["evt_next"]);
}
}

crate::both_stores! {
async fn one_resource_is_delivered_one_event_at_a_time_in_version_order() {
    let (downstream, port) = Downstream::start().await;
    let server = start(port, "[0, 0, 0]").await;
    // The first version of resource A fails once: A's later versions must wait for it.
    downstream.script("evt_a1", &[(503, None)]);
    let t = now();
    let events = [
        ("evt_a1", "cus_A", 1000),
        ("evt_b1", "cus_B", 1000),
        ("evt_a2", "cus_A", 2000),
        ("evt_b2", "cus_B", 2000),
        ("evt_a3", "cus_A", 3000),
    ];
    for (id, customer, version) in events {
        let body = stripe_event(id, "customer.updated", customer, version);
        let (status, answer) = server.post_stripe(&[STRIPE_SECRET], t, &body).await;
        assert_eq!(
            (status, answer["status"].as_str()),
            (200, Some("accepted")),
            "{id}"
        );
    }
    for (id, _, _) in events {
        settled(&server, id, "delivered").await;
    }
    let received = downstream.received.lock().expect("lock").clone();
    let order = |resource: &str| -> Vec<String> {
        received
            .iter()
            .filter(|r| {
                r.headers
                    .get("hookhost-resource")
                    .is_some_and(|v| v == resource)
            })
            .map(|r| {
                r.headers
                    .get("webhook-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    };
    // A: the failed attempt, its retry, then the later versions, never interleaved.
    assert_eq!(
        order("customer/cus_A"),
        ["evt_a1", "evt_a1", "evt_a2", "evt_a3"]
    );
    assert_eq!(order("customer/cus_B"), ["evt_b1", "evt_b2"]);
}
}

fn hookhost_cli(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookhost"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run hookhost");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

crate::both_stores! {
async fn a_replay_never_sends_an_old_version_over_a_newer_one() {
    let (downstream, port) = Downstream::start().await;
    let server = start(port, "[0]").await;
    // cus_R: version 1 dies, version 2 is delivered after it. cus_S: version 1 is
    // delivered, version 2 is refused by the destination (quarantined).
    downstream.script("evt_r1", &[(500, None)]);
    downstream.script("evt_s2", &[(422, None)]);
    let t = now();
    for (id, customer, version) in [
        ("evt_r1", "cus_R", 1000),
        ("evt_r2", "cus_R", 2000),
        ("evt_s1", "cus_S", 1000),
        ("evt_s2", "cus_S", 2000),
    ] {
        let body = stripe_event(id, "customer.updated", customer, version);
        let (status, answer) = server.post_stripe(&[STRIPE_SECRET], t, &body).await;
        assert_eq!((status, answer["status"].as_str()), (200, Some("accepted")), "{id}");
    }
    for (id, state) in [
        ("evt_r1", "dead"),
        ("evt_r2", "delivered"),
        ("evt_s1", "delivered"),
        ("evt_s2", "quarantined"),
    ] {
        settled(&server, id, state).await;
    }
    let replay = |id: &str| {
        let filter = hookhost::store::Filter::one("stripe", id);
        let store = server.app.store.clone();
        async move { store.replay(&filter).await.expect("replay") }
    };
    // The destination has version 2 of cus_R: version 1 stays dead, unsent.
    assert_eq!(replay("evt_r1").await, 0);
    assert_eq!(server.receipt("stripe", "evt_r1").await.state, "dead");
    // cus_S's version 2 never reached the destination: version 1 may be sent again.
    assert_eq!(replay("evt_s1").await, 1);
    settled(&server, "evt_s1", "delivered").await;
    assert_eq!(downstream.received("evt_s1").len(), 2);
    assert_eq!(downstream.received("evt_r1").len(), 1);
    // A limit counts what is replayed: the first match by arrival (evt_r1) is left
    // alone, so one replay of dead or quarantined events takes the next, evt_s2.
    let first = hookhost::store::Filter {
        endpoint: Some("stripe".into()),
        states: vec!["dead".into(), "quarantined".into()],
        limit: Some(1),
        ..hookhost::store::Filter::default()
    };
    assert_eq!(server.app.store.replay(&first).await.expect("replay"), 1);
    settled(&server, "evt_s2", "delivered").await;
    assert_eq!(server.receipt("stripe", "evt_r1").await.state, "dead");
    // A replay that maps again counts the same way: evt_r1, first by arrival, is
    // still superseded, so a limit of one replays the next, delivered evt_r2.
    let remapped = hookhost::store::Filter {
        endpoint: Some("stripe".into()),
        limit: Some(1),
        ..hookhost::store::Filter::default()
    };
    let replayed = hookhost::replay(&server.app, &remapped, true).await;
    assert_eq!(replayed.expect("remap"), 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while downstream.received("evt_r2").len() < 2 {
        assert!(Instant::now() < deadline, "evt_r2 not replayed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    settled(&server, "evt_r2", "delivered").await;
    assert_eq!(server.receipt("stripe", "evt_r1").await.state, "dead");
    assert_eq!(downstream.received("evt_r1").len(), 1);
}
}

/// A remap maps an event again at the URL it came to: Twilio reads a JSON event's type
/// only when the URL's query carries the body's digest (`bodySHA256`). Mapped without
/// the query, the body would be read as a form, and the event stored as `unknown`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remap_maps_an_event_at_the_url_it_came_to() {
    use hmac::Mac as _;
    const TOKEN: &str = "twilio-auth-token";
    let server = Server::start(&format!(
        "public_url = \"https://hooks.example.com\"\n\
         [[endpoint]]\nid = \"tw\"\nplugin = \"twilio\"\nsecrets = [\"{TOKEN}\"]\n"
    ))
    .await;
    let body = r#"{"type":"com.twilio.messaging.inbound-message.received","id":"EZ1"}"#;
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(body));
    let path = format!("/webhooks/tw?bodySHA256={digest}");
    let mut mac = hmac::Hmac::<sha1::Sha1>::new_from_slice(TOKEN.as_bytes()).expect("key");
    mac.update(format!("https://hooks.example.com{path}").as_bytes());
    let headers = [
        ("x-twilio-signature", b64(&mac.finalize().into_bytes())),
        ("content-type", "application/json".to_string()),
    ];
    let (status, answer) = request(server.addr, "POST", &path, &headers, body.into()).await;
    assert_eq!(status, 200, "{answer}");
    let id = answer["event_id"].as_str().expect("event id").to_string();
    let mapped = "com.twilio.messaging.inbound-message.received";
    assert_eq!(server.receipt("tw", &id).await.event_type, mapped);

    // Replayable once discarded (no destination: it would stay pending).
    assert!(
        server
            .app
            .store
            .discard("tw", &id, "test")
            .await
            .expect("discard")
    );
    let one = hookhost::store::Filter::one("tw", &id);
    let replayed = hookhost::replay(&server.app, &one, true).await;
    assert_eq!(replayed.expect("remap"), 1);
    let receipt = server.receipt("tw", &id).await;
    assert_eq!(
        (receipt.event_type.as_str(), receipt.state.as_str()),
        (mapped, "pending")
    );
}

/// A remap sends only what a live request would deliver: an event the plugin now
/// ignores or rejects is refused, with the reason, and stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remap_refuses_an_event_the_plugin_now_ignores() {
    let config = |mode: &str| {
        format!(
            "plugins_dir = \"plugins\"\n[[endpoint]]\nid = \"guest\"\nplugin = \"hostile\"\n\
             secrets = [\"s\"]\n[endpoint.config]\nmode = \"{mode}\"\n"
        )
    };
    let server = Server::start_in(with_test_guest(), &config("ok"))
        .await
        .expect("starts");
    let body = br#"{"n":1}"#.to_vec();
    let answer = server
        .post("guest", &guest_headers("s", "evt_now_ignored", &body), body)
        .await;
    assert_eq!(answer.0, 200, "{answer:?}");
    // Replayable once discarded (no destination: it would stay pending).
    assert!(
        server
            .app
            .store
            .discard("guest", "evt_now_ignored", "test")
            .await
            .expect("discard")
    );
    let mut server = server;
    for mode in ["ignore", "reject"] {
        server = server.restart(&config(mode)).await;
        let one = hookhost::store::Filter::one("guest", "evt_now_ignored");
        let refused = hookhost::replay(&server.app, &one, true).await;
        let error = format!("{:#}", refused.expect_err("refused"));
        assert!(
            error.contains(&format!("the plugin now {mode}s it")),
            "{error}"
        );
        assert_eq!(
            server.receipt("guest", "evt_now_ignored").await.state,
            "discarded"
        );
    }
}

crate::both_stores! {
async fn dead_letters_are_listed_replayed_and_discarded_from_the_cli() {
    let (downstream, port) = Downstream::start().await;
    let server = start(port, "[0, 0, 0]").await;
    let config = server.config_path();
    downstream.script("evt_dlq", &[(500, None); 3]);
    downstream.script("evt_bad", &[(422, None)]);
    accept(&server, "evt_dlq").await;
    accept(&server, "evt_bad").await;
    settled(&server, "evt_dlq", "dead").await;
    settled(&server, "evt_bad", "quarantined").await;

    let listed = hookhost_cli(&["dlq", "list", "--config", &config]);
    assert!(
        listed
            .lines()
            .any(|l| l.contains("evt_dlq") && l.contains("dead")),
        "{listed}"
    );
    assert!(
        listed
            .lines()
            .any(|l| l.contains("evt_bad") && l.contains("quarantined")),
        "{listed}"
    );

    // Discard the refused one with a reason; replay the dead one.
    hookhost_cli(&[
        "events",
        "discard",
        "--config",
        &config,
        "stripe",
        "evt_bad",
        "--reason",
        "bad payload",
    ]);
    let replayed = hookhost_cli(&["dlq", "replay", "--config", &config, "--endpoint", "stripe"]);
    assert_eq!(replayed.trim(), "1 replayed");
    settled(&server, "evt_dlq", "delivered").await;
    let discarded = server.receipt("stripe", "evt_bad").await;
    assert_eq!(
        (discarded.state.as_str(), discarded.state_reason.as_deref()),
        ("discarded", Some("bad payload"))
    );

    // The replay went out under the original event id and idempotency key.
    let seen = downstream.received("evt_dlq");
    assert_eq!(seen.len(), 4);
    assert!(
        seen.iter()
            .all(|r| r.headers.get("idempotency-key") == seen[0].headers.get("idempotency-key"))
    );
    let shown: serde_json::Value = serde_json::from_str(&hookhost_cli(&[
        "events", "show", "--config", &config, "stripe", "evt_dlq",
    ]))
    .expect("JSON");
    assert_eq!(shown["state"], "delivered");
    assert_eq!(shown["attempts"].as_array().map(Vec::len), Some(4));
    assert_eq!(shown["attempts"][3]["status"], 200);
    // As on the admin API, the signature's value is not shown.
    let signature = shown["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .find(|pair| pair[0] == "stripe-signature")
        .map(|pair| pair[1].clone());
    assert_eq!(signature, Some(serde_json::json!("[redacted]")));

    // Pausing a mistyped endpoint is refused: its pause would stop nothing now and a
    // later endpoint of that id from its start.
    let (ok, _, stderr) = crate::cli::hookhost(&["endpoint", "pause", "--config", &config, "stirpe"]);
    assert!(!ok && stderr.contains("no endpoint \"stirpe\""), "{stderr}");
    let paused = hookhost_cli(&["endpoint", "pause", "--config", &config, "stripe"]);
    assert_eq!(paused.trim(), "stripe: delivery paused");
    // Listing or replaying it is refused too, not answered with nothing to do.
    let stirpe = ["--endpoint", "stirpe"];
    for command in [
        &["events", "list"][..],
        &["events", "replay", "--remap"],
        &["dlq", "replay"],
        &["forensics", "list"],
        &["reconcile", "runs"],
    ] {
        let args = [command, &["--config", &config], &stirpe].concat();
        let (ok, stdout, stderr) = crate::cli::hookhost(&args);
        assert!(!ok, "{args:?}: {stdout}");
        assert!(stderr.contains("no endpoint \"stirpe\" (in the file, managed"), "{args:?}: {stderr}");
    }
    // An endpoint gone from the file is known by the events the store holds.
    let text = std::fs::read_to_string(&config).expect("the configuration");
    let without = text.split("[[endpoint]]").next().expect("the part before");
    let gone = format!("{config}.without-stripe.toml");
    std::fs::write(&gone, without).expect("write");
    let listed = hookhost_cli(&["events", "list", "--config", &gone, "--endpoint", "stripe"]);
    assert!(listed.contains("evt_bad"), "{listed}");
    let runs = hookhost_cli(&["reconcile", "runs", "--config", &gone, "--endpoint", "stripe"]);
    assert_eq!(runs.trim(), "[]");
}
}

crate::both_stores! {
async fn a_paused_endpoint_keeps_accepting_and_delivers_after_resume() {
    let (downstream, port) = Downstream::start().await;
    let server = start(port, "[0, 0, 0]").await;
    set_paused(&server, true).await;
    accept(&server, "evt_paused").await;
    // A lease whose list of endpoints was read before the pause still leaves them.
    let leased = server
        .app
        .store
        .lease_due("probe", &["stripe".into()], i64::MAX / 2, Duration::from_secs(30), 10)
        .await
        .expect("lease");
    assert!(leased.is_empty(), "a paused endpoint's event was leased");
    // Several poll intervals go by; the event waits.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        server.receipt("stripe", "evt_paused").await.state,
        "pending"
    );
    assert!(downstream.received("evt_paused").is_empty());
    set_paused(&server, false).await;
    settled(&server, "evt_paused", "delivered").await;
}
}

crate::both_stores! {
async fn the_admin_api_refuses_every_call_without_the_token_and_replays_with_it() {
    let (downstream, port) = Downstream::start().await;
    let server = start(port, "[0, 0]").await;
    let router = hookhost::http::admin::router(
        server.app.clone(),
        hookhost::verify::Secret::new("adm1n-t0ken"),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let admin = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, router).await });

    downstream.script("evt_admin", &[(503, None), (503, None)]);
    accept(&server, "evt_admin").await;
    settled(&server, "evt_admin", "dead").await;

    let routes = [
        ("GET", "/admin/events"),
        ("GET", "/admin/dlq"),
        ("GET", "/admin/events/stripe/evt_admin"),
        ("POST", "/admin/events/stripe/evt_admin/replay"),
        ("POST", "/admin/events/stripe/evt_admin/discard"),
        ("POST", "/admin/replay"),
        ("POST", "/admin/endpoints/stripe/pause"),
        ("POST", "/admin/endpoints/stripe/resume"),
        ("GET", "/admin/no-such-route"),
    ];
    let unauthorized = (401, serde_json::json!({"error": "unauthorized"}));
    for (method, path) in routes {
        for auth in [
            None,
            Some("Bearer wrong"),
            Some("adm1n-t0ken"),
            Some("Bearer "),
            Some("Basic adm1n-t0ken"),
            Some("Bearerx adm1n-t0ken"),
            Some("Bearer adm1n-t0ken2"),
        ] {
            let headers: Vec<(&str, String)> = auth
                .map(|a| ("authorization", a.to_string()))
                .into_iter()
                .collect();
            let answer = request(admin, method, path, &headers, "{}".into()).await;
            assert_eq!(answer, unauthorized, "{method} {path} with {auth:?}");
        }
    }
    assert_eq!(
        server.receipt("stripe", "evt_admin").await.state,
        "dead",
        "nothing changed"
    );

    let token = vec![
        ("authorization", "Bearer adm1n-t0ken".to_string()),
        ("content-type", "application/json".to_string()),
    ];
    let (status, dlq) = request(
        admin,
        "GET",
        "/admin/dlq?endpoint=stripe",
        &token,
        "".into(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(dlq[0]["event_id"], "evt_admin");
    // The scheme's name is case-insensitive, and more than one space may follow it.
    for auth in ["bearer adm1n-t0ken", "BEARER  adm1n-t0ken"] {
        let headers = [("authorization", auth.to_string())];
        let (status, _) = request(admin, "GET", "/admin/dlq", &headers, "".into()).await;
        assert_eq!(status, 200, "{auth}");
    }
    let replayed = request(
        admin,
        "POST",
        "/admin/events/stripe/evt_admin/replay",
        &token,
        "".into(),
    )
    .await;
    assert_eq!(replayed, (200, serde_json::json!({"replayed": 1})));
    settled(&server, "evt_admin", "delivered").await;
    // An event that is not there is 404, whichever part of its path is mistyped.
    for path in ["/admin/events/strip/evt_admin/replay", "/admin/events/stripe/evt_nope/replay"] {
        let (status, refused) = request(admin, "POST", path, &token, "".into()).await;
        assert_eq!((status, refused["error"].as_str()), (404, Some("unknown_event")), "{path}");
    }
    let (status, shown) = request(
        admin,
        "GET",
        "/admin/events/stripe/evt_admin",
        &token,
        "".into(),
    )
    .await;
    assert_eq!(
        (status, shown["attempts"].as_array().map(Vec::len)),
        (200, Some(3))
    );
    let body = r#"{"endpoint": "stripe", "state": "delivered", "remap": true}"#;
    let filtered = request(admin, "POST", "/admin/replay", &token, body.into()).await;
    assert_eq!(filtered, (200, serde_json::json!({"replayed": 1})));
    settled(&server, "evt_admin", "delivered").await;
    // The API and the CLI read one filter: a state that does not exist is refused by
    // name in both, never silently matched against nothing. The dead-letter queue is
    // its states: another one is refused, not overridden.
    for (path, named) in [
        ("/admin/events?state=delivred", "\"delivred\""),
        ("/admin/dlq?state=pending", "dead-letter queue"),
        ("/admin/events?endpoint=strip", "\"strip\""),
        ("/admin/dlq?endpoint=strip", "\"strip\""),
        ("/admin/forensics?endpoint=strip", "\"strip\""),
        ("/admin/reconcile/runs?endpoint=strip", "\"strip\""),
    ] {
        let (status, refused) = request(admin, "GET", path, &token, "".into()).await;
        assert_eq!(
            (status, refused["error"].as_str()),
            (400, Some("invalid_filter")),
            "{path}"
        );
        let reason = refused["reason"].as_str().unwrap_or("");
        assert!(reason.contains(named), "{path}: {reason}");
    }
    // An endpoint no longer served still lists the events the store holds of it.
    let mut kept = new_receipt("evt_kept", "cus_kept", None, now() * 1000);
    kept.endpoint = "removed".into();
    server.app.store.record(kept).await.expect("record");
    let (status, listed) =
        request(admin, "GET", "/admin/events?endpoint=removed", &token, "".into()).await;
    assert_eq!((status, listed[0]["event_id"].as_str()), (200, Some("evt_kept")));
    for body in [r#"{"state": "dead,bogus"}"#, r#"{"endpoint": "strip"}"#] {
        let (status, _) = request(admin, "POST", "/admin/replay", &token, body.into()).await;
        assert_eq!(status, 400, "{body}");
    }
    // A misspelled key is refused by name, never dropped (which would widen the
    // replay to every event); so is a `remap` that is not a boolean.
    for (body, named) in [
        (r#"{"endpoint": "stripe", "states": "dead"}"#, "states"),
        (r#"{"endpoint": "stripe", "remap": "yes"}"#, "remap"),
    ] {
        let (status, refused) =
            request(admin, "POST", "/admin/replay", &token, body.into()).await;
        assert_eq!(
            (status, refused["error"].as_str()),
            (400, Some("invalid_request")),
            "{body}"
        );
        assert!(
            refused["reason"].as_str().unwrap_or("").contains(named),
            "{refused}"
        );
    }
    let config = server.config_path();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookhost"))
        .args([
            "events",
            "list",
            "--config",
            &config,
            "--state",
            "pending,delivred",
        ])
        .output()
        .expect("run hookhost");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--state: \"delivred\" is not one of"),
        "{stderr}"
    );
    let unknown = request(
        admin,
        "POST",
        "/admin/endpoints/nope/pause",
        &token,
        "".into(),
    )
    .await;
    assert_eq!(unknown.0, 404);
}
}

crate::both_stores! {
async fn old_versions_after_a_newer_one_never_reach_the_destination() {
    let (downstream, port) = Downstream::start().await;
    let server = start(port, "[0, 0, 0]").await;
    let t = now();
    // v3, v1, v2 of one resource, accepted in that order; then a delete and a late update.
    for (id, kind, version) in [
        ("evt_v3", "customer.updated", 3000),
        ("evt_v1", "customer.updated", 1000),
        ("evt_v2", "customer.updated", 2000),
        ("evt_del", "customer.deleted", 4000),
        ("evt_late", "customer.updated", 3500),
    ] {
        let body = stripe_event(id, kind, "cus_ordered", version);
        let (status, _) = server.post_stripe(&[STRIPE_SECRET], t, &body).await;
        assert_eq!(status, 200);
    }
    settled(&server, "evt_v3", "delivered").await;
    settled(&server, "evt_del", "delivered").await;
    for id in ["evt_v1", "evt_v2", "evt_late"] {
        assert_eq!(server.receipt("stripe", id).await.state, "stale", "{id}");
        assert!(
            downstream.received(id).is_empty(),
            "{id} reached the destination"
        );
    }
}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_can_map_the_event_again_with_the_current_plugin() {
    let (downstream, port) = Downstream::start().await;
    let server = start(port, "[0, 0]").await;
    let config = server.config_path();
    downstream.script("evt_remap", &[(500, None); 2]);
    accept(&server, "evt_remap").await;
    settled(&server, "evt_remap", "dead").await;
    // As if an older plugin had mapped it wrongly (`set`: more to change).
    let mislabel = |set: &'static str| {
        let path = server.db_path();
        async move {
            let mut conn = open_db(&path).await;
            let sql = format!(
                "UPDATE receipts SET event_type = 'wrong.type'{set} WHERE event_id = 'evt_remap'"
            );
            sqlx::query(&sql).execute(&mut conn).await.expect("update");
        }
    };
    let replay = |remap: bool| {
        let mut args = vec![
            "events",
            "replay",
            "--config",
            &config,
            "--event-id",
            "evt_remap",
        ];
        if remap {
            args.push("--remap");
        }
        hookhost_cli(&args)
    };
    mislabel(", plugin_version = '0.0.1'").await;
    assert_eq!(replay(false).trim(), "1 replayed");
    settled(&server, "evt_remap", "delivered").await;
    let last = downstream.received("evt_remap").pop().expect("delivered");
    assert_eq!(
        last.headers.get("hookhost-event-type").expect("type"),
        "wrong.type",
        "stored mapping kept"
    );

    assert_eq!(replay(true).trim(), "1 replayed");
    let deadline = Instant::now() + Duration::from_secs(20);
    while downstream.received("evt_remap").len() < 4 {
        assert!(Instant::now() < deadline, "remapped replay not delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let last = downstream.received("evt_remap").pop().expect("delivered");
    assert_eq!(
        last.headers.get("hookhost-event-type").expect("type"),
        "customer.updated"
    );
    assert_eq!(
        server.receipt("stripe", "evt_remap").await.event_type,
        "customer.updated"
    );

    // Superseded under its new mapping, it is not replayed, and keeps the old one:
    // the new mapping and the replay are one transaction.
    let newer = stripe_event("evt_newer", "customer.updated", "cus_evt_remap", now() + 10);
    let (status, _) = server.post_stripe(&[STRIPE_SECRET], now(), &newer).await;
    assert_eq!(status, 200);
    settled(&server, "evt_newer", "delivered").await;
    mislabel(", state = 'dead'").await;
    assert_eq!(replay(true).trim(), "0 replayed");
    let kept = server.receipt("stripe", "evt_remap").await;
    assert_eq!(
        (kept.state.as_str(), kept.event_type.as_str()),
        ("dead", "wrong.type")
    );
}

crate::both_stores! {
async fn delivery_metrics_count_each_attempt_by_what_it_led_to() {
    use crate::operations::{ADMIN_TOKEN, admin, get, value};
    let (downstream, port) = Downstream::start().await;
    let server = start(port, "[0, 0, 0]").await;
    let admin = admin(&server).await;
    downstream.script("evt_gone", &[(404, None)]);
    downstream.script("evt_broken", &[(500, None); 10]);
    downstream.script("evt_later", &[(503, None)]);
    for id in ["evt_ok", "evt_gone", "evt_broken", "evt_later"] {
        accept(&server, id).await;
    }
    settled(&server, "evt_ok", "delivered").await;
    settled(&server, "evt_gone", "quarantined").await;
    settled(&server, "evt_broken", "dead").await;
    settled(&server, "evt_later", "delivered").await;

    // Paused, an accepted event waits: the backlog shows it.
    set_paused(&server, true).await;
    accept(&server, "evt_waiting").await;

    let stripe = r#"endpoint="stripe",plugin="stripe""#;
    let expected = [
        (format!(r#"hookhost_delivery_attempts_total{{{stripe},result="delivered"}}"#), 2.0),
        // evt_broken's first two attempts and evt_later's first.
        (format!(r#"hookhost_delivery_attempts_total{{{stripe},result="retry"}}"#), 3.0),
        (format!(r#"hookhost_delivery_attempts_total{{{stripe},result="dead"}}"#), 1.0),
        (format!(r#"hookhost_delivery_attempts_total{{{stripe},result="quarantined"}}"#), 1.0),
        (format!("hookhost_signed_to_delivered_seconds_count{{{stripe}}}"), 2.0),
        (r#"hookhost_pending_events{endpoint="stripe"}"#.to_string(), 1.0),
    ];
    // An attempt is counted just after its state commits: scrape until the last
    // one's count is in (10 s at most), then hold every sample to its value.
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let (status, text) = get(admin, "/metrics", Some(ADMIN_TOKEN)).await;
        assert_eq!(status, 200, "{text}");
        let all_in = expected
            .iter()
            .all(|(sample, want)| value(&text, sample) == Some(*want));
        if all_in || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for (sample, want) in &expected {
        assert_eq!(value(&text, sample), Some(*want), "{sample} in:\n{text}");
    }
    let age = value(&text, r#"hookhost_oldest_pending_age_seconds{endpoint="stripe"}"#)
        .expect("oldest pending age");
    assert!((0.0..60.0).contains(&age), "{age}");
}
}
