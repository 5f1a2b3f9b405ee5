//! The store's share of the SQLite ratio: hookhost's own `Store` on a new SQLite file,
//! fed by concurrent tasks in this process, with no HTTP and no plugin call. Each
//! receipt is the one the ingest route stores for the bench's 1 KiB event, judged by
//! the built-in Stripe plugin and built by the route's own `receipt` before the clock
//! starts. The rate says what group commit gives on this disk; beside the full path's
//! rate it says how much of a request's cost is not the store.

use crate::event::{self, StripeEvent};
use crate::usage;
use anyhow::{Context as _, anyhow, ensure};
use hookhost::endpoints::Endpoint;
use hookhost::http::ingest;
use hookhost::store::{NewReceipt, Outcome, Store};
use hookhost::verify::{self, MessageSource, Trail};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    endpoint: &Endpoint,
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
            .map(|_| receipt(endpoint, &events, event::next_number(), created))
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
    let stored = store.count_receipts(&endpoint.id).await?;
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
                // A receipt is named by its place in the list, which the clock does not
                // pay for as it would for a copy of its event id.
                let next = {
                    let mut list = queue
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    list.pop().map(|receipt| (list.len(), receipt))
                };
                let Some((place, receipt)) = next else {
                    return Ok(());
                };
                let refused = match store.record(Box::new(receipt)).await {
                    Ok(Outcome::Accepted) => continue,
                    Ok(other) => format!("the store answered {other:?}"),
                    Err(error) => error.to_string(),
                };
                return Err(anyhow!("the receipt at {place} in the list: {refused}"));
            }
        });
    }
    while let Some(done) = running.join_next().await {
        done.context("a task feeding the store stopped")??;
    }
    Ok(())
}

/// The receipt the ingest route stores for event number `n`: the endpoint's plugin
/// and secret judge it (`verify::judge`), and the route's own `receipt` builds it.
fn receipt(
    endpoint: &Endpoint,
    events: &StripeEvent,
    n: u64,
    created: i64,
) -> anyhow::Result<NewReceipt> {
    let (body, signature) = events.signed(n, created)?;
    let headers = crate::stripe_headers(&body, signature);
    let url = crate::request_url();
    let source = MessageSource {
        method: "POST",
        url: &url,
        headers: &headers,
        body: &body,
    };
    let verified = verify::judge(endpoint, &source, created, &mut Trail::default())
        .with_context(|| format!("verify::judge refused event {n}"))?;
    Ok(ingest::receipt(
        endpoint,
        verified,
        &url,
        headers,
        body,
        created * 1000,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every receipt the tasks hand the store is stored once, as a new receipt.
    #[tokio::test]
    async fn the_store_alone_stores_every_receipt_it_is_fed() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let catalog = hookhost::plugins::Catalog::load(None, crate::at_cap::limits())?;
        let endpoint = crate::stripe_endpoint(&catalog)?;
        let measured = measure(dir.path(), &endpoint, 1024, crate::unix_now(), 8, 20, 300).await?;
        assert_eq!(measured.receipts, 300);
        assert!(measured.rate() > 0.0);
        let store = Store::open_sqlite(&dir.path().join("group-commit.db")).await?;
        assert_eq!(store.count_receipts(&endpoint.id).await?, 320);
        store.close().await;
        Ok(())
    }
}
