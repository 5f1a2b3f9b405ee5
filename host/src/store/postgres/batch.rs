//! PostgreSQL's group commit: concurrent receipts share one transaction.
//!
//! A request's receipt queues here; one task takes everything queued (up to
//! [`MAX_BATCH`]) and commits it as one transaction of a fixed number of statements,
//! while the next batch gathers. One batch commits at a time: fewer, larger batches
//! cost PostgreSQL the least per receipt (`docs/performance.md`, sections 4, 20 and
//! 31). Each request is answered after its batch's commit; a failed batch answers
//! every one of its requests `Unavailable`.
//!
//! Other processes write the same tables, so every read the judging rests on is
//! either locked or checked when written:
//! 1. the batch's resource rows that exist are locked (`FOR UPDATE`, in key order, so
//!    two batches never wait on each other in a cycle) and their versions read;
//! 2. the digests stored under the batch's event ids are read;
//! 3. the batch is judged in memory ([`judge`]);
//! 4. new receipts are inserted `ON CONFLICT DO NOTHING`, in key order; resources
//!    that had no row get one `ON CONFLICT DO NOTHING`; locked ones are updated;
//!    conflicting duplicates are quarantined.
//!
//! When a write in step 4 finds a row that another transaction committed after the
//! reads (fewer rows written than judged), the batch rolls back and is judged again
//! against the store as it now is. So is a batch that PostgreSQL chose as a
//! deadlock's victim.
//!
//! The task holds its connection from one batch to the next. Taken from the pool for
//! each batch, a connection is tested first (a round trip, in the one serial step)
//! and again when it is given back. A held connection is not tested while batches
//! follow each other within [`HELD_IDLE`]: when the database has closed it (a
//! restart, `pg_terminate_backend`), the batch fails before its commit with nothing
//! written, and is tried once more on a new connection from the pool. After a longer
//! pause the next batch takes its connection from the pool, whose test finds a
//! connection dropped without a word while idle (a firewall's idle timeout) and
//! replaces it, within the connect timeout. A connection that goes silent while a
//! batch is on it (a failover behind a proxy, a route gone, no reset) gets the batch
//! no answer: past twice the statement timeout, which bounds each of its statements,
//! the connection is closed and the batch tried once more on a new one.

use super::super::judge::{Held, Judged, Moved, ResourceKey, headers_json, judge, version_i64};
use super::super::writer::{MAX_BATCH, QUEUE, queue_full};
use super::super::{NewReceipt, Outcome, Reply, StoreError};
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgPool;
use sqlx::{Connection as _, Postgres, Transaction};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

/// A held connection idle this long goes back to the pool before the next batch.
const HELD_IDLE: Duration = Duration::from_secs(1);
/// Most times a batch is judged, when concurrent writers keep changing what it read.
const ATTEMPTS: usize = 5;
/// PostgreSQL's SQLSTATE for a transaction aborted to break a deadlock.
const DEADLOCK_DETECTED: &str = "40P01";

#[derive(Debug, Clone)]
pub(in crate::store) struct Batcher {
    queue: mpsc::Sender<(Box<NewReceipt>, Reply)>,
}

impl Batcher {
    /// `within`: how long each step of a batch (judging, committing) may wait for
    /// PostgreSQL before its connection counts as lost.
    pub(in crate::store) fn spawn(
        pool: PgPool,
        accepted: Arc<Notify>,
        within: Duration,
    ) -> Batcher {
        Batcher::holding_for(pool, accepted, HELD_IDLE, within)
    }

    /// With how long a connection is held idle (the tests hold it longer).
    fn holding_for(
        pool: PgPool,
        accepted: Arc<Notify>,
        idle: Duration,
        within: Duration,
    ) -> Batcher {
        let (queue, receipts) = mpsc::channel(QUEUE);
        tokio::spawn(run(pool, receipts, accepted, idle, within));
        Batcher { queue }
    }

    /// Queue a receipt for the next batch; `reply` gets its outcome after that batch
    /// commits. A closed queue drops the reply, which answers `Unavailable`.
    pub(in crate::store) async fn queue(&self, receipt: Box<NewReceipt>, reply: Reply) {
        let _ = self.queue.send((receipt, reply)).await;
    }

