//! Templates: the signed message (`v0:{timestamp}:{body}`) and the event fields
//! (`{header:X-GitHub-Event}.{/action}`), parsed once per call from the configuration.
//!
//! Text outside braces is literal; `{{` and `}}` are literal braces. A placeholder is
//! `{body}`, `{url}`, `{method}`, `{timestamp}` (signed messages only), `{/json/pointer}`
//! (event fields only) or `{header:NAME}` (both). In event fields a header or pointer may
//! end with `|before:SEP`: the value up to the first `SEP` (all of it when there is none).

use hookhost_plugin_sdk::prelude::*;

/// Where a field's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A request header (lower-case name); its value trimmed.
    Header(String),
    /// A JSON Pointer (RFC 6901) into the body; strings, numbers and booleans.
    Pointer(String),
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Body,
    Url,
    Method,
    /// The timestamp exactly as the sender wrote it.
    Timestamp,
    Field {
        source: Source,
        /// `|before:SEP`: keep the value up to the first `SEP`.
        before: Option<String>,
    },
}

/// Which placeholders a template may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// The signed message: request bytes as sent (body, headers, URL, method, timestamp).
    Signed,
    /// An event field or delivery id: headers and body fields, as text.
    Value,
}

/// A parsed template, with the text it was written as (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub text: String,
    pub pieces: Vec<Piece>,
}

impl Template {
    /// No placeholder: the same text for every request.
    pub fn is_constant(&self) -> bool {
        self.pieces.iter().all(|p| matches!(p, Piece::Text(_)))
    }

    /// Header names the template reads.
    pub fn headers(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Field {
                source: Source::Header(name),
                ..
            } => Some(name.as_str()),
            _ => None,
        })
    }
}

/// Parse a template; the error says what is wrong (the caller names the key).
pub fn parse(text: &str, context: Context) -> Result<Template, String> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut pos = 0;
    while let Some(rest) = text.get(pos..).filter(|r| !r.is_empty()) {
        if rest.starts_with("{{") {
            literal.push('{');
            pos += 2;
        } else if rest.starts_with("}}") {
            literal.push('}');
            pos += 2;
        } else if let Some(open) = rest.strip_prefix('{') {
            let end = open.find('}').ok_or_else(|| {
                format!("{{ at byte {pos} is never closed (write {{{{ for a literal brace)")
            })?;
            let inner = &open[..end];
            if inner.contains('{') {
                return Err(format!(
                    "{{{inner}}}: placeholders do not nest (write {{{{ for a literal brace)"
                ));
            }
            if !literal.is_empty() {
                pieces.push(Piece::Text(core::mem::take(&mut literal)));
            }
            pieces.push(placeholder(inner, context)?);
            pos += end + 2;
        } else if rest.starts_with('}') {
            return Err(format!(
                "}} at byte {pos} closes nothing (write }}}} for a literal brace)"
            ));
        } else {
            let c = rest.chars().next().unwrap_or_default();
            literal.push(c);
            pos += c.len_utf8();
        }
    }
    if !literal.is_empty() {
        pieces.push(Piece::Text(literal));
    }
    let template = Template {
        text: text.to_owned(),
        pieces,
    };
    if context == Context::Value && template.is_constant() {
        if text.starts_with('/') {
            return Err(format!(
                "{text:?} is literal text; a JSON Pointer goes in braces: \"{{{text}}}\""
            ));
        }
        if text.to_ascii_lowercase().starts_with("header:") {
            return Err(format!(
                "{text:?} is literal text; a header goes in braces: \"{{{text}}}\""
            ));
        }
    }
    Ok(template)
}

