//! The endpoint registry: which plugin and which keys serve `/webhooks/{id}`.
//!
//! Built from configuration at start; held behind one interface whose whole map is
//! swapped atomically, so endpoints can later be changed at runtime without a restart.
//! An endpoint id only ever selects that endpoint's own plugin and keys.

use crate::config::EndpointConfig;
use crate::plugins::{Catalog, Plugin};
use crate::verify::{Key, decode_key};
use crate::worker::{Destination, HttpDestination};
use hookhost_plugin_sdk::EndpointFacts;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// One configured endpoint, ready to judge requests.
#[derive(Debug)]
pub struct Endpoint {
    pub id: String,
    pub plugin: Arc<Plugin>,
    /// Decoded active secrets, current first.
    pub keys: Vec<Key>,
    /// Timestamp window in seconds (endpoint override, else the plugin's default).
    pub tolerance_seconds: Option<u32>,
    /// What an unsigned handshake must present, when the plugin asks for a token.
    pub handshake_token: Option<crate::verify::Secret>,
    /// The plugin configuration, serialised once as JSON.
    pub plugin_config: String,
    /// Where accepted events go; none keeps them pending.
    pub destination: Option<Arc<dyn Destination>>,
    /// Delay before each delivery attempt (see `worker::next_step`).
    pub retry_schedule: Vec<Duration>,
    /// The tenant that manages it through the API (none: the configuration file's).
    pub tenant: Option<TenantLimits>,
    /// How to reach the provider's API (reconciliation), when configured.
    pub reconcile: Option<crate::config::ReconcileConfig>,
    /// What the plugin can pull for this configuration, once asked (see
    /// `reconcile::pull_info`).
    pub pull_info: std::sync::OnceLock<Option<hookhost_plugin_sdk::ReconcileInfo>>,
    /// When the next request to the provider's API may go: one pace, kept to
    /// `requests_per_second`, for this endpoint's reconciliation runs and its thin
    /// events' fetches together (see `reconcile::Api::pace`).
    pub api_pace: Arc<crate::reconcile::Pace>,
}

/// A tenant endpoint's owner and the ingest rate it may use.
#[derive(Debug, Clone)]
pub struct TenantLimits {
    pub id: String,
    /// When the endpoint was created: one deleted and created again under its id is
    /// another endpoint.
    pub created_at_ms: i64,
    pub requests_per_second: u32,
    /// The ids of the endpoint's active secrets, in the order of its keys.
    pub secret_ids: Vec<String>,
    /// When the tenant seals raw bodies at rest: the key (see `tenancy::stored_body`).
    pub seal_bodies: Option<crate::tenancy::MasterKey>,
}

impl Endpoint {
    /// Resolve an endpoint's plugin and decode its secrets with the plugin's key format.
    /// Errors name the endpoint and what is wrong, never a secret's value.
    pub fn build(config: &EndpointConfig, catalog: &Catalog) -> Result<Endpoint, String> {
        Endpoint::build_with(config, named_plugin(config, catalog)?)
    }

    /// As [`Endpoint::build`], with the plugin already chosen.
    pub fn build_with(config: &EndpointConfig, plugin: Arc<Plugin>) -> Result<Endpoint, String> {
        let facts = Endpoint::check(config, &plugin)?;
        Endpoint::assemble(config, plugin, &facts)
    }

    /// The plugin's check of the endpoint's plugin configuration: the facts it returns
    /// (key formats, default window) replace its static ones for this endpoint.
    pub fn check(config: &EndpointConfig, plugin: &Plugin) -> Result<EndpointFacts, String> {
        let at = format!("endpoint {:?}", config.id);
        plugin
            .check_config(&config.plugin_config.to_string())
            .map_err(|e| format!("{at}: config: plugin {} failed: {e}", plugin.name()))?
            .map_err(|e| Endpoint::config_refused(config, plugin, &e))
    }

    /// The error of an endpoint whose plugin configuration its plugin refused,
    /// naming the key (`endpoint "id": config.<key>: …`).
    pub fn config_refused(
        config: &EndpointConfig,
        plugin: &Plugin,
        e: &hookhost_plugin_sdk::ConfigError,
    ) -> String {
        let key = if e.key.is_empty() {
            "config".to_string()
        } else {
            format!("config.{}", e.key)
        };
        format!(
            "endpoint {:?}: {key}: {} (plugin {})",
            config.id,
            e.message,
            plugin.name()
        )
    }

