//! The request path and the status-code contract, over real HTTP into real SQLite and
//! PostgreSQL (`both_stores!`).

use crate::support::*;
use serde_json::{Value, json};

crate::both_stores! {
async fn accepted_then_duplicate_and_the_receipt_is_durable() {
    let server = Server::start(&stripe_config("")).await;
    let body = stripe_event("evt_a", "customer.updated", "cus_1", now());
    let headers = stripe_headers(&[STRIPE_SECRET], now(), &body);
    let first = server.post("stripe", &headers, body.clone()).await;
    assert_eq!(
        first,
        (200, json!({"status": "accepted", "event_id": "evt_a"}))
    );
    let again = server.post("stripe", &headers, body.clone()).await;
    assert_eq!(
        again,
        (200, json!({"status": "duplicate", "event_id": "evt_a"}))
    );

    let receipt = server.receipt("stripe", "evt_a").await;
    assert_eq!(receipt.state, "pending");
    assert_eq!(receipt.event_type, "customer.updated");
    assert_eq!(receipt.body, body.as_bytes());
    assert_eq!(receipt.secret_index, 0);
    assert!(receipt.headers.contains("stripe-signature"));
    let reopen = server.reopen();
    let _dir = server.stop().await;

    // The receipt survives the process: open the store again and find it.
    let store = reopen.open().await;
    assert!(
        store
            .receipt("stripe", "evt_a")
            .await
            .expect("query")
            .is_some()
    );
    store.close().await;
}
}

crate::both_stores! {
async fn every_rejection_row_of_the_status_table() {
    let server = Server::start_in(with_test_guest(), &format!(
        "{}\n[[endpoint]]\nid = \"github\"\nplugin = \"github\"\nsecrets = [\"gh-secret\"]\n\
         [[endpoint]]\nid = \"refuses\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\n[endpoint.config]\nmode = \"reject\"\nphase = \"none\"\n\
         [[endpoint]]\nid = \"traps\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\n[endpoint.config]\nmode = \"trap\"\nphase = \"describe\"\n",
        stripe_config("plugins_dir = \"plugins\"\n[limits]\nmax_body_bytes = 4096")
    ))
    .await
    .expect("server starts");
    let t = now();
    let body = stripe_event("evt_r", "customer.updated", "cus_1", t);
    let signed = stripe_headers(&[STRIPE_SECRET], t, &body);

    // 404: unknown endpoint; 405: a known endpoint only takes POST.
    assert_eq!(
        server.post("nope", &signed, body.clone()).await,
        (404, json!({"error": "unknown_endpoint"}))
    );
    // A name that is not UTF-8 once decoded names no endpoint either.
    assert_eq!(
        server.post("%FF", &signed, body.clone()).await,
        (404, json!({"error": "unknown_endpoint"}))
    );
    let get = request(
        server.addr,
        "GET",
        "/webhooks/stripe",
        &[],
        Default::default(),
    )
    .await;
    assert_eq!(get, (405, json!({"error": "method_not_allowed"})));
    // 404 with a code of its own for a path that is no endpoint's at all.
    for path in ["/", "/webhook/stripe", "/webhooks/stripe/extra", "/webhooks/"] {
        let answer = request(server.addr, "POST", path, &signed, body.clone().into()).await;
        assert_eq!(answer, (404, json!({"error": "not_found"})), "{path}");
    }
    // 413: over the cap, whatever the signature.
    let big = "x".repeat(4097);
    assert_eq!(
        server.post("stripe", &signed, big).await,
        (413, json!({"error": "body_too_large"}))
    );
    // 400s.
    let bad = |code: &str| (400, json!({ "error": code }));
    assert_eq!(
        server.post("stripe", &[], body.clone()).await,
        bad("missing_signature")
    );
    assert_eq!(
        server.post_stripe(&["whsec_wrong"], t, &body).await,
        bad("invalid_signature")
    );
    let mut tampered = body.clone().into_bytes();
    tampered[10] ^= 1;
    assert_eq!(
        server.post("stripe", &signed, tampered).await,
        bad("invalid_signature")
    );
    assert_eq!(
        server.post_stripe(&[STRIPE_SECRET], t, "not json").await,
        bad("malformed_body")
    );
    // Timestamp window, both directions, even though the MAC matches. Each skew is
    // taken from the clock just before sending (the steps above can take over a
    // second on a loaded machine, which brought `t + 301` within the window), early
    // in a second, so that the server judges it within the same second.
    for skew in [-301, 301] {
        let now = early_in_a_second().await;
        assert_eq!(
            server.post_stripe(&[STRIPE_SECRET], now + skew, &body).await,
            bad("timestamp_outside_window"),
            "skew {skew}"
        );
    }
    // 200 ignored: GitHub's ping is received, deliberately not processed.
    let ping = r#"{"zen":"Keep it logically awesome.","hook_id":1}"#;
    let gh = vec![
        (
            "x-hub-signature-256",
            format!(
                "sha256={}",
                hex::encode(hmac_sha256(b"gh-secret", &[ping.as_bytes()]))
            ),
        ),
        ("x-github-event", "ping".to_string()),
        ("x-github-delivery", "d-1".to_string()),
    ];
    assert_eq!(
        server.post("github", &gh, ping).await,
        (200, json!({"ignored": "ping", "event_id": "d-1"}))
    );
    // 422: the plugin refuses the event semantically.
    let h = guest_headers("s", "e-422", b"{}");
    let refused = server.post("refuses", &h, "{}").await;
    assert_eq!(refused.0, 422);
    assert_eq!(refused.1["error"], "event_rejected");
    // 500: the plugin trapped after verification; nothing was stored.
    assert_eq!(
        server
            .post("traps", &guest_headers("s", "e-500", b"{}"), "{}")
            .await,
        (500, json!({"error": "plugin_failed"}))
    );
    assert_eq!(server.count_receipts("traps").await, 0);
    assert_eq!(server.count_receipts("refuses").await, 0);
    // No rejection stored a receipt for stripe.
    assert_eq!(server.count_receipts("stripe").await, 0);
    // Exactly at the cap is fine (then judged on its signature).
    let at_cap = "y".repeat(4096);
    assert_eq!(
        server.post("stripe", &signed, at_cap).await,
        bad("invalid_signature")
    );
}
}

