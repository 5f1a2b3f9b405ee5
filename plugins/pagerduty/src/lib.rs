//! PagerDuty (v3 webhooks): `X-PagerDuty-Signature: v1=<hex>[,v1=<hex>…]`.
//!
//! The signed message is the raw body alone, HMAC-SHA256 keyed by the subscription's
//! signing secret used verbatim, hex (Base16) digest behind `v1=`. The header "contains
//! one or more signatures. Multiple signatures may be present to allow for a
//! zero-downtime secret rotation"; they are comma-separated and a delivery is authentic
//! when at least one matches (PagerDuty/developer-docs `docs/webhooks/04-Signatures.md`,
//! published at https://developer.pagerduty.com/docs/ZG9jOjExMDI5NTkz-verifying-signatures).
//! Every `v1` entry is a candidate; entries of other versions are ignored, and so is a
//! `v1` entry that is not hex, as PagerDuty's own go-pagerduty `webhookv3` package
//! (`VerifySignature`) does. A header with no usable `v1` entry is `MalformedSignature`.
//! Nothing is timestamped, so there is no replay window.
//!
//! Ids: the body's `event.id` is the event id. It names the outbound event itself, so
//! it is the same on every delivery attempt and meaningful outside one subscription.
//! `X-Webhook-Id` is the delivery id ("unique to the webhook but is repeated for each
//! delivery attempt", `docs/webhooks/02-Behavior.md`); it is passed to the host as the
//! plan's message id, not used as the event id.
//!
//! Event (`docs/webhooks/01-v3-Overview.md`): type = `event.event_type`, occurred_at =
//! `event.occurred_at`, resource kind = `event.resource_type`, resource id =
//! `event.data.id` when `event.data.type` is that kind, else `event.data.<kind>.id`
//! (an `incident_note` carries its incident under `data.incident`). `pagey.ping` (the
//! test event) is stored but ignored.
//!
//! Version and deletion follow what the event's data is. When `event.data.type` is the
//! resource type, the data is the resource as it now is (`incident.triggered`,
//! `acknowledged`, `unacknowledged`, `escalated`, `delegated`, `reassigned`,
//! `priority_updated`, `reopened`, `resolved` carry the `incident`; `service.*` the
//! service): the event is a change of its state, versioned by its time in unix millis,
//! so that a late `incident.triggered` after `incident.resolved` is `stale_version`, not
//! delivered; and `*.deleted` marks it deleted. When the data is another object attached
//! to the resource (`incident.annotated`: an `incident_note`;
//! `incident.status_update_published`: an `incident_status_update`;
//! `incident.responder.added` / `replied`: an `incident_responder`), the event is a
//! happening, worth delivering whatever came after it: it names the resource without a
//! version, and deletes nothing. PagerDuty retries a delivery for about 20 minutes, so
//! with its time as a version a note retried after the incident's next change would be
//! stale, and lost; without one, it is delivered, one at a time with the incident's
//! other events.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    decode,
};

/// The test event a subscription's "ping" sends.
pub const PING: &str = "pagey.ping";

pub struct PagerDuty;

