//! Verification forensics: what arrived, and why it was judged as it was.
//!
//! A request refused after its body was read is kept:
//! - `failed`: it was verified, then failed with a 5xx (a plugin trap in
//!   `describe-event`, say). Kept in full until it is re-ingested, so no authentic
//!   payload is lost when the sender gives up retrying.
//! - `rejected`: refused before it was verified (a 4xx, or a plugin failure while
//!   planning). Kept bounded per endpoint (`[forensics]`), with the precise detail,
//!   its headers (credentials redacted) and its body (or only its digest).
//!
//! Either can be re-verified against the endpoint's current secrets and plugin, with
//! its original arrival time as the clock, and re-ingested when it now passes: under
//! the event id the plugin gives it, so a retry the sender also got through is a
//! duplicate. GET requests (handshakes, unsigned) are not kept.
//!
//! Rejected requests are queued and written off the request path, in batches; when
//! the queue is full they are dropped (and counted), so a flood of bad requests costs
//! the store a bounded amount of work. Failed requests are written before the 500 is
//! answered.

use crate::config::{BodyKept, ForensicsConfig};
use crate::endpoints::Endpoint;
use crate::http::ingest::{Judged, judge};
use crate::http::{App, IngestError};
use crate::metrics::Metrics;
use crate::store::{ForensicRow, NewForensic, NewReceipt, Outcome, Store, StoreError};
use crate::verify::Trail;
use hookhost_plugin_sdk::{Algorithm, Candidate};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::mpsc;

/// Rejected requests waiting to be written; beyond this they are dropped.
const QUEUE: usize = 1_024;
/// Bytes those requests hold at most (bodies, headers, URLs): past this, one is kept
/// without its body (its length and digest are kept), or dropped if that is still too
/// much. Each body was counted in the body budget while it was read; once the request
/// is answered it is not, and a full queue of the largest bodies would hold a gigabyte.
const QUEUE_BYTES: usize = 16 * 1024 * 1024;
/// Most rejected requests written in one transaction.
const BATCH: usize = 64;

/// What a redacted value reads.
pub const REDACTED: &str = "[redacted]";

/// Parts of a header's (lower-case) name that say it carries a credential, which is
/// never stored with a receipt and redacted in what forensics keeps: `authorization`,
/// `proxy-authorization`, `x-auth-token`, `cookie`, `set-cookie`, `x-api-key`,
/// `x-access-token`, `x-webhook-secret`, `x-gitlab-token`, …. Not `key` or `token`
/// alone: providers name ids so (`idempotency-key`, `x-event-key`,
/// `i-twilio-idempotency-token`), and their plugins read them.
const CREDENTIAL_NAME_PARTS: &[&str] = &[
    "auth",
    "cookie",
    "secret",
    "password",
    "passwd",
    "credential",
    "bearer",
    "api-key",
    "apikey",
    "api-token",
    "access-token",
    "private-token",
    "security-token",
    "gitlab-token",
];

/// Whether a header is a credential: by its name (see [`CREDENTIAL_NAME_PARTS`]), or
/// by its value, which holds a token scheme's candidate (as sent, or hex or base64 of
/// it), whatever its name, since a token scheme's candidate is the secret itself.
/// Never stored with a receipt; redacted in what forensics keeps.
pub fn is_credential(name: &str, value: &[u8], candidates: &[Candidate]) -> bool {
    names_a_credential(name) || holds_token(value, candidates)
}

/// Whether `name` holds one of [`CREDENTIAL_NAME_PARTS`]. One pass over the name, a
/// part compared only where its first byte is: every header of every stored request
/// is asked, and a substring search per part cost about 3% of a request's
/// instructions.
fn names_a_credential(name: &str) -> bool {
    let name = name.as_bytes();
    (0..name.len()).any(|at| {
        let rest = &name[at..];
        CREDENTIAL_NAME_PARTS
            .iter()
            .any(|part| part.as_bytes()[0] == rest[0] && rest.starts_with(part.as_bytes()))
    })
}

