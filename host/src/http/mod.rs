//! HTTP: the ingest route and the status-code contract with the sender's retry loop.
//!
//! Owns reading the raw body (capped, before anything parses it, within the budget
//! for bodies held at once), the order of the request path, and mapping every outcome
//! to a status and a stable error code. Plugin calls go to the plugin threads; the
//! async workers only wait for them. Never answers 2xx before the receipt is committed.

pub mod admin;
pub mod bodies;
mod error;
pub mod ingest;
pub mod serve;

pub use error::IngestError;

use crate::endpoints::Registry;
use crate::store::Store;
use axum::Router;
use axum::response::Response;
use axum::routing::{any, get};
use std::sync::Arc;

/// What every request handler shares.
#[derive(Debug)]
pub struct App {
    pub endpoints: Registry,
    pub store: Store,
    pub public_url: String,
    pub max_body_bytes: usize,
    /// Each request head, and then each body once it has room in the budget, must
    /// arrive within this (408 past it).
    pub read_timeout: std::time::Duration,
    /// Connections served at once (`[limits] max_connections`).
    pub max_connections: usize,
    /// Request bodies held in memory at once, across all requests.
    pub bodies: bodies::BodyBudget,
    /// Where plugin calls run: one thread per core. The time limit is measured on the
    /// wall clock, so a call must not wait for a core while it runs; requests beyond
    /// the threads wait in its queue, before their plugin starts.
    pub plugin_threads: crate::plugins::threads::PluginThreads,
    /// The worker pool's settings.
    pub delivery: crate::config::DeliveryConfig,
    /// How long settled receipts are kept (the purge job).
    pub retention: crate::config::RetentionConfig,
    /// Every plugin endpoints may use (tenant endpoints are built from it at runtime).
    pub catalog: crate::plugins::Catalog,
    /// Tenants' endpoints and secrets managed through the `/v1` API, when configured.
    pub tenancy: Option<crate::config::TenancyConfig>,
    /// When tenants' secrets last verified a request, until written.
    pub secret_use: crate::tenancy::SecretUse,
    /// Plugins tenants uploaded, compiled in this process on first use.
    pub uploaded: crate::tenancy::Uploaded,
    /// The limits every plugin call runs under (for plugins loaded at runtime).
    pub plugin_limits: crate::plugins::PluginLimits,
    /// Each tenant's ingest rate, in this process.
    pub limiter: crate::tenancy::Limiter,
    /// Keeps requests refused after their body was read.
    pub forensics: crate::forensics::Recorder,
    /// What `/metrics` on the admin listener shows.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Endpoints being reconciled now.
    pub reconciling: crate::reconcile::InProgress,
    /// Set once shutdown begins: the ingest listener is closing, so `/readyz` says
    /// not ready while the admin listener waits for deliveries in flight.
    pub stopping: std::sync::atomic::AtomicBool,
}

/// axum's own refusals (a path, query or body that does not parse, a body that is not
/// JSON, a method the route does not take) come as plain text or empty. On the admin
/// and tenant APIs they answer like every other refusal there: JSON with a stable
/// code (`invalid_request`, `method_not_allowed`, `body_too_large`) and the reason.
pub(crate) async fn json_refusal(response: Response) -> Response {
    use axum::http::{HeaderValue, StatusCode, header};
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    let (status, code) = match response.status() {
        _ if is_json => return response,
        StatusCode::METHOD_NOT_ALLOWED => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        StatusCode::PAYLOAD_TOO_LARGE => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, "invalid_request")
        }
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => {
            (StatusCode::BAD_REQUEST, "invalid_request")
        }
        _ => return response,
    };
    let (mut parts, body) = response.into_parts();
    // axum's reasons are a line of text; more than this is not one of them.
    let reason = axum::body::to_bytes(body, 16 * 1024)
        .await
        .map(|text| String::from_utf8_lossy(&text).trim().to_owned())
        .unwrap_or_default();
    let answer = if reason.is_empty() {
        serde_json::json!({ "error": code })
    } else {
        serde_json::json!({ "error": code, "reason": reason })
    };
    parts.status = status;
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, axum::body::Body::from(answer.to_string()))
}

/// The token of an `Authorization: Bearer <token>` header, or `""`. The scheme's name
/// is case-insensitive and spaces may follow it (RFC 9110, section 11.4), so a client
/// that writes `bearer` is not refused for it.
pub(crate) fn bearer_token(headers: &axum::http::HeaderMap) -> &str {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map_or("", |(_, token)| token.trim_matches(' '))
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/webhooks/{endpoint}", any(ingest::ingest))
        .route("/healthz", get(|| async { "ok\n" }))
        // Any other path: a 404 with a stable code, like every other answer here.
        .fallback(|| async {
            let code = serde_json::json!({ "error": "not_found" });
            (axum::http::StatusCode::NOT_FOUND, axum::Json(code))
        })
        .with_state(app)
}
