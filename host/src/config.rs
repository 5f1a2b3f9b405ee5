//! The TOML configuration file: parsing, defaults, and validation that names the file,
//! the key and the reason. Secrets are resolved here (`env:NAME`, `file:PATH`, or a
//! literal with a warning) and never printed.

use crate::plugins::PluginLimits;
use crate::verify::Secret;
use crate::worker::CaFile;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default body cap: larger than any provider's documented payload limit.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Default budget for request bodies held in memory at once, across all requests:
/// 24 concurrent bodies at the default cap (each costs a few times its size on its way
/// to disk), a bounded share of a small server's memory. Past it, requests wait before reading (TCP slows the senders); none is
/// refused. Raised to `max_body_bytes` when only that is raised past it.
pub const DEFAULT_MAX_BODIES_IN_FLIGHT_BYTES: usize = 24 * 1024 * 1024;
/// Default time a sender has for each request head, and for each body once it has room
/// in the budget: 1 MiB in 30 s is 35 KB/s, far below any provider's sending rate, and
/// a stalled sender holds its connection and its share of the body budget no longer.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections served at once, on each listener.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default SQLite file name, created beside the configuration file.
pub const DEFAULT_STORE_FILE: &str = "hookhost.db";
/// PostgreSQL connections per process: the receipts' batches hold one, delivery and
/// the admin API share the rest; more than the database's cores buys nothing.
pub const DEFAULT_PG_MAX_CONNECTIONS: u32 = 16;
/// Fewest PostgreSQL connections a process may be given: the receipts' batches hold one.
pub const MIN_PG_CONNECTIONS: u32 = 2;
/// How long a request waits for a PostgreSQL connection (connecting included) before
/// it answers 503: below the 2 s within which a sender must hear back when the
/// database is unreachable, with room for the request's own work.
pub const DEFAULT_PG_CONNECT_TIMEOUT_MS: u64 = 1_500;
/// Longest one PostgreSQL statement may run (a lock held by a stuck process, a lost
/// network) before it fails and the request answers 503.
pub const DEFAULT_PG_STATEMENT_TIMEOUT_MS: u64 = 5_000;
/// Delivered receipts are kept this long: longer than any provider's retry window
/// (Stripe retries for 3 days, Shopify 48 h, GitHub not at all), so a late retry of a
/// delivered event is still recognised as a duplicate.
pub const DEFAULT_DELIVERED_RETENTION_DAYS: u64 = 30;
/// The shortest delivered-receipt retention accepted: past every provider's retries.
pub const MIN_DELIVERED_RETENTION_DAYS: u64 = 7;

#[derive(Debug, Clone)]
pub struct Config {
    /// Where the file was read from (for messages); relative paths resolve beside it.
    pub path: PathBuf,
    pub listen: SocketAddr,
    /// Public base URL senders address (`https://hooks.example.com`), no trailing slash.
    pub public_url: String,
    pub store: StoreConfig,
    pub plugins_dir: Option<PathBuf>,
    pub limits: Limits,
    pub endpoints: Vec<EndpointConfig>,
    pub delivery: DeliveryConfig,
    /// How long settled receipts are kept before the purge job deletes them.
    pub retention: RetentionConfig,
    /// What is kept of requests refused after their body was read.
    pub forensics: ForensicsConfig,
    /// Tenants managed at runtime through the admin listener (`[tenancy]`).
    pub tenancy: Option<TenancyConfig>,
    /// The admin API's address and bearer token; no token, no admin API.
    pub admin: Option<(SocketAddr, Secret)>,
    /// Keys whose secrets were given literally, for a warning at start.
    pub literal_secrets: Vec<String>,
    /// Secrets that could not be read, each as its error: only a configuration loaded
    /// with [`Secrets::Deferred`] has any, and [`crate::build`] refuses it.
    pub unresolved: Vec<String>,
}

/// What [`Config::parse_with`] does with an `env:` or `file:` secret it cannot read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secrets {
    /// Refuse the configuration: the receiver needs every secret.
    Required,
    /// Leave the secret out and note its error in [`Config::unresolved`]: an
    /// operator's command that only reads and changes the store (listing events,
    /// replaying the dead letters, pausing an endpoint) needs none of the providers'
    /// secrets, and the shell it runs in may not have them. What an unread secret
    /// belongs to is left out with it: an endpoint's destination or reconciliation, the
    /// admin listener, and `[tenancy]` when its operator token or master key is unread.
    Deferred,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreConfig {
    Sqlite(PathBuf),
    /// Several hookhost processes may share one database.
    Postgres(PgConfig),
}

/// A PostgreSQL store: `store = "postgres://user@host/db"`, or a `[store]` table with
/// `url` and the pool settings.
#[derive(Clone, PartialEq, Eq)]
pub struct PgConfig {
    pub url: String,
    /// Connections this process opens at most.
    pub max_connections: u32,
    /// Longest wait for a connection (connecting included); ingest answers 503 after it.
    pub connect_timeout: Duration,
    /// Longest one statement may run.
    pub statement_timeout: Duration,
}

