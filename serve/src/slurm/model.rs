//! Slurm's view of nodes and jobs, read from `scontrol -d -o show node|job` records (with
//! `SLURM_TIME_FORMAT=%s`, so times are Unix seconds).

use super::parse::{self, expand_hostlist, fields, get, gpu_gres, is_null, mem_mib};
use lachesis_env::constraint::{Constraints, LabelTerm, NodeLabels};
use std::collections::BTreeSet;

/// One node as `scontrol -d -o show node` prints it.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmNode {
    pub name: String,
    pub cpus: u32,
    pub cpu_alloc: u32,
    pub mem_mib: u64,
    pub mem_alloc_mib: u64,
    /// The GPU type of the node's GPU GRES (`None` for an untyped or GPU-less node).
    pub gpu_type: Option<String>,
    pub gpus: u32,
    /// GPU indices in use (from `GresUsed`).
    pub gpu_used: BTreeSet<u32>,
    /// `State` as printed, e.g. `MIXED`, `IDLE+DRAIN`, `DOWN*`.
    pub state: String,
    pub partitions: Vec<String>,
    pub features: Vec<String>,
}

impl SlurmNode {
    /// The node's features as labels (each a key with an empty value), what a job's
    /// `constraint` is checked against.
    pub fn feature_labels(&self) -> NodeLabels {
        self.features
            .iter()
            .map(|f| (f.clone(), String::new()))
            .collect()
    }
    /// Parses one record; the error names the node (when known) and the field.
    pub fn parse(line: &str) -> Result<SlurmNode, String> {
        let f = fields(line);
        let name = get(&f, "NodeName")
            .ok_or("a node record without NodeName")?
            .to_string();
        let field = |key: &str| -> Result<&str, String> {
            get(&f, key).ok_or_else(|| format!("node {name}: no {key} field"))
        };
        let num = |key: &str| -> Result<u64, String> {
            let v = field(key)?;
            v.parse()
                .map_err(|_| format!("node {name}: {key}={v} is not a number"))
        };
        let gres = gpu_gres(field("Gres")?).map_err(|e| format!("node {name}: Gres: {e}"))?;
        let used = gpu_gres(get(&f, "GresUsed").unwrap_or("(null)"))
            .map_err(|e| format!("node {name}: GresUsed: {e}"))?;
        let types: BTreeSet<Option<String>> = gres.iter().map(|g| g.kind.clone()).collect();
        if types.len() > 1 {
            return Err(format!(
                "node {name}: Gres={} mixes GPU types; Lachesis models one GPU model per node",
                field("Gres")?
            ));
        }
        let gpus: u32 = gres.iter().map(|g| g.count).sum();
        let mut gpu_used = BTreeSet::new();
        for g in &used {
            match &g.idx {
                Some(idx) => gpu_used.extend(idx.iter().copied()),
                // No indices: the first `count` are taken as used (conservative).
                None => gpu_used.extend(0..g.count),
            }
        }
        if let Some(bad) = gpu_used.iter().find(|i| **i >= gpus) {
            return Err(format!(
                "node {name}: GresUsed index {bad} beyond its {gpus} GPUs"
            ));
        }
        let list = |key: &str| -> Vec<String> {
            get(&f, key)
                .filter(|v| !is_null(v))
                .map(|v| v.split(',').map(str::to_string).collect())
                .unwrap_or_default()
        };
        Ok(SlurmNode {
            cpus: num("CPUTot")? as u32,
            cpu_alloc: num("CPUAlloc")? as u32,
            mem_mib: num("RealMemory")?,
            mem_alloc_mib: get(&f, "AllocMem").map_or(Ok(0), |v| {
                v.parse()
                    .map_err(|_| format!("node {name}: AllocMem={v} is not a number"))
            })?,
            gpu_type: types.into_iter().next().flatten(),
            gpus,
            gpu_used,
            state: field("State")?.to_string(),
            partitions: list("Partitions"),
            features: list("AvailableFeatures"),
            name,
        })
    }

