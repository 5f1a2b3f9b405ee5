//! Hostile plugins are contained, and the rest of the receiver keeps answering.

use crate::support::*;
use serde_json::json;
use std::time::{Duration, Instant};

/// One endpoint per misbehaviour, and a well-behaved one beside them.
fn config(probe_port: u16) -> String {
    let mut text = String::from(
        "plugins_dir = \"plugins\"\n[limits]\nplugin_time_ms = 50\nplugin_memory_bytes = 16777216\nplugin_output_bytes = 65536\n\
         [[endpoint]]\nid = \"good\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\n",
    );
    for (id, mode, phase) in [
        ("loop", "loop", "plan"),
        ("memory", "memory", "plan"),
        ("handles", "handles", "plan"),
        ("trap", "trap", "plan"),
        ("sleep", "sleep", "plan"),
        ("huge", "huge-output", "plan"),
        ("many-parts", "many-parts", "plan"),
        ("loop-late", "loop", "describe"),
        ("stderr", "stderr", "plan"),
        ("probe", "probe", "describe"),
        ("remember", "remember", "plan"),
    ] {
        text.push_str(&format!(
            "[[endpoint]]\nid = \"{id}\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\n\
             [endpoint.config]\nmode = \"{mode}\"\nphase = \"{phase}\"\nport = {probe_port}\n"
        ));
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misbehaving_plugins_fail_alone_and_within_their_limits() {
    // Something listens on this port, so a refused connection means the sandbox
    // refused it, not that nothing was there.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = Server::start_in(with_test_guest(), &config(port))
        .await
        .expect("starts");
    let body = br#"{"n":1}"#;
    let good = |id: &str| {
        let server = &server;
        let id = id.to_string();
        async move {
            server
                .post("good", &guest_headers("s", &id, body), &body[..])
                .await
        }
    };
    assert_eq!(good("g0").await.1["status"], "accepted");

    for endpoint in [
        "loop",
        "memory",
        "handles",
        "trap",
        "sleep",
        "huge",
        "many-parts",
        "loop-late",
    ] {
        let started = Instant::now();
        let answer = server
            .post(endpoint, &guest_headers("s", endpoint, body), &body[..])
            .await;
        assert_eq!(
            answer,
            (500, json!({"error": "plugin_failed"})),
            "{endpoint}"
        );
        // Bounded: a containment check, not a benchmark (the limit is 50 ms).
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{endpoint} took {:?}",
            started.elapsed()
        );
        // The well-behaved endpoint on the same plugin answers right after.
        assert_eq!(
            good(&format!("after-{endpoint}")).await.1["status"],
            "accepted",
            "after {endpoint}"
        );
        assert_eq!(server.count_receipts(endpoint).await, 0);
    }

    // Each failure is counted by its kind, and every call is timed: nine good
    // requests (both calls), seven failing in plan-verification (a refused wait is a
    // trap; a plan's parts count as elements, not only as bytes) and one in
    // describe-event.
    {
        use crate::operations::{ADMIN_TOKEN, admin, get, value};
        let admin = admin(&server).await;
        let (_, text) = get(admin, "/metrics", Some(ADMIN_TOKEN)).await;
        for (sample, want) in [
            (
                r#"hookhost_plugin_failures_total{plugin="hostile",kind="timeout"}"#,
                2.0,
            ),
            (
                r#"hookhost_plugin_failures_total{plugin="hostile",kind="memory"}"#,
                1.0,
            ),
            (
                r#"hookhost_plugin_failures_total{plugin="hostile",kind="handles"}"#,
                1.0,
            ),
            (
                r#"hookhost_plugin_failures_total{plugin="hostile",kind="trap"}"#,
                2.0,
            ),
            (
                r#"hookhost_plugin_failures_total{plugin="hostile",kind="output_too_large"}"#,
                2.0,
            ),
            (
                r#"hookhost_plugin_call_seconds_count{plugin="hostile",call="plan-verification"}"#,
                17.0,
            ),
            (
                r#"hookhost_plugin_call_seconds_count{plugin="hostile",call="describe-event"}"#,
                10.0,
            ),
        ] {
            assert_eq!(value(&text, sample), Some(want), "{sample} in:\n{text}");
        }
    }

    // Writing to stderr is allowed (it goes to the log, capped) and costs nothing else.
    let answer = server
        .post("stderr", &guest_headers("s", "noisy", body), &body[..])
        .await;
    assert_eq!(answer.1["status"], "accepted", "{answer:?}");

    // The sandbox is empty: no environment, no args, no files, no network, no clock.
    let answer = server
        .post("probe", &guest_headers("s", "probe-1", body), &body[..])
        .await;
    assert_eq!(answer.1["status"], "accepted", "{answer:?}");
    let seen = server.receipt("probe", "probe-1").await;
    assert_eq!(
        seen.event_type,
        "env=0;args=0;file=denied;dir=denied;net=denied;clock=0"
    );
    drop(listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_looping_plugin_does_not_stall_other_endpoints() {
    let server = std::sync::Arc::new(
        Server::start_in(with_test_guest(), &stripe_config(&config(1)))
            .await
            .expect("starts"),
    );
    let body = br#"{"n":2}"#;
    // Keep the loop endpoint busy from several tasks while Stripe events flow.
    let mut hostile = Vec::new();
    for i in 0..4 {
        let server = server.clone();
        hostile.push(tokio::spawn(async move {
            for j in 0..5 {
                let id = format!("l{i}-{j}");
                let (status, _) = server
                    .post("loop", &guest_headers("s", &id, body), &body[..])
                    .await;
                assert_eq!(status, 500);
            }
        }));
    }
    for i in 0..20 {
        let t = now();
        let event = stripe_event(
            &format!("evt_busy_{i}"),
            "customer.updated",
            &format!("cus_{i}"),
            t,
        );
        let (status, answer) = server
            .post(
                "stripe",
                &stripe_headers(&[STRIPE_SECRET], t, &event),
                event,
            )
            .await;
        assert_eq!((status, answer["status"].as_str()), (200, Some("accepted")));
    }
    for task in hostile {
        task.await.expect("hostile task");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_ins_that_do_not_fit_are_refused_with_the_file_named() {
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "future.wasm",
            std::fs::read(guest("future_contract")).expect("guest"),
            "exports hookhost:provider/plugin@9.0.0; this hookhost supports hookhost:provider/plugin@0.2.0 or hookhost:provider/plugin@0.1.0",
        ),
        (
            "core.wasm",
            b"\0asm\x01\0\0\0".to_vec(),
            "a core wasm module, not a component",
        ),
        (
            "junk.wasm",
            b"definitely not wasm".to_vec(),
            "not a valid component",
        ),
        (
            "stripe-copy.wasm",
            std::fs::read(guest("stripe")).expect("guest"),
            "declares the name \"stripe\", already taken by a built-in plugin",
        ),
    ];
    for (file, bytes, expected) in cases {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir(dir.path().join("plugins")).expect("mkdir");
        let path = dir.path().join("plugins").join(file);
        std::fs::write(&path, bytes).expect("write");
        let error = match Server::start_in(dir, "plugins_dir = \"plugins\"\n").await {
            Ok(_) => panic!("{file} was accepted"),
            Err(e) => format!("{e:#}"),
        };
        assert!(
            error.contains(&path.display().to_string()),
            "{file}: {error}"
        );
        assert!(error.contains(expected), "{file}: {error}");
    }
}

/// Every request gets a fresh plugin instance: a plugin that keeps state in globals
/// sees none left by an earlier request, one after another or many at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_keeping_state_in_globals_never_sees_a_previous_request() {
    let server = std::sync::Arc::new(
        Server::start_in(with_test_guest(), &config(1))
            .await
            .expect("starts"),
    );
    let body = br#"{"n":3}"#;
    let send = |id: String| {
        let server = server.clone();
        async move {
            let answer = server
                .post("remember", &guest_headers("s", &id, body), &body[..])
                .await;
            assert_eq!(answer.1["status"], "accepted", "{id}: {answer:?}");
            id
        }
    };
    let mut ids = Vec::new();
    for n in 0..10 {
        ids.push(send(format!("one-by-one-{n}")).await);
    }
    let together: Vec<_> = (0..40)
        .map(|n| tokio::spawn(send(format!("together-{n}"))))
        .collect();
    for task in together {
        ids.push(task.await.expect("request task"));
    }
    for id in &ids {
        // Two calls in this instance (plan, describe), and no event id before its own.
        assert_eq!(
            server.receipt("remember", id).await.event_type,
            "calls=2;previous=",
            "{id}"
        );
    }
}

/// However deep a body's JSON nests, a plugin parses it without running out of
/// stack (which would trap and answer 500).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_bodies_fit_in_a_plugins_stack() {
    let server = Server::start(&stripe_config("")).await;
    let t = now();
    let nested = |depth: usize| {
        format!(
            r#"{{"id":"evt_deep_{depth}","type":"customer.updated","created":{t},"data":{{"object":{{"object":"customer","id":"cus_{depth}"}}}},"extra":{}{}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        )
    };
    for depth in [127, 128, 10_000, 200_000] {
        let (status, answer) = server
            .post_stripe(&[STRIPE_SECRET], t, &nested(depth))
            .await;
        assert_eq!(
            (status, answer),
            (
                200,
                json!({"status": "accepted", "event_id": format!("evt_deep_{depth}")})
            ),
            "{depth} levels"
        );
    }
}

/// The built-ins with the default limits, but room in time: the tests of every
/// built-in check what calls do, not how long they take, and a loaded test machine
/// can stall a thread past the 50 ms default.
fn built_ins() -> hookhost::plugins::Catalog {
    let limits = hookhost::plugins::PluginLimits {
        time: Duration::from_secs(10),
        ..hookhost::plugins::PluginLimits::default()
    };
    hookhost::plugins::Catalog::load(None, limits).expect("built-in plugins load")
}

/// The head the tests of every built-in send: JSON, with the event header GitHub's
/// plugin needs.
fn json_head() -> Vec<(String, Vec<u8>)> {
    hookhost::verify::owned_headers(hookhost_plugin_sdk::testing::WIDE_BODY_HEADERS)
}

/// A fresh instance of a built-in for a POST of `body`, as a request gets one.
fn fresh<'a>(
    plugin: &'a hookhost::plugins::Plugin,
    headers: &'a [(String, Vec<u8>)],
    body: &'a [u8],
) -> hookhost::plugins::Session<'a> {
    let source = hookhost::verify::MessageSource {
        method: "POST",
        url: "http://127.0.0.1/webhooks/built-in",
        headers,
        body,
    };
    plugin
        .session("{}", &source)
        .unwrap_or_else(|e| panic!("{}: no instance: {e}", plugin.name()))
}