impl Provider for PagerDuty {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "pagerduty".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "PagerDuty".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "2xx within 5 s; retried on timeout, 5xx, 429, connection and \
                              DNS errors up to 4 times (5 attempts) with exponential backoff \
                              over about 20 minutes, same X-Webhook-Id; other 4xx and TLS \
                              errors are dropped; 3 consecutive dropped webhooks disable the \
                              extension for 24 h"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header("x-pagerduty-signature")?;
        let candidates: Vec<_> = header
            .split(',')
            .filter_map(|entry| entry.trim().strip_prefix("v1="))
            .filter_map(|hex| decode::hex(hex).ok())
            .map(|signature| Candidate::new(Algorithm::HmacSha256, signature))
            .collect();
        if candidates.is_empty() {
            return Err(Rejection::MalformedSignature(
                "x-pagerduty-signature has no hex v1= signature".into(),
            ));
        }
        Ok(Plan {
            message: vec![Part::Body],
            candidates,
            timestamp: None,
            message_id: req
                .header_str("x-webhook-id")
                .map(str::trim)
                .filter(|id| !id.is_empty())
                .map(str::to_owned),
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let id = body.required_str("/event/id")?;
        let event_type = body.required_str("/event/event_type")?;
        let occurred_at = body.rfc3339("/event/occurred_at");
        let mut event = Event::new(event_type.as_ref())
            .id(id)
            .occurred_at(occurred_at);
        if let Some(kind) = body.str("/event/resource_type") {
            // The data is the resource itself (a change of its state) or an object attached
            // to it (a happening): only a change is versioned, or deletes (crate docs).
            let changed = body.str("/event/data/type").as_deref() == Some(kind.as_ref());
            let resource_id = if changed {
                body.id("/event/data/id")
            } else {
                body.id(&format!("/event/data/{kind}/id"))
            };
            if let Some(resource_id) = resource_id {
                let version = if changed {
                    body.rfc3339_millis("/event/occurred_at")
                } else {
                    None
                };
                event = event
                    .resource(kind.as_ref(), resource_id)
                    .version(version)
                    .deleted(changed && event_type.ends_with(".deleted"));
            }
        }
        if event_type == PING {
            event = event.ignore("ping");
        }
        Ok(event)
    }
}

hookhost_plugin_sdk::export_provider!(PagerDuty);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::Disposition;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/pagerduty";

    fn signed(header: &str) -> Request {
        RequestBuilder::post(URL)
            .header("X-PagerDuty-Signature", header)
            .header("X-Webhook-Id", "b6a0a1c4-7a2e-4e0f-9d1e-3c8f0f6a2b11")
            .body("{}")
            .build()
    }

