//! Tests of the table, its file format, the Sia preset and the workload rules (the Gavel preset's
//! are in `gavel.rs`).

use super::*;
use crate::job::tests::job;
use crate::job::{JobSpec, TaskRequest, Trace};
use crate::units::SimTime;
use proptest::prelude::*;
use std::path::PathBuf;

const HEAD: &str = "#lachesis-throughput v1\n#reference,V100\n\
                    workload,gpu,gpus,placement,rate,partner,partner_rate\n";

fn read_str(rows: &str) -> Result<ThroughputTable, ThroughputError> {
    file::read(format!("{HEAD}{rows}").as_bytes(), "t.csv")
}

fn err(rows: &str) -> String {
    read_str(rows).unwrap_err().to_string()
}

/// A small valid table: two workloads on V100 and T4, one pair.
const SMALL: &str = "a,V100,1,consolidated,10,,\n\
                     a,v100-16g,2,consolidated,18,,\n\
                     a,V100,2,spread,12,,\n\
                     a,T4,1,consolidated,4,,\n\
                     b,V100,1,consolidated,5,,\n\
                     b,T4,1,consolidated,0,,\n\
                     B,V100,1,consolidated,3,a,6\n";

#[test]
fn lookups_follow_the_documented_rules() {
    let t = read_str(SMALL).unwrap();
    assert_eq!(t.name(), "t.csv");
    let names: Vec<&str> = t.workloads().iter().map(WorkloadType::as_str).collect();
    assert_eq!(names, ["a", "b"]);
    let (a, b) = (t.workload("a").unwrap(), t.workload(" B ").unwrap());
    let (v100, t4) = (t.gpu("V100-16G").unwrap(), t.gpu("t4").unwrap());
    assert_eq!(v100.name(), "V100");
    let (c, s) = (Consolidation::Consolidated, Consolidation::Spread);
    assert_eq!(t.rate(a, v100, 2, c), Ok(18.0));
    assert_eq!(t.rate(a, v100, 2, s), Ok(12.0));
    // A 1-GPU job is consolidated whatever it is asked as.
    assert_eq!(t.rate(a, t4, 1, s), Ok(4.0));
    // Speeds are relative to the reference GPU at the trace's GPU count.
    assert_eq!(t.speed(a, t4, 1, c, 1), Ok(0.4));
    assert_eq!(t.speed(a, v100, 2, s, 2), Ok(12.0 / 18.0));
    assert_eq!(t.speed(a, v100, 2, c, 1), Ok(1.8));
    // b cannot run on T4: rate 0, speed 0.
    assert_eq!(t.speed(b, t4, 1, c, 1), Ok(0.0));
    // The pair was written (b, a): both orders answer, each job's rate first.
    assert_eq!(t.pair(a, b, v100), Some([6.0, 3.0]));
    assert_eq!(t.pair(b, a, v100), Some([3.0, 6.0]));
    assert_eq!(t.pair(a, a, v100), None);
    assert_eq!(t.pair(a, b, t4), None);
    let rates: Vec<_> = t
        .rates_of(a)
        .map(|(g, n, p, r)| (g.name(), n, p, r))
        .collect();
    assert_eq!(
        rates,
        [
            ("T4", 1, c, 4.0),
            ("V100", 1, c, 10.0),
            ("V100", 2, c, 18.0),
            ("V100", 2, s, 12.0)
        ]
    );
}

