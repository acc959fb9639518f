//! `lachesis bench serve`: the decision service end to end. The service runs as a separate
//! process (`lachesis serve` on loopback, ports picked by the kernel); this process drives
//! `Decide` load at it over gRPC and measures what a client sees, beside the targets.
//! Owns the child's lifetime (SIGTERM, then wait; never left running) and the load drivers; it
//! does not reach into the service's internals.

use crate::bench_infer::percentile;
use anyhow::{Context, Result, bail, ensure};
use lachesis_agent::Deciding;
use lachesis_serve::client::{Client, connect};
use lachesis_serve::proto::{DecideRequest, DecideResponse};
use lachesis_serve::synthetic;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The scenarios `--scenarios` may name, in the order they run.
const SCENARIOS: [&str; 5] = [
    "model-1000x100",
    "model-5000x500",
    "heuristic-1000x100",
    "model-session-1000x100",
    "heuristic-session-1000x100",
];
/// The session scenarios' clock step per delta (one scheduling cycle), ms.
const SESSION_STEP_MS: u64 = 1_000;
/// Untimed deltas each session client sends after opening its session.
const SESSION_WARMUP: usize = 5;
/// Snapshots per scenario (seeds `seed..seed + 8`), sent in rotation.
const SNAPSHOT_SEEDS: u64 = 8;
/// Share of GPUs busy in the synthetic snapshots.
const UTILIZATION: f64 = 0.9;
/// Untimed requests before each scenario's clock starts.
const WARMUP: usize = 20;
/// How long the model may take before the chain answers in the model scenarios: long enough
/// that the model really answers every request.
const MODEL_DEADLINE_MS: f64 = 10_000.0;
/// The heuristic arm never consults the model; the service's default deadline.
const HEURISTIC_DEADLINE_MS: f64 = 50.0;
/// How long the child may take to print where it listens (a debug build loads slowly).
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the child may take to stop after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// The soak's RSS sampling period.
const SOAK_SAMPLE: Duration = Duration::from_secs(10);
/// The soak's memory counts as flat when it grows less than this after the first minute
/// (least-squares slope; 0.1 MiB/min is 144 MiB a day).
const FLAT_MIB_PER_MIN: f64 = 0.1;
/// What `lachesis serve` prints once it listens (serve/src/server.rs `run`).
const BANNER: &str = "lachesis serve: gRPC on ";

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenarios to run, comma-separated: model-1000x100, model-5000x500, heuristic-1000x100,
    /// model-session-1000x100, heuristic-session-1000x100. The session scenarios open one
    /// session per client with a full snapshot, then send only deltas (the clock a second on,
    /// as many jobs finished as the last answer started, new jobs to refill the queue).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "model-1000x100,model-5000x500,heuristic-1000x100,model-session-1000x100,heuristic-session-1000x100"
    )]
    scenarios: Vec<String>,
    /// Timed requests of each model scenario, one in flight, after 20 warm-up (default: 200
    /// for model-1000x100, 50 for model-5000x500).
    #[arg(long)]
    requests: Option<usize>,
    /// Client tasks of the heuristic and soak scenarios, each keeping one request in flight.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Seconds of load in the heuristic scenario.
    #[arg(long, default_value_t = 10.0)]
    throughput_s: f64,
    /// Seconds of the soak (the heuristic scenario's load, RSS sampled every 10 s); 0: none.
    #[arg(long, default_value_t = 0)]
    soak_s: u64,
    /// Soak with sessions and deltas (the heuristic-session scenario's load) instead of full
    /// snapshots.
    #[arg(long)]
    soak_sessions: bool,
    /// Model directory served in the model scenarios.
    #[arg(long, default_value = "models/default")]
    model: PathBuf,
    /// How the model scenarios' service builds a decision (`deciding` in serve.toml:
    /// stepwise, batched); default: the service's default.
    #[arg(long)]
    deciding: Option<Deciding>,
    /// Seed of the first synthetic snapshot (eight seeds from it are rotated).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Nodes of the heuristic and soak snapshots.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Pending jobs of the heuristic and soak snapshots.
    #[arg(long, default_value_t = 100)]
    pending: usize,
}

/// One scenario: the service's routing, the snapshots' size and how load is driven.
#[derive(Debug)]
struct Scenario {
    name: String,
    nodes: usize,
    pending: usize,
    /// Model directory (absolute); `None`: heuristics only, routing `baseline`.
    model: Option<PathBuf>,
    /// The service's `deciding`, when given.
    deciding: Option<Deciding>,
    load: Load,
}

