//! A real Slurm cluster on one machine, for the end-to-end tests and `lachesis bench slurm`:
//! one `slurmctld` and one `slurmd` per virtual node on localhost (each on its own port),
//! typed fake GPUs (`/dev/null` symlinks), `auth/none`, everything under one temporary
//! directory, torn down on drop (jobs cancelled first, then the daemons). Needs Debian's
//! `slurm-wlm` (22.05) and root. See `../shared/SLURM.md` for what this relies on.

use super::config::SlurmConfig;
use super::ctl::{CommandCtl, SlurmCtl};
use super::model::SlurmJob;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The submit plugin shipped in `deploy/slurm/`.
pub const SUBMIT_PLUGIN: &str = include_str!("../../../deploy/slurm/job_submit.lua");

/// Nodes of one kind: `prefix-1` ... `prefix-count`.
#[derive(Debug, Clone)]
pub struct NodeGroup {
    pub prefix: String,
    pub count: u32,
    pub cpus: u32,
    pub mem_mib: u64,
    /// GRES GPU type (`a100`); empty with `gpus: 0`.
    pub gpu_type: String,
    pub gpus: u32,
    pub features: Vec<String>,
}

impl NodeGroup {
    pub fn gpu(prefix: &str, count: u32, gpu_type: &str, gpus: u32) -> Self {
        NodeGroup {
            prefix: prefix.into(),
            count,
            cpus: 16,
            mem_mib: 64_000,
            gpu_type: gpu_type.into(),
            gpus,
            features: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct TestbedSpec {
    pub groups: Vec<NodeGroup>,
    /// Partitions, each over every node; the first is the default.
    pub partitions: Vec<String>,
    /// Hold every job on submission with `SUBMIT_PLUGIN`.
    pub hold_on_submit: bool,
}

impl Default for TestbedSpec {
    fn default() -> Self {
        TestbedSpec {
            groups: Vec::new(),
            partitions: vec!["gpu".into()],
            hold_on_submit: true,
        }
    }
}

/// A running test cluster.
#[derive(Debug)]
pub struct Testbed {
    dir: PathBuf,
    conf: PathBuf,
    nodes: Vec<String>,
    stopped: bool,
}

/// Whether this machine can run a testbed; the error says what is missing.
pub fn available() -> Result<(), String> {
    for bin in [
        "slurmctld",
        "slurmd",
        "scontrol",
        "sbatch",
        "squeue",
        "scancel",
        "sinfo",
    ] {
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
            .unwrap_or(false)
            || Path::new("/usr/sbin").join(bin).is_file();
        if !found {
            return Err(format!(
                "{bin} is not installed (Debian: apt-get install slurm-wlm)"
            ));
        }
    }
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        })
        .unwrap_or_default();
    if uid != "0" {
        return Err("the Slurm daemons and the bridge need root here".into());
    }
    Ok(())
}

fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()).map_err(|e| e.to_string()))
        .collect()
}

