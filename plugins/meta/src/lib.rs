//! Meta webhooks (Graph API: WhatsApp Cloud API, Messenger, Instagram, Pages…):
//! `X-Hub-Signature-256: sha256=<hex>`.
//!
//! The signed message is the raw body, HMAC-SHA256 keyed by the app secret (UTF-8,
//! verbatim); hex digest with a `sha256=` prefix. Nothing is timestamped, so there is no
//! replay window. The legacy `X-Hub-Signature` (HMAC-SHA1) is not trusted. Meta writes
//! non-ASCII characters of the body as `\uXXXX` escapes and signs the bytes it sends,
//! which are the bytes the host MACs. Sources: developers.facebook.com/docs/graph-api/
//! webhooks/getting-started (verification requests, event notifications, payload
//! validation), developers.facebook.com/docs/whatsapp/cloud-api/webhooks (payloads).
//!
//! Verification request: `GET …?hub.mode=subscribe&hub.challenge=C&hub.verify_token=T`
//! → the host compares T with the endpoint's `handshake_token` (Meta's "Verify Token")
//! in constant time and answers `200 text/plain` with C exactly (403 on a mismatch). A
//! GET without `hub.mode=subscribe` and a challenge is not a verification (405).
//!
//! Event (`{"object":…,"entry":[{"id":…,"time":…,"changes":[{"field":…,"value":…}]}]}`,
//! or `messaging` instead of `changes` for Messenger/Instagram messaging):
//! - type = `{object}.{field}` of the first entry's first change (`page.feed`,
//!   `whatsapp_business_account.messages`), `{object}.messaging` for messaging entries,
//!   else `{object}`. A WhatsApp `messages` change that carries only `statuses` is typed
//!   `whatsapp_business_account.statuses`.
//! - id: Meta names no delivery and batches changes (several entries, changes, messages
//!   or statuses in one body). When a WhatsApp body carries exactly one message, the id
//!   is its `wamid` (constant when Meta redelivers it); exactly one status → `{wamid}:
//!   {status}` (a message's statuses share its wamid). Otherwise none: the host derives
//!   one from the body's SHA-256, constant across identical redeliveries. Choosing a
//!   single item's id for a batch could mark a later batch holding new items as a
//!   duplicate, which would lose them.
//! - resource: for one WhatsApp message or status, the message (kind `message`, id the
//!   wamid), without a version (`sent`/`delivered`/`read` can share a second, and ordering
//!   by it would drop one). Other notifications name no resource: a page's or account's
//!   changes are not successive states of it.
//! - occurred_at: the WhatsApp item's `timestamp`, else the entry's `time` (unix seconds;
//!   Messenger writes milliseconds, which are recognised by size).

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, Handshake, HandshakeCheck, KeyFormat, Part, Plan, PluginInfo,
    Provider, RawJson, Rejection, Request, Response, decode,
};

const WHATSAPP: &str = "whatsapp_business_account";

/// Entry times above this are milliseconds (it is the year 5138 in seconds).
const MILLIS_THRESHOLD: i64 = 100_000_000_000;

pub struct Meta;

