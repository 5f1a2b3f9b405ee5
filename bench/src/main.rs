//! `cargo run --release -p hookhost-bench`: one table of figures for a ~2 KiB Stripe
//! event, all measured in the same run on this machine.
//!
//! 1. Plugin overhead per request: a fresh wasm session (what `Plugin::session` does per
//!    request) plus `plan_verification` and `describe_event` on the built-in `stripe`
//!    plugin; beside it the same parsing done natively by the `stripe` crate, and the
//!    host's whole verification (`verify::judge`: plugin calls and HMAC).
//! 2. The disk's single-commit rate (`store::single_commit_rate`), in the directory the
//!    server's database lives in.
//! 3. Accepted requests/s end to end: the real `hookhost serve` binary as a separate
//!    process, driven over loopback HTTP/1.1 keep-alive connections with new, correctly
//!    signed events at several concurrency levels.
//! 4. Duplicates: one event POSTed again and again.
//!    Beside 3, at every concurrency level and at 64: the comparison receivers
//!    (`receivers`), each its own process like the server: a bare axum handler (the
//!    ceiling) and a hand-written native Stripe receiver (HMAC check + one durable SQLite
//!    INSERT per request, the reference), and hookhost's accepted/s ÷ the reference's.
//! 5. Delivery: a second server whose endpoint delivers to a downstream HTTP server
//!    inside this process (`downstream`). At the maximum rate (concurrency 64): accepted/s,
//!    and delivered/s = accepted events ÷ (last delivery − first accept). Then, open loop
//!    at half that accepted rate: per event, the time from sending its POST to its
//!    delivery's arrival downstream, and duplicates by `idempotency-key`.
//!
//! Pass/fail marks compare against the project's targets; the exit code is 0 whatever
//! they say, and non-zero only when the benchmark itself could not run.

mod downstream;
mod load;
mod receivers;

use anyhow::{Context as _, anyhow};
use base64::Engine as _;
use clap::Parser;
use downstream::Downstream;
use hmac::{Hmac, Mac};
use hookhost::config::EndpointConfig;
use hookhost::endpoints::Endpoint;
use hookhost::plugins::{Catalog, PluginLimits};
use hookhost::verify::{MessageSource, Secret};
use hookhost_plugin_sdk::Provider as _;
use hookhost_plugin_sdk::testing::RequestBuilder;
use load::{Paced, Payload, PhaseResult};
use serde_json::json;
use sha2::Sha256;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The endpoint's signing secret; the server reads the same value from a file.
const SECRET: &str = "whsec_hookhost_bench_0123456789abcdef";
/// The endpoint id (and so the path `/webhooks/stripe`).
const ENDPOINT: &str = "stripe";
/// Targets the marks compare against.
const PLUGIN_MEDIAN_TARGET_US: f64 = 50.0;
const ACCEPTED_RATIO_TARGET: f64 = 0.8;
const DUPLICATE_P99_TARGET_MS: f64 = 5.0;
const DELIVERED_RATIO_TARGET: f64 = 0.9;
const DELIVERY_P99_TARGET_MS: f64 = 250.0;
const REFERENCE_RATIO_TARGET: f64 = 1.0;
/// The concurrency the hookhost ÷ reference target is judged at (always measured for
/// the comparison receivers, beside every `--concurrency` level).
const REFERENCE_CONCURRENCY: u16 = 64;
/// The destination's signing key; the server gets it as `whsec_` + base64.
const DESTINATION_KEY: [u8; 32] = *b"hookhost-bench-destination-key!!";
/// The delivering server's `[delivery]` poll interval.
const DELIVERY_POLL_MS: u32 = 20;
/// The first event must reach the downstream within this, or delivery is broken.
const FIRST_DELIVERY_WAIT: Duration = Duration::from_secs(10);

