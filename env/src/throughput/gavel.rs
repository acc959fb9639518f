//! Gavel's measurements (Narayanan et al., OSDI'20; `stanford-futuredata/gavel` @
//! [`COMMIT`], MIT): the throughput table its simulator reads and its 26 job templates.
//!
//! The preset is `traces/throughputs/gavel.csv`, converted from Gavel's
//! `scheduler/simulation_throughputs.json` by the test `shipped_table_is_the_upstream_json` of
//! this module (which rewrites it under `LACHESIS_BLESS=1`):
//! - worker types `k80`, `p100`, `v100` become GPU models `K80`, `P100`, `V100`, each key
//!   `('<type>', N)` a row on N GPUs, consolidated, rate `null` (steps/s of the whole job);
//! - `<w>_unconsolidated` keys with N > 1 become the `spread` rows (their 1-GPU entries equal
//!   the consolidated ones and are left out; `k80_unconsolidated` lacks ResNet-50 batch 64 and
//!   128 at 2/4/8 GPUs, so those have no spread row);
//! - 1-GPU pair entries `[A's, B's]` become pair rows, each unordered pair once (the table is
//!   symmetric); multi-GPU pairs, all `[0, 0]` upstream, are left out (not listed = cannot
//!   share);
//! - rates are kept as published, zeros (K80 ResNet-50 batch 128 on 2/4/8 GPUs: cannot run),
//!   super-linear and non-monotonic values included. Reference GPU: V100, as Gavel's
//!   `generate_job(reference_worker_type='v100')` (`scheduler/scheduler.py:1238`).

use super::{ThroughputTable, file};

/// The Gavel commit the table and templates come from.
pub const COMMIT: &str = "c4fa40097339e9608ab71fd64c8bdea96a5e4a4c";

/// One of Gavel's job templates (`scheduler/job_table.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobTemplate {
    /// The job type, as the throughput table names it.
    pub name: &'static str,
    /// Whether the template may run on more than one GPU (`JobTemplate.distributed`).
    pub distributed: bool,
}

const fn template(name: &'static str, distributed: bool) -> JobTemplate {
    JobTemplate { name, distributed }
}

/// Gavel's `JobTable`, in its order: ResNet-18, ResNet-50, Transformer and LM are
/// `distributed=True`; Recommendation, A3C and CycleGAN keep the default `False`.
pub const TEMPLATES: [JobTemplate; 26] = [
    template("ResNet-18 (batch size 16)", true),
    template("ResNet-18 (batch size 32)", true),
    template("ResNet-18 (batch size 64)", true),
    template("ResNet-18 (batch size 128)", true),
    template("ResNet-18 (batch size 256)", true),
    template("ResNet-50 (batch size 16)", true),
    template("ResNet-50 (batch size 32)", true),
    template("ResNet-50 (batch size 64)", true),
    template("ResNet-50 (batch size 128)", true),
    template("Transformer (batch size 16)", true),
    template("Transformer (batch size 32)", true),
    template("Transformer (batch size 64)", true),
    template("Transformer (batch size 128)", true),
    template("Transformer (batch size 256)", true),
    template("LM (batch size 5)", true),
    template("LM (batch size 10)", true),
    template("LM (batch size 20)", true),
    template("LM (batch size 40)", true),
    template("LM (batch size 80)", true),
    template("Recommendation (batch size 512)", false),
    template("Recommendation (batch size 1024)", false),
    template("Recommendation (batch size 2048)", false),
    template("Recommendation (batch size 4096)", false),
    template("Recommendation (batch size 8192)", false),
    template("A3C", false),
    template("CycleGAN", false),
];

/// The shipped table, in the format of [`mod@file`].
pub const TABLE_CSV: &str = include_str!("../../../traces/throughputs/gavel.csv");

