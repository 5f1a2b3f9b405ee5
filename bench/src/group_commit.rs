//! The store's share of the SQLite ratio: hookhost's own `Store` on a new SQLite file,
//! fed by concurrent tasks in this process, with no HTTP and no plugin call. Each
//! receipt is the one the ingest route would store for the bench's 1 KiB event (its
//! id, type and resource from the Stripe parser run natively, its headers without the
//! signature), built before the clock starts. The rate says what group commit gives on
//! this disk; beside the full path's rate it says how much of a request's cost is not
//! the store.

use crate::event::{self, StripeEvent};
use crate::usage;
use anyhow::{Context as _, anyhow, ensure};
use hookhost::store::{NewReceipt, Outcome, PUSHED, Resource, Store};
use hookhost_plugin_sdk::Provider as _;
use hookhost_plugin_sdk::testing::RequestBuilder;
use sha2::{Digest as _, Sha256};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The endpoint the receipts are stored under.
const ENDPOINT: &str = "stripe";

/// What the store alone did.
#[derive(Debug)]
pub struct GroupCommit {
    pub tasks: usize,
    /// Receipts timed (after the warm-up), every one answered `Accepted`.
    pub receipts: u64,
    pub elapsed: Duration,
    /// This process's CPU over the timed receipts: the writer's thread and the tasks.
    pub cpu: Duration,
}

impl GroupCommit {
    pub fn rate(&self) -> f64 {
        self.receipts as f64 / self.elapsed.as_secs_f64()
    }

    pub fn cpu_per_receipt(&self) -> Duration {
        self.cpu / u32::try_from(self.receipts).unwrap_or(u32::MAX)
    }
}

/// `warmup` receipts, then `receipts` timed, each stored by one of `tasks` tasks that
/// keep one receipt in flight each, into a new SQLite file in `dir`.
pub async fn measure(
    dir: &Path,
    size: usize,
    created: i64,
    tasks: usize,
    warmup: u64,
    receipts: u64,
) -> anyhow::Result<GroupCommit> {
    ensure!(tasks > 0, "the store needs at least one task to feed it");
    let path = dir.join("group-commit.db");
    let store = Store::open_sqlite(&path)
        .await
        .with_context(|| format!("opening {}", path.display()))?;
    let events = StripeEvent::new(size, created)?;
    let built = |count: u64| -> anyhow::Result<Vec<NewReceipt>> {
        (0..count)
            .map(|_| receipt(&events, event::next_number(), created))
            .collect()
    };
    let first = built(warmup)?;
    feed(&store, tasks, first).await?;
    let timed = built(receipts)?;
    let cpu_before = usage::cpu_time(None)?;
    let started = Instant::now();
    feed(&store, tasks, timed).await?;
    let elapsed = started.elapsed();
    let cpu = usage::cpu_time(None)?.saturating_sub(cpu_before);
    let stored = store.count_receipts(ENDPOINT).await?;
    store.close().await;
    ensure!(
        u64::try_from(stored).ok() == Some(warmup + receipts),
        "the store holds {stored} receipts, not the {} it accepted",
        warmup + receipts
    );
    Ok(GroupCommit {
        tasks,
        receipts,
        elapsed,
        cpu,
    })
}

/// Store every receipt, `tasks` at a time (each boxed as the ingest route boxes it);
/// each must be accepted.
async fn feed(store: &Store, tasks: usize, receipts: Vec<NewReceipt>) -> anyhow::Result<()> {
    let queue = Arc::new(std::sync::Mutex::new(receipts));
    let mut running = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let (store, queue) = (store.clone(), queue.clone());
        running.spawn(async move {
            loop {
                // The lock guards a plain list: a panic elsewhere cannot leave it torn.
                let next = queue
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .pop();
                let Some(receipt) = next else {
                    return Ok(());
                };
                let id = receipt.event_id.clone();
                match store.record(Box::new(receipt)).await {
                    Ok(Outcome::Accepted) => {}
                    Ok(other) => return Err(anyhow!("{id}: the store answered {other:?}")),
                    Err(error) => return Err(anyhow!("{id}: {error}")),
                }
            }
        });
    }
    while let Some(done) = running.join_next().await {
        done.context("a task feeding the store stopped")??;
    }
    Ok(())
}

/// The receipt the ingest route stores for event number `n`.
fn receipt(events: &StripeEvent, n: u64, created: i64) -> anyhow::Result<NewReceipt> {
    let (body, signature) = events.signed(n, created)?;
    let headers = [
        ("host", "127.0.0.1:8080".to_string()),
        ("content-type", "application/json".to_string()),
        ("content-length", body.len().to_string()),
    ];
    let mut request = RequestBuilder::post(&format!("http://127.0.0.1:8080/webhooks/{ENDPOINT}"));
    for (name, value) in &headers {
        request = request.header(name, value);
    }
    let request = request
        .header("stripe-signature", &signature)
        .body(&body)
        .build();
    let plan = stripe::Stripe::plan_verification(&request)
        .map_err(|r| anyhow!("the stripe parser refused event {n}'s plan: {r:?}"))?;
    let event = stripe::Stripe::describe_event(&request)
        .map_err(|r| anyhow!("the stripe parser refused event {n}: {r:?}"))?;
    let event_id = event.id.clone().context("the bench's event has no id")?;
    Ok(NewReceipt {
        endpoint: ENDPOINT.into(),
        event_id,
        body_sha256: Sha256::digest(&body).into(),
        body,
        headers: headers
            .into_iter()
            .map(|(name, value)| (name.to_string(), value))
            .collect(),
        secret_index: 0,
        plugin: "stripe".into(),
        plugin_version: env!("CARGO_PKG_VERSION").into(),
        // A component's digest is this long; its value does not matter here.
        plugin_digest: hex::encode(Sha256::digest(b"stripe")),
        message_id: plan.message_id,
        event_type: event.event_type.clone(),
        resource: Resource::of(&event),
        occurred_at: event.occurred_at,
        signed_at: plan.timestamp,
        received_at_ms: created * 1000,
        ignore: None,
        source: PUSHED,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every receipt the tasks hand the store is stored once, as a new receipt.
    #[tokio::test]
    async fn the_store_alone_stores_every_receipt_it_is_fed() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let measured = measure(dir.path(), 1024, crate::unix_now(), 8, 20, 300).await?;
        assert_eq!(measured.receipts, 300);
        assert!(measured.rate() > 0.0);
        let store = Store::open_sqlite(&dir.path().join("group-commit.db")).await?;
        assert_eq!(store.count_receipts(ENDPOINT).await?, 320);
        store.close().await;
        Ok(())
    }
}
