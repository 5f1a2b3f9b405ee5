//! Twilio: `X-Twilio-Signature: <base64>`, HMAC-SHA1 keyed by the account's Auth Token.
//!
//! The signed message is the full URL Twilio requested (scheme, host, path and query) followed,
//! for a form-encoded POST, by every body parameter as `name` + `value`: names sorted, the
//! values of a repeated name sorted, identical name/value pairs counted once. Values are the
//! decoded form values (`+` is a space, `%XX` a byte of UTF-8). The digest is standard
//! base64. Sources: <https://www.twilio.com/docs/usage/webhooks/webhooks-security> (docs:
//! URL + sorted parameters, HMAC-SHA1, Auth Token, base64; the worked example with Auth Token
//! `12345`); twilio-python 9.13.0 `twilio/request_validator.py` and twilio-node 6.3.1
//! `lib/webhooks/webhooks.js` (SDKs: sorted values of repeated names, duplicates dropped by a
//! set, `bodySHA256`, the signature-settings header).
//!
//! JSON (or any non-form) bodies are not appended: Twilio adds `bodySHA256=<hex SHA-256 of
//! the body>` to the query and signs the URL alone. The plugin checks that value against the
//! body itself (no secret is involved); a mismatch is refused like a bad signature (docs:
//! <https://www.twilio.com/docs/api/errors/57012>; SDK: `validate` / `validateBody`).
//!
//! Which URL: the host hands the plugin the public URL the sender addressed (the endpoint's
//! `public_url` plus path and query as received), and exactly that URL is signed. Twilio's
//! SDKs also try the URL with the default port added or removed (`:443`/`:80`), because
//! Twilio's own signing has varied; a verification plan names one message, so hookhost does
//! not: configure Twilio with the URL exactly as hookhost's `public_url` spells it.
//!
//! Webhooks signed with a Webhook Rule's SharedKey carry `X-Twilio-Webhooks-Signature-Settings:
//! key=<id>,algorithm=HMAC_SHA256`; then the digest is HMAC-SHA256 and the endpoint's secret
//! is the SharedKey secret (SDK only; not in the docs page read). Other algorithms are
//! `Unsupported`. Nothing is timestamped, so there is no replay window.
//!
//! Event: Twilio signs no event id, so the plugin names none and the host derives one from
//! the signed message (`sha256:` + hex SHA-256 of the URL and the sorted parameters above;
//! for a JSON body, of the URL, whose `bodySHA256` pins the body). A retry of one request
//! (same URL, same parameters) is the same event; a captured request sent again, however
//! often and with whatever unsigned headers, is that event again: a duplicate while its
//! first receipt is kept (its parameters re-encoded or reordered are still that event id,
//! with another body: a conflicting duplicate, quarantined). `I-Twilio-Idempotency-Token`
//! (constant across Twilio's retries **[unconfirmed]**) is not signed: as the id, a replay
//! with a fresh token would be a new event, so it is only kept as the receipt's message
//! id. A message or call SID is not an event id either: every status callback of one message
//! repeats its `MessageSid`. Type = `EventType` when present (Conversations, TaskRouter...),
//! else `message.<MessageStatus|SmsStatus>` for a `MessageSid`, `call.<CallStatus>` for a
//! `CallSid`, else `unknown`; the resource is the message or call. Parameters are read from
//! the body, then from the query. JSON bodies: type = `type` of the object, or of the first
//! element of an array (Event Streams), else `unknown`.
//!
//! Twilio can be told to use GET (parameters in the signed query, no body); hookhost answers
//! a GET without a handshake with 405, so configure Twilio webhooks with POST (its default).

#![cfg_attr(not(test), no_std)]

extern crate alloc;

use hookhost_plugin_sdk::prelude::*;

use alloc::collections::{BTreeMap, BTreeSet};
use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    decode,
};
use sha2::{Digest as _, Sha256};

const SIGNATURE: &str = "x-twilio-signature";
const SETTINGS: &str = "x-twilio-webhooks-signature-settings";
const IDEMPOTENCY_TOKEN: &str = "i-twilio-idempotency-token";
/// The query parameter carrying the SHA-256 of a non-form body.
const BODY_SHA256: &str = "bodySHA256";

