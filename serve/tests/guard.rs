//! The guard on the service's own decision log: a model arm that loses to the baseline on the
//! logged traffic switches routing to the baseline (the next answers come from the heuristic,
//! say why, and the metrics flip), from the guard's own thread as from a direct run; a model
//! arm that ties does not; a reload switches back.
//!
//! The traffic (`Traffic::head_of_line`) is bursts of one long job and four short ones on one
//! node: the baseline, shortest-first on the users' estimates, finishes the short jobs an hour
//! before first-come-first-served does, which plays the model arm that loses.

#![allow(clippy::unwrap_used)]

use lachesis_env::policy::{Policy, build_policy};
use lachesis_serve::config::RoutingMode;
use lachesis_serve::decision_log::{LogLine, log_files};
use lachesis_serve::synthetic::Traffic;
use lachesis_serve::verdict::Outcome;
use lachesis_serve::{Engine, Metrics, ServeConfig, guard, proto};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const BASELINE: &str = "sjf/best-fit";

fn log_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lachesis-guard-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("decisions.jsonl")
}

/// A shadow-mode service whose model arm is `model` (a heuristic standing in for the model),
/// with the guard (enforcing or not) on 6 windows of 10 jobs.
fn engine(name: &str, model: &'static str, interval_s: u64, enforce: bool) -> Arc<Engine> {
    service(name, model, interval_s, |cfg| {
        cfg.routing.mode = RoutingMode::Shadow;
        cfg.guard.enforce = enforce;
    })
}

/// A service with the guard every `interval_s` on 6 windows of 10 jobs, whose model arm is
/// `model`, the baseline `BASELINE`, and what `set` changes.
fn service(
    name: &str,
    model: &'static str,
    interval_s: u64,
    set: impl FnOnce(&mut ServeConfig),
) -> Arc<Engine> {
    let mut cfg = ServeConfig {
        model: String::new(),
        baseline: BASELINE.into(),
        deadline_ms: 60_000.0,
        ..ServeConfig::default()
    };
    cfg.grpc.addr = "127.0.0.1:0".into();
    cfg.http.addr = String::new();
    cfg.decision_log.path = Some(log_path(name));
    cfg.guard.enabled = true;
    cfg.guard.interval_s = interval_s;
    cfg.guard.recent_jobs = 60;
    cfg.guard.window_jobs = 10;
    cfg.guard.min_jobs = 40;
    set(&mut cfg);
    cfg.validate().unwrap();
    let engine = Engine::new(cfg, Arc::new(Metrics::new()))
        .unwrap()
        .with_model_policy(Arc::new(move || {
            build_policy(model, 0).unwrap() as Box<dyn Policy>
        }));
    Arc::new(engine)
}

/// 12 bursts, three hours apart: 60 jobs, all finished by the log's end.
async fn drive(engine: &Arc<Engine>) {
    let requests = Traffic::head_of_line(12, 10_800_000)
        .drive(engine)
        .await
        .unwrap();
    assert!(requests > 100, "{requests} requests");
}

/// One more burst, after the traffic's end (jobs of their own names).
fn request() -> proto::DecideRequest {
    let mut snapshot = Traffic::head_of_line(1, 0).snapshot().unwrap();
    snapshot.now_ms = 200_000_000;
    for job in &mut snapshot.pending {
        job.id = format!("late-{}", job.id);
    }
    proto::DecideRequest {
        snapshot: Some(snapshot),
        ..Default::default()
    }
}

fn metric(engine: &Engine, line: &str) -> bool {
    engine.metrics().encode().lines().any(|l| l == line)
}