/// The Gavel preset.
pub fn table() -> ThroughputTable {
    file::read(TABLE_CSV.as_bytes(), "gavel").expect("the shipped Gavel table is valid (tested)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::WorkloadType;
    use crate::throughput::{Consolidation, TableBuilder, WorkloadId};
    use serde_json::Value;
    use std::path::{Path, PathBuf};

    /// (Gavel worker type, catalog GPU model).
    const WORKERS: [(&str, &str); 3] = [("k80", "K80"), ("p100", "P100"), ("v100", "V100")];

    /// `('ResNet-18 (batch size 16)', 1)` -> (`ResNet-18 (batch size 16)`, 1), as Gavel's
    /// `parse_job_type_tuple` reads it (`scheduler/utils.py:390`).
    fn parse_key(key: &str) -> (String, u32) {
        let inner = key
            .strip_prefix("('")
            .and_then(|k| k.strip_suffix(')'))
            .expect("a key is ('type', N)");
        let (name, n) = inner.rsplit_once("', ").expect("a key is ('type', N)");
        (name.to_string(), n.parse().expect("N is an integer"))
    }

    fn workload(name: &str) -> WorkloadType {
        WorkloadType::new(name).expect("Gavel's type names are not empty")
    }

    fn rate(value: &Value) -> f64 {
        value.as_f64().expect("a rate is a number")
    }

    /// Converts `simulation_throughputs.json` as the module docs say, checking each thing the
    /// conversion leaves out is what the docs claim.
    fn convert(json: &Value) -> ThroughputTable {
        let mut table = TableBuilder::new("gavel", "V100").unwrap();
        for template in TEMPLATES {
            for (worker, gpu) in WORKERS {
                let entries = &json[worker];
                for n in [1, 2, 4, 8] {
                    let key = format!("('{}', {n})", template.name);
                    let consolidated = &entries[&key];
                    if consolidated.is_null() {
                        continue;
                    }
                    let name = workload(template.name);
                    let alone = rate(&consolidated["null"]);
                    let c = Consolidation::Consolidated;
                    table.single(&name, gpu, n, c, alone, 0).unwrap();
                    let spread = &json[format!("{worker}_unconsolidated")][&key]["null"];
                    match (n, spread.as_f64()) {
                        (1, rate) => assert_eq!(rate, Some(alone), "{worker} {key}"),
                        (_, Some(rate)) => table
                            .single(&name, gpu, n, Consolidation::Spread, rate, 0)
                            .unwrap(),
                        (_, None) => assert_eq!(worker, "k80", "{key} has no spread entry"),
                    }
                }
            }
        }
        for (worker, gpu) in WORKERS {
            for (i, a) in TEMPLATES.iter().enumerate() {
                for b in &TEMPLATES[i..] {
                    let pair =
                        &json[worker][format!("('{}', 1)", a.name)][format!("('{}', 1)", b.name)];
                    let rates = pair.as_array().expect("every 1-GPU pair is listed");
                    let rates = [rate(&rates[0]), rate(&rates[1])];
                    table
                        .pair(&workload(a.name), &workload(b.name), gpu, rates, 0)
                        .unwrap();
                }
            }
            // Multi-GPU pairs are all [0, 0]: leaving them out loses nothing.
            for (key, entry) in json[worker].as_object().unwrap() {
                if parse_key(key).1 > 1 {
                    for (partner, rates) in entry.as_object().unwrap() {
                        if partner != "null" {
                            let zero = rates.as_array().unwrap().iter().all(|r| rate(r) == 0.0);
                            assert!(zero, "{worker} {key} {partner}");
                        }
                    }
                }
            }
        }
        table.finish().unwrap()
    }

    fn repo_file(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
    }

    /// Gavel's upstream JSON, or `None` (after saying why) when the shared copy is not there.
    fn upstream_json() -> Option<Value> {
        let dir = std::env::var_os(crate::throughput::sia::DIR_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_file("../shared/throughputs"));
        let path = dir.join("gavel/simulation_throughputs.json");
        match std::fs::read_to_string(&path) {
            Ok(text) => Some(serde_json::from_str(&text).unwrap()),
            Err(_) => {
                println!("skipped: {} not found", path.display());
                None
            }
        }
    }

    /// The converter: `LACHESIS_BLESS=1 cargo test -p lachesis-env throughput::gavel` rewrites
    /// the shipped file from the upstream JSON; without it, checks they agree.
    #[test]
    fn shipped_table_is_the_upstream_json() {
        let Some(json) = upstream_json() else { return };
        let mut text = Vec::new();
        file::write(&convert(&json), &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        let shipped = repo_file("traces/throughputs/gavel.csv");
        if std::env::var_os("LACHESIS_BLESS").is_some() {
            std::fs::write(&shipped, &text).unwrap();
        }
        assert!(
            text == TABLE_CSV,
            "traces/throughputs/gavel.csv differs from the conversion of the upstream JSON \
             (if intended: LACHESIS_BLESS=1 cargo test -p lachesis-env throughput::gavel)"
        );
    }

    /// Every isolated and pair value of the upstream JSON, looked up in the preset.
    #[test]
    fn preset_holds_every_upstream_value() {
        let Some(json) = upstream_json() else { return };
        let t = table();
        let mut checked = 0;
        for (worker, gpu) in WORKERS {
            let g = t.gpu(gpu).unwrap();
            for (placement, section) in [
                (Consolidation::Consolidated, worker.to_string()),
                (Consolidation::Spread, format!("{worker}_unconsolidated")),
            ] {
                for (key, entry) in json[&section].as_object().unwrap() {
                    let (name, n) = parse_key(key);
                    let w = t.workload(&name).unwrap();
                    assert_eq!(t.rate(w, g, n, placement).unwrap(), rate(&entry["null"]));
                    checked += 1;
                    for (partner, rates) in entry.as_object().unwrap() {
                        if partner == "null" || n > 1 {
                            continue;
                        }
                        let p = t.workload(&parse_key(partner).0).unwrap();
                        let upstream = [rate(&rates[0]), rate(&rates[1])];
                        let expected = (upstream != [0.0, 0.0]).then_some(upstream);
                        assert_eq!(t.pair(w, p, g), expected, "{section} {key} {partner}");
                        checked += 1;
                    }
                }
            }
        }
        // 83 + 83 + 83 + 83 + 83 + 77 keys; 676 1-GPU pairs in each of the six sections.
        assert_eq!(checked, 492 + 6 * 676);
    }

    #[test]
    fn templates_match_job_table_py() {
        let dir = std::env::var_os(crate::throughput::sia::DIR_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_file("../shared/throughputs"));
        let Ok(py) = std::fs::read_to_string(dir.join("gavel/job_table.py")) else {
            println!("skipped: gavel/job_table.py not found");
            return;
        };
        // The four families whose constructor passes distributed=True.
        let distributed: Vec<&str> = py
            .split("\ndef ")
            .filter(|f| f.contains("distributed=True"))
            .map(|f| f.split('(').next().unwrap())
            .collect();
        assert_eq!(distributed, ["resnet18", "resnet50", "transformer", "lm"]);
        for t in TEMPLATES {
            let family = ["ResNet-18", "ResNet-50", "Transformer", "LM"]
                .iter()
                .any(|f| t.name.starts_with(&format!("{f} ")));
            assert_eq!(t.distributed, family, "{}", t.name);
        }
    }

    /// Spot values quoted from `simulation_throughputs.json` (and its README).
    #[test]
    fn preset_spot_values() {
        let t = table();
        assert_eq!(t.name(), "gavel");
        assert_eq!(t.reference().name(), "V100");
        assert_eq!(t.workloads().len(), 26);
        let names: Vec<&str> = t.workloads().iter().map(WorkloadType::as_str).collect();
        let templates: Vec<&str> = TEMPLATES.iter().map(|t| t.name).collect();
        assert_eq!(names, templates);
        let gpus: Vec<&str> = t.gpu_models().iter().map(|g| g.name()).collect();
        assert_eq!(gpus, ["K80", "P100", "V100"]);
        let (k80, p100, v100) = (
            t.gpu("k80").unwrap(),
            t.gpu("P100").unwrap(),
            t.gpu("V100").unwrap(),
        );
        let w = |name: &str| t.workload(name).unwrap();
        let (c, s) = (Consolidation::Consolidated, Consolidation::Spread);
        // "v100": {"('ResNet-50 (batch size 64)', 1)": {"null": 4.394774823323071,
        //   "('LM (batch size 20)', 1)": [3.0214759821669617, 24.79801703692631], ...
        let r50 = w("ResNet-50 (batch size 64)");
        let lm20 = w("lm (batch size 20)");
        assert_eq!(t.rate(r50, v100, 1, c).unwrap(), 4.394774823323071);
        assert_eq!(
            t.pair(r50, lm20, v100),
            Some([3.0214759821669617, 24.79801703692631])
        );
        assert_eq!(
            t.pair(lm20, r50, v100),
            Some([24.79801703692631, 3.0214759821669617])
        );
        // README table: V100 ResNet-18 bs16 at 1/2 GPUs 32.353 / 100.142, spread at 2: 35.337.
        let r18 = w("ResNet-18 (batch size 16)");
        assert!((t.rate(r18, v100, 1, c).unwrap() - 32.353).abs() < 5e-4);
        assert!((t.rate(r18, v100, 2, c).unwrap() - 100.142).abs() < 5e-4);
        assert!((t.rate(r18, v100, 2, s).unwrap() - 35.337).abs() < 5e-4);
        // 1-GPU spread is the consolidated rate.
        assert_eq!(
            t.rate(r18, v100, 1, s).unwrap(),
            t.rate(r18, v100, 1, c).unwrap()
        );
        // Recommendation bs1024 runs slower on V100 than on K80 (0.66x): 13.283 vs 20.050.
        let rec = w("Recommendation (batch size 1024)");
        let speed = |gpu| t.speed(rec, gpu, 1, c, 1).unwrap();
        assert!((speed(k80) - 20.050 / 13.283).abs() < 1e-3);
        assert_eq!(speed(v100), 1.0);
        assert!((t.rate(rec, p100, 1, c).unwrap() - 30.744).abs() < 5e-4);
        // K80 ResNet-50 bs128 cannot run on 2+ GPUs (0 upstream), and has no spread entry.
        let r50_128 = w("ResNet-50 (batch size 128)");
        assert_eq!(t.rate(r50_128, k80, 2, c).unwrap(), 0.0);
        assert!(t.rate(r50_128, k80, 2, s).is_err());
        // Non-distributed templates have only 1-GPU rows.
        assert!(t.rate(w("A3C"), v100, 2, c).is_err());
        // Pairs that cannot share ([0, 0]): 87 on K80, 20 on P100, 40 on V100 of 676 ordered.
        for (gpu, expected) in [(k80, 87), (p100, 20), (v100, 40)] {
            let n = (0..26)
                .flat_map(|a| (0..26).map(move |b| (WorkloadId(a), WorkloadId(b))))
                .filter(|(a, b)| t.pair(*a, *b, gpu).is_none())
                .count();
            assert_eq!(n, expected, "{}", gpu.name());
        }
    }

    #[test]
    fn pairs_are_symmetric() {
        let t = table();
        for gpu in t.gpu_models() {
            for a in 0..26 {
                for b in 0..26 {
                    let (a, b) = (WorkloadId(a), WorkloadId(b));
                    let ab = t.pair(a, b, gpu);
                    assert_eq!(ab.map(|[x, y]| [y, x]), t.pair(b, a, gpu));
                }
            }
        }
    }

    #[test]
    fn shipped_file_is_small() {
        assert!(TABLE_CSV.len() < 200_000, "{} bytes", TABLE_CSV.len());
    }
}
