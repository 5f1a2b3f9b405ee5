//! The PostgreSQL store on its own: each test in a database of its own on
//! 127.0.0.1:5432. Ingest, the version gate and delivery over real HTTP; two stores
//! on one database leasing at once; an unreachable database behind a proxy the test
//! stops; migrations and a newer schema; retention on both stores.

use crate::support::*;
use hookhost::config::{PgConfig, RetentionConfig, StoreConfig};
use hookhost::store::{AttemptRecord, NewReceipt, Next, Outcome, Resource, Store};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn pg(url: &str) -> StoreConfig {
    StoreConfig::Postgres(PgConfig {
        url: url.to_string(),
        max_connections: 8,
        connect_timeout: Duration::from_millis(1_500),
        statement_timeout: Duration::from_secs(5),
    })
}

/// A Stripe server on `url`; `top` adds top-level keys and tables.
async fn server_on(url: &str, top: &str) -> Server {
    Server::start(&stripe_config(&format!("store = \"{url}\"\n{top}"))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_duplicate_and_conflict() {
    let db = PgDatabase::create();
    let server = server_on(&db.url(), "").await;
    let t = now();
    let body = stripe_event("evt_pg", "customer.updated", "cus_pg", t);
    let (status, answer) = server.post_stripe(&[STRIPE_SECRET], t, &body).await;
    assert_eq!(
        (status, answer),
        (200, json!({"status": "accepted", "event_id": "evt_pg"}))
    );
    let (status, answer) = server.post_stripe(&[STRIPE_SECRET], t, &body).await;
    assert_eq!(
        (status, answer),
        (200, json!({"status": "duplicate", "event_id": "evt_pg"}))
    );
    let other = stripe_event("evt_pg", "customer.updated", "cus_other", t);
    let (status, answer) = server.post_stripe(&[STRIPE_SECRET], t, &other).await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ignored": "conflicting_duplicate", "event_id": "evt_pg"})
        )
    );
    let kept = server.receipt("stripe", "evt_pg").await;
    assert_eq!(kept.body, body.as_bytes(), "the first evidence is kept");
    assert_eq!(kept.state, "pending");
    let store = &server.app.store;
    assert_eq!(store.count_receipts("stripe").await.expect("count"), 1);
    assert_eq!(store.count_conflicts("stripe").await.expect("count"), 1);

    // The same new event 50 times at once: one receipt, every answer a 200.
    let racing = stripe_event("evt_race", "customer.updated", "cus_race", t);
    let answers = futures_join(
        (0..50)
            .map(|_| {
                let body = racing.clone();
                let server = &server;
                async move { server.post_stripe(&[STRIPE_SECRET], t, &body).await }
            })
            .collect(),
    )
    .await;
    let accepted = answers
        .iter()
        .filter(|(s, a)| *s == 200 && a["status"] == "accepted")
        .count();
    let duplicates = answers
        .iter()
        .filter(|(s, a)| *s == 200 && a["status"] == "duplicate")
        .count();
    assert_eq!((accepted, duplicates), (1, 49), "{answers:?}");
    assert_eq!(store.count_receipts("stripe").await.expect("count"), 2);
    assert_eq!(store.count_conflicts("stripe").await.expect("count"), 1);
}

/// A conflicting resend stored by two processes at once is kept once: the second
/// insert waits for the first's commit, then skips the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_stored_by_two_processes_at_once_is_kept_once() {
    use sqlx::Connection;
    let db = PgDatabase::create();
    let store = Store::open(&pg(&db.url())).await.expect("open");
    let first = new_receipt("evt_c", "cus_c", Some(1), 0);
    assert_eq!(
        store.record(first).await.expect("record"),
        Outcome::Accepted
    );
    let mut resent = new_receipt("evt_c", "cus_c", Some(1), 0);
    resent.body = br#"{"id":"evt_c","changed":true}"#.to_vec();
    resent.body_sha256 = <sha2::Sha256 as sha2::Digest>::digest(&resent.body).into();

    // Another process's batch has stored the same conflict and not yet committed.
    let mut other = sqlx::PgConnection::connect(&db.url())
        .await
        .expect("connect");
    let mut batch = other.begin().await.expect("begin");
    sqlx::query(
        "INSERT INTO conflicts (endpoint, event_id, body_sha256, body, headers, secret_index,
                                received_at_ms)
         VALUES ('stripe', 'evt_c', $1, $2, '[]', 0, 0)",
    )
    .bind(resent.body_sha256.as_slice())
    .bind(resent.body.clone())
    .execute(&mut *batch)
    .await
    .expect("insert");
    let recording = tokio::spawn({
        let store = store.clone();
        async move { store.record(resent).await }
    });
    // Commit once this store's batch is done, or waits on the other's row.
    let mut watch = sqlx::PgConnection::connect(&db.url())
        .await
        .expect("connect");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut watch)
        .await
        .expect("activity");
        if recording.is_finished() || waiting > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the batch neither ended nor waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    batch.commit().await.expect("commit");
    let outcome = recording.await.expect("task").expect("record");
    assert_eq!(outcome, Outcome::Conflict);
    assert_eq!(store.count_conflicts("stripe").await.expect("count"), 1);
    store.close().await;
}

