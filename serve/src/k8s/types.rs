//! The wire types of `k8s.io/kube-scheduler/extender/v1`, as kube-scheduler serialises them,
//! and read-only views of the `core/v1` Pod and Node objects they carry.
//!
//! The extender types have no json tags upstream, so Go writes their field names as declared:
//! PascalCase (`Pod`, `NodeNames`, `FailedAndUnresolvableNodes`, `NumPDBViolations`, `UID`).
//! Go reads JSON keys case-insensitively, so kube-scheduler also reads what we write; the
//! lower-case json tags of releases before 1.16 (`nodenames`, `failedNodes`, `nodeToVictims`)
//! are accepted as aliases on input. The Pod and Node objects use the API's own camelCase tags;
//! the views read only what the extender needs and ignore every other field (real objects carry
//! managedFields, conditions, images and more).

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// `MaxExtenderPriority`: the best score a prioritize answer may give.
pub const MAX_EXTENDER_PRIORITY: i64 = 10;
/// `MinExtenderPriority`.
pub const MIN_EXTENDER_PRIORITY: i64 = 0;

/// `ExtenderArgs`: the input of filter and prioritize.
#[derive(Debug, Clone, Deserialize)]
pub struct ExtenderArgs {
    #[serde(rename = "Pod", alias = "pod")]
    pub pod: Option<Pod>,
    /// Full nodes (`nodeCacheCapable: false`). Items are kept as sent: filter echoes them.
    #[serde(rename = "Nodes", alias = "nodes")]
    pub nodes: Option<NodeList>,
    /// Node names only (`nodeCacheCapable: true`).
    #[serde(rename = "NodeNames", alias = "nodenames", alias = "nodeNames")]
    pub node_names: Option<Vec<String>>,
}

/// `v1.NodeList`: list metadata and the node objects, verbatim.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeList {
    #[serde(
        rename = "apiVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub api_version: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Value>,
    #[serde(default)]
    pub metadata: Value,
    #[serde(default, deserialize_with = "null_as_default")]
    pub items: Vec<Value>,
}

/// `FailedNodesMap`: node name -> why.
pub type FailedNodesMap = BTreeMap<String, String>;

/// `ExtenderFilterResult`: the output of filter.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExtenderFilterResult {
    #[serde(rename = "Nodes", alias = "nodes")]
    pub nodes: Option<NodeList>,
    #[serde(rename = "NodeNames", alias = "nodenames")]
    pub node_names: Option<Vec<String>>,
    #[serde(rename = "FailedNodes", alias = "failedNodes", default)]
    pub failed_nodes: FailedNodesMap,
    #[serde(rename = "FailedAndUnresolvableNodes", default)]
    pub failed_and_unresolvable_nodes: FailedNodesMap,
    #[serde(rename = "Error", alias = "error", default)]
    pub error: String,
}

/// `HostPriority`: one node's score, 0-`MaxExtenderPriority`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPriority {
    #[serde(rename = "Host", alias = "host")]
    pub host: String,
    #[serde(rename = "Score", alias = "score")]
    pub score: i64,
}

/// `HostPriorityList`: the output of prioritize.
pub type HostPriorityList = Vec<HostPriority>;

/// `ExtenderPreemptionArgs`: the input of preempt.
#[derive(Debug, Clone, Deserialize)]
pub struct ExtenderPreemptionArgs {
    #[serde(rename = "Pod", alias = "pod")]
    pub pod: Option<Pod>,
    /// Full victim pods per node (`nodeCacheCapable: false`).
    #[serde(rename = "NodeNameToVictims", alias = "nodeToVictims", default)]
    pub node_name_to_victims: Option<BTreeMap<String, Option<Victims>>>,
    /// Victim UIDs per node (`nodeCacheCapable: true`).
    #[serde(
        rename = "NodeNameToMetaVictims",
        alias = "nodeNameToMetaVictims",
        default
    )]
    pub node_name_to_meta_victims: Option<BTreeMap<String, Option<MetaVictims>>>,
}

/// `Victims`: pods to evict from one node, and how many PodDisruptionBudgets that violates.
#[derive(Debug, Clone, Deserialize)]
pub struct Victims {
    #[serde(
        rename = "Pods",
        alias = "pods",
        default,
        deserialize_with = "null_as_default"
    )]
    pub pods: Vec<Pod>,
    #[serde(rename = "NumPDBViolations", alias = "numPDBViolations", default)]
    pub num_pdb_violations: i64,
}

/// `MetaPod`: a pod by UID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaPod {
    #[serde(rename = "UID", alias = "uid")]
    pub uid: String,
}

/// `MetaVictims`: victims by UID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaVictims {
    #[serde(
        rename = "Pods",
        alias = "pods",
        default,
        deserialize_with = "null_as_default"
    )]
    pub pods: Vec<MetaPod>,
    #[serde(rename = "NumPDBViolations", alias = "numPDBViolations", default)]
    pub num_pdb_violations: i64,
}

/// `ExtenderPreemptionResult`: the output of preempt.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExtenderPreemptionResult {
    #[serde(rename = "NodeNameToMetaVictims", alias = "nodeNameToMetaVictims")]
    pub node_name_to_meta_victims: BTreeMap<String, MetaVictims>,
}

/// `ObjectMeta`, the fields the extender reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(deserialize_with = "null_as_default")]
    pub namespace: String,
    #[serde(deserialize_with = "null_as_default")]
    pub uid: String,
    #[serde(deserialize_with = "null_as_default")]
    pub labels: BTreeMap<String, String>,
    #[serde(deserialize_with = "null_as_default")]
    pub annotations: BTreeMap<String, String>,
    /// RFC 3339, as `metav1.Time` writes it.
    pub creation_timestamp: Option<String>,
}

