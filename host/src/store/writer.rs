//! The receipt writer: one thread, one connection, group commit.
//!
//! Requests (and the worker pool's leases and results) queue here; the thread takes
//! everything queued (up to [`MAX_BATCH`]), runs
//! each receipt's dedupe and version gate inside one transaction, commits once, and
//! then answers every request of the batch. While a commit is on its way to disk, the
//! next batch gathers, so concurrency turns into larger batches, not more fsyncs.
//!
//! The thread owns its SQLite connection (rusqlite, the same bundled SQLite as sqlx's)
//! and runs each batch start to finish without waiting on another thread: the batch is
//! the serial part of every request, and a hop per statement to a connection thread
//! (as sqlx runs SQLite) made each batch wait for a core about a dozen times.

use super::delivery::{FinishRequest, LeaseRequest, finish_all, lease_in};
use super::judge::{Described, Held, Judged, headers_json, judge, version_i64};
use super::{Leased, NewReceipt, Outcome, Reply, StoreError};
use rusqlite::{
    Connection, OpenFlags, OptionalExtension as _, Transaction, TransactionBehavior, params,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, mpsc, oneshot};

/// Most receipts in one transaction: bounds the latency one batch adds to the next.
pub(super) const MAX_BATCH: usize = 256;
/// Queue depth before senders wait.
pub(super) const QUEUE: usize = 4096;
/// Longest a request waits for its commit before answering 503 (the sender retries;
/// if the commit did land, the retry is a duplicate).
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// The answer to a write queued for a batch: `Unavailable` when the writer is gone or
/// the commit takes longer than [`COMMIT_TIMEOUT`].
pub(super) async fn committed<T>(
    answer: oneshot::Receiver<Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(COMMIT_TIMEOUT, answer).await {
        Ok(answer) => answer.map_err(|_| writer_gone())?,
        Err(_) => Err(StoreError::Unavailable("commit timed out".into())),
    }
}

/// The queue of receipts waiting for a batch is full: the store is far behind (a
/// stalled disk, say), and the sender should back off and retry rather than have its
/// request wait behind thousands of others (429, `overloaded`).
pub(super) fn queue_full() -> StoreError {
    StoreError::Overloaded
}

/// The writer's queue is closed: it stopped.
pub(super) fn writer_gone() -> StoreError {
    StoreError::Unavailable("receipt writer stopped".into())
}

/// One write, done inside the next batch transaction; answered after its commit.
enum Work {
    Record(Box<NewReceipt>, Reply),
    Lease(
        Box<LeaseRequest>,
        oneshot::Sender<Result<Vec<Leased>, StoreError>>,
    ),
    Finish(Box<FinishRequest>, oneshot::Sender<Result<(), StoreError>>),
    /// Nothing to write: answered with the batch's commit (see [`Writer::probe`]).
    Probe(oneshot::Sender<Result<(), StoreError>>),
}

/// What a piece of work produced, before its commit is known.
enum Done {
    Record(Outcome),
    Lease(Vec<Leased>),
    Finish,
    Probe,
}

enum Job {
    Work(Work),
    Close(oneshot::Sender<()>),
}

#[derive(Debug, Clone)]
pub struct Writer {
    queue: mpsc::Sender<Job>,
}

/// Open the writer's connection to a migrated store (see [`configure`]).
pub fn open(path: &Path, busy_timeout: Duration) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    configure(&conn, busy_timeout)?;
    Ok(conn)
}

/// The store's pragmas on a rusqlite connection: WAL, and `synchronous=FULL` (a
/// commit is on disk, not merely handed to the OS). The disk's commit probe takes
/// them from here too, so the yardstick commits as the writer does.
pub(super) fn configure(conn: &Connection, busy_timeout: Duration) -> Result<(), StoreError> {
    conn.busy_timeout(busy_timeout)?;
    let mode: String =
        conn.pragma_update_and_check(None, "journal_mode", "wal", |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Unavailable(format!(
            "the store's journal mode stayed {mode}, not WAL"
        )));
    }
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}

