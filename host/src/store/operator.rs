//! What an operator does to receipts: list, replay under the original event id,
//! discard with a reason, pause and resume an endpoint's delivery.

use super::sqlite::SqliteStore;
use super::{Backend, StoreError};
use base64::Engine as _;
use sqlx::Row as _;

/// Which receipts to list or replay; every field narrows. One definition serves the
/// CLI (`--endpoint … --state dead,quarantined --type …`) and the admin API's query
/// string (`?endpoint=…&state=dead,quarantined&type=…`), so both read it alike.
#[derive(Debug, Clone, Default, clap::Args, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    /// Only this endpoint's events.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Only the event with this id, as its provider gave it.
    #[arg(long)]
    pub event_id: Option<String>,
    /// Any of these states, comma-separated (pending, delivered, dead, quarantined, …).
    #[arg(long = "state", value_delimiter = ',')]
    #[serde(rename = "state", default, deserialize_with = "comma_separated")]
    pub states: Vec<String>,
    /// Only events of this type, as the plugin names it (`invoice.paid`).
    #[arg(long = "type")]
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    /// Only events about resources of this kind (`invoice`).
    #[arg(long)]
    pub resource_kind: Option<String>,
    /// Only events about the resource with this id.
    #[arg(long)]
    pub resource_id: Option<String>,
    /// Received at or after this unix time, milliseconds.
    #[arg(long)]
    pub since_ms: Option<i64>,
    /// Received before this unix time, milliseconds.
    #[arg(long)]
    pub until_ms: Option<i64>,
    #[arg(
        long,
        help = format!("At most this many events, oldest first (a listing: {LIST_CAP} at most)")
    )]
    pub limit: Option<u32>,
}

/// Every state a receipt can be in.
pub const STATES: [&str; 7] = [
    "pending",
    "ignored",
    "stale",
    "delivered",
    "dead",
    "quarantined",
    "discarded",
];

/// Where a receipt stands in a replay's walk: (received at, endpoint, event id).
pub type Position = (i64, String, String);

impl Filter {
    /// The one event with this id on this endpoint.
    pub fn one(endpoint: &str, event_id: &str) -> Filter {
        Filter {
            endpoint: Some(endpoint.to_string()),
            event_id: Some(event_id.to_string()),
            ..Filter::default()
        }
    }

    /// A state that does not exist would silently match nothing: refuse it by name.
    pub fn check(&self) -> Result<(), String> {
        match self.states.iter().find(|s| !STATES.contains(&s.as_str())) {
            Some(unknown) => Err(format!(
                "state: {unknown:?} is not one of {}",
                STATES.join(", ")
            )),
            None => Ok(()),
        }
    }
}

fn comma_separated<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let text: String = serde::Deserialize::deserialize(d)?;
    Ok(text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect())
}

/// One receipt, as listed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct Summary {
    pub endpoint: String,
    pub event_id: String,
    pub event_type: String,
    pub state: String,
    pub state_reason: Option<String>,
    pub resource_kind: Option<String>,
    pub resource_id: Option<String>,
    pub resource_version: Option<i64>,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub received_at_ms: i64,
}

