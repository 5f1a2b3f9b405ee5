//! Zoom: `x-zm-signature: v0=<hex>`, `x-zm-request-timestamp: <unix seconds>`.
//!
//! The signed message is `v0:{x-zm-request-timestamp}:{raw body}`, HMAC-SHA256 keyed by
//! the event subscription's Secret Token used verbatim (UTF-8); the signature is
//! `v0=` + lower-case hex. The deprecated verification token (`authorization` header) is
//! not used. Sources: developers.zoom.us/docs/api/webhooks/#verify-webhook-events,
//! developers.zoom.us/changelog/platform/webhook-url-validation, and Zoom's
//! @zoom/rivet (npm) 0.4.0 `CommonHttpRequest.isEventVerified`.
//!
//! URL validation: Zoom POSTs `{"event":"endpoint.url_validation","payload":
//! {"plainToken":P}}`, signed like any event, when an endpoint is added and every 72 h.
//! After verification the endpoint answers `200` with JSON `{"plainToken":P,
//! "encryptedToken":hex(HMAC-SHA256(secret token, P))}`: the host computes the HMAC
//! with the secret the request's signature matched, so that during a rotation Zoom
//! gets the answer made with the token it signs with (the plugin never sees either).
//! Nothing is stored.
//!
//! Zoom publishes no replay window (Rivet checks none); hookhost applies
//! [`TOLERANCE_SECONDS`] both ways (its choice). That a retry carries a fresh timestamp
//! is assumed, not documented: an endpoint can widen `tolerance_seconds`.
//!
//! Event: type = `event`, occurred_at = `event_ts` (ms). Zoom sends no event id, and the
//! host's derived id would cover the per-request timestamp, so the id is the SHA-256 of
//! the body (`body-sha256:<hex>`; the body carries `event_ts`, and that a retry repeats
//! it byte for byte is assumed). Resource: kind = the event's first segment (`meeting`
//! for `meeting.started`), id = `payload.object.id` (else `uuid`). No version: events
//! about parts of an object (`meeting.participant_joined`) share its id and may arrive
//! out of order, so ordering them would drop genuine events. A `.deleted` event is marked
//! deleted, but without a version it leaves no tombstone: a later event of the same id
//! is still delivered (a recurring meeting keeps its id when one occurrence is deleted).

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    Response, ResponsePart, decode, json,
};

/// hookhost's replay window; Zoom publishes none.
pub const TOLERANCE_SECONDS: u32 = 300;

/// The URL validation (challenge-response check) event.
pub const URL_VALIDATION: &str = "endpoint.url_validation";

pub struct Zoom;

