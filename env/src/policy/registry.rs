//! The registry: policy names (`ORDER/PLACE[/MODIFIER...]`) to constructors. Configuration
//! and the command line pick policies by these names; nobody edits code to switch.

use super::gavel::{GavelConfig, GavelObjective, GavelRounds};
use super::heuristic::{Composite, Fifo, Modifier, Ordering, Placer, StrategyPlacer};
use super::modifier::{
    ClassPreempt, Colocate, ColocateConfig, Easy, ElasticAlloc, ElasticConfig, GittinsPreempt,
    LasPreempt,
};
use super::order::{
    Drf, Gittins, GittinsConfig, HetLas, HpcFunction, HpcPriority, PriorityOrder, Shortest,
    Tiresias, TiresiasConfig,
};
use super::place::{
    DotProduct, Fastest, Fgd, GpuClustering, GpuPacking, MostAllocated, RandomFit, Topo,
};
use super::select::{PolicyBuilder, Select, SelectConfig};
use super::{Policy, PolicyError};
use crate::cluster::FitStrategy;
use crate::throughput::ThroughputTable;
use crate::units::SimTime;
use serde::Serialize;
use std::sync::Arc;

/// What a policy is built with besides its name.
#[derive(Debug, Clone, Default)]
pub struct PolicyOptions {
    /// Seed for randomised parts.
    pub seed: u64,
    /// True durations by job id, for the explicitly labelled `oracle` orderings only (upper
    /// bounds, never a real scheduler's knowledge). `None` everywhere else.
    pub oracle_durations: Option<Arc<[SimTime]>>,
    /// Tiresias' queues and promotion, shared by the `tiresias` ordering and `las-preempt`.
    pub tiresias: TiresiasConfig,
    /// The Gittins ordering's and preemption's knobs.
    pub gittins: GittinsConfig,
    /// The throughput table of the run, for the parts that read rates (`colocate`,
    /// `elastic`); they refuse to be built without one.
    pub throughputs: Option<Arc<ThroughputTable>>,
    /// `colocate`'s knobs.
    pub colocate: ColocateConfig,
    /// `elastic`'s knobs.
    pub elastic: ElasticConfig,
    /// The `gavel-*` policies' rounds.
    pub gavel: GavelConfig,
    /// The `select` meta-policy's knobs.
    pub select: SelectConfig,
}

/// The table a rate-reading part `part` needs, or why it cannot be built.
fn table_for(options: &PolicyOptions, part: &str) -> Result<Arc<ThroughputTable>, String> {
    options.throughputs.clone().ok_or_else(|| {
        format!(
            "modifier `{part}` reads a throughput table: run with --throughputs (throughputs = ...)"
        )
    })
}

/// The tunable knobs of registered parts, as a policy config file gives them
/// (`--policy-config FILE`, TOML; unknown fields are rejected):
///
/// ```toml
/// [tiresias]
/// thresholds_gpu_s = [3250.0, 7200.0]
/// promote_knob = 8.0
///
/// [gittins]
/// min_class_samples = 16
/// preempt_margin = 2.0
///
/// [colocate]
/// threshold = 1.0
/// round_s = 60.0
///
/// [elastic]
/// min_efficiency = 0.5
/// round_s = 60.0
///
/// [gavel]
/// round_s = 360.0
/// reset_s = 1920.0
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    pub tiresias: TiresiasConfig,
    pub gittins: GittinsConfig,
    pub colocate: ColocateConfig,
    pub elastic: ElasticConfig,
    pub gavel: GavelConfig,
    pub select: SelectConfig,
}

/// One registered part, for `lachesis` help and docs.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyInfo {
    /// `ordering`, `placement`, `modifier`, or `policy` (a whole policy, named alone).
    pub part: &'static str,
    pub name: &'static str,
    pub summary: &'static str,
}

type OrderingCtor = fn(&PolicyOptions) -> Result<Box<dyn Ordering>, String>;
type PlacerCtor = fn(&PolicyOptions) -> Box<dyn Placer>;
type ModifierCtor = fn(&PolicyOptions) -> Result<Box<dyn Modifier>, String>;
type WholeCtor = fn(&str, &PolicyOptions) -> Result<Box<dyn Policy>, String>;

