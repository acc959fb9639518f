//! `World`: a request's cluster snapshot, validated and turned into the simulator's own types
//! (`ClusterSpec`, `ClusterState`, `JobSpec`s), so every policy, the shield and the pending
//! reasons run on exactly the code the simulator runs.
//!
//! Validation is total: any snapshot either becomes a consistent `World` or a `SnapshotError`
//! naming the offending field path (`nodes[3].gpu_free_milli[2]`). Nothing here panics on input.

use crate::proto;
use lachesis_env::cluster::{
    ClusterSpec, ClusterState, FitStrategy, Infeasible, NodeSpec, StateError, TaskPlacement,
};
use lachesis_env::constraint::Constraints;
use lachesis_env::gpu::GpuModel;
use lachesis_env::job::{Elastic, JobKind, JobSpec, Qos, TaskRequest, WorkloadType};
use lachesis_env::policy::{
    Decision, DecisionContext, JobRuntime, JobState, Placement, StarvationBound, StarvationGuard,
    ThroughputView,
};
use lachesis_env::throughput::ThroughputTable;
use lachesis_env::units::{GPU_MILLI, GpuModelId, JobId, NodeId, SimTime, TenantId};
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

/// The world's lookups by name. Names come from clients, so the hasher is seeded at random
/// per process (foldhash: several times cheaper than SipHash on short keys, and a flood of
/// colliding names cannot be precomputed against an unknown seed).
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::sync::Arc;

mod delta;
pub use delta::{COMPACT_AFTER, DeltaError};

/// A job's shape as far as fitting the empty cluster goes.
type Shape = (u32, TaskRequest, Vec<String>, Constraints);

/// Most nodes one snapshot may hold.
pub const MAX_SNAPSHOT_NODES: usize = 100_000;
/// Most jobs (running and pending) one snapshot may hold.
pub const MAX_SNAPSHOT_JOBS: usize = 200_000;
/// Most tasks in one gang.
pub const MAX_TASKS: u32 = 4096;
/// Longest id, name, tenant or label.
pub const MAX_NAME_BYTES: usize = 253;
/// Most labels on one node.
pub const MAX_LABELS: usize = 64;

/// A snapshot that cannot be decided on: which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct SnapshotError {
    /// Field path in the request, e.g. `snapshot.pending[4].gpu_milli`.
    pub path: String,
    pub message: String,
}

fn bad(path: impl Into<String>, message: impl Into<String>) -> SnapshotError {
    SnapshotError {
        path: format!("snapshot.{}", path.into()),
        message: message.into(),
    }
}

/// A validated snapshot in the simulator's types. Job ids follow submit order (oldest first),
/// as `DecisionContext` expects; reservations for capacity held by things the snapshot does not
/// list as running are non-preemptible pseudo-jobs after the real ones.
#[derive(Debug, Clone)]
pub struct World {
    now: SimTime,
    /// Shared with copies of this world (`Arc::make_mut` on change): a copy for a model arm
    /// past its deadline, for shadow or A/B, costs a count, not every job's strings.
    jobs: Arc<Vec<JobSpec>>,
    runtime: Vec<JobRuntime>,
    pending: BTreeSet<JobId>,
    cluster: RefCell<ClusterState>,
    /// Ids of the reservations of unlisted usage (every other job is the caller's).
    reserved: std::ops::Range<usize>,
    node_ids: Arc<Map<String, NodeId>>,
    /// Jobs the caller listed and that have not left, by name (shared like `jobs`).
    job_ids: Arc<Map<String, JobId>>,
    tenants: Vec<String>,
    tenant_ids: Map<String, TenantId>,
    /// The caller's clock at `now` (`now` may be later: see `build`); deltas move both.
    client_now: u64,
    /// Jobs that left through deltas and still hold an id.
    departed: usize,
    /// The latest submit time of the caller's jobs (deltas may not submit before it).
    newest_submit: SimTime,
    /// Whether a shape fits the empty cluster, asked once per shape.
    fits: Map<Shape, bool>,
    /// The only label keys the nodes keep, where the snapshot's label sets were too many to
    /// keep them all (`build_spec`); `None`: every label kept.
    label_keys: Option<Arc<BTreeSet<String>>>,
    /// The service's throughput table, which jobs' workload types name; `None`: no job is
    /// typed.
    table: Option<Arc<ThroughputTable>>,
    /// The table resolved against this world's jobs and cluster, for policies and the shield
    /// (rebuilt whenever the jobs change: `refresh_view`).
    view: Option<Arc<ThroughputView>>,
    /// The starvation bound on this world's answers (`bound.rs`). Off until the engine sets
    /// the configured bound (`set_starvation_bound`).
    guard: StarvationGuard,
}

impl World {
    /// Validates `snapshot` and builds the world it describes, without a throughput table (a
    /// job with a workload type is refused).
    pub fn build(snapshot: &proto::Snapshot) -> Result<World, SnapshotError> {
        World::build_typed(snapshot, None)
    }

