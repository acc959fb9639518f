//! `Score`: for one pending job, whether one of its tasks fits on each candidate node now and
//! how tightly (0-100, the share of the node's GPUs, or CPU for a CPU-only job, in use after
//! placing it: best-fit's preference as a number, the Kubernetes `prioritize` convention).

use crate::proto;
use crate::world::World;
use lachesis_env::cluster::{ClusterState, FitStrategy};
use lachesis_env::job::JobSpec;
use lachesis_env::units::{GPU_MILLI, NodeId};
use tonic::Status;

/// Scores `request.nodes` (every node when empty) for `request.job`.
pub fn score(
    request: &proto::ScoreRequest,
    table: Option<&std::sync::Arc<lachesis_env::throughput::ThroughputTable>>,
) -> Result<proto::ScoreResponse, Status> {
    let snapshot = request
        .snapshot
        .as_ref()
        .ok_or_else(|| Status::invalid_argument("snapshot: missing"))?;
    let world =
        World::build_typed(snapshot, table).map_err(|e| Status::invalid_argument(e.to_string()))?;
    let id = world
        .job_id(&request.job)
        .filter(|id| world.is_pending(*id))
        .ok_or_else(|| {
            Status::invalid_argument(format!(
                "job: {:?} is not a pending job of the snapshot",
                request.job
            ))
        })?;
    let job = world.job(id);
    let state = world.cluster();
    let nodes: Vec<(String, NodeId)> = if request.nodes.is_empty() {
        state
            .spec()
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), NodeId(i as u32)))
            .collect()
    } else {
        request
            .nodes
            .iter()
            .enumerate()
            .map(|(i, name)| {
                world
                    .node_id(name)
                    .map(|n| (name.clone(), n))
                    .ok_or_else(|| {
                        Status::invalid_argument(format!("nodes[{i}]: unknown node {name:?}"))
                    })
            })
            .collect::<Result<_, _>>()?
    };
    let out = nodes
        .into_iter()
        .map(|(name, node)| node_score(&state, job, name, node))
        .collect();
    Ok(proto::ScoreResponse { nodes: out })
}

fn node_score(state: &ClusterState, job: &JobSpec, name: String, node: NodeId) -> proto::NodeScore {
    let mask = state.spec().job_mask(job);
    if state
        .fit_task_on(&job.task, mask, node, FitStrategy::BestFit)
        .is_some()
    {
        let spec = state.spec().node(node);
        let used_after = if job.task.gpus > 0 {
            let cap = u64::from(spec.gpus) * u64::from(GPU_MILLI);
            let free = u64::from(state.free_gpu_milli(node));
            let used = cap - free + job.task.gpu_milli_total();
            used as f64 / cap.max(1) as f64
        } else {
            let cap = spec.cpu_milli.max(1);
            (cap - state.cpu_free(node) + job.task.cpu_milli) as f64 / cap as f64
        };
        return proto::NodeScore {
            node: name,
            feasible: true,
            reason: String::new(),
            score: (used_after.clamp(0.0, 1.0) * 100.0).round() as u32,
        };
    }
    proto::NodeScore {
        node: name,
        feasible: false,
        reason: why_not(state, job, node),
        score: 0,
    }
}

/// The first binding constraint for one task of `job` on `node`.
fn why_not(state: &ClusterState, job: &JobSpec, node: NodeId) -> String {
    let spec = state.spec().node(node);
    let t = &job.task;
    if t.gpus > 0 {
        let allowed = spec.gpu_model.is_some_and(|m| {
            job.gpu_types.is_empty() || state.spec().model_mask(&job.gpu_types) & (1 << m.0) != 0
        });
        if !allowed {
            return match spec.gpu_model {
                None => "no GPUs on this node".into(),
                Some(m) => format!(
                    "GPU model {} is not among the job's types ({})",
                    state.spec().model(m).name,
                    job.gpu_types.join("|")
                ),
            };
        }
        if t.gpus > spec.gpus {
            return format!("the node has {} GPUs, a task needs {}", spec.gpus, t.gpus);
        }
    }
    if !job.constraints.admits(&spec.labels) {
        return format!(
            "the node's labels do not meet the job's constraints ({})",
            job.constraints.label_text()
        );
    }
    if t.gpus > 0 {
        if t.is_fractional() {
            if !state
                .gpu_free(node)
                .iter()
                .any(|f| u32::from(*f) >= t.gpu_milli)
            {
                return format!("no GPU has {} milli-GPU free", t.gpu_milli);
            }
        } else if state.free_whole_gpus(node) < t.gpus {
            return format!(
                "{} whole GPUs free, a task needs {}",
                state.free_whole_gpus(node),
                t.gpus
            );
        }
    }
    if state.cpu_free(node) < t.cpu_milli {
        return format!(
            "{} milli-CPU free, a task needs {}",
            state.cpu_free(node),
            t.cpu_milli
        );
    }
    if state.mem_free(node) < t.mem_mib {
        return format!(
            "{} MiB free, a task needs {}",
            state.mem_free(node),
            t.mem_mib
        );
    }
    "does not fit".into()
}
