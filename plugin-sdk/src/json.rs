//! JSON field extraction by JSON Pointer (`/data/object/id`), without building a tree.
//!
//! A plugin reads a handful of fields from a body of kilobytes, once per request, in a
//! fresh instance. Building a `serde_json::Value` for the whole body allocates a node
//! per field and dominated a plugin's cost. Instead the body is validated once and kept
//! as text (serde_json, which builds nothing when asked to ignore), and each lookup
//! scans only as far as the path it names (gjson).

use crate::Rejection;
use serde_json::Value;
use std::borrow::Cow;

/// A JSON document, validated, read lazily.
#[derive(Debug, Clone)]
pub struct Json {
    text: String,
}

impl Json {
    /// Validate bytes as one JSON value; anything else is `MalformedBody`.
    pub fn parse(bytes: &[u8]) -> Result<Self, Rejection> {
        let text = std::str::from_utf8(bytes)
            .map_err(|_| Rejection::MalformedBody("body is not UTF-8 JSON".into()))?;
        // serde_json validates without building anything, and its nesting limit keeps
        // a hostile "[[[[…" from exhausting the plugin's stack.
        serde_json::from_str::<serde::de::IgnoredAny>(text)
            .map_err(|e| Rejection::MalformedBody(format!("body is not JSON: {e}")))?;
        Ok(Json {
            text: text.to_owned(),
        })
    }

    /// Find a JSON Pointer: the raw text of the value there, and its kind.
    fn lookup(&self, pointer: &str) -> Option<(&str, gjson::Kind)> {
        if pointer.is_empty() {
            return Some((&self.text, gjson::parse(&self.text).kind()));
        }
        let path = gjson_path(pointer)?;
        let value = gjson::get(&self.text, &path);
        // gjson returns a view into the document; find where, so the answer can
        // borrow from `self` rather than from the lookup.
        let found = value.json();
        let start = (found.as_ptr() as usize).checked_sub(self.text.as_ptr() as usize)?;
        let raw = self
            .text
            .get(start..start + found.len())
            .filter(|r| !r.is_empty())?;
        Some((raw, value.kind()))
    }

    /// The raw JSON text of each element of the array at a JSON Pointer (`""`: the
    /// document is the array), in order; `None` when there is no array there. For a
    /// list an API returns: each element is stored exactly as listed.
    pub fn items(&self, pointer: &str) -> Option<Vec<&str>> {
        let (raw, kind) = self.lookup(pointer)?;
        if !matches!(kind, gjson::Kind::Array) {
            return None;
        }
        // Each element is a view into `raw`: find where, to borrow from `self`.
        let array = gjson::parse(raw);
        array
            .array()
            .iter()
            .map(|item| {
                let text = item.json();
                let start = (text.as_ptr() as usize).checked_sub(raw.as_ptr() as usize)?;
                raw.get(start..start + text.len())
            })
            .collect()
    }

    /// The raw JSON text at a JSON Pointer (`""` is the whole document).
    pub fn raw(&self, pointer: &str) -> Option<&str> {
        self.lookup(pointer).map(|(raw, _)| raw)
    }

    /// The value at a JSON Pointer, parsed (owned).
    pub fn get(&self, pointer: &str) -> Option<Value> {
        serde_json::from_str(self.raw(pointer)?).ok()
    }

    /// The whole document as a `serde_json::Value`.
    pub fn value(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }

    /// A string field (borrowed unless it contains escapes).
    pub fn str(&self, pointer: &str) -> Option<Cow<'_, str>> {
        match self.lookup(pointer)? {
            (raw, gjson::Kind::String) => string(raw),
            _ => None,
        }
    }

    /// A string field that must be present: absent → `MalformedBody` naming it.
    pub fn required_str(&self, pointer: &str) -> Result<Cow<'_, str>, Rejection> {
        self.str(pointer)
            .ok_or_else(|| Rejection::MalformedBody(format!("missing string field {pointer}")))
    }

    /// An integer field (a JSON number, or a string of digits as some senders write ids).
    pub fn i64(&self, pointer: &str) -> Option<i64> {
        self.number_text(pointer)?.parse().ok()
    }

    /// A non-negative integer field.
    pub fn u64(&self, pointer: &str) -> Option<u64> {
        self.number_text(pointer)?.parse().ok()
    }

    fn number_text(&self, pointer: &str) -> Option<Cow<'_, str>> {
        match self.lookup(pointer)? {
            (raw, gjson::Kind::Number) => Some(Cow::Borrowed(raw)),
            (raw, gjson::Kind::String) => string(raw),
            _ => None,
        }
    }

    /// A field as an id string: strings as they are, integers in decimal.
    pub fn id(&self, pointer: &str) -> Option<String> {
        match self.lookup(pointer)? {
            (raw, gjson::Kind::String) => string(raw).map(Cow::into_owned),
            (raw, gjson::Kind::Number) => {
                let n: serde_json::Number = serde_json::from_str(raw).ok()?;
                (n.is_i64() || n.is_u64()).then(|| n.to_string())
            }
            _ => None,
        }
    }

    /// An RFC 3339 timestamp field as unix seconds.
    pub fn rfc3339(&self, pointer: &str) -> Option<i64> {
        self.str(pointer)
            .and_then(|t| crate::decode::rfc3339_seconds(&t))
    }

    /// An RFC 3339 timestamp field as unix milliseconds (for resource versions).
    pub fn rfc3339_millis(&self, pointer: &str) -> Option<u64> {
        self.str(pointer)
            .and_then(|t| crate::decode::rfc3339_millis(&t))
    }
}

