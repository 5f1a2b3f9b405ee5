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
//! `internal/events/trigger/forward_event.go` (how the CLI signs),
//! `internal/events/trigger/trigger_event.go` (a revocation is a message whose
//! subscription is no longer `enabled`, sent without its event) and
//! `internal/events/types/drop/drop.go` (a batched type's `events` array).
//!
//! `Twitch-Eventsub-Message-Type` is not signed, so it alone cannot say what a message
//! is: a message re-sent inside the window under another type would otherwise be taken
//! for that type (a notification for a revocation, a challenge for an event). Each type
//! has a body only it carries, and the signed body must show the type the header names;
//! when they differ, or the header is absent, the request is `MalformedBody` (authentic,
//! but not a request Twitch sends). An unknown type is `Unsupported`.
//! - `webhook_callback_verification`: the body has a `challenge` and no event. Answered
//!   `200 text/plain` with the `challenge`, exactly; nothing stored.
//! - `notification`: the body has an `event` object (a batched type, such as
//!   `drop.entitlement.grant`, an `events` array instead) and no `challenge`.
//!   id = `Twitch-Eventsub-Message-Id` (the same when Twitch resends), type =
//!   `subscription.type` (`channel.follow`…; else the `Twitch-Eventsub-Subscription-Type`
//!   header), occurred_at = the message timestamp.
//! - `revocation`: the body has neither, and its `subscription.status` is the reason
//!   (`authorization_revoked`, `user_removed`, `notification_failures_exceeded`,
//!   `version_removed`, or another Twitch adds), never a status of a live subscription
//!   ([`LIVE_STATUSES`]). Stored and delivered (an operator needs to know the
//!   subscription is gone): type `revocation`, id = the message id, resource = the
//!   subscription, marked deleted.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, Json, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection,
    Request, Response, decode,
};

/// Twitch: "make sure the timestamp is not older than 10 minutes".
pub const TOLERANCE_SECONDS: u32 = 600;

const ID: &str = "twitch-eventsub-message-id";
const TIMESTAMP: &str = "twitch-eventsub-message-timestamp";
const SIGNATURE: &str = "twitch-eventsub-message-signature";
const MESSAGE_TYPE: &str = "twitch-eventsub-message-type";
const SUBSCRIPTION_TYPE: &str = "twitch-eventsub-subscription-type";

/// Subscription statuses under which Twitch challenges or notifies: a body with one of
/// them is not a revocation. Any other status is a reason Twitch revoked it; the list
/// of reasons grows (`moderator_removed`, `chat_user_banned`…), the live states do not.
pub const LIVE_STATUSES: [&str; 2] = ["enabled", "webhook_callback_verification_pending"];

/// What a message is: named by the unsigned type header, shown by the signed body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Verification,
    Notification,
    Revocation,
}

impl Kind {
    /// The kind a `Twitch-Eventsub-Message-Type` value names.
    fn named(message_type: &str) -> Option<Kind> {
        match message_type {
            "webhook_callback_verification" => Some(Kind::Verification),
            "notification" => Some(Kind::Notification),
            "revocation" => Some(Kind::Revocation),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Verification => "webhook_callback_verification",
            Kind::Notification => "notification",
            Kind::Revocation => "revocation",
        }
    }

