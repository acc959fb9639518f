//! Feasibility: does a job (all of its tasks, as a gang) fit, where, and if not, why.
//!
//! One family of functions serves the simulator's check of every decision, every heuristic's
//! candidate search, the environment's action mask, the service's shield and its "why is this
//! job pending" answers. Infeasible is a value (`Infeasible`), never a panic or an error.

use super::ClusterSpec;
use super::state::{ClusterState, TaskPlacement};
use crate::job::JobSpec;
use crate::units::{GPU_MILLI, NodeId};
use serde::Serialize;
use std::fmt;
use std::sync::Arc;

/// How to choose among nodes (and GPUs on a node) that fit a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FitStrategy {
    /// Lowest node id that fits; lowest GPU indices.
    FirstFit,
    /// Node with the least free GPU capacity that fits (then least free CPU, then lowest id);
    /// for a shared GPU, the GPU with the least free share. CPU-only tasks: least free CPU.
    BestFit,
    /// Node with the most free GPU capacity (then CPU); the emptiest GPU for a share.
    WorstFit,
}

/// Why a placement, or a job, does not fit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum Infeasible {
    /// The decision gives a different number of task placements than the job has tasks.
    TaskCount {
        want: u32,
        got: u32,
    },
    UnknownNode(NodeId),
    /// A task placement names a different number of GPUs than the task asks for.
    GpuCount {
        node: NodeId,
        want: u32,
        got: u32,
    },
    /// The node's GPU model is not among the job's allowed types (or it has no GPU).
    ModelNotAllowed {
        node: NodeId,
    },
    /// The node's labels do not satisfy the job's constraints.
    LabelsNotMatched {
        node: NodeId,
    },
    /// Two tasks of a gang that needs distinct nodes on one node.
    SameNode {
        node: NodeId,
    },
    /// No node in the cluster has labels that satisfy the job's constraints (text form).
    NoNodeMatches {
        constraints: String,
    },
    NoSuchGpu {
        node: NodeId,
        gpu: u8,
    },
    DuplicateGpu {
        node: NodeId,
        gpu: u8,
    },
    GpuBusy {
        node: NodeId,
        gpu: u8,
        free_milli: u32,
        need_milli: u32,
    },
    CpuShort {
        node: NodeId,
        free: u64,
        need: u64,
    },
    MemShort {
        node: NodeId,
        free: u64,
        need: u64,
    },
    /// No node in the cluster has a GPU model the job allows.
    NoAllowedModel {
        gpu_types: Vec<String>,
    },
    /// Less GPU capacity is free on allowed nodes than the job needs.
    GpuShort {
        need_milli: u64,
        free_milli: u64,
    },
    /// Enough GPU capacity is free in total, but not enough of it together on single nodes
    /// (whole GPUs, or one GPU's share) for the tasks.
    Fragmented {
        need_milli: u64,
        free_milli: u64,
    },
    /// GPUs would fit, but CPU is short on every such node.
    CpuShortEverywhere {
        need: u64,
    },
    /// GPUs and CPU would fit, but memory is short on every such node.
    MemShortEverywhere {
        need: u64,
    },
    /// Each task fits somewhere, but not all of the gang's tasks at once.
    GangSpread {
        tasks: u32,
        placeable: u32,
    },
    /// The job does not fit even on the empty cluster.
    NeverFits,
}

