//! Assembling a `ClusterSpec` node by node: GPU model resolution (file-defined models, then the
//! catalog), generated node names, default CPU/memory, and the automatic topology rule.
//!
//! Knows nothing of where the nodes come from (preset CSV, shape, TOML file): it reports a bad
//! node as the field at fault plus a message, and the caller adds the location.

use crate::cluster::{ClusterError, ClusterSpec, MAX_GPU_MODELS, MAX_GPUS_PER_NODE, NodeSpec};
use crate::constraint::NodeLabels;
use crate::gpu::GpuModel;
use crate::units::GpuModelId;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};

/// Nodes per automatic rack (consecutive nodes of one GPU model share a rack).
pub const DEFAULT_RACK_SIZE: u32 = 8;
/// Default CPU per GPU when a node's CPU is not given: 16 cores.
pub const DEFAULT_CPU_MILLI_PER_GPU: u64 = 16_000;
/// Default memory per GPU when a node's memory is not given: 128 GiB.
pub const DEFAULT_MEM_MIB_PER_GPU: u64 = 128 * 1024;
/// Default CPU of a CPU-only node: 64 cores.
pub const DEFAULT_CPU_ONLY_CPU_MILLI: u64 = 64_000;
/// Default memory of a CPU-only node: 256 GiB.
pub const DEFAULT_CPU_ONLY_MEM_MIB: u64 = 256 * 1024;
/// Most nodes one loaded cluster may have (guards against `10000000000x8:A100`).
pub const MAX_NODES: usize = 1_000_000;

/// Which NVLink domain a node's GPUs belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum NvlinkScope {
    /// The node alone: one server is one NVLink island.
    #[default]
    Node,
    /// Every node of the node's rack (an NVL72-style rack-scale domain).
    Rack,
}

/// What each node of a group is made of; `None` fields take the documented defaults.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeShape<'a> {
    pub gpus: u32,
    pub gpu_model: Option<&'a str>,
    pub cpu_milli: Option<u64>,
    pub mem_mib: Option<u64>,
    /// Explicit rack name; `None` for an automatic rack.
    pub rack: Option<&'a str>,
    pub nvlink: NvlinkScope,
    /// Node labels (`crate::constraint`); `None` for none.
    pub labels: Option<&'a NodeLabels>,
}

/// A node the builder refused: the input field at fault (as the TOML file spells it) and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rejected {
    pub field: &'static str,
    pub message: String,
}

fn rejected(field: &'static str, message: String) -> Rejected {
    Rejected { field, message }
}

/// Interned topology names: name -> dense index.
#[derive(Debug, Default)]
struct Names {
    names: Vec<String>,
    index: HashMap<String, u32>,
}

impl Names {
    fn intern(&mut self, name: String) -> u32 {
        let next = self.names.len() as u32;
        *self.index.entry(name).or_insert_with_key(|name| {
            self.names.push(name.clone());
            next
        })
    }
}

/// One GPU model's automatic racks: the one filling (index and nodes in it) and how many exist.
#[derive(Debug, Clone, Copy)]
struct AutoRacks {
    rack: u32,
    filled: u32,
    made: u32,
}

#[derive(Debug)]
pub(crate) struct ClusterBuilder {
    rack_size: u32,
    /// Models a cluster file defines or overrides; consulted before the catalog.
    defined: Vec<GpuModel>,
    models: Vec<GpuModel>,
    nodes: Vec<NodeSpec>,
    node_names: HashSet<String>,
    racks: Names,
    domains: Names,
    /// Automatic racks per GPU model (`None`: CPU-only).
    auto_racks: HashMap<Option<GpuModelId>, AutoRacks>,
    /// Next number per generated-name prefix.
    next_number: HashMap<String, usize>,
}

