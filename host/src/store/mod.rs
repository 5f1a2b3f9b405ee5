//! The store: durable receipts, dedupe, the version gate and the inbox.
//!
//! Owns every database row, on SQLite (embedded, the default) or PostgreSQL (several
//! processes, one database), with the same promises on both. On SQLite one writer
//! task commits receipts; concurrent requests queue behind it and are committed
//! together in one transaction (group commit), and each is answered only after that
//! transaction is durable (WAL with `synchronous=FULL`). On PostgreSQL receipts are
//! committed in batches too, and the database's constraints and row locks keep the
//! promises across processes. A failed transaction answers `Unavailable`. Never sees a
//! secret or a plugin.

/// Run `$body` with `$pool` bound to the backend's pool for writes (SQLite: the one
/// worker connection) or for reads; the same statement text on both.
macro_rules! on_pool {
    ($store:expr, writes, $pool:ident => $body:expr) => {
        match &$store.backend {
            Backend::Sqlite(s) => {
                let $pool = &s.worker;
                $body
            }
            Backend::Postgres(p) => {
                let $pool = &p.pool;
                $body
            }
        }
    };
    ($store:expr, reads, $pool:ident => $body:expr) => {
        match &$store.backend {
            Backend::Sqlite(s) => {
                let $pool = &s.readers;
                $body
            }
            Backend::Postgres(p) => {
                let $pool = &p.pool;
                $body
            }
        }
    };
}

mod delivery;
mod forensics;
mod judge;
mod operator;
mod postgres;
mod reconcile;
mod seen;
mod sqlite;
mod tenancy;
mod writer;

pub use delivery::{AttemptRecord, Leased, Next};
pub use forensics::{ForensicFilter, ForensicRow, ForensicSummary, NewForensic};
pub use operator::{Filter, Position, Summary};
pub use reconcile::{RepairRow, RunLock, RunRow};
pub use tenancy::{
    Added, Edited, ManagedEndpoint, Paused, RegistryRows, Retired, SealedSecret, TenantPlugin,
    TenantRow,
};

pub use sqlite::{ReceiptRow, single_commit_rate};
pub use writer::COMMIT_TIMEOUT;

pub use postgres::PgStore;
use sqlite::SqliteStore;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Handle to the store, whichever database holds it; cheap to clone. Every method
/// keeps the same promises on every backend.
#[derive(Debug, Clone)]
pub struct Store {
    backend: Backend,
    /// Exact duplicates answered from memory (see [`seen`]).
    seen: Arc<seen::Seen>,
}

#[derive(Debug, Clone)]
enum Backend {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl Store {
    /// Open the store the configuration names, applying its migrations.
    pub async fn open(config: &crate::config::StoreConfig) -> Result<Store, StoreError> {
        match config {
            crate::config::StoreConfig::Sqlite(path) => Store::open_sqlite(path).await,
            crate::config::StoreConfig::Postgres(pg) => {
                Ok(Store::on(Backend::Postgres(PgStore::open(pg).await?)))
            }
        }
    }

    /// Open (creating if needed) the SQLite file, apply migrations, start the writer.
    pub async fn open_sqlite(path: &Path) -> Result<Store, StoreError> {
        Ok(Store::on(Backend::Sqlite(SqliteStore::open(path).await?)))
    }

    fn on(backend: Backend) -> Store {
        Store {
            backend,
            seen: Arc::default(),
        }
    }

    /// Store a verified request: dedupe, version gate, inbox, one durable commit.
    /// An exact duplicate of a receipt this process saw committed is answered at
    /// once: no store read, no wait for another request's commit. The receipt stays in
    /// the box it was built in until its batch is done with it.
    pub async fn record(&self, receipt: Box<NewReceipt>) -> Result<Outcome, StoreError> {
        let (reply, answer) = Reply::channel();
        if let Some((receipt, reply)) = self.remembering(receipt, reply) {
            match &self.backend {
                Backend::Sqlite(store) => store.writer.queue(receipt, reply).await,
                Backend::Postgres(store) => store.batcher.queue(receipt, reply).await,
            }
        }
        writer::committed(answer).await
    }

