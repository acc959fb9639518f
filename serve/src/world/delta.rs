//! Sessions: a world moved on by what changed since its last answer (`SnapshotDelta`), and a
//! world written back as the snapshot it stands for (for the decision log, and to drop the ids
//! of jobs that left).
//!
//! A delta is checked whole before anything changes, so a bad one leaves the world as it was
//! and its error names the field (`delta.submitted[2].wait_ms`).

use super::{EntryPath, Map, World, intern, job_spec, unfit};
use crate::proto;
use lachesis_env::cluster::{ClusterState, FitStrategy};
use lachesis_env::policy::{JobRuntime, JobState};
use lachesis_env::units::{GPU_MILLI, JobId, NodeId, SimTime, TenantId};
use std::collections::HashSet;
use std::sync::Arc;

/// Ids of jobs that left are dropped (the world rebuilt from its own snapshot) once they
/// outnumber both this and the jobs still there.
pub const COMPACT_AFTER: usize = 4096;

/// Why a delta was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// The delta is wrong; the world is as it was.
    #[error("{0}")]
    Invalid(super::SnapshotError),
    /// The world could not take a delta that passed its checks (a bug): it must not be used
    /// again, and the caller must send a full snapshot.
    #[error("the session's state broke applying the delta ({0}): send a full snapshot")]
    Broken(String),
}

fn bad_delta(path: impl Into<String>, message: impl Into<String>) -> DeltaError {
    DeltaError::Invalid(super::SnapshotError {
        path: format!("delta.{}", path.into()),
        message: message.into(),
    })
}

/// `snapshot.submitted[i]...` (as `job_spec` words it) as `delta.submitted[i]...`.
fn in_delta(mut e: super::SnapshotError) -> DeltaError {
    if let Some(rest) = e.path.strip_prefix("snapshot.") {
        e.path = format!("delta.{rest}");
    }
    DeltaError::Invalid(e)
}

