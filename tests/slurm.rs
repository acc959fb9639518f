//! The Slurm bridge on a real Slurm cluster: `slurmctld` and one `slurmd` per virtual node on
//! localhost (typed fake GPUs), started by the test itself through
//! `lachesis_serve::slurm::testbed`; `lachesis serve` and `lachesis slurm-bridge` as processes.
//!
//! Where Slurm is not installed these tests print why they were skipped; with `CI=true` they
//! must run (`.ci/run` installs `slurm-wlm`).

#![allow(clippy::unwrap_used)]

use lachesis_serve::decision_log::LogLine;
use lachesis_serve::slurm::model::SlurmJob;
use lachesis_serve::slurm::testbed::{self, NodeGroup, Testbed, TestbedSpec};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One Slurm cluster at a time: the daemons and the 2 cores are shared.
static SERIAL: Mutex<()> = Mutex::new(());

/// The testbed, or `None` (with the reason printed) where Slurm cannot run; in CI, a failure.
fn testbed(spec: &TestbedSpec) -> Option<Testbed> {
    if let Err(why) = testbed::available() {
        assert!(
            std::env::var("CI").is_err(),
            "CI must run the Slurm tests, but: {why}"
        );
        eprintln!("SKIPPED: no Slurm here: {why}");
        return None;
    }
    Some(Testbed::start(spec).unwrap())
}

/// A child process killed on drop.
struct Proc(Child);

impl Proc {
    /// Starts `lachesis ARGS`, waits for its first stdout line.
    fn start(args: &[&str], log: &Path) -> (Proc, String) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lachesis"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        (Proc(child), line)
    }

    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

struct Setup {
    dir: PathBuf,
    bed: Testbed,
    service: Option<Proc>,
    service_addr: String,
    bridge_config: PathBuf,
}

impl Setup {
    /// A testbed, a service (heuristic `policy`, decision log) and a bridge config.
    fn new(name: &str, spec: &TestbedSpec, policy: &str, bridge_extra: &str) -> Option<Setup> {
        let bed = testbed(spec)?;
        let dir = bed.dir().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let serve = dir.join("serve.toml");
        std::fs::write(
            &serve,
            format!(
                "model = \"\"\nbaseline = \"{policy}\"\n[routing]\nmode = \"baseline\"\n\
                 [grpc]\naddr = \"127.0.0.1:0\"\n[http]\naddr = \"\"\n\
                 [decision_log]\npath = \"{}\"\n",
                dir.join("decisions.jsonl").display()
            ),
        )
        .unwrap();
        let (service, line) = Proc::start(
            &["serve", "--config", serve.to_str().unwrap()],
            &dir.join("serve.log"),
        );
        let service_addr = line
            .split("gRPC on ")
            .nth(1)
            .unwrap()
            .split([';', ','])
            .next()
            .unwrap()
            .trim()
            .to_string();
        let bridge_config = dir.join("bridge.toml");
        let mut setup = Setup {
            dir,
            bed,
            service: Some(service),
            service_addr,
            bridge_config,
        };
        setup.write_bridge_config(bridge_extra);
        Some(setup)
    }

    /// The bridge asks the service with a 10 s timeout: the answers take milliseconds, but CI
    /// runs these tests beside each other's Slurm daemons on 2 shared cores, and one cycle
    /// past a 2 s timeout once counted as a service error in a run that was otherwise right.
    fn write_bridge_config(&mut self, extra: &str) {
        std::fs::write(
            &self.bridge_config,
            format!(
                "interval_ms = 200\nstate_file = \"{}\"\n{extra}\n[service]\naddr = \"{}\"\ntimeout_ms = 10000\n\
                 [slurm]\nconf = \"{}\"\n",
                self.dir.join("bridge-state.json").display(),
                self.service_addr,
                self.bed.conf().display()
            ),
        )
        .unwrap();
    }

    fn bridge(&self, n: usize) -> Proc {
        self.bridge_with_line(n).0
    }

    /// The bridge and the line it prints on start.
    fn bridge_with_line(&self, n: usize) -> (Proc, String) {
        Proc::start(
            &[
                "slurm-bridge",
                "--config",
                self.bridge_config.to_str().unwrap(),
            ],
            &self.dir.join(format!("bridge-{n}.log")),
        )
    }

