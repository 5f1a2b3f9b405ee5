//! PostgreSQL: several hookhost processes share one database.
//!
//! Every promise of the SQLite store holds across processes, and none of it rests on
//! memory another process cannot see: exactly-once receipts come from the primary key
//! (`INSERT … ON CONFLICT DO NOTHING`), the version gate from the resource's row lock
//! in the receipt's transaction, and leases from `FOR UPDATE SKIP LOCKED`. Concurrent
//! requests' receipts share one transaction ([`batch`]). `synchronous_commit` stays
//! on: a commit is on disk before the sender hears 200.

mod batch;

use super::delivery::{STILL_MANAGED, cap, moved_on, no_other_of_its_resource_first};
use super::operator::{LIST_CAP, REPLAYABLE, REQUEUE, lease_over, not_superseded};
use super::{
    AttemptRecord, Filter, Leased, Next, Position, Purged, ReceiptRow, StoreError, Summary,
};
use crate::config::{PgConfig, RetentionConfig};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{ConnectOptions, Postgres, Row};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Serialises lease statements across every process on the database (a transaction
/// advisory lock, held for one statement). `SKIP LOCKED` alone keeps two processes
/// from taking the same event, but the per-resource rule reads *other* rows of the
/// resource from the statement's snapshot: two lease statements whose snapshots
/// straddle each other's commit could each take a different event of one resource
/// (a replayed older event beside a newer one in flight). Taking the lock before the
/// statement's snapshot makes every earlier lease visible to it.
const LEASE_LOCK: i64 = 0x686f_6f6b_6c65_6173; // "hooklease"
/// Most receipts one purge statement deletes: keeps each transaction short.
const PURGE_BATCH: i64 = 1_000;
/// The store's schema: applied at open, and what its tests migrate with.
pub(super) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// The PostgreSQL store; cheap to clone.
#[derive(Debug, Clone)]
pub struct PgStore {
    pub(super) pool: PgPool,
    pub(super) batcher: batch::Batcher,
    /// Wakes this process's worker pool when it accepted or replayed an event; other
    /// processes' events are found by polling.
    pub(super) accepted: Arc<Notify>,
}

impl PgStore {
    /// Connect, refuse a schema newer than this binary, apply migrations.
    pub async fn open(config: &PgConfig) -> Result<PgStore, StoreError> {
        let base = PgConnectOptions::from_str(&config.url)
            .map_err(|e| StoreError::Unavailable(format!("store url: {e}")))?
            .application_name("hookhost")
            .disable_statement_logging();
        // Migrations run on a connection of their own, without the statement timeout:
        // a process starting beside another waits on the migrator's lock for as long
        // as the other's migrations take.
        let mut conn = tokio::time::timeout(config.connect_timeout, base.connect())
            .await
            .map_err(|_| StoreError::Unavailable("connecting timed out".into()))??;
        let applied: Option<i64> = if sqlx::query_scalar::<_, Option<String>>(
            "SELECT to_regclass('_sqlx_migrations')::text",
        )
        .fetch_one(&mut conn)
        .await?
        .is_some()
        {
            sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
                .fetch_one(&mut conn)
                .await?
        } else {
            None
        };
        super::refuse_newer_schema(applied, &MIGRATOR)?;
        // The migrator takes an advisory lock: processes starting together apply each
        // migration once.
        MIGRATOR.run(&mut conn).await?;
        warn_of_clock_skew(&mut conn).await;
        let _ = sqlx::Connection::close(conn).await;

        let statement_timeout = config.statement_timeout.as_millis().to_string();
        let options = base.options([
            ("statement_timeout", statement_timeout.as_str()),
            // Plan each statement for the tables as they are now. A prepared
            // statement's generic plan, made while the tables were empty, would scan
            // and hash all of `receipts` on every batch once it has grown.
            ("plan_cache_mode", "force_custom_plan"),
        ]);
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections)
            // Waiting for a connection, connecting included, ends here: an unreachable
            // database answers 503 in time instead of hanging the sender.
            .acquire_timeout(config.connect_timeout)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    // A commit must be on disk before the sender hears 200: a server
                    // whose default is `synchronous_commit = off` is overridden for
                    // hookhost's sessions (any stronger setting is kept).
                    sqlx::query(
                        "SELECT set_config('synchronous_commit', 'on', false)
                         WHERE current_setting('synchronous_commit') = 'off'",
                    )
                    .execute(&mut *conn)
                    .await?;
                    // The batches' and leases' locking is built for READ COMMITTED:
                    // under a server default of REPEATABLE READ or SERIALIZABLE, two
                    // processes' batches would fail whole on serialization errors.
                    sqlx::query(
                        "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED",
                    )
                    .execute(conn)
                    .await?;
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        let accepted = Arc::new(Notify::new());
        Ok(PgStore {
            // Each statement of a batch is bounded on the server; the batch's wait
            // for an answer at all, here.
            batcher: batch::Batcher::spawn(
                pool.clone(),
                accepted.clone(),
                config.statement_timeout.saturating_mul(2),
            ),
            pool,
            accepted,
        })
    }

    /// Resolves when this process accepted or replayed events; the worker pool also
    /// polls, which is how it sees other processes' events.
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
            "SELECT event_id, state, state_reason, event_type, secret_index, body, headers,
                    resource_version, attempts, last_error, source, query
             FROM receipts WHERE endpoint = $1 AND event_id = $2",
        )
        .bind(endpoint)
        .bind(event_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Receipts stored for an endpoint.
    pub async fn count_receipts(&self, endpoint: &str) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM receipts WHERE endpoint = $1")
                .bind(endpoint)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Conflicting duplicates quarantined for an endpoint.
    pub async fn count_conflicts(&self, endpoint: &str) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM conflicts WHERE endpoint = $1")
                .bind(endpoint)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Close connections (transactions in flight finish first).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Lease up to `limit` due receipts of `endpoints` for `owner`, until `now + lease`,
    /// with the same per-resource rule as SQLite: an event is leasable only while no
    /// other pending event of its resource is leased or comes first in version order.
    pub async fn lease_due(
        &self,
        owner: &str,
        endpoints: &[String],
        now_ms: i64,
        lease: Duration,
        limit: u32,
    ) -> Result<Vec<Leased>, StoreError> {
        let until_ms = now_ms.saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX));
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(LEASE_LOCK)
            .execute(&mut *tx)
            .await?;
        let rows = sqlx::query(&format!(
            "WITH picked AS (
                SELECT endpoint, event_id FROM receipts AS r
                WHERE state = 'pending' AND next_attempt_at_ms <= $3
                  AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms <= $3)
                  AND endpoint = ANY($4)
                  -- Read with the lease, so a pause that committed first always holds.
                  AND endpoint NOT IN (SELECT endpoint FROM endpoint_pauses)
                  AND {STILL_MANAGED}
                  AND {waits}
                ORDER BY next_attempt_at_ms, received_at_ms
                LIMIT $5
                FOR UPDATE OF r SKIP LOCKED)
             UPDATE receipts SET lease_owner = $1, lease_expires_at_ms = $2
             FROM picked
             WHERE receipts.endpoint = picked.endpoint AND receipts.event_id = picked.event_id
             RETURNING receipts.endpoint, receipts.event_id, body, headers, event_type, plugin,
                       resource_kind, resource_id, resource_version, attempts, signed_at",
            waits = no_other_of_its_resource_first("$3"),
        ))
        .bind(owner)
        .bind(until_ms)
        .bind(now_ms)
        .bind(endpoints)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(rows.into_iter().map(|row| leased(row, until_ms)).collect())
    }

    /// Record an attempt and move the receipt on, if `owner` still holds the lease the
    /// attempt was made under (a worker whose lease expired records its attempt but
    /// changes nothing else).
    pub async fn finish_attempt(
        &self,
        leased: &Leased,
        owner: &str,
        attempt: &AttemptRecord,
        next: &Next,
    ) -> Result<(), StoreError> {
        let (state, next_at, delivered_at) = match next {
            Next::Delivered => ("delivered", 0, Some(attempt.ended_at_ms)),
            Next::RetryAt(at) => ("pending", *at, None),
            Next::Dead => ("dead", 0, None),
            Next::Quarantined => ("quarantined", 0, None),
        };
        let number = i64::from(leased.attempts) + 1;
        let error = attempt.error.as_deref().map(cap);
        let mut tx = self.pool.begin().await?;
        // Every attempt is recorded, even one whose lease has expired meanwhile.
        sqlx::query(
            "INSERT INTO attempts (endpoint, event_id, attempt, started_at_ms, ended_at_ms, status, error)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&leased.endpoint)
        .bind(&leased.event_id)
        .bind(number)
        .bind(attempt.started_at_ms)
        .bind(attempt.ended_at_ms)
        .bind(attempt.status.map(i64::from))
        .bind(&error)
        .execute(&mut *tx)
        .await?;
        sqlx::query(&format!(
            "UPDATE receipts SET attempts = $1, {moved_on}, next_attempt_at_ms = $3,
                last_error = $4, lease_owner = NULL, lease_expires_at_ms = NULL
             WHERE endpoint = $6 AND event_id = $7 AND lease_owner = $8
               AND lease_expires_at_ms = $9",
            moved_on = moved_on("$2", "$5"),
        ))
        .bind(number)
        .bind(state)
        .bind(next_at)
        .bind(&error)
        .bind(delivered_at)
        .bind(&leased.endpoint)
        .bind(&leased.event_id)
        .bind(owner)
        .bind(leased.lease_expires_at_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Give back every lease `owner` holds (graceful shutdown), due at once.
    pub async fn release_leases(&self, owner: &str) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE receipts SET lease_owner = NULL, lease_expires_at_ms = NULL WHERE lease_owner = $1",
        )
        .bind(owner)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Attempts recorded for one event: (number, status, error), in order.
    pub async fn attempts(
        &self,
        endpoint: &str,
        event_id: &str,
    ) -> Result<Vec<(i64, Option<i64>, Option<String>)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT attempt, status, error FROM attempts WHERE endpoint = $1 AND event_id = $2 ORDER BY id",
        )
        .bind(endpoint)
        .bind(event_id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Receipts matching a filter, oldest first.
    pub async fn list(&self, filter: &Filter) -> Result<Vec<Summary>, StoreError> {
        let sql = format!(
            "SELECT endpoint, event_id, event_type, state, state_reason, resource_kind, resource_id,
                    resource_version, attempts, last_error, received_at_ms
             FROM receipts WHERE {WHERE}
             ORDER BY received_at_ms, event_id LIMIT $10"
        );
        let limit = filter.limit.unwrap_or(LIST_CAP).min(LIST_CAP);
        let rows = filtered(&sql, filter, limit).fetch_all(&self.pool).await?;
        Ok(rows
            .iter()
            .map(sqlx::FromRow::from_row)
            .collect::<Result<_, _>>()?)
    }

    /// Queue dead, quarantined, delivered or discarded events again under their
    /// original event id, with a fresh retry schedule; not one whose resource has a
    /// newer version delivered or pending. Returns how many.
    ///
    /// In batches ([`super::operator::in_batches`]), each a statement of its own, as on
    /// SQLite: one statement over a large replay (a day's dead letters) would run past
    /// `statement_timeout_ms`, be cancelled and replay nothing.
    pub async fn replay(&self, filter: &Filter) -> Result<u64, StoreError> {
        let sql = replay_sql();
        let batch = |size, after| replay_batch(&self.pool, &sql, filter, size, after);
        super::operator::in_batches(filter.limit, &self.accepted, batch).await
    }

    /// One event with its delivery attempts, as JSON.
    pub async fn show(
        &self,
        endpoint: &str,
        event_id: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let Some(receipt) = self.receipt(endpoint, event_id).await? else {
            return Ok(None);
        };
        let attempts = self.attempts(endpoint, event_id).await?;
        Ok(Some(super::operator::shown(endpoint, &receipt, attempts)))
    }

    /// The next events a replay could take, in arrival order after `after`.
    pub async fn replayable(
        &self,
        filter: &Filter,
        after: Option<&Position>,
        limit: u32,
    ) -> Result<Vec<Position>, StoreError> {
        let sql = format!(
            "SELECT received_at_ms, endpoint, event_id FROM receipts
             WHERE {WHERE} AND state IN {REPLAYABLE}
               AND ($11::bigint IS NULL
                    OR (received_at_ms, endpoint, event_id) > ($11, $12::text, $13::text))
             ORDER BY received_at_ms, endpoint, event_id LIMIT $10"
        );
        let rows = filtered(&sql, filter, limit)
            .bind(after.map(|p| p.0))
            .bind(after.map(|p| &p.1))
            .bind(after.map(|p| &p.2))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(sqlx::FromRow::from_row)
            .collect::<Result<_, _>>()?)
    }

    /// Take one event out of delivery for good, with the operator's reason. A live
    /// lease stays: an attempt already on the wire still holds the resource back.
    pub async fn discard(
        &self,
        endpoint: &str,
        event_id: &str,
        reason: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE receipts SET state = 'discarded', state_reason = $1, discarded_at_ms = $4
             WHERE endpoint = $2 AND event_id = $3 AND state IN ('pending', 'dead', 'quarantined')",
        )
        .bind(reason)
        .bind(endpoint)
        .bind(event_id)
        .bind(crate::clock::now_ms())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Stop (or restart) delivering an endpoint's events; they keep being accepted.
    /// An operator's pause holds against the tenant's API (it takes over a tenant's
    /// pause); its resume lifts any pause.
    pub async fn set_paused(
        &self,
        endpoint: &str,
        paused: bool,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        if paused {
            sqlx::query(
                "INSERT INTO endpoint_pauses (endpoint, paused_at_ms, paused_by)
                 VALUES ($1, $2, 'operator')
                 ON CONFLICT (endpoint) DO UPDATE SET paused_by = 'operator'",
            )
            .bind(endpoint)
            .bind(now_ms)
            .execute(&self.pool)
            .await?;
        } else {
            sqlx::query("DELETE FROM endpoint_pauses WHERE endpoint = $1")
                .bind(endpoint)
                .execute(&self.pool)
                .await?;
            self.accepted.notify_one();
        }
        Ok(())
    }

    /// Endpoints whose delivery is paused.
    pub async fn paused(&self) -> Result<Vec<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT endpoint FROM endpoint_pauses ORDER BY endpoint")
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// Delete what the retention lets go, in short batches (see [`super::Purged`]).
    pub async fn purge(
        &self,
        now_ms: i64,
        retention: &RetentionConfig,
    ) -> Result<Purged, StoreError> {
        let mut purged = Purged::default();
        for (which, before) in super::operator::purge_classes(now_ms, retention, "$1") {
            self.purge_class(&which, before, &mut purged).await?;
        }
        if let Some(dead) = retention.dead {
            let dead_before = super::operator::cut_off(now_ms, dead);
            loop {
                let done = sqlx::query(
                    "DELETE FROM conflicts WHERE id IN (
                        SELECT id FROM conflicts WHERE received_at_ms < $1 LIMIT $2)",
                )
                .bind(dead_before)
                .bind(PURGE_BATCH)
                .execute(&self.pool)
                .await?;
                purged.conflicts += done.rows_affected();
                if done.rows_affected() < PURGE_BATCH as u64 {
                    break;
                }
            }
        }
        Ok(purged)
    }

    /// Delete receipts matching `which` (binding `$1` to `before`) with their attempts.
    async fn purge_class(
        &self,
        which: &str,
        before: i64,
        purged: &mut Purged,
    ) -> Result<(), StoreError> {
        // `which` is repeated on the DELETE itself: a receipt replayed meanwhile is
        // re-checked there (its new row no longer matches) and kept.
        let sql = format!(
            "WITH gone AS (
                DELETE FROM receipts WHERE {which} AND (endpoint, event_id) IN ({pick})
                RETURNING endpoint, event_id),
             attempts_gone AS (
                DELETE FROM attempts AS a USING gone
                WHERE a.endpoint = gone.endpoint AND a.event_id = gone.event_id
                RETURNING 1)
             SELECT (SELECT COUNT(*) FROM gone), (SELECT COUNT(*) FROM attempts_gone)",
            pick = purge_pick(which),
        );
        loop {
            let (receipts, attempts): (i64, i64) = sqlx::query_as(&sql)
                .bind(before)
                .bind(PURGE_BATCH)
                .fetch_one(&self.pool)
                .await?;
            purged.receipts += u64::try_from(receipts).unwrap_or(0);
            purged.attempts += u64::try_from(attempts).unwrap_or(0);
            if receipts < PURGE_BATCH {
                return Ok(());
            }
        }
    }
}

