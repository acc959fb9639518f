//! Reader for job logs shaped like the SenseTime Helios release (`cluster_log.csv` of
//! github.com/S-Lab-System-Group/HeliosData, SC'21), and for the Microsoft Philly job log
//! (github.com/msr-fiddle/philly-traces) flattened to the same columns, as HeliosArtifact's
//! `philly_trace.csv` is. One row becomes one job.
//!
//! Columns used (others, e.g. `jobname`, `node_num`, `duration`, `queue`, are ignored):
//! `job_id`, `user`, `vc` (virtual cluster), `gpu_num`, `cpu_num` (absent in Philly files),
//! `state`, `submit_time`, `start_time`, `end_time`. Times are wall-clock
//! `YYYY-MM-DD HH:MM:SS` (a `T` between date and time is read too), without a time zone; an
//! empty start or end, or `None`, `NaN`, `NaT`, means there is none.
//!
//! Rules, every one an assumption about a trace that does not say ([`HeliosOptions`] overrides
//! the numbers):
//! - Times: each timestamp is read as seconds since 1970-01-01 00:00:00 of the same (unknown)
//!   zone; time 0 of the trace is the earliest `submit_time` in the file, dropped rows
//!   included, noted as `origin` in [`super::ReadReport::notes`]. submit = `submit_time` -
//!   origin. A missing or malformed `submit_time` is an error.
//! - true duration = `end_time` - `start_time` (the `duration` column is that difference).
//! - Rows dropped, checked in this order and counted by reason: no `start_time` and a
//!   cancelled state (`CANCELLED`, `CANCELLED by ...`, Philly `Killed`):
//!   [`CANCELLED_BEFORE_START`]; no `start_time` otherwise: [`NEVER_STARTED`]; no `end_time`:
//!   [`NO_END_TIME`]; `end_time` before `start_time`: [`NEGATIVE_DURATION`]; a GPU count that
//!   does not split evenly over nodes (below): [`UNEVEN_GANG`]. Jobs that started are kept
//!   whatever their state (`COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`, `NODE_FAIL`,
//!   `OUT_OF_MEMORY`, `PREEMPTED`, `SUSPENDED`, `RUNNING`, `PENDING`; Philly `Pass`, `Failed`,
//!   `Killed`; case-insensitive) with the time they ran. Another state is an error.
//! - Tasks: `gpu_num` 0 is a CPU-only job of one task; up to `gpus_per_node` (8) GPUs is one
//!   task; more is a gang of ceil(gpu_num / gpus_per_node) tasks of gpu_num / tasks GPUs each
//!   (`node_num` is not used).
//! - CPU per task: ceil(`cpu_num` x 1000 / tasks) milli-cores; without a `cpu_num` column,
//!   `cpu_milli_per_gpu` (4000) per GPU of the task. Memory per task: `mem_mib_per_gpu`
//!   (16384) per GPU of the task (the traces have none; a CPU-only job asks for none).
//! - Tenant: `vc` (the default) or `user`, as the file names them, in order of first
//!   appearance; an empty name is an error.
//! - kind training for GPU jobs, batch for CPU-only ones; priority 0, no runtime estimate, no
//!   GPU type; qos latency-sensitive and preemptible for every job, as for ITP: the traces
//!   have no classes, and their schedulers may preempt.

use super::table::{self, Table, Unknown};
use super::{ReadReport, Tenants, TraceFormat, TraceRead, TraceReadError};
use super::{WallClockJob, WallClockJobs, WallClockRow as Row};
use crate::job::{JobKind, JobSpec, MAX_TASKS, Qos, TaskRequest};
use crate::units::{JobId, SimTime};
use csv::StringRecord;
use serde::{Deserialize, Serialize};
use std::io::Read;

/// Drop reason: cancelled before it started.
pub const CANCELLED_BEFORE_START: &str = "cancelled-before-start";
/// Drop reason: no start time, and not cancelled.
pub const NEVER_STARTED: &str = "never-started";
/// Drop reason: started, but no end time.
pub const NO_END_TIME: &str = "no-end-time";
/// Drop reason: `end_time` before `start_time`.
pub const NEGATIVE_DURATION: &str = "negative-duration";
/// Drop reason: the GPU count does not split evenly over ceil(gpu_num / gpus_per_node) nodes.
pub const UNEVEN_GANG: &str = "uneven-gang";
/// The report note holding the wall-clock time of time 0.
pub const ORIGIN_NOTE: &str = "origin";