crate::both_stores! {
async fn rotation_records_which_secret_matched() {
    let server = Server::start(&stripe_config("")).await;
    let t = now();
    let old = stripe_event("evt_old_key", "customer.updated", "cus_r1", t);
    let (status, _) = server.post_stripe(&[STRIPE_OLD_SECRET], t, &old).await;
    assert_eq!(status, 200);
    // A sender mid-rotation signs with both secrets; the current one is recorded.
    let both = stripe_event("evt_both_keys", "customer.updated", "cus_r2", t);
    let (status, _) = server
        .post_stripe(&["whsec_unknown", STRIPE_SECRET], t, &both)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        server.receipt("stripe", "evt_old_key").await.secret_index,
        1
    );
    assert_eq!(
        server.receipt("stripe", "evt_both_keys").await.secret_index,
        0
    );
}
}

crate::both_stores! {
async fn fifty_concurrent_identical_requests_store_one_receipt() {
    let server = std::sync::Arc::new(Server::start(&stripe_config("")).await);
    let t = now();
    let body = stripe_event("evt_race", "customer.updated", "cus_race", t);
    let headers = stripe_headers(&[STRIPE_SECRET], t, &body);
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(50));
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (server, headers, body, barrier) = (
            server.clone(),
            headers.clone(),
            body.clone(),
            barrier.clone(),
        );
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            server.post("stripe", &headers, body).await
        }));
    }
    let mut accepted = 0;
    let mut duplicates = 0;
    for task in tasks {
        let (status, answer) = task.await.expect("task");
        assert_eq!(status, 200, "{answer}");
        match answer["status"].as_str() {
            Some("accepted") => accepted += 1,
            Some("duplicate") => duplicates += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert_eq!((accepted, duplicates), (1, 49));
    assert_eq!(server.count_receipts("stripe").await, 1);
}
}