fn leased(row: PgRow, lease_expires_at_ms: i64) -> Leased {
    Leased {
        endpoint: row.get(0),
        event_id: row.get(1),
        body: row.get(2),
        headers: serde_json::from_str(row.get::<&str, _>(3)).unwrap_or_default(),
        event_type: row.get(4),
        plugin: row.get(5),
        resource_kind: row.get(6),
        resource_id: row.get(7),
        resource_version: row.get(8),
        attempts: u32::try_from(row.get::<i64, _>(9)).unwrap_or(0),
        signed_at: row.get(10),
        lease_expires_at_ms,
    }
}

/// `sql` (which contains [`WHERE`] and `LIMIT $10`) with the filter's values bound.
fn filtered<'q>(
    sql: &'q str,
    filter: &'q Filter,
    limit: u32,
) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(sql)
        .bind(&filter.endpoint)
        .bind(&filter.states)
        .bind(filter.states.is_empty())
        .bind(&filter.event_type)
        .bind(&filter.resource_kind)
        .bind(&filter.resource_id)
        .bind(filter.since_ms)
        .bind(filter.until_ms)
        .bind(&filter.event_id)
        .bind(i64::from(limit))
}

/// One batch of [`PgStore::replay`]: at most `size` events after `after` replayed,
/// and their positions.
async fn replay_batch(
    pool: &PgPool,
    sql: &str,
    filter: &Filter,
    size: u32,
    after: Option<Position>,
) -> Result<Vec<Position>, StoreError> {
    let (at, endpoint, event_id) = match after {
        Some((at, endpoint, event_id)) => (Some(at), Some(endpoint), Some(event_id)),
        None => (None, None, None),
    };
    let statement = filtered(sql, filter, size)
        .bind(crate::clock::now_ms())
        .bind(at)
        .bind(endpoint)
        .bind(event_id)
        .try_map(|row: PgRow| Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)));
    Ok(statement.fetch_all(pool).await?)
}

