//! The admin API, on its own listener: the operator tools over HTTP.
//!
//! Every route, known or not, requires `Authorization: Bearer <admin token>`
//! (compared in constant time); without it the answer is 401 and nothing else. The
//! probes `/healthz` and `/readyz` are the exception: they say up or ready, no more.

use super::App;
use crate::forensics::{self, ForensicsError, REDACTED};
use crate::store::{Filter, ForensicFilter};
use crate::verify::Secret;
use axum::Json;
use axum::extract::{Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use std::sync::Arc;
use subtle::ConstantTimeEq;

#[derive(Clone)]
struct Admin {
    app: Arc<App>,
    token: Arc<Secret>,
}

/// The admin router; `token` is the bearer token every call must carry.
pub fn router(app: Arc<App>, token: Secret) -> axum::Router {
    let admin = Admin {
        app,
        token: Arc::new(token),
    };
    axum::Router::new()
        .route("/admin/events", get(list))
        .route("/admin/dlq", get(dead_letters))
        .route("/admin/events/{endpoint}/{event_id}", get(show))
        .route(
            "/admin/events/{endpoint}/{event_id}/replay",
            post(replay_one),
        )
        .route("/admin/events/{endpoint}/{event_id}/discard", post(discard))
        .route("/admin/replay", post(replay_filtered))
        .route("/admin/forensics", get(forensics_list))
        .route("/admin/forensics/{id}", get(forensics_show))
        .route("/admin/forensics/{id}/verify", post(forensics_verify))
        .route("/admin/forensics/{id}/reingest", post(forensics_reingest))
        .route("/admin/reconcile/{endpoint}", post(reconcile_now))
        .route(
            "/admin/reconcile/runs",
            get(reconcile_runs).post(reconcile_endpoint_named_runs),
        )
        .route("/admin/reconcile/runs/{id}", get(reconcile_run))
        .route("/admin/endpoints/{endpoint}/pause", post(pause))
        .route("/admin/endpoints/{endpoint}/resume", post(resume))
        .route("/metrics", get(metrics))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found") })
        .layer(middleware::map_response(super::json_refusal))
        .layer(middleware::from_fn_with_state(
            admin.app.read_timeout,
            super::body_deadline,
        ))
        // Outermost, so it also guards the fallback: no token, no information.
        .layer(middleware::from_fn_with_state(admin.clone(), authorize))
        // Probes carry no token and learn nothing but up or ready.
        .merge(
            axum::Router::new()
                .route("/healthz", get(|| async { "ok\n" }))
                .route("/readyz", get(ready)),
        )
        .with_state(admin)
}

/// Prometheus text exposition (OpenMetrics) of the server's metrics. The backlog
/// gauges are read from the store at each scrape (the index of pending receipts
/// answers it); when the store does not answer, they keep their last values. The
/// series of an endpoint deleted since the last scrape are gone.
async fn metrics(State(admin): State<Admin>) -> Response {
    let app = &admin.app;
    app.metrics
        .forget_gone(|id| app.endpoints.get(id).is_some());
    match app.store.backlog().await {
        Ok(backlog) => {
            let endpoints = app.endpoints.with_destinations();
            app.metrics
                .backlog(&endpoints, &backlog, crate::clock::now_ms());
        }
        Err(error) => tracing::warn!(%error, "metrics: backlog not read"),
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        admin.app.metrics.render(),
    )
        .into_response()
}

/// 200 when this server can take requests: its plugins are loaded and its
/// migrations applied (it would not have started otherwise), and the store answers
/// (on SQLite, its receipt writer commits too: see `Store::ready`). 503
/// `store_unavailable` when it does not, or before the tenants' endpoints are first
/// read from it (their requests are answered 503 until then); 503 `shutting_down` once
/// a shutdown has closed the ingest listener.
async fn ready(State(admin): State<Admin>) -> Response {
    if admin.app.stopping.load(std::sync::atomic::Ordering::SeqCst) {
        return error(StatusCode::SERVICE_UNAVAILABLE, "shutting_down");
    }
    if !admin.app.endpoints.managed_loaded() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable");
    }
    match admin.app.store.ready().await {
        Ok(_) => Json(serde_json::json!({ "ready": true })).into_response(),
        Err(e) => store_error(e),
    }
}