    /// Whether Slurm would start a job here now: up and responding, not drained, failed,
    /// in maintenance, powered down or rebooting.
    pub fn usable(&self) -> bool {
        let state = self.state.to_ascii_uppercase();
        if state.ends_with('*') || state.ends_with('~') || state.ends_with('#') {
            return false;
        }
        let mut parts = state.split('+');
        let base = parts.next().unwrap_or("");
        let base_ok = matches!(
            base,
            "IDLE" | "MIXED" | "ALLOCATED" | "ALLOC" | "COMPLETING"
        );
        base_ok
            && parts.all(|flag| {
                !matches!(
                    flag,
                    "DRAIN"
                        | "DRAINING"
                        | "DRAINED"
                        | "FAIL"
                        | "FAILING"
                        | "MAINT"
                        | "POWERED_DOWN"
                        | "POWERING_DOWN"
                        | "POWER_DOWN"
                        | "POWERING_UP"
                        | "REBOOT_REQUESTED"
                        | "REBOOT_ISSUED"
                        | "RESERVED"
                        | "NOT_RESPONDING"
                        | "INVALID_REG"
                )
            })
    }
}

/// Where a running job's resources are on one node (the `-d` detail of a job record).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeAlloc {
    pub node: String,
    /// CPUs allocated on the node (count of `CPU_IDs`).
    pub cpus: u32,
    pub gpus: BTreeSet<u32>,
    pub mem_mib: Option<u64>,
}

/// One job as `scontrol -d -o show job` prints it (`Default`: every field empty or zero, for
/// building records by hand).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SlurmJob {
    pub id: u64,
    pub name: String,
    pub user: String,
    pub account: String,
    pub partition: String,
    pub qos: String,
    /// `JobState`, e.g. `PENDING`, `RUNNING`, `COMPLETED`.
    pub state: String,
    pub reason: String,
    pub priority: u64,
    pub nice: i64,
    /// Nodes the job needs (the minimum of `NumNodes`).
    pub nodes: u32,
    pub cpus: u32,
    pub tasks: u32,
    /// Memory per node, MiB (from `MinMemoryNode`, or `MinMemoryCPU` x CPUs per node).
    pub mem_per_node_mib: u64,
    /// GPUs per node, and their type when the request names one.
    pub gpus_per_node: u32,
    pub gpu_type: Option<String>,
    /// The request has no shape the service can express (e.g. `--gpus=3` over 2 nodes, a
    /// pending job array, a heterogeneous job): such jobs go to Slurm's own scheduler.
    pub gpu_shape_error: Option<String>,
    pub time_limit_ms: Option<u64>,
    /// Unix seconds.
    pub submit_s: Option<u64>,
    pub start_s: Option<u64>,
    pub restarts: u32,
    pub req_nodes: Vec<String>,
    pub exc_nodes: Vec<String>,
    pub node_list: Vec<String>,
    /// Required node features (`Features=`, from `--constraint`) as label constraints on the
    /// nodes' features: `&` and `|` of feature names. Brackets, counts (`ib*2`) and
    /// parentheses are not supported: such a job goes to Slurm's own scheduler.
    pub constraint: Constraints,
    pub admin_comment: String,
    /// The user's `--comment`: a `workload=NAME` word in it gives the job's workload type in
    /// the service's throughput table.
    pub comment: String,
    pub alloc: Vec<NodeAlloc>,
}

impl SlurmJob {
    /// The workload type the job's `--comment` names: the text after `workload=` up to the
    /// next `;` or the end (names may hold spaces: `--comment='workload=ResNet-50 (batch size
    /// 64)'`).
    pub fn workload(&self) -> Option<&str> {
        let (_, rest) = self.comment.split_once("workload=")?;
        let name = rest.split(';').next().unwrap_or("").trim();
        (!name.is_empty()).then_some(name)
    }

