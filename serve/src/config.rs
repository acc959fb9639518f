//! `ServeConfig`: everything `lachesis serve` can be told, as `serve.toml` gives it. Unknown
//! fields are rejected; every field has a documented default, so no file at all is a valid
//! configuration (serve `models/default`, gRPC on 127.0.0.1:50051, HTTP on 127.0.0.1:9090).

use lachesis_env::policy::PolicyOptions;
use lachesis_env::throughput::ThroughputTable;
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The whole service configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    /// Model directory (written by `lachesis train`); empty: heuristics only.
    pub model: String,
    /// The baseline heuristic: the control arm of an A/B split, shadow mode's answer, the first
    /// step of the fallback chain and the cold-start policy.
    pub baseline: String,
    /// Further heuristics to try, in order, when the baseline fails too.
    pub fallback: Vec<String>,
    /// The throughput table jobs' `workload` types are read against: a preset (`gavel`,
    /// `sia`) or a table file (relative to this file). Empty: none; a snapshot that types a
    /// job is then refused. With a table, the heterogeneity-aware heuristics (`fastest`,
    /// `het-las`, `colocate`, `elastic`) may be the baseline or fallbacks.
    pub throughputs: String,
    /// How the model builds a decision from its scores: `batched` (default: every candidate
    /// of a model pass, best first, each placed again by its proposer on what the earlier
    /// ones left; a few passes for a long queue) or `stepwise` (one placement per pass, the
    /// steps of training; 3-4x slower on 1,000 nodes, up to 2% lower average JCT over
    /// 30-day replays). See `lachesis_agent::Deciding` and docs/perf/serve.md for the figures.
    pub deciding: lachesis_agent::Deciding,
    /// How long the model may take for one decision, ms; then the chain answers.
    pub deadline_ms: f64,
    /// Model computations at once (0: one per core). A computation past its deadline keeps
    /// its slot until it ends; with every slot busy the model is not asked (`busy`).
    pub model_slots: usize,
    /// Threads that run decisions off the async runtime (world builds, policies, answers,
    /// model loads); 0: the model slots plus one per core, so a model computation past its
    /// deadline never leaves the fallback chain without a thread. Requests beyond wait for a
    /// thread. More threads than that add no throughput on CPU-bound work, and each thread
    /// brings its own allocator arena: with tokio's default (up to 512) a 10-minute soak of
    /// 8 clients held 12 such threads and the service's RSS crept from 87 to 108 MiB; with
    /// 4 it stayed between 58 and 64 MiB (docs/perf/serve.md has the runs).
    pub blocking_threads: usize,
    /// The model's validation bar: served only if its validation average JCT relative to its
    /// best baseline (manifest's validation table) is at most this; else cold start.
    pub max_relative_jct: f64,
    /// How long a node agent's report (`ReportNodes`) is trusted, ms.
    pub inventory_ttl_ms: u64,
    /// Sessions kept at once (`DecideRequest.session`: the service keeps each caller's cluster
    /// so later requests send only a delta). A new session beyond evicts the least recently
    /// used idle one; with every one busy it is refused (`RESOURCE_EXHAUSTED`). 0: sessions
    /// are refused.
    pub max_sessions: usize,
    /// A session unused this long, seconds, is dropped (its caller then gets
    /// `FAILED_PRECONDITION` and sends a full snapshot).
    pub session_ttl_s: u64,
    /// Accept GPU model names the catalog does not know (a node's `gpu_model`, a job's
    /// `gpu_types`) in `Decide`, `Score` and `Explain` requests, as V100-class models (speed
    /// 1.0). Default `false`: such a name is refused (`INVALID_ARGUMENT`, naming the field and
    /// the nearest catalog names), since a misspelt model would silently be a model of its
    /// own. The Kubernetes extender and `ReportNodes` take them either way.
    pub allow_unknown_gpu_models: bool,
    /// The starvation bound on every answer (`bound.rs`, docs/simulator.md): seconds, or
    /// `"off"`; `"auto"` (the default) derives it from finished jobs' run times, which a
    /// snapshot does not carry, so in the service it is no bound.
    pub starvation_bound: lachesis_env::policy::StarvationBound,
    pub routing: RoutingConfig,
    pub grpc: GrpcConfig,
    pub http: HttpConfig,
    pub auth: AuthConfig,
    pub decision_log: DecisionLogConfig,
    pub kubernetes: KubernetesConfig,
    pub guard: GuardConfig,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            model: "models/default".into(),
            baseline: "tiresias/best-fit/las-preempt".into(),
            fallback: vec!["fifo/first-fit".into()],
            throughputs: String::new(),
            deciding: lachesis_agent::Deciding::Batched,
            deadline_ms: 50.0,
            model_slots: 0,
            blocking_threads: 0,
            max_relative_jct: 1.02,
            inventory_ttl_ms: 60_000,
            max_sessions: 64,
            session_ttl_s: 600,
            allow_unknown_gpu_models: false,
            starvation_bound: lachesis_env::policy::StarvationBound::Auto,
            routing: RoutingConfig::default(),
            grpc: GrpcConfig::default(),
            http: HttpConfig::default(),
            auth: AuthConfig::default(),
            decision_log: DecisionLogConfig::default(),
            kubernetes: KubernetesConfig::default(),
            guard: GuardConfig::default(),
        }
    }
}

