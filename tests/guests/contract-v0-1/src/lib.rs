//! A plugin as it was built against `hookhost:provider@0.1.0`, straight from the frozen
//! `wit/v0.1/provider.wit` with wit-bindgen (the SDK has moved on): current hosts must
//! keep loading it and judging with it.
//!
//! Scheme (the test guests' own): `x-test-signature` = hex HMAC-SHA256 of the body,
//! `x-test-id` = the event id, `x-test-type` = the event type (default `legacy.event`).

#[allow(unsafe_code, missing_docs, clippy::all)] // generated canonical-ABI glue
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit/v0.1", world: "provider" });
}

#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)] // generated export glue
mod export {
    use super::bindings::exports::hookhost::provider::plugin::Guest;
    use super::bindings::hookhost::provider::types::{
        Algorithm, Candidate, Disposition, Event, Head, KeyFormat, Part, Plan, PluginInfo,
        Rejection,
    };

    struct Legacy;

    fn header<'a>(head: &'a Head, name: &str) -> Option<&'a [u8]> {
        head.headers
            .iter()
            .find(|h| h.name == name)
            .map(|h| h.value.as_slice())
    }

    fn hex(text: &[u8]) -> Option<Vec<u8>> {
        if text.len() % 2 != 0 {
            return None;
        }
        text.chunks(2)
            .map(|pair| {
                let digit = |b: u8| (b as char).to_digit(16);
                Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8)
            })
            .collect()
    }

    impl Guest for Legacy {
        fn info() -> PluginInfo {
            PluginInfo {
                name: "contract-v0-1".into(),
                version: "0.1.0".into(),
                provider: "A 0.1.0 plugin".into(),
                key_formats: vec![KeyFormat::Raw],
                default_tolerance_seconds: None,
                retry_behaviour: "none".into(),
            }
        }

        fn plan_verification(head: Head, _body: Vec<u8>) -> Result<Plan, Rejection> {
            let signature = header(&head, "x-test-signature")
                .ok_or_else(|| Rejection::MissingSignature("x-test-signature".into()))?;
            let signature = hex(signature)
                .ok_or_else(|| Rejection::MalformedSignature("x-test-signature".into()))?;
            Ok(Plan {
                message: vec![Part::Body],
                candidates: vec![Candidate {
                    algorithm: Algorithm::HmacSha256,
                    signature,
                }],
                timestamp: None,
                message_id: None,
            })
        }

        fn describe_event(head: Head, _body: Vec<u8>) -> Result<Event, Rejection> {
            let text = |name| header(&head, name).map(|v| String::from_utf8_lossy(v).into_owned());
            Ok(Event {
                id: text("x-test-id"),
                event_type: text("x-test-type").unwrap_or_else(|| "legacy.event".into()),
                occurred_at: None,
                resource_kind: None,
                resource_id: None,
                resource_version: None,
                deleted: false,
                disposition: Disposition::Process,
            })
        }
    }

    super::bindings::export!(Legacy with_types_in super::bindings);
}
