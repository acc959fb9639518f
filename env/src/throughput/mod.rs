//! Measured training throughput: how fast a job of a given workload type (the model it trains)
//! runs on each GPU model, GPU count and placement, and how fast two jobs run when they share one
//! GPU. Owns the table ([`ThroughputTable`]), its file format ([`mod@file`], see
//! `docs/throughput-tables.md`), the presets built from published measurements ([`gavel`], [`sia`])
//! the rules that give workload types to traces that lack them ([`assign`]), and the rule that
//! gives them elastic GPU ranges ([`ranges`]).
//!
//! Units. A table's rates are in whatever unit its source measured (Gavel: steps/s of the whole
//! job; Sia: samples/s), consistent within one workload type; only ratios within a workload are
//! meaningful. Each table names a reference GPU model: a trace's duration `d` for a job of type
//! `w` on `n` GPUs is taken as measured on `n` reference GPUs packed on one node, so the job's
//! work is `d x rate(w, reference, n, consolidated)`, and on `m` GPUs of model `g` it runs at
//! [`ThroughputTable::speed`] = `rate(w, g, m, placement) / rate(w, reference, n, consolidated)`
//! reference-seconds per second. This is Gavel's conversion: `total_steps = duration x
//! throughputs['v100'][(type, scale_factor)]['null']` (`scheduler/utils.py:122`).
//!
//! A rate of 0 means the job cannot run in that shape; a pair at `[0, 0]`, or not listed, cannot
//! share. A GPU model, count or placement the table does not list is a [`RateError`], never a
//! default. Depends on the GPU catalog, the job model and the trace readers' CSV helpers only:
//! nothing here knows of the simulator or policies.

pub mod assign;
pub mod file;
pub mod gavel;
pub mod ranges;
pub mod sia;

pub use assign::{WorkloadAssignment, WorkloadRule, assign_workloads};
pub use file::ThroughputError;
pub use ranges::{ElasticAssignment, ElasticRule, assign_elastic};

use crate::gpu::GpuModel;
use crate::job::WorkloadType;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// How a multi-GPU job's GPUs lie over nodes (the `placement` column of a table file; not
/// [`crate::policy::Placement`], the node and GPUs a decision gives each task). A 1-GPU job is
/// always consolidated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Consolidation {
    /// Packed on the fewest nodes (one node when the job fits on one).
    Consolidated,
    /// Spread over more nodes than it needs (Gavel's `*_unconsolidated`; Sia: twice as many
    /// nodes, evenly).
    Spread,
}

impl Consolidation {
    pub fn as_str(self) -> &'static str {
        match self {
            Consolidation::Consolidated => "consolidated",
            Consolidation::Spread => "spread",
        }
    }
    pub fn parse(text: &str) -> Option<Consolidation> {
        match text.trim().to_ascii_lowercase().as_str() {
            "consolidated" => Some(Consolidation::Consolidated),
            "spread" => Some(Consolidation::Spread),
            _ => None,
        }
    }
}

impl fmt::Display for Consolidation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A workload type of one table (its index there), resolved once by [`ThroughputTable::workload`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkloadId(u32);

impl WorkloadId {
    /// Its position in [`ThroughputTable::workloads`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A GPU model a table covers, as the catalog spells it, resolved once by
/// [`ThroughputTable::gpu`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableGpu(&'static str);

impl TableGpu {
    /// The catalog's canonical name of the model.
    pub fn name(self) -> &'static str {
        self.0
    }
}

/// Why a lookup has no rate. Each names the table.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RateError {
    #[error("throughput table {table} has no workload type {workload:?}")]
    UnknownWorkload { table: String, workload: String },
    #[error(
        "GPU model {gpu:?} is not in the GPU catalog, so throughput table {table} cannot know it"
    )]
    UnknownGpuModel { table: String, gpu: String },
    #[error("throughput table {table} has no rates for GPU model {gpu} (it covers {covered})")]
    GpuModelAbsent {
        table: String,
        gpu: String,
        covered: String,
    },
    #[error("throughput table {table} has no rate for {workload} on {gpus} x {gpu} ({placement})")]
    NoEntry {
        table: String,
        workload: String,
        gpu: &'static str,
        gpus: u32,
        placement: Consolidation,
    },
    #[error(
        "throughput table {table}: {workload} runs at rate 0 on {gpus} x {gpu}, the reference \
         GPU, so no speed is relative to it"
    )]
    ZeroReference {
        table: String,
        workload: String,
        gpu: &'static str,
        gpus: u32,
    },
}

