//! Reader for the Alibaba GPU-disaggregated DLRM serving trace (cluster-trace-gpu-v2025,
//! NSDI'25): `disaggregated_DLRM_trace.csv` of github.com/alibaba/clusterdata,
//! `cluster-trace-gpu-v2025/`. A row is one long-running inference-service instance (a pod of
//! one of 156 applications), not a batch job; it becomes one single-task job.
//!
//! Columns used (others are ignored): `instance_sn`, `app_name`, `cpu_request` (vCPUs),
//! `gpu_request` (GPUs), `memory_request` (GiB), `rdma_request` (percent of one RDMA NIC),
//! `disk_request` (GiB), `max_instance_per_node` (-1 = no limit), `creation_time`,
//! `scheduled_time`, `deletion_time` (seconds since the trace start; empty = outside the trace;
//! written from binary floats, e.g. `475.00000000000006`, so rounded to the nearest
//! millisecond).
//!
//! Rules, every one an assumption about a trace that does not say:
//! - The trace window is 0 ..= end, end = the latest time in any of the three time columns of
//!   the file (noted as `window-end-s` in [`super::ReadReport::notes`]).
//! - submit = `creation_time`; start = `scheduled_time`; true duration = `deletion_time` -
//!   start (the time the instance held its resources; its original wait is not part of it).
//! - Alive before the window (`creation_time` empty): submit = 0; start = `scheduled_time`, or
//!   0 when that is empty too. Still alive after it (`deletion_time` empty): the end is the
//!   window end. Such instances are kept and counted as censored: their duration is a lower
//!   bound, and a pre-existing instance arrives at 0 with the others already there.
//! - `creation_time` given but `scheduled_time` empty: never placed, dropped, counted as
//!   [`NEVER_SCHEDULED`]. `deletion_time` before the start: dropped, [`NEGATIVE_DURATION`].
//! - Task: `cpu_milli` = `cpu_request` x 1000; `gpu_request` 0 is CPU-only, below 1 a share of
//!   one GPU (`gpu_milli` = request x 1000), a whole number 1..=64 that many whole GPUs (other
//!   values are an error); `mem_mib` = ceil(`memory_request` x 1024).
//! - tenant = `app_name` (instances of one application share its limits), in order of first
//!   appearance; kind inference; qos latency-sensitive; not preemptible (a serving instance has
//!   no checkpoint to resume from); priority 0; no runtime estimate; no GPU type (the trace
//!   names none).
//!
//! Left out, as the job model has no place for them yet: RDMA bandwidth (`rdma_request`, a
//! density constraint), disk (`disk_request`) and the per-application density limit
//! (`max_instance_per_node`). Kept instances carrying each are counted in
//! [`super::ReadReport::unmodelled`] as [`RDMA`], [`DISK`] and [`MAX_INSTANCE_PER_NODE`]. Also
//! ignored: the `*_limit` columns (requests are what a scheduler reserves; in this trace limits
//! equal requests except disk, whose limit is often higher) and `role` (`CN` CPU-node / `HN`
//! GPU-node instance, implied by the GPU request).

use super::table::{self, Table, Unknown};
use super::{ReadReport, Tenants, TraceFormat, TraceRead, TraceReadError};
use crate::cluster::MAX_GPUS_PER_NODE;
use crate::job::{JobKind, JobSpec, Qos, TaskRequest};
use crate::units::{GPU_MILLI, JobId, SimTime};
use std::io::Read;

/// Drop reason: created in the window but never scheduled.
pub const NEVER_SCHEDULED: &str = "never-scheduled";
/// Drop reason: `deletion_time` before the start.
pub const NEGATIVE_DURATION: &str = "negative-duration";
/// Unmodelled requirement: a share of an RDMA NIC's bandwidth.
pub const RDMA: &str = "rdma";
/// Unmodelled requirement: local disk.
pub const DISK: &str = "disk";
/// Unmodelled requirement: at most N instances of the application on one node.
pub const MAX_INSTANCE_PER_NODE: &str = "max-instance-per-node";
/// The report note holding the window end, seconds.
pub const WINDOW_END_NOTE: &str = "window-end-s";

const COLUMNS: &[&str] = &[
    "instance_sn",
    "app_name",
    "cpu_request",
    "gpu_request",
    "memory_request",
    "rdma_request",
    "disk_request",
    "max_instance_per_node",
    "creation_time",
    "scheduled_time",
    "deletion_time",
];

/// A kept instance whose end may wait for the window end.
struct Instance {
    job: JobSpec,
    start: SimTime,
    end: Option<SimTime>,
}

