//! What the operators' dashboard (`/ui`, `crate::ui`) shows, kept beside the decision path:
//! the recent decisions and who made them, each routing arm's counts and latencies, the last
//! reload, and for each cluster the service holds (its sessions, and the world the last
//! request without a session left) a view built on demand: nodes grouped by GPU model with
//! each GPU busy, shared, fragmented or free and whose it is, the queue with the service's own
//! "why pending" reasons, and allocation and fragmentation over the past hour.
//!
//! Recording a decision costs a short lock and a counter bump; views are built when a
//! dashboard asks for one, and every few seconds by [`sample`] (so that a page opened later
//! shows the past hour), from a copy of the world taken under the session's lock. Knows
//! nothing of HTTP.

use crate::engine::Engine;
use crate::metrics::Metrics;
use crate::proto;
use crate::reasons::pending_reasons;
use crate::world::World;
use lachesis_env::job::TaskRequest;
use lachesis_env::metrics::MixCounts;
use lachesis_env::policy::Decision;
use lachesis_env::units::GPU_MILLI;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Decisions kept for the stream.
const DECISIONS_KEPT: usize = 200;
/// Latencies kept per arm for its percentiles.
const LATENCIES_KEPT: usize = 512;
/// How far back a cluster's allocation/fragmentation series goes.
const HISTORY_MS: u64 = 3_600_000;
/// The least service time between two kept points of a series (the last one follows the
/// present), and how often [`sample`] takes one.
const POINT_SPACING_MS: u64 = 5_000;
/// Points kept per series: the past hour at that spacing, and the latest.
const POINTS_KEPT: usize = (HISTORY_MS / POINT_SPACING_MS) as usize + 2;
/// The source name of the world the last request without a session left.
pub const LAST_REQUEST: &str = "";

/// One answered request, as the decision stream shows it.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionRow {
    pub unix_ms: u64,
    pub request_id: String,
    /// The session it was on (empty: none).
    pub session: String,
    pub arm: String,
    pub decided_by: String,
    pub fallbacks: Vec<FallbackRow>,
    pub placed: usize,
    pub preempted: usize,
    pub pending: usize,
    pub decision_us: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FallbackRow {
    pub from: String,
    pub reason: String,
    pub detail: String,
}

#[derive(Debug, Default)]
struct ArmStats {
    requests: u64,
    fallbacks: u64,
    placed: u64,
    latencies_us: VecDeque<u64>,
}

/// A routing arm's live figures.
#[derive(Debug, Clone, Serialize)]
pub struct ArmRow {
    pub arm: String,
    pub requests: u64,
    pub fallbacks: u64,
    pub placed: u64,
    pub p50_us: u64,
    pub p95_us: u64,
}

/// The last hot reload (admin `ReloadModel` or SIGHUP).
#[derive(Debug, Clone, Serialize)]
pub struct ReloadRow {
    pub unix_ms: u64,
    pub ok: bool,
    pub message: String,
}

/// One point of a cluster's series: the service's clock (the chart's axis) and the caller's,
/// and the shares of all GPU capacity allocated and fragmented (FGD, under the mix of the jobs
/// the cluster holds).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Point {
    pub unix_ms: u64,
    pub now_ms: u64,
    pub alloc: f64,
    pub frag: f64,
}

/// A GPU as drawn: its state, free share, expected fragment and who holds it.
#[derive(Debug, Clone, Serialize)]
pub struct GpuView {
    /// `busy` (nothing free), `shared` (partly taken, by fractional jobs), `fragmented`
    /// (wholly free, but at least half of it unusable by the cluster's task mix: the jobs it
    /// holds cannot fit on its node) or `free`. `frag_milli` tells a shared GPU's too.
    pub state: &'static str,
    pub free_milli: u32,
    pub frag_milli: f64,
    pub jobs: Vec<Holder>,
}

