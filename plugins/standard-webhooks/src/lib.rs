//! Standard Webhooks (and Svix): `webhook-id`, `webhook-timestamp`,
//! `webhook-signature: v1,<base64> [v1a,<base64>]…`.
//!
//! The signed message is `{id}.{timestamp}.{raw body}`, the id and timestamp being the
//! raw header values. When `webhook-id` is absent the Svix trio `svix-id`,
//! `svix-timestamp`, `svix-signature` is used instead. The signature header is a
//! space-separated list of `version,base64`: `v1` is HMAC-SHA256 keyed by the base64
//! key after `whsec_`, `v1a` is Ed25519 checked with a `whpk_` public key; other versions
//! are skipped, one entry per active key (rotation). The timestamp is unix seconds,
//! accepted within ±300 s by default. The id is the sender's idempotency key.
//!
//! Event: id = the message id header, type = body `type` (`unknown` when the JSON body
//! has none: the spec recommends but does not require it), occurred_at = body
//! `timestamp` (RFC 3339). A body that is not JSON is `MalformedBody`.
//!
//! Optional plugin configuration (the spec fixes no resource shape):
//! - `resource_id_pointer`: JSON Pointer to the resource id (`"/data/id"`); without it
//!   no resource is described.
//! - `resource_kind`: the resource kind; default: the event type up to its first `.`
//!   (`contact.created` → `contact`).
//! - `version_pointer`: JSON Pointer to the resource version, a non-negative integer
//!   or an RFC 3339 string (→ unix millis).
//!
//! A type ending in `.deleted` marks the resource deleted.

#![cfg_attr(not(test), no_std)]

extern crate alloc;

use hookhost_plugin_sdk::prelude::*;

use alloc::borrow::Cow;
use hookhost_plugin_sdk::serde_json::Value;
use hookhost_plugin_sdk::{
    Algorithm, Candidate, ConfigError, EndpointFacts, Event, Json, KeyFormat, Part, Plan,
    PluginInfo, Provider, Rejection, Request, decode,
};

pub struct StandardWebhooks;

impl Provider for StandardWebhooks {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "standard-webhooks".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Standard Webhooks".into(),
            key_formats: vec![
                KeyFormat::Base64AfterPrefix("whsec_".into()),
                KeyFormat::Ed25519Base64AfterPrefix("whpk_".into()),
            ],
            default_tolerance_seconds: Some(300),
            retry_behaviour: "spec recommendation: immediately, 5 s, 5 min, 30 min, 2 h, \
                              5 h, 10 h, 14 h, 20 h, 24 h (Svix: immediately, 5 s, 5 min, \
                              30 min, 2 h, 5 h, 10 h, 10 h); same id on every attempt"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256, Algorithm::Ed25519]
    }

    fn check_config(config: &Value) -> Result<EndpointFacts, ConfigError> {
        Resourcing::of(config)?;
        Ok(EndpointFacts::default())
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let prefix = header_prefix(req);
        let [id_name, ts_name, sig_name] =
            ["id", "timestamp", "signature"].map(|h| format!("{prefix}-{h}"));
        let id = req.signature_header(&id_name)?;
        let timestamp = decode::unix_seconds(req.signature_header(&ts_name)?)?;
        let header = req.signature_header(&sig_name)?;
        let mut candidates = Vec::new();
        for entry in header.split_ascii_whitespace() {
            let (version, signature) = entry.split_once(',').ok_or_else(|| {
                Rejection::MalformedSignature(format!("{sig_name} entry without a version"))
            })?;
            let algorithm = match version {
                "v1" => Algorithm::HmacSha256,
                "v1a" => Algorithm::Ed25519,
                _ => continue, // unknown versions are skipped, as the libraries do
            };
            candidates.push(Candidate::new(algorithm, decode::base64(signature)?));
        }
        if candidates.is_empty() {
            return Err(Rejection::MissingSignature(format!("{sig_name} v1/v1a")));
        }
        Ok(Plan {
            message: vec![
                Part::Header(id_name),
                Part::Text(".".into()),
                Part::Header(ts_name),
                Part::Text(".".into()),
                Part::Body,
            ],
            candidates,
            timestamp: Some(timestamp),
            message_id: Some(id.to_owned()),
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let id = req.header_str(&format!("{}-id", header_prefix(req)));
        let body = req.json()?;
        let event_type = body.str("/type").unwrap_or(Cow::Borrowed("unknown"));
        let event = Event::new(event_type)
            .maybe_id(id.map(str::trim))
            .occurred_at(body.rfc3339("/timestamp"));
        with_resource(event, &body, req.config())
    }
}

/// `webhook` unless `webhook-id` is absent and `svix-id` present.
fn header_prefix(req: &Request) -> &'static str {
    if req.header("webhook-id").is_none() && req.header("svix-id").is_some() {
        "svix"
    } else {
        "webhook"
    }
}

