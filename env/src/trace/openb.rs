//! Reader for the Alibaba GPU cluster trace 2023 ("openb", FGD, USENIX ATC'23) pod lists,
//! e.g. `openb_pod_list_default.csv` of github.com/alibaba/clusterdata,
//! `cluster-trace-gpu-v2023/csv/`. One pod becomes one single-task job.
//!
//! Columns used (others are ignored): `name`, `cpu_milli`, `memory_mib`, `num_gpu`,
//! `gpu_milli`, `gpu_spec`, `qos`, `pod_phase`, `creation_time`, `deletion_time`,
//! `scheduled_time` (times in seconds from an anonymised origin).
//!
//! Rules, every one an assumption about a trace that does not say:
//! - submit = `creation_time`; true duration = `deletion_time - scheduled_time` (the time the
//!   pod held its resources; its wait in the original cluster is not part of it).
//! - A pod with an empty `scheduled_time` never ran: dropped, counted as `never-scheduled`.
//!   A pod whose `deletion_time` is before its `scheduled_time` is dropped, counted as
//!   `negative-duration`.
//! - A pod in phase `Running` whose `deletion_time` is the collection end (the latest
//!   `deletion_time` of the file) was still running when the trace was collected: kept,
//!   counted as censored (its duration is a lower bound). Most `Running` pods carry an earlier
//!   `deletion_time` (5193 Running, 34 at the end, in the full file): their lifetime is taken
//!   as observed, like that of `Failed` and `Succeeded` pods.
//! - Task: `gpus` = `num_gpu` (0..=64), `gpu_milli` = the column (1..=1000; below 1000 only
//!   with one GPU), or 0 when `num_gpu` is 0 whatever the column says (a CPU-only pod);
//!   `cpu_milli` and `mem_mib` (= `memory_mib`) as given.
//! - `gpu_types` = `gpu_spec` split on `|` (empty = any GPU model).
//! - `qos`: `LS` -> latency-sensitive, `BE` -> best-effort, `Burstable`, `Guaranteed`.
//!   preemptible = (qos is best-effort). kind = inference for `LS` pods, training otherwise.
//! - priority 0, no runtime estimate, one tenant named `default` (the trace has no users).
//!
//! Static pod lists ([`read_static`]): the FGD paper's variants `openb_pod_list_multigpu20.csv`
//! .. `multigpu50.csv` (and others of the FGD experiment) keep only `name`, `cpu_milli`,
//! `memory_mib`, `num_gpu`, `gpu_milli`: pods that arrive once and never leave, with no times,
//! no GPU model constraint and no QoS class. Tasks follow the rules above; every pod is
//! submitted at 0 with duration 0, placeholders that [`TraceFormat::has_times`] flags (such a
//! trace is placed, as `lachesis bench fgd` does, never replayed); qos latency-sensitive, not
//! preemptible, kind inference (as an `LS` pod), one tenant `default`. No row is dropped.

use super::table::{self, Table, Unknown};
use super::{ReadReport, TraceFormat, TraceRead, TraceReadError};
use crate::cluster::MAX_GPUS_PER_NODE;
use crate::job::{JobKind, JobSpec, Qos, TaskRequest};
use crate::units::{GPU_MILLI, JobId, SimTime, TenantId};
use std::io::Read;

/// Drop reason: the pod has no `scheduled_time`.
pub const NEVER_SCHEDULED: &str = "never-scheduled";
/// Drop reason: the pod's `deletion_time` is before its `scheduled_time`.
pub const NEGATIVE_DURATION: &str = "negative-duration";
/// The one tenant of an openb trace.
pub const TENANT: &str = "default";

/// Columns of a static pod list.
const STATIC_COLUMNS: &[&str] = &["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"];

const COLUMNS: &[&str] = &[
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
];

