//! The three extender verbs on the service's own decision path:
//!
//! - **filter**: every candidate node feasible now or not, with the reason the shared
//!   feasibility code gives (`Score`'s); nodes where the pod can never fit (no allowed GPU
//!   model, larger than the node) are *unresolvable*, so kube-scheduler does not try preemption
//!   there;
//! - **prioritize**: the decision path (`Engine::decide`: routing, model, fallback chain,
//!   shield) on a snapshot of the candidates with the pod pending; the node it places the pod
//!   on scores `MaxExtenderPriority`, other feasible nodes their packing score scaled to 1-9;
//! - **preempt**: per node, whether the pod fits once the proposed victims are gone, and the
//!   smallest set of them (lowest priority first) it needs, from the node agents' inventory.
//!
//! Node state: full node objects (`nodeCacheCapable: false`) give capacity and the GPU model,
//! with per-GPU free shares, free CPU and memory overlaid from a fresh inventory report of the
//! same node; node names alone (`nodeCacheCapable: true`) are looked up in the inventory.

use super::translate::{
    FieldError, field_error, node_to_proto, normalise_gpu_model, overlay_report, pod_key,
    pod_to_job,
};
use super::types::{
    ExtenderArgs, ExtenderFilterResult, ExtenderPreemptionArgs, ExtenderPreemptionResult,
    HostPriority, HostPriorityList, MAX_EXTENDER_PRIORITY, MIN_EXTENDER_PRIORITY, MetaPod,
    MetaVictims, NodeList, Pod,
};
use crate::config::KubernetesConfig;
use crate::engine::Engine;
use crate::proto;
use crate::world::{Workloads, World, job_from_proto};
use lachesis_env::cluster::{FitStrategy, fits_empty};
use lachesis_env::job::JobSpec;
use lachesis_env::throughput::ThroughputTable;
use lachesis_env::units::{GPU_MILLI, JobId, SimTime, TenantId};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// What a verb could not do: the request is malformed for it, or the service failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbError {
    /// The input cannot be used (a bad quantity, a missing field): the field and why.
    #[error("{0}")]
    Input(#[from] FieldError),
    /// The service failed (a task panicked, the decision path errored).
    #[error("{0}")]
    Internal(String),
}

/// How kube-scheduler sent the nodes, and so how the answer names them.
#[derive(Debug, Clone)]
enum Mode {
    /// Full objects; the answer echoes the feasible ones in a list like this one.
    Full(NodeList),
    /// Names only.
    Cache,
}

/// One candidate node of a request.
#[derive(Debug, Clone)]
struct Candidate {
    name: String,
    /// The node as the service sees it, or why the pod can never run there.
    node: Result<proto::Node, String>,
    /// The object as sent (full mode), echoed by filter.
    raw: Option<serde_json::Value>,
}

/// Where the pod stands on one candidate.
#[derive(Debug, Clone, PartialEq)]
enum Verdict {
    /// Never, whatever is evicted.
    Unresolvable(String),
    /// Not now.
    Infeasible(String),
    /// Now, with `Score`'s packing score (0-100).
    Feasible(u32),
}

/// A filter or prioritize request, translated.
#[derive(Debug)]
struct Prepared {
    job: proto::Job,
    mode: Mode,
    candidates: Vec<Candidate>,
    now_ms: u64,
}

fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The verbs, around the engine (its configuration, inventory, decision path and metrics).
#[derive(Debug, Clone)]
pub struct Extender {
    engine: Arc<Engine>,
}

impl Extender {
    pub fn new(engine: Arc<Engine>) -> Self {
        Extender { engine }
    }

    fn cfg(&self) -> &KubernetesConfig {
        &self.engine.config().kubernetes
    }

    /// A node agent's fresh report of `name`, its GPU model named as labels are.
    fn reported(&self, name: &str) -> Option<proto::Node> {
        let mut node = self.engine.inventory().get(name)?;
        if !node.gpu_model.trim().is_empty() {
            node.gpu_model = normalise_gpu_model(&node.gpu_model);
        }
        Some(node)
    }

