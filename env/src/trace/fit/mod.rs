//! A workload model fitted to a trace, and synthetic traces drawn from it: `WorkloadModel::fit`
//! learns, `WorkloadModel::synth` draws any number of jobs, deterministically per seed.
//! Depends on the job model only, not on the simulator or policies.
//!
//! The model has two independent halves:
//! - [`arrivals`]: when jobs arrive. Batches of jobs submitted close together, whose starts
//!   follow the trace's hour-of-week rhythm (in the trace's own 7-day cycle: relative traces
//!   do not say which weekday their origin is) with busy and quiet spells.
//! - [`shapes`]: what each job is. The empirical mix of exact job shapes (up to 256 classes),
//!   per class its duration distribution and tenants; the trace's runtime-estimate ratios.
//!
//! They meet in [`sequence`]: neighbouring jobs resemble each other (a batch is often a sweep
//! of copies, and busy spells run alike jobs), so a job may copy the previous job's class,
//! and its duration's rank in its class follows the previous one's, with fitted strength.
//!
//! A model is JSON (`WorkloadModel::save`, `WorkloadModel::load`) with a `version`; a model
//! that deserializes is checked, so drawing from it never fails. Example, once the CLI is
//! built on it:
//!
//! ```text
//! lachesis trace fit traces/itp/cluster10.csv --out model.json
//! lachesis trace synth model.json --jobs 20000 --seed 1 --out synth.csv
//! ```

pub mod arrivals;
pub mod dist;
pub mod sequence;
pub mod shapes;
#[cfg(test)]
mod tests;

pub use arrivals::ArrivalModel;
pub use dist::QuantileFn;
pub use sequence::Persistence;
pub use shapes::JobMix;

use crate::job::{JobSpec, Trace};
use crate::units::{JobId, SimTime, TenantId};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The model file format this build writes and reads.
pub const MODEL_VERSION: u32 = 1;

/// Longest time a draw may give, seconds (about 31,700 years): draws beyond it are clamped,
/// so no model, however odd, makes `synth` fail.
const MAX_DRAW_S: f64 = 1e12;

/// A drawn time in seconds as a `SimTime`, clamped to `0..=MAX_DRAW_S`.
fn secs(s: f64) -> SimTime {
    let s = if s.is_nan() {
        0.0
    } else {
        s.clamp(0.0, MAX_DRAW_S)
    };
    SimTime::from_secs_f64(s).expect("clamped to a representable time")
}

/// Why a model could not be fitted to a trace.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    #[error("cannot fit a workload model to an empty trace")]
    EmptyTrace,
    #[error("cannot fit a workload model to a trace of one job: arrivals need at least two jobs")]
    OneJob,
    #[error(
        "all {jobs} jobs arrive in one batch (each within {gap_s} s of the previous): \
         no gaps between batches to fit an arrival rate to"
    )]
    OneBatch { jobs: usize, gap_s: f64 },
}

/// Why a model file could not be written or read. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ModelFileError {
    #[error("{file}: cannot read the workload model: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: cannot write the workload model: {source}")]
    Write {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: not a valid workload model: {source}")]
    Malformed {
        file: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{file}: workload model version {found}, but this build reads version {expected} \
         (fit the trace again)"
    )]
    Version {
        file: String,
        found: String,
        expected: u32,
    },
}

/// Everything a model holds, as plain data: the JSON file's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelParts {
    /// [`MODEL_VERSION`] when written.
    pub version: u32,
    /// The trace the model was fitted to.
    pub source: String,
    /// Jobs of that trace.
    pub fitted_jobs: u64,
    /// Its first submit, seconds from its origin: synthetic traces start here, so their
    /// hour-of-week rhythm has the trace's phase.
    pub start_s: f64,
    /// Its arrivals per day over its submit span, for reports.
    pub jobs_per_day: f64,
    pub arrivals: ArrivalModel,
    pub mix: JobMix,
}

impl ModelParts {
    /// Checks every part; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.version != MODEL_VERSION {
            return Err(format!(
                "version {}, expected {MODEL_VERSION}",
                self.version
            ));
        }
        if !(self.start_s.is_finite() && self.start_s >= 0.0) {
            return Err(format!(
                "start_s must be finite and >= 0, got {}",
                self.start_s
            ));
        }
        self.arrivals.validate()?;
        self.mix.validate()
    }
}