/// Query parameters whose names say they carry a credential (`api_key`,
/// `access_token`, `auth`, …), matched in the decoded name, in any case: never stored
/// with a receipt, as the credential headers are not.
const CREDENTIAL_PARAMS: &[&str] = &["token", "key", "secret", "password", "auth", "credential"];

/// The query of `url` as a receipt keeps it (for mapping the event again as it was
/// mapped): without the parameters [`CREDENTIAL_PARAMS`] names, and none at all when a
/// value holds a token scheme's candidate, as sent or decoded. `None` when nothing is
/// left.
pub fn kept_query(url: &str, candidates: &[Candidate]) -> Option<String> {
    let (_, query) = url.split_once('?')?;
    if holds_token(query.as_bytes(), candidates) {
        return None;
    }
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let Some((name, value)) = form_urlencoded::parse(pair.as_bytes()).next() else {
            continue;
        };
        // Decoded as a form (`+` a space) and as a URL's escapes only (`+` itself); the
        // two differ only where the pair holds a `+`.
        let escaped = || {
            let plus = pair.replace('+', "%2B");
            form_urlencoded::parse(plus.as_bytes())
                .next()
                .is_some_and(|(_, v)| holds_token(v.as_bytes(), candidates))
        };
        if holds_token(value.as_bytes(), candidates) || (pair.contains('+') && escaped()) {
            return None;
        }
        let name = name.to_ascii_lowercase();
        if !CREDENTIAL_PARAMS.iter().any(|word| name.contains(word)) {
            kept.push(pair);
        }
    }
    (!kept.is_empty()).then(|| kept.join("&"))
}

/// `url` as a kept request keeps it: its query as a receipt keeps it (see
/// [`kept_query`]), and none at all when no plan says which of its values are a token
/// scheme's (as every header but the plain ones is then redacted).
fn kept_url(url: &str, candidates: Option<&[Candidate]>) -> String {
    let path = url.split_once('?').map_or(url, |(path, _)| path);
    match candidates.and_then(|candidates| kept_query(url, candidates)) {
        Some(query) => format!("{path}?{query}"),
        None => path.to_string(),
    }
}

/// Whether `value` holds a token scheme's candidate (as sent, or hex or base64 of
/// it): the secret itself, never stored with a receipt.
pub fn holds_token(value: &[u8], candidates: &[Candidate]) -> bool {
    candidates
        .iter()
        .any(|c| c.algorithm == Algorithm::Token && crate::spec::holds(value, &c.signature))
}

/// Headers whose values carry nothing secret; shown when it is not known which
/// headers carry signatures (the plugin made no plan).
const PLAIN_HEADERS: &[&str] = &[
    "accept",
    "accept-encoding",
    "content-encoding",
    "content-length",
    "content-type",
    "host",
    "user-agent",
];

/// A request refused on a plugin thread, with everything it brought.
#[derive(Debug)]
pub struct Refused {
    pub error: IngestError,
    pub trail: Trail,
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// What verification found, as kept and shown. Every field but the first four is
/// there only when verification got that far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detail {
    /// The stable error code the sender was answered.
    pub reason: String,
    pub message: String,
    pub plugin: String,
    pub plugin_version: String,
    /// The signature header the plugin looked for and did not find.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_header: Option<String>,
    /// The plugin's own words when it refused the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_said: Option<String>,
    /// Candidate signatures the plugin found, each checked against `secrets_tried`;
    /// 101 for any number past the cap of 100 (the plugin SDK passes no more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_tried: Option<usize>,
    /// The active secret that matched (0 = current): the request was authentic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched_secret: Option<usize>,
    /// The signed timestamp (unix seconds) and its distance from the arrival
    /// (positive: signed before it arrived).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skew_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance_seconds: Option<u32>,
    pub body_len: usize,
    /// Signs that the body was changed on its way (re-serialised, re-encoded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<Hint>,
}

/// One sign that a body was changed between the provider and hookhost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hint {
    pub code: String,
    pub says: String,
}

