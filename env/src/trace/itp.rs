//! Reader for the Microsoft ITP deep-learning cluster files (`clusterNN.csv` in
//! github.com/microsoft/elasticflow-traces, `data/raw-traces.tar.gz`). One row becomes one job.
//!
//! Columns used (others are ignored): `job_id`, `submission_time` (seconds from the start of
//! collection), `duration` (run time, seconds), `num_gpu` (GPUs, >= 1).
//!
//! Rules, every one an assumption about a trace that does not say ([`ItpOptions`] overrides the
//! numbers; Sia's Philly trace, which lacks the same, uses the same options):
//! - submit = `submission_time`; true duration = `duration`.
//! - A job of up to `gpus_per_node` (8) GPUs is one task. A larger job is a gang spread over
//!   nodes: tasks = ceil(num_gpu / gpus_per_node), each of num_gpu / tasks GPUs; a count that
//!   does not split evenly (e.g. 12 GPUs -> 2 x 6 does, 9 does not) is an error naming the line.
//! - Each task asks for `cpu_milli_per_gpu` (4000) milli-cores and `mem_mib_per_gpu` (16384)
//!   MiB per GPU it holds: the trace has no CPU or memory.
//! - No GPU type constraint (the trace has no GPU model), priority 0, no runtime estimate, one
//!   tenant named `default` (the trace has no users or virtual clusters), kind training.
//! - qos latency-sensitive and preemptible: ITP has no classes, so every job gets the same one
//!   (class-based preemption rules treat them as peers); the jobs are the cluster's main
//!   training work, not scavengers, yet the platform does preempt and restart them from
//!   checkpoints, so policies such as Tiresias may preempt them.

use super::table::{self, Table, Unknown};
use super::{ReadReport, TraceFormat, TraceRead, TraceReadError};
use crate::job::{JobKind, JobSpec, Qos, TaskRequest};
use crate::units::{JobId, SimTime, TenantId};
use serde::{Deserialize, Serialize};
use std::io::Read;

/// The one tenant of an ITP trace.
pub const TENANT: &str = "default";

const COLUMNS: &[&str] = &["job_id", "submission_time", "duration", "num_gpu"];

/// What the ITP reader assumes for what the trace lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ItpOptions {
    /// CPU a task asks for per GPU it holds, milli-cores.
    pub cpu_milli_per_gpu: u64,
    /// Memory a task asks for per GPU it holds, MiB.
    pub mem_mib_per_gpu: u64,
    /// GPUs of one node: larger jobs become gangs of tasks of at most this many GPUs (1..=64).
    pub gpus_per_node: u32,
    /// QoS class given to every job.
    pub qos: Qos,
    /// Whether every job may be preempted.
    pub preemptible: bool,
}

impl Default for ItpOptions {
    fn default() -> Self {
        ItpOptions {
            cpu_milli_per_gpu: 4000,
            mem_mib_per_gpu: 16384,
            gpus_per_node: 8,
            qos: Qos::LatencySensitive,
            preemptible: true,
        }
    }
}

impl ItpOptions {
    /// Checks `gpus_per_node` is 1..=64 and that a full node's CPU and memory fit in a `u64`.
    pub fn validate(&self) -> Result<(), String> {
        super::check_per_gpu(
            self.gpus_per_node,
            self.cpu_milli_per_gpu,
            self.mem_mib_per_gpu,
        )?;
        Ok(())
    }

    /// Splits a job of `gpus` GPUs into (tasks, GPUs per task), or `None` if it does not split
    /// evenly over ceil(gpus / gpus_per_node) nodes.
    pub fn gang(&self, gpus: u32) -> Option<(u32, u32)> {
        super::split_gang(gpus, self.gpus_per_node)
    }

    /// Checks these options, then opens `input`'s table of `columns`: the start of a reader of
    /// a trace that gives only GPU counts.
    pub(crate) fn open<'f, R: Read>(
        &self,
        input: R,
        source: &'f str,
        columns: &'static [&'static str],
    ) -> Result<Table<'f, R>, TraceReadError> {
        self.validate().map_err(TraceReadError::options(source))?;
        Table::new(source, table::csv_reader(input), columns, Unknown::Ignore)
    }

    /// A training job of `tasks` tasks of `gpus` GPUs each, asking for the per-GPU CPU and
    /// memory, with this QoS class and preemptibility; no GPU type, priority 0, no estimate.
    pub(crate) fn job(&self, name: &str, tasks: u32, gpus: u32, tenant: TenantId) -> JobSpec {
        JobSpec {
            id: JobId(0),
            name: name.to_string(),
            submit: SimTime::ZERO,
            tasks,
            task: TaskRequest::whole(
                gpus,
                self.cpu_milli_per_gpu * u64::from(gpus),
                self.mem_mib_per_gpu * u64::from(gpus),
            ),
            gpu_types: Vec::new(),
            tenant,
            priority: 0,
            qos: self.qos,
            preemptible: self.preemptible,
            kind: JobKind::Training,
            estimate: None,
            workload: None,
            constraints: Default::default(),
            elastic: None,
        }
    }
}

/// Reads an ITP cluster file; `source` names it in errors and becomes the trace's name.
pub fn read(
    input: impl Read,
    source: &str,
    options: &ItpOptions,
) -> Result<TraceRead, TraceReadError> {
    let mut rows = options.open(input, source, COLUMNS)?;
    let mut report = ReadReport::new(TraceFormat::Itp);
    let (mut jobs, mut durations) = (Vec::new(), Vec::new());
    while let Some(row) = rows.next_row()? {
        report.rows += 1;
        let (job, duration) = parse_job(&row, options)?;
        jobs.push(job);
        durations.push(duration);
        report.kept += 1;
    }
    super::finish(source, jobs, durations, vec![TENANT.into()], report)
}

