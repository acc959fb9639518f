//! Contract tests of the Kubernetes scheduler extender through the real HTTP listener: the
//! request bodies are kube-scheduler's own shapes (`tests/data/k8s/`, full Pod and NodeList
//! objects), the answers are read as raw JSON, so field names are checked as kube-scheduler
//! reads them.
//!
//! The scene (see `tests/data/k8s/README.md`): a pod of 4 A100 GPUs (nodeSelector on
//! `nvidia.com/gpu.product`), 16.1 CPUs and 96 GiB + 128 MiB; nodes `a100-1..3` (8 x A100),
//! `h100-1` (8 x H100), `v100-1` (2 x V100), `cpu-1` (no GPU), `a100-cordoned`.

#![allow(clippy::unwrap_used)]

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use lachesis_serve::k8s::Extender;
use lachesis_serve::k8s::types::{ExtenderArgs, ExtenderPreemptionArgs};
use lachesis_serve::{Engine, Metrics, ServeConfig, proto};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

const DATA: &str = "tests/data/k8s";

fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("{DATA}/{name}")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// No model: the model arm falls back (`no-model`) to the baseline, best-fit, every time.
fn config() -> ServeConfig {
    let mut cfg = ServeConfig {
        model: String::new(),
        ..ServeConfig::default()
    };
    cfg.grpc.addr = "127.0.0.1:0".into();
    cfg.http.addr = "127.0.0.1:0".into();
    cfg
}

fn engine(cfg: ServeConfig) -> Arc<Engine> {
    Arc::new(Engine::new(cfg, Arc::new(Metrics::new())).unwrap())
}

async fn start(cfg: ServeConfig) -> (lachesis_serve::Running, SocketAddr) {
    let running = lachesis_serve::start_with(engine(cfg)).await.unwrap();
    let addr = running.http_addr.unwrap();
    (running, addr)
}

/// POSTs `body` and returns the status and the body.
async fn post(addr: SocketAddr, path: &str, body: Vec<u8>) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let request = hyper::Request::post(path)
        .header("host", "lachesis")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

async fn post_json(addr: SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    let (status, text) = post(addr, path, serde_json::to_vec(body).unwrap()).await;
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{path} answered {status} with non-JSON {text:?}: {e}"));
    (status, value)
}

/// A node agent's report of an A100 node: the free share of each GPU.
fn a100_report(name: &str, gpu_free_milli: Vec<u32>) -> proto::Node {
    proto::Node {
        name: name.into(),
        // What `lachesis probe` reports for NVML's "NVIDIA A100-SXM4-80GB": it must match the
        // pods' node selector on the GPU feature discovery label "NVIDIA-A100-SXM4-80GB".
        gpu_model: lachesis_serve::probe::map::gpu_family("NVIDIA A100-SXM4-80GB"),
        gpus: 8,
        gpu_free_milli,
        cpu_milli: 95_900,
        mem_mib: 1_031_826,
        ..Default::default()
    }
}

fn h100_report() -> proto::Node {
    proto::Node {
        name: "h100-1".into(),
        gpu_model: "H100".into(),
        gpus: 8,
        gpu_free_milli: vec![1000; 8],
        cpu_milli: 191_900,
        mem_mib: 2047 * 1024,
        ..Default::default()
    }
}