/// Keeps refused requests: the queue of rejected ones and its writer task.
#[derive(Debug)]
pub struct Recorder {
    config: ForensicsConfig,
    /// Each rejected request with its plugin's label, for the metrics.
    queue: mpsc::Sender<(NewForensic, String)>,
    /// Bytes held in `queue`, at most [`QUEUE_BYTES`] but for a lone request.
    queued_bytes: Arc<AtomicUsize>,
}

impl Recorder {
    /// Start the task that writes rejected requests to `store`, in batches, counting
    /// each in `metrics` as kept or dropped once its batch's write is known.
    pub fn start(store: Store, config: ForensicsConfig, metrics: Arc<Metrics>) -> Recorder {
        let (queue, mut queued) = mpsc::channel(QUEUE);
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let held = Arc::clone(&queued_bytes);
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(BATCH);
            while queued.recv_many(&mut batch, BATCH).await > 0 {
                let (kept, plugins): (Vec<NewForensic>, Vec<String>) = batch.drain(..).unzip();
                let bound = config.rejected_per_endpoint;
                let written = store.keep_forensics(&kept, bound).await;
                let bytes = kept.iter().map(NewForensic::held_bytes).sum();
                held.fetch_sub(bytes, Ordering::AcqRel);
                if let Err(error) = &written {
                    tracing::warn!(%error, lost = kept.len(), "forensics: rejected requests not kept");
                }
                for (kept, plugin) in kept.iter().zip(&plugins) {
                    metrics.forensics(&kept.endpoint, plugin, kept.kind, written.is_ok());
                }
            }
        });
        Recorder {
            config,
            queue,
            queued_bytes,
        }
    }

    /// Count `bytes` as queued, if they fit under [`QUEUE_BYTES`] (or the queue holds
    /// none).
    fn hold(&self, bytes: usize) -> bool {
        self.queued_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                let fits = queued == 0 || queued.saturating_add(bytes) <= QUEUE_BYTES;
                fits.then_some(queued + bytes)
            })
            .is_ok()
    }

    /// Queue a rejected request to be written, within [`QUEUE`] and [`QUEUE_BYTES`]
    /// (without its body if only so). False when it is dropped.
    fn queue(&self, mut kept: NewForensic, plugin: &str) -> bool {
        if !self.hold(kept.held_bytes()) {
            kept.body = None;
            if !self.hold(kept.held_bytes()) {
                return false;
            }
        }
        let bytes = kept.held_bytes();
        match self.queue.try_send((kept, plugin.to_string())) {
            Ok(()) => true,
            Err(_) => {
                self.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
                false
            }
        }
    }

    pub fn config(&self) -> &ForensicsConfig {
        &self.config
    }
}