/// One single-job rate's key: workload, GPU model, GPU count, placement.
type SingleKey = (WorkloadId, TableGpu, u32, Consolidation);
/// One pair's key, the workload with the smaller id first: `(a, b, gpu)` with `a <= b`.
type PairKey = (WorkloadId, WorkloadId, TableGpu);

/// Rates of workload types on GPU models, alone and in pairs sharing one GPU. Built by
/// [`file::read`], the presets or [`TableBuilder`]; immutable once built.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputTable {
    name: String,
    reference: TableGpu,
    workloads: Vec<WorkloadType>,
    singles: BTreeMap<SingleKey, f64>,
    /// As given, `[a's rate, b's rate]`, `[0, 0]` included (cannot share).
    pairs: BTreeMap<PairKey, [f64; 2]>,
    /// The GPU models of `singles`, sorted by name, deduplicated (kept by the builder).
    gpus: Vec<TableGpu>,
}

impl ThroughputTable {
    /// Where the table came from (preset name or file), for reports and errors.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The GPU model trace durations are taken as measured on.
    pub fn reference(&self) -> TableGpu {
        self.reference
    }

    /// Workload types, in order of first appearance ([`WorkloadId`] order).
    pub fn workloads(&self) -> &[WorkloadType] {
        &self.workloads
    }

    /// GPU models with at least one rate, in the catalog's spelling, sorted by name.
    pub fn gpu_models(&self) -> Vec<TableGpu> {
        self.gpus.clone()
    }

    /// The id of `workload` in this table (names match case-insensitively).
    pub fn workload(&self, workload: &str) -> Result<WorkloadId, RateError> {
        self.workloads
            .iter()
            .position(|w| w.as_str().eq_ignore_ascii_case(workload.trim()))
            .map(|i| WorkloadId(i as u32))
            .ok_or_else(|| RateError::UnknownWorkload {
                table: self.name.clone(),
                workload: workload.to_string(),
            })
    }

    /// The name of a workload id of this table.
    pub fn workload_name(&self, id: WorkloadId) -> &WorkloadType {
        &self.workloads[id.0 as usize]
    }

    /// The table's entry for GPU model `name` (any catalog spelling or alias): an error when the
    /// catalog does not know the model or the table has no rate for it. The catalog tells
    /// variants apart: `V100M32` is not `V100`.
    pub fn gpu(&self, name: &str) -> Result<TableGpu, RateError> {
        let canonical =
            GpuModel::canonical_name(name.trim()).ok_or_else(|| RateError::UnknownGpuModel {
                table: self.name.clone(),
                gpu: name.to_string(),
            })?;
        self.gpus
            .iter()
            .find(|g| g.0 == canonical)
            .copied()
            .ok_or_else(|| RateError::GpuModelAbsent {
                table: self.name.clone(),
                gpu: name.to_string(),
                covered: self.gpus.iter().map(|g| g.0).collect::<Vec<_>>().join(", "),
            })
    }

    /// The rate of `workload` alone on `gpus` GPUs of `gpu`, in the table's unit; 0 when it
    /// cannot run that way. A 1-GPU job is looked up as consolidated whatever `placement` says.
    pub fn rate(
        &self,
        workload: WorkloadId,
        gpu: TableGpu,
        gpus: u32,
        placement: Consolidation,
    ) -> Result<f64, RateError> {
        let placement = if gpus == 1 {
            Consolidation::Consolidated
        } else {
            placement
        };
        self.singles
            .get(&(workload, gpu, gpus, placement))
            .copied()
            .ok_or_else(|| RateError::NoEntry {
                table: self.name.clone(),
                workload: self.workload_name(workload).to_string(),
                gpu: gpu.0,
                gpus,
                placement,
            })
    }

