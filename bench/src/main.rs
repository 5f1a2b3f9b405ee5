//! `cargo run --profile dist -p hookhost-bench`: one table of figures for Stripe events,
//! all measured in the same run on this machine, each target beside its measured value.
//! First the machine's speed (`machine`: SHA-256 on one core, a system call's cost), and
//! at the end the CPU time the hypervisor took during the run, so that a run's figures
//! in µs can be set beside another's.
//!
//! 1. Plugin overhead per request (1 KiB event): a fresh wasm session (what
//!    `Plugin::session` does per request) plus `plan_verification` and `describe_event`
//!    on the built-in `stripe` plugin; beside it the same parsing done natively by the
//!    `stripe` crate. The difference of the medians is the cost of isolation. Also the
//!    host's whole verification (`verify::judge`: plugin calls and HMAC). The three
//!    are timed in turn, a call of each per round, so that all see the same machine.
//!    Then every built-in plugin on 1 MiB bodies (the default cap) in the widest shapes
//!    JSON has (`at_cap`): the slowest call on each, against the default
//!    `plugin_time_ms`.
//! 2. The disk's single-commit rate (`store::single_commit_rate`), in the directory the
//!    servers' databases live in: once before the load matrix and once after it. The
//!    disk's rate moves during a run, so the ratio is judged against the higher reading.
//!    Then the store alone (`group_commit`): hookhost's `Store` on a new SQLite file fed
//!    1 KiB receipts by 64 tasks in this process, no HTTP and no plugin, so the table
//!    shows what group commit gives on this disk beside what the whole path gives.
//! 3. Start-up and memory at rest: `hookhost serve` with one endpoint for every built-in
//!    plugin (`fixtures/demo.toml`), started twice on an empty compiled-plugin cache
//!    (the first start compiles, the second loads from the cache), each then idle for
//!    1 s before its memory is read.
//! 4. The load matrix (`matrix`): the real `hookhost serve` (SQLite) as a separate
//!    process, and the comparison receivers (`receivers`: a hand-written native Stripe
//!    receiver, the reference, and a bare axum handler, the ceiling), each driven over
//!    loopback HTTP/1.1 keep-alive connections with new, correctly signed events at
//!    every `--matrix-concurrency` × `--bodies`: accepted/s, p50, p99, the receiver's CPU
//!    per request and peak resident memory (`usage`), and the load generator's own CPU.
//!    Then duplicates: one event POSTed to hookhost again and again, closed loop at each
//!    `--duplicate-concurrency`, then open loop at half the rate saturated at 64
//!    connections, which is what the p99 target is judged on (closed-loop latency at
//!    saturation is only connections ÷ rate).
//! 5. With `--postgres`: hookhost into PostgreSQL (one process, then two sharing the
//!    database) and the reference on PostgreSQL, at 64 connections, 1 KiB events.
//! 6. Delivery: a second server whose endpoint delivers to a downstream HTTP server
//!    inside this process (`downstream`). At the maximum rate (concurrency 64): accepted/s,
//!    and delivered/s = accepted events ÷ (last delivery − first accept). Then, open loop
//!    at half that accepted rate: per event, the time from its POST's scheduled time
//!    to its delivery's arrival downstream, and duplicates by `idempotency-key`.
//!
//! Pass/fail marks compare against the project's targets; the exit code is 0 whatever
//! they say, and non-zero only when the benchmark itself could not run.

mod at_cap;
mod downstream;
mod event;
mod group_commit;
mod load;
mod machine;
mod matrix;
mod receivers;
mod tenants;
mod usage;

use anyhow::{Context as _, anyhow};
use base64::Engine as _;
use clap::Parser;
use downstream::Downstream;
use event::{MAX_BODY_BYTES, size_label};
use hookhost::config::EndpointConfig;
use hookhost::endpoints::Endpoint;
use hookhost::plugins::{BUILTIN_NAMES, Catalog};
use hookhost::verify::{MessageSource, Secret};
use hookhost_plugin_sdk::Provider as _;
use hookhost_plugin_sdk::testing::RequestBuilder;
use load::{Paced, Payload, PhaseResult};
use matrix::{Cell, Subject};
use serde_json::json;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use usage::Usage;

/// The endpoint's signing secret; the server reads the same value from a file.
const SECRET: &str = "whsec_hookhost_bench_0123456789abcdef";
/// The endpoint id (and so the path `/webhooks/stripe`).
const ENDPOINT: &str = "stripe";

// The project's targets, which the marks compare against.
/// Isolation: (fresh instance + both plugin calls) − (the same parsing natively), medians.
const ISOLATION_TARGET_US: f64 = 10.0;
/// hookhost accepted/s ÷ the disk's single-commit rate (SQLite).
const COMMIT_RATIO_TARGET: f64 = 5.0;
/// hookhost accepted/s ÷ the reference's on the same store.
const REFERENCE_RATIO_TARGET: f64 = 1.0;
/// Duplicates' p99 at `JUDGED_CONCURRENCY`.
const DUPLICATE_P99_TARGET_MS: f64 = 2.0;
/// Start-up with every built-in plugin configured, the compiled-plugin cache warm.
const STARTUP_TARGET_MS: f64 = 300.0;
/// Resident memory after start-up and `AT_REST_IDLE`, every built-in plugin configured.
const RSS_AT_REST_TARGET_MIB: f64 = 64.0;
/// Peak resident memory in any cell of the load matrix.
const RSS_UNDER_LOAD_TARGET_MIB: f64 = 256.0;
const DELIVERED_RATIO_TARGET: f64 = 0.9;
const DELIVERY_P99_TARGET_MS: f64 = 250.0;

/// Where the ratio and duplicate targets are judged: 64 connections, 1 KiB bodies.
/// 1 KiB is also the event of the in-process, duplicate, PostgreSQL and delivery phases.
const JUDGED_CONCURRENCY: u16 = 64;
const JUDGED_BODY: usize = 1024;
/// How long the server idles after start-up before its memory at rest is read.
const AT_REST_IDLE: Duration = Duration::from_secs(1);
/// One endpoint for every built-in plugin, with development secrets.
const DEMO_CONFIG: &str = include_str!("../../fixtures/demo.toml");
/// The destination's signing key; the server gets it as `whsec_` + base64.
const DESTINATION_KEY: [u8; 32] = *b"hookhost-bench-destination-key!!";
/// The delivering server's `[delivery]` poll interval.
const DELIVERY_POLL_MS: u32 = 20;
/// The first event must reach the downstream within this, or delivery is broken.
const FIRST_DELIVERY_WAIT: Duration = Duration::from_secs(10);

