//! HubSpot: `X-HubSpot-Signature-v3` with `X-HubSpot-Request-Timestamp`; legacy
//! `X-HubSpot-Signature` with `X-HubSpot-Signature-Version: v1 | v2`.
//!
//! v3 (used whenever the request carries it): base64 HMAC-SHA256, keyed by the app's
//! client secret (raw UTF-8), over `{METHOD}{URI}{raw body}{timestamp}`, the timestamp
//! being the header's raw value in unix **milliseconds**. URI is the full URL HubSpot
//! addressed; hookhost signs its public URL as received (`Part::Url`: the endpoint's
//! `public_url` plus path and query), so `public_url` must be the URL configured in
//! HubSpot. HubSpot's docs ask receivers to decode some percent-escapes in the URI before
//! signing; this plugin signs the URL as received, so a webhook URL with such escapes
//! may not verify **[unconfirmed which characters]**. Window: ±300 s (HubSpot: "reject
//! the request if the timestamp is older than 5 minutes"; checked in whole seconds).
//!
//! Legacy (HubSpot still sends them beside v3 for backwards compatibility): hex SHA-256
//! — not an HMAC — of the client secret followed by the request body (`v1`) or by
//! `{METHOD}{URI}{raw body}` (`v2`) ([`Algorithm::Sha256SecretPrefix`]); a missing
//! version header means `v1`, as in HubSpot's SDK; another version is `Unsupported`.
//! Legacy signatures sign no time, so they can be replayed forever: they are used only
//! when an endpoint opts in with the plugin configuration `{"legacy_signatures": true}`
//! and the request has no v3 signature. Such an endpoint has no replay window at all
//! (the host cannot apply one to a scheme that signs no time), also for v3 requests;
//! every other endpoint gets the 300 s window from [`check_config`](HubSpot::check_config).
//!
//! Event: the webhooks API posts a JSON array of events (a batch, each with `eventId`,
//! `subscriptionId`, `portalId`, `occurredAt` in ms, `subscriptionType`, `objectId`,
//! `attemptNumber`…). The hookhost event describes the whole request:
//! - id: `{portalId}:{subscriptionId}:{eventId}` for a single event (`eventId` alone is
//!   said not to be unique); for several, `batch-sha256:` + hex
//!   SHA-256 of those keys joined by `\n`. Both are stable across retries, whose bodies
//!   differ in `attemptNumber`. Otherwise (a key field missing, or a JSON object body
//!   such as a workflow webhook) `body-sha256:` + hex SHA-256 of the raw body.
//! - type: the events' common `subscriptionType` (`contact.creation`…), else `batch`; a
//!   JSON object body: its `subscriptionType`, else `unknown`.
//! - occurred_at: the earliest `occurredAt`.
//! - resource: when every event names the same object: kind = the `subscriptionType`
//!   before its `.` (`contact`; `object.*` types use `objectTypeId`), id = `objectId`,
//!   deleted when the latest event is a `deletion` or `privacyDeletion`. Version = the
//!   latest `occurredAt` (ms) when that latest event is the object's `creation`,
//!   deletion or `restore`. A `propertyChange`, `associationChange` or `merge` changes
//!   a part of the object, and a change of one property says nothing of another: as a
//!   version, its time would make a retried earlier change of another property stale,
//!   and it would never be delivered. Those name the object without a version: still
//!   delivered one at a time per object, and held back after its deletion.
//!
//! Sources: v3 string, HMAC-SHA256, base64, 5-minute rule
//! https://developers.hubspot.com/changelog/introducing-version-3-of-webhook-signatures
//! and https://developers.hubspot.com/docs/apps/legacy-apps/authentication/validating-requests
//! **[docs]** (legacy signatures still included "for backwards compatibility"); v1/v2
//! formulas and worked examples https://developers.hubspot.com/docs/faq/v1-request-validation,
//! https://developers.hubspot.com/docs/faq/v2-request-validation **[docs]**;
//! `Signature.getSignature` / `isValid` (default version `v1`, `MAX_ALLOWED_TIMESTAMP =
//! 300000` ms, old timestamps only) in @hubspot/api-client 13.5.0
//! `lib/src/utils/signature.js` **[sdk]**; payload fields `eventId`, `subscriptionId`,
//! `portalId`, `occurredAt`, `subscriptionType`, `attemptNumber`, `objectId` from the v1
//! example body **[docs]**; `objectTypeId` on `object.*` events and "`eventId` is not
//! guaranteed unique" **[unconfirmed]**; retries: up to 10 times with exponential backoff,
//! none after 400/401/403/404/405 **[2nd]** (an earlier version of the webhooks docs, as
//! quoted on HubSpot's community forum).

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::serde_json::Value;
use hookhost_plugin_sdk::{
    Algorithm, BatchId, Candidate, ConfigError, EndpointFacts, Event, KeyFormat, Part, Plan,
    PluginInfo, Provider, RawJson, Rejection, Request, Shared, decode,
};