pub struct Twilio;

impl Provider for Twilio {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "twilio".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Twilio".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "by default one retry when the TCP connection fails, within 15 s \
                              in all (5 s connect, 15 s read); URL fragment overrides \
                              (#rc=retries up to 5, #rp=policy, #ct/#rt/#tt timeouts) or \
                              Webhook Rules change this; voice and messaging then use the \
                              fallback URL"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha1, Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let signature = decode::base64(req.signature_header(SIGNATURE)?)?;
        let algorithm = algorithm(req)?;
        let mut message = vec![Part::Url];
        match body_sha256(&req.url) {
            Some(expected) => {
                let expected = decode::hex(&expected)
                    .map_err(|_| Rejection::MalformedSignature("bodySHA256 is not hex".into()))?;
                if expected.as_slice() != Sha256::digest(&req.body).as_slice() {
                    return Err(Rejection::MalformedSignature(
                        "the body does not match the URL's bodySHA256".into(),
                    ));
                }
            }
            None => {
                let signed = signed_params(&form_pairs(&req.body)?);
                if !signed.is_empty() {
                    message.push(Part::Text(signed));
                }
            }
        }
        Ok(Plan {
            message,
            candidates: vec![Candidate::new(algorithm, signature)],
            timestamp: None,
            message_id: idempotency_token(req),
        })
    }

    /// No id: see the module docs (the host derives one from the signed message).
    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        if body_sha256(&req.url).is_some() {
            let body = req.json()?;
            let event_type = body
                .str("/type")
                .or_else(|| body.str("/0/type"))
                .map_or_else(|| "unknown".to_owned(), |t| t.into_owned());
            return Ok(Event::new(event_type));
        }
        let mut params = form_pairs(&req.body)?;
        params.extend(query_pairs(&req.url));
        let param = |name: &str| {
            params
                .iter()
                .find(|(n, v)| n == name && !v.is_empty())
                .map(|(_, v)| v.as_str())
        };
        let resource = param("MessageSid")
            .or_else(|| param("SmsSid"))
            .map(|sid| {
                (
                    "message",
                    sid,
                    param("MessageStatus").or(param("SmsStatus")),
                )
            })
            .or_else(|| param("CallSid").map(|sid| ("call", sid, param("CallStatus"))));
        let event_type = match (param("EventType"), resource) {
            (Some(event_type), _) => event_type.to_owned(),
            (None, Some((kind, _, Some(status)))) => format!("{kind}.{status}"),
            (None, Some((kind, _, None))) => kind.to_owned(),
            (None, None) => "unknown".to_owned(),
        };
        let mut event = Event::new(event_type);
        if let Some((kind, sid, _)) = resource {
            event = event.resource(kind, sid);
        }
        Ok(event)
    }
}

/// HMAC-SHA1 unless the signature-settings header names another algorithm.
fn algorithm(req: &Request) -> Result<Algorithm, Rejection> {
    let Some(settings) = req.optional_signature_header(SETTINGS)? else {
        return Ok(Algorithm::HmacSha1);
    };
    let named = decode::key_values(settings, ',')
        .into_iter()
        .find(|(key, value)| *key == "algorithm" && !value.is_empty())
        .map(|(_, value)| value);
    match named {
        None => Ok(Algorithm::HmacSha1),
        Some(a) if a.eq_ignore_ascii_case("HMAC_SHA1") => Ok(Algorithm::HmacSha1),
        Some(a) if a.eq_ignore_ascii_case("HMAC_SHA256") => Ok(Algorithm::HmacSha256),
        Some(other) => Err(Rejection::Unsupported(format!(
            "webhook signature algorithm {other:?}"
        ))),
    }
}

/// Twilio's `I-Twilio-Idempotency-Token`, unsigned: the receipt's message id, never the
/// event id.
fn idempotency_token(req: &Request) -> Option<String> {
    req.header_str(IDEMPOTENCY_TOKEN)
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
}

