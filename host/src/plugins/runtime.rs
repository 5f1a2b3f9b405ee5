//! Engine, loading, and per-request sessions.

use super::bindings::{self, v0_1, v0_2};
use super::resident::{Fetch, LazyCode, Residency};
use super::stderr::CappedOutput;
use crate::verify::MessageSource;
use hookhost_plugin_sdk::{
    Algorithm, Answer, ConfigError, EndpointFacts, Event, Fetched, Handshake, KeyFormat, Page,
    Plan, PluginInfo, ReconcileInfo, Rejection, RequestPlan, StoredEvent,
};
use sha2::{Digest as _, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use wasmtime::component::{
    Component, Instance as ComponentInstance, Linker, ResourceTable, ResourceTableError,
};
use wasmtime::{Engine, Store, StoreLimits, StoreLimitsBuilder, Trap};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// How often the engine's epoch advances; a call's deadline is counted in ticks.
/// 5 ms keeps the ticker thread idle while bounding a runaway call to deadline + 5 ms.
const EPOCH_TICK: Duration = Duration::from_millis(5);
/// CPU time of a call made once at load (`info`, `check-config`), at least.
const LOAD_TIME: Duration = Duration::from_secs(2);
/// How much of a plugin's stderr per request reaches the log; the rest is dropped.
const STDERR_LOGGED: usize = 2 * 1024;
/// Most linear memories one plugin instance may have: `plugin_memory_bytes` bounds
/// each, so this many times it bounds a call.
const MAX_MEMORIES: usize = 2;
/// Largest memory a configuration may grant one plugin call.
pub const MAX_PLUGIN_MEMORY: usize = 256 * 1024 * 1024;
/// Instances the pooling allocator keeps ready. A request holds one while its plugin
/// runs, and each server runs at most as many plugin calls at once as it has plugin
/// threads (one per core, at most half of this), so this covers several servers in
/// one process (the tests) with room to spare. Reusing slots instead of mapping and
/// unmapping memory per request is what keeps a fresh instance per request cheap.
pub(super) const POOL_INSTANCES: u32 = 128;

/// Per-call bounds on a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginLimits {
    /// Linear memory, bytes (default 16 MiB).
    pub memory_bytes: usize,
    /// Wall-clock time of one call, counted in 5 ms epoch ticks (default 50 ms).
    pub time: Duration,
    /// Bytes of strings and lists one call may return (default 64 KiB).
    pub output_bytes: usize,
}

impl Default for PluginLimits {
    fn default() -> Self {
        Self {
            memory_bytes: 16 * 1024 * 1024,
            time: Duration::from_millis(50),
            output_bytes: 64 * 1024,
        }
    }
}

/// A plugin call that did not produce an answer. Never the sender's fault: HTTP 500.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum PluginFailure {
    #[error("plugin exceeded its time limit")]
    Timeout,
    #[error("plugin exceeded its memory limit")]
    Memory,
    #[error("plugin held more than {MAX_HANDLES} resources at once")]
    Handles,
    #[error("plugin returned more than {0} bytes")]
    OutputTooLarge(usize),
    #[error("plugin trapped: {0}")]
    Trap(String),
    #[error("plugin could not be instantiated: {0}")]
    Instantiate(String),
    /// Every instance slot of the pool is taken: the server is overloaded, and the
    /// plugin did nothing wrong.
    #[error("every plugin instance slot is in use")]
    Busy,
}

/// Why a `.wasm` file was refused.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {reason}")]
    Refused { path: String, reason: String },
    #[error("{path}: cannot read: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Builtin,
    File(PathBuf),
    /// Uploaded through the tenant API by this tenant.
    Upload(String),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Builtin => f.write_str("built-in"),
            Origin::File(path) => write!(f, "{}", path.display()),
            Origin::Upload(tenant) => write!(f, "uploaded by tenant {tenant}"),
        }
    }
}

/// A loaded plugin: compiled once, pre-instantiated, ready for per-request stores.
pub struct Plugin {
    pub info: PluginInfo,
    /// The algorithms the plugin says its plans use (none from a 0.1 plugin).
    pub algorithms: Vec<Algorithm>,
    /// SHA-256 of the component bytes, hex.
    pub digest: String,
    pub origin: Origin,
    /// Size of the component, bytes.
    pub size: usize,
    /// The contract version the component speaks.
    contract: &'static str,
    code: Code,
    limits: PluginLimits,
    /// Where each request's calls are counted, once a server's metrics take it.
    calls: OnceLock<crate::metrics::PluginCalls>,
    /// Its `plugin` metric label: see [`Plugin::label`].
    label: String,
}

/// Where a plugin's compiled code is.
enum Code {
    /// Built-ins and drop-ins: compiled at load, kept for the process's life.
    Resident(Arc<Pre>),
    /// Uploaded plugins: loaded on first use, dropped when the process's budget for
    /// them needs the room (see [`Residency`]).
    Lazy(Arc<LazyCode>),
}

/// What a plugin says about itself, kept beside an uploaded component so that a
/// process serves endpoints naming it without loading it first.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Described {
    pub contract: String,
    pub info: PluginInfo,
    pub algorithms: Vec<Algorithm>,
}

/// A pre-instantiated component of one contract version, and where its per-request
/// exports are.
pub(super) enum Pre {
    V0_1(v0_1::ProviderPre<State>, v0_1::Exports),
    V0_2(v0_2::ProviderPre<State>, v0_2::Exports),
}

/// One instance, and where its per-request exports are.
enum Instance {
    V0_1(ComponentInstance, v0_1::Exports),
    V0_2(ComponentInstance, v0_2::Exports),
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.info.name)
            .field("version", &self.info.version)
            .field("digest", &self.digest)
            .field("origin", &self.origin)
            .finish()
    }
}

pub(super) struct State {
    /// The WASI sandbox, built on the plugin's first WASI call. A request's calls
    /// usually make none (a plugin reads its arguments and returns), so most stores
    /// never pay for building one.
    wasi: Option<WasiCtx>,
    table: ResourceTable,
    limits: StoreLimits,
    /// Where the sandbox's stderr goes; made with it.
    stderr: Option<CappedOutput>,
}

impl State {
    /// What the plugin wrote to stderr so far, capped.
    fn stderr(&self) -> Vec<u8> {
        self.stderr
            .as_ref()
            .map(CappedOutput::contents)
            .unwrap_or_default()
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let stderr = &mut self.stderr;
        WasiCtxView {
            ctx: self.wasi.get_or_insert_with(|| {
                sandbox(stderr.get_or_insert_with(|| CappedOutput::new(STDERR_LOGGED)))
            }),
            table: &mut self.table,
        }
    }
}

/// An empty sandbox: no files, environment, arguments or network; clocks that read
/// zero; stderr into the request's capped buffer.
fn sandbox(stderr: &CappedOutput) -> WasiCtx {
    WasiCtxBuilder::new()
        .stderr(stderr.clone())
        .wall_clock(ZeroClock)
        .monotonic_clock(ZeroClock)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        // Random bytes are the one thing the sandbox gives (a hash map's seed); a call
        // asking for more than this is refused, not buffered on the host.
        .max_random_size(64 * 1024)
        .build()
}

/// A clock that always reads zero: plugins are pure functions of the request.
struct ZeroClock;
impl wasmtime_wasi::HostWallClock for ZeroClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}
impl wasmtime_wasi::HostMonotonicClock for ZeroClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// Compiled plugins kept on disk beyond this many bytes (`HOOKHOST_CACHE_BYTES`, else
/// this) are evicted, least recently used first, when a new one is written: one
/// hookhost version's 36 built-ins take about 20 MiB, a drop-in or an upload 0.2–1 MiB,
/// so the default holds the built-ins of the versions an upgrade moves between and
/// several hundred uploads.
const DEFAULT_CACHE_BYTES: u64 = 512 << 20;
/// The smallest `HOOKHOST_CACHE_BYTES`: below it a large plugin's code may not fit
/// even alone, and would be compiled again at every start.
const MIN_CACHE_BYTES: u64 = 1 << 20;

/// The compiled-plugin cache's bound, from `HOOKHOST_CACHE_BYTES` (a whole number of
/// bytes, at least 1 MiB) or the default. The command line checks it before anything
/// else runs, so a mistyped value stops hookhost with this message instead of
/// quietly keeping the default.
pub fn cache_bytes() -> Result<u64, String> {
    parse_cache_bytes(std::env::var_os("HOOKHOST_CACHE_BYTES").as_deref())
}

