//! Generic: a sender hookhost has no dedicated plugin for (an in-house service, a
//! smaller SaaS), described by the endpoint's configuration instead of code.
//!
//! The configuration (`[endpoint.config]` in hookhost.toml, JSON to the plugin) says
//! where the signatures are and how they are written, which algorithm signs what, how
//! the secret becomes a key, where the signed timestamp is, and where the event's id,
//! type and resource are. The host checks it when it loads the endpoint
//! (`check_config`): a mistake stops the start with the key named
//! (`endpoint "ledger": config.signature.encoding: unknown encoding "b64" …`). The
//! secret format and the timestamp window it chooses replace the plugin's static
//! facts for that endpoint, so one plugin serves raw, hex and base64 keys, with or
//! without a window. As with every plugin, the host computes and compares the MACs
//! and signatures; `generic` only says what is signed and which signatures the
//! request carries.
//!
//! # How a request is judged
//!
//! 1. The signature header must be present (else `missing_signature`). Its value is
//!    trimmed, `signature.prefix` is stripped (a value without it is malformed), and
//!    the signatures are read as `signature.format` says. Each is decoded with
//!    `signature.encoding`; one that does not decode makes the request malformed
//!    (`invalid_signature`). No signature with an accepted label or key →
//!    `missing_signature`.
//! 2. The timestamp, when configured, is read from its header, key or body field and
//!    converted from its unit to unix seconds; its header or body field absent →
//!    `missing_signature`; its key absent from the signature header, or unreadable →
//!    `invalid_signature`. The host applies the window in both directions.
//! 3. The signed message is `signed` with its placeholders replaced by the request's
//!    bytes as sent. A header it names must be present (`missing_signature`).
//! 4. After the host has verified the request, the event is described from `event`.
//!    With `body = "json"` (the default) a body that is not JSON is `malformed_body`;
//!    a field listed in `event.required` that resolves to nothing is `malformed_body`.
//!
//! # Configuration
//!
//! | key | meaning |
//! | --- | --- |
//! | `algorithm` | required: `hmac-sha1`, `hmac-sha256`, `hmac-sha512`, `ed25519`, `ecdsa-p256-sha256` (DER signatures), `token` (the header carries the secret itself; nothing is signed) or `sha256-secret-prefix` (SHA-256 of key bytes + message) |
//! | `secret.format` | how each configured secret becomes a key: `raw` (its UTF-8 bytes; the default for shared secrets), `hex`, `base64`; for `ed25519`: `ed25519-hex` or `ed25519-base64` (32-byte public key); for `ecdsa-p256-sha256`: `ecdsa-p256-spki-base64` |
//! | `secret.prefix` | `base64` and `ed25519-base64` only: stripped when present (`whsec_`) |
//! | `signature.header` | required: the header that carries the signatures |
//! | `signature.format` | `list` (default) or `key-values` |
//! | `signature.prefix` | stripped from the start of the header value, which must have it (`sha256=`) |
//! | `signature.separator` | `list`: splits several signatures (`","`, `" "`); none: the value is one signature. `key-values`: splits the pairs (default `","`) |
//! | `signature.labels`, `signature.label_separator` | `list`: each entry is `LABEL<label_separator>SIGNATURE` (`v1,<base64>`); only the listed labels are signatures, other labels are skipped, an entry without the separator is malformed |
//! | `signature.key` | `key-values` (`t=1,v1=ab,v1=cd`): the key whose values are signatures, repeatable; keys and values are split at the first `=` and trimmed |
//! | `signature.encoding` | required: `hex`, `base64` (standard, padded), `base64url` (padding optional); `text` for `token` (its default) |
//! | `signed` | the signed message, a template (below); default `"{body}"`; must include `{body}`. Not with `token`, which signs nothing (its message is the body, so the event ids the host derives differ by body) |
//! | `timestamp.header` / `timestamp.key` / `timestamp.pointer` | exactly one: a header, a key of the `key-values` signature header, or a JSON Pointer into the body. A header's or a key's time must be signed (`{timestamp}`, or the header as `{header:NAME}`, in `signed`): a window on an unsigned time stops no replay. Not with `token` |
//! | `timestamp.unit` | required with a timestamp: `seconds`, `milliseconds` (either may have a fraction, `1521472262.908181`, rounded down) or `rfc3339` |
//! | `timestamp.tolerance_seconds` | the window, default 300; the endpoint's `tolerance` overrides it. Without a `timestamp` table nothing is timestamped and no window applies |
//! | `message_id` | value template(s) for the delivery id stored with the receipt |
//! | `body` | `json` (default: the body must be JSON) or `any` (fields of a body that is not JSON resolve to nothing); not `any` with `sha256-secret-prefix`, which anyone who saw one request can extend with bytes only the JSON check refuses |
//! | `event.id` | value template(s) for the event id, constant across the sender's retries; unset or unresolved: the host derives one from the signed message |
//! | `event.type` | value template(s); unresolved: `unknown` |
//! | `event.occurred_at`, `event.occurred_at_unit` | value template(s) and `seconds`, `milliseconds` or `rfc3339` |
//! | `event.resource` | a table, or a list of tables tried in order, with `kind`, `id` (both must resolve), optional `version` and `version_format` (`integer` as is, or `rfc3339` → unix milliseconds) |
//! | `event.deleted` | a condition (below): the resource was deleted |
//! | `event.ignore` | a condition: store the request but do not deliver it (a ping); the reason is the value tested |
//! | `event.required` | which of `id`, `type`, `occurred_at`, `resource` must resolve, else `malformed_body` |
//! | `reconcile` | optional: where the sender's API lists its events (below) |
//!
//! Unknown keys are refused, so a misspelt key is an error rather than a silent default.
//!
//! # Reconciliation
//!
//! With a `reconcile` table (`[endpoint.config.reconcile]`; the API credential is the
//! host's `[endpoint.reconcile]`), hookhost can page through the sender's list of
//! events and store those that never arrived. Each listed item's JSON text, exactly as
//! listed, is the body stored for it, so the list must hold whole events, as pushed.
//!
//! | key | meaning |
//! | --- | --- |
//! | `reconcile.api_base` | required: the API's base URL, `https://…` or `http://…` (the endpoint's `[endpoint.reconcile] api_base` overrides it) |
//! | `reconcile.hosts` | required, at least one: host names an absolute request URL may address |
//! | `reconcile.path` | required: the first page's path and query on the base, starting with `/`; `{since}` becomes the run's start in unix seconds (`"/v1/events?created_after={since}"`) |
//! | `reconcile.items` | required: JSON Pointer to the page's array of events (`"/data"`); `""` when the page is the array |
//! | `reconcile.id`, `reconcile.type` | required: JSON Pointers into each item; an item without either fails the page, naming the item and the pointer |
//! | `reconcile.resource_kind`, `reconcile.resource_id` | optional, both or neither: JSON Pointers to the resource |
//! | `reconcile.version` | optional, with a resource: JSON Pointer to its version, a non-negative integer |
//! | `reconcile.occurred_at` | optional: JSON Pointer to the event's time in unix seconds |
//! | `reconcile.cursor` | optional: JSON Pointer into the page to the next page's cursor; absent, `null` or `""` (or an empty page) ends the listing. Without it the first page is the only one |
//! | `reconcile.cursor_param` | with `cursor`: the query parameter the cursor is sent as (default `cursor`), appended with `&` (or `?`), the cursor percent-encoded |
//!
//! Values are read as a value template reads a body field (`{/id}`): a string as it
//! is, a number or boolean as written, empty as absent. The listed id must be the id
//! a push of the same event gets from `event.id`, which is therefore required, and
//! its first template must be one body field as it is (`"{/id}"`: no header, filter
//! or text, which a listed item cannot have): a listed event whose id has a receipt
//! is not stored again. `event.deleted` and
//! `event.ignore` are not applied to listed events.
//!
//! ```toml
//! [endpoint.config.reconcile]
//! api_base = "https://api.ledger.example"
//! hosts = ["api.ledger.example"]
//! path = "/v2/events?created_after={since}&limit=100"
//! items = "/events"
//! id = "/delivery_id"
//! type = "/event"
//! resource_kind = "/account/kind"
//! resource_id = "/account/id"
//! version = "/account/revision"
//! occurred_at = "/created"
//! cursor = "/next_page"
//! cursor_param = "page"
//! ```
//!
//! # Templates
//!
//! Text outside braces is literal; `{{` and `}}` are literal braces.
//!
//! - In `signed`: `{body}` (the raw body), `{header:NAME}` (the header's raw value),
//!   `{url}` (the public URL the sender addressed), `{method}`, and `{timestamp}` (the
//!   timestamp exactly as sent, from `timestamp.header` or `timestamp.key`).
//! - In event fields and `message_id`: `{header:NAME}` (trimmed) and `{/json/pointer}`
//!   (a string, number or boolean of the body; RFC 6901 escapes `~0` and `~1`), either
//!   optionally ending in `|before:SEP` (the value up to the first `SEP`, all of it
//!   when it has none: `{/type|before:.}` of `invoice.paid` is `invoice`). A template
//!   resolves when every placeholder in it finds a non-empty value; a list of templates
//!   is tried in order and the first that resolves wins, so a last literal is a
//!   default (`type = ["{/type}", "unknown"]`). A literal that looks like a pointer or
//!   header (`"/id"`) is refused, and so is a constant `id` or `message_id`. A header
//!   name or pointer step containing `|` or `}` cannot be written.
//!
//! `version` and `deleted` describe the resource, so they apply only when a resource
//! resolves.
//!
//! A condition (`deleted`, `ignore`) is `{ value = TEMPLATE, equals = …, starts_with =
//! …, ends_with = … }` (each a string or a list; any one matching is enough), or just a
//! template whose value must be `true` (`deleted = "{/deleted}"`).
//!
//! # Examples
//!
//! Each of these reproduces a dedicated plugin's scheme from configuration alone; the
//! vectors in `fixtures/vectors/generic.json` run the dedicated plugins' vectors
//! through these files (`mappings/` in this crate). The scheme facts and their sources
//! are in the dedicated plugins' crate docs.
//!
//! ## Stripe
//!
//! Scheme: <https://docs.stripe.com/webhooks#verify-manually> (the `stripe` plugin).
//!
//! ```toml
#![doc = include_str!("../mappings/stripe.toml")]
//! ```
//!
//! ## GitHub
//!
//! Scheme: <https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries>
//! (the `github` plugin).
//!
//! ```toml
#![doc = include_str!("../mappings/github.toml")]
//! ```
//!
//! ## Shopify
//!
//! Scheme: <https://shopify.dev/docs/apps/build/webhooks/verify-deliveries> (the `shopify`
//! plugin).
//!
//! ```toml
#![doc = include_str!("../mappings/shopify.toml")]
//! ```
//!
//! ## Slack
//!
//! Scheme: <https://docs.slack.dev/authentication/verifying-requests-from-slack> (the
//! `slack` plugin).
//!
//! ```toml
#![doc = include_str!("../mappings/slack.toml")]
//! ```
//!
//! ## Standard Webhooks
//!
//! Scheme: <https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md>
//! (the `standard-webhooks` plugin).
//!
//! ```toml
#![doc = include_str!("../mappings/standard-webhooks.toml")]
//! ```
//!
//! ## An in-house sender
//!
//! A made-up sender showing the rest: URL and method signed, hex keys, base64url,
//! millisecond timestamps, a resource kind cut from the event type, a ping ignored.
//!
//! ```toml
#![doc = include_str!("../mappings/in-house.toml")]
//! ```
//!
//! # What a mapping cannot say
//!
//! One algorithm and one signature header per endpoint: GitHub's fallback to the
//! legacy `X-Hub-Signature` (SHA-1), Standard Webhooks' `svix-*` fallback and its
//! mixed `v1`/`v1a` headers need the dedicated plugins (or one endpoint per variant).
//! Event fields come from headers and JSON bodies only: Slack's form-encoded commands
//! are not typed (`unknown`, and the id is the host's), and a JSON-looking body that
//! is not JSON cannot be refused while forms are accepted. No handshakes are answered.
//! A version cannot depend on the event's type (only `deleted` and `ignore` are
//! conditions): the GitHub mapping gives the repository no version, where the `github`
//! plugin versions it in `repository` events only.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

