//! The end-to-end part: the real `hookhost serve` as a child process, and a loopback
//! load generator of HTTP/1.1 keep-alive connections, one request in flight each:
//! closed loop (`drive`: each connection sends again as soon as it is answered) or open
//! loop (`drive_paced`: a fixed request rate, whatever the answers take).

use crate::event::{self, StripeEvent};
use anyhow::{Context as _, anyhow, bail};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinSet;

/// How long the server may take to answer `GET /healthz` (it compiles plugins first).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How often `GET /healthz` is tried while the server starts: the start-up time is
/// judged against 300 ms, so the polling must not add tens of milliseconds to it.
const READY_POLL: Duration = Duration::from_millis(5);
/// Log lines shown when the server fails to start.
const LOG_TAIL_LINES: usize = 20;

/// `hookhost` next to this executable (both live in `target/dist` or `target/release`),
/// or `explicit`.
pub fn server_binary(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let path = match explicit {
        Some(path) => path,
        None => {
            let exe = std::env::current_exe().context("cannot locate this executable")?;
            let dir = exe
                .parent()
                .context("this executable has no parent directory")?;
            dir.join(format!("hookhost{}", std::env::consts::EXE_SUFFIX))
        }
    };
    if !path.is_file() {
        bail!(
            "the server binary {} is missing: build it beside this one, e.g. `cargo build --profile dist -p hookhost -p hookhost-bench`",
            path.display()
        );
    }
    Ok(path)
}

/// The server process. Killed when dropped, so every way out of the benchmark, error
/// paths included, ends it.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// The admin API's address, when the configuration has one.
    pub admin: Option<SocketAddr>,
    /// From spawn to the first answer of `GET /healthz`.
    pub started_in: Duration,
    log: PathBuf,
}

impl Server {
    /// Write a configuration with one Stripe endpoint into `dir` (the store goes beside
    /// it), start `binary serve` on a free loopback port and wait until it is healthy.
    /// `extra` is appended to the configuration after the endpoint's keys: its
    /// `[endpoint.destination]` table, a `[delivery]` table.
    pub async fn start(
        binary: &Path,
        dir: &Path,
        secret: &str,
        endpoint: &str,
        extra: &str,
    ) -> anyhow::Result<Server> {
        Server::start_with_store(binary, dir, secret, endpoint, "hookhost.db", extra).await
    }

    /// As [`Server::start`], with the store the configuration names (a SQLite file
    /// beside it, or a `postgres://` URL).
    pub async fn start_with_store(
        binary: &Path,
        dir: &Path,
        secret: &str,
        endpoint: &str,
        store: &str,
        extra: &str,
    ) -> anyhow::Result<Server> {
        std::fs::write(dir.join("stripe.secret"), secret).context("writing the secret file")?;
        let config = format!(
            "listen = \"{LOOPBACK_ANY_PORT}\"\nstore = \"{store}\"\n\n[[endpoint]]\n\
             id = \"{endpoint}\"\nplugin = \"stripe\"\nsecrets = [\"file:stripe.secret\"]\n{extra}"
        );
        Server::start_config(binary, dir, None, &config).await
    }