fn parse_cache_bytes(value: Option<&std::ffi::OsStr>) -> Result<u64, String> {
    let Some(value) = value else {
        return Ok(DEFAULT_CACHE_BYTES);
    };
    match value.to_str().map(|v| v.trim().parse::<u64>()) {
        Some(Ok(bytes)) if bytes >= MIN_CACHE_BYTES => Ok(bytes),
        _ => Err(format!(
            "HOOKHOST_CACHE_BYTES={value:?}: must be a whole number of bytes, at least \
             {MIN_CACHE_BYTES} (1 MiB), such as 536870912 for the default 512 MiB; \
             HOOKHOST_CACHE_DIR=off turns the cache off"
        )),
    }
}
/// A temporary file this old is left over from a crash, not a write in progress.
const CACHE_STALE_TEMP: Duration = Duration::from_secs(3600);

/// Where compiled plugins are kept between runs, so a start loads machine code instead
/// of compiling every component again: `HOOKHOST_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/hookhost`, else `~/.cache/hookhost`; `HOOKHOST_CACHE_DIR=off`
/// compiles every time. Without a usable directory hookhost compiles, and says so.
///
/// Entries are plain `Engine::precompile_component` output, named by the component's
/// SHA-256 and the engine's compatibility hash (wasmtime version and settings), so a
/// changed plugin or a new hookhost never loads stale code. They are uncompressed on
/// purpose: a start maps them (`Component::deserialize_file`) instead of copying them
/// into anonymous memory, so their machine code is clean, shareable, file-backed pages
/// of which only those touched become resident (wasmtime's own cache is compressed, so
/// every byte of every plugin was decompressed into the heap and copied at each start).
struct CodeCache {
    dir: PathBuf,
    /// Evict beyond this many bytes of compiled plugins.
    keep: u64,
}

/// Whether only the user hookhost runs as can write to `dir`: a directory, not a
/// symlink, owned by that user, without group or other write permission. The cache
/// holds machine code hookhost maps and runs, and its entries' names are predictable
/// (a built-in's digest and the engine's key), so a directory another user can write
/// to would let them plant code. `DirBuilder::mode` sets the mode only of a directory
/// it creates; one that already existed (`HOOKHOST_CACHE_DIR` set to a shared place)
/// is checked here. The user is read off a file created in it, so a directory
/// hookhost cannot write to is refused too.
#[cfg(unix)]
fn private_to_this_user(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let refused = |why: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why);
    let metadata = std::fs::symlink_metadata(dir)?;
    if !metadata.is_dir() {
        return Err(refused(
            "not a directory (a symlink is not followed)".into(),
        ));
    }
    if metadata.mode() & 0o022 != 0 {
        return Err(refused(format!(
            "group or others may write to it (mode {:o}); chmod go-w",
            metadata.mode() & 0o777
        )));
    }
    let probe = dir.join(format!(".owner-{}.tmp", std::process::id()));
    let created = std::fs::File::create(&probe).and_then(|file| file.metadata());
    let _ = std::fs::remove_file(&probe);
    let user = created?.uid();
    if metadata.uid() != user {
        return Err(refused(format!(
            "owned by user {}, not by user {user}, whom hookhost runs as",
            metadata.uid()
        )));
    }
    Ok(())
}

/// The directory compiled plugins are cached in (`*.cwasm`, named by the component's
/// SHA-256 first), when there is one.
pub fn code_cache_dir() -> Option<&'static Path> {
    code_cache().map(|cache| cache.dir.as_path())
}

fn code_cache() -> Option<&'static CodeCache> {
    static CACHE: OnceLock<Option<CodeCache>> = OnceLock::new();
    CACHE.get_or_init(CodeCache::open).as_ref()
}

impl CodeCache {
    fn open() -> Option<CodeCache> {
        let dir = match std::env::var_os("HOOKHOST_CACHE_DIR") {
            Some(dir) if dir == "off" => return None,
            Some(dir) => PathBuf::from(dir),
            None => std::env::var_os("XDG_CACHE_HOME")
                .map(|d| PathBuf::from(d).join("hookhost"))
                .or_else(|| {
                    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/hookhost"))
                })?,
        };
        let dir = dir.join("components");
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        // The directory holds code hookhost will run: only its user may write there.
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        if let Err(error) = builder.create(&dir) {
            tracing::warn!(%error, dir = %dir.display(), "no compiled-plugin cache; compiling at every start");
            return None;
        }
        #[cfg(unix)]
        if let Err(error) = private_to_this_user(&dir) {
            tracing::warn!(%error, dir = %dir.display(), "compiled-plugin cache refused; compiling at every start");
            return None;
        }
        // Unchecked only where hookhost runs as a library, not as the command.
        let keep = cache_bytes().unwrap_or_else(|error| {
            tracing::warn!(%error, "keeping the default compiled-plugin cache bound");
            DEFAULT_CACHE_BYTES
        });
        Some(CodeCache { dir, keep })
    }

    /// The compiled component for `bytes` (whose SHA-256 is `digest`): mapped from the
    /// cache, or compiled, written to the cache and mapped from there.
    fn component<B: AsRef<[u8]>>(
        &self,
        digest: &[u8; 32],
        bytes: impl FnOnce() -> wasmtime::Result<B>,
    ) -> wasmtime::Result<Component> {
        if let Some(component) = self.mapped(digest) {
            return Ok(component);
        }
        let path = self.path(digest);
        let compiled = precompile(digest, bytes)?;
        if self.stored(&path, &compiled) {
            // Mapped first: evicting cannot then take the entry from under it.
            let component = map_compiled(&path);
            self.evict_to(self.keep);
            component
        } else {
            load_compiled(&compiled)
        }
    }

    /// [`CodeCache::store`], a failure logged (it costs a compile later): whether the
    /// entry was written.
    fn stored(&self, path: &Path, compiled: &[u8]) -> bool {
        self.store(path, compiled)
            .inspect_err(|error| {
                tracing::warn!(%error, path = %path.display(), "cannot write the compiled-plugin cache");
            })
            .is_ok()
    }

    fn path(&self, digest: &[u8; 32]) -> PathBuf {
        self.dir
            .join(format!("{}-{}.cwasm", hex::encode(digest), engine_key()))
    }

    /// The cached compiled component of `digest`, if there is a usable one (an
    /// unusable one is replaced, by rename so other processes' mappings stay intact,
    /// when the component is compiled again).
    fn mapped(&self, digest: &[u8; 32]) -> Option<Component> {
        let path = self.path(digest);
        if !path.is_file() {
            return None;
        }
        let component = map_compiled(&path)
            .inspect_err(|error| {
                tracing::warn!(error = %format!("{error:#}"), path = %path.display(), "compiled plugin unusable; compiling again");
            })
            .ok()?;
        // Its modification time is when it was last used, so that eviction keeps what
        // starts and requests use (the built-ins first of all) over what they no longer
        // do, such as the code of a hookhost that is no longer run.
        let _ = std::fs::File::open(&path)
            .and_then(|file| file.set_modified(std::time::SystemTime::now()));
        Some(component)
    }

