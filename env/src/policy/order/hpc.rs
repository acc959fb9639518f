//! `wfp3`, `unicep`, `f1`: the HPC priority functions that RL batch schedulers compare with.
//!
//! Source: RLScheduler (Zhang et al., SC'20), whose `HPCSimPickJobs` environment scores a job
//! by `wfp_score = -(w/r)^3 * n`, `uni_score = -w / (log2(n) * r)` and
//! `f1_score = log10(r) * n + 870 * log10(s)`, and picks the lowest score. WFP3 and UNICEP are
//! from Tang et al., "Fault-aware, utility-based job scheduling on Blue Gene/P" (CLUSTER'09);
//! F1 is the learned function of Carastan-Dos-Santos and de Camargo (SC'17). `w` is the wait,
//! `r` the requested run time (the user's estimate, else the online prediction), `n` the
//! processors (here GPUs, or CPU cores for a CPU-only job), `s` the submit time; all times in
//! seconds, as in the SWF logs those constants were fitted on.
//!
//! Guards the papers do not need on Blue Gene partitions: `r` and `s` are taken as at least
//! 1 s (so the logarithms are finite), and UNICEP uses `log2(max(n, 2))` because `log2(1) = 0`
//! would make every one-GPU job infinitely urgent (RLScheduler's `+1e-15` does exactly that).

use super::predictor::Durations;
use super::{Score, processors, sorted_by};
use crate::policy::{DecisionContext, Ordering};
use crate::units::JobId;

/// -(w/r)^3 * n: long waits relative to the request, weighted by size, go first.
pub fn wfp3_score(wait_s: f64, request_s: f64, n: u64) -> f64 {
    -(wait_s / request_s.max(1.0)).powi(3) * n as f64
}

/// -w / (log2(n) * r), with `n` taken as at least 2: waits relative to request, favouring
/// small jobs only logarithmically.
pub fn unicep_score(wait_s: f64, request_s: f64, n: u64) -> f64 {
    -wait_s / ((n.max(2) as f64).log2() * request_s.max(1.0))
}

/// log10(r) * n + 870 * log10(s): small, short, early jobs go first.
pub fn f1_score(request_s: f64, n: u64, submit_s: f64) -> f64 {
    request_s.max(1.0).log10() * n as f64 + 870.0 * submit_s.max(1.0).log10()
}

/// Which of the three functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HpcFunction {
    Wfp3,
    Unicep,
    F1,
}

impl HpcFunction {
    pub fn name(self) -> &'static str {
        match self {
            HpcFunction::Wfp3 => "wfp3",
            HpcFunction::Unicep => "unicep",
            HpcFunction::F1 => "f1",
        }
    }
}

/// Pending jobs by one HPC function, lowest score first, ties by submit. Strict: the best job
/// blocks the rest when it does not fit, as in the batch schedulers (and RLScheduler) these
/// functions come from; `/easy` backfills around it.
#[derive(Debug)]
pub struct HpcPriority {
    function: HpcFunction,
    durations: Durations,
}

impl HpcPriority {
    pub fn new(function: HpcFunction) -> Self {
        HpcPriority {
            function,
            durations: Durations::learned(),
        }
    }
}

