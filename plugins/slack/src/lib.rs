//! Slack: `X-Slack-Signature: v0=<hex>`, `X-Slack-Request-Timestamp: <unix>`.
//!
//! The signed message is `v0:{timestamp}:{raw body}`, HMAC-SHA256 keyed by the app's
//! Signing Secret used verbatim (UTF-8, not hex-decoded). The timestamp is accepted
//! within ±300 s by default (Slack's docs and slack_sdk). Slack documents no rotation
//! and sends no delivery-id header; Events API retries repeat the body's `event_id`.
//!
//! Event, by body shape:
//! - JSON (Events API): id = `event_id`, type = `event.type` for `event_callback`
//!   (else the top-level `type`), occurred_at = `event_time`.
//! - `url_verification` (sent, signed, when an app's Request URL is set): answered
//!   `200` with JSON `{"challenge":C}` after the signature is verified; nothing stored
//!   (api.slack.com/events/url_verification: plain text, form or this JSON
//!   object are all accepted).
//! - Form-encoded: `command=` → `slash_command`, `payload=` (interactivity: block
//!   actions, shortcuts, view submissions, options) → `interactive`, `ssl_check=` →
//!   `ssl_check` (ignored). No id: the host derives one from the signed message.
//!
//! Anything else is `MalformedBody`.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    Response, decode, json,
};

pub struct Slack;

impl Provider for Slack {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "slack".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Slack".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: Some(300),
            retry_behaviour: "Events API: 3 retries (nearly immediately, after 1 min, after \
                              5 min) with X-Slack-Retry-Num and X-Slack-Retry-Reason; 3 s \
                              to answer; slash commands and interactions are not retried"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header("x-slack-signature")?;
        let signature = decode::hex(decode::strip_prefix(header, "v0=")?)?;
        let timestamp = decode::unix_seconds(req.signature_header("x-slack-request-timestamp")?)?;
        Ok(Plan {
            // The header's exact bytes are what Slack signed, not a re-formatted number.
            message: vec![
                Part::Text("v0:".into()),
                Part::Header("x-slack-request-timestamp".into()),
                Part::Text(":".into()),
                Part::Body,
            ],
            candidates: vec![Candidate::new(Algorithm::HmacSha256, signature)],
            timestamp: Some(timestamp),
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        if req.body.trim_ascii_start().starts_with(b"{") {
            events_api(req)
        } else {
            form(req)
        }
    }
}

fn events_api(req: &Request) -> Result<Event, Rejection> {
    let body = req.json()?;
    let outer = body.required_str("/type")?;
    let event_type = match (outer.as_ref(), body.str("/event/type")) {
        ("event_callback", Some(inner)) => inner.into_owned(),
        _ => outer.to_string(),
    };
    let event = Event::new(event_type)
        .maybe_id(body.str("/event_id"))
        .occurred_at(body.i64("/event_time"));
    Ok(match outer.as_ref() {
        "url_verification" => {
            let challenge = body.required_str("/challenge")?;
            event.answer(Response::json_text(format!(
                r#"{{"challenge":{}}}"#,
                json::quote(&challenge)
            )))
        }
        _ => event,
    })
}

fn form(req: &Request) -> Result<Event, Rejection> {
    let kind = form_urlencoded::parse(&req.body).find_map(|(key, _)| match key.as_ref() {
        "payload" => Some("interactive"),
        "command" => Some("slash_command"),
        "ssl_check" => Some("ssl_check"),
        _ => None,
    });
    match kind {
        Some("ssl_check") => Ok(Event::new("ssl_check").ignore("ssl_check")),
        Some(kind) => Ok(Event::new(kind)),
        None => Err(Rejection::MalformedBody(
            "body is neither Events API JSON nor a slash command or interaction form".into(),
        )),
    }
}

hookhost_plugin_sdk::export_provider!(Slack);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;
    use hookhost_plugin_sdk::{Disposition, ResponsePart};

