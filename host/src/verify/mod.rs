//! Verification: turns a request into a verified event, or a rejection.
//!
//! Owns secrets (as [`Key`]s, never printed), MAC and signature computation, the
//! constant-time comparison of every candidate against every active key, and the
//! timestamp window. Asks the endpoint's plugin what is signed and what the event is;
//! never hands it a secret. Never touches the store.

mod keys;
mod mac;

pub use keys::{Key, KeyError, Secret, decode_key};
pub use mac::{MAX_CANDIDATES, MessageSource, matching_key, message_digest, owned_headers};

use crate::endpoints::Endpoint;
use crate::http::IngestError;
use crate::plugins::PluginFailure;
use hmac::{Hmac, Mac as _};
use hookhost_plugin_sdk::{
    Disposition, Event, HandshakeCheck, Plan, Rejection, Response, ResponsePart,
};

/// A request after steps 3–6 of the request path: authentic, fresh and described.
#[derive(Debug)]
pub struct Verified {
    /// Index of the active secret that matched (0 = current).
    pub secret_index: usize,
    pub plan: Plan,
    pub event: Event,
    /// The event id: the plugin's, or `sha256:<hex>` of the signed message.
    pub event_id: String,
}

/// What the endpoint does with a request that passed its checks.
#[derive(Debug)]
pub enum Decision {
    /// Store a receipt and answer after the commit.
    Store(Box<Verified>),
    /// A handshake: answer this now; nothing is stored.
    Answer(Answer),
}

/// A handshake answer, rendered by the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Headers a plugin's answer may not set: the HTTP layer owns them.
const RESERVED_HEADERS: &[&str] = &[
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "set-cookie",
];

/// Steps 3–6, or a handshake: a GET goes to the plugin's `handshake` (unsigned; a
/// token the sender presents is compared in constant time with the endpoint's
/// handshake token); a verified request the plugin says is a handshake (`answer`) is
/// answered instead of stored. Shared by the HTTP ingest and `hookhost plugin test`.
pub fn decide(
    endpoint: &Endpoint,
    request: &MessageSource<'_>,
    now: i64,
    trail: &mut Trail,
) -> Result<Decision, IngestError> {
    if request.method == "GET" {
        let mut call = endpoint.plugin.session(&endpoint.plugin_config, request)?;
        let reply = call.handshake()?.ok_or(IngestError::MethodNotAllowed)?;
        if let HandshakeCheck::Token(presented) = &reply.check {
            let expected = endpoint
                .handshake_token
                .as_ref()
                .ok_or(IngestError::HandshakeRefused)?;
            if !bool::from(mac::token_eq(
                expected.expose().as_bytes(),
                presented.as_bytes(),
            )) {
                return Err(IngestError::HandshakeRefused);
            }
        }
        return render(endpoint, &reply.response, Signed::No).map(Decision::Answer);
    }
    let verified = judge(endpoint, request, now, trail)?;
    match &verified.event.disposition {
        Disposition::Answer(response) => {
            render(endpoint, response, Signed::By(verified.secret_index)).map(Decision::Answer)
        }
        _ => Ok(Decision::Store(Box::new(verified))),
    }
}

/// Whether the request being answered was signed (and verified), and by which of the
/// endpoint's secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signed {
    By(usize),
    No,
}