fn last_log_line(engine: &Engine) -> LogLine {
    engine.flush();
    let path = engine.config().decision_log.path.clone().unwrap();
    let text = std::fs::read_to_string(log_files(&path).pop().unwrap()).unwrap();
    serde_json::from_str(text.lines().last().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_losing_model_arm_switches_routing_to_the_baseline_until_a_reload() {
    let e = engine("losing", "fifo/best-fit", 1, true);
    drive(&e).await;
    let before = e.decide(request()).await.unwrap();
    assert_eq!(before.arm, "shadow");
    assert!(before.rerouted.is_empty());

    // The guard's own thread (every second) judges the log and switches.
    let running = lachesis_serve::start_with(Arc::clone(&e)).await.unwrap();
    assert!(metric(&e, "lachesis_guard_interval_seconds 1"));
    let started = Instant::now();
    while e.routing().0 != RoutingMode::Baseline {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no switch: {:?}",
            e.guard().last_verdict()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let verdict = e.guard().last_verdict().unwrap();
    assert!(
        verdict.starts_with("arm verdict: losing: the model arm (model:override)"),
        "{verdict}"
    );
    assert!(
        verdict.contains("worse on 6 and better on 0 of 6 windows"),
        "{verdict}"
    );
    assert!(metric(&e, "lachesis_guard_model_losing 1"));
    assert!(metric(&e, "lachesis_guard_switched 1"));
    assert!(metric(&e, "lachesis_guard_switches_total 1"));
    assert!(metric(&e, "lachesis_guard_jobs 60"));

    // Every answer now comes from the baseline, says why, and the log keeps the reason.
    let answer = e.decide(request()).await.unwrap();
    assert_eq!(answer.arm, "baseline");
    assert_eq!(answer.decided_by, BASELINE);
    assert!(answer.rerouted.contains("losing"), "{}", answer.rerouted);
    let logged = last_log_line(&e);
    assert_eq!(logged.answer.rerouted, answer.rerouted);
    assert!(logged.shadow.is_none(), "the model is no longer asked");
    assert!(
        e.info()
            .detail
            .contains("switched to the baseline by the guard")
    );
    assert_eq!(e.info().routing, "baseline");
    running.shutdown().await.unwrap();

    // Judged again, still losing: no second switch, and no way back but an operator's.
    let v = guard::run_once(&e).unwrap().unwrap();
    assert_eq!(v.outcome, Outcome::Losing);
    let d = v.difference.as_ref().unwrap();
    assert!(d.ci_low > 0.0 && d.mean_diff > 1000.0, "{d:?}");
    let (ratio, low, high) = v.ratio().unwrap();
    assert!(
        0.0 < low && low <= ratio && ratio <= high,
        "{ratio} [{low}, {high}]"
    );
    assert!(metric(&e, "lachesis_guard_switches_total 1"));
    assert_eq!(e.routing().0, RoutingMode::Baseline);

    let (ok, message) = e.reload("").await;
    assert!(ok, "{message}");
    assert!(
        message.contains("switch to the baseline is lifted"),
        "{message}"
    );
    assert_eq!(e.routing(), (RoutingMode::Shadow, None));
    assert!(metric(&e, "lachesis_guard_switched 0"));
    let answer = e.decide(request()).await.unwrap();
    assert_eq!(answer.arm, "shadow");
    assert!(answer.rerouted.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_arm_that_ties_is_not_switched_and_too_little_traffic_is_said() {
    let e = engine("tie", BASELINE, 3600, true);
    // Nothing logged yet: too little traffic, nothing exported as a difference.
    let v = guard::run_once(&e).unwrap().unwrap();
    assert_eq!(v.outcome, Outcome::TooLittleTraffic);
    assert!(
        v.to_string().contains("0 recent finished jobs, 40 needed"),
        "{v}"
    );
    assert!(metric(&e, "lachesis_guard_jct_difference_ratio NaN"));
    assert!(metric(
        &e,
        "lachesis_guard_runs_total{verdict=\"too-little-traffic\"} 1"
    ));

    drive(&e).await;
    let v = guard::run_once(&e).unwrap().unwrap();
    assert_eq!(v.outcome, Outcome::Inconclusive, "{v}");
    let d = v.difference.as_ref().unwrap();
    assert_eq!((d.mean_diff, d.ci_low, d.ci_high), (0.0, 0.0, 0.0));
    assert_eq!(e.routing(), (RoutingMode::Shadow, None));
    assert!(metric(&e, "lachesis_guard_model_losing 0"));
    assert!(metric(&e, "lachesis_guard_switched 0"));
    assert!(metric(&e, "lachesis_guard_jct_difference_ratio 0.0"));
    assert!(metric(
        &e,
        "lachesis_guard_runs_total{verdict=\"inconclusive\"} 1"
    ));
    let answer = e.decide(request()).await.unwrap();
    assert_eq!(answer.arm, "shadow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_losing_verdict_without_enforce_only_reports() {
    let e = engine("report", "fifo/best-fit", 3600, false);
    drive(&e).await;
    let v = guard::run_once(&e).unwrap().unwrap();
    assert_eq!(v.outcome, Outcome::Losing);
    assert!(metric(&e, "lachesis_guard_model_losing 1"));
    assert!(metric(&e, "lachesis_guard_switched 0"));
    assert_eq!(e.routing().0, RoutingMode::Shadow);
}

/// A model-routed service whose model arm is `model`, with the guard as the selector over
/// `baseline` and `candidates` (enforcing), on 6 windows of 10 jobs.
fn selector(
    name: &str,
    model: &'static str,
    baseline: &str,
    candidates: &[&str],
    interval_s: u64,
) -> Arc<Engine> {
    service(name, model, interval_s, |cfg| {
        cfg.routing.mode = RoutingMode::Model;
        cfg.baseline = baseline.into();
        cfg.guard.enforce = true;
        cfg.guard.candidates = candidates.iter().map(|c| c.to_string()).collect();
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_selector_follows_the_clearly_better_arm_and_says_why_until_a_reload() {
    use lachesis_serve::selection::SelectOutcome;
    // The model arm (first-come-first-served) and the baseline lose to the candidate
    // (shortest-first on the users' estimates) on the logged traffic.
    let e = selector("select", "fifo/best-fit", "fifo/fgd", &[BASELINE], 1);
    let s = guard::select_once(&e).unwrap();
    assert_eq!(s.outcome, SelectOutcome::TooLittleTraffic);
    assert_eq!(s.followed(), "model:override", "{s}");
    drive(&e).await;
    let before = e.decide(request()).await.unwrap();
    assert_eq!(
        (before.arm.as_str(), before.decided_by.as_str()),
        ("model", "model:override")
    );

    // The guard's own thread (every second) runs the selector and switches.
    let running = lachesis_serve::start_with(Arc::clone(&e)).await.unwrap();
    let started = Instant::now();
    while e.routing().0 != RoutingMode::Baseline {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no switch: {:?}",
            e.guard().last_verdict()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.shutdown().await.unwrap();
    let line = e.guard().last_verdict().unwrap();
    assert!(line.starts_with("select: following sjf/best-fit"), "{line}");
    // The same choice, run directly, from the arm the thread followed before it switched.
    e.reload("").await;
    let s = guard::select_once(&e).unwrap();
    assert_eq!(s.outcome, SelectOutcome::Switched, "{s}");
    assert_eq!(s.arms, ["fifo/fgd", BASELINE, "model:override"]);
    assert_eq!(s.followed(), BASELINE);
    let line = s.to_string();
    assert!(
        line.starts_with(
            "select: following sjf/best-fit: switched from model:override: sjf/best-fit - \
             model:override: -"
        ) && line.contains("better on 6 and worse on 0 of 6 windows"),
        "{line}"
    );
    assert!(s.avg_jct_s[1] < 0.9 * s.avg_jct_s[2], "{line}");
    assert!(metric(
        &e,
        "lachesis_guard_following{policy=\"sjf/best-fit\"} 1"
    ));
    assert!(metric(
        &e,
        "lachesis_guard_following{policy=\"model:override\"} 0"
    ));
    assert!(metric(&e, "lachesis_guard_switched 1"));
    assert!(metric(
        &e,
        "lachesis_guard_runs_total{verdict=\"switched\"} 2"
    ));

    // Answers come from the followed heuristic, say why, and the log keeps it.
    let answer = e.decide(request()).await.unwrap();
    assert_eq!(answer.arm, "baseline");
    assert_eq!(answer.decided_by, BASELINE);
    assert_eq!(answer.rerouted, line);
    assert_eq!(last_log_line(&e).answer.rerouted, line);
    assert_eq!(e.chain()[..2], [BASELINE, "fifo/fgd"]);
    assert!(
        e.info()
            .detail
            .contains("routing follows sjf/best-fit (the guard's selector)"),
        "{}",
        e.info().detail
    );

    // Judged again on the same traffic: it stays, and says so.
    let s = guard::select_once(&e).unwrap();
    assert_eq!(s.outcome, SelectOutcome::Stayed, "{s}");
    assert!(s.to_string().contains("sjf/best-fit did best"), "{s}");
    assert!(metric(&e, "lachesis_guard_switches_total 2"));

    // A reload lifts the switch: the model arm answers again.
    let (ok, message) = e.reload("").await;
    assert!(ok, "{message}");
    assert_eq!(e.routing(), (RoutingMode::Model, None));
    assert_eq!(e.chain()[0], "fifo/fgd");
    assert!(!e.chain().iter().any(|c| c == BASELINE));
    let answer = e.decide(request()).await.unwrap();
    assert_eq!(answer.decided_by, "model:override");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_selector_does_not_switch_between_arms_that_tie() {
    use lachesis_serve::selection::SelectOutcome;
    // On one node, best-fit and fgd place alike: three arms, one schedule.
    let e = selector("select-tie", BASELINE, "sjf/fgd", &["sjf/best-fit"], 3600);
    drive(&e).await;
    let s = guard::select_once(&e).unwrap();
    assert_eq!(s.outcome, SelectOutcome::Stayed, "{s}");
    assert_eq!(s.followed(), "model:override");
    assert!(s.challenger.is_none(), "{s}");
    assert!(s.avg_jct_s.iter().all(|j| *j == s.avg_jct_s[0]), "{s}");
    assert_eq!(e.routing(), (RoutingMode::Model, None));
    assert!(metric(&e, "lachesis_guard_switched 0"));
    assert!(metric(&e, "lachesis_guard_jct_difference_ratio 0.0"));
    let answer = e.decide(request()).await.unwrap();
    assert!(answer.rerouted.is_empty());
}