#[test]
fn missing_entries_are_typed_errors_never_defaults() {
    let t = read_str(SMALL).unwrap();
    let a = t.workload("a").unwrap();
    let v100 = t.gpu("V100").unwrap();
    assert_eq!(
        t.gpu("A100"),
        Err(RateError::GpuModelAbsent {
            table: "t.csv".into(),
            gpu: "A100".into(),
            covered: "T4, V100".into()
        })
    );
    assert!(matches!(
        t.gpu("TPUv4"),
        Err(RateError::UnknownGpuModel { .. })
    ));
    // V100M32 is a catalog model of its own, not V100.
    assert!(matches!(
        t.gpu("V100M32"),
        Err(RateError::GpuModelAbsent { .. })
    ));
    assert!(matches!(
        t.workload("c"),
        Err(RateError::UnknownWorkload { .. })
    ));
    let e = t.rate(a, v100, 4, Consolidation::Consolidated).unwrap_err();
    assert_eq!(
        e.to_string(),
        "throughput table t.csv has no rate for a on 4 x V100 (consolidated)"
    );
    // No reference rate at the trace's GPU count: no speed.
    assert!(matches!(
        t.speed(a, v100, 1, Consolidation::Consolidated, 4),
        Err(RateError::NoEntry { gpus: 4, .. })
    ));
    // A reference without a rate for b (0 on T4) cannot normalise b.
    let b = t.workload("b").unwrap();
    let on_t4 = t.clone().with_reference("T4").unwrap();
    assert!(matches!(
        on_t4.speed(b, v100, 1, Consolidation::Consolidated, 1),
        Err(RateError::ZeroReference { .. })
    ));
    assert_eq!(
        on_t4.speed(a, v100, 1, Consolidation::Consolidated, 1),
        Ok(2.5)
    );
    assert!(t.with_reference("A100").is_err());
}

#[test]
fn bad_tables_are_refused_naming_file_line_and_field() {
    let line4 = |problem: &str| format!("t.csv line 4, field {problem}");
    let cases: &[(&str, &str)] = &[
        (
            "a,TPUv4,1,consolidated,1,,\n",
            "gpu: unknown GPU model \"TPUv4\", expected a catalog model (K80, P100",
        ),
        (
            "a,V100,1,consolidated,-1,,\n",
            "rate: expected a finite rate >= 0, got -1",
        ),
        (
            "a,V100,1,consolidated,NaN,,\n",
            "rate: expected a finite rate >= 0, got NaN",
        ),
        (
            "a,V100,1,consolidated,inf,,\n",
            "rate: expected a finite rate >= 0, got inf",
        ),
        (
            "a,V100,1,consolidated,fast,,\n",
            "rate: expected a rate >= 0, got \"fast\"",
        ),
        (
            "a,V100,0,consolidated,1,,\n",
            "gpus: expected an integer 1..=65536, got \"0\"",
        ),
        (
            "a,V100,1,packed,1,,\n",
            "placement: expected consolidated or spread, got \"packed\"",
        ),
        (
            "a,V100,1,spread,1,,\n",
            "placement: a 1-GPU job cannot be spread",
        ),
        (
            "a,V100,1,consolidated,0,,\n",
            "rate: 0 on the reference GPU V100",
        ),
        (
            ",V100,1,consolidated,1,,\n",
            "workload: expected a workload type name",
        ),
        (
            "a,V100,1,consolidated,1,,2\n",
            "partner_rate: a row without a partner has no partner_rate",
        ),
        (
            "a,V100,2,consolidated,1,a,1\n",
            "gpus: a pair shares one GPU",
        ),
        (
            "a,V100,1,consolidated,1,a,\n",
            "partner_rate: expected a rate >= 0, got \"\"",
        ),
        (
            "a,V100,1,consolidated,1,a,0\n",
            "partner_rate: rates 1 and 0: both 0 (cannot share) or both > 0",
        ),
        (
            "a,V100,1,consolidated,NaN,a,1\n",
            "rate: expected a finite rate >= 0, got NaN",
        ),
    ];
    for (row, expected) in cases {
        let e = err(row);
        assert!(e.starts_with(&line4(expected)), "{row}: {e}");
    }
}

