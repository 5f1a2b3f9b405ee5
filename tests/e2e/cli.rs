//! The `hookhost` binary as a user runs it.

use crate::support::{guest, workspace};
use std::process::Command;

/// Run the `hookhost` binary; (exited 0, stdout, stderr).
pub fn hookhost(args: &[&str]) -> (bool, String, String) {
    hookhost_with(args, &[])
}

/// [`hookhost`] with these environment variables set as well (`RUST_LOG` among them
/// replaces its `warn`).
fn hookhost_with(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hookhost"))
        .args(args)
        .current_dir(workspace())
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .output()
        .expect("run hookhost");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// SIGTERM a served `hookhost`, wait for a clean exit, and hand back its log.
fn terminate(spawned: crate::support::Spawned) -> String {
    let (status, log) = spawned.terminate();
    assert!(status.success(), "exit {status:?}\n{log}");
    log
}

#[test]
fn every_builtin_plugin_passes_its_vectors() {
    let mut files: Vec<String> = Vec::new();
    for name in hookhost::plugins::BUILTIN_NAMES {
        let path = format!("fixtures/vectors/{name}.json");
        let text = std::fs::read_to_string(workspace().join(&path)).expect("vector file");
        let vectors: Vec<serde_json::Value> = serde_json::from_str(&text).expect("json");
        // A plugin without vectors, or without both verdicts, is not proven.
        let count = |o: &str| {
            vectors
                .iter()
                .filter(|v| v["expect"]["outcome"] == o)
                .count()
        };
        assert!(
            count("accept") >= 2 && count("reject") >= 4,
            "{path}: too few vectors"
        );
        assert!(
            vectors.iter().all(|v| v["plugin"] == *name),
            "{path}: a vector for another plugin"
        );
        files.push(path);
    }
    let mut args = vec!["plugin", "test", "--vectors"];
    args.extend(files.iter().map(String::as_str));
    let (ok, stdout, stderr) = hookhost(&args);
    assert!(ok, "{stdout}\n{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.ends_with(" passed, 0 failed"), "{last}");
    let passed: usize = last
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("count");
    assert!(passed >= 5 * 10, "{last}");
}

#[test]
fn a_wrong_expectation_fails_and_json_mode_says_what_was_decided() {
    let dir = tempfile::tempdir().expect("dir");
    let vectors = r#"[{
        "name": "github docs example, expected wrongly",
        "plugin": "github",
        "source": "docs.github.com validating webhook deliveries",
        "request": {"method": "POST", "url": "https://h.example/webhooks/gh",
                    "headers": [["X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"],
                                ["X-GitHub-Event", "ping"], ["X-GitHub-Delivery", "d1"]],
                    "body": "Hello, World!"},
        "secrets": ["It's a Secret to Everybody"],
        "now": 1700000000,
        "expect": {"outcome": "reject", "status": 400, "error": "invalid_signature"}
    }]"#;
    let file = dir.path().join("v.json");
    std::fs::write(&file, vectors).expect("write");
    let path = file.display().to_string();
    let (ok, stdout, _) = hookhost(&["plugin", "test", "--vectors", &path]);
    assert!(!ok);
    assert!(
        stdout.contains("FAIL github docs example, expected wrongly: "),
        "{stdout}"
    );
    assert!(
        stdout.trim_end().ends_with("0 passed, 1 failed"),
        "{stdout}"
    );
    let (ok, stdout, _) = hookhost(&["plugin", "test", "--json", "--vectors", &path]);
    assert!(!ok);
    let line: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(line["pass"], false);
    // The signature verified (GitHub's own example); the body is not an event.
    assert_eq!(line["outcome"], "reject");
    assert_eq!(line["error"], "malformed_body");
}

#[test]
fn a_vector_file_with_no_vectors_fails() {
    // A generator that wrote nothing must not pass the check built on its file.
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("empty.json");
    std::fs::write(&file, "[]").expect("write");
    let path = file.display().to_string();
    let (ok, stdout, stderr) = hookhost(&["plugin", "test", "--vectors", &path]);
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains(&format!("{path}: no vectors: the array is empty")),
        "{stderr}"
    );
}

