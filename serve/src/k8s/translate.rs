//! From Kubernetes objects to the service's snapshot types: a Node becomes a `proto::Node`, the
//! Pod being scheduled one pending `proto::Job`. Every error names the field at fault
//! (`Pod.spec.containers[1].resources.requests.memory: "12Qi" is not a quantity (...)`).
//!
//! Knows nothing of HTTP or of the decision path.

use super::quantity::Quantity;
use super::types::{Container, Node, Pod, ResourceList};
use crate::config::KubernetesConfig;
use crate::proto;
use lachesis_env::constraint::{Constraints, LabelTerm, is_label_key};
use lachesis_env::units::GPU_MILLI;
use std::collections::BTreeMap;

/// Annotation: the pod's share of its one GPU, milli-GPU (1-1000).
pub const GPU_MILLI_ANNOTATION: &str = "lachesis.io/gpu-milli";
/// Annotation: GPU models the pod may run on, comma-separated.
pub const GPU_TYPES_ANNOTATION: &str = "lachesis.io/gpu-types";
/// Annotation: `"true"` if the pod may be preempted by the service's decisions.
pub const PREEMPTIBLE_ANNOTATION: &str = "lachesis.io/preemptible";
/// Annotation: the pod's workload type in the service's throughput table (`Job.workload`).
pub const WORKLOAD_ANNOTATION: &str = "lachesis.io/workload";
/// The model given to a GPU node that carries none of the model labels.
pub const UNLABELLED_GPU_MODEL: &str = "unlabelled";

/// Input the extender cannot use: which field, and why. Becomes the `Error` of a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

pub fn field_error(path: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        path: path.into(),
        message: message.into(),
    }
}

/// A GPU model name as Kubernetes labels spell it, in the form the service matches on: see
/// `crate::gpu_model::normalise`, the one rule the node probe uses too. Node labels, node
/// selectors, the `lachesis.io/gpu-types` annotation and inventory reports all pass through
/// here, so they match each other.
pub fn normalise_gpu_model(raw: &str) -> String {
    crate::gpu_model::normalise(raw)
}

fn quantity(list: &ResourceList, key: &str, path: &str) -> Result<Option<Quantity>, FieldError> {
    let Some(text) = list.get(key) else {
        return Ok(None);
    };
    let path = format!("{path}.{key}");
    let q = Quantity::parse(&text.0).map_err(|e| field_error(&path, e.to_string()))?;
    if q.is_negative() {
        return Err(field_error(path, format!("{:?} is negative", text.0)));
    }
    Ok(Some(q))
}

fn too_large(path: &str, text: &str) -> FieldError {
    field_error(path, format!("{text:?} is too large"))
}

/// What one container (or the overhead) asks for, in the service's units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Request {
    cpu_milli: u64,
    mem_mib: u64,
    gpus: u64,
}

impl Request {
    fn plus(self, o: Request) -> Request {
        Request {
            cpu_milli: self.cpu_milli.saturating_add(o.cpu_milli),
            mem_mib: self.mem_mib.saturating_add(o.mem_mib),
            gpus: self.gpus.saturating_add(o.gpus),
        }
    }
    fn max(self, o: Request) -> Request {
        Request {
            cpu_milli: self.cpu_milli.max(o.cpu_milli),
            mem_mib: self.mem_mib.max(o.mem_mib),
            gpus: self.gpus.max(o.gpus),
        }
    }
}

/// A resource list read as a request (rounded up: never ask for less than written).
fn request_of(list: &ResourceList, path: &str, gpu: &str) -> Result<Request, FieldError> {
    let mut r = Request::default();
    if let Some(q) = quantity(list, "cpu", path)? {
        r.cpu_milli = q
            .milli_ceil()
            .ok_or_else(|| too_large(&format!("{path}.cpu"), &list["cpu"].0))?;
    }
    if let Some(q) = quantity(list, "memory", path)? {
        r.mem_mib = q
            .mib_ceil()
            .ok_or_else(|| too_large(&format!("{path}.memory"), &list["memory"].0))?;
    }
    if let Some(q) = quantity(list, gpu, path)? {
        r.gpus = q.whole().ok_or_else(|| {
            field_error(
                format!("{path}.{gpu}"),
                format!("{:?} is not a whole number of devices", list[gpu].0),
            )
        })?;
    }
    Ok(r)
}