    /// [`Self::build`] with the throughput table jobs' `workload` types are read against.
    pub fn build_typed(
        snapshot: &proto::Snapshot,
        table: Option<&Arc<ThroughputTable>>,
    ) -> Result<World, SnapshotError> {
        let (spec, label_keys) = build_spec(&snapshot.nodes, &referenced_keys(snapshot))?;
        let spec = Arc::new(spec);
        let node_ids: Map<String, NodeId> = spec
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), NodeId(i as u32)))
            .collect();
        let total = snapshot.running.len() + snapshot.pending.len();
        if total > MAX_SNAPSHOT_JOBS {
            return Err(bad(
                "running",
                format!("{total} jobs, at most {MAX_SNAPSHOT_JOBS} per snapshot"),
            ));
        }

        // Every job with its path, to sort by submit time (oldest first, ties by position).
        struct Entry<'a> {
            path: EntryPath,
            job: &'a proto::Job,
            running: Option<(usize, &'a proto::RunningJob)>,
        }
        let mut entries: Vec<Entry<'_>> = Vec::with_capacity(total);
        for (i, r) in snapshot.running.iter().enumerate() {
            let job = r
                .job
                .as_ref()
                .ok_or_else(|| bad(format!("running[{i}].job"), "missing"))?;
            entries.push(Entry {
                path: EntryPath::Running(i),
                job,
                running: Some((i, r)),
            });
        }
        for (i, job) in snapshot.pending.iter().enumerate() {
            entries.push(Entry {
                path: EntryPath::Pending(i),
                job,
                running: None,
            });
        }
        // The clock: `now_ms`, moved forward if a job says it waited longer than that (clocks
        // with an arbitrary epoch), so submit times are never negative.
        let oldest = entries.iter().map(|e| e.job.wait_ms).max().unwrap_or(0);
        let now = SimTime(snapshot.now_ms.max(oldest));
        let mut order: Vec<usize> = (0..entries.len()).collect();
        // The key ends with the position, so an unstable sort gives the stable order.
        order.sort_unstable_by_key(|i| (std::cmp::Reverse(entries[*i].job.wait_ms), *i));

        let mut tenants: Vec<String> = Vec::new();
        let mut tenant_ids: Map<String, TenantId> = Map::default();
        let mut jobs = Vec::with_capacity(total);
        let mut runtime = Vec::with_capacity(total);
        let mut job_ids: Map<String, JobId> =
            Map::with_capacity_and_hasher(total, Default::default());
        let mut pending = BTreeSet::new();
        let mut placements: Vec<(JobId, usize, &[proto::TaskPlacement])> = Vec::new();
        // Whether a shape fits the empty cluster, asked once per shape.
        let mut empty = ClusterState::new(Arc::clone(&spec));
        let mut fits: Map<Shape, bool> = Map::default();
        for i in order {
            let e = &entries[i];
            let id = JobId(jobs.len() as u32);
            let tenant = intern(&mut tenants, &mut tenant_ids, &e.job.tenant);
            let mut spec_job = job_spec(
                e.job,
                e.path,
                id,
                tenant,
                now,
                Workloads::Table(table.map(|t| &**t)),
            )?;
            if e.running.is_some() {
                // Constraints steer placements; a running job's is Kubernetes' or Slurm's.
                spec_job.constraints = Constraints::default();
            }
            if job_ids.insert(e.job.id.clone(), id).is_some() {
                return Err(bad(
                    format!("{}.id", e.path),
                    format!("job id {:?} appears twice in the snapshot", e.job.id),
                ));
            }
            let mut rt = JobRuntime {
                attained_ms: e.job.attained_ms,
                attained_gpu_milli_ms: u128::from(e.job.attained_ms)
                    * u128::from(spec_job.gpu_milli_total()),
                ..JobRuntime::default()
            };
            match e.running {
                Some((run_index, r)) => {
                    if r.run_ms > e.job.wait_ms {
                        return Err(bad(
                            format!("{}.wait_ms", e.path),
                            format!(
                                "the job has run {} ms in this run but was submitted only {} ms ago",
                                r.run_ms, e.job.wait_ms
                            ),
                        ));
                    }
                    let start = now.saturating_sub(SimTime(r.run_ms));
                    rt.state = JobState::Running;
                    rt.run_start = Some(start);
                    rt.first_start = Some(start);
                    placements.push((id, run_index, &r.tasks));
                }
                None => {
                    if let Some(idle) = e.job.idle_ms {
                        if idle > e.job.wait_ms {
                            return Err(bad(
                                format!("{}.idle_ms", e.path),
                                format!(
                                    "the job has been idle {idle} ms but was submitted only {} ms ago",
                                    e.job.wait_ms
                                ),
                            ));
                        }
                        rt.last_stop = Some(now.saturating_sub(SimTime(idle)));
                    }
                    let shape = (
                        spec_job.tasks,
                        spec_job.task,
                        spec_job.gpu_types.clone(),
                        spec_job.constraints.clone(),
                    );
                    let fits_empty = *fits.entry(shape).or_insert_with(|| {
                        empty
                            .find_job_placement(&spec_job, FitStrategy::FirstFit)
                            .is_some()
                    });
                    if !fits_empty {
                        return Err(unfit(&e.path.to_string(), e.job, &spec_job));
                    }
                    rt.state = JobState::Pending;
                    pending.insert(id);
                }
            }
            jobs.push(spec_job);
            runtime.push(rt);
        }
        let real_jobs = jobs.len();
        let newest_submit = jobs.iter().map(|j| j.submit).max().unwrap_or(SimTime(0));

        let mut state = ClusterState::new(Arc::clone(&spec));
        let mut load = Vec::with_capacity(placements.len());
        // A second 1-GPU job on a GPU a 1-GPU job already holds shares it (loaded after the
        // others, by `allocate_shared`, which takes the GPU's capacity once).
        let mut one_gpu_holders: Map<(NodeId, u8), JobId> = Map::default();
        let mut shared = Vec::new();
        for (id, run_index, tasks) in &placements {
            let job = &jobs[id.index()];
            let path = RunTasks(*run_index);
            let mut placed = Vec::with_capacity(tasks.len());
            for (k, t) in tasks.iter().enumerate() {
                let node = *node_ids.get(&t.node).ok_or_else(|| {
                    bad(
                        format!("{path}[{k}].node"),
                        format!("unknown node {:?}", t.node),
                    )
                })?;
                let gpus = t
                    .gpus
                    .iter()
                    .enumerate()
                    .map(|(g, i)| {
                        u8::try_from(*i).map_err(|_| {
                            bad(format!("{path}[{k}].gpus[{g}]"), format!("GPU index {i}"))
                        })
                    })
                    .collect::<Result<Vec<u8>, _>>()?;
                placed.push(TaskPlacement { node, gpus });
            }
            if let [t] = placed.as_slice()
                && let [gpu] = t.gpus.as_slice()
                && job.task.gpus == 1
                && job.task.gpu_milli == GPU_MILLI
                && one_gpu_holders.insert((t.node, *gpu), *id).is_some()
            {
                shared.push((*run_index, job, placed));
                continue;
            }
            load.push((job, placed));
        }
        // One index rebuild for all running jobs rather than one update per task.
        state.allocate_many(load).map_err(|(i, e)| {
            let (id, run_index, _) = placements[i];
            let why = match &e {
                StateError::Infeasible { reason, .. } => describe(reason, &spec),
                other => other.to_string(),
            };
            bad(
                RunTasks(run_index).to_string(),
                format!(
                    "job {:?} cannot hold this placement: {why}",
                    jobs[id.index()].name
                ),
            )
        })?;
        for (run_index, job, placed) in shared {
            state.allocate_shared(job, placed).map_err(|e| {
                let why = match &e {
                    StateError::Infeasible { reason, .. } => describe(reason, &spec),
                    other => other.to_string(),
                };
                bad(
                    RunTasks(run_index).to_string(),
                    format!("job {:?} cannot share this GPU: {why}", job.name),
                )
            })?;
        }

        let mut world = World {
            now,
            jobs: Arc::new(jobs),
            runtime,
            pending,
            cluster: RefCell::new(state),
            reserved: real_jobs..real_jobs,
            node_ids: Arc::new(node_ids),
            job_ids: Arc::new(job_ids),
            tenants,
            tenant_ids,
            client_now: snapshot.now_ms,
            departed: 0,
            newest_submit,
            fits,
            label_keys: label_keys.map(Arc::new),
            table: table.cloned(),
            view: None,
            guard: StarvationGuard::new(StarvationBound::Off),
        };
        world.reserve_unlisted(&snapshot.nodes)?;
        world.reserved = real_jobs..world.jobs.len();
        world.refresh_view();
        Ok(world)
    }

    /// Capacity a node reports as used beyond what its listed running jobs hold becomes a
    /// non-preemptible reservation; reporting more free than the listed jobs leave is an error.
    fn reserve_unlisted(&mut self, nodes: &[proto::Node]) -> Result<(), SnapshotError> {
        let mut reservations: Vec<(JobSpec, TaskPlacement)> = Vec::new();
        {
            let state = self.cluster.borrow();
            for (i, n) in nodes.iter().enumerate() {
                let node = NodeId(i as u32);
                let holders = |what: &str, computed: u64, reported: u64| {
                    bad(
                        format!("nodes[{i}].{what}"),
                        format!(
                            "reports {reported} free but the running jobs placed there leave \
                             only {computed}"
                        ),
                    )
                };
                let mut extra = TaskRequest::whole(0, 0, 0);
                if let Some(reported) = n.cpu_free_milli {
                    let computed = state.cpu_free(node);
                    if reported > computed {
                        return Err(holders("cpu_free_milli", computed, reported));
                    }
                    extra.cpu_milli = computed - reported;
                }
                if let Some(reported) = n.mem_free_mib {
                    let computed = state.mem_free(node);
                    if reported > computed {
                        return Err(holders("mem_free_mib", computed, reported));
                    }
                    extra.mem_mib = computed - reported;
                }
                if extra.cpu_milli > 0 || extra.mem_mib > 0 {
                    reservations.push((
                        self.pseudo_job(&n.name, reservations.len(), extra),
                        TaskPlacement {
                            node,
                            gpus: Vec::new(),
                        },
                    ));
                }
                for (g, reported) in n.gpu_free_milli.iter().enumerate() {
                    let computed = u32::from(state.gpu_free(node)[g]);
                    if *reported > computed {
                        return Err(holders(
                            &format!("gpu_free_milli[{g}]"),
                            u64::from(computed),
                            u64::from(*reported),
                        ));
                    }
                    let used = computed - reported;
                    if used > 0 {
                        let task = TaskRequest {
                            gpus: 1,
                            gpu_milli: used,
                            cpu_milli: 0,
                            mem_mib: 0,
                        };
                        reservations.push((
                            self.pseudo_job(&n.name, reservations.len(), task),
                            TaskPlacement {
                                node,
                                gpus: vec![g as u8],
                            },
                        ));
                    }
                }
            }
        }
        let state = self.cluster.get_mut();
        for (mut job, placement) in reservations {
            job.id = JobId(self.jobs.len() as u32);
            state
                .allocate(&job, vec![placement])
                .map_err(|e| bad("nodes", format!("reserving unlisted usage: {e}")))?;
            Arc::make_mut(&mut self.jobs).push(job);
            self.runtime.push(JobRuntime {
                state: JobState::Running,
                run_start: Some(self.now),
                first_start: Some(self.now),
                ..JobRuntime::default()
            });
        }
        Ok(())
    }

    fn pseudo_job(&self, node: &str, k: usize, task: TaskRequest) -> JobSpec {
        JobSpec {
            id: JobId(0),
            name: format!("(reserved on {node} #{k})"),
            submit: self.now,
            tasks: 1,
            task,
            gpu_types: Vec::new(),
            tenant: TenantId(0),
            priority: i32::MAX,
            qos: Qos::Guaranteed,
            preemptible: false,
            kind: JobKind::Batch,
            estimate: None,
            workload: None,
            constraints: Default::default(),
            elastic: None,
        }
    }

    /// Resolves the throughput table against the jobs as they are now (after they change).
    pub(crate) fn refresh_view(&mut self) {
        self.view = self.table.as_ref().map(|t| {
            Arc::new(ThroughputView::new(
                Arc::clone(t),
                &self.jobs,
                Arc::clone(self.cluster.get_mut().spec_arc()),
            ))
        });
    }

    /// The throughput table resolved against this world (`None`: no table configured).
    pub fn throughputs(&self) -> Option<&Arc<ThroughputView>> {
        self.view.as_ref()
    }

    /// The service's throughput table, if one is configured.
    pub fn table(&self) -> Option<&Arc<ThroughputTable>> {
        self.table.as_ref()
    }

    /// What a policy sees: this world at its `now`, with the throughput table when there is
    /// one.
    pub fn context(&self) -> DecisionContext<'_> {
        DecisionContext::new(
            self.now,
            &self.jobs,
            &self.runtime,
            &self.pending,
            &self.cluster,
        )
        .with_throughputs(self.view.as_ref())
    }
    pub fn now(&self) -> SimTime {
        self.now
    }
    pub fn cluster(&self) -> std::cell::Ref<'_, ClusterState> {
        self.cluster.borrow()
    }
    /// The cluster state itself, for what-if queries that leave it as they found it
    /// (`find_job_placement`, `explain`): no copy of a large cluster per query.
    pub fn cluster_what_if(&self) -> std::cell::RefMut<'_, ClusterState> {
        self.cluster.borrow_mut()
    }
    /// The cluster state, for a shield to try a decision on.
    pub fn cluster_clone(&self) -> ClusterState {
        self.cluster.borrow().clone()
    }
    pub fn job(&self, id: JobId) -> &JobSpec {
        &self.jobs[id.index()]
    }
    /// A snapshot job's id, by its name in the request.
    pub fn job_id(&self, name: &str) -> Option<JobId> {
        self.job_ids.get(name).copied()
    }
    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.node_ids.get(name).copied()
    }
    pub fn is_pending(&self, id: JobId) -> bool {
        self.pending.contains(&id)
    }
    /// Whether `id` is a job of the snapshot (not a reservation of unlisted usage).
    pub fn is_real(&self, id: JobId) -> bool {
        id.index() < self.jobs.len() && !self.reserved.contains(&id.index())
    }
    /// Pending jobs, oldest first.
    pub fn pending(&self) -> impl Iterator<Item = JobId> + '_ {
        self.pending.iter().copied()
    }
    pub fn tenant(&self, id: JobId) -> &str {
        &self.tenants[self.jobs[id.index()].tenant.index()]
    }
    /// Keeps only the pending jobs `keep` accepts (the others are hidden from policies).
    pub fn retain_pending(&mut self, mut keep: impl FnMut(JobId) -> bool) {
        self.pending.retain(|j| keep(*j));
    }
    /// Shows pending jobs again (after `retain_pending`), except those started since.
    pub fn set_pending(&mut self, ids: impl IntoIterator<Item = JobId>) {
        self.pending = ids
            .into_iter()
            .filter(|j| self.runtime[j.index()].state == JobState::Pending)
            .collect();
    }
    /// Applies a decision the shield accepted, in the simulator's order: victims back to the
    /// queue, elastic jobs resized (each restarts its run), placements running, shares
    /// running beside their GPU's holder.
    pub fn apply(&mut self, decision: &Decision) -> Result<(), String> {
        let state = self.cluster.get_mut();
        for v in &decision.preemptions {
            let old = state.preempt(*v).map_err(|e| e.to_string())?;
            let rt = &mut self.runtime[v.index()];
            bank_run(rt, &old, self.now);
            rt.run_start = None;
            rt.last_stop = Some(self.now);
            rt.state = JobState::Pending;
            self.pending.insert(*v);
        }
        for p in &decision.resizes {
            let job = &self.jobs[p.job.index()];
            let old = state
                .resize(job, p.tasks.clone())
                .map_err(|e| e.to_string())?;
            // The run so far counts at its old size; the new run starts now.
            let rt = &mut self.runtime[p.job.index()];
            bank_run(rt, &old, self.now);
            rt.run_start = Some(self.now);
        }
        let starts = (decision.placements.iter().map(|p| (p, false)))
            .chain(decision.shares.iter().map(|p| (p, true)));
        for (p, share) in starts {
            let job = &self.jobs[p.job.index()];
            if share {
                state
                    .allocate_shared(job, p.tasks.clone())
                    .map_err(|e| e.to_string())?;
            } else {
                state
                    .allocate(job, p.tasks.clone())
                    .map_err(|e| e.to_string())?;
            }
            let rt = &mut self.runtime[p.job.index()];
            rt.state = JobState::Running;
            rt.run_start = Some(self.now);
            rt.first_start.get_or_insert(self.now);
            self.pending.remove(&p.job);
        }
        Ok(())
    }

    /// Puts `setting` in force on this world's answers, unless it already is.
    pub fn set_starvation_bound(&mut self, setting: StarvationBound) {
        if self.guard.setting() != setting {
            self.guard = StarvationGuard::new(setting);
        }
    }

    /// The starvation guard of this world's answers.
    pub fn starvation_guard(&self) -> &StarvationGuard {
        &self.guard
    }

    pub(crate) fn starvation_guard_mut(&mut self) -> &mut StarvationGuard {
        &mut self.guard
    }

    /// A placement in the request's names.
    pub fn placement_to_proto(&self, p: &Placement) -> proto::Placement {
        proto::Placement {
            job: self.job(p.job).name.clone(),
            tasks: p
                .tasks
                .iter()
                .map(|t| proto::TaskPlacement {
                    node: self.cluster.borrow().spec().node(t.node).name.clone(),
                    gpus: t.gpus.iter().map(|g| u32::from(*g)).collect(),
                })
                .collect(),
        }
    }
}

