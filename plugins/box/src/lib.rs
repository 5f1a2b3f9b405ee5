//! Box (webhooks v2): `BOX-SIGNATURE-PRIMARY`, `BOX-SIGNATURE-SECONDARY` (base64),
//! `BOX-DELIVERY-TIMESTAMP` (RFC 3339), `BOX-SIGNATURE-VERSION: 1`,
//! `BOX-SIGNATURE-ALGORITHM: HmacSHA256`.
//!
//! The signed message is the raw body followed by the bytes of the
//! `BOX-DELIVERY-TIMESTAMP` header, HMAC-SHA256 keyed by the application's primary or
//! secondary signature key used verbatim (UTF-8), the digest in standard base64. The
//! endpoint's secrets are the two keys; both headers are candidates and the host tries
//! every key against every candidate, so a rotated key keeps verifying whichever slot it
//! sits in (Box's SDKs pair primary with primary only; this is slightly more lenient,
//! and no less safe: each key still has to produce the signature). The delivery
//! timestamp is accepted within 600 s. Sources:
//! - <https://developer.box.com/guides/webhooks/v2/signatures-v2/> (box/developer.box.com
//!   `content/guides/webhooks/v2/signatures-v2.md`) **[docs]**: "append the bytes of the
//!   body of the payload first and then the bytes of the timestamp found in the
//!   BOX-DELIVERY-TIMESTAMP header", base64 digest, "not older than ten minutes", two
//!   simultaneous keys for rotation.
//! - <https://developer.box.com/guides/webhooks/v2/> (`…/v2/index.md`) **[docs]**: the
//!   header set (`BOX-SIGNATURE-VERSION` "always `1`", `BOX-SIGNATURE-ALGORITHM` "always
//!   `HmacSHA256`"); `BOX-DELIVERY-ID` changes on every retry "while the ID in the body
//!   of the payload remains the same"; a 2xx within 30 s succeeds, otherwise up to 10
//!   retries, the first 5 minutes after the failure, then exponential backoff.
//! - pip `boxsdk` 10.18.0 (`box_sdk_gen` `WebhooksManager.validate_message`,
//!   `compute_webhook_signature`) **[sdk]**: no signature unless version is `1` and
//!   algorithm `HmacSHA256`; HMAC over body then timestamp; valid when
//!   `now - 600 <= timestamp <= now` (the SDK also retries over a re-escaped body for
//!   callers that re-serialised the JSON; hookhost has the raw bytes and does not).
//!   box-python-sdk `test/unit/object/test_webhook.py` `test_validate_message` carries a
//!   published vector.
//!
//! Missing `BOX-SIGNATURE-VERSION`, `-ALGORITHM` or `BOX-DELIVERY-TIMESTAMP` →
//! `MissingSignature` (the SDK refuses such messages too); another version or algorithm
//! → `Unsupported`; neither signature header → `MissingSignature`. An empty signature
//! header is skipped (what Box sends for a key slot never generated is **[unconfirmed]**).
//!
//! Event: id = body `id` (constant across retries); type = `trigger`
//! (`FILE.UPLOADED`), occurred_at = `created_at`; resource = `source.type` /
//! `source.id`, deleted when the trigger is `<SOURCE TYPE>.DELETED` (`FILE.DELETED` for a
//! file; trashing is not deletion).
//!
//! Version: `created_at` (when the event was triggered) in unix millis, only when the
//! trigger changes its source: the trigger names the source's own type and one of the
//! actions in [`CHANGES`] (`FILE.UPLOADED`, `FILE.RENAMED`, `FILE.MOVED`, `FILE.TRASHED`,
//! `FILE.RESTORED`, `FILE.LOCKED`, `FILE.UNLOCKED`, `FILE.DELETED`, the same for a folder,
//! `COMMENT.UPDATED` for a comment, …), so that a later change supersedes an earlier one.
//! Every other event is a happening, worth delivering whatever came after it, and names
//! its source without a version: `FILE.DOWNLOADED`, `FILE.PREVIEWED`,
//! `FOLDER.DOWNLOADED` and `FILE.COPIED` / `FOLDER.COPIED` (a copy does not change what
//! was copied) leave the item as it was, and a trigger about another object than its
//! source (`SHARED_LINK.*`, `SIGN_REQUEST.*`, or `COMMENT.*` when the source is the file
//! commented on) is not a state of that source. Box's payload reference describes
//! `source` as the file or folder; whether a comment's or a collaboration's triggers carry
//! that object itself instead is **[unconfirmed]**, and the rule above reads either
//! correctly (<https://developer.box.com/reference/resources/webhook-invocation/>,
//! <https://developer.box.com/guides/webhooks/triggers/>). Box retries a delivery up to
//! 10 times with backoff, so a retry can arrive after a later event: with the event time
//! as its version, a download retried after a rename would be `stale_version` and never
//! delivered. Without one it is delivered, and the host still delivers one item's events
//! one at a time. A trigger this plugin does not know gets no version either.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    decode,
};

