//! End-to-end tests of the environment: the conformance check on several configurations and
//! episode-level sanity checks.

use super::*;
use crate::cluster::{ClusterSpec, load_cluster};
use crate::job::Trace;
use crate::trace::read_trace;
use crate::trace::synthetic::synthetic_trace;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::path::Path;
use std::sync::Arc;

fn cluster() -> Arc<ClusterSpec> {
    Arc::new(load_cluster("4x8:V100").unwrap())
}

fn synthetic() -> Trace {
    synthetic_trace(40, &cluster(), 0.9, 7)
}

fn itp_window() -> Trace {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces/itp/cluster10.csv");
    let t = read_trace(&path, None).unwrap().trace;
    let from = t.jobs()[100].submit;
    let to = t.jobs()[140].submit;
    t.window(from, to)
}

fn cfg(reward: RewardConfig, max_steps: u64, max_sim_time_s: f64) -> EnvConfig {
    let mut c = EnvConfig {
        reward,
        max_steps,
        max_sim_time_s,
        ..EnvConfig::default()
    };
    c.sim.skip_unplaceable = true;
    c
}

/// `cfg` with Gavel's throughput table: typed jobs run at its rates.
fn gavel_cfg() -> EnvConfig {
    let mut c = cfg(RewardConfig::default(), 0, 0.0);
    c.sim.throughputs = Some("gavel".into());
    c
}

/// Plays one episode with `choose(obs, rng)`; returns the total reward and the last step.
fn play(
    env: &mut SchedEnv<'_>,
    seed: u64,
    mut choose: impl FnMut(&Observation, &mut StdRng) -> usize,
) -> (f64, Step) {
    let (mut obs, _) = env.reset(seed).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut total = 0.0;
    loop {
        let s = env.step(choose(&obs, &mut rng)).unwrap();
        total += f64::from(s.reward);
        if s.terminated || s.truncated {
            return (total, s);
        }
        obs = s.obs;
    }
}

fn first(obs: &Observation, _: &mut StdRng) -> usize {
    obs.legal_actions().next().unwrap()
}

fn random(obs: &Observation, rng: &mut StdRng) -> usize {
    let legal: Vec<usize> = obs.legal_actions().collect();
    legal[rng.random_range(0..legal.len())]
}

#[test]
fn check_env_passes_on_every_configuration() {
    let spec = cluster();
    let traces = [synthetic(), itp_window()];
    for trace in &traces {
        for objective in Objective::ALL {
            for (max_steps, max_time) in [(0, 0.0), (25, 0.0), (0, 3600.0)] {
                let c = cfg(RewardConfig::objective(objective), max_steps, max_time);
                let report = check_env(
                    || SchedEnv::new(trace, Arc::clone(&spec), c.clone()),
                    &[1, 2],
                )
                .unwrap_or_else(|e| panic!("{} {objective:?} {max_steps}: {e}", trace.name));
                // The options that change the action set: LAS preemption candidates (with
                // the tick they need) and the work-conserving mask.
                for (las, conserving, hold) in [
                    (true, false, None),
                    (false, true, None),
                    (true, true, None),
                    (false, false, Some(0.0)),
                    (true, true, Some(1800.0)),
                ] {
                    let mut o = c.clone();
                    o.las_preemption = las;
                    o.work_conserving = conserving;
                    o.max_hold_s = hold;
                    o.sim.tick_s = if las { 600.0 } else { 0.0 };
                    check_env(|| SchedEnv::new(trace, Arc::clone(&spec), o.clone()), &[1])
                        .unwrap_or_else(|e| {
                            panic!(
                                "{} {objective:?} las {las} wc {conserving} hold {hold:?}: {e}",
                                trace.name
                            )
                        });
                }
                assert_eq!(report.episodes, 2);
                if max_steps > 0 {
                    assert!(report.steps <= 2 * max_steps);
                }
            }
        }
    }
}

#[test]
fn greedy_finishes_every_job_and_always_wait_stalls() {
    let spec = cluster();
    for trace in [synthetic(), itp_window()] {
        let mut env = SchedEnv::new(
            &trace,
            Arc::clone(&spec),
            cfg(RewardConfig::default(), 0, 0.0),
        )
        .unwrap();
        let (_, last) = play(&mut env, 3, first);
        assert!(last.terminated && !last.truncated, "{:?}", last.info);
        assert_eq!(last.info.end, Some(EndReason::AllDone));
        assert_eq!(last.info.finished, last.info.jobs);
        let (_, last) = play(&mut env, 3, |_, _| WAIT_ACTION);
        assert!(last.truncated && !last.terminated, "{:?}", last.info);
        assert_eq!(last.info.end, Some(EndReason::Stalled));
        assert_eq!(last.info.finished, 0);
        assert_eq!(last.info.terms.unfinished, last.info.jobs);
        assert!(matches!(env.step(WAIT_ACTION), Err(EnvError::EpisodeOver)));
    }
}

#[test]
fn greedy_beats_random_on_the_jct_reward() {
    let trace = synthetic();
    let spec = cluster();
    let mut env = SchedEnv::new(&trace, spec, cfg(RewardConfig::default(), 0, 0.0)).unwrap();
    let seeds = [1, 2, 3, 4];
    let mean = |f: &mut dyn FnMut(u64) -> f64| seeds.iter().map(|s| f(*s)).sum::<f64>() / 4.0;
    let greedy = mean(&mut |s| play(&mut env, s, first).0);
    let rand = mean(&mut |s| play(&mut env, s, random).0);
    assert!(greedy.is_finite() && rand.is_finite());
    assert!(greedy > rand, "greedy {greedy} vs random {rand}");
}

#[test]
fn horizons_truncate() {
    let trace = synthetic();
    let spec = cluster();
    let mut env = SchedEnv::new(
        &trace,
        Arc::clone(&spec),
        cfg(RewardConfig::default(), 5, 0.0),
    )
    .unwrap();
    let (_, last) = play(&mut env, 1, first);
    assert_eq!(
        (last.info.steps, last.info.end),
        (5, Some(EndReason::StepLimit))
    );
    assert!(last.truncated && !last.terminated);
    let mut env = SchedEnv::new(&trace, spec, cfg(RewardConfig::default(), 0, 600.0)).unwrap();
    let (_, last) = play(&mut env, 1, |_, _| WAIT_ACTION);
    assert!(last.truncated);
    assert!(matches!(
        last.info.end,
        Some(EndReason::TimeLimit | EndReason::Stalled)
    ));
}

#[test]
fn candidates_are_feasible_and_wait_is_last() {
    // The synthetic jobs all submitted at once, so one instant has many choices.
    let trace = synthetic().map_submit(|_| crate::units::SimTime::ZERO);
    let mut env = SchedEnv::new(&trace, cluster(), cfg(RewardConfig::default(), 0, 0.0)).unwrap();
    let (obs, info) = env.reset(0).unwrap();
    assert!(info.candidates >= 1);
    assert_eq!(obs.legal_actions().last(), Some(WAIT_ACTION));
    assert_eq!(obs.row(WAIT_ACTION)[0], 1.0);
    assert_eq!(obs.row(0)[0], 0.0);
    assert!(env.candidate(0).is_some() && env.candidate(WAIT_ACTION).is_none());
    // Candidates of one job differ in their node sets (duplicates are merged).
    let n = info.candidates;
    for i in 0..n {
        for k in i + 1..n {
            let (a, b) = (env.candidate(i).unwrap(), env.candidate(k).unwrap());
            let nodes = |c: &Candidate| {
                let mut v: Vec<_> = c.placement.tasks.iter().map(|t| t.node).collect();
                v.sort_unstable();
                v.dedup();
                v
            };
            assert!(a.placement.job != b.placement.job || nodes(a) != nodes(b));
        }
    }
    // Placing a candidate starts its job now: while other candidates remain, the sim time does
    // not move and no reward accrues; once none remain, time runs to the next choice.
    let mut now_s = info.now_s;
    let mut same_instant = 0;
    for _ in 0..50 {
        let s = env.step(0).unwrap();
        if s.info.now_s == now_s {
            assert_eq!(s.reward, 0.0);
            same_instant += 1;
        }
        if s.terminated || s.truncated {
            break;
        }
        now_s = s.info.now_s;
    }
    assert!(same_instant > 0);
    assert_eq!(CANDIDATE_FEATURES.len(), CANDIDATE_WIDTH);
    assert_eq!(SchedEnv::schema_version(), FEATURE_SCHEMA_VERSION);
}

