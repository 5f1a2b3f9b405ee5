//! Coinbase Commerce: `X-CC-Webhook-Signature: <hex>`.
//!
//! The signed message is the raw body alone, HMAC-SHA256 keyed by the endpoint's shared
//! webhook secret used verbatim (UTF-8), the digest in lowercase hex. Nothing is
//! timestamped, so there is no replay window. Sources:
//! - <https://docs.cdp.coinbase.com/commerce/api-arcitecture/webhooks-security> and
//!   `.../webhooks-overview` **[docs]**: "the SHA256 HMAC signature of the raw request
//!   payload, computed using your webhook shared secret as the key"; answer 200, else
//!   retried "with an exponential backoff for up to three days", at most 1 hour apart.
//! - pip `coinbase-commerce` 1.0.1 `coinbase_commerce/webhook.py` **[sdk]**:
//!   `hmac.new(secret.encode('utf-8'), payload.encode('utf-8'), sha256).hexdigest()`,
//!   compared with the header; its README reads `X-CC-Webhook-Signature`; its test
//!   `tests/test_webhook.py` carries a published vector (used by hookhost's vectors).
//!
//! Coinbase documents one shared secret per account and no rotation; a replaced secret
//! is handled by keeping both in the endpoint's secrets while deliveries drain.
//!
//! Event (`.../webhooks-fields` **[docs]**, SDK test payload **[sdk]**): the body is
//! `{id, scheduled_for, attempt_number, event: {id, type, api_version, created_at,
//! data}}`. id = `event.id`, type = `event.type` (`charge:confirmed`), occurred_at =
//! `event.created_at`. The resource kind is the type before `:` (`charge`), its id
//! `event.data.id` (older payloads carry only `event.data.code`, used then), version =
//! `event.created_at` in unix millis; a type ending in `:deleted` marks it deleted (no
//! such type is documented today). The top-level `id` identifies the delivery, not the
//! event, and is not used.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    decode,
};

pub struct CoinbaseCommerce;

impl Provider for CoinbaseCommerce {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "coinbase-commerce".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Coinbase Commerce".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "answer 200 to acknowledge; otherwise retried with exponential \
                              backoff for up to three days, at most 1 hour between attempts \
                              (attempt_number in the body counts them)"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header("x-cc-webhook-signature")?;
        Ok(Plan {
            message: vec![Part::Body],
            candidates: vec![Candidate::new(Algorithm::HmacSha256, decode::hex(header)?)],
            timestamp: None,
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let id = body.required_str("/event/id")?;
        let event_type = body.required_str("/event/type")?;
        let mut event = Event::new(event_type.as_ref())
            .id(id)
            .occurred_at(body.rfc3339("/event/created_at"));
        let resource_id = body
            .id("/event/data/id")
            .or_else(|| body.id("/event/data/code"));
        if let Some(resource_id) = resource_id {
            let kind = event_type.split(':').next().unwrap_or(&event_type);
            event = event
                .resource(kind, resource_id)
                .version(body.rfc3339_millis("/event/created_at"))
                .deleted(event_type.ends_with(":deleted"));
        }
        Ok(event)
    }
}

hookhost_plugin_sdk::export_provider!(CoinbaseCommerce);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/coinbase-commerce";

    #[test]
    fn plan_signs_the_body_with_hex_hmac() {
        for name in ["X-CC-Webhook-Signature", "x-cc-webhook-signature"] {
            let req = RequestBuilder::post(URL)
                .header(name, "00FF")
                .body("{}")
                .build();
            let plan = CoinbaseCommerce::plan_verification(&req).expect("plan");
            assert_eq!(plan.message, vec![Part::Body]);
            assert_eq!(
                plan.candidates,
                vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
            );
            assert_eq!(plan.timestamp, None);
        }
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("{}").build();
        assert_eq!(
            CoinbaseCommerce::plan_verification(&none),
            Err(Rejection::MissingSignature("x-cc-webhook-signature".into()))
        );
        for bad in ["sha256=00ff", "AP8=", "0"] {
            let req = RequestBuilder::post(URL)
                .header("X-CC-Webhook-Signature", bad)
                .build();
            assert!(
                matches!(
                    CoinbaseCommerce::plan_verification(&req),
                    Err(Rejection::MalformedSignature(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn event_maps_the_nested_event() {
        let req = RequestBuilder::post(URL)
            .body(
                r#"{"id":"d7d1fe33-0b1f-4c54-8e05-3d31f4e7f0a1","attempt_number":2,
                    "event":{"id":"24934862-d980-46cb-9402-43c81b0cdba6","type":"charge:confirmed",
                    "created_at":"2024-06-12T18:40:04Z",
                    "data":{"id":"2aee9dd1-67b8-43ef-8dfe-977959850f27","code":"XA6G6ZFR"}}}"#,
            )
            .build();
        let event = CoinbaseCommerce::describe_event(&req).expect("event");
        assert_eq!(
            event.id.as_deref(),
            Some("24934862-d980-46cb-9402-43c81b0cdba6")
        );
        assert_eq!(event.event_type, "charge:confirmed");
        assert_eq!(event.occurred_at, Some(1_718_217_604));
        assert_eq!(event.resource_kind.as_deref(), Some("charge"));
        assert_eq!(
            event.resource_id.as_deref(),
            Some("2aee9dd1-67b8-43ef-8dfe-977959850f27")
        );
        assert_eq!(event.resource_version, Some(1_718_217_604_000));
        assert!(!event.deleted);
    }

    #[test]
    fn older_payloads_use_the_charge_code_and_bad_bodies_are_rejections() {
        let code_only = RequestBuilder::post(URL)
            .body(r#"{"event":{"id":"e1","type":"charge:created","data":{"code":"66BEOV2A"}}}"#)
            .build();
        let event = CoinbaseCommerce::describe_event(&code_only).expect("event");
        assert_eq!(event.resource_id.as_deref(), Some("66BEOV2A"));
        assert_eq!(event.occurred_at, None);
        for bad in [
            "nope",
            r#"{"id":1,"attempt_number":1}"#,
            r#"{"event":{"id":"e1"}}"#,
            r#"{"event":{"type":"charge:created"}}"#,
        ] {
            let req = RequestBuilder::post(URL).body(bad).build();
            assert!(
                matches!(
                    CoinbaseCommerce::describe_event(&req),
                    Err(Rejection::MalformedBody(_))
                ),
                "{bad}"
            );
        }
    }
}