async fn authorize(State(admin): State<Admin>, request: Request, next: Next) -> Response {
    let presented = super::bearer_token(request.headers());
    let expected = admin.token.expose().as_bytes();
    if bool::from(presented.as_bytes().ct_eq(expected)) && !expected.is_empty() {
        next.run(request).await
    } else {
        error(StatusCode::UNAUTHORIZED, "unauthorized")
    }
}

fn error(status: StatusCode, code: &str) -> Response {
    (status, Json(serde_json::json!({ "error": code }))).into_response()
}

/// `{"error": code, "reason": …}`: a refusal that says why.
fn refused(status: StatusCode, code: &str, reason: &str) -> Response {
    (
        status,
        Json(serde_json::json!({ "error": code, "reason": reason })),
    )
        .into_response()
}

/// 400 `invalid_filter`: the filter names what does not exist.
fn invalid_filter(reason: &str) -> Response {
    refused(StatusCode::BAD_REQUEST, "invalid_filter", reason)
}

/// A filter's endpoint, if it names one, is served or has something stored (one since
/// removed): a mistyped one is 400 `invalid_filter`, as in the CLI, rather than a
/// listing or a replay of nothing that reads as "nothing there".
async fn endpoint_known(app: &App, endpoint: Option<&str>) -> Result<(), Response> {
    let Some(endpoint) = endpoint else {
        return Ok(());
    };
    if app.endpoints.get(endpoint).is_some() {
        return Ok(());
    }
    match app.store.holds(endpoint).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(invalid_filter(&format!(
            "endpoint: no endpoint {endpoint:?} is served or has anything stored"
        ))),
        Err(e) => Err(store_error(e)),
    }
}

/// 400 `invalid_request`: a body that does not parse.
fn invalid_request(reason: String) -> Response {
    refused(StatusCode::BAD_REQUEST, "invalid_request", &reason)
}

