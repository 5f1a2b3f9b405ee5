//! The command line: `serve`, the plugin tools and the operator's commands. Every command
//! and option a user can see says in `--help` what it is (a test walks them all).

use crate::config::{Config, Secrets, StoreConfig};
use crate::plugins::{Catalog, Origin, Plugin, PluginLimits};
use crate::vectors;
use clap::{Parser, Subcommand};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// `--config`'s help, on every command that reads the configuration.
const CONFIG: &str = "The configuration file (TOML)";
/// `--endpoint`'s help where it names one endpoint.
const ENDPOINT: &str = "The endpoint's id, as in the configuration";
/// `--json`'s help on the listing commands.
const JSON_LINES: &str = "One JSON object per line instead of text";

#[derive(Parser, Debug)]
#[command(name = "hookhost", version, about = "A self-hosted webhook receiver")]
struct Cli {
    /// Log as JSON lines instead of text.
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Receive webhooks as the configuration file describes.
    Serve {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
    },
    /// Apply the store's migrations (what `serve` does at start) and exit.
    Migrate {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
    },
    /// Work with provider plugins.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
    /// List, show, replay and discard stored events.
    Events {
        #[command(subcommand)]
        command: EventsCommand,
    },
    /// Dead letters and quarantined events.
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// Pause or resume an endpoint's delivery (events keep being accepted).
    Endpoint {
        #[command(subcommand)]
        command: EndpointCommand,
    },
    /// Judge an endpoint's last stored requests with a candidate plugin beside its
    /// current one, and report what would change (nothing is stored).
    Shadow {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
        #[arg(long, help = ENDPOINT)]
        endpoint: String,
        /// A plugin name, a `.wasm` file, or (a tenant's endpoint) `sha256:<hex>`.
        #[arg(long)]
        plugin: String,
        /// How many of the last stored requests (at most 1,000).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(..=i64::from(crate::shadow::MAX_LAST)))]
        last: u32,
    },
    /// Requests refused after their body was read: list, show, verify again, re-ingest.
    Forensics {
        #[command(subcommand)]
        command: ForensicsCommand,
    },
    /// Find the events the provider sent that never arrived, from its API, and repair
    /// them: `reconcile --endpoint ID --since 24h [--dry-run]`; `reconcile runs`,
    /// `reconcile show RUN`.
    #[command(args_conflicts_with_subcommands = true)]
    Reconcile {
        #[command(subcommand)]
        command: Option<ReconcileCommand>,
        #[command(flatten)]
        run: ReconcileArgs,
    },
    /// Print an endpoint's consumer contract as Markdown, from the configuration as it
    /// is now: scheme, secrets, window, idempotency, status codes, ordering, retries.
    Spec {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
        #[arg(long, help = ENDPOINT)]
        endpoint: String,
    },
    /// Compile a component (a built-in, or the one on stdin) to stdout: what every
    /// other command runs to compile a plugin outside its own process.
    #[command(name = crate::plugins::compiler::COMMAND, hide = true)]
    CompilePlugin {
        /// The engine's compatibility key the compiled code must load in.
        #[arg(long)]
        engine: String,
        /// A built-in plugin's SHA-256 (hex), compiled from this executable's own copy.
        #[arg(long)]
        builtin: Option<String>,
    },
}

