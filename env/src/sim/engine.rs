//! The event loop. See the module docs of `sim` for the semantics.

use super::config::{Resolved, SimConfig};
use super::hetero::{HeteroRuns, TypedJob, hetero_summary};
use super::rates::{Rates, unrated_jobs};
use crate::cluster::{Allocation, ClusterSpec, ClusterState, FitStrategy, Infeasible};
use crate::constraint::Constraints;
use crate::job::{JobSpec, Trace};
use crate::metrics::{self, FragTracker, JobRecord, StageTimes, Summary, TaskMix, TimelineRow};
use crate::policy::{
    Decision, DecisionContext, JobRuntime, JobState, Policy, Reservations, RestartCost,
    StarvationGuard, ThroughputView,
};
use crate::quota::{Admission, Blocked, load_admission};
use crate::throughput::{RateError, load_table};
use crate::units::{GPU_MILLI, JobId, NodeId, SimTime};
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Instant;

mod fork;
mod future;
mod pipes;
mod quota;

/// Why a run could not start.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error("invalid simulation config: {0}")]
    Config(String),
    #[error(
        "{count} job(s) can never fit cluster {cluster}, e.g. {examples}; \
         pass --skip-unplaceable (skip_unplaceable = true) to run without them"
    )]
    Unplaceable {
        count: usize,
        cluster: String,
        examples: String,
    },
    #[error("the trace has no jobs to replay")]
    EmptyTrace,
    #[error("throughput table {spec}: {message}")]
    Throughputs { spec: String, message: String },
    /// The quotas (`SimConfig::quotas`) cannot be used: the message names the file, line and
    /// field, or the tenant without a queue.
    #[error("quotas: {0}")]
    Quotas(String),
    /// A typed job has no rate where it may run: its workload, its GPU count or a GPU model of
    /// the cluster that its `gpu_types` allow is missing from the table.
    #[error("job {job}: {source}{}", rate_hint(.source))]
    Rate { job: String, source: RateError },
    #[error(
        "job {job} ({workload}, {gpus} GPUs) runs at rate 0 on every GPU model of the cluster \
         it may use, under throughput table {table}"
    )]
    NowhereToRun {
        job: String,
        table: String,
        workload: String,
        gpus: u32,
    },
}

/// What to do about a missing rate, where there is a choice.
fn rate_hint(source: &RateError) -> &'static str {
    match source {
        RateError::GpuModelAbsent { .. } => {
            "; give the job gpu_types that exclude that GPU model, or use a table that covers it"
        }
        _ => "",
    }
}

/// Where a run is, for progress bars.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    pub now: SimTime,
    pub finished: u64,
    pub jobs: u64,
    pub events: u64,
}

/// Everything a run produced.
#[derive(Debug, Clone)]
pub struct SimResult {
    pub summary: Summary,
    pub jobs: Vec<JobRecord>,
    pub timeline: Vec<TimelineRow>,
    /// Runs with quotas only: the jobs left pending at the end that their queue cannot admit
    /// (on any GPU model they may use), by name, with the quota that blocks each.
    pub quota_blocked: Vec<(String, Blocked)>,
    /// Jobs whose dependency can never be satisfied (Slurm's `DependencyNeverSatisfied`), by
    /// name, with the dependency in Slurm's syntax; they never ran.
    pub never_satisfied: Vec<(String, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Completion {
        job: JobId,
        epoch: u32,
    },
    Tick,
    /// A held job re-reads its dependency (`pipes.rs`): an `after:ID+MIN` delay ran out, or
    /// a job it waits for started during a decision.
    Wake {
        job: JobId,
    },
}

/// Per-job bookkeeping the policy never sees.
#[derive(Debug, Clone, Default)]
struct Hidden {
    /// Work left, in ms at speed 1: on the catalog's speed-1.0 GPU for an untyped job, on its
    /// trace shape on the table's reference GPU for a typed one.
    remaining_ms: f64,
    /// Work done per wall ms in the current run, now.
    rate: f64,
    /// The current run's rate from its productive start (after the restart overhead) until
    /// its first entry in `changes`.
    first_rate: f64,
    /// The current run's rate changes (a partner joined or left its GPU): from when, the new
    /// rate; in time order, all after the productive start. Empty unless the job shares.
    changes: Vec<(SimTime, f64)>,
    /// Milli-GPU the current run's placement asks for (the trace's, except for an elastic
    /// job run at another size).
    gpu_milli: u64,
    /// Restart overhead of the current run, ms.
    overhead_ms: u64,
    epoch: u32,
    finish: Option<SimTime>,
    nodes: Vec<NodeId>,
    /// Not hidden, kept here with the per-job books that forks carry: how much longer than
    /// the starvation bound the job may wait since it last began to wait
    /// (`StarvationGuard::allowance`, set as it began).
    wait_allowance: SimTime,
    /// Arrived, but its dependency is not yet satisfied (`pipes.rs`): not pending.
    held: bool,
    /// When its dependency was found never satisfiable.
    never: Option<SimTime>,
}

impl Hidden {
    /// Work done by the current run from its productive start `start` until `t`, following
    /// its rate changes (`rate x ms` with one rate, exactly as before sharing existed).
    fn work_until(&self, start: SimTime, t: SimTime) -> f64 {
        let mut work = 0.0;
        let (mut from, mut rate) = (start, self.first_rate);
        for &(at, next) in &self.changes {
            if at >= t {
                break;
            }
            let at = at.max(from);
            work += at.saturating_sub(from).ms() as f64 * rate;
            (from, rate) = (at, next);
        }
        work + t.saturating_sub(from).ms() as f64 * rate
    }
}

/// Time integrals over the measured interval (read by the gym environment's rewards).
#[derive(Debug, Clone, Default)]
pub(crate) struct Integrals {
    last: SimTime,
    /// Allocated milli-GPU x ms.
    pub(crate) alloc_milli_ms: f64,
    cpu_milli_ms: f64,
    /// Fragmented milli-GPU (the trace's task mix) x ms.
    pub(crate) frag_milli_ms: f64,
    /// Pending jobs x ms.
    pub(crate) queue_ms: f64,
    /// Jobs in the system (submitted, not finished: pending or running) x ms.
    pub(crate) system_ms: f64,
    /// GPU power, W x ms.
    pub(crate) energy_wms: f64,
    measured_ms: f64,
}

/// One run in progress: step it with `advance` / `apply`, or drive it with `run`.
pub struct Simulator<'t> {
    trace: &'t Trace,
    cfg: SimConfig,
    r: Resolved,
    cluster: RefCell<ClusterState>,
    runtime: Vec<JobRuntime>,
    hidden: Vec<Hidden>,
    pending: BTreeSet<JobId>,
    /// The pending jobs by when they began to wait plus their allowance (`waiting_key`),
    /// earliest first: the starvation guard reads only those that may have waited past the
    /// bound.
    waiting: BTreeSet<(SimTime, JobId)>,
    /// Milli-GPUs the pending jobs ask for (the starvation bound's backlog).
    pending_gpu_milli: u64,
    /// Jobs finished since the previous decision.
    recently_finished: Vec<JobId>,
    heap: BinaryHeap<Reverse<(SimTime, u64, Event)>>,
    seq: u64,
    next_arrival: usize,
    now: SimTime,
    started: bool,
    measure_start: SimTime,
    /// Submit time of the first job replayed.
    first_submit: SimTime,
    frag: FragTracker,
    acc: Integrals,
    timeline: Vec<TimelineRow>,
    last_row: Option<SimTime>,
    max_gpus_per_node: u64,
    max_nodes_per_rack: u64,
    /// The cluster's milli-GPUs (the starvation bound's backlog is priced against them at
    /// every arrival: a sum over the nodes once, not then).
    capacity_gpu_milli: u64,
    /// The throughput table resolved for this trace and cluster (`SimConfig::throughputs`);
    /// `None`: every job runs at catalog speed.
    rates: Option<Arc<Rates>>,
    /// The same table as policies see it (`DecisionContext::throughputs`), and the typed
    /// jobs' runs for the heterogeneity metrics (`hetero.rs`).
    view: Option<Arc<ThroughputView>>,
    hetero: HeteroRuns,
    skipped: u64,
    running: u64,
    finished: u64,
    events: u64,
    decisions: u64,
    rejected: u64,
    policy_errors: u64,
    preemptions: u64,
    /// Jobs started on a GPU another job used (`Decision::shares`) and elastic jobs resized.
    shares: u64,
    resizes: u64,
    waste_gpu_milli_ms: f64,
    /// The starvation bound applied to every decision (`policy::starvation`), and what it
    /// refused of policies' decisions and started itself.
    guard: StarvationGuard,
    bound_vetoes: u64,
    bound_starts: u64,
    /// Quota admission below every policy (`SimConfig::quotas`): the tree and what each
    /// running job holds; `None` without quotas. Parts of decisions it refused.
    admission: Option<Admission>,
    quota_vetoes: u64,
    /// With quotas: what they did (`QuotaMetrics`), reservations made by preemption.
    quota_stats: Option<quota::QuotaStats>,
    /// A fork's end (`fork.rs`): nothing at a later time happens, and the time integrals run
    /// exactly to it.
    stop: Option<SimTime>,
    stopped: bool,
    /// Whether [`Self::advance`] also stops while jobs run and none is pending: set by
    /// [`Self::ask_without_queue`] for a policy that resizes elastic jobs.
    ask_without_queue: bool,
    /// The trace's pipelines (`pipes.rs`): empty without dependencies.
    graph: pipes::Graph,
    /// Jobs found never satisfiable, in the order found.
    never_satisfied: Vec<JobId>,
}

