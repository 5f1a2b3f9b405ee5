//! The comparison receivers, measured beside hookhost in the same run:
//!
//! - ceiling: a bare axum handler that reads the request body and answers 200;
//! - reference: what a user would write by hand for the Stripe scheme: axum, the
//!   `Stripe-Signature` header checked with `hmac` + `sha2` (constant-time comparison,
//!   300 s window), then one sqlx INSERT per request, answered after the commit. No
//!   wasm. Into SQLite with hookhost's durability (WAL, `synchronous=FULL`), or into
//!   PostgreSQL with its default durability (`synchronous_commit = on`).
//!
//! Both accept bodies up to [`MAX_BODY_BYTES`](crate::event::MAX_BODY_BYTES), as the
//! bench's hookhost does.
//!
//! Each runs as a separate process, like `hookhost serve`: the bench re-executes itself
//! with a hidden flag (`--serve-ceiling ADDR`, `--serve-reference ADDR --db PATH`,
//! `--serve-reference-pg ADDR --pg-url URL`); the child binds, prints
//! `listening on ADDR` on stdout when ready, and serves until killed.
//! Both answer `200 {"status":"accepted"}` so that the load generator counts them as it
//! counts hookhost's answers (the reference answers `{"status":"duplicate"}` for an event
//! id it already holds).

use anyhow::{Context as _, anyhow, bail};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use sqlx::ConnectOptions as _;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use std::io::BufRead as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long a receiver may take to print its address.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Stripe's default tolerance for the signed timestamp.
const TOLERANCE_SECS: i64 = 300;
/// The reference's connections to SQLite. One: SQLite has one writer at a time, and
/// more connections only add busy-waiting (sleeps in SQLite's busy handler) between
/// commits that are serialised anyway.
const REFERENCE_CONNECTIONS: u32 = 1;
/// The PostgreSQL reference's pool: what one would pick by hand for 64 concurrent
/// requests. PostgreSQL flushes the WAL once for every commit waiting at that moment,
/// so more connections in flight share more of each flush; 32 is half the judged
/// concurrency and a third of PostgreSQL's default `max_connections` (100). hookhost
/// opens at most 16 (`config::DEFAULT_PG_MAX_CONNECTIONS`): the reference is not held
/// back by a smaller pool than hookhost's.
pub const REFERENCE_PG_CONNECTIONS: u32 = 32;

/// Which comparison receiver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Ceiling,
    Reference,
    /// The reference, storing into the PostgreSQL database at this URL.
    ReferencePg(String),
}

impl Kind {
    fn name(&self) -> &'static str {
        match self {
            Kind::Ceiling => "ceiling",
            Kind::Reference => "reference",
            Kind::ReferencePg(_) => "reference-pg",
        }
    }
}

// ---- the child: serve ----

/// `--serve-ceiling ADDR`: serve until killed.
pub fn serve_ceiling(addr: SocketAddr) -> anyhow::Result<()> {
    let app = Router::new().route(&webhook_path(), post(ceiling));
    serve(addr, async { Ok(app) })
}

/// The reference's store: one table, `event_id` unique.
#[derive(Clone)]
enum Store {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Store {
    /// One INSERT, committed on its own (autocommit) before this returns; whether the
    /// event was new.
    async fn insert(&self, event_id: &str, now: i64, body: &[u8]) -> Result<bool, sqlx::Error> {
        let done = match self {
            Store::Sqlite(pool) => {
                sqlx::query(
                    "INSERT INTO events (event_id, received_at, body) VALUES (?, ?, ?)
                     ON CONFLICT (event_id) DO NOTHING",
                )
                .bind(event_id)
                .bind(now)
                .bind(body)
                .execute(pool)
                .await?
            }
            .rows_affected(),
            Store::Postgres(pool) => {
                sqlx::query(
                    "INSERT INTO events (event_id, received_at, body) VALUES ($1, $2, $3)
                     ON CONFLICT (event_id) DO NOTHING",
                )
                .bind(event_id)
                .bind(now)
                .bind(body)
                .execute(pool)
                .await?
            }
            .rows_affected(),
        };
        Ok(done == 1)
    }
}

/// `--serve-reference-pg ADDR --pg-url URL`: serve until killed. The database's
/// durability is left as it is (`synchronous_commit = on` by default).
pub fn serve_reference_pg(addr: SocketAddr, url: String) -> anyhow::Result<()> {
    serve(addr, async move {
        let options = url
            .parse::<PgConnectOptions>()
            .context("--pg-url is not a PostgreSQL URL")?
            .disable_statement_logging();
        let pool = PgPoolOptions::new()
            .max_connections(REFERENCE_PG_CONNECTIONS)
            .connect_with(options)
            .await
            .context("connecting to PostgreSQL")?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS events (
                 id BIGSERIAL PRIMARY KEY,
                 event_id TEXT NOT NULL UNIQUE,
                 received_at BIGINT NOT NULL,
                 body BYTEA NOT NULL
             )",
        )
        .execute(&pool)
        .await
        .context("creating the events table")?;
        Ok(reference_app(Store::Postgres(pool)))
    })
}