#[derive(Parser, Debug)]
#[command(
    name = "hookhost-bench",
    about = "Measure hookhost: plugin overhead, disk commit rate, start-up and memory, \
             accepted requests/s over loopback beside a native receiver and bare axum"
)]
struct Args {
    /// Timed iterations of each in-process measurement (after a 10% warm-up).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(100..=1_000_000))]
    requests: u32,
    /// Connections (concurrency levels) of the load matrix, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1u16, 16, 64, 256],
          value_parser = clap::value_parser!(u16).range(1..=512))]
    matrix_concurrency: Vec<u16>,
    /// Body sizes of the load matrix, comma-separated: bytes, or KiB / MiB with a `k` /
    /// `m` suffix (at most 2 MiB).
    #[arg(long, value_delimiter = ',', default_values = ["1k", "64k", "1m"],
          value_parser = event::parse_size)]
    bodies: Vec<usize>,
    /// Seconds of load per cell of the matrix (receiver × concurrency × body).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=120))]
    matrix_secs: u64,
    /// Seconds of load per duplicate level, PostgreSQL phase and delivery phase.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=120))]
    duration_secs: u64,
    /// Concurrency levels for the duplicate phase, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1u16, 16, 64],
          value_parser = clap::value_parser!(u16).range(1..=512))]
    duplicate_concurrency: Vec<u16>,
    /// Receipts the store alone is timed on (after a tenth as many to warm up).
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(100..=1_000_000))]
    group_commit_receipts: u64,
    /// Commits for the disk probe (default: about 3 s worth, estimated by a short probe).
    #[arg(long, value_parser = clap::value_parser!(u32).range(10..=100_000))]
    commits: Option<u32>,
    /// Where the temporary stores, configurations and logs go (default: the system
    /// temp directory). The disk probe runs in the same directory as the databases.
    #[arg(long)]
    tmp_dir: Option<PathBuf>,
    /// The server binary (default: `hookhost` next to this executable).
    #[arg(long)]
    server: Option<PathBuf>,
    /// Keep the temporary directory (configurations, logs and databases) afterwards.
    #[arg(long)]
    keep_tmp: bool,
    /// Also measure PostgreSQL at 64 connections, 1 KiB events: hookhost with one and
    /// with two processes sharing the database, and the reference. The URL names a
    /// database to connect to (`postgres://postgres@127.0.0.1:5432/postgres`); each
    /// phase creates a database of its own beside it (with `psql`) and drops it.
    #[arg(long)]
    postgres: Option<String>,
    /// Leave out the delivery phases (the second server and the downstream).
    #[arg(long)]
    skip_delivery: bool,
    /// Measure only the plugin's cost in process (the first phase), print it and stop.
    #[arg(long)]
    plugin_only: bool,
    /// Measure only a restart with this many uploaded tenant plugins (each pinned by
    /// an endpoint): how long until every endpoint serves again.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    tenant_plugins: Option<u32>,
    /// With `--tenant-plugins`: the restarted server's `[tenancy] resident_plugin_bytes`,
    /// in MiB (uploaded plugins' code it keeps loaded at most).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    resident_plugin_mib: u32,
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
    /// Send exactly `--send-count` new 1 KiB events to a receiver already listening at
    /// ADDR (`POST /webhooks/stripe`, signed with the bench's secret), print how they were
    /// answered and stop; nothing else is measured. For a receiver under a profiler:
    /// `bench/instructions.sh` divides its instruction count by these requests.
    #[arg(long, value_name = "ADDR", requires = "send_count")]
    send_to: Option<std::net::SocketAddr>,
    /// With `--send-to`: how many events.
    #[arg(long, requires = "send_to", value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    send_count: Option<u64>,
    /// With `--send-to`: over how many keep-alive connections, each with one request in
    /// flight.
    #[arg(long, default_value_t = 16, requires = "send_to",
          value_parser = clap::value_parser!(u16).range(1..=512))]
    send_connections: u16,
    /// Internal: serve the bare axum ceiling receiver on ADDR (the bench starts itself so).
    #[arg(long, hide = true, value_name = "ADDR",
          conflicts_with_all = ["serve_reference", "serve_reference_pg"])]
    serve_ceiling: Option<std::net::SocketAddr>,
    /// Internal: serve the hand-written reference receiver on ADDR, storing into `--db`.
    #[arg(
        long,
        hide = true,
        value_name = "ADDR",
        requires = "db",
        conflicts_with = "serve_reference_pg"
    )]
    serve_reference: Option<std::net::SocketAddr>,
    /// Internal: the reference receiver's SQLite file.
    #[arg(long, hide = true, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Internal: serve the reference receiver on ADDR, storing into PostgreSQL at `--pg-url`.
    #[arg(long, hide = true, value_name = "ADDR", requires = "pg_url")]
    serve_reference_pg: Option<std::net::SocketAddr>,
    /// Internal: the PostgreSQL reference receiver's database URL.
    #[arg(long, hide = true, value_name = "URL")]
    pg_url: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let outcome = match (
        args.serve_ceiling,
        args.serve_reference,
        args.db.clone(),
        args.serve_reference_pg,
        args.pg_url.clone(),
    ) {
        (Some(addr), ..) => receivers::serve_ceiling(addr),
        (None, Some(addr), Some(db), ..) => receivers::serve_reference(addr, db),
        (None, None, _, Some(addr), Some(url)) => receivers::serve_reference_pg(addr, url),
        _ => match (args.send_to, args.send_count) {
            (Some(addr), Some(count)) => send_to(addr, count, args.send_connections),
            _ => run(&args),
        },
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("hookhost-bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The load generator's runtime: one thread, so that on a small machine it does not
/// take the servers' cores.
fn load_generator_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")
}

/// `--send-to`: exactly `count` new events, every one of which must be accepted.
fn send_to(addr: std::net::SocketAddr, count: u64, connections: u16) -> anyhow::Result<()> {
    let runtime = load_generator_runtime()?;
    // From the clock in microseconds: a later `--send-to` starts past every number an
    // earlier one used, since none sends a million events a second.
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("the clock is before 1970")?
        .as_micros();
    event::number_from(u64::try_from(micros).context("the clock is past the year 586,000")?);
    let events = Payload::new_events(JUDGED_BODY, unix_now())?;
    let target = load::Target::new(addr, ENDPOINT);
    let sent = runtime.block_on(load::send_count(
        &target,
        connections.into(),
        count,
        &events,
        "accepted",
    ))?;
    println!(
        "{} of {count} accepted in {:.1} s over {connections} connections",
        sent.ok,
        sent.elapsed.as_secs_f64()
    );
    anyhow::ensure!(
        sent.ok == count,
        "{addr} did not accept every event: {:?}",
        sent.errors
    );
    Ok(())
}

fn run(args: &Args) -> anyhow::Result<()> {
    // Find the server first: without it there is nothing to measure end to end.
    let binary = load::server_binary(args.server.clone())?;
    let created = unix_now();
    // Every body size's events now: a size the event does not fit is refused before
    // anything runs.
    let bodies = args
        .bodies
        .iter()
        .map(|&size| Ok((size, Payload::new_events(size, created)?)))
        .collect::<anyhow::Result<Vec<_>>>()
        .context("--bodies")?;
    let base = args.tmp_dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("hookhost-bench-")
        .disable_cleanup(args.keep_tmp)
        .tempdir_in(&base)
        .with_context(|| format!("cannot create a temporary directory in {}", base.display()))?;
    let runtime = load_generator_runtime()?;

    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    println!(
        "hookhost-bench: Stripe invoice.paid events of {} (load matrix; {} elsewhere), {cpus} CPUs, \
         {} timed iterations, {} s per matrix cell, {} s per other load phase",
        args.bodies
            .iter()
            .map(|&b| size_label(b))
            .collect::<Vec<_>>()
            .join(" / "),
        size_label(JUDGED_BODY),
        args.requests,
        args.matrix_secs,
        args.duration_secs
    );
    println!("server binary: {}{}", binary.display(), age(&binary));
    println!(
        "temporary dir: {}{}",
        dir.path().display(),
        if args.keep_tmp { " (kept)" } else { "" }
    );
    let load_at_start = load_average();
    let ticks_at_start = machine::Ticks::now();
    println!("{}", machine::Speed::read().line());
    if let Some(n) = args.tenant_plugins {
        let resident = args.resident_plugin_mib as usize * 1024 * 1024;
        return runtime.block_on(tenants::restart(&binary, dir.path(), n as usize, resident));
    }

    // 1. In process, before any server exists, so nothing competes for the CPU.
    eprintln!("measuring plugin overhead…");
    let sample = event::StripeEvent::new(JUDGED_BODY, created)?.body(0);
    let catalog = Catalog::load(None, at_cap::limits()).context("loading the built-in plugins")?;
    let endpoint = stripe_endpoint(&catalog)?;
    let micro = micro_benchmarks(
        &catalog,
        &endpoint,
        args.requests,
        &event::text(sample)?,
        created,
    )?;
    eprintln!("measuring every built-in plugin on bodies at the body cap…");
    let at_cap = at_cap::measure(&catalog)?;
    drop(catalog);
    if args.plugin_only {
        print_stolen(ticks_at_start);
        let mut table = Table::default();
        micro.rows(&mut table);
        at_cap.rows(&mut table);
        table.print();
        return Ok(());
    }

    // 2. The disk, in the directory the servers' databases will live in.
    eprintln!("measuring the disk's single-commit rate…");
    let before = runtime.block_on(commit_rate(dir.path(), "before", args.commits))?;
    eprintln!("measuring the store alone (group commit, no HTTP, no plugin)…");
    let store_alone = runtime
        .block_on(group_commit::measure(
            dir.path(),
            &endpoint,
            JUDGED_BODY,
            created,
            JUDGED_CONCURRENCY.into(),
            args.group_commit_receipts / 10,
            args.group_commit_receipts,
        ))
        .context("the store alone")?;
    drop(endpoint);

    // 3. Start-up and memory at rest, every built-in plugin configured.
    let rest = runtime.block_on(at_rest(&binary, dir.path()))?;

    // 4. The load matrix and the duplicates, over loopback.
    let (cells, duplicates, paced_duplicates) =
        runtime.block_on(matrix_phases(args, &binary, dir.path(), &bodies, created))?;
    // The disk again, with the matrix's servers gone: the ratio takes the higher reading.
    eprintln!("measuring the disk's single-commit rate again…");
    let after = runtime.block_on(commit_rate(dir.path(), "after", args.commits))?;
    let commits = CommitRates { before, after };

    // 5. PostgreSQL: hookhost with one process, the reference, hookhost with two.
    let postgres = match &args.postgres {
        None => Vec::new(),
        Some(admin) => {
            runtime.block_on(postgres_phases(args, admin, &binary, dir.path(), created))?
        }
    };

    // 6. Delivery, with a server (and a store) of its own once the others have gone. If
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
    micro.rows(&mut table);
    at_cap.rows(&mut table);
    commits.rows(&mut table);
    store_alone_row(&mut table, &store_alone, commits.judged());
    rest.rows(&mut table);
    matrix_rows(&mut table, &cells, commits.judged());
    for (c, dup) in &duplicates {
        table.row(
            &format!("duplicates, concurrency {c} (closed loop, saturated)"),
            throughput(dup),
            String::new(),
            None,
        );
    }
    match &paced_duplicates {
        Some(paced) => {
            let p99 = paced.result.percentile(0.99);
            table.row(
                &format!(
                    "duplicates at half that rate ({:.0}/s), {JUDGED_CONCURRENCY} connections",
                    paced.rate
                ),
                format!(
                    "{}, {} sent > 10 ms late; from its send, p99 {}",
                    throughput(&paced.result),
                    paced.late,
                    ms(quantile(&paced.from_send, 0.99)),
                ),
                format!("p99 ≤ {DUPLICATE_P99_TARGET_MS} ms"),
                Some(p99.is_some_and(|p| p.as_secs_f64() * 1e3 <= DUPLICATE_P99_TARGET_MS)),
            );
        }
        None => table.row(
            "duplicates, paced",
            format!("not measured (add {JUDGED_CONCURRENCY} to --duplicate-concurrency)"),
            format!("p99 ≤ {DUPLICATE_P99_TARGET_MS} ms"),
            None,
        ),
    }
    postgres_rows(&mut table, &postgres);
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

    if !postgres.is_empty() {
        println!(
            "PostgreSQL pools: the reference {} connections, hookhost its default {} per process",
            receivers::REFERENCE_PG_CONNECTIONS,
            hookhost::config::DEFAULT_PG_MAX_CONNECTIONS
        );
    }
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
    print_stolen(ticks_at_start);
    println!(
        "\nload matrix ({} s per cell; CPU and peak RSS of the receiver's process; bench = the load generator, one thread):",
        args.matrix_secs
    );
    matrix::table(&cells).print();
    if cells.iter().any(|c| c.usage.generator_saturated()) {
        println!(
            "* the load generator was busy ≥ {:.0}% of the cell: its one thread, not the receiver, may have set the rate",
            usage::GENERATOR_SATURATED * 100.0
        );
    }
    println!();
    table.print();

    let phases = cells
        .iter()
        .map(|cell| (cell.name(), &cell.result))
        .chain(
            duplicates
                .iter()
                .map(|(c, r)| (format!("duplicates, concurrency {c}"), r)),
        )
        .chain(
            paced_duplicates
                .iter()
                .map(|p| (format!("duplicates paced at {:.0}/s", p.rate), &p.result)),
        )
        .chain(postgres.iter().map(|p| (p.label.clone(), &p.result)))
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
        println!("(the servers' logs say why: rerun with --keep-tmp to keep them)");
    }
    delivery_error.map_or(Ok(()), Err)
}