/// `name` + `value` for every parameter: names sorted, each name's distinct values sorted.
fn signed_params(pairs: &[(String, String)]) -> String {
    let mut sorted: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (name, value) in pairs {
        sorted.entry(name).or_default().insert(value);
    }
    let mut text = String::new();
    for (name, values) in sorted {
        for value in values {
            text.push_str(name);
            text.push_str(value);
        }
    }
    text
}

/// The decoded pairs of an `application/x-www-form-urlencoded` body. Twilio sends UTF-8;
/// anything else is not a Twilio body.
fn form_pairs(body: &[u8]) -> Result<Vec<(String, String)>, Rejection> {
    let text = core::str::from_utf8(body)
        .map_err(|_| Rejection::MalformedBody("form body is not UTF-8".into()))?;
    parse_pairs(text)
        .ok_or_else(|| Rejection::MalformedBody("form body does not decode to UTF-8".into()))
}

/// The decoded pairs of the URL's query (before any fragment); pairs that do not decode to
/// UTF-8 are skipped (the URL is signed as received either way).
fn query_pairs(url: &str) -> Vec<(String, String)> {
    let url = url.split('#').next().unwrap_or(url);
    let query = url.split_once('?').map_or("", |(_, q)| q);
    split_pairs(query).filter_map(decode_pair).collect()
}

fn parse_pairs(text: &str) -> Option<Vec<(String, String)>> {
    split_pairs(text).map(decode_pair).collect()
}

fn split_pairs(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
}

fn decode_pair((name, value): (&str, &str)) -> Option<(String, String)> {
    Some((form_decode(name)?, form_decode(value)?))
}

