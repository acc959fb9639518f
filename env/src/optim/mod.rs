//! Gavel's allocation linear programs (Narayanan et al., "Heterogeneity-Aware Cluster
//! Scheduling Policies for Deep Learning Workloads", OSDI'20, §4; `scheduler/policies/` of
//! `stanford-futuredata/gavel` @ [`crate::throughput::gavel::COMMIT`]): pure functions from
//! jobs' throughput rows, scale factors, GPU capacities and weights to an allocation
//! `X[m][j]`, the fraction of wall time job `m` should spend on GPU type `j`: max-min fairness
//! (aware and agnostic), max-sum throughput, and the oracles' least makespan and finish-time
//! fairness (which need remaining work), each exact or, for the first two, partitioned with
//! POP ([`Pop`]). Owns the LP building and solving (Clarabel, interior point); knows nothing
//! of clusters, traces or policies (`policy::gavel` turns allocations into rounds).
//!
//! Every allocation is feasible (Gavel's `get_base_constraints`):
//! - `0 <= X[m][j] <= 1`, and `X[m][j] = 0` where job `m` cannot run on type `j` (throughput
//!   0, or more GPUs than the type has);
//! - `sum_j X[m][j] <= 1` (a job runs on one type at a time);
//! - `sum_m scale[m] X[m][j] <= capacity[j]` (a type's GPUs are not over-committed).
//!
//! **Space sharing** (Gavel's `PolicyWithPacking`, `MaxMinFairnessPolicyWithPacking`): a
//! problem may list job [`Pair`]s, each with its two rates when the jobs share a GPU of each
//! type. A pair gets one variable per type, `Y[p][j]`, the fraction of time both run together
//! on `j` (one variable for both jobs: the pair is consistent by construction). Then job `m`'s
//! throughput is `sum_j T[m][j] X[m][j] + sum_{p ∋ m} R[p][m][j] Y[p][j]`, its time
//! `sum_j X[m][j] + sum_{p ∋ m} sum_j Y[p][j] <= 1`, and a type's GPUs count a pair's
//! scale factor once: `sum_m scale[m] X[m][j] + sum_p scale[p] Y[p][j] <= capacity[j]`.
//! `Y[p][j] = 0` unless both jobs have the same scale factor (Gavel packs only those), both
//! rates are > 0, both run alone on `j`, and the summed normalised rate `R[p][a][j] /
//! T[a][j] + R[p][b][j] / T[b][j]` is above 1: below it, the two jobs alone, each for its
//! normalised share of the pair's time, do the same work in no more GPU time and no more of
//! their own, so the variable cannot improve any of these objectives (Gavel keeps it; the
//! optimum is the same, the LP smaller).
//!
//! The solver's answer is projected back onto these constraints (rows and columns scaled
//! down where an interior-point iterate overshoots by its tolerance), so callers can rely on
//! them exactly.

#[cfg(test)]
mod tests;

use clarabel::algebra::CscMatrix;
use clarabel::solver::{
    DefaultSettingsBuilder, DefaultSolver, IPSolver, SolverStatus, SupportedConeT,
};

/// Two jobs that may share GPUs (space sharing): their rates together, per type.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    /// The two jobs (rows of the problem), distinct.
    pub jobs: [usize; 2],
    /// Per GPU type: each job's throughput while the two share, in its row's unit; `[0, 0]`
    /// where they cannot share.
    pub rates: Vec<[f64; 2]>,
}

/// One allocation problem: `m` jobs (rows) on `n` GPU types (columns).
#[derive(Debug, Clone, Copy)]
pub struct Problem<'a> {
    /// Per job, per GPU type: its throughput there, in any unit common to the row (steps/s,
    /// or speed relative to a reference GPU); 0 where it cannot run.
    pub throughputs: &'a [Vec<f64>],
    /// Per job: the GPUs it holds while it runs (Gavel's scale factor), >= 1.
    pub scale: &'a [f64],
    /// Per GPU type: how many GPUs of the type the cluster has.
    pub capacity: &'a [f64],
    /// Per job: its priority weight, > 0 (1 for all: plain fairness).
    pub weights: &'a [f64],
    /// Job pairs that may share GPUs (space sharing); empty: none.
    pub pairs: &'a [Pair],
}

/// What an allocation LP answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    /// Per job, per GPU type: the fraction of time it should run there alone.
    pub x: Vec<Vec<f64>>,
    /// Per pair of the problem, per GPU type: the fraction of time the two should share a
    /// GPU there.
    pub pairs: Vec<Vec<f64>>,
    /// The objective at `x`: the smallest normalised throughput (max-min) or the weighted
    /// sum of throughputs (max-sum).
    pub objective: f64,
}