    /// [`Store::record`] without waiting, from any thread (a plugin thread, which has
    /// no async runtime): the receipt joins the next batch and `reply` is called once
    /// with its outcome, on the thread that commits it, so that nothing wakes in
    /// between. When thousands of receipts already wait for a batch (a stalled disk),
    /// `reply` answers `Overloaded` at once: the caller never blocks.
    pub fn queue(&self, receipt: Box<NewReceipt>, reply: Reply) {
        if let Some((receipt, reply)) = self.remembering(receipt, reply) {
            match &self.backend {
                Backend::Sqlite(store) => store.writer.queue_now(receipt, reply),
                Backend::Postgres(store) => store.batcher.queue_now(receipt, reply),
            }
        }
    }

    /// An exact duplicate seen committed is answered here (`None`); any other receipt
    /// goes on, its reply made to remember it once it is durable.
    fn remembering(
        &self,
        receipt: Box<NewReceipt>,
        reply: Reply,
    ) -> Option<(Box<NewReceipt>, Reply)> {
        let key = seen::Key::new(&receipt.endpoint, &receipt.event_id, &receipt.body_sha256);
        if self.seen.contains(&key) {
            reply.send(Ok(Outcome::Duplicate));
            return None;
        }
        let seen = Arc::clone(&self.seen);
        let reply = Reply::new(move |outcome| {
            // Every outcome but a conflict means a receipt of this event is durable,
            // and this body would be answered alike again.
            if matches!(&outcome, Ok(o) if *o != Outcome::Conflict) {
                seen.insert(key);
            }
            reply.send(outcome);
        });
        Some((receipt, reply))
    }
}

/// Where a queued receipt's outcome goes: called once, after its batch commits or
/// fails. Dropped uncalled (its writer gone), it answers `Unavailable`, so a request
/// is never left waiting.
pub struct Reply(Option<Box<dyn FnOnce(Answer) + Send>>);

/// A queued receipt's outcome.
type Answer = Result<Outcome, StoreError>;

impl Reply {
    pub fn new(to: impl FnOnce(Answer) + Send + 'static) -> Reply {
        Reply(Some(Box::new(to)))
    }

    /// A reply to await: the receiver gets the outcome (see `writer::committed`).
    pub(crate) fn channel() -> (Reply, tokio::sync::oneshot::Receiver<Answer>) {
        let (reply, answer) = tokio::sync::oneshot::channel();
        (Reply::new(move |outcome| drop(reply.send(outcome))), answer)
    }

    pub fn send(mut self, outcome: Answer) {
        if let Some(to) = self.0.take() {
            to(outcome);
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(to) = self.0.take() {
            to(Err(writer::writer_gone()));
        }
    }
}

/// Reads whose SQL is the same on both backends (sqlx binds `$N` on SQLite too).
impl Store {
    /// Wake the delivery workers: events may be due now (after a replay, say).
    fn wake_workers(&self) {
        match &self.backend {
            Backend::Sqlite(s) => s.accepted.notify_one(),
            Backend::Postgres(p) => p.accepted.notify_one(),
        }
    }

    /// Per endpoint with pending events: how many, and when the oldest was received.
    /// The partial index of pending receipts serves it.
    pub async fn backlog(&self) -> Result<Vec<Backlog>, StoreError> {
        const SQL: &str = "SELECT endpoint, COUNT(*), MIN(received_at_ms) FROM receipts
                           WHERE state = 'pending' GROUP BY endpoint ORDER BY endpoint";
        Ok(match &self.backend {
            Backend::Sqlite(s) => sqlx::query_as(SQL).fetch_all(&s.readers).await?,
            Backend::Postgres(p) => sqlx::query_as(SQL).fetch_all(&p.pool).await?,
        })
    }

    /// (secret index, receipts) for an endpoint's receipts since `since_ms`: which
    /// active secret has been verifying its requests (0 = current).
    pub async fn secret_use(
        &self,
        endpoint: &str,
        since_ms: i64,
    ) -> Result<Vec<(i64, i64)>, StoreError> {
        const SQL: &str = "SELECT secret_index, COUNT(*) FROM receipts
                           WHERE endpoint = $1 AND received_at_ms >= $2
                           GROUP BY secret_index ORDER BY secret_index";
        Ok(match &self.backend {
            Backend::Sqlite(s) => {
                let query = sqlx::query_as(SQL).bind(endpoint).bind(since_ms);
                query.fetch_all(&s.readers).await?
            }
            Backend::Postgres(p) => {
                let query = sqlx::query_as(SQL).bind(endpoint).bind(since_ms);
                query.fetch_all(&p.pool).await?
            }
        })
    }

