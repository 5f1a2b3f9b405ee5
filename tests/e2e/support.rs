//! A server per test: its own temp dir, SQLite file and port.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use hookhost::config::Config;
use hookhost::http::App;
use hookhost::store::{NewReceipt, Resource};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::oneshot;

/// Where the build script put the compiled plugins and test guests.
pub fn guest(name: &str) -> PathBuf {
    Path::new(env!("HOOKHOST_GUESTS_DIR")).join(format!("{name}.wasm"))
}

/// A temp dir whose `plugins/` holds the test guest as a drop-in
/// (configure `plugins_dir = "plugins"`).
pub fn with_test_guest() -> tempfile::TempDir {
    with_guest("hostile", "hostile.wasm")
}

/// A temp dir whose `plugins/` holds the guest built as `name` as the drop-in `file`.
pub fn with_guest(name: &str, file: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("plugins")).expect("plugins dir");
    std::fs::copy(guest(name), dir.path().join("plugins").join(file)).expect("copy guest");
    dir
}

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64
}

/// Which database a test's servers keep their receipts in. Tests written with
/// [`both_stores!`] run once on each; everything else runs on SQLite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    Sqlite,
    Postgres,
}

tokio::task_local! {
    /// The store the running test's servers use (SQLite when unset).
    pub static BACKING: Backing;
}

/// One test body, two stores: `both_stores! { async fn name() { … } }` becomes the tests
/// `name::sqlite` and `name::postgres`.
#[macro_export]
macro_rules! both_stores {
    ($(async fn $name:ident() $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                $crate::support::BACKING
                    .scope($crate::support::Backing::Sqlite, async $body)
                    .await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                $crate::support::BACKING
                    .scope($crate::support::Backing::Postgres, async $body)
                    .await
            }
        }
    )*};
}

/// A PostgreSQL database of one test's own on 127.0.0.1:5432, dropped (closing any
/// connection still open) when the last handle to it goes.
#[derive(Debug)]
pub struct PgDatabase {
    pub name: String,
}

impl PgDatabase {
    pub fn create() -> Arc<PgDatabase> {
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(sweep_databases);
        let name = format!(
            "hookhost_test_{}_{}",
            std::process::id(),
            NEXT_DATABASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        psql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        psql(&format!("CREATE DATABASE {name}"));
        Arc::new(PgDatabase { name })
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:5432/{}", self.name)
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        // Never a panic here: one while a failed test unwinds would abort every test of
        // the binary. What is left behind, the next run sweeps.
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(error) = try_psql(&drop) {
            eprintln!("{error}");
        }
    }
}

static NEXT_DATABASE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Drop the test databases of runs that are over (their process is gone): a run
/// killed, or a test that failed before its database was dropped.
fn sweep_databases() {
    let listed = "SELECT datname FROM pg_database WHERE datname LIKE 'hookhost\\_test\\_%'";
    for name in try_psql(listed).unwrap_or_default().lines() {
        let pid = name.trim_start_matches("hookhost_test_").split('_').next();
        let pid = pid.and_then(|pid| pid.parse::<u32>().ok());
        let over = pid.is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
        if over {
            let _ = try_psql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        }
    }
}

/// Run one statement as the `postgres` superuser (trust auth on loopback).
pub fn psql(sql: &str) {
    if let Err(error) = try_psql(sql) {
        panic!("{error}");
    }
}

/// [`psql`], answering what the statement printed (unaligned, one row per line).
fn try_psql(sql: &str) -> Result<String, String> {
    let out = std::process::Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            "5432",
            "-U",
            "postgres",
            "-d",
            "postgres",
        ])
        .args(["-v", "ON_ERROR_STOP=1", "-qAtXc", sql])
        .output()
        .map_err(|e| format!("psql: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        Err(format!("psql {sql:?}: {stderr}"))
    }
}

/// What a stopped server's store can be opened again from.
pub struct Reopen {
    pub config: hookhost::config::StoreConfig,
    _database: Option<Arc<PgDatabase>>,
}

impl Reopen {
    pub async fn open(&self) -> hookhost::store::Store {
        hookhost::store::Store::open(&self.config)
            .await
            .expect("reopen the store")
    }
}

pub struct Server {
    pub addr: SocketAddr,
    pub app: Arc<App>,
    pub dir: tempfile::TempDir,
    /// The test's own PostgreSQL database, when the test runs on PostgreSQL.
    pub database: Option<Arc<PgDatabase>>,
    store: hookhost::config::StoreConfig,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Server {
    /// Start on 127.0.0.1:0 with this configuration text (a fresh temp dir holds the
    /// config file and the SQLite store).
    pub async fn start(config: &str) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        Server::start_in(dir, config).await.expect("server starts")
    }

