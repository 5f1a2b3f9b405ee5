//! DocuSign Connect (HMAC): `X-DocuSign-Signature-1: <base64>`, `-2`, … one per key.
//!
//! The signed message is the raw body alone ("the entire body of the POST request …
//! including line endings"), HMAC-SHA256 keyed by a Connect HMAC secret key used
//! verbatim (UTF-8), the digest in standard base64. DocuSign sends one
//! `X-DocuSign-Signature-<n>` header per active key; every one of them is a candidate,
//! so any configured key may match (rotation: add the new key in DocuSign and in
//! hookhost, then remove the old one). Nothing is timestamped, so there is no replay
//! window. Sources:
//! - <https://developers.docusign.com/platform/webhooks/connect/validate> **[docs]**:
//!   the C# `ComputeHash` (`Encoding.UTF8.GetBytes(secret)`, `HMACSHA256`,
//!   `Convert.ToBase64String`) and "Compare the base64 hash to the values of the
//!   x-docusign-signature header. There will be one x-docusign-signature header value
//!   for" each key. docusign/code-examples-php `src/ConnectWebhookHMACValidation.php`
//!   **[sdk]** (official example): `base64_encode(hash_hmac('sha256', $payload,
//!   utf8_encode($secret), …))`. DocuSign publishes no test vector, so hookhost's
//!   vectors are computed.
//! - The header numbering up to 100 keys is **[2nd]** (secondary summaries of the docs);
//!   this plugin reads `-1` … `-100` ([`MAX_SIGNATURE_HEADERS`]). The
//!   `X-Authorization-Digest: HMACSHA256` header is likewise only **[2nd]** and is not
//!   checked.
//!
//! Event: only the JSON SIM format is described
//! (<https://developers.docusign.com/platform/webhooks/connect/json-sim-event-model>
//! **[docs]**): type = `event` (`envelope-completed`), occurred_at =
//! `generatedDateTime`; resource = envelope `data.envelopeId`, deleted for an event
//! ending in `-deleted`. XML or legacy aggregate messages (no `event`) are
//! `Unsupported`.
//!
//! Version: `generatedDateTime` in unix millis, only for the events that report the
//! envelope's new status ([`ENVELOPE_STATUSES`]: `envelope-created`, `-sent`,
//! `-delivered`, `-completed`, `-declined`, `-voided`, `-deleted`), so that a late
//! `envelope-sent` after `envelope-completed` is `stale_version`, not delivered. Every
//! other event names the envelope without a version:
//! - `recipient-*` events (`recipient-sent`, `-delivered`, `-completed`, `-declined`,
//!   `-autoresponded`, `-authenticationfailed`, …) are happenings of one recipient each:
//!   recipient 1 signing and recipient 2 signing are independent, and one recipient can
//!   have the same event more than once (a resent notification, a failed authentication
//!   per attempt). A version from their time would make a late retry of one stale against
//!   any later event of the envelope, and it would be lost. They are not a resource of
//!   their own either (kind `recipient`, say): naming the envelope, they are delivered one
//!   at a time with its status events, never beside them (as a resource of their own, the
//!   last signer's `recipient-completed` and the `envelope-completed` it caused would go
//!   out at once, in either order), and after an `envelope-deleted` the host keeps them
//!   undelivered (`resource_deleted`), as it does the envelope's.
//! - `envelope-resent`, `envelope-corrected`, `envelope-purge`, `envelope-discard` and
//!   any event this plugin does not know: not a new status of the envelope, or not known
//!   to be one, so none is refused as stale.
//!
//! The message carries no event id, and its `retryCount` changes between attempts, so a
//! hash of the body would not be stable across retries: the id is built from the fields
//! that name the event,
//! `{configurationId}:{event}:{envelopeId}[:{recipientId}]:{generatedDateTime}`
//! (whether DocuSign keeps `generatedDateTime` on a retry is **[unconfirmed]**; if it
//! does not, each attempt gets its own id, as a body hash would).
//!
//! Retries are **[unconfirmed]**: Connect redelivers failed messages only when the
//! configuration asks for acknowledgement ("Require Acknowledgement"); secondary sources
//! disagree on the schedule.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    decode,
};

/// Highest `X-DocuSign-Signature-<n>` read: one header per active HMAC key, and
/// DocuSign allows up to 100 keys **[2nd]**. Bounds the MACs the host computes.
pub const MAX_SIGNATURE_HEADERS: u32 = 100;

const SIGNATURE_PREFIX: &str = "x-docusign-signature-";

/// The events that report an envelope's new status: the only ones that carry a version
/// (crate docs).
pub const ENVELOPE_STATUSES: &[&str] = &[
    "envelope-created",
    "envelope-sent",
    "envelope-delivered",
    "envelope-completed",
    "envelope-declined",
    "envelope-voided",
    "envelope-deleted",
];

