//! Loading a `ClusterSpec` from outside: a built-in preset, a synthetic shape such as
//! `32x8:A100+64x1:T4`, or a TOML cluster file (docs/cluster-file.md); and the one error type
//! every loader reports, naming the input, line, column and field at fault.
//!
//! Presets are embedded in the binary and never read the file system.

mod builder;
mod file;
pub(crate) use file::{field_at, line_column};
mod preset;
mod shape;

pub use builder::{
    DEFAULT_CPU_MILLI_PER_GPU, DEFAULT_CPU_ONLY_CPU_MILLI, DEFAULT_CPU_ONLY_MEM_MIB,
    DEFAULT_MEM_MIB_PER_GPU, DEFAULT_RACK_SIZE, MAX_NODES,
};
pub use file::{MAX_CLUSTER_FILE_BYTES, parse_cluster_toml};
pub use preset::{SPOT_MEM_MIB_PER_VCPU, preset_names};

use crate::cluster::{ClusterError, ClusterSpec};
use std::fmt;
use std::path::Path;

/// Why a cluster argument, preset, shape or file could not be loaded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClusterLoadError {
    /// The argument is no preset, no shape, and no existing path.
    #[error(
        "cluster `{arg}` is not a preset ({}; an inventory on a throughput table's GPU models as \
         pai-2020:gavel), not a shape like 64x8:A100 or 32x8:A100+16x0:CPU, and not a cluster \
         file ({reason})",
        preset_names().join(", ")
    )]
    Unresolved { arg: String, reason: String },
    /// A cluster file exists but cannot be read as text.
    #[error("cluster file {path}: {message}")]
    Unreadable { path: String, message: String },
    /// A synthetic shape is malformed or names an unknown model.
    #[error("cluster shape `{shape}`: {message}")]
    Shape { shape: String, message: String },
    /// A cluster file or embedded inventory has a bad value.
    #[error("{}: {field}: {message}", Location { origin, line: *line, column: *column })]
    Invalid {
        /// The file (or embedded inventory) at fault.
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column in characters, where known.
        column: Option<usize>,
        /// Where in the file's structure, e.g. `nodes[2].gpu_model`.
        field: String,
        /// What is wrong and what was expected.
        message: String,
    },
    /// The loaded nodes do not form a valid cluster.
    #[error("{origin}: {error}")]
    Cluster { origin: String, error: ClusterError },
}

/// `origin:line[:column]`, as compilers print it.
struct Location<'a> {
    origin: &'a str,
    line: usize,
    column: Option<usize>,
}

impl fmt::Display for Location<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.origin, self.line)?;
        match self.column {
            Some(c) => write!(f, ":{c}"),
            None => Ok(()),
        }
    }
}

/// Resolves a cluster argument, in order: a preset name (`openb`, `pai-2020`, `spot-2026`,
/// `gavel`, `sia`, case-insensitive), or an inventory preset mapped onto a throughput table's
/// GPU models (`pai-2020:gavel`, `spot-2026:sia`); a synthetic shape `NxG:MODEL[+NxG:MODEL...]` (`Nx0:CPU` or `Nx0` for
/// CPU-only nodes); otherwise the path of a TOML cluster file.
///
/// ```
/// use lachesis_env::cluster::load_cluster;
/// let spec = load_cluster("32x8:A100+64x1:T4").unwrap();
/// assert_eq!(spec.describe(), "96 nodes, 320 GPUs (A100 x 256, T4 x 64)");
/// assert!(load_cluster("openb").is_ok());
/// assert!(load_cluster("4x8:NOPE").unwrap_err().to_string().contains("unknown GPU model"));
/// ```
pub fn load_cluster(arg: &str) -> Result<ClusterSpec, ClusterLoadError> {
    if let Some(spec) = preset::load_preset(arg) {
        return spec;
    }
    if shape::looks_like_shape(arg) {
        return shape::parse_shape(arg);
    }
    file::load_cluster_file(Path::new(arg), arg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn unknown_argument_says_what_was_tried() {
        let err = load_cluster("no-such-cluster").unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, ClusterLoadError::Unresolved { .. }));
        for expected in ["no-such-cluster", "openb, pai-2020, spot-2026", "64x8:A100"] {
            assert!(text.contains(expected), "{text}");
        }
    }

    #[test]
    fn a_directory_is_not_a_cluster_file() {
        let err = load_cluster(env!("CARGO_MANIFEST_DIR")).unwrap_err();
        assert!(matches!(err, ClusterLoadError::Unreadable { .. }), "{err}");
    }

    #[test]
    fn the_example_file_loads_by_path() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../traces/clusters/example.toml"
        );
        let spec = load_cluster(path).unwrap();
        assert_eq!(spec.name, "lab");
    }

    proptest! {
        #[test]
        fn any_argument_is_loaded_or_refused_without_panic(arg in "\\PC{0,40}") {
            let _ = load_cluster(&arg);
        }

        #[test]
        fn shape_like_arguments_never_panic(
            arg in "([0-9]{1,3}|[1-9][0-9]{6,21})[xX][0-9]{0,12}(:[A-Za-z0-9-]{0,8})?\
                    (\\+[0-9]{1,3}x[0-9]{1,3}(:[A-Za-z0-9-]{0,6})?){0,2}"
        ) {
            let _ = load_cluster(&arg);
        }
    }
}