/// Queue again what a filter matches in a replayable state, not superseded and not
/// leased, the limit (`$10`) counting what is replayed, in arrival order after the
/// event (`$12`, `$13`, `$14`: received at, endpoint, event id) a batch before took
/// last; the time is `$11`.
///
/// Ids are ordered by their bytes (`COLLATE "C"`), as Rust orders the positions a
/// batch returns. Under the database's collation (`en-US`, say, where `evt_1a` comes
/// before `evt_1B`), the greatest position by Rust's order could come before the
/// batch's last, and the next batch would take again an event replayed, and delivered,
/// meanwhile.
///
/// The row's own state and lease are checked again on the row being updated: a
/// statement that waited for another replay's row locks sees the row as that one (or
/// a worker's lease after it) left it, where its subquery still sees it as it was.
/// Returns the position of each event replayed.
fn replay_sql() -> String {
    format!(
        "UPDATE receipts AS r SET {REQUEUE}
         WHERE r.state IN {REPLAYABLE} AND {lease_over}
           AND (r.endpoint, r.event_id) IN (
            -- The limit counts what is replayed, not what the filter matches.
            SELECT r.endpoint, r.event_id FROM receipts AS r
            WHERE {WHERE} AND r.state IN {REPLAYABLE}
              AND {not_superseded} AND {lease_over}
              AND ($12::bigint IS NULL
                   OR r.received_at_ms > $12
                   OR (r.received_at_ms = $12
                       AND (r.endpoint COLLATE \"C\", r.event_id COLLATE \"C\")
                           > ($13::text, $14::text)))
            ORDER BY r.received_at_ms, r.endpoint COLLATE \"C\", r.event_id COLLATE \"C\"
            LIMIT $10)
         RETURNING r.received_at_ms, r.endpoint, r.event_id",
        not_superseded = not_superseded("$11"),
        lease_over = lease_over("$11"),
    )
}

/// The filter as SQL; binds, in order: endpoint, states, no-states flag, type,
/// resource kind, resource id, since, until, event id (then the limit).
const WHERE: &str = "($1::text IS NULL OR endpoint = $1)
    AND ($3 OR state = ANY($2))
    AND ($4::text IS NULL OR event_type = $4)
    AND ($5::text IS NULL OR resource_kind = $5)
    AND ($6::text IS NULL OR resource_id = $6)
    AND ($7::bigint IS NULL OR received_at_ms >= $7)
    AND ($8::bigint IS NULL OR received_at_ms < $8)
    AND ($9::text IS NULL OR event_id = $9)";

/// The keys of one purge batch of a class (binding `$1` to its time, `$2` to the
/// batch size), found through the class's own index.
fn purge_pick(which: &str) -> String {
    format!("SELECT endpoint, event_id FROM receipts WHERE {which} LIMIT $2")
}

#[cfg(test)]
pub(super) mod testing {
    use super::MIGRATOR;
    use sqlx::{Connection as _, Executor as _, PgConnection, PgPool};
    use std::path::Path;

    const SERVER: &str = "postgres://postgres@127.0.0.1:5432";

    /// A database of the test's own, created with `options` (after `CREATE DATABASE
    /// name`), migrated, and dropped at the end.
    pub async fn database(name: &str, options: &str) -> (PgPool, impl AsyncFnOnce()) {
        let name = format!("hookhost_unit_{name}_{}", std::process::id());
        let mut admin = PgConnection::connect(&format!("{SERVER}/postgres"))
            .await
            .expect("PostgreSQL on 127.0.0.1:5432");
        // What a run that is over left behind (a failed test stops before `done`).
        let left: Vec<String> = sqlx::query_scalar(
            "SELECT datname FROM pg_database WHERE datname LIKE 'hookhost\\_unit\\_%'",
        )
        .fetch_all(&mut admin)
        .await
        .expect("list");
        for left in left {
            let pid = left.rsplit('_').next().and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
                let drop = format!("DROP DATABASE IF EXISTS {left} WITH (FORCE)");
                admin.execute(drop.as_str()).await.expect("drop");
            }
        }
        let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
        admin.execute(drop.as_str()).await.expect("drop");
        admin
            .execute(format!("CREATE DATABASE {name} {options}").as_str())
            .await
            .expect("create");
        let pool = PgPool::connect(&format!("{SERVER}/{name}"))
            .await
            .expect("connect");
        MIGRATOR.run(&pool).await.expect("migrate");
        let closing = pool.clone();
        (pool, async move || {
            closing.close().await;
            let _ = admin.execute(drop.as_str()).await;
        })
    }
}

