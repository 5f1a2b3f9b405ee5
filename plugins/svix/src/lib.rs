//! Svix: `svix-id`, `svix-timestamp`, `svix-signature: v1,<base64> [v1,<base64>]…`.
//!
//! Svix signs the way Standard Webhooks does, under its own header names. The signed
//! message is `{svix-id}.{svix-timestamp}.{raw body}` (the raw header values),
//! HMAC-SHA256 keyed by the base64-decoded part of the endpoint's `whsec_…` secret,
//! standard base64 in the signature header. The header is a space-separated list of
//! `version,signature`; only `v1` is trusted (other versions are skipped, as the Svix
//! libraries do), one entry per active secret while a rotated secret is kept. The
//! timestamp is unix seconds, accepted within ±300 s (the libraries' five minutes, in
//! both directions). Each header falls back to its `webhook-*` name when the `svix-*`
//! one is absent, as the libraries do. `v1a` (Ed25519) entries are skipped too: the
//! Svix libraries verify only `v1`; the `standard-webhooks` plugin takes `whpk_` keys.
//!
//! Sources: https://docs.svix.com/receiving/verifying-payloads/how-manual (headers,
//! signed content, space-delimited list, `svix-id` constant when a message is resent,
//! `webhook-` prefix for white-labeled senders) and
//! https://docs.svix.com/receiving/verifying-payloads/how (library example) **[docs]**; the `svix` PyPI package 2.9.1
//! `svix/webhooks.py` (header fallback) over `standardwebhooks` 1.1.0
//! `standardwebhooks/webhooks.py` (`v1` only, ±5 min, space-separated list) **[sdk]**;
//! retries: https://docs.svix.com/retries **[docs]**.
//!
//! Event: id = `svix-id` (constant across Svix's retries), type = body `type`
//! (`unknown` when the JSON body has none: Svix fixes no payload shape), occurred_at =
//! body `timestamp` when it is RFC 3339. A body that is not JSON is `MalformedBody`.
//! No resource is described: the payload is the sender's own.
//!
//! Reuse: the scheme itself is [`scheme`] (`src/scheme.rs`), which the `clerk` and
//! `resend` plugins (Svix-signed senders) compile in as a module; see its docs for why
//! it is not a crate dependency.

#![cfg_attr(not(test), no_std)]

extern crate alloc;

use hookhost_plugin_sdk::prelude::*;

pub mod scheme;

pub use scheme::{TOLERANCE_SECONDS, algorithms, info, message_id, plan};

use alloc::borrow::Cow;
use hookhost_plugin_sdk::{Algorithm, Event, Plan, PluginInfo, Provider, Rejection, Request};

/// The retry schedule Svix documents for every Svix-sent webhook.
pub const RETRY_BEHAVIOUR: &str = "Svix: immediately, then 5 s, 5 min, 30 min, 2 h, 5 h, \
                                   10 h, 10 h (same svix-id on every attempt); 15 s to \
                                   answer; an endpoint failing for 5 days is disabled";

pub struct Svix;

impl Provider for Svix {
    fn info() -> PluginInfo {
        info("svix", "Svix", RETRY_BEHAVIOUR)
    }

    fn algorithms() -> Vec<Algorithm> {
        algorithms()
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        plan(req)
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let event_type = body.str("/type").unwrap_or(Cow::Borrowed("unknown"));
        Ok(Event::new(event_type)
            .maybe_id(message_id(req))
            .occurred_at(body.rfc3339("/timestamp")))
    }
}