    /// Parses one record; the error names the job id and the field.
    pub fn parse(line: &str) -> Result<SlurmJob, String> {
        let f = fields(line);
        let id_text = get(&f, "JobId").ok_or("a job record without JobId")?;
        let id: u64 = id_text
            .parse()
            .map_err(|_| format!("JobId={id_text} is not a number"))?;
        let field = |key: &str| -> Result<&str, String> {
            get(&f, key).ok_or_else(|| format!("job {id}: no {key} field"))
        };
        let text = |key: &str| -> String {
            get(&f, key)
                .filter(|v| !is_null(v))
                .unwrap_or("")
                .to_string()
        };
        let epoch = |key: &str| -> Result<Option<u64>, String> {
            match get(&f, key) {
                None => Ok(None),
                Some(v) if is_null(v) => Ok(None),
                Some(v) => v.parse().map(Some).map_err(|_| {
                    format!("job {id}: {key}={v} is not Unix seconds (set SLURM_TIME_FORMAT=%s)")
                }),
            }
        };
        let nodes_text = field("NumNodes")?;
        let nodes: u32 = nodes_text
            .split('-')
            .next()
            .unwrap_or("")
            .parse()
            .map_err(|_| format!("job {id}: NumNodes={nodes_text} is not a node count"))?;
        let nodes = nodes.max(1);
        let num = |key: &str| -> Result<u64, String> {
            let v = field(key)?;
            v.parse()
                .map_err(|_| format!("job {id}: {key}={v} is not a number"))
        };
        let cpus = num("NumCPUs")? as u32;
        let tasks = get(&f, "NumTasks")
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(1)
            .max(1);
        let cpus_per_node = cpus.div_ceil(nodes);
        let mem_per_node_mib = match (get(&f, "MinMemoryNode"), get(&f, "MinMemoryCPU")) {
            (Some(v), _) => mem_mib(v).map_err(|e| format!("job {id}: MinMemoryNode: {e}"))?,
            (None, Some(v)) => {
                mem_mib(v).map_err(|e| format!("job {id}: MinMemoryCPU: {e}"))?
                    * u64::from(cpus_per_node)
            }
            (None, None) => 0,
        };

        // The GPU request, per node.
        let mut gpu_shape_error = None;
        let mut gpus_per_node = 0;
        let mut gpu_type = None;
        let per = |key: &str| -> Result<Vec<parse::Gres>, String> {
            gpu_gres(get(&f, key).unwrap_or("(null)")).map_err(|e| format!("job {id}: {key}: {e}"))
        };
        let (per_node, per_job, per_task) =
            (per("TresPerNode")?, per("TresPerJob")?, per("TresPerTask")?);
        if let Some(g) = per_node.first() {
            gpus_per_node = g.count;
            gpu_type = g.kind.clone();
        } else if let Some(g) = per_job.first() {
            gpu_type = g.kind.clone();
            if g.count.is_multiple_of(nodes) {
                gpus_per_node = g.count / nodes;
            } else {
                gpu_shape_error = Some(format!(
                    "{} GPUs per job over {nodes} nodes is not the same count on every node",
                    g.count
                ));
            }
        } else if let Some(g) = per_task.first() {
            gpu_type = g.kind.clone();
            if tasks.is_multiple_of(nodes) {
                gpus_per_node = g.count * (tasks / nodes);
            } else {
                gpu_shape_error = Some(format!(
                    "{} GPUs per task with {tasks} tasks over {nodes} nodes is not the same count on every node",
                    g.count
                ));
            }
        }

        // Shapes the service does not model: a pending array's meta record (its tasks split off
        // one by one as Slurm starts them) and heterogeneous jobs.
        if let Some(t) = get(&f, "ArrayTaskId").filter(|t| t.contains(['-', ',', '%']))
            && gpu_shape_error.is_none()
        {
            gpu_shape_error = Some(format!("a pending job array (tasks {t})"));
        }
        if get(&f, "HetJobId").is_some_and(|v| !is_null(v)) && gpu_shape_error.is_none() {
            gpu_shape_error = Some("a heterogeneous job".into());
        }

        // The `-d` detail: `Nodes=... CPU_IDs=... Mem=... GRES=gpu:a100:2(IDX:0-1)` groups.
        let mut alloc: Vec<NodeAlloc> = Vec::new();
        let mut group: Vec<usize> = Vec::new();
        for (k, v) in &f {
            match *k {
                "Nodes" => {
                    group.clear();
                    for node in expand_hostlist(v).map_err(|e| format!("job {id}: Nodes: {e}"))? {
                        group.push(alloc.len());
                        alloc.push(NodeAlloc {
                            node,
                            cpus: 0,
                            gpus: BTreeSet::new(),
                            mem_mib: None,
                        });
                    }
                }
                "CPU_IDs" if !group.is_empty() => {
                    let n = parse::indices(v)
                        .map_err(|e| format!("job {id}: CPU_IDs: {e}"))?
                        .len() as u32;
                    for i in &group {
                        alloc[*i].cpus = n;
                    }
                }
                "Mem" if !group.is_empty() => {
                    let m = mem_mib(v).map_err(|e| format!("job {id}: Mem: {e}"))?;
                    for i in &group {
                        alloc[*i].mem_mib = Some(m);
                    }
                }
                "GRES" if !group.is_empty() => {
                    let g = gpu_gres(v).map_err(|e| format!("job {id}: GRES: {e}"))?;
                    let idx: BTreeSet<u32> =
                        g.iter().filter_map(|g| g.idx.clone()).flatten().collect();
                    for i in &group {
                        alloc[*i].gpus = idx.clone();
                    }
                }
                _ => {}
            }
        }
        let hosts = |key: &str| -> Result<Vec<String>, String> {
            expand_hostlist(get(&f, key).unwrap_or("")).map_err(|e| format!("job {id}: {key}: {e}"))
        };
        let constraint = match get(&f, "Features") {
            Some(v) if !is_null(v) => match Constraints::parse(v) {
                Ok(c)
                    if !c
                        .any_of
                        .iter()
                        .flatten()
                        .any(|t| !matches!(t, LabelTerm::Exists { .. })) =>
                {
                    c
                }
                Ok(_) | Err(_) => {
                    gpu_shape_error.get_or_insert_with(|| {
                        format!("a feature constraint {v:?} beyond `&` and `|` of features")
                    });
                    Constraints::default()
                }
            },
            _ => Constraints::default(),
        };
        Ok(SlurmJob {
            id,
            name: text("JobName"),
            user: text("UserId").split('(').next().unwrap_or("").to_string(),
            account: text("Account"),
            partition: text("Partition"),
            qos: text("QOS"),
            state: field("JobState")?.to_string(),
            reason: text("Reason"),
            priority: num("Priority")?,
            nice: get(&f, "Nice").and_then(|v| v.parse().ok()).unwrap_or(0),
            nodes,
            cpus,
            tasks,
            mem_per_node_mib,
            gpus_per_node,
            gpu_type,
            gpu_shape_error,
            time_limit_ms: parse::time_limit_ms(get(&f, "TimeLimit").unwrap_or("UNLIMITED"))
                .map_err(|e| format!("job {id}: TimeLimit: {e}"))?,
            submit_s: epoch("SubmitTime")?,
            start_s: epoch("StartTime")?,
            restarts: get(&f, "Restarts")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            req_nodes: hosts("ReqNodeList")?,
            exc_nodes: hosts("ExcNodeList")?,
            node_list: hosts("NodeList")?,
            constraint,
            admin_comment: text("AdminComment"),
            // `workload=` inside the comment reads as a field of its own (no Slurm field is
            // spelled so): put it back.
            comment: match get(&f, "workload") {
                Some(w) => format!("{} workload={w}", text("Comment")),
                None => text("Comment"),
            },
            alloc,
        })
    }