/// A container's request per resource: its request, or its limit where no request is given
/// (the API server defaults requests to limits; extended resources have them equal).
fn container_request(c: &Container, path: &str, gpu: &str) -> Result<Request, FieldError> {
    let req = request_of(
        &c.resources.requests,
        &format!("{path}.resources.requests"),
        gpu,
    )?;
    let lim = request_of(
        &c.resources.limits,
        &format!("{path}.resources.limits"),
        gpu,
    )?;
    let pick = |given: bool, r: u64, l: u64| if given { r } else { l };
    let has = |k: &str| c.resources.requests.contains_key(k);
    Ok(Request {
        cpu_milli: pick(has("cpu"), req.cpu_milli, lim.cpu_milli),
        mem_mib: pick(has("memory"), req.mem_mib, lim.mem_mib),
        gpus: pick(has(gpu), req.gpus, lim.gpus),
    })
}

/// The pod's effective request, as kube-scheduler computes it: the larger of the app
/// containers' sum and each init container's peak (init containers run one at a time; a
/// sidecar, an init container with `restartPolicy: Always`, keeps running and adds to both),
/// plus the pod overhead.
fn pod_request(pod: &Pod, gpu: &str) -> Result<Request, FieldError> {
    let mut sum = Request::default();
    for (i, c) in pod.spec.containers.iter().enumerate() {
        sum = sum.plus(container_request(
            c,
            &format!("Pod.spec.containers[{i}]"),
            gpu,
        )?);
    }
    let mut sidecars = Request::default();
    let mut init_peak = Request::default();
    for (i, c) in pod.spec.init_containers.iter().enumerate() {
        let r = container_request(c, &format!("Pod.spec.initContainers[{i}]"), gpu)?;
        let during = if c.restart_policy.as_deref() == Some("Always") {
            sum = sum.plus(r);
            sidecars = sidecars.plus(r);
            sidecars
        } else {
            r.plus(sidecars)
        };
        init_peak = init_peak.max(during);
    }
    let overhead = request_of(&pod.spec.overhead, "Pod.spec.overhead", gpu)?;
    Ok(sum.max(init_peak).plus(overhead))
}

/// The pod's name as the snapshot's job id: `namespace/name` (the UID if that is too long).
pub fn pod_key(pod: &Pod) -> String {
    let ns = namespace(pod);
    let key = format!("{ns}/{}", pod.metadata.name);
    if key.len() <= crate::world::MAX_NAME_BYTES || pod.metadata.uid.is_empty() {
        key
    } else {
        pod.metadata.uid.clone()
    }
}

fn namespace(pod: &Pod) -> &str {
    match pod.metadata.namespace.as_str() {
        "" => "default",
        ns => ns,
    }
}

/// The allowed GPU models of a pod: its node selector on a GPU-model label, and the
/// `lachesis.io/gpu-types` annotation; both given, the models they agree on.
fn pod_gpu_types(pod: &Pod, cfg: &KubernetesConfig) -> Result<Vec<String>, FieldError> {
    let selected: Option<(String, String)> = cfg.gpu_model_labels.iter().find_map(|k| {
        pod.spec
            .node_selector
            .get(k)
            .map(|v| (k.clone(), normalise_gpu_model(v)))
    });
    let annotated: Option<Vec<String>> =
        pod.metadata.annotations.get(GPU_TYPES_ANNOTATION).map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(normalise_gpu_model)
                .collect()
        });
    let path = format!("Pod.metadata.annotations[{GPU_TYPES_ANNOTATION}]");
    match (selected, annotated) {
        (None, None) => Ok(Vec::new()),
        (Some((_, m)), None) => Ok(vec![m]),
        (None, Some(types)) if types.is_empty() => Err(field_error(
            path,
            "names no GPU model (comma-separated names)",
        )),
        (None, Some(types)) => Ok(types),
        (Some((key, m)), Some(types)) => {
            if types.iter().any(|t| t.eq_ignore_ascii_case(&m)) {
                Ok(vec![m])
            } else {
                Err(field_error(
                    path,
                    format!(
                        "lists {} but the pod's nodeSelector {key}={m} asks for another model",
                        types.join(",")
                    ),
                ))
            }
        }
    }
}