#[derive(Parser, Debug)]
#[command(
    name = "hookhost-bench",
    about = "Measure hookhost: plugin overhead, disk commit rate, accepted requests/s over loopback"
)]
struct Args {
    /// Timed iterations of each in-process measurement (after a 10% warm-up).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(100..=1_000_000))]
    requests: u32,
    /// Seconds of load per concurrency level, and for the duplicate phase.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=120))]
    duration_secs: u64,
    /// Concurrency levels (connections) for new events, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [16u16, 64],
          value_parser = clap::value_parser!(u16).range(1..=512))]
    concurrency: Vec<u16>,
    /// Concurrency levels for the duplicate phase, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1u16, 16, 64],
          value_parser = clap::value_parser!(u16).range(1..=512))]
    duplicate_concurrency: Vec<u16>,
    /// Commits for the disk probe (default: about 3 s worth, estimated by a short probe).
    #[arg(long, value_parser = clap::value_parser!(u32).range(10..=100_000))]
    commits: Option<u32>,
    /// Where the temporary store, configuration and server log go (default: the system
    /// temp directory). The disk probe runs in the same directory as the server's database.
    #[arg(long)]
    tmp_dir: Option<PathBuf>,
    /// The server binary (default: `hookhost` next to this executable).
    #[arg(long)]
    server: Option<PathBuf>,
    /// Keep the temporary directory (server configuration, log and database) afterwards.
    #[arg(long)]
    keep_tmp: bool,
    /// Also measure accepted requests/s into PostgreSQL, with one and with two hookhost
    /// processes sharing the database, at the highest `--concurrency`. The URL names a
    /// database to connect to (`postgres://postgres@127.0.0.1:5432/postgres`); each
    /// phase creates a database of its own beside it (with `psql`) and drops it.
    #[arg(long)]
    postgres: Option<String>,
    /// Leave out the delivery phases (the second server and the downstream).
    #[arg(long)]
    skip_delivery: bool,
    /// The delivering server's `[delivery] workers`: deliveries in flight at once.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=1024))]
    delivery_workers: u32,
    /// Connections for the delivery phase's maximum rate.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=512))]
    delivery_concurrency: u16,
    /// Connections the paced (half-rate) delivery phase spreads its requests over.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=512))]
    paced_connections: u16,
    /// Seconds to wait, after each delivery phase's load, for the downstream to receive
    /// every accepted event.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=300))]
    delivery_wait_secs: u64,
    /// Internal: serve the bare axum ceiling receiver on ADDR (the bench starts itself so).
    #[arg(
        long,
        hide = true,
        value_name = "ADDR",
        conflicts_with = "serve_reference"
    )]
    serve_ceiling: Option<std::net::SocketAddr>,
    /// Internal: serve the hand-written reference receiver on ADDR, storing into `--db`.
    #[arg(long, hide = true, value_name = "ADDR", requires = "db")]
    serve_reference: Option<std::net::SocketAddr>,
    /// Internal: the reference receiver's SQLite file.
    #[arg(long, hide = true, value_name = "PATH")]
    db: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let outcome = match (args.serve_ceiling, args.serve_reference, args.db.clone()) {
        (Some(addr), _, _) => receivers::serve_ceiling(addr),
        (None, Some(addr), Some(db)) => receivers::serve_reference(addr, db),
        _ => run(&args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("hookhost-bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    // Find the server first: without it there is nothing to measure end to end.
    let binary = load::server_binary(args.server.clone())?;
    let base = args.tmp_dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("hookhost-bench-")
        .disable_cleanup(args.keep_tmp)
        .tempdir_in(&base)
        .with_context(|| format!("cannot create a temporary directory in {}", base.display()))?;
    // The load generator gets one thread: on a small machine it should not take the
    // server's cores.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;

    let created = unix_now();
    let sample_body = stripe_event(&event_id(0), &invoice_id(0), created);
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    println!(
        "hookhost-bench: {}-byte Stripe invoice.paid event, {cpus} CPUs, {} timed iterations, {} s per load level",
        sample_body.len(),
        args.requests,
        args.duration_secs
    );
    println!("server binary: {}{}", binary.display(), age(&binary));
    println!(
        "temporary dir: {}{}",
        dir.path().display(),
        if args.keep_tmp { " (kept)" } else { "" }
    );
    let load_at_start = load_average();

    // 1. In process, before the server exists, so nothing competes for the CPU.
    eprintln!("measuring plugin overhead…");
    let micro = micro_benchmarks(args.requests, &sample_body, created)?;

    // 2. The disk, in the directory the server's database will live in.
    eprintln!("measuring the disk's single-commit rate…");
    let (commit_rate, commits) = runtime.block_on(commit_rate(dir.path(), args.commits))?;

    // 3 and 4. The real server, over loopback.
    eprintln!("starting {}…", binary.display());
    let duration = Duration::from_secs(args.duration_secs);
    let (levels, duplicates, startup) = runtime.block_on(async {
        let server = load::Server::start(&binary, dir.path(), SECRET, ENDPOINT, "").await?;
        let startup = server.started_in;
        let target = load::Target::new(server.addr, ENDPOINT);
        let new_events = Payload::new_events(created);
        target.expect_one(&new_events, "accepted").await?;
        eprintln!("warming up (1 s at concurrency 16)…");
        load::drive(&target, 16, Duration::from_secs(1), &new_events, "accepted").await?;
        let mut levels = Vec::new();
        for &c in &args.concurrency {
            eprintln!(
                "new events at concurrency {c} for {} s…",
                args.duration_secs
            );
            levels.push((
                c,
                load::drive(&target, c.into(), duration, &new_events, "accepted").await?,
            ));
        }
        let same = Payload::same_event(
            stripe_event(
                "evt_1BenchDuplicate00000000000",
                "in_1BenchDuplicate0000000000",
                created,
            ),
            unix_now(),
        )?;
        target.expect_one(&same, "accepted").await?;
        let mut duplicates = Vec::new();
        for &c in &args.duplicate_concurrency {
            eprintln!(
                "one event repeated at concurrency {c} for {} s…",
                args.duration_secs
            );
            duplicates.push((
                c,
                load::drive(&target, c.into(), duration, &same, "duplicate").await?,
            ));
        }
        drop(server); // killed here, before the temporary directory goes
        anyhow::Ok((levels, duplicates, startup))
    })?;

    // 4a. The comparison receivers, each its own process like the server, at every
    // `--concurrency` level and at 64.
    let mut compare_levels = args.concurrency.clone();
    if !compare_levels.contains(&REFERENCE_CONCURRENCY) {
        compare_levels.push(REFERENCE_CONCURRENCY);
    }
    let mut comparisons = Vec::new();
    for kind in [receivers::Kind::Ceiling, receivers::Kind::Reference] {
        comparisons.push((
            kind,
            runtime.block_on(compare_phase(
                kind,
                dir.path(),
                &compare_levels,
                duration,
                created,
            ))?,
        ));
    }

    // 4b. PostgreSQL: one process, then two sharing the database.
    let postgres = match &args.postgres {
        None => Vec::new(),
        Some(admin) => {
            runtime.block_on(postgres_phases(args, admin, &binary, dir.path(), created))?
        }
    };

    // 5. Delivery, with a second server (and its own store) once the first has gone. If
    // it cannot run, the table of the phases above is printed before the error.
    let (delivery, delivery_error) = if args.skip_delivery {
        (None, None)
    } else {
        match runtime.block_on(delivery_phases(args, &binary, dir.path(), created)) {
            Ok(delivery) => (Some(delivery), None),
            Err(error) => (
                None,
                Some(error.context("the delivery phases could not run")),
            ),
        }
    };

    let mut table = Table::default();
    let plugin_median = micro.plugin.median_us();
    table.row(
        "plugin overhead: session + plan + describe (wasm)",
        format!(
            "median {:.1} µs, p99 {:.1} µs",
            plugin_median,
            micro.plugin.p99_us()
        ),
        format!("median < {PLUGIN_MEDIAN_TARGET_US} µs"),
        Some(plugin_median < PLUGIN_MEDIAN_TARGET_US),
    );
    table.row(
        "  of which session (fresh Store + instance)",
        format!(
            "median {:.1} µs, p99 {:.1} µs",
            micro.session.median_us(),
            micro.session.p99_us()
        ),
        String::new(),
        None,
    );
    table.row(
        "native plan + describe (stripe rlib)",
        format!(
            "median {:.1} µs, p99 {:.1} µs",
            micro.native.median_us(),
            micro.native.p99_us()
        ),
        String::new(),
        None,
    );
    table.row(
        "host verify::judge (plugin calls + HMAC)",
        format!(
            "median {:.1} µs, p99 {:.1} µs",
            micro.judge.median_us(),
            micro.judge.p99_us()
        ),
        String::new(),
        None,
    );
    table.row(
        "disk single-commit rate (SQLite WAL, FULL)",
        format!("{commit_rate:.0} commits/s ({commits} commits)"),
        String::new(),
        None,
    );
    for (c, level) in &levels {
        table.row(
            &format!("accepted, concurrency {c}"),
            throughput(level),
            String::new(),
            None,
        );
        let ratio = level.rate() / commit_rate;
        table.row(
            &format!("  accepted/s ÷ single-commit rate, c={c}"),
            format!("{ratio:.2}"),
            format!("≥ {ACCEPTED_RATIO_TARGET}"),
            Some(ratio >= ACCEPTED_RATIO_TARGET),
        );
    }
    let hookhost_at = |c: u16| levels.iter().find(|(l, _)| *l == c).map(|(_, r)| r.rate());
    for &c in &compare_levels {
        for (kind, results) in &comparisons {
            if let Some((_, level)) = results.iter().find(|(l, _)| *l == c) {
                table.row(
                    &format!("{}, c={c}", kind.label()),
                    throughput(level),
                    String::new(),
                    None,
                );
            }
        }
        let reference = comparisons
            .iter()
            .filter(|(kind, _)| *kind == receivers::Kind::Reference)
            .flat_map(|(_, results)| results)
            .find(|(l, _)| *l == c)
            .map(|(_, r)| r.rate());
        let judged = c == REFERENCE_CONCURRENCY;
        let (value, pass) = match (hookhost_at(c), reference) {
            (Some(hookhost), Some(reference)) if reference > 0.0 => {
                let ratio = hookhost / reference;
                (format!("{ratio:.2}"), Some(ratio >= REFERENCE_RATIO_TARGET))
            }
            (None, _) => (
                format!("n/a (hookhost not measured at c={c}: add it to --concurrency)"),
                None,
            ),
            _ => ("n/a (the reference accepted nothing)".into(), None),
        };
        table.row(
            &format!("hookhost ÷ reference, c={c}"),
            value,
            if judged {
                format!("≥ {REFERENCE_RATIO_TARGET:.1}")
            } else {
                String::new()
            },
            pass.filter(|_| judged),
        );
    }
    for (c, dup) in &duplicates {
        let dup_p99 = dup.percentile(0.99);
        table.row(
            &format!("duplicates, concurrency {c}"),
            throughput(dup),
            format!("p99 < {DUPLICATE_P99_TARGET_MS} ms"),
            Some(dup_p99.is_some_and(|p| p.as_secs_f64() * 1e3 < DUPLICATE_P99_TARGET_MS)),
        );
    }
    let sqlite_at = |c: u16| levels.iter().find(|(l, _)| *l == c).map(|(_, r)| r.rate());
    for (processes, c, level) in &postgres {
        table.row(
            &format!("accepted into PostgreSQL, {processes} process(es), concurrency {c}"),
            throughput(level),
            String::new(),
            None,
        );
        if let Some(sqlite) = sqlite_at(*c) {
            table.row(
                &format!("  ÷ SQLite accepted/s at concurrency {c}"),
                format!("{:.2}", level.rate() / sqlite),
                String::new(),
                None,
            );
        }
    }
    if let Some(delivery) = &delivery {
        delivery.rows(&mut table);
    }
    if delivery_error.is_some() {
        table.row(
            "delivery",
            "could not run (below)".into(),
            String::new(),
            Some(false),
        );
    }
    println!(
        "server ready after {:.2} s (plugin compilation included)",
        startup.as_secs_f64()
    );
    if let Some(delivery) = &delivery {
        println!(
            "delivering server ready after {:.2} s; [delivery] workers = {}, poll_ms = {DELIVERY_POLL_MS}; \
             wait for deliveries up to {} s per phase",
            delivery.startup.as_secs_f64(),
            args.delivery_workers,
            args.delivery_wait_secs
        );
    }
    if let (Some(start), Some(end)) = (load_at_start, load_average()) {
        println!(
            "1-min load average: {start} at start, {end} at end (other work on the machine skews figures)"
        );
    }
    println!();
    table.print();

    let phases = levels
        .iter()
        .map(|(c, r)| (format!("accepted, concurrency {c}"), r))
        .chain(comparisons.iter().flat_map(|(kind, results)| {
            results
                .iter()
                .map(move |(c, r)| (format!("{}, c={c}", kind.label()), r))
        }))
        .chain(
            duplicates
                .iter()
                .map(|(c, r)| (format!("duplicates, concurrency {c}"), r)),
        )
        .chain(delivery.iter().flat_map(|d| {
            [
                (
                    format!("delivery: accepted, concurrency {}", d.concurrency),
                    &d.max,
                ),
                (
                    format!("delivery: paced at {:.0}/s", d.paced.rate),
                    &d.paced.result,
                ),
            ]
        }));
    let mut errors = print_errors(phases);
    if let Some(delivery) = &delivery {
        errors |= delivery.print_faults();
    }
    if errors && !args.keep_tmp {
        println!("(the server's log says why: rerun with --keep-tmp to keep server.log)");
    }
    delivery_error.map_or(Ok(()), Err)
}

/// `whsec_` + base64 of the destination key, as the server's configuration takes it.
fn destination_secret() -> String {
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(DESTINATION_KEY)
    )
}

/// What the delivery phases measured.
struct Delivery {
    startup: Duration,
    concurrency: u16,
    /// Phase 1: new events at the maximum rate.
    max: PhaseResult,
    /// Distinct phase-1 events the downstream received within the wait.
    max_delivered: usize,
    /// From the first accept of phase 1 to its last delivery.
    max_span: Option<Duration>,
    /// Phase 2: open loop at half of phase 1's accepted rate.
    paced: Paced,
    /// Phase 1's events not yet delivered when phase 2 started (they are ahead of it).
    backlog: u64,
    /// For each paced event delivered within the wait: arrival − send, sorted.
    paced_latencies: Vec<Duration>,
    /// Whole run (sanity event and warm-up included).
    deliveries: u64,
    duplicates: u64,
    faults: Vec<(&'static str, u64)>,
}

impl Delivery {
    /// Phase 1's events delivered ÷ (last delivery − first accept). (A warm-up event
    /// delivered late is not one of them: the count is capped at the accepted.)
    fn delivered_rate(&self) -> Option<f64> {
        let span = self.max_span?.as_secs_f64();
        let delivered = (self.max_delivered as u64).min(self.max.ok);
        (span > 0.0).then(|| delivered as f64 / span)
    }

    fn rows(&self, table: &mut Table) {
        let c = self.concurrency;
        let max = &self.max;
        table.row(
            &format!("delivery: accepted, concurrency {c}"),
            throughput(max),
            String::new(),
            None,
        );
        let complete = self.max_delivered as u64 >= max.ok;
        let delivered = match (self.delivered_rate(), self.max_span) {
            (Some(rate), Some(span)) => format!(
                "{rate:.0}/s ({} of {} in {:.2} s{})",
                self.max_delivered,
                max.ok,
                span.as_secs_f64(),
                if complete { "" } else { ", incomplete" }
            ),
            _ => format!("n/a ({} of {} delivered)", self.max_delivered, max.ok),
        };
        table.row(
            "  delivered/s (first accept → last delivery)",
            delivered,
            String::new(),
            None,
        );
        let ratio = self.delivered_rate().map(|d| d / max.rate());
        table.row(
            "  delivered/s ÷ accepted/s",
            ratio.map_or_else(|| "n/a".into(), |r| format!("{r:.2}")),
            format!("≥ {DELIVERED_RATIO_TARGET}"),
            Some(complete && ratio.is_some_and(|r| r >= DELIVERED_RATIO_TARGET)),
        );
        let paced = &self.paced;
        table.row(
            &format!("delivery: paced at {:.0}/s (half), accepted", paced.rate),
            format!(
                "{}, {} of {} sent > {} ms late",
                throughput(&paced.result),
                paced.late,
                paced.scheduled,
                load::LATE.as_millis()
            ),
            String::new(),
            None,
        );
        let p99 = quantile(&self.paced_latencies, 0.99);
        let complete = self.paced_latencies.len() == paced.sent.len() && !paced.sent.is_empty();
        let behind = if self.backlog > 0 {
            format!(", behind {} undelivered from the max phase", self.backlog)
        } else {
            String::new()
        };
        table.row(
            "  send → downstream arrival",
            format!(
                "median {}, p99 {}, max {} ({} of {} delivered{behind})",
                ms(quantile(&self.paced_latencies, 0.50)),
                ms(p99),
                ms(self.paced_latencies.last().copied()),
                self.paced_latencies.len(),
                paced.sent.len()
            ),
            format!("p99 < {DELIVERY_P99_TARGET_MS} ms"),
            Some(complete && p99.is_some_and(|p| p.as_secs_f64() * 1e3 < DELIVERY_P99_TARGET_MS)),
        );
        let faults: u64 = self.faults.iter().map(|(_, n)| n).sum();
        table.row(
            "  duplicates by idempotency-key (whole run)",
            format!(
                "{} of {} deliveries, {faults} unsigned or malformed",
                self.duplicates, self.deliveries
            ),
            "0".into(),
            Some(self.duplicates == 0 && faults == 0),
        );
    }

    /// List deliveries that broke the contract; `true` if there were any.
    fn print_faults(&self) -> bool {
        if self.faults.is_empty() {
            return false;
        }
        println!("\nfaults seen by the downstream:");
        for (what, count) in &self.faults {
            println!("  {count:>8} × {what}");
        }
        true
    }
}

/// Phase 1 (maximum rate) and phase 2 (paced at half of it) against a second server
/// that delivers to a downstream in this process.
async fn delivery_phases(
    args: &Args,
    binary: &Path,
    dir: &Path,
    created: i64,
) -> anyhow::Result<Delivery> {
    let duration = Duration::from_secs(args.duration_secs);
    let wait = Duration::from_secs(args.delivery_wait_secs);
    let downstream = Downstream::start(&DESTINATION_KEY)?;
    let dir = dir.join("delivery");
    std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let extra = format!(
        "\n[endpoint.destination]\nurl = \"{}\"\nsecret = \"{}\"\n\n\
         [delivery]\nworkers = {}\npoll_ms = {DELIVERY_POLL_MS}\n",
        downstream.url(),
        destination_secret(),
        args.delivery_workers
    );
    eprintln!(
        "starting a delivering server ({} → {})…",
        binary.display(),
        downstream.url()
    );
    let server = load::Server::start(binary, &dir, SECRET, ENDPOINT, &extra).await?;
    let startup = server.started_in;
    let target = load::Target::new(server.addr, ENDPOINT);
    // Event ids go on from one phase to the next: every request is a new event.
    let events = Payload::new_events(created);
    target.expect_one(&events, "accepted").await?;
    if !downstream
        .wait(FIRST_DELIVERY_WAIT, |r| !r.arrivals.is_empty())
        .await
    {
        anyhow::bail!(
            "the delivering server accepted an event but the downstream received nothing within {} s; its log ends:\n{}",
            FIRST_DELIVERY_WAIT.as_secs(),
            server.log_tail()
        );
    }
    eprintln!("warming up (1 s at concurrency 16), then draining…");
    let warm = load::drive(&target, 16, Duration::from_secs(1), &events, "accepted").await?;
    let warm_total = usize::try_from(warm.ok + 1).unwrap_or(usize::MAX);
    if !downstream
        .wait(wait, |r| r.arrivals.len() >= warm_total)
        .await
    {
        eprintln!("warning: the warm-up's events were not all delivered within the wait");
    }

    downstream.reset();
    let c = args.delivery_concurrency;
    eprintln!(
        "delivery, new events at concurrency {c} for {} s, then waiting for every delivery…",
        args.duration_secs
    );
    let max = load::drive(&target, c.into(), duration, &events, "accepted").await?;
    let accepted = usize::try_from(max.ok).unwrap_or(usize::MAX);
    downstream
        .wait(wait, |r| r.arrivals.len() >= accepted)
        .await;
    let (max_delivered, max_last) = {
        let record = downstream.record();
        (record.arrivals.len(), record.last_arrival())
    };
    let max_span = max
        .first_ok
        .zip(max_last)
        .map(|(first, last)| last.saturating_duration_since(first));

    if max_delivered < accepted {
        eprintln!(
            "warning: {} of {accepted} events were not delivered within {} s; the paced phase queues behind them",
            accepted - max_delivered,
            wait.as_secs()
        );
    }
    let backlog = max.ok.saturating_sub(max_delivered as u64);

    downstream.reset();
    let rate = (max.rate() / 2.0).max(1.0);
    eprintln!(
        "delivery, paced at {rate:.0}/s over {} connections for {} s, then waiting for every delivery…",
        args.paced_connections, args.duration_secs
    );
    let paced = load::drive_paced(
        &target,
        args.paced_connections.into(),
        rate,
        duration,
        &events,
        "accepted",
    )
    .await?;
    downstream
        .wait(wait, |r| {
            r.arrivals.len() >= paced.sent.len()
                && paced.sent.keys().all(|id| r.arrivals.contains_key(id))
        })
        .await;
    drop(server); // no more deliveries: the counts below are final
    let record = downstream.record();
    let mut paced_latencies: Vec<Duration> = paced
        .sent
        .iter()
        .filter_map(|(id, sent)| {
            record
                .arrivals
                .get(id)
                .map(|arrived| arrived.saturating_duration_since(*sent))
        })
        .collect();
    paced_latencies.sort_unstable();
    Ok(Delivery {
        startup,
        concurrency: c,
        max,
        max_delivered,
        max_span,
        paced,
        backlog,
        paced_latencies,
        deliveries: record.deliveries,
        duplicates: record.duplicates,
        faults: record.faults.iter().map(|(k, v)| (*k, *v)).collect(),
    })
}

/// The four in-process measurements.
struct Micro {
    plugin: Samples,
    session: Samples,
    native: Samples,
    judge: Samples,
}

fn micro_benchmarks(iterations: u32, body: &str, created: i64) -> anyhow::Result<Micro> {
    let warmup = (iterations / 10).max(100);
    let catalog =
        Catalog::load(None, PluginLimits::default()).context("loading the built-in plugins")?;
    let plugin = catalog
        .get("stripe")
        .context("no built-in `stripe` plugin in this build")?;
    let signature = stripe_signature(created, body.as_bytes())?;
    let url = format!("http://127.0.0.1:8080/webhooks/{ENDPOINT}");
    let headers: Vec<(String, Vec<u8>)> = [
        ("host", "127.0.0.1:8080".to_string()),
        (
            "user-agent",
            "Stripe/1.0 (+https://stripe.com/docs/webhooks)".to_string(),
        ),
        (
            "content-type",
            "application/json; charset=utf-8".to_string(),
        ),
        ("content-length", body.len().to_string()),
        ("stripe-signature", signature),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_string(), value.into_bytes()))
    .collect();
    let source = MessageSource {
        method: "POST",
        url: &url,
        headers: &headers,
        body: body.as_bytes(),
    };
    let rejected = |what: &str, r: hookhost_plugin_sdk::Rejection| {
        anyhow!("the stripe plugin rejected the bench's event in {what}: {r:?}")
    };

    // The plugin: what every request pays for the sandbox.
    let mut plugin_ns = Vec::with_capacity(iterations as usize);
    let mut session_ns = Vec::with_capacity(iterations as usize);
    for i in 0..warmup + iterations {
        let started = Instant::now();
        let mut session = plugin.session("{}", &source)?;
        let instantiated = Instant::now();
        let plan = session
            .plan_verification()?
            .map_err(|r| rejected("plan-verification", r))?;
        let event = session
            .describe_event()?
            .map_err(|r| rejected("describe-event", r))?;
        drop(session);
        let done = Instant::now();
        black_box((plan, event));
        if i >= warmup {
            plugin_ns.push(nanos(done - started));
            session_ns.push(nanos(instantiated - started));
        }
    }

    // The same parsing, natively.
    let mut request = RequestBuilder::post(&url);
    for (name, value) in &headers {
        request = request.header(name, value);
    }
    let request = request.body(body).build();
    let native = time_each(warmup, iterations, || {
        let plan = stripe::Stripe::plan_verification(&request)
            .map_err(|r| rejected("plan (native)", r))?;
        let event = stripe::Stripe::describe_event(&request)
            .map_err(|r| rejected("describe (native)", r))?;
        black_box((plan, event));
        Ok(())
    })?;

    // The host's whole verification, as the ingest route calls it.
    let endpoint = Endpoint::build(
        &EndpointConfig {
            id: ENDPOINT.into(),
            plugin: "stripe".into(),
            secrets: vec![Secret::new(SECRET)],
            tolerance: None,
            plugin_config: json!({}),
            ..Default::default()
        },
        &catalog,
    )
    .map_err(|reason| anyhow!("{reason}"))?;
    let judge = time_each(warmup, iterations, || {
        let verified = hookhost::verify::judge(&endpoint, &source, created)
            .context("verify::judge refused the bench's own event")?;
        black_box(verified);
        Ok(())
    })?;

    Ok(Micro {
        plugin: Samples::new(plugin_ns),
        session: Samples::new(session_ns),
        native,
        judge,
    })
}

fn time_each(
    warmup: u32,
    iterations: u32,
    mut call: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Samples> {
    let mut ns = Vec::with_capacity(iterations as usize);
    for i in 0..warmup + iterations {
        let started = Instant::now();
        call()?;
        let elapsed = started.elapsed();
        if i >= warmup {
            ns.push(nanos(elapsed));
        }
    }
    Ok(Samples::new(ns))
}

/// One comparison receiver as its own process, driven like the server: one checked
/// event, 1 s of warm-up at concurrency 16, then new events at each of `levels`.
async fn compare_phase(
    kind: receivers::Kind,
    dir: &Path,
    levels: &[u16],
    duration: Duration,
    created: i64,
) -> anyhow::Result<Vec<(u16, PhaseResult)>> {
    eprintln!("starting the {} receiver…", kind.label());
    let receiver = receivers::Receiver::start(kind, dir).await?;
    let target = load::Target::new(receiver.addr, ENDPOINT);
    let new_events = Payload::new_events(created);
    target.expect_one(&new_events, "accepted").await?;
    load::drive(&target, 16, Duration::from_secs(1), &new_events, "accepted").await?;
    let mut results = Vec::new();
    for &c in levels {
        eprintln!(
            "{}: new events at concurrency {c} for {} s…",
            kind.label(),
            duration.as_secs()
        );
        results.push((
            c,
            load::drive(&target, c.into(), duration, &new_events, "accepted").await?,
        ));
    }
    drop(receiver); // killed here, before the temporary directory goes
    Ok(results)
}

/// Accepted requests/s into PostgreSQL with one and with two server processes on one
/// database (created beside `admin`, dropped afterwards), at the highest concurrency.
async fn postgres_phases(
    args: &Args,
    admin: &str,
    binary: &Path,
    dir: &Path,
    created: i64,
) -> anyhow::Result<Vec<(usize, u16, load::PhaseResult)>> {
    let concurrency = args.concurrency.iter().copied().max().unwrap_or(64);
    let duration = Duration::from_secs(args.duration_secs);
    let (base, _) = admin
        .rsplit_once('/')
        .context("--postgres: a URL like postgres://user@host:5432/postgres")?;
    let psql = |sql: &str| -> anyhow::Result<()> {
        let out = std::process::Command::new("psql")
            .arg(admin)
            .args(["-v", "ON_ERROR_STOP=1", "-qXc", sql])
            .output()
            .context("cannot run psql")?;
        anyhow::ensure!(
            out.status.success(),
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    let mut results = Vec::new();
    for processes in [1usize, 2] {
        let name = format!("hookhost_bench_{}_{processes}", std::process::id());
        psql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))?;
        psql(&format!("CREATE DATABASE {name}"))?;
        let url = format!("{base}/{name}");
        let measured = async {
            eprintln!("PostgreSQL, {processes} process(es): starting…");
            let mut servers = Vec::new();
            // One after the other: the first applies the migrations.
            for p in 0..processes {
                let sub = dir.join(format!("postgres-{processes}-{p}"));
                std::fs::create_dir_all(&sub)?;
                servers.push(
                    load::Server::start_with_store(binary, &sub, SECRET, ENDPOINT, &url, "")
                        .await?,
                );
            }
            let targets: Vec<load::Target> = servers
                .iter()
                .map(|s| load::Target::new(s.addr, ENDPOINT))
                .collect();
            let new_events = Payload::new_events(created);
            for target in &targets {
                target.expect_one(&new_events, "accepted").await?;
            }
            load::drive_spread(&targets, 16, Duration::from_secs(1), &new_events, "accepted")
                .await?;
            eprintln!(
                "PostgreSQL, {processes} process(es): new events at concurrency {concurrency} for {} s…",
                args.duration_secs
            );
            let result = load::drive_spread(
                &targets,
                concurrency.into(),
                duration,
                &new_events,
                "accepted",
            )
            .await?;
            drop(servers);
            anyhow::Ok(result)
        }
        .await;
        psql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))?;
        results.push((processes, concurrency, measured?));
    }
    Ok(results)
}

