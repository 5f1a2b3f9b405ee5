//! A test guest that misbehaves on request. Its plugin configuration chooses how:
//! `{"mode": "...", "phase": "plan" | "describe"}`.
//!
//! Without misbehaviour it is a tiny well-formed provider: `x-test-signature` is the
//! hex HMAC-SHA256 of the body with the raw secret, `x-test-id` the event id.
//!
//! Modes: `ok`, `loop` (spins forever), `memory` (allocates without end), `trap`
//! (panics), `sleep` (waits 30 s on the clock), `huge-output` (returns megabytes),
//! `many-parts` (a plan of 100,000 empty parts), `stderr` (floods stderr, then answers),
//! `probe` (tries env, files, network and clock, and reports what it saw as the event
//! type), `remember` (keeps state in globals and reports it as the event type: calls
//! made in this instance and the event id a previous request left behind), `oracle`
//! (answers a GET handshake with the endpoint key's HMAC of the query: a signing
//! oracle the host must refuse); and two well-behaved answers: `reject` and `ignore`
//! dispositions. A rejected event's id is the body's JSON `id` when it has one (a
//! header cannot carry every text a body can).
//!
//! Reconciliation: it lists one event per run, `evt_echo`, whose body is everything the
//! plugin was given (configuration, the answer's status, headers and body), so a test
//! can see what reached it. `{"reconcile_target": URL}` makes it aim its request there;
//! `{"reconcile_cursor": C}` makes every page point at C as the next;
//! `{"reconcile_nameless": true}` lists its event with an empty id (the contract's id
//! is a string: an empty one is the only way to list an event without one);
//! `{"reconcile_id": ID}` lists it under that id.
//! `{"thin": true}`: every event is thin; its current object is `GET /objects/{id}`,
//! versioned by the object's `version`. A request's `x-test-version` header makes its
//! event one of resource `object` `{id}` at that version.
//!
//! `{"check": "loop"}`: its configuration check spins forever.
//!
//! Without a mode in its configuration, a request's `x-test-mode` header chooses one:
//! as a shadow replay's candidate it shares the endpoint's configuration, so the stored
//! requests choose how it misbehaves.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use hookhost_plugin_sdk::{
    Algorithm, Answer, Candidate, ConfigError, EndpointFacts, Event, Fetched, Handshake,
    HandshakeCheck, KeyFormat, Page, Part, Plan, PluginInfo, Provider, ReconcileInfo, Rejection,
    RemoteEvent, Repair, Request, RequestPlan, Response, ResponsePart, StoredEvent, decode,
    serde_json,
};

pub struct Hostile;

/// `remember` mode's globals: plugin calls made in this instance, the last event id
/// seen, and the one seen before the current request's.
static CALLS: AtomicU32 = AtomicU32::new(0);
static LAST_ID: Mutex<String> = Mutex::new(String::new());
static PREVIOUS_ID: Mutex<String> = Mutex::new(String::new());

fn thin(config: &serde_json::Value) -> bool {
    config.get("thin") == Some(&serde_json::Value::Bool(true))
}

fn remembering(req: &Request) -> bool {
    req.config().get("mode").and_then(|m| m.as_str()) == Some("remember")
}

