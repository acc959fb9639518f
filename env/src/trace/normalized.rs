//! Lachesis' normalized trace CSV, schema v1: the one format Lachesis both reads and writes.
//! Writing a [`Trace`] and reading it back gives an equal trace (its name becomes the source
//! the reader was given). The full description, with an example, is `docs/trace-format.md`.
//!
//! ```text
//! #lachesis-trace v1
//! #tenants,default,alice
//! job_id,submit_s,duration_s,tasks,gpus,gpu_milli,cpu_milli,mem_mib,gpu_types,tenant,priority,qos,preemptible,kind,estimate_s
//! j1,0,3600,2,8,1000,32000,131072,A100|H100,alice,0,latency-sensitive,true,training,7200
//! ```
//!
//! - Line 1 must be `#lachesis-trace v1`; a missing line or another version is an error that
//!   names the version found and the one supported.
//! - Line 2 may be `#tenants,NAME,...`: the trace's tenant table in `TenantId` order (kept
//!   even when a tenant has no job). Without it, tenants are numbered in order of first
//!   appearance in the `tenant` column.
//! - Then the header: all 15 columns, in any order, no others; plus, optionally, `workload`,
//!   the pair `constraints`,`distinct_nodes`, and the pair `min_gpus`,`max_gpus`.
//! - `job_id`: the job's name in its source trace (any text). `submit_s`, `duration_s`
//!   (true run time at speed 1.0), `estimate_s` (user estimate; empty = none): seconds,
//!   non-negative, at most 3 decimals, so exact milliseconds. `tasks` >= 1 (a gang when > 1);
//!   `gpus` 0..=64 and `gpu_milli` 0..=1000 per task, as [`crate::job::TaskRequest`] rules
//!   them; `cpu_milli`, `mem_mib` per task. `gpu_types`: allowed GPU models, `|`-separated,
//!   empty = any. `tenant`: a non-empty name. `priority`: i32, larger is more important.
//!   `qos`: `guaranteed`, `latency-sensitive`, `burstable`, `best-effort`. `preemptible`:
//!   `true`/`false`. `kind`: `training`, `inference`, `batch`. `workload`: the model the job
//!   trains, a type a throughput preset defines (`crate::throughput::known_workload`:
//!   case-insensitive, stored in the preset's spelling) or one listed in
//!   [`super::ReadOptions::workload_names`]; empty = untyped. Any other name is refused.
//!   `min_gpus`, `max_gpus`: an elastic job's GPU range (`crate::job::Elastic`: whole-GPU
//!   tasks, both multiples of `gpus`, the job's size between them); both empty = rigid.
//! - Rows may come in any order; the trace sorts them by submit time (stable).
//!
//! Writing refuses what would not read back equal: empty or duplicate tenant names, GPU type
//! names that are empty, contain `|` or have surrounding spaces. The `workload` column is
//! written only when some job has a type, the constraint pair only when some job is
//! constrained, the elastic pair only when some job is elastic, so a trace without them is
//! written as before.

use super::table::{self, Table, Unknown};
use super::{ReadReport, TraceFormat, TraceRead, TraceReadError};
use crate::cluster::MAX_GPUS_PER_NODE;
use crate::constraint::Constraints;
use crate::deps::Dependency;
use crate::deps::GraphError;
use crate::job::TraceError;
use crate::job::{Elastic, JobDeps, JobKind, JobSpec, Qos, TaskRequest, Trace, WorkloadType};
use crate::units::{GPU_MILLI, JobId, SimTime, TenantId};
use csv::StringRecord;
use std::collections::HashMap;
use std::io::{Read, Write};

/// The first line starts with this, then a space and the version.
pub const MAGIC: &str = "#lachesis-trace";
/// The schema version this build reads and writes.
pub const VERSION: &str = "v1";
/// First field of the optional tenant-table line.
pub const TENANTS: &str = "#tenants";
/// The 15 required columns of schema v1, in the order Lachesis writes them.
pub const COLUMNS: &[&str] = ALL_COLUMNS.split_at(15).0;
/// The optional 16th column: the job's workload type.
pub const WORKLOAD: &str = "workload";
/// The optional pair of columns of node constraints (`crate::constraint`'s text form; empty:
/// none) and whether a gang needs distinct nodes (`true`/`false`).
pub const CONSTRAINTS: &str = "constraints";
pub const DISTINCT_NODES: &str = "distinct_nodes";
/// The optional pair of columns of an elastic job's GPU range (both empty: rigid).
pub const MIN_GPUS: &str = "min_gpus";
pub const MAX_GPUS: &str = "max_gpus";
/// The optional column of a job's dependency, in Slurm's syntax over `job_id`s.
pub const DEPENDS_ON: &str = "depends_on";
/// The optional column of a job's exit code (0 or empty: success).
pub const EXIT_CODE: &str = "exit_code";
/// [`COLUMNS`], then [`WORKLOAD`], [`CONSTRAINTS`] and [`DISTINCT_NODES`].
const ALL_COLUMNS: &[&str] = &[
    "job_id",
    "submit_s",
    "duration_s",
    "tasks",
    "gpus",
    "gpu_milli",
    "cpu_milli",
    "mem_mib",
    "gpu_types",
    "tenant",
    "priority",
    "qos",
    "preemptible",
    "kind",
    "estimate_s",
    WORKLOAD,
    CONSTRAINTS,
    DISTINCT_NODES,
];
/// [`COLUMNS`] and the constraint pair, without [`WORKLOAD`].
const COLUMNS_WITH_CONSTRAINTS: &[&str] = &[
    "job_id",
    "submit_s",
    "duration_s",
    "tasks",
    "gpus",
    "gpu_milli",
    "cpu_milli",
    "mem_mib",
    "gpu_types",
    "tenant",
    "priority",
    "qos",
    "preemptible",
    "kind",
    "estimate_s",
    CONSTRAINTS,
    DISTINCT_NODES,
];
/// [`COLUMNS`], then [`WORKLOAD`].
const COLUMNS_WITH_WORKLOAD: &[&str] = ALL_COLUMNS.split_at(16).0;