/// A signed Stripe event of exactly `size` bytes, for its own customer.
/// The current Unix second, read in its first half (waiting for the next one if
/// need be): a request sent at once is judged by the server within the same second.
async fn early_in_a_second() -> i64 {
    let into = hookhost::clock::now_ms().rem_euclid(1000);
    if into >= 500 {
        let rest = u64::try_from(1000 - into).unwrap_or(0);
        tokio::time::sleep(std::time::Duration::from_millis(rest)).await;
    }
    hookhost::clock::now_ms().div_euclid(1000)
}

fn event_of_size(id: &str, t: i64, size: usize) -> String {
    let event = |pad: usize| {
        json!({
            "id": id,
            "object": "event",
            "type": "customer.updated",
            "created": t,
            "data": { "object": { "id": format!("cus_{id}"), "object": "customer", "pad": "x".repeat(pad) } }
        })
        .to_string()
    };
    let event = event(size - event(0).len());
    assert_eq!(event.len(), size);
    event
}

/// A sender on a raw connection that declares its whole body, sends part of it, and
/// stops until told to send the rest.
pub struct SlowSender {
    stream: tokio::net::TcpStream,
    rest: Vec<u8>,
}

impl SlowSender {
    async fn start(addr: std::net::SocketAddr, body: &str, sent: usize) -> SlowSender {
        SlowSender::start_to(addr, "stripe", STRIPE_SECRET, body, sent).await
    }

    /// The same, to Stripe endpoint `endpoint`, signed with `secret`.
    pub async fn start_to(
        addr: std::net::SocketAddr,
        endpoint: &str,
        secret: &str,
        body: &str,
        sent: usize,
    ) -> SlowSender {
        use tokio::io::AsyncWriteExt as _;
        let mut request = format!(
            "POST /webhooks/{endpoint} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
            body.len()
        );
        for (name, value) in stripe_headers(&[secret], now(), body) {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        let mut request = request.into_bytes();
        request.extend_from_slice(&body.as_bytes()[..sent]);
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        stream.write_all(&request).await.expect("send the head");
        SlowSender {
            stream,
            rest: body.as_bytes()[sent..].to_vec(),
        }
    }

    /// Send nothing more; the whole answer, once the server closes.
    async fn stall(mut self) -> String {
        use tokio::io::AsyncReadExt as _;
        let mut answer = Vec::new();
        tokio::time::timeout(
            std::time::Duration::from_secs(20),
            self.stream.read_to_end(&mut answer),
        )
        .await
        .expect("the server answers a stalled body")
        .expect("answer");
        String::from_utf8_lossy(&answer).into_owned()
    }

    /// Send the rest; the answer's status line.
    pub async fn finish(mut self) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        self.stream
            .write_all(&self.rest)
            .await
            .expect("send the rest");
        let mut answer = Vec::new();
        self.stream.read_to_end(&mut answer).await.expect("answer");
        let answer = String::from_utf8_lossy(&answer);
        answer.lines().next().unwrap_or_default().to_string()
    }
}

