//! Tenants, their API tokens, and the endpoints and sealed secrets they manage at
//! runtime. Every change bumps `registry_version` in its own transaction; each
//! process polls it and reloads its endpoint registry when it moves.
//!
//! Every query that reads or changes a tenant's resource names the tenant: an id of
//! another tenant's resource matches nothing, exactly like an id that does not exist.

use super::{Backend, Store, StoreError};

const BUMP: &str = "UPDATE registry_version SET version = version + 1 WHERE id = 1";

/// Discard an endpoint id's pending receipts (`$1`) at `$2`, as `endpoint_deleted`:
/// they were for a deleted endpoint's destination, and one created again under the id
/// would send them to its own. Run in the creation's transaction, after
/// [`Store::discard_pending_of_deleted`] has taken the backlog, it finds only what
/// arrived meanwhile.
const DISCARD_PENDING: &str =
    "UPDATE receipts SET state = 'discarded', state_reason = 'endpoint_deleted',
     discarded_at_ms = $2
     WHERE endpoint = $1 AND state = 'pending'";

/// Remove an endpoint id's (`$1`) pause: with its endpoint deleted, or one created
/// under the id. An operator's pause set while a process still knew the deleted
/// endpoint can land after the deletion's own, and one created again would start
/// paused by nobody's choice, with no resume the tenant may make.
const UNPAUSE: &str = "DELETE FROM endpoint_pauses WHERE endpoint = $1";

/// How many of an endpoint's receipts one statement of
/// [`Store::discard_pending_of_deleted`] looks at.
const DISCARD_BATCH: i64 = 1_000;

/// No managed endpoint holds the id `$1`.
const FREE: &str = "NOT EXISTS (SELECT 1 FROM managed_endpoints WHERE id = $1)";

/// One batch of [`Store::discard_pending_of_deleted`], the first or one `after` an
/// event id: where it ends, none once the id is held again (binds: endpoint id,
/// [`DISCARD_BATCH`], then the id it starts after), and its discard, which checks
/// again that the id is free (binds: endpoint id, the id it ends at, the time, then
/// the id it starts after). The range and the order are the database's own,
/// whatever its collation. Two forms, not one with `($n IS NULL OR event_id > $n)`:
/// PostgreSQL's generic plan for that would scan the endpoint's receipts from its
/// first, every batch.
fn discard_batch(after: bool) -> (String, String) {
    let from = |n: u8| match after {
        true => format!("AND event_id > ${n}"),
        false => String::new(),
    };
    let upto = format!(
        "SELECT MAX(event_id) FROM (
            SELECT event_id FROM receipts WHERE endpoint = $1 {}
            ORDER BY event_id LIMIT $2) AS batch
         WHERE {FREE}",
        from(3)
    );
    let discard = format!(
        "UPDATE receipts SET state = 'discarded', state_reason = 'endpoint_deleted',
                            discarded_at_ms = $3
         WHERE endpoint = $1 {} AND event_id <= $2 AND state = 'pending' AND {FREE}",
        from(4)
    );
    (upto, discard)
}

