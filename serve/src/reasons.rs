//! Why each job left pending waits: the first binding constraint from the shared feasibility
//! code (`ClusterState::explain`), or, for a job that would fit now, that the policy held it,
//! behind which older job. Jobs of one shape share one answer, so a queue of hundreds costs a
//! handful of cluster scans.

use crate::proto;
use crate::world::World;
use lachesis_env::cluster::Infeasible;
use lachesis_env::job::TaskRequest;
use lachesis_env::policy::Decision;
use lachesis_env::units::JobId;
use std::collections::HashMap;

/// A job's shape, as far as a reason goes: tasks, task, allowed GPU models.
type Shape<'a> = (u32, TaskRequest, &'a [String]);

/// The reason for every pending job of `after` (the world with `decision` applied); victims of
/// `decision` are reported as preempted.
pub fn pending_reasons(after: &World, decision: &Decision) -> Vec<proto::PendingReason> {
    // Placements are only looked for, never kept: the world's own state serves.
    let mut state = after.cluster_what_if();
    // Per shape: why it does not fit (kind and message, worded once), or `None` if it does.
    let mut by_shape: HashMap<Shape<'_>, Option<(&'static str, String)>> = HashMap::new();
    let mut head: Option<(JobId, String)> = None;
    let mut out = Vec::new();
    for id in after.pending() {
        if !after.is_real(id) {
            continue;
        }
        let job = after.job(id);
        if decision.preemptions.contains(&id) {
            out.push(proto::PendingReason {
                job: job.name.clone(),
                kind: "preempted".into(),
                message: "preempted by this decision to make room; back in the queue".into(),
                blocked_by: String::new(),
            });
            continue;
        }
        let key = (job.tasks, job.task, job.gpu_types.as_slice());
        let why = by_shape.entry(key).or_insert_with(|| {
            // `explain` looks for a placement first: `None` when there is one. Every pending
            // job of a world fits its empty cluster (`World::build` and `apply_delta` refuse
            // one that does not), so that is not asked again.
            state
                .explain_fitting_empty(job)
                .map(|infeasible| (kind(&infeasible), infeasible.to_string()))
        });
        let reason = match why {
            Some((kind, message)) => {
                head.get_or_insert_with(|| {
                    (
                        id,
                        format!(
                            "fits now, but the policy holds it behind older job {:?}, which \
                             does not fit yet",
                            job.name
                        ),
                    )
                });
                proto::PendingReason {
                    job: job.name.clone(),
                    kind: (*kind).into(),
                    message: message.clone(),
                    blocked_by: String::new(),
                }
            }
            None => match &head {
                Some((h, message)) => proto::PendingReason {
                    job: job.name.clone(),
                    kind: "behind".into(),
                    message: message.clone(),
                    blocked_by: after.job(*h).name.clone(),
                },
                None => proto::PendingReason {
                    job: job.name.clone(),
                    kind: "held".into(),
                    message: "fits now; the policy chose not to start it at this decision \
                              (waiting for a better placement or a higher-ranked job)"
                        .into(),
                    blocked_by: String::new(),
                },
            },
        };
        out.push(reason);
    }
    out
}

/// The stable, machine-readable name of a reason.
pub fn kind(why: &Infeasible) -> &'static str {
    use Infeasible::*;
    match why {
        GpuShort { .. } => "gpu-short",
        Fragmented { .. } => "fragmented",
        CpuShortEverywhere { .. } | CpuShort { .. } => "cpu-short",
        MemShortEverywhere { .. } | MemShort { .. } => "mem-short",
        NoAllowedModel { .. } | ModelNotAllowed { .. } => "no-allowed-model",
        GangSpread { .. } => "gang-spread",
        NeverFits => "never-fits",
        NoNodeMatches { .. } | LabelsNotMatched { .. } => "no-matching-node",
        SameNode { .. } => "distinct-nodes",
        TaskCount { .. }
        | UnknownNode(_)
        | GpuCount { .. }
        | NoSuchGpu { .. }
        | DuplicateGpu { .. }
        | GpuBusy { .. } => "infeasible",
    }
}
