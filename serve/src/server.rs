//! The network face: the `lachesis.v1.Scheduler` gRPC service (plus standard health and
//! reflection, v1 and v1alpha) and the HTTP listener for `/metrics`, `/healthz` and `/readyz`, with auth,
//! request-size and concurrency limits, optional TLS and graceful shutdown; and the guard's
//! thread when `[guard] enabled`.

use crate::config::{Secret, ServeConfig};
use crate::engine::Engine;
use crate::metrics::Metrics;
use crate::proto;
use crate::proto::scheduler_server::{Scheduler, SchedulerServer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, watch};
use tonic::metadata::MetadataMap;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, Server, ServerTlsConfig};
use tonic::{Code, Request, Response, Status};

/// Why the service could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("configuration: {0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("reflection: {0}")]
    Reflection(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServeError {
    let what = what.into();
    move |source| ServeError::Io { what, source }
}

/// The gRPC service: guards (auth, limits, metrics) around the engine.
#[derive(Debug, Clone)]
pub struct SchedulerService {
    engine: Arc<Engine>,
    permits: Arc<Semaphore>,
    queue_timeout: Duration,
    token: Option<Secret>,
    admin_token: Option<Secret>,
    require_for_all: bool,
}

fn bearer(meta: &MetadataMap) -> Option<&str> {
    meta.get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

impl SchedulerService {
    pub fn new(engine: Arc<Engine>, token: Option<Secret>, admin_token: Option<Secret>) -> Self {
        let cfg = engine.config();
        SchedulerService {
            permits: Arc::new(Semaphore::new(cfg.grpc.max_concurrency)),
            queue_timeout: Duration::from_millis(cfg.grpc.queue_timeout_ms),
            require_for_all: cfg.auth.require_for_all,
            engine,
            token,
            admin_token,
        }
    }

    fn authorize(&self, meta: &MetadataMap, admin: bool) -> Result<(), Status> {
        let presented = bearer(meta);
        if admin {
            return match (&self.admin_token, presented) {
                (None, _) => Err(Status::unauthenticated(
                    "admin calls are disabled: no admin token is configured",
                )),
                (Some(t), Some(p)) if t.matches(p) => Ok(()),
                (Some(_), None) => Err(Status::unauthenticated("missing bearer token")),
                (Some(_), Some(_)) => Err(Status::unauthenticated("wrong bearer token")),
            };
        }
        if !self.require_for_all {
            return Ok(());
        }
        match (&self.token, presented) {
            (Some(t), Some(p)) if t.matches(p) => Ok(()),
            (_, None) => Err(Status::unauthenticated("missing bearer token")),
            _ => Err(Status::unauthenticated("wrong bearer token")),
        }
    }

    /// Auth, then a concurrency permit (waiting up to the queue timeout), then `f`; the
    /// outcome is counted and timed.
    async fn guarded<T, F>(
        &self,
        rpc: &'static str,
        meta: &MetadataMap,
        admin: bool,
        f: F,
    ) -> Result<Response<T>, Status>
    where
        F: std::future::Future<Output = Result<T, Status>>,
    {
        let started = Instant::now();
        let result = async {
            self.authorize(meta, admin)?;
            let _permit =
                match tokio::time::timeout(self.queue_timeout, self.permits.acquire()).await {
                    Ok(Ok(p)) => p,
                    _ => {
                        return Err(Status::resource_exhausted(format!(
                            "too many requests in flight (limit {}), try again",
                            self.engine.config().grpc.max_concurrency
                        )));
                    }
                };
            let metrics = self.engine.metrics();
            metrics.inflight.inc();
            let r = f.await;
            metrics.inflight.dec();
            r
        }
        .await;
        let code = result.as_ref().map_or_else(|s| s.code(), |_| Code::Ok);
        self.engine
            .metrics()
            .request(rpc, code, started.elapsed().as_secs_f64());
        if let Err(s) = &result
            && s.code() != Code::InvalidArgument
            && s.code() != Code::Unauthenticated
        {
            tracing::warn!(rpc, code = ?s.code(), message = s.message(), "request failed");
        }
        result.map(Response::new)
    }
}

impl SchedulerService {
    /// Refuses GPU model names outside the catalog in what a client composed, unless
    /// `allow_unknown_gpu_models` (see `world::check_gpu_model_names`).
    fn check_gpu_models(
        &self,
        snapshot: Option<&proto::Snapshot>,
        delta: Option<&proto::SnapshotDelta>,
    ) -> Result<(), Status> {
        if self.engine.config().allow_unknown_gpu_models {
            return Ok(());
        }
        crate::world::check_gpu_model_names(snapshot, delta)
            .map_err(|e| Status::invalid_argument(e.to_string()))
    }
}

#[tonic::async_trait]
impl Scheduler for SchedulerService {
    async fn decide(
        &self,
        request: Request<proto::DecideRequest>,
    ) -> Result<Response<proto::DecideResponse>, Status> {
        let (meta, _, body) = request.into_parts();
        self.guarded("Decide", &meta, false, async {
            self.check_gpu_models(body.snapshot.as_ref(), body.delta.as_ref())?;
            self.engine.decide(body).await
        })
        .await
    }

    async fn score(
        &self,
        request: Request<proto::ScoreRequest>,
    ) -> Result<Response<proto::ScoreResponse>, Status> {
        let (meta, _, body) = request.into_parts();
        self.guarded("Score", &meta, false, async {
            self.check_gpu_models(body.snapshot.as_ref(), None)?;
            self.engine.score(body).await
        })
        .await
    }

    async fn explain(
        &self,
        request: Request<proto::ExplainRequest>,
    ) -> Result<Response<proto::ExplainResponse>, Status> {
        let (meta, _, body) = request.into_parts();
        self.guarded("Explain", &meta, false, async {
            self.check_gpu_models(body.snapshot.as_ref(), None)?;
            self.engine.explain(body).await
        })
        .await
    }

    async fn model_info(
        &self,
        request: Request<proto::ModelInfoRequest>,
    ) -> Result<Response<proto::ModelInfoResponse>, Status> {
        let engine = Arc::clone(&self.engine);
        self.guarded("ModelInfo", request.metadata(), false, async move {
            Ok(engine.info())
        })
        .await
    }

    async fn report_nodes(
        &self,
        request: Request<proto::ReportNodesRequest>,
    ) -> Result<Response<proto::ReportNodesResponse>, Status> {
        let engine = Arc::clone(&self.engine);
        let (meta, _, body) = request.into_parts();
        self.guarded("ReportNodes", &meta, false, async move {
            let inventory = engine.inventory();
            let accepted = inventory
                .report(&body.nodes, &body.source)
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            Ok(proto::ReportNodesResponse {
                accepted: accepted as u32,
                known: inventory.len() as u32,
            })
        })
        .await
    }

    async fn reload_model(
        &self,
        request: Request<proto::ReloadModelRequest>,
    ) -> Result<Response<proto::ReloadModelResponse>, Status> {
        let engine = Arc::clone(&self.engine);
        let (meta, _, body) = request.into_parts();
        self.guarded("ReloadModel", &meta, true, async move {
            let (ok, message) = engine.reload(&body.path).await;
            Ok(proto::ReloadModelResponse {
                ok,
                message,
                info: Some(engine.info()),
            })
        })
        .await
    }
}

/// A started service: its addresses and a way to stop it.
#[derive(Debug)]
pub struct Running {
    pub grpc_addr: SocketAddr,
    pub http_addr: Option<SocketAddr>,
    pub engine: Arc<Engine>,
    stop: watch::Sender<bool>,
    ready: Arc<AtomicBool>,
    grpc: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    http: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    guard: Option<crate::guard::GuardHandle>,
}

impl Running {
    /// Stops accepting, lets requests in flight finish, flushes the decision log.
    pub async fn shutdown(self) -> Result<(), ServeError> {
        self.ready.store(false, Ordering::SeqCst);
        let _ = self.stop.send(true);
        if let Some(guard) = self.guard {
            guard.stop();
        }
        let grpc = self.grpc.await;
        if let Some(h) = self.http {
            let _ = h.await;
        }
        self.engine.flush();
        match grpc {
            Ok(r) => r.map_err(ServeError::from),
            Err(e) => Err(ServeError::Io {
                what: "gRPC task".into(),
                source: std::io::Error::other(e.to_string()),
            }),
        }
    }
}

/// Builds the engine from `cfg` and starts both listeners.
pub async fn start(cfg: ServeConfig) -> Result<Running, ServeError> {
    let metrics = Arc::new(Metrics::new());
    let engine = Engine::new(cfg, metrics).map_err(io("decision log"))?;
    start_with(Arc::new(engine)).await
}

/// Starts both listeners around an engine already built.
pub async fn start_with(engine: Arc<Engine>) -> Result<Running, ServeError> {
    let cfg = engine.config().clone();
    let (token, admin_token) = cfg.tokens()?;
    let ui_token = token.clone();
    // Started first: if anything below fails, dropping the handle ends its thread.
    let guard = crate::guard::start(Arc::clone(&engine)).map_err(io("starting the guard"))?;
    let addr: SocketAddr = tokio::net::lookup_host(&cfg.grpc.addr)
        .await
        .map_err(io(format!("grpc.addr {}", cfg.grpc.addr)))?
        .next()
        .ok_or_else(|| ServeError::Io {
            what: format!("grpc.addr {}", cfg.grpc.addr),
            source: std::io::Error::other("resolves to no address"),
        })?;
    let incoming = TcpIncoming::bind(addr)
        .map_err(io(format!("binding gRPC to {addr}")))?
        .with_nodelay(Some(true));
    let grpc_addr = incoming
        .local_addr()
        .map_err(io("reading the gRPC address"))?;

    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<SchedulerServer<SchedulerService>>()
        .await;
    // Reflection in both versions: grpcurl speaks v1, Python's grpcio-reflection, Postman,
    // Evans and older grpcurl speak v1alpha (and get UNIMPLEMENTED without it).
    let reflecting = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_error =
        |e: tonic_reflection::server::Error| ServeError::Reflection(e.to_string());
    let reflection = reflecting().build_v1().map_err(reflection_error)?;
    let reflection_v1alpha = reflecting().build_v1alpha().map_err(reflection_error)?;
    let service = SchedulerServer::new(SchedulerService::new(
        Arc::clone(&engine),
        token,
        admin_token,
    ))
    .max_decoding_message_size(cfg.grpc.max_request_bytes);

    let mut builder = Server::builder();
    if let Some(tls) = &cfg.grpc.tls {
        let cert = std::fs::read(&tls.cert).map_err(io(tls.cert.display().to_string()))?;
        let key = std::fs::read(&tls.key).map_err(io(tls.key.display().to_string()))?;
        builder =
            builder.tls_config(ServerTlsConfig::new().identity(Identity::from_pem(cert, key)))?;
    }
    let (stop, stop_rx) = watch::channel(false);
    let signal = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let router = builder
        .add_service(health_service)
        .add_service(reflection)
        .add_service(reflection_v1alpha)
        .add_service(service);
    let grpc = tokio::spawn(router.serve_with_incoming_shutdown(incoming, signal(stop_rx.clone())));

    let ready = Arc::new(AtomicBool::new(true));
    let (http, http_addr) = if cfg.http.addr.trim().is_empty() {
        (None, None)
    } else {
        let listener = tokio::net::TcpListener::bind(&cfg.http.addr)
            .await
            .map_err(io(format!("binding HTTP to {}", cfg.http.addr)))?;
        let http_addr = listener
            .local_addr()
            .map_err(io("reading the HTTP address"))?;
        let app = crate::http::router(
            Arc::clone(&engine),
            Arc::clone(&ready),
            ui_token,
            stop_rx.clone(),
        );
        // The dashboard's history, kept whether or not a page is open.
        tokio::spawn(crate::dashboard::sample(
            Arc::clone(&engine),
            stop_rx.clone(),
        ));
        let shutdown = signal(stop_rx);
        let handle = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        });
        (Some(handle), Some(http_addr))
    };
    tracing::info!(%grpc_addr, http = ?http_addr, "serving");
    Ok(Running {
        grpc_addr,
        http_addr,
        engine,
        stop,
        ready,
        grpc,
        http,
        guard,
    })
}

/// `lachesis serve`: starts, prints where it listens, reloads on SIGHUP (which also lifts the
/// guard's switch to the baseline), stops gracefully on SIGINT or SIGTERM.
pub async fn run(cfg: ServeConfig) -> Result<(), ServeError> {
    use tokio::signal::unix::{SignalKind, signal};
    let running = start(cfg).await?;
    // The handlers before the ready line: a supervisor (or a test) that signals as soon as it
    // reads the line must reach them, not the default action that kills the process.
    let mut hup = signal(SignalKind::hangup()).map_err(io("SIGHUP handler"))?;
    let mut term = signal(SignalKind::terminate()).map_err(io("SIGTERM handler"))?;
    println!(
        "lachesis serve: gRPC on {}{}; model {} ({})",
        running.grpc_addr,
        running
            .http_addr
            .map_or_else(String::new, |a| format!(", HTTP on {a}")),
        running.engine.model_state().version(),
        running.engine.model_state().status()
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();
    loop {
        tokio::select! {
            _ = hup.recv() => {
                let (ok, message) = running.engine.reload("").await;
                tracing::info!(ok, %message, "SIGHUP reload");
            }
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    tracing::info!("shutting down: finishing requests in flight");
    running.shutdown().await
}