fn misbehave(req: &Request, phase: &str) -> Option<String> {
    let mode = req
        .config()
        .get("mode")
        .and_then(|m| m.as_str())
        .or_else(|| req.header_str("x-test-mode"))
        .unwrap_or("ok");
    let when = req
        .config()
        .get("phase")
        .and_then(|p| p.as_str())
        .unwrap_or("plan");
    if when != phase {
        return None;
    }
    match mode {
        "loop" => {
            let mut x: u64 = 1;
            loop {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        "memory" => {
            // Zeroed blocks: the memory is grown without its pages being written, so the
            // memory limit, not the 50 ms time limit, stops it even on a loaded machine
            // (writing each byte once took over 50 ms under a full test run's load).
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![0u8; 1024 * 1024]);
                std::hint::black_box(&hoard);
            }
        }
        "trap" => panic!("hostile guest traps on purpose"),
        #[cfg(target_arch = "wasm32")]
        "handles" => {
            // Host resources never dropped: host memory the memory limit does not see.
            // Twice the host's cap, and far under wasmtime's own default (100,000).
            for _ in 0..2_000 {
                std::mem::forget(wasip2::cli::stderr::get_stderr());
            }
            None
        }
        "sleep" => {
            // A host call that waits, which the time limit cannot interrupt. Bounded,
            // so that a host letting it wait fails its test in 30 s, not never.
            std::thread::sleep(std::time::Duration::from_secs(30));
            None
        }
        "huge-output" => Some("x".repeat(4 * 1024 * 1024)),
        "stderr" => {
            // ~30 KiB: fifteen times the host's 2 KiB cap, and a few milliseconds of
            // calls, so the tests' 50 ms limit holds on a loaded machine (10,000 lines
            // took 12-19 ms on an idle one and over 50 ms once under CI's load).
            for _ in 0..1_000 {
                eprintln!("hostile guest writes to stderr");
            }
            None
        }
        "probe" => Some(probe(req)),
        _ => None,
    }
}

/// Everything the sandbox should deny, as `what=result` pairs.
fn probe(req: &Request) -> String {
    let env = std::env::vars().count();
    let args = std::env::args().count();
    let file = match std::fs::read("/etc/passwd") {
        Ok(_) => "read",
        Err(_) => "denied",
    };
    let dir = match std::fs::read_dir(".") {
        Ok(_) => "listed",
        Err(_) => "denied",
    };
    let port = req
        .config()
        .get("port")
        .and_then(|p| p.as_u64())
        .unwrap_or(80);
    let net = match std::net::TcpStream::connect(("127.0.0.1", port as u16)) {
        Ok(_) => "connected",
        Err(_) => "denied",
    };
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(u64::MAX);
    format!("env={env};args={args};file={file};dir={dir};net={net};clock={clock}")
}