    /// Whether this store takes requests now. On SQLite the receipt writer commits a
    /// probe (its thread runs, and the write lock is its own within the busy timeout)
    /// and a reader answers; a read alone would say ready while every receipt fails.
    /// On PostgreSQL, a read through the pool.
    pub async fn ready(&self) -> Result<(), StoreError> {
        if let Backend::Sqlite(s) = &self.backend {
            s.writer.probe().await?;
        }
        self.paused().await.map(drop)
    }

    /// Whether the store holds anything of `endpoint`'s (one since removed, say): an
    /// event, a kept request or a reconciliation run.
    pub async fn holds(&self, endpoint: &str) -> Result<bool, StoreError> {
        const SQL: &str = "SELECT EXISTS (SELECT 1 FROM receipts WHERE endpoint = $1)
                               OR EXISTS (SELECT 1 FROM forensics WHERE endpoint = $1)
                               OR EXISTS (SELECT 1 FROM reconcile_runs WHERE endpoint = $1)";
        Ok(on_pool!(self, reads, pool => {
            sqlx::query_scalar(SQL).bind(endpoint).fetch_one(pool).await?
        }))
    }

    /// An endpoint's stored requests, newest first: at most `n`, from the newest or
    /// after the position `after` (the last one read: its arrival time and event id).
    pub async fn recent_requests(
        &self,
        endpoint: &str,
        n: u32,
        after: Option<(i64, &str)>,
    ) -> Result<Vec<StoredRequest>, StoreError> {
        const SQL: &str = "SELECT event_id, headers, body, received_at_ms, query FROM receipts
                           WHERE endpoint = $1 AND (CAST($3 AS BIGINT) IS NULL
                               OR received_at_ms < $3 OR (received_at_ms = $3 AND event_id > $4))
                           ORDER BY received_at_ms DESC, event_id LIMIT $2";
        let (at, id) = after.unzip();
        Ok(on_pool!(self, reads, pool => {
            sqlx::query_as(SQL)
                .bind(endpoint)
                .bind(i64::from(n))
                .bind(at)
                .bind(id)
                .fetch_all(pool)
                .await?
        }))
    }

