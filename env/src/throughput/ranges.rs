//! Elastic GPU ranges for traces that declare none, by a published rule: which typed jobs may
//! grow and shrink, and between which sizes. The rule's name comes back with the trace
//! ([`ElasticAssignment`]) so that every report can say which ranges were assumed.
//!
//! - [`ElasticRule::Pollux`]: Pollux's simulator treats every job as elastic. It gives each job
//!   `min_replicas = 0` and `max_replicas = min(max(2 x most GPUs run on so far, 1), 64,
//!   max_batch_size // min_local_bsz)`, with one replica per GPU, and sets ncf's to 1
//!   (`simulator/simulator.py`, `get_pollux_job_info`, petuum/adaptdl `osdi21-artifact`).
//!   Here a typed job whose tasks take whole GPUs becomes one 1-GPU task per GPU of its trace
//!   size (CPU and memory split evenly, rounded up), preemptible (a resize is a checkpoint and
//!   restart; Pollux's jobs are all `preemptible=True`), with the range `1..=M`: `M` is the largest
//!   GPU count, at most 64, at which the table rates the workload above 0 on its reference GPU.
//!   The table plays the part of Pollux's batch-size limit, the sizes its workload was measured
//!   at. The lower bound is 1 rather than 0: taking every GPU away is a preemption, which
//!   policies do by their own rules. Pollux's growth by at most 2x per round while it explores
//!   has no counterpart here: policies read the table's rates, as they do for placement. A
//!   workload the table rates at one GPU only (Gavel's non-distributed templates, Sia's ncf)
//!   stays rigid, as Pollux's ncf does.
//!
//! Jobs left rigid: untyped ones, those asking for no or fractional GPUs, those already
//! elastic, gangs that need distinct nodes (their task shape is a placement constraint), and
//! jobs whose trace size is above `M` (the simulator refuses those for the table's lack of a
//! rate at their size). The job's work stays its trace duration at its trace size.

use super::{Consolidation, ThroughputTable};
use crate::job::{Elastic, JobSpec, MAX_TASKS, TaskRequest, Trace};
use crate::units::GPU_MILLI;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Pollux's cap on a job's replicas ("simulator can't handle more").
pub const POLLUX_MAX_GPUS: u32 = 64;

/// A rule that gives typed jobs an elastic GPU range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ElasticRule {
    /// Every typed whole-GPU job, as 1-GPU tasks, over `1..=` the table's largest size.
    Pollux,
}

impl ElasticRule {
    pub const ALL: [ElasticRule; 1] = [ElasticRule::Pollux];

    pub fn as_str(self) -> &'static str {
        match self {
            ElasticRule::Pollux => "pollux",
        }
    }

    pub fn parse(text: &str) -> Option<ElasticRule> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str().eq_ignore_ascii_case(text.trim()))
    }

    /// Where the rule is taken from, for reports.
    pub fn source(self) -> &'static str {
        match self {
            ElasticRule::Pollux => {
                "Pollux (OSDI'21) simulator/simulator.py get_pollux_job_info: every job elastic, \
                 min_replicas 0, max_replicas capped at 64 and by the job's batch-size limit"
            }
        }
    }
}

impl fmt::Display for ElasticRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What [`assign_elastic`] did, for reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElasticAssignment {
    pub rule: ElasticRule,
    /// Jobs made elastic by the rule.
    pub made_elastic: u64,
    /// Jobs that were elastic already, kept as they are.
    pub kept: u64,
    /// Typed jobs left rigid: their workload runs on one GPU only, or they ask for fractional
    /// GPUs, need distinct nodes, or are larger than the table's largest size.
    pub rigid: u64,
    /// Jobs made elastic, by their `max_gpus`.
    pub by_max_gpus: BTreeMap<u32, u64>,
}

impl ElasticAssignment {
    /// `pollux`: the rule, as a report's one-line label.
    pub fn label(&self) -> String {
        self.rule.to_string()
    }
}

/// The largest GPU count, at most `cap`, at which `table` rates `workload` above 0 on its
/// reference GPU, placed consolidated (1 where it has only 1-GPU rates); `None` when the
/// table does not know the workload.
pub fn largest_rated_size(table: &ThroughputTable, workload: &str, cap: u32) -> Option<u32> {
    let w = table.workload(workload).ok()?;
    let reference = table.reference();
    let largest = table
        .rates_of(w)
        .filter(|(gpu, gpus, placement, rate)| {
            *gpu == reference
                && *placement == Consolidation::Consolidated
                && *gpus <= cap
                && *rate > 0.0
        })
        .map(|(_, gpus, _, _)| gpus)
        .max();
    Some(largest.unwrap_or(1))
}