/// Adds the run that ends `now` to `rt`'s attained service, at the size `held` gave it (an
/// elastic job's may differ from its request's). The caller sets what follows the run.
fn bank_run(rt: &mut JobRuntime, held: &lachesis_env::cluster::Allocation, now: SimTime) {
    let ran = now.saturating_sub(rt.run_start.unwrap_or(now)).ms();
    let gpu_milli = held.tasks.len() as u64 * held.task.gpu_milli_total();
    rt.attained_ms += ran;
    rt.attained_gpu_milli_ms += u128::from(ran) * u128::from(gpu_milli);
}

/// The id of tenant `name`, added on first sight.
fn intern(tenants: &mut Vec<String>, ids: &mut Map<String, TenantId>, name: &str) -> TenantId {
    if let Some(t) = ids.get(name) {
        return *t;
    }
    let t = TenantId(tenants.len() as u32);
    tenants.push(name.to_string());
    ids.insert(name.to_string(), t);
    t
}

/// A pending job that fits no node even when the cluster is empty.
fn unfit(path: &str, job: &proto::Job, spec: &JobSpec) -> SnapshotError {
    bad(
        path,
        format!(
            "job {:?} ({} x {} GPU at {} milli, {} milli-CPU, {} MiB{}) \
             does not fit on any node even when the cluster is empty",
            job.id,
            spec.tasks,
            spec.task.gpus,
            spec.task.gpu_milli,
            spec.task.cpu_milli,
            spec.task.mem_mib,
            if spec.gpu_types.is_empty() {
                String::new()
            } else {
                format!(", GPU types {}", spec.gpu_types.join("|"))
            }
        ),
    )
}