#[test]
fn a_malformed_vector_file_names_the_file_the_line_the_element_and_the_field() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("bad.json");
    std::fs::write(
        &file,
        r#"[{"name": "no source", "plugin": "stripe",
             "request": {"method": "POST", "url": "https://x", "headers": [], "body": ""},
             "secrets": ["s"], "now": 1, "expect": {"outcome": "accept"}}]"#,
    )
    .expect("write");
    let path = file.display().to_string();
    let (ok, _, stderr) = hookhost(&["plugin", "test", "--vectors", &path]);
    assert!(!ok);
    assert!(
        stderr.contains(&format!(
            "{path}:3: element 0 (\"no source\"): missing field `source`"
        )),
        "{stderr}"
    );
    // A field deep in the vector is named by its path; a check that could never be
    // made (an event expected of a refusal, a handshake answer with nothing to compare)
    // is refused, not passed over.
    let request = r#""request": {"method": "POST", "url": "https://x", "headers": [], "body": ""}"#;
    // The line is where the error is found: a field's own, or the vector's first.
    for (expect, says) in [
        (
            r#"{"outcome": "reject", "status": "401"}"#,
            "2: element 0 (\"v\"): expect.status: invalid type: string \"401\", expected u16",
        ),
        (
            r#"{"outcome": "reject", "error": "invalid_signature", "event": {"disposition": "ignore"}}"#,
            "1: element 0 (\"v\"): expect.event: only for \"accept\"",
        ),
        (
            r#"{"outcome": "accept", "error": "x"}"#,
            "1: element 0 (\"v\"): expect.error: only for \"reject\"",
        ),
        (
            r#"{"outcome": "accept", "response": {"status": 200}}"#,
            "1: element 0 (\"v\"): expect.response: exactly one of body and json",
        ),
        (
            r#"{"outcome": "accept", "response": {"status": 200, "text": "ok"}}"#,
            "2: element 0 (\"v\"): expect.response.text: unknown field `text`",
        ),
        (
            r#"{"outcome": "accept", "response": {"status": 200, "body": "ok"}, "event": {"type": "x"}}"#,
            "1: element 0 (\"v\"): expect.event: not with expect.response (a handshake answer is not stored as an event)",
        ),
        (
            r#"{"outcome": "accept", "response": {"status": 200, "body": "ok"}, "secret_index": 1}"#,
            "1: element 0 (\"v\"): expect.secret_index: not with expect.response (a handshake answer is not stored as an event)",
        ),
    ] {
        let text = format!(
            r#"[{{"name": "v", "plugin": "stripe", "source": "s", {request},
                 "secrets": ["s"], "now": 1, "expect": {expect}}}]"#
        );
        std::fs::write(&file, text).expect("write");
        let (ok, _, stderr) = hookhost(&["plugin", "test", "--vectors", &path]);
        assert!(!ok, "{expect}");
        assert!(
            stderr.contains(&format!("{path}:{says}")),
            "{expect}: {stderr}"
        );
    }
    let text = r#"[{"name": "v", "plugin": "stripe", "source": "s",
             "request": {"method": "POST", "url": "https://x", "headers": [], "body_base64": "no!"},
             "secrets": ["s"], "now": 1, "expect": {"outcome": "accept"}}]"#;
    std::fs::write(&file, text).expect("write");
    let (ok, _, stderr) = hookhost(&["plugin", "test", "--vectors", &path]);
    assert!(!ok);
    assert!(
        stderr.contains(&format!(
            "{path}:1: element 0 (\"v\"): request.body_base64: "
        )),
        "{stderr}"
    );
    // Without a secret a rejection would pass whatever the plugin planned.
    let text = format!(
        r#"[{{"name": "v", "plugin": "stripe", "source": "s", {request}, "secrets": [],
             "now": 1, "expect": {{"outcome": "reject", "error": "invalid_signature"}}}}]"#
    );
    std::fs::write(&file, text).expect("write");
    let (ok, _, stderr) = hookhost(&["plugin", "test", "--vectors", &path]);
    assert!(!ok);
    assert!(
        stderr.contains(&format!(
            "{path}:1: element 0 (\"v\"): secrets: at least one is required"
        )),
        "{stderr}"
    );
}

#[test]
fn a_vector_no_live_endpoint_could_judge_is_refused_where_it_is_written() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("v.json");
    let path = file.display().to_string();
    // The second element starts on line 4 of the file; `fields` and `expect` go on
    // line 6, the element's third.
    let refused = |method: &str, fields: &str, expect: &str| {
        let text = format!(
            r#"[
  {{"name": "fine", "plugin": "stripe", "source": "s", "secrets": ["whsec_x"], "now": 1,
   "request": {{"method": "POST", "url": "https://x", "headers": [], "body": ""}}, "expect": {{"outcome": "reject"}}}},
  {{"name": "v", "plugin": "stripe", "source": "s",
   "request": {{"method": "{method}", "url": "https://x", "headers": [], "body": ""}},
   {fields}, "expect": {expect}}}
]"#
        );
        std::fs::write(&file, text).expect("write");
        let (ok, stdout, stderr) = hookhost(&["plugin", "test", "--vectors", &path]);
        assert!(!ok, "{stdout}");
        stderr
    };
    let secrets = r#""secrets": ["whsec_x"], "now": 1"#;
    let reject = r#"{"outcome": "reject"}"#;
    for (method, fields, expect, says) in [
        // The receiver answers 405 before any plugin sees these.
        (
            "PUT",
            secrets,
            reject,
            "4: element 1 (\"v\"): request.method: \"PUT\": the receiver answers only POST and GET",
        ),
        (
            "get",
            secrets,
            reject,
            "4: element 1 (\"v\"): request.method: \"get\": ",
        ),
        // What an endpoint cannot be configured with.
        (
            "GET",
            r#""secrets": ["whsec_x"], "now": 1, "handshake_token": """#,
            reject,
            "4: element 1 (\"v\"): handshake_token: empty",
        ),
        (
            "POST",
            r#""secrets": ["whsec_x", ""], "now": 1"#,
            reject,
            "4: element 1 (\"v\"): secrets[1]: the secret is empty",
        ),
        (
            "POST",
            r#""secrets": ["whsec_x"], "now": 1, "tolerance_seconds": 0"#,
            reject,
            "4: element 1 (\"v\"): tolerance_seconds: must be at least 1 second",
        ),
        (
            "POST",
            r#""secrets": ["whsec_x"], "now": 1, "plugin_config": {"tolerence": 5}"#,
            reject,
            "4: element 1 (\"v\"): plugin_config",
        ),
        // A key given twice: its author reads one value, a parser keeps the other.
        (
            "POST",
            r#""secrets": ["whsec_x"], "now": 1, "now": 2"#,
            reject,
            "6: element 1 (\"v\"): key \"now\" is given twice",
        ),
        (
            "POST",
            secrets,
            r#"{"outcome": "reject", "error": "invalid_signature", "error": "malformed_body"}"#,
            "6: element 1 (\"v\"): expect: key \"error\" is given twice",
        ),
        (
            "POST",
            r#""secrets": ["whsec_x"], "now": 1, "plugin_config": {"a": 1, "a": 2}"#,
            reject,
            "6: element 1 (\"v\"): plugin_config: key \"a\" is given twice",
        ),
    ] {
        let stderr = refused(method, fields, expect);
        assert!(
            stderr.contains(&format!("{path}:{says}")),
            "{fields} {expect}: {stderr}"
        );
    }
}

