//! Reconciliation against a fake provider API on loopback: pages, a 429, a run killed
//! mid-way; what is repaired, delivered and recorded; where the credential goes.

use crate::support::*;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use hookhost::reconcile::{Options, run};
use hookhost::store::{RepairRow, RunRow};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CREDENTIAL: &str = "sk_test_reconcile_credential_5e1f";
const EVENTS: usize = 50;
const PAGE: usize = 10;

/// What the fake provider API served and saw.
#[derive(Default)]
struct Seen {
    /// `starting_after` of each request (`None`: the first page).
    pages: Vec<Option<String>>,
    /// The `Authorization` header of each request.
    authorizations: Vec<String>,
    rate_limited: usize,
}

/// Stripe's `GET /v1/events`, newest first, `PAGE` per page; the second page is
/// answered 429 (Retry-After: 1) once; the page after `hang_after` never answers.
#[derive(Clone)]
struct FakeStripe {
    events: Arc<Mutex<Vec<(String, String)>>>,
    seen: Arc<Mutex<Seen>>,
    hang_after: Arc<Mutex<Option<String>>>,
    reached_hang: Arc<tokio::sync::Notify>,
}

impl FakeStripe {
    /// `EVENTS` events created in the last hour (oldest first: evt_00 … evt_49).
    fn new() -> FakeStripe {
        let start = now() - 3600;
        let events = (0..EVENTS)
            .map(|i| {
                let id = format!("evt_{i:02}");
                let body = stripe_event(
                    &id,
                    "customer.updated",
                    &format!("cus_{i:02}"),
                    start + i as i64,
                );
                (id, body)
            })
            .collect();
        FakeStripe {
            events: Arc::new(Mutex::new(events)),
            seen: Arc::default(),
            hang_after: Arc::default(),
            reached_hang: Arc::default(),
        }
    }

    async fn serve(&self) -> u16 {
        let app = axum::Router::new()
            .route("/v1/events", axum::routing::get(list))
            .with_state(self.clone());
        serve_on_loopback(app).await.port()
    }

    fn seen<T>(&self, read: impl FnOnce(&Seen) -> T) -> T {
        read(&self.seen.lock().expect("lock"))
    }

    /// The events, oldest first.
    fn events(&self) -> Vec<(String, String)> {
        self.events.lock().expect("lock").clone()
    }
}

async fn list(
    State(fake): State<FakeStripe>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> axum::response::Response {
    let after = query.get("starting_after").cloned();
    let since: i64 = query
        .get("created[gte]")
        .and_then(|s| s.parse().ok())
        .expect("created[gte]");
    {
        let mut seen = fake.seen.lock().expect("lock");
        seen.pages.push(after.clone());
        seen.authorizations.push(
            headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string(),
        );
        if seen.pages.len() == 2 && seen.rate_limited == 0 {
            seen.rate_limited += 1;
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "1")],
                "slow down",
            )
                .into_response();
        }
    }
    if after.is_some() && *fake.hang_after.lock().expect("lock") == after {
        fake.reached_hang.notify_one();
        std::future::pending::<()>().await;
    }
    let events = fake.events();
    let newest_first: Vec<&(String, String)> = events
        .iter()
        .rev()
        .filter(|(_, body)| {
            let created = serde_json::from_str::<Value>(body).expect("event")["created"]
                .as_i64()
                .expect("created");
            created >= since
        })
        .collect();
    let skip = match &after {
        None => 0,
        Some(id) => {
            newest_first
                .iter()
                .position(|(e, _)| e == id)
                .expect("known cursor")
                + 1
        }
    };
    let page: Vec<&str> = newest_first
        .iter()
        .skip(skip)
        .take(PAGE)
        .map(|(_, b)| b.as_str())
        .collect();
    let has_more = skip + page.len() < newest_first.len();
    let body = format!(
        r#"{{"object":"list","url":"/v1/events","has_more":{has_more},"data":[{}]}}"#,
        page.join(",")
    );
    ([("content-type", "application/json")], body).into_response()
}

/// Deliveries by `webhook-id`.
#[derive(Clone, Default)]
struct Downstream {
    seen: Arc<Mutex<HashMap<String, usize>>>,
}

impl Downstream {
    async fn serve(&self) -> u16 {
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(deliver))
            .with_state(self.clone());
        serve_on_loopback(app).await.port()
    }

    fn counts(&self) -> HashMap<String, usize> {
        self.seen.lock().expect("lock").clone()
    }
}

async fn deliver(State(d): State<Downstream>, headers: HeaderMap) -> StatusCode {
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    *d.seen.lock().expect("lock").entry(id).or_default() += 1;
    StatusCode::OK
}

/// The Stripe endpoint, delivering to `downstream`, reconciling against the fake API.
fn config(api: u16, downstream: u16) -> String {
    let key = b64(b"reconcile test destination key!!");
    stripe_config("[delivery]\npoll_ms = 20\n")
        + &format!(
            "[endpoint.destination]\nurl = \"http://127.0.0.1:{downstream}/hook\"\nsecret = \"whsec_{key}\"\n\
             [endpoint.reconcile]\napi_base = \"http://127.0.0.1:{api}\"\ncredential = \"{CREDENTIAL}\"\n\
             requests_per_second = 100\n"
        )
}

const MISSING: [&str; 3] = ["evt_07", "evt_23", "evt_41"];

/// Push every event but the missing ones, signed, as the provider would.
async fn push_all_but_missing(server: &Server, fake: &FakeStripe) {
    for (id, body) in fake.events() {
        if MISSING.contains(&id.as_str()) {
            continue;
        }
        let (status, answer) = server.post_stripe(&[STRIPE_SECRET], now(), &body).await;
        assert_eq!(status, 200, "{id}: {answer}");
    }
}

/// The fake Stripe API, the downstream, and a server (the Stripe endpoint with
/// `extra` appended to its configuration) that has received every event but the
/// missing ones.
async fn pushed_all_but_missing(extra: &str) -> (FakeStripe, Downstream, Server) {
    let fake = FakeStripe::new();
    let downstream = Downstream::default();
    let config = config(fake.serve().await, downstream.serve().await) + extra;
    let server = Server::start(&config).await;
    push_all_but_missing(&server, &fake).await;
    (fake, downstream, server)
}

