//! The mapping on every recorded fixture (`serve/tests/data/probe/`), with the exact `Node`
//! expected and the arithmetic written out.

use super::*;
use std::collections::HashMap;
use std::path::Path;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/probe")
        .join(name)
}

fn probe(name: &str, options: &MapOptions) -> Probe {
    let mut reader = RecordedReader::open(&fixture(name)).unwrap();
    Probe::take(&mut reader, options).unwrap()
}

fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// 8 x A100 80 GB (81,920 MiB): four GPUs of one training job, one small inference, three idle.
#[test]
fn a100_node_half_busy() {
    let p = probe("a100-8x-half-busy.json", &MapOptions::default());
    let expected = proto::Node {
        name: "gpu-a100-07".into(),
        gpu_model: "A100".into(),
        gpus: 8,
        gpu_free_milli: vec![
            0,    // 61,440 MiB used (memory 250), 100 %: compute 0
            20,   // 98 %: 1000 - 980
            30,   // 97 %
            0,    // 100 %
            1000, // 4 MiB, no process: idle
            1000, // idle
            780,  // 10,240 MiB (memory 875), 22 %: compute 780
            1000, // idle
        ],
        cpu_milli: 256_000,
        // 256,000 x 230,400 idle / 384,000 jiffies
        cpu_free_milli: Some(153_600),
        // 1,056,817,416 KiB / 1024 = 1,032,048.3
        mem_mib: 1_032_048,
        // 813,422,880 / 1024 = 794,358.3
        mem_free_mib: Some(794_358),
        labels: labels(&[
            ("gpu_product", "NVIDIA A100-SXM4-80GB"),
            ("gpu_memory_mib", "81920"),
            ("driver_version", "535.161.08"),
            ("cuda_version", "12.2"),
            ("nvlink_links", "12"),
        ]),
    };
    assert_eq!(p.node(), &expected);
}

/// 8 x H100 80 GB HBM3 (81,559 MiB), GPUs 0-3 in MIG mode (no utilization reading there).
#[test]
fn h100_node_with_mig() {
    let p = probe("h100-mig.json", &MapOptions::default());
    let expected = proto::Node {
        name: "gpu-h100-02".into(),
        gpu_model: "H100".into(),
        gpus: 8,
        gpu_free_milli: vec![
            623,  // MIG, two processes, 30,720 MiB used: 1000 x 50,839 / 81,559 = 623.3
            999,  // MIG, idle: never a whole GPU
            874,  // MIG, one process, 10,240 MiB: 1000 x 71,319 / 81,559 = 874.4
            999,  // MIG, idle
            0,    // training at 100 %
            0,    // training at 100 %
            1000, // 1 MiB, no process: idle
            1000, // idle
        ],
        cpu_milli: 224_000,
        // 224,000 x 302,400 / 336,000
        cpu_free_milli: Some(201_600),
        // 2,113,389,580 / 1024 = 2,063,857.0
        mem_mib: 2_063_857,
        // 1,980,732,416 / 1024 = 1,934,309.0
        mem_free_mib: Some(1_934_309),
        labels: labels(&[
            ("gpu_product", "NVIDIA H100 80GB HBM3"),
            ("gpu_memory_mib", "81559"),
            ("driver_version", "550.90.07"),
            ("cuda_version", "12.4"),
            ("nvlink_links", "18"),
            ("mig_gpus", "0,1,2,3"),
        ]),
    };
    assert_eq!(p.node(), &expected);
}

/// 4 x V100 32 GB (32,510 MiB): idle, training, memory held by a process NVML does not list
/// (another container), idle with the driver's 300 MiB. No CPU sample in the recording.
#[test]
fn v100_node_mixed() {
    let p = probe("v100-mixed.json", &MapOptions::default());
    let expected = proto::Node {
        name: "v100-node-11".into(),
        gpu_model: "V100".into(),
        gpus: 4,
        gpu_free_milli: vec![
            1000, // idle
            0,    // 100 %
            748,  // 8,192 MiB: 1000 x 24,318 / 32,510 = 748.0; 12 %: compute 880
            1000, // 300 MiB, no process: idle
        ],
        cpu_milli: 48_000,
        cpu_free_milli: None,
        // 394,867,840 / 1024 = 385,613.1
        mem_mib: 385_613,
        mem_free_mib: Some(196_608),
        labels: labels(&[
            ("gpu_product", "Tesla V100-SXM2-32GB"),
            ("gpu_memory_mib", "32510"),
            ("driver_version", "525.147.05"),
            ("cuda_version", "12.0"),
            ("nvlink_links", "6"),
        ]),
    };
    assert_eq!(p.node(), &expected);
}

