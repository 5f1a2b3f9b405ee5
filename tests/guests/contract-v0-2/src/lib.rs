//! A plugin built against `hookhost:provider@0.2.0`'s `provider` world with
//! wit-bindgen, as plugins were before the optional `session` interface: it exports
//! only `plugin`, so the host passes the head and body to `describe-event` again.
//!
//! Scheme (the test guests' own): `x-test-signature` = hex HMAC-SHA256 of the body,
//! `x-test-id` = the event id, `x-test-type` = the event type (default `plain.event`);
//! the event's resource id is the body, so `describe-event` must have been given both.

#[allow(unsafe_code, missing_docs, clippy::all)] // generated canonical-ABI glue
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "provider" });
}

#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)] // generated export glue
mod export {
    use super::bindings::exports::hookhost::provider::plugin::Guest;
    use super::bindings::hookhost::provider::types::{
        Algorithm, Candidate, ConfigError, Disposition, EndpointFacts, Event, HandshakeReply, Head,
        KeyFormat, Part, Plan, PluginInfo, Rejection,
    };

    struct PluginOnly;

    fn text(head: &Head, name: &str) -> Option<String> {
        let value = &head.headers.iter().find(|h| h.name == name)?.value;
        Some(String::from_utf8_lossy(value).into_owned())
    }

    impl Guest for PluginOnly {
        fn info() -> PluginInfo {
            PluginInfo {
                name: "contract-v0-2".into(),
                version: "0.2.0".into(),
                provider: "A 0.2.0 plugin without session".into(),
                key_formats: vec![KeyFormat::Raw],
                default_tolerance_seconds: None,
                retry_behaviour: "none".into(),
                algorithms: vec![Algorithm::HmacSha256],
            }
        }

        fn plan_verification(head: Head, _body: Vec<u8>) -> Result<Plan, Rejection> {
            let signature = text(&head, "x-test-signature")
                .ok_or_else(|| Rejection::MissingSignature("x-test-signature".into()))?;
            let nibbles: Option<Vec<u8>> = signature
                .chars()
                .map(|c| c.to_digit(16).map(|d| d as u8))
                .collect();
            let nibbles = nibbles
                .filter(|n| n.len() % 2 == 0)
                .ok_or_else(|| Rejection::MalformedSignature("x-test-signature".into()))?;
            Ok(Plan {
                message: vec![Part::Body],
                candidates: vec![Candidate {
                    algorithm: Algorithm::HmacSha256,
                    signature: nibbles.chunks(2).map(|p| p[0] << 4 | p[1]).collect(),
                }],
                timestamp: None,
                message_id: None,
            })
        }

        fn describe_event(head: Head, body: Vec<u8>) -> Result<Event, Rejection> {
            Ok(Event {
                id: text(&head, "x-test-id"),
                event_type: text(&head, "x-test-type").unwrap_or_else(|| "plain.event".into()),
                occurred_at: None,
                resource_kind: Some("body".into()),
                resource_id: Some(String::from_utf8_lossy(&body).into_owned()),
                resource_version: None,
                deleted: false,
                disposition: Disposition::Process,
            })
        }

        fn check_config(_config: String) -> Result<EndpointFacts, ConfigError> {
            Ok(EndpointFacts {
                key_formats: Vec::new(),
                default_tolerance_seconds: None,
            })
        }

        fn handshake(_head: Head) -> Option<HandshakeReply> {
            None
        }
    }

    super::bindings::export!(PluginOnly with_types_in super::bindings);
}
