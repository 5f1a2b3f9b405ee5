//! Decoding helpers for signature values and header syntax; errors are
//! `MalformedSignature`, so a plugin can use `?`.

use crate::Rejection;
use crate::prelude::*;
use base64::Engine as _;

/// Decode hex (either case).
pub fn hex(text: &str) -> Result<Vec<u8>, Rejection> {
    ::hex::decode(text).map_err(|_| Rejection::MalformedSignature("signature is not hex".into()))
}

/// Decode standard base64 (with padding).
pub fn base64(text: &str) -> Result<Vec<u8>, Rejection> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|_| Rejection::MalformedSignature("signature is not base64".into()))
}

/// A number rounded down to an integer, as `f64::floor` would (which needs `std`);
/// saturating past `i64`'s range, as a cast does. For timestamps sent with a fraction.
pub fn floor(number: f64) -> i64 {
    let whole = number as i64;
    // Below i64::MIN the cast saturates and the comparison holds: stay saturated.
    if (whole as f64) > number {
        whole.saturating_sub(1)
    } else {
        whole
    }
}

/// Split `k=v<sep>k=v` (e.g. Stripe's `t=1,v1=ab`) into pairs, trimming spaces.
/// Items without `=` are skipped; values keep any further `=` (base64 padding).
pub fn key_values(text: &str, separator: char) -> Vec<(&str, &str)> {
    text.split(separator)
        .filter_map(|item| item.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect()
}

/// Strip a required prefix such as `sha256=`; absent → `MalformedSignature`.
pub fn strip_prefix<'a>(text: &'a str, prefix: &str) -> Result<&'a str, Rejection> {
    text.strip_prefix(prefix)
        .ok_or_else(|| Rejection::MalformedSignature(format!("signature lacks {prefix:?}")))
}

/// Unix seconds written as decimal digits (a timestamp header).
pub fn unix_seconds(text: &str) -> Result<i64, Rejection> {
    text.trim().parse::<i64>().map_err(|_| {
        Rejection::MalformedSignature(format!("timestamp {text:?} is not unix seconds"))
    })
}

/// RFC 3339 (`2024-01-02T03:04:05Z`) as unix seconds.
pub fn rfc3339_seconds(text: &str) -> Option<i64> {
    parse_rfc3339(text).map(|t| t.unix_timestamp())
}

/// RFC 3339 as unix milliseconds, for resource versions; `None` before 1970.
pub fn rfc3339_millis(text: &str) -> Option<u64> {
    let nanos = parse_rfc3339(text)?.unix_timestamp_nanos();
    u64::try_from(nanos / 1_000_000).ok()
}

fn parse_rfc3339(text: &str) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_rounds_down_as_std_does() {
        for x in [
            0.0,
            0.5,
            1.0,
            1.999,
            -0.5,
            -1.0,
            -1.5,
            1521472262.908181,
            -7.0e15,
        ] {
            assert_eq!(floor(x), x.floor() as i64, "{x}");
        }
        assert_eq!(floor(1.0e300), i64::MAX);
        // Not wrapped round to i64::MAX (nor a panic in a debug build).
        assert_eq!(floor(-1.0e300), i64::MIN);
    }

    #[test]
    fn key_values_keeps_padding_and_repeats() {
        let kv = key_values("t=1, v1=ab,v1=cd==,junk", ',');
        assert_eq!(kv, vec![("t", "1"), ("v1", "ab"), ("v1", "cd==")]);
    }

    #[test]
    fn bad_encodings_are_rejections() {
        assert!(matches!(hex("zz"), Err(Rejection::MalformedSignature(_))));
        assert!(matches!(
            base64("***"),
            Err(Rejection::MalformedSignature(_))
        ));
        assert!(matches!(
            unix_seconds("12a"),
            Err(Rejection::MalformedSignature(_))
        ));
    }

    #[test]
    fn rfc3339_parses_offsets() {
        assert_eq!(rfc3339_seconds("1970-01-01T00:01:00Z"), Some(60));
        assert_eq!(rfc3339_seconds("1970-01-01T01:01:00+01:00"), Some(60));
        assert_eq!(rfc3339_millis("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(rfc3339_seconds("yesterday"), None);
    }
}