#[test]
fn a_plugin_that_fails_is_never_a_rejection() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::copy(guest("hostile"), dir.path().join("hostile.wasm")).expect("copy");
    let file = dir.path().join("v.json");
    std::fs::write(
        &file,
        r#"[{"name": "traps", "plugin": "hostile.wasm", "source": "s", "secrets": ["s"],
             "now": 1, "plugin_config": {"mode": "trap"},
             "request": {"method": "POST", "url": "https://x", "headers": [], "body": "{}"},
             "expect": {"outcome": "reject"}},
            {"name": "spins checking", "plugin": "hostile.wasm", "source": "s", "secrets": ["s"],
             "now": 1, "plugin_config": {"check": "loop"},
             "request": {"method": "POST", "url": "https://x", "headers": [], "body": "{}"},
             "expect": {"outcome": "reject"}}]"#,
    )
    .expect("write");
    let path = file.display().to_string();
    let (ok, stdout, _) = hookhost(&["plugin", "test", "--vectors", &path]);
    assert!(!ok, "{stdout}");
    assert!(
        stdout.contains("FAIL traps: outcome: expected reject, got failed (500 plugin_failed)"),
        "{stdout}"
    );
    // Failing to check the vector's configuration is the plugin's failure, not the
    // file's mistake: the vector fails, and the file's other vectors are judged.
    assert!(
        stdout.contains("FAIL spins checking: plugin_config: plugin hostile failed checking it: "),
        "{stdout}"
    );
    assert!(stdout.contains("0 passed, 2 failed"), "{stdout}");
}

#[test]
fn plugin_list_and_inspect_describe_the_builtins() {
    let (ok, stdout, stderr) = hookhost(&["plugin", "list"]);
    assert!(ok, "{stderr}");
    // Every built-in, with its algorithms and contract version.
    for name in hookhost::plugins::BUILTIN_NAMES {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("{name} ")) && l.ends_with("built-in")),
            "{name}: {stdout}"
        );
    }
    for (name, algorithm) in [
        ("stripe", "hmac-sha256"),
        ("sendgrid", "ecdsa-p256-sha256"),
        ("gitlab", "token"),
        ("discord", "ed25519"),
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_default();
        assert!(
            line.contains(algorithm) && line.contains(" 0.2.0 "),
            "{name}: {line}"
        );
    }
    let (ok, stdout, stderr) = hookhost(&["plugin", "inspect", "stripe"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("name:              stripe"), "{stdout}");
    assert!(stdout.contains("timestamp window:  ±300 s"), "{stdout}");
    assert!(
        stdout.contains("key formats:       raw (the secret's UTF-8 bytes)"),
        "{stdout}"
    );
    let hostile = crate::support::guest("hostile").display().to_string();
    let (ok, stdout, stderr) = hookhost(&["plugin", "inspect", &hostile]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains(&format!("origin:            {hostile}")),
        "{stdout}"
    );
    let (ok, _, stderr) = hookhost(&["plugin", "inspect", "no-such-plugin"]);
    assert!(!ok);
    assert!(
        stderr.contains("no built-in plugin \"no-such-plugin\""),
        "{stderr}"
    );
}

#[test]
fn a_rust_log_that_does_not_parse_is_reported_and_info_kept() {
    let dir = tempfile::tempdir().expect("dir");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    // Started once `hookhost listening` is logged, an info line: info is in force.
    let served = runtime.block_on(crate::support::Process::start_with_log(
        dir.path(),
        "hookhost",
        "[[endpoint]]\nid = \"stripe\"\nplugin = \"stripe\"\nsecrets = [\"whsec_test\"]\n",
        "warn,hookhost=loud",
    ));
    let (status, log) = served.terminate();
    assert!(status.success(), "exit {status:?}\n{log}");
    let line = log
        .lines()
        .find(|l| l.starts_with("hookhost: RUST_LOG="))
        .unwrap_or_else(|| panic!("no RUST_LOG line: {log}"));
    assert!(line.contains("\"warn,hookhost=loud\""), "{line}");
    assert!(line.ends_with("logging at info"), "{line}");

    // Directives that parse are used without a word.
    let (ok, _, stderr) = hookhost_with(
        &["plugin", "list"],
        &[(
            "RUST_LOG",
            "warn,hookhost[ingest{endpoint=stripe}]=debug".as_ref(),
        )],
    );
    assert!(ok && !stderr.contains("RUST_LOG"), "{stderr}");
}

/// A file endpoint whose destination timeout the lease would cut is served, with a
/// warning at start naming the endpoint and both figures; one under the cut is not.
#[test]
fn serve_warns_of_a_destination_timeout_the_lease_cuts() {
    let dir = tempfile::tempdir().expect("dir");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let endpoint = |id: &str, timeout_ms: u64| {
        format!(
            "[[endpoint]]\nid = \"{id}\"\nplugin = \"stripe\"\nsecrets = [\"whsec_test\"]\n\
             [endpoint.destination]\nurl = \"http://127.0.0.1:9/hook\"\n\
             secret = \"whsec_c3BlYy1kZXN0aW5hdGlvbg==\"\ntimeout_ms = {timeout_ms}\n"
        )
    };
    let config = format!(
        "[delivery]\nlease_seconds = 4\n{}{}",
        endpoint("slow", 3_000),
        endpoint("quick", 2_999)
    );
    let served = runtime.block_on(crate::support::Process::start(
        dir.path(),
        "hookhost",
        &config,
    ));
    let (status, log) = served.terminate();
    assert!(status.success(), "exit {status:?}\n{log}");
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("destination.timeout_ms"))
        .collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(
        warned[0].contains("WARN") && warned[0].contains("slow"),
        "{log}"
    );
    assert!(
        warned[0].contains("3000 ms is not under 3000 ms")
            && warned[0].contains("delivery.lease_seconds (4 s)"),
        "{log}"
    );
}

