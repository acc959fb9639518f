//! The fitted arrival process: a weekly rhythm, batches, and busy and quiet spells.
//! Works on submit times in seconds only; knows nothing of what the jobs ask for.
//!
//! The model, in three layers:
//! 1. **Batches.** A job submitted at most [`BATCH_GAP_S`] after the previous one joins its
//!    batch (a sweep, a script, a person re-submitting); the batch size and the gaps within a
//!    batch are drawn from their empirical distributions, in real seconds.
//! 2. **Rhythm.** Batches start in *operational time*: real time stretched by a relative
//!    rate over the 168 hours of the week, `tau(t) = integral of rate(hour_of_week(s)) ds`
//!    (rate mean 1 over the week, so a week of operational time is a week of real time). The
//!    hour of the week counts from the trace's own origin (time 0): traces with relative
//!    times do not say which weekday that is, so the "week" is the trace's own 7-day cycle,
//!    and the synthetic week has the same phase. The rate of hour-of-week `h` is the trace's
//!    jobs in that hour over the hours of it the trace covers, shrunk toward an
//!    hour-of-day x day-of-week product (worth [`PRIOR_HOURS`] hours of data) so short traces
//!    get no empty hours, and floored at [`MIN_RATE`] of the mean. It is estimated from jobs,
//!    not batches, so the synthetic jobs-per-hour profile is the trace's (batch size is taken
//!    to be independent of the hour).
//! 3. **Spells.** A batch closes [`BATCH_GAP_S`] after its last job. The operational time
//!    from there to the next batch's first job (so a real gap between batches always exceeds
//!    the batch gap, however busy the hour) is a Markov-modulated renewal process with two
//!    regimes: the gaps are split at their median into short (busy) and long (quiet) ones,
//!    each regime keeps its own gap distribution, and the next gap stays in the previous
//!    one's regime with a fitted probability (transition counts with add-one smoothing, so
//!    neither regime absorbs). This keeps the gap distribution and the clumping of busy
//!    hours that a plain Poisson process loses.

use super::FitError;
use super::dist::{Categorical, QuantileFn};
use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};

/// Hours in the modelled week.
pub const HOURS_PER_WEEK: usize = 168;
/// Largest gap between consecutive submissions of one batch, seconds.
pub const BATCH_GAP_S: f64 = 60.0;
/// Weight of the hour-of-day x day-of-week prior in an hour-of-week rate, in hours of data.
pub const PRIOR_HOURS: f64 = 2.0;
/// Floor of an hour's relative rate (fraction of the trace's mean rate).
pub const MIN_RATE: f64 = 0.02;

const HOUR_S: f64 = 3600.0;
const WEEK_S: f64 = HOURS_PER_WEEK as f64 * HOUR_S;

/// When jobs arrive; see the module docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrivalModel {
    /// Relative arrival rate in each hour of the week from the trace's origin (168 values,
    /// mean 1).
    pub hour_of_week_rate: Vec<f64>,
    /// Largest gap within a batch, seconds.
    pub batch_gap_s: f64,
    /// How many batches of each size the trace had, smallest size first.
    pub batch_sizes: Vec<BatchSize>,
    /// Real seconds between consecutive jobs of one batch; `None` when every batch is one job.
    pub within_batch_gap_s: Option<QuantileFn>,
    /// Operational seconds from a batch's close (`batch_gap_s` after its last job) to the next
    /// batch: `[short, long]` regimes.
    pub regimes: [GapRegime; 2],
}

/// Batches of one size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchSize {
    pub jobs: u32,
    pub batches: u64,
}

/// One regime of the gaps between batches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GapRegime {
    /// Gaps of the trace in this regime.
    pub gaps: u64,
    /// Probability that the next gap is in this regime too.
    pub stay: f64,
    /// Operational seconds.
    pub gap_s: QuantileFn,
}

