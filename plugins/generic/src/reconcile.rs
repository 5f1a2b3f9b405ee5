//! Listing the sender's events through its API (`[reconcile]`, see the crate docs):
//! the request for a page, and the events a page lists.

use hookhost_plugin_sdk::prelude::*;

use crate::config::{Mapping, ReconcileSpec};
use hookhost_plugin_sdk::serde_json::Value;
use hookhost_plugin_sdk::{
    Answer, Event, Json, Page, ReconcileInfo, RemoteEvent, Repair, RequestPlan,
};

/// The endpoint's `[reconcile]` table; `None` without one (or with a configuration
/// the host would have refused).
pub fn info(config: &Value) -> Option<ReconcileInfo> {
    let spec = Mapping::parse(config).ok()?.reconcile?;
    Some(ReconcileInfo {
        hosts: spec.hosts,
        api_base: spec.api_base,
        lists_events: true,
        fetches_objects: false,
    })
}

/// The table, for the calls that need it.
pub fn spec(config: &Value) -> Result<ReconcileSpec, String> {
    let mapping = Mapping::parse(config).map_err(|e| {
        let key = if e.key.is_empty() { "config" } else { &e.key };
        format!("plugin configuration: {key}: {}", e.message)
    })?;
    mapping
        .reconcile
        .ok_or_else(|| "the plugin configuration has no reconcile table".into())
}

/// `GET path` with `{since}` replaced, then `&{cursor_param}={cursor}` (or `?…` when
/// the path has no query). The cursor is percent-encoded, so whatever the page said it
/// is, it stays one parameter's value.
pub fn request(
    spec: &ReconcileSpec,
    since: i64,
    cursor: Option<&str>,
) -> Result<RequestPlan, String> {
    let mut target = spec.path.replace("{since}", &since.to_string());
    if let Some(cursor) = cursor {
        if cursor.is_empty() {
            return Err("an empty cursor names no page".into());
        }
        if !(target.ends_with('?') || target.ends_with('&')) {
            target.push(if target.contains('?') { '&' } else { '?' });
        }
        target.push_str(&spec.cursor_param);
        target.push('=');
        target.push_str(&percent_encode(cursor));
    }
    Ok(RequestPlan::get(target).header("accept", "application/json"))
}

/// Every byte but the unreserved characters of RFC 3986 as `%XX`.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The events of one page, each stored as the item's JSON text exactly as listed,
/// and the next page's cursor (none after an empty page, or when the page's cursor
/// is absent, `null` or `""`).
pub fn page(spec: &ReconcileSpec, answer: &Answer) -> Result<Page, String> {
    let body = Json::parse(&answer.body).map_err(|e| format!("page: {e:?}"))?;
    let items = if spec.items.is_empty() {
        "the body"
    } else {
        &spec.items
    };
    let listed = body
        .items(&spec.items)
        .ok_or_else(|| format!("page: no array at {items}"))?;
    let mut events = Vec::with_capacity(listed.len());
    for (i, raw) in listed.into_iter().enumerate() {
        let at = format!("{}/{i}", spec.items);
        let item = Json::parse(raw.as_bytes()).map_err(|e| format!("item {i} ({at}): {e:?}"))?;
        let event = describe(spec, &item).map_err(|e| format!("item {i} ({at}): {e}"))?;
        events.push(RemoteEvent {
            event,
            repair: Repair::Store(raw.as_bytes().to_vec()),
        });
    }
    let next_cursor = match &spec.cursor {
        Some(pointer) if !events.is_empty() => scalar(&body, pointer),
        _ => None,
    };
    Ok(Page {
        events,
        next_cursor,
    })
}

/// One listed item as an event. Values are read as a value template reads a pushed
/// body (`{/id}`): strings as they are, numbers and booleans as written; empty is
/// absent.
fn describe(spec: &ReconcileSpec, item: &Json) -> Result<Event, String> {
    let id = scalar(item, &spec.id).ok_or_else(|| format!("no id at {}", spec.id))?;
    let event_type =
        scalar(item, &spec.event_type).ok_or_else(|| format!("no type at {}", spec.event_type))?;
    let occurred_at = match &spec.occurred_at {
        Some(pointer) if present(item, pointer) => Some(
            item.i64(pointer)
                .ok_or_else(|| format!("{pointer} is not unix seconds"))?,
        ),
        _ => None,
    };
    let mut event = Event::new(event_type).id(id).occurred_at(occurred_at);
    if let Some((kind, id)) = &spec.resource
        && let (Some(kind), Some(id)) = (scalar(item, kind), scalar(item, id))
    {
        let version = match &spec.version {
            Some(pointer) if present(item, pointer) => Some(
                item.u64(pointer)
                    .ok_or_else(|| format!("{pointer} is not a non-negative integer"))?,
            ),
            _ => None,
        };
        event = event.resource(kind, id).version(version);
    }
    Ok(event)
}

/// A string's text, a number's or boolean's JSON text; `None` for `""`, `null`,
/// objects, arrays and absent values (as a value template reads a body field).
fn scalar(json: &Json, pointer: &str) -> Option<String> {
    crate::scalar(json, pointer).filter(|value| !value.is_empty())
}

/// The pointer names a value other than `null`.
fn present(item: &Json, pointer: &str) -> bool {
    item.raw(pointer).is_some_and(|raw| raw != "null")
}
