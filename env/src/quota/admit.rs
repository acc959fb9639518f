//! Admission of a trace's jobs to the queues of a quota tree, below every policy: which queue
//! a job belongs to, which flavor each part of a placement is charged to, and the books of
//! what each running job holds. The simulator asks it before every start, share and growth,
//! and keeps its books on every start, finish, preemption and resize.
//!
//! Rules (docs/quotas.md):
//! - A tenant's jobs go to the queue of the same name; a tenant without one to the queue
//!   `default` where the file has it; otherwise the run is refused, naming the tenant.
//! - Per resource, a node's capacity is charged to the flavor named as its GPU model (case
//!   ignored) where the file gives any quota of that resource for that model, else to
//!   `default` (CPU-only nodes always). A resource the file never names is not counted.
//! - A job is admitted when its queue has available (nominal, or borrowed where allowed) every
//!   flavor-resource its placement asks; a gang over nodes of two flavors asks both.

use super::{Blocked, FlavorResource, NodeId as QueueId, NodeKind, QuotaTree, Resource, Usage};
use crate::cluster::{ClusterSpec, TaskPlacement};
use crate::job::{JobSpec, TaskRequest, Trace};
use crate::units::{GpuModelId, JobId};
use std::collections::HashMap;
use std::sync::Arc;

/// The flavor of resources not told apart by GPU model.
pub const DEFAULT_FLAVOR: &str = "default";
/// The queue of the tenants that have none of their own name.
pub const DEFAULT_QUEUE: &str = "default";

/// The resources a quota counts, in the order [`Charge`] indexes them.
const RESOURCES: [Resource; 3] = [Resource::Gpu, Resource::Cpu, Resource::Memory];

/// Per resource (`RESOURCES` order): the flavor-resource charged, `None` where the file does
/// not count the resource.
type Charge = [Option<FlavorResource>; 3];

/// A job's request, as quota amounts per flavor-resource.
pub type Amounts = Vec<(FlavorResource, i64)>;

/// The quota tree of a run, its tenants' queues and the running jobs' charges.
#[derive(Debug, Clone)]
pub struct Admission {
    tree: QuotaTree,
    spec: Arc<ClusterSpec>,
    /// How the quotas were given (`equal` or the file's path), for reports.
    label: String,
    /// By tenant id: its queue; `None` for a tenant with no job in the trace.
    queues: Vec<Option<QueueId>>,
    /// By GPU model id: where each resource of its nodes is charged.
    by_model: Vec<Charge>,
    /// Where each resource of a CPU-only node is charged.
    cpu_only: Charge,
    /// The node kinds of the cluster (GPU model, or `None` for CPU-only), each once.
    kinds: Vec<Option<GpuModelId>>,
    /// What each running job holds, exactly as charged (never iterated: a fixed fast hash).
    charged: HashMap<JobId, Amounts, foldhash::fast::FixedState>,
    /// Charges and discharges so far: the books are unchanged while it is.
    changes: u64,
    /// Whether some queue has a preemption policy other than `Never`.
    preempts: bool,
}

/// Quotas that cannot serve a run: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// The quota file cannot be read.
    #[error("{path}: {message}")]
    Read { path: String, message: String },
    /// The quota file is invalid (its error names file, line, column and field).
    #[error(transparent)]
    File(#[from] super::QuotaFileError),
    /// The quotas do not fit the trace: a tenant without a queue, or named as a cohort (or,
    /// under `equal`, a tenant named as the rule's cohort).
    #[error("{origin}: {message}")]
    Trace { origin: String, message: String },
}

/// The quotas `setting` names for `trace` on `spec`: `equal` (`Admission::equal`), or the
/// path of a quota file (`super::parse_quota_toml`).
pub fn load_admission(
    setting: &str,
    trace: &Trace,
    spec: &Arc<ClusterSpec>,
) -> Result<Admission, AdmissionError> {
    if setting == "equal" {
        return Admission::equal(trace, spec);
    }
    let text = std::fs::read_to_string(setting).map_err(|e| AdmissionError::Read {
        path: setting.to_string(),
        message: format!("cannot read the quota file: {e}"),
    })?;
    let tree = super::parse_quota_toml(&text, setting)?;
    Admission::new(tree, setting, trace, spec)
}