/// How far this host's clock may be off the database's before it is said at start.
const CLOCK_SKEW_WARNING_MS: i64 = 5_000;

/// Leases are stamped and judged by each process's own clock: processes sharing the
/// database must keep their clocks in step (one far ahead leases again what another
/// still has out). The database's clock, which they all reach, is the reference; a
/// host off it by more than [`CLOCK_SKEW_WARNING_MS`] says so at start.
async fn warn_of_clock_skew(conn: &mut sqlx::PgConnection) {
    let before = crate::clock::now_ms();
    let Ok(database_ms) = sqlx::query_scalar::<_, i64>(
        "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
    )
    .fetch_one(conn)
    .await
    else {
        return;
    };
    let after = crate::clock::now_ms();
    if let Some(skew_ms) = clock_skew(before, database_ms, after) {
        tracing::warn!(
            skew_ms,
            "this host's clock is {:.1} s {} the database's: keep the clocks of processes \
             sharing it in step (NTP), or one may lease again an event another still has out",
            skew_ms.unsigned_abs() as f64 / 1000.0,
            if skew_ms < 0 { "ahead of" } else { "behind" }
        );
    }
}

/// The database's time read between this host's `before` and `after` (unix ms): how
/// far it is off past what the round trip explains (positive: the database is ahead),
/// when that is more than [`CLOCK_SKEW_WARNING_MS`].
fn clock_skew(before: i64, database: i64, after: i64) -> Option<i64> {
    let off = if database < before {
        database.saturating_sub(before)
    } else {
        database.saturating_sub(after).max(0)
    };
    (off.unsigned_abs() > CLOCK_SKEW_WARNING_MS.unsigned_abs()).then_some(off)
}