#[test]
fn duplicates_and_orphan_pairs_are_refused() {
    // The same entry twice, V100 spelt two ways.
    let e = err("a,V100,1,consolidated,1,,\na,v100-16g,1,consolidated,2,,\n");
    assert_eq!(
        e,
        "t.csv line 5, field workload: duplicate entry (first on line 4)"
    );
    // A pair again in the other order.
    let e = err("a,V100,1,consolidated,1,,\nb,V100,1,consolidated,1,,\n\
                 a,V100,1,consolidated,1,b,1\nb,V100,1,consolidated,1,a,1\n");
    assert_eq!(
        e,
        "t.csv line 7, field partner: duplicate pair (in either order) (first on line 6)"
    );
    // A pair whose partner has no rate alone on that GPU (only on 2 GPUs), anywhere in the file.
    let e = err("a,V100,1,consolidated,1,b,1\na,V100,1,consolidated,1,,\n\
                 b,V100,2,consolidated,1,,\n");
    assert_eq!(
        e,
        "t.csv line 4, field partner: b has no rate alone on 1 x V100 (consolidated): a pair \
         needs both jobs' single-job rates"
    );
    let e = err(
        "a,T4,1,consolidated,1,,\nb,T4,1,consolidated,1,,\nb,V100,1,consolidated,1,,\n\
                 a,V100,1,consolidated,1,b,1\n",
    );
    assert!(
        e.starts_with("t.csv line 7, field workload: a has no rate alone"),
        "{e}"
    );
}

#[test]
fn head_lines_and_header_are_checked() {
    let read = |text: &str| {
        file::read(text.as_bytes(), "t.csv")
            .unwrap_err()
            .to_string()
    };
    assert!(read("").starts_with("t.csv line 1: expected the version line"));
    assert!(read("#lachesis-throughput v2\n").contains("version \"v2\""));
    let e = read("#lachesis-throughput v1\nworkload,gpu\n");
    assert!(
        e.starts_with("t.csv line 2: expected the reference line `#reference,GPU`"),
        "{e}"
    );
    let e = read("#lachesis-throughput v1\n#reference,A1OO\n");
    assert!(
        e.starts_with("t.csv line 2, field reference: unknown GPU model \"A1OO\""),
        "{e}"
    );
    let e = read("#lachesis-throughput v1\n#reference,V100\n");
    assert!(e.starts_with("t.csv line 3: expected a header"), "{e}");
    let e = read(
        "#lachesis-throughput v1\n#reference,V100\nworkload,gpu,gpus,placement,rate,partner,partner_rate,x\n",
    );
    assert!(e.contains("line 3: unknown column \"x\""), "{e}");
    // A reference the table has no rate on.
    let e = read(&HEAD.replace("V100", "A100"));
    assert_eq!(
        e,
        "t.csv line 2, field reference: the table has no rate on its reference GPU A100"
    );
    let e = read(&format!("{HEAD}a,V100,1,consolidated,1\n"));
    assert!(
        e.contains("line 4: expected 7 fields like the header, got 5"),
        "{e}"
    );
}

#[test]
fn presets_and_files_load_by_name() {
    assert_eq!(
        ThroughputPreset::parse(" Gavel "),
        Some(ThroughputPreset::Gavel)
    );
    assert_eq!(load_table("gavel").unwrap(), gavel::table());
    let e = load_table("no/such/table.csv").unwrap_err();
    assert!(e.to_string().starts_with("no/such/table.csv: "), "{e}");
    let e = sia::load(std::path::Path::new("no/such/dir")).unwrap_err();
    assert!(
        e.to_string().starts_with(
            "no/such/dir: Sia's throughput profiles are not there. They carry no licence"
        ),
        "{e}"
    );
}

#[test]
fn known_workloads_are_the_presets_and_the_extras() {
    let known = |name: &str| known_workload(name, &["my-model".into()]).map(|w| w.to_string());
    assert_eq!(known("a3c").as_deref(), Some("A3C"));
    assert_eq!(known(" ImageNet ").as_deref(), Some("imagenet"));
    assert_eq!(known("MY-MODEL").as_deref(), Some("my-model"));
    assert_eq!(known("ResNet-18"), None);
    assert_eq!(known(""), None);
}

fn shared_sia_dir() -> Option<PathBuf> {
    let dir = std::env::var_os(sia::DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/throughputs")
        })
        .join("sia/traces");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!(
            "skipped: {} not found (set {})",
            dir.display(),
            sia::DIR_ENV
        );
        None
    }
}