fn sbin(bin: &str) -> PathBuf {
    let p = Path::new("/usr/sbin").join(bin);
    if p.is_file() { p } else { PathBuf::from(bin) }
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl Testbed {
    /// Writes the configuration, starts the daemons, and waits until a probe job has run.
    pub fn start(spec: &TestbedSpec) -> Result<Testbed, String> {
        available()?;
        let dir = std::env::temp_dir().join(format!(
            "lachesis-slurm-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["state", "spool", "log", "dev"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let max_gpus = spec.groups.iter().map(|g| g.gpus).max().unwrap_or(0);
        for i in 0..max_gpus {
            let link = dir.join("dev").join(format!("nvidia{i}"));
            std::os::unix::fs::symlink("/dev/null", &link)
                .map_err(|e| format!("{}: {e}", link.display()))?;
        }
        let total: u32 = spec.groups.iter().map(|g| g.count).sum();
        let ports = free_ports(total as usize + 2)?;
        let d = dir.display();
        let mut conf = format!(
            "ClusterName=lachesis\nSlurmctldHost=localhost\nSlurmctldPort={ctld}\nSlurmdPort={slurmd}\n\
AuthType=auth/none\nCredType=cred/none\nSlurmUser=root\nSlurmdUser=root\n\
StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool/%n\nSlurmctldPidFile={d}/slurmctld.pid\n\
SlurmdPidFile={d}/slurmd.%n.pid\nSlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.%n.log\n\
ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n\
AccountingStorageType=accounting_storage/none\nReturnToService=2\nMpiDefault=none\n\
SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\nDefMemPerCPU=1024\n\
SlurmdParameters=config_overrides\nGresTypes=gpu\nMaxJobCount=100000\nMinJobAge=30\n\
SchedulerParameters=batch_sched_delay=0,default_queue_depth=10000,bf_interval=1\n",
            ctld = ports[0],
            slurmd = ports[1],
        );
        if spec.hold_on_submit {
            conf.push_str("JobSubmitPlugins=lua\n");
            std::fs::write(dir.join("job_submit.lua"), SUBMIT_PLUGIN)
                .map_err(|e| format!("{d}/job_submit.lua: {e}"))?;
        }
        let mut gres = String::from("AutoDetect=off\n");
        let mut nodes = Vec::new();
        let mut port = ports[2..].iter();
        for g in &spec.groups {
            for i in 1..=g.count {
                let name = format!("{}-{i}", g.prefix);
                let p = port.next().ok_or("out of ports")?;
                conf.push_str(&format!(
                    "NodeName={name} NodeHostname=localhost Port={p} CPUs={} RealMemory={}{}{} State=UNKNOWN\n",
                    g.cpus,
                    g.mem_mib,
                    if g.gpus > 0 {
                        format!(" Gres=gpu:{}:{}", g.gpu_type, g.gpus)
                    } else {
                        String::new()
                    },
                    if g.features.is_empty() {
                        String::new()
                    } else {
                        format!(" Feature={}", g.features.join(","))
                    },
                ));
                if g.gpus > 0 {
                    gres.push_str(&format!(
                        "NodeName={name} Name=gpu Type={} File={d}/dev/nvidia[0-{}]\n",
                        g.gpu_type,
                        g.gpus - 1
                    ));
                }
                std::fs::create_dir_all(dir.join("spool").join(&name))
                    .map_err(|e| format!("{d}/spool: {e}"))?;
                nodes.push(name);
            }
        }
        for (i, p) in spec.partitions.iter().enumerate() {
            conf.push_str(&format!(
                "PartitionName={p} Nodes=ALL Default={} MaxTime=INFINITE State=UP\n",
                if i == 0 { "YES" } else { "NO" }
            ));
        }
        let conf_path = dir.join("slurm.conf");
        std::fs::write(&conf_path, conf).map_err(|e| format!("{d}/slurm.conf: {e}"))?;
        std::fs::write(dir.join("gres.conf"), gres).map_err(|e| format!("{d}/gres.conf: {e}"))?;

        let mut bed = Testbed {
            dir,
            conf: conf_path,
            nodes,
            stopped: false,
        };
        bed.boot()?;
        Ok(bed)
    }

    fn boot(&mut self) -> Result<(), String> {
        self.daemon("slurmctld", &[])?;
        self.wait("slurmctld to answer", Duration::from_secs(20), |b| {
            b.command("scontrol")
                .arg("ping")
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("is UP"))
        })?;
        for n in self.nodes.clone() {
            self.daemon("slurmd", &["-N", &n])?;
        }
        let want = self.nodes.len();
        self.wait("every node to be idle", Duration::from_secs(30), |b| {
            b.command("sinfo")
                .args(["-h", "-N", "-o", "%N %T"])
                .output()
                .is_ok_and(|o| {
                    // One line per node and partition.
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .filter_map(|l| l.strip_suffix(" idle"))
                        .collect::<std::collections::BTreeSet<_>>()
                        .len()
                        == want
                })
        })?;
        // The first scheduling pass comes seconds after start: wait for a probe job to run.
        let probe = self.sbatch(&["-J", "probe", "-o", "/dev/null", "--wrap", "true"])?;
        self.scontrol(&["release", &probe.to_string()])?;
        self.wait("the probe job to run", Duration::from_secs(30), |b| {
            b.job(probe).is_none_or(|j| {
                j.state != "PENDING" && j.state != "RUNNING" && j.state != "CONFIGURING"
            })
        })?;
        Ok(())
    }

    fn daemon(&self, bin: &str, args: &[&str]) -> Result<(), String> {
        let out = self
            .command_path(&sbin(bin))
            .args(args)
            .output()
            .map_err(|e| format!("starting {bin}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{bin} {}: {}: {} (logs in {})",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                self.dir.join("log").display()
            ));
        }
        Ok(())
    }

    fn wait(
        &self,
        what: &str,
        limit: Duration,
        ok: impl Fn(&Testbed) -> bool,
    ) -> Result<(), String> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if ok(self) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "waited {}s for {what}; logs in {}",
            limit.as_secs(),
            self.dir.join("log").display()
        ))
    }

    fn command_path(&self, prog: &Path) -> Command {
        let mut c = Command::new(prog);
        c.env("SLURM_CONF", &self.conf)
            .env("SLURM_TIME_FORMAT", "%s")
            .current_dir(&self.dir);
        c
    }

    /// A Slurm command (`sbatch`, `squeue`, ...) aimed at this cluster.
    pub fn command(&self, prog: &str) -> Command {
        self.command_path(Path::new(prog))
    }

    /// `slurm.conf` (for `SLURM_CONF`).
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn node_names(&self) -> &[String] {
        &self.nodes
    }

    /// The bridge's `[slurm]` section for this cluster.
    pub fn slurm_config(&self) -> SlurmConfig {
        SlurmConfig {
            conf: Some(self.conf.clone()),
            ..SlurmConfig::default()
        }
    }

    pub fn scontrol(&self, args: &[&str]) -> Result<String, String> {
        let out = self
            .command("scontrol")
            .args(args)
            .output()
            .map_err(|e| format!("scontrol: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "scontrol {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Submits a batch job; returns its id.
    pub fn sbatch(&self, args: &[&str]) -> Result<u64, String> {
        let out = self
            .command("sbatch")
            .arg("--parsable")
            .args(args)
            .output()
            .map_err(|e| format!("sbatch: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "sbatch {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        text.trim()
            .split(';')
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("sbatch printed {text:?}, not a job id"))
    }

    /// Every job Slurm holds now.
    pub fn jobs(&self) -> Result<Vec<SlurmJob>, String> {
        CommandCtl::new(&self.slurm_config())
            .read()
            .map(|(_, jobs)| jobs)
            .map_err(|e| e.to_string())
    }

    pub fn job(&self, id: u64) -> Option<SlurmJob> {
        self.jobs().ok()?.into_iter().find(|j| j.id == id)
    }

    /// Cancels every job, stops the daemons, removes the directory (kept when
    /// `LACHESIS_KEEP_SLURM` is set).
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        if let Ok(jobs) = self.jobs() {
            let ids: Vec<String> = jobs
                .iter()
                .filter(|j| {
                    matches!(
                        j.state.as_str(),
                        "PENDING" | "RUNNING" | "CONFIGURING" | "SUSPENDED"
                    )
                })
                .map(|j| j.id.to_string())
                .collect();
            if !ids.is_empty() {
                let _ = self.command("scancel").args(&ids).output();
                let _ = self.wait("jobs to end", Duration::from_secs(10), |b| {
                    b.jobs().is_ok_and(|js| {
                        js.iter()
                            .all(|j| j.state != "RUNNING" && !j.state.starts_with("COMPLETING"))
                    })
                });
            }
        }
        let mut pids = Vec::new();
        for n in &self.nodes {
            pids.extend(read_pid(&self.dir.join(format!("slurmd.{n}.pid"))));
        }
        pids.extend(read_pid(&self.dir.join("slurmctld.pid")));
        for pid in &pids {
            signal(*pid, "TERM");
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) && pids.iter().any(|p| alive(*p)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        for pid in pids.iter().filter(|p| alive(**p)) {
            signal(*pid, "KILL");
        }
        if std::env::var_os("LACHESIS_KEEP_SLURM").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        self.stop();
    }
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Running and not a zombie (PID 1 reaps slowly on these machines).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .output();
}
