//! Verification forensics: requests refused after their body was read, kept so an
//! operator can say exactly what arrived and why, re-verify it, and re-ingest it.
//!
//! One SQL text per statement serves both backends (sqlx binds `$N` on SQLite too).

use super::{Backend, Store, StoreError};

/// Which kind of refusal a kept request is.
pub const KINDS: [&str; 2] = ["failed", "rejected"];

/// A refused request, as it is kept.
#[derive(Debug, Clone)]
pub struct NewForensic {
    pub endpoint: String,
    /// `failed` (verified, then a 5xx) or `rejected` (refused before it was verified).
    pub kind: &'static str,
    pub received_at_ms: i64,
    pub status: u16,
    pub code: &'static str,
    /// JSON: what verification found.
    pub detail: String,
    pub method: String,
    pub url: String,
    /// JSON `[[name, value], ...]`, credentials redacted.
    pub headers: String,
    /// JSON `[name, ...]`: the headers carrying candidate signatures, when known.
    pub signature_headers: Option<String>,
    /// `None` when the configuration keeps only the digest.
    pub body: Option<Vec<u8>>,
    pub body_sha256: [u8; 32],
    pub body_len: i64,
    pub event_id: Option<String>,
}

impl NewForensic {
    /// What it holds in memory, near enough: its body and texts.
    pub fn held_bytes(&self) -> usize {
        let texts = [&self.detail, &self.method, &self.url, &self.headers];
        texts.iter().map(|t| t.len()).sum::<usize>()
            + self.signature_headers.as_ref().map_or(0, String::len)
            + self.body.as_ref().map_or(0, Vec::len)
            + self.event_id.as_ref().map_or(0, String::len)
    }
}

/// A kept request, as listed (no headers, no body).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct ForensicSummary {
    pub id: i64,
    pub endpoint: String,
    pub kind: String,
    pub received_at_ms: i64,
    pub status: i64,
    pub code: String,
    pub event_id: Option<String>,
    pub body_len: i64,
    pub body_kept: bool,
    pub reingested_at_ms: Option<i64>,
    pub reingest_outcome: Option<String>,
}

/// A kept request in full, as stored (signature values included: show it redacted).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ForensicRow {
    pub id: i64,
    pub endpoint: String,
    pub kind: String,
    pub received_at_ms: i64,
    pub status: i64,
    pub code: String,
    pub detail: String,
    pub method: String,
    pub url: String,
    pub headers: String,
    pub signature_headers: Option<String>,
    pub body: Option<Vec<u8>>,
    pub body_sha256: Vec<u8>,
    pub body_len: i64,
    pub event_id: Option<String>,
    pub reingested_at_ms: Option<i64>,
    pub reingest_outcome: Option<String>,
}

/// Which kept requests to list; every field narrows.
#[derive(Debug, Clone, Default, clap::Args, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForensicFilter {
    /// Only this endpoint's requests.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// `failed` or `rejected`.
    #[arg(long)]
    pub kind: Option<String>,
    #[arg(
        long,
        help = format!("At most this many requests, newest first ({} at most)", super::operator::LIST_CAP)
    )]
    pub limit: Option<u32>,
}

impl ForensicFilter {
    /// A kind that does not exist would silently match nothing: refuse it by name.
    pub fn check(&self) -> Result<(), String> {
        match &self.kind {
            Some(kind) if !KINDS.contains(&kind.as_str()) => {
                Err(format!("kind: {kind:?} is not one of {}", KINDS.join(", ")))
            }
            _ => Ok(()),
        }
    }
}

const SUMMARY: &str = "id, endpoint, kind, received_at_ms, status, code, event_id, body_len,
                       body IS NOT NULL AS body_kept, reingested_at_ms, reingest_outcome";

