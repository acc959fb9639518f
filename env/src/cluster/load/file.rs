//! The TOML cluster file (format in docs/cluster-file.md): optional `[[gpu_models]]` that define
//! or override catalog models, and `[[nodes]]` entries of one or more identical nodes.
//!
//! Every error names the file, line, column and field; unknown fields are rejected.

use super::ClusterLoadError;
use super::builder::{ClusterBuilder, DEFAULT_RACK_SIZE, NodeShape, NvlinkScope, Rejected};
use crate::cluster::ClusterSpec;
use crate::constraint::NodeLabels;
use crate::gpu::GpuModel;
use serde::Deserialize;
use std::ops::Range;
use std::path::Path;
use toml::Spanned;

/// Largest cluster file read, bytes (16 MiB; a million-node file is far smaller as groups).
pub const MAX_CLUSTER_FILE_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    /// Cluster name for reports; default: the file name without extension.
    name: Option<Spanned<String>>,
    /// Nodes per automatic rack.
    rack_size: Option<Spanned<u32>>,
    #[serde(default)]
    gpu_models: Vec<Spanned<ModelEntry>>,
    #[serde(default)]
    nodes: Vec<Spanned<NodeEntry>>,
}

/// A new GPU model (every value required) or an override of a catalog model (values optional).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelEntry {
    name: Spanned<String>,
    speed: Option<f64>,
    mem_gib: Option<u32>,
    idle_watts: Option<f64>,
    busy_watts: Option<f64>,
}

/// `count` identical nodes (default 1).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeEntry {
    count: Option<Spanned<u64>>,
    /// Exact name; only with `count = 1`.
    name: Option<Spanned<String>>,
    /// Generated names `{prefix}0000`, `{prefix}0001`, ...
    name_prefix: Option<Spanned<String>>,
    gpus: Spanned<u32>,
    gpu_model: Option<Spanned<String>>,
    cpu_milli: Option<Spanned<u64>>,
    mem_mib: Option<Spanned<u64>>,
    rack: Option<Spanned<String>>,
    nvlink_domain: Option<Spanned<NvlinkScope>>,
    /// Node labels, `key = "value"` (a Slurm-style feature: an empty value).
    labels: Option<Spanned<NodeLabels>>,
}

impl NodeEntry {
    /// Where `field` is written, if it is.
    fn span_of(&self, field: &str) -> Option<Range<usize>> {
        match field {
            "count" => self.count.as_ref().map(Spanned::span),
            "name" => self.name.as_ref().map(Spanned::span),
            "name_prefix" => self.name_prefix.as_ref().map(Spanned::span),
            "gpus" => Some(self.gpus.span()),
            "gpu_model" => self.gpu_model.as_ref().map(Spanned::span),
            "cpu_milli" => self.cpu_milli.as_ref().map(Spanned::span),
            "mem_mib" => self.mem_mib.as_ref().map(Spanned::span),
            "rack" => self.rack.as_ref().map(Spanned::span),
            "labels" => self.labels.as_ref().map(Spanned::span),
            _ => None,
        }
    }

    fn shape(&self) -> NodeShape<'_> {
        NodeShape {
            gpus: *self.gpus.get_ref(),
            gpu_model: self.gpu_model.as_ref().map(|m| m.get_ref().as_str()),
            cpu_milli: self.cpu_milli.as_ref().map(|c| *c.get_ref()),
            mem_mib: self.mem_mib.as_ref().map(|m| *m.get_ref()),
            rack: self.rack.as_ref().map(|r| r.get_ref().as_str()),
            nvlink: self
                .nvlink_domain
                .as_ref()
                .map_or(NvlinkScope::Node, |d| *d.get_ref()),
            labels: self.labels.as_ref().map(Spanned::get_ref),
        }
    }
}