/// Single commits per second in `dir`: a short probe sizes the run to about 3 s.
async fn commit_rate(dir: &Path, commits: Option<u32>) -> anyhow::Result<(f64, u32)> {
    let commits = match commits {
        Some(n) => n,
        None => {
            let probe = hookhost::store::single_commit_rate(&dir.join("commit-probe.db"), 20)
                .await
                .context("disk probe")?;
            (probe * 3.0).clamp(30.0, 10_000.0) as u32
        }
    };
    let rate = hookhost::store::single_commit_rate(&dir.join("commit-rate.db"), commits)
        .await
        .context("disk single-commit rate")?;
    Ok((rate, commits))
}

/// Timings in nanoseconds, sorted.
struct Samples(Vec<u64>);

impl Samples {
    fn new(mut ns: Vec<u64>) -> Samples {
        ns.sort_unstable();
        Samples(ns)
    }

    fn quantile_us(&self, q: f64) -> f64 {
        quantile(&self.0, q).map_or(f64::NAN, |ns| ns as f64 / 1e3)
    }

    fn median_us(&self) -> f64 {
        self.quantile_us(0.50)
    }

    fn p99_us(&self) -> f64 {
        self.quantile_us(0.99)
    }
}

/// The nearest-rank quantile of sorted values.
fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied()
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A load phase's row: rate, median and p99 latency, errors.
fn throughput(level: &PhaseResult) -> String {
    format!(
        "{:.0}/s, p50 {}, p99 {}, {} errors",
        level.rate(),
        ms(level.percentile(0.50)),
        ms(level.percentile(0.99)),
        level.error_count()
    )
}