    /// The rate of `workload` on `gpus` reference GPUs, consolidated: the rate its trace
    /// duration was measured at when the trace gives it `gpus` GPUs. Always > 0.
    pub fn reference_rate(&self, workload: WorkloadId, gpus: u32) -> Result<f64, RateError> {
        let rate = self.rate(workload, self.reference, gpus, Consolidation::Consolidated)?;
        if rate > 0.0 {
            Ok(rate)
        } else {
            Err(RateError::ZeroReference {
                table: self.name.clone(),
                workload: self.workload_name(workload).to_string(),
                gpu: self.reference.0,
                gpus,
            })
        }
    }

    /// Reference-seconds of work done per second by a job of `workload` whose trace gives it
    /// `trace_gpus` GPUs, running on `gpus` GPUs of `gpu` placed as `placement`: [`Self::rate`]
    /// over [`Self::reference_rate`]. 1.0 on its trace shape on the reference GPU; 0 where it
    /// cannot run.
    pub fn speed(
        &self,
        workload: WorkloadId,
        gpu: TableGpu,
        gpus: u32,
        placement: Consolidation,
        trace_gpus: u32,
    ) -> Result<f64, RateError> {
        let reference = self.reference_rate(workload, trace_gpus)?;
        Ok(self.rate(workload, gpu, gpus, placement)? / reference)
    }

    /// The rates of `a` and `b` while they share one GPU of `gpu`, in that order; `None` when
    /// they cannot share (`[0, 0]` in the table, or no entry).
    pub fn pair(&self, a: WorkloadId, b: WorkloadId, gpu: TableGpu) -> Option<[f64; 2]> {
        let (key, swapped) = pair_key(a, b, gpu);
        let [x, y] = *self.pairs.get(&key)?;
        if x == 0.0 && y == 0.0 {
            None
        } else if swapped {
            Some([y, x])
        } else {
            Some([x, y])
        }
    }

    /// Every single-job rate of `workload`: `(gpu, gpus, placement, rate)`, ordered by GPU
    /// model name, then GPU count, then placement (for policies choosing a size or a model).
    pub fn rates_of(
        &self,
        workload: WorkloadId,
    ) -> impl Iterator<Item = (TableGpu, u32, Consolidation, f64)> + '_ {
        let from = (workload, TableGpu(""), 0, Consolidation::Consolidated);
        self.singles
            .range(from..)
            .take_while(move |(k, _)| k.0 == workload)
            .map(|(k, rate)| (k.1, k.2, k.3, *rate))
    }

    /// The same table with another reference GPU (e.g. `V100`, Lachesis' speed-1.0 model, for
    /// a table whose source used another). Refused when the table has no rate on it; a
    /// workload whose rate on it is 0 gets [`RateError::ZeroReference`] from [`Self::speed`].
    pub fn with_reference(mut self, gpu: &str) -> Result<ThroughputTable, RateError> {
        self.reference = self.gpu(gpu)?;
        Ok(self)
    }

    /// Single-job rates, in key order: `(workload, gpu, gpus, placement, rate)`.
    fn single_rows(&self) -> impl Iterator<Item = (WorkloadId, TableGpu, u32, Consolidation, f64)> {
        self.singles.iter().map(|(k, r)| (k.0, k.1, k.2, k.3, *r))
    }

    /// Pair rates as stored, in key order: `(a, b, gpu, [a's, b's])`.
    fn pair_rows(&self) -> impl Iterator<Item = (WorkloadId, WorkloadId, TableGpu, [f64; 2])> {
        self.pairs.iter().map(|(k, r)| (k.0, k.1, k.2, *r))
    }
}