fn store_error(e: crate::store::StoreError) -> Response {
    tracing::error!(error = %e, "admin API: store error");
    error(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable")
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReconcileRequest {
    /// `24h`, `30m`, `7d`, `90s` or a unix timestamp; default: the endpoint's look-back.
    since: Option<String>,
    #[serde(default)]
    dry_run: bool,
}

/// `POST /admin/reconcile/runs`: `runs` is a valid endpoint id too, and this path,
/// which also lists the runs, would otherwise refuse its reconciliation as 405.
async fn reconcile_endpoint_named_runs(admin: State<Admin>, body: axum::body::Bytes) -> Response {
    reconcile_now(admin, Path("runs".to_string()), body).await
}

/// Reconcile an endpoint now and answer with the run as it ended (`done` or
/// `failed`). The run goes on if the caller hangs up; it can be read back by id.
async fn reconcile_now(
    State(admin): State<Admin>,
    Path(endpoint): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    use crate::reconcile::ReconcileError as E;
    let request = if body.iter().all(u8::is_ascii_whitespace) {
        ReconcileRequest {
            since: None,
            dry_run: false,
        }
    } else {
        match serde_json::from_slice::<ReconcileRequest>(&body) {
            Ok(request) => request,
            Err(e) => return invalid_request(e.to_string()),
        }
    };
    let Some(served) = admin.app.endpoints.get(&endpoint) else {
        return error(StatusCode::NOT_FOUND, "unknown_endpoint");
    };
    let Some(settings) = &served.reconcile else {
        return error(StatusCode::CONFLICT, "not_configured");
    };
    let now = crate::clock::now_ms() / 1000;
    let since = match &request.since {
        Some(text) => match crate::reconcile::parse_since(text, now) {
            Ok(since) => since,
            Err(reason) => return invalid_request(format!("since: {reason}")),
        },
        None => now - i64::try_from(settings.lookback.as_secs()).unwrap_or(i64::MAX),
    };
    let options = crate::reconcile::Options {
        since,
        dry_run: request.dry_run,
    };
    let app = admin.app.clone();
    let running =
        tokio::spawn(async move { crate::reconcile::run(&app, &endpoint, options).await });
    match running.await {
        Ok(Ok(run)) => Json(run).into_response(),
        Ok(Err(E::AlreadyRunning(_))) => error(StatusCode::CONFLICT, "already_running"),
        Ok(Err(E::NotSupported(_))) => error(StatusCode::CONFLICT, "reconcile_unsupported"),
        Ok(Err(E::UnknownEndpoint(_))) => error(StatusCode::NOT_FOUND, "unknown_endpoint"),
        Ok(Err(E::NotConfigured(_))) => error(StatusCode::CONFLICT, "not_configured"),
        Ok(Err(E::Store(e))) => store_error(e),
        Ok(Err(E::Plugin(reason))) => {
            tracing::error!(%reason, "reconciliation: plugin failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, "plugin_failed")
        }
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunsQuery {
    endpoint: Option<String>,
    /// Negative is refused (400 `invalid_request`), as on every other listing.
    limit: Option<u32>,
}

async fn reconcile_runs(State(admin): State<Admin>, Query(query): Query<RunsQuery>) -> Response {
    if let Err(refused) = endpoint_known(&admin.app, query.endpoint.as_deref()).await {
        return refused;
    }
    let limit = i64::from(query.limit.unwrap_or(50).min(1000));
    match admin.app.store.runs(query.endpoint.as_deref(), limit).await {
        Ok(runs) => Json(runs).into_response(),
        Err(e) => store_error(e),
    }
}

async fn reconcile_run(State(admin): State<Admin>, Path(id): Path<String>) -> Response {
    match admin.app.store.run(&id).await {
        Ok(Some((run, repairs))) => {
            Json(serde_json::json!({"run": run, "repairs": repairs})).into_response()
        }
        Ok(None) => error(StatusCode::NOT_FOUND, "unknown_run"),
        Err(e) => store_error(e),
    }
}

async fn list(State(admin): State<Admin>, Query(query): Query<Filter>) -> Response {
    if let Err(reason) = query.check() {
        return invalid_filter(&reason);
    }
    if let Err(refused) = endpoint_known(&admin.app, query.endpoint.as_deref()).await {
        return refused;
    }
    match admin.app.store.list(&query).await {
        Ok(events) => Json(events).into_response(),
        Err(e) => store_error(e),
    }
}

async fn dead_letters(State(admin): State<Admin>, Query(query): Query<Filter>) -> Response {
    if !query.states.is_empty() {
        return invalid_filter(
            "state: the dead-letter queue is the dead and quarantined events; \
             /admin/events takes a state",
        );
    }
    if let Err(refused) = endpoint_known(&admin.app, query.endpoint.as_deref()).await {
        return refused;
    }
    let mut filter = query;
    filter.states = vec!["dead".into(), "quarantined".into()];
    match admin.app.store.list(&filter).await {
        Ok(events) => Json(events).into_response(),
        Err(e) => store_error(e),
    }
}

async fn show(
    State(admin): State<Admin>,
    Path((endpoint, event_id)): Path<(String, String)>,
) -> Response {
    match admin.app.store.show(&endpoint, &event_id).await {
        Ok(Some(mut event)) => {
            redact_signatures(&admin.app, &endpoint, &mut event).await;
            Json(event).into_response()
        }
        Ok(None) => error(StatusCode::NOT_FOUND, "unknown_event"),
        Err(e) => store_error(e),
    }
}

/// The store keeps signature headers as they came (re-verifying needs them); the API
/// never shows their values. The endpoint's plugin plans the stored request again, and
/// the headers holding one of its candidate signatures are redacted. When that cannot
/// be done (the endpoint is gone, the plugin refuses the request now), every header
/// value is. The CLI's `events show` shows the same.
pub async fn redact_signatures(app: &App, endpoint_id: &str, event: &mut serde_json::Value) {
    crate::tenancy::open_shown(app, endpoint_id, event);
    let headers: Vec<(String, String)> =
        serde_json::from_value(event["headers"].clone()).unwrap_or_default();
    let body = event["body"]
        .as_str()
        .unwrap_or_default()
        .as_bytes()
        .to_vec();
    let carrying = match app.endpoints.get(endpoint_id) {
        Some(endpoint) => {
            // Without the query the request came with (not shown): a plugin that needs
            // it plans nothing, and every header is hidden.
            let url = crate::verify::stored_url(&app.public_url, endpoint_id, None);
            let stored = headers.clone();
            app.plugin_threads
                .run(move || {
                    let plan = crate::verify::replan(&endpoint, &url, &stored, &body).ok()?;
                    Some(crate::spec::carrying_headers(&stored, &plan.candidates))
                })
                .await
                .ok()
                .flatten()
        }
        None => None,
    };
    let redacted: Vec<(String, String)> = headers
        .into_iter()
        .map(|(name, value)| {
            let hide = carrying.as_ref().is_none_or(|names| names.contains(&name));
            (name, if hide { REDACTED.to_string() } else { value })
        })
        .collect();
    event["headers"] = serde_json::json!(redacted);
}

/// `?remap=true`: map the event again with the endpoint's current plugin first.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RemapQuery {
    #[serde(default)]
    remap: bool,
}

async fn replay_one(
    State(admin): State<Admin>,
    Path((endpoint, event_id)): Path<(String, String)>,
    Query(options): Query<RemapQuery>,
) -> Response {
    // An event that is not there (a mistyped endpoint or id) is 404, as for a discard,
    // not `{"replayed": 0}`, which reads as "nothing to do".
    match admin.app.store.receipt(&endpoint, &event_id).await {
        Ok(Some(_)) => replay(&admin, &Filter::one(&endpoint, &event_id), options.remap).await,
        Ok(None) => error(StatusCode::NOT_FOUND, "unknown_event"),
        Err(e) => store_error(e),
    }
}

/// `POST /admin/replay`: a filter (the list query's fields) and `remap`. The filter is
/// read from what is left once `remap` is taken out, so that a misspelled key is
/// refused by name (`Filter` denies unknown fields; through `#[serde(flatten)]` it
/// would have been dropped silently, and the replay widened to every event).
async fn replay_filtered(
    State(admin): State<Admin>,
    Json(mut body): Json<serde_json::Map<String, serde_json::Value>>,
) -> Response {
    let remap = match body.remove("remap") {
        None => false,
        Some(serde_json::Value::Bool(remap)) => remap,
        Some(other) => {
            return invalid_request(format!("remap: expected true or false, got {other}"));
        }
    };
    let filter: Filter = match serde_json::from_value(serde_json::Value::Object(body)) {
        Ok(filter) => filter,
        Err(e) => return invalid_request(e.to_string()),
    };
    if let Err(reason) = filter.check() {
        return invalid_filter(&reason);
    }
    if let Err(refused) = endpoint_known(&admin.app, filter.endpoint.as_deref()).await {
        return refused;
    }
    replay(&admin, &filter, remap).await
}

async fn replay(admin: &Admin, filter: &Filter, remap: bool) -> Response {
    match crate::replay(&admin.app, filter, remap).await {
        Ok(replayed) => Json(serde_json::json!({ "replayed": replayed })).into_response(),
        Err(e) => match e.downcast::<crate::store::StoreError>() {
            Ok(e) => store_error(e),
            Err(e) => {
                let reason = format!("{e:#}");
                tracing::error!(error = reason, "admin API: replay failed");
                refused(StatusCode::UNPROCESSABLE_ENTITY, "replay_failed", &reason)
            }
        },
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscardBody {
    reason: String,
}

async fn discard(
    State(admin): State<Admin>,
    Path((endpoint, event_id)): Path<(String, String)>,
    Json(body): Json<DiscardBody>,
) -> Response {
    match admin
        .app
        .store
        .discard(&endpoint, &event_id, &body.reason)
        .await
    {
        Ok(true) => Json(serde_json::json!({ "discarded": event_id })).into_response(),
        // Nothing was waiting for delivery under that id: say whether there is an event.
        Ok(false) => match admin.app.store.receipt(&endpoint, &event_id).await {
            Ok(Some(_)) => error(StatusCode::CONFLICT, "not_discardable"),
            Ok(None) => error(StatusCode::NOT_FOUND, "unknown_event"),
            Err(e) => store_error(e),
        },
        Err(e) => store_error(e),
    }
}

async fn pause(State(admin): State<Admin>, Path(endpoint): Path<String>) -> Response {
    set_paused(&admin, &endpoint, true).await
}

async fn resume(State(admin): State<Admin>, Path(endpoint): Path<String>) -> Response {
    set_paused(&admin, &endpoint, false).await
}

async fn set_paused(admin: &Admin, endpoint: &str, paused: bool) -> Response {
    if admin.app.endpoints.get(endpoint).is_none() {
        return error(StatusCode::NOT_FOUND, "unknown_endpoint");
    }
    match admin
        .app
        .store
        .set_paused(endpoint, paused, crate::clock::now_ms())
        .await
    {
        Ok(()) => {
            Json(serde_json::json!({ "endpoint": endpoint, "paused": paused })).into_response()
        }
        Err(e) => store_error(e),
    }
}

/// Requests refused after their body was read, newest first (`?endpoint=&kind=&limit=`).
async fn forensics_list(
    State(admin): State<Admin>,
    Query(filter): Query<ForensicFilter>,
) -> Response {
    if let Err(reason) = filter.check() {
        return invalid_filter(&reason);
    }
    if let Err(refused) = endpoint_known(&admin.app, filter.endpoint.as_deref()).await {
        return refused;
    }
    match admin.app.store.forensics(&filter).await {
        Ok(kept) => Json(kept).into_response(),
        Err(e) => store_error(e),
    }
}

/// One kept request: detail, redacted headers, body (when kept).
async fn forensics_show(State(admin): State<Admin>, Path(id): Path<i64>) -> Response {
    match admin.app.store.forensic(id).await {
        Ok(Some(row)) => {
            let key = admin.app.tenancy.as_ref().map(|t| &t.master_key);
            Json(forensics::shown(&row, key)).into_response()
        }
        Ok(None) => forensics_error(&ForensicsError::Unknown(id)),
        Err(e) => store_error(e),
    }
}

/// Verify a kept request again with the current secrets and plugin; nothing is stored.
async fn forensics_verify(State(admin): State<Admin>, Path(id): Path<i64>) -> Response {
    match forensics::reverify(&admin.app, id).await {
        Ok((verdict, _)) => Json(verdict).into_response(),
        Err(e) => forensics_error(&e),
    }
}

/// Ingest a kept request that now passes, under the event id its plugin gives it.
async fn forensics_reingest(State(admin): State<Admin>, Path(id): Path<i64>) -> Response {
    match forensics::reingest(&admin.app, id).await {
        Ok(reingested) => Json(reingested).into_response(),
        Err(e) => forensics_error(&e),
    }
}

fn forensics_error(e: &ForensicsError) -> Response {
    let (status, code) = e.status_and_code();
    if let ForensicsError::Store(error) = e {
        tracing::error!(%error, "admin API: store error");
    }
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    refused(status, code, &e.to_string())
}