/// `why` with the node's name instead of its index.
pub fn describe(why: &Infeasible, spec: &ClusterSpec) -> String {
    use Infeasible::*;
    let node = match why {
        UnknownNode(n)
        | GpuCount { node: n, .. }
        | ModelNotAllowed { node: n }
        | NoSuchGpu { node: n, .. }
        | DuplicateGpu { node: n, .. }
        | GpuBusy { node: n, .. }
        | CpuShort { node: n, .. }
        | MemShort { node: n, .. } => Some(*n),
        _ => None,
    };
    let text = why.to_string();
    match node.filter(|n| n.index() < spec.nodes.len()) {
        Some(n) => text.replacen(
            &format!("node {n}"),
            &format!("node {:?}", spec.node(n).name),
            1,
        ),
        None => text,
    }
}

/// The label keys the snapshot's pending jobs' constraints select on (unparsable ones are
/// refused later, naming the job).
fn referenced_keys(snapshot: &proto::Snapshot) -> BTreeSet<String> {
    snapshot
        .pending
        .iter()
        .filter_map(|j| Constraints::parse(&j.constraints).ok())
        .flat_map(|c| c.keys().map(str::to_string).collect::<Vec<_>>())
        .collect()
}

/// The cluster the snapshot's nodes form, every label kept; or, where the nodes have more
/// distinct label sets than feasibility indexes (per-node labels such as a hostname), only
/// the labels whose keys are in `referenced`, returned beside the cluster.
fn build_spec(
    nodes: &[proto::Node],
    referenced: &BTreeSet<String>,
) -> Result<(ClusterSpec, Option<BTreeSet<String>>), SnapshotError> {
    let sets: BTreeSet<std::collections::BTreeMap<&String, &String>> =
        nodes.iter().map(|n| n.labels.iter().collect()).collect();
    if sets.len() <= lachesis_env::cluster::MAX_LABEL_CLASSES {
        return Ok((build_spec_with(nodes, None)?, None));
    }
    Ok((
        build_spec_with(nodes, Some(referenced))?,
        Some(referenced.clone()),
    ))
}