crate::both_stores! {
async fn bodies_past_the_in_flight_budget_wait_and_are_all_accepted() {
    // Room for three bodies in memory at once.
    const BODY: usize = 128 * 1024;
    let server = std::sync::Arc::new(
        Server::start(&stripe_config(&format!(
            "[limits]\nmax_body_bytes = {BODY}\nmax_bodies_in_flight_bytes = {}",
            3 * BODY
        )))
        .await,
    );
    let budget = &server.app.bodies;
    assert_eq!(budget.available_bytes(), 3 * BODY);
    let t = now();

    // Three senders declare a full body and send half: they hold the whole budget.
    let mut slow = Vec::new();
    for i in 0..3 {
        let body = event_of_size(&format!("evt_slow_{i}"), t, BODY);
        slow.push(SlowSender::start(server.addr, &body, BODY / 2).await);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while budget.available_bytes() > 0 {
        assert!(std::time::Instant::now() < deadline, "the slow senders never reserved");
        tokio::task::yield_now().await;
    }
    // A fourth, sent whole, waits for room instead of being refused or read.
    let fourth = {
        let server = server.clone();
        let body = event_of_size("evt_waits", t, BODY);
        tokio::spawn(async move { server.post_stripe(&[STRIPE_SECRET], t, &body).await })
    };
    let mut fourth = std::pin::pin!(fourth);
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(300), &mut fourth)
            .await
            .is_err(),
        "a request was served past the budget"
    );
    for sender in slow {
        assert_eq!(sender.finish().await, "HTTP/1.1 200 OK");
    }
    let (status, answer) = fourth.await.expect("task");
    assert_eq!((status, answer["status"].as_str()), (200, Some("accepted")));

    // Many at once, ten times the budget: all wait their turn, all are accepted.
    let tasks: Vec<_> = (0..30)
        .map(|i| {
            let server = server.clone();
            let body = event_of_size(&format!("evt_many_{i}"), t, BODY);
            tokio::spawn(async move { server.post_stripe(&[STRIPE_SECRET], t, &body).await })
        })
        .collect();
    for task in tasks {
        let (status, answer) = task.await.expect("task");
        assert_eq!((status, answer["status"].as_str()), (200, Some("accepted")), "{answer}");
    }
    assert_eq!(server.count_receipts("stripe").await, 34);
    assert_eq!(budget.available_bytes(), 3 * BODY);
}
}

