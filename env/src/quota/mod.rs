//! Quotas as Kueue defines them (`kubernetes-sigs/kueue`, `pkg/cache/scheduler/
//! resource_node.go` at `ff69552e`): queues (Kueue's ClusterQueues) hold a nominal quota per
//! flavor and resource (here a flavor is a GPU model, or `default`), may borrow from their
//! cohort up to a borrowing limit and keep back what a lending limit does not lend; cohorts nest
//! and hold quota of their own.
//!
//! The accounting is Kueue's resource tree, node by node:
//! - a node's *local quota* is what its lending limit keeps from its parent:
//!   `max(0, subtree quota - lending limit)` (0 without a lending limit);
//! - a queue's *subtree quota* is its nominal quota; a cohort's is its own nominal quota plus
//!   each child's subtree quota less the child's local quota;
//! - usage bubbles up past the local quota: a child adds to its parent the part of its usage
//!   above its local quota;
//! - what a queue may still use: at the root, subtree quota - usage; below it, the local quota
//!   left plus what the parent has left, the latter capped by the borrowing limit
//!   (`subtree - local - max(0, usage - local) + borrowing limit`). Negative (a tree in debt)
//!   reads as 0, as Kueue's `ClusterQueueSnapshot::Available` does.
//!
//! Amounts are integers in each resource's unit (`gpu`: milli-GPUs, `cpu`: milli-CPUs,
//! `memory`: MiB). This module keeps the books; admission, preemption and fair sharing build
//! on it.

use std::collections::HashMap;
use std::fmt;

mod admit;
mod fair;
mod file;
mod history;
mod preempt;
pub use admit::{
    Admission, AdmissionError, Amounts, DEFAULT_FLAVOR, DEFAULT_QUEUE, QuotaPlan, load_admission,
};
pub use fair::Drs;
pub use file::{QuotaFileError, parse_quota_toml};
pub use history::UsageHistory;
pub use preempt::{
    BorrowWithinCohort, Preemption, PreemptionPolicy, PreemptionReason, Target, Workload,
};

#[cfg(test)]
mod preempt_tests;
#[cfg(test)]
mod tests;

/// A resource a quota counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// Milli-GPUs.
    Gpu,
    /// Milli-CPUs.
    Cpu,
    /// MiB.
    Memory,
}

impl Resource {
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Gpu => "gpu",
            Resource::Cpu => "cpu",
            Resource::Memory => "memory",
        }
    }

    pub fn parse(s: &str) -> Option<Resource> {
        match s.trim().to_ascii_lowercase().as_str() {
            "gpu" => Some(Resource::Gpu),
            "cpu" => Some(Resource::Cpu),
            "memory" | "mem" => Some(Resource::Memory),
            _ => None,
        }
    }
}

/// A flavor (GPU model, or `default`) and a resource: the unit quotas are kept in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlavorResource {
    pub flavor: String,
    pub resource: Resource,
}

impl FlavorResource {
    pub fn new(flavor: &str, resource: Resource) -> Self {
        FlavorResource {
            flavor: flavor.to_string(),
            resource,
        }
    }
}

impl fmt::Display for FlavorResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.flavor, self.resource.as_str())
    }
}

/// One quota of a queue or cohort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Quota {
    pub nominal: i64,
    /// The most the node may use beyond its own subtree's quota; `None`: no limit.
    pub borrowing_limit: Option<i64>,
    /// The most of its subtree's quota the node lends to its parent; `None`: all of it.
    pub lending_limit: Option<i64>,
}

/// How a queue orders its pending jobs (Kueue's `queueingStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueingStrategy {
    /// A job that does not fit does not block those behind it.
    #[default]
    BestEffortFifo,
    /// The head blocks the queue until it is admitted.
    StrictFifo,
}

/// Whether a node is a queue (jobs are admitted to it) or a cohort.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Queue,
    Cohort,
}

/// A node of the quota tree, as configured.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec {
    pub name: String,
    pub kind: NodeKind,
    /// The cohort it belongs to.
    pub parent: Option<String>,
    pub quotas: Vec<(FlavorResource, Quota)>,
    pub strategy: QueueingStrategy,
    /// Kueue's `fairSharing.weight` (1 by default).
    pub weight: f64,
    /// A queue's preemption policies (all `Never` by default, and for cohorts).
    pub preemption: Preemption,
}

