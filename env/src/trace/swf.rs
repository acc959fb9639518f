//! Reader for the Standard Workload Format (SWF 2.2) of the Parallel Workloads Archive
//! (www.cs.huji.ac.il/labs/parallel/workload), e.g. `SDSC-BLUE-2000-4.2-cln.swf.gz`: logs of
//! CPU supercomputers and clusters, one line per job. The archive ships them gzip-compressed;
//! [`super::TraceFormat::read`] decompresses such input, so this reader sees plain text.
//!
//! Lines: one starting with `;` is a header comment (`; Key: value`); blank lines are skipped;
//! every other line is one job of 18 whitespace-separated numbers, -1 meaning unknown:
//!
//! | field | meaning | used as |
//! |---|---|---|
//! | 1 | job number | the job's name |
//! | 2 | submit time, s after `UnixStartTime` | submit |
//! | 3 | wait time, s | not used: the simulator decides the wait |
//! | 4 | run time, s (end - start) | true duration |
//! | 5 | allocated processors | processors |
//! | 6 | average CPU time used, s | not used |
//! | 7 | used memory, KB per processor | memory, when field 10 is unknown |
//! | 8 | requested processors | processors, when field 5 is unknown |
//! | 9 | requested time, s (the user's wall-time estimate) | runtime estimate |
//! | 10 | requested memory, KB per processor | memory |
//! | 11 | status | which rows are dropped |
//! | 12, 13, 15 | user, group, queue | tenant (one of them, [`SwfOptions::tenant`]) |
//! | 14, 16, 17, 18 | executable, partition, preceding job, think time | not used |
//!
//! The fields used must be integers >= -1 (an error names the line and the field otherwise);
//! the others are not read, but every job line must have exactly 18 fields.
//!
//! Rules, every one an assumption about a log that does not say ([`SwfOptions`] overrides the
//! numbers):
//! - Header comments `Version`, `Computer`, `Installation`, `UnixStartTime`, `TimeZoneString`,
//!   `StartTime`, `EndTime`, `MaxJobs`, `MaxRecords`, `MaxNodes`, `MaxProcs` and `Preemption`
//!   are kept verbatim (first occurrence) in [`super::ReadReport::notes`]: `UnixStartTime` is
//!   the wall-clock time of submit 0; `MaxProcs` / `MaxNodes` is the processors per node, a
//!   cluster sizing hint and the natural [`SwfOptions::procs_per_node`]. Other comments are
//!   skipped.
//! - Status (field 11): 1 completed, 0 failed, 5 cancelled, -1 unknown; 2, 3 and 4 mark the
//!   partial executions of a checkpointed job, each kept as a job of its own. Other values are
//!   an error.
//! - Rows dropped, checked in this order and counted by reason: submit time -1
//!   ([`UNKNOWN_SUBMIT`]); cancelled with run time 0 or -1, so it never ran
//!   ([`CANCELLED_BEFORE_START`]); run time -1 ([`UNKNOWN_RUN_TIME`]); neither field 5 nor 8
//!   above 0 ([`UNKNOWN_PROCESSORS`]). Failed jobs, and cancelled jobs that ran, are kept with
//!   the run time they had; a run time of 0 is kept (a zero-length job).
//! - Processors = field 5 when above 0, else field 8. Jobs are CPU-only (`gpus` = 0): the
//!   archive's machines have no GPUs. With `procs_per_node` unset (the default) a job is one
//!   task holding all its processors; set, a job of more processors is a gang of
//!   ceil(procs / procs_per_node) tasks of ceil(procs / tasks) processors each, so a count that
//!   does not split evenly asks for at most tasks - 1 processors more than the job had.
//!   `cpu_milli` per task = its processors x `cpu_milli_per_proc` (1000: one processor, one
//!   core).
//! - `mem_mib` per task = ceil(KB per processor x processors per task / 1024), the KB taken
//!   from requested memory (field 10) when above 0 (the request is what a scheduler sees), else
//!   from used memory (field 7) when above 0, else 0 (unknown: no memory demand).
//! - estimate = requested time (field 9); none when -1.
//! - Tenant: the user (field 12, the default), group (13) or queue (15), named `user-12`,
//!   `group-3`, `queue-4` (`user-unknown` for -1), numbered in order of first appearance.
//! - kind batch, priority 0, no GPU type; qos latency-sensitive and not preemptible for every
//!   job: SWF has no classes, and the logged machines did not preempt (their headers say
//!   `Preemption: No`).

