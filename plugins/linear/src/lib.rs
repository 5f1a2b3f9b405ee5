//! Linear: `Linear-Signature: <hex>`, HMAC-SHA256 of the raw body keyed by the webhook's
//! signing secret used verbatim (UTF-8).
//!
//! The time is signed inside the body: `webhookTimestamp`, unix milliseconds. The official
//! client refuses a body without it and allows 60 s either way (`Math.abs(Date.now() -
//! webhookTimestamp) > 60000`); the legacy `Linear-Timestamp` header is ignored because it
//! is not signed (SDK: @linear/sdk 98.0.0 `LinearWebhookClient.verify`; docs:
//! <https://linear.app/developers/webhooks>, "Securing webhooks"). Milliseconds are
//! floored to seconds for the host's window, so the 60 s edge moves by under a second.
//!
//! Event (Linear's data-change payload, docs: same page): type = `{type}.{action}`
//! (`Issue.create`, `Comment.remove`, `OAuthApp.revoked`); id = the `Linear-Delivery`
//! header **[2nd]** (a UUID per delivery; whether retries keep it is **[unconfirmed]**),
//! none without it. occurred_at = `createdAt`, else the webhook time. The resource is
//! `data`: kind = `type`, id = `data.id`, version = `data.updatedAt` in unix millis;
//! `action == "remove"` marks it deleted.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, Json, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection,
    Request, decode,
};

const SIGNATURE: &str = "linear-signature";
const DELIVERY: &str = "linear-delivery";
const TIMESTAMP_FIELD: &str = "/webhookTimestamp";

pub struct Linear;

impl Provider for Linear {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "linear".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Linear".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: Some(60),
            retry_behaviour: "retry schedule unconfirmed; answer 200 quickly".into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let signature = decode::hex(req.signature_header(SIGNATURE)?)?;
        let body = req.json()?;
        Ok(Plan {
            message: vec![Part::Body],
            candidates: vec![Candidate::new(Algorithm::HmacSha256, signature)],
            // Absent: the host refuses the request as unsigned in time (missing_signature).
            timestamp: webhook_millis(&body)?.map(|ms| ms.div_euclid(1000)),
            message_id: delivery(req),
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let kind = body.required_str("/type")?;
        let action = body.required_str("/action")?;
        let occurred_at = body
            .rfc3339("/createdAt")
            .or(webhook_millis(&body)?.map(|ms| ms.div_euclid(1000)));
        let mut event = Event::new(format!("{kind}.{action}"))
            .maybe_id(delivery(req))
            .occurred_at(occurred_at);
        if let Some(id) = body.id("/data/id") {
            event = event
                .resource(kind.as_ref(), id)
                .version(body.rfc3339_millis("/data/updatedAt"))
                .deleted(action == "remove");
        }
        Ok(event)
    }
}

/// `webhookTimestamp` in unix milliseconds; present but not a number → malformed.
fn webhook_millis(body: &Json) -> Result<Option<i64>, Rejection> {
    let Some(raw) = body.raw(TIMESTAMP_FIELD) else {
        return Ok(None);
    };
    let not_millis =
        || Rejection::MalformedSignature("webhookTimestamp is not unix milliseconds".into());
    if let Ok(ms) = raw.parse::<i64>() {
        return Ok(Some(ms));
    }
    // A JSON number with a fraction or exponent; strings are refused as the SDK does.
    let ms = raw.parse::<f64>().map_err(|_| not_millis())?;
    if !ms.is_finite() || ms.abs() > 9.0e15 {
        return Err(not_millis());
    }
    Ok(Some(decode::floor(ms)))
}

fn delivery(req: &Request) -> Option<String> {
    req.header_str(DELIVERY)
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(str::to_owned)
}

hookhost_plugin_sdk::export_provider!(Linear);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/linear";

    fn req(signature: Option<&str>, body: &str) -> Request {
        let mut builder = RequestBuilder::post(URL)
            .header("Linear-Delivery", "234d1a4e-b617-4388-90fe-adc3633d6b72")
            .header("Linear-Event", "Issue");
        if let Some(signature) = signature {
            builder = builder.header("Linear-Signature", signature);
        }
        builder.body(body).build()
    }

    #[test]
    fn plan_signs_the_body_and_reads_the_signed_timestamp() {
        let plan =
            Linear::plan_verification(&req(Some("00ff"), r#"{"webhookTimestamp":1718217605999}"#))
                .expect("plan");
        assert_eq!(plan.message, vec![Part::Body]);
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
        assert_eq!(plan.timestamp, Some(1_718_217_605));
        assert_eq!(
            plan.message_id.as_deref(),
            Some("234d1a4e-b617-4388-90fe-adc3633d6b72")
        );
        let fraction =
            Linear::plan_verification(&req(Some("00"), r#"{"webhookTimestamp":1.7182176e12}"#))
                .expect("fraction");
        assert_eq!(fraction.timestamp, Some(1_718_217_600));
        let none = Linear::plan_verification(&req(Some("00"), "{}")).expect("no timestamp");
        assert_eq!(none.timestamp, None);
    }

    #[test]
    fn missing_and_malformed_input_are_rejections() {
        assert!(matches!(
            Linear::plan_verification(&req(None, "{}")),
            Err(Rejection::MissingSignature(_))
        ));
        for (signature, body) in [
            ("sha256=00", "{}"),
            ("zz", "{}"),
            ("00", r#"{"webhookTimestamp":"1718217605999"}"#),
            ("00", r#"{"webhookTimestamp":1e400}"#),
        ] {
            assert!(
                matches!(
                    Linear::plan_verification(&req(Some(signature), body)),
                    Err(Rejection::MalformedSignature(_) | Rejection::MalformedBody(_))
                ),
                "{signature} {body}"
            );
        }
        assert!(matches!(
            Linear::plan_verification(&req(Some("00"), "not json")),
            Err(Rejection::MalformedBody(_))
        ));
    }

    #[test]
    fn event_maps_type_action_and_data() {
        let event = Linear::describe_event(&req(
            None,
            r#"{"action":"remove","type":"Comment","createdAt":"2024-06-12T18:40:04.512Z",
                "data":{"id":"c-1","updatedAt":"2024-06-12T18:40:04.498Z"},
                "webhookTimestamp":1718217605123}"#,
        ))
        .expect("event");
        assert_eq!(
            event.id.as_deref(),
            Some("234d1a4e-b617-4388-90fe-adc3633d6b72")
        );
        assert_eq!(event.event_type, "Comment.remove");
        assert_eq!(event.occurred_at, Some(1_718_217_604));
        assert_eq!(event.resource_kind.as_deref(), Some("Comment"));
        assert_eq!(event.resource_id.as_deref(), Some("c-1"));
        assert_eq!(event.resource_version, Some(1_718_217_604_498));
        assert!(event.deleted);

        let revoked = RequestBuilder::post(URL)
            .body(r#"{"action":"revoked","type":"OAuthApp","webhookTimestamp":1718217605123}"#)
            .build();
        let revoked = Linear::describe_event(&revoked).expect("revoked");
        assert_eq!(revoked.id, None);
        assert_eq!(revoked.occurred_at, Some(1_718_217_605));
        assert_eq!(revoked.resource_id, None);
        assert!(matches!(
            Linear::describe_event(&req(None, r#"{"type":"Issue"}"#)),
            Err(Rejection::MalformedBody(_))
        ));
    }
}
