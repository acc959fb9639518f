//! The registry: policy names (`ORDER/PLACE[/MODIFIER...]`) to constructors. Configuration
//! and the command line pick policies by these names; nobody edits code to switch.

use super::heuristic::{Composite, Fifo, Ordering, Placer, StrategyPlacer};
use super::{Policy, PolicyError};
use crate::cluster::FitStrategy;
use serde::Serialize;

/// One registered part, for `lachesis` help and docs.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyInfo {
    /// `ordering`, `placement` or `modifier`.
    pub part: &'static str,
    pub name: &'static str,
    pub summary: &'static str,
}

type OrderingCtor = fn(u64) -> Box<dyn Ordering>;
type PlacerCtor = fn(u64) -> Box<dyn Placer>;

const ORDERINGS: &[(&str, &str, OrderingCtor)] = &[(
    "fifo",
    "first come, first served; the head of the queue blocks the rest",
    |_| Box::new(Fifo),
)];

const PLACEMENTS: &[(&str, &str, PlacerCtor)] = &[
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
    orderings.chain(placements).collect()
}

/// Builds the policy `name` (e.g. `fifo/best-fit`); `seed` feeds any randomised part.
pub fn build_policy(name: &str, seed: u64) -> Result<Box<dyn Policy>, PolicyError> {
    let unknown = |hint: String| PolicyError::UnknownName {
        name: name.to_string(),
        hint,
    };
    let parts: Vec<&str> = name.trim().split('/').collect();
    let [order, place, modifiers @ ..] = parts.as_slice() else {
        return Err(unknown(
            "expected ORDER/PLACE[/MODIFIER...], e.g. fifo/best-fit".into(),
        ));
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
    if let Some(m) = modifiers.first() {
        return Err(unknown(format!(
            "no modifier `{m}` (none are registered yet)"
        )));
    }
    Ok(Box::new(Composite::new(
        (ordering.2)(seed),
        (placer.2)(seed),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(build_policy("fifo/best-fit/nope", 0).is_err());
    }
}
