//! Fairness with memory: each queue's usage decayed over time, as Kueue's admission fair
//! sharing keeps it (`pkg/util/admissionfairsharing`, the design of kueue#9734) and as Slurm's
//! multifactor priority decays usage with `PriorityDecayHalfLife`: at every observation
//! `consumed = consumed x (1 - a) + current x a`, `a = 1 - 0.5^(elapsed / half-life)`, so a
//! queue that held `u` since long ago reads `u`, and one that stopped `h` half-lives ago reads
//! `u / 2^h`. An admission adds an entry penalty (`request x a` over one sampling interval)
//! until the next observation counts the job itself, so that a burst of admissions in one
//! instant is not free. A queue's score is its weighted consumed usage over its weight; lower
//! scores go first.

use super::Resource;
use std::collections::BTreeMap;

/// Kueue's `calculateAlphaRate`.
fn alpha(elapsed_s: f64, half_life_s: f64) -> f64 {
    if half_life_s <= 0.0 {
        return 0.0;
    }
    1.0 - 0.5f64.powf(elapsed_s.max(0.0) / half_life_s)
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Entry {
    consumed: BTreeMap<Resource, f64>,
    penalty: BTreeMap<Resource, f64>,
    last_s: f64,
}

/// Decayed usage of every queue (by index), in each resource's unit.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageHistory {
    pub half_life_s: f64,
    pub sampling_s: f64,
    entries: Vec<Entry>,
}

impl UsageHistory {
    /// `queues` queues, all without history at time 0.
    pub fn new(queues: usize, half_life_s: f64, sampling_s: f64) -> Self {
        UsageHistory {
            half_life_s,
            sampling_s,
            entries: vec![Entry::default(); queues],
        }
    }

    /// Queue `q` has used `current` since its last observation (constant in between, as Kueue
    /// samples it): decays its history to `now_s` and settles its entry penalties.
    pub fn observe(&mut self, q: usize, now_s: f64, current: &[(Resource, f64)]) {
        let a = alpha(now_s - self.entries[q].last_s, self.half_life_s);
        let e = &mut self.entries[q];
        for v in e.consumed.values_mut() {
            *v *= 1.0 - a;
        }
        for (r, v) in current {
            *e.consumed.entry(*r).or_insert(0.0) += v * a;
        }
        e.penalty.clear();
        e.last_s = e.last_s.max(now_s);
    }

    /// A job asking `request` was admitted to queue `q`: its entry penalty.
    pub fn admitted(&mut self, q: usize, request: &[(Resource, f64)]) {
        let a = alpha(self.sampling_s, self.half_life_s);
        for (r, v) in request {
            *self.entries[q].penalty.entry(*r).or_insert(0.0) += v * a;
        }
    }

    /// Queue `q`'s decayed usage of `r` (penalties included).
    pub fn consumed(&self, q: usize, r: Resource) -> f64 {
        let e = &self.entries[q];
        e.consumed.get(&r).copied().unwrap_or(0.0) + e.penalty.get(&r).copied().unwrap_or(0.0)
    }

    /// Kueue's `CalculateUsage`: the resources' decayed usage, weighted by `weights` (1 for a
    /// resource not listed), over the queue's `weight` (infinite for a weight <= 0).
    pub fn score(&self, q: usize, weight: f64, weights: &[(Resource, f64)]) -> f64 {
        let mut usage = 0.0;
        for r in [Resource::Gpu, Resource::Cpu, Resource::Memory] {
            let w = weights
                .iter()
                .find(|(x, _)| *x == r)
                .map_or(1.0, |(_, w)| *w);
            usage += w * self.consumed(q, r);
        }
        if weight <= 0.0 {
            return f64::INFINITY;
        }
        usage / weight
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: f64 = 3600.0;

    #[test]
    fn usage_decays_by_half_each_half_life_whatever_the_sampling() {
        let gpu = |v: f64| [(Resource::Gpu, v)];
        // 8 GPUs from 0, observed once after one half-life: half of 8.
        let mut once = UsageHistory::new(1, H, 60.0);
        once.observe(0, H, &gpu(8.0));
        assert!((once.consumed(0, Resource::Gpu) - 4.0).abs() < 1e-9);
        // Observed every minute instead: the same.
        let mut often = UsageHistory::new(1, H, 60.0);
        for m in 1..=60 {
            often.observe(0, f64::from(m) * 60.0, &gpu(8.0));
        }
        assert!((often.consumed(0, Resource::Gpu) - 4.0).abs() < 1e-9);
        // Then idle for two half-lives: a quarter of that.
        often.observe(0, 3.0 * H, &gpu(0.0));
        assert!((often.consumed(0, Resource::Gpu) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn admissions_pay_a_penalty_until_observed_and_weights_scale_the_score() {
        let mut h = UsageHistory::new(2, H, 300.0);
        h.admitted(0, &[(Resource::Gpu, 8.0)]);
        let a = 1.0 - 0.5f64.powf(300.0 / H);
        assert!((h.consumed(0, Resource::Gpu) - 8.0 * a).abs() < 1e-9);
        assert_eq!(h.score(1, 1.0, &[]), 0.0);
        assert!(h.score(0, 1.0, &[]) > h.score(1, 1.0, &[]));
        // Twice the weight, half the score; resource weights scale each resource.
        let s = h.score(0, 1.0, &[]);
        assert!((h.score(0, 2.0, &[]) - s / 2.0).abs() < 1e-12);
        assert!((h.score(0, 1.0, &[(Resource::Gpu, 3.0)]) - 3.0 * s).abs() < 1e-12);
        assert_eq!(h.score(0, 0.0, &[]), f64::INFINITY);
        // Observing settles the penalty into the measured usage.
        h.observe(0, 300.0, &[(Resource::Gpu, 8.0)]);
        assert!((h.consumed(0, Resource::Gpu) - 8.0 * a).abs() < 1e-9);
    }
}
