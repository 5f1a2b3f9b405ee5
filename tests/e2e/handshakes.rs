//! One live test per handshake kind: signed handshakes answered after verification
//! (a plain answer: Slack; an answer holding an HMAC the host computes: Zoom; an
//! Ed25519-signed PING: Discord) and unsigned GET handshakes (a token the host checks:
//! Meta; nothing to check: Dropbox). None of them is stored.

use crate::support::*;
use serde_json::{Value, json};

const ZOOM_SECRET: &str = "zoom-secret-token";
const SLACK_SECRET: &str = "slack-signing-secret";
const META_TOKEN: &str = "meta verify token";

fn config(discord_key: &str) -> String {
    format!(
        "[[endpoint]]\nid = \"zoom\"\nplugin = \"zoom\"\nsecrets = [\"{ZOOM_SECRET}\", \"zoom-old\"]\n\
         [[endpoint]]\nid = \"slack\"\nplugin = \"slack\"\nsecrets = [\"{SLACK_SECRET}\"]\n\
         [[endpoint]]\nid = \"discord\"\nplugin = \"discord\"\nsecrets = [\"{discord_key}\"]\n\
         [[endpoint]]\nid = \"meta\"\nplugin = \"meta\"\nsecrets = [\"app-secret\"]\nhandshake_token = \"{META_TOKEN}\"\n\
         [[endpoint]]\nid = \"meta-no-token\"\nplugin = \"meta\"\nsecrets = [\"app-secret\"]\n\
         [[endpoint]]\nid = \"dropbox\"\nplugin = \"dropbox\"\nsecrets = [\"app-secret\"]\n"
    )
}

async fn receipts(server: &Server) -> i64 {
    let mut db = open_db(&server.db_path()).await;
    sqlx::query_scalar("SELECT COUNT(*) FROM receipts")
        .fetch_one(&mut db)
        .await
        .expect("count")
}

