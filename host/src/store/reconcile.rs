//! Reconciliation runs and what each repaired. A run's cursor and counts are written
//! after every page, so a run cut short (a crash, a kill) resumes where it stopped.
//! One process at a time reconciles an endpoint: it holds the endpoint's [`RunLock`].

use super::{Backend, Store, StoreError};
use sha2::{Digest, Sha256};

/// One run over one endpoint.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct RunRow {
    pub id: String,
    pub endpoint: String,
    /// Events created at or after this (unix seconds) were asked for.
    pub since: i64,
    pub dry_run: bool,
    /// `running`, `done` or `failed`.
    pub state: String,
    /// Where the next page starts (the plugin's cursor); none before the first page.
    pub cursor: Option<String>,
    pub pages: i64,
    /// Events the provider listed.
    pub seen: i64,
    /// Of those, already received.
    pub present: i64,
    /// Of those, missing and repaired: stored, or their redelivery asked of the
    /// provider (a dry run counts what it would repair).
    pub repaired: i64,
    pub errors: i64,
    pub last_error: Option<String>,
    pub started_at_ms: i64,
    pub ended_at_ms: Option<i64>,
}

impl RunRow {
    /// A run that starts now: `running`, before its first page.
    pub fn begun(id: String, endpoint: &str, since: i64, dry_run: bool, now_ms: i64) -> RunRow {
        RunRow {
            id,
            endpoint: endpoint.to_string(),
            since,
            dry_run,
            state: "running".into(),
            cursor: None,
            pages: 0,
            seen: 0,
            present: 0,
            repaired: 0,
            errors: 0,
            last_error: None,
            started_at_ms: now_ms,
            ended_at_ms: None,
        }
    }
}

/// One missing event a run found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct RepairRow {
    pub event_id: String,
    pub event_type: String,
    /// `repaired` (stored) or `redelivery_requested`; `would_repair` or
    /// `would_redeliver` in a dry run; otherwise what the receipt store answered
    /// (`stale_version`, …).
    pub result: String,
    pub at_ms: i64,
}

/// Held while this process reconciles an endpoint: no other process sharing the store
/// starts, resumes or supersedes one of its runs meanwhile. Released when dropped, and
/// when the process ends however it ends: by the kernel (SQLite), or by PostgreSQL once
/// it finds the connection closed (at once) or dead (a crashed host: within a minute,
/// by the session's TCP keepalives). So a run cut short is resumed without a lease to
/// wait out.
#[derive(Debug)]
pub struct RunLock {
    held: Held,
}

impl RunLock {
    /// Whether the lock is still this process's: on PostgreSQL, whether its connection
    /// still answers (a connection lost to a failover or an idle timeout took the lock
    /// with it). A run checks before it saves its progress.
    pub async fn still_held(&mut self) -> Result<(), StoreError> {
        match &mut self.held {
            Held::File(_) => Ok(()),
            Held::Postgres(conn, _) => match sqlx::query("SELECT 1").execute(&mut *conn).await {
                Ok(_) => Ok(()),
                Err(e) => Err(StoreError::Unavailable(format!(
                    "the endpoint's reconciliation lock was lost with its connection: {e}"
                ))),
            },
        }
    }

    /// Release the lock now: another process may take it as soon as this returns. On
    /// PostgreSQL it is unlocked, then its connection closed (dropped instead, the
    /// connection is closed, and the lock goes with it).
    pub async fn release(self) {
        match self.held {
            Held::File(file) => drop(file),
            Held::Postgres(mut conn, key) => {
                let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
                    .bind(key)
                    .execute(&mut conn)
                    .await;
                let _ = sqlx::Connection::close(conn).await;
            }
        }
    }
}

#[derive(Debug)]
enum Held {
    /// An exclusive `flock` on a file of the endpoint's, beside the SQLite database.
    File(std::fs::File),
    /// A session advisory lock (its key beside it), on a connection of its own, out of
    /// the pool: a run holds it for minutes, which would starve a small pool's other
    /// users, and keep the pool from closing at shutdown until the run's next query.
    Postgres(sqlx::PgConnection, i64),
}

/// The endpoint's lock: the first 8 bytes of a digest of its id.
fn lock_key(endpoint: &str) -> i64 {
    let digest = Sha256::new()
        .chain_update(b"hookhost reconcile\0")
        .chain_update(endpoint.as_bytes())
        .finalize();
    let mut key = [0u8; 8];
    key.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(key)
}

/// Lock `path` (created if needed), without waiting: none when another holds it.
fn lock_file(path: &std::path::Path) -> Result<Option<RunLock>, StoreError> {
    let failed = |e: std::io::Error| StoreError::Unavailable(format!("{}: {e}", path.display()));
    let file = super::lock_file_at(path).map_err(failed)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(RunLock {
            held: Held::File(file),
        })),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(failed(e)),
    }
}

const COLUMNS: &str = "id, endpoint, since, dry_run, state, cursor, pages, seen, present, \
                       repaired, errors, last_error, started_at_ms, ended_at_ms";

