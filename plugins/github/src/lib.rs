//! GitHub: `X-Hub-Signature-256: sha256=<hex>`, legacy `X-Hub-Signature: sha1=<hex>`.
//!
//! The signed message is the raw body alone, HMAC-SHA256 keyed by the webhook secret's
//! UTF-8 bytes (hex digest, `sha256=` prefix). Only when `X-Hub-Signature-256` is absent
//! does the plugin fall back to the legacy HMAC-SHA1 `X-Hub-Signature`. Nothing is
//! timestamped, so there is no replay window; `X-GitHub-Delivery` (a GUID GitHub keeps
//! on redelivery) is the message id.
//!
//! Event: id = `X-GitHub-Delivery`, type = `X-GitHub-Event` plus `.{action}` when the
//! body has one (`issues.opened`). Either header missing → `MalformedBody` (the request
//! is not what GitHub sends). `ping` is stored but ignored. The resource is the first
//! object of `issue`, `pull_request`, `release`, … (see [`RESOURCES`]) that carries an
//! `id`, else `repository`; its version is its `updated_at` in unix millis. Only JSON
//! deliveries are handled: a webhook configured with content type
//! `application/x-www-form-urlencoded` is `Unsupported`.
//!
//! An event is about the object it names only when it is that object's own event (the
//! `X-GitHub-Event` [`RESOURCES`] pairs with its kind: `issues` for an issue, `label` for
//! a label, `repository` for the repository). Only then does `action == "deleted"` mark
//! the resource deleted: an `issue_comment` or `pull_request_review_comment` that is
//! `deleted` names the issue or pull request the comment was on, and a `star` or
//! `deploy_key` that is `deleted` names the repository; all of those live on. Since
//! `X-GitHub-Event` is not signed, the body must also be that event's shape: the object
//! and only `action`, `repository`, `sender`, `organization`, `installation` and
//! `enterprise` beside it. A deleted comment's body sent again as `issues`, or a deleted
//! star's (`starred_at`) as `repository`, leaves its issue or repository alive. And only
//! an object's own event versions it (`issues` the issue, `repository` the repository):
//! the other events that name it (`issue_comment` its issue, `pull_request_review` its
//! pull request; `push`, `status`, `create`, `delete`, `commit_comment`,
//! `workflow_dispatch`, `repository_dispatch`, `star`, … the repository) are things that
//! happened on it, each new, and as their version its `updated_at` would make a late
//! redelivery of one stale against any newer event of the object, never delivered.
//! GitHub does not retry: a missed delivery comes back late, redelivered by hand or by
//! reconciliation (below). They name the object without a version: the host still
//! delivers one object's events one at a time, in arrival order, and never counts an
//! unversioned event stale (after the object's deletion, it keeps them undelivered as
//! `resource_deleted`). Without a resource they would lose that order (a branch's
//! `delete` could overtake its last `push`).
//!
//! # Reconciliation
//!
//! GitHub lists a webhook's deliveries, without their payloads, and redelivers one on
//! request (same `X-GitHub-Delivery`, signed again), so a missing delivery is repaired
//! by asking GitHub to send it again
//! (<https://docs.github.com/en/rest/webhooks/repo-deliveries>,
//! <https://docs.github.com/en/rest/orgs/webhooks>,
//! <https://docs.github.com/en/rest/apps/webhooks>). The endpoint's plugin
//! configuration names the webhook (`[endpoint.config.reconcile]`; the API credential
//! is the host's `[endpoint.reconcile]`):
//!
//! | `reconcile` | lists | redelivers |
//! | --- | --- | --- |
//! | `{ repository = "owner/repo", hook_id = 123 }` | `GET /repos/{owner}/{repo}/hooks/{hook_id}/deliveries` | `POST …/deliveries/{id}/attempts` |
//! | `{ organization = "org", hook_id = 123 }` | `GET /orgs/{org}/hooks/{hook_id}/deliveries` | `POST …/deliveries/{id}/attempts` |
//! | `{ app = true }` | `GET /app/hook/deliveries` | `POST /app/hook/deliveries/{id}/attempts` |
//!
//! The hook id is the `X-GitHub-Hook-ID` header of its deliveries. The credential
//! needs admin rights on the hook (a token with `admin:repo_hook` / `admin:org_hook`,
//! or a fine-grained token with write access to the webhooks permission); the app's
//! hook takes only a GitHub App JWT, which lives 10 minutes at most, so hookhost's
//! static credential must be refreshed outside it. Without the table nothing is
//! reconciled; a bad one is refused when the endpoint loads, naming the key
//! (`reconcile.hook_id`).
//!
//! Each listed delivery is an event with the id a push of it gets (its `guid`, which
//! is the `X-GitHub-Delivery` header), the type `describe_event` gives it
//! (`{event}.{action}`, or `{event}` without an action) and its `delivered_at`.
//! A guid with several attempts on one page (redeliveries) is listed once, by its
//! newest attempt. The same guid may still appear on two pages; if no attempt was
//! received it may be asked for twice, and the second copy carries the same
//! `X-GitHub-Delivery`, so it is a duplicate, stored once.
//!
//! **`since`.** GitHub's list has no time filter and runs newest first, so the page
//! reader applies it: deliveries older than `since` are left out, and the first one
//! met ends the listing. GitHub keeps deliveries for 3 days on github.com
//! (<https://docs.github.com/en/webhooks/testing-and-troubleshooting-webhooks/redelivering-webhooks>:
//! "You can redeliver webhook deliveries that occurred in the past 3 days", and
//! "Recent deliveries" lists "all deliveries from the past 3 days"; GitHub Enterprise
//! Server's docs say 7 days), which is also all GitHub can redeliver: a longer
//! look-back finds nothing more. A delivery without a readable `delivered_at` is
//! kept. Pages hold 100 deliveries; the cursor is GitHub's own (the
//! `cursor` parameter of the `link` header's `rel="next"` URL, sent back verbatim),
//! and a page without a next link, or with no deliveries, is the last. Requests are
//! paths on the API base, so GitHub Enterprise Server works with the endpoint's
//! `api_base` set to `https://HOST/api/v3`.