#[derive(clap::Args, Debug)]
struct ReconcileArgs {
    /// The configuration file (TOML); needed to reconcile.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// The endpoint whose provider is asked; needed to reconcile.
    #[arg(long)]
    endpoint: Option<String>,
    /// How far back: `24h`, `30m`, `7d`, `90s`, or a unix timestamp (default: the
    /// endpoint's `lookback_seconds`).
    #[arg(long)]
    since: Option<String>,
    /// Find and count the missing events; repair nothing.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Subcommand, Debug)]
enum ReconcileCommand {
    /// List runs, newest first.
    Runs {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
        /// Only this endpoint's runs.
        #[arg(long)]
        endpoint: Option<String>,
        /// At most this many runs.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// One run and the events it repaired.
    Show {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
        /// The run's id, as `reconcile runs` lists it.
        run: String,
    },
}

#[derive(Subcommand, Debug)]
enum EventsCommand {
    /// One line per event (or JSON lines).
    List {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
        #[command(flatten)]
        filter: crate::store::Filter,
        #[arg(long, help = JSON_LINES)]
        json: bool,
    },
    /// One event with every delivery attempt, as JSON.
    Show {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
        #[arg(help = ENDPOINT)]
        endpoint: String,
        /// The event's id, as its provider gave it.
        event_id: String,
    },
    /// Deliver dead, quarantined, delivered or discarded events again, under their
    /// original event id.
    Replay {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
        #[command(flatten)]
        filter: crate::store::Filter,
        /// Map each event again with the endpoint's current plugin first.
        #[arg(long)]
        remap: bool,
    },
    /// Take one event out of delivery, with a reason; its evidence stays.
    Discard {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
        #[arg(help = ENDPOINT)]
        endpoint: String,
        /// The event's id, as its provider gave it.
        event_id: String,
        /// Why, kept with the event.
        #[arg(long)]
        reason: String,
    },
}

#[derive(Subcommand, Debug)]
enum ForensicsCommand {
    /// One line per kept request, newest first (or JSON lines).
    List {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
        #[command(flatten)]
        filter: crate::store::ForensicFilter,
        #[arg(long, help = JSON_LINES)]
        json: bool,
    },
    /// One kept request, as JSON: detail, redacted headers, body.
    Show {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
        /// The kept request's id, as `forensics list` lists it.
        id: i64,
    },
    /// Verify a kept request again with the current secrets and plugin, at its
    /// original arrival time; nothing is stored.
    Verify {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
        /// The kept request's id, as `forensics list` lists it.
        id: i64,
    },
    /// Ingest a kept request that now passes, under the event id its plugin gives it.
    Reingest {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
        /// The kept request's id, as `forensics list` lists it.
        id: i64,
    },
}

#[derive(Subcommand, Debug)]
enum DlqCommand {
    /// Dead and quarantined events.
    List {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
        /// Only this endpoint's events.
        #[arg(long)]
        endpoint: Option<String>,
        #[arg(long, help = JSON_LINES)]
        json: bool,
    },
    /// Replay every dead and quarantined event (of one endpoint).
    Replay {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
        /// Only this endpoint's events.
        #[arg(long)]
        endpoint: Option<String>,
        /// Map each event again with the endpoint's current plugin first.
        #[arg(long)]
        remap: bool,
    },
}

#[derive(Subcommand, Debug)]
enum EndpointCommand {
    /// Stop delivering an endpoint's events; it keeps accepting and storing them.
    Pause {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
        #[arg(help = ENDPOINT)]
        endpoint: String,
    },
    /// Deliver an endpoint's events again, those accepted while it was paused among
    /// them.
    Resume {
        #[arg(long, short, help = CONFIG)]
        config: PathBuf,
        #[arg(help = ENDPOINT)]
        endpoint: String,
    },
}

#[derive(Subcommand, Debug)]
enum PluginCommand {
    /// Judge signature test vectors offline (no server, no database).
    Test {
        /// Vector files (JSON, see docs/vectors.md).
        #[arg(long = "vectors", required = true, num_args = 1..)]
        vectors: Vec<PathBuf>,
        /// One JSON object per vector instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show what a plugin declares: a built-in name or a `.wasm` file.
    Inspect {
        /// A built-in plugin's name or a `.wasm` file.
        plugin: String,
    },
    /// List the built-in plugins and the drop-ins of a directory.
    List {
        /// A directory of drop-in `.wasm` plugins to list beside the built-ins.
        #[arg(long)]
        plugins_dir: Option<PathBuf>,
    },
}

/// `println!` that returns an error where it would panic: when stdout is gone (a
/// closed pipe, as in `hookhost events list | head -3`); [`main`] then ends quietly.
macro_rules! out {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout().lock(), $($arg)*)?
    };
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_json);
    crate::plugins::compiler::compile_in_child_processes();
    if let Err(error) = crate::plugins::cache_bytes() {
        eprintln!("hookhost: {error}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::CompilePlugin { engine, builtin } => {
            return crate::plugins::compiler::child_main(&engine, builtin.as_deref());
        }
        Command::Serve { config } => serve(config),
        Command::Migrate { config } => migrate(config),
        Command::Plugin {
            command: PluginCommand::Test { vectors, json },
        } => {
            return vectors::main(&vectors, json);
        }
        Command::Plugin {
            command: PluginCommand::Inspect { plugin },
        } => inspect(&plugin),
        Command::Plugin {
            command: PluginCommand::List { plugins_dir },
        } => list(plugins_dir),
        Command::Events { command } => operate(Operation::Events(command)),
        Command::Dlq { command } => operate(Operation::Dlq(command)),
        Command::Endpoint { command } => operate(Operation::Endpoint(command)),
        Command::Spec { config, endpoint } => spec(config, &endpoint),
        Command::Reconcile { command, run } => reconcile(command, run),
        Command::Forensics { command } => forensics(command),
        Command::Shadow {
            config,
            endpoint,
            plugin,
            last,
        } => shadow(config, &endpoint, &plugin, last),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader has what it wanted (`| head`): nothing more is to be said.
        Err(error) if closed_stdout(&error) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("hookhost: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Whether `error` is a write to a stdout whose reader has gone.
fn closed_stdout(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

/// The log on stderr, filtered by `RUST_LOG`; `info` when it is unset, and when it does
/// not parse, which is said on stderr first.
fn init_tracing(json: bool) {
    use tracing_subscriber::EnvFilter;
    const DEFAULT: &str = "info";
    let filter = match std::env::var_os("RUST_LOG") {
        None => EnvFilter::new(DEFAULT),
        Some(directives) => EnvFilter::try_from_default_env().unwrap_or_else(|error| {
            eprintln!("hookhost: RUST_LOG={directives:?}: {error}; logging at {DEFAULT}");
            EnvFilter::new(DEFAULT)
        }),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A closed stderr must not take the server down: reporting the failed write
        // would itself print to stderr, and panic.
        .log_internal_errors(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn serve(config_path: PathBuf) -> anyhow::Result<()> {
    let config = Config::load(&config_path)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "{}: listen: cannot bind {}: {e}",
                    config_path.display(),
                    config.listen
                )
            })?;
        crate::run(config, listener, shutdown_signal()).await
    })
}

/// Print one endpoint's contract: built as `serve` builds it, with what the store has
/// seen of its secrets and its latest request.
fn spec(config_path: PathBuf, id: &str) -> anyhow::Result<()> {
    let config = Config::load(&config_path)?;
    let Some(endpoint_config) = config.endpoints.iter().find(|e| e.id == id) else {
        let known: Vec<&str> = config.endpoints.iter().map(|e| e.id.as_str()).collect();
        anyhow::bail!(
            "{}: no endpoint {id:?} (endpoints: {})",
            config_path.display(),
            known.join(", ")
        );
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let text = runtime.block_on(async {
        let app = crate::build(&config).await?;
        let endpoint = app
            .endpoints
            .get(id)
            .ok_or_else(|| anyhow::anyhow!("endpoint {id:?} was not built"))?;
        let since = crate::clock::now_ms()
            - i64::try_from(crate::spec::SECRET_USE_WINDOW.as_millis()).unwrap_or(i64::MAX);
        let reconcile = crate::reconcile::pull_info(&app, &endpoint).await?;
        let mut observed = crate::spec::Observed {
            secret_use: app.store.secret_use(id, since).await?,
            latest: None,
            reconcile,
            last_run: app.store.runs(Some(id), 1).await?.into_iter().next(),
        };
        if let Some(receipt) = app.store.latest_receipt(id).await? {
            let headers: Vec<(String, String)> =
                serde_json::from_str(&receipt.headers).unwrap_or_default();
            let url = crate::verify::stored_url(&app.public_url, id, receipt.query.as_deref());
            let (planned, body) = (endpoint.clone(), receipt.body.clone());
            // A plugin call: on a plugin thread, as at ingest.
            let plan = app
                .plugin_threads
                .run(move || crate::verify::replan(&planned, &url, &headers, &body))
                .await?;
            observed.latest = plan.ok().map(|plan| (receipt, plan));
        }
        let text = crate::spec::render(&config, endpoint_config, &endpoint, &observed);
        app.store.close().await;
        anyhow::Ok(text)
    })?;
    write!(std::io::stdout().lock(), "{text}")?;
    Ok(())
}

/// The configuration an operator's command works with, whose store must be there
/// already: opening a SQLite file that is not there would make an empty store on the
/// spot, and a configuration pointing elsewhere would list and replay nothing, with
/// exit 0. A command that only reads and changes the store asks for
/// [`Secrets::Deferred`]: it runs in a shell without the providers' secrets.
fn operator_config(path: &Path, secrets: Secrets) -> anyhow::Result<Config> {
    let config = Config::load_with(path, secrets)?;
    if let StoreConfig::Sqlite(file) = &config.store
        && !file.exists()
    {
        anyhow::bail!(
            "{}: store: no database at {} (`hookhost serve` or `hookhost migrate` creates it)",
            path.display(),
            file.display()
        );
    }
    Ok(config)
}

/// The receiver as `serve` builds it, without serving: with the tenants' endpoints
/// too, for a command that runs an endpoint's plugin (built from the file alone, a
/// tenant's live endpoint would be "no longer configured").
async fn receiver(config: &Config) -> anyhow::Result<Arc<crate::http::App>> {
    let app = crate::build(config).await?;
    if let Some(tenancy) = &config.tenancy
        && let Err(error) = crate::tenancy::refresh(&app, tenancy).await
    {
        app.store.close().await;
        return Err(anyhow::anyhow!("the tenants' endpoints: {error}"));
    }
    Ok(app)
}

/// Open the configuration's store (applying its migrations, or refusing a newer
/// schema); an error names the configuration file.
async fn open_store(path: &Path, config: &Config) -> anyhow::Result<crate::store::Store> {
    crate::store::Store::open(&config.store)
        .await
        .map_err(|e| anyhow::anyhow!("{}: store: {e}", path.display()))
}

/// Open the store the configuration names (which applies its migrations, or refuses
/// a newer schema) and close it.
fn migrate(config_path: PathBuf) -> anyhow::Result<()> {
    let config = Config::load(&config_path)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let store = open_store(&config_path, &config).await?;
        store.close().await;
        out!("migrations applied");
        Ok(())
    })
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down");
}

fn inspect(plugin: &str) -> anyhow::Result<()> {
    let limits = PluginLimits::default();
    let loaded = if plugin.ends_with(".wasm") || plugin.contains('/') {
        std::sync::Arc::new(Plugin::load_file(std::path::Path::new(plugin), limits)?)
    } else {
        let catalog = Catalog::load(None, limits)?;
        catalog.get(plugin).ok_or_else(|| {
            anyhow::anyhow!(
                "no built-in plugin {plugin:?} (built-ins: {})",
                catalog.names().join(", ")
            )
        })?
    };
    let info = &loaded.info;
    out!("name:              {}", info.name);
    out!("version:           {}", info.version);
    out!("provider:          {}", info.provider);
    out!("origin:            {}", origin(&loaded.origin));
    out!("contract:          hookhost:provider@{}", loaded.contract());
    out!("sha256:            {}", loaded.digest);
    out!("size:              {} bytes", loaded.size);
    out!("key formats:       {}", key_formats(&info.key_formats));
    out!("algorithms:        {}", algorithms(&loaded.algorithms));
    match info.default_tolerance_seconds {
        Some(t) => out!("timestamp window:  ±{t} s"),
        None => out!("timestamp window:  none (the scheme signs no timestamp)"),
    }
    out!("retries:           {}", info.retry_behaviour);
    out!("imports:           {}", loaded.imports()?.join(", "));
    Ok(())
}

fn list(plugins_dir: Option<PathBuf>) -> anyhow::Result<()> {
    let catalog = Catalog::load(plugins_dir.as_deref(), PluginLimits::default())?;
    out!(
        "{:<20} {:<8} {:<22} {:<28} {:<8} origin",
        "name",
        "version",
        "provider",
        "algorithms",
        "contract"
    );
    for plugin in catalog.iter() {
        let info = &plugin.info;
        out!(
            "{:<20} {:<8} {:<22} {:<28} {:<8} {}",
            info.name,
            info.version,
            info.provider,
            algorithms(&plugin.algorithms),
            plugin.contract(),
            origin(&plugin.origin)
        );
    }
    Ok(())
}

/// The secrets a plugin takes, in words: `base64 after "whsec_"`, `hex`, ….
fn key_formats(formats: &[hookhost_plugin_sdk::KeyFormat]) -> String {
    use hookhost_plugin_sdk::KeyFormat;
    if formats.is_empty() {
        return "(not declared)".into();
    }
    formats
        .iter()
        .map(|f| match f {
            KeyFormat::Raw => "raw (the secret's UTF-8 bytes)".to_string(),
            KeyFormat::Base64AfterPrefix(p) => format!("base64 after {p:?}"),
            KeyFormat::Hex => "hex".to_string(),
            KeyFormat::Ed25519Hex => "ed25519 public key, hex".to_string(),
            KeyFormat::Ed25519Base64AfterPrefix(p) => {
                format!("ed25519 public key, base64 after {p:?}")
            }
            KeyFormat::EcdsaP256SpkiBase64 => "ecdsa p-256 public key, base64 of its DER".into(),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The algorithms a plugin declares, as the contract names them.
fn algorithms(algorithms: &[hookhost_plugin_sdk::Algorithm]) -> String {
    use hookhost_plugin_sdk::Algorithm;
    if algorithms.is_empty() {
        return "(not declared)".into();
    }
    algorithms
        .iter()
        .map(|a| match a {
            Algorithm::HmacSha1 => "hmac-sha1",
            Algorithm::HmacSha256 => "hmac-sha256",
            Algorithm::HmacSha512 => "hmac-sha512",
            Algorithm::Ed25519 => "ed25519",
            Algorithm::EcdsaP256Sha256 => "ecdsa-p256-sha256",
            Algorithm::Token => "token",
            Algorithm::Sha256SecretPrefix => "sha256-secret-prefix",
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn origin(origin: &Origin) -> String {
    origin.to_string()
}

enum Operation {
    Events(EventsCommand),
    Dlq(DlqCommand),
    Endpoint(EndpointCommand),
}

/// Operator commands work on the store the configuration names, directly (both
/// SQLite and PostgreSQL are safe to share with running receivers).
fn operate(operation: Operation) -> anyhow::Result<()> {
    let config_path = match &operation {
        Operation::Events(
            EventsCommand::List { config, .. }
            | EventsCommand::Show { config, .. }
            | EventsCommand::Replay { config, .. }
            | EventsCommand::Discard { config, .. },
        )
        | Operation::Dlq(DlqCommand::List { config, .. } | DlqCommand::Replay { config, .. })
        | Operation::Endpoint(
            EndpointCommand::Pause { config, .. } | EndpointCommand::Resume { config, .. },
        ) => config.clone(),
    };
    if let Operation::Events(
        EventsCommand::List { filter, .. } | EventsCommand::Replay { filter, .. },
    ) = &operation
    {
        filter
            .check()
            .map_err(|reason| anyhow::anyhow!("--{reason}"))?;
    }
    let remapping = matches!(
        &operation,
        Operation::Events(EventsCommand::Replay { remap: true, .. })
            | Operation::Dlq(DlqCommand::Replay { remap: true, .. })
    );
    // Remapping and showing an event run plugins; the rest only reads and changes the
    // store.
    let secrets =
        if remapping || matches!(&operation, Operation::Events(EventsCommand::Show { .. })) {
            Secrets::Required
        } else {
            Secrets::Deferred
        };
    let config = operator_config(&config_path, secrets)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        if remapping {
            // Remapping runs plugins: build the whole receiver (without serving).
            let app = receiver(&config).await?;
            if let Err(error) = known(&config, &app.store, &operation).await {
                app.store.close().await;
                return Err(error);
            }
            let filter = match operation {
                Operation::Events(EventsCommand::Replay { filter, .. }) => filter,
                Operation::Dlq(DlqCommand::Replay { endpoint, .. }) => crate::store::Filter {
                    endpoint,
                    states: vec!["dead".into(), "quarantined".into()],
                    ..Default::default()
                },
                _ => crate::store::Filter::default(),
            };
            let result = crate::replay(&app, &filter, true).await;
            app.store.close().await;
            out!("{} replayed", result?);
            return Ok(());
        }
        if let Operation::Events(EventsCommand::Show {
            endpoint, event_id, ..
        }) = &operation
        {
            // Redacting the signature asks the endpoint's plugin: build the receiver.
            let app = receiver(&config).await?;
            let result = show_event(&app, endpoint, event_id).await;
            app.store.close().await;
            return result;
        }
        let store = open_store(&config_path, &config).await?;
        let result = async {
            known(&config, &store, &operation).await?;
            run_operation(&store, operation).await
        }
        .await;
        store.close().await;
        result
    })
}

/// The endpoint an operation names must be known. One to pause or resume exists, in
/// the file or through the tenant API: a pause stored under a mistyped id would pause
/// nothing now, and a later endpoint of that id from its start. One to list or replay
/// may also be gone, if the store holds its events; a mistyped one would match
/// nothing, and `0 replayed` would read as nothing to do.
async fn known(
    config: &Config,
    store: &crate::store::Store,
    operation: &Operation,
) -> anyhow::Result<()> {
    let (endpoint, or_stored) = match operation {
        Operation::Endpoint(
            EndpointCommand::Pause { endpoint, .. } | EndpointCommand::Resume { endpoint, .. },
        ) => (Some(endpoint), false),
        Operation::Events(
            EventsCommand::List { filter, .. } | EventsCommand::Replay { filter, .. },
        ) => (filter.endpoint.as_ref(), true),
        Operation::Dlq(DlqCommand::List { endpoint, .. } | DlqCommand::Replay { endpoint, .. }) => {
            (endpoint.as_ref(), true)
        }
        Operation::Events(EventsCommand::Show { .. } | EventsCommand::Discard { .. }) => {
            (None, false)
        }
    };
    match endpoint {
        Some(endpoint) => endpoint_known(config, store, endpoint, or_stored).await,
        None => Ok(()),
    }
}

/// `endpoint` is in the file or managed through the tenant API, or, when `or_stored`,
/// the store holds something of its (an event, a kept request, a reconciliation run).
async fn endpoint_known(
    config: &Config,
    store: &crate::store::Store,
    endpoint: &str,
    or_stored: bool,
) -> anyhow::Result<()> {
    if config.endpoints.iter().any(|e| e.id == endpoint)
        || store
            .managed_endpoints(None)
            .await?
            .iter()
            .any(|e| e.id == endpoint)
        || (or_stored && store.holds(endpoint).await?)
    {
        return Ok(());
    }
    let what = if or_stored {
        "in the file, managed through the tenant API, or with anything stored"
    } else {
        "in the file or managed through the tenant API"
    };
    anyhow::bail!(
        "{}: no endpoint {endpoint:?} ({what})",
        config.path.display()
    )
}

async fn run_operation(store: &crate::store::Store, operation: Operation) -> anyhow::Result<()> {
    let dead = || vec!["dead".to_string(), "quarantined".to_string()];
    match operation {
        Operation::Events(EventsCommand::List { filter, json, .. }) => {
            print_list(store, filter, json).await
        }
        Operation::Dlq(DlqCommand::List { endpoint, json, .. }) => {
            let filter = crate::store::Filter {
                endpoint,
                states: dead(),
                ..Default::default()
            };
            print_list(store, filter, json).await
        }
        // Shown by `show_event`, with the receiver built.
        Operation::Events(EventsCommand::Show { .. }) => Ok(()),
        Operation::Events(EventsCommand::Replay { filter, .. }) => {
            let replayed = store.replay(&filter).await?;
            out!("{replayed} replayed");
            Ok(())
        }
        Operation::Dlq(DlqCommand::Replay { endpoint, .. }) => {
            let filter = crate::store::Filter {
                endpoint,
                states: dead(),
                ..Default::default()
            };
            let replayed = store.replay(&filter).await?;
            out!("{replayed} replayed");
            Ok(())
        }
        Operation::Events(EventsCommand::Discard {
            endpoint,
            event_id,
            reason,
            ..
        }) => {
            if store.discard(&endpoint, &event_id, &reason).await? {
                out!("discarded {endpoint}/{event_id}");
                Ok(())
            } else {
                anyhow::bail!(
                    "no pending, dead or quarantined event {event_id:?} on endpoint {endpoint:?}"
                )
            }
        }
        Operation::Endpoint(EndpointCommand::Pause { endpoint, .. }) => {
            store
                .set_paused(&endpoint, true, crate::clock::now_ms())
                .await?;
            out!("{endpoint}: delivery paused");
            Ok(())
        }
        Operation::Endpoint(EndpointCommand::Resume { endpoint, .. }) => {
            store
                .set_paused(&endpoint, false, crate::clock::now_ms())
                .await?;
            out!("{endpoint}: delivery resumed");
            Ok(())
        }
    }
}

/// One event with its attempts, as JSON, signature values redacted as the admin API
/// shows it.
async fn show_event(app: &crate::http::App, endpoint: &str, event_id: &str) -> anyhow::Result<()> {
    let mut shown = app
        .store
        .show(endpoint, event_id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no event {event_id:?} on endpoint {endpoint:?}"))?;
    crate::http::admin::redact_signatures(app, endpoint, &mut shown).await;
    out!("{}", serde_json::to_string_pretty(&shown)?);
    Ok(())
}

async fn print_list(
    store: &crate::store::Store,
    filter: crate::store::Filter,
    json: bool,
) -> anyhow::Result<()> {
    for event in store.list(&filter).await? {
        if json {
            out!("{}", serde_json::to_string(&event)?);
        } else {
            out!(
                "{:<16} {:<36} {:<12} {:<28} attempts={} {}",
                event.endpoint,
                event.event_id,
                event.state,
                event.event_type,
                event.attempts,
                event.last_error.as_deref().unwrap_or("")
            );
        }
    }
    Ok(())
}

/// `hookhost forensics …`: listing and showing read the store; verifying and
/// re-ingesting run the endpoint's plugin, so they build the receiver (without serving).
fn forensics(command: ForensicsCommand) -> anyhow::Result<()> {
    let config_path = match &command {
        ForensicsCommand::List { config, filter, .. } => {
            filter
                .check()
                .map_err(|reason| anyhow::anyhow!("--{reason}"))?;
            config.clone()
        }
        ForensicsCommand::Show { config, .. }
        | ForensicsCommand::Verify { config, .. }
        | ForensicsCommand::Reingest { config, .. } => config.clone(),
    };
    // Verifying and re-ingesting run plugins with the endpoint's secrets.
    let secrets = match &command {
        ForensicsCommand::List { .. } | ForensicsCommand::Show { .. } => Secrets::Deferred,
        ForensicsCommand::Verify { .. } | ForensicsCommand::Reingest { .. } => Secrets::Required,
    };
    let config = operator_config(&config_path, secrets)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let (id, reingest) = match command {
            ForensicsCommand::Verify { id, .. } => (id, false),
            ForensicsCommand::Reingest { id, .. } => (id, true),
            listing => {
                let store = open_store(&config_path, &config).await?;
                let key = config.tenancy.as_ref().map(|t| &t.master_key);
                let result = print_forensics(&config, &store, listing, key).await;
                store.close().await;
                return result;
            }
        };
        let app = receiver(&config).await?;
        let result = if reingest {
            crate::forensics::reingest(&app, id)
                .await
                .map(|done| format!("{id}: re-ingested as {} ({})", done.event_id, done.outcome))
        } else {
            crate::forensics::reverify(&app, id)
                .await
                .map(|(verdict, _)| serde_json::json!(verdict).to_string())
        };
        app.store.close().await;
        out!("{}", result?);
        Ok(())
    })
}

async fn print_forensics(
    config: &Config,
    store: &crate::store::Store,
    command: ForensicsCommand,
    key: Option<&crate::tenancy::MasterKey>,
) -> anyhow::Result<()> {
    match command {
        ForensicsCommand::Show { id, .. } => {
            let row = store
                .forensic(id)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no kept request {id}"))?;
            let shown = crate::forensics::shown(&row, key);
            out!("{}", serde_json::to_string_pretty(&shown)?);
        }
        ForensicsCommand::List { filter, json, .. } => {
            if let Some(endpoint) = &filter.endpoint {
                endpoint_known(config, store, endpoint, true).await?;
            }
            for kept in store.forensics(&filter).await? {
                if json {
                    out!("{}", serde_json::to_string(&kept)?);
                    continue;
                }
                let reingested = kept.reingest_outcome.map(|o| format!("reingested={o}"));
                out!(
                    "{:<6} {:<16} {:<8} {} {:<26} bytes={} {}",
                    kept.id,
                    kept.endpoint,
                    kept.kind,
                    kept.status,
                    kept.code,
                    kept.body_len,
                    reingested.unwrap_or_default()
                );
            }
        }
        ForensicsCommand::Verify { .. } | ForensicsCommand::Reingest { .. } => {}
    }
    Ok(())
}

/// `hookhost shadow`: builds the receiver (without serving), then the candidate: the
/// configuration file's endpoint with another plugin, or a tenant's endpoint with
/// another plugin, as the tenant API's shadow replay does.
fn reconcile(command: Option<ReconcileCommand>, args: ReconcileArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match command {
        Some(ReconcileCommand::Runs {
            config,
            endpoint,
            limit,
        }) => runtime.block_on(async move {
            let config = operator_config(&config, Secrets::Deferred)?;
            let store = open_store(&config.path, &config).await?;
            let runs = async {
                if let Some(endpoint) = &endpoint {
                    endpoint_known(&config, &store, endpoint, true).await?;
                }
                anyhow::Ok(store.runs(endpoint.as_deref(), i64::from(limit)).await?)
            }
            .await;
            store.close().await;
            out!("{}", serde_json::to_string_pretty(&runs?)?);
            Ok(())
        }),
        Some(ReconcileCommand::Show { config, run }) => runtime.block_on(async move {
            let store = open_store(&config, &operator_config(&config, Secrets::Deferred)?).await?;
            let found = store.run(&run).await;
            store.close().await;
            let (run, repairs) = found?.ok_or_else(|| anyhow::anyhow!("no run {run:?}"))?;
            let shown = serde_json::json!({"run": run, "repairs": repairs});
            out!("{}", serde_json::to_string_pretty(&shown)?);
            Ok(())
        }),
        None => {
            let (Some(config_path), Some(id)) = (args.config, args.endpoint) else {
                anyhow::bail!("reconcile needs --config FILE and --endpoint ID");
            };
            let config = operator_config(&config_path, Secrets::Required)?;
            let Some(settings) = config
                .endpoints
                .iter()
                .find(|e| e.id == id)
                .and_then(|e| e.reconcile.clone())
            else {
                anyhow::bail!(
                    "{}: endpoint {id:?}: no [endpoint.reconcile] in the configuration",
                    config_path.display()
                );
            };
            let now = crate::clock::now_ms() / 1000;
            let since = match &args.since {
                Some(text) => crate::reconcile::parse_since(text, now)
                    .map_err(|reason| anyhow::anyhow!("--since {reason}"))?,
                None => now - i64::try_from(settings.lookback.as_secs()).unwrap_or(i64::MAX),
            };
            let options = crate::reconcile::Options {
                since,
                dry_run: args.dry_run,
            };
            runtime.block_on(async move {
                let app = crate::build(&config).await?;
                let ran = crate::reconcile::run(&app, &id, options).await;
                app.store.close().await;
                let run = ran?;
                out!("{}", serde_json::to_string_pretty(&run)?);
                if run.state != "done" {
                    anyhow::bail!(
                        "run {} {}: {}",
                        run.id,
                        run.state,
                        run.last_error.unwrap_or_default()
                    );
                }
                Ok(())
            })
        }
    }
}

fn shadow(config_path: PathBuf, id: &str, plugin: &str, last: u32) -> anyhow::Result<()> {
    let config = operator_config(&config_path, Secrets::Required)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let app = crate::build(&config).await?;
        let result = async {
            let candidate = match config.endpoints.iter().find(|e| e.id == id) {
                Some(file) => {
                    let mut candidate = file.clone();
                    candidate.plugin = plugin.to_string();
                    let chosen = if plugin.ends_with(".wasm") || plugin.contains('/') {
                        Some(Arc::new(Plugin::load_file(
                            std::path::Path::new(plugin),
                            config.limits.plugin,
                        )?))
                    } else {
                        None
                    };
                    let on_thread = app.clone();
                    app.plugin_threads
                        .run(move || match chosen {
                            Some(chosen) => {
                                crate::endpoints::Endpoint::build_with(&candidate, chosen)
                            }
                            None => {
                                crate::endpoints::Endpoint::build(&candidate, &on_thread.catalog)
                            }
                        })
                        .await?
                        .map_err(|reason| anyhow::anyhow!("{reason}"))?
                }
                None => {
                    let tenancy = config.tenancy.as_ref().ok_or_else(|| {
                        anyhow::anyhow!("{}: no endpoint {id:?}", config_path.display())
                    })?;
                    crate::tenancy::refresh(&app, tenancy).await?;
                    let managed = app.store.managed_endpoints(None).await?;
                    let endpoint = managed.iter().find(|e| e.id == id).ok_or_else(|| {
                        anyhow::anyhow!("no endpoint {id:?} in the configuration or the store")
                    })?;
                    crate::tenancy::candidate(&app, tenancy, endpoint, plugin).await?
                }
            };
            let current = app
                .endpoints
                .get(id)
                .ok_or_else(|| anyhow::anyhow!("endpoint {id:?} is not served"))?;
            // The operator's own run: judged to the end, however long it takes.
            let report = crate::shadow::replay(&app, current, Arc::new(candidate), last, None);
            let report = report.await?;
            out!("{}", serde_json::to_string_pretty(&report)?);
            eprintln!(
                "{} of {} stored requests would change",
                report.changed, report.requests
            );
            if report.not_judged > 0 {
                eprintln!(
                    "{} could not be judged again: the current plugin does not accept them \
                     as stored (what verified them, such as a token header, is not kept)",
                    report.not_judged
                );
            }
            anyhow::Ok(())
        }
        .await;
        app.store.close().await;
        result
    })
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory as _;

    /// Every command and every option a user can see says what it is in `--help`.
    #[test]
    fn every_visible_command_and_argument_has_help() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                if arg
                    .get_help()
                    .is_none_or(|help| help.to_string().trim().is_empty())
                {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in command.get_subcommands() {
                if sub.is_hide_set() || sub.get_name() == "help" {
                    continue;
                }
                let sub_path = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() {
                    missing.push(sub_path.clone());
                }
                walk(sub, &sub_path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "hookhost", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }
}