/// Adds the resource the plugin configuration points at, when it resolves.
fn with_resource(event: Event, body: &Json, config: &Value) -> Result<Event, Rejection> {
    // Checked when the endpoint was loaded (`check_config`); checked again, as a
    // rejection, should a request ever carry a configuration that was not.
    let setting = Resourcing::of(config)?;
    let Some(id) = setting.id_pointer.and_then(|p| body.id(p)) else {
        return Ok(event);
    };
    let event_type = event.event_type.clone();
    let kind = setting
        .kind
        .unwrap_or_else(|| event_type.split('.').next().unwrap_or(&event_type));
    let version = setting
        .version_pointer
        .and_then(|p| body.u64(p).or_else(|| body.rfc3339_millis(p)));
    Ok(event
        .resource(kind, id)
        .version(version)
        .deleted(event_type.ends_with(".deleted")))
}

const RESOURCE_ID_POINTER: &str = "resource_id_pointer";
const RESOURCE_KIND: &str = "resource_kind";
const VERSION_POINTER: &str = "version_pointer";

/// The plugin configuration: where the resource is, all three keys optional.
struct Resourcing<'a> {
    id_pointer: Option<&'a str>,
    kind: Option<&'a str>,
    version_pointer: Option<&'a str>,
}

impl<'a> Resourcing<'a> {
    fn of(config: &'a Value) -> Result<Resourcing<'a>, ConfigError> {
        ConfigError::only_keys(
            config,
            &[RESOURCE_ID_POINTER, RESOURCE_KIND, VERSION_POINTER],
        )?;
        Ok(Resourcing {
            id_pointer: config_pointer(config, RESOURCE_ID_POINTER)?,
            kind: config_str(config, RESOURCE_KIND)?,
            version_pointer: config_pointer(config, VERSION_POINTER)?,
        })
    }
}

fn config_str<'a>(config: &'a Value, key: &str) -> Result<Option<&'a str>, ConfigError> {
    match config.get(key) {
        None => Ok(None),
        Some(value) => value
            .as_str()
            .map(Some)
            .ok_or_else(|| ConfigError::new(key, "must be a string")),
    }
}

fn config_pointer<'a>(config: &'a Value, key: &str) -> Result<Option<&'a str>, ConfigError> {
    match config_str(config, key)? {
        Some(p) if !p.is_empty() && !p.starts_with('/') => Err(ConfigError::new(
            key,
            "must be a JSON Pointer starting with /",
        )),
        other => Ok(other),
    }
}

