//! The job model and a replayable trace: what each job asks for, and (hidden) how long it runs.
//!
//! A policy sees `JobSpec` only. The true duration lives in `Trace` beside the specs and is
//! read by the simulator, by trace statistics, and by an explicitly labelled oracle; never by a
//! `DecisionContext`.

use crate::constraint::Constraints;
use crate::deps::{Dependency, GraphError, Settled};
use crate::units::{GPU_MILLI, JobId, SimTime, TenantId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Most tasks one gang may have (a 65,536-task job already spans any cluster in the traces).
pub const MAX_TASKS: u32 = 65_536;

/// Quality-of-service class, most important first (Kubernetes' classes plus Alibaba's LS/BE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Qos {
    /// Reserved capacity, never preempted by default.
    Guaranteed,
    /// Latency-sensitive service or interactive work (Alibaba `LS`).
    LatencySensitive,
    /// May exceed its request when capacity is spare.
    Burstable,
    /// Scavenger work, the first to be preempted (Alibaba `BE`).
    BestEffort,
}

impl Qos {
    /// Parse the spellings used by traces: `guaranteed`, `ls`/`latency-sensitive`,
    /// `burstable`, `be`/`best-effort` (case-insensitive).
    pub fn parse(text: &str) -> Option<Qos> {
        match text.trim().to_ascii_lowercase().as_str() {
            "guaranteed" => Some(Qos::Guaranteed),
            "ls" | "latency-sensitive" | "latencysensitive" => Some(Qos::LatencySensitive),
            "burstable" => Some(Qos::Burstable),
            "be" | "best-effort" | "besteffort" => Some(Qos::BestEffort),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Qos::Guaranteed => "guaranteed",
            Qos::LatencySensitive => "latency-sensitive",
            Qos::Burstable => "burstable",
            Qos::BestEffort => "best-effort",
        }
    }
}

/// What a job is, which decides how it may be treated (e.g. services are not checkpointed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobKind {
    Training,
    Inference,
    Batch,
}

impl JobKind {
    pub fn parse(text: &str) -> Option<JobKind> {
        match text.trim().to_ascii_lowercase().as_str() {
            "training" | "train" => Some(JobKind::Training),
            "inference" | "serving" | "service" => Some(JobKind::Inference),
            "batch" => Some(JobKind::Batch),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Training => "training",
            JobKind::Inference => "inference",
            JobKind::Batch => "batch",
        }
    }
}

/// The model a job trains (e.g. `ResNet-18 (batch size 16)`, `cifar10`): it names the rows of a
/// throughput table (`crate::throughput`) that give the job's rate on each GPU model. Trimmed
/// and non-empty; which names are known is the throughput module's business.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct WorkloadType(String);

impl WorkloadType {
    /// `name` trimmed; `None` when that is empty.
    pub fn new(name: &str) -> Option<WorkloadType> {
        let name = name.trim();
        (!name.is_empty()).then(|| WorkloadType(name.to_string()))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for WorkloadType {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        WorkloadType::new(&name).ok_or_else(|| "a workload type name is empty".to_string())
    }
}

impl From<WorkloadType> for String {
    fn from(workload: WorkloadType) -> String {
        workload.0
    }
}

impl fmt::Display for WorkloadType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What one task of a job needs. All tasks of a job are alike (a gang).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TaskRequest {
    /// GPUs the task needs on one node (0 for a CPU-only task).
    pub gpus: u32,
    /// Share of each of those GPUs, in milli-GPU (1..=1000). Below 1000 only with `gpus == 1`:
    /// such a fractional task shares one GPU with others. 0 when `gpus == 0`.
    pub gpu_milli: u32,
    /// CPU, milli-cores.
    pub cpu_milli: u64,
    /// Memory, MiB.
    pub mem_mib: u64,
}

impl TaskRequest {
    /// Whole-GPU request of `gpus` GPUs with the given CPU and memory.
    pub const fn whole(gpus: u32, cpu_milli: u64, mem_mib: u64) -> Self {
        TaskRequest {
            gpus,
            gpu_milli: if gpus == 0 { 0 } else { GPU_MILLI },
            cpu_milli,
            mem_mib,
        }
    }
    /// Total GPU capacity asked for, in milli-GPU.
    pub const fn gpu_milli_total(&self) -> u64 {
        self.gpus as u64 * self.gpu_milli as u64
    }
    /// True when the task takes a share of one GPU rather than whole GPUs.
    pub const fn is_fractional(&self) -> bool {
        self.gpus == 1 && self.gpu_milli < GPU_MILLI
    }
    /// Checks the shape rules above; the message names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        match (self.gpus, self.gpu_milli) {
            (0, 0) => Ok(()),
            (0, m) => Err(format!("gpu_milli is {m} but the task asks for 0 GPUs")),
            (_, 0) => Err("gpu_milli is 0 but the task asks for GPUs".into()),
            (_, m) if m > GPU_MILLI => Err(format!("gpu_milli {m} is above 1000")),
            (g, m) if g > 1 && m < GPU_MILLI => Err(format!(
                "gpu_milli {m} < 1000 is only allowed with 1 GPU, not {g}"
            )),
            _ => Ok(()),
        }
    }
}