#[test]
fn vec_env_auto_resets_over_random_windows() {
    let spec = cluster();
    let train = synthetic_trace(200, &spec, 0.9, 11);
    let pool = window_pool(&train, 20, 6, 5).unwrap();
    let mut venv = VecEnv::new(&pool, spec, cfg(RewardConfig::default(), 40, 0.0), 3, 9).unwrap();
    let mut obs = venv.reset().unwrap();
    assert_eq!(obs.len(), 3);
    let mut ends = 0;
    for _ in 0..200 {
        let actions: Vec<usize> = obs
            .iter()
            .map(|o| o.legal_actions().next().unwrap())
            .collect();
        let s = venv.step(&actions).unwrap();
        for i in 0..3 {
            assert_eq!(s.final_obs[i].is_some(), s.terminated[i] || s.truncated[i]);
            assert!(s.rewards[i].is_finite());
        }
        ends += s.final_obs.iter().filter(|o| o.is_some()).count();
        obs = s.obs;
    }
    assert!(ends >= 3, "{ends}");
    assert!(venv.step(&[WAIT_ACTION]).is_err());
}

#[test]
fn vec_env_steps_the_same_on_one_thread_and_on_several() {
    let spec = Arc::new(load_cluster("4x8:V100").unwrap());
    let train = synthetic_trace(200, &spec, 0.9, 11);
    let pool = window_pool(&train, 20, 6, 5).unwrap();
    let make = || {
        VecEnv::new(
            &pool,
            Arc::clone(&spec),
            cfg(RewardConfig::default(), 40, 0.0),
            4,
            9,
        )
        .unwrap()
    };
    // Steps every VecEnv of `venvs` in turn, 120 times; each one's steps.
    let run = |mut venvs: Vec<VecEnv<'_>>| {
        let mut obs: Vec<_> = venvs.iter_mut().map(|v| v.reset().unwrap()).collect();
        let mut steps = vec![Vec::new(); venvs.len()];
        for t in 0..120 {
            for (k, venv) in venvs.iter_mut().enumerate() {
                // Alternate the first legal action and "wait" so episodes end at different
                // times.
                let actions: Vec<usize> = obs[k]
                    .iter()
                    .enumerate()
                    .map(|(i, o)| {
                        if (t + i) % 3 == 0 {
                            WAIT_ACTION
                        } else {
                            o.legal_actions().next().unwrap()
                        }
                    })
                    .collect();
                let s = venv.step(&actions).unwrap();
                obs[k] = s.obs.clone();
                steps[k].push(s);
            }
        }
        steps
    };
    let one = run(vec![make().with_threads(1)]).remove(0);
    assert_eq!(one, run(vec![make().with_threads(3)])[0]);
    assert_eq!(one, run(vec![make().with_threads(4)])[0]);
    // Two VecEnvs taking turns on one shared pool of 3 threads (as a trainer's, one per
    // training trace) step as each would alone.
    let shared = StepPool::new(3).unwrap();
    assert_eq!(shared.threads(), 3);
    let both = run(vec![
        make().with_pool(Some(&shared)),
        make().with_pool(Some(&shared)),
    ]);
    assert_eq!(both, vec![one.clone(), one]);
    assert!(StepPool::new(1).is_none());
}

/// `trace` with QoS classes mixed by job index (guaranteed, best-effort, burstable,
/// latency-sensitive, ...), every job preemptible.
fn mixed_qos(trace: &Trace) -> Trace {
    use crate::job::Qos;
    let classes = [
        Qos::Guaranteed,
        Qos::BestEffort,
        Qos::Burstable,
        Qos::LatencySensitive,
    ];
    let jobs: Vec<_> = trace
        .jobs()
        .iter()
        .enumerate()
        .map(|(i, j)| crate::job::JobSpec {
            qos: classes[i % classes.len()],
            preemptible: true,
            ..j.clone()
        })
        .collect();
    let durations = trace
        .jobs()
        .iter()
        .map(|j| trace.true_duration(j.id))
        .collect();
    Trace::new(
        format!("{}-mixed-qos", trace.name),
        jobs,
        durations,
        trace.tenants().to_vec(),
    )
    .unwrap()
}

#[test]
fn a_blocked_high_qos_job_gets_one_preemption_candidate() {
    use crate::job::tests::job;
    use crate::job::{Qos, TaskRequest};
    use crate::units::{JobId, SimTime};
    // One node of 8 GPUs. A best-effort 8-GPU job starts at 0; a guaranteed 4-GPU job arrives
    // at 60 s and fits only by preempting it.
    let spec = Arc::new(load_cluster("1x8:V100").unwrap());
    let mut be = job("be", 0, TaskRequest::whole(8, 1000, 1024));
    be.qos = Qos::BestEffort;
    let mut hi = job("hi", 60, TaskRequest::whole(4, 1000, 1024));
    hi.id = JobId(1);
    hi.qos = Qos::Guaranteed;
    let trace = Trace::new(
        "preempt",
        vec![be, hi],
        vec![SimTime::from_secs(3600), SimTime::from_secs(600)],
        vec!["t".into()],
    )
    .unwrap();
    let mut env = SchedEnv::new(&trace, spec, cfg(RewardConfig::default(), 0, 0.0)).unwrap();
    let (_, info) = env.reset(0).unwrap();
    assert_eq!(info.candidates, 1);
    let c = env.candidate(0).unwrap();
    assert_eq!((c.placement.job, c.preemptions.len()), (JobId(0), 0));
    let s = env.step(0).unwrap();
    // At 60 s: the only candidate preempts the best-effort job for the guaranteed one.
    assert_eq!((s.info.now_s, s.info.candidates), (60.0, 1));
    let c = env.candidate(0).unwrap().clone();
    assert_eq!(c.placement.job, JobId(1));
    assert_eq!(c.preemptions, vec![JobId(0)]);
    assert_eq!((c.stats.victims, c.stats.victim_gpus), (1, 8));
    let row = s.obs.row(0);
    assert!((row[22] - 2f32.ln()).abs() < 1e-6);
    assert_eq!(row[23], 1.0);
    // Taking it preempts the victim and starts the job; the best-effort job (lower class) can
    // preempt nobody, so it waits and both finish.
    let mut s = env.step(0).unwrap();
    while !(s.terminated || s.truncated) {
        for a in s.obs.legal_actions().filter(|a| *a != WAIT_ACTION) {
            assert!(env.candidate(a).unwrap().preemptions.is_empty());
        }
        let a = s.obs.legal_actions().next().unwrap();
        s = env.step(a).unwrap();
    }
    assert_eq!(s.info.end, Some(EndReason::AllDone));
    let result = env.finish("test").unwrap();
    assert_eq!(result.summary.rejected_decisions, 0);
    let (be, hi) = (&result.jobs[0], &result.jobs[1]);
    assert_eq!(be.preemptions, 1);
    assert_eq!(hi.first_start, Some(SimTime::from_secs(60)));
    assert_eq!(hi.preemptions, 0);
}

#[test]
fn check_env_passes_with_preemption_candidates() {
    let spec = cluster();
    for trace in [mixed_qos(&synthetic()), mixed_qos(&itp_window())] {
        let c = cfg(RewardConfig::default(), 0, 0.0);
        check_env(
            || SchedEnv::new(&trace, Arc::clone(&spec), c.clone()),
            &[1, 2],
        )
        .unwrap_or_else(|e| panic!("{}: {e}", trace.name));
    }
    // Taking preemption candidates whenever offered: some occur, none is rejected.
    let trace = mixed_qos(&synthetic());
    let mut taken = 0;
    for seed in [1, 2] {
        let mut env = SchedEnv::new(
            &trace,
            Arc::clone(&spec),
            cfg(RewardConfig::default(), 0, 0.0),
        )
        .unwrap();
        let (mut obs, _) = env.reset(seed).unwrap();
        loop {
            let legal: Vec<usize> = obs.legal_actions().collect();
            let preempting = legal
                .iter()
                .copied()
                .find(|a| env.candidate(*a).is_some_and(|c| !c.preemptions.is_empty()));
            if let Some(a) = preempting {
                let c = env.candidate(a).unwrap();
                assert!(obs.row(a)[22] > 0.0 && obs.row(a)[23] > 0.0);
                assert!(!c.preemptions.contains(&c.placement.job));
                taken += 1;
            }
            let s = env.step(preempting.unwrap_or(legal[0])).unwrap();
            if s.terminated || s.truncated {
                break;
            }
            obs = s.obs;
        }
        let result = env.finish("test").unwrap();
        assert_eq!(result.summary.rejected_decisions, 0, "seed {seed}");
    }
    assert!(taken > 0, "no preemption candidate occurred");
}