mod config;
mod reconcile;
mod signature;
mod template;

use config::{Mapping, TimeUnit, TimestampSource, TimestampSpec, VersionFormat};
use core::cell::OnceCell;
use hookhost_plugin_sdk::serde_json::Value;
use hookhost_plugin_sdk::{
    Algorithm, Answer, Candidate, ConfigError, EndpointFacts, Event, Json, KeyFormat, Page, Part,
    Plan, PluginInfo, Provider, ReconcileInfo, Rejection, Request, RequestPlan, decode,
};
use template::{Piece, Source, Template};

pub struct Generic;

impl Provider for Generic {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "generic".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "any sender, mapped by the endpoint's configuration".into(),
            // Replaced per endpoint by the configuration (`check_config`).
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "the sender's own (generic maps any sender; see its documentation)"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        config::algorithms()
    }

    fn check_config(config: &Value) -> Result<EndpointFacts, ConfigError> {
        let mapping = Mapping::parse(config)?;
        Ok(EndpointFacts {
            key_formats: vec![mapping.key_format],
            default_tolerance_seconds: mapping.timestamp.map(|t| t.tolerance_seconds),
        })
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        plan(&mapping(req)?, req)
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        describe(&mapping(req)?, req)
    }

    fn reconcile_info(config: &Value) -> Option<ReconcileInfo> {
        reconcile::info(config)
    }

    fn reconcile_request(
        config: &Value,
        since: i64,
        cursor: Option<&str>,
    ) -> Result<RequestPlan, String> {
        reconcile::request(&reconcile::spec(config)?, since, cursor)
    }

    fn reconcile_page(config: &Value, _since: i64, answer: &Answer) -> Result<Page, String> {
        reconcile::page(&reconcile::spec(config)?, answer)
    }
}