/// Everything a scheduler may know about a job when it decides. No true duration here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Dense index in the trace (0..n, in submit order).
    pub id: JobId,
    /// The job's id in the source trace.
    pub name: String,
    /// Submission time.
    pub submit: SimTime,
    /// Number of tasks, all placed at once or not at all (gang); 1 for a single-task job.
    pub tasks: u32,
    /// What each task needs.
    pub task: TaskRequest,
    /// GPU models the job may run on (names as the trace spells them); empty means any.
    pub gpu_types: Vec<String>,
    /// The tenant (user, group, queue or virtual cluster) the job belongs to.
    pub tenant: TenantId,
    /// Larger is more important. 0 when the trace has none.
    pub priority: i32,
    pub qos: Qos,
    /// Whether a policy may preempt the job.
    pub preemptible: bool,
    pub kind: JobKind,
    /// The user's runtime estimate (requested wall time), where the trace has one.
    pub estimate: Option<SimTime>,
    /// The model the job trains, where the trace names it or a rule assigned it
    /// (`crate::throughput::assign`). `None`: the job runs at its GPU model's catalog speed,
    /// as every job did before workload types existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadType>,
    /// Which nodes the job's tasks may use (node labels) and whether they must be on distinct
    /// nodes. The default constrains nothing: the job is placed as before constraints existed.
    #[serde(default, skip_serializing_if = "Constraints::is_none")]
    pub constraints: Constraints,
    /// The GPU counts the job may run at, when it is elastic: a policy may start it at, or
    /// resize it to, any count in the range (by whole tasks, see [`Elastic`]). `None`: a rigid
    /// gang, run at exactly `tasks x task.gpus` GPUs, as every job was before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic: Option<Elastic>,
}

/// The sizes an elastic job may run at: `min_gpus..=max_gpus` GPUs in all.
///
/// An elastic job grows and shrinks by whole tasks, each task keeping its request (GPUs, CPU,
/// memory): at `k` tasks it holds `k x task.gpus` GPUs. So both bounds are multiples of the
/// task's GPUs, the job's trace size lies between them, and its tasks take whole GPUs
/// (checked by [`Trace::new`]). Its trace duration is work measured at its trace size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Elastic {
    pub min_gpus: u32,
    pub max_gpus: u32,
}

impl Elastic {
    /// Whether the job may run on `gpus` GPUs in all.
    pub fn admits(&self, gpus: u64) -> bool {
        (u64::from(self.min_gpus)..=u64::from(self.max_gpus)).contains(&gpus)
    }