fn build_spec_with(
    nodes: &[proto::Node],
    keep: Option<&BTreeSet<String>>,
) -> Result<ClusterSpec, SnapshotError> {
    if nodes.is_empty() {
        return Err(bad("nodes", "the snapshot has no nodes"));
    }
    if nodes.len() > MAX_SNAPSHOT_NODES {
        return Err(bad(
            "nodes",
            format!("{} nodes, at most {MAX_SNAPSHOT_NODES}", nodes.len()),
        ));
    }
    let mut models: Vec<GpuModel> = Vec::new();
    let mut racks = Interner::default();
    let mut domains = Interner::default();
    let mut names: Map<&str, usize> =
        Map::with_capacity_and_hasher(nodes.len(), Default::default());
    let mut specs = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        let path = |field: &str| format!("nodes[{i}].{field}");
        check_name(&n.name, || path("name"))?;
        if let Some(first) = names.insert(n.name.as_str(), i) {
            return Err(bad(
                path("name"),
                format!("node {:?} is also nodes[{first}]", n.name),
            ));
        }
        if n.gpus > lachesis_env::cluster::MAX_GPUS_PER_NODE {
            return Err(bad(
                path("gpus"),
                format!(
                    "{} GPUs, at most {}",
                    n.gpus,
                    lachesis_env::cluster::MAX_GPUS_PER_NODE
                ),
            ));
        }
        let gpu_model = match (n.gpus, n.gpu_model.trim()) {
            (0, "") => None,
            (0, m) => {
                return Err(bad(
                    path("gpu_model"),
                    format!("model {m:?} given for a node with 0 GPUs"),
                ));
            }
            (g, "") => {
                return Err(bad(
                    path("gpu_model"),
                    format!("missing for a node with {g} GPUs"),
                ));
            }
            (_, m) => {
                check_name(m, || path("gpu_model"))?;
                Some(model_id(&mut models, m))
            }
        };
        if !n.gpu_free_milli.is_empty() && n.gpu_free_milli.len() != n.gpus as usize {
            return Err(bad(
                path("gpu_free_milli"),
                format!(
                    "{} entries for a node with {} GPUs (one per GPU, or none)",
                    n.gpu_free_milli.len(),
                    n.gpus
                ),
            ));
        }
        for (g, f) in n.gpu_free_milli.iter().enumerate() {
            if *f > GPU_MILLI {
                return Err(bad(
                    format!("nodes[{i}].gpu_free_milli[{g}]"),
                    format!("{f} milli-GPU free, a GPU has {GPU_MILLI}"),
                ));
            }
        }
        if let Some(f) = n.cpu_free_milli.filter(|f| *f > n.cpu_milli) {
            return Err(bad(
                path("cpu_free_milli"),
                format!("{f} free of a capacity of {}", n.cpu_milli),
            ));
        }
        if let Some(f) = n.mem_free_mib.filter(|f| *f > n.mem_mib) {
            return Err(bad(
                path("mem_free_mib"),
                format!("{f} free of a capacity of {}", n.mem_mib),
            ));
        }
        if n.labels.len() > MAX_LABELS {
            return Err(bad(
                path("labels"),
                format!("{} labels, at most {MAX_LABELS}", n.labels.len()),
            ));
        }
        for (k, v) in &n.labels {
            check_name(k, || path("labels"))?;
            if v.len() > MAX_NAME_BYTES {
                return Err(bad(
                    format!("nodes[{i}].labels[{k}]"),
                    format!("longer than {MAX_NAME_BYTES} bytes"),
                ));
            }
        }
        let rack = n.labels.get("rack").map_or("default", String::as_str);
        let domain = n.labels.get("nvlink_domain").unwrap_or(&n.name);
        specs.push(NodeSpec {
            name: n.name.clone(),
            gpu_model,
            gpus: n.gpus,
            cpu_milli: n.cpu_milli,
            mem_mib: n.mem_mib,
            rack: racks.id(rack),
            nvlink_domain: domains.id(domain),
            labels: n
                .labels
                .iter()
                .filter(|(k, _)| keep.is_none_or(|keep| keep.contains(*k)))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        });
    }
    if models.len() > lachesis_env::cluster::MAX_GPU_MODELS {
        return Err(bad(
            "nodes",
            format!(
                "{} distinct GPU models, at most {}",
                models.len(),
                lachesis_env::cluster::MAX_GPU_MODELS
            ),
        ));
    }
    ClusterSpec::new("snapshot", models, specs, racks.names, domains.names)
        .map_err(|e| bad("nodes", e.to_string()))
}

