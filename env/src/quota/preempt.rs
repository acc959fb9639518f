//! Kueue's classical preemption (`kubernetes-sigs/kueue` at `ff69552e`,
//! `pkg/scheduler/preemption/preemption.go`, `classical/`, `common/`): which admitted
//! workloads a queue's pending one may preempt to be admitted, under the queue's
//! `withinClusterQueue`, `reclaimWithinCohort` and `borrowWithinCohort` policies.
//!
//! The steps are Kueue's, on the quota tree's books only (no nodes, no placement):
//! - the flavor-resources that need preemption are those of the request its queue cannot
//!   give now;
//! - candidates: the queue's own workloads its `withinClusterQueue` policy allows, and, where
//!   `reclaimWithinCohort` is not `Never`, the workloads of other queues of the cohort tree
//!   above their nominal quota in those flavor-resources (hierarchical reclaim first where
//!   the queue's own subtree has room);
//! - order: other queues first, lower priority first, most recently admitted first
//!   (Kueue's `CandidatesOrdering`; nothing here is ever half-evicted);
//! - taken in order until the request fits, first without borrowing or first with it as
//!   Kueue chooses, then the fewest: every target the request still fits without is given
//!   back (`fillBackWorkloads`).
//!
//! Fair-sharing preemption and topology-aware scheduling are not modelled.

use super::{FlavorResource, NodeId, NodeKind, QuotaTree, Usage};

/// Kueue's `PreemptionPolicy`: which workloads a pending one may preempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PreemptionPolicy {
    /// None (Kueue's default).
    #[default]
    Never,
    /// Those of strictly lower priority.
    LowerPriority,
    /// Those of lower priority, or of equal priority queued after the pending one
    /// (`withinClusterQueue` only).
    LowerOrNewerEqualPriority,
    /// Any priority (`reclaimWithinCohort` only).
    Any,
}

impl PreemptionPolicy {
    /// The name in a quota file (Kueue's spelling).
    pub fn as_str(self) -> &'static str {
        match self {
            PreemptionPolicy::Never => "Never",
            PreemptionPolicy::LowerPriority => "LowerPriority",
            PreemptionPolicy::LowerOrNewerEqualPriority => "LowerOrNewerEqualPriority",
            PreemptionPolicy::Any => "Any",
        }
    }

    /// Parses Kueue's spelling (case ignored).
    pub fn parse(s: &str) -> Option<PreemptionPolicy> {
        [
            PreemptionPolicy::Never,
            PreemptionPolicy::LowerPriority,
            PreemptionPolicy::LowerOrNewerEqualPriority,
            PreemptionPolicy::Any,
        ]
        .into_iter()
        .find(|p| p.as_str().eq_ignore_ascii_case(s.trim()))
    }
}

/// Kueue's `borrowWithinCohort`: whether a queue may preempt in its cohort while it borrows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BorrowWithinCohort {
    /// `LowerPriority` (`true`) or `Never` (`false`, Kueue's default).
    pub lower_priority: bool,
    /// Only workloads of priority at most this may be preempted while borrowing.
    pub max_priority_threshold: Option<i32>,
}

/// A queue's preemption policies (Kueue's `ClusterQueuePreemption`); all `Never` by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Preemption {
    pub within_cluster_queue: PreemptionPolicy,
    pub reclaim_within_cohort: PreemptionPolicy,
    pub borrow_within_cohort: BorrowWithinCohort,
}

impl Preemption {
    /// Whether the queue never preempts (every policy `Never`).
    pub fn is_never(&self) -> bool {
        self.within_cluster_queue == PreemptionPolicy::Never
            && self.reclaim_within_cohort == PreemptionPolicy::Never
    }
}

/// A workload as preemption sees it: admitted (a candidate) or pending (the preemptor).
#[derive(Debug, Clone, Copy)]
pub struct Workload<'a> {
    pub queue: NodeId,
    pub priority: i32,
    /// When it was queued (Kueue's queue order timestamp), any unit.
    pub queued_at: u64,
    /// When its quota was reserved (admitted); unused for the preemptor.
    pub reserved_at: u64,
    /// What it holds (a candidate) or asks (the preemptor), per flavor-resource.
    pub usage: &'a [(FlavorResource, i64)],
}

/// Why a target is preempted (Kueue's preemption reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PreemptionReason {
    InClusterQueue,
    InCohortReclamation,
    InCohortReclaimWhileBorrowing,
}