    /// Checks the rules above for a job of `tasks` tasks of `task`; the message names the
    /// offending field.
    pub fn validate(&self, tasks: u32, task: &TaskRequest) -> Result<(), String> {
        if task.gpus == 0 || task.gpu_milli != GPU_MILLI {
            return Err("an elastic job (min_gpus/max_gpus) needs whole-GPU tasks".into());
        }
        if self.min_gpus == 0 || self.min_gpus > self.max_gpus {
            return Err(format!(
                "min_gpus {} and max_gpus {} must satisfy 1 <= min_gpus <= max_gpus",
                self.min_gpus, self.max_gpus
            ));
        }
        for (field, v) in [("min_gpus", self.min_gpus), ("max_gpus", self.max_gpus)] {
            if v % task.gpus != 0 {
                return Err(format!(
                    "{field} {v} is not a multiple of the task's {} GPUs (an elastic job \
                     grows by whole tasks)",
                    task.gpus
                ));
            }
        }
        let size = u64::from(tasks) * u64::from(task.gpus);
        if !self.admits(size) {
            return Err(format!(
                "the job's {size} GPUs are outside min_gpus..=max_gpus {}..={}",
                self.min_gpus, self.max_gpus
            ));
        }
        if u64::from(self.max_gpus / task.gpus) > u64::from(MAX_TASKS) {
            return Err(format!(
                "max_gpus {} needs more than {MAX_TASKS} tasks",
                self.max_gpus
            ));
        }
        Ok(())
    }
}

impl JobSpec {
    /// Total GPU capacity the whole gang asks for, in milli-GPU.
    pub fn gpu_milli_total(&self) -> u64 {
        self.tasks as u64 * self.task.gpu_milli_total()
    }
    /// GPUs touched by the gang (a fractional task counts as one).
    pub fn gpus_total(&self) -> u64 {
        self.tasks as u64 * self.task.gpus as u64
    }
}

/// Why a set of jobs is not a valid trace.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TraceError {
    #[error("job {name} (row {row}): {message}")]
    InvalidJob {
        row: usize,
        name: String,
        message: String,
    },
    #[error("job {name}: tenant index {tenant} is outside the tenant table ({tenants} names)")]
    UnknownTenant {
        name: String,
        tenant: u32,
        tenants: usize,
    },
    #[error("{jobs} jobs but {durations} durations")]
    LengthMismatch { jobs: usize, durations: usize },
    #[error("{jobs} jobs but {deps} dependency entries")]
    DepsMismatch { jobs: usize, deps: usize },
    /// A dependency names a job the trace lacks, or one whose name several jobs share.
    #[error("job {name}: depends on {parent}, {problem}")]
    UnknownParent {
        name: String,
        parent: String,
        problem: String,
    },
    #[error(transparent)]
    Cycle(#[from] GraphError),
}

/// What a job of a pipeline adds to its spec, as a trace reader gives it: the jobs it waits
/// for, named by their [`JobSpec::name`], and whether it ends successfully (`fails`: with a
/// non-zero exit code, which `afterok` and `afternotok` tell apart). Whether it fails is
/// hidden from policies, like its duration. The default waits for nobody and succeeds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobDeps {
    pub depends_on: Option<Dependency<String>>,
    pub fails: bool,
}

/// A replayable trace: job specs in submit order, with their true durations kept apart.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// Where the trace came from (file name or generator), for reports.
    pub name: String,
    jobs: Vec<JobSpec>,
    durations: Vec<SimTime>,
    tenants: Vec<String>,
    /// Each job's dependency over this trace's job ids (`crate::deps`); empty when no job has
    /// one, so that traces without pipelines cost nothing.
    deps: Vec<Option<Dependency<JobId>>>,
    /// Which jobs end in failure (non-zero exit); empty when none does. Hidden like
    /// `durations`.
    fails: Vec<bool>,
}

impl Trace {
    /// Builds a trace from specs and their true durations (same order). Jobs are sorted by
    /// submit time (stable, so ties keep input order) and renumbered 0..n; every job is checked.
    pub fn new(
        name: impl Into<String>,
        jobs: Vec<JobSpec>,
        durations: Vec<SimTime>,
        tenants: Vec<String>,
    ) -> Result<Trace, TraceError> {
        Trace::with_deps(name, jobs, durations, tenants, Vec::new())
    }