/// The stored key of the pair `(a, b)` and whether `a` and `b` are swapped in it.
fn pair_key(a: WorkloadId, b: WorkloadId, gpu: TableGpu) -> (PairKey, bool) {
    if a <= b {
        ((a, b, gpu), false)
    } else {
        ((b, a, gpu), true)
    }
}

/// Why [`TableBuilder`] refused an entry: the field at fault and what is wrong with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub field: &'static str,
    pub problem: String,
}

fn refused(field: &'static str, problem: impl Into<String>) -> Refused {
    Refused {
        field,
        problem: problem.into(),
    }
}

/// Builds a [`ThroughputTable`] entry by entry, checking each as it comes. The file reader and
/// the preset converters go through it, so every table obeys the same rules:
/// - GPU models are catalog models (stored in the catalog's spelling);
/// - rates are finite and >= 0 (0 = cannot run; the reference GPU's must be > 0);
/// - GPU counts are >= 1, and a 1-GPU job is never `spread`;
/// - an entry is given once (a pair once in either order);
/// - a pair shares one GPU (1 GPU, consolidated), its rates are both 0 or both > 0, and both
///   jobs have a rate alone on that GPU ([`TableBuilder::finish`] checks this last rule).
#[derive(Debug)]
pub struct TableBuilder {
    table: ThroughputTable,
    /// Where each entry came from (a line number, or 0), to name the first one in a duplicate.
    origin: BTreeMap<SingleKey, u64>,
    pair_origin: BTreeMap<PairKey, u64>,
}

/// Most GPUs one table entry may describe.
pub const MAX_GPUS: u32 = 65_536;

impl TableBuilder {
    /// An empty table named `name` (a preset or a file) whose reference is `reference`.
    pub fn new(name: &str, reference: &str) -> Result<TableBuilder, Refused> {
        let reference = catalog_gpu("reference", reference)?;
        Ok(TableBuilder {
            table: ThroughputTable {
                name: name.to_string(),
                reference,
                workloads: Vec::new(),
                singles: BTreeMap::new(),
                pairs: BTreeMap::new(),
                gpus: Vec::new(),
            },
            origin: BTreeMap::new(),
            pair_origin: BTreeMap::new(),
        })
    }

    /// Adds the rate of `workload` alone on `gpus` GPUs of `gpu`; `origin` (a line, or 0) is
    /// quoted if a later entry repeats it.
    pub fn single(
        &mut self,
        workload: &WorkloadType,
        gpu: &str,
        gpus: u32,
        placement: Consolidation,
        rate: f64,
        origin: u64,
    ) -> Result<(), Refused> {
        let gpu = catalog_gpu("gpu", gpu)?;
        check_gpus(gpus)?;
        if gpus == 1 && placement == Consolidation::Spread {
            return Err(refused(
                "placement",
                "a 1-GPU job cannot be spread: write consolidated",
            ));
        }
        check_rate("rate", rate)?;
        if gpu == self.table.reference && rate == 0.0 {
            return Err(refused(
                "rate",
                format!(
                    "0 on the reference GPU {}: speeds are relative to it, so it must be > 0",
                    gpu.0
                ),
            ));
        }
        let workload = self.workload_id(workload);
        let key = (workload, gpu, gpus, placement);
        if let Some(first) = self.origin.get(&key) {
            return Err(refused(
                "workload",
                format!("duplicate entry{}", at(*first)),
            ));
        }
        self.origin.insert(key, origin);
        self.table.singles.insert(key, rate);
        if let Err(at) = self.table.gpus.binary_search(&gpu) {
            self.table.gpus.insert(at, gpu);
        }
        Ok(())
    }