pub struct DocuSign;

impl Provider for DocuSign {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "docusign".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "DocuSign Connect".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "unconfirmed: failed messages are redelivered only when the \
                              Connect configuration has Require Acknowledgement enabled \
                              (retryCount in the body counts attempts); the schedule is not \
                              documented in the sources read"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let mut numbered: Vec<(u32, &[u8])> = req
            .headers
            .iter()
            .filter_map(|(name, value)| {
                let n = name.to_ascii_lowercase();
                let n: u32 = n.strip_prefix(SIGNATURE_PREFIX)?.parse().ok()?;
                (1..=MAX_SIGNATURE_HEADERS)
                    .contains(&n)
                    .then_some((n, value.as_slice()))
            })
            .collect();
        if numbered.is_empty() {
            return Err(Rejection::MissingSignature(format!("{SIGNATURE_PREFIX}1")));
        }
        numbered.sort_by_key(|(n, _)| *n);
        let candidates = numbered
            .into_iter()
            .map(|(n, value)| {
                let text = core::str::from_utf8(value).map_err(|_| {
                    Rejection::MalformedSignature(format!("{SIGNATURE_PREFIX}{n} is not UTF-8"))
                })?;
                Ok(Candidate::new(
                    Algorithm::HmacSha256,
                    decode::base64(text.trim())?,
                ))
            })
            .collect::<Result<Vec<_>, Rejection>>()?;
        Ok(Plan {
            message: vec![Part::Body],
            candidates,
            timestamp: None,
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        if req.body.trim_ascii_start().starts_with(b"<") {
            return Err(Rejection::Unsupported(
                "XML Connect messages are not described; use the JSON SIM format".into(),
            ));
        }
        let body = req.json()?;
        let event_type = body.str("/event").ok_or_else(|| {
            Rejection::Unsupported("not a JSON SIM Connect message (no event)".into())
        })?;
        let generated = body.str("/generatedDateTime");
        let generated = generated.as_deref();
        let mut event = Event::new(event_type.as_ref())
            .occurred_at(generated.and_then(decode::rfc3339_seconds));
        let envelope = body.id("/data/envelopeId");
        if let (Some(envelope), Some(generated)) = (&envelope, generated) {
            let mut id = format!(
                "{}:{event_type}:{envelope}",
                body.id("/configurationId").unwrap_or_default()
            );
            if let Some(recipient) = body.id("/data/recipientId") {
                id = format!("{id}:{recipient}");
            }
            event = event.id(format!("{id}:{generated}"));
        }
        if let Some(envelope) = envelope {
            // Status events are versioned; recipient events and the rest are not (crate docs).
            let version = if ENVELOPE_STATUSES.contains(&event_type.as_ref()) {
                generated.and_then(decode::rfc3339_millis)
            } else {
                None
            };
            event = event
                .resource("envelope", envelope)
                .version(version)
                .deleted(event_type.ends_with("-deleted"));
        }
        Ok(event)
    }
}

hookhost_plugin_sdk::export_provider!(DocuSign);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/docusign";