impl Store {
    /// Keep refused requests, in one transaction; then trim each endpoint's rejected
    /// requests to the newest `rejected_per_endpoint`. Returns the new rows' ids.
    pub async fn keep_forensics(
        &self,
        kept: &[NewForensic],
        rejected_per_endpoint: u32,
    ) -> Result<Vec<i64>, StoreError> {
        const INSERT: &str = "INSERT INTO forensics (endpoint, kind, received_at_ms, status, code,
                                  detail, method, url, headers, signature_headers, body,
                                  body_sha256, body_len, event_id)
                              VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
                              RETURNING id";
        // Everything older than the endpoint's newest `$2` rejected requests.
        const TRIM: &str = "DELETE FROM forensics WHERE kind = 'rejected' AND endpoint = $1
                            AND id <= (SELECT id FROM forensics
                                       WHERE kind = 'rejected' AND endpoint = $1
                                       ORDER BY id DESC LIMIT 1 OFFSET $2)";
        let mut trimmed: Vec<&str> = kept
            .iter()
            .filter(|k| k.kind == "rejected")
            .map(|k| k.endpoint.as_str())
            .collect();
        trimmed.sort_unstable();
        trimmed.dedup();
        on_pool!(self, writes, pool => {
            let mut tx = pool.begin().await?;
            let mut ids = Vec::with_capacity(kept.len());
            for k in kept {
                let id: i64 = sqlx::query_scalar(INSERT)
                    .bind(&k.endpoint)
                    .bind(k.kind)
                    .bind(k.received_at_ms)
                    .bind(i64::from(k.status))
                    .bind(k.code)
                    .bind(&k.detail)
                    .bind(&k.method)
                    .bind(&k.url)
                    .bind(&k.headers)
                    .bind(&k.signature_headers)
                    .bind(&k.body)
                    .bind(&k.body_sha256[..])
                    .bind(k.body_len)
                    .bind(&k.event_id)
                    .fetch_one(&mut *tx)
                    .await?;
                ids.push(id);
            }
            for endpoint in &trimmed {
                sqlx::query(TRIM)
                    .bind(*endpoint)
                    .bind(i64::from(rejected_per_endpoint))
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(ids)
        })
    }

    /// Kept requests matching a filter, newest first.
    pub async fn forensics(
        &self,
        filter: &ForensicFilter,
    ) -> Result<Vec<ForensicSummary>, StoreError> {
        let sql = format!(
            "SELECT {SUMMARY} FROM forensics
             WHERE ($1 IS NULL OR endpoint = $1) AND ($2 IS NULL OR kind = $2)
             ORDER BY id DESC LIMIT $3"
        );
        let limit = i64::from(filter.limit.unwrap_or(super::operator::LIST_CAP))
            .min(i64::from(super::operator::LIST_CAP));
        Ok(on_pool!(self, reads, pool => {
            sqlx::query_as(&sql)
                .bind(&filter.endpoint)
                .bind(&filter.kind)
                .bind(limit)
                .fetch_all(pool)
                .await?
        }))
    }

    /// One kept request in full.
    pub async fn forensic(&self, id: i64) -> Result<Option<ForensicRow>, StoreError> {
        const SQL: &str = "SELECT id, endpoint, kind, received_at_ms, status, code, detail,
                                  method, url, headers, signature_headers, body, body_sha256,
                                  body_len, event_id, reingested_at_ms, reingest_outcome
                           FROM forensics WHERE id = $1";
        Ok(on_pool!(self, reads, pool => {
            sqlx::query_as(SQL).bind(id).fetch_optional(pool).await?
        }))
    }

    /// Note that a kept request was ingested again, and what the store decided.
    pub async fn forensic_reingested(
        &self,
        id: i64,
        event_id: &str,
        outcome: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        const SQL: &str = "UPDATE forensics
                           SET reingested_at_ms = $2, reingest_outcome = $3, event_id = $4
                           WHERE id = $1";
        on_pool!(self, writes, pool => {
            sqlx::query(SQL)
                .bind(id)
                .bind(now_ms)
                .bind(outcome)
                .bind(event_id)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Delete rejected requests received before `before_ms`, and failed ones that
    /// were re-ingested before it. A failed request not yet re-ingested is kept: it is
    /// the only copy of an authentic event. Unless it was a tenant's endpoint's, since
    /// deleted (none can re-ingest it): then it goes as a rejected one does.
    pub async fn purge_forensics(&self, before_ms: i64) -> Result<u64, StoreError> {
        let sql = format!(
            "DELETE FROM forensics AS r
             WHERE (kind = 'rejected' AND received_at_ms < $1)
                OR (kind = 'failed' AND reingested_at_ms < $1)
                OR (kind = 'failed' AND received_at_ms < $1 AND NOT {STILL_MANAGED})",
            STILL_MANAGED = super::delivery::STILL_MANAGED
        );
        Ok(on_pool!(self, writes, pool => {
            sqlx::query(&sql).bind(before_ms).execute(pool).await?.rows_affected()
        }))
    }
}
