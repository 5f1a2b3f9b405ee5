//! Typeform: `Typeform-Signature: sha256=<base64>`.
//!
//! The signed message is the raw body alone, HMAC-SHA256 keyed by the webhook's secret
//! used verbatim (UTF-8), the digest in standard base64 behind a `sha256=` prefix
//! (https://www.typeform.com/developers/webhooks/secure-your-webhooks/: "create a hash
//! (using secret as a key) of the entire received payload as binary", "Encode the
//! binary hash in base64 format", "Add prefix sha256="). The secret is a string the
//! user sets on the webhook; nothing is timestamped, so there is no replay window, and
//! Typeform documents neither rotation nor a delivery-id header.
//!
//! Event (https://www.typeform.com/developers/webhooks/example-payload/): id =
//! `event_id`, type = `event_type` (`form_response`; other types pass through). The
//! resource is the response: kind `form_response`, id = `form_response.token`, version
//! = `form_response.submitted_at` in unix millis; occurred_at = `submitted_at` (else
//! `landed_at`). A body that is not JSON is `MalformedBody`.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    decode,
};

pub struct Typeform;

impl Provider for Typeform {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "typeform".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Typeform".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "30 s to answer; 404 or 410: no retry and the webhook is \
                              disabled; 408, 423, 429 or 503: retried every 2-3 minutes for \
                              10 hours; other failures: retried with back-off (exact \
                              schedule unconfirmed)"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header("typeform-signature")?;
        let signature = decode::base64(decode::strip_prefix(header, "sha256=")?)?;
        Ok(Plan {
            message: vec![Part::Body],
            candidates: vec![Candidate::new(Algorithm::HmacSha256, signature)],
            timestamp: None,
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let id = body.required_str("/event_id")?;
        let event_type = body.required_str("/event_type")?;
        let submitted = body.rfc3339("/form_response/submitted_at");
        let occurred = submitted.or_else(|| body.rfc3339("/form_response/landed_at"));
        let mut event = Event::new(event_type.as_ref()).id(id).occurred_at(occurred);
        if let Some(token) = body.str("/form_response/token") {
            event = event
                .resource("form_response", token)
                .version(body.rfc3339_millis("/form_response/submitted_at"));
        }
        Ok(event)
    }
}

hookhost_plugin_sdk::export_provider!(Typeform);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/typeform";

    #[test]
    fn plan_signs_the_body_with_a_base64_digest() {
        let req = RequestBuilder::post(URL)
            .header("Typeform-Signature", "sha256=AP8=")
            .body("{}")
            .build();
        let plan = Typeform::plan_verification(&req).expect("plan");
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
        assert!(matches!(
            Typeform::plan_verification(&none),
            Err(Rejection::MissingSignature(_))
        ));
        for bad in ["AP8=", "sha1=AP8=", "sha256=00ff*", "sha256=AP8"] {
            let req = RequestBuilder::post(URL)
                .header("Typeform-Signature", bad)
                .build();
            assert!(
                matches!(
                    Typeform::plan_verification(&req),
                    Err(Rejection::MalformedSignature(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn event_maps_the_form_response() {
        let req = RequestBuilder::post(URL)
            .body(
                r#"{"event_id":"01HZ","event_type":"form_response","form_response":{
                    "form_id":"lT4Z3j","token":"a3a12ec67a1365927098a606107fac15",
                    "landed_at":"2024-06-12T18:39:01Z","submitted_at":"2024-06-12T18:40:00.5Z"}}"#,
            )
            .build();
        let event = Typeform::describe_event(&req).expect("event");
        assert_eq!(event.id.as_deref(), Some("01HZ"));
        assert_eq!(event.event_type, "form_response");
        assert_eq!(event.occurred_at, Some(1_718_217_600));
        assert_eq!(event.resource_kind.as_deref(), Some("form_response"));
        assert_eq!(
            event.resource_id.as_deref(),
            Some("a3a12ec67a1365927098a606107fac15")
        );
        assert_eq!(event.resource_version, Some(1_718_217_600_500));
        assert!(!event.deleted);
    }

    #[test]
    fn bodies_without_ids_or_json_are_rejections() {
        for bad in [
            "payload=1",
            r#"{"event_type":"form_response"}"#,
            r#"{"event_id":"x"}"#,
        ] {
            let req = RequestBuilder::post(URL).body(bad).build();
            assert!(
                matches!(
                    Typeform::describe_event(&req),
                    Err(Rejection::MalformedBody(_))
                ),
                "{bad}"
            );
        }
        let partial = RequestBuilder::post(URL)
            .body(r#"{"event_id":"e","event_type":"form_response_partial","form_response":{"landed_at":"1970-01-01T00:01:00Z"}}"#)
            .build();
        let event = Typeform::describe_event(&partial).expect("partial");
        assert_eq!(event.occurred_at, Some(60));
        assert_eq!(event.resource_id, None);
    }
}
