//! Reconciliation: page through the provider's list of events and repair the ones that
//! never arrived.
//!
//! The endpoint's plugin plans each page's request and reads each answer (the optional
//! `reconcile` interface); the host makes the request, adding the endpoint's API
//! credential, and only to a host the plugin declares (or the endpoint's configured
//! API base): a plan aimed anywhere else fails the run. A listed event with no receipt
//! is recorded like a push (same dedupe, same version gate, same delivery), marked
//! `source = reconcile`. The run's cursor and counts are written after every page with
//! that page's repairs, so a run that stops mid-way resumes from its cursor; one
//! process at a time runs an endpoint's reconciliation, so two never page one run or
//! overwrite each other's progress (`Store::lock_reconcile`). Requests
//! are paced (`requests_per_second`), a 429 waits its `Retry-After`, and a 5xx or a
//! failed connection is tried again a few times before the run fails.

use crate::config::{ApiAuth, ReconcileConfig};
use crate::endpoints::Endpoint;
use crate::http::App;
use crate::store::Leased;
use crate::store::{
    NewReceipt, Outcome, RECONCILED, RepairRow, Resource, RunLock, RunRow, StoreError,
};
use base64::Engine as _;
use hookhost_plugin_sdk::{Answer, Fetched, ReconcileInfo, Repair, RequestPlan, StoredEvent};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A page's answer may be this large at most.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;
/// One request to the provider's API: connect, send, read the whole answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Tries of one page after a 429, a 5xx or a connection failure.
const TRIES: u32 = 5;
/// Pages one run reads at most (a listing that never ends fails the run).
const MAX_PAGES: i64 = 10_000;
/// The longest wait a `Retry-After` gets before the run gives up on the page.
const LONGEST_RETRY_AFTER: Duration = Duration::from_secs(120);
/// How far before a resumed run's start the run after it looks back: a provider's
/// clock, which stamps its events, may be behind this one.
const RESUMED_OVERLAP_SECONDS: i64 = 300;

/// A request to the provider's API that failed, with how long the API asked to be left
/// alone (a 429's `Retry-After`): a thin event's delivery attempt is retried no sooner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct ApiFailure {
    pub error: String,
    pub retry_after: Option<Duration>,
}

impl From<String> for ApiFailure {
    fn from(error: String) -> Self {
        ApiFailure {
            error,
            retry_after: None,
        }
    }
}

impl From<ApiFailure> for String {
    fn from(failure: ApiFailure) -> Self {
        failure.error
    }
}

/// What to reconcile.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Events created at or after this, unix seconds.
    pub since: i64,
    /// Find and count, repair nothing.
    pub dry_run: bool,
}

/// Why a run could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("no endpoint {0:?}")]
    UnknownEndpoint(String),
    #[error("endpoint {0:?} has no [endpoint.reconcile] (API credential)")]
    NotConfigured(String),
    #[error("plugin {0} does not list the provider's events")]
    NotSupported(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Plugin(String),
    #[error("endpoint {0:?} is being reconciled already")]
    AlreadyRunning(String),
}

/// Endpoints with a run in progress in this process: one run per endpoint at a time
/// (across processes, the store's [`RunLock`](crate::store::RunLock)).
#[derive(Debug, Default)]
pub struct InProgress(std::sync::Mutex<Vec<String>>);

/// Holds an endpoint's place in [`InProgress`] until dropped.
struct Running<'a>(&'a InProgress, String);

impl InProgress {
    fn claim(&self, endpoint: &str) -> Result<Running<'_>, ReconcileError> {
        let mut running = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if running.iter().any(|e| e == endpoint) {
            return Err(ReconcileError::AlreadyRunning(endpoint.to_string()));
        }
        running.push(endpoint.to_string());
        Ok(Running(self, endpoint.to_string()))
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut running = self.0.0.lock().unwrap_or_else(|p| p.into_inner());
        running.retain(|e| *e != self.1);
    }
}

/// An endpoint reconciled on a schedule has a plugin that lists its provider's events
/// with its configuration (GitHub's, say, needs `config.reconcile`): refused when the
/// server starts, rather than found out one period later, and every period after, in
/// a warning.
pub fn check_schedule(endpoint: &Endpoint) -> Result<(), String> {
    if endpoint
        .reconcile
        .as_ref()
        .is_none_or(|r| r.every.is_none())
    {
        return Ok(());
    }
    let (at, plugin) = (
        format!("endpoint {:?}", endpoint.id),
        endpoint.plugin.name(),
    );
    let info = endpoint
        .plugin
        .reconcile_info(&endpoint.plugin_config)
        .map_err(|e| format!("{at}: reconcile: plugin {plugin} failed: {e}"))?;
    match info {
        Some(info) if info.lists_events => {
            let _ = endpoint.pull_info.set(Some(info));
            Ok(())
        }
        _ => Err(format!(
            "{at}: reconcile.every_seconds: plugin {plugin} does not list the provider's \
             events with this configuration"
        )),
    }
}