/// Plays an episode taking the teacher's action at every step; returns the simulation's
/// summary and how many steps matched the teacher exactly.
fn imitate_episode(
    trace: &Trace,
    spec: &Arc<ClusterSpec>,
    teacher: &str,
    c: EnvConfig,
) -> (crate::metrics::Summary, u64, u64) {
    let mut env = SchedEnv::new(trace, Arc::clone(spec), c).unwrap();
    let mut t = crate::policy::build_policy(teacher, 3).unwrap();
    env.reset(3).unwrap();
    let (mut steps, mut exact) = (0, 0);
    loop {
        let (a, same) = env.imitate(t.as_mut()).unwrap();
        steps += 1;
        exact += u64::from(same);
        let s = env.step(a).unwrap();
        if s.terminated || s.truncated {
            assert!(s.terminated, "{teacher}: episode truncated");
            break;
        }
    }
    assert!(
        env.imitate(t.as_mut()).is_err(),
        "imitate after the end is an error"
    );
    (env.finish(teacher).unwrap().summary, steps, exact)
}

#[test]
fn imitating_a_heuristic_reproduces_its_simulation() {
    // Following fifo/best-fit or sjf/best-fit step by step in the environment must schedule
    // exactly as the heuristic does in the simulator: the shortlist holds the head of the
    // queue and the shortest predicted jobs, and best-fit proposes.
    let spec = cluster();
    for trace in [synthetic(), itp_window()] {
        for teacher in ["fifo/best-fit", "sjf/best-fit"] {
            let c = cfg(RewardConfig::default(), 0, 0.0);
            let (summary, steps, exact) = imitate_episode(&trace, &spec, teacher, c);
            let mut sim_cfg = cfg(RewardConfig::default(), 0, 0.0).sim;
            sim_cfg.seed = 3;
            let mut p = crate::policy::build_policy(teacher, 3).unwrap();
            let direct = crate::sim::Simulator::new(&trace, Arc::clone(&spec), &sim_cfg)
                .unwrap()
                .run(p.as_mut(), &mut |_| {})
                .summary;
            assert_eq!(summary.finished, direct.finished, "{teacher}");
            assert!(
                (summary.avg_jct_s - direct.avg_jct_s).abs() < 1e-6,
                "{teacher} on {}: env {} vs simulator {}",
                trace.name,
                summary.avg_jct_s,
                direct.avg_jct_s
            );
            assert!(
                exact * 100 >= steps * 95,
                "{teacher}: {exact}/{steps} exact"
            );
        }
    }
}

#[test]
fn the_shortlist_holds_the_queue_head_and_the_shortest_jobs() {
    use crate::job::JobSpec;
    use crate::units::JobId;
    // 10 one-GPU jobs submitted together on a free 8-GPU node, with estimates of 10, 9, ...,
    // 1 hours, and jobs_considered 4: the shortlist is the oldest (10 h), the least served of
    // the rest (all unserved: the next oldest, 9 h), the shortest (1 h), and the first by
    // Gittins index (nothing has finished, every index is equal: the next oldest, 8 h).
    let spec = Arc::new(load_cluster("1x8:V100").unwrap());
    let base = synthetic_trace(10, &spec, 0.9, 1);
    let jobs: Vec<JobSpec> = base
        .jobs()
        .iter()
        .enumerate()
        .map(|(i, j)| {
            let mut j = j.clone();
            j.id = JobId(i as u32);
            j.submit = crate::units::SimTime::ZERO;
            j.tasks = 1;
            j.task.gpus = 1;
            j.task.gpu_milli = 1000;
            j.task.cpu_milli = 1000;
            j.task.mem_mib = 1024;
            j.estimate = Some(crate::units::SimTime::from_secs(3600 * (10 - i as u64)));
            j
        })
        .collect();
    let durations = (0..10).map(|i| base.true_duration(JobId(i))).collect();
    let trace = Trace::new("shortlist", jobs, durations, base.tenants().to_vec()).unwrap();
    let mut c = cfg(RewardConfig::default(), 0, 0.0);
    c.jobs_considered = 4;
    c.proposers = vec![Proposer::BestFit];
    let mut env = SchedEnv::new(&trace, spec, c).unwrap();
    env.reset(0).unwrap();
    let jobs: Vec<u32> = (0..4)
        .map(|a| env.candidate(a).unwrap().placement.job.0)
        .collect();
    assert_eq!(jobs, vec![0, 1, 9, 2]);
    assert!(env.candidate(4).is_none());
    let obs = env.observation().unwrap();
    let shortness = CANDIDATE_FEATURES
        .iter()
        .position(|f| *f == "shortness_rank")
        .unwrap();
    // The oldest job is the longest: rank 9 of 10.
    assert!((obs.row(0)[shortness] - 0.9).abs() < 1e-6);
    assert_eq!(obs.row(2)[shortness], 0.0);
}

#[test]
fn gittins_candidates_let_the_env_follow_the_gittins_policy() {
    // With Gittins preemption candidates and the shortlist's Gittins quarter, following
    // gittins/best-fit/gittins-preempt in the environment maps nearly every decision to a
    // candidate and finishes every job.
    let spec = cluster();
    let trace = synthetic_trace(80, &spec, 1.2, 5);
    let teacher = "gittins/best-fit/gittins-preempt";
    let mut c = cfg(RewardConfig::default(), 0, 0.0);
    c.gittins_preemption = true;
    c.sim.tick_s = 600.0;
    let (summary, steps, exact) = imitate_episode(&trace, &spec, teacher, c.clone());
    eprintln!(
        "{teacher}: {exact}/{steps} exact, {} preemptions",
        summary.preemptions
    );
    assert_eq!(summary.finished, 80);
    assert!(exact * 100 >= steps * 90, "{exact}/{steps} exact");
}

#[test]
fn a_policy_that_always_preempts_still_leaves_every_instant() {
    // The worst case for preemption cycles: both rules offered, wait masked whenever a
    // candidate exists, and a policy that takes a preemption whenever one is offered. A job
    // started at this instant is never a victim, so no two jobs can preempt each other back
    // and forth at one instant; the episode ends with every job done, well inside the cap.
    let spec = cluster();
    let trace = synthetic_trace(80, &spec, 1.2, 5);
    let mut c = cfg(RewardConfig::default(), 20_000, 0.0);
    c.las_preemption = true;
    c.gittins_preemption = true;
    c.work_conserving = true;
    c.max_hold_s = Some(0.0);
    c.sim.tick_s = 600.0;
    let mut env = SchedEnv::new(&trace, Arc::clone(&spec), c).unwrap();
    let (mut obs, _) = env.reset(1).unwrap();
    let mut preemptions = 0u64;
    loop {
        let legal: Vec<usize> = obs.legal_actions().collect();
        let pick = legal
            .iter()
            .copied()
            .find(|a| env.candidate(*a).is_some_and(|c| !c.preemptions.is_empty()))
            .unwrap_or(legal[0]);
        preemptions += u64::from(
            env.candidate(pick)
                .is_some_and(|c| !c.preemptions.is_empty()),
        );
        let s = env.step(pick).unwrap();
        if s.terminated || s.truncated {
            assert!(
                s.terminated,
                "truncated at the step cap: a preemption cycle"
            );
            break;
        }
        obs = s.obs;
    }
    assert!(preemptions > 0, "the workload should offer preemptions");
    assert_eq!(env.finish("preempt-always").unwrap().summary.finished, 80);
}

#[test]
fn holding_jobs_back_never_forces_a_preemption() {
    // Wait masked whenever a job can start (max_hold_s = 0), LAS preemption candidates on, and
    // a policy that waits whenever it may: it must never be made to preempt, and every job
    // still finishes (preemption is a choice, never the only legal action).
    let spec = cluster();
    let trace = synthetic_trace(80, &spec, 1.2, 5);
    let mut c = cfg(RewardConfig::default(), 0, 0.0);
    c.las_preemption = true;
    c.work_conserving = true;
    c.max_hold_s = Some(0.0);
    c.sim.tick_s = 600.0;
    let mut env = SchedEnv::new(&trace, Arc::clone(&spec), c).unwrap();
    let (mut obs, _) = env.reset(1).unwrap();
    let mut offered = 0u64;
    loop {
        let legal: Vec<usize> = obs.legal_actions().collect();
        offered += u64::from(
            legal
                .iter()
                .any(|a| env.candidate(*a).is_some_and(|c| !c.preemptions.is_empty())),
        );
        // Wait if it may; else the first candidate that preempts nobody (one must exist).
        let pick = if legal.contains(&WAIT_ACTION) {
            WAIT_ACTION
        } else {
            *legal
                .iter()
                .find(|a| env.candidate(**a).is_some_and(|c| c.preemptions.is_empty()))
                .expect("acting is forced only by a candidate that preempts nobody")
        };
        let s = env.step(pick).unwrap();
        if s.terminated || s.truncated {
            assert!(s.terminated);
            break;
        }
        obs = s.obs;
    }
    assert!(offered > 0, "the workload should offer preemptions");
    let summary = env.finish("wait-when-legal").unwrap().summary;
    assert_eq!(summary.finished, 80);
    assert_eq!(summary.preemptions, 0);
}

