//! Calendly (API v2 webhook subscriptions): `Calendly-Webhook-Signature: t=<unix>,v1=<hex>`.
//!
//! The signed message is `{t}.{raw body}` with `t` exactly as sent, HMAC-SHA256 keyed by
//! the subscription's webhook signing key used verbatim, hex digest. Header name and
//! signing key: https://developer.calendly.com/api-docs/overview/webhooks/webhook-signatures
//! **[docs]**. The `t=…,v1=…` layout, the `{t}.{body}` message, hex HMAC-SHA256 and the
//! 3-minute tolerance ("we set the application's tolerance zone to 3 minutes", old
//! timestamps only) are from that page's sample code, read in verbatim copies of it
//! **[2nd]**; Calendly ships no SDK that verifies. Default window: 180 s, which hookhost
//! applies in both directions. Every `v1` entry is a candidate (Calendly sends one and
//! documents no rotation; a personal-access-token user sets the key, an OAuth app gets a
//! generated one).
//!
//! Event (Calendly webhook payload): type = `event` (`invitee.created`,
//! `invitee.canceled`, `invitee_no_show.created`, `routing_form_submission.created`…),
//! occurred_at = `created_at`. The resource is `payload`: kind = the type before its
//! last `.`, id = `payload.uri`, version = `payload.updated_at` in unix millis, else the
//! event's `created_at` in millis; `*.deleted` marks it deleted (a canceled invitee is
//! not deleted). Calendly sends no event or delivery id, and a retry carries a new `t`,
//! so a hash of the signed message would differ per attempt: the id is composed from the
//! body instead, `{event}:{payload.uri}:{created_at}` (all three as sent), and is left
//! to the host only when one of them is missing.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    decode,
};

/// "we set the application's tolerance zone to 3 minutes" (Calendly's sample code).
pub const DEFAULT_TOLERANCE_SECONDS: u32 = 180;

pub struct Calendly;

impl Provider for Calendly {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "calendly".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Calendly".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: Some(DEFAULT_TOLERANCE_SECONDS),
            retry_behaviour: "on 3xx/4xx/5xx answers: retried with exponential back-off for \
                              24 hours (or until 24 hours after the booked event); a \
                              subscription still failing after 24 hours is disabled"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header("calendly-webhook-signature")?;
        let mut timestamp = None;
        let mut candidates = Vec::new();
        for (key, value) in decode::key_values(header, ',') {
            match key {
                "t" => timestamp = Some((value, decode::unix_seconds(value)?)),
                "v1" => candidates.push(Candidate::new(Algorithm::HmacSha256, decode::hex(value)?)),
                _ => {}
            }
        }
        let (signed_t, timestamp) = timestamp.ok_or_else(|| {
            Rejection::MalformedSignature("calendly-webhook-signature has no t=".into())
        })?;
        if candidates.is_empty() {
            return Err(Rejection::MissingSignature(
                "calendly-webhook-signature v1".into(),
            ));
        }
        Ok(Plan {
            message: vec![Part::Text(format!("{signed_t}.")), Part::Body],
            candidates,
            timestamp: Some(timestamp),
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let event_type = body.required_str("/event")?;
        let created = body.str("/created_at");
        let uri = body.str("/payload/uri");
        let id = match (&uri, &created) {
            (Some(uri), Some(created)) => Some(format!("{event_type}:{uri}:{created}")),
            _ => None,
        };
        let mut event = Event::new(event_type.as_ref())
            .maybe_id(id)
            .occurred_at(body.rfc3339("/created_at"));
        if let Some(uri) = uri {
            let kind = event_type
                .rsplit_once('.')
                .map_or(event_type.as_ref(), |(kind, _)| kind);
            let version = body
                .rfc3339_millis("/payload/updated_at")
                .or_else(|| body.rfc3339_millis("/created_at"));
            event = event
                .resource(kind, uri)
                .version(version)
                .deleted(event_type.ends_with(".deleted"));
        }
        Ok(event)
    }
}

hookhost_plugin_sdk::export_provider!(Calendly);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/calendly";

