//! Built-in cluster presets: real inventories, embedded in the binary (traces/clusters/,
//! origin and license in its README.md): `openb` (Alibaba GPU cluster 2023, FGD), `pai-2020`
//! (Alibaba PAI 2020 machines), `spot-2026` (Alibaba spot GPU cluster 2026); and the clusters
//! two heterogeneity-aware schedulers were evaluated on, for their throughput tables:
//! `gavel` (Gavel, OSDI'20) and `sia` (Sia, SOSP'23).
//!
//! An inventory can be mapped onto a throughput table's GPU models, `NAME:TABLE` (e.g.
//! `pai-2020:gavel`): each node's GPU model becomes the table's model that stands for it
//! ([`crate::throughput::nearest_covered_model`]: itself when covered, else the nearest by
//! catalog speed); the node keeps its GPU count, CPU and memory.
//!
//! The inventories have no topology: nodes get automatic racks of `DEFAULT_RACK_SIZE`
//! consecutive nodes of one GPU model, and each node is its own NVLink domain.

use super::ClusterLoadError;
use super::builder::{ClusterBuilder, DEFAULT_RACK_SIZE, NodeShape};
use crate::cluster::ClusterSpec;
use crate::throughput::{ThroughputPreset, nearest_covered_model};
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// Memory assumed per vCPU for `spot-2026`, whose inventory has no memory column: 4 GiB.
pub const SPOT_MEM_MIB_PER_VCPU: u64 = 4 * 1024;

const PRESETS: &[&str] = &["openb", "pai-2020", "spot-2026", "gavel", "sia"];

/// Gavel's simulated cluster (OSDI'20, §7: 36 V100, 36 P100, 36 K80): per model, 4 servers of
/// 8 GPUs and 1 of 4. Gavel's simulator allocates GPUs, not servers (its driver's default is
/// 1 GPU per server, `--num_gpus_per_server 1:1:1`), and looks up consolidated rates only;
/// Lachesis puts each task on one node, and the table's jobs go up to 8 GPUs, so servers
/// hold 8. `9x4:V100+9x4:P100+9x4:K80` is the same cluster of 4-GPU servers.
const GAVEL: &[(u64, u32, &str)] = &[
    (4, 8, "V100"),
    (1, 4, "V100"),
    (4, 8, "P100"),
    (1, 4, "P100"),
    (4, 8, "K80"),
    (1, 4, "K80"),
];

/// Sia's default simulated cluster (`sia-simulator/simulator_config.py`, `cluster_nnodes`):
/// 6 AWS g4dn.12xlarge nodes of 4 T4, 3 nodes of 8 RTX 2080 Ti, 2 DGX A100 nodes of 8 A100.
const SIA: &[(u64, u32, &str)] = &[(6, 4, "T4"), (3, 8, "RTX-2080Ti"), (2, 8, "A100")];

/// Names `load_cluster` accepts as presets.
pub fn preset_names() -> &'static [&'static str] {
    PRESETS
}

/// The preset called `name` (case-insensitive), or an inventory mapped onto a throughput
/// table's models, `NAME:TABLE` (`pai-2020:gavel`); `None` if it is neither.
pub(super) fn load_preset(name: &str) -> Option<Result<ClusterSpec, ClusterLoadError>> {
    let name = name.trim();
    let (base, onto) = match name.rsplit_once(':') {
        Some((base, table)) => (base.trim(), Some(ThroughputPreset::parse(table)?)),
        None => (name, None),
    };
    let preset = PRESETS.iter().find(|p| p.eq_ignore_ascii_case(base))?;
    let label = match onto {
        Some(table) => format!("{preset}:{}", table.as_str()),
        None => preset.to_string(),
    };
    let preset = label.as_str();
    Some(match base.to_ascii_lowercase().as_str() {
        "gavel" | "sia" if onto.is_some() => return None,
        "gavel" => groups(preset, GAVEL),
        "sia" => groups(preset, SIA),
        "openb" => inventory(
            preset,
            onto,
            "openb_node_list_all_node.csv",
            include_str!("../../../../traces/clusters/openb_node_list_all_node.csv"),
            |r: OpenbRow| InventoryNode {
                gpu_model: Some(r.model).filter(|m| !m.is_empty()),
                name: r.sn,
                gpus: r.gpu,
                cpu_milli: r.cpu_milli,
                mem_mib: r.memory_mib,
            },
        ),
        "pai-2020" => inventory(
            preset,
            onto,
            "pai_machine_spec.csv",
            include_str!("../../../../traces/clusters/pai_machine_spec.csv"),
            |r: PaiRow| InventoryNode {
                gpu_model: Some(r.gpu_type).filter(|m| m != "CPU"),
                name: r.machine,
                gpus: r.cap_gpu,
                cpu_milli: r.cap_cpu.saturating_mul(1000),
                // The trace says GB; servers are sized in GiB (384, 512), so GB is read as GiB.
                mem_mib: r.cap_mem.saturating_mul(1024),
            },
        ),
        "spot-2026" => inventory(
            preset,
            onto,
            "spot_gpu_2026_node_info.csv",
            include_str!("../../../../traces/clusters/spot_gpu_2026_node_info.csv"),
            |r: SpotRow| InventoryNode {
                name: format!("spot-node-{}", r.node_name),
                gpu_model: Some(r.gpu_model),
                gpus: r.gpu_capacity_num,
                cpu_milli: r.cpu_num.saturating_mul(1000),
                mem_mib: r.cpu_num.saturating_mul(SPOT_MEM_MIB_PER_VCPU),
            },
        ),
        _ => return None,
    })
}