impl fmt::Display for Infeasible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Infeasible::*;
        match self {
            TaskCount { want, got } => write!(f, "{got} task placements for a job of {want} tasks"),
            UnknownNode(n) => write!(f, "node {n} does not exist"),
            GpuCount { node, want, got } => {
                write!(f, "node {node}: {got} GPUs given for a task of {want}")
            }
            ModelNotAllowed { node } => write!(f, "node {node}: GPU model not allowed"),
            LabelsNotMatched { node } => {
                write!(f, "node {node}: labels do not meet the job's constraints")
            }
            SameNode { node } => write!(
                f,
                "node {node}: two tasks of a gang that needs distinct nodes"
            ),
            NoNodeMatches { constraints } => {
                write!(f, "no node has labels that meet {constraints}")
            }
            NoSuchGpu { node, gpu } => write!(f, "node {node} has no GPU {gpu}"),
            DuplicateGpu { node, gpu } => write!(f, "node {node}: GPU {gpu} given twice"),
            GpuBusy {
                node,
                gpu,
                free_milli,
                need_milli,
            } => write!(
                f,
                "node {node} GPU {gpu}: {free_milli} milli-GPU free, {need_milli} needed"
            ),
            CpuShort { node, free, need } => {
                write!(f, "node {node}: {free} milli-CPU free, {need} needed")
            }
            MemShort { node, free, need } => {
                write!(f, "node {node}: {free} MiB free, {need} needed")
            }
            NoAllowedModel { gpu_types } => {
                write!(
                    f,
                    "no node has an allowed GPU model ({})",
                    gpu_types.join("|")
                )
            }
            GpuShort {
                need_milli,
                free_milli,
            } => write!(
                f,
                "not enough GPU free: {} needed, {} free on allowed nodes",
                gpus(*need_milli),
                gpus(*free_milli)
            ),
            Fragmented {
                need_milli,
                free_milli,
            } => write!(
                f,
                "fragmented: {} free on allowed nodes but not together ({} needed)",
                gpus(*free_milli),
                gpus(*need_milli)
            ),
            CpuShortEverywhere { need } => {
                write!(f, "CPU: no node with free GPUs has {need} milli-CPU free")
            }
            MemShortEverywhere { need } => {
                write!(
                    f,
                    "memory: no node with free GPUs and CPU has {need} MiB free"
                )
            }
            GangSpread { tasks, placeable } => {
                write!(
                    f,
                    "gang of {tasks} tasks: only {placeable} can be placed at once"
                )
            }
            NeverFits => write!(f, "does not fit even on the empty cluster"),
        }
    }
}

fn gpus(milli: u64) -> String {
    format!("{:.2} GPUs", milli as f64 / GPU_MILLI as f64)
}

impl ClusterState {
    /// Where every task of `job` would go by `strategy` now, placing tasks one after another
    /// (each sees the ones before it, so tasks consolidate on a node while it has room). Greedy:
    /// `None` means this strategy found no placement. The state is left unchanged.
    pub fn find_job_placement(
        &mut self,
        job: &JobSpec,
        strategy: FitStrategy,
    ) -> Option<Vec<TaskPlacement>> {
        let mask = self.spec().job_mask(job);
        let distinct = job.constraints.distinct_nodes;
        let mut tasks: Vec<TaskPlacement> = Vec::with_capacity(job.tasks as usize);
        let mut ok = true;
        // Each task but the last is taken while the next ones are looked for (no later task
        // sees the last, so a single-task job changes nothing, not even the index).
        let mut taken = 0;
        for k in 0..job.tasks {
            let Some(t) = self.find_task_node(&job.task, mask, strategy) else {
                ok = false;
                break;
            };
            if k + 1 < job.tasks {
                self.take_task(&job.task, mask, &t)
                    .expect("the index found this task a fit");
                taken += 1;
                if distinct {
                    self.exclude_node(t.node);
                }
            }
            tasks.push(t);
        }
        if distinct {
            self.clear_excluded();
        }
        for t in tasks[..taken].iter().rev() {
            self.give_back_task(&job.task, t);
        }
        ok.then_some(tasks)
    }

    /// Why `job` cannot be placed now: the first binding constraint, from GPU model through
    /// GPU capacity, fragmentation, CPU and memory to the gang as a whole. Scans every node:
    /// meant for answers to people, not for the hot path.
    pub fn explain(&mut self, job: &JobSpec) -> Option<Infeasible> {
        self.explain_given(job, None)
    }

