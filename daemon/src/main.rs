//! The `todod` daemon: parses flags, sets up logging, takes the state lock, opens
//! the store, binds, and calls `todod::server::run` until SIGTERM or SIGINT.
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Parser;
use todod::config;
use todod::server::{self, Listeners, Options};
use todod::store::Store;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Durable todo graph daemon for AI agents and the pipelines they drive"
)]
struct Args {
    /// Directory holding the database, lock and socket
    /// [default: $XDG_STATE_HOME/todod or ~/.local/state/todod]
    #[arg(long, env = "TODOD_STATE_DIR")]
    state_dir: Option<PathBuf>,

    /// TCP address to serve gRPC on, or "none". Anything but loopback needs --token.
    #[arg(long, env = "TODOD_LISTEN", default_value = config::DEFAULT_LISTEN)]
    listen: String,

    /// Unix socket to serve on (mode 0600), or "none" [default: STATE_DIR/todod.sock]
    #[arg(long, env = "TODOD_SOCKET")]
    socket: Option<String>,

    /// Bearer token every client must present (required off loopback)
    #[arg(long, env = "TODOD_TOKEN", hide_env_values = true)]
    token: Option<String>,

    /// Log format: "text" or "json". Filter with RUST_LOG (default: info).
    #[arg(long, env = "TODOD_LOG_FORMAT", default_value = "text")]
    log_format: String,
}

fn init_tracing(format: &str) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        "text" => builder.init(),
        "json" => builder.json().init(),
        other => bail!("--log-format: unknown format {other:?}; expected text or json"),
    }
    Ok(())
}

/// Resolves on SIGTERM or SIGINT. The handlers are installed when this is
/// called, before the daemon reports itself ready, so that a signal sent right
/// after readiness stops it gracefully instead of killing it.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_tracing(&args.log_format)?;
    let token = args.token.filter(|t| !t.is_empty());
    let shutdown = shutdown_signal()?;

    let state_dir = match args.state_dir {
        Some(dir) => dir,
        None => config::default_state_dir()
            .context("cannot find a state directory: set --state-dir, TODOD_STATE_DIR or HOME")?,
    };
    config::ensure_state_dir(&state_dir)
        .with_context(|| format!("cannot create state directory {}", state_dir.display()))?;
    let _lock = config::lock_state_dir(&state_dir)?;
    let db_path = state_dir.join(config::DATABASE_FILE);
    let store = Store::open(&db_path)
        .await
        .with_context(|| format!("cannot open database {}", db_path.display()))?;

    let mut listeners = Listeners::default();
    if args.listen != "none" {
        let addr: SocketAddr = args.listen.parse().with_context(|| {
            format!(
                "--listen: {:?} is not an address like 127.0.0.1:50710",
                args.listen
            )
        })?;
        if !addr.ip().is_loopback() && token.is_none() {
            bail!("--listen {addr}: serving beyond loopback needs --token (or TODOD_TOKEN)");
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        listeners.tcp = Some(listener);
    }
    let socket = match args.socket.as_deref() {
        Some("none") => None,
        Some(path) => Some(PathBuf::from(path)),
        None => Some(state_dir.join(config::SOCKET_FILE)),
    };
    if let Some(path) = &socket {
        let listener = config::bind_private_socket(path)
            .with_context(|| format!("cannot bind Unix socket {}", path.display()))?;
        listeners.unix = Some(listener);
    }
    // Readiness, once every listener is bound: one stdout line each, TCP first.
    // Scripts and tests wait for the first.
    if let Some(tcp) = &listeners.tcp {
        println!("todod listening on {}", tcp.local_addr()?);
    }
    if let Some(path) = &socket {
        println!("todod listening on unix:{}", path.display());
    }
    tracing::info!(database = %db_path.display(), "todod ready");
    server::run(store.clone(), listeners, Options { token }, shutdown).await?;
    store.close().await;
    if let Some(path) = socket {
        let _ = std::fs::remove_file(path);
    }
    tracing::info!("todod stopped");
    Ok(())
}