#[test]
fn las_preemption_candidates_let_the_env_follow_tiresias() {
    // With LAS preemption candidates and the 10-minute tick, following
    // tiresias/best-fit/las-preempt in the environment preempts as the heuristic does and lands
    // close to its simulated average JCT (the shortlist is not Tiresias' ordering, so an exact
    // match is not guaranteed).
    let spec = cluster();
    let trace = synthetic_trace(80, &spec, 1.2, 5);
    let teacher = "tiresias/best-fit/las-preempt";
    let mut c = cfg(RewardConfig::default(), 0, 0.0);
    c.las_preemption = true;
    c.sim.tick_s = 600.0;
    let (summary, steps, exact) = imitate_episode(&trace, &spec, teacher, c.clone());
    let mut sim_cfg = c.sim.clone();
    sim_cfg.seed = 3;
    let mut p = crate::policy::build_policy(teacher, 3).unwrap();
    let direct = crate::sim::Simulator::new(&trace, Arc::clone(&spec), &sim_cfg)
        .unwrap()
        .run(p.as_mut(), &mut |_| {})
        .summary;
    assert!(
        direct.preemptions > 0,
        "the workload should make LAS preempt"
    );
    assert!(summary.preemptions > 0, "{exact}/{steps} exact");
    let gap = (summary.avg_jct_s - direct.avg_jct_s).abs() / direct.avg_jct_s;
    assert!(
        gap < 0.05,
        "env {} vs simulator {} ({exact}/{steps} exact)",
        summary.avg_jct_s,
        direct.avg_jct_s
    );
    // Without the LAS candidates the same teacher cannot preempt at all.
    c.las_preemption = false;
    let (without, _, _) = imitate_episode(&trace, &spec, teacher, c);
    assert_eq!(without.preemptions, 0);
}

#[test]
fn a_work_conserving_env_never_lets_the_cluster_idle() {
    // Always choosing "wait" where it is legal: without the option the episode stalls; with
    // it, wait is masked whenever nothing would run, so every job still finishes.
    let spec = cluster();
    let trace = synthetic();
    let mut c = cfg(RewardConfig::default(), 0, 0.0);
    c.work_conserving = true;
    let mut env = SchedEnv::new(&trace, spec, c).unwrap();
    let mut masked = 0;
    let (_, last) = play(&mut env, 2, |obs, _| {
        if obs.mask[WAIT_ACTION] {
            WAIT_ACTION
        } else {
            masked += 1;
            obs.legal_actions().next().unwrap()
        }
    });
    assert!(last.terminated, "{:?}", last.info);
    assert_eq!(last.info.finished, last.info.jobs);
    assert!(masked > 0);
}

#[test]
fn a_hold_bound_never_lets_a_startable_job_wait_past_it() {
    // Always choosing "wait" where it is legal. With a bound of 0 wait is legal only where
    // nothing can start, so no decision point ends with a candidate left; with a bound of an
    // hour, wait is masked exactly where some candidate's job has waited that long.
    let spec = cluster();
    let trace = synthetic();
    for hold in [0.0, 3600.0] {
        let mut c = cfg(RewardConfig::default(), 0, 0.0);
        c.max_hold_s = Some(hold);
        let mut env = SchedEnv::new(&trace, Arc::clone(&spec), c).unwrap();
        let (mut masked, mut waited_with_candidates) = (0, 0);
        let (_, last) = play(&mut env, 1, |obs, _| {
            let candidates = (0..WAIT_ACTION).filter(|a| obs.mask[*a]).count();
            if obs.mask[WAIT_ACTION] {
                if candidates > 0 {
                    waited_with_candidates += 1;
                }
                WAIT_ACTION
            } else {
                masked += 1;
                obs.legal_actions().next().unwrap()
            }
        });
        assert!(last.terminated, "hold {hold}: {:?}", last.info);
        assert_eq!(last.info.finished, last.info.jobs, "hold {hold}");
        assert!(masked > 0, "hold {hold}");
        if hold == 0.0 {
            assert_eq!(waited_with_candidates, 0);
        } else {
            assert!(
                waited_with_candidates > 0,
                "an hour's hold allows some waits"
            );
        }
    }
    // A bad bound is refused, naming the field.
    let mut c = cfg(RewardConfig::default(), 0, 0.0);
    c.max_hold_s = Some(-1.0);
    let err = SchedEnv::new(&trace, spec, c).unwrap_err().to_string();
    assert!(err.contains("max_hold_s"), "{err}");
}

/// The candidates' jobs and rows at `ctx` on one 8-GPU node (the test worlds below), with
/// jobs_considered 3 and best-fit proposals.
fn enumerate_on_one_node(ctx: &crate::policy::DecisionContext<'_>) -> (Vec<u32>, Vec<Vec<f32>>) {
    let featurizer = Featurizer {
        total_gpu_milli: 8000,
        total_gpus: 8,
        total_cpu_milli: 64_000,
        jobs_considered: 3,
    };
    let mut e = Enumerator::new(&[Proposer::BestFit], featurizer, MAX_CANDIDATES - 1);
    let point = e.enumerate(ctx, 0, crate::units::SimTime::ZERO);
    let obs = point.observation(&featurizer, true);
    let ids = point.candidates.iter().map(|c| c.placement.job.0).collect();
    let rows = (0..point.candidates.len())
        .map(|a| obs.row(a).to_vec())
        .collect();
    (ids, rows)
}

/// The candidates' jobs and the rows of a 1x8 V100 node at 10 h, with 4 one-GPU jobs
/// submitted at 0 and jobs_considered 3, where job 1 ran 1 h (3,600 GPU-s, Tiresias' queue 1)
/// and was preempted `idle_h` hours ago.
fn starved_world(idle_h: u64) -> (Vec<u32>, Vec<Vec<f32>>) {
    use crate::cluster::ClusterState;
    use crate::cluster::tests::uniform;
    use crate::job::TaskRequest;
    use crate::job::tests::job;
    use crate::policy::{DecisionContext, JobRuntime, JobState};
    use crate::units::{JobId, SimTime};
    use std::cell::RefCell;
    let spec = Arc::new(uniform(1, 8, "V100", 64_000, 1 << 20));
    let jobs: Vec<_> = (0..4)
        .map(|i| {
            let mut j = job(&format!("j{i}"), 0, TaskRequest::whole(1, 1000, 1024));
            j.id = JobId(i);
            // Job 1 is long, so only Tiresias' third can list it.
            j.estimate = Some(SimTime::from_secs(3600 * if i == 1 { 100 } else { 2 }));
            j
        })
        .collect();
    let now = SimTime::from_secs(10 * 3600);
    let mut runtime = vec![
        JobRuntime {
            state: JobState::Pending,
            ..JobRuntime::default()
        };
        4
    ];
    runtime[1].attained_ms = 3_600_000;
    runtime[1].attained_gpu_milli_ms = 3_600_000 * 1000;
    runtime[1].preemptions = 1;
    runtime[1].last_stop = Some(now.saturating_sub(SimTime::from_secs(idle_h * 3600)));
    let pending = (0..4).map(JobId).collect();
    let cluster = RefCell::new(ClusterState::new(Arc::clone(&spec)));
    enumerate_on_one_node(&DecisionContext::new(
        now, &jobs, &runtime, &pending, &cluster,
    ))
}

#[test]
fn a_starved_preempted_job_is_promoted_into_the_shortlist() {
    let feature = |name: &str| CANDIDATE_FEATURES.iter().position(|f| *f == name).unwrap();
    let (queue, idle, promoted) = (
        feature("las_queue"),
        feature("idle_log_min"),
        feature("promoted"),
    );
    // Idle 9 h >= 8 x 1 h run: promoted to queue 0, so Tiresias' third lists it right after
    // the oldest job, ahead of the fresh job 2 (the shortest third then takes job 2).
    let (ids, rows) = starved_world(9);
    assert_eq!(ids, [0, 1, 2]);
    assert_eq!(rows[1][queue], 0.0);
    assert_eq!(rows[1][promoted], 1.0);
    assert!((rows[1][idle] - 541f32.ln()).abs() < 1e-5);
    // A fresh job: queue 0, idle since submit (10 h), not promoted.
    assert_eq!((rows[0][queue], rows[0][promoted]), (0.0, 0.0));
    assert!((rows[0][idle] - 601f32.ln()).abs() < 1e-5);
    // Idle 7 h: still in queue 1, behind every fresh job, and off the shortlist.
    let (ids, _) = starved_world(7);
    assert_eq!(ids, [0, 2, 3]);
}