    /// The service's placements, in order: job → the nodes of its last placement.
    fn service_choices(&self) -> BTreeMap<u64, Vec<String>> {
        let mut out = BTreeMap::new();
        let text = std::fs::read_to_string(self.dir.join("decisions.jsonl")).unwrap_or_default();
        for line in text.lines() {
            let l: LogLine = serde_json::from_str(line).unwrap();
            for p in l.answer.placements {
                out.insert(
                    p.job.parse().unwrap(),
                    p.tasks.into_iter().map(|t| t.node).collect(),
                );
            }
        }
        out
    }

    fn jobs(&self) -> Vec<SlurmJob> {
        self.bed.jobs().unwrap()
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for f in std::fs::read_dir(&self.dir).unwrap().flatten() {
            if f.path().extension().is_some_and(|e| e == "log") {
                s.push_str(&format!(
                    "--- {}\n{}\n",
                    f.path().display(),
                    std::fs::read_to_string(f.path()).unwrap_or_default()
                ));
            }
        }
        s
    }
}

fn spec() -> TestbedSpec {
    TestbedSpec {
        groups: vec![
            NodeGroup::gpu("a100n", 3, "a100", 4),
            NodeGroup::gpu("v100n", 2, "v100", 2),
        ],
        partitions: vec!["gpu".into(), "low".into()],
        hold_on_submit: true,
    }
}

fn submit(bed: &Testbed, args: &[&str]) -> u64 {
    bed.sbatch(&[&["-o", "/dev/null"], args].concat()).unwrap()
}

/// GPUs per node of a testbed, by node name.
fn gpu_capacity(spec: &TestbedSpec) -> BTreeMap<String, u32> {
    spec.groups
        .iter()
        .flat_map(|g| (1..=g.count).map(move |i| (format!("{}-{i}", g.prefix), g.gpus)))
        .collect()
}

/// Per node, GPUs held by running jobs (from their allocations) — never above capacity.
fn check_capacity(jobs: &[SlurmJob], capacity: &BTreeMap<String, u32>) {
    let mut used: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for j in jobs.iter().filter(|j| j.holds_resources()) {
        for a in &j.alloc {
            let set = used.entry(a.node.clone()).or_default();
            for g in &a.gpus {
                assert!(set.insert(*g), "GPU {g} of {} held twice", a.node);
            }
        }
    }
    for (node, set) in &used {
        assert!(
            set.len() as u32 <= capacity[node.as_str()],
            "{node} over capacity"
        );
    }
}