/// Insert a sealed secret within the transaction `$tx`.
macro_rules! insert_secret {
    ($tx:expr, $secret:expr) => {
        sqlx::query(
            "INSERT INTO endpoint_secrets (id, endpoint, sealed, fingerprint, created_at_ms)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&$secret.id)
        .bind(&$secret.endpoint)
        .bind(&$secret.sealed)
        .bind(&$secret.fingerprint)
        .bind($secret.created_at_ms)
        .execute($tx)
        .await?
    };
}

const READ_VERSION: &str = "SELECT version FROM registry_version WHERE id = 1";

const READ_TENANTS: &str =
    "SELECT id, name, created_at_ms, requests_per_second, max_endpoints, seal_bodies
     FROM tenants ORDER BY id";

/// Every managed endpoint, or tenant `$1`'s.
const READ_MANAGED: &str =
    "SELECT id, tenant, spec, destination_sealed, handshake_sealed, facts, created_at_ms,
            updated_at_ms
     FROM managed_endpoints WHERE ($1 IS NULL OR tenant = $1) ORDER BY id";

/// Secrets of tenant `$1`'s endpoints (any tenant's when null), of endpoint `$2`'s
/// (any endpoint's when null), newest first.
const READ_SECRETS: &str =
    "SELECT s.id, s.endpoint, s.sealed, s.fingerprint, s.created_at_ms, s.retired_at_ms,
            s.last_matched_at_ms
     FROM endpoint_secrets s JOIN managed_endpoints e ON e.id = s.endpoint
     WHERE ($1 IS NULL OR e.tenant = $1) AND ($2 IS NULL OR s.endpoint = $2)
     ORDER BY s.endpoint, s.created_at_ms DESC, s.id DESC";

/// What a registry rebuild reads: every tenant, managed endpoint and secret, as one
/// snapshot held them.
#[derive(Debug, Clone)]
pub struct RegistryRows {
    /// The [`Store::registry_version`] of that snapshot.
    pub version: i64,
    pub tenants: Vec<TenantRow>,
    pub endpoints: Vec<ManagedEndpoint>,
    pub secrets: Vec<SealedSecret>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct TenantRow {
    pub id: String,
    pub name: String,
    pub created_at_ms: i64,
    /// Its own quotas; `None`: the configuration's.
    pub requests_per_second: Option<i64>,
    pub max_endpoints: Option<i64>,
    /// Its endpoints' raw bodies are sealed at rest.
    pub seal_bodies: bool,
}

/// An endpoint created through the API.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ManagedEndpoint {
    pub id: String,
    pub tenant: String,
    /// Its settings as JSON (see `tenancy::EndpointSpec`).
    pub spec: String,
    /// The destination's signing secret, sealed.
    pub destination_sealed: Option<Vec<u8>>,
    /// The token its GET handshake must present, sealed.
    pub handshake_sealed: Option<Vec<u8>>,
    /// Its plugin's configuration check, as answered for one plugin digest (JSON; see
    /// `tenancy::CheckedFacts`).
    pub facts: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// A secret as stored: sealed, with its fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SealedSecret {
    pub id: String,
    pub endpoint: String,
    pub sealed: Vec<u8>,
    pub fingerprint: String,
    pub created_at_ms: i64,
    pub retired_at_ms: Option<i64>,
    pub last_matched_at_ms: Option<i64>,
}

/// A plugin a tenant uploaded, as listed (without its bytes).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct TenantPlugin {
    pub tenant: String,
    /// Hex SHA-256 of the component.
    pub digest: String,
    pub name: String,
    pub version: String,
    pub size: i64,
    pub created_at_ms: i64,
}

/// What adding an endpoint or a plugin did, its quota counted in its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    Added,
    /// Its id (an endpoint's) or its digest (a plugin's) is the tenant's already.
    Exists,
    /// The tenant has its quota of them already.
    OverQuota,
}

/// Taken first in a transaction adding to a tenant, the tenant's row lock orders two
/// additions: the second counts after the first commits, so two cannot each see room
/// for one more (PostgreSQL reads committed rows; on SQLite the write lock orders
/// them, across processes too).
const LOCK_TENANT: &str = "UPDATE tenants SET id = id WHERE id = $1";

/// What a change to an endpoint did, checked against the endpoint as its caller read
/// it (its `updated_at_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edited {
    Edited,
    /// The tenant has no such endpoint.
    Missing,
    /// The endpoint changed after it was read: what the caller checked no longer holds.
    Stale,
}

/// Whether a tenant's endpoint is there, for telling [`Edited::Missing`] from
/// [`Edited::Stale`].
const EXISTS: &str = "SELECT COUNT(*) FROM managed_endpoints WHERE id = $1 AND tenant = $2";

/// What a tenant's pause or resume of its endpoint did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paused {
    Done,
    /// The tenant has no such endpoint.
    Missing,
    /// An operator paused the endpoint: it stays paused until an operator resumes it.
    HeldByOperator,
}

