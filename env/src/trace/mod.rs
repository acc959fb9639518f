//! Trace readers: turn a job trace file into a [`Trace`] and a [`ReadReport`] saying what was
//! kept, dropped and why. One module per format; [`stats`] summarises a trace.
//!
//! Formats: [`normalized`] (Lachesis' own CSV, read and written), [`openb`] (Alibaba GPU
//! cluster trace 2023), [`itp`] (Microsoft ITP clusters). The format is given, or detected
//! from the first line of the file and, failing that, from the file name.
//!
//! Every error names the file, the line and, where there is one, the field; no input makes a
//! reader panic. Depends on the job model only: nothing here knows of the simulator or policies.

pub mod itp;
pub mod normalized;
pub mod openb;
pub mod split;
pub mod stats;
pub mod synthetic;
mod table;

pub use itp::ItpOptions;
pub use normalized::{TraceWriteError, write_normalized};
pub use stats::TraceStats;

use crate::job::{JobSpec, Trace, TraceError};
use crate::units::SimTime;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
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
}

impl TraceFormat {
    pub const ALL: [TraceFormat; 3] = [
        TraceFormat::Normalized,
        TraceFormat::Openb,
        TraceFormat::Itp,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TraceFormat::Normalized => "normalized",
            TraceFormat::Openb => "openb",
            TraceFormat::Itp => "itp",
        }
    }

    /// Parses a format name as [`TraceFormat::as_str`] spells it (case-insensitive).
    pub fn parse(text: &str) -> Option<TraceFormat> {
        Self::ALL
            .into_iter()
            .find(|f| f.as_str().eq_ignore_ascii_case(text.trim()))
    }

    /// Guesses the format from the file's first line, then from its file name:
    /// a `#lachesis-trace` line or a header with `submit_s` is normalized (a header without the
    /// version line then fails with a clear message); a header with `pod_phase` or
    /// `scheduled_time` is openb; one with `submission_time` and `num_gpu` is ITP. Failing
    /// that, a file name containing `openb` is openb and one starting with `cluster` is ITP.
    pub fn detect(first_line: &str, file_name: Option<&str>) -> Option<TraceFormat> {
        if first_line.trim_start().starts_with(normalized::MAGIC) {
            return Some(TraceFormat::Normalized);
        }
        let columns: Vec<&str> = first_line.split(',').map(str::trim).collect();
        let has = |c: &str| columns.contains(&c);
        if has("submit_s") {
            return Some(TraceFormat::Normalized);
        }
        if has("pod_phase") || has("scheduled_time") {
            return Some(TraceFormat::Openb);
        }
        if has("submission_time") && has("num_gpu") {
            return Some(TraceFormat::Itp);
        }
        let name = file_name?.to_ascii_lowercase();
        if name.contains("openb") {
            Some(TraceFormat::Openb)
        } else if name.starts_with("cluster") {
            Some(TraceFormat::Itp)
        } else {
            None
        }
    }

    /// Reads a whole trace in this format from `input`; `source` names it in errors and becomes
    /// the trace's name.
    pub fn read(
        self,
        input: impl Read,
        source: &str,
        options: &ReadOptions,
    ) -> Result<TraceRead, TraceReadError> {
        match self {
            TraceFormat::Normalized => normalized::read(input, source),
            TraceFormat::Openb => openb::read(input, source),
            TraceFormat::Itp => itp::read(input, source, &options.itp),
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
    let format = match format {
        Some(format) => format,
        None => {
            let first = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
            let name = path.file_name().and_then(|n| n.to_str());
            TraceFormat::detect(&String::from_utf8_lossy(first), name).ok_or_else(|| {
                TraceReadError::Line {
                    file: file.clone(),
                    line: 1,
                    problem: format!(
                        "cannot tell the trace format from this line or the file name: \
                         expected `{} v1`, an openb header (with pod_phase) or an ITP header \
                         (with submission_time,num_gpu); name the format instead",
                        normalized::MAGIC
                    ),
                }
            })?
        }
    };
    format.read(bytes.as_slice(), &file, options)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

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
        let detect = TraceFormat::detect;
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
        let err = read_trace(&path, None).unwrap_err().to_string();
        assert!(
            err.contains("jobs.csv line 1: cannot tell the trace format"),
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
        assert_eq!(report.censored, 5193);
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
    fn itp_excerpt_is_the_whole_shared_file() {
        let Some(path) = shared_traces("msft-itp-2021/cluster10.csv") else {
            return;
        };
        let excerpt = std::fs::read(repo_file("traces/itp/cluster10.csv")).unwrap();
        assert_eq!(std::fs::read(path).unwrap(), excerpt);
    }
}
