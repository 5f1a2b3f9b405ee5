//! Plain Rust mirrors of the WIT types, so plugin code never touches generated bindings.

use crate::prelude::*;
/// How the host turns one configured secret string into a key.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum KeyFormat {
    /// The secret's UTF-8 bytes are the HMAC key, verbatim.
    Raw,
    /// Strip this prefix when present, base64-decode the rest.
    Base64AfterPrefix(String),
    /// Hex-decode the secret.
    Hex,
    /// An Ed25519 public key, 64 hex characters.
    Ed25519Hex,
    /// An Ed25519 public key: this prefix, then standard base64 of the 32 key bytes.
    Ed25519Base64AfterPrefix(String),
    /// An ECDSA P-256 public key: standard base64 of its DER SubjectPublicKeyInfo.
    EcdsaP256SpkiBase64,
}

/// Static facts about a plugin.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PluginInfo {
    pub name: String,
    pub version: String,
    pub provider: String,
    /// Accepted secret formats; the host uses the first whose prefix matches.
    pub key_formats: Vec<KeyFormat>,
    /// Default timestamp window in seconds; `None` when the scheme signs no time.
    pub default_tolerance_seconds: Option<u32>,
    /// The sender's retry behaviour, for operators.
    pub retry_behaviour: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Algorithm {
    HmacSha1,
    HmacSha256,
    HmacSha512,
    Ed25519,
    /// ECDSA P-256 with SHA-256; the candidate is the DER-encoded signature.
    EcdsaP256Sha256,
    /// The candidate is the shared secret itself (a token in a header), compared by the
    /// host in constant time with each key. Nothing else is authenticated.
    Token,
    /// SHA-256 of the key bytes followed by the message (not an HMAC).
    Sha256SecretPrefix,
}

/// One piece of the signed message; the host concatenates them in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Text(String),
    Bytes(Vec<u8>),
    /// The raw request body.
    Body,
    /// The raw value of this header (lower-case name).
    Header(String),
    /// The public URL the sender addressed.
    Url,
    /// The HTTP method.
    Method,
}

/// One signature found in the request, decoded to bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Candidate {
    pub algorithm: Algorithm,
    pub signature: Vec<u8>,
}

/// Shows the signature's length, not its bytes: a token candidate that verifies is the
/// endpoint's secret itself, and a plan is shown wherever it is debugged or logged.
impl core::fmt::Debug for Candidate {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Candidate")
            .field("algorithm", &self.algorithm)
            .field(
                "signature",
                &format_args!("[{} bytes]", self.signature.len()),
            )
            .finish()
    }
}

impl Candidate {
    pub fn new(algorithm: Algorithm, signature: Vec<u8>) -> Self {
        Self {
            algorithm,
            signature,
        }
    }
}

/// Most candidates the host checks in one plan: a plan with more is refused as
/// `invalid_signature` before any is checked. Senders send one per active signing key
/// and algorithm (up to 100 for DocuSign's Connect keys).
pub const MAX_CANDIDATES: usize = 100;

/// What is signed, and the signatures to check it against.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub message: Vec<Part>,
    pub candidates: Vec<Candidate>,
    /// Signed timestamp, unix seconds.
    pub timestamp: Option<i64>,
    /// Delivery id, constant across the sender's retries.
    pub message_id: Option<String>,
}

/// Bad input from the sender: answered with HTTP 400, never a plugin failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// A required signature or timestamp header is absent; names it.
    MissingSignature(String),
    /// The signature header is present but cannot be parsed.
    MalformedSignature(String),
    /// The body is not what the provider sends.
    MalformedBody(String),
    /// A request this plugin does not handle.
    Unsupported(String),
}

/// What the host should do with an authenticated event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Disposition {
    #[default]
    Process,
    /// Store but do not deliver; the reason is answered to the sender.
    Ignore(String),
    /// Refuse with HTTP 422.
    Reject(String),
    /// A verified handshake or ping: answer this, store and deliver nothing.
    Answer(Response),
}

/// A piece of a handshake answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponsePart {
    Text(String),
    /// Lower-case hex of HMAC-SHA256 over this text keyed by the endpoint's secret
    /// that verified the request, computed by the host.
    HmacSha256Hex(String),
}

/// What the endpoint answers to a handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<ResponsePart>,
}

