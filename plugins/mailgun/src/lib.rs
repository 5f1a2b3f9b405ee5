//! Mailgun: no signature header; the JSON body carries
//! `"signature": {"timestamp": "<unix>", "token": "<50 random chars>", "signature": "<hex>"}`.
//!
//! The signed message is `{timestamp}{token}` (no separator), HMAC-SHA256 keyed by the
//! account's HTTP webhook signing key used verbatim (UTF-8), lowercase hex digest (docs:
//! <https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks>).
//! Events of a subaccount's domain also carry `parent-signature`, the same message signed
//! with the primary account's key (same page); both are candidates, so an endpoint may be
//! configured with either key.
//!
//! **The event data is not signed.** The signature proves that Mailgun issued this
//! timestamp and token, not that `event-data` is what Mailgun sent: whoever has seen one
//! signed delivery can attach any event data to its signature object. The docs suggest
//! refusing a token seen before and checking the timestamp, "not too aggressive" because of
//! delays outside Mailgun's control, and publish no window. Both are done here: the token
//! is the event id (below), so a token seen before is the same event again, never a new
//! one; and the timestamp must be inside the window. The default window is 24 hours, both
//! directions: longer than Mailgun's retry schedule (about 7.5 hours after the first
//! attempt), because retries seem to keep the original signature: in the docs' payload
//! example the signature timestamp is the event's own second (whether retries are signed
//! anew is **[unconfirmed]**). Endpoints that want a tighter window set their own.
//!
//! Only JSON webhooks are handled: legacy form-encoded / multipart webhooks (signature as
//! top-level form fields) are `Unsupported`. A JSON body without the `signature` object is
//! `MissingSignature`.
//!
//! Event (docs: <https://documentation.mailgun.com/docs/mailgun/user-manual/events/>):
//! id = `mailgun:<signature.token>`, type = `event-data.event` (`delivered`, `failed`,
//! `opened`...), occurred_at = `event-data.timestamp` (fractional unix seconds). The id is
//! the signed token, not Mailgun's `event-data.id`: that one is as unsigned as the rest of
//! `event-data`, so with it as the id one captured signature object could carry any number
//! of forged events, each under an id of its own. With the token, a signature object is one
//! event whatever is attached to it: the first body stored under it is kept, and any other
//! body is a conflicting duplicate, quarantined, not delivered; the window bounds how long
//! a captured signature object is accepted at all. `event-data.id` is still required (a
//! body without it is not a Mailgun event) and kept as the receipt's message id, unsigned.
//! If Mailgun signed a retry anew (**[unconfirmed]**, see above), the retry would be
//! another event id; its `event-data.id` would still name the same event.
//!
//! The resource is the message (id = `event-data.message.headers.message-id`), with no
//! version. A message's events (`accepted`, `delivered`, `failed`, `opened`, `clicked`,
//! `unsubscribed`, `complained`, …) are happenings, each worth delivering, not states of
//! the message that supersede one another: a message is opened and clicked any number of
//! times, a temporary failure comes before the delivery, and Mailgun retries an event for
//! hours. With the event time as the version, a retry that arrived after a later event of
//! the same message (an `opened` behind a `clicked`) would be `stale_version` and never
//! delivered. Named without a version, the message's events are still delivered one at a
//! time, in arrival order, and none is ever stale.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, Json, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection,
    Request, decode,
};

/// Covers Mailgun's whole retry schedule (5 min ... 4 h, about 7.5 h in all) with margin, in
/// case retries carry the first attempt's signature.
const DEFAULT_WINDOW_SECONDS: u32 = 24 * 60 * 60;

pub struct Mailgun;