impl ClusterBuilder {
    /// A builder whose automatic racks hold `rack_size` nodes (at least 1).
    pub fn new(rack_size: u32) -> Self {
        ClusterBuilder {
            rack_size: rack_size.max(1),
            defined: Vec::new(),
            models: Vec::new(),
            nodes: Vec::new(),
            node_names: HashSet::new(),
            racks: Names::default(),
            domains: Names::default(),
            auto_racks: HashMap::new(),
            next_number: HashMap::new(),
        }
    }

    /// Makes `model` known by its name, ahead of the catalog. The caller checks uniqueness.
    pub fn define_model(&mut self, model: GpuModel) {
        self.defined.push(model);
    }

    /// Adds one node named `name`.
    pub fn add_node(&mut self, name: &str, shape: &NodeShape<'_>) -> Result<(), Rejected> {
        if name.trim().is_empty() {
            return Err(rejected("name", "node name is empty".into()));
        }
        let node = self.resolve(shape, 1)?;
        self.place(name.to_string(), node, shape)
            .map_err(|m| rejected("name", m))
    }

    /// Adds `count` identical nodes named `{prefix}0000`, `{prefix}0001`, ... (numbering
    /// continues across groups with the same prefix). The default prefix is the GPU model's
    /// name in lower case, or `cpu`, followed by `-`.
    pub fn add_group(
        &mut self,
        count: u64,
        prefix: Option<&str>,
        shape: &NodeShape<'_>,
    ) -> Result<(), Rejected> {
        if count == 0 {
            return Err(rejected("count", "node count must be at least 1".into()));
        }
        let node = self.resolve(shape, count)?;
        let prefix = match prefix {
            Some(p) => p.to_string(),
            None => format!(
                "{}-",
                shape.gpu_model.unwrap_or("cpu").trim().to_ascii_lowercase()
            ),
        };
        for _ in 0..count {
            let number = self.next_number.entry(prefix.clone()).or_insert(0);
            let name = format!("{prefix}{:04}", *number);
            *number += 1;
            self.place(name, node.clone(), shape)
                .map_err(|m| rejected("name_prefix", m))?;
        }
        Ok(())
    }

    /// Checks the shape for `count` new nodes and returns the node to copy (name and topology
    /// left blank).
    fn resolve(&mut self, shape: &NodeShape<'_>, count: u64) -> Result<NodeSpec, Rejected> {
        if count > (MAX_NODES - self.nodes.len()) as u64 {
            return Err(rejected(
                "count",
                format!("{count} more nodes would exceed the limit of {MAX_NODES} nodes"),
            ));
        }
        let gpus = shape.gpus;
        if gpus > MAX_GPUS_PER_NODE {
            return Err(rejected(
                "gpus",
                format!("{gpus} GPUs per node, expected at most {MAX_GPUS_PER_NODE}"),
            ));
        }
        let gpu_model = match (gpus, shape.gpu_model) {
            (0, None) => None,
            (0, Some(m)) => {
                return Err(rejected(
                    "gpu_model",
                    format!("GPU model `{m}` given for a node with 0 GPUs; omit it"),
                ));
            }
            (g, None) => {
                return Err(rejected(
                    "gpu_model",
                    format!("{g} GPUs per node need a GPU model"),
                ));
            }
            (_, Some(m)) => Some(self.model_id(m).map_err(|e| rejected("gpu_model", e))?),
        };
        let default_cpu = match gpus {
            0 => DEFAULT_CPU_ONLY_CPU_MILLI,
            g => g as u64 * DEFAULT_CPU_MILLI_PER_GPU,
        };
        let default_mem = match gpus {
            0 => DEFAULT_CPU_ONLY_MEM_MIB,
            g => g as u64 * DEFAULT_MEM_MIB_PER_GPU,
        };
        let cpu_milli = shape.cpu_milli.unwrap_or(default_cpu);
        let mem_mib = shape.mem_mib.unwrap_or(default_mem);
        if cpu_milli == 0 {
            return Err(rejected("cpu_milli", "CPU must be > 0 milli-cores".into()));
        }
        if mem_mib == 0 {
            return Err(rejected("mem_mib", "memory must be > 0 MiB".into()));
        }
        if shape.rack.is_some_and(|r| r.trim().is_empty()) {
            return Err(rejected("rack", "rack name is empty".into()));
        }
        let labels = shape.labels.cloned().unwrap_or_default();
        if let Some(k) = labels.keys().find(|k| !crate::constraint::is_label_key(k)) {
            return Err(rejected(
                "labels",
                format!("label key {k:?}: letters, digits and -_./ only"),
            ));
        }
        Ok(NodeSpec {
            name: String::new(),
            gpu_model,
            gpus,
            cpu_milli,
            mem_mib,
            rack: 0,
            nvlink_domain: 0,
            labels,
        })
    }

