//! GitLab: `X-Gitlab-Token: <secret token>`, a shared token, not a signature.
//!
//! GitLab sends the webhook's secret token verbatim in `X-Gitlab-Token`; nothing is
//! signed. The plan's only candidate is the token itself ([`Algorithm::Token`]): the
//! host compares it in constant time with each configured secret (raw UTF-8), so
//! rotation is receiver-side (keep the old and the new token while the webhook is
//! edited). The message is empty and no time is signed, so there is no replay window.
//! **The body's integrity is not protected**: anyone who holds the token can send any
//! body, and a body altered in transit still passes. Only TLS protects it.
//!
//! Event: type = `X-Gitlab-Event` (`Push Hook`, `Merge Request Hook`…; absent →
//! `MalformedBody`); id = `Idempotency-Key` (GitLab 17.4+, "consistent across webhook
//! retries"), else `body-sha256:<hex>` of the raw body (constant when a delivery is
//! sent again with the same data). `X-Gitlab-Event-UUID` is not used as the id because
//! GitLab gives recursive webhooks (triggered by earlier webhooks) the same value, which
//! would make distinct deliveries look like conflicting duplicates; it is kept as the
//! plan's message id when `Idempotency-Key` is absent. The resource is (`object_kind`,
//! `object_attributes.id`) when the body has both (issues, merge requests, notes,
//! pipelines…; push and tag events name none); its version and occurred_at come from
//! `object_attributes.updated_at`, which GitLab writes either as RFC 3339
//! (`2013-12-03T17:23:34Z`) or as `2015-05-17 18:08:09 UTC`. The body must be JSON.
//!
//! Sources: secret token in `X-Gitlab-Token`; delivery headers `X-Gitlab-Event`,
//! `X-Gitlab-Event-UUID` (recursive webhooks share it), `Idempotency-Key` (17.4+);
//! "Resend Request" re-sends with the same `Idempotency-Key`; duplicates when a webhook
//! times out; auto-disabling after 4 / 40 consecutive failures — all
//! https://docs.gitlab.com/user/project/integrations/webhooks/ **[docs]**. Payload
//! examples with both `updated_at` formats:
//! https://docs.gitlab.com/user/project/integrations/webhook_events/ **[docs]**. An
//! automatic retry schedule is not documented **[unconfirmed]**. GitLab's
//! Standard-Webhooks-style signing token (behind a feature flag) is not handled here.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, Json, KeyFormat, Plan, PluginInfo, Provider, Rejection, Request,
    decode,
};

pub struct GitLab;

impl Provider for GitLab {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "gitlab".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "GitLab".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "no automatic retry schedule documented (unconfirmed); a \
                              delivery that times out may arrive twice; failed requests \
                              can be resent by hand with the same Idempotency-Key; a hook \
                              failing 4 times in a row is disabled for 1 min up to 24 h, \
                              after 40 failures permanently"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::Token]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let token = req.signature_header("x-gitlab-token")?;
        if token.is_empty() {
            return Err(Rejection::MissingSignature("x-gitlab-token".into()));
        }
        Ok(Plan {
            // A shared token authenticates the sender only: nothing is signed.
            message: Vec::new(),
            candidates: vec![Candidate::new(Algorithm::Token, token.as_bytes().to_vec())],
            timestamp: None,
            message_id: idempotency_key(req)
                .or_else(|| header(req, "x-gitlab-event-uuid"))
                .map(str::to_owned),
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let event_type = req.required_header("x-gitlab-event")?;
        let body = req.json()?;
        let id = match idempotency_key(req) {
            Some(key) => key.to_owned(),
            None => req.body_id(),
        };
        let mut event = Event::new(event_type).id(id);
        if let (Some(kind), Some(object_id)) =
            (body.str("/object_kind"), body.id("/object_attributes/id"))
        {
            let updated_ms = updated_at_millis(&body);
            event = event
                .resource(kind, object_id)
                .version(updated_ms)
                .occurred_at(updated_ms.and_then(|ms| i64::try_from(ms / 1000).ok()));
        }
        Ok(event)
    }
}

fn header<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.header_str(name)
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

fn idempotency_key(req: &Request) -> Option<&str> {
    header(req, "idempotency-key")
}

/// `object_attributes.updated_at` in unix ms: RFC 3339, or GitLab's older
/// `YYYY-MM-DD HH:MM:SS UTC` form.
fn updated_at_millis(body: &Json) -> Option<u64> {
    let text = body.str("/object_attributes/updated_at")?;
    decode::rfc3339_millis(&text).or_else(|| {
        let (date, time) = text.strip_suffix(" UTC")?.split_once(' ')?;
        decode::rfc3339_millis(&format!("{date}T{time}Z"))
    })
}

