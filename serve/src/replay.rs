//! Offline replay of the decision log: the jobs the service saw are turned back into a trace
//! (submit time from the first snapshot that listed them, run time from the last one that saw
//! them running), the cluster into a cluster file, so `lachesis compare` can run every arm's
//! policy on the same traffic in the simulator. Also a summary of the logged answers: arms,
//! deciders, fallbacks, shadow agreement, decision time.
//!
//! What a log cannot tell is said, not guessed: a job seen only pending (cancelled, or still
//! queued when the log ends) and a job still running at the end are left out and counted; a
//! finished job's run time is known to the logging interval (it ended between the last
//! snapshot that saw it running and the first that did not).

use crate::decision_log::LogLine;
use crate::proto;
use crate::world::{SnapshotError, Workloads, job_from_proto};
use lachesis_env::gpu::GpuModel;
use lachesis_env::job::{JobSpec, Trace};
use lachesis_env::units::{SimTime, TenantId};
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// A log that cannot be replayed; names the file and line.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Line {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("the log holds no decision")]
    Empty,
    #[error("no job of the log finished while logged: nothing to replay")]
    NoFinishedJobs,
    #[error("rebuilding the trace: {0}")]
    Trace(String),
}

/// What the log says about its traffic.
#[derive(Debug, Default, Clone)]
pub struct LogSummary {
    pub records: usize,
    /// Answers per arm.
    pub arms: BTreeMap<String, usize>,
    /// Answers per decider.
    pub deciders: BTreeMap<String, usize>,
    /// Fallback steps per reason.
    pub fallbacks: BTreeMap<String, usize>,
    /// Shadow records, and those where the model's answer equalled the returned one.
    pub shadow: usize,
    pub shadow_agree: usize,
    pub placements: usize,
    pub preemptions: usize,
    /// Median server decision time, microseconds.
    pub median_decision_us: u64,
    /// Jobs seen, finished (replayed), still running at the end, only ever pending.
    pub jobs_seen: usize,
    pub jobs_finished: usize,
    pub jobs_running_at_end: usize,
    pub jobs_never_started: usize,
}

impl LogSummary {
    /// Answers per heuristic that decided them (an A/B answer counts for each of its
    /// deciders; the model and "none" are left out). The most frequent is the service's
    /// baseline unless it kept failing.
    pub fn heuristics(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for (decider, n) in &self.deciders {
            for d in decider
                .split('+')
                .filter(|d| !d.starts_with("model:") && !d.starts_with("none"))
            {
                *out.entry(d.to_string()).or_default() += n;
            }
        }
        out
    }

    /// The heuristic that answered most (ties: the first by name), the heuristic arm.
    pub fn heuristic_arm(&self) -> Option<String> {
        let heuristics = self.heuristics();
        let most = heuristics.values().copied().max()?;
        heuristics
            .into_iter()
            .find(|(_, n)| *n == most)
            .map(|(name, _)| name)
    }

    /// Whether the log holds answers of both arms: shadow or A/B routing, or the model and the
    /// baseline arm each answering (routing changed, or the guard switched it).
    pub fn both_arms(&self) -> bool {
        let arm = |a: &str| self.arms.contains_key(a);
        arm("shadow") || arm("ab") || (arm("model") && arm("baseline"))
    }
}

/// The traffic as a trace and the cluster as a cluster file.
#[derive(Debug)]
pub struct Replayed {
    pub trace: Trace,
    pub cluster_toml: String,
    pub summary: LogSummary,
    /// The clock of the last logged snapshot: where "recent" is measured from (the trace's
    /// submit times are on the same clock).
    pub end: SimTime,
}

#[derive(Debug)]
struct Seen {
    spec: JobSpec,
    tenant: String,
    /// Last time seen at all, and last time seen running.
    last_seen: u64,
    last_running: Option<u64>,
    /// Run time observed so far (all runs), ms, scaled to speed 1.0.
    work_ms: f64,
}

/// Reads `files` (oldest first) and rebuilds the traffic.
pub fn replay(files: &[PathBuf]) -> Result<Replayed, ReplayError> {
    let mut summary = LogSummary::default();
    let mut jobs: HashMap<String, Seen> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut last_nodes: Vec<proto::Node> = Vec::new();
    let mut last_now = 0u64;
    let mut decision_us = Vec::new();
    for path in files {
        let file = std::fs::File::open(path).map_err(|source| ReplayError::Io {
            path: path.clone(),
            source,
        })?;
        for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
            let at = |message: String| ReplayError::Line {
                path: path.clone(),
                line: i + 1,
                message,
            };
            let line = line.map_err(|e| at(e.to_string()))?;
            if line.trim().is_empty() {
                continue;
            }
            let record: LogLine =
                serde_json::from_str(&line).map_err(|e| at(format!("not a log record: {e}")))?;
            observe(&record, &mut jobs, &mut order).map_err(|e| at(e.to_string()))?;
            tally(&record, &mut summary);
            decision_us.push(record.answer.decision_us);
            last_now = record.snapshot.now_ms;
            last_nodes = record.snapshot.nodes;
        }
    }
    if summary.records == 0 {
        return Err(ReplayError::Empty);
    }
    decision_us.sort_unstable();
    summary.median_decision_us = decision_us[decision_us.len() / 2];
    summary.jobs_seen = jobs.len();

    let mut tenants: Vec<String> = Vec::new();
    let mut specs = Vec::new();
    let mut durations = Vec::new();
    for name in &order {
        let seen = &jobs[name];
        match seen.last_running {
            None => summary.jobs_never_started += 1,
            Some(_) if seen.last_seen == last_now => summary.jobs_running_at_end += 1,
            Some(_) => {
                let tenant = match tenants.iter().position(|t| *t == seen.tenant) {
                    Some(t) => t,
                    None => {
                        tenants.push(seen.tenant.clone());
                        tenants.len() - 1
                    }
                };
                let mut spec = seen.spec.clone();
                spec.tenant = TenantId(tenant as u32);
                specs.push(spec);
                durations.push(SimTime(seen.work_ms.round().max(1.0) as u64));
                summary.jobs_finished += 1;
            }
        }
    }
    if specs.is_empty() {
        return Err(ReplayError::NoFinishedJobs);
    }
    let trace = Trace::new("decision-log replay", specs, durations, tenants)
        .map_err(|e| ReplayError::Trace(e.to_string()))?;
    Ok(Replayed {
        trace,
        cluster_toml: cluster_toml(&last_nodes),
        summary,
        end: SimTime(last_now),
    })
}

