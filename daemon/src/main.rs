//! The `todod` daemon: parses flags, sets up logging, takes the state lock, opens
//! the store, binds, and calls `todod::server::run` until SIGTERM or SIGINT.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Parser;
use todod::api::auth::validate_token;
use todod::config;
use todod::server::{self, Listeners, Options};
use todod_engine::phase::Boundaries;
use todod_store::Store;

// The generation hot path allocates small buffers per request from many
// threads; mimalloc spends a fraction of what glibc's allocator does there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Durable todo graph daemon for AI agents and the pipelines they drive"
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,

    /// Directory holding the database, lock, token and socket
    /// [default: $XDG_STATE_HOME/todod or ~/.local/state/todod]
    #[arg(long, env = "TODOD_STATE_DIR", global = true)]
    state_dir: Option<PathBuf>,

    /// Keep the graph in this PostgreSQL database (postgres://user@host/db)
    /// instead of SQLite in the state directory. Several daemons, on one
    /// machine or several, may serve one database (or schema:
    /// `?options=-c%20search_path%3DNAME`) at once.
    #[arg(
        long,
        value_name = "URL",
        env = "TODOD_DATABASE_URL",
        hide_env_values = true
    )]
    database: Option<String>,

    /// How long a phase run's lease lasts unless renewed (every third of
    /// it). With --database, a daemon that dies has its runs taken over by
    /// another after this; one whose renewals fail this long stops its runs.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    lease: std::time::Duration,

    /// Back the graph up every DURATION (e.g. 1h) into --backup-dir.
    #[arg(long, value_name = "DURATION", requires = "backup_dir", value_parser = humantime::parse_duration)]
    backup_every: Option<std::time::Duration>,

    /// Where periodic backups go (outside the state directory).
    #[arg(long, value_name = "DIR")]
    backup_dir: Option<PathBuf>,

    /// How many periodic backups to keep.
    #[arg(long, value_name = "N", default_value_t = 24)]
    backup_keep: usize,

    /// Health turns NOT_SERVING when a write has waited this long for the
    /// database writer (and SERVING again once writes go through).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    writer_stall: std::time::Duration,

    /// TCP address to serve gRPC on, or "none". Every TCP call needs the token.
    #[arg(long, env = "TODOD_LISTEN", default_value = config::DEFAULT_LISTEN)]
    listen: String,

    /// Unix socket to serve on (mode 0600, no token needed), or "none"
    /// [default: STATE_DIR/todod.sock]
    #[arg(long, env = "TODOD_SOCKET")]
    socket: Option<String>,

    /// Bearer token TCP clients must present (at least 16 characters)
    /// [default: generated once into STATE_DIR/token, mode 0600]
    #[arg(long, env = "TODOD_TOKEN", hide_env_values = true)]
    token: Option<String>,

    /// Serve TCP on loopback without a token. Any local user can then drive the
    /// daemon: only for a machine you do not share.
    #[arg(long, conflicts_with = "token")]
    insecure_no_token: bool,

    /// Confine every file a phase task reads or writes to this directory
    /// (repeatable). Without it, phase files may be anywhere the daemon's
    /// user may write, except the state directory.
    #[arg(
        long = "data-root",
        value_name = "DIR",
        env = "TODOD_DATA_ROOTS",
        value_delimiter = ':'
    )]
    data_roots: Vec<PathBuf>,

    /// An environment variable that phase specs may name as `api_key_env`
    /// (repeatable). Variables named TODOD_SECRET_* are always allowed; no
    /// other variable of the daemon is ever sent to a server.
    #[arg(
        long = "secret-env",
        value_name = "NAME",
        env = "TODOD_SECRET_ENV",
        value_delimiter = ','
    )]
    secret_env: Vec<String>,

    /// A program that a spec's `servers` may start (repeatable): an
    /// inference server such as vllm, sglang's python or llama-server, by
    /// path or by name in PATH. No program is allowed unless named here; a
    /// spec naming another is refused (PERMISSION_DENIED).
    #[arg(
        long = "allow-server-command",
        value_name = "PROGRAM",
        env = "TODOD_ALLOW_SERVER_COMMANDS",
        value_delimiter = ':'
    )]
    allow_server_commands: Vec<PathBuf>,

    /// Log format: "text" or "json". Filter with RUST_LOG (default: info).
    #[arg(long, env = "TODOD_LOG_FORMAT", default_value = "text")]
    log_format: String,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Restore a backup (`todoctl backup FILE`) as the state directory's
    /// database, with no daemon running. The file is checked first (its
    /// checksum, integrity_check, a schema this version knows), and what the
    /// restore will do is listed: the database it replaces, and each phase
    /// output file the backup's checkpoints know against the file on disk.
    Restore {
        /// The backup file.
        file: PathBuf,
        /// Restore even though it replaces a database or cuts output files
        /// back to the backup's checkpoints.
        #[arg(long)]
        force: bool,
        /// List what the restore would do, and change nothing.
        #[arg(long, conflicts_with = "force")]
        dry_run: bool,
    },
}