/// Why an allocation could not be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AllocationError {
    #[error("{what} has {got} entries, expected {expected}")]
    Shape {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("{what}[{index}] = {value}: must be {rule}")]
    Value {
        what: &'static str,
        index: usize,
        value: f64,
        rule: &'static str,
    },
    #[error("the LP solver did not solve the allocation problem: {0}")]
    Solver(String),
}

/// A field's name, its values, the rule they must meet, and the rule in words.
type Check<'v> = (&'static str, &'v [f64], fn(f64) -> bool, &'static str);

impl Problem<'_> {
    fn jobs(&self) -> usize {
        self.throughputs.len()
    }
    fn types(&self) -> usize {
        self.capacity.len()
    }

    /// Checks shapes and values once.
    pub fn validate(&self) -> Result<(), AllocationError> {
        let (m, n) = (self.jobs(), self.types());
        for (what, got) in [("scale", self.scale.len()), ("weights", self.weights.len())] {
            if got != m {
                return Err(AllocationError::Shape {
                    what,
                    expected: m,
                    got,
                });
            }
        }
        if let Some(row) = self.throughputs.iter().find(|r| r.len() != n) {
            return Err(AllocationError::Shape {
                what: "a throughput row",
                expected: n,
                got: row.len(),
            });
        }
        let checks: [Check<'_>; 3] = [
            ("scale", self.scale, |v| v >= 1.0, "a finite number >= 1"),
            ("weights", self.weights, |v| v > 0.0, "a finite number > 0"),
            (
                "capacity",
                self.capacity,
                |v| v >= 0.0,
                "a finite number >= 0",
            ),
        ];
        for (what, values, ok, rule) in checks {
            if let Some((index, &value)) = values
                .iter()
                .enumerate()
                .find(|(_, v)| !(v.is_finite() && ok(**v)))
            {
                return Err(AllocationError::Value {
                    what,
                    index,
                    value,
                    rule,
                });
            }
        }
        for (index, row) in self.throughputs.iter().enumerate() {
            if let Some(&value) = row.iter().find(|v| !(v.is_finite() && **v >= 0.0)) {
                return Err(AllocationError::Value {
                    what: "throughputs",
                    index,
                    value,
                    rule: "finite and >= 0",
                });
            }
        }
        for (index, pair) in self.pairs.iter().enumerate() {
            if pair.rates.len() != n {
                return Err(AllocationError::Shape {
                    what: "a pair's rates",
                    expected: n,
                    got: pair.rates.len(),
                });
            }
            let [a, b] = pair.jobs;
            if a >= m || b >= m || a == b {
                return Err(AllocationError::Value {
                    what: "pairs",
                    index,
                    value: a.max(b) as f64,
                    rule: "two distinct job rows",
                });
            }
            if let Some(&value) = pair
                .rates
                .iter()
                .flatten()
                .find(|v| !(v.is_finite() && **v >= 0.0))
            {
                return Err(AllocationError::Value {
                    what: "pair rates",
                    index,
                    value,
                    rule: "finite and >= 0",
                });
            }
        }
        Ok(())
    }

    /// Whether job `m` may be given time on type `j`: it runs there and the type has room
    /// for all of its GPUs.
    fn usable(&self, m: usize, j: usize) -> bool {
        self.usable_within(self.capacity, m, j)
    }

    /// [`Self::usable`] with the room judged against `holds` GPUs per type (a POP
    /// sub-problem's fraction of a type still holds a gang the whole type holds).
    fn usable_within(&self, holds: &[f64], m: usize, j: usize) -> bool {
        self.throughputs[m][j] > 0.0 && self.scale[m] <= holds[j]
    }

    /// Whether pair `p` may share type `j` (see the module docs): both jobs usable there
    /// alone, of one scale factor, both pair rates > 0 and their normalised sum above 1.
    fn pair_usable_within(&self, holds: &[f64], p: usize, j: usize) -> bool {
        let pair = &self.pairs[p];
        let [a, b] = pair.jobs;
        let [ra, rb] = pair.rates[j];
        self.usable_within(holds, a, j)
            && self.usable_within(holds, b, j)
            && self.scale[a] == self.scale[b]
            && ra > 0.0
            && rb > 0.0
            && ra / self.throughputs[a][j] + rb / self.throughputs[b][j] > 1.0
    }

    /// The variables: each usable (job, type), row by row, then each usable (pair, type).
    fn variables(&self, holds: &[f64]) -> Vec<Var> {
        let singles = (0..self.jobs())
            .flat_map(|m| (0..self.types()).map(move |j| (m, j)))
            .filter(|(m, j)| self.usable_within(holds, *m, *j))
            .map(|(m, j)| Var {
                members: [(m, self.throughputs[m][j]); 2],
                len: 1,
                pair: None,
                j,
                gpus: self.scale[m],
            });
        let pairs = (0..self.pairs.len())
            .flat_map(|p| (0..self.types()).map(move |j| (p, j)))
            .filter(|(p, j)| self.pair_usable_within(holds, *p, *j))
            .map(|(p, j)| {
                let pair = &self.pairs[p];
                let [a, b] = pair.jobs;
                let [ra, rb] = pair.rates[j];
                Var {
                    members: [(a, ra), (b, rb)],
                    len: 2,
                    pair: Some(p),
                    j,
                    gpus: self.scale[a],
                }
            });
        singles.chain(pairs).collect()
    }
}