/// Who answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RoutingMode {
    /// The model answers (falling back along the chain).
    #[default]
    Model,
    /// The baseline heuristic answers; the model is not consulted.
    Baseline,
    /// Pending jobs are split by a stable hash of `key`: `percent` % go to the model, the rest
    /// to the baseline, on the same snapshot.
    Ab,
    /// Both decide; the baseline's answer is returned, the model's is only logged.
    Shadow,
}

impl RoutingMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RoutingMode::Model => "model",
            RoutingMode::Baseline => "baseline",
            RoutingMode::Ab => "ab",
            RoutingMode::Shadow => "shadow",
        }
    }
}

/// What an A/B split hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SplitKey {
    /// A tenant's jobs all go to one arm (no tenant sees two schedulers).
    #[default]
    Tenant,
    /// Each job independently.
    Job,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoutingConfig {
    pub mode: RoutingMode,
    /// Share of pending jobs (by `key`) the model decides in `ab` mode, 0-100.
    pub percent: f64,
    pub key: SplitKey,
}

impl Default for RoutingConfig {
    fn default() -> Self {
        RoutingConfig {
            mode: RoutingMode::Model,
            percent: 10.0,
            key: SplitKey::Tenant,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcConfig {
    /// Listen address (`host:port`; port 0 picks a free one, printed at start).
    pub addr: String,
    /// Largest request accepted, bytes (a 5,000-node snapshot is about 1 MiB).
    pub max_request_bytes: usize,
    /// Requests decided at once; more wait up to `queue_timeout_ms`, then get
    /// `RESOURCE_EXHAUSTED`.
    pub max_concurrency: usize,
    pub queue_timeout_ms: u64,
    /// TLS (rustls) with this certificate chain and key (PEM); none: plaintext.
    pub tls: Option<TlsConfig>,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        GrpcConfig {
            addr: "127.0.0.1:50051".into(),
            max_request_bytes: 16 * 1024 * 1024,
            max_concurrency: 64,
            queue_timeout_ms: 250,
            tls: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// `/metrics`, `/healthz`, `/readyz`, the `/ui` dashboard and the Kubernetes extender;
    /// empty: no HTTP listener.
    pub addr: String,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            addr: "127.0.0.1:9090".into(),
        }
    }
}

/// Bearer tokens, read from files (or the environment) so they never sit in the config.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// File holding the token every call must present (`authorization: Bearer ...`) when
    /// `require_for_all`; env `LACHESIS_TOKEN` overrides it.
    pub token_file: Option<PathBuf>,
    /// File holding the admin token (`ReloadModel`); env `LACHESIS_ADMIN_TOKEN` overrides it.
    /// With none, admin calls are always refused.
    pub admin_token_file: Option<PathBuf>,
    /// Require the token on every call, not only admin ones.
    pub require_for_all: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DecisionLogConfig {
    /// JSONL file of every request and answer(s); none: no log.
    pub path: Option<PathBuf>,
    /// Rotate when the file passes this size, bytes.
    pub max_bytes: u64,
    /// Rotated files kept (`decisions.jsonl.1` ...); the log never takes more than
    /// `(keep + 1) * max_bytes`.
    pub keep: usize,
    /// Records queued for the writer; when full, records are dropped (and counted), never
    /// the decision delayed.
    pub queue: usize,
}

impl Default for DecisionLogConfig {
    fn default() -> Self {
        DecisionLogConfig {
            path: None,
            max_bytes: 64 * 1024 * 1024,
            keep: 4,
            queue: 4096,
        }
    }
}

/// The Kubernetes scheduler-extender routes on the HTTP listener (`docs/kubernetes.md`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesConfig {
    /// Serve `POST {prefix}/filter`, `{prefix}/prioritize` and `{prefix}/preempt`.
    pub enabled: bool,
    /// Path prefix of the routes: starts with `/`, no trailing `/`.
    pub prefix: String,
    /// Node labels naming a node's GPU model, first present wins (the pod's nodeSelector on
    /// any of them restricts its GPU models too).
    pub gpu_model_labels: Vec<String>,
    /// The extended resource that counts whole GPUs (device plugin).
    pub gpu_resource: String,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        KubernetesConfig {
            enabled: true,
            prefix: "/k8s/v1".into(),
            gpu_model_labels: vec![
                "nvidia.com/gpu.product".into(),
                "lachesis.io/gpu-model".into(),
            ],
            gpu_resource: "nvidia.com/gpu".into(),
        }
    }
}

