//! Tenants: endpoints and secrets managed at runtime, through the admin listener's
//! `/v1` API, stored in the database and served by every process sharing it.
//!
//! - The operator token (`[tenancy]`) creates tenants and issues their tokens. A tenant
//!   token is shown once; only its SHA-256 is stored; it can be revoked.
//! - A tenant token reaches only that tenant's endpoints and secrets. Another
//!   tenant's is answered exactly as one that does not exist: 404 `not_found`.
//! - Secrets are write-only: the API answers with a fingerprint (an HMAC under a key
//!   derived from the master key, so it cannot be checked against guesses without
//!   it), never the value. At rest each is sealed with XChaCha20-Poly1305 under
//!   another key derived from the master key, bound to its endpoint and secret ids.
//! - Every change moves the store's registry version; every process polls it every
//!   [`POLL`] and swaps in the rebuilt endpoints. A request in flight keeps the
//!   endpoint it resolved.
//! - The configuration file's endpoints keep working; the operator sees them as
//!   read-only, and no tenant endpoint can take their ids.

use crate::config::{EndpointConfig, Quotas, TenancyConfig};
use crate::endpoints::{Endpoint, TenantLimits};
use crate::http::{App, IngestError};
use crate::plugins::{Described, Fetch, Plugin, Residency};
use crate::store::{
    Added, Edited, ManagedEndpoint, Paused, RegistryRows, Retired, SealedSecret, StoreError,
    TenantPlugin, TenantRow,
};
use crate::verify::Secret;
use crate::worker::{Reach, refused_host};
use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload, rand_core::RngCore};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use hookhost_plugin_sdk::EndpointFacts;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq as _;

/// How often each process looks for changes made through the API (by any process).
pub const POLL: Duration = Duration::from_millis(500);
/// How often each process discards what deleted endpoints left pending
/// ([`crate::store::Store::discard_orphaned`]).
const SWEEP: Duration = Duration::from_secs(60);
/// How often the tenants' endpoints are rebuilt while one could not be built.
const RETRY_UNSERVED: Duration = Duration::from_secs(30);

/// Each tenant's ingest rate in this process: a token bucket per tenant holding up to
/// one second of its quota, refilled continuously.
#[derive(Debug, Default)]
pub struct Limiter {
    buckets: std::sync::Mutex<std::collections::HashMap<String, Bucket>>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: std::time::Instant,
}

impl Limiter {
    /// Take one request from the tenant's bucket, or say when to try again.
    pub fn admit(&self, tenant: &TenantLimits) -> Result<(), IngestError> {
        let rate = f64::from(tenant.requests_per_second.max(1));
        let now = std::time::Instant::now();
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let bucket = buckets.entry(tenant.id.clone()).or_insert(Bucket {
            tokens: rate,
            at: now,
        });
        let refilled = now.duration_since(bucket.at).as_secs_f64() * rate;
        bucket.tokens = (bucket.tokens + refilled).min(rate);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let wait = (1.0 - bucket.tokens) / rate;
        Err(IngestError::RateLimited {
            retry_after_seconds: wait.ceil().max(1.0) as u64,
        })
    }
}

/// When each tenant secret last verified a request, in this process, until written.
#[derive(Debug, Default)]
pub struct SecretUse {
    matched: std::sync::Mutex<std::collections::HashMap<String, i64>>,
}

impl SecretUse {
    /// The endpoint's key at `index` verified a request at `at_ms`.
    pub fn matched(&self, tenant: &TenantLimits, index: usize, at_ms: i64) {
        if let Some(id) = tenant.secret_ids.get(index) {
            let mut matched = self
                .matched
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            matched.insert(id.clone(), at_ms);
        }
    }

    /// Write what was noted since the last time.
    pub async fn flush(&self, store: &crate::store::Store) {
        let noted: Vec<(String, i64)> = {
            let mut matched = self
                .matched
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            matched.drain().collect()
        };
        if noted.is_empty() {
            return;
        }
        if let Err(error) = store.secrets_matched(&noted).await {
            tracing::warn!(%error, "when secrets last matched was not written");
        }
    }
}

/// The master key: seals secrets at rest and keys their fingerprints. Never printed.
#[derive(Clone)]
pub struct MasterKey {
    seal: [u8; 32],
    fingerprint: [u8; 32],
    body: [u8; 32],
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey([redacted])")
    }
}

impl MasterKey {
    /// 32 bytes, base64 (standard or URL-safe, padded or not).
    pub fn decode(text: &str) -> Result<MasterKey, String> {
        let engines = [
            base64::engine::general_purpose::STANDARD,
            base64::engine::general_purpose::URL_SAFE,
        ];
        let text = text.trim_end_matches('=');
        let bytes = engines
            .iter()
            .find_map(|engine| {
                let padded = format!("{text}{}", "=".repeat((4 - text.len() % 4) % 4));
                engine.decode(padded).ok()
            })
            .ok_or("not base64")?;
        let master: [u8; 32] = bytes
            .try_into()
            .map_err(|b: Vec<u8>| format!("{} bytes; a master key is 32", b.len()))?;
        // One key per use, derived from the master key.
        let derive = |purpose: &[u8]| -> [u8; 32] {
            let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&master).expect("any length");
            mac.update(purpose);
            mac.finalize().into_bytes().into()
        };
        Ok(MasterKey {
            seal: derive(b"hookhost secret sealing v1"),
            fingerprint: derive(b"hookhost secret fingerprint v1"),
            body: derive(b"hookhost body sealing v1"),
        })
    }

    /// Seal a secret for one endpoint and secret id: nonce || ciphertext.
    pub fn seal(&self, endpoint: &str, secret_id: &str, secret: &Secret) -> Vec<u8> {
        let cipher = XChaCha20Poly1305::new((&self.seal).into());
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let aad = associated(endpoint, secret_id);
        let payload = Payload {
            msg: secret.expose().as_bytes(),
            aad: &aad,
        };
        // Encryption into a Vec cannot fail.
        let sealed = cipher.encrypt(&nonce, payload).unwrap_or_default();
        [nonce.as_slice(), &sealed].concat()
    }

    /// The active (not retired) secrets among `secrets`, opened, in their order.
    pub fn open_active<'a>(
        &self,
        secrets: impl IntoIterator<Item = &'a SealedSecret>,
    ) -> Result<Vec<Secret>, String> {
        secrets
            .into_iter()
            .filter(|s| s.retired_at_ms.is_none())
            .map(|s| self.open(&s.endpoint, &s.id, &s.sealed))
            .collect()
    }

    /// [`MasterKey::open`] of a sealed setting that may be unset (`None`).
    pub fn open_set(
        &self,
        endpoint: &str,
        secret_id: &str,
        sealed: Option<&[u8]>,
    ) -> Result<Option<Secret>, String> {
        sealed
            .map(|sealed| self.open(endpoint, secret_id, sealed))
            .transpose()
    }

    /// Open a sealed secret; it must have been sealed for this endpoint and id.
    pub fn open(&self, endpoint: &str, secret_id: &str, sealed: &[u8]) -> Result<Secret, String> {
        if sealed.len() < 24 {
            return Err("sealed secret is truncated".into());
        }
        let (nonce, ciphertext) = sealed.split_at(24);
        let cipher = XChaCha20Poly1305::new((&self.seal).into());
        let aad = associated(endpoint, secret_id);
        let payload = Payload {
            msg: ciphertext,
            aad: &aad,
        };
        let plain = cipher
            .decrypt(XNonce::from_slice(nonce), payload)
            .map_err(|_| "sealed secret does not open with this master key".to_string())?;
        String::from_utf8(plain)
            .map(Secret::new)
            .map_err(|_| "sealed secret is not text".to_string())
    }

    /// Seal a raw body for one endpoint: [`SEALED_BODY`] || nonce || ciphertext.
    pub fn seal_body(&self, endpoint: &str, body: &[u8]) -> Vec<u8> {
        let cipher = XChaCha20Poly1305::new((&self.body).into());
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let payload = Payload {
            msg: body,
            aad: endpoint.as_bytes(),
        };
        let sealed = cipher.encrypt(&nonce, payload).unwrap_or_default();
        [SEALED_BODY, nonce.as_slice(), &sealed].concat()
    }

    /// Open a body sealed for `endpoint`.
    pub fn open_body(&self, endpoint: &str, sealed: &[u8]) -> Result<Vec<u8>, String> {
        let rest = sealed
            .strip_prefix(SEALED_BODY)
            .filter(|rest| rest.len() >= 24)
            .ok_or("not a sealed body")?;
        let (nonce, ciphertext) = rest.split_at(24);
        let cipher = XChaCha20Poly1305::new((&self.body).into());
        let payload = Payload {
            msg: ciphertext,
            aad: endpoint.as_bytes(),
        };
        cipher
            .decrypt(XNonce::from_slice(nonce), payload)
            .map_err(|_| "sealed body does not open with this master key".to_string())
    }

    /// What the API shows of a secret: enough to tell two apart, nothing to guess with.
    pub fn fingerprint(&self, secret: &Secret) -> String {
        let mut mac =
            <Hmac<Sha256> as KeyInit>::new_from_slice(&self.fingerprint).expect("any length");
        mac.update(secret.expose().as_bytes());
        format!("fp_{}", hex::encode(&mac.finalize().into_bytes()[..8]))
    }
}