/// Taken first in a transaction changing what belongs to an endpoint, the endpoint's
/// row lock orders the change with a delete of the endpoint and with other changes
/// to it (PostgreSQL reads committed rows; SQLite's one writer orders them already).
/// No row written: the tenant has no such endpoint.
const LOCK_ENDPOINT: &str = "UPDATE managed_endpoints SET id = id WHERE id = $1 AND tenant = $2";

/// Retired secrets an endpoint keeps, for the record (they verify nothing): the ones
/// retired last. Without a bound, adding and retiring would grow the rows every
/// registry rebuild reads.
pub const KEPT_RETIRED: i64 = 10;

/// What retiring a secret did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retired {
    Retired,
    /// No such active secret on that endpoint.
    Unknown,
    /// It is the endpoint's last active secret: refused.
    LastActive,
}

impl Store {
    /// The number every change to tenants' endpoints and secrets moves.
    pub async fn registry_version(&self) -> Result<i64, StoreError> {
        Ok(on_pool!(self, reads, pool => {
            sqlx::query_scalar(READ_VERSION).fetch_one(pool).await?
        }))
    }

    /// Everything a registry rebuild reads, from one snapshot: read one by one, an
    /// endpoint deleted between the reads would be built without its secrets, and a
    /// tenant created just before its first endpoint would be missing its settings.
    pub async fn registry(&self) -> Result<RegistryRows, StoreError> {
        let postgres = matches!(self.backend, Backend::Postgres(_));
        Ok(on_pool!(self, reads, pool => {
            // SQLite's read transaction keeps the snapshot its first read took;
            // PostgreSQL's does only when asked (it reads committed rows by default).
            let mut tx = pool.begin().await?;
            if postgres {
                sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    .execute(&mut *tx)
                    .await?;
            }
            let none: Option<&str> = None;
            let registry = RegistryRows {
                version: sqlx::query_scalar(READ_VERSION).fetch_one(&mut *tx).await?,
                tenants: sqlx::query_as(READ_TENANTS).fetch_all(&mut *tx).await?,
                endpoints: sqlx::query_as(READ_MANAGED).bind(none).fetch_all(&mut *tx).await?,
                secrets: sqlx::query_as(READ_SECRETS).bind(none).bind(none).fetch_all(&mut *tx).await?,
            };
            tx.commit().await?;
            registry
        }))
    }

    /// Create a tenant; `false` when the id is taken.
    pub async fn create_tenant(&self, tenant: &TenantRow) -> Result<bool, StoreError> {
        const SQL: &str =
            "INSERT INTO tenants (id, name, created_at_ms, requests_per_second, max_endpoints, seal_bodies)
                           VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING";
        Ok(on_pool!(self, writes, pool => {
            sqlx::query(SQL)
                .bind(&tenant.id)
                .bind(&tenant.name)
                .bind(tenant.created_at_ms)
                .bind(tenant.requests_per_second)
                .bind(tenant.max_endpoints)
                .bind(tenant.seal_bodies)
                .execute(pool)
                .await?
                .rows_affected() == 1
        }))
    }

    pub async fn tenants(&self) -> Result<Vec<TenantRow>, StoreError> {
        Ok(on_pool!(self, reads, pool => {
            sqlx::query_as(READ_TENANTS).fetch_all(pool).await?
        }))
    }

    /// Keep a token's SHA-256 for `tenant`; `false` when there is no such tenant.
    pub async fn issue_token(
        &self,
        tenant: &str,
        token_id: &str,
        token_sha256: &[u8],
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "INSERT INTO tenant_tokens (id, tenant, token_sha256, created_at_ms)
                           SELECT $1, id, $3, $4 FROM tenants WHERE id = $2";
        Ok(on_pool!(self, writes, pool => {
            let query = sqlx::query(SQL).bind(token_id).bind(tenant).bind(token_sha256).bind(now_ms);
            query.execute(pool).await?.rows_affected() == 1
        }))
    }