impl std::fmt::Debug for Simulator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulator")
            .field("now", &self.now)
            .field("events", &self.events)
            .finish()
    }
}

impl<'t> Simulator<'t> {
    /// Prepares a run: checks the config, that every job can fit the (empty) cluster and, with
    /// a throughput table, that every typed job has a rate where it may run. Under
    /// `skip_unplaceable` the jobs that fail either of the last two checks for good (a table
    /// that rates a typed job's size nowhere it may run: `rates::unrated_jobs`) are skipped and
    /// counted instead.
    pub fn new(
        trace: &'t Trace,
        spec: Arc<ClusterSpec>,
        cfg: &SimConfig,
    ) -> Result<Self, SimError> {
        let r = cfg.resolve().map_err(SimError::Config)?;
        if trace.is_empty() {
            return Err(SimError::EmptyTrace);
        }
        let mut runtime = vec![JobRuntime::default(); trace.len()];
        let unplaceable = unplaceable_jobs(trace, &spec);
        if !unplaceable.is_empty() && !cfg.skip_unplaceable {
            let examples: Vec<String> = unplaceable
                .iter()
                .take(3)
                .map(|(id, why)| format!("{} ({why})", trace.job(*id)))
                .collect();
            return Err(SimError::Unplaceable {
                count: unplaceable.len(),
                cluster: spec.name.clone(),
                examples: examples.join("; "),
            });
        }
        let mut skip: BTreeSet<JobId> = unplaceable.iter().map(|(id, _)| *id).collect();
        let mut view = None;
        let rates = match &cfg.throughputs {
            None => None,
            Some(table) => {
                let loaded = load_table(table).map_err(|e| SimError::Throughputs {
                    spec: table.clone(),
                    message: e.to_string(),
                })?;
                // A typed job the table rates nowhere it may run can never run either: skipped
                // alike, or refused by `Rates::new` naming it.
                if cfg.skip_unplaceable {
                    skip.extend(unrated_jobs(&loaded, trace, &spec, &skip));
                }
                let rates = Rates::new(loaded.clone(), trace, &spec, &skip)?;
                view = Some(Arc::new(ThroughputView::new(
                    loaded,
                    trace.jobs(),
                    Arc::clone(&spec),
                )));
                Some(Arc::new(rates))
            }
        };
        let admission = cfg
            .quotas
            .as_deref()
            .map(|q| load_admission(q, trace, &spec))
            .transpose()
            .map_err(|e| SimError::Quotas(e.to_string()))?;
        let quota_stats = admission
            .as_ref()
            .map(|a| quota::QuotaStats::new(a.tree().node_count()));
        for id in &skip {
            runtime[id.index()].state = JobState::Rejected;
        }
        // Time starts with the first job replayed (skipped jobs do not stretch the run).
        let first = trace
            .jobs()
            .iter()
            .find(|j| runtime[j.id.index()].state != JobState::Rejected)
            .map(|j| j.submit)
            .ok_or(SimError::EmptyTrace)?;
        let hidden = trace
            .jobs()
            .iter()
            .map(|j| Hidden {
                remaining_ms: trace.true_duration(j.id).ms() as f64,
                ..Hidden::default()
            })
            .collect();
        let max_gpus_per_node = spec
            .nodes
            .iter()
            .map(|n| n.gpus as u64)
            .max()
            .unwrap_or(0)
            .max(1);
        let mut per_rack = vec![0u64; spec.racks.len()];
        for n in &spec.nodes {
            per_rack[n.rack as usize] += 1;
        }
        let max_nodes_per_rack = per_rack.into_iter().max().unwrap_or(1).max(1);
        let state = ClusterState::new(Arc::clone(&spec));
        let frag = FragTracker::new(TaskMix::from_trace(trace), &state);
        let measure_start = first.saturating_add(r.warmup);
        Ok(Simulator {
            trace,
            cfg: cfg.clone(),
            cluster: RefCell::new(state),
            runtime,
            hidden,
            pending: BTreeSet::new(),
            waiting: BTreeSet::new(),
            pending_gpu_milli: 0,
            recently_finished: Vec::new(),
            heap: BinaryHeap::new(),
            seq: 0,
            next_arrival: 0,
            now: first,
            started: false,
            measure_start,
            frag,
            acc: Integrals {
                last: measure_start,
                ..Integrals::default()
            },
            timeline: Vec::new(),
            last_row: None,
            max_gpus_per_node,
            max_nodes_per_rack,
            capacity_gpu_milli: spec.total_gpu_milli(),
            rates,
            view,
            hetero: HeteroRuns::default(),
            skipped: skip.len() as u64,
            running: 0,
            finished: 0,
            events: 0,
            decisions: 0,
            rejected: 0,
            policy_errors: 0,
            preemptions: 0,
            shares: 0,
            resizes: 0,
            waste_gpu_milli_ms: 0.0,
            guard: StarvationGuard::new(cfg.starvation_bound),
            bound_vetoes: 0,
            bound_starts: 0,
            admission,
            quota_vetoes: 0,
            quota_stats,
            stop: None,
            stopped: false,
            ask_without_queue: false,
            graph: pipes::Graph::new(trace),
            never_satisfied: Vec::new(),
            first_submit: first,
            r,
        })
    }