    /// Adds the rates of `a` and `b` sharing one GPU of `gpu`: `rates = [a's, b's]`.
    pub fn pair(
        &mut self,
        a: &WorkloadType,
        b: &WorkloadType,
        gpu: &str,
        rates: [f64; 2],
        origin: u64,
    ) -> Result<(), Refused> {
        let gpu = catalog_gpu("gpu", gpu)?;
        check_rate("rate", rates[0])?;
        check_rate("partner_rate", rates[1])?;
        if (rates[0] == 0.0) != (rates[1] == 0.0) {
            return Err(refused(
                "partner_rate",
                format!(
                    "rates {} and {}: both 0 (cannot share) or both > 0",
                    rates[0], rates[1]
                ),
            ));
        }
        let (a, b) = (self.workload_id(a), self.workload_id(b));
        let (key, swapped) = pair_key(a, b, gpu);
        if let Some(first) = self.pair_origin.get(&key) {
            return Err(refused(
                "partner",
                format!("duplicate pair (in either order){}", at(*first)),
            ));
        }
        self.pair_origin.insert(key, origin);
        let rates = if swapped { [rates[1], rates[0]] } else { rates };
        self.table.pairs.insert(key, rates);
        Ok(())
    }

    /// The table, once every pair's jobs have a 1-GPU rate alone on the pair's GPU. On failure:
    /// the first such pair's origin, and what is missing.
    pub fn finish(self) -> Result<ThroughputTable, (u64, Refused)> {
        let mut pairs: Vec<(&PairKey, &u64)> = self.pair_origin.iter().collect();
        pairs.sort_by_key(|(_, origin)| **origin);
        for ((a, b, gpu), origin) in pairs {
            for (id, field) in [(a, "workload"), (b, "partner")] {
                if !self
                    .table
                    .singles
                    .contains_key(&(*id, *gpu, 1, Consolidation::Consolidated))
                {
                    let name = self.table.workload_name(*id);
                    return Err((
                        *origin,
                        refused(
                            field,
                            format!(
                                "{name} has no rate alone on 1 x {} (consolidated): a pair \
                                 needs both jobs' single-job rates",
                                gpu.0
                            ),
                        ),
                    ));
                }
            }
        }
        if !self
            .table
            .singles
            .keys()
            .any(|k| k.1 == self.table.reference)
        {
            return Err((
                0,
                refused(
                    "reference",
                    format!(
                        "the table has no rate on its reference GPU {}",
                        self.table.reference.0
                    ),
                ),
            ));
        }
        Ok(self.table)
    }

    /// The id of `workload`, matched case-insensitively (the first spelling is kept).
    fn workload_id(&mut self, workload: &WorkloadType) -> WorkloadId {
        let table = &mut self.table;
        let found = table
            .workloads
            .iter()
            .position(|w| w.as_str().eq_ignore_ascii_case(workload.as_str()));
        WorkloadId(found.unwrap_or_else(|| {
            table.workloads.push(workload.clone());
            table.workloads.len() - 1
        }) as u32)
    }
}

/// " (first on line N)", or nothing for an entry without a line.
fn at(origin: u64) -> String {
    if origin == 0 {
        String::new()
    } else {
        format!(" (first on line {origin})")
    }
}

fn catalog_gpu(field: &'static str, name: &str) -> Result<TableGpu, Refused> {
    GpuModel::canonical_name(name.trim())
        .map(TableGpu)
        .ok_or_else(|| {
            let known: Vec<&str> = GpuModel::catalog_names().collect();
            refused(
                field,
                format!(
                    "unknown GPU model {name:?}, expected a catalog model ({})",
                    known.join(", ")
                ),
            )
        })
}

fn check_gpus(gpus: u32) -> Result<(), Refused> {
    if (1..=MAX_GPUS).contains(&gpus) {
        Ok(())
    } else {
        Err(refused(
            "gpus",
            format!("expected a GPU count 1..={MAX_GPUS}, got {gpus}"),
        ))
    }
}

fn check_rate(field: &'static str, rate: f64) -> Result<(), Refused> {
    if rate.is_finite() && rate >= 0.0 {
        Ok(())
    } else {
        Err(refused(
            field,
            format!("expected a finite rate >= 0, got {rate}"),
        ))
    }
}