/// One LP variable: the time share of one job alone, or of a pair together, on one type.
#[derive(Debug, Clone, Copy)]
struct Var {
    /// Per member (the first `len`): the job and its throughput in this combination.
    members: [(usize, f64); 2],
    /// 1 for a job alone, 2 for a pair.
    len: usize,
    /// The pair's index in the problem; `None` for a job alone.
    pair: Option<usize>,
    /// The GPU type.
    j: usize,
    /// GPUs the combination holds (its scale factor).
    gpus: f64,
}

impl Var {
    fn members(&self) -> &[(usize, f64)] {
        &self.members[..self.len]
    }
}

/// The pairs among `jobs` (rows of `rows`, their rates alone) that gain from sharing some
/// type: `pair_rates(a, b, j)` gives the two rates together on type `j` (`None`: they cannot
/// share there), and a pair is kept when on some type where both run alone their rates
/// together, each relative to its rate alone, add up to more than 1 (below that the LP gives
/// the pair no time there: see the module docs). `relative`: each pair rate given relative
/// to the job's rate alone on that type (Gavel's agnostic view, rates alone all 1), else as
/// `pair_rates` gives it.
pub fn gaining_pairs(
    rows: &[Vec<f64>],
    jobs: &[usize],
    relative: bool,
    pair_rates: impl Fn(usize, usize, usize) -> Option<[f64; 2]>,
) -> Vec<Pair> {
    let mut pairs = Vec::new();
    for (k, &a) in jobs.iter().enumerate() {
        for &b in &jobs[k + 1..] {
            let mut gains = false;
            let rates: Vec<[f64; 2]> = (0..rows[a].len())
                .map(|j| {
                    let alone = [rows[a][j], rows[b][j]];
                    let Some(pair) =
                        pair_rates(a, b, j).filter(|_| alone[0] > 0.0 && alone[1] > 0.0)
                    else {
                        return [0.0; 2];
                    };
                    let normalised = [pair[0] / alone[0], pair[1] / alone[1]];
                    gains |= normalised[0] + normalised[1] > 1.0;
                    if relative { normalised } else { pair }
                })
                .collect();
            if gains {
                pairs.push(Pair {
                    jobs: [a, b],
                    rates,
                });
            }
        }
    }
    pairs
}

/// Each job's throughput under `x` (alone) and `pairs` (sharing), in its row's unit.
pub fn job_throughputs(p: &Problem<'_>, x: &[Vec<f64>], pairs: &[Vec<f64>]) -> Vec<f64> {
    let mut out: Vec<f64> = (0..p.jobs())
        .map(|m| (0..p.types()).map(|j| p.throughputs[m][j] * x[m][j]).sum())
        .collect();
    for (pair, y) in p.pairs.iter().zip(pairs) {
        for (j, share) in y.iter().enumerate() {
            for (k, job) in pair.jobs.iter().enumerate() {
                out[*job] += pair.rates[j][k] * share;
            }
        }
    }
    out
}

/// Each job's throughput under Gavel's equal share (`policies/proportional.py`): every job
/// gets every type's time in proportion to its GPUs, `X[m][j] = capacity[j] / sum capacity`,
/// so `sum_j T[m][j] capacity[j] / sum capacity` (types it cannot use count as 0). The
/// max-min objective normalises each job's throughput by this.
pub fn equal_share_throughputs(p: &Problem<'_>) -> Vec<f64> {
    equal_share_within(p, p.capacity)
}

fn equal_share_within(p: &Problem<'_>, holds: &[f64]) -> Vec<f64> {
    let total: f64 = p.capacity.iter().sum();
    (0..p.jobs())
        .map(|m| {
            if total <= 0.0 {
                return 0.0;
            }
            (0..p.types())
                .filter(|j| p.usable_within(holds, m, *j))
                .map(|j| p.throughputs[m][j] * p.capacity[j] / total)
                .sum()
        })
        .collect()
}

