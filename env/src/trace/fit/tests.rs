//! Acceptance tests of the fitted generator: synthetic traces reproduce the statistics of the
//! trace they were fitted to, policies rank alike on both, and the model file round-trips.

use super::*;
use crate::trace::read_trace;
use crate::units::{JobId, TenantId};
use std::path::PathBuf;

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

fn cluster10() -> Trace {
    read_trace(&repo_file("traces/itp/cluster10.csv"), None)
        .unwrap()
        .trace
}

/// A trace of the shared full traces, or `None` (after saying why) when it is not there.
fn shared_trace(file: &str) -> Option<Trace> {
    let dir = std::env::var_os("LACHESIS_SHARED_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_file("../shared/traces"));
    let path = dir.join(file);
    if path.exists() {
        Some(read_trace(&path, None).unwrap().trace)
    } else {
        println!(
            "skipped: {} not found (set LACHESIS_SHARED_TRACES)",
            path.display()
        );
        None
    }
}

fn sorted(mut xs: Vec<f64>) -> Vec<f64> {
    xs.sort_by(f64::total_cmp);
    xs
}

/// Nearest-rank quantile of sorted `xs` (as `trace stats` reports them).
fn nearest_rank(xs: &[f64], p: f64) -> f64 {
    let n = xs.len();
    xs[((p * n as f64).ceil() as usize).clamp(1, n) - 1]
}

/// The order statistics bracketing the p-quantile of an iid sample of `xs.len()` values with
/// 95% confidence: ranks n p -/+ 1.96 sqrt(n p (1 - p)) (the binomial count of values below
/// the true quantile, normal approximation).
fn quantile_interval(xs: &[f64], p: f64) -> (f64, f64) {
    let n = xs.len() as f64;
    let half = 1.96 * (n * p * (1.0 - p)).sqrt();
    let rank = |r: f64| xs[(r.round() as usize).clamp(1, xs.len()) - 1];
    (rank((n * p - half).floor()), rank((n * p + half).ceil()))
}

const PS: [f64; 4] = [0.1, 0.5, 0.9, 0.99];
/// Synthetic draws per comparison: quantiles are compared as the median over the draws.
const DRAWS: u64 = 5;
/// Jobs per draw for quantiles (as `trace synth --jobs 20000` would).
const DRAW_JOBS: usize = 20_000;
/// Relative widening of a real quantile's 95% interval (see [`compare_quantiles`]). The
/// model's interpolation between knots costs about 1% (see `dist`); the rest allows for
/// dependence: batches of alike jobs and busy spells make the effective sample several times
/// smaller than the job count, which widens an interval by the square root of that.
const MARGIN: f64 = 0.10;
/// Jobs of the long draw for the arrival rate and hour-of-day shares.
const LONG_JOBS: usize = 500_000;

/// Checks the synthetic p10/p50/p90/p99 of one statistic against the real ones.
///
/// The real quantile is an estimate: the synthetic one (the median over [`DRAWS`] draws, to
/// quiet its own noise) must fall in the real one's 95% interval ([`quantile_interval`]),
/// widened by [`MARGIN`] on both sides for what that interval leaves out: the model's
/// interpolation between knots, and above all dependence. Jobs come in batches of alike jobs
/// (a sweep of 100 is nearly one draw, not 100), and gaps in busy and quiet spells, so a
/// trace holds fewer independent values than jobs and the iid interval is too narrow.
/// Returns the failures.
fn compare_quantiles(what: &str, real: Vec<f64>, draws: &[Vec<f64>]) -> Vec<String> {
    let real = sorted(real);
    let draws: Vec<Vec<f64>> = draws.iter().map(|d| sorted(d.clone())).collect();
    let mut failures = Vec::new();
    for p in PS {
        let (lo, hi) = quantile_interval(&real, p);
        let r = nearest_rank(&real, p);
        let s = median(draws.iter().map(|d| nearest_rank(d, p)).collect());
        let ok = s >= lo * (1.0 - MARGIN) && s <= hi * (1.0 + MARGIN);
        println!(
            "  {what:<15} p{:<2}  real {r:>9.1} [{lo:>9.1}, {hi:>9.1}]  synthetic {s:>9.1}  {}",
            (p * 100.0) as u32,
            if ok { "ok" } else { "OUT" }
        );
        if !ok {
            failures.push(format!(
                "{what} p{p}: synthetic {s} not in [{lo}, {hi}] +- {MARGIN}"
            ));
        }
    }
    failures
}

fn median(xs: Vec<f64>) -> f64 {
    let xs = sorted(xs);
    xs[xs.len() / 2]
}

/// What the statistics checks need of a trace's arrivals.
struct Arrivals {
    gaps_s: Vec<f64>,
    /// Share of jobs submitted in each hour of the day (from the trace's origin).
    hour_share: [f64; 24],
    /// Jobs, and the sum of squared batch sizes (by the model's 60 s rule): a share of jobs is
    /// a sum over batches, of variance p (1 - p) sum(size^2) / jobs^2.
    jobs: f64,
    batch_size_sq: f64,
    jobs_per_day: f64,
}

fn arrivals(t: &Trace) -> Arrivals {
    let submits: Vec<f64> = t.jobs().iter().map(|j| j.submit.secs_f64()).collect();
    let n = submits.len() as f64;
    let mut hour_share = [0.0; 24];
    for s in &submits {
        hour_share[(s / 3600.0) as usize % 24] += 1.0 / n;
    }
    let mut sizes: Vec<f64> = Vec::new();
    for start in arrivals::batch_starts(&submits) {
        if start {
            sizes.push(0.0);
        }
        *sizes.last_mut().unwrap() += 1.0;
    }
    let span_days = (submits[submits.len() - 1] - submits[0]) / 86_400.0;
    Arrivals {
        gaps_s: submits.windows(2).map(|w| w[1] - w[0]).collect(),
        hour_share,
        jobs: n,
        batch_size_sq: sizes.iter().map(|s| s * s).sum(),
        jobs_per_day: (n - 1.0) / span_days,
    }
}

fn durations_s(t: &Trace) -> Vec<f64> {
    t.jobs()
        .iter()
        .map(|j| t.true_duration(j.id).secs_f64())
        .collect()
}

fn gpus(t: &Trace) -> Vec<f64> {
    t.jobs().iter().map(|j| j.gpus_total() as f64).collect()
}

/// Whether two shares of jobs (real `r`, synthetic `s`) agree: within 3 standard errors of
/// their difference. The errors come from the batches (see [`Arrivals`]), at the pooled
/// share, so a share that is 0 in the trace still allows the few the model puts there
/// (e.g. by the hour-of-week rate floor). Prints the comparison.
fn shares_agree(what: &str, (r, real): (f64, &Arrivals), (s, synth): (f64, &Arrivals)) -> bool {
    let pooled = (r + s) / 2.0;
    let se = |a: &Arrivals| (pooled * (1.0 - pooled) * a.batch_size_sq).sqrt() / a.jobs;
    let bound = 3.0 * se(real).hypot(se(synth));
    let ok = (r - s).abs() <= bound;
    println!(
        "  {what:<15} real {:>5.2}%  synthetic {:>5.2}%  (+- {:.2}%)  {}",
        r * 100.0,
        s * 100.0,
        bound * 100.0,
        if ok { "ok" } else { "OUT" }
    );
    ok
}

/// Hour-of-day shares, one by one ([`shares_agree`]) and together.
fn compare_hours(real: &Arrivals, synth: &Arrivals) -> Vec<String> {
    let mut failures = Vec::new();
    for h in 0..24 {
        let (r, s) = (real.hour_share[h], synth.hour_share[h]);
        if !shares_agree(&format!("hour {h}"), (r, real), (s, synth)) {
            failures.push(format!("hour {h}: real {r}, synthetic {s}"));
        }
    }
    // Together: the rhythm is there. The bounds above are wide (hour shares are noisy when
    // jobs come in batches): wide enough to pass a flat day on cluster04, whose rhythm is
    // mild. So the synthetic day must also be closer to the real one than a flat day is, by
    // half at least (total variation distance; the synthetic's own noise alone makes about
    // 0.02 of it at 500,000 jobs).
    let distance = |other: &dyn Fn(usize) -> f64| {
        (0..24)
            .map(|h| (real.hour_share[h] - other(h)).abs())
            .sum::<f64>()
            / 2.0
    };
    let to_synth = distance(&|h| synth.hour_share[h]);
    let to_flat = distance(&|_| 1.0 / 24.0);
    println!("  hour-of-day distance to synthetic {to_synth:.4}, to a flat day {to_flat:.4}");
    if to_synth > to_flat / 2.0 {
        failures.push(format!(
            "hour of day: distance {to_synth} to synthetic, {to_flat} to flat"
        ));
    }
    failures
}

/// Fits `real` and checks that synthetic traces drawn from the model reproduce its
/// statistics: quantiles of duration, GPUs per job and inter-arrival time; hour-of-day
/// shares; jobs per day. Panics with every failure.
fn check_statistics(real: &Trace) {
    let model = WorkloadModel::fit(real).unwrap();
    let mix = &model.parts().mix;
    println!(
        "{}: {} jobs, {} classes, {:?}",
        real.name,
        real.len(),
        mix.classes.len(),
        mix.persistence
    );
    let draws: Vec<Trace> = (1..=DRAWS).map(|s| model.synth(DRAW_JOBS, s)).collect();
    let real_arrivals = arrivals(real);
    let each = |f: &dyn Fn(&Trace) -> Vec<f64>| draws.iter().map(f).collect::<Vec<_>>();
    let mut failures = compare_quantiles("duration s", durations_s(real), &each(&durations_s));
    failures.extend(compare_quantiles("GPUs per job", gpus(real), &each(&gpus)));
    failures.extend(compare_quantiles(
        "inter-arrival s",
        real_arrivals.gaps_s.clone(),
        &each(&|t| arrivals(t).gaps_s),
    ));
    let long = arrivals(&model.synth(LONG_JOBS, 0));
    failures.extend(compare_hours(&real_arrivals, &long));
    // Jobs per day within 5%. The long draw's own noise is about 1%: batch sizes vary with a
    // coefficient of variation of 2.4 in cluster04, so over its 125,000 batches the number
    // needed for the jobs varies by 2.4 / sqrt(125000) = 0.7%, and the gaps add as much. The
    // rest is the model's: a trace that covers some hours of the week more often than
    // others (cluster10 spans 4.7 weeks) weighs them by its cover, the synthetic week
    // evenly; and log interpolation of sparse, heavy-tailed gaps gives up ~2% of their mean.
    let ratio = long.jobs_per_day / real_arrivals.jobs_per_day;
    println!(
        "  jobs/day  real {:.2}  synthetic {:.2} ({:+.1}%)",
        real_arrivals.jobs_per_day,
        long.jobs_per_day,
        (ratio - 1.0) * 100.0
    );
    if (ratio - 1.0).abs() > 0.05 {
        failures.push(format!("jobs/day: synthetic / real = {ratio}"));
    }
    // The model's own long-run estimate (for reports) agrees with the long draw.
    let predicted = model.parts().arrivals.jobs_per_day() / long.jobs_per_day;
    println!(
        "  jobs/day  model's estimate {:+.1}% off the long draw",
        (predicted - 1.0) * 100.0
    );
    if (predicted - 1.0).abs() > 0.05 {
        failures.push(format!(
            "jobs/day: model estimate / long draw = {predicted}"
        ));
    }
    assert!(failures.is_empty(), "{}: {failures:#?}", real.name);
}

#[test]
fn synthetic_statistics_match_cluster10() {
    check_statistics(&cluster10());
}

#[test]
fn synthetic_statistics_match_cluster04() {
    if let Some(real) = shared_trace("msft-itp-2021/cluster04.csv") {
        check_statistics(&real);
    }
}

/// Policies compared on real and synthetic windows.
const POLICIES: [&str; 3] = ["fifo/first-fit", "fifo/best-fit", "fifo/worst-fit"];
/// Offered load both traces are scaled to: high enough for a queue to form, so that placement
/// matters (at 0.9 worst-fit costs 1-10% of average JCT on cluster04's weeks).
const TARGET_LOAD: f64 = 0.9;
/// Relative JCT difference under which two policies count as tied. First-fit and best-fit
/// both pack nodes on a uniform cluster: per draw they differ by a few percent either way,
/// on the mean of draws by a percent or two.
const TIE: f64 = 0.01;

/// Average JCT of each of [`POLICIES`] on `trace` scaled to [`TARGET_LOAD`] on `cluster`.
fn avg_jct_s(trace: &Trace, cluster: &str) -> Vec<f64> {
    use crate::cluster::load_cluster;
    use crate::policy::build_policy;
    use crate::sim::{SimConfig, Simulator, scale_to_load};
    use std::sync::Arc;
    let spec = Arc::new(load_cluster(cluster).unwrap());
    let scaled = scale_to_load(trace, &spec, TARGET_LOAD).unwrap();
    let cfg = SimConfig {
        skip_unplaceable: true,
        ..Default::default()
    };
    POLICIES
        .iter()
        .map(|name| {
            let mut policy = build_policy(name, 0).unwrap();
            let sim = Simulator::new(&scaled, Arc::clone(&spec), &cfg).unwrap();
            sim.run(policy.as_mut(), &mut |_| {}).summary.avg_jct_s
        })
        .collect()
}

/// -1, 0 or 1: whether policy `a` has a lower, tied or higher JCT than `b` (ratios to a
/// common reference).
fn order(ratios: &[f64], a: usize, b: usize) -> i32 {
    let d = ratios[a] / ratios[b] - 1.0;
    if d.abs() < TIE { 0 } else { d.signum() as i32 }
}

/// Fits a model to `real`, draws [`DRAWS`] synthetic traces of its size, runs every policy on
/// each at the same load on `cluster`, and checks the policies rank alike: JCT as a ratio to
/// first-fit's on the same trace (synthetic: averaged over the draws, so one draw's heavy job
/// does not decide), no pair of policies in opposite order, and at least one pair ordered on
/// both (so the agreement says something).
fn check_ranking(real: &Trace, cluster: &str) {
    use crate::cluster::load_cluster;
    let model = WorkloadModel::fit(real).unwrap();
    let spec = load_cluster(cluster).unwrap();
    let ratios = |jct: Vec<f64>| jct.iter().map(|j| j / jct[0]).collect::<Vec<f64>>();
    let real_jct = avg_jct_s(real, cluster);
    let real_ratio = ratios(real_jct.clone());
    let mut synth_ratio = vec![0.0; POLICIES.len()];
    println!(
        "{} ({} jobs, load {:.2} on {cluster}, scaled to {TARGET_LOAD}): avg JCT s of {POLICIES:?}",
        real.name,
        real.len(),
        real.offered_load(&spec)
    );
    println!("  real      {real_jct:>9.0?}  ratios {real_ratio:.3?}");
    for seed in 1..=DRAWS {
        let synth = model.synth(real.len(), seed);
        let jct = avg_jct_s(&synth, cluster);
        let r = ratios(jct.clone());
        println!(
            "  seed {seed} (load {:.2}) {jct:>9.0?}  ratios {r:.3?}",
            synth.offered_load(&spec)
        );
        for (sum, x) in synth_ratio.iter_mut().zip(r) {
            *sum += x / DRAWS as f64;
        }
    }
    println!("  synthetic mean ratios {synth_ratio:.3?}");
    let (mut agree, mut opposite) = (0, Vec::new());
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        let (r, s) = (order(&real_ratio, a, b), order(&synth_ratio, a, b));
        if r * s < 0 {
            opposite.push(format!("{} vs {}", POLICIES[a], POLICIES[b]));
        }
        agree += i32::from(r * s > 0);
    }
    assert!(
        opposite.is_empty(),
        "{}: opposite order {opposite:?}",
        real.name
    );
    assert!(agree > 0, "{}: no pair ordered on both", real.name);
}

