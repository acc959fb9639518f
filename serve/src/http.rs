//! The HTTP listener: Prometheus `/metrics` (OpenMetrics text), `/healthz` (the process is
//! up), `/readyz` (it answers decisions; 503 while shutting down) and, unless
//! `[kubernetes] enabled = false`, the Kubernetes scheduler-extender verbs (`crate::k8s`).

use crate::config::Secret;
use crate::engine::Engine;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, Clone)]
struct HttpState {
    engine: Arc<Engine>,
    ready: Arc<AtomicBool>,
}

/// The routes, sharing the engine's metrics and the ready flag; `token` (the service's, if
/// any) guards the dashboard, whose event streams end when `stop` turns true.
pub fn router(
    engine: Arc<Engine>,
    ready: Arc<AtomicBool>,
    token: Option<Secret>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Router {
    let extender = engine
        .config()
        .kubernetes
        .enabled
        .then(|| crate::k8s::routes(Arc::clone(&engine)));
    let ui = crate::ui::routes(Arc::clone(&engine), token, stop);
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(HttpState { engine, ready })
        .merge(ui);
    match extender {
        Some(k8s) => router.merge(k8s),
        None => router,
    }
}

async fn metrics(State(s): State<HttpState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.engine.metrics().encode(),
    )
}

async fn readyz(State(s): State<HttpState>) -> impl IntoResponse {
    if !s.ready.load(Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down\n".to_string(),
        );
    }
    let (ok, message) = s.engine.ready();
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, format!("{message}\n"))
}