    /// Revoke one of `tenant`'s tokens; `false` when it has no such live token.
    pub async fn revoke_token(
        &self,
        tenant: &str,
        token_id: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "UPDATE tenant_tokens SET revoked_at_ms = $3
                           WHERE id = $1 AND tenant = $2 AND revoked_at_ms IS NULL";
        Ok(on_pool!(self, writes, pool => {
            let query = sqlx::query(SQL).bind(token_id).bind(tenant).bind(now_ms);
            query.execute(pool).await?.rows_affected() == 1
        }))
    }

    /// The tenant a live token (by its SHA-256) belongs to.
    pub async fn token_tenant(&self, token_sha256: &[u8]) -> Result<Option<String>, StoreError> {
        const SQL: &str = "SELECT tenant FROM tenant_tokens
                           WHERE token_sha256 = $1 AND revoked_at_ms IS NULL";
        Ok(on_pool!(self, reads, pool => {
            sqlx::query_scalar(SQL).bind(token_sha256).fetch_optional(pool).await?
        }))
    }

    /// Every managed endpoint, or one tenant's.
    pub async fn managed_endpoints(
        &self,
        tenant: Option<&str>,
    ) -> Result<Vec<ManagedEndpoint>, StoreError> {
        Ok(on_pool!(self, reads, pool => {
            sqlx::query_as(READ_MANAGED).bind(tenant).fetch_all(pool).await?
        }))
    }

