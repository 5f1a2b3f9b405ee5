//! Clerk: Svix-signed webhooks (`svix-id`, `svix-timestamp`, `svix-signature`).
//!
//! Clerk sends its webhooks through Svix, so verification is the Svix scheme (shared with
//! the `svix` plugin, see `plugins/svix/src/scheme.rs`): `{svix-id}.{svix-timestamp}.{raw
//! body}`, HMAC-SHA256 keyed by the base64 after the endpoint's `whsec_` signing secret,
//! `v1,<base64>` signatures space-separated, ±300 s window.
//!
//! Event, from the payload Clerk documents (`data`, `object` = `event`, `type`,
//! `timestamp` in milliseconds, `instance_id`): id = `svix-id` (the Svix message id,
//! constant across retries; the body carries no event id), type = body `type`,
//! occurred_at = body `timestamp` / 1000. The resource is `data`: kind = `data.object`
//! (`user`, `session`, `organization`…; else the type up to its first `.`), id =
//! `data.id`, version = `data.updated_at` (unix ms) or, when absent (deletions carry
//! only `id`, `object`, `deleted`), the event's `timestamp` (ms). `data.deleted: true`
//! or a type ending in `.deleted` marks it deleted.
//!
//! Sources: payload structure and the `user.created` example
//! https://clerk.com/docs/guides/development/webhooks/overview **[docs]**; "Clerk uses
//! Svix to send our webhooks", retries follow the Svix schedule, replay from the
//! dashboard **[docs]** (same page); the `user.deleted` payload shape (`deleted: true`,
//! `id`, `object`) from an earlier version of Clerk's webhook docs **[2nd]**.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

#[path = "../../svix/src/scheme.rs"]
mod svix;

use hookhost_plugin_sdk::{Algorithm, Event, Plan, PluginInfo, Provider, Rejection, Request};

pub struct Clerk;

impl Provider for Clerk {
    fn info() -> PluginInfo {
        svix::info(
            "clerk",
            "Clerk",
            "through Svix: immediately, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h \
             (same svix-id on every attempt); failed messages can be replayed from the \
             Clerk dashboard",
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
        let timestamp_ms = body.u64("/timestamp");
        let mut event = Event::new(event_type.as_ref())
            .maybe_id(svix::message_id(req))
            .occurred_at(timestamp_ms.and_then(|ms| i64::try_from(ms / 1000).ok()));
        if let Some(id) = body.id("/data/id") {
            let kind = body
                .str("/data/object")
                .map(|k| k.into_owned())
                .unwrap_or_else(|| event_type.split('.').next().unwrap_or("").to_owned());
            let deleted =
                body.raw("/data/deleted") == Some("true") || event_type.ends_with(".deleted");
            event = event
                .resource(kind, id)
                .version(body.u64("/data/updated_at").or(timestamp_ms))
                .deleted(deleted);
        }
        Ok(event)
    }
}

hookhost_plugin_sdk::export_provider!(Clerk);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;
    use hookhost_plugin_sdk::{KeyFormat, Part};

    const URL: &str = "https://hooks.example.com/webhooks/clerk";

    fn request(body: &str) -> Request {
        RequestBuilder::post(URL)
            .header("svix-id", "msg_2a7MJ0Pa5DHrpj7RCv1vFCrUPZS")
            .header("svix-timestamp", "1654012592")
            .header("svix-signature", "v1,AP8=")
            .body(body)
            .build()
    }

    #[test]
    fn verification_is_the_svix_scheme() {
        let plan = Clerk::plan_verification(&request("{}")).expect("plan");
        assert_eq!(plan.message[0], Part::Header("svix-id".into()));
        assert_eq!(plan.timestamp, Some(1_654_012_592));
        assert_eq!(
            plan.message_id.as_deref(),
            Some("msg_2a7MJ0Pa5DHrpj7RCv1vFCrUPZS")
        );
        let missing = RequestBuilder::post(URL).body("{}").build();
        assert!(matches!(
            Clerk::plan_verification(&missing),
            Err(Rejection::MissingSignature(_))
        ));
        let info = Clerk::info();
        assert_eq!(info.name, "clerk");
        assert_eq!(
            info.key_formats,
            vec![KeyFormat::Base64AfterPrefix("whsec_".into())]
        );
        assert_eq!(info.default_tolerance_seconds, Some(300));
        assert_eq!(Clerk::algorithms(), vec![Algorithm::HmacSha256]);
    }

    #[test]
    fn user_created_maps_the_user_and_its_updated_at() {
        let body = r#"{"data":{"id":"user_29w83sxmDNGwOuEthce5gg56FcC","object":"user",
            "created_at":1654012591514,"updated_at":1654012591835},"instance_id":"ins_123",
            "object":"event","timestamp":1654012591835,"type":"user.created"}"#;
        let event = Clerk::describe_event(&request(body)).expect("event");
        assert_eq!(event.id.as_deref(), Some("msg_2a7MJ0Pa5DHrpj7RCv1vFCrUPZS"));
        assert_eq!(event.event_type, "user.created");
        assert_eq!(event.occurred_at, Some(1_654_012_591));
        assert_eq!(event.resource_kind.as_deref(), Some("user"));
        assert_eq!(
            event.resource_id.as_deref(),
            Some("user_29w83sxmDNGwOuEthce5gg56FcC")
        );
        assert_eq!(event.resource_version, Some(1_654_012_591_835));
        assert!(!event.deleted);
    }

    #[test]
    fn deletion_uses_the_event_time_as_version() {
        let body = r#"{"data":{"deleted":true,"id":"user_29wBMCtzATuFJut8jO2VNTVekS4",
            "object":"user"},"object":"event","timestamp":1661861640000,"type":"user.deleted"}"#;
        let event = Clerk::describe_event(&request(body)).expect("event");
        assert_eq!(event.resource_kind.as_deref(), Some("user"));
        assert_eq!(event.resource_version, Some(1_661_861_640_000));
        assert!(event.deleted);
    }

    #[test]
    fn kind_falls_back_to_the_type_prefix_and_bad_bodies_are_rejections() {
        let body =
            r#"{"data":{"id":"sess_1"},"object":"event","timestamp":5,"type":"session.ended"}"#;
        let event = Clerk::describe_event(&request(body)).expect("event");
        assert_eq!(event.resource_kind.as_deref(), Some("session"));
        assert_eq!(event.resource_version, Some(5));

        let no_data = Clerk::describe_event(&request(r#"{"type":"email.created"}"#))
            .expect("event without data");
        assert_eq!(no_data.resource_id, None);
        assert_eq!(no_data.occurred_at, None);

        for bad in [r#"{"data":{}}"#, "not json", r#"{"type":7}"#] {
            assert!(
                matches!(
                    Clerk::describe_event(&request(bad)),
                    Err(Rejection::MalformedBody(_))
                ),
                "{bad}"
            );
        }
    }
}