/// How a sealed body starts: a body stored before its tenant turned sealing on (or of
/// an endpoint that does not seal) is kept as it came and read as it is.
pub const SEALED_BODY: &[u8] = b"hookhost-sealed-body-v1:";

/// A stored body as it arrived: opened with the master key when it was sealed.
pub fn plain_body<'a>(
    app: &App,
    endpoint: &str,
    stored: &'a [u8],
) -> Result<std::borrow::Cow<'a, [u8]>, String> {
    if !stored.starts_with(SEALED_BODY) {
        return Ok(std::borrow::Cow::Borrowed(stored));
    }
    let tenancy = app
        .tenancy
        .as_ref()
        .ok_or("a sealed body, and no [tenancy] master key to open it")?;
    tenancy
        .master_key
        .open_body(endpoint, stored)
        .map(std::borrow::Cow::Owned)
}

/// A stored event as shown (`store::show`): a sealed body opened in place, or marked
/// as not opened.
pub fn open_shown(app: &App, endpoint: &str, event: &mut serde_json::Value) {
    let Some(sealed) = event.get("body_sealed").and_then(|b| b.as_str()) else {
        return;
    };
    let opened = base64::engine::general_purpose::STANDARD
        .decode(sealed)
        .map_err(|e| e.to_string())
        .and_then(|sealed| plain_body(app, endpoint, &sealed).map(|b| b.into_owned()));
    match opened {
        Ok(plain) => {
            event["body"] = serde_json::json!(String::from_utf8_lossy(&plain));
            event["body_sealed"] = serde_json::json!(true);
        }
        Err(error) => {
            tracing::error!(%endpoint, %error, "sealed body does not open");
            event["body"] = serde_json::Value::Null;
            event["body_sealed"] = serde_json::json!(true);
        }
    }
}

/// The body a tenant endpoint stores: sealed when its tenant seals bodies.
pub fn stored_body(endpoint: &Endpoint, body: Vec<u8>) -> Vec<u8> {
    match endpoint
        .tenant
        .as_ref()
        .and_then(|t| t.seal_bodies.as_ref())
    {
        Some(key) => key.seal_body(&endpoint.id, &body),
        None => body,
    }
}

fn associated(endpoint: &str, secret_id: &str) -> Vec<u8> {
    format!("{endpoint}\n{secret_id}").into_bytes()
}

/// `bytes` random bytes from the OS, as hex (ids, tokens).
pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    OsRng.fill_bytes(&mut buf);
    hex::encode(buf)
}

fn token_sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A tenant endpoint's settings, as stored and shown (no secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointSpec {
    pub plugin: String,
    #[serde(default = "empty_object")]
    pub config: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_schedule_seconds: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<DestinationSpec>,
}

/// Where a tenant endpoint delivers; its signing secret is sealed apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DestinationSpec {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

fn empty_object() -> serde_json::Value {
    serde_json::json!({})
}

/// The sealed destination secret's id (its associated data, with the endpoint's id).
const DESTINATION: &str = "destination";
/// The sealed handshake token's id, likewise.
const HANDSHAKE: &str = "handshake_token";

impl EndpointSpec {
    /// The endpoint as the configuration file would have it, its destination limited
    /// to `reach`. Without the destination's secret there is no destination.
    fn config(
        &self,
        id: &str,
        secrets: Vec<Secret>,
        write_only: WriteOnly,
        reach: Reach,
    ) -> EndpointConfig {
        let schedule = self
            .retry_schedule_seconds
            .clone()
            .unwrap_or_else(|| crate::config::DEFAULT_RETRY_SCHEDULE_SECONDS.to_vec());
        let destination =
            self.destination
                .as_ref()
                .zip(write_only.destination)
                .map(|(d, secret)| crate::config::DestinationConfig {
                    url: d.url.clone(),
                    ca: None,
                    secret,
                    connect_timeout: Duration::from_millis(d.connect_timeout_ms.unwrap_or(2_000)),
                    timeout: Duration::from_millis(d.timeout_ms.unwrap_or(15_000)),
                    reach,
                });
        EndpointConfig {
            id: id.to_string(),
            plugin: self.plugin.clone(),
            secrets,
            tolerance: self.tolerance,
            handshake_token: write_only.handshake,
            plugin_config: self.config.clone(),
            destination,
            retry_schedule: schedule.into_iter().map(Duration::from_secs).collect(),
            // Tenant endpoints do not reconcile yet: no API credential is managed for them.
            reconcile: None,
        }
    }
}

/// Build the tenants' endpoints from the store's rows: specs, and active secrets
/// opened (newest first: the newest is current). An endpoint that no longer builds
/// (its plugin is gone, its secret does not open) is left out, logged, and its id
/// answered beside those built.
fn build_managed(
    app: &App,
    tenancy: &TenancyConfig,
    rows: RegistryRows,
) -> (Vec<Endpoint>, Vec<String>) {
    let RegistryRows {
        tenants,
        endpoints: managed,
        secrets,
        ..
    } = rows;
    let key = &tenancy.master_key;
    let mut endpoints = Vec::with_capacity(managed.len());
    let mut unserved = Vec::new();
    for endpoint in managed {
        let active: Vec<&SealedSecret> = secrets
            .iter()
            .filter(|s| s.endpoint == endpoint.id && s.retired_at_ms.is_none())
            .collect();
        let opened = key.open_active(active.iter().copied());
        let secret_ids = active.iter().map(|s| s.id.clone()).collect();
        let open =
            |sealed: &Option<Vec<u8>>, what| key.open_set(&endpoint.id, what, sealed.as_deref());
        let write_only = open(&endpoint.destination_sealed, DESTINATION).and_then(|destination| {
            let handshake = open(&endpoint.handshake_sealed, HANDSHAKE)?;
            Ok(WriteOnly {
                destination,
                handshake,
            })
        });
        let checked = endpoint
            .facts
            .as_deref()
            .and_then(|facts| serde_json::from_str::<CheckedFacts>(facts).ok());
        let built = serde_json::from_str::<EndpointSpec>(&endpoint.spec)
            .map_err(|e| e.to_string())
            .and_then(|spec| {
                let reach = tenancy.destinations;
                Ok(spec.config(&endpoint.id, opened?, write_only?, reach))
            })
            .and_then(|config| build(app, &endpoint.tenant, config, checked.as_ref()));
        match built {
            Ok((mut built, _)) => {
                let quotas = quotas(tenancy, tenants.iter().find(|t| t.id == endpoint.tenant));
                let seals = tenants
                    .iter()
                    .any(|t| t.id == endpoint.tenant && t.seal_bodies);
                built.tenant = Some(TenantLimits {
                    id: endpoint.tenant.clone(),
                    created_at_ms: endpoint.created_at_ms,
                    requests_per_second: quotas.requests_per_second,
                    secret_ids,
                    seal_bodies: seals.then(|| key.clone()),
                });
                endpoints.push(built);
            }
            Err(error) => {
                tracing::error!(endpoint = %endpoint.id, %error, "tenant endpoint not served");
                unserved.push(endpoint.id);
            }
        }
    }
    (endpoints, unserved)
}

