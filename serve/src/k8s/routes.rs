//! The HTTP face of the extender: `POST {prefix}/filter`, `{prefix}/prioritize`,
//! `{prefix}/preempt` on the service's HTTP listener, with the body limit
//! (`grpc.max_request_bytes`), the concurrency limit (`grpc.max_concurrency`, waiting up to
//! `grpc.queue_timeout_ms`) and the request metrics gRPC has (`rpc` = `k8s/filter`, ...).
//!
//! Status codes, as kube-scheduler reads them: a body that is not the verb's JSON is 400
//! naming the line and column; input the extender cannot use (a bad quantity, a node listed
//! twice) is 200 with `Error` set for filter (its result has the field), 422 for prioritize
//! and preempt (theirs do not: kube-scheduler reads any non-200 as the extender's error);
//! 413 above the size limit, 503 when too busy, 500 when the service itself failed.

use super::extender::{Extender, VerbError, blocking};
use super::types::{ExtenderArgs, ExtenderFilterResult, ExtenderPreemptionArgs};
use crate::engine::Engine;
use axum::Router;
use axum::body::{Body, HttpBody};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tonic::Code;

#[derive(Debug, Clone)]
struct K8sState {
    extender: Extender,
    engine: Arc<Engine>,
    permits: Arc<Semaphore>,
}

/// The extender's routes under the configured prefix.
pub fn routes(engine: Arc<Engine>) -> Router {
    let cfg = engine.config();
    let prefix = cfg.kubernetes.prefix.trim_end_matches('/').to_string();
    let state = K8sState {
        extender: Extender::new(Arc::clone(&engine)),
        permits: Arc::new(Semaphore::new(cfg.grpc.max_concurrency)),
        engine,
    };
    Router::new()
        .route(&format!("{prefix}/filter"), post(filter))
        .route(&format!("{prefix}/prioritize"), post(prioritize))
        .route(&format!("{prefix}/preempt"), post(preempt))
        .with_state(state)
}

/// An answer and the status code it is counted under.
struct Outcome {
    response: Response,
    code: Code,
}

fn json<T: Serialize>(status: StatusCode, body: &T, code: Code) -> Outcome {
    match serde_json::to_vec(body) {
        Ok(bytes) => Outcome {
            response: (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
            code,
        },
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("writing the answer: {e}"),
            Code::Internal,
        ),
    }
}

fn text(status: StatusCode, message: String, code: Code) -> Outcome {
    Outcome {
        response: (status, format!("{message}\n")).into_response(),
        code,
    }
}

/// Reads at most `limit` bytes of `body`; `Err` is the answer to give instead.
async fn read_body(mut body: Body, limit: usize) -> Result<Vec<u8>, Outcome> {
    let mut buf = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(|e| {
            text(
                StatusCode::BAD_REQUEST,
                format!("reading the body: {e}"),
                Code::InvalidArgument,
            )
        })?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > limit {
                return Err(text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the body is larger than grpc.max_request_bytes ({limit} bytes)"),
                    Code::OutOfRange,
                ));
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf)
}

/// The guards around one verb: a concurrency permit, the body read and parsed as `A`, the
/// verb, and the request counted and timed.
async fn guarded<A, F, Fut>(
    s: &K8sState,
    verb: &'static str,
    what: &'static str,
    body: Body,
    run: F,
) -> Response
where
    A: DeserializeOwned,
    F: FnOnce(A) -> Fut,
    Fut: std::future::Future<Output = Outcome>,
{
    let started = Instant::now();
    let cfg = s.engine.config();
    let metrics = s.engine.metrics();
    let outcome = async {
        let queue = Duration::from_millis(cfg.grpc.queue_timeout_ms);
        let Ok(Ok(_permit)) = tokio::time::timeout(queue, s.permits.acquire()).await else {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "too many requests in flight (limit {}), try again",
                    cfg.grpc.max_concurrency
                ),
                Code::ResourceExhausted,
            );
        };
        metrics.inflight.inc();
        let outcome = async {
            let bytes = match read_body(body, cfg.grpc.max_request_bytes).await {
                Ok(b) => b,
                Err(o) => return o,
            };
            match serde_json::from_slice::<A>(&bytes) {
                Ok(args) => run(args).await,
                Err(e) => text(
                    StatusCode::BAD_REQUEST,
                    format!("{verb}: the body is not an {what}: {e}"),
                    Code::InvalidArgument,
                ),
            }
        }
        .await;
        metrics.inflight.dec();
        outcome
    }
    .await;
    let rpc = format!("k8s/{verb}");
    metrics.request(&rpc, outcome.code, started.elapsed().as_secs_f64());
    if outcome.code == Code::Internal {
        tracing::warn!(rpc = %rpc, "extender request failed");
    }
    outcome.response
}

fn verb_error(e: VerbError) -> Outcome {
    match e {
        VerbError::Input(e) => text(
            StatusCode::UNPROCESSABLE_ENTITY,
            e.to_string(),
            Code::InvalidArgument,
        ),
        VerbError::Internal(m) => text(StatusCode::INTERNAL_SERVER_ERROR, m, Code::Internal),
    }
}

async fn filter(State(s): State<K8sState>, body: Body) -> Response {
    let ext = s.extender.clone();
    guarded(
        &s,
        "filter",
        "ExtenderArgs",
        body,
        |args: ExtenderArgs| async move {
            match blocking(move || ext.filter(args)).await {
                Ok(r) => json(StatusCode::OK, &r, Code::Ok),
                // kube-scheduler reads a filter's failure from `Error`.
                Err(VerbError::Input(e)) => json(
                    StatusCode::OK,
                    &ExtenderFilterResult {
                        error: e.to_string(),
                        ..Default::default()
                    },
                    Code::InvalidArgument,
                ),
                Err(e) => verb_error(e),
            }
        },
    )
    .await
}

async fn prioritize(State(s): State<K8sState>, body: Body) -> Response {
    let ext = s.extender.clone();
    guarded(
        &s,
        "prioritize",
        "ExtenderArgs",
        body,
        |args: ExtenderArgs| async move {
            match ext.prioritize(args).await {
                Ok(r) => json(StatusCode::OK, &r, Code::Ok),
                Err(e) => verb_error(e),
            }
        },
    )
    .await
}

async fn preempt(State(s): State<K8sState>, body: Body) -> Response {
    let ext = s.extender.clone();
    guarded(
        &s,
        "preempt",
        "ExtenderPreemptionArgs",
        body,
        |args: ExtenderPreemptionArgs| async move {
            match blocking(move || ext.preempt(args)).await {
                Ok(r) => json(StatusCode::OK, &r, Code::Ok),
                Err(e) => verb_error(e),
            }
        },
    )
    .await
}
