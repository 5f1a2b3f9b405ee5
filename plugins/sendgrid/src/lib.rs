//! SendGrid (Twilio SendGrid Event Webhook, signed):
//! `X-Twilio-Email-Event-Webhook-Signature: <base64 DER>`,
//! `X-Twilio-Email-Event-Webhook-Timestamp: <unix seconds>`.
//!
//! The signed message is the timestamp header's raw value followed by the raw body (the
//! body SendGrid posts ends in CRLF, which is signed too). The signature is ECDSA over
//! P-256 with SHA-256, DER-encoded, standard base64 in the header; the endpoint's secret
//! is the webhook's verification key: base64 of its DER SubjectPublicKeyInfo, as the
//! SendGrid console and API show it ([`KeyFormat::EcdsaP256SpkiBase64`]). Several keys
//! may be configured (a webhook whose key was regenerated); SendGrid sends one signature.
//!
//! Window: SendGrid's SDKs check no time and SendGrid retries a failed POST for up to
//! 24 hours (whether a retry carries a fresh timestamp is not documented), so by default
//! no window applies: a replayed request verifies. The timestamp is still part of the
//! plan, and an endpoint can opt in with the plugin configuration
//! `{"replay_window_seconds": N}`, after which the host rejects requests signed more
//! than N seconds away from its clock (and the endpoint's `tolerance` may override N).
//!
//! Event: one request carries a JSON array of events (a batch). The hookhost event
//! describes the whole request:
//! - id: the event's `sg_event_id` when the batch holds one event; for several,
//!   `batch-sha256:` + hex SHA-256 of their `sg_event_id`s joined by `\n` (stable when
//!   SendGrid re-posts the same batch, whatever its timestamp); when an event lacks
//!   `sg_event_id`, `body-sha256:` + hex SHA-256 of the raw body.
//! - type: the events' common `event` (`delivered`, `open`…), else `batch`.
//! - occurred_at: the earliest event `timestamp`.
//! - resource: (`message`, `sg_message_id`) when every event names the same message,
//!   with no version; none for a batch spanning messages.
//!
//! A message's events (`processed`, `deferred`, `delivered`, `open`, `click`, `bounce`,
//! `dropped`, `spamreport`, `unsubscribe`, …) are happenings, each worth delivering, not
//! states of the message that supersede one another: a message is opened and clicked any
//! number of times, deferrals come before the delivery, and SendGrid retries a failed POST
//! for up to 24 hours. With the events' time as the version, a retried batch that arrived
//! after a later batch of the same message would be `stale_version` and never delivered.
//! Named without a version, one message's batches are still delivered one at a time, in
//! arrival order, and none is ever stale.
//!
//! A body that is not a non-empty JSON array of objects is `MalformedBody`.
//!
//! Sources: headers, ECDSA key pair, verification with the public key
//! https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features
//! **[docs]**; signed bytes = timestamp + payload, base64 DER signature, key as base64
//! SPKI without PEM armour, no time check — sendgrid-python 6.12.5 (PyPI)
//! `sendgrid/helpers/eventwebhook/__init__.py`; trailing CRLF signed — the repository's
//! `test/unit/test_eventwebhook.py` **[sdk]**; event fields (`sg_event_id` unique per event, up to 100 characters) and
//! retries "at increasing intervals for up to 24 hours"
//! https://docs.sendgrid.com/for-developers/tracking-events/troubleshooting **[docs]**.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::serde_json::Value;
use hookhost_plugin_sdk::{
    Algorithm, BatchId, Candidate, ConfigError, EndpointFacts, Event, KeyFormat, Part, Plan,
    PluginInfo, Provider, RawJson, Rejection, Request, Shared, decode,
};

const SIGNATURE: &str = "x-twilio-email-event-webhook-signature";
const TIMESTAMP: &str = "x-twilio-email-event-webhook-timestamp";
/// The plugin configuration key that turns on a replay window.
const WINDOW_KEY: &str = "replay_window_seconds";

pub struct SendGrid;