/// Keep a refused request (see the module's comment), and give back the error the
/// sender is answered.
pub async fn keep(
    app: &App,
    endpoint: &Endpoint,
    received_at_ms: i64,
    refused: Refused,
) -> IngestError {
    if refused.method == "GET" {
        return refused.error;
    }
    let (status, code) = refused.error.status_and_code();
    let failed = status.is_server_error() && refused.trail.secret_index.is_some();
    let kind = if failed { "failed" } else { "rejected" };
    let detail = detail(endpoint, &refused, received_at_ms / 1000);
    // A plan past the candidate cap was refused before any key was tried; matching its
    // candidates (up to tens of thousands) against every header would cost far more
    // than the request did, on this task. Such a request's headers are all redacted.
    let over_cap = refused
        .trail
        .plan
        .as_ref()
        .is_some_and(|plan| plan.candidates.len() > crate::verify::MAX_CANDIDATES);
    let plan = refused.trail.plan.as_ref().filter(|_| !over_cap);
    let signature_headers = plan.map(|plan| {
        let headers = text_headers(&refused.headers);
        crate::spec::carrying_headers(&headers, &plan.candidates)
    });
    let candidates = plan.map_or(&[][..], |p| &p.candidates);
    let headers: Vec<(String, String)> = text_headers(&refused.headers)
        .into_iter()
        .map(|(name, value)| {
            let credential = over_cap || is_credential(&name, value.as_bytes(), candidates);
            (name, if credential { REDACTED.into() } else { value })
        })
        .collect();
    let keep_body = failed || app.forensics.config.rejected_body == BodyKept::Full;
    let kept = NewForensic {
        endpoint: endpoint.id.clone(),
        kind,
        received_at_ms,
        status: status.as_u16(),
        code,
        detail: serde_json::to_string(&detail).unwrap_or_default(),
        method: refused.method,
        url: kept_url(&refused.url, plan.map(|p| &p.candidates[..])),
        headers: serde_json::to_string(&headers).unwrap_or_default(),
        signature_headers: signature_headers.map(|names| serde_json::json!(names).to_string()),
        body_sha256: Sha256::digest(&refused.body).into(),
        body_len: i64::try_from(refused.body.len()).unwrap_or(i64::MAX),
        // A sealing tenant's body is kept sealed.
        body: keep_body.then(|| crate::tenancy::stored_body(endpoint, refused.body)),
        event_id: refused.trail.event_id,
    };
    let plugin = endpoint.plugin.label();
    if !failed {
        // Counted by the writer task once its batch is written; here, one it has no
        // room for.
        if !app.forensics.queue(kept, plugin) {
            app.metrics.forensics(&endpoint.id, plugin, kind, false);
        }
        return refused.error;
    }
    // The only copy of an authentic event: written before the 500 is answered.
    let bound = app.forensics.config.rejected_per_endpoint;
    let stored = match app.store.keep_forensics(&[kept], bound).await {
        Ok(ids) => {
            tracing::warn!(
                forensic = ids.first().copied(),
                "verified request failed; kept in full"
            );
            true
        }
        Err(error) => {
            tracing::error!(%error, "verified request failed and could not be kept");
            false
        }
    };
    app.metrics.forensics(&endpoint.id, plugin, kind, stored);
    refused.error
}

fn text_headers(headers: &[(String, Vec<u8>)]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| (name.clone(), String::from_utf8_lossy(value).into_owned()))
        .collect()
}

/// The precise detail of a refusal, from the error and how far verification got.
fn detail(endpoint: &Endpoint, refused: &Refused, arrived_s: i64) -> Detail {
    let trail = &refused.trail;
    let signed_at = trail.plan.as_ref().and_then(|plan| plan.timestamp);
    let missing = matches!(refused.error, IngestError::MissingSignature);
    let verified = trail.secret_index.is_some();
    Detail {
        reason: refused.error.status_and_code().1.to_string(),
        message: refused.error.to_string(),
        plugin: endpoint.plugin.info.name.clone(),
        plugin_version: endpoint.plugin.info.version.clone(),
        missing_header: trail.plugin_said.clone().filter(|_| missing),
        plugin_said: trail.plugin_said.clone().filter(|_| !missing),
        candidates: trail.plan.as_ref().map(|plan| plan.candidates.len()),
        secrets_tried: trail.plan.as_ref().map(|_| trail.secrets),
        matched_secret: trail.secret_index,
        signed_at,
        skew_seconds: signed_at.map(|signed| arrived_s.saturating_sub(signed)),
        tolerance_seconds: endpoint.tolerance_seconds,
        body_len: refused.body.len(),
        // A verified body arrived as signed: nothing changed it.
        hints: if verified {
            Vec::new()
        } else {
            hints(&refused.headers, &refused.body)
        },
    }
}

