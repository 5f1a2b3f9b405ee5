//! WorkOS: `WorkOS-Signature: t=<unix millis>, v1=<hex>`.
//!
//! The signed message is `{t}.{raw body}` with `t` exactly as sent, HMAC-SHA256 keyed by
//! the endpoint's webhook secret used verbatim (UTF-8), lowercase hex digest. `t` is in
//! **milliseconds**; the plan's timestamp is `t` floored to unix seconds. Read in the
//! official SDKs: workos (PyPI) 10.8.0 `workos/webhooks/_verification.py` `verify_header`
//! (splits the header on `", "`, `int(t) / 1000`, rejects when `abs(now - t) > 180`, HMAC
//! over `"{t}.{body}"` with `secret.encode("utf-8")`) and @workos-inc/node 8.13.0
//! `SignatureProvider` (`computeSignature`, `tolerance = 180000` ms, old timestamps only).
//! The default window is therefore 180 s; hookhost checks both directions, as the Python
//! SDK does. Entries are split on `,` and trimmed, so `t=…,v1=…` without the space is
//! read too; every `v1` entry is a candidate, although WorkOS sends one.
//!
//! Event (WorkOS event object, as the SDKs' `EventSchema` models it): id = `id`
//! (`event_…`), type = `event` (`dsync.user.created`, `user.updated`…), occurred_at =
//! `created_at`. The resource is `data`: kind = `data.object`, id = `data.id`, version =
//! `data.updated_at` in unix millis, else the event's `created_at` in millis;
//! `*.deleted` marks it deleted. WorkOS does not guarantee delivery order
//! (https://workos.com/docs/webhooks), which is what the version is for.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    decode,
};

/// The SDKs' default tolerance: `DEFAULT_TOLERANCE = 180` (Python), `180000` ms (Node).
pub const DEFAULT_TOLERANCE_SECONDS: u32 = 180;

pub struct WorkOs;

impl Provider for WorkOs {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "workos".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "WorkOS".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: Some(DEFAULT_TOLERANCE_SECONDS),
            retry_behaviour: "production: retried with exponential back-off for up to 3 days \
                              until a 2xx; other environments: for several minutes; no \
                              ordering guarantee"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header("workos-signature")?;
        let mut millis = None;
        let mut candidates = Vec::new();
        for (key, value) in decode::key_values(header, ',') {
            match key {
                "t" => millis = Some(value),
                "v1" => candidates.push(Candidate::new(Algorithm::HmacSha256, decode::hex(value)?)),
                _ => {}
            }
        }
        let millis = millis
            .ok_or_else(|| Rejection::MalformedSignature("workos-signature has no t=".into()))?;
        if !millis.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Rejection::MalformedSignature(
                "workos-signature t is not unix milliseconds".into(),
            ));
        }
        let seconds = decode::unix_seconds(millis)?.div_euclid(1000);
        if candidates.is_empty() {
            return Err(Rejection::MissingSignature("workos-signature v1".into()));
        }
        Ok(Plan {
            // `t` exactly as sent (milliseconds) is what WorkOS signed.
            message: vec![Part::Text(format!("{millis}.")), Part::Body],
            candidates,
            timestamp: Some(seconds),
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let id = body.required_str("/id")?;
        let event_type = body.required_str("/event")?;
        let mut event = Event::new(event_type.as_ref())
            .id(id)
            .occurred_at(body.rfc3339("/created_at"));
        if let (Some(kind), Some(resource_id)) = (body.str("/data/object"), body.id("/data/id")) {
            let version = body
                .rfc3339_millis("/data/updated_at")
                .or_else(|| body.rfc3339_millis("/created_at"));
            event = event
                .resource(kind, resource_id)
                .version(version)
                .deleted(event_type.ends_with(".deleted"));
        }
        Ok(event)
    }
}

hookhost_plugin_sdk::export_provider!(WorkOs);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/workos";

    fn signed(header: &str) -> Request {
        RequestBuilder::post(URL)
            .header("WorkOS-Signature", header)
            .body("{}")
            .build()
    }

    #[test]
    fn plan_signs_millis_as_sent_and_floors_the_timestamp() {
        let plan = WorkOs::plan_verification(&signed("t=1718217605123, v1=00ff")).expect("plan");
        assert_eq!(
            plan.message,
            vec![Part::Text("1718217605123.".into()), Part::Body]
        );
        assert_eq!(plan.timestamp, Some(1_718_217_605));
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
        let compact = WorkOs::plan_verification(&signed("v1=00ff,t=0999")).expect("compact");
        assert_eq!(compact.message[0], Part::Text("0999.".into()));
        assert_eq!(compact.timestamp, Some(0));
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("{}").build();
        assert!(matches!(
            WorkOs::plan_verification(&none),
            Err(Rejection::MissingSignature(_))
        ));
        assert!(matches!(
            WorkOs::plan_verification(&signed("t=1718217605123")),
            Err(Rejection::MissingSignature(_))
        ));
        for bad in [
            "v1=00ff",
            "t=1718217605123, v1=zz",
            "t=2024-06-12T18:40:05Z, v1=00ff",
            "t=-5, v1=00ff",
            "t=, v1=00ff",
        ] {
            assert!(
                matches!(
                    WorkOs::plan_verification(&signed(bad)),
                    Err(Rejection::MalformedSignature(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn event_maps_data_object() {
        let req = RequestBuilder::post(URL)
            .body(
                r#"{"id":"event_01","event":"user.deleted","created_at":"2024-06-12T18:40:05.123Z",
                   "data":{"object":"user","id":"user_01","updated_at":"2024-06-12T18:40:04.5Z"}}"#,
            )
            .build();
        let event = WorkOs::describe_event(&req).expect("event");
        assert_eq!(event.id.as_deref(), Some("event_01"));
        assert_eq!(event.event_type, "user.deleted");
        assert_eq!(event.occurred_at, Some(1_718_217_605));
        assert_eq!(event.resource_kind.as_deref(), Some("user"));
        assert_eq!(event.resource_id.as_deref(), Some("user_01"));
        assert_eq!(event.resource_version, Some(1_718_217_604_500));
        assert!(event.deleted);

        let no_updated_at = RequestBuilder::post(URL)
            .body(r#"{"id":"e","event":"dsync.group.user_added","created_at":"1970-01-01T00:00:01Z","data":{"object":"directory_group_membership","id":"m"}}"#)
            .build();
        let event = WorkOs::describe_event(&no_updated_at).expect("event");
        assert_eq!(event.resource_version, Some(1000));
        assert!(!event.deleted);
    }

    #[test]
    fn bodies_without_id_or_event_are_rejections() {
        for bad in [
            "nope",
            r#"{"event":"user.created"}"#,
            r#"{"id":"event_01"}"#,
        ] {
            let req = RequestBuilder::post(URL).body(bad).build();
            assert!(
                matches!(
                    WorkOs::describe_event(&req),
                    Err(Rejection::MalformedBody(_))
                ),
                "{bad}"
            );
        }
    }
}
