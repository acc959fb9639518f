//! Dependencies between jobs, with Slurm's semantics (`sbatch --dependency`, the `Dependency`
//! field of `scontrol show job`): a job waits for others to start or end before it may be
//! pending at all.
//!
//! | kind | satisfied when every listed job ... | never satisfied when a listed job ... |
//! |---|---|---|
//! | `after:ID[+MIN]` | has started (or was cancelled), `MIN` minutes ago or more | - |
//! | `afterany:ID` | has ended, however | - |
//! | `afterok:ID` | has ended successfully (exit code 0) | ended in failure |
//! | `afternotok:ID` | has ended in failure (non-zero exit, timeout, node failure) | ended successfully |
//! | `singleton` | (no IDs) every earlier job of the same name and user has ended | - |
//!
//! A list joins terms with `,` (all must be satisfied) or `?` (any one), never both, as Slurm
//! requires: `afterok:12:13,afterany:14`, `afternotok:7?afterok:8`. A dependency that can no
//! longer be satisfied is Slurm's `DependencyNeverSatisfied`: the job stays, reported, and never
//! runs. A job that lists a job Slurm does not know is refused at submission; here, a trace
//! whose dependency names a job it lacks, or whose dependencies form a cycle, is refused naming
//! the job.
//!
//! This module parses and evaluates; it knows nothing of the simulator.

use crate::units::SimTime;
use std::fmt;

/// How a term waits on its jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DepKind {
    After,
    AfterAny,
    AfterOk,
    AfterNotOk,
}

impl DepKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DepKind::After => "after",
            DepKind::AfterAny => "afterany",
            DepKind::AfterOk => "afterok",
            DepKind::AfterNotOk => "afternotok",
        }
    }
}

/// One listed job of a term: its id (as the trace names jobs) and, for `after`, the delay
/// after its start.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Parent<J> {
    pub job: J,
    pub delay: SimTime,
}

/// One term of a dependency list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Term<J> {
    /// `kind:ID[:ID...]`: every listed job must meet the kind's condition.
    Jobs {
        kind: DepKind,
        parents: Vec<Parent<J>>,
    },
    /// `singleton`: every earlier job of the same name and user has ended.
    Singleton,
}

/// A job's dependency: terms joined by `,` (all) or `?` (any).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Dependency<J> {
    pub terms: Vec<Term<J>>,
    /// `?`: any one term satisfies the whole; `,` (false): all must.
    pub any: bool,
}

/// What a dependency says now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DepState {
    Satisfied,
    Waiting,
    /// Slurm's `DependencyNeverSatisfied`.
    Never,
}

/// What is known of a listed job when its dependent asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParentState {
    /// Not started yet (held, pending).
    NotStarted,
    /// Started at `at` (running, preempted, or requeued after a start).
    Started { at: SimTime },
    /// Ended at `at`, successfully or not; `started` when it ran.
    Ended {
        started: Option<SimTime>,
        at: SimTime,
        ok: bool,
    },
}

/// A dependency that cannot be read: where in the text, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("dependency `{text}`: {message}")]
pub struct DepParseError {
    pub text: String,
    pub message: String,
}

