//! Trace readers: turn a job trace file into a [`Trace`] and a [`ReadReport`] saying what was
//! kept, dropped and why. One module per format; [`stats`] summarises a trace.
//!
//! Formats: [`normalized`] (Lachesis' own CSV, read and written), [`openb`] (Alibaba GPU
//! cluster trace 2023, and the FGD paper's static pod lists), [`itp`] (Microsoft ITP
//! clusters), [`swf`] (Parallel Workloads Archive logs), [`dlrm`] (Alibaba DLRM serving
//! instances 2025), [`helios`] (SenseTime Helios and Microsoft Philly job logs), [`sia`] (the
//! processed Philly trace of the Sia simulator). The format is given, or detected from the
//! first line of the file and, failing that, from the file name. Any of them may be gzip-compressed: input that
//! starts with gzip's magic bytes (`1f 8b`) is decompressed as it is read.
//!
//! Every error names the file, the line and, where there is one, the field; no input makes a
//! reader panic. Depends on the job model only: nothing here knows of the simulator or policies.

pub mod dlrm;
pub mod fit;
pub mod gavel_jobs;
pub mod helios;
pub mod itp;
pub mod normalized;
pub mod openb;
pub mod sia;
pub mod split;
pub mod stats;
pub mod swf;
pub mod synthetic;
pub(crate) mod table;

pub use fit::{FitError, ModelFileError, WorkloadModel};
pub use helios::{HeliosOptions, HeliosTenant};
pub use itp::ItpOptions;
pub use normalized::{TraceWriteError, write_normalized};
pub use stats::TraceStats;
pub use swf::{SwfOptions, SwfTenant};

use crate::job::{JobSpec, Trace, TraceError};
use crate::units::{SimTime, TenantId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// The trace file formats Lachesis reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceFormat {
    /// Lachesis' normalized CSV (`#lachesis-trace v1`), see `docs/trace-format.md`.
    Normalized,
    /// Alibaba cluster-trace-gpu-v2023 pod list (`openb_pod_list_*.csv`).
    Openb,
    /// Microsoft ITP cluster file (`clusterNN.csv` of elasticflow-traces).
    Itp,
    /// Standard Workload Format of the Parallel Workloads Archive (`*.swf`, `*.swf.gz`).
    Swf,
    /// Alibaba cluster-trace-gpu-v2025 DLRM serving instances (`disaggregated_DLRM_trace.csv`).
    Dlrm,
    /// SenseTime Helios `cluster_log.csv`, or a Microsoft Philly job log flattened to the same
    /// columns.
    Helios,
    /// The FGD paper's static openb pod lists (`openb_pod_list_multigpu20.csv`, ...): pods
    /// without times, a static workload.
    OpenbStatic,
    /// The processed Microsoft Philly trace of the Sia simulator (`sia-simulator/traces/philly.csv`).
    SiaPhilly,
}

