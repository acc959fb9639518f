//! Slurm's view → the service's snapshots, and the check that a placement is one Slurm can
//! run. Partitions with the same nodes form one group, decided in one snapshot; groups are
//! decided one after another, each seeing what the groups before it placed.

use super::config::BridgeConfig;
use super::model::{SlurmJob, SlurmNode};
use crate::proto;
use std::collections::{BTreeMap, BTreeSet};

/// How the bridge sees one Slurm job this cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Not the bridge's: left to Slurm (but its resources count).
    Foreign,
    /// Held and managed: the policy decides it.
    Candidate,
    /// Managed, held, but not decided this cycle (requeued too recently).
    Waiting,
    /// Managed and held, but its GPU request has no per-node shape the service can express:
    /// released to Slurm's own scheduler.
    Unsupported,
    /// Released by the bridge onto pinned nodes, not running yet: its nodes are reserved.
    Reserved,
}

/// Classifies `job`. `recently_requeued`: within the requeue grace.
pub fn role(cfg: &BridgeConfig, job: &SlurmJob, recently_requeued: bool) -> Role {
    let managed = cfg.slurm.manages(&job.partition)
        && (cfg.slurm.marker.is_empty() || job.admin_comment.contains(&cfg.slurm.marker));
    if !managed || !job.is_pending() {
        return Role::Foreign;
    }
    if !job.is_held() {
        return if job.req_nodes.is_empty() {
            Role::Foreign
        } else {
            Role::Reserved
        };
    }
    if job.gpu_shape_error.is_some() {
        return Role::Unsupported;
    }
    if recently_requeued {
        return Role::Waiting;
    }
    Role::Candidate
}

/// Labels the service reads as topology: features of these names are not passed on.
const TOPOLOGY_LABELS: [&str; 2] = ["rack", "nvlink_domain"];

/// One group's snapshot.
#[derive(Debug, Clone)]
pub struct Group {
    pub partitions: Vec<String>,
    pub nodes: BTreeSet<String>,
    pub snapshot: proto::Snapshot,
    /// Candidates left out because no node of the group could ever hold them, with why.
    pub never_fit: Vec<(u64, String)>,
}

/// Mutable per-node usage while groups are built and decided in turn.
#[derive(Debug, Clone)]
pub struct Usage {
    pub gpu_used: BTreeSet<u32>,
    pub cpu_used: u64,
    pub mem_used: u64,
}

pub fn usage_of(nodes: &[SlurmNode]) -> BTreeMap<String, Usage> {
    nodes
        .iter()
        .map(|n| {
            (
                n.name.clone(),
                Usage {
                    gpu_used: n.gpu_used.clone(),
                    cpu_used: u64::from(n.cpu_alloc),
                    mem_used: n.mem_alloc_mib,
                },
            )
        })
        .collect()
}

