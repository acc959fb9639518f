//! The cluster: its static shape (`ClusterSpec`), its changing free capacity (`ClusterState`),
//! and feasibility (does a job fit, and if not, why).
//!
//! Owns the world's resource arithmetic; knows nothing of time, events or policies.

mod feasibility;
mod index;
mod load;
pub(crate) use load::{field_at, line_column};
mod state;

pub use feasibility::{FitStrategy, Infeasible, fits_empty};
pub use load::{
    ClusterLoadError, DEFAULT_CPU_MILLI_PER_GPU, DEFAULT_CPU_ONLY_CPU_MILLI,
    DEFAULT_CPU_ONLY_MEM_MIB, DEFAULT_MEM_MIB_PER_GPU, DEFAULT_RACK_SIZE, MAX_CLUSTER_FILE_BYTES,
    MAX_NODES, SPOT_MEM_MIB_PER_VCPU, load_cluster, parse_cluster_toml, preset_names,
};
pub use state::{
    Allocation, ClusterState, DecisionFault, ResizeRefusal, ShareRefusal, StateError, TaskPlacement,
};

use crate::constraint::{Constraints, NodeLabels};
use crate::gpu::GpuModel;
use crate::job::JobSpec;
use crate::units::{GPU_MILLI, GpuModelId, NodeId};
use serde::{Deserialize, Serialize};

/// Most GPUs one node may hold (a bitmask per node fits them).
pub const MAX_GPUS_PER_NODE: u32 = 64;
/// Most distinct GPU models in one cluster (a `u64` mask holds a set of them).
pub const MAX_GPU_MODELS: usize = 64;

/// One node as built: fixed capacities and topology.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSpec {
    pub name: String,
    /// The model of all GPUs on the node; `None` for a CPU-only node.
    pub gpu_model: Option<GpuModelId>,
    /// Number of GPUs (0 for a CPU-only node).
    pub gpus: u32,
    /// CPU capacity, milli-cores.
    pub cpu_milli: u64,
    /// Memory capacity, MiB.
    pub mem_mib: u64,
    /// Rack index into `ClusterSpec::racks`.
    pub rack: u32,
    /// NVLink/NVSwitch domain index into `ClusterSpec::nvlink_domains` (GPUs of nodes in one
    /// domain talk at NVLink speed).
    pub nvlink_domain: u32,
    /// Labels (Kubernetes node labels, Slurm features as labels with an empty value) that
    /// jobs' `Constraints` select on. Empty on clusters that declare none.
    #[serde(default, skip_serializing_if = "NodeLabels::is_empty")]
    pub labels: NodeLabels,
}

/// Why a cluster description is unusable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClusterError {
    #[error("cluster has no nodes")]
    Empty,
    #[error("node {node}: {message}")]
    InvalidNode { node: String, message: String },
    #[error("GPU model {0}")]
    InvalidModel(String),
    #[error("more than {MAX_GPU_MODELS} GPU models")]
    TooManyModels,
    #[error("node name {0} appears twice")]
    DuplicateNode(String),
    #[error(
        "more than {MAX_LABEL_CLASSES} distinct node label sets (keep only the labels jobs \
         select on)"
    )]
    TooManyLabelSets,
}

/// Most distinct label sets among a cluster's nodes (a `u64` mask holds a set of them).
pub const MAX_LABEL_CLASSES: usize = 64;

/// The nodes a job may use, as feasibility's index sees them: allowed GPU models (for GPU
/// tasks) and allowed label classes (nodes with the same labels form one class). Both
/// all-ones for a job that constrains neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeMask {
    /// Bit `m`: GPU model `m` allowed (ignored for CPU-only tasks).
    pub models: u64,
    /// Bit `c`: nodes of label class `c` allowed.
    pub classes: u64,
}

impl NodeMask {
    /// Every node.
    pub const ANY: NodeMask = NodeMask {
        models: u64::MAX,
        classes: u64::MAX,
    };
    /// Whether GPU model `m` is allowed.
    pub fn allows_model(&self, m: GpuModelId) -> bool {
        self.models & (1u64 << m.0) != 0
    }
}

/// A cluster's fixed shape: GPU models, nodes, topology names.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterSpec {
    /// Preset or file name, for reports.
    pub name: String,
    pub models: Vec<GpuModel>,
    pub nodes: Vec<NodeSpec>,
    pub racks: Vec<String>,
    pub nvlink_domains: Vec<String>,
    /// The distinct label sets of the nodes, in order of first appearance (one, empty, on a
    /// cluster without labels).
    #[serde(skip)]
    label_classes: Vec<NodeLabels>,
    /// Each node's index into `label_classes`.
    #[serde(skip)]
    node_class: Vec<u8>,
}