/// Reads and parses the cluster file at `path` (`arg` as the user wrote it, for messages).
pub(super) fn load_cluster_file(path: &Path, arg: &str) -> Result<ClusterSpec, ClusterLoadError> {
    let unreadable = |message: String| ClusterLoadError::Unreadable {
        path: arg.to_string(),
        message,
    };
    let meta = std::fs::metadata(path).map_err(|e| ClusterLoadError::Unresolved {
        arg: arg.to_string(),
        reason: e.to_string(),
    })?;
    if !meta.is_file() {
        return Err(unreadable("not a regular file".into()));
    }
    if meta.len() > MAX_CLUSTER_FILE_BYTES {
        return Err(unreadable(format!(
            "{} bytes, more than the {MAX_CLUSTER_FILE_BYTES} a cluster file may have",
            meta.len()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| unreadable(e.to_string()))?;
    parse_cluster_toml(&text, arg)
}

/// Parses a TOML cluster file's text; `origin` (usually the path) names it in errors and, without
/// a `name` key, gives the cluster its name (the file name without extension).
///
/// ```
/// use lachesis_env::cluster::parse_cluster_toml;
/// let text = "[[nodes]]\ncount = 2\ngpus = 8\ngpu_model = \"H100\"\n";
/// let spec = parse_cluster_toml(text, "lab/small.toml").unwrap();
/// assert_eq!((spec.name.as_str(), spec.total_gpus()), ("small", 16));
/// let err = parse_cluster_toml("[[nodes]]\ngpus = -1\n", "bad.toml").unwrap_err();
/// assert!(err.to_string().starts_with("bad.toml:2:8: nodes[0].gpus:"), "{err}");
/// ```
pub fn parse_cluster_toml(text: &str, origin: &str) -> Result<ClusterSpec, ClusterLoadError> {
    let source = Source { text, origin };
    let file: ClusterFile = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        let field = field_at(text, span.start);
        source.at(span, field, e.message().trim().to_string())
    })?;
    let rack_size = match &file.rack_size {
        Some(r) if *r.get_ref() == 0 => {
            return Err(source.at(r.span(), "rack_size".into(), "must be at least 1".into()));
        }
        Some(r) => *r.get_ref(),
        None => DEFAULT_RACK_SIZE,
    };
    let mut builder = ClusterBuilder::new(rack_size);
    define_models(&mut builder, &file.gpu_models, &source)?;
    add_nodes(&mut builder, &file.nodes, &source)?;
    let name = match &file.name {
        Some(n) if n.get_ref().trim().is_empty() => {
            let message = "cluster name is empty".into();
            return Err(source.at(n.span(), "name".into(), message));
        }
        Some(n) => n.get_ref().trim().to_string(),
        None => Path::new(origin)
            .file_stem()
            .map_or(origin.to_string(), |s| s.to_string_lossy().into_owned()),
    };
    builder
        .build(&name)
        .map_err(|error| ClusterLoadError::Cluster {
            origin: origin.to_string(),
            error,
        })
}

/// The file's text and name, to turn a byte span into a located error.
struct Source<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Source<'_> {
    fn at(&self, span: Range<usize>, field: String, message: String) -> ClusterLoadError {
        let (line, column) = line_column(self.text, span.start);
        ClusterLoadError::Invalid {
            origin: self.origin.to_string(),
            line,
            column: Some(column),
            field,
            message,
        }
    }
}

fn define_models(
    builder: &mut ClusterBuilder,
    entries: &[Spanned<ModelEntry>],
    source: &Source<'_>,
) -> Result<(), ClusterLoadError> {
    let mut defined: Vec<&str> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let name = entry.get_ref().name.get_ref().trim();
        if defined.iter().any(|d| d.eq_ignore_ascii_case(name)) {
            let message = format!("GPU model `{name}` is defined twice");
            let field = format!("gpu_models[{i}].name");
            return Err(source.at(entry.get_ref().name.span(), field, message));
        }
        defined.push(name);
        let model = gpu_model(entry.get_ref())
            .map_err(|m| source.at(entry.span(), format!("gpu_models[{i}]"), m))?;
        builder.define_model(model);
    }
    Ok(())
}

