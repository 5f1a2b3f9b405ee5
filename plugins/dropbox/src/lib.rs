//! Dropbox: `X-Dropbox-Signature: <hex>`.
//!
//! The signed message is the raw body, HMAC-SHA256 keyed by the app secret (UTF-8,
//! verbatim); lower-case hex, no prefix. Nothing is timestamped, so there is no replay
//! window. Sources: dropbox.com/developers/reference/webhooks (verification request,
//! notifications, signature, retries) and Dropbox's sample app dropbox/mdwebhook
//! `app.py` (`hmac.new(APP_SECRET, body, sha256).hexdigest()`).
//!
//! Verification request: `GET …?challenge=C` → `200 text/plain` with C exactly and
//! `X-Content-Type-Options: nosniff` (Dropbox asks for both, against reflected XSS).
//! The answer reveals nothing, so nothing is checked. A GET without `challenge` → 405.
//!
//! Notification: `{"list_folder":{"accounts":["dbid:…"]},"delta":{"users":[…]}}` says
//! that something changed for these accounts, not what; the app then calls
//! `/files/list_folder/continue`. Type = `list_folder` (else `delta`, the legacy form;
//! else `notification`). Dropbox names no event: the host derives the id from the body's
//! SHA-256, constant when Dropbox retries the same body. When exactly one account is
//! named it is the resource (kind `account`, no version: notifications are not
//! successive states of the account).

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, Handshake, HandshakeCheck, KeyFormat, Part, Plan, PluginInfo,
    Provider, Rejection, Request, Response, decode,
};

pub struct Dropbox;

impl Provider for Dropbox {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "dropbox".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Dropbox".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "a non-200 answer or a timeout is retried with exponential \
                              backoff for about ten minutes, then reported as a failure in \
                              the App Console; verification requests are not retried (10 s \
                              to answer)"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let signature = decode::hex(req.signature_header("x-dropbox-signature")?)?;
        Ok(Plan {
            message: vec![Part::Body],
            candidates: vec![Candidate::new(Algorithm::HmacSha256, signature)],
            timestamp: None,
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        if !body.is_object() {
            return Err(Rejection::MalformedBody("body is not a JSON object".into()));
        }
        let event_type = ["list_folder", "delta"]
            .into_iter()
            .find(|key| body.raw(&format!("/{key}")).is_some())
            .unwrap_or("notification");
        // One account named, and only one: read no further than a second.
        let mut accounts = body.elements("/list_folder/accounts").into_iter().flatten();
        let account = match (accounts.next(), accounts.next()) {
            (Some(only), None) => only.str(""),
            _ => None,
        };
        let event = Event::new(event_type);
        Ok(match account {
            Some(account) => event.resource("account", account.as_ref()),
            None => event,
        })
    }

    fn handshake(req: &Request) -> Option<Handshake> {
        let query = req.url.split_once('?').map_or("", |(_, q)| q);
        let query = query.split_once('#').map_or(query, |(q, _)| q);
        let challenge = form_urlencoded::parse(query.as_bytes())
            .find(|(key, _)| key == "challenge")
            .map(|(_, value)| value.into_owned())?;
        Some(Handshake {
            check: HandshakeCheck::None,
            response: Response::text(challenge).header("X-Content-Type-Options", "nosniff"),
        })
    }
}

hookhost_plugin_sdk::export_provider!(Dropbox);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;
    use hookhost_plugin_sdk::{Disposition, ResponsePart};

    const URL: &str = "https://hooks.example.com/webhooks/dropbox";

    #[test]
    fn plan_signs_the_body() {
        let req = RequestBuilder::post(URL)
            .header("X-Dropbox-Signature", "00ff")
            .body("{}")
            .build();
        let plan = Dropbox::plan_verification(&req).expect("plan");
        assert_eq!(plan.message, vec![Part::Body]);
        assert_eq!(plan.timestamp, None);
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        assert!(matches!(
            Dropbox::plan_verification(&RequestBuilder::post(URL).build()),
            Err(Rejection::MissingSignature(_))
        ));
        for bad in ["sha256=00ff", "zz", "00f"] {
            let req = RequestBuilder::post(URL)
                .header("X-Dropbox-Signature", bad)
                .build();
            assert!(
                matches!(
                    Dropbox::plan_verification(&req),
                    Err(Rejection::MalformedSignature(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn challenge_is_echoed_as_plain_text_with_nosniff() {
        let get = |url: &str| Dropbox::handshake(&RequestBuilder::new("GET", url).build());
        let reply = get(&format!("{URL}?challenge=abc123")).expect("handshake");
        assert_eq!(reply.check, HandshakeCheck::None);
        assert_eq!(reply.response.status, 200);
        assert_eq!(reply.response.content_type, "text/plain");
        assert_eq!(
            reply.response.headers,
            vec![("X-Content-Type-Options".into(), "nosniff".into())]
        );
        assert_eq!(
            reply.response.body,
            vec![ResponsePart::Text("abc123".into())]
        );
        let encoded = get(&format!("{URL}?x=1&challenge=%3Cb%3E+1#f")).expect("encoded");
        assert_eq!(
            encoded.response.body,
            vec![ResponsePart::Text("<b> 1".into())]
        );
        assert_eq!(get(URL), None);
        assert_eq!(get(&format!("{URL}?hub.challenge=1")), None);
    }

    fn describe(body: &str) -> Result<Event, Rejection> {
        Dropbox::describe_event(&RequestBuilder::post(URL).body(body).build())
    }

    #[test]
    fn notifications_name_accounts_not_events() {
        let one = describe(r#"{"list_folder":{"accounts":["dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc"]},"delta":{"users":[12345678]}}"#)
            .expect("one");
        assert_eq!(one.event_type, "list_folder");
        assert_eq!(one.id, None);
        assert_eq!(one.resource_kind.as_deref(), Some("account"));
        assert_eq!(
            one.resource_id.as_deref(),
            Some("dbid:AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc")
        );
        assert_eq!(one.resource_version, None);
        assert_eq!(one.disposition, Disposition::Process);
        let two = describe(r#"{"list_folder":{"accounts":["dbid:A","dbid:B"]}}"#).expect("two");
        assert_eq!(two.resource_kind, None);
        assert_eq!(
            describe(r#"{"delta":{"users":[1]}}"#)
                .expect("delta")
                .event_type,
            "delta"
        );
        assert_eq!(describe("{}").expect("other").event_type, "notification");
        for bad in ["[]", "nope"] {
            assert!(
                matches!(describe(bad), Err(Rejection::MalformedBody(_))),
                "{bad}"
            );
        }
    }
}