    /// Like [`Trace::new`], with each job's dependency and outcome (`deps`, same order as
    /// `jobs`; empty: no job depends on another and every job succeeds). A dependency names
    /// other jobs by [`JobSpec::name`]: a name no job has, or several jobs share, is refused
    /// naming the job, as are dependencies that form a cycle.
    pub fn with_deps(
        name: impl Into<String>,
        jobs: Vec<JobSpec>,
        durations: Vec<SimTime>,
        tenants: Vec<String>,
        deps: Vec<JobDeps>,
    ) -> Result<Trace, TraceError> {
        if jobs.len() != durations.len() {
            return Err(TraceError::LengthMismatch {
                jobs: jobs.len(),
                durations: durations.len(),
            });
        }
        if !deps.is_empty() && deps.len() != jobs.len() {
            return Err(TraceError::DepsMismatch {
                jobs: jobs.len(),
                deps: deps.len(),
            });
        }
        for (row, job) in jobs.iter().enumerate() {
            let invalid = |message: String| TraceError::InvalidJob {
                row: row + 1,
                name: job.name.clone(),
                message,
            };
            if job.tasks == 0 || job.tasks > MAX_TASKS {
                return Err(invalid(format!(
                    "tasks must be 1..={MAX_TASKS}, got {}",
                    job.tasks
                )));
            }
            job.task.validate().map_err(invalid)?;
            if let Some(e) = &job.elastic {
                e.validate(job.tasks, &job.task).map_err(invalid)?;
            }
            if job.tenant.index() >= tenants.len() {
                return Err(TraceError::UnknownTenant {
                    name: job.name.clone(),
                    tenant: job.tenant.0,
                    tenants: tenants.len(),
                });
            }
        }
        // Traces usually come sorted: then no reordering (and no copy) is needed.
        let (mut jobs, durations, deps) = if jobs.is_sorted_by_key(|j| j.submit) {
            (jobs, durations, deps)
        } else {
            let mut order: Vec<usize> = (0..jobs.len()).collect();
            order.sort_by_key(|&i| jobs[i].submit);
            let mut slots: Vec<Option<(JobSpec, SimTime)>> =
                jobs.into_iter().zip(durations).map(Some).collect();
            let mut dep_slots: Vec<Option<JobDeps>> = deps.into_iter().map(Some).collect();
            let (mut jobs, mut durations) = (Vec::new(), Vec::new());
            let mut deps = Vec::with_capacity(dep_slots.len());
            for i in order {
                let (j, d) = slots[i].take().expect("a permutation takes each job once");
                jobs.push(j);
                durations.push(d);
                if let Some(slot) = dep_slots.get_mut(i) {
                    deps.push(slot.take().expect("a permutation takes each job once"));
                }
            }
            (jobs, durations, deps)
        };
        for (i, job) in jobs.iter_mut().enumerate() {
            job.id = JobId(u32::try_from(i).expect("a trace holds fewer than 2^32 jobs"));
        }
        let fails = if deps.iter().any(|d| d.fails) {
            deps.iter().map(|d| d.fails).collect()
        } else {
            Vec::new()
        };
        let deps = resolve_deps(&jobs, deps)?;
        Ok(Trace {
            name: name.into(),
            jobs,
            durations,
            tenants,
            deps,
            fails,
        })
    }

    pub fn jobs(&self) -> &[JobSpec] {
        &self.jobs
    }
    pub fn len(&self) -> usize {
        self.jobs.len()
    }
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
    pub fn job(&self, id: JobId) -> &JobSpec {
        &self.jobs[id.index()]
    }
    /// The job's true run time at speed 1.0. For the simulator, statistics and labelled
    /// oracles only: policies never receive it.
    pub fn true_duration(&self, id: JobId) -> SimTime {
        self.durations[id.index()]
    }

    /// Every job's true run time at speed 1, by job id: for the simulator, statistics and
    /// the explicitly labelled oracle policies (`PolicyOptions::oracle_durations`) only.
    pub fn true_durations(&self) -> &[SimTime] {
        &self.durations
    }
    /// The jobs `id` waits for before it may be pending (`crate::deps`), over this trace's
    /// ids. Policies may know it: a user submitted it.
    pub fn dependency(&self, id: JobId) -> Option<&Dependency<JobId>> {
        self.deps.get(id.index())?.as_ref()
    }

