//! Tenants managing endpoints and secrets at runtime through the `/v1` API: access
//! only to their own, write-only secrets sealed at rest, changes served by every
//! process sharing the store.

use crate::support::*;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const OPERATOR: &str = "operator-token-for-tests";

/// A configuration with the tenant API on, beside the Stripe endpoint of the file.
fn config() -> String {
    config_with("")
}

/// The same, with more top-level tables.
fn config_with(tables: &str) -> String {
    let key = b64(&[42u8; 32]);
    stripe_config(&format!(
        "admin_token = \"admin-token-for-tests\"\n\
         [tenancy]\noperator_token = \"{OPERATOR}\"\nmaster_key = \"{key}\"\n{tables}"
    ))
}

/// Tenancy whose tenants may deliver to loopback, where the tests' destinations
/// listen, and whose workers poll often.
const LOOPBACK_DESTINATIONS: &str = "private_destinations = true\n[delivery]\npoll_ms = 20\n";

/// Serve the server's `/v1` API on a port of its own.
async fn api(server: &Server) -> SocketAddr {
    let tenancy = server.app.tenancy.clone().expect("tenancy configured");
    serve_on_loopback(hookhost::tenancy::router(server.app.clone(), tenancy)).await
}

/// docs/openapi.json, read once.
fn openapi() -> &'static Value {
    static DOC: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    DOC.get_or_init(|| {
        let text = std::fs::read_to_string(workspace().join("docs/openapi.json"))
            .expect("docs/openapi.json");
        serde_json::from_str(&text).expect("docs/openapi.json is JSON")
    })
}

/// Whether a concrete path fits a path template of the OpenAPI file.
fn fits(template: &str, path: &str) -> bool {
    let (t, p): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len() && t.iter().zip(&p).all(|(t, p)| t == p || t.starts_with('{'))
}

/// The answer is one docs/openapi.json lists for this operation, and its body matches
/// the schema it gives.
fn conforms(method: &str, path: &str, status: u16, body: &Value) {
    let doc = openapi();
    let paths = doc["paths"].as_object().expect("paths");
    let (template, item) = paths
        .iter()
        .find(|(template, _)| fits(template, path))
        .unwrap_or_else(|| panic!("{path} is not in docs/openapi.json"));
    let operation = &item[method.to_ascii_lowercase()];
    assert!(
        operation.is_object(),
        "{method} {template} is not in docs/openapi.json"
    );
    let response = &operation["responses"][status.to_string()];
    assert!(
        response.is_object(),
        "{method} {template} answered {status}, not listed in docs/openapi.json: {body}"
    );
    let mut schema = response["content"]["application/json"]["schema"].clone();
    schema["components"] = doc["components"].clone();
    if let Err(e) = jsonschema::validate(&schema, body) {
        panic!("{method} {path} {status}: {e} in {body}");
    }
}

/// One call, checked against docs/openapi.json: (status, JSON body).
async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    body: Value,
) -> (u16, Value) {
    let headers = [
        ("authorization", format!("Bearer {token}")),
        ("content-type", "application/json".to_string()),
    ];
    let body = if body.is_null() {
        Default::default()
    } else {
        body.to_string().into()
    };
    let (status, answer) = request(addr, method, path, &headers, body).await;
    conforms(method, path, status, &answer);
    (status, answer)
}

/// Create a tenant and issue it a token.
async fn tenant(addr: SocketAddr, id: &str) -> String {
    let created = call(
        addr,
        "POST",
        "/v1/tenants",
        OPERATOR,
        json!({"id": id, "name": id}),
    )
    .await;
    assert_eq!(created.0, 201, "{created:?}");
    let (status, issued) = call(
        addr,
        "POST",
        &format!("/v1/tenants/{id}/tokens"),
        OPERATOR,
        Value::Null,
    )
    .await;
    assert_eq!(status, 201, "{issued}");
    issued["token"].as_str().expect("token").to_string()
}

/// POST a Stripe event signed with `secret` to `endpoint`: the status.
async fn post_signed(addr: SocketAddr, endpoint: &str, secret: &str, id: &str) -> u16 {
    let t = now();
    let body = stripe_event(id, "customer.updated", id, t);
    let path = format!("/webhooks/{endpoint}");
    let headers = stripe_headers(&[secret], t, &body);
    request(addr, "POST", &path, &headers, body.into()).await.0
}