impl World {
    /// Moves the world on by `delta`: the clock, then jobs that finished, jobs requeued by
    /// someone else, and new pending jobs. Checked whole first: an `Invalid` error leaves the
    /// world unchanged.
    pub fn apply_delta(&mut self, delta: &proto::SnapshotDelta) -> Result<(), DeltaError> {
        if delta.now_ms < self.client_now {
            return Err(bad_delta(
                "now_ms",
                format!(
                    "{} ms is before the session's clock ({} ms); the clock never goes back",
                    delta.now_ms, self.client_now
                ),
            ));
        }
        let now = self
            .now
            .saturating_add(SimTime(delta.now_ms - self.client_now));

        let mut leaving: HashSet<JobId, foldhash::fast::RandomState> = HashSet::default();
        let mut finished = Vec::with_capacity(delta.finished.len());
        for (i, name) in delta.finished.iter().enumerate() {
            let id = self.live(name).ok_or_else(|| {
                bad_delta(
                    format!("finished[{i}]"),
                    format!("no job {name:?} runs or waits in this session"),
                )
            })?;
            if !leaving.insert(id) {
                return Err(bad_delta(
                    format!("finished[{i}]"),
                    format!("job {name:?} is listed twice"),
                ));
            }
            finished.push(id);
        }
        let mut requeued = Vec::with_capacity(delta.requeued.len());
        for (i, name) in delta.requeued.iter().enumerate() {
            let path = || format!("requeued[{i}]");
            let id = self.live(name).ok_or_else(|| {
                bad_delta(path(), format!("no job {name:?} runs in this session"))
            })?;
            if !leaving.insert(id) {
                return Err(bad_delta(
                    path(),
                    format!("job {name:?} is listed twice (finished or requeued)"),
                ));
            }
            if self.runtime[id.index()].state != JobState::Running {
                return Err(bad_delta(
                    path(),
                    format!("job {name:?} is pending, not running"),
                ));
            }
            requeued.push(id);
        }

        let live_after = self.job_ids.len() - finished.len() + delta.submitted.len();
        if live_after > super::MAX_SNAPSHOT_JOBS {
            return Err(bad_delta(
                "submitted",
                format!(
                    "{live_after} jobs after this delta, at most {} per session",
                    super::MAX_SNAPSHOT_JOBS
                ),
            ));
        }
        // New jobs in submit order (oldest first, ties by position), as `build` orders them.
        let mut order: Vec<usize> = (0..delta.submitted.len()).collect();
        order.sort_unstable_by_key(|i| (std::cmp::Reverse(delta.submitted[*i].wait_ms), *i));
        let mut names: Map<&str, usize> = Map::default();
        let mut new_shapes: Vec<(super::Shape, bool)> = Vec::new();
        let mut empty: Option<ClusterState> = None;
        let mut submitted = Vec::with_capacity(order.len());
        for i in order {
            let job = &delta.submitted[i];
            let spec = job_spec(
                job,
                EntryPath::Submitted(i),
                JobId(0),
                TenantId(0),
                now,
                super::Workloads::Table(self.table.as_deref()),
            )
            .map_err(in_delta)?;
            if let Some(first) = names.insert(job.id.as_str(), i) {
                return Err(bad_delta(
                    format!("submitted[{i}].id"),
                    format!("job id {:?} is also submitted[{first}]", job.id),
                ));
            }
            if let Some(id) = self.job_ids.get(&job.id)
                && !leaving.contains(id)
            {
                return Err(bad_delta(
                    format!("submitted[{i}].id"),
                    format!(
                        "job id {:?} is already in the session and has not finished",
                        job.id
                    ),
                ));
            }
            if spec.submit < self.newest_submit {
                return Err(bad_delta(
                    format!("submitted[{i}].wait_ms"),
                    format!(
                        "job {:?} was submitted {} ms before the newest job the session \
                         holds; a job reported late needs a full snapshot on this session",
                        job.id,
                        self.newest_submit.saturating_sub(spec.submit).ms()
                    ),
                ));
            }
            if let Some(idle) = job.idle_ms.filter(|idle| *idle > job.wait_ms) {
                return Err(bad_delta(
                    format!("submitted[{i}].idle_ms"),
                    format!(
                        "the job has been idle {idle} ms but was submitted only {} ms ago",
                        job.wait_ms
                    ),
                ));
            }
            if let Some(keys) = &self.label_keys
                && let Some(k) = spec.constraints.keys().find(|k| !keys.contains(*k))
            {
                return Err(bad_delta(
                    format!("submitted[{i}].constraints"),
                    format!(
                        "label {k:?} was dropped when the session's snapshot was built (too \
                         many distinct node label sets to keep all): send a new snapshot"
                    ),
                ));
            }
            let shape = (
                spec.tasks,
                spec.task,
                spec.gpu_types.clone(),
                spec.constraints.clone(),
            );
            let fits = match self.fits.get(&shape) {
                Some(f) => *f,
                None => match new_shapes.iter().find(|(s, _)| *s == shape) {
                    Some((_, f)) => *f,
                    None => {
                        let empty = empty.get_or_insert_with(|| {
                            ClusterState::new(Arc::clone(self.cluster.borrow().spec_arc()))
                        });
                        let f = empty
                            .find_job_placement(&spec, FitStrategy::FirstFit)
                            .is_some();
                        new_shapes.push((shape, f));
                        f
                    }
                },
            };
            if !fits {
                return Err(in_delta(unfit(
                    &EntryPath::Submitted(i).to_string(),
                    job,
                    &spec,
                )));
            }
            submitted.push((spec, job));
        }

        // Checked: from here on nothing may fail but a broken invariant.
        self.now = now;
        self.client_now = delta.now_ms;
        self.fits.extend(new_shapes);
        let state = self.cluster.get_mut();
        for id in finished {
            let rt = &mut self.runtime[id.index()];
            if rt.state == JobState::Running {
                state
                    .release(id)
                    .map_err(|e| DeltaError::Broken(e.to_string()))?;
            }
            rt.state = JobState::Finished;
            rt.run_start = None;
            self.pending.remove(&id);
            Arc::make_mut(&mut self.job_ids).remove(&self.jobs[id.index()].name);
            self.departed += 1;
        }
        for id in requeued {
            let held = state
                .release(id)
                .map_err(|e| DeltaError::Broken(e.to_string()))?;
            let rt = &mut self.runtime[id.index()];
            super::bank_run(rt, &held, now);
            rt.run_start = None;
            rt.last_stop = Some(now);
            rt.state = JobState::Pending;
            self.pending.insert(id);
        }
        for (mut spec, job) in submitted {
            let id = JobId(self.jobs.len() as u32);
            spec.id = id;
            spec.tenant = intern(&mut self.tenants, &mut self.tenant_ids, &job.tenant);
            self.newest_submit = self.newest_submit.max(spec.submit);
            Arc::make_mut(&mut self.job_ids).insert(spec.name.clone(), id);
            self.runtime.push(JobRuntime {
                attained_ms: job.attained_ms,
                attained_gpu_milli_ms: u128::from(job.attained_ms)
                    * u128::from(spec.gpu_milli_total()),
                last_stop: job.idle_ms.map(|idle| now.saturating_sub(SimTime(idle))),
                state: JobState::Pending,
                ..JobRuntime::default()
            });
            Arc::make_mut(&mut self.jobs).push(spec);
            self.pending.insert(id);
        }
        self.refresh_view();
        Ok(())
    }

