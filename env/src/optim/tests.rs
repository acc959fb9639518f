use super::*;
use proptest::prelude::*;

const TOL: f64 = 1e-4;

/// Throughputs, scale factors, capacities, and the allocation wanted.
type Case = (Vec<Vec<f64>>, Vec<f64>, Vec<f64>, Vec<Vec<f64>>);

fn problem<'a>(
    throughputs: &'a [Vec<f64>],
    scale: &'a [f64],
    capacity: &'a [f64],
    weights: &'a [f64],
) -> Problem<'a> {
    Problem {
        throughputs,
        scale,
        capacity,
        weights,
        pairs: &[],
    }
}

fn close(got: &[Vec<f64>], want: &[Vec<f64>]) -> bool {
    got.iter()
        .flatten()
        .zip(want.iter().flatten())
        .all(|(g, w)| (g - w).abs() < TOL)
}

fn row_sums(x: &[Vec<f64>]) -> Vec<f64> {
    x.iter().map(|r| r.iter().sum()).collect()
}

/// Every allocation constraint of the module docs, to a float's rounding.
fn assert_feasible(p: &Problem<'_>, a: &Allocation) {
    assert_eq!(a.x.len(), p.throughputs.len());
    for (m, row) in a.x.iter().enumerate() {
        assert_eq!(row.len(), p.capacity.len());
        for (j, v) in row.iter().enumerate() {
            assert!((0.0..=1.0).contains(v), "X[{m}][{j}] = {v}");
            if !p.usable(m, j) {
                assert_eq!(*v, 0.0, "X[{m}][{j}] where it cannot run");
            }
        }
        assert!(row.iter().sum::<f64>() <= 1.0 + 1e-9, "row {m}: {row:?}");
    }
    for j in 0..p.capacity.len() {
        let used: f64 = a.x.iter().zip(p.scale).map(|(r, s)| r[j] * s).sum();
        assert!(
            used <= p.capacity[j] * (1.0 + 1e-9) + 1e-12,
            "type {j}: {used}"
        );
    }
}

#[test]
fn max_min_table() {
    // (throughputs, scale, capacity, want X). Weights 1.
    let cases: Vec<Case> = vec![
        // Two equal jobs, one GPU: maximise min(x0, x1), x0 + x1 <= 1 -> 1/2 each.
        (
            vec![vec![1.0], vec![1.0]],
            vec![1.0, 1.0],
            vec![1.0],
            vec![vec![0.5], vec![0.5]],
        ),
        // Scale factors, one type of 2 GPUs, rates equal: a 2-GPU job A, 1-GPU jobs B, C.
        // Equal share 1 each; maximise min(2a, b, c) with 2a + b + c <= 2: 2a = b = c = t,
        // 3t = 2 -> t = 2/3, a = 1/3 (the same GPU time as B and C).
        (
            vec![vec![1.0], vec![1.0], vec![1.0]],
            vec![2.0, 1.0, 1.0],
            vec![2.0],
            vec![vec![1.0 / 3.0], vec![2.0 / 3.0], vec![2.0 / 3.0]],
        ),
        // Heterogeneous: one V100 and one K80; A runs 4 on V100, 1 on K80 (4x), B 2 and 1
        // (2x). Equal shares: A (4 + 1) / 2 = 2.5, B (2 + 1) / 2 = 1.5. With both rows full
        // (a1 + a2 = 1, b1 + b2 = 1, a1 + b1 = 1): A = (4 a1 + a2) / 2.5 = (4 - 3 b1) / 2.5,
        // B = (2 b1 + 1 - b1) / 1.5 = (1 + b1) / 1.5; equal at 6 - 4.5 b1 = 2.5 + 2.5 b1,
        // b1 = 1/2: both at 1.0, each half its time on each type.
        (
            vec![vec![4.0, 1.0], vec![2.0, 1.0]],
            vec![1.0, 1.0],
            vec![1.0, 1.0],
            vec![vec![0.5, 0.5], vec![0.5, 0.5]],
        ),
    ];
    for (i, (t, scale, cap, want)) in cases.iter().enumerate() {
        let w = vec![1.0; t.len()];
        let p = problem(t, scale, cap, &w);
        let a = max_min_fairness(&p).unwrap();
        assert_feasible(&p, &a);
        assert!(close(&a.x, want), "case {i}: {:?} != {want:?}", a.x);
    }
}