/// The text of a raw JSON string literal, unescaped only when it has escapes.
fn string(raw: &str) -> Option<Cow<'_, str>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    if inner.contains('\\') {
        serde_json::from_str::<String>(raw).ok().map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(inner))
    }
}

/// A JSON Pointer (RFC 6901) as a gjson path: components joined by `.`, every
/// character that gjson gives a meaning escaped, so keys match literally.
fn gjson_path(pointer: &str) -> Option<String> {
    let mut path = String::with_capacity(pointer.len() + 8);
    for (i, token) in pointer.strip_prefix('/')?.split('/').enumerate() {
        if i > 0 {
            path.push('.');
        }
        // Unescaping allocates (twice), so only a token with an escape pays for it.
        let token = if token.contains('~') {
            Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
        } else {
            Cow::Borrowed(token)
        };
        if token.is_empty() {
            return None;
        }
        for c in token.chars() {
            if !(c.is_alphanumeric() || c == '_' || c == '-') {
                path.push('\\');
            }
            path.push(c);
        }
    }
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"{"id":"evt_1","n":42,"s":"7","esc":"a\"b","a/b":1,
        "data":{"object":{"id":"cus_1","list":[{"x":1},{"x":2}]}},"t":"1970-01-01T00:01:00Z"}"#;

    #[test]
    fn pointers_walk_objects_and_arrays() {
        let json = Json::parse(DOC.as_bytes()).expect("valid");
        assert_eq!(json.str("/id").as_deref(), Some("evt_1"));
        assert_eq!(json.str("/data/object/id").as_deref(), Some("cus_1"));
        assert_eq!(json.i64("/data/object/list/1/x"), Some(2));
        assert_eq!(json.i64("/n"), Some(42));
        assert_eq!(json.u64("/s"), Some(7));
        assert_eq!(json.id("/n").as_deref(), Some("42"));
        assert_eq!(json.str("/esc").as_deref(), Some("a\"b"));
        assert_eq!(json.i64("/a~1b"), Some(1));
        assert_eq!(json.rfc3339("/t"), Some(60));
        assert_eq!(json.str("/missing"), None);
        assert_eq!(json.str("/n"), None);
        assert_eq!(json.str("/data/object/list/9/x"), None);
        assert_eq!(json.str("/id/deeper"), None);
        assert_eq!(
            json.get("/data/object/list/0"),
            Some(serde_json::json!({"x": 1}))
        );
        assert_eq!(
            json.str("/data.object"),
            None,
            "a dot is part of the key, not a path step"
        );
        assert_eq!(json.raw(""), Some(DOC));
    }

    #[test]
    fn items_are_each_elements_text_as_written() {
        let list = Json::parse(br#"{"data": [ {"id": "a", "n": [1, 2]} ,"b",3 ], "x": {}}"#)
            .expect("valid");
        assert_eq!(
            list.items("/data"),
            Some(vec![r#"{"id": "a", "n": [1, 2]}"#, r#""b""#, "3"])
        );
        assert_eq!(list.items("/x"), None, "an object is not a list");
        assert_eq!(list.items("/missing"), None);
        let bare = Json::parse(b"[]").expect("valid");
        assert_eq!(bare.items(""), Some(vec![]));
    }

    #[test]
    fn deep_nesting_is_read_without_recursion() {
        // Validation and lookups both skip nested values iteratively, so a hostile
        // "[[[[…" cannot exhaust a plugin's small stack.
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        let json = Json::parse(deep.as_bytes()).expect("deep but valid");
        assert_eq!(json.str("/0/0/0"), None);
        assert!(json.raw("/0").is_some_and(|r| r.len() == deep.len() - 2));
        let unbalanced = "[".repeat(100_000) + &"]".repeat(99_999);
        assert!(matches!(
            Json::parse(unbalanced.as_bytes()),
            Err(Rejection::MalformedBody(_))
        ));
    }

    #[test]
    fn invalid_json_is_malformed_body() {
        for bad in [
            "",
            "{",
            "{\"a\":1} trailing",
            "nope",
            "{\"a\":01}",
            "[1,]",
            "{'a':1}",
        ] {
            assert!(
                matches!(
                    Json::parse(bad.as_bytes()),
                    Err(Rejection::MalformedBody(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            Json::parse(b"{}").expect("valid").required_str("/id"),
            Err(Rejection::MalformedBody(_))
        ));
    }
}
