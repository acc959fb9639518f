//! The fitted job mix: what a job asks for, how long it runs, whose it is, and what it
//! estimates. Works on the trace's jobs and durations; knows nothing of when they arrive.
//!
//! - **Shape classes.** A class is one exact request: tasks, per-task GPUs, share, CPU and
//!   memory, GPU types, priority, QoS, kind and preemptibility. Its weight is its job count.
//!   The [`MAX_CLASSES`] most frequent are kept; a job of a rarer shape is counted in the kept
//!   class nearest to it: closest total GPU request first, then fewest differing categorical
//!   fields, then closest CPU and memory (log ratio), then the more frequent class.
//! - **Durations per class.** A [`QuantileFn`] of the class's true durations, seconds. A class
//!   with fewer than [`MIN_DURATIONS`] jobs borrows the durations of the classes nearest to it
//!   in total GPU request until it has that many: too few points to stand alone.
//! - **Tenants.** Each class keeps its [`TENANTS_PER_CLASS`] most frequent tenants with their
//!   counts; its other jobs draw a tenant from the trace-wide mix. The trace-wide table keeps
//!   the [`MAX_TENANTS`] most frequent tenants and counts the rest as one, [`OTHER_TENANTS`].
//! - **Neighbours.** Which class follows which, and how alike neighbours' durations are:
//!   see `sequence`.
//! - **Estimates.** When the trace has runtime estimates, the share of jobs with one and the
//!   trace-wide distribution of `estimate / max(duration, 1 s)`; a synthetic job's estimate is
//!   its duration times a draw.

use super::dist::{Categorical, QuantileFn};
use super::sequence::{Persistence, Previous};
use crate::job::{JobKind, JobSpec, Qos, TaskRequest, Trace};
use crate::units::TenantId;
use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Most shape classes a model keeps.
pub const MAX_CLASSES: usize = 256;
/// Fewest durations a class's distribution is built from.
pub const MIN_DURATIONS: usize = 16;
/// Most tenants listed per class.
pub const TENANTS_PER_CLASS: usize = 16;
/// Most tenants a model names.
pub const MAX_TENANTS: usize = 1024;
/// The tenant that stands for all tenants beyond [`MAX_TENANTS`].
pub const OTHER_TENANTS: &str = "other-tenants";

/// What a job asks for: everything of a [`JobSpec`] but its name, submit time, tenant and
/// estimate.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shape {
    pub tasks: u32,
    pub task: TaskRequest,
    pub gpu_types: Vec<String>,
    pub priority: i32,
    pub qos: Qos,
    pub kind: JobKind,
    pub preemptible: bool,
}

impl Shape {
    fn of(job: &JobSpec) -> Shape {
        Shape {
            tasks: job.tasks,
            task: job.task,
            gpu_types: job.gpu_types.clone(),
            priority: job.priority,
            qos: job.qos,
            kind: job.kind,
            preemptible: job.preemptible,
        }
    }

    fn gpu_milli_total(&self) -> u64 {
        u64::from(self.tasks) * self.task.gpu_milli_total()
    }

    /// How far `other` is from this shape, for merging and borrowing (module docs).
    fn distance(&self, other: &Shape) -> (u64, u32, f64) {
        let categorical = u32::from(self.gpu_types != other.gpu_types)
            + u32::from(self.priority != other.priority)
            + u32::from(self.qos != other.qos)
            + u32::from(self.kind != other.kind)
            + u32::from(self.preemptible != other.preemptible);
        let log_ratio = |a: u64, b: u64| ((a as f64 + 1.0) / (b as f64 + 1.0)).ln().abs();
        let (tasks_a, tasks_b) = (u64::from(self.tasks), u64::from(other.tasks));
        let resources = log_ratio(tasks_a, tasks_b)
            + log_ratio(
                tasks_a * self.task.cpu_milli,
                tasks_b * other.task.cpu_milli,
            )
            + log_ratio(tasks_a * self.task.mem_mib, tasks_b * other.task.mem_mib);
        (
            self.gpu_milli_total().abs_diff(other.gpu_milli_total()),
            categorical,
            resources,
        )
    }