impl TraceFormat {
    pub const ALL: [TraceFormat; 8] = [
        TraceFormat::Normalized,
        TraceFormat::Openb,
        TraceFormat::Itp,
        TraceFormat::Swf,
        TraceFormat::Dlrm,
        TraceFormat::Helios,
        TraceFormat::OpenbStatic,
        TraceFormat::SiaPhilly,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TraceFormat::Normalized => "normalized",
            TraceFormat::Openb => "openb",
            TraceFormat::Itp => "itp",
            TraceFormat::Swf => "swf",
            TraceFormat::Dlrm => "dlrm",
            TraceFormat::Helios => "helios",
            TraceFormat::OpenbStatic => "openb-static",
            TraceFormat::SiaPhilly => "sia-philly",
        }
    }

    /// What [`TraceFormat::detect`] looks for in a file of this format, for messages.
    pub fn expects(self) -> &'static str {
        match self {
            TraceFormat::Normalized => "a `#lachesis-trace v1` line, or a header with submit_s",
            TraceFormat::Openb => "a header with pod_phase or scheduled_time",
            TraceFormat::Itp => "a header with submission_time and num_gpu",
            TraceFormat::Swf => "`;` comment lines, or 18 numbers a line",
            TraceFormat::Dlrm => "a header with instance_sn or max_instance_per_node",
            TraceFormat::Helios => "a header with gpu_num and submit_time",
            TraceFormat::OpenbStatic => "a header with num_gpu and gpu_milli, and no times",
            TraceFormat::SiaPhilly => "a header with timestamp and num_gpus",
        }
    }

    /// Whether jobs of this format carry arrival and duration times. Without them (a static
    /// workload: pods that arrive once and never leave) every submit and duration of the
    /// trace read is 0, a placeholder: such a trace can be placed, not replayed.
    pub fn has_times(self) -> bool {
        self != TraceFormat::OpenbStatic
    }

    /// Parses a format name as [`TraceFormat::as_str`] spells it (case-insensitive).
    pub fn parse(text: &str) -> Option<TraceFormat> {
        Self::ALL
            .into_iter()
            .find(|f| f.as_str().eq_ignore_ascii_case(text.trim()))
    }

    /// Guesses the format from the file's first line (decompressed), then from its file name
    /// (a `.gz` suffix ignored):
    /// - a `#lachesis-trace` line or a header with `submit_s` is normalized (a header without
    ///   the version line then fails with a clear message);
    /// - a `;` comment line, or a line of 18 whitespace-separated numbers, is SWF;
    /// - a header with `instance_sn` or `max_instance_per_node` is DLRM (checked before openb,
    ///   whose `scheduled_time` it shares);
    /// - a header with `pod_phase` or `scheduled_time` is openb;
    /// - one with `submission_time` and `num_gpu` is ITP;
    /// - one with `gpu_num` and `submit_time` is Helios;
    /// - one with `timestamp` and `num_gpus` is Sia's Philly;
    /// - one with `num_gpu` and `gpu_milli` (and none of openb's times) is a static openb list.
    ///
    /// Failing that, by name: `*.swf` is SWF; a name containing `dlrm` is DLRM, `openb` openb,
    /// `helios` or `philly` (or starting with `cluster_log`) Helios; other names starting with
    /// `cluster` are ITP.
    pub fn detect(first_line: &str, file_name: Option<&str>) -> Option<TraceFormat> {
        Self::detect_header(first_line).or_else(|| Self::detect_name(file_name?))
    }

    /// The format the first line shows, if any (see [`TraceFormat::detect`]).
    pub fn detect_header(first_line: &str) -> Option<TraceFormat> {
        if first_line.trim_start().starts_with(normalized::MAGIC) {
            return Some(TraceFormat::Normalized);
        }
        if swf::looks_like_swf(first_line) {
            return Some(TraceFormat::Swf);
        }
        let columns: Vec<&str> = first_line.split(',').map(str::trim).collect();
        let has = |c: &str| columns.contains(&c);
        if has("submit_s") {
            return Some(TraceFormat::Normalized);
        }
        if has("instance_sn") || has("max_instance_per_node") {
            return Some(TraceFormat::Dlrm);
        }
        if has("pod_phase") || has("scheduled_time") {
            return Some(TraceFormat::Openb);
        }
        if has("submission_time") && has("num_gpu") {
            return Some(TraceFormat::Itp);
        }
        if has("gpu_num") && has("submit_time") {
            return Some(TraceFormat::Helios);
        }
        if has("timestamp") && has("num_gpus") {
            return Some(TraceFormat::SiaPhilly);
        }
        if has("num_gpu") && has("gpu_milli") && !has("creation_time") && !has("deletion_time") {
            return Some(TraceFormat::OpenbStatic);
        }
        None
    }

    /// The format a file name suggests, if any (see [`TraceFormat::detect`]).
    pub fn detect_name(file_name: &str) -> Option<TraceFormat> {
        let name = file_name.to_ascii_lowercase();
        let name = name.strip_suffix(".gz").unwrap_or(&name);
        if name.ends_with(".swf") {
            Some(TraceFormat::Swf)
        } else if name.contains("dlrm") {
            Some(TraceFormat::Dlrm)
        } else if name.contains("openb") {
            Some(TraceFormat::Openb)
        } else if name.contains("helios")
            || name.contains("philly")
            || name.starts_with("cluster_log")
        {
            Some(TraceFormat::Helios)
        } else if name.starts_with("cluster") {
            Some(TraceFormat::Itp)
        } else {
            None
        }
    }

    /// Reads a whole trace in this format from `input`, gzip-compressed or not; `source` names
    /// it in errors and becomes the trace's name.
    pub fn read(
        self,
        input: impl Read,
        source: &str,
        options: &ReadOptions,
    ) -> Result<TraceRead, TraceReadError> {
        let input = Decompressed::new(input).map_err(|source_err| TraceReadError::Io {
            file: source.into(),
            source: source_err,
        })?;
        match self {
            TraceFormat::Normalized => normalized::read(input, source, &options.workload_names),
            TraceFormat::Openb => openb::read(input, source),
            TraceFormat::Itp => itp::read(input, source, &options.itp),
            TraceFormat::Swf => swf::read(input, source, &options.swf),
            TraceFormat::Dlrm => dlrm::read(input, source),
            TraceFormat::Helios => helios::read(input, source, &options.helios),
            TraceFormat::OpenbStatic => openb::read_static(input, source),
            TraceFormat::SiaPhilly => sia::read(input, source, &options.sia_philly),
        }
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Options of the readers that must assume what their format lacks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReadOptions {
    /// CPU, memory and node size assumed for ITP jobs.
    pub itp: ItpOptions,
    /// Tenant field, processor and node mapping for SWF jobs.
    pub swf: SwfOptions,
    /// Tenant column, node size and what Helios and Philly jobs lack.
    pub helios: HeliosOptions,
    /// CPU, memory and node size assumed for the jobs of Sia's Philly trace (ITP's knobs).
    pub sia_philly: ItpOptions,
    /// Workload types the normalized reader accepts besides the throughput presets' (those a
    /// custom throughput table defines); any other name in a `workload` column is refused.
    pub workload_names: Vec<String>,
}

/// A trace as read, with the account of what the reader did to the file's rows.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRead {
    pub trace: Trace,
    pub report: ReadReport,
}