    /// Write an entry whole or not at all: a temporary file, synced, then renamed, so a
    /// reader never maps a partial file and a mapped file is never changed in place.
    /// The temporary file is created new, never opened if it exists: two processes of
    /// one process id (two containers sharing the cache) cannot write into one file.
    fn store(&self, path: &Path, compiled: &[u8]) -> std::io::Result<()> {
        use std::io::Write as _;
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let temp = path.with_extension(format!("{}-{n}.tmp", std::process::id()));
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp);
        let written = created.and_then(|mut file| {
            file.write_all(compiled)?;
            file.sync_all()
        });
        let renamed = written.and_then(|()| std::fs::rename(&temp, path));
        if let Err(error) = &renamed
            && error.kind() != std::io::ErrorKind::AlreadyExists
        {
            let _ = std::fs::remove_file(&temp);
        }
        renamed
    }

    /// Keep the most recently used entries that fit in `keep` bytes, and drop the
    /// temporary files a crashed writer left. Removing a file another process has
    /// mapped is harmless: the mapping keeps it alive.
    fn evict_to(&self, keep: u64) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let now = std::time::SystemTime::now();
        let mut compiled = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(metadata) = entry.metadata() else {
                continue;
            };
            let Ok(modified) = metadata.modified() else {
                continue;
            };
            match path.extension().and_then(|e| e.to_str()) {
                Some("cwasm") => compiled.push((modified, metadata.len(), path)),
                Some("tmp")
                    if now.duration_since(modified).unwrap_or_default() > CACHE_STALE_TEMP =>
                {
                    let _ = std::fs::remove_file(&path);
                }
                _ => {}
            }
        }
        // Newest first; once one does not fit, it and every older entry go.
        compiled.sort_by_key(|(modified, _, _)| std::cmp::Reverse(*modified));
        let mut kept = 0u64;
        for (_, len, path) in &compiled {
            kept = kept.saturating_add(*len);
            if kept > keep {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// Map a compiled component from the cache.
#[allow(unsafe_code)] // wasmtime cannot check machine code; see the SAFETY note
fn map_compiled(path: &Path) -> wasmtime::Result<Component> {
    // SAFETY: `deserialize_file` runs the file's machine code, so the file must be
    // what `Engine::precompile_component` wrote and must not change while mapped.
    // Only hookhost writes this directory (created 0700; the README tells operators to
    // keep it so, as for wasmtime's own cache), it writes whole files by rename and
    // never in place, and wasmtime refuses a file from another version, another
    // engine configuration or another host before using it.
    unsafe { Component::deserialize_file(engine(), path) }
}

/// Load a component just compiled (when the cache cannot take it).
#[allow(unsafe_code)] // wasmtime cannot check machine code; see the SAFETY note
fn load_compiled(compiled: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: the bytes are `Engine::precompile_component` output produced a moment
    // ago, by this process or by its child running the same executable (on Linux the
    // running image, `/proc/self/exe`) for this engine's key, handed over through a
    // pipe only the two hold. wasmtime refuses output of another version or engine
    // configuration before using it.
    unsafe { Component::deserialize(engine(), compiled) }
}

/// The process's one engine, with epoch interruption and a ticker thread.
fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut pool = wasmtime::PoolingAllocationConfig::new();
        pool.total_component_instances(POOL_INSTANCES)
            .total_core_instances(POOL_INSTANCES * 8)
            .total_memories(POOL_INSTANCES * 2)
            .total_tables(POOL_INSTANCES * 8)
            .max_memory_size(MAX_PLUGIN_MEMORY)
            // Reset by memset instead of returning pages to the kernel and faulting them
            // in again: covers a built-in plugin's whole memory (stack, data, heap).
            .linear_memory_keep_resident(512 * 1024)
            .table_keep_resident(64 * 1024)
            // A freed slot is reused, whichever plugin ran in it, before a never-used one
            // is taken (a slot that held another plugin maps the new one's image first).
            // Each slot ever used keeps its memory resident (above), so the slots in use
            // at once bound the resident memory, instead of one slot per plugin that
            // ever ran (every plugin runs at load).
            .max_unused_warm_slots(0);
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        config.wasm_component_model(true);
        // Copy-on-write memory images (the default): with the slot's memory kept
        // resident (above), a reset copies the image back in place, and a fresh
        // instance starts from it without copying its data segments. That measured
        // 1.2 µs less per request than copying the segments in at instantiation.
        config.memory_init_cow(true);
        // `HOOKHOST_PERF_MAP=1` names plugin functions for `perf` (/tmp/perf-PID.map).
        if std::env::var_os("HOOKHOST_PERF_MAP").is_some() {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let mut on_demand = config.clone();
        // Reserve only what a plugin may use (explicit bounds checks instead of 4 GiB
        // guard regions), so the fallback fits a tight address-space limit.
        on_demand
            .memory_reservation(MAX_PLUGIN_MEMORY as u64)
            .memory_guard_size(64 * 1024);
        config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
        // The pool reserves its address space up front; where that is refused (a tight
        // `ulimit -v`), instances are allocated per request instead: slower, same limits.
        let engine = Engine::new(&config).or_else(|error| {
            tracing::warn!(%error, "instance pool unavailable; allocating plugin instances on demand");
            Engine::new(&on_demand)
        });
        #[allow(clippy::expect_used)] // a fixed, valid configuration: failure is a build bug
        let engine = engine.expect("wasmtime engine configuration is valid");
        let ticker = engine.weak();
        // Without the ticker no plugin call could ever time out: refuse to run at all.
        #[allow(clippy::expect_used)] // start-up only; the process cannot enforce limits
        std::thread::Builder::new()
            .name("hookhost-epoch".into())
            .spawn(move || {
                while let Some(engine) = ticker.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(EPOCH_TICK);
                }
            })
            .expect("start the plugin epoch ticker thread");
        engine
    })
}

fn linker() -> &'static Linker<State> {
    static LINKER: OnceLock<Linker<State>> = OnceLock::new();
    LINKER.get_or_init(|| {
        let mut linker = Linker::new(engine());
        // Link every WASI p2 interface; the context behind them is empty, so a plugin
        // that reaches for files, env or sockets gets nothing.
        #[allow(clippy::expect_used)] // fixed set of interfaces: failure is a build bug
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).expect("WASI links");
        #[allow(clippy::expect_used)] // as above
        refuse_waiting(&mut linker).expect("WASI clocks shadowed");
        linker
    })
}

/// The monotonic clock's `subscribe-duration` and `subscribe-instant` trap instead of
/// making a pollable that waits. The time limit interrupts wasm code, not a host call:
/// a plugin blocking on a sleep (`std::thread::sleep`) would hold its plugin thread
/// for as long as it asked, past every limit. A plugin is a pure function of the
/// request and has nothing to wait for; no other pollable it can make ever waits (its
/// stdin is empty, its stderr always takes what it is given).
fn refuse_waiting(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    use wasmtime::component::Resource;
    use wasmtime_wasi::p2::DynPollable;
    type Subscribed = wasmtime::Result<(Resource<DynPollable>,)>;
    const REFUSED: &str = "plugins may not wait: the monotonic clock's subscribe is refused";
    linker.allow_shadowing(true);
    let mut clock = linker.instance("wasi:clocks/monotonic-clock@0.2.12")?;
    clock.func_wrap("subscribe-duration", |_, (_,): (u64,)| -> Subscribed {
        Err(wasmtime::format_err!(REFUSED))
    })?;
    clock.func_wrap("subscribe-instant", |_, (_,): (u64,)| -> Subscribed {
        Err(wasmtime::format_err!(REFUSED))
    })?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Compiled components of built-ins and drop-ins, shared by every catalog in the
/// process (keyed by digest). Uploaded plugins are not kept here: their code comes and
/// goes with [`Residency`]. An upload being judged is compiled without writing the
/// disk cache, where a refused one would take the room (and evict the code) of those
/// in use: it is written there once accepted ([`Plugin::cache_code`]).
fn compile(bytes: &[u8], digest: &[u8; 32], origin: &Origin) -> wasmtime::Result<Component> {
    static CACHE: OnceLock<Mutex<HashMap<[u8; 32], Component>>> = OnceLock::new();
    if let Origin::Upload(_) = origin {
        if let Some(cached) = code_cache().and_then(|code| code.mapped(digest)) {
            return Ok(cached);
        }
        return load_compiled(&precompile(digest, || Ok(bytes))?);
    }
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().ok().and_then(|c| c.get(digest).cloned()) {
        return Ok(hit);
    }
    let component = compile_uncached(digest, || Ok(bytes))?;
    if let Ok(mut c) = cache.lock() {
        c.insert(*digest, component.clone());
    }
    Ok(component)
}

/// The compiled component of `digest`: mapped from the disk cache, or compiled from
/// `bytes` (asked for only then) and cached.
pub(super) fn compile_uncached<B: AsRef<[u8]>>(
    digest: &[u8; 32],
    bytes: impl FnOnce() -> wasmtime::Result<B>,
) -> wasmtime::Result<Component> {
    match code_cache() {
        Some(code) => code.component(digest, bytes),
        None => load_compiled(&precompile(digest, bytes)?),
    }
}

/// Compile a component: in a child process where the binary turned that on (see
/// [`super::compiler`]), else here. A built-in's child finds the bytes in its own
/// image, so this process does not read (and keep resident) the embedded copy.
fn precompile<B: AsRef<[u8]>>(
    digest: &[u8; 32],
    bytes: impl FnOnce() -> wasmtime::Result<B>,
) -> wasmtime::Result<Vec<u8>> {
    use super::compiler::{Compiled, Source, in_child};
    let fetched;
    let source = match super::builtin::with_digest(digest) {
        Some(embedded) => Source::Builtin { digest, embedded },
        None => {
            fetched = bytes()?;
            Source::Bytes(fetched.as_ref())
        }
    };
    match in_child(&source) {
        Compiled::Code(compiled) => Ok(compiled),
        Compiled::Refused(why) => Err(wasmtime::Error::msg(why)),
        Compiled::Unavailable => precompile_here(source.bytes()),
    }
}

/// The engine's `precompile_compatibility_hash`, hex: code compiled by an engine
/// with the same key loads in this one.
pub(super) fn engine_key() -> &'static str {
    static KEY: OnceLock<String> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&engine().precompile_compatibility_hash(), &mut hasher);
        format!("{:016x}", std::hash::Hasher::finish(&hasher))
    })
}

/// Compile a component in this process.
pub(super) fn precompile_here(bytes: &[u8]) -> wasmtime::Result<Vec<u8>> {
    engine().precompile_component(bytes)
}