#[test]
fn a_job_is_never_given_a_type_where_it_cannot_run() {
    // One V100, one K80; A runs 2 on V100 and not on K80, B 1 on either. Equal shares: A
    // 2 x 1/2 = 1, B (1 + 1) / 2 = 1. B's normalised throughput b1 + b2 <= 1 (its row), so
    // the optimum is 1, reached with B's row full and 2 a1 >= 1: a1 in [1/2, 1], not unique.
    let (t, scale, cap, w) = (
        vec![vec![2.0, 0.0], vec![1.0, 1.0]],
        vec![1.0, 1.0],
        vec![1.0, 1.0],
        vec![1.0, 1.0],
    );
    let p = problem(&t, &scale, &cap, &w);
    let a = max_min_fairness(&p).unwrap();
    assert_feasible(&p, &a);
    assert_eq!(a.x[0][1], 0.0);
    assert!(a.x[0][0] >= 0.5 - TOL, "{:?}", a.x);
    assert!((row_sums(&a.x)[1] - 1.0).abs() < TOL, "{:?}", a.x);
    assert!((a.objective - 1.0).abs() < TOL);
}

#[test]
fn agnostic_max_min_gives_equal_time_whatever_the_speeds() {
    // Three 1-GPU jobs on two 1-GPU types, speeds all different: the agnostic view sees 1s,
    // so each job gets 2/3 of the time (rows 2/3, both GPUs busy); the split across types
    // is not unique.
    let t = vec![vec![4.0, 1.0], vec![2.0, 1.0], vec![1.0, 3.0]];
    let flat = agnostic(&t);
    assert_eq!(flat, vec![vec![1.0, 1.0]; 3]);
    let (scale, cap, w) = (vec![1.0; 3], vec![1.0, 1.0], vec![1.0; 3]);
    let p = problem(&flat, &scale, &cap, &w);
    let a = max_min_fairness(&p).unwrap();
    assert_feasible(&p, &a);
    for s in row_sums(&a.x) {
        assert!((s - 2.0 / 3.0).abs() < TOL, "{:?}", a.x);
    }
    // Equal share 1 (each type half the GPUs), objective 2/3.
    assert!((a.objective - 2.0 / 3.0).abs() < TOL);
    // Zeros stay zeros: a job that cannot run on a type is not sent there.
    assert_eq!(agnostic(&[vec![3.0, 0.0]]), vec![vec![1.0, 0.0]]);
}

#[test]
fn weights_divide_the_normalised_throughput() {
    // Two equal jobs on one GPU, A of weight 2: maximise min(a / 2, b), a + b <= 1 ->
    // a / 2 = b, a = 2/3, b = 1/3.
    let (t, scale, cap, w) = (
        vec![vec![1.0], vec![1.0]],
        vec![1.0, 1.0],
        vec![1.0],
        vec![2.0, 1.0],
    );
    let a = max_min_fairness(&problem(&t, &scale, &cap, &w)).unwrap();
    assert!(
        close(&a.x, &[vec![2.0 / 3.0], vec![1.0 / 3.0]]),
        "{:?}",
        a.x
    );
}

#[test]
fn max_sum_table() {
    // One V100, one K80; A 4 / 1, B 2 / 1. Maximise 4 a1 + a2 + 2 b1 + b2: A on V100, B on
    // K80 gives 5; moving e of V100 time to B (and K80 time to A) gives 5 - 2e.
    let (t, scale, cap, w) = (
        vec![vec![4.0, 1.0], vec![2.0, 1.0]],
        vec![1.0, 1.0],
        vec![1.0, 1.0],
        vec![1.0, 1.0],
    );
    let p = problem(&t, &scale, &cap, &w);
    let a = max_sum_throughput(&p).unwrap();
    assert_feasible(&p, &a);
    assert!(close(&a.x, &[vec![1.0, 0.0], vec![0.0, 1.0]]), "{:?}", a.x);
    assert!((a.objective - 5.0).abs() < TOL);
}