fn observe(
    record: &LogLine,
    jobs: &mut HashMap<String, Seen>,
    order: &mut Vec<String>,
) -> Result<(), SnapshotError> {
    let s = &record.snapshot;
    let now = SimTime(s.now_ms);
    let speed: HashMap<&str, f64> = s
        .nodes
        .iter()
        .map(|n| {
            let speed = GpuModel::from_catalog(&n.gpu_model).map_or(1.0, |m| m.speed);
            (n.name.as_str(), speed)
        })
        .collect();
    let mut note = |job: &proto::Job, index: usize, running: Option<(u64, f64)>| {
        let entry = match jobs.get_mut(&job.id) {
            Some(e) => e,
            None => {
                let spec = job_from_proto(job, index, TenantId(0), now, Workloads::AsGiven)?;
                order.push(job.id.clone());
                jobs.entry(job.id.clone()).or_insert(Seen {
                    spec,
                    tenant: job.tenant.clone(),
                    last_seen: s.now_ms,
                    last_running: None,
                    work_ms: 0.0,
                })
            }
        };
        entry.last_seen = s.now_ms;
        if let Some((run_ms, speed)) = running {
            entry.last_running = Some(s.now_ms);
            let work = job.attained_ms.saturating_add(run_ms) as f64 * speed;
            entry.work_ms = entry.work_ms.max(work);
        }
        Ok(())
    };
    for (i, r) in s.running.iter().enumerate() {
        if let Some(job) = &r.job {
            let node = r.tasks.first().map_or("", |t| t.node.as_str());
            let speed = speed.get(node).copied().unwrap_or(1.0);
            note(job, i, Some((r.run_ms, speed)))?;
        }
    }
    for (i, job) in s.pending.iter().enumerate() {
        note(job, i, None)?;
    }
    Ok(())
}

fn tally(record: &LogLine, summary: &mut LogSummary) {
    let a = &record.answer;
    summary.records += 1;
    *summary.arms.entry(a.arm.clone()).or_default() += 1;
    *summary.deciders.entry(a.decided_by.clone()).or_default() += 1;
    for f in &a.fallbacks {
        *summary.fallbacks.entry(f.reason.clone()).or_default() += 1;
    }
    summary.placements += a.placements.len();
    summary.preemptions += a.preemptions.len();
    if let Some(shadow) = &record.shadow {
        summary.shadow += 1;
        if shadow.placements == a.placements && shadow.preemptions == a.preemptions {
            summary.shadow_agree += 1;
        }
    }
}

/// The nodes as a cluster file (docs/cluster-file.md).
fn cluster_toml(nodes: &[proto::Node]) -> String {
    let mut out = String::from("# The cluster of the last logged snapshot.\nname = \"replay\"\n");
    // Models the catalog does not know get the defaults the service assumed for them.
    let mut unknown: Vec<&str> = nodes
        .iter()
        .filter(|n| n.gpus > 0 && GpuModel::from_catalog(&n.gpu_model).is_none())
        .map(|n| n.gpu_model.as_str())
        .collect();
    unknown.sort_unstable();
    unknown.dedup();
    for m in unknown {
        out.push_str(&format!(
            "\n[[gpu_models]]\nname = {m:?}\nspeed = 1.0\nmem_gib = 16\nidle_watts = 40.0\nbusy_watts = 300.0\n"
        ));
    }
    for n in nodes {
        out.push_str(&format!(
            "\n[[nodes]]\nname = {:?}\ngpus = {}\n",
            n.name, n.gpus
        ));
        if n.gpus > 0 {
            out.push_str(&format!("gpu_model = {:?}\n", n.gpu_model));
        }
        out.push_str(&format!(
            "cpu_milli = {}\nmem_mib = {}\n",
            n.cpu_milli, n.mem_mib
        ));
        if let Some(rack) = n.labels.get("rack") {
            out.push_str(&format!("rack = {rack:?}\n"));
        }
    }
    out
}

/// Every file of the log at `path` (rotated ones first).
pub fn files(path: &Path) -> Vec<PathBuf> {
    crate::decision_log::log_files(path)
}
