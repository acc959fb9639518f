//! The bridge's Prometheus metrics (OpenMetrics text on `/metrics` of `metrics_addr`), all
//! prefixed `lachesis_bridge_`:
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `cycles_total` | `result` (`ok`, `error`) | cycles run; `error`: Slurm could not be read or driven |
//! | `cycle_duration_seconds` | | one cycle, histogram |
//! | `placements_total` | | jobs pinned and released |
//! | `preemptions_total` | | jobs requeued for a preemption |
//! | `refused_total` | | placements the bridge's own check refused |
//! | `pin_errors_total` | | pins Slurm failed (the job stays held, decided again) |
//! | `released_to_slurm_total` | | jobs handed to Slurm's scheduler (fail-open, unsupported shape) |
//! | `reheld_total` | | released jobs that never started, held again |
//! | `service_errors_total` | | cycles where the service could not be asked |
//! | `held_jobs` | | managed held jobs the last cycle decided |
//! | `service_down` | | 1 while the service is unreachable |

use super::bridge::CycleReport;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

#[derive(Debug)]
pub struct BridgeMetrics {
    registry: Registry,
    pub cycles: Family<Labels, Counter>,
    pub cycle_duration: Histogram,
    pub placements: Counter,
    pub preemptions: Counter,
    pub refused: Counter,
    pub pin_errors: Counter,
    pub to_slurm: Counter,
    pub reheld: Counter,
    pub service_errors: Counter,
    pub held: Gauge,
    pub service_down: Gauge,
}

impl Default for BridgeMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl BridgeMetrics {
    pub fn new() -> Self {
        let mut m = BridgeMetrics {
            registry: Registry::with_prefix("lachesis_bridge"),
            cycles: Family::default(),
            // 1 ms .. ~65 s
            cycle_duration: Histogram::new(exponential_buckets(1e-3, 2.0, 17)),
            placements: Counter::default(),
            preemptions: Counter::default(),
            refused: Counter::default(),
            pin_errors: Counter::default(),
            to_slurm: Counter::default(),
            reheld: Counter::default(),
            service_errors: Counter::default(),
            held: Gauge::default(),
            service_down: Gauge::default(),
        };
        let r = &mut m.registry;
        r.register("cycles", "Cycles run, by result", m.cycles.clone());
        r.register(
            "cycle_duration_seconds",
            "Duration of one cycle",
            m.cycle_duration.clone(),
        );
        r.register(
            "placements",
            "Jobs pinned and released",
            m.placements.clone(),
        );
        r.register(
            "preemptions",
            "Jobs requeued for a preemption",
            m.preemptions.clone(),
        );
        r.register(
            "refused",
            "Placements the bridge's check refused",
            m.refused.clone(),
        );
        r.register(
            "pin_errors",
            "Pins Slurm failed (the job stays held)",
            m.pin_errors.clone(),
        );
        r.register(
            "released_to_slurm",
            "Jobs handed to Slurm's own scheduler",
            m.to_slurm.clone(),
        );
        r.register(
            "reheld",
            "Released jobs that never started, held again",
            m.reheld.clone(),
        );
        r.register(
            "service_errors",
            "Cycles where the decision service could not be asked",
            m.service_errors.clone(),
        );
        r.register(
            "held_jobs",
            "Managed held jobs the last cycle decided",
            m.held.clone(),
        );
        r.register(
            "service_down",
            "1 while the decision service is unreachable",
            m.service_down.clone(),
        );
        m
    }

    /// Counts one cycle's outcome.
    pub fn record(&self, result: Result<&CycleReport, ()>, seconds: f64) {
        self.cycle_duration.observe(seconds);
        let Ok(r) = result else {
            self.cycles
                .get_or_create(&vec![("result", "error".into())])
                .inc();
            return;
        };
        self.cycles
            .get_or_create(&vec![("result", "ok".into())])
            .inc();
        self.placements.inc_by(r.placed.len() as u64);
        self.preemptions.inc_by(r.preempted.len() as u64);
        self.refused.inc_by(r.refused.len() as u64);
        self.pin_errors.inc_by(r.pin_failed.len() as u64);
        self.to_slurm.inc_by(r.to_slurm.len() as u64);
        self.reheld.inc_by(r.reheld.len() as u64);
        self.held.set(r.candidates as i64);
        if r.service_error.is_some() {
            self.service_errors.inc();
            self.service_down.set(1);
        } else if r.candidates > 0 {
            self.service_down.set(0);
        }
    }

    /// OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Serves `/metrics` and `/healthz` on `listener` until the future is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: std::sync::Arc<BridgeMetrics>,
) -> std::io::Result<()> {
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = std::sync::Arc::clone(&metrics);
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        m.encode(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }));
    axum::serve(listener, app).await
}
