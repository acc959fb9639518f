//! Quotas in the event loop, beyond the admission checks of `apply`: Kueue's preemption for
//! jobs their queue's quota blocks (`[queue.preemption]`), and the queue states behind
//! `QuotaMetrics`. Nothing here runs without quotas; with quotas and every policy `Never`
//! (the default) only the metrics are kept.
//!
//! Preemption, after every decision is applied: per queue with a policy other than `Never`
//! (file order), its pending jobs in Kueue's queue order (higher priority, then earlier
//! submit) that the quota blocks now but could admit, at most `MAX_TRIES` of them: each asks
//! `QuotaTree::preemption_targets` on its queue's flavors in Kueue's order (the first flavor
//! with targets wins) among the jobs holding quota (running, or reserved), less those not
//! `preemptible` and those the starvation bound protects. The targets are
//! preempted through the simulator's ordinary path (they keep their last checkpoint and are
//! counted as preemptions), and the job's quota is reserved at once, as Kueue admits it
//! before its pods run: nobody else, its victims included, may take that room back. The
//! simulator starts it there where it fits now; otherwise the policy places it later, and
//! its reservation is replaced by its charge when it starts.
//!
//! No loop: a victim is not a preemptor at the instant it was preempted, and Kueue's rules
//! keep it from preempting back later (it may reclaim only from a queue above its nominal
//! quota, and the preemptor's queue is within it or of higher priority).

use super::Simulator;
use crate::cluster::FitStrategy;
use crate::metrics::{self, JobRecord, QueueMetrics, QuotaMetrics};
use crate::policy::{JobState, Reservations};
use crate::quota::{NodeId as QueueId, Resource, Workload};
use crate::units::{GPU_MILLI, JobId, SimTime};
use std::cmp::Reverse;
use std::collections::BTreeMap;

/// The resources of a job's request, in the order of `refresh_quota_state`'s bounds.
const RESOURCES: [Resource; 3] = [Resource::Gpu, Resource::Cpu, Resource::Memory];

/// The most blocked jobs of one queue that ask for preemption at one decision.
const MAX_TRIES: usize = 8;

/// What quotas did so far, per queue (indexed by the tree's `NodeId`).
#[derive(Debug, Clone, Default)]
pub(super) struct QuotaStats {
    /// Now: whether the queue's guarantee is not kept (`QuotaMetrics::guarantee_violation_h`):
    /// a pending job its quota refuses fits what is left of its nominal quota, every
    /// flavor-resource, while another queue of its cohort tree borrows one it asks.
    violating: Vec<bool>,
    /// Now: milli-GPUs the queue uses beyond its nominal quotas.
    borrowed_milli: Vec<i64>,
    violation_ms: Vec<f64>,
    borrowed_milli_ms: Vec<f64>,
    inversions: Vec<u64>,
    victims: Vec<u64>,
    admissions: u64,
    /// Per queue: the priorities of its pending jobs, with how many have each.
    pending_priorities: Vec<BTreeMap<i32, u32>>,
    /// Pending jobs whose quota is reserved (preemption made room for them), since when.
    reserved: BTreeMap<JobId, SimTime>,
    /// Jobs quota preemption stopped, and when (the last time).
    preempted_at: BTreeMap<JobId, SimTime>,
    /// The books' changes and the events processed when the states were last taken: while
    /// both are the same (no start, stop or arrival since), so are the states.
    taken_at: Option<(u64, u64)>,
}

impl QuotaStats {
    pub(super) fn new(nodes: usize) -> QuotaStats {
        QuotaStats {
            violating: vec![false; nodes],
            borrowed_milli: vec![0; nodes],
            violation_ms: vec![0.0; nodes],
            borrowed_milli_ms: vec![0.0; nodes],
            inversions: vec![0; nodes],
            victims: vec![0; nodes],
            pending_priorities: vec![BTreeMap::new(); nodes],
            ..QuotaStats::default()
        }
    }

    /// Adds `dt_ms` of the current queue states to the integrals.
    pub(super) fn integrate(&mut self, dt_ms: f64) {
        for q in 0..self.violating.len() {
            if self.violating[q] {
                self.violation_ms[q] += dt_ms;
            }
            self.borrowed_milli_ms[q] += self.borrowed_milli[q] as f64 * dt_ms;
        }
    }
}

