//! Generated bindings for every contract version this host speaks, converted to the
//! SDK's plain types at this edge; nothing else in the host names a wit type.
//!
//! `v0_2` is the current contract (`wit/provider.wit`); `v0_1` is the first release,
//! frozen in `wit/v0.1/`. Plugins built against either load and work: a 0.1 plugin
//! simply has no configuration check and no GET handshake.

use hookhost_plugin_sdk as sdk;

/// The exports this host accepts, newest first.
pub const PLUGIN_INTERFACES: [&str; 2] = [v0_2::PLUGIN_INTERFACE, v0_1::PLUGIN_INTERFACE];

/// A request's `head` as the per-request calls lower it: borrowed from the request, so
/// a fresh instance copies no header on the host's side. Both contract versions'
/// `head` records have this shape; [`Exports::find`](v0_2::Exports::find) checks it
/// against each component.
#[derive(wasmtime::component::ComponentType, wasmtime::component::Lower)]
#[component(record)]
pub struct Head<'a> {
    pub method: &'a str,
    pub url: &'a str,
    pub headers: &'a [Header<'a>],
    pub config: &'a str,
}

/// One header of a borrowed [`Head`].
#[derive(wasmtime::component::ComponentType, wasmtime::component::Lower)]
#[component(record)]
pub struct Header<'a> {
    pub name: &'a str,
    pub value: &'a [u8],
}

/// What each element of a list a plugin hands back counts against the output cap, on
/// top of its bytes: about the size of the host's copy of it. Counted as its bytes
/// alone, a plan of a million empty parts was small, and the host walked every part
/// for every key.
pub const ELEMENT_BYTES: usize = 16;

pub mod v0_1 {
    use super::sdk;

    wasmtime::component::bindgen!({
        path: "../wit/v0.1",
        world: "provider",
    });

    pub const PLUGIN_INTERFACE: &str = "hookhost:provider/plugin@0.1.0";
    /// 0.1 has no `session` interface.
    const SESSION_INTERFACE: Option<&str> = None;

    super::conversions!(
        self::hookhost::provider::types,
        key_format {}
        algorithm {}
        disposition {}
    );

    fn disposition_size(_: &wit::Disposition) -> usize {
        0
    }

    pub fn algorithms(_: &wit::PluginInfo) -> Vec<sdk::Algorithm> {
        Vec::new()
    }
}

pub mod v0_2 {
    use super::sdk;

    wasmtime::component::bindgen!({
        path: "../wit",
        world: "provider",
    });

    pub const PLUGIN_INTERFACE: &str = "hookhost:provider/plugin@0.2.0";
    /// The per-request calls with the request passed once (optional).
    const SESSION_INTERFACE: Option<&str> = Some("hookhost:provider/session@0.2.0");

    /// `head` in the generated bindings' owned types, for the calls made through them
    /// (`handshake`, a GET's).
    pub fn owned_head(head: &super::Head<'_>) -> wit::Head {
        wit::Head {
            method: head.method.to_owned(),
            url: head.url.to_owned(),
            headers: (head.headers.iter())
                .map(|h| wit::Header {
                    name: h.name.to_owned(),
                    value: h.value.to_vec(),
                })
                .collect(),
            config: head.config.to_owned(),
        }
    }

    super::conversions!(
        self::hookhost::provider::types,
        key_format {
            wit::KeyFormat::EcdsaP256SpkiBase64 => sdk::KeyFormat::EcdsaP256SpkiBase64,
        }
        algorithm {
            wit::Algorithm::EcdsaP256Sha256 => sdk::Algorithm::EcdsaP256Sha256,
            wit::Algorithm::Token => sdk::Algorithm::Token,
            wit::Algorithm::Sha256SecretPrefix => sdk::Algorithm::Sha256SecretPrefix,
        }
        disposition {
            wit::Disposition::Answer(r) => sdk::Disposition::Answer(response(r)),
        }
    );

    fn response(r: wit::Response) -> sdk::Response {
        sdk::Response {
            status: r.status,
            content_type: r.content_type,
            headers: r.headers,
            body: r
                .body
                .into_iter()
                .map(|part| match part {
                    wit::ResponsePart::Text(t) => sdk::ResponsePart::Text(t),
                    wit::ResponsePart::HmacSha256Hex(t) => sdk::ResponsePart::HmacSha256Hex(t),
                })
                .collect(),
        }
    }

    fn response_size(r: &wit::Response) -> usize {
        let headers: usize = r
            .headers
            .iter()
            .map(|(n, v)| super::ELEMENT_BYTES + n.len() + v.len())
            .sum();
        let body: usize = r
            .body
            .iter()
            .map(|p| match p {
                wit::ResponsePart::Text(t) | wit::ResponsePart::HmacSha256Hex(t) => {
                    super::ELEMENT_BYTES + t.len()
                }
            })
            .sum();
        r.content_type.len() + headers + body
    }