/// For each job (sorted by submit time), whether it starts a new batch.
pub(super) fn batch_starts(submits_s: &[f64]) -> Vec<bool> {
    let mut starts = Vec::with_capacity(submits_s.len());
    let mut previous: Option<f64> = None;
    for &t in submits_s {
        starts.push(previous.is_none_or(|p| t - p > BATCH_GAP_S));
        previous = Some(t);
    }
    starts
}

impl ArrivalModel {
    /// Fits the model to sorted submit times (seconds from the trace's origin) and their
    /// batch starts (from [`batch_starts`]).
    pub(super) fn fit(submits_s: &[f64], starts: &[bool]) -> Result<ArrivalModel, FitError> {
        let batches = starts.iter().filter(|s| **s).count();
        if batches < 2 {
            return Err(FitError::OneBatch {
                jobs: submits_s.len(),
                gap_s: BATCH_GAP_S,
            });
        }
        let hour_of_week_rate = hour_of_week_rate(submits_s);
        let clock = Clock::new(&hour_of_week_rate);
        let mut sizes: Vec<u64> = Vec::new();
        let (mut within, mut between) = (Vec::new(), Vec::new());
        for (i, &t) in submits_s.iter().enumerate() {
            if starts[i] {
                if i > 0 {
                    let closed = submits_s[i - 1] + BATCH_GAP_S;
                    between.push(clock.op_at(t) - clock.op_at(closed));
                }
                sizes.push(0);
            } else {
                within.push(t - submits_s[i - 1]);
            }
            *sizes.last_mut().expect("the first job starts a batch") += 1;
        }
        Ok(ArrivalModel {
            hour_of_week_rate,
            batch_gap_s: BATCH_GAP_S,
            batch_sizes: size_histogram(sizes),
            within_batch_gap_s: QuantileFn::from_sample(within),
            regimes: fit_regimes(&between),
        })
    }

    /// Checks a loaded model; the message names the field.
    pub(super) fn validate(&self) -> Result<(), String> {
        let rates = &self.hour_of_week_rate;
        if rates.len() != HOURS_PER_WEEK {
            return Err(format!(
                "arrivals.hour_of_week_rate has {} values, expected {HOURS_PER_WEEK}",
                rates.len()
            ));
        }
        // Rates average 1, so none exceeds the hours of the week.
        if rates
            .iter()
            .any(|r| !(*r > 0.0 && *r <= HOURS_PER_WEEK as f64))
        {
            return Err("arrivals.hour_of_week_rate: every rate must be in (0, 168]".into());
        }
        if !(0.0..=86_400.0).contains(&self.batch_gap_s) {
            return Err("arrivals.batch_gap_s must be 0..=86400 seconds".into());
        }
        if self.batch_sizes.iter().any(|b| b.jobs == 0) || self.size_dist().is_none() {
            return Err("arrivals.batch_sizes: need sizes >= 1 with some batches".into());
        }
        let multi = self.batch_sizes.iter().any(|b| b.jobs > 1 && b.batches > 0);
        match &self.within_batch_gap_s {
            Some(q) => q
                .validate()
                .map_err(|e| format!("arrivals.within_batch_gap_s: {e}"))?,
            None if multi => {
                return Err(
                    "arrivals.within_batch_gap_s is missing but batches have several \
                            jobs"
                        .into(),
                );
            }
            None => {}
        }
        for (i, r) in self.regimes.iter().enumerate() {
            if !(r.stay.is_finite() && r.stay > 0.0 && r.stay < 1.0) {
                return Err(format!("arrivals.regimes[{i}].stay must be in (0, 1)"));
            }
            r.gap_s
                .validate()
                .map_err(|e| format!("arrivals.regimes[{i}].gap_s: {e}"))?;
        }
        Ok(())
    }

    fn size_dist(&self) -> Option<Categorical> {
        Categorical::new(self.batch_sizes.iter().map(|b| b.batches))
    }

