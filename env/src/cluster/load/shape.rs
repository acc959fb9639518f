//! Synthetic cluster shapes: `NxG:MODEL` parts joined by `+`, e.g. `32x8:A100+64x1:T4+16x0:CPU`
//! (N nodes of G GPUs of a catalog model; `Nx0:CPU` or `Nx0` for CPU-only nodes).
//!
//! Every node gets the documented default CPU and memory (per GPU, or per CPU-only node), racks
//! of `DEFAULT_RACK_SIZE` nodes per model and its own NVLink domain.

use super::ClusterLoadError;
use super::builder::{ClusterBuilder, DEFAULT_RACK_SIZE, NodeShape};
use crate::cluster::ClusterSpec;

/// Whether `arg` reads as a shape rather than a path: it starts with digits then `x`, and has
/// no path separator or `.toml` ending. (A malformed shape is then reported as a shape error.)
pub(super) fn looks_like_shape(arg: &str) -> bool {
    let start = arg.trim_start();
    let digits = start.len() - start.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    digits > 0
        && matches!(start.as_bytes().get(digits), Some(b'x' | b'X'))
        && !arg.contains(['/', '\\'])
        && !arg.ends_with(".toml")
}

/// Builds the cluster a shape describes; the shape itself is the cluster's name.
pub(super) fn parse_shape(arg: &str) -> Result<ClusterSpec, ClusterLoadError> {
    let fail = |message: String| ClusterLoadError::Shape {
        shape: arg.to_string(),
        message,
    };
    let several = arg.contains('+');
    let mut builder = ClusterBuilder::new(DEFAULT_RACK_SIZE);
    for part in arg.split('+').map(str::trim) {
        // Name the part only when there are several.
        let in_part = |message: String| {
            if several {
                fail(format!("`{part}`: {message}"))
            } else {
                fail(message)
            }
        };
        let (count, gpus, model) = split_part(part).map_err(in_part)?;
        let shape = NodeShape {
            gpus,
            gpu_model: model,
            ..NodeShape::default()
        };
        builder
            .add_group(count, None, &shape)
            .map_err(|r| in_part(r.message))?;
    }
    builder
        .build(arg)
        .map_err(|error| ClusterLoadError::Cluster {
            origin: arg.to_string(),
            error,
        })
}

/// `NxG[:MODEL]` -> (N, G, model); the model `CPU` means none.
fn split_part(part: &str) -> Result<(u64, u32, Option<&str>), String> {
    let expected = "expected NxG:MODEL such as 64x8:A100, or Nx0:CPU";
    if part.is_empty() {
        return Err(format!("empty part; {expected}"));
    }
    let (counts, model) = match part.split_once(':') {
        Some((counts, model)) => (counts, Some(model.trim())),
        None => (part, None),
    };
    let (nodes, gpus) = counts
        .split_once(['x', 'X'])
        .ok_or_else(|| expected.to_string())?;
    let nodes: u64 = nodes
        .trim()
        .parse()
        .map_err(|_| format!("node count `{nodes}` is not a number; {expected}"))?;
    let gpus: u32 = gpus
        .trim()
        .parse()
        .map_err(|_| format!("GPUs per node `{gpus}` is not a number from 0 to 64; {expected}"))?;
    let model = model.filter(|m| !m.eq_ignore_ascii_case("CPU"));
    Ok((nodes, gpus, model))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape_error(arg: &str) -> String {
        assert!(looks_like_shape(arg), "{arg}");
        let err = parse_shape(arg).unwrap_err();
        assert!(matches!(err, ClusterLoadError::Shape { .. }), "{err}");
        err.to_string()
    }

    #[test]
    fn shapes_build_nodes_with_default_resources() {
        let spec = parse_shape("64x8:A100").unwrap();
        assert_eq!(spec.nodes.len(), 64);
        assert_eq!(spec.total_gpus(), 512);
        assert_eq!(spec.nodes[0].name, "a100-0000");
        assert_eq!(spec.nodes[63].name, "a100-0063");
        // 64 nodes, 8 per rack; one NVLink domain per node.
        assert_eq!(spec.racks.len(), 8);
        assert_eq!(spec.nvlink_domains.len(), 64);
        assert_eq!(spec.total_cpu_milli(), 64 * 8 * 16_000);
    }

    #[test]
    fn parts_join_with_plus_and_cpu_nodes_have_no_gpus() {
        let spec = parse_shape("32x8:A100 + 64x1:T4+4x0:CPU+2x0").unwrap();
        assert_eq!(spec.nodes.len(), 32 + 64 + 4 + 2);
        assert_eq!(spec.total_gpus(), 32 * 8 + 64);
        assert_eq!(spec.models.len(), 2);
        assert_eq!(spec.nodes[101].name, "cpu-0005");
        assert_eq!(spec.nodes[101].cpu_milli, 64_000);
        assert_eq!(spec.nodes[101].mem_mib, 262_144);
    }

    #[test]
    fn bad_shapes_say_what_is_wrong() {
        assert_eq!(
            shape_error("0x8:A100"),
            "cluster shape `0x8:A100`: node count must be at least 1"
        );
        let unknown = shape_error("4x8:NOPE");
        assert!(unknown.contains("unknown GPU model `NOPE`"), "{unknown}");
        assert!(unknown.contains("H100"), "{unknown}");
        assert!(shape_error("4x999:A100").contains("999 GPUs per node, expected at most 64"));
        assert!(shape_error("4x8").contains("need a GPU model"));
        assert!(shape_error("4x0:A100").contains("0 GPUs"));
        assert!(shape_error("4xx:A100").contains("is not a number"));
        assert!(shape_error("99999999999999x8:A100").contains("limit"));
        assert!(shape_error("4x8:A100+").contains("``: empty part; expected NxG:MODEL"));
        assert!(shape_error("4x8:A100+lab").contains("`lab`: expected NxG:MODEL"));
    }

    #[test]
    fn paths_and_names_are_not_shapes() {
        for arg in ["openb", "lab.toml", "./4x8", "4x8.toml", "", "x8:A100"] {
            assert!(!looks_like_shape(arg), "{arg}");
        }
    }
}
