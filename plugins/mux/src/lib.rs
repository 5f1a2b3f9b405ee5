//! Mux: `Mux-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]`.
//!
//! The signed message is `{t}.{raw body}`, HMAC-SHA256 keyed by the webhook's signing
//! secret used verbatim (UTF-8), the digest in hex. Only the `v1` scheme exists; every
//! `v1` entry is a candidate. The timestamp is accepted within 300 s by default.
//! Sources:
//! - <https://www.mux.com/docs/core/verify-webhook-signatures> **[docs]**: header
//!   `mux-signature`, "the timestamp is prefixed by t= and the signature is prefixed by a
//!   scheme … Currently, the only valid signature scheme is v1"; payload = timestamp +
//!   "." + raw body; "By default, our SDKs allow a tolerance of 5 minutes". The signing
//!   secret differs per webhook endpoint.
//! - npm `@mux/mux-node` 15.3.0 `src/resources/webhooks/webhooks.ts` **[sdk]**: splits
//!   on `,` then `=`, `t` through `parseInt`, collects every `v1`, HMAC-SHA256 hex over
//!   `` `${timestamp}.${body}` `` with the secret's UTF-8 bytes, accepts when any `v1`
//!   matches, then rejects a timestamp more than 300 s old (the SDK checks only the
//!   past; hookhost checks both directions). Its test
//!   `tests/api-resources/webhooks.test.ts` carries a published vector, including a
//!   header whose first `v1` is not hex (`v1=invalid-sig,v1=<hex>`) and must still
//!   verify: `v1` entries that are not hex are skipped, and only when none is left is
//!   the header malformed. The SDK signs the parsed number; so does this plugin (`t` is
//!   re-formatted in decimal).
//! - <https://www.mux.com/docs/core/listen-for-webhooks> **[docs]**: without a 2xx
//!   answer Mux keeps trying "for the next 24 hours (with an increasing delay between
//!   attempts)"; duplicates may arrive even after a 2xx.
//!
//! Event (mux-node `BaseWebhookEvent` **[sdk]**): id = `id`, type = `type`
//! (`video.asset.ready`), occurred_at = `created_at`; resource = `object.type` /
//! `object.id`, version = `created_at` in unix millis, deleted when the type ends with
//! `.{object.type}.deleted` (`video.asset.deleted`, not `video.asset.track.deleted`).

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    decode,
};

pub struct Mux;

impl Provider for Mux {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "mux".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Mux".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: Some(300),
            retry_behaviour: "without a 2xx answer Mux keeps retrying for 24 hours with an \
                              increasing delay; duplicates may arrive even after a 2xx"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header("mux-signature")?;
        let mut timestamp = None;
        let mut candidates = Vec::new();
        let mut v1_seen = false;
        for (key, value) in decode::key_values(header, ',') {
            match key {
                "t" => timestamp = Some(decode::unix_seconds(value)?),
                "v1" => {
                    v1_seen = true;
                    // The SDK compares strings, so an entry that is not hex simply
                    // never matches; skip it rather than refuse the whole header.
                    if let Ok(signature) = decode::hex(value) {
                        candidates.push(Candidate::new(Algorithm::HmacSha256, signature));
                    }
                }
                _ => {} // no other scheme is defined
            }
        }
        let timestamp = timestamp
            .ok_or_else(|| Rejection::MalformedSignature("mux-signature has no t=".into()))?;
        if candidates.is_empty() {
            return Err(if v1_seen {
                Rejection::MalformedSignature("no mux-signature v1 is hex".into())
            } else {
                Rejection::MissingSignature("mux-signature v1".into())
            });
        }
        Ok(Plan {
            message: vec![Part::Text(format!("{timestamp}.")), Part::Body],
            candidates,
            timestamp: Some(timestamp),
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let id = body.required_str("/id")?;
        let event_type = body.required_str("/type")?;
        let mut event = Event::new(event_type.as_ref())
            .id(id)
            .occurred_at(body.rfc3339("/created_at"));
        if let (Some(kind), Some(object_id)) = (body.str("/object/type"), body.id("/object/id")) {
            let deleted = event_type.ends_with(&format!(".{kind}.deleted"));
            event = event
                .resource(kind, object_id)
                .version(body.rfc3339_millis("/created_at"))
                .deleted(deleted);
        }
        Ok(event)
    }
}

hookhost_plugin_sdk::export_provider!(Mux);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/mux";