#[test]
fn serve_refuses_a_bad_config_naming_file_key_and_reason() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[[endpoint]]\nid = \"s\"\nplugin = \"stripe\"\nsecrets = [\"env:HOOKHOST_TEST_UNSET_SECRET\"]\n")
        .expect("write");
    let path = file.display().to_string();
    let (ok, _, stderr) = hookhost(&["serve", "--config", &path]);
    assert!(!ok);
    assert!(
        stderr.contains(&format!(
            "{path}: endpoint[0] (id \"s\").secrets[0]: environment variable HOOKHOST_TEST_UNSET_SECRET is not set"
        )),
        "{stderr}"
    );
    // Checks that need the plugin name the line too: the key's, or the endpoint's.
    std::fs::write(
        &file,
        "[[endpoint]]\nid = \"ok\"\nplugin = \"stripe\"\nsecrets = [\"x\"]\n\
         [[endpoint]]\nid = \"s\"\nplugin = \"strype\"\nsecrets = [\"x\"]\n",
    )
    .expect("write");
    let (ok, _, stderr) = hookhost(&["serve", "--config", &path]);
    assert!(!ok);
    assert!(
        stderr.contains("endpoint \"s\": unknown plugin \"strype\""),
        "{stderr}"
    );
    assert!(stderr.contains(") (line 5)"), "{stderr}");
    // A window of no time would refuse every request not signed in the same second.
    std::fs::write(
        &file,
        "[[endpoint]]\nid = \"s\"\nplugin = \"stripe\"\nsecrets = [\"x\"]\ntolerance = 0\n",
    )
    .expect("write");
    let (ok, _, stderr) = hookhost(&["serve", "--config", &path]);
    assert!(!ok);
    assert!(
        stderr.contains("endpoint \"s\": tolerance: must be at least 1 second"),
        "{stderr}"
    );
    assert!(stderr.contains("same second) (line 5)"), "{stderr}");
}

#[test]
fn serve_runs_logs_plugin_stderr_capped_and_stops_cleanly_on_sigterm() {
    use crate::support::{guest_headers, now, stripe_event, stripe_headers};
    let dir = tempfile::tempdir().expect("dir");
    std::fs::create_dir(dir.path().join("plugins")).expect("mkdir");
    std::fs::copy(guest("hostile"), dir.path().join("plugins/hostile.wasm")).expect("copy");
    let config = dir.path().join("hookhost.toml");
    std::fs::write(
        &config,
        "listen = \"127.0.0.1:0\"\nplugins_dir = \"plugins\"\n\
         [[endpoint]]\nid = \"stripe\"\nplugin = \"stripe\"\nsecrets = [\"file:stripe.secret\"]\n\
         [[endpoint]]\nid = \"noisy\"\nplugin = \"hostile\"\nsecrets = [\"s\"]\n[endpoint.config]\nmode = \"stderr\"\n",
    )
    .expect("config");
    std::fs::write(dir.path().join("stripe.secret"), "whsec_from_file\n").expect("secret");
    let spawned = crate::support::Spawned::spawn(
        Command::new(env!("CARGO_BIN_EXE_hookhost"))
            .args(["serve", "--config"])
            .arg(&config)
            .env("RUST_LOG", "info"),
    );
    let log = &spawned.log;

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let addr = log
            .bound("hookhost listening", std::time::Duration::from_secs(30))
            .await;
        let t = now();
        let body = stripe_event("evt_bin", "invoice.paid", "in_9", t);
        let headers = stripe_headers(&["whsec_from_file"], t, &body);
        let (status, answer) =
            crate::support::request(addr, "POST", "/webhooks/stripe", &headers, body.into()).await;
        assert_eq!(
            (status, answer["status"].as_str()),
            (200, Some("accepted")),
            "{answer}"
        );
        let (status, _) = crate::support::request(
            addr,
            "POST",
            "/webhooks/noisy",
            &guest_headers("s", "n1", b"{}"),
            "{}".into(),
        )
        .await;
        assert_eq!(status, 200);
    });

    let log = terminate(spawned);
    assert!(log.contains("shutting down"), "{log}");
    // The plugin's stderr reached the log, capped at 2 KiB (it wrote ~30 KiB).
    let line = log
        .lines()
        .find(|l| l.contains("plugin wrote to stderr"))
        .expect("stderr logged");
    assert!(line.contains("hostile guest writes to stderr"), "{line}");
    assert!(line.len() < 4 * 1024, "{} bytes", line.len());
    // On that one line: the plugin's newlines are escaped, never lines of their own.
    assert!(line.contains(r"stderr\nhostile guest writes"), "{line}");
    assert!(
        !log.lines().any(|l| l.starts_with("hostile guest")),
        "{log}"
    );
    assert!(!log.contains("whsec_from_file"), "a secret reached the log");
    assert!(dir.path().join("hookhost.db").is_file());
}

#[test]
fn compiled_plugins_are_cached_between_runs_unless_turned_off() {
    let run = |cache: &std::path::Path| {
        let (ok, stdout, stderr) = hookhost_with(
            &["plugin", "list"],
            &[("HOOKHOST_CACHE_DIR", cache.as_os_str())],
        );
        assert!(ok, "{stderr}");
        stdout
    };
    // Compiled entries (the cache's worker also keeps `.stats` usage files beside them).
    let files = |dir: &std::path::Path| {
        walk(dir)
            .into_iter()
            .filter(|p| p.is_file() && p.extension().is_none_or(|e| e != "stats"))
            .count()
    };
    let dir = tempfile::tempdir().expect("dir");
    let cache = dir.path().join("cache");
    let first = run(&cache);
    let cached = files(&cache);
    assert!(
        cached >= crate::support::builtin_count(),
        "{cached} cache files for the built-ins"
    );
    // The second run loads what the first compiled, and says the same.
    assert_eq!(run(&cache), first);
    assert_eq!(files(&cache), cached, "nothing was compiled again");
    let off = dir.path().join("off");
    std::fs::create_dir(&off).expect("mkdir");
    let uncached = Command::new(env!("CARGO_BIN_EXE_hookhost"))
        .args(["plugin", "list"])
        .current_dir(&off)
        .env("HOOKHOST_CACHE_DIR", "off")
        .output()
        .expect("run hookhost");
    let stderr = String::from_utf8_lossy(&uncached.stderr);
    assert!(uncached.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&uncached.stdout), first);
    assert_eq!(files(&off), 0);
}

