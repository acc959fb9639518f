#![allow(clippy::unwrap_used)]
//! Typed snapshots end to end in-process (issue #26, point 4): jobs name workload types of the
//! service's throughput table and elastic ranges; the heterogeneity-aware heuristics answer
//! with GPU shares and resizes; a session carries them out and moves on by deltas; the shield
//! refuses a pair the table forbids, a third job on a GPU and a resize out of range, and the
//! chain answers instead; a workload the service cannot read is refused, naming the field.

use lachesis_env::cluster::TaskPlacement;
use lachesis_env::policy::{Decision, DecisionContext, Placement, Policy, PolicyError};
use lachesis_env::throughput::load_table;
use lachesis_env::units::NodeId;
use lachesis_serve::config::RoutingMode;
use lachesis_serve::{Engine, Metrics, ServeConfig, proto};
use std::sync::Arc;
use tonic::Code;

const RESNET50: &str = "ResNet-50 (batch size 64)";
const LM: &str = "LM (batch size 20)";
const RESNET18: &str = "ResNet-18 (batch size 16)";

fn config(baseline: &str) -> ServeConfig {
    let mut cfg = ServeConfig {
        model: String::new(),
        baseline: baseline.into(),
        fallback: vec!["fifo/fastest".into()],
        throughputs: "gavel".into(),
        deadline_ms: 60_000.0,
        ..ServeConfig::default()
    };
    cfg.routing.mode = RoutingMode::Baseline;
    cfg
}

fn engine(cfg: ServeConfig) -> Arc<Engine> {
    Arc::new(Engine::new(cfg, Arc::new(Metrics::new())).unwrap())
}

fn node(name: &str, model: &str, gpus: u32) -> proto::Node {
    proto::Node {
        name: name.into(),
        gpu_model: model.into(),
        gpus,
        cpu_milli: 64_000,
        mem_mib: 256_000,
        ..Default::default()
    }
}

/// A typed whole-GPU job of `gpus` GPUs, preemptible, waiting `wait_ms`.
fn job(id: &str, workload: &str, gpus: u32, wait_ms: u64) -> proto::Job {
    proto::Job {
        id: id.into(),
        tenant: "t".into(),
        preemptible: true,
        tasks: gpus,
        gpus_per_task: 1,
        cpu_milli: 1_000,
        mem_mib: 1_024,
        wait_ms,
        workload: workload.into(),
        ..Default::default()
    }
}

fn running(job: proto::Job, node: &str, gpus: &[u32], run_ms: u64) -> proto::RunningJob {
    proto::RunningJob {
        tasks: gpus
            .iter()
            .map(|g| proto::TaskPlacement {
                node: node.into(),
                gpus: vec![*g],
            })
            .collect(),
        job: Some(job),
        run_ms,
    }
}

fn placed_on(p: &proto::Placement) -> Vec<(String, Vec<u32>)> {
    p.tasks
        .iter()
        .map(|t| (t.node.clone(), t.gpus.clone()))
        .collect()
}

