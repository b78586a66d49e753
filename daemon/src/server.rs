//! Serves the gRPC API on the listeners it is given until `shutdown` resolves.
//! The binary binds and calls `run`; tests call the same `run` in-process.
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::service::interceptor::InterceptedService;
use tonic::service::Routes;
use tonic::transport::server::{Router, TcpIncoming};
use tonic::transport::Server;
use tonic_health::pb::health_server::{Health, HealthServer};
use tower::layer::util::Identity;

use crate::api::auth::BearerAuth;
use crate::api::{TodoService, MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES};
use crate::proto::todos_server::TodosServer;
use crate::proto::FILE_DESCRIPTOR_SET;
use todod_engine::phase::files::{RealFs, SharedFs};
use todod_engine::phase::{runtime, Boundaries, PhaseStore};
use todod_store::Store;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("listener: {0}")]
    Listener(String),
    #[error("store: {0}")]
    Store(#[from] todod_store::Error),
    #[error("the health watchdog's thread: {0}")]
    Watchdog(std::io::Error),
}

/// Where to serve. At least one should be set.
#[derive(Debug, Default)]
pub struct Listeners {
    pub tcp: Option<TcpListener>,
    pub unix: Option<UnixListener>,
}

#[derive(Clone, Default)]
pub struct Options {
    /// When set, every call over TCP must carry `authorization: Bearer
    /// <token>`. The Unix socket is private to the daemon's user (mode 0600)
    /// and needs none.
    pub token: Option<String>,
    /// What phase tasks may touch: files and secrets.
    pub bounds: Boundaries,
    /// The file layer phases write through (the real one unless a test
    /// gives another).
    pub fs: Option<SharedFs>,
    /// The scheduler's clock (the system's unless a test gives another).
    pub clock: Option<Arc<dyn crate::scheduler::Clock>>,
    /// How long a write may wait for the database writer before health
    /// says NOT_SERVING ([`WRITER_STALL`] unless set).
    pub writer_stall: Option<std::time::Duration>,
    /// The instruments workers update and `/metrics` shows (fresh ones
    /// unless a test gives its own).
    pub telemetry: todod_telemetry::Telemetry,
}

/// How long a write may wait for the writer before the daemon says, in its
/// health, that it cannot serve.
pub const WRITER_STALL: std::time::Duration = std::time::Duration::from_secs(10);

/// The longest any call may take on the server: none waits for ever. Long
/// enough for a backup of a large graph.
const CALL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("bounds", &self.bounds)
            .finish()
    }
}

/// How long calls in flight may run once shutdown has begun.
const DRAIN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// One router per listener: tonic's `Router` is not `Clone`, its services are.
/// Health and reflection sit behind the same token check as the API; the
/// HTTP routes (`/metrics`) check `http`'s own rule, and HTTP/1.1 is
/// accepted for them (what Prometheus and curl speak).
fn router<H: Health>(
    todos: &TodosServer<TodoService>,
    health: &HealthServer<H>,
    auth: &BearerAuth,
    http: crate::http::Http,
) -> Result<Router<Identity>, Error> {
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let guarded = |service| InterceptedService::new(service, auth.clone());
    let grpc = Routes::new(guarded(health.clone()))
        .add_service(InterceptedService::new(
            reflection().build_v1()?,
            auth.clone(),
        ))
        .add_service(InterceptedService::new(
            reflection().build_v1alpha()?,
            auth.clone(),
        ))
        .add_service(InterceptedService::new(todos.clone(), auth.clone()));
    // The HTTP router's fallback answers every other path (UNIMPLEMENTED to
    // a gRPC call, 404 to anyone else).
    let routes = Routes::from(
        grpc.into_axum_router()
            .merge(http.router())
            .fallback(crate::http::not_found),
    );
    Ok(Server::builder()
        .accept_http1(true)
        .timeout(CALL_DEADLINE)
        .trace_fn(|request| tracing::info_span!("rpc", path = %request.uri().path()))
        .add_routes(routes))
}

/// The status page's address on a TCP listener bound to `addr`: a
/// wildcard address is reached on this machine at loopback.
fn page_base(addr: std::net::SocketAddr) -> String {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    format!("http://{}", std::net::SocketAddr::new(ip, addr.port()))
}