impl KubernetesConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, message: String| Err(ConfigError::Invalid { field, message });
        let p = &self.prefix;
        let path_ok = p.starts_with('/')
            && (p.len() == 1 || !p.ends_with('/'))
            && !p.contains("//")
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/-_.~".contains(&b));
        if !path_ok {
            return invalid(
                "kubernetes.prefix",
                format!("{p:?} is not a path prefix like \"/k8s/v1\""),
            );
        }
        if self.gpu_model_labels.iter().any(|l| l.trim().is_empty()) {
            return invalid("kubernetes.gpu_model_labels", "an empty label key".into());
        }
        if self.gpu_resource.trim().is_empty() {
            return invalid("kubernetes.gpu_resource", "empty".into());
        }
        Ok(())
    }
}

/// The guard (`crate::guard`): every `interval_s` it judges the model arm against the
/// baseline on the recent traffic of the service's own decision log (`crate::verdict`), exports
/// the verdict, and with `enforce` switches routing to the baseline when the model is losing.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GuardConfig {
    /// Run the guard (needs `decision_log.path`).
    pub enabled: bool,
    /// Switch routing to the baseline when the verdict is losing; false: only report it.
    pub enforce: bool,
    /// Seconds between verdicts (each replays the whole log and simulates both arms on one
    /// thread).
    pub interval_s: u64,
    /// The most recent finished jobs judged, at most.
    pub recent_jobs: usize,
    /// Only jobs submitted within this many hours before the log's end (0: no limit).
    pub recent_hours: f64,
    /// Jobs per window: each window is one unit of the paired comparison.
    pub window_jobs: usize,
    /// Fewer recent finished jobs than this: too little traffic, no verdict.
    pub min_jobs: usize,
    /// Seeds per window (they change only randomised policies' runs).
    pub seeds: u64,
    /// Bootstrap resamples of the interval.
    pub resamples: usize,
    /// Heuristics the guard may also route to: with any, the guard is the service's selector
    /// (`crate::selection`): every run judges the baseline, these and the model arm on the
    /// recent traffic, and routing follows the best (with `enforce`).
    pub candidates: Vec<String>,
    /// The selector switches only to an arm better by more than this share of the followed
    /// arm's average JCT (and with the paired interval below zero).
    pub hysteresis: f64,
}

impl Default for GuardConfig {
    fn default() -> Self {
        let spec = crate::verdict::VerdictSpec::default();
        GuardConfig {
            enabled: false,
            enforce: false,
            interval_s: 3600,
            recent_jobs: spec.recent_jobs,
            recent_hours: spec.recent_hours,
            window_jobs: spec.window_jobs,
            min_jobs: spec.min_jobs,
            seeds: spec.seeds,
            resamples: spec.resamples,
            candidates: Vec::new(),
            hysteresis: 0.02,
        }
    }
}

impl GuardConfig {
    /// The verdict's traffic and statistics; one simulation thread, so the guard takes at
    /// most one core from the decisions.
    pub fn verdict_spec(&self) -> crate::verdict::VerdictSpec {
        crate::verdict::VerdictSpec {
            recent_jobs: self.recent_jobs,
            recent_hours: self.recent_hours,
            window_jobs: self.window_jobs,
            min_jobs: self.min_jobs,
            seeds: self.seeds,
            resamples: self.resamples,
            threads: Some(1),
        }
    }

