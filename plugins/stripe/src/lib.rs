//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…][,v0=<hex>]`.
//!
//! The signed message is `{t}.{raw body}`, HMAC-SHA256 keyed by the endpoint's
//! `whsec_…` secret used verbatim (not base64-decoded). Only `v1` signatures are
//! trusted; Stripe sends one `v1` per active secret while a rolled secret is kept.
//! The event id, type and object live in the body (`id`, `type`, `data.object`).

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::{
    Algorithm, Answer, Candidate, Event, Json, KeyFormat, Page, Part, Plan, PluginInfo, Provider,
    ReconcileInfo, Rejection, RemoteEvent, Repair, Request, RequestPlan, decode, serde_json,
};

/// Events per page of `GET /v1/events` (Stripe's maximum).
const PAGE: u32 = 100;

pub struct Stripe;

impl Provider for Stripe {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "stripe".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Stripe".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: Some(300),
            retry_behaviour: "live mode: up to 3 days with exponential backoff; \
                              sandbox: 3 times over a few hours"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256]
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let header = req.signature_header("stripe-signature")?;
        let mut timestamp = None;
        let mut candidates = Vec::new();
        for (key, value) in decode::key_values(header, ',') {
            match key {
                "t" => timestamp = Some((value, decode::unix_seconds(value)?)),
                "v1" => candidates.push(Candidate::new(Algorithm::HmacSha256, decode::hex(value)?)),
                _ => {} // v0 (test mode) and future schemes are not trusted
            }
        }
        let (signed_t, timestamp) = timestamp
            .ok_or_else(|| Rejection::MalformedSignature("stripe-signature has no t=".into()))?;
        if candidates.is_empty() {
            return Err(Rejection::MissingSignature("stripe-signature v1".into()));
        }
        Ok(Plan {
            // `t` exactly as sent is what Stripe signed.
            message: vec![Part::Text(format!("{signed_t}.")), Part::Body],
            candidates,
            timestamp: Some(timestamp),
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        describe(&req.json_finding(&OBJECT)?)
    }

    /// Stripe's API lists the events of the last 30 days, newest first, each exactly
    /// as a push carries it: `GET /v1/events?created[gte]=…&limit=100`, then
    /// `starting_after=<the last id>` while `has_more`.
    fn reconcile_info(_config: &serde_json::Value) -> Option<ReconcileInfo> {
        Some(ReconcileInfo {
            hosts: vec!["api.stripe.com".into()],
            api_base: "https://api.stripe.com".into(),
            lists_events: true,
            fetches_objects: false,
        })
    }

    fn reconcile_request(
        _config: &serde_json::Value,
        since: i64,
        cursor: Option<&str>,
    ) -> Result<RequestPlan, String> {
        let mut target = format!("/v1/events?created%5Bgte%5D={since}&limit={PAGE}");
        if let Some(after) = cursor {
            if !after
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err(format!("cursor {after:?} is not a Stripe event id"));
            }
            target.push_str("&starting_after=");
            target.push_str(after);
        }
        Ok(RequestPlan::get(target).header("stripe-version", "2024-06-20"))
    }

    fn reconcile_page(
        _config: &serde_json::Value,
        _since: i64,
        answer: &Answer,
    ) -> Result<Page, String> {
        let list = Json::parse(&answer.body).map_err(|e| format!("events list: {e:?}"))?;
        let items = list.items("/data").ok_or("events list: no data array")?;
        let mut events = Vec::with_capacity(items.len());
        for (i, raw) in items.into_iter().enumerate() {
            let item = Json::parse_finding(raw.as_bytes(), &OBJECT)
                .map_err(|e| format!("data/{i}: {e:?}"))?;
            let event = describe(&item).map_err(|e| format!("data/{i}: {e:?}"))?;
            events.push(RemoteEvent {
                event,
                repair: Repair::Store(raw.as_bytes().to_vec()),
            });
        }
        let has_more = list.raw("/has_more") == Some("true");
        let next_cursor = match (has_more, events.last()) {
            (true, Some(last)) => last.event.id.clone(),
            _ => None,
        };
        Ok(Page {
            events,
            next_cursor,
        })
    }
}

/// What `describe` reads below the top level: found while the event is validated, so
/// that an object whose `id` comes last is not read a second time.
const OBJECT: [&str; 2] = ["/data/object/object", "/data/object/id"];

/// The event a Stripe event object describes (pushed, or listed by the API).
fn describe(body: &Json) -> Result<Event, Rejection> {
    let id = body.required_str("/id")?;
    let event_type = body.required_str("/type")?;
    let created = body.i64("/created");
    let mut event = Event::new(event_type.as_ref()).id(id).occurred_at(created);
    if let (Some(kind), Some(object_id)) =
        (body.str("/data/object/object"), body.str("/data/object/id"))
    {
        // Stripe objects carry no version number; the event's creation time orders
        // the states Stripe sends for one object.
        event = event
            .resource(kind, object_id)
            .version(created.and_then(|c| u64::try_from(c).ok()))
            .deleted(event_type.ends_with(".deleted"));
    }
    Ok(event)
}