    /// Whether to ask the policy also after batches that leave the queue empty while jobs run
    /// (`on` and the trace has elastic jobs and a throughput table is in use); by default it
    /// is asked only while jobs are pending. [`Self::run`] turns it on for a policy that
    /// [`Policy::acts_without_queue`], so that it can grow elastic jobs into GPUs that free up
    /// when nobody waits. Traces without elastic jobs run exactly as before.
    pub fn ask_without_queue(&mut self, on: bool) {
        self.ask_without_queue =
            on && self.rates.is_some() && self.trace.jobs().iter().any(|j| j.elastic.is_some());
    }

    /// Asks the policy after every batch while jobs run, queue or not, whatever the trace
    /// ([`Policy::acts_every_round`]; [`Self::run`] turns it on for such a policy).
    pub fn ask_every_round(&mut self) {
        self.ask_without_queue = true;
    }

    /// Runs to the end with `policy`, calling `progress` every few thousand events.
    pub fn run(mut self, policy: &mut dyn Policy, progress: &mut dyn FnMut(Progress)) -> SimResult {
        let wall = Instant::now();
        self.ask_without_queue(policy.acts_without_queue());
        if policy.acts_every_round() {
            self.ask_every_round();
        }
        let mut next_report = 0u64;
        while self.advance() {
            match policy.decide(&self.context()) {
                Ok(decision) => self.apply(&decision),
                Err(_) => {
                    self.policy_errors += 1;
                    self.apply(&Decision::default());
                }
            }
            if self.events >= next_report {
                progress(self.progress());
                next_report = self.events + 4096;
            }
        }
        progress(self.progress());
        let mut result = self.finish(policy.name(), wall.elapsed().as_secs_f64());
        if let Some(log) = policy.selection() {
            result.summary.selection = Some(log.line());
            result.summary.select_wall_s = Some(log.wall_s);
        }
        result
    }

    pub fn progress(&self) -> Progress {
        Progress {
            now: self.now,
            finished: self.finished,
            jobs: (self.trace.len() as u64).saturating_sub(self.skipped),
            events: self.events,
        }
    }

    pub fn now(&self) -> SimTime {
        self.now
    }