/// The model's index, adding it (from the catalog, or with V100-class defaults for a model the
/// catalog does not know) on first sight. Names match case-insensitively.
fn model_id(models: &mut Vec<GpuModel>, name: &str) -> GpuModelId {
    if let Some(i) = models
        .iter()
        .position(|m| m.name.eq_ignore_ascii_case(name))
    {
        return GpuModelId(i as u32);
    }
    let model = GpuModel::from_catalog(name).unwrap_or_else(|| GpuModel {
        name: name.to_string(),
        speed: 1.0,
        mem_gib: 16,
        idle_watts: 40.0,
        busy_watts: 300.0,
    });
    models.push(model);
    GpuModelId(models.len() as u32 - 1)
}

/// Refuses GPU model names the catalog does not know (`lachesis_env::gpu::GpuModel`): nodes'
/// `gpu_model` and jobs' `gpu_types`, in the snapshot (`delta: None`) or in a session's delta.
/// The service applies it to the requests clients compose (`Decide`, `Score`, `Explain`)
/// unless `allow_unknown_gpu_models` is set: a misspelt model (`V100x`) would otherwise be a
/// model of its own at V100 speed, and a job asking for it would wait forever. Building a
/// world (`World::build`) accepts such names as V100-class models, for the adapters that
/// name models themselves (the Kubernetes extender's labels and `unlabelled`, the probe).
pub fn check_gpu_model_names(
    snapshot: Option<&proto::Snapshot>,
    delta: Option<&proto::SnapshotDelta>,
) -> Result<(), SnapshotError> {
    // Names already found in the catalog: a snapshot repeats a few names many times.
    let mut known: Vec<String> = Vec::new();
    let mut check = |name: &str, path: &dyn Fn() -> String| -> Result<(), SnapshotError> {
        let name = name.trim();
        if name.is_empty() || known.iter().any(|k| k.eq_ignore_ascii_case(name)) {
            return Ok(());
        }
        if GpuModel::canonical_name(name).is_none() {
            return Err(SnapshotError {
                path: path(),
                message: unknown_gpu_model(name),
            });
        }
        known.push(name.to_string());
        Ok(())
    };
    if let Some(snapshot) = snapshot {
        for (i, n) in snapshot.nodes.iter().enumerate() {
            check(&n.gpu_model, &|| format!("snapshot.nodes[{i}].gpu_model"))?;
        }
        let running = snapshot.running.iter().enumerate().filter_map(|(i, r)| {
            r.job
                .as_ref()
                .map(|j| (format!("snapshot.running[{i}].job"), j))
        });
        let pending = (snapshot.pending.iter().enumerate())
            .map(|(i, j)| (format!("snapshot.pending[{i}]"), j));
        for (at, job) in running.chain(pending) {
            for (g, t) in job.gpu_types.iter().enumerate() {
                check(t, &|| format!("{at}.gpu_types[{g}]"))?;
            }
        }
    }
    if let Some(delta) = delta {
        for (i, job) in delta.submitted.iter().enumerate() {
            for (g, t) in job.gpu_types.iter().enumerate() {
                check(t, &|| format!("delta.submitted[{i}].gpu_types[{g}]"))?;
            }
        }
    }
    Ok(())
}

/// Why `name` is refused: the catalog's nearest names, and the opt-in.
fn unknown_gpu_model(name: &str) -> String {
    let closest = GpuModel::closest_catalog_names(name, 3);
    let hint = if closest.is_empty() {
        let known: Vec<&str> = GpuModel::catalog_names().collect();
        format!("known: {}", known.join(", "))
    } else {
        format!("closest known: {}", closest.join(", "))
    };
    format!(
        "unknown GPU model {name:?}, not in the catalog ({hint}); to take models outside the \
         catalog as V100-class models, set allow_unknown_gpu_models = true in serve.toml"
    )
}

/// Names in first-seen order with a lookup (topology tables can have one entry per node).
#[derive(Default)]
struct Interner {
    names: Vec<String>,
    ids: Map<String, u32>,
}

impl Interner {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(i) = self.ids.get(name) {
            return *i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), i);
        i
    }
}

/// A non-empty name of bounded length; `path` is only built for the error.
fn check_name(name: &str, path: impl FnOnce() -> String) -> Result<(), SnapshotError> {
    if name.trim().is_empty() {
        return Err(bad(path(), "empty"));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(bad(path(), format!("longer than {MAX_NAME_BYTES} bytes")));
    }
    Ok(())
}

/// A snapshot job as the simulator's `JobSpec` (id 0, tenant as given), submitted `wait_ms`
/// before `now`, its workload read as `workloads` says; the error names `path` (e.g.
/// `pending[3]`).
pub fn job_from_proto(
    job: &proto::Job,
    pending_index: usize,
    tenant: TenantId,
    now: SimTime,
    workloads: Workloads<'_>,
) -> Result<JobSpec, SnapshotError> {
    job_spec(
        job,
        EntryPath::Pending(pending_index),
        JobId(0),
        tenant,
        now,
        workloads,
    )
}

/// How a job's `workload` is read.
#[derive(Debug, Clone, Copy)]
pub enum Workloads<'a> {
    /// Against the service's table: a name the table lacks is refused, and any name when
    /// there is no table (`None`).
    Table(Option<&'a ThroughputTable>),
    /// Kept as given, unchecked (replaying a decision log, where only the name is carried).
    AsGiven,
}