    /// Jobs per day in the long run, roughly: mean batch size over the mean time per batch
    /// (the operational week equals the real week, so operational gaps average out to real
    /// ones, though not exactly: batches start more often in busy hours).
    pub fn jobs_per_day(&self) -> f64 {
        let batches: u64 = self.batch_sizes.iter().map(|b| b.batches).sum();
        let jobs: u64 = self
            .batch_sizes
            .iter()
            .map(|b| u64::from(b.jobs) * b.batches)
            .sum();
        let mean_size = jobs as f64 / batches.max(1) as f64;
        let within = self
            .within_batch_gap_s
            .as_ref()
            .map_or(0.0, QuantileFn::mean);
        let [short, long] = &self.regimes;
        let (leave_short, leave_long) = (1.0 - short.stay, 1.0 - long.stay);
        let p_short = leave_long / (leave_short + leave_long);
        let between = p_short * short.gap_s.mean() + (1.0 - p_short) * long.gap_s.mean();
        86_400.0 * mean_size / (self.batch_gap_s + between + (mean_size - 1.0) * within)
    }

    /// Submit times (seconds from the origin) starting at `start_s`, with batch starts.
    pub(super) fn sampler(&self, start_s: f64) -> ArrivalSampler<'_> {
        ArrivalSampler {
            model: self,
            clock: Clock::new(&self.hour_of_week_rate),
            sizes: self
                .size_dist()
                .expect("validated: batch sizes have a total"),
            now_s: start_s,
            left_in_batch: 0,
            regime: None,
        }
    }
}

/// Counts of each batch size, smallest first.
fn size_histogram(mut sizes: Vec<u64>) -> Vec<BatchSize> {
    sizes.sort_unstable();
    let mut out: Vec<BatchSize> = Vec::new();
    for s in sizes {
        let jobs = u32::try_from(s).unwrap_or(u32::MAX);
        match out.last_mut() {
            Some(last) if last.jobs == jobs => last.batches += 1,
            _ => out.push(BatchSize { jobs, batches: 1 }),
        }
    }
    out
}

/// Splits the gaps (in order) at their median into short and long regimes.
fn fit_regimes(gaps: &[f64]) -> [GapRegime; 2] {
    let mut order: Vec<usize> = (0..gaps.len()).collect();
    order.sort_by(|&a, &b| gaps[a].total_cmp(&gaps[b]).then(a.cmp(&b)));
    let mut regime = vec![0usize; gaps.len()];
    for &i in &order[gaps.len() / 2..] {
        regime[i] = 1;
    }
    let mut moves = [[0u64; 2]; 2];
    for w in regime.windows(2) {
        moves[w[0]][w[1]] += 1;
    }
    let all = QuantileFn::from_sample(gaps.to_vec()).expect("at least one gap between batches");
    let fit = |r: usize| {
        let sample: Vec<f64> = (0..gaps.len())
            .filter(|&i| regime[i] == r)
            .map(|i| gaps[i])
            .collect();
        GapRegime {
            gaps: sample.len() as u64,
            stay: (moves[r][r] as f64 + 1.0) / ((moves[r][0] + moves[r][1]) as f64 + 2.0),
            // With a single gap, the short regime is empty: both draw from that one gap.
            gap_s: QuantileFn::from_sample(sample).unwrap_or_else(|| all.clone()),
        }
    };
    [fit(0), fit(1)]
}

