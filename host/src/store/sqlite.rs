//! SQLite: the embedded default store, a file beside the configuration.

use super::StoreError;
use super::writer::{self, Writer};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// How long a connection waits on a lock held by another process before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Most receipts one purge transaction deletes: the writer waits on it, so keep it short.
const PURGE_BATCH: i64 = 1_000;
/// Readers answer the duplicate fast path and queries; they never block the writer (WAL).
const READERS: u32 = 4;
/// The store's schema: applied at open, and what its tests migrate with.
pub(super) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// A receipt as stored (for inspection and tests).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ReceiptRow {
    pub event_id: String,
    pub state: String,
    pub state_reason: Option<String>,
    pub event_type: String,
    pub secret_index: i64,
    pub body: Vec<u8>,
    pub headers: String,
    pub resource_version: Option<i64>,
    pub attempts: i64,
    pub last_error: Option<String>,
    /// `push` or `reconcile` (see `store::RECONCILED`).
    pub source: String,
    /// The query of the URL it came to (see `NewReceipt::query`).
    pub query: Option<String>,
}

/// The SQLite store; cheap to clone.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pub(super) writer: Writer,
    pub(super) readers: SqlitePool,
    /// The worker pool's writes (leases, attempts); one connection.
    pub(super) worker: SqlitePool,
    /// Wakes the worker pool when events become due (new receipts, replays).
    pub(super) accepted: Arc<Notify>,
    /// The database file, beside which a process's locks are kept.
    pub(super) path: Arc<Path>,
}

