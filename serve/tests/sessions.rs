#![allow(clippy::unwrap_used)]
//! Sessions end to end in-process: a session driven by deltas answers what a whole snapshot
//! of the same cluster answers, round after round; stale, unknown and malformed requests are
//! refused with the right code and leave the session usable; a snapshot resets a session; the
//! metrics count it all; a model that fails or times out on a delta falls back and the session
//! goes on; sessions beyond `max_sessions` evict idle ones.

use lachesis_env::policy::{Decision, DecisionContext, Policy, PolicyError};
use lachesis_serve::config::RoutingMode;
use lachesis_serve::synthetic::{SessionDriver, snapshot};
use lachesis_serve::{Engine, Metrics, ServeConfig, proto};
use std::sync::Arc;
use tonic::Code;

const STEP_MS: u64 = 30_000;

fn config() -> ServeConfig {
    let mut cfg = ServeConfig {
        model: String::new(),
        // Debug builds decide slowly; the deadline tests set their own.
        deadline_ms: 60_000.0,
        ..ServeConfig::default()
    };
    cfg.routing.mode = RoutingMode::Baseline;
    cfg
}

fn engine(cfg: ServeConfig) -> Arc<Engine> {
    Arc::new(Engine::new(cfg, Arc::new(Metrics::new())).unwrap())
}

/// 60 nodes, 30 jobs queued, busy enough that not everything starts at once.
fn opening(seed: u64) -> proto::Snapshot {
    snapshot(60, 30, 0.85, seed)
}

fn whole(snapshot: proto::Snapshot) -> proto::DecideRequest {
    proto::DecideRequest {
        snapshot: Some(snapshot),
        ..Default::default()
    }
}

fn open(session: &str, snapshot: proto::Snapshot) -> proto::DecideRequest {
    proto::DecideRequest {
        snapshot: Some(snapshot),
        session: session.into(),
        ..Default::default()
    }
}

fn on(session: &str, delta: proto::SnapshotDelta) -> proto::DecideRequest {
    proto::DecideRequest {
        delta: Some(delta),
        session: session.into(),
        ..Default::default()
    }
}

/// A delta that only moves the clock.
fn tick(revision: u64, now_ms: u64) -> proto::SnapshotDelta {
    proto::SnapshotDelta {
        revision,
        now_ms,
        ..Default::default()
    }
}

fn session_requests(engine: &Engine, kind: &str) -> u64 {
    Metrics::counter_value(&engine.metrics().session_requests, "kind", kind)
}

/// The caller's view of the cluster, kept in the protocol's own terms (independently of the
/// service's `World`): the opening snapshot, each answer carried out and each delta applied,
/// written out as the whole snapshot a session-less caller would send.
#[derive(Debug, Clone)]
struct Mirror {
    base: proto::Snapshot,
    now_ms: u64,
    running: Vec<proto::RunningJob>,
    pending: Vec<proto::Job>,
}

impl Mirror {
    fn new(snapshot: &proto::Snapshot) -> Self {
        Mirror {
            base: snapshot.clone(),
            now_ms: snapshot.now_ms,
            running: snapshot.running.clone(),
            pending: snapshot.pending.clone(),
        }
    }

    fn running_ids(&self) -> Vec<String> {
        self.running
            .iter()
            .map(|r| r.job.as_ref().unwrap().id.clone())
            .collect()
    }

    /// Stops a running job: its run counts as attained, it has been idle since now.
    fn stop(&mut self, id: &str) {
        let k = self
            .running
            .iter()
            .position(|r| r.job.as_ref().unwrap().id == id)
            .unwrap_or_else(|| panic!("{id} does not run"));
        let r = self.running.remove(k);
        let mut job = r.job.unwrap();
        job.attained_ms += r.run_ms;
        job.idle_ms = Some(0);
        self.pending.push(job);
    }

    /// The answer carried out: its preemptions back in the queue, its placements running.
    fn answered(&mut self, answer: &proto::DecideResponse) {
        for id in &answer.preemptions {
            self.stop(id);
        }
        for p in &answer.placements {
            let k = self
                .pending
                .iter()
                .position(|j| j.id == p.job)
                .unwrap_or_else(|| panic!("{} does not wait", p.job));
            let job = self.pending.remove(k);
            self.running.push(proto::RunningJob {
                job: Some(job),
                tasks: p.tasks.clone(),
                run_ms: 0,
            });
        }
    }

