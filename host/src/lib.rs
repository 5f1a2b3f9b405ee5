//! hookhost: a self-hosted webhook receiver.
//!
//! Providers POST signed events to `/webhooks/{endpoint}`. hookhost proves each request
//! authentic and fresh, stores a durable receipt exactly once per provider event,
//! refuses to let an old version overwrite newer state, and keeps every accepted event
//! in an inbox for delivery. Per-provider knowledge lives in sandboxed WebAssembly
//! plugins (`plugins`); the host owns bytes, secrets, verification, receipts and
//! status codes.
//!
//! One folder per stage of the request path: [`http`] → [`verify`] (asking
//! [`plugins`]) → [`store`]; after the commit, [`worker`] delivers. [`run`] wires them
//! together; `main.rs` and the tests call
//! the same function.

pub mod cli;
pub mod clock;
pub mod config;
pub mod endpoints;
pub mod forensics;
pub mod http;
pub mod metrics;
pub mod plugins;
pub mod reconcile;
pub mod shadow;
pub mod spec;
pub mod store;
pub mod tenancy;
pub mod vectors;
pub mod verify;
pub mod worker;

use anyhow::Context as _;
use config::{Config, StoreConfig};
use endpoints::{Endpoint, Registry};
use plugins::Catalog;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use store::Store;
use tokio::net::TcpListener;

/// Build everything the configuration describes: plugins, endpoints, store.
pub async fn build(config: &Config) -> anyhow::Result<Arc<http::App>> {
    let at = config.path.display().to_string();
    // A configuration loaded for a store-only command may lack secrets: the receiver
    // is never built from it.
    if let Some(unread) = config.unresolved.first() {
        anyhow::bail!("{unread}");
    }
    for key in &config.literal_secrets {
        tracing::warn!("{at}: {key} is a literal secret; prefer env:NAME or file:PATH");
    }
    let (dir, limits) = (config.plugins_dir.clone(), config.limits.plugin);
    // Compiling plugins is CPU work; keep it off the async workers.
    let catalog = tokio::task::spawn_blocking(move || Catalog::load(dir.as_deref(), limits))
        .await
        .context("plugin loading panicked")??;
    let endpoints = config
        .endpoints
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let built = Endpoint::build(e, &catalog).and_then(|endpoint| {
                reconcile::check_schedule(&endpoint)?;
                Ok(endpoint)
            });
            built.map_err(
                |reason| match config::endpoint_line(&config.path, i, &e.id, &reason) {
                    Some(line) => anyhow::anyhow!("{at}: {reason} (line {line})"),
                    None => anyhow::anyhow!("{at}: {reason}"),
                },
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let store = Store::open(&config.store).await.with_context(|| {
        let location = match &config.store {
            StoreConfig::Sqlite(path) => path.display().to_string(),
            StoreConfig::Postgres(pg) => config::redact_password(&pg.url),
        };
        format!("{at}: store: cannot open {location}")
    })?;
    let uploaded = tenancy::Uploaded::new(
        config
            .tenancy
            .as_ref()
            .map_or(config::DEFAULT_RESIDENT_PLUGIN_BYTES, |t| {
                t.resident_plugin_bytes
            }),
    );
    let mut metrics = metrics::Metrics::counting(catalog.iter().map(|p| &**p));
    metrics.watch_uploaded(&uploaded.residency);
    let metrics = Arc::new(metrics);
    Ok(Arc::new(http::App {
        endpoints: Registry::new(endpoints, config.tenancy.is_some()),
        forensics: forensics::Recorder::start(store.clone(), config.forensics, metrics.clone()),
        store,
        public_url: config.public_url.clone(),
        max_body_bytes: config.limits.max_body_bytes,
        read_timeout: config.limits.read_timeout,
        max_connections: config.limits.max_connections,
        delivery: config.delivery,
        retention: config.retention,
        bodies: http::bodies::BodyBudget::new(config.limits.max_bodies_in_flight_bytes),
        plugin_threads: plugins::threads::PluginThreads::per_core()
            .context("cannot start the plugin threads")?,
        metrics,
        catalog,
        tenancy: config.tenancy.clone(),
        limiter: tenancy::Limiter::default(),
        uploaded,
        plugin_limits: config.limits.plugin,
        secret_use: tenancy::SecretUse::default(),
        reconciling: reconcile::InProgress::default(),
        stopping: std::sync::atomic::AtomicBool::new(false),
    }))
}

/// Serve the configuration on `listener` until `shutdown` resolves, then finish the
/// requests in flight and flush the receipt writer.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let admin_listener = match &config.admin {
        Some((address, _)) => Some(TcpListener::bind(address).await.with_context(|| {
            format!(
                "{}: admin_listen: cannot bind {address}",
                config.path.display()
            )
        })?),
        None => None,
    };
    run_on(config, listener, admin_listener, shutdown).await
}