/// A tenant's quotas: its own where it has them, else the configuration's.
fn quotas(tenancy: &TenancyConfig, tenant: Option<&TenantRow>) -> Quotas {
    let own = |value: Option<i64>, default: u32| {
        value.and_then(|v| u32::try_from(v).ok()).unwrap_or(default)
    };
    Quotas {
        requests_per_second: own(
            tenant.and_then(|t| t.requests_per_second),
            tenancy.quotas.requests_per_second,
        ),
        max_endpoints: own(
            tenant.and_then(|t| t.max_endpoints),
            tenancy.quotas.max_endpoints,
        ),
        ..tenancy.quotas
    }
}

/// How an endpoint names one of its tenant's uploaded plugins: `sha256:<hex>`.
const UPLOADED: &str = "sha256:";

/// An endpoint's plugin configuration check, as answered by the plugin of `digest`:
/// kept with the endpoint, so that a reload builds it without loading an uploaded
/// plugin's code (plugins are pure: the same digest and configuration give the same
/// answer).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CheckedFacts {
    digest: String,
    facts: EndpointFacts,
}

/// Build a tenant's endpoint: its plugin is a built-in or drop-in by name, or one the
/// tenant uploaded (`sha256:<hex>`, loaded by [`load_uploaded`]); never another
/// tenant's. `checked` is the configuration check kept with it, used while its
/// plugin's digest is the same; otherwise the plugin checks the configuration now.
fn build(
    app: &App,
    tenant: &str,
    config: EndpointConfig,
    checked: Option<&CheckedFacts>,
) -> Result<(Endpoint, CheckedFacts), String> {
    let plugin = match config.plugin.strip_prefix(UPLOADED) {
        None => crate::endpoints::named_plugin(&config, &app.catalog)?,
        Some(digest) => app.uploaded.get(tenant, digest).ok_or_else(|| {
            format!(
                "endpoint {:?}: unknown plugin {:?}: upload it first",
                config.id, config.plugin
            )
        })?,
    };
    let facts = match checked {
        Some(checked) if checked.digest == plugin.digest => checked.facts.clone(),
        _ => Endpoint::check(&config, &plugin)?,
    };
    let checked = CheckedFacts {
        digest: plugin.digest.clone(),
        facts,
    };
    let endpoint = Endpoint::assemble(&config, plugin, &checked.facts)?;
    Ok((endpoint, checked))
}

/// Uploaded plugins known to this process, by tenant and digest. Their code is
/// loaded on first use and dropped when unused, within the budget of `residency`
/// (see `plugins::Residency`); the compiled code is also cached on disk by digest,
/// so loading it again maps it instead of compiling.
#[derive(Debug)]
pub struct Uploaded {
    plugins: std::sync::RwLock<std::collections::HashMap<(String, String), Arc<Plugin>>>,
    pub residency: Arc<Residency>,
}

impl Uploaded {
    /// At most `resident_bytes` of uploaded plugins' compiled code stays loaded.
    pub fn new(resident_bytes: usize) -> Uploaded {
        Uploaded {
            plugins: Default::default(),
            residency: Residency::new(resident_bytes),
        }
    }

    fn get(&self, tenant: &str, digest: &str) -> Option<Arc<Plugin>> {
        let plugins = self.plugins.read().unwrap_or_else(|p| p.into_inner());
        plugins
            .get(&(tenant.to_string(), digest.to_string()))
            .cloned()
    }

    fn insert(&self, tenant: &str, digest: &str, plugin: Arc<Plugin>) {
        let mut plugins = self.plugins.write().unwrap_or_else(|p| p.into_inner());
        plugins.insert((tenant.to_string(), digest.to_string()), plugin);
    }
}

/// Make known the uploaded plugins the tenants' endpoints name (see [`know_uploaded`]).
async fn load_uploaded(app: &Arc<App>, managed: &[ManagedEndpoint]) -> Result<(), StoreError> {
    for endpoint in managed {
        if let Ok(spec) = serde_json::from_str::<EndpointSpec>(&endpoint.spec) {
            know_uploaded(app, &endpoint.tenant, &spec.plugin).await?;
        }
    }
    Ok(())
}

/// When `plugin` names one of `tenant`'s uploaded plugins that this process does not
/// know yet, make it known from what it said of itself when it was accepted: its
/// code is loaded when a call first needs it. Any other name is left to the catalog.
async fn know_uploaded(app: &Arc<App>, tenant: &str, plugin: &str) -> Result<(), StoreError> {
    let Some(digest) = plugin.strip_prefix(UPLOADED) else {
        return Ok(());
    };
    if app.uploaded.get(tenant, digest).is_some() {
        return Ok(());
    }
    let Some((described, size)) = app.store.plugin_described(tenant, digest).await? else {
        return Ok(());
    };
    let described = match described.as_deref().map(serde_json::from_str::<Described>) {
        Some(Ok(described)) => described,
        _ => match describe_once(app, tenant, digest).await? {
            Some(described) => described,
            None => return Ok(()),
        },
    };
    let plugin = Plugin::lazy(
        described,
        digest,
        usize::try_from(size).unwrap_or_default(),
        crate::plugins::Origin::Upload(tenant.to_string()),
        app.plugin_limits,
        fetch_wasm(app, tenant, digest),
        &app.uploaded.residency,
    );
    match plugin {
        Ok(plugin) => {
            plugin.count_calls_in(app.metrics.plugin_calls());
            app.uploaded.insert(tenant, digest, Arc::new(plugin));
        }
        Err(error) => tracing::error!(%tenant, %digest, %error, "uploaded plugin not served"),
    }
    Ok(())
}

/// Load a plugin uploaded before what it says of itself was kept, once, and keep that.
async fn describe_once(
    app: &Arc<App>,
    tenant: &str,
    digest: &str,
) -> Result<Option<Described>, StoreError> {
    let Some(wasm) = app.store.plugin_wasm(tenant, digest).await? else {
        return Ok(None);
    };
    let (origin, limits) = (
        crate::plugins::Origin::Upload(tenant.to_string()),
        app.plugin_limits,
    );
    // An accepted upload: its code goes to the disk cache, as at its acceptance.
    let load = move || {
        let plugin = Plugin::load(&wasm, origin, limits)?;
        plugin.cache_code();
        Ok::<_, crate::plugins::LoadError>(plugin)
    };
    let loaded = tokio::task::spawn_blocking(load).await;
    let described = match loaded {
        Ok(Ok(plugin)) => plugin.described(),
        Ok(Err(error)) => {
            tracing::error!(%tenant, %digest, %error, "uploaded plugin does not load");
            return Ok(None);
        }
        Err(error) => {
            tracing::error!(%error, "uploaded plugin loading panicked");
            return Ok(None);
        }
    };
    let json = serde_json::to_string(&described).unwrap_or_default();
    app.store
        .set_plugin_described(tenant, digest, &json)
        .await?;
    Ok(Some(described))
}

/// How a plugin thread reads an uploaded component's bytes from the store, when the
/// disk cache has no compiled code for it.
fn fetch_wasm(app: &Arc<App>, tenant: &str, digest: &str) -> Fetch {
    let (store, runtime) = (app.store.clone(), tokio::runtime::Handle::current());
    let (tenant, digest) = (tenant.to_string(), digest.to_string());
    Box::new(move || {
        runtime
            .block_on(store.plugin_wasm(&tenant, &digest))
            .map_err(|e| format!("the uploaded plugin cannot be read: {e}"))?
            .ok_or_else(|| "the uploaded plugin is no longer in the store".to_string())
    })
}