/// Await every future, concurrently.
async fn futures_join<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = (0..pinned.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in pinned.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_version_gate_v3_v1_v2_keeps_v3_and_a_delete_makes_older_updates_stale() {
    let db = PgDatabase::create();
    let server = server_on(&db.url(), "").await;
    let t = now();
    let post = |id: &str, kind: &str, created: i64| {
        let body = stripe_event(id, kind, "cus_v", created);
        let server = &server;
        async move { server.post_stripe(&[STRIPE_SECRET], t, &body).await }
    };
    let ignored = |reason: &str, id: &str| (200, json!({"ignored": reason, "event_id": id}));
    assert_eq!(
        post("evt_v3", "customer.updated", 3000).await.1["status"],
        "accepted"
    );
    assert_eq!(
        post("evt_v1", "customer.updated", 1000).await,
        ignored("stale_version", "evt_v1")
    );
    assert_eq!(
        post("evt_v2", "customer.updated", 2000).await,
        ignored("stale_version", "evt_v2")
    );
    // The same version under another id is accepted, after v3.
    assert_eq!(
        post("evt_v3b", "customer.updated", 3000).await.1["status"],
        "accepted"
    );
    let pending: Vec<String> = server
        .app
        .store
        .list(&hookhost::store::Filter {
            states: vec!["pending".into()],
            ..Default::default()
        })
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.event_id)
        .collect();
    assert_eq!(
        pending,
        vec!["evt_v3", "evt_v3b"],
        "only the v3 events are to be delivered"
    );
    let stale = server.receipt("stripe", "evt_v1").await;
    assert_eq!(
        (stale.state.as_str(), stale.state_reason.as_deref()),
        ("stale", Some("stale_version"))
    );

    // A delete at 4000 leaves a tombstone; an update from before it is stale.
    assert_eq!(
        post("evt_del", "customer.deleted", 4000).await.1["status"],
        "accepted"
    );
    assert_eq!(
        post("evt_late", "customer.updated", 3500).await,
        ignored("stale_version", "evt_late")
    );

    // Versionless events of a deleted resource are refused by the tombstone.
    let store = &server.app.store;
    let mut receipt = new_receipt("evt_nov", "cus_v", None, 0);
    receipt.resource = Some(Resource {
        kind: "customer".into(),
        id: "cus_v".into(),
        version: None,
        deleted: false,
    });
    assert_eq!(
        store.record(receipt).await.expect("record"),
        hookhost::store::Outcome::ResourceDeleted
    );
}

/// Two processes' stores record the same 200 events at once, in opposite orders,
/// five resources with rising versions: each event is judged once (the other store
/// answers duplicate), no request fails, and each resource's newest event is the
/// one left to deliver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_recording_the_same_events_at_once_judge_each_once() {
    recording_the_same_events_at_once(&PgDatabase::create()).await;
}

/// As above on a database whose transactions default to SERIALIZABLE: hookhost's own
/// sessions keep READ COMMITTED, which the batches' locking is built for, instead of
/// failing whole batches on serialization errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_defaulting_to_serializable_judges_each_once_too() {
    let db = PgDatabase::create();
    psql(&format!(
        "ALTER DATABASE {} SET default_transaction_isolation = 'serializable'",
        db.name
    ));
    recording_the_same_events_at_once(&db).await;
}