    /// [`Batcher::queue`] without waiting, from any thread: a full queue answers
    /// `Overloaded` at once.
    pub(in crate::store) fn queue_now(&self, receipt: Box<NewReceipt>, reply: Reply) {
        if let Err(mpsc::error::TrySendError::Full((_, reply))) =
            self.queue.try_send((receipt, reply))
        {
            reply.send(Err(queue_full()));
        }
    }
}

async fn run(
    pool: PgPool,
    mut queue: mpsc::Receiver<(Box<NewReceipt>, Reply)>,
    accepted: Arc<Notify>,
    idle: Duration,
    within: Duration,
) {
    let mut held: Option<PoolConnection<Postgres>> = None;
    let mut last_batch = Instant::now();
    let mut closed = std::pin::pin!(pool.close_event());
    loop {
        // While a batch commits, the queue grows into the next one.
        let first = tokio::select! {
            next = queue.recv() => match next {
                Some(first) => first,
                None => return,
            },
            // Closing the pool waits for every connection to come back: give ours
            // back. Batches after it find the pool closed and answer `Unavailable`.
            () = &mut closed, if held.is_some() => {
                held = None;
                continue;
            }
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let (receipts, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let receipts: Vec<&NewReceipt> = receipts.iter().map(|r| &**r).collect();
        if last_batch.elapsed() > idle {
            held = None;
        }
        let result = commit(&pool, &mut held, &receipts, within).await;
        last_batch = Instant::now();
        match result {
            Ok(outcomes) => {
                if outcomes.contains(&Outcome::Accepted) {
                    accepted.notify_one();
                }
                for ((r, outcome), reply) in receipts.iter().zip(outcomes).zip(replies) {
                    if outcome == Outcome::Conflict {
                        tracing::warn!(
                            endpoint = %r.endpoint,
                            event_id = %r.event_id,
                            "conflicting duplicate: same event id, different body; first kept, second quarantined"
                        );
                    }
                    reply.send(Ok(outcome));
                }
            }
            Err(error) => {
                tracing::error!(%error, receipts = receipts.len(), "receipt batch failed to commit");
                for reply in replies {
                    reply.send(Err(error.clone()));
                }
            }
        }
    }
}

/// Commit a batch on the held connection, or on one from the pool when none is held.
/// It is judged again while concurrent writers keep changing what it read, or
/// PostgreSQL picks it as a deadlock's victim (at most [`ATTEMPTS`] times), and tried
/// once more on a new connection when its connection was lost before the commit. A
/// lost connection is closed; one that failed otherwise goes back to the pool, which
/// tests it. A commit that failed is never tried again, since it may have landed. A
/// step without an answer `within` counts as a lost connection.
pub(super) async fn commit(
    pool: &PgPool,
    held: &mut Option<PoolConnection<Postgres>>,
    receipts: &[&NewReceipt],
    within: Duration,
) -> Result<Vec<Outcome>, StoreError> {
    let mut reconnected = false;
    for attempt in 1..=ATTEMPTS {
        let conn = match held {
            Some(conn) => conn,
            None => held.insert(pool.acquire().await?),
        };
        let judged = async {
            let mut tx = conn.begin().await?;
            let outcomes = record_all(&mut tx, receipts).await?;
            Ok::<_, sqlx::Error>((tx, outcomes))
        };
        let (error, committing) = match answered(within, judged).await {
            Ok((tx, Some(outcomes))) => match answered(within, tx.commit()).await {
                Ok(()) => return Ok(outcomes),
                Err(e) => (e, true),
            },
            Ok((tx, None)) => match answered(within, tx.rollback()).await {
                Ok(()) => continue,
                Err(e) => (e, false),
            },
            Err(e) => (e, false),
        };
        let lost = connection_lost(&error);
        if lost && let Some(conn) = held.as_mut() {
            // Closed, not given back: the pool's test of it would only fail.
            conn.close_on_drop();
        }
        *held = None;
        let deadlock = matches!(&error, sqlx::Error::Database(d)
            if d.code().as_deref() == Some(DEADLOCK_DETECTED));
        // Again after a deadlock, or once on a new connection after a lost one; never
        // after a failed commit.
        let again = !committing && attempt < ATTEMPTS && (deadlock || lost && !reconnected);
        if !again {
            return Err(error.into());
        }
        reconnected |= lost;
    }
    Err(StoreError::Unavailable(
        "concurrent writers kept changing the batch's receipts".into(),
    ))
}

/// A step of a batch, or an I/O error (so [`connection_lost`]) when PostgreSQL gives
/// it no answer `within`.
async fn answered<T>(
    within: Duration,
    step: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, sqlx::Error> {
    tokio::time::timeout(within, step)
        .await
        .unwrap_or_else(|_| {
            let reason = format!("no answer from PostgreSQL within {within:?}");
            Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                reason,
            )))
        })
}