impl Ordering for HpcPriority {
    fn name(&self) -> &str {
        self.function.name()
    }
    fn order<'c>(
        &'c mut self,
        ctx: &'c DecisionContext<'_>,
    ) -> Box<dyn Iterator<Item = JobId> + 'c> {
        self.durations.observe(ctx);
        let (durations, function) = (&self.durations, self.function);
        sorted_by(ctx, |p| {
            let r = durations.total(p.spec).secs_f64();
            let (w, n) = (p.waited.secs_f64(), processors(p.spec));
            Score(match function {
                HpcFunction::Wfp3 => wfp3_score(w, r, n),
                HpcFunction::Unicep => unicep_score(w, r, n),
                HpcFunction::F1 => f1_score(r, n, p.spec.submit.secs_f64()),
            })
        })
    }
    fn blocks_on_failure(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::uniform;
    use crate::policy::order::tests::{World, gpu_job, order_of};
    use crate::units::SimTime;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn wfp3_table() {
        // (w, r, n) -> -(w/r)^3 * n
        let cases = [
            (100.0, 100.0, 4, -4.0), // (1)^3 x 4
            (200.0, 100.0, 1, -8.0), // (2)^3 x 1
            (50.0, 100.0, 8, -1.0),  // (0.5)^3 x 8
            (0.0, 100.0, 8, 0.0),    // no wait, no urgency
            (10.0, 0.0, 1, -1000.0), // r clamped to 1 s: 10^3
        ];
        for (w, r, n, want) in cases {
            assert!(close(wfp3_score(w, r, n), want), "{w} {r} {n}");
        }
    }

    #[test]
    fn unicep_table() {
        // (w, r, n) -> -w / (log2(max(n, 2)) * r)
        let cases = [
            (800.0, 100.0, 8, -800.0 / 300.0), // log2 8 = 3: -8/3
            (400.0, 100.0, 4, -2.0),           // log2 4 = 2: -400/200
            (400.0, 100.0, 1, -4.0),           // n = 1 counts as 2: log2 2 = 1
            (400.0, 100.0, 2, -4.0),
            (0.0, 100.0, 16, 0.0),
        ];
        for (w, r, n, want) in cases {
            assert!(close(unicep_score(w, r, n), want), "{w} {r} {n}");
        }
    }

    #[test]
    fn f1_table() {
        // (r, n, s) -> log10(r) * n + 870 * log10(s)
        let cases = [
            (1000.0, 4, 100.0, 3.0 * 4.0 + 870.0 * 2.0), // 12 + 1740 = 1752
            (10.0, 1, 10.0, 1.0 + 870.0),                // 871
            (100.0, 8, 0.0, 16.0),                       // s clamped to 1 s: log10 1 = 0
            (0.5, 2, 1000.0, 2610.0),                    // r clamped to 1 s: 0 + 870 x 3
        ];
        for (r, n, s, want) in cases {
            assert!(close(f1_score(r, n, s), want), "{r} {n} {s}");
        }
    }

    #[test]
    fn orderings_rank_by_their_functions_and_block() {
        // At t = 1000 s: job 0 submitted at 0 s, estimate 1000 s, 1 GPU; job 1 at 500 s,
        // estimate 100 s, 8 GPUs; job 2 at 900 s, estimate 10 s, 2 GPUs.
        // WFP3: -(1000/1000)^3 x 1 = -1; -(500/100)^3 x 8 = -1000; -(100/10)^3 x 2 = -2000.
        // UNICEP: -1000 / (1 x 1000) = -1; -500 / (3 x 100) = -1.67; -100 / (1 x 10) = -10.
        // F1: 3 x 1 + 0 = 3 (s clamped to 1); 2 x 8 + 870 x 2.699 = 2364.1;
        //     1 x 2 + 870 x 2.954 = 2572.2.
        let jobs = [(0, 1000, 1), (500, 100, 8), (900, 10, 2)]
            .iter()
            .map(|&(s, e, g)| {
                let mut j = gpu_job(s, g);
                j.estimate = Some(SimTime::from_secs(e));
                j
            })
            .collect();
        let w = World::new(jobs, uniform(1, 8, "V100", 64_000, 1 << 20));
        let mut wfp3 = HpcPriority::new(HpcFunction::Wfp3);
        assert_eq!(order_of(&mut wfp3, &w, 1000), [2, 1, 0]);
        assert_eq!(
            order_of(&mut HpcPriority::new(HpcFunction::Unicep), &w, 1000),
            [2, 1, 0]
        );
        assert_eq!(
            order_of(&mut HpcPriority::new(HpcFunction::F1), &w, 1000),
            [0, 1, 2]
        );
        assert!(wfp3.blocks_on_failure());
        assert_eq!(HpcPriority::new(HpcFunction::F1).name(), "f1");
    }
}
