//! Generated bindings for `hookhost:provider@0.1.0`, converted to the SDK's plain types
//! at this edge; nothing else in the host names a wit type.

use hookhost_plugin_sdk as sdk;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "provider",
});

use self::hookhost::provider::types as wit;

pub use wit::{Head, Header};

/// The contract version this host speaks; a component must export this interface.
pub const PLUGIN_INTERFACE: &str = "hookhost:provider/plugin@0.1.0";

pub fn info(info: wit::PluginInfo) -> sdk::PluginInfo {
    sdk::PluginInfo {
        name: info.name,
        version: info.version,
        provider: info.provider,
        key_formats: info.key_formats.into_iter().map(key_format).collect(),
        default_tolerance_seconds: info.default_tolerance_seconds,
        retry_behaviour: info.retry_behaviour,
    }
}

fn key_format(format: wit::KeyFormat) -> sdk::KeyFormat {
    match format {
        wit::KeyFormat::Raw => sdk::KeyFormat::Raw,
        wit::KeyFormat::Base64AfterPrefix(p) => sdk::KeyFormat::Base64AfterPrefix(p),
        wit::KeyFormat::Hex => sdk::KeyFormat::Hex,
        wit::KeyFormat::Ed25519Hex => sdk::KeyFormat::Ed25519Hex,
        wit::KeyFormat::Ed25519Base64AfterPrefix(p) => sdk::KeyFormat::Ed25519Base64AfterPrefix(p),
    }
}

pub fn plan(plan: wit::Plan) -> sdk::Plan {
    sdk::Plan {
        message: plan
            .message
            .into_iter()
            .map(|part| match part {
                wit::Part::Text(t) => sdk::Part::Text(t),
                wit::Part::Bytes(b) => sdk::Part::Bytes(b),
                wit::Part::Body => sdk::Part::Body,
                wit::Part::Header(h) => sdk::Part::Header(h),
                wit::Part::Url => sdk::Part::Url,
                wit::Part::Method => sdk::Part::Method,
            })
            .collect(),
        candidates: plan
            .candidates
            .into_iter()
            .map(|c| sdk::Candidate {
                algorithm: match c.algorithm {
                    wit::Algorithm::HmacSha1 => sdk::Algorithm::HmacSha1,
                    wit::Algorithm::HmacSha256 => sdk::Algorithm::HmacSha256,
                    wit::Algorithm::HmacSha512 => sdk::Algorithm::HmacSha512,
                    wit::Algorithm::Ed25519 => sdk::Algorithm::Ed25519,
                },
                signature: c.signature,
            })
            .collect(),
        timestamp: plan.timestamp,
        message_id: plan.message_id,
    }
}

pub fn event(event: wit::Event) -> sdk::Event {
    sdk::Event {
        id: event.id,
        event_type: event.event_type,
        occurred_at: event.occurred_at,
        resource_kind: event.resource_kind,
        resource_id: event.resource_id,
        resource_version: event.resource_version,
        deleted: event.deleted,
        disposition: match event.disposition {
            wit::Disposition::Process => sdk::Disposition::Process,
            wit::Disposition::Ignore(r) => sdk::Disposition::Ignore(r),
            wit::Disposition::Reject(r) => sdk::Disposition::Reject(r),
        },
    }
}

pub fn rejection(rejection: wit::Rejection) -> sdk::Rejection {
    match rejection {
        wit::Rejection::MissingSignature(s) => sdk::Rejection::MissingSignature(s),
        wit::Rejection::MalformedSignature(s) => sdk::Rejection::MalformedSignature(s),
        wit::Rejection::MalformedBody(s) => sdk::Rejection::MalformedBody(s),
        wit::Rejection::Unsupported(s) => sdk::Rejection::Unsupported(s),
    }
}

/// Bytes a plugin handed back, so a runaway plugin cannot flood the host.
pub fn plan_size(plan: &wit::Plan) -> usize {
    let parts: usize = plan
        .message
        .iter()
        .map(|p| match p {
            wit::Part::Text(t) | wit::Part::Header(t) => t.len(),
            wit::Part::Bytes(b) => b.len(),
            wit::Part::Body | wit::Part::Url | wit::Part::Method => 1,
        })
        .sum();
    let candidates: usize = plan.candidates.iter().map(|c| c.signature.len() + 1).sum();
    parts + candidates + plan.message_id.as_ref().map_or(0, String::len)
}

pub fn event_size(event: &wit::Event) -> usize {
    let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let reason = match &event.disposition {
        wit::Disposition::Process => 0,
        wit::Disposition::Ignore(r) | wit::Disposition::Reject(r) => r.len(),
    };
    event.event_type.len()
        + opt(&event.id)
        + opt(&event.resource_kind)
        + opt(&event.resource_id)
        + reason
}

pub fn rejection_size(rejection: &wit::Rejection) -> usize {
    match rejection {
        wit::Rejection::MissingSignature(s)
        | wit::Rejection::MalformedSignature(s)
        | wit::Rejection::MalformedBody(s)
        | wit::Rejection::Unsupported(s) => s.len(),
    }
}
