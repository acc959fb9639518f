//! GPU models: relative speed, memory and power draw, and the built-in catalog of known models.
//!
//! The catalog values are documented defaults, not measurements of any trace: a cluster file
//! may override every field. Speeds are relative training throughput with V100 = 1.0 (trace
//! durations are taken as measured at speed 1.0); power is per GPU, idle and fully busy, in
//! watts, from the vendors' board power (TDP) and typical idle draw.

use serde::{Deserialize, Serialize};

/// One GPU model as the simulator sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuModel {
    /// Name as traces and constraints spell it (matched case-insensitively).
    pub name: String,
    /// Relative speed: a job whose trace duration is `d` runs `d / speed` on this model.
    pub speed: f64,
    /// GPU memory in GiB (informational; requests in the traces carry no GPU memory).
    pub mem_gib: u32,
    /// Power draw of an idle GPU, watts.
    pub idle_watts: f64,
    /// Power draw of a fully allocated GPU, watts; a fractional allocation draws pro rata.
    pub busy_watts: f64,
}

/// `(names, speed, mem_gib, idle_w, busy_w)`; the first name is canonical, the rest aliases.
const CATALOG: &[(&[&str], f64, u32, f64, f64)] = &[
    (&["K80"], 0.35, 12, 25.0, 150.0),
    (&["P100"], 0.55, 16, 30.0, 250.0),
    (&["T4"], 0.40, 16, 10.0, 70.0),
    (&["V100", "V100M16", "V100-16G"], 1.0, 16, 40.0, 300.0),
    (&["V100M32", "V100-32G"], 1.0, 32, 40.0, 300.0),
    (&["A10"], 0.75, 24, 30.0, 150.0),
    (
        &["A100", "A100-40G", "A100-SXM4-40GB"],
        2.2,
        40,
        50.0,
        400.0,
    ),
    (&["A100-80G", "A100-SXM4-80GB"], 2.3, 80, 50.0, 400.0),
    (&["A800", "A800-SXM4-80GB"], 2.3, 80, 50.0, 400.0),
    (&["H100", "H100-SXM5-80GB"], 3.3, 80, 70.0, 700.0),
    (&["H800"], 3.3, 80, 70.0, 700.0),
    (&["H200"], 3.6, 141, 70.0, 700.0),
    (&["L4"], 0.6, 24, 16.0, 72.0),
    // The two Turing models of Sia's testbed (SOSP'23), for its throughput profiles. Speed: the
    // median speedup over T4 of Sia's six models at a common batch (RTX 2080 Ti 1.53, Quadro
    // RTX 6000 1.71, V100 2.38; ../shared/throughputs/README.md) scaled to V100 = 1. Memory and
    // board power from NVIDIA's specifications (2080 Ti: 11 GB, 250 W; Quadro RTX 6000: 24 GB,
    // 295 W), idle draw typical of the class. `RTX-6000` is the Quadro RTX 6000 (Turing), as
    // the service spells "Quadro RTX 6000"; not the 48 GB RTX 6000 Ada.
    (
        &[
            "RTX-2080Ti",
            "RTX2080Ti",
            "RTX-2080-Ti",
            "GeForce-RTX-2080-Ti",
        ],
        0.65,
        11,
        20.0,
        250.0,
    ),
    (
        &["RTX-6000", "Quadro-RTX-6000", "QuadroRTX6000"],
        0.72,
        24,
        20.0,
        295.0,
    ),
    // Undisclosed internal codes in the Alibaba traces: assumed V100-class.
    (&["G1"], 1.0, 16, 40.0, 300.0),
    (&["G2"], 1.0, 16, 40.0, 300.0),
    (&["G3"], 1.0, 32, 40.0, 300.0),
    (&["GPU-series-1"], 1.0, 24, 40.0, 300.0),
    (&["GPU-series-2"], 1.0, 24, 40.0, 300.0),
    (&["MISC"], 1.0, 16, 40.0, 300.0),
];

impl GpuModel {
    /// The catalog entry for `name` (case-insensitive, aliases accepted), keeping the caller's
    /// spelling as the model's name. `None` for a model the catalog does not know.
    pub fn from_catalog(name: &str) -> Option<GpuModel> {
        CATALOG.iter().find_map(|(names, speed, mem, idle, busy)| {
            names
                .iter()
                .any(|n| n.eq_ignore_ascii_case(name))
                .then(|| GpuModel {
                    name: name.to_string(),
                    speed: *speed,
                    mem_gib: *mem,
                    idle_watts: *idle,
                    busy_watts: *busy,
                })
        })
    }