/// Why a trace could not be written in the normalized format.
#[derive(Debug, thiserror::Error)]
pub enum TraceWriteError {
    #[error("cannot write the trace: {0}")]
    Csv(#[from] csv::Error),
    #[error("cannot write the trace: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot write the trace in the normalized format: {0}")]
    Unrepresentable(String),
}

/// Reads a normalized trace; `source` names it in errors and becomes the trace's name.
/// `workload_names` are the workload types accepted besides the presets' (a custom table's).
pub fn read(
    input: impl Read,
    source: &str,
    workload_names: &[String],
) -> Result<TraceRead, TraceReadError> {
    let mut reader = table::csv_reader(input);
    let mut record = StringRecord::new();
    let found = table::next_record(source, &mut reader, &mut record)?;
    check_version(source, found.then_some(&record))?;

    let mut tenants = Tenants::default();
    let mut more = table::next_record(source, &mut reader, &mut record)?;
    if more && record.get(0).map(str::trim) == Some(TENANTS) {
        tenants = Tenants::declared(source, &record)?;
        more = table::next_record(source, &mut reader, &mut record)?;
    }
    if !more {
        return Err(table::missing_header(source, &reader, COLUMNS));
    }
    let typed = record.iter().any(|column| column.trim() == WORKLOAD);
    let constrained = record
        .iter()
        .any(|column| [CONSTRAINTS, DISTINCT_NODES].contains(&column.trim()));
    let elastic = record
        .iter()
        .any(|column| [MIN_GPUS, MAX_GPUS].contains(&column.trim()));
    let has = |column: &str| record.iter().any(|c| c.trim() == column);
    let pipeline = Pipeline {
        depends_on: has(DEPENDS_ON),
        exit_code: has(EXIT_CODE),
    };
    let columns = columns_for(typed, constrained, elastic, pipeline);
    let mut rows = Table::with_header(source, reader, record, &columns, Unknown::Reject)?;

    let mut report = ReadReport::new(TraceFormat::Normalized);
    let (mut jobs, mut durations) = (Vec::new(), Vec::new());
    let (mut deps, mut lines) = (Vec::new(), Vec::new());
    while let Some(row) = rows.next_row()? {
        report.rows += 1;
        let (mut job, duration) = parse_job(&row, &mut tenants)?;
        if typed {
            job.workload = parse_workload(&row, workload_names)?;
        }
        if constrained {
            job.constraints = parse_constraints(&row)?;
        }
        if elastic {
            job.elastic = parse_elastic(&row)?;
        }
        if pipeline.depends_on || pipeline.exit_code {
            deps.push(parse_deps(&row, pipeline)?);
            lines.push(row.line);
        }
        jobs.push(job);
        durations.push(duration);
        report.kept += 1;
    }
    if deps.is_empty() {
        return super::finish(source, jobs, durations, tenants.names, report);
    }
    // A dependency the trace refuses is named by the line of the job that holds it.
    let line_of: HashMap<String, u64> = jobs
        .iter()
        .zip(&lines)
        .zip(&deps)
        .filter(|(_, d)| d.depends_on.is_some())
        .map(|((j, line), _)| (j.name.clone(), *line))
        .collect();
    match Trace::with_deps(source, jobs, durations, tenants.names, deps) {
        Ok(trace) => Ok(TraceRead { trace, report }),
        Err(err) => {
            let job = match &err {
                TraceError::UnknownParent { name, .. } => Some(name.clone()),
                TraceError::Cycle(GraphError::Cycle { cycle }) => {
                    cycle.split(" -> ").next().map(str::to_string)
                }
                _ => None,
            };
            Err(match job.and_then(|j| line_of.get(&j)) {
                Some(&line) => TraceReadError::Field {
                    file: source.into(),
                    line,
                    field: DEPENDS_ON.into(),
                    problem: err.to_string(),
                },
                None => TraceReadError::Trace {
                    file: source.into(),
                    source: err,
                },
            })
        }
    }
}

/// Which of the pipeline columns the header has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Pipeline {
    depends_on: bool,
    exit_code: bool,
}

