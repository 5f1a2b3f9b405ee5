//! Razorpay: `X-Razorpay-Signature: <hex>`, `X-Razorpay-Event-Id: <id>`.
//!
//! The signed message is the raw body alone, HMAC-SHA256 keyed by the webhook secret
//! (set by the user when creating the webhook; not the API key secret) used verbatim
//! (UTF-8), the digest in hex. Nothing is timestamped, so there is no replay window.
//! Sources:
//! - <https://razorpay.com/docs/webhooks/validate-test/> (razorpay/markdown-docs
//!   `webhooks/validate-test.md`) **[docs]**: "calculated using HMAC with SHA256
//!   algorithm; with your webhook secret set as the key and the webhook request body as
//!   the message"; "If you have changed your webhook secret, remember to use the old
//!   secret for webhook signature validation while retrying older requests" (keep both
//!   secrets configured); duplicates are recognised by `x-razorpay-event-id`, "unique
//!   per event".
//! - pip `razorpay` 2.0.1 `Utility.verify_webhook_signature` **[sdk]**:
//!   `hmac.new(key=bytes(secret, 'utf-8'), msg=body, digestmod=sha256).hexdigest()`;
//!   razorpay-python `tests/test_client_utility.py` carries a published vector.
//! - <https://razorpay.com/docs/webhooks/best-practices> **[docs]**: non-2xx answers are
//!   retried with exponential backoff for 24 hours after the event was created, then
//!   the webhook is disabled.
//!
//! Event: Razorpay signs no event id, so the plugin names none and the host derives one
//! from the signed message (`sha256:` + hex SHA-256 of the body). A retry carries the same
//! body, so it is the same event; so is a captured request sent again, however often and
//! under whatever `X-Razorpay-Event-Id`. That header is not signed and nothing else is
//! timestamped: as the id, a replay with a fresh header would be a new event, delivered
//! again, at any time. It is kept as the receipt's message id. Type = body `event`
//! (`payment.captured`); occurred_at = body `created_at` (unix seconds). The resource is the entity the event is about: the
//! segments of the event name before its last one are tried from the most specific
//! (`payment.dispute.created` → `dispute`, then `payment`), then the body's `contains`
//! list, and the first `payload.<name>.entity` with an `id` wins; kind = its `entity`
//! field (else the name). Version = body `created_at` (entities carry no update
//! counter); an event name ending in `.deleted` marks the resource deleted.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, Json, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection,
    Request, decode,
};

pub struct Razorpay;

impl Provider for Razorpay {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "razorpay".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Razorpay".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "any non-2xx answer is a failure; retried with exponential \
                              backoff for 24 hours after the event was created, after which \
                              the webhook is disabled until re-enabled in the Dashboard; \
                              duplicates carry the same X-Razorpay-Event-Id"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header("x-razorpay-signature")?;
        Ok(Plan {
            message: vec![Part::Body],
            candidates: vec![Candidate::new(Algorithm::HmacSha256, decode::hex(header)?)],
            timestamp: None,
            message_id: req
                .header_str("x-razorpay-event-id")
                .map(|id| id.trim().to_owned()),
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let event_type = body.required_str("/event")?;
        let created = body.i64("/created_at");
        let mut event = Event::new(event_type.as_ref()).occurred_at(created);
        if let Some((kind, resource_id)) = resource(&body, &event_type) {
            event = event
                .resource(kind, resource_id)
                .version(created.and_then(|c| u64::try_from(c).ok()))
                .deleted(event_type.ends_with(".deleted"));
        }
        Ok(event)
    }
}

/// How many `contains` entries are consulted; Razorpay lists one or two.
const MAX_CONTAINS: usize = 8;

/// The entity an event is about: (kind, id), or `None` when the payload names none.
fn resource(body: &Json, event_type: &str) -> Option<(String, String)> {
    let mut names: Vec<String> = event_type.split('.').map(str::to_owned).collect();
    names.pop(); // the last segment is the action (`captured`)
    names.reverse();
    for i in 0..MAX_CONTAINS {
        match body.str(&format!("/contains/{i}")) {
            Some(name) => names.push(name.into_owned()),
            None => break,
        }
    }
    names.iter().find_map(|name| {
        let entity = format!(
            "/payload/{}/entity",
            name.replace('~', "~0").replace('/', "~1")
        );
        let id = body.id(&format!("{entity}/id"))?;
        let kind = body
            .str(&format!("{entity}/entity"))
            .map_or_else(|| name.clone(), |k| k.into_owned());
        Some((kind, id))
    })
}

hookhost_plugin_sdk::export_provider!(Razorpay);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/razorpay";

