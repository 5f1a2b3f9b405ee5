//! The worker pool's side of the store: leasing due receipts and recording attempts.

use super::StoreError;
use super::sqlite::SqliteStore;
use rusqlite::{Transaction, params};
use std::time::Duration;

/// Longest error text kept per attempt.
const ERROR_CAP: usize = 1024;

/// A receipt leased for delivery.
#[derive(Debug, Clone)]
pub struct Leased {
    pub endpoint: String,
    pub event_id: String,
    pub body: Vec<u8>,
    /// `[name, value]` pairs as stored with the receipt.
    pub headers: Vec<(String, String)>,
    pub event_type: String,
    pub plugin: String,
    pub resource_kind: Option<String>,
    pub resource_id: Option<String>,
    pub resource_version: Option<i64>,
    /// Attempts made before this one.
    pub attempts: u32,
    /// The provider's signed timestamp (unix seconds), when its scheme signs one.
    pub signed_at: Option<i64>,
    /// When this lease expires (unix ms). It also names the lease: an attempt moves the
    /// receipt on only while the receipt is still under this very lease, so a late
    /// answer under an expired lease never overrides the attempt of a newer one.
    pub lease_expires_at_ms: i64,
}

impl Leased {
    /// The span every log line about delivering this event is in.
    pub fn span(&self) -> tracing::Span {
        tracing::info_span!(
            "deliver",
            endpoint = %self.endpoint,
            plugin = %self.plugin,
            event_id = %self.event_id,
            event_type = %self.event_type,
        )
    }
}

/// One attempt, as recorded.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub started_at_ms: i64,
    pub ended_at_ms: i64,
    pub status: Option<u16>,
    pub error: Option<String>,
}

/// What happens to the receipt after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    Delivered,
    /// Try again when the clock passes this (unix ms).
    RetryAt(i64),
    /// The schedule is exhausted.
    Dead,
    /// The destination refused it permanently (4xx).
    Quarantined,
}

/// A lease, as the writer performs it.
#[derive(Debug)]
pub struct LeaseRequest {
    owner: String,
    /// JSON array of endpoint ids.
    endpoints: String,
    now_ms: i64,
    until_ms: i64,
    limit: u32,
}

/// An attempt's result, as the writer records it.
#[derive(Debug)]
pub struct FinishRequest {
    leased: Leased,
    owner: String,
    attempt: AttemptRecord,
    next: Next,
}

impl SqliteStore {
    /// Lease up to `limit` due receipts of `endpoints` for `owner`, until `now + lease`.
    /// A lease that expired (its worker died) makes the receipt due again. Events of
    /// one resource are leased one at a time, lowest version first; events without a
    /// resource have no order.
    pub async fn lease_due(
        &self,
        owner: &str,
        endpoints: &[String],
        now_ms: i64,
        lease: Duration,
        limit: u32,
    ) -> Result<Vec<Leased>, StoreError> {
        let until_ms = now_ms.saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX));
        self.writer
            .lease(LeaseRequest {
                owner: owner.to_string(),
                endpoints: serde_json::to_string(endpoints).unwrap_or_else(|_| "[]".into()),
                now_ms,
                until_ms,
                limit,
            })
            .await
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
        self.writer
            .finish(FinishRequest {
                leased: leased.clone(),
                owner: owner.to_string(),
                attempt: attempt.clone(),
                next: next.clone(),
            })
            .await
    }

    /// Give back every lease `owner` holds (graceful shutdown), due at once.
    pub async fn release_leases(&self, owner: &str) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE receipts SET lease_owner = NULL, lease_expires_at_ms = NULL WHERE lease_owner = ?",
        )
        .bind(owner)
        .execute(&self.worker)
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
            "SELECT attempt, status, error FROM attempts WHERE endpoint = ? AND event_id = ? ORDER BY id",
        )
        .bind(endpoint)
        .bind(event_id)
        .fetch_all(&self.readers)
        .await?)
    }
}

