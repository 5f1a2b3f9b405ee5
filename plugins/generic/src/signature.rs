//! Finding the signatures in the signature header and decoding them to bytes.

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{Rejection, decode};

/// How signatures are written in the signature header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureSpec {
    /// Lower-case header name.
    pub header: String,
    /// Stripped from the whole header value; a value without it is malformed.
    pub prefix: Option<String>,
    pub layout: Layout,
    pub encoding: Encoding,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// One signature, or several split by `separator`; with `labels`, each entry is
    /// `LABEL<label separator>SIGNATURE` and only the listed labels are signatures.
    List {
        separator: Option<String>,
        labels: Option<Labels>,
    },
    /// `k=v` pairs split by `separator` (`t=1,v1=ab,v1=cd`): every value of `key` is a
    /// signature; the timestamp may be another key.
    KeyValues { separator: String, key: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labels {
    pub accepted: Vec<String>,
    pub separator: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Hex,
    /// Standard alphabet, padded.
    Base64,
    /// URL-safe alphabet, padding optional.
    Base64Url,
    /// The text itself (a shared token).
    Text,
}

impl Encoding {
    pub const NAMES: &'static str = "hex, base64, base64url or text";

    pub fn parse(name: &str) -> Option<Encoding> {
        Some(match name {
            "hex" => Encoding::Hex,
            "base64" => Encoding::Base64,
            "base64url" => Encoding::Base64Url,
            "text" => Encoding::Text,
            _ => return None,
        })
    }

    /// Decode one signature; undecodable → `MalformedSignature`.
    pub fn decode(self, text: &str) -> Result<Vec<u8>, Rejection> {
        match self {
            Encoding::Hex => decode::hex(text),
            Encoding::Base64 => decode::base64(text),
            Encoding::Base64Url => base64url(text),
            Encoding::Text if text.is_empty() => {
                Err(Rejection::MalformedSignature("empty token".into()))
            }
            Encoding::Text => Ok(text.as_bytes().to_vec()),
        }
    }
}

/// What the signature header carries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Found<'a> {
    /// Decoded signatures, in header order; empty when none has an accepted label/key.
    pub signatures: Vec<Vec<u8>>,
    /// The value of the timestamp key (key-values layout), exactly as written.
    pub timestamp: Option<&'a str>,
}

/// Read the (trimmed) signature header value.
pub fn extract<'a>(
    spec: &SignatureSpec,
    value: &'a str,
    timestamp_key: Option<&str>,
) -> Result<Found<'a>, Rejection> {
    let value = match &spec.prefix {
        Some(prefix) => value.strip_prefix(prefix.as_str()).ok_or_else(|| {
            Rejection::MalformedSignature(format!("{} lacks the prefix {prefix:?}", spec.header))
        })?,
        None => value,
    };
    let mut found = Found::default();
    match &spec.layout {
        Layout::List { separator, labels } => {
            let entries: Vec<&str> = match separator {
                Some(sep) => value.split(sep.as_str()).map(str::trim).collect(),
                None => vec![value.trim()],
            };
            for entry in entries.into_iter().filter(|e| !e.is_empty()) {
                let signature = match labels {
                    None => entry,
                    Some(labels) => {
                        let (label, signature) =
                            entry.split_once(labels.separator.as_str()).ok_or_else(|| {
                                Rejection::MalformedSignature(format!(
                                    "{} entry without a label",
                                    spec.header
                                ))
                            })?;
                        if !labels.accepted.iter().any(|l| l == label.trim()) {
                            continue; // another scheme version: not trusted, not an error
                        }
                        signature.trim()
                    }
                };
                found.signatures.push(spec.encoding.decode(signature)?);
            }
        }
        Layout::KeyValues { separator, key } => {
            for (k, v) in value
                .split(separator.as_str())
                .filter_map(|item| item.split_once('='))
                .map(|(k, v)| (k.trim(), v.trim()))
            {
                if k == key {
                    found.signatures.push(spec.encoding.decode(v)?);
                } else if Some(k) == timestamp_key && found.timestamp.is_none() {
                    found.timestamp = Some(v);
                }
            }
        }
    }
    Ok(found)
}

