//! `sjf`, `srtf` and their `-oracle` upper bounds: the shortest (remaining) job first.

use super::predictor::Durations;
use super::sorted_by;
use crate::policy::{DecisionContext, Ordering, PolicyOptions};
use crate::units::{JobId, SimTime};

/// SRTF's score: the job's total run time minus the service it has attained (non-zero only for
/// a preempted job), saturating at 0 when it has run longer than its estimate says.
pub fn srtf_remaining(total: SimTime, attained: SimTime) -> SimTime {
    total.saturating_sub(attained)
}

/// Shortest job first (`remaining == false`: by total run time) or shortest remaining time
/// first (by `srtf_remaining`), ties by submit. Durations come from the user's estimate or the
/// online predictor (`sjf`, `srtf`), or from the trace's truth for `sjf-oracle` and
/// `srtf-oracle`, which are upper bounds and not schedulers. Greedy: a job that does not fit
/// is skipped.
#[derive(Debug)]
pub struct Shortest {
    name: &'static str,
    remaining: bool,
    durations: Durations,
}

impl Shortest {
    /// `sjf` (`remaining == false`) or `srtf` on estimates and the online predictor.
    pub fn learned(remaining: bool) -> Self {
        Shortest {
            name: if remaining { "srtf" } else { "sjf" },
            remaining,
            durations: Durations::learned(),
        }
    }

    /// `sjf-oracle` or `srtf-oracle`: an error unless `options` carries true durations.
    pub fn oracle(remaining: bool, options: &PolicyOptions) -> Result<Self, String> {
        let name = if remaining {
            "srtf-oracle"
        } else {
            "sjf-oracle"
        };
        Ok(Shortest {
            name,
            remaining,
            durations: Durations::oracle(options, name)?,
        })
    }
}

impl Ordering for Shortest {
    fn name(&self) -> &str {
        self.name
    }
    fn order<'c>(
        &'c mut self,
        ctx: &'c DecisionContext<'_>,
    ) -> Box<dyn Iterator<Item = JobId> + 'c> {
        self.durations.observe(ctx);
        let (durations, remaining) = (&self.durations, self.remaining);
        sorted_by(ctx, |p| {
            let total = durations.total(p.spec);
            if remaining {
                srtf_remaining(total, SimTime(ctx.attained_ms(p.spec.id)))
            } else {
                total
            }
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
    use std::sync::Arc;

    #[test]
    fn remaining_table() {
        // (total s, attained s) -> remaining s
        let cases = [(100, 0, 100), (100, 30, 70), (100, 100, 0), (100, 250, 0)];
        for (total, attained, want) in cases {
            assert_eq!(
                srtf_remaining(SimTime::from_secs(total), SimTime::from_secs(attained)),
                SimTime::from_secs(want)
            );
        }
    }

    fn world_with_estimates(estimates_s: &[u64]) -> World {
        let jobs = estimates_s
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let mut j = gpu_job(i as u64, 1);
                j.estimate = Some(SimTime::from_secs(*e));
                j
            })
            .collect();
        World::new(jobs, uniform(1, 8, "V100", 64_000, 1 << 20))
    }

    #[test]
    fn sjf_orders_by_estimate_then_submit() {
        let w = world_with_estimates(&[300, 100, 200, 100]);
        assert_eq!(
            order_of(&mut Shortest::learned(false), &w, 10),
            [1, 3, 2, 0]
        );
    }

    #[test]
    fn srtf_counts_attained_service_of_preempted_jobs() {
        // Estimates 300, 100, 200 s; job 0 was preempted after 250 s: 50 s remain, so it goes
        // first under SRTF but last under SJF.
        let mut w = world_with_estimates(&[300, 100, 200]);
        w.runtime[0].attained_ms = 250_000;
        w.runtime[0].preemptions = 1;
        assert_eq!(order_of(&mut Shortest::learned(true), &w, 10), [0, 1, 2]);
        assert_eq!(order_of(&mut Shortest::learned(false), &w, 10), [1, 2, 0]);
    }

    #[test]
    fn sjf_without_estimates_learns_from_finished_jobs() {
        // No estimates. Jobs 0 (1 GPU) and 1 (2 GPUs) finish after 900 s and 60 s; the
        // predictor then ranks the waiting 2-GPU job 3 before the 1-GPU job 2, which FIFO
        // (the prior, before anything finished) had the other way round.
        let jobs = vec![gpu_job(0, 1), gpu_job(0, 2), gpu_job(1, 1), gpu_job(2, 2)];
        let mut w = World::new(jobs, uniform(1, 8, "V100", 64_000, 1 << 20));
        let mut sjf = Shortest::learned(false);
        assert_eq!(order_of(&mut sjf, &w, 5), [0, 1, 2, 3]);
        w.finish(0, 900);
        w.finish(1, 60);
        assert_eq!(order_of(&mut sjf, &w, 900), [3, 2]);
    }

    #[test]
    fn oracle_orders_by_true_duration_and_needs_it() {
        let w = world_with_estimates(&[1, 1, 1]);
        let truth: Arc<[SimTime]> = [30, 10, 20].map(SimTime::from_secs).into();
        let options = PolicyOptions {
            seed: 0,
            oracle_durations: Some(truth),
            ..PolicyOptions::default()
        };
        let mut o = Shortest::oracle(false, &options).unwrap();
        assert_eq!(o.name(), "sjf-oracle");
        assert_eq!(order_of(&mut o, &w, 0), [1, 2, 0]);
        let err = Shortest::oracle(true, &PolicyOptions::default()).unwrap_err();
        assert!(err.contains("needs true durations"), "{err}");
    }
}