impl Dependency<String> {
    /// Parses Slurm's syntax. Empty text (or `(null)`, as `scontrol` prints none) is no
    /// dependency: `Ok(None)`. Slurm's array forms (`aftercorr`, `ID_TASK`) and burst-buffer
    /// kinds are refused, as is mixing `,` and `?`.
    pub fn parse_slurm(text: &str) -> Result<Option<Dependency<String>>, DepParseError> {
        let t = text.trim();
        if t.is_empty() || t == "(null)" {
            return Ok(None);
        }
        let bad = |message: String| DepParseError {
            text: t.to_string(),
            message,
        };
        let (any, sep) = match (t.contains(','), t.contains('?')) {
            (true, true) => {
                return Err(bad(
                    "mixes `,` (all) and `?` (any); Slurm allows one separator per list".into(),
                ));
            }
            (false, true) => (true, '?'),
            _ => (false, ','),
        };
        let mut terms = Vec::new();
        for raw in t.split(sep) {
            let raw = raw.trim();
            if raw.eq_ignore_ascii_case("singleton") {
                terms.push(Term::Singleton);
                continue;
            }
            let (kind, ids) = raw
                .split_once(':')
                .ok_or_else(|| bad(format!("`{raw}`: expected KIND:ID[:ID...] or singleton")))?;
            let kind = match kind.trim().to_ascii_lowercase().as_str() {
                "after" => DepKind::After,
                "afterany" => DepKind::AfterAny,
                "afterok" => DepKind::AfterOk,
                "afternotok" => DepKind::AfterNotOk,
                other => {
                    return Err(bad(format!(
                        "`{other}` is not a dependency kind this simulator runs (after, \
                         afterany, afterok, afternotok, singleton)"
                    )));
                }
            };
            let mut parents = Vec::new();
            for id in ids.split(':') {
                let id = id.trim();
                let (job, delay) = match id.split_once('+') {
                    Some((job, minutes)) if kind == DepKind::After => {
                        let m: u64 = minutes.trim().parse().map_err(|_| {
                            bad(format!("`{id}`: the delay after `+` is whole minutes"))
                        })?;
                        (job.trim(), SimTime(m.saturating_mul(60_000)))
                    }
                    Some(_) => {
                        return Err(bad(format!(
                            "`{id}`: only `after` takes a delay (`after:ID+MINUTES`)"
                        )));
                    }
                    None => (id, SimTime::ZERO),
                };
                if job.is_empty() {
                    return Err(bad(format!("`{raw}`: an empty job id")));
                }
                if job.contains('_') {
                    return Err(bad(format!(
                        "`{job}`: job array tasks are not supported; name the task's own job id"
                    )));
                }
                parents.push(Parent {
                    job: job.to_string(),
                    delay,
                });
            }
            terms.push(Term::Jobs { kind, parents });
        }
        Ok(Some(Dependency { terms, any }))
    }
}

impl<J> Dependency<J> {
    /// A dependency that is never satisfied: an empty `?` list (no term may satisfy it).
    /// What is left of one whose jobs, cut from a trace, settled it for good
    /// ([`Dependency::settle`]); it has no text in Slurm's syntax.
    pub fn never() -> Dependency<J> {
        Dependency {
            terms: Vec::new(),
            any: true,
        }
    }

    /// Whether this is [`Dependency::never`].
    pub fn is_never(&self) -> bool {
        self.any && self.terms.is_empty()
    }

    /// Whether a term is `singleton`.
    pub fn has_singleton(&self) -> bool {
        self.terms.iter().any(|t| matches!(t, Term::Singleton))
    }

    /// Each listed job with the delay after its start that an `after` term adds (zero for
    /// the other kinds).
    pub fn delays(&self) -> impl Iterator<Item = (&J, SimTime)> {
        self.terms.iter().flat_map(|t| match t {
            Term::Jobs {
                kind: DepKind::After,
                parents,
            } => parents
                .iter()
                .map(|p| (&p.job, p.delay))
                .collect::<Vec<_>>(),
            Term::Jobs { parents, .. } => parents.iter().map(|p| (&p.job, SimTime::ZERO)).collect(),
            Term::Singleton => Vec::new(),
        })
    }
}

impl<J> Dependency<J> {
    /// The same dependency over other job names (`map` fails on a job it cannot resolve).
    pub fn try_map<K, E>(
        &self,
        mut map: impl FnMut(&J) -> Result<K, E>,
    ) -> Result<Dependency<K>, E> {
        let mut terms = Vec::with_capacity(self.terms.len());
        for t in &self.terms {
            terms.push(match t {
                Term::Singleton => Term::Singleton,
                Term::Jobs { kind, parents } => Term::Jobs {
                    kind: *kind,
                    parents: parents
                        .iter()
                        .map(|p| {
                            Ok(Parent {
                                job: map(&p.job)?,
                                delay: p.delay,
                            })
                        })
                        .collect::<Result<_, E>>()?,
                },
            });
        }
        Ok(Dependency {
            terms,
            any: self.any,
        })
    }