/// One 8-GPU V100 node. Job `i` asks for `gpus[i]` whole GPUs, submitted at `i` s with a 1 h
/// estimate; job 0 runs on the node's first GPUs since 0, the others wait. The jobs, their
/// runtimes and the cluster.
fn one_node_with_job_0_running(
    gpus: &[u32],
) -> (
    Vec<crate::job::JobSpec>,
    Vec<crate::policy::JobRuntime>,
    std::cell::RefCell<crate::cluster::ClusterState>,
) {
    use crate::cluster::tests::uniform;
    use crate::cluster::{ClusterState, TaskPlacement};
    use crate::job::TaskRequest;
    use crate::job::tests::job;
    use crate::policy::{JobRuntime, JobState};
    use crate::units::{JobId, NodeId, SimTime};
    let spec = Arc::new(uniform(1, 8, "V100", 64_000, 1 << 20));
    let jobs: Vec<_> = gpus
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let mut j = job(
                &format!("j{i}"),
                i as u64,
                TaskRequest::whole(*g, 1000, 1024),
            );
            j.id = JobId(i as u32);
            j.estimate = Some(SimTime::from_secs(3600));
            j
        })
        .collect();
    let mut runtime = vec![
        JobRuntime {
            state: JobState::Pending,
            ..JobRuntime::default()
        };
        gpus.len()
    ];
    runtime[0].state = JobState::Running;
    runtime[0].run_start = Some(SimTime::ZERO);
    let mut state = ClusterState::new(spec);
    state
        .allocate(
            &jobs[0],
            vec![TaskPlacement {
                node: NodeId(0),
                gpus: (0..gpus[0] as u8).collect(),
            }],
        )
        .unwrap();
    (jobs, runtime, std::cell::RefCell::new(state))
}

#[test]
fn blocked_jobs_at_the_head_do_not_crowd_out_jobs_that_can_start() {
    use crate::policy::DecisionContext;
    use crate::units::{JobId, SimTime};
    // One 8-GPU node, half taken by a running job (same class: no victims). Three 8-GPU jobs
    // wait at the head of every ranking, then three 1-GPU jobs. jobs_considered 3: each third
    // passes over the blocked jobs and lists one 1-GPU job, as Tiresias' greedy pass would.
    let (jobs, runtime, cluster) = one_node_with_job_0_running(&[4, 8, 8, 8, 1, 1, 1]);
    let pending = (1..7).map(JobId).collect();
    let ctx = DecisionContext::new(SimTime::from_secs(600), &jobs, &runtime, &pending, &cluster);
    let (ids, _) = enumerate_on_one_node(&ctx);
    assert_eq!(ids, [4, 5, 6]);
}

#[test]
fn jobs_first_pending_below_ones_already_seen_still_count_in_the_mix() {
    use crate::policy::DecisionContext;
    use crate::units::{JobId, SimTime};
    use std::collections::BTreeSet;
    // One 8-GPU node, 3 GPUs taken by job 0. Jobs 1 and 2 want 8 GPUs, jobs 3 and 4 one.
    // The enumerators' task mixes (its own, FGD's) skip the queue below the jobs they have
    // all seen; jobs 1 and 2 first wait after 3 and 4 were seen, and must still be counted:
    // the same decision point as an enumerator that sees them all at once.
    let (jobs, runtime, cluster) = one_node_with_job_0_running(&[3, 8, 8, 1, 1]);
    let featurizer = Featurizer {
        total_gpu_milli: 8000,
        total_gpus: 8,
        total_cpu_milli: 64_000,
        jobs_considered: 4,
    };
    let kinds = [Proposer::BestFit, Proposer::Fgd];
    let now = SimTime::from_secs(600);
    let late: BTreeSet<JobId> = [3, 4].into_iter().map(JobId).collect();
    let all: BTreeSet<JobId> = (1..5).map(JobId).collect();
    let mut stepwise = Enumerator::new(&kinds, featurizer, MAX_CANDIDATES - 1);
    stepwise.enumerate(
        &DecisionContext::new(now, &jobs, &runtime, &late, &cluster),
        0,
        SimTime::ZERO,
    );
    let ctx = DecisionContext::new(now, &jobs, &runtime, &all, &cluster);
    let seen_late = stepwise.enumerate(&ctx, 0, SimTime::ZERO);
    let mut at_once = Enumerator::new(&kinds, featurizer, MAX_CANDIDATES - 1);
    let seen_at_once = at_once.enumerate(&ctx, 0, SimTime::ZERO);
    assert_eq!(seen_late, seen_at_once);
    // And the mix matters here: without jobs 1 and 2 the free GPUs are not fragmented.
    let mut only_late = Enumerator::new(&kinds, featurizer, MAX_CANDIDATES - 1);
    let without = only_late.enumerate(
        &DecisionContext::new(now, &jobs, &runtime, &late, &cluster),
        0,
        SimTime::ZERO,
    );
    let frag = GLOBAL_FEATURES
        .iter()
        .position(|f| *f == "frag_fraction")
        .unwrap();
    assert_eq!(without.global[frag], 0.0);
    assert!(seen_at_once.global[frag] > 0.0);
}

/// Builds each decision point by point on one planner, as the learned policy does, with an
/// enumerator that keeps its victim pools through the decision and one whose pools are built
/// afresh at every point; takes a preempting candidate whenever one is offered.
struct KeptAndFresh {
    kept: Enumerator,
    fresh: Enumerator,
    points: usize,
    preempting: usize,
}

impl crate::policy::Policy for KeptAndFresh {
    fn name(&self) -> &str {
        "kept-and-fresh"
    }

    fn decide(
        &mut self,
        ctx: &crate::policy::DecisionContext<'_>,
    ) -> Result<crate::policy::Decision, crate::policy::PolicyError> {
        use crate::units::SimTime;
        self.kept.observe(ctx);
        self.fresh.observe(ctx);
        let mut planner = ctx.planner();
        let mut taken = Taken::default();
        let mut decision = crate::policy::Decision::default();
        loop {
            let kept = self
                .kept
                .enumerate_in(ctx, &mut planner, &taken, 0, SimTime::ZERO);
            self.fresh.forget_pools();
            let fresh = self
                .fresh
                .enumerate_in(ctx, &mut planner, &taken, 0, SimTime::ZERO);
            assert_eq!(kept.candidates, fresh.candidates, "at {:?}", ctx.now());
            self.points += 1;
            let chosen = kept
                .candidates
                .iter()
                .find(|c| !c.preemptions.is_empty())
                .or(kept.candidates.first());
            let Some(c) = chosen else {
                break;
            };
            self.preempting += usize::from(!c.preemptions.is_empty());
            for v in &c.preemptions {
                assert!(planner.free_running(*v), "victim {v} is running");
            }
            planner
                .reserve(ctx.job(c.placement.job), &c.placement.tasks)
                .expect("a candidate fits");
            taken.take(c);
            decision.preemptions.extend_from_slice(&c.preemptions);
            decision.placements.push(c.placement.clone());
        }
        Ok(decision)
    }
}

#[test]
fn victim_pools_kept_through_a_decision_offer_what_fresh_pools_offer() {
    let spec = cluster();
    let trace = mixed_qos(&synthetic_trace(200, &spec, 1.5, 3));
    let env = EnvConfig {
        las_preemption: true,
        ..cfg(RewardConfig::default(), 0, 0.0)
    };
    let featurizer = Featurizer {
        total_gpu_milli: spec.total_gpu_milli(),
        total_gpus: spec.total_gpus(),
        total_cpu_milli: spec.total_cpu_milli(),
        jobs_considered: env.jobs_considered,
    };
    let mut policy = KeptAndFresh {
        kept: Enumerator::from_config(&env, featurizer, MAX_CANDIDATES - 1),
        fresh: Enumerator::from_config(&env, featurizer, MAX_CANDIDATES - 1),
        points: 0,
        preempting: 0,
    };
    let sim = crate::sim::Simulator::new(&trace, spec, &crate::sim::SimConfig::default()).unwrap();
    let result = sim.run(&mut policy, &mut |_| {});
    assert_eq!(result.summary.rejected_decisions, 0);
    // Preemptions were offered and taken, so later points of those decisions excluded the
    // victims from the kept pools.
    assert!(
        policy.preempting >= 3,
        "{} preempting of {}",
        policy.preempting,
        policy.points
    );
}