    /// Write `config` to `{dir}/hookhost.toml`, start `binary serve` with it and wait
    /// until it is healthy. The configuration listens on [`LOOPBACK_ANY_PORT`] (and its
    /// admin API, if any, too): the server binds a free port itself, and the address is
    /// read from its log, so no other process can take the port between a probe and the
    /// bind. `cache_dir` is the compiled-plugin cache (`HOOKHOST_CACHE_DIR`); `None`
    /// leaves the user's.
    pub async fn start_config(
        binary: &Path,
        dir: &Path,
        cache_dir: Option<&Path>,
        config: &str,
    ) -> anyhow::Result<Server> {
        let path = dir.join("hookhost.toml");
        std::fs::write(&path, config).context("writing the server configuration")?;
        let log = dir.join("server.log");
        let stdout = std::fs::File::create(&log).context("creating the server log")?;
        let stderr = stdout.try_clone().context("sharing the server log")?;

        let mut command = Command::new(binary);
        command
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        if let Some(cache) = cache_dir {
            command.env("HOOKHOST_CACHE_DIR", cache);
        }
        let started = Instant::now();
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let mut server = Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            admin: None,
            started_in: Duration::ZERO,
            log,
        };
        let mut bound = None;
        loop {
            if let Some(status) = server.child.try_wait().context("checking on the server")? {
                bail!(
                    "the server exited ({status}) before answering GET /healthz; its log ends:\n{}",
                    server.log_tail()
                );
            }
            if bound.is_none() {
                // Both listeners are bound before the line that names the main one.
                let text = std::fs::read_to_string(&server.log).unwrap_or_default();
                bound = logged_addr(&text, "hookhost listening", "addr")?;
                if let Some(addr) = bound {
                    server.addr = addr;
                    server.admin = logged_addr(&text, "admin API listening", "address")?;
                }
            }
            if bound.is_some() && healthy(server.addr).await {
                break;
            }
            if started.elapsed() > READY_TIMEOUT {
                bail!(
                    "the server did not answer GET /healthz within {} s; its log ends:\n{}",
                    READY_TIMEOUT.as_secs(),
                    server.log_tail()
                );
            }
            tokio::time::sleep(READY_POLL).await;
        }
        server.started_in = started.elapsed();
        Ok(server)
    }

    /// The process id, for its CPU time and memory.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Already gone is fine; there is nothing more to do on failure.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a bench configuration listens on: loopback, on a port the server chooses.
pub const LOOPBACK_ANY_PORT: &str = "127.0.0.1:0";

/// The address in the `field=` of the first log line carrying `message` (hookhost's
/// `hookhost listening addr=127.0.0.1:40123`), or `None` before that line is written.
fn logged_addr(log: &str, message: &str, field: &str) -> anyhow::Result<Option<SocketAddr>> {
    let Some(line) = log.lines().find(|line| line.contains(message)) else {
        return Ok(None);
    };
    let prefix = format!("{field}=");
    let value = line
        .split_whitespace()
        .find_map(|word| word.strip_prefix(&prefix))
        .with_context(|| format!("the server logged {line:?} without {prefix}"))?;
    let addr = value
        .parse()
        .with_context(|| format!("the server logged {line:?}: {value:?} is not an address"))?;
    Ok(Some(addr))
}

async fn healthy(addr: SocketAddr) -> bool {
    let attempt = async {
        let mut sender = connect(addr).await?;
        let request = Request::get("/healthz")
            .header(header::HOST, addr.to_string())
            .body(Full::new(Bytes::new()))?;
        anyhow::Ok(sender.send_request(request).await?.status() == StatusCode::OK)
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), attempt).await,
        Ok(Ok(true))
    )
}

/// One keep-alive HTTP/1.1 connection; its driver runs as its own task.
/// `count` keep-alive connections to the server.
async fn connect_all(
    addr: SocketAddr,
    count: usize,
) -> anyhow::Result<Vec<SendRequest<Full<Bytes>>>> {
    let mut senders = Vec::with_capacity(count);
    for _ in 0..count {
        senders.push(connect(addr).await.context("connecting to the server")?);
    }
    Ok(senders)
}

async fn connect(addr: SocketAddr) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        // Ends when the sender is dropped or the server closes; errors surface on send.
        let _ = connection.await;
    });
    Ok(sender)
}

/// Where requests go: `POST /webhooks/{endpoint}` on the server.
#[derive(Debug, Clone)]
pub struct Target {
    addr: SocketAddr,
    host: String,
    path: String,
}

impl Target {
    pub fn new(addr: SocketAddr, endpoint: &str) -> Target {
        Target {
            addr,
            host: addr.to_string(),
            path: format!("/webhooks/{endpoint}"),
        }
    }

    fn request(&self, body: Bytes, signature: &str) -> anyhow::Result<Request<Full<Bytes>>> {
        Ok(Request::post(&self.path)
            .header(header::HOST, &self.host)
            .header(
                header::USER_AGENT,
                "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
            )
            .header(header::CONTENT_TYPE, "application/json; charset=utf-8")
            .header("stripe-signature", signature)
            .body(Full::new(body))?)
    }