crate::both_stores! {
async fn a_run_repairs_exactly_the_events_that_never_arrived_and_a_second_run_repairs_nothing() {
    let (fake, downstream, server) = pushed_all_but_missing("").await;
    let since = now() - 7200;

    // A dry run finds the three and changes nothing.
    let dry = run(&server.app, "stripe", Options { since, dry_run: true }).await.expect("dry run");
    assert_eq!(
        (dry.state.as_str(), dry.seen, dry.present, dry.repaired),
        ("done", 50, 47, 3),
        "{dry:?}"
    );
    for id in MISSING {
        assert!(server.app.store.receipt("stripe", id).await.expect("read").is_none());
    }

    // The run: five pages (one answered 429 first), the three repaired.
    let repaired = reconciled(&server, "stripe", since).await;
    assert_eq!(
        (repaired.state.as_str(), repaired.pages, repaired.seen, repaired.present, repaired.repaired),
        ("done", 5, 50, 47, 3),
        "{repaired:?}"
    );
    let repairs = repairs_of(&server, &repaired).await;
    let mut ids: Vec<&str> = repairs.iter().map(|r| r.event_id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, MISSING);
    assert!(repairs.iter().all(|r| r.result == "repaired"), "{repairs:?}");
    for id in MISSING {
        let receipt = server.receipt("stripe", id).await;
        assert_eq!((receipt.source.as_str(), receipt.event_type.as_str()), ("reconcile", "customer.updated"));
    }
    assert_eq!(server.receipt("stripe", "evt_00").await.source, "push");
    assert_eq!(fake.seen(|s| s.rate_limited), 1);
    assert!(
        fake.seen(|s| s.authorizations.iter().all(|a| *a == format!("Bearer {CREDENTIAL}"))),
        "every request carries the credential"
    );

    // Every event reaches the downstream exactly once, the repaired ones included.
    let deadline = Instant::now() + Duration::from_secs(20);
    while downstream.counts().len() < EVENTS {
        assert!(Instant::now() < deadline, "delivered: {:?}", downstream.counts().len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counts = downstream.counts();
    assert!(counts.values().all(|n| *n == 1), "{counts:?}");
    for id in MISSING {
        assert_eq!(counts.get(id), Some(&1), "{id}");
    }
    // The provider's own push of a repaired event, late and laid out otherwise than
    // its list, is the event already stored: a duplicate, not a conflict. One under
    // its id that describes another event is a conflict still.
    let listed = fake.events().into_iter().find(|(id, _)| id == "evt_07").expect("listed").1;
    let (status, answer) = server.post_stripe(&[STRIPE_SECRET], now(), &format!("{listed}\n")).await;
    assert_eq!((status, answer["status"].as_str()), (200, Some("duplicate")), "{answer}");
    let other = stripe_event("evt_07", "invoice.paid", "in_other", now());
    let (status, answer) = server.post_stripe(&[STRIPE_SECRET], now(), &other).await;
    assert_eq!((status, answer["ignored"].as_str()), (200, Some("conflicting_duplicate")), "{answer}");

    // A second run finds nothing missing.
    let again = reconciled(&server, "stripe", since).await;
    assert_eq!(
        (again.state.as_str(), again.seen, again.present, again.repaired),
        ("done", 50, 50, 0),
        "{again:?}"
    );
    let listed = server.app.store.runs(Some("stripe"), 10).await.expect("runs");
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[0].id, again.id);
}
}

// `hookhost reconcile`, waiting for the third page, holds the endpoint: the server's
// runs are refused, and neither resume its run nor supersede it. Killed, it leaves
// its run with the cursor after the second page; the next run resumes there at once
// and repairs the rest, and a run after it repairs what was created after the first
// began.
crate::both_stores! {
async fn a_run_killed_mid_way_resumes_from_its_cursor() {
    let (fake, _downstream, server) = pushed_all_but_missing("").await;
    // Newest first, 10 per page: the third page starts after evt_30, and holds evt_23.
    *fake.hang_after.lock().expect("lock") = Some("evt_30".into());
    // Killed when dropped, should the run not reach the page.
    let mut first_run = crate::support::Spawned::spawn(
        std::process::Command::new(env!("CARGO_BIN_EXE_hookhost"))
            .args([
                "reconcile",
                "--config",
                &server.config_path(),
                "--endpoint",
                "stripe",
                "--since",
                "2h",
            ])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null()),
    );
    tokio::time::timeout(Duration::from_secs(60), fake.reached_hang.notified())
        .await
        .expect("the run reached the third page");
    // One run would resume the cut run (and wait on its page), one supersede it.
    for since in [now() - 600, now() - 86_400] {
        let options = Options { since, dry_run: false };
        let refused = tokio::time::timeout(Duration::from_secs(10), run(&server.app, "stripe", options))
            .await
            .expect("refused at once");
        assert!(
            matches!(refused, Err(hookhost::reconcile::ReconcileError::AlreadyRunning(_))),
            "{refused:?}"
        );
    }
    let admin = crate::operations::admin(&server).await;
    let token = [("authorization", format!("Bearer {}", crate::operations::ADMIN_TOKEN))];
    let (status, answer) = request(admin, "POST", "/admin/reconcile/stripe", &token, "{}".into()).await;
    assert_eq!((status, &answer["error"]), (409, &serde_json::json!("already_running")), "{answer}");
    let second = std::process::Command::new(env!("CARGO_BIN_EXE_hookhost"))
        .args(["reconcile", "--config", &server.config_path(), "--endpoint", "stripe"])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run hookhost");
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(
        !second.status.success() && said.contains("\"stripe\" is being reconciled already"),
        "{said}"
    );
    first_run.kill();

    let cut = server
        .app
        .store
        .unfinished_run("stripe", false)
        .await
        .expect("read")
        .expect("an unfinished run");
    assert_eq!(
        (
            cut.state.as_str(),
            cut.pages,
            cut.cursor.as_deref(),
            cut.repaired
        ),
        ("running", 2, Some("evt_30"), 1),
        "{cut:?}"
    );
    *fake.hang_after.lock().expect("lock") = None;
    let requests_before = fake.seen(|s| s.pages.len());
    // Created after the cut run listed its first page, and never pushed.
    let late = stripe_event("evt_late", "customer.updated", "cus_late", now());
    fake.events
        .lock()
        .expect("lock")
        .push(("evt_late".into(), late));

    // The lock went with the process (on PostgreSQL, once the server has seen its
    // connection closed).
    let deadline = Instant::now() + Duration::from_secs(10);
    let options = Options { since: now() - 600, dry_run: false };
    let after = loop {
        match run(&server.app, "stripe", options).await {
            Err(hookhost::reconcile::ReconcileError::AlreadyRunning(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            ran => break ran.expect("run"),
        }
    };
    assert_ne!(after.id, cut.id, "a run of its own after the resumed one");
    assert_eq!(
        (
            after.state.as_str(),
            after.since,
            after.seen,
            after.repaired
        ),
        ("done", cut.started_at_ms / 1000 - 300, 1, 1),
        "{after:?}"
    );
    assert_eq!(
        server.receipt("stripe", "evt_late").await.source,
        "reconcile"
    );
    let (resumed, _) = stored_run(&server, &cut.id).await;
    assert_eq!(
        (
            resumed.state.as_str(),
            resumed.pages,
            resumed.seen,
            resumed.repaired
        ),
        ("done", 5, 50, 3),
        "{resumed:?}"
    );
    // The resumed run asked for the third page first, never the first again; the run
    // after it, for its own first page.
    let after_kill: Vec<Option<String>> = fake.seen(|s| s.pages[requests_before..].to_vec());
    let cursors = [Some("evt_30"), Some("evt_20"), Some("evt_10"), None];
    assert_eq!(after_kill, cursors.map(|c| c.map(String::from)));
    for id in MISSING {
        assert_eq!(server.receipt("stripe", id).await.source, "reconcile");
    }
}
}

/// What the provider's API answers: `listed`, and the authorization it received echoed
/// in a header.
async fn echo(headers: HeaderMap) -> impl IntoResponse {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    ([("x-echo-authorization", authorization)], "listed")
}

/// Refuses the request, echoing the credential in its body, as some APIs do.
async fn refuse(headers: HeaderMap) -> impl IntoResponse {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let basic = authorization.trim_start_matches("Basic ").to_string();
    let body = format!(
        r#"{{"error":"invalid key","sent":"{authorization}","encoded":"{basic}","key":"{CREDENTIAL}"}}"#
    );
    (StatusCode::UNAUTHORIZED, body)
}

/// Counts requests that reach it.
async fn thief(State(hits): State<Arc<Mutex<usize>>>) -> &'static str {
    *hits.lock().expect("lock") += 1;
    "stolen"
}

/// The test guest lists one event whose body is everything it was given: the
/// credential is not in it (nor in the log, at the most verbose level), though the API
/// echoed it back. A plan aimed at a host the plugin does not declare fails the run,
/// and nothing reaches that host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_credential_reaches_only_the_api_never_the_plugin_or_the_log() {
    let api = serve_on_loopback(
        axum::Router::new()
            .route("/events", axum::routing::get(echo))
            .route("/refuse", axum::routing::get(refuse)),
    )
    .await;
    let hits = Arc::new(Mutex::new(0usize));
    let stealing =
        serve_on_loopback(axum::Router::new().fallback(thief).with_state(hits.clone())).await;
    let dir = with_test_guest();
    let reconcile = |extra: &str| {
        format!(
            "[endpoint.reconcile]\napi_base = \"http://{api}\"\ncredential = \"{CREDENTIAL}\"\nauth = \"basic\"\n{extra}"
        )
    };
    let config = format!(
        "plugins_dir = \"plugins\"\n\
         [[endpoint]]\nid = \"echo\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\n{}\
         [[endpoint]]\nid = \"astray\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\n\
         config = {{ reconcile_target = \"http://{stealing}/steal\" }}\n{}\
         [[endpoint]]\nid = \"stuck\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\n\
         config = {{ reconcile_cursor = \"the-same\" }}\n{}\
         [[endpoint]]\nid = \"nameless\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\n\
         config = {{ reconcile_nameless = true }}\n{}\
         [[endpoint]]\nid = \"refused\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\n\
         config = {{ reconcile_target = \"/refuse\" }}\n{}",
        reconcile(""),
        reconcile(""),
        reconcile(""),
        reconcile(""),
        reconcile(""),
    );
    let server = Server::start_in(dir, &config).await.expect("server starts");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookhost"))
        .args([
            "--log-json",
            "reconcile",
            "--config",
            &server.config_path(),
            "--endpoint",
            "echo",
            "--since",
            "1h",
        ])
        .env(
            "RUST_LOG",
            "trace,hyper=info,h2=info,sqlx=info,wasmtime=info,cranelift=info",
        )
        .output()
        .expect("run hookhost reconcile");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let printed: Value = serde_json::from_str(&stdout).expect("the run as JSON");
    assert_eq!(
        (&printed["state"], &printed["repaired"]),
        (&serde_json::json!("done"), &serde_json::json!(1))
    );
    let basic = b64(format!("{CREDENTIAL}:").as_bytes());
    for text in [&stdout, &stderr] {
        assert!(
            !text.contains(CREDENTIAL) && !text.contains(&basic),
            "the credential in the output:\n{text}"
        );
    }
    assert!(
        stderr.contains("reconciled a missing event"),
        "the log is there:\n{stderr}"
    );

    let receipt = server.receipt("echo", "evt_echo").await;
    assert_eq!(receipt.source, "reconcile");
    let seen_by_plugin: Value = serde_json::from_slice(&receipt.body).expect("the guest's echo");
    assert_eq!(seen_by_plugin["body"], "listed", "{seen_by_plugin}");
    assert_eq!(seen_by_plugin["status"], 200);
    let text = seen_by_plugin.to_string();
    assert!(
        !text.contains(CREDENTIAL) && !text.contains(&basic),
        "{text}"
    );
    assert!(!text.contains("x-echo-authorization"), "{text}");

    let astray = failed_run(&server, "astray", "does not declare").await;
    assert_eq!(astray.pages, 0, "{astray:?}");
    assert_eq!(
        *hits.lock().expect("lock"),
        0,
        "nothing reached the undeclared host"
    );

    // An API that refuses the request and echoes the credential in its answer: the
    // run's error (stored, logged, answered) quotes the answer without it.
    let refused = failed_run(&server, "refused", "the provider's API answered 401").await;
    let error = refused.last_error.unwrap_or_default();
    assert!(
        !error.contains(CREDENTIAL) && !error.contains(&basic) && error.contains("[redacted]"),
        "{error}"
    );

    // A listing whose cursor does not move fails instead of asking forever.
    let stuck = failed_run(&server, "stuck", "did not move").await;
    assert_eq!(stuck.pages, 1, "{stuck:?}");

    // An event listed without an id can be neither looked up nor stored so that it
    // is found again: each run leaves it to the operator.
    for _ in 0..2 {
        let ran = reconciled(&server, "nameless", now() - 3600).await;
        assert_eq!(
            (ran.state.as_str(), ran.seen, ran.present, ran.repaired),
            ("done", 1, 0, 0),
            "{ran:?}"
        );
        let repairs = repairs_of(&server, &ran).await;
        let results: Vec<&str> = repairs.iter().map(|r| r.result.as_str()).collect();
        assert_eq!(results, ["malformed_event"]);
    }
    assert_eq!(server.count_receipts("nameless").await, 0);
}