/// `--serve-reference ADDR --db PATH`: serve until killed.
pub fn serve_reference(addr: SocketAddr, db: PathBuf) -> anyhow::Result<()> {
    serve(addr, async move {
        let options = SqliteConnectOptions::new()
            .filename(&db)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(5))
            .disable_statement_logging();
        let pool = SqlitePoolOptions::new()
            .max_connections(REFERENCE_CONNECTIONS)
            .connect_with(options)
            .await
            .with_context(|| format!("opening {}", db.display()))?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS events (
                 id INTEGER PRIMARY KEY,
                 event_id TEXT NOT NULL UNIQUE,
                 received_at INTEGER NOT NULL,
                 body BLOB NOT NULL
             )",
        )
        .execute(&pool)
        .await
        .context("creating the events table")?;
        Ok(reference_app(Store::Sqlite(pool)))
    })
}

fn reference_app(store: Store) -> Router {
    Router::new()
        .route(&webhook_path(), post(reference))
        .with_state(store)
}

fn webhook_path() -> String {
    format!("/webhooks/{}", crate::ENDPOINT)
}

/// A multi-threaded runtime (as `hookhost serve` has), the app built inside it, then
/// bind, announce the address on stdout, and serve.
fn serve(
    addr: SocketAddr,
    app: impl Future<Output = anyhow::Result<Router>>,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    runtime.block_on(async {
        let app = app
            .await?
            .layer(DefaultBodyLimit::max(crate::event::MAX_BODY_BYTES));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot bind {addr}"))?;
        println!("listening on {}", listener.local_addr()?);
        axum::serve(listener, app).await.context("serving")
    })
}

const ACCEPTED: &str = r#"{"status":"accepted"}"#;
const DUPLICATE: &str = r#"{"status":"duplicate"}"#;

fn json(status: StatusCode, body: &'static str) -> axum::response::Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn ceiling(body: Bytes) -> axum::response::Response {
    std::hint::black_box(body.len());
    json(StatusCode::OK, ACCEPTED)
}

async fn reference(
    State(store): State<Store>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let now = crate::unix_now();
    let Some(signature) = headers
        .get("stripe-signature")
        .and_then(|v| v.to_str().ok())
    else {
        return json(
            StatusCode::BAD_REQUEST,
            r#"{"error":"no Stripe-Signature"}"#,
        );
    };
    if !stripe_signature_valid(crate::SECRET.as_bytes(), signature, &body, now) {
        return json(StatusCode::BAD_REQUEST, r#"{"error":"bad signature"}"#);
    }
    let event: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(event) => event,
        Err(_) => return json(StatusCode::BAD_REQUEST, r#"{"error":"not JSON"}"#),
    };
    let Some(event_id) = event.get("id").and_then(|id| id.as_str()) else {
        return json(StatusCode::BAD_REQUEST, r#"{"error":"no event id"}"#);
    };
    match store.insert(event_id, now, &body).await {
        Ok(true) => json(StatusCode::OK, ACCEPTED),
        Ok(false) => json(StatusCode::OK, DUPLICATE),
        Err(_) => json(
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"error":"store unavailable"}"#,
        ),
    }
}

/// `t=<unix seconds>,v1=<hex>[,v1=…]`: one `v1` is HMAC-SHA256(secret, "{t}.{body}")
/// (compared in constant time by `verify_slice`), and `t` is within the tolerance.
fn stripe_signature_valid(secret: &[u8], header: &str, body: &[u8], now: i64) -> bool {
    let mut timestamp = None;
    let mut candidates = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => timestamp = Some(t),
            Some(("v1", v1)) => candidates.push(v1),
            _ => {}
        }
    }
    let Some(t) = timestamp else { return false };
    let Ok(seconds) = t.parse::<i64>() else {
        return false;
    };
    if (now - seconds).abs() > TOLERANCE_SECS {
        return false;
    }
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return false;
    };
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    candidates
        .into_iter()
        .any(|v1| hex::decode(v1).is_ok_and(|expected| mac.clone().verify_slice(&expected).is_ok()))
}