    /// Send one request of `payload` and insist on `200 {"status": expect}`: a bench
    /// whose own events are refused measures nothing.
    pub async fn expect_one(&self, payload: &Payload, expect: &str) -> anyhow::Result<()> {
        let mut sender = connect(self.addr)
            .await
            .context("connecting to the server")?;
        let (_, body, signature) = payload.next()?;
        let response = sender.send_request(self.request(body, &signature)?).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        classify(status, &bytes, expect).map_err(|answer| {
            anyhow!("the server answered the bench's event with {answer}, not 200 {{\"status\":\"{expect}\"}}")
        })
    }
}

/// What each request sends.
#[derive(Clone)]
pub struct Payload(Arc<Kind>);

enum Kind {
    /// A new event per request (the next event number), signed when sent.
    NewEvents(StripeEvent),
    /// One event, with the same id, body and signature every time.
    SameEvent { body: Bytes, signature: String },
}

impl Payload {
    /// New events of `size` bytes each.
    pub fn new_events(size: usize, created: i64) -> anyhow::Result<Payload> {
        Ok(Payload(Arc::new(Kind::NewEvents(StripeEvent::new(
            size, created,
        )?))))
    }

    /// One new event of `size` bytes, signed once at `t`, sent every time.
    pub fn same_event(size: usize, created: i64, t: i64) -> anyhow::Result<Payload> {
        let (body, signature) = StripeEvent::new(size, created)?.signed(event::next_number(), t)?;
        Ok(Payload(Arc::new(Kind::SameEvent {
            body: Bytes::from(body),
            signature,
        })))
    }

    /// The next request's event id (for new events), body and signature.
    fn next(&self) -> anyhow::Result<(Option<String>, Bytes, String)> {
        match &*self.0 {
            Kind::NewEvents(event) => {
                let n = event::next_number();
                let (body, signature) = event.signed(n, crate::unix_now())?;
                Ok((Some(event::event_id(n)), Bytes::from(body), signature))
            }
            Kind::SameEvent { body, signature } => Ok((None, body.clone(), signature.clone())),
        }
    }
}

/// One phase of load: counted answers, their latencies, and everything else.
#[derive(Debug, Default)]
pub struct PhaseResult {
    /// Answers that were `200 {"status": expect}`.
    pub ok: u64,
    /// From the first request to the last answer.
    pub elapsed: Duration,
    /// When the first counted answer arrived.
    pub first_ok: Option<Instant>,
    /// Latencies of the counted answers, sorted once the phase ends.
    latencies: Vec<Duration>,
    /// Every other answer (status and body without the event id) or transport error.
    pub errors: BTreeMap<String, u64>,
}