impl Response {
    /// 200 with this JSON value as the body. Writing a `Value` links serde_json's float
    /// formatter, 17 KB of the plugin's memory image, which a fresh instance's reset
    /// copies back on every request: an answer of a known shape is cheaper as text,
    /// its strings written by [`crate::json::quote`], with [`Response::json_text`].
    pub fn json(value: &serde_json::Value) -> Self {
        Self::json_text(value.to_string())
    }
    /// 200 with this JSON text as the body.
    pub fn json_text(text: impl Into<String>) -> Self {
        Self::new(
            200,
            "application/json",
            vec![ResponsePart::Text(text.into())],
        )
    }
    /// 200 with this text as the body.
    pub fn text(text: impl Into<String>) -> Self {
        Self::new(200, "text/plain", vec![ResponsePart::Text(text.into())])
    }
    pub fn new(status: u16, content_type: impl Into<String>, body: Vec<ResponsePart>) -> Self {
        Self {
            status,
            content_type: content_type.into(),
            headers: Vec::new(),
            body,
        }
    }
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// How the host authenticates an unsigned (GET) handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeCheck {
    /// Nothing to check: the answer reveals nothing.
    None,
    /// Compare this presented token with the endpoint's handshake token (403 if not).
    Token(String),
}

/// An unsigned handshake and its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    pub check: HandshakeCheck,
    pub response: Response,
}

/// What one endpoint's plugin configuration changes about the plugin's static facts.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct EndpointFacts {
    /// Replaces [`PluginInfo::key_formats`] for this endpoint when not empty.
    pub key_formats: Vec<KeyFormat>,
    /// When some, replaces [`PluginInfo::default_tolerance_seconds`] for this endpoint.
    pub default_tolerance_seconds: Option<u32>,
}

/// A plugin configuration the plugin cannot work with, naming the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted path of the offending key (`signature.encoding`).
    pub key: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }

    /// The configuration as an object holding only `known` keys: anything else is
    /// an error naming the first key outside them, so a misspelt key stops the start
    /// instead of being ignored. With no known keys, only `{}` passes.
    pub fn only_keys<'a>(
        config: &'a serde_json::Value,
        known: &[&str],
    ) -> Result<&'a serde_json::Map<String, serde_json::Value>, ConfigError> {
        ConfigError::only_keys_at("", config, known)
    }

    /// [`ConfigError::only_keys`] for the table at a dotted `path` of the
    /// configuration (`signature`, `reconcile`), which errors name.
    pub fn only_keys_at<'a>(
        path: &str,
        table: &'a serde_json::Value,
        known: &[&str],
    ) -> Result<&'a serde_json::Map<String, serde_json::Value>, ConfigError> {
        let object = table
            .as_object()
            .ok_or_else(|| ConfigError::new(path, "must be a table"))?;
        let Some(unknown) = object.keys().find(|k| !known.contains(&k.as_str())) else {
            return Ok(object);
        };
        let key = if path.is_empty() {
            unknown.clone()
        } else {
            format!("{path}.{unknown}")
        };
        Err(if known.is_empty() {
            ConfigError::new(key, "unknown key: this plugin takes no configuration")
        } else {
            ConfigError::new(
                key,
                format!("unknown key; expected one of {}", known.join(", ")),
            )
        })
    }
}

/// `plugin configuration: <key>: <message>`, as a request or a reconcile run reports
/// a configuration the load check would have refused.
impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.key.is_empty() {
            write!(f, "plugin configuration: {}", self.message)
        } else {
            write!(f, "plugin configuration: {}: {}", self.key, self.message)
        }
    }
}

/// A request that meets a configuration the plugin cannot work with: the host checked
/// it at load, so this answers only a configuration that check never saw.
impl From<ConfigError> for Rejection {
    fn from(e: ConfigError) -> Rejection {
        Rejection::Unsupported(e.to_string())
    }
}

/// The event an authenticated body describes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// Provider event id; `None` lets the host derive one from the signed message.
    pub id: Option<String>,
    pub event_type: String,
    pub occurred_at: Option<i64>,
    pub resource_kind: Option<String>,
    pub resource_id: Option<String>,
    pub resource_version: Option<u64>,
    pub deleted: bool,
    pub disposition: Disposition,
}