/// One V100 that a ResNet-50 job holds; an LM job waits. Gavel's table pairs them on a V100
/// with a summed normalised rate of 1.41, above `colocate`'s break-even of 1.0: the answer
/// shares the GPU. The session then carries the pair: a third job waits (the GPU holds two),
/// and once the ResNet-50 job finishes, it shares with the LM job in its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_are_answered_carried_by_the_session_and_never_three_to_a_gpu() {
    let e = engine(config("fifo/fastest/colocate"));
    let snapshot = proto::Snapshot {
        now_ms: 1_000_000,
        nodes: vec![node("v0", "V100", 1)],
        running: vec![running(job("r", RESNET50, 1, 600_000), "v0", &[0], 600_000)],
        pending: vec![job("lm", LM, 1, 60_000)],
        ..Default::default()
    };
    let answer = e
        .decide(proto::DecideRequest {
            snapshot: Some(snapshot),
            session: "s".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(answer.fallbacks.is_empty(), "{:?}", answer.fallbacks);
    assert!(answer.placements.is_empty());
    assert_eq!(answer.shares.len(), 1, "{answer:?}");
    assert_eq!(answer.shares[0].job, "lm");
    assert_eq!(placed_on(&answer.shares[0]), vec![("v0".into(), vec![0])]);
    assert!(answer.pending.is_empty(), "{:?}", answer.pending);

    // A third job: the GPU holds two already, so it waits, with a reason.
    let answer = e
        .decide(proto::DecideRequest {
            session: "s".into(),
            delta: Some(proto::SnapshotDelta {
                revision: answer.revision,
                now_ms: 1_010_000,
                submitted: vec![job("r2", RESNET50, 1, 0)],
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(answer.shares.is_empty() && answer.placements.is_empty());
    assert_eq!(answer.pending.len(), 1);
    assert_eq!(answer.pending[0].job, "r2");

    // The ResNet-50 job finishes: the LM job holds the GPU alone, and r2 joins it.
    let answer = e
        .decide(proto::DecideRequest {
            session: "s".into(),
            delta: Some(proto::SnapshotDelta {
                revision: answer.revision,
                now_ms: 1_020_000,
                finished: vec!["r".into()],
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(answer.shares.len(), 1, "{answer:?}");
    assert_eq!(answer.shares[0].job, "r2");
    assert_eq!(placed_on(&answer.shares[0]), vec![("v0".into(), vec![0])]);
}

/// An elastic ResNet-18 job (1..8 GPUs) runs on 1 of 4 idle V100s with nobody waiting:
/// `elastic` grows it into the idle GPUs, the answer carries the resize, and the session
/// holds the job at its new size (a snapshot of it round-trips through a delta).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elastic_job_is_resized_and_the_session_keeps_its_new_size() {
    let e = engine(config("fifo/fastest/elastic"));
    let mut elastic = job("e", RESNET18, 1, 600_000);
    (elastic.min_gpus, elastic.max_gpus) = (1, 8);
    let snapshot = proto::Snapshot {
        now_ms: 1_000_000,
        nodes: vec![node("v0", "V100", 4)],
        running: vec![running(elastic, "v0", &[0], 600_000)],
        ..Default::default()
    };
    let answer = e
        .decide(proto::DecideRequest {
            snapshot: Some(snapshot),
            session: "e".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(answer.fallbacks.is_empty(), "{:?}", answer.fallbacks);
    assert_eq!(answer.resizes.len(), 1, "{answer:?}");
    let r = &answer.resizes[0];
    assert_eq!(r.job, "e");
    assert!(r.tasks.len() > 1, "grown: {r:?}");
    assert!(r.tasks.iter().all(|t| t.node == "v0" && t.gpus.len() == 1));
    // The session holds it at its new size: a 1-GPU job submitted now finds only what the
    // grown job left.
    let free = 4 - r.tasks.len();
    let answer = e
        .decide(proto::DecideRequest {
            session: "e".into(),
            delta: Some(proto::SnapshotDelta {
                revision: answer.revision,
                now_ms: 1_001_000,
                submitted: (0..free + 1)
                    .map(|i| {
                        let mut j = job(&format!("p{i}"), RESNET50, 1, 0);
                        j.preemptible = false;
                        j
                    })
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    // The free GPUs take `free` of them; for the last, `elastic` shrinks the grown job (had
    // the session lost the resize, it would see room for all and shrink nothing).
    assert_eq!(answer.placements.len(), free + 1, "{answer:?}");
    assert_eq!(answer.resizes.len(), 1, "{answer:?}");
    let shrunk = answer.resizes[0].tasks.len();
    assert!(shrunk < r.tasks.len() && shrunk + free < 4, "{answer:?}");
}

/// A model arm that starts the first pending job on GPU 0 of node 0 beside whoever holds it,
/// or resizes the first running elastic job to `resize_to` GPUs on node 0.
#[derive(Debug)]
struct Sharer {
    resize_to: Option<u8>,
}

impl Policy for Sharer {
    fn name(&self) -> &str {
        "sharer"
    }
    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        let mut d = Decision::default();
        if let Some(n) = self.resize_to {
            let job = ctx.cluster().running().find(|a| a.elastic).unwrap().job;
            d.resizes.push(Placement {
                job,
                tasks: (0..n)
                    .map(|g| TaskPlacement {
                        node: NodeId(0),
                        gpus: vec![g],
                    })
                    .collect(),
            });
            return Ok(d);
        }
        if let Some(p) = ctx.pending().next() {
            d.shares.push(Placement {
                job: p.spec.id,
                tasks: vec![TaskPlacement {
                    node: NodeId(0),
                    gpus: vec![0],
                }],
            });
        }
        Ok(d)
    }
}

fn with_model(policy: fn() -> Sharer) -> Arc<Engine> {
    let mut cfg = config("fifo/fastest");
    cfg.routing.mode = RoutingMode::Model;
    Arc::new(
        Engine::new(cfg, Arc::new(Metrics::new()))
            .unwrap()
            .with_model_policy(Arc::new(move || Box::new(policy()) as Box<dyn Policy>)),
    )
}

/// Two workloads of Gavel's table that may not share a V100 (no pair entry, or a zero one).
fn forbidden_pair() -> (String, String) {
    let t = load_table("gavel").unwrap();
    let v100 = t.gpu("V100").unwrap();
    let names = t.workloads();
    for a in 0..names.len() {
        for b in 0..names.len() {
            let (wa, wb) = (
                t.workload(names[a].as_str()).unwrap(),
                t.workload(names[b].as_str()).unwrap(),
            );
            let alone = |w| {
                t.rate(
                    w,
                    v100,
                    1,
                    lachesis_env::throughput::Consolidation::Consolidated,
                )
            };
            if t.pair(wa, wb, v100).is_none()
                && alone(wa).is_ok_and(|r| r > 0.0)
                && alone(wb).is_ok_and(|r| r > 0.0)
            {
                return (names[a].as_str().into(), names[b].as_str().into());
            }
        }
    }
    panic!("Gavel's table lets every pair share a V100");
}

/// The shield stops what the table or the GPU forbids, and the chain answers instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shield_refuses_a_forbidden_pair_a_third_job_and_a_resize_out_of_range() {
    let shield_fallback = |answer: &proto::DecideResponse| {
        assert_eq!(answer.decided_by, "fifo/fastest", "{answer:?}");
        let f = &answer.fallbacks[0];
        assert_eq!(f.reason, "shield", "{f:?}");
        f.detail.clone()
    };
    let e = with_model(|| Sharer { resize_to: None });

    // A pair the table forbids.
    let (a, b) = forbidden_pair();
    let snapshot = proto::Snapshot {
        nodes: vec![node("v0", "V100", 1)],
        running: vec![running(job("a", &a, 1, 10_000), "v0", &[0], 10_000)],
        pending: vec![job("b", &b, 1, 5_000)],
        ..Default::default()
    };
    let answer = e
        .decide(proto::DecideRequest {
            snapshot: Some(snapshot),
            ..Default::default()
        })
        .await
        .unwrap();
    let detail = shield_fallback(&answer);
    assert!(detail.contains("does not let share"), "{detail}");
    assert!(answer.shares.is_empty());

    // A third job on a GPU two jobs share.
    let snapshot = proto::Snapshot {
        nodes: vec![node("v0", "V100", 1)],
        running: vec![
            running(job("r", RESNET50, 1, 20_000), "v0", &[0], 20_000),
            running(job("lm", LM, 1, 10_000), "v0", &[0], 10_000),
        ],
        pending: vec![job("r2", RESNET50, 1, 5_000)],
        ..Default::default()
    };
    let answer = e
        .decide(proto::DecideRequest {
            snapshot: Some(snapshot),
            ..Default::default()
        })
        .await
        .unwrap();
    let detail = shield_fallback(&answer);
    assert!(detail.contains("at most two jobs share a GPU"), "{detail}");

    // A resize beyond max_gpus.
    let e = with_model(|| Sharer { resize_to: Some(4) });
    let mut elastic = job("e", RESNET18, 1, 10_000);
    (elastic.min_gpus, elastic.max_gpus) = (1, 2);
    let snapshot = proto::Snapshot {
        nodes: vec![node("v0", "V100", 4)],
        running: vec![running(elastic, "v0", &[0], 10_000)],
        ..Default::default()
    };
    let answer = e
        .decide(proto::DecideRequest {
            snapshot: Some(snapshot),
            ..Default::default()
        })
        .await
        .unwrap();
    let detail = shield_fallback(&answer);
    assert!(
        detail.contains("outside its min_gpus..=max_gpus 1..=2"),
        "{detail}"
    );
    assert!(answer.resizes.is_empty());
}

/// Workloads the service cannot read are refused, naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_workloads_and_bad_ranges_name_their_field() {
    let snapshot = |j: proto::Job| proto::DecideRequest {
        snapshot: Some(proto::Snapshot {
            nodes: vec![node("v0", "V100", 4)],
            pending: vec![j],
            ..Default::default()
        }),
        ..Default::default()
    };
    let typed = engine(config("fifo/fastest"));
    let e = typed
        .decide(snapshot(job("x", "no-such-model", 1, 0)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().starts_with("snapshot.pending[0].workload:")
            && e.message().contains("not in throughput table"),
        "{}",
        e.message()
    );
    let mut bad = job("x", RESNET18, 2, 0);
    (bad.min_gpus, bad.max_gpus) = (4, 8);
    let e = typed.decide(snapshot(bad)).await.unwrap_err();
    assert!(
        e.message().starts_with("snapshot.pending[0].min_gpus:"),
        "{}",
        e.message()
    );
    // No table: a typed job is refused, an untyped one decided.
    let mut cfg = config("fifo/best-fit");
    cfg.throughputs.clear();
    cfg.fallback.clear();
    let plain = engine(cfg);
    let e = plain
        .decide(snapshot(job("x", RESNET50, 1, 0)))
        .await
        .unwrap_err();
    assert!(
        e.message().contains("no throughput table"),
        "{}",
        e.message()
    );
    let answer = plain.decide(snapshot(job("x", "", 1, 0))).await.unwrap();
    assert_eq!(answer.placements.len(), 1);
}