fn wait_until(limit: Duration, what: &str, setup: &Setup, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < limit,
            "waited {limit:?} for {what}\n{}",
            setup.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn jobs_run_exactly_where_the_service_chose_within_gpu_capacity() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(setup) = Setup::new(
        "placement",
        &spec(),
        "fifo/best-fit",
        "metrics_addr = \"127.0.0.1:0\"",
    ) else {
        return;
    };
    let bed = &setup.bed;
    let capacity = gpu_capacity(&spec());
    // 28 a100 GPUs and 4 v100 GPUs asked of 12 and 4: jobs must queue.
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(submit(
            bed,
            &["--gres=gpu:a100:2", "-c", "2", "--wrap", "sleep 3"],
        ));
    }
    for _ in 0..2 {
        ids.push(submit(
            bed,
            &["--gres=gpu:a100:4", "-c", "4", "--wrap", "sleep 3"],
        ));
    }
    ids.push(submit(
        bed,
        &[
            "-N",
            "2",
            "--gres=gpu:a100:4",
            "-c",
            "1",
            "--wrap",
            "sleep 3",
        ],
    ));
    for _ in 0..4 {
        ids.push(submit(bed, &["--gpus=v100:1", "--wrap", "sleep 3"]));
    }
    // Held on arrival by the submit plugin.
    assert!(
        setup
            .jobs()
            .iter()
            .filter(|j| ids.contains(&j.id))
            .all(SlurmJob::is_held)
    );

    let (_bridge, line) = setup.bridge_with_line(0);
    let metrics_addr = line.split("metrics on ").nth(1).unwrap().trim().to_string();
    let mut ran_on: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut saw_queueing = false;
    wait_until(
        Duration::from_secs(120),
        "every job to run and finish",
        &setup,
        || {
            let jobs = setup.jobs();
            check_capacity(&jobs, &capacity);
            let mine: Vec<&SlurmJob> = jobs.iter().filter(|j| ids.contains(&j.id)).collect();
            for j in &mine {
                assert_ne!(
                    j.reason, "BadConstraints",
                    "job {} placed where it cannot run",
                    j.id
                );
                if j.holds_resources() {
                    ran_on.insert(j.id, j.node_list.clone());
                }
            }
            if mine.iter().any(|j| j.holds_resources()) && mine.iter().any(|j| j.is_pending()) {
                saw_queueing = true;
            }
            mine.len() == ids.len() && mine.iter().all(|j| j.state == "COMPLETED")
        },
    );
    assert!(
        saw_queueing,
        "jobs never had to wait for GPUs: the test proves nothing"
    );

    let chosen = setup.service_choices();
    for id in &ids {
        let ran: BTreeSet<&String> = ran_on[id].iter().collect();
        let want: BTreeSet<&String> = chosen
            .get(id)
            .unwrap_or_else(|| panic!("the service never placed job {id}"))
            .iter()
            .collect();
        assert_eq!(
            ran, want,
            "job {id} ran on other nodes than the service chose"
        );
    }
    // Typed requests ran on nodes of their type only.
    for (id, nodes) in &ran_on {
        let job_idx = ids.iter().position(|i| i == id).unwrap();
        let prefix = if job_idx < 7 { "a100n" } else { "v100n" };
        assert!(
            nodes.iter().all(|n| n.starts_with(prefix)),
            "job {id} on {nodes:?}"
        );
    }
    assert_eq!(ran_on[&ids[6]].len(), 2, "the 2-node job ran on 2 nodes");

    // The bridge's metrics: each job placed exactly once, nothing refused, Slurm never failed.
    let metrics = http_get(&metrics_addr, "/metrics");
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} not in\n{metrics}"))
    };
    let logs = setup.logs();
    assert_eq!(
        value("lachesis_bridge_placements_total"),
        ids.len() as f64,
        "{logs}"
    );
    assert_eq!(value("lachesis_bridge_refused_total"), 0.0, "{logs}");
    assert_eq!(
        value("lachesis_bridge_service_errors_total"),
        0.0,
        "the bridge could not ask the service (its log says why):\n{logs}"
    );
    assert!(value("lachesis_bridge_cycles_total{result=\"ok\"}") >= 2.0);
    assert!(!metrics.contains("result=\"error\""), "{metrics}");
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(
        text.starts_with("HTTP/1.0 200") || text.starts_with("HTTP/1.1 200"),
        "{text}"
    );
    text.split("\r\n\r\n").nth(1).unwrap_or("").to_string()
}

#[test]
fn a_preemption_requeues_the_victim_and_places_the_preemptor() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let extra = "[partitions.low]\npriority = 0\nqos = \"best-effort\"\npreemptible = true\n\
                 [partitions.gpu]\npriority = 100\n";
    let spec = TestbedSpec {
        groups: vec![NodeGroup::gpu("a100n", 2, "a100", 4)],
        ..spec()
    };
    let Some(setup) = Setup::new("preempt", &spec, "priority/best-fit/preempt", extra) else {
        return;
    };
    let bed = &setup.bed;
    let low: Vec<u64> = (0..2)
        .map(|_| {
            submit(
                bed,
                &["-p", "low", "--gres=gpu:a100:4", "--wrap", "sleep 300"],
            )
        })
        .collect();
    let _bridge = setup.bridge(0);
    wait_until(
        Duration::from_secs(60),
        "the low-priority jobs to run",
        &setup,
        || {
            setup
                .jobs()
                .iter()
                .filter(|j| low.contains(&j.id))
                .all(|j| j.state == "RUNNING")
        },
    );
    let high = submit(
        bed,
        &["-p", "gpu", "--gres=gpu:a100:4", "--wrap", "sleep 300"],
    );
    wait_until(
        Duration::from_secs(60),
        "the preemptor to run",
        &setup,
        || setup.bed.job(high).is_some_and(|j| j.state == "RUNNING"),
    );
    let jobs = setup.jobs();
    let victim = jobs
        .iter()
        .find(|j| low.contains(&j.id) && j.is_pending())
        .expect("one low-priority job was requeued");
    assert!(
        victim.restarts >= 1,
        "the victim was requeued, not cancelled"
    );
    assert!(
        victim.is_held(),
        "the victim waits held, for the bridge to place it again"
    );
    let survivor = jobs
        .iter()
        .find(|j| low.contains(&j.id) && j.state == "RUNNING")
        .expect("the other low-priority job kept running");
    let preemptor = jobs.iter().find(|j| j.id == high).unwrap();
    assert_ne!(preemptor.node_list, survivor.node_list);
    let chosen = setup.service_choices();
    assert_eq!(chosen[&high], preemptor.node_list);
    let log = std::fs::read_to_string(setup.dir.join("decisions.jsonl")).unwrap();
    assert!(
        log.lines().any(|l| {
            let l: LogLine = serde_json::from_str(l).unwrap();
            l.answer.preemptions.contains(&victim.id.to_string())
        }),
        "the service decided the preemption"
    );
}