    /// Create a managed endpoint with its first secret, in one transaction, unless its
    /// tenant has `max_endpoints` already or the id is taken. Receipts still pending
    /// under the id are an earlier endpoint's, stored after its deletion by a request
    /// already under way (or by a process yet to see it gone): they are discarded, as
    /// the deletion discarded those before it.
    pub async fn create_endpoint(
        &self,
        endpoint: &ManagedEndpoint,
        secret: &SealedSecret,
        max_endpoints: u32,
    ) -> Result<Added, StoreError> {
        const COUNT: &str = "SELECT COUNT(*) FROM managed_endpoints WHERE tenant = $1";
        const SQL: &str =
            "INSERT INTO managed_endpoints (id, tenant, spec, destination_sealed, handshake_sealed, facts,
                                                          created_at_ms, updated_at_ms)
                           VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING";
        // What a deleted endpoint under this id left pending, before the transaction:
        // its backlog can be large.
        self.discard_pending_of_deleted(&endpoint.id).await?;
        on_pool!(self, writes, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query(LOCK_TENANT).bind(&endpoint.tenant).execute(&mut *tx).await?;
            let count: i64 = sqlx::query_scalar(COUNT).bind(&endpoint.tenant).fetch_one(&mut *tx).await?;
            if count >= i64::from(max_endpoints) {
                return Ok(Added::OverQuota);
            }
            let created = sqlx::query(SQL)
                .bind(&endpoint.id)
                .bind(&endpoint.tenant)
                .bind(&endpoint.spec)
                .bind(&endpoint.destination_sealed)
                .bind(&endpoint.handshake_sealed)
                .bind(&endpoint.facts)
                .bind(endpoint.created_at_ms)
                .bind(endpoint.updated_at_ms)
                .execute(&mut *tx)
                .await?
                .rows_affected() == 1;
            if !created {
                return Ok(Added::Exists);
            }
            insert_secret!(&mut *tx, secret);
            sqlx::query(UNPAUSE).bind(&endpoint.id).execute(&mut *tx).await?;
            let now = crate::clock::now_ms();
            sqlx::query(DISCARD_PENDING).bind(&endpoint.id).bind(now).execute(&mut *tx).await?;
            sqlx::query(BUMP).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(Added::Added)
        })
    }

    /// Replace a tenant's endpoint's settings, destination secret and handshake token,
    /// unless it has changed since it was read at `read_at_ms` (its `updated_at_ms`
    /// then): the new settings were checked against its secrets as they were.
    pub async fn update_endpoint(
        &self,
        endpoint: &ManagedEndpoint,
        read_at_ms: i64,
    ) -> Result<Edited, StoreError> {
        const SQL: &str =
            "UPDATE managed_endpoints SET spec = $3, destination_sealed = $4, handshake_sealed = $5,
                                         facts = $6, updated_at_ms = $7
                           WHERE id = $1 AND tenant = $2 AND updated_at_ms = $8";
        on_pool!(self, writes, pool => {
            let mut tx = pool.begin().await?;
            let query = sqlx::query(SQL)
                .bind(&endpoint.id)
                .bind(&endpoint.tenant)
                .bind(&endpoint.spec)
                .bind(&endpoint.destination_sealed)
                .bind(&endpoint.handshake_sealed)
                .bind(&endpoint.facts)
                .bind(endpoint.updated_at_ms)
                .bind(read_at_ms);
            if query.execute(&mut *tx).await?.rows_affected() == 0 {
                let there: i64 = sqlx::query_scalar(EXISTS).bind(&endpoint.id).bind(&endpoint.tenant).fetch_one(&mut *tx).await?;
                return Ok(if there == 0 { Edited::Missing } else { Edited::Stale });
            }
            sqlx::query(BUMP).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(Edited::Edited)
        })
    }

    /// Delete a tenant's endpoint, its secrets and its pause, so that one created
    /// again under its id starts afresh; `false` when it has no such endpoint. Its
    /// receipts stay, but those still pending are discarded once it is gone
    /// ([`Store::discard_pending_of_deleted`]). An attempt on the wire meanwhile
    /// leaves them discarded. Its resources' versions stay, so an older version is
    /// never sent over a newer one.
    pub async fn delete_endpoint(&self, tenant: &str, id: &str) -> Result<bool, StoreError> {
        const SQL: &str = "DELETE FROM managed_endpoints WHERE id = $1 AND tenant = $2";
        const SECRETS: &str = "DELETE FROM endpoint_secrets WHERE endpoint = $1";
        let deleted = on_pool!(self, writes, pool => {
            let mut tx = pool.begin().await?;
            let query = sqlx::query(SQL).bind(id).bind(tenant);
            if query.execute(&mut *tx).await?.rows_affected() == 0 {
                return Ok(false);
            }
            sqlx::query(SECRETS).bind(id).execute(&mut *tx).await?;
            sqlx::query(UNPAUSE).bind(id).execute(&mut *tx).await?;
            sqlx::query(BUMP).execute(&mut *tx).await?;
            tx.commit().await?;
            true
        });
        // The deletion stands whatever happens to the discard: no worker leases a
        // deleted endpoint's receipts, and what is left pending here the sweep
        // discards (`discard_orphaned`), or the id's next creation.
        if let Err(error) = self.discard_pending_of_deleted(id).await {
            tracing::warn!(endpoint = id, %error, "deleted endpoint's pending receipts not all discarded");
        }
        Ok(deleted)
    }

    /// Discard what deleted endpoints left pending, and answer how many: receipts
    /// committed after a deletion's own discard, by a request already under way or
    /// by a process that had not yet seen the endpoint gone. No worker leases them
    /// (no endpoint of theirs is served) and no purge takes a pending receipt: else
    /// they waited for ever, out of every view but a listing. A tenant's endpoint id
    /// is `{tenant}.{name}`, and the file's ids hold no `.`: a pending receipt under a
    /// dotted id that no managed endpoint holds is such a leftover.
    pub async fn discard_orphaned(&self) -> Result<u64, StoreError> {
        let orphaned = format!(
            "SELECT DISTINCT r.endpoint FROM receipts AS r
             WHERE r.state = 'pending' AND NOT {}",
            super::delivery::STILL_MANAGED
        );
        let ids: Vec<String> = on_pool!(self, reads, pool => {
            sqlx::query_scalar(&orphaned).fetch_all(pool).await?
        });
        let mut discarded = 0;
        for id in ids {
            discarded += self.discard_pending_of_deleted(&id).await?;
        }
        Ok(discarded)
    }

    /// Discard, as `endpoint_deleted`, the pending receipts of endpoint id `id` while
    /// no managed endpoint holds it, and answer how many. The receipts are taken in
    /// the primary key's order, [`DISCARD_BATCH`] at a time, each statement committed
    /// on its own: a deleted endpoint's backlog can be a day of events, and one
    /// statement over it would hold SQLite's write lock (every receipt batch meanwhile
    /// answered 503) or run past PostgreSQL's `statement_timeout` (rolled back every
    /// time). It reads the id's receipts once, delivered ones too, 1,000 at a time.
    /// It stops as soon as the id is held, and each statement checks again that it is
    /// free, so an endpoint created under it meanwhile keeps its own receipts. Until
    /// then, no worker leases them ([`super::delivery::STILL_MANAGED`]).
    pub async fn discard_pending_of_deleted(&self, id: &str) -> Result<u64, StoreError> {
        let (first, next) = (discard_batch(false), discard_batch(true));
        on_pool!(self, writes, pool => {
            let mut discarded = 0;
            let mut after: Option<String> = None;
            loop {
                let (upto, discard) = if after.is_some() { &next } else { &first };
                let mut ends = sqlx::query_scalar(upto).bind(id).bind(DISCARD_BATCH);
                if let Some(after) = &after {
                    ends = ends.bind(after);
                }
                // None: nothing is left, or the id is held again and its receipts are
                // its endpoint's.
                let Some(upto): Option<String> = ends.fetch_one(pool).await? else {
                    return Ok(discarded);
                };
                let mut batch = sqlx::query(discard).bind(id).bind(&upto).bind(crate::clock::now_ms());
                if let Some(after) = &after {
                    batch = batch.bind(after);
                }
                discarded += batch.execute(pool).await?.rows_affected();
                after = Some(upto);
            }
        })
    }

    /// Pause or resume a tenant's endpoint's delivery. A tenant resumes its own pause,
    /// never an operator's; pausing what an operator paused changes nothing.
    pub async fn tenant_set_paused(
        &self,
        tenant: &str,
        id: &str,
        paused: bool,
        now_ms: i64,
    ) -> Result<Paused, StoreError> {
        // The endpoint's row is locked first: a delete of the endpoint either commits
        // before, and nothing is paused here, or waits and deletes this pause with the
        // endpoint's other rows. Otherwise a pause could outlive its endpoint, and one
        // created again under the id would start paused.
        const PAUSE: &str = "INSERT INTO endpoint_pauses (endpoint, paused_at_ms, paused_by)
                             VALUES ($1, $2, 'tenant') ON CONFLICT (endpoint) DO NOTHING";
        const RESUME: &str =
            "DELETE FROM endpoint_pauses WHERE endpoint = $1 AND paused_by = 'tenant'";
        const HELD: &str = "SELECT COUNT(*) FROM endpoint_pauses WHERE endpoint = $1";
        let done = on_pool!(self, writes, pool => {
            let mut tx = pool.begin().await?;
            let lock = sqlx::query(LOCK_ENDPOINT).bind(id).bind(tenant);
            if lock.execute(&mut *tx).await?.rows_affected() == 0 {
                return Ok(Paused::Missing);
            }
            let held: i64 = if paused {
                sqlx::query(PAUSE).bind(id).bind(now_ms).execute(&mut *tx).await?;
                0
            } else {
                sqlx::query(RESUME).bind(id).execute(&mut *tx).await?;
                sqlx::query_scalar(HELD).bind(id).fetch_one(&mut *tx).await?
            };
            tx.commit().await?;
            if held > 0 { Paused::HeldByOperator } else { Paused::Done }
        });
        if !paused && done == Paused::Done {
            self.wake_workers();
        }
        Ok(done)
    }

    /// Add a secret to a tenant's endpoint (it becomes current), unless the endpoint
    /// has changed since it was read at `read_at_ms` (the secret was checked against
    /// its plugin then); the endpoint's `updated_at_ms` moves to `now_ms`.
    pub async fn add_secret(
        &self,
        tenant: &str,
        secret: &SealedSecret,
        read_at_ms: i64,
        now_ms: i64,
    ) -> Result<Edited, StoreError> {
        // The endpoint's row is written first, not read: a delete of the endpoint
        // (which takes its row first) either commits before, and then no row is
        // written here, or waits and deletes this secret with the others. A read
        // would let the delete commit between it and the insert, leaving a secret that
        // a later endpoint of the same id would take for its own.
        const TOUCH: &str = "UPDATE managed_endpoints SET updated_at_ms = $3
                             WHERE id = $1 AND tenant = $2 AND updated_at_ms = $4";
        on_pool!(self, writes, pool => {
            let mut tx = pool.begin().await?;
            let touch = sqlx::query(TOUCH).bind(&secret.endpoint).bind(tenant).bind(now_ms).bind(read_at_ms);
            if touch.execute(&mut *tx).await?.rows_affected() == 0 {
                let there: i64 = sqlx::query_scalar(EXISTS).bind(&secret.endpoint).bind(tenant).fetch_one(&mut *tx).await?;
                return Ok(if there == 0 { Edited::Missing } else { Edited::Stale });
            }
            insert_secret!(&mut *tx, secret);
            sqlx::query(BUMP).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(Edited::Edited)
        })
    }

    /// An endpoint's secrets (active and retired), newest first; `None` when the tenant
    /// has no such endpoint. `tenant = None` reads any endpoint's (the registry).
    pub async fn secrets(
        &self,
        tenant: Option<&str>,
        endpoint: Option<&str>,
    ) -> Result<Vec<SealedSecret>, StoreError> {
        Ok(on_pool!(self, reads, pool => {
            sqlx::query_as(READ_SECRETS).bind(tenant).bind(endpoint).fetch_all(pool).await?
        }))
    }

    /// Keep an uploaded plugin with what it said of itself (`described`, JSON), unless
    /// the tenant has these bytes already or `max_plugins` others.
    pub async fn add_plugin(
        &self,
        plugin: &TenantPlugin,
        wasm: &[u8],
        described: &str,
        max_plugins: u32,
    ) -> Result<Added, StoreError> {
        const KNOWN: &str = "SELECT COUNT(*) FROM tenant_plugins WHERE tenant = $1 AND digest = $2";
        const COUNT: &str = "SELECT COUNT(*) FROM tenant_plugins WHERE tenant = $1";
        const SQL: &str =
            "INSERT INTO tenant_plugins (tenant, digest, name, version, size, wasm, created_at_ms, described)
                           VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
        on_pool!(self, writes, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query(LOCK_TENANT).bind(&plugin.tenant).execute(&mut *tx).await?;
            let known: i64 = sqlx::query_scalar(KNOWN).bind(&plugin.tenant).bind(&plugin.digest).fetch_one(&mut *tx).await?;
            if known > 0 {
                return Ok(Added::Exists);
            }
            let count: i64 = sqlx::query_scalar(COUNT).bind(&plugin.tenant).fetch_one(&mut *tx).await?;
            if count >= i64::from(max_plugins) {
                return Ok(Added::OverQuota);
            }
            sqlx::query(SQL)
                .bind(&plugin.tenant)
                .bind(&plugin.digest)
                .bind(&plugin.name)
                .bind(&plugin.version)
                .bind(plugin.size)
                .bind(wasm)
                .bind(plugin.created_at_ms)
                .bind(described)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Added::Added)
        })
    }

    /// A tenant's uploaded plugins, oldest first.
    pub async fn tenant_plugins(&self, tenant: &str) -> Result<Vec<TenantPlugin>, StoreError> {
        const SQL: &str = "SELECT tenant, digest, name, version, size, created_at_ms
                           FROM tenant_plugins WHERE tenant = $1 ORDER BY created_at_ms, digest";
        Ok(on_pool!(self, reads, pool => {
            sqlx::query_as(SQL).bind(tenant).fetch_all(pool).await?
        }))
    }

    /// What an uploaded plugin said of itself (JSON; `None` inside when it was
    /// uploaded before that was kept) and its size; `None` when the tenant has no such
    /// plugin.
    pub async fn plugin_described(
        &self,
        tenant: &str,
        digest: &str,
    ) -> Result<Option<(Option<String>, i64)>, StoreError> {
        const SQL: &str =
            "SELECT described, size FROM tenant_plugins WHERE tenant = $1 AND digest = $2";
        Ok(on_pool!(self, reads, pool => {
            sqlx::query_as(SQL).bind(tenant).bind(digest).fetch_optional(pool).await?
        }))
    }

    /// Fill in what a plugin uploaded before it was kept says of itself.
    pub async fn set_plugin_described(
        &self,
        tenant: &str,
        digest: &str,
        described: &str,
    ) -> Result<(), StoreError> {
        const SQL: &str = "UPDATE tenant_plugins SET described = $3
                           WHERE tenant = $1 AND digest = $2 AND described IS NULL";
        on_pool!(self, writes, pool => {
            sqlx::query(SQL).bind(tenant).bind(digest).bind(described).execute(pool).await?;
        });
        Ok(())
    }

    /// An uploaded plugin's bytes.
    pub async fn plugin_wasm(
        &self,
        tenant: &str,
        digest: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        const SQL: &str = "SELECT wasm FROM tenant_plugins WHERE tenant = $1 AND digest = $2";
        Ok(on_pool!(self, reads, pool => {
            sqlx::query_scalar(SQL).bind(tenant).bind(digest).fetch_optional(pool).await?
        }))
    }

    /// Note when secrets last verified a request: (secret id, unix ms); a time older
    /// than the one stored changes nothing.
    pub async fn secrets_matched(&self, matched: &[(String, i64)]) -> Result<(), StoreError> {
        const SQL: &str = "UPDATE endpoint_secrets SET last_matched_at_ms = $2
                           WHERE id = $1 AND (last_matched_at_ms IS NULL OR last_matched_at_ms < $2)";
        on_pool!(self, writes, pool => {
            let mut tx = pool.begin().await?;
            for (id, at) in matched {
                sqlx::query(SQL).bind(id).bind(at).execute(&mut *tx).await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Retire one of a tenant's endpoint's active secrets, unless it is the last. Its
    /// sealed value goes with it (a secret rotated because it leaked is gone, not kept
    /// sealed): the endpoint keeps its [`KEPT_RETIRED`] secrets retired last for the
    /// record (id, fingerprint, times); older ones are deleted.
    pub async fn retire_secret(
        &self,
        tenant: &str,
        endpoint: &str,
        secret: &str,
        now_ms: i64,
    ) -> Result<Retired, StoreError> {
        // The endpoint's row lock orders two retirements of one endpoint: the second
        // reads the active secrets after the first commits, so they cannot each see
        // the other's secret still active and leave none.
        const ACTIVE: &str = "SELECT s.id FROM endpoint_secrets s
                              JOIN managed_endpoints e ON e.id = s.endpoint
                              WHERE s.endpoint = $1 AND e.tenant = $2 AND s.retired_at_ms IS NULL";
        const RETIRE: &str = "UPDATE endpoint_secrets SET retired_at_ms = $3, sealed = $4
                              WHERE id = $1 AND endpoint = $2";
        const FORGET: &str = "DELETE FROM endpoint_secrets
                              WHERE endpoint = $1 AND retired_at_ms IS NOT NULL AND id NOT IN (
                                  SELECT id FROM endpoint_secrets
                                  WHERE endpoint = $1 AND retired_at_ms IS NOT NULL
                                  ORDER BY retired_at_ms DESC, id DESC LIMIT $2)";
        on_pool!(self, writes, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query(LOCK_ENDPOINT).bind(endpoint).bind(tenant).execute(&mut *tx).await?;
            let active: Vec<String> = sqlx::query_scalar(ACTIVE)
                .bind(endpoint)
                .bind(tenant)
                .fetch_all(&mut *tx)
                .await?;
            if !active.iter().any(|id| id == secret) {
                return Ok(Retired::Unknown);
            }
            if active.len() == 1 {
                return Ok(Retired::LastActive);
            }
            let gone: &[u8] = &[];
            sqlx::query(RETIRE).bind(secret).bind(endpoint).bind(now_ms).bind(gone).execute(&mut *tx).await?;
            sqlx::query(FORGET).bind(endpoint).bind(KEPT_RETIRED).execute(&mut *tx).await?;
            sqlx::query(BUMP).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(Retired::Retired)
        })
    }
}