    #[test]
    fn plan_signs_the_body_and_keeps_the_event_id() {
        let req = RequestBuilder::post(URL)
            .header("X-Razorpay-Signature", "00ff")
            .header("X-Razorpay-Event-Id", " HnBzsy5p1sE3Dv ")
            .body("{}")
            .build();
        let plan = Razorpay::plan_verification(&req).expect("plan");
        assert_eq!(plan.message, vec![Part::Body]);
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
        assert_eq!(plan.timestamp, None);
        assert_eq!(plan.message_id.as_deref(), Some("HnBzsy5p1sE3Dv"));
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("{}").build();
        assert_eq!(
            Razorpay::plan_verification(&none),
            Err(Rejection::MissingSignature("x-razorpay-signature".into()))
        );
        let bad = RequestBuilder::post(URL)
            .header("X-Razorpay-Signature", "test_signature")
            .build();
        assert!(matches!(
            Razorpay::plan_verification(&bad),
            Err(Rejection::MalformedSignature(_))
        ));
    }

    fn delivery(body: &str) -> Request {
        RequestBuilder::post(URL)
            .header("X-Razorpay-Event-Id", "HnBzsy5p1sE3Dv")
            .body(body)
            .build()
    }

    #[test]
    fn event_maps_type_and_payment_and_names_no_unsigned_id() {
        let body = r#"{"entity":"event","account_id":"acc_BFQ7uQEaa7j2z7","event":"payment.captured",
            "contains":["payment"],"payload":{"payment":{"entity":{"id":"pay_DESlfW9H8K9uqM",
            "entity":"payment","amount":100,"created_at":1567674599}}},"created_at":1567674606}"#;
        let event = Razorpay::describe_event(&delivery(body)).expect("event");
        // The host derives the id from the signed body: the header is not signed.
        assert_eq!(event.id, None);
        assert_eq!(event.event_type, "payment.captured");
        assert_eq!(event.occurred_at, Some(1_567_674_606));
        assert_eq!(event.resource_kind.as_deref(), Some("payment"));
        assert_eq!(event.resource_id.as_deref(), Some("pay_DESlfW9H8K9uqM"));
        assert_eq!(event.resource_version, Some(1_567_674_606));
        assert!(!event.deleted);
    }

    #[test]
    fn the_most_specific_entity_wins() {
        let order_paid = r#"{"event":"order.paid","contains":["payment","order"],"payload":{
            "payment":{"entity":{"id":"pay_1","entity":"payment"}},
            "order":{"entity":{"id":"order_1","entity":"order"}}},"created_at":1}"#;
        let event = Razorpay::describe_event(&delivery(order_paid)).expect("event");
        assert_eq!(event.resource_kind.as_deref(), Some("order"));
        assert_eq!(event.resource_id.as_deref(), Some("order_1"));
        let dispute = r#"{"event":"payment.dispute.created","contains":["payment","dispute"],
            "payload":{"payment":{"entity":{"id":"pay_1"}},"dispute":{"entity":{"id":"disp_1"}}}}"#;
        let event = Razorpay::describe_event(&delivery(dispute)).expect("event");
        assert_eq!(event.resource_kind.as_deref(), Some("dispute"));
        assert_eq!(event.resource_id.as_deref(), Some("disp_1"));
        assert_eq!(event.resource_version, None);
        let contains_only = r#"{"event":"virtual_account.credited","contains":["payment"],
            "payload":{"payment":{"entity":{"id":"pay_2","entity":"payment"}}}}"#;
        let event = Razorpay::describe_event(&delivery(contains_only)).expect("event");
        assert_eq!(event.resource_id.as_deref(), Some("pay_2"));
        let nothing = r#"{"event":"account.under_review","payload":{}}"#;
        let event = Razorpay::describe_event(&delivery(nothing)).expect("event");
        assert_eq!(event.resource_id, None);
    }

    #[test]
    fn an_event_without_the_id_header_is_described_alike() {
        let no_header = RequestBuilder::post(URL)
            .body(r#"{"event":"payment.captured","created_at":1}"#)
            .build();
        let event = Razorpay::describe_event(&no_header).expect("event");
        assert_eq!(event.id, None);
        assert_eq!(event.event_type, "payment.captured");
    }

    #[test]
    fn a_body_without_an_event_name_is_malformed() {
        for bad in ["nope", r#"{"entity":"event"}"#] {
            assert!(
                matches!(
                    Razorpay::describe_event(&delivery(bad)),
                    Err(Rejection::MalformedBody(_))
                ),
                "{bad}"
            );
        }
    }
}