/// Start the writer's thread on `conn` (see [`open`]).
pub fn spawn(conn: Connection, accepted: Arc<Notify>) -> Result<Writer, StoreError> {
    let (queue, jobs) = mpsc::channel(QUEUE);
    std::thread::Builder::new()
        .name("hookhost-writer".into())
        .spawn(move || run(conn, jobs, &accepted))
        .map_err(|e| StoreError::Unavailable(format!("starting the receipt writer: {e}")))?;
    Ok(Writer { queue })
}

impl Writer {
    /// Queue a receipt for the next batch; `reply` gets its outcome. A closed queue
    /// drops the reply, which answers `Unavailable`.
    pub async fn queue(&self, receipt: Box<NewReceipt>, reply: Reply) {
        let _ = self
            .queue
            .send(Job::Work(Work::Record(receipt, reply)))
            .await;
    }

    /// [`Writer::queue`] without waiting, from any thread: a full queue answers
    /// `Overloaded` at once (see [`queue_full`]).
    pub fn queue_now(&self, receipt: Box<NewReceipt>, reply: Reply) {
        if let Err(mpsc::error::TrySendError::Full(Job::Work(Work::Record(_, reply)))) =
            self.queue.try_send(Job::Work(Work::Record(receipt, reply)))
        {
            reply.send(Err(queue_full()));
        }
        // Closed: the job is dropped, and its reply answers that the writer is gone.
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

    /// Whether the writer commits: answered with the next batch's commit (alone, an
    /// empty write transaction, which takes the write lock). A writer that stopped, or
    /// whose lock another connection holds past the busy timeout, answers an error.
    pub async fn probe(&self) -> Result<(), StoreError> {
        self.submit(Work::Probe).await
    }

    async fn submit<T>(
        &self,
        work: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Work,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Job::Work(work(reply)))
            .await
            .map_err(|_| writer_gone())?;
        committed(answer).await
    }