    /// An endpoint's most recently received receipt.
    pub async fn latest_receipt(&self, endpoint: &str) -> Result<Option<ReceiptRow>, StoreError> {
        const SQL: &str = "SELECT event_id, state, state_reason, event_type, secret_index,
                                  body, headers, resource_version, attempts, last_error, source, query
                           FROM receipts WHERE endpoint = $1
                           ORDER BY received_at_ms DESC LIMIT 1";
        Ok(match &self.backend {
            Backend::Sqlite(s) => {
                let query = sqlx::query_as(SQL).bind(endpoint);
                query.fetch_optional(&s.readers).await?
            }
            Backend::Postgres(p) => {
                let query = sqlx::query_as(SQL).bind(endpoint);
                query.fetch_optional(&p.pool).await?
            }
        })
    }
}

/// Each method of `Store` is the backend's method of the same name and signature.
macro_rules! forward {
    ($(
        $(#[$doc:meta])*
        fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;
    )*) => {
        impl Store {
            $(
                $(#[$doc])*
                pub async fn $name(&self $(, $arg: $ty)*) -> $ret {
                    match &self.backend {
                        Backend::Sqlite(store) => store.$name($($arg),*).await,
                        Backend::Postgres(store) => store.$name($($arg),*).await,
                    }
                }
            )*
        }
    };
}

forward! {
    /// Resolves when new events may be due; the worker pool waits on it between polls.
    fn due_events(&self) -> ();
    /// One receipt, if stored.
    fn receipt(&self, endpoint: &str, event_id: &str) -> Result<Option<ReceiptRow>, StoreError>;
    /// Receipts stored for an endpoint.
    fn count_receipts(&self, endpoint: &str) -> Result<i64, StoreError>;
    /// Conflicting duplicates quarantined for an endpoint.
    fn count_conflicts(&self, endpoint: &str) -> Result<i64, StoreError>;
    /// Close connections (pending writes finish first).
    fn close(&self) -> ();
    /// Lease up to `limit` due receipts of `endpoints` for `owner`, until `now + lease`.
    fn lease_due(&self, owner: &str, endpoints: &[String], now_ms: i64, lease: Duration, limit: u32) -> Result<Vec<Leased>, StoreError>;
    /// Record an attempt; the receipt moves on only while `owner` holds its lease.
    fn finish_attempt(&self, leased: &Leased, owner: &str, attempt: &AttemptRecord, next: &Next) -> Result<(), StoreError>;
    /// Give back every lease `owner` holds (graceful shutdown), due at once.
    fn release_leases(&self, owner: &str) -> Result<u64, StoreError>;
    /// Attempts recorded for one event: (number, status, error), in order.
    fn attempts(&self, endpoint: &str, event_id: &str) -> Result<Vec<(i64, Option<i64>, Option<String>)>, StoreError>;
    /// Receipts matching a filter, oldest first.
    fn list(&self, filter: &Filter) -> Result<Vec<Summary>, StoreError>;
    /// Make matching dead, quarantined, delivered or discarded receipts pending again,
    /// under their original event ids, unless their resource has a newer version
    /// delivered or pending.
    fn replay(&self, filter: &Filter) -> Result<u64, StoreError>;
    /// One receipt with its attempts, as JSON.
    fn show(&self, endpoint: &str, event_id: &str) -> Result<Option<serde_json::Value>, StoreError>;
    /// The next events a replay could take, in arrival order after a position.
    fn replayable(&self, filter: &Filter, after: Option<&Position>, limit: u32) -> Result<Vec<Position>, StoreError>;
    /// Discard a receipt with a reason (never deleted).
    fn discard(&self, endpoint: &str, event_id: &str, reason: &str) -> Result<bool, StoreError>;
    /// Pause or resume an endpoint's delivery as an operator: the pause holds against
    /// the tenant API; the resume lifts a tenant's pause too.
    fn set_paused(&self, endpoint: &str, paused: bool, now_ms: i64) -> Result<(), StoreError>;
    /// Endpoints whose delivery is paused.
    fn paused(&self) -> Result<Vec<String>, StoreError>;
    /// Delete what the retention lets go: delivered receipts (and their attempts)
    /// older than `retention.delivered`, except one whose resource has an older
    /// version that may still be replayed; dead letters, quarantined receipts (from
    /// their last attempt) and conflicts only when `retention.dead` is set. Never a
    /// pending receipt.
    fn purge(&self, now_ms: i64, retention: &crate::config::RetentionConfig) -> Result<Purged, StoreError>;
}

/// What one purge deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    pub receipts: u64,
    pub attempts: u64,
    pub conflicts: u64,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A file to hold an `flock` on beside the SQLite database (created, with its
/// directory, if need be; never truncated): a process's reconciliation lock, or the
/// migrations'.
fn lock_file_at(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
}

/// Refuse a database whose schema has a migration this binary does not know: an
/// older hookhost must not write rows a newer one's schema means differently.
fn refuse_newer_schema(
    applied: Option<i64>,
    migrator: &sqlx::migrate::Migrator,
) -> Result<(), StoreError> {
    let known = migrator.iter().map(|m| m.version).max().unwrap_or(0);
    match applied {
        Some(applied) if applied > known => Err(StoreError::Schema(format!(
            "the database schema is at version {applied}, newer than this hookhost knows ({known}): upgrade hookhost"
        ))),
        _ => Ok(()),
    }
}

/// A stored request, as it came (`Store::recent_requests`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredRequest {
    pub event_id: String,
    /// JSON `[name, value]` pairs, credentials removed.
    pub headers: String,
    /// As stored: sealed, for a sealing tenant.
    pub body: Vec<u8>,
    pub received_at_ms: i64,
    /// The query of the URL it came to (see [`NewReceipt::query`]).
    pub query: Option<String>,
}

/// Everything a verified request leaves behind.
#[derive(Debug, Clone)]
pub struct NewReceipt {
    pub endpoint: String,
    pub event_id: String,
    pub body_sha256: [u8; 32],
    pub body: Vec<u8>,
    /// `[name, value]` pairs, credentials already removed.
    pub headers: Vec<(String, String)>,
    pub secret_index: usize,
    pub plugin: String,
    pub plugin_version: String,
    pub plugin_digest: String,
    pub message_id: Option<String>,
    pub event_type: String,
    pub resource: Option<Resource>,
    pub occurred_at: Option<i64>,
    pub signed_at: Option<i64>,
    pub received_at_ms: i64,
    /// `Some(reason)` when the plugin asked to keep but not deliver the event.
    pub ignore: Option<String>,
    /// How it came: [`PUSHED`] or [`RECONCILED`].
    pub source: &'static str,
    /// The query of the URL it came to, without the `?` (see `verify::stored_url`).
    pub query: Option<String>,
}

/// A receipt the provider pushed.
pub const PUSHED: &str = "push";
/// A receipt reconciliation pulled from the provider's API (no push arrived).
pub const RECONCILED: &str = "reconcile";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub kind: String,
    pub id: String,
    pub version: Option<u64>,
    pub deleted: bool,
}

impl Resource {
    /// The resource a described event names, when it names both kind and id.
    pub fn of(event: &hookhost_plugin_sdk::Event) -> Option<Resource> {
        match (&event.resource_kind, &event.resource_id) {
            (Some(kind), Some(id)) => Some(Resource {
                kind: kind.clone(),
                id: id.clone(),
                version: event.resource_version,
                deleted: event.deleted,
            }),
            _ => None,
        }
    }
}

/// An endpoint's pending events: (endpoint, how many, oldest `received_at_ms`).
pub type Backlog = (String, i64, i64);

/// What the store decided for one receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// New, stored as pending.
    Accepted,
    /// Same event id, same body: nothing changed.
    Duplicate,
    /// Same event id, different body: first evidence kept, second quarantined.
    Conflict,
    /// Older than the resource's accepted version: stored as stale.
    StaleVersion,
    /// The resource was deleted and the event is not newer than the delete: it carries
    /// no version to order it, or the delete's own.
    ResourceDeleted,
    /// The plugin's ignore disposition.
    Ignored(String),
}

impl Outcome {
    /// Why a receipt was received but not queued, as the sender is answered
    /// (`{"ignored": reason}`); `None` for accepted and duplicate.
    pub fn ignored_reason(&self) -> Option<&str> {
        match self {
            Outcome::Accepted | Outcome::Duplicate => None,
            Outcome::Conflict => Some("conflicting_duplicate"),
            Outcome::StaleVersion => Some("stale_version"),
            Outcome::ResourceDeleted => Some("resource_deleted"),
            Outcome::Ignored(reason) => Some(reason),
        }
    }
}

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The receipt could not be committed; the sender should retry.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The receipts waiting for a batch fill the queue: the store is far behind (a
    /// stalled disk, say). The sender should back off and retry.
    #[error("store overloaded: the receipt queue is full")]
    Overloaded,
    /// The database's schema is not one this binary can use.
    #[error("{0}")]
    Schema(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Unavailable(e.to_string())
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Unavailable(e.to_string())
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        StoreError::Unavailable(format!("migration failed: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::judge::fixture;
    use super::*;
    use std::sync::mpsc;

    const WAIT: Duration = Duration::from_secs(10);

    /// Queue a receipt as the ingest route's plugin threads do, from a plain thread;
    /// its answer arrives with whether it was given on that thread itself.
    fn queue_from_a_plain_thread(
        store: &Store,
        id: &str,
        version: u64,
    ) -> mpsc::Receiver<(Result<Outcome, String>, bool)> {
        let (answer, answered) = mpsc::channel();
        let store = store.clone();
        let receipt = Box::new(fixture::receipt(id, "{}", Some(version), false));
        std::thread::spawn(move || {
            let queuing = std::thread::current().id();
            let reply = Reply::new(move |outcome| {
                let here = std::thread::current().id() == queuing;
                let _ = answer.send((outcome.map_err(|e| e.to_string()), here));
            });
            store.queue(receipt, reply);
        })
        .join()
        .expect("the queuing thread");
        answered
    }

    /// Each reply is called once, by the writer after its commit; an exact duplicate of
    /// a committed receipt is answered at once on the queuing thread; once the writer
    /// has stopped, a queued receipt is answered `Unavailable`, never left waiting.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_receipt_queued_from_a_plain_thread_is_answered_once_after_its_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("store.db");
        let store = Store::open_sqlite(&path).await.expect("open");
        let first = queue_from_a_plain_thread(&store, "evt_a", 1);
        let second = queue_from_a_plain_thread(&store, "evt_b", 2);
        for answered in [&first, &second] {
            assert_eq!(
                answered.recv_timeout(WAIT).expect("answered"),
                (Ok(Outcome::Accepted), false)
            );
            // Called once: the reply, and its sender with it, is gone.
            assert_eq!(
                answered.recv_timeout(WAIT),
                Err(mpsc::RecvTimeoutError::Disconnected)
            );
        }
        let again = queue_from_a_plain_thread(&store, "evt_a", 1);
        assert_eq!(
            again.recv_timeout(WAIT).expect("answered"),
            (Ok(Outcome::Duplicate), true)
        );
        store.close().await;
        let late = queue_from_a_plain_thread(&store, "evt_c", 3);
        let (outcome, _) = late.recv_timeout(WAIT).expect("answered");
        assert_eq!(
            outcome,
            Err("store unavailable: receipt writer stopped".into())
        );
        let stored: i64 = rusqlite::Connection::open(&path)
            .expect("reopen")
            .query_row("SELECT COUNT(*) FROM receipts", [], |row| row.get(0))
            .expect("count");
        assert_eq!(stored, 2);
    }

    /// While the writer is held up (here by another connection's write lock) and its
    /// queue is full, a receipt queued without waiting is answered `Overloaded` at
    /// once, on the queuing thread: a plugin thread never blocks on a stalled store.
    /// Every receipt that found room is stored once the writer can go on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_receipt_queue_answers_overloaded_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("store.db");
        let store = Store::open_sqlite(&path).await.expect("open");
        let lock = rusqlite::Connection::open(&path).expect("second connection");
        lock.execute_batch("BEGIN IMMEDIATE")
            .expect("the write lock");
        // More than the queue and one batch in progress can hold.
        let sent = writer::QUEUE + writer::MAX_BATCH + 200;
        let (answer, answered) = mpsc::channel();
        let queuing = {
            let store = store.clone();
            std::thread::spawn(move || {
                let here = std::thread::current().id();
                for n in 0..sent {
                    let answer = answer.clone();
                    let receipt =
                        Box::new(fixture::receipt(&format!("evt_{n}"), "{}", None, false));
                    store.queue(
                        receipt,
                        Reply::new(move |outcome| {
                            let at_once = std::thread::current().id() == here;
                            let _ = answer.send((outcome.map_err(|e| e.to_string()), at_once));
                        }),
                    );
                }
            })
        };
        queuing.join().expect("the queuing thread never blocks");
        let full: Vec<_> = answered.try_iter().collect();
        assert!(
            full.len() >= sent - writer::QUEUE - writer::MAX_BATCH,
            "{}",
            full.len()
        );
        assert!(
            full.iter().all(|answer| *answer
                == (
                    Err("store overloaded: the receipt queue is full".into()),
                    true
                )),
            "{full:?}"
        );
        lock.execute_batch("ROLLBACK").expect("the lock released");
        let rest: Vec<_> = (0..sent - full.len())
            .map(|_| answered.recv_timeout(WAIT).expect("answered"))
            .collect();
        assert!(
            rest.iter()
                .all(|answer| *answer == (Ok(Outcome::Accepted), false))
        );
        let stored: i64 = lock
            .query_row("SELECT COUNT(*) FROM receipts", [], |row| row.get(0))
            .expect("count");
        assert_eq!(usize::try_from(stored).expect("a count"), rest.len());
    }
}
