//! The quota file (TOML): cohorts and queues, as Kueue's Cohorts and ClusterQueues.
//!
//! ```toml
//! [[cohort]]
//! name = "org"
//! # parent = "root"          # cohorts nest
//!
//! [[queue]]
//! name = "vision"
//! cohort = "org"
//! strategy = "BestEffortFIFO" # or StrictFIFO
//! weight = 1.0                # fair sharing's weight
//! [[queue.quota]]
//! flavor = "V100"             # a GPU model, or "default"
//! resource = "gpu"            # gpu (GPUs), cpu (cores) or memory (MiB)
//! nominal = 16
//! borrowing_limit = 8         # optional: no limit
//! lending_limit = 4           # optional: lends everything
//! [queue.preemption]          # optional: Kueue's ClusterQueue preemption, all Never
//! within_cluster_queue = "LowerPriority"  # or LowerOrNewerEqualPriority
//! reclaim_within_cohort = "Any"           # or LowerPriority
//! borrow_within_cohort = "LowerPriority"  # needs reclaim_within_cohort
//! max_priority_threshold = 0              # optional, with borrow_within_cohort
//! ```
//!
//! Every error names the file, line, column and field; unknown fields are refused.

use super::{
    BorrowWithinCohort, FlavorResource, NodeKind, NodeSpec, Preemption, PreemptionPolicy,
    QueueingStrategy, Quota, QuotaTree, Resource,
};
use crate::cluster::{field_at, line_column};
use serde::Deserialize;
use std::ops::Range;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaFile {
    #[serde(default)]
    cohort: Vec<Spanned<Entry>>,
    #[serde(default)]
    queue: Vec<Spanned<Entry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: Spanned<String>,
    /// A cohort's parent cohort.
    #[serde(default)]
    parent: Option<Spanned<String>>,
    /// A queue's cohort.
    #[serde(default)]
    cohort: Option<Spanned<String>>,
    #[serde(default)]
    strategy: Option<Spanned<String>>,
    #[serde(default)]
    weight: Option<Spanned<f64>>,
    #[serde(default)]
    quota: Vec<Spanned<QuotaEntry>>,
    #[serde(default)]
    preemption: Option<Spanned<PreemptionEntry>>,
}

/// A queue's `[queue.preemption]`: Kueue's `ClusterQueuePreemption`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PreemptionEntry {
    #[serde(default)]
    within_cluster_queue: Option<Spanned<String>>,
    #[serde(default)]
    reclaim_within_cohort: Option<Spanned<String>>,
    #[serde(default)]
    borrow_within_cohort: Option<Spanned<String>>,
    #[serde(default)]
    max_priority_threshold: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaEntry {
    flavor: Spanned<String>,
    resource: Spanned<String>,
    nominal: Spanned<f64>,
    #[serde(default)]
    borrowing_limit: Option<Spanned<f64>>,
    #[serde(default)]
    lending_limit: Option<Spanned<f64>>,
}

/// A quota file that cannot be used: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}:{line}:{column}: {field}: {message}")]
pub struct QuotaFileError {
    pub origin: String,
    pub line: usize,
    pub column: usize,
    pub field: String,
    pub message: String,
}

struct Source<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Source<'_> {
    fn at(&self, span: Range<usize>, field: String, message: String) -> QuotaFileError {
        let (line, column) = line_column(self.text, span.start);
        QuotaFileError {
            origin: self.origin.to_string(),
            line,
            column,
            field,
            message,
        }
    }
}

/// An amount in the resource's unit: GPUs and cores to milli, MiB as is.
fn amount(resource: Resource, v: f64) -> Result<i64, String> {
    if !(v.is_finite() && v >= 0.0) {
        return Err(format!("{v} is not an amount >= 0"));
    }
    let scaled = match resource {
        Resource::Gpu | Resource::Cpu => v * 1000.0,
        Resource::Memory => v,
    };
    if (scaled - scaled.round()).abs() > 1e-6 {
        return Err(match resource {
            Resource::Memory => format!("{v}: memory is whole MiB"),
            _ => format!("{v}: at most three decimals (milli units)"),
        });
    }
    if scaled > 1e15 {
        return Err(format!("{v} is too large"));
    }
    Ok(scaled.round() as i64)
}

