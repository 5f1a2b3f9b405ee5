//! The endpoint's mapping: its plugin configuration, checked and parsed. Every mistake
//! is a [`ConfigError`] naming the dotted key (`signature.encoding`).

use hookhost_plugin_sdk::prelude::*;

use crate::signature::{Encoding, Labels, Layout, SignatureSpec};
use crate::template::{self, Context, Piece, Source, Template};
use hookhost_plugin_sdk::serde_json::{Map, Value};
use hookhost_plugin_sdk::{Algorithm, ConfigError, KeyFormat};

/// The window when `timestamp` names a source but no `tolerance_seconds`.
pub const DEFAULT_TOLERANCE_SECONDS: u32 = 300;

/// One endpoint's description of its sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub algorithm: Algorithm,
    pub key_format: KeyFormat,
    pub signature: SignatureSpec,
    /// The signed message; for `token` (nothing is signed) the body, which only feeds
    /// the event id the host derives when the mapping has none.
    pub signed: Template,
    pub timestamp: Option<TimestampSpec>,
    /// Alternatives for the delivery id, first that resolves.
    pub message_id: Vec<Template>,
    /// The body must be JSON (`body = "json"`, the default).
    pub json_body: bool,
    pub event: EventSpec,
    /// Listing the sender's events through its API; `None` without `[reconcile]`.
    pub reconcile: Option<ReconcileSpec>,
}