/// Gavel's heterogeneity-aware max-min fairness (`MaxMinFairnessPolicyWithPerf`):
/// maximise `min_m scale[m] sum_j T[m][j] X[m][j] / (weight[m] equal_share[m])`. The scale
/// factor in the objective gives a job on `k` GPUs `1/k` the time of a 1-GPU job of equal
/// throughput, so both get the same GPU time. Gavel's heterogeneity-agnostic variant is this
/// with every usable throughput set to 1 (see [`agnostic`]). Jobs that can run nowhere get
/// no time and are left out of the minimum.
pub fn max_min_fairness(p: &Problem<'_>) -> Result<Allocation, AllocationError> {
    p.validate()?;
    max_min_within(p, p.capacity)
}

fn max_min_within(p: &Problem<'_>, holds: &[f64]) -> Result<Allocation, AllocationError> {
    let share = equal_share_within(p, holds);
    let vars = p.variables(holds);
    let coef = |m: usize, t: f64| p.scale[m] * t / (p.weights[m] * share[m].max(f64::MIN_POSITIVE));
    solve(p, &vars, Objective::MaxMin(&coef))
}

/// Gavel's max-sum-throughput (`ThroughputSumWithPerf`): maximise
/// `sum_m weight[m] sum_j T[m][j] X[m][j]`, with throughputs normalised by the caller
/// (Lachesis passes speeds relative to each job's rate on the reference GPU, so that jobs
/// measured in different units add up).
pub fn max_sum_throughput(p: &Problem<'_>) -> Result<Allocation, AllocationError> {
    p.validate()?;
    max_sum_within(p, p.capacity)
}

fn max_sum_within(p: &Problem<'_>, holds: &[f64]) -> Result<Allocation, AllocationError> {
    let vars = p.variables(holds);
    let coef = |m: usize, t: f64| p.weights[m] * t;
    solve(p, &vars, Objective::MaxSum(&coef))
}

/// Each job's throughput in isolation, Gavel's `IsolatedPolicy`: the cluster split evenly
/// over the `m` jobs, `X[m][j] = capacity[j] / (m scale[m])`, rows scaled down to sum at most
/// 1, over the types it can use. Finish-time fairness compares against it.
pub fn isolated_throughputs(p: &Problem<'_>) -> Vec<f64> {
    let m = p.jobs() as f64;
    (0..p.jobs())
        .map(|i| {
            let x: Vec<f64> = (0..p.types())
                .map(|j| {
                    if p.usable(i, j) {
                        p.capacity[j] / (m * p.scale[i])
                    } else {
                        0.0
                    }
                })
                .collect();
            let row = x.iter().sum::<f64>().max(1.0);
            (0..p.types())
                .map(|j| p.throughputs[i][j] * x[j] / row)
                .sum()
        })
        .collect()
}

/// Gavel's makespan policy (`MinTotalDurationPolicyWithPerf`), an ORACLE: it needs each
/// job's remaining work. Minimises the time by which every job finishes, `max_m
/// remaining[m] / sum_j T[m][j] X[m][j]`, i.e. maximises `min_m sum_j T[m][j] X[m][j] /
/// remaining[m]` (Gavel bisects on the makespan with a feasibility LP; this is the same
/// optimum in one LP). `remaining` in the unit of `T` times seconds (reference-seconds when
/// `T` are speeds); `objective` is the makespan, seconds (0 when no job can run).
pub fn min_makespan(p: &Problem<'_>, remaining: &[f64]) -> Result<Allocation, AllocationError> {
    p.validate()?;
    check_per_job(
        p,
        "remaining",
        remaining,
        |v| v > 0.0,
        "a finite number > 0",
    )?;
    let vars = p.variables(p.capacity);
    let coef = |m: usize, t: f64| t / remaining[m];
    let mut a = solve(p, &vars, Objective::MaxMin(&coef))?;
    a.objective = if a.objective > 0.0 {
        1.0 / a.objective
    } else {
        0.0
    };
    Ok(a)
}

/// What finish-time fairness knows of each job: seconds since it arrived, work done and
/// work remaining (both in the unit of `T` times seconds).
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    pub elapsed_s: &'a [f64],
    pub done: &'a [f64],
    pub remaining: &'a [f64],
}

