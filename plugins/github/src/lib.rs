//! GitHub: `X-Hub-Signature-256: sha256=<hex>`, legacy `X-Hub-Signature: sha1=<hex>`.
//!
//! The signed message is the raw body alone, HMAC-SHA256 keyed by the webhook secret's
//! UTF-8 bytes (hex digest, `sha256=` prefix). Only when `X-Hub-Signature-256` is absent
//! does the plugin fall back to the legacy HMAC-SHA1 `X-Hub-Signature`. Nothing is
//! timestamped, so there is no replay window; `X-GitHub-Delivery` (a GUID GitHub keeps
//! on redelivery) is the message id.
//!
//! Event: id = `X-GitHub-Delivery`, type = `X-GitHub-Event` plus `.{action}` when the
//! body has one (`issues.opened`). Either header missing → `MalformedBody` (the request
//! is not what GitHub sends). `ping` is stored but ignored. The resource is the first
//! object of `issue`, `pull_request`, `release`, … (see [`RESOURCE_KEYS`]) that carries
//! an `id`, else `repository`; its version is its `updated_at` in unix millis, and
//! `action == "deleted"` marks it deleted. Only JSON deliveries are handled: a webhook
//! configured with content type `application/x-www-form-urlencoded` is `Unsupported`.

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, Json, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection,
    Request, decode,
};

/// Body keys that name the object an event is about, most specific first.
pub const RESOURCE_KEYS: &[&str] = &[
    "issue",
    "pull_request",
    "release",
    "discussion",
    "milestone",
    "check_run",
    "check_suite",
    "workflow_run",
    "workflow_job",
    "deployment",
    "package",
    "label",
    "repository",
];

pub struct GitHub;

impl Provider for GitHub {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "github".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "GitHub".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "no automatic retries; failed deliveries of the last 3 days \
                              can be redelivered by hand or through the API (same \
                              X-GitHub-Delivery); 10 s to answer"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256, Algorithm::HmacSha1]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let candidate =
            if let Some(header) = req.optional_signature_header("x-hub-signature-256")? {
                let hex = decode::strip_prefix(header, "sha256=")?;
                Candidate::new(Algorithm::HmacSha256, decode::hex(hex)?)
            } else if let Some(header) = req.optional_signature_header("x-hub-signature")? {
                let hex = decode::strip_prefix(header, "sha1=")?;
                Candidate::new(Algorithm::HmacSha1, decode::hex(hex)?)
            } else {
                return Err(Rejection::MissingSignature("x-hub-signature-256".into()));
            };
        Ok(Plan {
            message: vec![Part::Body],
            candidates: vec![candidate],
            timestamp: None,
            message_id: req
                .header_str("x-github-delivery")
                .map(|d| d.trim().to_owned()),
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let form = req
            .header_str("content-type")
            .is_some_and(|t| t.contains("x-www-form-urlencoded"));
        if form {
            return Err(Rejection::Unsupported(
                "form-encoded delivery: set the webhook's content type to application/json".into(),
            ));
        }
        let delivery = req.required_header("x-github-delivery")?;
        let name = req.required_header("x-github-event")?;
        let body = req.json()?;
        let action = body.str("/action");
        let event_type = match action {
            Some(ref action) => format!("{name}.{action}"),
            None => name.to_owned(),
        };
        let mut event = Event::new(event_type).id(delivery);
        if let Some((kind, id)) = resource(&body) {
            event = event
                .resource(kind, id)
                .version(body.rfc3339_millis(&format!("/{kind}/updated_at")))
                .deleted(action.as_deref() == Some("deleted"));
        }
        if name == "ping" {
            event = event.ignore("ping");
        }
        Ok(event)
    }
}

fn resource(body: &Json) -> Option<(&'static str, String)> {
    RESOURCE_KEYS
        .iter()
        .find_map(|key| Some((*key, body.id(&format!("/{key}/id"))?)))
}

hookhost_plugin_sdk::export_provider!(GitHub);

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/github";

    #[test]
    fn plan_signs_the_body_with_sha256() {
        let req = RequestBuilder::post(URL)
            .header("X-Hub-Signature-256", "sha256=00ff")
            .header("X-Hub-Signature", "sha1=0102")
            .header("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
            .body("{}")
            .build();
        let plan = GitHub::plan_verification(&req).expect("plan");
        assert_eq!(plan.message, vec![Part::Body]);
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
        assert_eq!(plan.timestamp, None);
        assert_eq!(
            plan.message_id.as_deref(),
            Some("72d3162e-cc78-11e3-81ab-4c9367dc0958")
        );
    }

    #[test]
    fn legacy_sha1_only_when_sha256_is_absent() {
        let req = RequestBuilder::post(URL)
            .header("X-Hub-Signature", "sha1=0102")
            .build();
        let plan = GitHub::plan_verification(&req).expect("plan");
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha1, vec![0x01, 0x02])]
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("{}").build();
        assert!(matches!(
            GitHub::plan_verification(&none),
            Err(Rejection::MissingSignature(_))
        ));
        for bad in ["757107ea", "sha256=zz", "sha1=0102"] {
            let req = RequestBuilder::post(URL)
                .header("X-Hub-Signature-256", bad)
                .build();
            assert!(matches!(
                GitHub::plan_verification(&req),
                Err(Rejection::MalformedSignature(_))
            ));
        }
    }

    fn delivery(event: &str, body: &str) -> Request {
        RequestBuilder::post(URL)
            .header("X-GitHub-Delivery", "d-1")
            .header("X-GitHub-Event", event)
            .header("Content-Type", "application/json")
            .body(body)
            .build()
    }

    #[test]
    fn event_maps_action_and_first_resource() {
        let req = delivery(
            "issues",
            r#"{"action":"deleted","issue":{"id":1,"updated_at":"2024-01-01T00:00:01Z"},
                "repository":{"id":2}}"#,
        );
        let event = GitHub::describe_event(&req).expect("event");
        assert_eq!(event.id.as_deref(), Some("d-1"));
        assert_eq!(event.event_type, "issues.deleted");
        assert_eq!(event.resource_kind.as_deref(), Some("issue"));
        assert_eq!(event.resource_id.as_deref(), Some("1"));
        assert_eq!(event.resource_version, Some(1_704_067_201_000));
        assert!(event.deleted);

        let push = GitHub::describe_event(&delivery("push", r#"{"repository":{"id":2}}"#));
        let push = push.expect("push");
        assert_eq!(push.event_type, "push");
        assert_eq!(push.resource_kind.as_deref(), Some("repository"));
        assert_eq!(push.resource_id.as_deref(), Some("2"));
        assert_eq!(push.resource_version, None);
    }

    #[test]
    fn ping_is_ignored_and_bad_deliveries_are_rejections() {
        let ping =
            GitHub::describe_event(&delivery("ping", r#"{"zen":"Keep it logically awesome."}"#));
        assert_eq!(
            ping.expect("ping").disposition,
            hookhost_plugin_sdk::Disposition::Ignore("ping".into())
        );
        let no_delivery = RequestBuilder::post(URL)
            .header("X-GitHub-Event", "push")
            .body("{}")
            .build();
        assert!(matches!(
            GitHub::describe_event(&no_delivery),
            Err(Rejection::MalformedBody(_))
        ));
        assert!(matches!(
            GitHub::describe_event(&delivery("push", "Hello, World!")),
            Err(Rejection::MalformedBody(_))
        ));
        let form = RequestBuilder::post(URL)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body("payload=%7B%7D")
            .build();
        assert!(matches!(
            GitHub::describe_event(&form),
            Err(Rejection::Unsupported(_))
        ));
    }
}