#[test]
fn jobs_larger_than_a_type_get_no_time_there_and_empty_problems_are_empty() {
    // A 4-GPU job on types of 2 and 8 GPUs: only the second.
    let (t, scale, cap, w) = (vec![vec![1.0, 1.0]], vec![4.0], vec![2.0, 8.0], vec![1.0]);
    let a = max_min_fairness(&problem(&t, &scale, &cap, &w)).unwrap();
    assert_eq!(a.x[0][0], 0.0);
    assert!((a.x[0][1] - 1.0).abs() < TOL);
    let empty = max_min_fairness(&problem(&[], &[], &[1.0], &[])).unwrap();
    assert!(empty.x.is_empty());
    // A job that runs nowhere: no variables, all zeros, no solver call.
    let none = max_sum_throughput(&problem(&[vec![0.0]], &[1.0], &[1.0], &[1.0])).unwrap();
    assert_eq!(none.x, vec![vec![0.0]]);
}

#[test]
fn bad_input_is_a_typed_error() {
    let t = vec![vec![1.0, 1.0]];
    let err = max_min_fairness(&problem(&t, &[1.0, 1.0], &[1.0, 1.0], &[1.0])).unwrap_err();
    assert!(
        matches!(err, AllocationError::Shape { what: "scale", .. }),
        "{err}"
    );
    let err = max_min_fairness(&problem(&t, &[0.5], &[1.0, 1.0], &[1.0])).unwrap_err();
    assert!(
        matches!(err, AllocationError::Value { what: "scale", .. }),
        "{err}"
    );
    let bad = vec![vec![f64::NAN, 1.0]];
    let err = max_sum_throughput(&problem(&bad, &[1.0], &[1.0, 1.0], &[1.0])).unwrap_err();
    assert!(err.to_string().contains("throughputs[0]"), "{err}");
    let err = max_sum_throughput(&problem(&[vec![1.0]], &[1.0], &[1.0, 1.0], &[1.0]));
    assert!(matches!(err, Err(AllocationError::Shape { .. })));
}