    fn disposition_size(d: &wit::Disposition) -> usize {
        match d {
            wit::Disposition::Answer(r) => response_size(r),
            _ => 0,
        }
    }

    pub fn handshake(h: wit::HandshakeReply) -> sdk::Handshake {
        sdk::Handshake {
            check: match h.check {
                wit::HandshakeCheck::None => sdk::HandshakeCheck::None,
                wit::HandshakeCheck::Token(t) => sdk::HandshakeCheck::Token(t),
            },
            response: response(h.response),
        }
    }

    pub fn handshake_size(h: &wit::HandshakeReply) -> usize {
        let token = match &h.check {
            wit::HandshakeCheck::None => 0,
            wit::HandshakeCheck::Token(t) => t.len(),
        };
        token + response_size(&h.response)
    }

    /// The algorithms a plugin declares (0.1 plugins declare none).
    pub fn algorithms(info: &wit::PluginInfo) -> Vec<sdk::Algorithm> {
        info.algorithms.iter().copied().map(algorithm).collect()
    }

    pub fn endpoint_facts(facts: wit::EndpointFacts) -> sdk::EndpointFacts {
        sdk::EndpointFacts {
            key_formats: facts.key_formats.into_iter().map(key_format).collect(),
            default_tolerance_seconds: facts.default_tolerance_seconds,
        }
    }

    pub fn config_error(error: wit::ConfigError) -> sdk::ConfigError {
        sdk::ConfigError {
            key: error.key,
            message: error.message,
        }
    }
}