/// A listed event whose body is larger than a push may carry is left for the
/// operator, as a push of it would have been refused: not stored, in a dry run not
/// counted as one to repair. One within the limit is repaired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_body_past_max_body_bytes_is_left_for_the_operator() {
    let api = serve_on_loopback(
        axum::Router::new()
            .route("/events", axum::routing::get(echo))
            .route("/big", axum::routing::get(|| async { "x".repeat(8192) })),
    )
    .await;
    let reconcile = format!(
        "[endpoint.reconcile]\napi_base = \"http://{api}\"\ncredential = \"{CREDENTIAL}\"\n"
    );
    let config = format!(
        "plugins_dir = \"plugins\"\n[limits]\nmax_body_bytes = 4096\n\
         [[endpoint]]\nid = \"big\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\n\
         config = {{ reconcile_target = \"/big\" }}\n{reconcile}\
         [[endpoint]]\nid = \"small\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\n{reconcile}"
    );
    let server = Server::start_in(with_test_guest(), &config)
        .await
        .expect("server starts");
    for dry_run in [true, false] {
        let options = Options {
            since: now() - 3600,
            dry_run,
        };
        let ran = run(&server.app, "big", options).await.expect("run");
        assert_eq!(
            (ran.state.as_str(), ran.seen, ran.present, ran.repaired),
            ("done", 1, 0, 0),
            "{ran:?}"
        );
        let repairs = repairs_of(&server, &ran).await;
        let results: Vec<&str> = repairs.iter().map(|r| r.result.as_str()).collect();
        assert_eq!(results, ["body_too_large"], "dry run: {dry_run}");
    }
    assert_eq!(server.count_receipts("big").await, 0);

    let ran = reconciled(&server, "small", now() - 3600).await;
    assert_eq!((ran.state.as_str(), ran.repaired), ("done", 1), "{ran:?}");
    assert_eq!(server.count_receipts("small").await, 1);
}

