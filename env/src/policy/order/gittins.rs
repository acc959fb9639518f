//! `gittins`: blind scheduling by the Gittins index of each job's attained service, over the
//! distribution of run times of jobs seen to finish, learned online (Gittins 1989; Aalto,
//! Ayesta and Righter, "On the Gittins index in the M/G/1 queue", Queueing Systems 2009).
//!
//! The index of a job that has run for `a` (wall time), whose total run time `D` follows the
//! distribution `F`, is the best ratio, over how much longer `Δ > 0` one would serve it, of
//! the chance it finishes within `Δ` to the service that costs:
//!
//! ```text
//! G(a) = sup_Δ  P(D - a <= Δ | D > a) / E[min(D - a, Δ) | D > a]
//! ```
//!
//! Serving the highest index first minimises the mean response time of an M/G/1 queue among
//! policies that do not know run times. It needs no regime switch: where run times have a
//! decreasing hazard (heavy tails, as in most GPU clusters) `G` falls as a job runs and the
//! policy behaves like least-attained-service; where they have an increasing hazard (similar
//! run times) `G` rises as a job runs, so a started job is never overtaken and the order is
//! FIFO within a class and shortest-expected first across classes; for exponential run times
//! `G` is constant.
//!
//! With `censoring` (the default) `F` is the Kaplan-Meier estimate over the jobs seen to finish
//! and, as right-censored observations, the service attained by jobs that have run and not
//! finished (running, or preempted and waiting): early in a history the short jobs finish
//! first, and without them the long ones still running would be judged by the short ones'
//! distribution (`kaplan_meier`). Otherwise `F` is empirical: the observed run times (`attained_ms` at finish, so restarts and lost
//! work count, as for the `sjf` predictor) of finished jobs of the same GPU-count class
//! (`gpu_class`: 1, 2, 3-4, 5-8, 9-16, 17+ GPUs), or of all finished jobs while the class has
//! fewer than `min_class_samples`. Run times are kept in a histogram of 16 buckets per
//! doubling (a bucket's atom is the mean of its run times), so an index costs at most one pass
//! over a few hundred atoms. Because the support is discrete, the supremum is attained at an
//! atom: for atoms `v_s < ... < v_n` above `a`, with weights `w`, and `Δ_k = v_k - a`,
//!
//! ```text
//! G(a) = max_k  (w_s + ... + w_k) / (sum_{i<=k} w_i (v_i - a) + (w_{k+1} + ... + w_n) Δ_k)
//! ```
//!
//! computed with prefix sums. Jobs of different sizes are compared per GPU: the ordering ranks
//! by `G(a) / GPUs` (completions per GPU-hour of service, Smith's rule for jobs of different
//! widths). Before any job has finished every index is equal and the order is FIFO. A job that
//! has run longer than every observed run time gets `1 / a` (the hazard of a run time as long
//! again as it has run), below every job the distribution still covers.
//!
//! The `gittins-preempt` modifier (`modifier/gittins.rs`) preempts with the same indices.

use super::sorted_by;
use super::{Score, processors};
use crate::job::JobSpec;
use crate::policy::{DecisionContext, Ordering};
use crate::units::JobId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};

/// Milliseconds in an hour: indices are given per hour of service.
const HOUR_MS: f64 = 3_600_000.0;

/// Histogram resolution: buckets per doubling of run time (a bucket spans ~4.4%).
const BUCKETS_PER_OCTAVE: f64 = 16.0;

/// GPU-count classes: `gpu_class` maps a job to one of these.
pub const GPU_CLASSES: usize = 6;

/// The Gittins policy's knobs (`[gittins]` in a policy config file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GittinsConfig {
    /// Finished jobs a GPU-count class needs before its own distribution is used (the
    /// distribution of all finished jobs serves until then).
    pub min_class_samples: u64,
    /// `gittins-preempt`: a waiting job preempts a running one only if its index is more than
    /// `1 + preempt_margin` times the running job's (hysteresis against thrashing, since every
    /// preemption costs a restart and the work since the last checkpoint, and sends the victim
    /// back to the queue). Default 2: three times the index. Chosen on the eight ITP traces
    /// as they are and pulled to their median (docs/perf/training.md, 2026-12-05): with 0.5
    /// Gittins preempted where nothing paid, 6-13% behind SJF on three median-pulled
    /// histories; with 2 it is within 3% of the best of SJF, FIFO and LAS on 15 of the 16.
    pub preempt_margin: f64,
    /// Estimate the run-time distribution by Kaplan-Meier, counting the jobs that have run
    /// and not finished (running, or preempted and waiting) as right-censored at the service
    /// they have attained, so that early in a history the long jobs still running weigh in
    /// (`false`: finished jobs only, as the environment's feature schema 7 was trained on).
    pub censoring: bool,
    /// `gittins-preempt`: preempt only where the expected gain in total completion time of
    /// serving the waiting job first outweighs this many times what the preemption wastes
    /// (the victim's restart overhead and its work since the last checkpoint); see
    /// `modifier/gittins.rs`. 0 = no cost test (the index margin alone).
    pub preempt_cost_factor: f64,
}