/// The endpoint's mapping; the host refuses a bad one at load, so this only fails
/// when a plugin is called with a configuration the host never checked.
fn mapping(req: &Request) -> Result<Mapping, Rejection> {
    Mapping::parse(req.config()).map_err(|e| {
        let key = if e.key.is_empty() { "config" } else { &e.key };
        Rejection::Unsupported(format!("plugin configuration: {key}: {}", e.message))
    })
}

fn plan(mapping: &Mapping, req: &Request) -> Result<Plan, Rejection> {
    let spec = &mapping.signature;
    let header = req.signature_header(&spec.header)?;
    let timestamp_key = match &mapping.timestamp {
        Some(TimestampSpec {
            source: TimestampSource::Key(key),
            ..
        }) => Some(key.as_str()),
        _ => None,
    };
    let found = signature::extract(spec, header, timestamp_key)?;
    let (timestamp, timestamp_part) = match &mapping.timestamp {
        None => (None, None),
        Some(ts) => {
            let (text, part) = match &ts.source {
                TimestampSource::Header(name) => (
                    req.signature_header(name)?.to_owned(),
                    // The header's bytes as sent are what the sender signed.
                    Some(Part::Header(name.clone())),
                ),
                TimestampSource::Key(key) => {
                    let value = found.timestamp.ok_or_else(|| {
                        Rejection::MalformedSignature(format!("{} has no {key}=", spec.header))
                    })?;
                    (value.to_owned(), Some(Part::Text(value.to_owned())))
                }
                TimestampSource::Pointer(pointer) => {
                    let body = req.json()?;
                    let value = scalar(&body, pointer).ok_or_else(|| {
                        Rejection::MissingSignature(format!("timestamp {pointer} in the body"))
                    })?;
                    (value, None)
                }
            };
            let seconds = unix_seconds(&text, ts.unit).ok_or_else(|| {
                Rejection::MalformedSignature(format!(
                    "timestamp {text:?} is not {}",
                    ts.unit.name()
                ))
            })?;
            (Some(seconds), part)
        }
    };
    if let Some(absent) = mapping.signed.headers().find(|h| req.header(h).is_none()) {
        return Err(Rejection::MissingSignature(absent.to_owned()));
    }
    if found.signatures.is_empty() {
        return Err(Rejection::MissingSignature(format!(
            "{}: no accepted signature",
            spec.header
        )));
    }
    let message = mapping
        .signed
        .pieces
        .iter()
        .map(|piece| match piece {
            Piece::Text(text) => Ok(Part::Text(text.clone())),
            Piece::Body => Ok(Part::Body),
            Piece::Url => Ok(Part::Url),
            Piece::Method => Ok(Part::Method),
            Piece::Timestamp => timestamp_part
                .clone()
                .ok_or_else(|| Rejection::Unsupported("{timestamp} has no source".into())),
            Piece::Field {
                source: Source::Header(name),
                ..
            } => Ok(Part::Header(name.clone())),
            Piece::Field {
                source: Source::Pointer(_),
                ..
            } => Err(Rejection::Unsupported(
                "a body field cannot be signed".into(),
            )),
        })
        .collect::<Result<_, _>>()?;
    Ok(Plan {
        message,
        candidates: found
            .signatures
            .into_iter()
            .map(|s| Candidate::new(mapping.algorithm, s))
            .collect(),
        timestamp,
        message_id: Fields::new(req).first(&mapping.message_id),
    })
}