    pub async fn close(&self) {
        let (done, wait) = oneshot::channel();
        if self.queue.send(Job::Close(done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

fn run(mut conn: Connection, mut jobs: mpsc::Receiver<Job>, accepted: &Notify) {
    let mut batch: Vec<Work> = Vec::new();
    while let Some(job) = jobs.blocking_recv() {
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
            match commit(&mut conn, &batch) {
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
            drop(conn);
            let _ = done.send(());
            return;
        }
    }
}

fn answer(work: Work, done: Done) {
    match (work, done) {
        (Work::Record(_, reply), Done::Record(outcome)) => reply.send(Ok(outcome)),
        (Work::Lease(_, reply), Done::Lease(leased)) => drop(reply.send(Ok(leased))),
        (Work::Finish(_, reply), Done::Finish) => drop(reply.send(Ok(()))),
        (Work::Probe(reply), Done::Probe) => drop(reply.send(Ok(()))),
        // `commit` answers each piece of work with its own kind, in order.
        (work, _) => fail(
            work,
            StoreError::Unavailable("write answered out of order".into()),
        ),
    }
}

fn fail(work: Work, error: StoreError) {
    match work {
        Work::Record(_, reply) => reply.send(Err(error)),
        Work::Lease(_, reply) => drop(reply.send(Err(error))),
        Work::Finish(_, reply) => drop(reply.send(Err(error))),
        Work::Probe(reply) => drop(reply.send(Err(error))),
    }
}

fn commit(conn: &mut Connection, batch: &[Work]) -> Result<Vec<Done>, StoreError> {
    // IMMEDIATE: take the write lock up front. A deferred transaction that reads first
    // and writes later fails at once (no busy wait) if another connection (an
    // operator's) committed in between.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // Attempts first, all at once: a resource whose delivery just finished can have its
    // next event leased in this same transaction.
    let finished: Vec<&FinishRequest> = batch
        .iter()
        .filter_map(|work| match work {
            Work::Finish(request, _) => Some(&**request),
            _ => None,
        })
        .collect();
    finish_all(&tx, &finished)?;
    // Then every receipt of the batch, in arrival order, in a fixed number of
    // statements; leases come last and so can take what this batch accepted.
    let receipts: Vec<&NewReceipt> = batch
        .iter()
        .filter_map(|work| match work {
            Work::Record(receipt, _) => Some(&**receipt),
            _ => None,
        })
        .collect();
    let mut outcomes = record_all(&tx, &receipts)?.into_iter();
    let mut done = Vec::with_capacity(batch.len());
    for work in batch {
        done.push(match work {
            Work::Record(..) => Done::Record(outcomes.next().ok_or_else(|| {
                StoreError::Unavailable("a receipt of the batch was not recorded".into())
            })?),
            Work::Lease(request, _) => Done::Lease(lease_in(&tx, request)?),
            Work::Finish(..) => Done::Finish,
            Work::Probe(_) => Done::Probe,
        });
    }
    tx.commit()?;
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

/// A receipt as the batch stores it.
const INSERT_RECEIPT: &str = "INSERT INTO receipts (endpoint, event_id, body_sha256, body,
        headers, secret_index, plugin, plugin_version, plugin_digest, message_id, event_type,
        resource_kind, resource_id, resource_version, deleted,
        occurred_at, signed_at, received_at_ms, state, state_reason, source, query)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
             ?18, ?19, ?20, ?21, ?22)";

/// For one receipt of a batch: the body digest stored under its event id, and its
/// resource's accepted version and tombstone.
type HeldRow = (Option<(Vec<u8>, Option<Described>)>, Option<(i64, bool)>);

/// Dedupe, version gate and insert for every receipt of a batch, inside the batch's
/// transaction: what the store holds for each receipt's event id and resource (two
/// lookups by primary key), judging in memory in arrival order, then one insert per
/// row. Every statement is prepared once and kept.
fn record_all(tx: &Transaction<'_>, receipts: &[&NewReceipt]) -> Result<Vec<Outcome>, StoreError> {
    if receipts.is_empty() {
        return Ok(Vec::new());
    }
    let mut digest_of = tx.prepare_cached(
        "SELECT body_sha256, source, event_type, resource_kind, resource_id, resource_version
         FROM receipts WHERE endpoint = ?1 AND event_id = ?2",
    )?;
    let mut version_of = tx.prepare_cached(
        "SELECT version, deleted FROM resource_versions
         WHERE endpoint = ?1 AND resource_kind = ?2 AND resource_id = ?3",
    )?;
    let mut rows: Vec<HeldRow> = Vec::with_capacity(receipts.len());
    for r in receipts {
        let digest = digest_of
            .query_row(params![r.endpoint, r.event_id], |row| {
                let source: String = row.get(1)?;
                let listed = if source == crate::store::RECONCILED {
                    Some((row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?))
                } else {
                    None
                };
                Ok((row.get(0)?, listed))
            })
            .optional()?;
        let version = match &r.resource {
            Some(x) => version_of
                .query_row(params![r.endpoint, x.kind, x.id], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })
                .optional()?,
            None => None,
        };
        rows.push((digest, version));
    }
    let mut held = Held::default();
    for (r, (digest, version)) in receipts.iter().zip(&rows) {
        if let Some((digest, listed)) = digest {
            held.digests
                .insert((&r.endpoint, &r.event_id), (digest, listed.clone()));
        }
        if let (Some(x), Some(version)) = (&r.resource, version) {
            held.versions
                .insert((&r.endpoint, &x.kind, &x.id), *version);
        }
    }
    let Judged {
        outcomes,
        stored,
        conflicts,
        moved,
    } = judge(receipts, held);

    let mut insert = tx.prepare_cached(INSERT_RECEIPT)?;
    for (r, verdict) in &stored {
        let (state, reason) = verdict.state();
        let resource = r.resource.as_ref();
        insert.execute(params![
            r.endpoint,
            r.event_id,
            r.body_sha256.as_slice(),
            r.body,
            headers_json(r),
            r.secret_index as i64,
            r.plugin,
            r.plugin_version,
            r.plugin_digest,
            r.message_id,
            r.event_type,
            resource.map(|x| &x.kind),
            resource.map(|x| &x.id),
            resource.and_then(|x| x.version).map(version_i64),
            resource.is_some_and(|x| x.deleted),
            r.occurred_at,
            r.signed_at,
            r.received_at_ms,
            state,
            reason,
            r.source,
            r.query,
        ])?;
    }
    let mut upsert = tx.prepare_cached(
        "INSERT INTO resource_versions (endpoint, resource_kind, resource_id, version, event_id, deleted)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (endpoint, resource_kind, resource_id)
         DO UPDATE SET version = excluded.version, event_id = excluded.event_id,
                       deleted = excluded.deleted",
    )?;
    for &((endpoint, kind, id), version, event_id, deleted) in &moved {
        upsert.execute(params![endpoint, kind, id, version, event_id, deleted])?;
    }
    // A body already quarantined under the event id is kept once, however often it
    // is sent again.
    let mut quarantine = tx.prepare_cached(
        "INSERT INTO conflicts (endpoint, event_id, body_sha256, body, headers, secret_index, received_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (endpoint, event_id, body_sha256) DO NOTHING",
    )?;
    for r in &conflicts {
        quarantine.execute(params![
            r.endpoint,
            r.event_id,
            r.body_sha256.as_slice(),
            r.body,
            headers_json(r),
            r.secret_index as i64,
            r.received_at_ms,
        ])?;
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::super::judge::fixture;
    use super::super::operator::STATES;
    use super::super::sqlite::MIGRATOR;
    use super::*;
    use sqlx::ConnectOptions as _;

    /// One batch holds what separate transactions would have seen one after the other:
    /// each receipt is judged against the store plus the batch's earlier receipts.
    #[tokio::test]
    async fn one_batch_judges_its_receipts_in_arrival_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("batch.db");
        let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .connect()
            .await
            .expect("open");
        MIGRATOR.run(&mut conn).await.expect("migrate");
        let mut writer = open(&path, Duration::from_secs(5)).expect("writer's connection");
        let before: Vec<Work> = fixture::before().into_iter().map(work).collect();
        commit(&mut writer, &before).expect("first commit");

        let batch: Vec<Work> = fixture::batch().into_iter().map(work).collect();
        let done = commit(&mut writer, &batch).expect("batch commit");
        let outcomes: Vec<Outcome> = done
            .into_iter()
            .map(|d| match d {
                Done::Record(outcome) => outcome,
                _ => panic!("a receipt answered as another kind of work"),
            })
            .collect();
        assert_eq!(outcomes, fixture::outcomes());
        let states: Vec<(String, String)> =
            sqlx::query_as("SELECT event_id, state FROM receipts ORDER BY rowid")
                .fetch_all(&mut conn)
                .await
                .expect("receipts");
        assert_eq!(fixture::pairs(&states), fixture::STATES);
        let version: (i64, String, bool) = sqlx::query_as(
            "SELECT version, event_id, deleted FROM resource_versions WHERE resource_id = 'cus_1'",
        )
        .fetch_one(&mut conn)
        .await
        .expect("version");
        assert_eq!((version.0, version.1.as_str(), version.2), fixture::VERSION);
        let conflicts: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM conflicts")
            .fetch_one(&mut conn)
            .await
            .expect("conflicts");
        assert_eq!(conflicts, fixture::CONFLICTS);
    }

    /// Storing a receipt builds no temporary B-tree. For an IN list of more than two
    /// constants, as the state's CHECK was before migration 0009, SQLite builds one on
    /// every insert and change of state; the check is now a chain of comparisons, and
    /// still refuses a state it does not name.
    #[test]
    fn storing_a_receipt_builds_no_temporary_table() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = migrated_by_hand(&dir.path().join("plan.db"), i64::MAX);
        let mut explain = conn
            .prepare(&format!("EXPLAIN {INSERT_RECEIPT}"))
            .expect("explain");
        let unbound = vec![rusqlite::types::Null; explain.parameter_count()];
        let opcodes: Vec<String> = explain
            .query_map(rusqlite::params_from_iter(unbound), |row| row.get(1))
            .expect("plan")
            .collect::<Result<_, _>>()
            .expect("opcodes");
        assert!(opcodes.iter().any(|op| op == "Insert"), "{opcodes:?}");
        assert!(
            !opcodes.iter().any(|op| op == "OpenEphemeral"),
            "{opcodes:?}"
        );
        for state in STATES {
            insert_in_state(&conn, state).expect("a state the schema names");
        }
        let refused = insert_in_state(&conn, "lost").expect_err("an unknown state");
        assert!(refused.to_string().contains("CHECK"), "{refused}");
    }

    /// Migration 0009 rebuilds `receipts`: every row comes through it unchanged, in
    /// every column, and the indexes are back.
    #[test]
    fn the_state_check_rebuild_keeps_every_row() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = migrated_by_hand(&dir.path().join("old.db"), 8);
        for state in STATES {
            insert_in_state(&conn, state).expect("insert under the old schema");
        }
        conn.execute(
            "UPDATE receipts SET attempts = 3, next_attempt_at_ms = 9, lease_owner = 'w',
                lease_expires_at_ms = 10, last_error = 'timeout', delivered_at_ms = 11,
                source = 'reconcile', message_id = 'msg', resource_kind = 'invoice',
                resource_id = 'in_1', resource_version = 7, occurred_at = 5, signed_at = 6,
                state_reason = 'why'
             WHERE state = 'dead'",
            [],
        )
        .expect("fill every column of one row");
        let rows = |conn: &Connection| -> Vec<Vec<rusqlite::types::Value>> {
            let mut all = conn
                .prepare("SELECT * FROM receipts ORDER BY event_id")
                .expect("select");
            let columns = all.column_count();
            all.query_map([], |row| (0..columns).map(|i| row.get(i)).collect())
                .expect("rows")
                .collect::<Result<_, _>>()
                .expect("values")
        };
        let before = rows(&conn);
        let rebuild = MIGRATOR
            .iter()
            .find(|m| m.version == 9)
            .expect("migration 0009");
        conn.execute_batch(&rebuild.sql).expect("migration 0009");
        assert_eq!(rows(&conn), before);
        assert_eq!(before.len(), STATES.len());
        let indexes: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE tbl_name = 'receipts' AND type = 'index' AND sql IS NOT NULL ORDER BY name")
            .expect("indexes")
            .query_map([], |row| row.get(0))
            .expect("names")
            .collect::<Result<_, _>>()
            .expect("names");
        assert_eq!(
            indexes,
            ["receipts_delivered", "receipts_due", "receipts_resource"]
        );
    }

    fn insert_in_state(conn: &Connection, state: &str) -> rusqlite::Result<usize> {
        conn.execute(
            "INSERT INTO receipts (endpoint, event_id, body_sha256, body, headers, secret_index,
                plugin, plugin_version, plugin_digest, event_type, received_at_ms, state)
             VALUES ('stripe', ?1, x'00', x'7b7d', '[]', 0, 'stripe', '1.0.0', 'd', 't', 1, ?1)",
            params![state],
        )
    }

    /// A store file with the store's migrations up to `last` applied as plain SQL.
    fn migrated_by_hand(path: &Path, last: i64) -> Connection {
        let conn = Connection::open(path).expect("open");
        for migration in MIGRATOR.iter().filter(|m| m.version <= last) {
            conn.execute_batch(&migration.sql).expect("migration");
        }
        conn
    }

    fn work(receipt: NewReceipt) -> Work {
        // The answer goes nowhere: `commit` is judged by what it returns and stores.
        Work::Record(Box::new(receipt), Reply::new(drop))
    }
}