fn placeholder(inner: &str, context: Context) -> Result<Piece, String> {
    let (name, filter) = match inner.split_once('|') {
        Some((name, filter)) => (name, Some(filter)),
        None => (inner, None),
    };
    let piece = match name {
        "" => return Err("{} is an empty placeholder (write {{}} for literal braces)".into()),
        "body" | "url" | "method" | "timestamp" => {
            if context == Context::Value {
                return Err(format!(
                    "{{{name}}} can only be signed; an event field reads {{header:NAME}} or \
                     {{/json/pointer}}"
                ));
            }
            match name {
                "body" => Piece::Body,
                "url" => Piece::Url,
                "method" => Piece::Method,
                _ => Piece::Timestamp,
            }
        }
        _ if name.starts_with('/') => {
            if context == Context::Signed {
                return Err(format!(
                    "{{{name}}}: a body field is not the bytes the sender signed; sign {{body}}"
                ));
            }
            json_pointer(name)?;
            Piece::Field {
                source: Source::Pointer(name.to_owned()),
                before: None,
            }
        }
        _ => match strip_prefix_ignore_case(name, "header:") {
            Some(header) => Piece::Field {
                source: Source::Header(header_name(header)?),
                before: None,
            },
            None => {
                let expected = match context {
                    Context::Signed => "{body}, {header:NAME}, {url}, {method} or {timestamp}",
                    Context::Value => "{header:NAME} or {/json/pointer}",
                };
                return Err(format!(
                    "unknown placeholder {{{inner}}}: expected {expected}"
                ));
            }
        },
    };
    let Some(filter) = filter else {
        return Ok(piece);
    };
    match (piece, context) {
        (Piece::Field { source, .. }, Context::Value) => match filter.strip_prefix("before:") {
            Some(sep) if !sep.is_empty() => Ok(Piece::Field {
                source,
                before: Some(sep.to_owned()),
            }),
            _ => Err(format!(
                "{{{inner}}}: unknown filter |{filter} (expected |before:SEPARATOR)"
            )),
        },
        _ => Err(format!(
            "{{{inner}}}: a filter applies only to a header or body field of an event field"
        )),
    }
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// Check a JSON Pointer (RFC 6901) the plugin can resolve: `/` then non-empty
/// tokens, `~` only as `~0` or `~1`.
pub fn json_pointer(pointer: &str) -> Result<(), String> {
    let Some(tokens) = pointer.strip_prefix('/') else {
        return Err(format!(
            "{pointer:?} is not a JSON Pointer: it starts with / (\"/data/id\")"
        ));
    };
    for token in tokens.split('/') {
        if token.is_empty() {
            return Err(format!(
                "{pointer:?} is not a usable JSON Pointer: it has an empty step"
            ));
        }
        let mut chars = token.chars();
        while let Some(c) = chars.next() {
            if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
                return Err(format!(
                    "{pointer:?} is not a JSON Pointer: ~ must be ~0 (for ~) or ~1 (for /)"
                ));
            }
        }
    }
    Ok(())
}