impl Default for GittinsConfig {
    fn default() -> Self {
        GittinsConfig {
            min_class_samples: 16,
            preempt_margin: 2.0,
            censoring: true,
            preempt_cost_factor: 1.0,
        }
    }
}

impl GittinsConfig {
    /// The estimator and preemption rule the environment's candidates and duration features
    /// use under feature schema 7 (finished jobs only, no cost test): what `models/default`
    /// was trained on, kept until a model is retrained on the censored estimate.
    pub fn schema7() -> Self {
        GittinsConfig {
            censoring: false,
            preempt_cost_factor: 0.0,
            preempt_margin: 0.5,
            ..GittinsConfig::default()
        }
    }

    /// Checks the knobs: a margin and a cost factor finite and >= 0.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.preempt_margin.is_finite() && self.preempt_margin >= 0.0) {
            return Err(format!(
                "gittins preempt_margin must be >= 0, got {}",
                self.preempt_margin
            ));
        }
        if !(self.preempt_cost_factor.is_finite() && self.preempt_cost_factor >= 0.0) {
            return Err(format!(
                "gittins preempt_cost_factor must be >= 0, got {}",
                self.preempt_cost_factor
            ));
        }
        Ok(())
    }
}

/// A discrete run-time distribution: atoms (ms, strictly increasing) with positive weights,
/// and the prefix sums the index needs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Atoms {
    values: Vec<f64>,
    /// `cum_w[k]`: total weight of atoms below `k`; `cum_wv[k]`: their weight x value.
    cum_w: Vec<f64>,
    cum_wv: Vec<f64>,
}