fn used(n: usize) -> Vec<u32> {
    (0..8).map(|g| if g < n { 0 } else { 1000 }).collect()
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

fn names(map: &Value) -> BTreeSet<String> {
    match map {
        Value::Null => BTreeSet::new(),
        m => keys(m),
    }
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn item_names(result: &Value) -> Vec<String> {
    result["Nodes"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

fn requests(engine: &Engine, rpc: &str, code: &str) -> u64 {
    let text = engine.metrics().encode();
    let needle = format!("lachesis_requests_total{{rpc=\"{rpc}\",code=\"{code}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&needle))
        .map_or(0, |v| v.trim().parse().unwrap())
}

const FILTER: &str = "/k8s/v1/filter";
const PRIORITIZE: &str = "/k8s/v1/prioritize";
const PREEMPT: &str = "/k8s/v1/preempt";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_full_nodes_echoes_feasible_objects_and_splits_the_rest() {
    let (running, addr) = start(config()).await;
    let args = fixture("filter-args.json");
    let (status, r) = post_json(addr, FILTER, &args).await;
    assert_eq!(status, 200, "{r}");
    // Upstream field names, exactly.
    assert_eq!(
        keys(&r),
        set(&[
            "Nodes",
            "NodeNames",
            "FailedNodes",
            "FailedAndUnresolvableNodes",
            "Error"
        ])
    );
    assert_eq!(r["Error"], "");
    assert_eq!(r["NodeNames"], Value::Null, "full mode answers in Nodes");
    // Nothing reported in use: every A100 node fits now.
    assert_eq!(item_names(&r), ["a100-1", "a100-2", "a100-3"]);
    // The objects come back as sent (kube-scheduler uses them as the filtered nodes).
    assert_eq!(r["Nodes"]["items"][1], args["Nodes"]["items"][1]);
    assert_eq!(names(&r["FailedNodes"]), BTreeSet::new());
    let unresolvable = &r["FailedAndUnresolvableNodes"];
    assert_eq!(
        names(unresolvable),
        set(&["h100-1", "v100-1", "cpu-1", "a100-cordoned"])
    );
    let why = |n: &str| unresolvable[n].as_str().unwrap().to_string();
    assert!(
        why("h100-1").contains("GPU model H100 is not among the pod's GPU models (A100)"),
        "{}",
        why("h100-1")
    );
    assert!(
        why("v100-1").contains("GPU model V100"),
        "{}",
        why("v100-1")
    );
    assert!(why("cpu-1").contains("no GPUs"), "{}", why("cpu-1"));
    assert!(why("a100-cordoned").contains("cordoned"));
    assert_eq!(requests(&running.engine, "k8s/filter", "Ok"), 1);
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_overlays_node_agent_reports_on_full_nodes() {
    let (running, addr) = start(config()).await;
    let inv = running.engine.inventory();
    // a100-1: every GPU in use; a100-2: 6 of 8; a100-3: no report (nothing known in use).
    inv.report(
        &[
            a100_report("a100-1", used(8)),
            a100_report("a100-2", used(6)),
        ],
        "probe",
    )
    .unwrap();
    let (status, r) = post_json(addr, FILTER, &fixture("filter-args.json")).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(item_names(&r), ["a100-3"]);
    let failed = &r["FailedNodes"];
    assert_eq!(names(failed), set(&["a100-1", "a100-2"]));
    assert_eq!(failed["a100-1"], "0 whole GPUs free, a task needs 4");
    assert_eq!(failed["a100-2"], "2 whole GPUs free, a task needs 4");
    assert_eq!(names(&r["FailedAndUnresolvableNodes"]).len(), 4);
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_by_node_names_reads_the_inventory() {
    let (running, addr) = start(config()).await;
    let args = fixture("filter-args-cache.json");

    // No report at all: no node can be judged, none passes, preemption is not tried.
    let (status, r) = post_json(addr, FILTER, &args).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["Nodes"], Value::Null, "cache mode answers in NodeNames");
    assert_eq!(r["NodeNames"], json!([]));
    let unresolvable = &r["FailedAndUnresolvableNodes"];
    assert_eq!(names(unresolvable).len(), 7);
    assert!(
        unresolvable["a100-1"]
            .as_str()
            .unwrap()
            .contains("no node agent reported this node"),
        "{unresolvable}"
    );

    let inv = running.engine.inventory();
    inv.report(
        &[
            a100_report("a100-1", used(0)),
            a100_report("a100-2", used(6)),
            h100_report(),
        ],
        "probe",
    )
    .unwrap();
    let (status, r) = post_json(addr, FILTER, &args).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["NodeNames"], json!(["a100-1"]));
    assert_eq!(names(&r["FailedNodes"]), set(&["a100-2"]));
    assert_eq!(
        names(&r["FailedAndUnresolvableNodes"]),
        set(&["h100-1", "a100-3", "v100-1", "cpu-1", "a100-cordoned"])
    );
    assert!(
        r["FailedAndUnresolvableNodes"]["h100-1"]
            .as_str()
            .unwrap()
            .contains("GPU model H100")
    );
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_gpu_request_lands_only_on_matching_nodes() {
    let (running, addr) = start(config()).await;
    let mut args = fixture("filter-args.json");
    let selector = &mut args["Pod"]["spec"]["nodeSelector"];
    selector["nvidia.com/gpu.product"] = json!("NVIDIA-H100-80GB-HBM3");
    let (_, r) = post_json(addr, FILTER, &args).await;
    assert_eq!(item_names(&r), ["h100-1"]);
    assert!(names(&r["FailedAndUnresolvableNodes"]).contains("a100-1"));

    // No selector: any model with 4 GPUs free; the 2-GPU V100 node can never hold it.
    args["Pod"]["spec"]["nodeSelector"] = Value::Null;
    let (_, r) = post_json(addr, FILTER, &args).await;
    assert_eq!(item_names(&r), ["a100-1", "a100-2", "a100-3", "h100-1"]);
    assert_eq!(
        r["FailedAndUnresolvableNodes"]["v100-1"],
        "the node has 2 GPUs, the pod needs 4"
    );

    // The annotation alone restricts the models too.
    args["Pod"]["metadata"]["annotations"]["lachesis.io/gpu-types"] = json!("H100, V100");
    let (_, r) = post_json(addr, FILTER, &args).await;
    assert_eq!(item_names(&r), ["h100-1"]);

    // A pod that names its node runs nowhere else.
    args["Pod"]["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("lachesis.io/gpu-types");
    args["Pod"]["spec"]["nodeName"] = json!("a100-2");
    let (_, r) = post_json(addr, FILTER, &args).await;
    assert_eq!(item_names(&r), ["a100-2"]);
    assert_eq!(
        r["FailedAndUnresolvableNodes"]["a100-1"],
        "the pod names node \"a100-2\" (spec.nodeName)"
    );
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prioritize_gives_the_deciders_node_ten_and_packing_scores_below() {
    let (running, addr) = start(config()).await;
    let inv = running.engine.inventory();
    // a100-1: 4 GPUs free (the tightest fit); a100-2: 2 free (cannot hold 4); a100-3: 8 free
    // (cache mode needs its report; full mode would take it as all free without one).
    inv.report(
        &[
            a100_report("a100-1", used(4)),
            a100_report("a100-2", used(6)),
            a100_report("a100-3", used(0)),
        ],
        "probe",
    )
    .unwrap();
    let no_model_before =
        Metrics::counter_value(&running.engine.metrics().fallbacks, "reason", "no-model");
    for args in [
        fixture("filter-args.json"),
        fixture("filter-args-cache.json"),
    ] {
        let (status, r) = post_json(addr, PRIORITIZE, &args).await;
        assert_eq!(status, 200, "{r}");
        let list = r.as_array().unwrap();
        for h in list {
            assert_eq!(keys(h), set(&["Host", "Score"]));
            let s = h["Score"].as_i64().unwrap();
            assert!((0..=10).contains(&s), "{h}");
        }
        let scores: Vec<(&str, i64)> = list
            .iter()
            .map(|h| (h["Host"].as_str().unwrap(), h["Score"].as_i64().unwrap()))
            .collect();
        // Every candidate answered, in order. The decider (no model: the baseline, best-fit)
        // places the pod on a100-1: 10. a100-3 packs to 4/8 GPUs used = 50/100 -> round(4.5)
        // = 5 (of 1-9). a100-2 is infeasible now and the others never: 0.
        assert_eq!(
            scores,
            [
                ("a100-1", 10),
                ("a100-2", 0),
                ("a100-3", 5),
                ("h100-1", 0),
                ("v100-1", 0),
                ("cpu-1", 0),
                ("a100-cordoned", 0)
            ]
        );
    }
    // The decision path's fallback was counted, as for gRPC.
    let no_model =
        Metrics::counter_value(&running.engine.metrics().fallbacks, "reason", "no-model");
    assert_eq!(no_model - no_model_before, 2);
    assert_eq!(requests(&running.engine, "k8s/prioritize", "Ok"), 2);
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prioritize_with_no_feasible_node_scores_all_zero() {
    let (running, addr) = start(config()).await;
    let mut args = fixture("filter-args.json");
    args["Pod"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] = json!("NVIDIA-L4");
    let (status, r) = post_json(addr, PRIORITIZE, &args).await;
    assert_eq!(status, 200, "{r}");
    assert!(r.as_array().unwrap().iter().all(|h| h["Score"] == 0), "{r}");
    assert_eq!(r.as_array().unwrap().len(), 7);
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preempt_with_full_victims_keeps_the_fewest_and_drops_impossible_nodes() {
    let (running, addr) = start(config()).await;
    let inv = running.engine.inventory();
    inv.report(
        &[
            a100_report("a100-1", used(8)),
            a100_report("a100-2", used(6)),
            h100_report(),
        ],
        "probe",
    )
    .unwrap();
    let (status, r) = post_json(addr, PREEMPT, &fixture("preempt-args.json")).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(keys(&r), set(&["NodeNameToMetaVictims"]));
    let m = &r["NodeNameToMetaVictims"];
    // a100-1: all 8 GPUs in use, the one victim holds 2: 2 free after, 4 needed -> dropped.
    // h100-1: the pod asks for A100 -> dropped. a100-3: no report, kube-scheduler's victims.
    // a100-2: 2 free + three victims of 2 GPUs (priorities 0, 100, 500). Reprieving the most
    // important first: 500 (6 free after the others go), 100 (4 free), 0 (2 free: too few)
    // -> only the priority-0 pod goes; its PDB count is at most the victims kept (2 -> 1).
    assert_eq!(names(m), set(&["a100-2", "a100-3"]));
    assert_eq!(
        m["a100-2"],
        json!({"Pods": [{"UID": "uid-a100-2-low"}], "NumPDBViolations": 1})
    );
    assert_eq!(
        m["a100-3"],
        json!({"Pods": [{"UID": "uid-a100-3-gpt"}], "NumPDBViolations": 1})
    );
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preempt_with_victim_uids_drops_only_impossible_nodes() {
    let (running, addr) = start(config()).await;
    running
        .engine
        .inventory()
        .report(&[a100_report("a100-2", used(6)), h100_report()], "probe")
        .unwrap();
    let args = fixture("preempt-args-cache.json");
    let (status, r) = post_json(addr, PREEMPT, &args).await;
    assert_eq!(status, 200, "{r}");
    let m = &r["NodeNameToMetaVictims"];
    // UIDs say nothing of what the victims hold: the sets stand where the pod can fit at all.
    assert_eq!(names(m), set(&["a100-1", "a100-2", "a100-3"]));
    for n in ["a100-1", "a100-2", "a100-3"] {
        assert_eq!(m[n], args["NodeNameToMetaVictims"][n], "{n}");
    }
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_answered_never_panicked_on() {
    let (running, addr) = start(config()).await;

    // Not JSON: 400 with the line and column.
    let (status, text) = post(addr, FILTER, b"{\"Pod\": {\n  \"metadata\": ".to_vec()).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("line 2"), "{text}");
    // JSON of the wrong shape: 400 too.
    let (status, text) = post(addr, FILTER, br#"{"Pod": {}, "NodeNames": 7}"#.to_vec()).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("ExtenderArgs"), "{text}");
    let (status, _) = post(
        addr,
        PREEMPT,
        br#"{"Pod": {"spec": {"containers": "x"}}}"#.to_vec(),
    )
    .await;
    assert_eq!(status, 400);

    // A quantity that is not one: filter says so in `Error`, naming the field.
    let mut args = fixture("filter-args.json");
    args["Pod"]["spec"]["containers"][1]["resources"]["requests"]["memory"] = json!("12Qi");
    let (status, r) = post_json(addr, FILTER, &args).await;
    assert_eq!(status, 200);
    let error = r["Error"].as_str().unwrap();
    assert!(
        error.starts_with(
            "Pod.spec.containers[1].resources.requests.memory: \"12Qi\" is not a quantity"
        ),
        "{error}"
    );
    assert_eq!(r["Nodes"], Value::Null);
    // Prioritize and preempt have no `Error` field: a non-200 is how kube-scheduler hears it.
    let (status, text) = post(addr, PRIORITIZE, serde_json::to_vec(&args).unwrap()).await;
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("Pod.spec.containers[1].resources.requests.memory"));
    let mut pre = fixture("preempt-args.json");
    pre["NodeNameToVictims"]["a100-2"]["Pods"][0]["spec"]["containers"][0]["resources"]["requests"]
        ["cpu"] = json!("1.2.3");
    running
        .engine
        .inventory()
        .report(&[a100_report("a100-2", used(6))], "probe")
        .unwrap();
    let (status, text) = post(addr, PREEMPT, serde_json::to_vec(&pre).unwrap()).await;
    assert_eq!(status, 422, "{text}");
    assert!(
        text.contains(
            "NodeNameToVictims[a100-2].Pods[0].spec.containers[0].resources.requests.cpu"
        ),
        "{text}"
    );

    // A node without a name, a GPU count that is not whole, a pod without a name.
    let mut args = fixture("filter-args.json");
    args["Nodes"]["items"][2]["status"]["allocatable"]["nvidia.com/gpu"] = json!("1.5");
    let (_, r) = post_json(addr, FILTER, &args).await;
    assert!(
        r["Error"].as_str().unwrap().starts_with(
            "Nodes.items[2].status.allocatable.nvidia.com/gpu: \"1.5\" is not a whole"
        ),
        "{r}"
    );
    args["Pod"]["metadata"]["name"] = Value::Null;
    let (_, r) = post_json(addr, FILTER, &args).await;
    assert_eq!(r["Error"], "Pod.metadata.name: missing");
    let (_, r) = post_json(addr, FILTER, &json!({"Pod": {"metadata": {"name": "p"}}})).await;
    assert!(
        r["Error"]
            .as_str()
            .unwrap()
            .contains("neither Nodes nor NodeNames")
    );

    assert_eq!(
        requests(&running.engine, "k8s/filter", "InvalidArgument"),
        6
    );
    assert_eq!(
        requests(&running.engine, "k8s/prioritize", "InvalidArgument"),
        1
    );
    assert_eq!(
        requests(&running.engine, "k8s/preempt", "InvalidArgument"),
        2
    );
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_limit_prefix_and_switch_are_configured() {
    let mut cfg = config();
    cfg.grpc.max_request_bytes = 36_000;
    cfg.kubernetes.prefix = "/extender".into();
    let (running, addr) = start(cfg).await;
    // filter-args.json is ~33 kB, preempt-args.json ~37 kB.
    let (status, _) = post_json(addr, "/extender/filter", &fixture("filter-args.json")).await;
    assert_eq!(status, 200);
    let body = std::fs::read(format!("{DATA}/preempt-args.json")).unwrap();
    assert!(body.len() > 36_000);
    let (status, text) = post(addr, "/extender/preempt", body).await;
    assert_eq!(status, 413, "{text}");
    assert_eq!(requests(&running.engine, "k8s/preempt", "OutOfRange"), 1);
    let (status, _) = post(addr, FILTER, b"{}".to_vec()).await;
    assert_eq!(status, 404, "the default prefix is not served");
    running.shutdown().await.unwrap();

    let mut cfg = config();
    cfg.kubernetes.enabled = false;
    let (running, addr) = start(cfg).await;
    let body = serde_json::to_vec(&fixture("filter-args.json")).unwrap();
    let (status, _) = post(addr, FILTER, body).await;
    assert_eq!(status, 404, "no extender routes");
    running.shutdown().await.unwrap();

    let mut cfg = config();
    cfg.kubernetes.prefix = "k8s/".into();
    assert!(
        cfg.validate()
            .unwrap_err()
            .to_string()
            .contains("kubernetes.prefix")
    );
}

/// Replaces the value at a random path of `v` (a walk choosing keys and indices by `steps`).
fn mutate(v: &mut Value, steps: &[usize], with: Value) {
    let Some((s, rest)) = steps.split_first() else {
        *v = with;
        return;
    };
    match v {
        Value::Object(m) if !m.is_empty() => {
            let k = m.keys().nth(s % m.len()).unwrap().clone();
            mutate(m.get_mut(&k).unwrap(), rest, with);
        }
        Value::Array(a) if !a.is_empty() => {
            let n = a.len();
            mutate(&mut a[s % n], rest, with);
        }
        _ => *v = with,
    }
}

fn replacement() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!("12Qi")),
        Just(json!("-1")),
        Just(json!("1e60")),
        Just(json!("99999999999999999999999999999Ei")),
        Just(json!(1e308)),
        Just(json!(-5)),
        Just(json!(u64::MAX)),
        Just(json!("")),
        Just(json!([])),
        Just(json!({})),
        Just(json!(true)),
        Just(json!("NVIDIA-H100-80GB-HBM3")),
        Just(json!("x".repeat(300))),
        Just(json!("2024-02-30T00:00:00Z")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Mutated payloads never panic; whatever filter answers puts each node in one set at most.
    #[test]
    fn mutated_payloads_never_panic(
        which in 0usize..4,
        steps in proptest::collection::vec(0usize..64, 0..12),
        with in replacement(),
    ) {
        let ext = Extender::new(engine(config()));
        let files = ["filter-args.json", "filter-args-cache.json", "preempt-args.json",
                     "preempt-args-cache.json"];
        let mut v = fixture(files[which]);
        mutate(&mut v, &steps, with);
        if which < 2 {
            if let Ok(args) = serde_json::from_value::<ExtenderArgs>(v)
                && let Ok(r) = ext.filter(args)
            {
                    let passed: Vec<String> = match (&r.nodes, &r.node_names) {
                        (Some(list), _) => list.items.iter().map(|n| {
                            n["metadata"]["name"].as_str().unwrap_or_default().trim().to_string()
                        }).collect(),
                        (None, Some(names)) => names.clone(),
                        (None, None) => Vec::new(),
                    };
                    let mut all: Vec<&String> = passed.iter()
                        .chain(r.failed_nodes.keys())
                        .chain(r.failed_and_unresolvable_nodes.keys())
                        .collect();
                    let n = all.len();
                    all.sort();
                    all.dedup();
                    prop_assert_eq!(all.len(), n, "a node in two sets");
            }
        } else if let Ok(args) = serde_json::from_value::<ExtenderPreemptionArgs>(v) {
            let _ = ext.preempt(args);
        }
    }
}

/// The serve.toml shipped in the Kubernetes manifests is a valid configuration.
#[test]
fn the_shipped_manifest_config_is_valid() {
    let yaml = std::fs::read_to_string("../deploy/kubernetes/lachesis-service.yaml").unwrap();
    let mut lines = yaml
        .lines()
        .skip_while(|l| l.trim() != "serve.toml: |")
        .skip(1);
    let first = lines.next().unwrap();
    let indent = first.len() - first.trim_start().len();
    let body: Vec<&str> = std::iter::once(first)
        .chain(lines.take_while(|l| l.trim().is_empty() || l.starts_with(&" ".repeat(indent))))
        .map(|l| l.get(indent..).unwrap_or(""))
        .collect();
    let path = std::env::temp_dir().join(format!("lachesis-k8s-serve-{}.toml", std::process::id()));
    std::fs::write(&path, body.join("\n")).unwrap();
    let cfg = ServeConfig::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(cfg.kubernetes.enabled);
    assert_eq!(cfg.kubernetes.prefix, "/k8s/v1");
    let scheduler = std::fs::read_to_string("../deploy/kubernetes/scheduler-config.yaml").unwrap();
    assert!(
        scheduler.contains(":9090/k8s/v1\""),
        "the extender URL matches the served prefix"
    );
}

/// A pod's nodeSelector and required node affinity reach the decision: nodes whose labels
/// refuse them are unresolvable (with why), and prioritize's chosen node satisfies them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_and_required_affinity_steer_filter_and_prioritize() {
    let (running, addr) = start(config()).await;
    let mut args = fixture("filter-args.json");
    for (i, zone) in ["eu-west-1a", "eu-west-1b", "eu-west-1b"]
        .iter()
        .enumerate()
    {
        args["Nodes"]["items"][i]["metadata"]["labels"]["topology.kubernetes.io/zone"] =
            json!(zone);
    }
    args["Pod"]["spec"]["affinity"] = json!({"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["eu-west-1b"]},
                {"key": "nvidia.com/gpu.product", "operator": "Exists"}
            ]}
        ]},
        "preferredDuringSchedulingIgnoredDuringExecution": []
    }});
    args["Pod"]["spec"]["nodeSelector"] = json!({"nvidia.com/gpu.family": "ampere"});
    let (status, r) = post_json(addr, FILTER, &args).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(item_names(&r), ["a100-2", "a100-3"]);
    let why = r["FailedAndUnresolvableNodes"]["a100-1"].as_str().unwrap();
    assert!(why.contains("nodeSelector/affinity"), "{why}");

    let (status, r) = post_json(addr, PRIORITIZE, &args).await;
    assert_eq!(status, 200, "{r}");
    let top: Vec<&str> = r
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["Score"] == 10)
        .map(|h| h["Host"].as_str().unwrap())
        .collect();
    assert_eq!(top.len(), 1, "{r}");
    assert!(["a100-2", "a100-3"].contains(&top[0]), "{r}");

    // Operators the service does not carry (Gt) only widen the set: kube-scheduler has
    // already applied them to the candidates it sends.
    args["Pod"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"][0]["matchExpressions"][0] =
        json!({"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["4"]});
    let (_, r) = post_json(addr, FILTER, &args).await;
    assert_eq!(item_names(&r), ["a100-1", "a100-2", "a100-3", "h100-1"]);
    running.shutdown().await.unwrap();
}
