//! Plain Rust mirrors of the WIT types, so plugin code never touches generated bindings.

/// How the host turns one configured secret string into a key.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

/// Static facts about a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    HmacSha1,
    HmacSha256,
    HmacSha512,
    Ed25519,
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub algorithm: Algorithm,
    pub signature: Vec<u8>,
}

impl Candidate {
    pub fn new(algorithm: Algorithm, signature: Vec<u8>) -> Self {
        Self {
            algorithm,
            signature,
        }
    }
}

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
}
