//! Discord: `X-Signature-Ed25519: <hex>`, `X-Signature-Timestamp: <unix seconds>`.
//!
//! The signed message is `{X-Signature-Timestamp}{raw body}` (plain concatenation),
//! Ed25519 with the application's public key (64 hex characters, from the developer
//! portal's General Information page); the signature is 64 bytes in hex. Interactions
//! and webhook events share the scheme; Discord deliberately sends invalid signatures to
//! check that an endpoint refuses them. Sources: discord.com/developers/docs/interactions/
//! overview#setting-up-an-endpoint-validating-security-request-headers,
//! discord.com/developers/docs/events/webhook-events (discord/discord-api-docs
//! `docs/events/webhook-events.mdx`), and discord-interactions (npm) 4.4.0 `verifyKey`.
//!
//! Discord publishes no freshness window and discord-interactions checks none; hookhost
//! applies [`TOLERANCE_SECONDS`] both ways (its choice). Interactions must be answered
//! within 3 s (that they are never retried is unconfirmed); webhook events are retried
//! with exponential backoff for up to 10 minutes. That each retry is signed anew with a
//! fresh timestamp is assumed, not documented: an endpoint can widen `tolerance_seconds`.
//!
//! Body, by shape:
//! - Interaction PING (`"type":1`): answered `{"type":1}` (PONG, JSON), nothing stored.
//! - Other interactions: id = body `id` (snowflake), type = `application_command`,
//!   `message_component`, `application_command_autocomplete`, `modal_submit` (unknown
//!   numbers → `interaction_type_<n>`), occurred_at from the snowflake. Limitation: the
//!   sender then gets hookhost's own `200 {"status":"accepted",…}`, which is not an
//!   interaction response, so Discord tells the user the interaction failed. Answering
//!   with a deferred response (`{"type":5}`) *and* storing the interaction is not
//!   expressible in contract 0.2.0 (`answer` stores nothing).
//! - Webhook-event PING (`"type":0`): answered `204` with an empty body.
//! - Webhook events (`"type":1` with an `event` object): type = `event.type`
//!   (`ENTITLEMENT_CREATE`…), occurred_at = `event.timestamp`. They carry no id, and the
//!   host's derived id would cover the per-request timestamp, so the id is the SHA-256 of
//!   the body (`body-sha256:<hex>`; that a retry repeats the body byte for byte is
//!   assumed). When `event.data.id` exists the resource is that object (kind = the event
//!   type without `_CREATE`/`_UPDATE`/`_DELETE`, lower case), versioned by the event time
//!   in ms; `*_DELETE` marks it deleted.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, Json, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection,
    Request, Response, decode,
};

/// hookhost's replay window. Discord publishes none; interactions must be answered
/// within 3 s, so a genuine request is seconds old.
pub const TOLERANCE_SECONDS: u32 = 300;

/// The Discord epoch (2015-01-01T00:00:00Z) in unix ms: snowflakes count from it.
const DISCORD_EPOCH_MS: u64 = 1_420_070_400_000;

/// An Ed25519 signature's length in bytes.
const SIGNATURE_LEN: usize = 64;

pub struct Discord;

impl Provider for Discord {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "discord".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Discord".into(),
            key_formats: vec![KeyFormat::Ed25519Hex],
            default_tolerance_seconds: Some(TOLERANCE_SECONDS),
            retry_behaviour: "interactions: answer within 3 s, not retried (unconfirmed); \
                              webhook events: \
                              answer 204 within 3 s, retried with exponential backoff for up \
                              to 10 minutes, delivery stopped (email notice) when failures \
                              are too frequent"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::Ed25519]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let signature = decode::hex(req.signature_header("x-signature-ed25519")?)?;
        if signature.len() != SIGNATURE_LEN {
            return Err(Rejection::MalformedSignature(format!(
                "x-signature-ed25519 is {} bytes, not {SIGNATURE_LEN}",
                signature.len()
            )));
        }
        let timestamp = decode::unix_seconds(req.signature_header("x-signature-timestamp")?)?;
        Ok(Plan {
            // The header's exact bytes are what Discord signed.
            message: vec![Part::Header("x-signature-timestamp".into()), Part::Body],
            candidates: vec![Candidate::new(Algorithm::Ed25519, signature)],
            timestamp: Some(timestamp),
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let body = req.json()?;
        let kind = body
            .i64("/type")
            .ok_or_else(|| Rejection::MalformedBody("missing numeric field /type".into()))?;
        if kind == 0 {
            // A webhook-event PING: Discord expects 204 with an empty body.
            let pong = Response::new(204, "application/json", Vec::new());
            return Ok(Event::new("ping").answer(pong));
        }
        if body.raw("/event").is_some() {
            return webhook_event(&body, req);
        }
        interaction(&body, kind)
    }
}