/// Render a plugin's answer: HMAC parts are computed with the key that verified the
/// request (during a rotation, the secret the sender still signs with), and only for
/// a verified request: to an unsigned GET, anyone could have the
/// endpoint's key sign text of their choosing. An answer the host will not send (not
/// 2xx, a reserved or invalid header, an HMAC part for an unsigned request) is a plugin
/// failure.
fn render(endpoint: &Endpoint, response: &Response, signed: Signed) -> Result<Answer, IngestError> {
    if !(200..300).contains(&response.status) {
        tracing::error!(
            status = response.status,
            "plugin answered a handshake with a non-2xx status"
        );
        return Err(IngestError::PluginFailed);
    }
    for (name, value) in &response.headers {
        let lower = name.to_ascii_lowercase();
        if RESERVED_HEADERS.contains(&lower.as_str())
            || axum::http::HeaderName::from_bytes(name.as_bytes()).is_err()
            || axum::http::HeaderValue::from_str(value).is_err()
        {
            tracing::error!(header = %name, "plugin answered a handshake with a header the host does not send");
            return Err(IngestError::PluginFailed);
        }
    }
    if axum::http::HeaderValue::from_str(&response.content_type).is_err() {
        return Err(IngestError::PluginFailed);
    }
    let mut body = Vec::new();
    for part in &response.body {
        match part {
            ResponsePart::Text(text) => body.extend_from_slice(text.as_bytes()),
            ResponsePart::HmacSha256Hex(text) => {
                let Signed::By(index) = signed else {
                    tracing::error!("plugin answered an unsigned handshake with an HMAC part");
                    return Err(IngestError::PluginFailed);
                };
                let Some(Key::Hmac(key)) = endpoint.keys.get(index) else {
                    return Err(IngestError::Unsupported);
                };
                let mut mac = <Hmac<sha2::Sha256> as hmac::digest::KeyInit>::new_from_slice(key)
                    .map_err(|_| IngestError::Unsupported)?;
                mac.update(text.as_bytes());
                body.extend_from_slice(hex::encode(mac.finalize().into_bytes()).as_bytes());
            }
        }
    }
    Ok(Answer {
        status: response.status,
        content_type: response.content_type.clone(),
        headers: response.headers.clone(),
        body,
    })
}

/// What verification found on its way, kept for the forensics of a refused request:
/// filled in step by step, so on an error it says how far the request got.
#[derive(Debug, Default)]
pub struct Trail {
    /// The plugin's plan, once it made one (its candidates, its signed timestamp).
    pub plan: Option<Plan>,
    /// Active secrets every candidate was checked against.
    pub secrets: usize,
    /// The active secret that matched: the request was authentic.
    pub secret_index: Option<usize>,
    /// A refusal the plugin explained: the header it missed, or its own words.
    pub plugin_said: Option<String>,
    /// The event id, once described.
    pub event_id: Option<String>,
}

impl Trail {
    /// Note the plugin's refusal, and turn it into the sender's error.
    fn refused(&mut self, rejection: Rejection) -> IngestError {
        let (Rejection::MissingSignature(said)
        | Rejection::MalformedSignature(said)
        | Rejection::MalformedBody(said)
        | Rejection::Unsupported(said)) = &rejection;
        self.plugin_said = Some(said.clone());
        rejection_to_error(rejection)
    }
}

/// Steps 3–6 of the request path, shared by the HTTP ingest and `hookhost plugin test`:
/// plugin plan → host MAC over every key and candidate → timestamp window → plugin
/// describe. `now` is unix seconds, injected so vectors judge at a fixed moment.
/// `trail` says how far a refused request got.
pub fn judge(
    endpoint: &Endpoint,
    request: &MessageSource<'_>,
    now: i64,
    trail: &mut Trail,
) -> Result<Verified, IngestError> {
    let mut call = endpoint.plugin.session(&endpoint.plugin_config, request)?;

    let plan = match call.plan_verification()? {
        Ok(plan) => trail.plan.insert(plan),
        Err(rejection) => return Err(trail.refused(rejection)),
    };
    trail.secrets = endpoint.keys.len();
    let secret_index =
        matching_key(&endpoint.keys, plan, request)?.ok_or(IngestError::InvalidSignature)?;
    trail.secret_index = Some(secret_index);
    check_window(endpoint.tolerance_seconds, plan.timestamp, now)?;

    let event = match call.describe_event()? {
        Ok(event) => event,
        Err(rejection) => return Err(trail.refused(rejection)),
    };
    if let Disposition::Reject(reason) = &event.disposition {
        // Kept with the forensic record, so it must be storable too.
        trail.event_id = event.id.clone().filter(|id| fits(id));
        return Err(IngestError::Rejected(reason.clone()));
    }
    let plan = trail.plan.as_ref().ok_or(IngestError::PluginFailed)?;
    storable(&event, plan.message_id.as_ref())?;
    let event_id = match &event.id {
        Some(id) if !id.is_empty() => id.clone(),
        _ => format!("sha256:{}", hex::encode(message_digest(plan, request)?)),
    };
    // Taken only now: a request refused before here keeps its plan for the forensic
    // record, whose redaction reads the plan's candidates (a token scheme's candidate
    // is the endpoint's secret itself).
    let plan = trail.plan.take().ok_or(IngestError::PluginFailed)?;
    Ok(Verified {
        secret_index,
        plan,
        event,
        event_id,
    })
}