fn ms(d: Option<Duration>) -> String {
    d.map_or_else(
        || "n/a".into(),
        |d| format!("{:.2} ms", d.as_secs_f64() * 1e3),
    )
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The 1-minute load average, where the system tells it (Linux).
fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next().map(str::to_owned)
}

/// How long ago the binary was built, so a stale server is noticed.
fn age(path: &Path) -> String {
    let modified = std::fs::metadata(path).and_then(|m| m.modified());
    match modified.ok().and_then(|m| m.elapsed().ok()) {
        Some(age) if age.as_secs() < 120 => format!(" (built {} s ago)", age.as_secs()),
        Some(age) => format!(" (built {} min ago)", age.as_secs() / 60),
        None => String::new(),
    }
}

/// Stripe-style ids, 24 characters after the prefix like Stripe's own.
fn event_id(n: u64) -> String {
    format!("evt_1Bench{n:018}")
}

fn invoice_id(n: u64) -> String {
    format!("in_1Bench{n:018}")
}

/// An `invoice.paid` event of about 2 KiB, shaped like Stripe's.
fn stripe_event(event_id: &str, invoice_id: &str, created: i64) -> String {
    let line = |n: u32, amount: u32, description: &str| {
        json!({
            "id": format!("il_1Bench{n:018}"),
            "object": "line_item",
            "amount": amount,
            "currency": "usd",
            "description": description,
            "discountable": true,
            "livemode": false,
            "period": { "start": created - 2_592_000, "end": created },
            "price": {
                "id": format!("price_1Bench{n:015}"),
                "object": "price",
                "product": "prod_BenchProduct01",
                "unit_amount": amount,
                "recurring": { "interval": "month", "interval_count": 1 }
            },
            "proration": false,
            "quantity": 1,
            "type": "subscription"
        })
    };
    json!({
        "id": event_id,
        "object": "event",
        "api_version": "2024-06-20",
        "created": created,
        "type": "invoice.paid",
        "livemode": false,
        "pending_webhooks": 1,
        "request": { "id": null, "idempotency_key": null },
        "data": {
            "object": {
                "id": invoice_id,
                "object": "invoice",
                "account_country": "US",
                "amount_due": 4900,
                "amount_paid": 4900,
                "amount_remaining": 0,
                "billing_reason": "subscription_cycle",
                "collection_method": "charge_automatically",
                "currency": "usd",
                "customer": "cus_BenchCustomer0001",
                "customer_email": "billing@example.com",
                "paid": true,
                "status": "paid",
                "subscription": "sub_1BenchSubscription000001",
                "lines": {
                    "object": "list",
                    "has_more": false,
                    "total_count": 3,
                    "url": format!("/v1/invoices/{invoice_id}/lines"),
                    "data": [
                        line(1, 2900, "1 × Pro plan (at $29.00 / month)"),
                        line(2, 1500, "3 × Extra seat (at $5.00 / month)"),
                        line(3, 500, "1 × Priority support (at $5.00 / month)"),
                    ]
                }
            }
        }
    })
    .to_string()
}