impl PhaseResult {
    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    pub fn percentile(&self, q: f64) -> Option<Duration> {
        crate::quantile(&self.latencies, q)
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    fn error(&mut self, what: String) {
        *self.errors.entry(what).or_default() += 1;
    }

    fn counted(&mut self, latency: Duration) {
        self.ok += 1;
        self.latencies.push(latency);
        self.first_ok.get_or_insert_with(Instant::now);
    }

    fn merge(&mut self, other: PhaseResult) {
        self.ok += other.ok;
        self.first_ok = match (self.first_ok, other.first_ok) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.latencies.extend(other.latencies);
        for (what, count) in other.errors {
            *self.errors.entry(what).or_default() += count;
        }
    }
}

/// `concurrency` connections, each sending `payload` back to back for `duration`.
pub async fn drive(
    target: &Target,
    concurrency: usize,
    duration: Duration,
    payload: &Payload,
    expect: &'static str,
) -> anyhow::Result<PhaseResult> {
    drive_spread(
        std::slice::from_ref(target),
        concurrency,
        duration,
        payload,
        expect,
    )
    .await
}

/// As [`drive`], with the connections spread over `targets` in turn: several
/// processes sharing one database, as behind a load balancer.
pub async fn drive_spread(
    targets: &[Target],
    concurrency: usize,
    duration: Duration,
    payload: &Payload,
    expect: &'static str,
) -> anyhow::Result<PhaseResult> {
    // Connect everyone first, so the clock starts with the load.
    let mut senders = Vec::with_capacity(concurrency);
    for target in targets.iter().cycle().take(concurrency) {
        senders.push((
            target.clone(),
            connect(target.addr)
                .await
                .context("connecting to the server")?,
        ));
    }
    let started = Instant::now();
    closed_loop(
        senders,
        Until::Deadline(started + duration),
        payload,
        expect,
    )
    .await
}

/// Exactly `count` requests of `payload` over `concurrency` connections to `target`,
/// closed loop: for a server under a profiler, where a fixed amount of work is what
/// gets divided (`--send-to`).
pub async fn send_count(
    target: &Target,
    concurrency: usize,
    count: u64,
    payload: &Payload,
    expect: &'static str,
) -> anyhow::Result<PhaseResult> {
    let senders = connect_all(target.addr, concurrency)
        .await?
        .into_iter()
        .map(|sender| (target.clone(), sender))
        .collect();
    let left = Arc::new(AtomicU64::new(count));
    closed_loop(senders, Until::Sent(left), payload, expect).await
}

/// When a closed-loop worker stops: at a deadline, or once a count shared by every
/// worker has run out.
#[derive(Clone)]
enum Until {
    Deadline(Instant),
    Sent(Arc<AtomicU64>),
}

impl Until {
    /// Whether to send one more request (and, for a count, take it).
    fn one_more(&self) -> bool {
        match self {
            Until::Deadline(deadline) => Instant::now() < *deadline,
            Until::Sent(left) => left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok(),
        }
    }
}

/// Every connection sends again as soon as it is answered, until `until`.
async fn closed_loop(
    senders: Vec<(Target, SendRequest<Full<Bytes>>)>,
    until: Until,
    payload: &Payload,
    expect: &'static str,
) -> anyhow::Result<PhaseResult> {
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for (target, sender) in senders {
        workers.spawn(worker(
            target,
            sender,
            until.clone(),
            payload.clone(),
            expect,
        ));
    }
    let mut result = PhaseResult::default();
    while let Some(tally) = workers.join_next().await {
        result.merge(tally.context("a load worker panicked")?);
    }
    result.elapsed = started.elapsed();
    result.latencies.sort_unstable();
    Ok(result)
}

async fn worker(
    target: Target,
    sender: SendRequest<Full<Bytes>>,
    until: Until,
    payload: Payload,
    expect: &'static str,
) -> PhaseResult {
    let mut tally = PhaseResult::default();
    let mut sender = Some(sender);
    while until.one_more() {
        let connection = match sender.as_mut() {
            Some(connection) => connection,
            None => match connect(target.addr).await {
                Ok(connection) => sender.insert(connection),
                Err(error) => {
                    tally.error(format!("connect: {error:#}"));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        match send(&target, connection, &payload, expect).await {
            Ok((_, _, latency, Ok(()))) => tally.counted(latency),
            Ok((_, _, _, Err(answer))) => tally.error(answer),
            Err(error) => {
                tally.error(format!("transport: {error:#}"));
                sender = None; // reconnect
            }
        }
    }
    tally
}

/// What one request came to: its event id (for new events), when it was sent, its
/// latency, and whether the answer counts.
type Exchange = (Option<String>, Instant, Duration, Result<(), String>);

/// One request; the latency runs from sending the request to the end of the answer.
async fn send(
    target: &Target,
    sender: &mut SendRequest<Full<Bytes>>,
    payload: &Payload,
    expect: &str,
) -> anyhow::Result<Exchange> {
    let (id, body, signature) = payload.next()?;
    let request = target.request(body, &signature)?;
    sender.ready().await?;
    let started = Instant::now();
    let response = sender.send_request(request).await?;
    let status = response.status();
    let bytes = response.into_body().collect().await?.to_bytes();
    Ok((
        id,
        started,
        started.elapsed(),
        classify(status, &bytes, expect),
    ))
}

/// An open-loop phase: what `drive_paced` measured.
#[derive(Debug, Default)]
pub struct Paced {
    pub result: PhaseResult,
    /// The rate asked for, in requests per second.
    pub rate: f64,
    /// Requests scheduled (rate × duration); `result` says how each came out.
    pub scheduled: u64,
    /// For each event whose answer counted: when its request was due.
    pub sent: HashMap<String, Instant>,
    /// Requests sent more than `LATE` after their scheduled time (every connection busy).
    /// Their latency counts the wait all the same: see [`drive_paced`].
    pub late: u64,
    /// The counted answers' latencies from their send, leaving the wait for a
    /// connection out (what the latency was before it ran from the scheduled time),
    /// sorted: to show how much of the tail the wait is.
    pub from_send: Vec<Duration>,
}

/// A paced request that waited longer than this for an idle connection is counted late.
pub const LATE: Duration = Duration::from_millis(10);

/// Open loop: `rate` requests per second of `payload` (new events) for `duration`, each
/// handed at its scheduled time to whichever of `connections` keep-alive connections is
/// idle, whatever the answers take. A request's latency runs from its scheduled time,
/// not from its send: when the receiver stalls and every connection is busy, the
/// requests waiting for one are its backlog, and leaving their wait out would hide
/// the stall from the tail.
pub async fn drive_paced(
    target: &Target,
    connections: usize,
    rate: f64,
    duration: Duration,
    payload: &Payload,
    expect: &'static str,
) -> anyhow::Result<Paced> {
    if !(rate.is_finite() && rate >= 1.0) {
        bail!("cannot pace {rate} requests per second");
    }
    let scheduled = (rate * duration.as_secs_f64()).round().max(1.0) as u64;
    let period = Duration::from_secs_f64(1.0 / rate);
    let senders = connect_all(target.addr, connections).await?;
    let (ticks_tx, ticks_rx) = mpsc::unbounded_channel::<Instant>();
    let ticks_rx = Arc::new(Mutex::new(ticks_rx));
    let mut workers = JoinSet::new();
    for sender in senders {
        workers.spawn(paced_worker(
            target.clone(),
            sender,
            ticks_rx.clone(),
            payload.clone(),
            expect,
        ));
    }
    let started = Instant::now();
    // Burst (the default): a tick missed by the timer's 1 ms granularity comes at once, so
    // the average rate holds.
    let mut interval = tokio::time::interval_at(started.into(), period);
    for _ in 0..scheduled {
        let at = interval.tick().await;
        if ticks_tx.send(at.into_std()).is_err() {
            break; // every worker is gone; join_next reports why
        }
    }
    drop(ticks_tx);
    let mut paced = Paced {
        rate,
        scheduled,
        ..Paced::default()
    };
    while let Some(tally) = workers.join_next().await {
        let (result, sent, late, from_send) = tally.context("a paced load worker panicked")?;
        paced.result.merge(result);
        paced.sent.extend(sent);
        paced.late += late;
        paced.from_send.extend(from_send);
    }
    paced.result.elapsed = started.elapsed();
    paced.result.latencies.sort_unstable();
    paced.from_send.sort_unstable();
    Ok(paced)
}

async fn paced_worker(
    target: Target,
    sender: SendRequest<Full<Bytes>>,
    ticks: Arc<Mutex<mpsc::UnboundedReceiver<Instant>>>,
    payload: Payload,
    expect: &'static str,
) -> (PhaseResult, HashMap<String, Instant>, u64, Vec<Duration>) {
    let mut tally = PhaseResult::default();
    let mut sent = HashMap::new();
    let mut late = 0;
    let mut from_send = Vec::new();
    let mut sender = Some(sender);
    loop {
        // The lock is held only while waiting for the next tick: whoever is idle takes it.
        let Some(due) = ticks.lock().await.recv().await else {
            break;
        };
        let connection = match sender.as_mut() {
            Some(connection) => connection,
            None => match connect(target.addr).await {
                Ok(connection) => sender.insert(connection),
                Err(error) => {
                    tally.error(format!("connect: {error:#}"));
                    continue;
                }
            },
        };
        match send(&target, connection, &payload, expect).await {
            Ok((id, at, latency, answer)) => {
                let waited = at.saturating_duration_since(due);
                if waited > LATE {
                    late += 1;
                }
                match answer {
                    Ok(()) => {
                        tally.counted(waited + latency);
                        from_send.push(latency);
                        if let Some(id) = id {
                            sent.insert(id, due);
                        }
                    }
                    Err(answer) => tally.error(answer),
                }
            }
            Err(error) => {
                tally.error(format!("transport: {error:#}"));
                sender = None; // reconnect
            }
        }
    }
    (tally, sent, late, from_send)
}

/// `Ok` for `200 {"status": expect}`; otherwise the answer, without the event id so
/// that equal answers group together.
fn classify(status: StatusCode, body: &[u8], expect: &str) -> Result<(), String> {
    let json = serde_json::from_slice::<serde_json::Value>(body).ok();
    if status == StatusCode::OK
        && json
            .as_ref()
            .and_then(|j| j.get("status"))
            .and_then(|s| s.as_str())
            == Some(expect)
    {
        return Ok(());
    }
    let shown = match json {
        Some(serde_json::Value::Object(mut fields)) => {
            fields.remove("event_id");
            serde_json::Value::Object(fields).to_string()
        }
        _ => String::from_utf8_lossy(&body[..body.len().min(120)]).into_owned(),
    };
    Err(format!("{} {shown}", status.as_u16()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::routing::post;

    /// A receiver that counts what reaches it and refuses every seventh request.
    async fn counting_receiver() -> anyhow::Result<(SocketAddr, Arc<AtomicU64>)> {
        let seen = Arc::new(AtomicU64::new(0));
        let counter = seen.clone();
        let app = Router::new().route(
            "/webhooks/stripe",
            post(move || {
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    if n.is_multiple_of(7) {
                        (StatusCode::SERVICE_UNAVAILABLE, r#"{"error":"busy"}"#)
                    } else {
                        (StatusCode::OK, r#"{"status":"accepted"}"#)
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok((addr, seen))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn send_count_sends_exactly_the_count_whatever_the_answers() -> anyhow::Result<()> {
        let (addr, seen) = counting_receiver().await?;
        let events = Payload::new_events(1024, crate::unix_now())?;
        let sent = send_count(&Target::new(addr, "stripe"), 8, 100, &events, "accepted").await?;
        // Eight connections race for the last requests; none may send one too many.
        assert_eq!(seen.load(Ordering::SeqCst), 100);
        assert_eq!(sent.ok, 86, "100 less every seventh: {:?}", sent.errors);
        assert_eq!(
            sent.errors.get(r#"503 {"error":"busy"}"#).copied(),
            Some(14)
        );
        Ok(())
    }

    #[test]
    fn the_bound_addresses_are_read_from_the_servers_log() -> anyhow::Result<()> {
        let starting = "2026-12-04T05:40:01.100Z  INFO hookhost::store: migrations applied\n";
        assert_eq!(logged_addr(starting, "hookhost listening", "addr")?, None);
        let started = format!(
            "{starting}2026-12-04T05:40:01.190Z  INFO hookhost: admin API listening \
             address=127.0.0.1:40999\n2026-12-04T05:40:01.191Z  INFO hookhost: hookhost \
             listening addr=127.0.0.1:40123\n"
        );
        assert_eq!(
            logged_addr(&started, "hookhost listening", "addr")?,
            Some(SocketAddr::from(([127, 0, 0, 1], 40123)))
        );
        assert_eq!(
            logged_addr(&started, "admin API listening", "address")?,
            Some(SocketAddr::from(([127, 0, 0, 1], 40999)))
        );
        let garbled = "INFO hookhost: hookhost listening addr=127.0.0.1\n";
        let error = logged_addr(garbled, "hookhost listening", "addr")
            .err()
            .context("a port-less address was taken")?;
        assert!(
            format!("{error:#}").contains("is not an address"),
            "{error:#}"
        );
        Ok(())
    }
}