hookhost_plugin_sdk::export_provider!(GitLab);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/gitlab";
    const MR: &str = r#"{"object_kind":"merge_request","event_type":"merge_request",
        "object_attributes":{"id":99,"iid":1,"updated_at":"2013-12-03T17:23:34Z","action":"open"}}"#;

    fn request(headers: &[(&str, &str)], body: &str) -> Request {
        headers
            .iter()
            .fold(RequestBuilder::post(URL), |b, (n, v)| b.header(n, v))
            .body(body)
            .build()
    }

    #[test]
    fn plan_presents_the_token_and_signs_nothing() {
        let req = request(
            &[
                ("X-Gitlab-Token", "s3cr3t"),
                (
                    "X-Gitlab-Event-UUID",
                    "13792a34-cac6-4fda-95a8-c58e00a3954e",
                ),
            ],
            MR,
        );
        let plan = GitLab::plan_verification(&req).expect("plan");
        assert!(plan.message.is_empty());
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::Token, b"s3cr3t".to_vec())]
        );
        assert_eq!(plan.timestamp, None);
        assert_eq!(
            plan.message_id.as_deref(),
            Some("13792a34-cac6-4fda-95a8-c58e00a3954e")
        );
        let keyed = request(
            &[("X-Gitlab-Token", "s3cr3t"), ("Idempotency-Key", "k-1")],
            MR,
        );
        let plan = GitLab::plan_verification(&keyed).expect("plan");
        assert_eq!(plan.message_id.as_deref(), Some("k-1"));
    }

    #[test]
    fn missing_or_empty_token_is_a_missing_signature() {
        for req in [
            request(&[], MR),
            request(&[("X-Gitlab-Token", "")], MR),
            request(&[("webhook-signature", "v1,AAAA")], MR),
        ] {
            assert!(matches!(
                GitLab::plan_verification(&req),
                Err(Rejection::MissingSignature(_))
            ));
        }
        let binary = RequestBuilder::post(URL)
            .header("X-Gitlab-Token", [0xff, 0xfe])
            .build();
        assert!(matches!(
            GitLab::plan_verification(&binary),
            Err(Rejection::MalformedSignature(_))
        ));
    }

    #[test]
    fn event_maps_header_type_idempotency_key_and_object() {
        let req = request(
            &[
                ("X-Gitlab-Event", "Merge Request Hook"),
                ("Idempotency-Key", "f5e5f430-f57b-4e6e-9fac-d9128cd7232f"),
                (
                    "X-Gitlab-Event-UUID",
                    "13792a34-cac6-4fda-95a8-c58e00a3954e",
                ),
            ],
            MR,
        );
        let event = GitLab::describe_event(&req).expect("event");
        assert_eq!(
            event.id.as_deref(),
            Some("f5e5f430-f57b-4e6e-9fac-d9128cd7232f")
        );
        assert_eq!(event.event_type, "Merge Request Hook");
        assert_eq!(event.resource_kind.as_deref(), Some("merge_request"));
        assert_eq!(event.resource_id.as_deref(), Some("99"));
        assert_eq!(event.resource_version, Some(1_386_091_414_000));
        assert_eq!(event.occurred_at, Some(1_386_091_414));
        assert!(!event.deleted);
    }

    #[test]
    fn without_idempotency_key_the_id_is_the_body_digest() {
        let req = request(
            &[
                ("X-Gitlab-Event", "Note Hook"),
                (
                    "X-Gitlab-Event-UUID",
                    "13792a34-cac6-4fda-95a8-c58e00a3954e",
                ),
            ],
            r#"{"object_kind":"note","object_attributes":{"id":1243,"updated_at":"2015-05-17 18:08:09 UTC"}}"#,
        );
        let event = GitLab::describe_event(&req).expect("event");
        let id = event.id.expect("id");
        assert!(
            id.starts_with("body-sha256:") && id.len() == 12 + 64,
            "{id}"
        );
        assert_eq!(id, req.body_id());
        assert_eq!(event.resource_kind.as_deref(), Some("note"));
        assert_eq!(event.resource_version, Some(1_431_886_089_000));
    }

    #[test]
    fn push_names_no_resource_and_bad_input_is_rejected() {
        let push = request(
            &[("X-Gitlab-Event", "Push Hook")],
            r#"{"object_kind":"push","project_id":15}"#,
        );
        let event = GitLab::describe_event(&push).expect("event");
        assert_eq!(event.event_type, "Push Hook");
        assert_eq!(event.resource_id, None);
        assert!(matches!(
            GitLab::describe_event(&request(&[], MR)),
            Err(Rejection::MalformedBody(_))
        ));
        let binary = RequestBuilder::post(URL)
            .header("X-Gitlab-Event", "Push Hook")
            .body([0x7b, 0xff, 0x7d])
            .build();
        assert!(matches!(
            GitLab::describe_event(&binary),
            Err(Rejection::MalformedBody(_))
        ));
        let info = GitLab::info();
        assert_eq!(info.key_formats, vec![KeyFormat::Raw]);
        assert_eq!(info.default_tolerance_seconds, None);
        assert_eq!(GitLab::algorithms(), vec![Algorithm::Token]);
    }
}