/// Whole policies, named alone (no `/`): optimisers that decide order, placement and
/// preemption together.
const WHOLE: &[(&str, &str, WholeCtor)] = &[
    (
        "gavel-maxmin",
        "Gavel's heterogeneity-aware max-min fairness (LAS) in 6-minute rounds: an LP gives \
         each job its time share per GPU model from the table's rates; rounds follow it \
         (needs tick_s = 360)",
        |n, o| gavel(n, GavelObjective::MaxMin, false, o),
    ),
    (
        "gavel-maxmin-ss",
        "gavel-maxmin with space sharing: the LP also gives pairs of 1-GPU typed jobs time \
         together on one GPU at the table's pair rates (Gavel's max_min_fairness_packed; \
         needs tick_s = 360 and a table)",
        |n, o| gavel(n, GavelObjective::MaxMin, true, o),
    ),
    (
        "gavel-maxmin-agnostic",
        "Gavel's heterogeneity-agnostic max-min fairness: the same rounds with every rate 1 \
         (the baseline Gavel compares with; needs tick_s = 360)",
        |n, o| gavel(n, GavelObjective::MaxMinAgnostic, false, o),
    ),
    (
        "gavel-maxmin-agnostic-ss",
        "gavel-maxmin-agnostic with space sharing: pair rates relative to each job's rate \
         alone on that model (needs tick_s = 360 and a table)",
        |n, o| gavel(n, GavelObjective::MaxMinAgnostic, true, o),
    ),
    (
        "gavel-maxsum",
        "Gavel's max-sum throughput in rounds: time shares maximising the summed speed \
         relative to the reference GPU (needs tick_s = 360)",
        |n, o| gavel(n, GavelObjective::MaxSum, false, o),
    ),
    (
        "gavel-maxsum-ss",
        "gavel-maxsum with space sharing: pairs of 1-GPU typed jobs on one GPU at the table's \
         pair rates (needs tick_s = 360 and a table)",
        |n, o| gavel(n, GavelObjective::MaxSum, true, o),
    ),
    (
        "gavel-ftf-oracle",
        "UPPER BOUND: Gavel's finish-time fairness (Themis) in rounds, on true remaining work \
         (needs oracle durations; tick_s = 360)",
        |n, o| gavel(n, GavelObjective::FinishTimeFairnessOracle, false, o),
    ),
    (
        "gavel-makespan-oracle",
        "UPPER BOUND: Gavel's least-makespan allocation in rounds, on true remaining work \
         (needs oracle durations; tick_s = 360)",
        |n, o| gavel(n, GavelObjective::MakespanOracle, false, o),
    ),
];

/// A `gavel-*` policy; `space_sharing` for the `-ss` names.
fn gavel(
    name: &str,
    objective: GavelObjective,
    space_sharing: bool,
    options: &PolicyOptions,
) -> Result<Box<dyn Policy>, String> {
    let rounds = match (&options.oracle_durations, objective.is_oracle()) {
        (Some(truth), true) => GavelRounds::oracle(
            name,
            objective,
            &options.gavel,
            std::sync::Arc::clone(truth),
        )?,
        _ => GavelRounds::new(name, objective, &options.gavel)?,
    };
    if space_sharing && options.throughputs.is_none() {
        return Err(format!(
            "`{name}` pairs jobs at a throughput table's pair rates: run with --throughputs \
             (throughputs = ...)"
        ));
    }
    Ok(Box::new(if space_sharing {
        rounds.with_space_sharing()
    } else {
        rounds
    }))
}