fn job_proto(
    cfg: &BridgeConfig,
    job: &SlurmJob,
    now_s: u64,
    history: (&BTreeMap<u64, u64>, &BTreeMap<u64, u64>),
) -> proto::Job {
    let (attained, stopped) = history;
    let part = cfg
        .partitions
        .get(&job.partition)
        .cloned()
        .unwrap_or_default();
    let priority = i64::from(part.priority) - job.nice;
    proto::Job {
        id: job.id.to_string(),
        tenant: if job.account.is_empty() {
            job.user.clone()
        } else {
            job.account.clone()
        },
        priority: priority.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
        qos: part.qos.clone(),
        preemptible: part.preemptible,
        tasks: job.nodes,
        gpus_per_task: job.gpus_per_node,
        gpu_milli: 0,
        cpu_milli: u64::from(job.cpus_per_node()) * 1000,
        mem_mib: job.mem_per_node_mib,
        gpu_types: match (&job.gpu_type, job.gpus_per_node) {
            (Some(t), g) if g > 0 => vec![cfg.slurm.gpu_model(Some(t))],
            _ => Vec::new(),
        },
        estimate_ms: job.time_limit_ms,
        wait_ms: job
            .submit_s
            .map_or(0, |s| now_s.saturating_sub(s).saturating_mul(1000)),
        kind: String::new(),
        attained_ms: attained.get(&job.id).copied().unwrap_or(0),
        // Slurm places one task a node on `NumNodes` distinct nodes, on nodes with the
        // features `--constraint` asks for: the service's decision meets both, so `can_run`
        // (kept as a safety net) should never refuse it.
        constraints: job.constraint.label_text(),
        distinct_nodes: job.nodes > 1,
        // Only pending jobs have been idle since a run; a running one's last stop is stale.
        idle_ms: stopped
            .get(&job.id)
            .filter(|_| job.is_pending())
            .map(|at| now_s.saturating_mul(1000).saturating_sub(*at)),
        workload: job.workload().unwrap_or_default().to_string(),
        // Slurm cannot grow or shrink a running job's allocation for it: every job is rigid.
        min_gpus: 0,
        max_gpus: 0,
    }
}

/// Whether Slurm could run `job` on exactly `nodes` (distinct, as many as it needs): each node
/// is up, in the job's partition, not excluded, has the features and GPU type it asks for,
/// and its capacity holds one node's share of the job. Free capacity is the policy's and
/// the shield's business; this is the check that Slurm would not leave the job pending
/// forever (`BadConstraints`).
pub fn can_run(
    job: &SlurmJob,
    nodes: &[String],
    by_name: &BTreeMap<&str, &SlurmNode>,
) -> Result<(), String> {
    let distinct: BTreeSet<&String> = nodes.iter().collect();
    if distinct.len() != nodes.len() {
        return Err(format!("nodes {nodes:?} repeat a node"));
    }
    if nodes.len() != job.nodes as usize {
        return Err(format!(
            "{} node(s) chosen, the job asks for {}",
            nodes.len(),
            job.nodes
        ));
    }
    for name in nodes {
        let n = by_name
            .get(name.as_str())
            .ok_or_else(|| format!("node {name} is unknown to Slurm"))?;
        node_can_run(job, n)?;
    }
    Ok(())
}

/// Whether one node could ever hold one node's share of `job` (see `can_run`).
pub fn node_can_run(job: &SlurmJob, n: &SlurmNode) -> Result<(), String> {
    let name = &n.name;
    if !n.usable() {
        return Err(format!("node {name} is {}", n.state));
    }
    if !n.partitions.contains(&job.partition) {
        return Err(format!("node {name} is not in partition {}", job.partition));
    }
    if job.exc_nodes.contains(name) {
        return Err(format!("node {name} is excluded by the job"));
    }
    if !job.constraint.admits(&n.feature_labels()) {
        return Err(format!(
            "node {name} lacks the features {}",
            job.constraint.label_text()
        ));
    }
    if job.gpus_per_node > 0 {
        if let (Some(want), Some(have)) = (&job.gpu_type, &n.gpu_type)
            && want != have
        {
            return Err(format!(
                "node {name} has {have} GPUs, the job asks for {want}"
            ));
        }
        if job.gpu_type.is_some() && n.gpu_type.is_none() {
            return Err(format!("node {name} has untyped GPUs"));
        }
    }
    if n.gpus < job.gpus_per_node
        || n.cpus < job.cpus_per_node()
        || n.mem_mib < job.mem_per_node_mib
    {
        return Err(format!(
            "node {name} is smaller than one node's share of the job"
        ));
    }
    Ok(())
}