/// The built-in tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ThroughputPreset {
    /// Gavel (OSDI'20): 26 job types on K80, P100, V100; shipped in the binary.
    Gavel,
    /// Sia (SOSP'23): 6 models on T4, RTX 2080 Ti, Quadro RTX 6000, V100, A100; read from a
    /// copy of Sia's artifact ([`sia::default_dir`]), not shipped (no licence).
    Sia,
}

impl ThroughputPreset {
    pub const ALL: [ThroughputPreset; 2] = [ThroughputPreset::Gavel, ThroughputPreset::Sia];

    pub fn as_str(self) -> &'static str {
        match self {
            ThroughputPreset::Gavel => "gavel",
            ThroughputPreset::Sia => "sia",
        }
    }

    pub fn parse(text: &str) -> Option<ThroughputPreset> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(text.trim()))
    }

    /// The GPU models the preset's table has rates for, in the catalog's spelling (known
    /// without loading it: Sia's table is read from files that may be absent).
    pub fn gpu_models(self) -> &'static [&'static str] {
        match self {
            ThroughputPreset::Gavel => &["K80", "P100", "V100"],
            ThroughputPreset::Sia => &["A100", "RTX-2080Ti", "RTX-6000", "T4", "V100"],
        }
    }

    /// The preset's table.
    pub fn load(self) -> Result<ThroughputTable, ThroughputError> {
        match self {
            ThroughputPreset::Gavel => Ok(gavel::table()),
            ThroughputPreset::Sia => sia::load(&sia::default_dir()),
        }
    }
}

/// The GPU model of `covered` (catalog names) that stands for catalog model `gpu` on a
/// cluster mapped onto a table: `gpu` itself when covered (aliases folded: `V100-16G` is
/// `V100`); else the covered model whose catalog speed is nearest to `gpu`'s, by ratio
/// (`|ln(speed / covered speed)|`), the slower one on a tie. `None` when the catalog does not
/// know `gpu` or no covered model is a catalog model. E.g. onto Gavel's K80, P100, V100:
/// `T4` (0.40) -> `K80` (0.35), `V100M32` (1.0) -> `V100`, `A100` (2.2) -> `V100`.
pub fn nearest_covered_model(gpu: &str, covered: &[&str]) -> Option<&'static str> {
    let own = GpuModel::from_catalog(gpu)?;
    let canonical = GpuModel::canonical_name(gpu)?;
    let candidates: Vec<GpuModel> = covered
        .iter()
        .filter_map(|c| GpuModel::from_catalog(c))
        .collect();
    if let Some(same) = covered
        .iter()
        .find_map(|c| GpuModel::canonical_name(c).filter(|c| *c == canonical))
    {
        return Some(same);
    }
    let distance = |m: &GpuModel| (own.speed / m.speed).ln().abs();
    let best = candidates.iter().min_by(|a, b| {
        distance(a)
            .total_cmp(&distance(b))
            .then(a.speed.total_cmp(&b.speed))
    })?;
    GpuModel::canonical_name(&best.name)
}

/// A preset by name (`gavel`, `sia`), else the table file at `spec`.
pub fn load_table(spec: &str) -> Result<ThroughputTable, ThroughputError> {
    match ThroughputPreset::parse(spec) {
        Some(preset) => preset.load(),
        None => file::read_path(Path::new(spec)),
    }
}

/// The workload type named `name` if a preset defines it (case-insensitive; the preset's
/// spelling), else if `extra` lists it (e.g. a custom table's types).
pub fn known_workload(name: &str, extra: &[String]) -> Option<WorkloadType> {
    let name = name.trim();
    gavel::TEMPLATES
        .iter()
        .map(|t| t.name)
        .chain(sia::MODELS)
        .chain(extra.iter().map(String::as_str))
        .find(|known| known.trim().eq_ignore_ascii_case(name))
        .and_then(WorkloadType::new)
}

#[cfg(test)]
mod tests;