    pub fn cpus_per_node(&self) -> u32 {
        self.cpus.div_ceil(self.nodes)
    }

    pub fn is_pending(&self) -> bool {
        self.state == "PENDING"
    }

    /// Running, or finishing: holds resources on its nodes.
    pub fn holds_resources(&self) -> bool {
        matches!(
            self.state.as_str(),
            "RUNNING" | "COMPLETING" | "SUSPENDED" | "CONFIGURING" | "STOPPED" | "SIGNALING"
        )
    }

    /// Held: pending with priority 0 (a hold by the submit plugin, `sbatch -H`, `requeuehold`).
    pub fn is_held(&self) -> bool {
        self.is_pending() && self.priority == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: &str = "NodeName=gpu-a-1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=2 CPUEfctv=16 CPUTot=16 CPULoad=1.09 AvailableFeatures=nvlink,ib ActiveFeatures=nvlink,ib Gres=gpu:a100:4 GresDrain=N/A GresUsed=gpu:a100:2(IDX:0,3) NodeAddr=localhost NodeHostName=localhost Port=20001 Version=22.05.8 OS=Linux 6.18.44-fc-v595 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=64000 AllocMem=2048 FreeMem=14375 Sockets=16 Boards=1 State=MIXED ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu,low  BootTime=1796005000 SlurmdStartTime=1796005100 LastBusyTime=1796005200 CfgTRES=cpu=16,mem=62.50G,billing=16 AllocTRES=cpu=2,mem=2G CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s";

    const RUNNING: &str = "JobId=2 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 DerivedExitCode=0:0 RunTime=00:00:05 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=1796005911 EligibleTime=1796005911 AccrueTime=Unknown StartTime=1796005916 EndTime=Unknown Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=1796005916 Scheduler=Main Partition=gpu AllocNode:Sid=vm:23726 ReqNodeList=gpu-a-1,gpu-a-2 ExcNodeList=(null) NodeList=gpu-a-[1-2] BatchHost=gpu-a-1 NumNodes=2 NumCPUs=4 NumTasks=2 CPUs/Task=2 ReqB:S:C:T=0:0:*:* TRES=cpu=4,mem=4G,node=2,billing=4 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* JOB_GRES=gpu:a100:8   Nodes=gpu-a-[1-2] CPU_IDs=0-1 Mem=2048 GRES=gpu:a100:4(IDX:0-3) MinCPUsNode=2 MinMemoryCPU=1G MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/tmp/sl AdminComment=lachesis:managed  StdErr=/tmp/sl/slurm-2.out StdIn=/dev/null StdOut=/tmp/sl/slurm-2.out Power= TresPerNode=gres:gpu:a100:4";

    const PENDING: &str = "JobId=1 JobName=wrap UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A Priority=0 Nice=0 Account=acct1 QOS=(null) JobState=PENDING Reason=JobHeldUser Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 DerivedExitCode=0:0 RunTime=00:00:00 TimeLimit=00:30:00 TimeMin=N/A SubmitTime=1796005911 EligibleTime=Unknown AccrueTime=Unknown StartTime=Unknown EndTime=Unknown Deadline=N/A Partition=gpu ReqNodeList=(null) ExcNodeList=(null) NodeList= NumNodes=1 NumCPUs=4 NumTasks=1 CPUs/Task=4 TRES=cpu=4,mem=8G,node=1,billing=4 MinCPUsNode=4 MinMemoryNode=8G MinTmpDiskNode=0 Features=nvlink&ib AdminComment=lachesis:managed  StdErr=/tmp/sl/slurm-1.out TresPerJob=gres:gpu:v100:1";

    #[test]
    fn a_node_record() {
        let n = SlurmNode::parse(NODE).unwrap();
        assert_eq!(n.name, "gpu-a-1");
        assert_eq!(
            (n.cpus, n.cpu_alloc, n.mem_mib, n.mem_alloc_mib),
            (16, 2, 64000, 2048)
        );
        assert_eq!((n.gpu_type.as_deref(), n.gpus), (Some("a100"), 4));
        assert_eq!(n.gpu_used.iter().copied().collect::<Vec<_>>(), [0, 3]);
        assert_eq!(n.partitions, ["gpu", "low"]);
        assert_eq!(n.features, ["nvlink", "ib"]);
        assert!(n.usable());
        for state in [
            "IDLE+DRAIN",
            "DOWN*",
            "IDLE*",
            "MIXED+DRAIN",
            "DOWN",
            "IDLE+MAINT",
        ] {
            let n = SlurmNode {
                state: state.into(),
                ..n.clone()
            };
            assert!(!n.usable(), "{state}");
        }
    }

    #[test]
    fn the_comment_names_the_workload() {
        let line = PENDING.replace(
            "AdminComment=lachesis:managed ",
            "AdminComment=lachesis:managed Comment=team x; workload=ResNet-50 (batch size 64); y ",
        );
        let j = SlurmJob::parse(&line).unwrap();
        assert_eq!(j.workload(), Some("ResNet-50 (batch size 64)"));
        assert_eq!(SlurmJob::parse(PENDING).unwrap().workload(), None);
    }

    #[test]
    fn job_records() {
        let r = SlurmJob::parse(RUNNING).unwrap();
        assert_eq!(
            (r.id, r.nodes, r.cpus_per_node(), r.mem_per_node_mib),
            (2, 2, 2, 2048)
        );
        assert_eq!((r.gpus_per_node, r.gpu_type.as_deref()), (4, Some("a100")));
        assert_eq!(r.node_list, ["gpu-a-1", "gpu-a-2"]);
        assert_eq!(r.alloc.len(), 2);
        assert_eq!(r.alloc[1].node, "gpu-a-2");
        assert_eq!(r.alloc[1].gpus.len(), 4);
        assert_eq!(r.alloc[1].cpus, 2);
        assert!(r.holds_resources() && !r.is_held());
        assert_eq!(r.start_s, Some(1_796_005_916));

        let p = SlurmJob::parse(PENDING).unwrap();
        assert!(p.is_held());
        assert_eq!(p.user, "alice");
        assert_eq!(p.account, "acct1");
        assert_eq!((p.gpus_per_node, p.gpu_type.as_deref()), (1, Some("v100")));
        assert_eq!(p.mem_per_node_mib, 8192);
        assert_eq!(p.time_limit_ms, Some(1_800_000));
        assert_eq!(p.constraint.label_text(), "nvlink&ib");
        assert_eq!(p.admin_comment, "lachesis:managed");
        assert!(p.req_nodes.is_empty() && p.node_list.is_empty());
    }

    #[test]
    fn bad_records_name_the_field() {
        let e = SlurmJob::parse(&PENDING.replace("NumCPUs=4", "NumCPUs=four")).unwrap_err();
        assert!(e.contains("job 1: NumCPUs=four"), "{e}");
        let e = SlurmJob::parse(
            &PENDING.replace("SubmitTime=1796005911", "SubmitTime=2026-11-30T02:31:51"),
        )
        .unwrap_err();
        assert!(e.contains("SLURM_TIME_FORMAT"), "{e}");
        let e = SlurmNode::parse(
            &NODE.replace("GresUsed=gpu:a100:2(IDX:0,3)", "GresUsed=gpu:a100:1(IDX:7)"),
        )
        .unwrap_err();
        assert!(e.contains("node gpu-a-1: GresUsed index 7"), "{e}");
        let e = SlurmJob::parse(
            &PENDING
                .replace("TresPerJob=gres:gpu:v100:1", "TresPerJob=gres:gpu:3")
                .replace("NumNodes=1", "NumNodes=2"),
        )
        .unwrap();
        assert!(e.gpu_shape_error.is_some());
        let a = SlurmJob::parse(
            &PENDING.replace("JobId=1 ", "JobId=1 ArrayJobId=1 ArrayTaskId=1-10%2 "),
        )
        .unwrap();
        assert!(a.gpu_shape_error.unwrap().contains("job array"));
        let one =
            SlurmJob::parse(&PENDING.replace("JobId=1 ", "JobId=1 ArrayJobId=1 ArrayTaskId=3 "))
                .unwrap();
        assert!(
            one.gpu_shape_error.is_none(),
            "a single array task is an ordinary job"
        );
    }
}