#[test]
fn the_compiled_plugin_cache_keeps_within_hookhost_cache_bytes() {
    let dir = tempfile::tempdir().expect("dir");
    let compiled = |dir: &std::path::Path| -> Vec<u64> {
        walk(dir)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
            .map(|p| std::fs::metadata(&p).expect("entry").len())
            .collect()
    };
    // Every built-in is compiled and written; past the bound the least recently used
    // go, so what stays fits in it.
    let bound: u64 = 2 << 20;
    let cache = dir.path().join("bounded");
    let (ok, listed, stderr) = hookhost_with(
        &["plugin", "list"],
        &[
            ("HOOKHOST_CACHE_DIR", cache.as_os_str()),
            ("HOOKHOST_CACHE_BYTES", bound.to_string().as_ref()),
        ],
    );
    assert!(ok, "{stderr}");
    let kept = compiled(&cache);
    let total: u64 = kept.iter().sum();
    assert!(
        !kept.is_empty() && total <= bound,
        "{} entries, {total} bytes, for a bound of {bound}",
        kept.len()
    );
    assert!(
        kept.len() < crate::support::builtin_count(),
        "all {} built-ins stayed in {total} bytes: the bound was not applied",
        kept.len()
    );
    assert!(listed.contains("stripe"), "{listed}");

    // A value that is not a whole number of bytes from 1 MiB stops the command before
    // it does anything, naming the variable.
    let untouched = dir.path().join("untouched");
    for bad in ["512MiB", "", "1048575", "-1"] {
        let (ok, stdout, stderr) = hookhost_with(
            &["plugin", "list"],
            &[
                ("HOOKHOST_CACHE_DIR", untouched.as_os_str()),
                ("HOOKHOST_CACHE_BYTES", bad.as_ref()),
            ],
        );
        assert!(!ok, "{bad:?} was taken: {stdout}");
        assert!(
            stderr.starts_with(&format!(
                "hookhost: HOOKHOST_CACHE_BYTES={bad:?}: must be a whole number of bytes"
            )),
            "{bad:?}: {stderr}"
        );
        assert_eq!(stdout, "", "{bad:?}");
        assert!(!untouched.exists(), "{bad:?}: the cache was opened");
    }
}

#[test]
fn the_binary_compiles_plugins_in_child_processes() {
    const COMPILED: &str = "plugin compiled in a child process";
    let dir = tempfile::tempdir().expect("dir");
    let run = |args: &[&str], cache: &std::path::Path| {
        let (ok, stdout, stderr) = hookhost_with(
            args,
            &[
                ("HOOKHOST_CACHE_DIR", cache.as_os_str()),
                (
                    "RUST_LOG",
                    "warn,hookhost::plugins::compiler=debug".as_ref(),
                ),
            ],
        );
        assert!(
            !stderr.contains("compiling them in this one"),
            "a child could not run: {stderr}"
        );
        (ok, stdout, stderr)
    };
    let children = |stderr: &str| stderr.lines().filter(|l| l.contains(COMPILED)).count();

    // On an empty cache, each built-in is compiled by a child of its own.
    let cache = dir.path().join("cache");
    let (ok, stdout, stderr) = run(&["plugin", "inspect", "stripe"], &cache);
    assert!(
        ok && stdout.contains("name:              stripe"),
        "{stderr}"
    );
    assert_eq!(
        children(&stderr),
        hookhost::plugins::BUILTIN_NAMES.len(),
        "{stderr}"
    );
    // Loaded from the cache the next time: no child.
    let (ok, _, stderr) = run(&["plugin", "inspect", "stripe"], &cache);
    assert!(ok, "{stderr}");
    assert_eq!(children(&stderr), 0, "{stderr}");

    // A drop-in goes to its child's stdin, with the cache or without one.
    let hostile = crate::support::guest("hostile").display().to_string();
    for cache in [dir.path().join("drop-in"), "off".into()] {
        let (ok, stdout, stderr) = run(&["plugin", "inspect", &hostile], &cache);
        assert!(ok, "{stderr}");
        assert!(stdout.contains(&format!("origin:            {hostile}")));
        assert_eq!(children(&stderr), 1, "{stderr}");
    }

    // What does not compile is refused in the child's words, naming the file.
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"definitely not wasm").expect("write");
    let (ok, _, stderr) = run(&["plugin", "inspect", &junk.display().to_string()], &cache);
    assert!(!ok);
    assert!(
        stderr.contains(&format!(
            "{}: not a valid component: failed to parse WebAssembly module",
            junk.display()
        )),
        "{stderr}"
    );

    // A child compiles only for the engine it is asked for: its code must load there.
    let (ok, _, stderr) = run(
        &["__compile-plugin", "--engine", "0000000000000000"],
        &cache,
    );
    assert!(!ok);
    assert!(
        stderr.contains("is not the one asked for (0000000000000000)"),
        "{stderr}"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                found.extend(walk(&path));
            }
            found.push(path);
        }
    }
    found
}