impl Event {
    /// An event of this type, to be processed.
    pub fn new(event_type: impl Into<String>) -> Self {
        Self {
            event_type: event_type.into(),
            ..Self::default()
        }
    }
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
    pub fn maybe_id(mut self, id: Option<impl Into<String>>) -> Self {
        self.id = id.map(Into::into);
        self
    }
    pub fn occurred_at(mut self, unix_seconds: Option<i64>) -> Self {
        self.occurred_at = unix_seconds;
        self
    }
    /// The resource this event changes.
    pub fn resource(mut self, kind: impl Into<String>, id: impl Into<String>) -> Self {
        self.resource_kind = Some(kind.into());
        self.resource_id = Some(id.into());
        self
    }
    pub fn version(mut self, version: Option<u64>) -> Self {
        self.resource_version = version;
        self
    }
    pub fn deleted(mut self, deleted: bool) -> Self {
        self.deleted = deleted;
        self
    }
    pub fn ignore(mut self, reason: impl Into<String>) -> Self {
        self.disposition = Disposition::Ignore(reason.into());
        self
    }
    pub fn reject(mut self, reason: impl Into<String>) -> Self {
        self.disposition = Disposition::Reject(reason.into());
        self
    }
    /// A verified handshake: answer `response` instead of storing the request.
    pub fn answer(mut self, response: Response) -> Self {
        self.disposition = Disposition::Answer(response);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Provider;
    use serde_json::json;

    /// A token candidate that verifies is the endpoint's secret: debugging a plan shows
    /// how long it is, never what it holds.
    #[test]
    fn a_candidate_is_debugged_without_its_bytes() {
        let token = Candidate::new(Algorithm::Token, b"tok".to_vec());
        let plan = Plan {
            message: vec![Part::Body],
            candidates: vec![token],
            timestamp: None,
            message_id: None,
        };
        let shown = format!("{plan:?}");
        assert!(shown.contains("signature: [3 bytes]"), "{shown}");
        assert!(!shown.contains("116") && !shown.contains("tok"), "{shown}");
    }

    /// Reads no configuration: the trait's default check.
    struct Plain;

    impl Provider for Plain {
        fn info() -> PluginInfo {
            PluginInfo {
                name: "plain".into(),
                version: "0.0.0".into(),
                provider: "Plain".into(),
                key_formats: Vec::new(),
                default_tolerance_seconds: None,
                retry_behaviour: String::new(),
            }
        }
        fn plan_verification(_: &crate::Request) -> Result<Plan, Rejection> {
            Err(Rejection::Unsupported("never".into()))
        }
        fn describe_event(_: &crate::Request) -> Result<Event, Rejection> {
            Err(Rejection::Unsupported("never".into()))
        }
    }

    #[test]
    fn a_plugin_that_reads_no_configuration_refuses_any_key() {
        assert_eq!(
            Plain::check_config(&json!({})),
            Ok(EndpointFacts::default())
        );
        let refused = Plain::check_config(&json!({"tolerence": 300})).expect_err("a key");
        assert_eq!(refused.key, "tolerence");
        assert!(refused.message.contains("takes no configuration"));
        assert_eq!(Plain::check_config(&json!([])).expect_err("a list").key, "");
    }

    #[test]
    fn a_configuration_error_met_by_a_request_is_unsupported_and_names_the_key() {
        let keyed = Rejection::from(ConfigError::new("a.b", "must be a string"));
        let whole = Rejection::from(ConfigError::new("", "must be a table"));
        assert_eq!(
            (keyed, whole),
            (
                Rejection::Unsupported("plugin configuration: a.b: must be a string".into()),
                Rejection::Unsupported("plugin configuration: must be a table".into())
            )
        );
    }

    #[test]
    fn only_known_keys_pass_and_the_first_other_is_named_with_its_path() {
        let config = json!({"a": 1, "b": {"c": 2, "d": 3}});
        let top = ConfigError::only_keys(&config, &["a", "b"]).expect("known");
        assert_eq!(top.len(), 2);
        let nested = ConfigError::only_keys_at("b", &config["b"], &["c"]).expect_err("d");
        assert_eq!(nested.key, "b.d");
        assert_eq!(nested.message, "unknown key; expected one of c");
        let not_a_table = ConfigError::only_keys_at("a", &config["a"], &[]).expect_err("1");
        assert_eq!(
            (not_a_table.key.as_str(), not_a_table.message.as_str()),
            ("a", "must be a table")
        );
    }
}