impl SqliteStore {
    /// Open (creating if needed) the SQLite file, apply migrations, start the writer.
    pub async fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a commit is on disk (WAL fsynced), not merely handed to the OS.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .disable_statement_logging();
        let accepted = Arc::new(Notify::new());
        // One process at a time checks and applies the migrations (sqlx takes no lock
        // on SQLite): two starting together on one file would otherwise both apply a
        // migration, and the second fail on it ("duplicate column"), and one waiting
        // on another's long migration would give up at its busy timeout.
        let migrating = migration_lock(path).await?;
        let mut conn = options.connect().await?;
        let applied: Option<i64> = sqlx::query_scalar(
            "SELECT CASE WHEN EXISTS (SELECT 1 FROM sqlite_master WHERE name = '_sqlx_migrations')
                    THEN 1 END",
        )
        .fetch_one(&mut conn)
        .await?;
        let applied: Option<i64> = match applied {
            Some(_) => {
                sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
                    .fetch_one(&mut conn)
                    .await?
            }
            None => None,
        };
        super::refuse_newer_schema(applied, &MIGRATOR)?;
        MIGRATOR.run(&mut conn).await?;
        conn.close().await?;
        drop(migrating);
        // The receipt writer's own connection, opened on its thread's behalf here so
        // that an error is the caller's (see `writer`).
        let writer = writer::spawn(writer::open(path, BUSY_TIMEOUT)?, accepted.clone())?;
        let worker = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await?;
        let readers = SqlitePoolOptions::new()
            .max_connections(READERS)
            .connect_with(options.read_only(true))
            .await?;
        Ok(SqliteStore {
            writer,
            readers,
            worker,
            accepted,
            path: path.into(),
        })
    }

    /// Resolves when new events may be due (a receipt was accepted, an event replayed
    /// or an endpoint resumed); the worker pool waits on it between polls.
    pub async fn due_events(&self) {
        self.accepted.notified().await;
    }

    /// One receipt, if stored.
    pub async fn receipt(
        &self,
        endpoint: &str,
        event_id: &str,
    ) -> Result<Option<ReceiptRow>, StoreError> {
        Ok(sqlx::query_as::<_, ReceiptRow>(
            "SELECT event_id, state, state_reason, event_type, secret_index, body, headers, resource_version,
                    attempts, last_error, source, query
             FROM receipts WHERE endpoint = ? AND event_id = ?",
        )
        .bind(endpoint)
        .bind(event_id)
        .fetch_optional(&self.readers)
        .await?)
    }

    /// Receipts stored for an endpoint.
    pub async fn count_receipts(&self, endpoint: &str) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM receipts WHERE endpoint = ?")
                .bind(endpoint)
                .fetch_one(&self.readers)
                .await?,
        )
    }

    /// Conflicting duplicates quarantined for an endpoint.
    pub async fn count_conflicts(&self, endpoint: &str) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM conflicts WHERE endpoint = ?")
                .bind(endpoint)
                .fetch_one(&self.readers)
                .await?,
        )
    }

    /// Delete what the retention lets go, in short batches (see [`super::Purged`]).
    pub async fn purge(
        &self,
        now_ms: i64,
        retention: &crate::config::RetentionConfig,
    ) -> Result<super::Purged, StoreError> {
        let mut purged = super::Purged::default();
        for (which, before) in super::operator::purge_classes(now_ms, retention, "?1") {
            self.purge_class(&which, before, &mut purged).await?;
        }
        if let Some(dead) = retention.dead {
            let dead_before = super::operator::cut_off(now_ms, dead);
            loop {
                let done = sqlx::query(
                    "DELETE FROM conflicts WHERE id IN (
                        SELECT id FROM conflicts WHERE received_at_ms < ?1 LIMIT ?2)",
                )
                .bind(dead_before)
                .bind(PURGE_BATCH)
                .execute(&self.worker)
                .await?;
                purged.conflicts += done.rows_affected();
                if done.rows_affected() < PURGE_BATCH as u64 {
                    break;
                }
            }
        }
        Ok(purged)
    }

    /// Delete receipts matching `which` (binding `?1` to `before`) with their attempts,
    /// a batch at a time, each in one transaction.
    async fn purge_class(
        &self,
        which: &str,
        before: i64,
        purged: &mut super::Purged,
    ) -> Result<(), StoreError> {
        let receipts = purge_batch(which);
        let attempts = "DELETE FROM attempts WHERE (endpoint, event_id) IN (
            SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?1))";
        loop {
            let mut tx = self.worker.begin_with("BEGIN IMMEDIATE").await?;
            let gone: Vec<(String, String)> = sqlx::query_as(&receipts)
                .bind(before)
                .bind(PURGE_BATCH)
                .fetch_all(&mut *tx)
                .await?;
            let keys = serde_json::to_string(&gone)
                .map_err(|e| StoreError::Unavailable(format!("purge: {e}")))?;
            let gone_attempts = sqlx::query(attempts)
                .bind(keys)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            let gone = gone.len() as u64;
            purged.receipts += gone;
            purged.attempts += gone_attempts;
            if gone < PURGE_BATCH as u64 {
                return Ok(());
            }
        }
    }

    /// Close connections (the writer finishes its queue first).
    pub async fn close(&self) {
        self.writer.close().await;
        self.worker.close().await;
        self.readers.close().await;
    }
}

/// An exclusive `flock` on `DB-migrate.lock` beside the database `DB`, waited for:
/// held while migrations are checked and applied, released when dropped.
async fn migration_lock(path: &Path) -> Result<std::fs::File, StoreError> {
    let mut lock = path.as_os_str().to_owned();
    lock.push("-migrate.lock");
    let lock = std::path::PathBuf::from(lock);
    let shown = lock.display().to_string();
    let failed = move |e: std::io::Error| StoreError::Unavailable(format!("{shown}: {e}"));
    let file = super::lock_file_at(&lock).map_err(&failed)?;
    tokio::task::spawn_blocking(move || file.lock().map(|()| file))
        .await
        .map_err(|e| StoreError::Unavailable(format!("the migration lock: {e}")))?
        .map_err(failed)
}

/// One purge batch of a class's receipts (binding `?1` to its time, `?2` to the batch
/// size), deleted, with their keys. The batch is taken in whatever order the class's
/// index gives: ordered by key, SQLite read the whole table to find it, holding the
/// write lock the receipt writer needs, at every purge, even with nothing to delete.
fn purge_batch(which: &str) -> String {
    format!(
        "DELETE FROM receipts WHERE rowid IN (
            SELECT rowid FROM receipts WHERE {which} LIMIT ?2)
         RETURNING endpoint, event_id"
    )
}