    /// A job of this shape; the caller sets name, submit, tenant and estimate.
    pub(super) fn job(&self) -> JobSpec {
        JobSpec {
            id: crate::units::JobId(0),
            name: String::new(),
            submit: crate::units::SimTime::ZERO,
            tasks: self.tasks,
            task: self.task,
            gpu_types: self.gpu_types.clone(),
            tenant: TenantId(0),
            priority: self.priority,
            qos: self.qos,
            preemptible: self.preemptible,
            kind: self.kind,
            estimate: None,
            workload: None,
            constraints: Default::default(),
            elastic: None,
        }
    }
}

/// One shape class of the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeClass {
    pub shape: Shape,
    /// Jobs of the trace in this class (rarer shapes merged in): the class's weight.
    pub jobs: u64,
    /// True durations, seconds.
    pub duration_s: QuantileFn,
    /// The class's most frequent tenants.
    pub tenants: Vec<TenantJobs>,
    /// Jobs of the class whose tenant is not listed: these draw from the model's tenant mix.
    pub other_tenant_jobs: u64,
}

/// Jobs of one tenant (an index into the model's tenant table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantJobs {
    pub tenant: u32,
    pub jobs: u64,
}

/// One entry of the model's tenant table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantShare {
    pub name: String,
    pub jobs: u64,
}

/// How runtime estimates relate to durations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EstimateModel {
    /// Share of jobs with an estimate.
    pub share: f64,
    /// `estimate / max(duration, 1 s)`.
    pub ratio: QuantileFn,
}

/// The job mix; see the module docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobMix {
    /// Most frequent first.
    pub classes: Vec<ShapeClass>,
    /// How a job resembles the one before it.
    pub persistence: Persistence,
    /// Tenant table: most frequent first.
    pub tenants: Vec<TenantShare>,
    /// `None` when the trace has no estimates.
    pub estimates: Option<EstimateModel>,
}

impl JobMix {
    /// Fits the mix to `trace`; `batch_start[i]` says whether job `i` starts a batch.
    pub(super) fn fit(trace: &Trace, batch_start: &[bool]) -> JobMix {
        let jobs = trace.jobs();
        let (tenants, tenant_of) = tenant_table(trace);
        let (shapes, class_of) = classes(jobs);
        let job_durations: Vec<f64> = jobs
            .iter()
            .map(|j| trace.true_duration(j.id).secs_f64())
            .collect();
        let mut durations = vec![Vec::new(); shapes.len()];
        let mut by_tenant = vec![HashMap::<u32, u64>::new(); shapes.len()];
        for ((job, &c), &d) in jobs.iter().zip(&class_of).zip(&job_durations) {
            durations[c].push(d);
            *by_tenant[c]
                .entry(tenant_of[job.tenant.index()])
                .or_default() += 1;
        }
        let classes: Vec<ShapeClass> = shapes
            .iter()
            .enumerate()
            .map(|(c, shape)| {
                let (tenants, other_tenant_jobs) = top_tenants(&by_tenant[c]);
                ShapeClass {
                    shape: shape.clone(),
                    jobs: durations[c].len() as u64,
                    duration_s: QuantileFn::from_sample(borrowed_durations(c, &shapes, &durations))
                        .expect("every kept class has jobs"),
                    tenants,
                    other_tenant_jobs,
                }
            })
            .collect();
        let class_jobs: Vec<u64> = classes.iter().map(|c| c.jobs).collect();
        JobMix {
            persistence: Persistence::fit(&class_of, &class_jobs, &job_durations, batch_start),
            classes,
            tenants,
            estimates: estimate_model(trace),
        }
    }