fn parse_job(
    row: &table::Row<'_>,
    options: &ItpOptions,
) -> Result<(JobSpec, SimTime), TraceReadError> {
    let num_gpu = row.int_in("num_gpu", 1..=u32::MAX)?;
    let (tasks, gpus) = options.gang(num_gpu).ok_or_else(|| {
        row.error(
            "num_gpu",
            format!(
                "expected a GPU count that splits evenly over ceil(num_gpu / {}) nodes, \
                 got {num_gpu}",
                options.gpus_per_node
            ),
        )
    })?;
    let job = JobSpec {
        submit: row.secs("submission_time")?,
        ..options.job(row.str("job_id"), tasks, gpus, TenantId(0))
    };
    Ok((job, row.secs("duration")?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read_rows(rows: &str) -> Result<TraceRead, TraceReadError> {
        let text = format!("job_id,submission_time,duration,num_gpu\n{rows}");
        read(text.as_bytes(), "c.csv", &ItpOptions::default())
    }

    #[test]
    fn gangs_split_evenly_over_nodes() {
        let o = ItpOptions::default();
        // 8 per node: 1 -> 1x1, 8 -> 1x8, 12 -> ceil(12/8)=2 tasks of 6, 64 -> 8x8.
        assert_eq!(o.gang(1), Some((1, 1)));
        assert_eq!(o.gang(8), Some((1, 8)));
        assert_eq!(o.gang(12), Some((2, 6)));
        assert_eq!(o.gang(64), Some((8, 8)));
        // 9 -> 2 tasks, 9 / 2 is not whole.
        assert_eq!(o.gang(9), None);
        assert_eq!(o.gang(0), None);
    }

    #[test]
    fn rows_become_jobs_with_the_documented_defaults() {
        let read = read_rows("a,10,600,1\nb,5,700,32\n").unwrap();
        let t = &read.trace;
        assert_eq!(read.report.kept, 2);
        let b = &t.jobs()[0];
        assert_eq!((b.name.as_str(), b.tasks, b.task.gpus), ("b", 4, 8));
        // per task: 8 GPUs x 4000 milli-cores, 8 x 16384 MiB
        assert_eq!((b.task.cpu_milli, b.task.mem_mib), (32_000, 131_072));
        assert_eq!(t.true_duration(b.id), SimTime::from_secs(700));
        assert!(b.preemptible && b.qos == Qos::LatencySensitive && b.kind == JobKind::Training);
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = read_rows("a,10,600,1\nb,10,600,9\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("c.csv line 3, field num_gpu: expected a GPU count")
        );
        let e = read_rows("a,10,600,abc\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "c.csv line 2, field num_gpu: expected an integer 1..=4294967295, got \"abc\""
        );
        let e = read_rows("a,10,-5,1\n").unwrap_err();
        assert!(
            e.to_string().starts_with("c.csv line 2, field duration:"),
            "{e}"
        );
        let bad = ItpOptions {
            gpus_per_node: 0,
            ..ItpOptions::default()
        };
        let e = read("".as_bytes(), "c.csv", &bad).unwrap_err();
        assert!(e.to_string().contains("gpus_per_node"), "{e}");
    }

    #[test]
    fn options_reject_unknown_fields() {
        let o: ItpOptions = toml::from_str("gpus_per_node = 4\nqos = \"best-effort\"").unwrap();
        assert_eq!(
            (o.gpus_per_node, o.qos, o.cpu_milli_per_gpu),
            (4, Qos::BestEffort, 4000)
        );
        assert!(toml::from_str::<ItpOptions>("gpus = 4").is_err());
    }

    #[test]
    fn excerpt_is_cluster10() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces/itp/cluster10.csv");
        let read = read(
            std::fs::File::open(path).unwrap(),
            "c10",
            &ItpOptions::default(),
        )
        .unwrap();
        let t = &read.trace;
        // cluster10: 193 x 1 GPU, 51 x 2, 14 x 4, 2 x 16 (two tasks of 8).
        assert_eq!(t.len(), 260);
        assert_eq!(t.jobs().iter().filter(|j| j.tasks == 2).count(), 2);
        assert_eq!(
            t.jobs().iter().map(|j| j.gpus_total()).sum::<u64>(),
            193 + 102 + 56 + 32
        );
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
            let _ = read(bytes.as_slice(), "r.csv", &ItpOptions::default());
            let _ = read_rows(&String::from_utf8_lossy(&bytes));
        }

        #[test]
        fn random_rows_never_panic(rows in prop::collection::vec(prop::collection::vec("[-0-9a-z.]{0,5}", 4), 0..6)) {
            let text: String = rows.iter().map(|r| r.join(",") + "\n").collect();
            let _ = read_rows(&text);
        }

        #[test]
        fn any_splittable_count_makes_valid_gangs(gpus in 1u32..=4096, per_node in 1u32..=64) {
            let o = ItpOptions { gpus_per_node: per_node, ..ItpOptions::default() };
            if let Some((tasks, each)) = o.gang(gpus) {
                prop_assert_eq!(tasks * each, gpus);
                prop_assert!(each <= per_node);
            }
        }
    }
}
