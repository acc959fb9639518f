//! The learned policy end to end: it acts in the simulator exactly as the environment that
//! trains it; a model directory round-trips to identical decisions; a model of another
//! schema is refused; a tiny training run improves its objective.

use burn::module::Module;
use burn::tensor::Device;
use lachesis_agent::LearnedPolicy;
use lachesis_agent::manifest::{MANIFEST_FILE, Manifest, ModelError, TrainingRecord, WEIGHTS_FILE};
use lachesis_agent::model::{Scorer, ScorerConfig};
use lachesis_agent::train::{Dataset, RunOptions, TrainConfig, train};
use lachesis_env::cluster::{ClusterSpec, load_cluster};
use lachesis_env::gym::{EnvConfig, SchedEnv};
use lachesis_env::job::Trace;
use lachesis_env::metrics::Summary;
use lachesis_env::policy::Policy;
use lachesis_env::sim::{SimConfig, Simulator};
use lachesis_env::trace::synthetic::synthetic_trace;
use std::path::PathBuf;
use std::sync::Arc;

fn cluster() -> Arc<ClusterSpec> {
    Arc::new(load_cluster("4x8:V100").expect("a valid shape"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lachesis-agent-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

fn env_cfg() -> EnvConfig {
    let mut c = EnvConfig::default();
    c.sim.skip_unplaceable = true;
    // An untrained model may pick "wait" with nothing running, which ends the episode before
    // any job ran; these tests are about equal decisions, not about whether a random net stalls.
    c.work_conserving = true;
    c
}

fn model(seed: u64) -> Scorer {
    let device = Device::flex();
    device.seed(seed);
    ScorerConfig::new().init(&device)
}

fn manifest() -> Manifest {
    Manifest::new(64, env_cfg(), TrainingRecord::default())
}

fn simulate(trace: &Trace, policy: &mut dyn Policy) -> Summary {
    let cfg = SimConfig {
        seed: 5,
        ..env_cfg().sim
    };
    Simulator::new(trace, cluster(), &cfg)
        .expect("a runnable trace")
        .run(policy, &mut |_| {})
        .summary
}

#[test]
fn the_policy_acts_in_the_simulator_as_greedy_play_in_the_environment() {
    let trace = synthetic_trace(60, &cluster(), 1.0, 11);
    let m = model(3);
    let policy = LearnedPolicy::new("learned", &m, &env_cfg());
    // Greedy play in the training environment.
    let mut env = SchedEnv::new(&trace, cluster(), env_cfg()).unwrap();
    let (mut obs, _) = env.reset(5).unwrap();
    let mut waits = 0;
    loop {
        let a = policy.act(&obs);
        waits += usize::from(a == lachesis_env::gym::WAIT_ACTION);
        let s = env.step(a).unwrap();
        if s.terminated || s.truncated {
            break;
        }
        obs = s.obs;
    }
    let in_env = env.finish("env").unwrap().summary;
    // The same weights as a Policy in the simulator.
    let mut p = LearnedPolicy::new("learned", &m, &env_cfg());
    let in_sim = simulate(&trace, &mut p);
    assert!(in_env.finished > 0);
    assert_eq!(in_env.finished, in_sim.finished);
    assert!(
        (in_env.avg_jct_s - in_sim.avg_jct_s).abs() < 1e-6,
        "env {} vs simulator {} ({waits} waits)",
        in_env.avg_jct_s,
        in_sim.avg_jct_s
    );
}

/// Batched deciding (the service's default) on a burst far beyond the cluster: the simulator
/// accepts every decision (it rejects a double-booked GPU or a job placed twice), every job
/// finishes, and it takes fewer model passes than stepwise deciding.
#[test]
fn batched_deciding_makes_valid_decisions_under_a_burst() {
    use lachesis_agent::Deciding;
    // Every job of a synthetic trace submitted at once.
    let trace =
        synthetic_trace(80, &cluster(), 1.0, 4).map_submit(|_| lachesis_env::units::SimTime::ZERO);
    let m = model(6);
    // "Wait" masked whenever a candidate exists (as for models/default): a decision ends only
    // when nothing more fits, whichever way it is built.
    let env = EnvConfig {
        max_hold_s: Some(0.0),
        ..env_cfg()
    };
    let run = |deciding: Deciding| {
        let mut p = LearnedPolicy::new("learned", &m, &env).deciding(deciding);
        let cfg = SimConfig {
            seed: 5,
            ..env_cfg().sim
        };
        let result = Simulator::new(&trace, cluster(), &cfg)
            .expect("a runnable trace")
            .run(&mut p, &mut |_| {});
        let first = result.jobs.iter().filter_map(|j| j.first_start).min();
        let at_first = result
            .jobs
            .iter()
            .filter(|j| j.first_start.is_some() && j.first_start == first)
            .count();
        (result.summary, at_first, p.passes())
    };
    let (stepwise, s_first, s_passes) = run(Deciding::Stepwise);
    let (batched, b_first, b_passes) = run(Deciding::Batched);
    for s in [&stepwise, &batched] {
        assert_eq!(s.finished, trace.jobs().len() as u64);
        assert_eq!(s.rejected_decisions, 0);
        assert_eq!(s.policy_errors, 0);
    }
    // The untrained net scores a pass's later candidates on the cluster as the pass began, so
    // it may pack the burst differently from stepwise deciding; both start many jobs at once,
    // and batched deciding needs fewer model passes for it.
    assert!(
        b_first > 8 && s_first > 8,
        "{b_first} and {s_first} at the burst"
    );
    assert!(b_passes < s_passes, "{b_passes} vs {s_passes} passes");
}

#[test]
fn a_model_directory_round_trips_to_identical_decisions() {
    let dir = scratch("roundtrip");
    let m = model(9);
    m.clone().save_file(dir.join(WEIGHTS_FILE)).unwrap();
    manifest().write(&dir).unwrap();
    let trace = synthetic_trace(50, &cluster(), 0.9, 2);
    let mut original = LearnedPolicy::new("a", &m, &env_cfg());
    let mut loaded = LearnedPolicy::load(&dir, "b").unwrap();
    let a = simulate(&trace, &mut original);
    let b = simulate(&trace, &mut loaded);
    assert_eq!(a.avg_jct_s, b.avg_jct_s);
    assert_eq!(a.decisions, b.decisions);
    // And identical scores on an observation.
    let mut env = SchedEnv::new(&trace, cluster(), env_cfg()).unwrap();
    let (obs, _) = env.reset(1).unwrap();
    let fresh = LearnedPolicy::load(&dir, "c").unwrap();
    assert_eq!(original.act(&obs), fresh.act(&obs));
    let (la, lb) = (
        lachesis_agent::policy::score(&m.valid(), &Device::flex(), &obs).unwrap(),
        lachesis_agent::policy::score(
            &lachesis_agent::policy::load_scorer(&dir, &manifest()).unwrap(),
            &Device::flex(),
            &obs,
        )
        .unwrap(),
    );
    assert_eq!(la, lb);
}

#[test]
fn a_model_of_another_schema_or_shape_is_refused_with_a_clear_message() {
    let dir = scratch("schema");
    model(1).save_file(dir.join(WEIGHTS_FILE)).unwrap();
    let mut m = manifest();
    m.feature_schema_version = 2;
    m.write(&dir).unwrap();
    let e = LearnedPolicy::load(&dir, "x").unwrap_err();
    assert!(matches!(e, ModelError::Schema { found: 2, .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains("manifest.json") && text.contains("v2") && text.contains("retrain"));

    // Right schema, weights of another width: refused, not a panic.
    let mut m = manifest();
    m.hidden = 32;
    m.write(&dir).unwrap();
    let e = LearnedPolicy::load(&dir, "x").unwrap_err();
    assert!(matches!(e, ModelError::Weights { .. }), "{e}");

    // A broken manifest names its file.
    std::fs::write(dir.join(MANIFEST_FILE), "{ not json").unwrap();
    let e = LearnedPolicy::load(&dir, "x").unwrap_err();
    assert!(e.to_string().contains("manifest.json"), "{e}");
    // No directory at all.
    let e = LearnedPolicy::load(&dir.join("missing"), "x").unwrap_err();
    assert!(matches!(e, ModelError::Io { .. }), "{e}");
}

/// A few seconds of training from scratch: PPO on a small synthetic workload, the greedy
/// policy evaluated on validation windows before and after.
#[test]
fn a_tiny_training_run_improves_its_objective() {
    let spec = cluster();
    let trace = synthetic_trace(1200, &spec, 1.0, 21);
    let datasets = [Dataset {
        name: "synthetic".into(),
        trace,
        cluster: spec,
        throughputs: None,
    }];
    let cfg = TrainConfig::parse(
        r#"
seed = 4
threads = 2
[split]
train = 0.7
validation = 0.2
[windows]
jobs = 40
pool = 8
loads = [1.0]
[env.sim]
skip_unplaceable = true
record_timeline = false
[bc]
teacher = ""
[ppo]
total_steps = 3072
num_envs = 4
num_steps = 64
lr = 0.001
anneal_lr = false
ent_coef = 0.0
[eval]
every = 4
windows = 3
loads = [1.0]
baselines = ["fifo/best-fit"]
"#,
        &[],
    )
    .unwrap();
    let out = scratch("train");
    let manifest = train(&cfg, &datasets, &out, &RunOptions::default(), &mut |_| {}).unwrap();
    let curve = std::fs::read_to_string(out.join("curve.csv")).unwrap();
    let rel: Vec<f64> = curve
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(3).unwrap().parse().unwrap())
        .collect();
    assert!(rel.len() >= 2, "{curve}");
    let best = rel.iter().cloned().fold(f64::INFINITY, f64::min);
    assert!(
        best < rel[0],
        "no improvement over the initial policy: {curve}"
    );
    assert!(out.join(WEIGHTS_FILE).is_file());
    // The event file holds CleanRL's metric names and the validation ones.
    let events: Vec<_> = std::fs::read_dir(out.join("tb"))
        .unwrap()
        .flat_map(|e| lachesis_agent::read_events(&e.unwrap().path()).unwrap())
        .collect();
    for tag in [
        "charts/learning_rate",
        "charts/SPS",
        "losses/value_loss",
        "losses/policy_loss",
        "losses/entropy",
        "losses/approx_kl",
        "losses/clipfrac",
        "losses/explained_variance",
        "sched/avg_jct_s",
        "sched/gpu_alloc",
        "sched/frag",
    ] {
        assert!(
            events.iter().any(|e| e.tag == tag),
            "no {tag} in the events"
        );
    }
    assert_eq!(manifest.training.env_steps, 3072);
    // The kept model loads and runs as a policy.
    LearnedPolicy::load(&out, "rl").unwrap();
}

/// Decima's way from scratch: whole episodes, several per input with the input-dependent
/// baseline, a curriculum on their length, a decaying entropy bonus; and DAgger rounds after
/// cloning. The run must improve on its initial policy and log what each part did.
#[test]
fn input_baselines_a_curriculum_and_dagger_train_end_to_end() {
    let spec = cluster();
    let trace = synthetic_trace(1200, &spec, 1.0, 21);
    let datasets = [Dataset {
        name: "synthetic".into(),
        trace,
        cluster: spec,
        throughputs: None,
    }];
    let base = r#"
seed = 4
threads = 2
[split]
train = 0.7
validation = 0.2
[windows]
jobs = 40
pool = 8
loads = [1.0]
[env.sim]
skip_unplaceable = true
record_timeline = false
[env.reward]
jct = 0.0
jobs = 1.0
[ppo]
total_steps = 3072
lr = 0.001
anneal_lr = false
ent_coef = 0.02
ent_coef_final = 0.0
rollouts_per_input = 4
inputs_per_iteration = 2
horizon_start = 0.5
horizon_final = 2.0
[eval]
every = 4
windows = 3
loads = [1.0]
baselines = ["fifo/best-fit"]
"#;
    let cfg = TrainConfig::parse(&format!("{base}[bc]\nteacher = \"\"\n"), &[]).unwrap();
    let out = scratch("input-baseline");
    let manifest = train(&cfg, &datasets, &out, &RunOptions::default(), &mut |_| {}).unwrap();
    let curve = std::fs::read_to_string(out.join("curve.csv")).unwrap();
    let rel: Vec<f64> = curve
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(3).unwrap().parse().unwrap())
        .collect();
    assert!(rel.len() >= 2, "{curve}");
    let best = rel.iter().cloned().fold(f64::INFINITY, f64::min);
    assert!(
        best < rel[0],
        "no improvement over the initial policy: {curve}"
    );
    // Whole episodes: the run stops at the first iteration past total_steps.
    assert!(
        manifest.training.env_steps >= 3072,
        "{}",
        manifest.training.env_steps
    );
    let events: Vec<_> = std::fs::read_dir(out.join("tb"))
        .unwrap()
        .flat_map(|e| lachesis_agent::read_events(&e.unwrap().path()).unwrap())
        .collect();
    let ent: Vec<f32> = events
        .iter()
        .filter(|e| e.tag == "charts/ent_coef")
        .map(|e| e.value)
        .collect();
    assert!((ent[0] - 0.02).abs() < 1e-6, "{ent:?}");
    assert!(
        ent.windows(2).all(|w| w[1] <= w[0]),
        "not decaying: {ent:?}"
    );
    assert!(*ent.last().unwrap() < 0.02 * 0.5, "{ent:?}");

    // DAgger after cloning: one disagreement figure per round.
    let cfg = TrainConfig::parse(
        &format!(
            "{base}[bc]\nteacher = \"sjf/best-fit\"\nsamples = 300\nepochs = 2\n\
             dagger_rounds = 2\ndagger_samples = 200\ndagger_epochs = 1\n"
        ),
        &["ppo.total_steps=0".into()],
    )
    .unwrap();
    let out = scratch("dagger");
    train(&cfg, &datasets, &out, &RunOptions::default(), &mut |_| {}).unwrap();
    let events: Vec<_> = std::fs::read_dir(out.join("tb"))
        .unwrap()
        .flat_map(|e| lachesis_agent::read_events(&e.unwrap().path()).unwrap())
        .collect();
    let rounds: Vec<_> = events
        .iter()
        .filter(|e| e.tag == "bc/dagger_disagreement")
        .collect();
    assert_eq!(rounds.len(), 2, "{rounds:?}");
    assert!(rounds.iter().all(|e| (0.0..=1.0).contains(&e.value)));
    // 2 epochs of cloning, then 1 per round over the grown data.
    let fits = events.iter().filter(|e| e.tag == "bc/accuracy").count();
    assert_eq!(fits, 4);
}

#[test]
fn training_resumes_from_its_checkpoint() {
    let spec = cluster();
    let datasets = [Dataset {
        name: "synthetic".into(),
        trace: synthetic_trace(600, &spec, 1.0, 8),
        cluster: spec,
        throughputs: None,
    }];
    let text = r#"
seed = 2
threads = 1
[windows]
jobs = 30
pool = 4
loads = [1.0]
[env.sim]
skip_unplaceable = true
record_timeline = false
[bc]
teacher = "fifo/best-fit"
samples = 256
epochs = 2
minibatch = 64
[ppo]
num_envs = 2
num_steps = 32
[eval]
every = 1
windows = 1
loads = [1.0]
baselines = ["fifo/best-fit"]
"#;
    let first = TrainConfig::parse(text, &["ppo.total_steps=128".into()]).unwrap();
    let out = scratch("resume");
    let m1 = train(&first, &datasets, &out, &RunOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(
        (m1.training.ppo_iterations, m1.training.env_steps),
        (2, 128)
    );
    // Extended to 256 steps: two more iterations from the checkpoint, the curve kept.
    let more = TrainConfig::parse(text, &["ppo.total_steps=256".into()]).unwrap();
    let resume = RunOptions {
        resume: true,
        ..RunOptions::default()
    };
    let m2 = train(&more, &datasets, &out, &resume, &mut |_| {}).unwrap();
    assert_eq!(
        (m2.training.ppo_iterations, m2.training.env_steps),
        (4, 256)
    );
    let curve = std::fs::read_to_string(out.join("curve.csv")).unwrap();
    let iterations: Vec<&str> = curve.lines().skip(1).map(|l| &l[..1]).collect();
    assert_eq!(iterations, ["0", "1", "2", "3", "4"], "{curve}");
    // Another config is refused, naming the checkpoint.
    let other = TrainConfig::parse(text, &["seed=3".into()]).unwrap();
    let e = train(&other, &datasets, &out, &resume, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("state.json"), "{e}");
}

/// Behaviour cloning from an oracle (a privileged teacher): each episode's teacher reads that
/// window's true durations, across windows of different jobs; the config check accepts it, and
/// the model it trains is an ordinary policy (its features hold no duration).
#[test]
fn an_oracle_teacher_reads_each_windows_durations() {
    assert!(lachesis_agent::train::is_oracle(
        "srtf-oracle/best-fit/las-preempt"
    ));
    assert!(!lachesis_agent::train::is_oracle(
        "tiresias/best-fit/las-preempt"
    ));
    let spec = cluster();
    let datasets = [Dataset {
        name: "synthetic".into(),
        trace: synthetic_trace(900, &spec, 1.2, 5),
        cluster: spec,
        throughputs: None,
    }];
    // 30-job windows and 1,200 samples: dozens of episodes, so teachers are rebuilt on new
    // windows many times (a teacher left with another window's durations would index past
    // them or order by the wrong ones).
    let cfg = TrainConfig::parse(
        r#"
seed = 3
threads = 1
[windows]
jobs = 30
pool = 6
loads = [1.2]
[env.sim]
skip_unplaceable = true
record_timeline = false
[bc]
teacher = "sjf-oracle/best-fit"
samples = 1200
epochs = 2
minibatch = 64
[ppo]
total_steps = 64
num_envs = 2
num_steps = 32
[eval]
every = 1
windows = 1
loads = [1.2]
baselines = ["fifo/best-fit"]
"#,
        &[],
    )
    .unwrap();
    let out = scratch("oracle-teacher");
    let manifest = train(&cfg, &datasets, &out, &RunOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(
        manifest.training.teacher.as_deref(),
        Some("sjf-oracle/best-fit")
    );
    // The teacher's choices were candidates of the environment nearly always.
    let events: Vec<_> = std::fs::read_dir(out.join("tb"))
        .unwrap()
        .flat_map(|e| lachesis_agent::read_events(&e.unwrap().path()).unwrap())
        .collect();
    let exact = events
        .iter()
        .find(|e| e.tag == "bc/teacher_exact_fraction")
        .expect("bc/teacher_exact_fraction logged");
    assert!(exact.value > 0.9, "teacher exact fraction {}", exact.value);
    LearnedPolicy::load(&out, "rl").unwrap();
}

/// A trace typed by Gavel's rule on a K80 and V100 cluster, trained with Gavel's table: the
/// teachers replayed and the baselines run at the table's rates, and the heuristics that read
/// the table (`fastest`, `colocate`) build and compete. Without the table, a teacher that
/// reads rates is refused, naming the table.
#[test]
fn a_typed_trace_trains_with_its_throughput_table() {
    use lachesis_env::throughput::{WorkloadRule, assign_workloads};
    let spec = Arc::new(load_cluster("2x4:V100+2x4:K80").expect("a valid shape"));
    let untyped = synthetic_trace(600, &spec, 1.0, 5);
    let (trace, _) = assign_workloads(&untyped, WorkloadRule::Gavel, 3);
    assert!(trace.jobs().iter().any(|j| j.workload.is_some()));
    let cfg = TrainConfig::parse(
        r#"
seed = 2
threads = 2
[split]
train = 0.7
validation = 0.2
[windows]
jobs = 40
pool = 4
loads = [1.0]
[env.sim]
skip_unplaceable = true
record_timeline = false
[bc]
teacher = "replay"
candidates = ["fifo/best-fit", "fifo/fastest", "fifo/fastest/colocate"]
replay_windows = 2
samples = 256
epochs = 1
dagger_rounds = 0
[ppo]
total_steps = 256
num_envs = 2
num_steps = 64
[eval]
every = 4
windows = 1
loads = [1.0]
baselines = ["fifo/best-fit", "fifo/fastest"]
"#,
        &[],
    )
    .unwrap();
    let typed = |throughputs: Option<&str>| Dataset {
        name: "typed".into(),
        trace: trace.clone(),
        cluster: Arc::clone(&spec),
        throughputs: throughputs.map(str::to_string),
    };
    let out = scratch("typed-train");
    let manifest = train(
        &cfg,
        &[typed(Some("gavel"))],
        &out,
        &RunOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    let data = &manifest.training.data[0];
    let score = |name: &str| {
        data.teacher_scores
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| *s)
            .unwrap()
    };
    assert!(score("fifo/fastest/colocate").is_finite(), "{data:?}");
    // Typed jobs run at the table's rates: placing by them changes the outcome.
    assert_ne!(score("fifo/fastest"), score("fifo/best-fit"), "{data:?}");
    assert!(
        manifest
            .validation
            .iter()
            .any(|r| r.policy == "fifo/fastest"),
        "{:?}",
        manifest.validation
    );
    // Beside a typed trace, an untyped one is trained too: there a heuristic that reads the
    // table is no candidate (it scores infinity), the others compete as usual.
    let mixed = scratch("mixed-train");
    let manifest = train(
        &cfg,
        &[typed(Some("gavel")), typed(None)],
        &mixed,
        &RunOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    // Written and read back, infinity included (JSON has no infinity: it is written null).
    assert_eq!(Manifest::read(&mixed).unwrap(), manifest);
    let untyped = &manifest.training.data[1];
    let colocate = untyped
        .teacher_scores
        .iter()
        .find(|(n, _)| n == "fifo/fastest/colocate")
        .unwrap();
    assert!(colocate.1.is_infinite(), "{untyped:?}");
    assert_ne!(untyped.teacher.as_deref(), Some("fifo/fastest/colocate"));
    let e = train(
        &cfg,
        &[typed(None)],
        &scratch("untyped-train"),
        &RunOptions::default(),
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("bc.teacher") && e.contains("throughput"), "{e}");
}

/// Scores a share highest, then a resize, then any start, and "wait" last: a policy that takes
/// every share and resize it is offered.
struct SharesAndResizesFirst;

impl lachesis_agent::ScoreCandidates for SharesAndResizesFirst {
    fn scores(&self, obs: &lachesis_env::gym::Observation) -> Result<Vec<f32>, String> {
        let names = lachesis_env::gym::CANDIDATE_FEATURES;
        let at = |name: &str| names.iter().position(|n| *n == name).expect("a feature");
        let (wait, resize, share) = (at("is_wait"), at("is_resize"), at("is_share"));
        Ok((0..lachesis_env::gym::MAX_CANDIDATES)
            .map(|a| {
                let r = obs.row(a);
                10.0 * r[share] + 5.0 * r[resize] + 1.0 - 2.0 * r[wait]
            })
            .collect())
    }
}

/// On a typed trace (Gavel's rule and rates) where a third of the jobs are elastic (Pollux's
/// ranges), a policy that takes every share and resize it is offered: in the simulator it
/// decides as in greedy play in the environment (the same average JCT: it is asked at the same
/// points, a point with nobody waiting at most once a round), stepwise and batched every
/// decision is accepted (never a forbidden pair, a third job on a GPU or a resize out of
/// range), jobs shared GPUs and elastic jobs were resized, and every job finished.
#[test]
fn shares_and_resizes_are_taken_in_the_simulator_as_in_the_environment() {
    use lachesis_agent::Deciding;
    use lachesis_env::throughput::{
        ElasticRule, WorkloadRule, assign_elastic, assign_workloads, load_table,
    };
    let spec = Arc::new(load_cluster("2x4:V100+2x4:K80").expect("a valid shape"));
    let base = synthetic_trace(80, &spec, 1.2, 21);
    let (typed, _) = assign_workloads(&base, WorkloadRule::Gavel, 3);
    let table = load_table("gavel").expect("the preset");
    let (elastic, _) = assign_elastic(&typed, &table, ElasticRule::Pollux);
    let jobs: Vec<_> = typed
        .jobs()
        .iter()
        .zip(elastic.jobs())
        .map(|(t, e)| {
            if t.id.0 % 3 == 0 {
                e.clone()
            } else {
                t.clone()
            }
        })
        .collect();
    let trace = Trace::new(
        "typed-elastic",
        jobs,
        typed.true_durations().to_vec(),
        typed.tenants().to_vec(),
    )
    .expect("a valid trace");
    let mut env_cfg = env_cfg();
    env_cfg.sim.throughputs = Some("gavel".into());
    env_cfg.max_hold_s = Some(0.0);
    let policy = |deciding| {
        LearnedPolicy::with_scorer("first", Box::new(SharesAndResizesFirst), &env_cfg)
            .deciding(deciding)
    };
    // Greedy play in the training environment.
    let mut env = SchedEnv::new(&trace, Arc::clone(&spec), env_cfg.clone()).unwrap();
    let (mut obs, _) = env.reset(5).unwrap();
    let player = policy(Deciding::Stepwise);
    loop {
        let s = env.step(player.act(&obs)).unwrap();
        if s.terminated || s.truncated {
            break;
        }
        obs = s.obs;
    }
    let in_env = env.finish("env").unwrap().summary;
    let run = |deciding| {
        let cfg = SimConfig {
            seed: 5,
            ..env_cfg.sim.clone()
        };
        Simulator::new(&trace, Arc::clone(&spec), &cfg)
            .expect("a runnable trace")
            .run(&mut policy(deciding), &mut |_| {})
            .summary
    };
    let stepwise = run(Deciding::Stepwise);
    let batched = run(Deciding::Batched);
    for s in [&in_env, &stepwise, &batched] {
        assert_eq!(s.rejected_decisions, 0);
        assert_eq!(s.policy_errors, 0);
        assert!(
            s.shares > 0 && s.resizes > 0,
            "{} shares, {} resizes",
            s.shares,
            s.resizes
        );
        assert_eq!(
            s.finished + s.skipped_unplaceable,
            trace.jobs().len() as u64
        );
    }
    assert_eq!(
        (in_env.shares, in_env.resizes),
        (stepwise.shares, stepwise.resizes)
    );
    assert!(
        (in_env.avg_jct_s - stepwise.avg_jct_s).abs() < 1e-6,
        "env {} vs simulator {}",
        in_env.avg_jct_s,
        stepwise.avg_jct_s
    );
}