impl std::fmt::Debug for PgConfig {
    /// The URL may carry a password: show it without.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgConfig")
            .field("url", &redact_password(&self.url))
            .field("max_connections", &self.max_connections)
            .field("connect_timeout", &self.connect_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .finish()
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:[redacted]@host/db`, and a
/// password given as a parameter (`?password=secret`, `sslpassword=`), which the
/// driver reads too, likewise.
pub fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    // The user information ends at the last `@`: a password may hold a `/`, a `?`
    // or an `@` left unescaped, and is hidden whatever it holds.
    let (userinfo, location) = match rest.rsplit_once('@') {
        Some((userinfo, location)) => (Some(userinfo), location),
        None => (None, rest),
    };
    let (location, query) = match location.split_once('?') {
        Some((location, query)) => (location, Some(query)),
        None => (location, None),
    };
    let mut shown = match userinfo {
        Some(userinfo) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:[redacted]@{location}"),
            None => format!("{scheme}://{userinfo}@{location}"),
        },
        None => format!("{scheme}://{location}"),
    };
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if name.to_ascii_lowercase().contains("password") => {
                    format!("{name}=[redacted]")
                }
                _ => pair.to_string(),
            })
            .collect();
        shown = format!("{shown}?{}", pairs.join("&"));
    }
    shown
}

/// `[tenancy]`: tenants, their endpoints and secrets, managed through the admin
/// listener's `/v1` API and stored in the database.
#[derive(Debug, Clone)]
pub struct TenancyConfig {
    /// Creates tenants and issues their tokens.
    pub operator_token: Secret,
    /// Seals endpoint secrets at rest: 32 bytes, base64 (`env:` or `file:`).
    pub master_key: crate::tenancy::MasterKey,
    /// A tenant's quotas unless it was created with its own.
    pub quotas: Quotas,
    /// Uploaded plugins' compiled code each process keeps loaded at most, bytes
    /// (default 256 MiB); past it the least recently used is dropped, and loaded
    /// again (mapped from the disk cache) when a request needs it.
    pub resident_plugin_bytes: usize,
    /// Which addresses tenants' destinations may connect to: public ones, unless
    /// `private_destinations = true` (all of them are the operator's own).
    pub destinations: crate::worker::Reach,
    /// How long one shadow replay through the API may judge (default 10 s): tenants'
    /// plugin work runs one at a time, so a slow candidate must not hold the others'
    /// for minutes. Past it the report holds the requests judged so far.
    pub shadow_budget: Duration,
}

/// Default of [`TenancyConfig::shadow_budget`], and the longest allowed.
pub const DEFAULT_SHADOW_SECONDS: u64 = 10;
const MAX_SHADOW_SECONDS: u64 = 600;

/// Default of [`TenancyConfig::resident_plugin_bytes`].
pub const DEFAULT_RESIDENT_PLUGIN_BYTES: usize = 256 * 1024 * 1024;

/// What one tenant may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Requests per second at ingest, across its endpoints, in each process; past it
    /// 429 with `Retry-After`.
    pub requests_per_second: u32,
    /// Endpoints it may have.
    pub max_endpoints: u32,
    /// Plugins it may upload, and the largest.
    pub max_plugins: u32,
    pub max_plugin_bytes: usize,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            requests_per_second: 100,
            max_endpoints: 20,
            max_plugins: 20,
            max_plugin_bytes: 8 * 1024 * 1024,
        }
    }
}

/// Rejected requests kept per endpoint, newest first, unless `[forensics]` says.
pub const DEFAULT_REJECTED_PER_ENDPOINT: u32 = 1_000;
/// Days a rejected request is kept, unless `[forensics]` says.
pub const DEFAULT_REJECTED_DAYS: u64 = 7;

/// `[forensics]`: what is kept of requests refused after their body was read.
/// Verified requests that failed with a 5xx are always kept in full, until
/// re-ingested; these settings bound the rejected ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForensicsConfig {
    /// The newest this many rejected requests per endpoint are kept.
    pub rejected_per_endpoint: u32,
    /// Rejected requests (and re-ingested failed ones) are deleted after this.
    pub rejected_for: Duration,
    /// Keep a rejected request's body (`full`, so it can be re-verified) or only its
    /// length and SHA-256 (`digest`).
    pub rejected_body: BodyKept,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyKept {
    Full,
    Digest,
}

impl Default for ForensicsConfig {
    fn default() -> Self {
        Self {
            rejected_per_endpoint: DEFAULT_REJECTED_PER_ENDPOINT,
            rejected_for: days(DEFAULT_REJECTED_DAYS),
            rejected_body: BodyKept::Full,
        }
    }
}

/// How long settled receipts are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionConfig {
    /// Delivered receipts and their attempts, counted from delivery; ignored and
    /// stale receipts, counted from their arrival.
    pub delivered: Duration,
    /// Dead letters and quarantined receipts, counted from their last attempt;
    /// discarded receipts, from their discarding; conflicting duplicates, from
    /// receipt. `None` keeps them until an operator acts.
    pub dead: Option<Duration>,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            delivered: days(DEFAULT_DELIVERED_RETENTION_DAYS),
            dead: None,
        }
    }
}

fn days(n: u64) -> Duration {
    Duration::from_secs(n.saturating_mul(86_400))
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    /// Bytes of request bodies held at once, across all requests; at least
    /// `max_body_bytes`.
    pub max_bodies_in_flight_bytes: usize,
    /// Each request head, and each body from when it has room in the budget, must
    /// arrive within this; 408 past it.
    pub read_timeout: Duration,
    /// Connections open at once, on each listener; past it, new ones wait to be
    /// accepted.
    pub max_connections: usize,
    pub plugin: PluginLimits,
}

#[derive(Debug, Clone, Default)]
pub struct EndpointConfig {
    pub id: String,
    pub plugin: String,
    /// Current first.
    pub secrets: Vec<Secret>,
    /// Override of the plugin's default timestamp window, seconds.
    pub tolerance: Option<u32>,
    /// The token an unsigned handshake must present (Meta's `hub.verify_token`).
    pub handshake_token: Option<Secret>,
    /// The plugin configuration table, as JSON.
    pub plugin_config: serde_json::Value,
    /// Where accepted events go; none keeps them pending in the inbox.
    pub destination: Option<DestinationConfig>,
    /// Delay before each delivery attempt, the first 0 (at once); after the last, the
    /// event is a dead letter.
    pub retry_schedule: Vec<Duration>,
    /// Pulling from the provider's API (`[endpoint.reconcile]`), when configured.
    pub reconcile: Option<ReconcileConfig>,
}

/// `[endpoint.reconcile]`: how hookhost reaches the provider's API to find events that
/// never arrived (see `reconcile`).
#[derive(Debug, Clone)]
pub struct ReconcileConfig {
    /// The API credential; sent only to the plugin's declared hosts or `api_base`.
    pub credential: Secret,
    pub auth: ApiAuth,
    /// Overrides the plugin's API base URL (a local fake provider, a proxy).
    pub api_base: Option<String>,
    /// How far back a scheduled run looks.
    pub lookback: Duration,
    /// Run every this long in the background; none: only when asked (CLI, admin API).
    pub every: Option<Duration>,
    /// Requests per second to the provider's API, at most.
    pub requests_per_second: u32,
}

/// How the credential authenticates a request to the provider's API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiAuth {
    /// `Authorization: Bearer <credential>`.
    Bearer,
    /// `Authorization: Basic base64(<credential>)`; the credential is `user:password`
    /// (or a key alone, for APIs that take it as the user).
    Basic,
    /// The credential as the value of this header.
    Header(String),
}

/// The default retry schedule: immediately, 30 s, 2 min, 10 min, 1 h, 6 h, 24 h.
pub const DEFAULT_RETRY_SCHEDULE_SECONDS: [u64; 7] = [0, 30, 120, 600, 3600, 21_600, 86_400];
/// The longest one step of a retry schedule may be: 30 days.
pub const MAX_RETRY_DELAY_SECONDS: u64 = 30 * 86_400;
/// The most attempts a retry schedule may hold.
pub const MAX_RETRY_ATTEMPTS: usize = 100;

/// A retry schedule as given (in the file or the tenant API): at least one attempt,
/// at most [`MAX_RETRY_ATTEMPTS`], the first at once (step 0 is 0: an accepted event
/// is delivered as soon as it is stored), no step over [`MAX_RETRY_DELAY_SECONDS`].
/// The reason names the offending step as `[i]`.
pub fn check_retry_schedule(schedule: &[u64]) -> Result<(), String> {
    let Some(first) = schedule.first() else {
        return Err("at least one attempt".into());
    };
    if *first != 0 {
        return Err(format!(
            "[0] is {first} s; the first attempt is made as soon as the event is stored, \
             so the first step is 0"
        ));
    }
    if schedule.len() > MAX_RETRY_ATTEMPTS {
        return Err(format!(
            "{} attempts; at most {MAX_RETRY_ATTEMPTS}",
            schedule.len()
        ));
    }
    match schedule
        .iter()
        .enumerate()
        .find(|(_, s)| **s > MAX_RETRY_DELAY_SECONDS)
    {
        Some((i, s)) => Err(format!(
            "[{i}] is {s} s; a step is at most {MAX_RETRY_DELAY_SECONDS} s (30 days)"
        )),
        None => Ok(()),
    }
}

/// An HTTP destination: the user's own service.
#[derive(Debug, Clone)]
pub struct DestinationConfig {
    /// `http://host:port/path` or `https://host:port/path`.
    pub url: String,
    /// For `https://`: certificates trusted beside the built-in roots (an internal CA).
    pub ca: Option<CaFile>,
    /// Signs deliveries (Standard Webhooks, `whsec_` + base64 key).
    pub secret: Secret,
    pub connect_timeout: Duration,
    pub timeout: Duration,
    /// Which addresses it may connect to: any, for the file's endpoints.
    pub reach: crate::worker::Reach,
}

/// The worker pool.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryConfig {
    /// Deliveries in flight at once.
    pub workers: usize,
    /// How long a leased event belongs to its worker; after that another may take it.
    pub lease: Duration,
    /// How often idle workers look for due events.
    pub poll: Duration,
    /// How long shutdown waits for deliveries in flight.
    pub grace: Duration,
}

impl DeliveryConfig {
    /// How long one attempt may take: three quarters of the lease, so that its answer
    /// is recorded while the lease still holds.
    pub fn attempt_limit(&self) -> Duration {
        self.lease - self.lease / 4
    }