#[derive(Debug, Clone, Copy)]
enum Load {
    /// `requests` one after the other.
    Sequential { requests: usize },
    /// `tasks` clients, each with one request in flight, for `seconds`.
    ClosedLoop { tasks: usize, seconds: f64 },
    /// `tasks` clients, each on its own session (opened with a full snapshot, untimed), each
    /// with one delta in flight, for `seconds`.
    Sessions { tasks: usize, seconds: f64 },
}

impl Scenario {
    fn snapshot_label(&self) -> String {
        format!("{}x{}", self.nodes, self.pending)
    }

    fn concurrency(&self) -> usize {
        match self.load {
            Load::Sequential { .. } => 1,
            Load::ClosedLoop { tasks, .. } | Load::Sessions { tasks, .. } => tasks,
        }
    }

    /// The service's `serve.toml`.
    fn config(&self) -> toml::Table {
        let mut routing = toml::Table::new();
        let mut grpc = toml::Table::new();
        let mut http = toml::Table::new();
        let mut cfg = toml::Table::new();
        let (model, mode, deadline_ms) = match &self.model {
            Some(dir) => (
                dir.to_string_lossy().into_owned(),
                "model",
                MODEL_DEADLINE_MS,
            ),
            None => (String::new(), "baseline", HEURISTIC_DEADLINE_MS),
        };
        routing.insert("mode".into(), mode.into());
        grpc.insert("addr".into(), "127.0.0.1:0".into());
        // Every client task gets a permit at once: the bench measures deciding, not queueing.
        let permits = (self.concurrency() * 4).max(64);
        grpc.insert("max_concurrency".into(), (permits as i64).into());
        http.insert("addr".into(), "127.0.0.1:0".into());
        cfg.insert("model".into(), model.into());
        cfg.insert("deadline_ms".into(), deadline_ms.into());
        if let (Some(_), Some(d)) = (&self.model, &self.deciding) {
            cfg.insert("deciding".into(), d.as_str().into());
        }
        cfg.insert("routing".into(), routing.into());
        cfg.insert("grpc".into(), grpc.into());
        cfg.insert("http".into(), http.into());
        cfg
    }

    /// The snapshots sent, in rotation.
    fn requests(&self, seed: u64) -> Vec<DecideRequest> {
        (seed..seed + SNAPSHOT_SEEDS)
            .map(|s| DecideRequest {
                snapshot: Some(synthetic::snapshot(
                    self.nodes,
                    self.pending,
                    UTILIZATION,
                    s,
                )),
                ..Default::default()
            })
            .collect()
    }

    /// The targets for this scenario, judged on `stats`.
    fn targets(&self, stats: &Stats) -> String {
        let judge = |ok: bool| if ok { "met" } else { "NOT met" };
        let below = |v: Option<f64>, limit: f64| judge(v.is_some_and(|v| v < limit));
        match self.name.as_str() {
            "model-1000x100" | "model-session-1000x100" => format!(
                "p50 < 1 ms: {}; p99 < 2 ms: {}",
                below(stats.p50_ms, 1.0),
                below(stats.p99_ms, 2.0)
            ),
            "model-5000x500" => format!("p99 < 10 ms: {}", below(stats.p99_ms, 10.0)),
            _ => format!(
                ">= 2,000 decisions/s: {}",
                judge(stats.answers > 0 && stats.rate >= 2000.0)
            ),
        }
    }
}

/// What one scenario measured.
#[derive(Debug, Default)]
struct Samples {
    /// Client-measured round trips of the answered requests, ms.
    latency_ms: Vec<f64>,
    /// The service's own `decision_us` of each answer.
    decision_us: Vec<f64>,
    /// Answers that went down the fallback chain.
    fell_back: usize,
    /// Jobs the answers placed (kube-scheduler's benchmarks count pods scheduled per second).
    placed: usize,
    /// Running jobs the answers preempted.
    preempted: usize,
    errors: usize,
    first_error: Option<String>,
    /// Who decided, with counts, in the order first seen.
    deciders: Vec<(String, usize)>,
    wall_s: f64,
}

impl Samples {
    fn answered(&mut self, ms: f64, answer: &DecideResponse) {
        self.latency_ms.push(ms);
        self.decision_us.push(answer.decision_us as f64);
        self.fell_back += usize::from(!answer.fallbacks.is_empty());
        self.placed += answer.placements.len();
        self.preempted += answer.preemptions.len();
        match self
            .deciders
            .iter_mut()
            .find(|(d, _)| *d == answer.decided_by)
        {
            Some((_, n)) => *n += 1,
            None => self.deciders.push((answer.decided_by.clone(), 1)),
        }
    }

    fn failed(&mut self, message: String) {
        self.errors += 1;
        self.first_error.get_or_insert(message);
    }

