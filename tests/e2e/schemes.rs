//! One live test per algorithm family the contract offers beyond HMAC and Ed25519
//! (covered in `ingest`): ECDSA P-256 (SendGrid), a shared token (GitLab) and
//! secret-prefixed SHA-256 (HubSpot v1). Each replays recorded vectors over real HTTP
//! to a server configured as the vector says, so the live path and `plugin test`
//! are held to the same verdicts. (Only vectors whose verdict does not depend on the
//! clock are used: the server judges at the real time.)

use crate::support::*;
use serde_json::Value;

/// The vector named `name` in `fixtures/vectors/{plugin}.json`.
fn vector(plugin: &str, name: &str) -> Value {
    let path = workspace().join(format!("fixtures/vectors/{plugin}.json"));
    let text = std::fs::read_to_string(&path).expect("vector file");
    let vectors: Vec<Value> = serde_json::from_str(&text).expect("json");
    vectors
        .into_iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("{}: no vector {name:?}", path.display()))
}

/// A server with one endpoint as `v` describes it (id = the URL's last path segment,
/// `public_url` = the URL's origin, so URL-signing schemes see what was signed).
async fn server_for(v: &Value) -> (Server, String) {
    let url = v["request"]["url"].as_str().expect("url");
    let (origin, rest) = url.split_at(url.find("/webhooks/").expect("/webhooks/ path"));
    let id = rest["/webhooks/".len()..]
        .split('?')
        .next()
        .expect("id")
        .to_string();
    let secrets: Vec<String> = v["secrets"]
        .as_array()
        .expect("secrets")
        .iter()
        .map(|s| toml_string(s.as_str().expect("secret")))
        .collect();
    let mut config = format!(
        "public_url = {}\n[[endpoint]]\nid = {}\nplugin = {}\nsecrets = [{}]\n",
        toml_string(origin),
        toml_string(&id),
        toml_string(v["plugin"].as_str().expect("plugin")),
        secrets.join(", ")
    );
    if let Some(table) = v["plugin_config"].as_object() {
        config.push_str("[endpoint.config]\n");
        for (key, value) in table {
            config.push_str(&format!("{key} = {value}\n"));
        }
    }
    (Server::start(&config).await, rest.to_string())
}

fn toml_string(text: &str) -> String {
    serde_json::to_string(text).expect("string")
}

/// POST the vector's request; the answer's status and JSON.
async fn replay(server: &Server, path: &str, v: &Value) -> (u16, Value) {
    let headers: Vec<(String, String)> = v["request"]["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .map(|pair| {
            (
                pair[0].as_str().expect("name").to_string(),
                pair[1].as_str().expect("value").to_string(),
            )
        })
        .collect();
    let headers: Vec<(&str, String)> = headers
        .iter()
        .map(|(n, value)| (n.as_str(), value.clone()))
        .collect();
    let body = match v["request"]["body"].as_str() {
        Some(text) => text.as_bytes().to_vec(),
        None => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(v["request"]["body_base64"].as_str().expect("body"))
                .expect("base64")
        }
    };
    request(server.addr, "POST", path, &headers, body.into()).await
}