impl Admission {
    /// Admission of `trace`'s jobs on `spec` under `tree` (whose origin, `label`, names it in
    /// errors): every tenant with a job must map to a queue.
    pub fn new(
        tree: QuotaTree,
        label: &str,
        trace: &Trace,
        spec: &Arc<ClusterSpec>,
    ) -> Result<Admission, AdmissionError> {
        let fail = |message: String| AdmissionError::Trace {
            origin: label.to_string(),
            message,
        };
        let mut first_job: Vec<Option<&JobSpec>> = vec![None; trace.tenants().len()];
        for j in trace.jobs() {
            first_job[j.tenant.index()].get_or_insert(j);
        }
        let fallback = tree
            .node(DEFAULT_QUEUE)
            .filter(|&n| tree.spec(n).kind == NodeKind::Queue);
        let mut queues = Vec::with_capacity(first_job.len());
        for (name, job) in trace.tenants().iter().zip(&first_job) {
            let Some(job) = job else {
                queues.push(None);
                continue;
            };
            let queue = match tree.node(name) {
                Some(n) if tree.spec(n).kind == NodeKind::Queue => n,
                Some(_) => {
                    return Err(fail(format!(
                        "tenant `{name}` (job {}) is the name of a cohort; jobs go to queues",
                        job.name
                    )));
                }
                None => fallback.ok_or_else(|| {
                    fail(format!(
                        "tenant `{name}` (job {}) has no queue: add a queue named `{name}`, or \
                         a queue `default` for the tenants without one",
                        job.name
                    ))
                })?,
            };
            queues.push(Some(queue));
        }
        let charge = |model: Option<&str>| -> Charge {
            RESOURCES.map(|r| {
                let frs = tree.flavor_resources();
                if !frs.iter().any(|fr| fr.resource == r) {
                    return None;
                }
                let named = model.and_then(|m| {
                    frs.iter()
                        .find(|fr| fr.resource == r && fr.flavor.eq_ignore_ascii_case(m))
                });
                Some(
                    named
                        .cloned()
                        .unwrap_or_else(|| FlavorResource::new(DEFAULT_FLAVOR, r)),
                )
            })
        };
        let by_model = spec.models.iter().map(|m| charge(Some(&m.name))).collect();
        let mut kinds: Vec<Option<GpuModelId>> = Vec::new();
        for n in &spec.nodes {
            if !kinds.contains(&n.gpu_model) {
                kinds.push(n.gpu_model);
            }
        }
        let tree_preempts = tree.queues().any(|q| !tree.spec(q).preemption.is_never());
        Ok(Admission {
            cpu_only: charge(None),
            tree,
            spec: Arc::clone(spec),
            label: label.to_string(),
            queues,
            by_model,
            kinds,
            charged: HashMap::default(),
            changes: 0,
            preempts: tree_preempts,
        })
    }

    /// The default rule (`--quotas equal`): the tenants with a job in `trace`, in the trace's
    /// tenant order, each get a queue of its name with an equal share of every flavor-resource
    /// of `spec` (`super::equal_shares`: one cohort, borrowing and lending unlimited).
    pub fn equal(trace: &Trace, spec: &Arc<ClusterSpec>) -> Result<Admission, AdmissionError> {
        let mut has_jobs = vec![false; trace.tenants().len()];
        for j in trace.jobs() {
            has_jobs[j.tenant.index()] = true;
        }
        let tenants: Vec<String> = trace
            .tenants()
            .iter()
            .zip(&has_jobs)
            .filter(|(_, has)| **has)
            .map(|(t, _)| t.clone())
            .collect();
        let mut capacity: Vec<(FlavorResource, i64)> = Vec::new();
        for n in &spec.nodes {
            let flavor = n
                .gpu_model
                .map_or(DEFAULT_FLAVOR, |m| spec.model(m).name.as_str());
            let gpu_milli = u64::from(n.gpus) * u64::from(crate::units::GPU_MILLI);
            for (r, v) in RESOURCES
                .into_iter()
                .zip([gpu_milli, n.cpu_milli, n.mem_mib])
            {
                let fr = FlavorResource::new(flavor, r);
                let v = i64::try_from(v).unwrap_or(i64::MAX);
                match capacity.iter_mut().find(|(f, _)| *f == fr) {
                    Some((_, total)) => *total = total.saturating_add(v),
                    None => capacity.push((fr, v)),
                }
            }
        }
        capacity.retain(|(_, v)| *v > 0);
        let tree = QuotaTree::new(super::equal_shares(&tenants, &capacity)).map_err(|e| {
            AdmissionError::Trace {
                origin: "equal".into(),
                message: e.to_string(),
            }
        })?;
        Admission::new(tree, "equal", trace, spec)
    }