    /// The pod as a job and the candidates as nodes, each from its object (overlaid with the
    /// inventory) or from the inventory alone.
    fn prepare(&self, args: ExtenderArgs) -> Result<Prepared, FieldError> {
        let now_ms = unix_now_ms();
        let pod = args.pod.ok_or_else(|| field_error("Pod", "missing"))?;
        let mut job = pod_to_job(&pod, self.cfg(), now_ms)?;
        let mut candidates = Vec::new();
        let mode = match (args.nodes, args.node_names) {
            (Some(mut list), _) => {
                let items = std::mem::take(&mut list.items);
                for (i, raw) in items.into_iter().enumerate() {
                    let path = format!("Nodes.items[{i}]");
                    let object: super::types::Node = serde_json::from_value(raw.clone())
                        .map_err(|e| field_error(&path, e.to_string()))?;
                    let mut node = node_to_proto(&object, self.cfg(), &path)?;
                    if let Some(report) = self.engine.inventory().get(&node.name) {
                        overlay_report(&mut node, &report);
                    }
                    let node = if object.spec.unschedulable == Some(true) {
                        Err("the node is cordoned (spec.unschedulable)".to_string())
                    } else {
                        Ok(node)
                    };
                    candidates.push(Candidate {
                        name: object.metadata.name.trim().to_string(),
                        node,
                        raw: Some(raw),
                    });
                }
                Mode::Full(list)
            }
            (None, Some(names)) => {
                let ttl_s = self.engine.config().inventory_ttl_ms as f64 / 1000.0;
                for (i, name) in names.into_iter().enumerate() {
                    if name.trim().is_empty() {
                        return Err(field_error(format!("NodeNames[{i}]"), "empty"));
                    }
                    let node = self.reported(&name).ok_or_else(|| {
                        format!(
                            "no node agent reported this node in the last {ttl_s} s \
                             (ReportNodes): with nodeCacheCapable the extender knows nodes \
                             only from the inventory"
                        )
                    });
                    candidates.push(Candidate {
                        name,
                        node,
                        raw: None,
                    });
                }
                // Inventory reports carry no Kubernetes labels: the pod's selector and affinity
                // cannot be checked here, and kube-scheduler's own filters already have.
                job.constraints.clear();
                Mode::Cache
            }
            (None, None) => {
                return Err(field_error(
                    "ExtenderArgs",
                    "neither Nodes nor NodeNames is given",
                ));
            }
        };
        // A pod that names its node (spec.nodeName) can run nowhere else.
        let bound = pod.spec.node_name.trim();
        if !bound.is_empty() {
            for c in candidates.iter_mut().filter(|c| c.name != bound) {
                c.node = Err(format!("the pod names node {bound:?} (spec.nodeName)"));
            }
        }
        let mut seen = HashSet::new();
        for (i, c) in candidates.iter().enumerate() {
            if !seen.insert(c.name.as_str()) {
                return Err(field_error(
                    format!("nodes[{i}]"),
                    format!("node {:?} appears twice", c.name),
                ));
            }
        }
        Ok(Prepared {
            job,
            mode,
            candidates,
            now_ms,
        })
    }

    /// Filter (blocking: run it off the async runtime).
    pub fn filter(&self, args: ExtenderArgs) -> Result<ExtenderFilterResult, VerbError> {
        let p = self.prepare(args)?;
        let (verdicts, _) = assess(&p, self.engine.table())?;
        let mut result = ExtenderFilterResult::default();
        let mut passed = Vec::new();
        for (c, v) in p.candidates.into_iter().zip(verdicts) {
            match v {
                Verdict::Feasible(_) => passed.push(c),
                Verdict::Infeasible(why) => {
                    result.failed_nodes.insert(c.name, why);
                }
                Verdict::Unresolvable(why) => {
                    result.failed_and_unresolvable_nodes.insert(c.name, why);
                }
            }
        }
        match p.mode {
            Mode::Full(mut list) => {
                list.items = passed.into_iter().filter_map(|c| c.raw).collect();
                if list.metadata.is_null() {
                    list.metadata = serde_json::json!({});
                }
                result.nodes = Some(list);
            }
            Mode::Cache => result.node_names = Some(passed.into_iter().map(|c| c.name).collect()),
        }
        Ok(result)
    }

