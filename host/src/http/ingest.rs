//! `POST /webhooks/{endpoint}`: the request path of ARCHITECTURE.md, in its fixed order.
//! (`GET` reaches the plugin only as a handshake.)

use super::{App, IngestError};
use crate::endpoints::Endpoint;
use crate::store::{NewReceipt, Outcome, Resource};
use crate::verify::{self, Answer, Decision, MessageSource, Verified};
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use hookhost_plugin_sdk::Disposition;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use tracing::Instrument;

pub async fn ingest(
    State(app): State<Arc<App>>,
    Path(endpoint): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let span = tracing::info_span!("ingest", endpoint = %endpoint);
    handle(&app, &endpoint, method, uri, headers, body)
        .instrument(span)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn handle(
    app: &App,
    endpoint_id: &str,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, IngestError> {
    // 1. Resolve the endpoint; only its plugin and secrets are used from here on.
    let endpoint = app
        .endpoints
        .get(endpoint_id)
        .ok_or(IngestError::UnknownEndpoint)?;
    if method != Method::POST && method != Method::GET {
        return Err(IngestError::MethodNotAllowed);
    }

    // 2. The raw body, capped while reading; nothing has parsed it yet.
    let body = read_capped(&headers, body, app.max_body_bytes).await?;
    let received_at_ms = crate::clock::now_ms();
    let headers = raw_headers(&headers);
    let url = format!(
        "{}{}",
        app.public_url,
        uri.path_and_query().map_or("", |p| p.as_str())
    );
    let request = MessageSource {
        method: method.as_str(),
        url: &url,
        headers: &headers,
        body: &body,
    };

    // 3–6. Plugin plans; host checks every candidate against every key in constant
    // time; timestamp window; plugin describes the event. A handshake is answered here.
    let slot = app
        .plugin_slots
        .acquire()
        .await
        .map_err(|_| IngestError::PluginFailed)?;
    let decision = off_the_reactor(|| verify::decide(&endpoint, &request, received_at_ms / 1000))?;
    drop(slot);
    let verified = match decision {
        Decision::Store(verified) => *verified,
        Decision::Answer(answer) => return Ok(handshake(answer)),
    };
    tracing::debug!(event_id = %verified.event_id, event_type = %verified.event.event_type, "verified");

    // 7–8. One transaction: receipt, dedupe, version gate, inbox. 2xx only after commit.
    let receipt = receipt(&endpoint, &verified, &request, received_at_ms);
    let outcome = app.store.record(receipt).await.map_err(|error| {
        tracing::error!(%error, event_id = %verified.event_id, "receipt not stored");
        IngestError::StoreUnavailable
    })?;
    tracing::info!(event_id = %verified.event_id, event_type = %verified.event.event_type, ?outcome, "received");
    Ok(answer(&verified.event_id, outcome))
}

/// Plugin calls are synchronous CPU work, bounded by the plugin time limit, and the
/// sandbox's WASI shims block on the runtime when a plugin touches them: step off the
/// async worker for the call so neither stalls the reactor.
fn off_the_reactor<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        Ok(_) => std::thread::scope(|s| s.spawn(work).join())
            .unwrap_or_else(|p| std::panic::resume_unwind(p)),
        Err(_) => work(),
    }
}

/// Read at most `cap` bytes; a declared or actual length past it is 413.
async fn read_capped(headers: &HeaderMap, body: Body, cap: usize) -> Result<Vec<u8>, IngestError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > cap as u64) {
        return Err(IngestError::BodyTooLarge);
    }
    match Limited::new(body, cap).collect().await {
        Ok(collected) => Ok(collected.to_bytes().to_vec()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(IngestError::BodyTooLarge),
        Err(_) => Err(IngestError::BodyUnreadable),
    }
}

/// Headers as the plugin sees them: lower-case names (the `http` crate's), raw bytes.
fn raw_headers(headers: &HeaderMap) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
        .collect()
}

/// Headers that grant access to something; never stored with a receipt.
const CREDENTIAL_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "x-auth-token",
    "x-gitlab-token",
];

fn receipt(
    endpoint: &Endpoint,
    v: &Verified,
    request: &MessageSource<'_>,
    received_at_ms: i64,
) -> NewReceipt {
    let event = &v.event;
    let resource = Resource::of(event);
    NewReceipt {
        endpoint: endpoint.id.clone(),
        event_id: v.event_id.clone(),
        body_sha256: Sha256::digest(request.body).into(),
        body: request.body.to_vec(),
        headers: request
            .headers
            .iter()
            .filter(|(name, _)| !CREDENTIAL_HEADERS.contains(&name.as_str()))
            .map(|(name, value)| (name.clone(), String::from_utf8_lossy(value).into_owned()))
            .collect(),
        secret_index: v.secret_index,
        plugin: endpoint.plugin.info.name.clone(),
        plugin_version: endpoint.plugin.info.version.clone(),
        plugin_digest: endpoint.plugin.digest.clone(),
        message_id: v.plan.message_id.clone(),
        event_type: event.event_type.clone(),
        resource,
        occurred_at: event.occurred_at,
        signed_at: v.plan.timestamp,
        received_at_ms,
        ignore: match &event.disposition {
            Disposition::Ignore(reason) => Some(reason.clone()),
            Disposition::Process | Disposition::Reject(_) | Disposition::Answer(_) => None,
        },
    }
}

/// A handshake's answer, as the plugin shaped it and the host rendered it.
fn handshake(answer: Answer) -> Response {
    tracing::info!(status = answer.status, "handshake answered");
    let mut response = Response::new(Body::from(answer.body));
    *response.status_mut() = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    let headers = response.headers_mut();
    if let Ok(value) = header::HeaderValue::from_str(&answer.content_type) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    for (name, value) in answer.headers {
        // `verify::decide` checked every name and value.
        if let (Ok(name), Ok(value)) = (
            header::HeaderName::from_bytes(name.as_bytes()),
            header::HeaderValue::from_str(&value),
        ) {
            headers.append(name, value);
        }
    }
    response
}

/// The 200 answers: stored, duplicate, or deliberately ignored (with the reason).
fn answer(event_id: &str, outcome: Outcome) -> Response {
    let body = match outcome {
        Outcome::Accepted => serde_json::json!({ "status": "accepted", "event_id": event_id }),
        Outcome::Duplicate => serde_json::json!({ "status": "duplicate", "event_id": event_id }),
        Outcome::Conflict => {
            serde_json::json!({ "ignored": "conflicting_duplicate", "event_id": event_id })
        }
        Outcome::StaleVersion => {
            serde_json::json!({ "ignored": "stale_version", "event_id": event_id })
        }
        Outcome::SameVersion => {
            serde_json::json!({ "ignored": "same_version", "event_id": event_id })
        }
        Outcome::ResourceDeleted => {
            serde_json::json!({ "ignored": "resource_deleted", "event_id": event_id })
        }
        Outcome::Ignored(reason) => serde_json::json!({ "ignored": reason, "event_id": event_id }),
    };
    (StatusCode::OK, Json(body)).into_response()
}
