//! Bitbucket Cloud: `X-Hub-Signature: sha256=<hex>`.
//!
//! When a webhook has a secret, Bitbucket Cloud signs the raw body with HMAC-SHA256
//! keyed by the secret's UTF-8 bytes and sends the hex digest behind `sha256=`.
//! **[2nd]**: Atlassian announces Cloud webhook secrets
//! (https://www.atlassian.com/blog/bitbucket/enhanced-webhook-security) and documents
//! the same `X-Hub-Signature: sha256=<hex>` HMAC for Bitbucket Data Center
//! (https://confluence.atlassian.com/bitbucketserver/event-payload-938025882.html); the
//! Cloud header format itself was read only in secondary sources that agree, and no
//! Atlassian SDK verifies it. A webhook without a secret sends no signature: such
//! deliveries are refused as `MissingSignature`. Nothing is timestamped, so there is no
//! replay window; Bitbucket keeps one secret per webhook, so rotation is receiver-side
//! (configure the old and the new secret while switching).
//!
//! Event (payloads: https://support.atlassian.com/bitbucket-cloud/docs/event-payloads/):
//! type = `X-Event-Key` (`repo:push`, `pullrequest:created`…), id = `X-Request-UUID`,
//! which is also the plan's message id. Both header names and that `X-Request-UUID`
//! stays the same on Bitbucket's retries are **[2nd]**; Bitbucket's own troubleshooting
//! page (https://support.atlassian.com/bitbucket-cloud/docs/troubleshoot-webhooks/) names
//! `X-Attempt-Number` as the attempt count. Either header missing → `MalformedBody`. The resource is picked by the event
//! key: `*comment*` events → `comment` (`comment.id`); `pullrequest:*` → `pullrequest`
//! and `issue:*` → `issue`, both numbered per repository, so their id is
//! `{repository.full_name}#{id}`; `repo:*` → `repository` (`repository.uuid`). The
//! version is the object's `updated_on` in unix millis; a key ending in `deleted`
//! marks it deleted.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, Json, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection,
    Request, decode,
};

pub struct Bitbucket;

impl Provider for Bitbucket {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "bitbucket".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Bitbucket Cloud".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "10 s to answer; a 5xx answer is resent up to two more times \
                              (X-Attempt-Number counts attempts); timeouts and other \
                              statuses are not documented as retried"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header("x-hub-signature")?;
        let signature = decode::hex(decode::strip_prefix(header, "sha256=")?)?;
        Ok(Plan {
            message: vec![Part::Body],
            candidates: vec![Candidate::new(Algorithm::HmacSha256, signature)],
            timestamp: None,
            message_id: req
                .header_str("x-request-uuid")
                .map(str::trim)
                .filter(|id| !id.is_empty())
                .map(str::to_owned),
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let key = req.required_header("x-event-key")?;
        let delivery = req.required_header("x-request-uuid")?;
        let body = req.json()?;
        let mut event = Event::new(key).id(delivery);
        if let Some((kind, id)) = resource(key, &body) {
            event = event
                .resource(kind, id)
                .version(body.rfc3339_millis(&format!("/{kind}/updated_on")))
                .deleted(key.ends_with("deleted"));
        }
        Ok(event)
    }
}

/// The object an event key is about, and its id.
fn resource(key: &str, body: &Json) -> Option<(&'static str, String)> {
    let (scope, action) = key.split_once(':').unwrap_or((key, ""));
    if action.contains("comment") {
        return Some(("comment", body.id("/comment/id")?));
    }
    let kind = match scope {
        "pullrequest" => "pullrequest",
        "issue" => "issue",
        "repo" => return Some(("repository", body.id("/repository/uuid")?)),
        _ => return None,
    };
    let number = body.id(&format!("/{kind}/id"))?;
    let repository = body.str("/repository/full_name")?;
    Some((kind, format!("{repository}#{number}")))
}

hookhost_plugin_sdk::export_provider!(Bitbucket);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/bitbucket";
    const UUID: &str = "7f3a9c2e-5b1d-4e8f-a6c0-2d9e8b7a6f51";