const ORDERINGS: &[OrderingEntry] = &[
    (
        "fifo",
        "first come, first served; the head of the queue blocks the rest",
        |_| Ok(Box::new(Fifo)),
    ),
    (
        "priority",
        "QoS class, then priority (higher first), then submit; skips jobs that do not fit",
        |_| Ok(Box::new(PriorityOrder)),
    ),
    (
        "sjf",
        "shortest job first on the user estimate, else a duration predictor learned online",
        |_| Ok(Box::new(Shortest::learned(false))),
    ),
    (
        "srtf",
        "shortest remaining time first (estimate or prediction minus attained service)",
        |_| Ok(Box::new(Shortest::learned(true))),
    ),
    (
        "sjf-oracle",
        "UPPER BOUND: shortest job first on true durations (needs oracle durations)",
        |o| Ok(Box::new(Shortest::oracle(false, o)?)),
    ),
    (
        "srtf-oracle",
        "UPPER BOUND: shortest remaining time first on true durations (needs oracle durations)",
        |o| Ok(Box::new(Shortest::oracle(true, o)?)),
    ),
    (
        "wfp3",
        "HPC priority -(wait/request)^3 x size; the best job blocks the rest (add /easy)",
        |_| Ok(Box::new(HpcPriority::new(HpcFunction::Wfp3))),
    ),
    (
        "unicep",
        "HPC priority -wait / (log2(size) x request); the best job blocks the rest",
        |_| Ok(Box::new(HpcPriority::new(HpcFunction::Unicep))),
    ),
    (
        "f1",
        "HPC priority log10(request) x size + 870 log10(submit), lowest first; blocks",
        |_| Ok(Box::new(HpcPriority::new(HpcFunction::F1))),
    ),
    (
        "tiresias",
        "discretized 2D-LAS: queues by attained GPU service, FIFO within, starved jobs promoted",
        |o| Ok(Box::new(Tiresias::new(&o.tiresias)?)),
    ),
    (
        "het-las",
        "heterogeneity-aware 2D-LAS: tiresias on GPU service weighted by the share of its best \
         table speed the job got (Gavel's normalised service); tiresias for untyped jobs",
        |o| Ok(Box::new(HetLas::new(&o.tiresias)?)),
    ),
    (
        "drf",
        "dominant resource fairness across tenants (progressive filling over the queue)",
        |_| Ok(Box::new(Drf)),
    ),
    (
        "gittins",
        "Gittins index of attained service over run times learned online per GPU class, per \
         GPU: LAS-like on heavy tails, FIFO/SJF-like on similar run times",
        |o| Ok(Box::new(Gittins::new(&o.gittins)?)),
    ),
];

const MODIFIERS: &[ModifierEntry] = &[
    (
        "easy",
        "EASY backfilling: the blocked head gets a reservation at its shadow time (from run-time \
         estimates); later jobs start now if they cannot delay it",
        |_| Ok(Box::new(Easy::default())),
    ),
    (
        "preempt",
        "a blocked job preempts a minimal set of preemptible jobs of strictly lower class \
         (QoS, then priority)",
        |_| Ok(Box::new(ClassPreempt)),
    ),
    (
        "las-preempt",
        "Tiresias LAS: a blocked job preempts the most-served preemptible jobs of a higher \
         GPU-time queue (needs tick_s > 0)",
        |o| Ok(Box::new(LasPreempt::new(&o.tiresias)?)),
    ),
    (
        "gittins-preempt",
        "a blocked job preempts preemptible jobs of a lower Gittins index (by a margin), \
         lowest first (needs tick_s > 0)",
        |o| Ok(Box::new(GittinsPreempt::new(&o.gittins)?)),
    ),
    (
        "colocate",
        "Gavel space sharing: a blocked 1-GPU typed job shares a running 1-GPU job's GPU when \
         the pair's summed normalised rate beats 1.0 (needs a throughput table)",
        |o| {
            Ok(Box::new(Colocate::new(
                table_for(o, "colocate")?,
                &o.colocate,
            )?))
        },
    ),
    (
        "elastic",
        "Pollux/Sia-like: start blocked elastic jobs smaller or shrink a running one to admit \
         them; give idle GPUs to elastic jobs: move to a GPU model 1.25x faster, else grow \
         by marginal speedup per extra GPU (needs a table)",
        |o| {
            Ok(Box::new(ElasticAlloc::new(
                table_for(o, "elastic")?,
                &o.elastic,
            )?))
        },
    ),
];