/// Check a compiled component's contract and pre-instantiate it.
pub(super) fn prepare(component: &Component) -> Result<(&'static str, Pre), String> {
    let interface = check_contract(component)?;
    let pre = linker()
        .instantiate_pre(component)
        .map_err(|e| format!("imports what the sandbox does not provide: {e}"))?;
    let mismatch = |e: wasmtime::Error| format!("does not match {interface}: {e:#}");
    // Finding the per-request exports checks their types in one instance. It gets the
    // most memory any configuration may grant, so this check refuses no plugin that
    // its own limits would let start.
    let check = PluginLimits {
        memory_bytes: MAX_PLUGIN_MEMORY,
        ..PluginLimits::default()
    };
    let mut store = new_store(check, LOAD_TIME);
    let pre = if interface == v0_2::PLUGIN_INTERFACE {
        let exports = v0_2::Exports::find(&pre, &mut store).map_err(mismatch)?;
        Pre::V0_2(v0_2::ProviderPre::new(pre).map_err(mismatch)?, exports)
    } else {
        let exports = v0_1::Exports::find(&pre, &mut store).map_err(mismatch)?;
        Pre::V0_1(v0_1::ProviderPre::new(pre).map_err(mismatch)?, exports)
    };
    Ok((interface, pre))
}

/// `info()`'s algorithms, each once, in order: the list is kept, and stored with an
/// upload, and a plugin may repeat one as often as its output cap lets it (a million
/// times).
fn each_once(algorithms: Vec<Algorithm>) -> Vec<Algorithm> {
    let mut once = Vec::new();
    for algorithm in algorithms {
        if !once.contains(&algorithm) {
            once.push(algorithm);
        }
    }
    once
}

/// The contract version (`0.2.0`) of a pre-instantiated component.
fn contract_of(pre: &Pre) -> &'static str {
    match pre {
        Pre::V0_1(..) => "0.1.0",
        Pre::V0_2(..) => "0.2.0",
    }
}

/// See [`Plugin::label`].
fn label(origin: &Origin, name: &str) -> String {
    match origin {
        Origin::Upload(_) => format!("upload:{name}"),
        Origin::Builtin | Origin::File(_) => name.to_string(),
    }
}

impl Plugin {
    /// Validate, compile and pre-instantiate a component; `path` names it in errors.
    pub fn load(bytes: &[u8], origin: Origin, limits: PluginLimits) -> Result<Plugin, LoadError> {
        Plugin::load_with_digest(bytes, Sha256::digest(bytes).into(), origin, limits)
    }