impl ClusterSpec {
    /// Checks and returns the cluster: at least one node, unique node names, valid models,
    /// GPU count and model consistent on every node, topology indices in range.
    pub fn new(
        name: impl Into<String>,
        models: Vec<GpuModel>,
        nodes: Vec<NodeSpec>,
        racks: Vec<String>,
        nvlink_domains: Vec<String>,
    ) -> Result<ClusterSpec, ClusterError> {
        if nodes.is_empty() {
            return Err(ClusterError::Empty);
        }
        if models.len() > MAX_GPU_MODELS {
            return Err(ClusterError::TooManyModels);
        }
        for m in &models {
            m.validate().map_err(ClusterError::InvalidModel)?;
        }
        let mut names = std::collections::HashSet::with_capacity(nodes.len());
        for n in &nodes {
            let bad = |message: String| ClusterError::InvalidNode {
                node: n.name.clone(),
                message,
            };
            if !names.insert(n.name.as_str()) {
                return Err(ClusterError::DuplicateNode(n.name.clone()));
            }
            if n.gpus > MAX_GPUS_PER_NODE {
                return Err(bad(format!("{} GPUs, at most {MAX_GPUS_PER_NODE}", n.gpus)));
            }
            match (n.gpus, n.gpu_model) {
                (0, Some(_)) => return Err(bad("has a GPU model but 0 GPUs".into())),
                (g, None) if g > 0 => return Err(bad(format!("has {g} GPUs but no GPU model"))),
                (_, Some(m)) if m.index() >= models.len() => {
                    return Err(bad(format!("GPU model index {m} out of range")));
                }
                _ => {}
            }
            if n.rack as usize >= racks.len() {
                return Err(bad(format!("rack index {} out of range", n.rack)));
            }
            if n.nvlink_domain as usize >= nvlink_domains.len() {
                return Err(bad(format!(
                    "NVLink domain index {} out of range",
                    n.nvlink_domain
                )));
            }
        }
        let mut label_classes: Vec<NodeLabels> = Vec::new();
        let mut node_class = Vec::with_capacity(nodes.len());
        for n in &nodes {
            let c = match label_classes.iter().position(|l| *l == n.labels) {
                Some(c) => c,
                None => {
                    if label_classes.len() == MAX_LABEL_CLASSES {
                        return Err(ClusterError::TooManyLabelSets);
                    }
                    label_classes.push(n.labels.clone());
                    label_classes.len() - 1
                }
            };
            node_class.push(c as u8);
        }
        Ok(ClusterSpec {
            name: name.into(),
            models,
            nodes,
            racks,
            nvlink_domains,
            label_classes,
            node_class,
        })
    }

    /// The label class of a node (nodes with equal labels share one).
    pub fn node_class(&self, id: NodeId) -> u32 {
        u32::from(self.node_class[id.index()])
    }
    /// The label classes whose labels satisfy `c`, as a bit mask (all of them for a job
    /// without label terms).
    pub fn class_mask(&self, c: &Constraints) -> u64 {
        if !c.restricts_nodes() {
            return u64::MAX;
        }
        self.label_classes
            .iter()
            .enumerate()
            .filter(|(_, l)| c.admits(l))
            .fold(0, |mask, (i, _)| mask | (1u64 << i))
    }
    /// The nodes `job` may use: its GPU types and its label constraints.
    pub fn job_mask(&self, job: &JobSpec) -> NodeMask {
        NodeMask {
            models: self.model_mask(&job.gpu_types),
            classes: self.class_mask(&job.constraints),
        }
    }
    /// Whether `node` is one `mask` allows for a task of `gpus` GPUs (its class, and for a
    /// GPU task its model).
    pub fn node_allowed(&self, mask: NodeMask, node: NodeId, gpus: u32) -> bool {
        mask.classes & (1u64 << self.node_class(node)) != 0
            && (gpus == 0
                || self
                    .node(node)
                    .gpu_model
                    .is_some_and(|m| mask.allows_model(m)))
    }

