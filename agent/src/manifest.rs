//! A model directory: `model.bpk` (the `Scorer`'s weights, burnpack), `manifest.json` (what
//! the weights mean and where they came from) and `MODEL_CARD.md` (for people).
//!
//! The manifest is checked before any weight is read: a model trained on another feature
//! schema (or other row widths) is refused with a message that says which and what to do.

use lachesis_env::gym::{
    CANDIDATE_WIDTH, EnvConfig, FEATURE_SCHEMA_VERSION, GLOBAL_WIDTH, MAX_CANDIDATES,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The manifest's own format version.
pub const MANIFEST_FORMAT: u32 = 1;
pub const WEIGHTS_FILE: &str = "model.bpk";
pub const MANIFEST_FILE: &str = "manifest.json";
pub const CARD_FILE: &str = "MODEL_CARD.md";

/// What a model was trained on and with, and how it did on validation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: u32,
    pub feature_schema_version: u32,
    pub candidate_width: usize,
    pub global_width: usize,
    pub max_candidates: usize,
    /// Hidden width of the `Scorer`.
    pub hidden: usize,
    /// The environment the policy acts in (shortlist size, proposers, reward).
    pub env: EnvConfig,
    pub training: TrainingRecord,
    /// Validation results of the kept checkpoint beside the baselines (filled by training,
    /// replaced by `lachesis compare` tables in the model card).
    #[serde(default)]
    pub validation: Vec<ValidationRow>,
}

/// Provenance of the weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TrainingRecord {
    /// The training config as given (TOML text after overrides).
    pub config: String,
    /// Traces and how they were split (fractions, cut times).
    pub data: Vec<DataRecord>,
    pub seed: u64,
    pub git_revision: String,
    /// The behaviour-cloning teacher, if warm-started.
    pub teacher: Option<String>,
    pub ppo_iterations: u64,
    pub env_steps: u64,
    pub wall_s: f64,
    /// The iteration whose checkpoint was kept (best validation average JCT).
    pub best_iteration: u64,
    /// Policy-improvement rounds after cloning (`[improve]`), if any.
    pub improve: Option<ImproveRecord>,
}

/// Where the policy-improvement labels came from, and how each round went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ImproveRecord {
    /// What the labels are, in words (lookahead over predicted, never true, durations).
    pub label_source: String,
    /// The `[improve]` settings, as TOML.
    pub settings: String,
    /// One row per round run (empty when the run was resumed after its rounds).
    pub rounds: Vec<ImproveRound>,
}

/// One improvement round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ImproveRound {
    /// States labelled.
    pub labels: usize,
    /// Share of the labels that are not the teacher's choice.
    pub teacher_disagreement: f64,
    /// Mean margin of the label over the next best action (job-time units of the reward).
    pub mean_margin: f64,
    /// Median wall seconds to label one state.
    pub median_label_s: f64,
    /// The refitted model's validation score (geometric-mean average JCT relative to the
    /// first baseline; its average JCT without baselines).
    pub validation_score: f64,
}

/// One training trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct DataRecord {
    pub trace: String,
    pub cluster: String,
    pub jobs: usize,
    pub train_fraction: f64,
    pub validation_fraction: f64,
    /// Submit times (s) where validation and test begin.
    pub cuts_s: [f64; 2],
    /// The behaviour-cloning teacher of this trace's episodes (`bc.teacher`, or the one
    /// chosen by replay).
    pub teacher: Option<String>,
    /// With `bc.teacher = "replay"`: each candidate's geometric-mean average JCT (s) over the
    /// training windows replayed (infinite when it left a job unfinished or cannot run on the
    /// trace; written `null`, as JSON has no infinity).
    #[serde(with = "infinite_as_null")]
    pub teacher_scores: Vec<(String, f64)>,
}

/// `(name, score)` pairs with a score that may be infinite: written `null` where it is not
/// finite, read back as infinity.
mod infinite_as_null {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(rows: &[(String, f64)], s: S) -> Result<S::Ok, S::Error> {
        let rows: Vec<(&str, Option<f64>)> = rows
            .iter()
            .map(|(n, x)| (n.as_str(), x.is_finite().then_some(*x)))
            .collect();
        rows.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, f64)>, D::Error> {
        let rows: Vec<(String, Option<f64>)> = Vec::deserialize(d)?;
        Ok(rows
            .into_iter()
            .map(|(n, x)| (n, x.unwrap_or(f64::INFINITY)))
            .collect())
    }
}