    /// [`Plugin::load`] of a component whose SHA-256 is already known (a built-in's,
    /// from the build; an upload's, hashed to check its tenant's quota): with its
    /// compiled code cached, `bytes` are then never read.
    pub(crate) fn load_with_digest(
        bytes: &[u8],
        digest: [u8; 32],
        origin: Origin,
        limits: PluginLimits,
    ) -> Result<Plugin, LoadError> {
        let path = origin.to_string();
        let refuse = |reason: String| LoadError::Refused {
            path: path.clone(),
            reason,
        };
        // The bytes are looked at only when they fail to compile: a built-in whose
        // compiled code is cached is never read (see `builtin::Builtin::sha256`).
        let component = compile(bytes, &digest, &origin).map_err(|e| {
            if bytes.starts_with(b"\0asm\x01\0\0\0") {
                refuse("a core wasm module, not a component: build it for wasm32-wasip2".into())
            } else {
                refuse(format!("not a valid component: {e}"))
            }
        })?;
        let (_, pre) = prepare(&component).map_err(refuse)?;
        let mut plugin = Plugin {
            info: PluginInfo {
                name: String::new(),
                version: String::new(),
                provider: String::new(),
                key_formats: Vec::new(),
                default_tolerance_seconds: None,
                retry_behaviour: String::new(),
            },
            algorithms: Vec::new(),
            digest: hex::encode(digest),
            origin,
            size: bytes.len(),
            contract: contract_of(&pre),
            code: Code::Resident(Arc::new(pre)),
            limits,
            calls: OnceLock::new(),
            label: String::new(),
        };
        let (algorithms, info) = plugin.call_info().map_err(|e| match e {
            // Most often a memory whose initial size is past the limit: say which.
            PluginFailure::Memory => refuse(format!(
                "info() failed: the plugin needs more memory than limits.plugin_memory_bytes \
                 ({} bytes) allows",
                limits.memory_bytes
            )),
            e => refuse(format!("info() failed: {e}")),
        })?;
        if info.name.is_empty()
            || !info
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(refuse(format!(
                "info() name {:?} is not [a-z0-9-]+",
                info.name
            )));
        }
        if info.key_formats.is_empty() {
            return Err(refuse("info() declares no key format".into()));
        }
        check_key_formats(&info.key_formats).map_err(|e| refuse(format!("info() {e}")))?;
        // The name is a metric label and the version goes into every receipt: both are
        // short, and no text of info() is past a few hundred bytes in any plugin.
        for (what, text, most) in [
            ("name", &info.name, 64),
            ("version", &info.version, 128),
            ("provider", &info.provider, 1024),
            ("retry behaviour", &info.retry_behaviour, 4096),
        ] {
            if text.len() > most {
                return Err(refuse(format!(
                    "info() {what} is {} bytes; at most {most}",
                    text.len()
                )));
            }
        }
        if info.version.chars().any(char::is_control) {
            return Err(refuse(format!(
                "info() version {:?} holds a control character",
                info.version
            )));
        }
        plugin.label = label(&plugin.origin, &info.name);
        plugin.info = info;
        plugin.algorithms = each_once(algorithms);
        Ok(plugin)
    }

    /// An uploaded plugin known by what it said of itself when it was accepted: its
    /// code is loaded on first use (`fetch` gives the component's bytes when the disk
    /// cache has no compiled code for `digest`) and dropped when `residency` needs the
    /// room. `fetch` is called on a plugin thread, never on an async worker.
    pub fn lazy(
        described: Described,
        digest: &str,
        size: usize,
        origin: Origin,
        limits: PluginLimits,
        fetch: Fetch,
        residency: &Arc<Residency>,
    ) -> Result<Plugin, String> {
        let contract = match described.contract.as_str() {
            "0.1.0" => "0.1.0",
            "0.2.0" => "0.2.0",
            other => return Err(format!("contract {other:?} is not supported")),
        };
        let mut sha256 = [0u8; 32];
        hex::decode_to_slice(digest, &mut sha256).map_err(|e| format!("digest: {e}"))?;
        Ok(Plugin {
            label: label(&origin, &described.info.name),
            info: described.info,
            algorithms: described.algorithms,
            digest: digest.to_string(),
            origin,
            size,
            contract,
            code: Code::Lazy(LazyCode::new(sha256, contract, fetch, residency)),
            limits,
            calls: OnceLock::new(),
        })
    }

    /// What the plugin says about itself (kept beside an uploaded component).
    pub fn described(&self) -> Described {
        Described {
            contract: self.contract.to_string(),
            info: self.info.clone(),
            algorithms: self.algorithms.clone(),
        }
    }

    /// The compiled code, loading it first if it is not resident.
    fn pre(&self) -> Result<Arc<Pre>, PluginFailure> {
        match &self.code {
            Code::Resident(pre) => Ok(pre.clone()),
            Code::Lazy(code) => code.pre(),
        }
    }

    /// Load a `.wasm` file.
    pub fn load_file(path: &Path, limits: PluginLimits) -> Result<Plugin, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Plugin::load(&bytes, Origin::File(path.to_path_buf()), limits)
    }

    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// The `plugin` label of its metrics: its name, or `upload:<name>` for one a
    /// tenant uploaded, so that no upload's calls and failures are counted under a
    /// built-in's name (names are `[a-z0-9-]+`, so the two never meet).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The contract version the component speaks (`0.2.0`).
    pub fn contract(&self) -> &'static str {
        self.contract
    }

    /// Calls made once when loading (`info`, `check-config`) may take longer than a
    /// request's: at start-up every plugin loads at once and competes for the cores,
    /// and a slow start must not be mistaken for a runaway plugin.
    fn load_limits(&self) -> PluginLimits {
        PluginLimits {
            time: self.limits.time.max(LOAD_TIME),
            ..self.limits
        }
    }

    /// Check one endpoint's plugin configuration (JSON). A 0.1 plugin has no check
    /// and changes nothing.
    pub fn check_config(
        &self,
        config_json: &str,
    ) -> Result<Result<EndpointFacts, ConfigError>, PluginFailure> {
        if self.contract == "0.1.0" {
            return Ok(Ok(EndpointFacts::default()));
        }
        let (mut store, instance) = self.instantiate(self.load_limits())?;
        let Instance::V0_2(instance, _) = instance else {
            return Ok(Ok(EndpointFacts::default()));
        };
        let provider =
            v0_2::Provider::new(&mut store, &instance).map_err(|e| classify(e, "instantiate"))?;
        let answer = guarded(&mut store, self.load_limits(), |s| {
            provider
                .hookhost_provider_plugin()
                .call_check_config(s, config_json)
        })?;
        // What it says goes into the configuration's error and the log: one line each.
        let refused = |e: ConfigError| ConfigError {
            key: one_line(&e.key, 128),
            message: one_line(&e.message, 512),
        };
        let facts = answer
            .map(v0_2::endpoint_facts)
            .map_err(|e| refused(v0_2::config_error(e)));
        if let Ok(facts) = &facts {
            check_key_formats(&facts.key_formats).map_err(PluginFailure::Trap)?;
        }
        Ok(facts)
    }

    /// Write this plugin's compiled code to the disk cache, where its next load (in
    /// any process sharing the cache) maps it rather than compiling it again: for an
    /// upload once it is accepted (see [`compile`]). Nothing when it is there already,
    /// or there is no cache; a failed write is logged, and costs a compile later.
    pub fn cache_code(&self) {
        let (Some(code), Code::Resident(pre)) = (code_cache(), &self.code) else {
            return;
        };
        let Some(digest) = hex::decode(&self.digest)
            .ok()
            .and_then(|d| <[u8; 32]>::try_from(d).ok())
        else {
            return;
        };
        let path = code.path(&digest);
        if path.is_file() {
            return;
        }
        let component = match &**pre {
            Pre::V0_1(pre, _) => pre.instance_pre().component(),
            Pre::V0_2(pre, _) => pre.instance_pre().component(),
        };
        match component.serialize() {
            Ok(compiled) => {
                if code.stored(&path, &compiled) {
                    code.evict_to(code.keep);
                }
            }
            Err(error) => {
                tracing::warn!(error = %format!("{error:#}"), path = %path.display(), "cannot write the compiled-plugin cache");
            }
        }
    }

    /// What the component imports (all satisfied by the empty sandbox).
    pub fn imports(&self) -> Result<Vec<String>, PluginFailure> {
        let pre = self.pre()?;
        let component = match &*pre {
            Pre::V0_1(pre, _) => pre.instance_pre().component(),
            Pre::V0_2(pre, _) => pre.instance_pre().component(),
        };
        let ty = component.component_type();
        Ok(ty
            .imports(engine())
            .map(|(name, _)| name.to_string())
            .collect())
    }

    fn call_info(&self) -> Result<(Vec<Algorithm>, PluginInfo), PluginFailure> {
        let (mut store, instance) = self.instantiate(self.load_limits())?;
        let limits = self.load_limits();
        let bound = |e| classify(e, "instantiate");
        match instance {
            Instance::V0_1(i, _) => {
                let p = v0_1::Provider::new(&mut store, &i).map_err(bound)?;
                guarded(&mut store, limits, |s| {
                    p.hookhost_provider_plugin().call_info(s)
                })
                .map(|info| (v0_1::algorithms(&info), v0_1::info(info)))
            }
            Instance::V0_2(i, _) => {
                let p = v0_2::Provider::new(&mut store, &i).map_err(bound)?;
                guarded(&mut store, limits, |s| {
                    p.hookhost_provider_plugin().call_info(s)
                })
                .map(|info| (v0_2::algorithms(&info), v0_2::info(info)))
            }
        }
    }

    /// A fresh store: an empty sandbox, bounded memory, the call's deadline.
    fn new_store(&self, call_limits: PluginLimits) -> Store<State> {
        new_store(self.limits, call_limits.time)
    }

    fn instantiate(
        &self,
        call_limits: PluginLimits,
    ) -> Result<(Store<State>, Instance), PluginFailure> {
        // The code first (loading it may take a while), then the store: its deadline
        // counts from now.
        let pre = self.pre()?;
        let mut store = self.new_store(call_limits);
        let instance = match &*pre {
            Pre::V0_1(pre, exports) => pre
                .instance_pre()
                .instantiate(&mut store)
                .map(|p| Instance::V0_1(p, *exports)),
            Pre::V0_2(pre, exports) => pre
                .instance_pre()
                .instantiate(&mut store)
                .map(|p| Instance::V0_2(p, *exports)),
        }
        .map_err(|e| classify(e, "instantiate"))?;
        Ok((store, instance))
    }

    /// One call of the optional `reconcile` interface, in a fresh instance (as every
    /// call): `None` when the component does not export it. Reconciliation runs in the
    /// background, so its calls get the load-time limit, and the memory limit alone
    /// bounds a page's size.
    fn pull<T>(
        &self,
        call: impl FnOnce(&bindings::pull::Guest, &mut Store<State>) -> wasmtime::Result<T>,
    ) -> Result<Option<T>, PluginFailure> {
        let pre = self.pre()?;
        let Pre::V0_2(provider, _) = &*pre else {
            return Ok(None);
        };
        let instance_pre = provider.instance_pre();
        let Ok(indices) = bindings::pull::GuestIndices::new(instance_pre) else {
            return Ok(None);
        };
        let limits = self.load_limits();
        let mut store = self.new_store(limits);
        // A page of events is no request's answer: only the plugin's memory bounds it.
        store.set_hostcall_fuel(self.limits.memory_bytes.saturating_mul(PULL_FUEL_PER_BYTE));
        let instance = instance_pre
            .instantiate(&mut store)
            .map_err(|e| classify(e, "instantiate"))?;
        let guest = indices
            .load(&mut store, &instance)
            .map_err(|e| classify(e, "instantiate"))?;
        guarded(&mut store, limits, |s| call(&guest, s)).map(Some)
    }

    /// What this endpoint's configuration lets the plugin pull from the provider's
    /// API; `None` when it pulls nothing (or the plugin cannot).
    pub fn reconcile_info(&self, config: &str) -> Result<Option<ReconcileInfo>, PluginFailure> {
        Ok(self
            .pull(|guest, store| guest.call_reconcile_info(store, config))?
            .flatten()
            .map(bindings::pull::info))
    }

    /// The request for one page of the provider's events.
    pub fn reconcile_request(
        &self,
        config: &str,
        since: i64,
        cursor: Option<&str>,
    ) -> Result<Result<RequestPlan, String>, PluginFailure> {
        self.pull(|guest, store| guest.call_reconcile_request(store, config, since, cursor))?
            .map(|answer| answer.map(bindings::pull::plan))
            .ok_or_else(not_pulling)
    }

    /// Read one page of the provider's events.
    pub fn reconcile_page(
        &self,
        config: &str,
        since: i64,
        answer: &Answer,
    ) -> Result<Result<Page, String>, PluginFailure> {
        let answer = bindings::pull::answer(answer);
        self.pull(|guest, store| guest.call_reconcile_page(store, config, since, &answer))?
            .map(|page| page.map(bindings::pull::page))
            .ok_or_else(not_pulling)
    }

    /// The request for a stored event's current object; `None` when the event is
    /// complete as sent (or the plugin does not fetch).
    pub fn fetch_request(
        &self,
        config: &str,
        event: &StoredEvent,
    ) -> Result<Option<RequestPlan>, PluginFailure> {
        let event = bindings::pull::stored_event(event);
        Ok(self
            .pull(|guest, store| guest.call_fetch_request(store, config, &event))?
            .flatten()
            .map(bindings::pull::plan))
    }

    /// Read a fetched object.
    pub fn fetch_result(
        &self,
        config: &str,
        answer: &Answer,
    ) -> Result<Result<Fetched, String>, PluginFailure> {
        let answer = bindings::pull::answer(answer);
        self.pull(|guest, store| guest.call_fetch_result(store, config, &answer))?
            .map(|fetched| fetched.map(bindings::pull::fetched))
            .ok_or_else(not_pulling)
    }

    /// Count this plugin's calls in `calls` from now on (the first server's metrics to
    /// ask keep it).
    pub fn count_calls_in(&self, calls: &crate::metrics::PluginCalls) {
        let _ = self.calls.set(calls.clone());
    }

    /// A fresh, isolated instance for one request.
    pub fn session<'a>(
        &'a self,
        config_json: &'a str,
        request: &MessageSource<'a>,
    ) -> Result<Session<'a>, PluginFailure> {
        let (store, instance) = self.instantiate(self.limits).inspect_err(|failure| {
            // Overload (answered 429 `overloaded`): a line for each request would grow
            // the log with any sender's rate.
            if *failure == PluginFailure::Busy {
                tracing::debug!(plugin = self.name(), %failure, "plugin instance could not start");
            } else {
                tracing::error!(plugin = self.name(), %failure, "plugin instance could not start");
            }
            if let Some(calls) = self.calls.get() {
                calls.failed(self.label(), failure);
            }
        })?;
        Ok(Session {
            plugin: self,
            store,
            instance,
            head: RequestHead {
                method: request.method,
                url: request.url,
                headers: (request.headers.iter())
                    .map(|(name, value)| bindings::Header { name, value })
                    .collect(),
                config: config_json,
            },
            body: request.body,
            planned: false,
        })
    }
}