/// Spot values computed from rows of Sia's `placements-*.csv`, quoted here.
#[test]
fn sia_preset_spot_values() {
    let Some(dir) = shared_sia_dir() else { return };
    let t = sia::load(&dir).unwrap();
    assert_eq!(t.reference().name(), "RTX-2080Ti");
    let names: Vec<&str> = t.workloads().iter().map(WorkloadType::as_str).collect();
    assert_eq!(names, sia::MODELS);
    let gpus: Vec<&str> = t.gpu_models().iter().map(|g| g.name()).collect();
    assert_eq!(gpus, ["A100", "RTX-2080Ti", "RTX-6000", "T4", "V100"]);
    let g = |name: &str| t.gpu(name).unwrap();
    let (c, s) = (Consolidation::Consolidated, Consolidation::Spread);
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * y.abs();

    // cifar10 (B = 725), placements-rtx.csv:
    //   725,0.22750617563724518,0.00028856599889695643,1
    //   725,0.23699506123860678,0.014084930658340454,4
    //   725,0.23727830251057944,0.010735885381698609,22
    let cifar = t.workload("cifar10").unwrap();
    let rtx = g("rtx2080ti");
    assert!(close(
        t.rate(cifar, rtx, 1, c).unwrap(),
        725.0 / 0.22750617563724518
    ));
    assert!(close(
        t.rate(cifar, rtx, 4, c).unwrap(),
        4.0 * 725.0 / 0.23699506123860678
    ));
    assert!(close(
        t.rate(cifar, rtx, 4, s).unwrap(),
        4.0 * 725.0 / 0.23727830251057944
    ));
    // placements-aws.csv `1,725,0.4961158037185669,...`: 1461 samples/s on T4, as the README.
    let t4_rate = t.rate(cifar, g("T4"), 1, c).unwrap();
    assert!(close(t4_rate, 725.0 / 0.4961158037185669));
    assert_eq!(t4_rate.round(), 1461.0);
    assert_eq!(t.speed(cifar, rtx, 1, c, 1), Ok(1.0));
    // placements-azure.csv `725,0.18323548634847006,0.014309376080830891,44`: 8 V100s over
    // two nodes, spread.
    assert!(close(
        t.rate(cifar, g("V100"), 8, s).unwrap(),
        8.0 * 725.0 / 0.18323548634847006
    ));

    // imagenet (B = 163) on 8 A100s, placements-dgx-ext.csv
    // `163,0.2703625112771988,0.04571404802054167,8`.
    let imagenet = t.workload("imagenet").unwrap();
    let a100 = g("A100");
    assert!(close(
        t.rate(imagenet, a100, 8, c).unwrap(),
        8.0 * 163.0 / 0.2703625112771988
    ));

    // ncf (B = 32768) on 2 T4s: placement 2 is profiled up to 16413, so one accumulation step
    // at atomic batch 16384, between `2,11606,0.023703013526068795,0.011338906900087991` and
    // `2,16413,0.02660139931572808,0.012619029412004686`.
    let ncf = t.workload("ncf").unwrap();
    let f = (16384.0 - 11606.0) / (16413.0 - 11606.0);
    let step = 0.023703013526068795 + f * (0.02660139931572808 - 0.023703013526068795);
    let sync = 0.011338906900087991 + f * (0.012619029412004686 - 0.011338906900087991);
    let expected = 2.0 * 32768.0 / (step + (step - sync));
    assert!(close(t.rate(ncf, g("T4"), 2, c).unwrap(), expected));

    // bert (B = 11) on 1 RTX 2080 Ti: placements-rtx.csv `11,0.4126834273338318,...,1`.
    let bert = t.workload("bert").unwrap();
    assert!(close(
        t.rate(bert, rtx, 1, c).unwrap(),
        11.0 / 0.4126834273338318
    ));

    // The Quadro RTX 6000 node has 4 GPUs: nothing larger, nothing spread.
    let quad = g("Quadro-RTX-6000");
    assert!(t.rate(cifar, quad, 4, c).is_ok());
    assert!(t.rate(cifar, quad, 8, c).is_err());
    assert!(t.rate(cifar, quad, 2, s).is_err());
    // rtx imagenet lacks placement 18 (9 GPUs over 8-GPU nodes): no row, an error.
    assert!(t.rate(imagenet, rtx, 9, c).is_err());
    // No sharing data.
    assert_eq!(t.pair(cifar, cifar, rtx), None);
    // Flagged as measured: ncf about 10x slower on V100 than on T4.
    let v100_over_t4 = t.rate(ncf, g("V100"), 1, c).unwrap() / t.rate(ncf, g("T4"), 1, c).unwrap();
    assert!((0.1..0.12).contains(&v100_over_t4), "{v100_over_t4}");
    // The README's 1-GPU table at the common batch, samples/s.
    for (model, gpu, expected) in [
        ("bert", "A100", 67.4),
        ("deepspeech2", "V100", 79.3),
        ("yolov3", "RTX-6000", 34.9),
        ("imagenet", "RTX-2080Ti", 322.0),
    ] {
        let rate = t.rate(t.workload(model).unwrap(), g(gpu), 1, c).unwrap();
        assert!(
            (rate - expected).abs() <= 0.002 * expected,
            "{model} {gpu} {rate}"
        );
    }
}