/// `v1.Pod`, the fields the extender reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Pod {
    #[serde(deserialize_with = "null_as_default")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "null_as_default")]
    pub spec: PodSpec,
}

/// `v1.PodSpec`, the fields the extender reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodSpec {
    #[serde(deserialize_with = "null_as_default")]
    pub containers: Vec<Container>,
    #[serde(deserialize_with = "null_as_default")]
    pub init_containers: Vec<Container>,
    /// Pod overhead (RuntimeClass), added to the request.
    #[serde(deserialize_with = "null_as_default")]
    pub overhead: ResourceList,
    pub priority: Option<i32>,
    #[serde(deserialize_with = "null_as_default")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(deserialize_with = "null_as_default")]
    pub node_name: String,
    #[serde(deserialize_with = "null_as_default")]
    pub affinity: Affinity,
}

/// `v1.Affinity`, the node affinity part.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Affinity {
    #[serde(deserialize_with = "null_as_default")]
    pub node_affinity: NodeAffinity,
}

/// `v1.NodeAffinity`: only the required part constrains placement (preferred terms are
/// kube-scheduler's scoring).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeAffinity {
    pub required_during_scheduling_ignored_during_execution: Option<NodeSelector>,
}

/// `v1.NodeSelector`: the terms are ORed.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeSelector {
    #[serde(deserialize_with = "null_as_default")]
    pub node_selector_terms: Vec<NodeSelectorTerm>,
}

/// `v1.NodeSelectorTerm`: the expressions are ANDed (`matchFields` is not read).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeSelectorTerm {
    #[serde(deserialize_with = "null_as_default")]
    pub match_expressions: Vec<NodeSelectorRequirement>,
}

/// `v1.NodeSelectorRequirement`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeSelectorRequirement {
    pub key: String,
    pub operator: String,
    #[serde(deserialize_with = "null_as_default")]
    pub values: Vec<String>,
}

/// `v1.Container`, the fields the extender reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Container {
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(deserialize_with = "null_as_default")]
    pub resources: Resources,
    /// `Always` on an init container makes it a sidecar (runs for the pod's whole life).
    pub restart_policy: Option<String>,
}

/// `v1.ResourceRequirements`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Resources {
    #[serde(deserialize_with = "null_as_default")]
    pub requests: ResourceList,
    #[serde(deserialize_with = "null_as_default")]
    pub limits: ResourceList,
}

/// `v1.ResourceList`: resource name -> quantity text (parsed later, so errors name the field).
pub type ResourceList = BTreeMap<String, QuantityText>;

/// A quantity as sent: a JSON string, or a bare number (which `Quantity` also accepts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityText(pub String);

impl<'de> Deserialize<'de> for QuantityText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(QuantityText(s)),
            Value::Number(n) => Ok(QuantityText(n.to_string())),
            other => Err(de::Error::custom(format!(
                "a quantity must be a string or a number, not {other}"
            ))),
        }
    }
}

/// `v1.Node`, the fields the extender reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Node {
    #[serde(deserialize_with = "null_as_default")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "null_as_default")]
    pub spec: NodeSpec,
    #[serde(deserialize_with = "null_as_default")]
    pub status: NodeStatus,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct NodeSpec {
    /// Cordoned.
    pub unschedulable: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct NodeStatus {
    #[serde(deserialize_with = "null_as_default")]
    pub allocatable: ResourceList,
    #[serde(deserialize_with = "null_as_default")]
    pub capacity: ResourceList,
}

/// Go writes nil maps, slices and pointers as `null`: read it as empty.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn results_serialise_with_upstream_field_names() {
        let r = ExtenderFilterResult {
            node_names: Some(vec!["a".into()]),
            ..Default::default()
        };
        let v = serde_json::to_value(&r).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "Error",
                "FailedAndUnresolvableNodes",
                "FailedNodes",
                "NodeNames",
                "Nodes"
            ]
        );
        let p = ExtenderPreemptionResult {
            node_name_to_meta_victims: [(
                "n".to_string(),
                MetaVictims {
                    pods: vec![MetaPod { uid: "u".into() }],
                    num_pdb_violations: 1,
                },
            )]
            .into(),
        };
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"NodeNameToMetaVictims":{"n":{"Pods":[{"UID":"u"}],"NumPDBViolations":1}}}"#
        );
        assert_eq!(
            serde_json::to_string(&HostPriority {
                host: "n".into(),
                score: 10
            })
            .unwrap(),
            r#"{"Host":"n","Score":10}"#
        );
    }

    #[test]
    fn args_accept_go_nulls_and_the_old_lower_case_tags() {
        let a: ExtenderArgs = serde_json::from_str(
            r#"{"pod":{"metadata":{"name":"p","labels":null},"spec":{"containers":null}},
                "nodenames":["a","b"]}"#,
        )
        .unwrap();
        assert_eq!(a.pod.unwrap().metadata.name, "p");
        assert_eq!(a.node_names.unwrap(), ["a", "b"]);
        let v: ExtenderPreemptionArgs = serde_json::from_str(
            r#"{"Pod":{},"NodeNameToMetaVictims":{"n":{"Pods":null,"NumPDBViolations":0}}}"#,
        )
        .unwrap();
        assert!(
            v.node_name_to_meta_victims.unwrap()["n"]
                .as_ref()
                .unwrap()
                .pods
                .is_empty()
        );
        let q: ResourceList = serde_json::from_str(r#"{"cpu":2,"memory":"1Gi"}"#).unwrap();
        assert_eq!(q["cpu"].0, "2");
        assert!(serde_json::from_str::<ResourceList>(r#"{"cpu":true}"#).is_err());
    }
}
