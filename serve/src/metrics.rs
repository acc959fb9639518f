//! Prometheus metrics (OpenMetrics text on `/metrics`). Names, all prefixed `lachesis_`:
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `requests_total` | `rpc`, `code` | finished RPCs by gRPC status code |
//! | `request_duration_seconds` | `rpc` | RPC latency, histogram |
//! | `policy_duration_seconds` | `kind` (`model`, `heuristic`) | one policy's decision time |
//! | `fallbacks_total` | `reason` | steps down the fallback chain |
//! | `arm_requests_total` | `arm` (`model`, `baseline`, `ab`, `shadow`) | requests per routing arm |
//! | `ab_jobs_total` | `arm` (`treatment`, `control`) | pending jobs split by A/B |
//! | `shadow_agreement_total` | `agree` | shadow requests where model and baseline agreed |
//! | `placements_total`, `preemptions_total` | | decisions answered |
//! | `inflight_requests` | | requests being decided now |
//! | `model_info` | `version`, `status` | 1 for the model in force |
//! | `model_reloads_total` | `result` | hot reloads |
//! | `decision_log_records_total` | `result` (`written`, `dropped`, `error`) | decision log |
//! | `guard_runs_total` | `verdict` (`losing`, `winning`, `inconclusive`, `too-little-traffic`, `no-model`, `error`) | the guard's verdicts |
//! | `guard_jct_difference_ratio`, `_low`, `_high` | | (model - baseline) / baseline average JCT on recent traffic, and its 95% interval (NaN: not judged) |
//! | `guard_model_losing` | | 1 when the last verdict was losing |
//! | `guard_switched` | | 1 while the guard holds routing on the baseline |
//! | `guard_switches_total` | | times the guard switched routing to the baseline |
//! | `guard_jobs` | | recent finished jobs the last verdict judged |
//! | `guard_last_run_timestamp_seconds` | | when the guard last gave a verdict (start time before the first) |
//! | `guard_interval_seconds` | | `guard.interval_s` (0: no guard) |
//! | `guard_following` | `policy` | with `guard.candidates` (the selector): 1 for the arm it follows, 0 for the others |

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Metric, Registry};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