    /// The kind the body shows, by what only that kind carries: a challenge, an event,
    /// or a subscription that is no longer live and nothing else.
    fn shown_by(body: &Json) -> Result<Kind, Rejection> {
        let challenge = body.raw("/challenge").is_some();
        let event = body.raw("/event");
        let events = body.raw("/events");
        let malformed = |why: String| Err(Rejection::MalformedBody(why));
        match (challenge, event.is_some() || events.is_some()) {
            (true, true) => malformed("the body has both a challenge and an event".into()),
            (true, false) => Ok(Kind::Verification),
            (false, true) => {
                let single = event.is_some_and(|e| e.trim_start().starts_with('{'));
                let batch = events.is_some_and(|e| e.trim_start().starts_with('['));
                if single || batch {
                    Ok(Kind::Notification)
                } else {
                    malformed("the body's event is not an object, nor its events an array".into())
                }
            }
            (false, false) => match body.str("/subscription/status") {
                Some(status) if !LIVE_STATUSES.contains(&status.as_ref()) => Ok(Kind::Revocation),
                Some(status) => malformed(format!(
                    "the body has no challenge and no event, and subscription.status \
                     {status:?} is not a revocation reason"
                )),
                None => malformed(
                    "the body has no challenge, no event and no subscription.status".into(),
                ),
            },
        }
    }
}

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
        let Some(kind) = Kind::named(message_type) else {
            return Err(Rejection::Unsupported(format!(
                "{MESSAGE_TYPE} {message_type:?} is not notification, \
                 webhook_callback_verification or revocation"
            )));
        };
        // The header is not signed: the signed body decides, and must agree with it.
        let shown = Kind::shown_by(&body)?;
        if shown != kind {
            return Err(Rejection::MalformedBody(format!(
                "{MESSAGE_TYPE} is {message_type:?} but the signed body is a {}",
                shown.name()
            )));
        }
        match kind {
            Kind::Verification => {
                let challenge = body.required_str("/challenge")?;
                Ok(Event::new(message_type)
                    .id(id)
                    .occurred_at(occurred_at)
                    .answer(Response::text(challenge.into_owned())))
            }
            Kind::Notification => {
                let event_type = match body.str("/subscription/type") {
                    Some(t) => t.into_owned(),
                    None => req.required_header(SUBSCRIPTION_TYPE)?.to_owned(),
                };
                Ok(Event::new(event_type).id(id).occurred_at(occurred_at))
            }
            Kind::Revocation => {
                let subscription = body.required_str("/subscription/id")?;
                Ok(Event::new("revocation")
                    .id(id)
                    .occurred_at(occurred_at)
                    .resource("subscription", subscription)
                    .version(decode::rfc3339_millis(stamp))
                    .deleted(true))
            }
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

    const NOTIFICATION: &str = r#"{"subscription":{"id":"s1","status":"enabled","type":"channel.follow"},"event":{"user_id":"1234"}}"#;
    const CHALLENGE: &str = r#"{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"id":"s1","status":"webhook_callback_verification_pending","type":"channel.follow"}}"#;
    const REVOCATION: &str =
        r#"{"subscription":{"id":"s1","status":"authorization_revoked","type":"channel.follow"}}"#;

    fn refused(message_type: &str, body: &str) -> bool {
        matches!(
            Twitch::describe_event(&with(message_type, body)),
            Err(Rejection::MalformedBody(_))
        )
    }

    #[test]
    fn a_notification_relabelled_as_revocation_is_refused() {
        assert!(refused("revocation", NOTIFICATION));
        // Batched, too.
        let batch = r#"{"subscription":{"id":"s1","status":"enabled","type":"drop.entitlement.grant"},"events":[{"id":"e1","data":{}}]}"#;
        assert!(refused("revocation", batch));
        assert!(refused("webhook_callback_verification", NOTIFICATION));
        // Unchanged, it is the event it always was.
        let event = Twitch::describe_event(&with("notification", NOTIFICATION)).expect("event");
        assert_eq!(
            (event.event_type.as_str(), event.deleted),
            ("channel.follow", false)
        );
    }

    #[test]
    fn a_verification_relabelled_as_notification_is_refused() {
        assert!(refused("notification", CHALLENGE));
        assert!(refused("revocation", CHALLENGE));
        let answered =
            Twitch::describe_event(&with("webhook_callback_verification", CHALLENGE)).expect("ok");
        assert!(matches!(answered.disposition, Disposition::Answer(_)));
    }

    #[test]
    fn a_revocation_relabelled_is_refused() {
        assert!(refused("notification", REVOCATION));
        assert!(refused("webhook_callback_verification", REVOCATION));
        let revoked = Twitch::describe_event(&with("revocation", REVOCATION)).expect("revocation");
        assert!(revoked.deleted);
    }

    #[test]
    fn a_revocation_is_a_subscription_no_longer_live_and_nothing_else() {
        // Reasons beyond the documented four are revocations too.
        for status in ["moderator_removed", "chat_user_banned", "version_removed"] {
            let body = format!(r#"{{"subscription":{{"id":"s1","status":"{status}"}}}}"#);
            let revoked = Twitch::describe_event(&with("revocation", &body)).expect(status);
            assert_eq!(revoked.resource_id.as_deref(), Some("s1"));
        }
        // A live subscription's body, or one saying nothing, is not.
        for body in [
            r#"{"subscription":{"id":"s1","status":"enabled"}}"#,
            r#"{"subscription":{"id":"s1","status":"webhook_callback_verification_pending"}}"#,
            r#"{"subscription":{"id":"s1"}}"#,
            "{}",
            "[]",
        ] {
            assert!(refused("revocation", body), "{body}");
        }
        // Nor is a body carrying both a challenge and an event, or an event of no shape.
        let both = r#"{"challenge":"c","subscription":{"id":"s1"},"event":{}}"#;
        for message_type in [
            "webhook_callback_verification",
            "notification",
            "revocation",
        ] {
            assert!(refused(message_type, both), "{message_type}");
        }
        assert!(refused(
            "notification",
            r#"{"subscription":{"id":"s1"},"event":"x"}"#
        ));
        assert!(refused(
            "notification",
            r#"{"subscription":{"id":"s1"},"events":{}}"#
        ));
    }

    #[test]
    fn batched_and_pretty_printed_bodies_are_read() {
        let batch = "{\n  \"subscription\": {\"id\": \"s1\", \"status\": \"enabled\", \
                     \"type\": \"drop.entitlement.grant\"},\n  \"events\": [ {\"id\": \"e1\"} ]\n}";
        let event = Twitch::describe_event(&with("notification", batch)).expect("batch");
        assert_eq!(event.event_type, "drop.entitlement.grant");
        let single = "{ \"subscription\": { \"id\": \"s1\", \"status\": \"enabled\" }, \
                      \"event\":  { \"user_id\": \"1234\" } }";
        let event = Twitch::describe_event(&with("notification", single)).expect("single");
        assert_eq!(event.event_type, "channel.follow");
        assert!(refused("revocation", single));
        let revocation = "{\n  \"subscription\": {\n    \"id\": \"s1\",\n    \
                          \"status\": \"user_removed\"\n  }\n}";
        assert!(
            Twitch::describe_event(&with("revocation", revocation))
                .expect("revocation")
                .deleted
        );
    }

    /// Every vector in `fixtures/vectors/twitch.json` that reaches the plugin's
    /// description (an accept, or a refusal of the body) is decided here as the file
    /// says. Signatures and the clock are the host's, judged by `hookhost plugin test`.
    #[test]
    fn descriptions_agree_with_the_vector_file() {
        use hookhost_plugin_sdk::serde_json::{self, Value};
        let file = include_str!("../../../fixtures/vectors/twitch.json");
        let vectors: Vec<Value> = serde_json::from_str(file).expect("twitch.json");
        let mut judged = 0;
        for v in &vectors {
            let name = v["name"].as_str().expect("name");
            let expect = &v["expect"];
            let error = expect["error"].as_str();
            if !matches!(error, None | Some("malformed_body" | "unsupported")) {
                continue;
            }
            let request = &v["request"];
            let mut builder = RequestBuilder::new(
                request["method"].as_str().expect("method"),
                request["url"].as_str().expect("url"),
            );
            for pair in request["headers"].as_array().expect("headers") {
                builder = builder.header(
                    pair[0].as_str().expect("header name"),
                    pair[1].as_str().expect("header value"),
                );
            }
            let body = match request["body"].as_str() {
                Some(text) => text.as_bytes().to_vec(),
                None => {
                    decode::base64(request["body_base64"].as_str().expect("body")).expect("base64")
                }
            };
            let req = builder.body(body).build();
            Twitch::plan_verification(&req).expect(name);
            let described = Twitch::describe_event(&req);
            judged += 1;
            match error {
                Some("malformed_body") => assert!(
                    matches!(described, Err(Rejection::MalformedBody(_))),
                    "{name}: {described:?}"
                ),
                Some(_) => assert!(
                    matches!(described, Err(Rejection::Unsupported(_))),
                    "{name}: {described:?}"
                ),
                None => {
                    let event = described.expect(name);
                    if let Some(response) = expect.get("response") {
                        let Disposition::Answer(answer) = &event.disposition else {
                            panic!("{name}: not answered");
                        };
                        assert_eq!(Some(u64::from(answer.status)), response["status"].as_u64());
                        let text = response["body"].as_str().expect("body").to_owned();
                        assert_eq!(answer.body, vec![ResponsePart::Text(text)], "{name}");
                        continue;
                    }
                    let Some(want) = expect.get("event") else {
                        continue;
                    };
                    let got = [
                        ("id", event.id.clone().map_or(Value::Null, Value::from)),
                        ("type", Value::from(event.event_type.clone())),
                        (
                            "occurred_at",
                            event.occurred_at.map_or(Value::Null, Value::from),
                        ),
                        (
                            "resource_kind",
                            event.resource_kind.clone().map_or(Value::Null, Value::from),
                        ),
                        (
                            "resource_id",
                            event.resource_id.clone().map_or(Value::Null, Value::from),
                        ),
                        (
                            "version",
                            event.resource_version.map_or(Value::Null, Value::from),
                        ),
                        ("deleted", Value::from(event.deleted)),
                    ];
                    for (field, value) in got {
                        if let Some(wanted) = want.get(field) {
                            assert_eq!(wanted, &value, "{name}: {field}");
                        }
                    }
                    if let Some(wanted) = want.get("disposition") {
                        assert_eq!(wanted, "process", "{name}");
                        assert_eq!(event.disposition, Disposition::Process, "{name}");
                    }
                }
            }
        }
        assert!(
            judged >= 10,
            "only {judged} vectors reached the description"
        );
    }
}