/// Gavel's finish-time fairness (Themis; `FinishTimeFairnessPolicyWithPerf`), an ORACLE: it
/// needs each job's remaining work. Minimises the largest finish-time ratio
/// `rho_m = (elapsed + remaining / sum_j T X) / ((done + remaining) / isolated)`: the job's
/// expected completion time under the allocation over its time in isolation
/// ([`isolated_throughputs`]; Gavel accumulates the isolated time of the work done round by
/// round, which is `done / isolated` at a fixed isolated rate). Convex, not linear: bisection on `rho`, each step a
/// max-min LP asking whether every job can get `remaining / (rho E_m - elapsed)`; the answer
/// is the allocation at the smallest feasible `rho` found (relative tolerance 1e-4), and
/// `objective` that `rho`.
pub fn finish_time_fairness(
    p: &Problem<'_>,
    progress: &Progress<'_>,
) -> Result<Allocation, AllocationError> {
    p.validate()?;
    let ok = |v: f64| v >= 0.0;
    check_per_job(
        p,
        "elapsed_s",
        progress.elapsed_s,
        ok,
        "a finite number >= 0",
    )?;
    check_per_job(p, "done", progress.done, ok, "a finite number >= 0")?;
    let positive = |v: f64| v > 0.0;
    check_per_job(
        p,
        "remaining",
        progress.remaining,
        positive,
        "a finite number > 0",
    )?;
    let iso = isolated_throughputs(p);
    let vars = p.variables(p.capacity);
    let runs: Vec<bool> = (0..p.jobs())
        .map(|m| (0..p.types()).any(|j| p.usable(m, j)))
        .collect();
    // Isolated completion time of each job that can run.
    let isolated_s: Vec<f64> = (0..p.jobs())
        .map(|m| (progress.done[m] + progress.remaining[m]) / iso[m].max(f64::MIN_POSITIVE))
        .collect();
    let attempt = |rho: f64| -> Result<Option<Allocation>, AllocationError> {
        let mut need = vec![0.0; p.jobs()];
        for m in (0..p.jobs()).filter(|m| runs[*m]) {
            let slack = rho * isolated_s[m] - progress.elapsed_s[m];
            if slack <= 0.0 {
                return Ok(None);
            }
            need[m] = progress.remaining[m] / slack;
        }
        let coef = |m: usize, t: f64| t / need[m];
        let a = solve(p, &vars, Objective::MaxMin(&coef))?;
        Ok((a.objective >= 1.0 - 1e-7).then_some(a))
    };
    if vars.is_empty() {
        return solve(p, &vars, Objective::MaxSum(&|_, _| 0.0));
    }
    // Below `lo` some job's deadline has already passed.
    let lo0 = (0..p.jobs())
        .filter(|m| runs[*m])
        .map(|m| progress.elapsed_s[m] / isolated_s[m])
        .fold(0.0, f64::max);
    let (mut lo, mut hi) = (lo0, lo0.max(0.5) * 2.0);
    let mut best = None;
    for _ in 0..64 {
        if let Some(a) = attempt(hi)? {
            best = Some(a);
            break;
        }
        lo = hi;
        hi *= 2.0;
    }
    let mut best = best.ok_or_else(|| {
        AllocationError::Solver("finish-time fairness: no feasible ratio below 2^64".into())
    })?;
    while hi - lo > 1e-4 * hi {
        let mid = 0.5 * (lo + hi);
        match attempt(mid)? {
            Some(a) => {
                best = a;
                hi = mid;
            }
            None => lo = mid,
        }
    }
    best.objective = hi;
    Ok(best)
}

/// Checks a per-job input of an oracle LP: one value a job, each meeting `ok`.
fn check_per_job(
    p: &Problem<'_>,
    what: &'static str,
    values: &[f64],
    ok: fn(f64) -> bool,
    rule: &'static str,
) -> Result<(), AllocationError> {
    if values.len() != p.jobs() {
        return Err(AllocationError::Shape {
            what,
            expected: p.jobs(),
            got: values.len(),
        });
    }
    match values
        .iter()
        .enumerate()
        .find(|(_, v)| !(v.is_finite() && ok(**v)))
    {
        Some((index, &value)) => Err(AllocationError::Value {
            what,
            index,
            value,
            rule,
        }),
        None => Ok(()),
    }
}

/// Which allocation LP to solve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lp {
    /// [`max_min_fairness`].
    MaxMin,
    /// [`max_sum_throughput`].
    MaxSum,
}

impl Lp {
    /// Solves `p` exactly.
    pub fn solve(self, p: &Problem<'_>) -> Result<Allocation, AllocationError> {
        match self {
            Lp::MaxMin => max_min_fairness(p),
            Lp::MaxSum => max_sum_throughput(p),
        }
    }

    fn solve_within(self, p: &Problem<'_>, holds: &[f64]) -> Result<Allocation, AllocationError> {
        match self {
            Lp::MaxMin => max_min_within(p, holds),
            Lp::MaxSum => max_sum_within(p, holds),
        }
    }