/// Whether an error says the connection itself is gone: its socket, the protocol, or
/// PostgreSQL's connection-exception (`08`) and operator-intervention (`57P`) codes.
fn connection_lost(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(d) => d
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
        _ => false,
    }
}

/// Judge and write a batch in its transaction. `None`: another transaction committed
/// a row the batch's reads did not see; roll back and judge again.
async fn record_all(
    tx: &mut Transaction<'_, Postgres>,
    receipts: &[&NewReceipt],
) -> Result<Option<Vec<Outcome>>, sqlx::Error> {
    // 1. Lock and read the resources' rows, in key order.
    let mut resources: Vec<ResourceKey<'_>> = receipts
        .iter()
        .filter_map(|r| {
            let x = r.resource.as_ref()?;
            Some((r.endpoint.as_str(), x.kind.as_str(), x.id.as_str()))
        })
        .collect();
    resources.sort_unstable();
    resources.dedup();
    let mut held = Held::default();
    if !resources.is_empty() {
        let rows: Vec<(String, String, String, i64, bool)> = sqlx::query_as(
            "SELECT endpoint, resource_kind, resource_id, version, deleted FROM resource_versions
             WHERE (endpoint, resource_kind, resource_id) IN
                   (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
             ORDER BY endpoint, resource_kind, resource_id
             FOR UPDATE",
        )
        .bind(column(&resources, |k| k.0))
        .bind(column(&resources, |k| k.1))
        .bind(column(&resources, |k| k.2))
        .fetch_all(&mut **tx)
        .await?;
        for (endpoint, kind, id, version, deleted) in &rows {
            let probe = (endpoint.as_str(), kind.as_str(), id.as_str());
            if let Ok(at) = resources.binary_search(&probe) {
                held.versions.insert(resources[at], (*version, *deleted));
            }
        }
    }
    let existing: HashSet<ResourceKey<'_>> = held.versions.keys().copied().collect();

    // 2. What is stored under the batch's event ids.
    let ids: HashSet<(&str, &str)> = receipts
        .iter()
        .map(|r| (r.endpoint.as_str(), r.event_id.as_str()))
        .collect();
    let id_list: Vec<(&str, &str)> = ids.iter().copied().collect();
    type Stored = (
        String,
        String,
        Vec<u8>,
        String,
        String,
        Option<String>,
        Option<String>,
        Option<i64>,
    );
    let stored_digests: Vec<Stored> = sqlx::query_as(
        "SELECT endpoint, event_id, body_sha256, source,
                event_type, resource_kind, resource_id, resource_version FROM receipts
         WHERE (endpoint, event_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))",
    )
    .bind(column(&id_list, |k| k.0))
    .bind(column(&id_list, |k| k.1))
    .fetch_all(&mut **tx)
    .await?;
    for (endpoint, event_id, digest, source, event_type, kind, id, version) in &stored_digests {
        if let Some(&(endpoint, event_id)) = ids.get(&(endpoint.as_str(), event_id.as_str())) {
            let listed = (source == crate::store::RECONCILED)
                .then(|| (event_type.clone(), kind.clone(), id.clone(), *version));
            held.digests
                .insert((endpoint, event_id), (digest.as_slice(), listed));
        }
    }

    // 3. Judge.
    let Judged {
        outcomes,
        mut stored,
        conflicts,
        moved,
    } = judge(receipts, held);

    // 4. Write, checking that nothing the reads missed was committed meanwhile.
    if !stored.is_empty() {
        stored.sort_unstable_by(|(a, _), (b, _)| {
            (&a.endpoint, &a.event_id).cmp(&(&b.endpoint, &b.event_id))
        });
        let rows = &stored;
        let states: Vec<(&str, Option<&str>)> = rows.iter().map(|(_, v)| v.state()).collect();
        let inserted = sqlx::query(
            "INSERT INTO receipts (endpoint, event_id, body_sha256, body, headers, secret_index,
                plugin, plugin_version, plugin_digest, message_id, event_type,
                resource_kind, resource_id, resource_version, deleted,
                occurred_at, signed_at, received_at_ms, state, state_reason, source, query)
             SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bytea[], $5::text[],
                $6::int8[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
                $12::text[], $13::text[], $14::int8[], $15::bool[],
                $16::int8[], $17::int8[], $18::int8[], $19::text[], $20::text[], $21::text[],
                $22::text[])
             ON CONFLICT (endpoint, event_id) DO NOTHING",
        )
        .bind(column(rows, |(r, _)| r.endpoint.as_str()))
        .bind(column(rows, |(r, _)| r.event_id.as_str()))
        .bind(column(rows, |(r, _)| r.body_sha256.as_slice()))
        .bind(column(rows, |(r, _)| r.body.as_slice()))
        .bind(column(rows, |(r, _)| headers_json(r)))
        .bind(column(rows, |(r, _)| r.secret_index as i64))
        .bind(column(rows, |(r, _)| r.plugin.as_str()))
        .bind(column(rows, |(r, _)| r.plugin_version.as_str()))
        .bind(column(rows, |(r, _)| r.plugin_digest.as_str()))
        .bind(column(rows, |(r, _)| r.message_id.as_deref()))
        .bind(column(rows, |(r, _)| r.event_type.as_str()))
        .bind(column(rows, |(r, _)| {
            r.resource.as_ref().map(|x| x.kind.as_str())
        }))
        .bind(column(rows, |(r, _)| {
            r.resource.as_ref().map(|x| x.id.as_str())
        }))
        .bind(column(rows, |(r, _)| {
            r.resource.as_ref().and_then(|x| x.version).map(version_i64)
        }))
        .bind(column(rows, |(r, _)| {
            r.resource.as_ref().is_some_and(|x| x.deleted)
        }))
        .bind(column(rows, |(r, _)| r.occurred_at))
        .bind(column(rows, |(r, _)| r.signed_at))
        .bind(column(rows, |(r, _)| r.received_at_ms))
        .bind(column(&states, |s| s.0))
        .bind(column(&states, |s| s.1))
        .bind(column(rows, |(r, _)| r.source))
        .bind(column(rows, |(r, _)| r.query.as_deref()))
        .execute(&mut **tx)
        .await?;
        if inserted.rows_affected() != rows.len() as u64 {
            return Ok(None);
        }
    }
    let (updated, created): (Vec<&Moved<'_>>, Vec<&Moved<'_>>) =
        moved.iter().partition(|(key, ..)| existing.contains(key));
    if !created.is_empty() {
        let written = sqlx::query(
            "INSERT INTO resource_versions (endpoint, resource_kind, resource_id, version, event_id, deleted)
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::text[], $6::bool[])
             ON CONFLICT (endpoint, resource_kind, resource_id) DO NOTHING",
        )
        .bind(column(&created, |m| m.0.0))
        .bind(column(&created, |m| m.0.1))
        .bind(column(&created, |m| m.0.2))
        .bind(column(&created, |m| m.1))
        .bind(column(&created, |m| m.2))
        .bind(column(&created, |m| m.3))
        .execute(&mut **tx)
        .await?;
        if written.rows_affected() != created.len() as u64 {
            return Ok(None);
        }
    }
    if !updated.is_empty() {
        // These rows were locked in step 1: the update cannot miss.
        sqlx::query(
            "UPDATE resource_versions AS v
             SET version = m.version, event_id = m.event_id, deleted = m.deleted
             FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::text[], $6::bool[])
                  AS m(endpoint, resource_kind, resource_id, version, event_id, deleted)
             WHERE v.endpoint = m.endpoint AND v.resource_kind = m.resource_kind
               AND v.resource_id = m.resource_id",
        )
        .bind(column(&updated, |m| m.0.0))
        .bind(column(&updated, |m| m.0.1))
        .bind(column(&updated, |m| m.0.2))
        .bind(column(&updated, |m| m.1))
        .bind(column(&updated, |m| m.2))
        .bind(column(&updated, |m| m.3))
        .execute(&mut **tx)
        .await?;
    }
    if !conflicts.is_empty() {
        sqlx::query(
            // A body already quarantined under the event id is kept once, however
            // often it is sent again (twice in this batch too). The unique index
            // holds across processes: a batch storing the same body at once in
            // another waits for its commit, and skips it. Inserted in the index's
            // order (DISTINCT ON sorts), so two such batches never wait on each other.
            "INSERT INTO conflicts (endpoint, event_id, body_sha256, body, headers, secret_index, received_at_ms)
             SELECT DISTINCT ON (c.endpoint, c.event_id, c.body_sha256) c.*
             FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bytea[], $5::text[],
                         $6::int8[], $7::int8[])
                  AS c(endpoint, event_id, body_sha256, body, headers, secret_index, received_at_ms)
             ORDER BY c.endpoint, c.event_id, c.body_sha256
             ON CONFLICT (endpoint, event_id, body_sha256) DO NOTHING",
        )
        .bind(column(&conflicts, |r| r.endpoint.as_str()))
        .bind(column(&conflicts, |r| r.event_id.as_str()))
        .bind(column(&conflicts, |r| r.body_sha256.as_slice()))
        .bind(column(&conflicts, |r| r.body.as_slice()))
        .bind(column(&conflicts, |r| headers_json(r)))
        .bind(column(&conflicts, |r| r.secret_index as i64))
        .bind(column(&conflicts, |r| r.received_at_ms))
        .execute(&mut **tx)
        .await?;
    }
    Ok(Some(outcomes))
}