    /// The tree, with its usage now.
    pub fn tree(&self) -> &QuotaTree {
        &self.tree
    }

    /// How the quotas were given: `equal`, or the file's path.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The queue of `job`'s tenant (`None` only for a job not of the trace it was built for).
    pub fn queue(&self, job: &JobSpec) -> Option<QueueId> {
        self.queues.get(job.tenant.index()).copied().flatten()
    }

    fn charge_of(&self, kind: Option<GpuModelId>) -> &Charge {
        kind.and_then(|m| self.by_model.get(m.index()))
            .unwrap_or(&self.cpu_only)
    }

    /// What `job` on `tasks` asks of its queue, per flavor-resource (each task is `job.task`).
    pub fn amounts(&self, job: &JobSpec, tasks: &[TaskPlacement]) -> Amounts {
        let mut out: Amounts = Vec::new();
        for t in tasks {
            let kind = self
                .spec
                .nodes
                .get(t.node.index())
                .and_then(|n| n.gpu_model);
            add_task(&mut out, self.charge_of(kind), &job.task, 1);
        }
        out
    }

    /// Whether `job`'s queue admits `amounts` now; otherwise what blocks it.
    pub fn check(&self, job: &JobSpec, amounts: &[(FlavorResource, i64)]) -> Result<(), Blocked> {
        match self.queue(job) {
            Some(q) => self.tree.admit_check(q, amounts),
            None => Ok(()),
        }
    }

    /// Whether `job`'s queue admits its whole request now on some node kind it may use (each
    /// of the cluster's GPU models its `gpu_types` allow, in the cluster's order, and for a
    /// CPU-only job every kind); otherwise what blocks it on the first kind. What a policy
    /// asks before spending a placement on the job.
    pub fn admits(&self, job: &JobSpec) -> Result<(), Blocked> {
        self.admits_in(None, job)
    }

    /// Whether `job`'s queue could admit its whole request on some node kind it may use with
    /// nothing in use (Kueue's potential available: nominal plus what it may borrow). A job
    /// for which this is `false` can never start.
    pub fn could_ever_admit(&self, job: &JobSpec) -> bool {
        let Some(q) = self.queue(job) else {
            return true;
        };
        self.kind_amounts(job).any(|amounts| {
            amounts
                .iter()
                .all(|(fr, v)| *v <= self.tree.potential_available(q, fr))
        })
    }

    /// `job`'s whole request on each node kind it may use, in the cluster's order.
    fn kind_amounts<'s>(&'s self, job: &'s JobSpec) -> impl Iterator<Item = Amounts> + 's {
        self.kinds_of(job).map(|(_, amounts)| amounts)
    }

