//! Cutting traces into training, validation and test sets without leaking the future into the
//! past, and random windows for training episodes.
//!
//! `split_by_time` cuts at submit times: every training job is submitted before every
//! validation job, and every validation job before every test job (ties at a cut go to the
//! later set, so no instant is shared). Sizes follow the given fractions of jobs.
//! `random_windows` draws windows of `n` consecutive jobs (by submit order) from one set, each
//! given as the `[from, to)` submit-time interval that `Trace::window` and `--window` take.

use crate::job::Trace;
use crate::units::SimTime;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SplitError {
    #[error(
        "fractions must be >= 0 and sum to at most 1, got train {train}, validation {validation}"
    )]
    Fractions { train: f64, validation: f64 },
    #[error("windows of {want} jobs: the trace has only {have}")]
    TooShort { want: usize, have: usize },
    #[error("a window needs at least one job")]
    EmptyWindow,
}

/// The three time-ordered parts of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    pub train: Trace,
    pub validation: Trace,
    pub test: Trace,
    /// Submit time where validation starts and where test starts.
    pub cuts: [SimTime; 2],
}

/// Splits `trace` by submit time: the first `train` fraction of jobs, then `validation`, the
/// rest for test. A cut that falls inside a group of jobs submitted at the same instant moves
/// forward past the group.
pub fn split_by_time(trace: &Trace, train: f64, validation: f64) -> Result<Split, SplitError> {
    let ok = |f: f64| f.is_finite() && (0.0..=1.0).contains(&f);
    if !ok(train) || !ok(validation) || train + validation > 1.0 + 1e-12 {
        return Err(SplitError::Fractions { train, validation });
    }
    let jobs = trace.jobs();
    let cut_at = |fraction: f64| -> SimTime {
        let i = ((fraction * jobs.len() as f64).round() as usize).min(jobs.len());
        jobs.get(i).map_or(SimTime::MAX, |j| j.submit)
    };
    let first_cut = cut_at(train);
    let second_cut = cut_at(train + validation).max(first_cut);
    Ok(Split {
        train: trace.window(SimTime::ZERO, first_cut),
        validation: trace.window(first_cut, second_cut),
        test: trace.window(second_cut, SimTime::MAX),
        cuts: [first_cut, second_cut],
    })
}

/// One episode's window: `[from_s, to_s)` in trace seconds, and how many jobs it holds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EpisodeWindow {
    pub from_s: f64,
    pub to_s: f64,
    pub jobs: usize,
}

/// `count` windows of about `n` consecutive jobs each, starting at random jobs (seeded).
/// A window ends just after its `n`-th job's submit instant, so jobs sharing that instant are
/// included too.
pub fn random_windows(
    trace: &Trace,
    n: usize,
    count: usize,
    seed: u64,
) -> Result<Vec<EpisodeWindow>, SplitError> {
    if n == 0 {
        return Err(SplitError::EmptyWindow);
    }
    let jobs = trace.jobs();
    if jobs.len() < n {
        return Err(SplitError::TooShort {
            want: n,
            have: jobs.len(),
        });
    }
    let mut rng = StdRng::seed_from_u64(seed);
    Ok((0..count)
        .map(|_| {
            let start = rng.random_range(0..=jobs.len() - n);
            let from = jobs[start].submit;
            let to = jobs[start + n - 1].submit.saturating_add(SimTime(1));
            let held = jobs[start..].iter().take_while(|j| j.submit < to).count();
            EpisodeWindow {
                from_s: from.secs_f64(),
                to_s: to.secs_f64(),
                jobs: held,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::TaskRequest;
    use crate::job::tests::job;

    fn trace(submits: &[u64]) -> Trace {
        let jobs = submits
            .iter()
            .enumerate()
            .map(|(i, s)| job(&format!("j{i}"), *s, TaskRequest::whole(1, 0, 0)))
            .collect();
        Trace::new("t", jobs, vec![SimTime(1); submits.len()], vec!["d".into()]).unwrap()
    }

    #[test]
    fn split_is_time_ordered_and_disjoint() {
        let t = trace(&(0..100).collect::<Vec<_>>());
        let s = split_by_time(&t, 0.7, 0.15).unwrap();
        assert_eq!(
            (s.train.len(), s.validation.len(), s.test.len()),
            (70, 15, 15)
        );
        let last_train = s.train.jobs().last().unwrap().submit;
        assert!(last_train < s.validation.jobs()[0].submit);
        assert!(s.validation.jobs().last().unwrap().submit < s.test.jobs()[0].submit);
    }

    #[test]
    fn ties_at_a_cut_go_to_the_later_set() {
        // Jobs 2..=5 share t=2; a cut at job 3 moves to t=2's start: train keeps jobs 0 and 1.
        let t = trace(&[0, 1, 2, 2, 2, 2, 3, 4]);
        let s = split_by_time(&t, 3.0 / 8.0, 0.5).unwrap();
        assert_eq!(s.train.len(), 2);
        assert_eq!(s.validation.len() + s.test.len(), 6);
        assert!(split_by_time(&t, 0.8, 0.3).is_err());
        assert!(split_by_time(&t, f64::NAN, 0.3).is_err());
    }

    #[test]
    fn windows_hold_n_jobs_and_repeat_by_seed() {
        let t = trace(&(0..50).map(|i| i * 10).collect::<Vec<_>>());
        let w = random_windows(&t, 5, 4, 9).unwrap();
        assert_eq!(w, random_windows(&t, 5, 4, 9).unwrap());
        for e in &w {
            let win = t.window(
                SimTime::from_secs_f64(e.from_s).unwrap(),
                SimTime::from_secs_f64(e.to_s).unwrap(),
            );
            assert_eq!(win.len(), 5);
            assert_eq!(e.jobs, 5);
        }
        assert!(random_windows(&t, 51, 1, 0).is_err());
    }
}