async fn recording_the_same_events_at_once(db: &PgDatabase) {
    let a = Store::open(&pg(&db.url())).await.expect("open a");
    let b = Store::open(&pg(&db.url())).await.expect("open b");
    const EVENTS: u64 = 200;
    let receipts = |reverse: bool| {
        let mut all: Vec<Box<NewReceipt>> = (0..EVENTS)
            .map(|i| {
                new_receipt(
                    &format!("evt_{i}"),
                    &format!("cus_{}", i % 5),
                    Some(i + 1),
                    0,
                )
            })
            .collect();
        if reverse {
            all.reverse();
        }
        all
    };
    let record = |store: &Store, receipts: Vec<Box<NewReceipt>>| {
        futures_join(
            receipts
                .into_iter()
                .map(|r| {
                    let store = store.clone();
                    async move { (r.event_id.clone(), store.record(r).await) }
                })
                .collect(),
        )
    };
    let (from_a, from_b) = tokio::join!(record(&a, receipts(false)), record(&b, receipts(true)));
    let mut judged: HashMap<String, Vec<hookhost::store::Outcome>> = HashMap::new();
    for (id, outcome) in from_a.into_iter().chain(from_b) {
        let outcome = outcome.unwrap_or_else(|e| panic!("{id}: {e}"));
        judged.entry(id).or_default().push(outcome);
    }
    assert_eq!(judged.len(), EVENTS as usize);
    for (id, outcomes) in &judged {
        let duplicates = outcomes
            .iter()
            .filter(|o| **o == hookhost::store::Outcome::Duplicate)
            .count();
        assert_eq!(duplicates, 1, "{id}: {outcomes:?}");
    }
    assert_eq!(
        a.count_receipts("stripe").await.expect("count"),
        EVENTS as i64
    );
    assert_eq!(a.count_conflicts("stripe").await.expect("count"), 0);
    for newest in EVENTS - 5..EVENTS {
        let row = a
            .receipt("stripe", &format!("evt_{newest}"))
            .await
            .expect("read")
            .expect("stored");
        assert_eq!(
            row.state, "pending",
            "evt_{newest} is its resource's newest"
        );
    }
    a.close().await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_delivered_to_the_downstream() {
    let db = PgDatabase::create();
    let received: Arc<Mutex<Vec<String>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = received.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let seen = seen.clone();
            async move {
                let id = headers
                    .get("webhook-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                seen.lock().expect("lock").push(id);
                axum::http::StatusCode::OK
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let config = format!(
        "store = \"{}\"\n[delivery]\nworkers = 4\npoll_ms = 20\n\
         [[endpoint]]\nid = \"stripe\"\nplugin = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n\
         [endpoint.destination]\nurl = \"http://127.0.0.1:{port}/hook\"\nsecret = \"whsec_{}\"\n",
        db.url(),
        b64(b"destination signing key 32 bytes")
    );
    let server = Server::start(&config).await;
    let t = now();
    for i in 0..5 {
        let body = stripe_event(&format!("evt_d{i}"), "customer.updated", "cus_d", t + i);
        let (status, _) = server.post_stripe(&[STRIPE_SECRET], t, &body).await;
        assert_eq!(status, 200);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let delivered = server
            .app
            .store
            .list(&hookhost::store::Filter {
                states: vec!["delivered".into()],
                ..Default::default()
            })
            .await
            .expect("list");
        if delivered.len() == 5 {
            break;
        }
        assert!(Instant::now() < deadline, "delivered so far: {delivered:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // One resource: delivered once each, in version order.
    let order = received.lock().expect("lock").clone();
    assert_eq!(
        order,
        (0..5).map(|i| format!("evt_d{i}")).collect::<Vec<_>>()
    );
    let attempts = server
        .app
        .store
        .attempts("stripe", "evt_d0")
        .await
        .expect("attempts");
    assert_eq!(attempts, vec![(1, Some(200), None)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_leasing_at_once_never_share_an_event_or_a_resource() {
    let db = PgDatabase::create();
    let a = Store::open(&pg(&db.url())).await.expect("open a");
    let b = Store::open(&pg(&db.url())).await.expect("open b");
    // 10 resources × 10 versions, plus 40 events without a resource.
    let mut expected = HashSet::new();
    for r in 0..10 {
        for v in 1..=10u64 {
            let id = format!("evt_r{r}_v{v}");
            let outcome = a
                .record(new_receipt(
                    &id,
                    &format!("cus_{r}"),
                    Some(v),
                    1_000 + v as i64,
                ))
                .await
                .expect("record");
            assert_eq!(outcome, hookhost::store::Outcome::Accepted);
            expected.insert(id);
        }
    }
    for i in 0..40 {
        let mut receipt = new_receipt(&format!("evt_free{i}"), "-", None, 1_000);
        receipt.resource = None;
        b.record(receipt).await.expect("record");
        expected.insert(format!("evt_free{i}"));
    }
    // What is in flight right now, across both stores' workers.
    let in_flight: Arc<Mutex<(HashSet<String>, HashSet<String>)>> = Arc::default();
    let delivered: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    // Per resource, the versions in the order they were delivered.
    let order: Arc<Mutex<HashMap<String, Vec<i64>>>> = Arc::default();
    // Events leased through each store.
    let per_store: Arc<Mutex<[usize; 2]>> = Arc::default();
    let endpoints = vec!["stripe".to_string()];
    let mut workers = Vec::new();
    for (n, store) in [a.clone(), b.clone(), a.clone(), b.clone()]
        .into_iter()
        .enumerate()
    {
        let (in_flight, delivered, order, endpoints, per_store) = (
            in_flight.clone(),
            delivered.clone(),
            order.clone(),
            endpoints.clone(),
            per_store.clone(),
        );
        workers.push(tokio::spawn(async move {
            let owner = format!("worker-{n}");
            let mut idle = 0;
            while idle < 20 {
                let now_ms = now() * 1000;
                let leased = store
                    .lease_due(&owner, &endpoints, now_ms, Duration::from_secs(60), 3)
                    .await
                    .expect("lease");
                if leased.is_empty() {
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                idle = 0;
                per_store.lock().expect("lock")[n % 2] += leased.len();
                {
                    let mut flight = in_flight.lock().expect("lock");
                    for event in &leased {
                        assert!(
                            flight.0.insert(event.event_id.clone()),
                            "{} leased twice at once",
                            event.event_id
                        );
                        if let Some(resource) = &event.resource_id {
                            assert!(
                                flight.1.insert(resource.clone()),
                                "two events of {resource} at once ({})",
                                event.event_id
                            );
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
                for event in &leased {
                    {
                        // Out of flight before the result is committed: from then on
                        // the other store may lease the resource's next event.
                        let mut flight = in_flight.lock().expect("lock");
                        flight.0.remove(&event.event_id);
                        if let Some(resource) = &event.resource_id {
                            flight.1.remove(resource);
                            order
                                .lock()
                                .expect("lock")
                                .entry(resource.clone())
                                .or_default()
                                .push(event.resource_version.unwrap_or(-1));
                        }
                        *delivered
                            .lock()
                            .expect("lock")
                            .entry(event.event_id.clone())
                            .or_default() += 1;
                    }
                    let attempt = AttemptRecord {
                        started_at_ms: now_ms,
                        ended_at_ms: now_ms,
                        status: Some(200),
                        error: None,
                    };
                    store
                        .finish_attempt(event, &owner, &attempt, &Next::Delivered)
                        .await
                        .expect("finish");
                }
            }
        }));
    }
    for worker in workers {
        worker.await.expect("worker");
    }
    let delivered = delivered.lock().expect("lock").clone();
    assert_eq!(
        delivered.keys().cloned().collect::<HashSet<_>>(),
        expected,
        "every event delivered"
    );
    assert!(delivered.values().all(|n| *n == 1), "{delivered:?}");
    let per_store = *per_store.lock().expect("lock");
    assert!(
        per_store.iter().all(|n| *n > 0),
        "both stores leased: {per_store:?}"
    );
    for (resource, versions) in order.lock().expect("lock").iter() {
        assert_eq!(versions, &(1..=10).collect::<Vec<i64>>(), "{resource}");
    }
    a.close().await;
    b.close().await;
}

/// A TCP proxy in front of PostgreSQL that the test can take down (every connection
/// cut, new ones refused) and bring back.
struct Proxy {
    port: u16,
    up: Arc<AtomicBool>,
    cut: tokio::sync::watch::Sender<u64>,
    hush: tokio::sync::watch::Sender<u64>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start() -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let up = Arc::new(AtomicBool::new(true));
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let (hush, _) = tokio::sync::watch::channel(0u64);
        let (flag, cuts, hushes) = (up.clone(), cut.clone(), hush.clone());
        let accepting = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !flag.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let (mut cut, mut hush) = (cuts.subscribe(), hushes.subscribe());
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect("127.0.0.1:5432").await
                    else {
                        return;
                    };
                    let hushed = tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => false,
                        _ = cut.changed() => false,
                        _ = hush.changed() => true,
                    };
                    if hushed {
                        // Both ends stay open and nothing more passes: no reset, no
                        // answer, as when a route is gone.
                        std::future::pending::<()>().await;
                    }
                    drop((client, server));
                });
            }
        });
        Proxy {
            port,
            up,
            cut,
            hush,
            accepting,
        }
    }

    fn url(&self, db: &PgDatabase) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{}", self.port, db.name)
    }

    fn down(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    fn up(&self) {
        self.up.store(true, Ordering::SeqCst);
    }

    /// Every connection open now goes silent for good; new ones pass as before.
    fn hush(&self) {
        self.hush.send_modify(|n| *n += 1);
    }

    /// Cut every connection and close the port: connecting is refused.
    async fn close(self) {
        self.down();
        self.accepting.abort();
        let _ = self.accepting.await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_answers_503_within_2_s_and_recovers() {
    let db = PgDatabase::create();
    let proxy = Proxy::start().await;
    let server = server_on(&proxy.url(&db), "").await;
    let t = now();
    let first = stripe_event("evt_before", "customer.updated", "cus_1", t);
    let (status, _) = server.post_stripe(&[STRIPE_SECRET], t, &first).await;
    assert_eq!(status, 200);

    proxy.down();
    let during = stripe_event("evt_during", "customer.updated", "cus_2", t);
    for _ in 0..3 {
        let started = Instant::now();
        let (status, answer) = server.post_stripe(&[STRIPE_SECRET], t, &during).await;
        let took = started.elapsed();
        assert_eq!(
            (status, answer),
            (503, json!({"error": "store_unavailable"}))
        );
        assert!(took < Duration::from_secs(2), "503 after {took:?}");
    }

    // The database is back: the sender's retry is accepted, with nothing lost.
    proxy.up();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, answer) = server.post_stripe(&[STRIPE_SECRET], t, &during).await;
        if status == 200 {
            assert_eq!(answer["status"], "accepted");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not recovered: {status} {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        server.receipt("stripe", "evt_before").await.state,
        "pending"
    );
    assert_eq!(
        server.receipt("stripe", "evt_during").await.state,
        "pending"
    );
    assert_eq!(server.count_receipts("stripe").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_gone_silent_under_a_batch_is_given_up_and_ingest_recovers() {
    let db = PgDatabase::create();
    let proxy = Proxy::start().await;
    // Statements are bounded at 500 ms on the server: a batch waits 1 s for an answer.
    let store = format!(
        "[store]\nurl = \"{}\"\nstatement_timeout_ms = 500\n",
        proxy.url(&db)
    );
    let server = Server::start(&stripe_config(&store)).await;
    let t = now();
    let first = stripe_event("evt_before", "customer.updated", "cus_1", t);
    let (status, _) = server.post_stripe(&[STRIPE_SECRET], t, &first).await;
    assert_eq!(status, 200);

    // Every connection open now, the batches' own among them, answers nothing more.
    proxy.hush();
    let during = stripe_event("evt_during", "customer.updated", "cus_2", t);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(30);
    let mut answers = Vec::new();
    loop {
        let (status, answer) = server.post_stripe(&[STRIPE_SECRET], t, &during).await;
        answers.push(status);
        if status == 200 {
            assert_eq!(answer["status"], "accepted");
            break;
        }
        assert_eq!(answer, json!({"error": "store_unavailable"}));
        assert!(Instant::now() < deadline, "not recovered: {answers:?}");
    }
    // Without a limit of its own, the batch would wait on the silent connection for
    // as long as the kernel keeps it (minutes), and every request would get 503.
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "recovered after {took:?}: {answers:?}"
    );
    // Counted past the proxy: the server's idle connections are silent too.
    let mut direct = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url())
        .await
        .expect("connect");
    let kept: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM receipts")
        .fetch_one(&mut direct)
        .await
        .expect("count");
    assert_eq!(kept, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_answers_503_within_2_s() {
    let db = PgDatabase::create();
    let proxy = Proxy::start().await;
    let server = server_on(&proxy.url(&db), "").await;
    proxy.close().await;
    let t = now();
    let body = stripe_event("evt_gone", "customer.updated", "cus_1", t);
    let started = Instant::now();
    let (status, answer) = server.post_stripe(&[STRIPE_SECRET], t, &body).await;
    assert_eq!(
        (status, answer),
        (503, json!({"error": "store_unavailable"}))
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_from_empty_and_a_newer_schema_is_refused() {
    let db = PgDatabase::create();
    let store = Store::open(&pg(&db.url()))
        .await
        .expect("migrate from empty");
    assert_eq!(store.count_receipts("stripe").await.expect("count"), 0);
    store.close().await;
    // Opening again applies nothing and works.
    Store::open(&pg(&db.url()))
        .await
        .expect("reopen")
        .close()
        .await;

    // `hookhost migrate` on a second, empty database.
    let other = PgDatabase::create();
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("hookhost.toml");
    std::fs::write(&config, format!("store = \"{}\"\n", other.url())).expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookhost"))
        .args(["migrate", "--config"])
        .arg(&config)
        .output()
        .expect("run hookhost migrate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let store = Store::open(&pg(&other.url())).await.expect("migrated");
    assert!(store.paused().await.expect("tables exist").is_empty());
    store.close().await;

    // A newer hookhost migrated this database: this one refuses it, by name.
    psql_in(
        &db.name,
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (9999, 'from the future', true, '\\x00', 0)",
    );
    let refused = Store::open(&pg(&db.url())).await.expect_err("refused");
    let message = refused.to_string();
    assert!(
        message.contains("the database schema is at version 9999, newer than this hookhost knows")
            && message.ends_with("upgrade hookhost"),
        "{message}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookhost"))
        .args(["migrate", "--config"])
        .arg(&{
            std::fs::write(&config, format!("store = \"{}\"\n", db.url())).expect("write");
            config.clone()
        })
        .output()
        .expect("run hookhost migrate");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("upgrade hookhost"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One statement in database `name` as the `postgres` superuser.
fn psql_in(name: &str, sql: &str) {
    let out = std::process::Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            "5432",
            "-U",
            "postgres",
            "-d",
            name,
        ])
        .args(["-v", "ON_ERROR_STOP=1", "-qXc", sql])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {sql:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_refuses_a_newer_schema_too() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("hookhost.db");
    Store::open_sqlite(&path)
        .await
        .expect("create")
        .close()
        .await;
    let mut conn = open_db(&path).await;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (9999, 'from the future', 1, x'00', 0)",
    )
    .execute(&mut conn)
    .await
    .expect("insert");
    drop(conn);
    let message = Store::open_sqlite(&path)
        .await
        .expect_err("refused")
        .to_string();
    assert!(message.contains("version 9999, newer than"), "{message}");
}

/// Retention on one store: delivered receipts older than the retention go with their
/// attempts; pending ones never; dead ones only under their own setting, from their
/// last attempt.
async fn retention_on(store: Store) {
    const DAY: i64 = 86_400_000;
    let now_ms = now() * 1000;
    let old = now_ms - 40 * DAY;
    let endpoints = vec!["stripe".to_string()];
    for (id, received) in [
        ("evt_old_delivered", old),
        ("evt_new_delivered", now_ms),
        ("evt_old_dead", old),
        ("evt_old_pending", old),
        ("evt_late_dead", old),
    ] {
        let mut receipt = new_receipt(id, id, Some(1), received);
        receipt.resource = None;
        store.record(receipt).await.expect("record");
    }
    // One resource's version 1 dies, then its version 2 is delivered. Another's three
    // versions are all delivered.
    for (id, resource, version) in [
        ("evt_v1_dead", "cus_kept", 1),
        ("evt_v2_delivered", "cus_kept", 2),
        ("evt_m1", "cus_many", 1),
        ("evt_m2", "cus_many", 2),
        ("evt_m3", "cus_many", 3),
    ] {
        let receipt = new_receipt(id, resource, Some(version), old);
        store.record(receipt).await.expect("record");
    }
    let finish = |event: hookhost::store::Leased| {
        let store = store.clone();
        async move {
            let (next, at) = match event.event_id.as_str() {
                "evt_old_delivered" | "evt_v2_delivered" | "evt_m1" | "evt_m2" | "evt_m3" => {
                    (Next::Delivered, old)
                }
                "evt_new_delivered" => (Next::Delivered, now_ms),
                "evt_old_dead" | "evt_v1_dead" => (Next::Dead, old),
                // Retried for weeks, it went dead only yesterday.
                "evt_late_dead" => (Next::Dead, now_ms - DAY),
                _ => (Next::RetryAt(now_ms + DAY), old),
            };
            let attempt = AttemptRecord {
                started_at_ms: at,
                ended_at_ms: at,
                status: Some(200),
                error: None,
            };
            store
                .finish_attempt(&event, "w", &attempt, &next)
                .await
                .expect("finish");
        }
    };
    let lease = || store.lease_due("w", &endpoints, now_ms, Duration::from_secs(60), 10);
    // Each resource's versions go one at a time, in order.
    let mut rounds = Vec::new();
    loop {
        let leased = lease().await.expect("lease");
        if leased.is_empty() {
            break;
        }
        rounds.push(leased.len());
        for event in leased {
            finish(event).await;
        }
    }
    assert_eq!(rounds, [7, 2, 1]);
    let retention = RetentionConfig::default();
    let purged = store.purge(now_ms, &retention).await.expect("purge");
    // The old delivered event and all three delivered versions, in one purge.
    assert_eq!((purged.receipts, purged.attempts), (4, 4));
    for gone in ["evt_m1", "evt_m2", "evt_m3"] {
        let row = store.receipt("stripe", gone).await.expect("query");
        assert!(row.is_none(), "{gone} purged");
    }
    // Version 2 is kept past its retention while version 1 may be replayed: it is
    // what tells a replay that the destination has a newer version.
    let v2 = store
        .receipt("stripe", "evt_v2_delivered")
        .await
        .expect("query");
    assert_eq!(v2.map(|r| r.state).as_deref(), Some("delivered"));
    let v1 = hookhost::store::Filter::one("stripe", "evt_v1_dead");
    assert_eq!(store.replay(&v1).await.expect("replay"), 0);
    assert!(
        store
            .receipt("stripe", "evt_old_delivered")
            .await
            .expect("query")
            .is_none()
    );
    assert!(
        store
            .attempts("stripe", "evt_old_delivered")
            .await
            .expect("query")
            .is_empty()
    );
    for kept in ["evt_new_delivered", "evt_old_dead", "evt_old_pending"] {
        assert!(
            store
                .receipt("stripe", kept)
                .await
                .expect("query")
                .is_some(),
            "{kept} kept"
        );
    }
    // Dead letters go only under their own setting, counted from their last attempt.
    let retention = RetentionConfig {
        dead: Some(Duration::from_secs(30 * 86_400)),
        ..retention
    };
    let purged = store.purge(now_ms, &retention).await.expect("purge");
    assert_eq!((purged.receipts, purged.attempts), (2, 2));
    assert!(
        store
            .receipt("stripe", "evt_old_dead")
            .await
            .expect("query")
            .is_none()
    );
    assert!(
        store
            .receipt("stripe", "evt_old_pending")
            .await
            .expect("query")
            .is_some(),
        "pending is never purged"
    );
    let late = store
        .receipt("stripe", "evt_late_dead")
        .await
        .expect("query");
    assert_eq!(late.map(|r| r.state).as_deref(), Some("dead"));
    // With version 1 gone, version 2 goes at the next purge.
    assert_eq!(store.count_receipts("stripe").await.expect("count"), 4);
    let purged = store.purge(now_ms, &retention).await.expect("purge");
    assert_eq!((purged.receipts, purged.attempts), (1, 1));
    assert_eq!(store.count_receipts("stripe").await.expect("count"), 3);
    store.close().await;
}

/// At one version the later arrival is the newer, as a replay orders them: a
/// delivered event past its retention is kept while an earlier one of the same
/// version may be replayed, or that replay would send the earlier over it.
async fn retention_keeps_a_same_version_successor_on(store: Store) {
    const DAY: i64 = 86_400_000;
    let now_ms = now() * 1000;
    let old = now_ms - 40 * DAY;
    for (id, received) in [("evt_first", old), ("evt_second", old + 1)] {
        let receipt = new_receipt(id, "cus_same", Some(5), received);
        assert_eq!(
            store.record(receipt).await.expect("record"),
            Outcome::Accepted
        );
    }
    let endpoints = vec!["stripe".to_string()];
    // One event of a resource at a time: the first dies, then the second is delivered.
    for (id, next) in [("evt_first", Next::Dead), ("evt_second", Next::Delivered)] {
        let leased = store
            .lease_due("w", &endpoints, now_ms, Duration::from_secs(60), 10)
            .await
            .expect("lease");
        let ids: Vec<&str> = leased.iter().map(|e| e.event_id.as_str()).collect();
        assert_eq!(ids, [id]);
        let attempt = AttemptRecord {
            started_at_ms: old,
            ended_at_ms: old,
            status: Some(200),
            error: None,
        };
        store
            .finish_attempt(&leased[0], "w", &attempt, &next)
            .await
            .expect("finish");
    }
    let purged = store
        .purge(now_ms, &RetentionConfig::default())
        .await
        .expect("purge");
    assert_eq!(purged.receipts, 0, "the later delivered event was purged");
    let first = hookhost::store::Filter::one("stripe", "evt_first");
    assert_eq!(store.replay(&first).await.expect("replay"), 0);
    // The earlier one goes under its own retention at one purge, the later at the next.
    let retention = RetentionConfig {
        dead: Some(Duration::from_secs(30 * 86_400)),
        ..RetentionConfig::default()
    };
    for _ in 0..2 {
        let purged = store.purge(now_ms, &retention).await.expect("purge");
        assert_eq!(purged.receipts, 1);
    }
    assert_eq!(store.count_receipts("stripe").await.expect("count"), 0);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_a_same_version_successor_on_postgres() {
    on_postgres(retention_keeps_a_same_version_successor_on).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_a_same_version_successor_on_sqlite() {
    on_sqlite(retention_keeps_a_same_version_successor_on).await;
}

/// Ignored and stale receipts, settled as they arrived and never delivered or
/// replayed, go after the delivered retention counted from their arrival; a retry of
/// one that is gone is judged again as it was (by a process that did not see it: this
/// one remembers what it stored).
async fn retention_purges_settled_receipts_on(open: impl AsyncFn() -> Store) {
    let store = open().await;
    const DAY: i64 = 86_400_000;
    let now_ms = now() * 1000;
    let old = now_ms - 40 * DAY;
    let ping = |id: &str, received: i64| {
        let mut receipt = new_receipt(id, "x", None, received);
        receipt.resource = None;
        receipt.ignore = Some("ping".into());
        receipt
    };
    let recorded = [
        store.record(ping("evt_ping_old", old)).await,
        store.record(ping("evt_ping_today", now_ms)).await,
        store
            .record(new_receipt("evt_v2", "cus_a", Some(2), old))
            .await,
        store
            .record(new_receipt("evt_v1", "cus_a", Some(1), old))
            .await,
    ];
    let outcomes: Vec<Outcome> = recorded.into_iter().map(|o| o.expect("record")).collect();
    assert_eq!(
        outcomes,
        [
            Outcome::Ignored("ping".into()),
            Outcome::Ignored("ping".into()),
            Outcome::Accepted,
            Outcome::StaleVersion
        ]
    );
    let purged = store
        .purge(now_ms, &RetentionConfig::default())
        .await
        .expect("purge");
    assert_eq!(purged.receipts, 2);
    for (id, kept) in [
        ("evt_ping_old", false),
        ("evt_v1", false),
        ("evt_ping_today", true),
        ("evt_v2", true),
    ] {
        let row = store.receipt("stripe", id).await.expect("query");
        assert_eq!(row.is_some(), kept, "{id}");
    }
    store.close().await;
    let store = open().await;
    let again = new_receipt("evt_v1", "cus_a", Some(1), now_ms);
    assert_eq!(
        store.record(again).await.expect("record"),
        Outcome::StaleVersion
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_purges_ignored_and_stale_receipts_on_postgres() {
    let db = PgDatabase::create();
    retention_purges_settled_receipts_on(async || Store::open(&pg(&db.url())).await.expect("open"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_purges_ignored_and_stale_receipts_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("hookhost.db");
    retention_purges_settled_receipts_on(async || Store::open_sqlite(&path).await.expect("open"))
        .await;
}

/// A discarded receipt goes under `dead_days`, counted from its discarding: one that
/// arrived 40 days ago and is discarded now is kept 30 more days, not purged at once.
async fn retention_purges_discarded_receipts_on(store: Store) {
    const DAY: i64 = 86_400_000;
    let now_ms = now() * 1000;
    let mut receipt = new_receipt("evt_discarded", "x", None, now_ms - 40 * DAY);
    receipt.resource = None;
    store.record(receipt).await.expect("record");
    let discarded = store.discard("stripe", "evt_discarded", "test data").await;
    assert!(discarded.expect("discard"));
    let dead_days = RetentionConfig {
        dead: Some(Duration::from_secs(30 * 86_400)),
        ..RetentionConfig::default()
    };
    let later = now_ms + 31 * DAY;
    for (at, retention, purged) in [
        (now_ms, dead_days, 0),
        (later, RetentionConfig::default(), 0),
        (later, dead_days, 1),
    ] {
        let done = store.purge(at, &retention).await.expect("purge");
        assert_eq!(done.receipts, purged, "at {at} with {retention:?}");
    }
    let row = store
        .receipt("stripe", "evt_discarded")
        .await
        .expect("query");
    assert!(row.is_none());
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_purges_discarded_receipts_on_postgres() {
    on_postgres(retention_purges_discarded_receipts_on).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_purges_discarded_receipts_on_sqlite() {
    on_sqlite(retention_purges_discarded_receipts_on).await;
}

/// `test` on a fresh PostgreSQL store, in a database of its own.
async fn on_postgres(test: impl AsyncFnOnce(Store)) {
    let db = PgDatabase::create();
    test(Store::open(&pg(&db.url())).await.expect("open")).await;
}

/// `test` on a fresh SQLite store, in a directory of its own.
async fn on_sqlite(test: impl AsyncFnOnce(Store)) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("hookhost.db");
    test(Store::open_sqlite(&path).await.expect("open")).await;
}

/// Record `n` events without a resource, received a millisecond apart from `now_ms`.
async fn record_unversioned(store: &Store, n: i64, now_ms: i64) {
    let recorded = (0..n).map(|i| {
        let store = store.clone();
        async move {
            let mut receipt = new_receipt(&format!("evt_{i:04}"), "x", None, now_ms + i);
            receipt.resource = None;
            store.record(receipt).await.expect("record");
        }
    });
    let recorded: Vec<_> = recorded.map(tokio::spawn).collect();
    for task in recorded {
        task.await.expect("recorded");
    }
}

/// The `stripe` endpoint's events in `state`, at most `limit` of them.
fn in_state(state: &str, limit: Option<u32>) -> hookhost::store::Filter {
    hookhost::store::Filter {
        endpoint: Some("stripe".into()),
        states: vec![state.into()],
        limit,
        ..hookhost::store::Filter::default()
    }
}

/// A replay of more events than one of SQLite's replay statements takes (1,000)
/// replays them all, in batches, and its limit still counts the events replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_larger_than_a_batch_replays_every_event_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("hookhost.db");
    let store = Store::open_sqlite(&path).await.expect("open");
    record_unversioned(&store, 2_600, now() * 1000).await;
    let mut db = open_db(&path).await;
    sqlx::query("UPDATE receipts SET state = 'dead'")
        .execute(&mut db)
        .await
        .expect("dead");
    let replayed = store.replay(&in_state("dead", Some(1_500))).await;
    assert_eq!(replayed.expect("replay"), 1_500);
    let replayed = store.replay(&in_state("dead", None)).await;
    assert_eq!(replayed.expect("replay"), 1_100);
    let pending: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM receipts WHERE state = 'pending'")
        .fetch_one(&mut db)
        .await
        .expect("count");
    assert_eq!(pending, 2_600);

    // Delivered again at once, as fast workers would deliver it between batches, a
    // replayed event is not taken again by the next batch: one replay of the 2,600
    // delivered events, with room for 5,000, replays 2,600.
    sqlx::query("UPDATE receipts SET state = 'delivered'")
        .execute(&mut db)
        .await
        .expect("delivered");
    sqlx::query(
        "CREATE TRIGGER delivered_at_once AFTER UPDATE OF state ON receipts
         WHEN NEW.state = 'pending'
         BEGIN UPDATE receipts SET state = 'delivered' WHERE rowid = NEW.rowid; END",
    )
    .execute(&mut db)
    .await
    .expect("trigger");
    let replayed = store.replay(&in_state("delivered", Some(5_000))).await;
    assert_eq!(replayed.expect("replay"), 2_600);
    store.close().await;
}

/// On PostgreSQL too, a replay goes in statements of at most 1,000 events: one
/// statement over a large replay (a day's dead letters) would run past
/// `statement_timeout_ms`, be cancelled and replay nothing. Its limit still counts
/// the events replayed, and an event delivered again between batches is not taken
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_larger_than_a_batch_replays_every_event_on_postgres() {
    let db = PgDatabase::create();
    let store = Store::open(&pg(&db.url())).await.expect("open");
    record_unversioned(&store, 2_600, now() * 1000).await;
    let mut direct = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url())
        .await
        .expect("connect");
    let run = |sql: &'static str| sqlx::query(sql);
    // Each replay statement's rows, counted by a statement-level trigger.
    for sql in [
        "UPDATE receipts SET state = 'dead'",
        "CREATE TABLE replay_statements (n BIGINT NOT NULL)",
        "CREATE FUNCTION count_statement() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN INSERT INTO replay_statements SELECT COUNT(*) FROM changed; RETURN NULL; END $$",
        "CREATE TRIGGER count_statement AFTER UPDATE ON receipts REFERENCING NEW TABLE AS changed
         FOR EACH STATEMENT EXECUTE FUNCTION count_statement()",
    ] {
        run(sql).execute(&mut direct).await.expect(sql);
    }
    let replayed = store.replay(&in_state("dead", Some(1_500))).await;
    assert_eq!(replayed.expect("replay"), 1_500);
    let replayed = store.replay(&in_state("dead", None)).await;
    assert_eq!(replayed.expect("replay"), 1_100);
    let counted: Vec<i64> = sqlx::query_scalar("SELECT n FROM replay_statements")
        .fetch_all(&mut direct)
        .await
        .expect("statements");
    assert_eq!(counted.iter().sum::<i64>(), 2_600, "{counted:?}");
    assert!(counted.iter().all(|&n| n <= 1_000), "{counted:?}");

    // Delivered again at once between batches: taken once.
    for sql in [
        "DROP TRIGGER count_statement ON receipts",
        "UPDATE receipts SET state = 'delivered'",
        "CREATE FUNCTION delivered_at_once() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF NEW.state = 'pending' THEN NEW.state := 'delivered'; END IF; RETURN NEW; END $$",
        "CREATE TRIGGER delivered_at_once BEFORE UPDATE ON receipts
         FOR EACH ROW EXECUTE FUNCTION delivered_at_once()",
    ] {
        run(sql).execute(&mut direct).await.expect(sql);
    }
    let replayed = store.replay(&in_state("delivered", Some(5_000))).await;
    assert_eq!(replayed.expect("replay"), 2_600);
    drop(direct);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_purges_delivered_receipts_on_postgres() {
    on_postgres(retention_on).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_purges_delivered_receipts_on_sqlite() {
    on_sqlite(retention_on).await;
}

/// `a` takes `endpoint`'s reconciliation lock, and `b` is refused it meanwhile.
async fn held_by(a: &Store, b: &Store, endpoint: &str) -> hookhost::store::RunLock {
    let held = a
        .lock_reconcile(endpoint)
        .await
        .expect("lock")
        .expect("free");
    let refused = b.lock_reconcile(endpoint).await.expect("lock");
    assert!(refused.is_none(), "{endpoint}: held by the other");
    held
}

/// An endpoint's reconciliation lock is one process's at a time, per endpoint; on
/// PostgreSQL it goes with its connection, and a holder whose connection was lost
/// finds out (before it saves a page).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconciliation_lock_is_one_stores_and_goes_with_its_connection() {
    let db = PgDatabase::create();
    let a = Store::open(&pg(&db.url())).await.expect("open a");
    let b = Store::open(&pg(&db.url())).await.expect("open b");
    let mut held = held_by(&a, &b, "stripe").await;
    let other = b.lock_reconcile("other").await.expect("lock");
    other.expect("another endpoint's").release().await;
    held.still_held().await.expect("still a's");

    // The lock's connection is ended (a failover, an idle timeout). Only this test's
    // database's: a test running beside it may hold one of its own (sqlx's migration
    // lock, say), on a connection that must live.
    psql_in(
        &db.name,
        "SELECT pg_terminate_backend(pid) FROM pg_locks
         WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    );
    let lost = held
        .still_held()
        .await
        .expect_err("the lock went with its connection");
    assert!(lost.to_string().contains("lock was lost"), "{lost}");
    held.release().await;
    // Free once the server has seen the connection go.
    let deadline = Instant::now() + Duration::from_secs(10);
    let taken = loop {
        if let Some(taken) = b.lock_reconcile("stripe").await.expect("lock") {
            break taken;
        }
        assert!(Instant::now() < deadline, "never released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let refused = a.lock_reconcile("stripe").await.expect("lock");
    assert!(refused.is_none(), "b holds it");
    // Released, it is free at once.
    taken.release().await;
    held_by(&a, &b, "stripe").await.release().await;
    a.close().await;
    b.close().await;
}

/// On SQLite, the lock is a file beside the database: one store's at a time, free
/// once released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconciliation_lock_on_sqlite_is_a_file_beside_the_database() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("hookhost.db");
    let a = Store::open_sqlite(&path).await.expect("open a");
    let b = Store::open_sqlite(&path).await.expect("open b");
    let mut held = held_by(&a, &b, "stripe").await;
    held.still_held().await.expect("a file lock stays");
    let locks = std::fs::read_dir(dir.path().join("hookhost.db-reconcile")).expect("lock dir");
    assert_eq!(locks.count(), 1);
    held.release().await;
    held_by(&b, &a, "stripe").await.release().await;
    a.close().await;
    b.close().await;
}