/// Most dropped rows kept as examples per drop reason.
pub const DROPPED_EXAMPLES_PER_REASON: usize = 3;

/// What a reader kept and dropped, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadReport {
    pub format: TraceFormat,
    /// Data rows in the file (version line, tenant line and header not counted).
    pub rows: u64,
    /// Rows that became jobs.
    pub kept: u64,
    /// Rows left out, by reason (e.g. `never-scheduled`).
    pub dropped: BTreeMap<String, u64>,
    /// Kept jobs whose duration is only a lower bound (still running when the trace ended).
    pub censored: u64,
    /// The first few dropped rows of each reason, for a human to check.
    pub first_dropped: Vec<DroppedRow>,
    /// Facts about the whole file that no job carries, by name: e.g. the SWF header's
    /// `UnixStartTime` and `MaxProcs`, the Helios `origin` (the wall-clock time of time 0), the
    /// DLRM `window-end-s`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub notes: BTreeMap<String, String>,
    /// Kept rows that carry a requirement the job model has no place for (so it was left out),
    /// by requirement: e.g. DLRM `rdma`, `max-instance-per-node`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unmodelled: BTreeMap<String, u64>,
}

/// One row a reader left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedRow {
    pub line: u64,
    /// The job's id in the file.
    pub job: String,
    pub reason: String,
}

impl ReadReport {
    pub fn new(format: TraceFormat) -> ReadReport {
        ReadReport {
            format,
            rows: 0,
            kept: 0,
            dropped: BTreeMap::new(),
            censored: 0,
            first_dropped: Vec::new(),
            notes: BTreeMap::new(),
            unmodelled: BTreeMap::new(),
        }
    }

    /// Rows dropped for any reason.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.values().sum()
    }

    /// Counts a dropped row, keeping it as an example while its reason has few.
    fn drop_row(&mut self, reason: &str, line: u64, job: &str) {
        let count = self.dropped.entry(reason.to_string()).or_insert(0);
        *count += 1;
        if *count <= DROPPED_EXAMPLES_PER_REASON as u64 {
            self.first_dropped.push(DroppedRow {
                line,
                job: job.to_string(),
                reason: reason.to_string(),
            });
        }
    }
}

/// Checks per-GPU reader options: `gpus_per_node` is 1..=64 and a full node's CPU and memory
/// fit in a `u64` (ITP and Helios/Philly size tasks per GPU).
pub(crate) fn check_per_gpu(
    gpus_per_node: u32,
    cpu_milli_per_gpu: u64,
    mem_mib_per_gpu: u64,
) -> Result<(), String> {
    if !(1..=crate::cluster::MAX_GPUS_PER_NODE).contains(&gpus_per_node) {
        return Err(format!(
            "gpus_per_node must be 1..={}, got {gpus_per_node}",
            crate::cluster::MAX_GPUS_PER_NODE
        ));
    }
    let node = u64::from(gpus_per_node);
    if cpu_milli_per_gpu.checked_mul(node).is_none() || mem_mib_per_gpu.checked_mul(node).is_none()
    {
        return Err("cpu_milli_per_gpu or mem_mib_per_gpu is too large".into());
    }
    Ok(())
}

/// Why a trace file could not be read. Each names the file, and the line and field at fault.
#[derive(Debug, thiserror::Error)]
pub enum TraceReadError {
    #[error("{file}: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file} line {line}: {problem}")]
    Line {
        file: String,
        line: u64,
        problem: String,
    },
    #[error("{file} line {line}, field {field}: {problem}")]
    Field {
        file: String,
        line: u64,
        field: String,
        problem: String,
    },
    #[error("{file}: {source}")]
    Trace {
        file: String,
        #[source]
        source: TraceError,
    },
    #[error("{file}: invalid reader options: {problem}")]
    Options { file: String, problem: String },
}

impl TraceReadError {
    /// Turns what a reader's options `validate` refused into the error naming `file`.
    fn options(file: &str) -> impl FnOnce(String) -> TraceReadError + '_ {
        move |problem| TraceReadError::Options {
            file: file.into(),
            problem,
        }
    }
}

/// Reads the trace at `path` in `format`, or in the format detected from its first line and
/// name, with the default [`ReadOptions`].
pub fn read_trace(path: &Path, format: Option<TraceFormat>) -> Result<TraceRead, TraceReadError> {
    read_trace_with(path, format, &ReadOptions::default())
}