/// One column of rows, bound as an array for `unnest`.
fn column<'r, R, T>(rows: &'r [R], field: impl Fn(&'r R) -> T) -> Vec<T> {
    rows.iter().map(field).collect()
}

#[cfg(test)]
mod tests {
    use super::super::super::judge::fixture;
    use super::super::testing::database;
    use super::*;
    /// Twice the default statement timeout, as a store opened with it waits.
    const WITHIN: Duration = Duration::from_secs(10);

    /// One receipt through the batcher, answered after its batch commits.
    async fn record(batcher: &Batcher, receipt: NewReceipt) -> Result<Outcome, StoreError> {
        let (reply, answer) = Reply::channel();
        batcher.queue(Box::new(receipt), reply).await;
        crate::store::writer::committed(answer).await
    }

    /// The same mixed batch as SQLite's writer test, with the same answers and rows.
    #[tokio::test]
    async fn one_batch_judges_its_receipts_in_arrival_order() {
        let (pool, done) = database("batch", "").await;
        let before = fixture::before();
        let before: Vec<&NewReceipt> = before.iter().collect();
        commit(&pool, &mut None, &before, WITHIN)
            .await
            .expect("first commit");
        let batch = fixture::batch();
        let batch: Vec<&NewReceipt> = batch.iter().collect();
        let outcomes = commit(&pool, &mut None, &batch, WITHIN)
            .await
            .expect("batch commit");
        assert_eq!(outcomes, fixture::outcomes());

        let states: Vec<(String, String)> =
            sqlx::query_as("SELECT event_id, state FROM receipts ORDER BY event_id")
                .fetch_all(&pool)
                .await
                .expect("receipts");
        let mut expected = fixture::STATES;
        expected.sort_unstable();
        assert_eq!(fixture::pairs(&states), expected);
        let version: (i64, String, bool) = sqlx::query_as(
            "SELECT version, event_id, deleted FROM resource_versions WHERE resource_id = 'cus_1'",
        )
        .fetch_one(&pool)
        .await
        .expect("version");
        assert_eq!((version.0, version.1.as_str(), version.2), fixture::VERSION);
        let conflicts: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM conflicts")
            .fetch_one(&pool)
            .await
            .expect("conflicts");
        assert_eq!(conflicts, fixture::CONFLICTS);
        done().await;
    }