/// What one call may have the host copy out of the guest, as wasmtime counts it (a
/// list's elements at the size of the host's copy), per byte of `output_bytes`.
/// An answer within the output cap needs far less: its elements are counted there
/// at [`super::bindings::ELEMENT_BYTES`] each, about their host size. Without a
/// budget of its own, wasmtime lets a call copy 128 MiB, which a guest pointing many
/// list elements at the same bytes makes of a few MiB, before the cap is checked.
const FUEL_PER_OUTPUT_BYTE: usize = 16;
/// The least budget, whatever `output_bytes` is.
const MIN_FUEL: usize = 1024 * 1024;
/// A reconciliation call's budget, per byte of the plugin's memory.
const PULL_FUEL_PER_BYTE: usize = 4;
/// Elements one table may grow to. The pooling allocator bounds tables at this too;
/// the on-demand allocator (when the pool's address space is refused) would not.
const TABLE_ELEMENTS: usize = 20_000;
/// Resources one call's instance may hold at once: host ones (a WASI stream, a
/// pollable) and handles to them or to its own. A plugin holds a few; each is host
/// memory that the memory limit does not count, so one made without end (and never
/// dropped) stops the call here, not at wasmtime's default of 100,000 handles.
const MAX_HANDLES: usize = 1_000;

/// A fresh store: an empty sandbox, `limits`' memory and output budget, a deadline
/// `time` away.
fn new_store(limits: PluginLimits, time: Duration) -> Store<State> {
    let fuel = limits
        .output_bytes
        .saturating_mul(FUEL_PER_OUTPUT_BYTE)
        .max(MIN_FUEL);
    let limits = StoreLimitsBuilder::new()
        .memory_size(limits.memory_bytes)
        .table_elements(TABLE_ELEMENTS)
        // The size limit holds for each memory: a component of many core modules, each
        // with its own memory, would otherwise get that many times the limit. Built-in
        // plugins have one memory, a handful of tables and of core instances.
        .memories(MAX_MEMORIES)
        .tables(8)
        .instances(32)
        .trap_on_grow_failure(true)
        .build();
    let mut table = ResourceTable::new();
    table.set_max_capacity(MAX_HANDLES);
    let mut store = Store::new(
        engine(),
        State {
            wasi: None,
            table,
            limits,
            stderr: None,
        },
    );
    store.limiter(|s| &mut s.limits);
    store.set_max_component_handles(MAX_HANDLES);
    store.set_epoch_deadline(deadline_ticks(time));
    store.set_hostcall_fuel(fuel);
    store
}

/// A request's head, borrowed from it, as a session's calls pass it.
struct RequestHead<'a> {
    method: &'a str,
    url: &'a str,
    headers: Vec<bindings::Header<'a>>,
    config: &'a str,
}

impl RequestHead<'_> {
    fn lowered(&self) -> bindings::Head<'_> {
        bindings::Head {
            method: self.method,
            url: self.url,
            headers: &self.headers,
            config: self.config,
        }
    }
}

fn deadline_ticks(time: Duration) -> u64 {
    let tick = EPOCH_TICK.as_millis().max(1);
    u64::try_from(time.as_millis().div_ceil(tick))
        .unwrap_or(u64::MAX)
        .max(1)
        + 1
}

fn not_pulling() -> PluginFailure {
    PluginFailure::Instantiate("the plugin does not export hookhost:provider/reconcile".into())
}

/// Run one export call under the time limit and classify any failure.
fn guarded<T>(
    store: &mut Store<State>,
    limits: PluginLimits,
    call: impl FnOnce(&mut Store<State>) -> wasmtime::Result<T>,
) -> Result<T, PluginFailure> {
    store.set_epoch_deadline(deadline_ticks(limits.time));
    call(store).map_err(|e| {
        // Past the budget set in `new_store`: the answer is refused while it is
        // being copied, as it would be once copied.
        let root = e.root_cause().to_string();
        if root.contains("fuel allocated for hostcalls has been exhausted") {
            PluginFailure::OutputTooLarge(limits.output_bytes)
        } else {
            classify(e, "call")
        }
    })
}

/// Most key formats a plugin declares, and the longest prefix one names.
const MAX_KEY_FORMATS: usize = 16;
const MAX_KEY_PREFIX: usize = 64;

/// A plugin's key formats are few, and their prefixes (`whsec_`) short and printable:
/// a secret that does not match is refused with them named.
fn check_key_formats(formats: &[KeyFormat]) -> Result<(), String> {
    if formats.len() > MAX_KEY_FORMATS {
        let n = formats.len();
        return Err(format!("{n} key formats; at most {MAX_KEY_FORMATS}"));
    }
    for format in formats {
        let prefix = match format {
            KeyFormat::Base64AfterPrefix(p) | KeyFormat::Ed25519Base64AfterPrefix(p) => p,
            _ => continue,
        };
        if prefix.len() > MAX_KEY_PREFIX || prefix.chars().any(char::is_control) {
            return Err(format!(
                "key format prefix {:?}: at most {MAX_KEY_PREFIX} bytes, no control character",
                one_line(prefix, MAX_KEY_PREFIX)
            ));
        }
    }
    Ok(())
}

/// The first `chars` characters of a plugin's text, with control characters escaped:
/// logged or quoted in an error, it stays one line and cannot start one of its own.
fn one_line(text: &str, chars: usize) -> String {
    let mut line = String::new();
    for c in text.chars().take(chars) {
        if c.is_control() {
            line.extend(c.escape_default());
        } else {
            line.push(c);
        }
    }
    line
}

fn classify(error: wasmtime::Error, during: &str) -> PluginFailure {
    if matches!(error.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
        return PluginFailure::Timeout;
    }
    // Judged by the root cause, the host's own words: the whole text carries the wasm
    // backtrace, in which the plugin names its functions.
    let cause = error.root_cause();
    if cause.to_string().contains("growing memory") {
        return PluginFailure::Memory;
    }
    if cause.is::<wasmtime::PoolConcurrencyLimitError>() {
        return PluginFailure::Busy;
    }
    if matches!(cause.downcast_ref(), Some(ResourceTableError::Full))
        || cause.to_string().contains("store handle limit exceeded")
    {
        return PluginFailure::Handles;
    }
    // Escaped, so that such a name cannot start a log line of its own making.
    let text = one_line(&format!("{error:#}"), 512);
    if during == "instantiate" {
        PluginFailure::Instantiate(text)
    } else {
        PluginFailure::Trap(text)
    }
}

/// One request's instance: `plan_verification`, then (after the host verified the
/// signature) `describe_event`. Dropped at the end of the request.
pub struct Session<'a> {
    plugin: &'a Plugin,
    store: Store<State>,
    instance: Instance,
    head: RequestHead<'a>,
    body: &'a [u8],
    /// `plan_verification` answered in this instance, which then holds the request.
    planned: bool,
}

impl Session<'_> {
    pub fn plan_verification(&mut self) -> Result<Result<Plan, Rejection>, PluginFailure> {
        let (limits, body) = (self.plugin.limits, self.body);
        macro_rules! call {
            ($v:ident, $exports:expr, $i:expr, $head:expr) => {{
                let started = Instant::now();
                let answer = guarded(&mut self.store, limits, |s| {
                    $exports.plan_verification(s, $i, $head, body)
                });
                let answer = self.checked("plan-verification", started, answer, |r| match r {
                    Ok(plan) => $v::plan_size(plan),
                    Err(rejection) => $v::rejection_size(rejection),
                })?;
                self.planned = true;
                Ok(answer.map($v::plan).map_err($v::rejection))
            }};
        }
        let head = self.head.lowered();
        match &self.instance {
            Instance::V0_1(i, exports) => call!(v0_1, exports, i, &head),
            Instance::V0_2(i, exports) => call!(v0_2, exports, i, &head),
        }
    }

    pub fn describe_event(&mut self) -> Result<Result<Event, Rejection>, PluginFailure> {
        let (limits, body, planned) = (self.plugin.limits, self.body, self.planned);
        macro_rules! call {
            ($v:ident, $exports:expr, $i:expr, $head:expr) => {{
                let started = Instant::now();
                let answer = guarded(&mut self.store, limits, |s| {
                    $exports.describe_event(s, $i, $head, body, planned)
                });
                let answer = self.checked("describe-event", started, answer, |r| match r {
                    Ok(event) => $v::event_size(event),
                    Err(rejection) => $v::rejection_size(rejection),
                })?;
                Ok(answer.map($v::event).map_err($v::rejection))
            }};
        }
        let head = self.head.lowered();
        match &self.instance {
            Instance::V0_1(i, exports) => call!(v0_1, exports, i, &head),
            Instance::V0_2(i, exports) => call!(v0_2, exports, i, &head),
        }
    }

    /// A GET reached the endpoint: the plugin's handshake, if it answers GETs
    /// (a 0.1 plugin never does).
    pub fn handshake(&mut self) -> Result<Option<Handshake>, PluginFailure> {
        let limits = self.plugin.limits;
        let Instance::V0_2(instance, _) = &self.instance else {
            return Ok(None);
        };
        let head = v0_2::owned_head(&self.head.lowered());
        let p = v0_2::Provider::new(&mut self.store, instance)
            .map_err(|e| classify(e, "instantiate"))?;
        let started = Instant::now();
        let answer = guarded(&mut self.store, limits, |s| {
            p.hookhost_provider_plugin().call_handshake(s, &head)
        });
        let answer = self.checked("handshake", started, answer, |r| {
            r.as_ref().map_or(0, v0_2::handshake_size)
        })?;
        Ok(answer.map(v0_2::handshake))
    }

    /// Log and count failures; enforce the output cap; time the call that `started`.
    fn checked<T>(
        &mut self,
        call: &'static str,
        started: Instant,
        answer: Result<T, PluginFailure>,
        size: impl FnOnce(&T) -> usize,
    ) -> Result<T, PluginFailure> {
        let plugin = self.plugin.label();
        let answer = answer.and_then(|value| {
            let cap = self.plugin.limits.output_bytes;
            if size(&value) > cap {
                Err(PluginFailure::OutputTooLarge(cap))
            } else {
                Ok(value)
            }
        });
        if let Err(failure) = &answer {
            tracing::error!(plugin, %failure, "plugin call failed");
        }
        if let Some(calls) = self.plugin.calls.get() {
            calls.observe(plugin, call, started.elapsed(), answer.as_ref().err());
        }
        answer
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        // Whatever the plugin wrote to stderr during this request, capped.
        let stderr = self.store.data().stderr();
        if !stderr.is_empty() {
            let shown = String::from_utf8_lossy(&stderr);
            // Escaped: a plugin's newline must not start a log line of its own making.
            let shown = shown.escape_debug();
            tracing::warn!(plugin = self.plugin.name(), stderr = %shown, "plugin wrote to stderr");
        }
    }
}