impl Provider for Meta {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "meta".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Meta (WhatsApp, Messenger, Instagram, Graph API)".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "failed notifications are retried, possibly more than once \
                              (deduplicate); WhatsApp: retried with decreasing frequency for \
                              up to 7 days (unconfirmed: secondary sources); Graph API: \
                              webhooks disabled after persistent failures (unconfirmed)"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header("x-hub-signature-256")?;
        let signature = decode::hex(decode::strip_prefix(header, "sha256=")?)?;
        Ok(Plan {
            message: vec![Part::Body],
            candidates: vec![Candidate::new(Algorithm::HmacSha256, signature)],
            timestamp: None,
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let json = req.json()?;
        let object = json.required_str("/object")?;
        // Only the first entry and its first change are read, and whether there are
        // more: a batch of any length costs no memory.
        let mut entries = json.elements("/entry").into_iter().flatten();
        let entry = entries
            .next()
            .ok_or_else(|| Rejection::MalformedBody("missing non-empty array /entry".into()))?;
        let [changes, time, messaging] = entry.members(["changes", "time", "messaging"]);
        let mut changes = changes.and_then(|c| c.elements(""));
        let change = changes.as_mut().and_then(Iterator::next);
        let field = change.and_then(|c| c.str("/field"));
        // A JSON integer only.
        let entry_time = time
            .and_then(|t| t.text().parse::<i64>().ok())
            .map(|t| if t > MILLIS_THRESHOLD { t / 1000 } else { t });
        let single_change = entries.next().is_none()
            && change.is_some()
            && changes.and_then(|mut c| c.next()).is_none();

        if object == WHATSAPP && field.as_deref() == Some("messages") {
            let value = change.and_then(|c| c.at("/value"));
            return Ok(whatsapp_messages(value, single_change, entry_time));
        }
        let event_type = match field {
            Some(field) => format!("{object}.{field}"),
            None if messaging.is_some() => format!("{object}.messaging"),
            None => object.into_owned(),
        };
        Ok(Event::new(event_type).occurred_at(entry_time))
    }

    fn handshake(req: &Request) -> Option<Handshake> {
        let (mut mode, mut challenge, mut token) = (None, None, None);
        for (key, value) in query(&req.url) {
            match key.as_ref() {
                "hub.mode" => mode = mode.or(Some(value.into_owned())),
                "hub.challenge" => challenge = challenge.or(Some(value.into_owned())),
                "hub.verify_token" => token = token.or(Some(value.into_owned())),
                _ => {}
            }
        }
        if mode.as_deref() != Some("subscribe") {
            return None;
        }
        Some(Handshake {
            check: HandshakeCheck::Token(token.unwrap_or_default()),
            // The challenge is echoed: plain text, never sniffed as markup.
            response: Response::text(challenge?).header("X-Content-Type-Options", "nosniff"),
        })
    }
}

/// A WhatsApp `messages` change: inbound `messages` or outbound `statuses`.
fn whatsapp_messages(
    value: Option<RawJson>,
    single_change: bool,
    entry_time: Option<i64>,
) -> Event {
    let items = |key: &str| value.and_then(|v| v.elements(key)).into_iter().flatten();
    let (first_message, first_status) = (items("/messages").next(), items("/statuses").next());
    let kind = if first_message.is_none() && first_status.is_some() {
        "statuses"
    } else {
        "messages"
    };
    let first = first_message.or(first_status);
    // WhatsApp writes unix seconds as a string (`"1718217604"`); `i64` reads both.
    let occurred_at = first.and_then(|item| item.i64("/timestamp")).or(entry_time);
    let mut event = Event::new(format!("{WHATSAPP}.{kind}")).occurred_at(occurred_at);
    let one_item = items("/messages").take(2).count() + items("/statuses").take(2).count() == 1;
    if !single_change || !one_item {
        return event;
    }
    let Some(item) = first else { return event };
    let Some(wamid) = item.str("/id") else {
        return event;
    };
    event = event.resource("message", wamid.as_ref());
    match item.str("/status") {
        Some(status) if kind == "statuses" => event.id(format!("{wamid}:{status}")),
        _ => event.id(wamid.into_owned()),
    }
}

/// The URL's query pairs, percent-decoded.
fn query(url: &str) -> form_urlencoded::Parse<'_> {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    form_urlencoded::parse(query.as_bytes())
}

