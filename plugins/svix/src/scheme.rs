//! The Svix signature scheme, shared by every plugin for a Svix-signed sender.
//!
//! This one file is compiled into the `svix`, `clerk` and `resend` plugins
//! (`#[path = "../../svix/src/scheme.rs"] mod svix;`). It is not reached through a
//! crate dependency because the host builds every plugin in one `cargo build`, where
//! Cargo unifies features: a `svix` rlib linked into another plugin would carry the svix
//! plugin's component exports too, and two sets of exports do not link.
//!
//! Signed message `{svix-id}.{svix-timestamp}.{raw body}` (raw header values),
//! HMAC-SHA256 keyed by the base64 after `whsec_`, signatures `v1,<base64>`
//! space-separated, unix-seconds timestamp within ±300 s; each `svix-*` header falls
//! back to its `webhook-*` name. Sources: see the `svix` plugin's crate docs.

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, KeyFormat, Part, Plan, PluginInfo, Rejection, Request, decode,
};

/// The Svix libraries' window, both directions: five minutes.
pub const TOLERANCE_SECONDS: u32 = 300;

/// Plugin facts for a Svix-signed sender: `whsec_` secrets, ±300 s.
pub fn info(name: &str, provider: &str, retry_behaviour: &str) -> PluginInfo {
    PluginInfo {
        name: name.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        provider: provider.into(),
        key_formats: vec![KeyFormat::Base64AfterPrefix("whsec_".into())],
        default_tolerance_seconds: Some(TOLERANCE_SECONDS),
        retry_behaviour: retry_behaviour.into(),
    }
}

/// The algorithms a Svix plan uses.
pub fn algorithms() -> Vec<Algorithm> {
    vec![Algorithm::HmacSha256]
}

/// What a Svix-signed request signs: `{id}.{timestamp}.{body}`, and every `v1` signature
/// (other versions are skipped, as the Svix libraries do).
pub fn plan(req: &Request) -> Result<Plan, Rejection> {
    let [id_name, ts_name, sig_name] =
        ["id", "timestamp", "signature"].map(|field| header_name(req, field));
    let id = req.signature_header(&id_name)?;
    let timestamp = decode::unix_seconds(req.signature_header(&ts_name)?)?;
    let header = req.signature_header(&sig_name)?;
    let mut candidates = Vec::new();
    for entry in header.split_ascii_whitespace() {
        let (version, signature) = entry.split_once(',').ok_or_else(|| {
            Rejection::MalformedSignature(format!("{sig_name} entry without a version"))
        })?;
        if version == "v1" {
            candidates.push(Candidate::new(
                Algorithm::HmacSha256,
                decode::base64(signature)?,
            ));
        }
    }
    if candidates.is_empty() {
        return Err(Rejection::MissingSignature(format!("{sig_name} v1")));
    }
    Ok(Plan {
        message: vec![
            Part::Header(id_name),
            Part::Text(".".into()),
            Part::Header(ts_name),
            Part::Text(".".into()),
            Part::Body,
        ],
        candidates,
        timestamp: Some(timestamp),
        message_id: Some(id.to_owned()),
    })
}

/// The Svix message id (`svix-id`, else `webhook-id`), constant across Svix's retries.
pub fn message_id(req: &Request) -> Option<&str> {
    req.header_str(&header_name(req, "id"))
        .map(str::trim)
        .filter(|id| !id.is_empty())
}

/// `svix-<field>`, or `webhook-<field>` when only that one is present.
fn header_name(req: &Request, field: &str) -> String {
    let svix = format!("svix-{field}");
    let webhook = format!("webhook-{field}");
    if req.header(&svix).is_none() && req.header(&webhook).is_some() {
        webhook
    } else {
        svix
    }
}