/// The pod being scheduled as one pending job of a snapshot taken at `now_unix_ms`.
pub fn pod_to_job(
    pod: &Pod,
    cfg: &KubernetesConfig,
    now_unix_ms: u64,
) -> Result<proto::Job, FieldError> {
    if pod.metadata.name.trim().is_empty() {
        return Err(field_error("Pod.metadata.name", "missing"));
    }
    let r = pod_request(pod, &cfg.gpu_resource)?;
    let annotations = &pod.metadata.annotations;
    let gpus_path = format!(
        "Pod.spec.containers[*].resources.requests.{}",
        cfg.gpu_resource
    );
    let (gpus, gpu_milli) = match annotations.get(GPU_MILLI_ANNOTATION) {
        None => (r.gpus, 0),
        Some(text) => {
            let path = format!("Pod.metadata.annotations[{GPU_MILLI_ANNOTATION}]");
            let m: u32 = text
                .trim()
                .parse()
                .ok()
                .filter(|m| (1..=GPU_MILLI).contains(m))
                .ok_or_else(|| {
                    field_error(&path, format!("{text:?} is not a share of 1-{GPU_MILLI}"))
                })?;
            match r.gpus {
                // A share of one GPU: the pod asks for none through the device plugin.
                0 | 1 => (1, if m == GPU_MILLI { 0 } else { m }),
                n => {
                    return Err(field_error(
                        path,
                        format!("a GPU share is for a pod of one GPU; this one requests {n}"),
                    ));
                }
            }
        }
    };
    let gpus_per_task = u32::try_from(gpus)
        .map_err(|_| field_error(&gpus_path, format!("{gpus} GPUs is too many")))?;
    let preemptible = match annotations.get(PREEMPTIBLE_ANNOTATION).map(|s| s.trim()) {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        Some(v) => {
            return Err(field_error(
                format!("Pod.metadata.annotations[{PREEMPTIBLE_ANNOTATION}]"),
                format!("{v:?} is not true or false"),
            ));
        }
    };
    let wait_ms = match &pod.metadata.creation_timestamp {
        None => 0,
        Some(t) => {
            let created = parse_rfc3339_ms(t).ok_or_else(|| {
                field_error(
                    "Pod.metadata.creationTimestamp",
                    format!("{t:?} is not an RFC 3339 time"),
                )
            })?;
            u64::try_from(i128::from(now_unix_ms) - created).unwrap_or(0)
        }
    };
    Ok(proto::Job {
        id: pod_key(pod),
        tenant: namespace(pod).to_string(),
        priority: pod.spec.priority.unwrap_or(0),
        preemptible,
        tasks: 1,
        gpus_per_task,
        gpu_milli,
        cpu_milli: r.cpu_milli,
        mem_mib: r.mem_mib,
        gpu_types: pod_gpu_types(pod, cfg)?,
        wait_ms,
        constraints: pod_constraints(pod).label_text(),
        workload: annotations
            .get(WORKLOAD_ANNOTATION)
            .map_or_else(String::new, |w| w.trim().to_string()),
        ..Default::default()
    })
}

/// The pod's `nodeSelector` and required node affinity as label constraints: each affinity
/// term (ORed) ANDed with the selector. `In`, `NotIn`, `Exists` and `DoesNotExist` are
/// carried; `Gt`, `Lt`, `matchFields` and keys or values the constraint text cannot carry are
/// left out. Leaving one out only widens the set, and kube-scheduler's own NodeAffinity
/// filter has already removed the nodes they exclude from the candidates it sends, so the
/// service still never chooses a node the pod may not use.
pub fn pod_constraints(pod: &Pod) -> Constraints {
    let plain = |s: &str| is_label_key(s);
    let value_ok = |v: &String| v.is_empty() || plain(v);
    let selector: Vec<LabelTerm> = pod
        .spec
        .node_selector
        .iter()
        .filter(|(k, v)| plain(k) && value_ok(v))
        .map(|(k, v)| LabelTerm::In {
            key: k.clone(),
            values: vec![v.clone()],
        })
        .collect();
    let mut c = Constraints::default();
    if let Some(required) = &pod
        .spec
        .affinity
        .node_affinity
        .required_during_scheduling_ignored_during_execution
    {
        for term in &required.node_selector_terms {
            let all: Vec<LabelTerm> = term
                .match_expressions
                .iter()
                .filter(|r| plain(&r.key) && r.values.iter().all(value_ok))
                .filter_map(|r| {
                    let (key, values) = (r.key.clone(), r.values.clone());
                    match r.operator.as_str() {
                        "In" => Some(LabelTerm::In { key, values }),
                        "NotIn" => Some(LabelTerm::NotIn { key, values }),
                        "Exists" => Some(LabelTerm::Exists { key }),
                        "DoesNotExist" => Some(LabelTerm::DoesNotExist { key }),
                        _ => None,
                    }
                })
                .collect();
            if all.is_empty() {
                // A term that constrains nothing we carry admits every node: so does the OR.
                c.any_of.clear();
                break;
            }
            c.any_of.push(all);
        }
    }
    c.and_all(&selector);
    c
}