    /// Two batches that read before either wrote: the one that commits second finds
    /// the first's rows when it writes, and is judged again against them.
    #[tokio::test]
    async fn a_batch_that_raced_another_is_judged_again() {
        let (pool, done) = database("race", "").await;
        let first = [fixture::receipt("evt_a", "a", Some(5), false)];
        let second = [
            fixture::receipt("evt_a", "a", Some(5), false),
            fixture::receipt("evt_b", "b", Some(4), false),
        ];
        // The second batch reads (and finds nothing), then the first commits.
        let mut tx = pool.begin().await.expect("begin");
        let mut other = pool.begin().await.expect("begin");
        let first: Vec<&NewReceipt> = first.iter().collect();
        assert_eq!(
            record_all(&mut other, &first).await.expect("first"),
            Some(vec![Outcome::Accepted])
        );
        let racing = tokio::spawn(async move {
            let second: Vec<&NewReceipt> = second.iter().collect();
            let judged = record_all(&mut tx, &second).await;
            tx.rollback().await.expect("rollback");
            judged.map_err(|e| e.to_string())
        });
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        other.commit().await.expect("commit first");
        assert_eq!(
            racing.await.expect("join"),
            Ok(None),
            "the insert found evt_a committed meanwhile: judge again"
        );
        // Judged again, evt_a is a duplicate and evt_b is older than cus_1's version 5.
        let second = [
            fixture::receipt("evt_a", "a", Some(5), false),
            fixture::receipt("evt_b", "b", Some(4), false),
        ];
        let second: Vec<&NewReceipt> = second.iter().collect();
        assert_eq!(
            commit(&pool, &mut None, &second, WITHIN)
                .await
                .expect("second"),
            [Outcome::Duplicate, Outcome::StaleVersion]
        );
        done().await;
    }