/// Signs that something between the provider and hookhost changed the body. Each is
/// a cheap scan of the bytes; none is proof, each is a place to look.
pub fn hints(headers: &[(String, Vec<u8>)], body: &[u8]) -> Vec<Hint> {
    let mut found = Vec::new();
    let mut hint = |code: &str, says: &str| {
        found.push(Hint {
            code: code.into(),
            says: says.into(),
        })
    };
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).to_ascii_lowercase())
    };
    if header("content-encoding").is_some_and(|e| e != "identity") {
        hint(
            "content_encoding",
            "the request says it is encoded: a proxy may have compressed or decompressed \
             the body after it was signed",
        );
    }
    if body.is_empty() {
        hint(
            "empty_body",
            "the body is empty: a proxy may have dropped it",
        );
    }
    if body.starts_with(b"\xEF\xBB\xBF") {
        hint("utf8_bom", "the body starts with a UTF-8 byte-order mark");
    }
    let text = std::str::from_utf8(body);
    if text.is_err() {
        hint(
            "not_utf8",
            "the body is not UTF-8: it may have been re-encoded (Latin-1, UTF-16)",
        );
    }
    if contains(body, b"\r\n") {
        hint(
            "crlf",
            "the body has CRLF line endings: a proxy may have rewritten line endings",
        );
    }
    if body.last().is_some_and(u8::is_ascii_whitespace) {
        hint(
            "trailing_whitespace",
            "the body ends with whitespace: a proxy or framework may have appended it",
        );
    }
    let json = header("content-type").is_some_and(|t| t.contains("json"))
        || matches!(body.first(), Some(b'{' | b'['));
    if json {
        if contains(body, b"\\u00") {
            hint(
                "escaped_unicode",
                "the JSON escapes non-ASCII characters (\\u00..): it may have been \
                 re-serialised by a framework that escapes them",
            );
        }
        if contains(body, b"\\/") {
            hint(
                "escaped_slash",
                "the JSON escapes slashes (\\/): it may have been re-serialised",
            );
        }
        let content = body.trim_ascii_end();
        if !contains(content, b"\n") && contains(content, b"\": ") && contains(content, b", \"") {
            hint(
                "json_spacing",
                "the JSON is one line with a space after each separator: it may have \
                 been parsed and serialised again",
            );
        }
    }
    found
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A kept request as the API and CLI show it: signature values and credentials
/// redacted, the detail as JSON, the body as text when it was kept (a sealed one
/// opened with `key`, or not shown without it).
pub fn shown(row: &ForensicRow, key: Option<&crate::tenancy::MasterKey>) -> serde_json::Value {
    let body = row.body.as_deref().and_then(|body| {
        if !body.starts_with(crate::tenancy::SEALED_BODY) {
            return Some(String::from_utf8_lossy(body).into_owned());
        }
        let opened = key?.open_body(&row.endpoint, body);
        opened
            .ok()
            .map(|plain| String::from_utf8_lossy(&plain).into_owned())
    });
    let headers: Vec<(String, String)> = serde_json::from_str(&row.headers).unwrap_or_default();
    let carrying: Option<Vec<String>> = row
        .signature_headers
        .as_deref()
        .and_then(|names| serde_json::from_str(names).ok());
    let headers: Vec<(String, String)> = headers
        .into_iter()
        .map(|(name, value)| {
            let hide = match &carrying {
                Some(names) => names.contains(&name),
                None => !PLAIN_HEADERS.contains(&name.as_str()),
            };
            (name, if hide { REDACTED.into() } else { value })
        })
        .collect();
    let detail: serde_json::Value = serde_json::from_str(&row.detail).unwrap_or_default();
    serde_json::json!({
        "id": row.id,
        "endpoint": row.endpoint,
        "kind": row.kind,
        "received_at_ms": row.received_at_ms,
        "status": row.status,
        "code": row.code,
        "event_id": row.event_id,
        "detail": detail,
        "method": row.method,
        "url": redact_query(&row.url),
        "headers": headers,
        "body": body,
        "body_sha256": hex::encode(&row.body_sha256),
        "body_len": row.body_len,
        "reingested_at_ms": row.reingested_at_ms,
        "reingest_outcome": row.reingest_outcome,
    })
}