/// Longest text of an event that the store keeps: an id, type, resource or reason.
/// Real providers' are under 100 bytes; the bound keeps a key (endpoint, resource kind,
/// resource id) inside what PostgreSQL's indexes take.
pub const MAX_STORED_TEXT: usize = 1024;

/// Every text a receipt keeps from the event is storable in both stores: at most
/// [`MAX_STORED_TEXT`] bytes and without NUL, which PostgreSQL's `text` refuses (one
/// such receipt would fail the whole group commit it shares with other requests), and
/// a version the stores' integers hold. What delivery sends in headers (the id, the
/// type, the resource) has no control character either: HTTP refuses them there, and
/// the event could never be delivered. A body whose event names such a thing is not
/// what a provider sends: 400 `malformed_body`.
pub fn storable(event: &Event, message_id: Option<&String>) -> Result<(), IngestError> {
    let reason = match &event.disposition {
        Disposition::Ignore(reason) => Some(reason),
        _ => None,
    };
    let delivered = [
        event.id.as_ref(),
        Some(&event.event_type),
        event.resource_kind.as_ref(),
        event.resource_id.as_ref(),
    ];
    // A version past i64::MAX (the stores' integers) would compare equal to every
    // other such version; no provider sends one.
    let version_fits = event
        .resource_version
        .is_none_or(|v| i64::try_from(v).is_ok());
    // An ASCII control character is one byte in UTF-8, and no other character's bytes
    // are ASCII: the bytes tell.
    let in_headers = |text: &&String| !text.bytes().any(|b| b.is_ascii_control());
    if version_fits
        && delivered.iter().flatten().all(in_headers)
        && delivered
            .iter()
            .chain(&[message_id, reason])
            .flatten()
            .all(|text| fits(text))
    {
        Ok(())
    } else {
        Err(IngestError::MalformedBody)
    }
}

/// Whether a store keeps this text as it is: see [`storable`].
pub(crate) fn fits(text: &str) -> bool {
    text.len() <= MAX_STORED_TEXT && !text.contains('\0')
}