/// Actions that change the trigger's source when the trigger names the source's own type
/// (`FILE.RENAMED` for a file): the events that carry a version (crate docs).
pub const CHANGES: &[&str] = &[
    "CREATED", "UPLOADED", "UPDATED", "RENAMED", "MOVED", "TRASHED", "RESTORED", "LOCKED",
    "UNLOCKED", "DELETED",
];

const SIGNATURE_HEADERS: [&str; 2] = ["box-signature-primary", "box-signature-secondary"];
const TIMESTAMP_HEADER: &str = "box-delivery-timestamp";

/// Named so as not to shadow `std::boxed::Box` in the generated export glue.
pub struct BoxWebhooks;

impl Provider for BoxWebhooks {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "box".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Box".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: Some(600),
            retry_behaviour: "a 2xx within 30 s succeeds; otherwise up to 10 retries, the \
                              first 5 minutes after the failure, then exponential backoff; \
                              BOX-DELIVERY-ID changes per attempt, the body id does not"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        expect_header(req, "box-signature-version", "1")?;
        expect_header(req, "box-signature-algorithm", "HmacSHA256")?;
        let mut candidates = Vec::new();
        for name in SIGNATURE_HEADERS {
            if let Some(value) = req.optional_signature_header(name)?
                && !value.is_empty()
            {
                candidates.push(Candidate::new(
                    Algorithm::HmacSha256,
                    decode::base64(value)?,
                ));
            }
        }
        if candidates.is_empty() {
            return Err(Rejection::MissingSignature(SIGNATURE_HEADERS[0].into()));
        }
        let stamp = req.signature_header(TIMESTAMP_HEADER)?;
        let timestamp = decode::rfc3339_seconds(stamp).ok_or_else(|| {
            Rejection::MalformedSignature(format!("{TIMESTAMP_HEADER} is not RFC 3339"))
        })?;
        Ok(Plan {
            // The header's exact bytes are what Box signed.
            message: vec![Part::Body, Part::Header(TIMESTAMP_HEADER.into())],
            candidates,
            timestamp: Some(timestamp),
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let trigger = body.required_str("/trigger")?;
        let mut event = Event::new(trigger.as_ref())
            .maybe_id(body.id("/id"))
            .occurred_at(body.rfc3339("/created_at"));
        if let (Some(kind), Some(id)) = (body.str("/source/type"), body.id("/source/id")) {
            // What the trigger does to its source, when it names the source's own type.
            let action = trigger
                .split_once('.')
                .filter(|(object, _)| *object == kind.to_ascii_uppercase())
                .map(|(_, action)| action);
            // Only a change of the source is versioned; happenings are not (crate docs).
            let version = if action.is_some_and(|a| CHANGES.contains(&a)) {
                body.rfc3339_millis("/created_at")
            } else {
                None
            };
            event = event
                .resource(kind, id)
                .version(version)
                .deleted(action == Some("DELETED"));
        }
        Ok(event)
    }
}

/// A scheme header Box always sends with one fixed value.
fn expect_header(req: &Request, name: &str, expected: &str) -> Result<(), Rejection> {
    let value = req.signature_header(name)?;
    if value == expected {
        Ok(())
    } else {
        Err(Rejection::Unsupported(format!(
            "{name} {value:?} (only {expected:?} is defined)"
        )))
    }
}

hookhost_plugin_sdk::export_provider!(BoxWebhooks);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/box";