impl Atoms {
    /// The distribution with these `(value ms, weight)` atoms; non-positive weights and
    /// non-finite values are ignored, equal values merged.
    pub fn new(mut atoms: Vec<(f64, f64)>) -> Self {
        atoms.retain(|(v, w)| v.is_finite() && w.is_finite() && *w > 0.0);
        // Histogram buckets come in increasing order already (a stable sort would leave them
        // as they are): only the Kaplan-Meier tail atom can be out of place.
        if !atoms.is_sorted_by(|a, b| a.0.total_cmp(&b.0).is_le()) {
            atoms.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        // Sized once: grown from one element, the two sums reallocated about a dozen times
        // per rebuild, and the atoms are rebuilt whenever a job finishes.
        let mut out = Atoms {
            values: Vec::with_capacity(atoms.len()),
            cum_w: Vec::with_capacity(atoms.len() + 1),
            cum_wv: Vec::with_capacity(atoms.len() + 1),
        };
        out.cum_w.push(0.0);
        out.cum_wv.push(0.0);
        for (v, w) in atoms {
            let (cw, cwv) = (
                out.total_weight(),
                out.cum_wv.last().copied().unwrap_or(0.0),
            );
            if out.values.last() == Some(&v) {
                let last = out.cum_w.len() - 1;
                out.cum_w[last] = cw + w;
                out.cum_wv[last] = cwv + w * v;
            } else {
                out.values.push(v);
                out.cum_w.push(cw + w);
                out.cum_wv.push(cwv + w * v);
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    fn total_weight(&self) -> f64 {
        self.cum_w.last().copied().unwrap_or(0.0)
    }

    /// The Gittins index at attained service `attained_ms`, per hour of service; `None` when
    /// no atom lies above it (the distribution says the job should have finished).
    pub fn index(&self, attained_ms: f64) -> Option<f64> {
        self.index_and_quantum(attained_ms).map(|(g, _)| g)
    }

    /// The Gittins index at `attained_ms` (per hour of service) with the expected service of
    /// the quantum that attains it, ms: `E[min(D - a, Δ*) | D > a]` for the best `Δ*`.
    /// `None` when no atom lies above `attained_ms`.
    pub fn index_and_quantum(&self, attained_ms: f64) -> Option<(f64, f64)> {
        let a = attained_ms;
        let s = self.values.partition_point(|v| *v <= a);
        let n = self.values.len();
        if s == n {
            return None;
        }
        let total = self.total_weight() - self.cum_w[s];
        let (mut best, mut quantum) = (0.0f64, 0.0f64);
        for k in s..n {
            let mass = self.cum_w[k + 1] - self.cum_w[s];
            let delta = self.values[k] - a;
            let served = (self.cum_wv[k + 1] - self.cum_wv[s]) - a * mass + (total - mass) * delta;
            if served > 0.0 && mass / served > best {
                best = mass / served;
                quantum = served / total;
            }
        }
        Some((best * HOUR_MS, quantum))
    }

    /// The chance a job that has run `attained_ms` finishes within `within_ms` more:
    /// `P(D <= a + within | D > a)`; `None` when no atom lies above `a`.
    pub fn finish_within(&self, attained_ms: f64, within_ms: f64) -> Option<f64> {
        let s = self.values.partition_point(|v| *v <= attained_ms);
        if s == self.values.len() {
            return None;
        }
        let e = self
            .values
            .partition_point(|v| *v <= attained_ms + within_ms);
        let total = self.total_weight() - self.cum_w[s];
        Some((self.cum_w[e] - self.cum_w[s]) / total)
    }

    /// A draw of the run time of a job that has run `attained_ms`, from the distribution
    /// conditioned on `D > attained_ms`, by inverse transform of `u` (uniform in [0, 1)): the
    /// first atom above `a` whose cumulative conditional weight exceeds `u`. `None` when no
    /// atom lies above `a`.
    pub fn sample_above(&self, attained_ms: f64, u: f64) -> Option<f64> {
        let s = self.values.partition_point(|v| *v <= attained_ms);
        if s == self.values.len() {
            return None;
        }
        let target = self.cum_w[s] + u.clamp(0.0, 1.0) * (self.total_weight() - self.cum_w[s]);
        let k = self.cum_w[s + 1..].partition_point(|c| *c <= target);
        Some(self.values[(s + k).min(self.values.len() - 1)])
    }

    /// The `q`-quantile (0..=1) of the distribution, ms; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.total_weight();
        if self.values.is_empty() || total <= 0.0 {
            return None;
        }
        let target = q.clamp(0.0, 1.0) * total;
        let k = self.cum_w[1..].partition_point(|c| *c < target);
        Some(self.values[k.min(self.values.len() - 1)])
    }
}

/// Observed run times, bucketed logarithmically, and the right-censored observations (jobs
/// that have run and not finished, by the bucket of their attained service); `atoms` is kept
/// in step with both.
#[derive(Debug, Clone, Default)]
struct Histogram {
    /// Bucket -> (count, sum of run times ms).
    buckets: BTreeMap<u32, (u64, f64)>,
    count: u64,
    /// Bucket -> censored observations in it.
    censored: BTreeMap<u32, u64>,
    atoms: Atoms,
    stale: bool,
}

/// The bucket of a run time or an attained service, ms.
fn bucket_of(ms: u64) -> u32 {
    (BUCKETS_PER_OCTAVE * (ms.max(1) as f64).log2()).floor() as u32
}

/// The upper edge of bucket `b`, ms.
fn bucket_top(b: u32) -> f64 {
    ((b + 1) as f64 / BUCKETS_PER_OCTAVE).exp2()
}

impl Histogram {
    fn add(&mut self, run_ms: u64) {
        let ms = run_ms.max(1) as f64;
        let b = self.buckets.entry(bucket_of(run_ms)).or_insert((0, 0.0));
        b.0 += 1;
        b.1 += ms;
        self.count += 1;
        self.stale = true;
    }

    /// Replaces the censored observations (bucket -> count), marking the atoms stale only if
    /// they changed.
    fn set_censored(&mut self, censored: BTreeMap<u32, u64>) {
        if censored != self.censored {
            self.censored = censored;
            self.stale = true;
        }
    }

    fn refresh(&mut self) {
        if !self.stale {
            return;
        }
        self.stale = false;
        if self.count == 0 {
            // Nothing finished: no distribution (every index 0), censored or not.
            self.atoms = Atoms::default();
            return;
        }
        if self.censored.is_empty() {
            self.atoms = Atoms::new(
                self.buckets
                    .values()
                    .map(|(n, sum)| (sum / *n as f64, *n as f64))
                    .collect(),
            );
            return;
        }
        self.atoms = Atoms::new(kaplan_meier(&self.buckets, &self.censored));
    }
}

/// The Kaplan-Meier estimate of the run-time distribution as atoms `(value ms, probability)`:
/// at each bucket of finished jobs (value: their mean run time), in increasing order, the
/// hazard is the bucket's finished count over the observations still at risk (finished in it
/// or later, or censored in it or later: a censored observation counts as at risk in its own
/// bucket, ties going to the events); the atom's probability is the survival before it times
/// the hazard. What survives past the last finished bucket (mass only censored observations
/// reach) is put on one atom at twice the upper edge of the highest censored bucket: the run
/// time as long again as the longest service seen, the hazard `1 / a` the index assumes past
/// every observation.
fn kaplan_meier(
    events: &BTreeMap<u32, (u64, f64)>,
    censored: &BTreeMap<u32, u64>,
) -> Vec<(f64, f64)> {
    let mut at_risk: u64 =
        events.values().map(|(n, _)| n).sum::<u64>() + censored.values().sum::<u64>();
    let mut survival = 1.0f64;
    let mut atoms = Vec::with_capacity(events.len() + 1);
    let mut cens = censored.iter().peekable();
    for (&b, &(d, sum)) in events {
        // Censored below this bucket have left the risk set.
        while let Some((_, &c)) = cens.next_if(|(cb, _)| **cb < b) {
            at_risk -= c;
        }
        let hazard = d as f64 / at_risk as f64;
        atoms.push((sum / d as f64, survival * hazard));
        survival *= 1.0 - hazard;
        at_risk -= d;
    }
    if survival > 1e-12
        && let Some((&top, _)) = censored.last_key_value()
    {
        atoms.push((2.0 * bucket_top(top), survival));
    }
    atoms
}

/// A job's GPU-count class: 1 (or a fraction, or none), 2, 3-4, 5-8, 9-16, 17+ GPUs.
pub fn gpu_class(job: &JobSpec) -> usize {
    match job.gpus_total() {
        0..=1 => 0,
        2 => 1,
        3..=4 => 2,
        5..=8 => 3,
        9..=16 => 4,
        _ => 5,
    }
}

/// The run-time distributions of finished jobs, per GPU-count class and overall, learned from
/// what a scheduler sees (`recently_finished` and their `attained_ms`, and with `censoring` the
/// service attained so far by the jobs that have run and not finished), never true durations.
#[derive(Debug, Clone)]
pub struct GittinsEstimator {
    classes: [Histogram; GPU_CLASSES],
    all: Histogram,
    min_class_samples: u64,
    learned: HashSet<JobId, foldhash::fast::FixedState>,
    /// With censoring: jobs seen running and not yet learned as finished.
    censoring: bool,
    started: HashSet<JobId, foldhash::fast::FixedState>,
    /// Bumped whenever a distribution changes: what is computed from the atoms holds while
    /// it stays (`generation`).
    generation: u64,
}

impl GittinsEstimator {
    pub fn new(config: &GittinsConfig) -> Self {
        GittinsEstimator {
            classes: Default::default(),
            all: Histogram::default(),
            min_class_samples: config.min_class_samples,
            learned: HashSet::default(),
            censoring: config.censoring,
            started: HashSet::default(),
            generation: 0,
        }
    }

    /// Learns from the jobs that finished since the previous decision (each job once) and,
    /// with censoring, from the service attained by `running` (the jobs running now) and the
    /// jobs seen running before that have not finished.
    pub fn observe(&mut self, ctx: &DecisionContext<'_>, running: impl Iterator<Item = JobId>) {
        for &id in ctx.recently_finished() {
            if self.learned.insert(id) {
                self.add(ctx.job(id), ctx.runtime(id).attained_ms);
            }
        }
        if self.censoring {
            self.started.extend(running);
            let learned = &self.learned;
            self.started.retain(|id| {
                !learned.contains(id) && ctx.runtime(*id).state != super::super::JobState::Finished
            });
            let mut classes: [BTreeMap<u32, u64>; GPU_CLASSES] = Default::default();
            let mut all = BTreeMap::new();
            for &id in &self.started {
                let attained = ctx.attained_ms(id);
                if attained == 0 {
                    continue;
                }
                let b = bucket_of(attained);
                *classes[gpu_class(ctx.job(id))].entry(b).or_insert(0) += 1;
                *all.entry(b).or_insert(0) += 1;
            }
            for (h, c) in self.classes.iter_mut().zip(classes) {
                h.set_censored(c);
            }
            self.all.set_censored(all);
        }
        self.refresh();
    }

    /// Learns that `job` ran for `observed_ms` in all.
    pub fn record(&mut self, job: &JobSpec, observed_ms: u64) {
        self.add(job, observed_ms);
        self.refresh();
    }

    fn add(&mut self, job: &JobSpec, observed_ms: u64) {
        self.classes[gpu_class(job)].add(observed_ms);
        self.all.add(observed_ms);
    }

    /// Rebuilds the atoms of the histograms that changed, once for all the jobs just learned.
    fn refresh(&mut self) {
        let stale = self.all.stale || self.classes.iter().any(|h| h.stale);
        if stale {
            self.generation += 1;
        }
        self.classes.iter_mut().for_each(Histogram::refresh);
        self.all.refresh();
    }

    /// Changes whenever a distribution (or which one a job's index reads) may have: an index,
    /// quantile or chance computed at one generation holds while it stays the same.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Finished jobs learned from.
    pub fn samples(&self) -> u64 {
        self.all.count
    }

    /// The distribution `job`'s index is computed over: its class's once it has
    /// `min_class_samples`, else all finished jobs'.
    pub fn distribution(&self, job: &JobSpec) -> &Atoms {
        let class = &self.classes[gpu_class(job)];
        if class.count >= self.min_class_samples.max(1) {
            &class.atoms
        } else {
            &self.all.atoms
        }
    }

    /// The distribution of every finished job's run time.
    pub fn overall(&self) -> &Atoms {
        &self.all.atoms
    }

    /// `job`'s Gittins index at `attained_ms`, per hour of service (see the module docs);
    /// 0 for everyone before any job has finished.
    pub fn index(&self, job: &JobSpec, attained_ms: u64) -> f64 {
        let atoms = self.distribution(job);
        if atoms.is_empty() {
            return 0.0;
        }
        atoms
            .index(attained_ms as f64)
            .unwrap_or_else(|| HOUR_MS / (attained_ms.max(1) as f64))
    }

    /// The index per GPU, which orders jobs of different sizes.
    pub fn priority(&self, job: &JobSpec, attained_ms: u64) -> f64 {
        self.index(job, attained_ms) / processors(job) as f64
    }

    /// `job`'s index per hour at `attained_ms` and the expected service of the quantum that
    /// attains it, ms ([`Atoms::index_and_quantum`]); past every atom `1 / a` with a quantum
    /// of `a` (a run as long again); `(0, 0)` before any job has finished.
    pub fn index_and_quantum(&self, job: &JobSpec, attained_ms: u64) -> (f64, f64) {
        let atoms = self.distribution(job);
        if atoms.is_empty() {
            return (0.0, 0.0);
        }
        let a = attained_ms.max(1) as f64;
        atoms
            .index_and_quantum(attained_ms as f64)
            .unwrap_or((HOUR_MS / a, a))
    }
}

/// The Gittins-index ordering: highest `GittinsEstimator::priority` first, ties by submit.
/// Greedy: a job that does not fit is skipped.
#[derive(Debug)]
pub struct Gittins {
    estimator: GittinsEstimator,
}

impl Gittins {
    pub fn new(config: &GittinsConfig) -> Result<Self, String> {
        config.validate()?;
        Ok(Gittins {
            estimator: GittinsEstimator::new(config),
        })
    }
}

impl Ordering for Gittins {
    fn name(&self) -> &str {
        "gittins"
    }
    fn order<'c>(
        &'c mut self,
        ctx: &'c DecisionContext<'_>,
    ) -> Box<dyn Iterator<Item = JobId> + 'c> {
        self.estimator
            .observe(ctx, ctx.cluster().running().map(|a| a.job));
        let estimator = &self.estimator;
        // A fresh job's index depends only on its class and size: computed once per decision.
        let mut fresh: std::collections::HashMap<(usize, u64), f64> = Default::default();
        sorted_by(ctx, |p| {
            let attained = p.runtime.attained_ms;
            let priority = if attained == 0 {
                *fresh
                    .entry((gpu_class(p.spec), processors(p.spec)))
                    .or_insert_with(|| estimator.priority(p.spec, 0))
            } else {
                estimator.priority(p.spec, attained)
            };
            Score(-priority)
        })
    }
    fn blocks_on_failure(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::uniform;
    use crate::policy::order::tests::{World, gpu_job, order_of};

    /// `n` atoms of equal weight at the midpoints of `n` equal-probability slices of the
    /// distribution whose quantile function is `q`.
    fn discretised(n: usize, q: impl Fn(f64) -> f64) -> (Atoms, Vec<f64>) {
        let values: Vec<f64> = (0..n).map(|i| q((i as f64 + 0.5) / n as f64)).collect();
        (
            Atoms::new(values.iter().map(|v| (*v, 1.0)).collect()),
            values,
        )
    }

    fn close(got: f64, want: f64, rel: f64) -> bool {
        (got - want).abs() <= rel * want.abs()
    }

    #[test]
    fn deterministic_run_times_index_one_over_the_remaining_time() {
        // D = 10 h exactly: G(a) = 1 / (10 h - a), increasing; none past 10 h.
        let atoms = Atoms::new(vec![(10.0 * HOUR_MS, 3.0)]);
        for a_h in [0.0, 2.5, 5.0, 9.0] {
            let g = atoms.index(a_h * HOUR_MS).unwrap();
            assert!(close(g, 1.0 / (10.0 - a_h), 1e-12), "a={a_h}: {g}");
        }
        assert_eq!(atoms.index(10.0 * HOUR_MS), None);
    }

    #[test]
    fn exponential_run_times_have_one_index() {
        // Exponential with mean 2 h: hazard 0.5 per hour at every age, and so is G.
        let (atoms, values) = discretised(20_000, |u| -2.0 * HOUR_MS * (1.0 - u).ln());
        for &a in values.iter().step_by(1_000).take(15) {
            let g = atoms.index(a).unwrap();
            assert!(close(g, 0.5, 0.03), "a={} h: G={g}", a / HOUR_MS);
        }
    }

    #[test]
    fn pareto_run_times_index_falls_as_the_hazard() {
        // Pareto, shape 1.5, scale 1 h: a decreasing hazard 1.5 / a, which is G(a).
        let (atoms, values) = discretised(50_000, |u| HOUR_MS * (1.0 - u).powf(-1.0 / 1.5));
        let mut last = f64::INFINITY;
        for &a in values.iter().step_by(2_500) {
            let g = atoms.index(a).unwrap();
            assert!(g < last, "G must fall: {g} after {last}");
            assert!(
                close(g, 1.5 / (a / HOUR_MS), 0.05),
                "a={}: {g}",
                a / HOUR_MS
            );
            last = g;
        }
    }

    #[test]
    fn uniform_run_times_index_rises() {
        // Uniform on [0, 8 h]: G(a) = 2 / (8 h - a), increasing.
        let (atoms, values) = discretised(40_000, |u| 8.0 * HOUR_MS * u);
        let mut last = 0.0;
        for &a in values.iter().step_by(4_000) {
            let g = atoms.index(a).unwrap();
            assert!(g > last);
            assert!(
                close(g, 2.0 / (8.0 - a / HOUR_MS), 0.01),
                "a={}: {g}",
                a / HOUR_MS
            );
            last = g;
        }
    }

    #[test]
    fn index_matches_a_naive_supremum_over_atoms() {
        // Three atoms 1 h (w 2), 3 h (w 1), 10 h (w 1), at a = 0.5 h: the ratio at each atom,
        // Δ = 0.5 h: 2 / (4 x 0.5) = 1;  Δ = 2.5 h: 3 / (2 x 0.5 + 2 x 2.5) = 0.5;
        // Δ = 9.5 h: 4 / (1 + 2.5 + 9.5) = 4 / 13. G = 1 per hour.
        let atoms = Atoms::new(vec![
            (3.0 * HOUR_MS, 1.0),
            (HOUR_MS, 2.0),
            (10.0 * HOUR_MS, 1.0),
        ]);
        assert!(close(atoms.index(0.5 * HOUR_MS).unwrap(), 1.0, 1e-12));
        // At a = 2 h only 3 h and 10 h remain: Δ = 1: 1 / (1 + 1) = 0.5; Δ = 8: 2 / (1 + 8).
        assert!(close(atoms.index(2.0 * HOUR_MS).unwrap(), 0.5, 1e-12));
        assert_eq!(
            atoms.finish_within(0.5 * HOUR_MS, 3.0 * HOUR_MS),
            Some(0.75)
        );
        assert_eq!(atoms.quantile(0.5), Some(HOUR_MS));
        assert_eq!(atoms.quantile(1.0), Some(10.0 * HOUR_MS));
        // The empty distribution (a default one too) answers nothing, without panicking.
        for empty in [Atoms::default(), Atoms::new(Vec::new())] {
            assert_eq!(
                (
                    empty.index(0.0),
                    empty.quantile(0.5),
                    empty.finish_within(0.0, 1.0)
                ),
                (None, None, None)
            );
        }
    }

    #[test]
    fn conditional_draws_follow_the_distribution_above_the_attained_service() {
        // Atoms 1 h (w 2), 3 h (w 1), 10 h (w 1). Given D > 2 h: 3 h and 10 h, 1/2 each.
        // Given D > 0.5 h: 1 h 1/2, 3 h 1/4, 10 h 1/4. Nothing lies above 10 h.
        let atoms = Atoms::new(vec![
            (HOUR_MS, 2.0),
            (3.0 * HOUR_MS, 1.0),
            (10.0 * HOUR_MS, 1.0),
        ]);
        let n = 10_000;
        let share = |a_h: f64, v_h: f64| {
            (0..n)
                .filter(|i| {
                    let u = (*i as f64 + 0.5) / n as f64;
                    atoms.sample_above(a_h * HOUR_MS, u) == Some(v_h * HOUR_MS)
                })
                .count() as f64
                / n as f64
        };
        assert_eq!((share(2.0, 3.0), share(2.0, 10.0)), (0.5, 0.5));
        assert_eq!(
            (share(0.5, 1.0), share(0.5, 3.0), share(0.5, 10.0)),
            (0.5, 0.25, 0.25)
        );
        assert_eq!(atoms.sample_above(10.0 * HOUR_MS, 0.3), None);
        assert_eq!(Atoms::default().sample_above(0.0, 0.3), None);
    }

    proptest::proptest! {
        #[test]
        fn conditional_draws_are_atoms_above_the_attained_service(
            atoms in proptest::collection::vec((1.0f64..1e7, 0.01f64..10.0), 1..20),
            attained in 0.0f64..1.2e7,
            u in 0.0f64..1.0,
        ) {
            let values: Vec<f64> = atoms.iter().map(|a| a.0).collect();
            let dist = Atoms::new(atoms);
            match dist.sample_above(attained, u) {
                Some(d) => proptest::prop_assert!(d > attained && values.contains(&d)),
                None => proptest::prop_assert!(values.iter().all(|v| *v <= attained)),
            }
        }
    }

    #[test]
    fn kaplan_meier_matches_a_hand_computation_with_censoring() {
        // Finished: 1 h, 1 h, 3 h. Censored (ran, not finished): 2 h and 5 h. Five at risk.
        // At 1 h: hazard 2/5, atom 0.4, survival 0.6; three left, the 2 h one leaves: two.
        // At 3 h: hazard 1/2, atom 0.6 x 1/2 = 0.3, survival 0.3; the 5 h one is left: its
        // 0.3 goes on one atom at twice the upper edge of 5 h's bucket (10 h and < 4.4%).
        let mut h = Histogram::default();
        for run_h in [1.0, 1.0, 3.0] {
            h.add((run_h * HOUR_MS) as u64);
        }
        let mut censored = BTreeMap::new();
        for run_h in [2.0, 5.0] {
            *censored
                .entry(bucket_of((run_h * HOUR_MS) as u64))
                .or_insert(0) += 1;
        }
        let km = kaplan_meier(&h.buckets, &censored);
        assert_eq!(km.len(), 3, "{km:?}");
        let want = [(HOUR_MS, 0.4), (3.0 * HOUR_MS, 0.3)];
        for ((v, w), (wv, ww)) in km.iter().zip(want) {
            assert!(close(*v, wv, 1e-12) && close(*w, ww, 1e-12), "{km:?}");
        }
        let (tail_v, tail_w) = km[2];
        assert!(close(tail_w, 0.3, 1e-12));
        assert!(
            tail_v > 10.0 * HOUR_MS && tail_v < 10.0 * HOUR_MS * 1.045,
            "{tail_v}"
        );
        // Without the censored jobs: the empirical distribution, 2/3 at 1 h, 1/3 at 3 h.
        let plain = kaplan_meier(&h.buckets, &BTreeMap::new());
        assert_eq!(plain.len(), 2);
        assert!(close(plain[0].1, 2.0 / 3.0, 1e-12) && close(plain[1].1, 1.0 / 3.0, 1e-12));
        // A censored observation in the bucket of an event is at risk at it (ties go to the
        // event): finished 1 h, censored 1 h: hazard 1/2 there, 1/2 left for the tail.
        let mut one = Histogram::default();
        one.add(HOUR_MS as u64);
        let tie = BTreeMap::from([(bucket_of(HOUR_MS as u64), 1)]);
        let km = kaplan_meier(&one.buckets, &tie);
        assert!(
            close(km[0].1, 0.5, 1e-12) && close(km[1].1, 0.5, 1e-12),
            "{km:?}"
        );
    }

    #[test]
    fn censoring_counts_the_jobs_still_running() {
        // Three 1-GPU jobs finished after 1 h; ten 1-GPU jobs have run 5 h and still run.
        // Finished jobs alone say every run takes 1 h: the running ones are past every
        // observation (index 1 / 5 h = 0.2 per hour) and a fresh job's index is 1 per hour,
        // 5x theirs. Counted as censored, 10/13 of the mass lies past 5 h: a fresh job's
        // index falls to (3/13) / (1 h) = 0.23 per hour, close to the running ones'.
        let jobs: Vec<JobSpec> = (0..14).map(|_| gpu_job(0, 1)).collect();
        let mut w = World::new(jobs, uniform(2, 8, "V100", 64_000, 1 << 20));
        for i in 0..3 {
            w.finish(i, 3600);
        }
        for i in 3..13 {
            w.start(i, 3600);
        }
        let ctx = w.ctx(6 * 3600);
        let running = || ctx.cluster().running().map(|a| a.job).collect::<Vec<_>>();
        let fresh = &w.jobs[13];
        let five_h = 5 * 3_600_000;
        let mut plain = GittinsEstimator::new(&GittinsConfig::schema7());
        plain.observe(&ctx, running().into_iter());
        assert!(close(plain.index(fresh, 0), 1.0, 1e-9));
        assert!(close(plain.index(fresh, five_h), 0.2, 1e-9));
        let mut km = GittinsEstimator::new(&GittinsConfig::default());
        km.observe(&ctx, running().into_iter());
        let fresh_index = km.index(fresh, 0);
        assert!(close(fresh_index, 3.0 / 13.0, 1e-9), "{fresh_index}");
        let running_index = km.index(fresh, five_h);
        assert!(
            running_index > 0.19 && running_index < 0.2,
            "{running_index}"
        );
        // Below gittins-preempt's default margin (1.5x): nobody would be preempted.
        assert!(fresh_index < 1.5 * running_index);
        assert_eq!(km.samples(), 3);
    }

    #[test]
    fn learns_per_class_from_finished_jobs_only() {
        // Jobs 0, 1 (1 GPU) and 2 (8 GPUs) finish; jobs 3 (1 GPU) and 4 (8 GPUs) wait.
        let jobs = vec![
            gpu_job(0, 1),
            gpu_job(0, 1),
            gpu_job(0, 8),
            gpu_job(1, 1),
            gpu_job(2, 8),
        ];
        let mut w = World::new(jobs, uniform(1, 8, "V100", 64_000, 1 << 20));
        let config = GittinsConfig {
            min_class_samples: 1,
            ..GittinsConfig::default()
        };
        let mut g = Gittins::new(&config).unwrap();
        // Nothing finished: FIFO.
        assert_eq!(order_of(&mut g, &w, 5), [0, 1, 2, 3, 4]);
        w.finish(0, 600);
        w.finish(1, 600);
        w.finish(2, 60);
        // 1-GPU jobs run 10 min (G = 6 per hour, 6 per GPU-hour); the 8-GPU one 1 min (60 per
        // hour, 7.5 per GPU-hour): the 8-GPU job goes first.
        assert_eq!(order_of(&mut g, &w, 600), [4, 3]);
        assert_eq!(g.estimator.samples(), 3);
        // Learning is per class: with a class minimum of 4, both use all three run times.
        let mut g = Gittins::new(&GittinsConfig::default()).unwrap();
        let _ = order_of(&mut g, &w, 600);
        assert_eq!(g.estimator.distribution(&w.jobs[3]), g.estimator.overall());
    }

    #[test]
    fn a_job_past_every_observed_run_time_keeps_a_positive_index() {
        let mut e = GittinsEstimator::new(&GittinsConfig::default());
        let j = gpu_job(0, 1);
        e.record(&j, 3_600_000);
        assert!((e.index(&j, 0) - 1.0).abs() < 1e-9);
        // Run 2 h, longer than the only observation: 1 / 2 h.
        assert!((e.index(&j, 7_200_000) - 0.5).abs() < 1e-9);
        assert!(
            GittinsConfig {
                preempt_margin: -1.0,
                ..GittinsConfig::default()
            }
            .validate()
            .is_err()
        );
    }
}