#[cfg(test)]
mod tests {
    use super::super::NewReceipt;
    use super::super::judge::fixture;
    use super::testing::database;
    use super::*;

    #[test]
    fn a_clock_off_the_databases_past_the_round_trip_is_told() {
        // Read at 10,000 ms by the database, between 20,000 and 20,050 by this host:
        // this host is 10 s ahead.
        assert_eq!(clock_skew(20_000, 10_000, 20_050), Some(-10_000));
        assert_eq!(clock_skew(20_000, 30_100, 20_050), Some(10_050));
        // Within the round trip, or within the allowance: nothing to say.
        assert_eq!(clock_skew(20_000, 20_030, 20_050), None);
        assert_eq!(clock_skew(20_000, 15_000, 20_050), None);
        assert_eq!(clock_skew(20_000, 25_050, 20_050), None);
        assert_eq!(clock_skew(0, i64::MIN, 0), Some(i64::MIN));
    }

    /// Each purge class finds its batch through the index made for it, not by reading
    /// the whole receipts table (planned with sequential scans priced out, as on a
    /// table too large to read).
    #[tokio::test]
    async fn every_purge_class_reads_its_own_index() {
        let (pool, done) = database("purge_plan", "").await;
        let mut conn = pool.acquire().await.expect("connection");
        sqlx::query("SET enable_seqscan = off")
            .execute(&mut *conn)
            .await
            .expect("set");
        for (which, before, index) in super::super::operator::purge_classes_and_indexes("$1") {
            let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {}", purge_pick(&which)))
                .bind(before)
                .bind(PURGE_BATCH)
                .fetch_all(&mut *conn)
                .await
                .expect("explain");
            let plan = plan.join("\n");
            assert!(plan.contains(&format!(" {index} ")), "{index}: {plan}");
            assert!(!plan.contains("Seq Scan on receipts"), "{plan}");
        }
        drop(conn);
        done().await;
    }

