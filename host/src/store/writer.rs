//! The receipt writer: one task, one connection, group commit.
//!
//! Requests queue here; the task takes everything queued (up to [`MAX_BATCH`]), runs
//! each receipt's dedupe and version gate inside one transaction, commits once, and
//! then answers every request of the batch. While a commit is on its way to disk, the
//! next batch gathers, so concurrency turns into larger batches, not more fsyncs.

use super::{NewReceipt, Outcome, Resource, StoreError};
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

type Reply = oneshot::Sender<Result<Outcome, StoreError>>;

enum Job {
    Record(Box<NewReceipt>, Reply),
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
        let (reply, answer) = oneshot::channel();
        let gone = || StoreError::Unavailable("receipt writer stopped".into());
        self.queue
            .send(Job::Record(Box::new(receipt), reply))
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
    let mut batch: Vec<(Box<NewReceipt>, Reply)> = Vec::new();
    while let Some(job) = jobs.recv().await {
        let mut closing = None;
        match job {
            Job::Record(r, reply) => batch.push((r, reply)),
            Job::Close(done) => closing = Some(done),
        }
        while closing.is_none() && batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(Job::Record(r, reply)) => batch.push((r, reply)),
                Ok(Job::Close(done)) => closing = Some(done),
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            let receipts: Vec<&NewReceipt> = batch.iter().map(|(r, _)| r.as_ref()).collect();
            match commit(&mut conn, &receipts).await {
                Ok(outcomes) => {
                    if outcomes.contains(&Outcome::Accepted) {
                        accepted.notify_one();
                    }
                    for ((_, reply), outcome) in batch.drain(..).zip(outcomes) {
                        let _ = reply.send(Ok(outcome));
                    }
                }
                Err(error) => {
                    tracing::error!(%error, receipts = batch.len(), "receipt batch failed to commit");
                    for (_, reply) in batch.drain(..) {
                        let _ = reply.send(Err(error.clone()));
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

async fn commit(
    conn: &mut SqliteConnection,
    batch: &[&NewReceipt],
) -> Result<Vec<Outcome>, StoreError> {
    // IMMEDIATE: take the write lock up front. A deferred transaction that reads first
    // and writes later fails at once (no busy wait) if another connection (the worker
    // pool's) committed in between.
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    let mut outcomes = Vec::with_capacity(batch.len());
    for receipt in batch {
        outcomes.push(record_one(&mut tx, receipt).await?);
    }
    tx.commit().await?;
    for (receipt, outcome) in batch.iter().zip(&outcomes) {
        if *outcome == Outcome::Conflict {
            tracing::warn!(
                endpoint = %receipt.endpoint,
                event_id = %receipt.event_id,
                "conflicting duplicate: same event id, different body; first kept, second quarantined"
            );
        }
    }
    Ok(outcomes)
}

/// Dedupe, then the version gate, then the insert: all inside the batch's transaction.
async fn record_one(
    tx: &mut Transaction<'_, Sqlite>,
    r: &NewReceipt,
) -> Result<Outcome, StoreError> {
    let existing: Option<Vec<u8>> =
        sqlx::query_scalar("SELECT body_sha256 FROM receipts WHERE endpoint = ? AND event_id = ?")
            .bind(&r.endpoint)
            .bind(&r.event_id)
            .fetch_optional(&mut **tx)
            .await?;
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
        (None, Some(resource)) => gate(tx, r, resource).await?,
        (None, None) => Verdict::Pending,
    };
    let (state, reason) = verdict.state();
    let resource = r.resource.as_ref();
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
enum Verdict {
    Pending,
    Stale,
    SameVersion,
    ResourceDeleted,
    Ignored(String),
}

impl Verdict {
    /// The stored `state` and `state_reason`.
    fn state(&self) -> (&'static str, Option<&str>) {
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

/// The version gate for one resource: older → stale, equal under another event id →
/// ignored, newer → accepted and recorded; a delete leaves a tombstone at its version.
async fn gate(
    tx: &mut Transaction<'_, Sqlite>,
    r: &NewReceipt,
    resource: &Resource,
) -> Result<Verdict, StoreError> {
    let current: Option<(i64, bool)> = sqlx::query_as(
        "SELECT version, deleted FROM resource_versions
         WHERE endpoint = ? AND resource_kind = ? AND resource_id = ?",
    )
    .bind(&r.endpoint)
    .bind(&resource.kind)
    .bind(&resource.id)
    .fetch_optional(&mut **tx)
    .await?;
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
fn version_i64(version: u64) -> i64 {
    i64::try_from(version).unwrap_or(i64::MAX)
}