#[test]
fn sia_preset_round_trips_through_the_file_format() {
    let Some(dir) = shared_sia_dir() else { return };
    let t = sia::load(&dir).unwrap();
    let mut text = Vec::new();
    file::write(&t, &mut text).unwrap();
    assert_eq!(file::read(text.as_slice(), "sia").unwrap(), t);
}

fn gpu_jobs(gpus: &[u32], duration_s: u64) -> Trace {
    let jobs: Vec<_> = gpus
        .iter()
        .map(|&g| job("j", 0, TaskRequest::whole(g, 0, 0)))
        .collect();
    let durations = vec![SimTime::from_secs(duration_s); jobs.len()];
    Trace::new("t", jobs, durations, vec!["d".into()]).unwrap()
}

fn types(trace: &Trace) -> Vec<Option<String>> {
    trace
        .jobs()
        .iter()
        .map(|j| j.workload.as_ref().map(ToString::to_string))
        .collect()
}

/// Gavel's rule: 1-GPU jobs uniform over all 26 templates, multi-GPU jobs uniform over the 19
/// distributed ones and never another (`scheduler/utils.py:102-108`).
#[test]
fn gavel_rule_matches_its_source() {
    let n = 26_000;
    let mut shapes = vec![1; n];
    shapes.extend(std::iter::repeat_n(4, 19_000));
    shapes.extend([0]);
    let (typed, account) = assign_workloads(&gpu_jobs(&shapes, 60), WorkloadRule::Gavel, 7);
    assert_eq!(
        (account.assigned, account.cpu_only, account.kept),
        (45_000, 1, 0)
    );
    assert_eq!(account.label(), "gavel (seed 7)");
    let types = types(&typed);
    assert_eq!(types[n + 19_000], None);
    let count = |range: std::ops::Range<usize>, name: &str| {
        types[range]
            .iter()
            .filter(|t| t.as_deref() == Some(name))
            .count() as f64
    };
    for t in gavel::TEMPLATES {
        // Expected 1000 each; 5 standard deviations is about 160.
        let single = count(0..n, t.name);
        assert!((single - 1000.0).abs() < 160.0, "{}: {single}", t.name);
        let multi = count(n..n + 19_000, t.name);
        if t.distributed {
            assert!((multi - 1000.0).abs() < 160.0, "{}: {multi}", t.name);
        } else {
            assert_eq!(multi, 0.0, "{} is not distributed", t.name);
        }
    }
    // Every type given is in the Gavel preset.
    let table = gavel::table();
    assert!(
        account
            .counts
            .keys()
            .all(|name| table.workload(name).is_ok())
    );
}