    /// The same dependency over other job names, `map` naming each.
    pub fn map<K>(&self, mut map: impl FnMut(&J) -> K) -> Dependency<K> {
        self.try_map(|j| Ok::<K, std::convert::Infallible>(map(j)))
            .unwrap_or_else(|never| match never {})
    }

    /// Every job listed (singleton lists none).
    pub fn parents(&self) -> impl Iterator<Item = &J> {
        self.terms.iter().flat_map(|t| match t {
            Term::Jobs { parents, .. } => parents.iter().map(|p| &p.job).collect::<Vec<_>>(),
            Term::Singleton => Vec::new(),
        })
    }

    /// The dependency's state at `now`: `parent` tells each listed job's state, `singleton`
    /// whether every earlier job of the same name and user has ended.
    pub fn state(
        &self,
        now: SimTime,
        mut parent: impl FnMut(&J) -> ParentState,
        singleton: impl Fn() -> bool,
    ) -> DepState {
        let mut states = self.terms.iter().map(|t| match t {
            Term::Singleton => {
                if singleton() {
                    DepState::Satisfied
                } else {
                    DepState::Waiting
                }
            }
            Term::Jobs { kind, parents } => all(parents.iter().map(|p| {
                let state = parent(&p.job);
                one(*kind, p.delay, state, now)
            })),
        });
        if self.any {
            any(&mut states)
        } else {
            all(states)
        }
    }
}

/// What is left of a dependency once some of its jobs are settled for good ([`Dependency::settle`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled<J> {
    /// Nothing is left to wait for.
    Satisfied,
    /// It can never be satisfied.
    Never,
    /// Still waits on the jobs `settle` did not know (every settled job taken out).
    Waiting(Dependency<J>),
}

impl<J: Clone> Dependency<J> {
    /// Settles the listed jobs for which `ended` answers `Some(ok)`: jobs that ended long
    /// ago (successfully when `ok`), as a job cut from a trace window before the window
    /// began did. A settled job that satisfies its term is dropped from it; one that never
    /// can makes its term never satisfied; lists are then simplified as
    /// [`Dependency::state`] combines them. `singleton` terms are kept as they are.
    pub fn settle(&self, mut ended: impl FnMut(&J) -> Option<bool>) -> Settled<J> {
        let mut terms = Vec::new();
        let mut never = 0;
        for t in &self.terms {
            let Term::Jobs { kind, parents } = t else {
                terms.push(t.clone());
                continue;
            };
            let mut left = Vec::new();
            let mut state = DepState::Satisfied;
            for p in parents {
                let Some(ok) = ended(&p.job) else {
                    left.push(p.clone());
                    continue;
                };
                let gone = ParentState::Ended {
                    started: Some(SimTime::ZERO),
                    at: SimTime::ZERO,
                    ok,
                };
                if one(*kind, p.delay, gone, SimTime::MAX) == DepState::Never {
                    state = DepState::Never;
                }
            }
            match (state, left.is_empty()) {
                (DepState::Never, _) => never += 1,
                (_, true) if self.any => return Settled::Satisfied,
                (_, true) => {}
                (_, false) => terms.push(Term::Jobs {
                    kind: *kind,
                    parents: left,
                }),
            }
        }
        match (self.any, never > 0, terms.is_empty()) {
            (false, true, _) => Settled::Never,
            (false, false, true) => Settled::Satisfied,
            (true, _, true) => Settled::Never,
            _ => Settled::Waiting(Dependency {
                terms,
                any: self.any,
            }),
        }
    }
}

/// One listed job's condition.
fn one(kind: DepKind, delay: SimTime, state: ParentState, now: SimTime) -> DepState {
    use DepState::*;
    match (kind, state) {
        (_, ParentState::NotStarted) => Waiting,
        (DepKind::After, ParentState::Started { at }) => {
            if now >= at.saturating_add(delay) {
                Satisfied
            } else {
                Waiting
            }
        }
        // A job that ended without running was cancelled: `after` counts cancellation too.
        (DepKind::After, ParentState::Ended { started, at, .. }) => {
            if now >= started.unwrap_or(at).saturating_add(delay) {
                Satisfied
            } else {
                Waiting
            }
        }
        (_, ParentState::Started { .. }) => Waiting,
        (DepKind::AfterAny, ParentState::Ended { .. }) => Satisfied,
        (DepKind::AfterOk, ParentState::Ended { ok, .. }) => {
            if ok {
                Satisfied
            } else {
                Never
            }
        }
        (DepKind::AfterNotOk, ParentState::Ended { ok, .. }) => {
            if ok {
                Never
            } else {
                Satisfied
            }
        }
    }
}