#[test]
fn service_down_fail_open_releases_to_slurm_and_fail_closed_keeps_holding() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut setup) = Setup::new("down", &spec(), "fifo/best-fit", "") else {
        return;
    };
    // The service goes away.
    setup.service.take().unwrap().kill();

    // Fail-closed: jobs stay held past the timeout.
    setup.write_bridge_config("[on_service_down]\npolicy = \"closed\"\nhold_timeout_s = 1\n");
    let closed = submit(&setup.bed, &["--gres=gpu:a100:1", "--wrap", "sleep 2"]);
    let mut bridge = setup.bridge(0);
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        setup.bed.job(closed).unwrap().is_held(),
        "fail-closed released a job"
    );
    bridge.kill();
    // The outage clock survives a restart (state file); start the next phase on a fresh one.
    let state_file = setup.dir.join("bridge-state.json");
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    assert!(state["outage_since_ms"].as_u64().is_some(), "{state}");
    std::fs::remove_file(&state_file).unwrap();

    // Fail-open: after the timeout they go to Slurm's own scheduler, and run.
    setup.write_bridge_config("[on_service_down]\npolicy = \"open\"\nhold_timeout_s = 2\n");
    let started = Instant::now();
    let _bridge = setup.bridge(1);
    wait_until(
        Duration::from_secs(30),
        "fail-open to release the job",
        &setup,
        || setup.bed.job(closed).is_some_and(|j| !j.is_pending()),
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "released before the hold timeout"
    );
    let logs = setup.logs();
    assert!(logs.contains("fail-open"), "{logs}");
}