hookhost_plugin_sdk::export_provider!(StandardWebhooks);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/standard";

    fn config(text: &str) -> Value {
        hookhost_plugin_sdk::serde_json::from_str(text).expect("config JSON")
    }

    #[test]
    fn plan_signs_id_dot_timestamp_dot_body_and_keeps_v1_and_v1a() {
        let req = RequestBuilder::post(URL)
            .header("webhook-id", "msg_1")
            .header("webhook-timestamp", "1614265330")
            .header("webhook-signature", "v1,AP8= v2,AAAA  v1a,AQI=")
            .body("{}")
            .build();
        let plan = StandardWebhooks::plan_verification(&req).expect("plan");
        assert_eq!(
            plan.message,
            vec![
                Part::Header("webhook-id".into()),
                Part::Text(".".into()),
                Part::Header("webhook-timestamp".into()),
                Part::Text(".".into()),
                Part::Body,
            ]
        );
        assert_eq!(plan.timestamp, Some(1_614_265_330));
        assert_eq!(plan.message_id.as_deref(), Some("msg_1"));
        assert_eq!(
            plan.candidates,
            vec![
                Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff]),
                Candidate::new(Algorithm::Ed25519, vec![0x01, 0x02]),
            ]
        );
    }

    #[test]
    fn svix_headers_are_used_only_without_webhook_id() {
        let req = RequestBuilder::post(URL)
            .header("svix-id", "msg_2")
            .header("svix-timestamp", "1")
            .header("svix-signature", "v1,AP8=")
            .build();
        let plan = StandardWebhooks::plan_verification(&req).expect("plan");
        assert_eq!(plan.message[0], Part::Header("svix-id".into()));
        assert_eq!(plan.message[2], Part::Header("svix-timestamp".into()));
        assert_eq!(plan.message_id.as_deref(), Some("msg_2"));
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let headers = |sig: &str| {
            RequestBuilder::post(URL)
                .header("webhook-id", "msg_1")
                .header("webhook-timestamp", "1")
                .header("webhook-signature", sig)
                .build()
        };
        for missing in [
            RequestBuilder::post(URL).build(),
            headers("v2,AP8="),
            RequestBuilder::post(URL).header("webhook-id", "m").build(),
        ] {
            assert!(matches!(
                StandardWebhooks::plan_verification(&missing),
                Err(Rejection::MissingSignature(_))
            ));
        }
        for bad in ["v1,***", "g0hM9SsE", "v1a,%%"] {
            assert!(matches!(
                StandardWebhooks::plan_verification(&headers(bad)),
                Err(Rejection::MalformedSignature(_))
            ));
        }
    }

    #[test]
    fn event_maps_type_timestamp_and_configured_resource() {
        let body = r#"{"type":"contact.deleted","timestamp":"2022-11-03T20:26:10.344522Z",
                       "data":{"id":"c_1","updatedAt":"2022-11-03T20:26:10.5Z","rev":7}}"#;
        let req = |config: Value| {
            RequestBuilder::post(URL)
                .header("webhook-id", "msg_1")
                .body(body)
                .config(config)
                .build()
        };
        let plain = StandardWebhooks::describe_event(&req(config("{}"))).expect("event");
        assert_eq!(plain.id.as_deref(), Some("msg_1"));
        assert_eq!(plain.event_type, "contact.deleted");
        assert_eq!(plain.occurred_at, Some(1_667_507_170));
        assert_eq!(plain.resource_id, None);

        let cfg =
            config(r#"{"resource_id_pointer":"/data/id","version_pointer":"/data/updatedAt"}"#);
        let event = StandardWebhooks::describe_event(&req(cfg)).expect("event");
        assert_eq!(event.resource_kind.as_deref(), Some("contact"));
        assert_eq!(event.resource_id.as_deref(), Some("c_1"));
        assert_eq!(event.resource_version, Some(1_667_507_170_500));
        assert!(event.deleted);

        let cfg = config(
            r#"{"resource_kind":"person","resource_id_pointer":"/data/id","version_pointer":"/data/rev"}"#,
        );
        let event = StandardWebhooks::describe_event(&req(cfg)).expect("event");
        assert_eq!(event.resource_kind.as_deref(), Some("person"));
        assert_eq!(event.resource_version, Some(7));

        let bad = config(r#"{"resource_id_pointer":"data.id"}"#);
        assert!(matches!(
            StandardWebhooks::describe_event(&req(bad)),
            Err(Rejection::Unsupported(_))
        ));
    }

    #[test]
    fn configuration_is_checked_at_load_naming_the_key() {
        let check = |text: &str| StandardWebhooks::check_config(&config(text));
        assert_eq!(check("{}"), Ok(EndpointFacts::default()));
        assert_eq!(
            check(
                r#"{"resource_id_pointer":"/data/id","resource_kind":"person","version_pointer":"/v"}"#
            ),
            Ok(EndpointFacts::default())
        );
        let key = |text: &str| check(text).expect_err(text).key;
        assert_eq!(
            key(r#"{"resource_id_pointer":"data.id"}"#),
            "resource_id_pointer"
        );
        assert_eq!(key(r#"{"version_pointer":7}"#), "version_pointer");
        assert_eq!(key(r#"{"resource_kind":true}"#), "resource_kind");
        // A misspelt key is named, not ignored.
        assert_eq!(
            key(r#"{"resource_id_pointr":"/data/id"}"#),
            "resource_id_pointr"
        );
    }

    #[test]
    fn untyped_json_is_unknown_and_non_json_is_malformed() {
        let spec_example = RequestBuilder::post(URL)
            .header("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
            .body(r#"{"test": 2432232314}"#)
            .build();
        let event = StandardWebhooks::describe_event(&spec_example).expect("event");
        assert_eq!(event.event_type, "unknown");
        assert_eq!(event.id.as_deref(), Some("msg_p5jXN8AQM9LWM0D4loKWxJek"));
        let text = RequestBuilder::post(URL).body("hello").build();
        assert!(matches!(
            StandardWebhooks::describe_event(&text),
            Err(Rejection::MalformedBody(_))
        ));
    }
}
