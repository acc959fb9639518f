//! Synthetic cluster snapshots of any size, for the bench, the soak and the tests: nodes of 8
//! GPUs (three A100 nodes to one V100), filled by running jobs to a target utilization, and a
//! queue of pending jobs of mixed shapes (whole GPUs, shares of one GPU, gangs), tenants,
//! priorities, waits and estimates. Deterministic for a seed.

use crate::proto;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// A snapshot of `nodes` nodes about `utilization` (0-1) busy with `pending` jobs queued.
pub fn snapshot(nodes: usize, pending: usize, utilization: f64, seed: u64) -> proto::Snapshot {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cluster: Vec<proto::Node> = (0..nodes)
        .map(|i| proto::Node {
            name: format!("node-{i:05}"),
            gpu_model: if i % 4 == 3 { "V100" } else { "A100" }.into(),
            gpus: 8,
            gpu_free_milli: Vec::new(),
            cpu_milli: 96_000,
            cpu_free_milli: None,
            mem_mib: 1_048_576,
            mem_free_mib: None,
            labels: [("rack".to_string(), format!("rack-{}", i / 32))]
                .into_iter()
                .collect(),
        })
        .collect();
    // Free GPUs per node, filled first-fit by running jobs.
    let mut free: Vec<Vec<bool>> = vec![vec![true; 8]; nodes];
    let mut cpu_free = vec![96_000u64; nodes];
    let target = (nodes as f64 * 8.0 * utilization.clamp(0.0, 1.0)) as usize;
    let mut used = 0usize;
    let mut running = Vec::new();
    let mut cursor = 0usize;
    while used < target {
        let gpus = [1u32, 1, 2, 4, 8][rng.random_range(0..5usize)].min((target - used) as u32);
        let Some((node, picked)) = (0..nodes).find_map(|k| {
            let n = (cursor + k) % nodes;
            let idle: Vec<u32> = (0..8u32).filter(|g| free[n][*g as usize]).collect();
            (idle.len() >= gpus as usize && cpu_free[n] >= 8_000 * u64::from(gpus))
                .then(|| (n, idle[..gpus as usize].to_vec()))
        }) else {
            break;
        };
        cursor = node;
        for g in &picked {
            free[node][*g as usize] = false;
        }
        cpu_free[node] -= 8_000 * u64::from(gpus);
        used += gpus as usize;
        let id = running.len();
        running.push(proto::RunningJob {
            job: Some(proto::Job {
                gpu_types: Vec::new(),
                ..job(&mut rng, format!("run-{id}"), 1, gpus, 1000)
            }),
            tasks: vec![proto::TaskPlacement {
                node: cluster[node].name.clone(),
                gpus: picked,
            }],
            run_ms: rng.random_range(0..3_600_000),
        });
        if let Some(r) = running.last_mut()
            && let Some(j) = r.job.as_mut()
        {
            j.wait_ms += r.run_ms;
        }
    }
    let queue = (0..pending)
        .map(|i| pending_job(&mut rng, format!("job-{i}")))
        .collect();
    // Report node usage from the placements only (no unlisted usage).
    for n in cluster.iter_mut() {
        n.gpu_free_milli.clear();
    }
    proto::Snapshot {
        cluster: format!("synthetic-{nodes}"),
        now_ms: 86_400_000,
        nodes: cluster,
        running,
        pending: queue,
    }
}

/// A pending job of the snapshot's mix (whole GPUs, shares, gangs).
fn pending_job(rng: &mut StdRng, id: String) -> proto::Job {
    let (tasks, gpus, milli) = match rng.random_range(0..10u32) {
        0 => (1, 1, 500),
        1 => (2, 8, 1000),
        2 | 3 => (1, 8, 1000),
        4 => (1, 4, 1000),
        5 | 6 => (1, 2, 1000),
        _ => (1, 1, 1000),
    };
    job(rng, id, tasks, gpus, milli)
}

/// A caller of a session, as a scheduler's cycle would drive it: it counts each answer as
/// carried out, and each delta moves the clock by `step_ms`, finishes as many running jobs as
/// the last answer started (so the cluster stays about as busy) and submits new jobs to bring
/// the queue back to its size. Deterministic for a seed.
#[derive(Debug)]
pub struct SessionDriver {
    rng: StdRng,
    now_ms: u64,
    step_ms: u64,
    queue: usize,
    /// Running jobs, and where each sits in `running` (finishing one is a swap-remove).
    running: Vec<String>,
    /// Asked and changed, never walked (so the hash cannot change what the driver does).
    at: std::collections::HashMap<String, usize, foldhash::fast::FixedState>,
    pending: std::collections::HashSet<String, foldhash::fast::FixedState>,
    started_last: usize,
    revision: u64,
    next: u64,
}