/// openb_node_list_all_node.csv: `sn,cpu_milli,memory_mib,gpu,model` (empty model: CPU-only).
#[derive(Deserialize)]
struct OpenbRow {
    sn: String,
    cpu_milli: u64,
    memory_mib: u64,
    gpu: u32,
    model: String,
}

/// pai_machine_spec.csv: `machine,gpu_type,cap_cpu,cap_mem,cap_gpu` (cores, GB; type CPU: no GPU).
#[derive(Deserialize)]
struct PaiRow {
    machine: String,
    gpu_type: String,
    cap_cpu: u64,
    cap_mem: u64,
    cap_gpu: u32,
}

/// spot_gpu_2026_node_info.csv: `gpu_model,gpu_capacity_num,cpu_num,node_name` (vCPUs).
#[derive(Deserialize)]
struct SpotRow {
    gpu_model: String,
    gpu_capacity_num: u32,
    cpu_num: u64,
    node_name: String,
}

/// One inventory row in the simulator's units.
struct InventoryNode {
    name: String,
    gpu_model: Option<String>,
    gpus: u32,
    cpu_milli: u64,
    mem_mib: u64,
}

/// Builds a cluster of `(nodes, GPUs per node, GPU model)` groups, in order, named `preset`.
fn groups(preset: &str, groups: &[(u64, u32, &str)]) -> Result<ClusterSpec, ClusterLoadError> {
    let origin = format!("preset {preset}");
    let mut builder = ClusterBuilder::new(DEFAULT_RACK_SIZE);
    for (i, (count, gpus, model)) in groups.iter().enumerate() {
        let shape = NodeShape {
            gpus: *gpus,
            gpu_model: Some(model),
            ..NodeShape::default()
        };
        builder
            .add_group(*count, None, &shape)
            .map_err(|r| ClusterLoadError::Invalid {
                origin: origin.clone(),
                line: i + 1,
                column: None,
                field: r.field.to_string(),
                message: r.message,
            })?;
    }
    builder
        .build(preset)
        .map_err(|error| ClusterLoadError::Cluster { origin, error })
}