impl Provider for Zoom {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "zoom".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Zoom".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: Some(TOLERANCE_SECONDS),
            retry_behaviour: "answer 200 or 204 within 3 s; otherwise retried 3 times: \
                              5 min, then 20 min after the first retry, then 60 min after \
                              the second"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header("x-zm-signature")?;
        let signature = decode::hex(decode::strip_prefix(header, "v0=")?)?;
        let timestamp = decode::unix_seconds(req.signature_header("x-zm-request-timestamp")?)?;
        Ok(Plan {
            // The header's exact bytes are what Zoom signed.
            message: vec![
                Part::Text("v0:".into()),
                Part::Header("x-zm-request-timestamp".into()),
                Part::Text(":".into()),
                Part::Body,
            ],
            candidates: vec![Candidate::new(Algorithm::HmacSha256, signature)],
            timestamp: Some(timestamp),
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let event_type = body.required_str("/event")?;
        let event_ms = body.u64("/event_ts");
        let occurred_at = event_ms.and_then(|ms| i64::try_from(ms / 1000).ok());
        if event_type == URL_VALIDATION {
            let plain_token = body.required_str("/payload/plainToken")?;
            return Ok(Event::new(URL_VALIDATION)
                .occurred_at(occurred_at)
                .answer(url_validation_answer(&plain_token)));
        }
        let mut event = Event::new(event_type.as_ref())
            .id(req.body_id())
            .occurred_at(occurred_at);
        let object_id = body
            .id("/payload/object/id")
            .or_else(|| body.id("/payload/object/uuid"));
        if let Some(object_id) = object_id {
            let kind = event_type.split('.').next().unwrap_or(&event_type);
            event = event
                .resource(kind, object_id)
                .deleted(event_type.ends_with(".deleted"));
        }
        Ok(event)
    }
}

/// `{"plainToken":P,"encryptedToken":"<hex HMAC-SHA256(secret, P)>"}`, with P written as
/// a JSON string (escaped) and hashed as the text it stands for.
fn url_validation_answer(plain_token: &str) -> Response {
    let quoted = json::quote(plain_token);
    Response::new(
        200,
        "application/json",
        vec![
            ResponsePart::Text(format!(r#"{{"plainToken":{quoted},"encryptedToken":""#)),
            ResponsePart::HmacSha256Hex(plain_token.to_owned()),
            ResponsePart::Text(r#""}"#.into()),
        ],
    )
}

hookhost_plugin_sdk::export_provider!(Zoom);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::Disposition;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/zoom";

    fn req(sig: Option<&str>, ts: Option<&str>) -> Request {
        let mut builder = RequestBuilder::post(URL).body("{}");
        if let Some(sig) = sig {
            builder = builder.header("x-zm-signature", sig);
        }
        if let Some(ts) = ts {
            builder = builder.header("x-zm-request-timestamp", ts);
        }
        builder.build()
    }

    #[test]
    fn plan_signs_v0_timestamp_body() {
        let plan =
            Zoom::plan_verification(&req(Some("v0=00ff"), Some("1718217605"))).expect("plan");
        assert_eq!(
            plan.message,
            vec![
                Part::Text("v0:".into()),
                Part::Header("x-zm-request-timestamp".into()),
                Part::Text(":".into()),
                Part::Body
            ]
        );
        assert_eq!(plan.timestamp, Some(1_718_217_605));
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        for missing in [req(None, Some("1")), req(Some("v0=00"), None)] {
            assert!(matches!(
                Zoom::plan_verification(&missing),
                Err(Rejection::MissingSignature(_))
            ));
        }
        for bad in [
            req(Some("00ff"), Some("1")),
            req(Some("v0=zz"), Some("1")),
            req(Some("v0=00"), Some("2024-06-12T18:40:05Z")),
        ] {
            assert!(matches!(
                Zoom::plan_verification(&bad),
                Err(Rejection::MalformedSignature(_))
            ));
        }
    }

    fn describe(body: &str) -> Result<Event, Rejection> {
        Zoom::describe_event(&RequestBuilder::post(URL).body(body).build())
    }

    #[test]
    fn url_validation_is_answered_with_the_hmac_of_the_plain_token() {
        let event = describe(
            r#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}"#,
        )
        .expect("validation");
        assert_eq!(event.occurred_at, Some(1_654_503_849));
        let Disposition::Answer(response) = event.disposition else {
            panic!("not answered");
        };
        assert_eq!(
            (response.status, response.content_type.as_str()),
            (200, "application/json")
        );
        assert_eq!(
            response.body,
            vec![
                ResponsePart::Text(
                    r#"{"plainToken":"qgg8vlvZRS6UYooatFL8Aw","encryptedToken":""#.into()
                ),
                ResponsePart::HmacSha256Hex("qgg8vlvZRS6UYooatFL8Aw".into()),
                ResponsePart::Text(r#""}"#.into()),
            ]
        );
        // A token that needs escaping stays valid JSON; the HMAC covers the text itself.
        let event =
            describe(r#"{"event":"endpoint.url_validation","payload":{"plainToken":"a\"b\\c"}}"#)
                .expect("escaped");
        let Disposition::Answer(response) = event.disposition else {
            panic!("not answered");
        };
        assert_eq!(
            response.body[0],
            ResponsePart::Text(r#"{"plainToken":"a\"b\\c","encryptedToken":""#.into())
        );
        assert_eq!(
            response.body[1],
            ResponsePart::HmacSha256Hex(r#"a"b\c"#.into())
        );
        assert!(matches!(
            describe(r#"{"event":"endpoint.url_validation","payload":{}}"#),
            Err(Rejection::MalformedBody(_))
        ));
    }

    #[test]
    fn events_map_type_time_object_and_a_body_id() {
        let body = r#"{"event":"meeting.deleted","event_ts":1718217604123,"payload":{"account_id":"A1","object":{"id":85746065432,"uuid":"4444AAAiAAAAAiAiAiiAii==","topic":"x"}}}"#;
        let event = describe(body).expect("event");
        assert_eq!(event.event_type, "meeting.deleted");
        assert_eq!(
            event.id,
            Some(RequestBuilder::post(URL).body(body).build().body_id())
        );
        assert!(
            event
                .id
                .as_deref()
                .is_some_and(|id| id.len() == "body-sha256:".len() + 64)
        );
        assert_eq!(event.occurred_at, Some(1_718_217_604));
        assert_eq!(event.resource_kind.as_deref(), Some("meeting"));
        assert_eq!(event.resource_id.as_deref(), Some("85746065432"));
        assert_eq!(event.resource_version, None);
        assert!(event.deleted);
        let uuid_only =
            describe(r#"{"event":"recording.completed","payload":{"object":{"uuid":"u1"}}}"#)
                .expect("uuid");
        assert_eq!(uuid_only.resource_id.as_deref(), Some("u1"));
        assert!(!uuid_only.deleted);
        let bare = describe(r#"{"event":"app_deauthorized","payload":{}}"#).expect("bare");
        assert_eq!(bare.resource_kind, None);
        for bad in [r#"{"payload":{}}"#, "nope"] {
            assert!(
                matches!(describe(bad), Err(Rejection::MalformedBody(_))),
                "{bad}"
            );
        }
    }
}
