//! The receipt writer: one task, one connection, group commit.
//!
//! Requests (and the worker pool's leases and results) queue here; the task takes
//! everything queued (up to [`MAX_BATCH`]), runs
//! each receipt's dedupe and version gate inside one transaction, commits once, and
//! then answers every request of the batch. While a commit is on its way to disk, the
//! next batch gathers, so concurrency turns into larger batches, not more fsyncs.

use super::delivery::{FinishRequest, LeaseRequest, finish_all, lease_in};
use super::{Leased, NewReceipt, Outcome, Resource, StoreError};
use sqlx::{Connection, Sqlite, SqliteConnection, Transaction};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, mpsc, oneshot};

/// Most receipts in one transaction: bounds the latency one batch adds to the next.
const MAX_BATCH: usize = 256;
/// Queue depth before senders wait.
const QUEUE: usize = 4096;
/// Longest a request waits for its commit before answering 503 (the sender retries;
/// if the commit did land, the retry is a duplicate).
const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// One write, done inside the next batch transaction; answered after its commit.
enum Work {
    Record(
        Box<NewReceipt>,
        oneshot::Sender<Result<Outcome, StoreError>>,
    ),
    Lease(
        Box<LeaseRequest>,
        oneshot::Sender<Result<Vec<Leased>, StoreError>>,
    ),
    Finish(Box<FinishRequest>, oneshot::Sender<Result<(), StoreError>>),
}

/// What a piece of work produced, before its commit is known.
enum Done {
    Record(Outcome),
    Lease(Vec<Leased>),
    Finish,
}

enum Job {
    Work(Work),
    Close(oneshot::Sender<()>),
}

#[derive(Debug, Clone)]
pub struct Writer {
    queue: mpsc::Sender<Job>,
}

pub fn spawn(conn: SqliteConnection, accepted: Arc<Notify>) -> Writer {
    let (queue, jobs) = mpsc::channel(QUEUE);
    tokio::spawn(run(conn, jobs, accepted));
    Writer { queue }
}

impl Writer {
    pub async fn record(&self, receipt: NewReceipt) -> Result<Outcome, StoreError> {
        self.submit(|reply| Work::Record(Box::new(receipt), reply))
            .await
    }

    /// Leases go through the writer too: one connection writes, so the worker pool
    /// never waits on SQLite's lock behind the receipt batches (its busy handler
    /// sleeps in steps of milliseconds), and leases share their batch's commit.
    pub async fn lease(&self, request: LeaseRequest) -> Result<Vec<Leased>, StoreError> {
        self.submit(|reply| Work::Lease(Box::new(request), reply))
            .await
    }

    pub async fn finish(&self, request: FinishRequest) -> Result<(), StoreError> {
        self.submit(|reply| Work::Finish(Box::new(request), reply))
            .await
    }

    async fn submit<T>(
        &self,
        work: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Work,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        let gone = || StoreError::Unavailable("receipt writer stopped".into());
        self.queue
            .send(Job::Work(work(reply)))
            .await
            .map_err(|_| gone())?;
        match tokio::time::timeout(COMMIT_TIMEOUT, answer).await {
            Ok(answer) => answer.map_err(|_| gone())?,
            Err(_) => Err(StoreError::Unavailable("commit timed out".into())),
        }
    }

