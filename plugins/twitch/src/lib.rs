//! Twitch EventSub (webhook transport): `Twitch-Eventsub-Message-Signature: sha256=<hex>`.
//!
//! The signed message is `{Twitch-Eventsub-Message-Id}{Twitch-Eventsub-Message-Timestamp}
//! {raw body}` (plain concatenation of the two header values and the body), HMAC-SHA256
//! keyed by the subscription's `secret` (10–100 ASCII characters, used verbatim); hex
//! digest with a `sha256=` prefix. The timestamp is RFC 3339 with nanoseconds; Twitch
//! says to reject messages older than 10 minutes ([`TOLERANCE_SECONDS`], applied both
//! ways by the host). Sources: dev.twitch.tv/docs/eventsub/handling-webhook-events
//! (#verifying-the-event-message, #responding-to-a-challenge-request,
//! #revoking-your-subscription), dev.twitch.tv/docs/eventsub (#handling-duplicate-events,
//! #guarding-against-replay-attacks), and twitchdev/twitch-cli
//! `internal/events/trigger/forward_event.go` (how the CLI signs).
//!
//! By `Twitch-Eventsub-Message-Type` (absent → `MalformedBody`):
//! - `webhook_callback_verification`: answered `200 text/plain` with the body's
//!   `challenge`, exactly; nothing stored.
//! - `notification`: id = `Twitch-Eventsub-Message-Id` (the same when Twitch resends),
//!   type = `subscription.type` (`channel.follow`…; else the
//!   `Twitch-Eventsub-Subscription-Type` header), occurred_at = the message timestamp.
//! - `revocation`: stored and delivered (an operator needs to know the subscription is
//!   gone; the reason is the body's `subscription.status`): type `revocation`, id = the
//!   message id, resource = the subscription, marked deleted.
//! - anything else → `Unsupported`.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    Response, decode,
};

/// Twitch: "make sure the timestamp is not older than 10 minutes".
pub const TOLERANCE_SECONDS: u32 = 600;

const ID: &str = "twitch-eventsub-message-id";
const TIMESTAMP: &str = "twitch-eventsub-message-timestamp";
const SIGNATURE: &str = "twitch-eventsub-message-signature";
const MESSAGE_TYPE: &str = "twitch-eventsub-message-type";
const SUBSCRIPTION_TYPE: &str = "twitch-eventsub-subscription-type";

pub struct Twitch;

impl Provider for Twitch {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "twitch".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Twitch".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: Some(TOLERANCE_SECONDS),
            retry_behaviour: "at-least-once: a message may be resent with the same \
                              Twitch-Eventsub-Message-Id; answer 2xx within a few seconds; \
                              too many failures revoke the subscription \
                              (notification_failures_exceeded); retry schedule unconfirmed"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header(SIGNATURE)?;
        let signature = decode::hex(decode::strip_prefix(header, "sha256=")?)?;
        let id = req.signature_header(ID)?;
        let stamp = req.signature_header(TIMESTAMP)?;
        let timestamp = decode::rfc3339_seconds(stamp).ok_or_else(|| {
            Rejection::MalformedSignature(format!("{TIMESTAMP} {stamp:?} is not RFC 3339"))
        })?;
        Ok(Plan {
            // Both headers' exact bytes are what Twitch signed.
            message: vec![
                Part::Header(ID.into()),
                Part::Header(TIMESTAMP.into()),
                Part::Body,
            ],
            candidates: vec![Candidate::new(Algorithm::HmacSha256, signature)],
            timestamp: Some(timestamp),
            message_id: Some(id.to_owned()),
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let message_type = req.required_header(MESSAGE_TYPE)?;
        let id = req.required_header(ID)?;
        let stamp = req.header_str(TIMESTAMP).map(str::trim).unwrap_or_default();
        let occurred_at = decode::rfc3339_seconds(stamp);
        let body = req.json()?;
        match message_type {
            "webhook_callback_verification" => {
                let challenge = body.required_str("/challenge")?;
                Ok(Event::new(message_type)
                    .id(id)
                    .occurred_at(occurred_at)
                    .answer(Response::text(challenge.into_owned())))
            }
            "notification" => {
                let event_type = match body.str("/subscription/type") {
                    Some(t) => t.into_owned(),
                    None => req.required_header(SUBSCRIPTION_TYPE)?.to_owned(),
                };
                Ok(Event::new(event_type).id(id).occurred_at(occurred_at))
            }
            "revocation" => {
                let subscription = body.required_str("/subscription/id")?;
                Ok(Event::new("revocation")
                    .id(id)
                    .occurred_at(occurred_at)
                    .resource("subscription", subscription)
                    .version(decode::rfc3339_millis(stamp))
                    .deleted(true))
            }
            other => Err(Rejection::Unsupported(format!(
                "{MESSAGE_TYPE} {other:?} is not notification, \
                 webhook_callback_verification or revocation"
            ))),
        }
    }
}

hookhost_plugin_sdk::export_provider!(Twitch);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;
    use hookhost_plugin_sdk::{Disposition, ResponsePart};

    const URL: &str = "https://hooks.example.com/webhooks/twitch";
    const MSG_ID: &str = "e76c6bd4-55c9-4987-8304-da1588d8988b";
    const STAMP: &str = "2019-11-16T10:11:12.634234626Z";