/// [`read_trace`] with explicit reader options.
pub fn read_trace_with(
    path: &Path,
    format: Option<TraceFormat>,
    options: &ReadOptions,
) -> Result<TraceRead, TraceReadError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| TraceReadError::Io {
        file: file.clone(),
        source,
    })?;
    if let Some(format) = format {
        return format.read(bytes.as_slice(), &file, options);
    }
    let first = first_line(&bytes).map_err(|source| TraceReadError::Io {
        file: file.clone(),
        source,
    })?;
    if let Some(format) = TraceFormat::detect_header(&first) {
        return format.read(bytes.as_slice(), &file, options);
    }
    let unknown_header = |found: String| TraceReadError::Line {
        file: file.clone(),
        line: 1,
        problem: format!(
            "{found}; the formats tried, and what each expects:\n{}\nforce one by naming it \
             (`--format NAME` on the command line)",
            tried_formats()
        ),
    };
    let header = table::quote(first.trim_end_matches(['\r', '\n']));
    let name = path.file_name().and_then(|n| n.to_str());
    let Some(format) = name.and_then(TraceFormat::detect_name) else {
        return Err(unknown_header(format!(
            "cannot tell the trace format from this line ({header}) or the file name"
        )));
    };
    // The name guessed the format, but no reader matched the header: if this one refuses it
    // too, say what each format expects.
    format
        .read(bytes.as_slice(), &file, options)
        .map_err(|err| match err {
            TraceReadError::Line {
                line: 1, problem, ..
            } => unknown_header(format!(
                "the file name suggests the {format} format, whose reader refuses the header \
                 ({problem})"
            )),
            other => other,
        })
}

/// One line per format: its name and what [`TraceFormat::detect`] looks for.
fn tried_formats() -> String {
    let lines: Vec<String> = TraceFormat::ALL
        .iter()
        .map(|f| format!("  {:<13} {}", f.as_str(), f.expects()))
        .collect();
    lines.join("\n")
}

/// gzip's first two bytes.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Longest first line read to detect a format, in bytes.
const MAX_FIRST_LINE: u64 = 64 * 1024;

/// The first line of `bytes` (decompressed if they are gzip), lossily as text.
fn first_line(bytes: &[u8]) -> std::io::Result<String> {
    let mut line = Vec::new();
    Decompressed::new(bytes)?
        .take(MAX_FIRST_LINE)
        .read_until(b'\n', &mut line)?;
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// A reader's input, decompressed when it starts with gzip's magic bytes (all members of a
/// multi-member file are read).
enum Decompressed<R: Read> {
    Plain(BufReader<R>),
    Gzip(BufReader<flate2::bufread::MultiGzDecoder<BufReader<R>>>),
}

impl<R: Read> Decompressed<R> {
    fn new(input: R) -> std::io::Result<Self> {
        let mut input = BufReader::new(input);
        // One fill shows both magic bytes: BufReader asks for its whole capacity.
        let head = input.fill_buf()?;
        Ok(if head.starts_with(&GZIP_MAGIC) {
            Decompressed::Gzip(BufReader::new(flate2::bufread::MultiGzDecoder::new(input)))
        } else {
            Decompressed::Plain(input)
        })
    }
}

impl<R: Read> Read for Decompressed<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Decompressed::Plain(r) => r.read(buf),
            Decompressed::Gzip(r) => r.read(buf),
        }
    }
}

impl<R: Read> BufRead for Decompressed<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        match self {
            Decompressed::Plain(r) => r.fill_buf(),
            Decompressed::Gzip(r) => r.fill_buf(),
        }
    }
    fn consume(&mut self, amount: usize) {
        match self {
            Decompressed::Plain(r) => r.consume(amount),
            Decompressed::Gzip(r) => r.consume(amount),
        }
    }
}

/// A tenant table grown in order of first appearance, for readers whose tenants are names
/// found in the rows.
#[derive(Default)]
struct Tenants {
    names: Vec<String>,
    ids: HashMap<String, TenantId>,
}

impl Tenants {
    /// The id of `name`, added to the table if new.
    fn id(&mut self, name: &str) -> TenantId {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = TenantId(u32::try_from(self.names.len()).expect("fewer than 2^32 tenants"));
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }
}

/// What a reader of a trace with wall-clock times gathers row by row: time 0 (the earliest
/// time seen, and its text) and the jobs kept so far.
#[derive(Default)]
struct WallClockJobs {
    origin: Option<(i64, String)>,
    kept: Vec<WallClockJob>,
}

/// A kept job of a wall-clock trace, its submit still in wall-clock seconds.
struct WallClockJob {
    job: JobSpec,
    submit_s: i64,
    duration: SimTime,
}