#![cfg_attr(not(test), no_std)]

use hookhost_plugin_sdk::prelude::*;

use hookhost_plugin_sdk::serde_json::Value;
use hookhost_plugin_sdk::{
    Algorithm, Answer, Candidate, ConfigError, EndpointFacts, Event, Json, KeyFormat, Page, Part,
    Plan, PluginInfo, Provider, ReconcileInfo, Rejection, RemoteEvent, Repair, Request,
    RequestPlan, decode, json,
};

/// Body keys that name the object an event is about, most specific first, each with the
/// `X-GitHub-Event` whose own object it is: the one event that can delete it (and, for the
/// repository, the one that versions it; see the crate docs).
pub const RESOURCES: &[(&str, &str)] = &[
    ("issue", "issues"),
    ("pull_request", "pull_request"),
    ("release", "release"),
    ("discussion", "discussion"),
    ("milestone", "milestone"),
    ("check_run", "check_run"),
    ("check_suite", "check_suite"),
    ("workflow_run", "workflow_run"),
    ("workflow_job", "workflow_job"),
    ("deployment", "deployment"),
    ("package", "package"),
    ("label", "label"),
    ("repository", "repository"),
];

/// Deliveries per page of a deliveries list (GitHub's maximum).
const PAGE: u32 = 100;
/// The REST API version the requests are written for.
const API_VERSION: &str = "2022-11-28";

pub struct GitHub;

impl Provider for GitHub {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "github".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "GitHub".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "no automatic retries; failed deliveries of the last 3 days \
                              can be redelivered by hand or through the API (same \
                              X-GitHub-Delivery); 10 s to answer"
                .into(),
        }
    }

    fn algorithms() -> Vec<Algorithm> {
        vec![Algorithm::HmacSha256, Algorithm::HmacSha1]
    }

    /// Only `reconcile` is read (see the crate docs); any other key is refused, named.
    fn check_config(config: &Value) -> Result<EndpointFacts, ConfigError> {
        ConfigError::only_keys(config, &["reconcile"])?;
        Hook::from_config(config)?;
        Ok(EndpointFacts::default())
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let candidate =
            if let Some(header) = req.optional_signature_header("x-hub-signature-256")? {
                let hex = decode::strip_prefix(header, "sha256=")?;
                Candidate::new(Algorithm::HmacSha256, decode::hex(hex)?)
            } else if let Some(header) = req.optional_signature_header("x-hub-signature")? {
                let hex = decode::strip_prefix(header, "sha1=")?;
                Candidate::new(Algorithm::HmacSha1, decode::hex(hex)?)
            } else {
                return Err(Rejection::MissingSignature("x-hub-signature-256".into()));
            };
        Ok(Plan {
            message: vec![Part::Body],
            candidates: vec![candidate],
            timestamp: None,
            message_id: req
                .header_str("x-github-delivery")
                .map(|d| d.trim().to_owned()),
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        let form = req
            .header_str("content-type")
            .is_some_and(|t| t.contains("x-www-form-urlencoded"));
        if form {
            return Err(Rejection::Unsupported(
                "form-encoded delivery: set the webhook's content type to application/json".into(),
            ));
        }
        let delivery = req.required_header("x-github-delivery")?;
        let name = req.required_header("x-github-event")?;
        let body = req.json()?;
        let action = body.str("/action");
        let mut event = named_event(name, action.as_deref()).id(delivery);
        if let Some((kind, own_event, id)) = resource(&body) {
            let own = name == own_event;
            // Only the object's own event is versioned by it (crate docs).
            let version = own
                .then(|| body.rfc3339_millis(&format!("/{kind}/updated_at")))
                .flatten();
            // The event's name is not signed: a deleted comment's body sent again under
            // `issues`, or a deleted star's under `repository`, must not delete what it
            // names. Only a body of the object's own event (the object, and who did
            // what to it where) is its deletion; one carrying anything else (a
            // `comment`, a `review`, a star's `starred_at`, a deploy key's `key`) is not.
            let deletion = own
                && action.as_deref() == Some("deleted")
                && body.has_only_members(&[
                    "action",
                    kind,
                    "repository",
                    "sender",
                    "organization",
                    "installation",
                    "enterprise",
                ]);
            event = event.resource(kind, id).version(version).deleted(deletion);
        }
        Ok(event)
    }

    /// Lists deliveries when the configuration names a hook (`reconcile`); a table
    /// that is present but wrong is reported by `reconcile_request`, naming the key.
    fn reconcile_info(config: &Value) -> Option<ReconcileInfo> {
        config.get("reconcile")?;
        Some(ReconcileInfo {
            hosts: vec!["api.github.com".into()],
            api_base: "https://api.github.com".into(),
            lists_events: true,
            fetches_objects: false,
        })
    }

    /// `GET <deliveries>?per_page=100[&cursor=<GitHub's cursor>]`. `since` is not
    /// sent: GitHub cannot filter deliveries by time (see the crate docs).
    fn reconcile_request(
        config: &Value,
        _since: i64,
        cursor: Option<&str>,
    ) -> Result<RequestPlan, String> {
        let hook = Hook::required(config)?;
        let mut target = format!("{}?per_page={PAGE}", hook.deliveries());
        if let Some(cursor) = cursor {
            if !is_cursor(cursor) {
                return Err(format!(
                    "cursor {cursor:?} is not a GitHub deliveries cursor"
                ));
            }
            target.push_str("&cursor=");
            target.push_str(cursor);
        }
        Ok(api_headers(RequestPlan::get(target)))
    }

    fn reconcile_page(config: &Value, since: i64, answer: &Answer) -> Result<Page, String> {
        let hook = Hook::required(config)?;
        let list = core::str::from_utf8(&answer.body)
            .map_err(|e| e.to_string())
            .and_then(|text| json::value(text).map_err(|e| e.to_string()))
            .map_err(|e| format!("deliveries list: not JSON: {e}"))?;
        let deliveries = list.as_array().ok_or("deliveries list: not a JSON array")?;
        // Newest attempt of each guid, in the order the guids first appear.
        let mut listed: Vec<(u64, RemoteEvent)> = Vec::with_capacity(deliveries.len());
        // Newest first: the first delivery older than `since` ends the listing.
        let mut reached_since = false;
        for (i, delivery) in deliveries.iter().enumerate() {
            let (id, event) =
                listed_delivery(delivery).map_err(|e| format!("deliveries[{i}]: {e}"))?;
            if event.occurred_at.is_some_and(|at| at < since) {
                reached_since = true;
                continue;
            }
            let remote = RemoteEvent {
                event,
                repair: Repair::Redeliver(api_headers(RequestPlan {
                    method: "POST".into(),
                    target: format!("{}/{id}/attempts", hook.deliveries()),
                    headers: Vec::new(),
                    body: Vec::new(),
                })),
            };
            match listed
                .iter_mut()
                .find(|(_, seen)| seen.event.id == remote.event.id)
            {
                Some(seen) if seen.0 < id => *seen = (id, remote),
                Some(_) => {}
                None => listed.push((id, remote)),
            }
        }
        // An empty page ends the listing whatever its links say.
        let next_cursor = if listed.is_empty() || reached_since {
            None
        } else {
            next_cursor(&answer.headers)?
        };
        Ok(Page {
            events: listed.into_iter().map(|(_, remote)| remote).collect(),
            next_cursor,
        })
    }
}

/// The webhook whose deliveries are listed (`reconcile` in the plugin configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Hook {
    /// `owner/repo` and the hook's id.
    Repository(String, u64),
    Organization(String, u64),
    App,
}