/// Runs the watchdog on a thread and a runtime of its own. The store runs
/// SQLite on the runtime's workers (see `Store::write`), so a stalled disk
/// blocks a worker for as long as it stalls, and a task queued behind it
/// waits with it: on two cores CI saw health never leave SERVING during a
/// 4 s stall. What reports the stall must not wait for it.
fn on_its_own_thread(watchdog: impl Future<Output = ()> + Send + 'static) -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(Error::Watchdog)?;
    std::thread::Builder::new()
        .name("todod-watchdog".into())
        .spawn(move || runtime.block_on(watchdog))
        .map_err(Error::Watchdog)?;
    Ok(())
}

/// Keeps health true to the store: NOT_SERVING (the API and the server as
/// a whole) while a write has waited longer than `bound` for the database
/// writer, with the reason and the holder in the log; SERVING again once
/// writes go through, unless the daemon is stopping.
async fn watchdog(
    store: Store,
    reporter: tonic_health::server::HealthReporter,
    bound: std::time::Duration,
    stopping: Arc<tokio::sync::Mutex<bool>>,
    mut stop: watch::Receiver<bool>,
) {
    use tonic_health::ServingStatus;
    let period = (bound / 4).clamp(
        std::time::Duration::from_millis(50),
        std::time::Duration::from_secs(1),
    );
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stalled = false;
    let set = |status: ServingStatus| {
        let reporter = reporter.clone();
        async move {
            reporter
                .set_service_status(
                    <TodosServer<TodoService> as tonic::server::NamedService>::NAME,
                    status,
                )
                .await;
            reporter.set_service_status("", status).await;
        }
    };
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let stall = store.writer_stall(bound);
        if stall.is_some() == stalled {
            continue;
        }
        let stopping = stopping.lock().await;
        if *stopping {
            return;
        }
        match stall {
            Some(stall) => {
                tracing::error!(%stall, "the daemon cannot serve writes: health is NOT_SERVING");
                set(ServingStatus::NotServing).await;
            }
            None => {
                tracing::warn!("writes go through again: health is SERVING");
                set(ServingStatus::Serving).await;
            }
        }
        stalled = !stalled;
    }
}

/// Serves until `shutdown` resolves, then stops accepting, ends watch streams and
/// lets in-flight calls finish.
///
/// Only this wrapper is compiled in the crate that calls it. The server
/// itself, and the whole stack it instantiates (hyper, h2, tonic, axum), is
/// compiled once, in this library, behind `serving`'s boxed future. An
/// async fn's body is a closure to the compiler, and closures are compiled
/// in each crate that uses them: a `run` that awaited `serve` directly was
/// compiled again in the daemon's binary and in each test binary.
pub async fn run(
    store: Store,
    listeners: Listeners,
    options: Options,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    serving(store, listeners, options, Box::pin(shutdown)).await
}

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Not inlined: inlined into a caller, it would name `serve`'s body there.
#[inline(never)]
fn serving(
    store: Store,
    listeners: Listeners,
    options: Options,
    shutdown: Boxed<()>,
) -> Boxed<Result<(), Error>> {
    Box::pin(serve(store, listeners, options, shutdown))
}

