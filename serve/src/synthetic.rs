//! Synthetic cluster snapshots of any size, for the bench, the soak and the tests: nodes of 8
//! GPUs (three A100 nodes to one V100), filled by running jobs to a target utilization, and a
//! queue of pending jobs of mixed shapes (whole GPUs, shares of one GPU, gangs), tenants,
//! priorities, waits and estimates. Deterministic for a seed. Also scripted traffic driven by
//! the service's answers (`Traffic`), for tests of the decision log's replay and the guard.

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

/// One job of scripted traffic (`Traffic`).
#[derive(Debug, Clone)]
pub struct ScriptedJob {
    pub id: String,
    pub tenant: String,
    /// Whole GPUs of its single task (8 CPU cores and 64 GiB per GPU).
    pub gpus: u32,
    pub submit_ms: u64,
    /// Run time it needs (the caller's truth; snapshots never carry it).
    pub run_ms: u64,
    /// The user's estimate, if any.
    pub estimate_ms: Option<u64>,
}

/// A scheduler driven by the service, for tests of replay and the guard: scripted jobs arrive
/// at their submit times, each step sends the cluster as it is (`snapshot`), the service's
/// answer is carried out (`answered`: placements start, preemptions go back to the queue), and
/// a job leaves once it has run for its run time. When the cluster is idle the clock jumps to
/// the next arrival; one last snapshot shows it empty, so every job is seen to finish.
#[derive(Debug)]
pub struct Traffic {
    nodes: Vec<proto::Node>,
    jobs: Vec<ScriptedJob>,
    step_ms: u64,
    now_ms: Option<u64>,
    /// The next job to arrive (jobs are kept in submit order).
    next: usize,
    /// Job indices waiting, in arrival order, and what each has run so far.
    pending: Vec<usize>,
    attained_ms: Vec<u64>,
    /// Job index, where it runs, and when this run began.
    running: Vec<(usize, Vec<proto::TaskPlacement>, u64)>,
    done: bool,
}

impl Traffic {
    /// Traffic of `jobs` on `nodes`, a snapshot every `step_ms`.
    pub fn new(nodes: Vec<proto::Node>, mut jobs: Vec<ScriptedJob>, step_ms: u64) -> Self {
        jobs.sort_by_key(|j| j.submit_ms);
        Traffic {
            nodes,
            attained_ms: vec![0; jobs.len()],
            jobs,
            step_ms: step_ms.max(1),
            now_ms: None,
            next: 0,
            pending: Vec::new(),
            running: Vec::new(),
            done: false,
        }
    }

    /// The cluster one step on; `None` after the snapshot that showed it empty for good.
    pub fn snapshot(&mut self) -> Option<proto::Snapshot> {
        if self.done {
            return None;
        }
        let arrival = self.jobs.get(self.next).map(|j| j.submit_ms);
        let idle = self.pending.is_empty() && self.running.is_empty();
        let now = match (self.now_ms, arrival) {
            (None, a) => a.unwrap_or(0),
            (Some(t), Some(a)) if idle => (t + self.step_ms).max(a),
            (Some(t), _) => t + self.step_ms,
        };
        self.now_ms = Some(now);
        let (jobs, attained) = (&self.jobs, &self.attained_ms);
        self.running
            .retain(|(j, _, started)| attained[*j] + (now - started) < jobs[*j].run_ms);
        while self.jobs.get(self.next).is_some_and(|j| j.submit_ms <= now) {
            self.pending.push(self.next);
            self.next += 1;
        }
        if self.pending.is_empty() && self.running.is_empty() && self.next == self.jobs.len() {
            self.done = true;
        }
        let job = |j: usize| {
            let s = &self.jobs[j];
            proto::Job {
                id: s.id.clone(),
                tenant: s.tenant.clone(),
                tasks: 1,
                gpus_per_task: s.gpus,
                cpu_milli: 8_000 * u64::from(s.gpus),
                mem_mib: 65_536 * u64::from(s.gpus),
                estimate_ms: s.estimate_ms,
                wait_ms: now - s.submit_ms,
                attained_ms: self.attained_ms[j],
                ..Default::default()
            }
        };
        Some(proto::Snapshot {
            cluster: "traffic".into(),
            now_ms: now,
            nodes: self.nodes.clone(),
            running: self
                .running
                .iter()
                .map(|(j, tasks, started)| proto::RunningJob {
                    job: Some(job(*j)),
                    tasks: tasks.clone(),
                    run_ms: now - started,
                })
                .collect(),
            pending: self.pending.iter().map(|j| job(*j)).collect(),
        })
    }

    /// Carries out the answer to the last snapshot.
    pub fn answered(&mut self, answer: &proto::DecideResponse) {
        let now = self.now_ms.unwrap_or(0);
        for victim in &answer.preemptions {
            if let Some(k) = self
                .running
                .iter()
                .position(|(j, _, _)| self.jobs[*j].id == *victim)
            {
                let (j, _, started) = self.running.remove(k);
                self.attained_ms[j] += now - started;
                self.pending.push(j);
            }
        }
        for p in &answer.placements {
            if let Some(k) = self.pending.iter().position(|j| self.jobs[*j].id == p.job) {
                let j = self.pending.remove(k);
                self.running.push((j, p.tasks.clone(), now));
            }
        }
    }
}

impl Traffic {
    /// Bursts where the order of the queue decides the JCT: every `gap_ms` one long job
    /// (60 min) and then four short ones (10, 15 or 20 min, by burst) arrive together on one
    /// V100 node of 8 GPUs,
    /// each job taking the whole node, every job's estimate its true run time; a snapshot every
    /// 5 minutes. Shortest-first finishes the short jobs an hour earlier than first-come.
    pub fn head_of_line(bursts: usize, gap_ms: u64) -> Traffic {
        let node = proto::Node {
            name: "n0".into(),
            gpu_model: "V100".into(),
            gpus: 8,
            cpu_milli: 64_000,
            mem_mib: 524_288,
            ..Default::default()
        };
        let jobs = (0..bursts)
            .flat_map(|b| {
                (0..5u64).map(move |k| {
                    let run_ms = match k {
                        0 => 3_600_000,
                        _ => 600_000 + 300_000 * (b as u64 % 3),
                    };
                    ScriptedJob {
                        id: format!("b{b}-{k}"),
                        tenant: format!("t{}", k % 2),
                        gpus: 8,
                        submit_ms: b as u64 * gap_ms,
                        run_ms,
                        estimate_ms: Some(run_ms),
                    }
                })
            })
            .collect();
        Traffic::new(vec![node], jobs, 300_000)
    }

    /// Sends every snapshot through `engine` and carries out its answers until the traffic
    /// ends; the number of requests.
    pub async fn drive(
        mut self,
        engine: &std::sync::Arc<crate::Engine>,
    ) -> Result<usize, tonic::Status> {
        let mut requests = 0;
        while let Some(snapshot) = self.snapshot() {
            let answer = engine
                .decide(proto::DecideRequest {
                    snapshot: Some(snapshot),
                    ..Default::default()
                })
                .await?;
            self.answered(&answer);
            requests += 1;
        }
        Ok(requests)
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
        constraints: String::new(),
        distinct_nodes: false,
        ..Default::default()
    }
}