/// Relative rates of the hours of the week (mean 1); see the module docs.
fn hour_of_week_rate(submits_s: &[f64]) -> Vec<f64> {
    let (first, last) = (submits_s[0], submits_s[submits_s.len() - 1]);
    let mut jobs = [0f64; HOURS_PER_WEEK];
    for &t in submits_s {
        jobs[hour_of_week(t)] += 1.0;
    }
    // Hours of each hour-of-week that [first, last] covers.
    let mut covered = [0f64; HOURS_PER_WEEK];
    let mut hour = (first / HOUR_S).floor();
    while hour * HOUR_S <= last {
        let overlap = last.min((hour + 1.0) * HOUR_S) - first.max(hour * HOUR_S);
        covered[hour as usize % HOURS_PER_WEEK] += overlap.max(0.0) / HOUR_S;
        hour += 1.0;
    }
    let mean_rate = submits_s.len() as f64 / covered.iter().sum::<f64>().max(1e-9);
    // Relative rate of each hour of the day (24) and day of the week (7) from their totals.
    let factor = |key: &dyn Fn(usize) -> usize, n: usize| {
        let (mut j, mut c) = (vec![0.0; n], vec![0.0; n]);
        for h in 0..HOURS_PER_WEEK {
            j[key(h)] += jobs[h];
            c[key(h)] += covered[h];
        }
        (0..n)
            .map(|k| {
                if c[k] > 0.0 {
                    j[k] / c[k] / mean_rate
                } else {
                    1.0
                }
            })
            .collect::<Vec<f64>>()
    };
    let by_hour = factor(&|h| h % 24, 24);
    let by_day = factor(&|h| h / 24, 7);
    let rates: Vec<f64> = (0..HOURS_PER_WEEK)
        .map(|h| {
            let prior = mean_rate * by_hour[h % 24] * by_day[h / 24];
            let rate = (jobs[h] + PRIOR_HOURS * prior) / (covered[h] + PRIOR_HOURS);
            rate.max(MIN_RATE * mean_rate)
        })
        .collect();
    let mean = rates.iter().sum::<f64>() / HOURS_PER_WEEK as f64;
    rates.into_iter().map(|r| r / mean).collect()
}

/// Hour of the week (0..168) of `t_s` seconds from the origin.
pub(super) fn hour_of_week(t_s: f64) -> usize {
    (t_s.max(0.0) / HOUR_S) as usize % HOURS_PER_WEEK
}

/// The map between real and operational time of a weekly rate profile.
#[derive(Debug, Clone)]
struct Clock {
    rate: Vec<f64>,
    /// Operational seconds from the start of the week to the start of each hour (169 values).
    at_hour: Vec<f64>,
}

impl Clock {
    fn new(rate: &[f64]) -> Clock {
        let mut at_hour = vec![0.0];
        for r in rate {
            at_hour.push(at_hour.last().expect("starts with 0") + r * HOUR_S);
        }
        Clock {
            rate: rate.to_vec(),
            at_hour,
        }
    }

    fn week_op_s(&self) -> f64 {
        self.at_hour[HOURS_PER_WEEK]
    }

    fn op_at(&self, t_s: f64) -> f64 {
        let weeks = (t_s / WEEK_S).floor();
        let into = t_s - weeks * WEEK_S;
        let h = ((into / HOUR_S) as usize).min(HOURS_PER_WEEK - 1);
        weeks * self.week_op_s() + self.at_hour[h] + (into - h as f64 * HOUR_S) * self.rate[h]
    }

    fn real_at(&self, op_s: f64) -> f64 {
        let weeks = (op_s / self.week_op_s()).floor();
        let into = op_s - weeks * self.week_op_s();
        let h = (self.at_hour.partition_point(|&a| a <= into) - 1).min(HOURS_PER_WEEK - 1);
        weeks * WEEK_S + h as f64 * HOUR_S + (into - self.at_hour[h]) / self.rate[h]
    }
}

/// Draws submit times one by one; see [`ArrivalModel::sampler`].
#[derive(Debug)]
pub(super) struct ArrivalSampler<'m> {
    model: &'m ArrivalModel,
    clock: Clock,
    sizes: Categorical,
    now_s: f64,
    left_in_batch: u64,
    /// Regime of the last gap between batches; `None` before the first batch.
    regime: Option<usize>,
}