/// States a replay takes an event out of.
pub(super) const REPLAYABLE: &str = "('dead', 'quarantined', 'delivered', 'discarded')";
/// A replay's rule, the same in both dialects, on a receipt aliased `r`, with the time
/// as `now`: an old version is not sent over a newer one its resource has delivered
/// (whatever became of it since: discarded, or replayed and failed), has on its way,
/// or has on the wire (discarded while its attempt is out, which may yet deliver it).
/// As at receipt, versions decide: events without one are never stale; at one
/// version, the later arrival is the newer (delivered after the other). And as at
/// receipt, a deleted resource stays deleted: no event but a deletion is sent at or
/// under its tombstone's version (without a version, not at all).
pub(super) fn not_superseded(now: &str) -> String {
    format!(
        "(NOT EXISTS (
    SELECT 1 FROM receipts AS newer
    WHERE newer.endpoint = r.endpoint
      AND newer.resource_kind = r.resource_kind
      AND newer.resource_id = r.resource_id
      AND (newer.resource_version > r.resource_version
           OR (newer.resource_version = r.resource_version
               AND (newer.received_at_ms, newer.event_id) > (r.received_at_ms, r.event_id)))
      AND (newer.state IN ('pending', 'delivered') OR newer.delivered_at_ms IS NOT NULL
           OR newer.lease_expires_at_ms > {now}))
  AND NOT (NOT r.deleted AND EXISTS (
    SELECT 1 FROM resource_versions AS tomb
    WHERE tomb.endpoint = r.endpoint
      AND tomb.resource_kind = r.resource_kind
      AND tomb.resource_id = r.resource_id
      AND tomb.deleted
      AND (r.resource_version IS NULL OR tomb.version >= r.resource_version))))"
    )
}
/// A replay's other rule, on a receipt aliased `r`, with the time as `now`: none whose
/// lease is live. Only a discarded receipt keeps one (its attempt still on the wire);
/// replayed, it would lose that lease and go out again beside that attempt.
pub(super) fn lease_over(now: &str) -> String {
    format!("(r.lease_expires_at_ms IS NULL OR r.lease_expires_at_ms <= {now})")
}
/// What a replay sets on a receipt it queues again: pending, with a fresh retry
/// schedule and no lease.
pub(super) const REQUEUE: &str = "state = 'pending', state_reason = 'replayed', attempts = 0,
    next_attempt_at_ms = 0, lease_owner = NULL, lease_expires_at_ms = NULL,
    discarded_at_ms = NULL";