/// Builds the snapshots: one per group of partitions with the same usable nodes that has
/// candidates. `roles` gives each job's role; `usage` is each node's use (updated by the
/// caller between groups).
pub fn groups(
    nodes: &[SlurmNode],
    jobs: &[SlurmJob],
    roles: &BTreeMap<u64, Role>,
) -> Vec<(Vec<String>, BTreeSet<String>)> {
    let mut parts: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for j in jobs {
        if roles.get(&j.id) == Some(&Role::Candidate) {
            parts.entry(j.partition.clone()).or_default();
        }
    }
    for n in nodes.iter().filter(|n| n.usable()) {
        for p in &n.partitions {
            if let Some(set) = parts.get_mut(p) {
                set.insert(n.name.clone());
            }
        }
    }
    let mut by_set: BTreeMap<BTreeSet<String>, Vec<String>> = BTreeMap::new();
    for (p, set) in parts {
        by_set.entry(set).or_default().push(p);
    }
    by_set
        .into_iter()
        .filter(|(set, _)| !set.is_empty())
        .map(|(set, ps)| (ps, set))
        .collect()
}

/// What Slurm showed this cycle, and each job's role.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    pub nodes: &'a [SlurmNode],
    pub jobs: &'a [SlurmJob],
    pub roles: &'a BTreeMap<u64, Role>,
    /// Run time of earlier runs (before the bridge's requeues), ms, by job.
    pub attained: &'a BTreeMap<u64, u64>,
    /// When the bridge last requeued each job still pending (Unix ms): its idle time.
    pub stopped: &'a BTreeMap<u64, u64>,
}