/// Reconcile `endpoint` now, looking back to `since` (not a dry run).
async fn reconciled(server: &Server, endpoint: &str, since: i64) -> RunRow {
    let options = Options {
        since,
        dry_run: false,
    };
    run(&server.app, endpoint, options).await.expect("run")
}

/// The run `id` as the store holds it, and what it repaired.
async fn stored_run(server: &Server, id: &str) -> (RunRow, Vec<RepairRow>) {
    let stored = server.app.store.run(id).await.expect("read");
    stored.unwrap_or_else(|| panic!("no run {id} is stored"))
}

/// The repairs `ran` recorded.
async fn repairs_of(server: &Server, ran: &RunRow) -> Vec<RepairRow> {
    stored_run(server, &ran.id).await.1
}

/// Reconcile `endpoint` over the last hour: the run fails, its error saying `because`.
async fn failed_run(server: &Server, endpoint: &str, because: &str) -> RunRow {
    let since = now() - 3600;
    let ran = run(
        &server.app,
        endpoint,
        Options {
            since,
            dry_run: false,
        },
    )
    .await
    .expect("the run is recorded");
    assert_eq!(ran.state, "failed", "{ran:?}");
    let error = ran.last_error.as_deref().unwrap_or_default();
    assert!(error.contains(because), "{ran:?}");
    ran
}

/// A listed event whose id no store keeps as it is (a NUL) is left for the operator,
/// recorded under its digest, on PostgreSQL too, where looking the id up would fail
/// the page: the run goes on, and so does the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_id_no_store_keeps_is_left_for_the_operator_on_postgres() {
    let api =
        serve_on_loopback(axum::Router::new().route("/events", axum::routing::get(echo))).await;
    let db = PgDatabase::create();
    let config = format!(
        "store = \"{}\"\nplugins_dir = \"plugins\"\n\
         [[endpoint]]\nid = \"nul\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\n\
         config = {{ reconcile_id = \"evt\\u0000nul\" }}\n\
         [endpoint.reconcile]\napi_base = \"http://{api}\"\ncredential = \"{CREDENTIAL}\"\n",
        db.url()
    );
    let server = Server::start_in(with_test_guest(), &config)
        .await
        .expect("server starts");
    let digest: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(b"evt\0nul").into();
    let kept = format!("sha256:{}", hex::encode(digest));
    for _ in 0..2 {
        let ran = reconciled(&server, "nul", now() - 3600).await;
        assert_eq!(
            (ran.state.as_str(), ran.seen, ran.present, ran.repaired),
            ("done", 1, 0, 0),
            "{ran:?}"
        );
        let repairs = repairs_of(&server, &ran).await;
        let named: Vec<(&str, &str)> = repairs
            .iter()
            .map(|r| (r.event_id.as_str(), r.result.as_str()))
            .collect();
        assert_eq!(named, [(kept.as_str(), "malformed_event")]);
    }
}

/// A run whose error quotes a NUL (the provider's API answered one), or whose plugin's
/// cursor holds one, is recorded as failed on PostgreSQL too, whose text refuses NUL:
/// not left `running` with its error lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_ended_by_a_nul_is_recorded_on_postgres() {
    let api = serve_on_loopback(
        axum::Router::new()
            .route("/events", axum::routing::get(echo))
            .route(
                "/refuse",
                axum::routing::get(|| async { (StatusCode::BAD_REQUEST, "bad\0request") }),
            ),
    )
    .await;
    let db = PgDatabase::create();
    let endpoint = |id: &str, config: &str| {
        format!(
            "[[endpoint]]\nid = \"{id}\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\nconfig = {{ {config} }}\n\
             [endpoint.reconcile]\napi_base = \"http://{api}\"\ncredential = \"{CREDENTIAL}\"\n"
        )
    };
    let config = format!(
        "store = \"{}\"\nplugins_dir = \"plugins\"\n{}{}",
        db.url(),
        endpoint("cursor", "reconcile_cursor = \"page\\u0000two\""),
        endpoint("answer", "reconcile_target = \"/refuse\""),
    );
    let server = Server::start_in(with_test_guest(), &config)
        .await
        .expect("server starts");
    for (endpoint, because) in [
        (
            "cursor",
            "the plugin's cursor holds a NUL: it cannot be saved",
        ),
        (
            "answer",
            "the provider's API answered 400: bad\u{FFFD}request",
        ),
    ] {
        let ran = failed_run(&server, endpoint, "").await;
        let (stored, _) = stored_run(&server, &ran.id).await;
        assert_eq!(
            (stored.state.as_str(), stored.last_error.as_deref()),
            ("failed", Some(because))
        );
    }
}