/// At `max_connections` open, a new connection is not served until one closes: its
/// request waits, then is answered. Connections yet to carry a request are not closed
/// to make room (their senders' first requests may be on their way).
#[tokio::test]
async fn past_max_connections_a_sender_waits_for_one_to_close() {
    let server = Server::start(&stripe_config("[limits]\nmax_connections = 2")).await;
    let first = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("connect");
    let _second = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("connect");
    let t = now();
    let body = stripe_event("evt_third", "customer.updated", "cus_c", t);
    let third = tokio::spawn({
        let (addr, body) = (server.addr, body.clone());
        async move {
            let headers = stripe_headers(&[STRIPE_SECRET], t, &body);
            request(addr, "POST", "/webhooks/stripe", &headers, body.into()).await
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!third.is_finished(), "served past the cap");
    assert_eq!(server.count_receipts("stripe").await, 0);
    drop(first);
    let (status, answer) = tokio::time::timeout(std::time::Duration::from_secs(10), third)
        .await
        .expect("served once a connection closed")
        .expect("task");
    assert_eq!(
        (status, answer["status"].as_str()),
        (200, Some("accepted")),
        "{answer}"
    );
}

/// At the cap, connections kept alive between requests are closed to make room: a
/// sender holding idle connections open keeps no one waiting.
#[tokio::test]
async fn at_max_connections_idle_kept_alive_connections_make_room() {
    use http_body_util::Full;
    let server = Server::start(&stripe_config("[limits]\nmax_connections = 2")).await;
    let t = now();
    let signed = |id: &str| {
        let body = stripe_event(id, "customer.updated", "cus_k", t);
        let mut request = hyper::Request::post("/webhooks/stripe").header("host", "hookhost");
        for (name, value) in stripe_headers(&[STRIPE_SECRET], t, &body) {
            request = request.header(name, value);
        }
        request
            .body(Full::new(hyper::body::Bytes::from(body)))
            .expect("request")
    };
    // Two connections, each kept alive after its request.
    let mut kept = Vec::new();
    for id in ["evt_k1", "evt_k2"] {
        let stream = tokio::net::TcpStream::connect(server.addr)
            .await
            .expect("connect");
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .expect("handshake");
        let connection = tokio::spawn(connection);
        let answered = sender.send_request(signed(id)).await.expect("answered");
        assert_eq!(answered.status(), 200);
        kept.push((sender, connection));
    }
    let body = stripe_event("evt_third", "customer.updated", "cus_k", t);
    let third = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        server.post_stripe(&[STRIPE_SECRET], t, &body),
    )
    .await
    .expect("served without either connection being closed by its sender");
    assert_eq!(
        (third.0, third.1["status"].as_str()),
        (200, Some("accepted")),
        "{third:?}"
    );
    // Both were closed by the server.
    for (_, connection) in kept {
        tokio::time::timeout(std::time::Duration::from_secs(10), connection)
            .await
            .expect("closed by the server")
            .expect("task")
            .expect("closed cleanly");
    }
}

/// A body that stops arriving is answered 408 once the read timeout passes, and its
/// room in the body budget is given back; nothing is stored.
#[tokio::test]
async fn a_stalled_body_is_408_and_gives_its_room_back() {
    const BODY: usize = 64 * 1024;
    let server = Server::start(&stripe_config(&format!(
        "[limits]\nmax_body_bytes = {BODY}\nmax_bodies_in_flight_bytes = {BODY}\nread_timeout_seconds = 1"
    )))
    .await;
    let body = event_of_size("evt_stalled", now(), BODY);
    let stalled = SlowSender::start(server.addr, &body, BODY / 2).await;
    let answer = stalled.stall().await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.ends_with(r#"{"error":"body_timeout"}"#), "{answer}");
    assert_eq!(server.app.bodies.available_bytes(), BODY);
    assert_eq!(server.count_receipts("stripe").await, 0);
    // The budget is whole again: the next sender is served.
    let t = now();
    let next = event_of_size("evt_next", t, BODY);
    let (status, answer) = server.post_stripe(&[STRIPE_SECRET], t, &next).await;
    assert_eq!((status, answer["status"].as_str()), (200, Some("accepted")));
}

crate::both_stores! {
async fn a_conflicting_duplicate_keeps_the_first_evidence() {
    let server = Server::start(&stripe_config("")).await;
    let t = now();
    let first = stripe_event("evt_same", "customer.updated", "cus_c", t);
    let second = stripe_event("evt_same", "customer.updated", "cus_OTHER", t);
    let (s1, _) = server.post_stripe(&[STRIPE_SECRET], t, &first).await;
    assert_eq!(s1, 200);
    let answer = server.post_stripe(&[STRIPE_SECRET], t, &second).await;
    assert_eq!(
        answer,
        (
            200,
            json!({"ignored": "conflicting_duplicate", "event_id": "evt_same"})
        )
    );
    let store = &server.app.store;
    let kept = server.receipt("stripe", "evt_same").await;
    assert_eq!(
        kept.body,
        first.as_bytes(),
        "the first evidence is never overwritten"
    );
    assert_eq!(store.count_conflicts("stripe").await.expect("count"), 1);
    assert_eq!(store.count_receipts("stripe").await.expect("count"), 1);

    // Sent again, alone or several at once, a conflicting body is kept once; another
    // is kept beside it.
    let third = stripe_event("evt_same", "customer.updated", "cus_THIRD", t);
    let again = tokio::join!(
        server.post_stripe(&[STRIPE_SECRET], t, &second),
        server.post_stripe(&[STRIPE_SECRET], t, &third),
        server.post_stripe(&[STRIPE_SECRET], t, &third),
        server.post_stripe(&[STRIPE_SECRET], t, &third),
    );
    for (status, answer) in [again.0, again.1, again.2, again.3] {
        assert_eq!((status, &answer["ignored"]), (200, &json!("conflicting_duplicate")), "{answer}");
    }
    assert_eq!(store.count_conflicts("stripe").await.expect("count"), 2);
}
}

crate::both_stores! {
async fn the_version_gate_refuses_old_state_and_honours_tombstones() {
    let server = Server::start(&stripe_config("[limits]\nmax_body_bytes = 65536")).await;
    let t = now();
    let post = |id: &str, kind: &str, created: i64| {
        let body = stripe_event(id, kind, "cus_v", created);
        let server = &server;
        async move { server.post_stripe(&[STRIPE_SECRET], t, &body).await }
    };
    let ignored = |reason: &str, id: &str| (200, json!({"ignored": reason, "event_id": id}));
    assert_eq!(
        post("evt_v2", "customer.updated", 2000).await.1["status"],
        "accepted"
    );
    assert_eq!(
        post("evt_v1", "customer.updated", 1000).await,
        ignored("stale_version", "evt_v1")
    );
    // The same version under another id is another change stamped in the same
    // second (`invoice.created`, then `invoice.paid`): accepted, not lost.
    assert_eq!(
        post("evt_v2b", "customer.updated", 2000).await.1["status"],
        "accepted"
    );
    let same = server.receipt("stripe", "evt_v2b").await;
    assert_eq!(
        (same.state.as_str(), same.resource_version),
        ("pending", Some(2000))
    );
    assert_eq!(
        post("evt_v3", "customer.updated", 3000).await.1["status"],
        "accepted"
    );
    // A delete at 4000 leaves a tombstone; a late update from before it is stale.
    assert_eq!(
        post("evt_del", "customer.deleted", 4000).await.1["status"],
        "accepted"
    );
    assert_eq!(
        post("evt_late", "customer.updated", 3500).await,
        ignored("stale_version", "evt_late")
    );
    // An update stamped with the delete's own version does not bring it back.
    assert_eq!(
        post("evt_del_same", "customer.updated", 4000).await,
        ignored("resource_deleted", "evt_del_same")
    );
    let stale = server.receipt("stripe", "evt_late").await;
    assert_eq!(
        (stale.state.as_str(), stale.state_reason.as_deref()),
        ("stale", Some("stale_version"))
    );
    let pending = server.receipt("stripe", "evt_v3").await;
    assert_eq!(
        (pending.state.as_str(), pending.resource_version),
        ("pending", Some(3000))
    );
    // Other resources are not affected.
    let other = stripe_event("evt_other", "customer.updated", "cus_other", 1);
    let (status, answer) = server.post_stripe(&[STRIPE_SECRET], t, &other).await;
    assert_eq!((status, answer["status"].as_str()), (200, Some("accepted")));
}
}

crate::both_stores! {
async fn an_event_naming_what_cannot_be_stored_or_delivered_is_a_malformed_body() {
    let server = Server::start(&stripe_config("")).await;
    let t = now();
    // A NUL (JSON `\u0000`) in the id, the type or the resource id, or an id past
    // 1 KiB: PostgreSQL's `text` and indexes refuse them, and the group commit the
    // receipt shares with other requests would fail with it. A control character
    // there: delivery sends them in headers, which refuse it, so the event would be
    // accepted and never delivered.
    let long = format!("evt_{}", "x".repeat(1100));
    for (id, kind, customer) in [
        ("evt_nul\u{0}", "customer.updated", "cus_n"),
        ("evt_nul_type", "customer.updated\u{0}", "cus_n"),
        ("evt_nul_resource", "customer.updated", "cus_\u{0}"),
        (long.as_str(), "customer.updated", "cus_n"),
        ("evt_line\nbreak", "customer.updated", "cus_n"),
        ("evt_return_type", "customer.updated\r", "cus_n"),
        ("evt_del_resource", "customer.updated", "cus_\u{7f}"),
    ] {
        let body = stripe_event(id, kind, customer, t);
        let sent: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!((sent["id"].as_str(), sent["type"].as_str()), (Some(id), Some(kind)));
        assert_eq!(
            server.post_stripe(&[STRIPE_SECRET], t, &body).await,
            (400, json!({"error": "malformed_body"})),
            "{kind} {customer}"
        );
    }
    let body = stripe_event("evt_fine", "customer.updated", "cus_n", t);
    let (status, answer) = server.post_stripe(&[STRIPE_SECRET], t, &body).await;
    assert_eq!((status, answer["status"].as_str()), (200, Some("accepted")));
    assert_eq!(server.count_receipts("stripe").await, 1);
}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_store_answers_503_and_recovers() {
    let server = Server::start(&stripe_config("")).await;
    let t = now();
    let body = stripe_event("evt_503", "customer.updated", "cus_s", t);
    let headers = stripe_headers(&[STRIPE_SECRET], t, &body);
    server.break_store().await;
    assert_eq!(
        server.post("stripe", &headers, body.clone()).await,
        (503, json!({"error": "store_unavailable"}))
    );
    server.mend_store().await;
    let (status, answer) = server.post("stripe", &headers, body.clone()).await;
    assert_eq!((status, answer["status"].as_str()), (200, Some("accepted")));
}

/// A store so far behind that its queue of receipts is full answers 429 `overloaded`
/// with Retry-After at once (the status-code contract's "overloaded" row), not 503:
/// the sender backs off. Every receipt that found room is stored once the store goes
/// on, and the refused event is accepted when it comes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_receipt_queue_answers_429_overloaded_with_retry_after() {
    use hookhost::store::{Outcome, Reply, StoreError};
    use std::sync::mpsc;
    let server = Server::start(&stripe_config("")).await;
    // Another connection holds the write lock: the writer's batch waits on it (for
    // up to its 5 s busy timeout, far longer than filling the queue takes).
    let mut lock = open_db(&server.db_path()).await;
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut lock)
        .await
        .expect("the write lock");
    let store = server.app.store.clone();
    let (answer, answered) = mpsc::channel();
    let queued = std::thread::spawn(move || {
        let here = std::thread::current().id();
        for n in 0usize..100_000 {
            let (full, on_full) = mpsc::channel();
            let answer = answer.clone();
            let id = format!("evt_fill_{n}");
            let receipt = new_receipt(&id, &id, None, 0);
            store.queue(
                receipt,
                Reply::new(move |outcome| match outcome {
                    Err(StoreError::Overloaded) if std::thread::current().id() == here => {
                        let _ = full.send(());
                    }
                    outcome => drop(answer.send(outcome.map_err(|e| e.to_string()))),
                }),
            );
            if on_full.try_recv().is_ok() {
                return n; // receipts that found room
            }
        }
        panic!("the receipt queue never filled");
    });
    let room = tokio::task::spawn_blocking(move || queued.join().expect("filled"))
        .await
        .expect("joined");

    let t = now();
    let body = stripe_event("evt_overloaded", "customer.updated", "cus_o", t);
    let headers = stripe_headers(&[STRIPE_SECRET], t, &body);
    let (status, answer_headers, bytes) = request_raw(
        server.addr,
        "POST",
        "/webhooks/stripe",
        &headers,
        body.clone().into(),
    )
    .await;
    let refused: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!((status, refused), (429, json!({"error": "overloaded"})));
    assert_eq!(
        answer_headers
            .get("retry-after")
            .map(|v| v.to_str().expect("ASCII")),
        Some("5")
    );

    sqlx::query("ROLLBACK")
        .execute(&mut lock)
        .await
        .expect("the lock released");
    let outcomes = tokio::task::spawn_blocking(move || {
        (0..room)
            .map(|_| {
                answered
                    .recv_timeout(std::time::Duration::from_secs(20))
                    .expect("answered")
            })
            .collect::<Vec<_>>()
    })
    .await
    .expect("collected");
    assert!(outcomes.iter().all(|o| *o == Ok(Outcome::Accepted)));
    assert_eq!(
        server.count_receipts("stripe").await,
        i64::try_from(room).expect("a count")
    );
    let (status, answer) = server.post("stripe", &headers, body).await;
    assert_eq!((status, answer["status"].as_str()), (200, Some("accepted")));
}

/// A body's room in the memory budget goes with its receipt: a sender that hangs up
/// while the store is stalled does not free it, so receipts queued behind the stall
/// count against `max_bodies_in_flight_bytes` until the store is done with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_receipt_holds_its_bodys_room_after_the_sender_hangs_up() {
    let server = Server::start(&stripe_config("")).await;
    let budget = &server.app.bodies;
    let all = budget.available_bytes();
    let mut lock = open_db(&server.db_path()).await;
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut lock)
        .await
        .expect("the write lock");
    let t = now();
    let body = stripe_event("evt_hung_up", "customer.updated", "cus_h", t);
    let gave_up = tokio::time::timeout(
        std::time::Duration::from_millis(500),
        server.post_stripe(&[STRIPE_SECRET], t, &body),
    )
    .await;
    assert!(gave_up.is_err(), "answered while the store was locked");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        budget.available_bytes() < all,
        "the queued receipt's body no longer counts"
    );
    sqlx::query("ROLLBACK")
        .execute(&mut lock)
        .await
        .expect("the lock released");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while budget.available_bytes() < all || server.count_receipts("stripe").await < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the room never came back"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

