//! What an operator sees: the admin listener's `/metrics`, `/healthz` and `/readyz`.

use crate::support::*;
use std::net::SocketAddr;

pub const ADMIN_TOKEN: &str = "metrics-admin-token";

/// Serve the server's admin API on a port of its own.
pub async fn admin(server: &Server) -> SocketAddr {
    let token = hookhost::verify::Secret::new(ADMIN_TOKEN);
    serve_on_loopback(hookhost::http::admin::router(server.app.clone(), token)).await
}

/// GET `path` on the admin listener; (status, body text).
pub async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let headers: Vec<(&str, String)> = token
        .map(|t| ("authorization", format!("Bearer {t}")))
        .into_iter()
        .collect();
    let (status, _, body) = request_raw(addr, "GET", path, &headers, Default::default()).await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The value of the sample named exactly `sample` (name and labels, as exposed).
pub fn value(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' '))
        .and_then(|v| v.split(' ').next()?.parse().ok())
}

/// One request of a script: the status expected, headers, body and endpoint.
type Step<'a> = (u16, Vec<(&'a str, String)>, String, &'a str);

crate::both_stores! {
async fn metrics_count_a_scripted_mix_of_requests_exactly() {
    let server = Server::start(&stripe_config("")).await;
    let admin = admin(&server).await;
    let t = now();
    let first = stripe_event("evt_m1", "customer.updated", "cus_m", t);
    let second = stripe_event("evt_m2", "customer.updated", "cus_m2", t);
    let older = stripe_event("evt_m0", "customer.updated", "cus_m", t - 10);
    let late = stripe_event("evt_late", "customer.updated", "cus_late", t - 3600);
    let script: Vec<Step<'_>> = vec![
        (200, stripe_headers(&[STRIPE_SECRET], t, &first), first.clone(), "stripe"),
        (200, stripe_headers(&[STRIPE_SECRET], t, &first), first.clone(), "stripe"),
        (200, stripe_headers(&[STRIPE_OLD_SECRET], t, &second), second, "stripe"),
        (200, stripe_headers(&[STRIPE_SECRET], t, &older), older, "stripe"),
        (400, stripe_headers(&["whsec_wrong"], t, &first), first.clone(), "stripe"),
        (400, vec![], first.clone(), "stripe"),
        // Authentic, signed an hour ago: outside the 300 s window.
        (400, stripe_headers(&[STRIPE_SECRET], t - 3600, &late), late, "stripe"),
        (404, vec![], first, "no-such-endpoint"),
    ];
    for (status, headers, body, endpoint) in script {
        let (got, answer) = server.post(endpoint, &headers, body).await;
        assert_eq!(got, status, "{endpoint}: {answer}");
    }

    let (status, text) = get(admin, "/metrics", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{text}");
    let stripe = r#"endpoint="stripe",plugin="stripe""#;
    let expected = [
        (format!(r#"hookhost_requests_total{{{stripe},outcome="accepted",reason=""}}"#), 2.0),
        (format!(r#"hookhost_requests_total{{{stripe},outcome="duplicate",reason=""}}"#), 1.0),
        (
            format!(r#"hookhost_requests_total{{{stripe},outcome="ignored",reason="stale_version"}}"#),
            1.0,
        ),
        (
            format!(r#"hookhost_requests_total{{{stripe},outcome="error",reason="invalid_signature"}}"#),
            1.0,
        ),
        (
            format!(r#"hookhost_requests_total{{{stripe},outcome="error",reason="missing_signature"}}"#),
            1.0,
        ),
        (
            r#"hookhost_requests_total{endpoint="",plugin="",outcome="error",reason="unknown_endpoint"}"#
                .to_string(),
            1.0,
        ),
        (format!("hookhost_signature_failures_total{{{stripe}}}"), 1.0),
        // Verified: the accepted, the duplicate and the stale one with the current
        // secret, the second event with the previous one.
        (
            format!(r#"hookhost_secret_matched_total{{{stripe},generation="current"}}"#),
            3.0,
        ),
        (
            format!(r#"hookhost_secret_matched_total{{{stripe},generation="previous"}}"#),
            1.0,
        ),
        (
            format!(r#"hookhost_requests_total{{{stripe},outcome="error",reason="timestamp_outside_window"}}"#),
            1.0,
        ),
        // The four verified, and the late one (its MAC matched).
        (format!("hookhost_timestamp_skew_seconds_count{{{stripe}}}"), 5.0),
        (format!("hookhost_verification_seconds_count{{{stripe}}}"), 4.0),
        // Written: two accepted and the stale one (the duplicate wrote nothing).
        (format!("hookhost_receive_to_commit_seconds_count{{{stripe}}}"), 3.0),
    ];
    for (sample, want) in &expected {
        assert_eq!(value(&text, sample), Some(*want), "{sample} in:\n{text}");
    }
    let requests: f64 = text
        .lines()
        .filter(|l| l.starts_with("hookhost_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(requests, 8.0, "one count per request:\n{text}");
    // The late request's skew (about 3600 s) lands above the 2048 s bucket.
    assert_eq!(
        value(&text, &format!(r#"hookhost_timestamp_skew_seconds_bucket{{le="2048.0",{stripe}}}"#)),
        Some(4.0),
        "{text}"
    );
    assert!(!text.contains("evt_m"), "no event id is ever a label:\n{text}");
}
}

crate::both_stores! {
async fn probes_answer_without_the_token_and_metrics_need_it() {
    let server = Server::start(&stripe_config("")).await;
    let admin = admin(&server).await;
    assert_eq!(get(admin, "/healthz", None).await, (200, "ok\n".to_string()));
    let (status, body) = get(admin, "/readyz", None).await;
    assert_eq!((status, body.as_str()), (200, r#"{"ready":true}"#));
    assert_eq!(get(admin, "/metrics", None).await.0, 401);
    assert_eq!(get(admin, "/metrics", Some("wrong")).await.0, 401);
}
}

/// On SQLite, ready means the receipt writer commits, not only that a read answers:
/// while another connection holds the write lock past the busy timeout, every
/// receipt would fail, and the probe says so; it says ready again once the lock goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_on_sqlite_means_the_writer_commits() {
    let server = Server::start(&stripe_config("")).await;
    let admin = admin(&server).await;
    assert_eq!(get(admin, "/readyz", None).await.0, 200);
    let mut holder = open_db(&server.db_path()).await;
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut holder)
        .await
        .expect("the write lock");
    let (status, body) = get(admin, "/readyz", None).await;
    assert_eq!(
        (status, body.as_str()),
        (503, r#"{"error":"store_unavailable"}"#)
    );
    sqlx::query("ROLLBACK")
        .execute(&mut holder)
        .await
        .expect("release");
    assert_eq!(get(admin, "/readyz", None).await.0, 200);
}

/// A shutdown closes the ingest port at once, and the admin listener stays up while
/// deliveries in flight have their grace period: from the start, `/readyz` says the
/// server is not ready, so a load balancer sends no more to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_says_no_from_a_shutdown_s_start() {
    // A destination that holds its answer until released.
    let (release, released) = tokio::sync::watch::channel(false);
    let reached = std::sync::Arc::new(tokio::sync::Notify::new());
    let hold = {
        let reached = reached.clone();
        axum::routing::post(move || async move {
            reached.notify_one();
            let mut released = released.clone();
            let _ = released.wait_for(|r| *r).await;
            "ok"
        })
    };
    let destination = serve_on_loopback(axum::Router::new().route("/apply", hold)).await;
    let config = format!(
        "{}[endpoint.destination]\nurl = \"http://{destination}/apply\"\nsecret = \"whsec_{}\"\n",
        stripe_config("[delivery]\npoll_ms = 20\ngrace_seconds = 60"),
        b64(b"readyz destination key")
    );
    let mut server = Server::start(&config).await;
    let admin = admin(&server).await;
    let t = now();
    let body = stripe_event("evt_ready", "customer.updated", "cus_ready", t);
    assert_eq!(server.post_stripe(&[STRIPE_SECRET], t, &body).await.0, 200);
    tokio::time::timeout(std::time::Duration::from_secs(20), reached.notified())
        .await
        .expect("the delivery reached the destination");
    assert_eq!(get(admin, "/readyz", None).await.0, 200);

    server.begin_stop();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (status, body) = get(admin, "/readyz", None).await;
        if status == 503 {
            assert_eq!(body, r#"{"error":"shutting_down"}"#);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still ready while shutting down: {status} {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let _ = release.send(true);
    server.stop().await;
}

/// A replay the store cannot make is the store's 503, as on every other admin route
/// (a replay refused for a reason of its own is 422 `replay_failed`), and the same
/// replay answers once the store is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_the_store_cannot_make_answers_503() {
    let server = Server::start(&stripe_config("")).await;
    let admin = admin(&server).await;
    let t = now();
    let body = stripe_event("evt_r", "customer.updated", "cus_r", t);
    let (status, _) = server.post_stripe(&[STRIPE_SECRET], t, &body).await;
    assert_eq!(status, 200);
    let token = vec![
        ("authorization", format!("Bearer {ADMIN_TOKEN}")),
        ("content-type", "application/json".to_string()),
    ];
    let replays = [
        ("/admin/events/stripe/evt_r/replay", ""),
        ("/admin/replay", r#"{"endpoint": "stripe"}"#),
        ("/admin/replay", r#"{"endpoint": "stripe", "remap": true}"#),
    ];
    server.break_store().await;
    for (path, body) in replays {
        let answer = request(admin, "POST", path, &token, body.into()).await;
        let unavailable = (503, serde_json::json!({"error": "store_unavailable"}));
        assert_eq!(answer, unavailable, "{path} {body}");
    }
    server.mend_store().await;
    for (path, body) in replays {
        let (status, answer) = request(admin, "POST", path, &token, body.into()).await;
        assert_eq!(status, 200, "{path} {body}: {answer}");
        assert!(answer["replayed"].is_u64(), "{answer}");
    }
}

/// Discarding an event that is not there is 404 `unknown_event`, as showing one is;
/// one that is there but not waiting for delivery (a stale version) is 409
/// `not_discardable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discarding_tells_an_unknown_event_from_one_not_discardable() {
    let server = Server::start(&stripe_config("")).await;
    let admin = admin(&server).await;
    let t = now();
    let newer = stripe_event("evt_new", "customer.updated", "cus_d", t);
    let older = stripe_event("evt_old", "customer.updated", "cus_d", t - 10);
    for body in [newer, older] {
        let (status, answer) = server.post_stripe(&[STRIPE_SECRET], t, &body).await;
        assert_eq!(status, 200, "{answer}");
    }
    assert_eq!(server.receipt("stripe", "evt_old").await.state, "stale");
    let headers = vec![
        ("authorization", format!("Bearer {ADMIN_TOKEN}")),
        ("content-type", "application/json".to_string()),
    ];
    for (path, status, code) in [
        (
            "/admin/events/stripe/evt_typo/discard",
            404,
            "unknown_event",
        ),
        (
            "/admin/events/elsewhere/evt_old/discard",
            404,
            "unknown_event",
        ),
        (
            "/admin/events/stripe/evt_old/discard",
            409,
            "not_discardable",
        ),
    ] {
        let body = r#"{"reason": "x"}"#.to_string();
        let answer = request(admin, "POST", path, &headers, body.into()).await;
        assert_eq!(
            answer,
            (status, serde_json::json!({ "error": code })),
            "{path}"
        );
    }
}

/// What does not parse, on the admin API, is refused in JSON with a stable code and
/// axum's reason, like every other refusal there, never a line of plain text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_refusals_are_json_with_a_stable_code() {
    let server = Server::start(&stripe_config("")).await;
    let admin = admin(&server).await;
    let bearer = ("authorization", format!("Bearer {ADMIN_TOKEN}"));
    let json = ("content-type", "application/json".to_string());
    let discard = "/admin/events/stripe/evt_x/discard";
    let cases = [
        (
            "POST",
            discard,
            vec![bearer.clone(), json.clone()],
            "{not json",
            400,
            "invalid_request",
        ),
        (
            "POST",
            discard,
            vec![bearer.clone(), json.clone()],
            r#"{"why": 1}"#,
            400,
            "invalid_request",
        ),
        (
            "POST",
            discard,
            vec![bearer.clone()],
            r#"{"reason": "x"}"#,
            415,
            "invalid_request",
        ),
        (
            "GET",
            "/admin/forensics/seven",
            vec![bearer.clone()],
            "",
            400,
            "invalid_request",
        ),
        (
            "GET",
            "/admin/events?limit=many",
            vec![bearer.clone()],
            "",
            400,
            "invalid_request",
        ),
        (
            "DELETE",
            "/admin/events",
            vec![bearer.clone()],
            "",
            405,
            "method_not_allowed",
        ),
    ];
    for (method, path, headers, body, status, code) in cases {
        let (got, answer_headers, bytes) =
            request_raw(admin, method, path, &headers, body.to_string().into()).await;
        let answer: serde_json::Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}: {bytes:?}"));
        assert_eq!(
            (got, answer["error"].as_str()),
            (status, Some(code)),
            "{method} {path}: {answer}"
        );
        assert_eq!(
            answer_headers.get("content-type").map(|v| v.as_bytes()),
            Some(&b"application/json"[..])
        );
        if status != 405 {
            assert!(
                answer["reason"].as_str().is_some_and(|r| !r.is_empty()),
                "{answer}"
            );
        }
    }
}

crate::both_stores! {
async fn a_shadow_replay_reads_every_request_asked_for_newest_first() {
    // Read a page at a time: forty requests, in arrivals shared by several each, are
    // each judged once, newest first and by event id within an arrival.
    let server = Server::start(&stripe_config("")).await;
    let base = now() * 1000;
    let mut expected = Vec::new();
    for n in 0..40 {
        let (id, at) = (format!("evt_{n:02}"), base + (n / 7));
        server.app.store.record(new_receipt(&id, "cus_shadow", None, at)).await.expect("record");
        expected.push((at, id));
    }
    expected.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let endpoint = server.app.endpoints.get("stripe").expect("served");
    for last in [35, 100] {
        let report = hookhost::shadow::replay(&server.app, endpoint.clone(), endpoint.clone(), last, None)
            .await
            .expect("shadow");
        let read: Vec<(i64, String)> = report
            .results
            .iter()
            .map(|r| (r.received_at_ms, r.event_id.clone()))
            .collect();
        let wanted = expected.len().min(last as usize);
        assert_eq!(read, expected[..wanted], "last {last}");
        assert!(report.complete);
    }
}
}
