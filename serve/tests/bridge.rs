//! The bridge's cycle against a fake Slurm (no daemons): what it pins, releases and requeues
//! for the service's answers, and how it takes Slurm's failures. The real-Slurm end-to-end
//! tests are `tests/slurm.rs`.

#![allow(clippy::unwrap_used)]

use lachesis_serve::ServeConfig;
use lachesis_serve::config::RoutingMode;
use lachesis_serve::slurm::ctl::{SlurmCtl, SlurmError};
use lachesis_serve::slurm::model::{NodeAlloc, SlurmJob, SlurmNode};
use lachesis_serve::slurm::{Bridge, BridgeConfig};
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
struct World {
    nodes: Vec<SlurmNode>,
    jobs: Vec<SlurmJob>,
    calls: Vec<String>,
    fail_pin: Vec<u64>,
    fail_requeue: Vec<u64>,
    /// Reads that show the nodes as they were before every running job started (nodes read
    /// before a job started, its record after), counted down.
    torn_reads: usize,
    reads: usize,
}

#[derive(Debug, Clone, Default)]
struct Fake(Arc<Mutex<World>>);

fn err(what: &str) -> SlurmError {
    SlurmError {
        command: what.into(),
        message: "slurm_update error: Socket timed out on send/recv operation".into(),
    }
}

impl SlurmCtl for Fake {
    fn read(&self) -> Result<(Vec<SlurmNode>, Vec<SlurmJob>), SlurmError> {
        let mut w = self.0.lock().unwrap();
        w.reads += 1;
        let mut nodes = w.nodes.clone();
        if w.torn_reads > 0 {
            w.torn_reads -= 1;
            for n in &mut nodes {
                n.cpu_alloc = 0;
                n.mem_alloc_mib = 0;
                n.gpu_used.clear();
            }
        }
        Ok((nodes, w.jobs.clone()))
    }
    fn pin(&self, job: u64, nodes: &[String], restart: bool) -> Result<(), SlurmError> {
        let mut w = self.0.lock().unwrap();
        w.calls
            .push(format!("pin {job} {} {restart}", nodes.join(",")));
        if w.fail_pin.contains(&job) {
            return Err(err("scontrol update"));
        }
        if let Some(j) = w.jobs.iter_mut().find(|j| j.id == job) {
            j.req_nodes = nodes.to_vec();
        }
        Ok(())
    }
    fn release(&self, jobs: &[u64]) -> Result<(), SlurmError> {
        let mut w = self.0.lock().unwrap();
        w.calls.push(format!("release {jobs:?}"));
        for j in w.jobs.iter_mut().filter(|j| jobs.contains(&j.id)) {
            j.priority = 1;
        }
        Ok(())
    }
    fn hold(&self, jobs: &[u64]) -> Result<(), SlurmError> {
        self.0.lock().unwrap().calls.push(format!("hold {jobs:?}"));
        Ok(())
    }
    fn requeue_hold(&self, job: u64) -> Result<(), SlurmError> {
        let mut w = self.0.lock().unwrap();
        w.calls.push(format!("requeuehold {job}"));
        if w.fail_requeue.contains(&job) {
            return Err(err("scontrol requeuehold"));
        }
        Ok(())
    }
}

fn node(name: &str, partitions: &[&str]) -> SlurmNode {
    SlurmNode {
        name: name.into(),
        cpus: 16,
        cpu_alloc: 0,
        mem_mib: 64_000,
        mem_alloc_mib: 0,
        gpu_type: Some("a100".into()),
        gpus: 4,
        gpu_used: Default::default(),
        state: "IDLE".into(),
        partitions: partitions.iter().map(|p| p.to_string()).collect(),
        features: vec![],
    }
}

fn job(id: u64, partition: &str, gpus: u32) -> SlurmJob {
    SlurmJob {
        id,
        name: "j".into(),
        user: "u".into(),
        account: "a".into(),
        partition: partition.into(),
        state: "PENDING".into(),
        reason: "JobHeldUser".into(),
        priority: 0,
        nodes: 1,
        cpus: 1,
        tasks: 1,
        mem_per_node_mib: 1024,
        gpus_per_node: gpus,
        gpu_type: Some("a100".into()),
        submit_s: Some(1),
        admin_comment: "lachesis:managed".into(),
        ..SlurmJob::default()
    }
}