/// `running[i].tasks` (formatted only for errors).
#[derive(Debug, Clone, Copy)]
struct RunTasks(usize);

impl std::fmt::Display for RunTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "running[{}].tasks", self.0)
    }
}

/// Where a job sits in the request (formatted only for errors).
#[derive(Debug, Clone, Copy)]
enum EntryPath {
    Running(usize),
    Pending(usize),
    /// `delta.submitted[i]` (errors say `snapshot.`; `delta` rewrites the prefix).
    Submitted(usize),
}

impl std::fmt::Display for EntryPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EntryPath::Running(i) => write!(f, "running[{i}].job"),
            EntryPath::Pending(i) => write!(f, "pending[{i}]"),
            EntryPath::Submitted(i) => write!(f, "submitted[{i}]"),
        }
    }
}

fn job_spec(
    job: &proto::Job,
    path: EntryPath,
    id: JobId,
    tenant: TenantId,
    now: SimTime,
    workloads: Workloads<'_>,
) -> Result<JobSpec, SnapshotError> {
    let field = |f: &str| format!("{path}.{f}");
    check_name(&job.id, || field("id"))?;
    if job.tenant.len() > MAX_NAME_BYTES {
        return Err(bad(
            field("tenant"),
            format!("longer than {MAX_NAME_BYTES} bytes"),
        ));
    }
    let tasks = job.tasks.max(1);
    if tasks > MAX_TASKS {
        return Err(bad(
            field("tasks"),
            format!("{tasks} tasks, at most {MAX_TASKS}"),
        ));
    }
    if job.gpus_per_task > lachesis_env::cluster::MAX_GPUS_PER_NODE {
        return Err(bad(
            field("gpus_per_task"),
            format!(
                "{} GPUs per task, no node has more than 64",
                job.gpus_per_task
            ),
        ));
    }
    let gpu_milli = match (job.gpus_per_task, job.gpu_milli) {
        (0, 0) => 0,
        (0, m) => {
            return Err(bad(
                field("gpu_milli"),
                format!("{m} for a job of 0 GPUs per task"),
            ));
        }
        (_, 0) => GPU_MILLI,
        (_, m) => m,
    };
    let task = TaskRequest {
        gpus: job.gpus_per_task,
        gpu_milli,
        cpu_milli: job.cpu_milli,
        mem_mib: job.mem_mib,
    };
    task.validate().map_err(|m| bad(field("gpu_milli"), m))?;
    let qos = match job.qos.trim() {
        "" if job.preemptible => Qos::BestEffort,
        "" => Qos::Guaranteed,
        q => Qos::parse(q).ok_or_else(|| {
            bad(
                field("qos"),
                format!(
                    "unknown QoS {q:?} (guaranteed, latency-sensitive, burstable, best-effort)"
                ),
            )
        })?,
    };
    let kind = match job.kind.trim() {
        "" => JobKind::Training,
        k => JobKind::parse(k).ok_or_else(|| {
            bad(
                field("kind"),
                format!("unknown kind {k:?} (training, inference, batch)"),
            )
        })?,
    };
    for (g, t) in job.gpu_types.iter().enumerate() {
        check_name(t, || format!("{path}.gpu_types[{g}]"))?;
    }
    if job.constraints.len() > MAX_NAME_BYTES * 4 {
        return Err(bad(
            field("constraints"),
            format!("longer than {} bytes", MAX_NAME_BYTES * 4),
        ));
    }
    let mut constraints =
        Constraints::parse(&job.constraints).map_err(|m| bad(field("constraints"), m))?;
    constraints.distinct_nodes = job.distinct_nodes && tasks > 1;
    let estimate = match job.estimate_ms {
        Some(0) => {
            return Err(bad(
                field("estimate_ms"),
                "0 ms: omit the field when there is no estimate",
            ));
        }
        e => e.map(SimTime),
    };
    let workload = match job.workload.trim() {
        "" => None,
        name if task.gpus == 0 => {
            return Err(bad(
                field("workload"),
                format!("workload {name:?} given for a job of 0 GPUs"),
            ));
        }
        name => match workloads {
            Workloads::AsGiven => WorkloadType::new(name),
            Workloads::Table(None) => {
                return Err(bad(
                    field("workload"),
                    format!(
                        "workload {name:?} given, but the service has no throughput table \
                         (serve.toml `throughputs`)"
                    ),
                ));
            }
            Workloads::Table(Some(table)) => {
                let id = table.workload(name).map_err(|_| {
                    let known: Vec<&str> = table.workloads().iter().map(|w| w.as_str()).collect();
                    bad(
                        field("workload"),
                        format!(
                            "workload {name:?} is not in throughput table {} (it has {})",
                            table.name(),
                            short_list(&known, 12)
                        ),
                    )
                })?;
                Some(table.workload_name(id).clone())
            }
        },
    };
    let elastic = match (job.min_gpus, job.max_gpus) {
        (0, 0) => None,
        (min_gpus, max_gpus) => {
            let e = Elastic { min_gpus, max_gpus };
            e.validate(tasks, &task)
                .map_err(|m| bad(field("min_gpus"), m))?;
            Some(e)
        }
    };
    Ok(JobSpec {
        id,
        name: job.id.clone(),
        submit: now.saturating_sub(SimTime(job.wait_ms)),
        tasks,
        task,
        gpu_types: job.gpu_types.clone(),
        tenant,
        priority: job.priority,
        qos,
        preemptible: job.preemptible,
        kind,
        estimate,
        workload,
        constraints,
        elastic,
    })
}