impl Provider for SendGrid {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "sendgrid".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Twilio SendGrid".into(),
            key_formats: vec![KeyFormat::EcdsaP256SpkiBase64],
            // No window unless the endpoint configures one: see the crate docs.
            default_tolerance_seconds: None,
            retry_behaviour: "a POST answered with anything but 2xx is retried at \
                              increasing intervals for up to 24 hours after the event"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::EcdsaP256Sha256]
    }

    fn check_config(config: &Value) -> Result<EndpointFacts, ConfigError> {
        let mut facts = EndpointFacts::default();
        if let Some(value) = ConfigError::only_keys(config, &[WINDOW_KEY])?.get(WINDOW_KEY) {
            let seconds = value
                .as_u64()
                .and_then(|s| u32::try_from(s).ok())
                .filter(|s| *s > 0)
                .ok_or_else(|| {
                    ConfigError::new(WINDOW_KEY, "must be a positive number of seconds")
                })?;
            facts.default_tolerance_seconds = Some(seconds);
        }
        Ok(facts)
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let signature = decode::base64(req.signature_header(SIGNATURE)?)?;
        let timestamp = decode::unix_seconds(req.signature_header(TIMESTAMP)?)?;
        Ok(Plan {
            // The header's raw value, exactly as SendGrid signed it.
            message: vec![Part::Header(TIMESTAMP.into()), Part::Body],
            candidates: vec![Candidate::new(Algorithm::EcdsaP256Sha256, signature)],
            timestamp: Some(timestamp),
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let json = req.json()?;
        let not_a_batch =
            || Rejection::MalformedBody("body is not a non-empty JSON array of events".into());
        // The batch is read one event at a time, keeping only what describes it whole,
        // so its length costs time, not memory.
        let mut batch = Batch::default();
        let mut events = json.elements("").ok_or_else(not_a_batch)?;
        while let Some(fields) = events.next_object(Batch::FIELDS) {
            batch.add(fields?);
        }
        if batch.event_type.is_empty() {
            return Err(not_a_batch());
        }
        let event_type = batch.event_type.one().unwrap_or(Cow::Borrowed("batch"));
        let id = batch.id.finish().unwrap_or_else(|| req.body_id());
        let mut event = Event::new(event_type).id(id).occurred_at(batch.earliest);
        // Happenings, not states: no version (crate docs).
        if let Some(Some(message)) = batch.message.one() {
            event = event.resource("message", message);
        }
        Ok(event)
    }
}

/// What describes a batch, folded one event at a time.
#[derive(Default)]
struct Batch<'a> {
    /// From the events' `sg_event_id`s.
    id: BatchId,
    /// The events' `event`.
    event_type: Shared<Cow<'a, str>>,
    /// The earliest integer `timestamp`.
    earliest: Option<i64>,
    /// The events' `sg_message_id`.
    message: Shared<Option<Cow<'a, str>>>,
}