/// The snapshot of one group.
pub fn snapshot(
    cfg: &BridgeConfig,
    partitions: &[String],
    group_nodes: &BTreeSet<String>,
    view: &View<'_>,
    usage: &BTreeMap<String, Usage>,
    now_ms: u64,
) -> Group {
    let View {
        nodes,
        jobs,
        roles,
        attained,
        stopped,
    } = *view;
    let now_s = now_ms / 1000;
    let mut usage: BTreeMap<String, Usage> = usage
        .iter()
        .filter(|(k, _)| group_nodes.contains(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let by_name: BTreeMap<&str, &SlurmNode> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut running = Vec::new();

    // Running jobs wholly inside the group, with a uniform per-node shape: listed (victim
    // candidates, attained service). Others' use stays in the nodes' free capacity.
    for j in jobs.iter().filter(|j| j.holds_resources()) {
        if j.alloc.is_empty() || !j.alloc.iter().all(|a| group_nodes.contains(&a.node)) {
            continue;
        }
        let first = &j.alloc[0];
        let uniform = j.alloc.iter().all(|a| {
            a.gpus.len() == first.gpus.len() && a.cpus == first.cpus && a.mem_mib == first.mem_mib
        });
        let distinct: BTreeSet<&str> = j.alloc.iter().map(|a| a.node.as_str()).collect();
        if !uniform || distinct.len() != j.alloc.len() {
            continue;
        }
        let mut job = job_proto(cfg, j, now_s, (attained, stopped));
        job.tasks = j.alloc.len() as u32;
        job.gpus_per_task = first.gpus.len() as u32;
        job.cpu_milli = u64::from(first.cpus) * 1000;
        job.mem_mib = first.mem_mib.unwrap_or(j.mem_per_node_mib);
        if job.gpus_per_task == 0 {
            job.gpu_types.clear();
        }
        let start = j.start_s.unwrap_or(now_s);
        running.push(proto::RunningJob {
            job: Some(job),
            tasks: j
                .alloc
                .iter()
                .map(|a| proto::TaskPlacement {
                    node: a.node.clone(),
                    gpus: a.gpus.iter().copied().collect(),
                })
                .collect(),
            run_ms: now_s.saturating_sub(start).saturating_mul(1000),
        });
    }

    // Jobs released onto pinned nodes, not running yet: reserve their share on those nodes
    // (the lowest free GPUs); a node that cannot hold it is taken as full.
    for j in jobs
        .iter()
        .filter(|j| roles.get(&j.id) == Some(&Role::Reserved))
    {
        if !j.req_nodes.iter().all(|n| group_nodes.contains(n)) {
            for n in &j.req_nodes {
                if let (Some(u), Some(node)) = (usage.get_mut(n), by_name.get(n.as_str())) {
                    take(
                        u,
                        node,
                        j.gpus_per_node,
                        j.cpus_per_node(),
                        j.mem_per_node_mib,
                    );
                }
            }
            continue;
        }
        let mut tasks = Vec::new();
        let mut ok = true;
        for n in &j.req_nodes {
            let (Some(u), Some(node)) = (usage.get_mut(n), by_name.get(n.as_str())) else {
                ok = false;
                continue;
            };
            match take(
                u,
                node,
                j.gpus_per_node,
                j.cpus_per_node(),
                j.mem_per_node_mib,
            ) {
                Some(gpus) => tasks.push(proto::TaskPlacement {
                    node: n.clone(),
                    gpus,
                }),
                None => ok = false,
            }
        }
        if ok && tasks.len() == j.req_nodes.len() && !tasks.is_empty() {
            let mut job = job_proto(cfg, j, now_s, (attained, stopped));
            job.tasks = tasks.len() as u32;
            job.preemptible = false;
            running.push(proto::RunningJob {
                job: Some(job),
                tasks,
                run_ms: 0,
            });
        }
    }

    let proto_nodes: Vec<proto::Node> = group_nodes
        .iter()
        .filter_map(|name| {
            let n = by_name.get(name.as_str())?;
            let u = usage.get(name)?;
            Some(proto::Node {
                name: n.name.clone(),
                gpu_model: if n.gpus > 0 {
                    cfg.slurm.gpu_model(n.gpu_type.as_deref())
                } else {
                    String::new()
                },
                gpus: n.gpus,
                gpu_free_milli: (0..n.gpus)
                    .map(|i| if u.gpu_used.contains(&i) { 0 } else { 1000 })
                    .collect(),
                cpu_milli: u64::from(n.cpus) * 1000,
                cpu_free_milli: Some(u64::from(n.cpus).saturating_sub(u.cpu_used) * 1000),
                mem_mib: n.mem_mib,
                mem_free_mib: Some(n.mem_mib.saturating_sub(u.mem_used)),
                labels: n
                    .feature_labels()
                    .into_iter()
                    .filter(|(f, _)| !TOPOLOGY_LABELS.contains(&f.as_str()))
                    .collect(),
            })
        })
        .collect();

    // Candidates of the group's partitions that some node could ever hold.
    let mut pending = Vec::new();
    let mut never_fit = Vec::new();
    for j in jobs
        .iter()
        .filter(|j| roles.get(&j.id) == Some(&Role::Candidate) && partitions.contains(&j.partition))
    {
        let fits_somewhere = group_nodes
            .iter()
            .filter_map(|n| by_name.get(n.as_str()))
            .filter(|n| node_can_run(j, n).is_ok());
        let count = fits_somewhere.count();
        if count < j.nodes as usize {
            never_fit.push((
                j.id,
                format!(
                    "needs {} node(s) with {} GPU(s){}, {} CPUs, {} MiB; {} of partition {}'s usable nodes qualify",
                    j.nodes,
                    j.gpus_per_node,
                    j.gpu_type.as_deref().map_or(String::new(), |t| format!(" of type {t}")),
                    j.cpus_per_node(),
                    j.mem_per_node_mib,
                    count,
                    j.partition
                ),
            ));
            continue;
        }
        pending.push(job_proto(cfg, j, now_s, (attained, stopped)));
    }

    Group {
        partitions: partitions.to_vec(),
        nodes: group_nodes.clone(),
        snapshot: proto::Snapshot {
            cluster: format!("slurm:{}", partitions.join(",")),
            now_ms,
            nodes: proto_nodes,
            running,
            pending,
        },
        never_fit,
    }
}

/// Takes one node's share of a job from `u` (the lowest free GPUs); `None` (and the node
/// marked full) when it does not fit.
pub fn take(u: &mut Usage, node: &SlurmNode, gpus: u32, cpus: u32, mem: u64) -> Option<Vec<u32>> {
    let free: Vec<u32> = (0..node.gpus).filter(|i| !u.gpu_used.contains(i)).collect();
    let fits = free.len() >= gpus as usize
        && u.cpu_used + u64::from(cpus) <= u64::from(node.cpus)
        && u.mem_used + mem <= node.mem_mib;
    if !fits {
        u.gpu_used.extend(0..node.gpus);
        u.cpu_used = u64::from(node.cpus);
        u.mem_used = node.mem_mib;
        return None;
    }
    let chosen: Vec<u32> = free.into_iter().take(gpus as usize).collect();
    u.gpu_used.extend(chosen.iter().copied());
    u.cpu_used += u64::from(cpus);
    u.mem_used += mem;
    Some(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::World;

    fn node(name: &str, gpu: &str, used: &[u32]) -> SlurmNode {
        SlurmNode {
            name: name.into(),
            cpus: 16,
            cpu_alloc: 2 * used.len() as u32,
            mem_mib: 64_000,
            mem_alloc_mib: 1024 * used.len() as u64,
            gpu_type: Some(gpu.into()),
            gpus: 4,
            gpu_used: used.iter().copied().collect(),
            state: "MIXED".into(),
            partitions: vec!["gpu".into()],
            features: vec![],
        }
    }

    fn job(id: u64, state: &str, priority: u64, gpus: u32, kind: &str) -> SlurmJob {
        SlurmJob {
            id,
            name: "j".into(),
            user: "alice".into(),
            partition: "gpu".into(),
            state: state.into(),
            priority,
            nodes: 1,
            cpus: 2,
            tasks: 1,
            mem_per_node_mib: 1024,
            gpus_per_node: gpus,
            gpu_type: Some(kind.into()),
            time_limit_ms: Some(60_000),
            submit_s: Some(1_000),
            admin_comment: "lachesis:managed".into(),
            ..SlurmJob::default()
        }
    }

    #[test]
    fn roles_follow_the_marker_the_hold_and_the_pin() {
        let cfg = BridgeConfig::default();
        assert_eq!(
            role(&cfg, &job(1, "PENDING", 0, 1, "a100"), false),
            Role::Candidate
        );
        assert_eq!(
            role(&cfg, &job(1, "PENDING", 0, 1, "a100"), true),
            Role::Waiting
        );
        let mut j = job(1, "PENDING", 7, 1, "a100");
        assert_eq!(role(&cfg, &j, false), Role::Foreign, "released to Slurm");
        j.req_nodes = vec!["a1".into()];
        assert_eq!(role(&cfg, &j, false), Role::Reserved);
        let mut j = job(1, "PENDING", 0, 1, "a100");
        j.admin_comment.clear();
        assert_eq!(
            role(&cfg, &j, false),
            Role::Foreign,
            "held by hand, not ours"
        );
        j.admin_comment = "lachesis:managed".into();
        j.gpu_shape_error = Some("x".into());
        assert_eq!(role(&cfg, &j, false), Role::Unsupported);
    }

    #[test]
    fn the_snapshot_counts_running_jobs_and_reservations_and_validates() {
        let cfg = BridgeConfig::default();
        let nodes = vec![
            node("a1", "a100", &[0, 1]),
            node("a2", "a100", &[]),
            node("v1", "v100", &[]),
        ];
        let mut running = job(10, "RUNNING", 5, 2, "a100");
        running.start_s = Some(1_500);
        running.alloc = vec![super::super::model::NodeAlloc {
            node: "a1".into(),
            cpus: 4,
            gpus: [0, 1].into_iter().collect(),
            mem_mib: Some(2048),
        }];
        let mut reserved = job(11, "PENDING", 9, 3, "a100");
        reserved.req_nodes = vec!["a2".into()];
        let pending = job(12, "PENDING", 0, 4, "a100");
        let too_big = job(13, "PENDING", 0, 8, "a100");
        let jobs = vec![running, reserved, pending, too_big];
        let roles: BTreeMap<u64, Role> =
            jobs.iter().map(|j| (j.id, role(&cfg, j, false))).collect();
        let gs = groups(&nodes, &jobs, &roles);
        assert_eq!(gs.len(), 1);
        let (parts, set) = &gs[0];
        let g = snapshot(
            &cfg,
            parts,
            set,
            &View {
                nodes: &nodes,
                jobs: &jobs,
                roles: &roles,
                attained: &[(12, 7_000)].into(),
                stopped: &[(12, 1_600_000)].into(),
            },
            &usage_of(&nodes),
            2_000_000,
        );
        let s = &g.snapshot;
        assert_eq!(s.running.len(), 2, "the running job and the reservation");
        assert_eq!(s.running[0].run_ms, 500_000);
        let a2 = s.nodes.iter().find(|n| n.name == "a2").unwrap();
        assert_eq!(
            a2.gpu_free_milli,
            [0, 0, 0, 1000],
            "the reservation holds the lowest 3 GPUs"
        );
        assert_eq!(
            s.pending.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
            ["12"]
        );
        assert_eq!(s.pending[0].gpu_types, ["A100"]);
        assert_eq!(
            s.pending[0].attained_ms, 7_000,
            "earlier runs count for LAS"
        );
        assert_eq!(
            s.pending[0].idle_ms,
            Some(400_000),
            "requeued 400 s ago, by the bridge's clock"
        );
        assert_eq!(s.pending[0].wait_ms, 1_000_000, "1000 s since submit");
        assert_eq!(g.never_fit.len(), 1, "8 GPUs on 4-GPU nodes");
        World::build(s).expect("the snapshot is valid for the service");
    }

    #[test]
    fn placements_slurm_could_not_run_are_refused() {
        let nodes = vec![node("a1", "a100", &[]), node("v1", "v100", &[])];
        let by_name: BTreeMap<&str, &SlurmNode> =
            nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let j = job(1, "PENDING", 0, 1, "a100");
        assert!(can_run(&j, &["a1".into()], &by_name).is_ok());
        let e = can_run(&j, &["v1".into()], &by_name).unwrap_err();
        assert!(e.contains("has v100 GPUs, the job asks for a100"), "{e}");
        assert!(
            can_run(&j, &["ghost".into()], &by_name)
                .unwrap_err()
                .contains("unknown")
        );
        assert!(
            can_run(&j, &["a1".into(), "a1".into()], &by_name)
                .unwrap_err()
                .contains("repeat")
        );
        let mut two = j.clone();
        two.nodes = 2;
        assert!(
            can_run(&two, &["a1".into()], &by_name)
                .unwrap_err()
                .contains("asks for 2")
        );
        let mut drained = nodes.clone();
        drained[0].state = "IDLE+DRAIN".into();
        let by_name: BTreeMap<&str, &SlurmNode> =
            drained.iter().map(|n| (n.name.as_str(), n)).collect();
        assert!(
            can_run(&j, &["a1".into()], &by_name)
                .unwrap_err()
                .contains("DRAIN")
        );
        let mut other = j.clone();
        other.partition = "cpu".into();
        let by_name: BTreeMap<&str, &SlurmNode> =
            nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        assert!(
            can_run(&other, &["a1".into()], &by_name)
                .unwrap_err()
                .contains("not in partition")
        );
        let mut feat = j;
        feat.constraint = lachesis_env::constraint::Constraints::parse("ib").unwrap();
        assert!(
            can_run(&feat, &["a1".into()], &by_name)
                .unwrap_err()
                .contains("lacks the features ib")
        );
    }
}