/// Reload the tenants' endpoints whenever the store's registry version moves, until
/// `stop`, and every [`RETRY_UNSERVED`] while one could not be built (its plugin's
/// code not read from the store, say). The first load happens at once.
pub async fn keep_registry_current(
    app: Arc<App>,
    tenancy: TenancyConfig,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let sweeping = tokio::spawn(sweep_orphaned(app.clone(), stop.clone()));
    let mut loaded = None;
    let mut built_at = tokio::time::Instant::now();
    loop {
        let retry = app.endpoints.has_unserved() && built_at.elapsed() >= RETRY_UNSERVED;
        match app.store.registry_version().await {
            Ok(version) if Some(version) != loaded || retry => {
                built_at = tokio::time::Instant::now();
                match refresh(&app, &tenancy).await {
                    Ok(built) => loaded = Some(built),
                    Err(error) => tracing::warn!(%error, "tenant endpoints not reloaded"),
                }
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "registry version not read"),
        }
        app.secret_use.flush(&app.store).await;
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            app.secret_use.flush(&app.store).await;
            let _ = sweeping.await;
            return;
        }
    }
}

/// Every [`SWEEP`] until `stop`, discard what deleted endpoints left pending
/// ([`crate::store::Store::discard_orphaned`]): in a task of its own, so that a long
/// one never holds back the registry's reloads.
async fn sweep_orphaned(app: Arc<App>, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        match app.store.discard_orphaned().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(discarded = n, "deleted endpoints' late receipts discarded"),
            Err(error) => tracing::warn!(%error, "deleted endpoints' late receipts not discarded"),
        }
        tokio::select! {
            _ = tokio::time::sleep(SWEEP) => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// Rebuild the tenants' endpoints now and swap them in; the registry version built.
/// Those that could not be built are answered 503 (retried) until a rebuild serves
/// them: see [`keep_registry_current`].
pub async fn refresh(app: &Arc<App>, tenancy: &TenancyConfig) -> Result<i64, StoreError> {
    let _one_at_a_time = app.endpoints.reloading.lock().await;
    let rows = app.store.registry().await?;
    load_uploaded(app, &rows.endpoints).await?;
    // Building runs each plugin's config check: on a plugin thread, as every call.
    let (on_thread, tenancy) = (app.clone(), tenancy.clone());
    let version = rows.version;
    let (built, unserved) = app
        .plugin_threads
        .run(move || build_managed(&on_thread, &tenancy, rows))
        .await
        .map_err(|e| StoreError::Unavailable(format!("tenant endpoints not built: {e}")))?;
    app.endpoints.replace_managed(built, unserved);
    Ok(version)
}

/// Who called: the operator, or one tenant.
#[derive(Debug, Clone)]
enum Caller {
    Operator,
    Tenant(String),
}

#[derive(Clone)]
struct Api {
    app: Arc<App>,
    tenancy: Arc<TenancyConfig>,
}

/// The `/v1` router: operator routes (tenants, tokens) and tenant routes (endpoints,
/// secrets). Without a valid token: 401, and nothing else.
pub fn router(app: Arc<App>, tenancy: TenancyConfig) -> axum::Router {
    let api = Api {
        app,
        tenancy: Arc::new(tenancy),
    };
    axum::Router::new()
        .route("/v1/tenants", get(list_tenants).post(create_tenant))
        .route("/v1/tenants/{tenant}/tokens", post(issue_token))
        .route(
            "/v1/tenants/{tenant}/tokens/{token}/revoke",
            post(revoke_token),
        )
        .route("/v1/endpoints", get(list_endpoints).post(create_endpoint))
        .route(
            "/v1/endpoints/{id}",
            get(show_endpoint)
                .put(update_endpoint)
                .delete(delete_endpoint),
        )
        .route(
            "/v1/plugins",
            get(list_plugins)
                .post(upload_plugin)
                // Room for the largest plugin allowed, base64-encoded, and its vectors.
                .layer(axum::extract::DefaultBodyLimit::max(upload_limit(
                    &api.tenancy,
                ))),
        )
        .route("/v1/endpoints/{id}/shadow", post(shadow))
        .route("/v1/endpoints/{id}/pause", post(pause))
        .route("/v1/endpoints/{id}/resume", post(resume))
        .route(
            "/v1/endpoints/{id}/secrets",
            get(list_secrets).post(add_secret),
        )
        .route(
            "/v1/endpoints/{id}/secrets/{secret}/retire",
            post(retire_secret),
        )
        // No fallback: it is merged into the admin router, whose fallback (behind the
        // admin token) answers every other path.
        .layer(middleware::map_response(crate::http::json_refusal))
        .layer(middleware::from_fn_with_state(
            api.app.read_timeout,
            crate::http::body_deadline,
        ))
        .layer(middleware::from_fn_with_state(api.clone(), authenticate))
        .with_state(api)
}

async fn authenticate(State(api): State<Api>, mut request: Request, next: Next) -> Answer {
    let presented = crate::http::bearer_token(request.headers()).to_string();
    let operator = api.tenancy.operator_token.expose().as_bytes();
    let caller = if bool::from(presented.as_bytes().ct_eq(operator)) && !operator.is_empty() {
        Some(Caller::Operator)
    } else if presented.is_empty() {
        None
    } else {
        let hash = token_sha256(&presented);
        api.app.store.token_tenant(&hash).await?.map(Caller::Tenant)
    };
    let caller = caller.ok_or(error(StatusCode::UNAUTHORIZED, "unauthorized", None))?;
    request.extensions_mut().insert(caller);
    Ok(next.run(request).await)
}

/// A refusal: a status and a stable code, with a reason where it helps.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    code: &'static str,
    reason: Option<String>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = match self.reason {
            Some(reason) => serde_json::json!({ "error": self.code, "reason": reason }),
            None => serde_json::json!({ "error": self.code }),
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "tenant API: store error");
        error(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", None)
    }
}

fn error(status: StatusCode, code: &'static str, reason: Option<String>) -> ApiError {
    ApiError {
        status,
        code,
        reason,
    }
}

/// 403 `quota_exceeded`: the tenant has `limit` of `what` already.
fn over_quota(limit: u32, what: &str) -> ApiError {
    let reason = format!("the tenant's quota is {limit} {what}");
    error(StatusCode::FORBIDDEN, "quota_exceeded", Some(reason))
}

fn not_found() -> ApiError {
    error(StatusCode::NOT_FOUND, "not_found", None)
}

type Answer = Result<Response, ApiError>;

/// A JSON request body; one that does not parse is 400 `invalid_request`, with the
/// reason, like every other refusal of this API, and one over the route's limit
/// (2 MiB; for a plugin, what its size quota needs) is 413 `body_too_large`.
struct Body<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> axum::extract::FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        match <Json<T> as axum::extract::FromRequest<S>>::from_request(request, state).await {
            Ok(Json(value)) => Ok(Body(value)),
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                Some(rejection.body_text()),
            )),
            Err(rejection) => Err(error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                Some(rejection.body_text()),
            )),
        }
    }
}

/// The tenant calling, or a 404 for the operator on a tenant route (the operator
/// manages tenants, not their endpoints).
fn tenant_of(caller: &Caller) -> Result<&str, ApiError> {
    match caller {
        Caller::Tenant(tenant) => Ok(tenant),
        Caller::Operator => Err(not_found()),
    }
}

fn operator_only(caller: &Caller) -> Result<(), ApiError> {
    match caller {
        Caller::Operator => Ok(()),
        Caller::Tenant(_) => Err(not_found()),
    }
}