/// What became of one row of a wall-clock trace.
enum WallClockRow {
    Kept(WallClockJob),
    Dropped(&'static str),
}

impl WallClockJobs {
    /// Takes `secs` (written `text` in the file) as time 0 if it is the earliest so far.
    fn see(&mut self, secs: i64, text: &str) {
        if self.origin.as_ref().is_none_or(|(first, _)| secs < *first) {
            self.origin = Some((secs, text.trim().to_string()));
        }
    }

    /// Keeps the row's job, or counts its drop, in `report`.
    fn add(&mut self, report: &mut ReadReport, row: WallClockRow, line: u64, name: &str) {
        match row {
            WallClockRow::Kept(job) => {
                report.kept += 1;
                self.kept.push(job);
            }
            WallClockRow::Dropped(reason) => report.drop_row(reason, line, name),
        }
    }

    /// The trace: submit = wall-clock submit - time 0, whose text is noted in the report as
    /// [`helios::ORIGIN_NOTE`].
    fn finish(
        self,
        source: &str,
        tenants: Vec<String>,
        mut report: ReadReport,
    ) -> Result<TraceRead, TraceReadError> {
        let origin_s = match self.origin {
            Some((secs, text)) => {
                report.notes.insert(helios::ORIGIN_NOTE.into(), text);
                secs
            }
            None => 0,
        };
        let (jobs, durations) = self
            .kept
            .into_iter()
            .map(|k| {
                // Every submit was seen, so none is before time 0.
                let submit = SimTime::from_secs((k.submit_s - origin_s).unsigned_abs());
                (JobSpec { submit, ..k.job }, k.duration)
            })
            .unzip();
        finish(source, jobs, durations, tenants, report)
    }
}

/// Splits a job of `gpus` GPUs over nodes of `gpus_per_node`: ceil(gpus / gpus_per_node)
/// tasks of equal size, as (tasks, GPUs per task); `None` when the count does not split evenly
/// (9 GPUs over 8-GPU nodes) or either number is 0.
pub fn split_gang(gpus: u32, gpus_per_node: u32) -> Option<(u32, u32)> {
    if gpus == 0 || gpus_per_node == 0 {
        return None;
    }
    let tasks = gpus.div_ceil(gpus_per_node);
    gpus.is_multiple_of(tasks).then(|| (tasks, gpus / tasks))
}

/// Builds the trace from the rows a reader kept, naming the file if the trace is refused.
fn finish(
    source: &str,
    jobs: Vec<JobSpec>,
    durations: Vec<SimTime>,
    tenants: Vec<String>,
    report: ReadReport,
) -> Result<TraceRead, TraceReadError> {
    let trace =
        Trace::new(source, jobs, durations, tenants).map_err(|err| TraceReadError::Trace {
            file: source.into(),
            source: err,
        })?;
    Ok(TraceRead { trace, report })
}

/// The text of the fixture `traces/fixtures/{name}`, for reader tests.
#[cfg(test)]
pub(crate) fn fixture_text(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../traces/fixtures")
        .join(name);
    std::fs::read_to_string(path).expect("the fixture is in the repository")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::PathBuf;

    /// The fixtures of published layouts: (file, format, data rows).
    const LAYOUT_FIXTURES: [(&str, TraceFormat, usize); 2] = [
        ("philly-sia-format.csv", TraceFormat::SiaPhilly, 25),
        ("openb-static-format.csv", TraceFormat::OpenbStatic, 20),
    ];

    /// The fixture with field `field` (modulo the row's width) of data row `row` (0-based,
    /// after the header) set to `value`.
    fn mutated(name: &str, row: usize, field: usize, value: &str) -> String {
        let mut lines: Vec<String> = fixture_text(name).lines().map(String::from).collect();
        let line = &mut lines[row + 1];
        let mut fields: Vec<&str> = line.split(',').collect();
        let i = field % fields.len();
        fields[i] = value;
        *line = fields.join(",");
        lines.join("\n")
    }

    proptest! {
        /// One field of one row of a published layout's fixture changed: every row is still
        /// kept or dropped, or the error names that row's line.
        #[test]
        fn mutated_layout_rows_are_kept_dropped_or_named(
            fixture in 0usize..LAYOUT_FIXTURES.len(),
            row in 0usize..25,
            field in 0usize..5,
            value in "[0-9]{1,7}(\\.[0-9]{1,4})?|-1|[a-z-]{0,5}|2017-1[0-2]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-5][0-9]",
        ) {
            let (name, format, rows) = LAYOUT_FIXTURES[fixture];
            let row = row % rows;
            let text = mutated(name, row, field, &value);
            match format.read(text.as_bytes(), "m.csv", &ReadOptions::default()) {
                Ok(read) => {
                    let r = &read.report;
                    prop_assert_eq!(r.rows, rows as u64);
                    prop_assert_eq!(r.kept + r.dropped_total(), r.rows);
                    prop_assert_eq!(read.trace.len() as u64, r.kept);
                }
                Err(e) => {
                    let line = format!("m.csv line {}, field ", row + 2);
                    prop_assert!(e.to_string().starts_with(&line), "{}", e);
                }
            }
        }
    }

    fn repo_file(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
    }

    /// The shared full traces, or `None` (after saying why) when they are not there.
    fn shared_traces(file: &str) -> Option<PathBuf> {
        let dir = std::env::var_os("LACHESIS_SHARED_TRACES")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_file("../shared/traces"));
        let path = dir.join(file);
        if path.exists() {
            Some(path)
        } else {
            println!(
                "skipped: {} not found (set LACHESIS_SHARED_TRACES)",
                path.display()
            );
            None
        }
    }

