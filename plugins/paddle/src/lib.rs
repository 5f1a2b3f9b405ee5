//! Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=<hex>…]`.
//!
//! The signed message is `{ts}:{raw body}`, HMAC-SHA256 keyed by the notification
//! destination's secret key (`pdl_ntfset_…`) used verbatim as UTF-8, lowercase hex digest
//! (docs: <https://developer.paddle.com/webhooks/signature-verification>). `ts` is signed as
//! the integer the SDKs parse it to (`int(ts)` / `parseInt(ts)`), which is the text Paddle
//! sends. Every `h1` is a candidate: paddle-python-sdk 1.16.1 (`PaddleSignature.parse`)
//! collects them all and its own test header carries a junk `h1=dummy` beside the real one,
//! so an `h1` that is not hex is skipped rather than failing the request; a header whose
//! `h1`s are all undecodable is malformed. Keys other than `ts` and `h1` are ignored (the
//! Python SDK raises on them, the Node SDK ignores them). Whether Paddle itself ever sends
//! several `h1` is **[unconfirmed]**.
//!
//! Window: 5 s, both directions, as the SDK helpers enforce (docs: "five-second timestamp
//! tolerance"; paddle-python-sdk `Verifier(maximum_variance=5)` rejects old and future
//! timestamps; paddle-node-sdk 3.10.0 `MAX_VALID_TIME_DIFFERENCE = 5`, old only). Receivers
//! whose clocks drift should widen it per endpoint.
//!
//! Event (Paddle's event payload, docs: <https://developer.paddle.com/webhooks/overview>):
//! id = `event_id` (the same on every retry of a notification), type = `event_type`
//! (`transaction.completed`), occurred_at = `occurred_at` (RFC 3339). The resource is the
//! entity in `data`: kind = the event type before the first `.`, id = `data.id`, version =
//! `data.updated_at` in unix millis (else the event time); `*.deleted` types mark it
//! deleted. `notification_id` is the delivery id.
//!
//! Retries (docs: <https://developer.paddle.com/webhooks/respond-to-webhooks>): answer 200
//! within five seconds; live accounts are retried up to 60 times over 3 days.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    decode,
};

const SIGNATURE: &str = "paddle-signature";

pub struct Paddle;

impl Provider for Paddle {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "paddle".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Paddle Billing".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: Some(5),
            retry_behaviour: "answer 200 within 5 s; live accounts: up to 60 retries over 3 \
                              days with exponential backoff (sandbox schedule unconfirmed); \
                              exhausted notifications can be replayed through the API"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header(SIGNATURE)?;
        let mut timestamp = None;
        let mut h1_count = 0;
        let mut candidates = Vec::new();
        for (key, value) in decode::key_values(header, ';') {
            match key {
                "ts" => timestamp = Some(decode::unix_seconds(value)?),
                "h1" => {
                    h1_count += 1;
                    if let Ok(signature) = decode::hex(value) {
                        candidates.push(Candidate::new(Algorithm::HmacSha256, signature));
                    }
                }
                _ => {} // unknown schemes are not trusted
            }
        }
        let timestamp = timestamp
            .ok_or_else(|| Rejection::MalformedSignature("paddle-signature has no ts=".into()))?;
        if h1_count == 0 {
            return Err(Rejection::MissingSignature("paddle-signature h1".into()));
        }
        if candidates.is_empty() {
            return Err(Rejection::MalformedSignature(
                "no h1 in paddle-signature is hex".into(),
            ));
        }
        Ok(Plan {
            message: vec![Part::Text(format!("{timestamp}:")), Part::Body],
            candidates,
            timestamp: Some(timestamp),
            message_id: req
                .json()
                .ok()
                .and_then(|body| body.str("/notification_id").map(|id| id.into_owned())),
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let id = body.required_str("/event_id")?;
        let event_type = body.required_str("/event_type")?;
        let occurred_at = body.rfc3339("/occurred_at");
        let mut event = Event::new(event_type.as_ref())
            .id(id)
            .occurred_at(occurred_at);
        if let Some(entity_id) = body.id("/data/id") {
            let kind = event_type.split('.').next().unwrap_or(&event_type);
            let version = body
                .rfc3339_millis("/data/updated_at")
                .or_else(|| body.rfc3339_millis("/occurred_at"));
            event = event
                .resource(kind, entity_id)
                .version(version)
                .deleted(event_type.ends_with(".deleted"));
        }
        Ok(event)
    }
}

hookhost_plugin_sdk::export_provider!(Paddle);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/paddle";

    fn plan(header: &str) -> Result<Plan, Rejection> {
        let req = RequestBuilder::post(URL)
            .header("Paddle-Signature", header)
            .body(r#"{"notification_id":"ntf_1"}"#)
            .build();
        Paddle::plan_verification(&req)
    }

    #[test]
    fn plan_signs_ts_colon_body_and_keeps_every_hex_h1() {
        let plan = plan("ts=1700000000;h1=dummy;h1=00ff; h1=0102").expect("plan");
        assert_eq!(
            plan.message,
            vec![Part::Text("1700000000:".into()), Part::Body]
        );
        assert_eq!(plan.timestamp, Some(1_700_000_000));
        assert_eq!(
            plan.candidates,
            vec![
                Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff]),
                Candidate::new(Algorithm::HmacSha256, vec![0x01, 0x02]),
            ]
        );
        assert_eq!(plan.message_id.as_deref(), Some("ntf_1"));
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("{}").build();
        assert!(matches!(
            Paddle::plan_verification(&none),
            Err(Rejection::MissingSignature(_))
        ));
        assert!(matches!(
            plan("ts=1700000000"),
            Err(Rejection::MissingSignature(_))
        ));
        for bad in ["h1=00ff", "ts=soon;h1=00ff", "ts=1700000000;h1=zz"] {
            assert!(
                matches!(plan(bad), Err(Rejection::MalformedSignature(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn event_maps_ids_times_and_entity() {
        let req = RequestBuilder::post(URL)
            .body(
                r#"{"event_id":"evt_1","event_type":"subscription.updated",
                    "occurred_at":"2024-04-12T10:18:49.621022Z","notification_id":"ntf_1",
                    "data":{"id":"sub_1","updated_at":"2024-04-12T10:18:48.5Z"}}"#,
            )
            .build();
        let event = Paddle::describe_event(&req).expect("event");
        assert_eq!(event.id.as_deref(), Some("evt_1"));
        assert_eq!(event.event_type, "subscription.updated");
        assert_eq!(event.occurred_at, Some(1_712_917_129));
        assert_eq!(event.resource_kind.as_deref(), Some("subscription"));
        assert_eq!(event.resource_id.as_deref(), Some("sub_1"));
        assert_eq!(event.resource_version, Some(1_712_917_128_500));
        assert!(!event.deleted);

        let deleted = RequestBuilder::post(URL)
            .body(
                r#"{"event_id":"evt_2","event_type":"payment_method.deleted",
                    "occurred_at":"2024-04-12T10:18:49Z","data":{"id":"paymtd_1"}}"#,
            )
            .build();
        let deleted = Paddle::describe_event(&deleted).expect("deleted");
        assert!(deleted.deleted);
        assert_eq!(deleted.resource_version, Some(1_712_917_129_000));
    }

    #[test]
    fn bodies_without_event_fields_are_malformed() {
        for body in [
            "hello-world",
            r#"{"event_type":"x"}"#,
            r#"{"event_id":"e"}"#,
        ] {
            let req = RequestBuilder::post(URL).body(body).build();
            assert!(matches!(
                Paddle::describe_event(&req),
                Err(Rejection::MalformedBody(_))
            ));
        }
    }
}