/// Purge's rule for a delivered receipt past its retention, on a receipt named
/// `receipts` (not aliased): it is kept while an older version of its resource may
/// still be replayed (see [`none_older_replayable`]). An older version that is itself
/// delivered and past its retention goes in the same purge, so it keeps nothing: else
/// a resource's delivered versions went one a purge.
fn purgeable_delivered(before: &str) -> String {
    format!(
        "state = 'delivered' AND delivered_at_ms < {before} AND {}",
        none_older_replayable(&format!(
            "AND NOT (older.state = 'delivered' AND older.delivered_at_ms < {before})"
        ))
    )
}
/// On a receipt named `receipts`: no older version of its resource may still be
/// replayed, leaving out what `gone_too` says goes in the same purge. A version the
/// destination has (delivered at some time) is what tells [`not_superseded`] not to
/// replay an older one over it, so it is kept until the older ones are gone, and goes
/// at the first purge after. Older is as [`not_superseded`] orders: a lower version,
/// or at the same version an earlier arrival.
fn none_older_replayable(gone_too: &str) -> String {
    format!(
        "NOT EXISTS (
            SELECT 1 FROM receipts AS older
            WHERE older.endpoint = receipts.endpoint
              AND older.resource_kind = receipts.resource_kind
              AND older.resource_id = receipts.resource_id
              AND (older.resource_version < receipts.resource_version
                   OR (older.resource_version = receipts.resource_version
                       AND (older.received_at_ms, older.event_id)
                           < (receipts.received_at_ms, receipts.event_id)))
              AND older.state IN {REPLAYABLE} {gone_too})"
    )
}
/// Purge's rule for a receipt settled as it arrived, on a receipt named `receipts`:
/// an ignored event (a ping, a type its plugin ignores, an event of a deleted
/// resource) or a stale version, past the delivered retention counted from its
/// arrival. Neither is ever delivered or replayed, and a provider's retry of one
/// that is gone is judged again as it was.
fn purgeable_settled(before: &str) -> String {
    format!("state IN ('ignored', 'stale') AND received_at_ms < {before}")
}
/// Purge's rule for a dead letter or a quarantined receipt past its retention, on a
/// receipt named `receipts`: counted from when it was settled, its last attempt (an
/// event retried for weeks goes dead long after it arrived; replayed, it is settled
/// again), or from its arrival when it was never attempted. One delivered before
/// (then replayed) is kept as a delivered one is, after the delivered class's purge.
fn purgeable_dead(before: &str) -> String {
    format!(
        "state IN ('dead', 'quarantined') AND received_at_ms < {before} AND NOT EXISTS (
            SELECT 1 FROM attempts AS a
            WHERE a.endpoint = receipts.endpoint AND a.event_id = receipts.event_id
              AND a.ended_at_ms >= {before}) AND {}",
        once_delivered_kept()
    )
}
/// Purge's rule for a discarded receipt past its retention (`dead_days`), on a
/// receipt named `receipts`: counted from when it was discarded (from its arrival
/// when that was not recorded, before migration 0013/0009). One delivered (before, or
/// on the wire as it was discarded) is kept as a delivered one is.
fn purgeable_discarded(before: &str) -> String {
    format!(
        "state = 'discarded' AND COALESCE(discarded_at_ms, received_at_ms) < {before} AND {}",
        once_delivered_kept()
    )
}
/// A dead, quarantined or discarded receipt the destination has all the same: kept
/// while an older version may be replayed. Its classes purge after the delivered
/// ones, which take the older versions past their own retention first.
fn once_delivered_kept() -> String {
    format!("(delivered_at_ms IS NULL OR {})", none_older_replayable(""))
}
/// What a purge deletes, class by class, on both stores: each class's rule (above),
/// written with `placeholder` for the time, and the time (unix ms) before which it
/// lets a receipt go. Dead letters, quarantined and discarded receipts go only with
/// `dead_days`.
pub(super) fn purge_classes(
    now_ms: i64,
    retention: &crate::config::RetentionConfig,
    placeholder: &str,
) -> Vec<(String, i64)> {
    let before = |kept| cut_off(now_ms, kept);
    let delivered = before(retention.delivered);
    let mut classes = vec![
        (purgeable_delivered(placeholder), delivered),
        (purgeable_settled(placeholder), delivered),
    ];
    if let Some(dead) = retention.dead.map(before) {
        classes.push((purgeable_dead(placeholder), dead));
        classes.push((purgeable_discarded(placeholder), dead));
    }
    classes
}
/// Every purge class (its rule and time, as [`purge_classes`] gives them), each with
/// the index made to find its batch: a test on each store reads their plans.
#[cfg(test)]
pub(super) fn purge_classes_and_indexes(placeholder: &str) -> Vec<(String, i64, &'static str)> {
    let retention = crate::config::RetentionConfig {
        dead: Some(std::time::Duration::from_secs(86_400)),
        ..Default::default()
    };
    let classes = purge_classes(1 << 40, &retention, placeholder);
    let indexes = [
        "receipts_delivered",
        "receipts_settled",
        "receipts_dead",
        "receipts_discarded",
    ];
    assert_eq!(classes.len(), indexes.len(), "a class without its index");
    classes
        .into_iter()
        .zip(indexes)
        .map(|((which, before), index)| (which, before, index))
        .collect()
}
/// The time (unix ms) before which a receipt kept for `kept` lets go, at `now_ms`.
pub(super) fn cut_off(now_ms: i64, kept: std::time::Duration) -> i64 {
    now_ms.saturating_sub(super::millis(kept))
}
/// Events one replay statement takes at most (see `replay`, on both stores).
const REPLAY_BATCH: u64 = 1_000;

/// A replay of at most `limit` events, in statements of at most [`REPLAY_BATCH`]:
/// `batch(size, after)` replays up to `size` events in arrival order after the
/// position `after` (none: from the first) and returns the positions it replayed.
/// Each batch starts after the last one's latest, so an event delivered again between
/// batches is not taken again. The workers are woken after each batch that replayed.
pub(super) async fn in_batches<P, F, Fut>(
    limit: Option<u32>,
    accepted: &tokio::sync::Notify,
    mut batch: F,
) -> Result<u64, StoreError>
where
    P: Ord,
    F: FnMut(u32, Option<P>) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<P>, StoreError>>,
{
    let limit = u64::from(limit.unwrap_or(u32::MAX));
    let (mut replayed, mut after) = (0, None);
    while replayed < limit {
        let size = u32::try_from((limit - replayed).min(REPLAY_BATCH)).unwrap_or(u32::MAX);
        let taken = batch(size, after.take()).await?;
        let done = taken.len() as u64;
        after = taken.into_iter().max();
        replayed += done;
        if done > 0 {
            accepted.notify_one();
        }
        if done < u64::from(size) {
            break;
        }
    }
    Ok(replayed)
}
/// Most rows one listing returns.
pub(super) const LIST_CAP: u32 = 10_000;