/// Sia's rule: by GPU-hours, with the 1-10 band split evenly between deepspeech2 and bert
/// (`generate_workload.py:55-76`).
#[test]
fn sia_rule_matches_its_source() {
    let hour = 3600;
    // (GPUs, duration s, expected type; None = the coin).
    let cases: [(u32, u64, Option<&str>); 8] = [
        (1, hour - 1, Some("cifar10")),
        (4, hour / 4 - 1, Some("cifar10")),
        (1, hour, None),
        (2, 5 * hour - 1, None),
        (8, 10 * hour / 8, Some("yolov3")),
        (1, 100 * hour - 1, Some("yolov3")),
        (16, 100 * hour / 16, Some("imagenet")),
        (8, 1000 * hour, Some("imagenet")),
    ];
    for (gpus, secs, expected) in cases {
        let (typed, _) = assign_workloads(&gpu_jobs(&[gpus], secs), WorkloadRule::Sia, 1);
        let got = types(&typed)[0].clone().unwrap();
        match expected {
            Some(name) => assert_eq!(got, name, "{gpus} GPUs x {secs} s"),
            None => assert!(got == "bert" || got == "deepspeech2", "{got}"),
        }
    }
    // A fractional GPU counts its share: 500 milli-GPU x 1.5 h = 0.75 GPU-h.
    let mut half = job("h", 0, TaskRequest::whole(1, 0, 0));
    half.task.gpu_milli = 500;
    let trace = Trace::new(
        "t",
        vec![half],
        vec![SimTime::from_secs(5400)],
        vec!["d".into()],
    )
    .unwrap();
    assert_eq!(
        types(&assign_workloads(&trace, WorkloadRule::Sia, 1).0)[0].as_deref(),
        Some("cifar10")
    );
    // The coin is fair: 4000 jobs in the 1-10 band, about half bert (5 sd = 158).
    let (_, account) = assign_workloads(&gpu_jobs(&[2; 4000], 2 * hour), WorkloadRule::Sia, 3);
    let bert = account.counts["bert"] as f64;
    assert!((bert - 2000.0).abs() < 158.0, "{bert}");
    assert_eq!(account.counts["bert"] + account.counts["deepspeech2"], 4000);
}

#[test]
fn typed_jobs_keep_their_type() {
    let mut trace = gpu_jobs(&[1, 1], 60);
    let mut jobs = trace.jobs().to_vec();
    jobs[0].workload = WorkloadType::new("ncf");
    trace = Trace::new("t", jobs, trace.true_durations().to_vec(), vec!["d".into()]).unwrap();
    let (typed, account) = assign_workloads(&trace, WorkloadRule::Sia, 0);
    assert_eq!((account.kept, account.assigned), (1, 1));
    assert_eq!(types(&typed), [Some("ncf".into()), Some("cifar10".into())]);
}

