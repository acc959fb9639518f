//! The model in force: loaded from a model directory, judged against the validation bar, and
//! lent out as `LearnedPolicy` instances (one per concurrent decision, pooled).
//!
//! Loading never panics: a missing directory, a corrupted weights file or a manifest of another
//! feature schema becomes a `ModelState` that says why, and the service falls back.

use lachesis_agent::manifest::{MANIFEST_FILE, WEIGHTS_FILE};
use lachesis_agent::{LearnedPolicy, Manifest, ModelError, Scorer};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Why the model did not (or could not) answer: the label of `fallbacks_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackReason {
    NoModel,
    LoadError,
    SchemaMismatch,
    BelowBar,
    Error,
    Nan,
    Timeout,
    /// Every model slot is still busy (with computations past their deadline): the model is
    /// not asked, so late computations cannot pile up.
    Busy,
    Shield,
}

impl FallbackReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FallbackReason::NoModel => "no-model",
            FallbackReason::LoadError => "load-error",
            FallbackReason::SchemaMismatch => "schema-mismatch",
            FallbackReason::BelowBar => "below-bar",
            FallbackReason::Error => "error",
            FallbackReason::Nan => "nan",
            FallbackReason::Timeout => "timeout",
            FallbackReason::Busy => "busy",
            FallbackReason::Shield => "shield",
        }
    }
}

/// A model directory in memory.
#[derive(Debug)]
pub struct LoadedModel {
    pub path: PathBuf,
    /// First 16 hex digits of a hash of the weights and manifest files.
    pub version: String,
    pub manifest: Manifest,
    scorer: Scorer,
    /// Validation average JCT relative to the best baseline in the manifest (infinite when
    /// the model left jobs unfinished or has no validation table).
    pub relative_jct: f64,
    pub loaded_at_unix_s: u64,
    pool: Mutex<Vec<LearnedPolicy>>,
}

impl LoadedModel {
    /// Reads `dir` (manifest, schema check, weights).
    pub fn load(dir: &Path) -> Result<LoadedModel, (FallbackReason, String)> {
        let manifest = Manifest::read(dir).map_err(classify)?;
        let scorer = lachesis_agent::policy::load_scorer(dir, &manifest).map_err(classify)?;
        let mut hash = Fnv::default();
        for file in [WEIGHTS_FILE, MANIFEST_FILE] {
            let bytes = std::fs::read(dir.join(file)).map_err(|e| {
                (
                    FallbackReason::LoadError,
                    format!("{}: {e}", dir.join(file).display()),
                )
            })?;
            hash.write(&bytes);
        }
        let relative_jct = relative_jct(&manifest);
        Ok(LoadedModel {
            path: dir.to_path_buf(),
            version: format!("{:016x}", hash.0),
            manifest,
            scorer,
            relative_jct,
            loaded_at_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            pool: Mutex::new(Vec::new()),
        })
    }

    /// The name decisions are credited to.
    pub fn decider(&self) -> String {
        format!("model:{}", self.version)
    }

    /// A policy instance for one decision (from the pool, or a new one).
    pub fn policy(&self) -> LearnedPolicy {
        let pooled = self
            .pool
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop();
        pooled
            .unwrap_or_else(|| LearnedPolicy::new(self.decider(), &self.scorer, &self.manifest.env))
    }

    /// Returns a policy instance to the pool, made to forget the snapshot it decided: every
    /// snapshot is decided afresh, so one snapshot always gets one answer.
    pub fn give_back(&self, mut policy: LearnedPolicy) {
        policy.forget();
        let mut pool = self
            .pool
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if pool.len() < 64 {
            pool.push(policy);
        }
    }
}

fn classify(e: ModelError) -> (FallbackReason, String) {
    let reason = match &e {
        ModelError::Schema { .. } | ModelError::Shape { .. } => FallbackReason::SchemaMismatch,
        _ => FallbackReason::LoadError,
    };
    (reason, e.to_string())
}

/// The model's validation average JCT over the best other row of its manifest's table.
pub fn relative_jct(manifest: &Manifest) -> f64 {
    let Some(own) = manifest.validation.iter().find(|r| r.policy == "learned") else {
        return f64::INFINITY;
    };
    if own.unfinished > 0 {
        return f64::INFINITY;
    }
    let best = manifest
        .validation
        .iter()
        .filter(|r| r.policy != "learned" && r.unfinished == 0)
        .map(|r| r.avg_jct_s)
        .fold(f64::INFINITY, f64::min);
    if best.is_finite() && best > 0.0 {
        own.avg_jct_s / best
    } else {
        f64::INFINITY
    }
}

/// What the service knows about its model right now.
#[derive(Debug, Clone)]
pub enum ModelState {
    /// No model configured.
    None,
    /// Loaded and above the bar: it answers.
    Serving(Arc<LoadedModel>),
    /// Loaded but below the validation bar: the baseline answers (cold start).
    Cold(Arc<LoadedModel>, String),
    /// The configured model could not be loaded.
    Failed {
        path: PathBuf,
        reason: FallbackReason,
        detail: String,
    },
}

impl ModelState {
    /// Loads `path` (empty: no model) and judges it against `max_relative_jct`.
    pub fn load(path: &str, max_relative_jct: f64) -> ModelState {
        if path.trim().is_empty() {
            return ModelState::None;
        }
        let dir = PathBuf::from(path);
        match LoadedModel::load(&dir) {
            Err((reason, detail)) => ModelState::Failed {
                path: dir,
                reason,
                detail,
            },
            Ok(m) if m.relative_jct <= max_relative_jct => ModelState::Serving(Arc::new(m)),
            Ok(m) => {
                let why = format!(
                    "validation average JCT is {:.4} of the best baseline's, the bar is {:.4}",
                    m.relative_jct, max_relative_jct
                );
                ModelState::Cold(Arc::new(m), why)
            }
        }
    }

    pub fn status(&self) -> &'static str {
        match self {
            ModelState::None => "none",
            ModelState::Serving(_) => "serving",
            ModelState::Cold(..) => "cold",
            ModelState::Failed { .. } => "failed",
        }
    }

    pub fn version(&self) -> &str {
        match self {
            ModelState::Serving(m) | ModelState::Cold(m, _) => &m.version,
            _ => "",
        }
    }

    /// The model to ask, or why there is none to ask.
    pub fn serving(&self) -> Result<&Arc<LoadedModel>, (FallbackReason, String)> {
        match self {
            ModelState::Serving(m) => Ok(m),
            ModelState::None => Err((FallbackReason::NoModel, "no model configured".into())),
            ModelState::Cold(_, why) => Err((FallbackReason::BelowBar, why.clone())),
            ModelState::Failed { reason, detail, .. } => Err((*reason, detail.clone())),
        }
    }
}

/// FNV-1a, 64 bit: a stable hash (the same on every machine and release), for model versions
/// and A/B buckets.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(pub u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    pub fn hash(bytes: &[u8]) -> u64 {
        let mut h = Fnv::default();
        h.write(bytes);
        h.0
    }
}