    /// Checks a loaded mix; the message names the field.
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.classes.is_empty() || self.classes.iter().all(|c| c.jobs == 0) {
            return Err("classes: need at least one class with jobs".into());
        }
        if self.tenants.is_empty() || self.tenants.iter().all(|t| t.jobs == 0) {
            return Err("tenants: need at least one tenant with jobs".into());
        }
        let mut names = std::collections::HashSet::new();
        if let Some(t) = self
            .tenants
            .iter()
            .find(|t| t.name.trim().is_empty() || !names.insert(t.name.as_str()))
        {
            return Err(format!("tenants: name `{}` is empty or repeated", t.name));
        }
        self.persistence.validate()?;
        for (i, c) in self.classes.iter().enumerate() {
            let at = |e: String| format!("classes[{i}]: {e}");
            if c.shape.tasks == 0 || c.shape.tasks > crate::job::MAX_TASKS {
                return Err(at(format!("tasks {} out of range", c.shape.tasks)));
            }
            c.shape.task.validate().map_err(at)?;
            c.duration_s.validate().map_err(at)?;
            if let Some(t) = c
                .tenants
                .iter()
                .find(|t| t.tenant as usize >= self.tenants.len())
            {
                return Err(at(format!("tenant {} is not in the table", t.tenant)));
            }
        }
        if let Some(e) = &self.estimates {
            if !(0.0..=1.0).contains(&e.share) {
                return Err(format!("estimates.share must be in 0..=1, got {}", e.share));
            }
            e.ratio
                .validate()
                .map_err(|m| format!("estimates.ratio: {m}"))?;
        }
        Ok(())
    }

    /// A drawing machine for this (validated) mix.
    pub(super) fn sampler(&self) -> MixSampler<'_> {
        let expect = "validated: positive weights";
        MixSampler {
            mix: self,
            classes: Categorical::new(self.classes.iter().map(|c| c.jobs)).expect(expect),
            tenants: Categorical::new(self.tenants.iter().map(|t| t.jobs)).expect(expect),
            class_tenants: self
                .classes
                .iter()
                .map(|c| {
                    let listed = c.tenants.iter().map(|t| t.jobs);
                    Categorical::new(listed.chain([c.other_tenant_jobs]))
                })
                .collect(),
            previous: Previous::default(),
        }
    }
}

/// Draws jobs one by one: class, duration, tenant, estimate.
#[derive(Debug)]
pub(super) struct MixSampler<'m> {
    mix: &'m JobMix,
    classes: Categorical,
    tenants: Categorical,
    /// Per class: its listed tenants, then "any other" last.
    class_tenants: Vec<Option<Categorical>>,
    previous: Previous,
}

/// One drawn job: its class, true duration and tenant (index into the tenant table),
/// and estimate.
pub(super) struct Drawn<'m> {
    pub shape: &'m Shape,
    pub duration_s: f64,
    pub tenant: u32,
    pub estimate_s: Option<f64>,
}

impl<'m> MixSampler<'m> {
    pub(super) fn next<R: Rng + ?Sized>(&mut self, rng: &mut R, starts_batch: bool) -> Drawn<'m> {
        let mix = self.mix;
        let (class, u) = self
            .previous
            .next(rng, &mix.persistence, &self.classes, starts_batch);
        let c = &mix.classes[class];
        let duration_s = c.duration_s.at(u);
        let tenant = match &self.class_tenants[class] {
            Some(d) => match c.tenants.get(d.sample(rng)) {
                Some(t) => t.tenant,
                None => self.tenants.sample(rng) as u32,
            },
            None => self.tenants.sample(rng) as u32,
        };
        let estimate_s = mix.estimates.as_ref().and_then(|e| {
            (rng.random::<f64>() < e.share).then(|| duration_s.max(1.0) * e.ratio.sample(rng))
        });
        Drawn {
            shape: &c.shape,
            duration_s,
            tenant,
            estimate_s,
        }
    }
}

/// The model's tenant table (used tenants, most frequent first, the tail lumped) and each
/// trace tenant's index in it.
fn tenant_table(trace: &Trace) -> (Vec<TenantShare>, Vec<u32>) {
    let mut counts = vec![0u64; trace.tenants().len()];
    for job in trace.jobs() {
        counts[job.tenant.index()] += 1;
    }
    let mut order: Vec<usize> = (0..counts.len()).filter(|&t| counts[t] > 0).collect();
    order.sort_by_key(|&t| std::cmp::Reverse(counts[t]));
    let mut table: Vec<TenantShare> = Vec::new();
    let mut index = vec![0u32; counts.len()];
    for (rank, &t) in order.iter().enumerate() {
        if rank < MAX_TENANTS {
            index[t] = rank as u32;
            table.push(TenantShare {
                name: trace.tenants()[t].clone(),
                jobs: counts[t],
            });
        } else {
            let other = match table.iter().position(|e| e.name == OTHER_TENANTS) {
                Some(i) => i,
                None => {
                    table.push(TenantShare {
                        name: OTHER_TENANTS.into(),
                        jobs: 0,
                    });
                    table.len() - 1
                }
            };
            table[other].jobs += counts[t];
            index[t] = other as u32;
        }
    }
    (table, index)
}