    fn req(headers: &[(&str, &str)], body: &str) -> Request {
        headers
            .iter()
            .fold(RequestBuilder::post(URL), |b, (n, v)| b.header(n, v))
            .body(body)
            .build()
    }

    fn signed(message_type: &str) -> Vec<(&'static str, String)> {
        vec![
            ("Twitch-Eventsub-Message-Id", MSG_ID.to_owned()),
            ("Twitch-Eventsub-Message-Retry", "0".to_owned()),
            ("Twitch-Eventsub-Message-Type", message_type.to_owned()),
            (
                "Twitch-Eventsub-Message-Signature",
                "sha256=00ff".to_owned(),
            ),
            ("Twitch-Eventsub-Message-Timestamp", STAMP.to_owned()),
            (
                "Twitch-Eventsub-Subscription-Type",
                "channel.follow".to_owned(),
            ),
        ]
    }

    fn with(message_type: &str, body: &str) -> Request {
        let headers = signed(message_type);
        let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        req(&pairs, body)
    }

    #[test]
    fn plan_signs_id_timestamp_body_with_nanosecond_time() {
        let plan = Twitch::plan_verification(&with("notification", "{}")).expect("plan");
        assert_eq!(
            plan.message,
            vec![
                Part::Header(ID.into()),
                Part::Header(TIMESTAMP.into()),
                Part::Body
            ]
        );
        assert_eq!(plan.timestamp, Some(1_573_899_072));
        assert_eq!(plan.message_id.as_deref(), Some(MSG_ID));
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        for drop in [SIGNATURE, ID, TIMESTAMP] {
            let headers: Vec<(&str, String)> = signed("notification")
                .into_iter()
                .filter(|(n, _)| !n.eq_ignore_ascii_case(drop))
                .collect();
            let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            assert!(
                matches!(
                    Twitch::plan_verification(&req(&pairs, "{}")),
                    Err(Rejection::MissingSignature(_))
                ),
                "{drop}"
            );
        }
        for (name, value) in [
            ("Twitch-Eventsub-Message-Signature", "00ff"),
            ("Twitch-Eventsub-Message-Signature", "sha256=zz"),
            ("Twitch-Eventsub-Message-Timestamp", "1573899072"),
        ] {
            let headers: Vec<(&str, String)> = signed("notification")
                .into_iter()
                .map(|(n, v)| {
                    if n == name {
                        (n, value.to_owned())
                    } else {
                        (n, v)
                    }
                })
                .collect();
            let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            assert!(
                matches!(
                    Twitch::plan_verification(&req(&pairs, "{}")),
                    Err(Rejection::MalformedSignature(_))
                ),
                "{value}"
            );
        }
    }

    #[test]
    fn challenge_is_answered_as_plain_text() {
        let event = Twitch::describe_event(&with(
            "webhook_callback_verification",
            r#"{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"id":"s1"}}"#,
        ))
        .expect("challenge");
        let Disposition::Answer(response) = event.disposition else {
            panic!("not answered");
        };
        assert_eq!(
            (response.status, response.content_type.as_str()),
            (200, "text/plain")
        );
        assert_eq!(
            response.body,
            vec![ResponsePart::Text(
                "pogchamp-kappa-360noscope-vohiyo".into()
            )]
        );
        assert!(matches!(
            Twitch::describe_event(&with("webhook_callback_verification", "{}")),
            Err(Rejection::MalformedBody(_))
        ));
    }

    #[test]
    fn notifications_and_revocations_map() {
        let event = Twitch::describe_event(&with(
            "notification",
            r#"{"subscription":{"id":"s1","type":"stream.online"},"event":{"id":"9"}}"#,
        ))
        .expect("notification");
        assert_eq!(event.id.as_deref(), Some(MSG_ID));
        assert_eq!(event.event_type, "stream.online");
        assert_eq!(event.occurred_at, Some(1_573_899_072));
        assert_eq!(event.disposition, Disposition::Process);
        let from_header =
            Twitch::describe_event(&with("notification", r#"{"event":{}}"#)).expect("header type");
        assert_eq!(from_header.event_type, "channel.follow");

        let revoked = Twitch::describe_event(&with(
            "revocation",
            r#"{"subscription":{"id":"s1","status":"authorization_revoked","type":"channel.follow"}}"#,
        ))
        .expect("revocation");
        assert_eq!(revoked.event_type, "revocation");
        assert_eq!(revoked.resource_kind.as_deref(), Some("subscription"));
        assert_eq!(revoked.resource_id.as_deref(), Some("s1"));
        assert_eq!(revoked.resource_version, Some(1_573_899_072_634));
        assert!(revoked.deleted);

        assert!(matches!(
            Twitch::describe_event(&with("mystery", "{}")),
            Err(Rejection::Unsupported(_))
        ));
        let untyped = req(&[("Twitch-Eventsub-Message-Id", MSG_ID)], "{}");
        assert!(matches!(
            Twitch::describe_event(&untyped),
            Err(Rejection::MalformedBody(_))
        ));
        assert!(matches!(
            Twitch::describe_event(&with("notification", "not json")),
            Err(Rejection::MalformedBody(_))
        ));
    }
}