/// Every plugin available to endpoints: the built-ins plus the drop-ins of `plugins_dir`.
#[derive(Debug, Default)]
pub struct Catalog {
    plugins: BTreeMap<String, Arc<Plugin>>,
}

impl Catalog {
    /// Load the built-ins, then every `*.wasm` in `plugins_dir`. A drop-in that is not a
    /// component of the supported contract, or that claims a name already taken, is an
    /// error naming the file: a drop-in never silently shadows a built-in.
    pub fn load(plugins_dir: Option<&Path>, limits: PluginLimits) -> Result<Catalog, LoadError> {
        let mut catalog = Catalog::default();
        for plugin in super::builtin::load_all(limits)? {
            catalog
                .plugins
                .insert(plugin.info.name.clone(), Arc::new(plugin));
        }
        let Some(dir) = plugins_dir else {
            return Ok(catalog);
        };
        let read_err = |source| LoadError::Read {
            path: dir.display().to_string(),
            source,
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(read_err)?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
            .collect();
        files.sort();
        for path in files {
            let plugin = Plugin::load_file(&path, limits)?;
            if let Some(existing) = catalog.plugins.get(plugin.name()) {
                return Err(LoadError::Refused {
                    path: path.display().to_string(),
                    reason: format!(
                        "declares the name {:?}, already taken by {}; rename the plugin",
                        plugin.name(),
                        match &existing.origin {
                            Origin::Builtin => "a built-in plugin".to_string(),
                            other => other.to_string(),
                        }
                    ),
                });
            }
            catalog
                .plugins
                .insert(plugin.info.name.clone(), Arc::new(plugin));
        }
        Ok(catalog)
    }

    pub fn get(&self, name: &str) -> Option<Arc<Plugin>> {
        self.plugins.get(name).cloned()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Plugin>> {
        self.plugins.values()
    }

    pub fn names(&self) -> Vec<&str> {
        self.plugins.keys().map(String::as_str).collect()
    }
}

/// Which supported contract the component exports (newest first); refuse components
/// that speak another version, with a clear message.
fn check_contract(component: &Component) -> Result<&'static str, String> {
    let ty = component.component_type();
    let exports: Vec<String> = ty
        .exports(engine())
        .map(|(name, _)| name.to_string())
        .collect();
    if let Some(interface) = bindings::PLUGIN_INTERFACES
        .into_iter()
        .find(|i| exports.iter().any(|n| n == i))
    {
        return Ok(interface);
    }
    let supported = bindings::PLUGIN_INTERFACES.join(" or ");
    match exports
        .iter()
        .find(|n| n.starts_with("hookhost:provider/plugin@"))
    {
        Some(other) => Err(format!(
            "exports {other}; this hookhost supports {supported}"
        )),
        None => Err(format!(
            "does not export {supported} (exports: {})",
            if exports.is_empty() {
                "nothing".to_string()
            } else {
                exports.join(", ")
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_algorithms_are_kept_each_once_in_order() {
        use Algorithm::{Ed25519, HmacSha256};
        let once = each_once([HmacSha256, Ed25519].repeat(100_000));
        assert_eq!(once.len(), 2);
        assert_eq!(once, vec![HmacSha256, Ed25519]);
    }

    #[cfg(unix)]
    #[test]
    fn the_compiled_plugin_cache_must_be_writable_by_this_user_alone() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("dir");
        let mode = |mode: u32| {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode))
                .expect("chmod");
        };
        mode(0o700);
        assert!(private_to_this_user(dir.path()).is_ok());
        mode(0o755);
        assert!(private_to_this_user(dir.path()).is_ok());
        for shared in [0o775, 0o777, 0o1777] {
            mode(shared);
            let refused = private_to_this_user(dir.path()).expect_err("shared");
            assert!(refused.to_string().contains("chmod go-w"), "{refused}");
        }
        mode(0o700);
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).expect("symlink");
        let refused = private_to_this_user(&link).expect_err("a symlink");
        assert!(refused.to_string().contains("symlink"), "{refused}");
        // Another user's directory: as root, one can be made by giving it away.
        let as_root = std::fs::File::create(dir.path().join("mine"))
            .and_then(|file| file.metadata())
            .is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0);
        if as_root {
            let theirs = dir.path().join("theirs");
            std::fs::create_dir(&theirs).expect("mkdir");
            std::os::unix::fs::chown(&theirs, Some(65534), None).expect("chown");
            let refused = private_to_this_user(&theirs).expect_err("another user's");
            assert!(
                refused.to_string().contains("owned by user 65534"),
                "{refused}"
            );
        }
    }

    #[test]
    fn the_compiled_plugin_cache_evicts_the_least_recently_used_entry() {
        let dir = tempfile::tempdir().expect("dir");
        let cache = CodeCache {
            dir: dir.path().to_path_buf(),
            keep: DEFAULT_CACHE_BYTES,
        };
        let guests = ["contract_v0_1", "contract_v0_2", "hostile"].map(|name| {
            let path = Path::new(env!("HOOKHOST_GUESTS_DIR")).join(format!("{name}.wasm"));
            let bytes = std::fs::read(&path).expect("guest");
            let digest: [u8; 32] = Sha256::digest(&bytes).into();
            cache.component(&digest, || Ok(&bytes)).expect("compiles");
            digest
        });
        // Written in this order, long ago.
        let now = std::time::SystemTime::now();
        for (age, digest) in [300, 200, 100].into_iter().zip(&guests) {
            let file = std::fs::File::open(cache.path(digest)).expect("entry");
            file.set_modified(now - Duration::from_secs(age))
                .expect("set mtime");
        }
        let len = |digest: &[u8; 32]| std::fs::metadata(cache.path(digest)).expect("entry").len();
        let [first, second, third] = guests.each_ref().map(len);
        let kept = || guests.map(|digest| cache.path(&digest).is_file());
        // Everything fits: nothing goes.
        cache.evict_to(first + second + third);
        assert_eq!(kept(), [true, true, true]);
        // The oldest written is used again; a byte short of all three, the least
        // recently used goes: the middle one.
        assert!(cache.mapped(&guests[0]).is_some());
        cache.evict_to(first + third + second - 1);
        assert_eq!(kept(), [true, false, true]);
        // A byte short of the two: only the most recently used stays.
        cache.evict_to(first + third - 1);
        assert_eq!(kept(), [true, false, false]);
    }