/// The conversions every contract version shares; each version adds the match arms of
/// the cases it introduced.
macro_rules! conversions {
    (
        $wit:path,
        key_format { $($key_format:tt)* }
        algorithm { $($algorithm:tt)* }
        disposition { $($disposition:tt)* }
    ) => {
        use $wit as wit;
        use super::Head;

/// Where a component's per-request exports are, found and type-checked once when it
/// loads. The generated bindings would look up and type-check every function of the
/// interface again in each fresh instance, that is on every request.
#[derive(Clone, Copy)]
pub struct Exports {
    /// `plan-verification`: `session`'s when the component exports that (the
    /// instance keeps the request), else `plugin`'s.
    plan: wasmtime::component::ComponentExportIndex,
    /// `plugin.describe-event`: the head and body passed again.
    describe: wasmtime::component::ComponentExportIndex,
    /// `session.describe-event`, when exported: after `plan`, it passes nothing.
    kept: Option<wasmtime::component::ComponentExportIndex>,
}

impl Exports {
    /// Find `plan-verification` and `describe-event` in `pre`'s component (and the
    /// optional `session` interface's), and check their types against an instance of
    /// it in `store`.
    pub fn find<T: 'static>(
        pre: &wasmtime::component::InstancePre<T>,
        store: &mut wasmtime::Store<T>,
    ) -> wasmtime::Result<Exports> {
        let component = pre.component();
        let index = |interface: &str, name: &str| {
            let within = component
                .get_export_index(None, interface)
                .ok_or_else(|| wasmtime::format_err!("no {interface} export"))?;
            component
                .get_export_index(Some(&within), name)
                .ok_or_else(|| wasmtime::format_err!("no `{name}` export in {interface}"))
        };
        let describe = index(PLUGIN_INTERFACE, "describe-event")?;
        let (plan, kept) = match SESSION_INTERFACE
            .filter(|session| component.get_export_index(None, session).is_some())
        {
            Some(session) => (
                index(session, "plan-verification")?,
                Some(index(session, "describe-event")?),
            ),
            None => (index(PLUGIN_INTERFACE, "plan-verification")?, None),
        };
        let instance = pre.instantiate(&mut *store)?;
        instance.get_typed_func::<(&Head, &[u8]), (Result<wit::Plan, wit::Rejection>,)>(
            &mut *store,
            &plan,
        )?;
        instance.get_typed_func::<(&Head, &[u8]), (Result<wit::Event, wit::Rejection>,)>(
            &mut *store,
            &describe,
        )?;
        if let Some(kept) = &kept {
            instance
                .get_typed_func::<(), (Result<wit::Event, wit::Rejection>,)>(&mut *store, kept)?;
        }
        Ok(Exports {
            plan,
            describe,
            kept,
        })
    }

    pub fn plan_verification<T>(
        &self,
        store: &mut wasmtime::Store<T>,
        instance: &wasmtime::component::Instance,
        head: &Head,
        body: &[u8],
    ) -> wasmtime::Result<Result<wit::Plan, wit::Rejection>> {
        // SAFETY: `find` checked `self.plan` against these types.
        #[allow(unsafe_code)]
        let (answer,) = unsafe { Self::call(store, instance, &self.plan, (head, body))? };
        Ok(answer)
    }

    /// `describe-event`. After `plan_verification` in this instance (`planned`), a
    /// component with `session` gets nothing passed: it kept the request.
    pub fn describe_event<T>(
        &self,
        store: &mut wasmtime::Store<T>,
        instance: &wasmtime::component::Instance,
        head: &Head,
        body: &[u8],
        planned: bool,
    ) -> wasmtime::Result<Result<wit::Event, wit::Rejection>> {
        // SAFETY: `find` checked `self.kept` and `self.describe` against these types.
        #[allow(unsafe_code)]
        let (answer,) = unsafe {
            match &self.kept {
                Some(kept) if planned => Self::call(store, instance, kept, ())?,
                _ => Self::call(store, instance, &self.describe, (head, body))?,
            }
        };
        Ok(answer)
    }

    /// Call the export at `index` with types `P` → `R`, without checking them again.
    ///
    /// # Safety
    ///
    /// `find` must have checked the export at `index` against `P` → `R` for this
    /// component (every instance of a component has the same export types).
    #[allow(unsafe_code)]
    unsafe fn call<T, P, R>(
        store: &mut wasmtime::Store<T>,
        instance: &wasmtime::component::Instance,
        index: &wasmtime::component::ComponentExportIndex,
        params: P,
    ) -> wasmtime::Result<R>
    where
        P: wasmtime::component::ComponentNamedList + wasmtime::component::Lower,
        R: wasmtime::component::ComponentNamedList + wasmtime::component::Lift,
    {
        let func = instance
            .get_func(&mut *store, index)
            .ok_or_else(|| wasmtime::format_err!("the export found at load is gone"))?;
        // SAFETY: the caller's promise: this export's type was checked as `P` → `R`.
        let call = unsafe { wasmtime::component::TypedFunc::<P, R>::new_unchecked(func) };
        call.call(store, params)
    }
}

pub fn info(info: wit::PluginInfo) -> sdk::PluginInfo {
    sdk::PluginInfo {
        name: info.name,
        version: info.version,
        provider: info.provider,
        key_formats: info.key_formats.into_iter().map(key_format).collect(),
        default_tolerance_seconds: info.default_tolerance_seconds,
        retry_behaviour: info.retry_behaviour,
    }
}

fn algorithm(algorithm: wit::Algorithm) -> sdk::Algorithm {
    match algorithm {
        wit::Algorithm::HmacSha1 => sdk::Algorithm::HmacSha1,
        wit::Algorithm::HmacSha256 => sdk::Algorithm::HmacSha256,
        wit::Algorithm::HmacSha512 => sdk::Algorithm::HmacSha512,
        wit::Algorithm::Ed25519 => sdk::Algorithm::Ed25519,
        $($algorithm)*
    }
}

fn key_format(format: wit::KeyFormat) -> sdk::KeyFormat {
    match format {
        wit::KeyFormat::Raw => sdk::KeyFormat::Raw,
        wit::KeyFormat::Base64AfterPrefix(p) => sdk::KeyFormat::Base64AfterPrefix(p),
        wit::KeyFormat::Hex => sdk::KeyFormat::Hex,
        wit::KeyFormat::Ed25519Hex => sdk::KeyFormat::Ed25519Hex,
        wit::KeyFormat::Ed25519Base64AfterPrefix(p) => sdk::KeyFormat::Ed25519Base64AfterPrefix(p),
        $($key_format)*
    }
}

pub fn plan(plan: wit::Plan) -> sdk::Plan {
    sdk::Plan {
        message: plan
            .message
            .into_iter()
            .map(|part| match part {
                wit::Part::Text(t) => sdk::Part::Text(t),
                wit::Part::Bytes(b) => sdk::Part::Bytes(b),
                wit::Part::Body => sdk::Part::Body,
                wit::Part::Header(h) => sdk::Part::Header(h),
                wit::Part::Url => sdk::Part::Url,
                wit::Part::Method => sdk::Part::Method,
            })
            .collect(),
        candidates: plan
            .candidates
            .into_iter()
            .map(|c| sdk::Candidate {
                algorithm: algorithm(c.algorithm),
                signature: c.signature,
            })
            .collect(),
        timestamp: plan.timestamp,
        message_id: plan.message_id,
    }
}

pub fn event(event: wit::Event) -> sdk::Event {
    sdk::Event {
        id: event.id,
        event_type: event.event_type,
        occurred_at: event.occurred_at,
        resource_kind: event.resource_kind,
        resource_id: event.resource_id,
        resource_version: event.resource_version,
        deleted: event.deleted,
        disposition: match event.disposition {
            wit::Disposition::Process => sdk::Disposition::Process,
            wit::Disposition::Ignore(r) => sdk::Disposition::Ignore(r),
            wit::Disposition::Reject(r) => sdk::Disposition::Reject(r),
            $($disposition)*
        },
    }
}

pub fn rejection(rejection: wit::Rejection) -> sdk::Rejection {
    match rejection {
        wit::Rejection::MissingSignature(s) => sdk::Rejection::MissingSignature(s),
        wit::Rejection::MalformedSignature(s) => sdk::Rejection::MalformedSignature(s),
        wit::Rejection::MalformedBody(s) => sdk::Rejection::MalformedBody(s),
        wit::Rejection::Unsupported(s) => sdk::Rejection::Unsupported(s),
    }
}

/// Bytes a plugin handed back, so a runaway plugin cannot flood the host.
pub fn plan_size(plan: &wit::Plan) -> usize {
    let parts: usize = plan
        .message
        .iter()
        .map(|p| match p {
            wit::Part::Text(t) | wit::Part::Header(t) => t.len(),
            wit::Part::Bytes(b) => b.len(),
            wit::Part::Body | wit::Part::Url | wit::Part::Method => 0,
        })
        .map(|bytes| super::ELEMENT_BYTES + bytes)
        .sum();
    let candidates: usize = plan
        .candidates
        .iter()
        .map(|c| super::ELEMENT_BYTES + c.signature.len())
        .sum();
    parts + candidates + plan.message_id.as_ref().map_or(0, String::len)
}

pub fn event_size(event: &wit::Event) -> usize {
    let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let reason = match &event.disposition {
        wit::Disposition::Ignore(r) | wit::Disposition::Reject(r) => r.len(),
        // Process; `answer` (0.2) is sized with its response.
        other => disposition_size(other),
    };
    event.event_type.len()
        + opt(&event.id)
        + opt(&event.resource_kind)
        + opt(&event.resource_id)
        + reason
}

pub fn rejection_size(rejection: &wit::Rejection) -> usize {
    match rejection {
        wit::Rejection::MissingSignature(s)
        | wit::Rejection::MalformedSignature(s)
        | wit::Rejection::MalformedBody(s)
        | wit::Rejection::Unsupported(s) => s.len(),
    }
}
    };
}
use conversions;