impl Provider for Mailgun {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "mailgun".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Mailgun".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: Some(DEFAULT_WINDOW_SECONDS),
            retry_behaviour: "a 406 answer stops retries; other failures are retried over 8 \
                              hours at 5 min, 10 min, 15 min, 1 h, 2 h and 4 h"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let body = json_body(req)?;
        if !body.raw("/signature").is_some_and(|s| s.starts_with('{')) {
            return Err(Rejection::MissingSignature("signature".into()));
        }
        let signature = body
            .str("/signature/signature")
            .ok_or_else(|| Rejection::MissingSignature("signature.signature".into()))?;
        let token = signed_token(&body)?;
        // Mailgun writes the timestamp as a string of digits; signed exactly as written.
        let signed_timestamp = body
            .id("/signature/timestamp")
            .ok_or_else(|| Rejection::MalformedSignature("signature has no timestamp".into()))?;
        let timestamp = decode::unix_seconds(&signed_timestamp)?;
        let mut candidates = vec![Candidate::new(
            Algorithm::HmacSha256,
            decode::hex(&signature)?,
        )];
        if let Some(parent) = body.str("/signature/parent-signature") {
            candidates.push(Candidate::new(Algorithm::HmacSha256, decode::hex(&parent)?));
        }
        Ok(Plan {
            message: vec![Part::Text(format!("{signed_timestamp}{token}"))],
            candidates,
            timestamp: Some(timestamp),
            // Mailgun's own event id, for the record: not signed, so never the event id.
            message_id: body.str("/event-data/id").map(|id| id.into_owned()),
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = json_body(req)?;
        // The token is what the verified signature covers: see the module docs.
        let id = format!("mailgun:{}", signed_token(&body)?);
        body.required_str("/event-data/id")?;
        let event_type = body.required_str("/event-data/event")?;
        let time = body
            .raw("/event-data/timestamp")
            .and_then(|t| t.parse::<f64>().ok())
            .filter(|t| t.is_finite());
        let mut event = Event::new(event_type.as_ref())
            .id(id)
            .occurred_at(time.map(decode::floor));
        // Happenings, not states: no version (module docs).
        if let Some(message_id) = body.str("/event-data/message/headers/message-id") {
            event = event.resource("message", message_id);
        }
        Ok(event)
    }
}

/// The signature object's token, the only part of the body besides the timestamp that
/// Mailgun signs; never empty (Mailgun's are 50 random characters).
fn signed_token(body: &Json) -> Result<String, Rejection> {
    body.str("/signature/token")
        .filter(|token| !token.is_empty())
        .map(|token| token.into_owned())
        .ok_or_else(|| Rejection::MalformedSignature("signature has no token".into()))
}

fn json_body(req: &Request) -> Result<Json, Rejection> {
    let form = req.header_str("content-type").is_some_and(|t| {
        let t = t.to_ascii_lowercase();
        t.contains("x-www-form-urlencoded") || t.contains("multipart/form-data")
    });
    if form {
        return Err(Rejection::Unsupported(
            "legacy form-encoded webhook: use Mailgun's JSON webhooks".into(),
        ));
    }
    req.json()
}

hookhost_plugin_sdk::export_provider!(Mailgun);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/mailgun";

    fn req(body: &str) -> Request {
        RequestBuilder::post(URL)
            .header("Content-Type", "application/json")
            .body(body)
            .build()
    }

