//! Kueue's fair sharing (`pkg/cache/scheduler/fair_sharing.go` at `ff69552e`): a queue's or
//! cohort's dominant resource share is, over the resources it borrows (usage plus a request
//! above its subtree quota, summed over flavors), the largest borrowed amount per 1000 of
//! what its parent could lend of that resource, divided by its weight. 0 when it borrows
//! nothing; a zero weight that borrows sorts after every other share.

use super::{FlavorResource, NodeId, QuotaTree, Resource};
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// A node's dominant resource share.
#[derive(Debug, Clone, PartialEq)]
pub struct Drs {
    pub weight: f64,
    /// The largest borrowed-per-1000-lendable ratio, before the weight.
    pub unweighted_ratio: f64,
    /// The resource that gave it.
    pub dominant: Option<Resource>,
    /// Whether usage (with the request) exceeds the subtree quota anywhere.
    pub borrowing: bool,
    pub borrowed: Vec<FlavorResource>,
}

impl Drs {
    fn zero_weight_borrows(&self) -> bool {
        self.weight == 0.0 && self.unweighted_ratio != 0.0
    }

    /// The share over the weight (infinite for a zero weight that borrows).
    pub fn precise_weighted_share(&self) -> f64 {
        if self.unweighted_ratio == 0.0 {
            0.0
        } else if self.weight == 0.0 {
            f64::INFINITY
        } else {
            self.unweighted_ratio / self.weight
        }
    }

    /// Kueue's rounded share: the weighted share rounded up (`i64::MAX` for a zero weight that
    /// borrows).
    pub fn rounded_weighted_share(&self) -> i64 {
        if self.zero_weight_borrows() {
            i64::MAX
        } else {
            self.precise_weighted_share().ceil() as i64
        }
    }

    /// Lower is admitted first, higher preempted first (Kueue's `CompareDRS`).
    pub fn compare(&self, other: &Drs) -> Ordering {
        match (self.zero_weight_borrows(), other.zero_weight_borrows()) {
            (true, true) => self.unweighted_ratio.total_cmp(&other.unweighted_ratio),
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            _ => self
                .precise_weighted_share()
                .total_cmp(&other.precise_weighted_share()),
        }
    }
}

impl QuotaTree {
    /// `n`'s dominant resource share were it to use `request` more.
    pub fn dominant_resource_share(&self, n: NodeId, request: &[(FlavorResource, i64)]) -> Drs {
        let node = &self.nodes[n.0];
        let mut drs = Drs {
            weight: node.spec.weight,
            unweighted_ratio: 0.0,
            dominant: None,
            borrowing: false,
            borrowed: Vec::new(),
        };
        let Some(parent) = node.parent else {
            return drs;
        };
        let mut borrowing: BTreeMap<Resource, i64> = BTreeMap::new();
        for (i, fr) in self.frs.iter().enumerate() {
            let asked: i64 = request
                .iter()
                .filter(|(f, _)| f == fr)
                .map(|(_, v)| *v)
                .sum();
            let over = asked + self.used(&self.usage, n.0, i) - node.subtree[i];
            if over > 0 {
                *borrowing.entry(fr.resource).or_insert(0) += over;
                drs.borrowed.push(fr.clone());
            }
        }
        if borrowing.is_empty() {
            return drs;
        }
        drs.borrowing = true;
        let lendable = self.lendable(NodeId(parent));
        for (r, b) in borrowing {
            let Some(&l) = lendable.get(&r) else { continue };
            if l <= 0 {
                continue;
            }
            let ratio = b as f64 * 1000.0 / l as f64;
            let name_first = drs.dominant.is_none_or(|d| r.as_str() < d.as_str());
            if ratio > drs.unweighted_ratio || (ratio == drs.unweighted_ratio && name_first) {
                drs.unweighted_ratio = ratio;
                drs.dominant = Some(r);
            }
        }
        drs
    }

    /// What `n` could lend at most, per resource over every flavor (Kueue's
    /// `calculateLendable`: `n`'s potential availability of each flavor-resource).
    pub fn lendable(&self, n: NodeId) -> BTreeMap<Resource, i64> {
        let mut out = BTreeMap::new();
        for (i, fr) in self.frs.iter().enumerate() {
            *out.entry(fr.resource).or_insert(0) += self.potential_raw(n, i);
        }
        out
    }
}
