//! The hookhost plugin SDK.
//!
//! A plugin describes one provider's signature scheme and event shape. It implements
//! [`Provider`] and calls [`export_provider!`] once; it never names wit-bindgen and never
//! sees a secret: it says *what* is signed ([`Plan`]) and the host computes and compares
//! the MAC with the endpoint's secrets.
//!
//! ```text
//! struct Example;
//! impl Provider for Example {
//!     fn info() -> PluginInfo { /* name, key format, tolerance */ }
//!     fn plan_verification(req: &Request) -> Result<Plan, Rejection> { /* headers → plan */ }
//!     fn describe_event(req: &Request) -> Result<Event, Rejection> { /* body → event */ }
//! }
//! hookhost_plugin_sdk::export_provider!(Example);
//! ```
//!
//! Helpers return [`Rejection`], so a missing header or a bad field is `?`, never a panic.
//! [`testing::RequestBuilder`] runs the same code natively under `cargo test`.
//!
//! The SDK needs only `core` and `alloc`. A plugin written `#![no_std]` (as every
//! built-in is) that calls [`no_std_runtime!`] becomes a component that imports
//! nothing from WASI: one core module, no WASI context to build, and about 2.5 µs less
//! for each request's fresh instance. A plugin that uses `std` works unchanged.

#![no_std]

extern crate alloc;
#[cfg(test)]
extern crate std;

mod adapter;
pub mod batch;
pub mod decode;
pub mod json;
pub mod prelude;
mod reconcile;
mod request;
#[doc(hidden)]
pub mod runtime;
pub mod testing;
mod types;

pub use adapter::Adapter;
pub use batch::{BatchId, Shared};
pub use json::{Elements, Json, RawJson};
pub use reconcile::*;
pub use request::Request;
pub use types::*;

/// Re-exported so plugins and their tests need no direct dependency.
pub use serde_json;

/// The generated component-model bindings. Plugin authors never use these directly.
#[doc(hidden)]
#[allow(unsafe_code, clippy::all, missing_docs, unexpected_cfgs)] // generated code
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "sdk-provider",
        // `std::error::Error` impls only with a `std` feature, which this crate has not.
        std_feature,
        pub_export_macro: true,
        export_macro_name: "__export_provider_world",
        default_bindings_module: "hookhost_plugin_sdk::bindings",
    });
}

use crate::prelude::*;

/// What a provider plugin implements: pure functions of one request.
pub trait Provider {
    /// Static facts: name, version, key format, default timestamp tolerance.
    fn info() -> PluginInfo;
    /// Read the signature header(s) and say what is signed and which signatures to check.
    fn plan_verification(req: &Request) -> Result<Plan, Rejection>;
    /// Map the (already authenticated) body to the event it describes.
    fn describe_event(req: &Request) -> Result<Event, Rejection>;
    /// The algorithms this plugin's plans use, shown to operators by `plugin list`.
    fn algorithms() -> Vec<Algorithm> {
        Vec::new()
    }
    /// Check one endpoint's plugin configuration when the host loads it; name the
    /// offending key. The default is for a plugin that reads no configuration: only an
    /// empty one passes, so a key set by mistake stops the start instead of being
    /// ignored. A plugin that reads configuration checks it here, all of it.
    fn check_config(config: &serde_json::Value) -> Result<EndpointFacts, ConfigError> {
        ConfigError::only_keys(config, &[])?;
        Ok(EndpointFacts::default())
    }
    /// A GET reached the endpoint (the request's body is empty): the handshake to
    /// answer, or `None` for 405. The default answers no GET.
    fn handshake(req: &Request) -> Option<Handshake> {
        let _ = req;
        None
    }
    /// What this endpoint's configuration lets the plugin pull from the provider's
    /// API (see [`ReconcileInfo`]); the default pulls nothing.
    fn reconcile_info(config: &serde_json::Value) -> Option<ReconcileInfo> {
        let _ = config;
        None
    }
    /// The request for one page of events created at or after `since` (unix
    /// seconds), continuing after `cursor`.
    fn reconcile_request(
        config: &serde_json::Value,
        since: i64,
        cursor: Option<&str>,
    ) -> Result<RequestPlan, String> {
        let _ = (config, since, cursor);
        Err("this plugin does not list events".into())
    }
    /// Read one page of the provider's list of events created at or after `since`
    /// (unix seconds; for APIs that cannot filter by time, to end the listing).
    fn reconcile_page(
        config: &serde_json::Value,
        since: i64,
        answer: &Answer,
    ) -> Result<Page, String> {
        let _ = (config, since, answer);
        Err("this plugin does not list events".into())
    }
    /// The request for a thin event's current object; `None` when the event is
    /// complete as sent.
    fn fetch_request(config: &serde_json::Value, event: &StoredEvent) -> Option<RequestPlan> {
        let _ = (config, event);
        None
    }
    /// Read a fetched object.
    fn fetch_result(config: &serde_json::Value, answer: &Answer) -> Result<Fetched, String> {
        let _ = (config, answer);
        Err("this plugin does not fetch objects".into())
    }
}

/// Export a [`Provider`] implementation as the plugin's component exports.
///
/// Call it once, at the crate root: `hookhost_plugin_sdk::export_provider!(Stripe);`
/// Outside wasm (native `cargo test`) it expands to nothing.
#[macro_export]
macro_rules! export_provider {
    ($provider:ty) => {
        #[cfg(target_arch = "wasm32")]
        #[allow(unsafe_code)] // the canonical-ABI glue is generated
        const _: () = {
            type HookhostProviderAdapter = $crate::Adapter<$provider>;
            $crate::bindings::__export_provider_world!(HookhostProviderAdapter with_types_in $crate::bindings);
        };
    };
}

/// The README's code blocks compile as doctests: what it tells a plugin author to
/// write is checked by `cargo test`.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