#[test]
fn node_without_gpus() {
    let p = probe("cpu-only.json", &MapOptions::default());
    let expected = proto::Node {
        name: "cpu-node-01".into(),
        gpu_model: String::new(),
        gpus: 0,
        gpu_free_milli: vec![],
        cpu_milli: 64_000,
        // 64,000 x 72,000 / 96,000
        cpu_free_milli: Some(48_000),
        // 263,855,720 / 1024 = 257,671.6
        mem_mib: 257_671,
        // 250,000,000 / 1024 = 244,140.6
        mem_free_mib: Some(244_140),
        labels: HashMap::new(),
    };
    assert_eq!(p.node(), &expected);
}

/// The operator's name, model and labels win over what was read.
#[test]
fn operator_options_override() {
    let options = MapOptions {
        node_name: Some("a100-07".into()),
        gpu_model: Some("A100-80G".into()),
        labels: [
            ("rack".to_string(), "r12".to_string()),
            ("nvlink_links".to_string(), "0".to_string()),
        ]
        .into(),
    };
    let p = probe("a100-8x-half-busy.json", &options);
    let n = p.node();
    assert_eq!(n.name, "a100-07");
    assert_eq!(n.gpu_model, "A100-80G");
    assert_eq!(n.labels["rack"], "r12");
    assert_eq!(n.labels["nvlink_links"], "0");
    assert_eq!(n.labels["gpu_product"], "NVIDIA A100-SXM4-80GB");
}

#[test]
fn every_fixture_is_a_node_the_service_accepts() {
    let inventory = crate::inventory::NodeInventory::new(std::time::Duration::from_secs(60));
    let nodes: Vec<proto::Node> = [
        "a100-8x-half-busy.json",
        "h100-mig.json",
        "v100-mixed.json",
        "cpu-only.json",
    ]
    .iter()
    .map(|f| probe(f, &MapOptions::default()).node().clone())
    .collect();
    assert_eq!(inventory.report(&nodes, "test").unwrap(), 4);
    // And together, as one snapshot of a cluster.
    let snapshot = proto::Snapshot {
        nodes,
        ..Default::default()
    };
    crate::world::World::build(&snapshot).unwrap();
}

/// The JSON is the `Node` message: it reads back as one, and as part of a snapshot.
#[test]
fn json_is_the_node_message() {
    let p = probe("h100-mig.json", &MapOptions::default());
    let back: proto::Node = serde_json::from_str(&p.node_json()).unwrap();
    assert_eq!(&back, p.node());
    let reading: NodeReading = serde_json::from_str(&p.reading_json()).unwrap();
    assert_eq!(reading, p.reading);
    let text = p.text();
    assert!(text.starts_with("node gpu-h100-02: 8 x H100 (NVIDIA H100 80GB HBM3)"));
    assert!(
        text.contains("7781 (15360 MiB), 7790 (15360 MiB)"),
        "{text}"
    );
}

#[test]
fn a_node_of_two_models_needs_a_model_named() {
    let mut reader = RecordedReader::open(&fixture("v100-mixed.json")).unwrap();
    let mut reading = reader.read().unwrap();
    reading.gpus[3].name = "Tesla T4".into();
    let err = to_node(&reading, &MapOptions::default()).unwrap_err();
    assert_eq!(err.field, "gpus[3].name", "{err}");
    assert!(err.message.contains("--gpu-model"), "{err}");
    let named = MapOptions {
        gpu_model: Some("V100".into()),
        ..Default::default()
    };
    assert_eq!(to_node(&reading, &named).unwrap().gpu_model, "V100");
}

/// What the service would refuse is refused here first, with the node's field named.
#[test]
fn the_service_checks_apply() {
    let mut reader = RecordedReader::open(&fixture("cpu-only.json")).unwrap();
    let reading = reader.read().unwrap();
    let long = MapOptions {
        labels: [("rack".to_string(), "r".repeat(300))].into(),
        ..Default::default()
    };
    let err = to_node(&reading, &long).unwrap_err();
    assert_eq!(err.field, "node.labels[rack]", "{err}");
    let model_without_gpus = MapOptions {
        gpu_model: Some("A100".into()),
        ..Default::default()
    };
    // No GPUs: the model option does not apply, the node stays CPU-only and valid.
    assert_eq!(
        to_node(&reading, &model_without_gpus).unwrap().gpu_model,
        ""
    );
}