    #[test]
    fn every_v1_signature_is_a_candidate() {
        let plan = PagerDuty::plan_verification(&signed("v1=00ff, v2=0102,v1=0a0b")).expect("plan");
        assert_eq!(plan.message, vec![Part::Body]);
        assert_eq!(
            plan.candidates,
            vec![
                Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff]),
                Candidate::new(Algorithm::HmacSha256, vec![0x0a, 0x0b]),
            ]
        );
        assert_eq!(plan.timestamp, None);
        assert_eq!(
            plan.message_id.as_deref(),
            Some("b6a0a1c4-7a2e-4e0f-9d1e-3c8f0f6a2b11")
        );
    }

    #[test]
    fn undecodable_entries_are_skipped_like_go_pagerduty() {
        let plan = PagerDuty::plan_verification(&signed("v1=zz,v1=00ff")).expect("plan");
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("{}").build();
        assert!(matches!(
            PagerDuty::plan_verification(&none),
            Err(Rejection::MissingSignature(_))
        ));
        for bad in ["", "00ff", "v2=00ff", "v1=zz", "sha256=00ff"] {
            assert!(
                matches!(
                    PagerDuty::plan_verification(&signed(bad)),
                    Err(Rejection::MalformedSignature(_))
                ),
                "{bad:?}"
            );
        }
    }

    fn event(body: &str) -> Result<Event, Rejection> {
        PagerDuty::describe_event(&RequestBuilder::post(URL).body(body).build())
    }

    #[test]
    fn event_maps_the_incident() {
        let event = event(
            r#"{"event":{"id":"01BWDWL3NYY7LUFPZCC28QUCMK","event_type":"incident.priority_updated",
                "resource_type":"incident","occurred_at":"2021-04-26T17:36:27.458Z",
                "data":{"id":"PGR0VU2","type":"incident"}}}"#,
        )
        .expect("event");
        assert_eq!(event.id.as_deref(), Some("01BWDWL3NYY7LUFPZCC28QUCMK"));
        assert_eq!(event.event_type, "incident.priority_updated");
        assert_eq!(event.occurred_at, Some(1_619_458_587));
        assert_eq!(event.resource_kind.as_deref(), Some("incident"));
        assert_eq!(event.resource_id.as_deref(), Some("PGR0VU2"));
        assert_eq!(event.resource_version, Some(1_619_458_587_458));
        assert!(!event.deleted);
        assert_eq!(event.disposition, Disposition::Process);
    }

    #[test]
    fn a_note_names_its_incident_and_ping_is_ignored() {
        let note = event(
            r#"{"event":{"id":"e2","event_type":"incident.annotated","resource_type":"incident",
                "data":{"id":"P2LA89X","type":"incident_note","incident":{"id":"PGR0VU2"}}}}"#,
        )
        .expect("note");
        assert_eq!(note.resource_id.as_deref(), Some("PGR0VU2"));
        assert_eq!(note.resource_version, None);
        let deleted = event(
            r#"{"event":{"id":"e3","event_type":"service.deleted","resource_type":"service",
                "data":{"id":"PF9KMXH","type":"service"}}}"#,
        )
        .expect("deleted");
        assert!(deleted.deleted);
        let ping = event(
            r#"{"event":{"id":"01FK","event_type":"pagey.ping","resource_type":"pagey",
                "data":{"message":"Hello from your friend Pagey!","type":"ping"}}}"#,
        )
        .expect("ping");
        assert_eq!(ping.disposition, Disposition::Ignore("ping".into()));
        assert_eq!(ping.resource_id, None);
    }

    /// (resource kind, resource id, version, deleted) of an event at 2021-04-26T17:36:27.458Z.
    fn described(
        event_type: &str,
        resource_type: &str,
        data: &str,
    ) -> (String, String, Option<u64>, bool) {
        let described = event(&format!(
            r#"{{"event":{{"id":"e1","event_type":"{event_type}","resource_type":"{resource_type}",
                "occurred_at":"2021-04-26T17:36:27.458Z","data":{data}}}}}"#
        ))
        .expect(event_type);
        (
            described.resource_kind.expect("a resource"),
            described.resource_id.expect("a resource id"),
            described.resource_version,
            described.deleted,
        )
    }

    const AT: Option<u64> = Some(1_619_458_587_458);
    const INCIDENT: &str = r#"{"id":"PGR0VU2","type":"incident","status":"triggered"}"#;

    #[test]
    fn incident_state_changes_are_versioned() {
        for event_type in [
            "incident.triggered",
            "incident.acknowledged",
            "incident.unacknowledged",
            "incident.escalated",
            "incident.delegated",
            "incident.reassigned",
            "incident.priority_updated",
            "incident.reopened",
            "incident.resolved",
        ] {
            assert_eq!(
                described(event_type, "incident", INCIDENT),
                ("incident".into(), "PGR0VU2".into(), AT, false),
                "{event_type}"
            );
        }
        let service = r#"{"id":"PF9KMXH","type":"service"}"#;
        assert_eq!(
            described("service.updated", "service", service),
            ("service".into(), "PF9KMXH".into(), AT, false)
        );
        assert_eq!(
            described("service.deleted", "service", service),
            ("service".into(), "PF9KMXH".into(), AT, true)
        );
    }

    #[test]
    fn happenings_in_an_incident_name_it_without_a_version() {
        let incident = r#""incident":{"id":"PGR0VU2","type":"incident_reference"}"#;
        for (event_type, data_type) in [
            ("incident.annotated", "incident_note"),
            ("incident.status_update_published", "incident_status_update"),
            ("incident.responder.added", "incident_responder"),
            ("incident.responder.replied", "incident_responder"),
            // An attached object's deletion does not delete the incident.
            ("incident.note.deleted", "incident_note"),
        ] {
            let data = format!(r#"{{"id":"P2LA89X","type":"{data_type}",{incident}}}"#);
            assert_eq!(
                described(event_type, "incident", &data),
                ("incident".into(), "PGR0VU2".into(), None, false),
                "{event_type}"
            );
        }
        // incident_responder carries no id of its own.
        let responder = format!(r#"{{"type":"incident_responder","state":"pending",{incident}}}"#);
        assert_eq!(
            described("incident.responder.added", "incident", &responder),
            ("incident".into(), "PGR0VU2".into(), None, false)
        );
    }

    #[test]
    fn bodies_without_an_event_are_rejections() {
        for bad in ["", "nope", r#"{"messages":[]}"#, r#"{"event":{"id":"e"}}"#] {
            assert!(
                matches!(event(bad), Err(Rejection::MalformedBody(_))),
                "{bad}"
            );
        }
    }
}