    #[test]
    fn plan_signs_the_body_with_sha256() {
        let req = RequestBuilder::post(URL)
            .header("X-Hub-Signature", "sha256=00ff")
            .header("X-Request-UUID", UUID)
            .body("{}")
            .build();
        let plan = Bitbucket::plan_verification(&req).expect("plan");
        assert_eq!(plan.message, vec![Part::Body]);
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
        assert_eq!(plan.timestamp, None);
        assert_eq!(plan.message_id.as_deref(), Some(UUID));
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("{}").build();
        assert!(matches!(
            Bitbucket::plan_verification(&none),
            Err(Rejection::MissingSignature(_))
        ));
        for bad in ["00ff", "sha1=00ff", "sha256=zz", "sha256=0"] {
            let req = RequestBuilder::post(URL)
                .header("X-Hub-Signature", bad)
                .build();
            assert!(
                matches!(
                    Bitbucket::plan_verification(&req),
                    Err(Rejection::MalformedSignature(_))
                ),
                "{bad}"
            );
        }
    }

    fn delivery(key: &str, body: &str) -> Result<Event, Rejection> {
        let req = RequestBuilder::post(URL)
            .header("X-Event-Key", key)
            .header("X-Request-UUID", UUID)
            .body(body)
            .build();
        Bitbucket::describe_event(&req)
    }

    const REPO: &str = r#""repository":{"full_name":"team/repo","uuid":"{a1b2}"}"#;

    #[test]
    fn event_maps_key_delivery_and_resource() {
        let pr = delivery(
            "pullrequest:created",
            &format!(
                r#"{{"pullrequest":{{"id":42,"updated_on":"2024-06-12T18:40:00.250000+00:00"}},{REPO}}}"#
            ),
        )
        .expect("pr");
        assert_eq!(pr.id.as_deref(), Some(UUID));
        assert_eq!(pr.event_type, "pullrequest:created");
        assert_eq!(pr.resource_kind.as_deref(), Some("pullrequest"));
        assert_eq!(pr.resource_id.as_deref(), Some("team/repo#42"));
        assert_eq!(pr.resource_version, Some(1_718_217_600_250));
        assert!(!pr.deleted);

        let comment = delivery(
            "pullrequest:comment_deleted",
            &format!(r#"{{"comment":{{"id":17}},"pullrequest":{{"id":42}},{REPO}}}"#),
        )
        .expect("comment");
        assert_eq!(comment.resource_kind.as_deref(), Some("comment"));
        assert_eq!(comment.resource_id.as_deref(), Some("17"));
        assert!(comment.deleted);

        let push = delivery("repo:push", &format!("{{{REPO}}}")).expect("push");
        assert_eq!(push.resource_kind.as_deref(), Some("repository"));
        assert_eq!(push.resource_id.as_deref(), Some("{a1b2}"));
        assert_eq!(push.resource_version, None);

        let other = delivery("diagnostics:ping", "{}").expect("other");
        assert_eq!(other.resource_kind, None);
    }

    #[test]
    fn missing_delivery_headers_and_bad_bodies_are_rejections() {
        let no_key = RequestBuilder::post(URL)
            .header("X-Request-UUID", UUID)
            .body("{}")
            .build();
        assert!(matches!(
            Bitbucket::describe_event(&no_key),
            Err(Rejection::MalformedBody(_))
        ));
        let no_uuid = RequestBuilder::post(URL)
            .header("X-Event-Key", "repo:push")
            .body("{}")
            .build();
        assert!(matches!(
            Bitbucket::describe_event(&no_uuid),
            Err(Rejection::MalformedBody(_))
        ));
        assert!(matches!(
            delivery("repo:push", "push"),
            Err(Rejection::MalformedBody(_))
        ));
    }
}