/// Where the sender's API lists its events, and where each listed event's fields are.
/// Every pointer is a JSON Pointer (RFC 6901) checked by [`template::json_pointer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileSpec {
    /// `https://…` or `http://…`, the sender's API.
    pub api_base: String,
    /// Hosts a request may address with an absolute URL (never empty).
    pub hosts: Vec<String>,
    /// The first page's path and query on `api_base`; `{since}` is replaced by the
    /// run's start, in unix seconds.
    pub path: String,
    /// The page's array of events; `""` when the page body is the array itself.
    pub items: String,
    /// In each item: the event id, as a push of it carries it.
    pub id: String,
    pub event_type: String,
    /// The resource's kind and id, both or neither.
    pub resource: Option<(String, String)>,
    /// The resource's version, a non-negative integer (only with a resource).
    pub version: Option<String>,
    /// Unix seconds.
    pub occurred_at: Option<String>,
    /// In the page: the next page's cursor; absent, `null` or `""` after the last page.
    pub cursor: Option<String>,
    /// The query parameter the cursor is sent as (`cursor`), URL-safe as written.
    pub cursor_param: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimestampSpec {
    pub source: TimestampSource,
    pub unit: TimeUnit,
    pub tolerance_seconds: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimestampSource {
    /// A header (lower-case name).
    Header(String),
    /// A key of the key-values signature header.
    Key(String),
    /// A JSON Pointer into the body.
    Pointer(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Seconds,
    Milliseconds,
    Rfc3339,
}

impl TimeUnit {
    pub fn name(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "unix seconds",
            TimeUnit::Milliseconds => "unix milliseconds",
            TimeUnit::Rfc3339 => "an RFC 3339 time",
        }
    }

    fn parse(name: &str) -> Option<TimeUnit> {
        Some(match name {
            "seconds" => TimeUnit::Seconds,
            "milliseconds" => TimeUnit::Milliseconds,
            "rfc3339" => TimeUnit::Rfc3339,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionFormat {
    /// A non-negative integer, as is.
    Integer,
    /// An RFC 3339 time, as unix milliseconds.
    Rfc3339,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EventSpec {
    pub id: Vec<Template>,
    pub event_type: Vec<Template>,
    pub occurred_at: Option<(Vec<Template>, TimeUnit)>,
    /// Candidates, first whose kind and id resolve.
    pub resources: Vec<ResourceSpec>,
    pub deleted: Option<Matcher>,
    pub ignore: Option<Matcher>,
    pub required: Required,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceSpec {
    pub kind: Vec<Template>,
    pub id: Vec<Template>,
    pub version: Option<(Vec<Template>, VersionFormat)>,
}

/// A condition on one value: equal to one of, starting or ending with one of; with none
/// of these, the value must be `true`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    pub value: Vec<Template>,
    pub equals: Vec<String>,
    pub starts_with: Vec<String>,
    pub ends_with: Vec<String>,
}

impl Matcher {
    pub fn matches(&self, value: &str) -> bool {
        if self.equals.is_empty() && self.starts_with.is_empty() && self.ends_with.is_empty() {
            return value == "true";
        }
        self.equals.iter().any(|e| value == e)
            || self
                .starts_with
                .iter()
                .any(|p| value.starts_with(p.as_str()))
            || self.ends_with.iter().any(|s| value.ends_with(s.as_str()))
    }
}

/// Event fields that must resolve, else the body is `malformed_body`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Required {
    pub id: bool,
    pub event_type: bool,
    pub occurred_at: bool,
    pub resource: bool,
}

const ALGORITHMS: &[(&str, Algorithm)] = &[
    ("hmac-sha1", Algorithm::HmacSha1),
    ("hmac-sha256", Algorithm::HmacSha256),
    ("hmac-sha512", Algorithm::HmacSha512),
    ("ed25519", Algorithm::Ed25519),
    ("ecdsa-p256-sha256", Algorithm::EcdsaP256Sha256),
    ("token", Algorithm::Token),
    ("sha256-secret-prefix", Algorithm::Sha256SecretPrefix),
];

/// Every algorithm a mapping can name.
pub fn algorithms() -> Vec<Algorithm> {
    ALGORITHMS.iter().map(|(_, a)| *a).collect()
}

impl Mapping {
    /// Check and parse a plugin configuration.
    pub fn parse(config: &Value) -> Result<Mapping, ConfigError> {
        let root = Table::new(
            "",
            config,
            &[
                "algorithm",
                "secret",
                "signature",
                "signed",
                "timestamp",
                "message_id",
                "body",
                "event",
                "reconcile",
            ],
        )?;
        let algorithm = algorithm(&root)?;
        let key_format = key_format(&root, algorithm)?;
        let signature = signature(&root, algorithm)?;
        let timestamp = timestamp(&root, &signature)?;
        let signed = signed(&root, algorithm, timestamp.as_ref())?;
        let message_id = root.templates("message_id", Context::Value)?;
        if let Some(constant) = message_id.iter().find(|t| t.is_constant()) {
            return Err(root.error(
                "message_id",
                format!("{:?} is the same for every delivery", constant.text),
            ));
        }
        let json_body = match root.string("body")? {
            None | Some("json") => true,
            Some("any") => false,
            Some(other) => {
                return Err(root.error("body", format!("{other:?}: expected \"json\" or \"any\"")));
            }
        };
        // SHA-256(secret || message) is not a MAC: anyone who saw one signed request
        // can sign it with bytes appended (length extension). Those bytes begin with
        // 0x80, never valid UTF-8, so only the JSON check keeps such a body out.
        if algorithm == Algorithm::Sha256SecretPrefix && !json_body {
            return Err(root.error(
                "body",
                "\"any\" with sha256-secret-prefix: SHA-256(secret || message) can be \
                 extended by anyone who saw one signed request, and only the JSON check \
                 refuses such a body",
            ));
        }
        let event = match root.table("event", EVENT_KEYS)? {
            Some(table) => event(&table)?,
            None => EventSpec::default(),
        };
        let reconcile = match root.table("reconcile", RECONCILE_KEYS)? {
            Some(table) => Some(reconcile(&table)?),
            None => None,
        };
        if reconcile.is_some() && event.id.is_empty() {
            return Err(ConfigError::new(
                "event.id",
                "required with reconcile: a listed event is matched with its push by id, \
                 and without event.id a push's id is derived from its bytes",
            ));
        }
        // A listed item has no headers and its id is read as it is (`reconcile.id`):
        // a push's id made otherwise would never match one, and every run would store
        // and deliver every listed event again.
        if reconcile.is_some()
            && let Some(first) = event.id.first()
            && !matches!(
                first.pieces.as_slice(),
                [Piece::Field {
                    source: Source::Pointer(_),
                    before: None
                }]
            )
        {
            return Err(ConfigError::new(
                "event.id",
                format!(
                    "{:?} with reconcile: a push's id must be one field of the body as it \
                     is, like \"{{/id}}\" (no header, filter or text), so that a listed \
                     event's id (reconcile.id) can match it",
                    first.text
                ),
            ));
        }
        Ok(Mapping {
            algorithm,
            key_format,
            signature,
            signed,
            timestamp,
            message_id,
            json_body,
            event,
            reconcile,
        })
    }
}

fn algorithm(root: &Table) -> Result<Algorithm, ConfigError> {
    let names = ALGORITHMS
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ");
    let name = root.required_string("algorithm", &format!("one of {names}"))?;
    ALGORITHMS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, a)| *a)
        .ok_or_else(|| {
            root.error(
                "algorithm",
                format!("unknown algorithm {name:?}: expected one of {names}"),
            )
        })
}

fn key_format(root: &Table, algorithm: Algorithm) -> Result<KeyFormat, ConfigError> {
    let table = root.table("secret", &["format", "prefix"])?;
    let format = table
        .as_ref()
        .map(|t| t.string("format"))
        .transpose()?
        .flatten();
    let prefix = table
        .as_ref()
        .map(|t| t.string("prefix"))
        .transpose()?
        .flatten();
    let fits: &[&str] = match algorithm {
        Algorithm::Ed25519 => &["ed25519-hex", "ed25519-base64"],
        Algorithm::EcdsaP256Sha256 => &["ecdsa-p256-spki-base64"],
        _ => &["raw", "hex", "base64"],
    };
    let expected = fits.join(", ");
    let format = match format {
        Some(format) => format,
        // Shared secrets are most often used as the sender hands them out.
        None if fits.contains(&"raw") => "raw",
        None => {
            return Err(ConfigError::new(
                "secret.format",
                format!("required with this algorithm: {expected}"),
            ));
        }
    };
    if !SECRET_FORMATS.contains(&format) {
        return Err(ConfigError::new(
            "secret.format",
            format!("unknown secret format {format:?}: expected {expected}"),
        ));
    }
    if !fits.contains(&format) {
        return Err(ConfigError::new(
            "secret.format",
            format!("{format:?} is not a key for this algorithm: expected {expected}"),
        ));
    }
    let prefixed = matches!(format, "base64" | "ed25519-base64");
    match prefix {
        Some(_) if !prefixed => {
            return Err(ConfigError::new(
                "secret.prefix",
                format!("only a base64 secret has a prefix, not {format:?}"),
            ));
        }
        Some("") => return Err(ConfigError::new("secret.prefix", "must not be empty")),
        _ => {}
    }
    let prefix = prefix.unwrap_or("").to_owned();
    Ok(match format {
        "raw" => KeyFormat::Raw,
        "hex" => KeyFormat::Hex,
        "base64" => KeyFormat::Base64AfterPrefix(prefix),
        "ed25519-hex" => KeyFormat::Ed25519Hex,
        "ed25519-base64" => KeyFormat::Ed25519Base64AfterPrefix(prefix),
        _ => KeyFormat::EcdsaP256SpkiBase64,
    })
}

const SECRET_FORMATS: &[&str] = &[
    "raw",
    "hex",
    "base64",
    "ed25519-hex",
    "ed25519-base64",
    "ecdsa-p256-spki-base64",
];

fn signature(root: &Table, algorithm: Algorithm) -> Result<SignatureSpec, ConfigError> {
    let table = root
        .table(
            "signature",
            &[
                "header",
                "format",
                "prefix",
                "separator",
                "labels",
                "label_separator",
                "key",
                "encoding",
            ],
        )?
        .ok_or_else(|| {
            ConfigError::new(
                "signature.header",
                "required: the header that carries the signature",
            )
        })?;
    let header = table.required_string("header", "the header that carries the signature")?;
    let header = template::header_name(header).map_err(|m| table.error("header", m))?;
    let prefix = table.non_empty_string("prefix")?.map(str::to_owned);
    let separator = table.non_empty_string("separator")?;
    let layout = match table.string("format")?.unwrap_or("list") {
        "list" => {
            if table.get("key").is_some() {
                return Err(table.error("key", "only with format = \"key-values\""));
            }
            let labels = match (
                table.strings("labels")?,
                table.non_empty_string("label_separator")?,
            ) {
                (None, None) => None,
                (Some(_), None) => {
                    return Err(table.error(
                        "label_separator",
                        "required with labels: what follows a label (\",\" in \"v1,<sig>\")",
                    ));
                }
                (None, Some(_)) => {
                    return Err(table.error(
                        "labels",
                        "required with label_separator: the labels that mark a signature (\"v1\")",
                    ));
                }
                (Some(labels), Some(label_separator)) => {
                    if labels.is_empty() || labels.iter().any(|l| l.is_empty()) {
                        return Err(table.error("labels", "list at least one non-empty label"));
                    }
                    // A signature's label is read trimmed, between the separators: a
                    // label with spaces at its ends, or holding either, never matches.
                    if let Some(label) = labels.iter().find(|l| {
                        l.trim() != **l
                            || l.contains(label_separator)
                            || separator.is_some_and(|s| l.contains(s))
                    }) {
                        return Err(table.error(
                            "labels",
                            format!("{label:?} could never match: a label holds neither separator nor spaces at its ends"),
                        ));
                    }
                    if separator
                        .is_some_and(|s| label_separator.contains(s) || s.contains(label_separator))
                    {
                        return Err(table.error(
                            "label_separator",
                            "must differ from separator (one splits signatures, the other a label from its signature)",
                        ));
                    }
                    Some(Labels {
                        accepted: labels.into_iter().map(str::to_owned).collect(),
                        separator: label_separator.to_owned(),
                    })
                }
            };
            Layout::List {
                separator: separator.map(str::to_owned),
                labels,
            }
        }
        "key-values" => {
            for key in ["labels", "label_separator"] {
                if table.get(key).is_some() {
                    return Err(table.error(key, "only with format = \"list\""));
                }
            }
            let key =
                table.required_string("key", "the key whose values are signatures (\"v1\")")?;
            if !readable_key(key, separator.unwrap_or(",")) {
                return Err(table.error("key", KEY_RULE));
            }
            if separator.is_some_and(|s| s.contains('=')) {
                return Err(table.error(
                    "separator",
                    "splits the key=value pairs, so it cannot contain =",
                ));
            }
            Layout::KeyValues {
                separator: separator.unwrap_or(",").to_owned(),
                key: key.to_owned(),
            }
        }
        other => {
            return Err(table.error(
                "format",
                format!("{other:?}: expected \"list\" or \"key-values\""),
            ));
        }
    };
    let encoding = match table.string("encoding")? {
        None if algorithm == Algorithm::Token => Encoding::Text,
        None => {
            return Err(table.error(
                "encoding",
                format!("required: how a signature is written ({})", Encoding::NAMES),
            ));
        }
        Some(name) => match Encoding::parse(name) {
            Some(Encoding::Text) if algorithm != Algorithm::Token => {
                return Err(table.error(
                    "encoding",
                    "\"text\" is for algorithm = \"token\"; a signature is hex, base64 or base64url",
                ));
            }
            Some(encoding) => encoding,
            None => {
                return Err(table.error(
                    "encoding",
                    format!("unknown encoding {name:?}: expected {}", Encoding::NAMES),
                ));
            }
        },
    };
    Ok(SignatureSpec {
        header,
        prefix,
        layout,
        encoding,
    })
}

/// What a key of a key-values header must be to match: it is read trimmed, between
/// the separators and before the first `=`.
const KEY_RULE: &str = "must be non-empty, without =, the separator or spaces at its ends";

fn readable_key(key: &str, separator: &str) -> bool {
    !key.is_empty() && !key.contains('=') && !key.contains(separator) && key.trim() == key
}

fn timestamp(
    root: &Table,
    signature: &SignatureSpec,
) -> Result<Option<TimestampSpec>, ConfigError> {
    let Some(table) = root.table(
        "timestamp",
        &["header", "key", "pointer", "unit", "tolerance_seconds"],
    )?
    else {
        return Ok(None);
    };
    let mut sources = Vec::new();
    if let Some(header) = table.string("header")? {
        let name = template::header_name(header).map_err(|m| table.error("header", m))?;
        sources.push(("header", TimestampSource::Header(name)));
    }
    if let Some(key) = table.string("key")? {
        if !matches!(signature.layout, Layout::KeyValues { .. }) {
            return Err(table.error(
                "key",
                "a key of the signature header needs signature.format = \"key-values\"",
            ));
        }
        let readable = match &signature.layout {
            Layout::KeyValues { separator, .. } => readable_key(key, separator),
            Layout::List { .. } => false, // refused above
        };
        if !readable {
            return Err(table.error("key", KEY_RULE));
        }
        if matches!(&signature.layout, Layout::KeyValues { key: signature_key, .. } if signature_key == key)
        {
            return Err(table.error(
                "key",
                format!("{key:?} is signature.key: the timestamp is another key of the header"),
            ));
        }
        sources.push(("key", TimestampSource::Key(key.to_owned())));
    }
    if let Some(pointer) = table.string("pointer")? {
        template::json_pointer(pointer).map_err(|m| table.error("pointer", m))?;
        sources.push(("pointer", TimestampSource::Pointer(pointer.to_owned())));
    }
    let source = match sources.len() {
        0 if table.get("tolerance_seconds").is_some() => {
            return Err(table.error(
                "tolerance_seconds",
                "a window needs a signed timestamp: set timestamp.header, timestamp.key or timestamp.pointer",
            ));
        }
        0 => {
            return Err(ConfigError::new(
                "timestamp",
                "names no source: set header, key or pointer (or remove the table)",
            ));
        }
        1 => sources.remove(0).1,
        _ => {
            return Err(table.error(
                sources[1].0,
                format!(
                    "the timestamp has one source; {} is already set",
                    sources[0].0
                ),
            ));
        }
    };
    let unit = table.required_string("unit", "seconds, milliseconds or rfc3339")?;
    let unit = TimeUnit::parse(unit).ok_or_else(|| {
        table.error(
            "unit",
            format!("unknown unit {unit:?}: expected seconds, milliseconds or rfc3339"),
        )
    })?;
    let tolerance_seconds = match table.u32("tolerance_seconds")? {
        Some(0) => {
            return Err(table.error(
                "tolerance_seconds",
                "must be at least 1 (0 would refuse every request not signed within the same \
                 second; leave the key out for the default, 300)",
            ));
        }
        given => given.unwrap_or(DEFAULT_TOLERANCE_SECONDS),
    };
    Ok(Some(TimestampSpec {
        source,
        unit,
        tolerance_seconds,
    }))
}

fn signed(
    root: &Table,
    algorithm: Algorithm,
    timestamp: Option<&TimestampSpec>,
) -> Result<Template, ConfigError> {
    let text = root.string("signed")?;
    if algorithm == Algorithm::Token {
        if timestamp.is_some() {
            return Err(ConfigError::new(
                "timestamp",
                "algorithm = \"token\" signs nothing, so no time is signed and a window \
                 would stop no replay: remove [timestamp]",
            ));
        }
        if text.is_some() {
            return Err(root.error(
                "signed",
                "algorithm = \"token\" compares the header with the secret; nothing is signed",
            ));
        }
        // Nothing is signed, but the host derives an event id without one from the
        // message's SHA-256: the body keeps those ids apart.
        return template::parse("{body}", Context::Signed).map_err(|m| root.error("signed", m));
    }
    let text = text.unwrap_or("{body}");
    let signed = template::parse(text, Context::Signed).map_err(|m| root.error("signed", m))?;
    if !signed.pieces.contains(&Piece::Body) {
        return Err(root.error(
            "signed",
            format!("{text:?} does not include {{body}}: the body would not be authenticated"),
        ));
    }
    if signed.pieces.contains(&Piece::Timestamp) {
        match timestamp.map(|t| &t.source) {
            Some(TimestampSource::Header(_) | TimestampSource::Key(_)) => {}
            Some(TimestampSource::Pointer(_)) => {
                return Err(root.error(
                    "signed",
                    "{timestamp} is signed as sent, so it comes from timestamp.header or \
                     timestamp.key, not from the body (the body is signed already)",
                ));
            }
            None => {
                return Err(root.error(
                    "signed",
                    "{timestamp} needs a [timestamp] table with header or key",
                ));
            }
        }
    }
    // A window judged on a time the signature does not cover stops no replay: the
    // replay carries a fresh time. One in the body is signed with it.
    let covered = |piece: &Piece| match (piece, timestamp.map(|t| &t.source)) {
        (Piece::Timestamp, _) => true,
        (
            Piece::Field {
                source: Source::Header(name),
                before: None,
            },
            Some(TimestampSource::Header(header)),
        ) => name == header,
        _ => false,
    };
    let in_body = timestamp.is_none_or(|t| matches!(t.source, TimestampSource::Pointer(_)));
    if !in_body && !signed.pieces.iter().any(covered) {
        return Err(root.error(
            "signed",
            format!(
                "{text:?} does not include {{timestamp}}: the time the window is judged on \
                 would not be signed, and a replay could carry a fresh one"
            ),
        ));
    }
    Ok(signed)
}

const EVENT_KEYS: &[&str] = &[
    "id",
    "type",
    "occurred_at",
    "occurred_at_unit",
    "resource",
    "deleted",
    "ignore",
    "required",
];

fn event(table: &Table) -> Result<EventSpec, ConfigError> {
    let id = table.templates("id", Context::Value)?;
    if let Some(constant) = id.iter().find(|t| t.is_constant()) {
        return Err(table.error(
            "id",
            format!(
                "{:?} is the same for every event (all would be duplicates)",
                constant.text
            ),
        ));
    }
    let event_type = table.templates("type", Context::Value)?;
    let occurred_at = table.templates("occurred_at", Context::Value)?;
    let occurred_at = match (occurred_at.is_empty(), table.string("occurred_at_unit")?) {
        (true, None) => None,
        (true, Some(_)) => {
            return Err(table.error("occurred_at_unit", "only with occurred_at"));
        }
        (false, None) => {
            return Err(table.error(
                "occurred_at_unit",
                "required with occurred_at: seconds, milliseconds or rfc3339",
            ));
        }
        (false, Some(unit)) => {
            let unit = TimeUnit::parse(unit).ok_or_else(|| {
                table.error(
                    "occurred_at_unit",
                    format!("unknown unit {unit:?}: expected seconds, milliseconds or rfc3339"),
                )
            })?;
            Some((occurred_at, unit))
        }
    };
    let resources = match table.get("resource") {
        None => Vec::new(),
        Some(Value::Array(items)) => {
            if items.is_empty() {
                return Err(table.error("resource", "list at least one resource"));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, item)| resource(&table.key(&format!("resource[{i}]")), item))
                .collect::<Result<_, _>>()?
        }
        Some(item) => vec![resource(&table.key("resource"), item)?],
    };
    let deleted = matcher(table, "deleted")?;
    let ignore = matcher(table, "ignore")?;
    let mut required = Required::default();
    for name in table.strings("required")?.unwrap_or_default() {
        let (flag, configured) = match name {
            "id" => (&mut required.id, !id.is_empty()),
            "type" => (&mut required.event_type, !event_type.is_empty()),
            "occurred_at" => (&mut required.occurred_at, occurred_at.is_some()),
            "resource" => (&mut required.resource, !resources.is_empty()),
            other => {
                return Err(table.error(
                    "required",
                    format!("{other:?}: expected id, type, occurred_at or resource"),
                ));
            }
        };
        if !configured {
            return Err(table.error(
                "required",
                format!("{name:?} is required but event.{name} is not set"),
            ));
        }
        *flag = true;
    }
    Ok(EventSpec {
        id,
        event_type,
        occurred_at,
        resources,
        deleted,
        ignore,
        required,
    })
}

fn resource(path: &str, value: &Value) -> Result<ResourceSpec, ConfigError> {
    let table = Table::new(path, value, &["kind", "id", "version", "version_format"])?;
    let kind = table.templates("kind", Context::Value)?;
    if kind.is_empty() {
        return Err(table.error(
            "kind",
            "required: the resource kind (\"order\" or \"{/object}\")",
        ));
    }
    let id = table.templates("id", Context::Value)?;
    if id.is_empty() {
        return Err(table.error("id", "required: where the resource id is (\"{/data/id}\")"));
    }
    if let Some(constant) = id.iter().find(|t| t.is_constant()) {
        return Err(table.error("id", format!("{:?} names no field", constant.text)));
    }
    let version = table.templates("version", Context::Value)?;
    let version = match (version.is_empty(), table.string("version_format")?) {
        (true, None) => None,
        (true, Some(_)) => return Err(table.error("version_format", "only with version")),
        (false, None) => {
            return Err(table.error(
                "version_format",
                "required with version: integer or rfc3339",
            ));
        }
        (false, Some("integer")) => Some((version, VersionFormat::Integer)),
        (false, Some("rfc3339")) => Some((version, VersionFormat::Rfc3339)),
        (false, Some(other)) => {
            return Err(table.error(
                "version_format",
                format!("unknown format {other:?}: expected integer or rfc3339"),
            ));
        }
    };
    Ok(ResourceSpec { kind, id, version })
}

fn matcher(parent: &Table, key: &str) -> Result<Option<Matcher>, ConfigError> {
    let path = parent.key(key);
    let table = match parent.get(key) {
        None => return Ok(None),
        Some(Value::String(_)) => {
            return Ok(Some(Matcher {
                value: parent.templates(key, Context::Value)?,
                equals: Vec::new(),
                starts_with: Vec::new(),
                ends_with: Vec::new(),
            }));
        }
        Some(value) => Table::new(
            &path,
            value,
            &["value", "equals", "starts_with", "ends_with"],
        )?,
    };
    let value = table.templates("value", Context::Value)?;
    if value.is_empty() {
        return Err(table.error("value", "required: the value to test (\"{/action}\")"));
    }
    let list = |k: &str| -> Result<Vec<String>, ConfigError> {
        Ok(table
            .strings(k)?
            .unwrap_or_default()
            .into_iter()
            .map(str::to_owned)
            .collect())
    };
    Ok(Some(Matcher {
        value,
        equals: list("equals")?,
        starts_with: list("starts_with")?,
        ends_with: list("ends_with")?,
    }))
}

const RECONCILE_KEYS: &[&str] = &[
    "api_base",
    "hosts",
    "path",
    "items",
    "id",
    "type",
    "version",
    "resource_kind",
    "resource_id",
    "occurred_at",
    "cursor",
    "cursor_param",
];

fn reconcile(table: &Table) -> Result<ReconcileSpec, ConfigError> {
    let api_base = table.required_string("api_base", "the sender's API, https://…")?;
    let rest = api_base
        .strip_prefix("https://")
        .or_else(|| api_base.strip_prefix("http://"));
    if !rest.is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_graphic())) {
        return Err(table.error(
            "api_base",
            format!("{api_base:?} must start with https:// or http:// and name a host"),
        ));
    }
    let hosts = table.strings("hosts")?.unwrap_or_default();
    if hosts.is_empty() {
        return Err(table.error(
            "hosts",
            "required: the API's host names (\"api.example.com\"), at least one",
        ));
    }
    let host_name = |h: &&str| {
        !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    };
    if let Some(bad) = hosts.iter().find(|h| !host_name(h)) {
        return Err(table.error(
            "hosts",
            format!("{bad:?} is not a host name (no scheme, port or path: \"api.example.com\")"),
        ));
    }
    let path = table.required_string(
        "path",
        "the list's path and query (\"/v1/events?since={since}\")",
    )?;
    let placeholders_ok = path
        .replace("{since}", "")
        .bytes()
        .all(|b| b != b'{' && b != b'}');
    if !path.starts_with('/') || path.starts_with("//") {
        return Err(table.error(
            "path",
            format!("{path:?} must be a path on api_base, starting with one /"),
        ));
    }
    if !path.bytes().all(|b| b.is_ascii_graphic()) || path.contains('#') {
        return Err(table.error(
            "path",
            format!("{path:?}: spaces, # and non-ASCII characters must be percent-encoded"),
        ));
    }
    if !placeholders_ok {
        return Err(table.error(
            "path",
            format!("{path:?}: the only placeholder is {{since}}"),
        ));
    }
    let items = table.required_string("items", "where the page's events are (\"/data\")")?;
    // The whole body ("") is an array of events for some APIs.
    if !items.is_empty() {
        template::json_pointer(items).map_err(|m| table.error("items", m))?;
    }
    let required = |key: &str, what: &str| -> Result<String, ConfigError> {
        let pointer = table.required_string(key, what)?;
        template::json_pointer(pointer).map_err(|m| table.error(key, m))?;
        Ok(pointer.to_owned())
    };
    let id = required("id", "where each event's id is (\"/id\")")?;
    let event_type = required("type", "where each event's type is (\"/type\")")?;
    let optional = |key: &str| -> Result<Option<String>, ConfigError> {
        let Some(pointer) = table.string(key)? else {
            return Ok(None);
        };
        template::json_pointer(pointer).map_err(|m| table.error(key, m))?;
        Ok(Some(pointer.to_owned()))
    };
    let resource = match (optional("resource_kind")?, optional("resource_id")?) {
        (Some(kind), Some(id)) => Some((kind, id)),
        (None, None) => None,
        (Some(_), None) => {
            return Err(table.error("resource_id", "required with resource_kind"));
        }
        (None, Some(_)) => {
            return Err(table.error("resource_kind", "required with resource_id"));
        }
    };
    let version = optional("version")?;
    if version.is_some() && resource.is_none() {
        return Err(table.error(
            "version",
            "a version is the resource's: set resource_kind and resource_id",
        ));
    }
    let occurred_at = optional("occurred_at")?;
    let cursor = optional("cursor")?;
    let cursor_param = match table.string("cursor_param")? {
        None => "cursor",
        Some(_) if cursor.is_none() => {
            return Err(table.error("cursor_param", "only with cursor"));
        }
        Some(name) if !hookhost_plugin_sdk::query_safe(name) => {
            return Err(table.error(
                "cursor_param",
                format!(
                    "{name:?} is not a query parameter name: letters, digits, -, ., _, ~ \
                     and %XX escapes"
                ),
            ));
        }
        Some(name) => name,
    };
    Ok(ReconcileSpec {
        api_base: api_base.to_owned(),
        hosts: hosts.into_iter().map(str::to_ascii_lowercase).collect(),
        path: path.to_owned(),
        items: items.to_owned(),
        id,
        event_type,
        resource,
        version,
        occurred_at,
        cursor,
        cursor_param: cursor_param.to_owned(),
    })
}

