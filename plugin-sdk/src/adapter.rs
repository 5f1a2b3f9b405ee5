//! The edge between generated bindings and the SDK's plain types.

use crate::bindings::exports::hookhost::provider::reconcile as pull;
use crate::bindings::hookhost::provider::types as wit;
use crate::prelude::*;
use crate::{
    Algorithm, Answer, ConfigError, Disposition, EndpointFacts, Event, Handshake, HandshakeCheck,
    KeyFormat, Part, Plan, Provider, Rejection, Repair, Request, RequestPlan, Response,
    ResponsePart, StoredEvent,
};
use core::marker::PhantomData;

/// Implements the generated component exports for any [`Provider`].
/// Used by [`crate::export_provider!`]; not meant to be named by plugin authors.
pub struct Adapter<P>(PhantomData<P>);

impl<P: Provider> crate::bindings::exports::hookhost::provider::plugin::Guest for Adapter<P> {
    fn info() -> wit::PluginInfo {
        let info = P::info();
        wit::PluginInfo {
            name: info.name,
            version: info.version,
            provider: info.provider,
            key_formats: info.key_formats.into_iter().map(key_format).collect(),
            default_tolerance_seconds: info.default_tolerance_seconds,
            retry_behaviour: info.retry_behaviour,
            algorithms: P::algorithms().into_iter().map(algorithm).collect(),
        }
    }

    fn plan_verification(head: wit::Head, body: Vec<u8>) -> Result<wit::Plan, wit::Rejection> {
        let request = request(head, body)?;
        P::plan_verification(&request).map(plan).map_err(rejection)
    }

    fn describe_event(head: wit::Head, body: Vec<u8>) -> Result<wit::Event, wit::Rejection> {
        let request = request(head, body)?;
        P::describe_event(&request).map(event).map_err(rejection)
    }

    fn check_config(config: String) -> Result<wit::EndpointFacts, wit::ConfigError> {
        let config = parse_config(&config).map_err(|message| wit::ConfigError {
            key: String::new(),
            message,
        })?;
        match P::check_config(&config) {
            Ok(EndpointFacts {
                key_formats,
                default_tolerance_seconds,
            }) => Ok(wit::EndpointFacts {
                key_formats: key_formats.into_iter().map(key_format).collect(),
                default_tolerance_seconds,
            }),
            Err(ConfigError { key, message }) => Err(wit::ConfigError { key, message }),
        }
    }

    fn handshake(head: wit::Head) -> Option<wit::HandshakeReply> {
        let request = request(head, Vec::new()).ok()?;
        P::handshake(&request).map(|Handshake { check, response: r }| wit::HandshakeReply {
            check: match check {
                HandshakeCheck::None => wit::HandshakeCheck::None,
                HandshakeCheck::Token(t) => wit::HandshakeCheck::Token(t),
            },
            response: response(r),
        })
    }
}

/// The per-request calls with the request passed once: the instance keeps the request
/// `plan_verification` was given for `describe_event`. Each request has a fresh
/// instance, so what is kept is never another request's.
#[cfg(target_arch = "wasm32")]
impl<P: Provider> crate::bindings::exports::hookhost::provider::session::Guest for Adapter<P> {
    fn plan_verification(head: wit::Head, body: Vec<u8>) -> Result<wit::Plan, wit::Rejection> {
        let request = request(head, body)?;
        let answer = P::plan_verification(&request).map(plan).map_err(rejection);
        crate::runtime::keep(request);
        answer
    }

    fn describe_event() -> Result<wit::Event, wit::Rejection> {
        let request = crate::runtime::take().ok_or_else(|| {
            wit::Rejection::Unsupported("describe-event before plan-verification".into())
        })?;
        P::describe_event(&request).map(event).map_err(rejection)
    }
}

impl<P: Provider> crate::bindings::exports::hookhost::provider::reconcile::Guest for Adapter<P> {
    fn reconcile_info(config: String) -> Option<pull::PullInfo> {
        let info = P::reconcile_info(&parse_config(&config).ok()?)?;
        Some(pull::PullInfo {
            hosts: info.hosts,
            api_base: info.api_base,
            lists_events: info.lists_events,
            fetches_objects: info.fetches_objects,
        })
    }

    fn reconcile_request(
        config: String,
        since: i64,
        cursor: Option<String>,
    ) -> Result<pull::RequestPlan, String> {
        P::reconcile_request(&parse_config(&config)?, since, cursor.as_deref()).map(request_plan)
    }