/// At the most verbose level, in JSON, the log of a server that verified, refused and
/// delivered events holds no secret, no signature and no credential the sender sent,
/// and each line about a request or a delivery names its endpoint, plugin, event id
/// and event type. The admin API shows the event with its signature redacted.
#[test]
fn logs_never_hold_a_secret_a_signature_or_a_credential() {
    use crate::support::{now, stripe_event, stripe_headers};
    const ENDPOINT_SECRET: &str = "whsec_logtest_endpoint_secret";
    const DESTINATION_SECRET: &str = "whsec_bG9ndGVzdC1kZXN0aW5hdGlvbi1rZXktMDAwMDAwMA==";
    const ADMIN_TOKEN: &str = "logtest-admin-token-7f3a";
    const SENDER_CREDENTIAL: &str = "Bearer sender-credential-91c2";
    const OPERATOR_TOKEN: &str = "logtest-operator-token-44d1";
    // 32 bytes, base64.
    const MASTER_KEY: &str = "bG9ndGVzdC1tYXN0ZXIta2V5LTMyLWJ5dGVzLTAwMDA=";
    const TENANT_SECRET: &str = "whsec_logtest_tenant_secret";
    let dir = tempfile::tempdir().expect("dir");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    // The destination: answers 200 to everything.
    let downstream = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let app = axum::Router::new().fallback(|| async { "ok" });
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    });
    std::fs::write(dir.path().join("stripe.secret"), ENDPOINT_SECRET).expect("secret");
    std::fs::write(dir.path().join("destination.secret"), DESTINATION_SECRET).expect("secret");
    std::fs::write(dir.path().join("admin.token"), ADMIN_TOKEN).expect("token");
    std::fs::write(dir.path().join("operator.token"), OPERATOR_TOKEN).expect("token");
    std::fs::write(dir.path().join("master.key"), MASTER_KEY).expect("key");
    let config = dir.path().join("hookhost.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
             admin_token = \"file:admin.token\"\n\
             [tenancy]\noperator_token = \"file:operator.token\"\nmaster_key = \"file:master.key\"\n\
             [delivery]\npoll_ms = 20\n\
             [[endpoint]]\nid = \"stripe\"\nplugin = \"stripe\"\nsecrets = [\"file:stripe.secret\"]\n\
             [endpoint.destination]\nurl = \"http://{downstream}/hook\"\nsecret = \"file:destination.secret\"\n"
        ),
    )
    .expect("config");
    let spawned = crate::support::Spawned::spawn(
        Command::new(env!("CARGO_BIN_EXE_hookhost"))
            .args(["--log-json", "serve", "--config"])
            .arg(&config)
            .current_dir(dir.path())
            .env(
                "RUST_LOG",
                "trace,hyper=info,h2=info,sqlx=info,wasmtime=info,cranelift=info",
            ),
    );
    let log = &spawned.log;

    let mut signatures = Vec::new();
    // The tenant token, known once issued.
    let mut forbidden_later = Vec::new();
    runtime.block_on(async {
        let within = std::time::Duration::from_secs(30);
        // The admin API is bound and logged first.
        let admin = log.bound("admin API listening", within).await;
        let addr = log.bound("hookhost listening", within).await;
        let t = now();
        for (id, secret, status) in [
            ("evt_log_ok", ENDPOINT_SECRET, 200),
            ("evt_log_forged", "whsec_not_the_secret", 400),
        ] {
            let body = stripe_event(id, "invoice.paid", "in_log", t);
            let mut headers = stripe_headers(&[secret], t, &body);
            signatures.push(headers[0].1.clone());
            headers.push(("authorization", SENDER_CREDENTIAL.to_string()));
            headers.push(("x-webhook-secret", SENDER_CREDENTIAL.to_string()));
            let (got, answer) =
                crate::support::request(addr, "POST", "/webhooks/stripe", &headers, body.into())
                    .await;
            assert_eq!(got, status, "{id}: {answer}");
        }
        // Delivered, then the operator looks at it.
        let bearer = [("authorization", format!("Bearer {ADMIN_TOKEN}"))];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let (_, shown) = crate::support::request(
                admin,
                "GET",
                "/admin/events/stripe/evt_log_ok",
                &bearer,
                Default::default(),
            )
            .await;
            if shown["state"] == "delivered" {
                // The API shows the stored headers, the signature's value redacted.
                let headers = shown["headers"].as_array().expect("headers");
                let signature = headers
                    .iter()
                    .find(|h| h[0] == "stripe-signature")
                    .expect("stripe-signature kept");
                assert_eq!(signature[1], "[redacted]", "{shown}");
                assert!(
                    headers
                        .iter()
                        .all(|h| h[0] != "authorization" && h[0] != "x-webhook-secret"),
                    "the sender's credentials are not stored: {shown}"
                );
                assert!(
                    headers
                        .iter()
                        .any(|h| h[0] == "content-type" && h[1] != "[redacted]"),
                    "other headers are shown: {shown}"
                );
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "not delivered: {shown}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let (status, _) =
            crate::support::request(admin, "GET", "/metrics", &bearer, Default::default()).await;
        assert_eq!(status, 200);
        // The forged request is kept for forensics (written off the request path),
        // shown with its signature header but without the signature.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let id = loop {
            let (status, kept) = crate::support::request(
                admin,
                "GET",
                "/admin/forensics",
                &bearer,
                Default::default(),
            )
            .await;
            assert_eq!(status, 200, "{kept}");
            if let Some(id) = kept.get(0).map(|k| k["id"].clone()) {
                break id;
            }
            assert!(std::time::Instant::now() < deadline, "nothing kept");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        let (status, shown) = crate::support::request(
            admin,
            "GET",
            &format!("/admin/forensics/{id}"),
            &bearer,
            Default::default(),
        )
        .await;
        assert_eq!(status, 200, "{shown}");
        let text = shown.to_string();
        assert!(text.contains("stripe-signature"), "{text}");
        for signature in &signatures {
            let v1 = signature.split("v1=").nth(1).expect("v1");
            assert!(!text.contains(v1), "a signature in {text}");
        }
        // A tenant, its token, an endpoint with its secret, a request to it.
        let json = |token: &str| {
            [
                ("authorization", format!("Bearer {token}")),
                ("content-type", "application/json".to_string()),
            ]
        };
        let body = serde_json::json!({"id": "logt", "name": "Log test"}).to_string();
        let (status, _) = crate::support::request(
            admin,
            "POST",
            "/v1/tenants",
            &json(OPERATOR_TOKEN),
            body.into(),
        )
        .await;
        assert_eq!(status, 201);
        let (_, issued) = crate::support::request(
            admin,
            "POST",
            "/v1/tenants/logt/tokens",
            &json(OPERATOR_TOKEN),
            Default::default(),
        )
        .await;
        let token = issued["token"].as_str().expect("token").to_string();
        let new = serde_json::json!({"name": "shop", "plugin": "stripe", "secret": TENANT_SECRET})
            .to_string();
        let (status, created) =
            crate::support::request(admin, "POST", "/v1/endpoints", &json(&token), new.into())
                .await;
        assert_eq!(status, 201, "{created}");
        let body = stripe_event("evt_log_tenant", "invoice.paid", "in_log", t);
        let headers = stripe_headers(&[TENANT_SECRET], t, &body);
        signatures.push(headers[0].1.clone());
        let (got, _) =
            crate::support::request(addr, "POST", "/webhooks/logt.shop", &headers, body.into())
                .await;
        assert_eq!(got, 200);
        let (status, secrets) = crate::support::request(
            admin,
            "GET",
            "/v1/endpoints/logt.shop/secrets",
            &json(&token),
            Default::default(),
        )
        .await;
        assert_eq!(status, 200, "{secrets}");
        assert_eq!(secrets.as_array().map(Vec::len), Some(1), "{secrets}");
        assert!(!secrets.to_string().contains(TENANT_SECRET), "{secrets}");
        forbidden_later.push(token);
    });

    let log = terminate(spawned);
    let mut forbidden = vec![
        OPERATOR_TOKEN.to_string(),
        MASTER_KEY.to_string(),
        TENANT_SECRET.to_string(),
        ENDPOINT_SECRET.to_string(),
        DESTINATION_SECRET.to_string(),
        DESTINATION_SECRET.trim_start_matches("whsec_").to_string(),
        ADMIN_TOKEN.to_string(),
        SENDER_CREDENTIAL.to_string(),
        "sender-credential-91c2".to_string(),
    ];
    forbidden.extend(forbidden_later);
    for header in &signatures {
        // `t=…,v1=<hex>`: each signature value on its own.
        forbidden.extend(
            header
                .split(',')
                .filter_map(|part| part.strip_prefix("v1="))
                .map(str::to_string),
        );
    }
    for needle in &forbidden {
        assert!(!log.contains(needle.as_str()), "{needle:?} reached the log");
    }
    // Every line is JSON; the request's and the delivery's lines name what they are about.
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    for message in ["received", "delivery attempt"] {
        let line = lines
            .iter()
            .find(|l| l["fields"]["message"] == message)
            .unwrap_or_else(|| panic!("no {message:?} line in\n{log}"));
        let span = &line["span"];
        for (field, want) in [
            ("endpoint", "stripe"),
            ("plugin", "stripe"),
            ("event_id", "evt_log_ok"),
            ("event_type", "invoice.paid"),
        ] {
            assert_eq!(span[field], want, "{message}: {field} in {line}");
        }
    }
}