    /// Each node kind `job` may use (cluster order), with its whole request there.
    fn kinds_of<'s>(
        &'s self,
        job: &'s JobSpec,
    ) -> impl Iterator<Item = (Option<GpuModelId>, Amounts)> + 's {
        let allowed = self.spec.model_mask(&job.gpu_types);
        self.kinds
            .iter()
            .filter(move |kind| match kind {
                Some(m) => job.task.gpus == 0 || allowed & (1u64 << m.0) != 0,
                None => job.task.gpus == 0,
            })
            .map(move |&kind| {
                let mut amounts = Vec::new();
                add_task(&mut amounts, self.charge_of(kind), &job.task, job.tasks);
                (kind, amounts)
            })
    }

    /// How many times the books changed (charges and discharges): equal counts, same books.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// What `job` holds now: a running job's charge, or a pending job's reservation.
    pub fn held(&self, job: &JobSpec) -> Option<&Amounts> {
        self.charged.get(&job.id)
    }

    /// Whether some queue has a preemption policy other than `Never`.
    pub fn preempts(&self) -> bool {
        self.preempts
    }

    /// `books` (or the tree's usage) less what `job` holds, where it holds anything: a
    /// pending job's reservation is its own room.
    fn without_own(&self, books: Option<&Usage>, job: &JobSpec) -> Option<Usage> {
        let held = self.charged.get(&job.id)?;
        let q = self.queue(job)?;
        let mut own = books.cloned().unwrap_or_else(|| self.tree.books());
        for (fr, v) in held {
            self.tree.remove_usage_in(&mut own, q, fr, *v);
        }
        Some(own)
    }

    /// `job`'s whole request on each node kind it may use, its queue's GPU flavors first in
    /// the order its quotas list them (Kueue's flavor order), then the cluster's order.
    pub fn kinds_in_flavor_order(&self, job: &JobSpec) -> Vec<(Option<GpuModelId>, Amounts)> {
        let listed: Vec<&FlavorResource> = self
            .queue(job)
            .map(|q| self.tree.spec(q).quotas.iter().map(|(fr, _)| fr).collect())
            .unwrap_or_default();
        let rank = |kind: Option<GpuModelId>| {
            let fr = self.charge_of(kind)[0].as_ref();
            fr.and_then(|fr| listed.iter().position(|l| *l == fr))
                .unwrap_or(usize::MAX)
        };
        let mut out: Vec<(Option<GpuModelId>, Amounts)> = self.kinds_of(job).collect();
        out.sort_by_key(|(kind, _)| rank(*kind));
        out
    }

    /// `admits`, with the usage of `books` where given (a plan's), else the tree's.
    fn admits_in(&self, books: Option<&Usage>, job: &JobSpec) -> Result<(), Blocked> {
        let Some(q) = self.queue(job) else {
            return Ok(());
        };
        let own = self.without_own(books, job);
        let books = own.as_ref().or(books);
        let mut first = None;
        for amounts in self.kind_amounts(job) {
            match self.check_in(books, q, &amounts) {
                Ok(()) => return Ok(()),
                Err(b) => {
                    first.get_or_insert(b);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn check_in(
        &self,
        books: Option<&Usage>,
        q: QueueId,
        amounts: &[(FlavorResource, i64)],
    ) -> Result<(), Blocked> {
        match books {
            Some(b) => self.tree.admit_check_in(b, q, amounts),
            None => self.tree.admit_check(q, amounts),
        }
    }

    /// A scratch copy of the books for building one decision: the starts a policy plans are
    /// charged to it, so that each later one sees them. The usage is copied (one vector) on
    /// the first charge only.
    pub fn plan(&self) -> QuotaPlan<'_> {
        QuotaPlan {
            admission: self,
            books: None,
        }
    }

    /// Books `amounts` to `job`'s queue (a start, a share, a resize's new size, or a pending
    /// job's quota reservation after preemption), in place of what it held.
    pub fn charge(&mut self, job: &JobSpec, amounts: Amounts) {
        let Some(q) = self.queue(job) else {
            return;
        };
        self.discharge(job);
        self.changes += 1;
        for (fr, v) in &amounts {
            self.tree.add_usage(q, fr, *v);
        }
        self.charged.insert(job.id, amounts);
    }

    /// Takes back all `job` was charged (it finished, was preempted, or is resized); what it
    /// held, if anything.
    pub fn discharge(&mut self, job: &JobSpec) -> Option<Amounts> {
        let amounts = self.charged.remove(&job.id)?;
        self.changes += 1;
        if let Some(q) = self.queue(job) {
            for (fr, v) in &amounts {
                self.tree.remove_usage(q, fr, *v);
            }
        }
        Some(amounts)
    }
}

/// Adds `tasks` tasks of `task` charged as `charge` to `out`.
fn add_task(out: &mut Amounts, charge: &Charge, task: &TaskRequest, tasks: u32) {
    let n = u64::from(tasks);
    let values = [
        task.gpu_milli_total() * n,
        task.cpu_milli * n,
        task.mem_mib * n,
    ];
    for (fr, v) in charge.iter().zip(values) {
        let (Some(fr), true) = (fr, v > 0) else {
            continue;
        };
        let v = i64::try_from(v).unwrap_or(i64::MAX);
        match out.iter_mut().find(|(f, _)| f == fr) {
            Some((_, total)) => *total = total.saturating_add(v),
            None => out.push((fr.clone(), v)),
        }
    }
}

/// Tentative charges over an [`Admission`] for one decision ([`Admission::plan`]).
#[derive(Debug)]
pub struct QuotaPlan<'a> {
    admission: &'a Admission,
    /// The usage with this plan's charges; `None` until the first.
    books: Option<Usage>,
}

impl QuotaPlan<'_> {
    /// Kueue's flavor assignment, as far as a placement allows: the GPU flavors of `job`'s
    /// queue in the order its quotas list them (then the other GPU flavors of the file), each
    /// as the names of the cluster's GPU models charged to it that the job may use, kept
    /// where the queue admits the job's whole request now (this plan's charges counted).
    /// Empty for a CPU-only job and a file without GPU quotas.
    pub fn flavor_choices(&self, job: &JobSpec) -> Vec<Vec<String>> {
        let adm = self.admission;
        let Some(q) = adm.queue(job).filter(|_| job.task.gpus > 0) else {
            return Vec::new();
        };
        let tree = &adm.tree;
        let own = adm.without_own(self.books.as_ref(), job);
        let books = own.as_ref().or(self.books.as_ref());
        let mut flavors: Vec<&str> = Vec::new();
        let listed = tree.spec(q).quotas.iter().map(|(fr, _)| fr);
        let gpu = listed
            .chain(tree.flavor_resources())
            .filter(|fr| fr.resource == Resource::Gpu);
        for fr in gpu {
            if !flavors.contains(&fr.flavor.as_str()) {
                flavors.push(&fr.flavor);
            }
        }
        let allowed = adm.spec.model_mask(&job.gpu_types);
        flavors
            .into_iter()
            .map(|flavor| {
                adm.kinds
                    .iter()
                    .filter_map(|&kind| kind.filter(|m| allowed & (1u64 << m.0) != 0))
                    .filter(|&m| {
                        let charge = adm.charge_of(Some(m));
                        if charge[0].as_ref().is_none_or(|fr| fr.flavor != flavor) {
                            return false;
                        }
                        let mut amounts = Vec::new();
                        add_task(&mut amounts, charge, &job.task, job.tasks);
                        adm.check_in(books, q, &amounts).is_ok()
                    })
                    .map(|m| adm.spec.model(m).name.clone())
                    .collect::<Vec<String>>()
            })
            .filter(|models| !models.is_empty())
            .collect()
    }

    /// [`Admission::could_ever_admit`] (this plan's charges change nothing there).
    pub fn could_ever_admit(&self, job: &JobSpec) -> bool {
        self.admission.could_ever_admit(job)
    }

    /// [`Admission::admits`], this plan's charges included.
    pub fn admits(&self, job: &JobSpec) -> Result<(), Blocked> {
        self.admission.admits_in(self.books.as_ref(), job)
    }

    /// Charges `job` on `tasks` to this plan if its queue admits that now (`true`); else
    /// changes nothing (`false`).
    pub fn take(&mut self, job: &JobSpec, tasks: &[TaskPlacement]) -> bool {
        let Some(q) = self.admission.queue(job) else {
            return true;
        };
        let adm = self.admission;
        let amounts = adm.amounts(job, tasks);
        // A pending job's reservation is its own room: checked without it, and replaced.
        if let Some(own) = adm.without_own(self.books.as_ref(), job) {
            if adm.check_in(Some(&own), q, &amounts).is_err() {
                return false;
            }
            self.books = Some(own);
        } else if adm.check_in(self.books.as_ref(), q, &amounts).is_err() {
            return false;
        }
        let books = self.books.get_or_insert_with(|| adm.tree.books());
        for (fr, v) in &amounts {
            adm.tree.add_usage_in(books, q, fr, *v);
        }
        true
    }
}