    /// `id`'s dependency in Slurm's syntax over job names.
    pub fn dependency_text(&self, id: JobId) -> Option<String> {
        let d = self.dependency(id)?;
        Some(d.map(|p| self.jobs[p.index()].name.as_str()).to_string())
    }

    /// Whether some job depends on others (a trace of pipelines).
    pub fn has_dependencies(&self) -> bool {
        self.deps.iter().any(Option::is_some)
    }

    /// Whether the job ends successfully (exit code 0), which `afterok` and `afternotok`
    /// read. For the simulator and metrics only, like the true duration.
    pub fn succeeds(&self, id: JobId) -> bool {
        !self.fails.get(id.index()).copied().unwrap_or(false)
    }

    /// Each job's dependency by names and outcome, as [`Trace::with_deps`] takes them,
    /// keeping only the jobs `keep` marks (by id): a job left out that a kept one waits for
    /// is settled as having ended before the kept jobs, with its outcome
    /// ([`Dependency::settle`]), as a replay that starts mid-history would know it. Empty
    /// when the trace has no dependencies.
    fn deps_kept(&self, keep: &[bool]) -> Vec<JobDeps> {
        if self.deps.is_empty() && self.fails.is_empty() {
            return Vec::new();
        }
        let name = |id: &JobId| self.jobs[id.index()].name.clone();
        self.jobs
            .iter()
            .filter(|j| keep[j.id.index()])
            .map(|j| {
                let depends_on = self.dependency(j.id).map(|d| {
                    let settled = d.settle(|p| (!keep[p.index()]).then(|| self.succeeds(*p)));
                    match settled {
                        Settled::Satisfied => None,
                        Settled::Never => Some(Dependency::never()),
                        Settled::Waiting(left) => Some(left),
                    }
                });
                JobDeps {
                    depends_on: depends_on.flatten().map(|d| d.map(name)),
                    fails: !self.succeeds(j.id),
                }
            })
            .collect()
    }

    /// The jobs `keep` marks, renumbered, tenants kept, dependencies settled as
    /// [`Trace::deps_kept`] says.
    fn subset(&self, keep: Vec<bool>) -> Trace {
        let deps = self.deps_kept(&keep);
        let (jobs, durations): (Vec<_>, Vec<_>) = self
            .jobs
            .iter()
            .zip(&self.durations)
            .filter(|(j, _)| keep[j.id.index()])
            .map(|(j, d)| (j.clone(), *d))
            .unzip();
        Trace::with_deps(
            self.name.clone(),
            jobs,
            durations,
            self.tenants.clone(),
            deps,
        )
        .expect("a subset of a valid trace is valid")
    }

    /// Tenant names, indexed by `TenantId`.
    pub fn tenants(&self) -> &[String] {
        &self.tenants
    }
    pub fn tenant_name(&self, id: TenantId) -> &str {
        &self.tenants[id.index()]
    }
    /// The jobs submitted in `[from, to)` (a trace window), renumbered, tenants kept. A job
    /// of the window that waits for one submitted before it waits no more: that job ended
    /// before the window, with its outcome ([`Trace::deps_kept`]).
    pub fn window(&self, from: SimTime, to: SimTime) -> Trace {
        self.subset(
            self.jobs
                .iter()
                .map(|j| j.submit >= from && j.submit < to)
                .collect(),
        )
    }
    /// The same jobs with submit times remapped by `f` (kept monotone by the caller), e.g. to
    /// compress arrivals to a target load.
    pub fn map_submit(&self, mut f: impl FnMut(SimTime) -> SimTime) -> Trace {
        let jobs = self
            .jobs
            .iter()
            .map(|j| JobSpec {
                submit: f(j.submit),
                ..j.clone()
            })
            .collect();
        self.rebuilt(jobs, self.durations.clone())
            .expect("remapping submit times keeps a trace valid")
    }
    /// The same jobs (same order and names) with specs and true durations changed, e.g.
    /// workload types assigned or run times respread: dependencies and outcomes kept.
    pub fn rebuilt(
        &self,
        jobs: Vec<JobSpec>,
        durations: Vec<SimTime>,
    ) -> Result<Trace, TraceError> {
        if jobs.len() != self.jobs.len() {
            return Err(TraceError::DepsMismatch {
                jobs: jobs.len(),
                deps: self.jobs.len(),
            });
        }
        Trace::with_deps(
            self.name.clone(),
            jobs,
            durations,
            self.tenants.clone(),
            self.deps_kept(&vec![true; self.jobs.len()]),
        )
    }