/// Measure the disk's durable single-row commit rate with the store's own pragmas:
/// the yardstick group commit is judged against. Returns commits per second.
///
/// A plain loop on one connection on one thread, as the receipt writer runs SQLite:
/// through sqlx each statement is also a round trip to its connection's thread, which
/// on a 2-core machine made this rate about a quarter lower than the disk allows.
pub async fn single_commit_rate(path: &Path, commits: u32) -> Result<f64, StoreError> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || commit_loop(&path, commits))
        .await
        .map_err(|e| StoreError::Unavailable(format!("the commit probe stopped: {e}")))?
}

fn commit_loop(path: &Path, commits: u32) -> Result<f64, StoreError> {
    let mut conn = rusqlite::Connection::open(path)?;
    writer::configure(&conn, BUSY_TIMEOUT)?;
    conn.execute(
        "CREATE TABLE IF NOT EXISTS probe (id INTEGER PRIMARY KEY, body BLOB NOT NULL)",
        [],
    )?;
    let body = vec![7u8; 2048];
    let started = std::time::Instant::now();
    for _ in 0..commits {
        let tx = conn.transaction()?;
        tx.prepare_cached("INSERT INTO probe (body) VALUES (?1)")?
            .execute([&body])?;
        tx.commit()?;
    }
    Ok(f64::from(commits) / started.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The yardstick is a rate of real commits: each one a row in the file afterwards.
    #[tokio::test]
    async fn the_commit_probe_commits_each_row_durably() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("probe.db");
        let rate = single_commit_rate(&path, 25).await.expect("probe");
        assert!(rate.is_finite() && rate > 0.0, "rate {rate}");
        let conn = rusqlite::Connection::open(&path).expect("reopen");
        let (rows, mode): (i64, String) = conn
            .query_row(
                "SELECT (SELECT COUNT(*) FROM probe), (SELECT journal_mode FROM pragma_journal_mode)",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .expect("count");
        // The journal mode is kept in the file: the probe committed through the WAL.
        assert_eq!((rows, mode.as_str()), (25, "wal"));
    }

    /// Processes opening one new file at once apply its migrations once between them,
    /// and every one of them opens it.
    #[test]
    fn stores_opened_together_migrate_one_at_a_time() {
        for round in 0..4 {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("hookhost.db");
            let start = std::sync::Arc::new(std::sync::Barrier::new(6));
            // Each on a thread and runtime of its own, as separate processes would be.
            let opening: Vec<_> = (0..6)
                .map(|_| {
                    let (path, start) = (path.clone(), start.clone());
                    std::thread::spawn(move || {
                        let runtime = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .expect("runtime");
                        start.wait();
                        runtime.block_on(async {
                            let store = SqliteStore::open(&path).await?;
                            store.close().await;
                            Ok::<_, StoreError>(())
                        })
                    })
                })
                .collect();
            for open in opening {
                let opened = open.join().expect("thread");
                opened.unwrap_or_else(|e| panic!("round {round}: {e}"));
            }
        }
    }

    /// Each purge class finds its batch through the index made for it, never by reading
    /// the whole receipts table (under the write lock, at every purge).
    #[test]
    fn every_purge_class_reads_its_own_index() {
        let conn = rusqlite::Connection::open_in_memory().expect("open");
        for migration in MIGRATOR.iter() {
            conn.execute_batch(&migration.sql).expect("migration");
        }
        for (which, before, index) in super::super::operator::purge_classes_and_indexes("?1") {
            let plan: Vec<String> = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {}", purge_batch(&which)))
                .expect("explain")
                .query_map(rusqlite::params![before, PURGE_BATCH], |row| row.get(3))
                .expect("plan")
                .collect::<Result<_, _>>()
                .expect("plan");
            assert!(
                plan.iter()
                    .any(|step| step.contains(&format!("INDEX {index} "))),
                "{index}: {plan:#?}"
            );
            assert!(
                !plan.iter().any(|step| step.starts_with("SCAN ")),
                "a whole table read: {plan:#?}"
            );
        }
    }
}