    fn headers(primary: Option<&str>, secondary: Option<&str>) -> RequestBuilder {
        let mut b = RequestBuilder::post(URL)
            .header("BOX-DELIVERY-ID", "673a081b-bb4b-4d45-b4f1-4131a29c1d07")
            .header("BOX-DELIVERY-TIMESTAMP", "2016-07-11T10:10:33-07:00")
            .header("BOX-SIGNATURE-VERSION", "1")
            .header("BOX-SIGNATURE-ALGORITHM", "HmacSHA256");
        if let Some(p) = primary {
            b = b.header("BOX-SIGNATURE-PRIMARY", p);
        }
        if let Some(s) = secondary {
            b = b.header("BOX-SIGNATURE-SECONDARY", s);
        }
        b.body("{}")
    }

    #[test]
    fn plan_signs_body_then_timestamp_with_both_signatures() {
        let plan = BoxWebhooks::plan_verification(&headers(Some("AP8="), Some("AQI=")).build())
            .expect("plan");
        assert_eq!(
            plan.message,
            vec![Part::Body, Part::Header("box-delivery-timestamp".into())]
        );
        assert_eq!(plan.timestamp, Some(1_468_257_033));
        assert_eq!(
            plan.candidates,
            vec![
                Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff]),
                Candidate::new(Algorithm::HmacSha256, vec![0x01, 0x02]),
            ]
        );
        let secondary_only =
            BoxWebhooks::plan_verification(&headers(Some(""), Some("AQI=")).build()).expect("plan");
        assert_eq!(secondary_only.candidates.len(), 1);
    }

    #[test]
    fn missing_headers_are_missing_signatures() {
        assert_eq!(
            BoxWebhooks::plan_verification(&headers(None, None).build()),
            Err(Rejection::MissingSignature("box-signature-primary".into()))
        );
        let bare = RequestBuilder::post(URL)
            .header("BOX-SIGNATURE-PRIMARY", "AP8=")
            .build();
        assert!(matches!(
            BoxWebhooks::plan_verification(&bare),
            Err(Rejection::MissingSignature(_))
        ));
        let no_time = RequestBuilder::post(URL)
            .header("BOX-SIGNATURE-VERSION", "1")
            .header("BOX-SIGNATURE-ALGORITHM", "HmacSHA256")
            .header("BOX-SIGNATURE-PRIMARY", "AP8=")
            .build();
        assert_eq!(
            BoxWebhooks::plan_verification(&no_time),
            Err(Rejection::MissingSignature("box-delivery-timestamp".into()))
        );
    }

    #[test]
    fn unknown_versions_are_unsupported_and_bad_values_malformed() {
        let mut v2 = headers(Some("AP8="), None).build();
        for (name, value) in &mut v2.headers {
            if name == "box-signature-version" {
                *value = b"2".to_vec();
            }
        }
        assert!(matches!(
            BoxWebhooks::plan_verification(&v2),
            Err(Rejection::Unsupported(_))
        ));
        let not_b64 = headers(Some("not*base64"), None).build();
        assert!(matches!(
            BoxWebhooks::plan_verification(&not_b64),
            Err(Rejection::MalformedSignature(_))
        ));
        let mut unix_time = headers(Some("AP8="), None).build();
        unix_time
            .headers
            .retain(|(n, _)| n != "box-delivery-timestamp");
        unix_time
            .headers
            .push(("box-delivery-timestamp".into(), b"1468257033".to_vec()));
        assert!(matches!(
            BoxWebhooks::plan_verification(&unix_time),
            Err(Rejection::MalformedSignature(_))
        ));
    }

    #[test]
    fn event_maps_trigger_source_and_body_id() {
        let req = RequestBuilder::post(URL)
            .body(
                r#"{"type":"webhook_event","id":"eb0c4e06-751f-442c-86f8-fd5bb404dbec",
                    "created_at":"2016-07-11T10:10:32-07:00","trigger":"FILE.DELETED",
                    "webhook":{"id":"53","type":"webhook"},
                    "source":{"id":"73835521473","type":"file","name":"Test-Image-3.png"}}"#,
            )
            .build();
        let event = BoxWebhooks::describe_event(&req).expect("event");
        assert_eq!(
            event.id.as_deref(),
            Some("eb0c4e06-751f-442c-86f8-fd5bb404dbec")
        );
        assert_eq!(event.event_type, "FILE.DELETED");
        assert_eq!(event.occurred_at, Some(1_468_257_032));
        assert_eq!(event.resource_kind.as_deref(), Some("file"));
        assert_eq!(event.resource_id.as_deref(), Some("73835521473"));
        assert_eq!(event.resource_version, Some(1_468_257_032_000));
        assert!(event.deleted);
    }

    /// (resource kind, resource id, version, deleted) of an event at 2016-07-11T10:10:32-07:00.
    fn described(trigger: &str, source: &str) -> (String, String, Option<u64>, bool) {
        let req = RequestBuilder::post(URL)
            .body(format!(
                r#"{{"type":"webhook_event","id":"e1","created_at":"2016-07-11T10:10:32-07:00",
                    "trigger":"{trigger}","source":{source}}}"#
            ))
            .build();
        let event = BoxWebhooks::describe_event(&req).expect(trigger);
        (
            event.resource_kind.expect("a resource"),
            event.resource_id.expect("a resource id"),
            event.resource_version,
            event.deleted,
        )
    }

    const AT: Option<u64> = Some(1_468_257_032_000);

    #[test]
    fn changes_of_the_source_are_versioned() {
        let file = r#"{"id":"7","type":"file","name":"a.png"}"#;
        for trigger in [
            "FILE.UPLOADED",
            "FILE.RENAMED",
            "FILE.MOVED",
            "FILE.TRASHED",
            "FILE.RESTORED",
            "FILE.LOCKED",
            "FILE.UNLOCKED",
        ] {
            assert_eq!(
                described(trigger, file),
                ("file".into(), "7".into(), AT, false),
                "{trigger}"
            );
        }
        assert_eq!(
            described("FILE.DELETED", file),
            ("file".into(), "7".into(), AT, true)
        );
        let folder = r#"{"id":"8","type":"folder","name":"Webhooks"}"#;
        for trigger in [
            "FOLDER.CREATED",
            "FOLDER.RENAMED",
            "FOLDER.MOVED",
            "FOLDER.TRASHED",
            "FOLDER.RESTORED",
        ] {
            assert_eq!(
                described(trigger, folder),
                ("folder".into(), "8".into(), AT, false),
                "{trigger}"
            );
        }
        // A comment's own events change the comment.
        let comment = r#"{"id":"9","type":"comment","message":"Looks good"}"#;
        assert_eq!(
            described("COMMENT.UPDATED", comment),
            ("comment".into(), "9".into(), AT, false)
        );
        assert_eq!(
            described("COMMENT.DELETED", comment),
            ("comment".into(), "9".into(), AT, true)
        );
    }

    #[test]
    fn happenings_name_the_source_without_a_version() {
        let file = r#"{"id":"7","type":"file","name":"a.png"}"#;
        for trigger in [
            "FILE.DOWNLOADED",
            "FILE.PREVIEWED",
            "FILE.COPIED",
            // Triggers about another object than the file they name.
            "SHARED_LINK.CREATED",
            "SHARED_LINK.DELETED",
            "COMMENT.CREATED",
            "COMMENT.DELETED",
            "SIGN_REQUEST.COMPLETED",
            // A trigger this plugin does not know.
            "FILE.SCANNED",
            "DOCGEN_DOCUMENT_GENERATION_SUCCEEDED",
        ] {
            assert_eq!(
                described(trigger, file),
                ("file".into(), "7".into(), None, false),
                "{trigger}"
            );
        }
        let folder = r#"{"id":"8","type":"folder","name":"Webhooks"}"#;
        for trigger in ["FOLDER.DOWNLOADED", "FOLDER.COPIED", "FILE.DELETED"] {
            assert_eq!(
                described(trigger, folder),
                ("folder".into(), "8".into(), None, false),
                "{trigger}"
            );
        }
    }

    #[test]
    fn trashing_is_not_deleting_and_bad_bodies_are_rejections() {
        let trashed = RequestBuilder::post(URL)
            .body(r#"{"trigger":"FILE.TRASHED","source":{"id":"1","type":"file"}}"#)
            .build();
        let event = BoxWebhooks::describe_event(&trashed).expect("event");
        assert!(!event.deleted);
        assert_eq!(event.id, None);
        for bad in ["nope", r#"{"type":"webhook_event","id":"e1"}"#] {
            let req = RequestBuilder::post(URL).body(bad).build();
            assert!(
                matches!(
                    BoxWebhooks::describe_event(&req),
                    Err(Rejection::MalformedBody(_))
                ),
                "{bad}"
            );
        }
    }
}
