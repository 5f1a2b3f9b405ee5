//! Square: `x-square-hmacsha256-signature: <base64>`.
//!
//! The signed message is the subscription's notification URL, exactly as configured in
//! Square, followed by the raw body; HMAC-SHA256 keyed by the subscription's signature key
//! used verbatim (UTF-8), standard base64 digest (docs:
//! <https://developer.squareup.com/docs/webhooks/step3validate>; SDK: squareup 46.0.0
//! `square/utils/webhooks_helper.py` `verify_signature`, `notification_url + request_body`,
//! and the same helper in Square's Node, Go, Java, PHP and Ruby SDKs with shared test
//! values). The legacy `x-square-signature` (HMAC-SHA1 of the same message, base64) is
//! checked only when the SHA-256 header is absent **[2nd]**. Nothing is timestamped, so
//! there is no replay window; `event_id` is the dedupe key.
//!
//! The URL: by default the public URL the sender addressed (hookhost's `public_url` plus
//! path and query as received); that is Square's notification URL when the subscription was
//! set up with the address hookhost publishes. When they differ (a proxy rewrites the path,
//! a different host name), set the plugin configuration `{"notification_url": "<the URL
//! configured in Square>"}`: that text is then signed instead.
//!
//! Event (docs: <https://developer.squareup.com/docs/webhooks/overview>): id = `event_id`,
//! type = `type` (`payment.updated`), occurred_at = `created_at`. The resource is `data`:
//! kind = `data.type`, id = `data.id`, version = the object's `version` (Square's optimistic
//! concurrency counter) when present, else its `updated_at` in unix millis; deleted when
//! `data.deleted` is true or the type ends with `.deleted`. The object is `data.object`'s
//! member named by the kind (`payment`), or, for the order events, by the event's name
//! (`order.updated` → `order_updated`, `order.fulfillment.updated` →
//! `order_fulfillment_updated`; reference: developer.squareup.com/reference/square/webhooks,
//! objects `OrderUpdatedObject` and the like). `webhooks.test_notification` is stored but
//! ignored.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, ConfigError, EndpointFacts, Event, KeyFormat, Part, Plan, PluginInfo,
    Provider, Rejection, Request, decode, serde_json::Value,
};

const SIGNATURE: &str = "x-square-hmacsha256-signature";
const LEGACY_SIGNATURE: &str = "x-square-signature";
/// Plugin configuration key overriding the signed notification URL.
const NOTIFICATION_URL: &str = "notification_url";
const TEST_NOTIFICATION: &str = "webhooks.test_notification";

pub struct Square;

impl Provider for Square {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "square".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Square".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "answer 2xx within 10 s; failed notifications are retried with \
                              exponential backoff for up to 24 hours (another version of \
                              Square's docs says 72 hours), same event_id"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256, Algorithm::HmacSha1]
    }