use super::table::quote;
use super::{ReadReport, Tenants, TraceFormat, TraceRead, TraceReadError};
use crate::job::{JobKind, JobSpec, MAX_TASKS, Qos, TaskRequest};
use crate::units::{JobId, SimTime};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};

/// Drop reason: the submit time is -1.
pub const UNKNOWN_SUBMIT: &str = "unknown-submit";
/// Drop reason: a cancelled job whose run time is 0 or -1 (it never ran).
pub const CANCELLED_BEFORE_START: &str = "cancelled-before-start";
/// Drop reason: the run time is -1.
pub const UNKNOWN_RUN_TIME: &str = "unknown-run-time";
/// Drop reason: neither allocated nor requested processors are above 0.
pub const UNKNOWN_PROCESSORS: &str = "unknown-processors";

/// Fields of one job line.
pub const FIELDS: usize = 18;

/// The fields' names, as errors quote them (field n is `FIELD_NAMES[n - 1]`).
const FIELD_NAMES: [&str; FIELDS] = [
    "job number",
    "submit time",
    "wait time",
    "run time",
    "allocated processors",
    "average CPU time",
    "used memory",
    "requested processors",
    "requested time",
    "requested memory",
    "status",
    "user",
    "group",
    "executable",
    "queue",
    "partition",
    "preceding job",
    "think time",
];

/// Header comments kept in the report's notes.
const NOTED: &[&str] = &[
    "Version",
    "Computer",
    "Installation",
    "UnixStartTime",
    "TimeZoneString",
    "StartTime",
    "EndTime",
    "MaxJobs",
    "MaxRecords",
    "MaxNodes",
    "MaxProcs",
    "Preemption",
];

/// Which SWF field names a job's tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwfTenant {
    /// Field 12, tenants named `user-N`.
    #[default]
    User,
    /// Field 13, tenants named `group-N`.
    Group,
    /// Field 15, tenants named `queue-N`.
    Queue,
}

impl SwfTenant {
    /// The 1-based field holding the id.
    fn field(self) -> usize {
        match self {
            SwfTenant::User => 12,
            SwfTenant::Group => 13,
            SwfTenant::Queue => 15,
        }
    }
    fn prefix(self) -> &'static str {
        match self {
            SwfTenant::User => "user",
            SwfTenant::Group => "group",
            SwfTenant::Queue => "queue",
        }
    }
}

/// What the SWF reader assumes for what the format lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SwfOptions {
    /// Which field names the tenant: `user` (field 12), `group` (13) or `queue` (15).
    pub tenant: SwfTenant,
    /// CPU per processor, milli-cores.
    pub cpu_milli_per_proc: u64,
    /// Processors of one node (>= 1): a larger job becomes a gang of ceil(procs / this) equal
    /// tasks. Unset: every job is one task, whatever its size.
    pub procs_per_node: Option<u32>,
    /// QoS class given to every job.
    pub qos: Qos,
    /// Whether every job may be preempted.
    pub preemptible: bool,
}

impl Default for SwfOptions {
    fn default() -> Self {
        SwfOptions {
            tenant: SwfTenant::User,
            cpu_milli_per_proc: 1000,
            procs_per_node: None,
            qos: Qos::LatencySensitive,
            preemptible: false,
        }
    }
}

impl SwfOptions {
    /// Checks `procs_per_node`, when set, is at least 1.
    pub fn validate(&self) -> Result<(), String> {
        match self.procs_per_node {
            Some(0) => Err("procs_per_node must be at least 1".into()),
            _ => Ok(()),
        }
    }