    /// The id of the model called `name` (case-insensitive): one already in the cluster, else
    /// one the file defines, else the catalog's.
    fn model_id(&mut self, name: &str) -> Result<GpuModelId, String> {
        let name = name.trim();
        let same = |m: &&GpuModel| m.name.eq_ignore_ascii_case(name);
        if let Some(i) = self.models.iter().position(|m| same(&m)) {
            return Ok(GpuModelId(i as u32));
        }
        let model = self
            .defined
            .iter()
            .find(same)
            .cloned()
            .or_else(|| GpuModel::from_catalog(name))
            .ok_or_else(|| self.unknown_model(name))?;
        if self.models.len() == MAX_GPU_MODELS {
            return Err(format!(
                "GPU model `{name}` would be model number {}, at most {MAX_GPU_MODELS} allowed",
                MAX_GPU_MODELS + 1
            ));
        }
        self.models.push(model);
        Ok(GpuModelId(self.models.len() as u32 - 1))
    }

    fn unknown_model(&self, name: &str) -> String {
        let catalog: Vec<&str> = GpuModel::catalog_names().collect();
        let mut message = format!(
            "unknown GPU model `{name}`, expected a catalog model ({})",
            catalog.join(", ")
        );
        if !self.defined.is_empty() {
            let defined: Vec<&str> = self.defined.iter().map(|m| m.name.as_str()).collect();
            message += &format!(" or one defined in [[gpu_models]] ({})", defined.join(", "));
        }
        message
    }

    /// Names the node, assigns its rack and NVLink domain, and appends it.
    fn place(
        &mut self,
        name: String,
        mut node: NodeSpec,
        shape: &NodeShape<'_>,
    ) -> Result<(), String> {
        if !self.node_names.insert(name.clone()) {
            return Err(format!("node name `{name}` is used twice"));
        }
        node.rack = match shape.rack {
            Some(rack) => self.racks.intern(rack.trim().to_string()),
            None => self.auto_rack(node.gpu_model),
        };
        let domain = match shape.nvlink {
            NvlinkScope::Node => format!("node:{name}"),
            NvlinkScope::Rack => format!("rack:{}", self.racks.names[node.rack as usize]),
        };
        node.nvlink_domain = self.domains.intern(domain);
        node.name = name;
        self.nodes.push(node);
        Ok(())
    }

    /// The automatic rack for the next node of `model`: the one now filling, or a new one
    /// named `{model}-rack-NNN` (`cpu-rack-NNN` for CPU-only nodes) when it is full.
    fn auto_rack(&mut self, model: Option<GpuModelId>) -> u32 {
        let made = match self.auto_racks.get_mut(&model) {
            Some(open) if open.filled < self.rack_size => {
                open.filled += 1;
                return open.rack;
            }
            Some(full) => full.made,
            None => 0,
        };
        let label = model.map_or("cpu".to_string(), |m| {
            self.models[m.index()].name.to_ascii_lowercase()
        });
        let rack = self.racks.intern(format!("{label}-rack-{made:03}"));
        let racks = AutoRacks {
            rack,
            filled: 1,
            made: made + 1,
        };
        self.auto_racks.insert(model, racks);
        rack
    }