/// A URL with its query values redacted (a sender may put a token there).
fn redact_query(url: &str) -> String {
    match url.split_once('?') {
        None => url.to_string(),
        Some((path, query)) => {
            let names: Vec<String> = query
                .split('&')
                .map(|pair| {
                    let name = pair.split_once('=').map_or(pair, |(name, _)| name);
                    format!("{name}={REDACTED}")
                })
                .collect();
            format!("{path}?{}", names.join("&"))
        }
    }
}

/// Why a kept request could not be re-verified or re-ingested.
#[derive(Debug, thiserror::Error)]
pub enum ForensicsError {
    #[error("no kept request {0}")]
    Unknown(i64),
    #[error("endpoint {0:?} is no longer configured")]
    EndpointGone(String),
    #[error("only the body's digest was kept (forensics.rejected_body = \"digest\")")]
    BodyNotKept,
    #[error("the request is a handshake, not an event")]
    NotAnEvent,
    #[error("the kept body does not open: {0}")]
    BodyUnreadable(String),
    #[error("the request still does not pass: {0}")]
    StillRefused(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ForensicsError {
    /// The admin API's status and stable code.
    pub fn status_and_code(&self) -> (u16, &'static str) {
        match self {
            ForensicsError::Unknown(_) => (404, "unknown_forensic"),
            ForensicsError::EndpointGone(_) => (409, "endpoint_gone"),
            ForensicsError::BodyNotKept => (409, "body_not_kept"),
            ForensicsError::NotAnEvent => (409, "not_an_event"),
            ForensicsError::BodyUnreadable(_) => (500, "body_unreadable"),
            ForensicsError::StillRefused(_) => (422, "still_refused"),
            ForensicsError::Store(_) => (503, "store_unavailable"),
        }
    }
}

/// The verdict of verifying a kept request again.
#[derive(Debug, Clone, Serialize)]
pub struct Reverified {
    pub id: i64,
    pub passes: bool,
    /// The event id it would be ingested under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    /// What verification found this time.
    pub detail: Detail,
}

/// Verify a kept request again: the endpoint's current secrets and plugin, with the
/// original arrival time as the clock (so the window judges it as it arrived).
/// With it, the receipt to store when it passes.
pub async fn reverify(
    app: &App,
    id: i64,
) -> Result<(Reverified, Option<Box<NewReceipt>>), ForensicsError> {
    let row = app
        .store
        .forensic(id)
        .await?
        .ok_or(ForensicsError::Unknown(id))?;
    let endpoint = app
        .endpoints
        .get(&row.endpoint)
        .ok_or_else(|| ForensicsError::EndpointGone(row.endpoint.clone()))?;
    let body = row.body.ok_or(ForensicsError::BodyNotKept)?;
    let body = crate::tenancy::plain_body(app, &row.endpoint, &body)
        .map_err(ForensicsError::BodyUnreadable)?
        .into_owned();
    let headers: Vec<(String, String)> = serde_json::from_str(&row.headers).unwrap_or_default();
    let headers: Vec<(String, Vec<u8>)> = headers
        .into_iter()
        .map(|(name, value)| (name, value.into_bytes()))
        .collect();
    let (method, url, received_at_ms) = (row.method, row.url, row.received_at_ms);
    let on_thread = Arc::clone(&endpoint);
    let judged = app
        .plugin_threads
        .run(move || judge(&on_thread, &method, url, headers, body, received_at_ms))
        .await
        .map_err(|_| ForensicsError::StillRefused(IngestError::PluginFailed.to_string()))?;
    match judged {
        Ok(Judged::Store(receipt)) => {
            let detail = Detail {
                reason: "verified".into(),
                message: "the request passes with the current secrets and plugin".into(),
                plugin: endpoint.plugin.info.name.clone(),
                plugin_version: endpoint.plugin.info.version.clone(),
                matched_secret: Some(receipt.secret_index),
                signed_at: receipt.signed_at,
                skew_seconds: receipt
                    .signed_at
                    .map(|t| (received_at_ms / 1000).saturating_sub(t)),
                tolerance_seconds: endpoint.tolerance_seconds,
                body_len: receipt.body.len(),
                ..Detail::default()
            };
            let verdict = Reverified {
                id,
                passes: true,
                event_id: Some(receipt.event_id.clone()),
                detail,
            };
            Ok((verdict, Some(receipt)))
        }
        Ok(Judged::Answer(_)) => Err(ForensicsError::NotAnEvent),
        Err(refused) => {
            let detail = detail(&endpoint, &refused, received_at_ms / 1000);
            let verdict = Reverified {
                id,
                passes: false,
                event_id: None,
                detail,
            };
            Ok((verdict, None))
        }
    }
}

/// What re-ingesting a kept request did.
#[derive(Debug, Clone, Serialize)]
pub struct Reingested {
    pub id: i64,
    pub event_id: String,
    /// `accepted`, `duplicate`, or why the store received but did not queue it.
    pub outcome: String,
}

/// Re-ingest a kept request that now passes: the same receipt, version gate and
/// inbox as at ingest, under the event id the plugin gives it and the original
/// arrival time. A request that still does not pass is refused with its detail.
pub async fn reingest(app: &App, id: i64) -> Result<Reingested, ForensicsError> {
    let (verdict, receipt) = reverify(app, id).await?;
    let Some(receipt) = receipt else {
        return Err(ForensicsError::StillRefused(format!(
            "{} ({})",
            verdict.detail.reason, verdict.detail.message
        )));
    };
    let event_id = receipt.event_id.clone();
    let outcome = app.store.record(receipt).await?;
    let outcome = match (&outcome, outcome.ignored_reason()) {
        (_, Some(reason)) => reason.to_string(),
        (Outcome::Duplicate, None) => "duplicate".to_string(),
        (_, None) => "accepted".to_string(),
    };
    app.store
        .forensic_reingested(id, &event_id, &outcome, crate::clock::now_ms())
        .await?;
    tracing::info!(forensic = id, %event_id, %outcome, "re-ingested");
    Ok(Reingested {
        id,
        event_id,
        outcome,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's list of the forensics routes' errors names every one, with its
    /// status.
    #[test]
    fn the_readme_states_every_forensics_error() {
        let readme = include_str!("../../README.md");
        let start = readme
            .find("`POST /admin/forensics/{id}/reingest` (errors:")
            .expect("the forensics routes in the README");
        let list = &readme[start..start + readme[start..].find(").").expect("list end")];
        let every = [
            ForensicsError::Unknown(1),
            ForensicsError::EndpointGone("e".into()),
            ForensicsError::BodyNotKept,
            ForensicsError::NotAnEvent,
            ForensicsError::BodyUnreadable("no".into()),
            ForensicsError::StillRefused("no".into()),
            ForensicsError::Store(crate::store::StoreError::Overloaded),
        ];
        for error in every {
            let (status, code) = error.status_and_code();
            let at = list
                .find(&format!("`{code}`"))
                .unwrap_or_else(|| panic!("README's forensics errors lack {status} {code}"));
            let status_before = list[..at]
                .rfind(|c: char| c.is_ascii_digit())
                .map(|i| &list[i - 2..=i]);
            assert_eq!(status_before, Some(status.to_string().as_str()), "{code}");
        }
    }

    fn codes(headers: &[(&str, &str)], body: &[u8]) -> Vec<String> {
        let headers = crate::verify::owned_headers(headers.iter().copied());
        hints(&headers, body).into_iter().map(|h| h.code).collect()
    }

    #[test]
    fn hints_name_what_changed_a_body_and_stay_quiet_on_a_plain_one() {
        let json = [("content-type", "application/json")];
        assert!(codes(&json, br#"{"id":"evt_1","object":"event"}"#).is_empty());
        assert!(codes(&json, b"{\n  \"id\": \"evt_1\",\n  \"n\": 1\n}").is_empty());
        assert_eq!(
            codes(&json, b"{\"id\": \"evt_1\", \"n\": 1}\r\n"),
            ["crlf", "trailing_whitespace", "json_spacing"]
        );
        assert_eq!(
            codes(&json, br#"{"name":"Zo\u00eb","url":"https:\/\/x"}"#),
            ["escaped_unicode", "escaped_slash"]
        );
        assert_eq!(
            codes(&[("content-encoding", "gzip")], b"\xEF\xBB\xBF{}"),
            ["content_encoding", "utf8_bom"]
        );
        assert_eq!(codes(&[], b"\xff\xfe{"), ["not_utf8"]);
        assert_eq!(codes(&[], b""), ["empty_body"]);
    }

    #[test]
    fn query_values_are_redacted_and_names_kept() {
        assert_eq!(redact_query("https://h/webhooks/a"), "https://h/webhooks/a");
        assert_eq!(
            redact_query("https://h/webhooks/a?token=s3cret&flag"),
            "https://h/webhooks/a?token=[redacted]&flag=[redacted]"
        );
    }

    /// A header is a credential by its name, but not one that names an id.
    #[test]
    fn credential_headers_are_known_by_name_but_ids_are_not() {
        for name in [
            "authorization",
            "proxy-authorization",
            "cookie",
            "x-api-key",
            "x-auth-token",
            "x-gitlab-token",
            "api-key",
            "x-access-token",
            "x-webhook-secret",
            "private-token",
            "set-cookie",
            "x-amz-security-token",
        ] {
            assert!(is_credential(name, b"v", &[]), "{name}");
        }
        for name in [
            "stripe-signature",
            "idempotency-key",
            "x-event-key",
            "i-twilio-idempotency-token",
            "content-type",
        ] {
            assert!(!is_credential(name, b"v", &[]), "{name}");
        }
    }

    /// A receipt keeps a query without its credentials: parameters named as one, by
    /// their decoded names, and the whole query when a value holds a token scheme's
    /// token, sent escaped or as a form's `+` for a space.
    #[test]
    fn a_kept_query_holds_no_credential() {
        let hmac = [Candidate::new(Algorithm::HmacSha256, b"mac".to_vec())];
        let kept = |query: &str, candidates: &[Candidate]| {
            kept_query(&format!("https://h/webhooks/a?{query}"), candidates)
        };
        assert_eq!(kept_query("https://h/webhooks/a", &hmac), None);
        assert_eq!(
            kept("bodySHA256=00ff&foo=1&&bar=2", &hmac).as_deref(),
            Some("bodySHA256=00ff&foo=1&bar=2")
        );
        assert_eq!(
            kept(
                "api_key=s3cret&src=a%3Ab&Access%5FToken=t&AUTH=x&clientSecret=y",
                &hmac
            )
            .as_deref(),
            Some("src=a%3Ab")
        );
        assert_eq!(kept("api_key=s3cret", &hmac), None);
        let token = [Candidate::new(Algorithm::Token, b"Ab+c/d= e".to_vec())];
        for query in [
            "t=Ab%2Bc%2Fd%3D+e",
            "t=Ab%2Bc%2Fd%3D%20e",
            "x=1&t=Ab+c/d=%20e",
        ] {
            assert_eq!(kept(query, &token), None, "{query}");
        }
        assert_eq!(kept("t=other", &token).as_deref(), Some("t=other"));
    }

    /// A kept request's URL holds what a receipt's query holds, and no query at all
    /// when no plan says which of its values are a token scheme's.
    #[test]
    fn a_kept_url_holds_no_credential() {
        let token = [Candidate::new(Algorithm::Token, b"tok".to_vec())];
        let url = "https://h/webhooks/a?n=1&api_key=s3cret";
        assert_eq!(kept_url(url, Some(&token)), "https://h/webhooks/a?n=1");
        assert_eq!(
            kept_url("https://h/webhooks/a?n=1&t=tok", Some(&token)),
            "https://h/webhooks/a"
        );
        assert_eq!(kept_url(url, None), "https://h/webhooks/a");
        assert_eq!(kept_url("/webhooks/a", Some(&token)), "/webhooks/a");
    }
}