/// A node object as a snapshot node with nothing known to be in use (kube-scheduler sends no
/// pods); `path` names it in errors (`Nodes.items[3]`).
pub fn node_to_proto(
    node: &Node,
    cfg: &KubernetesConfig,
    path: &str,
) -> Result<proto::Node, FieldError> {
    let name = node.metadata.name.trim();
    if name.is_empty() {
        return Err(field_error(format!("{path}.metadata.name"), "missing"));
    }
    let alloc = &node.status.allocatable;
    let apath = format!("{path}.status.allocatable");
    let gpus = match quantity(alloc, &cfg.gpu_resource, &apath)? {
        None => 0,
        Some(q) => {
            let p = format!("{apath}.{}", cfg.gpu_resource);
            let n = q.whole().ok_or_else(|| {
                field_error(
                    &p,
                    format!(
                        "{:?} is not a whole number of devices",
                        alloc[&cfg.gpu_resource].0
                    ),
                )
            })?;
            u32::try_from(n).map_err(|_| too_large(&p, &alloc[&cfg.gpu_resource].0))?
        }
    };
    let cpu_milli = match quantity(alloc, "cpu", &apath)? {
        None => 0,
        Some(q) => q
            .milli_floor()
            .ok_or_else(|| too_large(&format!("{apath}.cpu"), &alloc["cpu"].0))?,
    };
    let mem_mib = match quantity(alloc, "memory", &apath)? {
        None => 0,
        Some(q) => q
            .mib_floor()
            .ok_or_else(|| too_large(&format!("{apath}.memory"), &alloc["memory"].0))?,
    };
    let gpu_model = if gpus == 0 {
        String::new()
    } else {
        node_gpu_model(&node.metadata.labels, cfg).unwrap_or_else(|| UNLABELLED_GPU_MODEL.into())
    };
    Ok(proto::Node {
        name: name.to_string(),
        gpu_model,
        gpus,
        cpu_milli,
        mem_mib,
        // Every label, for pods' selectors and affinity (the service keeps only those some
        // pod selects on where there are too many distinct sets).
        labels: node
            .metadata
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        ..Default::default()
    })
}

/// The node's GPU model from the first configured label it carries.
fn node_gpu_model(labels: &BTreeMap<String, String>, cfg: &KubernetesConfig) -> Option<String> {
    cfg.gpu_model_labels
        .iter()
        .filter_map(|k| labels.get(k))
        .map(|v| normalise_gpu_model(v))
        .find(|v| !v.is_empty())
}

/// Takes what a node agent's fresh report knows and the node object does not: the free share
/// of each GPU, free CPU and memory (kept within the object's capacity), and the GPU model
/// when no label names it. A report whose GPU count differs says nothing about these GPUs.
pub fn overlay_report(node: &mut proto::Node, report: &proto::Node) {
    if report.gpus == node.gpus && report.gpu_free_milli.len() == node.gpus as usize {
        node.gpu_free_milli = report.gpu_free_milli.clone();
    }
    if node.gpu_model == UNLABELLED_GPU_MODEL && !report.gpu_model.trim().is_empty() {
        node.gpu_model = normalise_gpu_model(&report.gpu_model);
    }
    node.cpu_free_milli = report.cpu_free_milli.map(|f| f.min(node.cpu_milli));
    node.mem_free_mib = report.mem_free_mib.map(|f| f.min(node.mem_mib));
}