    /// Prioritize: the decision path on the candidates, then scores 0-10.
    pub async fn prioritize(&self, args: ExtenderArgs) -> Result<HostPriorityList, VerbError> {
        let this = self.clone();
        let (p, verdicts, snapshot) = blocking(move || {
            let p = this.prepare(args)?;
            let (verdicts, snapshot) = assess(&p, this.engine.table())?;
            Ok((p, verdicts, snapshot))
        })
        .await?;
        let any_feasible = verdicts.iter().any(|v| matches!(v, Verdict::Feasible(_)));
        let chosen = match snapshot.filter(|_| any_feasible) {
            None => None,
            Some(snapshot) => {
                let request = proto::DecideRequest {
                    snapshot: Some(snapshot),
                    request_id: format!("k8s:{}", p.job.id),
                    ..Default::default()
                };
                match self.engine.decide(request).await {
                    Ok(answer) => {
                        let node = answer
                            .placements
                            .iter()
                            .find(|pl| pl.job == p.job.id)
                            .and_then(|pl| pl.tasks.first())
                            .map(|t| t.node.clone());
                        tracing::debug!(
                            pod = %p.job.id,
                            node = node.as_deref().unwrap_or("(held)"),
                            decided_by = %answer.decided_by,
                            fallbacks = answer.fallbacks.len(),
                            "k8s prioritize"
                        );
                        node
                    }
                    Err(status) => {
                        // The packing scores still rank the feasible nodes.
                        tracing::warn!(pod = %p.job.id, message = status.message(), "k8s prioritize: the decision path failed");
                        None
                    }
                }
            }
        };
        Ok(p.candidates
            .iter()
            .zip(&verdicts)
            .map(|(c, v)| HostPriority {
                host: c.name.clone(),
                score: match v {
                    _ if chosen.as_deref() == Some(c.name.as_str()) => MAX_EXTENDER_PRIORITY,
                    Verdict::Feasible(s) => scaled(*s),
                    _ => MIN_EXTENDER_PRIORITY,
                },
            })
            .collect())
    }