/// The admin API runs reconciliation, lists runs and shows one with its repairs; bad
/// requests get their stable codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_runs_lists_and_shows_reconciliation() {
    use crate::operations::{ADMIN_TOKEN, admin};
    // `runs` is an endpoint id like any other, though a path beside it lists the runs.
    let plain = ["plain", "runs"].map(|id| {
        format!("[[endpoint]]\nid = \"{id}\"\nplugin = \"stripe\"\nsecrets = [\"whsec_plain\"]\n")
    });
    let (_fake, _downstream, server) = pushed_all_but_missing(&plain.concat()).await;
    let addr = admin(&server).await;
    let call = |method: &'static str, path: String, body: &'static str| async move {
        let headers = [("authorization", format!("Bearer {ADMIN_TOKEN}"))];
        request(addr, method, &path, &headers, body.into()).await
    };
    let (status, ran) = call(
        "POST",
        "/admin/reconcile/stripe".into(),
        r#"{"since": "2h"}"#,
    )
    .await;
    assert_eq!(
        (status, &ran["state"], &ran["repaired"]),
        (200, &serde_json::json!("done"), &serde_json::json!(3)),
        "{ran}"
    );
    let id = ran["id"].as_str().expect("run id").to_string();
    let (status, listed) = call("GET", "/admin/reconcile/runs?endpoint=stripe".into(), "").await;
    assert_eq!(
        (status, listed.as_array().map(Vec::len)),
        (200, Some(1)),
        "{listed}"
    );
    let (status, shown) = call("GET", format!("/admin/reconcile/runs/{id}"), "").await;
    assert_eq!(
        (status, shown["repairs"].as_array().map(Vec::len)),
        (200, Some(3)),
        "{shown}"
    );

    for (path, body, want, code) in [
        (
            "/admin/reconcile/stripe",
            r#"{"since": "yesterday"}"#,
            400,
            "invalid_request",
        ),
        (
            "/admin/reconcile/stripe",
            r#"{"dry": true}"#,
            400,
            "invalid_request",
        ),
        ("/admin/reconcile/nowhere", "", 404, "unknown_endpoint"),
        ("/admin/reconcile/plain", "", 409, "not_configured"),
        ("/admin/reconcile/runs", "", 409, "not_configured"),
    ] {
        let (status, answer) = call("POST", path.into(), body).await;
        assert_eq!(
            (status, &answer["error"]),
            (want, &serde_json::json!(code)),
            "{path} {body}: {answer}"
        );
    }
    let (status, answer) = call("GET", "/admin/reconcile/runs/rec_unknown".into(), "").await;
    assert_eq!(
        (status, &answer["error"]),
        (404, &serde_json::json!("unknown_run"))
    );
    // A limit is a count: a negative one is refused, as on every other listing, and
    // none lists none.
    let (status, answer) = call("GET", "/admin/reconcile/runs?limit=-5".into(), "").await;
    assert_eq!(
        (status, &answer["error"]),
        (400, &serde_json::json!("invalid_request")),
        "{answer}"
    );
    let (status, listed) = call("GET", "/admin/reconcile/runs?limit=0".into(), "").await;
    assert_eq!((status, listed), (200, serde_json::json!([])));

    let (_, metrics) = crate::operations::get(addr, "/metrics", Some(ADMIN_TOKEN)).await;
    for (sample, want) in [
        (
            r#"hookhost_reconcile_runs_total{endpoint="stripe",state="done"}"#,
            1.0,
        ),
        (
            r#"hookhost_reconciled_events_total{endpoint="stripe",result="present"}"#,
            47.0,
        ),
        (
            r#"hookhost_reconciled_events_total{endpoint="stripe",result="repaired"}"#,
            3.0,
        ),
    ] {
        assert_eq!(
            crate::operations::value(&metrics, sample),
            Some(want),
            "{sample} in:\n{metrics}"
        );
    }
}

/// `every_seconds`: the server reconciles on its own, looking back `lookback_seconds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_endpoint_reconciles_on_its_own() {
    let (_fake, _downstream, server) =
        pushed_all_but_missing("every_seconds = 1\nlookback_seconds = 7200\n").await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let runs = server
            .app
            .store
            .runs(Some("stripe"), 10)
            .await
            .expect("runs");
        if let Some(done) = runs.iter().rev().find(|r| r.state == "done") {
            assert_eq!((done.seen, done.repaired), (50, 3), "{done:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no scheduled run finished: {runs:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for id in MISSING {
        assert_eq!(server.receipt("stripe", id).await.source, "reconcile");
    }
}

