//! JSON field extraction by JSON Pointer (`/data/object/id`).

use crate::Rejection;
use serde_json::Value;

/// A parsed JSON body.
#[derive(Debug, Clone)]
pub struct Json(pub Value);

impl Json {
    /// Parse bytes; anything but valid JSON is `MalformedBody`.
    pub fn parse(bytes: &[u8]) -> Result<Self, Rejection> {
        serde_json::from_slice(bytes)
            .map(Json)
            .map_err(|e| Rejection::MalformedBody(format!("body is not JSON: {e}")))
    }

    /// The value at a JSON Pointer.
    pub fn get(&self, pointer: &str) -> Option<&Value> {
        self.0.pointer(pointer)
    }

    /// A string field.
    pub fn str(&self, pointer: &str) -> Option<&str> {
        self.get(pointer).and_then(Value::as_str)
    }

    /// A string field that must be present: absent → `MalformedBody` naming it.
    pub fn required_str(&self, pointer: &str) -> Result<&str, Rejection> {
        self.str(pointer)
            .ok_or_else(|| Rejection::MalformedBody(format!("missing string field {pointer}")))
    }

    /// An integer field (JSON number, or a string of digits as some senders write ids).
    pub fn i64(&self, pointer: &str) -> Option<i64> {
        match self.get(pointer)? {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        }
    }

    /// A non-negative integer field.
    pub fn u64(&self, pointer: &str) -> Option<u64> {
        match self.get(pointer)? {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        }
    }

    /// A field as an id string: strings as they are, integers in decimal.
    pub fn id(&self, pointer: &str) -> Option<String> {
        match self.get(pointer)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    /// An RFC 3339 timestamp field as unix seconds.
    pub fn rfc3339(&self, pointer: &str) -> Option<i64> {
        self.str(pointer).and_then(crate::decode::rfc3339_seconds)
    }

    /// An RFC 3339 timestamp field as unix milliseconds (for resource versions).
    pub fn rfc3339_millis(&self, pointer: &str) -> Option<u64> {
        self.str(pointer).and_then(crate::decode::rfc3339_millis)
    }
}