hookhost_plugin_sdk::export_provider!(Meta);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;
    use hookhost_plugin_sdk::{Disposition, ResponsePart};

    const URL: &str = "https://hooks.example.com/webhooks/meta";

    #[test]
    fn plan_signs_the_body_with_sha256() {
        let req = RequestBuilder::post(URL)
            .header("X-Hub-Signature-256", "sha256=00ff")
            .header("X-Hub-Signature", "sha1=0102")
            .body("{}")
            .build();
        let plan = Meta::plan_verification(&req).expect("plan");
        assert_eq!(plan.message, vec![Part::Body]);
        assert_eq!(plan.timestamp, None);
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let sha1_only = RequestBuilder::post(URL)
            .header("X-Hub-Signature", "sha1=0102")
            .build();
        assert!(matches!(
            Meta::plan_verification(&sha1_only),
            Err(Rejection::MissingSignature(_))
        ));
        for bad in ["00ff", "sha256=zz", "sha1=00ff"] {
            let req = RequestBuilder::post(URL)
                .header("X-Hub-Signature-256", bad)
                .build();
            assert!(
                matches!(
                    Meta::plan_verification(&req),
                    Err(Rejection::MalformedSignature(_))
                ),
                "{bad}"
            );
        }
    }

    fn get(url: &str) -> Option<Handshake> {
        Meta::handshake(&RequestBuilder::new("GET", url).build())
    }

    #[test]
    fn verification_request_presents_the_token_and_echoes_the_challenge() {
        let reply = get(&format!(
            "{URL}?hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token=meatyhamhock"
        ))
        .expect("handshake");
        assert_eq!(reply.check, HandshakeCheck::Token("meatyhamhock".into()));
        assert_eq!(reply.response.status, 200);
        assert_eq!(reply.response.content_type, "text/plain");
        assert_eq!(
            reply.response.body,
            vec![ResponsePart::Text("1158201444".into())]
        );
        let encoded = get(&format!(
            "{URL}?hub.verify_token=a%26b+c&hub.challenge=x%3Cy&hub.mode=subscribe#frag"
        ))
        .expect("encoded");
        assert_eq!(encoded.check, HandshakeCheck::Token("a&b c".into()));
        assert_eq!(
            encoded.response.body,
            vec![ResponsePart::Text("x<y".into())]
        );
        let no_token = get(&format!("{URL}?hub.mode=subscribe&hub.challenge=1")).expect("no token");
        assert_eq!(no_token.check, HandshakeCheck::Token(String::new()));
        for not_one in [
            URL.to_owned(),
            format!("{URL}?hub.challenge=1&hub.verify_token=t"),
            format!("{URL}?hub.mode=unsubscribe&hub.challenge=1&hub.verify_token=t"),
            format!("{URL}?hub.mode=subscribe&hub.verify_token=t"),
        ] {
            assert_eq!(get(&not_one), None, "{not_one}");
        }
    }

    fn describe(body: &str) -> Result<Event, Rejection> {
        Meta::describe_event(&RequestBuilder::post(URL).body(body).build())
    }

    const ONE_MESSAGE: &str = r#"{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","changes":[{"value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550783881","phone_number_id":"106540352242922"},"contacts":[{"profile":{"name":"Sheena Nelson"},"wa_id":"16505551234"}],"messages":[{"from":"16505551234","id":"wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA=","timestamp":"1718217604","text":{"body":"Does it come in another color?"},"type":"text"}]},"field":"messages"}]}]}"#;

    #[test]
    fn one_whatsapp_message_is_named_by_its_wamid() {
        let event = describe(ONE_MESSAGE).expect("message");
        let wamid = "wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA=";
        assert_eq!(event.event_type, "whatsapp_business_account.messages");
        assert_eq!(event.id.as_deref(), Some(wamid));
        assert_eq!(event.occurred_at, Some(1_718_217_604));
        assert_eq!(event.resource_kind.as_deref(), Some("message"));
        assert_eq!(event.resource_id.as_deref(), Some(wamid));
        assert_eq!(event.resource_version, None);
        assert_eq!(event.disposition, Disposition::Process);
    }

    #[test]
    fn statuses_and_batches() {
        let status = describe(r#"{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":{"statuses":[{"id":"wamid.X","status":"delivered","timestamp":"1718217605","recipient_id":"1"}]}}]}]}"#)
            .expect("status");
        assert_eq!(status.event_type, "whatsapp_business_account.statuses");
        assert_eq!(status.id.as_deref(), Some("wamid.X:delivered"));
        assert_eq!(status.occurred_at, Some(1_718_217_605));
        let two = describe(r#"{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":{"messages":[{"id":"wamid.A","timestamp":"1"},{"id":"wamid.B","timestamp":"2"}]}}]}]}"#)
            .expect("batch");
        assert_eq!(
            (two.id, two.resource_id, two.occurred_at),
            (None, None, Some(1))
        );
        let two_entries =
            ONE_MESSAGE.replacen(r#""entry":[{"#, r#""entry":[{"id":"2","changes":[]},{"#, 1);
        let event = describe(&two_entries).expect("two entries");
        assert_eq!(event.id, None);
    }

    #[test]
    fn other_objects_are_typed_by_field_or_messaging() {
        let feed = describe(r#"{"object":"page","entry":[{"id":"1","time":1718217604,"changes":[{"field":"feed","value":{"item":"post"}}]}]}"#)
            .expect("feed");
        assert_eq!(feed.event_type, "page.feed");
        assert_eq!(
            (feed.id, feed.resource_kind, feed.occurred_at),
            (None, None, Some(1_718_217_604))
        );
        let template = describe(r#"{"object":"whatsapp_business_account","entry":[{"id":"1","time":1718217604,"changes":[{"field":"message_template_status_update","value":{"event":"APPROVED"}}]}]}"#)
            .expect("template");
        assert_eq!(
            template.event_type,
            "whatsapp_business_account.message_template_status_update"
        );
        let messaging = describe(r#"{"object":"instagram","entry":[{"id":"1","time":1718217604123,"messaging":[{"sender":{"id":"2"}}]}]}"#)
            .expect("messaging");
        assert_eq!(messaging.event_type, "instagram.messaging");
        assert_eq!(messaging.occurred_at, Some(1_718_217_604));
        for bad in [
            r#"{"entry":[]}"#,
            r#"{"object":"page","entry":[]}"#,
            r#"{"object":"page"}"#,
            "nope",
        ] {
            assert!(
                matches!(describe(bad), Err(Rejection::MalformedBody(_))),
                "{bad}"
            );
        }
    }
}