/// Ids of tenants and endpoint names: what fits a URL path segment plainly.
fn check_name(what: &str, name: &str) -> Result<(), ApiError> {
    let fits = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if fits {
        Ok(())
    } else {
        Err(error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            Some(format!("{what}: 1 to 64 of a-z, 0-9 and -")),
        ))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewTenant {
    id: String,
    name: String,
    /// Its own quotas; absent: the configuration's.
    #[serde(default)]
    requests_per_second: Option<u32>,
    #[serde(default)]
    max_endpoints: Option<u32>,
    /// Seal its endpoints' raw bodies at rest.
    #[serde(default)]
    seal_bodies: bool,
}

fn created(body: serde_json::Value) -> Answer {
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

fn ok(body: serde_json::Value) -> Answer {
    Ok(Json(body).into_response())
}

async fn create_tenant(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
    Body(body): Body<NewTenant>,
) -> Answer {
    operator_only(&caller)?;
    check_name("id", &body.id)?;
    if body.requests_per_second == Some(0) {
        let reason = Some("requests_per_second must be greater than 0".into());
        return Err(error(StatusCode::BAD_REQUEST, "invalid_request", reason));
    }
    let tenant = TenantRow {
        id: body.id,
        name: body.name,
        created_at_ms: crate::clock::now_ms(),
        requests_per_second: body.requests_per_second.map(i64::from),
        max_endpoints: body.max_endpoints.map(i64::from),
        seal_bodies: body.seal_bodies,
    };
    if !api.app.store.create_tenant(&tenant).await? {
        return Err(error(StatusCode::CONFLICT, "tenant_exists", None));
    }
    created(tenant_shown(&api, &tenant))
}

/// A tenant as the API shows it: with the quotas that apply to it.
fn tenant_shown(api: &Api, tenant: &TenantRow) -> serde_json::Value {
    let quotas = quotas(&api.tenancy, Some(tenant));
    serde_json::json!({
        "id": tenant.id,
        "name": tenant.name,
        "created_at_ms": tenant.created_at_ms,
        "seal_bodies": tenant.seal_bodies,
        "quotas": {
            "requests_per_second": quotas.requests_per_second,
            "max_endpoints": quotas.max_endpoints,
        },
    })
}

async fn list_tenants(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
) -> Answer {
    operator_only(&caller)?;
    let tenants = api.app.store.tenants().await?;
    let shown: Vec<_> = tenants.iter().map(|t| tenant_shown(&api, t)).collect();
    ok(serde_json::json!(shown))
}

async fn issue_token(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
    Path(tenant): Path<String>,
) -> Answer {
    operator_only(&caller)?;
    let token_id = format!("tok_{}", random_hex(8));
    let token = format!("hht_{}", random_hex(32));
    let (hash, now) = (token_sha256(&token), crate::clock::now_ms());
    if !api
        .app
        .store
        .issue_token(&tenant, &token_id, &hash, now)
        .await?
    {
        return Err(not_found());
    }
    // The only time the token is shown.
    created(serde_json::json!({ "tenant": tenant, "token_id": token_id, "token": token }))
}

async fn revoke_token(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
    Path((tenant, token_id)): Path<(String, String)>,
) -> Answer {
    operator_only(&caller)?;
    let now = crate::clock::now_ms();
    if !api.app.store.revoke_token(&tenant, &token_id, now).await? {
        return Err(not_found());
    }
    ok(serde_json::json!({ "token_id": token_id, "revoked": true }))
}

/// An endpoint as the API shows it.
fn shown(endpoint: &ManagedEndpoint) -> serde_json::Value {
    let spec: serde_json::Value = serde_json::from_str(&endpoint.spec).unwrap_or_default();
    serde_json::json!({
        "id": endpoint.id,
        "tenant": endpoint.tenant,
        "path": format!("/webhooks/{}", endpoint.id),
        "spec": spec,
        "handshake_token_set": endpoint.handshake_sealed.is_some(),
        "read_only": false,
        "created_at_ms": endpoint.created_at_ms,
        "updated_at_ms": endpoint.updated_at_ms,
    })
}

/// A tenant sees its own endpoints; the operator sees every tenant's and the
/// configuration file's (read-only).
async fn list_endpoints(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
) -> Answer {
    let tenant = match &caller {
        Caller::Tenant(tenant) => Some(tenant.as_str()),
        Caller::Operator => None,
    };
    let managed = api.app.store.managed_endpoints(tenant).await?;
    let mut listed: Vec<serde_json::Value> = managed.iter().map(shown).collect();
    if let Caller::Operator = caller {
        listed.extend(api.app.endpoints.fixed().iter().map(|e| {
            serde_json::json!({
                "id": e.id,
                "path": format!("/webhooks/{}", e.id),
                "spec": { "plugin": e.plugin.name() },
                "read_only": true,
            })
        }));
    }
    ok(serde_json::json!(listed))
}

/// The tenant's endpoint `id`, or a 404 (whoever else's it is).
async fn owned(api: &Api, caller: &Caller, id: &str) -> Result<ManagedEndpoint, ApiError> {
    let tenant = tenant_of(caller)?;
    let managed = api.app.store.managed_endpoints(Some(tenant)).await?;
    managed
        .into_iter()
        .find(|e| e.id == id)
        .ok_or_else(not_found)
}

async fn show_endpoint(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
    Path(id): Path<String>,
) -> Answer {
    ok(shown(&owned(&api, &caller, &id).await?))
}

/// A new endpoint: its `name`, its first `secret` (write-only), and its [`Settings`],
/// all in one JSON object.
struct NewEndpoint {
    name: String,
    secret: String,
    settings: Settings,
}

impl<'de> Deserialize<'de> for NewEndpoint {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut fields = serde_json::Map::deserialize(d)?;
        let mut take = |key: &str| match fields.remove(key) {
            Some(serde_json::Value::String(text)) => Ok(text),
            Some(_) => Err(D::Error::custom(format!("{key}: a string"))),
            None => Err(D::Error::custom(format!("missing field `{key}`"))),
        };
        let (name, secret) = (take("name")?, take("secret")?);
        let settings =
            Settings::deserialize(serde_json::Value::Object(fields)).map_err(D::Error::custom)?;
        Ok(NewEndpoint {
            name,
            secret,
            settings,
        })
    }
}

/// An endpoint's settings as a replacement gives them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    plugin: String,
    #[serde(default = "empty_object")]
    config: serde_json::Value,
    #[serde(default)]
    tolerance: Option<u32>,
    #[serde(default)]
    retry_schedule_seconds: Option<Vec<u64>>,
    #[serde(default)]
    destination: Option<NewDestination>,
    /// The token a GET handshake must present (Meta's `hub.verify_token`), write-only:
    /// absent keeps the stored one (none on a new endpoint), `null` removes it.
    #[serde(default, deserialize_with = "present")]
    handshake_token: Option<Option<String>>,
}

/// A field given, even as `null` (`Some(None)`); absent stays `None`, its default.
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// An endpoint's write-only settings, opened: never in its spec, never shown.
#[derive(Default)]
struct WriteOnly {
    /// The destination's signing secret.
    destination: Option<Secret>,
    /// The token its GET handshake must present.
    handshake: Option<Secret>,
}

impl WriteOnly {
    /// Sealed for the endpoint `id`: (destination secret, handshake token).
    fn sealed(&self, key: &MasterKey, id: &str) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        let seal = |secret: &Option<Secret>, what| secret.as_ref().map(|s| key.seal(id, what, s));
        (
            seal(&self.destination, DESTINATION),
            seal(&self.handshake, HANDSHAKE),
        )
    }
}

/// A destination as given: its settings and, write-only, its signing secret (on a
/// replacement, absent keeps the one stored).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewDestination {
    url: String,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    connect_timeout_ms: Option<u64>,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// What a request says of an endpoint's write-only settings: each `None` where it
/// leaves the stored one as it is.
struct Given {
    destination: Option<Secret>,
    /// `Some(None)`: the token is removed.
    handshake: Option<Option<Secret>>,
}

impl Settings {
    /// The settings to store, and the write-only ones given.
    fn split(self) -> (EndpointSpec, Given) {
        let given = Given {
            destination: self
                .destination
                .as_ref()
                .and_then(|d| d.secret.clone())
                .map(Secret::new),
            handshake: self.handshake_token.map(|token| token.map(Secret::new)),
        };
        let spec = EndpointSpec {
            plugin: self.plugin,
            config: self.config,
            tolerance: self.tolerance,
            retry_schedule_seconds: self.retry_schedule_seconds,
            destination: self.destination.map(|d| DestinationSpec {
                url: d.url,
                connect_timeout_ms: d.connect_timeout_ms,
                timeout_ms: d.timeout_ms,
            }),
        };
        (spec, given)
    }
}