/// A scheduled turn comes a period and more after the last (the offset, the run's own
/// time): a run looks back to where the last began, one period further than
/// `lookback_seconds` at most, not `lookback_seconds` alone, which left the time
/// between the two unlisted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_run_looks_back_past_where_the_last_began() {
    let (_fake, _downstream, server) =
        pushed_all_but_missing("every_seconds = 2\nlookback_seconds = 2\n").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let runs = loop {
        let runs = server
            .app
            .store
            .runs(Some("stripe"), 10)
            .await
            .expect("runs");
        if runs.iter().filter(|r| r.state == "done").count() >= 2 {
            break runs;
        }
        assert!(
            Instant::now() < deadline,
            "two scheduled runs did not finish: {runs:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Oldest first. Each run's `since` was set a moment before the run began: within
    // a second of its start.
    let mut done: Vec<&RunRow> = runs.iter().filter(|r| r.state == "done").collect();
    done.reverse();
    let looked_back = |run: &RunRow| run.started_at_ms / 1000 - run.since;
    assert!(
        (2..=3).contains(&looked_back(done[0])),
        "the first: {:?}",
        done[0]
    );
    assert!(
        (4..=5).contains(&looked_back(done[1])),
        "the next: {:?}",
        done[1]
    );
    assert!(
        done[1].started_at_ms - done[0].started_at_ms > 2_000,
        "{done:?}"
    );
}

/// What a downstream received: (body, `hookhost-resource-version`) per delivery.
type Received = Arc<Mutex<Vec<(String, Option<String>)>>>;

async fn receive(State(received): State<Received>, headers: HeaderMap, body: String) -> StatusCode {
    let version = headers
        .get("hookhost-resource-version")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    received.lock().expect("lock").push((body, version));
    StatusCode::OK
}

/// The provider's objects: `GET /objects/{id}`, at version 7; the authorizations seen.
async fn object(
    State(seen): State<Arc<Mutex<Vec<String>>>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
) -> impl IntoResponse {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    seen.lock().expect("lock").push(authorization.to_string());
    axum::Json(serde_json::json!({"id": id, "state": "current", "version": 7}))
}

/// A server whose endpoint `thin` (the test guest, every event thin) fetches objects
/// from `api`, with `extra` keys in the endpoint's table, and delivers to a downstream
/// of its own: what the downstream received, and the server.
async fn thin_endpoint(api: std::net::SocketAddr, extra: &str) -> (Received, Server) {
    let received: Received = Arc::default();
    let downstream = serve_on_loopback(
        axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(received.clone()),
    )
    .await;
    let key = b64(b"thin event test destination key!");
    let config = format!(
        "plugins_dir = \"plugins\"\n[delivery]\npoll_ms = 20\n\
         [[endpoint]]\nid = \"thin\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\nconfig = {{ thin = true }}\n\
         {extra}\
         [endpoint.destination]\nurl = \"http://{downstream}/hook\"\nsecret = \"whsec_{key}\"\n\
         [endpoint.reconcile]\napi_base = \"http://{api}\"\ncredential = \"{CREDENTIAL}\"\n"
    );
    let server = Server::start_in(with_test_guest(), &config)
        .await
        .expect("server starts");
    (received, server)
}

/// What `received` holds once it holds a delivery.
async fn first_delivered(received: &Received) -> Vec<(String, Option<String>)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while received.lock().expect("lock").is_empty() {
        assert!(Instant::now() < deadline, "not delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    received.lock().expect("lock").clone()
}

/// A provider API answering `GET /objects/{id}` with `object`, given `state`.
async fn objects_api<H, T, S>(object: H, state: S) -> std::net::SocketAddr
where
    H: axum::handler::Handler<T, S>,
    T: 'static,
    S: Clone + Send + Sync + 'static,
{
    let router = axum::Router::new().route("/objects/{id}", axum::routing::get(object));
    serve_on_loopback(router.with_state(state)).await
}

/// Send endpoint `thin` the event "obj_1 changed", with `extra` headers: accepted.
/// The body sent.
async fn post_thin(server: &Server, extra: &[(&'static str, String)]) -> Vec<u8> {
    let body = br#"{"changed":"obj_1"}"#.to_vec();
    let mut headers = guest_headers("s", "obj_1", &body);
    headers.extend_from_slice(extra);
    let answer = server.post("thin", &headers, body.clone()).await;
    assert_eq!(answer.0, 200, "{answer:?}");
    body
}

/// A thin event is delivered as its object's current state, fetched with the
/// endpoint's credential and versioned by the object; the receipt keeps what arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thin_event_is_delivered_as_its_fetched_current_object() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let api = objects_api(object, seen.clone()).await;
    let (received, server) = thin_endpoint(api, "").await;
    let body = post_thin(&server, &[]).await;

    let (delivered, version) = first_delivered(&received).await[0].clone();
    let object: Value = serde_json::from_str(&delivered).expect("the object");
    assert_eq!(
        object,
        serde_json::json!({"id": "obj_1", "state": "current", "version": 7})
    );
    assert_eq!(version.as_deref(), Some("7"));
    assert_eq!(
        *seen.lock().expect("lock"),
        vec![format!("Bearer {CREDENTIAL}")]
    );
    assert_eq!(
        server.receipt("thin", "obj_1").await.body,
        body,
        "the receipt keeps what arrived"
    );
}

/// A thin event of version 9 whose object is first fetched at version 7 (a lagging
/// read): that attempt fails and is tried again, and the object is delivered once it
/// is read at the event's version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thin_events_object_older_than_the_event_is_not_delivered() {
    async fn lagging(State(fetches): State<Arc<Mutex<u32>>>) -> impl IntoResponse {
        let mut fetches = fetches.lock().expect("lock");
        *fetches += 1;
        let version = if *fetches == 1 { 7 } else { 9 };
        axum::Json(serde_json::json!({"id": "obj_1", "version": version}))
    }
    let fetches: Arc<Mutex<u32>> = Arc::default();
    let api = objects_api(lagging, fetches.clone()).await;
    let (received, server) = thin_endpoint(api, "retry_schedule_seconds = [0, 1, 1]\n").await;
    post_thin(&server, &[("x-test-version", "9".into())]).await;

    let delivered = first_delivered(&received).await;
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert_eq!(delivered[0].1.as_deref(), Some("9"));
    assert_eq!(*fetches.lock().expect("lock"), 2);
    // Recorded once the downstream's answer is back.
    let within = Duration::from_secs(10);
    let receipt = server
        .receipt_once("thin", "obj_1", within, |row| row.state == "delivered")
        .await;
    assert_eq!(receipt.attempts, 2, "{receipt:?}");
}

/// The receipt of endpoint `thin`'s `event_id` once an attempt of it is recorded.
async fn first_attempted(server: &Server, event_id: &str) -> hookhost::store::ReceiptRow {
    let within = Duration::from_secs(10);
    server
        .receipt_once("thin", event_id, within, |row| row.attempts > 0)
        .await
}

/// A fetched object larger than a push may carry is not delivered in its event's
/// place: the attempt fails, saying why, and is tried again on the endpoint's schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetched_object_past_max_body_bytes_is_not_delivered() {
    let oversized = || async {
        // Past the default 1 MiB, well within the API answer's own cap.
        axum::Json(serde_json::json!({"version": 7, "pad": "x".repeat(1 << 20)}))
    };
    let api = objects_api(oversized, ()).await;
    let (received, server) = thin_endpoint(api, "retry_schedule_seconds = [0, 3600]\n").await;
    post_thin(&server, &[]).await;

    let receipt = first_attempted(&server, "obj_1").await;
    let error = receipt.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("past limits.max_body_bytes (1048576)"),
        "{receipt:?}"
    );
    assert_eq!(receipt.state, "pending", "retried an hour later");
    assert!(received.lock().expect("lock").is_empty(), "delivered");
}

crate::both_stores! {
async fn an_attempt_whose_error_quotes_a_nul_is_recorded() {
    // The provider's API refuses the thin event's fetch with a body holding NUL bytes
    // (a UTF-16 error page), which the attempt's error quotes. PostgreSQL's text
    // refuses NUL: unless it is replaced, the attempt is never recorded and the event
    // is leased again and again, its retries never counted.
    let refused = || async { (StatusCode::NOT_FOUND, "n\0o\0t\0 \0f\0o\0u\0n\0d\0") };
    let api = objects_api(refused, ()).await;
    let config = format!(
        "plugins_dir = \"plugins\"\n[delivery]\npoll_ms = 20\n\
         [[endpoint]]\nid = \"thin\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\nconfig = {{ thin = true }}\n\
         retry_schedule_seconds = [0, 3600]\n\
         [endpoint.destination]\nurl = \"http://127.0.0.1:9/never\"\nsecret = \"whsec_{}\"\n\
         [endpoint.reconcile]\napi_base = \"http://{api}\"\ncredential = \"{CREDENTIAL}\"\n",
        b64(b"thin event test destination key!"),
    );
    let server = Server::start_in(with_test_guest(), &config).await.expect("server starts");
    post_thin(&server, &[]).await;

    let receipt = first_attempted(&server, "obj_1").await;
    let error = receipt.last_error.expect("the attempt's error");
    assert!(error.contains("answered 404: n\u{FFFD}o"), "{error}");
    assert_eq!(receipt.state, "pending", "retried an hour later");
}
}

/// A schedule for a plugin that cannot list the provider's events with the endpoint's
/// configuration (GitHub's needs the hook to read) is refused at start, not warned
/// about once a period has gone by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_the_plugin_cannot_keep_is_refused_at_start() {
    let config = |table: &str| {
        format!(
            "[[endpoint]]\nid = \"gh\"\nplugin = \"github\"\nsecrets = [\"s\"]\n{table}\
             [endpoint.reconcile]\ncredential = \"{GITHUB_TOKEN}\"\nevery_seconds = 3600\n"
        )
    };
    let refused = Server::start_in(tempfile::tempdir().expect("dir"), &config(""))
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(
        refused.ends_with(
            "endpoint \"gh\": reconcile.every_seconds: plugin github does not list the \
             provider's events with this configuration (line 7)"
        ),
        "{refused}"
    );
    let hook = "[endpoint.config]\nreconcile = { repository = \"octo/shop\", hook_id = 7 }\n";
    let server = Server::start_in(tempfile::tempdir().expect("dir"), &config(hook)).await;
    server.expect("starts with the hook to read");
}

