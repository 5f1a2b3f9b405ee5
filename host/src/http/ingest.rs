//! `POST /webhooks/{endpoint}`: the request path of ARCHITECTURE.md, in its fixed order.
//! (`GET` reaches the plugin only as a handshake.)
//!
//! The async task reads the body (within the body budget) and waits; steps 3–6 and
//! building the receipt run on a plugin thread, which takes the request's owned parts
//! and hands the receipt (holding the body, never copied after it was read) straight
//! to the store's next batch, or answers a handshake or a refusal itself. The task
//! wakes once, for the answer: a wake between the two threads cost more CPU than
//! the work it passed on (docs/performance.md, section 39).

use super::bodies::{BodyBudget, Reservation};
use super::{App, IngestError};
use crate::endpoints::Endpoint;
use crate::forensics::{self, Refused};
use crate::metrics::RequestOutcome;
use crate::plugins::threads::ThreadFailure;
use crate::store::{COMMIT_TIMEOUT, NewReceipt, Outcome, Reply, Resource, StoreError};
use crate::verify::{self, Answer, Decision, MessageSource, Trail, Verified};
use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use hookhost_plugin_sdk::Disposition;
use http_body_util::BodyExt;
use hyper::body::Body as _;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;
use tracing::Instrument;

pub async fn ingest(
    State(app): State<Arc<App>>,
    endpoint: Result<Path<String>, PathRejection>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // 1. Resolve the endpoint; only its plugin and secrets are used from here on. A
    // name that does not decode (`%FF`) names no endpoint either.
    let endpoint = endpoint.map_or_else(|_| String::new(), |Path(name)| name);
    let known = app.endpoints.get(&endpoint);
    // Every line of the request carries these, each from when it is known.
    let span = tracing::info_span!(
        "ingest",
        endpoint = %endpoint,
        plugin = known.as_deref().map(|e| e.plugin.name()),
        event_id = tracing::field::Empty,
        event_type = tracing::field::Empty,
    );
    let resolved = known.clone().ok_or_else(|| not_served(&app, &endpoint));
    let answered = handle(&app, resolved, method, uri, headers, body)
        .instrument(span)
        .await;
    // Labels only for configured endpoints: a sender cannot invent label values.
    let (endpoint, plugin) = known
        .as_deref()
        .map_or(("", ""), |e| (e.id.as_str(), e.plugin.label()));
    let (response, outcome) = match answered {
        Ok(answered) => answered,
        Err(error) => {
            if let IngestError::TimestampOutsideWindow { skew_seconds } = error {
                app.metrics.outside_window(endpoint, plugin, skew_seconds);
            }
            let code = error.status_and_code().1;
            (error.into_response(), RequestOutcome::Error(code))
        }
    };
    app.metrics.request(endpoint, plugin, &outcome);
    response
}

/// Why no endpoint serves `id`: none is known (404, which tells senders to stop), or
/// it may be a tenant's not yet read from the store, or not built (503, which they
/// retry).
fn not_served(app: &App, id: &str) -> IngestError {
    if app.endpoints.pending(id) {
        IngestError::StoreUnavailable
    } else {
        IngestError::UnknownEndpoint
    }
}