    const URL: &str = "https://hooks.example.com/webhooks/slack";

    #[test]
    fn plan_signs_v0_timestamp_body() {
        let req = RequestBuilder::post(URL)
            .header("X-Slack-Signature", "v0=00ff")
            .header("X-Slack-Request-Timestamp", "1531420618")
            .body("token=x")
            .build();
        let plan = Slack::plan_verification(&req).expect("plan");
        assert_eq!(
            plan.message,
            vec![
                Part::Text("v0:".into()),
                Part::Header("x-slack-request-timestamp".into()),
                Part::Text(":".into()),
                Part::Body
            ]
        );
        assert_eq!(plan.timestamp, Some(1_531_420_618));
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let req = |sig: Option<&str>, ts: Option<&str>| {
            let mut builder = RequestBuilder::post(URL);
            if let Some(sig) = sig {
                builder = builder.header("X-Slack-Signature", sig);
            }
            if let Some(ts) = ts {
                builder = builder.header("X-Slack-Request-Timestamp", ts);
            }
            builder.build()
        };
        for missing in [req(None, Some("1")), req(Some("v0=00"), None)] {
            assert!(matches!(
                Slack::plan_verification(&missing),
                Err(Rejection::MissingSignature(_))
            ));
        }
        for bad in [
            req(Some("00ff"), Some("1")),
            req(Some("v0=zz"), Some("1")),
            req(Some("v0=00"), Some("soon")),
        ] {
            assert!(matches!(
                Slack::plan_verification(&bad),
                Err(Rejection::MalformedSignature(_))
            ));
        }
    }

    fn describe(body: &str) -> Result<Event, Rejection> {
        Slack::describe_event(&RequestBuilder::post(URL).body(body).build())
    }

    #[test]
    fn events_api_maps_event_id_inner_type_and_time() {
        let event = describe(
            r#"{"type":"event_callback","event_id":"Ev1","event_time":1700000000,
                "event":{"type":"app_mention","text":"hi"}}"#,
        )
        .expect("event");
        assert_eq!(event.id.as_deref(), Some("Ev1"));
        assert_eq!(event.event_type, "app_mention");
        assert_eq!(event.occurred_at, Some(1_700_000_000));
        let challenge = describe(r#"{"type":"url_verification","challenge":"c\"1","token":"t"}"#);
        let challenge = challenge.expect("challenge");
        assert_eq!(challenge.event_type, "url_verification");
        let Disposition::Answer(response) = challenge.disposition else {
            panic!("not answered: {:?}", challenge.disposition);
        };
        assert_eq!(
            (response.status, response.content_type.as_str()),
            (200, "application/json")
        );
        assert_eq!(
            response.body,
            vec![ResponsePart::Text(r#"{"challenge":"c\"1"}"#.into())]
        );
        assert!(matches!(
            describe(r#"{"type":"url_verification","token":"t"}"#),
            Err(Rejection::MalformedBody(_))
        ));
        assert!(matches!(
            describe(r#"{"event_id":"Ev1"}"#),
            Err(Rejection::MalformedBody(_))
        ));
        assert!(matches!(
            describe("{not json"),
            Err(Rejection::MalformedBody(_))
        ));
    }

    #[test]
    fn form_bodies_map_to_slash_command_and_interactive() {
        let command = describe("token=t&team_id=T1&command=%2Fdeploy&text=now").expect("command");
        assert_eq!(command.event_type, "slash_command");
        assert_eq!(command.id, None);
        let action = describe("payload=%7B%22type%22%3A%22block_actions%22%7D").expect("payload");
        assert_eq!(action.event_type, "interactive");
        let ssl = describe("ssl_check=1&token=t").expect("ssl_check");
        assert_eq!(ssl.disposition, Disposition::Ignore("ssl_check".into()));
        assert!(matches!(
            describe("hello"),
            Err(Rejection::MalformedBody(_))
        ));
    }
}
