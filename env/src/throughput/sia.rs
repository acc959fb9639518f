//! Sia's measurements (Jayaram Subramanya et al., SOSP'23; `siasosp23/artifacts` @ [`COMMIT`]):
//! seconds per training step of six models by exact placement and per-GPU batch size, on five
//! GPU models, turned into a [`ThroughputTable`] of samples/s.
//!
//! Not shipped: the repository has no licence file, so Lachesis reads the profiles from a copy
//! of its `sia-simulator/traces/` folder ([`default_dir`]) and refuses with
//! [`ThroughputError::SiaNotFound`] when there is none.
//!
//! The conversion, for each model in [`MODELS`] and GPU model in [`CLUSTERS`]
//! (`traces/<model>/placements-<suffix>.csv`, columns read by name):
//! - **Batch size**: one per-GPU batch `B` per model, the largest `local_bsz` profiled on 1 GPU
//!   of every one of the five GPU models (cifar10 725, imagenet 163, bert 11, deepspeech2 57,
//!   yolov3 8, ncf 32768), so that every GPU model does the same work per step and GPU.
//! - **Shapes**: `n` = 1..=16 GPUs ([`MAX_JOB_GPUS`], Sia's `MAX_NUM_GPUS`). Consolidated is
//!   Sia's own packing, full nodes first (`applications.py:100-103`; 12 GPUs on 8-GPU nodes:
//!   `84`); spread is twice as many nodes, evenly (`11`, `22`, `44`; none when `n` does not
//!   divide). A placement is looked up as its lexicographically smallest rotation
//!   (`applications.py:249-253`); a shape Sia did not profile has no row.
//! - **Rate** = `n x B / (step + k x (step - sync))` samples/s, with `step`, `sync`
//!   interpolated linearly over `local_bsz` within the placement's profile at the atomic
//!   batch `ceil(B / (k + 1))`, and `k = ceil(B / max profiled local_bsz) - 1` gradient
//!   accumulation steps: Sia's `get_throughput_with_accum` (`applications.py:294-307`). Not
//!   applied: its forced accumulation on 1 GPU above the initial batch and its cap of the
//!   atomic batch by the largest validated global batch (`:300-304`), which serve its adaptive
//!   batch sizes, not the hardware. A batch below the smallest profiled one has no row (Sia's
//!   interpolator refuses it too).
//! - Rates are as measured: ncf on V100 about 10x slower than on T4, yolov3 slower on RTX 2080 Ti
//!   than on T4, imagenet on 8 V100s slower than on 4. Not applied either: Sia's per-model
//!   calibration `SLOWDOWNS` (`simulator_config.py:31`), which divides every GPU model alike.
//! - Reference GPU: RTX 2080 Ti, the model Sia sizes its workloads on (`base_gpu_type = "rtx"`,
//!   `utils/generate_workload.py:12`). No pairs: Sia measured no sharing.

use super::file::ThroughputError;
use super::{Consolidation, TableBuilder, ThroughputTable};
use crate::job::WorkloadType;
use crate::trace::table::{self, Table, Unknown};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The Sia artifact commit the profiles come from.
pub const COMMIT: &str = "aaf7a0de7b6cb5eab06ea020467ede5d2fd18e70";

/// The models with placement profiles on all five GPU models (`gpt_pmp`, pipeline-parallel and
/// profiled differently, is left out).
pub const MODELS: [&str; 6] = [
    "cifar10",
    "imagenet",
    "bert",
    "deepspeech2",
    "yolov3",
    "ncf",
];

/// One profiled GPU model: Sia's file suffix, the catalog model, GPUs per node
/// (`cluster_ngpus_per_node`, `simulator_config.py:9`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cluster {
    pub suffix: &'static str,
    pub gpu: &'static str,
    pub gpus_per_node: u32,
}

/// The five GPU models (`dgx-ext`, "the one to use", rather than `dgx`).
pub const CLUSTERS: [Cluster; 5] = [
    Cluster {
        suffix: "aws",
        gpu: "T4",
        gpus_per_node: 4,
    },
    Cluster {
        suffix: "rtx",
        gpu: "RTX-2080Ti",
        gpus_per_node: 8,
    },
    Cluster {
        suffix: "quad",
        gpu: "RTX-6000",
        gpus_per_node: 4,
    },
    Cluster {
        suffix: "azure",
        gpu: "V100",
        gpus_per_node: 8,
    },
    Cluster {
        suffix: "dgx-ext",
        gpu: "A100",
        gpus_per_node: 8,
    },
];

/// The GPU model durations are measured on.
pub const REFERENCE_GPU: &str = "RTX-2080Ti";

/// Largest job in the table, in GPUs.
pub const MAX_JOB_GPUS: u32 = 16;