const V3: &str = "x-hubspot-signature-v3";
const TIMESTAMP: &str = "x-hubspot-request-timestamp";
const LEGACY: &str = "x-hubspot-signature";
const LEGACY_VERSION: &str = "x-hubspot-signature-version";
/// The plugin configuration key that lets an endpoint accept v1/v2 signatures.
const LEGACY_KEY: &str = "legacy_signatures";
/// HubSpot: reject a v3 request whose timestamp is older than 5 minutes.
const TOLERANCE_SECONDS: u32 = 300;

pub struct HubSpot;

impl Provider for HubSpot {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "hubspot".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "HubSpot".into(),
            key_formats: vec![KeyFormat::Raw],
            // Per endpoint, from check_config: 300 s unless legacy signatures are on.
            default_tolerance_seconds: None,
            retry_behaviour: "webhooks API: up to 10 retries with exponential backoff on \
                              connection failures, timeouts and error statuses other than \
                              400/401/403/404/405 (from an earlier version of HubSpot's \
                              docs; unconfirmed); attemptNumber counts the attempts"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256, Algorithm::Sha256SecretPrefix]
    }

    fn check_config(config: &Value) -> Result<EndpointFacts, ConfigError> {
        let legacy = legacy_enabled(config)?;
        Ok(EndpointFacts {
            key_formats: Vec::new(),
            default_tolerance_seconds: (!legacy).then_some(TOLERANCE_SECONDS),
        })
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        if let Some(signature) = req.optional_signature_header(V3)? {
            let millis = decode::unix_seconds(req.signature_header(TIMESTAMP)?)?;
            return Ok(Plan {
                message: vec![
                    Part::Method,
                    Part::Url,
                    Part::Body,
                    Part::Header(TIMESTAMP.into()),
                ],
                candidates: vec![Candidate::new(
                    Algorithm::HmacSha256,
                    decode::base64(signature)?,
                )],
                timestamp: Some(millis.div_euclid(1000)),
                message_id: None,
            });
        }
        let legacy = legacy_enabled(req.config())?;
        let signature = match req.optional_signature_header(LEGACY)? {
            Some(signature) if legacy => signature,
            _ => return Err(Rejection::MissingSignature(V3.into())),
        };
        let message = match req.optional_signature_header(LEGACY_VERSION)? {
            None | Some("v1") => vec![Part::Body],
            Some("v2") => vec![Part::Method, Part::Url, Part::Body],
            Some(other) => {
                return Err(Rejection::Unsupported(format!(
                    "x-hubspot-signature-version {other:?}"
                )));
            }
        };
        Ok(Plan {
            message,
            candidates: vec![Candidate::new(
                Algorithm::Sha256SecretPrefix,
                decode::hex(signature)?,
            )],
            timestamp: None,
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let json = req.json()?;
        let neither = || {
            Rejection::MalformedBody(
                "body is neither a JSON array of events nor a JSON object".into(),
            )
        };
        if json.is_object() {
            let event_type = json.str("/subscriptionType");
            let event_type = event_type.as_deref().unwrap_or("unknown");
            return Ok(Event::new(event_type).id(req.body_id()));
        }
        // The batch is read one event at a time, keeping only what describes it whole,
        // so its length costs time, not memory.
        let mut batch = Batch::default();
        let mut events = json.elements("").ok_or_else(neither)?;
        while let Some(fields) = events.next_object(Batch::FIELDS) {
            batch.add(fields?);
        }
        if batch.event_type.is_empty() {
            return Err(neither());
        }
        let event_type = batch.event_type.one().unwrap_or(Cow::Borrowed("batch"));
        let mut event = Event::new(event_type)
            .id(batch.id.finish().unwrap_or_else(|| req.body_id()))
            .occurred_at(batch.earliest.and_then(|ms| i64::try_from(ms / 1000).ok()));
        if let Some(Some((kind, object_id))) = batch.object.one() {
            let action = batch
                .latest_type
                .as_deref()
                .and_then(|t| t.split_once('.'))
                .map(|(_, action)| action);
            let deleted = matches!(action, Some("deletion" | "privacyDeletion"));
            // Only what the whole object became orders it (crate docs).
            let whole = deleted || matches!(action, Some("creation" | "restore"));
            event = event
                .resource(kind, object_id)
                .version(batch.latest.filter(|_| whole))
                .deleted(deleted);
        }
        Ok(event)
    }
}

/// What describes a batch, folded one event at a time.
#[derive(Default)]
struct Batch<'a> {
    /// From the events' keys, `portalId:subscriptionId:eventId`.
    id: BatchId,
    /// The events' `subscriptionType`.
    event_type: Shared<Cow<'a, str>>,
    /// The earliest and latest `occurredAt` (milliseconds).
    earliest: Option<u64>,
    latest: Option<u64>,
    /// The `subscriptionType` of the last event to occur (of several at the latest
    /// time, the last in the batch).
    latest_type: Option<Cow<'a, str>>,
    /// The object (kind, id) the events name.
    object: Shared<Option<(String, String)>>,
}