impl SqliteStore {
    pub async fn list(&self, filter: &Filter) -> Result<Vec<Summary>, StoreError> {
        let sql = format!(
            "SELECT endpoint, event_id, event_type, state, state_reason, resource_kind, resource_id,
                    resource_version, attempts, last_error, received_at_ms
             FROM receipts WHERE {WHERE}
             ORDER BY received_at_ms, event_id LIMIT ?10"
        );
        let limit = filter.limit.unwrap_or(LIST_CAP).min(LIST_CAP);
        let rows = filtered(&sql, filter, limit)
            .fetch_all(&self.readers)
            .await?;
        Ok(rows
            .iter()
            .map(sqlx::FromRow::from_row)
            .collect::<Result<_, _>>()?)
    }

    /// Queue dead, quarantined, delivered or discarded events again under their
    /// original event id (so the destination sees the same `webhook-id` and
    /// idempotency key), with a fresh retry schedule; not one whose resource has a
    /// newer version delivered or pending. Returns how many.
    ///
    /// In batches of [`REPLAY_BATCH`], each its own transaction: SQLite rewrites a whole
    /// row (body included) to change its state, and one statement over a large replay
    /// would hold the write lock past the writer's busy timeout, so that every receipt
    /// waiting to commit meanwhile got 503. Each batch starts after the last event the
    /// one before it took, in arrival order: the workers deliver replayed events between
    /// batches, and an event delivered again must not be taken again.
    pub async fn replay(&self, filter: &Filter) -> Result<u64, StoreError> {
        let sql = replay_sql();
        in_batches(
            filter.limit,
            &self.accepted,
            |batch, after: Option<(i64, i64)>| {
                let statement = filtered(&sql, filter, batch)
                    .bind(crate::clock::now_ms())
                    .bind(after.map(|(at, _)| at))
                    .bind(after.map(|(_, row)| row))
                    .try_map(|row: sqlx::sqlite::SqliteRow| Ok((row.try_get(0)?, row.try_get(1)?)));
                async move { Ok(statement.fetch_all(&self.worker).await?) }
            },
        )
        .await
    }

    /// The next `limit` events a replay could take (replayable states, filtered), in
    /// arrival order after `after`: a remapping replay walks them page by page.
    pub async fn replayable(
        &self,
        filter: &Filter,
        after: Option<&Position>,
        limit: u32,
    ) -> Result<Vec<Position>, StoreError> {
        let sql = format!(
            "SELECT received_at_ms, endpoint, event_id FROM receipts
             WHERE {WHERE} AND state IN {REPLAYABLE}
               AND (?11 IS NULL OR (received_at_ms, endpoint, event_id) > (?11, ?12, ?13))
             ORDER BY received_at_ms, endpoint, event_id LIMIT ?10"
        );
        let rows = filtered(&sql, filter, limit)
            .bind(after.map(|p| p.0))
            .bind(after.map(|p| &p.1))
            .bind(after.map(|p| &p.2))
            .fetch_all(&self.readers)
            .await?;
        Ok(rows
            .iter()
            .map(sqlx::FromRow::from_row)
            .collect::<Result<_, _>>()?)
    }

    /// One event with its delivery attempts, as JSON (for the CLI and the admin API).
    pub async fn show(
        &self,
        endpoint: &str,
        event_id: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let Some(receipt) = self.receipt(endpoint, event_id).await? else {
            return Ok(None);
        };
        let attempts = self.attempts(endpoint, event_id).await?;
        Ok(Some(shown(endpoint, &receipt, attempts)))
    }