    fn signed(header: &str) -> Request {
        RequestBuilder::post(URL)
            .header("Calendly-Webhook-Signature", header)
            .body("{}")
            .build()
    }

    #[test]
    fn plan_signs_timestamp_dot_body() {
        let plan = Calendly::plan_verification(&signed("t=1718217605,v1=00ff")).expect("plan");
        assert_eq!(
            plan.message,
            vec![Part::Text("1718217605.".into()), Part::Body]
        );
        assert_eq!(plan.timestamp, Some(1_718_217_605));
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
        let two =
            Calendly::plan_verification(&signed("v1=0102, t=01718217605, v1=00ff")).expect("two");
        assert_eq!(two.candidates.len(), 2);
        assert_eq!(two.message[0], Part::Text("01718217605.".into()));
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("{}").build();
        assert!(matches!(
            Calendly::plan_verification(&none),
            Err(Rejection::MissingSignature(_))
        ));
        assert!(matches!(
            Calendly::plan_verification(&signed("t=1718217605")),
            Err(Rejection::MissingSignature(_))
        ));
        for bad in ["v1=00ff", "t=1718217605,v1=zz", "t=yesterday,v1=00ff"] {
            assert!(
                matches!(
                    Calendly::plan_verification(&signed(bad)),
                    Err(Rejection::MalformedSignature(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn event_maps_payload_and_composes_an_id() {
        let req = RequestBuilder::post(URL)
            .body(
                r#"{"created_at":"2024-06-12T18:40:04.000000Z","created_by":"https://api.calendly.com/users/U",
                   "event":"invitee.canceled","payload":{"uri":"https://api.calendly.com/scheduled_events/E/invitees/I",
                   "status":"canceled","updated_at":"2024-06-12T18:40:03.250000Z"}}"#,
            )
            .build();
        let event = Calendly::describe_event(&req).expect("event");
        assert_eq!(
            event.id.as_deref(),
            Some(
                "invitee.canceled:https://api.calendly.com/scheduled_events/E/invitees/I:2024-06-12T18:40:04.000000Z"
            )
        );
        assert_eq!(event.event_type, "invitee.canceled");
        assert_eq!(event.occurred_at, Some(1_718_217_604));
        assert_eq!(event.resource_kind.as_deref(), Some("invitee"));
        assert_eq!(
            event.resource_id.as_deref(),
            Some("https://api.calendly.com/scheduled_events/E/invitees/I")
        );
        assert_eq!(event.resource_version, Some(1_718_217_603_250));
        assert!(!event.deleted);

        let deleted = RequestBuilder::post(URL)
            .body(r#"{"created_at":"1970-01-01T00:00:02Z","event":"invitee_no_show.deleted","payload":{"uri":"https://api.calendly.com/invitee_no_shows/N"}}"#)
            .build();
        let deleted = Calendly::describe_event(&deleted).expect("deleted");
        assert_eq!(deleted.resource_kind.as_deref(), Some("invitee_no_show"));
        assert_eq!(deleted.resource_version, Some(2000));
        assert!(deleted.deleted);
    }

    #[test]
    fn without_uri_the_host_derives_the_id_and_bad_bodies_are_rejections() {
        let req = RequestBuilder::post(URL)
            .body(r#"{"event":"invitee.created","payload":{}}"#)
            .build();
        let event = Calendly::describe_event(&req).expect("event");
        assert_eq!(event.id, None);
        assert_eq!(event.resource_id, None);
        for bad in ["nope", r#"{"payload":{}}"#] {
            let req = RequestBuilder::post(URL).body(bad).build();
            assert!(
                matches!(
                    Calendly::describe_event(&req),
                    Err(Rejection::MalformedBody(_))
                ),
                "{bad}"
            );
        }
    }
}