    /// This LP's objective at `x` (alone) and `pairs` (sharing) on the whole problem `p` (a
    /// POP allocation is judged by the exact problem's objective, so the two compare).
    pub fn objective(self, p: &Problem<'_>, x: &[Vec<f64>], pairs: &[Vec<f64>]) -> f64 {
        let done = job_throughputs(p, x, pairs);
        let rows = || (0..p.jobs()).filter(|m| (0..p.types()).any(|j| p.usable(*m, j)));
        match self {
            Lp::MaxMin => {
                let share = equal_share_throughputs(p);
                let least = rows()
                    .map(|m| {
                        p.scale[m] * done[m] / (p.weights[m] * share[m].max(f64::MIN_POSITIVE))
                    })
                    .fold(f64::INFINITY, f64::min);
                // No job runs anywhere: 0, as the solve answers.
                if least.is_finite() { least } else { 0.0 }
            }
            Lp::MaxSum => rows().map(|m| p.weights[m] * done[m]).sum(),
        }
    }
}

/// POP partitioning (Narayanan et al., "Solving Large-Scale Granular Resource Allocation
/// Problems Efficiently with POP", SOSP'21; `cluster_scheduling/scheduler/policies/
/// partitioned_problem.py` of `stanford-futuredata/POP`): the jobs are split at random into
/// `k` sub-problems, each given `1/k` of every GPU type, and each sub-problem is solved on
/// its own (on rayon's pool: in parallel where cores allow). The union of the sub-allocations
/// is feasible for the whole problem (each row is one sub-problem's row; each type's `k`
/// shares add up to its capacity). A pair is kept where both its jobs fall in one
/// sub-problem, and dropped (no shared time) otherwise.
///
/// Two departures from POP's code, both to keep the answer close to the exact one: by
/// default jobs are split [`Split::Stratified`], so that each sub-problem is a near copy of
/// the whole (POP draws each job's sub-problem at random, [`Split::Random`], so sizes and
/// mixes vary, and the worst sub-problem sets the max-min objective; `lachesis bench lp`
/// prints both); and a type's share is `capacity / k`, fractional (POP takes
/// `capacity // k`, which on Gavel's 36 GPUs a type and `k = 8` throws away 4 GPUs of each:
/// time fractions need no whole GPUs). A gang fits a sub-problem's share when it fits the
/// whole type. With `k <= 1`, or no more jobs than `k`, the exact problem is solved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pop {
    /// Sub-problems.
    pub k: usize,
    /// Seed of the random split.
    pub seed: u64,
    /// How jobs are split.
    pub split: Split,
}

/// How [`Pop`] splits the jobs into sub-problems.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Split {
    /// Ordered by (GPUs, weight, speeds relative to the job's fastest type), ties in a seeded
    /// random order, then dealt round-robin: sizes differ by at most one job, mixes match.
    #[default]
    Stratified,
    /// Each job to a sub-problem drawn uniformly at random (POP's code).
    Random,
}