    /// First and last submit time (`None` for an empty trace).
    pub fn submit_range(&self) -> Option<(SimTime, SimTime)> {
        Some((self.jobs.first()?.submit, self.jobs.last()?.submit))
    }

    /// Offered load on `cluster`: the work the trace asks for divided by what the cluster can
    /// do over the arrival span. GPU work (milli-GPU x true duration at speed 1) over GPU
    /// capacity when the trace asks for GPUs and the cluster has them, CPU work over CPU
    /// capacity otherwise. 0 for an empty trace or a zero span.
    pub fn offered_load(&self, cluster: &crate::cluster::ClusterSpec) -> f64 {
        let Some((first, last)) = self.submit_range() else {
            return 0.0;
        };
        let span_ms = last.saturating_sub(first).ms() as f64;
        let gpu_work: f64 = self
            .jobs
            .iter()
            .zip(&self.durations)
            .map(|(j, d)| j.gpu_milli_total() as f64 * d.ms() as f64)
            .sum();
        let (work, capacity) = if gpu_work > 0.0 && cluster.total_gpu_milli() > 0 {
            (gpu_work, cluster.total_gpu_milli() as f64)
        } else {
            let cpu_work: f64 = self
                .jobs
                .iter()
                .zip(&self.durations)
                .map(|(j, d)| j.tasks as f64 * j.task.cpu_milli as f64 * d.ms() as f64)
                .sum();
            (cpu_work, cluster.total_cpu_milli() as f64)
        };
        if span_ms <= 0.0 || capacity <= 0.0 {
            0.0
        } else {
            work / (capacity * span_ms)
        }
    }

    /// Keeps only the jobs for which `keep` is true (renumbered); dependencies on the jobs
    /// left out are settled as in [`Trace::window`].
    pub fn filter(&self, mut keep: impl FnMut(&JobSpec) -> bool) -> Trace {
        self.subset(self.jobs.iter().map(&mut keep).collect())
    }
}

/// Resolves each job's dependency by names (`deps`, in `jobs`' order) to job ids, refusing a
/// name no job or several jobs have, and dependencies that form a cycle. Empty when no job
/// has one.
fn resolve_deps(
    jobs: &[JobSpec],
    deps: Vec<JobDeps>,
) -> Result<Vec<Option<Dependency<JobId>>>, TraceError> {
    if deps.iter().all(|d| d.depends_on.is_none()) {
        return Ok(Vec::new());
    }
    let mut ids: std::collections::HashMap<&str, Vec<JobId>> = Default::default();
    for j in jobs {
        ids.entry(j.name.as_str()).or_default().push(j.id);
    }
    let mut resolved = Vec::with_capacity(jobs.len());
    for (job, d) in jobs.iter().zip(deps) {
        let Some(d) = d.depends_on else {
            resolved.push(None);
            continue;
        };
        let unknown = |parent: &String, problem: &str| TraceError::UnknownParent {
            name: job.name.clone(),
            parent: parent.clone(),
            problem: problem.into(),
        };
        resolved.push(Some(d.try_map(
            |p| match ids.get(p.as_str()).map(Vec::as_slice) {
                Some([one]) => Ok(*one),
                Some(_) => Err(unknown(p, "a name several jobs share")),
                None => Err(unknown(p, "which is not in the trace")),
            },
        )?));
    }
    let by_index: Vec<Option<Dependency<usize>>> = resolved
        .iter()
        .map(|d| d.as_ref().map(|d| d.map(|p| p.index())))
        .collect();
    crate::deps::topological_order(&by_index, |i| jobs[i].name.clone())?;
    Ok(resolved)
}

