//! The edge between generated bindings and the SDK's plain types.

use crate::bindings::hookhost::provider::types as wit;
use crate::{
    Algorithm, ConfigError, Disposition, EndpointFacts, Event, Handshake, HandshakeCheck,
    KeyFormat, Part, Plan, Provider, Rejection, Request, Response, ResponsePart,
};
use std::marker::PhantomData;

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

fn parse_config(config: &str) -> Result<serde_json::Value, String> {
    if config.trim().is_empty() {
        return Ok(serde_json::Value::Object(Default::default()));
    }
    serde_json::from_str(config).map_err(|e| format!("plugin configuration is not JSON: {e}"))
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
        candidates: plan
            .candidates
            .into_iter()
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