/// What became of one row.
enum Row {
    Kept(Instance),
    Dropped(&'static str),
}

/// Counts of kept instances with each unmodelled requirement, in [`RDMA`], [`DISK`],
/// [`MAX_INSTANCE_PER_NODE`] order.
type Unmodelled = [u64; 3];

/// Reads a DLRM instance list; `source` names it in errors and becomes the trace's name.
pub fn read(input: impl Read, source: &str) -> Result<TraceRead, TraceReadError> {
    let mut rows = Table::new(source, table::csv_reader(input), COLUMNS, Unknown::Ignore)?;
    let mut report = ReadReport::new(TraceFormat::Dlrm);
    let mut tenants = Tenants::default();
    let mut unmodelled: Unmodelled = [0; 3];
    let mut window_end = SimTime::ZERO;
    let mut instances = Vec::new();
    while let Some(row) = rows.next_row()? {
        report.rows += 1;
        let times = [
            row.opt_secs_rounded("creation_time")?,
            row.opt_secs_rounded("scheduled_time")?,
            row.opt_secs_rounded("deletion_time")?,
        ];
        window_end = times.into_iter().flatten().fold(window_end, SimTime::max);
        match parse_instance(&row, times, &mut tenants, &mut unmodelled)? {
            Row::Kept(instance) => {
                report.kept += 1;
                let censored = instance.end.is_none() || times[0].is_none();
                report.censored += u64::from(censored);
                instances.push(instance);
            }
            Row::Dropped(reason) => report.drop_row(reason, row.line, row.str("instance_sn")),
        }
    }
    for (name, count) in [RDMA, DISK, MAX_INSTANCE_PER_NODE]
        .into_iter()
        .zip(unmodelled)
    {
        if count > 0 {
            report.unmodelled.insert(name.into(), count);
        }
    }
    report
        .notes
        .insert(WINDOW_END_NOTE.into(), format!("{}", window_end.secs_f64()));
    let (jobs, durations) = instances
        .into_iter()
        .map(|i| {
            let end = i.end.unwrap_or(window_end);
            (i.job, end.saturating_sub(i.start))
        })
        .unzip();
    super::finish(source, jobs, durations, tenants.names, report)
}

fn parse_instance(
    row: &table::Row<'_>,
    [created, scheduled, deleted]: [Option<SimTime>; 3],
    tenants: &mut Tenants,
    unmodelled: &mut Unmodelled,
) -> Result<Row, TraceReadError> {
    let task = TaskRequest {
        cpu_milli: row.milli("cpu_request", "vCPUs")?,
        mem_mib: row
            .milli("memory_request", "GiB")?
            .checked_mul(1024)
            .ok_or_else(|| row.expected("memory_request", "a smaller number of GiB"))?
            .div_ceil(1000),
        ..gpu_share(row)?
    };
    let rdma = row.milli("rdma_request", "percent of one RDMA NIC")?;
    let disk = row.milli("disk_request", "GiB")?;
    let density = row.parse::<i64>("max_instance_per_node", "an integer (-1 = no limit)")?;
    let (submit, start) = match (created, scheduled) {
        (Some(_), None) => return Ok(Row::Dropped(NEVER_SCHEDULED)),
        (Some(created), Some(scheduled)) => (created, scheduled),
        (None, scheduled) => (SimTime::ZERO, scheduled.unwrap_or(SimTime::ZERO)),
    };
    if deleted.is_some_and(|end| end < start) {
        return Ok(Row::Dropped(NEGATIVE_DURATION));
    }
    for (count, carries) in unmodelled
        .iter_mut()
        .zip([rdma > 0, disk > 0, density != -1])
    {
        *count += u64::from(carries);
    }
    let job = JobSpec {
        id: JobId(0),
        name: row.str("instance_sn").to_string(),
        submit,
        tasks: 1,
        task,
        gpu_types: Vec::new(),
        tenant: tenants.id(row.str("app_name").trim()),
        priority: 0,
        qos: Qos::LatencySensitive,
        preemptible: false,
        kind: JobKind::Inference,
        estimate: None,
        workload: None,
        constraints: Default::default(),
        elastic: None,
    };
    Ok(Row::Kept(Instance {
        job,
        start,
        end: deleted,
    }))
}

/// The GPU part of the task (CPU and memory 0) from `gpu_request`, as the module docs rule.
fn gpu_share(row: &table::Row<'_>) -> Result<TaskRequest, TraceReadError> {
    const EXPECTED: &str = "0, a share below 1 (at most 3 decimals) or a whole number 1..=64";
    let milli = row
        .milli("gpu_request", "GPUs")
        .map_err(|_| row.expected("gpu_request", EXPECTED))?;
    let gpu_milli = u64::from(GPU_MILLI);
    let (gpus, share) = match milli {
        0 => (0, 0),
        m if m < gpu_milli => (1, m),
        m if m.is_multiple_of(gpu_milli) && m / gpu_milli <= u64::from(MAX_GPUS_PER_NODE) => {
            (m / gpu_milli, gpu_milli)
        }
        _ => return Err(row.expected("gpu_request", EXPECTED)),
    };
    Ok(TaskRequest {
        gpus: u32::try_from(gpus).expect("at most 64 GPUs"),
        gpu_milli: u32::try_from(share).expect("at most 1000 milli-GPU"),
        cpu_milli: 0,
        mem_mib: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HEADER: &str = "instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,\
                          rdma_request,rdma_limit,memory_request,memory_limit,disk_request,\
                          disk_limit,max_instance_per_node,creation_time,scheduled_time,\
                          deletion_time";

    fn read_rows(rows: &str) -> Result<TraceRead, TraceReadError> {
        read(format!("{HEADER}\n{rows}").as_bytes(), "dlrm.csv")
    }

    #[test]
    fn instances_become_jobs_by_the_documented_rules() {
        let read = read_rows(
            "i0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,\n\
             i1,CN,app_1,8,8,0,0,1,1,40.5,40.5,0,0,-1,100.0,150.0,900.0\n\
             i2,CN,app_1,8,8,0,0,0,0,40.0,40.0,85.0,85.0,-1,200.0,210.0,\n\
             i3,HN,app_0,12,12,0.25,0.25,25,25,120.0,120.0,640.0,800.0,8,,300.0,5000.5\n\
             i4,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,400.0,,\n\
             i5,HN,app_2,12,12,2,2,25,25,120.0,120.0,640.0,800.0,2,500.0,600.0,550.0\n",
        )
        .unwrap();
        let (t, r) = (&read.trace, &read.report);
        assert_eq!((r.rows, r.kept, r.censored), (6, 4, 3));
        assert_eq!(r.dropped.get(NEVER_SCHEDULED), Some(&1));
        assert_eq!(r.dropped.get(NEGATIVE_DURATION), Some(&1));
        // The latest time in the file, dropped rows included.
        assert_eq!(r.notes[WINDOW_END_NOTE], "5000.5");
        // Kept: i0, i1, i2, i3; rdma > 0 on i0, i1, i3; disk > 0 on i0, i2, i3; density on i0, i3.
        assert_eq!(r.unmodelled[RDMA], 3);
        assert_eq!(r.unmodelled[DISK], 3);
        assert_eq!(r.unmodelled[MAX_INSTANCE_PER_NODE], 2);
        let by_name = |n: &str| t.jobs().iter().find(|j| j.name == n).unwrap();
        let i0 = by_name("i0");
        // alive all window: submit 0, duration = window end 5000.5 s
        assert_eq!(i0.submit, SimTime::ZERO);
        assert_eq!(t.true_duration(i0.id), SimTime(5_000_500));
        assert_eq!(i0.task, TaskRequest::whole(1, 12_000, 122_880));
        assert_eq!(
            (i0.kind, i0.qos, i0.preemptible),
            (JobKind::Inference, Qos::LatencySensitive, false)
        );
        let i1 = by_name("i1");
        // 900 - 150 s; 40.5 GiB = 41472 MiB; CPU-only.
        assert_eq!(t.true_duration(i1.id), SimTime::from_secs(750));
        assert_eq!(i1.task, TaskRequest::whole(0, 8_000, 41_472));
        let i2 = by_name("i2");
        // still alive: window end 5000.5 - 210
        assert_eq!(t.true_duration(i2.id), SimTime(4_790_500));
        let i3 = by_name("i3");
        // created before the window, scheduled at 300: submit 0, duration 5000.5 - 300.
        assert_eq!(
            (i3.submit, i3.task.gpus, i3.task.gpu_milli),
            (SimTime::ZERO, 1, 250)
        );
        assert_eq!(t.true_duration(i3.id), SimTime(4_700_500));
        assert_eq!(t.tenants(), ["app_0", "app_1"]);
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let row =
            |gpu: &str| format!("i0,HN,app_0,12,12,{gpu},1,25,25,120.0,120.0,640.0,800.0,8,,,\n");
        let e = read_rows(&row("1.5")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "dlrm.csv line 2, field gpu_request: expected 0, a share below 1 (at most 3 \
             decimals) or a whole number 1..=64, got \"1.5\""
        );
        assert!(read_rows(&row("65")).is_err());
        assert_eq!(read_rows(&row("64")).unwrap().trace.jobs()[0].task.gpus, 64);
        let e = read_rows(&format!(
            "{}i1,CN,a,x,8,0,0,1,1,40,40,0,0,-1,1,2,3\n",
            row("1")
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("dlrm.csv line 3, field cpu_request: expected a number >= 0"),
            "{e}"
        );
        let e = read_rows("i1,CN,a,8,8,0,0,1,1,40,40,0,0,-1,-5,2,3\n").unwrap_err();
        assert!(e.to_string().contains("line 2, field creation_time"), "{e}");
        let e = read_rows("i1,CN,a,8,8,0,0,1,1,40,40,0,0,none,1,2,3\n").unwrap_err();
        assert!(e.to_string().contains("field max_instance_per_node"), "{e}");
        let e = read("instance_sn,app_name\n".as_bytes(), "dlrm.csv").unwrap_err();
        assert!(e.to_string().contains("missing column cpu_request"), "{e}");
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
            let _ = read(bytes.as_slice(), "r.csv");
            let mut input = format!("{HEADER}\n").into_bytes();
            input.extend_from_slice(&bytes);
            let _ = read(input.as_slice(), "r.csv");
        }

        #[test]
        fn random_rows_never_panic(rows in prop::collection::vec(prop::collection::vec("[-0-9a-z.]{0,21}", 17), 0..6)) {
            let text: String = rows.iter().map(|r| r.join(",") + "\n").collect();
            let _ = read_rows(&text);
        }
    }
}