/// Check an HTTP header name (RFC 9110 token) and lower-case it.
pub fn header_name(name: &str) -> Result<String, String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(format!("{name:?} is not an HTTP header name"));
    }
    Ok(name.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(source: Source) -> Piece {
        Piece::Field {
            source,
            before: None,
        }
    }

    #[test]
    fn signed_templates_mix_literals_and_request_parts() {
        let t = parse("v0:{timestamp}:{body}", Context::Signed).expect("valid");
        assert_eq!(
            t.pieces,
            vec![
                Piece::Text("v0:".into()),
                Piece::Timestamp,
                Piece::Text(":".into()),
                Piece::Body
            ]
        );
        let t = parse(
            "{method} {url}\n{header:X-Ledger-Timestamp}\n{body}",
            Context::Signed,
        )
        .expect("valid");
        assert_eq!(
            t.pieces,
            vec![
                Piece::Method,
                Piece::Text(" ".into()),
                Piece::Url,
                Piece::Text("\n".into()),
                field(Source::Header("x-ledger-timestamp".into())),
                Piece::Text("\n".into()),
                Piece::Body
            ]
        );
        assert_eq!(t.headers().collect::<Vec<_>>(), vec!["x-ledger-timestamp"]);
        assert!(!t.is_constant());
    }

    #[test]
    fn doubled_braces_are_literal() {
        let t = parse("{{body}}={body}}}", Context::Signed).expect("valid");
        assert_eq!(
            t.pieces,
            vec![
                Piece::Text("{body}=".into()),
                Piece::Body,
                Piece::Text("}".into())
            ]
        );
        let t = parse("{{x}}", Context::Value).expect("valid");
        assert!(t.is_constant());
        assert_eq!(t.pieces, vec![Piece::Text("{x}".into())]);
    }

    #[test]
    fn value_templates_read_headers_and_pointers_with_an_optional_filter() {
        let t = parse("{HEADER:X-GitHub-Event}.{/action}", Context::Value).expect("valid");
        assert_eq!(
            t.pieces,
            vec![
                field(Source::Header("x-github-event".into())),
                Piece::Text(".".into()),
                field(Source::Pointer("/action".into())),
            ]
        );
        let t = parse("{header:X-Shopify-Topic|before:/}", Context::Value).expect("valid");
        assert_eq!(
            t.pieces,
            vec![Piece::Field {
                source: Source::Header("x-shopify-topic".into()),
                before: Some("/".into())
            }]
        );
        let t = parse("{/a~1b/0|before:.}", Context::Value).expect("valid");
        assert_eq!(
            t.pieces,
            vec![Piece::Field {
                source: Source::Pointer("/a~1b/0".into()),
                before: Some(".".into())
            }]
        );
        assert!(
            parse("order", Context::Value)
                .expect("literal")
                .is_constant()
        );
    }

    #[test]
    fn mistakes_are_explained() {
        let cases: &[(&str, Context, &str)] = &[
            ("{body", Context::Signed, "never closed"),
            ("body}", Context::Signed, "closes nothing"),
            ("{}", Context::Signed, "empty placeholder"),
            ("{{body}", Context::Signed, "closes nothing"),
            ("{a{b}}", Context::Signed, "do not nest"),
            (
                "{payload}",
                Context::Signed,
                "unknown placeholder {payload}",
            ),
            ("{data/id}", Context::Value, "unknown placeholder {data/id}"),
            ("{/id}", Context::Signed, "sign {body}"),
            ("{body}", Context::Value, "can only be signed"),
            ("{timestamp}", Context::Value, "can only be signed"),
            ("{header:}", Context::Signed, "not an HTTP header name"),
            ("{header:X Sig}", Context::Value, "not an HTTP header name"),
            ("{/data//id}", Context::Value, "empty step"),
            ("{/a~2}", Context::Value, "~0"),
            ("{/type|after:.}", Context::Value, "unknown filter"),
            ("{/type|before:}", Context::Value, "unknown filter"),
            ("{body|before:.}", Context::Signed, "a filter applies only"),
            (
                "{header:x|before:.}",
                Context::Signed,
                "a filter applies only",
            ),
            ("/id", Context::Value, "in braces"),
            ("header:X-Id", Context::Value, "in braces"),
        ];
        for (text, context, wanted) in cases {
            let error = parse(text, *context).expect_err(text);
            assert!(error.contains(wanted), "{text}: {error}");
        }
    }

    #[test]
    fn pointers_and_header_names_are_checked() {
        assert!(json_pointer("/data/object/id").is_ok());
        assert!(json_pointer("/a~0b/~1").is_ok());
        for bad in ["", "data/id", "/", "/a/", "/a~", "/a~x"] {
            assert!(json_pointer(bad).is_err(), "{bad}");
        }
        assert_eq!(
            header_name("X-Hub-Signature-256").as_deref(),
            Ok("x-hub-signature-256")
        );
        for bad in ["", "X Hub", "x:y", "é"] {
            assert!(header_name(bad).is_err(), "{bad}");
        }
    }
}
