//! Shopify: `X-Shopify-Hmac-Sha256: <base64>` (the docs spell it `X-Shopify-Hmac-SHA256`;
//! header names are matched case-insensitively).
//!
//! The signed message is the raw body alone, HMAC-SHA256 keyed by the app's client
//! secret used verbatim (UTF-8), the digest in standard base64. Nothing is timestamped,
//! so there is no replay window; `X-Shopify-Webhook-Id` is the documented dedupe key.
//! After a client-secret rotation Shopify may sign with the old secret for up to an
//! hour: keep both secrets configured meanwhile.
//!
//! Event: id = `X-Shopify-Webhook-Id`, type = `X-Shopify-Topic` (`orders/create`);
//! either missing → `MalformedBody` (not what Shopify sends). occurred_at =
//! `X-Shopify-Triggered-At` (RFC 3339) when present. When the body is a JSON object
//! with an `id`, the resource is kind = the topic before `/`, id = body `id`, version =
//! body `updated_at` in unix millis, deleted when the topic ends with `/delete`. Other
//! bodies (XML subscriptions) are described from the headers alone.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    decode,
};

pub struct Shopify;

impl Provider for Shopify {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "shopify".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Shopify".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "1 s to connect, 5 s to answer; 8 retries over 4 hours; \
                              Admin-API subscriptions are deleted after 8 consecutive \
                              failures"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header("x-shopify-hmac-sha256")?;
        Ok(Plan {
            message: vec![Part::Body],
            candidates: vec![Candidate::new(
                Algorithm::HmacSha256,
                decode::base64(header)?,
            )],
            timestamp: None,
            message_id: req
                .header_str("x-shopify-webhook-id")
                .map(|id| id.trim().to_owned()),
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let id = req.required_header("x-shopify-webhook-id")?;
        let topic = req.required_header("x-shopify-topic")?;
        let triggered = req
            .header_str("x-shopify-triggered-at")
            .and_then(|t| decode::rfc3339_seconds(t.trim()));
        let mut event = Event::new(topic).id(id).occurred_at(triggered);
        if let Ok(body) = req.json()
            && let Some(resource_id) = body.id("/id")
        {
            let kind = topic.split('/').next().unwrap_or(topic);
            // The topic is not signed: an update's body sent again as `…/delete` must
            // not delete what it names. A deleted object has no state left to date, and
            // Shopify's delete payloads carry no `updated_at`; a body with one is not a
            // deletion, whatever the topic says.
            let version = body.rfc3339_millis("/updated_at");
            event = event
                .resource(kind, resource_id)
                .version(version)
                .deleted(topic.ends_with("/delete") && body.raw("/updated_at").is_none());
        }
        Ok(event)
    }
}

hookhost_plugin_sdk::export_provider!(Shopify);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/shopify";

    #[test]
    fn plan_signs_the_body_with_base64_hmac() {
        for name in [
            "X-Shopify-Hmac-SHA256",
            "x-shopify-hmac-sha256",
            "X-Shopify-Hmac-Sha256",
        ] {
            let req = RequestBuilder::post(URL)
                .header(name, "AP8=")
                .header(
                    "X-Shopify-Webhook-Id",
                    "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
                )
                .body("{}")
                .build();
            let plan = Shopify::plan_verification(&req).expect("plan");
            assert_eq!(plan.message, vec![Part::Body]);
            assert_eq!(
                plan.candidates,
                vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
            );
            assert_eq!(plan.timestamp, None);
            assert_eq!(
                plan.message_id.as_deref(),
                Some("b54557e4-bdd9-4b37-8a5f-bf7d70bcd043")
            );
        }
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("{}").build();
        assert!(matches!(
            Shopify::plan_verification(&none),
            Err(Rejection::MissingSignature(_))
        ));
        let hex = RequestBuilder::post(URL)
            .header("X-Shopify-Hmac-Sha256", "sha256=00ff")
            .build();
        assert!(matches!(
            Shopify::plan_verification(&hex),
            Err(Rejection::MalformedSignature(_))
        ));
    }

    fn delivery(topic: &str, body: &str) -> Request {
        RequestBuilder::post(URL)
            .header("X-Shopify-Webhook-Id", "w-1")
            .header("X-Shopify-Topic", topic)
            .header("X-Shopify-Triggered-At", "2024-01-01T00:00:00.123456Z")
            .body(body)
            .build()
    }

    #[test]
    fn event_maps_headers_and_body_resource() {
        let body = r#"{"id":820982911946154508,"updated_at":"2024-01-01T01:00:00-01:00"}"#;
        let event = Shopify::describe_event(&delivery("orders/updated", body)).expect("event");
        assert_eq!(event.id.as_deref(), Some("w-1"));
        assert_eq!(event.event_type, "orders/updated");
        assert_eq!(event.occurred_at, Some(1_704_067_200));
        assert_eq!(event.resource_kind.as_deref(), Some("orders"));
        assert_eq!(event.resource_id.as_deref(), Some("820982911946154508"));
        assert_eq!(event.resource_version, Some(1_704_074_400_000));
        assert!(!event.deleted);
    }

    #[test]
    fn only_a_body_without_updated_at_is_a_deletion() {
        let deleted = r#"{"id":820982911946154508}"#;
        let event = Shopify::describe_event(&delivery("orders/delete", deleted)).expect("event");
        assert_eq!((event.resource_version, event.deleted), (None, true));
        // An update's body sent again under the delete topic (the topic is not signed).
        let updated = r#"{"id":820982911946154508,"updated_at":"2024-01-01T01:00:00-01:00"}"#;
        let event = Shopify::describe_event(&delivery("orders/delete", updated)).expect("event");
        assert_eq!(event.event_type, "orders/delete");
        assert_eq!(
            (event.resource_version, event.deleted),
            (Some(1_704_074_400_000), false)
        );
    }

    #[test]
    fn non_json_bodies_use_headers_and_missing_headers_are_rejections() {
        let xml = Shopify::describe_event(&delivery("orders/create", "<order/>")).expect("xml");
        assert_eq!(xml.event_type, "orders/create");
        assert_eq!(xml.resource_id, None);
        let no_topic = RequestBuilder::post(URL)
            .header("X-Shopify-Webhook-Id", "w-1")
            .body("{}")
            .build();
        assert!(matches!(
            Shopify::describe_event(&no_topic),
            Err(Rejection::MalformedBody(_))
        ));
    }
}