    /// `explain` for a job the caller already knows fits the empty cluster (the service
    /// checks that of every pending job it takes in): skips building an empty copy of the
    /// cluster to ask again, most of `explain`'s cost on a large cluster.
    pub fn explain_fitting_empty(&mut self, job: &JobSpec) -> Option<Infeasible> {
        self.explain_given(job, Some(true))
    }

    fn explain_given(&mut self, job: &JobSpec, fits: Option<bool>) -> Option<Infeasible> {
        if self
            .find_job_placement(job, FitStrategy::FirstFit)
            .is_some()
        {
            return None;
        }
        let spec = Arc::clone(self.spec_arc());
        if !fits.unwrap_or_else(|| fits_empty(&spec, job)) {
            return Some(Infeasible::NeverFits);
        }
        let mask = spec.job_mask(job);
        let t = &job.task;
        if mask.classes == 0 {
            return Some(Infeasible::NoNodeMatches {
                constraints: job.constraints.label_text(),
            });
        }
        let allowed: Vec<NodeId> = spec
            .node_ids()
            .filter(|n| spec.node_allowed(mask, *n, t.gpus))
            .collect();
        if allowed.is_empty() {
            return Some(if job.constraints.restricts_nodes() {
                Infeasible::NoNodeMatches {
                    constraints: job.constraints.label_text(),
                }
            } else {
                Infeasible::NoAllowedModel {
                    gpu_types: job.gpu_types.clone(),
                }
            });
        }
        let need_milli = job.gpu_milli_total();
        let free_milli: u64 = allowed
            .iter()
            .map(|n| u64::from(self.free_gpu_milli(*n)))
            .sum();
        if need_milli > free_milli {
            return Some(Infeasible::GpuShort {
                need_milli,
                free_milli,
            });
        }
        let gpu_ok = |s: &ClusterState, n: NodeId| {
            if t.gpus == 0 {
                true
            } else if t.is_fractional() {
                s.gpu_free(n).iter().any(|f| u32::from(*f) >= t.gpu_milli)
            } else {
                s.free_whole_gpus(n) >= t.gpus
            }
        };
        let gpu_nodes: Vec<NodeId> = allowed
            .iter()
            .copied()
            .filter(|n| gpu_ok(self, *n))
            .collect();
        if gpu_nodes.is_empty() {
            return Some(Infeasible::Fragmented {
                need_milli,
                free_milli,
            });
        }
        let cpu_nodes: Vec<NodeId> = gpu_nodes
            .iter()
            .copied()
            .filter(|n| self.cpu_free(*n) >= t.cpu_milli)
            .collect();
        if cpu_nodes.is_empty() {
            return Some(Infeasible::CpuShortEverywhere { need: t.cpu_milli });
        }
        if !cpu_nodes.iter().any(|n| self.mem_free(*n) >= t.mem_mib) {
            return Some(Infeasible::MemShortEverywhere { need: t.mem_mib });
        }
        let placeable = self.placeable_tasks(job);
        Some(Infeasible::GangSpread {
            tasks: job.tasks,
            placeable,
        })
    }

    /// How many of `job`'s tasks first-fit places before it runs out of room.
    fn placeable_tasks(&mut self, job: &JobSpec) -> u32 {
        let mask = self.spec().job_mask(job);
        let mut taken = Vec::new();
        while taken.len() < job.tasks as usize {
            let Some(t) = self.find_task_node(&job.task, mask, FitStrategy::FirstFit) else {
                break;
            };
            self.take_task(&job.task, mask, &t)
                .expect("the index found this task a fit");
            if job.constraints.distinct_nodes {
                self.exclude_node(t.node);
            }
            taken.push(t);
        }
        self.clear_excluded();
        for t in taken.iter().rev() {
            self.give_back_task(&job.task, t);
        }
        taken.len() as u32
    }
}