async fn handle(
    app: &Arc<App>,
    endpoint: Result<Arc<Endpoint>, IngestError>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<(Response, RequestOutcome), IngestError> {
    let endpoint = endpoint?;
    if method != Method::POST && method != Method::GET {
        return Err(IngestError::MethodNotAllowed);
    }
    // A tenant's endpoint: within the tenant's request rate, before the body is read.
    if let Some(tenant) = &endpoint.tenant {
        app.limiter.admit(tenant)?;
    }

    // 2. The raw body, capped while reading; nothing has parsed it yet. Its room in
    // the budget for bodies in memory is held until the answer is ready, and by a
    // receipt until the store is done with it.
    let (body, room) = read_capped(&app.bodies, body, app.max_body_bytes, app.read_timeout).await?;
    let received_at_ms = crate::clock::now_ms();
    let received = Instant::now();
    let url = format!(
        "{}{}",
        app.public_url,
        uri.path_and_query().map_or("", |p| p.as_str())
    );

    // 3–8. On a plugin thread: the plugin plans; the host checks every candidate
    // against every key in constant time; timestamp window; the plugin describes the
    // event. A handshake is answered from there; a receipt goes from there to the
    // store's next batch (7–8: one transaction for receipt, dedupe, version gate and
    // inbox), which answers after its commit. This task wakes once, for the answer.
    let (span, on_thread, stored_by) = (tracing::Span::current(), endpoint.clone(), app.clone());
    let (settle, settled) = oneshot::channel();
    app.plugin_threads
        .dispatch(move || {
            if settle.is_closed() {
                return; // The sender hung up while the call waited for a thread.
            }
            let _in_request = span.enter();
            let started = Instant::now();
            // As the plugin sees them: lower-case names (the `http` crate's), raw bytes.
            let headers = verify::owned_headers(&headers);
            let judged = judge(
                &on_thread,
                method.as_str(),
                url,
                headers,
                body,
                received_at_ms,
            );
            let took = started.elapsed();
            match judged {
                // Deleted while its body was read and judged: its receipt would wait
                // for a destination that is gone, or go to one created since.
                Ok(Judged::Store(_)) if !stored_by.endpoints.still_serves(&on_thread) => {
                    drop(settle.send(Settled::Gone))
                }
                Ok(Judged::Store(receipt)) => {
                    let event = Event::of(&receipt, took);
                    let reply = Reply::new(move |outcome| {
                        drop(room);
                        let _ = settle.send(Settled::Stored(event, outcome));
                    });
                    stored_by.store.queue(receipt, reply);
                }
                Ok(Judged::Answer(answer)) => drop(settle.send(Settled::Answer(answer))),
                Err(refused) => drop(settle.send(Settled::Refused(refused, room))),
            }
        })
        .await
        .inspect_err(|failure| match failure {
            // Overload, answered 429 and counted as `overloaded`: a line for each
            // request would grow the log with any sender's rate, unsigned or not.
            ThreadFailure::Busy => tracing::debug!(%failure, "plugin call not started"),
            _ => tracing::error!(%failure, "plugin call not started"),
        })?;
    // The store's limit on a commit's wait, counted here from the plugin call's queueing
    // (the call's own limit is far shorter).
    let settled = tokio::time::timeout(COMMIT_TIMEOUT, settled)
        .await
        .map_err(|_| {
            tracing::error!("receipt not stored: not committed within {COMMIT_TIMEOUT:?}");
            IngestError::StoreUnavailable
        })?
        .map_err(|_| {
            tracing::error!("plugin call did not answer");
            IngestError::PluginFailed
        })?;
    let (event, outcome) = match settled {
        Settled::Stored(event, outcome) => (event, outcome),
        Settled::Answer(answer) => return Ok((handshake(answer), RequestOutcome::Handshake)),
        // Kept for forensics: what arrived, and why it was refused. Boxed: inline, this
        // rare path's future would be most of every request's (3,400 bytes, not 944).
        // The body's room is held until forensics has its copy.
        Settled::Refused(refused, _room) => {
            return Err(Box::pin(forensics::keep(app, &endpoint, received_at_ms, *refused)).await);
        }
        Settled::Gone => return Err(not_served(app, &endpoint.id)),
    };
    // Recorded here, on the thread that made the span, not on the plugin thread: the
    // span's stored fields grow where they are recorded, and growing them there cost
    // more (docs/performance.md, section 17).
    let span = tracing::Span::current();
    span.record("event_id", event.id.as_str());
    span.record("event_type", event.event_type.as_str());
    let skew = event
        .signed_at
        .map(|t| (received_at_ms / 1000).saturating_sub(t));
    app.metrics.verified(
        &endpoint.id,
        endpoint.plugin.label(),
        event.secret_index,
        skew,
        event.took,
    );
    if let Some(tenant) = &endpoint.tenant {
        app.secret_use
            .matched(tenant, event.secret_index, received_at_ms);
    }
    let outcome = outcome.map_err(|error| match error {
        StoreError::Overloaded => {
            tracing::warn!(%error, "receipt not stored");
            IngestError::Overloaded
        }
        error => {
            tracing::error!(%error, "receipt not stored");
            IngestError::StoreUnavailable
        }
    })?;
    if outcome != Outcome::Duplicate {
        app.metrics
            .committed(&endpoint.id, endpoint.plugin.label(), received.elapsed());
    }
    tracing::info!(?outcome, "received");
    Ok((answer(&event.id, &outcome), RequestOutcome::Stored(outcome)))
}

/// How a request's plugin call and commit end, as its task is told.
enum Settled {
    Stored(Event, Result<Outcome, StoreError>),
    Answer(Answer),
    Refused(Box<Refused>, Reservation),
    /// The endpoint was deleted before its receipt went to the store.
    Gone,
}

/// What the request's task needs of a queued receipt, for its span, metrics and
/// answer; the receipt itself has gone to the store.
struct Event {
    id: String,
    event_type: String,
    signed_at: Option<i64>,
    secret_index: usize,
    /// The plugin thread's part: the plugin calls, the MACs and building the receipt.
    took: std::time::Duration,
}

impl Event {
    fn of(receipt: &NewReceipt, took: std::time::Duration) -> Event {
        Event {
            id: receipt.event_id.clone(),
            event_type: receipt.event_type.clone(),
            signed_at: receipt.signed_at,
            secret_index: receipt.secret_index,
            took,
        }
    }
}

/// What a plugin thread hands back: a receipt to store, or a handshake's answer.
pub(crate) enum Judged {
    Store(Box<NewReceipt>),
    Answer(Answer),
}

/// Steps 3–6 and the receipt, on a plugin thread: the plugin calls, the MACs over the
/// body and its digest are all CPU work. The body moves into the receipt, uncopied;
/// a refused request hands everything back, for forensics. Also judges a kept request
/// again (`forensics::reverify`), with its arrival time as the clock.
pub(crate) fn judge(
    endpoint: &Endpoint,
    method: &str,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    received_at_ms: i64,
) -> Result<Judged, Box<Refused>> {
    let request = MessageSource {
        method,
        url: &url,
        headers: &headers,
        body: &body,
    };
    let mut trail = Trail::default();
    let verified = match verify::decide(endpoint, &request, received_at_ms / 1000, &mut trail) {
        Ok(Decision::Store(verified)) => *verified,
        Ok(Decision::Answer(answer)) => return Ok(Judged::Answer(answer)),
        Err(error) => {
            let method = method.to_owned();
            return Err(Box::new(Refused {
                error,
                trail,
                method,
                url,
                headers,
                body,
            }));
        }
    };
    tracing::debug!(
        event_id = verified.event_id,
        event_type = verified.event.event_type,
        "verified"
    );
    let receipt = receipt(endpoint, verified, &url, headers, body, received_at_ms);
    Ok(Judged::Store(Box::new(receipt)))
}

/// Read at most `cap` bytes into one buffer; a declared or actual length past it is
/// 413. Room for the body is reserved in `budget` first (the declared length, or the
/// cap when none is declared, trimmed once read); the caller holds it while it keeps
/// the body. The whole body must arrive within `timeout` of its room being granted
/// (waiting for room is not the sender's delay); past it, 408. Room not granted within
/// `timeout` either is 429 `overloaded`: slow senders holding the budget make others
/// wait, not wait without end (each waiting connection holds its read buffer).
async fn read_capped(
    budget: &BodyBudget,
    mut body: Body,
    cap: usize,
    timeout: std::time::Duration,
) -> Result<(Vec<u8>, Reservation), IngestError> {
    let hint = body.size_hint();
    if hint.lower() > cap as u64 {
        return Err(IngestError::BodyTooLarge);
    }
    // `Content-Length` makes the hint exact, and the HTTP layer holds the body to it.
    let declared = hint.exact().and_then(|len| usize::try_from(len).ok());
    let mut room = tokio::time::timeout(timeout, budget.reserve(declared.unwrap_or(cap)))
        .await
        .map_err(|_| IngestError::Overloaded)?;
    // One buffer of the declared size (at most `cap`): each chunk is copied once,
    // into the bytes the receipt will keep.
    let mut bytes = Vec::with_capacity(declared.unwrap_or(0));
    let reading = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| IngestError::BodyUnreadable)?;
            if let Ok(chunk) = frame.into_data() {
                if bytes.len() + chunk.len() > cap {
                    return Err(IngestError::BodyTooLarge);
                }
                bytes.extend_from_slice(&chunk);
            }
        }
        Ok(())
    };
    tokio::time::timeout(timeout, reading)
        .await
        .map_err(|_| IngestError::BodyTimeout)??;
    if declared.is_none() {
        // Grown by doubling: give back the unused part of the buffer and of the room.
        bytes.shrink_to_fit();
        room.shrink_to(bytes.len());
    }
    Ok((bytes, room))
}