fn describe(mapping: &Mapping, req: &Request) -> Result<Event, Rejection> {
    let fields = Fields::new(req);
    if mapping.json_body {
        let _ = fields.body.set(Some(req.json()?));
    }
    let spec = &mapping.event;
    let missing = |field: &str, templates: &[Template]| {
        let tried: Vec<&str> = templates.iter().map(|t| t.text.as_str()).collect();
        Rejection::MalformedBody(format!("event.{field}: nothing found at {tried:?}"))
    };
    let id = fields.first(&spec.id);
    if spec.required.id && id.is_none() {
        return Err(missing("id", &spec.id));
    }
    let event_type = fields.first(&spec.event_type);
    if spec.required.event_type && event_type.is_none() {
        return Err(missing("type", &spec.event_type));
    }
    let occurred_at = spec.occurred_at.as_ref().and_then(|(templates, unit)| {
        fields
            .first(templates)
            .and_then(|text| unix_seconds(&text, *unit))
    });
    if spec.required.occurred_at && occurred_at.is_none() {
        let templates = spec.occurred_at.as_ref().map(|(t, _)| t.as_slice());
        return Err(missing("occurred_at", templates.unwrap_or_default()));
    }
    let mut event = Event::new(event_type.unwrap_or_else(|| "unknown".into()))
        .maybe_id(id)
        .occurred_at(occurred_at);
    let resource = spec
        .resources
        .iter()
        .find_map(|r| Some((r, fields.first(&r.kind)?, fields.first(&r.id)?)));
    match resource {
        Some((resource, kind, id)) => {
            let version = resource.version.as_ref().and_then(|(templates, format)| {
                let text = fields.first(templates)?;
                match format {
                    VersionFormat::Integer => text.parse::<u64>().ok(),
                    VersionFormat::Rfc3339 => decode::rfc3339_millis(&text),
                }
            });
            let deleted = spec.deleted.as_ref().is_some_and(|condition| {
                fields
                    .first(&condition.value)
                    .is_some_and(|v| condition.matches(&v))
            });
            event = event.resource(kind, id).version(version).deleted(deleted);
        }
        None if spec.required.resource => {
            let ids: Vec<Template> = spec.resources.iter().flat_map(|r| r.id.clone()).collect();
            return Err(missing("resource", &ids));
        }
        None => {}
    }
    if let Some(condition) = &spec.ignore
        && let Some(value) = fields.first(&condition.value)
        && condition.matches(&value)
    {
        event = event.ignore(value);
    }
    Ok(event)
}