#[test]
fn policies_rank_alike_on_real_and_synthetic_cluster10() {
    // 260 jobs with gangs of up to 16 GPUs, on 4 nodes of 8 V100s.
    check_ranking(&cluster10(), "4x8:V100");
}

#[test]
fn policies_rank_alike_on_real_and_synthetic_cluster04_weeks() {
    let Some(full) = shared_trace("msft-itp-2021/cluster04.csv") else {
        return;
    };
    // Every third week from day 3 (a fixed stride, not a choice of weeks), on 16 nodes of 8
    // V100s (the 64-GPU gangs fit on 8).
    for from_day in [3, 24, 45] {
        let window = full.window(
            SimTime::from_secs(from_day * 86_400),
            SimTime::from_secs((from_day + 7) * 86_400),
        );
        check_ranking(&window, "16x8:V100");
    }
}

#[test]
fn same_seed_same_trace_and_longer_draws_extend_shorter_ones() {
    let model = WorkloadModel::fit(&cluster10()).unwrap();
    let a = model.synth(1000, 7);
    assert_eq!(a.len(), 1000);
    assert_eq!(a, model.synth(1000, 7));
    let b = model.synth(1000, 8);
    assert_ne!(a.jobs(), b.jobs());
    // Jobs are drawn one after another, so a longer draw starts with the shorter one.
    assert_eq!(model.synth(100, 7).jobs(), &a.jobs()[..100]);
    assert!(model.synth(0, 7).is_empty());
    // The first job is submitted where the fitted trace starts (same phase in the week).
    assert_eq!(a.jobs()[0].submit, cluster10().jobs()[0].submit);
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lachesis-fit-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn model_files_round_trip() {
    let model = WorkloadModel::fit(&cluster10()).unwrap();
    let dir = temp_dir("round-trip");
    let path = dir.join("model.json");
    model.save(&path).unwrap();
    let back = WorkloadModel::load(&path).unwrap();
    assert_eq!(back, model);
    assert_eq!(back.synth(500, 3), model.synth(500, 3));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fitting_needs_two_jobs_in_two_batches() {
    use crate::job::TaskRequest;
    use crate::job::tests::job;
    let trace = |submits: &[u64]| {
        let jobs = submits
            .iter()
            .map(|&s| job("j", s, TaskRequest::whole(1, 0, 0)))
            .collect();
        let durations = vec![SimTime::from_secs(600); submits.len()];
        Trace::new("t", jobs, durations, vec!["default".into()]).unwrap()
    };
    assert_eq!(WorkloadModel::fit(&trace(&[])), Err(FitError::EmptyTrace));
    assert_eq!(WorkloadModel::fit(&trace(&[5])), Err(FitError::OneJob));
    // 0, 30, 90: each within 60 s of the previous, so one batch and no gap between batches.
    let err = WorkloadModel::fit(&trace(&[0, 30, 90])).unwrap_err();
    assert_eq!(
        err,
        FitError::OneBatch {
            jobs: 3,
            gap_s: 60.0
        }
    );
    assert!(err.to_string().contains("one batch"), "{err}");
    // Two batches are enough.
    let model = WorkloadModel::fit(&trace(&[0, 30, 1000])).unwrap();
    assert_eq!(model.synth(10, 1).len(), 10);
}

#[test]
fn bad_model_files_are_named_with_the_problem() {
    let dir = temp_dir("bad-files");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let load = |path: &Path| WorkloadModel::load(path).unwrap_err().to_string();

    let missing = dir.join("missing.json");
    let err = load(&missing);
    assert!(
        err.starts_with(&format!("{}: cannot read", missing.display())),
        "{err}"
    );

    let path = write("garbage.json", "{ not json");
    let err = load(&path);
    assert!(
        err.starts_with(&format!("{}: not a valid workload model", path.display())),
        "{err}"
    );

    let path = write("v2.json", r#"{"version": 2, "source": "x"}"#);
    let err = load(&path);
    assert!(
        err.starts_with(&format!(
            "{}: workload model version 2, but this build reads version 1",
            path.display()
        )),
        "{err}"
    );
    let path = write("unversioned.json", r#"{"source": "x"}"#);
    assert!(load(&path).contains("version missing"), "{}", load(&path));

    // Well-formed JSON of the right version whose content is wrong: the field is named.
    let model = WorkloadModel::fit(&cluster10()).unwrap();
    let mut json = serde_json::to_value(&model).unwrap();
    json["arrivals"]["hour_of_week_rate"][3] = serde_json::json!(-1.0);
    let path = write("negative-rate.json", &json.to_string());
    let err = load(&path);
    assert!(err.contains("hour_of_week_rate"), "{err}");
    let mut json = serde_json::to_value(&model).unwrap();
    json["mix"]["classes"][0]["duration_s"] = serde_json::json!([1.0, 2.0]);
    let path = write("short-quantiles.json", &json.to_string());
    let err = load(&path);
    assert!(err.contains("classes[0]: 2 knots, expected 64"), "{err}");
    let mut json = serde_json::to_value(&model).unwrap();
    json["mix"]["classes"][0]["shape"]["tasks"] = serde_json::json!(0);
    let path = write("no-tasks.json", &json.to_string());
    assert!(
        load(&path).contains("classes[0]: tasks 0 out of range"),
        "{}",
        load(&path)
    );

    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn shapes_tenants_and_estimates_carry_over() {
    // The hand-written tiny trace: 3 tenants, fractional and CPU-only jobs, gangs, GPU types,
    // priorities, QoS classes, kinds, and estimates on some jobs.
    let real = read_trace(&repo_file("traces/tiny.csv"), None)
        .unwrap()
        .trace;
    let model = WorkloadModel::fit(&real).unwrap();
    let synth = model.synth(5_000, 2);
    assert_eq!(synth.tenants().len(), real.tenants().len());
    let key = |j: &JobSpec| {
        let shape = JobSpec {
            id: JobId(0),
            name: String::new(),
            submit: SimTime::ZERO,
            tenant: TenantId(0),
            estimate: None,
            ..j.clone()
        };
        format!("{shape:?}")
    };
    // Every synthetic job has a real job's shape (fewer than 256 shapes: none merged), and a
    // tenant that submitted that shape: tenants follow the shape (the sweeps are vision's).
    for job in synth.jobs() {
        let matching: Vec<&JobSpec> = real.jobs().iter().filter(|r| key(r) == key(job)).collect();
        assert!(!matching.is_empty(), "no real job is like {job:?}");
        let tenant = synth.tenant_name(job.tenant);
        assert!(
            matching
                .iter()
                .any(|r| real.tenant_name(r.tenant) == tenant),
            "{job}: tenant {tenant} never submitted this shape"
        );
    }
    // Estimates on the same share of jobs: 5,000 draws estimate it within about 0.01 (more
    // with batches copying neighbours' durations, not their estimates: those are independent).
    let share = |t: &Trace| {
        t.jobs().iter().filter(|j| j.estimate.is_some()).count() as f64 / t.len() as f64
    };
    assert!(
        (share(&real) - share(&synth)).abs() < 0.03,
        "{} vs {}",
        share(&real),
        share(&synth)
    );
    // An estimate is a duration times a ratio the trace had: here from 1.0 to 2.0.
    for job in synth.jobs() {
        if let Some(estimate) = job.estimate {
            let ratio = estimate.secs_f64() / synth.true_duration(job.id).secs_f64().max(1.0);
            assert!((0.99..=2.01).contains(&ratio), "{job}: ratio {ratio}");
        }
    }
}

#[test]
fn openb_shares_carry_over() {
    // 381 pods of the Alibaba openb excerpt: fractional GPUs and two QoS classes.
    let real = read_trace(&repo_file("traces/openb/openb_pod_excerpt.csv"), None)
        .unwrap()
        .trace;
    let model = WorkloadModel::fit(&real).unwrap();
    let synth = model.synth(20_000, 4);
    println!("openb excerpt: {} classes", model.parts().mix.classes.len());
    let share = |t: &Trace, f: &dyn Fn(&JobSpec) -> bool| {
        t.jobs().iter().filter(|j| f(j)).count() as f64 / t.len() as f64
    };
    let (ra, sa) = (arrivals(&real), arrivals(&synth));
    let check = |what: &str, f: &dyn Fn(&JobSpec) -> bool| {
        let (r, s) = (share(&real, f), share(&synth, f));
        assert!(shares_agree(what, (r, &ra), (s, &sa)), "{what}");
    };
    check("fractional", &|j| j.task.is_fractional());
    check("best-effort", &|j| j.qos == crate::job::Qos::BestEffort);
    check("over 4 GPUs", &|j| j.gpus_total() > 4);
}

#[test]
fn rare_shapes_merge_into_kept_classes() {
    use crate::job::TaskRequest;
    use crate::job::tests::job;
    // 255 one-GPU shapes of 3 jobs (CPU 1000..1255 milli), one 8-GPU shape of 2 jobs, and
    // ten 7-GPU shapes of 1 job: 266 shapes. The 256 most frequent are kept; the ten 7-GPU
    // jobs are nearest the 8-GPU class (1000 milli-GPU off, against 6000), which gets 12.
    let mut jobs = Vec::new();
    for i in 0..255 {
        jobs.extend(
            (0..3).map(|k| job("one", 100 * (3 * i + k), TaskRequest::whole(1, 1000 + i, 0))),
        );
    }
    jobs.extend((0..2).map(|k| job("eight", 100_000 + 100 * k, TaskRequest::whole(8, 0, 0))));
    jobs.extend((0..10).map(|k| job("seven", 200_000 + 100 * k, TaskRequest::whole(7, k, 0))));
    let n = jobs.len();
    let trace = Trace::new(
        "t",
        jobs,
        vec![SimTime::from_secs(600); n],
        vec!["d".into()],
    )
    .unwrap();
    let mix = &WorkloadModel::fit(&trace).unwrap().parts().mix.clone();
    assert_eq!(mix.classes.len(), shapes::MAX_CLASSES);
    assert_eq!(mix.classes.iter().map(|c| c.jobs).sum::<u64>(), n as u64);
    let eight = mix.classes.iter().find(|c| c.shape.task.gpus == 8).unwrap();
    assert_eq!(eight.jobs, 12);
    assert!(mix.classes.iter().all(|c| c.shape.task.gpus != 7));
}