pub(super) fn lease_in(tx: &Transaction<'_>, r: &LeaseRequest) -> Result<Vec<Leased>, StoreError> {
    let mut lease = tx.prepare_cached(&format!(
        "UPDATE receipts SET lease_owner = ?1, lease_expires_at_ms = ?2
         WHERE rowid IN (
            -- The partial index holds only pending rows: the cost follows the
            -- backlog, not the history (the planner preferred the primary key).
            SELECT rowid FROM receipts AS r INDEXED BY receipts_due
            WHERE state = 'pending' AND next_attempt_at_ms <= ?3
              AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms <= ?3)
              AND endpoint IN (SELECT value FROM json_each(?4))
              -- Read with the lease, so a pause that committed first always holds.
              AND endpoint NOT IN (SELECT endpoint FROM endpoint_pauses)
              AND {STILL_MANAGED}
              AND {waits}
            ORDER BY next_attempt_at_ms, received_at_ms
            LIMIT ?5)
         RETURNING endpoint, event_id, body, headers, event_type, plugin,
                   resource_kind, resource_id, resource_version, attempts, signed_at",
        waits = no_other_of_its_resource_first("?3"),
    ))?;
    let leased = lease
        .query_map(
            params![
                r.owner,
                r.until_ms,
                r.now_ms,
                r.endpoints,
                i64::from(r.limit)
            ],
            |row| {
                Ok(Leased {
                    endpoint: row.get(0)?,
                    event_id: row.get(1)?,
                    body: row.get(2)?,
                    headers: serde_json::from_str(row.get_ref(3)?.as_str()?).unwrap_or_default(),
                    event_type: row.get(4)?,
                    plugin: row.get(5)?,
                    resource_kind: row.get(6)?,
                    resource_id: row.get(7)?,
                    resource_version: row.get(8)?,
                    attempts: u32::try_from(row.get::<_, i64>(9)?).unwrap_or(0),
                    signed_at: row.get(10)?,
                    lease_expires_at_ms: r.until_ms,
                })
            },
        )?
        .collect::<Result<_, _>>()?;
    Ok(leased)
}

/// The lease's rule for a tenant's endpoint's receipt, aliased `r`: a managed endpoint
/// still holds its id. Read with the lease: a process whose registry has yet to see
/// the endpoint deleted would otherwise lease what the deletion has yet to discard
/// (it does so in batches, after it commits), and deliver it to the deleted endpoint's
/// destination. A tenant's ids are `{tenant}.{name}`; the file's hold no `.`.
pub(super) const STILL_MANAGED: &str = "(r.endpoint NOT LIKE '%.%' OR EXISTS (
    SELECT 1 FROM managed_endpoints AS m WHERE m.id = r.endpoint))";

/// The lease's rule for the events of one resource, on a due receipt aliased `r`, at
/// `now` (the statement's placeholder): one delivery at a time, in version order.
/// An event is skipped while another of its resource is in flight (one discarded on
/// the wire too) or is pending and comes first. At one version a delete comes last:
/// the version gate stores no other after it. Events without a resource have no
/// order. The same on both backends.
pub(super) fn no_other_of_its_resource_first(now: &str) -> String {
    format!(
        "(r.resource_id IS NULL OR NOT EXISTS (
            SELECT 1 FROM receipts AS o
            WHERE o.endpoint = r.endpoint AND o.resource_kind = r.resource_kind
              AND o.resource_id = r.resource_id AND o.state IN ('pending', 'discarded')
              AND o.event_id <> r.event_id
              AND (o.lease_expires_at_ms > {now}
                   OR o.state = 'pending' AND (
                      COALESCE(o.resource_version, -1) < COALESCE(r.resource_version, -1)
                      OR (COALESCE(o.resource_version, -1) = COALESCE(r.resource_version, -1)
                          AND (o.deleted, o.received_at_ms, o.event_id)
                              < (r.deleted, r.received_at_ms, r.event_id))))))"
    )
}