/// `hookhost spec` prints each endpoint's contract as configured: two endpoints with
/// other settings give other specs, a changed configuration changes the spec, and once
/// a request is stored the scheme shows what was signed and where the signature came,
/// never its value.
#[test]
fn spec_follows_the_configuration_and_the_stored_requests() {
    use crate::support::{Server, now, stripe_event, stripe_headers};
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let config = |tolerance: u32, schedule: &str, previous: bool| {
        format!(
            "[[endpoint]]\nid = \"stripe\"\nplugin = \"stripe\"\n\
             secrets = [\"whsec_spec_current\"{}]\ntolerance = {tolerance}\n\
             retry_schedule_seconds = {schedule}\n\
             [endpoint.destination]\nurl = \"http://127.0.0.1:9/hook\"\nsecret = \"whsec_c3BlYy1kZXN0aW5hdGlvbg==\"\n\
             {}\
             [[endpoint]]\nid = \"github\"\nplugin = \"github\"\nsecrets = [\"gh-spec-secret\"]\n",
            if previous {
                ", \"whsec_spec_previous\""
            } else {
                ""
            },
            // The changed configuration reconciles Stripe every hour.
            if previous {
                ""
            } else {
                "[endpoint.reconcile]\ncredential = \"sk_spec\"\nevery_seconds = 3600\n"
            }
        )
    };
    let server = runtime.block_on(Server::start(&config(120, "[0, 60]", true)));
    let path = server.config_path();
    let spec = |endpoint: &str| {
        let (ok, out, err) = hookhost(&["spec", "--config", &path, "--endpoint", endpoint]);
        assert!(ok, "spec {endpoint}: {err}");
        out
    };

    let stripe = spec("stripe");
    for line in [
        "# Endpoint `stripe`",
        "- provider: Stripe",
        "- algorithm: HMAC-SHA256",
        "- active secrets: 2",
        "- signed timestamp within ±120 s of arrival (this endpoint's setting)",
        "- to `http://127.0.0.1:9/hook`",
        "- attempts after: 0 s, 1 min (2 in all)",
        "- signed string and headers: shown once a request has been stored",
        "| 500 | `plugin_failed` | retry |",
        "- not configured: events that never arrived are not looked for (the plugin can list them: add `[endpoint.reconcile]`)",
    ] {
        assert!(stripe.contains(line), "{line:?} missing from:\n{stripe}");
    }
    let github = spec("github");
    for line in [
        "# Endpoint `github`",
        "- provider: GitHub",
        "- active secrets: 1",
        "- no destination: accepted events wait in the inbox",
        "- not configured: events that never arrived are not looked for\n",
    ] {
        assert!(github.contains(line), "{line:?} missing from:\n{github}");
    }
    assert_ne!(stripe.replace("stripe", "github"), github);

    // A stored request: the plan shows the signed string and the signature's header.
    let t = now();
    let body = stripe_event("evt_spec", "invoice.paid", "in_spec", t);
    let headers = stripe_headers(&["whsec_spec_current"], t, &body);
    let signature = headers[0].1.clone();
    let (status, answer) = runtime.block_on(server.post("stripe", &headers, body));
    assert_eq!(status, 200, "{answer}");
    let stripe = spec("stripe");
    for line in [
        format!(
            "- signed string (as planned for the latest stored event, `evt_spec`): `{t}.` + ‹raw body›"
        ),
        "- signature header: `stripe-signature`".to_string(),
        "- matched in the last 7 days: current, 1 requests".to_string(),
        "- no request in that time matched a previous secret: it may be revoked".to_string(),
    ] {
        assert!(stripe.contains(&line), "{line:?} missing from:\n{stripe}");
    }
    let v1 = signature.split("v1=").nth(1).expect("v1");
    assert!(!stripe.contains(v1), "the signature value is in the spec");
    assert!(!stripe.contains("whsec_spec"), "a secret is in the spec");

    // The configuration changes; so does the spec.
    std::fs::write(&path, config(600, "[0, 30, 3600]", false)).expect("rewrite");
    let changed = spec("stripe");
    for line in [
        "- active secrets: 1",
        "- signed timestamp within ±600 s of arrival (this endpoint's setting)",
        "- attempts after: 0 s, 30 s, 1 h (3 in all)",
        "- lists the provider's events from `https://api.stripe.com`; the credential is sent only there and to `api.stripe.com`",
        "- every 1 h, looking back 1 d; at most 5 requests/s",
    ] {
        assert!(changed.contains(line), "{line:?} missing from:\n{changed}");
    }
    assert!(
        !changed.contains("sk_spec"),
        "the API credential is in the spec"
    );
    runtime.block_on(server.stop());
}

