//! The decision service end to end in-process: gRPC round trips, every fallback reason,
//! hot reload under load, A/B and shadow routing, auth, TLS, bad input, the decision log.

#![allow(clippy::unwrap_used)]

use lachesis_env::cluster::TaskPlacement;
use lachesis_env::policy::{Decision, DecisionContext, Placement, Policy, PolicyError};
use lachesis_serve::config::{RoutingMode, SplitKey, TlsConfig};
use lachesis_serve::decision_log::{LogLine, log_files};
use lachesis_serve::engine::in_treatment;
use lachesis_serve::{Engine, Metrics, ServeConfig, client, proto, synthetic};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

const MODEL: &str = "../models/default";

fn config(model: &str) -> ServeConfig {
    let mut cfg = ServeConfig {
        model: model.into(),
        // Debug builds score slowly; the deadline tests set their own.
        deadline_ms: 60_000.0,
        ..ServeConfig::default()
    };
    cfg.grpc.addr = "127.0.0.1:0".into();
    cfg.http.addr = "127.0.0.1:0".into();
    cfg
}

fn small() -> proto::Snapshot {
    synthetic::snapshot(24, 12, 0.7, 7)
}

fn request(snapshot: proto::Snapshot) -> proto::DecideRequest {
    proto::DecideRequest {
        snapshot: Some(snapshot),
        ..Default::default()
    }
}

fn engine(cfg: ServeConfig) -> Arc<Engine> {
    Arc::new(Engine::new(cfg, Arc::new(Metrics::new())).expect("engine starts"))
}

fn fallbacks(engine: &Engine, reason: &str) -> u64 {
    Metrics::counter_value(&engine.metrics().fallbacks, "reason", reason)
}

/// A copy of the default model in a temp dir, for tests that damage it.
fn model_copy(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lachesis-serve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["model.bpk", "manifest.json"] {
        std::fs::copy(Path::new(MODEL).join(f), dir.join(f)).unwrap();
    }
    dir
}