/// Unix seconds from a timestamp's text in its unit; a number of seconds or
/// milliseconds may have a fraction (`1521472262.908181`), rounded down.
fn unix_seconds(text: &str, unit: TimeUnit) -> Option<i64> {
    let text = text.trim();
    let number = || {
        text.parse::<i64>()
            .ok()
            .or_else(|| decimal(text).map(decode::floor))
    };
    match unit {
        TimeUnit::Seconds => number(),
        TimeUnit::Milliseconds => number().map(|ms| ms.div_euclid(1000)),
        TimeUnit::Rfc3339 => decode::rfc3339_seconds(text),
    }
}

/// A number written with a fraction, as senders stamp times: digits, `.`, digits,
/// an optional `-` first; no exponent, `inf` or `NaN`, and at most 15 whole digits,
/// which an `f64` holds exactly.
fn decimal(text: &str) -> Option<f64> {
    let (whole, fraction) = text.strip_prefix('-').unwrap_or(text).split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !(digits(whole) && digits(fraction) && whole.len() <= 15) {
        return None;
    }
    text.parse().ok()
}

/// A JSON string's text, or a number's or boolean's JSON text; `None` for null,
/// objects, arrays and absent fields.
fn scalar(body: &Json, pointer: &str) -> Option<String> {
    let raw = body.raw(pointer)?;
    match raw.as_bytes().first()? {
        b'"' => body.str(pointer).map(|s| s.into_owned()),
        b't' | b'f' | b'-' | b'0'..=b'9' => Some(raw.to_owned()),
        _ => None,
    }
}

