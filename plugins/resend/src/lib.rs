//! Resend: Svix-signed webhooks (`svix-id`, `svix-timestamp`, `svix-signature`).
//!
//! Resend's webhooks are delivered by Svix, so verification is the Svix scheme (shared
//! with the `svix` plugin, see `plugins/svix/src/scheme.rs`): `{svix-id}.{svix-timestamp}.
//! {raw body}`, HMAC-SHA256 keyed by the base64 after the endpoint's `whsec_` signing
//! secret, `v1,<base64>` signatures space-separated, ±300 s window.
//!
//! Event, from the payload Resend documents (`type`, `created_at` RFC 3339, `data`):
//! id = `svix-id` (the Svix message id, constant across retries; the body carries no
//! event id), type = body `type`, occurred_at = body `created_at`. The resource is named
//! by the type's first segment: `email.*` → (`email`, `data.email_id`), `contact.*` /
//! `domain.*` and any other → (that segment, `data.id`). Version: `data.updated_at`
//! (RFC 3339 → unix ms) when present (contacts), else the event's `created_at` in unix
//! ms (email events carry no update time; their event time orders sent → delivered →
//! opened). A type ending in `.deleted` marks the resource deleted.
//!
//! Sources: event types and payloads https://resend.com/docs/dashboard/webhooks/event-types
//! and https://resend.com/docs/webhooks/contacts/created **[docs]**; verification with the
//! Svix headers https://resend.com/docs/webhooks/verify-webhooks-requests **[docs]**;
//! retry schedule https://resend.com/docs/webhooks/retries-and-replays **[docs]**.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

#[path = "../../svix/src/scheme.rs"]
mod svix;

use hookhost_plugin_sdk::{Algorithm, Event, Plan, PluginInfo, Provider, Rejection, Request};

pub struct Resend;

impl Provider for Resend {
    fn info() -> PluginInfo {
        svix::info(
            "resend",
            "Resend",
            "through Svix: immediately, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h \
             (same svix-id on every attempt); failed and succeeded messages can be \
             replayed from the Resend dashboard",
        )
    }

    fn algorithms() -> Vec<Algorithm> {
        svix::algorithms()
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        svix::plan(req)
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let event_type = body.required_str("/type")?;
        let mut event = Event::new(event_type.as_ref())
            .maybe_id(svix::message_id(req))
            .occurred_at(body.rfc3339("/created_at"));
        let kind = event_type.split('.').next().unwrap_or("");
        let id_pointer = if kind == "email" {
            "/data/email_id"
        } else {
            "/data/id"
        };
        if let Some(id) = body.id(id_pointer).filter(|_| !kind.is_empty()) {
            let version = body
                .rfc3339_millis("/data/updated_at")
                .or_else(|| body.rfc3339_millis("/created_at"));
            event = event
                .resource(kind, id)
                .version(version)
                .deleted(event_type.ends_with(".deleted"));
        }
        Ok(event)
    }
}

hookhost_plugin_sdk::export_provider!(Resend);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;
    use hookhost_plugin_sdk::{KeyFormat, Part};

    const URL: &str = "https://hooks.example.com/webhooks/resend";

    fn request(body: &str) -> Request {
        RequestBuilder::post(URL)
            .header("svix-id", "msg_2cUgTnCqE1rwEPh2NdvEZLbSo3M")
            .header("svix-timestamp", "1708645273")
            .header("svix-signature", "v1,AP8= v1,AQI=")
            .body(body)
            .build()
    }

    #[test]
    fn verification_is_the_svix_scheme() {
        let plan = Resend::plan_verification(&request("{}")).expect("plan");
        assert_eq!(plan.message[2], Part::Header("svix-timestamp".into()));
        assert_eq!(plan.candidates.len(), 2);
        assert_eq!(plan.timestamp, Some(1_708_645_273));
        let info = Resend::info();
        assert_eq!(info.name, "resend");
        assert_eq!(
            info.key_formats,
            vec![KeyFormat::Base64AfterPrefix("whsec_".into())]
        );
        assert_eq!(Resend::algorithms(), vec![Algorithm::HmacSha256]);
    }

    #[test]
    fn email_events_name_the_email_and_order_by_event_time() {
        let body = r#"{"type":"email.delivered","created_at":"2024-02-22T23:41:12.126Z",
            "data":{"created_at":"2024-02-22T23:41:11.894719+00:00",
            "email_id":"56761188-7520-42d8-8898-ff6fc54ce618","to":["delivered@resend.dev"]}}"#;
        let event = Resend::describe_event(&request(body)).expect("event");
        assert_eq!(event.id.as_deref(), Some("msg_2cUgTnCqE1rwEPh2NdvEZLbSo3M"));
        assert_eq!(event.event_type, "email.delivered");
        assert_eq!(event.occurred_at, Some(1_708_645_272));
        assert_eq!(event.resource_kind.as_deref(), Some("email"));
        assert_eq!(
            event.resource_id.as_deref(),
            Some("56761188-7520-42d8-8898-ff6fc54ce618")
        );
        assert_eq!(event.resource_version, Some(1_708_645_272_126));
        assert!(!event.deleted);
    }

    #[test]
    fn contact_events_use_updated_at_and_deletion() {
        let body = r#"{"type":"contact.deleted","created_at":"2024-10-11T23:47:56.678Z",
            "data":{"id":"e169aa45-1ecf-4183-9955-b1499d5701d3",
            "updated_at":"2024-10-11T23:47:56.600Z"}}"#;
        let event = Resend::describe_event(&request(body)).expect("event");
        assert_eq!(event.resource_kind.as_deref(), Some("contact"));
        assert_eq!(event.resource_version, Some(1_728_690_476_600));
        assert!(event.deleted);
    }

    #[test]
    fn bodies_without_a_resource_or_type() {
        let no_id =
            Resend::describe_event(&request(r#"{"type":"email.sent","data":{}}"#)).expect("event");
        assert_eq!(no_id.resource_id, None);
        for bad in [r#"{"data":{}}"#, "[1]", "not json"] {
            assert!(
                matches!(
                    Resend::describe_event(&request(bad)),
                    Err(Rejection::MalformedBody(_))
                ),
                "{bad}"
            );
        }
    }
}