#[test]
fn a_bridge_killed_mid_stream_loses_and_double_places_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(setup) = Setup::new("restart", &spec(), "fifo/best-fit", "") else {
        return;
    };
    let capacity = gpu_capacity(&spec());
    let mut ids = Vec::new();
    let mut bridge = setup.bridge(0);
    let mut restarts = 0;
    let mut ran: BTreeMap<u64, BTreeSet<Vec<String>>> = BTreeMap::new();
    for round in 0..30 {
        ids.push(submit(
            &setup.bed,
            &["--gres=gpu:a100:2", "--wrap", "sleep 2"],
        ));
        if round % 3 == 0 {
            ids.push(submit(&setup.bed, &["--gpus=v100:1", "--wrap", "sleep 1"]));
        }
        // Kill the bridge at an arbitrary point of its cycle, and start it again.
        if round % 5 == 4 {
            std::thread::sleep(Duration::from_millis(37 * round as u64 % 200));
            bridge.kill();
            restarts += 1;
            bridge = setup.bridge(restarts);
        }
        let jobs = setup.jobs();
        check_capacity(&jobs, &capacity);
        for j in jobs.iter().filter(|j| j.holds_resources()) {
            ran.entry(j.id).or_default().insert(j.node_list.clone());
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    wait_until(
        Duration::from_secs(120),
        "every job to finish",
        &setup,
        || {
            let jobs = setup.jobs();
            check_capacity(&jobs, &capacity);
            for j in jobs.iter().filter(|j| j.holds_resources()) {
                ran.entry(j.id).or_default().insert(j.node_list.clone());
            }
            let mine: Vec<&SlurmJob> = jobs.iter().filter(|j| ids.contains(&j.id)).collect();
            mine.len() == ids.len() && mine.iter().all(|j| j.state == "COMPLETED")
        },
    );
    // Every job ran once, on one placement, and none was requeued.
    for j in setup.jobs().iter().filter(|j| ids.contains(&j.id)) {
        assert_eq!(j.restarts, 0, "job {} was restarted", j.id);
    }
    assert!(restarts >= 5);
}

#[test]
fn a_job_array_the_service_cannot_express_is_run_by_slurm() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(setup) = Setup::new("array", &spec(), "fifo/best-fit", "") else {
        return;
    };
    let array = submit(
        &setup.bed,
        &["--array=1-3", "--gres=gpu:a100:1", "--wrap", "sleep 1"],
    );
    let plain = submit(&setup.bed, &["--gres=gpu:a100:1", "--wrap", "sleep 1"]);
    let _bridge = setup.bridge(0);
    wait_until(
        Duration::from_secs(60),
        "the array and the job to finish",
        &setup,
        || {
            let jobs = setup.jobs();
            let done = |j: &&SlurmJob| j.state == "COMPLETED";
            // The array's three tasks (their ids start at the array's) and the plain job.
            jobs.iter()
                .filter(|j| j.id >= array && j.id != plain)
                .filter(done)
                .count()
                == 3
                && jobs.iter().filter(|j| j.id == plain).filter(done).count() == 1
        },
    );
    // The plain job was the service's; the array was not.
    let chosen = setup.service_choices();
    assert!(chosen.contains_key(&plain));
    assert!(!chosen.contains_key(&array));
    assert!(
        setup
            .logs()
            .contains("the service cannot express its request")
    );
}

/// A `--constraint` job and a multi-node gang on a real slurmctld: the service's own decision
/// puts them on nodes with the features and on distinct nodes, so they run where it chose and
/// the bridge's safety net refuses nothing.
#[test]
fn constrained_jobs_and_gangs_run_where_the_service_chose() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let spec = TestbedSpec {
        groups: vec![
            NodeGroup::gpu("plain", 2, "a100", 4),
            NodeGroup {
                features: vec!["ib".into()],
                ..NodeGroup::gpu("ibn", 2, "a100", 4)
            },
        ],
        partitions: vec!["gpu".into()],
        hold_on_submit: true,
    };
    let Some(setup) = Setup::new("constraints", &spec, "fifo/best-fit", "") else {
        return;
    };
    let ib = submit(
        &setup.bed,
        &["--constraint=ib", "--gres=gpu:a100:1", "--wrap", "sleep 2"],
    );
    let gang = submit(
        &setup.bed,
        &["--nodes=2", "--gres=gpu:a100:1", "--wrap", "sleep 2"],
    );
    let _bridge = setup.bridge(0);
    wait_until(
        Duration::from_secs(60),
        "both jobs to finish",
        &setup,
        || {
            setup
                .jobs()
                .iter()
                .filter(|j| [ib, gang].contains(&j.id) && j.state == "COMPLETED")
                .count()
                == 2
        },
    );
    let chosen = setup.service_choices();
    assert!(chosen[&ib][0].starts_with("ibn-"), "{chosen:?}");
    let g = &chosen[&gang];
    assert_eq!(g.len(), 2, "{chosen:?}");
    assert_ne!(g[0], g[1], "{chosen:?}");
    let logs = setup.logs();
    assert!(!logs.contains("placement refused"), "{logs}");
}

/// Two one-GPU nodes in partition `batch`, running what is submitted (for `compare --slurm`).
fn batch_spec() -> TestbedSpec {
    TestbedSpec {
        groups: vec![NodeGroup::gpu("cn", 2, "a100", 1)],
        partitions: vec!["batch".into()],
        hold_on_submit: false,
    }
}