    pub async fn start_in(dir: tempfile::TempDir, config: &str) -> anyhow::Result<Server> {
        // On PostgreSQL, a configuration that names no store gets a database of its own.
        let names_a_store = config
            .lines()
            .any(|l| l.trim_start().starts_with("store ="));
        let database = match BACKING.try_with(|b| *b) {
            Ok(Backing::Postgres) if !names_a_store => Some(PgDatabase::create()),
            _ => None,
        };
        let config = match &database {
            Some(db) => format!("store = \"{}\"\n{config}", db.url()),
            None => config.to_string(),
        };
        let path = dir.path().join("hookhost.toml");
        std::fs::write(&path, &config)?;
        let config = Config::parse(&path, &config, &|_| None)?;
        let app = hookhost::build(&config).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(hookhost::serve(app.clone(), listener, async {
            let _ = rx.await;
        }));
        Ok(Server {
            addr,
            app,
            dir,
            database,
            store: config.store.clone(),
            shutdown: Some(tx),
            task: Some(task),
        })
    }

    /// The stored receipt for an event; panics when there is none.
    pub async fn receipt(&self, endpoint: &str, event_id: &str) -> hookhost::store::ReceiptRow {
        self.app
            .store
            .receipt(endpoint, event_id)
            .await
            .expect("store query")
            .unwrap_or_else(|| panic!("no receipt for {endpoint}/{event_id}"))
    }