impl<'a> Batch<'a> {
    /// The fields of an event that [`Batch::add`] takes, in its order.
    const FIELDS: [&'static str; 7] = [
        "portalId",
        "subscriptionId",
        "eventId",
        "subscriptionType",
        "occurredAt",
        "objectTypeId",
        "objectId",
    ];

    fn add(&mut self, fields: [Option<RawJson<'a>>; 7]) {
        let [
            portal,
            subscription_id,
            event_id,
            subscription,
            occurred,
            object_type,
            object,
        ] = fields;
        self.id
            .add(key([portal, subscription_id, event_id]).as_deref());
        let subscription = subscription.and_then(|s| s.str(""));
        self.event_type
            .add(subscription.clone().unwrap_or(Cow::Borrowed("unknown")));
        // A JSON integer only, as HubSpot writes it.
        let occurred = occurred.and_then(|t| t.text().parse::<u64>().ok());
        if let Some(t) = occurred {
            self.earliest = Some(self.earliest.map_or(t, |e| e.min(t)));
        }
        // `None` orders first, so the first event always counts as the latest so far.
        if occurred >= self.latest {
            self.latest = occurred;
            self.latest_type.clone_from(&subscription);
        }
        // `contact` for `contact.propertyChange`; generic `object.*` types name their
        // object type in `objectTypeId`.
        let kind = subscription
            .as_deref()
            .and_then(|t| t.split_once('.'))
            .and_then(|(kind, _)| match kind {
                "object" => id(object_type),
                kind => Some(kind.to_owned()),
            });
        self.object.add(kind.zip(id(object)));
    }
}

/// An event's key, `portalId:subscriptionId:eventId`, from those three fields.
fn key([portal, subscription, event]: [Option<RawJson>; 3]) -> Option<String> {
    Some(format!(
        "{}:{}:{}",
        id(portal)?,
        id(subscription)?,
        id(event)?
    ))
}

/// A field as an id: integers in decimal, non-empty strings as they are.
fn id(field: Option<RawJson>) -> Option<String> {
    field?.id("").filter(|id| !id.is_empty())
}

/// `legacy_signatures` from an endpoint's plugin configuration (false when absent).
fn legacy_enabled(config: &Value) -> Result<bool, ConfigError> {
    match ConfigError::only_keys(config, &[LEGACY_KEY])?.get(LEGACY_KEY) {
        None => Ok(false),
        Some(value) => value
            .as_bool()
            .ok_or_else(|| ConfigError::new(LEGACY_KEY, "must be true or false")),
    }
}

hookhost_plugin_sdk::export_provider!(HubSpot);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::serde_json::json;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/hubspot?portal=62515";
    // The v1 example in HubSpot's docs and @hubspot/api-client's unit test.
    const V1_BODY: &str = r#"[{"eventId":1,"subscriptionId":12345,"portalId":62515,"occurredAt":1564113600000,"subscriptionType":"contact.creation","attemptNumber":0,"objectId":123,"changeSource":"CRM","changeFlag":"NEW","appId":54321}]"#;
    const V1_SIG: &str = "232db2615f3d666fe21a8ec971ac7b5402d33b9a925784df3ca654d05f4817de";