    /// Preempt (blocking): per node, the victims the pod needs gone, or the node dropped.
    pub fn preempt(
        &self,
        args: ExtenderPreemptionArgs,
    ) -> Result<ExtenderPreemptionResult, VerbError> {
        let now_ms = unix_now_ms();
        let pod = args.pod.ok_or_else(|| field_error("Pod", "missing"))?;
        let mut job = pod_to_job(&pod, self.cfg(), now_ms)?;
        // Victims' nodes come from inventory reports, without Kubernetes labels; the nodes
        // kube-scheduler proposes already pass the pod's selector and affinity.
        job.constraints.clear();
        let spec = job_spec(&job)?;
        let mut out = BTreeMap::new();
        if let Some(map) = args.node_name_to_victims {
            for (name, victims) in map {
                let victims = victims.unwrap_or_else(|| super::types::Victims {
                    pods: Vec::new(),
                    num_pdb_violations: 0,
                });
                let path = format!("NodeNameToVictims[{name}]");
                let uids = victims
                    .pods
                    .iter()
                    .enumerate()
                    .map(|(i, v)| match v.metadata.uid.trim() {
                        "" => Err(field_error(
                            format!("{path}.Pods[{i}].metadata.uid"),
                            "missing",
                        )),
                        uid => Ok(uid.to_string()),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let keep = match self.reported(&name) {
                    // No view of the node: kube-scheduler's own choice stands.
                    None => Some((0..uids.len()).collect()),
                    Some(node) => self.fewest_victims(&node, &job, &spec, &victims.pods, &path)?,
                };
                if let Some(keep) = keep {
                    let kept: Vec<MetaPod> = keep
                        .iter()
                        .map(|i: &usize| MetaPod {
                            uid: uids[*i].clone(),
                        })
                        .collect();
                    let pdb = pdb_violations(victims.num_pdb_violations, uids.len(), kept.len());
                    out.insert(
                        name,
                        MetaVictims {
                            pods: kept,
                            num_pdb_violations: pdb,
                        },
                    );
                }
            }
        } else if let Some(map) = args.node_name_to_meta_victims {
            for (name, victims) in map {
                let victims = victims.unwrap_or(MetaVictims {
                    pods: Vec::new(),
                    num_pdb_violations: 0,
                });
                // UIDs alone say nothing of what the victims hold: only a node where the pod
                // can never fit is dropped.
                let never = self
                    .reported(&name)
                    .and_then(|node| never_fits_on(&node, &spec).err());
                match never {
                    Some(why) => {
                        tracing::debug!(node = %name, %why, "k8s preempt: dropped");
                    }
                    None => {
                        out.insert(name, victims);
                    }
                }
            }
        } else {
            return Err(field_error(
                "ExtenderPreemptionArgs",
                "neither NodeNameToVictims nor NodeNameToMetaVictims is given",
            )
            .into());
        }
        Ok(ExtenderPreemptionResult {
            node_name_to_meta_victims: out,
        })
    }

    /// Indices of the victims the pod needs evicted from `node` (most important reprieved
    /// first, as kube-scheduler does), `None` when it does not fit even with all of them gone.
    /// When the victims do not match what the node's report says is in use (a stale report),
    /// all of them are kept: the extender cannot do better than kube-scheduler there.
    fn fewest_victims(
        &self,
        node: &proto::Node,
        job: &proto::Job,
        spec: &JobSpec,
        victims: &[Pod],
        path: &str,
    ) -> Result<Option<Vec<usize>>, FieldError> {
        let all: Vec<usize> = (0..victims.len()).collect();
        if let Err(why) = never_fits_on(node, spec) {
            tracing::debug!(node = %node.name, %why, "k8s preempt: dropped");
            return Ok(None);
        }
        let now_ms = unix_now_ms();
        let mut running = Vec::with_capacity(victims.len());
        for (i, v) in victims.iter().enumerate() {
            let mut vj = pod_to_job(v, self.cfg(), now_ms).map_err(|e| FieldError {
                path: e.path.replacen("Pod", &format!("{path}.Pods[{i}]"), 1),
                message: e.message,
            })?;
            // Running already: eviction is kube-scheduler's call, constraints are met.
            vj.preemptible = true;
            vj.gpu_types.clear();
            if vj.id == job.id {
                vj.id = format!("{}#victim{i}", pod_key(v));
            }
            running.push(vj);
        }
        let Some(gpus) = assign_gpus(node, &running) else {
            tracing::debug!(node = %node.name, "k8s preempt: victims do not match the node's report; kept as proposed");
            return Ok(Some(all));
        };
        let snapshot = proto::Snapshot {
            now_ms,
            nodes: vec![node.clone()],
            running: running
                .into_iter()
                .zip(gpus)
                .map(|(j, g)| proto::RunningJob {
                    job: Some(j),
                    tasks: vec![proto::TaskPlacement {
                        node: node.name.clone(),
                        gpus: g,
                    }],
                    run_ms: 0,
                })
                .collect(),
            pending: vec![job.clone()],
            ..Default::default()
        };
        let world = match World::build_typed(&snapshot, self.engine.table()) {
            Ok(w) => w,
            Err(e) => {
                tracing::debug!(node = %node.name, error = %e, "k8s preempt: victims do not match the node's report; kept as proposed");
                return Ok(Some(all));
            }
        };
        let ids: Vec<JobId> = snapshot
            .running
            .iter()
            .filter_map(|r| r.job.as_ref().and_then(|j| world.job_id(&j.id)))
            .collect();
        let Some(pending) = world.job_id(&job.id).filter(|_| ids.len() == victims.len()) else {
            return Ok(Some(all));
        };
        let pending = world.job(pending).clone();
        let mut state = world.cluster_clone();
        let mut held = Vec::with_capacity(ids.len());
        for id in &ids {
            match state.preempt(*id) {
                Ok(a) => held.push(a.tasks),
                Err(_) => return Ok(Some(all)),
            }
        }
        if state
            .find_job_placement(&pending, FitStrategy::BestFit)
            .is_none()
        {
            return Ok(None);
        }
        // Reprieve the most important first: higher priority, then the older pod.
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|i| {
            let j = world.job(ids[*i]);
            (std::cmp::Reverse(j.priority), j.submit, *i)
        });
        let mut evict = vec![true; ids.len()];
        for i in order {
            let job_i = world.job(ids[i]);
            if state.allocate(job_i, held[i].to_vec()).is_err() {
                continue;
            }
            if state
                .find_job_placement(&pending, FitStrategy::BestFit)
                .is_some()
            {
                evict[i] = false;
            } else if state.release(ids[i]).is_err() {
                return Ok(Some(all));
            }
        }
        Ok(Some((0..ids.len()).filter(|i| evict[*i]).collect()))
    }
}

/// kube-scheduler prefers nodes with fewer PodDisruptionBudget violations; which victims
/// violate one it does not say, so a smaller set keeps at most the count it had.
fn pdb_violations(given: i64, before: usize, after: usize) -> i64 {
    if after == before {
        given
    } else {
        given.min(after as i64)
    }
}

/// `Score`'s 0-100 packing score as 1-9: a feasible node never ties an infeasible one (0) or
/// the decider's choice (10).
fn scaled(score: u32) -> i64 {
    let s = (i64::from(score.min(100)) * 9 + 50) / 100;
    s.clamp(1, MAX_EXTENDER_PRIORITY - 1)
}

/// The pod as the simulator's job (validated as a snapshot would validate it).
fn job_spec(job: &proto::Job) -> Result<JobSpec, FieldError> {
    job_from_proto(
        job,
        0,
        TenantId(0),
        SimTime(job.wait_ms),
        Workloads::AsGiven,
    )
    .map_err(|e| FieldError {
        path: "Pod".into(),
        message: format!("as a job: {}", e.message),
    })
}

/// `Ok` when the pod fits on the node emptied, else why not (the node's GPU model, count or
/// capacity is short of the pod's request).
fn never_fits_on(node: &proto::Node, spec: &JobSpec) -> Result<(), String> {
    let snapshot = proto::Snapshot {
        nodes: vec![node.clone()],
        ..Default::default()
    };
    let world = World::build(&snapshot).map_err(|e| {
        format!(
            "the node cannot be used: {}",
            e.to_string().replacen("snapshot.nodes[0].", "", 1)
        )
    })?;
    let state = world.cluster();
    if fits_empty(state.spec_arc(), spec) {
        return Ok(());
    }
    let t = &spec.task;
    if t.gpus > 0 {
        let mask = state.spec().model_mask(&spec.gpu_types);
        match state.spec().nodes[0].gpu_model {
            None => return Err("no GPUs on this node".into()),
            Some(m) if mask & (1 << m.0) == 0 => {
                return Err(format!(
                    "GPU model {} is not among the pod's GPU models ({})",
                    state.spec().model(m).name,
                    spec.gpu_types.join("|")
                ));
            }
            Some(_) => {}
        }
        if t.gpus > node.gpus {
            return Err(format!(
                "the node has {} GPUs, the pod needs {}",
                node.gpus, t.gpus
            ));
        }
    }
    if t.cpu_milli > node.cpu_milli {
        return Err(format!(
            "the node has {} milli-CPU allocatable, the pod requests {}",
            node.cpu_milli, t.cpu_milli
        ));
    }
    if t.mem_mib > node.mem_mib {
        return Err(format!(
            "the node has {} MiB allocatable, the pod requests {}",
            node.mem_mib, t.mem_mib
        ));
    }
    if !spec.constraints.admits(&state.spec().nodes[0].labels) {
        return Err(format!(
            "the node's labels do not meet the pod's nodeSelector/affinity ({})",
            spec.constraints.label_text()
        ));
    }
    Err("the pod does not fit even on the empty node".into())
}

/// Verdicts for every candidate, and the snapshot of the nodes where the pod could ever fit
/// with it pending (none when there are no such nodes).
fn assess(
    p: &Prepared,
    table: Option<&Arc<ThroughputTable>>,
) -> Result<(Vec<Verdict>, Option<proto::Snapshot>), FieldError> {
    let spec = job_spec(&p.job)?;
    let mut verdicts: Vec<Verdict> = p
        .candidates
        .iter()
        .map(|c| match &c.node {
            Err(why) => Verdict::Unresolvable(why.clone()),
            Ok(node) => match never_fits_on(node, &spec) {
                Err(why) => Verdict::Unresolvable(why),
                Ok(()) => Verdict::Infeasible(String::new()),
            },
        })
        .collect();
    let nodes: Vec<proto::Node> = p
        .candidates
        .iter()
        .zip(&verdicts)
        .filter(|(_, v)| !matches!(v, Verdict::Unresolvable(_)))
        .filter_map(|(c, _)| c.node.as_ref().ok().cloned())
        .collect();
    if nodes.is_empty() {
        return Ok((verdicts, None));
    }
    let snapshot = proto::Snapshot {
        cluster: "kubernetes".into(),
        now_ms: p.now_ms,
        nodes,
        running: Vec::new(),
        pending: vec![p.job.clone()],
    };
    let scores = crate::score::score(
        &proto::ScoreRequest {
            snapshot: Some(snapshot.clone()),
            job: p.job.id.clone(),
            nodes: Vec::new(),
        },
        table,
    )
    .map_err(|s| field_error("Nodes", s.message().to_string()))?;
    let by_name: BTreeMap<&str, &proto::NodeScore> =
        scores.nodes.iter().map(|s| (s.node.as_str(), s)).collect();
    for (c, v) in p.candidates.iter().zip(verdicts.iter_mut()) {
        if matches!(v, Verdict::Unresolvable(_)) {
            continue;
        }
        *v = match by_name.get(c.name.as_str()) {
            Some(s) if s.feasible => Verdict::Feasible(s.score),
            Some(s) => Verdict::Infeasible(s.reason.clone()),
            None => Verdict::Infeasible("not scored".into()),
        };
    }
    Ok((verdicts, Some(snapshot)))
}

/// GPU indices for each running victim on `node`, consistent with the per-GPU free shares its
/// report gives (a victim sits on GPUs the report shows in use); with no per-GPU report, any
/// GPUs with room. `None` when the victims cannot be laid out so.
fn assign_gpus(node: &proto::Node, victims: &[proto::Job]) -> Option<Vec<Vec<u32>>> {
    let n = node.gpus as usize;
    // Room each GPU offers victims: its used share when reported, else the whole GPU.
    let mut room: Vec<u32> = if node.gpu_free_milli.len() == n {
        node.gpu_free_milli
            .iter()
            .map(|f| GPU_MILLI.saturating_sub(*f))
            .collect()
    } else {
        vec![GPU_MILLI; n]
    };
    let mut out = vec![Vec::new(); victims.len()];
    let mut order: Vec<usize> = (0..victims.len()).collect();
    // Whole-GPU victims first, larger first, then shares, larger first.
    order.sort_by_key(|i| {
        let v = &victims[*i];
        let share = if v.gpu_milli == 0 {
            GPU_MILLI
        } else {
            v.gpu_milli
        };
        (
            std::cmp::Reverse((share == GPU_MILLI, v.gpus_per_task, share)),
            *i,
        )
    });
    for i in order {
        let v = &victims[i];
        if v.gpus_per_task == 0 {
            continue;
        }
        if v.gpu_milli == 0 || v.gpu_milli == GPU_MILLI {
            let picked: Vec<usize> = (0..n)
                .filter(|g| room[*g] == GPU_MILLI)
                .take(v.gpus_per_task as usize)
                .collect();
            if picked.len() < v.gpus_per_task as usize {
                return None;
            }
            for g in &picked {
                room[*g] = 0;
            }
            out[i] = picked.iter().map(|g| *g as u32).collect();
        } else {
            let g = (0..n)
                .filter(|g| room[*g] >= v.gpu_milli)
                .min_by_key(|g| (room[*g], *g))?;
            room[g] -= v.gpu_milli;
            out[i] = vec![g as u32];
        }
    }
    Some(out)
}

/// Runs `f` on the blocking pool; a panic inside becomes an internal error.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, VerbError> + Send + 'static,
) -> Result<T, VerbError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(VerbError::Internal(format!("extender task failed: {e}"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_scores_scale_to_one_through_nine() {
        // round(score x 9 / 100), at least 1
        let table = [(0, 1), (5, 1), (50, 5), (67, 6), (94, 8), (95, 9), (100, 9)];
        for (score, want) in table {
            assert_eq!(scaled(score), want, "{score}");
        }
    }

    #[test]
    fn victims_sit_on_the_gpus_the_report_shows_in_use() {
        let node = proto::Node {
            name: "n".into(),
            gpus: 4,
            // GPU 0 and 2 fully used, GPU 1 half used, GPU 3 free.
            gpu_free_milli: vec![0, 500, 0, 1000],
            ..Default::default()
        };
        let job = |gpus, milli| proto::Job {
            gpus_per_task: gpus,
            gpu_milli: milli,
            ..Default::default()
        };
        assert_eq!(
            assign_gpus(&node, &[job(1, 500), job(2, 0), job(0, 0)]),
            Some(vec![vec![1], vec![0, 2], vec![]])
        );
        // Three whole GPUs are not in use.
        assert_eq!(assign_gpus(&node, &[job(3, 0)]), None);
        // No per-GPU report: any GPUs.
        let bare = proto::Node {
            gpu_free_milli: Vec::new(),
            ..node
        };
        assert_eq!(
            assign_gpus(&bare, &[job(1, 300), job(1, 800)]),
            Some(vec![vec![1], vec![0]])
        );
    }

    #[test]
    fn pdb_count_never_exceeds_the_victims_kept() {
        assert_eq!(pdb_violations(2, 3, 3), 2);
        assert_eq!(pdb_violations(2, 3, 1), 1);
        assert_eq!(pdb_violations(0, 3, 1), 0);
    }
}