    #[test]
    fn the_cache_bound_is_a_whole_number_of_bytes_from_one_mib() {
        use std::ffi::OsStr;
        let parse = |v: &str| parse_cache_bytes(Some(OsStr::new(v)));
        assert_eq!(parse_cache_bytes(None), Ok(DEFAULT_CACHE_BYTES));
        assert_eq!(parse("1048576"), Ok(1 << 20));
        assert_eq!(parse(" 2147483648\n"), Ok(2 << 30));
        for bad in [
            "",
            "0",
            "1048575",
            "-1",
            "512MiB",
            "1e9",
            "0x100000",
            "99999999999999999999",
        ] {
            let error = parse(bad).expect_err(bad);
            assert!(
                error.starts_with(&format!(
                    "HOOKHOST_CACHE_BYTES={bad:?}: must be a whole number"
                )),
                "{error}"
            );
        }
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let error = parse_cache_bytes(Some(OsStr::from_bytes(b"\xff"))).expect_err("not UTF-8");
            assert!(error.contains("must be a whole number"), "{error}");
        }
    }

    /// The test guest built with `std`.
    fn hostile() -> Plugin {
        let path = Path::new(env!("HOOKHOST_GUESTS_DIR")).join("hostile.wasm");
        Plugin::load_file(&path, PluginLimits::default()).expect("guest loads")
    }

    /// A Stripe event. Every built-in answers it without failing, most with a rejection.
    const STRIPE_BODY: &[u8] = br#"{"id":"evt_1","type":"customer.updated","created":1700000000,"data":{"object":{"id":"cus_1","object":"customer"}}}"#;

    /// A Stripe signature header that parses (its signature matches no key).
    fn stripe_headers() -> Vec<(String, Vec<u8>)> {
        vec![(
            "stripe-signature".to_owned(),
            b"t=1700000000,v1=00".to_vec(),
        )]
    }

    /// The built-ins, with room in time: these tests check what calls do, not how long
    /// they take, and a loaded test machine can stall a thread past the 50 ms default.
    fn built_ins() -> Catalog {
        let limits = PluginLimits {
            time: Duration::from_secs(10),
            ..PluginLimits::default()
        };
        Catalog::load(None, limits).expect("built-ins load")
    }

    fn request<'a>(headers: &'a [(String, Vec<u8>)], body: &'a [u8]) -> MessageSource<'a> {
        MessageSource {
            method: "POST",
            url: "http://127.0.0.1/webhooks/w",
            headers,
            body,
        }
    }

    /// A failure is judged by the host's own words, not by what the plugin named its
    /// functions, and what is kept of it is one line whatever those names hold.
    #[test]
    fn a_failure_is_judged_by_its_cause_and_kept_on_one_line() {
        let named = |cause: wasmtime::Error| cause.context("0: plugin function\ngrowing memory");
        let trapped = classify(
            named(wasmtime::Error::new(Trap::UnreachableCodeReached)),
            "call",
        );
        let PluginFailure::Trap(text) = trapped else {
            panic!("a trap named like a memory failure is a trap: {trapped:?}");
        };
        assert!(
            !text.contains('\n') && text.contains("function\\ngrowing"),
            "{text}"
        );
        let grown = named(wasmtime::format_err!(
            "forcing trap when growing memory to 9 bytes"
        ));
        assert_eq!(classify(grown, "call"), PluginFailure::Memory);
        let full = named(wasmtime::Error::new(ResourceTableError::Full));
        assert_eq!(classify(full, "call"), PluginFailure::Handles);
    }

    /// An instance the pool has no slot for is `Busy` (answered 429 `overloaded`), not
    /// the plugin's failure.
    #[test]
    fn a_full_pool_is_busy_not_the_plugins_failure() {
        let mut pool = wasmtime::PoolingAllocationConfig::new();
        pool.total_component_instances(1)
            .total_core_instances(1)
            .total_memories(1)
            .total_tables(1);
        let mut config = wasmtime::Config::new();
        config
            .wasm_component_model(true)
            .allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config).expect("engine");
        // `(component)`: the component binary's preamble alone.
        let empty = Component::new(&engine, b"\0asm\x0d\0\x01\0").expect("component");
        let linker = wasmtime::component::Linker::<()>::new(&engine);
        let mut store = Store::new(&engine, ());
        let _held = linker
            .instantiate(&mut store, &empty)
            .expect("the pool's one slot");
        let full = linker
            .instantiate(&mut store, &empty)
            .expect_err("no slot left");
        assert_eq!(classify(full, "instantiate"), PluginFailure::Busy);
        assert_eq!(
            crate::http::IngestError::from(PluginFailure::Busy),
            crate::http::IngestError::Overloaded
        );
    }

    /// A configuration check's words are quoted in errors and in the log: each is one
    /// line, cut short. The key formats it returns are bounded as `info()`'s are.
    #[test]
    fn a_configuration_checks_words_are_kept_to_one_line() {
        let plugin = hostile();
        let refused = plugin
            .check_config(r#"{"check":"forge"}"#)
            .expect("answered");
        let refused = refused.expect_err("refused");
        assert_eq!(refused.key, "mode\\nforged");
        let message = &refused.message;
        assert!(
            message.starts_with("refused\\nINFO forged line"),
            "{message}"
        );
        assert!(!message.contains('\n') && message.len() < 600, "{message}");
        let failure = plugin.check_config(r#"{"check":"long-prefix"}"#);
        let Err(PluginFailure::Trap(text)) = failure else {
            panic!("a 1,000-byte key prefix is refused: {failure:?}");
        };
        assert!(text.contains("at most 64 bytes"), "{text}");
    }

    /// The built-ins are written without `std`, so their components import nothing
    /// but the contract's types: no WASI to link, one core module to instantiate. A
    /// plugin built with `std` (the test guest) imports WASI.
    #[test]
    fn built_ins_import_nothing_but_the_contract() {
        let catalog = built_ins();
        assert!(catalog.iter().count() >= 36);
        for plugin in catalog.iter() {
            let imports = plugin.imports().expect("imports");
            assert_eq!(
                imports,
                ["hookhost:provider/types@0.2.0"],
                "{}",
                plugin.name()
            );
        }
        let imports = hostile().imports().expect("imports");
        assert!(
            imports.iter().any(|i| i.starts_with("wasi:cli/stderr")),
            "{imports:?}"
        );
    }

    /// Every built-in exports `session`: after `plan-verification`, `describe-event`
    /// is passed nothing, because the instance kept the request. Without a plan first
    /// (a replay that remaps), the host passes the request to `plugin.describe-event`,
    /// and the answer is the same.
    #[test]
    fn after_a_plan_a_built_in_describes_the_request_it_kept() {
        let catalog = built_ins();
        let (headers, body) = (stripe_headers(), STRIPE_BODY);
        let stripe = catalog.get("stripe").expect("stripe is built in");
        let describe = |plan_first: bool| {
            let mut session = stripe
                .session("{}", &request(&headers, body))
                .expect("instance");
            if plan_first {
                assert!(matches!(session.plan_verification(), Ok(Ok(_))));
            }
            session
                .describe_event()
                .expect("no failure")
                .expect("described")
        };
        let kept = describe(true);
        assert_eq!(kept, describe(false));
        assert_eq!(
            (kept.id.as_deref(), kept.resource_id.as_deref()),
            (Some("evt_1"), Some("cus_1"))
        );

        // Which export `planned` chooses: told of a plan that was never made, every
        // built-in's instance has no request to describe.
        for plugin in catalog.iter() {
            let mut session = plugin
                .session("{}", &request(&headers, body))
                .expect("instance");
            session.planned = true;
            let described = session.describe_event();
            assert!(
                matches!(&described, Ok(Err(Rejection::Unsupported(why))) if why == "describe-event before plan-verification"),
                "{}: {described:?}",
                plugin.name()
            );
        }
    }

    /// A store builds its WASI context only when the plugin calls WASI. No built-in
    /// does while it answers a request, accepted or refused, so none pays for one; a
    /// plugin that writes to stderr gets the sandbox, and what it wrote is kept.
    #[test]
    fn only_a_plugin_that_calls_wasi_builds_a_wasi_context() {
        let catalog = built_ins();
        let (headers, body) = (stripe_headers(), STRIPE_BODY);
        let stripe = catalog.get("stripe").expect("stripe is built in");
        let mut session = stripe
            .session("{}", &request(&headers, body))
            .expect("instance");
        assert!(matches!(session.plan_verification(), Ok(Ok(_))));
        assert!(matches!(session.describe_event(), Ok(Ok(_))));
        assert!(session.store.data().wasi.is_none(), "stripe called WASI");
        drop(session);
        for plugin in catalog.iter() {
            let mut session = plugin
                .session("{}", &request(&headers, body))
                .expect("instance");
            let planned = session.plan_verification();
            let described = session.describe_event();
            assert!(
                planned.is_ok() && described.is_ok(),
                "{}: {planned:?} {described:?}",
                plugin.name()
            );
            assert!(
                session.store.data().wasi.is_none(),
                "{} called WASI",
                plugin.name()
            );
        }

        let hostile = hostile();
        let mut session = hostile
            .session(
                r#"{"mode":"stderr","phase":"plan"}"#,
                &request(&headers, body),
            )
            .expect("instance");
        let _ = session.plan_verification();
        assert!(session.store.data().wasi.is_some());
        let written = session.store.data().stderr();
        assert!(
            String::from_utf8_lossy(&written).contains("hostile guest writes to stderr"),
            "{written:?}"
        );
    }
}