/// The folder holding `sia/traces/` (and `gavel/`): `$LACHESIS_SHARED_THROUGHPUTS`, else
/// `../shared/throughputs` from the working directory.
pub const DIR_ENV: &str = "LACHESIS_SHARED_THROUGHPUTS";

/// Where the Sia preset reads its profiles: `sia/traces` under `$LACHESIS_SHARED_THROUGHPUTS`,
/// else `../shared/throughputs/sia/traces`.
pub fn default_dir() -> PathBuf {
    std::env::var_os(DIR_ENV)
        .map_or_else(|| PathBuf::from("../shared/throughputs"), PathBuf::from)
        .join("sia/traces")
}

/// Builds the Sia table from `dir`, a copy of `sia-simulator/traces/`.
pub fn load(dir: &Path) -> Result<ThroughputTable, ThroughputError> {
    if !dir.is_dir() {
        return Err(ThroughputError::SiaNotFound {
            dir: dir.display().to_string(),
        });
    }
    let mut table = TableBuilder::new("sia", REFERENCE_GPU).expect("a catalog model");
    for model in MODELS {
        let workload = WorkloadType::new(model).expect("not empty");
        let mut profiles = Vec::new();
        for cluster in CLUSTERS {
            let path = dir
                .join(model)
                .join(format!("placements-{}.csv", cluster.suffix));
            profiles.push((cluster, path.display().to_string(), read_profile(&path)?));
        }
        let batch = common_batch(profiles.iter().map(|(_, _, p)| p)).ok_or_else(|| {
            ThroughputError::File {
                file: dir.join(model).display().to_string(),
                problem: "no per-GPU batch size is profiled on 1 GPU of every GPU model".into(),
            }
        })?;
        for (cluster, file, profile) in &profiles {
            for gpus in 1..=MAX_JOB_GPUS {
                for (placement, shape) in shapes(gpus, cluster.gpus_per_node) {
                    let Some(points) = profile.get(&placement_id(&shape)) else {
                        continue;
                    };
                    let Some(rate) = rate(points, gpus, batch) else {
                        continue;
                    };
                    table
                        .single(&workload, cluster.gpu, gpus, placement, rate, 0)
                        .map_err(|refused| ThroughputError::File {
                            file: file.clone(),
                            problem: format!("{}: {}", refused.field, refused.problem),
                        })?;
                }
            }
        }
    }
    table
        .finish()
        .map_err(|(_, refused)| ThroughputError::File {
            file: dir.display().to_string(),
            problem: refused.problem,
        })
}

/// One profiled point: per-GPU batch, seconds per step, seconds of it synchronising.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Point {
    batch: u32,
    step_s: f64,
    sync_s: f64,
}

/// A placements file: points by placement (as written, e.g. `22`), sorted by batch.
type Profile = BTreeMap<String, Vec<Point>>;

const COLUMNS: &[&str] = &["local_bsz", "step_time", "sync_time", "placement"];

fn read_profile(path: &Path) -> Result<Profile, ThroughputError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| ThroughputError::Io {
        file: file.clone(),
        source,
    })?;
    let mut rows = Table::new(
        &file,
        table::csv_reader(bytes.as_slice()),
        COLUMNS,
        Unknown::Ignore,
    )?;
    let mut profile = Profile::new();
    while let Some(row) = rows.next_row()? {
        let placement = row.str("placement").trim();
        if placement.is_empty() || !placement.bytes().all(|b| (b'1'..=b'9').contains(&b)) {
            return Err(row
                .expected("placement", "digits 1-9, GPUs per node")
                .into());
        }
        let point = Point {
            batch: row.int_in("local_bsz", 1..=u32::MAX)?,
            step_s: row.parse("step_time", "seconds > 0")?,
            sync_s: row.parse("sync_time", "seconds >= 0")?,
        };
        if !(point.step_s.is_finite() && point.step_s > 0.0) {
            return Err(row.expected("step_time", "seconds > 0").into());
        }
        if !(point.sync_s.is_finite() && (0.0..=point.step_s).contains(&point.sync_s)) {
            return Err(row
                .expected("sync_time", "seconds, 0 <= sync_time <= step_time")
                .into());
        }
        let points = profile.entry(placement.to_string()).or_default();
        if points.iter().any(|p| p.batch == point.batch) {
            return Err(row
                .error("local_bsz", "this placement and batch are profiled twice")
                .into());
        }
        points.push(point);
    }
    for points in profile.values_mut() {
        points.sort_by_key(|p| p.batch);
    }
    Ok(profile)
}