// ---- the parent: start and stop ----

/// A receiver process (this executable, re-executed). Killed when dropped.
pub struct Receiver {
    child: Child,
    pub addr: SocketAddr,
    log: PathBuf,
}

impl Receiver {
    /// Start `kind` on a loopback port chosen by the child; its stderr goes to
    /// `{dir}/{kind}.log`, and the SQLite reference's database is `{dir}/reference.db`.
    pub async fn start(kind: &Kind, dir: &Path) -> anyhow::Result<Receiver> {
        let exe = std::env::current_exe().context("cannot locate this executable")?;
        let log = dir.join(format!("{}.log", kind.name()));
        let stderr = std::fs::File::create(&log).context("creating the receiver's log")?;
        let mut command = Command::new(&exe);
        match kind {
            Kind::Ceiling => {
                command.args(["--serve-ceiling", "127.0.0.1:0"]);
            }
            Kind::Reference => {
                command
                    .args(["--serve-reference", "127.0.0.1:0", "--db"])
                    .arg(dir.join("reference.db"));
            }
            Kind::ReferencePg(url) => {
                command
                    .args(["--serve-reference-pg", "127.0.0.1:0", "--pg-url"])
                    .arg(url);
            }
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("cannot start {}", exe.display()))?;
        let stdout = child.stdout.take().context("no stdout from the receiver")?;
        let mut receiver = Receiver {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            log,
        };
        // A blocking read on its own thread: on timeout the child is killed (on drop),
        // which closes the pipe and ends the read.
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            std::io::BufReader::new(stdout)
                .read_line(&mut line)
                .map(|_| line)
        });
        let line = match tokio::time::timeout(READY_TIMEOUT, line).await {
            Ok(read) => read.context("the reader thread panicked")??,
            Err(_) => bail!(
                "the {} receiver did not announce its address within {} s; its log:\n{}",
                kind.name(),
                READY_TIMEOUT.as_secs(),
                receiver.log_text()
            ),
        };
        let Some(addr) = line.trim().strip_prefix("listening on ") else {
            let status = receiver.child.try_wait().ok().flatten();
            return Err(anyhow!(
                "the {} receiver did not start (exit: {status:?}); its log:\n{}",
                kind.name(),
                receiver.log_text()
            ));
        };
        receiver.addr = addr
            .parse()
            .with_context(|| format!("the receiver announced {addr:?}"))?;
        Ok(receiver)
    }

    /// The process id, for its CPU time and memory.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        // Already gone is fine; there is nothing more to do on failure.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::StripeEvent;

    #[test]
    fn the_reference_accepts_the_bench_s_events_and_nothing_else() -> anyhow::Result<()> {
        let now = 1_700_000_000;
        let (mut body, signature) = StripeEvent::new(1024, now)?.signed(1, now)?;
        let secret = crate::SECRET.as_bytes();
        assert!(stripe_signature_valid(secret, &signature, &body, now));
        assert!(!stripe_signature_valid(
            secret,
            &signature,
            &body,
            now + TOLERANCE_SECS + 1
        ));
        body[10] ^= 1;
        assert!(!stripe_signature_valid(secret, &signature, &body, now));
        Ok(())
    }
}