/// The kept shapes (most frequent first, ties by first appearance) and each job's class.
fn classes(jobs: &[JobSpec]) -> (Vec<Shape>, Vec<usize>) {
    let mut seen: HashMap<Shape, usize> = HashMap::new();
    let mut shapes: Vec<(Shape, u64)> = Vec::new();
    let first: Vec<usize> = jobs
        .iter()
        .map(|job| {
            let shape = Shape::of(job);
            let i = *seen.entry(shape.clone()).or_insert_with(|| {
                shapes.push((shape, 0));
                shapes.len() - 1
            });
            shapes[i].1 += 1;
            i
        })
        .collect();
    let mut order: Vec<usize> = (0..shapes.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(shapes[i].1));
    let kept = order.len().min(MAX_CLASSES);
    let mut class_of_shape = vec![0usize; shapes.len()];
    for (rank, &i) in order.iter().enumerate() {
        class_of_shape[i] = if rank < kept {
            rank
        } else {
            nearest(&shapes[i].0, order[..kept].iter().map(|&k| &shapes[k].0))
        };
    }
    let kept_shapes = order[..kept].iter().map(|&i| shapes[i].0.clone()).collect();
    (
        kept_shapes,
        first.iter().map(|&i| class_of_shape[i]).collect(),
    )
}

/// Index of the candidate nearest to `shape` (the first of equals).
fn nearest<'a>(shape: &Shape, candidates: impl Iterator<Item = &'a Shape>) -> usize {
    let mut best: Option<(usize, (u64, u32, f64))> = None;
    for (i, c) in candidates.enumerate() {
        let d = shape.distance(c);
        let closer = best.is_none_or(|(_, b)| {
            (d.0, d.1).cmp(&(b.0, b.1)).then(d.2.total_cmp(&b.2)) == std::cmp::Ordering::Less
        });
        if closer {
            best = Some((i, d));
        }
    }
    best.expect("at least one candidate").0
}

/// Class `c`'s durations, topped up from the classes nearest to it to `MIN_DURATIONS`.
fn borrowed_durations(c: usize, shapes: &[Shape], durations: &[Vec<f64>]) -> Vec<f64> {
    let mut pool = durations[c].clone();
    let mut others: Vec<usize> = (0..shapes.len()).filter(|&o| o != c).collect();
    while pool.len() < MIN_DURATIONS && !others.is_empty() {
        let i = nearest(&shapes[c], others.iter().map(|&o| &shapes[o]));
        pool.extend_from_slice(&durations[others.remove(i)]);
    }
    pool
}

/// The class's listed tenants (most frequent first, ties by index) and its other jobs.
fn top_tenants(counts: &HashMap<u32, u64>) -> (Vec<TenantJobs>, u64) {
    let mut all: Vec<TenantJobs> = counts
        .iter()
        .map(|(&tenant, &jobs)| TenantJobs { tenant, jobs })
        .collect();
    all.sort_by_key(|t| (std::cmp::Reverse(t.jobs), t.tenant));
    let rest = all.split_off(all.len().min(TENANTS_PER_CLASS));
    (all, rest.iter().map(|t| t.jobs).sum())
}

fn estimate_model(trace: &Trace) -> Option<EstimateModel> {
    let ratios: Vec<f64> = trace
        .jobs()
        .iter()
        .filter_map(|j| {
            let duration = trace.true_duration(j.id).secs_f64().max(1.0);
            Some(j.estimate?.secs_f64() / duration)
        })
        .collect();
    let share = ratios.len() as f64 / trace.len().max(1) as f64;
    Some(EstimateModel {
        share,
        ratio: QuantileFn::from_sample(ratios)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::tests::job;

    fn shape(gpus: u32, tasks: u32) -> Shape {
        let mut j = job(
            "j",
            0,
            TaskRequest::whole(gpus, 4000 * u64::from(gpus), 1024),
        );
        j.tasks = tasks;
        Shape::of(&j)
    }

    #[test]
    fn rare_shapes_merge_into_the_nearest_gpu_request() {
        // Candidates ask for 1, 8 and 16 GPUs in all. 6 GPUs is nearest to 8 (2000 milli-GPU
        // off, against 5000 and 10000). 2 x 6 = 12 GPUs is 4000 off both 8 and 16: resources
        // decide, and 2 x 6 (2 tasks, 2 GiB) matches 2 x 8 on tasks and memory.
        let candidates = [shape(1, 1), shape(8, 1), shape(8, 2)];
        assert_eq!(nearest(&shape(6, 1), candidates.iter()), 1);
        assert_eq!(nearest(&shape(6, 2), candidates.iter()), 2);
        assert_eq!(nearest(&shape(1, 1), candidates.iter()), 0);
    }
}
