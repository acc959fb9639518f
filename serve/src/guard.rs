//! The guard (`[guard]` of serve.toml, off by default): every `interval_s` it replays the
//! service's own decision log and judges the model arm against the baseline on the recent
//! traffic (`crate::verdict`), exports the verdict (`lachesis_guard_*`), and with
//! `enforce = true` switches routing to the baseline when the model is losing. From then on
//! every answer comes from the heuristic chain (`arm` "baseline") and carries the verdict in
//! `rerouted`, so the decision log records why. Only an operator switches back: a successful
//! reload (SIGHUP or `ReloadModel`) or a restart; the guard judges again at its next run.
//!
//! With `candidates` the guard is the service's selector (`crate::selection`): every run
//! judges the baseline, the candidates and the model arm on the recent traffic and, with
//! `enforce`, routing follows the best: a heuristic arm leads the chain (`arm` "baseline",
//! `decided_by` the heuristic, `rerouted` the selection line), the model arm restores the
//! configured routing. It switches both ways, only past the hysteresis and a paired interval
//! below zero; a reload lifts a switch, as the guard's.
//!
//! It runs on a thread of its own, never on the async runtime or the decision threads, with
//! one simulation thread: it takes at most one core, at most once per interval. Before its
//! first run the verdict gauges read NaN and the last-run time is the start time.