/// `lachesis ARGS` in the repository, aimed at `bed`'s cluster; it must succeed: its stdout.
fn lachesis_on(bed: &Testbed, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_lachesis"))
        .args(args)
        .env("SLURM_CONF", bed.conf())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "lachesis {args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// `lachesis compare --slurm 3`: the comparison as a job array of 3 tasks on a cluster of two
/// nodes (at most 2 at once), waited for and merged into exactly the report one run writes on
/// this machine: the same comparison.json (wall time aside, the command line up to its
/// `--out`) and runs.csv.
#[test]
fn a_comparison_as_a_job_array_writes_the_report_one_run_writes() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(bed) = testbed(&batch_spec()) else {
        return;
    };
    let out = bed.dir().join("compare");
    let run = |name: &str, extra: &[&str]| {
        let dir = out.join(name);
        let mut args = vec![
            "compare",
            "--trace",
            "traces/itp/cluster10.csv",
            "--cluster",
            "2x8:V100",
            "--policies",
            "fifo/best-fit,sjf/best-fit,fifo/best-fit/easy",
            "--windows",
            "3",
            "--window-jobs",
            "80",
            "--load",
            "0.9,1.1",
            "--resamples",
            "300",
            "--out",
        ];
        let path = dir.to_str().unwrap().to_string();
        args.push(&path);
        args.extend(extra);
        let stdout = lachesis_on(&bed, &args);
        (dir, stdout)
    };
    let (one, _) = run("one", &[]);
    let (array, printed) = run(
        "array",
        &[
            "--slurm",
            "3",
            "--slurm-partition",
            "batch",
            "--slurm-throttle",
            "2",
            "--slurm-time",
            "0:10:00",
        ],
    );
    assert!(printed.contains("slurm: job "), "{printed}");
    for i in 0..3 {
        assert!(
            array.join(format!("shards/{i}-of-3.json")).is_file(),
            "task {i} left its shard"
        );
    }
    let read = |dir: &Path| {
        let text = std::fs::read_to_string(dir.join("comparison.json")).unwrap();
        let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let setup = json["setup"].as_object_mut().unwrap();
        setup.remove("wall_s");
        let command = setup["command"].as_str().unwrap().replace("/array", "/one");
        setup["command"] = serde_json::Value::from(command);
        json
    };
    assert_eq!(read(&one), read(&array));
    assert_eq!(
        std::fs::read_to_string(one.join("runs.csv")).unwrap(),
        std::fs::read_to_string(array.join("runs.csv")).unwrap()
    );
}

/// `lachesis train --card-only --slurm 2`: the model card's comparison as a job array on the
/// test cluster gives the comparison a local `--card-only` gives (wall time aside).
#[test]
fn a_model_cards_comparison_as_a_job_array_is_the_local_one() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(bed) = testbed(&batch_spec()) else {
        return;
    };
    let dir = bed.dir().join("card");
    let train = |out: &Path, extra: &[&str]| {
        let path = out.to_str().unwrap().to_string();
        let mut args = vec![
            "train",
            "--config",
            "docs/examples/train-small.toml",
            "--quiet",
        ];
        args.extend(["--out", &path]);
        args.extend(extra);
        lachesis_on(&bed, &args)
    };
    let model = dir.join("model");
    train(&model, &["--no-card"]);
    let (local, array) = (dir.join("local"), dir.join("array"));
    for copy in [&local, &array] {
        assert!(
            Command::new("cp")
                .args(["-r", model.to_str().unwrap(), copy.to_str().unwrap()])
                .status()
                .unwrap()
                .success()
        );
    }
    train(&local, &["--card-only"]);
    let printed = train(
        &array,
        &["--card-only", "--slurm", "2", "--slurm-partition", "batch"],
    );
    assert!(printed.contains("slurm: job "), "{printed}");
    let read = |model: &Path, name: &str| {
        let path = model.join("compare/cluster10-3x8-V100/comparison.json");
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace(name, "MODEL");
        let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
        json["setup"].as_object_mut().unwrap().remove("wall_s");
        json
    };
    assert_eq!(
        read(&local, local.to_str().unwrap()),
        read(&array, array.to_str().unwrap())
    );
    assert!(array.join("MODEL_CARD.md").is_file());
}