/// Header and body values for value templates; the body is parsed once, when first read.
struct Fields<'r> {
    req: &'r Request,
    body: OnceCell<Option<Json>>,
}

impl<'r> Fields<'r> {
    fn new(req: &'r Request) -> Self {
        Fields {
            req,
            body: OnceCell::new(),
        }
    }

    fn lookup(&self, source: &Source) -> Option<String> {
        let value = match source {
            Source::Header(name) => self.req.header_str(name)?.trim().to_owned(),
            Source::Pointer(pointer) => {
                let body = self.body.get_or_init(|| self.req.json().ok());
                scalar(body.as_ref()?, pointer)?
            }
        };
        (!value.is_empty()).then_some(value)
    }

    /// The template's text, when every placeholder finds a non-empty value.
    fn resolve(&self, template: &Template) -> Option<String> {
        let mut out = String::new();
        for piece in &template.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Field { source, before } => {
                    let value = self.lookup(source)?;
                    let value = match before {
                        Some(sep) => value.split(sep.as_str()).next().unwrap_or_default(),
                        None => &value,
                    };
                    if value.is_empty() {
                        return None;
                    }
                    out.push_str(value);
                }
                // Request bytes are only for signed messages; value templates never hold them.
                Piece::Body | Piece::Url | Piece::Method | Piece::Timestamp => return None,
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// The first alternative that resolves.
    fn first(&self, alternatives: &[Template]) -> Option<String> {
        alternatives.iter().find_map(|t| self.resolve(t))
    }
}

hookhost_plugin_sdk::export_provider!(Generic);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests;