impl Provider for Hostile {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "hostile".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Hostile test guest".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "none".into(),
        }
    }

    fn check_config(config: &serde_json::Value) -> Result<EndpointFacts, ConfigError> {
        const KEYS: &[&str] = &[
            "mode",
            "phase",
            "port",
            "reconcile_target",
            "reconcile_cursor",
            "reconcile_nameless",
            "reconcile_id",
            "thin",
            "check",
        ];
        ConfigError::only_keys(config, KEYS)?;
        match config.get("check").and_then(|c| c.as_str()) {
            Some("loop") => {
                // A configuration check that never ends: only its time limit stops it.
                let mut x: u64 = 1;
                loop {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
            // Text made to forge log lines, and far longer than any real message.
            Some("forge") => Err(ConfigError {
                key: "mode\nforged".into(),
                message: format!("refused\nINFO forged line{}", "x".repeat(100_000)),
            }),
            Some("long-prefix") => Ok(EndpointFacts {
                key_formats: vec![KeyFormat::Base64AfterPrefix("p".repeat(1_000))],
                default_tolerance_seconds: None,
            }),
            _ => Ok(EndpointFacts::default()),
        }
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        if remembering(req) {
            CALLS.fetch_add(1, Ordering::SeqCst);
            let id = req.header_str("x-test-id").unwrap_or_default().to_string();
            let previous =
                std::mem::replace(&mut *LAST_ID.lock().unwrap_or_else(|p| p.into_inner()), id);
            *PREVIOUS_ID.lock().unwrap_or_else(|p| p.into_inner()) = previous;
        }
        let flood = misbehave(req, "plan");
        let signature = decode::hex(req.signature_header("x-test-signature")?)?;
        let mut message = vec![Part::Body];
        if let Some(text) = flood {
            message.insert(0, Part::Text(text));
        }
        if req.config().get("mode").and_then(|m| m.as_str()) == Some("many-parts") {
            // Empty parts: nothing to sign, but each is an element the host keeps.
            message.splice(
                0..0,
                std::iter::repeat_n(Part::Text(String::new()), 100_000),
            );
        }
        Ok(Plan {
            message,
            candidates: vec![Candidate::new(Algorithm::HmacSha256, signature)],
            timestamp: None,
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let mut event_type = misbehave(req, "describe").unwrap_or_else(|| "test.event".into());
        if remembering(req) {
            let calls = CALLS.fetch_add(1, Ordering::SeqCst) + 1;
            let previous = PREVIOUS_ID
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            event_type = format!("calls={calls};previous={previous}");
        }
        let mut event = Event::new(event_type).maybe_id(req.header_str("x-test-id"));
        if let (Some(id), Some(version)) = (
            req.header_str("x-test-id"),
            req.header_str("x-test-version")
                .and_then(|v| v.parse().ok()),
        ) {
            event = event.resource("object", id).version(Some(version));
        }
        Ok(match req.config().get("mode").and_then(|m| m.as_str()) {
            Some("reject") => {
                let body_id = req
                    .json()
                    .ok()
                    .and_then(|j| j.str("/id").map(|id| id.into_owned()));
                match body_id {
                    Some(id) => event.id(id),
                    None => event,
                }
                .reject("test guest refuses this event")
            }
            Some("ignore") => event.ignore("filtered_by_test"),
            _ => event,
        })
    }

    fn handshake(req: &Request) -> Option<Handshake> {
        let oracle = req.config().get("mode").and_then(|m| m.as_str()) == Some("oracle");
        let query = req.url.split_once('?').map_or("", |(_, q)| q).to_string();
        oracle.then(|| Handshake {
            check: HandshakeCheck::None,
            response: Response::new(200, "text/plain", vec![ResponsePart::HmacSha256Hex(query)]),
        })
    }

    fn reconcile_info(config: &serde_json::Value) -> Option<ReconcileInfo> {
        Some(ReconcileInfo {
            hosts: vec!["api.hostile.test".into()],
            api_base: "https://api.hostile.test".into(),
            lists_events: true,
            fetches_objects: thin(config),
        })
    }

    fn fetch_request(config: &serde_json::Value, event: &StoredEvent) -> Option<RequestPlan> {
        thin(config).then(|| RequestPlan::get(format!("/objects/{}", event.id)))
    }

    fn fetch_result(_config: &serde_json::Value, answer: &Answer) -> Result<Fetched, String> {
        let object: serde_json::Value =
            serde_json::from_slice(&answer.body).map_err(|e| format!("object: {e}"))?;
        Ok(Fetched {
            resource_version: object.get("version").and_then(serde_json::Value::as_u64),
            body: answer.body.clone(),
        })
    }

    fn reconcile_request(
        config: &serde_json::Value,
        since: i64,
        _cursor: Option<&str>,
    ) -> Result<RequestPlan, String> {
        let target = match config.get("reconcile_target").and_then(|t| t.as_str()) {
            Some(target) => target.to_string(),
            None => format!("/events?since={since}"),
        };
        Ok(RequestPlan::get(target))
    }

    fn reconcile_page(
        config: &serde_json::Value,
        _since: i64,
        answer: &Answer,
    ) -> Result<Page, String> {
        let headers: Vec<(String, String)> = answer
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), String::from_utf8_lossy(value).into_owned()))
            .collect();
        let echo = serde_json::json!({
            "config": config,
            "status": answer.status,
            "headers": headers,
            "body": String::from_utf8_lossy(&answer.body),
        });
        let nameless = config.get("reconcile_nameless") == Some(&serde_json::Value::Bool(true));
        // `{"reconcile_id": ID}`: the listed event's id.
        let id = match config.get("reconcile_id").and_then(|id| id.as_str()) {
            Some(id) => id,
            None if nameless => "",
            None => "evt_echo",
        };
        Ok(Page {
            events: vec![RemoteEvent {
                event: Event::new("test.echo").id(id),
                repair: Repair::Store(echo.to_string().into_bytes()),
            }],
            // `{"reconcile_cursor": C}`: every page says the next starts at C.
            next_cursor: config
                .get("reconcile_cursor")
                .and_then(|c| c.as_str())
                .map(str::to_string),
        })
    }
}

hookhost_plugin_sdk::export_provider!(Hostile);