async fn get(server: &Server, path: &str) -> (u16, hyper::HeaderMap, String) {
    let (status, headers, body) =
        request_raw(server.addr, "GET", path, &[], Default::default()).await;
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

async fn post(
    server: &Server,
    endpoint: &str,
    headers: &[(&str, String)],
    body: &str,
) -> (u16, hyper::HeaderMap, String) {
    let (status, answer_headers, bytes) = request_raw(
        server.addr,
        "POST",
        &format!("/webhooks/{endpoint}"),
        headers,
        body.to_owned().into(),
    )
    .await;
    (
        status,
        answer_headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_are_answered_as_the_plugins_say_and_never_stored() {
    use ed25519_dalek::Signer;
    let discord = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]);
    let server = Server::start(&config(&hex::encode(discord.verifying_key().as_bytes()))).await;
    let t = now().to_string();

    // Zoom: the answer's encryptedToken is an HMAC of plainToken with the secret that
    // verified the request, computed by the host.
    let body = r#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}"#;
    let signature = hex::encode(hmac_sha256(
        ZOOM_SECRET.as_bytes(),
        &[format!("v0:{t}:").as_bytes(), body.as_bytes()],
    ));
    let headers = [
        ("x-zm-request-timestamp", t.clone()),
        ("x-zm-signature", format!("v0={signature}")),
    ];
    let (status, answer_headers, answer) = post(&server, "zoom", &headers, body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer_headers["content-type"], "application/json");
    let expected = hex::encode(hmac_sha256(
        ZOOM_SECRET.as_bytes(),
        &[b"qgg8vlvZRS6UYooatFL8Aw"],
    ));
    assert_eq!(
        json(&answer),
        json!({"plainToken": "qgg8vlvZRS6UYooatFL8Aw", "encryptedToken": expected})
    );
    // Signed with the older secret during a rotation, the answer is made with it:
    // the sender checks it with the secret it signs with.
    let signature = hex::encode(hmac_sha256(
        b"zoom-old",
        &[format!("v0:{t}:").as_bytes(), body.as_bytes()],
    ));
    let rotated = [
        ("x-zm-request-timestamp", t.clone()),
        ("x-zm-signature", format!("v0={signature}")),
    ];
    let (status, _, answer) = post(&server, "zoom", &rotated, body).await;
    assert_eq!(status, 200, "{answer}");
    let expected = hex::encode(hmac_sha256(b"zoom-old", &[b"qgg8vlvZRS6UYooatFL8Aw"]));
    assert_eq!(json(&answer)["encryptedToken"], json!(expected));
    // Unsigned, the same body is refused like any event: nothing is answered.
    let (status, _, answer) = post(&server, "zoom", &headers[..1], body).await;
    assert_eq!(
        (status, json(&answer)["error"].clone()),
        (400, json!("missing_signature"))
    );

    // Slack: the challenge, after verification.
    let body = r#"{"token":"x","challenge":"3eZbrw1aBm2rZgRN","type":"url_verification"}"#;
    let signature = hex::encode(hmac_sha256(
        SLACK_SECRET.as_bytes(),
        &[format!("v0:{t}:").as_bytes(), body.as_bytes()],
    ));
    let headers = [
        ("x-slack-request-timestamp", t.clone()),
        ("x-slack-signature", format!("v0={signature}")),
    ];
    let (status, _, answer) = post(&server, "slack", &headers, body).await;
    assert_eq!(
        (status, json(&answer)),
        (200, json!({"challenge": "3eZbrw1aBm2rZgRN"}))
    );

    // Discord: an Ed25519-signed PING gets {"type":1}; a forged one is refused.
    let body = r#"{"application_id":"1250519999999999999","id":"1250520010841915394","token":"dG9rZW4","type":1,"version":1}"#;
    let signed = discord.sign(format!("{t}{body}").as_bytes());
    let headers = [
        ("x-signature-timestamp", t.clone()),
        ("x-signature-ed25519", hex::encode(signed.to_bytes())),
    ];
    let (status, _, answer) = post(&server, "discord", &headers, body).await;
    assert_eq!((status, json(&answer)), (200, json!({"type": 1})));
    let forged = [
        ("x-signature-timestamp", t.clone()),
        ("x-signature-ed25519", hex::encode([7u8; 64])),
    ];
    let (status, _, _) = post(&server, "discord", &forged, body).await;
    assert_eq!(status, 400);

    // Meta: GET with the endpoint's handshake token echoes the challenge; a wrong
    // token, or an endpoint without one, is 403; a GET that is no handshake is 405.
    let path = "/webhooks/meta?hub.mode=subscribe&hub.verify_token=meta%20verify%20token&hub.challenge=1158201444";
    let (status, answer_headers, answer) = get(&server, path).await;
    assert_eq!((status, answer.as_str()), (200, "1158201444"));
    assert!(
        answer_headers["content-type"]
            .to_str()
            .unwrap_or("")
            .starts_with("text/plain")
    );
    let wrong = "/webhooks/meta?hub.mode=subscribe&hub.verify_token=guess&hub.challenge=1";
    let (status, _, answer) = get(&server, wrong).await;
    assert_eq!(
        (status, json(&answer)),
        (403, json!({"error": "handshake_refused"}))
    );
    let unset = "/webhooks/meta-no-token?hub.mode=subscribe&hub.verify_token=&hub.challenge=1";
    assert_eq!(get(&server, unset).await.0, 403);
    assert_eq!(get(&server, "/webhooks/meta").await.0, 405);

    // Dropbox: GET ?challenge= echoed with nosniff, nothing to check.
    let (status, answer_headers, answer) = get(&server, "/webhooks/dropbox?challenge=abc123").await;
    assert_eq!((status, answer.as_str()), (200, "abc123"));
    assert_eq!(answer_headers["x-content-type-options"], "nosniff");

    // A plugin without a handshake: GET is 405.
    assert_eq!(get(&server, "/webhooks/slack").await.0, 405);

    assert_eq!(receipts(&server).await, 0, "a handshake was stored");
}