fn add_nodes(
    builder: &mut ClusterBuilder,
    entries: &[Spanned<NodeEntry>],
    source: &Source<'_>,
) -> Result<(), ClusterLoadError> {
    if entries.is_empty() {
        let message = "no [[nodes]] entries; a cluster needs at least one node".to_string();
        return Err(source.at(0..0, "nodes".into(), message));
    }
    for (i, entry) in entries.iter().enumerate() {
        let node = entry.get_ref();
        let at = |span: Range<usize>, field: &str, message: String| {
            source.at(span, format!("nodes[{i}].{field}"), message)
        };
        let reject = |r: Rejected| {
            let span = node.span_of(r.field).unwrap_or(entry.span());
            at(span, r.field, r.message)
        };
        let count = node.count.as_ref().map_or(1, |c| *c.get_ref());
        match (&node.name, &node.name_prefix) {
            (Some(_), Some(prefix)) => {
                let message = "give either `name` (one node) or `name_prefix`, not both";
                return Err(at(prefix.span(), "name_prefix", message.into()));
            }
            (Some(name), None) if count == 1 => builder
                .add_node(name.get_ref(), &node.shape())
                .map_err(reject)?,
            (Some(name), None) => {
                let message = format!(
                    "`name` names a single node but count = {count}; use `name_prefix` for \
                     several"
                );
                return Err(at(name.span(), "name", message));
            }
            (None, prefix) => {
                let prefix = prefix.as_ref().map(|p| p.get_ref().as_str());
                builder
                    .add_group(count, prefix, &node.shape())
                    .map_err(reject)?
            }
        }
    }
    Ok(())
}

/// The model an entry describes: the catalog's values overridden by those given, or, for a model
/// the catalog does not know, exactly the values given (all required).
fn gpu_model(entry: &ModelEntry) -> Result<GpuModel, String> {
    let name = entry.name.get_ref().trim();
    let model = match GpuModel::from_catalog(name) {
        Some(base) => GpuModel {
            name: name.to_string(),
            speed: entry.speed.unwrap_or(base.speed),
            mem_gib: entry.mem_gib.unwrap_or(base.mem_gib),
            idle_watts: entry.idle_watts.unwrap_or(base.idle_watts),
            busy_watts: entry.busy_watts.unwrap_or(base.busy_watts),
        },
        None => match (
            entry.speed,
            entry.mem_gib,
            entry.idle_watts,
            entry.busy_watts,
        ) {
            (Some(speed), Some(mem_gib), Some(idle_watts), Some(busy_watts)) => GpuModel {
                name: name.to_string(),
                speed,
                mem_gib,
                idle_watts,
                busy_watts,
            },
            _ => {
                return Err(format!(
                    "GPU model `{name}` is not in the catalog, so speed, mem_gib, idle_watts \
                     and busy_watts are all required"
                ));
            }
        },
    };
    model.validate()?;
    Ok(model)
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line_start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}

