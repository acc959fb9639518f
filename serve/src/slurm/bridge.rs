//! The bridge's cycle: read Slurm, ask the service, apply; and what it does when the service
//! is down. Everything it needs is re-read from Slurm each cycle, so a bridge killed at any
//! point resumes without losing or double-placing a job:
//!
//! - killed after pinning a job but before releasing it: the job is still held, so it is
//!   decided again (and re-pinned) next cycle;
//! - killed after releasing it: the job is pending, released and pinned: a *reservation* on
//!   its nodes, counted as used until it runs (or is re-held after `stale_release_s`);
//! - killed after requeueing a victim: the victim is held again and decided again once the
//!   requeue grace has passed (requeue times are in the state file, and Slurm's own begin
//!   time guards the rest).
//!
//! The state file keeps only what Slurm does not: when jobs were requeued and released, and
//! since when the service has been unreachable.

use super::config::{BridgeConfig, DownPolicy};
use super::ctl::{SlurmCtl, SlurmError};
use super::model::{SlurmJob, SlurmNode};
use super::translate::{self, Role};
use crate::client::{self, Client};
use crate::proto;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What the bridge remembers across restarts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BridgeState {
    /// Job → when the bridge requeued it (Unix ms).
    pub requeued: BTreeMap<u64, u64>,
    /// Job → when the bridge released it onto pinned nodes (Unix ms).
    pub released: BTreeMap<u64, u64>,
    /// Job → run time of its runs before the bridge requeued it, ms (what LAS policies rank
    /// by; Slurm restarts the clock on each run).
    pub attained: BTreeMap<u64, u64>,
    /// Job → when the bridge last requeued it (Unix ms), kept while it is pending: how long
    /// it has been idle, which tells a starved job from a well-served one (LAS promotion).
    pub stopped: BTreeMap<u64, u64>,
    /// Since when the service has been unreachable (Unix ms).
    pub outage_since_ms: Option<u64>,
}