    fn validate(&self, decision_log: &DecisionLogConfig) -> Result<(), ConfigError> {
        let invalid = |field, message: String| Err(ConfigError::Invalid { field, message });
        if self.enforce && !self.enabled {
            return invalid(
                "guard.enforce",
                "set, but guard.enabled is false: nothing would judge the model".into(),
            );
        }
        if !self.enabled {
            if !self.candidates.is_empty() {
                return invalid(
                    "guard.candidates",
                    "set, but guard.enabled is false: nothing would choose among them".into(),
                );
            }
            return Ok(());
        }
        if !(self.hysteresis.is_finite() && (0.0..1.0).contains(&self.hysteresis)) {
            return invalid(
                "guard.hysteresis",
                format!("{} is not a share in [0, 1)", self.hysteresis),
            );
        }
        if decision_log.path.is_none() {
            return invalid(
                "guard.enabled",
                "the guard judges the service's own decision log: set decision_log.path".into(),
            );
        }
        if self.interval_s == 0 {
            return invalid("guard.interval_s", "must be at least 1 second".into());
        }
        self.verdict_spec()
            .validate()
            .map_err(|e| ConfigError::Invalid {
                field: e.field.config_key(),
                message: e.message,
            })
    }
}

/// A token, kept out of logs and debug output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(token: impl Into<String>) -> Self {
        Secret(token.into())
    }
    /// Constant-time comparison with a presented token.
    pub fn matches(&self, presented: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), presented.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
}

/// Cores this process may use (2 when the platform cannot tell).
fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