#[test]
fn decima_reward_sums_to_minus_the_total_jct() {
    // Weight 1 on `jobs` alone, in seconds: over an episode played to the end the returns add
    // up to minus the sum of JCTs in seconds, whatever the agent does (with LAS preemption on,
    // so preempted jobs' restarts count too).
    let spec = cluster();
    let trace = synthetic_trace(40, &spec, 1.3, 11);
    let reward = RewardConfig {
        jct: 0.0,
        jobs: 1.0,
        time_unit_s: 1.0,
        ..RewardConfig::default()
    };
    for (seed, choose) in [
        (1, first as fn(&Observation, &mut StdRng) -> usize),
        (2, random),
    ] {
        let mut c = cfg(reward.clone(), 0, 0.0);
        c.las_preemption = true;
        c.work_conserving = true;
        c.sim.tick_s = 600.0;
        let mut env = SchedEnv::new(&trace, Arc::clone(&spec), c).unwrap();
        let (total, last) = play(&mut env, seed, choose);
        assert!(
            last.terminated,
            "seed {seed}: played to the end: {:?}",
            last.info
        );
        let r = env.finish("any").unwrap();
        let jct_s: f64 = r
            .jobs
            .iter()
            .filter_map(|j| j.jct())
            .map(|t| t.secs_f64())
            .sum();
        assert_eq!(r.summary.finished, 40);
        assert!(
            (total + jct_s).abs() <= 1e-4 * jct_s,
            "seed {seed}: return {total} against total JCT {jct_s} s"
        );
    }
}

/// On a labelled cluster with a constrained trace, every candidate the environment offers (so
/// every action a learned policy can take) meets its job's constraints, and episodes of random
/// legal actions end with every placeable job done.
#[test]
fn every_candidate_meets_its_jobs_constraints() {
    let base = cluster();
    let mut nodes = base.nodes.clone();
    for (i, n) in nodes.iter_mut().enumerate() {
        n.labels
            .insert("zone".into(), ["a", "b"][i % 2].to_string());
    }
    let spec = Arc::new(
        ClusterSpec::new(
            "zoned",
            base.models.clone(),
            nodes,
            base.racks.clone(),
            base.nvlink_domains.clone(),
        )
        .unwrap(),
    );
    let plain = synthetic().map_submit(|_| crate::units::SimTime::ZERO);
    let jobs: Vec<_> = plain
        .jobs()
        .iter()
        .map(|j| {
            let mut j = j.clone();
            if j.id.index() % 3 == 0 {
                j.constraints = crate::constraint::Constraints::parse("zone=b").unwrap();
            }
            j.constraints.distinct_nodes = j.id.index() % 2 == 0;
            let d = plain.true_duration(j.id);
            (j, d)
        })
        .collect();
    let (specs, durs): (Vec<_>, Vec<_>) = jobs.into_iter().unzip();
    let trace = Trace::new("zoned", specs, durs, plain.tenants().to_vec()).unwrap();
    let mut env = SchedEnv::new(
        &trace,
        Arc::clone(&spec),
        cfg(RewardConfig::default(), 0, 0.0),
    )
    .unwrap();
    let (mut obs, mut info) = env.reset(3).unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    let mut checked = 0;
    loop {
        for i in 0..info.candidates {
            let c = env.candidate(i).unwrap();
            let job = trace.job(c.placement.job);
            let nodes: Vec<_> = c.placement.tasks.iter().map(|t| t.node).collect();
            for n in &nodes {
                assert!(
                    job.constraints.admits(&spec.node(*n).labels),
                    "{} {:?} on {n} {:?} via {:?}",
                    job.name,
                    job.constraints,
                    spec.node(*n).labels,
                    c
                );
            }
            if job.constraints.distinct_nodes {
                let mut d = nodes.clone();
                d.sort_unstable();
                d.dedup();
                assert_eq!(d.len(), nodes.len(), "{} co-located", job.name);
            }
            checked += 1;
        }
        let s = env.step(random(&obs, &mut rng)).unwrap();
        if s.terminated || s.truncated {
            assert!(s.terminated);
            break;
        }
        (obs, info) = (s.obs, s.info);
    }
    assert!(checked > 20, "{checked}");
}

/// A typed 1-GPU job on a K80 and V100 cluster with Gavel's table: a candidate on each model
/// (best fit within it), the V100 one at the job's best rate, the K80 one at the table's
/// ratio; with rates hidden, the same candidates read the catalog speeds instead. An elastic
/// job too large for the free GPUs gets one start at the largest smaller size that fits, never
/// below its `min_gpus`; taking it starts the job at that size.
#[test]
fn typed_jobs_get_a_candidate_per_gpu_model_and_elastic_jobs_a_smaller_start() {
    use crate::job::tests::job;
    use crate::job::{Elastic, TaskRequest, WorkloadType};
    use crate::throughput::load_table;
    use crate::units::{JobId, SimTime};
    const LM: &str = "LM (batch size 20)";
    let spec = Arc::new(load_cluster("1x4:K80+1x4:V100").unwrap());
    let mut a = job("a", 0, TaskRequest::whole(1, 1000, 1024));
    a.workload = WorkloadType::new(LM);
    let trace = Trace::new(
        "typed",
        vec![a],
        vec![SimTime::from_secs(600)],
        vec!["t".into()],
    )
    .unwrap();
    let mut c = gavel_cfg();
    let table = load_table("gavel").unwrap();
    let w = table.workload(LM).unwrap();
    let rate = |gpu: &str| {
        table
            .rate(
                w,
                table.gpu(gpu).unwrap(),
                1,
                crate::throughput::Consolidation::Consolidated,
            )
            .unwrap()
    };
    let k80_ratio = rate("K80") / rate("V100");
    assert!(k80_ratio < 1.0);
    for hide in [false, true] {
        c.hide_rates = hide;
        let mut env = SchedEnv::new(&trace, Arc::clone(&spec), c.clone()).unwrap();
        env.reset(0).unwrap();
        let mut on_model: Vec<(String, f64, bool)> = (0..MAX_CANDIDATES)
            .filter_map(|i| env.candidate(i))
            .map(|c| {
                let node = spec.node(c.placement.tasks[0].node);
                let model = spec.models[node.gpu_model.unwrap().index()].name.clone();
                (model, c.stats.rate_vs_best, c.stats.rates_known)
            })
            .collect();
        on_model.sort_by(|x, y| x.0.cmp(&y.0));
        on_model.dedup_by(|x, y| x.0 == y.0);
        assert_eq!(on_model.len(), 2, "{on_model:?}");
        let (k80, v100) = (&on_model[0], &on_model[1]);
        assert_eq!((v100.1, v100.2), (1.0, !hide));
        let want = if hide {
            let m = |n: &str| spec.models[spec.model_id(n).unwrap().index()].speed;
            m("K80") / m("V100")
        } else {
            k80_ratio
        };
        assert!((k80.1 - want).abs() < 1e-9, "{hide}: {k80:?} vs {want}");
    }

    // Elastic: 8 GPUs asked (2..8, 1-GPU tasks) on two 4-GPU nodes, 3 taken by a rigid job:
    // 5 are free, but Gavel's table rates 1, 2, 4 and 8 GPUs, so the start is at 4.
    let mut rigid = job("r", 0, TaskRequest::whole(1, 1000, 1024));
    rigid.tasks = 3;
    rigid.gpu_types = vec!["V100".into()];
    let mut e = job("e", 10, TaskRequest::whole(1, 1000, 1024));
    e.id = JobId(1);
    e.tasks = 8;
    e.workload = WorkloadType::new("ResNet-18 (batch size 16)");
    e.elastic = Some(Elastic {
        min_gpus: 2,
        max_gpus: 8,
    });
    let trace = Trace::new(
        "elastic",
        vec![rigid, e],
        vec![SimTime::from_secs(3600), SimTime::from_secs(600)],
        vec!["t".into()],
    )
    .unwrap();
    c.hide_rates = false;
    let mut env = SchedEnv::new(&trace, Arc::clone(&spec), c).unwrap();
    env.reset(0).unwrap();
    let s = env.step(0).unwrap();
    assert_eq!(s.info.now_s, 10.0);
    let smaller: Vec<_> = (0..MAX_CANDIDATES)
        .filter_map(|i| env.candidate(i))
        .filter(|c| c.placement.job == JobId(1))
        .collect();
    assert_eq!(smaller.len(), 1, "{smaller:?}");
    assert_eq!(smaller[0].placement.tasks.len(), 4);
    assert_eq!(smaller[0].stats.size_ratio, 0.5);
    let a = (0..MAX_CANDIDATES)
        .find(|i| {
            env.candidate(*i)
                .is_some_and(|c| c.placement.job == JobId(1))
        })
        .unwrap();
    let mut s = env.step(a).unwrap();
    while !(s.terminated || s.truncated) {
        let a = s.obs.legal_actions().next().unwrap();
        s = env.step(a).unwrap();
    }
    let result = env.finish("test").unwrap();
    assert_eq!(result.summary.rejected_decisions, 0);
    assert_eq!(result.jobs[1].first_start, Some(SimTime::from_secs(10)));
}