/// The bytes of a component's data segments, in all its core modules: the memory
/// image a fresh instance maps and its reset copies back, on every request.
fn data_image_bytes(component: &[u8]) -> usize {
    let mut bytes = 0;
    for payload in wasmparser::Parser::new(0).parse_all(component) {
        if let wasmparser::Payload::DataSection(segments) = payload.expect("a valid component") {
            for segment in segments {
                bytes += segment.expect("a valid data segment").data.len();
            }
        }
    }
    bytes
}

/// A plugin that reads JSON through the SDK, as Stripe's (the benchmark's), or also
/// answers in JSON written as text, as Slack's, links no float formatting: serde_json's
/// formatter alone was 17 KB of Stripe's 32.6 KB image, 0.4–0.5 µs a request to copy
/// back (docs/performance.md, section 45).
#[test]
fn plugins_that_read_json_keep_their_memory_image_small() {
    for name in ["stripe", "slack"] {
        let component = hookhost::plugins::builtin_component(name).expect("built in");
        let image = data_image_bytes(component);
        assert!(image > 0, "{name}'s image is read: {image} bytes");
        assert!(
            image <= 16 * 1024,
            "{name}'s memory image is {image} bytes, over 16 KiB"
        );
    }
}

/// Every built-in plugin, called directly with bodies nested past serde_json's limit
/// of 128 levels and far beyond it: no call runs out of the guest's stack. A plugin
/// may reject such a body, but a trap (a plugin failure, answered 500) fails here.
#[test]
fn every_built_in_plugin_reads_deeply_nested_bodies_within_its_stack() {
    let catalog = built_ins();
    let nested = |depth: usize| {
        format!(
            r#"{{"id":"evt_1","type":"customer.updated","event":"push","created":1,"data":{{"object":{{"object":"customer","id":"cus_1","deep":{}{}}}}},"payload":{}{}}}"#,
            "[".repeat(depth),
            "]".repeat(depth),
            "{\"a\":".repeat(depth),
            "}".repeat(depth)
        )
    };
    let headers = json_head();
    let mut checked = 0;
    for depth in [64, 127, 128, 129, 1_000, 200_000] {
        let body = nested(depth);
        for plugin in catalog.iter() {
            let mut session = fresh(plugin, &headers, body.as_bytes());
            if let Err(failure) = session.plan_verification() {
                panic!(
                    "{} at {depth} levels, plan-verification: {failure}",
                    plugin.name()
                );
            }
            drop(session);
            let mut session = fresh(plugin, &headers, body.as_bytes());
            if let Err(failure) = session.describe_event() {
                panic!(
                    "{} at {depth} levels, describe-event: {failure}",
                    plugin.name()
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 6 * catalog.iter().count());
    assert!(catalog.iter().count() >= 36, "every built-in is checked");
}

/// Every built-in plugin, in one instance as at ingest (plan, then describe), reads a
/// body as large as the default cap (1 MiB) in the widest shapes JSON has, within the
/// default per-call memory (16 MiB). A plugin's heap gives back only its last block
/// (each call has a fresh instance), so what a plugin frees along the way stays
/// taken until the call ends: this holds every built-in to fitting anyway. A plugin
/// may reject such a body; running out of memory or trapping fails here. The last
/// shapes are batches (the body an array of events, as SendGrid and HubSpot post):
/// those plugins read each of their 47,000 or 5,500 events.
#[test]
fn every_built_in_plugin_reads_a_body_at_the_size_cap_within_its_memory() {
    const CAP: usize = 1024 * 1024;
    assert_eq!(
        hookhost::plugins::PluginLimits::default().memory_bytes,
        16 * 1024 * 1024,
        "the default this holds to"
    );
    let catalog = built_ins();
    let shapes = hookhost_plugin_sdk::testing::wide_bodies(CAP);
    assert_eq!(shapes.len(), 6, "every shape is read");
    for (shape, body) in &shapes {
        assert!(
            body.len() <= CAP && CAP - body.len() < 512,
            "{shape}: {} bytes",
            body.len()
        );
    }
    let headers = json_head();
    let mut failed = Vec::new();
    let mut checked = 0;
    for (shape, body) in &shapes {
        for plugin in catalog.iter() {
            checked += 1;
            let mut session = fresh(plugin, &headers, body.as_bytes());
            let outcome = session
                .plan_verification()
                .map(drop)
                .and_then(|_| session.describe_event().map(drop));
            if let Err(failure) = outcome {
                failed.push(format!("{} with {shape}: {failure}", plugin.name()));
            }
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
    assert!(catalog.iter().count() >= 36, "every built-in is checked");
    assert_eq!(checked, shapes.len() * catalog.iter().count());
}

/// A plugin whose memory starts past the default per-call limit (24 MiB against
/// 16 MiB) is refused at start with the reason, not left to fail every request; with
/// the limit raised past its size it loads and answers. (The load-time export check
/// runs with the most memory any configuration may grant, so it never refuses a
/// plugin the configured limit would let run.)
#[tokio::test]
async fn a_plugin_whose_memory_starts_past_the_limit_is_refused_at_start_unless_raised() {
    let dir = || with_guest("big_memory", "big-memory.wasm");
    let endpoint = "[[endpoint]]\nid = \"big\"\nplugin = \"big-memory\"\nsecrets = [\"s\"]\n";

    let refused = Server::start_in(dir(), &format!("plugins_dir = \"plugins\"\n{endpoint}"))
        .await
        .err()
        .map(|e| format!("{e:#}"))
        .expect("the default 16 MiB per call cannot start a 24 MiB plugin");
    assert!(refused.contains("big-memory.wasm"), "{refused}");
    assert!(
        refused.contains("needs more memory than limits.plugin_memory_bytes (16777216 bytes)"),
        "{refused}"
    );

    let server = Server::start_in(
        dir(),
        &format!("plugins_dir = \"plugins\"\n[limits]\nplugin_memory_bytes = 33554432\n{endpoint}"),
    )
    .await
    .expect("starts with 32 MiB per call");
    let body = br#"{"n":1}"#;
    let answer = server
        .post("big", &guest_headers("s", "big-1", body), &body[..])
        .await;
    assert_eq!(answer.1["status"], "accepted", "{answer:?}");
}

/// The host computes a handshake answer's HMAC parts with the endpoint's key only for
/// a verified request: a plugin that would sign text from an unsigned GET (a signing
/// oracle for anyone who can reach the endpoint) fails instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_handshake_never_gets_the_endpoints_key_to_sign_anything() {
    let server = Server::start_in(
        with_test_guest(),
        "plugins_dir = \"plugins\"\n\
         [[endpoint]]\nid = \"oracle\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\n\
         [endpoint.config]\nmode = \"oracle\"\n",
    )
    .await
    .expect("starts");
    let (status, answer) = request(
        server.addr,
        "GET",
        "/webhooks/oracle?t=1700000000.%7B%22id%22%3A%22evt_forged%22%7D",
        &[],
        Vec::new().into(),
    )
    .await;
    assert_eq!((status, answer), (500, json!({"error": "plugin_failed"})));
}