/// Wait until a request signed with `secret` gets `status` from the server at `addr`
/// (another process picking up a change).
async fn until(addr: SocketAddr, endpoint: &str, secret: &str, status: u16) {
    // A bound on a test that fails, not a timing goal: registries reload every 0.5 s.
    let deadline = Instant::now() + Duration::from_secs(30);
    for n in 0.. {
        let id = format!("evt_wait_{secret}_{status}_{n}");
        if post_signed(addr, endpoint, secret, &id).await == status {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{endpoint} never answered {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const SECRET: &str = "whsec_tenant_secret_marker_1";
const ROTATED: &str = "whsec_tenant_secret_marker_2";

/// Create the tenant's Stripe endpoint `shop`, signed with [`SECRET`].
async fn create_shop(addr: SocketAddr, token: &str) {
    let shop = json!({"name": "shop", "plugin": "stripe", "secret": SECRET});
    let created = call(addr, "POST", "/v1/endpoints", token, shop).await;
    assert_eq!(created.0, 201, "{created:?}");
}

/// A server started from `config`, its `/v1` API's address, and tenant `acme`'s token,
/// with its Stripe endpoint `acme.shop` created.
async fn acme_shop(config: &str) -> (Server, SocketAddr, String) {
    let server = Server::start(config).await;
    let addr = api(&server).await;
    let acme = tenant(addr, "acme").await;
    create_shop(addr, &acme).await;
    (server, addr, acme)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_reaches_only_its_own_and_secrets_are_write_only_and_sealed() {
    let server = Server::start(&config()).await;
    let addr = api(&server).await;
    assert_eq!(
        call(addr, "GET", "/v1/endpoints", "", Value::Null).await.0,
        401
    );
    assert_eq!(
        call(addr, "GET", "/v1/endpoints", "hht_made_up", Value::Null)
            .await
            .0,
        401
    );
    let acme = tenant(addr, "acme").await;
    let globex = tenant(addr, "globex").await;
    let again = call(
        addr,
        "POST",
        "/v1/tenants",
        OPERATOR,
        json!({"id": "acme", "name": "x"}),
    )
    .await;
    assert_eq!(again, (409, json!({"error": "tenant_exists"})));

    let new = json!({"name": "shop", "plugin": "stripe", "secret": SECRET});
    let (status, created) = call(addr, "POST", "/v1/endpoints", &acme, new).await;
    assert_eq!(
        (status, &created["id"], &created["path"]),
        (201, &json!("acme.shop"), &json!("/webhooks/acme.shop")),
        "{created}"
    );
    // Served at once by the process that took the change.
    assert_eq!(
        post_signed(server.addr, "acme.shop", SECRET, "evt_t1").await,
        200
    );
    assert_eq!(
        post_signed(server.addr, "acme.shop", "whsec_wrong", "evt_t2").await,
        400
    );

    // Refused before anything is stored, with the reason.
    let bad = call(
        addr,
        "POST",
        "/v1/endpoints",
        &acme,
        json!({"name": "x", "plugin": "nope", "secret": "s"}),
    )
    .await;
    assert_eq!(bad.1["error"], "invalid_endpoint", "{bad:?}");
    assert!(
        bad.1["reason"]
            .as_str()
            .expect("reason")
            .contains("unknown plugin \"nope\"")
    );
    let bad = call(
        addr,
        "POST",
        "/v1/endpoints",
        &acme,
        json!({"name": "Shop!", "plugin": "stripe", "secret": "s"}),
    )
    .await;
    assert_eq!((bad.0, &bad.1["error"]), (400, &json!("invalid_request")));
    // Over the route's 2 MiB limit: 413, not a body that "does not parse".
    let huge = "s".repeat(3 << 20);
    let bad = call(
        addr,
        "POST",
        "/v1/endpoints",
        &acme,
        json!({"name": "big", "plugin": "stripe", "secret": huge}),
    )
    .await;
    assert_eq!((bad.0, &bad.1["error"]), (413, &json!("body_too_large")));
    // A key the plugin does not read: the endpoint would not build, and says why.
    let bad = call(
        addr,
        "POST",
        "/v1/endpoints",
        &acme,
        json!({"name": "cfg", "plugin": "stripe", "secret": "s", "config": {"tolerence": 1}}),
    )
    .await;
    assert_eq!((bad.0, &bad.1["error"]), (400, &json!("invalid_endpoint")));
    let reason = bad.1["reason"].as_str().expect("reason");
    assert!(reason.contains("config.tolerence: unknown key"), "{reason}");

    // Another tenant's endpoint reads exactly as one that does not exist, on every route.
    let (_, secrets) = call(
        addr,
        "GET",
        "/v1/endpoints/acme.shop/secrets",
        &acme,
        Value::Null,
    )
    .await;
    let first = secrets[0]["id"].as_str().expect("secret id").to_string();
    let routes = [
        ("GET", "/v1/endpoints/{id}".to_string(), Value::Null),
        (
            "PUT",
            "/v1/endpoints/{id}".into(),
            json!({"plugin": "stripe"}),
        ),
        ("DELETE", "/v1/endpoints/{id}".into(), Value::Null),
        ("GET", "/v1/endpoints/{id}/secrets".into(), Value::Null),
        (
            "POST",
            "/v1/endpoints/{id}/secrets".into(),
            json!({"value": "whsec_x"}),
        ),
        (
            "POST",
            format!("/v1/endpoints/{{id}}/secrets/{first}/retire"),
            Value::Null,
        ),
    ];
    for (method, path, body) in &routes {
        let theirs = call(
            addr,
            method,
            &path.replace("{id}", "acme.shop"),
            &globex,
            body.clone(),
        )
        .await;
        let nobodys = call(
            addr,
            method,
            &path.replace("{id}", "globex.none"),
            &globex,
            body.clone(),
        )
        .await;
        assert_eq!(
            theirs,
            (404, json!({"error": "not_found"})),
            "{method} {path}"
        );
        assert_eq!(theirs, nobodys, "{method} {path}");
    }
    assert_eq!(
        call(addr, "GET", "/v1/endpoints", &globex, Value::Null).await,
        (200, json!([]))
    );
    // Tenants do not manage tenants.
    assert_eq!(
        call(addr, "GET", "/v1/tenants", &acme, Value::Null).await.0,
        404
    );
    assert_eq!(
        call(
            addr,
            "POST",
            "/v1/tenants/globex/tokens",
            &acme,
            Value::Null
        )
        .await
        .0,
        404
    );
    // The operator sees every endpoint; the file's are read-only.
    let (_, all) = call(addr, "GET", "/v1/endpoints", OPERATOR, Value::Null).await;
    let ids: Vec<(&str, bool)> = all
        .as_array()
        .expect("list")
        .iter()
        .map(|e| {
            (
                e["id"].as_str().expect("id"),
                e["read_only"].as_bool().expect("flag"),
            )
        })
        .collect();
    assert_eq!(ids, [("acme.shop", false), ("stripe", true)]);
    let (status, _) = call(
        addr,
        "POST",
        "/v1/endpoints",
        &acme,
        json!({"name": "stripe", "plugin": "stripe", "secret": "s"}),
    )
    .await;
    assert_eq!(status, 201, "a tenant's ids are its own: acme.stripe");

    // Rotation: the new secret is current, the old verifies until retired, the last
    // active secret cannot be retired.
    let (status, added) = call(
        addr,
        "POST",
        "/v1/endpoints/acme.shop/secrets",
        &acme,
        json!({"value": ROTATED}),
    )
    .await;
    assert_eq!((status, &added["current"]), (201, &json!(true)), "{added}");
    assert_eq!(
        post_signed(server.addr, "acme.shop", ROTATED, "evt_t3").await,
        200
    );
    assert_eq!(
        post_signed(server.addr, "acme.shop", SECRET, "evt_t4").await,
        200
    );
    let receipt = server.receipt("acme.shop", "evt_t4").await;
    assert_eq!(receipt.secret_index, 1, "the old secret matched");
    let retire = format!("/v1/endpoints/acme.shop/secrets/{first}/retire");
    assert_eq!(call(addr, "POST", &retire, &acme, Value::Null).await.0, 200);
    assert_eq!(
        post_signed(server.addr, "acme.shop", SECRET, "evt_t5").await,
        400
    );
    // Retired, its sealed value is gone from the store; its record stays.
    let stored = server
        .app
        .store
        .secrets(Some("acme"), Some("acme.shop"))
        .await
        .expect("secrets");
    let sealed: Vec<(bool, bool)> = stored
        .iter()
        .map(|s| (s.retired_at_ms.is_some(), s.sealed.is_empty()))
        .collect();
    assert_eq!(sealed, [(false, false), (true, true)], "newest first");
    assert!(
        stored[1].fingerprint.starts_with("fp_"),
        "{}",
        stored[1].fingerprint
    );
    let last = format!(
        "/v1/endpoints/acme.shop/secrets/{}/retire",
        added["id"].as_str().expect("id")
    );
    let refused = call(addr, "POST", &last, &acme, Value::Null).await;
    assert_eq!(
        (refused.0, &refused.1["error"]),
        (409, &json!("last_active_secret"))
    );

    // Both verified requests; when each last did is written within about a second.
    let deadline = Instant::now() + Duration::from_secs(5);
    let secrets = loop {
        let path = "/v1/endpoints/acme.shop/secrets";
        let (_, secrets) = call(addr, "GET", path, &acme, Value::Null).await;
        let listed = secrets.as_array().expect("list");
        if listed.iter().all(|s| s["last_matched_at_ms"].is_i64()) || Instant::now() > deadline {
            break secrets;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for secret in secrets.as_array().expect("list") {
        let at = secret["last_matched_at_ms"].as_i64().expect("last matched");
        assert!((now() * 1000 - at).abs() < 60_000, "{secret}");
    }
    // Write-only: the API shows fingerprints; the database holds no secret's bytes.
    let text = secrets.to_string();
    assert!(!text.contains(SECRET) && !text.contains(ROTATED), "{text}");
    assert_eq!(secrets.as_array().map(Vec::len), Some(2));
    assert!(
        secrets[0]["fingerprint"]
            .as_str()
            .expect("fp")
            .starts_with("fp_")
    );
    assert_ne!(secrets[0]["fingerprint"], secrets[1]["fingerprint"]);

    // A revoked token opens nothing.
    let (_, tokens) = call(
        addr,
        "POST",
        "/v1/tenants/acme/tokens",
        OPERATOR,
        Value::Null,
    )
    .await;
    let spare = tokens["token"].as_str().expect("token");
    let revoke = format!(
        "/v1/tenants/acme/tokens/{}/revoke",
        tokens["token_id"].as_str().expect("id")
    );
    assert_eq!(
        call(addr, "GET", "/v1/endpoints", spare, Value::Null)
            .await
            .0,
        200
    );
    assert_eq!(
        call(addr, "POST", &revoke, OPERATOR, Value::Null).await.0,
        200
    );
    assert_eq!(
        call(addr, "GET", "/v1/endpoints", spare, Value::Null)
            .await
            .0,
        401
    );
    assert_eq!(
        call(addr, "GET", "/v1/endpoints", &acme, Value::Null)
            .await
            .0,
        200
    );

    let fingerprint = secrets[0]["fingerprint"].as_str().expect("fp").to_string();
    let dir = server.stop().await;
    let mut bytes = std::fs::read(dir.path().join("hookhost.db")).expect("the database file");
    bytes.extend(std::fs::read(dir.path().join("hookhost.db-wal")).unwrap_or_default());
    let holds = |text: &str| bytes.windows(text.len()).any(|w| w == text.as_bytes());
    // The rows are there (their fingerprints), the secrets are not.
    assert!(
        holds(&fingerprint),
        "the secrets' rows are not in the file read"
    );
    assert!(
        !holds(SECRET) && !holds(ROTATED),
        "the database holds a secret in the clear"
    );
}

crate::both_stores! {
async fn a_tenant_endpoint_sets_keeps_and_removes_its_handshake_token() {
    // A tenant's Meta endpoint answers the verification GET with the token it was
    // given, keeps the token through a replacement that leaves it out, and refuses the
    // GET once the token is removed. The token is sealed at rest and never shown.
    const TOKEN: &str = "acme-verify-token-marker";
    let server = Server::start(&config()).await;
    let addr = api(&server).await;
    let (acme, ingest) = (tenant(addr, "acme").await, server.addr);
    let verify = |token: &str| {
        let path = format!("/webhooks/acme.meta?hub.mode=subscribe&hub.verify_token={token}&hub.challenge=1158201444");
        async move {
        let (status, _, body) = request_raw(ingest, "GET", &path, &[], Default::default()).await;
        (status, String::from_utf8_lossy(&body).into_owned())
        }
    };
    let meta = |token: Value| json!({"name": "meta", "plugin": "meta", "secret": "app-secret", "handshake_token": token});

    let (status, refused) = call(addr, "POST", "/v1/endpoints", &acme, meta(json!(""))).await;
    assert_eq!((status, &refused["error"]), (400, &json!("invalid_endpoint")), "{refused}");
    assert!(refused["reason"].as_str().unwrap_or_default().contains("handshake_token"), "{refused}");

    let (status, created) = call(addr, "POST", "/v1/endpoints", &acme, meta(json!(TOKEN))).await;
    assert_eq!((status, &created["handshake_token_set"]), (201, &json!(true)), "{created}");
    assert!(!created.to_string().contains(TOKEN), "{created}");
    assert_eq!(verify(TOKEN).await, (200, "1158201444".to_string()));
    assert_eq!(verify("guess").await.0, 403);
    let stored = server.app.store.managed_endpoints(Some("acme")).await.expect("endpoints");
    let sealed = stored[0].handshake_sealed.clone().expect("the token is stored");
    assert!(!sealed.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes()), "the token is stored in the clear");

    // A replacement that does not name the token keeps it.
    let (status, replaced) = call(addr, "PUT", "/v1/endpoints/acme.meta", &acme, json!({"plugin": "meta", "retry_schedule_seconds": [0, 60]})).await;
    assert_eq!((status, &replaced["handshake_token_set"]), (200, &json!(true)), "{replaced}");
    assert_eq!(verify(TOKEN).await.0, 200);
    let (_, shown) = call(addr, "GET", "/v1/endpoints/acme.meta", &acme, Value::Null).await;
    assert_eq!(shown["handshake_token_set"], json!(true), "{shown}");
    assert!(!shown.to_string().contains(TOKEN), "{shown}");

    // `null` removes it: every verification GET is refused again.
    let (status, removed) = call(addr, "PUT", "/v1/endpoints/acme.meta", &acme, json!({"plugin": "meta", "handshake_token": null})).await;
    assert_eq!((status, &removed["handshake_token_set"]), (200, &json!(false)), "{removed}");
    assert_eq!(verify(TOKEN).await.0, 403);
    let stored = server.app.store.managed_endpoints(Some("acme")).await.expect("endpoints");
    assert_eq!(stored[0].handshake_sealed, None);
}

async fn a_change_through_one_process_is_served_by_another_without_a_restart() {
    let a = Server::start(&config()).await;
    // B is the hookhost binary, a process of its own, sharing A's store (on
    // PostgreSQL, A's database; on SQLite, A's file).
    let store = match &a.database {
        Some(db) => db.url(),
        None => a.db_path().display().to_string(),
    };
    // B serves the admin API too (the configuration has admin_token), on a port of
    // its own choosing.
    let top = format!("store = \"{store}\"\nadmin_listen = \"127.0.0.1:0\"\n");
    let process_b = Process::start(a.dir.path(), "b", &format!("{top}{}", config())).await;
    let b = process_b.addr;
    let addr = api(&a).await;
    let acme = tenant(addr, "acme").await;
    let created = call(addr, "POST", "/v1/endpoints", &acme, json!({"name": "shop", "plugin": "stripe", "secret": SECRET})).await;
    assert_eq!(created.0, 201, "{created:?}");
    until(b, "acme.shop", SECRET, 200).await;

    let added = call(addr, "POST", "/v1/endpoints/acme.shop/secrets", &acme, json!({"value": ROTATED})).await;
    assert_eq!(added.0, 201);
    until(b, "acme.shop", ROTATED, 200).await;
    assert_eq!(post_signed(b, "acme.shop", SECRET, "evt_old_still").await, 200);

    let (_, secrets) = call(addr, "GET", "/v1/endpoints/acme.shop/secrets", &acme, Value::Null).await;
    let old = secrets[1]["id"].as_str().expect("old secret").to_string();
    let retired = call(addr, "POST", &format!("/v1/endpoints/acme.shop/secrets/{old}/retire"), &acme, Value::Null).await;
    assert_eq!(retired.0, 200);
    until(b, "acme.shop", SECRET, 400).await;

    let deleted = call(addr, "DELETE", "/v1/endpoints/acme.shop", &acme, Value::Null).await;
    assert_eq!(deleted.0, 200);
    until(b, "acme.shop", ROTATED, 404).await;
}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn until_the_tenants_endpoints_are_read_their_requests_are_retried_not_refused() {
    // A process starting (a rolling restart, say) serves the file's endpoints at once
    // and the tenants' once it has read them from the store. Meanwhile their senders
    // were answered 404 `unknown_endpoint`, which tells them to stop.
    let db = PgDatabase::create();
    let config = format!("store = \"{}\"\n{}", db.url(), config());
    let first = Server::start(&config).await;
    let addr = api(&first).await;
    let acme = tenant(addr, "acme").await;
    create_shop(addr, &acme).await;
    first.stop().await;

    // The tenants' endpoints cannot be read while this transaction holds the table.
    let mut holder = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url())
        .await
        .expect("connect");
    let mut held = sqlx::Connection::begin(&mut holder).await.expect("begin");
    sqlx::query("LOCK TABLE managed_endpoints IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *held)
        .await
        .expect("lock");
    let server = Server::start(&config).await;
    let admin = crate::operations::admin(&server).await;
    let t = now();
    let body = stripe_event("evt_file", "customer.updated", "cus_file", t);
    assert_eq!(server.post_stripe(&[STRIPE_SECRET], t, &body).await.0, 200);
    let headers = stripe_headers(&[SECRET], t, &body);
    let answer = request(
        server.addr,
        "POST",
        "/webhooks/acme.shop",
        &headers,
        body.clone().into(),
    )
    .await;
    assert_eq!(answer, (503, json!({"error": "store_unavailable"})));
    assert_eq!(crate::operations::get(admin, "/readyz", None).await.0, 503);

    held.rollback().await.expect("release");
    until(server.addr, "acme.shop", SECRET, 200).await;
    assert_eq!(crate::operations::get(admin, "/readyz", None).await.0, 200);
    let (status, _) = server.post("no-such-endpoint", &[], body).await;
    assert_eq!(status, 404);
}

/// A request to `acme.shop` signed with [`SECRET`] whose body is being read: its room
/// in memory is held, so it has resolved its endpoint. It sends the rest when told.
async fn reading(server: &Server, id: &str) -> crate::ingest::SlowSender {
    let body = stripe_event(id, "customer.updated", id, now());
    let budget = &server.app.bodies;
    let room = budget.available_bytes();
    let slow =
        crate::ingest::SlowSender::start_to(server.addr, "acme.shop", SECRET, &body, 10).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while budget.available_bytes() == room {
        assert!(Instant::now() < deadline, "the body was never read");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    slow
}

/// Run `sql` on the server's store, from a connection of the test's own.
async fn on_store(server: &Server, sql: &str) {
    match &server.database {
        Some(db) => {
            let mut direct = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url())
                .await
                .expect("connect");
            sqlx::query(sql).execute(&mut direct).await.expect(sql);
        }
        None => {
            let mut direct = open_db(&server.db_path()).await;
            sqlx::query(sql).execute(&mut direct).await.expect(sql);
        }
    }
}

crate::both_stores! {
async fn a_tenant_endpoint_that_cannot_be_built_is_retried_not_refused() {
    // Held in the store but not built (here: its settings do not parse), an endpoint
    // was unknown to ingest: 404, which tells its senders to stop.
    let (server, ..) = acme_shop(&config()).await;
    assert_eq!(post_signed(server.addr, "acme.shop", SECRET, "evt_before").await, 200);
    // One request is being read as the endpoint stops being served.
    let slow = reading(&server, "evt_slow").await;
    let bump = "UPDATE registry_version SET version = version + 1";
    on_store(&server, "UPDATE managed_endpoints SET spec = '{' || spec WHERE id = 'acme.shop'").await;
    on_store(&server, bump).await;
    until(server.addr, "acme.shop", SECRET, 503).await;
    assert_eq!(slow.finish().await, "HTTP/1.1 503 Service Unavailable");
    let t = now();
    let body = stripe_event("evt_unbuilt", "customer.updated", "cus_unbuilt", t);
    let headers = stripe_headers(&[SECRET], t, &body);
    let answer = request(server.addr, "POST", "/webhooks/acme.shop", &headers, body.into()).await;
    assert_eq!(answer, (503, json!({"error": "store_unavailable"})));
    // An id no tenant holds is still unknown.
    assert_eq!(post_signed(server.addr, "acme.nothing", SECRET, "evt_none").await, 404);

    on_store(&server, "UPDATE managed_endpoints SET spec = substr(spec, 2) WHERE id = 'acme.shop'").await;
    on_store(&server, bump).await;
    until(server.addr, "acme.shop", SECRET, 200).await;
}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_bound_a_tenants_request_rate_and_its_endpoints() {
    let server = Server::start(&config()).await;
    let addr = api(&server).await;
    let small =
        json!({"id": "small", "name": "Small", "requests_per_second": 1, "max_endpoints": 1});
    let (status, created) = call(addr, "POST", "/v1/tenants", OPERATOR, small).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        created["quotas"],
        json!({"requests_per_second": 1, "max_endpoints": 1})
    );
    let (_, issued) = call(
        addr,
        "POST",
        "/v1/tenants/small/tokens",
        OPERATOR,
        Value::Null,
    )
    .await;
    let token = issued["token"].as_str().expect("token").to_string();
    let big = tenant(addr, "big").await;
    let shop = json!({"name": "shop", "plugin": "stripe", "secret": SECRET});
    assert_eq!(
        call(addr, "POST", "/v1/endpoints", &token, shop.clone())
            .await
            .0,
        201
    );
    assert_eq!(call(addr, "POST", "/v1/endpoints", &big, shop).await.0, 201);
    let second = json!({"name": "other", "plugin": "stripe", "secret": SECRET});
    let refused = call(addr, "POST", "/v1/endpoints", &token, second).await;
    assert_eq!(
        (refused.0, &refused.1["error"]),
        (403, &json!("quota_exceeded")),
        "{refused:?}"
    );

    // One request a second: the first is admitted, the next is told when to retry.
    assert_eq!(
        post_signed(server.addr, "small.shop", SECRET, "evt_q1").await,
        200
    );
    let t = now();
    let body = stripe_event("evt_q2", "customer.updated", "cus_q", t);
    let (status, headers, answer) = request_raw(
        server.addr,
        "POST",
        "/webhooks/small.shop",
        &stripe_headers(&[SECRET], t, &body),
        body.into(),
    )
    .await;
    assert_eq!(status, 429, "{answer:?}");
    assert_eq!(
        headers.get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    assert_eq!(&answer[..], br#"{"error":"rate_limited"}"#);
    // Another tenant is not held back by it; after the wait, the tenant is admitted.
    assert_eq!(
        post_signed(server.addr, "big.shop", SECRET, "evt_q3").await,
        200
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(
        post_signed(server.addr, "small.shop", SECRET, "evt_q4").await,
        200
    );
}

crate::both_stores! {
async fn a_change_checked_against_an_overtaken_endpoint_is_not_written() {
    // A replacement or a new secret is checked against the endpoint as it was read;
    // written after another change, it would stand unchecked against that change (a
    // plugin switch beside a secret in the old plugin's key format leaves an endpoint
    // that does not build). The store writes it only if the endpoint is unchanged.
    use hookhost::store::{Edited, ManagedEndpoint, SealedSecret};
    let (server, addr, acme) = acme_shop(&config()).await;
    let store = &server.app.store;
    let read = store.managed_endpoints(Some("acme")).await.expect("endpoints").remove(0);

    let replaced = json!({"plugin": "stripe", "retry_schedule_seconds": [0, 60]});
    assert_eq!(call(addr, "PUT", "/v1/endpoints/acme.shop", &acme, replaced).await.0, 200);
    let now = read.updated_at_ms + 1;
    let stale = ManagedEndpoint { updated_at_ms: now, ..read.clone() };
    assert_eq!(store.update_endpoint(&stale, read.updated_at_ms).await.expect("update"), Edited::Stale);
    let secret = SealedSecret {
        id: "sec_overtaken".into(),
        endpoint: "acme.shop".into(),
        sealed: vec![0; 48],
        fingerprint: "fp_overtaken".into(),
        created_at_ms: now,
        retired_at_ms: None,
        last_matched_at_ms: None,
    };
    assert_eq!(store.add_secret("acme", &secret, read.updated_at_ms, now).await.expect("add"), Edited::Stale);
    let (_, shown) = call(addr, "GET", "/v1/endpoints/acme.shop", &acme, Value::Null).await;
    assert_eq!(shown["spec"]["retry_schedule_seconds"], json!([0, 60]), "{shown}");
    let (_, secrets) = call(addr, "GET", "/v1/endpoints/acme.shop/secrets", &acme, Value::Null).await;
    assert_eq!(secrets.as_array().map(Vec::len), Some(1), "{secrets}");

    // Read afresh, both are written; a gone endpoint is missing.
    let read = store.managed_endpoints(Some("acme")).await.expect("endpoints").remove(0);
    let later = read.updated_at_ms + 1;
    assert_eq!(store.add_secret("acme", &secret, read.updated_at_ms, later).await.expect("add"), Edited::Edited);
    let fresh = ManagedEndpoint { updated_at_ms: later + 1, ..read.clone() };
    assert_eq!(store.update_endpoint(&fresh, later).await.expect("update"), Edited::Edited);
    let gone = ManagedEndpoint { id: "acme.gone".into(), ..fresh.clone() };
    assert_eq!(store.update_endpoint(&gone, later + 1).await.expect("update"), Edited::Missing);
}
}

crate::both_stores! {
async fn a_registry_rebuild_reads_one_snapshot() {
    // An endpoint deleted and created again, over and over, while the registry is
    // read: each read holds it with its secret or not at all, and agrees with the
    // version read beside it (each change moves it by one). Read one by one, a
    // deletion between the endpoints and the secrets built the endpoint with none.
    let (server, ..) = acme_shop(&config()).await;
    let store = server.app.store.clone();
    let first = store.registry().await.expect("registry");
    let (endpoint, secret) = (first.endpoints[0].clone(), first.secrets[0].clone());
    let churn = tokio::spawn(async move {
        loop {
            assert!(store.delete_endpoint("acme", &endpoint.id).await.expect("delete"));
            let added = store.create_endpoint(&endpoint, &secret, 10).await.expect("create");
            assert_eq!(added, hookhost::store::Added::Added);
        }
    });
    let (mut held, mut gone) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while held < 50 || gone < 50 {
        assert!(!churn.is_finished(), "the changes stopped");
        assert!(Instant::now() < deadline, "the changes did not interleave with the reads: {held} held, {gone} gone");
        let rows = server.app.store.registry().await.expect("registry");
        let read = (rows.endpoints.len(), rows.secrets.len());
        if (rows.version - first.version) % 2 == 0 {
            assert_eq!(read, (1, 1), "at version {}", rows.version);
            held += 1;
        } else {
            assert_eq!(read, (0, 0), "at version {}", rows.version);
            gone += 1;
        }
    }
    churn.abort();
}
}

crate::both_stores! {
async fn quotas_hold_against_additions_made_at_once() {
    // Counted in the transaction that adds: twelve endpoints created at once by a
    // tenant with room for three make three; three plugins uploaded at once with room
    // for two make two. Bytes the tenant has uploaded already are not one more.
    let server = Server::start(&config_with("max_plugins = 2\n")).await;
    let addr = api(&server).await;
    let acme = json!({"id": "acme", "name": "Acme", "max_endpoints": 3});
    assert_eq!(call(addr, "POST", "/v1/tenants", OPERATOR, acme).await.0, 201);
    let (_, issued) = call(addr, "POST", "/v1/tenants/acme/tokens", OPERATOR, Value::Null).await;
    let token = issued["token"].as_str().expect("token").to_string();

    let creations: Vec<_> = (0..12)
        .map(|n| {
            let (token, new) = (token.clone(), json!({"name": format!("e{n}"), "plugin": "stripe", "secret": SECRET}));
            tokio::spawn(async move { call(addr, "POST", "/v1/endpoints", &token, new).await.0 })
        })
        .collect();
    let mut answers = Vec::new();
    for creation in creations {
        answers.push(creation.await.expect("task"));
    }
    answers.sort_unstable();
    assert_eq!(answers, [vec![201; 3], vec![403; 9]].concat());
    let (_, listed) = call(addr, "GET", "/v1/endpoints", &token, Value::Null).await;
    assert_eq!(listed.as_array().map(Vec::len), Some(3), "{listed}");

    let hostile = std::fs::read(guest("hostile")).expect("the test guest");
    let upload = |tag: &str| json!({"wasm_base64": b64(&with_custom_section(&hostile, tag)), "vectors": [guest_vector("test.event")]});
    let uploads: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|tag| {
            let (token, body) = (token.clone(), upload(tag));
            tokio::spawn(async move { (call(addr, "POST", "/v1/plugins", &token, body).await.0, tag) })
        })
        .collect();
    let mut answers = Vec::new();
    for upload in uploads {
        answers.push(upload.await.expect("task"));
    }
    answers.sort_unstable();
    let statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    assert_eq!(statuses, [201, 201, 403], "{answers:?}");
    let (_, kept) = answers[0];
    let again = call(addr, "POST", "/v1/plugins", &token, upload(kept)).await;
    assert_eq!(again.0, 200, "{again:?}");
    // Shown as it was kept when first uploaded, as the list shows it.
    let (_, listed) = call(addr, "GET", "/v1/plugins", &token, Value::Null).await;
    let listed = listed.as_array().expect("a list");
    let first = listed.iter().find(|p| p["digest"] == again.1["digest"]);
    let created = first.map(|p| &p["created_at_ms"]);
    assert_eq!(created, Some(&again.1["created_at_ms"]), "{listed:?}");
}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_endpoint_delivers_to_its_destination_and_pauses_through_the_api() {
    let (downstream, port) = crate::delivery::Downstream::start().await;
    let server = Server::start(&config_with(LOOPBACK_DESTINATIONS)).await;
    let addr = api(&server).await;
    let acme = tenant(addr, "acme").await;
    let signing = format!("whsec_{}", b64(b"tenant destination key, 32 bytes"));
    let url = format!("http://127.0.0.1:{port}/hook");
    let without =
        json!({"name": "hook", "plugin": "stripe", "secret": SECRET, "destination": {"url": url}});
    let refused = call(addr, "POST", "/v1/endpoints", &acme, without).await;
    assert_eq!(
        (refused.0, &refused.1["error"]),
        (400, &json!("invalid_endpoint")),
        "{refused:?}"
    );
    // What would break delivery later is refused now, naming it: a step of the schedule
    // past 30 days, credentials in the URL, a zero timeout, a window of no time, a
    // timeout the lease (60 s here) would cut.
    for (bad, says) in [
        (
            json!({"retry_schedule_seconds": [0, u64::MAX], "destination": {"url": url, "secret": signing}}),
            "retry_schedule_seconds: [1] is 18446744073709551615 s",
        ),
        (
            json!({"destination": {"url": "http://u:p@127.0.0.1:9/hook", "secret": signing}}),
            "destination url: a user name or password",
        ),
        (
            json!({"destination": {"url": url, "secret": signing, "timeout_ms": 0}}),
            "connect_timeout_ms and timeout_ms must be greater than 0",
        ),
        (
            json!({"tolerance": 0}),
            "tolerance: must be at least 1 second",
        ),
        (
            json!({"destination": {"url": url, "secret": signing, "timeout_ms": 45_000}}),
            "destination.timeout_ms: 45000 ms is not under 45000 ms",
        ),
    ] {
        let mut body = json!({"name": "hook", "plugin": "stripe", "secret": SECRET});
        for (k, v) in bad.as_object().expect("object") {
            body[k] = v.clone();
        }
        let (status, refused) = call(addr, "POST", "/v1/endpoints", &acme, body).await;
        assert_eq!(
            (status, &refused["error"]),
            (400, &json!("invalid_endpoint")),
            "{refused}"
        );
        let reason = refused["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(says), "{reason}");
        assert!(!reason.contains("u:p"), "{reason}");
    }
    let new = json!({"name": "hook", "plugin": "stripe", "secret": SECRET,
                     "destination": {"url": url, "secret": signing}});
    let (status, created) = call(addr, "POST", "/v1/endpoints", &acme, new).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["spec"]["destination"], json!({"url": url}));
    assert!(!created.to_string().contains(&signing));

    let delivered = |id: &'static str| {
        let downstream = downstream.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(5);
            while downstream.received(id).is_empty() {
                assert!(Instant::now() < deadline, "{id} was not delivered");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert_eq!(
        post_signed(server.addr, "acme.hook", SECRET, "evt_d1").await,
        200
    );
    delivered("evt_d1").await;

    let pause = || {
        call(
            addr,
            "POST",
            "/v1/endpoints/acme.hook/pause",
            &acme,
            Value::Null,
        )
    };
    let paused = pause().await;
    assert_eq!(paused, (200, json!({"id": "acme.hook", "paused": true})));
    assert_eq!(
        post_signed(server.addr, "acme.hook", SECRET, "evt_d2").await,
        200
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        downstream.received("evt_d2").is_empty(),
        "delivered while paused"
    );
    assert_eq!(
        call(
            addr,
            "POST",
            "/v1/endpoints/acme.hook/resume",
            &acme,
            Value::Null
        )
        .await
        .0,
        200
    );
    delivered("evt_d2").await;

    // Replacing the settings without the destination's secret keeps the stored one.
    let settings =
        json!({"plugin": "stripe", "retry_schedule_seconds": [0, 1], "destination": {"url": url}});
    let (status, updated) = call(addr, "PUT", "/v1/endpoints/acme.hook", &acme, settings).await;
    assert_eq!(
        (status, &updated["spec"]["retry_schedule_seconds"]),
        (200, &json!([0, 1])),
        "{updated}"
    );
    assert_eq!(
        post_signed(server.addr, "acme.hook", SECRET, "evt_d3").await,
        200
    );
    delivered("evt_d3").await;

    // Deleted while paused and created again, the endpoint is a new one: it delivers
    // what it receives, and not what waited for the deleted one's destination.
    assert_eq!(pause().await.0, 200);
    assert_eq!(
        post_signed(server.addr, "acme.hook", SECRET, "evt_d5").await,
        200
    );
    let deleted = call(
        addr,
        "DELETE",
        "/v1/endpoints/acme.hook",
        &acme,
        Value::Null,
    )
    .await;
    assert_eq!(deleted.0, 200, "{deleted:?}");
    // A request under way when the endpoint was deleted stores its receipt after.
    let mut late = new_receipt("evt_d6", "cus_d6", None, now() * 1000);
    late.endpoint = "acme.hook".into();
    server.app.store.record(late).await.expect("record");
    let again = json!({"name": "hook", "plugin": "stripe", "secret": SECRET,
                       "destination": {"url": url, "secret": signing}});
    let (status, created) = call(addr, "POST", "/v1/endpoints", &acme, again).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        post_signed(server.addr, "acme.hook", SECRET, "evt_d4").await,
        200
    );
    delivered("evt_d4").await;
    let waited = server.receipt("acme.hook", "evt_d5").await;
    assert_eq!(
        (waited.state.as_str(), waited.state_reason.as_deref()),
        ("discarded", Some("endpoint_deleted"))
    );
    assert!(downstream.received("evt_d5").is_empty());
    let late = server.receipt("acme.hook", "evt_d6").await;
    assert_eq!(
        (late.state.as_str(), late.state_reason.as_deref()),
        ("discarded", Some("endpoint_deleted"))
    );
    assert!(downstream.received("evt_d6").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_destination_reaches_only_public_addresses() {
    // A tenant names the URL, and hookhost connects from inside the operator's network:
    // unless the operator allows it, a tenant's destination is never loopback, private
    // or link-local (the admin listener, a metadata service). Written as an address it
    // is refused at once; a name is judged by what it resolves to, at each connection.
    let (downstream, port) = crate::delivery::Downstream::start().await;
    let server = Server::start(&config_with("[delivery]\npoll_ms = 20\n")).await;
    let addr = api(&server).await;
    let acme = tenant(addr, "acme").await;
    let signing = format!("whsec_{}", b64(b"tenant destination key, 32 bytes"));
    let new = |url: &str| {
        json!({"name": "hook", "plugin": "stripe", "secret": SECRET,
                                 "destination": {"url": url, "secret": signing}})
    };
    for url in [
        &format!("http://127.0.0.1:{port}/hook"),
        "http://[::1]:9/hook",
        "http://localhost:9/hook",
        "http://169.254.169.254/latest/meta-data",
        "https://10.0.0.1/hook",
    ] {
        let (status, refused) = call(addr, "POST", "/v1/endpoints", &acme, new(url)).await;
        assert_eq!(
            (status, &refused["error"]),
            (400, &json!("invalid_endpoint")),
            "{url}: {refused}"
        );
        let reason = refused["reason"].as_str().unwrap_or_default();
        assert!(
            reason.starts_with("destination url: ") && reason.contains("is not a public address"),
            "{reason}"
        );
    }

    // To the resolver, 127.1 is 127.0.0.1: the attempt is refused before it connects.
    let (status, created) = call(
        addr,
        "POST",
        "/v1/endpoints",
        &acme,
        new(&format!("http://127.1:{port}/hook")),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        post_signed(server.addr, "acme.hook", SECRET, "evt_r1").await,
        200
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let attempts = loop {
        let attempts = server
            .app
            .store
            .attempts("acme.hook", "evt_r1")
            .await
            .expect("attempts");
        if !attempts.is_empty() {
            break attempts;
        }
        assert!(Instant::now() < deadline, "no attempt was made");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let error = attempts[0].2.as_deref().unwrap_or_default();
    assert!(
        error.contains("refused, it resolves to 127.0.0.1 and no public address"),
        "{error}"
    );
    assert!(
        downstream.received("evt_r1").is_empty(),
        "delivered to loopback"
    );
}

crate::both_stores! {
async fn a_tenant_resumes_its_own_pause_and_never_an_operators() {
    // An operator who pauses a tenant's endpoint (one flooding its destination, say)
    // keeps it paused against the tenant API: the tenant's resume is refused until an
    // operator resumes it. A tenant's own pause the tenant resumes; an operator's pause
    // over it takes it over.
    let server = Server::start(&config()).await;
    let addr = api(&server).await;
    let admin = crate::operations::admin(&server).await;
    let acme = tenant(addr, "acme").await;
    create_shop(addr, &acme).await;
    let auth = [("authorization", format!("Bearer {}", crate::operations::ADMIN_TOKEN))];
    let operator = |verb: &str| {
        let path = format!("/admin/endpoints/acme.shop/{verb}");
        let auth = auth.clone();
        async move { request(admin, "POST", &path, &auth, Default::default()).await.0 }
    };
    let by_tenant = |verb: &str| {
        let path = format!("/v1/endpoints/acme.shop/{verb}");
        let acme = acme.clone();
        async move { call(addr, "POST", &path, &acme, Value::Null).await }
    };
    let paused = || async { server.app.store.paused().await.expect("paused") };
    let refused = (409, json!({"error": "paused_by_operator",
                               "reason": "an operator paused this endpoint; only an operator resumes it"}));

    assert_eq!(by_tenant("pause").await, (200, json!({"id": "acme.shop", "paused": true})));
    assert_eq!(paused().await, ["acme.shop"]);
    assert_eq!(by_tenant("resume").await, (200, json!({"id": "acme.shop", "paused": false})));
    assert!(paused().await.is_empty());

    assert_eq!(operator("pause").await, 200);
    assert_eq!(by_tenant("pause").await.0, 200);
    assert_eq!(by_tenant("resume").await, refused);
    assert_eq!(paused().await, ["acme.shop"]);
    assert_eq!(operator("resume").await, 200);
    assert!(paused().await.is_empty());

    assert_eq!(by_tenant("pause").await.0, 200);
    assert_eq!(operator("pause").await, 200);
    assert_eq!(by_tenant("resume").await, refused);
    assert_eq!(paused().await, ["acme.shop"]);
    assert_eq!(operator("resume").await, 200);
    assert!(paused().await.is_empty());

    // An operator's pause that lands after the endpoint's deletion (set through a
    // process that had not seen it gone) is no pause of one created again.
    let deleted = call(addr, "DELETE", "/v1/endpoints/acme.shop", &acme, Value::Null).await;
    assert_eq!(deleted.0, 200, "{deleted:?}");
    server.app.store.set_paused("acme.shop", true, now() * 1000).await.expect("pause");
    create_shop(addr, &acme).await;
    assert!(paused().await.is_empty());
    assert_eq!(by_tenant("pause").await.0, 200);
    assert_eq!(by_tenant("resume").await.0, 200);
}
}

crate::both_stores! {
async fn a_deleted_endpoints_backlog_is_discarded_in_batches() {
    // The backlog of a destination down for a day. Discarded by one statement, it held
    // SQLite's write lock for as long as the statement took (every receipt batch
    // meanwhile answered 503), or ran past PostgreSQL's statement timeout and rolled
    // the deletion back, every time.
    let (server, addr, acme) = acme_shop(&config()).await;
    let store = server.app.store.clone();
    let at = now() * 1000;
    let recorded: Vec<_> = (0..2_500)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut receipt = new_receipt(&format!("evt_{i:04}"), &format!("cus_{i}"), None, at + i);
                receipt.endpoint = "acme.shop".into();
                store.record(receipt).await.expect("record")
            })
        })
        .collect();
    for task in recorded {
        assert_eq!(task.await.expect("recorded"), hookhost::store::Outcome::Accepted);
    }
    store.record(new_receipt("evt_file", "cus_file", None, at)).await.expect("record");
    // On PostgreSQL, a trigger counts the rows each statement discards.
    let direct = match &server.database {
        Some(db) => {
            let mut direct = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url())
                .await
                .expect("connect");
            for sql in [
                "CREATE TABLE discard_statements (n BIGINT NOT NULL)",
                "CREATE FUNCTION count_discarded() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN INSERT INTO discard_statements
                       SELECT COUNT(*) FROM changed WHERE state = 'discarded';
                 RETURN NULL; END $$",
                "CREATE TRIGGER count_discarded AFTER UPDATE ON receipts
                 REFERENCING NEW TABLE AS changed
                 FOR EACH STATEMENT EXECUTE FUNCTION count_discarded()",
            ] {
                sqlx::query(sql).execute(&mut direct).await.expect(sql);
            }
            Some(direct)
        }
        None => None,
    };

    let deleted = call(addr, "DELETE", "/v1/endpoints/acme.shop", &acme, Value::Null).await;
    assert_eq!(deleted.0, 200, "{deleted:?}");
    let in_state = |state: &str| hookhost::store::Filter {
        endpoint: Some("acme.shop".into()),
        states: vec![state.into()],
        ..hookhost::store::Filter::default()
    };
    let discarded = store.list(&in_state("discarded")).await.expect("list");
    assert_eq!(discarded.len(), 2_500);
    assert!(discarded.iter().all(|r| r.state_reason.as_deref() == Some("endpoint_deleted")));
    assert!(store.list(&in_state("pending")).await.expect("list").is_empty());
    assert_eq!(server.receipt("stripe", "evt_file").await.state, "pending");
    if let Some(mut direct) = direct {
        let counted: Vec<i64> = sqlx::query_scalar("SELECT n FROM discard_statements")
            .fetch_all(&mut direct)
            .await
            .expect("statements");
        assert_eq!(counted.iter().sum::<i64>(), 2_500, "{counted:?}");
        assert!(counted.iter().all(|&n| n <= 1_000), "{counted:?}");
    }

    // Created again under the id, the endpoint keeps what it receives: a discard of the
    // deleted one's backlog still under way leaves it alone.
    create_shop(addr, &acme).await;
    let mut fresh = new_receipt("evt_fresh", "cus_fresh", None, now() * 1000);
    fresh.endpoint = "acme.shop".into();
    store.record(fresh).await.expect("record");
    assert_eq!(store.discard_pending_of_deleted("acme.shop").await.expect("discard"), 0);
    assert_eq!(server.receipt("acme.shop", "evt_fresh").await.state, "pending");
}
}

crate::both_stores! {
async fn a_request_whose_endpoint_is_deleted_while_it_is_read_is_not_stored() {
    // Resolved before its body was read (up to read_timeout_seconds), a request kept
    // the endpoint it found: deleted meanwhile, and created again, its receipt went to
    // the new endpoint's destination.
    let (server, addr, acme) = acme_shop(&config()).await;
    let slow = reading(&server, "evt_slow").await;
    let deleted = call(addr, "DELETE", "/v1/endpoints/acme.shop", &acme, Value::Null).await;
    assert_eq!(deleted.0, 200, "{deleted:?}");
    create_shop(addr, &acme).await;
    assert_eq!(slow.finish().await, "HTTP/1.1 404 Not Found");
    assert!(server.app.store.receipt("acme.shop", "evt_slow").await.expect("read").is_none());
    // Sent again, it is the new endpoint's.
    assert_eq!(post_signed(server.addr, "acme.shop", SECRET, "evt_after").await, 200);
}
}

crate::both_stores! {
async fn a_deleted_endpoints_receipts_are_never_leased() {
    // Its pending receipts are discarded after the deletion commits. Meanwhile a
    // process that has yet to see it deleted still lists it among the endpoints it
    // delivers: what it leased, it would deliver to the deleted destination.
    let (server, ..) = acme_shop(&config()).await;
    let store = &server.app.store;
    let at = now() * 1000;
    for (endpoint, id) in [("acme.shop", "evt_gone"), ("stripe", "evt_file")] {
        let mut receipt = new_receipt(id, id, None, at);
        receipt.endpoint = endpoint.into();
        store.record(receipt).await.expect("record");
    }
    // Deleted, as the deletion's transaction leaves it before the discard.
    on_store(&server, "DELETE FROM managed_endpoints WHERE id = 'acme.shop'").await;
    let listed = vec!["acme.shop".to_string(), "stripe".to_string()];
    let leased = store
        .lease_due("stale", &listed, at + 1, Duration::from_secs(60), 10)
        .await
        .expect("lease");
    let ids: Vec<&str> = leased.iter().map(|l| l.event_id.as_str()).collect();
    assert_eq!(ids, ["evt_file"]);
}
}

crate::both_stores! {
async fn what_a_deleted_endpoint_stores_late_is_discarded_by_the_sweep() {
    // Stored after the deletion's discard, by a request already under way or by a
    // process that had not yet seen the endpoint gone, a receipt waited for ever:
    // nothing leases a deleted endpoint's receipts and no purge takes a pending one.
    let (server, addr, acme) = acme_shop(&config()).await;
    let other = json!({"name": "other", "plugin": "stripe", "secret": SECRET});
    assert_eq!(call(addr, "POST", "/v1/endpoints", &acme, other).await.0, 201);
    let deleted = call(addr, "DELETE", "/v1/endpoints/acme.shop", &acme, Value::Null).await;
    assert_eq!(deleted.0, 200, "{deleted:?}");
    let store = &server.app.store;
    let at = now() * 1000;
    for (endpoint, id) in [("acme.shop", "evt_late"), ("acme.other", "evt_live"), ("stripe", "evt_file")] {
        let mut receipt = new_receipt(id, id, None, at);
        receipt.endpoint = endpoint.into();
        store.record(receipt).await.expect("record");
    }
    // The server's own sweep may have taken it first (one runs as it starts).
    assert!(store.discard_orphaned().await.expect("sweep") <= 1);
    let late = server.receipt("acme.shop", "evt_late").await;
    assert_eq!(
        (late.state.as_str(), late.state_reason.as_deref()),
        ("discarded", Some("endpoint_deleted"))
    );
    assert_eq!(server.receipt("acme.other", "evt_live").await.state, "pending");
    assert_eq!(server.receipt("stripe", "evt_file").await.state, "pending");
    assert_eq!(store.discard_orphaned().await.expect("sweep"), 0);
}
}

crate::both_stores! {
async fn the_cli_runs_a_tenant_endpoints_plugin_as_the_server_does() {
    // Commands that run an endpoint's plugin build the receiver; built from the file
    // alone, it said a tenant's live endpoint was "no longer configured".
    let (server, _addr, _acme) = acme_shop(&config()).await;
    let config = server.config_path();
    // Kept for forensics: signed with a secret the endpoint does not hold.
    assert_eq!(post_signed(server.addr, "acme.shop", ROTATED, "evt_forged").await, 400);
    let deadline = Instant::now() + Duration::from_secs(10);
    let kept = loop {
        let (ok, stdout, stderr) =
            crate::cli::hookhost(&["forensics", "list", "--config", &config, "--json"]);
        assert!(ok, "{stderr}");
        if let Some(line) = stdout.lines().next() {
            break serde_json::from_str::<Value>(line).expect("a JSON line");
        }
        assert!(Instant::now() < deadline, "the forged request was not kept");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(kept["endpoint"], "acme.shop");
    let id = kept["id"].to_string();
    let (ok, stdout, stderr) = crate::cli::hookhost(&["forensics", "verify", "--config", &config, &id]);
    assert!(ok, "{stderr}");
    let verdict: Value = serde_json::from_str(stdout.trim()).expect("a verdict");
    assert_eq!((&verdict["passes"], &verdict["detail"]["reason"]), (&json!(false), &json!("invalid_signature")), "{verdict}");

    // A remapping replay runs the plugin again on the stored request.
    assert_eq!(post_signed(server.addr, "acme.shop", SECRET, "evt_again").await, 200);
    let store = &server.app.store;
    assert!(store.discard("acme.shop", "evt_again", "test").await.expect("discard"));
    let (ok, stdout, stderr) = crate::cli::hookhost(&[
        "events", "replay", "--config", &config, "--endpoint", "acme.shop", "--remap",
    ]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout.trim(), "1 replayed");
    assert_eq!(server.receipt("acme.shop", "evt_again").await.state, "pending");
}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_endpoints_series_leave_the_metrics() {
    // Kept, a tenant creating and deleting endpoints in a loop would grow every
    // scrape without bound.
    let (server, addr, acme) = acme_shop(&config()).await;
    let admin = crate::operations::admin(&server).await;
    let scrape = async || {
        let (status, text) =
            crate::operations::get(admin, "/metrics", Some(crate::operations::ADMIN_TOKEN)).await;
        assert_eq!(status, 200, "{text}");
        text
    };
    let series = |text: &str, endpoint: &str| {
        let label = format!("endpoint=\"{endpoint}\"");
        text.lines()
            .filter(|l| !l.starts_with('#') && l.contains(&label))
            .count()
    };
    assert_eq!(
        post_signed(server.addr, "acme.shop", SECRET, "evt_m1").await,
        200
    );
    assert_eq!(
        post_signed(server.addr, "acme.shop", ROTATED, "evt_m2").await,
        400
    );
    let t = now();
    let body = stripe_event("evt_file", "customer.updated", "cus_file", t);
    assert_eq!(server.post_stripe(&[STRIPE_SECRET], t, &body).await.0, 200);
    let (unknown, _) = server.post("no-such-endpoint", &[], body).await;
    assert_eq!(unknown, 404);
    let before = scrape().await;
    assert!(series(&before, "acme.shop") > 0, "{before}");
    let requests = r#"hookhost_requests_total{endpoint="acme.shop",plugin="stripe",outcome="accepted",reason=""}"#;
    assert_eq!(
        crate::operations::value(&before, requests),
        Some(1.0),
        "{before}"
    );

    let deleted = call(
        addr,
        "DELETE",
        "/v1/endpoints/acme.shop",
        &acme,
        Value::Null,
    )
    .await;
    assert_eq!(deleted.0, 200, "{deleted:?}");
    let after = scrape().await;
    assert_eq!(series(&after, "acme.shop"), 0, "{after}");
    // The file's endpoint and the unknown one keep theirs.
    assert_eq!(
        series(&after, "stripe"),
        series(&before, "stripe"),
        "{after}"
    );
    assert_eq!(series(&after, ""), series(&before, ""), "{after}");

    // Created again, the endpoint counts from nothing.
    create_shop(addr, &acme).await;
    assert_eq!(
        post_signed(server.addr, "acme.shop", SECRET, "evt_m3").await,
        200
    );
    let again = scrape().await;
    assert_eq!(
        crate::operations::value(&again, requests),
        Some(1.0),
        "{again}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealing_tenants_bodies_are_sealed_at_rest_and_opened_to_deliver_and_show() {
    let (downstream, port) = crate::delivery::Downstream::start().await;
    let server = Server::start(&config_with(LOOPBACK_DESTINATIONS)).await;
    let addr = api(&server).await;
    let admin = crate::operations::admin(&server).await;
    let vault = json!({"id": "vault", "name": "Vault", "seal_bodies": true});
    let (status, created) = call(addr, "POST", "/v1/tenants", OPERATOR, vault).await;
    assert_eq!(
        (status, &created["seal_bodies"]),
        (201, &json!(true)),
        "{created}"
    );
    let (_, issued) = call(
        addr,
        "POST",
        "/v1/tenants/vault/tokens",
        OPERATOR,
        Value::Null,
    )
    .await;
    let token = issued["token"].as_str().expect("token").to_string();
    let signing = format!("whsec_{}", b64(b"tenant destination key, 32 bytes"));
    let new = json!({"name": "hook", "plugin": "stripe", "secret": SECRET,
                     "destination": {"url": format!("http://127.0.0.1:{port}/hook"), "secret": signing}});
    assert_eq!(
        call(addr, "POST", "/v1/endpoints", &token, new).await.0,
        201
    );

    // In the body only: not the event id, type or resource, which are kept in the clear.
    const MARKER: &str = "sealed-marker-7731@example.com";
    let t = now();
    let body =
        stripe_event("evt_s1", "customer.updated", "cus_s1", t).replace("a@example.com", MARKER);
    assert!(body.contains(MARKER));
    let signed = stripe_headers(&[SECRET], t, &body);
    assert_eq!(
        server.post("vault.hook", &signed, body.clone()).await.0,
        200
    );
    let refused = stripe_headers(&["whsec_wrong"], t, &body);
    assert_eq!(
        server.post("vault.hook", &refused, body.clone()).await.0,
        400
    );

    // Delivered as it arrived.
    let deadline = Instant::now() + Duration::from_secs(5);
    while downstream.received("evt_s1").is_empty() {
        assert!(Instant::now() < deadline, "evt_s1 was not delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(downstream.received("evt_s1")[0].body, body.as_bytes());
    // Shown opened to the operator: the receipt, and the kept rejected request.
    let auth = [(
        "authorization",
        format!("Bearer {}", crate::operations::ADMIN_TOKEN),
    )];
    let (status, shown) = request(
        admin,
        "GET",
        "/admin/events/vault.hook/evt_s1",
        &auth,
        Default::default(),
    )
    .await;
    assert_eq!(
        (status, &shown["body"], &shown["body_sealed"]),
        (200, &json!(body), &json!(true)),
        "{shown}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let kept = loop {
        let (_, kept) = request(
            admin,
            "GET",
            "/admin/forensics?endpoint=vault.hook",
            &auth,
            Default::default(),
        )
        .await;
        if kept.as_array().is_some_and(|k| !k.is_empty()) || Instant::now() > deadline {
            break kept;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (_, forensic) = request(
        admin,
        "GET",
        &format!("/admin/forensics/{}", kept[0]["id"]),
        &auth,
        Default::default(),
    )
    .await;
    assert_eq!(forensic["body"], json!(body), "{forensic}");

    // At rest: sealed, both.
    let dir = server.stop().await;
    let mut bytes = std::fs::read(dir.path().join("hookhost.db")).expect("the database file");
    bytes.extend(std::fs::read(dir.path().join("hookhost.db-wal")).unwrap_or_default());
    let holds = |text: &[u8]| bytes.windows(text.len()).any(|w| w == text);
    assert!(
        holds(hookhost::tenancy::SEALED_BODY),
        "no sealed body in the file read"
    );
    assert!(
        !holds(MARKER.as_bytes()),
        "a sealing tenant's body is in the database in the clear"
    );
}

/// A vector for the test guest's scheme (hex HMAC-SHA256 of the body), expecting
/// `event_type`.
fn guest_vector(event_type: &str) -> Value {
    let body = r#"{"n":1}"#;
    let signature = hex::encode(hmac_sha256(b"s", &[body.as_bytes()]));
    json!({
        "name": format!("guest: valid signature, {event_type}"),
        "plugin": "uploaded",
        "source": "computed",
        "request": {
            "method": "POST",
            "url": "https://hooks.example.com/webhooks/x",
            "headers": [["x-test-signature", signature], ["x-test-id", "evt_v1"]],
            "body": body
        },
        "secrets": ["s"],
        "now": 1_700_000_000,
        "tolerance_seconds": null,
        "expect": {"outcome": "accept", "secret_index": 0, "event": {"id": "evt_v1", "type": event_type}}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_uploads_a_plugin_that_proves_itself_and_pins_it_by_digest() {
    let server = Server::start(&config()).await;
    let addr = api(&server).await;
    let acme = tenant(addr, "acme").await;
    let globex = tenant(addr, "globex").await;
    let hostile = std::fs::read(guest("hostile")).expect("the test guest");
    let upload =
        |wasm: &[u8], vectors: Vec<Value>| json!({"wasm_base64": b64(wasm), "vectors": vectors});

    // Refused, each with its reason: not a component, a contract this host does not
    // support, vectors that fail.
    let (status, broken) = call(
        addr,
        "POST",
        "/v1/plugins",
        &acme,
        upload(b"\0asm not really", vec![guest_vector("test.event")]),
    )
    .await;
    assert_eq!(
        (status, &broken["error"]),
        (400, &json!("invalid_plugin")),
        "{broken}"
    );
    let future = std::fs::read(guest("future_contract")).expect("the future-contract guest");
    let (status, wrong) = call(
        addr,
        "POST",
        "/v1/plugins",
        &acme,
        upload(&future, vec![guest_vector("test.event")]),
    )
    .await;
    assert_eq!(
        (status, &wrong["error"]),
        (400, &json!("invalid_plugin")),
        "{wrong}"
    );
    assert!(
        wrong["reason"]
            .as_str()
            .expect("reason")
            .contains("exports hookhost:provider/plugin@9.0.0; this hookhost supports"),
        "{wrong}"
    );
    let (status, failing) = call(
        addr,
        "POST",
        "/v1/plugins",
        &acme,
        upload(&hostile, vec![guest_vector("other.event")]),
    )
    .await;
    assert_eq!(
        (status, &failing["error"]),
        (400, &json!("vectors_failed")),
        "{failing}"
    );
    assert!(
        failing["reason"]
            .as_str()
            .expect("reason")
            .contains("other.event"),
        "{failing}"
    );
    // Judging holds a plugin thread every endpoint shares: it stops at the first
    // failing vector, and an upload carries at most 100, refused as the body is read:
    // before the component is even compiled.
    let (status, first) = call(
        addr,
        "POST",
        "/v1/plugins",
        &acme,
        upload(
            &hostile,
            vec![guest_vector("one.event"), guest_vector("two.event")],
        ),
    )
    .await;
    let reason = first["reason"].as_str().unwrap_or("");
    assert_eq!(status, 400, "{first}");
    assert!(
        reason.contains("one.event") && !reason.contains("two.event"),
        "{first}"
    );
    let (status, many) = call(
        addr,
        "POST",
        "/v1/plugins",
        &acme,
        upload(b"not a component", vec![guest_vector("test.event"); 101]),
    )
    .await;
    assert_eq!((status, &many["error"]), (400, &json!("invalid_request")));
    assert!(
        many["reason"]
            .as_str()
            .is_some_and(|r| r.contains("vectors: more than 100 given")),
        "{many}"
    );
    assert_eq!(
        call(addr, "GET", "/v1/plugins", &acme, Value::Null).await,
        (200, json!([]))
    );

    // Accepted: content-addressed, in the tenant's namespace.
    let (status, uploaded) = call(
        addr,
        "POST",
        "/v1/plugins",
        &acme,
        upload(&hostile, vec![guest_vector("test.event")]),
    )
    .await;
    assert_eq!(status, 201, "{uploaded}");
    let digest = uploaded["digest"].as_str().expect("digest").to_string();
    use sha2::Digest as _;
    assert_eq!(
        digest,
        format!("sha256:{}", hex::encode(sha2::Sha256::digest(&hostile)))
    );
    let (_, listed) = call(addr, "GET", "/v1/plugins", &acme, Value::Null).await;
    assert_eq!(listed[0]["digest"], json!(digest));
    assert_eq!(
        call(addr, "GET", "/v1/plugins", &globex, Value::Null).await,
        (200, json!([]))
    );

    // An endpoint pins it by digest and serves with it; another tenant cannot name it.
    let new = json!({"name": "guest", "plugin": digest, "secret": "s"});
    assert_eq!(
        call(addr, "POST", "/v1/endpoints", &acme, new.clone())
            .await
            .0,
        201
    );
    let body = br#"{"n":2}"#.to_vec();
    let answer = server
        .post(
            "acme.guest",
            &guest_headers("s", "evt_u1", &body),
            body.clone(),
        )
        .await;
    assert_eq!(answer.0, 200, "{answer:?}");
    assert_eq!(
        server.receipt("acme.guest", "evt_u1").await.event_type,
        "test.event"
    );
    let (status, theirs) = call(addr, "POST", "/v1/endpoints", &globex, new).await;
    assert_eq!(
        (status, &theirs["error"]),
        (400, &json!("invalid_endpoint")),
        "{theirs}"
    );

    // Shadow replay: a candidate that maps the same requests differently, before the
    // switch; from the API and from the CLI.
    let v01 = std::fs::read(guest("contract_v0_1")).expect("the contract 0.1 guest");
    let (status, second) = call(
        addr,
        "POST",
        "/v1/plugins",
        &acme,
        upload(&v01, vec![guest_vector("legacy.event")]),
    )
    .await;
    assert_eq!(status, 201, "{second}");
    let candidate = second["digest"].as_str().expect("digest").to_string();
    let shadow = json!({"plugin": candidate, "last": 10});
    let (status, report) = call(
        addr,
        "POST",
        "/v1/endpoints/acme.guest/shadow",
        &acme,
        shadow,
    )
    .await;
    assert_eq!(
        (status, &report["requests"], &report["changed"]),
        (200, &json!(1), &json!(1)),
        "{report}"
    );
    let result = &report["results"][0];
    assert_eq!(
        (&result["event_id"], &result["same"]),
        (&json!("evt_u1"), &json!(false))
    );
    assert_eq!(
        result["current"],
        json!({"outcome": "accept", "event_id": "evt_u1", "event_type": "test.event", "disposition": "process"})
    );
    assert_eq!(
        result["candidate"],
        json!({"outcome": "accept", "event_id": "evt_u1", "event_type": "legacy.event", "disposition": "process"})
    );
    let (_, unchanged) = call(
        addr,
        "POST",
        "/v1/endpoints/acme.guest/shadow",
        &acme,
        json!({"plugin": digest}),
    )
    .await;
    assert_eq!(unchanged["changed"], 0, "{unchanged}");
    // Past the documented 1,000, refused, not cut to it.
    let (status, refused) = call(
        addr,
        "POST",
        "/v1/endpoints/acme.guest/shadow",
        &acme,
        json!({"plugin": digest, "last": 5000}),
    )
    .await;
    assert_eq!(
        (status, &refused["reason"]),
        (400, &json!("last: 5000; at most 1000")),
        "{refused}"
    );
    // Another tenant learns nothing of the endpoint, whatever it asks.
    for last in [10, 5000] {
        let shadow = json!({"plugin": digest, "last": last});
        let path = "/v1/endpoints/acme.guest/shadow";
        let (status, theirs) = call(addr, "POST", path, &globex, shadow).await;
        assert_eq!(
            (status, &theirs["error"]),
            (404, &json!("not_found")),
            "{theirs}"
        );
    }
    // A store that does not answer is the store's 503, not the candidate's fault.
    server.break_table("endpoint_secrets").await;
    let shadow = json!({"plugin": candidate});
    let path = "/v1/endpoints/acme.guest/shadow";
    let unavailable = call(addr, "POST", path, &acme, shadow).await;
    assert_eq!(unavailable, (503, json!({"error": "store_unavailable"})));
    server.mend_table("endpoint_secrets").await;
    let config_path = server.config_path();
    let (ok, stdout, stderr) = crate::cli::hookhost(&[
        "shadow",
        "--config",
        &config_path,
        "--endpoint",
        "acme.guest",
        "--plugin",
        &candidate,
    ]);
    assert!(ok, "{stderr}");
    let printed: Value = serde_json::from_str(&stdout).expect("a JSON report");
    assert_eq!(
        (
            &printed["changed"],
            &printed["results"][0]["candidate"]["event_type"]
        ),
        (&json!(1), &json!("legacy.event"))
    );
    // The switch is one replacement of the settings.
    let switched = call(
        addr,
        "PUT",
        "/v1/endpoints/acme.guest",
        &acme,
        json!({"plugin": candidate}),
    )
    .await;
    assert_eq!(switched.0, 200, "{switched:?}");
    let answer = server
        .post(
            "acme.guest",
            &guest_headers("s", "evt_u3", &body),
            body.clone(),
        )
        .await;
    assert_eq!(answer.0, 200);
    assert_eq!(
        server.receipt("acme.guest", "evt_u3").await.event_type,
        "legacy.event"
    );

    // After a restart it is loaded again from the store on first use.
    let server = server.restart(&config()).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let answer = server
            .post(
                "acme.guest",
                &guest_headers("s", "evt_u2", &body),
                body.clone(),
            )
            .await;
        if answer.0 == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not served after a restart: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The uploaded-plugin figures of `/metrics`: (loads, evictions, plugins resident).
async fn residency(admin: SocketAddr) -> (f64, f64, f64) {
    use crate::operations::{ADMIN_TOKEN, get, value};
    let (status, text) = get(admin, "/metrics", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{text}");
    let sample = |name: &str| value(&text, name).unwrap_or_else(|| panic!("no {name} in:\n{text}"));
    (
        sample("hookhost_uploaded_plugin_loads_total"),
        sample("hookhost_uploaded_plugin_evictions_total"),
        sample("hookhost_uploaded_plugins_resident"),
    )
}

/// POST guest events to each endpoint in turn; each is stored with the type its
/// plugin gives.
async fn post_guests(server: &Server, round: &str, turns: &[(&str, &str)]) {
    let body = br#"{"n":1}"#.to_vec();
    for (n, (endpoint, event_type)) in turns.iter().enumerate() {
        let id = format!("evt_{round}_{n}");
        let answer = server
            .post(endpoint, &guest_headers("s", &id, &body), body.clone())
            .await;
        assert_eq!(answer.0, 200, "{endpoint}: {answer:?}");
        assert_eq!(server.receipt(endpoint, &id).await.event_type, *event_type);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_replay_stops_when_its_time_is_spent() {
    // A candidate that spins on every stored request until the plugin time limit stops
    // it (50 ms each): forty of them cannot be judged in the run's one second, and the
    // report says so rather than holding tenants' plugin work for as long as it takes.
    let (server, addr, acme) = acme_shop(&config_with("shadow_seconds = 1\n")).await;
    let hostile = std::fs::read(guest("hostile")).expect("the test guest");
    let upload = json!({"wasm_base64": b64(&hostile), "vectors": [guest_vector("test.event")]});
    let (status, uploaded) = call(addr, "POST", "/v1/plugins", &acme, upload).await;
    assert_eq!(status, 201, "{uploaded}");
    let candidate = uploaded["digest"].as_str().expect("digest").to_string();
    for n in 0..40 {
        let body = stripe_event(&format!("evt_spin_{n}"), "customer.updated", "cus_1", now());
        let mut headers = stripe_headers(&[SECRET], now(), &body);
        headers.push(("x-test-mode", "loop".to_string()));
        assert_eq!(server.post("acme.shop", &headers, body).await.0, 200);
    }

    let path = "/v1/endpoints/acme.shop/shadow";
    let shadow = json!({"plugin": candidate, "last": 40});
    let (status, report) = call(addr, "POST", path, &acme, shadow).await;
    assert_eq!(
        (status, &report["complete"]),
        (200, &json!(false)),
        "{report}"
    );
    let judged = report["results"].as_array().expect("results");
    assert!((1..40).contains(&judged.len()), "{} judged", judged.len());
    assert_eq!(report["requests"], json!(judged.len()));
    for result in judged {
        assert_eq!(
            result["candidate"]["outcome"],
            json!("plugin_failed"),
            "{result}"
        );
    }
    // One within the budget is judged to the end.
    let shadow = json!({"plugin": candidate, "last": 1});
    let (status, report) = call(addr, "POST", path, &acme, shadow).await;
    assert_eq!(
        (status, &report["complete"], &report["requests"]),
        (200, &json!(true), &json!(1)),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploaded_plugins_load_on_first_use_and_leave_when_the_budget_needs_room() {
    // A budget of one byte: one uploaded plugin's code is loaded at a time.
    let server = Server::start(&config_with("resident_plugin_bytes = 1\n")).await;
    let addr = api(&server).await;
    let acme = tenant(addr, "acme").await;
    let mut digests = Vec::new();
    for (name, event_type) in [("hostile", "test.event"), ("contract_v0_1", "legacy.event")] {
        let wasm = std::fs::read(guest(name)).expect("a test guest");
        let upload = json!({"wasm_base64": b64(&wasm), "vectors": [guest_vector(event_type)]});
        let (status, uploaded) = call(addr, "POST", "/v1/plugins", &acme, upload).await;
        assert_eq!(status, 201, "{uploaded}");
        digests.push(uploaded["digest"].as_str().expect("digest").to_string());
    }
    for (name, digest) in ["a", "b"].into_iter().zip(&digests) {
        let new = json!({"name": name, "plugin": digest, "secret": "s"});
        let created = call(addr, "POST", "/v1/endpoints", &acme, new).await;
        assert_eq!(created.0, 201, "{created:?}");
    }
    // Creating "a" checked its configuration with a's plugin, so a's code is loaded
    // (b's plugin speaks contract 0.1, which has no configuration check).
    let admin = crate::operations::admin(&server).await;
    assert_eq!(residency(admin).await, (1.0, 0.0, 1.0));
    // Each request needs the code the one before pushed out.
    let turns = [
        ("acme.b", "legacy.event"),
        ("acme.a", "test.event"),
        ("acme.b", "legacy.event"),
        ("acme.a", "test.event"),
    ];
    post_guests(&server, "tight", &turns).await;
    assert_eq!(
        residency(admin).await,
        (5.0, 4.0, 1.0),
        "(loads, evictions, resident)"
    );
    // An upload's metrics are labelled as one: it could call itself `stripe`.
    let (_, text) =
        crate::operations::get(admin, "/metrics", Some(crate::operations::ADMIN_TOKEN)).await;
    let of_a: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("endpoint=\"acme.a\""))
        .collect();
    assert!(!of_a.is_empty(), "{text}");
    assert!(
        of_a.iter().all(|l| l.contains("plugin=\"upload:hostile\"")),
        "{of_a:#?}"
    );

    // Restarted with the default budget: the endpoints are served before any plugin
    // code is loaded (the configuration checks were kept with them); each plugin
    // loads on its first request, then stays.
    let server = server.restart(&config()).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.app.endpoints.get("acme.b").is_none() {
        assert!(Instant::now() < deadline, "tenant endpoints not loaded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let admin = crate::operations::admin(&server).await;
    assert_eq!(residency(admin).await, (0.0, 0.0, 0.0));
    post_guests(&server, "roomy", &turns).await;
    assert_eq!(residency(admin).await, (2.0, 0.0, 2.0));

    // When the disk cache has lost a plugin's compiled code, loading it reads the
    // component from the store (on a plugin thread) and compiles it again. A copy of
    // the guest with a section naming this run is a component no other test has.
    let Some(cache) = hookhost::plugins::code_cache_dir() else {
        return; // compiled-plugin cache switched off: every load compiles
    };
    let addr = api(&server).await;
    let tag = format!("{}-{}", std::process::id(), now());
    let compiled = |digest: &str| -> Vec<std::path::PathBuf> {
        let hex = digest.trim_start_matches("sha256:");
        std::fs::read_dir(cache)
            .expect("cache dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.file_name().unwrap_or_default().to_string_lossy();
                name.starts_with(hex) && name.ends_with(".cwasm")
            })
            .collect()
    };
    // An upload its vectors refuse is compiled to be judged, but its code is not
    // cached: a tenant's refused uploads would take the room of the code in use.
    let refused = with_custom_section(
        &std::fs::read(guest("hostile")).expect("guest"),
        &format!("{tag}-refused"),
    );
    let upload = json!({"wasm_base64": b64(&refused), "vectors": [guest_vector("not.its.type")]});
    let (status, answer) = call(addr, "POST", "/v1/plugins", &acme, upload).await;
    assert_eq!(
        (status, &answer["error"]),
        (400, &json!("vectors_failed")),
        "{answer}"
    );
    let refused = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&refused));
    assert_eq!(
        compiled(&refused).len(),
        0,
        "a refused upload's code was cached"
    );
    let wasm = with_custom_section(&std::fs::read(guest("hostile")).expect("guest"), &tag);
    let upload = json!({"wasm_base64": b64(&wasm), "vectors": [guest_vector("test.event")]});
    let (status, uploaded) = call(addr, "POST", "/v1/plugins", &acme, upload).await;
    assert_eq!(status, 201, "{uploaded}");
    let digest = uploaded["digest"].as_str().expect("digest").to_string();
    let cached = compiled(&digest);
    assert_eq!(
        cached.len(),
        1,
        "accepting the upload cached its compiled code"
    );
    std::fs::remove_file(&cached[0]).expect("remove the cached code");
    let new = json!({"name": "c", "plugin": digest, "secret": "s"});
    let created = call(addr, "POST", "/v1/endpoints", &acme, new).await;
    assert_eq!(created.0, 201, "{created:?}");
    post_guests(&server, "recompiled", &[("acme.c", "test.event")]).await;
    assert_eq!(compiled(&digest).len(), 1, "compiled and cached again");
    assert_eq!(residency(admin).await, (3.0, 0.0, 3.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_holds_ten_active_secrets_at_most() {
    let (_server, addr, acme) = acme_shop(&config()).await;
    let path = "/v1/endpoints/acme.shop/secrets";
    for n in 2..=10 {
        let added = call(
            addr,
            "POST",
            path,
            &acme,
            json!({"value": format!("whsec_{n}")}),
        )
        .await;
        assert_eq!(added.0, 201, "{added:?}");
    }
    let (status, refused) = call(addr, "POST", path, &acme, json!({"value": "whsec_11"})).await;
    assert_eq!(
        (status, &refused["error"]),
        (409, &json!("too_many_secrets")),
        "{refused}"
    );
    // A retired one makes room.
    let (_, secrets) = call(addr, "GET", path, &acme, Value::Null).await;
    let oldest = secrets[9]["id"]
        .as_str()
        .expect("the first secret")
        .to_string();
    let retired = call(
        addr,
        "POST",
        &format!("{path}/{oldest}/retire"),
        &acme,
        Value::Null,
    )
    .await;
    assert_eq!(retired.0, 200, "{retired:?}");
    let added = call(addr, "POST", path, &acme, json!({"value": "whsec_11"})).await;
    assert_eq!(added.0, 201, "{added:?}");

    // Retired secrets are kept for the record, the ten retired last: rotating on and
    // on does not grow the endpoint's rows.
    for n in 12..=22 {
        let (_, secrets) = call(addr, "GET", path, &acme, Value::Null).await;
        let active = secrets.as_array().expect("secrets").iter().rev();
        let active = active.filter(|s| s["retired_at_ms"].is_null());
        let id = active
            .map(|s| s["id"].as_str().expect("id"))
            .next()
            .expect("an active secret");
        let retire = format!("{path}/{id}/retire");
        assert_eq!(call(addr, "POST", &retire, &acme, Value::Null).await.0, 200);
        let value = json!({"value": format!("whsec_{n}")});
        assert_eq!(call(addr, "POST", path, &acme, value).await.0, 201);
    }
    let (_, secrets) = call(addr, "GET", path, &acme, Value::Null).await;
    let secrets = secrets.as_array().expect("secrets");
    let retired = secrets.iter().filter(|s| !s["retired_at_ms"].is_null());
    assert_eq!((secrets.len(), retired.count()), (20, 10), "{secrets:?}");
    assert!(
        !secrets.iter().any(|s| s["id"] == oldest.as_str()),
        "the first one retired is forgotten: {secrets:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenant_apis_plugin_work_leaves_the_other_plugin_threads_to_ingest() {
    // Configuration checks that spin for their whole time limit (2 s), asked for four at
    // once: run one at a time, they hold one plugin thread, and a webhook sent
    // meanwhile is answered at once. Each holding a thread of its own, they would
    // hold every thread for seconds, and the webhook would wait behind them.
    let server = Server::start(&config()).await;
    let threads = server.app.plugin_threads.threads();
    assert!(
        threads >= 2,
        "needs a plugin thread beside the API's: {threads}"
    );
    let addr = api(&server).await;
    let acme = tenant(addr, "acme").await;
    create_shop(addr, &acme).await;
    let hostile = std::fs::read(guest("hostile")).expect("the test guest");
    let upload = json!({"wasm_base64": b64(&hostile), "vectors": [guest_vector("test.event")]});
    let (status, uploaded) = call(addr, "POST", "/v1/plugins", &acme, upload).await;
    assert_eq!(status, 201, "{uploaded}");
    let digest = uploaded["digest"].as_str().expect("digest").to_string();

    let spinning: Vec<_> = (0..2 * threads)
        .map(|n| {
            let (acme, digest) = (acme.clone(), digest.clone());
            let new = json!({"name": format!("spin{n}"), "plugin": digest, "secret": "s", "config": {"check": "loop"}});
            tokio::spawn(async move { call(addr, "POST", "/v1/endpoints", &acme, new).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = Instant::now();
    assert_eq!(
        post_signed(server.addr, "acme.shop", SECRET, "evt_beside_checks").await,
        200
    );
    let took = sent.elapsed();
    for check in spinning {
        let (status, refused) = check.await.expect("task");
        assert_ne!(status, 201, "{refused}");
    }
    // A containment check, not a benchmark: behind the checks it would be seconds.
    assert!(
        took < Duration::from_millis(1_500),
        "the webhook waited {took:?}"
    );
}

/// `wasm` with a custom section holding `tag` appended: the same code, another digest.
fn with_custom_section(wasm: &[u8], tag: &str) -> Vec<u8> {
    let name = b"hookhost-test";
    let size = 1 + name.len() + tag.len();
    assert!(size < 128, "one-byte LEB128 sizes only");
    let mut out = wasm.to_vec();
    out.extend([0, size as u8, name.len() as u8]);
    out.extend(name);
    out.extend(tag.as_bytes());
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_serves_the_tenant_api_beside_the_admin_api() {
    let bind = || async {
        tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind")
    };
    // Bound here and handed over, so that no other test's socket can take the port
    // between choosing it and serving on it; requests wait in its backlog meanwhile.
    let (listener, admin_listener) = (bind().await, bind().await);
    let admin = admin_listener.local_addr().expect("admin address");
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("hookhost.toml");
    let text = format!("admin_listen = \"{admin}\"\n{}", config());
    let parsed = hookhost::config::Config::parse(&path, &text, &|_| None).expect("config");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = hookhost::run_on(parsed, listener, Some(admin_listener), async {
        let _ = stopped.await;
    });
    let client = async {
        let acme = tenant(admin, "acme").await;
        let auth = |token: &str| [("authorization", format!("Bearer {token}"))];
        let get = |path: &'static str, token: String| async move {
            request(admin, "GET", path, &auth(&token), Default::default())
                .await
                .0
        };
        assert_eq!(
            get("/admin/events", "admin-token-for-tests".into()).await,
            200
        );
        // Each token opens its own API only.
        assert_eq!(get("/admin/events", acme.clone()).await, 401);
        assert_eq!(
            get("/v1/endpoints", "admin-token-for-tests".into()).await,
            401
        );
        assert_eq!(get("/v1/endpoints", acme).await, 200);
        let _ = stop.send(());
    };
    let (served, ()) = tokio::join!(server, client);
    served.expect("served cleanly");

    // An admin API (admin_token) without its listener is a caller's mistake.
    let parsed = hookhost::config::Config::parse(&path, &config(), &|_| None).expect("config");
    let refused = hookhost::run_on(parsed, bind().await, None, async {})
        .await
        .expect_err("admin_token set, so an admin listener is needed");
    assert!(
        refused
            .to_string()
            .contains("an admin listener is served exactly when admin_token is set"),
        "{refused:#}"
    );
}

/// A request body on the admin listener that stops arriving is 408 `body_timeout`
/// once `read_timeout_seconds` pass, as on the ingest port: callers with a token
/// cannot hold its connections mid-body until its connection cap is full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_api_body_is_408() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let server = Server::start(&config_with("[limits]\nread_timeout_seconds = 1\n")).await;
    let addr = api(&server).await;
    let acme = tenant(addr, "acme").await;
    let admin = crate::operations::admin(&server).await;
    for (addr, path, token) in [
        (addr, "/v1/plugins", acme.as_str()),
        (addr, "/v1/tenants", OPERATOR),
        (admin, "/admin/replay", crate::operations::ADMIN_TOKEN),
    ] {
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n\
             content-type: application/json\r\ncontent-length: 1000\r\n\r\n{{\"a"
        );
        stream.write_all(head.as_bytes()).await.expect("write");
        let mut answer = Vec::new();
        let read = async {
            let mut chunk = [0u8; 4096];
            while !String::from_utf8_lossy(&answer).contains("}") {
                match stream.read(&mut chunk).await.expect("read") {
                    0 => break,
                    n => answer.extend_from_slice(&chunk[..n]),
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(15), read)
            .await
            .unwrap_or_else(|_| panic!("{path}: no answer to a stalled body"));
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{path}: {answer}");
        assert!(
            answer.ends_with(r#"{"error":"body_timeout"}"#),
            "{path}: {answer}"
        );
    }

    // A body that keeps arriving gets a second more per 64 KiB: 256 KiB, then a pause
    // twice the timeout, then the rest, is read whole (and refused for what it says).
    let body = format!(r#"{{"pad": "{}"}}"#, "a".repeat(256 * 1024));
    let (first, rest) = body.split_at(256 * 1024);
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /v1/tenants HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {OPERATOR}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    stream.write_all(first.as_bytes()).await.expect("write");
    tokio::time::sleep(Duration::from_secs(2)).await;
    stream.write_all(rest.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(15), async {
        let mut chunk = [0u8; 4096];
        while !String::from_utf8_lossy(&answer).contains("}") {
            match stream.read(&mut chunk).await.expect("read") {
                0 => break,
                n => answer.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .expect("an answer");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("invalid_request"), "{answer}");

    // The deadline is the body's: an upload read in time is compiled and judged for as
    // long as that takes.
    let hostile = std::fs::read(guest("hostile")).expect("the test guest");
    let upload = json!({"wasm_base64": b64(&hostile), "vectors": [guest_vector("test.event")]});
    let (status, uploaded) = call(addr, "POST", "/v1/plugins", &acme, upload).await;
    assert_eq!(status, 201, "{uploaded}");
}