/// [`run`] with the admin listener already bound, for a configuration with an admin
/// API (`admin_token`): a test binds port 0 and passes the listener, so no other
/// socket can take the port between choosing it and serving on it.
pub async fn run_on(
    config: Config,
    listener: TcpListener,
    admin_listener: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let admin = match (&config.admin, admin_listener) {
        (Some((_, token)), Some(admin_listener)) => Some((token, admin_listener)),
        (None, None) => None,
        _ => anyhow::bail!(
            "{}: an admin listener is served exactly when admin_token is set",
            config.path.display()
        ),
    };
    let app = build(&config).await?;
    for endpoint in &config.endpoints {
        let timeout = endpoint.destination.as_ref().map(|d| d.timeout);
        if let Some(Err(reason)) = timeout.map(|t| config.delivery.check_timeout(t)) {
            tracing::warn!(endpoint = %endpoint.id, "destination.timeout_ms: {reason}");
        }
    }
    let (admin_stop, admin_stopped) = tokio::sync::oneshot::channel::<()>();
    let admin = match admin {
        Some((token, admin_listener)) => {
            let address = admin_listener.local_addr()?;
            tracing::info!(%address, "admin API listening");
            let mut router = http::admin::router(app.clone(), token.clone());
            if let Some(tenancy) = &config.tenancy {
                router = router.merge(tenancy::router(app.clone(), tenancy.clone()));
            }
            Some(tokio::spawn(http::serve::serve(
                admin_listener,
                router,
                config.limits.read_timeout,
                config.limits.max_connections,
                async move {
                    let _ = admin_stopped.await;
                },
            )))
        }
        None => None,
    };
    let served = serve(app, listener, shutdown).await;
    let _ = admin_stop.send(());
    if let Some(admin) = admin {
        let _ = admin.await;
    }
    served
}

/// Serve an already built app (tests use this to keep a handle on the store).
pub async fn serve(
    app: Arc<http::App>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "hookhost listening");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let workers = worker::spawn(app.clone(), app.delivery, stopped.clone());
    let purging = tokio::spawn(purge_periodically(app.clone(), stopped.clone()));
    let reconciling = tokio::spawn(reconcile::keep_reconciling(app.clone(), stopped.clone()));
    let reloading = app.tenancy.clone().map(|tenancy| {
        tokio::spawn(tenancy::keep_registry_current(
            app.clone(),
            tenancy,
            stopped,
        ))
    });
    // On shutdown: stop accepting, say not ready, and stop leasing together; requests
    // in flight finish, deliveries in flight get the grace period; then the store is
    // flushed and closed.
    let stopping = app.clone();
    http::serve::serve(
        listener,
        http::router(app.clone()),
        app.read_timeout,
        app.max_connections,
        async move {
            shutdown.await;
            stopping
                .stopping
                .store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = stop.send(true);
        },
    )
    .await;
    let _ = workers.await;
    let _ = purging.await;
    let _ = reconciling.await;
    if let Some(reloading) = reloading {
        let _ = reloading.await;
    }
    app.store.close().await;
    Ok(())
}

/// How often the purge job runs. Retention is counted in days; a few minutes of
/// lateness is nothing, and each run is a handful of short transactions.
const PURGE_EVERY: Duration = Duration::from_secs(300);