impl ArrivalSampler<'_> {
    /// The next submit time, seconds, and whether it starts a batch.
    pub(super) fn next<R: Rng + ?Sized>(&mut self, rng: &mut R) -> (f64, bool) {
        let starts = self.left_in_batch == 0;
        if starts {
            let model = self.model;
            if let Some(regime) = self.regime {
                let next = if rng.random::<f64>() < model.regimes[regime].stay {
                    regime
                } else {
                    1 - regime
                };
                let closed = self.now_s + model.batch_gap_s;
                let excess = model.regimes[next].gap_s.sample(rng);
                self.now_s = self.clock.real_at(self.clock.op_at(closed) + excess);
                self.regime = Some(next);
            } else {
                // The first batch: the regime before it is drawn from the stationary mix.
                let leave = model.regimes.each_ref().map(|r| 1.0 - r.stay);
                let p_short = leave[1] / (leave[0] + leave[1]);
                self.regime = Some(usize::from(rng.random::<f64>() >= p_short));
            }
            self.left_in_batch = u64::from(model.batch_sizes[self.sizes.sample(rng)].jobs);
        } else if let Some(q) = &self.model.within_batch_gap_s {
            self.now_s += q.sample(rng);
        }
        self.left_in_batch -= 1;
        (self.now_s, starts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_round_trips_and_follows_the_rate() {
        // Hour 0 of the week twice as busy as the rest: it takes 2 h of operational time.
        let mut rate = vec![1.0; HOURS_PER_WEEK];
        rate[0] = 2.0;
        let clock = Clock::new(&rate);
        assert_eq!(clock.op_at(1800.0), 3600.0);
        assert_eq!(clock.op_at(3600.0 + 10.0), 7200.0 + 10.0);
        // A week later: one operational week (169 h) further on.
        assert_eq!(clock.op_at(WEEK_S + 1800.0), 169.0 * HOUR_S + 3600.0);
        for t in [0.0, 1.0, 1799.0, 3600.0, 5e5, 3.3e6, 1e7] {
            let back = clock.real_at(clock.op_at(t));
            assert!((back - t).abs() < 1e-6, "{t} -> {back}");
        }
    }

    #[test]
    fn batches_split_at_the_gap() {
        let starts = batch_starts(&[0.0, 0.0, 60.0, 121.0, 500.0]);
        // 0 -> 0 (same second) and 0 -> 60 (exactly the gap) join; 60 -> 121 does not.
        assert_eq!(starts, [true, false, false, true, true]);
        let sizes = size_histogram(vec![3, 1, 1]);
        assert_eq!(
            sizes,
            [
                BatchSize {
                    jobs: 1,
                    batches: 2
                },
                BatchSize {
                    jobs: 3,
                    batches: 1
                }
            ]
        );
    }

    #[test]
    fn regimes_keep_the_clumping_of_gaps() {
        // Gaps alternate in runs of 10 short (1 s) and 10 long (1000 s): 100 gaps, 9 of each
        // 10 moves stay. With add-one smoothing a regime stays (45 + 1) / (49 + 2) or so.
        let gaps: Vec<f64> = (0..100)
            .map(|i| if (i / 10) % 2 == 0 { 1.0 } else { 1000.0 })
            .collect();
        let [short, long] = fit_regimes(&gaps);
        assert_eq!((short.gaps, long.gaps), (50, 50));
        assert!(short.stay > 0.85 && long.stay > 0.85, "{short:?} {long:?}");
        assert!((short.gap_s.at(0.5) - 1.0).abs() < 1e-9);
        assert!((long.gap_s.at(0.5) - 1000.0).abs() < 1e-9);
    }

    #[test]
    fn the_rate_profile_follows_the_hours_with_jobs() {
        // Four weeks; hour 10 of each day gets 9 jobs, every other hour 1.
        let mut submits = Vec::new();
        for hour in 0..4 * HOURS_PER_WEEK {
            let n = if hour % 24 == 10 { 9 } else { 1 };
            submits.extend((0..n).map(|i| hour as f64 * HOUR_S + 60.0 * i as f64 + 1.0));
        }
        let rate = hour_of_week_rate(&submits);
        assert!((rate.iter().sum::<f64>() - HOURS_PER_WEEK as f64).abs() < 1e-9);
        // Mean jobs per hour is (23 + 9) / 24 = 4/3, so hour 10 is at 9 / (4/3) = 6.75 and
        // the others at 0.75 (the prior agrees with the data here: no shrinkage). Not exactly:
        // the trace ends 1 s into its last hour, which counts its job over 1 s of cover.
        assert!((rate[10] - 6.75).abs() < 0.03, "{}", rate[10]);
        assert!((rate[11] - 0.75).abs() < 0.01, "{}", rate[11]);
    }
}