/// The `depends_on` and `exit_code` fields (each where the header has it).
fn parse_deps(row: &table::Row<'_>, pipeline: Pipeline) -> Result<JobDeps, TraceReadError> {
    let depends_on = if pipeline.depends_on {
        Dependency::parse_slurm(row.str(DEPENDS_ON))
            .map_err(|e| row.error(DEPENDS_ON, e.to_string()))?
    } else {
        None
    };
    let fails = pipeline.exit_code
        && match row.str(EXIT_CODE).trim() {
            "" => false,
            code => {
                code.parse::<i32>().map_err(|_| {
                    row.expected(EXIT_CODE, "an integer exit code (0: success), or nothing")
                })? != 0
            }
        };
    Ok(JobDeps { depends_on, fails })
}

/// Checks line 1 is `#lachesis-trace v1`.
fn check_version(source: &str, first: Option<&StringRecord>) -> Result<(), TraceReadError> {
    let text = first.map_or(String::new(), |r| r.iter().collect::<Vec<_>>().join(","));
    let problem = match text.trim().strip_prefix(MAGIC) {
        Some(version) if version.trim() == VERSION => return Ok(()),
        Some(version) => format!(
            "found trace schema version {}, this build reads only {VERSION} \
             (`{MAGIC} {VERSION}`)",
            table::quote(version.trim())
        ),
        None => format!(
            "expected the version line `{MAGIC} {VERSION}` first, got {}: \
             no schema version found",
            table::quote(&text)
        ),
    };
    Err(TraceReadError::Line {
        file: source.into(),
        line: first.map_or(1, table::line_of),
        problem,
    })
}

/// The tenant table: declared on the `#tenants` line, or grown in order of first appearance.
#[derive(Default)]
struct Tenants {
    names: Vec<String>,
    ids: HashMap<String, TenantId>,
    declared: bool,
}

impl Tenants {
    fn declared(source: &str, record: &StringRecord) -> Result<Tenants, TraceReadError> {
        let mut tenants = Tenants {
            declared: true,
            ..Tenants::default()
        };
        for name in record.iter().skip(1) {
            let problem = if name.is_empty() {
                "a tenant name is empty"
            } else if tenants.ids.contains_key(name) {
                "a tenant is listed twice"
            } else {
                tenants.insert(name);
                continue;
            };
            return Err(TraceReadError::Field {
                file: source.into(),
                line: table::line_of(record),
                field: TENANTS.into(),
                problem: format!("{problem}: {}", table::quote(name)),
            });
        }
        Ok(tenants)
    }

    fn insert(&mut self, name: &str) -> TenantId {
        let id = TenantId(self.names.len() as u32);
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }

    fn id(&mut self, row: &table::Row<'_>) -> Result<TenantId, TraceReadError> {
        let name = row.str("tenant");
        match self.ids.get(name) {
            Some(id) => Ok(*id),
            None if self.declared => Err(row.expected("tenant", "a tenant on the #tenants line")),
            None if name.is_empty() => Err(row.expected("tenant", "a tenant name")),
            None => Ok(self.insert(name)),
        }
    }
}

fn parse_job(
    row: &table::Row<'_>,
    tenants: &mut Tenants,
) -> Result<(JobSpec, SimTime), TraceReadError> {
    let task = TaskRequest {
        gpus: row.int_in("gpus", 0..=MAX_GPUS_PER_NODE)?,
        gpu_milli: row.int_in("gpu_milli", 0..=GPU_MILLI)?,
        cpu_milli: row.parse("cpu_milli", "a non-negative integer (milli-cores)")?,
        mem_mib: row.parse("mem_mib", "a non-negative integer (MiB)")?,
    };
    task.validate()
        .map_err(|problem| row.error("gpu_milli", problem))?;
    let job = JobSpec {
        id: JobId(0),
        name: row.str("job_id").to_string(),
        submit: row.secs("submit_s")?,
        tasks: row.int_in("tasks", 1..=crate::job::MAX_TASKS)?,
        task,
        gpu_types: row.names("gpu_types")?,
        tenant: tenants.id(row)?,
        priority: row.parse("priority", "an integer (i32)")?,
        qos: Qos::parse(row.str("qos")).ok_or_else(|| {
            row.expected(
                "qos",
                "guaranteed, latency-sensitive, burstable or best-effort",
            )
        })?,
        preemptible: match row.str("preemptible").trim() {
            "true" => true,
            "false" => false,
            _ => return Err(row.expected("preemptible", "true or false")),
        },
        kind: JobKind::parse(row.str("kind"))
            .ok_or_else(|| row.expected("kind", "training, inference or batch"))?,
        estimate: row.opt_secs("estimate_s")?,
        workload: None,
        constraints: Default::default(),
        elastic: None,
    };
    Ok((job, row.secs("duration_s")?))
}