/// A policy's validation average over the same units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValidationRow {
    pub policy: String,
    pub avg_jct_s: f64,
    pub p99_jct_s: f64,
    pub gpu_alloc: f64,
    pub frag: f64,
    /// Jobs left unfinished over all units (their JCT is not in the averages).
    #[serde(default)]
    pub unfinished: u64,
    pub units: usize,
}

/// A model directory that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a valid manifest: {message}")]
    Manifest { path: PathBuf, message: String },
    #[error(
        "{path}: the model was trained on feature schema v{found}, this build speaks v{expected}: \
         retrain it with `lachesis train` (the observation layout changed, its weights would \
         read the wrong features)"
    )]
    Schema {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    #[error("{path}: {field} is {found}, this build has {expected}: retrain the model")]
    Shape {
        path: PathBuf,
        field: &'static str,
        found: usize,
        expected: usize,
    },
    #[error("{path}: cannot load the weights: {message}")]
    Weights { path: PathBuf, message: String },
}

impl Manifest {
    /// A manifest for this build's schema.
    pub fn new(hidden: usize, env: EnvConfig, training: TrainingRecord) -> Self {
        Manifest {
            format: MANIFEST_FORMAT,
            feature_schema_version: FEATURE_SCHEMA_VERSION,
            candidate_width: CANDIDATE_WIDTH,
            global_width: GLOBAL_WIDTH,
            max_candidates: MAX_CANDIDATES,
            hidden,
            env,
            training,
            validation: Vec::new(),
        }
    }

    /// Reads `dir/manifest.json` and checks it against this build.
    pub fn read(dir: &Path) -> Result<Self, ModelError> {
        let path = dir.join(MANIFEST_FILE);
        let text = std::fs::read_to_string(&path).map_err(|source| ModelError::Io {
            path: path.clone(),
            source,
        })?;
        // The schema version first, so an old model gets the schema message rather than a
        // complaint about a field it never had.
        let raw: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| ModelError::Manifest {
                path: path.clone(),
                message: e.to_string(),
            })?;
        let found = raw
            .get("feature_schema_version")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| ModelError::Manifest {
                path: path.clone(),
                message: "no feature_schema_version".into(),
            })?;
        if found != u64::from(FEATURE_SCHEMA_VERSION) {
            return Err(ModelError::Schema {
                path,
                found: u32::try_from(found).unwrap_or(u32::MAX),
                expected: FEATURE_SCHEMA_VERSION,
            });
        }
        let m: Manifest = serde_json::from_value(raw).map_err(|e| ModelError::Manifest {
            path: path.clone(),
            message: e.to_string(),
        })?;
        for (field, found, expected) in [
            ("candidate_width", m.candidate_width, CANDIDATE_WIDTH),
            ("global_width", m.global_width, GLOBAL_WIDTH),
            ("max_candidates", m.max_candidates, MAX_CANDIDATES),
        ] {
            if found != expected {
                return Err(ModelError::Shape {
                    path,
                    field,
                    found,
                    expected,
                });
            }
        }
        if m.format != MANIFEST_FORMAT {
            return Err(ModelError::Manifest {
                path,
                message: format!(
                    "manifest format {} (this build reads {MANIFEST_FORMAT})",
                    m.format
                ),
            });
        }
        m.env.validate().map_err(|e| ModelError::Manifest {
            path: path.clone(),
            message: format!("env.{e}"),
        })?;
        if m.hidden == 0 {
            return Err(ModelError::Manifest {
                path,
                message: "hidden must be at least 1".into(),
            });
        }
        Ok(m)
    }

    /// Writes `dir/manifest.json` (pretty, stable field order).
    pub fn write(&self, dir: &Path) -> Result<(), ModelError> {
        let path = dir.join(MANIFEST_FILE);
        let text = serde_json::to_string_pretty(self).map_err(|e| ModelError::Manifest {
            path: path.clone(),
            message: e.to_string(),
        })?;
        std::fs::write(&path, text + "\n").map_err(|source| ModelError::Io { path, source })
    }
}