    #[test]
    fn formats_are_detected_from_header_then_name() {
        use TraceFormat::*;
        let (detect, detect_header) = (TraceFormat::detect, TraceFormat::detect_header);
        assert_eq!(detect("#lachesis-trace v9", None), Some(Normalized));
        assert_eq!(detect("job_id,submit_s,duration_s", None), Some(Normalized));
        let openb = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,\
                     creation_time,deletion_time,scheduled_time";
        assert_eq!(detect(openb, None), Some(Openb));
        assert_eq!(
            detect("job_id,submission_time,duration,num_gpu\r", None),
            Some(Itp)
        );
        assert_eq!(detect("", Some("openb_pod_list_x.csv")), Some(Openb));
        assert_eq!(detect("a,b", Some("cluster04.csv")), Some(Itp));
        assert_eq!(detect("a,b", Some("jobs.csv")), None);
        assert_eq!(TraceFormat::parse(" ITP "), Some(Itp));
        assert_eq!(detect("; Version: 2.2", None), Some(Swf));
        assert_eq!(
            detect("a b", Some("CTC-SP2-1996-3.1-cln.swf.gz")),
            Some(Swf)
        );
        let dlrm = "instance_sn,role,app_name,cpu_request,creation_time,scheduled_time";
        assert_eq!(detect(dlrm, None), Some(Dlrm));
        assert_eq!(detect("", Some("disaggregated_DLRM_trace.csv")), Some(Dlrm));
        let helios = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time";
        assert_eq!(detect(helios, None), Some(Helios));
        assert_eq!(detect("", Some("cluster_log.csv")), Some(Helios));
        assert_eq!(detect("", Some("philly_trace.csv")), Some(Helios));
        let sia = "timestamp,duration,num_gpus,gpu_time,cluster";
        assert_eq!(detect(sia, Some("philly.csv")), Some(SiaPhilly));
        let static_openb = "name,cpu_milli,memory_mib,num_gpu,gpu_milli";
        assert_eq!(
            detect(static_openb, Some("openb_pod_list_multigpu50.csv")),
            Some(OpenbStatic)
        );
        // An openb header that lost scheduled_time is neither format: the name decides.
        assert_eq!(
            detect_header(&format!("{static_openb},creation_time")),
            None
        );
        for format in TraceFormat::ALL {
            assert_eq!(TraceFormat::parse(format.as_str()), Some(format));
        }
    }

    #[test]
    fn gangs_split_evenly_or_not_at_all() {
        // 8 per node: 16 -> 2 x 8, 12 -> ceil(12/8) = 2 x 6, 9 -> 2 tasks, 9/2 not whole.
        assert_eq!(split_gang(16, 8), Some((2, 8)));
        assert_eq!(split_gang(12, 8), Some((2, 6)));
        assert_eq!(split_gang(9, 8), None);
        assert_eq!(split_gang(0, 8), None);
        assert_eq!(split_gang(3, 0), None);
    }