const GITHUB_SECRET: &str = "github-webhook-secret";
const GITHUB_TOKEN: &str = "ghp_reconcile_token_0c7e";

/// A repository webhook's deliveries (newest first, two per page, paged by `link`),
/// and redelivery: `POST …/deliveries/{id}/attempts` sends the delivery to hookhost
/// again, signed, as GitHub would.
#[derive(Clone)]
struct FakeGitHub {
    /// (delivery id, guid, issue number), oldest first.
    deliveries: Arc<Vec<(u64, String, u64)>>,
    hookhost: Arc<Mutex<Option<std::net::SocketAddr>>>,
    redelivered: Arc<Mutex<Vec<u64>>>,
    /// Deliveries whose redelivery GitHub refuses (422).
    refused: Arc<Vec<u64>>,
    authorizations: Arc<Mutex<Vec<String>>>,
    port: Arc<Mutex<u16>>,
}

const HOOK: &str = "/repos/octo/shop/hooks/7/deliveries";

fn issue_body(number: u64) -> String {
    format!(
        r#"{{"action":"opened","issue":{{"id":{number},"number":{number},"updated_at":"2026-11-30T10:00:{number:02}Z"}}}}"#
    )
}

fn github_headers(guid: &str, body: &str) -> Vec<(&'static str, String)> {
    let signature = hex::encode(hmac_sha256(GITHUB_SECRET.as_bytes(), &[body.as_bytes()]));
    vec![
        ("x-github-delivery", guid.to_string()),
        ("x-github-event", "issues".to_string()),
        ("x-hub-signature-256", format!("sha256={signature}")),
        ("content-type", "application/json".to_string()),
    ]
}

async fn github_list(
    State(fake): State<FakeGitHub>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> axum::response::Response {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    fake.authorizations
        .lock()
        .expect("lock")
        .push(authorization.to_string());
    let skip: usize = query
        .get("cursor")
        .map_or(0, |c| c.parse().expect("cursor"));
    let newest_first: Vec<&(u64, String, u64)> = fake.deliveries.iter().rev().collect();
    let page: Vec<Value> = newest_first
        .iter()
        .skip(skip)
        .take(2)
        .map(|(id, guid, number)| {
            serde_json::json!({"id": id, "guid": guid, "delivered_at": format!("2026-11-30T10:00:{number:02}Z"),
                "redelivery": false, "duration": 0.1, "status": "OK", "status_code": 200,
                "event": "issues", "action": "opened", "installation_id": null, "repository_id": 1})
        })
        .collect();
    let mut response = axum::Json(Value::Array(page)).into_response();
    if skip + 2 < newest_first.len() {
        let port = *fake.port.lock().expect("lock");
        let link = format!(
            "<http://127.0.0.1:{port}{HOOK}?per_page=100&cursor={}>; rel=\"next\"",
            skip + 2
        );
        response
            .headers_mut()
            .insert("link", link.parse().expect("header"));
    }
    response
}

async fn github_redeliver(
    State(fake): State<FakeGitHub>,
    axum::extract::Path(id): axum::extract::Path<u64>,
) -> StatusCode {
    if fake.refused.contains(&id) {
        return StatusCode::UNPROCESSABLE_ENTITY;
    }
    fake.redelivered.lock().expect("lock").push(id);
    let (_, guid, number) = fake
        .deliveries
        .iter()
        .find(|(d, ..)| *d == id)
        .expect("a known delivery")
        .clone();
    let body = issue_body(number);
    let hookhost = fake
        .hookhost
        .lock()
        .expect("lock")
        .expect("hookhost's address");
    let (status, answer) = request(
        hookhost,
        "POST",
        "/webhooks/github",
        &github_headers(&guid, &body),
        body.into(),
    )
    .await;
    assert_eq!(status, 200, "the redelivery: {answer}");
    StatusCode::ACCEPTED
}

/// A fake GitHub API for six deliveries (refusing to redeliver `refused`), and a
/// server reconciling from it that received all but `missing`.
async fn github_with_missing(missing: &[u64], refused: &[u64]) -> (FakeGitHub, Server) {
    let fake = FakeGitHub {
        deliveries: Arc::new((1..=6).map(|n| (100 + n, format!("guid-{n}"), n)).collect()),
        hookhost: Arc::default(),
        redelivered: Arc::default(),
        refused: Arc::new(refused.to_vec()),
        authorizations: Arc::default(),
        port: Arc::default(),
    };
    let app = axum::Router::new()
        .route(HOOK, axum::routing::get(github_list))
        .route(
            &format!("{HOOK}/{{id}}/attempts"),
            axum::routing::post(github_redeliver),
        )
        .with_state(fake.clone());
    let api = serve_on_loopback(app).await;
    *fake.port.lock().expect("lock") = api.port();
    let config = format!(
        "[[endpoint]]\nid = \"github\"\nplugin = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n\
         config = {{ reconcile = {{ repository = \"octo/shop\", hook_id = 7 }} }}\n\
         [endpoint.reconcile]\napi_base = \"http://{api}\"\ncredential = \"{GITHUB_TOKEN}\"\n\
         requests_per_second = 100\n"
    );
    let server = Server::start(&config).await;
    *fake.hookhost.lock().expect("lock") = Some(server.addr);
    for (_, guid, number) in fake
        .deliveries
        .iter()
        .filter(|(_, _, n)| !missing.contains(n))
    {
        let body = issue_body(*number);
        let answer = server
            .post("github", &github_headers(guid, &body), body.clone())
            .await;
        assert_eq!(answer.0, 200, "{guid}: {answer:?}");
    }
    (fake, server)
}

/// GitHub lists deliveries without payloads: the two that never arrived are asked for
/// again, arrive signed as pushes, and a second run asks for nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_deliveries_that_never_arrived_are_redelivered() {
    let (fake, server) = github_with_missing(&[2, 5], &[]).await;
    let ran = reconciled(&server, "github", 0).await;
    assert_eq!(
        (
            ran.state.as_str(),
            ran.pages,
            ran.seen,
            ran.present,
            ran.repaired
        ),
        ("done", 3, 6, 4, 2),
        "{ran:?}"
    );
    let mut asked = fake.redelivered.lock().expect("lock").clone();
    asked.sort_unstable();
    assert_eq!(asked, vec![102, 105]);
    for guid in ["guid-2", "guid-5"] {
        let receipt = server.receipt("github", guid).await;
        assert_eq!(
            (receipt.source.as_str(), receipt.event_type.as_str()),
            ("push", "issues.opened")
        );
    }
    let repairs = repairs_of(&server, &ran).await;
    assert!(
        repairs.iter().all(|r| r.result == "redelivery_requested"),
        "{repairs:?}"
    );
    assert!(
        fake.authorizations
            .lock()
            .expect("lock")
            .iter()
            .all(|a| *a == format!("Bearer {GITHUB_TOKEN}"))
    );

    let again = reconciled(&server, "github", 0).await;
    assert_eq!(
        (again.seen, again.present, again.repaired),
        (6, 6, 0),
        "{again:?}"
    );
    assert_eq!(
        fake.redelivered.lock().expect("lock").len(),
        2,
        "nothing asked for again"
    );
}