    pub fn node(&self, id: NodeId) -> &NodeSpec {
        &self.nodes[id.index()]
    }
    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..self.nodes.len()).map(|i| NodeId(i as u32))
    }
    pub fn model(&self, id: GpuModelId) -> &GpuModel {
        &self.models[id.index()]
    }
    /// The model a node's GPUs are, if any.
    pub fn node_model(&self, id: NodeId) -> Option<&GpuModel> {
        self.node(id).gpu_model.map(|m| self.model(m))
    }
    /// Total GPUs in the cluster.
    pub fn total_gpus(&self) -> u64 {
        self.nodes.iter().map(|n| n.gpus as u64).sum()
    }
    /// Total GPU capacity in milli-GPU.
    pub fn total_gpu_milli(&self) -> u64 {
        self.total_gpus() * GPU_MILLI as u64
    }
    pub fn total_cpu_milli(&self) -> u64 {
        self.nodes.iter().map(|n| n.cpu_milli).sum()
    }
    pub fn total_mem_mib(&self) -> u64 {
        self.nodes.iter().map(|n| n.mem_mib).sum()
    }
    /// The model id whose name matches (case-insensitive).
    pub fn model_id(&self, name: &str) -> Option<GpuModelId> {
        self.models
            .iter()
            .position(|m| m.name.eq_ignore_ascii_case(name.trim()))
            .map(|i| GpuModelId(i as u32))
    }
    /// The set of model ids a job's `gpu_types` allow, as a bit mask (all models when empty).
    /// Names the cluster does not have simply allow nothing.
    pub fn model_mask(&self, gpu_types: &[String]) -> u64 {
        if gpu_types.is_empty() {
            return u64::MAX;
        }
        gpu_types
            .iter()
            .filter_map(|t| self.model_id(t))
            .fold(0, |mask, m| mask | (1u64 << m.0))
    }
    /// Human summary: "1523 nodes, 6212 GPUs (G2 x 4392, T4 x 808, ...)".
    pub fn describe(&self) -> String {
        let mut per_model = vec![0u64; self.models.len()];
        for n in &self.nodes {
            if let Some(m) = n.gpu_model {
                per_model[m.index()] += n.gpus as u64;
            }
        }
        let mut parts: Vec<(u64, &str)> = per_model
            .iter()
            .zip(&self.models)
            .filter(|(c, _)| **c > 0)
            .map(|(c, m)| (*c, m.name.as_str()))
            .collect();
        parts.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        let models: Vec<String> = parts.iter().map(|(c, n)| format!("{n} x {c}")).collect();
        format!(
            "{} nodes, {} GPUs ({})",
            self.nodes.len(),
            self.total_gpus(),
            if models.is_empty() {
                "no GPUs".to_string()
            } else {
                models.join(", ")
            }
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// V100 (model 0) and T4 (model 1) nodes, each `(model, GPUs, milli-CPU, MiB)` (`None`:
    /// a CPU-only node), `per_rack` nodes a rack, each node its own NVLink domain.
    pub fn v100_t4(nodes: &[(Option<u32>, u32, u64, u64)], per_rack: usize) -> ClusterSpec {
        let models = vec![
            GpuModel::from_catalog("V100").expect("catalog model"),
            GpuModel::from_catalog("T4").expect("catalog model"),
        ];
        let specs: Vec<NodeSpec> = nodes
            .iter()
            .enumerate()
            .map(|(i, (model, gpus, cpu_milli, mem_mib))| NodeSpec {
                name: format!("n{i}"),
                gpu_model: model.map(GpuModelId),
                gpus: if model.is_some() { *gpus } else { 0 },
                cpu_milli: *cpu_milli,
                mem_mib: *mem_mib,
                rack: (i / per_rack) as u32,
                nvlink_domain: i as u32,
                labels: NodeLabels::new(),
            })
            .collect();
        let racks = (0..nodes.len().div_ceil(per_rack))
            .map(|r| format!("r{r}"))
            .collect();
        let domains = (0..nodes.len()).map(|d| format!("d{d}")).collect();
        ClusterSpec::new("test", models, specs, racks, domains).expect("valid test cluster")
    }

    /// `n` nodes of `gpus` GPUs of one model with the given CPU/memory, 4 nodes a rack, each
    /// node its own NVLink domain.
    pub fn uniform(n: usize, gpus: u32, model: &str, cpu_milli: u64, mem_mib: u64) -> ClusterSpec {
        let models = vec![GpuModel::from_catalog(model).expect("catalog model")];
        let nodes: Vec<NodeSpec> = (0..n)
            .map(|i| NodeSpec {
                name: format!("n{i}"),
                gpu_model: (gpus > 0).then_some(GpuModelId(0)),
                gpus,
                cpu_milli,
                mem_mib,
                rack: (i / 4) as u32,
                nvlink_domain: i as u32,
                labels: NodeLabels::new(),
            })
            .collect();
        let racks = (0..n.div_ceil(4)).map(|r| format!("r{r}")).collect();
        let domains = (0..n).map(|d| format!("d{d}")).collect();
        ClusterSpec::new("test", models, nodes, racks, domains).expect("valid test cluster")
    }

    #[test]
    fn spec_validation_names_the_node() {
        let mut spec = uniform(2, 8, "V100", 1000, 1000);
        spec.nodes[1].gpu_model = None;
        let err = ClusterSpec::new(
            "x",
            spec.models,
            spec.nodes,
            spec.racks,
            spec.nvlink_domains,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "node n1: has 8 GPUs but no GPU model");
    }

    #[test]
    fn model_mask_resolves_names() {
        let spec = uniform(1, 8, "V100", 1000, 1000);
        assert_eq!(spec.model_mask(&[]), u64::MAX);
        assert_eq!(spec.model_mask(&["v100".into()]), 1);
        assert_eq!(spec.model_mask(&["T4".into()]), 0);
        assert_eq!(spec.describe(), "1 nodes, 8 GPUs (V100 x 8)");
    }
}