impl SessionDriver {
    /// A driver for the session `snapshot` opens, keeping `queue` jobs pending.
    pub fn new(snapshot: &proto::Snapshot, queue: usize, step_ms: u64, seed: u64) -> Self {
        let running: Vec<String> = snapshot
            .running
            .iter()
            .filter_map(|r| r.job.as_ref().map(|j| j.id.clone()))
            .collect();
        SessionDriver {
            at: running
                .iter()
                .enumerate()
                .map(|(i, j)| (j.clone(), i))
                .collect(),
            running,
            rng: StdRng::seed_from_u64(seed),
            now_ms: snapshot.now_ms,
            step_ms: step_ms.max(1),
            queue,
            pending: snapshot.pending.iter().map(|j| j.id.clone()).collect(),
            started_last: 0,
            revision: 0,
            next: 0,
        }
    }

    /// Takes in an answer: its placements run, its preemptions wait again.
    pub fn answered(&mut self, answer: &proto::DecideResponse) {
        for v in &answer.preemptions {
            if let Some(k) = self.at.get(v).copied() {
                let job = self.stop(k);
                self.pending.insert(job);
            }
        }
        for p in &answer.placements {
            if self.pending.remove(&p.job) {
                self.at.insert(p.job.clone(), self.running.len());
                self.running.push(p.job.clone());
            }
        }
        self.started_last = answer.placements.len();
        self.revision = answer.revision;
    }

    /// Takes the running job at `k` out (swap-remove, keeping `at` right).
    fn stop(&mut self, k: usize) -> String {
        let job = self.running.swap_remove(k);
        self.at.remove(&job);
        if let Some(moved) = self.running.get(k) {
            self.at.insert(moved.clone(), k);
        }
        job
    }

    /// The next delta (see the type's description).
    pub fn delta(&mut self) -> proto::SnapshotDelta {
        self.now_ms += self.step_ms;
        let mut finished = Vec::with_capacity(self.started_last);
        for _ in 0..self.started_last.min(self.running.len()) {
            let k = self.rng.random_range(0..self.running.len());
            finished.push(self.stop(k));
        }
        let mut submitted = Vec::new();
        while self.pending.len() + submitted.len() < self.queue {
            let id = format!("new-{}", self.next);
            self.next += 1;
            let mut job = pending_job(&mut self.rng, id);
            // Submitted since the last delta, so never before a job the session holds.
            job.wait_ms = self.rng.random_range(0..self.step_ms);
            submitted.push(job);
        }
        self.pending.extend(submitted.iter().map(|j| j.id.clone()));
        proto::SnapshotDelta {
            revision: self.revision,
            now_ms: self.now_ms,
            finished,
            requeued: Vec::new(),
            submitted,
        }
    }
}

/// The snapshots' tenants.
const TEAMS: [&str; 12] = [
    "team-0", "team-1", "team-2", "team-3", "team-4", "team-5", "team-6", "team-7", "team-8",
    "team-9", "team-10", "team-11",
];

fn job(rng: &mut StdRng, id: String, tasks: u32, gpus: u32, milli: u32) -> proto::Job {
    let preemptible = rng.random_range(0..3u32) == 0;
    proto::Job {
        id,
        tenant: TEAMS[rng.random_range(0..TEAMS.len() as u32) as usize].to_string(),
        priority: rng.random_range(0..3),
        qos: String::new(),
        preemptible,
        tasks,
        gpus_per_task: gpus,
        gpu_milli: milli,
        cpu_milli: 8_000 * u64::from(gpus),
        mem_mib: 65_536 * u64::from(gpus),
        gpu_types: if rng.random_range(0..5u32) == 0 {
            vec!["A100".into()]
        } else {
            Vec::new()
        },
        estimate_ms: (rng.random_range(0..2u32) == 0)
            .then(|| rng.random_range(600_000..86_400_000)),
        wait_ms: rng.random_range(0..7_200_000),
        kind: String::new(),
        attained_ms: 0,
        idle_ms: None,
    }
}