    pub fn build(self, name: &str) -> Result<ClusterSpec, ClusterError> {
        ClusterSpec::new(
            name,
            self.models,
            self.nodes,
            self.racks.names,
            self.domains.names,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(gpus: u32, model: &str) -> NodeShape<'_> {
        NodeShape {
            gpus,
            gpu_model: Some(model),
            ..NodeShape::default()
        }
    }

    #[test]
    fn groups_get_names_defaults_and_auto_racks() {
        let mut b = ClusterBuilder::new(2);
        b.add_group(3, None, &gpu(8, "A100")).unwrap();
        b.add_group(1, None, &NodeShape::default()).unwrap();
        b.add_group(1, None, &gpu(4, "a100")).unwrap();
        let spec = b.build("t").unwrap();
        let names: Vec<&str> = spec.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "a100-0000",
                "a100-0001",
                "a100-0002",
                "cpu-0000",
                "a100-0003"
            ]
        );
        // 8 GPUs x 16 cores, 8 x 128 GiB; CPU-only 64 cores, 256 GiB.
        assert_eq!(spec.nodes[0].cpu_milli, 128_000);
        assert_eq!(spec.nodes[0].mem_mib, 1_048_576);
        assert_eq!(spec.nodes[3].cpu_milli, 64_000);
        assert_eq!(spec.nodes[3].mem_mib, 262_144);
        // Racks of 2 per model: a100 nodes 0,1 | 2,4; the CPU node alone.
        let racks: Vec<&str> = spec
            .nodes
            .iter()
            .map(|n| spec.racks[n.rack as usize].as_str())
            .collect();
        assert_eq!(
            racks,
            [
                "a100-rack-000",
                "a100-rack-000",
                "a100-rack-001",
                "cpu-rack-000",
                "a100-rack-001"
            ]
        );
        assert_eq!(spec.models.len(), 1, "a100 and A100 are one model");
        assert_eq!(spec.nvlink_domains.len(), 5, "one NVLink domain per node");
    }

    #[test]
    fn rack_scope_nvlink_shares_the_rack_domain() {
        let mut b = ClusterBuilder::new(8);
        let shape = NodeShape {
            rack: Some("nvl72"),
            nvlink: NvlinkScope::Rack,
            ..gpu(4, "H100")
        };
        b.add_group(18, Some("gb-"), &shape).unwrap();
        let spec = b.build("t").unwrap();
        assert_eq!(spec.racks, ["nvl72"]);
        assert_eq!(spec.nvlink_domains, ["rack:nvl72"]);
    }

    #[test]
    fn bad_nodes_name_the_field() {
        let mut b = ClusterBuilder::new(8);
        let field = |r: Result<(), Rejected>| r.unwrap_err().field;
        assert_eq!(field(b.add_group(0, None, &gpu(8, "A100"))), "count");
        assert_eq!(field(b.add_group(1, None, &gpu(65, "A100"))), "gpus");
        assert_eq!(field(b.add_group(1, None, &gpu(8, "NOPE"))), "gpu_model");
        assert_eq!(field(b.add_group(1, None, &gpu(0, "A100"))), "gpu_model");
        let no_model = NodeShape {
            gpus: 2,
            ..NodeShape::default()
        };
        assert_eq!(field(b.add_node("x", &no_model)), "gpu_model");
        b.add_node("x", &gpu(8, "A100")).unwrap();
        assert_eq!(field(b.add_node("x", &gpu(8, "A100"))), "name");
        let too_many = b.add_group(MAX_NODES as u64, None, &gpu(8, "A100"));
        assert_eq!(field(too_many), "count");
    }

    #[test]
    fn unknown_model_lists_the_catalog() {
        let mut b = ClusterBuilder::new(8);
        let err = b.add_group(1, None, &gpu(8, "TPUv4")).unwrap_err();
        assert!(err.message.contains("unknown GPU model `TPUv4`"));
        assert!(err.message.contains("A100"), "{}", err.message);
    }
}