const PLACEMENTS: &[PlacerEntry] = &[
    ("first-fit", "lowest-numbered node that fits", |_| {
        Box::new(StrategyPlacer::new("first-fit", FitStrategy::FirstFit))
    }),
    (
        "best-fit",
        "node with the least free GPU (then CPU) that fits",
        |_| Box::new(StrategyPlacer::new("best-fit", FitStrategy::BestFit)),
    ),
    (
        "worst-fit",
        "node with the most free GPU (then CPU): spreads load",
        |_| Box::new(StrategyPlacer::new("worst-fit", FitStrategy::WorstFit)),
    ),
    (
        "most-allocated",
        "Kubernetes MostAllocated: node fullest after placing (GPU, CPU, memory averaged)",
        |_| Box::new(MostAllocated),
    ),
    (
        "dot-product",
        "Tetris: node whose free capacity best aligns with the demand (dot product)",
        |_| Box::new(DotProduct),
    ),
    (
        "gpu-packing",
        "FGD paper's packing: shares on the fullest GPU that holds them, GPUs on the fullest node",
        |_| Box::new(GpuPacking),
    ),
    (
        "gpu-clustering",
        "FGD paper's clustering: node already running the most tasks of the same GPU request",
        |_| Box::new(GpuClustering),
    ),
    (
        "random-fit",
        "uniformly random node that fits (seeded)",
        |o| Box::new(RandomFit::new(o.seed)),
    ),
    (
        "fgd",
        "Fragmentation Gradient Descent (ATC'23): least growth of fragmentation, mix learned online",
        |_| Box::new(Fgd::default()),
    ),
    (
        "topo",
        "gangs on fewest nodes, then one NVLink domain, then one rack; single tasks best fit",
        |_| Box::new(Topo),
    ),
    (
        "fastest",
        "typed jobs on the GPU model where the throughput table says they run fastest, among \
         those with room (best fit within it); untyped jobs best fit",
        |_| Box::new(Fastest::default()),
    ),
];

fn names<'a>(it: impl Iterator<Item = &'a str>) -> String {
    it.collect::<Vec<_>>().join(", ")
}

/// Every registered part.
pub fn policy_catalog() -> Vec<PolicyInfo> {
    let orderings = ORDERINGS.iter().map(|(n, s, _)| PolicyInfo {
        part: "ordering",
        name: n,
        summary: s,
    });
    let placements = PLACEMENTS.iter().map(|(n, s, _)| PolicyInfo {
        part: "placement",
        name: n,
        summary: s,
    });
    let modifiers = MODIFIERS.iter().map(|(n, s, _)| PolicyInfo {
        part: "modifier",
        name: n,
        summary: s,
    });
    let whole = WHOLE.iter().map(|(n, s, _)| PolicyInfo {
        part: "policy",
        name: n,
        summary: s,
    });
    let select = std::iter::once(PolicyInfo {
        part: "policy",
        name: "select",
        summary: "follows, epoch by epoch, whichever candidate policy does best rolled forward \
                  over sampled futures (select:A+B+... names them; default: the library's \
                  sjf, fifo, LAS and Gittins families; docs/select.md)",
    });
    orderings
        .chain(placements)
        .chain(modifiers)
        .chain(whole)
        .chain(select)
        .collect()
}

/// Builds the policy `name` (e.g. `fifo/best-fit`); `seed` feeds any randomised part.
pub fn build_policy(name: &str, seed: u64) -> Result<Box<dyn Policy>, PolicyError> {
    build_policy_with(
        name,
        &PolicyOptions {
            seed,
            ..PolicyOptions::default()
        },
    )
}

/// The modifiers that read a throughput table (their constructors refuse to build without
/// one); `every_table_modifier_is_listed` keeps the list in step with `MODIFIERS`.
const TABLE_MODIFIERS: &[&str] = &["colocate", "elastic"];

type OrderingEntry = (&'static str, &'static str, OrderingCtor);
type PlacerEntry = (&'static str, &'static str, PlacerCtor);
type ModifierEntry = (&'static str, &'static str, ModifierCtor);

/// The registry entries `name` is made of, or why it names no policy (the hint lists the
/// parts it could have named).
fn resolve(
    name: &str,
) -> Result<
    (
        &'static OrderingEntry,
        &'static PlacerEntry,
        Vec<&'static ModifierEntry>,
    ),
    PolicyError,
