//! Pulling from the provider's API: reconciliation (listing events that may never have
//! arrived) and fetching a thin event's current object. Optional: a plugin implements
//! [`crate::Provider::reconcile_info`] and the calls it declares. It plans requests and
//! reads answers; the host makes each request and adds the credential, which the
//! plugin never sees.

use crate::Event;
use crate::prelude::*;

/// What an endpoint's configuration lets the plugin pull.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReconcileInfo {
    /// Hosts a plan may address (`api.stripe.com`); the host refuses any other.
    pub hosts: Vec<String>,
    /// The provider's API base URL; an endpoint may override it.
    pub api_base: String,
    /// [`crate::Provider::reconcile_request`] and `reconcile_page` are implemented.
    pub lists_events: bool,
    /// [`crate::Provider::fetch_request`] and `fetch_result` are implemented.
    pub fetches_objects: bool,
}

/// An HTTP request for the host to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestPlan {
    pub method: String,
    /// A path and query on the API base, or an absolute `https://` URL on a declared
    /// host.
    pub target: String,
    /// Headers to send, never a credential (the host adds authentication).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RequestPlan {
    /// `GET target`.
    pub fn get(target: impl Into<String>) -> Self {
        Self {
            method: "GET".into(),
            target: target.into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A 2xx answer to a planned request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// Lower-case names, raw values.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// One event as the provider's API lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteEvent {
    /// What the event is (its id is required: it is what a push would have carried).
    /// Its disposition is not passed on: a listed event that is missing is repaired
    /// to be delivered, so list only what a push would have had delivered.
    pub event: Event,
    /// How to repair it when it never arrived.
    pub repair: Repair,
}

/// How a listed event that never arrived is repaired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// Store this body and deliver it: the event as a push would have carried it.
    Store(Vec<u8>),
    /// Ask the provider to send it again (for APIs that list deliveries without their
    /// payloads); it then arrives as a push, signed.
    Redeliver(RequestPlan),
}

/// One page of the provider's list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Page {
    pub events: Vec<RemoteEvent>,
    /// Where the next page starts; `None` after the last page.
    pub next_cursor: Option<String>,
}

/// A stored event, offered for fetching its current object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    pub id: String,
    pub event_type: String,
    pub resource_kind: Option<String>,
    pub resource_id: Option<String>,
    pub body: Vec<u8>,
}

/// A thin event's current object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub resource_version: Option<u64>,
    /// Delivered instead of the thin event's body.
    pub body: Vec<u8>,
}

/// Whether `text` can stand in a URL's query as it is, without ending its parameter
/// or adding one: non-empty, only unreserved characters (RFC 3986) and `%XX` escapes.
/// For a cursor a plugin sends back, or a parameter name it was configured with.
pub fn query_safe(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let escape = bytes.get(i + 1..i + 3);
                if !escape.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                    return false;
                }
                i += 3;
            }
            b if b.is_ascii_alphanumeric() || b"-._~".contains(&b) => i += 1,
            _ => return false,
        }
    }
    !bytes.is_empty()
}