hookhost_plugin_sdk::export_provider!(Stripe);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/stripe";

    #[test]
    fn plan_signs_timestamp_dot_body_and_keeps_every_v1() {
        let req = RequestBuilder::post(URL)
            .header("Stripe-Signature", "t=1700000000,v1=00ff,v0=aa,v1=0102")
            .body("{}")
            .build();
        let plan = Stripe::plan_verification(&req).expect("plan");
        assert_eq!(
            plan.message,
            vec![Part::Text("1700000000.".into()), Part::Body]
        );
        assert_eq!(plan.timestamp, Some(1_700_000_000));
        let sigs: Vec<_> = plan
            .candidates
            .iter()
            .map(|c| c.signature.clone())
            .collect();
        assert_eq!(sigs, vec![vec![0x00, 0xff], vec![0x01, 0x02]]);
    }

    #[test]
    fn reconciliation_pages_through_the_events_list_after_the_last_id() {
        let config = serde_json::json!({});
        let first = Stripe::reconcile_request(&config, 1_700_000_000, None).expect("plan");
        assert_eq!(
            (first.method.as_str(), first.target.as_str()),
            ("GET", "/v1/events?created%5Bgte%5D=1700000000&limit=100")
        );
        let next = Stripe::reconcile_request(&config, 1_700_000_000, Some("evt_2")).expect("plan");
        assert!(
            next.target.ends_with("&starting_after=evt_2"),
            "{}",
            next.target
        );
        assert!(Stripe::reconcile_request(&config, 0, Some("evt&x=1")).is_err());

        let event = |id: &str, t: i64| {
            format!(
                r#"{{"id":"{id}","object":"event","type":"invoice.paid","created":{t},"data":{{"object":{{"id":"in_1","object":"invoice"}}}}}}"#
            )
        };
        let body = format!(
            r#"{{"object":"list","data":[{},{}],"has_more":true,"url":"/v1/events"}}"#,
            event("evt_3", 30),
            event("evt_2", 20)
        );
        let answer = Answer {
            status: 200,
            headers: Vec::new(),
            body: body.into_bytes(),
        };
        let page = Stripe::reconcile_page(&config, 0, &answer).expect("page");
        assert_eq!(page.next_cursor.as_deref(), Some("evt_2"));
        assert_eq!(page.events.len(), 2);
        assert_eq!(
            page.events[0].repair,
            Repair::Store(event("evt_3", 30).into_bytes())
        );
        assert_eq!(page.events[0].event.id.as_deref(), Some("evt_3"));
        assert_eq!(page.events[1].event.resource_version, Some(20));
        let last = Answer {
            body: br#"{"object":"list","data":[],"has_more":false}"#.to_vec(),
            ..answer
        };
        assert_eq!(
            Stripe::reconcile_page(&config, 0, &last),
            Ok(Page::default())
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("{}").build();
        assert!(matches!(
            Stripe::plan_verification(&none),
            Err(Rejection::MissingSignature(_))
        ));
        let only_v0 = RequestBuilder::post(URL)
            .header("stripe-signature", "t=1,v0=aa")
            .build();
        assert!(matches!(
            Stripe::plan_verification(&only_v0),
            Err(Rejection::MissingSignature(_))
        ));
        let bad_hex = RequestBuilder::post(URL)
            .header("stripe-signature", "t=1,v1=zz")
            .build();
        assert!(matches!(
            Stripe::plan_verification(&bad_hex),
            Err(Rejection::MalformedSignature(_))
        ));
    }

    #[test]
    fn event_maps_id_type_object_and_created() {
        let req = RequestBuilder::post(URL)
            .body(
                r#"{"id":"evt_1","type":"customer.deleted","created":1700000000,
                      "data":{"object":{"id":"cus_9","object":"customer"}}}"#,
            )
            .build();
        let event = Stripe::describe_event(&req).expect("event");
        assert_eq!(event.id.as_deref(), Some("evt_1"));
        assert_eq!(event.event_type, "customer.deleted");
        assert_eq!(event.resource_kind.as_deref(), Some("customer"));
        assert_eq!(event.resource_id.as_deref(), Some("cus_9"));
        assert_eq!(event.resource_version, Some(1_700_000_000));
        assert!(event.deleted);
        let not_json = RequestBuilder::post(URL).body("nope").build();
        assert!(matches!(
            Stripe::describe_event(&not_json),
            Err(Rejection::MalformedBody(_))
        ));
    }
}