/// The optional `reconcile` interface of contract 0.2.0 (world `reconciling-provider`):
/// looked up in a component beside `plugin`, and called only when it is there.
pub mod pull {
    use super::sdk;

    wasmtime::component::bindgen!({
        path: "../wit",
        world: "reconciling-provider",
    });

    use exports::hookhost::provider::reconcile as wit;
    pub use wit::{Guest, GuestIndices};

    pub fn info(info: wit::PullInfo) -> sdk::ReconcileInfo {
        sdk::ReconcileInfo {
            hosts: info.hosts,
            api_base: info.api_base,
            lists_events: info.lists_events,
            fetches_objects: info.fetches_objects,
        }
    }

    pub fn plan(plan: wit::RequestPlan) -> sdk::RequestPlan {
        sdk::RequestPlan {
            method: plan.method,
            target: plan.target,
            headers: plan.headers,
            body: plan.body,
        }
    }

    pub fn answer(answer: &sdk::Answer) -> wit::Answer {
        wit::Answer {
            status: answer.status,
            headers: answer
                .headers
                .iter()
                .map(|(name, value)| hookhost::provider::types::Header {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect(),
            body: answer.body.clone(),
        }
    }

    pub fn stored_event(event: &sdk::StoredEvent) -> wit::StoredEvent {
        wit::StoredEvent {
            id: event.id.clone(),
            event_type: event.event_type.clone(),
            resource_kind: event.resource_kind.clone(),
            resource_id: event.resource_id.clone(),
            body: event.body.clone(),
        }
    }

    pub fn fetched(fetched: wit::Fetched) -> sdk::Fetched {
        sdk::Fetched {
            resource_version: fetched.resource_version,
            body: fetched.body,
        }
    }

    pub fn page(page: wit::Page) -> sdk::Page {
        sdk::Page {
            events: page
                .events
                .into_iter()
                .map(|e| sdk::RemoteEvent {
                    event: sdk::Event {
                        id: Some(e.id),
                        event_type: e.event_type,
                        occurred_at: e.occurred_at,
                        resource_kind: e.resource_kind,
                        resource_id: e.resource_id,
                        resource_version: e.resource_version,
                        deleted: e.deleted,
                        disposition: sdk::Disposition::Process,
                    },
                    repair: match e.repair {
                        wit::Repair::Store(body) => sdk::Repair::Store(body),
                        wit::Repair::Redeliver(p) => sdk::Repair::Redeliver(plan(p)),
                    },
                })
                .collect(),
            next_cursor: page.next_cursor,
        }
    }
}