impl<'a> Batch<'a> {
    /// The fields of an event that [`Batch::add`] takes, in its order.
    const FIELDS: [&'static str; 4] = ["sg_event_id", "event", "timestamp", "sg_message_id"];

    fn add(&mut self, [id, event_type, timestamp, message]: [Option<RawJson<'a>>; 4]) {
        let text = |field: Option<RawJson<'a>>| field.and_then(|f| f.str(""));
        self.id.add(text(id).as_deref());
        self.event_type
            .add(text(event_type).unwrap_or(Cow::Borrowed("unknown")));
        // A JSON integer only, as SendGrid writes it.
        if let Some(t) = timestamp.and_then(|t| t.text().parse::<i64>().ok()) {
            self.earliest = Some(self.earliest.map_or(t, |e| e.min(t)));
        }
        self.message.add(text(message));
    }
}

hookhost_plugin_sdk::export_provider!(SendGrid);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::serde_json::json;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/sendgrid";
    // sendgrid-python test/unit/test_eventwebhook.py: SIGNATURE, TIMESTAMP, PAYLOAD.
    const SIG: &str = "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM=";
    const PAYLOAD: &str = "[{\"email\":\"hello@world.com\",\"event\":\"dropped\",\"reason\":\"Bounced Address\",\"sg_event_id\":\"ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA\",\"sg_message_id\":\"LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0\",\"smtp-id\":\"<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>\",\"timestamp\":1600112492}]\r\n";

    fn request(body: &str) -> Request {
        RequestBuilder::post(URL)
            .header("X-Twilio-Email-Event-Webhook-Signature", SIG)
            .header("X-Twilio-Email-Event-Webhook-Timestamp", "1600112502")
            .body(body)
            .build()
    }

    #[test]
    fn plan_signs_timestamp_then_body_with_the_der_signature() {
        let plan = SendGrid::plan_verification(&request(PAYLOAD)).expect("plan");
        assert_eq!(
            plan.message,
            vec![Part::Header(TIMESTAMP.into()), Part::Body]
        );
        assert_eq!(plan.timestamp, Some(1_600_112_502));
        assert_eq!(plan.candidates.len(), 1);
        assert_eq!(plan.candidates[0].algorithm, Algorithm::EcdsaP256Sha256);
        assert_eq!(plan.candidates[0].signature[0], 0x30, "DER SEQUENCE");
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let no_sig = RequestBuilder::post(URL)
            .header("X-Twilio-Email-Event-Webhook-Timestamp", "1600112502")
            .build();
        let no_time = RequestBuilder::post(URL)
            .header("X-Twilio-Email-Event-Webhook-Signature", SIG)
            .build();
        for req in [no_sig, no_time] {
            assert!(matches!(
                SendGrid::plan_verification(&req),
                Err(Rejection::MissingSignature(_))
            ));
        }
        let bad_time = RequestBuilder::post(URL)
            .header("X-Twilio-Email-Event-Webhook-Signature", SIG)
            .header("X-Twilio-Email-Event-Webhook-Timestamp", "timestamp")
            .build();
        let bad_sig = RequestBuilder::post(URL)
            .header("X-Twilio-Email-Event-Webhook-Signature", "not base64!")
            .header("X-Twilio-Email-Event-Webhook-Timestamp", "1600112502")
            .build();
        for req in [bad_time, bad_sig] {
            assert!(matches!(
                SendGrid::plan_verification(&req),
                Err(Rejection::MalformedSignature(_))
            ));
        }
    }

    #[test]
    fn a_single_event_keeps_its_own_id_type_and_message() {
        let event = SendGrid::describe_event(&request(PAYLOAD)).expect("event");
        assert_eq!(
            event.id.as_deref(),
            Some("ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA")
        );
        assert_eq!(event.event_type, "dropped");
        assert_eq!(event.occurred_at, Some(1_600_112_492));
        assert_eq!(event.resource_kind.as_deref(), Some("message"));
        assert_eq!(
            event.resource_id.as_deref(),
            Some("LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0")
        );
        assert_eq!(event.resource_version, None);
    }

    #[test]
    fn a_batch_is_described_as_a_whole() {
        let same = r#"[{"event":"delivered","sg_event_id":"a","sg_message_id":"m","timestamp":20},
                       {"event":"open","sg_event_id":"b","sg_message_id":"m","timestamp":30}]"#;
        let event = SendGrid::describe_event(&request(same)).expect("event");
        assert_eq!(event.event_type, "batch");
        // printf 'a\nb' | sha256sum
        assert_eq!(
            event.id.as_deref(),
            Some("batch-sha256:7e18f737311b2dc3b2f269dd78396b0351f14fb66efa879f768cb23181883c78")
        );
        assert_eq!(event.occurred_at, Some(20));
        assert_eq!(event.resource_id.as_deref(), Some("m"));
        assert_eq!(event.resource_version, None);

        let spread = r#"[{"event":"delivered","sg_event_id":"a","sg_message_id":"m1","timestamp":20},
                         {"event":"delivered","sg_message_id":"m2","timestamp":10}]"#;
        let event = SendGrid::describe_event(&request(spread)).expect("event");
        assert_eq!(event.event_type, "delivered");
        assert_eq!(event.id, Some(request(spread).body_id()));
        assert_eq!(event.occurred_at, Some(10));
        assert_eq!(event.resource_id, None);
    }

    #[test]
    fn message_events_name_the_message_without_a_version() {
        // Each is a happening: a late retry of an earlier one must not be stale.
        for (kind, time) in [
            ("processed", 10),
            ("deferred", 15),
            ("delivered", 20),
            ("open", 30),
            ("open", 90),
            ("click", 40),
            ("bounce", 50),
            ("dropped", 60),
            ("spamreport", 70),
            ("unsubscribe", 80),
        ] {
            let body = format!(
                r#"[{{"event":"{kind}","sg_event_id":"e-{time}","sg_message_id":"m","timestamp":{time}}}]"#
            );
            let event = SendGrid::describe_event(&request(&body)).expect(kind);
            assert_eq!(event.event_type, kind);
            assert_eq!(event.occurred_at, Some(time), "{kind}");
            assert_eq!(event.resource_kind.as_deref(), Some("message"), "{kind}");
            assert_eq!(event.resource_id.as_deref(), Some("m"), "{kind}");
            assert_eq!(event.resource_version, None, "{kind} at {time}");
            assert!(!event.deleted, "{kind}");
        }
    }

    #[test]
    fn bodies_that_are_not_event_arrays_are_malformed() {
        for bad in ["[]", "{\"event\":\"open\"}", "[1]", "payload", "[{}"] {
            assert!(
                matches!(
                    SendGrid::describe_event(&request(bad)),
                    Err(Rejection::MalformedBody(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn config_opts_in_to_a_window() {
        assert_eq!(SendGrid::info().default_tolerance_seconds, None);
        assert_eq!(
            SendGrid::check_config(&json!({})).expect("empty"),
            EndpointFacts::default()
        );
        let facts = SendGrid::check_config(&json!({"replay_window_seconds": 600})).expect("ok");
        assert_eq!(facts.default_tolerance_seconds, Some(600));
        for bad in [
            json!({"replay_window_seconds": 0}),
            json!({"replay_window_seconds": "300"}),
            json!({"window": 300}),
            json!([]),
        ] {
            assert!(SendGrid::check_config(&bad).is_err(), "{bad}");
        }
        assert_eq!(SendGrid::algorithms(), vec![Algorithm::EcdsaP256Sha256]);
    }
}