fn instance() -> impl Strategy<Value = Instance> {
    (1usize..4, 1usize..14).prop_flat_map(|(n, m)| {
        let rate = prop_oneof![Just(0.0), 0.05f64..20.0];
        (
            prop::collection::vec(prop::collection::vec(rate, n), m),
            prop::collection::vec(prop::sample::select(vec![1.0, 2.0, 4.0, 8.0]), m),
            prop::collection::vec((0u32..17).prop_map(f64::from), n),
            prop::collection::vec(0.2f64..5.0, m),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn allocations_are_feasible((t, scale, cap, w) in instance()) {
        let p = problem(&t, &scale, &cap, &w);
        for a in [max_min_fairness(&p), max_sum_throughput(&p)] {
            let a = a.expect("a well-formed instance solves");
            assert_feasible(&p, &a);
        }
        let flat = agnostic(&t);
        let p = problem(&flat, &scale, &cap, &w);
        assert_feasible(&p, &max_min_fairness(&p).expect("solves"));
    }
}

/// `m` jobs of random speeds (V100 1, P100 0.3-1.3, K80 0.1-0.6: the spread of Gavel's
/// table) and Gavel's sizes (1, 2, 4, 8 GPUs; 70/10/15/5%) on 36 + 36 + 36 GPUs.
fn gavel_like(m: usize, seed: u64) -> (Vec<Vec<f64>>, Vec<f64>) {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let rows = (0..m)
        .map(|_| vec![1.0, rng.random_range(0.3..1.3), rng.random_range(0.1..0.6)])
        .collect();
    let scale = (0..m)
        .map(|_| match rng.random::<f64>() {
            r if r < 0.7 => 1.0,
            r if r < 0.8 => 2.0,
            r if r < 0.95 => 4.0,
            _ => 8.0,
        })
        .collect();
    (rows, scale)
}

#[test]
fn pop_is_feasible_and_close_to_the_exact_solve() {
    let cap = vec![36.0, 36.0, 36.0];
    for (m, k, seed) in [(256, 4, 1), (512, 8, 2)] {
        let (t, scale) = gavel_like(m, seed);
        let w = vec![1.0; m];
        let p = problem(&t, &scale, &cap, &w);
        for lp in [Lp::MaxMin, Lp::MaxSum] {
            let exact = lp.solve(&p).unwrap();
            let pop = Pop {
                k,
                seed,
                split: Split::Stratified,
            }
            .solve(lp, &p)
            .unwrap();
            assert_feasible(&p, &pop);
            // The objective is the whole problem's, at the union of the sub-allocations.
            assert!((lp.objective(&p, &pop.x, &pop.pairs) - pop.objective).abs() < 1e-12);
            assert!((lp.objective(&p, &exact.x, &exact.pairs) - exact.objective).abs() < 1e-9);
            let gap = 1.0 - pop.objective / exact.objective;
            assert!(
                gap > -1e-5,
                "{lp:?} m={m} k={k}: POP above the optimum: {gap}"
            );
            assert!(gap < 0.02, "{lp:?} m={m} k={k}: gap {gap}");
        }
    }
    // k = 1, or no more jobs than k: the exact solve.
    let (t, scale) = gavel_like(6, 3);
    let w = vec![1.0; 6];
    let p = problem(&t, &scale, &cap, &w);
    let exact = max_min_fairness(&p).unwrap();
    for k in [0, 1, 6, 9] {
        assert_eq!(
            Pop {
                k,
                seed: 0,
                split: Split::Random
            }
            .solve(Lp::MaxMin, &p)
            .unwrap(),
            exact
        );
    }
    // Same seed, same split.
    let (t, scale) = gavel_like(64, 4);
    let w = vec![1.0; 64];
    let p = problem(&t, &scale, &cap, &w);
    let pop = Pop {
        k: 4,
        seed: 9,
        split: Split::Random,
    };
    assert_eq!(pop.solve(Lp::MaxMin, &p), pop.solve(Lp::MaxMin, &p));
}

#[test]
fn a_gang_that_fits_the_type_fits_a_pop_share() {
    // Eight 8-GPU jobs on one type of 16 GPUs, k = 4: each share is 4 GPUs, smaller than a
    // gang, but time fractions need no whole GPUs: each job still gets 16 / 64 = 1/4.
    let t = vec![vec![1.0]; 8];
    let (scale, cap, w) = (vec![8.0; 8], vec![16.0], vec![1.0; 8]);
    let p = problem(&t, &scale, &cap, &w);
    let pop = Pop {
        k: 4,
        seed: 1,
        split: Split::Stratified,
    }
    .solve(Lp::MaxMin, &p)
    .unwrap();
    assert_feasible(&p, &pop);
    for row in &pop.x {
        assert!((row[0] - 0.25).abs() < TOL, "{:?}", pop.x);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn pop_allocations_are_feasible((t, scale, cap, w) in instance(), k in 1usize..5, seed in 0u64..4) {
        let p = problem(&t, &scale, &cap, &w);
        for lp in [Lp::MaxMin, Lp::MaxSum] {
            let exact = lp.solve(&p).expect("solves");
            for split in [Split::Stratified, Split::Random] {
                let pop = Pop { k, seed, split }.solve(lp, &p).expect("a well-formed instance solves");
                assert_feasible(&p, &pop);
                prop_assert!(pop.objective <= exact.objective * (1.0 + 1e-5) + 1e-6);
            }
        }
    }
}

#[test]
fn makespan_oracle_table() {
    // One GPU, two jobs of rate 1 with 1 and 3 s of work: maximise min(x0 / 1, x1 / 3),
    // x0 + x1 <= 1 -> x0 = 1/4, x1 = 3/4; both finish at 4 s.
    let (t, scale, cap, w) = (vec![vec![1.0]; 2], vec![1.0; 2], vec![1.0], vec![1.0; 2]);
    let p = problem(&t, &scale, &cap, &w);
    let a = min_makespan(&p, &[1.0, 3.0]).unwrap();
    assert_feasible(&p, &a);
    assert!(close(&a.x, &[vec![0.25], vec![0.75]]), "{:?}", a.x);
    assert!((a.objective - 4.0).abs() < 1e-3, "{}", a.objective);
    // One V100, one K80; A 4 / 1 with 4 s of work, B 2 / 1 with 3 s. With all rows and
    // columns full (b2 = a1, b1 = a2 = 1 - a1): A's rate 3 a1 + 1 over 4, B's 2 - a1 over
    // 3; equal at a1 = 5/13: both at 7/13 a second, makespan 13/7.
    let t = vec![vec![4.0, 1.0], vec![2.0, 1.0]];
    let (scale, cap, w) = (vec![1.0; 2], vec![1.0, 1.0], vec![1.0; 2]);
    let p = problem(&t, &scale, &cap, &w);
    let a = min_makespan(&p, &[4.0, 3.0]).unwrap();
    assert_feasible(&p, &a);
    assert!((a.objective - 13.0 / 7.0).abs() < 1e-3, "{}", a.objective);
    let (a1, b1) = (5.0 / 13.0, 8.0 / 13.0);
    assert!(
        close(&a.x, &[vec![a1, 1.0 - a1], vec![b1, 1.0 - b1]]),
        "{:?}",
        a.x
    );
    let err = min_makespan(&p, &[4.0, 0.0]).unwrap_err();
    assert!(err.to_string().contains("remaining[1]"), "{err}");
}

#[test]
fn finish_time_fairness_oracle_table() {
    let (t, scale, cap, w) = (vec![vec![1.0]; 2], vec![1.0; 2], vec![1.0], vec![1.0; 2]);
    let p = problem(&t, &scale, &cap, &w);
    // Isolated, each job has half the GPU: rate 1/2.
    assert_eq!(isolated_throughputs(&p), vec![0.5, 0.5]);
    // Fresh jobs: rho_m = (R / x) / (R / (1/2)) = 1 / (2 x): the equal split, rho = 1.
    let fresh = Progress {
        elapsed_s: &[0.0, 0.0],
        done: &[0.0, 0.0],
        remaining: &[1.0, 3.0],
    };
    let a = finish_time_fairness(&p, &fresh).unwrap();
    assert_feasible(&p, &a);
    assert!(close(&a.x, &[vec![0.5], vec![0.5]]), "{:?}", a.x);
    assert!((a.objective - 1.0).abs() < 1e-3, "{}", a.objective);
    // A has waited 2 s for its 1 s of work (isolated time 2 s), B is fresh (1 s, isolated
    // 2 s): rho_A = (2 + 1/a) / 2, rho_B = (1/b) / 2 with a + b = 1; equal at a^2 = 1/2:
    // a = 0.7071, b = 0.2929, rho = 1.7071.
    let waited = Progress {
        elapsed_s: &[2.0, 0.0],
        done: &[0.0, 0.0],
        remaining: &[1.0, 1.0],
    };
    let a = finish_time_fairness(&p, &waited).unwrap();
    assert_feasible(&p, &a);
    let half = 0.5f64.sqrt();
    assert!((a.x[0][0] - half).abs() < 1e-3, "{:?}", a.x);
    assert!((a.objective - (1.0 + half)).abs() < 1e-3, "{}", a.objective);
    let bad = Progress {
        elapsed_s: &[0.0],
        ..waited
    };
    assert!(matches!(
        finish_time_fairness(&p, &bad),
        Err(AllocationError::Shape {
            what: "elapsed_s",
            ..
        })
    ));
}

/// `problem` with job pairs.
fn packed<'a>(
    throughputs: &'a [Vec<f64>],
    scale: &'a [f64],
    capacity: &'a [f64],
    weights: &'a [f64],
    pairs: &'a [Pair],
) -> Problem<'a> {
    Problem {
        pairs,
        ..problem(throughputs, scale, capacity, weights)
    }
}

/// The constraints with pairs (module docs): every pair's time in [0, 1], 0 where it may
/// not share; each job's time alone and in its pairs at most 1; a type's GPUs counting each
/// pair once.
fn assert_feasible_packed(p: &Problem<'_>, a: &Allocation) {
    assert_eq!(a.pairs.len(), p.pairs.len());
    let mut time: Vec<f64> = row_sums(&a.x);
    let mut used: Vec<f64> = (0..p.capacity.len())
        .map(|j| a.x.iter().zip(p.scale).map(|(r, s)| r[j] * s).sum())
        .collect();
    for (i, (pair, y)) in p.pairs.iter().zip(&a.pairs).enumerate() {
        for (j, v) in y.iter().enumerate() {
            assert!((0.0..=1.0).contains(v), "Y[{i}][{j}] = {v}");
            if !p.pair_usable_within(p.capacity, i, j) {
                assert_eq!(*v, 0.0, "Y[{i}][{j}] where the pair may not share");
            }
            used[j] += v * p.scale[pair.jobs[0]];
            for job in pair.jobs {
                time[job] += v;
            }
        }
    }
    for (m, t) in time.iter().enumerate() {
        assert!(*t <= 1.0 + 1e-9, "job {m}: time {t}");
    }
    for (j, u) in used.iter().enumerate() {
        assert!(*u <= p.capacity[j] * (1.0 + 1e-9) + 1e-12, "type {j}: {u}");
    }
}

#[test]
fn two_jobs_that_pack_well_share_the_gpu() {
    // One GPU, two 1-GPU jobs at rate 1 alone, 0.8 each together (summed normalised rate
    // 1.6). Equal share 1 each. Max-min: min(x0 + 0.8 y, x1 + 0.8 y) with x0 + x1 + y <= 1
    // (the GPU) and x_m + y <= 1: y = 1 gives 0.8 each; alone they get 0.5 each.
    let t = vec![vec![1.0], vec![1.0]];
    let (scale, cap, w) = (vec![1.0; 2], vec![1.0], vec![1.0; 2]);
    let pairs = vec![Pair {
        jobs: [0, 1],
        rates: vec![[0.8, 0.8]],
    }];
    let p = packed(&t, &scale, &cap, &w, &pairs);
    let a = max_min_fairness(&p).unwrap();
    assert_feasible_packed(&p, &a);
    assert!((a.pairs[0][0] - 1.0).abs() < TOL, "{a:?}");
    assert!(close(&a.x, &[vec![0.0], vec![0.0]]), "{a:?}");
    assert!((a.objective - 0.8).abs() < TOL, "{a:?}");
    // Max-sum: x0 + x1 + 1.6 y under the same GPU: y = 1, 1.6.
    let a = max_sum_throughput(&p).unwrap();
    assert!((a.pairs[0][0] - 1.0).abs() < TOL, "{a:?}");
    assert!((a.objective - 1.6).abs() < TOL, "{a:?}");
    // Together 0.5 + 0.4 = 0.9 < 1: worse than taking turns; no shared time, 1/2 each.
    let pairs = vec![Pair {
        jobs: [0, 1],
        rates: vec![[0.5, 0.4]],
    }];
    let p = packed(&t, &scale, &cap, &w, &pairs);
    let a = max_min_fairness(&p).unwrap();
    assert_eq!(a.pairs[0][0], 0.0);
    assert!(close(&a.x, &[vec![0.5], vec![0.5]]), "{a:?}");
}

#[test]
fn a_pair_shares_only_where_that_beats_running_alone_and_sizes_must_match() {
    // Two types of 1 GPU: on type 0 the pair gains (0.9 + 0.9), on type 1 it does not
    // (0.3 + 0.3). Jobs run at 1 alone on both: equal share 1 each. Best: the pair shares
    // type 0 all the time (0.9 each) and nothing else fits their time: 0.9.
    let t = vec![vec![1.0, 1.0], vec![1.0, 1.0]];
    let (scale, cap, w) = (vec![1.0; 2], vec![1.0, 1.0], vec![1.0; 2]);
    let pairs = vec![Pair {
        jobs: [0, 1],
        rates: vec![[0.9, 0.9], [0.3, 0.3]],
    }];
    let p = packed(&t, &scale, &cap, &w, &pairs);
    let a = max_min_fairness(&p).unwrap();
    assert_feasible_packed(&p, &a);
    // Alone each job could have a whole type (1.0 > 0.9): the LP must not pack then.
    assert!((a.objective - 1.0).abs() < TOL, "{a:?}");
    assert!(a.pairs[0][1] < TOL, "{a:?}");
    // Gavel packs only jobs of one scale factor.
    let (scale2, cap2) = (vec![1.0, 2.0], vec![2.0, 2.0]);
    let p = packed(&t, &scale2, &cap2, &w, &pairs);
    let a = max_min_fairness(&p).unwrap();
    assert_eq!(a.pairs[0], vec![0.0, 0.0]);
}

#[test]
fn bad_pairs_are_typed_errors() {
    let t = vec![vec![1.0], vec![1.0]];
    let (scale, cap, w) = (vec![1.0; 2], vec![1.0], vec![1.0; 2]);
    for (pair, what) in [
        (
            Pair {
                jobs: [0, 2],
                rates: vec![[1.0, 1.0]],
            },
            "pairs[0]",
        ),
        (
            Pair {
                jobs: [1, 1],
                rates: vec![[1.0, 1.0]],
            },
            "pairs[0]",
        ),
        (
            Pair {
                jobs: [0, 1],
                rates: vec![[f64::NAN, 1.0]],
            },
            "pair rates[0]",
        ),
        (
            Pair {
                jobs: [0, 1],
                rates: vec![],
            },
            "a pair's rates",
        ),
    ] {
        let pairs = [pair];
        let err = max_min_fairness(&packed(&t, &scale, &cap, &w, &pairs)).unwrap_err();
        assert!(err.to_string().contains(what), "{err}");
    }
}

/// Throughputs, scale factors, capacities, weights.
type Instance = (Vec<Vec<f64>>, Vec<f64>, Vec<f64>, Vec<f64>);

/// An instance with pairs: every pair of distinct jobs drawn, with random rates.
fn packed_instance() -> impl Strategy<Value = (Instance, Vec<Pair>)> {
    instance().prop_flat_map(|inst| {
        let (m, n) = (inst.0.len(), inst.2.len());
        let rate = prop_oneof![Just(0.0), 0.05f64..20.0];
        let pair = (0..m, 0..m, prop::collection::vec([rate.clone(), rate], n))
            .prop_filter("two distinct jobs", |(a, b, _)| a != b)
            .prop_map(|(a, b, rates)| Pair {
                jobs: [a, b],
                rates,
            });
        let pairs = if m < 2 {
            Just(Vec::new()).boxed()
        } else {
            prop::collection::vec(pair, 0..12).boxed()
        };
        (Just(inst), pairs)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn packed_allocations_are_feasible_and_consistent(((t, scale, cap, w), pairs) in packed_instance(), k in 1usize..4, seed in 0u64..4) {
        let p = packed(&t, &scale, &cap, &w, &pairs);
        let alone = problem(&t, &scale, &cap, &w);
        for lp in [Lp::MaxMin, Lp::MaxSum] {
            let a = lp.solve(&p).expect("a well-formed instance solves");
            assert_feasible_packed(&p, &a);
            assert_feasible(&alone, &Allocation { pairs: Vec::new(), ..a.clone() });
            // Pair consistency: the objective the solver reports is the one both jobs of
            // every pair see from the same shared time.
            let judged = lp.objective(&p, &a.x, &a.pairs);
            prop_assert!((judged - a.objective).abs() <= 1e-9 * judged.abs().max(1.0));
            // Pairs only add choices.
            let without = lp.solve(&alone).expect("solves");
            prop_assert!(a.objective >= without.objective * (1.0 - 1e-5) - 1e-6);
            let pop = Pop { k, seed, split: Split::Stratified }.solve(lp, &p).expect("solves");
            assert_feasible_packed(&p, &pop);
            prop_assert!(pop.objective <= a.objective * (1.0 + 1e-5) + 1e-6);
        }
        let flat = agnostic(&t);
        let p = packed(&flat, &scale, &cap, &w, &pairs);
        assert_feasible_packed(&p, &max_min_fairness(&p).expect("solves"));
    }
}
