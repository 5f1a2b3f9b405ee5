//! The built-in plugins: every crate in `plugins/`, compiled to components by
//! `host/build.rs` and embedded in the binary.

use super::runtime::{LoadError, Origin, Plugin, PluginLimits};

/// One built-in plugin, as `host/build.rs` embeds it.
struct Builtin {
    /// The directory name in `plugins/`.
    name: &'static str,
    /// The component.
    bytes: &'static [u8],
    /// SHA-256 of `bytes`, computed by the build script: a start whose compiled code is
    /// cached never reads `bytes`, so they stay out of resident memory.
    sha256: [u8; 32],
}

// Generated: `const BUILTIN: &[Builtin]`, one entry per `plugins/<name>` crate.
include!(concat!(env!("OUT_DIR"), "/builtin.rs"));

/// Names of the built-in plugins, as their directories in `plugins/` spell them.
pub const BUILTIN_NAMES: &[&str] = &{
    let mut names = [""; BUILTIN.len()];
    let mut i = 0;
    while i < BUILTIN.len() {
        names[i] = BUILTIN[i].name;
        i += 1;
    }
    names
};

/// A built-in plugin's component, as embedded (the benchmark uploads copies of one).
pub fn component(name: &str) -> Option<&'static [u8]> {
    BUILTIN.iter().find(|b| b.name == name).map(|b| b.bytes)
}

/// The embedded component whose SHA-256 is `digest`, if it is a built-in's (found by
/// the build's digests, without reading any component's bytes).
pub(super) fn with_digest(digest: &[u8; 32]) -> Option<&'static [u8]> {
    BUILTIN
        .iter()
        .find(|b| b.sha256 == *digest)
        .map(|b| b.bytes)
}

/// Load every built-in, on one thread per core. Compiling (a first start) keeps every
/// core busy either way; more threads than cores would only hold more compilations'
/// memory at once and leave a glibc malloc arena per thread behind, resident for the
/// life of the process.
pub fn load_all(limits: PluginLimits) -> Result<Vec<Plugin>, LoadError> {
    let threads = std::thread::available_parallelism()
        .map_or(2, std::num::NonZero::get)
        .min(BUILTIN.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let load = |builtin: &Builtin| {
        std::panic::catch_unwind(|| {
            Plugin::load_with_digest(builtin.bytes, builtin.sha256, Origin::Builtin, limits)
        })
        .unwrap_or_else(|_| {
            Err(LoadError::Refused {
                path: format!("built-in {}", builtin.name),
                reason: "compilation panicked".into(),
            })
        })
    };
    let mut loaded: Vec<(usize, Result<Plugin, LoadError>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(builtin) = BUILTIN.get(i) else {
                            return done;
                        };
                        done.push((i, load(builtin)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().unwrap_or_default())
            .collect()
    });
    loaded.sort_by_key(|(i, _)| *i);
    // Each load's panic is caught above, so a worker cannot lose answers; should one
    // ever, refuse to start rather than start without a built-in.
    if let Some(missing) = BUILTIN
        .iter()
        .enumerate()
        .find(|(i, _)| loaded.get(*i).is_none_or(|(j, _)| j != i))
    {
        return Err(LoadError::Refused {
            path: format!("built-in {}", missing.1.name),
            reason: "its loading thread failed".into(),
        });
    }
    loaded.into_iter().map(|(_, plugin)| plugin).collect()
}

#[cfg(test)]
mod tests {
    use super::BUILTIN;
    use sha2::{Digest as _, Sha256};

    #[test]
    fn build_time_digests_are_the_sha256_of_the_embedded_bytes() {
        assert!(!BUILTIN.is_empty());
        for builtin in BUILTIN {
            let digest: [u8; 32] = Sha256::digest(builtin.bytes).into();
            assert_eq!(digest, builtin.sha256, "{}", builtin.name);
        }
    }
}
