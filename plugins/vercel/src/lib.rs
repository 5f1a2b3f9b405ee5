//! Vercel: `x-vercel-signature: <hex>`.
//!
//! The signed message is the raw body alone, **HMAC-SHA1** keyed by the secret used
//! verbatim, hex digest without a prefix. The secret is the account webhook's secret
//! (shown once when the webhook is created) or, for an integration's webhooks, the
//! integration's Client Secret. **[2nd]**: the scheme was read only in secondary
//! sources that agree with one another (several cite
//! https://vercel.com/docs/webhooks/webhooks-api#securing-webhooks); the Vercel page
//! itself was not available to read, and Vercel ships no SDK that verifies. Nothing is
//! timestamped, so there is no replay window; no rotation is documented.
//!
//! Event (https://vercel.com/docs/webhooks/webhooks-api, "Payload" **[docs]**): id =
//! `id` ("The ID of the webhook delivery"; whether it survives a retry is
//! unconfirmed), type = `type` (`deployment.created`, `project.removed`…), occurred_at
//! = `createdAt` ("The webhook delivery timestamp", unix millis) in seconds. The
//! resource is named by the type's first segment: `payload.deployment.id`,
//! `payload.project.id`, `payload.configuration.id` (for `integration-configuration.*`)
//! or `payload.domain.name`; its version is `createdAt` in millis; `*.removed` and
//! `*.deleted` mark it deleted.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, Json, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection,
    Request, decode,
};

pub struct Vercel;

impl Provider for Vercel {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "vercel".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Vercel".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "unconfirmed: Vercel's retry schedule and answer deadline were \
                              not found in its documentation"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha1]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header("x-vercel-signature")?;
        Ok(Plan {
            message: vec![Part::Body],
            candidates: vec![Candidate::new(Algorithm::HmacSha1, decode::hex(header)?)],
            timestamp: None,
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let id = body.required_str("/id")?;
        let event_type = body.required_str("/type")?;
        let created_ms = body.i64("/createdAt");
        let mut event = Event::new(event_type.as_ref())
            .id(id)
            .occurred_at(created_ms.map(|ms| ms.div_euclid(1000)));
        if let Some((kind, resource_id)) = resource(&event_type, &body) {
            event = event
                .resource(kind, resource_id)
                .version(created_ms.and_then(|ms| u64::try_from(ms).ok()))
                .deleted(event_type.ends_with(".removed") || event_type.ends_with(".deleted"));
        }
        Ok(event)
    }
}

/// The object an event type names (its first segment), and that object's id.
fn resource(event_type: &str, body: &Json) -> Option<(&'static str, String)> {
    let scope = event_type.split('.').next().unwrap_or(event_type);
    match scope {
        "deployment" => Some(("deployment", body.id("/payload/deployment/id")?)),
        "project" => Some(("project", body.id("/payload/project/id")?)),
        "integration-configuration" => Some((
            "integration-configuration",
            body.id("/payload/configuration/id")?,
        )),
        "domain" => Some(("domain", body.id("/payload/domain/name")?)),
        _ => None,
    }
}

hookhost_plugin_sdk::export_provider!(Vercel);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/vercel";

    #[test]
    fn plan_signs_the_body_with_sha1() {
        let req = RequestBuilder::post(URL)
            .header("x-vercel-signature", "00ff")
            .body("{}")
            .build();
        let plan = Vercel::plan_verification(&req).expect("plan");
        assert_eq!(plan.message, vec![Part::Body]);
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha1, vec![0x00, 0xff])]
        );
        assert_eq!(plan.timestamp, None);
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("{}").build();
        assert!(matches!(
            Vercel::plan_verification(&none),
            Err(Rejection::MissingSignature(_))
        ));
        for bad in ["sha1=00ff", "zz", "AP8="] {
            let req = RequestBuilder::post(URL)
                .header("X-Vercel-Signature", bad)
                .build();
            assert!(
                matches!(
                    Vercel::plan_verification(&req),
                    Err(Rejection::MalformedSignature(_))
                ),
                "{bad}"
            );
        }
    }

    fn event(body: &str) -> Result<Event, Rejection> {
        Vercel::describe_event(&RequestBuilder::post(URL).body(body).build())
    }

    #[test]
    fn event_maps_deployment_and_removals() {
        let deployment = event(
            r#"{"id":"uHiNkcV3TJ5sSuCq8NxNnDqj","type":"deployment.succeeded","createdAt":1718217604512,
                "region":"iad1","payload":{"deployment":{"id":"dpl_2euZBFqxYdDMDG1jTrHFnNZ2eUVa"},
                "project":{"id":"prj_12HKQaOmR5t5Uy6vdcQsNIiZgHGB"}}}"#,
        )
        .expect("deployment");
        assert_eq!(deployment.id.as_deref(), Some("uHiNkcV3TJ5sSuCq8NxNnDqj"));
        assert_eq!(deployment.event_type, "deployment.succeeded");
        assert_eq!(deployment.occurred_at, Some(1_718_217_604));
        assert_eq!(deployment.resource_kind.as_deref(), Some("deployment"));
        assert_eq!(
            deployment.resource_id.as_deref(),
            Some("dpl_2euZBFqxYdDMDG1jTrHFnNZ2eUVa")
        );
        assert_eq!(deployment.resource_version, Some(1_718_217_604_512));
        assert!(!deployment.deleted);

        let removed = event(
            r#"{"id":"x","type":"integration-configuration.removed","createdAt":1000,
                "payload":{"configuration":{"id":"icfg_1"}}}"#,
        )
        .expect("removed");
        assert_eq!(
            removed.resource_kind.as_deref(),
            Some("integration-configuration")
        );
        assert_eq!(removed.resource_id.as_deref(), Some("icfg_1"));
        assert!(removed.deleted);

        let domain = event(
            r#"{"id":"d","type":"domain.created","createdAt":1,"payload":{"domain":{"name":"example.com"}}}"#,
        )
        .expect("domain");
        assert_eq!(domain.resource_id.as_deref(), Some("example.com"));

        let other = event(r#"{"id":"b","type":"budget.reached","payload":{}}"#).expect("other");
        assert_eq!(other.resource_kind, None);
        assert_eq!(other.occurred_at, None);
    }

    #[test]
    fn bodies_without_id_or_type_are_rejections() {
        for bad in ["nope", r#"{"type":"deployment.created"}"#, r#"{"id":"x"}"#] {
            assert!(
                matches!(event(bad), Err(Rejection::MalformedBody(_))),
                "{bad}"
            );
        }
    }
}