/// Re-run the endpoint's current plugin's `describe-event` on a stored request (a
/// replay that remaps). Verification is not repeated: the receipt proves it passed.
pub fn redescribe(
    endpoint: &Endpoint,
    url: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Event, IngestError> {
    on_stored(endpoint, url, headers, body, |call| {
        let event = call.describe_event()?.map_err(rejection_to_error)?;
        storable(&event, None)?;
        Ok(event)
    })
}

/// Re-run the endpoint's current plugin's `plan-verification` on a stored request:
/// what it signs and which candidate signatures it carries (`hookhost spec`, and the
/// admin API's redaction of signature headers).
pub fn replan(
    endpoint: &Endpoint,
    url: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Plan, IngestError> {
    on_stored(endpoint, url, headers, body, |call| {
        call.plan_verification()?.map_err(rejection_to_error)
    })
}

/// The URL a stored request of `endpoint` is shown its plugin at: the endpoint's
/// path, and the query it came with (a receipt keeps it, see `NewReceipt::query`).
pub fn stored_url(public_url: &str, endpoint: &str, query: Option<&str>) -> String {
    match query {
        Some(query) => format!("{public_url}/webhooks/{endpoint}?{query}"),
        None => format!("{public_url}/webhooks/{endpoint}"),
    }
}

/// A plugin session on a stored request at `url` (see [`stored_url`]). The method is
/// not stored; the plugin sees `POST`.
fn on_stored<T>(
    endpoint: &Endpoint,
    url: &str,
    headers: &[(String, String)],
    body: &[u8],
    call: impl FnOnce(&mut crate::plugins::Session<'_>) -> Result<T, IngestError>,
) -> Result<T, IngestError> {
    let headers = owned_headers(headers.iter().map(|(name, value)| (name, value)));
    let source = MessageSource {
        method: "POST",
        url,
        headers: &headers,
        body,
    };
    call(&mut endpoint.plugin.session(&endpoint.plugin_config, &source)?)
}

/// The window applies in both directions: a timestamp from the future is as suspect
/// as a stale one (a replay captured now and sent later, or a skewed sender).
fn check_window(
    tolerance: Option<u32>,
    timestamp: Option<i64>,
    now: i64,
) -> Result<(), IngestError> {
    let Some(tolerance) = tolerance else {
        return Ok(());
    };
    let Some(signed_at) = timestamp else {
        return Err(IngestError::MissingSignature);
    };
    let skew_seconds = now.abs_diff(signed_at);
    if skew_seconds > u64::from(tolerance) {
        return Err(IngestError::TimestampOutsideWindow { skew_seconds });
    }
    Ok(())
}

fn rejection_to_error(rejection: Rejection) -> IngestError {
    match rejection {
        Rejection::MissingSignature(_) => IngestError::MissingSignature,
        Rejection::MalformedSignature(_) => IngestError::InvalidSignature,
        Rejection::MalformedBody(_) => IngestError::MalformedBody,
        Rejection::Unsupported(_) => IngestError::Unsupported,
    }
}

impl From<PluginFailure> for IngestError {
    /// The plugin's failure is the server's 500; no instance slot free is overload,
    /// 429 `overloaded` as a full plugin queue is.
    fn from(failure: PluginFailure) -> Self {
        match failure {
            PluginFailure::Busy => IngestError::Overloaded,
            _ => IngestError::PluginFailed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_applies_both_ways_and_only_when_configured() {
        assert!(check_window(Some(300), Some(1000), 1300).is_ok());
        assert!(check_window(Some(300), Some(1000), 700).is_ok());
        assert_eq!(
            check_window(Some(300), Some(1000), 1301),
            Err(IngestError::TimestampOutsideWindow { skew_seconds: 301 })
        );
        assert_eq!(
            check_window(Some(300), Some(1000), 699),
            Err(IngestError::TimestampOutsideWindow { skew_seconds: 301 })
        );
        assert!(check_window(None, None, 0).is_ok());
        assert!(matches!(
            check_window(Some(1), None, 0),
            Err(IngestError::MissingSignature)
        ));
        assert!(matches!(
            check_window(Some(300), Some(i64::MIN), i64::MAX),
            Err(IngestError::TimestampOutsideWindow { .. })
        ));
    }

    #[test]
    fn a_version_past_what_the_stores_hold_is_a_malformed_body() {
        let versioned = |v: u64| {
            Event::new("counter.changed")
                .resource("counter", "c1")
                .version(Some(v))
        };
        assert_eq!(storable(&versioned(i64::MAX as u64), None), Ok(()));
        // Past i64::MAX, versions would all be stored as one: an old one would pass.
        for version in [i64::MAX as u64 + 1, u64::MAX] {
            assert_eq!(
                storable(&versioned(version), None),
                Err(IngestError::MalformedBody),
                "{version}"
            );
        }
    }
}