impl PreemptionReason {
    /// Kueue's name of the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            PreemptionReason::InClusterQueue => "InClusterQueue",
            PreemptionReason::InCohortReclamation => "InCohortReclamation",
            PreemptionReason::InCohortReclaimWhileBorrowing => "InCohortReclaimWhileBorrowing",
        }
    }
}

/// One workload to preempt: its index in the candidates given, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub index: usize,
    pub reason: PreemptionReason,
}

/// Kueue's `preemptionVariant` (less `Never`, which is no candidate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    WithinQueue,
    HierarchicalReclaim,
    ReclaimWithoutBorrowing,
    ReclaimWhileBorrowing,
}

impl Variant {
    fn reason(self) -> PreemptionReason {
        match self {
            Variant::WithinQueue => PreemptionReason::InClusterQueue,
            Variant::HierarchicalReclaim | Variant::ReclaimWithoutBorrowing => {
                PreemptionReason::InCohortReclamation
            }
            Variant::ReclaimWhileBorrowing => PreemptionReason::InCohortReclaimWhileBorrowing,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Candidate {
    index: usize,
    /// The cohort below which it was found (Kueue's lowest common ancestor).
    lca: Option<usize>,
    variant: Variant,
}

/// One preemption search: the preemptor, its queue's policies and the candidates.
struct Search<'t, 'w> {
    tree: &'t QuotaTree,
    incoming: &'w Workload<'w>,
    admitted: &'w [Workload<'w>],
    policy: Preemption,
    /// The request, as flavor-resource indices of the tree.
    request: Vec<(usize, i64)>,
    /// The flavor-resources that need preemption (Kueue's `frsNeedPreemption`).
    need: Vec<usize>,
}

impl QuotaTree {
    /// The workloads of `admitted` (whose usage `books` holds) that `incoming` must preempt
    /// for its queue to admit it, as Kueue's classical preemption chooses them; empty when
    /// its queue admits it already, when its policies allow no preemption, or when no set
    /// of candidates would make room.
    pub fn preemption_targets(
        &self,
        books: &Usage,
        incoming: &Workload<'_>,
        admitted: &[Workload<'_>],
    ) -> Vec<Target> {
        let policy = self.nodes[incoming.queue.0].spec.preemption;
        if policy.is_never() {
            return Vec::new();
        }
        let mut request = Vec::with_capacity(incoming.usage.len());
        for (fr, v) in incoming.usage {
            match self.fr(fr) {
                Some(i) => request.push((i, *v)),
                // A flavor-resource no quota names: nothing to preempt can give it.
                None if *v > 0 => return Vec::new(),
                None => {}
            }
        }
        let need: Vec<usize> = request
            .iter()
            .filter(|(fr, v)| *v > self.available_raw(books, incoming.queue, *fr).max(0))
            .map(|(fr, _)| *fr)
            .collect();
        if need.is_empty() {
            return Vec::new();
        }
        let search = Search {
            tree: self,
            incoming,
            admitted,
            policy,
            request,
            need,
        };
        search.run(books)
    }

    /// The children of node `n` of `kind`, in configuration order.
    fn children(&self, n: usize, kind: NodeKind) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len())
            .filter(move |&c| self.nodes[c].parent == Some(n) && self.nodes[c].spec.kind == kind)
    }
}

impl Search<'_, '_> {
    fn queue(&self) -> usize {
        self.incoming.queue.0
    }

    /// Kueue's `classicalPreemptions`.
    fn run(&self, books: &Usage) -> Vec<Target> {
        let mut same = self.same_queue_candidates();
        let (mut hierarchy, mut priority) = self.cohort_candidates(books);
        for list in [&mut same, &mut hierarchy, &mut priority] {
            list.sort_by(|a, b| self.order(a, b));
        }
        let borrow_forbidden = !self.policy.borrow_within_cohort.lower_priority;
        let attempts: &[bool] = if (hierarchy.is_empty() && priority.is_empty())
            || (borrow_forbidden && !self.under_nominal(books))
        {
            &[true]
        } else if borrow_forbidden && hierarchy.is_empty() {
            &[false, true]
        } else {
            &[true, false]
        };
        let all: Vec<Candidate> = hierarchy.into_iter().chain(priority).chain(same).collect();
        for &borrow in attempts {
            let mut scratch = books.clone();
            let mut targets: Vec<Candidate> = Vec::new();
            for c in &all {
                if !self.valid(&scratch, c, borrow) {
                    continue;
                }
                self.charge(&mut scratch, c.index, false);
                targets.push(*c);
                if self.fits(&scratch, borrow) {
                    self.fill_back(&mut scratch, &mut targets, borrow);
                    return targets
                        .iter()
                        .map(|c| Target {
                            index: c.index,
                            reason: c.variant.reason(),
                        })
                        .collect();
                }
            }
        }
        Vec::new()
    }