type Labels = Vec<(&'static str, String)>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;
/// A gauge of a real number.
pub type RealGauge = Gauge<f64, AtomicU64>;

fn latency_histogram() -> Histogram {
    // 20 us .. ~5 s
    Histogram::new(exponential_buckets(20e-6, 2.0, 19))
}

/// The registry while it is filled, noting the sample names each metric will export.
struct Registering {
    registry: Registry,
    names: Vec<String>,
}

impl Registering {
    fn register<M: Metric + TypedMetric>(&mut self, name: &str, help: &str, metric: M) {
        let full = format!("lachesis_{name}");
        match M::TYPE {
            MetricType::Counter => self.names.push(format!("{full}_total")),
            MetricType::Histogram => self.names.extend(
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .map(|suffix| format!("{full}{suffix}")),
            ),
            _ => self.names.push(full),
        }
        self.registry.register(name, help, metric);
    }
}

/// Every metric the service exports, registered once.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Every sample name exported (`names`).
    names: Vec<String>,
    pub requests: Family<Labels, Counter>,
    pub request_duration: Histograms,
    pub policy_duration: Histograms,
    pub fallbacks: Family<Labels, Counter>,
    pub arm_requests: Family<Labels, Counter>,
    pub ab_jobs: Family<Labels, Counter>,
    pub shadow_agreement: Family<Labels, Counter>,
    pub placements: Counter,
    pub preemptions: Counter,
    /// Model passes (shortlist, features, scores) run by the model arm.
    pub model_passes: Counter,
    /// Decide requests on a session, by kind: `snapshot` (opened or resynced), `delta`
    /// (answered), `refused` (unknown session, stale revision, or none free).
    pub session_requests: Family<Labels, Counter>,
    /// Sessions held.
    pub sessions: Gauge,
    pub inflight: Gauge,
    pub model_info: Family<Labels, Gauge>,
    pub model_reloads: Family<Labels, Counter>,
    pub decision_log: Family<Labels, Counter>,
    /// The guard's verdicts by outcome (`crate::guard`).
    pub guard_runs: Family<Labels, Counter>,
    /// (model - baseline) / baseline average JCT, and its interval; NaN when not judged.
    pub guard_ratio: RealGauge,
    pub guard_ratio_low: RealGauge,
    pub guard_ratio_high: RealGauge,
    pub guard_losing: Gauge,
    pub guard_switched: Gauge,
    pub guard_switches: Counter,
    pub guard_jobs: Gauge,
    pub guard_last_run: RealGauge,
    pub guard_interval: Gauge,
    /// The selector's arms: 1 for the one followed (`guard.candidates`).
    pub guard_following: Family<Labels, Gauge>,
    /// The labels `model_info` is set for now (cleared on change).
    model_labels: Mutex<Option<Labels>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registering {
            registry: Registry::with_prefix("lachesis"),
            names: Vec::new(),
        };
        let m = Metrics {
            requests: Family::default(),
            request_duration: Family::new_with_constructor(latency_histogram),
            policy_duration: Family::new_with_constructor(latency_histogram),
            fallbacks: Family::default(),
            arm_requests: Family::default(),
            ab_jobs: Family::default(),
            shadow_agreement: Family::default(),
            placements: Counter::default(),
            preemptions: Counter::default(),
            model_passes: Counter::default(),
            session_requests: Family::default(),
            sessions: Gauge::default(),
            inflight: Gauge::default(),
            model_info: Family::default(),
            model_reloads: Family::default(),
            decision_log: Family::default(),
            guard_runs: Family::default(),
            guard_ratio: RealGauge::default(),
            guard_ratio_low: RealGauge::default(),
            guard_ratio_high: RealGauge::default(),
            guard_losing: Gauge::default(),
            guard_switched: Gauge::default(),
            guard_switches: Counter::default(),
            guard_jobs: Gauge::default(),
            guard_last_run: RealGauge::default(),
            guard_interval: Gauge::default(),
            guard_following: Family::default(),
            model_labels: Mutex::new(None),
            registry: Registry::default(),
            names: Vec::new(),
        };
        registry.register(
            "requests",
            "Finished RPCs by status code",
            m.requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "RPC latency",
            m.request_duration.clone(),
        );
        registry.register(
            "policy_duration_seconds",
            "Time one policy took to decide",
            m.policy_duration.clone(),
        );
        registry.register(
            "fallbacks",
            "Steps down the fallback chain",
            m.fallbacks.clone(),
        );
        registry.register(
            "arm_requests",
            "Requests per routing arm",
            m.arm_requests.clone(),
        );
        registry.register(
            "ab_jobs",
            "Pending jobs split by A/B arm",
            m.ab_jobs.clone(),
        );
        registry.register(
            "shadow_agreement",
            "Shadow requests where model and baseline agreed",
            m.shadow_agreement.clone(),
        );
        registry.register("placements", "Jobs placed in answers", m.placements.clone());
        registry.register(
            "preemptions",
            "Jobs preempted in answers",
            m.preemptions.clone(),
        );
        registry.register(
            "session_requests",
            "Decide requests on a session, by kind (snapshot, delta, refused)",
            m.session_requests.clone(),
        );
        registry.register("sessions", "Sessions held", m.sessions.clone());
        registry.register(
            "model_passes",
            "Model passes (shortlist, features, scores) run by the model arm",
            m.model_passes.clone(),
        );
        registry.register(
            "inflight_requests",
            "Requests being decided",
            m.inflight.clone(),
        );
        registry.register("model_info", "The model in force (1)", m.model_info.clone());
        registry.register(
            "model_reloads",
            "Hot model reloads",
            m.model_reloads.clone(),
        );
        registry.register(
            "decision_log_records",
            "Decision log records by outcome",
            m.decision_log.clone(),
        );
        registry.register(
            "guard_runs",
            "The guard's verdicts by outcome",
            m.guard_runs.clone(),
        );
        registry.register(
            "guard_jct_difference_ratio",
            "(model - baseline) / baseline average JCT on recent traffic (NaN: not judged)",
            m.guard_ratio.clone(),
        );
        registry.register(
            "guard_jct_difference_ratio_low",
            "Lower end of the ratio's 95% interval",
            m.guard_ratio_low.clone(),
        );
        registry.register(
            "guard_jct_difference_ratio_high",
            "Upper end of the ratio's 95% interval",
            m.guard_ratio_high.clone(),
        );
        registry.register(
            "guard_model_losing",
            "1 when the guard's last verdict was that the model is losing",
            m.guard_losing.clone(),
        );
        registry.register(
            "guard_switched",
            "1 while the guard holds routing on the baseline",
            m.guard_switched.clone(),
        );
        registry.register(
            "guard_switches",
            "Times the guard switched routing to the baseline",
            m.guard_switches.clone(),
        );
        registry.register(
            "guard_jobs",
            "Recent finished jobs the guard's last verdict judged",
            m.guard_jobs.clone(),
        );
        registry.register(
            "guard_last_run_timestamp_seconds",
            "When the guard last gave a verdict (its start before the first)",
            m.guard_last_run.clone(),
        );
        registry.register(
            "guard_interval_seconds",
            "Seconds between the guard's verdicts (0: no guard)",
            m.guard_interval.clone(),
        );
        registry.register(
            "guard_following",
            "With guard.candidates: 1 for the arm the selector follows, 0 for the others",
            m.guard_following.clone(),
        );
        Metrics {
            registry: registry.registry,
            names: registry.names,
            ..m
        }
    }

    pub fn count(family: &Family<Labels, Counter>, key: &'static str, value: &str) {
        family.get_or_create(&vec![(key, value.to_string())]).inc();
    }

    pub fn observe(family: &Histograms, key: &'static str, value: &str, seconds: f64) {
        family
            .get_or_create(&vec![(key, value.to_string())])
            .observe(seconds);
    }

    pub fn request(&self, rpc: &str, code: tonic::Code, seconds: f64) {
        self.requests
            .get_or_create(&vec![
                ("rpc", rpc.to_string()),
                ("code", format!("{code:?}")),
            ])
            .inc();
        Self::observe(&self.request_duration, "rpc", rpc, seconds);
    }

    /// Marks `version`/`status` as the model in force.
    pub fn set_model(&self, version: &str, status: &str) {
        let labels = vec![
            ("version", version.to_string()),
            ("status", status.to_string()),
        ];
        let mut current = self
            .model_labels
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(old) = current.take() {
            self.model_info.remove(&old);
        }
        self.model_info.get_or_create(&labels).set(1);
        *current = Some(labels);
    }

    /// The value of counter `family{key=value}` (tests and reports).
    pub fn counter_value(family: &Family<Labels, Counter>, key: &'static str, value: &str) -> u64 {
        family.get_or_create(&vec![(key, value.to_string())]).get()
    }

    /// Every sample name the service exports, whether or not it has a value yet (a labelled
    /// family shows in `encode` only once one of its series exists): counters with `_total`,
    /// histograms with `_bucket`, `_sum` and `_count`. For checks of dashboards and alert rules.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_list_every_sample_encode_writes_and_the_empty_families_too() {
        let m = Metrics::new();
        assert!(!m.encode().contains("lachesis_fallbacks_total"));
        assert!(m.names().iter().any(|n| n == "lachesis_fallbacks_total"));
        Metrics::count(&m.fallbacks, "reason", "timeout");
        m.request("Decide", tonic::Code::Ok, 0.001);
        m.set_model("v1", "serving");
        let text = m.encode();
        let samples: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .collect();
        assert!(samples.contains(&"lachesis_request_duration_seconds_bucket"));
        for name in samples {
            assert!(m.names().iter().any(|n| n == name), "{name} is not named");
        }
    }
}