/// `todod restore FILE`: lists what the restore does, then does it (with
/// `--force` when it replaces or cuts something back), or only lists it.
async fn restore(
    file: &std::path::Path,
    state_dir: &std::path::Path,
    force: bool,
    dry_run: bool,
) -> anyhow::Result<()> {
    let plan = todod::restore::plan(file, state_dir).await?;
    print!("{}", plan.describe());
    if dry_run {
        println!("dry run: nothing was changed");
        return Ok(());
    }
    if plan.needs_force() && !force {
        anyhow::bail!(
            "not restored: {}; give --force to restore as listed",
            plan.why_force().join(", and ")
        );
    }
    let info = todod::restore::apply(&plan).await?;
    println!(
        "restored {} into {}: {} plans, {} tasks, events up to {} (schema {})",
        file.display(),
        state_dir.display(),
        info.plans,
        info.tasks,
        info.last_seq,
        info.schema_version
    );
    Ok(())
}

fn init_tracing(format: &str) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a person looking at a terminal, never in a log file.
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
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

/// Turns transparent huge pages off for this process. The allocator asks
/// for them (`MADV_HUGEPAGE`) and hands freed memory back to the kernel
/// soon after; with thousands of requests in flight, memory churns through
/// that cycle and every fault zeroes a whole 2 MiB page: measured on the
/// cluster benchmark, 41 % of the daemon's CPU at start, 0.77 of the floor
/// and 749 MiB against 0.87 and 556 MiB without (BENCHMARKS.md). A daemon
/// that waits on the network gains nothing from huge pages' fewer TLB misses.
fn no_huge_pages() {
    // SAFETY: prctl with integer arguments, on this process only.
    let done = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if done != 0 {
        tracing::debug!("transparent huge pages stay as the system sets them");
    }
}