    pub async fn close(&self) {
        let (done, wait) = oneshot::channel();
        if self.queue.send(Job::Close(done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

async fn run(mut conn: SqliteConnection, mut jobs: mpsc::Receiver<Job>, accepted: Arc<Notify>) {
    let mut batch: Vec<Work> = Vec::new();
    while let Some(job) = jobs.recv().await {
        let mut closing = None;
        match job {
            Job::Work(work) => batch.push(work),
            Job::Close(done) => closing = Some(done),
        }
        while closing.is_none() && batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(Job::Work(work)) => batch.push(work),
                Ok(Job::Close(done)) => closing = Some(done),
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            match commit(&mut conn, &batch).await {
                Ok(done) => {
                    if done
                        .iter()
                        .any(|d| matches!(d, Done::Record(Outcome::Accepted)))
                    {
                        accepted.notify_one();
                    }
                    for (work, done) in batch.drain(..).zip(done) {
                        answer(work, done);
                    }
                }
                Err(error) => {
                    tracing::error!(%error, writes = batch.len(), "write batch failed to commit");
                    for work in batch.drain(..) {
                        fail(work, error.clone());
                    }
                }
            }
        }
        if let Some(done) = closing {
            let _ = conn.close().await;
            let _ = done.send(());
            return;
        }
    }
}

fn answer(work: Work, done: Done) {
    match (work, done) {
        (Work::Record(_, reply), Done::Record(outcome)) => drop(reply.send(Ok(outcome))),
        (Work::Lease(_, reply), Done::Lease(leased)) => drop(reply.send(Ok(leased))),
        (Work::Finish(_, reply), Done::Finish) => drop(reply.send(Ok(()))),
        // `commit` answers each piece of work with its own kind, in order.
        (work, _) => fail(
            work,
            StoreError::Unavailable("write answered out of order".into()),
        ),
    }
}

fn fail(work: Work, error: StoreError) {
    match work {
        Work::Record(_, reply) => drop(reply.send(Err(error))),
        Work::Lease(_, reply) => drop(reply.send(Err(error))),
        Work::Finish(_, reply) => drop(reply.send(Err(error))),
    }
}

async fn commit(conn: &mut SqliteConnection, batch: &[Work]) -> Result<Vec<Done>, StoreError> {
    // IMMEDIATE: take the write lock up front. A deferred transaction that reads first
    // and writes later fails at once (no busy wait) if another connection (an
    // operator's) committed in between.
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    // Attempts first, all at once: a resource whose delivery just finished can have its
    // next event leased in this same transaction.
    let finished: Vec<&FinishRequest> = batch
        .iter()
        .filter_map(|work| match work {
            Work::Finish(request, _) => Some(&**request),
            _ => None,
        })
        .collect();
    finish_all(&mut tx, &finished).await?;
    let mut done = Vec::with_capacity(batch.len());
    for work in batch {
        done.push(match work {
            Work::Record(receipt, _) => Done::Record(record_one(&mut tx, receipt).await?),
            Work::Lease(request, _) => Done::Lease(lease_in(&mut tx, request).await?),
            Work::Finish(..) => Done::Finish,
        });
    }
    tx.commit().await?;
    for (work, done) in batch.iter().zip(&done) {
        if let (Work::Record(receipt, _), Done::Record(Outcome::Conflict)) = (work, done) {
            tracing::warn!(
                endpoint = %receipt.endpoint,
                event_id = %receipt.event_id,
                "conflicting duplicate: same event id, different body; first kept, second quarantined"
            );
        }
    }
    Ok(done)
}

/// Dedupe, then the version gate, then the insert: all inside the batch's transaction.
async fn record_one(
    tx: &mut Transaction<'_, Sqlite>,
    r: &NewReceipt,
) -> Result<Outcome, StoreError> {
    // One statement reads both what the dedupe and what the version gate need: each
    // statement is a round trip to SQLite's thread, and the writer is one task.
    let resource = r.resource.as_ref();
    let (existing, version, deleted): (Option<Vec<u8>>, Option<i64>, Option<bool>) =
        sqlx::query_as(
            "SELECT r.body_sha256, v.version, v.deleted FROM (SELECT 1)
             LEFT JOIN receipts AS r ON r.endpoint = ?1 AND r.event_id = ?2
             LEFT JOIN resource_versions AS v
                ON v.endpoint = ?1 AND v.resource_kind = ?3 AND v.resource_id = ?4",
        )
        .bind(&r.endpoint)
        .bind(&r.event_id)
        .bind(resource.map(|x| &x.kind))
        .bind(resource.map(|x| &x.id))
        .fetch_one(&mut **tx)
        .await?;
    let current = version.zip(deleted);
    let headers = serde_json::to_string(&r.headers).unwrap_or_else(|_| "[]".into());
    if let Some(digest) = existing {
        if digest == r.body_sha256 {
            return Ok(Outcome::Duplicate);
        }
        sqlx::query(
            "INSERT INTO conflicts (endpoint, event_id, body_sha256, body, headers, secret_index, received_at_ms)
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&r.endpoint)
        .bind(&r.event_id)
        .bind(r.body_sha256.as_slice())
        .bind(&r.body)
        .bind(&headers)
        .bind(r.secret_index as i64)
        .bind(r.received_at_ms)
        .execute(&mut **tx)
        .await?;
        return Ok(Outcome::Conflict);
    }

    let verdict = match (&r.ignore, &r.resource) {
        (Some(reason), _) => Verdict::Ignored(reason.clone()),
        (None, Some(resource)) => gate(tx, r, resource, current).await?,
        (None, None) => Verdict::Pending,
    };
    let (state, reason) = verdict.state();
    sqlx::query(
        "INSERT INTO receipts (endpoint, event_id, body_sha256, body, headers, secret_index,
            plugin, plugin_version, plugin_digest, message_id, event_type,
            resource_kind, resource_id, resource_version, deleted,
            occurred_at, signed_at, received_at_ms, state, state_reason)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(&r.endpoint)
    .bind(&r.event_id)
    .bind(r.body_sha256.as_slice())
    .bind(&r.body)
    .bind(&headers)
    .bind(r.secret_index as i64)
    .bind(&r.plugin)
    .bind(&r.plugin_version)
    .bind(&r.plugin_digest)
    .bind(&r.message_id)
    .bind(&r.event_type)
    .bind(resource.map(|x| &x.kind))
    .bind(resource.map(|x| &x.id))
    .bind(resource.and_then(|x| x.version).map(version_i64))
    .bind(resource.is_some_and(|x| x.deleted))
    .bind(r.occurred_at)
    .bind(r.signed_at)
    .bind(r.received_at_ms)
    .bind(state)
    .bind(reason)
    .execute(&mut **tx)
    .await?;
    Ok(verdict.into())
}

/// What happens to a receipt that is new to the store.
pub(super) enum Verdict {
    Pending,
    Stale,
    SameVersion,
    ResourceDeleted,
    Ignored(String),
}

impl Verdict {
    /// The stored `state` and `state_reason`.
    pub(super) fn state(&self) -> (&'static str, Option<&str>) {
        match self {
            Verdict::Pending => ("pending", None),
            Verdict::Stale => ("stale", Some("stale_version")),
            Verdict::SameVersion => ("ignored", Some("same_version")),
            Verdict::ResourceDeleted => ("ignored", Some("resource_deleted")),
            Verdict::Ignored(reason) => ("ignored", Some(reason)),
        }
    }
}

impl From<Verdict> for Outcome {
    fn from(verdict: Verdict) -> Outcome {
        match verdict {
            Verdict::Pending => Outcome::Accepted,
            Verdict::Stale => Outcome::StaleVersion,
            Verdict::SameVersion => Outcome::SameVersion,
            Verdict::ResourceDeleted => Outcome::ResourceDeleted,
            Verdict::Ignored(reason) => Outcome::Ignored(reason),
        }
    }
}

/// The version gate for one resource, given its `current` (version, tombstone): older →
/// stale, equal under another event id → ignored, newer → accepted and recorded; a
/// delete leaves a tombstone at its version.
async fn gate(
    tx: &mut Transaction<'_, Sqlite>,
    r: &NewReceipt,
    resource: &Resource,
    current: Option<(i64, bool)>,
) -> Result<Verdict, StoreError> {
    let Some(version) = resource.version.map(version_i64) else {
        // No version to order it by: only a tombstone can refuse it.
        return Ok(match current {
            Some((_, true)) => Verdict::ResourceDeleted,
            _ => Verdict::Pending,
        });
    };
    match current {
        Some((accepted, _)) if version < accepted => return Ok(Verdict::Stale),
        Some((accepted, _)) if version == accepted => return Ok(Verdict::SameVersion),
        _ => {}
    }
    sqlx::query(
        "INSERT INTO resource_versions (endpoint, resource_kind, resource_id, version, event_id, deleted)
         VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (endpoint, resource_kind, resource_id)
         DO UPDATE SET version = excluded.version, event_id = excluded.event_id, deleted = excluded.deleted",
    )
    .bind(&r.endpoint)
    .bind(&resource.kind)
    .bind(&resource.id)
    .bind(version)
    .bind(&r.event_id)
    .bind(resource.deleted)
    .execute(&mut **tx)
    .await?;
    Ok(Verdict::Pending)
}

/// Versions are u64 on the wire; SQLite integers are i64. Versions past i64::MAX
/// (no provider uses them) saturate, which keeps the order of every real version.
pub(super) fn version_i64(version: u64) -> i64 {
    i64::try_from(version).unwrap_or(i64::MAX)
}