async fn serve(
    store: Store,
    listeners: Listeners,
    options: Options,
    shutdown: Boxed<()>,
) -> Result<(), Error> {
    // The store admits the tasks of every kind in the phase table.
    store
        .register_kinds(&todod_engine::phase::kinds::all())
        .await?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<TodosServer<TodoService>>().await;
    let stopping_reporter = reporter.clone();
    // Held while health changes: once stopping is set, nothing says SERVING.
    let stopping = Arc::new(tokio::sync::Mutex::new(false));
    let stopping_gate = stopping.clone();
    tokio::spawn(async move {
        shutdown.await;
        // Tell health checkers first, then stop accepting and end the streams.
        let mut stopping = stopping_gate.lock().await;
        *stopping = true;
        stopping_reporter
            .set_not_serving::<TodosServer<TodoService>>()
            .await;
        stopping_reporter
            .set_service_status("", tonic_health::ServingStatus::NotServing)
            .await;
        drop(stopping);
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    on_its_own_thread(watchdog(
        store.clone(),
        reporter.clone(),
        options.writer_stall.unwrap_or(WRITER_STALL),
        stopping,
        stop_rx.clone(),
    ))?;

    let bounds = Arc::new(options.bounds.clone());
    let clock = options
        .clock
        .clone()
        .unwrap_or_else(|| Arc::new(crate::scheduler::SystemClock));
    // The page's logins are minted over the API and spent on the TCP
    // listener's page.
    let page_shared = Arc::new(crate::http::status_page::Shared::default());
    let page_base = listeners
        .tcp
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .map(page_base);
    // The inference servers specs ask the daemon to run: their logs and pid
    // records in the state directory, where the next daemon looks for what
    // a killed one left running (a daemon without one, in a test, has a
    // folder of its own run).
    let run_id = runtime::new_run_id();
    let server_dir = match &options.bounds.state_dir {
        Some(state) => state.join("servers"),
        None => std::env::temp_dir().join(format!("todod-servers-{run_id}")),
    };
    let inference_servers = todod_engine::phase::servers::Servers::new(
        PhaseStore::new(store.clone()),
        server_dir,
        options.telemetry.clone(),
    );
    let todos = TodosServer::new(
        TodoService::new(store.clone(), bounds.clone(), stop_rx.clone())
            .with_servers(inference_servers.clone())
            .with_clock(clock.clone())
            .with_page(page_shared.logins.clone(), page_base),
    )
    .max_decoding_message_size(MAX_REQUEST_BYTES)
    .max_encoding_message_size(MAX_RESPONSE_BYTES);
    let tcp_auth = BearerAuth::new(options.token.as_deref());
    let unix_auth = BearerAuth::new(None);

    // Phase runs go on beside the API and stop with it, resumable.
    let gates = todod_engine::phase::gate::Gates::default();
    let settings = runtime::Settings {
        run_id: run_id.clone(),
        fs: options.fs.clone().unwrap_or_else(|| Arc::new(RealFs)),
        bounds,
        gates: gates.clone(),
        telemetry: options.telemetry.clone(),
        servers: inference_servers.clone(),
    };
    let workers = tokio::spawn(runtime::run(
        PhaseStore::new(store.clone()),
        settings,
        stop_rx.clone(),
    ));
    // Schedules fire beside them, on the same stop (a re-measurement holds
    // a run through its gate).
    let scheduler = tokio::spawn(crate::scheduler::run(
        store.clone(),
        clock,
        gates,
        options.telemetry.clone(),
        run_id,
        stop_rx.clone(),
    ));

    let mut servers = tokio::task::JoinSet::new();
    if let Some(listener) = listeners.tcp {
        // /metrics is open on loopback (a node's Prometheus), token-bound elsewhere.
        let open = listener
            .local_addr()
            .map(|a| a.ip().is_loopback())
            .unwrap_or(false);
        let http_auth = if open {
            BearerAuth::new(None)
        } else {
            tcp_auth.clone()
        };
        let page = crate::http::status_page::Page::new(
            store.clone(),
            tcp_auth.clone(),
            page_shared.clone(),
            stop_rx.clone(),
        );
        let http =
            crate::http::Http::new(store.clone(), options.telemetry.clone(), http_auth, page);
        let routes = router(&todos, &health, &tcp_auth, http)?;
        // Nagle plus delayed ACKs would add tens of milliseconds to small calls.
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));

        servers.spawn(routes.serve_with_incoming_shutdown(incoming, stopped(stop_rx.clone())));
    }
    if let Some(listener) = listeners.unix {
        let page = crate::http::status_page::Page::new(
            store.clone(),
            unix_auth.clone(),
            page_shared.clone(),
            stop_rx.clone(),
        );
        let http = crate::http::Http::new(
            store.clone(),
            options.telemetry.clone(),
            unix_auth.clone(),
            page,
        );
        let routes = router(&todos, &health, &unix_auth, http)?;
        servers.spawn(routes.serve_with_incoming_shutdown(
            UnixListenerStream::new(listener),
            stopped(stop_rx.clone()),
        ));
    }
    if servers.is_empty() {
        return Err(Error::Listener("no listener to serve on".into()));
    }
    // Once shutdown starts, calls in flight get DRAIN_DEADLINE to finish.
    let mut stop = stop_rx.clone();
    let drained = async {
        let _ = stop.wait_for(|stop| *stop).await;
        tokio::time::sleep(DRAIN_DEADLINE).await;
    };
    tokio::pin!(drained);
    let served = loop {
        tokio::select! {
            next = servers.join_next() => match next {
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(error))) => break Err(Error::from(error)),
                Some(Err(error)) => break Err(Error::Listener(error.to_string())),
                None => {
                    let _ = workers.await;
                    let _ = scheduler.await;
                    break Ok(());
                }
            },
            _ = &mut drained => {
                tracing::warn!("calls still running {DRAIN_DEADLINE:?} after shutdown began; stopping anyway");
                servers.abort_all();
                workers.abort();
                scheduler.abort();
                break Ok(());
            }
        }
    };
    // However serving ended, the inference servers the daemon started stop
    // with it.
    inference_servers.stop_all().await;
    served
}