fn interaction(body: &Json, kind: i64) -> Result<Event, Rejection> {
    if kind == 1 {
        let pong = Response::json_text(r#"{"type":1}"#);
        return Ok(Event::new("ping").maybe_id(body.id("/id")).answer(pong));
    }
    let id = body
        .id("/id")
        .ok_or_else(|| Rejection::MalformedBody("missing field /id".into()))?;
    let event_type = match kind {
        2 => "application_command".to_owned(),
        3 => "message_component".to_owned(),
        4 => "application_command_autocomplete".to_owned(),
        5 => "modal_submit".to_owned(),
        other => format!("interaction_type_{other}"),
    };
    let occurred_at = snowflake_millis(&id).and_then(|ms| i64::try_from(ms / 1000).ok());
    Ok(Event::new(event_type).id(id).occurred_at(occurred_at))
}

fn webhook_event(body: &Json, req: &Request) -> Result<Event, Rejection> {
    let event_type = body.required_str("/event/type")?;
    let millis = body.str("/event/timestamp").and_then(|t| iso_millis(&t));
    let mut event = Event::new(event_type.as_ref())
        .id(req.body_id())
        .occurred_at(millis.and_then(|ms| i64::try_from(ms / 1000).ok()));
    if let Some(object_id) = body.id("/event/data/id") {
        let (kind, deleted) = resource_kind(&event_type);
        event = event
            .resource(kind, object_id)
            .version(millis)
            .deleted(deleted);
    }
    Ok(event)
}

/// `ENTITLEMENT_DELETE` → (`entitlement`, deleted).
fn resource_kind(event_type: &str) -> (String, bool) {
    for (suffix, deleted) in [("_CREATE", false), ("_UPDATE", false), ("_DELETE", true)] {
        if let Some(kind) = event_type.strip_suffix(suffix) {
            return (kind.to_ascii_lowercase(), deleted);
        }
    }
    (event_type.to_ascii_lowercase(), false)
}

/// A snowflake's creation time in unix ms (its top 42 bits count ms since 2015).
fn snowflake_millis(id: &str) -> Option<u64> {
    let snowflake: u64 = id.parse().ok()?;
    (snowflake >> 22).checked_add(DISCORD_EPOCH_MS)
}

/// Discord's ISO 8601 timestamps may omit the offset (`2024-10-18T14:42:53.064834`);
/// they are UTC.
fn iso_millis(text: &str) -> Option<u64> {
    decode::rfc3339_millis(text).or_else(|| decode::rfc3339_millis(&format!("{text}Z")))
}

hookhost_plugin_sdk::export_provider!(Discord);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;
    use hookhost_plugin_sdk::{Disposition, ResponsePart};

    const URL: &str = "https://hooks.example.com/webhooks/discord";

    fn signed(sig: &str, ts: &str) -> Request {
        RequestBuilder::post(URL)
            .header("X-Signature-Ed25519", sig)
            .header("X-Signature-Timestamp", ts)
            .body("{}")
            .build()
    }

    #[test]
    fn plan_signs_timestamp_then_body() {
        let sig = "ab".repeat(64);
        let plan = Discord::plan_verification(&signed(&sig, "1718217605")).expect("plan");
        assert_eq!(
            plan.message,
            vec![Part::Header("x-signature-timestamp".into()), Part::Body]
        );
        assert_eq!(plan.timestamp, Some(1_718_217_605));
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::Ed25519, vec![0xab; 64])]
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let only_ts = RequestBuilder::post(URL)
            .header("X-Signature-Timestamp", "1")
            .build();
        let only_sig = RequestBuilder::post(URL)
            .header("X-Signature-Ed25519", "ab".repeat(64))
            .build();
        for missing in [only_ts, only_sig] {
            assert!(matches!(
                Discord::plan_verification(&missing),
                Err(Rejection::MissingSignature(_))
            ));
        }
        for bad in [
            signed(&"zz".repeat(64), "1"),
            signed("abcd", "1"),
            signed(&"ab".repeat(64), "2024-06-12T18:40:05Z"),
        ] {
            assert!(matches!(
                Discord::plan_verification(&bad),
                Err(Rejection::MalformedSignature(_))
            ));
        }
    }

    fn describe(body: &str) -> Result<Event, Rejection> {
        Discord::describe_event(&RequestBuilder::post(URL).body(body).build())
    }

    #[test]
    fn interaction_ping_is_answered_with_pong() {
        let event = describe(r#"{"id":"1250520010841915392","type":1,"version":1}"#).expect("ping");
        let Disposition::Answer(response) = event.disposition else {
            panic!("not answered: {:?}", event.disposition);
        };
        assert_eq!(response.status, 200);
        assert_eq!(response.content_type, "application/json");
        assert_eq!(
            response.body,
            vec![ResponsePart::Text(r#"{"type":1}"#.into())]
        );
        assert_eq!(event.id.as_deref(), Some("1250520010841915392"));
        let bare = describe(r#"{"type":1}"#).expect("ping without id");
        assert!(matches!(bare.disposition, Disposition::Answer(_)));
    }

    #[test]
    fn interactions_map_id_type_and_snowflake_time() {
        let event = describe(
            r#"{"id":"1250520010841915392","type":2,"data":{"name":"deploy"},"token":"t"}"#,
        )
        .expect("command");
        assert_eq!(event.id.as_deref(), Some("1250520010841915392"));
        assert_eq!(event.event_type, "application_command");
        // (1250520010841915392 >> 22) + 1420070400000 ms
        assert_eq!(event.occurred_at, Some(1_718_217_604));
        assert_eq!(event.disposition, Disposition::Process);
        for (kind, name) in [
            (3, "message_component"),
            (4, "application_command_autocomplete"),
            (5, "modal_submit"),
            (9, "interaction_type_9"),
        ] {
            let event = describe(&format!(r#"{{"id":"1","type":{kind}}}"#)).expect("event");
            assert_eq!(event.event_type, name);
        }
        for bad in [r#"{"type":2}"#, r#"{"id":"1"}"#, "not json"] {
            assert!(
                matches!(describe(bad), Err(Rejection::MalformedBody(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn webhook_events_ping_and_entitlements() {
        let ping = describe(r#"{"version":1,"application_id":"1","type":0}"#).expect("ping");
        let Disposition::Answer(response) = ping.disposition else {
            panic!("not answered");
        };
        assert_eq!((response.status, response.body.len()), (204, 0));

        let body = r#"{"version":1,"application_id":"1","type":1,"event":{"type":"ENTITLEMENT_DELETE","timestamp":"2024-06-12T18:40:04.5","data":{"id":"1250520010841915393"}}}"#;
        let event = describe(body).expect("event");
        assert_eq!(event.event_type, "ENTITLEMENT_DELETE");
        assert_eq!(
            event.id,
            Some(RequestBuilder::post(URL).body(body).build().body_id())
        );
        assert_eq!(event.occurred_at, Some(1_718_217_604));
        assert_eq!(event.resource_kind.as_deref(), Some("entitlement"));
        assert_eq!(event.resource_id.as_deref(), Some("1250520010841915393"));
        assert_eq!(event.resource_version, Some(1_718_217_604_500));
        assert!(event.deleted);

        let authorized = describe(
            r#"{"type":1,"event":{"type":"APPLICATION_AUTHORIZED","timestamp":"2024-06-12T18:40:04+00:00","data":{"user":{"id":"7"}}}}"#,
        )
        .expect("authorized");
        assert_eq!(authorized.resource_kind, None);
        assert_eq!(authorized.occurred_at, Some(1_718_217_604));
        assert!(matches!(
            describe(r#"{"type":1,"event":{"timestamp":"x"}}"#),
            Err(Rejection::MalformedBody(_))
        ));
    }
}
