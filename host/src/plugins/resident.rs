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
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// After a load fails, requests needing the code are answered with that failure for
/// this long before a load is tried again: each try reads the component from the
/// store and may compile it, on a plugin thread, while other requests wait.
const RETRY_LOAD_AFTER: Duration = Duration::from_secs(10);

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
    /// The last load's failure and when, while it is not tried again (under `slot`).
    failed: Mutex<Option<(Instant, String)>>,
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
            failed: Mutex::new(None),
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
            let mut failed = locked(&self.failed);
            if let Some((at, why)) = &*failed
                && at.elapsed() < RETRY_LOAD_AFTER
            {
                return Err(PluginFailure::Instantiate(why.clone()));
            }
            let (pre, size) = self.load().map_err(|why| {
                *failed = Some((Instant::now(), why.clone()));
                PluginFailure::Instantiate(why)
            })?;
            *failed = None;
            *slot = Some(pre.clone());
            self.size.store(size, Ordering::Relaxed);
            pre
        };
        self.residency.admit(self);
        Ok(pre)
    }

    /// Map the compiled code from the disk cache, or compile the component's bytes.
    fn load(&self) -> Result<(Arc<Pre>, usize), String> {
        let fetch = || {
            let bytes = (self.fetch)().map_err(wasmtime::Error::msg)?;
            // The compiled code is cached under the digest, for every tenant with
            // these bytes: what is compiled must be the bytes the digest names.
            let digest: [u8; 32] = Sha256::digest(&bytes).into();
            if digest != self.digest {
                return Err(wasmtime::Error::msg(
                    "the stored bytes are not the digest's",
                ));
            }
            Ok(bytes)
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A load that fails is not tried again within `RETRY_LOAD_AFTER`: requests in
    /// between get its failure without reading the store again.
    #[test]
    fn a_failed_load_is_answered_from_memory_for_a_while() {
        let fetched = Arc::new(AtomicUsize::new(0));
        let counted = fetched.clone();
        let fetch: Fetch = Box::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Err("the store is unreachable".into())
        });
        let code = LazyCode::new([7; 32], "0.2.0", fetch, &Residency::new(1 << 20));
        for _ in 0..3 {
            let failure = code.pre().err().map(|f| f.to_string()).unwrap_or_default();
            assert!(failure.contains("the store is unreachable"), "{failure}");
        }
        assert_eq!(fetched.load(Ordering::SeqCst), 1);
        // Once the wait is over, the next request tries again.
        let past = Instant::now().checked_sub(RETRY_LOAD_AFTER);
        if let (Some(past), Some((at, _))) = (past, &mut *locked(&code.failed)) {
            *at = past;
        }
        assert!(code.pre().is_err());
        assert_eq!(fetched.load(Ordering::SeqCst), 2);
    }

    /// Bytes that are not the digest's are never compiled (nor cached under it).
    #[test]
    fn bytes_that_are_not_the_digests_are_refused() {
        let fetch: Fetch = Box::new(|| Ok(b"\0asm not the digest's bytes".to_vec()));
        let code = LazyCode::new([9; 32], "0.2.0", fetch, &Residency::new(1 << 20));
        let failure = code.pre().err().map(|f| f.to_string()).unwrap_or_default();
        assert!(failure.contains("not the digest's"), "{failure}");
    }
}