/// Check that an endpoint builds as it would be served (plugin, its config check, the
/// secrets' key format): a 400 naming what is wrong, before anything is stored. The
/// plugin's configuration check, as JSON, is kept with the endpoint.
async fn validate(
    api: &Api,
    spec: &EndpointSpec,
    id: &str,
    secrets: Vec<Secret>,
    write_only: WriteOnly,
) -> Result<String, ApiError> {
    let invalid = |reason: &str| {
        error(
            StatusCode::BAD_REQUEST,
            "invalid_endpoint",
            Some(reason.into()),
        )
    };
    if let Some(schedule) = &spec.retry_schedule_seconds {
        crate::config::check_retry_schedule(schedule)
            .map_err(|reason| invalid(&format!("retry_schedule_seconds: {reason}")))?;
    }
    if spec.destination.is_some() && write_only.destination.is_none() {
        return Err(invalid(
            "destination.secret: a destination needs its signing secret",
        ));
    }
    if write_only
        .handshake
        .as_ref()
        .is_some_and(|t| t.expose().is_empty())
    {
        return Err(invalid("handshake_token: the token is empty"));
    }
    let reach = api.tenancy.destinations;
    let (app, config) = (api.app.clone(), spec.config(id, secrets, write_only, reach));
    if let Some(d) = &config.destination {
        let checked = api.app.delivery.check_timeout(d.timeout);
        checked.map_err(|reason| invalid(&format!("destination.timeout_ms: {reason}")))?;
        // A name is judged at each connection; an address or `localhost` at once.
        let uri = d.url.parse::<axum::http::Uri>().ok();
        if reach == Reach::Public
            && let Some(refused) = uri.as_ref().and_then(|u| u.host()).and_then(refused_host)
        {
            return Err(invalid(&format!("destination url: {refused}")));
        }
    }
    let _one_at_a_time = plugin_work().await?;
    // A tenant's endpoint ids are `{tenant}.{name}`.
    let tenant = id.split('.').next().unwrap_or_default().to_string();
    know_uploaded(&api.app, &tenant, &spec.plugin).await?;
    let built = api
        .app
        .plugin_threads
        .run(move || build(&app, &tenant, config, None).map(|(_, checked)| checked))
        .await
        .map_err(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "plugin_failed", None))?;
    let checked =
        built.map_err(|reason| error(StatusCode::BAD_REQUEST, "invalid_endpoint", Some(reason)))?;
    Ok(serde_json::to_string(&checked).unwrap_or_default())
}

/// Waited for by the tenant API's plugin work (checking an endpoint's configuration,
/// judging an upload, shadow replay), so that it runs one call at a time: however many
/// calls tenants make, they hold one plugin thread at most (a configuration check may
/// take seconds), and the rest stay free for every endpoint's requests.
async fn plugin_work() -> Result<tokio::sync::SemaphorePermit<'static>, ApiError> {
    static PLUGIN_WORK: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
    let permit = PLUGIN_WORK.acquire().await;
    permit.map_err(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "plugin_failed", None))
}

/// A secret sealed for `endpoint`, with a fresh id.
fn sealed(api: &Api, endpoint: &str, secret: &Secret) -> SealedSecret {
    let key = &api.tenancy.master_key;
    let id = format!("sec_{}", random_hex(8));
    SealedSecret {
        sealed: key.seal(endpoint, &id, secret),
        fingerprint: key.fingerprint(secret),
        id,
        endpoint: endpoint.to_string(),
        created_at_ms: crate::clock::now_ms(),
        retired_at_ms: None,
        last_matched_at_ms: None,
    }
}

async fn create_endpoint(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
    Body(body): Body<NewEndpoint>,
) -> Answer {
    let tenant = tenant_of(&caller)?.to_string();
    check_name("name", &body.name)?;
    let id = format!("{tenant}.{}", body.name);
    if api.app.endpoints.is_fixed(&id) {
        let reason = "the configuration file has an endpoint with this id".to_string();
        return Err(error(StatusCode::CONFLICT, "endpoint_exists", Some(reason)));
    }
    let secret = Secret::new(body.secret);
    let (spec, given) = body.settings.split();
    let write_only = WriteOnly {
        destination: given.destination,
        handshake: given.handshake.flatten(),
    };
    let tenants = api.app.store.tenants().await?;
    let limit = quotas(&api.tenancy, tenants.iter().find(|t| t.id == tenant)).max_endpoints;
    let (destination_sealed, handshake_sealed) = write_only.sealed(&api.tenancy.master_key, &id);
    let facts = validate(&api, &spec, &id, vec![secret.clone()], write_only).await?;
    let now = crate::clock::now_ms();
    let endpoint = ManagedEndpoint {
        id: id.clone(),
        tenant,
        spec: serde_json::to_string(&spec).unwrap_or_default(),
        destination_sealed,
        handshake_sealed,
        facts: Some(facts),
        created_at_ms: now,
        updated_at_ms: now,
    };
    let first = sealed(&api, &id, &secret);
    let added = api.app.store.create_endpoint(&endpoint, &first, limit);
    match added.await? {
        Added::Added => {}
        Added::Exists => return Err(error(StatusCode::CONFLICT, "endpoint_exists", None)),
        Added::OverQuota => return Err(over_quota(limit, "endpoints")),
    }
    reload(&api).await;
    created(shown(&endpoint))
}

/// This process serves a change at once; the others within [`POLL`].
async fn reload(api: &Api) {
    if let Err(error) = refresh(&api.app, &api.tenancy).await {
        tracing::warn!(%error, "tenant endpoints not reloaded after a change");
    }
}

/// A tenant endpoint's active secrets, opened, newest first.
async fn active_secrets(api: &Api, endpoint: &ManagedEndpoint) -> Result<Vec<Secret>, ApiError> {
    let secrets = api
        .app
        .store
        .secrets(Some(&endpoint.tenant), Some(&endpoint.id))
        .await?;
    let opened = api.tenancy.master_key.open_active(&secrets);
    opened.map_err(|reason| {
        tracing::error!(endpoint = %endpoint.id, %reason, "secret does not open");
        error(StatusCode::INTERNAL_SERVER_ERROR, "secret_unreadable", None)
    })
}

async fn update_endpoint(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
    Path(id): Path<String>,
    Body(settings): Body<Settings>,
) -> Answer {
    let endpoint = owned(&api, &caller, &id).await?;
    let secrets = active_secrets(&api, &endpoint).await?;
    let (spec, given) = settings.split();
    // What is not given is kept: a destination's secret (while it has a destination)
    // and the handshake token.
    let destination = match (&spec.destination, given.destination) {
        (None, _) => Ok(None),
        (Some(_), Some(secret)) => Ok(Some(secret)),
        (Some(_), None) => kept(&api, &endpoint, &endpoint.destination_sealed, DESTINATION),
    };
    let handshake = match given.handshake {
        Some(token) => Ok(token),
        None => kept(&api, &endpoint, &endpoint.handshake_sealed, HANDSHAKE),
    };
    let write_only = WriteOnly {
        destination: destination?,
        handshake: handshake?,
    };
    let (destination_sealed, handshake_sealed) = write_only.sealed(&api.tenancy.master_key, &id);
    let facts = validate(&api, &spec, &id, secrets, write_only).await?;
    let read_at_ms = endpoint.updated_at_ms;
    let updated = ManagedEndpoint {
        spec: serde_json::to_string(&spec).unwrap_or_default(),
        destination_sealed,
        handshake_sealed,
        facts: Some(facts),
        updated_at_ms: after(read_at_ms),
        ..endpoint
    };
    edited(api.app.store.update_endpoint(&updated, read_at_ms).await?)?;
    reload(&api).await;
    ok(shown(&updated))
}

/// A change's `updated_at_ms`: now, and always past the one it replaces, which is how
/// a change checked against the endpoint as it was read finds whether it has moved.
fn after(read_at_ms: i64) -> i64 {
    crate::clock::now_ms().max(read_at_ms.saturating_add(1))
}

/// A change to an endpoint as the API answers it: 404 when it is gone, 409
/// `endpoint_changed` when another change came between reading and writing it.
fn edited(edited: Edited) -> Result<(), ApiError> {
    match edited {
        Edited::Edited => Ok(()),
        Edited::Missing => Err(not_found()),
        Edited::Stale => Err(error(
            StatusCode::CONFLICT,
            "endpoint_changed",
            Some("the endpoint changed while this request was checked; read it and retry".into()),
        )),
    }
}