use crate::config::RoutingMode;
use crate::dashboard::unix_ms;
use crate::engine::Engine;
use crate::metrics::Metrics;
use crate::selection::{self, SelectOutcome, Selection};
use crate::verdict::{self, Arms, Verdict, VerdictError};
use lachesis_agent::harness;
use lachesis_env::policy::{Policy, PolicyError, PolicyOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Whether the guard holds routing on the baseline, why, and its last verdict.
#[derive(Debug, Default)]
pub struct GuardState {
    /// Read on every decision: the lock is taken only while it is set.
    switched: AtomicBool,
    reason: Mutex<Option<Arc<str>>>,
    /// The heuristic that leads the chain while the selector follows it.
    lead: Mutex<Option<Arc<str>>>,
    last: Mutex<Option<String>>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl GuardState {
    /// Why routing is switched to the baseline, while it is.
    pub fn rerouted(&self) -> Option<Arc<str>> {
        if !self.switched.load(Ordering::Acquire) {
            return None;
        }
        locked(&self.reason).clone()
    }

    /// Switches routing to the baseline for `reason`; false when it already was.
    fn switch(&self, reason: String) -> bool {
        let mut held = locked(&self.reason);
        if held.is_some() {
            return false;
        }
        *held = Some(reason.into());
        self.switched.store(true, Ordering::Release);
        true
    }

    /// The heuristic the selector follows, while routing follows one.
    pub fn lead(&self) -> Option<Arc<str>> {
        if !self.switched.load(Ordering::Acquire) {
            return None;
        }
        locked(&self.lead).clone()
    }

    /// The selector's choice: `lead` a heuristic to lead the chain, `None` the configured
    /// routing (the model arm); `reason` is what answers say while a heuristic leads. True
    /// when the arm followed changed.
    fn follow(&self, lead: Option<&str>, reason: String) -> bool {
        let mut held = locked(&self.reason);
        let mut led = locked(&self.lead);
        let changed = led.as_deref() != lead;
        match lead {
            Some(name) => {
                *held = Some(reason.into());
                if changed {
                    *led = Some(name.into());
                }
                self.switched.store(true, Ordering::Release);
            }
            None => {
                self.switched.store(false, Ordering::Release);
                *held = None;
                *led = None;
            }
        }
        changed
    }

    /// Lifts the switch (an operator's reload); whether it was on.
    pub fn clear(&self) -> bool {
        let mut held = locked(&self.reason);
        self.switched.store(false, Ordering::Release);
        locked(&self.lead).take();
        held.take().is_some()
    }

    /// The last verdict, as a line.
    pub fn last_verdict(&self) -> Option<String> {
        locked(&self.last).clone()
    }
}

fn unix_s() -> f64 {
    unix_ms() as f64 / 1000.0
}

fn not_judged(metrics: &Metrics) {
    for g in [
        &metrics.guard_ratio,
        &metrics.guard_ratio_low,
        &metrics.guard_ratio_high,
    ] {
        g.set(f64::NAN);
    }
    metrics.guard_losing.set(0);
    metrics.guard_jobs.set(0);
}

/// The decision log's files, after the writer put what it still holds on disk.
fn flushed_log(engine: &Engine) -> Vec<std::path::PathBuf> {
    engine.flush();
    let path = engine.config().decision_log.path.as_deref();
    path.map(crate::replay::files).unwrap_or_default()
}

/// A run that could not judge is counted (`verdict="error"`) and logged.
fn counted<T>(metrics: &Metrics, run: Result<T, VerdictError>) -> Result<T, VerdictError> {
    run.inspect_err(|e| {
        Metrics::count(&metrics.guard_runs, "verdict", "error");
        tracing::warn!(error = %e, "the guard could not judge its arms");
    })
}

/// One run of the guard, now (the thread calls it every interval; tests call it directly):
/// the verdict, exported, and acted on when `enforce` is set. `None` when no model is in
/// force (nothing to judge).
pub fn run_once(engine: &Engine) -> Result<Option<Verdict>, VerdictError> {
    let cfg = engine.config();
    let metrics = engine.metrics();
    let Some((model, factory)) = engine.model_arm() else {
        Metrics::count(&metrics.guard_runs, "verdict", "no-model");
        not_judged(metrics);
        metrics.guard_last_run.set(unix_s());
        return Ok(None);
    };
    let files = flushed_log(engine);
    let arms = Arms {
        model,
        heuristic: cfg.baseline.clone(),
    };
    let build = |name: &str, options: &PolicyOptions| -> Result<Box<dyn Policy>, PolicyError> {
        if name == arms.model {
            Ok(factory())
        } else {
            harness::build(name, options)
        }
    };
    let verdict = counted(
        metrics,
        verdict::judge_log(&files, &arms, &cfg.guard.verdict_spec(), &build),
    )?;
    Metrics::count(&metrics.guard_runs, "verdict", verdict.outcome.as_str());
    match verdict.ratio() {
        Some((ratio, low, high)) => {
            metrics.guard_ratio.set(ratio);
            metrics.guard_ratio_low.set(low);
            metrics.guard_ratio_high.set(high);
            metrics.guard_losing.set(i64::from(verdict.losing()));
            metrics.guard_jobs.set(verdict.jobs as i64);
        }
        None => {
            not_judged(metrics);
            metrics.guard_jobs.set(verdict.jobs as i64);
        }
    }
    metrics.guard_last_run.set(unix_s());
    let line = verdict.to_string();
    *locked(&engine.guard().last) = Some(line.clone());
    tracing::info!(verdict = %line, "guard");
    if verdict.losing() && cfg.guard.enforce && engine.guard().switch(line.clone()) {
        metrics.guard_switches.inc();
        metrics.guard_switched.set(1);
        tracing::warn!(
            verdict = %line,
            "the guard switched routing to the baseline; a reload (SIGHUP) or a restart switches back"
        );
    }
    engine.dashboard().guard_changed();
    Ok(Some(verdict))
}

/// One run of the selector (`[guard] candidates`), now: every arm judged on the recent
/// traffic, the choice exported and, with `enforce`, followed. The arms: the baseline, the
/// candidates, and the model arm when it answers and routing is not `baseline`.
pub fn select_once(engine: &Engine) -> Result<Selection, VerdictError> {
    let cfg = engine.config();
    let metrics = engine.metrics();
    let files = flushed_log(engine);
    let mut arms = vec![cfg.baseline.clone()];
    for c in &cfg.guard.candidates {
        if !arms.contains(c) {
            arms.push(c.clone());
        }
    }
    let model = if cfg.routing.mode == RoutingMode::Baseline {
        None
    } else {
        engine.model_arm()
    };
    let model_index = model.as_ref().map(|(name, _)| {
        arms.push(name.clone());
        arms.len() - 1
    });
    let before = match engine.guard().lead() {
        Some(lead) => arms.iter().position(|a| **a == *lead).unwrap_or(0),
        None => model_index.unwrap_or(0),
    };
    let build = |name: &str, options: &PolicyOptions| -> Result<Box<dyn Policy>, PolicyError> {
        match &model {
            Some((model_name, factory)) if name == model_name => Ok(factory()),
            _ => harness::build(name, options),
        }
    };
    let spec = cfg.guard.verdict_spec();
    let sel = counted(
        metrics,
        selection::select_log(&files, &arms, before, cfg.guard.hysteresis, &spec, &build),
    )?;
    Metrics::count(&metrics.guard_runs, "verdict", sel.outcome.as_str());
    match sel.ratio() {
        Some((ratio, low, high)) => {
            metrics.guard_ratio.set(ratio);
            metrics.guard_ratio_low.set(low);
            metrics.guard_ratio_high.set(high);
        }
        None if sel.outcome == SelectOutcome::TooLittleTraffic => not_judged(metrics),
        None => {
            for g in [
                &metrics.guard_ratio,
                &metrics.guard_ratio_low,
                &metrics.guard_ratio_high,
            ] {
                g.set(0.0);
            }
        }
    }
    metrics.guard_jobs.set(sel.jobs as i64);
    metrics.guard_last_run.set(unix_s());
    let line = sel.to_string();
    *locked(&engine.guard().last) = Some(line.clone());
    tracing::info!(selection = %line, "selector");
    if cfg.guard.enforce {
        let lead = (Some(sel.following) != model_index).then(|| sel.followed());
        if engine.guard().follow(lead, line.clone()) {
            metrics.guard_switches.inc();
            tracing::warn!(selection = %line, "the selector switched routing");
        }
        metrics.guard_switched.set(i64::from(lead.is_some()));
    }
    let followed = if cfg.guard.enforce {
        sel.followed()
    } else {
        &arms[before]
    };
    for arm in &arms {
        metrics
            .guard_following
            .get_or_create(&vec![("policy", arm.clone())])
            .set(i64::from(arm == followed));
    }
    engine.dashboard().guard_changed();
    Ok(sel)
}

/// The running guard; `stop` (or dropping it) ends its thread at once, or after the run in
/// progress.
#[derive(Debug)]
pub struct GuardHandle {
    stop: Sender<()>,
}

impl GuardHandle {
    pub fn stop(self) {
        let _ = self.stop.send(());
    }
}

/// Starts the guard's thread when `[guard] enabled`; its first run comes one interval after
/// the start.
pub fn start(engine: Arc<Engine>) -> std::io::Result<Option<GuardHandle>> {
    let cfg = engine.config().guard.clone();
    if !cfg.enabled {
        return Ok(None);
    }
    let metrics = engine.metrics();
    metrics
        .guard_interval
        .set(i64::try_from(cfg.interval_s).unwrap_or(i64::MAX));
    metrics.guard_last_run.set(unix_s());
    not_judged(metrics);
    let (tx, rx) = channel::<()>();
    let interval = Duration::from_secs(cfg.interval_s);
    std::thread::Builder::new()
        .name("lachesis-guard".into())
        .spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(interval) {
                // A policy that panics in a simulation fails this run, not the guard.
                let run = || {
                    if engine.config().guard.candidates.is_empty() {
                        run_once(&engine).map(|_| ())
                    } else {
                        select_once(&engine).map(|_| ())
                    }
                };
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
                    Ok(_) => {}
                    Err(_) => {
                        Metrics::count(&engine.metrics().guard_runs, "verdict", "error");
                        tracing::error!("the guard's run panicked; it runs again next interval");
                    }
                }
            }
        })?;
    tracing::info!(
        interval_s = cfg.interval_s,
        enforce = cfg.enforce,
        "guard started"
    );
    Ok(Some(GuardHandle { stop: tx }))
}