/// `job` as an elastic job under `rule`, or `None` when the rule leaves it rigid. A typed job
/// whose workload `table` lacks is left to the simulator, which refuses it by name.
fn elastic_shape(job: &JobSpec, table: &ThroughputTable, rule: ElasticRule) -> Option<JobSpec> {
    let ElasticRule::Pollux = rule;
    let workload = job.workload.as_ref()?;
    if job.task.gpus == 0 || job.task.gpu_milli != GPU_MILLI || job.constraints.distinct_nodes {
        return None;
    }
    let max = largest_rated_size(table, workload.as_str(), POLLUX_MAX_GPUS.min(MAX_TASKS))?;
    let gpus = u32::try_from(job.gpus_total()).ok()?;
    if max <= 1 || gpus > max {
        return None;
    }
    let per_gpu = |total: u64| total.div_ceil(u64::from(gpus));
    let mut out = job.clone();
    out.tasks = gpus;
    out.task = TaskRequest {
        gpus: 1,
        gpu_milli: GPU_MILLI,
        cpu_milli: per_gpu(job.task.cpu_milli * u64::from(job.tasks)),
        mem_mib: per_gpu(job.task.mem_mib * u64::from(job.tasks)),
    };
    out.elastic = Some(Elastic {
        min_gpus: 1,
        max_gpus: max,
    });
    // A resize is a checkpoint and restart: Pollux's jobs are all `preemptible=True`.
    out.preemptible = true;
    Some(out)
}