/// The matrix's judged cells (c=64, 1 KiB), the ratios to the commit rate and to the
/// reference, and hookhost's peak memory under load.
fn matrix_rows(table: &mut Table, cells: &[Cell], commit_rate: f64) {
    let (c, body) = (JUDGED_CONCURRENCY, JUDGED_BODY);
    let at = format!("c={c}, {}", size_label(body));
    let judged = |subject| matrix::find(cells, subject, c, body);
    for subject in [Subject::Hookhost, Subject::Reference, Subject::Ceiling] {
        if let Some(cell) = judged(subject) {
            table.row(
                &format!("{}, {at}", subject.label()),
                format!(
                    "{}{}",
                    throughput(&cell.result),
                    usage_note(cell.result.ok, &cell.usage)
                ),
                String::new(),
                None,
            );
        }
    }
    let missing = || {
        format!(
            "n/a (not measured: --matrix-concurrency needs {c}, --bodies {})",
            size_label(body)
        )
    };
    let hookhost = judged(Subject::Hookhost).map(|cell| cell.result.rate());
    let (value, pass) = match hookhost {
        Some(rate) => {
            let ratio = rate / commit_rate;
            (
                format!("{ratio:.2} (÷ the higher reading, {commit_rate:.0}/s)"),
                Some(ratio >= COMMIT_RATIO_TARGET),
            )
        }
        None => (missing(), None),
    };
    table.row(
        &format!("hookhost accepted/s ÷ single-commit rate, {at}"),
        value,
        format!("≥ {COMMIT_RATIO_TARGET:.1}"),
        pass,
    );
    let reference = judged(Subject::Reference).map(|cell| cell.result.rate());
    table_ratio(
        table,
        &format!("hookhost ÷ reference on SQLite, {at}"),
        hookhost,
        reference,
        &missing(),
    );
    let peak = cells
        .iter()
        .filter(|cell| cell.subject == Subject::Hookhost)
        .filter_map(|cell| cell.usage.peak_rss.map(|rss| (rss, cell)))
        .max_by_key(|(rss, _)| *rss);
    let (value, pass) = match peak {
        Some((rss, cell)) => (
            format!(
                "{} (c={}, {})",
                usage::mib(rss),
                cell.concurrency,
                size_label(cell.body)
            ),
            Some(mib(rss) <= RSS_UNDER_LOAD_TARGET_MIB),
        ),
        None => ("n/a (/proc unreadable)".into(), None),
    };
    table.row(
        "hookhost peak RSS under load (any matrix cell)",
        value,
        format!("≤ {RSS_UNDER_LOAD_TARGET_MIB} MiB"),
        pass,
    );
}