    /// A destination's timeout should end before its attempts are cut (a tenant's
    /// must; the operator, who sets both, is warned).
    pub fn check_timeout(&self, timeout: Duration) -> Result<(), String> {
        let limit = self.attempt_limit();
        if timeout < limit {
            return Ok(());
        }
        Err(format!(
            "{} ms is not under {} ms: attempts are cut at three quarters of \
             delivery.lease_seconds ({} s)",
            timeout.as_millis(),
            limit.as_millis(),
            self.lease.as_secs()
        ))
    }
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            workers: 32,
            lease: Duration::from_secs(60),
            poll: Duration::from_millis(200),
            grace: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: {key}: {reason}{}", line.map(|n| format!(" (line {n})")).unwrap_or_default())]
    Invalid {
        path: String,
        key: String,
        reason: String,
        /// Where the file spells out what `key` names; none for a default.
        line: Option<usize>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    public_url: Option<String>,
    store: Option<RawStore>,
    plugins_dir: Option<PathBuf>,
    admin_listen: Option<String>,
    admin_token: Option<String>,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    endpoint: Vec<RawEndpoint>,
    #[serde(default)]
    delivery: RawDelivery,
    #[serde(default)]
    retention: RawRetention,
    #[serde(default)]
    forensics: RawForensics,
    tenancy: Option<RawTenancy>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenancy {
    operator_token: String,
    master_key: String,
    requests_per_second: Option<u32>,
    max_endpoints: Option<u32>,
    max_plugins: Option<u32>,
    max_plugin_bytes: Option<usize>,
    resident_plugin_bytes: Option<usize>,
    private_destinations: Option<bool>,
    shadow_seconds: Option<u64>,
}

/// The longest reconciliation period and look-back: a year.
const MAX_RECONCILE_SECONDS: u64 = 366 * 86_400;

/// Check `[endpoint.reconcile]`; `invalid` names a key of it in an error.
fn reconcile_config(
    raw: RawReconcile,
    credential: Secret,
    invalid: &dyn Fn(&str, String) -> ConfigError,
) -> Result<ReconcileConfig, ConfigError> {
    let auth = match raw.auth.as_deref() {
        None | Some("bearer") => ApiAuth::Bearer,
        Some("basic") => ApiAuth::Basic,
        Some(other) => match other.strip_prefix("header:") {
            Some(name)
                if !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
            {
                ApiAuth::Header(name.to_ascii_lowercase())
            }
            _ => {
                return Err(invalid(
                    "auth",
                    format!("{other:?}: expected \"bearer\", \"basic\" or \"header:NAME\""),
                ));
            }
        },
    };
    if let Some(base) = &raw.api_base {
        let has_host = base
            .parse::<hyper::Uri>()
            .is_ok_and(|uri| uri.host().is_some_and(|h| !h.is_empty()));
        if !(base.starts_with("https://") || base.starts_with("http://")) || !has_host {
            return Err(invalid(
                "api_base",
                format!("{base:?} must be an https:// or http:// URL"),
            ));
        }
    }
    let requests_per_second = raw.requests_per_second.unwrap_or(5);
    if requests_per_second == 0 {
        return Err(invalid(
            "requests_per_second",
            "must be greater than 0".into(),
        ));
    }
    let within_a_year = |key: &str, seconds: u64| {
        if (1..=MAX_RECONCILE_SECONDS).contains(&seconds) {
            Ok(seconds)
        } else {
            let reason = format!("must be from 1 to {MAX_RECONCILE_SECONDS} (a year)");
            Err(invalid(key, reason))
        }
    };
    let lookback_seconds =
        within_a_year("lookback_seconds", raw.lookback_seconds.unwrap_or(86_400))?;
    if let Some(every) = raw.every_seconds {
        within_a_year("every_seconds", every)?;
        if every > lookback_seconds {
            return Err(invalid(
                "every_seconds",
                format!(
                    "{every} is longer than lookback_seconds ({lookback_seconds}): \
                     what arrives between two runs would never be looked at"
                ),
            ));
        }
    }
    Ok(ReconcileConfig {
        credential,
        auth,
        api_base: raw.api_base.map(|b| b.trim_end_matches('/').to_string()),
        lookback: Duration::from_secs(lookback_seconds),
        every: raw.every_seconds.map(Duration::from_secs),
        requests_per_second,
    })
}

/// The key under `[endpoint.destination]` (`.url`, `.secret`, …; empty when none) that
/// a destination's refusal is about, and the refusal without the name it starts with
/// (`destination url: …`).
fn destination_field<'r>(refused: &'r str, d: &DestinationConfig) -> (String, &'r str) {
    for field in ["url", "secret", "ca_file"] {
        if let Some(reason) = refused.strip_prefix(&format!("destination {field}: ")) {
            return (format!(".{field}"), reason);
        }
    }
    match refused.strip_prefix("destination: ") {
        // The one refusal of the destination as a whole: a timeout of 0.
        Some(reason) if d.connect_timeout.is_zero() => (".connect_timeout_ms".into(), reason),
        Some(reason) => (".timeout_ms".into(), reason),
        None => (String::new(), refused),
    }
}

/// The line (1-based) of `text` that holds what a validation error's key names: the
/// key itself (`limits.read_timeout_seconds`, `endpoint[2] (id "x").destination.url`),
/// an element of an array (`secrets[1]`), or as much of the path as the file spells
/// out. None when the file does not have it (a default was refused).
fn line_of(text: &str, key: &str) -> Option<usize> {
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    // An endpoint's id, shown in its key as ` (id "x")`, is not part of the path.
    let mut path = key.to_string();
    while let Some(open) = path.find(" (id ") {
        let close = open + path[open..].find("\")")? + 2;
        path.replace_range(open..close, "");
    }
    let mut table: &dyn toml_edit::TableLike = doc.as_table();
    let mut at = None;
    for segment in path.split('.') {
        let (name, index) = match segment.split_once('[') {
            Some((name, rest)) => (name, rest.strip_suffix(']')?.parse::<usize>().ok()),
            None => (segment, None),
        };
        let Some((found, item)) = table.get_key_value(name) else {
            break;
        };
        at = found.span().map(|s| s.start).or(at);
        match (item, index) {
            (toml_edit::Item::ArrayOfTables(tables), Some(i)) => {
                let Some(element) = tables.get(i) else { break };
                at = element.span().map(|s| s.start).or(at);
                table = element;
            }
            (toml_edit::Item::Value(toml_edit::Value::Array(values)), Some(i)) => {
                at = values.get(i).and_then(|v| v.span()).map(|s| s.start).or(at);
                break;
            }
            (item, None) => match item.as_table_like() {
                Some(inner) => table = inner,
                None => break,
            },
            _ => break,
        }
    }
    Some(text.get(..at?)?.matches('\n').count() + 1)
}

/// The line of the file at `path` that holds what an error building its endpoint
/// `index` names (`endpoint "id": secrets[1]: …`, `… config.signature.encoding: …`), or
/// that starts the endpoint when the error names no key of it (an unknown plugin).
/// Checks that need the plugin run after the file is read, so they find it again.
pub(crate) fn endpoint_line(path: &Path, index: usize, id: &str, error: &str) -> Option<usize> {
    let text = std::fs::read_to_string(path).ok()?;
    let key = error
        .strip_prefix(&format!("endpoint {id:?}: "))
        .and_then(|rest| rest.split_once(": "))
        .map(|(key, _)| key)
        .filter(|key| {
            key.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.[]".contains(&b))
        })
        .unwrap_or_default();
    line_of(&text, &format!("endpoint[{index}].{key}"))
}

/// `store = "PATH or URL"`, or a `[store]` table.
enum RawStore {
    Location(String),
    Table(RawStoreTable),
}

/// By the value's kind, so that an error inside the table (a misspelt key, a wrong
/// type) is reported as it is, not as "did not match any variant".
impl<'de> Deserialize<'de> for RawStore {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Kind;
        impl<'de> serde::de::Visitor<'de> for Kind {
            type Value = RawStore;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a path or URL, or a [store] table")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<RawStore, E> {
                Ok(RawStore::Location(text.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<RawStore, A::Error> {
                let table = serde::de::value::MapAccessDeserializer::new(map);
                RawStoreTable::deserialize(table).map(RawStore::Table)
            }
        }
        deserializer.deserialize_any(Kind)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStoreTable {
    url: Option<String>,
    max_connections: Option<u32>,
    connect_timeout_ms: Option<u64>,
    statement_timeout_ms: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawForensics {
    rejected_per_endpoint: Option<u32>,
    rejected_days: Option<u64>,
    rejected_body: Option<BodyKept>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRetention {
    delivered_days: Option<u64>,
    dead_days: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDelivery {
    workers: Option<usize>,
    lease_seconds: Option<u64>,
    poll_ms: Option<u64>,
    grace_seconds: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDestination {
    url: String,
    secret: String,
    ca_file: Option<PathBuf>,
    connect_timeout_ms: Option<u64>,
    timeout_ms: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_body_bytes: Option<usize>,
    max_bodies_in_flight_bytes: Option<usize>,
    read_timeout_seconds: Option<u64>,
    max_connections: Option<usize>,
    plugin_memory_bytes: Option<usize>,
    plugin_time_ms: Option<u64>,
    plugin_output_bytes: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEndpoint {
    id: String,
    plugin: String,
    secrets: Vec<String>,
    tolerance: Option<u32>,
    handshake_token: Option<String>,
    #[serde(default)]
    config: Option<toml::Table>,
    destination: Option<RawDestination>,
    retry_schedule_seconds: Option<Vec<u64>>,
    reconcile: Option<RawReconcile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReconcile {
    credential: String,
    auth: Option<String>,
    api_base: Option<String>,
    lookback_seconds: Option<u64>,
    every_seconds: Option<u64>,
    requests_per_second: Option<u32>,
}

impl Config {
    /// Read and validate a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_with(path, Secrets::Required)
    }

    /// [`Config::load`], with `secrets` saying what an unreadable secret does.
    pub fn load_with(path: &Path, secrets: Secrets) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse_with(path, &text, &|name| std::env::var(name).ok(), secrets)
    }

    /// Parse `text` as if read from `path`; `env` resolves `env:NAME` secrets.
    pub fn parse(
        path: &Path,
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        Config::parse_with(path, text, env, Secrets::Required)
    }

    /// [`Config::parse`], with `secrets` saying what an unreadable secret does.
    pub fn parse_with(
        path: &Path,
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
        secrets: Secrets,
    ) -> Result<Config, ConfigError> {
        let shown = path.display().to_string();
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: shown.clone(),
            message: e.to_string(),
        })?;
        let invalid = |key: &str, reason: String| ConfigError::Invalid {
            path: shown.clone(),
            key: key.to_string(),
            reason,
            line: line_of(text, key),
        };
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let beside = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                dir.join(p)
            }
        };

        let listen_text = raw.listen.unwrap_or_else(|| "127.0.0.1:8080".into());
        let listen: SocketAddr = listen_text.parse().map_err(|_| {
            invalid(
                "listen",
                format!("{listen_text:?} is not an address like 127.0.0.1:8080"),
            )
        })?;
        let public_url = raw
            .public_url
            .unwrap_or_else(|| format!("http://{listen}"))
            .trim_end_matches('/')
            .to_string();
        if !(public_url.starts_with("http://") || public_url.starts_with("https://")) {
            return Err(invalid(
                "public_url",
                format!("{public_url:?} must start with http:// or https://"),
            ));
        }
        let table = match raw.store {
            None => RawStoreTable {
                url: None,
                max_connections: None,
                connect_timeout_ms: None,
                statement_timeout_ms: None,
            },
            Some(RawStore::Location(location)) => RawStoreTable {
                url: Some(location),
                max_connections: None,
                connect_timeout_ms: None,
                statement_timeout_ms: None,
            },
            Some(RawStore::Table(table)) => table,
        };
        let store = match table.url.as_deref() {
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                let config = PgConfig {
                    url: url.to_string(),
                    max_connections: table.max_connections.unwrap_or(DEFAULT_PG_MAX_CONNECTIONS),
                    connect_timeout: Duration::from_millis(
                        table
                            .connect_timeout_ms
                            .unwrap_or(DEFAULT_PG_CONNECT_TIMEOUT_MS),
                    ),
                    statement_timeout: Duration::from_millis(
                        table
                            .statement_timeout_ms
                            .unwrap_or(DEFAULT_PG_STATEMENT_TIMEOUT_MS),
                    ),
                };
                if config.connect_timeout.is_zero() {
                    let reason = "must be greater than 0".into();
                    return Err(invalid("store.connect_timeout_ms", reason));
                }
                // Sent to PostgreSQL with every connection, which refuses a larger one
                // only when the pool connects (after the migrations have run).
                let longest = Duration::from_millis(i32::MAX as u64);
                if config.statement_timeout.is_zero() || config.statement_timeout > longest {
                    let reason = format!("must be from 1 to {} (PostgreSQL's limit)", i32::MAX);
                    return Err(invalid("store.statement_timeout_ms", reason));
                }
                if config.max_connections < MIN_PG_CONNECTIONS {
                    return Err(invalid(
                        "store.max_connections",
                        format!(
                            "must be at least {MIN_PG_CONNECTIONS}: the receipts' batches keep one connection between them, the rest serve delivery and the admin API"
                        ),
                    ));
                }
                StoreConfig::Postgres(config)
            }
            location => {
                if table.max_connections.is_some()
                    || table.connect_timeout_ms.is_some()
                    || table.statement_timeout_ms.is_some()
                {
                    return Err(invalid(
                        "store",
                        "max_connections, connect_timeout_ms and statement_timeout_ms apply only to a postgres:// url".into(),
                    ));
                }
                match location {
                    None => StoreConfig::Sqlite(dir.join(DEFAULT_STORE_FILE)),
                    Some(s) => {
                        // `sqlite://PATH`, or sqlx's `sqlite:PATH`. Another scheme is
                        // not a file to make: a store opened empty in its place would
                        // accept again every event it had already stored.
                        let file = s
                            .strip_prefix("sqlite://")
                            .or_else(|| s.strip_prefix("sqlite:"))
                            .unwrap_or(s);
                        if let Some((scheme, _)) = file.split_once(':').filter(|(scheme, _)| {
                            scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                                && scheme.chars().all(|c| {
                                    c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')
                                })
                        }) {
                            return Err(invalid(
                                "store",
                                format!(
                                    "{scheme}: is not a store hookhost keeps: write a SQLite \
                                     file's path (./{file} for a name holding a colon), \
                                     sqlite://PATH or postgres://…"
                                ),
                            ));
                        }
                        if file.is_empty() {
                            return Err(invalid("store", "empty path".into()));
                        }
                        StoreConfig::Sqlite(beside(Path::new(file)))
                    }
                }
            }
        };
        let retention = RetentionConfig {
            delivered: raw
                .retention
                .delivered_days
                .map_or(days(DEFAULT_DELIVERED_RETENTION_DAYS), days),
            dead: raw.retention.dead_days.map(days),
        };
        let defaults = ForensicsConfig::default();
        let forensics = ForensicsConfig {
            rejected_per_endpoint: raw
                .forensics
                .rejected_per_endpoint
                .unwrap_or(defaults.rejected_per_endpoint),
            rejected_for: raw
                .forensics
                .rejected_days
                .map_or(defaults.rejected_for, days),
            rejected_body: raw
                .forensics
                .rejected_body
                .unwrap_or(defaults.rejected_body),
        };
        if forensics.rejected_for.is_zero() {
            return Err(invalid(
                "forensics.rejected_days",
                "must be greater than 0".into(),
            ));
        }
        if retention.dead.is_some_and(|d| d.is_zero()) {
            return Err(invalid(
                "retention.dead_days",
                "must be greater than 0".into(),
            ));
        }
        // A delivered receipt is what recognises a provider's retry as a duplicate:
        // purged while the provider may still retry, a retry would be delivered again.
        if retention.delivered < days(MIN_DELIVERED_RETENTION_DAYS) {
            return Err(invalid(
                "retention.delivered_days",
                format!(
                    "must be at least {MIN_DELIVERED_RETENTION_DAYS}: longer than the longest \
                     provider retry window (Stripe and Paddle retry for up to 3 days), so a \
                     late retry is still recognised as a duplicate"
                ),
            ));
        }

        let defaults = PluginLimits::default();
        let plugin = PluginLimits {
            memory_bytes: raw
                .limits
                .plugin_memory_bytes
                .unwrap_or(defaults.memory_bytes),
            time: raw
                .limits
                .plugin_time_ms
                .map(Duration::from_millis)
                .unwrap_or(defaults.time),
            output_bytes: raw
                .limits
                .plugin_output_bytes
                .unwrap_or(defaults.output_bytes),
        };
        if plugin.memory_bytes < 1024 * 1024
            || plugin.memory_bytes > crate::plugins::MAX_PLUGIN_MEMORY
        {
            return Err(invalid(
                "limits.plugin_memory_bytes",
                "must be between 1 MiB and 256 MiB".into(),
            ));
        }
        if plugin.time.is_zero() || plugin.time > Duration::from_secs(10) {
            return Err(invalid(
                "limits.plugin_time_ms",
                "must be between 1 and 10000".into(),
            ));
        }
        if plugin.output_bytes < 1024 {
            return Err(invalid(
                "limits.plugin_output_bytes",
                "must be at least 1024".into(),
            ));
        }
        let max_body_bytes = raw.limits.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES);
        if max_body_bytes == 0 {
            return Err(invalid(
                "limits.max_body_bytes",
                "must be greater than 0".into(),
            ));
        }
        let max_bodies_in_flight_bytes = raw
            .limits
            .max_bodies_in_flight_bytes
            .unwrap_or(DEFAULT_MAX_BODIES_IN_FLIGHT_BYTES.max(max_body_bytes));
        if max_bodies_in_flight_bytes < max_body_bytes {
            return Err(invalid(
                "limits.max_bodies_in_flight_bytes",
                format!(
                    "must be at least limits.max_body_bytes ({max_body_bytes}): a body of \
                     the largest size must fit in the budget"
                ),
            ));
        }
        let read_timeout = raw
            .limits
            .read_timeout_seconds
            .map_or(DEFAULT_READ_TIMEOUT, Duration::from_secs);
        if read_timeout.is_zero() || read_timeout > Duration::from_secs(3600) {
            return Err(invalid(
                "limits.read_timeout_seconds",
                "must be between 1 and 3600".into(),
            ));
        }
        let max_connections = raw
            .limits
            .max_connections
            .unwrap_or(DEFAULT_MAX_CONNECTIONS);
        if !(1..=1_000_000).contains(&max_connections) {
            return Err(invalid(
                "limits.max_connections",
                "must be between 1 and 1000000".into(),
            ));
        }

        let mut endpoints = Vec::new();
        let mut literal_secrets = Vec::new();
        let mut read_secret = |source: &str, skey: &str| -> Result<Secret, ConfigError> {
            // A trailing newline (a secret written to a file, or put in the environment
            // from one) is not part of the secret.
            let value = if let Some(name) = source.strip_prefix("env:") {
                env(name)
                    .ok_or_else(|| {
                        invalid(skey, format!("environment variable {name} is not set"))
                    })?
                    .trim_end_matches(['\r', '\n'])
                    .to_string()
            } else if let Some(file) = source.strip_prefix("file:") {
                let file = beside(Path::new(file));
                std::fs::read_to_string(&file)
                    .map_err(|err| invalid(skey, format!("cannot read {}: {err}", file.display())))?
                    .trim_end_matches(['\r', '\n'])
                    .to_string()
            } else {
                literal_secrets.push(skey.to_string());
                source.to_string()
            };
            if value.is_empty() {
                return Err(invalid(skey, "the secret is empty".into()));
            }
            Ok(Secret::new(value))
        };
        // `None`: not read, and deferred (see [`Secrets`]).
        let mut unresolved = Vec::new();
        let mut resolve_secret =
            |source: &str, skey: &str| -> Result<Option<Secret>, ConfigError> {
                match read_secret(source, skey) {
                    Ok(secret) => Ok(Some(secret)),
                    Err(error) if secrets == Secrets::Deferred => {
                        unresolved.push(error.to_string());
                        Ok(None)
                    }
                    Err(error) => Err(error),
                }
            };
        for (i, e) in raw.endpoint.into_iter().enumerate() {
            let key = format!("endpoint[{i}] (id {:?})", e.id);
            if e.id.is_empty()
                || !e
                    .id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(invalid(
                    &format!("{key}.id"),
                    "must be non-empty [A-Za-z0-9_-]".into(),
                ));
            }
            if endpoints.iter().any(|x: &EndpointConfig| x.id == e.id) {
                return Err(invalid(
                    &format!("{key}.id"),
                    "duplicate endpoint id".into(),
                ));
            }
            if e.secrets.is_empty() {
                return Err(invalid(
                    &format!("{key}.secrets"),
                    "at least one secret is required".into(),
                ));
            }
            let mut keys = Vec::new();
            for (j, source) in e.secrets.iter().enumerate() {
                let skey = format!("{key}.secrets[{j}]");
                keys.extend(resolve_secret(source, &skey)?);
            }
            let handshake_token = match &e.handshake_token {
                None => None,
                Some(source) => resolve_secret(source, &format!("{key}.handshake_token"))?,
            };
            let destination = match e.destination {
                None => None,
                Some(d) => {
                    let dkey = format!("{key}.destination");
                    let https = d.url.starts_with("https://");
                    if !(https || d.url.starts_with("http://")) {
                        return Err(invalid(
                            &format!("{dkey}.url"),
                            format!("{:?} must start with http:// or https://", d.url),
                        ));
                    }
                    let ca = match d.ca_file {
                        None => None,
                        Some(_) if !https => {
                            return Err(invalid(
                                &format!("{dkey}.ca_file"),
                                "applies only to an https:// url".into(),
                            ));
                        }
                        Some(file) => Some(
                            CaFile::read(&beside(&file))
                                .map_err(|reason| invalid(&format!("{dkey}.ca_file"), reason))?,
                        ),
                    };
                    match resolve_secret(&d.secret, &format!("{dkey}.secret"))? {
                        None => None,
                        Some(secret) => {
                            let destination = DestinationConfig {
                                url: d.url,
                                ca,
                                secret,
                                connect_timeout: Duration::from_millis(
                                    d.connect_timeout_ms.unwrap_or(2_000),
                                ),
                                timeout: Duration::from_millis(d.timeout_ms.unwrap_or(15_000)),
                                reach: crate::worker::Reach::Any,
                            };
                            // Built as the workers will build it, so that a mistake is
                            // named here, with its key and line.
                            if let Err(refused) = crate::worker::HttpDestination::new(&destination)
                            {
                                let (field, reason) = destination_field(&refused, &destination);
                                return Err(invalid(&format!("{dkey}{field}"), reason.to_string()));
                            }
                            Some(destination)
                        }
                    }
                }
            };
            let schedule = e
                .retry_schedule_seconds
                .unwrap_or_else(|| DEFAULT_RETRY_SCHEDULE_SECONDS.to_vec());
            check_retry_schedule(&schedule)
                .map_err(|reason| invalid(&format!("{key}.retry_schedule_seconds"), reason))?;
            let plugin_config = serde_json::to_value(e.config.unwrap_or_default())
                .map_err(|err| invalid(&format!("{key}.config"), err.to_string()))?;
            let reconcile = match e.reconcile {
                None => None,
                Some(r) => {
                    let rkey = format!("{key}.reconcile");
                    let credential = resolve_secret(&r.credential, &format!("{rkey}.credential"))?;
                    let invalid = |k: &str, reason| invalid(&format!("{rkey}.{k}"), reason);
                    match credential {
                        Some(credential) => Some(reconcile_config(r, credential, &invalid)?),
                        None => None,
                    }
                }
            };
            endpoints.push(EndpointConfig {
                id: e.id,
                plugin: e.plugin,
                secrets: keys,
                tolerance: e.tolerance,
                handshake_token,
                plugin_config,
                destination,
                retry_schedule: schedule.into_iter().map(Duration::from_secs).collect(),
                reconcile,
            });
        }
        let admin = match raw.admin_token.as_deref() {
            None if raw.admin_listen.is_some() => {
                return Err(invalid(
                    "admin_listen",
                    "applies only with admin_token (the admin API is off without it)".into(),
                ));
            }
            None => None,
            Some(source) => {
                let token = resolve_secret(source, "admin_token")?;
                let text = raw.admin_listen.unwrap_or_else(|| "127.0.0.1:8081".into());
                let address: SocketAddr = text.parse().map_err(|_| {
                    invalid(
                        "admin_listen",
                        format!("{text:?} is not an address like 127.0.0.1:8081"),
                    )
                })?;
                token.map(|token| (address, token))
            }
        };
        let tenancy = match &raw.tenancy {
            None => None,
            Some(t) => 'tenancy: {
                if raw.admin_token.is_none() {
                    return Err(invalid(
                        "tenancy",
                        "the tenant API is served on the admin listener: set admin_token".into(),
                    ));
                }
                let (Some(operator_token), Some(key)) = (
                    resolve_secret(&t.operator_token, "tenancy.operator_token")?,
                    resolve_secret(&t.master_key, "tenancy.master_key")?,
                ) else {
                    break 'tenancy None;
                };
                let master_key = crate::tenancy::MasterKey::decode(key.expose())
                    .map_err(|reason| invalid("tenancy.master_key", reason))?;
                let defaults = Quotas::default();
                let quotas = Quotas {
                    requests_per_second: t
                        .requests_per_second
                        .unwrap_or(defaults.requests_per_second),
                    max_endpoints: t.max_endpoints.unwrap_or(defaults.max_endpoints),
                    max_plugins: t.max_plugins.unwrap_or(defaults.max_plugins),
                    max_plugin_bytes: t.max_plugin_bytes.unwrap_or(defaults.max_plugin_bytes),
                };
                if quotas.requests_per_second == 0 {
                    return Err(invalid(
                        "tenancy.requests_per_second",
                        "must be greater than 0".into(),
                    ));
                }
                let shadow_seconds = t.shadow_seconds.unwrap_or(DEFAULT_SHADOW_SECONDS);
                if !(1..=MAX_SHADOW_SECONDS).contains(&shadow_seconds) {
                    let reason = format!("must be between 1 and {MAX_SHADOW_SECONDS}");
                    return Err(invalid("tenancy.shadow_seconds", reason));
                }
                Some(TenancyConfig {
                    operator_token,
                    master_key,
                    quotas,
                    resident_plugin_bytes: t
                        .resident_plugin_bytes
                        .unwrap_or(DEFAULT_RESIDENT_PLUGIN_BYTES),
                    destinations: match t.private_destinations {
                        Some(true) => crate::worker::Reach::Any,
                        None | Some(false) => crate::worker::Reach::Public,
                    },
                    shadow_budget: Duration::from_secs(shadow_seconds),
                })
            }
        };
        let defaults = DeliveryConfig::default();
        let delivery = DeliveryConfig {
            workers: raw.delivery.workers.unwrap_or(defaults.workers),
            lease: raw
                .delivery
                .lease_seconds
                .map_or(defaults.lease, Duration::from_secs),
            poll: raw
                .delivery
                .poll_ms
                .map_or(defaults.poll, Duration::from_millis),
            grace: raw
                .delivery
                .grace_seconds
                .map_or(defaults.grace, Duration::from_secs),
        };
        // Bounded above too: a lease of years never lets a crashed worker's events
        // go, a poll of hours never looks for due retries, and one lease statement
        // reads as many events as there are workers.
        let workers = u64::try_from(delivery.workers).unwrap_or(u64::MAX);
        for (key, value, most) in [
            ("delivery.workers", Some(workers), 1024),
            ("delivery.lease_seconds", raw.delivery.lease_seconds, 86_400),
            ("delivery.poll_ms", raw.delivery.poll_ms, 60_000),
        ] {
            if value.is_some_and(|v| v == 0 || v > most) {
                return Err(invalid(key, format!("must be between 1 and {most}")));
            }
        }
        if raw.delivery.grace_seconds.is_some_and(|g| g > 3600) {
            return Err(invalid(
                "delivery.grace_seconds",
                "must be at most 3600".into(),
            ));
        }
        Ok(Config {
            path: path.to_path_buf(),
            listen,
            public_url,
            store,
            plugins_dir: raw.plugins_dir.map(|p| beside(&p)),
            limits: Limits {
                max_body_bytes,
                max_bodies_in_flight_bytes,
                read_timeout,
                max_connections,
                plugin,
            },
            endpoints,
            delivery,
            retention,
            forensics,
            tenancy,
            admin,
            literal_secrets,
            unresolved,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(
            Path::new("/etc/hookhost/hookhost.toml"),
            text,
            &|name| match name {
                "STRIPE_SECRET" => Some("whsec_from_env".to_string()),
                "FROM_A_FILE" => Some("whsec_from_a_file\r\n".to_string()),
                "ONLY_A_NEWLINE" => Some("\n".to_string()),
                _ => None,
            },
        )
    }

    const GOOD: &str = r#"
        listen = "127.0.0.1:9000"
        public_url = "https://hooks.example.com/"
        [[endpoint]]
        id = "stripe-main"
        plugin = "stripe"
        secrets = ["env:STRIPE_SECRET", "whsec_literal"]
        tolerance = 120
        [endpoint.config]
        mode = "strict"
    "#;

    #[test]
    fn a_reconcile_table_is_read_and_checked_naming_its_key() {
        let table = |body: &str| parse(&format!("{GOOD}\n[endpoint.reconcile]\n{body}\n"));
        let config = table(
            "credential = \"env:STRIPE_SECRET\"\nauth = \"header:X-Api-Key\"\nevery_seconds = 60",
        )
        .expect("valid");
        let reconcile = config.endpoints[0].reconcile.as_ref().expect("reconcile");
        assert_eq!(reconcile.credential, Secret::new("whsec_from_env"));
        assert_eq!(reconcile.auth, ApiAuth::Header("x-api-key".into()));
        assert_eq!(reconcile.every, Some(Duration::from_secs(60)));
        assert_eq!(reconcile.lookback, Duration::from_secs(86_400));
        assert_eq!(reconcile.requests_per_second, 5);
        for (body, key) in [
            ("credential = \"k\"\nauth = \"digest\"", ".reconcile.auth"),
            ("credential = \"k\"\nauth = \"header:\"", ".reconcile.auth"),
            (
                "credential = \"k\"\napi_base = \"ftp://x\"",
                ".reconcile.api_base",
            ),
            (
                "credential = \"k\"\napi_base = \"https://\"",
                ".reconcile.api_base",
            ),
            (
                "credential = \"k\"\nrequests_per_second = 0",
                ".reconcile.requests_per_second",
            ),
            (
                "credential = \"k\"\nevery_seconds = 0",
                ".reconcile.every_seconds",
            ),
            // Past a year: no schedule means that.
            (
                "credential = \"k\"\nevery_seconds = 9223372036854775807",
                ".reconcile.every_seconds",
            ),
            // Runs further apart than they look back would leave gaps for good.
            (
                "credential = \"k\"\nevery_seconds = 7200\nlookback_seconds = 3600",
                ".reconcile.every_seconds: 7200 is longer than lookback_seconds (3600)",
            ),
            (
                "credential = \"k\"\nlookback_seconds = 0",
                ".reconcile.lookback_seconds",
            ),
            ("credential = \"env:MISSING\"", ".reconcile.credential"),
        ] {
            let error = table(body).expect_err(body).to_string();
            assert!(error.contains(key), "{body}: {error}");
        }
        assert!(
            table("auth = \"bearer\"").is_err(),
            "the credential is required"
        );
    }

    #[test]
    fn a_good_file_gets_defaults_and_resolved_secrets() {
        let config = parse(GOOD).expect("valid");
        assert_eq!(config.public_url, "https://hooks.example.com");
        assert_eq!(
            config.store,
            StoreConfig::Sqlite(PathBuf::from("/etc/hookhost/hookhost.db"))
        );
        assert_eq!(config.limits.max_body_bytes, 1024 * 1024);
        assert_eq!(config.limits.max_bodies_in_flight_bytes, 24 * 1024 * 1024);
        assert_eq!(config.limits.read_timeout, Duration::from_secs(30));
        assert_eq!(config.limits.max_connections, 1024);
        let endpoint = &config.endpoints[0];
        assert_eq!(
            endpoint.secrets,
            vec![Secret::new("whsec_from_env"), Secret::new("whsec_literal")]
        );
        assert_eq!(
            endpoint.plugin_config,
            serde_json::json!({"mode": "strict"})
        );
        assert_eq!(
            config.literal_secrets,
            vec!["endpoint[0] (id \"stripe-main\").secrets[1]"]
        );
        assert!(!format!("{config:?}").contains("whsec_from_env"));
    }

    fn error(text: &str) -> String {
        parse(text).expect_err("invalid").to_string()
    }

    #[test]
    fn errors_name_the_file_the_key_and_the_reason() {
        let missing_env =
            error("[[endpoint]]\nid = \"a\"\nplugin = \"stripe\"\nsecrets = [\"env:NOPE\"]\n");
        assert_eq!(
            missing_env,
            "/etc/hookhost/hookhost.toml: endpoint[0] (id \"a\").secrets[0]: environment variable NOPE is not set (line 4)"
        );
        let unknown = error("listen = \"127.0.0.1:1\"\nlisten_port = 3\n");
        assert!(
            unknown.starts_with("/etc/hookhost/hookhost.toml: "),
            "{unknown}"
        );
        assert!(unknown.contains("listen_port"), "{unknown}");
        let missing_field = error("[[endpoint]]\nid = \"a\"\nsecrets = [\"x\"]\n");
        assert!(missing_field.contains("plugin"), "{missing_field}");
        assert!(error("listen = \"nowhere\"").contains("listen: "));
        assert!(error("store = \"\"").contains("store: empty path"));
        for (store, file) in [
            ("sqlite://data/h.db", "/etc/hookhost/data/h.db"),
            ("sqlite:h.db", "/etc/hookhost/h.db"),
            ("./a:b.db", "/etc/hookhost/./a:b.db"),
            ("/var/lib/h.db", "/var/lib/h.db"),
        ] {
            let config = parse(&format!("store = \"{store}\"")).expect(store);
            assert_eq!(
                config.store,
                StoreConfig::Sqlite(PathBuf::from(file)),
                "{store}"
            );
        }
        for (store, scheme) in [
            ("mysql://db/h", "mysql"),
            ("a:b.db", "a"),
            ("sqlite:x:y", "x"),
        ] {
            let refused = error(&format!("store = \"{store}\""));
            assert!(
                refused.contains(&format!("store: {scheme}: is not a store hookhost keeps")),
                "{refused}"
            );
        }
        assert!(error("[store]\nmax_connections = 4").contains("store: "));
        for (table, says) in [
            (
                "url = \"postgres://db/h\"\nmax_conections = 4",
                "unknown field `max_conections`",
            ),
            (
                "url = \"postgres://db/h\"\nconnect_timeout_ms = \"1500\"",
                "invalid type: string",
            ),
        ] {
            let message = error(&format!("[store]\n{table}"));
            assert!(message.contains(says), "{table}: {message}");
        }
        assert!(error("store = 5").contains("a path or URL, or a [store] table"));
        assert!(error("[retention]\ndelivered_days = 0").contains("retention.delivered_days: "));
        assert!(error("[retention]\ndelivered_days = 3").contains("longest provider retry window"));
        assert!(error("[retention]\ndead_days = 0").contains("retention.dead_days: "));
        assert!(error("public_url = \"ftp://x\"").contains("public_url: "));
        assert!(error("[limits]\nplugin_memory_bytes = 10").contains("limits.plugin_memory_bytes"));
        for bad in [0, 3601] {
            assert!(
                error(&format!("[limits]\nread_timeout_seconds = {bad}"))
                    .contains("limits.read_timeout_seconds: must be between 1 and 3600")
            );
        }
        for bad in [0, 1_000_001] {
            assert!(
                error(&format!("[limits]\nmax_connections = {bad}"))
                    .ends_with("limits.max_connections: must be between 1 and 1000000 (line 2)")
            );
        }
        // Each of [delivery]'s keys is named, with its line, not the table.
        assert!(
            error("[delivery]\nworkers = 4\npoll_ms = 0")
                .ends_with("delivery.poll_ms: must be between 1 and 60000 (line 3)")
        );
        for (key, bad, says) in [
            ("workers", 1025, "between 1 and 1024"),
            ("lease_seconds", 86_401, "between 1 and 86400"),
            ("lease_seconds", 0, "between 1 and 86400"),
            ("poll_ms", 60_001, "between 1 and 60000"),
            ("grace_seconds", 3601, "at most 3600"),
        ] {
            let message = error(&format!("[delivery]\n{key} = {bad}"));
            assert!(
                message.ends_with(&format!("delivery.{key}: must be {says} (line 2)")),
                "{message}"
            );
        }
        assert_eq!(
            parse("[limits]\nread_timeout_seconds = 5")
                .expect("valid")
                .limits
                .read_timeout,
            Duration::from_secs(5)
        );
        assert_eq!(
            error("[limits]\nmax_body_bytes = 2048\nmax_bodies_in_flight_bytes = 2047"),
            "/etc/hookhost/hookhost.toml: limits.max_bodies_in_flight_bytes: must be at least \
             limits.max_body_bytes (2048): a body of the largest size must fit in the budget \
             (line 3)"
        );
        let dup = "[[endpoint]]\nid = \"a\"\nplugin = \"p\"\nsecrets = [\"x\"]\n";
        assert!(error(&format!("{dup}{dup}")).contains("duplicate endpoint id"));
        assert!(
            error("[[endpoint]]\nid = \"a/b\"\nplugin = \"p\"\nsecrets = [\"x\"]")
                .contains(".id: ")
        );
        assert!(
            error("[[endpoint]]\nid = \"a\"\nplugin = \"p\"\nsecrets = []")
                .contains("at least one secret")
        );
        let schedule = |steps: &str| {
            parse(&format!(
                "[[endpoint]]\nid = \"a\"\nplugin = \"p\"\nsecrets = [\"x\"]\n\
                 retry_schedule_seconds = {steps}"
            ))
        };
        let key = "/etc/hookhost/hookhost.toml: endpoint[0] (id \"a\").retry_schedule_seconds: ";
        for (steps, reason) in [
            ("[]", "at least one attempt".to_string()),
            (
                "[0, 9223372036854775807]",
                "[1] is 9223372036854775807 s; a step is at most 2592000 s (30 days)".into(),
            ),
            (
                &format!("[0, {}]", vec!["1"; 100].join(", ")),
                "101 attempts; at most 100".into(),
            ),
            (
                "[300, 600]",
                "[0] is 300 s; the first attempt is made as soon as the event is stored, \
                 so the first step is 0"
                    .into(),
            ),
        ] {
            let message = schedule(steps).expect_err(steps).to_string();
            assert_eq!(message, format!("{key}{reason} (line 5)"));
        }
        let longest = schedule("[0, 2592000]").expect("30 days is allowed");
        assert_eq!(
            longest.endpoints[0].retry_schedule,
            [Duration::ZERO, Duration::from_secs(2_592_000)]
        );
        assert!(
            error("[[endpoint]]\nid = \"a\"\nplugin = \"p\"\nsecrets = [\"file:/nonexistent/s\"]")
                .contains("cannot read /nonexistent/s")
        );
        // A variable filled from a file keeps no trailing newline; one that is only a
        // newline is an empty secret.
        let from_file =
            parse("[[endpoint]]\nid = \"a\"\nplugin = \"p\"\nsecrets = [\"env:FROM_A_FILE\"]")
                .expect("valid");
        assert_eq!(
            from_file.endpoints[0].secrets,
            [Secret::new("whsec_from_a_file")]
        );
        assert!(
            error("[[endpoint]]\nid = \"a\"\nplugin = \"p\"\nsecrets = [\"env:ONLY_A_NEWLINE\"]")
                .ends_with("secrets[0]: the secret is empty (line 4)")
        );
    }

    #[test]
    fn a_refused_value_is_found_on_its_line() {
        let text = "listen = \"127.0.0.1:1\"\n\
                    [limits]\nread_timeout_seconds = 0\n\
                    [[endpoint]]\nid = \"a\"\nsecrets = [\"x\",\n  \"y\"]\n\
                    [[endpoint]]\nid = \"b.c\"\n\
                    [endpoint.destination]\nurl = \"ftp://x\"\ntimeout_ms = 0\n";
        for (key, line) in [
            ("listen", Some(1)),
            ("limits.read_timeout_seconds", Some(3)),
            ("endpoint[0] (id \"a\").secrets[1]", Some(7)),
            ("endpoint[1] (id \"b.c\").destination.url", Some(11)),
            ("endpoint[1] (id \"b.c\").destination.timeout_ms", Some(12)),
            // Not in the file: as much of the path as it has (the endpoint's header).
            ("endpoint[0] (id \"a\").retry_schedule_seconds", Some(4)),
            ("admin_listen", None),
        ] {
            assert_eq!(line_of(text, key), line, "{key}");
        }
    }

    #[test]
    fn the_bodies_in_flight_budget_is_at_least_one_body() {
        let limits = |text: &str| parse(text).expect("valid").limits;
        let set = limits("[limits]\nmax_body_bytes = 2048\nmax_bodies_in_flight_bytes = 2048");
        assert_eq!(
            (set.max_body_bytes, set.max_bodies_in_flight_bytes),
            (2048, 2048)
        );
        // Raising only the body cap past the default budget raises the budget with it.
        let big = limits("[limits]\nmax_body_bytes = 134217728");
        assert_eq!(big.max_bodies_in_flight_bytes, 134_217_728);
        let small = limits("[limits]\nmax_body_bytes = 4096");
        assert_eq!(
            small.max_bodies_in_flight_bytes,
            DEFAULT_MAX_BODIES_IN_FLIGHT_BYTES
        );
    }

    #[test]
    fn a_postgres_url_selects_postgres_with_pool_settings() {
        let config = parse("store = \"postgres://hh:pw@db.internal/hookhost\"").expect("url");
        let StoreConfig::Postgres(pg) = &config.store else {
            panic!("{:?}", config.store)
        };
        assert_eq!(pg.url, "postgres://hh:pw@db.internal/hookhost");
        assert_eq!(pg.max_connections, DEFAULT_PG_MAX_CONNECTIONS);
        assert_eq!(pg.connect_timeout, Duration::from_millis(1_500));
        assert!(!format!("{config:?}").contains("pw@"), "{config:?}");
        let config = parse(
            "[store]\nurl = \"postgresql://db/h\"\nmax_connections = 4\n\
             connect_timeout_ms = 800\nstatement_timeout_ms = 3000\n\
             [retention]\ndelivered_days = 7\ndead_days = 90",
        )
        .expect("table");
        assert_eq!(
            config.store,
            StoreConfig::Postgres(PgConfig {
                url: "postgresql://db/h".into(),
                max_connections: 4,
                connect_timeout: Duration::from_millis(800),
                statement_timeout: Duration::from_secs(3),
            })
        );
        for few in [0, 1] {
            let message = error(&format!(
                "[store]\nurl = \"postgres://db/h\"\nmax_connections = {few}"
            ));
            assert!(
                message.contains("store.max_connections: must be at least 2"),
                "{message}"
            );
            assert!(message.contains("(line 3)"), "{message}");
        }
        let message = error("[store]\nurl = \"postgres://db/h\"\nconnect_timeout_ms = 0");
        assert!(
            message.contains("store.connect_timeout_ms: must be greater than 0 (line 3)"),
            "{message}"
        );
        // 0 and past PostgreSQL's own limit are refused here, with the key and its
        // line, not by PostgreSQL when the pool connects.
        for wrong in [0u64, 2_147_483_648] {
            let message = error(&format!(
                "[store]\nurl = \"postgres://db/h\"\nstatement_timeout_ms = {wrong}"
            ));
            assert!(
                message.contains(
                    "store.statement_timeout_ms: must be from 1 to 2147483647 (PostgreSQL's limit) (line 3)"
                ),
                "{message}"
            );
        }
        assert_eq!(config.retention.delivered, Duration::from_secs(7 * 86_400));
        assert_eq!(
            config.retention.dead,
            Some(Duration::from_secs(90 * 86_400))
        );
        assert_eq!(
            parse("").expect("empty").retention,
            RetentionConfig::default()
        );
        assert_eq!(
            parse("").expect("empty").forensics,
            ForensicsConfig::default()
        );
        let forensics = parse(
            "[forensics]\nrejected_per_endpoint = 5\nrejected_days = 2\nrejected_body = \"digest\"",
        )
        .expect("forensics")
        .forensics;
        assert_eq!(
            forensics,
            ForensicsConfig {
                rejected_per_endpoint: 5,
                rejected_for: Duration::from_secs(2 * 86_400),
                rejected_body: BodyKept::Digest,
            }
        );
        assert!(error("[forensics]\nrejected_days = 0").contains("forensics.rejected_days: "));
        assert!(error("admin_listen = \"0.0.0.0:9000\"").contains(
            "admin_listen: applies only with admin_token (the admin API is off without it)"
        ));
        let tenancy = "[tenancy]\noperator_token = \"op\"\nmaster_key = \"c2hvcnQ=\"";
        assert!(error(tenancy).contains("tenancy: the tenant API is served on the admin listener"));
        let with_admin = format!("admin_token = \"a\"\n{tenancy}");
        assert!(error(&with_admin).contains("tenancy.master_key: 5 bytes; a master key is 32"));
        let key = "KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=";
        let tenancy = format!(
            "admin_token = \"a\"\n[tenancy]\noperator_token = \"op\"\nmaster_key = \"{key}\""
        );
        let shadow = |seconds| parse(&format!("{tenancy}\nshadow_seconds = {seconds}"));
        let budget = |config: Config| config.tenancy.map(|t| t.shadow_budget);
        assert_eq!(
            budget(parse(&tenancy).expect("default")),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            budget(shadow(600).expect("600")),
            Some(Duration::from_secs(600))
        );
        for wrong in [0, 601] {
            let message = shadow(wrong).expect_err("refused").to_string();
            assert!(
                message.ends_with("tenancy.shadow_seconds: must be between 1 and 600 (line 5)"),
                "{message}"
            );
        }
        assert!(error("[forensics]\nrejected_body = \"some\"").contains("rejected_body"));
        assert_eq!(
            redact_password("postgres://u@h/db"),
            "postgres://u@h/db".to_string()
        );
        assert_eq!(
            redact_password("postgres://u:pw@h/db?sslmode=require&Password=pw&sslpassword=k"),
            "postgres://u:[redacted]@h/db?sslmode=require&Password=[redacted]&sslpassword=[redacted]"
        );
        assert_eq!(
            redact_password("postgres://h?password=pw"),
            "postgres://h?password=[redacted]"
        );
        for unescaped in ["pa?ss", "pa/ss", "pa@ss", "pa:ss"] {
            assert_eq!(
                redact_password(&format!("postgres://u:{unescaped}@h/db")),
                "postgres://u:[redacted]@h/db"
            );
        }
    }

    fn with_destination(destination: &str) -> String {
        format!(
            "[[endpoint]]\nid = \"x\"\nplugin = \"p\"\nsecrets = [\"s\"]\n\
             [endpoint.destination]\nsecret = \"whsec_a2V5\"\n{destination}"
        )
    }

    #[test]
    fn destinations_may_be_https_with_a_ca_file_beside_the_config() {
        let config =
            parse(&with_destination("url = \"https://hooks.internal/in\"")).expect("https");
        let destination = config.endpoints[0]
            .destination
            .as_ref()
            .expect("destination");
        assert_eq!(destination.url, "https://hooks.internal/in");
        assert!(destination.ca.is_none());
        let config = parse(&with_destination("url = \"http://127.0.0.1:9000/in\"")).expect("http");
        assert!(config.endpoints[0].destination.is_some());

        // A relative ca_file is read beside the configuration file.
        let dir = tempfile::tempdir().expect("temp dir");
        let key = rcgen::KeyPair::generate().expect("key");
        let ca = rcgen::CertificateParams::new(Vec::<String>::new())
            .expect("params")
            .self_signed(&key)
            .expect("certificate");
        std::fs::create_dir(dir.path().join("tls")).expect("dir");
        std::fs::write(dir.path().join("tls/ca.pem"), ca.pem()).expect("write");
        let text =
            with_destination("url = \"https://hooks.internal/in\"\nca_file = \"tls/ca.pem\"");
        let config = Config::parse(&dir.path().join("hookhost.toml"), &text, &|_| None)
            .expect("a PEM CA file");
        let destination = config.endpoints[0]
            .destination
            .as_ref()
            .expect("destination");
        let read = destination.ca.as_ref().expect("ca_file read");
        assert_eq!(read.path, dir.path().join("tls/ca.pem"));
        assert_eq!(read.certificates, vec![ca.der().clone()]);
        assert!(!format!("{config:?}").contains("whsec_a2V5"));

        let refused = |destination: &str| error(&with_destination(destination));
        let key = "/etc/hookhost/hookhost.toml: endpoint[0] (id \"x\").destination";
        assert_eq!(
            refused("url = \"ftp://hooks.internal/in\""),
            format!(
                "{key}.url: \"ftp://hooks.internal/in\" must start with http:// or https:// (line 7)"
            )
        );
        assert_eq!(
            refused("url = \"http://hooks.internal/in\"\nca_file = \"ca.pem\""),
            format!("{key}.ca_file: applies only to an https:// url (line 8)")
        );
        // What the workers would refuse at start is refused here, with its key and line.
        assert_eq!(
            refused("url = \"http://hooks.internal/in\"\ntimeout_ms = 0"),
            format!(
                "{key}.timeout_ms: connect_timeout_ms and timeout_ms must be greater than 0 (line 8)"
            )
        );
        assert_eq!(
            refused("url = \"http://hooks.internal/in\"\nconnect_timeout_ms = 0"),
            format!(
                "{key}.connect_timeout_ms: connect_timeout_ms and timeout_ms must be greater than 0 (line 8)"
            )
        );
        let credentials = refused("url = \"http://u:p@hooks.internal/in\"");
        assert!(
            credentials.starts_with(&format!("{key}.url: a user name or password")),
            "{credentials}"
        );
        assert!(credentials.ends_with("(line 7)"), "{credentials}");
        let secret = error(
            "[[endpoint]]\nid = \"x\"\nplugin = \"p\"\nsecrets = [\"s\"]\n\
             [endpoint.destination]\nsecret = \"not-a-whsec\"\nurl = \"http://hooks.internal/in\"",
        );
        assert!(secret.starts_with(&format!("{key}.secret: ")), "{secret}");
        assert!(
            secret.ends_with("(expected whsec_ + base64) (line 6)"),
            "{secret}"
        );
        let missing = refused("url = \"https://hooks.internal/in\"\nca_file = \"tls/ca.pem\"");
        assert!(
            missing.starts_with(&format!(
                "{key}.ca_file: cannot read /etc/hookhost/tls/ca.pem: "
            )),
            "{missing}"
        );
    }

    #[test]
    fn a_deferred_secret_is_noted_and_what_it_belongs_to_left_out() {
        let text = format!(
            "admin_token = \"env:NO_ADMIN\"\n{GOOD}\n[endpoint.destination]\n\
             url = \"http://127.0.0.1:9/\"\nsecret = \"env:NO_DESTINATION\"\n"
        );
        let strict = error(&text);
        assert!(strict.contains("NO_DESTINATION is not set"), "{strict}");
        let env = |name: &str| (name == "STRIPE_SECRET").then(|| "whsec_from_env".to_string());
        let path = Path::new("/etc/hookhost/hookhost.toml");
        let config = Config::parse_with(path, &text, &env, Secrets::Deferred).expect("deferred");
        assert_eq!(config.unresolved.len(), 2, "{:?}", config.unresolved);
        assert!(
            config.unresolved[0].starts_with(
                "/etc/hookhost/hookhost.toml: endpoint[0] (id \"stripe-main\").destination.secret: \
                 environment variable NO_DESTINATION is not set (line "
            ),
            "{:?}",
            config.unresolved
        );
        assert_eq!(
            config.unresolved[1],
            "/etc/hookhost/hookhost.toml: admin_token: environment variable NO_ADMIN is not set \
             (line 1)"
        );
        let endpoint = &config.endpoints[0];
        assert_eq!(
            endpoint.secrets.len(),
            2,
            "the secrets that were read are kept"
        );
        assert!(endpoint.destination.is_none());
        assert!(config.admin.is_none());
        // Nothing unread, nothing noted.
        let read = Config::parse_with(path, GOOD, &env, Secrets::Deferred).expect("deferred");
        assert!(read.unresolved.is_empty());
    }
}
