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

/// On the admin listener, a request body must arrive within `read_timeout` of the
/// request reaching its route, and a second more for each [`BODY_RATE`] bytes it has
/// delivered: past that, reading it fails and the answer is 408 `body_timeout`. A
/// large plugin upload on a slow link arrives; a caller with a token holding
/// connections open mid-body, a byte at a time, until the listener's connection cap
/// is full and no operator, tenant or probe is served, does not.
pub(crate) async fn body_deadline(
    axum::extract::State(timeout): axum::extract::State<std::time::Duration>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let late = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = tokio::time::Instant::now();
    let request = request.map(|body| {
        axum::body::Body::new(Timed {
            inner: body,
            deadline: Box::pin(tokio::time::sleep_until(started + timeout)),
            due: started + timeout,
            received: 0,
            late: late.clone(),
        })
    });
    let response = next.run(request).await;
    if late.load(std::sync::atomic::Ordering::SeqCst) {
        let body = axum::Json(serde_json::json!({ "error": "body_timeout" }));
        return axum::response::IntoResponse::into_response((
            axum::http::StatusCode::REQUEST_TIMEOUT,
            body,
        ));
    }
    response
}

/// Bytes a second an admin listener's request body is allowed beyond its
/// `read_timeout` (see [`body_deadline`]).
pub const BODY_RATE: u64 = 64 * 1024;

/// A request body whose reading fails once `deadline` passes, setting `late`. The
/// deadline is `due` and moves on by a second for each [`BODY_RATE`] bytes received.
struct Timed {
    inner: axum::body::Body,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    due: tokio::time::Instant,
    received: u64,
    late: Arc<std::sync::atomic::AtomicBool>,
}

impl http_body::Body for Timed {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        let this = self.get_mut();
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.late.store(true, std::sync::atomic::Ordering::SeqCst);
            return Poll::Ready(Some(Err(axum::Error::new("the body came too late"))));
        }
        let polled = std::pin::Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            this.received = this.received.saturating_add(data.len() as u64);
            let more =
                std::time::Duration::from_millis(this.received.saturating_mul(1000) / BODY_RATE);
            this.deadline.as_mut().reset(this.due + more);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
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