/// Replay `accepted` (must be stored under its expected id) and `refused` (must get
/// its expected error) against one server.
async fn live(plugin: &str, accepted: &str, refused: &str) -> Server {
    let good = vector(plugin, accepted);
    let (server, path) = server_for(&good).await;
    let (status, answer) = replay(&server, &path, &good).await;
    assert_eq!(status, 200, "{accepted}: {answer}");
    assert_eq!(answer["status"], "accepted", "{accepted}: {answer}");
    if let Some(id) = good["expect"]["event"]["id"].as_str() {
        assert_eq!(answer["event_id"], id, "{accepted}");
    }
    let (status, answer) = replay(&server, &path, &good).await;
    assert_eq!(
        (status, answer["status"].as_str()),
        (200, Some("duplicate"))
    );
    let bad = vector(plugin, refused);
    let (status, answer) = replay(&server, &path, &bad).await;
    assert_eq!(
        (status, &answer["error"]),
        (
            bad["expect"]["status"].as_u64().unwrap_or(400) as u16,
            &bad["expect"]["error"]
        ),
        "{refused}"
    );
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ecdsa_p256_sendgrid_over_http() {
    live(
        "sendgrid",
        "sendgrid: sendgrid-python test vector (valid signature)",
        "sendgrid: sendgrid-python test vector (bad signature)",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_token_gitlab_over_http_and_the_token_is_not_stored() {
    let server = live(
        "gitlab",
        "gitlab: valid token, merge request event with Idempotency-Key",
        "gitlab: token differing in one character",
    )
    .await;
    let token = vector(
        "gitlab",
        "gitlab: valid token, merge request event with Idempotency-Key",
    )["secrets"][0]
        .as_str()
        .expect("token")
        .to_string();
    let mut db = open_db(&server.db_path()).await;
    let headers: Vec<String> = sqlx::query_scalar("SELECT headers FROM receipts")
        .fetch_all(&mut db)
        .await
        .expect("receipts");
    assert_eq!(headers.len(), 1);
    assert!(!headers[0].contains(&token), "the token was stored");
    assert!(!headers[0].to_ascii_lowercase().contains("x-gitlab-token"));
    // Without its token, the stored request cannot be judged again: a shadow replay
    // says so rather than calling it unchanged.
    let endpoint = server.app.endpoints.get("gitlab-ci").expect("served");
    let report = hookhost::shadow::replay(&server.app, endpoint.clone(), endpoint, 10, None)
        .await
        .expect("shadow");
    assert_eq!(
        (report.requests, report.changed, report.not_judged),
        (1, 0, 1)
    );
    assert!(!report.results[0].judged);
    assert_eq!(report.results[0].current.outcome, "missing_signature");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_prefixed_sha256_hubspot_v1_over_http() {
    live(
        "hubspot",
        "hubspot: v1 docs example, endpoint with legacy_signatures",
        "hubspot: v1 docs example with a one-byte-tampered body",
    )
    .await;
}

/// A token scheme's header carries the secret itself, whatever the header is called
/// and however it is encoded: never stored with the receipt, and redacted in what
/// forensics keeps of a refusal, whether the token matched or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_in_a_header_of_any_name_is_not_stored_or_kept() {
    use base64::Engine as _;
    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let (token, wrong) = ("tok_live_5f1c2a9e", "tok_live_5f1c2a9f");
    let mut config = String::new();
    for (id, encoding) in [("jobs", "text"), ("jobs64", "base64")] {
        config.push_str(&format!(
            "[[endpoint]]\nid = \"{id}\"\nplugin = \"generic\"\nsecrets = [\"{token}\"]\n\
             [endpoint.config]\nalgorithm = \"token\"\n\
             [endpoint.config.signature]\nheader = \"X-Webhook-Token\"\nencoding = \"{encoding}\"\n\
             [endpoint.config.event]\nrequired = [\"id\", \"type\"]\nid = \"{{/id}}\"\ntype = \"{{/type}}\"\n"
        ));
    }
    let server = Server::start(&config).await;
    let post = |endpoint: &str, value: String, id: &str| {
        let headers = [("X-Webhook-Token", value)];
        let body = format!("{{\"id\":\"{id}\",\"type\":\"job.finished\"}}");
        let (addr, path) = (server.addr, format!("/webhooks/{endpoint}"));
        async move { request(addr, "POST", &path, &headers, body.into_bytes().into()).await }
    };
    for (endpoint, good, bad) in [
        ("jobs", token.to_string(), wrong.to_string()),
        ("jobs64", b64(token), b64(wrong)),
    ] {
        let (status, answer) = post(endpoint, good.clone(), "job_1").await;
        assert_eq!(
            (status, answer["status"].as_str()),
            (200, Some("accepted")),
            "{endpoint}: {answer}"
        );
        let (status, answer) = post(endpoint, bad, "job_2").await;
        assert_eq!(
            (status, &answer["error"]),
            (400, &serde_json::json!("invalid_signature")),
            "{endpoint}"
        );
        // Authentic, but naming what cannot be delivered (a newline in its id, JSON
        // `\n`): refused after its token matched, and kept redacted all the same.
        let (status, answer) = post(endpoint, good, "job\\n3").await;
        assert_eq!(
            (status, &answer["error"]),
            (400, &serde_json::json!("malformed_body")),
            "{endpoint}"
        );
    }
    let sent = [token.to_string(), b64(token), wrong.to_string(), b64(wrong)];

    let mut db = open_db(&server.db_path()).await;
    let stored: Vec<String> = sqlx::query_scalar("SELECT headers FROM receipts")
        .fetch_all(&mut db)
        .await
        .expect("receipts");
    assert_eq!(stored.len(), 2);
    for headers in &stored {
        assert!(
            !sent.iter().any(|t| headers.contains(t.as_str())),
            "a token was stored: {headers}"
        );
        assert!(
            !headers.to_ascii_lowercase().contains("x-webhook-token"),
            "{headers}"
        );
    }
    // Forensics are written behind the answer: wait for the rows.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let kept = loop {
        let kept: Vec<String> = sqlx::query_scalar("SELECT headers FROM forensics")
            .fetch_all(&mut db)
            .await
            .expect("forensics");
        if kept.len() == 4 {
            break kept;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "forensics rows: {kept:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    for headers in &kept {
        assert!(
            !sent.iter().any(|t| headers.contains(t.as_str())),
            "a token was kept: {headers}"
        );
        assert!(headers.contains("[redacted]"), "{headers}");
    }
}