    fn reconcile_page(
        config: String,
        since: i64,
        answer: pull::Answer,
    ) -> Result<pull::Page, String> {
        let page = P::reconcile_page(&parse_config(&config)?, since, &from_answer(answer))?;
        let events = page
            .events
            .into_iter()
            .map(|remote| {
                let e = remote.event;
                let id =
                    e.id.ok_or_else(|| format!("a listed {} event has no id", e.event_type))?;
                Ok(pull::RemoteEvent {
                    id,
                    event_type: e.event_type,
                    occurred_at: e.occurred_at,
                    resource_kind: e.resource_kind,
                    resource_id: e.resource_id,
                    resource_version: e.resource_version,
                    deleted: e.deleted,
                    repair: match remote.repair {
                        Repair::Store(body) => pull::Repair::Store(body),
                        Repair::Redeliver(plan) => pull::Repair::Redeliver(request_plan(plan)),
                    },
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(pull::Page {
            events,
            next_cursor: page.next_cursor,
        })
    }

    fn fetch_request(config: String, event: pull::StoredEvent) -> Option<pull::RequestPlan> {
        let event = StoredEvent {
            id: event.id,
            event_type: event.event_type,
            resource_kind: event.resource_kind,
            resource_id: event.resource_id,
            body: event.body,
        };
        P::fetch_request(&parse_config(&config).ok()?, &event).map(request_plan)
    }

    fn fetch_result(config: String, answer: pull::Answer) -> Result<pull::Fetched, String> {
        let fetched = P::fetch_result(&parse_config(&config)?, &from_answer(answer))?;
        Ok(pull::Fetched {
            resource_version: fetched.resource_version,
            body: fetched.body,
        })
    }
}

fn request_plan(plan: RequestPlan) -> pull::RequestPlan {
    pull::RequestPlan {
        method: plan.method,
        target: plan.target,
        headers: plan.headers,
        body: plan.body,
    }
}

fn from_answer(answer: pull::Answer) -> Answer {
    Answer {
        status: answer.status,
        headers: answer
            .headers
            .into_iter()
            .map(|h| (h.name, h.value))
            .collect(),
        body: answer.body,
    }
}

fn parse_config(config: &str) -> Result<serde_json::Value, String> {
    if config.trim().is_empty() {
        return Ok(serde_json::Value::Object(Default::default()));
    }
    crate::json::value(config).map_err(|e| format!("plugin configuration is not JSON: {e}"))
}

fn response(r: Response) -> wit::Response {
    wit::Response {
        status: r.status,
        content_type: r.content_type,
        headers: r.headers,
        body: r
            .body
            .into_iter()
            .map(|part| match part {
                ResponsePart::Text(t) => wit::ResponsePart::Text(t),
                ResponsePart::HmacSha256Hex(t) => wit::ResponsePart::HmacSha256Hex(t),
            })
            .collect(),
    }
}

fn request(head: wit::Head, body: Vec<u8>) -> Result<Request, wit::Rejection> {
    let config = parse_config(&head.config).map_err(wit::Rejection::Unsupported)?;
    Ok(Request {
        method: head.method,
        url: head.url,
        headers: head
            .headers
            .into_iter()
            .map(|h| (h.name, h.value))
            .collect(),
        body,
        config,
    })
}

fn key_format(format: KeyFormat) -> wit::KeyFormat {
    match format {
        KeyFormat::Raw => wit::KeyFormat::Raw,
        KeyFormat::Base64AfterPrefix(p) => wit::KeyFormat::Base64AfterPrefix(p),
        KeyFormat::Hex => wit::KeyFormat::Hex,
        KeyFormat::Ed25519Hex => wit::KeyFormat::Ed25519Hex,
        KeyFormat::Ed25519Base64AfterPrefix(p) => wit::KeyFormat::Ed25519Base64AfterPrefix(p),
        KeyFormat::EcdsaP256SpkiBase64 => wit::KeyFormat::EcdsaP256SpkiBase64,
    }
}

fn plan(plan: Plan) -> wit::Plan {
    wit::Plan {
        message: plan
            .message
            .into_iter()
            .map(|part| match part {
                Part::Text(t) => wit::Part::Text(t),
                Part::Bytes(b) => wit::Part::Bytes(b),
                Part::Body => wit::Part::Body,
                Part::Header(h) => wit::Part::Header(h),
                Part::Url => wit::Part::Url,
                Part::Method => wit::Part::Method,
            })
            .collect(),
        // One past the host's cap is as refused as any number past it, and keeps the
        // answer small: a header listing thousands of signatures would otherwise pass
        // the plugin's output limit, a plugin failure (500) instead of the sender's
        // 400 `invalid_signature`.
        candidates: plan
            .candidates
            .into_iter()
            .take(crate::MAX_CANDIDATES + 1)
            .map(|c| wit::Candidate {
                algorithm: algorithm(c.algorithm),
                signature: c.signature,
            })
            .collect(),
        timestamp: plan.timestamp,
        message_id: plan.message_id,
    }
}

fn algorithm(algorithm: Algorithm) -> wit::Algorithm {
    match algorithm {
        Algorithm::HmacSha1 => wit::Algorithm::HmacSha1,
        Algorithm::HmacSha256 => wit::Algorithm::HmacSha256,
        Algorithm::HmacSha512 => wit::Algorithm::HmacSha512,
        Algorithm::Ed25519 => wit::Algorithm::Ed25519,
        Algorithm::EcdsaP256Sha256 => wit::Algorithm::EcdsaP256Sha256,
        Algorithm::Token => wit::Algorithm::Token,
        Algorithm::Sha256SecretPrefix => wit::Algorithm::Sha256SecretPrefix,
    }
}

fn event(event: Event) -> wit::Event {
    wit::Event {
        id: event.id,
        event_type: event.event_type,
        occurred_at: event.occurred_at,
        resource_kind: event.resource_kind,
        resource_id: event.resource_id,
        resource_version: event.resource_version,
        deleted: event.deleted,
        disposition: match event.disposition {
            Disposition::Process => wit::Disposition::Process,
            Disposition::Ignore(r) => wit::Disposition::Ignore(r),
            Disposition::Reject(r) => wit::Disposition::Reject(r),
            Disposition::Answer(r) => wit::Disposition::Answer(response(r)),
        },
    }
}

fn rejection(rejection: Rejection) -> wit::Rejection {
    match rejection {
        Rejection::MissingSignature(s) => wit::Rejection::MissingSignature(s),
        Rejection::MalformedSignature(s) => wit::Rejection::MalformedSignature(s),
        Rejection::MalformedBody(s) => wit::Rejection::MalformedBody(s),
        Rejection::Unsupported(s) => wit::Rejection::Unsupported(s),
    }
}
