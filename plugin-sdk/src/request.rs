//! The request as a plugin sees it, with helpers that fail with a [`Rejection`].

use crate::prelude::*;
use crate::{Json, Rejection};
use sha2::{Digest as _, Sha256};

/// One request: method, the public URL the sender addressed, headers (lower-case
/// names, raw values), the raw body and the endpoint's plugin configuration.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
    pub config: serde_json::Value,
}

impl Request {
    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// Every value of a header, in the order received.
    pub fn headers_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// A header as text; `None` when absent or not UTF-8.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.header(name).and_then(|v| core::str::from_utf8(v).ok())
    }

    /// A header the signature scheme needs: absent → `MissingSignature(name)`,
    /// not UTF-8 → `MalformedSignature`. Surrounding whitespace is trimmed.
    pub fn signature_header(&self, name: &str) -> Result<&str, Rejection> {
        let raw = self
            .header(name)
            .ok_or_else(|| Rejection::MissingSignature(name.to_ascii_lowercase()))?;
        let text = core::str::from_utf8(raw).map_err(|_| {
            Rejection::MalformedSignature(format!("{} is not UTF-8", name.to_ascii_lowercase()))
        })?;
        Ok(text.trim())
    }

    /// A signature header that may be absent (a scheme with a fallback header):
    /// absent → `None`, present but not UTF-8 → `MalformedSignature`.
    pub fn optional_signature_header(&self, name: &str) -> Result<Option<&str>, Rejection> {
        match self.header(name) {
            None => Ok(None),
            Some(_) => self.signature_header(name).map(Some),
        }
    }

    /// A delivery header the provider always sends (event name, delivery id): absent
    /// or empty → `MalformedBody` naming it (the request is not what the provider sends).
    pub fn required_header(&self, name: &str) -> Result<&str, Rejection> {
        self.header_str(name)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                Rejection::MalformedBody(format!("missing {} header", name.to_ascii_lowercase()))
            })
    }

    /// The body parsed as JSON; not JSON → `MalformedBody`.
    pub fn json(&self) -> Result<Json, Rejection> {
        Json::parse(&self.body)
    }

    /// The body as JSON, with `pointers` found in the pass that validates it
    /// ([`Json::parse_finding`]): for members below the top level that a plugin reads
    /// from every event, so that the body is read once instead of once more for each.
    pub fn json_finding(&self, pointers: &[&'static str]) -> Result<Json, Rejection> {
        Json::parse_finding(&self.body, pointers)
    }

    /// `body-sha256:` and the lower-case hex SHA-256 of the raw body: a stable id for a
    /// request whose body names none (a retry that repeats the body has the same id).
    pub fn body_id(&self) -> String {
        format!("body-sha256:{}", hex::encode(Sha256::digest(&self.body)))
    }

    /// The endpoint's plugin configuration (`{}` when none).
    pub fn config(&self) -> &serde_json::Value {
        &self.config
    }
}