/// `trace` with elastic ranges given by `rule` from `table`'s rates (see the module docs), and
/// the account of it. Deterministic: the rule draws nothing.
pub fn assign_elastic(
    trace: &Trace,
    table: &ThroughputTable,
    rule: ElasticRule,
) -> (Trace, ElasticAssignment) {
    let mut account = ElasticAssignment {
        rule,
        made_elastic: 0,
        kept: 0,
        rigid: 0,
        by_max_gpus: BTreeMap::new(),
    };
    let jobs: Vec<JobSpec> = trace
        .jobs()
        .iter()
        .map(|job| {
            if job.elastic.is_some() {
                account.kept += 1;
                return job.clone();
            }
            match elastic_shape(job, table, rule) {
                Some(elastic) => {
                    account.made_elastic += 1;
                    let max = elastic.elastic.map_or(0, |e| e.max_gpus);
                    *account.by_max_gpus.entry(max).or_insert(0) += 1;
                    elastic
                }
                None => {
                    if job.workload.is_some() {
                        account.rigid += 1;
                    }
                    job.clone()
                }
            }
        })
        .collect();
    let elastic = Trace::new(
        trace.name.clone(),
        jobs,
        trace.true_durations().to_vec(),
        trace.tenants().to_vec(),
    )
    .expect("a valid job reshaped into 1-GPU tasks within its range is as valid");
    (elastic, account)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constraint::Constraints;
    use crate::job::WorkloadType;
    use crate::job::tests::job;
    use crate::throughput::{TableBuilder, load_table};
    use crate::units::SimTime;

    fn trace(jobs: Vec<JobSpec>) -> Trace {
        let n = jobs.len();
        Trace::new("t", jobs, vec![SimTime(3_600_000); n], vec!["a".into()]).unwrap()
    }

    fn typed(name: &str, tasks: u32, task: TaskRequest, workload: &str) -> JobSpec {
        let mut j = job(name, 0, task);
        j.tasks = tasks;
        j.workload = WorkloadType::new(workload);
        j
    }

    #[test]
    fn gavel_ranges_follow_the_table_sizes() {
        let table = load_table("gavel").unwrap();
        // Gavel measures distributed templates at 1, 2, 4, 8 GPUs, the others at 1.
        assert_eq!(
            largest_rated_size(&table, "ResNet-50 (batch size 64)", 64),
            Some(8)
        );
        assert_eq!(
            largest_rated_size(&table, "ResNet-50 (batch size 64)", 4),
            Some(4)
        );
        assert_eq!(
            largest_rated_size(&table, "Recommendation (batch size 512)", 64),
            Some(1)
        );
        assert_eq!(largest_rated_size(&table, "no such model", 64), None);
    }

    #[test]
    fn pollux_reshapes_whole_gpu_jobs_into_one_gpu_tasks() {
        let table = load_table("gavel").unwrap();
        let resnet = "ResNet-50 (batch size 64)";
        let jobs = vec![
            // 2 tasks of 2 GPUs, not preemptible: 4 preemptible tasks of 1 GPU, CPU and
            // memory split evenly.
            {
                let mut j = typed("gang", 2, TaskRequest::whole(2, 3_000, 1_001), resnet);
                j.preemptible = false;
                j
            },
            // A 1-GPU job of a distributed template may grow.
            typed("one", 1, TaskRequest::whole(1, 1_000, 100), resnet),
            // Non-distributed template: rigid.
            typed(
                "rec",
                1,
                TaskRequest::whole(1, 1_000, 100),
                "Recommendation (batch size 512)",
            ),
            // Fractional: rigid.
            typed(
                "frac",
                1,
                TaskRequest {
                    gpu_milli: 500,
                    ..TaskRequest::whole(1, 1_000, 100)
                },
                resnet,
            ),
            // Untyped: rigid, not counted.
            job("plain", 0, TaskRequest::whole(2, 1_000, 100)),
            // Distinct nodes: rigid.
            {
                let mut j = typed("spread", 2, TaskRequest::whole(1, 1_000, 100), resnet);
                j.constraints = Constraints {
                    distinct_nodes: true,
                    ..Default::default()
                };
                j
            },
        ];
        let input = trace(jobs.clone());
        let (out, account) = assign_elastic(&input, &table, ElasticRule::Pollux);
        let gang = &out.jobs()[0];
        assert_eq!(gang.tasks, 4);
        assert_eq!(gang.task, TaskRequest::whole(1, 1_500, 501));
        assert_eq!(
            gang.elastic,
            Some(Elastic {
                min_gpus: 1,
                max_gpus: 8
            })
        );
        assert_eq!(gang.gpus_total(), jobs[0].gpus_total());
        assert!(gang.preemptible);
        assert_eq!(out.jobs()[1].elastic.map(|e| e.max_gpus), Some(8));
        for (i, j) in out.jobs().iter().enumerate().skip(2) {
            assert_eq!(j, &input.jobs()[i], "job {} must stay as it was", j.name);
        }
        assert_eq!(out.true_durations(), input.true_durations());
        assert_eq!(account.made_elastic, 2);
        assert_eq!(account.rigid, 3);
        assert_eq!(account.kept, 0);
        assert_eq!(account.by_max_gpus, BTreeMap::from([(8, 2)]));
        assert_eq!(account.label(), "pollux");
    }

    #[test]
    fn jobs_already_elastic_or_above_the_table_are_kept() {
        let mut b = TableBuilder::new("t", "V100").unwrap();
        let w = WorkloadType::new("w").unwrap();
        // Rated at 1 and 2 reference GPUs; a 4-GPU rate on another GPU model does not count.
        for (gpu, gpus, rate) in [("V100", 1, 1.0), ("V100", 2, 1.8), ("T4", 4, 1.5)] {
            b.single(&w, gpu, gpus, Consolidation::Consolidated, rate, 0)
                .unwrap();
        }
        let table = b.finish().unwrap();
        let mut already = typed("already", 2, TaskRequest::whole(1, 0, 0), "w");
        already.elastic = Some(Elastic {
            min_gpus: 2,
            max_gpus: 2,
        });
        let big = typed("big", 1, TaskRequest::whole(4, 0, 0), "w");
        let small = typed("small", 1, TaskRequest::whole(1, 0, 0), "w");
        let input = trace(vec![already, big, small]);
        let (out, account) = assign_elastic(&input, &table, ElasticRule::Pollux);
        assert_eq!(out.jobs()[0], input.jobs()[0]);
        assert_eq!(out.jobs()[1], input.jobs()[1]);
        assert_eq!(out.jobs()[2].elastic.map(|e| e.max_gpus), Some(2));
        assert_eq!(
            (account.kept, account.rigid, account.made_elastic),
            (1, 1, 1)
        );
    }

    #[test]
    fn the_rule_parses_by_name() {
        assert_eq!(ElasticRule::parse(" Pollux "), Some(ElasticRule::Pollux));
        assert_eq!(ElasticRule::parse("sia"), None);
        assert!(ElasticRule::Pollux.source().contains("get_pollux_job_info"));
    }
}