/// Whether `job` fits on the empty cluster (first-fit, tasks consolidated): a job for which
/// this is false can never run there.
pub fn fits_empty(spec: &Arc<ClusterSpec>, job: &JobSpec) -> bool {
    ClusterState::new(Arc::clone(spec))
        .find_job_placement(job, FitStrategy::FirstFit)
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::uniform;
    use crate::job::TaskRequest;
    use crate::job::tests::job;
    use crate::units::JobId;

    fn state(n: usize, gpus: u32) -> ClusterState {
        // Each node: `gpus` V100s, 32 cores, 256 GiB.
        ClusterState::new(Arc::new(uniform(n, gpus, "V100", 32_000, 262_144)))
    }

    fn gang(id: u32, tasks: u32, task: TaskRequest) -> JobSpec {
        let mut j = job(&format!("j{id}"), 0, task);
        j.id = JobId(id);
        j.tasks = tasks;
        j
    }

    fn frac(milli: u32) -> TaskRequest {
        TaskRequest {
            gpus: 1,
            gpu_milli: milli,
            cpu_milli: 1000,
            mem_mib: 1024,
        }
    }

    /// Table test: a cluster of 2 nodes x 4 GPUs, some of it taken first, then one job asked.
    #[test]
    fn feasibility_table() {
        struct Case {
            what: &'static str,
            taken: Vec<(u32, TaskRequest)>,
            ask: JobSpec,
            want: Option<Infeasible>,
        }
        let w = |g| TaskRequest::whole(g, 1000, 1024);
        let cases = vec![
            Case {
                // 8 GPUs free, 8 asked as 2 tasks x 4: one task per node.
                what: "gang fills the cluster exactly",
                taken: vec![],
                ask: gang(9, 2, w(4)),
                want: None,
            },
            Case {
                // 8 - 1 = 7 GPUs free < 2 x 4 = 8 asked.
                what: "one GPU short",
                taken: vec![(1, w(1))],
                ask: gang(9, 2, w(4)),
                want: Some(Infeasible::GpuShort {
                    need_milli: 8000,
                    free_milli: 7000,
                }),
            },
            Case {
                // Two 3-GPU jobs leave 1 + 1 free GPUs: 2000 free in total, but a 2-GPU task
                // needs both on one node.
                what: "free GPUs split over nodes",
                taken: vec![(1, w(3)), (2, w(3))],
                ask: gang(9, 1, w(2)),
                want: Some(Infeasible::Fragmented {
                    need_milli: 2000,
                    free_milli: 2000,
                }),
            },
            Case {
                // Shares 600 on every GPU of both nodes leave 8 x 400 = 3200 milli free, but no
                // GPU has the 500 asked.
                what: "shares too small on every GPU",
                taken: (1..=8).map(|i| (i, frac(600))).collect(),
                ask: gang(9, 1, frac(500)),
                want: Some(Infeasible::Fragmented {
                    need_milli: 500,
                    free_milli: 3200,
                }),
            },
            Case {
                // 400 + 500 = 900 <= 1000: both shares sit on GPU 0 of node 0.
                what: "fractional tasks share one GPU",
                taken: vec![(1, frac(400))],
                ask: gang(9, 1, frac(500)),
                want: None,
            },
            Case {
                // 32 cores per node, 33 asked.
                what: "CPU too large for any node",
                taken: vec![],
                ask: gang(9, 1, TaskRequest::whole(1, 33_000, 0)),
                want: Some(Infeasible::NeverFits),
            },
            Case {
                // 3 gang tasks of 4 GPUs on 2 nodes of 4: at most 2 at once, even empty.
                what: "gang larger than the cluster",
                taken: vec![],
                ask: gang(9, 3, w(4)),
                want: Some(Infeasible::NeverFits),
            },
            Case {
                // A CPU-only job takes 30 of node 0's 32 cores; a 4-GPU job asking 3 cores then
                // lands on node 1. The only node with a free GPU has 2 cores free, 4 asked.
                what: "CPU binds where GPUs are free",
                taken: vec![
                    (1, TaskRequest::whole(0, 30_000, 0)),
                    (2, TaskRequest::whole(4, 3000, 0)),
                ],
                ask: gang(9, 1, TaskRequest::whole(1, 4000, 0)),
                want: Some(Infeasible::CpuShortEverywhere { need: 4000 }),
            },
            Case {
                what: "GPU type nobody has",
                taken: vec![],
                ask: JobSpec {
                    gpu_types: vec!["H100".into()],
                    ..gang(9, 1, w(1))
                },
                want: Some(Infeasible::NeverFits),
            },
        ];
        for c in cases {
            let mut s = state(2, 4);
            for (id, task) in &c.taken {
                let j = gang(*id, 1, *task);
                let tasks = s
                    .find_job_placement(&j, FitStrategy::FirstFit)
                    .expect(c.what);
                s.allocate(&j, tasks).expect(c.what);
            }
            assert_eq!(s.explain(&c.ask), c.want, "{}", c.what);
            if c.want != Some(Infeasible::NeverFits) {
                assert_eq!(s.explain_fitting_empty(&c.ask), c.want, "{}", c.what);
            }
            s.check_invariants().expect(c.what);
        }
    }

    /// Node 0 labelled `zone=a`, node 1 `zone=b`, 4 GPUs each.
    #[test]
    fn labels_steer_and_explain() {
        let mut spec = uniform(2, 4, "V100", 32_000, 262_144);
        spec.nodes[0].labels.insert("zone".into(), "a".into());
        spec.nodes[1].labels.insert("zone".into(), "b".into());
        let spec = ClusterSpec::new(
            "z",
            spec.models,
            spec.nodes,
            spec.racks,
            spec.nvlink_domains,
        )
        .unwrap();
        let mut s = ClusterState::new(Arc::new(spec));
        let mut j = gang(9, 1, TaskRequest::whole(1, 1000, 1024));
        j.constraints = crate::constraint::Constraints::parse("zone=b").unwrap();
        // First fit would take node 0; the constraint leaves node 1.
        for f in [
            FitStrategy::FirstFit,
            FitStrategy::BestFit,
            FitStrategy::WorstFit,
        ] {
            assert_eq!(s.find_job_placement(&j, f).unwrap()[0].node, NodeId(1));
        }
        let on0 = vec![TaskPlacement {
            node: NodeId(0),
            gpus: vec![0],
        }];
        assert!(matches!(
            s.allocate(&j, on0),
            Err(crate::cluster::StateError::Infeasible {
                reason: Infeasible::LabelsNotMatched { node: NodeId(0) },
                ..
            })
        ));
        j.constraints = crate::constraint::Constraints::parse("zone=c").unwrap();
        assert_eq!(s.explain(&j), Some(Infeasible::NeverFits));
        assert_eq!(
            s.explain_fitting_empty(&j),
            Some(Infeasible::NoNodeMatches {
                constraints: "zone=c".into()
            })
        );
        // A distinct-nodes gang of 3 on 2 nodes never fits.
        let mut g = gang(10, 3, TaskRequest::whole(1, 1000, 1024));
        assert!(fits_empty(s.spec_arc(), &g));
        g.constraints.distinct_nodes = true;
        assert!(!fits_empty(s.spec_arc(), &g));
        s.check_invariants().unwrap();
    }

    #[test]
    fn strategies_choose_as_documented() {
        // Node 0 has 1 GPU taken (3 free), node 1 is empty (4 free), node 2 has 3 taken (1).
        let mut s = state(3, 4);
        for (id, node, g) in [(1, 0u32, 1u32), (2, 2, 3)] {
            let gpus = (0..g as u8).collect();
            s.allocate(
                &gang(id, 1, TaskRequest::whole(g, 0, 0)),
                vec![TaskPlacement {
                    node: NodeId(node),
                    gpus,
                }],
            )
            .expect("fits");
        }
        let one = gang(9, 1, TaskRequest::whole(1, 0, 0));
        let at = |s: &mut ClusterState, f| s.find_job_placement(&one, f).expect("fits")[0].node;
        assert_eq!(at(&mut s, FitStrategy::FirstFit), NodeId(0));
        assert_eq!(at(&mut s, FitStrategy::BestFit), NodeId(2)); // 1 free: the tightest
        assert_eq!(at(&mut s, FitStrategy::WorstFit), NodeId(1)); // 4 free: the emptiest
    }

    #[test]
    fn allocate_rejects_double_booking_and_keeps_state() {
        let mut s = state(1, 2);
        let a = gang(1, 1, TaskRequest::whole(2, 0, 0));
        s.allocate(
            &a,
            vec![TaskPlacement {
                node: NodeId(0),
                gpus: vec![0, 1],
            }],
        )
        .unwrap();
        let b = gang(2, 1, frac(100));
        let err = s.allocate(
            &b,
            vec![TaskPlacement {
                node: NodeId(0),
                gpus: vec![1],
            }],
        );
        assert!(matches!(
            err,
            Err(crate::cluster::StateError::Infeasible {
                reason: Infeasible::GpuBusy { .. },
                ..
            })
        ));
        // A gang whose second task does not fit leaves nothing behind.
        let c = gang(3, 2, frac(600));
        s.release(a.id).unwrap();
        let twice = vec![
            TaskPlacement {
                node: NodeId(0),
                gpus: vec![0],
            },
            TaskPlacement {
                node: NodeId(0),
                gpus: vec![0],
            },
        ];
        assert!(s.allocate(&c, twice).is_err());
        assert_eq!(s.allocated_gpu_milli(), 0);
        s.check_invariants().unwrap();
        assert!(matches!(
            s.release(c.id),
            Err(crate::cluster::StateError::NotRunning(_))
        ));
    }
}