    fn check_config(config: &Value) -> Result<EndpointFacts, ConfigError> {
        configured_url(config)?;
        Ok(EndpointFacts::default())
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let candidate = if let Some(header) = req.optional_signature_header(SIGNATURE)? {
            Candidate::new(Algorithm::HmacSha256, decode::base64(header)?)
        } else if let Some(header) = req.optional_signature_header(LEGACY_SIGNATURE)? {
            Candidate::new(Algorithm::HmacSha1, decode::base64(header)?)
        } else {
            return Err(Rejection::MissingSignature(SIGNATURE.into()));
        };
        Ok(Plan {
            message: vec![notification_url(req)?, Part::Body],
            candidates: vec![candidate],
            timestamp: None,
            message_id: req
                .json()
                .ok()
                .and_then(|body| body.str("/event_id").map(|id| id.into_owned())),
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let id = body.required_str("/event_id")?;
        let event_type = body.required_str("/type")?;
        let created = body.rfc3339("/created_at");
        let mut event = Event::new(event_type.as_ref()).id(id).occurred_at(created);
        if let (Some(kind), Some(object_id)) = (body.str("/data/type"), body.id("/data/id")) {
            let named = [kind.to_string(), event_type.replace('.', "_")];
            let version = named.iter().find_map(|name| {
                let object = format!("/data/object/{name}");
                body.u64(&format!("{object}/version"))
                    .or_else(|| body.rfc3339_millis(&format!("{object}/updated_at")))
            });
            let deleted = body.get("/data/deleted") == Some(Value::Bool(true))
                || event_type.ends_with(".deleted");
            event = event
                .resource(kind.as_ref(), object_id)
                .version(version)
                .deleted(deleted);
        }
        if event_type == TEST_NOTIFICATION {
            event = event.ignore("test notification");
        }
        Ok(event)
    }
}

/// The notification URL Square signed: the configured override, else the addressed URL.
fn notification_url(req: &Request) -> Result<Part, Rejection> {
    Ok(match configured_url(req.config())? {
        Some(url) => Part::Text(url.into()),
        None => Part::Url,
    })
}

/// The plugin configuration: `notification_url`, when set, a non-empty string.
fn configured_url(config: &Value) -> Result<Option<&str>, ConfigError> {
    match ConfigError::only_keys(config, &[NOTIFICATION_URL])?.get(NOTIFICATION_URL) {
        None => Ok(None),
        Some(Value::String(url)) if !url.is_empty() => Ok(Some(url)),
        Some(_) => Err(ConfigError::new(
            NOTIFICATION_URL,
            "must be a non-empty string: the URL configured in Square",
        )),
    }
}

hookhost_plugin_sdk::export_provider!(Square);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::serde_json::json;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/square";

    #[test]
    fn plan_signs_url_then_body_with_sha256() {
        let req = RequestBuilder::post(URL)
            .header("x-square-hmacsha256-signature", "AP8=")
            .header("x-square-signature", "AQI=")
            .body(r#"{"event_id":"e-1"}"#)
            .build();
        let plan = Square::plan_verification(&req).expect("plan");
        assert_eq!(plan.message, vec![Part::Url, Part::Body]);
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
        assert_eq!(plan.timestamp, None);
        assert_eq!(plan.message_id.as_deref(), Some("e-1"));
    }

    #[test]
    fn legacy_sha1_only_when_sha256_is_absent() {
        let req = RequestBuilder::post(URL)
            .header("X-Square-Signature", "AQI=")
            .build();
        let plan = Square::plan_verification(&req).expect("plan");
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha1, vec![0x01, 0x02])]
        );
    }

    #[test]
    fn configured_notification_url_is_signed_instead() {
        let req = |config| {
            RequestBuilder::post(URL)
                .header("x-square-hmacsha256-signature", "AP8=")
                .config(config)
                .build()
        };
        let plan =
            Square::plan_verification(&req(json!({"notification_url": "https://a.example/sq"})))
                .expect("plan");
        assert_eq!(
            plan.message,
            vec![Part::Text("https://a.example/sq".into()), Part::Body]
        );
        for bad in [
            json!({"notification_url": 7}),
            json!({"notification_url": ""}),
        ] {
            assert!(matches!(
                Square::plan_verification(&req(bad)),
                Err(Rejection::Unsupported(_))
            ));
        }
    }

    #[test]
    fn configuration_is_checked_at_load_naming_the_key() {
        assert_eq!(
            Square::check_config(&json!({})),
            Ok(EndpointFacts::default())
        );
        assert_eq!(
            Square::check_config(&json!({"notification_url": "https://a.example/sq"})),
            Ok(EndpointFacts::default())
        );
        for (bad, key) in [
            (json!({"notification_url": 7}), "notification_url"),
            (json!({"notification_url": ""}), "notification_url"),
            (
                json!({"notification_uri": "https://a.example/sq"}),
                "notification_uri",
            ),
        ] {
            assert_eq!(Square::check_config(&bad).expect_err("refused").key, key);
        }
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("{}").build();
        assert!(matches!(
            Square::plan_verification(&none),
            Err(Rejection::MissingSignature(_))
        ));
        let hex = RequestBuilder::post(URL)
            .header("x-square-hmacsha256-signature", "sha256=00ff")
            .build();
        assert!(matches!(
            Square::plan_verification(&hex),
            Err(Rejection::MalformedSignature(_))
        ));
    }

    fn describe(body: &str) -> Result<Event, Rejection> {
        Square::describe_event(&RequestBuilder::post(URL).body(body).build())
    }

    #[test]
    fn event_maps_data_object_and_version() {
        let event = describe(
            r#"{"merchant_id":"M1","type":"payment.updated","event_id":"e-1",
                "created_at":"2024-06-12T18:40:03.5Z","data":{"type":"payment","id":"p-1",
                "object":{"payment":{"id":"p-1","version":4,"updated_at":"2024-06-12T18:40:02Z"}}}}"#,
        )
        .expect("event");
        assert_eq!(event.id.as_deref(), Some("e-1"));
        assert_eq!(event.event_type, "payment.updated");
        assert_eq!(event.occurred_at, Some(1_718_217_603));
        assert_eq!(event.resource_kind.as_deref(), Some("payment"));
        assert_eq!(event.resource_id.as_deref(), Some("p-1"));
        assert_eq!(event.resource_version, Some(4));
        assert!(!event.deleted);

        let updated_at = describe(
            r#"{"type":"invoice.updated","event_id":"e-2","data":{"type":"invoice","id":"i-1",
                "object":{"invoice":{"updated_at":"1970-01-01T00:00:01.25Z"}}}}"#,
        )
        .expect("event");
        assert_eq!(updated_at.resource_version, Some(1250));

        let deleted = describe(
            r#"{"type":"customer.deleted","event_id":"e-3","data":{"type":"customer",
                "id":"c-1","deleted":true}}"#,
        )
        .expect("event");
        assert!(deleted.deleted);
        assert_eq!(deleted.resource_version, None);
    }

    #[test]
    fn an_order_event_is_versioned_by_the_object_named_after_the_event() {
        for (event_type, member) in [
            ("order.created", "order_created"),
            ("order.updated", "order_updated"),
            ("order.fulfillment.updated", "order_fulfillment_updated"),
        ] {
            let event = describe(&format!(
                r#"{{"type":"{event_type}","event_id":"e-5","data":{{"type":"order","id":"o-1",
                    "object":{{"{member}":{{"order_id":"o-1","state":"OPEN","version":7,
                    "updated_at":"2020-04-16T23:14:26.359Z"}}}}}}}}"#
            ))
            .expect("event");
            assert_eq!(event.resource_kind.as_deref(), Some("order"));
            assert_eq!(event.resource_version, Some(7), "{event_type}");
        }
        // An order not made through the Orders API has no version: its update time.
        let unversioned = describe(
            r#"{"type":"order.updated","event_id":"e-6","data":{"type":"order","id":"o-2",
                "object":{"order_updated":{"updated_at":"1970-01-01T00:00:02.5Z"}}}}"#,
        )
        .expect("event");
        assert_eq!(unversioned.resource_version, Some(2500));
    }

    #[test]
    fn test_notifications_are_ignored_and_bad_bodies_rejected() {
        let test = describe(
            r#"{"type":"webhooks.test_notification","event_id":"e-4",
                "data":{"type":"webhooks","id":"w-1"}}"#,
        )
        .expect("event");
        assert_eq!(
            test.disposition,
            hookhost_plugin_sdk::Disposition::Ignore("test notification".into())
        );
        for bad in ["nope", r#"{"type":"x"}"#, r#"{"event_id":"e"}"#] {
            assert!(matches!(describe(bad), Err(Rejection::MalformedBody(_))));
        }
    }
}