/// The tree cannot be built: which node, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error("`{name}` is defined twice")]
    Duplicate { name: String },
    #[error("`{node}`: its cohort `{parent}` is not defined")]
    UnknownParent { node: String, parent: String },
    #[error("`{node}`: its parent `{parent}` is a queue; only cohorts have members")]
    ParentIsQueue { node: String, parent: String },
    #[error("cohorts {cycle}: their parents form a cycle")]
    Cycle { cycle: String },
    #[error("`{node}` {fr}: {message}")]
    BadQuota {
        node: String,
        fr: String,
        message: String,
    },
}

#[derive(Debug, Clone)]
struct Node {
    spec: NodeSpec,
    parent: Option<usize>,
    /// Per flavor-resource index: the node's quota (absent: 0 nominal, no limits).
    quota: Vec<Quota>,
    subtree: Vec<i64>,
}

/// The usage of every node of a `QuotaTree` (node-major, one entry per flavor-resource): the
/// tree's own books, or a scratch copy (`QuotaTree::books`) that tentative charges go to
/// without touching the tree. One flat vector, so that a copy is one allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage(Vec<i64>);

/// Kueue's resource tree: quotas, subtree quotas and usage of every queue and cohort.
#[derive(Debug, Clone)]
pub struct QuotaTree {
    nodes: Vec<Node>,
    usage: Usage,
    by_name: HashMap<String, usize>,
    frs: Vec<FlavorResource>,
    /// Asked on every admission check: a fixed fast hash (never iterated).
    fr_index: HashMap<FlavorResource, usize, foldhash::fast::FixedState>,
    /// Every node after its parent.
    top_down: Vec<usize>,
}

/// Why a queue cannot admit a job now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    pub queue: String,
    pub fr: FlavorResource,
    pub requested: i64,
    pub available: i64,
    pub nominal: i64,
    pub usage: i64,
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = |v: i64| match self.fr.resource {
            Resource::Gpu | Resource::Cpu => format!("{}", v as f64 / 1000.0),
            Resource::Memory => format!("{v} MiB"),
        };
        write!(
            f,
            "quota of queue {} on {}: asks {}, {} available (nominal {}, in use {})",
            self.queue,
            self.fr,
            unit(self.requested),
            unit(self.available),
            unit(self.nominal),
            unit(self.usage)
        )
    }
}

/// A queue or cohort of a `QuotaTree`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

/// The default rule when a trace has tenants and no quota file: one cohort, `cluster`, that
/// holds nothing of its own, and one queue per tenant (named as the tenant) with an equal
/// nominal share of each flavor-resource's `capacity` (milli-units split evenly, the
/// remainder to the first tenants, so the shares sum to the capacity), no borrowing limit and
/// no lending limit: every tenant is guaranteed its share and may borrow all that is idle.
pub fn equal_shares(tenants: &[String], capacity: &[(FlavorResource, i64)]) -> Vec<NodeSpec> {
    let n = tenants.len().max(1) as i64;
    let mut nodes = vec![NodeSpec {
        name: "cluster".into(),
        kind: NodeKind::Cohort,
        parent: None,
        quotas: Vec::new(),
        strategy: QueueingStrategy::default(),
        weight: 1.0,
        preemption: Preemption::default(),
    }];
    for (i, t) in tenants.iter().enumerate() {
        let quotas = capacity
            .iter()
            .map(|(fr, total)| {
                let extra = i64::from((i as i64) < total.rem_euclid(n));
                let nominal = total.div_euclid(n) + extra;
                (
                    fr.clone(),
                    Quota {
                        nominal,
                        ..Quota::default()
                    },
                )
            })
            .collect();
        nodes.push(NodeSpec {
            name: t.clone(),
            kind: NodeKind::Queue,
            parent: Some("cluster".into()),
            quotas,
            strategy: QueueingStrategy::default(),
            weight: 1.0,
            preemption: Preemption::default(),
        });
    }
    nodes
}