    #[test]
    fn every_numbered_signature_header_is_a_candidate_in_order() {
        let req = RequestBuilder::post(URL)
            .header("X-DocuSign-Signature-2", "AQI=")
            .header("Content-Type", "application/json")
            .header("x-docusign-signature-1", " AP8= ")
            .header("X-DocuSign-Signature-101", "AwQ=")
            .header("X-DocuSign-Signature-0", "AwQ=")
            .header("X-DocuSign-Signature-x", "AwQ=")
            .header("X-DocuSign-Signature", "AwQ=")
            .body("{}")
            .build();
        let plan = DocuSign::plan_verification(&req).expect("plan");
        assert_eq!(plan.message, vec![Part::Body]);
        assert_eq!(plan.timestamp, None);
        assert_eq!(
            plan.candidates,
            vec![
                Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff]),
                Candidate::new(Algorithm::HmacSha256, vec![0x01, 0x02]),
            ]
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL)
            .header("X-DocuSign-Signature", "AP8=")
            .body("{}")
            .build();
        assert_eq!(
            DocuSign::plan_verification(&none),
            Err(Rejection::MissingSignature("x-docusign-signature-1".into()))
        );
        for bad in [&b"00ff*"[..], &b"\xff\xfe"[..]] {
            let req = RequestBuilder::post(URL)
                .header("X-DocuSign-Signature-1", "AP8=")
                .header("X-DocuSign-Signature-2", bad)
                .build();
            assert!(matches!(
                DocuSign::plan_verification(&req),
                Err(Rejection::MalformedSignature(_))
            ));
        }
    }

    fn describe(body: &str) -> Result<Event, Rejection> {
        DocuSign::describe_event(&RequestBuilder::post(URL).body(body).build())
    }

    #[test]
    fn json_sim_event_maps_envelope_and_a_retry_stable_id() {
        let body = |retry: u32| {
            format!(
                r#"{{"event":"envelope-completed","apiVersion":"v2.1",
                "uri":"/restapi/v2.1/accounts/a1/envelopes/e1","retryCount":{retry},
                "configurationId":10418837,"generatedDateTime":"2024-06-12T18:40:04.2500000Z",
                "data":{{"accountId":"a1","userId":"u1","envelopeId":"e1"}}}}"#
            )
        };
        let first = describe(&body(0)).expect("event");
        assert_eq!(
            first.id.as_deref(),
            Some("10418837:envelope-completed:e1:2024-06-12T18:40:04.2500000Z")
        );
        assert_eq!(first.event_type, "envelope-completed");
        assert_eq!(first.occurred_at, Some(1_718_217_604));
        assert_eq!(first.resource_kind.as_deref(), Some("envelope"));
        assert_eq!(first.resource_id.as_deref(), Some("e1"));
        assert_eq!(first.resource_version, Some(1_718_217_604_250));
        assert!(!first.deleted);
        assert_eq!(describe(&body(3)).expect("retry").id, first.id);
    }

    #[test]
    fn recipient_events_name_the_recipient_and_deletions_are_marked() {
        let recipient = describe(
            r#"{"event":"recipient-completed","configurationId":1,
                "generatedDateTime":"2024-06-12T18:40:04Z",
                "data":{"envelopeId":"e1","recipientId":"2"}}"#,
        )
        .expect("event");
        assert_eq!(
            recipient.id.as_deref(),
            Some("1:recipient-completed:e1:2:2024-06-12T18:40:04Z")
        );
        assert_eq!(recipient.resource_kind.as_deref(), Some("envelope"));
        assert_eq!(recipient.resource_id.as_deref(), Some("e1"));
        assert_eq!(recipient.resource_version, None);
        let deleted =
            describe(r#"{"event":"envelope-deleted","data":{"envelopeId":"e1"}}"#).expect("event");
        assert!(deleted.deleted);
        assert_eq!(deleted.id, None, "no time: the host derives the id");
        assert_eq!(deleted.resource_version, None);
    }

    /// (resource id, version, deleted) of an event generated at 2024-06-12T18:40:04.25Z.
    fn described(event: &str, recipient: Option<&str>) -> (String, Option<u64>, bool) {
        let recipient = recipient
            .map(|r| format!(r#","recipientId":"{r}""#))
            .unwrap_or_default();
        let event = describe(&format!(
            r#"{{"event":"{event}","configurationId":1,
                "generatedDateTime":"2024-06-12T18:40:04.2500000Z",
                "data":{{"envelopeId":"e1"{recipient}}}}}"#
        ))
        .expect(event);
        assert_eq!(event.resource_kind.as_deref(), Some("envelope"));
        (
            event.resource_id.expect("an envelope"),
            event.resource_version,
            event.deleted,
        )
    }

    const AT: Option<u64> = Some(1_718_217_604_250);

    #[test]
    fn only_envelope_status_events_are_versioned() {
        for status in ENVELOPE_STATUSES {
            assert_eq!(
                described(status, None),
                ("e1".into(), AT, *status == "envelope-deleted"),
                "{status}"
            );
        }
        for other in [
            "envelope-resent",
            "envelope-corrected",
            "envelope-purge",
            "envelope-discard",
            "envelope-something-new",
        ] {
            assert_eq!(
                described(other, None),
                ("e1".into(), None, false),
                "{other}"
            );
        }
    }

    #[test]
    fn recipient_events_name_the_envelope_without_a_version() {
        // Independent recipients, and repeated events of one: none may be stale.
        for (event, recipient) in [
            ("recipient-sent", "1"),
            ("recipient-delivered", "1"),
            ("recipient-completed", "1"),
            ("recipient-sent", "2"),
            ("recipient-completed", "2"),
            ("recipient-declined", "3"),
            ("recipient-resent", "2"),
            ("recipient-autoresponded", "2"),
            ("recipient-authenticationfailed", "2"),
            ("recipient-finish-later", "2"),
        ] {
            assert_eq!(
                described(event, Some(recipient)),
                ("e1".into(), None, false),
                "{event} {recipient}"
            );
        }
    }

    #[test]
    fn other_formats_are_unsupported_and_junk_is_malformed() {
        for other in [
            "<?xml version=\"1.0\"?><DocuSignEnvelopeInformation/>",
            r#"{"status":"completed","envelopeId":"e1"}"#,
        ] {
            assert!(
                matches!(describe(other), Err(Rejection::Unsupported(_))),
                "{other}"
            );
        }
        assert!(matches!(
            describe("envelope completed"),
            Err(Rejection::MalformedBody(_))
        ));
    }
}