> {
    let unknown = |hint: String| PolicyError::UnknownName {
        name: name.to_string(),
        hint,
    };
    let parts: Vec<&str> = name.trim().split('/').collect();
    let [order, place, modifiers @ ..] = parts.as_slice() else {
        return Err(unknown(format!(
            "expected ORDER/PLACE[/MODIFIER...], e.g. fifo/best-fit (orderings: {}; placements: \
             {}; modifiers: {}), or a whole policy ({})",
            names(ORDERINGS.iter().map(|e| e.0)),
            names(PLACEMENTS.iter().map(|e| e.0)),
            names(MODIFIERS.iter().map(|e| e.0)),
            names(WHOLE.iter().map(|e| e.0))
        )));
    };
    let ordering = ORDERINGS.iter().find(|e| e.0 == *order).ok_or_else(|| {
        unknown(format!(
            "no ordering `{order}` (known: {})",
            names(ORDERINGS.iter().map(|e| e.0))
        ))
    })?;
    let placer = PLACEMENTS.iter().find(|e| e.0 == *place).ok_or_else(|| {
        unknown(format!(
            "no placement `{place}` (known: {})",
            names(PLACEMENTS.iter().map(|e| e.0))
        ))
    })?;
    let modifiers = modifiers
        .iter()
        .map(|m| {
            MODIFIERS.iter().find(|e| e.0 == *m).ok_or_else(|| {
                let known = if MODIFIERS.is_empty() {
                    "none are registered yet".to_string()
                } else {
                    format!("known: {}", names(MODIFIERS.iter().map(|e| e.0)))
                };
                unknown(format!("no modifier `{m}` ({known})"))
            })
        })
        .collect::<Result<Vec<_>, PolicyError>>()?;
    Ok((ordering, placer, modifiers))
}

/// Whether the policy `name` has a part that reads a throughput table (`colocate`,
/// `elastic`), so that it cannot run without one; an error when `name` names no policy.
pub fn reads_throughputs(name: &str) -> Result<bool, PolicyError> {
    // The whole policies (Gavel's rounds) use a table where there is one, and run without.
    if WHOLE.iter().any(|e| e.0 == name.trim()) {
        return Ok(false);
    }
    // A selector reads one where a candidate does (learned ones are checked when loaded).
    if let Some(candidates) = Select::parse_name(name) {
        let mut any = false;
        for c in candidates.iter().filter(|c| !c.starts_with("rl")) {
            any |= reads_throughputs(c)?;
        }
        return Ok(any);
    }
    let (_, _, modifiers) = resolve(name)?;
    Ok(modifiers.iter().any(|m| TABLE_MODIFIERS.contains(&m.0)))
}

/// Builds a policy by name with options: the registry's `build_policy_with`, or a harness's
/// that also knows learned policies.
pub type NamedBuild = fn(&str, &PolicyOptions) -> Result<Box<dyn Policy>, PolicyError>;

/// The selector `name` over `candidates` (`Select::parse_name`), each built by `build` with
/// `options` less the true durations (no candidate knows what an oracle does).
pub fn build_select(
    name: &str,
    candidates: Vec<String>,
    options: &PolicyOptions,
    build: NamedBuild,
) -> Result<Box<dyn Policy>, PolicyError> {
    let inner = PolicyOptions {
        oracle_durations: None,
        ..options.clone()
    };
    let builder: PolicyBuilder = Arc::new(move |n: &str| build(n, &inner));
    let cfg = options.select.clone();
    Ok(Box::new(Select::new(
        name,
        candidates,
        cfg,
        options.seed,
        builder,
    )?))
}