/// One JSON object of the configuration, at a dotted path, with only known keys.
struct Table<'a> {
    path: String,
    map: &'a Map<String, Value>,
}

impl<'a> Table<'a> {
    fn new(path: &str, value: &'a Value, allowed: &[&str]) -> Result<Table<'a>, ConfigError> {
        Ok(Table {
            path: path.to_owned(),
            map: ConfigError::only_keys_at(path, value, allowed)?,
        })
    }

    fn key(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn error(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::new(self.key(key), message)
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key)
    }

    fn table(&self, key: &str, allowed: &[&str]) -> Result<Option<Table<'a>>, ConfigError> {
        self.get(key)
            .map(|v| Table::new(&self.key(key), v, allowed))
            .transpose()
    }

    fn string(&self, key: &str) -> Result<Option<&'a str>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.error(key, "must be a string")),
        }
    }

    fn non_empty_string(&self, key: &str) -> Result<Option<&'a str>, ConfigError> {
        match self.string(key)? {
            Some("") => Err(self.error(key, "must not be empty")),
            other => Ok(other),
        }
    }

    fn required_string(&self, key: &str, what: &str) -> Result<&'a str, ConfigError> {
        self.string(key)?
            .ok_or_else(|| self.error(key, format!("required: {what}")))
    }

    /// A string or a list of strings.
    fn strings(&self, key: &str) -> Result<Option<Vec<&'a str>>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(vec![s])),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .ok_or_else(|| self.error(key, "must be a string or a list of strings"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(self.error(key, "must be a string or a list of strings")),
        }
    }

    /// A template or a list of alternatives (empty when absent).
    fn templates(&self, key: &str, context: Context) -> Result<Vec<Template>, ConfigError> {
        let Some(texts) = self.strings(key)? else {
            return Ok(Vec::new());
        };
        if texts.is_empty() {
            return Err(self.error(key, "list at least one template"));
        }
        let list = matches!(self.get(key), Some(Value::Array(_)));
        texts
            .into_iter()
            .enumerate()
            .map(|(i, text)| {
                template::parse(text, context).map_err(|m| {
                    let key = if list {
                        format!("{key}[{i}]")
                    } else {
                        key.to_owned()
                    };
                    self.error(&key, m)
                })
            })
            .collect()
    }

    fn u32(&self, key: &str) -> Result<Option<u32>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    self.error(key, "must be a whole number of seconds (1 … 4294967295)")
                }),
        }
    }
}