impl ServeConfig {
    /// Reads `path`; relative paths inside it are taken from the file's directory.
    pub fn read(path: &Path) -> Result<ServeConfig, ConfigError> {
        let file_err = |message: String| ConfigError::File {
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| file_err(e.to_string()))?;
        let mut cfg: ServeConfig = toml::from_str(&text).map_err(|e| file_err(e.to_string()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let rebase = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        if !cfg.model.is_empty() && Path::new(&cfg.model).is_relative() {
            cfg.model = base.join(&cfg.model).to_string_lossy().into_owned();
        }
        let table = cfg.throughputs.trim();
        if !table.is_empty()
            && lachesis_env::throughput::ThroughputPreset::parse(table).is_none()
            && Path::new(table).is_relative()
        {
            cfg.throughputs = base.join(table).to_string_lossy().into_owned();
        }
        if let Some(tls) = cfg.grpc.tls.as_mut() {
            rebase(&mut tls.cert);
            rebase(&mut tls.key);
        }
        for p in [
            cfg.auth.token_file.as_mut(),
            cfg.auth.admin_token_file.as_mut(),
            cfg.decision_log.path.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            rebase(p);
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Model computations allowed at once: `model_slots`, or one per core for 0.
    pub fn model_slots(&self) -> usize {
        match self.model_slots {
            0 => cores(),
            n => n,
        }
    }

    /// Threads for blocking work: `blocking_threads`, or for 0 the model slots plus one per
    /// core.
    pub fn blocking_threads(&self) -> usize {
        match self.blocking_threads {
            0 => self.model_slots() + cores(),
            n => n,
        }
    }

    /// The throughput table `throughputs` names, loaded now; `None` when none is configured.
    pub fn throughput_table(&self) -> Result<Option<Arc<ThroughputTable>>, ConfigError> {
        let spec = self.throughputs.trim();
        if spec.is_empty() {
            return Ok(None);
        }
        lachesis_env::throughput::load_table(spec)
            .map(|t| Some(Arc::new(t)))
            .map_err(|e| ConfigError::Invalid {
                field: "throughputs",
                message: e.to_string(),
            })
    }

    /// How the heuristic chain's policies are built: with the throughput table, when one is
    /// configured (the parts that read rates refuse to be built without it).
    pub fn policy_options(&self) -> Result<PolicyOptions, ConfigError> {
        Ok(PolicyOptions {
            throughputs: self.throughput_table()?,
            ..PolicyOptions::default()
        })
    }

    /// Checks values serde cannot: ranges, policy names.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, message: String| Err(ConfigError::Invalid { field, message });
        if self.blocking_threads != 0 && self.blocking_threads <= self.model_slots() {
            return invalid(
                "blocking_threads",
                format!(
                    "{} threads leave none for the fallback chain while {} model \
                     computations run past their deadline; set more than model_slots, or 0",
                    self.blocking_threads,
                    self.model_slots()
                ),
            );
        }
        if !(self.deadline_ms.is_finite() && self.deadline_ms >= 0.0) {
            return invalid(
                "deadline_ms",
                format!("{} is not a duration", self.deadline_ms),
            );
        }
        if !(self.max_relative_jct.is_finite() && self.max_relative_jct > 0.0) {
            return invalid(
                "max_relative_jct",
                format!("{} is not a positive ratio", self.max_relative_jct),
            );
        }
        if !(0.0..=100.0).contains(&self.routing.percent) {
            return invalid(
                "routing.percent",
                format!("{} is not in 0-100", self.routing.percent),
            );
        }
        let options = self.policy_options()?;
        for (field, name) in std::iter::once(("baseline", &self.baseline))
            .chain(self.fallback.iter().map(|f| ("fallback", f)))
            .chain(
                self.guard
                    .candidates
                    .iter()
                    .map(|c| ("guard.candidates", c)),
            )
        {
            if lachesis_env::policy::Select::parse_name(name).is_some() {
                // It rolls a simulator forward; a snapshot is not one (yet): it would only
                // ever follow its first candidate.
                return invalid(
                    field,
                    format!(
                        "{name}: the select meta-policy needs a simulator to roll forward and \
                         the service decides on snapshots; list its candidates in [guard] \
                         candidates (the service's selector, on the recent traffic) or run \
                         select in simulate/compare"
                    ),
                );
            }
            if let Err(e) = lachesis_env::policy::build_policy_with(name, &options) {
                return invalid(field, e.to_string());
            }
        }
        if self.grpc.max_concurrency == 0 {
            return invalid("grpc.max_concurrency", "must be at least 1".into());
        }
        if self.grpc.max_request_bytes < 1024 {
            return invalid(
                "grpc.max_request_bytes",
                format!(
                    "{} bytes is too small for any snapshot",
                    self.grpc.max_request_bytes
                ),
            );
        }
        if self.decision_log.max_bytes < 4096 || self.decision_log.queue == 0 {
            return invalid(
                "decision_log",
                "max_bytes must be at least 4096 and queue at least 1".into(),
            );
        }
        self.kubernetes.validate()?;
        self.guard.validate(&self.decision_log)?;
        if self.routing.mode != RoutingMode::Baseline && self.model.is_empty() {
            // Allowed (cold start), but worth knowing: the chain will answer.
            tracing::warn!(
                mode = self.routing.mode.as_str(),
                "no model configured: the baseline answers every request"
            );
        }
        Ok(())
    }

    /// The tokens, read now (a missing file is an error naming it).
    pub fn tokens(&self) -> Result<(Option<Secret>, Option<Secret>), ConfigError> {
        let read = |env: &str, file: &Option<PathBuf>| -> Result<Option<Secret>, ConfigError> {
            if let Ok(t) = std::env::var(env)
                && !t.trim().is_empty()
            {
                return Ok(Some(Secret::new(t.trim())));
            }
            match file {
                None => Ok(None),
                Some(p) => {
                    let t = std::fs::read_to_string(p).map_err(|e| ConfigError::File {
                        path: p.clone(),
                        message: e.to_string(),
                    })?;
                    let t = t.trim();
                    if t.is_empty() {
                        return Err(ConfigError::File {
                            path: p.clone(),
                            message: "the token file is empty".into(),
                        });
                    }
                    Ok(Some(Secret::new(t)))
                }
            }
        };
        let all = read("LACHESIS_TOKEN", &self.auth.token_file)?;
        let admin = read("LACHESIS_ADMIN_TOKEN", &self.auth.admin_token_file)?;
        if self.auth.require_for_all && all.is_none() {
            return Err(ConfigError::Invalid {
                field: "auth.require_for_all",
                message: "set, but no token_file (or LACHESIS_TOKEN) gives the token".into(),
            });
        }
        Ok((all, admin))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocking_threads_default_to_model_slots_plus_cores_and_must_exceed_the_slots() {
        let cores = cores();
        let cfg = ServeConfig::default();
        assert_eq!(cfg.model_slots(), cores);
        assert_eq!(cfg.blocking_threads(), 2 * cores);
        let cfg = ServeConfig {
            model_slots: 1,
            blocking_threads: 2,
            ..ServeConfig::default()
        };
        assert_eq!(cfg.blocking_threads(), 2);
        assert!(cfg.validate().is_ok());
        let cfg = ServeConfig {
            model_slots: 2,
            blocking_threads: 2,
            ..ServeConfig::default()
        };
        let e = cfg.validate().unwrap_err().to_string();
        assert!(
            e.contains("blocking_threads") && e.contains("model_slots"),
            "{e}"
        );
        let parsed: ServeConfig = toml::from_str("blocking_threads = 9\nmodel_slots = 3").unwrap();
        assert_eq!((parsed.blocking_threads(), parsed.model_slots()), (9, 3));
    }

    #[test]
    fn a_bad_guard_is_refused_naming_its_field() {
        let cases = [
            ("[guard]\nenforce = true\n", "guard.enforce"),
            ("[guard]\nenabled = true\n", "guard.enabled"),
            (
                "[decision_log]\npath = \"d.jsonl\"\n[guard]\nenabled = true\ninterval_s = 0\n",
                "guard.interval_s",
            ),
            (
                "[decision_log]\npath = \"d.jsonl\"\n[guard]\nenabled = true\nwindow_jobs = 150\n",
                "guard.min_jobs",
            ),
            (
                "[decision_log]\npath = \"d.jsonl\"\n[guard]\nenabled = true\nrecent_hours = -1.0\n",
                "guard.recent_hours",
            ),
            (
                "[guard]\ncandidates = [\"sjf/best-fit\"]\n",
                "guard.candidates",
            ),
            (
                "[decision_log]\npath = \"d.jsonl\"\n[guard]\nenabled = true\ncandidates = \
                 [\"sjf/no-such-placer\"]\n",
                "guard.candidates",
            ),
            (
                "[decision_log]\npath = \"d.jsonl\"\n[guard]\nenabled = true\ncandidates = \
                 [\"select\"]\n",
                "guard.candidates",
            ),
            (
                "[decision_log]\npath = \"d.jsonl\"\n[guard]\nenabled = true\ncandidates = \
                 [\"sjf/best-fit\"]\nhysteresis = 1.5\n",
                "guard.hysteresis",
            ),
        ];
        for (text, field) in cases {
            let cfg: ServeConfig = toml::from_str(text).unwrap();
            let e = cfg.validate().unwrap_err().to_string();
            assert!(e.starts_with(&format!("{field}: ")), "{text}: {e}");
        }
        // Unknown fields are refused by serde, naming them.
        let e = toml::from_str::<ServeConfig>("[guard]\nenabeld = true\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("enabeld"), "{e}");
        let ok: ServeConfig = toml::from_str(
            "[decision_log]\npath = \"d.jsonl\"\n[guard]\nenabled = true\nenforce = true\n",
        )
        .unwrap();
        assert!(ok.validate().is_ok());
        assert!(ServeConfig::default().validate().is_ok(), "off by default");
    }

    #[test]
    fn a_selector_is_refused_where_nothing_can_be_rolled_forward() {
        let cfg: ServeConfig = toml::from_str("baseline = \"select\"\n").unwrap();
        let err = cfg.validate().unwrap_err().to_string();
        assert!(
            err.contains("baseline") && err.contains("needs a simulator"),
            "{err}"
        );
    }

    #[test]
    fn the_throughput_table_lets_the_chain_read_rates() {
        // A modifier that reads rates needs the table.
        let cfg: ServeConfig = toml::from_str("baseline = \"fifo/fastest/colocate\"").unwrap();
        let e = cfg.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("baseline: ") && e.contains("throughput"),
            "{e}"
        );
        let cfg: ServeConfig = toml::from_str(
            "baseline = \"fifo/fastest/colocate\"\nfallback = [\"het-las/fastest/elastic\"]\n\
             throughputs = \"gavel\"",
        )
        .unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.throughput_table().unwrap().unwrap().name(), "gavel");
        // A table that cannot be read is refused, naming the field.
        let cfg: ServeConfig = toml::from_str("throughputs = \"no/such/table.csv\"").unwrap();
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.starts_with("throughputs: "), "{e}");
    }
}