    #[test]
    fn fixtures_are_detected_and_read() {
        let swf = read_trace(&repo_file("traces/fixtures/sample.swf"), None).unwrap();
        let r = &swf.report;
        // 10 jobs: 3 cancelled before start, 7 run time -1, 9 no processors.
        assert_eq!((r.format, r.rows, r.kept), (TraceFormat::Swf, 10, 7));
        assert_eq!(r.dropped.get(swf::CANCELLED_BEFORE_START), Some(&1));
        assert_eq!(r.dropped.get(swf::UNKNOWN_RUN_TIME), Some(&1));
        assert_eq!(r.dropped.get(swf::UNKNOWN_PROCESSORS), Some(&1));
        assert_eq!(r.notes["UnixStartTime"], "946684800");
        let helios = read_trace(&repo_file("traces/fixtures/helios_sample.csv"), None).unwrap();
        let r = &helios.report;
        // 12 jobs: 1000007 cancelled before start, 1000010's 9 GPUs do not split.
        assert_eq!((r.format, r.rows, r.kept), (TraceFormat::Helios, 12, 10));
        assert_eq!(r.dropped.get(helios::CANCELLED_BEFORE_START), Some(&1));
        assert_eq!(r.dropped.get(helios::UNEVEN_GANG), Some(&1));
        let gangs: Vec<(u32, u32)> = helios
            .trace
            .jobs()
            .iter()
            .filter(|j| j.tasks > 1)
            .map(|j| (j.tasks, j.task.gpus))
            .collect();
        assert_eq!(gangs, [(2, 8), (4, 8), (2, 6)]);
        assert_eq!(helios.trace.tenants(), ["vcJkd", "vchbv", "vcpDC"]);
        let philly = read_trace(&repo_file("traces/fixtures/philly_sample.csv"), None).unwrap();
        let r = &philly.report;
        // 8 jobs: _10183 killed before start, _10187 never started.
        assert_eq!((r.format, r.rows, r.kept), (TraceFormat::Helios, 8, 6));
        assert_eq!(r.dropped.get(helios::NEVER_STARTED), Some(&1));
        assert_eq!(r.notes[helios::ORIGIN_NOTE], "2017-10-03 03:38:40");
        let sia = read_trace(&repo_file("traces/fixtures/philly-sia-format.csv"), None).unwrap();
        let r = &sia.report;
        assert_eq!((r.format, r.rows, r.kept), (TraceFormat::SiaPhilly, 25, 24));
        assert_eq!(r.dropped.get(sia::DUPLICATE_ROW), Some(&1));
        let path = repo_file("traces/fixtures/openb-static-format.csv");
        let r = read_trace(&path, None).unwrap().report;
        assert_eq!(
            (r.format, r.rows, r.kept),
            (TraceFormat::OpenbStatic, 20, 20)
        );
        // Forced to another format, the file is refused naming the missing column.
        let forced = read_trace(&path, Some(TraceFormat::SiaPhilly)).unwrap_err();
        assert!(
            forced.to_string().contains("missing column timestamp"),
            "{forced}"
        );
    }

    #[test]
    fn format_fixtures_are_the_shared_ones() {
        for name in ["philly-sia-format.csv", "openb-static-format.csv"] {
            let Some(shared) = shared_traces(&format!("fixtures/{name}")) else {
                return;
            };
            let ours = std::fs::read(repo_file(&format!("traces/fixtures/{name}"))).unwrap();
            assert_eq!(std::fs::read(shared).unwrap(), ours, "{name}");
        }
    }

