//! The store: durable receipts, dedupe, the version gate and the inbox.
//!
//! Owns every database row. One writer task commits receipts; concurrent requests
//! queue behind it and are committed together in one transaction (group commit), and
//! each is answered only after that transaction is durable (SQLite WAL with
//! `synchronous=FULL`). A failed transaction answers `Unavailable` to every request in
//! it. Never sees a secret or a plugin.

mod delivery;
mod operator;
mod sqlite;
mod writer;

pub use delivery::{AttemptRecord, Leased, Next};
pub use operator::{Filter, REPLAYABLE_STATES, Summary};

pub use sqlite::{ReceiptRow, Store, single_commit_rate};

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
}

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
    /// Same version as the accepted one under another event id.
    SameVersion,
    /// The resource was deleted and the event carries no version to order it.
    ResourceDeleted,
    /// The plugin's ignore disposition.
    Ignored(String),
}

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The receipt could not be committed; the sender should retry.
    #[error("store unavailable: {0}")]
    Unavailable(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Unavailable(e.to_string())
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        StoreError::Unavailable(format!("migration failed: {e}"))
    }
}