    /// Kueue's `CandidatesOrdering`: other queues first, then lower priority, then the most
    /// recently admitted, then the caller's order.
    fn order(&self, a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
        let (wa, wb) = (&self.admitted[a.index], &self.admitted[b.index]);
        let q = self.incoming.queue;
        (wa.queue == q)
            .cmp(&(wb.queue == q))
            .then(wa.priority.cmp(&wb.priority))
            .then(wb.reserved_at.cmp(&wa.reserved_at))
            .then(a.index.cmp(&b.index))
    }

    /// Adds (`add`) or removes candidate `index`'s usage in `books`.
    fn charge(&self, books: &mut Usage, index: usize, add: bool) {
        let w = &self.admitted[index];
        for (fr, v) in w.usage {
            if let Some(i) = self.tree.fr(fr) {
                if add {
                    self.tree.add_raw(books, w.queue.0, i, *v);
                } else {
                    self.tree.remove_raw(books, w.queue.0, i, *v);
                }
            }
        }
    }

    /// Kueue's `fillBackWorkloads`: gives back every target (but the last taken) without
    /// which the request still fits.
    fn fill_back(&self, books: &mut Usage, targets: &mut Vec<Candidate>, borrow: bool) {
        for i in (0..targets.len().saturating_sub(1)).rev() {
            self.charge(books, targets[i].index, true);
            if self.fits(books, borrow) {
                targets.swap_remove(i);
            } else {
                self.charge(books, targets[i].index, false);
            }
        }
    }

    /// Kueue's `workloadFits`: every flavor-resource of the request available, and without
    /// `borrow` within the queue's nominal quota.
    fn fits(&self, books: &Usage, borrow: bool) -> bool {
        let (t, q) = (self.tree, self.queue());
        self.request.iter().all(|&(fr, v)| {
            let nominal = t.nodes[q].quota[fr].nominal;
            (borrow || nominal >= t.used(books, q, fr) + v)
                && v <= t.available_raw(books, NodeId(q), fr).max(0)
        })
    }

    /// Kueue's `IsWithinNominalInResources` over the flavor-resources needing preemption.
    fn within_nominal(&self, books: &Usage, n: usize) -> bool {
        let t = self.tree;
        self.need
            .iter()
            .all(|&fr| t.nodes[n].subtree[fr] >= t.used(books, n, fr))
    }

    /// Kueue's `queueUnderNominalInResourcesNeedingPreemption`.
    fn under_nominal(&self, books: &Usage) -> bool {
        let (t, q) = (self.tree, self.queue());
        self.need
            .iter()
            .all(|&fr| t.nodes[q].quota[fr].nominal > t.used(books, q, fr))
    }

    /// Kueue's `WorkloadUsesResources`.
    fn uses_needed(&self, w: &Workload<'_>) -> bool {
        w.usage
            .iter()
            .any(|(fr, v)| *v > 0 && self.tree.fr(fr).is_some_and(|i| self.need.contains(&i)))
    }

    /// Kueue's `SatisfiesPreemptionPolicy`.
    fn satisfies(&self, policy: PreemptionPolicy, w: &Workload<'_>) -> bool {
        let inc = self.incoming;
        let lower = inc.priority > w.priority;
        match policy {
            PreemptionPolicy::Never => false,
            PreemptionPolicy::LowerPriority => lower,
            PreemptionPolicy::LowerOrNewerEqualPriority => {
                lower || (inc.priority == w.priority && inc.queued_at < w.queued_at)
            }
            PreemptionPolicy::Any => true,
        }
    }

    /// Kueue's `classifyPreemptionVariant`; `None`: not a candidate.
    fn classify(&self, w: &Workload<'_>, advantage: bool) -> Option<Variant> {
        if !self.uses_needed(w) {
            return None;
        }
        let same = w.queue == self.incoming.queue;
        let policy = if same {
            self.policy.within_cluster_queue
        } else {
            self.policy.reclaim_within_cohort
        };
        if !self.satisfies(policy, w) {
            return None;
        }
        let borrow = self.policy.borrow_within_cohort;
        Some(if same {
            Variant::WithinQueue
        } else if advantage {
            Variant::HierarchicalReclaim
        } else if !borrow.lower_priority
            || w.priority >= self.incoming.priority
            || borrow
                .max_priority_threshold
                .is_some_and(|t| w.priority > t)
        {
            Variant::ReclaimWithoutBorrowing
        } else {
            Variant::ReclaimWhileBorrowing
        })
    }