fn running(mut j: SlurmJob, node: &mut SlurmNode) -> SlurmJob {
    j.state = "RUNNING".into();
    j.priority = 1;
    j.start_s = Some(1);
    j.node_list = vec![node.name.clone()];
    let gpus: Vec<u32> = (0..j.gpus_per_node).collect();
    node.gpu_used.extend(gpus.iter().copied());
    node.cpu_alloc += j.cpus;
    node.mem_alloc_mib += j.mem_per_node_mib;
    j.alloc = vec![NodeAlloc {
        node: node.name.clone(),
        cpus: j.cpus,
        gpus: gpus.into_iter().collect(),
        mem_mib: Some(j.mem_per_node_mib),
    }];
    j
}

async fn service(policy: &str) -> lachesis_serve::Running {
    service_with(policy, "").await
}

async fn service_with(policy: &str, throughputs: &str) -> lachesis_serve::Running {
    let mut cfg = ServeConfig {
        model: String::new(),
        baseline: policy.into(),
        throughputs: throughputs.into(),
        ..ServeConfig::default()
    };
    cfg.routing.mode = RoutingMode::Baseline;
    cfg.grpc.addr = "127.0.0.1:0".into();
    cfg.http.addr = String::new();
    lachesis_serve::start(cfg).await.unwrap()
}

fn bridge(fake: &Fake, addr: std::net::SocketAddr, extra: &str) -> Bridge<Fake> {
    let mut cfg: BridgeConfig = toml::from_str(extra).unwrap();
    cfg.service.addr = addr.to_string();
    Bridge::new(cfg, fake.clone()).unwrap()
}

