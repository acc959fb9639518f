//! `priority`: the most important class first, as a Kubernetes/Volcano priority queue.

use super::sorted_by;
use crate::job::{JobSpec, Qos};
use crate::policy::{DecisionContext, Ordering};
use crate::units::JobId;
use std::cmp::Reverse;

/// The sort key: QoS class (Guaranteed, LatencySensitive, Burstable, BestEffort, in that
/// order), then priority, higher first. Ties fall back to submit order.
pub fn priority_key(job: &JobSpec) -> (Qos, Reverse<i32>) {
    (job.qos, Reverse(job.priority))
}

/// Pending jobs by `priority_key`, then submit time. Greedy: a job that does not fit is
/// skipped and the next one tried (as the Kubernetes scheduler moves on to the next pod), so a
/// large important job can be overtaken by smaller ones; add a reservation modifier to avoid
/// that.
#[derive(Debug, Default)]
pub struct PriorityOrder;

impl Ordering for PriorityOrder {
    fn name(&self) -> &str {
        "priority"
    }
    fn order<'c>(
        &'c mut self,
        ctx: &'c DecisionContext<'_>,
    ) -> Box<dyn Iterator<Item = JobId> + 'c> {
        sorted_by(ctx, |p| priority_key(p.spec))
    }
    fn blocks_on_failure(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::uniform;
    use crate::policy::order::tests::{World, gpu_job, order_of};

    #[test]
    fn key_table() {
        // (qos, priority) -> key; smaller keys go first.
        let cases = [
            (Qos::Guaranteed, 0, (Qos::Guaranteed, Reverse(0))),
            (Qos::BestEffort, 9, (Qos::BestEffort, Reverse(9))),
            (Qos::Burstable, -3, (Qos::Burstable, Reverse(-3))),
        ];
        for (qos, priority, want) in cases {
            let mut j = gpu_job(0, 1);
            j.qos = qos;
            j.priority = priority;
            assert_eq!(priority_key(&j), want);
        }
        // A Guaranteed job of priority 0 beats a LatencySensitive one of priority 100;
        // within a class, priority 5 beats priority 1.
        assert!(
            (Qos::Guaranteed, Reverse(0)) < (Qos::LatencySensitive, Reverse(100))
                && (Qos::Burstable, Reverse(5)) < (Qos::Burstable, Reverse(1))
        );
    }

    #[test]
    fn orders_by_class_then_priority_then_submit() {
        // 0: BE p9; 1: LS p1; 2: LS p5; 3: Guaranteed p0; 4: LS p5 (later than 2).
        let specs = [
            (Qos::BestEffort, 9),
            (Qos::LatencySensitive, 1),
            (Qos::LatencySensitive, 5),
            (Qos::Guaranteed, 0),
            (Qos::LatencySensitive, 5),
        ];
        let jobs = specs
            .iter()
            .enumerate()
            .map(|(i, (q, p))| {
                let mut j = gpu_job(i as u64, 1);
                j.qos = *q;
                j.priority = *p;
                j
            })
            .collect();
        let w = World::new(jobs, uniform(1, 8, "V100", 64_000, 1 << 20));
        assert_eq!(order_of(&mut PriorityOrder, &w, 10), [3, 2, 4, 1, 0]);
        assert!(!PriorityOrder.blocks_on_failure());
    }
}