/// Delete what the retention lets go, now and every [`PURGE_EVERY`], until `stop`.
/// With several processes on one database each purges; the deletes do not conflict.
async fn purge_periodically(app: Arc<http::App>, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        match app.store.purge(clock::now_ms(), &app.retention).await {
            Ok(purged) if purged == store::Purged::default() => {}
            Ok(purged) => tracing::info!(?purged, "retention: purged"),
            Err(error) => tracing::warn!(%error, "retention: purge failed; trying again later"),
        }
        let before_ms = clock::now_ms()
            - i64::try_from(app.forensics.config().rejected_for.as_millis()).unwrap_or(i64::MAX);
        match app.store.purge_forensics(before_ms).await {
            Ok(0) => {}
            Ok(purged) => tracing::info!(purged, "forensics: purged"),
            Err(error) => tracing::warn!(%error, "forensics: purge failed; trying again later"),
        }
        tokio::select! {
            _ = tokio::time::sleep(PURGE_EVERY) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// Replay events under their original ids. With `remap`, each event's mapping is
/// produced again by its endpoint's current plugin first (for a plugin that mapped
/// it wrongly); otherwise the stored mapping is kept. Either way the filter's `limit`
/// counts the events replayed, and an old version is not replayed over a newer one.
/// Returns how many were queued.
pub async fn replay(app: &http::App, filter: &store::Filter, remap: bool) -> anyhow::Result<u64> {
    if !remap {
        return Ok(app.store.replay(filter).await?);
    }
    /// Events read from the store at a time.
    const PAGE: u32 = 500;
    let limit = filter.limit.map_or(u64::MAX, u64::from);
    let mut replayed = 0;
    let mut after = None;
    while replayed < limit {
        let page = app.store.replayable(filter, after.as_ref(), PAGE).await?;
        let Some(last) = page.last().cloned() else {
            break;
        };
        for (_, endpoint, event_id) in &page {
            if replayed == limit {
                break;
            }
            replayed += remap_replay(app, endpoint, event_id)
                .await
                .with_context(|| {
                    format!("{endpoint}/{event_id} ({replayed} replayed before it)")
                })?;
        }
        after = Some(last);
    }
    Ok(replayed)
}

/// Map one stored event again with its endpoint's current plugin and replay it.
async fn remap_replay(app: &http::App, endpoint_id: &str, event_id: &str) -> anyhow::Result<u64> {
    let endpoint = app
        .endpoints
        .get(endpoint_id)
        .ok_or_else(|| anyhow::anyhow!("the endpoint is no longer configured"))?;
    let Some(receipt) = app.store.receipt(endpoint_id, event_id).await? else {
        return Ok(0);
    };
    let headers: Vec<(String, String)> = serde_json::from_str(&receipt.headers).unwrap_or_default();
    let body = tenancy::plain_body(app, endpoint_id, &receipt.body)
        .map_err(anyhow::Error::msg)?
        .into_owned();
    // A plugin call: on a plugin thread, as at ingest, at the URL it came to.
    let on_thread = endpoint.clone();
    let url = verify::stored_url(&app.public_url, endpoint_id, receipt.query.as_deref());
    let described = app
        .plugin_threads
        .run(move || verify::redescribe(&on_thread, &url, &headers, &body))
        .await
        .map_err(http::IngestError::from)
        .and_then(|described| described)
        .map_err(|e| anyhow::anyhow!("describe-event: {e}"))?;
    // What a live request would not deliver, a remap does not send: the operator
    // replays it as stored (without remap), or discards it.
    use hookhost_plugin_sdk::Disposition;
    match &described.disposition {
        Disposition::Process => {}
        Disposition::Ignore(reason) => {
            anyhow::bail!("the plugin now ignores it ({reason}): not replayed, nor mapped again")
        }
        Disposition::Reject(reason) => {
            anyhow::bail!("the plugin now rejects it ({reason}): not replayed, nor mapped again")
        }
        Disposition::Answer(_) => {
            anyhow::bail!(
                "the plugin now answers it as a handshake: not replayed, nor mapped again"
            )
        }
    }
    let info = &endpoint.plugin.info;
    Ok(app
        .store
        .remap_replay(
            endpoint_id,
            event_id,
            &described.event_type,
            store::Resource::of(&described).as_ref(),
            &info.version,
            &endpoint.plugin.digest,
        )
        .await?)
}