/// A checked workload model; see the module docs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "ModelParts")]
pub struct WorkloadModel(ModelParts);

impl TryFrom<ModelParts> for WorkloadModel {
    type Error = String;
    fn try_from(parts: ModelParts) -> Result<Self, String> {
        parts.validate()?;
        Ok(WorkloadModel(parts))
    }
}

impl Serialize for WorkloadModel {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl WorkloadModel {
    /// Fits a model to `trace` (at least two jobs, not all in one batch).
    pub fn fit(trace: &Trace) -> Result<WorkloadModel, FitError> {
        let (first, last) = trace.submit_range().ok_or(FitError::EmptyTrace)?;
        if trace.len() < 2 {
            return Err(FitError::OneJob);
        }
        let submits_s: Vec<f64> = trace.jobs().iter().map(|j| j.submit.secs_f64()).collect();
        let starts = arrivals::batch_starts(&submits_s);
        let arrivals = ArrivalModel::fit(&submits_s, &starts)?;
        let span_days = last.saturating_sub(first).secs_f64() / 86_400.0;
        let parts = ModelParts {
            version: MODEL_VERSION,
            source: trace.name.clone(),
            fitted_jobs: trace.len() as u64,
            start_s: first.secs_f64(),
            jobs_per_day: (trace.len() - 1) as f64 / span_days,
            arrivals,
            mix: JobMix::fit(trace, &starts),
        };
        Ok(WorkloadModel::try_from(parts).expect("a fitted model is valid"))
    }

    /// `jobs` synthetic jobs (fewer than 2^32, a trace's limit); the same seed gives the same
    /// trace, and a longer draw starts with the shorter one. The first job is submitted at the
    /// fitted trace's first submit; job `i` is named `fit-NNNNNNN`; the tenant table is the
    /// model's.
    pub fn synth(&self, jobs: usize, seed: u64) -> Trace {
        let parts = &self.0;
        let mut rng = StdRng::seed_from_u64(seed);
        let mut arrivals = parts.arrivals.sampler(parts.start_s);
        let mut mix = parts.mix.sampler();
        let (mut specs, mut durations) = (Vec::with_capacity(jobs), Vec::with_capacity(jobs));
        for i in 0..jobs {
            let (submit_s, starts_batch) = arrivals.next(&mut rng);
            let drawn = mix.next(&mut rng, starts_batch);
            specs.push(JobSpec {
                id: JobId(u32::try_from(i).expect("fewer than 2^32 jobs")),
                name: format!("fit-{i:07}"),
                submit: secs(submit_s),
                tenant: TenantId(drawn.tenant),
                estimate: drawn.estimate_s.map(secs),
                ..drawn.shape.job()
            });
            durations.push(secs(drawn.duration_s));
        }
        let tenants = parts.mix.tenants.iter().map(|t| t.name.clone()).collect();
        Trace::new(
            format!("{}-synth-{jobs}-seed{seed}", parts.source),
            specs,
            durations,
            tenants,
        )
        .expect("a valid model draws valid jobs")
    }

    /// The model's content.
    pub fn parts(&self) -> &ModelParts {
        &self.0
    }

    /// Writes the model as pretty JSON to `path`.
    pub fn save(&self, path: &Path) -> Result<(), ModelFileError> {
        let json = serde_json::to_string_pretty(self).expect("a model is plain data");
        std::fs::write(path, json + "\n").map_err(|source| ModelFileError::Write {
            file: path.display().to_string(),
            source,
        })
    }

    /// Reads and checks a model written by [`WorkloadModel::save`].
    pub fn load(path: &Path) -> Result<WorkloadModel, ModelFileError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ModelFileError::Read {
            file: file.clone(),
            source,
        })?;
        let malformed = |source| ModelFileError::Malformed {
            file: file.clone(),
            source,
        };
        // The version first: another version's fields would only confuse the message.
        let value: serde_json::Value = serde_json::from_str(&text).map_err(malformed)?;
        match value.get("version") {
            Some(v) if v.as_u64() == Some(u64::from(MODEL_VERSION)) => {}
            found => {
                return Err(ModelFileError::Version {
                    file,
                    found: found.map_or_else(|| "missing".into(), |v| v.to_string()),
                    expected: MODEL_VERSION,
                });
            }
        }
        serde_json::from_value(value).map_err(malformed)
    }
}