/// The receipt a verified request to `url` leaves behind, as `Store::record` is given
/// it. Public so that the benchmark can store exactly what this route stores.
pub fn receipt(
    endpoint: &Endpoint,
    verified: Verified,
    url: &str,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    received_at_ms: i64,
) -> NewReceipt {
    let Verified {
        secret_index,
        plan,
        event,
        event_id,
    } = verified;
    let resource = Resource::of(&event);
    NewReceipt {
        endpoint: endpoint.id.clone(),
        event_id,
        // The digest is the body's as it arrived; a sealing tenant's is stored sealed.
        body_sha256: Sha256::digest(&body).into(),
        body: crate::tenancy::stored_body(endpoint, body),
        headers: headers
            .into_iter()
            .filter(|(name, value)| !forensics::is_credential(name, value, &plan.candidates))
            .map(|(name, value)| {
                let value = String::from_utf8(value)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
                (name, value)
            })
            .collect(),
        secret_index,
        plugin: endpoint.plugin.info.name.clone(),
        plugin_version: endpoint.plugin.info.version.clone(),
        plugin_digest: endpoint.plugin.digest.clone(),
        message_id: plan.message_id,
        event_type: event.event_type,
        resource,
        occurred_at: event.occurred_at,
        signed_at: plan.timestamp,
        received_at_ms,
        ignore: match event.disposition {
            Disposition::Ignore(reason) => Some(reason),
            Disposition::Process | Disposition::Reject(_) | Disposition::Answer(_) => None,
        },
        source: crate::store::PUSHED,
        // Kept for mapping the event again as it was mapped: a plugin may read the
        // URL. Without its credentials, as the headers are kept.
        query: forensics::kept_query(url, &plan.candidates),
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
fn answer(event_id: &str, outcome: &Outcome) -> Response {
    let body = match (outcome, outcome.ignored_reason()) {
        (_, Some(reason)) => serde_json::json!({ "ignored": reason, "event_id": event_id }),
        (Outcome::Duplicate, None) => {
            serde_json::json!({ "status": "duplicate", "event_id": event_id })
        }
        (_, None) => serde_json::json!({ "status": "accepted", "event_id": event_id }),
    };
    (StatusCode::OK, Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A request waits for room in the body budget, but not without end: slow senders
    /// holding it all make it 429 `overloaded` after the read timeout.
    #[tokio::test]
    async fn a_body_given_no_room_within_the_read_timeout_is_overloaded() {
        let budget = BodyBudget::new(1024);
        let held = budget.reserve(1024).await;
        let body = || Body::from(vec![b'x'; 10]);
        let waited = read_capped(&budget, body(), 1024, Duration::from_millis(50)).await;
        assert_eq!(waited.err(), Some(IngestError::Overloaded));
        drop(held);
        let (bytes, _room) = read_capped(&budget, body(), 1024, Duration::from_secs(30))
            .await
            .expect("room, once given back");
        assert_eq!(bytes.len(), 10);
    }
}