impl Simulator<'_> {
    /// Books pending `id`'s priority to its queue (it arrived or was stopped).
    pub(super) fn quota_enqueued(&mut self, id: JobId) {
        let (Some(adm), Some(stats)) = (&self.admission, self.quota_stats.as_mut()) else {
            return;
        };
        let job = self.trace.job(id);
        if let Some(q) = adm.queue(job) {
            *stats.pending_priorities[q.0]
                .entry(job.priority)
                .or_insert(0) += 1;
        }
    }

    /// Pending `id` starts: its priority leaves its queue's pending ones; a pending job of
    /// higher priority in its queue makes the start a priority inversion.
    pub(super) fn quota_started(&mut self, id: JobId) {
        let (Some(adm), Some(stats)) = (&self.admission, self.quota_stats.as_mut()) else {
            return;
        };
        stats.admissions += 1;
        stats.reserved.remove(&id);
        let job = self.trace.job(id);
        let Some(q) = adm.queue(job) else {
            return;
        };
        let pending = &mut stats.pending_priorities[q.0];
        if let Some(n) = pending.get_mut(&job.priority) {
            *n -= 1;
            if *n == 0 {
                pending.remove(&job.priority);
            }
        }
        if pending
            .last_key_value()
            .is_some_and(|(p, _)| *p > job.priority)
        {
            stats.inversions[q.0] += 1;
        }
    }

    /// Kueue's preemption for the jobs the quota blocks (module docs), after a decision.
    pub(super) fn quota_preempt(&mut self, held: &Reservations) {
        let Some(adm) = self.admission.as_ref() else {
            return;
        };
        if !adm.preempts() || self.pending.is_empty() {
            return;
        }
        let (jobs, now) = (self.trace.jobs(), self.now);
        let stats = self.quota_stats.as_ref();
        // Per queue, its pending jobs in Kueue's order, reserved ones and this instant's
        // victims left out.
        let mut by_queue: BTreeMap<QueueId, Vec<JobId>> = BTreeMap::new();
        for &id in &self.pending {
            let job = &jobs[id.index()];
            let Some(q) = adm.queue(job) else { continue };
            let fresh_victim = stats.is_some_and(|s| s.preempted_at.get(&id) == Some(&now));
            if adm.tree().spec(q).preemption.is_never() || adm.held(job).is_some() || fresh_victim {
                continue;
            }
            by_queue.entry(q).or_default().push(id);
        }
        for ids in by_queue.values_mut() {
            ids.sort_by_key(|id| {
                (
                    Reverse(jobs[id.index()].priority),
                    jobs[id.index()].submit,
                    *id,
                )
            });
        }
        for (_, ids) in by_queue {
            let mut tries = 0;
            for id in ids {
                if tries == MAX_TRIES {
                    break;
                }
                let Some(adm) = self.admission.as_ref() else {
                    return;
                };
                let job = &jobs[id.index()];
                if self.runtime[id.index()].state != JobState::Pending
                    || adm.admits(job).is_ok()
                    || !adm.could_ever_admit(job)
                {
                    continue;
                }
                tries += 1;
                self.preempt_for(id, held);
            }
        }
    }

    /// Preempts what `id`'s queue needs to admit it (if anything can), reserves its quota
    /// and starts it where it fits now.
    fn preempt_for(&mut self, id: JobId, held: &Reservations) {
        let Some(adm) = self.admission.as_ref() else {
            return;
        };
        let jobs = self.trace.jobs();
        let job = &jobs[id.index()];
        let Some(queue) = adm.queue(job) else { return };
        let stats = self.quota_stats.as_ref();
        // Every job holding quota that may be preempted, in job order.
        let mut holders: Vec<JobId> = self.cluster.borrow().running().map(|a| a.job).collect();
        holders.extend(
            stats
                .map(|s| s.reserved.keys().copied())
                .into_iter()
                .flatten(),
        );
        holders.sort();
        holders.dedup();
        holders.retain(|h| jobs[h.index()].preemptible && !self.guard.protects(*h, self.now));
        let mut admitted = Vec::with_capacity(holders.len());
        let mut kept = Vec::with_capacity(holders.len());
        for h in holders {
            let (Some(q), Some(usage)) = (adm.queue(&jobs[h.index()]), adm.held(&jobs[h.index()]))
            else {
                continue;
            };
            let reserved_at = self.runtime[h.index()]
                .run_start
                .or_else(|| stats.and_then(|s| s.reserved.get(&h).copied()))
                .unwrap_or(SimTime::ZERO);
            admitted.push(Workload {
                queue: q,
                priority: jobs[h.index()].priority,
                queued_at: jobs[h.index()].submit.ms(),
                reserved_at: reserved_at.ms(),
                usage: usage.as_slice(),
            });
            kept.push(h);
        }
        let tree = adm.tree();
        let books = tree.books();
        let mut chosen = None;
        for (kind, amounts) in adm.kinds_in_flavor_order(job) {
            let incoming = Workload {
                queue,
                priority: job.priority,
                queued_at: job.submit.ms(),
                reserved_at: self.now.ms(),
                usage: &amounts,
            };
            let targets = tree.preemption_targets(&books, &incoming, &admitted);
            if !targets.is_empty() {
                chosen = Some((kind, amounts, targets));
                break;
            }
        }
        let Some((kind, amounts, targets)) = chosen else {
            return;
        };
        let victims: Vec<JobId> = targets.iter().map(|t| kept[t.index]).collect();
        for v in victims {
            let vjob = &jobs[v.index()];
            let stopped = if self.runtime[v.index()].state == JobState::Running {
                self.preempt(v)
            } else if let Some(adm) = self.admission.as_mut() {
                adm.discharge(vjob).is_some()
            } else {
                false
            };
            if let (true, Some(adm), Some(stats)) =
                (stopped, &self.admission, self.quota_stats.as_mut())
            {
                stats.reserved.remove(&v);
                stats.preempted_at.insert(v, self.now);
                if let Some(q) = adm.queue(vjob) {
                    stats.victims[q.0] += 1;
                }
            }
        }
        let Some(adm) = self.admission.as_mut() else {
            return;
        };
        if adm.check(job, &amounts).is_err() {
            // A victim could not be stopped after all: nothing to reserve.
            return;
        }
        adm.charge(job, amounts);
        if let Some(stats) = self.quota_stats.as_mut() {
            stats.reserved.insert(id, self.now);
        }
        let mut probe = job.clone();
        if let Some(m) = kind {
            probe.gpu_types = vec![self.cluster.borrow().spec().model(m).name.clone()];
        }
        let tasks = self
            .cluster
            .get_mut()
            .find_job_placement(&probe, FitStrategy::FirstFit);
        if let Some(tasks) = tasks.filter(|t| held.admits(id, t))
            && self.quota_admits(id, &tasks)
        {
            self.start(id, tasks);
        }
    }

    /// Takes the queue states the metrics integrate (after a batch of events or a decision):
    /// what each queue borrows, and whether its guarantee is kept.
    pub(super) fn refresh_quota_state(&mut self) {
        let (Some(adm), Some(stats)) = (&self.admission, self.quota_stats.as_mut()) else {
            return;
        };
        let taken_at = Some((adm.changes(), self.events));
        if stats.taken_at == taken_at {
            return;
        }
        stats.taken_at = taken_at;
        let tree = adm.tree();
        let frs = tree.flavor_resources();
        stats.violating.iter_mut().for_each(|v| *v = false);
        // Per flavor-resource, the queues borrowing it; per queue, whether the cohort cannot
        // give it all that is left of its nominal quota somewhere (else no job of it can have
        // its guarantee broken).
        let mut borrowers: Vec<Vec<QueueId>> = vec![Vec::new(); frs.len()];
        stats.borrowed_milli.iter_mut().for_each(|b| *b = 0);
        for (i, fr) in frs.iter().enumerate() {
            for q in tree.queues() {
                let (usage, nominal) = tree.usage_nominal_at(q, i);
                if usage > nominal {
                    borrowers[i].push(q);
                    if fr.resource == Resource::Gpu {
                        stats.borrowed_milli[q.0] += usage - nominal;
                    }
                }
            }
        }
        let waiting: Vec<QueueId> = tree
            .queues()
            .filter(|q| !stats.pending_priorities[q.0].is_empty())
            .collect();
        if borrowers.iter().all(Vec::is_empty) || waiting.is_empty() {
            return;
        }
        // Per waiting queue and resource (`RESOURCES` order), over the flavors the file
        // counts: the most left of its nominal quota on one flavor, and the least available.
        // A job asking more than the first fits no nominal quota; one asking no more than the
        // second is admitted wherever it goes: neither can be a broken guarantee.
        let n = stats.violating.len();
        let mut short = vec![false; n];
        let mut room = vec![[i64::MIN; 3]; n];
        let mut least = vec![[i64::MAX; 3]; n];
        let mut counted = [false; 3];
        let mut available = Vec::new();
        for (i, fr) in frs.iter().enumerate() {
            let r = RESOURCES
                .iter()
                .position(|r| *r == fr.resource)
                .unwrap_or(0);
            counted[r] = true;
            tree.available_all_at(i, &mut available);
            for &q in &waiting {
                let (usage, nominal) = tree.usage_nominal_at(q, i);
                short[q.0] |= usage <= nominal && available[q.0] < nominal - usage;
                room[q.0][r] = room[q.0][r].max(nominal - usage);
                least[q.0][r] = least[q.0][r].min(available[q.0]);
            }
        }
        let jobs = self.trace.jobs();
        for &id in &self.pending {
            let job = &jobs[id.index()];
            let Some(q) = adm.queue(job) else { continue };
            if !short[q.0] || stats.violating[q.0] || adm.held(job).is_some() {
                continue;
            }
            let n_tasks = u64::from(job.tasks);
            let asks = [
                job.task.gpu_milli_total() * n_tasks,
                job.task.cpu_milli * n_tasks,
                job.task.mem_mib * n_tasks,
            ]
            .map(|v| i64::try_from(v).unwrap_or(i64::MAX));
            let counted_asks = || (0..3).filter(|&r| counted[r] && asks[r] > 0);
            if counted_asks().any(|r| asks[r] > room[q.0][r])
                || counted_asks().all(|r| asks[r] <= least[q.0][r])
            {
                continue;
            }
            // `Admission::admits` on the kinds computed once.
            let kinds = adm.kinds_in_flavor_order(job);
            if kinds
                .iter()
                .any(|(_, amounts)| adm.check(job, amounts).is_ok())
            {
                continue;
            }
            let root = tree.root(q);
            let violated = kinds.iter().any(|(_, amounts)| {
                let fits_nominal = amounts
                    .iter()
                    .all(|(fr, v)| tree.usage(q, fr) + v <= tree.nominal(q, fr));
                let other_borrows = amounts.iter().any(|(fr, v)| {
                    *v > 0
                        && frs.iter().position(|f| f == fr).is_some_and(|i| {
                            borrowers[i].iter().any(|&b| b != q && tree.root(b) == root)
                        })
                });
                fits_nominal && other_borrows
            });
            stats.violating[q.0] = violated;
        }
    }

    /// The run's `QuotaMetrics` from the stats and the job records (`None` without quotas).
    pub(super) fn quota_metrics(&self, records: &[JobRecord]) -> Option<QuotaMetrics> {
        let (adm, stats) = (self.admission.as_ref()?, self.quota_stats.as_ref()?);
        let tree = adm.tree();
        let hours = |ms: f64| ms / 3_600_000.0;
        let gpu_h = |milli_ms: f64| hours(milli_ms) / f64::from(GPU_MILLI);
        // The records of each queue, in one pass (records are the trace's jobs in order, less
        // the rejected ones).
        let mut mine: Vec<Vec<JobRecord>> = vec![Vec::new(); stats.violating.len()];
        let replayed = self
            .trace
            .jobs()
            .iter()
            .zip(&self.runtime)
            .filter(|(_, rt)| rt.state != JobState::Rejected);
        for ((j, _), r) in replayed.zip(records) {
            if let Some(q) = adm.queue(j) {
                mine[q.0].push(r.clone());
            }
        }
        let queues: Vec<QueueMetrics> = tree
            .queues()
            .map(|q| {
                let s = metrics::job_stats(&mine[q.0]);
                QueueMetrics {
                    queue: tree.spec(q).name.clone(),
                    guarantee_violation_h: hours(stats.violation_ms[q.0]),
                    borrowed_gpu_h: gpu_h(stats.borrowed_milli_ms[q.0]),
                    quota_preemptions: stats.victims[q.0],
                    priority_inversions: stats.inversions[q.0],
                    jobs: s.jobs,
                    avg_wait_s: s.wait[0],
                    p99_wait_s: s.wait[3],
                    avg_jct_s: s.jct[0],
                    p99_jct_s: s.jct[3],
                }
            })
            .collect();
        let admissions = stats.admissions;
        Some(QuotaMetrics {
            guarantee_violation_h: queues.iter().map(|q| q.guarantee_violation_h).sum(),
            borrowed_gpu_h: queues.iter().map(|q| q.borrowed_gpu_h).sum(),
            quota_preemptions: queues.iter().map(|q| q.quota_preemptions).sum(),
            admissions,
            preemptions_per_admission: if admissions > 0 {
                self.preemptions as f64 / admissions as f64
            } else {
                0.0
            },
            priority_inversions: queues.iter().map(|q| q.priority_inversions).sum(),
            queues,
        })
    }
}
