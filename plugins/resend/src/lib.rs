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
//! `domain.*` and any other → (that segment, `data.id`). A type ending in `.deleted` marks
//! the resource deleted.
//!
//! Only the kinds in [`VERSIONED_KINDS`] carry a version: `contact.created/updated/
//! deleted` and `domain.created/updated/deleted` send the object as it now is, so a later
//! one supersedes an earlier one. Their version is `data.updated_at` (RFC 3339 → unix ms)
//! when present (contacts), else the event's `created_at` in unix ms (domains carry no
//! update time). Email events (`email.sent`, `delivered`, `delivery_delayed`, `opened`,
//! `clicked`, `bounced`, `complained`, …) are happenings, each worth delivering, not
//! states of the email: an email is opened and clicked any number of times, and Svix
//! retries for more than a day. With the event time as the version, a retry that arrived
//! after a later event of the same email would be `stale_version` and never delivered; so
//! they name the email without a version, and the host still delivers one email's events
//! one at a time, in arrival order. A kind this plugin does not know gets no version
//! either: without knowing that its events are states, none should be refused as stale.
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

/// Resource kinds whose events carry the object's new state, and so a version (crate docs).
pub const VERSIONED_KINDS: &[&str] = &["contact", "domain"];

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
            // States are versioned; happenings (email events) and unknown kinds are not.
            let version = if VERSIONED_KINDS.contains(&kind) {
                body.rfc3339_millis("/data/updated_at")
                    .or_else(|| body.rfc3339_millis("/created_at"))
            } else {
                None
            };
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
    fn email_events_name_the_email_without_a_version() {
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
        assert_eq!(event.resource_version, None);
        assert!(!event.deleted);
        // Every email event is a happening: a late retry of an earlier one is not stale.
        for kind in [
            "sent",
            "delivered",
            "delivery_delayed",
            "opened",
            "clicked",
            "bounced",
            "complained",
            "failed",
            "scheduled",
            "suppressed",
            "received",
        ] {
            let body = format!(
                r#"{{"type":"email.{kind}","created_at":"2024-02-22T23:41:12.126Z",
                    "data":{{"email_id":"56761188-7520-42d8-8898-ff6fc54ce618"}}}}"#
            );
            let event = Resend::describe_event(&request(&body)).expect(kind);
            assert_eq!(event.resource_kind.as_deref(), Some("email"), "{kind}");
            assert_eq!(event.resource_version, None, "email.{kind}");
            assert!(!event.deleted, "{kind}");
        }
    }

    #[test]
    fn domain_events_are_versioned_by_their_time_and_unknown_kinds_are_not() {
        let domain = |kind: &str| {
            let body = format!(
                r#"{{"type":"domain.{kind}","created_at":"2024-11-17T19:32:22.980Z",
                    "data":{{"id":"d91cd9bd-1176-453e-8fc1-35364d380206","name":"example.com",
                    "status":"not_started","created_at":"2024-04-26T20:21:26.347412+00:00"}}}}"#
            );
            Resend::describe_event(&request(&body)).expect(kind)
        };
        for kind in ["created", "updated", "deleted"] {
            let event = domain(kind);
            assert_eq!(event.resource_kind.as_deref(), Some("domain"));
            assert_eq!(
                event.resource_id.as_deref(),
                Some("d91cd9bd-1176-453e-8fc1-35364d380206")
            );
            // The event's time: the domain's own created_at is not when it changed.
            assert_eq!(event.resource_version, Some(1_731_871_942_980), "{kind}");
            assert_eq!(event.deleted, kind == "deleted");
        }
        let unknown = Resend::describe_event(&request(
            r#"{"type":"broadcast.sent","created_at":"2024-11-17T19:32:22.980Z",
                "data":{"id":"b1","updated_at":"2024-11-17T19:32:22.000Z"}}"#,
        ))
        .expect("unknown kind");
        assert_eq!(unknown.resource_kind.as_deref(), Some("broadcast"));
        assert_eq!(unknown.resource_id.as_deref(), Some("b1"));
        assert_eq!(unknown.resource_version, None);
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