impl BridgeState {
    /// Reads the state file; a missing file is an empty state, an unreadable one an error.
    pub fn load(path: &Path) -> Result<BridgeState, String> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| format!("{}: not a bridge state file: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BridgeState::default()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// Writes the state file atomically (a temporary file renamed over it).
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let tmp = path.with_extension("tmp");
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// What one cycle did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CycleReport {
    /// Jobs the policy was asked about.
    pub candidates: usize,
    /// Jobs pinned and released: id → nodes.
    pub placed: Vec<(u64, Vec<String>)>,
    /// Jobs requeued (held) for a preemption.
    pub preempted: Vec<u64>,
    /// Placements refused by the bridge's own check, with why.
    pub refused: Vec<(u64, String)>,
    /// Pins (and requeues) Slurm refused or could not take (e.g. the controller timed out; the
    /// job was cancelled or ended meanwhile), with the error: the job stays as it was and is
    /// decided again.
    pub pin_failed: Vec<(u64, String)>,
    /// Jobs released to Slurm's own scheduler (service down past the timeout, or a request the
    /// service cannot express).
    pub to_slurm: Vec<u64>,
    /// Released jobs held again (stale), to be decided anew.
    pub reheld: Vec<u64>,
    /// Who decided (per group), from the service's answers.
    pub decided_by: Vec<String>,
    /// Fallback steps the service reported.
    pub fallbacks: Vec<String>,
    /// The service could not be asked (why), if so.
    pub service_error: Option<String>,
    /// Reads of Slurm taken again because nodes and jobs disagreed (see `torn`).
    pub torn_reads: usize,
    /// Time reading Slurm, asking the service, and pinning and releasing, ms.
    pub read_ms: f64,
    pub decide_ms: f64,
    pub apply_ms: f64,
}

/// Reads of Slurm a cycle takes at most while nodes and jobs disagree.
const READS: usize = 3;

/// Where the nodes' allocations and the running jobs' disagree, as two reads taken while a job
/// started or ended would: a node whose running jobs hold more CPUs, memory or GPUs than the
/// node reports allocated. `None` when they agree.
pub fn torn(nodes: &[SlurmNode], jobs: &[SlurmJob]) -> Option<String> {
    let mut held: BTreeMap<&str, (u64, u64, BTreeSet<u32>)> = BTreeMap::new();
    for j in jobs.iter().filter(|j| j.holds_resources()) {
        for a in &j.alloc {
            let h = held.entry(a.node.as_str()).or_default();
            h.0 += u64::from(a.cpus);
            h.1 += a.mem_mib.unwrap_or(0);
            h.2.extend(a.gpus.iter().copied());
        }
    }
    nodes.iter().find_map(|n| {
        let (cpus, mem, gpus) = held.get(n.name.as_str())?;
        if *cpus > u64::from(n.cpu_alloc) {
            Some(format!(
                "node {}: its jobs hold {cpus} CPUs, the node reports {} allocated",
                n.name, n.cpu_alloc
            ))
        } else if *mem > n.mem_alloc_mib {
            Some(format!(
                "node {}: its jobs hold {mem} MiB, the node reports {} allocated",
                n.name, n.mem_alloc_mib
            ))
        } else if !gpus.is_subset(&n.gpu_used) {
            Some(format!(
                "node {}: its jobs hold GPUs {gpus:?}, the node reports {:?} in use",
                n.name, n.gpu_used
            ))
        } else {
            None
        }
    })
}

/// Why a cycle failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error(transparent)]
    Slurm(#[from] SlurmError),
    #[error("state file {0}")]
    State(String),
}

/// The bridge: configuration, Slurm, the service client and the state.
#[derive(Debug)]
pub struct Bridge<C: SlurmCtl> {
    cfg: BridgeConfig,
    ctl: C,
    state: BridgeState,
    client: Option<Client>,
    token: Option<String>,
    /// Jobs already reported as never fitting (logged once).
    never_fit_logged: BTreeSet<u64>,
}

/// Why the bridge does not apply a share: Slurm allocates whole GPUs (`gres/gpu`) to one job.
pub const SHARE_UNSUPPORTED: &str = "GPU sharing not applied: Slurm gives each GPU (gres/gpu) to \
     one job, so a job cannot start on a GPU another job holds; it stays held";
/// Why the bridge does not apply a resize: Slurm cannot grow a running job's allocation.
pub const RESIZE_UNSUPPORTED: &str = "resize not applied: Slurm cannot grow or shrink a running \
     job's allocation for the service; the job keeps running at its size";

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl<C: SlurmCtl> Bridge<C> {
    /// A bridge with the state file's contents (if configured).
    pub fn new(cfg: BridgeConfig, ctl: C) -> Result<Self, BridgeError> {
        let state = match &cfg.state_file {
            Some(p) => BridgeState::load(p).map_err(BridgeError::State)?,
            None => BridgeState::default(),
        };
        let token = match &cfg.service.token_file {
            Some(p) => Some(
                std::fs::read_to_string(p)
                    .map_err(|e| BridgeError::State(format!("{}: {e}", p.display())))?
                    .trim()
                    .to_string(),
            ),
            None => None,
        };
        Ok(Bridge {
            cfg,
            ctl,
            state,
            client: None,
            token,
            never_fit_logged: BTreeSet::new(),
        })
    }

    pub fn state(&self) -> &BridgeState {
        &self.state
    }

    pub fn config(&self) -> &BridgeConfig {
        &self.cfg
    }

    fn save(&self) -> Result<(), BridgeError> {
        match &self.cfg.state_file {
            Some(p) => self.state.save(p).map_err(BridgeError::State),
            None => Ok(()),
        }
    }

    async fn decide(&mut self, snapshot: proto::Snapshot) -> Result<proto::DecideResponse, String> {
        let timeout = Duration::from_millis(self.cfg.service.timeout_ms);
        let call = async {
            if self.client.is_none() {
                self.client = Some(
                    client::connect(&self.cfg.service.addr, self.cfg.service.ca.as_deref(), None)
                        .await
                        .map_err(|e| e.to_string())?,
                );
            }
            let request = client::with_token(
                proto::DecideRequest {
                    snapshot: Some(snapshot),
                    request_id: format!("slurm-bridge-{}", now_ms()),
                    ..Default::default()
                },
                self.token.as_deref(),
            )
            .map_err(|e| e.to_string())?;
            let Some(c) = self.client.as_mut() else {
                return Err("no client".to_string());
            };
            c.decide(request)
                .await
                .map(tonic::Response::into_inner)
                .map_err(|s| format!("the service answered {:?}: {}", s.code(), s.message()))
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                self.client = None;
                Err(e)
            }
            Err(_) => {
                self.client = None;
                Err(format!("no answer within {} ms", timeout.as_millis()))
            }
        }
    }