/// Reconcile every endpoint with `every_seconds` on its schedule (the first run one
/// period after start), looking back its `lookback_seconds` (and to where its last run
/// began: [`scheduled_since`]), until `stop`. Processes sharing a store share the
/// schedule: a process skips its turn when a run of the endpoint that looks back as
/// far started within the last half period (each process's turns are offset by up to
/// a tenth of the period, so they rarely look at once), and while another process's
/// run of it goes on.
pub async fn keep_reconciling(app: Arc<App>, stop: tokio::sync::watch::Receiver<bool>) {
    let scheduled: Vec<(String, Duration, Duration)> = app
        .endpoints
        .fixed()
        .iter()
        .filter_map(|endpoint| {
            let settings = endpoint.reconcile.as_ref()?;
            Some((endpoint.id.clone(), settings.every?, settings.lookback))
        })
        .collect();
    let mut tasks = tokio::task::JoinSet::new();
    for (endpoint, every, lookback) in scheduled {
        let (app, mut stop) = (app.clone(), stop.clone());
        let unit = f64::from(chacha20poly1305::aead::rand_core::RngCore::next_u32(
            &mut chacha20poly1305::aead::OsRng,
        )) / f64::from(u32::MAX);
        let offset = every.mul_f64(unit / 10.0);
        let (every_s, lookback_s) = (seconds(every), seconds(lookback));
        tasks.spawn(async move {
            // When this task's last run to end done began (unix seconds).
            let mut previous: Option<i64> = None;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every + offset) => {}
                    _ = stop.changed() => {}
                }
                if *stop.borrow() {
                    return;
                }
                let now_ms = crate::clock::now_ms();
                let since = scheduled_since(now_ms / 1000, every_s, lookback_s, previous);
                let recent = app.store.runs(Some(&endpoint), RECENT_RUNS).await;
                if let Some(run) = recent
                    .iter()
                    .flatten()
                    .find(|run| covers(run, since, now_ms, every))
                {
                    tracing::debug!(%endpoint, run = %run.id, "another process reconciled it just now");
                    continue;
                }
                let options = Options { since, dry_run: false };
                // A shutdown does not wait for a run: it stops between two writes of
                // its progress, and the next run resumes it.
                tokio::select! {
                    ran = run(&app, &endpoint, options) => {
                        match &ran {
                            Err(ReconcileError::AlreadyRunning(_)) => {
                                tracing::debug!(%endpoint, "another process is reconciling it");
                            }
                            Err(error) => {
                                tracing::warn!(%endpoint, %error, "scheduled reconciliation did not run");
                            }
                            Ok(_) => {}
                        }
                        previous = listed_from(previous, now_ms / 1000, &ran);
                    }
                    _ = stop.changed() => return,
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// The latest runs a scheduled turn looks at for one that makes it needless.
const RECENT_RUNS: i64 = 10;

fn seconds(time: Duration) -> i64 {
    i64::try_from(time.as_secs()).unwrap_or(i64::MAX)
}

/// Where a scheduled run that starts at `now` (unix seconds) looks back to: its
/// `lookback` and, after a run of this process that ended done began at `previous`,
/// to that start.
/// Turns come a period and more apart (the offset, the last run's own time), so a
/// run looking back only `lookback` (which may equal the period) would leave what was
/// created between the two unlisted. It looks back at most one period further.
fn scheduled_since(now: i64, every: i64, lookback: i64, previous: Option<i64>) -> i64 {
    let since = now.saturating_sub(lookback);
    match previous {
        Some(started) => since
            .min(started.saturating_sub(RESUMED_OVERLAP_SECONDS))
            .max(since.saturating_sub(every)),
        None => since,
    }
}

/// Where the next scheduled run looks back to, after a turn begun at `started` ended
/// as `ran`: only a run that listed everything (done) moves it; a refused, failed or
/// erring one leaves it where the last done run began.
fn listed_from(
    previous: Option<i64>,
    started: i64,
    ran: &Result<RunRow, ReconcileError>,
) -> Option<i64> {
    match ran {
        Ok(run) if run.state == "done" => Some(started),
        _ => previous,
    }
}

/// Whether `run` makes a scheduled turn looking back to `since` needless: not dry, not
/// failed, asked to look back as far, and begun within the last half period (by the
/// wall clock; a run that seems to begin later than now, after the clock was set
/// back, does not count).
fn covers(run: &RunRow, since: i64, now_ms: i64, every: Duration) -> bool {
    let half = i64::try_from(every.as_millis() / 2).unwrap_or(i64::MAX);
    let age = now_ms.saturating_sub(run.started_at_ms);
    !run.dry_run && run.state != "failed" && run.since <= since && (0..half).contains(&age)
}

/// Run reconciliation for `endpoint` now: resume its unfinished run when it has one
/// (and it is of the same kind, dry or not), else start one. A resumed run that is
/// done is followed by a run for what was created after it began. Returns the last
/// run as it ended (`done` or `failed`).
pub async fn run(
    app: &Arc<App>,
    endpoint: &str,
    options: Options,
) -> Result<RunRow, ReconcileError> {
    let _running = app.reconciling.claim(endpoint)?;
    let served = app
        .endpoints
        .get(endpoint)
        .ok_or_else(|| ReconcileError::UnknownEndpoint(endpoint.to_string()))?;
    let settings = served
        .reconcile
        .clone()
        .ok_or_else(|| ReconcileError::NotConfigured(endpoint.to_string()))?;
    let info = pull_info(app, &served)
        .await?
        .filter(|info| info.lists_events)
        .ok_or_else(|| ReconcileError::NotSupported(served.plugin.name().to_string()))?;
    let mut api =
        Api::new(settings, &info, Arc::clone(&served.api_pace)).map_err(ReconcileError::Plugin)?;
    // Another process's run is neither resumed nor superseded while it goes on: a run
    // left `running` without the lock is one whose process stopped.
    let mut held = app
        .store
        .lock_reconcile(endpoint)
        .await?
        .ok_or_else(|| ReconcileError::AlreadyRunning(endpoint.to_string()))?;
    let ran = runs(app, &served, &mut api, options, &mut held).await;
    held.release().await;
    ran
}

/// [`run`]'s runs, under the endpoint's lock.
async fn runs(
    app: &Arc<App>,
    served: &Arc<Endpoint>,
    api: &mut Api,
    options: Options,
    held: &mut RunLock,
) -> Result<RunRow, ReconcileError> {
    let endpoint = served.id.as_str();
    let mut since = options.since;
    loop {
        // An unfinished run of the same kind that looks back at least as far is resumed
        // (with its own `since`); one that looks back less far ends, superseded by the
        // new run. One of the other kind is left as it is: a dry run changes nothing,
        // a real run's progress included.
        let unfinished = app.store.unfinished_run(endpoint, options.dry_run).await?;
        let resumable = unfinished.as_ref().is_some_and(|run| run.since <= since);
        let mut run = match unfinished {
            Some(run) if resumable => {
                tracing::info!(endpoint, run = %run.id, cursor = ?run.cursor, "resuming a reconciliation run");
                run
            }
            other => begin(app, endpoint, since, options.dry_run, other).await?,
        };
        pages(app, served, api, &mut run, held).await?;
        if resumable && run.state == "done" {
            // Listing newest first, the resumed run saw only what existed when it
            // began: what was created since is looked at by a run of its own.
            since = options
                .since
                .max(run.started_at_ms / 1000 - RESUMED_OVERLAP_SECONDS);
            tracing::info!(endpoint, run = %run.id, since, "resumed run done; looking at what came after its start");
            continue;
        }
        return Ok(run);
    }
}

/// A new run from `since`, ending `superseded` (an unfinished run it replaces).
async fn begin(
    app: &Arc<App>,
    endpoint: &str,
    since: i64,
    dry_run: bool,
    superseded: Option<RunRow>,
) -> Result<RunRow, ReconcileError> {
    let run = RunRow::begun(
        format!("rec_{}", crate::tenancy::random_hex(8)),
        endpoint,
        since,
        dry_run,
        crate::clock::now_ms(),
    );
    app.store.create_run(&run).await?;
    if let Some(mut superseded) = superseded {
        superseded.state = "failed".into();
        superseded.last_error = Some(format!("superseded by run {}", run.id));
        superseded.ended_at_ms = Some(crate::clock::now_ms());
        app.store.save_run(&superseded, &[]).await?;
    }
    Ok(run)
}

/// Run `run`'s pages from its cursor to its last, or to its first failure, saving it
/// after each while the endpoint's lock is still `held` (a run whose lock was lost
/// stops unsaved; the next resumes it from its last save).
async fn pages(
    app: &Arc<App>,
    served: &Arc<Endpoint>,
    api: &mut Api,
    run: &mut RunRow,
    held: &mut RunLock,
) -> Result<(), ReconcileError> {
    let endpoint = served.id.as_str();
    loop {
        let mut repairs = Vec::new();
        match page(app, served, api, run, &mut repairs).await {
            Ok(()) => {
                let last = run.cursor.is_none();
                if last {
                    run.state = "done".into();
                    run.ended_at_ms = Some(crate::clock::now_ms());
                }
                held.still_held().await?;
                app.store.save_run(run, &repairs).await?;
                if last {
                    break;
                }
            }
            Err(error) => {
                tracing::warn!(endpoint, run = %run.id, %error, "reconciliation run failed");
                run.errors += 1;
                run.last_error = Some(error);
                run.state = "failed".into();
                run.ended_at_ms = Some(crate::clock::now_ms());
                // What the page repaired before it failed is kept with the counts.
                held.still_held().await?;
                app.store.save_run(run, &repairs).await?;
                break;
            }
        }
    }
    app.metrics.reconciled(run);
    tracing::info!(
        endpoint,
        run = %run.id,
        state = %run.state,
        pages = run.pages,
        seen = run.seen,
        present = run.present,
        repaired = run.repaired,
        "reconciliation run ended"
    );
    Ok(())
}

/// One page: plan, request, read, repair what is missing. Moves the run's cursor
/// (`None` after the last page) and counts; adds each repair to `repairs` as it is
/// made, so that a page failing halfway still tells what it did.
async fn page(
    app: &Arc<App>,
    endpoint: &Arc<Endpoint>,
    api: &mut Api,
    run: &mut RunRow,
    repairs: &mut Vec<RepairRow>,
) -> Result<(), String> {
    let (since, cursor) = (run.since, run.cursor.clone());
    let plan = on_plugin_thread(app, endpoint, move |e| {
        e.plugin
            .reconcile_request(&e.plugin_config, since, cursor.as_deref())
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|reason| format!("the plugin planned no request: {reason}"))?;
    let answer = api.call(&plan).await?;
    let page = on_plugin_thread(app, endpoint, move |e| {
        e.plugin.reconcile_page(&e.plugin_config, since, &answer)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|reason| format!("the plugin could not read the page: {reason}"))?;
    if page.next_cursor.is_some() && page.next_cursor == run.cursor {
        return Err("the plugin's cursor did not move: the listing would never end".into());
    }
    if page
        .next_cursor
        .as_deref()
        .is_some_and(|c| c.contains('\0'))
    {
        // Saved with the run after every page, where PostgreSQL refuses it.
        return Err("the plugin's cursor holds a NUL: it cannot be saved".into());
    }
    if run.pages + 1 >= MAX_PAGES && page.next_cursor.is_some() {
        return Err(format!("more than {MAX_PAGES} pages: narrow the look-back"));
    }
    for remote in page.events {
        run.seen += 1;
        let id = remote.event.id.clone().unwrap_or_default();
        // Without an id, or with an event no store keeps as it is (a NUL, an id past
        // 1 KiB), it can be neither looked up nor stored so that it is found: left for
        // the operator (a lookup of a NUL would fail the page on PostgreSQL).
        let keepable = !id.is_empty() && crate::verify::storable(&remote.event, None).is_ok();
        // A body past what a push may carry (a push of it is refused 413) is left for
        // the operator too: the API's answer may hold up to MAX_ANSWER_BYTES.
        let too_large =
            matches!(&remote.repair, Repair::Store(body) if body.len() > app.max_body_bytes);
        if keepable
            && app
                .store
                .receipt(&endpoint.id, &id)
                .await
                .map_err(|e| e.to_string())?
                .is_some()
        {
            run.present += 1;
            continue;
        }
        let event_type = remote.event.event_type.clone();
        // What became of the missing event, and whether that counts as repaired.
        let (result, repaired) = match (run.dry_run, remote.repair) {
            _ if !keepable => ("malformed_event".to_string(), false),
            _ if too_large => ("body_too_large".to_string(), false),
            (true, Repair::Store(_)) => ("would_repair".to_string(), true),
            (true, Repair::Redeliver(_)) => ("would_redeliver".to_string(), true),
            (false, Repair::Store(body)) => {
                match app
                    .store
                    .record(Box::new(receipt(endpoint, remote.event, body)))
                    .await
                {
                    Ok(Outcome::Accepted) => ("repaired".to_string(), true),
                    // A push arrived meanwhile.
                    Ok(Outcome::Duplicate) => {
                        run.present += 1;
                        continue;
                    }
                    Ok(other) => (
                        other.ignored_reason().unwrap_or("stored").to_string(),
                        false,
                    ),
                    Err(e) => return Err(format!("cannot store {id}: {e}")),
                }
            }
            // The provider sends it again, signed; it arrives as a push.
            (false, Repair::Redeliver(plan)) => {
                api.call(&plan).await?;
                ("redelivery_requested".to_string(), true)
            }
        };
        if repaired {
            run.repaired += 1;
        }
        tracing::info!(endpoint = %endpoint.id, event_id = %id, event_type = %event_type, %result, "reconciled a missing event");
        // Recorded under names the stores keep: a text they do not, by its digest.
        repairs.push(RepairRow {
            event_id: kept_text(id),
            event_type: kept_text(event_type),
            result,
            at_ms: crate::clock::now_ms(),
        });
    }
    run.pages += 1;
    run.cursor = page.next_cursor;
    Ok(())
}

/// `text`, or `sha256:` and its digest when no store keeps it as it is.
fn kept_text(text: String) -> String {
    if crate::verify::fits(&text) {
        text
    } else {
        format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
    }
}

/// A thin event's current object, fetched for a delivery attempt: `None` when the
/// endpoint has no API credential, or its plugin fetches nothing or says the event is
/// complete as sent. Each attempt fetches anew (one try: a failure fails the attempt,
/// retried on the endpoint's schedule), so what is delivered is the object's state
/// at delivery, versioned by the object.
pub async fn fetch_current(
    app: &Arc<App>,
    endpoint: &Arc<Endpoint>,
    event: &Leased,
    within: Duration,
) -> Result<Option<Fetched>, ApiFailure> {
    let Some(settings) = endpoint.reconcile.clone() else {
        return Ok(None);
    };
    let info = match pull_info(app, endpoint).await.map_err(|e| e.to_string())? {
        Some(info) if info.fetches_objects => info,
        _ => return Ok(None),
    };
    let stored = StoredEvent {
        id: event.event_id.clone(),
        event_type: event.event_type.clone(),
        resource_kind: event.resource_kind.clone(),
        resource_id: event.resource_id.clone(),
        body: event.body.clone(),
    };
    let asked = on_plugin_thread(app, endpoint, move |e| {
        e.plugin.fetch_request(&e.plugin_config, &stored)
    })
    .await
    .map_err(|e| e.to_string())?;
    let Some(plan) = asked else {
        return Ok(None);
    };
    let mut api = Api::new(settings, &info, Arc::clone(&endpoint.api_pace))?;
    api.tries = 1;
    // Half the attempt's time at most: the rest is the request's and the delivery's.
    api.wait_at_most = Some(within / 2);
    let answer = api.call(&plan).await?;
    let fetched = on_plugin_thread(app, endpoint, move |e| {
        e.plugin.fetch_result(&e.plugin_config, &answer)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|reason| format!("the plugin could not read the fetched object: {reason}"))?;
    if fetched.body.len() > app.max_body_bytes {
        // Delivered in the event's place, it is held to what a push may carry.
        return Err(format!(
            "the fetched object is {} bytes, past limits.max_body_bytes ({})",
            fetched.body.len(),
            app.max_body_bytes
        )
        .into());
    }
    Ok(Some(fetched))
}

/// A listed event as a receipt: what a push of it would have stored, without a
/// signature (none was made), marked as reconciled.
fn receipt(endpoint: &Endpoint, event: hookhost_plugin_sdk::Event, body: Vec<u8>) -> NewReceipt {
    let json = serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_ok();
    NewReceipt {
        endpoint: endpoint.id.clone(),
        event_id: event.id.clone().unwrap_or_default(),
        body_sha256: Sha256::digest(&body).into(),
        body: crate::tenancy::stored_body(endpoint, body),
        headers: if json {
            vec![("content-type".into(), "application/json".into())]
        } else {
            Vec::new()
        },
        secret_index: 0,
        plugin: endpoint.plugin.info.name.clone(),
        plugin_version: endpoint.plugin.info.version.clone(),
        plugin_digest: endpoint.plugin.digest.clone(),
        message_id: None,
        query: None,
        resource: Resource::of(&event),
        event_type: event.event_type,
        occurred_at: event.occurred_at,
        signed_at: None,
        received_at_ms: crate::clock::now_ms(),
        ignore: None,
        source: RECONCILED,
    }
}

/// What the endpoint's plugin can pull for the endpoint's configuration. Asked once
/// per built endpoint (a plugin is a pure function of its configuration), so a
/// delivery does not start an instance to learn it; a failed call is asked again.
pub async fn pull_info(
    app: &Arc<App>,
    endpoint: &Arc<Endpoint>,
) -> Result<Option<ReconcileInfo>, ReconcileError> {
    if let Some(info) = endpoint.pull_info.get() {
        return Ok(info.clone());
    }
    let info =
        on_plugin_thread(app, endpoint, |e| e.plugin.reconcile_info(&e.plugin_config)).await?;
    let _ = endpoint.pull_info.set(info.clone());
    Ok(info)
}

/// A plugin call, on a plugin thread (as every call).
async fn on_plugin_thread<T: Send + 'static>(
    app: &Arc<App>,
    endpoint: &Arc<Endpoint>,
    call: impl FnOnce(&Endpoint) -> Result<T, crate::plugins::PluginFailure> + Send + 'static,
) -> Result<T, ReconcileError> {
    let endpoint = endpoint.clone();
    app.plugin_threads
        .run(move || call(&endpoint))
        .await
        .map_err(|e| ReconcileError::Plugin(e.to_string()))?
        .map_err(|e| ReconcileError::Plugin(format!("plugin {e}")))
}

/// When the next request to one endpoint's API may go (`None`: at once).
pub type Pace = std::sync::Mutex<Option<Instant>>;

/// The provider's API as one endpoint reaches it: where, with which credential, how
/// fast.
struct Api {
    settings: ReconcileConfig,
    /// The API base URL (the endpoint's override, else the plugin's).
    base: hyper::Uri,
    /// Hosts a plan may address with an absolute URL.
    hosts: Vec<String>,
    /// The endpoint's, shared by every run and fetch.
    pace: Arc<Pace>,
    /// Tries of one request (see [`Api::call`]).
    tries: u32,
    /// The longest a request may wait for its moment (a thin event's fetch: half the
    /// time its attempt has); none for a run.
    wait_at_most: Option<Duration>,
}

impl Api {
    fn new(
        settings: ReconcileConfig,
        info: &ReconcileInfo,
        pace: Arc<Pace>,
    ) -> Result<Api, String> {
        let base = settings
            .api_base
            .clone()
            .unwrap_or_else(|| info.api_base.trim_end_matches('/').to_string());
        let uri: hyper::Uri = base
            .parse()
            .map_err(|e| format!("the API base {base:?} is not a URL: {e}"))?;
        if uri.host().is_none() || !matches!(uri.scheme_str(), Some("https" | "http")) {
            return Err(format!("the API base {base:?} is not an http(s) URL"));
        }
        Ok(Api {
            base: uri,
            hosts: info.hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
            settings,
            pace,
            tries: TRIES,
            wait_at_most: None,
        })
    }

    /// Where a plan goes: a path on the API base, or an absolute `https://` URL on a
    /// declared host (or the base's own). Anything else is refused.
    fn resolve(&self, target: &str) -> Result<hyper::Uri, String> {
        if target.starts_with('/') {
            let base = self.base.to_string();
            return format!("{}{target}", base.trim_end_matches('/'))
                .parse()
                .map_err(|e| format!("the plugin's request target {target:?}: {e}"));
        }
        let uri: hyper::Uri = target
            .parse()
            .map_err(|e| format!("the plugin's request target {target:?}: {e}"))?;
        let host = uri.host().unwrap_or_default().to_ascii_lowercase();
        let same_as_base = self
            .base
            .host()
            .is_some_and(|b| b.eq_ignore_ascii_case(&host))
            && uri.scheme_str() == self.base.scheme_str()
            && uri.port_u16() == self.base.port_u16();
        let declared = uri.scheme_str() == Some("https") && self.hosts.contains(&host);
        if same_as_base || declared {
            Ok(uri)
        } else {
            Err(format!(
                "refused: the plugin aimed a request at {host:?}, which it does not declare \
                 (declared: {}); the credential is never sent there",
                self.hosts.join(", ")
            ))
        }
    }

    /// Make the planned request, paced, with the credential; a 2xx answer. A 429 waits
    /// its `Retry-After`; a 5xx or a failed connection waits 1, 2, 4… s; both up to
    /// [`TRIES`] times.
    async fn call(&mut self, plan: &RequestPlan) -> Result<Answer, ApiFailure> {
        let uri = self.resolve(&plan.target)?;
        let mut backoff = Duration::from_secs(1);
        for attempt in 1..=self.tries {
            self.pace().await?;
            let failure = match tokio::time::timeout(REQUEST_TIMEOUT, self.send(&uri, plan)).await {
                Err(_) => format!("no answer within {REQUEST_TIMEOUT:?}"),
                Ok(Err(error)) => error,
                Ok(Ok((answer, retry_after))) => match answer.status {
                    200..=299 => return Ok(answer),
                    429 => {
                        // A date already past (a clock behind the API's) asks no wait:
                        // the backoff's, then.
                        let wait = retry_after.filter(|w| !w.is_zero()).unwrap_or(backoff);
                        let limited = |error| ApiFailure {
                            error,
                            retry_after: Some(wait),
                        };
                        if wait > LONGEST_RETRY_AFTER {
                            return Err(limited(format!(
                                "429 with Retry-After {wait:?}: giving up"
                            )));
                        }
                        // The last try (a fetch's only one) does not wait for nothing.
                        if attempt == self.tries {
                            return Err(limited(format!(
                                "the provider's API is rate limiting (429, Retry-After {wait:?})"
                            )));
                        }
                        tracing::info!(uri = %uri.path(), ?wait, "the provider's API is rate limiting");
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                    500..=599 => format!("the provider's API answered {}", answer.status),
                    status => {
                        // Quoted in the run's error, which is stored, logged and
                        // answered: without the credential, should the API echo it.
                        let head = &answer.body[..answer.body.len().min(4096)];
                        let text = self.redacted(&String::from_utf8_lossy(head));
                        let quoted: String = text.chars().take(300).collect();
                        return Err(
                            format!("the provider's API answered {status}: {quoted}").into()
                        );
                    }
                },
            };
            if attempt == self.tries {
                return Err(failure.into());
            }
            tracing::info!(uri = %uri.path(), attempt, %failure, "the provider's API request failed; trying again");
            tokio::time::sleep(backoff).await;
            backoff *= 2;
        }
        Err("no answer".to_string().into())
    }

    /// Wait until the next request keeps within `requests_per_second`, counting
    /// every request to the endpoint's API (runs and fetches): each takes the next
    /// free moment and moves it on by one gap. A request whose moment is further off
    /// than it may wait fails now and takes none: taken, a moment no request would
    /// use pushes every later one further off.
    async fn pace(&self) -> Result<(), String> {
        let gap = Duration::from_secs(1) / self.settings.requests_per_second;
        let due = {
            let mut next = self
                .pace
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let now = Instant::now();
            let due = next.map_or(now, |next| next.max(now));
            if let Some(most) = self.wait_at_most
                && due > now + most
            {
                let (ahead, rate) = ((due - now).as_millis(), self.settings.requests_per_second);
                return Err(format!(
                    "the provider's API is paced {ahead} ms ahead ({rate} requests a second), \
                     past what this attempt may wait"
                ));
            }
            *next = Some(due + gap);
            due
        };
        tokio::time::sleep_until(due.into()).await;
        Ok(())
    }

    /// One request on a fresh connection: the answer and its `Retry-After`.
    async fn send(
        &self,
        uri: &hyper::Uri,
        plan: &RequestPlan,
    ) -> Result<(Answer, Option<Duration>), String> {
        let host = uri.host().ok_or("no host")?.to_string();
        let https = uri.scheme_str() == Some("https");
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let address = format!("{host}:{port}");
        let tls = https
            .then(|| crate::worker::Tls::new(&host, None))
            .transpose()?;
        let mut sender = crate::worker::connect(&address, tls.as_ref()).await?;
        let mut request = hyper::Request::builder()
            .method(plan.method.as_str())
            .uri(crate::worker::origin_form(uri))
            .header(
                "host",
                uri.authority().map_or(host.as_str(), |a| a.as_str()),
            )
            .header(
                "user-agent",
                concat!("hookhost/", env!("CARGO_PKG_VERSION")),
            );
        for (name, value) in &plan.headers {
            // The credential is the host's to add; a plugin cannot set or replace it.
            if is_credential_header(name, &self.settings.auth) {
                continue;
            }
            request = request.header(name.as_str(), value.as_str());
        }
        let (auth_name, auth_value) = self.authorization();
        let request = request
            .header(auth_name.as_str(), auth_value.as_str())
            .body(Full::new(Bytes::from(plan.body.clone())))
            .map_err(|e| format!("cannot build the request: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("request to {address}: {e}"))?;
        let status = response.status().as_u16();
        // The plugin reads the answer: nothing of the credential goes with it, should
        // the API echo it back (as sent, or bare).
        let credential = self.settings.credential.expose().as_bytes();
        let headers =
            crate::verify::owned_headers(response.headers().iter().filter(|(name, value)| {
                !matches!(
                    name.as_str(),
                    "authorization" | "proxy-authorization" | "set-cookie"
                ) && !contains(value.as_bytes(), credential)
                    && !contains(value.as_bytes(), auth_value.as_bytes())
            }));
        let retry_after = crate::worker::retry_after(response.headers());
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading the answer from {address}: {e}"))?
            .to_bytes()
            .to_vec();
        Ok((
            Answer {
                status,
                headers,
                body,
            },
            retry_after,
        ))
    }

    /// `text` with the credential replaced, in each form it is sent in.
    fn redacted(&self, text: &str) -> String {
        let (_, sent) = self.authorization();
        let mut forms = vec![sent.clone(), self.settings.credential.expose().to_string()];
        forms.extend(sent.strip_prefix("Basic ").map(str::to_string));
        forms
            .iter()
            .filter(|form| !form.is_empty())
            .fold(text.to_string(), |text, form| {
                text.replace(form.as_str(), "[redacted]")
            })
    }

    /// The credential, as the endpoint's `auth` says to send it.
    fn authorization(&self) -> (String, String) {
        let credential = self.settings.credential.expose();
        match &self.settings.auth {
            ApiAuth::Bearer => ("authorization".into(), format!("Bearer {credential}")),
            ApiAuth::Basic => {
                let pair = if credential.contains(':') {
                    credential.to_string()
                } else {
                    format!("{credential}:")
                };
                let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
                ("authorization".into(), format!("Basic {encoded}"))
            }
            ApiAuth::Header(name) => (name.clone(), credential.to_string()),
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

fn is_credential_header(name: &str, auth: &ApiAuth) -> bool {
    name.eq_ignore_ascii_case("authorization")
        || matches!(auth, ApiAuth::Header(own) if name.eq_ignore_ascii_case(own))
}

/// `24h`, `30m`, `7d`, `90s` (or plain seconds) before now, as unix seconds; or a
/// unix timestamp (10 digits or more) as given.
pub fn parse_since(text: &str, now: i64) -> Result<i64, String> {
    let text = text.trim();
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: i64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected 24h, 30m, 7d, 90s or a unix timestamp"))?;
    let unit_seconds = match unit {
        // A timestamp past now looks at nothing, and the run would report success:
        // most likely milliseconds, where seconds are meant.
        "" if number.len() >= 10 && n > now => {
            return Err(format!(
                "{text:?}: in the future (a timestamp is unix seconds)"
            ));
        }
        "" if number.len() >= 10 => return Ok(n),
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => {
            return Err(format!(
                "{text:?}: expected 24h, 30m, 7d, 90s or a unix timestamp"
            ));
        }
    };
    n.checked_mul(unit_seconds)
        .and_then(|seconds| now.checked_sub(seconds))
        .ok_or_else(|| format!("{text:?}: too far back"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scheduled runs leave no time unlisted between them, however late a turn comes,
    /// and look back at most one period further than `lookback_seconds`.
    #[test]
    fn a_scheduled_run_looks_back_to_where_the_last_began() {
        let (every, lookback) = (3600, 3600);
        let first = scheduled_since(100_000, every, lookback, None);
        assert_eq!(first, 100_000 - 3600);
        // The next turn, 200 s late (the offset, the run's own time).
        let next = scheduled_since(103_800, every, lookback, Some(100_000));
        assert_eq!(next, 100_000 - RESUMED_OVERLAP_SECONDS);
        // A turn a day later looks back one period further, not a day.
        let late = scheduled_since(186_400, every, lookback, Some(100_000));
        assert_eq!(late, 186_400 - 7200);
        // A lookback far longer than the period already covers the gap.
        let long = scheduled_since(103_800, every, 86_400, Some(100_000));
        assert_eq!(long, 103_800 - 86_400);
    }

    /// A turn moves where the next looks back to only when its run listed everything.
    #[test]
    fn only_a_done_run_moves_where_the_next_looks_back_to() {
        let ended = |state: &str| {
            let mut run = RunRow::begun("rec_x".into(), "e", 0, false, 0);
            run.state = state.into();
            Ok(run)
        };
        assert_eq!(listed_from(Some(100), 200, &ended("done")), Some(200));
        assert_eq!(listed_from(None, 200, &ended("done")), Some(200));
        assert_eq!(listed_from(Some(100), 200, &ended("failed")), Some(100));
        let refused = Err(ReconcileError::AlreadyRunning("e".into()));
        assert_eq!(listed_from(Some(100), 200, &refused), Some(100));
        let erred = Err(ReconcileError::Store(StoreError::Overloaded));
        assert_eq!(listed_from(None, 200, &erred), None);
    }

    /// Only a run that does a scheduled turn's work, just now, makes the turn needless.
    #[test]
    fn a_turn_is_skipped_only_for_a_run_that_covers_it() {
        let every = Duration::from_secs(3600);
        let now_ms = 200_000_000;
        let run = |dry_run: bool, since: i64, started_at_ms: i64| {
            RunRow::begun("rec_x".into(), "e", since, dry_run, started_at_ms)
        };
        let since = 190_000;
        assert!(covers(
            &run(false, since, now_ms - 60_000),
            since,
            now_ms,
            every
        ));
        assert!(covers(
            &run(false, since - 10, now_ms - 60_000),
            since,
            now_ms,
            every
        ));
        assert!(
            !covers(&run(true, since, now_ms - 60_000), since, now_ms, every),
            "dry"
        );
        let mut failed = run(false, since, now_ms - 60_000);
        failed.state = "failed".into();
        assert!(!covers(&failed, since, now_ms, every), "failed");
        assert!(
            !covers(
                &run(false, since + 1, now_ms - 60_000),
                since,
                now_ms,
                every
            ),
            "shorter"
        );
        assert!(
            !covers(&run(false, since, now_ms - 1_800_000), since, now_ms, every),
            "old"
        );
        assert!(
            !covers(&run(false, since, now_ms + 60_000), since, now_ms, every),
            "clock set back"
        );
    }

    #[test]
    fn since_reads_ages_and_timestamps() {
        let now = 1_700_000_000;
        assert_eq!(parse_since("24h", now), Ok(now - 86_400));
        assert_eq!(parse_since("30m", now), Ok(now - 1_800));
        assert_eq!(parse_since("7d", now), Ok(now - 604_800));
        assert_eq!(parse_since("90", now), Ok(now - 90));
        assert_eq!(parse_since("1690000000", now), Ok(1_690_000_000));
        assert!(parse_since("yesterday", now).is_err());
        assert!(parse_since("3w", now).is_err());
        // A timestamp in milliseconds is 1,000 times too late: refused, not run empty.
        assert_eq!(
            parse_since("1690000000000", now),
            Err("\"1690000000000\": in the future (a timestamp is unix seconds)".into())
        );
        assert_eq!(parse_since(&now.to_string(), now), Ok(now));
        // Overflowing ages are refused, not wrapped (nor a panic in a debug build).
        assert_eq!(
            parse_since("9999999999999999d", now),
            Err("\"9999999999999999d\": too far back".into())
        );
    }

    fn api(base: Option<&str>) -> Api {
        let settings = ReconcileConfig {
            credential: crate::verify::Secret::new("sk_test"),
            auth: ApiAuth::Bearer,
            api_base: base.map(str::to_string),
            lookback: Duration::from_secs(3600),
            every: None,
            requests_per_second: 5,
        };
        let info = ReconcileInfo {
            hosts: vec!["api.stripe.com".into()],
            api_base: "https://api.stripe.com".into(),
            lists_events: true,
            fetches_objects: false,
        };
        Api::new(settings, &info, Arc::default()).expect("a valid base")
    }

    /// Runs and fetches of one endpoint share its pace: at 5 requests a second, three
    /// requests through two of its `Api`s take at least two gaps of 200 ms.
    #[tokio::test]
    async fn an_endpoints_requests_share_one_pace() {
        let first = api(None);
        let second = Api {
            pace: Arc::clone(&first.pace),
            ..api(None)
        };
        let started = Instant::now();
        for api in [&first, &second, &first] {
            api.pace().await.expect("paced");
        }
        assert!(
            started.elapsed() >= Duration::from_millis(400),
            "{:?}",
            started.elapsed()
        );
    }

    /// A request whose moment is further off than it may wait fails at once and
    /// takes no moment: the next request's is where it would have been without it.
    #[tokio::test]
    async fn a_request_that_cannot_wait_for_its_moment_takes_none() {
        let mut first = api(None);
        first.settings.requests_per_second = 1;
        let hurried = Api {
            pace: Arc::clone(&first.pace),
            wait_at_most: Some(Duration::from_millis(100)),
            ..api(None)
        };
        let booked = || first.pace.lock().map(|next| *next).ok().flatten();
        first.pace().await.expect("the first moment is now");
        let after_first = booked();
        // The next moment is a second off, past the 100 ms it may wait.
        let refused = hurried.pace().await.expect_err("refused");
        assert!(refused.contains("paced"), "{refused}");
        assert_eq!(booked(), after_first);
        first.pace().await.expect("paced");
        assert_eq!(booked(), after_first.map(|at| at + Duration::from_secs(1)));
    }

    /// A fetch's only try answered 429 fails at once, with the wait the API asked for:
    /// the delivery attempt is retried on the endpoint's schedule, and no sooner.
    #[tokio::test]
    async fn the_last_try_answered_429_does_not_wait() {
        let failure = limited_once("100").await;
        assert!(
            failure
                .error
                .contains("rate limiting (429, Retry-After 100s)"),
            "{failure}"
        );
        assert_eq!(failure.retry_after, Some(Duration::from_secs(100)));
    }

    /// A 429 whose `Retry-After` date is already past asks the backoff's wait, not
    /// none: the next try does not follow at once.
    #[tokio::test]
    async fn a_retry_after_date_already_past_waits_the_backoff() {
        let failure = limited_once("Wed, 21 Oct 2015 07:28:00 GMT").await;
        assert_eq!(failure.retry_after, Some(Duration::from_secs(1)));
    }

    /// A fetch's only try of an API that answers every request 429 with `retry_after`.
    async fn limited_once(retry_after: &'static str) -> ApiFailure {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let limited = axum::Router::new().fallback(move || async move {
            (
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", retry_after)],
                "slow down",
            )
        });
        tokio::spawn(async move { axum::serve(listener, limited).await });
        let base = format!("http://{address}");
        let mut fetching = api(Some(base.as_str()));
        fetching.tries = 1;
        let answered = tokio::time::timeout(
            Duration::from_secs(30),
            fetching.call(&RequestPlan::get("/v1/objects/1".to_string())),
        )
        .await
        .expect("answered without waiting out the Retry-After");
        answered.expect_err("refused")
    }

    #[test]
    fn plans_go_only_to_the_base_or_a_declared_https_host() {
        let stripe = api(None);
        assert_eq!(
            stripe.resolve("/v1/events?limit=1").map(|u| u.to_string()),
            Ok("https://api.stripe.com/v1/events?limit=1".into())
        );
        assert!(stripe.resolve("https://api.stripe.com/v1/events").is_ok());
        assert!(stripe.resolve("https://evil.example/v1/events").is_err());
        assert!(stripe.resolve("http://api.stripe.com/v1/events").is_err());
        let local = api(Some("http://127.0.0.1:9"));
        assert_eq!(
            local.resolve("/v1/events").map(|u| u.to_string()),
            Ok("http://127.0.0.1:9/v1/events".into())
        );
        assert!(local.resolve("http://127.0.0.1:9/v1/x").is_ok());
        assert!(local.resolve("http://127.0.0.1:10/v1/x").is_err());
    }
}