/// All of `states`: never if one is never, satisfied if all are, else waiting.
fn all(states: impl Iterator<Item = DepState>) -> DepState {
    let mut out = DepState::Satisfied;
    for s in states {
        match s {
            DepState::Never => return DepState::Never,
            DepState::Waiting => out = DepState::Waiting,
            DepState::Satisfied => {}
        }
    }
    out
}

/// Any of `states`: satisfied if one is, never if all are, else waiting.
fn any(states: &mut dyn Iterator<Item = DepState>) -> DepState {
    let mut out = DepState::Never;
    for s in states {
        match s {
            DepState::Satisfied => return DepState::Satisfied,
            DepState::Waiting => out = DepState::Waiting,
            DepState::Never => {}
        }
    }
    out
}

impl<J: fmt::Display> fmt::Display for Dependency<J> {
    /// Slurm's syntax.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(if self.any { "?" } else { "," })?;
            }
            match t {
                Term::Singleton => f.write_str("singleton")?,
                Term::Jobs { kind, parents } => {
                    f.write_str(kind.as_str())?;
                    for p in parents {
                        write!(f, ":{}", p.job)?;
                        if p.delay > SimTime::ZERO {
                            write!(f, "+{}", p.delay.ms() / 60_000)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// A set of dependencies that cannot run: a job depends on one the set lacks, or on itself
/// through others.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    #[error("job {job}: depends on {parent}, which is not in the trace")]
    Missing { job: String, parent: String },
    #[error("jobs {cycle}: their dependencies form a cycle")]
    Cycle { cycle: String },
}

/// Checks that the dependencies of jobs `0..n` (`deps[i]`, listing job indices) form no
/// cycle; `name` names a job in the error. Returns an order in which every job comes after
/// the jobs it lists.
pub fn topological_order(
    deps: &[Option<Dependency<usize>>],
    name: impl Fn(usize) -> String,
) -> Result<Vec<usize>, GraphError> {
    let n = deps.len();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut indegree = vec![0usize; n];
    for (child, d) in deps.iter().enumerate() {
        let Some(d) = d else { continue };
        let mut parents: Vec<usize> = d.parents().copied().collect();
        parents.sort_unstable();
        parents.dedup();
        for p in parents {
            if p >= n {
                return Err(GraphError::Missing {
                    job: name(child),
                    parent: format!("job #{p}"),
                });
            }
            children[p].push(child);
            indegree[child] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).rev().collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop() {
        order.push(i);
        for &c in children[i].iter().rev() {
            indegree[c] -= 1;
            if indegree[c] == 0 {
                ready.push(c);
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // Walk parents among the jobs left until one repeats: that loop is a cycle.
    let left: Vec<bool> = indegree.iter().map(|d| *d > 0).collect();
    let start = left.iter().position(|l| *l).unwrap_or(0);
    let mut seen = vec![usize::MAX; n];
    let mut path = Vec::new();
    let mut at = start;
    while seen[at] == usize::MAX {
        seen[at] = path.len();
        path.push(at);
        let next = deps[at]
            .as_ref()
            .and_then(|d| d.parents().copied().find(|p| *p < n && left[*p]));
        match next {
            Some(p) => at = p,
            None => break,
        }
    }
    let from = if seen[at] == usize::MAX { 0 } else { seen[at] };
    let mut cycle: Vec<String> = path[from..].iter().rev().map(|&i| name(i)).collect();
    if let Some(first) = cycle.first().cloned() {
        cycle.push(first);
    }
    Err(GraphError::Cycle {
        cycle: cycle.join(" -> "),
    })
}

#[cfg(test)]
mod tests;