/// Record every attempt of a write batch in two statements, whatever their number:
/// attempts are independent of each other (each is under its own lease) and of the
/// batch's other work.
pub(super) fn finish_all(
    tx: &Transaction<'_>,
    requests: &[&FinishRequest],
) -> Result<(), StoreError> {
    if requests.is_empty() {
        return Ok(());
    }
    let rows: Vec<serde_json::Value> = requests
        .iter()
        .map(|r| {
            let (leased, attempt) = (&r.leased, &r.attempt);
            let (state, next_at, delivered_at) = match r.next {
                Next::Delivered => ("delivered", 0, Some(attempt.ended_at_ms)),
                Next::RetryAt(at) => ("pending", at, None),
                Next::Dead => ("dead", 0, None),
                Next::Quarantined => ("quarantined", 0, None),
            };
            serde_json::json!({
                "endpoint": leased.endpoint,
                "event_id": leased.event_id,
                "owner": r.owner,
                "lease": leased.lease_expires_at_ms,
                "attempt": i64::from(leased.attempts) + 1,
                "started": attempt.started_at_ms,
                "ended": attempt.ended_at_ms,
                "status": attempt.status,
                "error": attempt.error.as_deref().map(cap),
                "state": state,
                "next_at": next_at,
                "delivered_at": delivered_at,
            })
        })
        .collect();
    let rows = serde_json::Value::Array(rows).to_string();
    // Every attempt is recorded, even one whose lease has expired meanwhile.
    tx.prepare_cached(
        "INSERT INTO attempts (endpoint, event_id, attempt, started_at_ms, ended_at_ms, status, error)
         SELECT value->>'endpoint', value->>'event_id', value->>'attempt', value->>'started',
                value->>'ended', value->>'status', value->>'error'
         FROM json_each(?1)",
    )?
    .execute([&rows])?;
    // The receipt moves on only while the attempt's worker still holds its lease: the
    // same lease, not a later one the same worker took after this one expired.
    tx.prepare_cached(&format!(
        "UPDATE receipts SET attempts = f.attempt, {moved_on}, next_attempt_at_ms = f.next_at,
            last_error = f.error, lease_owner = NULL, lease_expires_at_ms = NULL
         FROM (SELECT value->>'endpoint' AS endpoint, value->>'event_id' AS event_id,
                      value->>'owner' AS owner, value->>'lease' AS lease,
                      value->>'attempt' AS attempt,
                      value->>'state' AS state, value->>'next_at' AS next_at,
                      value->>'error' AS error, value->>'delivered_at' AS delivered_at
               FROM json_each(?1)) AS f
         WHERE receipts.endpoint = f.endpoint AND receipts.event_id = f.event_id
           AND receipts.lease_owner = f.owner AND receipts.lease_expires_at_ms = f.lease",
        moved_on = moved_on("f.state", "f.delivered_at"),
    ))?
    .execute([&rows])?;
    Ok(())
}

/// The `SET` of a finished attempt's state and delivery time: an event the operator
/// discarded while its attempt was on the wire stays discarded, whatever the answer.
/// A delivery time, once set, is never cleared: a version delivered and later
/// discarded, or replayed and then failed, is at the destination all the same, and
/// [`not_superseded`](super::operator::not_superseded) must not replay an older one
/// over it.
pub(super) fn moved_on(state: &str, delivered_at: &str) -> String {
    format!(
        "state = CASE receipts.state WHEN 'discarded' THEN receipts.state ELSE {state} END,
            delivered_at_ms = COALESCE({delivered_at}, receipts.delivered_at_ms)"
    )
}

/// An error as stored: at most [`ERROR_CAP`] characters, and NUL replaced, which
/// PostgreSQL's `text` refuses. An error can quote what a provider's API answered,
/// and an attempt or a run whose error is refused would not be recorded at all.
pub(super) fn cap(text: &str) -> String {
    let text = match text.char_indices().nth(ERROR_CAP) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    };
    text.replace('\0', "\u{FFFD}")
}