    /// One cycle: read, classify, decide group by group, apply.
    pub async fn cycle(&mut self) -> Result<CycleReport, BridgeError> {
        let mut report = CycleReport::default();
        let t = Instant::now();
        let (mut nodes, mut jobs) = self.ctl.read()?;
        // Nodes and jobs are two reads: a job that started or ended between them shows on one
        // and not the other, and the service refuses a node reported freer than its running
        // jobs leave. Read again, a few times at most; a view still torn goes to the service,
        // which names the field.
        for _ in 1..READS {
            let Some(why) = torn(&nodes, &jobs) else {
                break;
            };
            tracing::debug!(%why, "nodes and jobs read at different moments: reading again");
            report.torn_reads += 1;
            (nodes, jobs) = self.ctl.read()?;
        }
        report.read_ms = t.elapsed().as_secs_f64() * 1e3;
        let now = now_ms();
        let grace = self.cfg.requeue_grace_ms;

        // Forget jobs Slurm no longer has, or that left the states the entries are about.
        let by_id: BTreeMap<u64, &SlurmJob> = jobs.iter().map(|j| (j.id, j)).collect();
        let before = self.state.clone();
        self.state.requeued.retain(|id, at| {
            by_id.get(id).is_some_and(|j| j.is_pending()) && now < *at + 3_600_000
        });
        // Jobs logged as never fitting: only those Slurm still has (the set would grow forever).
        self.never_fit_logged.retain(|id| by_id.contains_key(id));
        self.state.attained.retain(|id, _| {
            by_id
                .get(id)
                .is_some_and(|j| j.is_pending() || j.holds_resources())
        });
        self.state
            .stopped
            .retain(|id, _| by_id.get(id).is_some_and(|j| j.is_pending()));
        self.state.released.retain(|id, _| {
            by_id
                .get(id)
                .is_some_and(|j| j.is_pending() && !j.is_held())
        });

        let mut roles: BTreeMap<u64, Role> = jobs
            .iter()
            .map(|j| {
                let recent = self
                    .state
                    .requeued
                    .get(&j.id)
                    .is_some_and(|at| now < at + grace);
                (j.id, translate::role(&self.cfg, j, recent))
            })
            .collect();

        // Released jobs that never started: hold them again and decide them anew.
        let stale_ms = self.cfg.stale_release_s.saturating_mul(1000);
        let mut reheld = Vec::new();
        for j in &jobs {
            if roles.get(&j.id) != Some(&Role::Reserved) {
                continue;
            }
            let at = *self.state.released.entry(j.id).or_insert(now);
            if j.reason == "BadConstraints" || now.saturating_sub(at) > stale_ms {
                reheld.push(j.id);
            }
        }
        if !reheld.is_empty() {
            self.ctl.hold(&reheld)?;
            for id in &reheld {
                self.ctl.pin(*id, &[], false)?;
                self.state.released.remove(id);
                roles.insert(*id, Role::Waiting);
                tracing::warn!(job = id, "released job never started: held again");
            }
            report.reheld = reheld;
        }

        // Requests the service cannot express go to Slurm's own scheduler.
        let unsupported: Vec<u64> = jobs
            .iter()
            .filter(|j| roles.get(&j.id) == Some(&Role::Unsupported))
            .map(|j| {
                tracing::warn!(
                    job = j.id,
                    why = j.gpu_shape_error.as_deref().unwrap_or(""),
                    "released to Slurm's scheduler: the service cannot express its request"
                );
                j.id
            })
            .collect();
        self.release_to_slurm(&jobs, &unsupported)?;
        report.to_slurm.extend(unsupported);

        let candidates: Vec<u64> = jobs
            .iter()
            .filter(|j| roles.get(&j.id) == Some(&Role::Candidate))
            .map(|j| j.id)
            .collect();
        report.candidates = candidates.len();
        if candidates.is_empty() {
            self.state.outage_since_ms = None;
            if self.state != before {
                self.save()?;
            }
            return Ok(report);
        }

        let by_name: BTreeMap<&str, &SlurmNode> =
            nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let mut usage = translate::usage_of(&nodes);
        for (partitions, group_nodes) in translate::groups(&nodes, &jobs, &roles) {
            let group = translate::snapshot(
                &self.cfg,
                &partitions,
                &group_nodes,
                &translate::View {
                    nodes: &nodes,
                    jobs: &jobs,
                    roles: &roles,
                    attained: &self.state.attained,
                    stopped: &self.state.stopped,
                },
                &usage,
                now,
            );
            for (id, why) in &group.never_fit {
                if self.never_fit_logged.insert(*id) {
                    tracing::warn!(job = id, %why, "held: no node of its partition can ever run it");
                }
            }
            if group.snapshot.pending.is_empty() {
                continue;
            }
            let t = Instant::now();
            let answer = self.decide(group.snapshot.clone()).await;
            report.decide_ms += t.elapsed().as_secs_f64() * 1e3;
            let answer = match answer {
                Ok(a) => {
                    self.state.outage_since_ms = None;
                    a
                }
                Err(e) => {
                    tracing::warn!(error = %e, "decision service unavailable");
                    report.service_error = Some(e);
                    break;
                }
            };
            report.decided_by.push(answer.decided_by.clone());
            report.fallbacks.extend(
                answer
                    .fallbacks
                    .iter()
                    .map(|f| format!("{}: {}", f.from, f.reason)),
            );

            // Preemptions first: victims must be running jobs of this snapshot.
            let listed: BTreeSet<&str> = group
                .snapshot
                .running
                .iter()
                .filter_map(|r| r.job.as_ref().map(|j| j.id.as_str()))
                .collect();
            for victim in &answer.preemptions {
                let Some(id) = victim
                    .parse::<u64>()
                    .ok()
                    .filter(|_| listed.contains(victim.as_str()))
                else {
                    report
                        .refused
                        .push((0, format!("preemption of unknown job {victim:?}")));
                    continue;
                };
                match by_id.get(&id) {
                    Some(j) if j.holds_resources() => {
                        // A victim that cannot be requeued (it just ended, or Slurm refused)
                        // is reported and skipped; its preemptor, pinned below, waits for the
                        // room like any released job (re-held if it never starts).
                        if let Err(e) = self.ctl.requeue_hold(id) {
                            tracing::warn!(job = id, error = %e, "requeue failed");
                            report.pin_failed.push((id, e.to_string()));
                            continue;
                        }
                        self.state.requeued.insert(id, now);
                        self.state.stopped.insert(id, now);
                        let ran = j
                            .start_s
                            .map_or(0, |s| (now / 1000).saturating_sub(s) * 1000);
                        *self.state.attained.entry(id).or_insert(0) += ran;
                        report.preempted.push(id);
                        // Its resources come back when it has stopped; this cycle's later groups
                        // do not count on them.
                    }
                    _ => report.refused.push((id, "victim is not running".into())),
                }
            }
            if !report.preempted.is_empty() {
                self.save()?;
            }

            let mut release = Vec::new();
            let mut pins: Vec<(u64, Vec<String>, bool)> = Vec::new();
            for p in &answer.placements {
                let Some(id) = p.job.parse::<u64>().ok() else {
                    report
                        .refused
                        .push((0, format!("placement of unknown job {:?}", p.job)));
                    continue;
                };
                let Some(job) = by_id
                    .get(&id)
                    .filter(|_| roles.get(&id) == Some(&Role::Candidate))
                else {
                    report.refused.push((id, "not a held candidate".into()));
                    continue;
                };
                let mut chosen: Vec<String> = Vec::new();
                for t in &p.tasks {
                    chosen.push(t.node.clone());
                }
                if let Err(why) = translate::can_run(job, &chosen, &by_name) {
                    // A safety net: the service meets features and distinct nodes itself, so
                    // this fires only for what it does not model (see docs/slurm.md).
                    tracing::warn!(job = id, %why, "placement refused: Slurm could not run it there");
                    report.refused.push((id, why));
                    continue;
                }
                let restart = job.restarts > 0 || self.state.requeued.contains_key(&id);
                for n in &chosen {
                    if let (Some(u), Some(node)) = (usage.get_mut(n), by_name.get(n.as_str())) {
                        translate::take(
                            u,
                            node,
                            job.gpus_per_node,
                            job.cpus_per_node(),
                            job.mem_per_node_mib,
                        );
                    }
                }
                roles.insert(id, Role::Reserved);
                pins.push((id, chosen, restart));
            }
            // Pins run concurrently (one `scontrol update` per job is the pattern's cost); a
            // pin that fails (the job was cancelled meanwhile) leaves that job alone.
            let t = Instant::now();
            let results = self.ctl.pin_many(&pins);
            for ((id, chosen, _), r) in pins.into_iter().zip(results) {
                match r {
                    Ok(()) => {
                        release.push(id);
                        report.placed.push((id, chosen));
                    }
                    Err(e) => {
                        tracing::warn!(job = id, error = %e, "pin failed: decided again next cycle");
                        report.pin_failed.push((id, e.to_string()));
                    }
                }
            }
            self.ctl.release(&release)?;
            report.apply_ms += t.elapsed().as_secs_f64() * 1e3;
            // What Slurm cannot express is reported, not applied: the jobs stay as they are.
            for (p, why) in (answer.shares.iter().map(|p| (p, SHARE_UNSUPPORTED)))
                .chain(answer.resizes.iter().map(|p| (p, RESIZE_UNSUPPORTED)))
            {
                let id = p.job.parse::<u64>().unwrap_or(0);
                tracing::warn!(job = id, why, "not applied: Slurm cannot express it");
                report.refused.push((id, why.to_string()));
            }
            for id in &release {
                self.state.released.insert(*id, now);
                self.state.requeued.remove(id);
            }
        }

        if let Some(e) = &report.service_error {
            let since = *self.state.outage_since_ms.get_or_insert(now);
            let limit = (self.cfg.on_service_down.hold_timeout_s * 1000.0) as u64;
            if now.saturating_sub(since) >= limit {
                match self.cfg.on_service_down.policy {
                    DownPolicy::Open => {
                        let held: Vec<u64> = jobs
                            .iter()
                            .filter(|j| {
                                matches!(roles.get(&j.id), Some(Role::Candidate | Role::Waiting))
                                    && !report.placed.iter().any(|(p, _)| *p == j.id)
                            })
                            .map(|j| j.id)
                            .collect();
                        if !held.is_empty() {
                            tracing::warn!(
                                jobs = held.len(),
                                error = %e,
                                "fail-open: service down past the hold timeout, releasing held jobs to Slurm"
                            );
                        }
                        self.release_to_slurm(&jobs, &held)?;
                        report.to_slurm.extend(held);
                    }
                    DownPolicy::Closed => {
                        tracing::warn!(error = %e, "fail-closed: service down, jobs stay held");
                    }
                }
            }
        }
        if self.state != before {
            self.save()?;
        }
        Ok(report)
    }

    /// Releases held jobs to Slurm's own scheduler: clears any pin (a requeued job keeps its
    /// old one) and the begin time a requeue set.
    fn release_to_slurm(&mut self, jobs: &[SlurmJob], ids: &[u64]) -> Result<(), SlurmError> {
        for id in ids {
            if let Some(j) = jobs.iter().find(|j| j.id == *id)
                && (!j.req_nodes.is_empty() || j.restarts > 0)
            {
                self.ctl.pin(*id, &[], j.restarts > 0)?;
            }
        }
        self.ctl.release(ids)?;
        for id in ids {
            self.state.requeued.remove(id);
        }
        Ok(())
    }
}