    /// The catalog's canonical spelling of `name` (case-insensitive, aliases accepted): `v100-16g`
    /// -> `V100`. `None` for a model the catalog does not know.
    pub fn canonical_name(name: &str) -> Option<&'static str> {
        CATALOG
            .iter()
            .find(|(names, ..)| names.iter().any(|n| n.eq_ignore_ascii_case(name)))
            .map(|(names, ..)| names[0])
    }

    /// Names the catalog knows (canonical spelling first).
    pub fn catalog_names() -> impl Iterator<Item = &'static str> {
        CATALOG.iter().flat_map(|(names, ..)| names.iter().copied())
    }

    /// The catalog's names nearest to `name` (case-insensitive edit distance), for "did you
    /// mean" messages: at most `at_most`, nearest first (ties in catalog order), none further
    /// than a third of the longer name (at least 2 edits) away.
    pub fn closest_catalog_names(name: &str, at_most: usize) -> Vec<&'static str> {
        let want = name.trim().to_ascii_lowercase();
        let mut near: Vec<(usize, usize, &'static str)> = Self::catalog_names()
            .enumerate()
            .filter_map(|(i, known)| {
                let d = edit_distance(&want, &known.to_ascii_lowercase());
                let limit = (want.len().max(known.len()) / 3).max(2);
                (d <= limit).then_some((d, i, known))
            })
            .collect();
        near.sort_unstable();
        near.into_iter().take(at_most).map(|(_, _, n)| n).collect()
    }

    /// Checks the fields are usable: positive finite speed, non-negative power, idle <= busy.
    pub fn validate(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("GPU model name is empty".into());
        }
        if !(self.speed.is_finite() && self.speed > 0.0) {
            return Err(format!(
                "GPU model {}: speed must be > 0, got {}",
                self.name, self.speed
            ));
        }
        let power_ok = self.idle_watts.is_finite()
            && self.idle_watts >= 0.0
            && self.busy_watts.is_finite()
            && self.busy_watts >= self.idle_watts;
        if !power_ok {
            return Err(format!(
                "GPU model {}: need 0 <= idle_watts <= busy_watts, got {} and {}",
                self.name, self.idle_watts, self.busy_watts
            ));
        }
        Ok(())
    }
}

/// Levenshtein distance over bytes (catalog names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closest_names_are_near_misses() {
        // "V100x" is one edit from V100, nearer than anything else.
        assert_eq!(GpuModel::closest_catalog_names("V100x", 3)[0], "V100");
        assert_eq!(GpuModel::closest_catalog_names("v10", 1), vec!["V100"]);
        // Two edits from both A10 and A100: both, in catalog order.
        assert_eq!(
            GpuModel::closest_catalog_names("A1OO", 2),
            vec!["A10", "A100"]
        );
        assert!(GpuModel::closest_catalog_names("TPUv4-pod", 3).is_empty());
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("h100", "h100"), 0);
    }

    #[test]
    fn catalog_lookup_is_case_insensitive_and_keeps_spelling() {
        let m = GpuModel::from_catalog("v100m32").expect("known");
        assert_eq!(m.name, "v100m32");
        assert_eq!(m.mem_gib, 32);
        assert!(GpuModel::from_catalog("TPUv4").is_none());
    }

    #[test]
    fn canonical_names_fold_aliases() {
        assert_eq!(GpuModel::canonical_name("v100-16g"), Some("V100"));
        assert_eq!(
            GpuModel::canonical_name("quadro-rtx-6000"),
            Some("RTX-6000")
        );
        assert_eq!(GpuModel::canonical_name("rtx2080ti"), Some("RTX-2080Ti"));
        assert_eq!(GpuModel::canonical_name("V100M32"), Some("V100M32"));
        assert_eq!(GpuModel::canonical_name("TPUv4"), None);
    }

    #[test]
    fn every_catalog_entry_validates() {
        for name in GpuModel::catalog_names() {
            GpuModel::from_catalog(name)
                .expect("listed")
                .validate()
                .expect(name);
        }
    }
}
