//! Lemon Squeezy: `X-Signature: <hex>`, `X-Event-Name: <event>`.
//!
//! The signed message is the raw body alone, HMAC-SHA256 keyed by the webhook's signing
//! secret used verbatim (UTF-8), the digest in hex. Nothing is timestamped, so there is
//! no replay window. Sources:
//! - <https://docs.lemonsqueezy.com/help/webhooks/signing-requests> **[docs]**: the
//!   signing secret (chosen by the user, "normally a random string between 6 and 40
//!   characters") is used "to generate a hash of the payload and send the hash in the
//!   X-Signature header"; "Lemon Squeezy generates the hash using an HMAC hex digest".
//!   The page names no hash function; HMAC-SHA256 is what the page's code examples use
//!   as summarised by secondary sources **[2nd]**. The official SDK
//!   (`@lemonsqueezy/lemonsqueezy.js`) has no verification helper, so hookhost's vectors
//!   are computed.
//! - <https://docs.lemonsqueezy.com/help/webhooks/webhook-requests> **[docs]**: headers
//!   `Content-Type: application/json`, `X-Event-Name`, `X-Signature`; a `200` answer
//!   succeeds, anything else is "retried up to three more times using an exponential
//!   backoff strategy (e.g. 5 secs, 25 secs, 125 secs)".
//!
//! Lemon Squeezy documents no rotation: editing the secret switches at once, so keep the
//! old secret in the endpoint's secrets while in-flight retries drain.
//!
//! Event (JSON:API resource, same page and the developer guide's example **[docs]**):
//! type = body `meta.event_name` (signed), else the `X-Event-Name` header; neither →
//! `MalformedBody`. The resource is `data.type`/`data.id` (`orders`/`1`); its version is
//! `data.attributes.updated_at` in unix millis, and occurred_at that same time in
//! seconds (the payload carries no event time). The payload carries no event id and
//! Lemon Squeezy sends no delivery-id header, so the id is left to the host (the SHA-256
//! of the body; retries resend the same body). `meta.webhook_id` is seen in payloads
//! but its meaning (per event or per webhook) is **[unconfirmed]**, so it is not used.
//! No documented event deletes a resource.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    decode,
};

pub struct LemonSqueezy;

impl Provider for LemonSqueezy {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "lemon-squeezy".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Lemon Squeezy".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "a 200 answer succeeds; otherwise up to three more attempts with \
                              exponential backoff (e.g. 5 s, 25 s, 125 s); recent deliveries \
                              can be resent from the dashboard"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header("x-signature")?;
        Ok(Plan {
            message: vec![Part::Body],
            candidates: vec![Candidate::new(Algorithm::HmacSha256, decode::hex(header)?)],
            timestamp: None,
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let event_type = match body.str("/meta/event_name") {
            Some(name) => name.into_owned(),
            None => req.required_header("x-event-name")?.to_owned(),
        };
        let updated_at = "/data/attributes/updated_at";
        let mut event = Event::new(event_type).occurred_at(body.rfc3339(updated_at));
        if let (Some(kind), Some(id)) = (body.str("/data/type"), body.id("/data/id")) {
            event = event
                .resource(kind, id)
                .version(body.rfc3339_millis(updated_at));
        }
        Ok(event)
    }
}

hookhost_plugin_sdk::export_provider!(LemonSqueezy);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/lemon-squeezy";

    #[test]
    fn plan_signs_the_body_with_hex_hmac() {
        let req = RequestBuilder::post(URL)
            .header("X-Signature", "00ff")
            .header("X-Event-Name", "order_created")
            .body("{}")
            .build();
        let plan = LemonSqueezy::plan_verification(&req).expect("plan");
        assert_eq!(plan.message, vec![Part::Body]);
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
        assert_eq!(plan.timestamp, None);
        assert_eq!(plan.message_id, None);
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("{}").build();
        assert_eq!(
            LemonSqueezy::plan_verification(&none),
            Err(Rejection::MissingSignature("x-signature".into()))
        );
        let b64 = RequestBuilder::post(URL)
            .header("X-Signature", "AP8=")
            .build();
        assert!(matches!(
            LemonSqueezy::plan_verification(&b64),
            Err(Rejection::MalformedSignature(_))
        ));
    }

    #[test]
    fn event_maps_meta_and_the_json_api_resource() {
        let req = RequestBuilder::post(URL)
            .header("X-Event-Name", "subscription_updated")
            .body(
                r#"{"meta":{"event_name":"subscription_updated","custom_data":{"user_id":"42"}},
                    "data":{"type":"subscriptions","id":"1","attributes":{
                    "status":"active","updated_at":"2024-06-12T18:40:03.000000Z"}}}"#,
            )
            .build();
        let event = LemonSqueezy::describe_event(&req).expect("event");
        assert_eq!(event.id, None);
        assert_eq!(event.event_type, "subscription_updated");
        assert_eq!(event.occurred_at, Some(1_718_217_603));
        assert_eq!(event.resource_kind.as_deref(), Some("subscriptions"));
        assert_eq!(event.resource_id.as_deref(), Some("1"));
        assert_eq!(event.resource_version, Some(1_718_217_603_000));
        assert!(!event.deleted);
    }

    #[test]
    fn the_signed_event_name_wins_and_the_header_is_a_fallback() {
        let differ = RequestBuilder::post(URL)
            .header("X-Event-Name", "order_refunded")
            .body(r#"{"meta":{"event_name":"order_created"},"data":{"type":"orders","id":"7"}}"#)
            .build();
        let event = LemonSqueezy::describe_event(&differ).expect("event");
        assert_eq!(event.event_type, "order_created");
        assert_eq!(event.resource_version, None);
        let header_only = RequestBuilder::post(URL)
            .header("X-Event-Name", "order_created")
            .body(r#"{"data":{"type":"orders","id":"7"}}"#)
            .build();
        let event = LemonSqueezy::describe_event(&header_only).expect("event");
        assert_eq!(event.event_type, "order_created");
        let neither = RequestBuilder::post(URL)
            .body(r#"{"data":{"type":"orders","id":"7"}}"#)
            .build();
        assert!(matches!(
            LemonSqueezy::describe_event(&neither),
            Err(Rejection::MalformedBody(_))
        ));
        let not_json = RequestBuilder::post(URL)
            .header("X-Event-Name", "order_created")
            .body("order 7")
            .build();
        assert!(matches!(
            LemonSqueezy::describe_event(&not_json),
            Err(Rejection::MalformedBody(_))
        ));
    }
}