proptest! {
    /// Same seed, same types; the rest of every job untouched.
    #[test]
    fn rules_are_deterministic_under_a_seed(
        shapes in prop::collection::vec((0u32..=8, 1u64..1_000_000), 1..60),
        seed in any::<u64>(),
        gavel in any::<bool>(),
    ) {
        let jobs: Vec<_> = shapes.iter().map(|&(g, _)| job("j", 0, TaskRequest::whole(g, 0, 0))).collect();
        let durations = shapes.iter().map(|&(_, d)| SimTime::from_secs(d)).collect();
        let trace = Trace::new("t", jobs, durations, vec!["d".into()]).unwrap();
        let rule = if gavel { WorkloadRule::Gavel } else { WorkloadRule::Sia };
        let (first, account) = assign_workloads(&trace, rule, seed);
        let (second, again) = assign_workloads(&trace, rule, seed);
        prop_assert_eq!(&first, &second);
        prop_assert_eq!(&account, &again);
        for (typed, original) in first.jobs().iter().zip(trace.jobs()) {
            prop_assert_eq!(typed.workload.is_some(), original.gpus_total() > 0);
            let untyped = JobSpec { workload: None, ..typed.clone() };
            prop_assert_eq!(&untyped, original);
        }
    }

    /// Any table built from valid entries writes and reads back equal.
    #[test]
    fn tables_round_trip_through_the_file_format(
        singles in prop::collection::vec(
            (0usize..4, 0usize..4, 1u32..=16, any::<bool>(), 0.0f64..1e6), 1..40),
        pairs in prop::collection::vec((0usize..4, 0usize..4, 0.0f64..100.0, 0.0f64..100.0), 0..20),
    ) {
        let names = ["a", "ResNet-50 (batch size 64)", "x,y \"q\"", "cifar10"];
        let gpus = ["V100", "T4", "A100", "K80"];
        let mut b = TableBuilder::new("p", "V100").unwrap();
        // Every workload alone on 1 reference GPU, so that every pair on V100 has its singles.
        for name in names {
            b.single(&WorkloadType::new(name).unwrap(), "V100", 1, Consolidation::Consolidated, 1.0, 0).unwrap();
        }
        for (w, g, n, spread, rate) in singles {
            let placement = if spread && n > 1 { Consolidation::Spread } else { Consolidation::Consolidated };
            let rate = if gpus[g] == "V100" { rate + 1.0 } else { rate };
            let _ = b.single(&WorkloadType::new(names[w]).unwrap(), gpus[g], n, placement, rate, 0);
        }
        for (x, y, r1, r2) in pairs {
            let rates = if r1 == 0.0 || r2 == 0.0 { [0.0, 0.0] } else { [r1, r2] };
            let _ = b.pair(&WorkloadType::new(names[x]).unwrap(), &WorkloadType::new(names[y]).unwrap(), "V100", rates, 0);
        }
        let table = b.finish().unwrap();
        let mut text = Vec::new();
        file::write(&table, &mut text).unwrap();
        let back = file::read(text.as_slice(), "p").unwrap();
        prop_assert_eq!(back, table);
    }

    /// Random bytes after the head lines are read or refused, never a panic.
    #[test]
    fn random_rows_never_panic(rows in prop::collection::vec(prop::collection::vec("[-a-zA-Z0-9.,]{0,6}", 7), 0..6)) {
        let text: String = rows.iter().map(|r| r.join(",") + "\n").collect();
        let _ = read_str(&text);
    }
}

#[test]
fn preset_gpu_model_lists_match_the_tables() {
    let gavel = ThroughputPreset::Gavel.load().expect("shipped");
    let names: Vec<&str> = gavel.gpu_models().iter().map(|g| g.name()).collect();
    assert_eq!(names, ThroughputPreset::Gavel.gpu_models());
    // Sia's table is read from the shared artifact, when it is there.
    if let Ok(sia) = ThroughputPreset::Sia.load() {
        let names: Vec<&str> = sia.gpu_models().iter().map(|g| g.name()).collect();
        assert_eq!(names, ThroughputPreset::Sia.gpu_models());
    }
}

#[test]
fn nearest_covered_model_table() {
    let gavel = ThroughputPreset::Gavel.gpu_models();
    let sia = ThroughputPreset::Sia.gpu_models();
    // Catalog speeds: K80 0.35, T4 0.40, P100 0.55, RTX-2080Ti 0.65, RTX-6000 0.72, A10 0.75,
    // V100 1.0, A100 2.2, A100-80G 2.3, H800 3.3. Distance |ln(a / b)|.
    let cases = [
        ("P100", gavel, Some("P100")),     // covered
        ("v100-16g", gavel, Some("V100")), // alias of a covered model
        ("V100M32", gavel, Some("V100")),  // 1.0 = 1.0
        ("T4", gavel, Some("K80")),        // ln(0.40/0.35) = 0.13 < ln(0.55/0.40) = 0.32
        ("MISC", gavel, Some("V100")),     // assumed V100 class (1.0)
        ("A10", gavel, Some("V100")),      // ln(1/0.75) = 0.29 < ln(0.75/0.55) = 0.31
        ("H800", gavel, Some("V100")),
        ("P100", sia, Some("RTX-2080Ti")), // ln(0.65/0.55) = 0.17 < ln(0.55/0.40) = 0.32
        ("A10", sia, Some("RTX-6000")),    // ln(0.75/0.72) = 0.04
        ("A100-SXM4-80GB", sia, Some("A100")),
        ("GPU-series-1", sia, Some("V100")),
        ("TPUv4", gavel, None), // not in the catalog
    ];
    for (gpu, covered, want) in cases {
        assert_eq!(
            nearest_covered_model(gpu, covered),
            want,
            "{gpu} onto {covered:?}"
        );
    }
}