/// Best-effort field path at byte `offset` for TOML's own errors: the table the offset is in
/// (`nodes[2]`, counting `[[nodes]]` headers; `queue[1].preemption` for a table below the
/// last `[[queue]]`) and the key on its line, e.g. `nodes[2].gpus`.
pub(crate) fn field_at(text: &str, offset: usize) -> String {
    let (line_no, _) = line_column(text, offset);
    let mut table = String::new();
    let mut arrays: Vec<(String, usize)> = Vec::new();
    let mut key = None;
    for (i, line) in text.lines().take(line_no).enumerate() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix("[[").and_then(|l| l.split_once("]]")) {
            let name = name.0.trim().to_string();
            let index = match arrays.iter_mut().find(|(n, _)| *n == name) {
                Some((_, count)) => {
                    *count += 1;
                    *count - 1
                }
                None => {
                    arrays.push((name.clone(), 1));
                    0
                }
            };
            table = format!("{name}[{index}]");
        } else if let Some(name) = line.strip_prefix('[').and_then(|l| l.split_once(']')) {
            let name = name.0.trim();
            // A sub-table of the last entry of an array of tables: `queue[1].preemption`.
            let parent = arrays.iter().find_map(|(n, count)| {
                let rest = name.strip_prefix(n.as_str())?.strip_prefix('.')?;
                Some(format!("{n}[{}].{rest}", count - 1))
            });
            table = parent.unwrap_or_else(|| name.to_string());
        } else if i + 1 == line_no {
            key = line
                .split_once('=')
                .map(|(k, _)| k.trim().trim_matches('"').to_string());
        }
    }
    match (table.is_empty(), key) {
        (true, None) => "(top level)".to_string(),
        (true, Some(key)) => key,
        (false, None) => table,
        (false, Some(key)) => format!("{table}.{key}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        parse_cluster_toml(text, "c.toml").unwrap_err().to_string()
    }

    #[test]
    fn the_example_file_parses() {
        let text = include_str!("../../../../traces/clusters/example.toml");
        let spec = parse_cluster_toml(text, "example.toml").unwrap();
        assert_eq!(spec.name, "lab");
        assert_eq!(
            spec.describe(),
            "24 nodes, 168 GPUs (A100 x 128, B200 x 16, H100 x 16, T4 x 8)"
        );
        let racks = [
            "a100-rack-000",
            "a100-rack-001",
            "row2",
            "nvl-rack",
            "t4-rack-000",
        ];
        assert_eq!(spec.racks, [&racks[..], &["cpu-rack-000"]].concat());
        // 16 + 2 + 2 + 2 nodes with their own domain; the two B200 servers share one.
        assert_eq!(spec.nvlink_domains.len(), 16 + 2 + 1 + 2 + 2);
        assert_eq!(spec.models[0].speed, 2.0, "A100 override");
        let t4 = &spec.nodes[20];
        assert_eq!(
            (t4.name.as_str(), t4.cpu_milli, t4.mem_mib),
            ("t4-0000", 64_000, 524_288)
        );
    }

    #[test]
    fn nodes_carry_labels_and_bad_keys_are_refused() {
        let text = r#"
            [[nodes]]
            count = 2
            gpus = 4
            gpu_model = "A100"
            labels = { zone = "a", ib = "" }

            [[nodes]]
            gpus = 4
            gpu_model = "A100"
        "#;
        let spec = parse_cluster_toml(text, "c.toml").unwrap();
        assert_eq!(
            spec.nodes[1].labels.get("zone").map(String::as_str),
            Some("a")
        );
        assert!(spec.nodes[1].labels.contains_key("ib"));
        assert!(spec.nodes[2].labels.is_empty());
        let c = crate::constraint::Constraints::parse("zone=a&ib").unwrap();
        assert_eq!(spec.class_mask(&c), 0b01, "the labelled class only");
        let bad = text.replace("ib = \"\"", "\"i b\" = \"\"");
        let e = error(&bad);
        assert!(e.starts_with("c.toml:6:"), "{e}");
        assert!(
            e.contains("nodes[0].labels") && e.contains("\"i b\""),
            "{e}"
        );
    }

    #[test]
    fn the_documented_example_parses() {
        let doc = include_str!("../../../../docs/cluster-file.md");
        let blocks: Vec<&str> = doc
            .split("```toml\n")
            .skip(1)
            .filter_map(|b| b.split_once("```").map(|(toml, _)| toml))
            .collect();
        assert_eq!(blocks.len(), 1);
        let spec = parse_cluster_toml(blocks[0], "docs/cluster-file.md").unwrap();
        assert_eq!(spec.describe(), "21 nodes, 136 GPUs (A100 x 128, B200 x 8)");
    }

    #[test]
    fn nodes_default_to_one_and_overrides_apply() {
        let text = r#"
            [[gpu_models]]
            name = "A100"
            speed = 2.0
            [[nodes]]
            name = "dgx-01"
            gpus = 8
            gpu_model = "a100"
            rack = "row1"
        "#;
        let spec = parse_cluster_toml(text, "dir/one.toml").unwrap();
        assert_eq!(spec.name, "one");
        assert_eq!(spec.nodes.len(), 1);
        assert_eq!(spec.models[0].speed, 2.0);
        assert_eq!(spec.models[0].mem_gib, 40, "catalog value kept");
        assert_eq!(spec.racks, ["row1"]);
        assert_eq!(spec.nvlink_domains, ["node:dgx-01"]);
    }

    #[test]
    fn syntax_and_type_errors_carry_line_column_and_field() {
        assert!(error("name = \"x\"\n[[nodes]\n").starts_with("c.toml:2:"));
        let unknown = error("[[nodes]]\ngpus = 8\ngpu_model = \"A100\"\ngpu_modle = \"x\"\n");
        assert!(
            unknown.starts_with("c.toml:4:1: nodes[0].gpu_modle: unknown field"),
            "{unknown}"
        );
        let wrong_type = error("[[nodes]]\ngpus = 0\n[[nodes]]\ngpus = \"eight\"\n");
        assert!(
            wrong_type.starts_with("c.toml:4:8: nodes[1].gpus:"),
            "{wrong_type}"
        );
        let missing = error("[[nodes]]\ncount = 3\n");
        assert!(
            missing.contains("nodes[0]") && missing.contains("missing field `gpus`"),
            "{missing}"
        );
    }

    #[test]
    fn validation_errors_point_at_the_field() {
        let zero =
            error("[[nodes]]\ngpus = 0\n\n[[nodes]]\ncount = 0\ngpus = 8\ngpu_model = \"A100\"\n");
        assert_eq!(
            zero,
            "c.toml:5:9: nodes[1].count: node count must be at least 1"
        );
        let unknown = error("[[nodes]]\ngpus = 8\ngpu_model = \"NOPE\"\n");
        assert!(
            unknown.starts_with("c.toml:3:13: nodes[0].gpu_model: unknown GPU model `NOPE`"),
            "{unknown}"
        );
        let too_many = error("[[nodes]]\ngpus = 65\ngpu_model = \"A100\"\n");
        assert!(
            too_many.starts_with("c.toml:2:8: nodes[0].gpus: 65 GPUs per node"),
            "{too_many}"
        );
        let no_model = error("[[nodes]]\ngpus = 4\n");
        assert!(
            no_model.starts_with("c.toml:1:1: nodes[0].gpu_model: 4 GPUs per node need"),
            "{no_model}"
        );
        let dup = error("[[nodes]]\nname = \"a\"\ngpus = 0\n[[nodes]]\nname = \"a\"\ngpus = 0\n");
        assert!(
            dup.starts_with("c.toml:5:8: nodes[1].name: node name `a` is used twice"),
            "{dup}"
        );
        let both = error("[[nodes]]\ncount = 2\nname = \"a\"\ngpus = 0\n");
        assert!(both.starts_with("c.toml:3:8: nodes[0].name:"), "{both}");
        assert!(
            error("rack_size = 0\n[[nodes]]\ngpus = 0\n").starts_with("c.toml:1:13: rack_size:")
        );
        assert!(error("").contains("no [[nodes]]"));
        let bad_scope = error("[[nodes]]\ngpus = 0\nnvlink_domain = \"row\"\n");
        assert!(
            bad_scope.starts_with("c.toml:3:17: nodes[0].nvlink_domain:"),
            "{bad_scope}"
        );
    }

    #[test]
    fn model_entries_are_checked() {
        let partial = error("[[gpu_models]]\nname = \"B300\"\nspeed = 6.0\n[[nodes]]\ngpus = 0\n");
        assert!(
            partial.starts_with("c.toml:1:1: gpu_models[0]:") && partial.contains("all required"),
            "{partial}"
        );
        let bad = error("[[gpu_models]]\nname = \"T4\"\nidle_watts = 500.0\n[[nodes]]\ngpus = 0\n");
        assert!(bad.contains("idle_watts <= busy_watts"), "{bad}");
        let twice = error("[[gpu_models]]\nname = \"T4\"\n[[gpu_models]]\nname = \"t4\"\n");
        assert!(
            twice.starts_with("c.toml:4:8: gpu_models[1].name: GPU model `t4` is defined twice"),
            "{twice}"
        );
    }

    #[test]
    fn line_column_counts_characters() {
        assert_eq!(line_column("ab\ncdé f", 8), (2, 5));
        assert_eq!(line_column("", 10), (1, 1));
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        const EXAMPLE: &str = include_str!("../../../../traces/clusters/example.toml");

        proptest! {
            #[test]
            fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
                let _ = parse_cluster_toml(&text, "fuzz.toml");
            }

            #[test]
            fn mutated_example_never_panics(at in 0usize..EXAMPLE.len(), cut in 0usize..40, insert in "\\PC{0,8}") {
                let mut bytes = EXAMPLE.as_bytes().to_vec();
                let end = (at + cut).min(bytes.len());
                bytes.splice(at..end, insert.bytes());
                let text = String::from_utf8_lossy(&bytes);
                let _ = parse_cluster_toml(&text, "fuzz.toml");
            }
        }
    }
}