    /// Candidates of queue `q` found below cohort `lca`.
    fn candidates_of_queue(
        &self,
        q: usize,
        lca: Option<usize>,
        advantage: bool,
        out: &mut Vec<Candidate>,
    ) {
        for (index, w) in self.admitted.iter().enumerate() {
            if w.queue.0 != q {
                continue;
            }
            if let Some(variant) = self.classify(w, advantage) {
                out.push(Candidate {
                    index,
                    lca,
                    variant,
                });
            }
        }
    }

    /// Kueue's `collectSameQueueCandidates`.
    fn same_queue_candidates(&self) -> Vec<Candidate> {
        let mut out = Vec::new();
        if self.policy.within_cluster_queue != PreemptionPolicy::Never {
            self.candidates_of_queue(self.queue(), None, false, &mut out);
        }
        out
    }

    /// Kueue's `collectCandidatesForHierarchicalReclaim`: (hierarchical, priority-based).
    fn cohort_candidates(&self, books: &Usage) -> (Vec<Candidate>, Vec<Candidate>) {
        let (mut hierarchy, mut priority) = (Vec::new(), Vec::new());
        let t = self.tree;
        let parent = t.nodes[self.queue()].parent;
        if parent.is_none() || self.policy.reclaim_within_cohort == PreemptionPolicy::Never {
            return (hierarchy, priority);
        }
        let (mut advantage, mut remaining) = self.fit_in_quota(books, self.queue(), &self.request);
        let mut previous = None;
        let mut current = parent;
        while let Some(c) = current {
            let list = if advantage {
                &mut hierarchy
            } else {
                &mut priority
            };
            self.in_subtree(books, c, c, previous, advantage, list);
            let (fits, rest) = self.fit_in_quota(books, c, &remaining);
            remaining = rest;
            advantage |= fits;
            previous = Some(c);
            current = t.nodes[c].parent;
        }
        (hierarchy, priority)
    }

    /// Kueue's `QuantitiesFitInQuota`: whether `requests` fit node `n`'s subtree quota,
    /// and what is left of them beyond its local quota.
    fn fit_in_quota(
        &self,
        books: &Usage,
        n: usize,
        requests: &[(usize, i64)],
    ) -> (bool, Vec<(usize, i64)>) {
        let t = self.tree;
        let mut fits = true;
        let mut remaining = Vec::with_capacity(requests.len());
        for &(fr, v) in requests {
            if t.nodes[n].subtree[fr] < t.used(books, n, fr) + v {
                fits = false;
            }
            let local = t.local_available(books, NodeId(n), fr);
            remaining.push((fr, (v - local).max(0)));
        }
        (fits, remaining)
    }

    /// Kueue's `collectCandidatesInSubtree`.
    fn in_subtree(
        &self,
        books: &Usage,
        current: usize,
        root: usize,
        skip: Option<usize>,
        advantage: bool,
        out: &mut Vec<Candidate>,
    ) {
        let t = self.tree;
        for child in t.children(current, NodeKind::Cohort) {
            if Some(child) == skip || self.within_nominal(books, child) {
                continue;
            }
            self.in_subtree(books, child, root, skip, advantage, out);
        }
        for child in t.children(current, NodeKind::Queue) {
            if child != self.queue() && !self.within_nominal(books, child) {
                self.candidates_of_queue(child, Some(root), advantage, out);
            }
        }
    }

    /// Kueue's `candidateIsValid`, on the books with the targets so far removed.
    fn valid(&self, books: &Usage, c: &Candidate, borrow: bool) -> bool {
        let q = self.admitted[c.index].queue.0;
        if q == self.queue() {
            return true;
        }
        if borrow && c.variant == Variant::ReclaimWithoutBorrowing {
            return false;
        }
        if self.within_nominal(books, q) {
            return false;
        }
        let mut node = self.tree.nodes[q].parent;
        while let Some(n) = node {
            if Some(n) == c.lca {
                break;
            }
            if self.within_nominal(books, n) {
                return false;
            }
            node = self.tree.nodes[n].parent;
        }
        true
    }
}