#[tokio::test]
async fn a_failed_pin_leaves_that_job_held_and_releases_the_rest() {
    let svc = service("fifo/best-fit").await;
    let fake = Fake::default();
    {
        let mut w = fake.0.lock().unwrap();
        w.nodes = vec![node("a1", &["gpu"]), node("a2", &["gpu"])];
        w.jobs = vec![job(1, "gpu", 4), job(2, "gpu", 4), job(3, "gpu", 4)];
        w.fail_pin = vec![1];
    }
    let mut b = bridge(&fake, svc.grpc_addr, "");
    let r = b.cycle().await.unwrap();
    assert_eq!(r.candidates, 3);
    assert_eq!(r.pin_failed.len(), 1, "{r:?}");
    assert_eq!(r.pin_failed[0].0, 1);
    assert!(r.refused.is_empty(), "{r:?}");
    // Jobs 1 and 2 fit (4 GPUs each on two 4-GPU nodes); 1's pin failed, so only 2 is released;
    // 3 waits for room.
    assert_eq!(r.placed.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [2]);
    let calls = fake.0.lock().unwrap().calls.clone();
    assert!(calls.contains(&"release [2]".to_string()), "{calls:?}");

    // Next cycle: 2 is a reservation on its node, 1 is still held and gets the other node.
    fake.0.lock().unwrap().fail_pin.clear();
    let r = b.cycle().await.unwrap();
    assert_eq!(r.placed.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [1]);
    let nodes_of = |id: u64| {
        fake.0
            .lock()
            .unwrap()
            .jobs
            .iter()
            .find(|j| j.id == id)
            .unwrap()
            .req_nodes
            .clone()
    };
    assert_ne!(
        nodes_of(1),
        nodes_of(2),
        "the reservation was counted: no double placement"
    );
    // A third cycle places nothing: both nodes are reserved.
    let r = b.cycle().await.unwrap();
    assert!(r.placed.is_empty(), "{r:?}");
    svc.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_victim_that_cannot_be_requeued_is_reported_and_the_cycle_goes_on() {
    let svc = service("priority/best-fit/preempt").await;
    let fake = Fake::default();
    {
        let mut w = fake.0.lock().unwrap();
        let mut a1 = node("a1", &["gpu", "low"]);
        let low = running(job(10, "low", 4), &mut a1);
        w.nodes = vec![a1];
        w.jobs = vec![low, job(11, "gpu", 4)];
        w.fail_requeue = vec![10];
    }
    let extra = "[partitions.low]\nqos = \"best-effort\"\npreemptible = true\n\
                 [partitions.gpu]\npriority = 100\n";
    let mut b = bridge(&fake, svc.grpc_addr, extra);
    let r = b.cycle().await.unwrap();
    assert!(r.preempted.is_empty(), "{r:?}");
    assert_eq!(
        r.pin_failed.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        [10]
    );
    assert!(
        b.state().requeued.is_empty(),
        "a failed requeue is not recorded"
    );
    // The preemptor was still pinned and released: it waits for the room in Slurm, as a
    // reservation (held again by the bridge if it never starts).
    assert_eq!(r.placed.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [11]);

    // Held again (as a stale release would be), with the requeue working: the victim is
    // requeued and its attained service kept.
    {
        let mut w = fake.0.lock().unwrap();
        w.fail_requeue.clear();
        let j = w.jobs.iter_mut().find(|j| j.id == 11).unwrap();
        j.priority = 0;
        j.req_nodes.clear();
    }
    let r = b.cycle().await.unwrap();
    assert_eq!(r.preempted, [10], "{r:?}");
    assert!(b.state().requeued.contains_key(&10));
    assert!(b.state().attained[&10] > 0);
    svc.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_job_no_partition_node_can_hold_is_not_sent_and_the_service_down_is_reported() {
    let fake = Fake::default();
    {
        let mut w = fake.0.lock().unwrap();
        w.nodes = vec![node("a1", &["gpu"])];
        w.jobs = vec![job(1, "gpu", 8)];
    }
    // Nothing listens on this port.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut b = bridge(&fake, dead, "[on_service_down]\npolicy = \"closed\"\n");
    let r = b.cycle().await.unwrap();
    assert_eq!(r.candidates, 1);
    assert!(
        r.service_error.is_none(),
        "an 8-GPU job on 4-GPU nodes is never sent: {r:?}"
    );

    fake.0.lock().unwrap().jobs.push(job(2, "gpu", 2));
    let r = b.cycle().await.unwrap();
    assert!(r.service_error.is_some(), "{r:?}");
    assert!(r.to_slurm.is_empty(), "fail-closed");
    assert!(b.state().outage_since_ms.is_some());
}

#[tokio::test]
async fn nodes_and_jobs_read_while_a_job_started_are_read_again() {
    let svc = service("fifo/best-fit").await;
    let fake = Fake::default();
    {
        let mut w = fake.0.lock().unwrap();
        let mut a1 = node("a1", &["gpu"]);
        let busy = running(job(10, "gpu", 4), &mut a1);
        w.nodes = vec![a1, node("a2", &["gpu"])];
        w.jobs = vec![busy, job(11, "gpu", 4)];
        // The first read shows a1 idle while job 10 runs there.
        w.torn_reads = 1;
    }
    let (nodes, jobs) = fake.read().unwrap();
    let why = lachesis_serve::slurm::bridge::torn(&nodes, &jobs).unwrap();
    assert!(why.contains("node a1"), "{why}");
    assert_eq!(
        lachesis_serve::slurm::bridge::torn(&fake.read().unwrap().0, &jobs),
        None
    );

    fake.0.lock().unwrap().torn_reads = 1;
    let mut b = bridge(&fake, svc.grpc_addr, "");
    let reads = fake.0.lock().unwrap().reads;
    let r = b.cycle().await.unwrap();
    assert_eq!(fake.0.lock().unwrap().reads - reads, 2, "{r:?}");
    assert_eq!(r.torn_reads, 1);
    assert!(r.service_error.is_none(), "{r:?}");
    // Job 11 goes to a2: a1 is taken by job 10, as the second read shows.
    assert_eq!(r.placed, [(11, vec!["a2".to_string()])]);

    // A view that stays torn is read three times, then sent: the service refuses it, naming
    // the node's field, and the cycle reports that without failing.
    {
        let mut w = fake.0.lock().unwrap();
        let j = w.jobs.iter_mut().find(|j| j.id == 11).unwrap();
        j.priority = 0;
        j.req_nodes.clear();
        w.torn_reads = 100;
    }
    let reads = fake.0.lock().unwrap().reads;
    let r = b.cycle().await.unwrap();
    assert_eq!(fake.0.lock().unwrap().reads - reads, 3, "{r:?}");
    assert_eq!(r.torn_reads, 2);
    let e = r.service_error.unwrap();
    assert!(
        e.contains("InvalidArgument") && e.contains("nodes[0]"),
        "{e}"
    );
    svc.shutdown().await.unwrap();
}

/// Feature constraints and multi-node gangs are met by the service's decision itself: each
/// job is placed on satisfying, distinct nodes in the first cycle, and the bridge's own check
/// (kept as a safety net) refuses nothing.
#[tokio::test]
async fn constrained_jobs_and_gangs_are_placed_on_satisfying_nodes_in_one_cycle() {
    let svc = service("fifo/best-fit").await;
    let fake = Fake::default();
    {
        let mut w = fake.0.lock().unwrap();
        let mut nodes: Vec<SlurmNode> = ["a1", "a2", "a3", "a4"]
            .iter()
            .map(|n| node(n, &["gpu"]))
            .collect();
        nodes[2].features = vec!["ib".into()];
        nodes[3].features = vec!["nvlink".into(), "ib".into()];
        w.nodes = nodes;
        // Best fit alone would put all of these on a1 (the first node, 4 GPUs free).
        let mut ib = job(1, "gpu", 1);
        ib.constraint = lachesis_env::constraint::Constraints::parse("nvlink&ib").unwrap();
        let mut either = job(2, "gpu", 1);
        either.constraint = lachesis_env::constraint::Constraints::parse("ib|x").unwrap();
        // Two nodes of 1 GPU each: Slurm needs two distinct nodes.
        let mut gang = job(3, "gpu", 1);
        gang.nodes = 2;
        w.jobs = vec![ib, either, gang];
    }
    let mut b = bridge(&fake, svc.grpc_addr, "");
    let r = b.cycle().await.unwrap();
    assert!(r.refused.is_empty(), "{r:?}");
    let mut placed: Vec<u64> = r.placed.iter().map(|(id, _)| *id).collect();
    placed.sort_unstable();
    assert_eq!(placed, [1, 2, 3], "{r:?}");
    let jobs = fake.0.lock().unwrap().jobs.clone();
    let nodes_of = |id: u64| jobs.iter().find(|j| j.id == id).unwrap().req_nodes.clone();
    assert_eq!(nodes_of(1), ["a4"]);
    assert!(
        ["a3", "a4"].contains(&nodes_of(2)[0].as_str()),
        "{:?}",
        nodes_of(2)
    );
    let gang = nodes_of(3);
    assert_eq!(gang.len(), 2);
    assert_ne!(gang[0], gang[1]);
    svc.shutdown().await.unwrap();
}

/// Typed Slurm jobs (`--comment='workload=...'`): the service shares the one V100 between the
/// running ResNet-50 job and the waiting LM job, which Slurm cannot express (it gives each GPU
/// to one job): the bridge applies nothing, reports why, and the job stays held.
#[tokio::test]
async fn a_share_is_reported_not_applied_and_the_job_stays_held() {
    let svc = service_with("fifo/fastest/colocate", "gavel").await;
    let fake = Fake::default();
    {
        let mut w = fake.0.lock().unwrap();
        let mut v = node("v1", &["gpu"]);
        (v.gpu_type, v.gpus) = (Some("v100".into()), 1);
        let mut holder = job(1, "gpu", 1);
        holder.gpu_type = Some("v100".into());
        holder.comment = "workload=ResNet-50 (batch size 64)".into();
        let holder = running(holder, &mut v);
        let mut waiting = job(2, "gpu", 1);
        waiting.gpu_type = Some("v100".into());
        waiting.comment = "workload=LM (batch size 20)".into();
        w.nodes = vec![v];
        w.jobs = vec![holder, waiting];
    }
    let mut b = bridge(&fake, svc.grpc_addr, "");
    let r = b.cycle().await.unwrap();
    assert!(r.placed.is_empty(), "{r:?}");
    assert_eq!(
        r.refused,
        vec![(
            2,
            lachesis_serve::slurm::bridge::SHARE_UNSUPPORTED.to_string()
        )],
        "{r:?}"
    );
    let calls = fake.0.lock().unwrap().calls.clone();
    assert!(
        calls
            .iter()
            .all(|c| !c.starts_with("release") || c == "release []"),
        "{calls:?}"
    );
}