/// Columns of a Helios file.
const HELIOS_COLUMNS: &[&str] = &[
    "job_id",
    "user",
    "vc",
    "gpu_num",
    "cpu_num",
    "state",
    "submit_time",
    "start_time",
    "end_time",
];
/// Columns of a flattened Philly file: Helios' without `cpu_num`.
const PHILLY_COLUMNS: &[&str] = &[
    "job_id",
    "user",
    "vc",
    "gpu_num",
    "state",
    "submit_time",
    "start_time",
    "end_time",
];

/// States of a job that was cancelled (before or after it started).
const CANCELLED_STATES: &[&str] = &["CANCELLED", "Killed"];
/// The other states a job may end in.
const OTHER_STATES: &[&str] = &[
    "COMPLETED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "SUSPENDED",
    "RUNNING",
    "PENDING",
    "Pass",
];

/// Which column names a job's tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HeliosTenant {
    /// The virtual cluster (`vc`).
    #[default]
    Vc,
    /// The user (`user`).
    User,
}

impl HeliosTenant {
    fn column(self) -> &'static str {
        match self {
            HeliosTenant::Vc => "vc",
            HeliosTenant::User => "user",
        }
    }
}

/// What the Helios reader assumes for what the trace lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeliosOptions {
    /// Which column names the tenant: `vc` or `user`.
    pub tenant: HeliosTenant,
    /// GPUs of one node: larger jobs become gangs of tasks of at most this many GPUs (1..=64).
    pub gpus_per_node: u32,
    /// CPU a task asks for per GPU it holds, milli-cores, when the file has no `cpu_num`.
    pub cpu_milli_per_gpu: u64,
    /// Memory a task asks for per GPU it holds, MiB.
    pub mem_mib_per_gpu: u64,
    /// QoS class given to every job.
    pub qos: Qos,
    /// Whether every job may be preempted.
    pub preemptible: bool,
}

impl Default for HeliosOptions {
    fn default() -> Self {
        HeliosOptions {
            tenant: HeliosTenant::Vc,
            gpus_per_node: 8,
            cpu_milli_per_gpu: 4000,
            mem_mib_per_gpu: 16384,
            qos: Qos::LatencySensitive,
            preemptible: true,
        }
    }
}

impl HeliosOptions {
    /// Checks `gpus_per_node` is 1..=64 and that a full node's CPU and memory fit in a `u64`.
    pub fn validate(&self) -> Result<(), String> {
        super::check_per_gpu(
            self.gpus_per_node,
            self.cpu_milli_per_gpu,
            self.mem_mib_per_gpu,
        )?;
        Ok(())
    }
}