/// URL-safe base64 (RFC 4648 §5), padded or not.
fn base64url(text: &str) -> Result<Vec<u8>, Rejection> {
    let bad = || Rejection::MalformedSignature("signature is not base64url".into());
    let unpadded = text.trim_end_matches('=');
    if unpadded.contains(['+', '/', '=']) || unpadded.len() % 4 == 1 {
        return Err(bad());
    }
    let mut standard: String = unpadded
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    while !standard.len().is_multiple_of(4) {
        standard.push('=');
    }
    decode::base64(&standard).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(separator: Option<&str>, labels: Option<(&[&str], &str)>) -> SignatureSpec {
        SignatureSpec {
            header: "x-signature".into(),
            prefix: None,
            layout: Layout::List {
                separator: separator.map(Into::into),
                labels: labels.map(|(accepted, separator)| Labels {
                    accepted: accepted.iter().map(|l| (*l).to_owned()).collect(),
                    separator: separator.into(),
                }),
            },
            encoding: Encoding::Hex,
        }
    }

    fn sigs(spec: &SignatureSpec, value: &str) -> Result<Vec<Vec<u8>>, Rejection> {
        extract(spec, value, None).map(|f| f.signatures)
    }

    #[test]
    fn one_signature_with_a_required_prefix() {
        let spec = SignatureSpec {
            prefix: Some("sha256=".into()),
            ..list(None, None)
        };
        assert_eq!(sigs(&spec, "sha256=00ff"), Ok(vec![vec![0x00, 0xff]]));
        assert!(matches!(
            sigs(&spec, "00ff"),
            Err(Rejection::MalformedSignature(_))
        ));
        assert!(matches!(
            sigs(&spec, "sha1=00ff"),
            Err(Rejection::MalformedSignature(_))
        ));
        assert!(matches!(
            sigs(&spec, "sha256=zz"),
            Err(Rejection::MalformedSignature(_))
        ));
    }

    #[test]
    fn several_signatures_split_by_a_separator() {
        let spec = list(Some(","), None);
        assert_eq!(
            sigs(&spec, "00ff, 0102,,"),
            Ok(vec![vec![0x00, 0xff], vec![0x01, 0x02]])
        );
        let spaced = list(Some(" "), None);
        assert_eq!(
            sigs(&spaced, "00ff  0102"),
            Ok(vec![vec![0x00, 0xff], vec![0x01, 0x02]])
        );
        // Without a separator the whole value is one signature.
        assert!(matches!(
            sigs(&list(None, None), "00ff,0102"),
            Err(Rejection::MalformedSignature(_))
        ));
    }

    #[test]
    fn labelled_entries_keep_accepted_labels_and_skip_others() {
        let spec = SignatureSpec {
            encoding: Encoding::Base64,
            ..list(Some(" "), Some((&["v1"], ",")))
        };
        assert_eq!(
            sigs(&spec, "v1,AP8= v2,AAAA v1a,AQI= v1,AQI="),
            Ok(vec![vec![0x00, 0xff], vec![0x01, 0x02]])
        );
        assert_eq!(sigs(&spec, "v2,AP8="), Ok(vec![]));
        assert!(matches!(
            sigs(&spec, "AP8="),
            Err(Rejection::MalformedSignature(_))
        ));
        assert!(matches!(
            sigs(&spec, "v1,***"),
            Err(Rejection::MalformedSignature(_))
        ));
        let equals = list(Some(","), Some((&["v1", "v2"], "=")));
        assert_eq!(
            sigs(&equals, "v1=00ff,v2=0102,v3=zz"),
            Ok(vec![vec![0x00, 0xff], vec![0x01, 0x02]])
        );
    }

    #[test]
    fn key_values_collect_repeated_keys_and_the_timestamp_as_written() {
        let spec = SignatureSpec {
            layout: Layout::KeyValues {
                separator: ",".into(),
                key: "v1".into(),
            },
            ..list(None, None)
        };
        let found = extract(
            &spec,
            "t=01700000000, v1=00ff,v0=zz,v1=0102,junk",
            Some("t"),
        )
        .expect("found");
        assert_eq!(found.signatures, vec![vec![0x00, 0xff], vec![0x01, 0x02]]);
        assert_eq!(found.timestamp, Some("01700000000"));
        let none = extract(&spec, "t=1,v0=00", Some("t")).expect("found");
        assert!(none.signatures.is_empty());
        let no_t = extract(&spec, "v1=00", Some("t")).expect("found");
        assert_eq!(no_t.timestamp, None);
        assert!(matches!(
            extract(&spec, "t=1,v1=not-hex", Some("t")),
            Err(Rejection::MalformedSignature(_))
        ));
        let semicolons = SignatureSpec {
            prefix: Some("scheme ".into()),
            layout: Layout::KeyValues {
                separator: ";".into(),
                key: "sig".into(),
            },
            ..list(None, None)
        };
        let found = extract(&semicolons, "scheme ts=5;sig=0a", Some("ts")).expect("found");
        assert_eq!(found.signatures, vec![vec![0x0a]]);
        assert_eq!(found.timestamp, Some("5"));
    }

    #[test]
    fn encodings() {
        assert_eq!(Encoding::Hex.decode("00FFab"), Ok(vec![0, 255, 171]));
        assert_eq!(Encoding::Base64.decode("+/8="), Ok(vec![0xfb, 0xff]));
        assert!(Encoding::Base64.decode("-_8").is_err());
        assert_eq!(Encoding::Base64Url.decode("-_8"), Ok(vec![0xfb, 0xff]));
        assert_eq!(Encoding::Base64Url.decode("-_8="), Ok(vec![0xfb, 0xff]));
        assert_eq!(Encoding::Base64Url.decode("AQ"), Ok(vec![1]));
        for bad in ["+/8=", "A", "AQ=Q", "**"] {
            assert!(Encoding::Base64Url.decode(bad).is_err(), "{bad}");
        }
        assert_eq!(Encoding::Text.decode("tok"), Ok(b"tok".to_vec()));
        assert!(Encoding::Text.decode("").is_err());
        assert_eq!(Encoding::parse("base64url"), Some(Encoding::Base64Url));
        assert_eq!(Encoding::parse("BASE64"), None);
    }
}