crate::both_stores! {
async fn standard_webhooks_hmac_and_ed25519_and_svix_headers() {
    use ed25519_dalek::Signer;
    let signing = ed25519_dalek::SigningKey::from_bytes(&[5u8; 32]);
    let public = format!("whpk_{}", b64(signing.verifying_key().as_bytes()));
    let key = b"0123456789abcdef0123456789abcdef";
    let server = Server::start(&format!(
        "[[endpoint]]\nid = \"sw\"\nplugin = \"standard-webhooks\"\nsecrets = [\"whsec_{}\", \"{public}\"]\n",
        b64(key)
    ))
    .await;
    let t = now();
    let body = r#"{"type":"user.created","timestamp":"2024-01-01T00:00:00Z","data":{"id":"u1"}}"#;
    let signed = |id: &str| format!("{id}.{t}.{body}");
    // v1 (HMAC) with webhook-* headers → current key.
    let mac = hmac_sha256(key, &[signed("msg_1").as_bytes()]);
    let h = vec![
        ("webhook-id", "msg_1".to_string()),
        ("webhook-timestamp", t.to_string()),
        ("webhook-signature", format!("v1,{}", b64(&mac))),
    ];
    assert_eq!(server.post("sw", &h, body).await.1["status"], "accepted");
    // v1a (Ed25519) with svix-* headers → the public key, second secret.
    let sig = signing.sign(signed("msg_2").as_bytes());
    let h = vec![
        ("svix-id", "msg_2".to_string()),
        ("svix-timestamp", t.to_string()),
        (
            "svix-signature",
            format!("v1,bm90IGl0 v1a,{}", b64(&sig.to_bytes())),
        ),
    ];
    assert_eq!(server.post("sw", &h, body).await.1["status"], "accepted");
    assert_eq!(server.receipt("sw", "msg_1").await.secret_index, 0);
    assert_eq!(server.receipt("sw", "msg_2").await.secret_index, 1);
}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_demo_config_serves_a_signed_event() {
    // The README's run command uses fixtures/demo.toml; prove it works as written,
    // on port 0 and a temp store instead of 8080 and fixtures/hookhost.db.
    let text =
        std::fs::read_to_string(workspace().join("fixtures/demo.toml")).expect("demo config");
    let text = text.replace("listen = \"127.0.0.1:8080\"", "listen = \"127.0.0.1:0\"");
    // Every built-in has its demo endpoint, so the README's run command shows them all.
    let config: toml::Table = toml::from_str(&text).expect("toml");
    let plugins: Vec<&str> = config["endpoint"]
        .as_array()
        .expect("endpoints")
        .iter()
        .filter_map(|e| e["plugin"].as_str())
        .collect();
    for name in hookhost::plugins::BUILTIN_NAMES {
        assert!(
            plugins.contains(name),
            "fixtures/demo.toml has no {name} endpoint"
        );
    }
    let dir = tempfile::tempdir().expect("dir");
    let server = Server::start_in(dir, &text)
        .await
        .expect("demo config starts");
    let t = now();
    let body = stripe_event("evt_demo", "invoice.paid", "in_1", t);
    let answer = server
        .post_stripe(&["whsec_demo_stripe_secret"], t, &body)
        .await;
    assert_eq!(
        answer,
        (200, json!({"status": "accepted", "event_id": "evt_demo"}))
    );
}