/// Seconds since 1970-01-01 00:00:00 of a `YYYY-MM-DD HH:MM:SS` (or `YYYY-MM-DDTHH:MM:SS`)
/// wall-clock time, taken as is (no time zone, no leap seconds); `None` if malformed or not a
/// real date.
pub fn parse_wall_clock(text: &str) -> Option<i64> {
    let b = text.trim().as_bytes();
    let shape = b.len() == 19
        && b[4] == b'-'
        && b[7] == b'-'
        && (b[10] == b' ' || b[10] == b'T')
        && b[13] == b':'
        && b[16] == b':';
    if !shape {
        return None;
    }
    let number = |from: usize, to: usize| {
        b[from..to].iter().try_fold(0i64, |acc, c| {
            c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
        })
    };
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    let (hour, minute, second) = (number(11, 13)?, number(14, 16)?, number(17, 19)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if day < 1 || day > month_days || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// Days from 1970-01-01 to the proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Reads a Helios or flattened Philly job log; `source` names it in errors and becomes the
/// trace's name.
pub fn read(
    input: impl Read,
    source: &str,
    options: &HeliosOptions,
) -> Result<TraceRead, TraceReadError> {
    options
        .validate()
        .map_err(TraceReadError::options(source))?;
    let mut reader = table::csv_reader(input);
    let mut header = StringRecord::new();
    if !table::next_record(source, &mut reader, &mut header)? {
        return Err(table::missing_header(source, &reader, HELIOS_COLUMNS));
    }
    let has_cpu = header.iter().any(|h| h.trim() == "cpu_num");
    let columns = if has_cpu {
        HELIOS_COLUMNS
    } else {
        PHILLY_COLUMNS
    };
    let mut rows = Table::with_header(source, reader, header, columns, Unknown::Ignore)?;
    let mut report = ReadReport::new(TraceFormat::Helios);
    let mut tenants = Tenants::default();
    let mut jobs = WallClockJobs::default();
    while let Some(row) = rows.next_row()? {
        report.rows += 1;
        let submit_s = wall_clock(&row, "submit_time")?
            .ok_or_else(|| row.expected("submit_time", "a time YYYY-MM-DD HH:MM:SS"))?;
        jobs.see(submit_s, row.str("submit_time"));
        let parsed = parse_job(&row, submit_s, has_cpu, options, &mut tenants)?;
        jobs.add(&mut report, parsed, row.line, row.str("job_id"));
    }
    jobs.finish(source, tenants.names, report)
}

/// A time column: `None` when empty or `None`/`NaN`/`NaT`; an error when malformed.
fn wall_clock(row: &table::Row<'_>, column: &'static str) -> Result<Option<i64>, TraceReadError> {
    let text = row.str(column).trim();
    if text.is_empty()
        || ["None", "NaN", "NaT"]
            .iter()
            .any(|n| n.eq_ignore_ascii_case(text))
    {
        return Ok(None);
    }
    parse_wall_clock(text)
        .map(Some)
        .ok_or_else(|| row.expected(column, "a time YYYY-MM-DD HH:MM:SS"))
}

/// Whether the job's `state` says it was cancelled; an error for an unknown state.
fn cancelled(row: &table::Row<'_>) -> Result<bool, TraceReadError> {
    let state = row.str("state").trim();
    let is = |s: &&str| s.eq_ignore_ascii_case(state);
    let cancelled_by = state
        .get(..10)
        .is_some_and(|head| head.eq_ignore_ascii_case("CANCELLED "));
    if CANCELLED_STATES.iter().any(is) || cancelled_by {
        Ok(true)
    } else if OTHER_STATES.iter().any(is) {
        Ok(false)
    } else {
        let known = [CANCELLED_STATES, OTHER_STATES].concat().join(", ");
        Err(row.expected("state", &format!("one of {known}")))
    }
}

fn parse_job(
    row: &table::Row<'_>,
    submit_s: i64,
    has_cpu: bool,
    options: &HeliosOptions,
    tenants: &mut Tenants,
) -> Result<Row, TraceReadError> {
    let max_gpus = MAX_TASKS.saturating_mul(options.gpus_per_node);
    let gpu_num = row.int_in("gpu_num", 0..=max_gpus)?;
    let cpu_num: Option<u64> = if has_cpu {
        Some(row.parse("cpu_num", "a non-negative integer (CPUs)")?)
    } else {
        None
    };
    let cancelled = cancelled(row)?;
    let start = wall_clock(row, "start_time")?;
    let end = wall_clock(row, "end_time")?;
    let tenant_column = options.tenant.column();
    let tenant = row.str(tenant_column).trim();
    if tenant.is_empty() {
        return Err(row.expected(tenant_column, "a name"));
    }
    let Some(start) = start else {
        return Ok(Row::Dropped(if cancelled {
            CANCELLED_BEFORE_START
        } else {
            NEVER_STARTED
        }));
    };
    let Some(end) = end else {
        return Ok(Row::Dropped(NO_END_TIME));
    };
    if end < start {
        return Ok(Row::Dropped(NEGATIVE_DURATION));
    }
    let (tasks, gpus) = match gpu_num {
        0 => (1, 0),
        n => match super::split_gang(n, options.gpus_per_node) {
            Some(gang) => gang,
            None => return Ok(Row::Dropped(UNEVEN_GANG)),
        },
    };
    let cpu_milli = match cpu_num {
        Some(cpus) => cpus
            .checked_mul(1000)
            .ok_or_else(|| row.expected("cpu_num", "a smaller number of CPUs"))?
            .div_ceil(u64::from(tasks)),
        None => options.cpu_milli_per_gpu * u64::from(gpus),
    };
    let job = JobSpec {
        id: JobId(0),
        name: row.str("job_id").to_string(),
        submit: SimTime::ZERO,
        tasks,
        task: TaskRequest::whole(gpus, cpu_milli, options.mem_mib_per_gpu * u64::from(gpus)),
        gpu_types: Vec::new(),
        tenant: tenants.id(tenant),
        priority: 0,
        qos: options.qos,
        preemptible: options.preemptible,
        kind: if gpus == 0 {
            JobKind::Batch
        } else {
            JobKind::Training
        },
        estimate: None,
        workload: None,
        constraints: Default::default(),
        elastic: None,
    };
    Ok(Row::Kept(WallClockJob {
        job,
        submit_s,
        duration: SimTime::from_secs((end - start).unsigned_abs()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HEADER: &str = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,\
                          start_time,end_time,duration,queue";

    fn read_rows(rows: &str) -> Result<TraceRead, TraceReadError> {
        let text = format!("{HEADER}\n{rows}");
        read(text.as_bytes(), "helios.csv", &HeliosOptions::default())
    }

    #[test]
    fn wall_clock_times_are_unix_seconds() {
        assert_eq!(parse_wall_clock("1970-01-01 00:00:00"), Some(0));
        // 2020-06-09: 18,422 days after 1970-01-01; 18:41:01 = 67,261 s.
        assert_eq!(
            parse_wall_clock("2020-06-09 18:41:01"),
            Some(18_422 * 86_400 + 67_261)
        );
        assert_eq!(
            parse_wall_clock("2020-02-29T00:00:00"),
            Some(18_321 * 86_400)
        );
        assert_eq!(parse_wall_clock("1969-12-31 23:59:59"), Some(-1));
        for bad in [
            "2019-02-29 00:00:00",
            "2020-13-01 00:00:00",
            "2020-01-01 24:00:00",
            "2020-01-01 00:00",
            "2020-01-01 00:00:00.5",
            "2020/01/01 00:00:00",
            "+020-01-01 00:00:00",
        ] {
            assert_eq!(parse_wall_clock(bad), None, "{bad}");
        }
    }

    #[test]
    fn jobs_follow_the_documented_rules() {
        let read = read_rows(
            "1,uA,vc1,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-10 04:55:09,36848,0\n\
             2,uB,vc2,16,32,2,FAILED,2020-06-09 18:41:27,2020-06-09 18:42:27,2020-06-09 18:45:36,189,60\n\
             3,uA,vc1,1,1,1,CANCELLED,2020-06-09 18:40:00,,,0,0\n\
             4,uA,vc1,1,1,1,FAILED,2020-06-09 18:43:00,,,0,0\n\
             5,uA,vc1,1,1,1,RUNNING,2020-06-09 18:44:00,2020-06-09 18:44:00,,0,0\n\
             6,uA,vc1,1,1,1,COMPLETED,2020-06-09 18:45:00,2020-06-09 18:46:00,2020-06-09 18:45:00,0,0\n\
             7,uA,vc1,12,8,2,COMPLETED,2020-06-09 18:46:00,2020-06-09 18:46:00,2020-06-09 18:47:00,60,0\n\
             8,uA,vc1,9,8,2,COMPLETED,2020-06-09 18:46:00,2020-06-09 18:46:00,2020-06-09 18:47:00,60,0\n\
             9,uC,vc3,0,4,1,CANCELLED,2020-06-09 18:47:00,2020-06-09 18:47:00,2020-06-09 18:48:00,60,0\n",
        )
        .unwrap();
        let (t, r) = (&read.trace, &read.report);
        assert_eq!((r.rows, r.kept, r.censored), (9, 4, 0));
        for reason in [
            CANCELLED_BEFORE_START,
            NEVER_STARTED,
            NO_END_TIME,
            NEGATIVE_DURATION,
            UNEVEN_GANG,
        ] {
            assert_eq!(r.dropped.get(reason), Some(&1), "{reason}");
        }
        // Origin: job 3's submit, the earliest, though it is dropped.
        assert_eq!(r.notes[ORIGIN_NOTE], "2020-06-09 18:40:00");
        let by_name = |n: &str| t.jobs().iter().find(|j| j.name == n).unwrap();
        let j1 = by_name("1");
        // 18:41:01 - 18:40:00 = 61 s; duration 04:55:09 next day - 18:41:01 = 36,848 s.
        assert_eq!(j1.submit, SimTime::from_secs(61));
        assert_eq!(t.true_duration(j1.id), SimTime::from_secs(36_848));
        // 1 GPU, 1 CPU, 16 GiB per GPU.
        assert_eq!(j1.task, TaskRequest::whole(1, 1000, 16_384));
        assert_eq!((j1.kind, j1.preemptible), (JobKind::Training, true));
        let j2 = by_name("2");
        // 16 GPUs over 8-GPU nodes: 2 tasks x 8 GPUs, 32 CPUs / 2 = 16 per task.
        assert_eq!(
            (j2.tasks, j2.task),
            (2, TaskRequest::whole(8, 16_000, 131_072))
        );
        assert_eq!(t.true_duration(j2.id), SimTime::from_secs(189));
        let j7 = by_name("7");
        // 12 GPUs: 2 tasks x 6 GPUs; 8 CPUs / 2.
        assert_eq!((j7.tasks, j7.task.gpus, j7.task.cpu_milli), (2, 6, 4000));
        let j9 = by_name("9");
        // A CPU-only job cancelled after it started is kept.
        assert_eq!(
            (j9.kind, j9.task),
            (JobKind::Batch, TaskRequest::whole(0, 4000, 0))
        );
        assert_eq!(t.tenants(), ["vc1", "vc2", "vc3"]);
    }

    #[test]
    fn philly_rows_without_cpus_and_user_tenants() {
        let text = "job_id,user,vc,gpu_num,state,submit_time,start_time,end_time\n\
                    a,u1,v1,2,Pass,2017-10-03 03:38:40,2017-10-03 03:40:00,2017-10-03 04:40:00\n\
                    b,u2,v1,1,Killed,2017-10-03 03:39:00,None,None\n\
                    c,u2,v1,1,Failed,2017-10-03 03:39:30,2017-10-03 03:39:40,2017-10-03 03:39:50\n";
        let options = HeliosOptions {
            tenant: HeliosTenant::User,
            ..HeliosOptions::default()
        };
        let read = read(text.as_bytes(), "philly.csv", &options).unwrap();
        let (t, r) = (&read.trace, &read.report);
        assert_eq!((r.rows, r.kept), (3, 2));
        assert_eq!(r.dropped.get(CANCELLED_BEFORE_START), Some(&1));
        let a = &t.jobs()[0];
        // 2 GPUs x 4000 milli-cores per GPU.
        assert_eq!(a.task, TaskRequest::whole(2, 8000, 32_768));
        assert_eq!(t.true_duration(a.id), SimTime::from_secs(3600));
        assert_eq!(t.tenants(), ["u1", "u2"]);
        assert_eq!(t.jobs()[1].submit, SimTime::from_secs(50));
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let ok = "1,uA,vc1,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 18:42:01,60,0\n";
        let e = read_rows(&format!(
            "{ok}2,uA,vc1,1,1,1,DONE,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-09 18:42:01,60,0\n"
        ))
        .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "helios.csv line 3, field state: expected one of CANCELLED, Killed, COMPLETED"
            ),
            "{e}"
        );
        let e = read_rows("1,uA,vc1,1,1,1,COMPLETED,2020-06-09,2020-06-09 18:41:01,,60,0\n")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "helios.csv line 2, field submit_time: expected a time YYYY-MM-DD HH:MM:SS, got \"2020-06-09\""
        );
        let e = read_rows("1,uA,vc1,1,1,1,COMPLETED,2020-06-09 18:41:01,x,,60,0\n").unwrap_err();
        assert!(e.to_string().contains("line 2, field start_time"), "{e}");
        let e = read_rows("1,uA,vc1,-1,1,1,COMPLETED,2020-06-09 18:41:01,,,60,0\n").unwrap_err();
        assert!(e.to_string().contains("field gpu_num"), "{e}");
        let e = read_rows("1,uA,,1,1,1,COMPLETED,2020-06-09 18:41:01,,,60,0\n").unwrap_err();
        assert!(e.to_string().contains("field vc: expected a name"), "{e}");
        let e = read(
            "job_id,user\n".as_bytes(),
            "h.csv",
            &HeliosOptions::default(),
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("h.csv line 1: missing column vc"),
            "{e}"
        );
        let bad = HeliosOptions {
            gpus_per_node: 0,
            ..HeliosOptions::default()
        };
        let e = read("".as_bytes(), "h.csv", &bad).unwrap_err();
        assert!(e.to_string().contains("gpus_per_node"), "{e}");
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
            let _ = read(bytes.as_slice(), "r.csv", &HeliosOptions::default());
            let _ = read_rows(&String::from_utf8_lossy(&bytes));
        }

        #[test]
        fn random_rows_never_panic(rows in prop::collection::vec(prop::collection::vec("[0-9]{1,4}|[A-Za-z_]{0,9}|20[0-9]{2}-[01][0-9]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-5][0-9]", 12), 0..6)) {
            let text: String = rows.iter().map(|r| r.join(",") + "\n").collect();
            let _ = read_rows(&text);
        }

        #[test]
        fn wall_clock_never_panics(s in "\\PC{0,25}|[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}") {
            let _ = parse_wall_clock(&s);
        }

        #[test]
        fn midnight_follows_the_last_second_of_the_day(year in 1i64..=9999, month in 1i64..=12, day in 1i64..=27) {
            let text = |d: i64, time: &str| format!("{year:04}-{month:02}-{d:02} {time}");
            let last = parse_wall_clock(&text(day, "23:59:59")).unwrap();
            let next = parse_wall_clock(&text(day + 1, "00:00:00")).unwrap();
            prop_assert_eq!(last + 1, next);
        }
    }
}