    fn merge(&mut self, other: Samples) {
        self.latency_ms.extend(other.latency_ms);
        self.decision_us.extend(other.decision_us);
        self.fell_back += other.fell_back;
        self.placed += other.placed;
        self.preempted += other.preempted;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        for (d, n) in other.deciders {
            match self.deciders.iter_mut().find(|(mine, _)| *mine == d) {
                Some((_, m)) => *m += n,
                None => self.deciders.push((d, n)),
            }
        }
    }
}

/// Counts visible while load runs (the soak's progress lines).
#[derive(Debug, Default)]
struct Progress {
    answered: AtomicU64,
    errors: AtomicU64,
}

/// The row's figures: medians and nearest-rank percentiles of the sorted samples.
#[derive(Debug)]
struct Stats {
    answers: usize,
    errors: usize,
    rate: f64,
    /// Jobs placed per second.
    placed_rate: f64,
    p50_ms: Option<f64>,
    p90_ms: Option<f64>,
    p99_ms: Option<f64>,
    max_ms: Option<f64>,
    server_median_us: Option<f64>,
    fallback_share: Option<f64>,
}

impl Stats {
    fn of(samples: &Samples) -> Stats {
        let mut ms = samples.latency_ms.clone();
        ms.sort_by(f64::total_cmp);
        let mut us = samples.decision_us.clone();
        us.sort_by(f64::total_cmp);
        let at = |v: &[f64], p: f64| (!v.is_empty()).then(|| percentile(v, p));
        let answers = ms.len();
        let per_s = |n: usize| {
            if samples.wall_s > 0.0 {
                n as f64 / samples.wall_s
            } else {
                0.0
            }
        };
        Stats {
            answers,
            errors: samples.errors,
            rate: per_s(answers),
            placed_rate: per_s(samples.placed),
            p50_ms: at(&ms, 0.5),
            p90_ms: at(&ms, 0.9),
            p99_ms: at(&ms, 0.99),
            max_ms: ms.last().copied(),
            server_median_us: at(&us, 0.5),
            fallback_share: (answers > 0).then(|| samples.fell_back as f64 / answers as f64),
        }
    }
}

fn print_header() {
    outln!(
        "{:<20} {:>10} {:>4} {:>8} {:>6} {:>11} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9}  target",
        "scenario",
        "snapshot",
        "conc",
        "answers",
        "errors",
        "decisions/s",
        "placed/s",
        "p50_ms",
        "p90_ms",
        "p99_ms",
        "max_ms",
        "server_us",
        "fallbacks"
    );
}

fn print_row(name: &str, snapshot: &str, concurrency: usize, stats: &Stats, target: &str) {
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
    outln!(
        "{:<20} {:>10} {:>4} {:>8} {:>6} {:>11.1} {:>9.0} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9}  {}",
        name,
        snapshot,
        concurrency,
        stats.answers,
        stats.errors,
        stats.rate,
        stats.placed_rate,
        ms(stats.p50_ms),
        ms(stats.p90_ms),
        ms(stats.p99_ms),
        ms(stats.max_ms),
        stats
            .server_median_us
            .map_or_else(|| "-".to_string(), |v| format!("{v:.0}")),
        stats
            .fallback_share
            .map_or_else(|| "-".to_string(), |v| format!("{:.1}%", v * 100.0)),
        target
    );
}

/// A `lachesis serve` child process. Stopped (SIGTERM, then wait; killed if it lingers) by
/// `stop` or, on any early return, by `Drop`; its scratch directory goes with it.
#[derive(Debug)]
struct Service {
    child: Child,
    grpc_addr: String,
    dir: PathBuf,
    stopped: bool,
}