/// The largest batch every profile has on 1 GPU.
fn common_batch<'a>(mut profiles: impl Iterator<Item = &'a Profile>) -> Option<u32> {
    let batches = |p: &Profile| -> Vec<u32> {
        p.get("1")
            .map_or_else(Vec::new, |points| points.iter().map(|q| q.batch).collect())
    };
    let mut common = batches(profiles.next()?);
    for profile in profiles {
        let other = batches(profile);
        common.retain(|b| other.contains(b));
    }
    common.into_iter().max()
}

/// The consolidated shape of `gpus` GPUs (full nodes first) and, when the GPUs divide evenly
/// over twice as many nodes, the spread one.
fn shapes(gpus: u32, gpus_per_node: u32) -> Vec<(Consolidation, Vec<u32>)> {
    let mut packed = vec![gpus_per_node; (gpus / gpus_per_node) as usize];
    if !gpus.is_multiple_of(gpus_per_node) {
        packed.push(gpus % gpus_per_node);
    }
    let nodes = 2 * packed.len() as u32;
    let mut shapes = vec![(Consolidation::Consolidated, packed)];
    if gpus > 1 && gpus.is_multiple_of(nodes) {
        shapes.push((Consolidation::Spread, vec![gpus / nodes; nodes as usize]));
    }
    shapes
}

/// A shape as Sia keys it: the digits of its lexicographically smallest rotation.
fn placement_id(shape: &[u32]) -> String {
    (0..shape.len())
        .map(|i| [&shape[i..], &shape[..i]].concat())
        .min()
        .unwrap_or_default()
        .iter()
        .map(u32::to_string)
        .collect()
}

/// Samples/s of `gpus` GPUs at per-GPU batch `batch`, from a placement's points (sorted, not
/// empty); `None` when the atomic batch is below the smallest profiled one.
fn rate(points: &[Point], gpus: u32, batch: u32) -> Option<f64> {
    let largest = points.last()?.batch;
    let accumulation = batch.div_ceil(largest) - 1;
    let atomic = batch.div_ceil(accumulation + 1);
    let (step_s, sync_s) = interpolate(points, atomic)?;
    let seconds = step_s + f64::from(accumulation) * (step_s - sync_s);
    Some(f64::from(gpus) * f64::from(batch) / seconds)
}

/// `(step, sync)` at `batch`, linear between the neighbouring profiled batches; `None` outside
/// the profiled range.
fn interpolate(points: &[Point], batch: u32) -> Option<(f64, f64)> {
    let above = points.iter().position(|p| p.batch >= batch)?;
    let hi = points[above];
    if hi.batch == batch {
        return Some((hi.step_s, hi.sync_s));
    }
    let lo = points[above.checked_sub(1)?];
    let t = f64::from(batch - lo.batch) / f64::from(hi.batch - lo.batch);
    Some((
        lo.step_s + t * (hi.step_s - lo.step_s),
        lo.sync_s + t * (hi.sync_s - lo.sync_s),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(batch: u32, step_s: f64, sync_s: f64) -> Point {
        Point {
            batch,
            step_s,
            sync_s,
        }
    }

    #[test]
    fn shapes_pack_full_nodes_and_spread_over_twice_as_many() {
        use Consolidation::{Consolidated as C, Spread as S};
        assert_eq!(shapes(1, 8), [(C, vec![1])]);
        assert_eq!(shapes(2, 8), [(C, vec![2]), (S, vec![1, 1])]);
        assert_eq!(shapes(3, 8), [(C, vec![3])]);
        assert_eq!(shapes(8, 8), [(C, vec![8]), (S, vec![4, 4])]);
        assert_eq!(shapes(12, 8), [(C, vec![8, 4]), (S, vec![3, 3, 3, 3])]);
        assert_eq!(shapes(8, 4), [(C, vec![4, 4]), (S, vec![2, 2, 2, 2])]);
        assert_eq!(placement_id(&[8, 4]), "48");
        assert_eq!(placement_id(&[2, 1, 3]), "132");
    }

    #[test]
    fn rate_interpolates_and_accumulates_like_sia() {
        let points = [point(100, 1.0, 0.2), point(200, 3.0, 0.4)];
        // Exact point: 2 GPUs x 100 / 1 s.
        assert_eq!(rate(&points, 2, 100), Some(200.0));
        // Halfway: step 2.0 s.
        assert_eq!(rate(&points, 1, 150), Some(75.0));
        // 300 > 200: k = 1 accumulation step at atomic 150 (step 2.0, sync 0.3):
        // 300 / (2.0 + 1.7).
        assert_eq!(rate(&points, 1, 300), Some(300.0 / 3.7));
        // Below the smallest profiled batch: no rate.
        assert_eq!(rate(&points, 1, 50), None);
    }
}