impl fmt::Display for JobSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} x ", self.name, self.tasks)?;
        if self.task.is_fractional() {
            write!(f, "{}m GPU", self.task.gpu_milli)?;
        } else {
            write!(f, "{} GPU", self.task.gpus)?;
        }
        write!(
            f,
            ", {}m CPU, {} MiB)",
            self.task.cpu_milli, self.task.mem_mib
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A plain single-task job for tests.
    pub fn job(name: &str, submit_s: u64, task: TaskRequest) -> JobSpec {
        JobSpec {
            id: JobId(0),
            name: name.into(),
            submit: SimTime::from_secs(submit_s),
            tasks: 1,
            task,
            gpu_types: Vec::new(),
            tenant: TenantId(0),
            priority: 0,
            qos: Qos::LatencySensitive,
            preemptible: true,
            kind: JobKind::Training,
            estimate: None,
            workload: None,
            constraints: Default::default(),
            elastic: None,
        }
    }

    /// For two 4-GPU K80 nodes: an untyped 2-GPU job at 0 (3600 s), then at 1 s a
    /// ResNet-50 job of four 1-GPU tasks (600 s), which Gavel's table rates on 4 K80s on one
    /// node only: placed task by task beside the first, it would spread over both nodes.
    pub fn gang_beside_a_blocker() -> Trace {
        let mut blocker = job("blocker", 0, TaskRequest::whole(2, 0, 0));
        blocker.id = JobId(0);
        let mut gang = job("gang", 1, TaskRequest::whole(1, 0, 0));
        gang.id = JobId(1);
        gang.tasks = 4;
        gang.workload = WorkloadType::new("ResNet-50 (batch size 64)");
        Trace::new(
            "gang",
            vec![blocker, gang],
            vec![SimTime::from_secs(3600), SimTime::from_secs(600)],
            vec!["t".into()],
        )
        .expect("a valid trace")
    }

    #[test]
    fn task_shapes_are_checked() {
        assert!(TaskRequest::whole(0, 1000, 10).validate().is_ok());
        assert!(TaskRequest::whole(8, 0, 0).validate().is_ok());
        let frac = TaskRequest {
            gpus: 1,
            gpu_milli: 250,
            cpu_milli: 0,
            mem_mib: 0,
        };
        assert!(frac.validate().is_ok() && frac.is_fractional());
        let bad = TaskRequest {
            gpus: 2,
            gpu_milli: 500,
            cpu_milli: 0,
            mem_mib: 0,
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .contains("only allowed with 1 GPU")
        );
        let over = TaskRequest {
            gpus: 1,
            gpu_milli: 1500,
            cpu_milli: 0,
            mem_mib: 0,
        };
        assert!(over.validate().is_err());
    }

    #[test]
    fn trace_sorts_stably_and_renumbers() {
        let t = Trace::new(
            "t",
            vec![
                job("b", 5, TaskRequest::whole(1, 0, 0)),
                job("a", 1, TaskRequest::whole(1, 0, 0)),
                job("c", 5, TaskRequest::whole(1, 0, 0)),
            ],
            vec![SimTime(10), SimTime(20), SimTime(30)],
            vec!["default".into()],
        )
        .unwrap();
        let names: Vec<_> = t.jobs().iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(t.true_duration(JobId(0)), SimTime(20));
        assert_eq!(t.job(JobId(2)).id, JobId(2));
        assert_eq!(
            t.window(SimTime::from_secs(2), SimTime::from_secs(9)).len(),
            2
        );
    }

    #[test]
    fn invalid_jobs_name_the_row() {
        let mut j = job("x", 0, TaskRequest::whole(1, 0, 0));
        j.tasks = 0;
        let err = Trace::new("t", vec![j], vec![SimTime(1)], vec!["d".into()]).unwrap_err();
        assert!(err.to_string().contains("row 1"), "{err}");
    }
}