    /// What the policy may know now.
    pub fn context(&self) -> DecisionContext<'_> {
        DecisionContext::new(
            self.now,
            self.trace.jobs(),
            &self.runtime,
            &self.pending,
            &self.cluster,
        )
        .with_recently_finished(&self.recently_finished)
        .with_throughputs(self.view.as_ref())
        .with_restart_cost(RestartCost {
            overhead: self.r.restart_overhead,
            checkpoint: self.r.checkpoint,
        })
        .with_lookahead(Some(self))
        .with_quota(self.admission.as_ref())
    }

    /// Processes events until the policy should be asked (jobs pending after a batch, or jobs
    /// running under [`Self::ask_without_queue`]): `true`.
    /// `false` when nothing is left to happen (all jobs done, or the rest can never start), or
    /// a fork has reached its end (`stopped`).
    pub fn advance(&mut self) -> bool {
        while let Some(t) = self.next_time() {
            if self.stop.is_some_and(|stop| t > stop) {
                break;
            }
            debug_assert!(t >= self.now, "time went back");
            self.integrate_to(t);
            self.now = t;
            // A batch of stale completions only is no event a real scheduler sees (and its
            // time would tell the policy when a superseded run would have ended): no ask,
            // unless nothing runs (`process_batch`).
            let woke = self.process_batch(t);
            if woke && (!self.pending.is_empty() || (self.ask_without_queue && self.running > 0)) {
                return true;
            }
            // Asked, `apply` takes the quota states after the decision; not asked, here.
            self.refresh_quota_state();
            self.sample_timeline();
        }
        if let Some(stop) = self.stop {
            self.run_to_stop(stop);
        }
        false
    }

    /// Applies a decision after checking every part of it: preemptions, resizes,
    /// placements, then shares. Invalid or infeasible parts are counted in
    /// `rejected_decisions` and skipped. The starvation bound (`SimConfig::starvation_bound`)
    /// sits below every policy: parts that would preempt or resize a job it protects, or use
    /// a node it holds for a job waiting past the bound, are refused (`bound_vetoes`), and it
    /// starts such a job itself where it fits (`bound_starts`). Quotas (`SimConfig::quotas`)
    /// sit below it too: a start, share or growth its job's queue cannot admit is refused
    /// (`quota_vetoes`), the bound's own starts included (those are not counted). Last, the
    /// jobs the quota blocks preempt as Kueue does where their queue's policies allow
    /// (`quota.rs`).
    pub fn apply(&mut self, decision: &Decision) {
        self.decisions += 1;
        self.recently_finished.clear();
        // Once the bound refused a preemption or a resize, a later part that counted on the
        // room it would have freed may not fit: such a failure is the bound's, not the
        // policy's.
        let mut refused = false;
        for id in &decision.preemptions {
            if self.guard.protects(*id, self.now) {
                self.bound_vetoes += 1;
                refused = true;
            } else if !self.preempt(*id) {
                self.rejected += 1;
            }
        }
        let mut held = self.reservations();
        for id in &held.preempt {
            // Room for a starving job (`held.starts`): a preemption like a policy's.
            if !self.preempt(*id) {
                self.rejected += 1;
            }
        }
        for p in &decision.resizes {
            if self.guard.protects(p.job, self.now) || !held.admits(p.job, &p.tasks) {
                self.bound_vetoes += 1;
                refused = true;
            } else if !self.quota_admits(p.job, &p.tasks) {
                self.quota_vetoes += 1;
                refused = true;
            } else if !self.resize(p.job, p.tasks.clone()) {
                self.rejected += 1;
            }
        }
        for (p, shared) in decision
            .placements
            .iter()
            .map(|p| (p, false))
            .chain(decision.shares.iter().map(|p| (p, true)))
        {
            if !held.admits(p.job, &p.tasks) {
                self.bound_vetoes += 1;
                continue;
            }
            if !self.quota_admits(p.job, &p.tasks) {
                self.quota_vetoes += 1;
                continue;
            }
            let ok = if shared {
                self.share(p.job, p.tasks.clone())
            } else {
                self.start(p.job, p.tasks.clone())
            };
            if !ok && refused {
                self.bound_vetoes += 1;
            } else if !ok {
                self.rejected += 1;
            } else if held.starving.contains(&p.job) {
                self.guard.started(p.job, self.protection());
            }
        }
        for (job, tasks) in std::mem::take(&mut held.starts) {
            if self.runtime[job.index()].state == JobState::Pending
                && self.quota_admits(job, &tasks)
                && self.start(job, tasks)
            {
                self.guard.started(job, self.protection());
                self.bound_starts += 1;
            }
        }
        self.quota_preempt(&held);
        self.refresh_quota_state();
        self.sample_timeline();
    }

    /// Whether `id`'s queue admits it on `tasks` now (yes without quotas, and for an id or
    /// node the start itself refuses). A running job (a resize) is checked with its current
    /// charge taken back: only what it would hold after must fit.
    fn quota_admits(&mut self, id: JobId, tasks: &[crate::cluster::TaskPlacement]) -> bool {
        let Some(adm) = self.admission.as_mut() else {
            return true;
        };
        let Some(job) = self.trace.jobs().get(id.index()) else {
            return true;
        };
        let spec = self.cluster.get_mut().spec();
        if tasks.iter().any(|t| t.node.index() >= spec.nodes.len()) {
            return true;
        }
        let amounts = adm.amounts(job, tasks);
        let held = adm.discharge(job);
        let ok = adm.check(job, &amounts).is_ok();
        if let Some(held) = held {
            adm.charge(job, held);
        }
        ok
    }

    /// The starvation guard's reservations for the decision being applied (none while no
    /// bound is in force). A job its queue could never admit (above its nominal plus what it
    /// may borrow) holds no reservation; one its queue cannot admit yet does (the drain also
    /// stops others' starts there), and the guard starts it once its queue admits it.
    fn reservations(&mut self) -> Reservations {
        if self.guard.bound().is_none() || self.pending.is_empty() {
            return Reservations::default();
        }
        let (now, jobs, runtime) = (self.now, self.trace.jobs(), &self.runtime);
        // Only jobs waiting (beyond their allowance) since `now - bound` or earlier can have
        // waited past it (`plan` filters them by the bound itself): not every pending job at
        // every decision.
        let last = now.saturating_sub(self.guard.bound().unwrap_or(SimTime::ZERO));
        let admission = self.admission.as_ref();
        let waiting = self
            .waiting
            .iter()
            .take_while(|(key, _)| *key <= last)
            .filter(|(_, id)| admission.is_none_or(|a| a.could_ever_admit(&jobs[id.index()])))
            .map(|(key, id)| (&jobs[id.index()], now.saturating_sub(*key)));
        // The guard may preempt any preemptible job it does not protect, priced by the
        // GPU-time of its current run, as `preempt` prices its victims.
        let victims = |id: JobId| {
            let spec = &jobs[id.index()];
            let ran = runtime[id.index()]
                .run_start
                .map_or(0, |s| now.saturating_sub(s).ms());
            Some(crate::policy::Victim {
                risk: u128::from(ran) * u128::from(spec.gpu_milli_total()),
                spec,
            })
        };
        // Room by preemption only for a start the job's queue admits (no quota: any).
        let admits = |job: &JobSpec, tasks: &[crate::cluster::TaskPlacement]| {
            admission.is_none_or(|a| a.check(job, &a.amounts(job, tasks)).is_ok())
        };
        self.guard
            .plan_admitted(self.cluster.get_mut(), now, waiting, &victims, &admits)
    }

    /// When a job the starvation guard starts now stops being protected.
    fn protection(&self) -> Option<SimTime> {
        crate::policy::protection(
            self.now,
            RestartCost {
                overhead: self.r.restart_overhead,
                checkpoint: self.r.checkpoint,
            },
        )
    }

    /// When pending `id` began to wait: its submit (when its dependency was satisfied, for
    /// a job with one), or its last preemption.
    fn waiting_since(&self, id: JobId) -> SimTime {
        let rt = &self.runtime[id.index()];
        rt.last_stop
            .unwrap_or_else(|| rt.pending_since(&self.trace.jobs()[id.index()]))
    }

    /// When pending `id`'s wait counts toward the starvation bound: when it began to wait,
    /// plus its allowance.
    fn waiting_key(&self, id: JobId) -> SimTime {
        self.waiting_since(id)
            .saturating_add(self.hidden[id.index()].wait_allowance)
    }

    /// Makes `id` pending (its `last_stop` set first when it was stopped), with the wait the
    /// starvation bound allows it beyond the bound, priced on the backlog it joins.
    fn enqueue(&mut self, id: JobId) {
        let asks = self.trace.jobs()[id.index()].gpu_milli_total();
        self.pending_gpu_milli += asks;
        if self.guard.setting() == crate::policy::StarvationBound::Auto {
            let cluster = self.cluster.borrow();
            let backlog = cluster.allocated_gpu_milli() + self.pending_gpu_milli;
            drop(cluster);
            self.hidden[id.index()].wait_allowance =
                self.guard.allowance(backlog, self.capacity_gpu_milli);
        }
        self.pending.insert(id);
        self.waiting.insert((self.waiting_key(id), id));
        self.quota_enqueued(id);
    }

    fn next_time(&mut self) -> Option<SimTime> {
        loop {
            // Skipped (unplaceable) jobs never arrive.
            while self
                .trace
                .jobs()
                .get(self.next_arrival)
                .is_some_and(|j| self.runtime[j.id.index()].state == JobState::Rejected)
            {
                self.next_arrival += 1;
            }
            let arrival = self.trace.jobs().get(self.next_arrival).map(|j| j.submit);
            let event = self.heap.peek().map(|Reverse((t, _, e))| (*t, *e));
            // With nothing running and nothing left to arrive, no tick can change what the
            // policy already saw: drop it (jobs still pending then stay unfinished). Every
            // completion left then is stale (superseded by a preemption or a resize); with
            // nothing pending either it can wake nobody: drop it too, so that it does not
            // stretch the measured span.
            // A wake-up may make a held job pending: never dropped.
            if let Some((_, e)) = event
                && arrival.is_none()
                && self.running == 0
                && (matches!(e, Event::Tick)
                    || (self.pending.is_empty() && matches!(e, Event::Completion { .. })))
            {
                self.heap.pop();
                continue;
            }
            return match (arrival, event) {
                (None, None) => None,
                (Some(a), None) => Some(a),
                (None, Some((e, _))) => Some(e),
                (Some(a), Some((e, _))) => Some(a.min(e)),
            };
        }
    }

    fn push(&mut self, at: SimTime, event: Event) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, event)));
    }

    /// Processes every event at `t`: `true` unless all were stale completions while jobs
    /// run.
    fn process_batch(&mut self, t: SimTime) -> bool {
        let mut woke = false;
        if !self.started {
            self.started = true;
            if let Some(tick) = self.r.tick {
                self.push(t.saturating_add(tick), Event::Tick);
            }
        }
        while let Some(Reverse((at, _, event))) = self.heap.peek().copied() {
            if at != t {
                break;
            }
            self.heap.pop();
            self.events += 1;
            match event {
                Event::Completion { job, epoch } => {
                    // A stale one wakes the policy only with nothing running: no live event
                    // may come then, and jobs it preempted would wait forever.
                    woke |= self.complete(job, epoch) || self.running == 0;
                }
                Event::Tick => {
                    woke = true;
                    let tick = self
                        .r
                        .tick
                        .expect("ticks are scheduled only with a tick interval");
                    self.push(t.saturating_add(tick), Event::Tick);
                }
                Event::Wake { job } => woke |= self.settle_held(job),
            }
        }
        let jobs = self.trace.jobs();
        while let Some(job) = jobs.get(self.next_arrival).filter(|j| j.submit == t) {
            self.next_arrival += 1;
            self.events += 1;
            if self.runtime[job.id.index()].state == JobState::NotArrived
                && !self.hidden[job.id.index()].held
                && self.hidden[job.id.index()].never.is_none()
            {
                match self.hold_on_arrival(job.id) {
                    Some(released) => woke |= released,
                    None => {
                        self.runtime[job.id.index()].state = JobState::Pending;
                        self.enqueue(job.id);
                        woke = true;
                    }
                }
            }
        }
        woke
    }

    /// Ends running `id` now if `epoch` is its current run's: `false` for a stale completion
    /// (superseded by a preemption, a resize or a rate change), which nothing observes.
    fn complete(&mut self, id: JobId, epoch: u32) -> bool {
        if self.hidden[id.index()].epoch != epoch
            || self.runtime[id.index()].state != JobState::Running
        {
            return false;
        }
        let partner = self.cluster.get_mut().co_tenant(id);
        let alloc = self
            .cluster
            .get_mut()
            .release(id)
            .expect("a running job holds an allocation");
        self.update_frag(&alloc);
        if let Some(adm) = self.admission.as_mut() {
            adm.discharge(self.trace.job(id));
        }
        let rt = &mut self.runtime[id.index()];
        let ran = self
            .now
            .saturating_sub(rt.run_start.expect("running job has a run start"));
        rt.attained_ms += ran.ms();
        rt.attained_gpu_milli_ms += ran.ms() as u128 * self.hidden[id.index()].gpu_milli as u128;
        rt.run_start = None;
        rt.state = JobState::Finished;
        self.guard.finished(id, rt.attained_ms);
        self.hidden[id.index()].finish = Some(self.now);
        self.recently_finished.push(id);
        self.running -= 1;
        self.finished += 1;
        if let Some(partner) = partner {
            self.rerate_alone(partner);
        }
        self.settle_dependents(id);
        true
    }

    fn start(&mut self, id: JobId, tasks: Vec<crate::cluster::TaskPlacement>) -> bool {
        let Some(rt) = self.runtime.get(id.index()) else {
            return false;
        };
        if rt.state != JobState::Pending {
            return false;
        }
        let job = self.trace.job(id);
        let gpus = tasks.len() as u64 * u64::from(job.task.gpus);
        // A typed job's table speed where the tasks would go; it is not started where that is
        // 0 (a 0 rate, or no entry for the shape): that placement is infeasible for it.
        let table_speed = match self.table_speed(job, &tasks, gpus) {
            Ok(speed) => speed,
            Err(()) => return false,
        };
        if self.cluster.get_mut().allocate(job, tasks).is_err() {
            return false;
        }
        let cluster = self.cluster.borrow();
        let alloc = cluster.allocation(id).expect("just allocated");
        let nodes = alloc.nodes();
        let rate = match table_speed {
            None => self.speed(job, &cluster, &nodes) / self.locality_factor(job, &cluster, &nodes),
            Some(speed) => speed / self.spans(gpus, &cluster, &nodes).rack_factor(&self.cfg),
        };
        drop(cluster);
        if let Some(view) = &self.view {
            let attained = self.runtime[id.index()].attained_gpu_milli_ms;
            self.hetero.started(view, job, &nodes, attained);
        }
        let restarted = self.runtime[id.index()].preemptions > 0;
        let overhead_ms = if restarted {
            self.r.restart_overhead.ms()
        } else {
            0
        };
        self.begin_run(id, rate, overhead_ms);
        true
    }

    /// The table speed of `job` on `tasks` (`gpus` GPUs in all): `Ok(None)` for a job that
    /// runs at catalog speed, `Ok(Some(speed > 0))` for a typed one, `Err` where it may not
    /// run so: a typed job at speed 0 there, an unknown node, or an untyped elastic job at
    /// another size than its trace's (only a table gives a rate at another size).
    fn table_speed(
        &mut self,
        job: &JobSpec,
        tasks: &[crate::cluster::TaskPlacement],
        gpus: u64,
    ) -> Result<Option<f64>, ()> {
        let typed = self
            .rates
            .as_ref()
            .and_then(|r| Some((r, r.workload(job.id)?)));
        let Some((rates, w)) = typed else {
            return if gpus == job.gpus_total() {
                Ok(None)
            } else {
                Err(())
            };
        };
        let mut nodes: Vec<NodeId> = tasks.iter().map(|t| t.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let spec = self.cluster.get_mut().spec();
        if nodes.iter().any(|n| n.index() >= spec.nodes.len()) {
            return Err(());
        }
        let gpus = u32::try_from(gpus).map_err(|_| ())?;
        let speed = rates.speed(job, w, spec, &nodes, gpus);
        if speed > 0.0 {
            Ok(Some(speed))
        } else {
            Err(())
        }
    }

    /// Starts the run of `id` (just allocated) now at `rate`, after `overhead_ms` of restart:
    /// its books, and its completion event under a new epoch.
    fn begin_run(&mut self, id: JobId, rate: f64, overhead_ms: u64) {
        let (nodes, gpu_milli) = {
            let cluster = self.cluster.borrow();
            let alloc = cluster.allocation(id).expect("a started job is allocated");
            if let Some(adm) = self.admission.as_mut() {
                let job = self.trace.job(id);
                let amounts = adm.amounts(job, &alloc.tasks);
                adm.charge(job, amounts);
            }
            (
                alloc.nodes(),
                alloc.tasks.len() as u64 * alloc.task.gpu_milli_total(),
            )
        };
        let h = &mut self.hidden[id.index()];
        h.rate = rate;
        h.first_rate = rate;
        h.changes.clear();
        h.gpu_milli = gpu_milli;
        h.overhead_ms = overhead_ms;
        h.epoch += 1;
        h.nodes = nodes;
        let run_ms = h.overhead_ms as f64 + (h.remaining_ms / rate).ceil();
        let end = self.now.saturating_add(SimTime(run_ms as u64));
        let epoch = h.epoch;
        if self.runtime[id.index()].state != JobState::Running {
            let key = self.waiting_key(id);
            self.waiting.remove(&(key, id));
            self.pending.remove(&id);
            self.pending_gpu_milli -= self.trace.jobs()[id.index()].gpu_milli_total();
            self.running += 1;
            self.quota_started(id);
        }
        let rt = &mut self.runtime[id.index()];
        rt.state = JobState::Running;
        rt.run_start = Some(self.now);
        let first = rt.first_start.is_none();
        rt.first_start.get_or_insert(self.now);
        if first {
            self.wake_dependents(id);
        }
        self.push(end, Event::Completion { job: id, epoch });
        let alloc = self
            .cluster
            .borrow()
            .allocation(id)
            .cloned()
            .expect("just allocated");
        self.update_frag(&alloc);
    }

    /// Starts pending `id` on the one GPU of `tasks` that one running job uses alone
    /// (`Decision::shares`): both must be typed, 1-task, 1-GPU jobs whose workloads the
    /// table pairs (non-zero) on that GPU's model. Both then run at their pair speeds; the
    /// partner's completion is recomputed from the work it has done.
    fn share(&mut self, id: JobId, tasks: Vec<crate::cluster::TaskPlacement>) -> bool {
        if self.runtime.get(id.index()).map(|r| r.state) != Some(JobState::Pending) {
            return false;
        }
        let job = self.trace.job(id);
        let Some(rates) = self.rates.clone() else {
            return false;
        };
        let Some(w) = rates.workload(id) else {
            return false;
        };
        let Some(t) = tasks.first() else {
            return false;
        };
        let spec = self.cluster.get_mut().spec();
        let Some(model) = spec.nodes.get(t.node.index()).and_then(|n| n.gpu_model) else {
            return false;
        };
        // The partner, as `allocate_shared` will find it (it refuses anything else).
        let Some(&gpu) = t.gpus.first() else {
            return false;
        };
        let holders = self.cluster.get_mut().gpu_holders(t.node, gpu);
        let Some(partner) = holders.first().map(|a| a.job) else {
            return false;
        };
        let Some(wp) = rates.workload(partner) else {
            return false;
        };
        let other = self.trace.job(partner);
        let Some([speed, partner_speed]) = rates.pair_speeds((job, w), (other, wp), model) else {
            return false;
        };
        if self.cluster.get_mut().allocate_shared(job, tasks) != Ok(partner) {
            return false;
        }
        let restarted = self.runtime[id.index()].preemptions > 0;
        let overhead_ms = if restarted {
            self.r.restart_overhead.ms()
        } else {
            0
        };
        self.begin_run(id, speed, overhead_ms);
        self.rerate(partner, partner_speed);
        self.shares += 1;
        true
    }

    /// Moves running elastic `id` to `tasks` (`Decision::resizes`): it keeps all the work
    /// done so far (a resize checkpoints), and restarts on the new tasks at the table's speed
    /// for its new size, after the restart overhead. Refused for rigid, untyped, sharing and
    /// non-preemptible jobs, sizes outside `min_gpus..=max_gpus`, and placements at speed 0.
    fn resize(&mut self, id: JobId, tasks: Vec<crate::cluster::TaskPlacement>) -> bool {
        if self.runtime.get(id.index()).map(|r| r.state) != Some(JobState::Running) {
            return false;
        }
        let job = self.trace.job(id);
        if job.elastic.is_none() {
            return false;
        }
        let gpus = tasks.len() as u64 * u64::from(job.task.gpus);
        let Ok(Some(speed)) = self.table_speed(job, &tasks, gpus) else {
            return false;
        };
        let Ok(old) = self.cluster.get_mut().resize(job, tasks) else {
            return false;
        };
        self.update_frag(&old);
        self.stop_run(id, true);
        let cluster = self.cluster.borrow();
        let nodes = cluster.allocation(id).expect("just resized").nodes();
        let rate = speed / self.spans(gpus, &cluster, &nodes).rack_factor(&self.cfg);
        drop(cluster);
        self.begin_run(id, rate, self.r.restart_overhead.ms());
        self.resizes += 1;
        true
    }

    /// Changes running `id`'s rate to `rate` now (a partner joined or left its GPU): the work
    /// done so far stays, and its completion is recomputed under a new epoch.
    fn rerate(&mut self, id: JobId, rate: f64) {
        let run_start = self.runtime[id.index()]
            .run_start
            .expect("a running job has a run start");
        let h = &mut self.hidden[id.index()];
        let start = run_start.saturating_add(SimTime(h.overhead_ms));
        let from = self.now.max(start);
        if self.now <= start {
            h.first_rate = rate;
            h.changes.clear();
        } else {
            h.changes.push((self.now, rate));
        }
        let left = (h.remaining_ms - h.work_until(start, from)).max(0.0);
        h.rate = rate;
        h.epoch += 1;
        let end = from.saturating_add(SimTime((left / rate).ceil() as u64));
        let epoch = h.epoch;
        self.push(end, Event::Completion { job: id, epoch });
    }

    /// Puts running typed `id`, whose partner left its GPU, back at its rate alone there.
    fn rerate_alone(&mut self, id: JobId) {
        let job = self.trace.job(id);
        let cluster = self.cluster.borrow();
        let alloc = cluster.allocation(id).expect("a partner still runs");
        let nodes = alloc.nodes();
        let gpus = alloc.tasks.len() as u64 * u64::from(alloc.task.gpus);
        let rates = self.rates.as_ref().expect("only typed jobs share");
        let w = rates.workload(id).expect("only typed jobs share");
        let speed = rates.speed(job, w, cluster.spec(), &nodes, gpus as u32);
        let rate = speed / self.spans(gpus, &cluster, &nodes).rack_factor(&self.cfg);
        drop(cluster);
        self.rerate(id, rate);
    }

    fn preempt(&mut self, id: JobId) -> bool {
        if self.runtime.get(id.index()).map(|r| r.state) != Some(JobState::Running) {
            return false;
        }
        let partner = self.cluster.get_mut().co_tenant(id);
        let Ok(alloc) = self.cluster.get_mut().preempt(id) else {
            return false;
        };
        self.update_frag(&alloc);
        self.stop_run(id, false);
        let rt = &mut self.runtime[id.index()];
        rt.preemptions += 1;
        rt.state = JobState::Pending;
        self.enqueue(id);
        self.running -= 1;
        self.preemptions += 1;
        if let Some(partner) = partner {
            self.rerate_alone(partner);
        }
        true
    }

    /// Ends running `id`'s current run now (preempted, or resized): it keeps the work of its
    /// last checkpoint, or with `keep_all` (a resize checkpoints first) all its work; the rest
    /// of the time since its run start is counted as waste, all of it as attained service.
    fn stop_run(&mut self, id: JobId, keep_all: bool) {
        if let Some(adm) = self.admission.as_mut() {
            adm.discharge(self.trace.job(id));
        }
        let rt = &mut self.runtime[id.index()];
        let h = &mut self.hidden[id.index()];
        let run_start = rt.run_start.expect("running job has a run start");
        let elapsed = self.now.saturating_sub(run_start).ms();
        let productive = elapsed.saturating_sub(h.overhead_ms);
        let start = run_start.saturating_add(SimTime(h.overhead_ms));
        let saved_wall = match (keep_all, self.r.checkpoint) {
            (true, _) => productive,
            (false, Some(iv)) => productive / iv.ms() * iv.ms(),
            (false, None) => 0,
        };
        h.remaining_ms = if keep_all || self.r.checkpoint.is_some() {
            let saved = h.work_until(start, start.saturating_add(SimTime(saved_wall)));
            (h.remaining_ms - saved).max(0.0)
        } else {
            self.trace.true_duration(id).ms() as f64
        };
        h.epoch += 1;
        let gpu_milli = h.gpu_milli as f64;
        self.waste_gpu_milli_ms += (elapsed - saved_wall) as f64 * gpu_milli;
        rt.attained_ms += elapsed;
        rt.attained_gpu_milli_ms += elapsed as u128 * h.gpu_milli as u128;
        rt.run_start = None;
        rt.last_stop = Some(self.now);
    }

    /// Speed of the slowest GPU model the job runs on (1 for CPU-only jobs or with speeds off).
    fn speed(&self, job: &JobSpec, cluster: &ClusterState, nodes: &[NodeId]) -> f64 {
        if !self.cfg.gpu_speed || job.task.gpus == 0 {
            return 1.0;
        }
        nodes
            .iter()
            .filter_map(|n| cluster.spec().node_model(*n))
            .map(|m| m.speed)
            .reduce(f64::min)
            .unwrap_or(1.0)
    }

    /// Run-time factor of an untyped gang spread over more nodes (and racks) than it needs.
    fn locality_factor(&self, job: &JobSpec, cluster: &ClusterState, nodes: &[NodeId]) -> f64 {
        let spans = self.spans(job.gpus_total(), cluster, nodes);
        let mut factor = 1.0;
        if spans.extra_nodes {
            factor *= self.cfg.cross_node_penalty;
        }
        if spans.extra_racks {
            factor *= self.cfg.cross_rack_penalty;
        }
        factor
    }

    /// Whether a gang on `nodes` spans more nodes, and more racks, than it needs: it needs
    /// ceil(GPUs / largest node's GPUs) nodes and ceil(those / largest rack's nodes) racks.
    fn spans(&self, gpus: u64, cluster: &ClusterState, nodes: &[NodeId]) -> Spans {
        if nodes.len() <= 1 {
            return Spans::default();
        }
        let min_nodes = gpus.div_ceil(self.max_gpus_per_node).max(1);
        let mut racks: Vec<u32> = nodes.iter().map(|n| cluster.spec().node(*n).rack).collect();
        racks.sort_unstable();
        racks.dedup();
        Spans {
            extra_nodes: nodes.len() as u64 > min_nodes,
            extra_racks: racks.len() as u64 > min_nodes.div_ceil(self.max_nodes_per_rack),
        }
    }

    fn update_frag(&mut self, alloc: &Allocation) {
        let cluster = self.cluster.borrow();
        for n in alloc.nodes() {
            self.frag.update(&cluster, n);
        }
    }

    fn integrate_to(&mut self, t: SimTime) {
        let from = self.acc.last.max(self.measure_start);
        if t > from {
            let dt = t.saturating_sub(from).ms() as f64;
            let cluster = self.cluster.borrow();
            self.acc.alloc_milli_ms += cluster.allocated_gpu_milli() as f64 * dt;
            self.acc.cpu_milli_ms += cluster.allocated_cpu_milli() as f64 * dt;
            self.acc.energy_wms += cluster.gpu_power_watts() * dt;
            self.acc.frag_milli_ms += self.frag.total_milli() * dt;
            self.acc.queue_ms += self.pending.len() as f64 * dt;
            self.acc.system_ms += (self.pending.len() as f64 + self.running as f64) * dt;
            self.acc.measured_ms += dt;
            if let Some(stats) = self.quota_stats.as_mut() {
                stats.integrate(dt);
            }
        }
        self.acc.last = self.acc.last.max(t);
    }

    fn sample_timeline(&mut self) {
        if !self.cfg.record_timeline {
            return;
        }
        if let Some(last) = self.last_row
            && self.now.saturating_sub(last) < self.r.timeline_interval.max(SimTime(1))
        {
            return;
        }
        self.last_row = Some(self.now);
        let cluster = self.cluster.borrow();
        self.timeline.push(TimelineRow {
            time_s: self.now.secs_f64(),
            allocated_gpus: cluster.allocated_gpu_milli() as f64 / GPU_MILLI as f64,
            running_jobs: self.running,
            queue_len: self.pending.len() as u64,
            frag_gpus: self.frag.total_milli() / GPU_MILLI as f64,
            power_w: cluster.gpu_power_watts(),
        });
    }

    /// Closes the run: job records and the summary.
    pub fn finish(self, policy: &str, wall_s: f64) -> SimResult {
        let spec = self.cluster.borrow().spec_arc().clone();
        let records: Vec<JobRecord> = self
            .trace
            .jobs()
            .iter()
            .zip(&self.runtime)
            .zip(&self.hidden)
            .filter(|((_, rt), _)| rt.state != JobState::Rejected)
            .map(|((j, rt), h)| JobRecord {
                name: j.name.clone(),
                submit: j.submit,
                first_start: rt.first_start,
                finish: h.finish,
                preemptions: rt.preemptions,
                nodes: h
                    .nodes
                    .iter()
                    .map(|n| spec.node(*n).name.as_str())
                    .collect::<Vec<_>>()
                    .join(";"),
                gpus: j.gpus_total(),
                tenant: self.trace.tenant_name(j.tenant).to_string(),
                measured: j.submit >= self.measure_start,
                ready: rt.ready,
                never_satisfied: h.never.is_some(),
            })
            .collect();
        let pipelines = self.trace.has_dependencies().then(|| {
            let times: Vec<StageTimes> = self
                .trace
                .jobs()
                .iter()
                .zip(&self.runtime)
                .zip(&self.hidden)
                .map(|((j, rt), h)| StageTimes {
                    ready: match self.trace.dependency(j.id) {
                        None if rt.state != JobState::Rejected => Some(j.submit),
                        _ => rt.ready,
                    },
                    first_start: rt.first_start,
                    finish: h.finish,
                    never_satisfied: h.never.is_some() || rt.state == JobState::Rejected,
                })
                .collect();
            metrics::pipeline_stats(self.trace, &times)
        });
        let stats = metrics::job_stats(&records);
        let min_avg_jct_s = self.min_avg_jct_s(&spec);
        let hetero = self.hetero_summary();
        let first = self.first_submit;
        let last_finish = self
            .hidden
            .iter()
            .filter_map(|h| h.finish)
            .max()
            .unwrap_or(first);
        let total_milli = spec.total_gpu_milli() as f64;
        let per_time = |x: f64| {
            if self.acc.measured_ms > 0.0 {
                x / self.acc.measured_ms
            } else {
                0.0
            }
        };
        let per_capacity = |x: f64| {
            if total_milli > 0.0 {
                per_time(x) / total_milli
            } else {
                0.0
            }
        };
        let summary = Summary {
            policy: policy.to_string(),
            trace: self.trace.name.clone(),
            cluster: spec.name.clone(),
            seed: self.cfg.seed,
            jobs: stats.jobs,
            finished: stats.finished,
            warmup_jobs: records.iter().filter(|r| !r.measured).count() as u64,
            skipped_unplaceable: self.skipped,
            avg_jct_s: stats.jct[0],
            min_avg_jct_s,
            p50_jct_s: stats.jct[1],
            p95_jct_s: stats.jct[2],
            p99_jct_s: stats.jct[3],
            avg_wait_s: stats.wait[0],
            p50_wait_s: stats.wait[1],
            p95_wait_s: stats.wait[2],
            p99_wait_s: stats.wait[3],
            p999_wait_s: stats.wait_tail[0],
            max_wait_s: stats.wait_tail[1],
            avg_bsld: stats.bsld[0],
            p95_bsld: stats.bsld[1],
            makespan_s: last_finish.saturating_sub(first).secs_f64(),
            gpu_alloc_rate: per_capacity(self.acc.alloc_milli_ms),
            frag_gpu_rate: per_capacity(self.acc.frag_milli_ms),
            cpu_alloc_rate: if spec.total_cpu_milli() > 0 {
                per_time(self.acc.cpu_milli_ms) / spec.total_cpu_milli() as f64
            } else {
                0.0
            },
            avg_queue_len: per_time(self.acc.queue_ms),
            jain_fairness: metrics::tenant_fairness(&records),
            energy_kwh: self.acc.energy_wms / 3_600_000.0 / 1000.0,
            preemptions: self.preemptions,
            shares: self.shares,
            resizes: self.resizes,
            preemption_waste_gpu_h: self.waste_gpu_milli_ms / GPU_MILLI as f64 / 3_600_000.0,
            decisions: self.decisions,
            rejected_decisions: self.rejected,
            policy_errors: self.policy_errors,
            bound_vetoes: self.bound_vetoes,
            bound_starts: self.bound_starts,
            quotas: self.admission.as_ref().map(|a| a.label().to_string()),
            quota_vetoes: self.quota_vetoes,
            quota_metrics: self.quota_metrics(&records),
            events: self.events,
            wall_s,
            effective_throughput: hetero.map(|h| h.0),
            fastest_gpu_share: hetero.map(|h| h.1),
            selection: None,
            select_wall_s: None,
            dependency_never_satisfied: self.never_satisfied.len() as u64,
            pipelines: pipelines.flatten(),
        };
        let quota_blocked = self.quota_blocked();
        let never_satisfied = self
            .never_satisfied
            .iter()
            .map(|id| {
                let dep = self.trace.dependency_text(*id).unwrap_or_default();
                (self.trace.job(*id).name.clone(), dep)
            })
            .collect();
        SimResult {
            summary,
            jobs: records,
            timeline: self.timeline,
            quota_blocked,
            never_satisfied,
        }
    }

    /// The lower bound of the average JCT over the jobs `avg_jct_s` averages (measured,
    /// finished): each job's true duration at the fastest GPU speed any node offers (speed
    /// 1 for CPU-only jobs or with speeds off; a typed job's best table speed on the cluster),
    /// rounded as a run is. A run's progress per ms never exceeds that speed (locality
    /// penalties are >= 1, restarts add overhead and preemption only loses work), so no job
    /// finishes sooner after its submit.
    fn min_avg_jct_s(&self, spec: &ClusterSpec) -> f64 {
        let fastest = spec
            .models
            .iter()
            .map(|m| m.speed)
            .filter(|s| s.is_finite() && *s > 0.0)
            .reduce(f64::max)
            .unwrap_or(1.0);
        let alone: Vec<f64> = self
            .trace
            .jobs()
            .iter()
            .zip(&self.runtime)
            .zip(&self.hidden)
            .filter(|((j, rt), h)| {
                rt.state != JobState::Rejected
                    && h.finish.is_some()
                    && j.submit >= self.measure_start
            })
            .map(|((j, _), _)| {
                let ms = self.trace.true_duration(j.id).ms() as f64;
                let typed = self
                    .rates
                    .as_ref()
                    .and_then(|r| Some((r, r.workload(j.id)?)));
                let speed = if let Some((rates, w)) = typed {
                    rates.best_speed(j, w, spec)
                } else if self.cfg.gpu_speed && j.task.gpus > 0 {
                    fastest
                } else {
                    1.0
                };
                SimTime((ms / speed).ceil() as u64).secs_f64()
            })
            .collect();
        metrics::mean(&alone)
    }

    /// Effective throughput and fastest-model share of the typed jobs `avg_jct_s` averages
    /// (measured, finished); `None` without a table or typed jobs (`hetero.rs`).
    fn hetero_summary(&self) -> Option<(f64, f64)> {
        let view = self.view.as_ref()?;
        let typed: Vec<TypedJob> = self
            .trace
            .jobs()
            .iter()
            .zip(&self.runtime)
            .filter(|(j, rt)| {
                rt.state == JobState::Finished
                    && j.submit >= self.measure_start
                    && view.is_typed(j.id)
            })
            .map(|(j, rt)| TypedJob {
                id: j.id,
                duration_ms: self.trace.true_duration(j.id).ms(),
                gpu_milli: j.gpu_milli_total(),
                attained_gpu_milli_ms: rt.attained_gpu_milli_ms,
            })
            .collect();
        hetero_summary(&self.hetero, self.trace.len(), &typed)
    }

    /// The pending jobs whose queue cannot admit them now, with why (`SimResult`).
    fn quota_blocked(&self) -> Vec<(String, Blocked)> {
        let Some(adm) = &self.admission else {
            return Vec::new();
        };
        self.pending
            .iter()
            .map(|id| self.trace.job(*id))
            .filter_map(|j| Some((j.name.clone(), adm.admits(j).err()?)))
            .collect()
    }

    /// The quota admission of this run (its tree and usage now), `None` without quotas.
    pub fn admission(&self) -> Option<&Admission> {
        self.admission.as_ref()
    }

    /// The time integrals so far (up to `now`, from the end of warm-up).
    pub(crate) fn integrals(&self) -> &Integrals {
        &self.acc
    }

    /// The cluster now, for tests and tools.
    pub fn cluster(&self) -> std::cell::Ref<'_, ClusterState> {
        self.cluster.borrow()
    }
}