    /// The delta applied as the protocol describes it: clock, finished, requeued, submitted.
    fn delta(&mut self, delta: &proto::SnapshotDelta) {
        let dt = delta.now_ms.checked_sub(self.now_ms).unwrap();
        self.now_ms = delta.now_ms;
        for r in &mut self.running {
            r.run_ms += dt;
            r.job.as_mut().unwrap().wait_ms += dt;
        }
        for j in &mut self.pending {
            j.wait_ms += dt;
            j.idle_ms = j.idle_ms.map(|i| i + dt);
        }
        for id in &delta.finished {
            let before = self.running.len() + self.pending.len();
            self.running.retain(|r| &r.job.as_ref().unwrap().id != id);
            self.pending.retain(|j| &j.id != id);
            assert_eq!(
                self.running.len() + self.pending.len(),
                before - 1,
                "{id} was there"
            );
        }
        for id in &delta.requeued {
            self.stop(id);
        }
        self.pending.extend(delta.submitted.iter().cloned());
    }

    fn snapshot(&self) -> proto::Snapshot {
        proto::Snapshot {
            cluster: self.base.cluster.clone(),
            now_ms: self.now_ms,
            nodes: self.base.nodes.clone(),
            running: self.running.clone(),
            pending: self.pending.clone(),
        }
    }
}