/// A job's hold on one GPU.
#[derive(Debug, Clone, Serialize)]
pub struct Holder {
    pub job: String,
    pub tenant: String,
    pub milli: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeView {
    pub name: String,
    pub gpus: Vec<GpuView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupView {
    pub gpu_model: String,
    pub nodes: Vec<NodeView>,
}

/// A pending job and why it waits.
#[derive(Debug, Clone, Serialize)]
pub struct QueueRow {
    pub job: String,
    pub tenant: String,
    pub gpus: u32,
    pub gpu_milli: u32,
    pub wait_ms: u64,
    pub kind: String,
    pub message: String,
    pub blocked_by: String,
}

/// One cluster as the dashboard draws it.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterView {
    pub source: String,
    pub now_ms: u64,
    pub groups: Vec<GroupView>,
    pub running: usize,
    pub tenants: Vec<String>,
    pub queue: Vec<QueueRow>,
    pub series: Vec<Point>,
}

/// The dashboard's memory: filled by the engine, read by `crate::ui`.
#[derive(Debug)]
pub struct Dashboard {
    decisions: Mutex<VecDeque<DecisionRow>>,
    arms: Mutex<BTreeMap<String, ArmStats>>,
    reload: Mutex<Option<ReloadRow>>,
    /// The world the last request without a session left, and the nodes it was built from.
    last: Mutex<Option<(World, Arc<proto::Snapshot>)>>,
    series: Mutex<HashMap<String, VecDeque<Point>>>,
    /// When each cluster (a session id, or `LAST_REQUEST`) was last answered.
    active: Mutex<HashMap<String, u64>>,
    /// Bumped on every decision and reload: dashboards wait on it.
    changes: watch::Sender<u64>,
}

impl Default for Dashboard {
    fn default() -> Self {
        Dashboard {
            decisions: Mutex::default(),
            arms: Mutex::default(),
            reload: Mutex::default(),
            last: Mutex::default(),
            series: Mutex::default(),
            active: Mutex::default(),
            changes: watch::Sender::new(0),
        }
    }
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Dashboard {
    /// Notified on every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Records an answer (and the shadow model's, which only counts toward its arm).
    pub fn record(&self, answer: &proto::DecideResponse, shadow: Option<&proto::DecideResponse>) {
        {
            let mut arms = locked(&self.arms);
            for r in std::iter::once(answer).chain(shadow) {
                let arm = arms.entry(r.arm.clone()).or_default();
                arm.requests += 1;
                arm.fallbacks += r.fallbacks.len() as u64;
                arm.placed += r.placements.len() as u64;
                if arm.latencies_us.len() == LATENCIES_KEPT {
                    arm.latencies_us.pop_front();
                }
                arm.latencies_us.push_back(r.decision_us);
            }
        }
        let now = unix_ms();
        locked(&self.active).insert(answer.session.clone(), now);
        let row = DecisionRow {
            unix_ms: now,
            request_id: answer.request_id.clone(),
            session: answer.session.clone(),
            arm: answer.arm.clone(),
            decided_by: answer.decided_by.clone(),
            fallbacks: answer
                .fallbacks
                .iter()
                .map(|f| FallbackRow {
                    from: f.from.clone(),
                    reason: f.reason.clone(),
                    detail: f.detail.clone(),
                })
                .collect(),
            placed: answer.placements.len(),
            preempted: answer.preemptions.len(),
            pending: answer.pending.len(),
            decision_us: answer.decision_us,
        };
        {
            let mut decisions = locked(&self.decisions);
            if decisions.len() == DECISIONS_KEPT {
                decisions.pop_front();
            }
            decisions.push_back(row);
        }
        self.changed();
    }

    /// Keeps the world a request without a session left (the one it replaces is dropped
    /// outside the lock).
    pub fn keep_last(&self, world: World, snapshot: Arc<proto::Snapshot>) {
        let old = locked(&self.last).replace((world, snapshot));
        drop(old);
    }

    /// The guard gave a verdict (dashboards show it).
    pub fn guard_changed(&self) {
        self.changed();
    }

    pub fn reloaded(&self, ok: bool, message: &str) {
        *locked(&self.reload) = Some(ReloadRow {
            unix_ms: unix_ms(),
            ok,
            message: message.to_string(),
        });
        self.changed();
    }

    /// The latest `n` decisions, newest first.
    pub fn decisions(&self, n: usize) -> Vec<DecisionRow> {
        locked(&self.decisions)
            .iter()
            .rev()
            .take(n)
            .cloned()
            .collect()
    }

    pub fn arms(&self) -> Vec<ArmRow> {
        locked(&self.arms)
            .iter()
            .map(|(arm, s)| {
                let mut sorted: Vec<u64> = s.latencies_us.iter().copied().collect();
                sorted.sort_unstable();
                let at = |q: f64| {
                    sorted
                        .get(((sorted.len() as f64 - 1.0) * q).round() as usize)
                        .copied()
                        .unwrap_or(0)
                };
                ArmRow {
                    arm: arm.clone(),
                    requests: s.requests,
                    fallbacks: s.fallbacks,
                    placed: s.placed,
                    p50_us: at(0.5),
                    p95_us: at(0.95),
                }
            })
            .collect()
    }

    pub fn last_reload(&self) -> Option<ReloadRow> {
        locked(&self.reload).clone()
    }

    fn last_world(&self) -> Option<(World, Arc<proto::Snapshot>)> {
        locked(&self.last)
            .as_ref()
            .map(|(w, s)| (w.clone(), Arc::clone(s)))
    }

    /// Adds `point` to `source`'s series and returns the series: the past hour, its points
    /// `POINT_SPACING_MS` apart, and the latest (a last point closer than that to the one
    /// before it is replaced, so the last follows the present).
    fn series(&self, source: &str, point: Point) -> Vec<Point> {
        let mut all = locked(&self.series);
        let series = all.entry(source.to_string()).or_default();
        let n = series.len();
        if n >= 2 && series[n - 1].unix_ms < series[n - 2].unix_ms + POINT_SPACING_MS {
            series[n - 1] = point;
        } else {
            series.push_back(point);
        }
        while series.len() > POINTS_KEPT
            || series
                .front()
                .is_some_and(|p| p.unix_ms + HISTORY_MS < point.unix_ms)
        {
            series.pop_front();
        }
        series.iter().copied().collect()
    }

    /// Forgets the series and activity of clusters no longer held.
    fn retain_series(&self, held: &[String]) {
        locked(&self.series).retain(|k, _| held.iter().any(|h| h == k));
        locked(&self.active).retain(|k, _| held.iter().any(|h| h == k));
    }

    /// `sources` ordered by when each was last answered, the most recent first.
    fn by_recency(&self, mut sources: Vec<SourceRow>) -> Vec<SourceRow> {
        let active = locked(&self.active);
        sources.sort_by_key(|s| std::cmp::Reverse(active.get(&s.id).copied().unwrap_or(0)));
        sources
    }
}

/// A cluster the dashboard can show: a session's id, or `LAST_REQUEST`.
#[derive(Debug, Clone, Serialize)]
pub struct SourceRow {
    pub id: String,
    pub label: String,
}

/// The clusters held now, the most recently answered first (the page shows the first unless
/// told otherwise).
pub fn sources(engine: &Engine) -> Vec<SourceRow> {
    let mut out = Vec::new();
    if locked(&engine.dashboard().last).is_some() {
        out.push(SourceRow {
            id: LAST_REQUEST.into(),
            label: "last request without a session".into(),
        });
    }
    for id in engine.sessions().ids() {
        out.push(SourceRow {
            label: format!("session {id}"),
            id,
        });
    }
    let held: Vec<String> = out.iter().map(|s| s.id.clone()).collect();
    engine.dashboard().retain_series(&held);
    engine.dashboard().by_recency(out)
}

/// Takes a point of every held cluster's series every `POINT_SPACING_MS`, whether or not a
/// page is open, until `stop` turns true.
pub async fn sample(engine: Arc<Engine>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(POINT_SPACING_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        for source in sources(&engine) {
            let _ = cluster(&engine, &source.id).await;
        }
    }
}

/// A model card's training traces as a user can read them: each path from `traces/` on
/// (`../shared/traces/msft-itp-2021/cluster02.csv` is `msft-itp-2021/cluster02.csv`), else
/// its file name; what follows a path (`(spread 0.5)`) is kept.
pub fn trace_names(trained_on: &str) -> String {
    trained_on
        .split(", ")
        .map(|entry| {
            let (path, rest) = entry.split_once(' ').unwrap_or((entry, ""));
            let name = match path.rfind("traces/") {
                Some(i) => &path[i + "traces/".len()..],
                None => path.rsplit('/').next().unwrap_or(path),
            };
            if rest.is_empty() {
                name.to_string()
            } else {
                format!("{name} {rest}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The view of `source` now, or `None` when it holds no cluster (unknown, expired, or its
/// last request failed midway).
pub async fn cluster(engine: &Engine, source: &str) -> Option<ClusterView> {
    let (world, base) = if source == LAST_REQUEST {
        engine.dashboard().last_world()?
    } else {
        let slot = engine.sessions().peek(source)?;
        let guard = slot.lock().await;
        let session = guard.as_ref()?;
        (session.world.clone()?, Arc::clone(&session.base))
    };
    let mut view = view_of(&world, &base.nodes, source);
    view.series = engine.dashboard().series(source, current_point(&view));
    Some(view)
}

fn current_point(view: &ClusterView) -> Point {
    let (mut total, mut free, mut frag) = (0.0, 0.0, 0.0);
    for g in view
        .groups
        .iter()
        .flat_map(|g| &g.nodes)
        .flat_map(|n| &n.gpus)
    {
        total += f64::from(GPU_MILLI);
        free += f64::from(g.free_milli);
        frag += g.frag_milli;
    }
    let share = |x: f64| if total > 0.0 { x / total } else { 0.0 };
    Point {
        unix_ms: unix_ms(),
        now_ms: view.now_ms,
        alloc: share(total - free),
        frag: share(frag),
    }
}

/// A job's task as the fragmentation mix counts it (a request's 0 share means whole GPUs).
fn task_of(job: &proto::Job) -> TaskRequest {
    let gpu_milli = match (job.gpus_per_task, job.gpu_milli) {
        (0, _) => 0,
        (_, 0) => GPU_MILLI,
        (_, m) => m.min(GPU_MILLI),
    };
    TaskRequest {
        gpus: job.gpus_per_task,
        gpu_milli,
        cpu_milli: job.cpu_milli,
        mem_mib: job.mem_mib,
    }
}

/// Draws `world` (built from `nodes`).
pub fn view_of(world: &World, nodes: &[proto::Node], source: &str) -> ClusterView {
    let snap = world.export(nodes, String::new());
    let mut mix = MixCounts::default();
    let running = snap.running.iter().filter_map(|r| r.job.as_ref());
    for job in running.chain(&snap.pending) {
        mix.add(&task_of(job), job.tasks);
    }
    let mix = mix.mix();
    // Who holds each GPU, by node name.
    let mut holders: HashMap<&str, Vec<Vec<Holder>>> = HashMap::new();
    let mut tenants = std::collections::BTreeSet::new();
    for r in &snap.running {
        let Some(job) = &r.job else { continue };
        tenants.insert(job.tenant.clone());
        let milli = task_of(job).gpu_milli;
        for t in &r.tasks {
            let gpus = holders.entry(t.node.as_str()).or_default();
            for g in &t.gpus {
                let g = *g as usize;
                if gpus.len() <= g {
                    gpus.resize_with(g + 1, Vec::new);
                }
                gpus[g].push(Holder {
                    job: job.id.clone(),
                    tenant: job.tenant.clone(),
                    milli,
                });
            }
        }
    }
    let mut groups: BTreeMap<&str, Vec<NodeView>> = BTreeMap::new();
    for n in &snap.nodes {
        let free: Vec<u16> = n
            .gpu_free_milli
            .iter()
            .map(|f| (*f).min(GPU_MILLI) as u16)
            .collect();
        let frag = if mix.is_empty() {
            vec![0.0; free.len()]
        } else {
            mix.gpu_fragments(
                &free,
                n.cpu_free_milli.unwrap_or(0),
                n.mem_free_mib.unwrap_or(0),
            )
        };
        let mut held = holders.remove(n.name.as_str()).unwrap_or_default();
        held.resize_with(free.len(), Vec::new);
        let gpus = free
            .iter()
            .zip(frag)
            .zip(held)
            .map(|((f, frag_milli), jobs)| {
                let free_milli = u32::from(*f);
                let state = if free_milli == 0 {
                    "busy"
                } else if free_milli < GPU_MILLI {
                    "shared"
                } else if frag_milli >= 0.5 * f64::from(free_milli) {
                    "fragmented"
                } else {
                    "free"
                };
                GpuView {
                    state,
                    free_milli,
                    frag_milli,
                    jobs,
                }
            })
            .collect();
        groups.entry(&n.gpu_model).or_default().push(NodeView {
            name: n.name.clone(),
            gpus,
        });
    }
    let reasons: HashMap<String, proto::PendingReason> =
        pending_reasons(world, &Decision::default())
            .into_iter()
            .map(|r| (r.job.clone(), r))
            .collect();
    let queue = snap
        .pending
        .iter()
        .map(|j| {
            let why = reasons.get(&j.id);
            let text = |f: fn(&proto::PendingReason) -> &String| {
                why.map_or_else(String::new, |r| f(r).clone())
            };
            QueueRow {
                job: j.id.clone(),
                tenant: j.tenant.clone(),
                gpus: j.tasks * j.gpus_per_task,
                gpu_milli: task_of(j).gpu_milli,
                wait_ms: j.wait_ms,
                kind: text(|r| &r.kind),
                message: text(|r| &r.message),
                blocked_by: text(|r| &r.blocked_by),
            }
        })
        .collect();
    ClusterView {
        source: source.to_string(),
        now_ms: snap.now_ms,
        groups: groups
            .into_iter()
            .map(|(m, nodes)| GroupView {
                gpu_model: m.to_string(),
                nodes,
            })
            .collect(),
        running: snap.running.len(),
        tenants: tenants.into_iter().collect(),
        queue,
        series: Vec::new(),
    }
}

/// Shadow and A/B figures the metrics already count, and the guard's state.
#[derive(Debug, Clone, Serialize)]
pub struct Routing {
    /// The routing in force (the baseline while the guard holds it there).
    pub mode: String,
    /// Why the guard switched routing to the baseline, while it holds it there.
    pub rerouted: Option<String>,
    /// The guard's last verdict (or the selector's last choice), when it runs and has judged.
    pub guard_verdict: Option<String>,
    /// The heuristic the guard's selector follows, while it follows one.
    pub following: Option<String>,
    pub percent: f64,
    pub shadow_agree: u64,
    pub shadow_disagree: u64,
    pub ab_treatment_jobs: u64,
    pub ab_control_jobs: u64,
}

pub fn routing(engine: &Engine) -> Routing {
    let m = engine.metrics();
    let cfg = engine.config();
    let (mode, rerouted) = engine.routing();
    Routing {
        mode: mode.as_str().into(),
        rerouted: rerouted.map(|r| r.to_string()),
        guard_verdict: engine.guard().last_verdict(),
        following: engine.guard().lead().map(|l| l.to_string()),
        percent: cfg.routing.percent,
        shadow_agree: Metrics::counter_value(&m.shadow_agreement, "agree", "true"),
        shadow_disagree: Metrics::counter_value(&m.shadow_agreement, "agree", "false"),
        ab_treatment_jobs: Metrics::counter_value(&m.ab_jobs, "arm", "treatment"),
        ab_control_jobs: Metrics::counter_value(&m.ab_jobs, "arm", "control"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn snapshot() -> proto::Snapshot {
        serde_json::from_value(json!({
            "now_ms": 60000,
            "nodes": [
                {"name": "a0", "gpu_model": "A100", "gpus": 2, "cpu_milli": 64000, "mem_mib": 262144},
                {"name": "v0", "gpu_model": "V100", "gpus": 2, "cpu_milli": 64000, "mem_mib": 262144}
            ],
            "running": [
                {"job": {"id": "big", "tenant": "vision", "tasks": 1, "gpus_per_task": 1,
                         "cpu_milli": 4000, "mem_mib": 1024, "wait_ms": 2000}, "run_ms": 1000,
                 "tasks": [{"node": "a0", "gpus": [0]}]},
                {"job": {"id": "half", "tenant": "nlp", "tasks": 1, "gpus_per_task": 1,
                         "gpu_milli": 500, "cpu_milli": 4000, "mem_mib": 1024, "wait_ms": 2000}, "run_ms": 1000,
                 "tasks": [{"node": "v0", "gpus": [1]}]}
            ],
            "pending": [
                {"id": "wide", "tenant": "nlp", "tasks": 1, "gpus_per_task": 2,
                 "cpu_milli": 4000, "mem_mib": 1024, "wait_ms": 5000}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn a_view_groups_nodes_by_model_and_says_whose_each_gpu_is_and_why_jobs_wait() {
        let snap = snapshot();
        let world = World::build(&snap).unwrap();
        let view = view_of(&world, &snap.nodes, "s");
        let models: Vec<&str> = view.groups.iter().map(|g| g.gpu_model.as_str()).collect();
        assert_eq!(models, ["A100", "V100"]);
        let a0 = &view.groups[0].nodes[0];
        assert_eq!(a0.gpus[0].state, "busy");
        assert_eq!(a0.gpus[0].jobs[0].tenant, "vision");
        // The mix is two whole-GPU classes (1x1, 1x2) and one half share: on a0 one whole GPU
        // is free, too few for the 2-GPU class (1/3 of the tasks): 1000/3 of it is fragment,
        // below half of it, so it is drawn free.
        assert_eq!(a0.gpus[1].state, "free");
        assert!((a0.gpus[1].frag_milli - 1000.0 / 3.0).abs() < 1e-9);
        let v0 = &view.groups[1].nodes[0];
        assert_eq!(v0.gpus[1].state, "shared");
        assert_eq!(v0.gpus[1].jobs[0].milli, 500);
        assert_eq!(view.tenants, ["nlp", "vision"]);
        assert_eq!(view.queue.len(), 1);
        let wide = &view.queue[0];
        assert_eq!(
            (wide.job.as_str(), wide.gpus, wide.wait_ms),
            ("wide", 2, 5000)
        );
        assert!(
            !wide.kind.is_empty() && !wide.message.is_empty(),
            "{wide:?}"
        );
        let p = current_point(&view);
        assert_eq!(p.alloc, 1500.0 / 4000.0);
    }

    fn point(unix_ms: u64) -> Point {
        Point {
            unix_ms,
            now_ms: unix_ms,
            alloc: 0.5,
            frag: 0.0,
        }
    }

    #[test]
    fn a_series_keeps_one_point_per_spacing_and_the_past_hour() {
        let d = Dashboard::default();
        let times = |s: Vec<Point>| s.iter().map(|p| p.unix_ms).collect::<Vec<_>>();
        assert_eq!(times(d.series("s", point(0))), [0]);
        assert_eq!(times(d.series("s", point(1_000))), [0, 1_000]);
        // The last is closer than the spacing to the one before it: replaced.
        assert_eq!(times(d.series("s", point(4_999))), [0, 4_999]);
        assert_eq!(times(d.series("s", point(5_000))), [0, 5_000]);
        // It is not: kept.
        assert_eq!(times(d.series("s", point(5_001))), [0, 5_000, 5_001]);
        // Two hours of a point a second: the past hour at one point per 5 s, and the last.
        let mut kept = Vec::new();
        for t in (6_000..7_200_000).step_by(1_000) {
            kept = times(d.series("s", point(t)));
        }
        let last = *kept.last().unwrap();
        assert_eq!(last, 7_199_000);
        assert!(
            kept[0] + HISTORY_MS >= last && kept[0] + HISTORY_MS < last + 5_000,
            "{kept:?}"
        );
        assert!(kept.len() <= POINTS_KEPT, "{}", kept.len());
        assert!(
            kept.windows(2)
                .rev()
                .skip(1)
                .all(|w| w[1] - w[0] >= POINT_SPACING_MS)
        );
    }

    #[test]
    fn sources_come_most_recently_answered_first() {
        let d = Dashboard::default();
        let answer = |session: &str| proto::DecideResponse {
            session: session.into(),
            ..Default::default()
        };
        let row = |id: &str| SourceRow {
            id: id.into(),
            label: id.into(),
        };
        d.record(&answer("a"), None);
        std::thread::sleep(std::time::Duration::from_millis(2));
        d.record(&answer(LAST_REQUEST), None);
        std::thread::sleep(std::time::Duration::from_millis(2));
        d.record(&answer("b"), None);
        let order = |d: &Dashboard| {
            d.by_recency(vec![row(LAST_REQUEST), row("a"), row("b"), row("never")])
                .into_iter()
                .map(|s| s.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(order(&d), ["b", LAST_REQUEST, "a", "never"]);
        std::thread::sleep(std::time::Duration::from_millis(2));
        d.record(&answer("a"), None);
        assert_eq!(order(&d), ["a", "b", LAST_REQUEST, "never"]);
    }

    #[test]
    fn training_traces_are_named_from_traces_on() {
        assert_eq!(
            trace_names(
                "../shared/traces/msft-itp-2021/cluster02.csv, \
                 ../shared/traces/msft-itp-2021/cluster07.csv (spread 0.5), traces/itp/cluster10.csv, \
                 /data/mine.csv"
            ),
            "msft-itp-2021/cluster02.csv, msft-itp-2021/cluster07.csv (spread 0.5), \
             itp/cluster10.csv, mine.csv"
        );
    }

    #[test]
    fn arms_count_answers_and_the_stream_keeps_the_newest_first() {
        let d = Dashboard::default();
        let mut rx = d.subscribe();
        for (k, us) in [10, 20, 30].into_iter().enumerate() {
            d.record(
                &proto::DecideResponse {
                    arm: "shadow".into(),
                    decision_us: us,
                    request_id: format!("r{k}"),
                    ..Default::default()
                },
                Some(&proto::DecideResponse {
                    arm: "shadow-model".into(),
                    decision_us: 100,
                    fallbacks: vec![proto::Fallback::default()],
                    ..Default::default()
                }),
            );
        }
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        let arms = d.arms();
        assert_eq!(arms.len(), 2);
        assert_eq!(
            (arms[0].requests, arms[0].p50_us, arms[0].p95_us),
            (3, 20, 30)
        );
        assert_eq!(arms[1].fallbacks, 3);
        let rows = d.decisions(2);
        assert_eq!(rows[0].request_id, "r2");
        assert_eq!(rows.len(), 2);
        d.reloaded(false, "no such model");
        assert!(rx.has_changed().unwrap());
    }
}