/// `t=<t>,v1=<hex HMAC-SHA256(secret, "{t}.{body}")>`.
fn stripe_signature(t: i64, body: &[u8]) -> anyhow::Result<String> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(SECRET.as_bytes())
        .map_err(|_| anyhow!("HMAC refused the key"))?;
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    Ok(format!(
        "t={t},v1={}",
        hex::encode(mac.finalize().into_bytes())
    ))
}

#[derive(Default)]
struct Table {
    rows: Vec<[String; 4]>,
}

impl Table {
    fn row(&mut self, name: &str, value: String, target: String, pass: Option<bool>) {
        let mark = match pass {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "",
        };
        self.rows
            .push([name.to_string(), value, target, mark.to_string()]);
    }

    fn print(&self) {
        let header = ["measurement", "result", "target", ""].map(String::from);
        let mut widths = [0usize; 4];
        for row in std::iter::once(&header).chain(&self.rows) {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |row: &[String; 4]| {
            let cells: Vec<String> = row
                .iter()
                .zip(widths)
                .map(|(cell, w)| format!("{cell}{}", " ".repeat(w - cell.chars().count())))
                .collect();
            println!("{}", cells.join(" | ").trim_end());
        };
        line(&header);
        println!("{}", widths.map(|w| "-".repeat(w)).join("-|-"));
        for row in &self.rows {
            line(row);
        }
    }
}

/// List every answer that was not counted, per phase; `true` if there were any.
fn print_errors<'a>(phases: impl Iterator<Item = (String, &'a PhaseResult)>) -> bool {
    let mut any = false;
    for (name, result) in phases {
        if result.errors.is_empty() {
            continue;
        }
        any = true;
        println!("\nnot counted in {name}:");
        for (what, count) in &result.errors {
            println!("  {count:>8} × {what}");
        }
    }
    any
}