hookhost_plugin_sdk::export_provider!(Svix);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;
    use hookhost_plugin_sdk::{Candidate, KeyFormat, Part};

    const URL: &str = "https://hooks.example.com/webhooks/svix";

    fn signed(sig: &str) -> Request {
        RequestBuilder::post(URL)
            .header("svix-id", "msg_1")
            .header("svix-timestamp", "1614265330")
            .header("svix-signature", sig)
            .body("{}")
            .build()
    }

    #[test]
    fn plan_signs_id_dot_timestamp_dot_body_and_keeps_every_v1() {
        let plan = plan(&signed("v1,AP8= v1a,AQI= v2,AAAA  v1,AQI=")).expect("plan");
        assert_eq!(
            plan.message,
            vec![
                Part::Header("svix-id".into()),
                Part::Text(".".into()),
                Part::Header("svix-timestamp".into()),
                Part::Text(".".into()),
                Part::Body,
            ]
        );
        assert_eq!(plan.timestamp, Some(1_614_265_330));
        assert_eq!(plan.message_id.as_deref(), Some("msg_1"));
        assert_eq!(
            plan.candidates,
            vec![
                Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff]),
                Candidate::new(Algorithm::HmacSha256, vec![0x01, 0x02]),
            ]
        );
    }

    #[test]
    fn each_header_falls_back_to_its_webhook_name() {
        let req = RequestBuilder::post(URL)
            .header("webhook-id", "msg_w")
            .header("svix-timestamp", "1")
            .header("webhook-timestamp", "2")
            .header("webhook-signature", "v1,AP8=")
            .build();
        let plan = plan(&req).expect("plan");
        assert_eq!(plan.message[0], Part::Header("webhook-id".into()));
        assert_eq!(plan.message[2], Part::Header("svix-timestamp".into()));
        assert_eq!(plan.timestamp, Some(1));
        assert_eq!(plan.message_id.as_deref(), Some("msg_w"));
        assert_eq!(message_id(&req), Some("msg_w"));
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let only_id = RequestBuilder::post(URL).header("svix-id", "m").build();
        for missing in [
            RequestBuilder::post(URL).build(),
            only_id,
            signed("v1a,AP8="),
            signed(""),
        ] {
            assert!(matches!(
                plan(&missing),
                Err(Rejection::MissingSignature(_))
            ));
        }
        for bad in ["v1,***", "AP8=", "v1,AP8= junk"] {
            assert!(matches!(
                plan(&signed(bad)),
                Err(Rejection::MalformedSignature(_))
            ));
        }
        let bad_time = RequestBuilder::post(URL)
            .header("svix-id", "m")
            .header("svix-timestamp", "soon")
            .header("svix-signature", "v1,AP8=")
            .build();
        assert!(matches!(
            plan(&bad_time),
            Err(Rejection::MalformedSignature(_))
        ));
    }

    #[test]
    fn event_maps_svix_id_type_and_timestamp() {
        let req = RequestBuilder::post(URL)
            .header("svix-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
            .body(r#"{"type":"invoice.paid","timestamp":"2022-11-03T20:26:10.344522Z"}"#)
            .build();
        let event = Svix::describe_event(&req).expect("event");
        assert_eq!(event.id.as_deref(), Some("msg_p5jXN8AQM9LWM0D4loKWxJek"));
        assert_eq!(event.event_type, "invoice.paid");
        assert_eq!(event.occurred_at, Some(1_667_507_170));
        assert_eq!(event.resource_id, None);

        let untyped = RequestBuilder::post(URL)
            .header("svix-id", "msg_2")
            .body(r#"{"test": 2432232314}"#)
            .build();
        assert_eq!(
            Svix::describe_event(&untyped).expect("event").event_type,
            "unknown"
        );
        let text = RequestBuilder::post(URL).body("hello").build();
        assert!(matches!(
            Svix::describe_event(&text),
            Err(Rejection::MalformedBody(_))
        ));
    }

    #[test]
    fn info_names_whsec_keys_and_the_window() {
        let info = Svix::info();
        assert_eq!(info.name, "svix");
        assert_eq!(
            info.key_formats,
            vec![KeyFormat::Base64AfterPrefix("whsec_".into())]
        );
        assert_eq!(info.default_tolerance_seconds, Some(300));
        assert_eq!(Svix::algorithms(), vec![Algorithm::HmacSha256]);
    }
}