    #[test]
    fn gzip_files_are_detected_and_read() {
        use std::io::Write;
        let text = std::fs::read(repo_file("traces/fixtures/helios_sample.csv")).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&text).unwrap();
        let dir = std::env::temp_dir().join(format!("lachesis-gz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("jobs.csv.gz");
        std::fs::write(&path, gz.finish().unwrap()).unwrap();
        let read = read_trace(&path, None).unwrap();
        assert_eq!(
            (read.report.format, read.report.kept),
            (TraceFormat::Helios, 10)
        );
        // A truncated gzip stream is an I/O error naming the file.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let err = read_trace(&path, Some(TraceFormat::Helios)).unwrap_err();
        assert!(err.to_string().contains("jobs.csv.gz"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn excerpts_are_detected_and_read() {
        let itp = read_trace(&repo_file("traces/itp/cluster10.csv"), None).unwrap();
        assert_eq!(itp.report.format, TraceFormat::Itp);
        assert_eq!(itp.trace.len(), 260);
        let openb = read_trace(&repo_file("traces/openb/openb_pod_excerpt.csv"), None).unwrap();
        assert_eq!(openb.report.format, TraceFormat::Openb);
        assert_eq!((openb.report.rows, openb.report.kept), (400, 381));
        let tiny = read_trace(&repo_file("traces/tiny.csv"), None).unwrap();
        assert_eq!(tiny.report.format, TraceFormat::Normalized);
    }

    #[test]
    fn undetectable_and_missing_files_are_named() {
        let err = read_trace(Path::new("no/such/trace.csv"), None).unwrap_err();
        assert!(err.to_string().starts_with("no/such/trace.csv: "), "{err}");
        let dir = std::env::temp_dir().join(format!("lachesis-detect-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("jobs.csv");
        std::fs::write(&path, "a,b\n1,2\n").unwrap();
        let error_of = |path: &Path| read_trace(path, None).unwrap_err().to_string();
        let err = error_of(&path);
        assert!(
            err.contains("jobs.csv line 1: cannot tell the trace format from this line (\"a,b\")"),
            "{err}"
        );
        // Every format is listed with what it expects, and how to force one.
        for format in TraceFormat::ALL {
            let line = format!("\n  {:<13} {}", format.as_str(), format.expects());
            assert!(err.contains(&line), "{format}: {err}");
        }
        assert!(
            err.ends_with("(`--format NAME` on the command line)"),
            "{err}"
        );
        // A name that suggests a format whose reader refuses the header gets the same list.
        let path = dir.join("openb_pod_list_gpuspec33.csv");
        std::fs::write(&path, "name,cpu_milli,gpu_spec\np,1,V100\n").unwrap();
        let err = error_of(&path);
        assert!(
            err.contains("line 1: the file name suggests the openb format, whose reader refuses the header (missing column memory_mib"),
            "{err}"
        );
        assert!(
            err.contains("\n  sia-philly    a header with timestamp"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn full_openb_pod_list_counts() {
        let Some(path) = shared_traces("alibaba-openb-2023/openb_pod_list_default.csv") else {
            return;
        };
        let read = read_trace(&path, None).unwrap();
        let report = &read.report;
        assert_eq!(report.rows, 8152);
        assert_eq!(report.dropped.get(openb::NEVER_SCHEDULED), Some(&897));
        assert_eq!(report.dropped_total(), 897);
        assert_eq!(report.kept, 8152 - 897);
        // 5193 Running pods, 34 of them deleted at the collection end (12,902,960 s).
        assert_eq!(report.censored, 34);
        assert_eq!(read.trace.len(), 7255);
    }

    #[test]
    fn full_itp_clusters_count() {
        let mut total = 0;
        for n in ["01", "02", "03", "04", "05", "06", "07", "10"] {
            let Some(path) = shared_traces(&format!("msft-itp-2021/cluster{n}.csv")) else {
                return;
            };
            let read = read_trace(&path, None).unwrap();
            assert_eq!(read.report.dropped_total(), 0);
            total += read.trace.len();
        }
        assert_eq!(total, 45_170);
    }

    #[test]
    fn full_swf_logs_count() {
        // (file, job lines, cancelled before start, unknown run time, unknown processors),
        // checked against hpc-swf/FIELDS.txt: 77,222 + 28,476 + 243,306 = 349,004 jobs.
        let logs = [
            ("CTC-SP2-1996-3.1-cln.swf.gz", 77_222, 0, 0, 0),
            ("KTH-SP2-1996-2.1-cln.swf.gz", 28_476, 0, 0, 1),
            ("SDSC-BLUE-2000-4.2-cln.swf.gz", 243_306, 10_764, 2, 0),
        ];
        let mut rows = 0;
        for (file, jobs, cancelled, no_run_time, no_procs) in logs {
            let Some(path) = shared_traces(&format!("hpc-swf/{file}")) else {
                return;
            };
            let read = read_trace(&path, None).unwrap();
            let r = &read.report;
            println!(
                "{file}: {} rows, {} kept, dropped {:?}",
                r.rows, r.kept, r.dropped
            );
            assert_eq!(r.format, TraceFormat::Swf);
            assert_eq!(r.rows, jobs);
            assert_eq!(
                r.dropped.get(swf::CANCELLED_BEFORE_START).copied(),
                (cancelled > 0).then_some(cancelled)
            );
            assert_eq!(
                r.dropped.get(swf::UNKNOWN_RUN_TIME).copied(),
                (no_run_time > 0).then_some(no_run_time)
            );
            assert_eq!(
                r.dropped.get(swf::UNKNOWN_PROCESSORS).copied(),
                (no_procs > 0).then_some(no_procs)
            );
            assert_eq!(r.kept + r.dropped_total(), r.rows);
            assert_eq!(read.trace.len() as u64, r.kept);
            assert!(r.notes.contains_key("UnixStartTime") && r.notes.contains_key("MaxProcs"));
            rows += r.rows;
        }
        assert_eq!(rows, 349_004);
    }

    #[test]
    fn full_dlrm_instances_count() {
        let Some(path) = shared_traces("alibaba-dlrm-2025/disaggregated_DLRM_trace.csv") else {
            return;
        };
        let read = read_trace(&path, None).unwrap();
        let r = &read.report;
        assert_eq!(r.format, TraceFormat::Dlrm);
        assert_eq!((r.rows, r.kept, r.dropped_total()), (23_871, 23_871, 0));
        // 7,280 created before the window + 8,878 alive after it - 4,677 both.
        assert_eq!(r.censored, 11_481);
        assert_eq!(r.notes[dlrm::WINDOW_END_NOTE], "2677541");
        // Every instance asks for RDMA and disk; 12,248 have no density limit (-1).
        assert_eq!(r.unmodelled[dlrm::RDMA], 23_871);
        assert_eq!(r.unmodelled[dlrm::DISK], 23_871);
        assert_eq!(r.unmodelled[dlrm::MAX_INSTANCE_PER_NODE], 23_871 - 12_248);
        assert_eq!(read.trace.tenants().len(), 156);
        let gpu = read
            .trace
            .jobs()
            .iter()
            .filter(|j| j.task.gpus == 1)
            .count();
        assert_eq!(gpu, 7_386);
    }

    #[test]
    fn itp_excerpt_is_the_whole_shared_file() {
        let Some(path) = shared_traces("msft-itp-2021/cluster10.csv") else {
            return;
        };
        let excerpt = std::fs::read(repo_file("traces/itp/cluster10.csv")).unwrap();
        assert_eq!(std::fs::read(path).unwrap(), excerpt);
    }
}