impl Store {
    /// Take `endpoint`'s reconciliation for this process: none while another process
    /// holds it. On SQLite the lock is a file in `DB-reconcile/` beside the database
    /// `DB`; on PostgreSQL, an advisory lock.
    pub async fn lock_reconcile(&self, endpoint: &str) -> Result<Option<RunLock>, StoreError> {
        let key = lock_key(endpoint);
        match &self.backend {
            Backend::Sqlite(s) => {
                let mut dir = s.path.as_os_str().to_owned();
                dir.push("-reconcile");
                lock_file(&std::path::Path::new(&dir).join(format!("{key:016x}.lock")))
            }
            Backend::Postgres(p) => {
                let mut conn = p.pool.acquire().await?.detach();
                // Keepalives of the session's own: a host that dies without closing
                // the connection (a power loss) holds the lock until the server finds
                // it dead, within a minute rather than the kernel's two hours.
                let (.., held): (String, String, String, bool) = sqlx::query_as(
                    "SELECT set_config('tcp_keepalives_idle', '30', false),
                            set_config('tcp_keepalives_interval', '10', false),
                            set_config('tcp_keepalives_count', '3', false),
                            pg_try_advisory_lock($1)",
                )
                .bind(key)
                .fetch_one(&mut conn)
                .await?;
                if !held {
                    let _ = sqlx::Connection::close(conn).await;
                    return Ok(None);
                }
                Ok(Some(RunLock {
                    held: Held::Postgres(conn, key),
                }))
            }
        }
    }

    /// Start a run.
    pub async fn create_run(&self, run: &RunRow) -> Result<(), StoreError> {
        const SQL: &str =
            "INSERT INTO reconcile_runs (id, endpoint, since, dry_run, state, started_at_ms)
                           VALUES ($1, $2, $3, $4, $5, $6)";
        on_pool!(self, writes, pool => {
            sqlx::query(SQL)
                .bind(&run.id)
                .bind(&run.endpoint)
                .bind(run.since)
                .bind(run.dry_run)
                .bind(&run.state)
                .bind(run.started_at_ms)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Write a run's progress: its cursor, counts and state, with the page's repairs,
    /// in one transaction (a resumed run neither skips nor counts a page twice).
    pub async fn save_run(&self, run: &RunRow, repairs: &[RepairRow]) -> Result<(), StoreError> {
        const SQL: &str =
            "UPDATE reconcile_runs SET state = $2, cursor = $3, pages = $4, seen = $5,
                               present = $6, repaired = $7, errors = $8, last_error = $9,
                               ended_at_ms = $10
                           WHERE id = $1";
        const REPAIR: &str =
            "INSERT INTO reconcile_repairs (run, event_id, event_type, result, at_ms)
                              VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING";
        on_pool!(self, writes, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query(SQL)
                .bind(&run.id)
                .bind(&run.state)
                .bind(&run.cursor)
                .bind(run.pages)
                .bind(run.seen)
                .bind(run.present)
                .bind(run.repaired)
                .bind(run.errors)
                .bind(run.last_error.as_deref().map(super::delivery::cap))
                .bind(run.ended_at_ms)
                .execute(&mut *tx)
                .await?;
            for repair in repairs {
                sqlx::query(REPAIR)
                    .bind(&run.id)
                    .bind(&repair.event_id)
                    .bind(&repair.event_type)
                    .bind(&repair.result)
                    .bind(repair.at_ms)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// The endpoint's run of this kind (dry or not) that never finished (its process
    /// stopped mid-way), if any.
    pub async fn unfinished_run(
        &self,
        endpoint: &str,
        dry_run: bool,
    ) -> Result<Option<RunRow>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM reconcile_runs
             WHERE endpoint = $1 AND state = 'running' AND dry_run = $2
             ORDER BY started_at_ms DESC LIMIT 1"
        );
        Ok(on_pool!(self, reads, pool => {
            sqlx::query_as(&sql).bind(endpoint).bind(dry_run).fetch_optional(pool).await?
        }))
    }

    /// Runs, newest first; one endpoint's when given.
    pub async fn runs(
        &self,
        endpoint: Option<&str>,
        limit: i64,
    ) -> Result<Vec<RunRow>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM reconcile_runs WHERE ($1 IS NULL OR endpoint = $1)
             ORDER BY started_at_ms DESC, id LIMIT $2"
        );
        Ok(on_pool!(self, reads, pool => {
            sqlx::query_as(&sql).bind(endpoint).bind(limit).fetch_all(pool).await?
        }))
    }

    /// One run and what it repaired.
    pub async fn run(&self, id: &str) -> Result<Option<(RunRow, Vec<RepairRow>)>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM reconcile_runs WHERE id = $1");
        const REPAIRS: &str = "SELECT event_id, event_type, result, at_ms FROM reconcile_repairs
                               WHERE run = $1 ORDER BY at_ms, event_id";
        Ok(on_pool!(self, reads, pool => {
            let run: Option<RunRow> = sqlx::query_as(&sql).bind(id).fetch_optional(pool).await?;
            match run {
                None => None,
                Some(run) => {
                    let repairs = sqlx::query_as(REPAIRS).bind(id).fetch_all(pool).await?;
                    Some((run, repairs))
                }
            }
        }))
    }
}
