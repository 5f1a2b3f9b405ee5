//! The built-in plugins: every crate in `plugins/`, compiled to components by
//! `host/build.rs` and embedded in the binary.

use super::runtime::{LoadError, Origin, Plugin, PluginLimits};

// Generated: `const BUILTIN: &[(&str, &[u8])]`, one entry per `plugins/<name>` crate.
include!(concat!(env!("OUT_DIR"), "/builtin.rs"));

/// Names of the built-in plugins, as their directories in `plugins/` spell them.
pub const BUILTIN_NAMES: &[&str] = &{
    let mut names = [""; BUILTIN.len()];
    let mut i = 0;
    while i < BUILTIN.len() {
        names[i] = BUILTIN[i].0;
        i += 1;
    }
    names
};

/// Compile every built-in, in parallel (compilation dominates start-up).
pub fn load_all(limits: PluginLimits) -> Result<Vec<Plugin>, LoadError> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = BUILTIN
            .iter()
            .map(|(name, bytes)| {
                (
                    name,
                    scope.spawn(move || Plugin::load(bytes, Origin::Builtin, limits)),
                )
            })
            .collect();
        handles
            .into_iter()
            .map(|(name, handle)| {
                handle.join().unwrap_or_else(|_| {
                    Err(LoadError::Refused {
                        path: format!("built-in {name}"),
                        reason: "compilation panicked".into(),
                    })
                })
            })
            .collect()
    })
}