    /// Take one event out of delivery for good, with the operator's reason. The
    /// receipt and its evidence stay. A live lease stays too: an attempt already on
    /// the wire still holds the resource's later versions back until it ends.
    pub async fn discard(
        &self,
        endpoint: &str,
        event_id: &str,
        reason: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE receipts SET state = 'discarded', state_reason = ?, discarded_at_ms = ?
             WHERE endpoint = ? AND event_id = ? AND state IN ('pending', 'dead', 'quarantined')",
        )
        .bind(reason)
        .bind(crate::clock::now_ms())
        .bind(endpoint)
        .bind(event_id)
        .execute(&self.worker)
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
        let statement = if paused {
            "INSERT INTO endpoint_pauses (endpoint, paused_at_ms, paused_by) VALUES (?, ?, 'operator')
             ON CONFLICT (endpoint) DO UPDATE SET paused_by = 'operator'"
        } else {
            "DELETE FROM endpoint_pauses WHERE endpoint = ? AND ? IS NOT NULL"
        };
        sqlx::query(statement)
            .bind(endpoint)
            .bind(now_ms)
            .execute(&self.worker)
            .await?;
        if !paused {
            self.accepted.notify_one();
        }
        Ok(())
    }

    pub async fn paused(&self) -> Result<Vec<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT endpoint FROM endpoint_pauses ORDER BY endpoint")
                .fetch_all(&self.readers)
                .await?,
        )
    }
}

/// Record version `$4` of resource (`$1`, `$2`, `$3`), moved by event `$5` (a delete
/// when `$6`), where it is newer than what the gate holds, or the same version's
/// tombstone: what a receipt's batch records, on both backends.
const MOVE_GATE: &str =
    "INSERT INTO resource_versions (endpoint, resource_kind, resource_id, version, event_id, deleted)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (endpoint, resource_kind, resource_id) DO UPDATE
     SET version = excluded.version, event_id = excluded.event_id, deleted = excluded.deleted
     WHERE resource_versions.version < excluded.version
        OR (resource_versions.version = excluded.version AND excluded.deleted
            AND NOT resource_versions.deleted)";