/// Output whose reader has gone (`hookhost plugin list | head -1`, the reader closed
/// before the first line) ends quietly: no panic, and the exit code a reader would
/// have had (vectors that pass: 0).
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    for args in [
        &["plugin", "list"][..],
        &[
            "plugin",
            "test",
            "--vectors",
            "fixtures/vectors/stripe.json",
        ],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hookhost"))
            .args(args)
            .current_dir(workspace())
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run hookhost");
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("hookhost ends");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?}: {stderr}", out.status);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// An operator's command on a store that is not there says so, naming the
/// configuration and the database, and makes no empty store: a configuration pointing
/// elsewhere would otherwise list and replay nothing, with exit 0.
#[test]
fn an_operator_command_on_a_missing_store_names_it_and_makes_none() {
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("hookhost.toml");
    let text = crate::support::stripe_config("store = \"elsewhere.db\"");
    std::fs::write(&config, text).expect("write the configuration");
    let config = config.to_str().expect("a UTF-8 path");
    for args in [
        ["events", "list", "--config", config],
        ["dlq", "replay", "--config", config],
        ["forensics", "list", "--config", config],
    ] {
        let (ok, stdout, stderr) = hookhost(&args);
        assert!(!ok, "{args:?}: {stdout}");
        let says = format!("{config}: store: no database at ");
        assert!(
            stderr.contains(&says) && stderr.contains("elsewhere.db"),
            "{stderr}"
        );
    }
    assert!(
        !dir.path().join("elsewhere.db").exists(),
        "an empty store was made"
    );
}

/// A command that only reads and changes the store runs in a shell without the
/// providers' secrets (they may be given to the receiver alone); a command that runs
/// plugins still needs them, and names the one it could not read.
#[test]
fn store_commands_run_without_the_secrets_and_plugin_commands_name_the_missing_one() {
    const STRIPE: &str = "HOOKHOST_TEST_UNREAD_STRIPE_SECRET";
    const MASTER: &str = "HOOKHOST_TEST_UNREAD_MASTER_KEY";
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("hookhost.toml");
    let text = format!(
        "store = \"hookhost.db\"\nadmin_token = \"env:{MASTER}\"\n\
         [tenancy]\noperator_token = \"env:{MASTER}\"\nmaster_key = \"env:{MASTER}\"\n\
         [[endpoint]]\nid = \"stripe\"\nplugin = \"stripe\"\nsecrets = [\"env:{STRIPE}\"]\n\
         [endpoint.destination]\nurl = \"http://127.0.0.1:9/\"\nsecret = \"env:{STRIPE}\"\n"
    );
    std::fs::write(&config, text).expect("write the configuration");
    let config = config.to_str().expect("a UTF-8 path");
    let stripe = std::ffi::OsStr::new("whsec_c2VjcmV0LWZvci10aGUtdGVzdA==");
    let master = std::ffi::OsStr::new("bG9ndGVzdC1tYXN0ZXIta2V5LTMyLWJ5dGVzLTAwMDA=");
    let (ok, _, stderr) = hookhost_with(
        &["migrate", "--config", config],
        &[(STRIPE, stripe), (MASTER, master)],
    );
    assert!(ok, "{stderr}");

    for (args, says) in [
        (vec!["events", "list", "--config", config], ""),
        (vec!["dlq", "list", "--config", config], ""),
        (vec!["dlq", "replay", "--config", config], "0 replayed"),
        (
            vec!["endpoint", "pause", "--config", config, "stripe"],
            "stripe: delivery paused",
        ),
        (
            vec!["endpoint", "resume", "--config", config, "stripe"],
            "stripe: delivery resumed",
        ),
        (vec!["forensics", "list", "--config", config], ""),
        (vec!["reconcile", "runs", "--config", config], "[]"),
    ] {
        let (ok, stdout, stderr) = hookhost(&args);
        assert!(ok, "{args:?}: {stderr}");
        assert_eq!(stdout.trim(), says, "{args:?}");
    }

    let unread = format!(
        "{config}: endpoint[0] (id \"stripe\").secrets[0]: environment variable {STRIPE} is not set"
    );
    for args in [
        vec!["events", "show", "--config", config, "stripe", "evt_1"],
        vec!["dlq", "replay", "--remap", "--config", config],
        vec!["forensics", "verify", "--config", config, "1"],
    ] {
        let (ok, stdout, stderr) = hookhost(&args);
        assert!(!ok, "{args:?}: {stdout}");
        assert!(stderr.contains(&unread), "{args:?}: {stderr}");
    }
}

/// The receiver is never built from a configuration whose secrets were left unread:
/// it would verify with fewer secrets than the file names.
#[tokio::test]
async fn the_receiver_is_not_built_from_a_configuration_with_an_unread_secret() {
    use hookhost::config::{Config, Secrets};
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookhost.toml");
    let text = "store = \"hookhost.db\"\n[[endpoint]]\nid = \"stripe\"\nplugin = \"stripe\"\n\
                secrets = [\"env:UNREAD\", \"whsec_c2VjcmV0LWZvci10aGUtdGVzdA==\"]\n";
    let config = Config::parse_with(&path, text, &|_| None, Secrets::Deferred).expect("deferred");
    let Err(refused) = hookhost::build(&config).await else {
        panic!("built with one of its two secrets");
    };
    assert!(
        refused
            .to_string()
            .contains("secrets[0]: environment variable UNREAD is not set"),
        "{refused}"
    );
    assert!(
        !dir.path().join("hookhost.db").exists(),
        "a store was opened"
    );
}