/// Lifts the open-files limit to its hard limit, as servers do: a
/// generation over 64 endpoints with hundreds of requests in flight on each
/// holds a connection per request, far past the usual soft limit of 1024.
fn raise_open_files() {
    // SAFETY: plain getrlimit/setrlimit on this process.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            let wanted = limit.rlim_max;
            limit.rlim_cur = wanted;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                tracing::debug!(open_files = wanted, "open-files limit raised");
            }
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    match daemon().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // The error and its causes in words. Returning it from main would
            // print anyhow's Debug form, with a stack trace whenever
            // RUST_BACKTRACE is set (as it is on many machines): a trace is
            // for a bug, and a refused flag or a missing file is not one.
            eprintln!("todod: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn daemon() -> anyhow::Result<()> {
    let args = Args::parse();
    init_tracing(&args.log_format)?;
    raise_open_files();
    no_huge_pages();
    let given_token = match &args.token {
        Some(token) => Some(validate_token(token).map_err(|e| anyhow::anyhow!("--token: {e}"))?),
        None => None,
    };
    let shutdown = shutdown_signal()?;

    let state_dir = match args.state_dir {
        Some(dir) => dir,
        None => config::default_state_dir()
            .context("cannot find a state directory: set --state-dir, TODOD_STATE_DIR or HOME")?,
    };
    if let Some(Command::Restore {
        file,
        force,
        dry_run,
    }) = &args.command
    {
        return restore(file, &state_dir, *force, *dry_run).await;
    }
    config::ensure_state_dir(&state_dir)
        .with_context(|| format!("cannot create state directory {}", state_dir.display()))?;
    let _lock = config::lock_state_dir(&state_dir)?;
    let db_path = state_dir.join(config::DATABASE_FILE);
    let postgres = args.database.as_deref().filter(|url| !url.is_empty());
    if let Some(url) = postgres {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            bail!("--database: must be a postgres:// URL (SQLite is the default, in the state directory)");
        }
        if args.backup_every.is_some() {
            bail!(
                "--backup-every: backs up SQLite only; back PostgreSQL up with pg_dump or the \
                 server's own backups"
            );
        }
    } else {
        todod::backup::check_before_start(&db_path, &state_dir).await?;
    }
    if args.lease < std::time::Duration::from_secs(1)
        || args.lease > std::time::Duration::from_secs(3600)
    {
        bail!("--lease: must be between 1s and 1h");
    }
    if args.backup_every.is_some_and(|d| d.is_zero()) {
        bail!("--backup-every: must be longer than zero");
    }
    if args.writer_stall.is_zero() || args.writer_stall >= std::time::Duration::from_secs(60) {
        bail!(
            "--writer-stall: must be between 0 and 60s (a write gives up waiting for the writer \
             after 60s)"
        );
    }
    if let Some(dir) = &args.backup_dir {
        let dir = std::fs::canonicalize(dir)
            .with_context(|| format!("--backup-dir {}: not a directory", dir.display()))?;
        let state = std::fs::canonicalize(&state_dir)?;
        if dir.starts_with(&state) {
            bail!(
                "--backup-dir {}: must be outside the state directory",
                dir.display()
            );
        }
    }
    for name in &args.secret_env {
        if name.is_empty() || name.contains('=') {
            bail!("--secret-env {name:?}: not a variable name");
        }
    }
    let bounds = Boundaries::new(Some(&state_dir), &args.data_roots, args.secret_env.clone())
        .context("--data-root: every data root must be an existing directory")?
        .allowing_server_commands(&args.allow_server_commands)
        .map_err(|e| anyhow::anyhow!("--allow-server-command {e}"))?;

    let mut listeners = Listeners::default();
    let mut token = None;
    if args.listen != "none" {
        let addr: SocketAddr = args.listen.parse().with_context(|| {
            format!(
                "--listen: {:?} is not an address like 127.0.0.1:50710",
                args.listen
            )
        })?;
        if args.insecure_no_token {
            if !addr.ip().is_loopback() {
                bail!("--listen {addr}: --insecure-no-token is only for loopback addresses");
            }
            tracing::warn!(
                %addr,
                "serving TCP without a token (--insecure-no-token): any local user can drive \
                 this daemon and the files it writes"
            );
        } else {
            token = Some(match given_token {
                Some(token) => token,
                None => {
                    let token = config::load_or_create_token(&state_dir).with_context(|| {
                        format!("cannot read or create the token in {}", state_dir.display())
                    })?;
                    validate_token(&token).map_err(|e| {
                        anyhow::anyhow!(
                            "{}: {e}; remove it to have a new one made",
                            state_dir.join(config::TOKEN_FILE).display()
                        )
                    })?
                }
            });
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        listeners.tcp = Some(listener);
    }
    let (store, database) = match postgres {
        Some(url) => {
            let store = Store::connect(url)
                .await
                .context("cannot open the PostgreSQL database --database names")?;
            store.set_lease(args.lease);
            (store, "postgresql (--database)".to_string())
        }
        None => {
            let store = Store::open(&db_path)
                .await
                .with_context(|| format!("cannot open database {}", db_path.display()))?;
            store.set_lease(args.lease);
            (store, db_path.display().to_string())
        }
    };
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
    tracing::info!(%database, "todod ready");
    let options = Options {
        token,
        bounds,
        fs: None,
        clock: None,
        writer_stall: Some(args.writer_stall),
        telemetry: Default::default(),
    };
    let (stop_backups, stopped) = tokio::sync::watch::channel(false);
    if let (Some(every), Some(dir)) = (args.backup_every, args.backup_dir.clone()) {
        tokio::spawn(todod::backup::every(
            db_path.clone(),
            state_dir.clone(),
            dir,
            every,
            args.backup_keep.max(1),
            stopped,
        ));
    }
    server::run(store.clone(), listeners, options, shutdown).await?;
    let _ = stop_backups.send(true);
    store.close().await;
    if let Some(path) = socket {
        let _ = std::fs::remove_file(path);
    }
    tracing::info!("todod stopped");
    Ok(())
}