    /// Splits a job of `procs` processors (>= 1) into (tasks, processors per task), as the
    /// module docs rule.
    pub fn split(&self, procs: u64) -> (u64, u64) {
        match self.procs_per_node {
            Some(per_node) if procs > u64::from(per_node) => {
                let tasks = procs.div_ceil(u64::from(per_node));
                (tasks, procs.div_ceil(tasks))
            }
            _ => (1, procs),
        }
    }
}

/// True when `line` looks like the start of an SWF file: a `;` comment, or 18
/// whitespace-separated numbers.
pub fn looks_like_swf(line: &str) -> bool {
    let line = line.trim();
    if line.starts_with(';') {
        return true;
    }
    let mut count = 0;
    for field in line.split_ascii_whitespace() {
        if field.parse::<f64>().is_err() {
            return false;
        }
        count += 1;
    }
    count == FIELDS
}

/// What became of one job line.
enum Row {
    Kept(JobSpec, SimTime),
    Dropped(&'static str),
}

/// Reads an SWF log (uncompressed); `source` names it in errors and becomes the trace's name.
pub fn read(
    input: impl Read,
    source: &str,
    options: &SwfOptions,
) -> Result<TraceRead, TraceReadError> {
    options
        .validate()
        .map_err(TraceReadError::options(source))?;
    let mut input = BufReader::with_capacity(1 << 16, input);
    let mut report = ReadReport::new(TraceFormat::Swf);
    let mut tenants = Tenants::default();
    let mut tenant_name = String::new();
    let (mut jobs, mut durations) = (Vec::new(), Vec::new());
    let mut bytes = Vec::new();
    let mut line = 0;
    loop {
        bytes.clear();
        let read =
            input
                .read_until(b'\n', &mut bytes)
                .map_err(|source_err| TraceReadError::Io {
                    file: source.into(),
                    source: source_err,
                })?;
        if read == 0 {
            break;
        }
        line += 1;
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| TraceReadError::Line {
                file: source.into(),
                line,
                problem: "expected text (UTF-8)".into(),
            })?
            .trim();
        if text.is_empty() {
            continue;
        }
        if let Some(comment) = text.strip_prefix(';') {
            note_header(comment, &mut report);
            continue;
        }
        report.rows += 1;
        let fields = JobLine::split(source, line, text)?;
        match parse_job(&fields, options, &mut tenants, &mut tenant_name)? {
            Row::Kept(job, duration) => {
                jobs.push(job);
                durations.push(duration);
                report.kept += 1;
            }
            Row::Dropped(reason) => report.drop_row(reason, line, fields.fields[0]),
        }
    }
    super::finish(source, jobs, durations, tenants.names, report)
}

/// Keeps a `Key: value` header comment whose key is in [`NOTED`] (first occurrence wins).
fn note_header(comment: &str, report: &mut ReadReport) {
    let Some((key, value)) = comment.split_once(':') else {
        return;
    };
    let key = key.trim();
    if NOTED.contains(&key) && !report.notes.contains_key(key) {
        report.notes.insert(key.into(), value.trim().into());
    }
}

/// One job line split into its 18 fields; errors name the file, the line and the field.
struct JobLine<'a> {
    file: &'a str,
    line: u64,
    fields: [&'a str; FIELDS],
}

impl<'a> JobLine<'a> {
    fn split(file: &'a str, line: u64, text: &'a str) -> Result<Self, TraceReadError> {
        let mut fields = [""; FIELDS];
        let mut count = 0;
        for field in text.split_ascii_whitespace() {
            if let Some(slot) = fields.get_mut(count) {
                *slot = field;
            }
            count += 1;
        }
        if count != FIELDS {
            return Err(TraceReadError::Line {
                file: file.into(),
                line,
                problem: format!("expected {FIELDS} whitespace-separated fields, got {count}"),
            });
        }
        Ok(JobLine { file, line, fields })
    }

    /// An error about field `n` (1-based).
    fn error(&self, n: usize, problem: impl Into<String>) -> TraceReadError {
        TraceReadError::Field {
            file: self.file.into(),
            line: self.line,
            field: format!("{n} ({})", FIELD_NAMES[n - 1]),
            problem: problem.into(),
        }
    }

