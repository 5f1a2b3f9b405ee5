//! The plugin runtime: loads provider components and calls them in a sandbox.
//!
//! Owns the one wasmtime [`Engine`](wasmtime::Engine), compiling each plugin once and
//! pre-instantiating it, and a fresh `Store` per request so nothing survives from one
//! request (or tenant) to the next. The WASI context is empty: no files, no
//! environment, no sockets, a clock stuck at zero. Each call is bounded in memory,
//! CPU time (epoch deadline) and output size. A trap is a [`PluginFailure`], never a
//! rejection. Never sees a secret and never touches the store. Request-time calls run
//! on the plugin threads ([`threads`]), never on an async worker.

mod bindings;
mod builtin;
pub mod compiler;
mod resident;
mod runtime;
mod stderr;
pub mod threads;

pub use bindings::PLUGIN_INTERFACES;
pub use builtin::{BUILTIN_NAMES, component as builtin_component};
pub use resident::{Fetch, Residency};
pub use runtime::{
    Catalog, Described, LoadError, MAX_PLUGIN_MEMORY, Origin, Plugin, PluginFailure, PluginLimits,
    Session, cache_bytes, code_cache_dir,
};