/// Reads an embedded inventory CSV, one node per row, in file order; with `onto`, each GPU
/// model becomes the one of that table's models standing for it.
fn inventory<R: DeserializeOwned>(
    preset: &str,
    onto: Option<ThroughputPreset>,
    file: &str,
    text: &str,
    to_node: impl Fn(R) -> InventoryNode,
) -> Result<ClusterSpec, ClusterLoadError> {
    let origin = format!("traces/clusters/{file} (embedded)");
    let invalid = |line: u64, field: &str, message: String| ClusterLoadError::Invalid {
        origin: origin.clone(),
        line: line as usize,
        column: None,
        field: field.to_string(),
        message,
    };
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|e| invalid(1, "header", e.to_string()))?
        .clone();
    let mut builder = ClusterBuilder::new(DEFAULT_RACK_SIZE);
    let mut record = csv::StringRecord::new();
    loop {
        let line = reader.position().line();
        match reader.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Err(invalid(line, "row", e.to_string())),
        }
        let row: R = record.deserialize(Some(&headers)).map_err(|e| {
            let column = match e.kind() {
                csv::ErrorKind::Deserialize { err, .. } => err.field(),
                _ => None,
            }
            .and_then(|i| headers.get(i as usize));
            invalid(line, column.unwrap_or("row"), e.to_string())
        })?;
        let mut node = to_node(row);
        if let (Some(table), Some(model)) = (onto, node.gpu_model.as_deref()) {
            let covered = table.gpu_models();
            let mapped = nearest_covered_model(model, covered).ok_or_else(|| {
                invalid(
                    line,
                    "gpu_model",
                    format!(
                        "GPU model {model:?} is not in the GPU catalog: no speed to map it onto \
                         throughput table {} ({})",
                        table.as_str(),
                        covered.join(", ")
                    ),
                )
            })?;
            node.gpu_model = Some(mapped.to_string());
        }
        let shape = NodeShape {
            gpus: node.gpus,
            gpu_model: node.gpu_model.as_deref(),
            cpu_milli: Some(node.cpu_milli),
            mem_mib: Some(node.mem_mib),
            ..NodeShape::default()
        };
        builder
            .add_node(&node.name, &shape)
            .map_err(|r| invalid(line, r.field, r.message))?;
    }
    builder
        .build(preset)
        .map_err(|error| ClusterLoadError::Cluster { origin, error })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn preset(name: &str) -> ClusterSpec {
        load_preset(name).expect("a preset").expect("loads")
    }

    /// Nodes per model name ("" for CPU-only).
    fn nodes_per_model(spec: &ClusterSpec) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for id in spec.node_ids() {
            let model = spec.node_model(id).map_or("", |m| m.name.as_str());
            *counts.entry(model.to_string()).or_default() += 1;
        }
        counts
    }

    /// Nodes per GPU count.
    fn nodes_per_gpu_count(spec: &ClusterSpec) -> BTreeMap<u32, usize> {
        let mut counts = BTreeMap::new();
        for n in &spec.nodes {
            *counts.entry(n.gpus).or_default() += 1;
        }
        counts
    }

    fn expect_counts<K: Ord + Clone + std::fmt::Debug>(
        got: BTreeMap<K, usize>,
        want: &[(K, usize)],
    ) {
        assert_eq!(got, want.iter().cloned().collect::<BTreeMap<_, _>>());
    }

    // Expected numbers are those in /work/shared/traces/*/FIELDS*.txt.

    #[test]
    fn gavel_and_sia_are_their_papers_clusters() {
        let gavel = preset("gavel");
        assert_eq!(gavel.name, "gavel");
        assert_eq!(
            gavel.describe(),
            "15 nodes, 108 GPUs (K80 x 36, P100 x 36, V100 x 36)"
        );
        expect_counts(nodes_per_gpu_count(&gavel), &[(4, 3), (8, 12)]);
        let sia = preset("SIA");
        assert_eq!(
            sia.describe(),
            "11 nodes, 64 GPUs (RTX-2080Ti x 24, T4 x 24, A100 x 16)"
        );
        expect_counts(
            nodes_per_model(&sia),
            &[
                ("A100".into(), 2),
                ("RTX-2080Ti".into(), 3),
                ("T4".into(), 6),
            ],
        );
    }

    #[test]
    fn inventories_map_onto_a_tables_models() {
        // pai-2020 onto Gavel's K80, P100, V100: P100 stays, T4 -> K80, V100M32 and MISC
        // -> V100 (nearest catalog speed); node and GPU counts, CPU and memory unchanged.
        let plain = preset("pai-2020");
        let mapped = preset("pai-2020:gavel");
        assert_eq!(mapped.name, "pai-2020:gavel");
        assert_eq!(mapped.nodes.len(), plain.nodes.len());
        assert_eq!(mapped.total_gpus(), plain.total_gpus());
        assert_eq!(mapped.nodes[0].cpu_milli, plain.nodes[0].cpu_milli);
        let models = [
            ("", 83),
            ("K80", 497),
            ("P100", 798),
            ("V100", 104 + 135 + 280),
        ];
        expect_counts(
            nodes_per_model(&mapped),
            &models.map(|(m, c)| (m.into(), c)),
        );
        // spot-2026 onto Sia's models: A10 -> RTX-6000, A100-80G and A800 and H800 -> A100,
        // the undisclosed V100-class series -> V100.
        let spot = preset("spot-2026:sia");
        let models = [
            ("A100", 432 + 22 + 219),
            ("RTX-6000", 2494),
            ("V100", 989 + 122),
        ];
        expect_counts(nodes_per_model(&spot), &models.map(|(m, c)| (m.into(), c)));
        // Not a table, or a synthetic preset: not a preset.
        assert!(load_preset("pai-2020:nope").is_none());
        assert!(load_preset("gavel:sia").is_none());
    }

    #[test]
    fn openb_matches_its_fields_file() {
        let spec = preset("openb");
        assert_eq!(spec.nodes.len(), 1523);
        assert_eq!(spec.total_gpus(), 6212);
        let models = [
            ("", 310),
            ("A10", 2),
            ("G2", 549),
            ("G3", 39),
            ("P100", 134),
            ("T4", 404),
            ("V100M16", 55),
            ("V100M32", 30),
        ];
        expect_counts(nodes_per_model(&spec), &models.map(|(m, c)| (m.into(), c)));
        expect_counts(
            nodes_per_gpu_count(&spec),
            &[(0, 310), (1, 24), (2, 518), (4, 54), (8, 617)],
        );
        assert_eq!(spec.nodes[0].name, "openb-node-0000");
    }

    #[test]
    fn pai_2020_matches_its_fields_file() {
        let spec = preset("pai-2020");
        assert_eq!(spec.nodes.len(), 1897);
        assert_eq!(spec.total_gpus(), 6742);
        let models = [
            ("", 83),
            ("MISC", 280),
            ("P100", 798),
            ("T4", 497),
            ("V100", 104),
            ("V100M32", 135),
        ];
        expect_counts(nodes_per_model(&spec), &models.map(|(m, c)| (m.into(), c)));
        // First row: CPU,96,512,0 -> 96 cores, 512 GiB.
        assert_eq!(spec.nodes[0].cpu_milli, 96_000);
        assert_eq!(spec.nodes[0].mem_mib, 524_288);
    }

    #[test]
    fn spot_2026_matches_its_fields_file() {
        let spec = preset("spot-2026");
        assert_eq!(spec.nodes.len(), 4278);
        assert_eq!(spec.total_gpus(), 10412);
        let models = [
            ("A10", 2494),
            ("A100-SXM4-80GB", 432),
            ("A800-SXM4-80GB", 22),
            ("GPU-series-1", 989),
            ("GPU-series-2", 122),
            ("H800", 219),
        ];
        expect_counts(nodes_per_model(&spec), &models.map(|(m, c)| (m.into(), c)));
        expect_counts(nodes_per_gpu_count(&spec), &[(1, 3396), (4, 10), (8, 872)]);
        // First row: GPU-series-1,4,192,0 -> 192 vCPUs, 192 x 4 GiB.
        assert_eq!(spec.nodes[0].name, "spot-node-0");
        assert_eq!(spec.nodes[0].cpu_milli, 192_000);
        assert_eq!(spec.nodes[0].mem_mib, 192 * 4096);
    }

    #[test]
    fn preset_racks_hold_at_most_rack_size_nodes_of_one_model() {
        for name in preset_names() {
            let spec = preset(name);
            let mut racks: BTreeMap<u32, Vec<Option<u32>>> = BTreeMap::new();
            for n in &spec.nodes {
                racks
                    .entry(n.rack)
                    .or_default()
                    .push(n.gpu_model.map(|m| m.0));
            }
            assert_eq!(racks.len(), spec.racks.len(), "{name}: every rack used");
            for members in racks.values() {
                assert!(members.len() <= DEFAULT_RACK_SIZE as usize, "{name}");
                assert!(members.iter().all(|m| *m == members[0]), "{name}");
            }
            assert_eq!(spec.nvlink_domains.len(), spec.nodes.len(), "{name}");
        }
    }

    #[test]
    fn preset_names_are_case_insensitive_and_others_are_not_presets() {
        assert_eq!(preset("OpenB").name, "openb");
        assert!(load_preset("openb2").is_none());
    }

    #[test]
    fn inventory_errors_name_the_line_and_column() {
        let text = "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,0,\nn1,lots,1024,0,\n";
        let err = inventory("t", None, "x.csv", text, |r: OpenbRow| InventoryNode {
            name: r.sn,
            gpu_model: None,
            gpus: r.gpu,
            cpu_milli: r.cpu_milli,
            mem_mib: r.memory_mib,
        })
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("traces/clusters/x.csv (embedded):3: cpu_milli:"),
            "{text}"
        );
    }
}