    /// The stored receipt for an event once `wanted` holds of it, polled every 20 ms
    /// for `within` at most: a worker records an attempt after its answer, so a test
    /// that has seen a delivery or an error waits for the record.
    pub async fn receipt_once(
        &self,
        endpoint: &str,
        event_id: &str,
        within: std::time::Duration,
        wanted: impl Fn(&hookhost::store::ReceiptRow) -> bool,
    ) -> hookhost::store::ReceiptRow {
        let deadline = std::time::Instant::now() + within;
        loop {
            let row = self.receipt(endpoint, event_id).await;
            if wanted(&row) {
                return row;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{endpoint}/{event_id} not as wanted within {within:?}: {row:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Receipts stored for an endpoint.
    pub async fn count_receipts(&self, endpoint: &str) -> i64 {
        self.app
            .store
            .count_receipts(endpoint)
            .await
            .expect("count")
    }

    /// The configuration file the server was started from.
    pub fn config_path(&self) -> String {
        self.dir.path().join("hookhost.toml").display().to_string()
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.path().join("hookhost.db")
    }

    /// Break the SQLite store underneath the running server: its receipts table
    /// disappears (renamed, from a connection of its own), until [`Server::mend_store`].
    pub async fn break_store(&self) {
        self.break_table("receipts").await;
    }

    /// Undo [`Server::break_store`].
    pub async fn mend_store(&self) {
        self.mend_table("receipts").await;
    }

    /// Break one table of the SQLite store, as [`Server::break_store`] does receipts,
    /// until [`Server::mend_table`].
    pub async fn break_table(&self, table: &str) {
        self.execute(&format!("ALTER TABLE {table} RENAME TO {table}_moved"))
            .await;
    }

    /// Undo [`Server::break_table`].
    pub async fn mend_table(&self, table: &str) {
        self.execute(&format!("ALTER TABLE {table}_moved RENAME TO {table}"))
            .await;
    }

    async fn execute(&self, statement: &str) {
        let mut conn = open_db(&self.db_path()).await;
        sqlx::query(statement)
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }

    /// POST to `/webhooks/{endpoint}`; returns the status and the JSON body.
    pub async fn post(
        &self,
        endpoint: &str,
        headers: &[(&str, String)],
        body: impl Into<Bytes>,
    ) -> (u16, Value) {
        request(
            self.addr,
            "POST",
            &format!("/webhooks/{endpoint}"),
            headers,
            body.into(),
        )
        .await
    }

    /// POST a Stripe event signed with `secrets` at `t` to the `stripe` endpoint.
    pub async fn post_stripe(&self, secrets: &[&str], t: i64, body: &str) -> (u16, Value) {
        self.post("stripe", &stripe_headers(secrets, t, body), body.to_owned())
            .await
    }

    /// What the store can be opened again from after `stop` (keeps a PostgreSQL
    /// database alive while it is held).
    pub fn reopen(&self) -> Reopen {
        Reopen {
            config: self.store.clone(),
            _database: self.database.clone(),
        }
    }

    /// Stop, then start again in the same directory on the same store with `config`:
    /// an operator's restart with a changed configuration.
    pub async fn restart(self, config: &str) -> Server {
        let database = self.database.clone();
        let dir = self.stop().await;
        let config = match &database {
            Some(db) => format!("store = \"{}\"\n{config}", db.url()),
            None => config.to_string(),
        };
        let mut server = Server::start_in(dir, &config)
            .await
            .expect("server restarts");
        server.database = database;
        server
    }

    /// Begin a graceful shutdown, as a SIGTERM does, without waiting for it to end
    /// ([`Server::stop`] waits).
    pub fn begin_stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Shut down gracefully; hands back the temp dir so the store can be reopened.
    pub async fn stop(mut self) -> tempfile::TempDir {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await
                .expect("server task")
                .expect("server ran cleanly");
        }
        let placeholder = tempfile::tempdir().expect("temp dir");
        std::mem::replace(&mut self.dir, placeholder)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Serve `router` on a loopback port of its own; its address.
pub async fn serve_on_loopback(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// `hookhost serve`'s stderr, read line by line while it runs: the addresses it logs
/// once bound, and the whole log once it exits. A test configures port 0 and reads the
/// port here, so no other socket can take it between choosing it and serving on it.
pub struct ServeLog {
    text: Arc<std::sync::Mutex<String>>,
    /// Until the log is finished.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl ServeLog {
    /// Read `child`'s stderr (piped by [`Spawned::spawn`]); [`ServeLog::bound`] needs
    /// `hookhost=info` in `RUST_LOG`, so that the address lines are logged.
    fn read(child: &mut std::process::Child) -> ServeLog {
        use std::io::BufRead as _;
        let stderr = child.stderr.take().expect("stderr piped");
        let text = Arc::new(std::sync::Mutex::new(String::new()));
        let into = text.clone();
        let reader = std::thread::spawn(move || {
            let mut stderr = std::io::BufReader::new(stderr);
            let mut line = Vec::new();
            while stderr.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                // Poisoned: the test failed holding the log; stop reading.
                let Ok(mut text) = into.lock() else { break };
                text.push_str(&String::from_utf8_lossy(&line));
                line.clear();
            }
        });
        ServeLog {
            text,
            reader: Some(reader),
        }
    }

    /// The address on the first line holding `message` (`"hookhost listening"`,
    /// `"admin API listening"`), once logged; fails the test, with the log, if the
    /// process exits first or `within` passes.
    pub async fn bound(&self, message: &str, within: std::time::Duration) -> SocketAddr {
        let deadline = std::time::Instant::now() + within;
        loop {
            let ended = self.reader.as_ref().is_none_or(|r| r.is_finished());
            {
                let text = self.text.lock().expect("log lock");
                let found = text.lines().filter(|l| l.contains(message)).find_map(|l| {
                    l.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':'))
                        .find_map(|word| word.parse::<SocketAddr>().ok())
                });
                if let Some(addr) = found {
                    return addr;
                }
                assert!(
                    !ended,
                    "hookhost exited before logging {message:?}:\n{text}"
                );
                assert!(
                    std::time::Instant::now() < deadline,
                    "hookhost did not log {message:?} within {within:?}:\n{text}"
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }

    /// The whole log, once the process has exited (its stderr closed).
    fn finish(&mut self) -> String {
        if let Some(reader) = self.reader.take() {
            reader.join().expect("log reader");
        }
        std::mem::take(&mut *self.text.lock().expect("log lock"))
    }
}

/// A spawned `hookhost` command (`serve`, `reconcile`) and its log: killed when
/// dropped, so a test that fails while it runs does not leave it behind.
pub struct Spawned {
    child: std::process::Child,
    pub log: ServeLog,
}

impl Spawned {
    /// Spawn `command`, reading its stderr into [`Spawned::log`].
    pub fn spawn(command: &mut std::process::Command) -> Spawned {
        let mut child = command
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn hookhost");
        let log = ServeLog::read(&mut child);
        Spawned { child, log }
    }

    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }

    /// SIGTERM, as an operator's stop would, and wait; the exit status and whole log.
    pub fn terminate(mut self) -> (std::process::ExitStatus, String) {
        let killed = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(killed.success(), "kill -TERM failed");
        let status = self.child.wait().expect("wait");
        (status, self.log.finish())
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `hookhost serve`, the real binary, as a process of its own: killed when dropped.
pub struct Process {
    served: Spawned,
    pub addr: SocketAddr,
}

impl Process {
    /// Serve `config` (its top-level keys and tables; `listen` is added, on port 0),
    /// written as `{dir}/{name}.toml`; return once it has bound its port.
    pub async fn start(dir: &Path, name: &str, config: &str) -> Process {
        Self::start_with_log(dir, name, config, "warn,hookhost=info").await
    }

    /// [`Process::start`] with this `RUST_LOG`, which must leave `hookhost listening`
    /// (an info line) logged.
    pub async fn start_with_log(dir: &Path, name: &str, config: &str, rust_log: &str) -> Process {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, format!("listen = \"127.0.0.1:0\"\n{config}")).expect("config");
        let served = Spawned::spawn(
            std::process::Command::new(env!("CARGO_BIN_EXE_hookhost"))
                .args(["serve", "--config"])
                .arg(&path)
                .env("RUST_LOG", rust_log),
        );
        // Start-up may compile every plugin.
        let addr = served
            .log
            .bound("hookhost listening", std::time::Duration::from_secs(60))
            .await;
        Process { served, addr }
    }

    /// SIGKILL, as a crash would.
    pub fn kill(mut self) {
        self.served.kill();
    }

    /// SIGTERM, as an operator's stop would; the exit status and whole log.
    pub fn terminate(self) -> (std::process::ExitStatus, String) {
        self.served.terminate()
    }
}

/// One HTTP/1.1 request on a fresh loopback connection.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Bytes,
) -> (u16, Value) {
    let (status, _, bytes) = request_raw(addr, method, path, headers, body).await;
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// One request; the answer's status, headers and body bytes as sent.
pub async fn request_raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Bytes,
) -> (u16, hyper::HeaderMap, Bytes) {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(conn);
    let mut builder = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (name, value) in headers {
        builder = builder.header(*name, value.as_str());
    }
    let response = sender
        .send_request(builder.body(Full::new(body)).expect("request"))
        .await
        .expect("response");
    let status = response.status().as_u16();
    let answer_headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, answer_headers, bytes)
}

/// A receipt as ingest would record it, for driving a store directly.
pub fn new_receipt(
    id: &str,
    resource: &str,
    version: Option<u64>,
    received_at_ms: i64,
) -> Box<NewReceipt> {
    let body = format!("{{\"id\":\"{id}\"}}").into_bytes();
    let digest: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(&body).into();
    Box::new(NewReceipt {
        endpoint: "stripe".into(),
        event_id: id.into(),
        body_sha256: digest,
        body,
        headers: vec![],
        secret_index: 0,
        plugin: "stripe".into(),
        plugin_version: "test".into(),
        plugin_digest: "test".into(),
        message_id: None,
        query: None,
        event_type: "customer.updated".into(),
        resource: Some(Resource {
            kind: "customer".into(),
            id: resource.into(),
            version,
            deleted: false,
        }),
        occurred_at: None,
        signed_at: None,
        received_at_ms,
        ignore: None,
        source: hookhost::store::PUSHED,
    })
}

/// A connection of its own to a store file, beside whoever else has it open.
pub async fn open_db(path: &Path) -> sqlx::SqliteConnection {
    use sqlx::ConnectOptions;
    sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .connect()
        .await
        .expect("open the store file")
}

pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

/// `Stripe-Signature` for `body` at `t`, one `v1` per secret.
pub fn stripe_headers(secrets: &[&str], t: i64, body: &str) -> Vec<(&'static str, String)> {
    let mut value = format!("t={t}");
    for secret in secrets {
        let sig = hmac_sha256(
            secret.as_bytes(),
            &[format!("{t}.").as_bytes(), body.as_bytes()],
        );
        value.push_str(&format!(",v1={}", hex::encode(sig)));
    }
    vec![
        ("stripe-signature", value),
        ("content-type", "application/json".into()),
    ]
}

/// A Stripe event for one customer.
pub fn stripe_event(id: &str, kind: &str, customer: &str, created: i64) -> String {
    serde_json::json!({
        "id": id,
        "object": "event",
        "type": kind,
        "created": created,
        "data": { "object": { "id": customer, "object": "customer", "email": "a@example.com" } }
    })
    .to_string()
}

/// Headers for the test guest's scheme: hex HMAC-SHA256 of the body.
pub fn guest_headers(secret: &str, id: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    vec![
        (
            "x-test-signature",
            hex::encode(hmac_sha256(secret.as_bytes(), &[body])),
        ),
        ("x-test-id", id.to_string()),
    ]
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub const STRIPE_SECRET: &str = "whsec_test_current";
pub const STRIPE_OLD_SECRET: &str = "whsec_test_previous";

/// A configuration: `top` (top-level keys and tables), then a Stripe endpoint with a
/// current and a previous secret. Append more `[[endpoint]]` tables after it.
pub fn stripe_config(top: &str) -> String {
    format!(
        "{top}\n[[endpoint]]\nid = \"stripe\"\nplugin = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\", \"{STRIPE_OLD_SECRET}\"]\n"
    )
}

/// How many plugins are built in.
pub fn builtin_count() -> usize {
    hookhost::plugins::BUILTIN_NAMES.len()
}
