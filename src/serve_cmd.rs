//! `lachesis serve` (the decision service) and `lachesis decide` (a client that sends one
//! snapshot and prints the answer; with `--session`, then deltas: `decide_session`).

use anyhow::{Context, Result};
use lachesis_serve::ServeConfig;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Service configuration (TOML, every field in docs/serve-config.md). Without one:
    /// models/default, gRPC on 127.0.0.1:50051, HTTP on 127.0.0.1:9090.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Model directory, overriding the config's `model` ("" for heuristics only).
    #[arg(long)]
    model: Option<String>,
    /// gRPC listen address, overriding `grpc.addr`.
    #[arg(long)]
    grpc: Option<String>,
    /// HTTP listen address (metrics, health, the `/ui` dashboard), overriding `http.addr`;
    /// "" for none.
    #[arg(long)]
    http: Option<String>,
    #[command(flatten)]
    log: LogArgs,
}

/// How the long-running subcommands log (on stderr).
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// `text` (coloured only when stderr is a terminal) or `json` (one object a line, for log
    /// shippers).
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// The same as `--log-format json` (kept for existing unit files).
    #[arg(long, hide = true, conflicts_with = "log_format")]
    log_json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct DecideArgs {
    /// The service's address (`host:port`).
    #[arg(long, default_value = "127.0.0.1:50051")]
    server: String,
    /// Cluster snapshot as JSON (the `Snapshot` message; docs/serve-api.md describes it).
    #[arg(long)]
    snapshot: PathBuf,
    /// File holding a bearer token to present.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// CA certificate (PEM) to check a TLS server against; implies TLS.
    #[arg(long)]
    ca: Option<PathBuf>,
    /// Open a session with the snapshot, then send the deltas (`--deltas`) on it, printing
    /// each answer.
    #[arg(long)]
    session: bool,
    /// With `--session`: `SnapshotDelta`s as JSON, one a line; `-` (default) for stdin.
    #[arg(long, requires = "session", default_value = "-")]
    deltas: PathBuf,
}

pub fn serve(args: &ServeArgs) -> Result<()> {
    init_logging(&args.log);
    let mut cfg = match &args.config {
        Some(path) => ServeConfig::read(path)?,
        None => ServeConfig::default(),
    };
    if let Some(m) = &args.model {
        cfg.model = m.clone();
    }
    if let Some(a) = &args.grpc {
        cfg.grpc.addr = a.clone();
    }
    if let Some(a) = &args.http {
        cfg.http.addr = a.clone();
    }
    cfg.validate()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .max_blocking_threads(cfg.blocking_threads())
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(lachesis_serve::run(cfg));
    // A model computation that outlived its deadline may still run on the blocking pool; its
    // answer is no longer wanted, so shutdown does not wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result?;
    Ok(())
}

pub fn decide(args: &DecideArgs) -> Result<()> {
    let token = match &args.token_file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .with_context(|| format!("reading the token file {}", p.display()))?
                .trim()
                .to_string(),
        ),
        None => None,
    };
    if args.session {
        return crate::decide_session::run(&crate::decide_session::SessionInput {
            server: &args.server,
            snapshot: &args.snapshot,
            deltas: &args.deltas,
            token: token.as_deref(),
            ca: args.ca.as_deref(),
        });
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let answer = runtime.block_on(lachesis_serve::client::decide_file(
        &args.server,
        &args.snapshot,
        token.as_deref(),
        args.ca.as_deref(),
    ))?;
    outln!("{answer}");
    Ok(())
}

/// Structured logs on stderr; `RUST_LOG`-style level from `LACHESIS_LOG` (default info).
/// Colour codes only when stderr is a terminal: a log file or a pipe gets plain text.
pub fn init_logging(args: &LogArgs) {
    use std::io::IsTerminal;
    let level = std::env::var("LACHESIS_LOG")
        .ok()
        .and_then(|l| l.parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::INFO);
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr);
    if args.log_json || args.log_format == LogFormat::Json {
        builder.json().init();
    } else {
        builder.with_ansi(std::io::stderr().is_terminal()).init();
    }
}