/// `hookhost ÷ reference`, judged against `REFERENCE_RATIO_TARGET`.
fn table_ratio(
    table: &mut Table,
    name: &str,
    hookhost: Option<f64>,
    reference: Option<f64>,
    missing: &str,
) {
    let (value, pass) = match (hookhost, reference) {
        (Some(hookhost), Some(reference)) if reference > 0.0 => {
            let ratio = hookhost / reference;
            (format!("{ratio:.2}"), Some(ratio >= REFERENCE_RATIO_TARGET))
        }
        (Some(_), Some(_)) => ("n/a (the reference accepted nothing)".into(), Some(false)),
        _ => (missing.into(), None),
    };
    table.row(name, value, format!("≥ {REFERENCE_RATIO_TARGET:.1}"), pass);
}

/// `, CPU 123.4 µs/req, peak RSS 40.1 MiB`, as far as measured.
fn usage_note(requests: u64, usage: &Usage) -> String {
    let mut note = String::new();
    if let Some(cpu) = usage.cpu_per_request(requests) {
        note.push_str(&format!(", CPU {}/req", usage::micros(cpu)));
    }
    if let Some(rss) = usage.peak_rss {
        note.push_str(&format!(", peak RSS {}", usage::mib(rss)));
    }
    if usage.generator_saturated() {
        note.push_str(", bench saturated");
    }
    note
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Start-up and resident memory at rest with every built-in plugin configured.
struct AtRest {
    /// On an empty compiled-plugin cache: every plugin compiled.
    first: Duration,
    /// Again, the cache filled by the first start.
    second: Duration,
    /// After the first start and `AT_REST_IDLE`: every first start after an install or
    /// an upgrade.
    first_rss: Option<u64>,
    /// After the second start and `AT_REST_IDLE`.
    rss: Option<u64>,
    configured: usize,
    /// Built-in plugins the configuration has no endpoint for.
    missing: Vec<&'static str>,
}

impl AtRest {
    fn rows(&self, table: &mut Table) {
        let all = format!(
            "{} endpoints, {} plugins",
            self.configured,
            BUILTIN_NAMES.len()
        );
        let missing = if self.missing.is_empty() {
            String::new()
        } else {
            format!(", no endpoint for {}", self.missing.join(", "))
        };
        table.row(
            "start-up, first start (compiles every plugin)",
            format!("{:.0} ms ({all})", self.first.as_secs_f64() * 1e3),
            String::new(),
            None,
        );
        let second = self.second.as_secs_f64() * 1e3;
        table.row(
            "start-up, all built-in plugins (compile cache warm)",
            format!("{second:.0} ms{missing}"),
            format!("≤ {STARTUP_TARGET_MS:.0} ms"),
            Some(second <= STARTUP_TARGET_MS && self.missing.is_empty()),
        );
        for (start, rss) in [
            ("first start", self.first_rss),
            ("compile cache warm", self.rss),
        ] {
            table.row(
                &format!(
                    "RSS at rest, all built-in plugins ({start}, {} s idle)",
                    AT_REST_IDLE.as_secs()
                ),
                rss.map_or_else(|| "n/a (/proc unreadable)".into(), usage::mib) + &missing,
                format!("≤ {RSS_AT_REST_TARGET_MIB:.0} MiB"),
                rss.map(|rss| mib(rss) <= RSS_AT_REST_TARGET_MIB && self.missing.is_empty()),
            );
        }
    }
}

/// `fixtures/demo.toml` (one endpoint for every built-in plugin) listening on a port
/// the server chooses, its store beside the configuration: the file's own top-level
/// `listen` and `store` (the lines before its first table) give way to these. Its
/// `public_url` stays: only URL-signing schemes read it, and no request is sent to
/// this configuration's endpoints.
fn all_plugins_config() -> String {
    let mut text = format!(
        "listen = \"{}\"\nstore = \"hookhost.db\"\n",
        load::LOOPBACK_ANY_PORT
    );
    let mut top_level = true;
    for line in DEMO_CONFIG.lines() {
        let key = line.split('=').next().unwrap_or_default().trim();
        top_level &= !line.trim_start().starts_with('[');
        if !(top_level && ["listen", "store"].contains(&key)) {
            text.push_str(line);
            text.push('\n');
        }
    }
    text
}

/// How many endpoints the all-plugins configuration has, and the built-in plugins it
/// has none for, as hookhost's own parser reads it.
fn demo_plugins(dir: &Path) -> anyhow::Result<(usize, Vec<&'static str>)> {
    let text = all_plugins_config();
    let config = hookhost::config::Config::parse(&dir.join("hookhost.toml"), &text, &|_| None)
        .context("fixtures/demo.toml, as the bench rewrites it")?;
    let missing = BUILTIN_NAMES
        .iter()
        .copied()
        .filter(|name| !config.endpoints.iter().any(|e| e.plugin == *name))
        .collect();
    Ok((config.endpoints.len(), missing))
}

/// Two starts on an empty compiled-plugin cache of their own, each server's memory
/// read after `AT_REST_IDLE`.
async fn at_rest(binary: &Path, dir: &Path) -> anyhow::Result<AtRest> {
    let dir = dir.join("at-rest");
    std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let cache = dir.join("compile-cache");
    let (configured, missing) = demo_plugins(&dir)?;
    eprintln!("start-up with every built-in plugin: first start (empty compile cache)…");
    let server =
        load::Server::start_config(binary, &dir, Some(&cache), &all_plugins_config()).await?;
    let first = server.started_in;
    tokio::time::sleep(AT_REST_IDLE).await;
    let first_rss = usage::rss_bytes(server.pid()).ok();
    drop(server); // killed
    eprintln!("start-up with every built-in plugin: second start, then idle…");
    let server =
        load::Server::start_config(binary, &dir, Some(&cache), &all_plugins_config()).await?;
    let second = server.started_in;
    tokio::time::sleep(AT_REST_IDLE).await;
    let rss = usage::rss_bytes(server.pid()).ok();
    drop(server);
    Ok(AtRest {
        first,
        second,
        first_rss,
        rss,
        configured,
        missing,
    })
}

/// hookhost (SQLite), the reference and the ceiling started side by side, the load
/// matrix over them, then duplicates on hookhost.
async fn matrix_phases(
    args: &Args,
    binary: &Path,
    dir: &Path,
    bodies: &[(usize, Payload)],
    created: i64,
) -> anyhow::Result<(Vec<Cell>, Vec<(u16, PhaseResult)>, Option<Paced>)> {
    let dir = dir.join("matrix");
    std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    eprintln!(
        "starting {} and the comparison receivers…",
        binary.display()
    );
    // hookhost's default body cap is exactly 1 MiB; the bench's largest body may be 2.
    let limits = format!("\n[limits]\nmax_body_bytes = {MAX_BODY_BYTES}\n");
    let server = load::Server::start(binary, &dir, SECRET, ENDPOINT, &limits).await?;
    let reference = receivers::Receiver::start(&receivers::Kind::Reference, &dir).await?;
    let ceiling = receivers::Receiver::start(&receivers::Kind::Ceiling, &dir).await?;
    let contestant = |subject, addr, pid| matrix::Contestant {
        subject,
        target: load::Target::new(addr, ENDPOINT),
        pid,
    };
    let contestants = [
        contestant(Subject::Hookhost, server.addr, server.pid()),
        contestant(Subject::Reference, reference.addr, reference.pid()),
        contestant(Subject::Ceiling, ceiling.addr, ceiling.pid()),
    ];
    let cells = matrix::run(
        &contestants,
        &args.matrix_concurrency,
        bodies,
        Duration::from_secs(args.matrix_secs),
    )
    .await?;
    drop((reference, ceiling));

    let target = &contestants[0].target;
    let same = Payload::same_event(JUDGED_BODY, created, unix_now())?;
    target.expect_one(&same, "accepted").await?;
    let mut duplicates = Vec::new();
    for &c in &args.duplicate_concurrency {
        eprintln!(
            "hookhost: one event repeated at concurrency {c} for {} s…",
            args.duration_secs
        );
        duplicates.push((
            c,
            load::drive(
                target,
                c.into(),
                Duration::from_secs(args.duration_secs),
                &same,
                "duplicate",
            )
            .await?,
        ));
    }
    // Closed-loop latency at saturation is connections ÷ rate (Little's law), whatever
    // the server: the target is judged open loop, at half that saturated rate, spread
    // over the same 64 connections.
    let paced = match duplicates.iter().find(|(c, _)| *c == JUDGED_CONCURRENCY) {
        Some((_, saturated)) if saturated.rate() >= 2.0 => {
            let rate = saturated.rate() / 2.0;
            eprintln!(
                "hookhost: one event repeated at {rate:.0}/s over {JUDGED_CONCURRENCY} connections for {} s…",
                args.duration_secs
            );
            Some(
                load::drive_paced(
                    target,
                    JUDGED_CONCURRENCY.into(),
                    rate,
                    Duration::from_secs(args.duration_secs),
                    &same,
                    "duplicate",
                )
                .await?,
            )
        }
        _ => None,
    };
    drop(server); // killed here, before the temporary directory goes
    Ok((cells, duplicates, paced))
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
            "  due → downstream arrival",
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
    let events = Payload::new_events(JUDGED_BODY, created)?;
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

/// The in-process measurements: the plugin call and its parts, the same parsing
/// natively, and the host's whole verification.
struct Micro {
    plugin: Samples,
    session: Samples,
    plan: Samples,
    describe: Samples,
    dropped: Samples,
    native: Samples,
    judge: Samples,
}

impl Micro {
    fn rows(&self, table: &mut Table) {
        let stat =
            |s: &Samples| format!("median {:.1} µs, p99 {:.1} µs", s.median_us(), s.p99_us());
        table.row(
            "plugin: fresh instance + plan + describe (wasm)",
            stat(&self.plugin),
            String::new(),
            None,
        );
        table.row(
            "  of which session (fresh Store + instance)",
            stat(&self.session),
            String::new(),
            None,
        );
        for (what, samples) in [
            ("  of which plan-verification", &self.plan),
            ("  of which describe-event", &self.describe),
            (
                "  of which dropping the instance (memory reset)",
                &self.dropped,
            ),
        ] {
            table.row(what, stat(samples), String::new(), None);
        }
        table.row(
            "native plan + describe (stripe rlib)",
            stat(&self.native),
            String::new(),
            None,
        );
        let isolation = self.plugin.median_us() - self.native.median_us();
        table.row(
            "plugin isolation: wasm − native, medians",
            format!("{isolation:.1} µs"),
            format!("≤ {ISOLATION_TARGET_US:.0} µs"),
            Some(isolation <= ISOLATION_TARGET_US),
        );
        table.row(
            "host verify::judge (plugin calls + HMAC)",
            stat(&self.judge),
            String::new(),
            None,
        );
    }
}

/// The bench's Stripe endpoint, as `serve` builds it from its configuration.
fn stripe_endpoint(catalog: &Catalog) -> anyhow::Result<Endpoint> {
    Endpoint::build(
        &EndpointConfig {
            id: ENDPOINT.into(),
            plugin: "stripe".into(),
            secrets: vec![Secret::new(SECRET)],
            tolerance: None,
            plugin_config: json!({}),
            ..Default::default()
        },
        catalog,
    )
    .map_err(|reason| anyhow!("{reason}"))
}

/// Where the in-process phases say a request came to.
fn request_url() -> String {
    format!("http://127.0.0.1:8080/webhooks/{ENDPOINT}")
}

/// A Stripe delivery's headers for `body`, as the plugin sees them (lower-case names).
fn stripe_headers(body: &[u8], signature: String) -> Vec<(String, Vec<u8>)> {
    [
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
    .collect()
}

fn micro_benchmarks(
    catalog: &Catalog,
    endpoint: &Endpoint,
    iterations: u32,
    body: &str,
    created: i64,
) -> anyhow::Result<Micro> {
    let warmup = (iterations / 10).max(100);
    let plugin = catalog
        .get("stripe")
        .context("no built-in `stripe` plugin in this build")?;
    let signature = event::signature(created, body.as_bytes())?;
    let url = request_url();
    let headers = stripe_headers(body.as_bytes(), signature);
    let source = MessageSource {
        method: "POST",
        url: &url,
        headers: &headers,
        body: body.as_bytes(),
    };
    let rejected = |what: &str, r: hookhost_plugin_sdk::Rejection| {
        anyhow!("the stripe plugin rejected the bench's event in {what}: {r:?}")
    };

    // The same request, as the `stripe` crate parses it natively.
    let mut request = RequestBuilder::post(&url);
    for (name, value) in &headers {
        request = request.header(name, value);
    }
    let request = request.body(body).build();

    // One call of each per round, in turn, not one loop after another: this machine's
    // speed swings by half from one second to the next (docs/performance.md, sections
    // 30 and 42), and a swing between two loops would land in the difference of their
    // medians.
    let mut plugin_ns = Vec::with_capacity(iterations as usize);
    let mut session_ns = Vec::with_capacity(iterations as usize);
    let mut plan_ns = Vec::with_capacity(iterations as usize);
    let mut describe_ns = Vec::with_capacity(iterations as usize);
    let mut dropped_ns = Vec::with_capacity(iterations as usize);
    let mut native_ns = Vec::with_capacity(iterations as usize);
    let mut judge_ns = Vec::with_capacity(iterations as usize);
    for i in 0..warmup + iterations {
        // The plugin: what every request pays for the sandbox.
        let started = Instant::now();
        let mut session = plugin.session("{}", &source)?;
        let instantiated = Instant::now();
        let plan = session
            .plan_verification()?
            .map_err(|r| rejected("plan-verification", r))?;
        let planned = Instant::now();
        let event = session
            .describe_event()?
            .map_err(|r| rejected("describe-event", r))?;
        let described = Instant::now();
        drop(session);
        let done = Instant::now();
        black_box((plan, event));

        // The same parsing, natively.
        let native_started = Instant::now();
        let plan = stripe::Stripe::plan_verification(&request)
            .map_err(|r| rejected("plan (native)", r))?;
        let event = stripe::Stripe::describe_event(&request)
            .map_err(|r| rejected("describe (native)", r))?;
        let native_done = Instant::now();
        black_box((plan, event));

        // The host's whole verification, as the ingest route calls it.
        let judge_started = Instant::now();
        let mut trail = hookhost::verify::Trail::default();
        let verified = hookhost::verify::judge(endpoint, &source, created, &mut trail)
            .context("verify::judge refused the bench's own event")?;
        let judge_done = Instant::now();
        black_box(verified);

        if i >= warmup {
            plugin_ns.push(nanos(done - started));
            session_ns.push(nanos(instantiated - started));
            plan_ns.push(nanos(planned - instantiated));
            describe_ns.push(nanos(described - planned));
            dropped_ns.push(nanos(done - described));
            native_ns.push(nanos(native_done - native_started));
            judge_ns.push(nanos(judge_done - judge_started));
        }
    }

    Ok(Micro {
        plugin: Samples::new(plugin_ns),
        session: Samples::new(session_ns),
        plan: Samples::new(plan_ns),
        describe: Samples::new(describe_ns),
        dropped: Samples::new(dropped_ns),
        native: Samples::new(native_ns),
        judge: Samples::new(judge_ns),
    })
}

/// One PostgreSQL phase: hookhost with some processes, or the reference.
struct PgPhase {
    label: String,
    /// hookhost's process count; `None` for the reference.
    processes: Option<usize>,
    result: PhaseResult,
    usage: Usage,
}

/// At 64 connections, 1 KiB events, each in a database of its own (created beside
/// `admin`, dropped afterwards): hookhost with one process, the reference, then
/// hookhost with two processes sharing the database. The reference runs right after
/// the hookhost phase it is compared with.
async fn postgres_phases(
    args: &Args,
    admin: &str,
    binary: &Path,
    dir: &Path,
    created: i64,
) -> anyhow::Result<Vec<PgPhase>> {
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
    let mut phases = Vec::new();
    for processes in [Some(1usize), None, Some(2)] {
        let (name, label) = match processes {
            Some(n) => (
                format!("hookhost_{n}"),
                format!(
                    "hookhost into PostgreSQL, {n} process{}",
                    if n == 1 { "" } else { "es" }
                ),
            ),
            None => ("reference".into(), "reference (PostgreSQL)".into()),
        };
        let database = format!("hookhost_bench_{}_{name}", std::process::id());
        psql(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))?;
        psql(&format!("CREATE DATABASE {database}"))?;
        let url = format!("{base}/{database}");
        let measured = async {
            eprintln!("{label}: starting…");
            let sub = dir.join(format!("postgres-{name}"));
            std::fs::create_dir_all(&sub)?;
            let mut servers = Vec::new();
            let mut reference = None;
            // (address, pid) of each process.
            let processes: Vec<(std::net::SocketAddr, u32)> = match processes {
                Some(n) => {
                    // One after the other: the first applies the migrations.
                    for p in 0..n {
                        let sub = sub.join(p.to_string());
                        std::fs::create_dir_all(&sub)?;
                        servers.push(
                            load::Server::start_with_store(
                                binary, &sub, SECRET, ENDPOINT, &url, "",
                            )
                            .await?,
                        );
                    }
                    servers.iter().map(|s| (s.addr, s.pid())).collect()
                }
                None => {
                    let kind = receivers::Kind::ReferencePg(url.clone());
                    let started = reference.insert(receivers::Receiver::start(&kind, &sub).await?);
                    vec![(started.addr, started.pid())]
                }
            };
            let targets: Vec<load::Target> = processes
                .iter()
                .map(|&(addr, _)| load::Target::new(addr, ENDPOINT))
                .collect();
            let pids: Vec<u32> = processes.iter().map(|&(_, pid)| pid).collect();
            let new_events = Payload::new_events(JUDGED_BODY, created)?;
            for target in &targets {
                target.expect_one(&new_events, "accepted").await?;
            }
            load::drive_spread(
                &targets,
                16,
                Duration::from_secs(1),
                &new_events,
                "accepted",
            )
            .await?;
            eprintln!(
                "{label}: new events at concurrency {JUDGED_CONCURRENCY} for {} s…",
                args.duration_secs
            );
            let measured = usage::measure(
                &pids,
                load::drive_spread(
                    &targets,
                    JUDGED_CONCURRENCY.into(),
                    duration,
                    &new_events,
                    "accepted",
                ),
            )
            .await?;
            drop((servers, reference)); // gone before the database is dropped
            anyhow::Ok(measured)
        }
        .await;
        psql(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))?;
        let (result, usage) = measured?;
        phases.push(PgPhase {
            label,
            processes,
            result,
            usage,
        });
    }
    Ok(phases)
}

/// Each PostgreSQL phase, and hookhost (one process) ÷ the reference.
fn postgres_rows(table: &mut Table, phases: &[PgPhase]) {
    if phases.is_empty() {
        return;
    }
    let at = format!("c={JUDGED_CONCURRENCY}, {}", size_label(JUDGED_BODY));
    for phase in phases {
        table.row(
            &format!("{}, {at}", phase.label),
            format!(
                "{}{}",
                throughput(&phase.result),
                usage_note(phase.result.ok, &phase.usage)
            ),
            String::new(),
            None,
        );
    }
    let rate = |processes| {
        phases
            .iter()
            .find(|p| p.processes == processes)
            .map(|p| p.result.rate())
    };
    table_ratio(
        table,
        &format!("hookhost ÷ reference on PostgreSQL, c={JUDGED_CONCURRENCY}"),
        rate(Some(1)),
        rate(None),
        "n/a",
    );
}

/// One reading of the disk's single-commit rate: commits per second, and how many.
struct CommitRate {
    rate: f64,
    commits: u32,
}

/// The disk's single-commit rate before and after the load matrix.
struct CommitRates {
    before: CommitRate,
    after: CommitRate,
}

impl CommitRates {
    /// The yardstick for the ratio: the higher reading, so that a moment when the disk
    /// was slow cannot make hookhost look faster than it is.
    fn judged(&self) -> f64 {
        self.before.rate.max(self.after.rate)
    }

    fn rows(&self, table: &mut Table) {
        for (when, reading) in [("before", &self.before), ("after", &self.after)] {
            table.row(
                &format!("disk single-commit rate (SQLite WAL, FULL), {when} the matrix"),
                format!(
                    "{:.0} commits/s ({} commits)",
                    reading.rate, reading.commits
                ),
                String::new(),
                None,
            );
        }
    }
}

/// The store alone beside the yardstick: what group commit gives without the rest of
/// a request. Not a target of its own; the ratio target is the whole path's.
fn store_alone_row(table: &mut Table, measured: &group_commit::GroupCommit, commit_rate: f64) {
    table.row(
        &format!(
            "the store alone: receipts/s ÷ single-commit rate, {} tasks, {} (no HTTP, no plugin)",
            measured.tasks,
            size_label(JUDGED_BODY)
        ),
        format!(
            "{:.2} ({:.0}/s ÷ {commit_rate:.0}/s; {} receipts, {} CPU per receipt in this process)",
            measured.rate() / commit_rate,
            measured.rate(),
            measured.receipts,
            usage::micros(measured.cpu_per_receipt())
        ),
        String::new(),
        None,
    );
}

/// Single commits per second in a new file in `dir` named for `when`: a short probe
/// sizes the run to about 3 s.
async fn commit_rate(dir: &Path, when: &str, commits: Option<u32>) -> anyhow::Result<CommitRate> {
    let commits = match commits {
        Some(n) => n,
        None => {
            let probe =
                hookhost::store::single_commit_rate(&dir.join(format!("probe-{when}.db")), 20)
                    .await
                    .context("disk probe")?;
            (probe * 3.0).clamp(30.0, 10_000.0) as u32
        }
    };
    let rate =
        hookhost::store::single_commit_rate(&dir.join(format!("commit-rate-{when}.db")), commits)
            .await
            .context("disk single-commit rate")?;
    Ok(CommitRate { rate, commits })
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

/// The hypervisor's share of the CPU since `start`, where `/proc/stat` tells it.
fn print_stolen(start: Option<machine::Ticks>) {
    if let (Some(start), Some(now)) = (start, machine::Ticks::now()) {
        println!("{}", now.stolen_since(&start));
    }
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

/// Rows of cells, printed as aligned columns; by default the targets table
/// (measurement, result, target, pass/fail).
struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Columns from this one on are right-aligned (figures).
    right_from: usize,
}

impl Default for Table {
    fn default() -> Table {
        Table::new(&["measurement", "result", "target", ""])
    }
}

impl Table {
    fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            right_from: usize::MAX,
        }
    }

    /// Right-align the columns from `column` on.
    fn right_aligned_from(mut self, column: usize) -> Table {
        self.right_from = column;
        self
    }

    /// A row of the targets table; `pass` is the mark, if there is a target.
    fn row(&mut self, name: &str, value: String, target: String, pass: Option<bool>) {
        let mark = match pass {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "",
        };
        self.cells(vec![name.to_string(), value, target, mark.to_string()]);
    }

    fn cells(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn print(&self) {
        let mut widths = vec![0usize; self.header.len()];
        for row in std::iter::once(&self.header).chain(&self.rows) {
            for (i, cell) in row.iter().enumerate() {
                if i >= widths.len() {
                    widths.push(0);
                }
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let line = |row: &[String]| {
            let cells: Vec<String> = widths
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let cell = row.get(i).map_or("", String::as_str);
                    let pad = " ".repeat(w - cell.chars().count());
                    if i >= self.right_from {
                        format!("{pad}{cell}")
                    } else {
                        format!("{cell}{pad}")
                    }
                })
                .collect();
            println!("{}", cells.join(" | ").trim_end());
        };
        line(&self.header);
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        println!("{}", rule.join("-|-"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_all_plugins_configuration_has_every_built_in_and_parses() -> anyhow::Result<()> {
        let (configured, missing) = demo_plugins(Path::new("/bench"))?;
        assert!(missing.is_empty(), "no endpoint for {missing:?}");
        assert!(configured >= BUILTIN_NAMES.len());
        let text = all_plugins_config();
        let config =
            hookhost::config::Config::parse(Path::new("/bench/hookhost.toml"), &text, &|_| None)?;
        assert_eq!(config.listen.to_string(), load::LOOPBACK_ANY_PORT);
        assert_eq!(config.public_url, "http://127.0.0.1:8080", "the demo's own");
        Ok(())
    }

    /// Each round times the plugin call (and each of its parts), the native parse and
    /// `verify::judge` once, on the built-in Stripe plugin and the bench's own event; the
    /// isolation row is the difference of the first two medians.
    #[test]
    fn the_plugin_phase_times_each_measurement_once_a_round() -> anyhow::Result<()> {
        const ROUNDS: u32 = 40;
        let created = unix_now();
        let catalog = Catalog::load(None, at_cap::limits())?;
        let endpoint = stripe_endpoint(&catalog)?;
        let body = event::text(event::StripeEvent::new(JUDGED_BODY, created)?.body(0))?;
        let micro = micro_benchmarks(&catalog, &endpoint, ROUNDS, &body, created)?;
        let series = [
            &micro.plugin,
            &micro.session,
            &micro.plan,
            &micro.describe,
            &micro.dropped,
            &micro.native,
            &micro.judge,
        ];
        for samples in series {
            assert_eq!(samples.0.len(), ROUNDS as usize);
            assert!(samples.0.iter().all(|&ns| ns > 0));
        }
        // The call's parts are timed inside it: the slowest part is at most the slowest call.
        for part in [&micro.session, &micro.plan, &micro.describe, &micro.dropped] {
            assert!(part.0.last() <= micro.plugin.0.last());
        }
        let mut table = Table::default();
        micro.rows(&mut table);
        let isolation = table
            .rows
            .iter()
            .find(|row| row[0].starts_with("plugin isolation"))
            .context("no isolation row")?;
        let expected = micro.plugin.median_us() - micro.native.median_us();
        assert_eq!(isolation[1], format!("{expected:.1} µs"));
        Ok(())
    }

    /// Each reading commits into a file of its own, and the ratio's yardstick is the
    /// higher reading, whichever came first.
    #[tokio::test]
    async fn the_commit_rate_is_read_twice_and_judged_by_the_higher() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let before = commit_rate(dir.path(), "before", Some(10)).await?;
        let after = commit_rate(dir.path(), "after", Some(12)).await?;
        for when in ["before", "after"] {
            assert!(dir.path().join(format!("commit-rate-{when}.db")).exists());
        }
        assert_eq!((before.commits, after.commits), (10, 12));
        let reading = |rate| CommitRate { rate, commits: 10 };
        for (first, second) in [(900.0, 4000.0), (4000.0, 900.0)] {
            let rates = CommitRates {
                before: reading(first),
                after: reading(second),
            };
            assert_eq!(rates.judged(), 4000.0);
            let mut table = Table::default();
            rates.rows(&mut table);
            assert_eq!(table.rows.len(), 2);
            assert!(table.rows[0][0].ends_with("before the matrix"));
            assert!(table.rows[0][1].starts_with(&format!("{first:.0} commits/s")));
            assert!(table.rows[1][0].ends_with("after the matrix"));
        }
        Ok(())
    }
}