impl Hook {
    /// The configured hook; `None` without a `reconcile` table.
    fn from_config(config: &Value) -> Result<Option<Hook>, ConfigError> {
        let Some(value) = config.get("reconcile") else {
            return Ok(None);
        };
        if !value.is_object() {
            return Err(ConfigError::new(
                "reconcile",
                "must be a table: { repository = \"owner/repo\", hook_id = 123 }, \
                 { organization = \"org\", hook_id = 123 } or { app = true }",
            ));
        }
        const KEYS: &[&str] = &["repository", "organization", "app", "hook_id"];
        let table = ConfigError::only_keys_at("reconcile", value, KEYS)?;
        let chosen: Vec<&str> = ["repository", "organization", "app"]
            .into_iter()
            .filter(|k| table.contains_key(*k))
            .collect();
        let hook_id = || -> Result<u64, ConfigError> {
            let id = match table.get("hook_id") {
                Some(Value::Number(n)) => n.as_u64(),
                Some(Value::String(s))
                    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    s.parse().ok()
                }
                Some(_) => None,
                None => {
                    return Err(ConfigError::new(
                        "reconcile.hook_id",
                        "required: the webhook's id (its deliveries' X-GitHub-Hook-ID header)",
                    ));
                }
            };
            id.filter(|id| *id > 0).ok_or_else(|| {
                ConfigError::new(
                    "reconcile.hook_id",
                    "must be the webhook's numeric id (> 0)",
                )
            })
        };
        let text = |key: &str| -> Result<&str, ConfigError> {
            table
                .get(key)
                .and_then(Value::as_str)
                .ok_or_else(|| ConfigError::new(format!("reconcile.{key}"), "must be a string"))
        };
        let hook = match chosen.as_slice() {
            ["repository"] => {
                let name = text("repository")?;
                let valid = name.split_once('/').is_some_and(|(owner, repo)| {
                    is_account(owner)
                        && !repo.is_empty()
                        && repo.len() <= 100
                        && repo != "."
                        && repo != ".."
                        && repo
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                });
                if !valid {
                    return Err(ConfigError::new(
                        "reconcile.repository",
                        format!(
                            "{name:?} is not \"owner/repo\" (letters, digits, -, _ and . only)"
                        ),
                    ));
                }
                Hook::Repository(name.to_owned(), hook_id()?)
            }
            ["organization"] => {
                let org = text("organization")?;
                if !is_account(org) {
                    return Err(ConfigError::new(
                        "reconcile.organization",
                        format!("{org:?} is not an organization login (letters, digits, - and _)"),
                    ));
                }
                Hook::Organization(org.to_owned(), hook_id()?)
            }
            // `app`, the one left.
            [_] => {
                if table.get("app") != Some(&Value::Bool(true)) {
                    return Err(ConfigError::new(
                        "reconcile.app",
                        "must be true (the GitHub App's webhook), or use repository or organization",
                    ));
                }
                if table.contains_key("hook_id") {
                    return Err(ConfigError::new(
                        "reconcile.hook_id",
                        "an app has one webhook: no hook_id with app = true",
                    ));
                }
                Hook::App
            }
            [] => {
                return Err(ConfigError::new(
                    "reconcile",
                    "names no webhook: set repository (and hook_id), organization (and \
                     hook_id) or app = true",
                ));
            }
            [first, second, ..] => {
                return Err(ConfigError::new(
                    format!("reconcile.{second}"),
                    format!("one webhook per endpoint: {first} is already set"),
                ));
            }
        };
        Ok(Some(hook))
    }

    /// The configured hook, for the reconcile calls (which run only with one).
    fn required(config: &Value) -> Result<Hook, String> {
        match Hook::from_config(config) {
            Ok(Some(hook)) => Ok(hook),
            Ok(None) => Err("the plugin configuration has no reconcile table".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The path of the hook's deliveries list.
    fn deliveries(&self) -> String {
        match self {
            Hook::Repository(name, id) => format!("/repos/{name}/hooks/{id}/deliveries"),
            Hook::Organization(org, id) => format!("/orgs/{org}/hooks/{id}/deliveries"),
            Hook::App => "/app/hook/deliveries".into(),
        }
    }
}

/// A user or organization login as a path segment: letters, digits, `-` and `_`
/// (Enterprise Managed Users' logins end in `_shortcode`).
fn is_account(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// GitHub's cursor as it appears in the `link` URL, sent back verbatim: query-safe
/// (it cannot end the parameter or add one), and not absurdly long.
fn is_cursor(cursor: &str) -> bool {
    cursor.len() <= 512 && hookhost_plugin_sdk::query_safe(cursor)
}

/// The headers every request to the REST API carries.
fn api_headers(plan: RequestPlan) -> RequestPlan {
    plan.header("accept", "application/vnd.github+json")
        .header("x-github-api-version", API_VERSION)
}

/// One item of a deliveries list: its delivery id, and the event a push of it is.
fn listed_delivery(delivery: &Value) -> Result<(u64, Event), String> {
    let id = delivery
        .get("id")
        .and_then(Value::as_u64)
        .ok_or("no numeric id")?;
    let guid = delivery
        .get("guid")
        .and_then(Value::as_str)
        .filter(|g| !g.is_empty())
        .ok_or("no guid")?;
    let name = delivery
        .get("event")
        .and_then(Value::as_str)
        .filter(|e| !e.is_empty())
        .ok_or("no event")?;
    let delivered_at = delivery
        .get("delivered_at")
        .and_then(Value::as_str)
        .and_then(decode::rfc3339_seconds);
    let action = delivery.get("action").and_then(Value::as_str);
    let event = named_event(name, action).id(guid).occurred_at(delivered_at);
    Ok((id, event))
}

/// The event GitHub's `X-GitHub-Event` name and the body's `action` make, pushed or
/// listed alike: `{event}.{action}` (or `{event}` without an action); a ping is
/// kept, not delivered.
fn named_event(name: &str, action: Option<&str>) -> Event {
    let event = Event::new(match action {
        Some(action) => format!("{name}.{action}"),
        None => name.to_owned(),
    });
    if name == "ping" {
        event.ignore("ping")
    } else {
        event
    }
}

/// The cursor of the `link` header's `rel="next"` URL; `None` without one.
fn next_cursor(headers: &[(String, Vec<u8>)]) -> Result<Option<String>, String> {
    let Some(url) = headers
        .iter()
        .filter(|(name, _)| name == "link")
        .find_map(|(_, value)| next_link(&String::from_utf8_lossy(value)).map(str::to_owned))
    else {
        return Ok(None);
    };
    let query = url
        .split_once('?')
        .map(|(_, q)| q.split('#').next().unwrap_or_default())
        .unwrap_or_default();
    let cursor = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("cursor="))
        .ok_or_else(|| format!("the next page's link {url:?} has no cursor"))?;
    if !is_cursor(cursor) {
        return Err(format!(
            "the next page's link {url:?} has an unexpected cursor"
        ));
    }
    Ok(Some(cursor.to_owned()))
}

/// The URL of a `link` header value's `rel="next"` entry (RFC 8288:
/// `<url>; rel="next", <url>; rel="prev"`).
fn next_link(value: &str) -> Option<&str> {
    let mut rest = value;
    loop {
        let open = rest.find('<')?;
        let close = open + rest[open..].find('>')?;
        let url = &rest[open + 1..close];
        let after = &rest[close + 1..];
        let end = after.find('<').unwrap_or(after.len());
        let is_next = after[..end].split([';', ',']).any(|param| {
            param.split_once('=').is_some_and(|(name, relations)| {
                name.trim().eq_ignore_ascii_case("rel")
                    && relations
                        .trim()
                        .trim_matches('"')
                        .split_ascii_whitespace()
                        .any(|r| r.eq_ignore_ascii_case("next"))
            })
        });
        if is_next {
            return Some(url);
        }
        rest = &after[end..];
    }
}

/// The first of [`RESOURCES`] the body holds with an id: its kind, its own event, its id.
fn resource(body: &Json) -> Option<(&'static str, &'static str, String)> {
    RESOURCES
        .iter()
        .find_map(|(key, own)| Some((*key, *own, body.id(&format!("/{key}/id"))?)))
}

hookhost_plugin_sdk::export_provider!(GitHub);
hookhost_plugin_sdk::no_std_runtime!();

#[cfg(test)]
mod tests {
    use super::*;
    use hookhost_plugin_sdk::testing::RequestBuilder;

    const URL: &str = "https://hooks.example.com/webhooks/github";

    #[test]
    fn plan_signs_the_body_with_sha256() {
        let req = RequestBuilder::post(URL)
            .header("X-Hub-Signature-256", "sha256=00ff")
            .header("X-Hub-Signature", "sha1=0102")
            .header("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
            .body("{}")
            .build();
        let plan = GitHub::plan_verification(&req).expect("plan");
        assert_eq!(plan.message, vec![Part::Body]);
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha256, vec![0x00, 0xff])]
        );
        assert_eq!(plan.timestamp, None);
        assert_eq!(
            plan.message_id.as_deref(),
            Some("72d3162e-cc78-11e3-81ab-4c9367dc0958")
        );
    }

    #[test]
    fn legacy_sha1_only_when_sha256_is_absent() {
        let req = RequestBuilder::post(URL)
            .header("X-Hub-Signature", "sha1=0102")
            .build();
        let plan = GitHub::plan_verification(&req).expect("plan");
        assert_eq!(
            plan.candidates,
            vec![Candidate::new(Algorithm::HmacSha1, vec![0x01, 0x02])]
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_rejections() {
        let none = RequestBuilder::post(URL).body("{}").build();
        assert!(matches!(
            GitHub::plan_verification(&none),
            Err(Rejection::MissingSignature(_))
        ));
        for bad in ["757107ea", "sha256=zz", "sha1=0102"] {
            let req = RequestBuilder::post(URL)
                .header("X-Hub-Signature-256", bad)
                .build();
            assert!(matches!(
                GitHub::plan_verification(&req),
                Err(Rejection::MalformedSignature(_))
            ));
        }
    }

    fn delivery(event: &str, body: &str) -> Request {
        RequestBuilder::post(URL)
            .header("X-GitHub-Delivery", "d-1")
            .header("X-GitHub-Event", event)
            .header("Content-Type", "application/json")
            .body(body)
            .build()
    }

    #[test]
    fn event_maps_action_and_first_resource() {
        let req = delivery(
            "issues",
            r#"{"action":"deleted","issue":{"id":1,"updated_at":"2024-01-01T00:00:01Z"},
                "repository":{"id":2}}"#,
        );
        let event = GitHub::describe_event(&req).expect("event");
        assert_eq!(event.id.as_deref(), Some("d-1"));
        assert_eq!(event.event_type, "issues.deleted");
        assert_eq!(event.resource_kind.as_deref(), Some("issue"));
        assert_eq!(event.resource_id.as_deref(), Some("1"));
        assert_eq!(event.resource_version, Some(1_704_067_201_000));
        assert!(event.deleted);

        let push = GitHub::describe_event(&delivery(
            "push",
            r#"{"repository":{"id":2,"updated_at":"2024-01-01T00:00:01Z"}}"#,
        ));
        let push = push.expect("push");
        assert_eq!(push.event_type, "push");
        assert_eq!(push.resource_kind.as_deref(), Some("repository"));
        assert_eq!(push.resource_id.as_deref(), Some("2"));
        assert_eq!(push.resource_version, None);
    }

    /// (resource kind, resource id, version, deleted) of a delivery.
    fn described(event: &str, body: &str) -> (String, String, Option<u64>, bool) {
        let described = GitHub::describe_event(&delivery(event, body)).expect(event);
        (
            described.resource_kind.expect("a resource"),
            described.resource_id.expect("a resource id"),
            described.resource_version,
            described.deleted,
        )
    }

    const REPOSITORY: &str = r#""repository":{"id":2,"updated_at":"2024-01-01T00:00:02Z"}"#;
    const AT_1: Option<u64> = Some(1_704_067_201_000);
    const AT_2: Option<u64> = Some(1_704_067_202_000);

    #[test]
    fn only_the_objects_own_event_deletes_it() {
        let at_1 = r#"{"id":1,"updated_at":"2024-01-01T00:00:01Z"}"#;
        let deleted =
            |object: &str| format!(r#"{{"action":"deleted","{object}":{at_1},{REPOSITORY}}}"#);
        let comment_deleted = |object: &str| {
            format!(r#"{{"action":"deleted","{object}":{at_1},"comment":{{"id":9}},{REPOSITORY}}}"#)
        };
        let own = |kind: &str| (kind.to_owned(), "1".to_owned(), AT_1, true);
        for (event, kind) in [
            ("issues", "issue"),
            ("pull_request", "pull_request"),
            ("release", "release"),
            ("discussion", "discussion"),
            ("milestone", "milestone"),
            ("label", "label"),
            ("package", "package"),
        ] {
            assert_eq!(described(event, &deleted(kind)), own(kind), "{event}");
        }
        // A deleted comment names what it was on, which is not deleted, nor versioned
        // by it (a late redelivery would be stale); nor deleted when its body is sent
        // again under that object's own event (the name is not signed).
        for (event, kind, own_event) in [
            ("issue_comment", "issue", "issues"),
            (
                "pull_request_review_comment",
                "pull_request",
                "pull_request",
            ),
            ("discussion_comment", "discussion", "discussion"),
        ] {
            let body = comment_deleted(kind);
            let lives_on = |version| (kind.to_owned(), "1".to_owned(), version, false);
            assert_eq!(described(event, &body), lives_on(None), "{event}");
            assert_eq!(described(own_event, &body), lives_on(AT_1), "{own_event}");
        }
        // Events that name only the repository delete nothing.
        for event in ["star", "deploy_key", "project", "branch_protection_rule"] {
            let body = format!(r#"{{"action":"deleted",{REPOSITORY}}}"#);
            assert_eq!(
                described(event, &body),
                ("repository".into(), "2".into(), None, false),
                "{event}"
            );
        }
        let repository = format!(r#"{{"action":"deleted",{REPOSITORY}}}"#);
        assert_eq!(
            described("repository", &repository),
            ("repository".into(), "2".into(), AT_2, true)
        );
        // Nor when such a body is sent again as `repository`'s own event: what else it
        // carries says it is not the repository's deletion.
        for extra in [
            r#""starred_at":null"#,
            r#""key":{"id":7}"#,
            r#""hook_id":3,"hook":{"id":3}"#,
            r#""rule":{"id":4}"#,
            r#""project":{"id":5}"#,
        ] {
            let body = format!(r#"{{"action":"deleted",{extra},{REPOSITORY}}}"#);
            assert_eq!(
                described("repository", &body),
                ("repository".into(), "2".into(), AT_2, false),
                "{extra}"
            );
        }
        let with_context = format!(
            r#"{{"action":"deleted",{REPOSITORY},"sender":{{"id":8}},"organization":{{"id":9}},"installation":{{"id":10}},"enterprise":{{"id":11}}}}"#
        );
        assert_eq!(
            described("repository", &with_context),
            ("repository".into(), "2".into(), AT_2, true)
        );
    }

    #[test]
    fn only_an_objects_own_event_versions_it() {
        for (event, body) in [
            (
                "push",
                format!(r#"{{"ref":"refs/heads/main",{REPOSITORY}}}"#),
            ),
            ("status", format!(r#"{{"state":"success",{REPOSITORY}}}"#)),
            ("create", format!(r#"{{"ref_type":"branch",{REPOSITORY}}}"#)),
            ("delete", format!(r#"{{"ref_type":"branch",{REPOSITORY}}}"#)),
            (
                "commit_comment",
                format!(r#"{{"action":"created",{REPOSITORY}}}"#),
            ),
            (
                "workflow_dispatch",
                format!(r#"{{"ref":"main",{REPOSITORY}}}"#),
            ),
            (
                "repository_dispatch",
                format!(r#"{{"action":"deploy",{REPOSITORY}}}"#),
            ),
            ("star", format!(r#"{{"action":"created",{REPOSITORY}}}"#)),
        ] {
            assert_eq!(
                described(event, &body),
                ("repository".into(), "2".into(), None, false),
                "{event}"
            );
        }
        for action in ["edited", "renamed", "archived"] {
            let body = format!(r#"{{"action":"{action}",{REPOSITORY}}}"#);
            assert_eq!(
                described("repository", &body),
                ("repository".into(), "2".into(), AT_2, false),
                "repository.{action}"
            );
        }
        // Other objects too: a comment names its issue without a version (a late
        // redelivery would be stale against the issue's later events), the issue's own
        // event with it.
        let issue = r#""issue":{"id":1,"updated_at":"2024-01-01T00:00:01Z"}"#;
        let comment =
            format!(r#"{{"action":"created",{issue},"comment":{{"id":9}},{REPOSITORY}}}"#);
        assert_eq!(
            described("issue_comment", &comment),
            ("issue".into(), "1".into(), None, false)
        );
        let labeled = format!(r#"{{"action":"labeled",{issue},{REPOSITORY}}}"#);
        assert_eq!(
            described("issues", &labeled),
            ("issue".into(), "1".into(), AT_1, false)
        );
    }

    // ------------------------------------------------------------ reconciliation

    use hookhost_plugin_sdk::serde_json::json;

    fn repo_config() -> Value {
        json!({"reconcile": {"repository": "octo-org/Hello-World", "hook_id": 482169371}})
    }

    fn answer(link: Option<&str>, body: &str) -> Answer {
        Answer {
            status: 200,
            headers: link
                .map(|l| ("link".to_owned(), l.as_bytes().to_vec()))
                .into_iter()
                .collect(),
            body: body.as_bytes().to_vec(),
        }
    }

    fn headers_of(plan: &RequestPlan) -> Vec<(&str, &str)> {
        plan.headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect()
    }

    const API_HEADERS: [(&str, &str); 2] = [
        ("accept", "application/vnd.github+json"),
        ("x-github-api-version", "2022-11-28"),
    ];

    #[test]
    fn reconcile_info_needs_the_reconcile_table() {
        assert_eq!(GitHub::reconcile_info(&json!({})), None);
        assert_eq!(GitHub::reconcile_info(&Value::Null), None);
        assert_eq!(
            GitHub::reconcile_info(&repo_config()),
            Some(ReconcileInfo {
                hosts: vec!["api.github.com".into()],
                api_base: "https://api.github.com".into(),
                lists_events: true,
                fetches_objects: false,
            })
        );
        assert_eq!(
            GitHub::check_config(&json!({})),
            Ok(EndpointFacts::default())
        );
        assert_eq!(
            GitHub::check_config(&repo_config()),
            Ok(EndpointFacts::default())
        );
        assert!(
            GitHub::reconcile_request(&json!({}), 0, None)
                .expect_err("no table")
                .contains("no reconcile table")
        );
    }

    #[test]
    fn request_targets_for_repository_organization_and_app_hooks() {
        let cases = [
            (
                repo_config(),
                "/repos/octo-org/Hello-World/hooks/482169371/deliveries",
            ),
            (
                json!({"reconcile": {"organization": "octo-org", "hook_id": "7"}}),
                "/orgs/octo-org/hooks/7/deliveries",
            ),
            (json!({"reconcile": {"app": true}}), "/app/hook/deliveries"),
        ];
        for (config, path) in cases {
            let first = GitHub::reconcile_request(&config, 1_700_000_000, None).expect("plan");
            assert_eq!(first.method, "GET");
            assert_eq!(first.target, format!("{path}?per_page=100"));
            assert_eq!(headers_of(&first), API_HEADERS);
            assert!(first.body.is_empty());
            let next = GitHub::reconcile_request(&config, 1_700_000_000, Some("v1_12077215967"))
                .expect("plan");
            assert_eq!(
                next.target,
                format!("{path}?per_page=100&cursor=v1_12077215967")
            );
        }
    }

    #[test]
    fn cursors_cannot_add_query_parameters() {
        let config = repo_config();
        for good in ["v1_12077215967", "a-b.c~d", "MTIz%3D%3D"] {
            assert!(
                GitHub::reconcile_request(&config, 0, Some(good)).is_ok(),
                "{good}"
            );
        }
        for bad in [
            "",
            "v1&per_page=1",
            "v1#x",
            "v1 2",
            "a=b",
            "a/b",
            "%2",
            "%zz",
            "é",
        ] {
            let error = GitHub::reconcile_request(&config, 0, Some(bad)).expect_err(bad);
            assert!(error.contains("cursor"), "{bad}: {error}");
        }
    }

    const PAGE_BODY: &str = r#"[
        {"id": 30, "guid": "g-3", "delivered_at": "2024-06-12T18:30:00Z", "redelivery": true,
         "duration": 0.2, "status": "OK", "status_code": 200, "event": "issues",
         "action": "opened", "installation_id": null, "repository_id": 1296269},
        {"id": 20, "guid": "g-2", "delivered_at": "2024-06-12T18:20:00Z", "redelivery": false,
         "duration": 0.1, "status": "Invalid HTTP Response: 503", "status_code": 503,
         "event": "push", "action": null, "installation_id": null, "repository_id": 1296269},
        {"id": 10, "guid": "g-3", "delivered_at": "2024-06-12T18:10:00Z", "redelivery": false,
         "duration": 10.0, "status": "timed out", "status_code": 0, "event": "issues",
         "action": "opened", "installation_id": null, "repository_id": 1296269},
        {"id": 5, "guid": "g-1", "delivered_at": "2024-06-12T18:00:00Z", "redelivery": false,
         "duration": 0.1, "status": "OK", "status_code": 200, "event": "ping",
         "installation_id": null, "repository_id": 1296269}
    ]"#;

    #[test]
    fn a_page_lists_each_guid_once_with_a_redelivery_request() {
        let link = "<https://api.github.com/repositories/1296269/hooks/482169371/deliveries?per_page=100&cursor=v1_5>; rel=\"next\", \
                    <https://api.github.com/repositories/1296269/hooks/482169371/deliveries?per_page=100>; rel=\"first\"";
        let page = GitHub::reconcile_page(&repo_config(), 0, &answer(Some(link), PAGE_BODY))
            .expect("page");
        assert_eq!(page.next_cursor.as_deref(), Some("v1_5"));
        let listed: Vec<(Option<&str>, &str, Option<i64>)> = page
            .events
            .iter()
            .map(|r| {
                (
                    r.event.id.as_deref(),
                    r.event.event_type.as_str(),
                    r.event.occurred_at,
                )
            })
            .collect();
        assert_eq!(
            listed,
            vec![
                (Some("g-3"), "issues.opened", Some(1_718_217_000)),
                (Some("g-2"), "push", Some(1_718_216_400)),
                (Some("g-1"), "ping", Some(1_718_215_200)),
            ]
        );
        let Repair::Redeliver(plan) = &page.events[0].repair else {
            panic!(
                "GitHub deliveries are redelivered: {:?}",
                page.events[0].repair
            );
        };
        assert_eq!(plan.method, "POST");
        assert_eq!(
            plan.target, "/repos/octo-org/Hello-World/hooks/482169371/deliveries/30/attempts",
            "the newest attempt of g-3"
        );
        assert_eq!(headers_of(plan), API_HEADERS);
        assert!(plan.body.is_empty());
        assert_eq!(
            page.events[2].event.disposition,
            hookhost_plugin_sdk::Disposition::Ignore("ping".into())
        );
    }

    #[test]
    fn deliveries_older_than_since_are_left_out_and_end_the_listing() {
        let link = "<https://api.github.com/repositories/1296269/hooks/482169371/deliveries?per_page=100&cursor=v1_5>; rel=\"next\"";
        // 18:15 on the page's day: g-3's newest attempt and g-2 are newer.
        let since = 1_718_216_100;
        let page = GitHub::reconcile_page(&repo_config(), since, &answer(Some(link), PAGE_BODY))
            .expect("page");
        let ids: Vec<Option<&str>> = page.events.iter().map(|r| r.event.id.as_deref()).collect();
        assert_eq!(ids, vec![Some("g-3"), Some("g-2")]);
        assert_eq!(page.next_cursor, None, "an older delivery ends the listing");
        let everything = GitHub::reconcile_page(&repo_config(), 0, &answer(Some(link), PAGE_BODY))
            .expect("page");
        assert_eq!(everything.next_cursor.as_deref(), Some("v1_5"));
    }

    #[test]
    fn the_newest_attempt_wins_whatever_the_order() {
        let body = r#"[
            {"id": 1, "guid": "g", "delivered_at": "2024-06-12T18:00:00Z", "event": "push", "action": null},
            {"id": 9, "guid": "g", "delivered_at": "2024-06-12T19:00:00Z", "event": "push", "action": null}
        ]"#;
        let config = json!({"reconcile": {"app": true}});
        let page = GitHub::reconcile_page(&config, 0, &answer(None, body)).expect("page");
        assert_eq!(page.events.len(), 1);
        assert_eq!(
            page.events[0].repair,
            Repair::Redeliver(api_headers(RequestPlan {
                method: "POST".into(),
                target: "/app/hook/deliveries/9/attempts".into(),
                headers: Vec::new(),
                body: Vec::new(),
            }))
        );
    }

    #[test]
    fn the_event_type_is_named_as_a_push_names_it() {
        let body = r#"[{"id": 1, "guid": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
            "delivered_at": "2024-01-01T00:00:01Z", "event": "issues", "action": "deleted"}]"#;
        let page = GitHub::reconcile_page(&repo_config(), 0, &answer(None, body)).expect("page");
        let pushed = GitHub::describe_event(
            &RequestBuilder::post(URL)
                .header("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
                .header("X-GitHub-Event", "issues")
                .body(r#"{"action":"deleted","issue":{"id":1}}"#)
                .build(),
        )
        .expect("push");
        assert_eq!(page.events[0].event.id, pushed.id);
        assert_eq!(page.events[0].event.event_type, pushed.event_type);
        assert_eq!(page.events[0].event.occurred_at, Some(1_704_067_201));
    }

    #[test]
    fn the_last_page_has_no_next_link() {
        let config = repo_config();
        let prev_only = "<https://api.github.com/repositories/1/hooks/2/deliveries?per_page=100&cursor=v1_9>; rel=\"prev\"";
        let page =
            GitHub::reconcile_page(&config, 0, &answer(Some(prev_only), PAGE_BODY)).expect("page");
        assert_eq!(page.next_cursor, None);
        assert_eq!(page.events.len(), 3);
        let page = GitHub::reconcile_page(&config, 0, &answer(None, PAGE_BODY)).expect("page");
        assert_eq!(page.next_cursor, None);
        // An empty page ends the listing even when it links onwards.
        let next =
            "<https://api.github.com/repositories/1/hooks/2/deliveries?cursor=v1_1>; rel=\"next\"";
        assert_eq!(
            GitHub::reconcile_page(&config, 0, &answer(Some(next), "[]")),
            Ok(Page::default())
        );
    }

    #[test]
    fn unreadable_pages_are_errors() {
        let config = repo_config();
        let cases = [
            ("{}", None, "not a JSON array"),
            ("nope", None, "not JSON"),
            (
                r#"[{"guid":"g","event":"push"}]"#,
                None,
                "deliveries[0]: no numeric id",
            ),
            (
                r#"[{"id":1,"event":"push"}]"#,
                None,
                "deliveries[0]: no guid",
            ),
            (r#"[{"id":1,"guid":"g"}]"#, None, "deliveries[0]: no event"),
            (
                r#"[{"id":1,"guid":"g","event":"push"}]"#,
                Some("<https://api.github.com/x?per_page=100>; rel=\"next\""),
                "has no cursor",
            ),
            (
                r#"[{"id":1,"guid":"g","event":"push"}]"#,
                Some("<https://api.github.com/x?cursor=a%26b=c&d>; rel=\"next\""),
                "unexpected cursor",
            ),
            (
                r#"[{"id":1,"guid":"g","event":"push"}]"#,
                Some("<https://api.github.com/x?cursor=a;b>; rel=\"next\""),
                "unexpected cursor",
            ),
        ];
        for (body, link, wanted) in cases {
            let error = GitHub::reconcile_page(&config, 0, &answer(link, body)).expect_err(body);
            assert!(error.contains(wanted), "{body} {link:?}: {error}");
        }
        let mut not_utf8 = answer(None, "[]");
        not_utf8.body = vec![b'[', 0xff, b']'];
        let error = GitHub::reconcile_page(&config, 0, &not_utf8).expect_err("not UTF-8");
        assert!(
            error.starts_with("deliveries list: not JSON: invalid utf-8"),
            "{error}"
        );
        // A percent-escaped cursor is taken, and sent back, verbatim.
        let escaped = "<https://api.github.com/x?cursor=a%26b%3D&per_page=100#top>; rel=\"next\"";
        let page = GitHub::reconcile_page(
            &config,
            0,
            &answer(Some(escaped), r#"[{"id":1,"guid":"g","event":"push"}]"#),
        )
        .expect("page");
        assert_eq!(page.next_cursor.as_deref(), Some("a%26b%3D"));
        let next =
            GitHub::reconcile_request(&config, 0, page.next_cursor.as_deref()).expect("plan");
        assert!(next.target.ends_with("&cursor=a%26b%3D"), "{}", next.target);
    }

    #[test]
    fn link_headers_are_read_by_relation() {
        assert_eq!(
            next_link(r#"<https://a/x?cursor=1>; rel="prev", <https://a/x?cursor=2>; rel="next""#),
            Some("https://a/x?cursor=2")
        );
        assert_eq!(
            next_link(r#"<https://a/x?cursor=3>;rel=next"#),
            Some("https://a/x?cursor=3")
        );
        assert_eq!(
            next_link(r#"<https://a/x?cursor=4>; title="x"; rel="next last""#),
            Some("https://a/x?cursor=4")
        );
        assert_eq!(next_link(r#"<https://a/x?cursor=5>; rel="nextish""#), None);
        assert_eq!(next_link(""), None);
    }

    #[track_caller]
    fn refused(config: Value, key: &str, says: &str) {
        let error = GitHub::check_config(&config).expect_err(&config.to_string());
        assert_eq!(error.key, key, "{config}: {}", error.message);
        assert!(error.message.contains(says), "{config}: {}", error.message);
        let planned = GitHub::reconcile_request(&config, 0, None).expect_err("refused");
        assert!(planned.contains(key), "{planned}");
        assert!(GitHub::reconcile_page(&config, 0, &answer(None, "[]")).is_err());
    }

    #[test]
    fn bad_reconcile_tables_name_their_key() {
        let r = |table: Value| json!({ "reconcile": table });
        refused(
            json!({"reconcile": "octo/repo"}),
            "reconcile",
            "must be a table",
        );
        refused(r(json!({})), "reconcile", "names no webhook");
        refused(r(json!({"hook_id": 1})), "reconcile", "names no webhook");
        refused(
            r(json!({"repo": "a/b", "hook_id": 1})),
            "reconcile.repo",
            "unknown key",
        );
        for bad in [
            "octo",
            "octo/",
            "/repo",
            "octo/re po",
            "octo/a/b",
            "oc&to/repo",
            "octo/..",
            "octo/repo?x=1",
        ] {
            refused(
                r(json!({"repository": bad, "hook_id": 1})),
                "reconcile.repository",
                "owner/repo",
            );
        }
        refused(
            r(json!({"repository": 5, "hook_id": 1})),
            "reconcile.repository",
            "must be a string",
        );
        refused(
            r(json!({"repository": "a/b"})),
            "reconcile.hook_id",
            "required",
        );
        for bad in [
            json!(0),
            json!(-1),
            json!(1.5),
            json!("12a"),
            json!(""),
            json!(true),
        ] {
            refused(
                r(json!({"repository": "a/b", "hook_id": bad})),
                "reconcile.hook_id",
                "numeric id",
            );
        }
        refused(
            r(json!({"organization": "octo/org", "hook_id": 1})),
            "reconcile.organization",
            "organization login",
        );
        refused(
            r(json!({"organization": "octo"})),
            "reconcile.hook_id",
            "required",
        );
        refused(r(json!({"app": false})), "reconcile.app", "must be true");
        refused(r(json!({"app": "yes"})), "reconcile.app", "must be true");
        refused(
            r(json!({"app": true, "hook_id": 1})),
            "reconcile.hook_id",
            "no hook_id",
        );
        refused(
            r(json!({"repository": "a/b", "organization": "a", "hook_id": 1})),
            "reconcile.organization",
            "repository is already set",
        );
        // Any other key is a mistake, named.
        let misspelt =
            GitHub::check_config(&json!({"reconcil": {"app": true}})).expect_err("a misspelt key");
        assert_eq!(misspelt.key, "reconcil");
        assert!(
            misspelt.message.contains("unknown key"),
            "{}",
            misspelt.message
        );
        assert!(
            GitHub::check_config(
                &json!({"reconcile": {"repository": "Octo_EMU/my.repo-1", "hook_id": 1}})
            )
            .is_ok()
        );
    }

    #[test]
    fn ping_is_ignored_and_bad_deliveries_are_rejections() {
        let ping =
            GitHub::describe_event(&delivery("ping", r#"{"zen":"Keep it logically awesome."}"#));
        assert_eq!(
            ping.expect("ping").disposition,
            hookhost_plugin_sdk::Disposition::Ignore("ping".into())
        );
        let no_delivery = RequestBuilder::post(URL)
            .header("X-GitHub-Event", "push")
            .body("{}")
            .build();
        assert!(matches!(
            GitHub::describe_event(&no_delivery),
            Err(Rejection::MalformedBody(_))
        ));
        assert!(matches!(
            GitHub::describe_event(&delivery("push", "Hello, World!")),
            Err(Rejection::MalformedBody(_))
        ));
        let form = RequestBuilder::post(URL)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body("payload=%7B%7D")
            .build();
        assert!(matches!(
            GitHub::describe_event(&form),
            Err(Rejection::Unsupported(_))
        ));
    }
}
