//! Uploaded plugins' compiled code: loaded on first use, dropped when unused.
//!
//! A deployment may hold hundreds of tenants' plugins, most of them idle. An uploaded
//! plugin is known by what it said of itself when it was accepted (`Described`), so
//! its endpoints serve without its code. The first request that needs the code loads
//! it (mapped from the disk cache, else compiled from the component's bytes), and
//! [`Residency`] keeps the loaded code within the configured budget by dropping the
//! least recently used. A request that already holds the code keeps it until it ends;
//! the next one loads it again.

use super::PluginFailure;
use super::runtime::{Pre, compile_uncached, prepare};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Gives an uploaded component's bytes (from the store), when its compiled code is
/// not in the disk cache.
pub type Fetch = Box<dyn Fn() -> Result<Vec<u8>, String> + Send + Sync>;

/// The budget for uploaded plugins' loaded code in one process, and what it did.
#[derive(Debug)]
pub struct Residency {
    /// Bytes of compiled code kept loaded at most (the one just loaded always stays).
    cap: usize,
    clock: AtomicU64,
    loaded: Mutex<Vec<Weak<LazyCode>>>,
    /// Loads (disk cache or compile) and evictions, and what is loaded now.
    pub loads: Counter,
    pub evictions: Counter,
    pub resident_bytes: Gauge,
    pub resident_plugins: Gauge,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Residency {
    pub fn new(cap: usize) -> Arc<Residency> {
        Arc::new(Residency {
            cap,
            clock: AtomicU64::new(1),
            loaded: Mutex::default(),
            loads: Counter::default(),
            evictions: Counter::default(),
            resident_bytes: Gauge::default(),
            resident_plugins: Gauge::default(),
        })
    }

    /// Count `newcomer` as loaded, then drop the least recently used others until the
    /// loaded code fits the budget again.
    fn admit(&self, newcomer: &Arc<LazyCode>) {
        self.loads.inc();
        let victims = {
            let mut loaded = locked(&self.loaded);
            let mut live: Vec<Arc<LazyCode>> = loaded
                .iter()
                .filter_map(Weak::upgrade)
                .filter(|code| code.bytes() > 0 && !Arc::ptr_eq(code, newcomer))
                .collect();
            live.sort_by_key(|code| code.last_used.load(Ordering::Relaxed));
            let mut total: usize = newcomer.bytes() + live.iter().map(|c| c.bytes()).sum::<usize>();
            let mut victims = Vec::new();
            live.retain(|code| {
                if total <= self.cap {
                    return true;
                }
                total -= code.bytes();
                victims.push(code.clone());
                false
            });
            live.push(newcomer.clone());
            *loaded = live.iter().map(Arc::downgrade).collect();
            self.resident_bytes
                .set(i64::try_from(total).unwrap_or(i64::MAX));
            self.resident_plugins
                .set(i64::try_from(live.len()).unwrap_or(i64::MAX));
            victims
        };
        // Outside the list's lock: a victim's own lock may be held by a load in progress.
        for victim in victims {
            victim.unload();
            self.evictions.inc();
        }
    }
}

/// One uploaded plugin's code, when loaded.
pub struct LazyCode {
    digest: [u8; 32],
    contract: &'static str,
    fetch: Fetch,
    /// The code; loading happens under this lock, so a burst of first requests
    /// loads it once.
    slot: Mutex<Option<Arc<Pre>>>,
    /// Size of the loaded compiled image, bytes; 0 when not loaded.
    size: AtomicUsize,
    last_used: AtomicU64,
    residency: Arc<Residency>,
}

impl LazyCode {
    pub fn new(
        digest: [u8; 32],
        contract: &'static str,
        fetch: Fetch,
        residency: &Arc<Residency>,
    ) -> Arc<LazyCode> {
        Arc::new(LazyCode {
            digest,
            contract,
            fetch,
            slot: Mutex::new(None),
            size: AtomicUsize::new(0),
            last_used: AtomicU64::new(0),
            residency: residency.clone(),
        })
    }

    fn bytes(&self) -> usize {
        self.size.load(Ordering::Relaxed)
    }

    /// The code, loaded first when it is not.
    pub fn pre(self: &Arc<Self>) -> Result<Arc<Pre>, PluginFailure> {
        let now = self.residency.clock.fetch_add(1, Ordering::Relaxed);
        self.last_used.store(now, Ordering::Relaxed);
        let pre = {
            let mut slot = locked(&self.slot);
            if let Some(pre) = &*slot {
                return Ok(pre.clone());
            }
            let (pre, size) = self.load().map_err(PluginFailure::Instantiate)?;
            *slot = Some(pre.clone());
            self.size.store(size, Ordering::Relaxed);
            pre
        };
        self.residency.admit(self);
        Ok(pre)
    }

    /// Map the compiled code from the disk cache, or compile the component's bytes.
    fn load(&self) -> Result<(Arc<Pre>, usize), String> {
        let fetch = || (self.fetch)().map_err(wasmtime::Error::msg);
        let component = compile_uncached(&self.digest, fetch)
            .map_err(|e| format!("the uploaded plugin's code cannot be loaded: {e:#}"))?;
        let image = component.image_range();
        let size = (image.end as usize)
            .saturating_sub(image.start as usize)
            .max(1);
        let (contract, pre) = prepare(&component)?;
        if !contract.ends_with(self.contract) {
            return Err(format!(
                "the component speaks {contract}, not the {} it was accepted with",
                self.contract
            ));
        }
        Ok((Arc::new(pre), size))
    }

    fn unload(&self) {
        let mut slot = locked(&self.slot);
        *slot = None;
        self.size.store(0, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for LazyCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyCode")
            .field("digest", &hex::encode(self.digest))
            .field("bytes", &self.bytes())
            .finish()
    }
}