impl QuotaTree {
    /// Builds the tree: names unique, parents defined cohorts, no cycle, quotas non-negative
    /// and limits only where they mean something (a borrowing limit needs a cohort).
    pub fn new(specs: Vec<NodeSpec>) -> Result<QuotaTree, TreeError> {
        let mut by_name = HashMap::new();
        for (i, s) in specs.iter().enumerate() {
            if by_name.insert(s.name.clone(), i).is_some() {
                return Err(TreeError::Duplicate {
                    name: s.name.clone(),
                });
            }
        }
        let mut frs: Vec<FlavorResource> = specs
            .iter()
            .flat_map(|s| s.quotas.iter().map(|(fr, _)| fr.clone()))
            .collect();
        frs.sort();
        frs.dedup();
        let fr_index: HashMap<FlavorResource, usize, foldhash::fast::FixedState> = frs
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, f)| (f, i))
            .collect();
        let mut nodes = Vec::with_capacity(specs.len());
        for s in &specs {
            let parent = match &s.parent {
                None => None,
                Some(p) => {
                    let &pi = by_name.get(p).ok_or_else(|| TreeError::UnknownParent {
                        node: s.name.clone(),
                        parent: p.clone(),
                    })?;
                    if specs[pi].kind == NodeKind::Queue {
                        return Err(TreeError::ParentIsQueue {
                            node: s.name.clone(),
                            parent: p.clone(),
                        });
                    }
                    Some(pi)
                }
            };
            let mut quota = vec![Quota::default(); frs.len()];
            for (fr, q) in &s.quotas {
                let bad = |message: &str| TreeError::BadQuota {
                    node: s.name.clone(),
                    fr: fr.to_string(),
                    message: message.to_string(),
                };
                if q.nominal < 0
                    || q.borrowing_limit.is_some_and(|b| b < 0)
                    || q.lending_limit.is_some_and(|l| l < 0)
                {
                    return Err(bad("quotas and limits are amounts >= 0"));
                }
                if q.borrowing_limit.is_some() && parent.is_none() {
                    return Err(bad(
                        "a borrowing limit needs a cohort to borrow from (Kueue refuses it too)",
                    ));
                }
                if q.lending_limit.is_some() && parent.is_none() {
                    return Err(bad("a lending limit needs a cohort to lend to"));
                }
                quota[fr_index[fr]] = *q;
            }
            nodes.push(Node {
                spec: s.clone(),
                parent,
                quota,
                subtree: vec![0; frs.len()],
            });
        }
        let usage = Usage(vec![0; nodes.len() * frs.len()]);
        let mut tree = QuotaTree {
            nodes,
            usage,
            by_name,
            frs,
            fr_index,
            top_down: Vec::new(),
        };
        tree.check_cycles()?;
        tree.update_subtrees();
        tree.top_down = tree.leaves_first();
        tree.top_down.reverse();
        Ok(tree)
    }

    fn check_cycles(&self) -> Result<(), TreeError> {
        for start in 0..self.nodes.len() {
            let mut path = vec![start];
            let mut at = start;
            while let Some(p) = self.nodes[at].parent {
                if let Some(pos) = path.iter().position(|&n| n == p) {
                    let mut names: Vec<&str> = path[pos..]
                        .iter()
                        .map(|&n| self.nodes[n].spec.name.as_str())
                        .collect();
                    names.push(&self.nodes[p].spec.name);
                    return Err(TreeError::Cycle {
                        cycle: names.join(" -> "),
                    });
                }
                path.push(p);
                at = p;
            }
        }
        Ok(())
    }

    /// Subtree quotas from the leaves up (Kueue's `updateCohortResourceNode`); usage kept.
    fn update_subtrees(&mut self) {
        let order = self.leaves_first();
        for n in &mut self.nodes {
            for (s, q) in n.subtree.iter_mut().zip(&n.quota) {
                *s = q.nominal;
            }
        }
        for &n in &order {
            if let Some(p) = self.nodes[n].parent {
                for fr in 0..self.frs.len() {
                    let delta = self.nodes[n].subtree[fr] - self.local_quota(NodeId(n), fr);
                    self.nodes[p].subtree[fr] = self.nodes[p].subtree[fr].saturating_add(delta);
                }
            }
        }
    }

    /// Every node after all its descendants.
    fn leaves_first(&self) -> Vec<usize> {
        let depth = |mut n: usize| {
            let mut d = 0;
            while let Some(p) = self.nodes[n].parent {
                d += 1;
                n = p;
            }
            d
        };
        let mut order: Vec<usize> = (0..self.nodes.len()).collect();
        order.sort_by_key(|&n| std::cmp::Reverse(depth(n)));
        order
    }

    /// The queue or cohort called `name`.
    pub fn node(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).map(|&i| NodeId(i))
    }

    /// Its configuration.
    pub fn spec(&self, n: NodeId) -> &NodeSpec {
        &self.nodes[n.0].spec
    }

    /// The queues, in configuration order.
    pub fn queues(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].spec.kind == NodeKind::Queue)
            .map(NodeId)
    }

    /// The flavor-resources any quota names.
    pub fn flavor_resources(&self) -> &[FlavorResource] {
        &self.frs
    }

    fn fr(&self, fr: &FlavorResource) -> Option<usize> {
        self.fr_index.get(fr).copied()
    }

    fn local_quota(&self, n: NodeId, fr: usize) -> i64 {
        let node = &self.nodes[n.0];
        match node.quota[fr].lending_limit {
            Some(l) => (node.subtree[fr] - l).max(0),
            None => 0,
        }
    }

    /// Node `n`'s usage of flavor-resource `fr` in `usage`.
    fn used(&self, usage: &Usage, n: usize, fr: usize) -> i64 {
        usage.0[n * self.frs.len() + fr]
    }

    fn used_mut<'u>(&self, usage: &'u mut Usage, n: usize, fr: usize) -> &'u mut i64 {
        &mut usage.0[n * self.frs.len() + fr]
    }

    fn local_available(&self, usage: &Usage, n: NodeId, fr: usize) -> i64 {
        (self.local_quota(n, fr) - self.used(usage, n.0, fr)).max(0)
    }

    fn available_raw(&self, usage: &Usage, n: NodeId, fr: usize) -> i64 {
        let parent = self.nodes[n.0]
            .parent
            .map(|p| self.available_raw(usage, NodeId(p), fr));
        self.available_below(usage, n, fr, parent)
    }

    /// What `n` may use of `fr` (negative: in debt) given what its parent may (`parent`,
    /// `None` at a root): its local quota left, plus the parent's capped by its borrowing
    /// limit.
    fn available_below(&self, usage: &Usage, n: NodeId, fr: usize, parent: Option<i64>) -> i64 {
        let node = &self.nodes[n.0];
        let Some(mut parent) = parent else {
            return node.subtree[fr] - self.used(usage, n.0, fr);
        };
        if let Some(b) = node.quota[fr].borrowing_limit {
            let lq = self.local_quota(n, fr);
            let stored = node.subtree[fr] - lq;
            let used = (self.used(usage, n.0, fr) - lq).max(0);
            parent = parent.min(stored - used + b);
        }
        self.local_available(usage, n, fr) + parent
    }

    /// What `n` may still use of `fr` now, borrowing included, before preempting anything
    /// (Kueue's `Available`; 0 for a flavor-resource no quota names).
    pub fn available(&self, n: NodeId, fr: &FlavorResource) -> i64 {
        self.available_in(&self.usage, n, fr)
    }

    /// `available` with the usage of `books` (a copy of this tree's, `books`).
    pub fn available_in(&self, books: &Usage, n: NodeId, fr: &FlavorResource) -> i64 {
        self.fr(fr)
            .map_or(0, |i| self.available_raw(books, n, i).max(0))
    }

    /// A copy of the tree's usage, for tentative charges (`add_usage_in`, `admit_check_in`).
    pub fn books(&self) -> Usage {
        self.usage.clone()
    }

    /// The most `n` could use of `fr` with nothing in use (Kueue's `potentialAvailable`).
    pub fn potential_available(&self, n: NodeId, fr: &FlavorResource) -> i64 {
        self.fr(fr).map_or(0, |i| self.potential_raw(n, i))
    }

    fn potential_raw(&self, n: NodeId, fr: usize) -> i64 {
        let node = &self.nodes[n.0];
        let Some(p) = node.parent else {
            return node.subtree[fr];
        };
        let mut avail = self.local_quota(n, fr) + self.potential_raw(NodeId(p), fr);
        if let Some(b) = node.quota[fr].borrowing_limit {
            avail = avail.min(node.subtree[fr].saturating_add(b));
        }
        avail
    }

    /// Whether `amounts` fit what `n` has available, each of them.
    pub fn fits(&self, n: NodeId, amounts: &[(FlavorResource, i64)]) -> bool {
        amounts
            .iter()
            .all(|(fr, v)| *v <= 0 || self.available(n, fr) >= *v)
    }

    /// Whether queue `n` may admit a job asking `amounts` now; otherwise the first
    /// flavor-resource that blocks it, with what it asks and what is available (a pending
    /// job's reason).
    pub fn admit_check(&self, n: NodeId, amounts: &[(FlavorResource, i64)]) -> Result<(), Blocked> {
        self.admit_check_in(&self.usage, n, amounts)
    }

    /// `admit_check` with the usage of `books` (a copy of this tree's, `books`).
    pub fn admit_check_in(
        &self,
        books: &Usage,
        n: NodeId,
        amounts: &[(FlavorResource, i64)],
    ) -> Result<(), Blocked> {
        for (fr, v) in amounts {
            let available = self.available_in(books, n, fr);
            if *v > 0 && available < *v {
                return Err(Blocked {
                    queue: self.nodes[n.0].spec.name.clone(),
                    fr: fr.clone(),
                    requested: *v,
                    available,
                    nominal: self.nominal(n, fr),
                    usage: self.fr(fr).map_or(0, |i| self.used(books, n.0, i)),
                });
            }
        }
        Ok(())
    }

    /// `n`'s usage of `fr`.
    pub fn usage(&self, n: NodeId, fr: &FlavorResource) -> i64 {
        self.fr(fr).map_or(0, |i| self.used(&self.usage, n.0, i))
    }

    /// `n`'s usage and nominal quota of the `i`-th of `flavor_resources()` (no lookup: for
    /// loops over every queue).
    pub fn usage_nominal_at(&self, n: NodeId, i: usize) -> (i64, i64) {
        (
            self.used(&self.usage, n.0, i),
            self.nodes[n.0].quota[i].nominal,
        )
    }

    /// `available` of the `i`-th of `flavor_resources()` for every node (indexed by
    /// `NodeId`) into `out`: one pass, parents first, instead of a walk to the root per node.
    pub fn available_all_at(&self, i: usize, out: &mut Vec<i64>) {
        out.clear();
        out.resize(self.nodes.len(), 0);
        for &n in &self.top_down {
            let parent = self.nodes[n].parent.map(|p| out[p]);
            out[n] = self.available_below(&self.usage, NodeId(n), i, parent);
        }
        for v in out.iter_mut() {
            *v = (*v).max(0);
        }
    }

    /// `n`'s nominal quota of `fr`.
    pub fn nominal(&self, n: NodeId, fr: &FlavorResource) -> i64 {
        self.fr(fr).map_or(0, |i| self.nodes[n.0].quota[i].nominal)
    }

    /// `n`'s subtree quota of `fr` (a queue's is its nominal quota).
    pub fn subtree_quota(&self, n: NodeId, fr: &FlavorResource) -> i64 {
        self.fr(fr).map_or(0, |i| self.nodes[n.0].subtree[i])
    }

    /// Whether `n` uses more of `fr` than its nominal quota (Kueue's `Borrowing`).
    pub fn borrowing(&self, n: NodeId, fr: &FlavorResource) -> bool {
        self.usage(n, fr) > self.nominal(n, fr)
    }

    /// Adds usage to queue `n`; what exceeds its local quota bubbles up (Kueue's `addUsage`).
    /// A flavor-resource no quota names is not counted (no queue may use it: `fits` says 0).
    pub fn add_usage(&mut self, n: NodeId, fr: &FlavorResource, v: i64) {
        let mut books = std::mem::replace(&mut self.usage, Usage(Vec::new()));
        self.add_usage_in(&mut books, n, fr, v);
        self.usage = books;
    }

    /// `add_usage` to `books` (a copy of this tree's, `books`) instead of the tree.
    pub fn add_usage_in(&self, books: &mut Usage, n: NodeId, fr: &FlavorResource, v: i64) {
        if let Some(i) = self.fr(fr) {
            self.add_raw(books, n.0, i, v);
        }
    }

    fn add_raw(&self, usage: &mut Usage, n: usize, fr: usize, v: i64) {
        let local = self.local_available(usage, NodeId(n), fr);
        *self.used_mut(usage, n, fr) += v;
        if let Some(p) = self.nodes[n].parent
            && v > local
        {
            self.add_raw(usage, p, fr, v - local);
        }
    }

    /// `remove_usage` from `books` (a copy of this tree's, `books`) instead of the tree.
    pub fn remove_usage_in(&self, books: &mut Usage, n: NodeId, fr: &FlavorResource, v: i64) {
        if let Some(i) = self.fr(fr) {
            self.remove_raw(books, n.0, i, v);
        }
    }

    /// The root of the cohort tree `n` is in (`n` itself without a cohort).
    pub fn root(&self, mut n: NodeId) -> NodeId {
        while let Some(p) = self.nodes[n.0].parent {
            n = NodeId(p);
        }
        n
    }

    /// How many queues and cohorts the tree has (`NodeId`s are below it).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Removes usage from queue `n`, and what it stored in its cohort (Kueue's
    /// `removeUsage`).
    pub fn remove_usage(&mut self, n: NodeId, fr: &FlavorResource, v: i64) {
        if let Some(i) = self.fr(fr) {
            let mut books = std::mem::replace(&mut self.usage, Usage(Vec::new()));
            self.remove_raw(&mut books, n.0, i, v);
            self.usage = books;
        }
    }

    fn remove_raw(&self, usage: &mut Usage, n: usize, fr: usize, v: i64) {
        let stored = self.used(usage, n, fr) - self.local_quota(NodeId(n), fr);
        *self.used_mut(usage, n, fr) -= v;
        match self.nodes[n].parent {
            Some(p) if stored > 0 => self.remove_raw(usage, p, fr, v.min(stored)),
            _ => {}
        }
    }
}
