//! The command line: `serve`, and the `plugin` tools.

use crate::config::Config;
use crate::plugins::{Catalog, Origin, Plugin, PluginLimits};
use crate::vectors;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

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
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Work with provider plugins.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
}

#[derive(Subcommand, Debug)]
enum PluginCommand {
    /// Judge signature test vectors offline (no server, no database).
    Test {
        /// Vector files (JSON, see VECTORS.md).
        #[arg(long = "vectors", required = true, num_args = 1..)]
        vectors: Vec<PathBuf>,
        /// One JSON object per vector instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show what a plugin declares: a built-in name or a `.wasm` file.
    Inspect { plugin: String },
    /// List the built-in plugins and the drop-ins of a directory.
    List {
        #[arg(long)]
        plugins_dir: Option<PathBuf>,
    },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_json);
    let result = match cli.command {
        Command::Serve { config } => serve(config),
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
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("hookhost: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
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
    println!("name:              {}", info.name);
    println!("version:           {}", info.version);
    println!("provider:          {}", info.provider);
    println!("origin:            {}", origin(&loaded.origin));
    println!("contract:          {}", crate::plugins::PLUGIN_INTERFACE);
    println!("sha256:            {}", loaded.digest);
    println!("size:              {} bytes", loaded.size);
    println!("key formats:       {:?}", info.key_formats);
    match info.default_tolerance_seconds {
        Some(t) => println!("timestamp window:  ±{t} s"),
        None => println!("timestamp window:  none (the scheme signs no timestamp)"),
    }
    println!("retries:           {}", info.retry_behaviour);
    println!("imports:           {}", loaded.imports().join(", "));
    Ok(())
}

fn list(plugins_dir: Option<PathBuf>) -> anyhow::Result<()> {
    let catalog = Catalog::load(plugins_dir.as_deref(), PluginLimits::default())?;
    println!("{:<20} {:<10} {:<20} origin", "name", "version", "provider");
    for plugin in catalog.iter() {
        let info = &plugin.info;
        println!(
            "{:<20} {:<10} {:<20} {}",
            info.name,
            info.version,
            info.provider,
            origin(&plugin.origin)
        );
    }
    Ok(())
}

fn origin(origin: &Origin) -> String {
    match origin {
        Origin::Builtin => "built-in".into(),
        Origin::File(path) => path.display().to_string(),
    }
}