fn form_decode(text: &str) -> Option<String> {
    let spaced = text.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

/// The URL's `bodySHA256` query value, when there is one.
fn body_sha256(url: &str) -> Option<String> {
    query_pairs(url)
        .into_iter()
        .find(|(name, _)| name == BODY_SHA256)
        .map(|(_, value)| value)
}

hookhost_plugin_sdk::export_provider!(Twilio);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://mycompany.com/myapp.php?foo=1&bar=2";

    fn text(plan: &Plan) -> Option<&str> {
        plan.message.iter().find_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            _ => None,
        })
    }

    #[test]
    fn plan_signs_url_then_sorted_decoded_params() {
        let req = RequestBuilder::post(URL)
            .header("X-Twilio-Signature", "AP8=")
            .header("I-Twilio-Idempotency-Token", "tok-1")
            .body("To=%2B18005551212&Digits=5678&Body=hi+there&Digits=1234&Digits=1234&Empty=")
            .build();
        let plan = Twilio::plan_verification(&req).expect("plan");
        assert_eq!(plan.message[0], Part::Url);
        assert_eq!(
            text(&plan),
            Some("Bodyhi thereDigits1234Digits5678EmptyTo+18005551212")
        );
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha1, vec![0x00, 0xff])]
        );
        assert_eq!(plan.timestamp, None);
        assert_eq!(plan.message_id.as_deref(), Some("tok-1"));
    }

    #[test]
    fn an_empty_body_signs_the_url_alone() {
        let req = RequestBuilder::new("GET", "https://h.example/w?CallSid=CA1")
            .header("X-Twilio-Signature", "AP8=")
            .build();
        let plan = Twilio::plan_verification(&req).expect("plan");
        assert_eq!(plan.message, vec![Part::Url]);
        let event = Twilio::describe_event(&req).expect("event");
        assert_eq!(event.resource_id.as_deref(), Some("CA1"));
        assert_eq!(event.event_type, "call");
    }

    #[test]
    fn body_sha256_is_checked_and_nothing_is_appended() {
        let body = r#"{"property": "value", "boolean": true}"#;
        let hash = "0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620";
        let req = |url: &str| {
            RequestBuilder::post(url)
                .header("X-Twilio-Signature", "AP8=")
                .body(body)
                .build()
        };
        let plan =
            Twilio::plan_verification(&req(&format!("{URL}&bodySHA256={hash}"))).expect("plan");
        assert_eq!(plan.message, vec![Part::Url]);
        let wrong = hash.replace("0a1f", "0a1e");
        for url in [
            format!("{URL}&bodySHA256={wrong}"),
            format!("{URL}&bodySHA256=xyz"),
        ] {
            assert!(matches!(
                Twilio::plan_verification(&req(&url)),
                Err(Rejection::MalformedSignature(_))
            ));
        }
    }

    #[test]
    fn settings_header_selects_the_algorithm() {
        let req = |settings: &str| {
            RequestBuilder::post(URL)
                .header("X-Twilio-Signature", "AP8=")
                .header("X-Twilio-Webhooks-Signature-Settings", settings)
                .build()
        };
        let algorithm =
            |settings| Twilio::plan_verification(&req(settings)).map(|p| p.candidates[0].algorithm);
        assert_eq!(
            algorithm("key=webhooks_sharedkey_1, algorithm=HMAC_SHA256"),
            Ok(Algorithm::HmacSha256)
        );
        assert_eq!(algorithm("key=k"), Ok(Algorithm::HmacSha1));
        assert!(matches!(
            algorithm("algorithm=HMAC_SHA512"),
            Err(Rejection::Unsupported(_))
        ));
    }

    #[test]
    fn missing_and_malformed_input_are_rejections() {
        let none = RequestBuilder::post(URL).body("a=b").build();
        assert!(matches!(
            Twilio::plan_verification(&none),
            Err(Rejection::MissingSignature(_))
        ));
        let not_b64 = RequestBuilder::post(URL)
            .header("X-Twilio-Signature", "not base64!")
            .build();
        assert!(matches!(
            Twilio::plan_verification(&not_b64),
            Err(Rejection::MalformedSignature(_))
        ));
        for body in [&b"Body=\xff"[..], b"Body=%FF"] {
            let req = RequestBuilder::post(URL)
                .header("X-Twilio-Signature", "AP8=")
                .body(body)
                .build();
            assert!(matches!(
                Twilio::plan_verification(&req),
                Err(Rejection::MalformedBody(_))
            ));
        }
    }

    #[test]
    fn events_map_messages_calls_and_event_types() {
        let describe = |body: &str| {
            let req = RequestBuilder::post(URL).body(body).build();
            Twilio::describe_event(&req).expect("event")
        };
        let status = describe("MessageSid=SM1&MessageStatus=delivered&SmsStatus=delivered");
        assert_eq!(status.event_type, "message.delivered");
        assert_eq!(status.resource_kind.as_deref(), Some("message"));
        assert_eq!(status.resource_id.as_deref(), Some("SM1"));
        assert_eq!(status.id, None);
        let inbound = describe("SmsSid=SM2&SmsStatus=received&Body=hello");
        assert_eq!(inbound.event_type, "message.received");
        let call = describe("CallSid=CA1&CallStatus=ringing");
        assert_eq!(call.event_type, "call.ringing");
        assert_eq!(call.resource_kind.as_deref(), Some("call"));
        let conversation = describe("EventType=onMessageAdded&MessageSid=IM1");
        assert_eq!(conversation.event_type, "onMessageAdded");
        assert_eq!(describe("Foo=bar").event_type, "unknown");
    }

    /// The id the host derives for an event without one: `sha256:` + hex SHA-256 of the
    /// signed message, the plan's parts in order.
    fn derived_id(plan: &Plan, url: &str) -> String {
        let mut digest = Sha256::new();
        for part in &plan.message {
            match part {
                Part::Url => digest.update(url.as_bytes()),
                Part::Text(text) => digest.update(text.as_bytes()),
                other => panic!("Twilio signs no {other:?}"),
            }
        }
        let hex: String = digest
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("sha256:{hex}")
    }

    /// The docs' worked example as Twilio posts it, with these extra headers.
    fn worked_example(body: &str, headers: &[(&str, &str)]) -> Request {
        let mut req = RequestBuilder::post(URL).header("X-Twilio-Signature", "AP8=");
        for (name, value) in headers {
            req = req.header(name, value);
        }
        req.body(body).build()
    }

    const WORKED_EXAMPLE: &str = "CallSid=CA1234567890ABCDE&Caller=%2B14158675310&Digits=1234\
                                  &From=%2B14158675310&To=%2B18005551212";

    #[test]
    fn the_unsigned_idempotency_token_is_never_the_event_id() {
        let first = worked_example(WORKED_EXAMPLE, &[("I-Twilio-Idempotency-Token", "tok-1")]);
        let replayed = worked_example(WORKED_EXAMPLE, &[("I-Twilio-Idempotency-Token", "tok-2")]);
        let bare = worked_example(WORKED_EXAMPLE, &[]);
        for req in [&first, &replayed, &bare] {
            assert_eq!(Twilio::describe_event(req).expect("event").id, None);
        }
        // The token is still recorded, as the message id.
        let plan = |req: &Request| Twilio::plan_verification(req).expect("plan");
        assert_eq!(plan(&first).message_id.as_deref(), Some("tok-1"));
        assert_eq!(plan(&replayed).message_id.as_deref(), Some("tok-2"));
        assert_eq!(plan(&bare).message_id, None);
        // The host's id is the signed message's: a fresh token changes nothing.
        let id = derived_id(&plan(&first), URL);
        assert_eq!(
            id, "sha256:c207b7eb77dffad5d4dcea74d481a14e0647669c6f6558f89b0b0898c4e632ca",
            "as fixtures/vectors/twilio.json expects for the worked example"
        );
        assert_eq!(derived_id(&plan(&replayed), URL), id);
        assert_eq!(derived_id(&plan(&bare), URL), id);
    }

    #[test]
    fn the_derived_id_is_stable_across_retries_and_changes_with_what_is_signed() {
        let id = |url: &str, body: &str| {
            let req = RequestBuilder::post(url)
                .header("X-Twilio-Signature", "AP8=")
                .body(body)
                .build();
            derived_id(&Twilio::plan_verification(&req).expect("plan"), url)
        };
        let sent = id(URL, WORKED_EXAMPLE);
        // A retry: the same URL and parameters.
        assert_eq!(id(URL, WORKED_EXAMPLE), sent);
        // The id is the decoded, sorted parameters', not the spelling of the body (a body
        // spelt otherwise under one id is the host's conflicting duplicate).
        let respelt = "To=%2b18005551212&From=%2b14158675310&Digits=1234\
                       &Caller=%2B14158675310&CallSid=CA1234567890ABCDE";
        assert_eq!(id(URL, respelt), sent);
        // Another callback (one parameter differs) or another URL is another event.
        assert_ne!(id(URL, &WORKED_EXAMPLE.replace("1234&", "1235&")), sent);
        assert_ne!(id(&format!("{URL}&baz=3"), WORKED_EXAMPLE), sent);
        // A JSON body: the URL alone is signed, and its bodySHA256 pins the body, so
        // another body is another URL, another id.
        let json = |body: &str| {
            let hash: String = Sha256::digest(body)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            id(&format!("{URL}&bodySHA256={hash}"), body)
        };
        let value = json(r#"{"property": "value", "boolean": true}"#);
        assert_eq!(json(r#"{"property": "value", "boolean": true}"#), value);
        assert_ne!(json(r#"{"property": "valuf", "boolean": true}"#), value);
    }

    #[test]
    fn json_bodies_are_described_from_their_type() {
        let json = |body: &str| {
            let url = format!("{URL}&bodySHA256=00");
            Twilio::describe_event(&RequestBuilder::post(&url).body(body).build())
        };
        let stream = json(r#"[{"type":"com.twilio.messaging.message.delivered","id":"x"}]"#);
        assert_eq!(
            stream.expect("array").event_type,
            "com.twilio.messaging.message.delivered"
        );
        assert_eq!(json(r#"{"a":1}"#).expect("object").event_type, "unknown");
        assert!(matches!(json("a=b"), Err(Rejection::MalformedBody(_))));
    }
}