    /// Field `n` (1-based) as an integer >= -1 (-1 = unknown).
    fn int(&self, n: usize) -> Result<i64, TraceReadError> {
        let text = self.fields[n - 1];
        match text.parse::<i64>() {
            Ok(value) if value >= -1 => Ok(value),
            _ => Err(self.error(n, format!("expected an integer >= -1, got {}", quote(text)))),
        }
    }
}

fn parse_job(
    line: &JobLine<'_>,
    options: &SwfOptions,
    tenants: &mut Tenants,
    tenant_name: &mut String,
) -> Result<Row, TraceReadError> {
    let submit = line.int(2)?;
    let run = line.int(4)?;
    let allocated = line.int(5)?;
    let used_kb = line.int(7)?;
    let requested = line.int(8)?;
    let estimate = line.int(9)?;
    let requested_kb = line.int(10)?;
    let status = line.int(11)?;
    if !(-1..=5).contains(&status) {
        return Err(line.error(
            11,
            format!(
                "expected -1, 0 (failed), 1 (completed), 2..=4 (partial) or 5 (cancelled), \
                 got {status}"
            ),
        ));
    }
    let tenant = line.int(options.tenant.field())?;
    if submit < 0 {
        return Ok(Row::Dropped(UNKNOWN_SUBMIT));
    }
    if status == 5 && run <= 0 {
        return Ok(Row::Dropped(CANCELLED_BEFORE_START));
    }
    if run < 0 {
        return Ok(Row::Dropped(UNKNOWN_RUN_TIME));
    }
    let (procs_field, procs) = match (allocated, requested) {
        (a, _) if a > 0 => (5, a.unsigned_abs()),
        (_, r) if r > 0 => (8, r.unsigned_abs()),
        _ => return Ok(Row::Dropped(UNKNOWN_PROCESSORS)),
    };
    let (tasks, procs_per_task) = options.split(procs);
    let tasks = u32::try_from(tasks)
        .ok()
        .filter(|t| *t <= MAX_TASKS)
        .ok_or_else(|| {
            line.error(
                procs_field,
                format!("{procs} processors make {tasks} tasks, more than {MAX_TASKS}"),
            )
        })?;
    let too_large = |field: usize| line.error(field, "too large for one task");
    let cpu_milli = procs_per_task
        .checked_mul(options.cpu_milli_per_proc)
        .ok_or_else(|| too_large(procs_field))?;
    let (mem_field, kb_per_proc) = match (requested_kb, used_kb) {
        (r, _) if r > 0 => (10, r.unsigned_abs()),
        (_, u) if u > 0 => (7, u.unsigned_abs()),
        _ => (10, 0),
    };
    let mem_mib = kb_per_proc
        .checked_mul(procs_per_task)
        .ok_or_else(|| too_large(mem_field))?
        .div_ceil(1024);
    tenant_name.clear();
    match tenant {
        -1 => write!(tenant_name, "{}-unknown", options.tenant.prefix()),
        id => write!(tenant_name, "{}-{id}", options.tenant.prefix()),
    }
    .expect("writing to a String cannot fail");
    let job = JobSpec {
        id: JobId(0),
        name: line.fields[0].to_string(),
        submit: SimTime::from_secs(submit.unsigned_abs()),
        tasks,
        task: TaskRequest::whole(0, cpu_milli, mem_mib),
        gpu_types: Vec::new(),
        tenant: tenants.id(tenant_name),
        priority: 0,
        qos: options.qos,
        preemptible: options.preemptible,
        kind: JobKind::Batch,
        estimate: (estimate >= 0).then(|| SimTime::from_secs(estimate.unsigned_abs())),
        workload: None,
        constraints: Default::default(),
        elastic: None,
    };
    Ok(Row::Kept(job, SimTime::from_secs(run.unsigned_abs())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HEADER: &str = "\
; Version: 2.2
; Computer: Test SP
; UnixStartTime: 835823160
; MaxNodes: 4
; MaxProcs: 32
; Queue:  1 batch
;
";

    fn read_lines(lines: &str) -> Result<TraceRead, TraceReadError> {
        read(
            format!("{HEADER}{lines}").as_bytes(),
            "log.swf",
            &SwfOptions::default(),
        )
    }

    #[test]
    fn jobs_follow_the_documented_rules() {
        // job submit wait run alloc cpu usedmem reqproc reqtime reqmem status user group exe queue part prev think
        let read = read_lines(
            "1   0 5 100  4 -1    -1  4  200     -1 1 7 3 -1 1 -1 -1 -1\n\
             2  10 0 300 -1 -1  2048 16 400   4096 0 8 3 -1 2 -1 -1 -1\n\
             \n\
             3  20 0  -1 -1 -1    -1  8 100     -1 5 7 3 -1 1 -1 -1 -1\n\
             4  -1 0  10  1 -1    -1  1 100     -1 1 7 3 -1 1 -1 -1 -1\n\
             5  30 0  -1  1 -1    -1  1  -1     -1 1 7 3 -1 1 -1 -1 -1\n\
             6  40 0  50 -1 -1    -1 -1  -1     -1 1 7 3 -1 1 -1 -1 -1\n\
             7  50 0  60  2 -1   512  2  -1     -1 5 -1 3 -1 1 -1 -1 -1\n\
             8  60 0   0  1 -1    -1  1  10     -1 -1 7 3 -1 1 -1 -1 -1\n",
        )
        .unwrap();
        let (t, r) = (&read.trace, &read.report);
        assert_eq!((r.rows, r.kept, r.censored), (8, 4, 0));
        for reason in [
            CANCELLED_BEFORE_START,
            UNKNOWN_SUBMIT,
            UNKNOWN_RUN_TIME,
            UNKNOWN_PROCESSORS,
        ] {
            assert_eq!(r.dropped.get(reason), Some(&1), "{reason}");
        }
        // Job 3 sits on line 11: 7 header lines, jobs 1 and 2, one blank line.
        assert_eq!(
            (r.first_dropped[0].line, r.first_dropped[0].job.as_str()),
            (11, "3")
        );
        assert_eq!(r.notes["UnixStartTime"], "835823160");
        assert_eq!(r.notes["MaxProcs"], "32");
        assert!(!r.notes.contains_key("Queue"));

        let j1 = &t.jobs()[0];
        // 4 allocated processors x 1000 milli-cores, no memory, estimate = requested time.
        assert_eq!((j1.name.as_str(), j1.tasks), ("1", 1));
        assert_eq!(j1.task, TaskRequest::whole(0, 4000, 0));
        assert_eq!(j1.estimate, Some(SimTime::from_secs(200)));
        assert_eq!(t.true_duration(j1.id), SimTime::from_secs(100));
        assert_eq!(
            (j1.kind, j1.qos, j1.preemptible),
            (JobKind::Batch, Qos::LatencySensitive, false)
        );
        let j2 = &t.jobs()[1];
        // allocated unknown -> 16 requested processors; requested 4096 KB/proc x 16 / 1024.
        assert_eq!(j2.task, TaskRequest::whole(0, 16_000, 64));
        assert_eq!(t.tenant_name(j2.tenant), "user-8");
        let j7 = &t.jobs()[2];
        // a cancelled job that ran is kept; used memory 512 KB x 2 procs = 1 MiB.
        assert_eq!((j7.task.mem_mib, j7.estimate), (1, None));
        assert_eq!(t.tenant_name(j7.tenant), "user-unknown");
        let j8 = &t.jobs()[3];
        assert_eq!(t.true_duration(j8.id), SimTime::ZERO);
        assert_eq!(t.tenants(), ["user-7", "user-8", "user-unknown"]);
    }

    #[test]
    fn tenant_and_node_options_apply() {
        let options = SwfOptions {
            tenant: SwfTenant::Queue,
            procs_per_node: Some(8),
            cpu_milli_per_proc: 500,
            ..SwfOptions::default()
        };
        let text = "1 0 0 10 17 -1 -1 17 -1 1024 1 7 3 -1 4 -1 -1 -1\n";
        let read = read(text.as_bytes(), "log.swf", &options).unwrap();
        let job = &read.trace.jobs()[0];
        // 17 procs over 8-proc nodes: ceil(17/8) = 3 tasks of ceil(17/3) = 6 procs,
        // 6 x 500 milli-cores, 1024 KB x 6 procs / 1024 = 6 MiB.
        assert_eq!((job.tasks, job.task), (3, TaskRequest::whole(0, 3000, 6)));
        assert_eq!(read.trace.tenants(), ["queue-4"]);
        assert_eq!(options.split(8), (1, 8));
        assert_eq!(options.split(64), (8, 8));
        let toml: SwfOptions = toml::from_str("tenant = \"group\"\nprocs_per_node = 8").unwrap();
        assert_eq!(
            (toml.tenant, toml.procs_per_node),
            (SwfTenant::Group, Some(8))
        );
        assert!(toml::from_str::<SwfOptions>("procs = 8").is_err());
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = read_lines("1 0 0 1x 4 -1 -1 4 200 -1 1 7 3 -1 1 -1 -1 -1\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "log.swf line 8, field 4 (run time): expected an integer >= -1, got \"1x\""
        );
        let e = read_lines("1 0 0 1 4 -1 -1 4 200 -1 1 7 3 -1 1 -1 -1\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "log.swf line 8: expected 18 whitespace-separated fields, got 17"
        );
        let e = read_lines("1 0 0 1 4 -1 -1 4 200 -1 9 7 3 -1 1 -1 -1 -1\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("log.swf line 8, field 11 (status): expected -1, 0"),
            "{e}"
        );
        let e = read_lines("1 -5 0 1 4 -1 -1 4 200 -1 1 7 3 -1 1 -1 -1 -1\n").unwrap_err();
        assert!(e.to_string().contains("field 2 (submit time)"), "{e}");
        let e = read(&b"\xff\xfe\n"[..], "x.swf", &SwfOptions::default()).unwrap_err();
        assert_eq!(e.to_string(), "x.swf line 1: expected text (UTF-8)");
        let bad = SwfOptions {
            procs_per_node: Some(0),
            ..SwfOptions::default()
        };
        let e = read("".as_bytes(), "x.swf", &bad).unwrap_err();
        assert!(e.to_string().contains("procs_per_node"), "{e}");
    }

    #[test]
    fn gzip_input_is_read_through_the_format() {
        use std::io::Write;
        let text = format!("{HEADER}1 0 0 100 4 -1 -1 4 200 -1 1 7 3 -1 1 -1 -1 -1\n");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(text.as_bytes()).unwrap();
        let bytes = gz.finish().unwrap();
        assert_eq!(bytes[..2], [0x1f, 0x8b]);
        let read = TraceFormat::Swf
            .read(bytes.as_slice(), "log.swf.gz", &Default::default())
            .unwrap();
        assert_eq!((read.report.rows, read.trace.len()), (1, 1));
    }

    #[test]
    fn detection_sees_comments_and_job_lines() {
        assert!(looks_like_swf("; Version: 2.2"));
        assert!(looks_like_swf(
            "    1        0 588530    937  306 142.00    -1   -1  35100    -1  1  97  -1 307  3 -1 -1 -1"
        ));
        assert!(!looks_like_swf("1 2 3"));
        assert!(!looks_like_swf("job_id,submit_s"));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
            let _ = read(bytes.as_slice(), "r.swf", &SwfOptions::default());
            let _ = TraceFormat::Swf.read(bytes.as_slice(), "r.swf", &Default::default());
        }

        #[test]
        fn random_lines_never_panic(
            lines in prop::collection::vec(prop::collection::vec("-?[0-9]{0,20}|;x|[a-z.]{0,3}", 16..20), 0..6),
            per_node in prop::option::of(0u32..10),
        ) {
            let text: String = lines.iter().map(|l| l.join(" ") + "\n").collect();
            let options = SwfOptions { procs_per_node: per_node, ..SwfOptions::default() };
            let _ = read(text.as_bytes(), "r.swf", &options);
        }
    }
}