/// Every answer must be applicable to its snapshot: rebuild and apply it.
fn assert_applies(snapshot: &proto::Snapshot, answer: &proto::DecideResponse) {
    let mut world = lachesis_serve::world::World::build(snapshot).unwrap();
    let decision = Decision {
        preemptions: answer
            .preemptions
            .iter()
            .map(|v| world.job_id(v).unwrap())
            .collect(),
        placements: answer
            .placements
            .iter()
            .map(|p| Placement {
                job: world.job_id(&p.job).unwrap(),
                tasks: p
                    .tasks
                    .iter()
                    .map(|t| TaskPlacement {
                        node: world.node_id(&t.node).unwrap(),
                        gpus: t.gpus.iter().map(|g| *g as u8).collect(),
                    })
                    .collect(),
            })
            .collect(),
        ..Decision::default()
    };
    lachesis_serve::shield::check(&world, &decision).unwrap();
    world.apply(&decision).unwrap();
    let left: Vec<_> = world.pending().filter(|j| world.is_real(*j)).collect();
    assert_eq!(
        answer.pending.len(),
        left.len(),
        "one reason per job left pending"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_round_trip_with_the_model_health_and_reflection() {
    let running = lachesis_serve::start(config(MODEL)).await.unwrap();
    let addr = running.grpc_addr.to_string();
    let mut c = client::connect(&addr, None, None).await.unwrap();
    let snap = small();
    let answer = c.decide(request(snap.clone())).await.unwrap().into_inner();
    assert!(answer.decided_by.starts_with("model:"), "{answer:?}");
    assert!(answer.fallbacks.is_empty(), "{:?}", answer.fallbacks);
    assert_eq!(answer.arm, "model");
    assert!(!answer.placements.is_empty());
    assert_applies(&snap, &answer);

    let info = c
        .model_info(proto::ModelInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.status, "serving");
    assert_eq!(
        info.feature_schema,
        lachesis_env::gym::FEATURE_SCHEMA_VERSION
    );
    assert_eq!(info.version.len(), 16);
    assert_eq!(info.deciding, "batched", "the service's default");

    // Score: every node answered, infeasible ones with a reason and score 0.
    let job = snap.pending[0].id.clone();
    let scores = c
        .score(proto::ScoreRequest {
            snapshot: Some(snap.clone()),
            job: job.clone(),
            nodes: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(scores.nodes.len(), snap.nodes.len());
    for s in &scores.nodes {
        assert!(s.score <= 100);
        assert_eq!(s.feasible, s.reason.is_empty(), "{s:?}");
    }

    // Explain agrees with Decide.
    let ex = c
        .explain(proto::ExplainRequest {
            snapshot: Some(snap.clone()),
            job: job.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let placed = answer.placements.iter().any(|p| p.job == job);
    assert_eq!(ex.placed, placed);
    assert_eq!(ex.reason.is_some(), !placed);

    let channel = client::channel(&addr, None, None).await.unwrap();
    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: "lachesis.v1.Scheduler".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, 1, "SERVING");

    let services = reflection_services(channel).await;
    assert!(
        services.iter().any(|s| s == "lachesis.v1.Scheduler"),
        "{services:?}"
    );
    assert!(services.iter().any(|s| s == "grpc.health.v1.Health"));
    running.shutdown().await.unwrap();
}

async fn reflection_services(channel: tonic::transport::Channel) -> Vec<String> {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let mut c = ServerReflectionClient::new(channel);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = c
        .server_reflection_info(tokio_stream_once(req))
        .await
        .unwrap()
        .into_inner();
    let resp = stream.message().await.unwrap().unwrap();
    match resp.message_response {
        Some(MessageResponse::ListServicesResponse(l)) => {
            l.service.into_iter().map(|s| s.name).collect()
        }
        other => panic!("unexpected reflection answer {other:?}"),
    }
}

fn tokio_stream_once<T: Send + 'static>(item: T) -> impl tonic::IntoStreamingRequest<Message = T> {
    tonic::codegen::tokio_stream::iter(vec![item])
}

/// A policy that books GPU 0 of the first node for two jobs at once.
#[derive(Debug)]
struct DoubleBooker;

impl Policy for DoubleBooker {
    fn name(&self) -> &str {
        "double-booker"
    }
    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        let node = lachesis_env::units::NodeId(0);
        let placements = ctx
            .pending()
            .filter(|p| p.spec.task.gpus == 1 && p.spec.tasks == 1)
            .take(2)
            .map(|p| Placement {
                job: p.spec.id,
                tasks: vec![TaskPlacement {
                    node,
                    gpus: vec![0],
                }],
            })
            .collect();
        Ok(Decision {
            preemptions: Vec::new(),
            placements,
            ..Decision::default()
        })
    }
}

/// Fills a burnpack's tensor data with NaN (from the end, 4-byte aligned, up to the metadata).
fn nan_weights(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let meta = u32::from_le_bytes(bytes[6..10].try_into().unwrap()) as usize;
    let start = 10 + meta;
    let nan = f32::NAN.to_le_bytes();
    let mut end = bytes.len();
    while end >= start + 4 {
        bytes[end - 4..end].copy_from_slice(&nan);
        end -= 4;
    }
    std::fs::write(path, bytes).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fallback_reason_falls_back_and_is_counted() {
    let broken = model_copy("load-error");
    std::fs::write(broken.join("model.bpk"), b"not a burnpack").unwrap();
    let schema = model_copy("schema");
    let manifest = std::fs::read_to_string(schema.join("manifest.json")).unwrap();
    let current = lachesis_env::gym::FEATURE_SCHEMA_VERSION;
    let manifest = manifest.replacen(
        &format!("\"feature_schema_version\": {current}"),
        &format!("\"feature_schema_version\": {}", current - 1),
        1,
    );
    assert!(manifest.contains(&format!("\"feature_schema_version\": {}", current - 1)));
    std::fs::write(schema.join("manifest.json"), manifest).unwrap();
    let nan = model_copy("nan");
    nan_weights(&nan.join("model.bpk"));

    let cases: Vec<(&str, ServeConfig, bool)> = vec![
        ("no-model", config(""), false),
        ("load-error", config(broken.to_str().unwrap()), false),
        ("schema-mismatch", config(schema.to_str().unwrap()), false),
        ("nan", config(nan.to_str().unwrap()), false),
        (
            "timeout",
            ServeConfig {
                deadline_ms: 0.0,
                ..config(MODEL)
            },
            false,
        ),
        // A real model computation outliving a real deadline is shown by
        // late_model_computations_hold_their_slot_and_the_model_is_skipped_when_busy.
        (
            "below-bar",
            ServeConfig {
                max_relative_jct: 0.5,
                ..config(MODEL)
            },
            false,
        ),
        ("shield", config(MODEL), true),
    ];
    for (reason, cfg, double_book) in cases {
        let baseline = cfg.baseline.clone();
        let mut e = Engine::new(cfg, Arc::new(Metrics::new())).unwrap();
        if double_book {
            e = e.with_model_policy(Arc::new(|| Box::new(DoubleBooker) as Box<dyn Policy>));
        }
        let e = Arc::new(e);
        let snap = synthetic::snapshot(8, 10, 0.2, 3);
        let answer = e.decide(request(snap.clone())).await.unwrap();
        assert_eq!(answer.decided_by, baseline, "{reason}: {answer:?}");
        assert_eq!(answer.fallbacks[0].reason, reason, "{:?}", answer.fallbacks);
        assert!(!answer.fallbacks[0].detail.is_empty());
        assert_eq!(fallbacks(&e, reason), 1, "{reason} counted once");
        assert!(
            e.metrics().encode().contains(&format!(
                "lachesis_fallbacks_total{{reason=\"{reason}\"}} 1"
            )),
            "{reason} exported"
        );
        assert_applies(&snap, &answer);
        let status = e.info().status;
        let expected = match reason {
            "no-model" => "none",
            "load-error" | "schema-mismatch" => "failed",
            "below-bar" => "cold",
            _ => "serving",
        };
        assert_eq!(status, expected, "{reason}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_reload_under_concurrent_load_loses_no_request() {
    let admin = std::env::temp_dir().join(format!("lachesis-admin-{}", std::process::id()));
    std::fs::write(&admin, "s3cret-admin\n").unwrap();
    let mut cfg = config(MODEL);
    cfg.auth.admin_token_file = Some(admin);
    let running = lachesis_serve::start(cfg).await.unwrap();
    let addr = running.grpc_addr.to_string();
    let snap = synthetic::snapshot(16, 8, 0.5, 11);
    let mut load = Vec::new();
    for _ in 0..4 {
        let (addr, snap) = (addr.clone(), snap.clone());
        load.push(tokio::spawn(async move {
            let mut c = client::connect(&addr, None, None).await.unwrap();
            let mut ok = 0;
            for _ in 0..25 {
                let a = c.decide(request(snap.clone())).await.unwrap().into_inner();
                assert!(a.fallbacks.is_empty(), "{:?}", a.fallbacks);
                ok += 1;
            }
            ok
        }));
    }
    let mut c = client::connect(&addr, None, None).await.unwrap();
    let broken = std::env::temp_dir().join("lachesis-no-such-model");
    for i in 0..10 {
        let path = if i % 2 == 0 {
            MODEL.to_string()
        } else {
            broken.display().to_string()
        };
        let r = c
            .reload_model(
                client::with_token(proto::ReloadModelRequest { path }, Some("s3cret-admin"))
                    .unwrap(),
            )
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.ok, i % 2 == 0, "{r:?}");
        assert_eq!(r.info.unwrap().status, "serving", "the old model stays");
    }
    let mut total = 0;
    for h in load {
        total += h.await.unwrap();
    }
    assert_eq!(total, 100);
    let m = running.engine.metrics();
    assert_eq!(Metrics::counter_value(&m.model_reloads, "result", "ok"), 5);
    assert_eq!(
        Metrics::counter_value(&m.model_reloads, "result", "failed"),
        5
    );
    running.shutdown().await.unwrap();
}

#[test]
fn ab_split_matches_its_percentage() {
    for percent in [0.0, 10.0, 25.0, 50.0, 100.0] {
        let n = 20_000;
        let hits = (0..n)
            .filter(|i| in_treatment(&format!("tenant-{i}"), percent))
            .count();
        let share = hits as f64 / n as f64 * 100.0;
        assert!(
            (share - percent).abs() < 1.0,
            "{percent}%: measured {share:.2}%"
        );
    }
    // Stable: the same key always lands in the same arm.
    assert_eq!(in_treatment("team-3", 30.0), in_treatment("team-3", 30.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ab_routing_splits_jobs_and_both_arms_decide() {
    let mut cfg = config(MODEL);
    cfg.routing.mode = RoutingMode::Ab;
    cfg.routing.percent = 50.0;
    cfg.routing.key = SplitKey::Job;
    let e = engine(cfg);
    let snap = synthetic::snapshot(40, 30, 0.3, 5);
    let answer = e.decide(request(snap.clone())).await.unwrap();
    assert_eq!(answer.arm, "ab");
    assert!(answer.decided_by.contains('+'), "{}", answer.decided_by);
    assert!(answer.decided_by.contains("model:"));
    assert_applies(&snap, &answer);
    let m = e.metrics();
    let t = Metrics::counter_value(&m.ab_jobs, "arm", "treatment");
    let c = Metrics::counter_value(&m.ab_jobs, "arm", "control");
    assert_eq!((t + c) as usize, snap.pending.len());
    let expected = snap
        .pending
        .iter()
        .filter(|j| in_treatment(&j.id, 50.0))
        .count();
    assert_eq!(t as usize, expected);
}

/// Both ways the model can build a decision answer a crowded snapshot (preemptions
/// included) by the model itself, and the answer passes the shield and applies; batched
/// deciding needs fewer model passes (`lachesis_model_passes`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_and_stepwise_deciding_both_answer_and_pass_the_shield() {
    let snap = synthetic::snapshot(60, 80, 0.9, 21);
    let mut answers = Vec::new();
    for deciding in [
        lachesis_agent::Deciding::Batched,
        lachesis_agent::Deciding::Stepwise,
    ] {
        let mut cfg = config(MODEL);
        cfg.deciding = deciding;
        let e = engine(cfg);
        let a = e.decide(request(snap.clone())).await.unwrap();
        assert!(a.decided_by.starts_with("model:"), "{}", a.decided_by);
        assert!(a.fallbacks.is_empty(), "{:?}", a.fallbacks);
        assert!(!a.placements.is_empty());
        assert_applies(&snap, &a);
        answers.push((a, e.metrics().model_passes.get()));
    }
    let (batched, stepwise) = (answers[0].1, answers[1].1);
    assert!(
        batched > 0 && batched < stepwise,
        "{batched} vs {stepwise} passes"
    );
    let answers: Vec<_> = answers.into_iter().map(|(a, _)| a).collect();
    assert!(
        answers.iter().any(|a| !a.preemptions.is_empty()),
        "the snapshot is crowded enough to preempt"
    );
}

/// The model arm decides each snapshot afresh: what one pooled policy saw in an earlier
/// request (its job ids, estimates, task mix, cluster size, time) must not change its answer
/// to a later one, so one snapshot always gets one answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_answers_a_snapshot_the_same_whatever_it_saw_before() {
    let later = synthetic::snapshot(30, 40, 0.6, 11);
    let fresh = engine(config(MODEL));
    let alone = fresh.decide(request(later.clone())).await.unwrap();
    assert!(
        alone.decided_by.starts_with("model:"),
        "{}",
        alone.decided_by
    );
    let used = engine(config(MODEL));
    for seed in [3, 4] {
        let earlier = synthetic::snapshot(60 * seed as usize, 40, 0.5, seed);
        used.decide(request(earlier)).await.unwrap();
    }
    let after = used.decide(request(later.clone())).await.unwrap();
    assert!(!alone.placements.is_empty());
    assert_eq!(after.placements, alone.placements);
    assert_eq!(after.preemptions, alone.preemptions);
    assert_applies(&later, &after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_returns_the_baseline_and_logs_both() {
    let dir = std::env::temp_dir().join(format!("lachesis-shadow-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cfg = config(MODEL);
    cfg.routing.mode = RoutingMode::Shadow;
    cfg.decision_log.path = Some(dir.join("decisions.jsonl"));
    let baseline = cfg.baseline.clone();
    let e = engine(cfg);
    let snap = small();
    for _ in 0..3 {
        let answer = e.decide(request(snap.clone())).await.unwrap();
        assert_eq!(answer.arm, "shadow");
        assert_eq!(answer.decided_by, baseline);
    }
    e.flush();
    let text = std::fs::read_to_string(dir.join("decisions.jsonl")).unwrap();
    let lines: Vec<LogLine> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    for l in &lines {
        assert_eq!(l.snapshot, snap);
        let shadow = l.shadow.as_ref().expect("the model's answer is logged");
        assert!(shadow.decided_by.starts_with("model:"));
        assert_eq!(l.answer.decided_by, baseline);
    }
    let agree = Metrics::counter_value(&e.metrics().shadow_agreement, "agree", "true")
        + Metrics::counter_value(&e.metrics().shadow_agreement, "agree", "false");
    assert_eq!(agree, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decision_log_rotates_and_stays_bounded() {
    let dir = std::env::temp_dir().join(format!("lachesis-rotate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cfg = config("");
    cfg.routing.mode = RoutingMode::Baseline;
    cfg.decision_log.path = Some(dir.join("d.jsonl"));
    cfg.decision_log.max_bytes = 40_000;
    cfg.decision_log.keep = 2;
    let e = engine(cfg);
    let snap = small();
    for _ in 0..60 {
        e.decide(request(snap.clone())).await.unwrap();
    }
    e.flush();
    let files = log_files(&dir.join("d.jsonl"));
    assert_eq!(files.len(), 3, "{files:?}");
    let mut lines = 0;
    for f in &files {
        let size = std::fs::metadata(f).unwrap().len();
        assert!(size <= 40_000, "{} is {size} bytes", f.display());
        for l in std::fs::read_to_string(f).unwrap().lines() {
            let _: LogLine = serde_json::from_str(l).unwrap();
            lines += 1;
        }
    }
    assert!(lines < 60, "older records rotated away");
    let written = Metrics::counter_value(&e.metrics().decision_log, "result", "written");
    assert_eq!(written, 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_refuses_missing_and_wrong_tokens() {
    let token = std::env::temp_dir().join(format!("lachesis-token-{}", std::process::id()));
    std::fs::write(&token, "user-token").unwrap();
    let admin = std::env::temp_dir().join(format!("lachesis-admin2-{}", std::process::id()));
    std::fs::write(&admin, "admin-token").unwrap();

    // No admin token configured: admin calls are always refused.
    let running = lachesis_serve::start(config(MODEL)).await.unwrap();
    let mut c = client::connect(&running.grpc_addr.to_string(), None, None)
        .await
        .unwrap();
    let reload = |t: Option<&str>| {
        client::with_token(
            proto::ReloadModelRequest {
                path: String::new(),
            },
            t,
        )
        .unwrap()
    };
    let e = c.reload_model(reload(Some("anything"))).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    running.shutdown().await.unwrap();

    let mut cfg = config(MODEL);
    cfg.auth.token_file = Some(token);
    cfg.auth.admin_token_file = Some(admin);
    cfg.auth.require_for_all = true;
    let running = lachesis_serve::start(cfg).await.unwrap();
    let mut c = client::connect(&running.grpc_addr.to_string(), None, None)
        .await
        .unwrap();
    for t in [None, Some("wrong"), Some("user-token")] {
        let e = c.reload_model(reload(t)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "admin with {t:?}");
    }
    assert!(c.reload_model(reload(Some("admin-token"))).await.is_ok());
    for t in [None, Some("wrong")] {
        let e = c
            .decide(client::with_token(request(small()), t).unwrap())
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "decide with {t:?}");
    }
    assert!(
        c.decide(client::with_token(request(small()), Some("user-token")).unwrap())
            .await
            .is_ok()
    );
    let exported = running.engine.metrics().encode();
    assert!(
        exported.contains("rpc=\"Decide\",code=\"Unauthenticated\"} 2"),
        "refusals are counted"
    );
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_round_trip() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut cfg = config("");
    cfg.grpc.tls = Some(TlsConfig {
        cert: data.join("server.crt"),
        key: data.join("server.key"),
    });
    let running = lachesis_serve::start(cfg).await.unwrap();
    let addr = running.grpc_addr.to_string();
    let mut c = client::connect(&addr, Some(&data.join("ca.crt")), None)
        .await
        .unwrap();
    let a = c.decide(request(small())).await.unwrap().into_inner();
    assert!(!a.decided_by.is_empty());
    // A plaintext client cannot talk to it.
    let mut plain = client::connect(&addr, None, None).await;
    if let Ok(p) = plain.as_mut() {
        assert!(p.decide(request(small())).await.is_err());
    }
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_snapshots_are_invalid_argument_with_the_field_path() {
    let mut cfg = config("");
    cfg.grpc.max_request_bytes = 64 * 1024;
    let running = lachesis_serve::start(cfg).await.unwrap();
    let mut c = client::connect(&running.grpc_addr.to_string(), None, None)
        .await
        .unwrap();
    let base = small();
    type Mutation = Box<dyn Fn(&mut proto::Snapshot)>;
    let cases: Vec<(&str, Mutation)> = vec![
        (
            "snapshot.running[0].tasks[0].node",
            Box::new(|s| s.running[0].tasks[0].node = "ghost".into()),
        ),
        (
            "snapshot.pending[1].id",
            Box::new(|s| s.pending[1].id = s.pending[0].id.clone()),
        ),
        (
            "snapshot.pending[2]",
            Box::new(|s| s.pending[2].gpus_per_task = 9),
        ),
        (
            "snapshot.nodes[3].gpu_free_milli[0]",
            Box::new(|s| s.nodes[3].gpu_free_milli = vec![1200; 8]),
        ),
        (
            "snapshot.nodes[0].cpu_free_milli",
            Box::new(|s| s.nodes[0].cpu_free_milli = Some(s.nodes[0].cpu_milli + 1)),
        ),
        (
            "snapshot.nodes[1].name",
            Box::new(|s| s.nodes[1].name = s.nodes[0].name.clone()),
        ),
        (
            "snapshot.running[0].tasks",
            Box::new(|s| s.running[0].tasks[0].gpus = vec![7, 7]),
        ),
        (
            "snapshot.pending[0].gpu_milli",
            Box::new(|s| {
                s.pending[0].gpus_per_task = 2;
                s.pending[0].gpu_milli = 500;
            }),
        ),
        (
            "snapshot.pending[1].idle_ms",
            Box::new(|s| s.pending[1].idle_ms = Some(s.pending[1].wait_ms + 1)),
        ),
        ("snapshot.nodes", Box::new(|s| s.nodes.clear())),
    ];
    for (path, mutate) in cases {
        let mut s = base.clone();
        mutate(&mut s);
        let e = c.decide(request(s)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{path}: {e:?}");
        assert!(
            e.message().starts_with(path),
            "{path}: got {:?}",
            e.message()
        );
    }
    let e = c.decide(proto::DecideRequest::default()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    // Oversized: refused by the transport before any decoding.
    let big = synthetic::snapshot(2000, 10, 0.5, 1);
    let e = c.decide(request(big)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::OutOfRange, "{e:?}");
    // The server is still up.
    assert!(c.decide(request(base)).await.is_ok());
    running.shutdown().await.unwrap();
}

/// A GPU model the catalog does not know (`V100x`, a typo) is refused by every RPC that takes a
/// snapshot, naming the field and the nearest catalog names, where it used to decide as a
/// V100-class model of its own; catalog names in any case and their aliases pass; with
/// `allow_unknown_gpu_models` the service takes it as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_gpu_models_are_refused_unless_allowed() {
    let running = lachesis_serve::start(config("")).await.unwrap();
    let mut c = client::connect(&running.grpc_addr.to_string(), None, None)
        .await
        .unwrap();
    let base = small();
    let mut typo = base.clone();
    typo.nodes[2].gpu_model = "V100x".into();
    let e = c.decide(request(typo.clone())).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    let m = e.message();
    assert!(
        m.starts_with("snapshot.nodes[2].gpu_model: unknown GPU model \"V100x\"")
            && m.contains("closest known: V100")
            && m.contains("allow_unknown_gpu_models"),
        "{m}"
    );
    let job = base.pending[0].id.clone();
    let e = c
        .score(proto::ScoreRequest {
            snapshot: Some(typo.clone()),
            job: job.clone(),
            nodes: Vec::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().starts_with("snapshot.nodes[2].gpu_model"),
        "{e:?}"
    );
    let e = c
        .explain(proto::ExplainRequest {
            snapshot: Some(typo.clone()),
            job: job.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");

    // A job's allowed models are catalog names too.
    let mut wants = base.clone();
    wants.pending[1].gpu_types = vec!["A100".into(), "H10".into()];
    let e = c.decide(request(wants)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().starts_with("snapshot.pending[1].gpu_types[1]") && e.message().contains("H100"),
        "{e:?}"
    );

    // Case and aliases are the catalog's own: they pass.
    let mut spelt = base.clone();
    spelt.nodes[3].gpu_model = "v100-32g".into();
    spelt.nodes[0].gpu_model = "a100".into();
    assert!(c.decide(request(spelt)).await.is_ok());
    running.shutdown().await.unwrap();

    let mut cfg = config("");
    cfg.allow_unknown_gpu_models = true;
    let running = lachesis_serve::start(cfg).await.unwrap();
    let mut c = client::connect(&running.grpc_addr.to_string(), None, None)
        .await
        .unwrap();
    assert!(c.decide(request(typo)).await.is_ok());
    running.shutdown().await.unwrap();
}

/// A model arm that takes its time.
#[derive(Debug)]
struct Slow;

impl Policy for Slow {
    fn name(&self) -> &str {
        "slow"
    }
    fn decide(&mut self, _: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        std::thread::sleep(std::time::Duration::from_millis(400));
        Ok(Decision::default())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limit_sheds_load_with_resource_exhausted() {
    let mut cfg = config(MODEL);
    cfg.grpc.max_concurrency = 1;
    cfg.grpc.queue_timeout_ms = 50;
    let e = Engine::new(cfg, Arc::new(Metrics::new()))
        .unwrap()
        .with_model_policy(Arc::new(|| Box::new(Slow) as Box<dyn Policy>));
    let running = lachesis_serve::start_with(Arc::new(e)).await.unwrap();
    let addr = running.grpc_addr.to_string();
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let addr = addr.clone();
            tokio::spawn(async move {
                let mut c = client::connect(&addr, None, None).await.unwrap();
                c.decide(request(small())).await.map(|_| ())
            })
        })
        .collect();
    let mut codes = Vec::new();
    for c in calls {
        codes.push(
            c.await
                .unwrap()
                .map_or_else(|s| s.code(), |()| tonic::Code::Ok),
        );
    }
    codes.sort_by_key(|c| *c as i32);
    assert_eq!(codes, vec![tonic::Code::Ok, tonic::Code::ResourceExhausted]);
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_model_computations_hold_their_slot_and_the_model_is_skipped_when_busy() {
    let mut cfg = config(MODEL);
    cfg.deadline_ms = 50.0;
    cfg.model_slots = 1;
    let e = Arc::new(
        Engine::new(cfg, Arc::new(Metrics::new()))
            .unwrap()
            .with_model_policy(Arc::new(|| Box::new(Slow) as Box<dyn Policy>)),
    );
    let first = e.decide(request(small())).await.unwrap();
    assert_eq!(first.fallbacks[0].reason, "timeout");
    // The slow computation still runs (400 ms): the next request does not wait for it.
    let second = e.decide(request(small())).await.unwrap();
    assert_eq!(second.fallbacks[0].reason, "busy");
    assert_eq!(fallbacks(&e, "busy"), 1);
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let third = e.decide(request(small())).await.unwrap();
    assert_eq!(
        third.fallbacks[0].reason, "timeout",
        "the slot is free again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ab_with_a_model_past_its_deadline_falls_back_for_the_treatment_jobs_only() {
    let mut cfg = config(MODEL);
    cfg.routing.mode = RoutingMode::Ab;
    cfg.routing.percent = 50.0;
    cfg.routing.key = SplitKey::Job;
    cfg.deadline_ms = 50.0;
    let baseline = cfg.baseline.clone();
    let e = Arc::new(
        Engine::new(cfg, Arc::new(Metrics::new()))
            .unwrap()
            .with_model_policy(Arc::new(|| Box::new(Slow) as Box<dyn Policy>)),
    );
    for k in 0..4 {
        let snap = synthetic::snapshot(40, 30, 0.3, k);
        let answer = e
            .decide(proto::DecideRequest {
                snapshot: Some(snap.clone()),
                request_id: format!("ab-{k}"),
                ..Default::default()
            })
            .await
            .unwrap();
        let reasons: Vec<&str> = answer.fallbacks.iter().map(|f| f.reason.as_str()).collect();
        assert!(reasons.contains(&"timeout"), "{reasons:?}");
        assert!(
            !reasons.contains(&"shield"),
            "the merge stays consistent: {reasons:?}"
        );
        assert_eq!(answer.decided_by, format!("{baseline}+{baseline}"));
        assert_applies(&snap, &answer);
        tokio::time::sleep(std::time::Duration::from_millis(450)).await;
    }
}
