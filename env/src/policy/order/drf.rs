//! `drf`: fair share across tenants by dominant resource fairness (Ghodsi et al., "Dominant
//! Resource Fairness", NSDI'11).

use super::Score;
use crate::job::JobSpec;
use crate::policy::{DecisionContext, Ordering};
use crate::units::{JobId, TenantId};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

/// Resources DRF weighs: GPU (milli-GPU), CPU (milli-cores), memory (MiB).
type Usage = [u64; 3];

/// A tenant's dominant share: the largest fraction of any resource it holds. Resources the
/// cluster has none of are ignored.
pub fn dominant_share(usage: Usage, capacity: Usage) -> f64 {
    usage
        .iter()
        .zip(capacity)
        .filter(|(_, c)| *c > 0)
        .map(|(u, c)| *u as f64 / c as f64)
        .fold(0.0, f64::max)
}

fn demand(job: &JobSpec) -> Usage {
    let n = job.tasks as u64;
    [
        job.gpu_milli_total(),
        n * job.task.cpu_milli,
        n * job.task.mem_mib,
    ]
}

/// DRF's progressive filling over the pending queue: repeatedly take the oldest pending job of
/// the tenant with the smallest dominant share (of what its running jobs hold), then count
/// that job's demand as its tenant's, as if it were placed. Ties go to the tenant whose head
/// job was submitted first. Greedy: a job that does not fit is skipped (its demand still
/// counted, which errs towards the other tenants until the next decision recomputes shares
/// from what actually runs).
#[derive(Debug, Default)]
pub struct Drf;

impl Ordering for Drf {
    fn name(&self) -> &str {
        "drf"
    }
    fn order<'c>(
        &'c mut self,
        ctx: &'c DecisionContext<'_>,
    ) -> Box<dyn Iterator<Item = JobId> + 'c> {
        let mut queues: BTreeMap<TenantId, VecDeque<JobId>> = BTreeMap::new();
        for p in ctx.pending() {
            queues
                .entry(p.spec.tenant)
                .or_default()
                .push_back(p.spec.id);
        }
        let (mut usage, capacity) = {
            let cluster = ctx.cluster();
            let mut usage: BTreeMap<TenantId, Usage> = BTreeMap::new();
            for alloc in cluster.running() {
                let u = usage.entry(ctx.job(alloc.job).tenant).or_default();
                let n = alloc.tasks.len() as u64;
                u[0] += n * alloc.task.gpu_milli_total();
                u[1] += n * alloc.task.cpu_milli;
                u[2] += n * alloc.task.mem_mib;
            }
            let spec = cluster.spec();
            let capacity = [
                spec.total_gpu_milli(),
                spec.total_cpu_milli(),
                spec.total_mem_mib(),
            ];
            (usage, capacity)
        };
        let share = |usage: &BTreeMap<TenantId, Usage>, t: TenantId| {
            Score(dominant_share(
                usage.get(&t).copied().unwrap_or_default(),
                capacity,
            ))
        };
        let mut heap: BinaryHeap<Reverse<(Score, JobId, TenantId)>> = queues
            .iter()
            .map(|(t, q)| Reverse((share(&usage, *t), q[0], *t)))
            .collect();
        let mut order = Vec::with_capacity(ctx.pending_len());
        while let Some(Reverse((_, _, tenant))) = heap.pop() {
            let queue = queues.get_mut(&tenant).expect("heap holds queued tenants");
            let id = queue
                .pop_front()
                .expect("a tenant is in the heap while it has jobs");
            order.push(id);
            let u = usage.entry(tenant).or_default();
            for (have, want) in u.iter_mut().zip(demand(ctx.job(id))) {
                *have += want;
            }
            if let Some(&next) = queue.front() {
                heap.push(Reverse((share(&usage, tenant), next, tenant)));
            }
        }
        Box::new(order.into_iter())
    }
    fn blocks_on_failure(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::uniform;
    use crate::job::TaskRequest;
    use crate::job::tests::job;
    use crate::policy::order::tests::{World, order_of};

    #[test]
    fn dominant_share_table() {
        // capacity: 8000 milli-GPU, 64000 milli-CPU, 1000 MiB.
        let cap = [8000, 64_000, 1000];
        let cases = [
            ([0, 0, 0], 0.0),
            ([2000, 8000, 100], 0.25), // GPU 2/8 > CPU 1/8 > mem 1/10
            ([1000, 32_000, 0], 0.5),  // CPU 1/2 dominates
            ([0, 0, 900], 0.9),        // memory dominates
        ];
        for (usage, want) in cases {
            assert_eq!(dominant_share(usage, cap), want, "{usage:?}");
        }
        // A cluster without GPUs: the GPU column is ignored.
        assert_eq!(dominant_share([5, 16_000, 0], [0, 64_000, 1000]), 0.25);
    }

    fn tenant_job(submit_s: u64, tenant: u32, gpus: u32, cpu_milli: u64) -> JobSpec {
        let mut j = job("j", submit_s, TaskRequest::whole(gpus, cpu_milli, 0));
        j.tenant = TenantId(tenant);
        j
    }

    #[test]
    fn prefers_the_tenant_with_the_smaller_dominant_share() {
        // One node: 8 GPUs, 64 cores. Tenant 0 runs 2 GPUs + 2 cores (share 2/8 = 0.25);
        // tenant 1 runs 1 GPU + 24 cores (share 24/64 = 0.375, CPU-dominant).
        // Waiting, in submit order: 2 (tenant 1), 3 (tenant 0), 4 (tenant 0), 5 (tenant 1),
        // each 1 GPU + 2 cores.
        // Tenant 0 first (0.25): job 3, share -> 3/8 = 0.375 = tenant 1's; tie broken by the
        // older head job: tenant 1's job 2 (submitted before job 4), share -> max(2/8,
        // 26/64) = 0.406. Tenant 0 (0.375): job 4. Then tenant 1: job 5.
        let jobs = vec![
            tenant_job(0, 0, 2, 2000),
            tenant_job(0, 1, 1, 24_000),
            tenant_job(1, 1, 1, 2000),
            tenant_job(2, 0, 1, 2000),
            tenant_job(3, 0, 1, 2000),
            tenant_job(4, 1, 1, 2000),
        ];
        let mut w = World::new(jobs, uniform(1, 8, "V100", 64_000, 1 << 20));
        w.start(0, 0);
        w.start(1, 0);
        assert_eq!(order_of(&mut Drf, &w, 10), [3, 2, 4, 5]);
        assert!(!Drf.blocks_on_failure());
    }

    #[test]
    fn an_idle_cluster_alternates_tenants() {
        // Nothing running; tenant 0 submitted 3 jobs before tenant 1's 2 (1 GPU each).
        // Shares start equal (0): tenant 0's older head goes first, then they alternate.
        let jobs = vec![
            tenant_job(0, 0, 1, 0),
            tenant_job(1, 0, 1, 0),
            tenant_job(2, 0, 1, 0),
            tenant_job(3, 1, 1, 0),
            tenant_job(4, 1, 1, 0),
        ];
        let w = World::new(jobs, uniform(1, 8, "V100", 64_000, 1 << 20));
        assert_eq!(order_of(&mut Drf, &w, 10), [0, 3, 1, 4, 2]);
    }
}