    #[tokio::test]
    async fn a_replays_batches_are_ordered_as_their_positions_are() {
        // Under ICU's en-US collation `evt_1a` sorts before `evt_1B`; by bytes, as Rust
        // compares the positions a batch returns, after it. Both are replayed by the
        // first batch and, dead again (delivered, say), not by the second.
        let icu = "TEMPLATE template0 LOCALE 'C.UTF-8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US'";
        let (pool, done) = database("collation", icu).await;
        let receipts: Vec<NewReceipt> = ["evt_1a", "evt_1B"]
            .into_iter()
            .map(|id| NewReceipt {
                resource: None,
                ..fixture::receipt(id, "{}", None, false)
            })
            .collect();
        let receipts: Vec<&NewReceipt> = receipts.iter().collect();
        let within = std::time::Duration::from_secs(10);
        let committed = batch::commit(&pool, &mut None, &receipts, within).await;
        committed.expect("commit");
        let dead = "UPDATE receipts SET state = 'dead', received_at_ms = 1000";
        sqlx::query(dead).execute(&pool).await.expect("dead");

        let (sql, all) = (replay_sql(), Filter::default());
        let first = replay_batch(&pool, &sql, &all, 2, None)
            .await
            .expect("batch");
        assert_eq!(first.len(), 2, "{first:?}");
        sqlx::query(dead).execute(&pool).await.expect("dead again");
        let after = first.into_iter().max();
        let second = replay_batch(&pool, &sql, &all, 2, after)
            .await
            .expect("batch");
        assert_eq!(second, vec![], "replayed again");
        done().await;
    }
}