/// The same decision: what starts where, what stops, and why every other job waits.
fn assert_same_decision(on_session: &proto::DecideResponse, whole: &proto::DecideResponse) {
    assert_eq!(on_session.placements, whole.placements, "placements");
    assert_eq!(on_session.preemptions, whole.preemptions, "preemptions");
    assert_eq!(on_session.pending, whole.pending, "pending reasons");
    assert_eq!(on_session.decided_by, whole.decided_by);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_answers_as_the_whole_snapshot_would_round_after_round() {
    drive_against_whole_snapshots(opening(11)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_on_a_clock_younger_than_its_waits_answers_as_the_whole_snapshot_would() {
    // A caller's clock on its own epoch (here 0): jobs say they waited longer than it has run.
    drive_against_whole_snapshots(proto::Snapshot {
        now_ms: 0,
        ..opening(16)
    })
    .await;
}

/// Drives a session for ten deltas (with requeues and cancelled waiting jobs) and compares
/// each answer with a session-less engine's on the whole snapshot the caller holds.
async fn drive_against_whole_snapshots(snap: proto::Snapshot) {
    drive_against_whole_snapshots_with(config(), snap).await;
}

async fn drive_against_whole_snapshots_with(cfg: ServeConfig, snap: proto::Snapshot) {
    let session = engine(cfg.clone());
    let stateless = engine(cfg);
    let mut mirror = Mirror::new(&snap);
    let mut driver = SessionDriver::new(&snap, 30, STEP_MS, 5);

    let first = session.decide(open("s", snap.clone())).await.unwrap();
    let reference = stateless.decide(whole(snap.clone())).await.unwrap();
    assert_same_decision(&first, &reference);
    assert_eq!((first.session.as_str(), first.revision), ("s", 1));
    assert_eq!((reference.session.as_str(), reference.revision), ("", 0));

    let (mut placed, mut preempted, mut requeued, mut departed) = (first.placements.len(), 0, 0, 0);
    let mut answer = first;
    for round in 2..=11u64 {
        mirror.answered(&answer);
        driver.answered(&answer);
        let mut delta = driver.delta();
        assert_eq!(delta.revision, round - 1);
        // Now and then someone else requeues a running job, and a waiting job is cancelled.
        if round % 3 == 0 {
            let running = mirror.running_ids();
            if let Some(id) = running.iter().find(|id| !delta.finished.contains(id)) {
                delta.requeued.push(id.clone());
                requeued += 1;
            }
        }
        if round % 4 == 0
            && let Some(j) = mirror.pending.first()
        {
            delta.finished.push(j.id.clone());
        }
        departed += delta.finished.len();
        mirror.delta(&delta);

        answer = session.decide(on("s", delta)).await.unwrap();
        let reference = stateless.decide(whole(mirror.snapshot())).await.unwrap();
        assert_eq!(answer.revision, round, "round {round}");
        assert_eq!(answer.session, "s");
        assert!(answer.fallbacks.is_empty(), "{:?}", answer.fallbacks);
        assert_same_decision(&answer, &reference);
        placed += answer.placements.len();
        preempted += answer.preemptions.len();
    }
    assert!(placed > 10, "{placed} placed: the rounds decided something");
    assert!(
        preempted > 0 && requeued > 0 && departed > 10,
        "{preempted} preempted, {requeued} requeued, {departed} left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_decision_is_logged_with_the_whole_snapshot_it_stands_for() {
    let dir = std::env::temp_dir().join(format!("lachesis-sessions-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cfg = config();
    cfg.decision_log.path = Some(dir.join("d.jsonl"));
    let e = engine(cfg);
    let stateless = engine(config());
    let snap = opening(14);
    let mut mirror = Mirror::new(&snap);
    let mut driver = SessionDriver::new(&snap, 30, STEP_MS, 15);
    let mut answer = e.decide(open("s", snap.clone())).await.unwrap();
    let mut answers = vec![answer.clone()];
    for _ in 0..4 {
        mirror.answered(&answer);
        driver.answered(&answer);
        let delta = driver.delta();
        mirror.delta(&delta);
        answer = e.decide(on("s", delta)).await.unwrap();
        answers.push(answer.clone());
    }
    e.flush();
    let text = std::fs::read_to_string(dir.join("d.jsonl")).unwrap();
    let lines: Vec<lachesis_serve::decision_log::LogLine> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), answers.len(), "one record per answer");
    assert_eq!(lines[0].snapshot, snap, "the opening snapshot as sent");
    let ids = |s: &proto::Snapshot| {
        let mut ids: Vec<String> = s
            .running
            .iter()
            .map(|r| format!("run {}", r.job.as_ref().unwrap().id))
            .chain(s.pending.iter().map(|j| format!("wait {}", j.id)))
            .collect();
        ids.sort();
        ids
    };
    let last = &lines.last().unwrap().snapshot;
    assert_eq!(
        ids(last),
        ids(&mirror.snapshot()),
        "the cluster the deltas describe"
    );
    assert_eq!(last.now_ms, mirror.now_ms);
    for (line, answer) in lines.iter().zip(&answers) {
        assert_eq!(&line.answer, answer);
        // Replayable: the logged snapshot, decided whole, gives the logged answer.
        let again = stateless
            .decide(whole(line.snapshot.clone()))
            .await
            .unwrap();
        assert_same_decision(&again, &line.answer);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_unknown_and_malformed_session_requests_are_refused() {
    let e = engine(config());
    let snap = opening(3);
    let now = snap.now_ms;
    let answer = e.decide(open("s", snap.clone())).await.unwrap();
    assert_eq!(answer.revision, 1);

    // A stale revision, and one from the future.
    for revision in [0, 2, 7] {
        let err = e
            .decide(on("s", tick(revision, now + STEP_MS)))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
        assert!(err.message().contains("full snapshot"), "{err:?}");
        assert!(err.message().contains("revision"), "{err:?}");
    }
    // A session never opened.
    let err = e
        .decide(on("nobody-opened-me", tick(1, now)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("full snapshot"), "{err:?}");
    // A delta without a session.
    let err = e
        .decide(proto::DecideRequest {
            delta: Some(tick(1, now)),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    // Both a snapshot and a delta, with and without a session.
    for session in ["s", ""] {
        let err = e
            .decide(proto::DecideRequest {
                snapshot: Some(snap.clone()),
                delta: Some(tick(1, now)),
                session: session.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{session:?}: {err:?}");
    }
    // Neither.
    let err = e
        .decide(proto::DecideRequest {
            session: "s".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    // None of it touched the session: the delta that follows revision 1 is answered.
    let answer = e.decide(on("s", tick(1, now + STEP_MS))).await.unwrap();
    assert_eq!(answer.revision, 2);
    assert_eq!(session_requests(&e, "refused"), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_delta_names_its_field_and_leaves_the_session_at_its_revision() {
    let e = engine(config());
    let stateless = engine(config());
    let snap = opening(4);
    let mut mirror = Mirror::new(&snap);
    let answer = e.decide(open("s", snap.clone())).await.unwrap();
    mirror.answered(&answer);
    let running = mirror.running_ids()[0].clone();
    let now = snap.now_ms + STEP_MS;

    let err = e
        .decide(on(
            "s",
            proto::SnapshotDelta {
                revision: 1,
                now_ms: now,
                finished: vec!["nobody".into()],
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("delta.finished[0]"), "{err:?}");

    // Good parts before a bad one are not applied either: the same job finishes again below.
    let err = e
        .decide(on(
            "s",
            proto::SnapshotDelta {
                revision: 1,
                now_ms: now,
                finished: vec![running.clone()],
                requeued: vec![running.clone()],
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("delta.requeued[0]"), "{err:?}");
    // A clock going back.
    let err = e
        .decide(on("s", tick(1, snap.now_ms - 1)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("delta.now_ms"), "{err:?}");

    let delta = proto::SnapshotDelta {
        revision: 1,
        now_ms: now,
        finished: vec![running],
        ..Default::default()
    };
    mirror.delta(&delta);
    let answer = e.decide(on("s", delta)).await.unwrap();
    assert_eq!(answer.revision, 2);
    let reference = stateless.decide(whole(mirror.snapshot())).await.unwrap();
    assert_same_decision(&answer, &reference);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_snapshot_on_a_session_starts_it_again() {
    let e = engine(config());
    let stateless = engine(config());
    let snap = opening(5);
    let answer = e.decide(open("s", snap.clone())).await.unwrap();
    assert_eq!(answer.revision, 1);
    let answer = e
        .decide(on("s", tick(1, snap.now_ms + STEP_MS)))
        .await
        .unwrap();
    assert_eq!(answer.revision, 2);

    // Resync on another cluster: revision 1 again, and decided on the new snapshot alone.
    let other = opening(6);
    let answer = e.decide(open("s", other.clone())).await.unwrap();
    assert_eq!(answer.revision, 1);
    assert_same_decision(
        &answer,
        &stateless.decide(whole(other.clone())).await.unwrap(),
    );
    let err = e
        .decide(on("s", tick(2, other.now_ms + 2 * STEP_MS)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");

    let mut mirror = Mirror::new(&other);
    mirror.answered(&answer);
    let delta = tick(1, other.now_ms + STEP_MS);
    mirror.delta(&delta);
    let answer = e.decide(on("s", delta)).await.unwrap();
    assert_eq!(answer.revision, 2);
    assert_same_decision(
        &answer,
        &stateless.decide(whole(mirror.snapshot())).await.unwrap(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_requests_and_sessions_held_are_in_the_metrics() {
    let e = engine(config());
    let snap = opening(7);
    let now = snap.now_ms;
    e.decide(open("a", snap.clone())).await.unwrap();
    e.decide(open("b", snap.clone())).await.unwrap();
    e.decide(open("a", snap.clone())).await.unwrap(); // a resync
    e.decide(on("a", tick(1, now + STEP_MS))).await.unwrap();
    e.decide(on("a", tick(2, now + 2 * STEP_MS))).await.unwrap();
    e.decide(on("b", tick(1, now + STEP_MS))).await.unwrap();
    e.decide(on("a", tick(1, now))).await.unwrap_err(); // stale
    e.decide(on("c", tick(1, now))).await.unwrap_err(); // unknown
    // A session-less request is no session request.
    e.decide(whole(snap.clone())).await.unwrap();

    assert_eq!(session_requests(&e, "snapshot"), 3);
    assert_eq!(session_requests(&e, "delta"), 3);
    assert_eq!(session_requests(&e, "refused"), 2);
    let text = e.metrics().encode();
    for line in [
        "lachesis_session_requests_total{kind=\"snapshot\"} 3",
        "lachesis_session_requests_total{kind=\"delta\"} 3",
        "lachesis_session_requests_total{kind=\"refused\"} 2",
        "# TYPE lachesis_sessions gauge",
    ] {
        assert!(text.contains(line), "{line:?} missing from\n{text}");
    }
    let held: i64 = text
        .lines()
        .find_map(|l| l.strip_prefix("lachesis_sessions "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // "a" and "b"; the refused delta on the unknown "c" made no session.
    assert_eq!(held, 2, "sessions held");
}

/// A model arm that takes its time (past any deadline the tests set).
#[derive(Debug)]
struct Slow;

impl Policy for Slow {
    fn name(&self) -> &str {
        "slow"
    }
    fn decide(&mut self, _: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        std::thread::sleep(std::time::Duration::from_millis(300));
        Ok(Decision::default())
    }
}

/// A model arm that always fails.
#[derive(Debug)]
struct Failing;

impl Policy for Failing {
    fn name(&self) -> &str {
        "failing"
    }
    fn decide(&mut self, _: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        Err(PolicyError::Failed {
            policy: "failing".into(),
            message: "on purpose".into(),
        })
    }
}

/// Drives a session on routing `model` with `model` as the model arm: every answer comes
/// from the baseline after a `reason` fallback, decided on the cluster the deltas describe.
async fn model_failing_on_deltas(model: fn() -> Box<dyn Policy>, deadline_ms: f64, reason: &str) {
    let mut cfg = config();
    cfg.routing.mode = RoutingMode::Model;
    cfg.deadline_ms = deadline_ms;
    // A slot for each late computation, whatever the cores: every request reaches the model.
    cfg.model_slots = 8;
    let baseline = cfg.baseline.clone();
    let e = Arc::new(
        Engine::new(cfg, Arc::new(Metrics::new()))
            .unwrap()
            .with_model_policy(Arc::new(model)),
    );
    let stateless = engine(config());
    let snap = opening(8);
    let mut mirror = Mirror::new(&snap);
    let mut driver = SessionDriver::new(&snap, 30, STEP_MS, 9);
    let mut answer = e.decide(open("s", snap.clone())).await.unwrap();
    for round in 1..=3u64 {
        assert_eq!(answer.revision, round);
        assert_eq!(answer.arm, "model");
        assert_eq!(answer.decided_by, baseline, "round {round}: {answer:?}");
        assert_eq!(answer.fallbacks.len(), 1, "{:?}", answer.fallbacks);
        assert_eq!(answer.fallbacks[0].reason, reason, "{:?}", answer.fallbacks);
        assert_same_decision(
            &answer,
            &stateless.decide(whole(mirror.snapshot())).await.unwrap(),
        );
        mirror.answered(&answer);
        driver.answered(&answer);
        let delta = driver.delta();
        mirror.delta(&delta);
        answer = e.decide(on("s", delta)).await.unwrap();
    }
    assert_eq!(answer.revision, 4);
    assert_eq!(answer.fallbacks[0].reason, reason);
    assert_eq!(session_requests(&e, "delta"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_past_its_deadline_on_a_delta_falls_back_and_the_session_goes_on() {
    // The model's task keeps the world past the deadline: the chain decides on the copy.
    model_failing_on_deltas(|| Box::new(Slow), 30.0, "timeout").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_model_on_a_delta_falls_back_and_the_session_goes_on() {
    model_failing_on_deltas(|| Box::new(Failing), 60_000.0, "error").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_beyond_max_sessions_evicts_the_idle_one() {
    let mut cfg = config();
    cfg.max_sessions = 1;
    let e = engine(cfg);
    let snap = opening(9);
    let now = snap.now_ms;
    assert_eq!(e.decide(open("a", snap.clone())).await.unwrap().revision, 1);
    assert_eq!(e.decide(open("b", snap.clone())).await.unwrap().revision, 1);
    let err = e.decide(on("a", tick(1, now + STEP_MS))).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("full snapshot"), "{err:?}");
    // The evicted caller resyncs and goes on.
    assert_eq!(e.decide(open("a", snap.clone())).await.unwrap().revision, 1);
    assert_eq!(
        e.decide(on("a", tick(1, now + STEP_MS)))
            .await
            .unwrap()
            .revision,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_on_an_unknown_session_does_not_evict_a_held_one() {
    let mut cfg = config();
    cfg.max_sessions = 1;
    let e = engine(cfg);
    let snap = opening(10);
    let now = snap.now_ms;
    assert_eq!(e.decide(open("b", snap.clone())).await.unwrap().revision, 1);
    // A caller whose session is long gone keeps sending deltas on it.
    let err = e
        .decide(on("gone", tick(3, now + STEP_MS)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    // The refused request must not have cost "b" its session.
    let answer = e.decide(on("b", tick(1, now + STEP_MS))).await;
    assert_eq!(
        answer
            .map(|a| a.revision)
            .map_err(|s| s.message().to_string()),
        Ok(2),
        "a refused delta on an unknown session evicted the held session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_on_one_session_are_answered_in_turn() {
    let e = engine(config());
    let snap = opening(12);
    let now = snap.now_ms;
    e.decide(open("s", snap)).await.unwrap();
    // Two deltas following the same answer at once: one is answered, the other is stale.
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let e = Arc::clone(&e);
            tokio::spawn(async move { e.decide(on("s", tick(1, now + STEP_MS))).await })
        })
        .collect();
    let mut outcomes = Vec::new();
    for c in calls {
        outcomes.push(c.await.unwrap().map(|a| a.revision).map_err(|s| s.code()));
    }
    outcomes.sort_by_key(|o| o.is_err());
    assert_eq!(outcomes, vec![Ok(2), Err(Code::FailedPrecondition)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_off_refuses_session_requests_but_not_whole_snapshots() {
    let mut cfg = config();
    cfg.max_sessions = 0;
    let e = engine(cfg);
    let snap = opening(13);
    let err = e.decide(open("s", snap.clone())).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    let answer = e.decide(whole(snap)).await.unwrap();
    assert_eq!((answer.session.as_str(), answer.revision), ("", 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_compacted_after_many_departures_answers_as_the_whole_snapshot_would() {
    let e = engine(config());
    let stateless = engine(config());
    let snap = snapshot(20, 10, 0.6, 17);
    let mut mirror = Mirror::new(&snap);
    let mut answer = e.decide(open("s", snap.clone())).await.unwrap();
    let mut batch: Vec<String> = Vec::new();
    let mut departed = 0;
    // 1,100 short-lived jobs a round: past `COMPACT_AFTER` departures by the fifth delta.
    for round in 1..=6u64 {
        mirror.answered(&answer);
        let submitted: Vec<proto::Job> = (0..1_100u32)
            .map(|k| proto::Job {
                id: format!("r{round}-{k}"),
                tenant: format!("t{}", k % 7),
                priority: [0, 1, 2][k as usize % 3],
                gpus_per_task: 1 + k % 2,
                cpu_milli: 1_000,
                mem_mib: 1_024,
                wait_ms: u64::from(k % 1_000),
                ..Default::default()
            })
            .collect();
        let delta = proto::SnapshotDelta {
            revision: round,
            now_ms: snap.now_ms + round * STEP_MS,
            finished: std::mem::take(&mut batch),
            requeued: Vec::new(),
            submitted,
        };
        departed += delta.finished.len();
        batch = delta.submitted.iter().map(|j| j.id.clone()).collect();
        mirror.delta(&delta);
        answer = e.decide(on("s", delta)).await.unwrap();
        assert_eq!(answer.revision, round + 1);
        let reference = stateless.decide(whole(mirror.snapshot())).await.unwrap();
        assert_same_decision(&answer, &reference);
    }
    assert!(
        departed > lachesis_serve::world::COMPACT_AFTER,
        "{departed} departed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ab_and_shadow_routing_decide_a_delta_as_the_whole_snapshot() {
    for mode in [RoutingMode::Ab, RoutingMode::Shadow] {
        let routed = |mode| {
            let mut cfg = config();
            cfg.routing.mode = mode;
            cfg.routing.percent = 50.0;
            Arc::new(
                Engine::new(cfg, Arc::new(Metrics::new()))
                    .unwrap()
                    .with_model_policy(Arc::new(|| Box::new(Failing) as Box<dyn Policy>)),
            )
        };
        let (e, stateless) = (routed(mode), routed(mode));
        let snap = opening(18);
        let mut mirror = Mirror::new(&snap);
        let mut driver = SessionDriver::new(&snap, 30, STEP_MS, 19);
        let mut answer = e.decide(open("s", snap.clone())).await.unwrap();
        for round in 1..=4u64 {
            mirror.answered(&answer);
            driver.answered(&answer);
            let delta = driver.delta();
            mirror.delta(&delta);
            let id = format!("{mode:?}-{round}");
            answer = e
                .decide(proto::DecideRequest {
                    request_id: id.clone(),
                    ..on("s", delta)
                })
                .await
                .unwrap();
            assert_eq!(answer.revision, round + 1, "{mode:?}");
            assert_eq!(answer.arm, mode.as_str());
            let reference = stateless
                .decide(proto::DecideRequest {
                    request_id: id,
                    ..whole(mirror.snapshot())
                })
                .await
                .unwrap();
            assert_same_decision(&answer, &reference);
            assert_eq!(answer.fallbacks, reference.fallbacks, "{mode:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_learned_model_on_a_session_answers_as_on_the_whole_snapshot() {
    let mut cfg = config();
    cfg.model = "../models/default".into();
    cfg.routing.mode = RoutingMode::Model;
    let probe = engine(cfg.clone());
    assert_eq!(probe.info().status, "serving", "{:?}", probe.info());
    drive_against_whole_snapshots_with(cfg, opening(7)).await;
}