/// `items` joined by ", ", the first `at_most` of them and how many more.
fn short_list(items: &[&str], at_most: usize) -> String {
    let mut text = items[..items.len().min(at_most)].join(", ");
    if items.len() > at_most {
        text.push_str(&format!(" and {} more", items.len() - at_most));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catalog names pass in any case and alias; anything else is refused at its field, in a
    /// snapshot's nodes, running and pending jobs, and a delta's new jobs. `World::build`
    /// still takes it (as a V100-class model) for the adapters.
    #[test]
    fn gpu_model_names_outside_the_catalog_are_named() {
        let node = |model: &str| proto::Node {
            name: format!("n-{model}"),
            gpu_model: model.into(),
            gpus: 8,
            cpu_milli: 64_000,
            mem_mib: 512_000,
            ..Default::default()
        };
        let job = |id: &str, types: &[&str]| proto::Job {
            id: id.into(),
            gpus_per_task: 1,
            gpu_types: types.iter().map(|t| t.to_string()).collect(),
            ..Default::default()
        };
        let mut snap = proto::Snapshot {
            nodes: vec![node("V100"), node("a100-80g"), node("RTX2080TI")],
            pending: vec![job("p0", &["v100", "A100"])],
            running: vec![proto::RunningJob {
                job: Some(job("r0", &[])),
                tasks: vec![proto::TaskPlacement {
                    node: "n-V100".into(),
                    gpus: vec![0],
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        check_gpu_model_names(Some(&snap), None).unwrap();
        let at = |snap: &proto::Snapshot, delta: Option<&proto::SnapshotDelta>| {
            check_gpu_model_names(Some(snap), delta).unwrap_err()
        };
        snap.running[0].job.as_mut().unwrap().gpu_types = vec!["K8O".into()];
        let e = at(&snap, None);
        assert_eq!(e.path, "snapshot.running[0].job.gpu_types[0]");
        assert!(e.message.contains("closest known: K80"), "{e}");
        snap.running[0].job.as_mut().unwrap().gpu_types.clear();
        snap.nodes.push(node("TPUv4-pod"));
        let e = at(&snap, None);
        assert_eq!(e.path, "snapshot.nodes[3].gpu_model");
        // Nothing near: the whole catalog is listed.
        assert!(e.message.contains("known: K80, P100"), "{e}");
        // The world itself takes it (the Kubernetes extender and the probe rely on that).
        assert!(World::build(&snap).is_ok());
        snap.nodes.pop();
        let delta = proto::SnapshotDelta {
            submitted: vec![job("d0", &["A100"]), job("d1", &["H100", "H10O"])],
            ..Default::default()
        };
        let e = check_gpu_model_names(None, Some(&delta)).unwrap_err();
        assert_eq!(e.path, "delta.submitted[1].gpu_types[1]");
        assert!(e.message.contains("H100"), "{e}");
    }

    /// 70 nodes, each with its own hostname label (70 label sets, more than feasibility
    /// indexes) and a zone: the world keeps only the zone, which a pending job selects on, and
    /// best fit places the job in that zone. Bad constraint text names its field.
    #[test]
    fn constraints_reach_feasibility_and_label_sets_are_trimmed() {
        let node = |i: usize| proto::Node {
            name: format!("n{i}"),
            gpu_model: "A100".into(),
            gpus: 8,
            cpu_milli: 64_000,
            mem_mib: 512_000,
            labels: [
                ("kubernetes.io/hostname".to_string(), format!("n{i}")),
                (
                    "zone".to_string(),
                    if i == 41 { "b" } else { "a" }.to_string(),
                ),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let job = proto::Job {
            id: "p".into(),
            tasks: 2,
            gpus_per_task: 1,
            constraints: "zone=b".into(),
            ..Default::default()
        };
        let mut snap = proto::Snapshot {
            nodes: (0..70).map(node).collect(),
            pending: vec![job],
            ..Default::default()
        };
        let world = World::build(&snap).unwrap();
        assert_eq!(
            world.label_keys.as_deref(),
            Some(&BTreeSet::from(["zone".to_string()]))
        );
        let placed = world
            .context()
            .planner()
            .place(world.job(JobId(0)), FitStrategy::BestFit)
            .unwrap();
        assert!(
            placed
                .iter()
                .all(|t| t.node == world.node_id("n41").unwrap())
        );
        // Distinct nodes: zone b has one node, so a 2-task distinct gang never fits.
        snap.pending[0].distinct_nodes = true;
        let e = World::build(&snap).unwrap_err().to_string();
        assert!(
            e.contains("pending[0]") && e.contains("does not fit"),
            "{e}"
        );
        snap.pending[0].constraints = "zone=[b]".into();
        let e = World::build(&snap).unwrap_err().to_string();
        assert!(e.starts_with("snapshot.pending[0].constraints:"), "{e}");
    }

    #[test]
    fn idle_time_and_preemptions_set_the_last_stop() {
        let mut snap = crate::synthetic::snapshot(4, 3, 0.5, 7);
        snap.now_ms = 50_000_000;
        snap.pending[0].wait_ms = 40_000_000;
        snap.pending[0].attained_ms = 3_600_000;
        snap.pending[0].idle_ms = Some(30_000_000);
        snap.pending[1].idle_ms = None;
        let mut world = World::build(&snap).unwrap();
        let now = world.now();
        let ctx = world.context();
        let stop = |name: &str| ctx.runtime(world.job_id(name).unwrap()).last_stop;
        assert_eq!(
            stop(&snap.pending[0].id),
            Some(now.saturating_sub(SimTime(30_000_000)))
        );
        assert_eq!(stop(&snap.pending[1].id), None, "never ran, or unknown");
        let p = ctx
            .pending()
            .find(|p| p.spec.id == world.job_id(&snap.pending[0].id).unwrap())
            .unwrap();
        assert_eq!(p.idle(), SimTime(30_000_000));
        // A victim of a grouped decision: its run counts, and it stopped now.
        let victim = world
            .job_id(&snap.running[0].job.as_ref().unwrap().id)
            .unwrap();
        let before = *world.context().runtime(victim);
        world
            .apply(&Decision {
                preemptions: vec![victim],
                ..Decision::default()
            })
            .unwrap();
        let after = *world.context().runtime(victim);
        let ran = u128::from(snap.running[0].run_ms);
        assert_eq!(after.last_stop, Some(now));
        assert_eq!(
            after.attained_gpu_milli_ms - before.attained_gpu_milli_ms,
            ran * u128::from(world.job(victim).gpu_milli_total())
        );
    }
}
