//! Verification forensics: refused requests are kept (failed ones in full, rejected
//! ones bounded), shown without signatures or credentials, verified again and
//! re-ingested under their original event id once they pass.

use crate::cli::hookhost;
use crate::operations::{ADMIN_TOKEN, admin, value};
use crate::support::*;
use serde_json::{Value, json};
use sha2::Digest as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A call to the admin API with the admin token; (status, JSON body).
async fn call(admin: SocketAddr, method: &str, path: &str) -> (u16, Value) {
    let auth = [("authorization", format!("Bearer {ADMIN_TOKEN}"))];
    request(admin, method, path, &auth, Default::default()).await
}

/// Kept requests matching `query`, newest first.
async fn kept(admin: SocketAddr, query: &str) -> Vec<Value> {
    let (status, listed) = call(admin, "GET", &format!("/admin/forensics?{query}")).await;
    assert_eq!(status, 200, "{listed}");
    listed.as_array().expect("a list").clone()
}

/// Rejected requests are written off the request path: wait until `endpoint`'s
/// newest kept request's body holds `marker`, then list the endpoint's.
async fn kept_when(admin: SocketAddr, endpoint: &str, marker: &str) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let listed = kept(admin, &format!("endpoint={endpoint}")).await;
        if let Some(newest) = listed.first() {
            let (_, shown) =
                call(admin, "GET", &format!("/admin/forensics/{}", newest["id"])).await;
            if shown["body"].as_str().is_some_and(|b| b.contains(marker)) {
                return listed;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{marker} was not kept on {endpoint}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn show(admin: SocketAddr, id: &Value) -> Value {
    let (status, shown) = call(admin, "GET", &format!("/admin/forensics/{id}")).await;
    assert_eq!(status, 200, "{shown}");
    shown
}

/// The value of header `name` as shown.
fn header<'a>(shown: &'a Value, name: &str) -> &'a str {
    shown["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .find(|pair| pair[0] == name)
        .and_then(|pair| pair[1].as_str())
        .unwrap_or_else(|| panic!("no header {name} in {shown}"))
}

const TRAPS: &str = "plugins_dir = \"plugins\"\n[[endpoint]]\nid = \"guest\"\nplugin = \"hostile\"\n\
                     secrets = [\"s\"]\n[endpoint.config]\nmode = \"trap\"\nphase = \"describe\"\n";

crate::both_stores! {
async fn a_verified_request_that_failed_is_kept_in_full_and_reingests_after_the_fix() {
    let server = Server::start_in(with_test_guest(), TRAPS).await.expect("starts");
    let addr = admin(&server).await;
    let body = br#"{"n":1}"#.to_vec();
    let mut headers = guest_headers("s", "evt_kept", &body);
    let signature = headers[0].1.clone();
    headers.push(("authorization", "Bearer sender-credential".into()));
    headers.push(("x-access-token", "sender-access-token".into()));
    let answer = server
        .post("guest?n=1&api_key=sender-query-key", &headers, body.clone())
        .await;
    assert_eq!(answer, (500, json!({"error": "plugin_failed"})));

    // Kept before the 500 was answered: no waiting here.
    let listed = kept(addr, "kind=failed").await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let id = listed[0]["id"].clone();
    assert_eq!(
        (&listed[0]["endpoint"], &listed[0]["status"], &listed[0]["code"], &listed[0]["body_kept"]),
        (&json!("guest"), &json!(500), &json!("plugin_failed"), &json!(true))
    );
    let shown = show(addr, &id).await;
    assert_eq!(shown["body"], r#"{"n":1}"#);
    assert_eq!(shown["detail"]["matched_secret"], 0);
    assert_eq!(shown["detail"]["reason"], "plugin_failed");
    assert_eq!(header(&shown, "x-test-id"), "evt_kept");
    assert_eq!(header(&shown, "x-test-signature"), "[redacted]");
    assert_eq!(header(&shown, "authorization"), "[redacted]");
    assert_eq!(header(&shown, "x-access-token"), "[redacted]");
    let text = shown.to_string();
    assert!(!text.contains(&signature) && !text.contains("sender-credential"), "{text}");
    assert!(!text.contains("sender-access-token"), "{text}");
    // Nor is a credential in its URL kept (a shown query is redacted whatever it holds).
    let row = server.app.store.forensic(id.as_i64().expect("id")).await;
    let url = row.expect("store").expect("kept").url;
    assert!(url.ends_with("/webhooks/guest?n=1"), "{url}");

    // The plugin still traps: nothing is ingested.
    let (status, refused) = call(addr, "POST", &format!("/admin/forensics/{id}/reingest")).await;
    assert_eq!((status, &refused["error"]), (422, &json!("still_refused")), "{refused}");
    assert_eq!(server.count_receipts("guest").await, 0);

    // Fixed (here: its configuration), the request re-ingests under its original id,
    // once from the CLI and then from the admin API, where it is a duplicate.
    let fixed = TRAPS.replace("mode = \"trap\"\nphase = \"describe\"\n", "");
    let server = server.restart(&fixed).await;
    let addr = admin(&server).await;
    let config = server.config_path();
    let (ok, stdout, stderr) = hookhost(&["forensics", "reingest", "--config", &config, &id.to_string()]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout.trim(), format!("{id}: re-ingested as evt_kept (accepted)"));
    assert_eq!(server.receipt("guest", "evt_kept").await.body, body);
    let again = call(addr, "POST", &format!("/admin/forensics/{id}/reingest")).await;
    assert_eq!(
        again,
        (200, json!({"id": id, "event_id": "evt_kept", "outcome": "duplicate"}))
    );
    assert_eq!(server.count_receipts("guest").await, 1);
    let listed = kept(addr, "kind=failed").await;
    assert_eq!(listed[0]["reingest_outcome"], "duplicate");
    assert_eq!(listed[0]["event_id"], "evt_kept");
}

async fn rejected_requests_are_kept_bounded_with_their_detail_and_reingest_once_the_secret_is_fixed() {
    let config = |secret: &str| {
        format!(
            "[forensics]\nrejected_per_endpoint = 3\n\
             [[endpoint]]\nid = \"stripe\"\nplugin = \"stripe\"\nsecrets = [\"{secret}\"]\n\
             [[endpoint]]\nid = \"other\"\nplugin = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n"
        )
    };
    // The endpoint's secret was mistyped: every authentic request is refused.
    let server = Server::start(&config("whsec_mistyped")).await;
    let addr = admin(&server).await;
    let t = now();
    for n in 1..=5 {
        let body = stripe_event(&format!("evt_b{n}"), "customer.updated", "cus_b", t);
        let answer = server.post_stripe(&[STRIPE_SECRET], t, &body).await;
        assert_eq!(answer, (400, json!({"error": "invalid_signature"})));
    }
    // Bounded per endpoint: the newest three.
    let listed = kept_when(addr, "stripe", "evt_b5").await;
    assert_eq!(listed.len(), 3, "{listed:?}");
    for (kept, n) in listed.iter().zip([5, 4, 3]) {
        let shown = show(addr, &kept["id"]).await;
        assert!(shown["body"].as_str().expect("body").contains(&format!("evt_b{n}")));
        assert_eq!(kept["kind"], "rejected");
    }
    let newest = show(addr, &listed[0]["id"]).await;
    let detail = &newest["detail"];
    let body5 = stripe_event("evt_b5", "customer.updated", "cus_b", t);
    assert_eq!(
        (&detail["reason"], &detail["candidates"], &detail["secrets_tried"], &detail["body_len"]),
        (&json!("invalid_signature"), &json!(1), &json!(1), &json!(body5.len()))
    );
    assert!(detail.get("matched_secret").is_none() && detail.get("hints").is_none(), "{detail}");
    assert!(detail["skew_seconds"].as_i64().expect("skew").abs() <= 5, "{detail}");
    assert_eq!(header(&newest, "stripe-signature"), "[redacted]");
    assert_eq!(header(&newest, "content-type"), "application/json");

    // Another endpoint keeps its own: a missing header on a body a proxy rewrote, and
    // an authentic request signed an hour ago.
    let rewritten = "{\"id\": \"evt_x\", \"object\": \"event\"}\r\n";
    let plain = vec![("content-type", "application/json".to_string())];
    assert_eq!(server.post("other", &plain, rewritten).await.0, 400);
    let late = stripe_event("evt_late", "customer.updated", "cus_l", t - 3600);
    let signed = stripe_headers(&[STRIPE_SECRET], t - 3600, &late);
    assert_eq!(server.post("other", &signed, late.clone()).await.0, 400);
    let other = kept_when(addr, "other", "evt_late").await;
    assert_eq!(other.len(), 2);
    let window = show(addr, &other[0]["id"]).await["detail"].clone();
    assert_eq!(
        (&window["reason"], &window["matched_secret"], &window["tolerance_seconds"]),
        (&json!("timestamp_outside_window"), &json!(0), &json!(300))
    );
    assert!((3595..=3605).contains(&window["skew_seconds"].as_i64().expect("skew")), "{window}");
    let missing = show(addr, &other[1]["id"]).await["detail"].clone();
    assert_eq!(missing["reason"], "missing_signature");
    assert_eq!(missing["missing_header"], "stripe-signature");
    let hints: Vec<&str> = missing["hints"]
        .as_array()
        .expect("hints")
        .iter()
        .filter_map(|h| h["code"].as_str())
        .collect();
    assert_eq!(hints, ["crlf", "trailing_whitespace", "json_spacing"]);
    // Past the cap of 100 signatures, refused before any key is tried (10,000 of them:
    // more than the plugin's answer could hold, were they all passed on); kept with
    // every header redacted rather than each matched against the candidates, which
    // the plugin passes on one past the cap.
    let flood = stripe_event("evt_flood", "customer.updated", "cus_f", t);
    let signature = format!("t={t}{}", ",v1=00".repeat(10_000));
    let headers = [
        ("stripe-signature", signature),
        ("content-type", "application/json".to_string()),
    ];
    let answer = server.post("other", &headers, flood).await;
    assert_eq!(answer, (400, json!({"error": "invalid_signature"})));
    let flooded = kept_when(addr, "other", "evt_flood").await;
    let shown = show(addr, &flooded[0]["id"]).await;
    assert_eq!(shown["detail"]["candidates"], json!(101), "{shown}");
    assert_eq!(header(&shown, "content-type"), "[redacted]");
    assert_eq!(header(&shown, "stripe-signature"), "[redacted]");

    let metrics = crate::operations::get(addr, "/metrics", Some(ADMIN_TOKEN)).await.1;
    let sample = "hookhost_forensics_total{endpoint=\"stripe\",plugin=\"stripe\",kind=\"rejected\",result=\"kept\"}";
    assert_eq!(value(&metrics, sample), Some(5.0), "{metrics}");

    // The secret is fixed: the newest passes now and re-ingests under its event id;
    // the late one still fails the window at its original arrival time.
    let server = server.restart(&config(STRIPE_SECRET)).await;
    let addr = admin(&server).await;
    let (status, verdict) = call(addr, "POST", &format!("/admin/forensics/{}/verify", listed[0]["id"])).await;
    assert_eq!((status, &verdict["passes"], &verdict["event_id"]), (200, &json!(true), &json!("evt_b5")), "{verdict}");
    let (status, verdict) = call(addr, "POST", &format!("/admin/forensics/{}/verify", other[0]["id"])).await;
    assert_eq!((status, &verdict["passes"]), (200, &json!(false)), "{verdict}");
    assert_eq!(verdict["detail"]["reason"], "timestamp_outside_window");
    let (status, done) = call(addr, "POST", &format!("/admin/forensics/{}/reingest", listed[0]["id"])).await;
    assert_eq!((status, &done["outcome"]), (200, &json!("accepted")), "{done}");
    assert_eq!(server.receipt("stripe", "evt_b5").await.body, body5.as_bytes());
    let (status, refused) = call(addr, "POST", &format!("/admin/forensics/{}/reingest", other[0]["id"])).await;
    assert_eq!((status, &refused["error"]), (422, &json!("still_refused")));
    assert_eq!(server.count_receipts("other").await, 0);
}

async fn a_rejected_event_id_no_store_can_keep_is_left_out_of_its_record() {
    let config = TRAPS.replace("mode = \"trap\"\nphase = \"describe\"", "mode = \"reject\"\nphase = \"none\"");
    let server = Server::start_in(with_test_guest(), &config).await.expect("starts");
    let addr = admin(&server).await;
    // The guest names the body's id: a NUL (JSON `\u0000`), which PostgreSQL's text
    // refuses, would fail the whole batch of rejected requests it is written in.
    for body in [r#"{"id":"evt_\u0000nul"}"#, r#"{"id":"evt_fine"}"#] {
        let headers = guest_headers("s", "ignored", body.as_bytes());
        let answer = server.post("guest", &headers, body).await;
        assert_eq!((answer.0, &answer.1["error"]), (422, &json!("event_rejected")));
    }
    let listed = kept_when(addr, "guest", "evt_fine").await;
    let ids: Vec<&Value> = listed.iter().map(|k| &k["event_id"]).collect();
    assert_eq!(ids, [&json!("evt_fine"), &Value::Null], "{listed:?}");
}

async fn purge_lets_rejected_requests_age_out_but_keeps_failed_ones_until_reingested() {
    let server = Server::start(&stripe_config("")).await;
    let store = &server.app.store;
    // Two days old: past the purge below, not past the server's own (7 days).
    let old = now() * 1000 - 2 * 86_400_000;
    let kept = |kind: &'static str| hookhost::store::NewForensic {
        endpoint: if kind == "gone" { "acme.gone" } else { "stripe" }.into(),
        kind: if kind == "gone" { "failed" } else { kind },
        received_at_ms: old,
        status: if kind == "rejected" { 400 } else { 500 },
        code: "invalid_signature",
        detail: "{}".into(),
        method: "POST".into(),
        url: "http://h/webhooks/stripe".into(),
        headers: "[]".into(),
        signature_headers: None,
        body: Some(b"{}".to_vec()),
        body_sha256: [0; 32],
        body_len: 2,
        event_id: None,
    };
    let ids = store
        .keep_forensics(&[kept("rejected"), kept("failed"), kept("failed"), kept("gone")], 10)
        .await
        .expect("kept");
    store
        .forensic_reingested(ids[2], "evt_p", "accepted", old)
        .await
        .expect("marked");
    // The last failed on a tenant's endpoint since deleted: no one can re-ingest it.
    let purged = store.purge_forensics(now() * 1000 - 86_400_000).await.expect("purged");
    assert_eq!(purged, 3);
    let left = store.forensics(&Default::default()).await.expect("listed");
    assert_eq!(left.iter().map(|k| k.id).collect::<Vec<_>>(), [ids[1]]);
}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_only_keeps_no_body_and_says_it_cannot_verify_again() {
    let server = Server::start(&stripe_config("[forensics]\nrejected_body = \"digest\"")).await;
    let addr = admin(&server).await;
    let t = now();
    let body = stripe_event("evt_d", "customer.updated", "cus_d", t);
    let answer = server.post_stripe(&["whsec_wrong"], t, &body).await;
    assert_eq!(answer.0, 400);
    let deadline = Instant::now() + Duration::from_secs(10);
    let listed = loop {
        let listed = kept(addr, "endpoint=stripe").await;
        if !listed.is_empty() || Instant::now() > deadline {
            break listed;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["body_kept"], false);
    let shown = show(addr, &listed[0]["id"]).await;
    assert_eq!(shown["body"], Value::Null);
    assert_eq!(
        shown["body_sha256"],
        hex::encode(sha2::Sha256::digest(body.as_bytes()))
    );
    assert_eq!(shown["body_len"], body.len());
    let (status, refused) = call(
        addr,
        "POST",
        &format!("/admin/forensics/{}/verify", listed[0]["id"]),
    )
    .await;
    assert_eq!((status, &refused["error"]), (409, &json!("body_not_kept")));

    // The CLI lists and shows the same, without the signature.
    let config = server.config_path();
    let (ok, stdout, stderr) = hookhost(&["forensics", "list", "--config", &config, "--json"]);
    assert!(ok, "{stderr}");
    let line: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(
        (&line["id"], &line["code"]),
        (&listed[0]["id"], &json!("invalid_signature"))
    );
    let id = listed[0]["id"].to_string();
    let (ok, stdout, _) = hookhost(&["forensics", "show", "--config", &config, &id]);
    assert!(ok);
    let signature = stripe_headers(&["whsec_wrong"], t, &body)[0].1.clone();
    let v1 = signature.split("v1=").nth(1).expect("v1");
    assert!(
        stdout.contains("[redacted]") && !stdout.contains(v1),
        "{stdout}"
    );
    let (ok, _, stderr) = hookhost(&["forensics", "verify", "--config", &config, &id]);
    assert!(
        !ok && stderr.contains("only the body's digest was kept"),
        "{stderr}"
    );
    let (ok, _, stderr) = hookhost(&["forensics", "list", "--config", &config, "--kind", "lost"]);
    assert!(
        !ok && stderr.contains("kind: \"lost\" is not one of failed, rejected"),
        "{stderr}"
    );
}

/// A rejected request is counted kept once its batch is written; one whose write
/// fails (here, the table gone) is counted dropped, not kept when it was queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_request_whose_write_fails_is_counted_dropped() {
    let server = Server::start(&stripe_config("")).await;
    let addr = admin(&server).await;
    server.break_table("forensics").await;
    let t = now();
    let body = stripe_event("evt_lost", "customer.updated", "cus_lost", t);
    let answer = server
        .post_stripe(&["whsec_not_the_secret"], t, &body)
        .await;
    assert_eq!(answer, (400, json!({"error": "invalid_signature"})));
    let sample = |result: &str| {
        format!(
            "hookhost_forensics_total{{endpoint=\"stripe\",plugin=\"stripe\",kind=\"rejected\",result=\"{result}\"}}"
        )
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = crate::operations::get(addr, "/metrics", Some(ADMIN_TOKEN))
            .await
            .1;
        if value(&metrics, &sample("dropped")) == Some(1.0) {
            assert_eq!(value(&metrics, &sample("kept")), None, "{metrics}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not counted as dropped:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.mend_table("forensics").await;
}

/// Rejected requests waiting to be written hold at most 16 MiB: while the store is
/// stalled (here, the table locked), the first sixteen 1 MB bodies are queued whole
/// and the next requests without their bodies; once written, the room comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_requests_waiting_to_be_written_hold_a_bounded_amount_of_memory() {
    use sqlx::Connection;
    /// The rows kept (with their body, without it).
    async fn counted(reader: &mut sqlx::PgConnection) -> (i64, i64) {
        sqlx::query_as(
            "SELECT count(*) FILTER (WHERE body IS NOT NULL), count(*) FILTER (WHERE body IS NULL)
             FROM forensics",
        )
        .fetch_one(reader)
        .await
        .expect("count")
    }
    let db = PgDatabase::create();
    let server = Server::start(&stripe_config(&format!("store = \"{}\"", db.url()))).await;
    let mut other = sqlx::PgConnection::connect(&db.url())
        .await
        .expect("connect");
    let mut stall = other.begin().await.expect("begin");
    sqlx::query("LOCK TABLE forensics IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *stall)
        .await
        .expect("lock");
    let t = now();
    let bad = |n: usize| {
        let server = &server;
        async move {
            let body = format!("{n:02}{}", "x".repeat(999_998));
            let answer = server
                .post_stripe(&["whsec_not_the_secret"], t, &body)
                .await;
            assert_eq!(answer, (400, json!({"error": "invalid_signature"})), "{n}");
        }
    };
    for n in 0..20 {
        bad(n).await;
    }
    stall.commit().await.expect("unlock");
    let mut reader = sqlx::PgConnection::connect(&db.url())
        .await
        .expect("connect");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (whole, bare) = counted(&mut reader).await;
        if whole + bare == 20 {
            break;
        }
        assert!(Instant::now() < deadline, "written: {whole} + {bare}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(counted(&mut reader).await, (16, 4));
    let lengths: Vec<i64> = sqlx::query_scalar("SELECT body_len FROM forensics ORDER BY id")
        .fetch_all(&mut reader)
        .await
        .expect("lengths");
    assert_eq!(lengths, vec![1_000_000; 20], "each length kept");
    // Written, the queue holds nothing: the next body is kept.
    bad(20).await;
    while counted(&mut reader).await != (17, 4) {
        assert!(
            Instant::now() < deadline,
            "not written: {:?}",
            counted(&mut reader).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