impl super::Store {
    /// Replay one event with a mapping (type, resource, version) a plugin produced
    /// again, recording which plugin version produced it: the new mapping, the replay
    /// and the version gate's move ([`MOVE_GATE`]) are one transaction, so an event the
    /// replay leaves alone (not in a replayable state, or superseded under its new
    /// mapping) keeps its old one.
    /// Returns whether it was replayed (0 or 1). The same statements on both backends.
    pub async fn remap_replay(
        &self,
        endpoint: &str,
        event_id: &str,
        event_type: &str,
        resource: Option<&super::Resource>,
        plugin_version: &str,
        plugin_digest: &str,
    ) -> Result<u64, StoreError> {
        let remap = format!(
            "UPDATE receipts SET event_type = $1, resource_kind = $2, resource_id = $3,
                resource_version = $4, deleted = $5, plugin_version = $6, plugin_digest = $7
             WHERE endpoint = $8 AND event_id = $9 AND state IN {REPLAYABLE}"
        );
        let requeue = format!(
            "UPDATE receipts AS r SET {REQUEUE}
             WHERE r.endpoint = $1 AND r.event_id = $2 AND r.state IN {REPLAYABLE}
               AND {not_superseded} AND {lease_over}",
            not_superseded = not_superseded("$3"),
            lease_over = lease_over("$3"),
        );
        let replayed = on_pool!(self, writes, pool => {
            let mut tx = pool.begin().await?;
            let remapped = sqlx::query(&remap)
                .bind(event_type)
                .bind(resource.map(|r| &r.kind))
                .bind(resource.map(|r| &r.id))
                .bind(resource.and_then(|r| r.version).map(super::judge::version_i64))
                .bind(resource.is_some_and(|r| r.deleted))
                .bind(plugin_version)
                .bind(plugin_digest)
                .bind(endpoint)
                .bind(event_id)
                .execute(&mut *tx)
                .await?;
            if remapped.rows_affected() == 0 {
                return Ok(0);
            }
            let replayed = sqlx::query(&requeue)
                .bind(endpoint)
                .bind(event_id)
                .bind(crate::clock::now_ms())
                .execute(&mut *tx)
                .await?
                .rows_affected();
            // Not replayed: dropped, so rolled back, and the old mapping stays.
            if replayed == 0 {
                return Ok(0);
            }
            // The version gate learns the new mapping as it would have at receipt:
            // else a late push of an older version, with no gate row to stop it, was
            // accepted and delivered over this one.
            if let Some(x) = resource
                && let Some(version) = x.version
            {
                sqlx::query(MOVE_GATE)
                    .bind(endpoint)
                    .bind(&x.kind)
                    .bind(&x.id)
                    .bind(super::judge::version_i64(version))
                    .bind(event_id)
                    .bind(x.deleted)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            replayed
        });
        if replayed > 0 {
            self.wake_workers();
        }
        Ok(replayed)
    }
}

/// One event with its attempts, as `show` answers it (on every backend).
pub(super) fn shown(
    endpoint: &str,
    receipt: &super::ReceiptRow,
    attempts: Vec<(i64, Option<i64>, Option<String>)>,
) -> serde_json::Value {
    let attempts: Vec<serde_json::Value> = attempts
        .into_iter()
        .map(|(n, status, error)| serde_json::json!({"attempt": n, "status": status, "error": error}))
        .collect();
    serde_json::json!({
        "endpoint": endpoint,
        "event_id": receipt.event_id,
        "event_type": receipt.event_type,
        "state": receipt.state,
        "state_reason": receipt.state_reason,
        "secret_index": receipt.secret_index,
        "resource_version": receipt.resource_version,
        "last_error": receipt.last_error,
        "headers": serde_json::from_str::<serde_json::Value>(&receipt.headers).unwrap_or_default(),
        "body": String::from_utf8_lossy(&receipt.body),
        // A sealed body is shown opened by the caller that holds the key.
        "body_sealed": receipt.body.starts_with(crate::tenancy::SEALED_BODY)
            .then(|| base64::engine::general_purpose::STANDARD.encode(&receipt.body)),
        "attempts": attempts,
    })
}

/// Queue again what a filter matches in a replayable state, not superseded and not
/// leased, after the position `(?12, ?13)` (arrival time, row id; none: from the
/// start), the limit (`?10`) counting what is replayed; the time is `?11`. Returns
/// each replayed event's position.
fn replay_sql() -> String {
    format!(
        "UPDATE receipts SET {REQUEUE}
         WHERE rowid IN (
            -- The limit counts what is replayed, not what the filter matches.
            SELECT rowid FROM receipts AS r WHERE {WHERE} AND r.state IN {REPLAYABLE}
              AND {not_superseded} AND {lease_over}
              AND (?12 IS NULL OR (r.received_at_ms, r.rowid) > (?12, ?13))
            ORDER BY r.received_at_ms, r.rowid LIMIT ?10)
         RETURNING received_at_ms, rowid",
        not_superseded = not_superseded("?11"),
        lease_over = lease_over("?11"),
    )
}

/// `sql` (which contains [`WHERE`] and `LIMIT ?10`) with the filter's values bound.
fn filtered<'q>(
    sql: &'q str,
    filter: &'q Filter,
    limit: u32,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    sqlx::query(sql)
        .bind(&filter.endpoint)
        .bind(serde_json::to_string(&filter.states).unwrap_or_else(|_| "[]".into()))
        .bind(filter.states.is_empty())
        .bind(&filter.event_type)
        .bind(&filter.resource_kind)
        .bind(&filter.resource_id)
        .bind(filter.since_ms)
        .bind(filter.until_ms)
        .bind(&filter.event_id)
        .bind(i64::from(limit))
}

/// The filter as SQL; binds, in order: endpoint, states (JSON), no-states flag, type,
/// resource kind, resource id, since, until, event id (then the limit).
const WHERE: &str = "(?1 IS NULL OR endpoint = ?1)
    AND (?3 OR state IN (SELECT value FROM json_each(?2)))
    AND (?4 IS NULL OR event_type = ?4)
    AND (?5 IS NULL OR resource_kind = ?5)
    AND (?6 IS NULL OR resource_id = ?6)
    AND (?7 IS NULL OR received_at_ms >= ?7)
    AND (?8 IS NULL OR received_at_ms < ?8)
    AND (?9 IS NULL OR event_id = ?9)";