    /// A job of the caller's that runs or waits, by name.
    fn live(&self, name: &str) -> Option<JobId> {
        self.job_ids.get(name).copied().filter(|id| {
            matches!(
                self.runtime[id.index()].state,
                JobState::Pending | JobState::Running
            )
        })
    }

    /// Jobs of the caller's that run or wait.
    pub fn live_jobs(&self) -> usize {
        self.job_ids.len()
    }

    /// Ids still held by jobs that left.
    pub fn departed(&self) -> usize {
        self.departed
    }

    /// Whether enough jobs have left that `compact` is worth its cost.
    pub fn wants_compaction(&self) -> bool {
        self.departed > COMPACT_AFTER.max(self.job_ids.len())
    }

    /// Drops the ids of jobs that left: the jobs still there keep their order (so submit
    /// order and reservations stay as they were) and get ids without gaps.
    pub fn compact(&mut self) {
        let mut new_ids: Vec<u32> = vec![u32::MAX; self.jobs.len()];
        let (mut jobs, mut runtime) = (Vec::new(), Vec::new());
        let mut reserved: Option<std::ops::Range<usize>> = None;
        for (old, (mut spec, rt)) in Arc::unwrap_or_clone(std::mem::take(&mut self.jobs))
            .into_iter()
            .zip(std::mem::take(&mut self.runtime))
            .enumerate()
        {
            let reservation = self.reserved.contains(&old);
            if rt.state == JobState::Finished && !reservation {
                continue;
            }
            let id = JobId(jobs.len() as u32);
            if reservation {
                let start = reserved.as_ref().map_or(id.index(), |r| r.start);
                reserved = Some(start..id.index() + 1);
            }
            new_ids[old] = id.0;
            spec.id = id;
            jobs.push(spec);
            runtime.push(rt);
        }
        let reserved = reserved.unwrap_or(jobs.len()..jobs.len());
        let renamed = |id: JobId| JobId(new_ids[id.index()]);
        self.cluster.get_mut().renumber(renamed);
        self.pending = self.pending.iter().map(|id| renamed(*id)).collect();
        for id in Arc::make_mut(&mut self.job_ids).values_mut() {
            *id = renamed(*id);
        }
        // Tenants and the fit cache only of what is still there, so a long session's memory
        // follows its live jobs, however many names and shapes went by.
        let (mut tenants, mut tenant_ids): (Vec<String>, Map<String, TenantId>) =
            (Vec::new(), Map::default());
        for spec in &mut jobs {
            spec.tenant = intern(
                &mut tenants,
                &mut tenant_ids,
                &self.tenants[spec.tenant.index()],
            );
        }
        if self.fits.len() > COMPACT_AFTER {
            self.fits.clear();
        }
        (self.jobs, self.runtime, self.reserved) = (Arc::new(jobs), runtime, reserved);
        (self.tenants, self.tenant_ids) = (tenants, tenant_ids);
        self.departed = 0;
        self.refresh_view();
    }