/// Milliseconds since the Unix epoch of an RFC 3339 time (`2024-05-01T10:00:00Z`,
/// `2024-05-01T12:00:00.5+02:00`); `None` if it is not one.
pub fn parse_rfc3339_ms(text: &str) -> Option<i128> {
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let s = text.get(from..from + len)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if day < 1 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let frac = &text[start..i.min(start + 3)];
        millis = frac.parse::<i64>().ok()? * 10i64.pow(3 - frac.len() as u32);
    }
    let offset_min = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let (h, m) = (num(i + 1, 2)?, num(i + 4, 2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let off = h * 60 + m;
            if *sign == b'-' { -off } else { off }
        }
        _ => return None,
    };
    // Days since 1970-01-01 (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_min * 60;
    Some(i128::from(seconds) * 1000 + i128::from(millis))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::k8s::types::QuantityText;

    fn cfg() -> KubernetesConfig {
        KubernetesConfig::default()
    }

    fn list(pairs: &[(&str, &str)]) -> ResourceList {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), QuantityText(v.to_string())))
            .collect()
    }

    fn container(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        Container {
            resources: super::super::types::Resources {
                requests: list(requests),
                limits: list(limits),
            },
            ..Default::default()
        }
    }

    fn pod(containers: Vec<Container>, init: Vec<Container>) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = "p".into();
        p.metadata.namespace = "team-a".into();
        p.spec.containers = containers;
        p.spec.init_containers = init;
        p
    }

    #[test]
    fn gpu_model_names_from_labels() {
        let table = [
            ("NVIDIA-A100-SXM4-80GB", "A100"),
            ("NVIDIA-A100-PCIE-40GB", "A100"),
            ("Tesla-V100-SXM2-16GB", "V100"),
            ("NVIDIA-H100-80GB-HBM3", "H100"),
            ("NVIDIA-H200", "H200"),
            ("Tesla-T4", "T4"),
            ("NVIDIA A10", "A10"),
            ("NVIDIA-A10G", "A10G"), // unknown: kept as is (A10 needs a dash after it)
            ("h100", "H100"),
            ("NVIDIA", "NVIDIA"),
        ];
        for (label, model) in table {
            assert_eq!(normalise_gpu_model(label), model, "{label}");
        }
    }

    #[test]
    fn effective_request_is_max_of_app_sum_and_init_peak_plus_overhead() {
        // app: 1 + 0.5 CPU = 1500m, 1Gi + 512Mi = 1536 MiB, 2 GPUs (from limits only)
        // init: 2 CPU, 256Mi; sidecar: 100m, 64Mi (adds to the app sum: 1600m, 1600 MiB)
        // overhead: 250m, 128Mi
        // -> CPU max(1600, 2000 + 100) + 250 = 2350; mem max(1600, 256 + 64) + 128 = 1728
        let mut sidecar = container(&[("cpu", "100m"), ("memory", "64Mi")], &[]);
        sidecar.restart_policy = Some("Always".into());
        let mut p = pod(
            vec![
                container(
                    &[("cpu", "1"), ("memory", "1Gi")],
                    &[("nvidia.com/gpu", "2")],
                ),
                container(&[("cpu", "500m"), ("memory", "512Mi")], &[]),
            ],
            vec![
                sidecar,
                container(&[("cpu", "2"), ("memory", "256Mi")], &[]),
            ],
        );
        p.spec.overhead = list(&[("cpu", "250m"), ("memory", "128Mi")]);
        let job = pod_to_job(&p, &cfg(), 0).unwrap();
        assert_eq!(
            (job.cpu_milli, job.mem_mib, job.gpus_per_task),
            (2350, 1728, 2)
        );
        assert_eq!(
            (job.id.as_str(), job.tenant.as_str()),
            ("team-a/p", "team-a")
        );
    }

    #[test]
    fn errors_name_the_field() {
        let p = pod(
            vec![
                container(&[("cpu", "1")], &[]),
                container(&[("memory", "12Qi")], &[]),
            ],
            vec![],
        );
        let e = pod_to_job(&p, &cfg(), 0).unwrap_err();
        assert_eq!(e.path, "Pod.spec.containers[1].resources.requests.memory");
        assert!(e.message.contains("\"12Qi\" is not a quantity"), "{e}");

        let p = pod(vec![container(&[("nvidia.com/gpu", "500m")], &[])], vec![]);
        let e = pod_to_job(&p, &cfg(), 0).unwrap_err();
        assert!(e.to_string().contains("not a whole number"), "{e}");

        let p = pod(vec![container(&[("cpu", "-1")], &[])], vec![]);
        assert!(
            pod_to_job(&p, &cfg(), 0)
                .unwrap_err()
                .message
                .contains("negative")
        );

        let mut p = pod(vec![container(&[("nvidia.com/gpu", "2")], &[])], vec![]);
        p.metadata
            .annotations
            .insert(GPU_MILLI_ANNOTATION.into(), "500".into());
        let e = pod_to_job(&p, &cfg(), 0).unwrap_err();
        assert!(e.path.contains(GPU_MILLI_ANNOTATION), "{e}");
    }

    #[test]
    fn annotations_and_selector() {
        let mut p = pod(vec![container(&[("nvidia.com/gpu", "1")], &[])], vec![]);
        p.metadata
            .annotations
            .insert(GPU_MILLI_ANNOTATION.into(), "250".into());
        p.metadata
            .annotations
            .insert(PREEMPTIBLE_ANNOTATION.into(), "true".into());
        p.spec.node_selector.insert(
            "nvidia.com/gpu.product".into(),
            "NVIDIA-H100-80GB-HBM3".into(),
        );
        p.spec.priority = Some(7);
        let job = pod_to_job(&p, &cfg(), 0).unwrap();
        assert_eq!((job.gpus_per_task, job.gpu_milli), (1, 250));
        assert!(job.preemptible);
        assert_eq!(job.priority, 7);
        assert_eq!(job.gpu_types, ["H100"]);
        assert_eq!(job.workload, "");
        p.metadata
            .annotations
            .insert(WORKLOAD_ANNOTATION.into(), " LM (batch size 20) ".into());
        assert_eq!(
            pod_to_job(&p, &cfg(), 0).unwrap().workload,
            "LM (batch size 20)"
        );

        p.metadata
            .annotations
            .insert(GPU_TYPES_ANNOTATION.into(), "A100, h100".into());
        assert_eq!(pod_to_job(&p, &cfg(), 0).unwrap().gpu_types, ["H100"]);
        p.metadata
            .annotations
            .insert(GPU_TYPES_ANNOTATION.into(), "A100".into());
        assert!(pod_to_job(&p, &cfg(), 0).is_err());
        p.spec.node_selector.clear();
        assert_eq!(pod_to_job(&p, &cfg(), 0).unwrap().gpu_types, ["A100"]);
    }

    #[test]
    fn wait_from_creation_time() {
        let mut p = pod(vec![], vec![]);
        p.metadata.creation_timestamp = Some("2024-05-01T10:00:00Z".into());
        let created = parse_rfc3339_ms("2024-05-01T10:00:00Z").unwrap() as u64;
        assert_eq!(
            pod_to_job(&p, &cfg(), created + 4500).unwrap().wait_ms,
            4500
        );
        // A clock behind the creation time waits 0, not a wrap.
        assert_eq!(pod_to_job(&p, &cfg(), created - 10).unwrap().wait_ms, 0);
        p.metadata.creation_timestamp = Some("yesterday".into());
        assert!(pod_to_job(&p, &cfg(), created).is_err());
    }

    #[test]
    fn rfc3339() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ms("2000-03-01T00:00:00Z"),
            Some(951_868_800_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2024-05-01T12:00:00.250+02:00"),
            Some(1_714_557_600_250)
        );
        for bad in [
            "",
            "2024-02-30T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-05-01T24:00:00Z",
            "2024-05-01T10:00:00",
            "2024-05-01T10:00:00.Z",
            "2024-05-01T10:00:00+0200",
            "2024-5-01T10:00:00Z",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn nodes() {
        let mut n = Node::default();
        n.metadata.name = "gpu-1".into();
        n.metadata.labels.insert(
            "nvidia.com/gpu.product".into(),
            "NVIDIA-A100-SXM4-80GB".into(),
        );
        n.status.allocatable = list(&[
            ("cpu", "63900m"),
            ("memory", "515000Mi"),
            ("nvidia.com/gpu", "8"),
            ("pods", "110"),
        ]);
        let p = node_to_proto(&n, &cfg(), "Nodes.items[0]").unwrap();
        assert_eq!(
            (p.gpus, p.gpu_model.as_str(), p.cpu_milli, p.mem_mib),
            (8, "A100", 63_900, 515_000)
        );
        n.metadata.labels.clear();
        assert_eq!(
            node_to_proto(&n, &cfg(), "x").unwrap().gpu_model,
            UNLABELLED_GPU_MODEL
        );
        n.status.allocatable = list(&[("cpu", "lots")]);
        let e = node_to_proto(&n, &cfg(), "Nodes.items[2]").unwrap_err();
        assert_eq!(e.path, "Nodes.items[2].status.allocatable.cpu");

        let mut node = proto::Node {
            gpus: 2,
            gpu_model: UNLABELLED_GPU_MODEL.into(),
            cpu_milli: 1000,
            ..Default::default()
        };
        let report = proto::Node {
            gpus: 2,
            gpu_model: "NVIDIA-H100-80GB-HBM3".into(),
            gpu_free_milli: vec![1000, 250],
            cpu_free_milli: Some(5000),
            ..Default::default()
        };
        overlay_report(&mut node, &report);
        assert_eq!(node.gpu_free_milli, [1000, 250]);
        assert_eq!(node.gpu_model, "H100");
        assert_eq!(node.cpu_free_milli, Some(1000), "kept within capacity");
    }
}