    fn plan(header: &str) -> Result<Plan, Rejection> {
        let req = RequestBuilder::post(URL)
            .header("Mux-Signature", header)
            .body("{}")
            .build();
        Mux::plan_verification(&req)
    }

    #[test]
    fn plan_signs_timestamp_dot_body_and_keeps_every_v1() {
        let plan = plan("t=1565125718,v2=aa,v1=00ff,v1=0102").expect("plan");
        assert_eq!(
            plan.message,
            vec![Part::Text("1565125718.".into()), Part::Body]
        );
        assert_eq!(plan.timestamp, Some(1_565_125_718));
        let sigs: Vec<_> = plan.candidates.into_iter().map(|c| c.signature).collect();
        assert_eq!(sigs, vec![vec![0x00, 0xff], vec![0x01, 0x02]]);
    }

    #[test]
    fn non_hex_v1_entries_are_skipped_while_another_remains() {
        let plan = plan("t=1565125718,v1=invalid-sig,v1=00ff").expect("plan");
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
        assert!(matches!(
            super::tests::plan("t=1,v1=invalid-sig"),
            Err(Rejection::MalformedSignature(_))
        ));
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("{}").build();
        assert_eq!(
            Mux::plan_verification(&none),
            Err(Rejection::MissingSignature("mux-signature".into()))
        );
        assert_eq!(
            plan("t=1565125718,v2=00ff"),
            Err(Rejection::MissingSignature("mux-signature v1".into()))
        );
        for bad in ["00ff", "v1=00ff", "t=soon,v1=00ff"] {
            assert!(
                matches!(plan(bad), Err(Rejection::MalformedSignature(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn event_maps_id_type_object_and_created_at() {
        let req = RequestBuilder::post(URL)
            .body(
                r#"{"type":"video.asset.deleted","object":{"type":"asset","id":"0201p02fGKPE"},
                    "id":"3a56ac3d-33da-4366-855b-f592d898409d",
                    "environment":{"name":"Production","id":"j0863n"},"data":{"id":"0201p02fGKPE"},
                    "created_at":"2024-06-12T18:40:04.250000Z","attempts":[]}"#,
            )
            .build();
        let event = Mux::describe_event(&req).expect("event");
        assert_eq!(
            event.id.as_deref(),
            Some("3a56ac3d-33da-4366-855b-f592d898409d")
        );
        assert_eq!(event.event_type, "video.asset.deleted");
        assert_eq!(event.occurred_at, Some(1_718_217_604));
        assert_eq!(event.resource_kind.as_deref(), Some("asset"));
        assert_eq!(event.resource_id.as_deref(), Some("0201p02fGKPE"));
        assert_eq!(event.resource_version, Some(1_718_217_604_250));
        assert!(event.deleted);
    }

    #[test]
    fn a_deleted_sub_object_does_not_delete_the_resource() {
        let req = RequestBuilder::post(URL)
            .body(
                r#"{"type":"video.asset.track.deleted","object":{"type":"asset","id":"a1"},
                    "id":"e1","created_at":"2024-06-12T18:40:04Z"}"#,
            )
            .build();
        let event = Mux::describe_event(&req).expect("event");
        assert!(!event.deleted);
        for bad in ["nope", r#"{"type":"video.asset.ready"}"#, r#"{"id":"e1"}"#] {
            let req = RequestBuilder::post(URL).body(bad).build();
            assert!(
                matches!(Mux::describe_event(&req), Err(Rejection::MalformedBody(_))),
                "{bad}"
            );
        }
    }
}