impl Split {
    /// The jobs of each of the `k` sub-problems.
    fn groups(self, p: &Problem<'_>, k: usize, seed: u64) -> Vec<Vec<usize>> {
        use rand::seq::SliceRandom;
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let m = p.jobs();
        if self == Split::Random {
            let mut groups = vec![Vec::new(); k];
            for i in 0..m {
                groups[rng.random_range(0..k)].push(i);
            }
            return groups;
        }
        let mut order: Vec<usize> = (0..m).collect();
        order.shuffle(&mut rng);
        // Similar jobs next to each other (a stable sort keeps the shuffle in ties), then
        // dealt round-robin: every sub-problem is a near copy of the whole.
        let key = |i: usize| {
            let top = p.throughputs[i].iter().copied().fold(0.0, f64::max);
            let speeds = p.throughputs[i]
                .iter()
                .map(move |t| t / top.max(f64::MIN_POSITIVE));
            [p.scale[i], p.weights[i]].into_iter().chain(speeds)
        };
        order.sort_by(|a, b| {
            key(*a)
                .zip(key(*b))
                .map(|(x, y)| x.total_cmp(&y))
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        (0..k)
            .map(|g| order.iter().skip(g).step_by(k).copied().collect())
            .collect()
    }
}

impl Pop {
    /// `lp` on `p`, partitioned; see the type's docs.
    pub fn solve(self, lp: Lp, p: &Problem<'_>) -> Result<Allocation, AllocationError> {
        use rayon::prelude::*;
        p.validate()?;
        let m = p.jobs();
        if self.k <= 1 || m <= self.k {
            return lp.solve(p);
        }
        let groups = self.split.groups(p, self.k, self.seed);
        let share: Vec<f64> = p.capacity.iter().map(|c| c / self.k as f64).collect();
        // Per job: its sub-problem and its row there.
        let mut slot = vec![(0, 0); m];
        for (g, jobs) in groups.iter().enumerate() {
            for (row, i) in jobs.iter().enumerate() {
                slot[*i] = (g, row);
            }
        }
        // Per sub-problem: its pairs, each with its index in `p.pairs`.
        let mut sub_pairs: Vec<Vec<(usize, Pair)>> = vec![Vec::new(); groups.len()];
        for (index, pair) in p.pairs.iter().enumerate() {
            let [(ga, a), (gb, b)] = pair.jobs.map(|i| slot[i]);
            if ga == gb {
                let jobs = [a, b];
                let rates = pair.rates.clone();
                sub_pairs[ga].push((index, Pair { jobs, rates }));
            }
        }
        let parts: Vec<Result<Allocation, AllocationError>> = groups
            .par_iter()
            .zip(&sub_pairs)
            .map(|(jobs, pairs)| {
                let pick = |v: &[f64]| jobs.iter().map(|i| v[*i]).collect::<Vec<f64>>();
                let throughputs: Vec<Vec<f64>> =
                    jobs.iter().map(|i| p.throughputs[*i].clone()).collect();
                let (scale, weights) = (pick(p.scale), pick(p.weights));
                let pairs: Vec<Pair> = pairs.iter().map(|(_, pair)| pair.clone()).collect();
                let sub = Problem {
                    throughputs: &throughputs,
                    scale: &scale,
                    capacity: &share,
                    weights: &weights,
                    pairs: &pairs,
                };
                lp.solve_within(&sub, p.capacity)
            })
            .collect();
        let mut x = vec![vec![0.0; p.types()]; m];
        let mut y = vec![vec![0.0; p.types()]; p.pairs.len()];
        for ((jobs, pairs), part) in groups.iter().zip(&sub_pairs).zip(parts) {
            let part = part?;
            for (i, row) in jobs.iter().zip(part.x) {
                x[*i] = row;
            }
            for ((index, _), row) in pairs.iter().zip(part.pairs) {
                y[*index] = row;
            }
        }
        let objective = lp.objective(p, &x, &y);
        Ok(Allocation {
            x,
            pairs: y,
            objective,
        })
    }
}

/// `throughputs` with every positive entry set to 1: Gavel's heterogeneity-agnostic view
/// (`MaxMinFairnessPolicy` sets all to 1.0; Lachesis keeps the zeros, where a job cannot run
/// at all, so that the agnostic policy is not sent where the simulator refuses it).
pub fn agnostic(throughputs: &[Vec<f64>]) -> Vec<Vec<f64>> {
    throughputs
        .iter()
        .map(|row| {
            row.iter()
                .map(|t| if *t > 0.0 { 1.0 } else { 0.0 })
                .collect()
        })
        .collect()
}

enum Objective<'f> {
    /// Maximise the smallest `sum c(m, t) X` over jobs with a variable, `t` the job's
    /// throughput in each variable's combination.
    MaxMin(&'f dyn Fn(usize, f64) -> f64),
    /// Maximise `sum c(m, t) X` over every job of every variable.
    MaxSum(&'f dyn Fn(usize, f64) -> f64),
}

/// Builds and solves the LP over `vars` (plus `t` for max-min) in Clarabel's form: minimise
/// `q'x` subject to `A x + s = b`, `s >= 0`.
fn solve(
    p: &Problem<'_>,
    vars: &[Var],
    objective: Objective<'_>,
) -> Result<Allocation, AllocationError> {
    let (m, n) = (p.jobs(), p.types());
    let mut x = vec![vec![0.0; n]; m];
    let mut y = vec![vec![0.0; n]; p.pairs.len()];
    if vars.is_empty() {
        return Ok(Allocation {
            x,
            pairs: y,
            objective: 0.0,
        });
    }
    let nv = vars.len();
    let with_t = matches!(objective, Objective::MaxMin(_));
    let cols = nv + usize::from(with_t);
    let mut q = vec![0.0; cols];
    let (mut rows, mut cols_of, mut vals, mut b) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut push = |row: usize, col: usize, v: f64| {
        rows.push(row);
        cols_of.push(col);
        vals.push(v);
    };
    let mut row = 0;
    // x >= 0.
    for v in 0..nv {
        push(row, v, -1.0);
        b.push(0.0);
        row += 1;
    }
    // Per job: the time of every combination with it <= 1 (and, for max-min,
    // t - sum c X <= 0).
    let mut job_vars: Vec<Vec<usize>> = vec![Vec::new(); m];
    let mut type_vars: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (v, var) in vars.iter().enumerate() {
        for (mi, _) in var.members() {
            job_vars[*mi].push(v);
        }
        type_vars[var.j].push(v);
    }
    for vs in job_vars.iter().filter(|vs| !vs.is_empty()) {
        for v in vs {
            push(row, *v, 1.0);
        }
        b.push(1.0);
        row += 1;
    }
    // Per type: the GPUs of every combination there <= capacity.
    for (j, vs) in type_vars.iter().enumerate() {
        if vs.is_empty() {
            continue;
        }
        for v in vs {
            push(row, *v, vars[*v].gpus);
        }
        b.push(p.capacity[j]);
        row += 1;
    }
    // Job `mi`'s throughput in variable `v`.
    let rate = |mi: usize, v: usize| {
        vars[v]
            .members()
            .iter()
            .find(|(job, _)| *job == mi)
            .map_or(0.0, |(_, t)| *t)
    };
    match objective {
        Objective::MaxMin(c) => {
            q[nv] = -1.0;
            for (mi, vs) in job_vars.iter().enumerate().filter(|(_, vs)| !vs.is_empty()) {
                push(row, nv, 1.0);
                for v in vs {
                    push(row, *v, -c(mi, rate(mi, *v)));
                }
                b.push(0.0);
                row += 1;
            }
        }
        Objective::MaxSum(c) => {
            for (v, var) in vars.iter().enumerate() {
                q[v] = -var.members().iter().map(|(mi, t)| c(*mi, *t)).sum::<f64>();
            }
        }
    }
    let a = CscMatrix::new_from_triplets(row, cols, rows, cols_of, vals);
    let pm = CscMatrix::<f64>::zeros((cols, cols));
    let settings = DefaultSettingsBuilder::default()
        .verbose(false)
        .max_iter(200)
        .build()
        .map_err(|e| AllocationError::Solver(e.to_string()))?;
    let cones = [SupportedConeT::NonnegativeConeT(row)];
    let mut solver = DefaultSolver::new(&pm, &q, &a, &b, &cones, settings)
        .map_err(|e| AllocationError::Solver(e.to_string()))?;
    solver.solve();
    let status = solver.solution.status;
    if !matches!(status, SolverStatus::Solved | SolverStatus::AlmostSolved) {
        return Err(AllocationError::Solver(format!("status {status:?}")));
    }
    for (v, var) in vars.iter().enumerate() {
        let value = solver.solution.x[v].clamp(0.0, 1.0);
        match var.pair {
            Some(pi) => y[pi][var.j] = value,
            None => x[var.members[0].0][var.j] = value,
        }
    }
    project(p, &mut x, &mut y);
    let value = match objective {
        Objective::MaxMin(c) => job_vars
            .iter()
            .enumerate()
            .filter(|(_, vs)| !vs.is_empty())
            .map(|(mi, vs)| {
                vs.iter()
                    .map(|v| c(mi, rate(mi, *v)) * at(&x, &y, &vars[*v]))
                    .sum::<f64>()
            })
            .fold(f64::INFINITY, f64::min),
        Objective::MaxSum(c) => vars
            .iter()
            .map(|var| {
                let share = at(&x, &y, var);
                var.members()
                    .iter()
                    .map(|(mi, t)| c(*mi, *t) * share)
                    .sum::<f64>()
            })
            .sum(),
    };
    Ok(Allocation {
        x,
        pairs: y,
        objective: value,
    })
}

/// The value of `var` in the allocation `x` (alone), `y` (pairs).
fn at(x: &[Vec<f64>], y: &[Vec<f64>], var: &Var) -> f64 {
    match var.pair {
        Some(pi) => y[pi][var.j],
        None => x[var.members[0].0][var.j],
    }
}

/// Scales rows, then columns, down to the constraints (an interior-point answer meets them
/// only to its tolerance); scaling down keeps every other constraint met. A pair's time is
/// scaled by the smaller factor of its two jobs' rows.
fn project(p: &Problem<'_>, x: &mut [Vec<f64>], y: &mut [Vec<f64>]) {
    let mut time: Vec<f64> = x.iter().map(|row| row.iter().sum()).collect();
    for (pair, row) in p.pairs.iter().zip(y.iter()) {
        let total: f64 = row.iter().sum();
        for job in pair.jobs {
            time[job] += total;
        }
    }
    let factor: Vec<f64> = time
        .iter()
        .map(|t| if *t > 1.0 { 1.0 / t } else { 1.0 })
        .collect();
    for (row, f) in x.iter_mut().zip(&factor) {
        row.iter_mut().for_each(|v| *v *= f);
    }
    for (pair, row) in p.pairs.iter().zip(y.iter_mut()) {
        let f = factor[pair.jobs[0]].min(factor[pair.jobs[1]]);
        row.iter_mut().for_each(|v| *v *= f);
    }
    for j in 0..p.types() {
        let alone: f64 = x.iter().zip(p.scale).map(|(row, s)| row[j] * s).sum();
        let shared: f64 = p
            .pairs
            .iter()
            .zip(y.iter())
            .map(|(pair, row)| row[j] * p.scale[pair.jobs[0]])
            .sum();
        let used = alone + shared;
        if used > p.capacity[j] && used > 0.0 {
            let f = p.capacity[j] / used;
            x.iter_mut().for_each(|row| row[j] *= f);
            y.iter_mut().for_each(|row| row[j] *= f);
        }
    }
}