/// A write-only setting kept from the stored endpoint, opened.
fn kept(
    api: &Api,
    endpoint: &ManagedEndpoint,
    sealed: &Option<Vec<u8>>,
    what: &str,
) -> Result<Option<Secret>, ApiError> {
    let opened = api
        .tenancy
        .master_key
        .open_set(&endpoint.id, what, sealed.as_deref());
    opened.map_err(|reason| {
        tracing::error!(endpoint = %endpoint.id, %reason, setting = what, "sealed setting does not open");
        error(StatusCode::INTERNAL_SERVER_ERROR, "secret_unreadable", None)
    })
}

fn upload_limit(tenancy: &TenancyConfig) -> usize {
    tenancy.quotas.max_plugin_bytes / 3 * 4 + 4 * 1024 * 1024
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewPlugin {
    /// The component, base64.
    wasm_base64: String,
    /// Vectors (docs/vectors.md) the plugin must pass before it is accepted.
    vectors: crate::vectors::UploadVectors,
}

fn plugin_shown(plugin: &TenantPlugin, contract: Option<&str>) -> serde_json::Value {
    serde_json::json!({
        "digest": format!("{UPLOADED}{}", plugin.digest),
        "name": plugin.name,
        "version": plugin.version,
        "size": plugin.size,
        "contract": contract,
        "created_at_ms": plugin.created_at_ms,
    })
}

/// Upload a plugin: a component of a supported contract, whose `info()` answers within
/// the limits and which passes every vector sent with it. Content-addressed: an
/// endpoint names it `sha256:<hex>`, in this tenant's namespace only.
async fn upload_plugin(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
    Body(body): Body<NewPlugin>,
) -> Answer {
    let tenant = tenant_of(&caller)?.to_string();
    let invalid =
        |code: &'static str, reason: String| error(StatusCode::BAD_REQUEST, code, Some(reason));
    let wasm = base64::engine::general_purpose::STANDARD
        .decode(body.wasm_base64.as_bytes())
        .map_err(|e| invalid("invalid_request", format!("wasm_base64: {e}")))?;
    let quotas = api.tenancy.quotas;
    if wasm.len() > quotas.max_plugin_bytes {
        let reason = format!(
            "{} bytes; the limit is {}",
            wasm.len(),
            quotas.max_plugin_bytes
        );
        return Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "plugin_too_large",
            Some(reason),
        ));
    }
    // Checked again as it is stored; here, so that an upload past the quota is not
    // compiled first. Bytes the tenant has already are not one more.
    let existing = api.app.store.tenant_plugins(&tenant).await?;
    let sha256: [u8; 32] = Sha256::digest(&wasm).into();
    let digest = hex::encode(sha256);
    let known = existing.iter().any(|p| p.digest == digest);
    if !known && existing.len() >= quotas.max_plugins as usize {
        return Err(over_quota(quotas.max_plugins, "plugins"));
    }
    if body.vectors.is_empty() {
        return Err(invalid("invalid_request", "vectors: at least one".into()));
    }
    let _one_at_a_time = plugin_work().await?;
    // Compiling is CPU work of seconds: off the async workers.
    let (origin, limits, bytes) = (
        crate::plugins::Origin::Upload(tenant.clone()),
        api.app.plugin_limits,
        wasm.clone(),
    );
    let load = move || Plugin::load_with_digest(&bytes, sha256, origin, limits);
    let plugin = tokio::task::spawn_blocking(load)
        .await
        .map_err(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "plugin_failed", None))?
        .map_err(|e| invalid("invalid_plugin", e.to_string()))?;
    let plugin = Arc::new(plugin);
    let (judging, vectors) = (plugin.clone(), body.vectors);
    let judged = api
        .app
        .plugin_threads
        .run(move || crate::vectors::judge_with(&judging, &vectors))
        .await
        .map_err(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "plugin_failed", None))?
        .map_err(|reason| invalid("invalid_request", reason))?;
    let failed: Vec<String> = judged
        .iter()
        .filter(|j| !j.pass)
        .map(|j| format!("{}: {}", j.name, j.differences.join("; ")))
        .collect();
    if !failed.is_empty() {
        return Err(invalid("vectors_failed", failed.join(" | ")));
    }
    let row = TenantPlugin {
        tenant: tenant.clone(),
        digest: plugin.digest.clone(),
        name: plugin.info.name.clone(),
        version: plugin.info.version.clone(),
        size: i64::try_from(wasm.len()).unwrap_or(i64::MAX),
        created_at_ms: crate::clock::now_ms(),
    };
    // What it says of itself is kept beside it: endpoints naming it are served
    // without loading it, until a request needs its code.
    let described = serde_json::to_string(&plugin.described()).unwrap_or_default();
    let added = api
        .app
        .store
        .add_plugin(&row, &wasm, &described, quotas.max_plugins);
    let added = added.await?;
    // Accepted: its compiled code goes to the disk cache now (judging left it out).
    if matches!(added, Added::Added | Added::Exists) {
        let caching = plugin.clone();
        let _ = tokio::task::spawn_blocking(move || caching.cache_code()).await;
    }
    match added {
        Added::Added => created(plugin_shown(&row, Some(plugin.contract()))),
        // Shown as it was kept, when it was first uploaded.
        Added::Exists => {
            let kept = api.app.store.tenant_plugins(&tenant).await?;
            let kept = kept.iter().find(|p| p.digest == row.digest).unwrap_or(&row);
            ok(plugin_shown(kept, Some(plugin.contract())))
        }
        Added::OverQuota => Err(over_quota(quotas.max_plugins, "plugins")),
    }
}

async fn list_plugins(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
) -> Answer {
    let tenant = tenant_of(&caller)?;
    let plugins = api.app.store.tenant_plugins(tenant).await?;
    let shown: Vec<_> = plugins.iter().map(|p| plugin_shown(p, None)).collect();
    ok(serde_json::json!(shown))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShadowRequest {
    /// The candidate: a plugin name or one of the tenant's `sha256:<hex>`.
    plugin: String,
    /// How many of the last stored requests (default 50, at most 1,000).
    #[serde(default)]
    last: Option<u32>,
}

/// Shadow replay (see `shadow`): the endpoint's last stored requests judged by its
/// current plugin and by a candidate, before switching to it.
async fn shadow(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
    Path(id): Path<String>,
    Body(body): Body<ShadowRequest>,
) -> Answer {
    let endpoint = owned(&api, &caller, &id).await?;
    let last = body.last.unwrap_or(50);
    if last > crate::shadow::MAX_LAST {
        let reason = format!("last: {last}; at most {}", crate::shadow::MAX_LAST);
        return Err(error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            Some(reason),
        ));
    }
    let _one_at_a_time = plugin_work().await?;
    let current = api.app.endpoints.get(&id).ok_or_else(|| {
        let reason = "the endpoint is not being served (see the server's log)".to_string();
        error(StatusCode::CONFLICT, "endpoint_not_served", Some(reason))
    })?;
    let candidate = candidate(&api.app, &api.tenancy, &endpoint, &body.plugin).await?;
    let budget = Some(api.tenancy.shadow_budget);
    let report = crate::shadow::replay(&api.app, current, Arc::new(candidate), last, budget);
    let report = report.await?;
    ok(serde_json::json!(report))
}