/// What became of one pod row.
enum Pod {
    Kept {
        job: JobSpec,
        duration: SimTime,
        running: bool,
        deleted: SimTime,
    },
    Dropped(&'static str),
}

/// Reads an openb pod list; `source` names it in errors and becomes the trace's name.
pub fn read(input: impl Read, source: &str) -> Result<TraceRead, TraceReadError> {
    let mut rows = Table::new(source, table::csv_reader(input), COLUMNS, Unknown::Ignore)?;
    let mut report = ReadReport::new(TraceFormat::Openb);
    let mut collection_end = SimTime::ZERO;
    let (mut jobs, mut durations, mut running_until) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(row) = rows.next_row()? {
        report.rows += 1;
        match parse_pod(&row)? {
            Pod::Kept {
                job,
                duration,
                running,
                deleted,
            } => {
                jobs.push(job);
                durations.push(duration);
                report.kept += 1;
                if running {
                    running_until.push(deleted);
                }
                collection_end = collection_end.max(deleted);
            }
            Pod::Dropped(reason) => report.drop_row(reason, row.line, row.str("name")),
        }
    }
    report.censored = running_until
        .iter()
        .filter(|d| **d == collection_end)
        .count() as u64;
    super::finish(source, jobs, durations, vec![TENANT.into()], report)
}

/// Reads a static pod list (name and resources only); `source` names it in errors and
/// becomes the trace's name.
pub fn read_static(input: impl Read, source: &str) -> Result<TraceRead, TraceReadError> {
    let mut rows = Table::new(
        source,
        table::csv_reader(input),
        STATIC_COLUMNS,
        Unknown::Ignore,
    )?;
    let mut report = ReadReport::new(TraceFormat::OpenbStatic);
    let mut jobs = Vec::new();
    while let Some(row) = rows.next_row()? {
        report.rows += 1;
        let task = parse_task(&row)?;
        jobs.push(pod_job(
            &row,
            SimTime::ZERO,
            task,
            Vec::new(),
            Qos::LatencySensitive,
        ));
        report.kept += 1;
    }
    let durations = vec![SimTime::ZERO; jobs.len()];
    super::finish(source, jobs, durations, vec![TENANT.into()], report)
}

/// The pod's task: `num_gpu`, `gpu_milli`, `cpu_milli`, `memory_mib` by the module's rules.
fn parse_task(row: &table::Row<'_>) -> Result<TaskRequest, TraceReadError> {
    let gpus = row.int_in("num_gpu", 0..=MAX_GPUS_PER_NODE)?;
    let task = TaskRequest {
        gpus,
        gpu_milli: match gpus {
            0 => 0,
            _ => row.int_in("gpu_milli", 1..=GPU_MILLI)?,
        },
        cpu_milli: row.parse("cpu_milli", "a non-negative integer (milli-cores)")?,
        mem_mib: row.parse("memory_mib", "a non-negative integer (MiB)")?,
    };
    task.validate()
        .map_err(|problem| row.error("gpu_milli", problem))?;
    Ok(task)
}

/// A pod's single-task job: preemptible when best-effort, inference when latency-sensitive.
fn pod_job(
    row: &table::Row<'_>,
    submit: SimTime,
    task: TaskRequest,
    gpu_types: Vec<String>,
    qos: Qos,
) -> JobSpec {
    JobSpec {
        id: JobId(0),
        name: row.str("name").to_string(),
        submit,
        tasks: 1,
        task,
        gpu_types,
        tenant: TenantId(0),
        priority: 0,
        qos,
        preemptible: qos == Qos::BestEffort,
        kind: match qos {
            Qos::LatencySensitive => JobKind::Inference,
            _ => JobKind::Training,
        },
        estimate: None,
        workload: None,
        constraints: Default::default(),
        elastic: None,
    }
}

fn parse_pod(row: &table::Row<'_>) -> Result<Pod, TraceReadError> {
    let task = parse_task(row)?;
    let qos = match row.str("qos").trim() {
        "LS" => Qos::LatencySensitive,
        "BE" => Qos::BestEffort,
        "Burstable" => Qos::Burstable,
        "Guaranteed" => Qos::Guaranteed,
        _ => return Err(row.expected("qos", "LS, BE, Burstable or Guaranteed")),
    };
    let running = match row.str("pod_phase").trim() {
        "Running" => true,
        "Failed" | "Pending" | "Succeeded" => false,
        _ => {
            return Err(row.expected("pod_phase", "Running, Failed, Pending or Succeeded"));
        }
    };
    let submit = row.secs("creation_time")?;
    let deleted = row.secs("deletion_time")?;
    let Some(scheduled) = row.opt_secs("scheduled_time")? else {
        return Ok(Pod::Dropped(NEVER_SCHEDULED));
    };
    if deleted < scheduled {
        return Ok(Pod::Dropped(NEGATIVE_DURATION));
    }
    Ok(Pod::Kept {
        job: pod_job(row, submit, task, row.names("gpu_spec")?, qos),
        duration: deleted.saturating_sub(scheduled),
        running,
        deleted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HEADER: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,\
                          creation_time,deletion_time,scheduled_time";

    fn read_rows(rows: &str) -> Result<TraceRead, TraceReadError> {
        read(format!("{HEADER}\n{rows}").as_bytes(), "pods.csv")
    }

    #[test]
    fn pods_become_jobs_by_the_documented_rules() {
        let read = read_rows(
            "p0,12000,16384,1,460,,LS,Running,100,900,150\n\
             p1,6000,12288,8,1000,V100M16|V100M32,BE,Failed,200,260,210\n\
             p2,4000,8192,0,0,,Burstable,Succeeded,300,400,300\n\
             p3,4000,8192,1,1000,,BE,Pending,310,400,\n\
             p4,4000,8192,1,1000,,Guaranteed,Failed,320,300,330\n",
        )
        .unwrap();
        let (t, r) = (&read.trace, &read.report);
        assert_eq!((r.rows, r.kept, r.censored), (5, 3, 1));
        assert_eq!(r.dropped.get(NEVER_SCHEDULED), Some(&1));
        assert_eq!(r.dropped.get(NEGATIVE_DURATION), Some(&1));
        assert_eq!(r.first_dropped[0].line, 5);
        assert_eq!(r.first_dropped[0].job, "p3");
        let p0 = &t.jobs()[0];
        // duration = deletion 900 - scheduled 150 = 750 s
        assert_eq!(t.true_duration(p0.id), SimTime::from_secs(750));
        assert!(p0.task.is_fractional() && !p0.preemptible);
        assert_eq!(p0.kind, JobKind::Inference);
        let p1 = &t.jobs()[1];
        assert_eq!(p1.gpu_types, ["V100M16", "V100M32"]);
        assert!(p1.preemptible && p1.kind == JobKind::Training && p1.gpus_total() == 8);
        let p2 = &t.jobs()[2];
        assert_eq!(
            (p2.task.gpus, p2.task.gpu_milli, p2.qos),
            (0, 0, Qos::Burstable)
        );
        assert_eq!(t.tenants(), ["default"]);
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = read_rows("p0,1,1,abc,1000,,LS,Running,0,1,0\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "pods.csv line 2, field num_gpu: expected an integer 0..=64, got \"abc\""
        );
        let e = read_rows("p0,1,1,1,1000,,LS,Running,0,1,0\np1,1,1,1,1000,,XX,Running,0,1,0\n");
        assert!(
            e.unwrap_err()
                .to_string()
                .starts_with("pods.csv line 3, field qos:")
        );
        let e = read_rows("p0,1,1,2,500,,LS,Running,0,1,0\n").unwrap_err();
        assert!(e.to_string().contains("line 2, field gpu_milli"), "{e}");
        let e = read_rows("p0,1,1,1,1000,,LS,Done,0,1,0\n").unwrap_err();
        assert!(e.to_string().contains("field pod_phase"), "{e}");
        let e = read_rows("p0,1,1,1,1000,,LS,Running,-3,1,0\n").unwrap_err();
        assert!(e.to_string().contains("field creation_time"), "{e}");
        let e = read("name,qos\n".as_bytes(), "pods.csv").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("pods.csv line 1: missing column cpu_milli"),
            "{e}"
        );
    }

    #[test]
    fn excerpt_reads_with_expected_counts() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../traces/openb/openb_pod_excerpt.csv");
        let file = std::fs::File::open(path).unwrap();
        let read = read(file, "excerpt").unwrap();
        let r = &read.report;
        // 400 pods: 19 Pending (dropped), 321 Running, 49 Failed, 11 Succeeded. Of the Running
        // pods, 2 end at the excerpt's latest deletion time: censored.
        assert_eq!((r.rows, r.kept, r.censored), (400, 381, 2));
        assert_eq!(r.dropped.get(NEVER_SCHEDULED), Some(&19));
        assert_eq!(
            r.first_dropped.len(),
            crate::trace::DROPPED_EXAMPLES_PER_REASON
        );
        assert_eq!(r.first_dropped[0].job, "openb-pod-4411");
        let multi = read.trace.jobs().iter().filter(|j| j.task.gpus > 1).count();
        assert_eq!(multi, 6);
    }

    const STATIC_FIXTURE: &str = "openb-static-format.csv";

    #[test]
    fn static_list_is_pods_without_times() {
        let text = crate::trace::fixture_text(STATIC_FIXTURE);
        let read = read_static(text.as_bytes(), "static").unwrap();
        let (t, r) = (&read.trace, &read.report);
        assert_eq!(
            (r.format, r.rows, r.kept, r.dropped_total()),
            (TraceFormat::OpenbStatic, 20, 20, 0)
        );
        assert!(!r.format.has_times());
        // File order kept (every submit is the placeholder 0), durations 0.
        assert_eq!(t.jobs()[0].name, "openb-pod-0000");
        assert_eq!(t.jobs()[19].name, "openb-pod-0019");
        assert!(t.jobs().iter().all(|j| j.submit == SimTime::ZERO));
        assert!(t.true_durations().iter().all(|d| *d == SimTime::ZERO));
        // Pod 0009: 8 cores, 64 GiB, a quarter of one GPU; pod 0011 CPU-only.
        let p9 = &t.jobs()[9];
        assert_eq!(
            p9.task,
            TaskRequest {
                gpus: 1,
                gpu_milli: 250,
                cpu_milli: 8000,
                mem_mib: 65_536
            }
        );
        assert_eq!(
            (p9.qos, p9.preemptible, p9.kind),
            (Qos::LatencySensitive, false, JobKind::Inference)
        );
        assert_eq!(t.jobs()[11].task, TaskRequest::whole(0, 8000, 16_384));
        // GPUs: 2+4+1+1+4+2+4+1+1+1+1+0+1+8+1+1+1+8+1+2 = 45, four of them fractional.
        assert_eq!(t.jobs().iter().map(|j| j.gpus_total()).sum::<u64>(), 45);
        assert_eq!(
            t.jobs().iter().filter(|j| j.task.is_fractional()).count(),
            4
        );
        assert_eq!(t.tenants(), ["default"]);
    }

    #[test]
    fn static_errors_name_file_line_and_field() {
        let read_static_rows = |rows: &str| {
            read_static(
                format!("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n{rows}").as_bytes(),
                "s.csv",
            )
        };
        let e = read_static_rows("p0,1,1,2,500\n").unwrap_err();
        assert!(
            e.to_string().starts_with("s.csv line 2, field gpu_milli"),
            "{e}"
        );
        let e = read_static_rows("p0,1,1,1,1000\np1,1,x,1,1000\n").unwrap_err();
        assert!(
            e.to_string().starts_with("s.csv line 3, field memory_mib"),
            "{e}"
        );
        let e = read_static("name,cpu_milli\n".as_bytes(), "s.csv").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("s.csv line 1: missing column memory_mib"),
            "{e}"
        );
    }

    proptest! {
        #[test]
        fn random_static_rows_never_panic(rows in prop::collection::vec(prop::collection::vec("[-0-9A-Za-z.|]{0,5}", 5), 0..6)) {
            let text: String = rows.iter().map(|r| r.join(",") + "\n").collect();
            let _ = read_static(format!("{}\n{text}", STATIC_COLUMNS.join(",")).as_bytes(), "r.csv");
        }

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
            let _ = read(bytes.as_slice(), "r.csv");
            let _ = read_static(bytes.as_slice(), "r.csv");
            let mut input = format!("{HEADER}\n").into_bytes();
            input.extend_from_slice(&bytes);
            let _ = read(input.as_slice(), "r.csv");
        }

        #[test]
        fn random_rows_never_panic(rows in prop::collection::vec(prop::collection::vec("[-0-9A-Za-z.|]{0,5}", 11), 0..6)) {
            let text: String = rows.iter().map(|r| r.join(",") + "\n").collect();
            let _ = read_rows(&text);
        }
    }
}