    /// The database closes the batches' held connection between two batches: the
    /// second fails on it before its commit and commits on a new connection, and
    /// closing the pool does not wait for the connection the task holds.
    #[tokio::test]
    async fn a_batch_on_a_connection_the_database_closed_commits_on_a_new_one() {
        let (pool, done) = database("closed", "").await;
        // Held however long the test takes, so that the second batch meets the closed
        // connection rather than a tested one.
        let hour = Duration::from_secs(3600);
        let batcher = Batcher::holding_for(pool.clone(), Arc::new(Notify::new()), hour, WITHIN);
        let first = fixture::receipt("evt_a", "a", Some(1), false);
        assert_eq!(
            record(&batcher, first).await.expect("first"),
            Outcome::Accepted
        );
        // Every other connection to the test's database, the batcher's among them.
        let mut own = pool.acquire().await.expect("connection");
        let others: Vec<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .fetch_all(&mut *own)
        .await
        .expect("connections");
        assert!(!others.is_empty(), "the batcher holds a connection");
        for pid in others {
            let gone: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
                .bind(pid)
                .fetch_one(&mut *own)
                .await
                .expect("terminate");
            assert!(gone, "connection {pid} closed");
        }
        drop(own);
        let second = fixture::receipt("evt_b", "a", Some(2), false);
        assert_eq!(
            record(&batcher, second).await.expect("second"),
            Outcome::Accepted
        );
        let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM receipts")
            .fetch_one(&pool)
            .await
            .expect("receipts");
        assert_eq!(stored, 2);
        tokio::time::timeout(Duration::from_secs(10), done())
            .await
            .expect("closing the pool gets the batcher's connection back");
    }
}