/// Why [`candidate`] built no endpoint.
#[derive(Debug, thiserror::Error)]
pub enum CandidateError {
    /// The endpoint does not build with the candidate: the sender's to mend.
    #[error("{0}")]
    Invalid(String),
    /// The store did not answer: nothing is known of the candidate yet.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No plugin thread built it (one panicked, or they have stopped).
    #[error(transparent)]
    Thread(#[from] crate::plugins::threads::ThreadFailure),
}

impl From<CandidateError> for ApiError {
    fn from(e: CandidateError) -> Self {
        match e {
            CandidateError::Invalid(reason) => {
                error(StatusCode::BAD_REQUEST, "invalid_endpoint", Some(reason))
            }
            CandidateError::Store(e) => e.into(),
            CandidateError::Thread(_) => {
                error(StatusCode::INTERNAL_SERVER_ERROR, "plugin_failed", None)
            }
        }
    }
}

/// A tenant endpoint as it would be served with `plugin` instead of its own.
pub async fn candidate(
    app: &Arc<App>,
    tenancy: &TenancyConfig,
    endpoint: &ManagedEndpoint,
    plugin: &str,
) -> Result<Endpoint, CandidateError> {
    let mut spec: EndpointSpec = serde_json::from_str(&endpoint.spec)
        .map_err(|e| CandidateError::Invalid(format!("the stored endpoint: {e}")))?;
    spec.plugin = plugin.to_string();
    // The candidate's plugin may not be known to this process yet.
    know_uploaded(app, &endpoint.tenant, plugin).await?;
    let secrets = app
        .store
        .secrets(Some(&endpoint.tenant), Some(&endpoint.id))
        .await?;
    let opened = tenancy
        .master_key
        .open_active(&secrets)
        .map_err(CandidateError::Invalid)?;
    // Shadow replay stores and delivers nothing, and replays no handshake.
    let config = spec.config(
        &endpoint.id,
        opened,
        WriteOnly::default(),
        tenancy.destinations,
    );
    let (on_thread, tenant) = (app.clone(), endpoint.tenant.clone());
    app.plugin_threads
        .run(move || build(&on_thread, &tenant, config, None).map(|(built, _)| built))
        .await?
        .map_err(CandidateError::Invalid)
}

/// Pause or resume a tenant endpoint's delivery (events keep being accepted).
async fn pause(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
    Path(id): Path<String>,
) -> Answer {
    set_paused(&api, &caller, &id, true).await
}

async fn resume(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
    Path(id): Path<String>,
) -> Answer {
    set_paused(&api, &caller, &id, false).await
}

async fn set_paused(api: &Api, caller: &Caller, id: &str, paused: bool) -> Answer {
    let tenant = tenant_of(caller)?;
    let now = crate::clock::now_ms();
    match api
        .app
        .store
        .tenant_set_paused(tenant, id, paused, now)
        .await?
    {
        Paused::Done => ok(serde_json::json!({ "id": id, "paused": paused })),
        Paused::Missing => Err(not_found()),
        Paused::HeldByOperator => Err(error(
            StatusCode::CONFLICT,
            "paused_by_operator",
            Some("an operator paused this endpoint; only an operator resumes it".into()),
        )),
    }
}

async fn delete_endpoint(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
    Path(id): Path<String>,
) -> Answer {
    let endpoint = owned(&api, &caller, &id).await?;
    if !api.app.store.delete_endpoint(&endpoint.tenant, &id).await? {
        return Err(not_found());
    }
    reload(&api).await;
    ok(serde_json::json!({ "id": id, "deleted": true }))
}

/// A secret as the API shows it: never its value.
fn secret_shown(secret: &SealedSecret, current: bool) -> serde_json::Value {
    serde_json::json!({
        "id": secret.id,
        "fingerprint": secret.fingerprint,
        "created_at_ms": secret.created_at_ms,
        "retired_at_ms": secret.retired_at_ms,
        "last_matched_at_ms": secret.last_matched_at_ms,
        "current": current,
    })
}

async fn list_secrets(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
    Path(id): Path<String>,
) -> Answer {
    let endpoint = owned(&api, &caller, &id).await?;
    let secrets = api
        .app
        .store
        .secrets(Some(&endpoint.tenant), Some(&id))
        .await?;
    let current = secrets
        .iter()
        .find(|s| s.retired_at_ms.is_none())
        .map(|s| &s.id);
    let shown: Vec<_> = secrets
        .iter()
        .map(|s| secret_shown(s, Some(&s.id) == current))
        .collect();
    ok(serde_json::json!(shown))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewSecret {
    value: String,
}

/// Active secrets one tenant endpoint may have.
const MAX_ACTIVE_SECRETS: usize = 10;

/// Add a secret: it becomes current; the others stay active until retired.
async fn add_secret(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
    Path(id): Path<String>,
    Body(body): Body<NewSecret>,
) -> Answer {
    let endpoint = owned(&api, &caller, &id).await?;
    // Every request is checked against every active secret, and every process opens
    // them all at each reload: a bound, counted as read with the endpoint (a secret
    // added meanwhile moves the endpoint, and this one is then not written).
    let secrets = api
        .app
        .store
        .secrets(Some(&endpoint.tenant), Some(&id))
        .await?;
    if secrets.iter().filter(|s| s.retired_at_ms.is_none()).count() >= MAX_ACTIVE_SECRETS {
        let reason = format!("at most {MAX_ACTIVE_SECRETS} active secrets; retire one first");
        return Err(error(
            StatusCode::CONFLICT,
            "too_many_secrets",
            Some(reason),
        ));
    }
    let secret = Secret::new(body.value);
    let spec: EndpointSpec = serde_json::from_str(&endpoint.spec)
        .map_err(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "spec_unreadable", None))?;
    // The new secret must decode with the plugin's key format (the destination is
    // not what is checked here).
    let spec = EndpointSpec {
        destination: None,
        ..spec
    };
    validate(&api, &spec, &id, vec![secret.clone()], WriteOnly::default()).await?;
    let added = sealed(&api, &id, &secret);
    let read_at_ms = endpoint.updated_at_ms;
    let store = &api.app.store;
    edited(
        store
            .add_secret(&endpoint.tenant, &added, read_at_ms, after(read_at_ms))
            .await?,
    )?;
    reload(&api).await;
    created(secret_shown(&added, true))
}

async fn retire_secret(
    State(api): State<Api>,
    axum::Extension(caller): axum::Extension<Caller>,
    Path((id, secret)): Path<(String, String)>,
) -> Answer {
    let endpoint = owned(&api, &caller, &id).await?;
    let now = crate::clock::now_ms();
    match api
        .app
        .store
        .retire_secret(&endpoint.tenant, &id, &secret, now)
        .await?
    {
        Retired::Retired => {
            reload(&api).await;
            ok(serde_json::json!({ "id": secret, "retired_at_ms": now }))
        }
        Retired::Unknown => Err(not_found()),
        Retired::LastActive => Err(error(
            StatusCode::CONFLICT,
            "last_active_secret",
            Some("add a new secret before retiring the last active one".into()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> MasterKey {
        MasterKey::decode(&base64::engine::general_purpose::STANDARD.encode([7u8; 32]))
            .expect("32 bytes")
    }

    #[test]
    fn a_sealed_secret_opens_only_for_its_endpoint_and_id() {
        let secret = Secret::new("whsec_plain");
        let sealed = key().seal("a.shop", "sec_1", &secret);
        assert!(!sealed.windows(11).any(|w| w == b"whsec_plain"));
        assert_eq!(key().open("a.shop", "sec_1", &sealed), Ok(secret.clone()));
        assert!(key().open("b.shop", "sec_1", &sealed).is_err());
        assert!(key().open("a.shop", "sec_2", &sealed).is_err());
        let other = MasterKey::decode(&base64::engine::general_purpose::STANDARD.encode([8u8; 32]))
            .expect("key");
        assert!(other.open("a.shop", "sec_1", &sealed).is_err());
        // Two seals of one secret differ (fresh nonces); fingerprints agree.
        assert_ne!(sealed, key().seal("a.shop", "sec_1", &secret));
        assert_eq!(key().fingerprint(&secret), key().fingerprint(&secret));
        assert_ne!(other.fingerprint(&secret), key().fingerprint(&secret));
    }

    #[test]
    fn a_master_key_is_32_bytes_of_base64() {
        assert!(MasterKey::decode("not base64!").is_err());
        let short = base64::engine::general_purpose::STANDARD.encode([1u8; 16]);
        assert_eq!(
            MasterKey::decode(&short).map(drop),
            Err("16 bytes; a master key is 32".to_string())
        );
        let url_safe = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([0xfbu8; 32]);
        assert!(MasterKey::decode(&url_safe).is_ok());
    }
}