/// A queue's preemption policies; `at` names the table in errors (`queue[0].preemption`).
fn preemption(
    source: &Source<'_>,
    entry: &Spanned<PreemptionEntry>,
    at: &str,
) -> Result<Preemption, QuotaFileError> {
    let p = entry.get_ref();
    let policy = |value: &Option<Spanned<String>>,
                  field: &str,
                  allowed: &[PreemptionPolicy]|
     -> Result<PreemptionPolicy, QuotaFileError> {
        let Some(v) = value else {
            return Ok(PreemptionPolicy::Never);
        };
        match PreemptionPolicy::parse(v.get_ref()) {
            Some(policy) if allowed.contains(&policy) => Ok(policy),
            _ => {
                let names: Vec<&str> = allowed.iter().map(|p| p.as_str()).collect();
                let message = format!("`{}`: expected {}", v.get_ref(), names.join(", "));
                Err(source.at(v.span(), format!("{at}.{field}"), message))
            }
        }
    };
    use PreemptionPolicy::*;
    let within_cluster_queue = policy(
        &p.within_cluster_queue,
        "within_cluster_queue",
        &[Never, LowerPriority, LowerOrNewerEqualPriority],
    )?;
    let reclaim_within_cohort = policy(
        &p.reclaim_within_cohort,
        "reclaim_within_cohort",
        &[Never, LowerPriority, Any],
    )?;
    let borrow = policy(
        &p.borrow_within_cohort,
        "borrow_within_cohort",
        &[Never, LowerPriority],
    )?;
    if let (LowerPriority, Never, Some(b)) =
        (borrow, reclaim_within_cohort, &p.borrow_within_cohort)
    {
        let message = "needs reclaim_within_cohort other than Never (Kueue refuses it too)".into();
        return Err(source.at(b.span(), format!("{at}.borrow_within_cohort"), message));
    }
    let max_priority_threshold = match &p.max_priority_threshold {
        None => None,
        Some(t) if borrow != LowerPriority => {
            let message = "needs borrow_within_cohort = \"LowerPriority\"".into();
            return Err(source.at(t.span(), format!("{at}.max_priority_threshold"), message));
        }
        Some(t) => Some(i32::try_from(*t.get_ref()).map_err(|_| {
            let message = format!("{} is not a priority (32-bit integer)", t.get_ref());
            source.at(t.span(), format!("{at}.max_priority_threshold"), message)
        })?),
    };
    Ok(Preemption {
        within_cluster_queue,
        reclaim_within_cohort,
        borrow_within_cohort: BorrowWithinCohort {
            lower_priority: borrow == LowerPriority,
            max_priority_threshold,
        },
    })
}