/// A run that fails halfway through a page keeps the repairs it made before, so its
/// counts and its list of repairs agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_failing_mid_page_keeps_the_repairs_it_made() {
    // Newest first, two a page: the second page holds 4, then 3, whose redelivery
    // GitHub refuses.
    let (fake, server) = github_with_missing(&[3, 4], &[103]).await;
    let ran = reconciled(&server, "github", 0).await;
    assert_eq!((ran.state.as_str(), ran.repaired), ("failed", 1), "{ran:?}");
    assert_eq!(*fake.redelivered.lock().expect("lock"), vec![104]);
    let repairs = repairs_of(&server, &ran).await;
    let made: Vec<(&str, &str)> = repairs
        .iter()
        .map(|r| (r.event_id.as_str(), r.result.as_str()))
        .collect();
    assert_eq!(made, [("guid-4", "redelivery_requested")]);
}

/// An unfinished run is resumed only by a run that asks no further back than it
/// did; one that asks further back supersedes it and looks back as far as asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_looking_further_back_supersedes_an_unfinished_one() {
    let (_fake, server) = github_with_missing(&[], &[]).await;
    let started_at_ms = now() * 1000;
    let cut = RunRow::begun(
        "rec_cut".into(),
        "github",
        now() - 3600,
        false,
        started_at_ms,
    );
    server.app.store.create_run(&cut).await.expect("create");
    // 2026-11-30T09:00:00Z: before every fake delivery (10:00:01-06 that day), so all
    // six are listed, and further back than the cut run. A week before now, as this
    // was, left them all out from a week after that day on.
    let since = 1_796_029_200;
    let ran = reconciled(&server, "github", since).await;
    assert_ne!(ran.id, cut.id);
    assert_eq!(
        (ran.since, ran.state.as_str(), ran.seen),
        (since, "done", 6)
    );
    let (superseded, _) = stored_run(&server, "rec_cut").await;
    assert_eq!(
        (superseded.state.as_str(), superseded.last_error),
        ("failed", Some(format!("superseded by run {}", ran.id)))
    );
}

/// A dry run neither resumes nor supersedes an unfinished run that changes things: it
/// changes nothing, and the run is resumed by the next that does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_leaves_an_unfinished_run_to_the_next_real_one() {
    let (_fake, server) = github_with_missing(&[], &[]).await;
    let since = 1_796_029_200;
    let cut = RunRow::begun("rec_cut".into(), "github", since, false, now() * 1000);
    server.app.store.create_run(&cut).await.expect("create");
    let dry = run(
        &server.app,
        "github",
        Options {
            since,
            dry_run: true,
        },
    )
    .await
    .expect("the dry run");
    assert_ne!(dry.id, cut.id);
    let kept = server
        .app
        .store
        .unfinished_run("github", false)
        .await
        .expect("read");
    assert_eq!(
        kept.map(|run| run.id),
        Some(cut.id.clone()),
        "the real run is left unfinished"
    );
    let ran = reconciled(&server, "github", since).await;
    let (resumed, _) = stored_run(&server, &cut.id).await;
    assert_eq!(
        (resumed.state.as_str(), resumed.seen),
        ("done", 6),
        "{ran:?}"
    );
}

/// `generic`'s configurable list: the items its `reconcile` table points at are
/// listed, and those without a receipt stored as listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generic_mapping_lists_events_from_its_configured_endpoint() {
    let t = now();
    let events: Vec<String> = (1..=3)
        .map(|n| stripe_event(&format!("evt_g{n}"), "invoice.paid", &format!("in_{n}"), t))
        .collect();
    let page = format!(r#"{{"data":[{}],"next":null}}"#, events.join(","));
    let api = serve_on_loopback(axum::Router::new().route(
        "/v1/list",
        axum::routing::get(move || {
            let page = page.clone();
            async move { ([("content-type", "application/json")], page) }
        }),
    ))
    .await;
    let config = format!(
        "[[endpoint]]\nid = \"ledger\"\nplugin = \"generic\"\nsecrets = [\"{STRIPE_SECRET}\"]\n\
         [endpoint.config]\nalgorithm = \"hmac-sha256\"\nsigned = \"{{timestamp}}.{{body}}\"\nsecret = {{ format = \"raw\" }}\n\
         [endpoint.config.signature]\nheader = \"Stripe-Signature\"\nformat = \"key-values\"\nseparator = \",\"\nkey = \"v1\"\nencoding = \"hex\"\n\
         [endpoint.config.timestamp]\nkey = \"t\"\nunit = \"seconds\"\ntolerance_seconds = 300\n\
         [endpoint.config.event]\nrequired = [\"id\", \"type\"]\nid = \"{{/id}}\"\ntype = \"{{/type}}\"\n\
         [endpoint.config.reconcile]\napi_base = \"https://api.ledger.example\"\nhosts = [\"api.ledger.example\"]\n\
         path = \"/v1/list?since={{since}}\"\nitems = \"/data\"\nid = \"/id\"\ntype = \"/type\"\ncursor = \"/next\"\n\
         [endpoint.reconcile]\napi_base = \"http://{api}\"\ncredential = \"{CREDENTIAL}\"\n"
    );
    let server = Server::start(&config).await;
    let (status, answer) = server
        .post(
            "ledger",
            &stripe_headers(&[STRIPE_SECRET], t, &events[0]),
            events[0].clone(),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let ran = reconciled(&server, "ledger", t - 60).await;
    assert_eq!(
        (ran.state.as_str(), ran.seen, ran.present, ran.repaired),
        ("done", 3, 1, 2),
        "{ran:?}"
    );
    for (n, event) in events.iter().enumerate().skip(1) {
        let receipt = server.receipt("ledger", &format!("evt_g{}", n + 1)).await;
        assert_eq!(
            (receipt.source.as_str(), receipt.event_type.as_str()),
            ("reconcile", "invoice.paid")
        );
        assert_eq!(receipt.body, event.as_bytes(), "stored exactly as listed");
    }
}
