//! Intercom: `X-Hub-Signature: sha1=<hex>`, HMAC-SHA1 of the raw body keyed by the app's
//! `client_secret` used verbatim (UTF-8) **[2nd]**: "Signed notifications" in
//! <https://developers.intercom.com/docs/references/webhooks/webhook-models>, read through
//! copies of that page. Nothing is timestamped, so there is no replay window; the
//! notification `id` is the dedupe key.
//!
//! Event (the notification object, same page): id = `id` (`notif_…`; a `ping` may carry
//! none, and the host derives one), type = `topic` (`conversation.user.created`,
//! `contact.deleted`, `ping`), occurred_at = `created_at` (unix seconds). The resource is
//! `data.item`: kind = its `type`, id = its `id`, version = its `updated_at` (unix seconds)
//! in millis, else the notification's `created_at` in millis; topics ending in `.deleted`
//! mark it deleted. A conversation's message (a topic ending in `.created`, `.replied` or
//! `.noted`) names it without a version: each notification carries its own message, so
//! one retried after a later message is not superseded by it, and a version would make
//! it stale and never delivered. `ping` (sent when a webhook is set up or tested) is
//! stored but ignored.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    decode,
};

const SIGNATURE: &str = "x-hub-signature";

pub struct Intercom;

impl Provider for Intercom {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "intercom".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Intercom".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "per-notification retry schedule unconfirmed; after more than \
                              1000 failed deliveries within 15 minutes the subscription is \
                              paused for 15 minutes; private apps' subscriptions are \
                              suspended after 7 days of failures"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha1]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header(SIGNATURE)?;
        let hex = decode::strip_prefix(header, "sha1=")?;
        Ok(Plan {
            message: vec![Part::Body],
            candidates: vec![Candidate::new(Algorithm::HmacSha1, decode::hex(hex)?)],
            timestamp: None,
            message_id: req
                .json()
                .ok()
                .and_then(|body| body.str("/id").map(|id| id.into_owned())),
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let topic = body.required_str("/topic")?;
        let created = body.i64("/created_at");
        let mut event = Event::new(topic.as_ref())
            .maybe_id(body.str("/id"))
            .occurred_at(created);
        if let (Some(kind), Some(id)) = (body.str("/data/item/type"), body.id("/data/item/id")) {
            let version = body
                .u64("/data/item/updated_at")
                .or_else(|| created.and_then(|c| u64::try_from(c).ok()))
                .and_then(|seconds| seconds.checked_mul(1000))
                .filter(|_| !(kind == "conversation" && is_message(&topic)));
            event = event
                .resource(kind.as_ref(), id)
                .version(version)
                .deleted(topic.ends_with(".deleted"));
        }
        if topic == "ping" {
            event = event.ignore("ping");
        }
        Ok(event)
    }
}

/// Whether a conversation's topic is one of its messages: the customer's first message
/// or reply, an admin's reply, note or outbound message (`conversation.user.created`,
/// `conversation.admin.replied`, `conversation.admin.noted`, …).
fn is_message(topic: &str) -> bool {
    [".created", ".replied", ".noted"]
        .iter()
        .any(|suffix| topic.ends_with(suffix))
}

hookhost_plugin_sdk::export_provider!(Intercom);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::Disposition;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/intercom";

    #[test]
    fn plan_signs_the_body_with_sha1() {
        let req = RequestBuilder::post(URL)
            .header("X-Hub-Signature", "sha1=00ff")
            .body(r#"{"id":"notif_1"}"#)
            .build();
        let plan = Intercom::plan_verification(&req).expect("plan");
        assert_eq!(plan.message, vec![Part::Body]);
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha1, vec![0x00, 0xff])]
        );
        assert_eq!(plan.timestamp, None);
        assert_eq!(plan.message_id.as_deref(), Some("notif_1"));
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("{}").build();
        assert!(matches!(
            Intercom::plan_verification(&none),
            Err(Rejection::MissingSignature(_))
        ));
        for bad in ["00ff", "sha256=00ff", "sha1=zz"] {
            let req = RequestBuilder::post(URL)
                .header("X-Hub-Signature", bad)
                .build();
            assert!(matches!(
                Intercom::plan_verification(&req),
                Err(Rejection::MalformedSignature(_))
            ));
        }
    }

    fn describe(body: &str) -> Result<Event, Rejection> {
        Intercom::describe_event(&RequestBuilder::post(URL).body(body).build())
    }

    #[test]
    fn event_maps_topic_and_item() {
        let event = describe(
            r#"{"type":"notification_event","id":"notif_1","topic":"contact.deleted",
                "created_at":1718217604,"data":{"type":"notification_event_data",
                "item":{"type":"contact","id":"6672a9c4","updated_at":1718217603}}}"#,
        )
        .expect("event");
        assert_eq!(event.id.as_deref(), Some("notif_1"));
        assert_eq!(event.event_type, "contact.deleted");
        assert_eq!(event.occurred_at, Some(1_718_217_604));
        assert_eq!(event.resource_kind.as_deref(), Some("contact"));
        assert_eq!(event.resource_id.as_deref(), Some("6672a9c4"));
        assert_eq!(event.resource_version, Some(1_718_217_603_000));
        assert!(event.deleted);

        let no_updated_at = describe(
            r#"{"id":"notif_2","topic":"conversation.admin.closed","created_at":5,
                "data":{"item":{"type":"conversation","id":123}}}"#,
        )
        .expect("event");
        assert_eq!(no_updated_at.resource_id.as_deref(), Some("123"));
        assert_eq!(no_updated_at.resource_version, Some(5000));
    }

    #[test]
    fn a_conversations_messages_name_it_without_a_version() {
        for topic in [
            "conversation.user.created",
            "conversation.user.replied",
            "conversation.admin.replied",
            "conversation.admin.noted",
            "conversation.admin.single.created",
        ] {
            let event = describe(&format!(
                r#"{{"id":"notif_4","topic":"{topic}","created_at":5,
                    "data":{{"item":{{"type":"conversation","id":"147","updated_at":4}}}}}}"#
            ))
            .expect("event");
            assert_eq!(event.resource_id.as_deref(), Some("147"), "{topic}");
            assert_eq!(event.resource_version, None, "{topic}");
        }
        // A change of the conversation's state keeps its order; so does a contact's.
        for (topic, kind) in [
            ("conversation.admin.closed", "conversation"),
            ("conversation.admin.assigned", "conversation"),
            ("contact.user.created", "contact"),
        ] {
            let event = describe(&format!(
                r#"{{"id":"notif_5","topic":"{topic}","created_at":5,
                    "data":{{"item":{{"type":"{kind}","id":"147","updated_at":4}}}}}}"#
            ))
            .expect("event");
            assert_eq!(event.resource_version, Some(4000), "{topic}");
        }
    }

    #[test]
    fn ping_is_ignored_and_bad_bodies_are_rejections() {
        let ping = describe(
            r#"{"type":"notification_event","id":null,"topic":"ping","created_at":1,
                "data":{"item":{"type":"ping","message":"hi"}}}"#,
        )
        .expect("ping");
        assert_eq!(ping.id, None);
        assert_eq!(ping.disposition, Disposition::Ignore("ping".into()));
        assert!(matches!(describe("nope"), Err(Rejection::MalformedBody(_))));
        assert!(matches!(
            describe(r#"{"id":"notif_3"}"#),
            Err(Rejection::MalformedBody(_))
        ));
    }
}