/// Parses a quota file's text; `origin` names it in errors.
///
/// ```
/// use lachesis_env::quota::{parse_quota_toml, FlavorResource, Resource};
/// let text = "[[cohort]]\nname = \"org\"\n[[queue]]\nname = \"a\"\ncohort = \"org\"\n\
///             [[queue.quota]]\nflavor = \"V100\"\nresource = \"gpu\"\nnominal = 8\n";
/// let tree = parse_quota_toml(text, "quotas.toml").unwrap();
/// let a = tree.node("a").unwrap();
/// assert_eq!(tree.available(a, &FlavorResource::new("V100", Resource::Gpu)), 8000);
/// let err = parse_quota_toml("[[queue]]\nname = \"a\"\ncohort = \"nope\"\n", "q.toml").unwrap_err();
/// assert!(err.to_string().starts_with("q.toml:3:10: queue[0].cohort:"), "{err}");
/// ```
pub fn parse_quota_toml(text: &str, origin: &str) -> Result<QuotaTree, QuotaFileError> {
    let source = Source { text, origin };
    let file: QuotaFile = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        let field = field_at(text, span.start);
        source.at(span, field, e.message().trim().to_string())
    })?;
    let mut specs = Vec::new();
    // Where each node's name and parent reference are, for the tree's own errors.
    let mut names: Vec<(String, Range<usize>)> = Vec::new();
    let mut parents: Vec<Option<(String, Range<usize>)>> = Vec::new();
    for (table, kind, entries) in [
        ("cohort", NodeKind::Cohort, &file.cohort),
        ("queue", NodeKind::Queue, &file.queue),
    ] {
        for (i, e) in entries.iter().enumerate() {
            let e = e.get_ref();
            let at = |field: &str| format!("{table}[{i}].{field}");
            let name = e.name.get_ref().trim().to_string();
            if name.is_empty() {
                return Err(source.at(e.name.span(), at("name"), "empty".into()));
            }
            let (parent_key, parent, other) = match kind {
                NodeKind::Cohort => ("parent", &e.parent, (&e.cohort, "cohort")),
                NodeKind::Queue => ("cohort", &e.cohort, (&e.parent, "parent")),
            };
            if let Some(o) = other.0 {
                let message = format!(
                    "a {table} names its cohort with `{parent_key}`, not `{}`",
                    other.1
                );
                return Err(source.at(o.span(), at(other.1), message));
            }
            let mut strategy = QueueingStrategy::default();
            if let Some(s) = &e.strategy {
                if kind == NodeKind::Cohort {
                    let message = "only queues have a queueing strategy".into();
                    return Err(source.at(s.span(), at("strategy"), message));
                }
                strategy = match s.get_ref().trim().to_ascii_lowercase().as_str() {
                    "besteffortfifo" => QueueingStrategy::BestEffortFifo,
                    "strictfifo" => QueueingStrategy::StrictFifo,
                    other => {
                        let message = format!("`{other}`: expected BestEffortFIFO or StrictFIFO");
                        return Err(source.at(s.span(), at("strategy"), message));
                    }
                };
            }
            let weight = match &e.weight {
                Some(w) if !(w.get_ref().is_finite() && *w.get_ref() >= 0.0) => {
                    let message = format!("{} is not a weight >= 0", w.get_ref());
                    return Err(source.at(w.span(), at("weight"), message));
                }
                Some(w) => *w.get_ref(),
                None => 1.0,
            };
            let mut quotas: Vec<(FlavorResource, Quota)> = Vec::new();
            for (k, q) in e.quota.iter().enumerate() {
                let q = q.get_ref();
                let qat = |field: &str| format!("{table}[{i}].quota[{k}].{field}");
                let resource = Resource::parse(q.resource.get_ref()).ok_or_else(|| {
                    let message =
                        format!("`{}`: expected gpu, cpu or memory", q.resource.get_ref());
                    source.at(q.resource.span(), qat("resource"), message)
                })?;
                let flavor = q.flavor.get_ref().trim();
                if flavor.is_empty() {
                    return Err(source.at(q.flavor.span(), qat("flavor"), "empty".into()));
                }
                let fr = FlavorResource::new(flavor, resource);
                if quotas.iter().any(|(f, _)| *f == fr) {
                    let message = format!("{fr} is given twice");
                    return Err(source.at(q.flavor.span(), qat("flavor"), message));
                }
                let value = |v: &Spanned<f64>, field: &str| {
                    amount(resource, *v.get_ref()).map_err(|m| source.at(v.span(), qat(field), m))
                };
                let quota = Quota {
                    nominal: value(&q.nominal, "nominal")?,
                    borrowing_limit: q
                        .borrowing_limit
                        .as_ref()
                        .map(|v| value(v, "borrowing_limit"))
                        .transpose()?,
                    lending_limit: q
                        .lending_limit
                        .as_ref()
                        .map(|v| value(v, "lending_limit"))
                        .transpose()?,
                };
                for (limit, field) in [
                    (&q.borrowing_limit, "borrowing_limit"),
                    (&q.lending_limit, "lending_limit"),
                ] {
                    if let (Some(l), None) = (limit, parent) {
                        let message = format!("needs a cohort (`{parent_key}`) to apply to");
                        return Err(source.at(l.span(), qat(field), message));
                    }
                }
                quotas.push((fr, quota));
            }
            let preemption = match &e.preemption {
                None => Preemption::default(),
                Some(p) if kind == NodeKind::Cohort => {
                    let message = "only queues have preemption policies".into();
                    return Err(source.at(p.span(), at("preemption"), message));
                }
                Some(p) => preemption(&source, p, &at("preemption"))?,
            };
            names.push((name.clone(), e.name.span()));
            parents.push(
                parent
                    .as_ref()
                    .map(|p| (p.get_ref().trim().to_string(), p.span())),
            );
            specs.push(NodeSpec {
                name,
                kind,
                parent: parent.as_ref().map(|p| p.get_ref().trim().to_string()),
                quotas,
                strategy,
                weight,
                preemption,
            });
        }
    }
    let field_of = |name: &str, key: &str| -> (Range<usize>, String) {
        let i = names.iter().position(|(n, _)| n == name).unwrap_or(0);
        let cohorts = file.cohort.len();
        let (table, j) = if i < cohorts {
            ("cohort", i)
        } else {
            ("queue", i - cohorts)
        };
        let span = match key {
            "name" => names.get(i).map(|(_, s)| s.clone()),
            _ => parents
                .get(i)
                .and_then(|p| p.as_ref().map(|(_, s)| s.clone())),
        };
        let key = match (key, table) {
            ("parent", "queue") => "cohort",
            (k, _) => k,
        };
        (span.unwrap_or(0..0), format!("{table}[{j}].{key}"))
    };
    QuotaTree::new(specs).map_err(|e| {
        use super::TreeError::*;
        let (span, field) = match &e {
            Duplicate { name } => {
                // The second definition.
                let i = names.iter().rposition(|(n, _)| n == name).unwrap_or(0);
                let cohorts = file.cohort.len();
                let (table, j) = if i < cohorts {
                    ("cohort", i)
                } else {
                    ("queue", i - cohorts)
                };
                (names[i].1.clone(), format!("{table}[{j}].name"))
            }
            UnknownParent { node, .. } | ParentIsQueue { node, .. } => field_of(node, "parent"),
            Cycle { cycle } => {
                let first = cycle.split(" -> ").next().unwrap_or("");
                field_of(first, "parent")
            }
            BadQuota { node, .. } => field_of(node, "name"),
        };
        source.at(span, field, e.to_string())
    })
}