    #[test]
    fn plan_signs_timestamp_then_token() {
        let plan = Mailgun::plan_verification(&req(
            r#"{"signature":{"timestamp":"1529006854","token":"abc","signature":"00ff",
                "parent-signature":"0102"},"event-data":{}}"#,
        ))
        .expect("plan");
        assert_eq!(plan.message, vec![Part::Text("1529006854abc".into())]);
        assert_eq!(plan.timestamp, Some(1_529_006_854));
        assert_eq!(
            plan.candidates,
            vec![
                Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff]),
                Candidate::new(Algorithm::HmacSha256, vec![0x01, 0x02]),
            ]
        );
        let numeric = Mailgun::plan_verification(&req(
            r#"{"signature":{"timestamp":1529006854,"token":"abc","signature":"00ff"}}"#,
        ))
        .expect("numeric timestamp");
        assert_eq!(numeric.message, vec![Part::Text("1529006854abc".into())]);
    }

    #[test]
    fn missing_and_malformed_signatures_are_rejections() {
        let plan = |body| Mailgun::plan_verification(&req(body));
        for missing in [
            r#"{"event-data":{}}"#,
            r#"{"signature":"00ff"}"#,
            r#"{"signature":{"timestamp":"1","token":"t"}}"#,
        ] {
            assert!(
                matches!(plan(missing), Err(Rejection::MissingSignature(_))),
                "{missing}"
            );
        }
        for malformed in [
            r#"{"signature":{"timestamp":"1","signature":"00"}}"#,
            r#"{"signature":{"token":"t","signature":"00"}}"#,
            r#"{"signature":{"timestamp":"soon","token":"t","signature":"00"}}"#,
            r#"{"signature":{"timestamp":"1","token":"t","signature":"zz"}}"#,
        ] {
            assert!(
                matches!(plan(malformed), Err(Rejection::MalformedSignature(_))),
                "{malformed}"
            );
        }
        assert!(matches!(plan("nope"), Err(Rejection::MalformedBody(_))));
        let form = RequestBuilder::post(URL)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body("timestamp=1&token=t&signature=00")
            .build();
        assert!(matches!(
            Mailgun::plan_verification(&form),
            Err(Rejection::Unsupported(_))
        ));
    }

    /// A verified body: the signature object (the signature itself is the host's to
    /// check) and this event data.
    fn signed(token: &str, event_data: &str) -> Request {
        req(&format!(
            r#"{{"signature":{{"timestamp":"1529006854","token":"{token}","signature":"00ff"}},
                "event-data":{event_data}}}"#
        ))
    }

    #[test]
    fn event_maps_event_data_and_message() {
        let event = Mailgun::describe_event(&signed(
            "tok-1",
            r#"{"id":"DACSsAdVSeGpLid7TN03WA","event":"delivered",
                "timestamp":1529006854.329574,
                "message":{"headers":{"message-id":"20180614.1@example.com"}}}"#,
        ))
        .expect("event");
        assert_eq!(event.id.as_deref(), Some("mailgun:tok-1"));
        assert_eq!(event.event_type, "delivered");
        assert_eq!(event.occurred_at, Some(1_529_006_854));
        assert_eq!(event.resource_kind.as_deref(), Some("message"));
        assert_eq!(event.resource_id.as_deref(), Some("20180614.1@example.com"));
        assert_eq!(event.resource_version, None);
        assert!(!event.deleted);

        let bare = Mailgun::describe_event(&signed("tok-2", r#"{"id":"x","event":"opened"}"#))
            .expect("bare");
        assert_eq!(bare.occurred_at, None);
        assert_eq!(bare.resource_id, None);
        assert!(matches!(
            Mailgun::describe_event(&signed("tok-3", r#"{"event":"opened"}"#)),
            Err(Rejection::MalformedBody(_))
        ));
    }

    #[test]
    fn every_message_event_names_the_message_without_a_version() {
        // Each is a happening: a late retry of an earlier one must not be stale.
        for (kind, time) in [
            ("accepted", "1529006850.1"),
            ("delivered", "1529006854.329574"),
            ("failed", "1529006860.5"),
            ("opened", "1529006900.25"),
            ("opened", "1529006999.0"),
            ("clicked", "1529007000.75"),
            ("unsubscribed", "1529007100"),
            ("complained", "1529007200"),
        ] {
            let event = Mailgun::describe_event(&signed(
                "tok-1",
                &format!(
                    r#"{{"id":"x","event":"{kind}","timestamp":{time},
                        "message":{{"headers":{{"message-id":"m-1@example.com"}}}}}}"#
                ),
            ))
            .expect(kind);
            assert_eq!(event.event_type, kind);
            assert_eq!(event.resource_kind.as_deref(), Some("message"), "{kind}");
            assert_eq!(
                event.resource_id.as_deref(),
                Some("m-1@example.com"),
                "{kind}"
            );
            assert_eq!(event.resource_version, None, "{kind} at {time}");
            assert!(!event.deleted, "{kind}");
            assert!(
                event.occurred_at.is_some(),
                "{kind}: the time is still kept"
            );
        }
    }

    #[test]
    fn the_event_id_is_the_signed_token_not_the_unsigned_event_data_id() {
        let event = |token: &str, id: &str, kind: &str| {
            let req = signed(token, &format!(r#"{{"id":"{id}","event":"{kind}"}}"#));
            Mailgun::describe_event(&req).expect("event")
        };
        // One signature object with forged event data of another id and type: the same
        // event id, so the host keeps the first body and quarantines the other.
        let genuine = event("f3a9c1e7", "CPgfbmQMTCKtHW6uIWtuVe", "delivered");
        let forged = event("f3a9c1e7", "G9Bn5sL8TqKj4f1LbP0Qaw", "failed");
        assert_eq!(genuine.id.as_deref(), Some("mailgun:f3a9c1e7"));
        assert_eq!(forged.id, genuine.id);
        assert_eq!(forged.event_type, "failed");
        // Another signature object is another event, whatever its event data says.
        let other = event("b1d3f5a7", "CPgfbmQMTCKtHW6uIWtuVe", "delivered");
        assert_eq!(other.id.as_deref(), Some("mailgun:b1d3f5a7"));
        // The token is read as signed: JSON escapes decoded.
        assert_eq!(
            event(r"f3a9\u0063", "x", "opened").id.as_deref(),
            Some("mailgun:f3a9c")
        );
    }

    #[test]
    fn mailguns_event_id_is_kept_as_the_message_id() {
        let plan = Mailgun::plan_verification(&signed(
            "tok-1",
            r#"{"id":"CPgfbmQMTCKtHW6uIWtuVe","event":"delivered"}"#,
        ))
        .expect("plan");
        assert_eq!(plan.message_id.as_deref(), Some("CPgfbmQMTCKtHW6uIWtuVe"));
        let without = Mailgun::plan_verification(&signed("tok-1", r#"{"event":"delivered"}"#))
            .expect("plan without event-data.id");
        assert_eq!(without.message_id, None);
    }

    #[test]
    fn an_empty_token_is_malformed() {
        let empty = signed("", r#"{"id":"x","event":"opened"}"#);
        assert!(matches!(
            Mailgun::plan_verification(&empty),
            Err(Rejection::MalformedSignature(_))
        ));
        assert!(matches!(
            Mailgun::describe_event(&empty),
            Err(Rejection::MalformedSignature(_))
        ));
    }
}