    fn legacy() -> Value {
        json!({"legacy_signatures": true})
    }

    #[test]
    fn v3_signs_method_url_body_and_the_millisecond_timestamp() {
        let req = RequestBuilder::post(URL)
            .header("X-HubSpot-Signature-v3", "AP8=")
            .header("X-HubSpot-Request-Timestamp", "1718217605123")
            .header("X-HubSpot-Signature", V1_SIG)
            .config(legacy())
            .build();
        let plan = HubSpot::plan_verification(&req).expect("plan");
        assert_eq!(
            plan.message,
            vec![
                Part::Method,
                Part::Url,
                Part::Body,
                Part::Header(TIMESTAMP.into())
            ]
        );
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
        assert_eq!(plan.timestamp, Some(1_718_217_605));
    }

    #[test]
    fn legacy_signatures_only_when_the_endpoint_opts_in() {
        let v1 = |config: Value, version: Option<&str>| {
            let b = RequestBuilder::post(URL).header("X-HubSpot-Signature", V1_SIG);
            let b = match version {
                Some(v) => b.header("X-HubSpot-Signature-Version", v),
                None => b,
            };
            b.config(config).body(V1_BODY).build()
        };
        assert!(matches!(
            HubSpot::plan_verification(&v1(json!({}), Some("v1"))),
            Err(Rejection::MissingSignature(_))
        ));
        for version in [Some("v1"), None] {
            let plan = HubSpot::plan_verification(&v1(legacy(), version)).expect("v1");
            assert_eq!(plan.message, vec![Part::Body]);
            assert_eq!(plan.candidates[0].algorithm, Algorithm::Sha256SecretPrefix);
            assert_eq!(plan.timestamp, None);
        }
        let v2 = HubSpot::plan_verification(&v1(legacy(), Some("v2"))).expect("v2");
        assert_eq!(v2.message, vec![Part::Method, Part::Url, Part::Body]);
        assert!(matches!(
            HubSpot::plan_verification(&v1(legacy(), Some("v9"))),
            Err(Rejection::Unsupported(_))
        ));
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("[]").build();
        let no_time = RequestBuilder::post(URL)
            .header("X-HubSpot-Signature-v3", "AP8=")
            .build();
        for req in [none, no_time] {
            assert!(matches!(
                HubSpot::plan_verification(&req),
                Err(Rejection::MissingSignature(_))
            ));
        }
        let bad = |sig: &str, ts: &str| {
            RequestBuilder::post(URL)
                .header("X-HubSpot-Signature-v3", sig)
                .header("X-HubSpot-Request-Timestamp", ts)
                .build()
        };
        for req in [bad("***", "1"), bad("AP8=", "soon")] {
            assert!(matches!(
                HubSpot::plan_verification(&req),
                Err(Rejection::MalformedSignature(_))
            ));
        }
        let not_hex = RequestBuilder::post(URL)
            .header("X-HubSpot-Signature", "zz")
            .config(legacy())
            .build();
        assert!(matches!(
            HubSpot::plan_verification(&not_hex),
            Err(Rejection::MalformedSignature(_))
        ));
    }

    #[test]
    fn a_single_event_maps_its_key_type_and_object() {
        let req = RequestBuilder::post(URL).body(V1_BODY).build();
        let event = HubSpot::describe_event(&req).expect("event");
        assert_eq!(event.id.as_deref(), Some("62515:12345:1"));
        assert_eq!(event.event_type, "contact.creation");
        assert_eq!(event.occurred_at, Some(1_564_113_600));
        assert_eq!(event.resource_kind.as_deref(), Some("contact"));
        assert_eq!(event.resource_id.as_deref(), Some("123"));
        assert_eq!(event.resource_version, Some(1_564_113_600_000));
        assert!(!event.deleted);
    }