    /// The snapshot this world stands for, at its own clock: every running and pending job the
    /// caller listed (reservations of unlisted usage become the nodes' free capacity again).
    /// `nodes` are the nodes it was built from; their free capacity is the world's.
    pub fn export(&self, nodes: &[proto::Node], cluster: String) -> proto::Snapshot {
        let state = self.cluster.borrow();
        let nodes = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let node = NodeId(i as u32);
                proto::Node {
                    gpu_free_milli: state.gpu_free(node).iter().map(|f| u32::from(*f)).collect(),
                    cpu_free_milli: Some(state.cpu_free(node)),
                    mem_free_mib: Some(state.mem_free(node)),
                    ..n.clone()
                }
            })
            .collect();
        let mut running = Vec::new();
        let mut pending = Vec::new();
        for (i, spec) in self.jobs.iter().enumerate() {
            if self.reserved.contains(&i) {
                continue;
            }
            let rt = &self.runtime[i];
            let job = proto::Job {
                id: spec.name.clone(),
                tenant: self.tenants[spec.tenant.index()].clone(),
                priority: spec.priority,
                qos: spec.qos.as_str().into(),
                preemptible: spec.preemptible,
                tasks: spec.tasks,
                gpus_per_task: spec.task.gpus,
                gpu_milli: if spec.task.gpus == 0 {
                    0
                } else {
                    spec.task.gpu_milli.min(GPU_MILLI)
                },
                cpu_milli: spec.task.cpu_milli,
                mem_mib: spec.task.mem_mib,
                gpu_types: spec.gpu_types.clone(),
                estimate_ms: spec.estimate.map(SimTime::ms),
                wait_ms: self.now.saturating_sub(spec.submit).ms(),
                kind: spec.kind.as_str().into(),
                attained_ms: rt.attained_ms,
                idle_ms: rt.last_stop.map(|s| self.now.saturating_sub(s).ms()),
                constraints: spec.constraints.label_text(),
                distinct_nodes: spec.constraints.distinct_nodes,
                workload: spec
                    .workload
                    .as_ref()
                    .map_or_else(String::new, |w| w.as_str().to_string()),
                min_gpus: spec.elastic.map_or(0, |e| e.min_gpus),
                max_gpus: spec.elastic.map_or(0, |e| e.max_gpus),
            };
            match rt.state {
                JobState::Running => {
                    let tasks = state
                        .allocation(spec.id)
                        .map(|a| {
                            a.tasks
                                .iter()
                                .map(|t| proto::TaskPlacement {
                                    node: state.spec().node(t.node).name.clone(),
                                    gpus: t.gpus.iter().map(|g| u32::from(*g)).collect(),
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    running.push(proto::RunningJob {
                        job: Some(job),
                        tasks,
                        run_ms: self
                            .now
                            .saturating_sub(rt.run_start.unwrap_or(self.now))
                            .ms(),
                    });
                }
                JobState::Pending => pending.push(job),
                _ => {}
            }
        }
        proto::Snapshot {
            cluster,
            now_ms: self.now.ms(),
            nodes,
            running,
            pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{SessionDriver, snapshot};
    use lachesis_env::policy::{Decision, build_policy};

    /// A decision in the caller's names (ids differ between worlds).
    type Named = (Vec<(String, Vec<(String, Vec<u8>)>)>, Vec<String>);

    fn decide(world: &World) -> (Decision, Named) {
        let mut policy = build_policy("tiresias/best-fit/las-preempt", 0).unwrap();
        let decision = policy.decide(&world.context()).unwrap();
        let cluster = world.cluster();
        let named = (
            decision
                .placements
                .iter()
                .map(|p| {
                    (
                        world.job(p.job).name.clone(),
                        p.tasks
                            .iter()
                            .map(|t| (cluster.spec().node(t.node).name.clone(), t.gpus.clone()))
                            .collect(),
                    )
                })
                .collect(),
            decision
                .preemptions
                .iter()
                .map(|v| world.job(*v).name.clone())
                .collect(),
        );
        drop(cluster);
        (decision, named)
    }

    fn answer(named: &Named, revision: u64) -> proto::DecideResponse {
        proto::DecideResponse {
            placements: named
                .0
                .iter()
                .map(|(job, _)| proto::Placement {
                    job: job.clone(),
                    tasks: Vec::new(),
                })
                .collect(),
            preemptions: named.1.clone(),
            revision,
            ..Default::default()
        }
    }

    /// 80 nodes, a node reporting usage no listed job explains (a reservation).
    fn opening() -> proto::Snapshot {
        let mut snap = snapshot(80, 40, 0.85, 11);
        let world = World::build(&snap).unwrap();
        let free = world.cluster().cpu_free(NodeId(0));
        snap.nodes[0].cpu_free_milli = Some(free - 4_000);
        snap
    }

    #[test]
    fn a_session_decides_as_its_snapshot_rebuilt_would_round_after_round() {
        let snap = opening();
        let mut world = World::build(&snap).unwrap();
        assert_eq!(world.reserved.len(), 1, "node 0's unlisted usage");
        let mut driver = SessionDriver::new(&snap, 40, 30_000, 5);
        let (mut placed, mut preempted) = (0, 0);
        for round in 0..15u64 {
            let rebuilt = World::build(&world.export(&snap.nodes, String::new())).unwrap();
            let (decision, named) = decide(&world);
            let (_, again) = decide(&rebuilt);
            assert_eq!(named, again, "round {round}");
            assert_eq!(rebuilt.live_jobs(), world.live_jobs());
            placed += named.0.len();
            preempted += named.1.len();
            world.apply(&decision).unwrap();
            driver.answered(&answer(&named, round));
            let delta = driver.delta();
            assert!(!delta.submitted.is_empty() || round == 0 || named.0.is_empty());
            world.apply_delta(&delta).unwrap();
            world.cluster().check_invariants().unwrap();
        }
        assert!(
            placed > 100 && preempted > 0,
            "{placed} placed, {preempted} preempted"
        );
        assert!(world.departed() > 0);
        // Compaction drops the departed ids and decides the same.
        let (_, before) = decide(&world);
        let live = world.live_jobs();
        world.compact();
        world.cluster().check_invariants().unwrap();
        assert_eq!((world.departed(), world.live_jobs()), (0, live));
        assert_eq!(decide(&world).1, before);
        assert_eq!(
            world.reserved.len(),
            1,
            "the reservation survives compaction"
        );
    }

    #[test]
    fn the_clock_moves_waits_and_runs_on() {
        let snap = opening();
        let mut world = World::build(&snap).unwrap();
        let pending = &snap.pending[0];
        world
            .apply_delta(&proto::SnapshotDelta {
                now_ms: snap.now_ms + 60_000,
                ..Default::default()
            })
            .unwrap();
        let out = world.export(&snap.nodes, String::new());
        let job = out.pending.iter().find(|j| j.id == pending.id).unwrap();
        assert_eq!(job.wait_ms, pending.wait_ms + 60_000);
        let run = &snap.running[0];
        let id = &run.job.as_ref().unwrap().id;
        let again = out
            .running
            .iter()
            .find(|r| &r.job.as_ref().unwrap().id == id)
            .unwrap();
        assert_eq!(again.run_ms, run.run_ms + 60_000);
        assert_eq!(again.tasks, run.tasks);
    }

    #[test]
    fn finished_and_requeued_jobs_free_their_gpus() {
        let snap = opening();
        let mut world = World::build(&snap).unwrap();
        let free = |w: &World| w.cluster().allocated_gpu_milli();
        let before = free(&world);
        let a = snap.running[0].job.as_ref().unwrap();
        let b = snap.running[1].job.as_ref().unwrap();
        world
            .apply_delta(&proto::SnapshotDelta {
                now_ms: snap.now_ms + 1_000,
                finished: vec![a.id.clone(), snap.pending[0].id.clone()],
                requeued: vec![b.id.clone()],
                ..Default::default()
            })
            .unwrap();
        let gpus = |j: &proto::Job| u64::from(j.tasks.max(1) * j.gpus_per_task) * 1000;
        assert_eq!(free(&world), before - gpus(a) - gpus(b));
        assert!(world.job_id(&a.id).is_none() && world.job_id(&snap.pending[0].id).is_none());
        let requeued = world.job_id(&b.id).unwrap();
        assert!(world.is_pending(requeued));
        let rt = *world.context().runtime(requeued);
        assert_eq!(
            rt.attained_ms,
            b.attained_ms + snap.running[1].run_ms + 1_000
        );
        assert_eq!(rt.last_stop, Some(world.now()));
        // A finished job's id may come back as a new job.
        let mut again = snap.pending[0].clone();
        again.wait_ms = 0;
        world
            .apply_delta(&proto::SnapshotDelta {
                now_ms: snap.now_ms + 2_000,
                submitted: vec![again],
                ..Default::default()
            })
            .unwrap();
        assert!(world.is_pending(world.job_id(&snap.pending[0].id).unwrap()));
    }

    #[test]
    fn a_bad_delta_names_its_field_and_changes_nothing() {
        let snap = opening();
        let world = World::build(&snap).unwrap();
        let running = snap.running[0].job.as_ref().unwrap().id.clone();
        let pending = snap.pending[0].id.clone();
        let fresh = |id: &str, wait_ms: u64| proto::Job {
            id: id.into(),
            gpus_per_task: 1,
            cpu_milli: 1000,
            mem_mib: 1024,
            wait_ms,
            ..Default::default()
        };
        let now = snap.now_ms + 10_000;
        let cases: Vec<(proto::SnapshotDelta, &str, &str)> = vec![
            (
                proto::SnapshotDelta {
                    now_ms: snap.now_ms - 1,
                    ..Default::default()
                },
                "delta.now_ms",
                "never goes back",
            ),
            (
                proto::SnapshotDelta {
                    now_ms: now,
                    finished: vec!["nobody".into()],
                    ..Default::default()
                },
                "delta.finished[0]",
                "no job \"nobody\"",
            ),
            (
                proto::SnapshotDelta {
                    now_ms: now,
                    finished: vec![running.clone()],
                    requeued: vec![running.clone()],
                    ..Default::default()
                },
                "delta.requeued[0]",
                "listed twice",
            ),
            (
                proto::SnapshotDelta {
                    now_ms: now,
                    requeued: vec![pending.clone()],
                    ..Default::default()
                },
                "delta.requeued[0]",
                "pending, not running",
            ),
            (
                proto::SnapshotDelta {
                    now_ms: now,
                    submitted: vec![fresh(&pending, 0)],
                    ..Default::default()
                },
                "delta.submitted[0].id",
                "already in the session",
            ),
            (
                proto::SnapshotDelta {
                    now_ms: now,
                    submitted: vec![fresh("x", 0), fresh("x", 0)],
                    ..Default::default()
                },
                "delta.submitted[1].id",
                "also submitted[0]",
            ),
            (
                proto::SnapshotDelta {
                    now_ms: now,
                    submitted: vec![fresh("late", 1_000_000_000)],
                    ..Default::default()
                },
                "delta.submitted[0].wait_ms",
                "full snapshot",
            ),
            (
                proto::SnapshotDelta {
                    now_ms: now,
                    submitted: vec![proto::Job {
                        gpus_per_task: 9,
                        ..fresh("huge", 0)
                    }],
                    ..Default::default()
                },
                "delta.submitted[0]",
                "does not fit on any node",
            ),
            (
                proto::SnapshotDelta {
                    now_ms: now,
                    submitted: vec![proto::Job {
                        gpu_milli: 1500,
                        ..fresh("odd", 0)
                    }],
                    ..Default::default()
                },
                "delta.submitted[0].gpu_milli",
                "",
            ),
            (
                proto::SnapshotDelta {
                    now_ms: now,
                    submitted: vec![proto::Job {
                        idle_ms: Some(5),
                        ..fresh("idle", 1)
                    }],
                    ..Default::default()
                },
                "delta.submitted[0].idle_ms",
                "idle 5 ms",
            ),
        ];
        let before = world.export(&snap.nodes, String::new());
        for (delta, path, words) in cases {
            let mut w = world.clone();
            match w.apply_delta(&delta) {
                Err(DeltaError::Invalid(e)) => {
                    assert_eq!(e.path, path, "{e}");
                    assert!(e.message.contains(words), "{e}");
                }
                other => panic!("{path}: {other:?}"),
            }
            assert_eq!(w.export(&snap.nodes, String::new()), before, "{path}");
        }
    }
}

#[cfg(test)]
mod typed_tests {
    use super::*;
    use lachesis_env::cluster::TaskPlacement;
    use lachesis_env::policy::{Decision, Placement};

    fn job(id: &str, workload: &str, gpus: u32) -> proto::Job {
        proto::Job {
            id: id.into(),
            preemptible: true,
            tasks: gpus,
            gpus_per_task: 1,
            cpu_milli: 1_000,
            mem_mib: 1_024,
            wait_ms: 1_000,
            workload: workload.into(),
            ..Default::default()
        }
    }

    /// A world with a shared GPU and an elastic job resized by a decision exports the snapshot
    /// it stands for: workloads, ranges, both jobs on the shared GPU and the new size, and
    /// that snapshot builds the same cluster again.
    #[test]
    fn shares_and_resizes_survive_an_export_and_a_rebuild() {
        let table = Arc::new(lachesis_env::throughput::load_table("gavel").unwrap());
        let mut elastic = job("e", "ResNet-18 (batch size 16)", 1);
        (elastic.min_gpus, elastic.max_gpus) = (1, 4);
        let on = |node: &str, gpu: u32| proto::TaskPlacement {
            node: node.into(),
            gpus: vec![gpu],
        };
        let snap = proto::Snapshot {
            now_ms: 10_000,
            nodes: vec![proto::Node {
                name: "v0".into(),
                gpu_model: "V100".into(),
                gpus: 4,
                cpu_milli: 32_000,
                mem_mib: 64_000,
                ..Default::default()
            }],
            running: vec![
                proto::RunningJob {
                    job: Some(job("r", "ResNet-50 (batch size 64)", 1)),
                    tasks: vec![on("v0", 0)],
                    run_ms: 500,
                },
                proto::RunningJob {
                    job: Some(job("lm", "LM (batch size 20)", 1)),
                    tasks: vec![on("v0", 0)],
                    run_ms: 500,
                },
                proto::RunningJob {
                    job: Some(elastic),
                    tasks: vec![on("v0", 1)],
                    run_ms: 500,
                },
            ],
            ..Default::default()
        };
        let mut world = World::build_typed(&snap, Some(&table)).unwrap();
        assert_eq!(world.cluster().shared_gpus().count(), 1);
        assert_eq!(world.cluster().free_whole_gpus(NodeId(0)), 2);
        let e = world.job_id("e").unwrap();
        let resize = Decision {
            resizes: vec![Placement {
                job: e,
                tasks: (1..3)
                    .map(|g| TaskPlacement {
                        node: NodeId(0),
                        gpus: vec![g],
                    })
                    .collect(),
            }],
            ..Decision::default()
        };
        crate::shield::check(&world, &resize).unwrap();
        // 3 GPUs: in range, but Gavel's table rates 1, 2, 4 and 8.
        let mut unrated = resize.clone();
        unrated.resizes[0].tasks.push(TaskPlacement {
            node: NodeId(0),
            gpus: vec![3],
        });
        let why = crate::shield::check(&world, &unrated).unwrap_err();
        assert!(why.contains("does not rate"), "{why}");
        world.apply(&resize).unwrap();
        let out = world.export(&snap.nodes, "c".into());
        let exported = |id: &str| {
            out.running
                .iter()
                .find(|r| r.job.as_ref().unwrap().id == id)
                .unwrap()
        };
        assert_eq!(exported("e").tasks.len(), 2);
        assert_eq!(exported("e").run_ms, 0, "a resize restarts the run");
        let ej = exported("e").job.as_ref().unwrap();
        assert_eq!((ej.min_gpus, ej.max_gpus), (1, 4));
        assert_eq!(
            exported("lm").job.as_ref().unwrap().workload,
            "LM (batch size 20)"
        );
        assert_eq!(out.nodes[0].gpu_free_milli, vec![0, 0, 0, 1000]);
        let rebuilt = World::build_typed(&out, Some(&table)).unwrap();
        assert_eq!(rebuilt.cluster().shared_gpus().count(), 1);
        assert_eq!(rebuilt.cluster().free_whole_gpus(NodeId(0)), 1);
        assert!(
            rebuilt
                .throughputs()
                .unwrap()
                .is_typed(rebuilt.job_id("lm").unwrap())
        );
        // Without the table, the typed snapshot is refused.
        let e = World::build(&out).unwrap_err();
        assert!(e.path.ends_with(".workload"), "{e}");
    }
}