/// The `constraints` and `distinct_nodes` fields.
fn parse_constraints(row: &table::Row<'_>) -> Result<Constraints, TraceReadError> {
    let mut c = Constraints::parse(row.str(CONSTRAINTS)).map_err(|e| row.error(CONSTRAINTS, e))?;
    c.distinct_nodes = match row.str(DISTINCT_NODES).trim() {
        "" | "false" => false,
        "true" => true,
        _ => return Err(row.expected(DISTINCT_NODES, "true, false or nothing")),
    };
    Ok(c)
}

/// The header's columns: the required ones, then each optional group present.
fn columns_for(
    typed: bool,
    constrained: bool,
    elastic: bool,
    pipeline: Pipeline,
) -> Vec<&'static str> {
    let mut columns = match (typed, constrained) {
        (false, false) => COLUMNS,
        (true, false) => COLUMNS_WITH_WORKLOAD,
        (false, true) => COLUMNS_WITH_CONSTRAINTS,
        (true, true) => ALL_COLUMNS,
    }
    .to_vec();
    if elastic {
        columns.extend([MIN_GPUS, MAX_GPUS]);
    }
    if pipeline.depends_on {
        columns.push(DEPENDS_ON);
    }
    if pipeline.exit_code {
        columns.push(EXIT_CODE);
    }
    columns
}

/// The `min_gpus` and `max_gpus` fields: both empty is rigid; else both GPU counts (checked
/// against the job's shape when the trace is built, naming the job and row).
fn parse_elastic(row: &table::Row<'_>) -> Result<Option<Elastic>, TraceReadError> {
    let (min, max) = (row.str(MIN_GPUS).trim(), row.str(MAX_GPUS).trim());
    if min.is_empty() && max.is_empty() {
        return Ok(None);
    }
    let count = |column: &'static str, text: &str| {
        text.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
            row.expected(column, "a GPU count >= 1, or nothing with the other empty")
        })
    };
    Ok(Some(Elastic {
        min_gpus: count(MIN_GPUS, min)?,
        max_gpus: count(MAX_GPUS, max)?,
    }))
}

/// The `workload` field: empty is untyped; a name must be a known type.
fn parse_workload(
    row: &table::Row<'_>,
    workload_names: &[String],
) -> Result<Option<WorkloadType>, TraceReadError> {
    let text = row.str(WORKLOAD);
    if text.trim().is_empty() {
        return Ok(None);
    }
    crate::throughput::known_workload(text, workload_names)
        .map(Some)
        .ok_or_else(|| {
            row.expected(
                WORKLOAD,
                "a workload type of a throughput preset (e.g. `ResNet-50 (batch size 64)`, \
                 `cifar10`) or one listed in the reader options' workload_names, or nothing",
            )
        })
}

/// Writes `trace` as a normalized v1 CSV (version line, tenant line, header, one row a job in
/// trace order).
pub fn write_normalized(trace: &Trace, writer: impl Write) -> Result<(), TraceWriteError> {
    check_representable(trace)?;
    let mut out = csv::WriterBuilder::new().flexible(true).from_writer(writer);
    out.write_record([format!("{MAGIC} {VERSION}")])?;
    out.write_record(std::iter::once(TENANTS).chain(trace.tenants().iter().map(String::as_str)))?;
    let typed = trace.jobs().iter().any(|j| j.workload.is_some());
    let constrained = trace.jobs().iter().any(|j| !j.constraints.is_none());
    let elastic = trace.jobs().iter().any(|j| j.elastic.is_some());
    let pipeline = Pipeline {
        depends_on: trace.has_dependencies(),
        exit_code: trace.jobs().iter().any(|j| !trace.succeeds(j.id)),
    };
    out.write_record(columns_for(typed, constrained, elastic, pipeline))?;
    for job in trace.jobs() {
        let fields = [
            job.name.clone(),
            format_secs(job.submit),
            format_secs(trace.true_duration(job.id)),
            job.tasks.to_string(),
            job.task.gpus.to_string(),
            job.task.gpu_milli.to_string(),
            job.task.cpu_milli.to_string(),
            job.task.mem_mib.to_string(),
            job.gpu_types.join("|"),
            trace.tenant_name(job.tenant).to_string(),
            job.priority.to_string(),
            job.qos.as_str().to_string(),
            job.preemptible.to_string(),
            job.kind.as_str().to_string(),
            job.estimate.map(format_secs).unwrap_or_default(),
        ];
        let workload = job.workload.as_ref().map_or("", WorkloadType::as_str);
        let constraints = [
            job.constraints.label_text(),
            job.constraints.distinct_nodes.to_string(),
        ];
        let range = job.elastic.map_or([String::new(), String::new()], |e| {
            [e.min_gpus.to_string(), e.max_gpus.to_string()]
        });
        let extra = typed
            .then_some(workload)
            .into_iter()
            .chain(
                constrained
                    .then(|| constraints.iter().map(String::as_str))
                    .into_iter()
                    .flatten(),
            )
            .chain(
                elastic
                    .then(|| range.iter().map(String::as_str))
                    .into_iter()
                    .flatten(),
            );
        let depends_on = trace.dependency_text(job.id).unwrap_or_default();
        let exit_code = if trace.succeeds(job.id) { "0" } else { "1" };
        let extra = extra
            .chain(pipeline.depends_on.then_some(depends_on.as_str()))
            .chain(pipeline.exit_code.then_some(exit_code));
        out.write_record(fields.iter().map(String::as_str).chain(extra))?;
    }
    out.flush()?;
    Ok(())
}