    /// The endpoint, with the facts its plugin's configuration check returned (see
    /// [`Endpoint::check`]): decode the secrets, settle the window, the destination.
    pub fn assemble(
        config: &EndpointConfig,
        plugin: Arc<Plugin>,
        facts: &EndpointFacts,
    ) -> Result<Endpoint, String> {
        let at = format!("endpoint {:?}", config.id);
        let plugin_config = config.plugin_config.to_string();
        let key_formats = if facts.key_formats.is_empty() {
            &plugin.info.key_formats
        } else {
            &facts.key_formats
        };
        let default_tolerance = facts
            .default_tolerance_seconds
            .or(plugin.info.default_tolerance_seconds);
        let keys = config
            .secrets
            .iter()
            .enumerate()
            .map(|(i, secret)| {
                decode_key(secret, key_formats)
                    .map_err(|e| format!("{at}: secrets[{i}]: {e} (plugin {})", plugin.name()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let tolerance_seconds = match (config.tolerance, default_tolerance) {
            (Some(_), None) => {
                return Err(format!(
                    "{at}: tolerance: plugin {} signs no timestamp, so a window cannot apply",
                    plugin.name()
                ));
            }
            (Some(0), Some(_)) => {
                return Err(format!(
                    "{at}: tolerance: must be at least 1 second (0 would refuse every request \
                     not signed within the same second)"
                ));
            }
            (Some(t), Some(_)) => Some(t),
            (None, Some(0)) => {
                return Err(format!(
                    "{at}: plugin {}'s timestamp window is 0 seconds, which would refuse every \
                     request not signed within the same second: set the endpoint's tolerance",
                    plugin.name()
                ));
            }
            (None, default) => default,
        };
        let destination = match &config.destination {
            None => None,
            Some(d) => Some(
                Arc::new(HttpDestination::new(d).map_err(|e| format!("{at}: {e}"))?)
                    as Arc<dyn Destination>,
            ),
        };
        Ok(Endpoint {
            id: config.id.clone(),
            plugin,
            keys,
            tolerance_seconds,
            handshake_token: config.handshake_token.clone(),
            plugin_config,
            destination,
            retry_schedule: config.retry_schedule.clone(),
            tenant: None,
            reconcile: config.reconcile.clone(),
            pull_info: std::sync::OnceLock::new(),
            api_pace: Arc::default(),
        })
    }
}

/// The catalog's plugin an endpoint names; the error lists the ones there are.
pub fn named_plugin(config: &EndpointConfig, catalog: &Catalog) -> Result<Arc<Plugin>, String> {
    catalog.get(&config.plugin).ok_or_else(|| {
        format!(
            "endpoint {:?}: unknown plugin {:?} (available: {})",
            config.id,
            config.plugin,
            catalog.names().join(", ")
        )
    })
}

/// All endpoints, looked up by id; replaced as a whole. The configuration file's are
/// fixed; the tenants' (managed through the API) are swapped in when they change.
#[derive(Debug, Default)]
pub struct Registry {
    current: RwLock<Arc<HashMap<String, Arc<Endpoint>>>>,
    fixed: Vec<Arc<Endpoint>>,
    /// Whether the tenants' endpoints have been swapped in once, or there are none to
    /// wait for (no `[tenancy]`).
    managed_loaded: std::sync::atomic::AtomicBool,
    /// The tenants' endpoints the store holds that could not be built.
    unserved: RwLock<Arc<std::collections::HashSet<String>>>,
    /// Held from reading the tenants' endpoints in the store to swapping them in, so
    /// that rebuilds run one at a time: one begun on older rows cannot finish after,
    /// and replace, one begun on newer rows.
    pub reloading: tokio::sync::Mutex<()>,
}

impl Registry {
    /// The file's `endpoints`, and, when `tenants` may manage more, none of theirs
    /// until they are first read ([`Registry::replace_managed`]).
    pub fn new(endpoints: Vec<Endpoint>, tenants: bool) -> Registry {
        let registry = Registry {
            current: RwLock::default(),
            fixed: endpoints.into_iter().map(Arc::new).collect(),
            managed_loaded: std::sync::atomic::AtomicBool::new(!tenants),
            unserved: RwLock::default(),
            reloading: tokio::sync::Mutex::const_new(()),
        };
        registry.swap_in(Vec::new());
        registry
    }

    /// Whether the tenants' endpoints have been read and swapped in at least once
    /// (always, with no tenants): before, an id not in the file may still be one of
    /// theirs.
    pub fn managed_loaded(&self) -> bool {
        self.managed_loaded
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether `id` may be served soon though it is not now: the tenants' endpoints
    /// are not read yet, or it is one of theirs that could not be built. Its requests
    /// are answered 503, which senders retry, not 404, which stops them.
    pub fn pending(&self, id: &str) -> bool {
        !self.managed_loaded() || self.unserved_now().contains(id)
    }

    /// Whether `endpoint`, as a request resolved it, is still served: the file's always
    /// are; a tenant's, unless it has been deleted since (and maybe created again).
    pub fn still_serves(&self, endpoint: &Endpoint) -> bool {
        let Some(tenant) = &endpoint.tenant else {
            return true;
        };
        self.get(&endpoint.id).is_some_and(|now| {
            now.tenant
                .as_ref()
                .is_some_and(|t| t.created_at_ms == tenant.created_at_ms)
        })
    }

    /// Whether one of the tenants' endpoints could not be built.
    pub fn has_unserved(&self) -> bool {
        !self.unserved_now().is_empty()
    }

    fn unserved_now(&self) -> Arc<std::collections::HashSet<String>> {
        self.unserved
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Whether `id` is one of the configuration file's endpoints (read-only).
    pub fn is_fixed(&self, id: &str) -> bool {
        self.fixed.iter().any(|e| e.id == id)
    }

    /// The configuration file's endpoints.
    pub fn fixed(&self) -> &[Arc<Endpoint>] {
        &self.fixed
    }

    pub fn get(&self, id: &str) -> Option<Arc<Endpoint>> {
        let map = self
            .current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.get(id).cloned()
    }

    /// Ids of the endpoints that deliver somewhere.
    pub fn with_destinations(&self) -> Vec<String> {
        let map = self
            .current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.values()
            .filter(|e| e.destination.is_some())
            .map(|e| e.id.clone())
            .collect()
    }

    /// Swap in the tenants' endpoints beside the fixed ones (which win an id both
    /// claim); requests in flight keep the endpoint they resolved.
    pub fn replace_managed(&self, managed: Vec<Endpoint>, unserved: Vec<String>) {
        // Unserved first: an id leaving the map for it is never in neither.
        *self
            .unserved
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) =
            Arc::new(unserved.into_iter().collect());
        self.swap_in(managed);
        self.managed_loaded
            .store(true, std::sync::atomic::Ordering::Release);
    }

    fn swap_in(&self, managed: Vec<Endpoint>) {
        let map = managed
            .into_iter()
            .map(Arc::new)
            .chain(self.fixed.iter().cloned())
            .map(|e| (e.id.clone(), e))
            .collect();
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(map);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::{Catalog, PluginLimits};

    /// A window of no time refuses every request not signed within its second: refused
    /// from the endpoint's configuration, and from its plugin's facts alike.
    #[test]
    fn a_window_of_no_time_is_refused_wherever_it_comes_from() {
        let catalog = Catalog::load(None, PluginLimits::default()).expect("built-ins load");
        let stripe = catalog.get("stripe").expect("stripe");
        let config = EndpointConfig {
            id: "s".into(),
            plugin: "stripe".into(),
            secrets: vec![crate::verify::Secret::new("whsec_x")],
            ..EndpointConfig::default()
        };
        let facts = |window: Option<u32>| EndpointFacts {
            key_formats: Vec::new(),
            default_tolerance_seconds: window,
        };
        let built = |config: &EndpointConfig, window| {
            Endpoint::assemble(config, Arc::clone(&stripe), &facts(window))
                .map(|e| e.tolerance_seconds)
        };
        assert_eq!(built(&config, None), Ok(Some(300)), "stripe's own window");
        assert_eq!(built(&config, Some(600)), Ok(Some(600)));
        let refused = built(&config, Some(0)).expect_err("a plugin's window of 0");
        assert!(
            refused.contains("plugin stripe's timestamp window is 0 seconds"),
            "{refused}"
        );
        let given = EndpointConfig {
            tolerance: Some(0),
            ..config.clone()
        };
        let refused = built(&given, None).expect_err("an endpoint's window of 0");
        assert!(
            refused.contains("tolerance: must be at least 1 second"),
            "{refused}"
        );
        let given = EndpointConfig {
            tolerance: Some(5),
            ..config
        };
        assert_eq!(
            built(&given, Some(0)),
            Ok(Some(5)),
            "the endpoint's own window"
        );
    }
}