#[cfg(test)]
mod allocate_many_tests {
    use super::*;
    use crate::cluster::tests::uniform;
    use crate::job::{TaskRequest, tests::job};

    /// Loading jobs in bulk ends in the very state (free capacity and index) that placing them
    /// one by one reaches, and a refused job leaves the ones before it placed.
    #[test]
    fn bulk_allocation_equals_one_by_one() {
        let spec = Arc::new(uniform(6, 8, "V100", 64_000, 512_000));
        let mut jobs = Vec::new();
        for i in 0..10u32 {
            let mut j = job(
                &format!("j{i}"),
                0,
                TaskRequest::whole(1 + i % 4, 4_000, 8_000),
            );
            j.id = crate::units::JobId(i);
            jobs.push(j);
        }
        let mut one = ClusterState::new(Arc::clone(&spec));
        let mut placements = Vec::new();
        for j in &jobs {
            let tasks = one
                .find_job_placement(j, FitStrategy::BestFit)
                .expect("room for every test job");
            one.allocate(j, tasks.clone()).expect("it was just found");
            placements.push(tasks);
        }
        let mut bulk = ClusterState::new(Arc::clone(&spec));
        bulk.allocate_many(jobs.iter().zip(placements.iter().cloned()))
            .expect("the same placements fit");
        bulk.check_invariants().expect("bulk state consistent");
        for n in spec.node_ids() {
            assert_eq!(bulk.gpu_free(n), one.gpu_free(n));
            assert_eq!(bulk.cpu_free(n), one.cpu_free(n));
            assert_eq!(bulk.mem_free(n), one.mem_free(n));
        }
        // Placing the first job twice is refused at position 10; the others stay.
        let mut again = ClusterState::new(Arc::clone(&spec));
        let twice = jobs
            .iter()
            .zip(placements.iter().cloned())
            .chain(std::iter::once((&jobs[0], placements[0].clone())));
        let (at, _) = again.allocate_many(twice).expect_err("a job placed twice");
        assert_eq!(at, 10);
        again
            .check_invariants()
            .expect("consistent after a refusal");
        for n in spec.node_ids() {
            assert_eq!(again.gpu_free(n), one.gpu_free(n));
        }
    }
}