impl Service {
    /// Writes `config` to a scratch `serve.toml`, starts `lachesis serve` on it and waits for
    /// the line that says where it listens.
    fn start(name: &str, config: &toml::Table) -> Result<Service> {
        let dir = std::env::temp_dir().join(format!(
            "lachesis-bench-serve-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let config_path = dir.join("serve.toml");
        let text = toml::to_string(config).context("writing the service's configuration")?;
        std::fs::write(&config_path, text)
            .with_context(|| format!("writing {}", config_path.display()))?;
        let log_path = dir.join("serve.log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let exe = std::env::current_exe().context("finding this executable")?;
        let child = Command::new(&exe)
            .arg("serve")
            .arg("--config")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {} serve", exe.display()))?;
        let mut service = Service {
            child,
            grpc_addr: String::new(),
            dir,
            stopped: false,
        };
        let stdout = service
            .child
            .stdout
            .take()
            .expect("stdout was set to a pipe");
        let (found, banner) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
            let _ = found.send(lines.by_ref().find(|l| l.starts_with(BANNER)));
            // Keep the pipe drained until the child closes it.
            lines.for_each(drop);
        });
        let line = match banner.recv_timeout(START_TIMEOUT) {
            Ok(Some(line)) => line,
            Ok(None) => bail!(
                "the service ended before it listened; its log:\n{}",
                service.log_tail()
            ),
            Err(_) => bail!(
                "the service did not say where it listens within {} s; its log:\n{}",
                START_TIMEOUT.as_secs(),
                service.log_tail()
            ),
        };
        service.grpc_addr = line[BANNER.len()..]
            .split([',', ';'])
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        ensure!(!service.grpc_addr.is_empty(), "no gRPC address in {line:?}");
        Ok(service)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child's resident memory (VmRSS), MiB.
    fn rss_mib(&self) -> Result<f64> {
        let path = format!("/proc/{}/status", self.pid());
        let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .with_context(|| format!("no VmRSS in {path}"))?;
        Ok(kib / 1024.0)
    }

    /// An error when the child has exited (it must serve until stopped).
    fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait().context("polling the service")? {
            self.stopped = true;
            bail!(
                "the service exited ({status}) under load; its log:\n{}",
                self.log_tail()
            );
        }
        Ok(())
    }

    /// The last lines of the child's stderr, for error messages.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("serve.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// SIGTERM (the service's graceful shutdown), then wait; killed after `STOP_TIMEOUT`.
    /// An error when it did not exit cleanly.
    fn stop(&mut self) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let signalled = match Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
        {
            Ok(status) if status.success() => "SIGTERM sent".to_string(),
            Ok(status) => format!("`kill -TERM` {status}"),
            Err(e) => format!("`kill -TERM` did not run: {e}"),
        };
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().context("waiting for the service")? {
                ensure!(
                    status.success(),
                    "the service exited {status} on SIGTERM; its log:\n{}",
                    self.log_tail()
                );
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!(
                    "the service was still running {} s after SIGTERM ({signalled}): killed; \
                     its log:\n{}",
                    STOP_TIMEOUT.as_secs(),
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends `request` and records the round trip.
async fn decide_once(
    client: &mut Client,
    request: DecideRequest,
    samples: &mut Samples,
    progress: &Progress,
) {
    let started = Instant::now();
    let result = client.decide(request).await;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    match result {
        Ok(answer) => {
            samples.answered(ms, answer.get_ref());
            progress.answered.fetch_add(1, Ordering::Relaxed);
        }
        Err(status) => {
            samples.failed(format!("{:?}: {}", status.code(), status.message()));
            progress.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `WARMUP` untimed requests, then `count` timed ones, one in flight.
async fn sequential(addr: &str, requests: &[DecideRequest], count: usize) -> Result<Samples> {
    let mut client = connect(addr, None, None).await?;
    let progress = Progress::default();
    let mut warmup = Samples::default();
    for k in 0..WARMUP {
        let request = requests[k % requests.len()].clone();
        decide_once(&mut client, request, &mut warmup, &progress).await;
    }
    let mut samples = Samples::default();
    let started = Instant::now();
    for k in 0..count {
        let request = requests[k % requests.len()].clone();
        decide_once(&mut client, request, &mut samples, &progress).await;
    }
    samples.wall_s = started.elapsed().as_secs_f64();
    Ok(samples)
}

/// `tasks` clients (one connection each), each sending its next request as soon as the last
/// is answered, until `seconds` have passed; `WARMUP` untimed requests first.
async fn closed_loop(
    addr: &str,
    requests: Arc<Vec<DecideRequest>>,
    tasks: usize,
    seconds: f64,
    progress: Arc<Progress>,
) -> Result<Samples> {
    let mut clients = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        clients.push(connect(addr, None, None).await?);
    }
    let mut warmup = Samples::default();
    for k in 0..WARMUP {
        let request = requests[k % requests.len()].clone();
        decide_once(&mut clients[0], request, &mut warmup, &Progress::default()).await;
    }
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(seconds);
    let mut running = tokio::task::JoinSet::new();
    for (t, mut client) in clients.into_iter().enumerate() {
        let (requests, progress) = (Arc::clone(&requests), Arc::clone(&progress));
        running.spawn(async move {
            let mut samples = Samples::default();
            // Tasks start at different snapshots so the service sees them mixed.
            let mut k = t;
            while Instant::now() < until {
                let request = requests[k % requests.len()].clone();
                decide_once(&mut client, request, &mut samples, &progress).await;
                k += 1;
            }
            samples
        });
    }
    gather(running, started).await
}

/// The client tasks' samples merged, over the wall time since `started`.
async fn gather(mut running: tokio::task::JoinSet<Samples>, started: Instant) -> Result<Samples> {
    let mut all = Samples::default();
    while let Some(done) = running.join_next().await {
        all.merge(done.context("a client task failed")?);
    }
    all.wall_s = started.elapsed().as_secs_f64();
    Ok(all)
}

/// Opens (or reopens) session `id` with `snapshot`: the driver of its deltas.
async fn open_session(
    client: &mut Client,
    id: &str,
    snapshot: &lachesis_serve::proto::Snapshot,
    queue: usize,
    seed: u64,
) -> Result<synthetic::SessionDriver> {
    let answer = client
        .decide(DecideRequest {
            snapshot: Some(snapshot.clone()),
            session: id.to_string(),
            ..Default::default()
        })
        .await
        .map_err(|s| anyhow::anyhow!("opening session {id}: {:?}: {}", s.code(), s.message()))?;
    let mut driver = synthetic::SessionDriver::new(snapshot, queue, SESSION_STEP_MS, seed);
    driver.answered(answer.get_ref());
    Ok(driver)
}

/// `tasks` clients (one connection and one session each): each opens its session with a full
/// snapshot and sends `SESSION_WARMUP` deltas, untimed; then each sends the next delta as soon
/// as the last is answered, until `seconds` have passed. A refused delta counts as an error
/// and the client reopens its session.
async fn session_loop(
    addr: &str,
    requests: Arc<Vec<DecideRequest>>,
    queue: usize,
    tasks: usize,
    seconds: f64,
    progress: Arc<Progress>,
) -> Result<Samples> {
    let mut clients = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let mut client = connect(addr, None, None).await?;
        let id = format!("bench-{t}");
        let snapshot = requests[t % requests.len()]
            .snapshot
            .clone()
            .context("a request without a snapshot")?;
        let mut driver = open_session(&mut client, &id, &snapshot, queue, t as u64).await?;
        for _ in 0..SESSION_WARMUP {
            let answer = client
                .decide(DecideRequest {
                    session: id.clone(),
                    delta: Some(driver.delta()),
                    ..Default::default()
                })
                .await
                .map_err(|s| anyhow::anyhow!("warm-up delta: {:?}: {}", s.code(), s.message()))?;
            driver.answered(answer.get_ref());
        }
        clients.push((client, id, snapshot, driver));
    }
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(seconds);
    let mut running = tokio::task::JoinSet::new();
    for (t, (mut client, id, snapshot, mut driver)) in clients.into_iter().enumerate() {
        let progress = Arc::clone(&progress);
        running.spawn(async move {
            let mut samples = Samples::default();
            let mut reopened = 0u64;
            while Instant::now() < until {
                let request = DecideRequest {
                    session: id.clone(),
                    delta: Some(driver.delta()),
                    ..Default::default()
                };
                let sent = Instant::now();
                match client.decide(request).await {
                    Ok(answer) => {
                        samples.answered(sent.elapsed().as_secs_f64() * 1e3, answer.get_ref());
                        driver.answered(answer.get_ref());
                        progress.answered.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(status) => {
                        samples.failed(format!("{:?}: {}", status.code(), status.message()));
                        progress.errors.fetch_add(1, Ordering::Relaxed);
                        reopened += 1;
                        let seed = (t as u64) + 1000 * reopened;
                        match open_session(&mut client, &id, &snapshot, queue, seed).await {
                            Ok(d) => driver = d,
                            Err(e) => {
                                samples.failed(e.to_string());
                                break;
                            }
                        }
                    }
                }
            }
            samples
        });
    }
    gather(running, started).await
}

/// Starts the service for `scenario` and drives its load; returns the service still running
/// (the caller prints the row, then stops it, so a slow stop does not hide the figures).
fn run_scenario(
    runtime: &tokio::runtime::Runtime,
    scenario: &Scenario,
    seed: u64,
) -> Result<(Samples, Service)> {
    let requests = Arc::new(scenario.requests(seed));
    let mut service = Service::start(&scenario.name, &scenario.config())?;
    let addr = service.grpc_addr.clone();
    let samples = runtime.block_on(async {
        match scenario.load {
            Load::Sequential { requests: count } => sequential(&addr, &requests, count).await,
            Load::ClosedLoop { tasks, seconds } => {
                closed_loop(&addr, requests, tasks, seconds, Arc::default()).await
            }
            Load::Sessions { tasks, seconds } => {
                session_loop(
                    &addr,
                    requests,
                    scenario.pending,
                    tasks,
                    seconds,
                    Arc::default(),
                )
                .await
            }
        }
    })?;
    service.check_alive()?;
    Ok((samples, service))
}

/// What `samples` says about who decided, when it is worth a line.
fn note(scenario: &Scenario, samples: &Samples) -> Option<String> {
    let mut parts = Vec::new();
    let answers = samples.latency_ms.len();
    if answers > 0 {
        parts.push(format!(
            "per answer {:.1} placed, {:.1} preempted",
            samples.placed as f64 / answers as f64,
            samples.preempted as f64 / answers as f64
        ));
    }
    if scenario.model.is_some() || samples.fell_back > 0 {
        let deciders: Vec<String> = samples
            .deciders
            .iter()
            .map(|(d, n)| format!("{d} x{n}"))
            .collect();
        parts.push(format!("decided by {}", deciders.join(", ")));
    }
    if let Some(e) = &samples.first_error {
        parts.push(format!("first error: {e}"));
    }
    (!parts.is_empty()).then(|| format!("{}: {}", scenario.name, parts.join("; ")))
}

/// The soak: the heuristic arm under closed-loop load for `seconds`, the child's RSS sampled
/// every 10 s; errors must stay 0 and memory flat.
fn soak(runtime: &tokio::runtime::Runtime, args: &Args) -> Result<()> {
    let (tasks, seconds) = (args.concurrency, args.soak_s as f64);
    let scenario = Scenario {
        name: format!(
            "soak-{}{}s",
            if args.soak_sessions { "session-" } else { "" },
            args.soak_s
        ),
        nodes: args.nodes,
        pending: args.pending,
        model: None,
        deciding: None,
        load: if args.soak_sessions {
            Load::Sessions { tasks, seconds }
        } else {
            Load::ClosedLoop { tasks, seconds }
        },
    };
    outln!(
        "\nsoak: heuristic arm, {} {}, {} client tasks, {} s; service RSS every {} s",
        scenario.snapshot_label(),
        if args.soak_sessions {
            "sessions sending deltas"
        } else {
            "snapshots"
        },
        args.concurrency,
        args.soak_s,
        SOAK_SAMPLE.as_secs()
    );
    let requests = Arc::new(scenario.requests(args.seed));
    let mut service = Service::start(&scenario.name, &scenario.config())?;
    let addr = service.grpc_addr.clone();
    let progress = Arc::new(Progress::default());
    let mut rss: Vec<(f64, f64)> = Vec::new();
    let samples = runtime.block_on(async {
        let load = tokio::spawn({
            let (addr, requests, progress) =
                (addr.clone(), Arc::clone(&requests), Arc::clone(&progress));
            let (load, queue) = (scenario.load, scenario.pending);
            async move {
                match load {
                    Load::Sessions { tasks, seconds } => {
                        session_loop(&addr, requests, queue, tasks, seconds, progress).await
                    }
                    _ => closed_loop(&addr, requests, tasks, seconds, progress).await,
                }
            }
        });
        let started = Instant::now();
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + SOAK_SAMPLE, SOAK_SAMPLE);
        while !load.is_finished() {
            tokio::select! {
                _ = tick.tick() => {
                    service.check_alive()?;
                    let t = started.elapsed().as_secs_f64();
                    let mib = service.rss_mib()?;
                    rss.push((t, mib));
                    outln!(
                        "  t={t:.0}s rss={mib:.1}MiB ok={} errors={}",
                        progress.answered.load(Ordering::Relaxed),
                        progress.errors.load(Ordering::Relaxed)
                    );
                }
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
        load.await.context("the soak's load task failed")?
    })?;
    service.check_alive()?;
    let stats = Stats::of(&samples);
    let growth = growth_mib_per_min(&rss);
    let flat = growth.map(|g| g < FLAT_MIB_PER_MIN);
    let spread = growth_ci95_mib_per_min(&rss);
    print_header();
    print_row(
        &scenario.name,
        &scenario.snapshot_label(),
        args.concurrency,
        &stats,
        &format!(
            "0 errors: {}",
            if stats.errors == 0 { "met" } else { "NOT met" }
        ),
    );
    let mibs: Vec<f64> = rss.iter().map(|(_, m)| *m).collect();
    let fmt_mib = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1} MiB"));
    outln!(
        "soak: {} requests, errors {} (target 0: {}); RSS first {}, last {}, max {}",
        stats.answers + stats.errors,
        stats.errors,
        if stats.errors == 0 { "met" } else { "NOT met" },
        fmt_mib(mibs.first().copied()),
        fmt_mib(mibs.last().copied()),
        fmt_mib(mibs.iter().copied().reduce(f64::max))
    );
    outln!(
        "soak: RSS growth after the first minute {} (target flat, < {FLAT_MIB_PER_MIN} MiB/min \
         least-squares: {})",
        growth.map_or_else(
            || "not measured (needs samples past 60 s)".to_string(),
            |g| match spread {
                Some(h) => format!("{g:+.3} MiB/min, 95% CI {:+.3} to {:+.3}", g - h, g + h),
                None => format!("{g:+.3} MiB/min"),
            }
        ),
        match flat {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "not judged",
        }
    );
    let means = minute_means(&rss);
    if !means.is_empty() {
        outln!(
            "soak: RSS by minute (mean of its samples): {}",
            means
                .iter()
                .map(|m| format!("{m:.1}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(n) = note(&scenario, &samples) {
        outln!("{n}");
    }
    service.stop()
}

/// The samples from 60 s on (the first minute is warm-up).
fn after_first_minute(samples: &[(f64, f64)]) -> Vec<(f64, f64)> {
    samples
        .iter()
        .copied()
        .filter(|(t, _)| *t >= 60.0)
        .collect()
}

/// Least-squares slope of RSS over time for the samples after the first minute, MiB/min;
/// `None` with fewer than two such samples.
fn growth_mib_per_min(samples: &[(f64, f64)]) -> Option<f64> {
    let late = after_first_minute(samples);
    if late.len() < 2 {
        return None;
    }
    let n = late.len() as f64;
    let mean_t = late.iter().map(|(t, _)| t).sum::<f64>() / n;
    let mean_m = late.iter().map(|(_, m)| m).sum::<f64>() / n;
    let cov: f64 = late.iter().map(|(t, m)| (t - mean_t) * (m - mean_m)).sum();
    let var: f64 = late.iter().map(|(t, _)| (t - mean_t).powi(2)).sum();
    (var > 0.0).then(|| cov / var * 60.0)
}

/// The half-width of the 95% confidence interval of `growth_mib_per_min` (normal
/// approximation of the slope's sampling error; the RSS of an allocator that returns memory
/// to the system in bursts is noisy); `None` with fewer than three samples past 60 s.
fn growth_ci95_mib_per_min(samples: &[(f64, f64)]) -> Option<f64> {
    let late = after_first_minute(samples);
    if late.len() < 3 {
        return None;
    }
    let slope = growth_mib_per_min(samples)? / 60.0;
    let n = late.len() as f64;
    let mean_t = late.iter().map(|(t, _)| t).sum::<f64>() / n;
    let mean_m = late.iter().map(|(_, m)| m).sum::<f64>() / n;
    let var: f64 = late.iter().map(|(t, _)| (t - mean_t).powi(2)).sum();
    let residual: f64 = late
        .iter()
        .map(|(t, m)| (m - mean_m - slope * (t - mean_t)).powi(2))
        .sum();
    Some(1.96 * (residual / (n - 2.0) / var).sqrt() * 60.0)
}

/// The mean RSS of each whole or partial minute of samples, MiB.
fn minute_means(samples: &[(f64, f64)]) -> Vec<f64> {
    let mut sums: Vec<(f64, usize)> = Vec::new();
    for (t, m) in samples {
        // A sample at 60 s closes the first minute.
        let k = ((t / 60.0).ceil() as usize).saturating_sub(1);
        if sums.len() <= k {
            sums.resize(k + 1, (0.0, 0));
        }
        sums[k].0 += m;
        sums[k].1 += 1;
    }
    sums.into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| s / n as f64)
        .collect()
}

/// The scenarios `args` chose, in the order of `SCENARIOS`.
fn chosen(args: &Args) -> Result<Vec<Scenario>> {
    for name in &args.scenarios {
        ensure!(
            SCENARIOS.contains(&name.trim()),
            "--scenarios: unknown scenario {name:?} (known: {})",
            SCENARIOS.join(", ")
        );
    }
    let wanted = |name: &str| args.scenarios.iter().any(|s| s.trim() == name);
    let model =
        if wanted("model-1000x100") || wanted("model-5000x500") || wanted("model-session-1000x100")
        {
            let dir = std::path::absolute(&args.model)
                .with_context(|| format!("resolving --model {}", args.model.display()))?;
            ensure!(
                Path::new(&dir).join("manifest.json").is_file(),
                "--model {}: no manifest.json there (a model directory is written by `lachesis \
             train`)",
                dir.display()
            );
            Some(dir)
        } else {
            None
        };
    let sequential = |default| Load::Sequential {
        requests: args.requests.unwrap_or(default),
    };
    let all = [
        ("model-1000x100", 1000, 100, model.clone(), sequential(200)),
        ("model-5000x500", 5000, 500, model.clone(), sequential(50)),
        (
            "heuristic-1000x100",
            args.nodes,
            args.pending,
            None,
            Load::ClosedLoop {
                tasks: args.concurrency,
                seconds: args.throughput_s,
            },
        ),
        (
            "model-session-1000x100",
            1000,
            100,
            model.clone(),
            Load::Sessions {
                tasks: 1,
                seconds: args.throughput_s,
            },
        ),
        (
            "heuristic-session-1000x100",
            args.nodes,
            args.pending,
            None,
            Load::Sessions {
                tasks: args.concurrency,
                seconds: args.throughput_s,
            },
        ),
    ];
    Ok(all
        .into_iter()
        .filter(|(name, ..)| wanted(name))
        .map(|(name, nodes, pending, model, load)| Scenario {
            name: name.to_string(),
            nodes,
            pending,
            model,
            deciding: args.deciding,
            load,
        })
        .collect())
}

pub fn run(args: &Args) -> Result<()> {
    ensure!(args.concurrency > 0, "--concurrency must be at least 1");
    ensure!(
        args.throughput_s.is_finite() && args.throughput_s > 0.0,
        "--throughput-s must be a positive number of seconds"
    );
    ensure!(args.requests != Some(0), "--requests must be at least 1");
    ensure!(args.nodes > 0, "--nodes must be at least 1");
    let scenarios = chosen(args)?;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    outln!(
        "machine: {cores} cores, shared by this client and the service (a separate `lachesis \
         serve` process on loopback gRPC); {} synthetic snapshots per scenario ({}% of GPUs \
         busy), {WARMUP} warm-up requests; percentiles nearest-rank, server_us the median of \
         the answers' decision_us, fallbacks the share of answers that fell back; \
         decisions/s counts answers, placed/s the jobs they placed (the unit of \
         kube-scheduler's pods/s)",
        SNAPSHOT_SEEDS,
        UTILIZATION * 100.0
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut notes = Vec::new();
    if !scenarios.is_empty() {
        print_header();
    }
    for scenario in &scenarios {
        let context = || format!("scenario {}", scenario.name);
        let (samples, mut service) =
            run_scenario(&runtime, scenario, args.seed).with_context(context)?;
        let stats = Stats::of(&samples);
        print_row(
            &scenario.name,
            &scenario.snapshot_label(),
            scenario.concurrency(),
            &stats,
            &scenario.targets(&stats),
        );
        notes.extend(note(scenario, &samples));
        service.stop().with_context(context)?;
    }
    for n in &notes {
        outln!("{n}");
    }
    if args.soak_s > 0 {
        soak(&runtime, args).context("the soak")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_the_slope_after_the_first_minute() {
        // 100 MiB until 60 s (a warm-up jump ignored), then +0.5 MiB every 30 s = 1 MiB/min.
        let samples = [(10.0, 50.0), (60.0, 100.0), (90.0, 100.5), (120.0, 101.0)];
        let g = growth_mib_per_min(&samples).expect("three samples past 60 s");
        assert!((g - 1.0).abs() < 1e-9, "{g}");
        assert_eq!(growth_mib_per_min(&samples[..2]), None);
        // On a straight line the slope is exact: no spread.
        let h = growth_ci95_mib_per_min(&samples).expect("three samples past 60 s");
        assert!(h.abs() < 1e-9, "{h}");
        assert_eq!(growth_ci95_mib_per_min(&samples[..3]), None);
    }

    #[test]
    fn noise_widens_the_growth_interval_around_a_flat_line() {
        // Flat at 100 MiB, +-4 MiB alternating every 10 s for 9 minutes.
        let samples: Vec<(f64, f64)> = (6..60)
            .map(|k| {
                let noise = if k % 2 == 0 { 4.0 } else { -4.0 };
                (f64::from(k) * 10.0, 100.0 + noise)
            })
            .collect();
        let g = growth_mib_per_min(&samples).unwrap();
        let h = growth_ci95_mib_per_min(&samples).unwrap();
        assert!(g.abs() < 0.1, "{g}");
        // sd 4 MiB over 54 samples spread over 9 minutes: the slope's error is ~0.2 MiB/min.
        assert!(h > 0.3 && h < 0.6, "{h}");
        assert!(g - h < 0.0 && 0.0 < g + h);
    }

    #[test]
    fn minute_means_group_samples_by_minute() {
        let samples = [
            (10.0, 1.0),
            (60.0, 3.0),
            (70.0, 10.0),
            (120.0, 20.0),
            (130.0, 7.0),
        ];
        assert_eq!(minute_means(&samples), vec![2.0, 15.0, 7.0]);
    }
}