/// Resize candidates: an elastic job running on 2 of 8 V100s is offered a grow to the next
/// size Gavel's table rates (4) at the next decision point, then to 8 when the GPUs are idle
/// with nobody waiting; when a rigid 4-GPU job arrives that does not fit, the grown job is
/// offered a shrink. Every resize candidate
/// of the episode stays within `min_gpus..max_gpus` at a rated size, and none is rejected.
#[test]
fn running_elastic_jobs_get_grow_and_shrink_candidates_within_their_range() {
    use crate::job::tests::job;
    use crate::job::{Elastic, TaskRequest, WorkloadType};
    use crate::units::{JobId, SimTime};
    let spec = Arc::new(load_cluster("1x8:V100").unwrap());
    let mut e = job("e", 0, TaskRequest::whole(1, 1000, 1024));
    e.tasks = 2;
    e.workload = WorkloadType::new("ResNet-18 (batch size 16)");
    e.elastic = Some(Elastic {
        min_gpus: 1,
        max_gpus: 8,
    });
    // x (1 GPU, 100 s) gives a decision point at 300 s and another as it ends, a round
    // after e grew.
    let mut x = job("x", 300, TaskRequest::whole(1, 1000, 1024));
    x.id = JobId(1);
    let mut r = job("r", 600, TaskRequest::whole(1, 1000, 1024));
    r.id = JobId(2);
    r.tasks = 4;
    let trace = Trace::new(
        "resize",
        vec![e, x, r],
        vec![
            SimTime::from_secs(7200),
            SimTime::from_secs(100),
            SimTime::from_secs(600),
        ],
        vec!["t".into()],
    )
    .unwrap();
    let c = gavel_cfg();
    let mut env = SchedEnv::new(&trace, Arc::clone(&spec), c).unwrap();
    env.reset(0).unwrap();
    // Start e as asked (2 GPUs).
    let start = (0..MAX_CANDIDATES)
        .find(|i| env.candidate(*i).is_some_and(|c| !c.is_resize()))
        .unwrap();
    let mut s = env.step(start).unwrap();
    let resizes = |env: &SchedEnv<'_>| -> Vec<Candidate> {
        (0..MAX_CANDIDATES)
            .filter_map(|i| env.candidate(i))
            .filter(|c| c.is_resize())
            .cloned()
            .collect()
    };
    // Not at the instant it started: the next decision point (x's arrival) offers the grow.
    assert_eq!(s.info.now_s, 300.0);
    assert!(!resizes(&env).is_empty());
    let mut first_grow = None;
    let (mut grew, mut shrank) = (false, false);
    while !(s.terminated || s.truncated) {
        for c in resizes(&env) {
            let n = c.placement.tasks.len();
            assert!(
                [1, 2, 4, 8].contains(&n),
                "{n} GPUs: not a rated size in 1..=8"
            );
        }
        // Take a resize when offered (grow first, then the shrink r needs), else the first.
        let a = (0..MAX_CANDIDATES)
            .find(|i| env.candidate(*i).is_some_and(|c| c.is_resize()))
            .or_else(|| s.obs.legal_actions().next())
            .unwrap();
        if let Some(c) = env.candidate(a).filter(|c| c.is_resize()) {
            if c.stats.size_ratio > 1.0 {
                first_grow.get_or_insert((c.placement.tasks.len(), c.stats.size_ratio));
                assert_eq!(s.obs.row(a)[38], 1.0, "is_resize");
                grew = true;
            } else {
                shrank = true;
            }
        }
        s = env.step(a).unwrap();
    }
    assert!(grew && shrank, "grew {grew}, shrank {shrank}");
    assert_eq!(
        first_grow,
        Some((4, 2.0)),
        "2 GPUs grow to the next rated size"
    );
    let result = env.finish("test").unwrap();
    assert_eq!(result.summary.rejected_decisions, 0);
    assert!(result.summary.resizes >= 2, "{}", result.summary.resizes);
    assert_eq!(result.summary.finished, 3);
}

/// Two elastic jobs fill an 8-GPU node; 1-GPU jobs keep arriving. A policy that takes a
/// resize whenever one is offered never resizes a job less than a round after it started
/// or was last resized (or it could shrink one job and grow the other back and forth,
/// each time paying the restart, and never progress), and never grows and shrinks in one
/// decision.
#[test]
fn a_job_keeps_its_size_for_a_round_and_a_decision_never_grows_and_shrinks() {
    use crate::job::tests::job;
    use crate::job::{Elastic, TaskRequest, WorkloadType};
    use crate::units::{JobId, SimTime};
    let spec = Arc::new(load_cluster("1x8:V100").unwrap());
    let mut jobs = Vec::new();
    let mut durations = Vec::new();
    for (i, name) in ["e1", "e2"].into_iter().enumerate() {
        let mut e = job(name, 0, TaskRequest::whole(1, 1000, 1024));
        e.id = JobId(i as u32);
        e.tasks = 4;
        e.workload = WorkloadType::new("ResNet-18 (batch size 16)");
        e.elastic = Some(Elastic {
            min_gpus: 1,
            max_gpus: 8,
        });
        jobs.push(e);
        durations.push(SimTime::from_secs(20_000));
    }
    for (i, at) in [30, 45, 100, 130, 400, 410, 2000, 2005]
        .into_iter()
        .enumerate()
    {
        let mut x = job(&format!("x{i}"), at, TaskRequest::whole(1, 1000, 1024));
        x.id = JobId(2 + i as u32);
        jobs.push(x);
        durations.push(SimTime::from_secs(50));
    }
    let trace = Trace::new("rounds", jobs, durations, vec!["t".into()]).unwrap();
    let c = gavel_cfg();
    let mut env = SchedEnv::new(&trace, Arc::clone(&spec), c).unwrap();
    let (mut obs, _) = env.reset(0).unwrap();
    // When each job last started or was resized; what each instant's resizes were.
    let mut since: std::collections::HashMap<JobId, f64> = Default::default();
    let mut now = 0.0;
    let mut instant: Vec<f64> = Vec::new();
    let (mut grows, mut shrinks) = (0, 0);
    loop {
        let offered: Vec<Candidate> = obs
            .legal_actions()
            .filter_map(|a| env.candidate(a))
            .cloned()
            .collect();
        for r in offered.iter().filter(|c| c.is_resize()) {
            let last = since[&r.placement.job];
            assert!(
                now >= last + 60.0,
                "{} resized at {now} s, last sized at {last} s",
                r.placement.job
            );
            let ratio = r.stats.size_ratio;
            assert!(
                instant.iter().all(|taken| (*taken < 1.0) == (ratio < 1.0)),
                "at {now} s a resize of ratio {ratio} after {instant:?}"
            );
        }
        let a = obs
            .legal_actions()
            .find(|a| env.candidate(*a).is_some_and(|c| c.is_resize()))
            .or_else(|| obs.legal_actions().next())
            .unwrap();
        if let Some(c) = env.candidate(a) {
            since.insert(c.placement.job, now);
            if c.is_resize() {
                instant.push(c.stats.size_ratio);
                if c.stats.size_ratio < 1.0 {
                    shrinks += 1;
                } else {
                    grows += 1;
                }
            }
        }
        let s = env.step(a).unwrap();
        if s.terminated || s.truncated {
            break;
        }
        if s.info.now_s != now {
            instant.clear();
        }
        now = s.info.now_s;
        obs = s.obs;
    }
    assert!(grows > 0 && shrinks > 0, "grows {grows}, shrinks {shrinks}");
    let result = env.finish("test").unwrap();
    assert_eq!(result.summary.rejected_decisions, 0);
    assert_eq!(result.summary.finished, 10);
}