/// Where a gang lies beyond what it needs (`Simulator::spans`).
#[derive(Debug, Clone, Copy, Default)]
struct Spans {
    extra_nodes: bool,
    extra_racks: bool,
}

impl Spans {
    /// A typed job's run-time factor: the rack penalty only. Its table rate already is the
    /// measured rate of its placement, consolidated or spread over nodes, so the node penalty
    /// would count the spread twice; tables do not measure racks.
    fn rack_factor(self, cfg: &SimConfig) -> f64 {
        if self.extra_racks {
            cfg.cross_rack_penalty
        } else {
            1.0
        }
    }
}

/// Jobs that do not fit the empty cluster, with why. Jobs of one shape are checked once.
fn unplaceable_jobs(trace: &Trace, spec: &Arc<ClusterSpec>) -> Vec<(JobId, Infeasible)> {
    let mut empty = ClusterState::new(Arc::clone(spec));
    type Shape<'a> = (u32, crate::job::TaskRequest, &'a [String], &'a Constraints);
    let mut seen: HashMap<Shape<'_>, bool> = HashMap::new();
    let mut out = Vec::new();
    for j in trace.jobs() {
        let key = (j.tasks, j.task, j.gpu_types.as_slice(), &j.constraints);
        let fits = *seen
            .entry(key)
            .or_insert_with(|| empty.find_job_placement(j, FitStrategy::FirstFit).is_some());
        if !fits {
            let why = if j.task.gpus > 0 && spec.model_mask(&j.gpu_types) & model_bits(spec) == 0 {
                Infeasible::NoAllowedModel {
                    gpu_types: j.gpu_types.clone(),
                }
            } else if spec.class_mask(&j.constraints) == 0 {
                Infeasible::NoNodeMatches {
                    constraints: j.constraints.label_text(),
                }
            } else {
                Infeasible::NeverFits
            };
            out.push((j.id, why));
        }
    }
    out
}

fn model_bits(spec: &ClusterSpec) -> u64 {
    spec.nodes
        .iter()
        .filter_map(|n| n.gpu_model)
        .fold(0, |m, id| m | (1u64 << id.0))
}