fn check_representable(trace: &Trace) -> Result<(), TraceWriteError> {
    let bad = |what: String| Err(TraceWriteError::Unrepresentable(what));
    let mut seen = std::collections::HashSet::new();
    for name in trace.tenants() {
        if name.is_empty() || !seen.insert(name.as_str()) {
            return bad(format!("tenant name {name:?} is empty or repeated"));
        }
    }
    for job in trace.jobs() {
        for t in &job.gpu_types {
            if t.is_empty() || t.contains('|') || t.trim() != t {
                return bad(format!(
                    "job {}: GPU type {t:?} is empty, contains '|' or has surrounding spaces",
                    job.name
                ));
            }
        }
        if trace.dependency(job.id).is_some_and(Dependency::is_never) {
            return bad(format!(
                "job {}: its dependency can never be satisfied (the jobs it waited for were \
                 cut from the trace), which Slurm's syntax cannot say",
                job.name
            ));
        }
        let text = job.constraints.label_text();
        if Constraints::parse(&text).map(|c| c.any_of) != Ok(job.constraints.any_of.clone()) {
            return bad(format!(
                "job {}: constraints {text:?} do not read back the same",
                job.name
            ));
        }
    }
    Ok(())
}

/// Seconds with up to 3 decimals, trailing zeros dropped: exact milliseconds.
pub fn format_secs(t: SimTime) -> String {
    let (secs, ms) = (t.ms() / 1000, t.ms() % 1000);
    if ms == 0 {
        secs.to_string()
    } else {
        format!("{secs}.{ms:03}").trim_end_matches('0').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HEADER: &str = "job_id,submit_s,duration_s,tasks,gpus,gpu_milli,cpu_milli,mem_mib,\
                          gpu_types,tenant,priority,qos,preemptible,kind,estimate_s";

    fn read_str(text: &str) -> Result<TraceRead, TraceReadError> {
        read(text.as_bytes(), "x.csv", &[])
    }

    fn err(text: &str) -> String {
        read_str(text).unwrap_err().to_string()
    }

    #[test]
    fn reads_gangs_fractions_types_tenants_and_estimates() {
        let text = format!(
            "#lachesis-trace v1\n{HEADER}\n\
             b,10.5,60,2,8,1000,32000,65536,A100|H100,bob,3,best-effort,true,training,120\n\
             a,1,30.25,1,1,250,2000,4096,,alice,0,ls,false,inference,\n"
        );
        let read = read_str(&text).unwrap();
        let t = &read.trace;
        assert_eq!(read.report.rows, 2);
        assert_eq!(t.tenants(), ["bob", "alice"]);
        let a = &t.jobs()[0];
        assert_eq!((a.name.as_str(), a.submit), ("a", SimTime(1000)));
        assert!(a.task.is_fractional() && !a.preemptible && a.estimate.is_none());
        assert_eq!((a.qos, a.kind), (Qos::LatencySensitive, JobKind::Inference));
        assert_eq!(t.true_duration(a.id), SimTime(30_250));
        let b = &t.jobs()[1];
        assert_eq!((b.tasks, b.gpus_total(), b.priority), (2, 16, 3));
        assert_eq!(b.gpu_types, ["A100", "H100"]);
        assert_eq!(b.estimate, Some(SimTime(120_000)));
        assert_eq!(t.tenant_name(b.tenant), "bob");
    }

    #[test]
    fn version_line_is_required_and_checked() {
        let e = err(&format!("{HEADER}\n"));
        assert!(
            e.starts_with("x.csv line 1: expected the version line `#lachesis-trace v1`"),
            "{e}"
        );
        let e = err(&format!("#lachesis-trace v2\n{HEADER}\n"));
        assert_eq!(
            e,
            "x.csv line 1: found trace schema version \"v2\", this build reads only v1 \
             (`#lachesis-trace v1`)"
        );
        assert!(err("").contains("line 1"), "{}", err(""));
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let row = |fields: &str| err(&format!("#lachesis-trace v1\n{HEADER}\n{fields}\n"));
        assert_eq!(
            row("a,1,2,1,abc,1000,0,0,,t,0,guaranteed,false,batch,"),
            "x.csv line 3, field gpus: expected an integer 0..=64, got \"abc\""
        );
        assert_eq!(
            row("a,1,2,1,2,500,0,0,,t,0,guaranteed,false,batch,"),
            "x.csv line 3, field gpu_milli: gpu_milli 500 < 1000 is only allowed with 1 GPU, not 2"
        );
        assert!(row("a,-1,2,1,0,0,0,0,,t,0,guaranteed,false,batch,").contains("field submit_s"));
        assert!(row("a,1,2,0,0,0,0,0,,t,0,guaranteed,false,batch,").contains("field tasks"));
        assert!(row("a,1,2,1,0,0,0,0,,t,0,gold,false,batch,").contains("field qos"));
        assert!(row("a,1,2,1,0,0,0,0,,t,0,be,yes,batch,").contains("field preemptible"));
        assert!(row("a,1,2,1,0,0,0,0,A||B,t,0,be,true,batch,").contains("field gpu_types"));
        assert!(row("a,1,2,1,0,0,0,0,,,0,be,true,batch,").contains("field tenant"));
        assert!(row("a,1,2,1,0,0,0,0,,t,0,be,true,batch,1.2345").contains("field estimate_s"));
        assert_eq!(
            row("a,1,2"),
            "x.csv line 3: expected 15 fields like the header, got 3"
        );
        let e = err("#lachesis-trace v1\n#tenants,a\njob_id,x\n");
        assert!(
            e.starts_with("x.csv line 3: missing column submit_s"),
            "{e}"
        );
        let e = err(&format!(
            "#lachesis-trace v1\n#tenants,a\n{HEADER}\nj,0,1,1,0,0,0,0,,b,0,be,true,batch,\n"
        ));
        assert!(
            e.starts_with("x.csv line 4, field tenant: expected a tenant on the #tenants line"),
            "{e}"
        );
        let e = err(&format!("#lachesis-trace v1\n{HEADER},extra\n"));
        assert!(e.contains("line 2: unknown column \"extra\""), "{e}");
    }

    #[test]
    fn dependency_columns_are_read_written_and_checked() {
        let text = format!(
            "#lachesis-trace v1\n#tenants,t\n{HEADER},depends_on,exit_code\n\
             prep,0,10,1,0,0,1000,0,,t,0,best-effort,true,batch,,,0\n\
             train,0,100,1,1,1000,0,0,,t,0,best-effort,true,training,,afterok:prep,1\n\
             retry,0,100,1,1,1000,0,0,,t,0,best-effort,true,training,,afternotok:train,0\n"
        );
        let t = read_str(&text).unwrap().trace;
        assert_eq!(t.dependency_text(JobId(1)).as_deref(), Some("afterok:prep"));
        assert!(t.succeeds(JobId(0)) && !t.succeeds(JobId(1)));
        let mut written = Vec::new();
        write_normalized(&t, &mut written).unwrap();
        assert_eq!(String::from_utf8(written).unwrap(), text);
        // Without exit_code every job succeeds.
        let plain = format!(
            "#lachesis-trace v1\n{HEADER},depends_on\n\
             a,0,10,1,0,0,0,0,,t,0,be,true,batch,,\n\
             b,0,10,1,0,0,0,0,,t,0,be,true,batch,,afterany:a\n"
        );
        let t = read_str(&plain).unwrap().trace;
        assert!(t.has_dependencies() && t.succeeds(JobId(1)));
        // Errors name the file, the line and the field.
        let e = err(&plain.replace("afterany:a", "afterok:zz"));
        assert_eq!(
            e,
            "x.csv line 4, field depends_on: job b: depends on zz, which is not in the trace"
        );
        let e = err(&plain.replace("afterany:a", "afterok:a+5"));
        assert!(
            e.starts_with("x.csv line 4, field depends_on: dependency `afterok:a+5`"),
            "{e}"
        );
        let e = err(&plain.replace("batch,,\n", "batch,,afterok:b\n"));
        assert!(
            e.starts_with(
                "x.csv line 4, field depends_on: jobs b -> a -> b: their \
                           dependencies form a cycle"
            ),
            "{e}"
        );
        let e = err(&text.replace(",afterok:prep,1", ",afterok:prep,x"));
        assert!(e.starts_with("x.csv line 5, field exit_code"), "{e}");
    }

    #[test]
    fn tiny_excerpt_rewrites_byte_for_byte() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces/tiny.csv");
        let text = std::fs::read_to_string(path).unwrap();
        let read = read_str(&text).unwrap();
        assert_eq!(read.trace.len(), 20);
        let mut written = Vec::new();
        write_normalized(&read.trace, &mut written).unwrap();
        assert_eq!(String::from_utf8(written).unwrap(), text);
    }

    #[test]
    fn constraint_columns_are_optional_read_written_and_checked() {
        let text = format!(
            "#lachesis-trace v1\n#tenants,t\n{HEADER},constraints,distinct_nodes\n\
             a,0,10,2,1,1000,0,0,,t,0,best-effort,true,training,,zone=a&ib|!ib,true\n\
             b,1,10,1,1,1000,0,0,,t,0,best-effort,true,training,,,\n"
        );
        let t = read_str(&text).unwrap().trace;
        let a = &t.jobs()[0].constraints;
        assert_eq!(a.label_text(), "zone=a&ib|!ib");
        assert!(a.distinct_nodes);
        assert!(t.jobs()[1].constraints.is_none());
        let mut out = Vec::new();
        write_normalized(&t, &mut out).unwrap();
        let again = read_str(std::str::from_utf8(&out).unwrap()).unwrap().trace;
        assert_eq!(again.jobs(), t.jobs());
        // A trace without constraints is written without the columns, as before.
        let plain = read_str(&format!(
            "#lachesis-trace v1\n#tenants,t\n{HEADER}\n\
             b,1,10,1,1,1000,0,0,,t,0,best-effort,true,training,\n"
        ))
        .unwrap()
        .trace;
        let mut out = Vec::new();
        write_normalized(&plain, &mut out).unwrap();
        assert!(!String::from_utf8(out).unwrap().contains("constraints"));
        // Bad values name the file, line and field.
        let bad = text.replace("zone=a&ib|!ib", "[ib|nvlink]");
        assert!(
            err(&bad).starts_with("x.csv line 4, field constraints:"),
            "{}",
            err(&bad)
        );
        let bad = text.replace(",true\n", ",yes\n");
        assert!(
            err(&bad).starts_with("x.csv line 4, field distinct_nodes: expected true, false"),
            "{}",
            err(&bad)
        );
    }

    #[test]
    fn workload_column_is_optional_read_written_and_checked() {
        let text = format!(
            "#lachesis-trace v1\n#tenants,t\n{HEADER},workload\n\
             a,0,10,1,1,1000,0,0,,t,0,best-effort,true,training,,ResNet-50 (batch size 64)\n\
             b,1,10,1,2,1000,0,0,,t,0,best-effort,true,training,,\n\
             c,2,10,1,1,1000,0,0,,t,0,best-effort,true,training,,CIFAR10\n"
        );
        let t = read_str(&text).unwrap().trace;
        let types: Vec<Option<&str>> = t
            .jobs()
            .iter()
            .map(|j| j.workload.as_ref().map(WorkloadType::as_str))
            .collect();
        // Names match case-insensitively and are kept in the preset's spelling.
        assert_eq!(
            types,
            [Some("ResNet-50 (batch size 64)"), None, Some("cifar10")]
        );
        let mut written = Vec::new();
        write_normalized(&t, &mut written).unwrap();
        let written = String::from_utf8(written).unwrap();
        assert_eq!(written, text.replace("CIFAR10", "cifar10"));
        assert_eq!(read_str(&written).unwrap().trace, t);

        // Unknown names are refused, naming the line; a custom table's are accepted when given.
        let bad = text.replace("CIFAR10", "llama-7b");
        let e = read_str(&bad).unwrap_err().to_string();
        assert!(
            e.starts_with("x.csv line 6, field workload: expected a workload type"),
            "{e}"
        );
        assert!(e.ends_with("got \"llama-7b\""), "{e}");
        let custom = read(bad.as_bytes(), "x.csv", &["LLaMA-7B".to_string()]).unwrap();
        assert_eq!(
            custom.trace.jobs()[2]
                .workload
                .as_ref()
                .map(WorkloadType::as_str),
            Some("LLaMA-7B")
        );
    }

    #[test]
    fn untyped_traces_are_written_without_the_column() {
        let text = format!(
            "#lachesis-trace v1\n#tenants,t\n{HEADER},workload\n\
             a,0,10,1,1,1000,0,0,,t,0,best-effort,true,training,,\n"
        );
        let t = read_str(&text).unwrap().trace;
        assert!(t.jobs()[0].workload.is_none());
        let mut written = Vec::new();
        write_normalized(&t, &mut written).unwrap();
        let written = String::from_utf8(written).unwrap();
        assert_eq!(
            written,
            text.replace(",workload", "")
                .replace("training,,\n", "training,\n")
        );
    }

    #[test]
    fn elastic_columns_are_optional_read_written_and_checked() {
        let text = format!(
            "#lachesis-trace v1\n#tenants,t\n{HEADER},min_gpus,max_gpus\n\
             a,0,10,2,1,1000,0,0,,t,0,best-effort,true,training,,1,8\n\
             b,1,10,1,2,1000,0,0,,t,0,best-effort,true,training,,,\n"
        );
        let t = read_str(&text).unwrap().trace;
        let range: Vec<_> = t.jobs().iter().map(|j| j.elastic).collect();
        assert_eq!(
            range,
            [
                Some(Elastic {
                    min_gpus: 1,
                    max_gpus: 8
                }),
                None
            ]
        );
        let mut written = Vec::new();
        write_normalized(&t, &mut written).unwrap();
        assert_eq!(String::from_utf8(written).unwrap(), text);
        // A bound that is not a multiple of the task's GPUs, one alone, one not a count.
        let bad = text.replace(",,,\n", ",,3,4\n");
        assert!(
            err(&bad).contains("min_gpus 3 is not a multiple"),
            "{}",
            err(&bad)
        );
        let bad = text.replace(",,,\n", ",,2,\n");
        assert!(
            err(&bad).contains("line 5, field max_gpus"),
            "{}",
            err(&bad)
        );
        let bad = text.replace(",1,8\n", ",one,8\n");
        assert!(
            err(&bad).contains("line 4, field min_gpus"),
            "{}",
            err(&bad)
        );
        // Without elastic jobs the pair is not written.
        let rigid = text.replace(",1,8\n", ",,\n");
        let mut written = Vec::new();
        write_normalized(&read_str(&rigid).unwrap().trace, &mut written).unwrap();
        assert!(!String::from_utf8(written).unwrap().contains("min_gpus"));
    }

    #[test]
    fn seconds_format_exactly() {
        assert_eq!(format_secs(SimTime(0)), "0");
        assert_eq!(format_secs(SimTime(1500)), "1.5");
        assert_eq!(format_secs(SimTime(1005)), "1.005");
        assert_eq!(format_secs(SimTime(u64::MAX)), "18446744073709551.615");
    }

    #[test]
    fn unrepresentable_traces_are_refused() {
        let mut job = crate::job::tests::job("j", 0, TaskRequest::whole(1, 0, 0));
        job.gpu_types = vec!["A|B".into()];
        let t = Trace::new("t", vec![job], vec![SimTime(1)], vec!["d".into()]).unwrap();
        let e = write_normalized(&t, Vec::new()).unwrap_err();
        assert!(e.to_string().contains("contains '|'"), "{e}");
    }

    prop_compose! {
        fn arb_task()(gpus in 0u32..=64, milli in 1u32..=1000, cpu in any::<u64>(), mem in any::<u64>()) -> TaskRequest {
            let gpu_milli = match gpus { 0 => 0, 1 => milli, _ => GPU_MILLI };
            TaskRequest { gpus, gpu_milli, cpu_milli: cpu, mem_mib: mem }
        }
    }

    /// The presets' workload types, and one a custom table defines.
    fn known_workloads() -> Vec<&'static str> {
        crate::throughput::gavel::TEMPLATES
            .iter()
            .map(|t| t.name)
            .chain(crate::throughput::sia::MODELS)
            .chain(["llama-7b"])
            .collect()
    }

    prop_compose! {
        fn arb_job(tenants: usize)(
            name in any::<String>(),
            submit in any::<u64>(),
            tasks in 1u32..=crate::job::MAX_TASKS,
            task in arb_task(),
            gpu_types in prop::collection::vec("[A-Za-z0-9][A-Za-z0-9 ,\"#-]{0,6}[A-Za-z0-9]", 0..3),
            tenant in 0..tenants,
            priority in any::<i32>(),
            qos in prop::sample::select(vec![Qos::Guaranteed, Qos::LatencySensitive, Qos::Burstable, Qos::BestEffort]),
            preemptible in any::<bool>(),
            kind in prop::sample::select(vec![JobKind::Training, JobKind::Inference, JobKind::Batch]),
            estimate in prop::option::of(any::<u64>()),
            workload in prop::option::of(prop::sample::select(known_workloads())),
            elastic in any::<bool>(),
        ) -> JobSpec {
            // Elastic from one task to its trace size, where its tasks take whole GPUs.
            let elastic = (elastic && task.gpus > 0 && task.gpu_milli == GPU_MILLI).then(|| {
                crate::job::Elastic { min_gpus: task.gpus, max_gpus: tasks * task.gpus }
            });
            JobSpec {
                id: JobId(0), name, submit: SimTime(submit), tasks, task, gpu_types,
                tenant: TenantId(tenant as u32), priority, qos, preemptible, kind,
                estimate: estimate.map(SimTime),
                workload: workload.and_then(WorkloadType::new),
                constraints: Default::default(),
                elastic,
            }
        }
    }

    fn arb_trace() -> impl Strategy<Value = Trace> {
        prop::collection::hash_set(".+", 1..4)
            .prop_flat_map(|tenants| {
                let tenants: Vec<String> = tenants.into_iter().collect();
                let n = tenants.len();
                (
                    Just(tenants),
                    prop::collection::vec((arb_job(n), any::<u64>()), 0..12),
                )
            })
            .prop_map(|(tenants, rows)| {
                let (jobs, durations): (Vec<_>, Vec<_>) =
                    rows.into_iter().map(|(j, d)| (j, SimTime(d))).unzip();
                Trace::new("rt.csv", jobs, durations, tenants).unwrap()
            })
    }

    proptest! {
        #[test]
        fn write_then_read_is_exact(trace in arb_trace()) {
            let mut bytes = Vec::new();
            write_normalized(&trace, &mut bytes).unwrap();
            let read = read(bytes.as_slice(), "rt.csv", &["llama-7b".to_string()]).unwrap();
            prop_assert_eq!(&read.trace, &trace);
            prop_assert_eq!(read.report.kept, trace.len() as u64);
        }

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
            let mut input = b"#lachesis-trace v1\n".to_vec();
            input.extend_from_slice(&bytes);
            let _ = read(input.as_slice(), "r.csv", &[]);
            let _ = read(bytes.as_slice(), "r.csv", &[]);
        }

        #[test]
        fn random_rows_never_panic(rows in prop::collection::vec(prop::collection::vec("[-0-9a-z.|]{0,6}", 15), 0..6)) {
            let mut text = format!("#lachesis-trace v1\n{HEADER}\n");
            for row in rows {
                text.push_str(&row.join(","));
                text.push('\n');
            }
            let _ = read(text.as_bytes(), "r.csv", &[]);
        }
    }
}