/// Share candidates (issue #26): on one 2-GPU V100 node, A (ResNet-50 bs 64) and H (LM bs 20)
/// hold both GPUs; G (ResNet-50 bs 128) and B (LM bs 20) arrive blocked. Every share offered
/// is a pair Gavel's table lets share a V100, on a GPU its host holds alone (never a third
/// job); A never hosts G (the table forbids that pair); taking one shares without a rejected
/// decision, and every job finishes.
#[test]
fn blocked_typed_jobs_get_share_candidates_only_where_the_table_allows_the_pair() {
    use crate::job::tests::job;
    use crate::job::{TaskRequest, WorkloadType};
    use crate::throughput::load_table;
    use crate::units::{JobId, SimTime};
    let spec = Arc::new(load_cluster("1x2:V100").unwrap());
    let typed = |name: &str, id: u32, at: u64, w: &str| {
        let mut j = job(name, at, TaskRequest::whole(1, 1000, 1024));
        j.id = JobId(id);
        j.workload = WorkloadType::new(w);
        j
    };
    let workloads = [
        "ResNet-50 (batch size 64)",
        "LM (batch size 20)",
        "ResNet-50 (batch size 128)",
        "LM (batch size 20)",
    ];
    let trace = Trace::new(
        "share",
        vec![
            typed("A", 0, 0, workloads[0]),
            typed("H", 1, 0, workloads[1]),
            typed("G", 2, 10, workloads[2]),
            typed("B", 3, 20, workloads[3]),
        ],
        [1000, 1000, 100, 100].map(SimTime::from_secs).to_vec(),
        vec!["t".into()],
    )
    .unwrap();
    let table = load_table("gavel").unwrap();
    let v100 = table.gpu("V100").unwrap();
    let may_share = |a: JobId, b: JobId| {
        let w = |j: JobId| table.workload(workloads[j.index()]).unwrap();
        table
            .pair(w(a), w(b), v100)
            .is_some_and(|[x, y]| x > 0.0 && y > 0.0)
    };
    assert!(
        !may_share(JobId(2), JobId(0)),
        "the table forbids G beside A"
    );
    let c = gavel_cfg();
    let mut env = SchedEnv::new(&trace, Arc::clone(&spec), c).unwrap();
    let (mut obs, _) = env.reset(0).unwrap();
    let mut hosts: Vec<JobId> = Vec::new();
    let mut offered = 0;
    let mut done = false;
    while !done {
        let shares: Vec<(usize, Candidate)> = (0..MAX_CANDIDATES)
            .filter_map(|i| Some((i, env.candidate(i)?.clone())))
            .filter(|(_, c)| c.host().is_some())
            .collect();
        for (i, c) in &shares {
            let host = c.host().unwrap();
            assert!(may_share(c.placement.job, host), "{c:?}");
            assert!(!hosts.contains(&host), "a third job on {host}'s GPU");
            assert_eq!(obs.row(*i)[39], 1.0, "is_share");
            assert!(obs.row(*i)[40] > 0.0, "partner_rate");
            offered += 1;
        }
        let a = match shares.first() {
            Some((i, c)) => {
                hosts.push(c.host().unwrap());
                *i
            }
            None => obs.legal_actions().next().unwrap(),
        };
        let s = env.step(a).unwrap();
        obs = s.obs;
        done = s.terminated || s.truncated;
    }
    assert!(offered > 0, "no share was offered");
    let result = env.finish("test").unwrap();
    assert_eq!(result.summary.rejected_decisions, 0);
    assert_eq!(result.summary.shares as usize, hosts.len());
    assert_eq!(result.summary.finished, 4);
}

/// Resizes over several nodes: on 2-GPU nodes an elastic job grows into a gang that spans
/// nodes, which the simulator runs at the table's spread rate and refuses where the table has
/// none (Gavel's has no spread rate for ResNet-50 on K80s). Taking every resize offered, no
/// decision is rejected and every job finishes.
#[test]
fn resizes_across_nodes_are_offered_only_where_the_simulator_runs_them() {
    use crate::job::tests::job;
    use crate::job::{Elastic, TaskRequest, WorkloadType};
    use crate::units::{JobId, SimTime};
    let spec = Arc::new(load_cluster("4x2:K80").unwrap());
    let mut jobs = Vec::new();
    let mut durations = Vec::new();
    for (i, w) in [
        "ResNet-50 (batch size 64)",
        "ResNet-50 (batch size 128)",
        "ResNet-50 (batch size 64)",
        "ResNet-50 (batch size 128)",
    ]
    .iter()
    .enumerate()
    {
        let mut e = job(
            &format!("e{i}"),
            100 * i as u64,
            TaskRequest::whole(1, 1000, 1024),
        );
        e.id = JobId(i as u32);
        e.workload = WorkloadType::new(w);
        e.elastic = Some(Elastic {
            min_gpus: 1,
            max_gpus: 8,
        });
        jobs.push(e);
        durations.push(SimTime::from_secs(3600));
    }
    let trace = Trace::new("spread", jobs, durations, vec!["t".into()]).unwrap();
    let c = gavel_cfg();
    let mut env = SchedEnv::new(&trace, Arc::clone(&spec), c).unwrap();
    let (mut obs, _) = env.reset(0).unwrap();
    let mut resized = 0;
    for step in 0.. {
        // A refused resize changes nothing: offered again, it would be taken forever.
        assert!(step < 10_000, "the episode does not end");
        let a = (0..MAX_CANDIDATES)
            .find(|i| env.candidate(*i).is_some_and(|c| c.is_resize()))
            .or_else(|| obs.legal_actions().next())
            .unwrap();
        resized += usize::from(env.candidate(a).is_some_and(|c| c.is_resize()));
        let s = env.step(a).unwrap();
        if s.terminated || s.truncated {
            break;
        }
        obs = s.obs;
    }
    let result = env.finish("test").unwrap();
    assert!(resized > 0, "no resize was offered");
    assert_eq!(result.summary.rejected_decisions, 0);
    assert_eq!(result.summary.finished, 4);
}

/// Two 4-GPU K80 nodes; an untyped 2-GPU job holds half of node 0. A ResNet-50 job of four
/// 1-GPU tasks then waits: every proposer placing it task by task would spread it over both
/// nodes, which Gavel's table does not rate (the simulator refuses it). It is offered a start
/// on node 1 alone, and taking it starts the job at once.
#[test]
fn a_typed_gang_the_table_rates_on_one_node_only_gets_a_start_there() {
    use crate::units::{JobId, NodeId, SimTime};
    let spec = Arc::new(load_cluster("2x4:K80").unwrap());
    let trace = crate::job::tests::gang_beside_a_blocker();
    let mut c = gavel_cfg();
    c.proposers = vec![Proposer::BestFit, Proposer::WorstFit, Proposer::Fgd];
    let mut env = SchedEnv::new(&trace, Arc::clone(&spec), c).unwrap();
    let (obs, _) = env.reset(0).unwrap();
    // The blocker first, on node 0 (best fit).
    let a = obs
        .legal_actions()
        .find(|a| {
            env.candidate(*a).is_some_and(|c| {
                c.placement.job == JobId(0) && c.placement.tasks.iter().all(|t| t.node == NodeId(0))
            })
        })
        .unwrap();
    let mut s = env.step(a).unwrap();
    assert_eq!(s.info.now_s, 1.0);
    let starts: Vec<Candidate> = s
        .obs
        .legal_actions()
        .filter_map(|a| env.candidate(a))
        .filter(|c| c.placement.job == JobId(1))
        .cloned()
        .collect();
    assert!(!starts.is_empty(), "the gang got no candidate");
    for c in &starts {
        assert!(
            c.placement.tasks.iter().all(|t| t.node == NodeId(1)),
            "{:?} spreads",
            c.placement.tasks
        );
    }
    let a = s
        .obs
        .legal_actions()
        .find(|a| {
            env.candidate(*a)
                .is_some_and(|c| c.placement.job == JobId(1))
        })
        .unwrap();
    s = env.step(a).unwrap();
    while !(s.terminated || s.truncated) {
        let a = s.obs.legal_actions().next().unwrap();
        s = env.step(a).unwrap();
    }
    let result = env.finish("test").unwrap();
    assert_eq!(result.summary.rejected_decisions, 0);
    assert_eq!(result.jobs[1].first_start, Some(SimTime::from_secs(1)));
}

#[test]
fn the_tail_term_charges_waits_past_its_bound_only() {
    // One node: the window queues.
    let spec = Arc::new(load_cluster("1x8:V100").unwrap());
    let trace = itp_window();
    // Sums of the `jct` and `overwait` terms over a greedy episode, with the tail bound at
    // `bound_s`.
    let episode = |bound_s: f64| {
        let reward = RewardConfig {
            overwait: 1.0,
            overwait_bound_s: bound_s,
            ..RewardConfig::default()
        };
        let mut env = SchedEnv::new(&trace, Arc::clone(&spec), cfg(reward, 0, 0.0)).unwrap();
        let (mut obs, _) = env.reset(3).unwrap();
        let (mut jct, mut over) = (0.0, 0.0);
        loop {
            let s = env
                .step(first(&obs, &mut StdRng::seed_from_u64(0)))
                .unwrap();
            jct += s.info.terms.jct;
            over += s.info.terms.overwait;
            if s.terminated || s.truncated {
                assert_eq!(s.info.end, Some(EndReason::AllDone));
                return (jct, over);
            }
            obs = s.obs;
        }
    };
    // A bound of a millisecond charges (almost) every wait: the `jct` term itself.
    let (jct, over) = episode(0.001);
    assert!(jct < -1.0, "the window must queue: {jct}");
    assert!((over - jct).abs() < 1e-3, "{over} vs {jct}");
    // A bound longer than any wait charges nothing; one in between, part.
    assert_eq!(episode(1e9).1, 0.0);
    let (_, part) = episode(1800.0);
    assert!(jct < part && part < 0.0, "{part} vs {jct}");
}
