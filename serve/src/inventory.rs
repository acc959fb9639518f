//! The node inventory: the latest report of each node from the node agents
//! (`lachesis probe --push`, the `ReportNodes` RPC). Reports expire after a TTL, so a node whose
//! agent died is not trusted forever. The Kubernetes extender reads node state from here when
//! kube-scheduler sends only node names (`nodeCacheCapable: true`).

use crate::proto;
use crate::world::{SnapshotError, World};
use std::collections::BTreeMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

/// Nodes one `ReportNodes` call may carry.
pub const MAX_REPORT_NODES: usize = 10_000;

#[derive(Debug, Clone)]
struct Entry {
    node: proto::Node,
    source: String,
    at: Instant,
}

/// The latest valid report of each node, for `ttl`.
#[derive(Debug)]
pub struct NodeInventory {
    ttl: Duration,
    nodes: RwLock<BTreeMap<String, Entry>>,
}

impl NodeInventory {
    pub fn new(ttl: Duration) -> Self {
        NodeInventory {
            ttl,
            nodes: RwLock::new(BTreeMap::new()),
        }
    }

    /// Validates every node (as a snapshot of that node alone would be) and stores them all,
    /// or none: an error names the offending node as `nodes[i]...`. Returns how many were
    /// stored.
    pub fn report(&self, nodes: &[proto::Node], source: &str) -> Result<usize, SnapshotError> {
        if nodes.len() > MAX_REPORT_NODES {
            return Err(SnapshotError {
                path: "nodes".into(),
                message: format!(
                    "{} nodes, at most {MAX_REPORT_NODES} per report",
                    nodes.len()
                ),
            });
        }
        for (i, node) in nodes.iter().enumerate() {
            let snapshot = proto::Snapshot {
                nodes: vec![node.clone()],
                ..Default::default()
            };
            if let Err(e) = World::build(&snapshot) {
                let path = e
                    .path
                    .replacen("snapshot.nodes[0]", &format!("nodes[{i}]"), 1);
                return Err(SnapshotError {
                    path,
                    message: e.message,
                });
            }
        }
        let now = Instant::now();
        let mut map = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        for node in nodes {
            map.insert(
                node.name.clone(),
                Entry {
                    node: node.clone(),
                    source: source.to_string(),
                    at: now,
                },
            );
        }
        let ttl = self.ttl;
        map.retain(|_, e| now.duration_since(e.at) <= ttl);
        Ok(nodes.len())
    }

    /// The node's latest report, if fresh.
    pub fn get(&self, name: &str) -> Option<proto::Node> {
        let map = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        map.get(name)
            .filter(|e| e.at.elapsed() <= self.ttl)
            .map(|e| e.node.clone())
    }

    /// Who reported the node last and how long ago, if fresh.
    pub fn source(&self, name: &str) -> Option<(String, Duration)> {
        let map = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        map.get(name)
            .filter(|e| e.at.elapsed() <= self.ttl)
            .map(|e| (e.source.clone(), e.at.elapsed()))
    }

    /// Fresh reports held now.
    pub fn len(&self) -> usize {
        let map = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        map.values().filter(|e| e.at.elapsed() <= self.ttl).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, gpus: u32) -> proto::Node {
        proto::Node {
            name: name.into(),
            gpu_model: "A100".into(),
            gpus,
            cpu_milli: 64_000,
            mem_mib: 512 * 1024,
            ..Default::default()
        }
    }

    #[test]
    fn keeps_the_latest_report_and_expires_old_ones() {
        let inv = NodeInventory::new(Duration::from_millis(200));
        assert_eq!(inv.report(&[node("a", 8), node("b", 4)], "t").unwrap(), 2);
        inv.report(&[node("a", 2)], "t2").unwrap();
        assert_eq!(inv.get("a").unwrap().gpus, 2);
        assert_eq!(inv.source("a").unwrap().0, "t2");
        assert_eq!(inv.len(), 2);
        std::thread::sleep(Duration::from_millis(250));
        assert!(inv.get("a").is_none());
        assert!(inv.is_empty());
    }

    #[test]
    fn a_bad_node_is_refused_with_its_path_and_nothing_is_stored() {
        let inv = NodeInventory::new(Duration::from_secs(60));
        let mut bad = node("b", 2);
        bad.gpu_free_milli = vec![1000, 1001];
        let err = inv.report(&[node("a", 8), bad], "t").unwrap_err();
        assert!(err.path.starts_with("nodes[1]"), "{err}");
        assert!(inv.is_empty());
    }
}