    #[test]
    fn a_batch_is_described_as_a_whole() {
        let body = r#"[
            {"eventId":7,"subscriptionId":9,"portalId":1,"occurredAt":2000,"subscriptionType":"deal.propertyChange","objectId":5,"attemptNumber":2},
            {"eventId":8,"subscriptionId":9,"portalId":1,"occurredAt":3000,"subscriptionType":"deal.deletion","objectId":5,"attemptNumber":2}]"#;
        let event =
            HubSpot::describe_event(&RequestBuilder::post(URL).body(body).build()).expect("event");
        assert_eq!(event.event_type, "batch");
        // printf '1:9:7\n1:9:8' | sha256sum
        assert_eq!(
            event.id.as_deref(),
            Some("batch-sha256:e924fafbb70e1498de9aa389227e4eea4dded5429e7f6c4123f05b6e2740df1e")
        );
        assert_eq!(event.occurred_at, Some(2));
        assert_eq!(event.resource_kind.as_deref(), Some("deal"));
        assert_eq!(event.resource_version, Some(3000));
        assert!(event.deleted);

        let generic = r#"[{"eventId":1,"subscriptionId":2,"portalId":3,"occurredAt":1,"subscriptionType":"object.creation","objectTypeId":"0-3","objectId":11},
                          {"eventId":2,"subscriptionId":2,"portalId":3,"occurredAt":1,"subscriptionType":"object.creation","objectTypeId":"0-3","objectId":12}]"#;
        let event = HubSpot::describe_event(&RequestBuilder::post(URL).body(generic).build())
            .expect("event");
        assert_eq!(event.event_type, "object.creation");
        assert_eq!(event.resource_id, None, "two objects: no single resource");

        let one_generic = r#"[{"eventId":1,"subscriptionId":2,"portalId":3,"occurredAt":1,"subscriptionType":"object.creation","objectTypeId":"0-3","objectId":11}]"#;
        let event = HubSpot::describe_event(&RequestBuilder::post(URL).body(one_generic).build())
            .expect("event");
        assert_eq!(event.resource_kind.as_deref(), Some("0-3"));
    }

    #[test]
    fn only_a_change_of_the_whole_object_is_versioned() {
        let at = |types: &[&str]| {
            let events: Vec<String> = types
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    format!(
                        r#"{{"eventId":{i},"subscriptionId":9,"portalId":1,"occurredAt":{},"subscriptionType":"contact.{t}","objectId":5}}"#,
                        1000 + i
                    )
                })
                .collect();
            let body = format!("[{}]", events.join(","));
            let event = HubSpot::describe_event(&RequestBuilder::post(URL).body(body).build())
                .expect("event");
            assert_eq!(event.resource_id.as_deref(), Some("5"), "{types:?}");
            (event.resource_version, event.deleted)
        };
        assert_eq!(at(&["creation"]), (Some(1000), false));
        assert_eq!(at(&["restore"]), (Some(1000), false));
        assert_eq!(at(&["privacyDeletion"]), (Some(1000), true));
        assert_eq!(at(&["propertyChange", "deletion"]), (Some(1001), true));
        for part in ["propertyChange", "associationChange", "merge"] {
            assert_eq!(at(&[part]), (None, false), "{part}");
            assert_eq!(at(&["creation", part]), (None, false), "{part}");
        }
    }

    #[test]
    fn objects_fall_back_to_the_body_digest_and_bad_bodies_are_rejections() {
        let object = r#"{"example_field":"example_value"}"#;
        let req = RequestBuilder::post(URL).body(object).build();
        let event = HubSpot::describe_event(&req).expect("event");
        assert_eq!(event.event_type, "unknown");
        assert_eq!(event.id, Some(req.body_id()));
        for bad in ["[]", "[1]", "7", "nope"] {
            assert!(
                matches!(
                    HubSpot::describe_event(&RequestBuilder::post(URL).body(bad).build()),
                    Err(Rejection::MalformedBody(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn config_sets_the_window_unless_legacy_signatures_are_on() {
        assert_eq!(
            HubSpot::check_config(&json!({}))
                .expect("ok")
                .default_tolerance_seconds,
            Some(300)
        );
        assert_eq!(
            HubSpot::check_config(&legacy())
                .expect("ok")
                .default_tolerance_seconds,
            None
        );
        for bad in [
            json!({"legacy_signatures": "yes"}),
            json!({"legacy": true}),
            json!(1),
        ] {
            assert!(HubSpot::check_config(&bad).is_err(), "{bad}");
        }
        assert_eq!(
            HubSpot::algorithms(),
            vec![Algorithm::HmacSha256, Algorithm::Sha256SecretPrefix]
        );
    }
}