/// Builds the policy `name` with `options` (an `oracle` ordering needs true durations).
pub fn build_policy_with(
    name: &str,
    options: &PolicyOptions,
) -> Result<Box<dyn Policy>, PolicyError> {
    let unknown = |hint: String| PolicyError::UnknownName {
        name: name.to_string(),
        hint,
    };
    if let Some(candidates) = Select::parse_name(name) {
        return build_select(name, candidates, options, build_policy_with);
    }
    if let Some(entry) = WHOLE.iter().find(|e| e.0 == name.trim()) {
        return (entry.2)(entry.0, options).map_err(&unknown);
    }
    let (ordering, placer, modifiers) = resolve(name)?;
    let modifiers = modifiers
        .iter()
        .map(|m| (m.2)(options).map_err(&unknown))
        .collect::<Result<Vec<_>, PolicyError>>()?;
    let ordering = (ordering.2)(options).map_err(&unknown)?;
    Ok(Box::new(Composite::with_modifiers(
        ordering,
        (placer.2)(options),
        modifiers,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_config_reads_the_heterogeneity_knobs() {
        let cfg: PolicyConfig = toml::from_str(
            "[colocate]\nthreshold = 1.2\nround_s = 0\n[elastic]\nmin_efficiency = 0.8\n",
        )
        .unwrap();
        assert_eq!(cfg.colocate.threshold, 1.2);
        assert_eq!(cfg.colocate.round_s, 0.0);
        assert_eq!(cfg.elastic.min_efficiency, 0.8);
        // Defaults: Gavel's 6-minute round for sharing, Pollux's and Sia's 60 s for resizing.
        assert_eq!(cfg.elastic.round_s, 60.0);
        assert_eq!(PolicyConfig::default().colocate.round_s, 360.0);
        let err = toml::from_str::<PolicyConfig>("[elastic]\nround = 5\n").unwrap_err();
        assert!(err.to_string().contains("unknown field `round`"), "{err}");
    }

    #[test]
    fn every_table_modifier_is_listed() {
        // Built without a table, a modifier refuses exactly when it is listed as reading one.
        for (name, _, ctor) in MODIFIERS {
            let refused = ctor(&PolicyOptions::default())
                .err()
                .is_some_and(|e| e.contains("reads a throughput table"));
            assert_eq!(refused, TABLE_MODIFIERS.contains(name), "{name}");
        }
        assert!(reads_throughputs("fifo/fastest/colocate").unwrap());
        assert!(reads_throughputs("tiresias/fastest/las-preempt/elastic").unwrap());
        assert!(!reads_throughputs("fifo/fastest").unwrap());
        assert!(!reads_throughputs("gittins/best-fit/gittins-preempt").unwrap());
        // A misspelt part is an error, not "reads no table", wherever it sits.
        let err = reads_throughputs("fifo/best-fit/colocate/nope").unwrap_err();
        assert!(err.to_string().contains("no modifier `nope`"), "{err}");
        assert!(reads_throughputs("srpt").is_err());
    }

    #[test]
    fn builds_registered_names_and_explains_unknown_ones() {
        assert_eq!(
            build_policy("fifo/best-fit", 0).unwrap().name(),
            "fifo/best-fit"
        );
        assert_eq!(
            build_policy("fifo/first-fit", 0).unwrap().name(),
            "fifo/first-fit"
        );
        let err = build_policy("fifo/bestfit", 0).err().unwrap().to_string();
        assert!(err.contains("known: first-fit, best-fit"), "{err}");
        let err = build_policy("fifo", 0).err().unwrap().to_string();
        assert!(err.contains("ORDER/PLACE"), "{err}");
        // A bare word (`srpt`) is told what the parts could be.
        let err = build_policy("srpt", 0).err().unwrap().to_string();
        assert!(
            err.contains("orderings: fifo, priority, sjf")
                && err.contains("placements: first-fit, best-fit")
                && err.contains("modifiers: easy, preempt"),
            "{err}"
        );
        let err = build_policy("fifo/best-fit/nope", 0)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("known: easy, preempt, las-preempt, gittins-preempt, colocate, elastic"),
            "{err}"
        );
        assert_eq!(
            build_policy("fifo/best-fit/preempt/easy", 0)
                .unwrap()
                .name(),
            "fifo/best-fit/preempt/easy"
        );
        assert_eq!(
            build_policy("fifo/first-fit/las-preempt", 0)
                .unwrap()
                .name(),
            "fifo/first-fit/las-preempt"
        );
    }
}
