//! The decision path, transport-free: validate -> choose the arm -> run the policy off the
//! async runtime under a deadline -> shield -> fall back along the heuristic chain -> answer
//! with the decision, who decided, why it fell back and why each job left pending waits.
//!
//! gRPC (`server`) and the tests call the same `Engine`; it knows nothing of tonic but its
//! status codes.

use crate::config::{RoutingMode, ServeConfig, SplitKey};
use crate::dashboard::Dashboard;
use crate::decision_log::{DecisionLog, LogRecord};
use crate::guard::GuardState;
use crate::inventory::NodeInventory;
use crate::metrics::Metrics;
use crate::model::{FallbackReason, Fnv, LoadedModel, ModelState};
use crate::proto;
use crate::reasons::pending_reasons;
use crate::session::{Session, Sessions};
use crate::shield;
use crate::world::{DeltaError, SnapshotError, World};
use lachesis_env::policy::{Decision, Policy, PolicyError, PolicyOptions, build_policy_with};
use lachesis_env::throughput::ThroughputTable;
use lachesis_env::units::JobId;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tonic::{Code, Status};

/// Builds the model arm's policy instead of the loaded model (tests: a policy that misbehaves
/// on purpose, to show the shield and the chain at work).
pub type PolicyFactory = Arc<dyn Fn() -> Box<dyn Policy> + Send + Sync>;

/// A decision that passed the shield, and who made it.
#[derive(Debug, Clone)]
struct Answer {
    decision: Decision,
    decided_by: String,
    fallbacks: Vec<proto::Fallback>,
}

/// A request its source could not give a world for: the session's world to give back (a bad
/// delta leaves it unchanged; `None` when it broke), and the status to answer.
type Refusal = Box<(Option<World>, Status)>;

/// What a request decides on, before its blocking work.
enum Source {
    /// A request's snapshot, to build (logged as is).
    Build(Arc<proto::Snapshot>),
    /// A world already built from the request's snapshot (a session's opening).
    Ready(World, Arc<proto::Snapshot>),
    /// A session's world and the delta that moves it on; `base` opened the session.
    Delta {
        world: World,
        delta: proto::SnapshotDelta,
        base: Arc<proto::Snapshot>,
    },
}

impl Source {
    /// The world (on the blocking pool: a delta is CPU work) and, for the decision log, the
    /// snapshot it stands for. A bad delta gives back the session's world unchanged; a broken
    /// one gives none back (the caller must send a full snapshot).
    fn materialize(
        self,
        logging: bool,
        table: Option<&Arc<ThroughputTable>>,
    ) -> Result<(World, Option<Arc<proto::Snapshot>>), Refusal> {
        match self {
            Source::Build(snapshot) => match World::build_typed(&snapshot, table) {
                Ok(world) => Ok((world, Some(snapshot))),
                Err(e) => Err(Box::new((None, invalid(e)))),
            },
            Source::Ready(world, snapshot) => Ok((world, Some(snapshot))),
            Source::Delta {
                mut world,
                delta,
                base,
            } => match world.apply_delta(&delta) {
                Ok(()) => {
                    if world.wants_compaction() {
                        world.compact();
                    }
                    let log =
                        logging.then(|| Arc::new(world.export(&base.nodes, base.cluster.clone())));
                    Ok((world, log))
                }
                Err(DeltaError::Invalid(e)) => Err(Box::new((Some(world), invalid(e)))),
                Err(e @ DeltaError::Broken(_)) => {
                    Err(Box::new((None, Status::internal(e.to_string()))))
                }
            },
        }
    }
}

/// What the chain decides on when the model's task keeps the world past its deadline.
enum Spare {
    /// The request's snapshot, built again.
    Rebuild(Arc<proto::Snapshot>),
    /// A copy made before the model ran (a session's delta has no snapshot to rebuild).
    Copy(Box<World>),
    /// Nothing: that request fails (`UNAVAILABLE`); shadow mode's model arm, whose answer is
    /// only compared.
    None,
}

/// The model arm's failure: a reason to fall back, and the world if it survived.
struct ModelFailure {
    reason: FallbackReason,
    detail: String,
    world: Option<Box<World>>,
}

/// The service's core: configuration, the model in force, metrics and the decision log.
pub struct Engine {
    cfg: ServeConfig,
    model: RwLock<ModelState>,
    metrics: Arc<Metrics>,
    log: Option<DecisionLog>,
    model_override: Option<PolicyFactory>,
    requests: AtomicU64,
    /// Model computations allowed at once (one per core): a computation holds its slot until
    /// it really ends, even past its deadline.
    model_slots: Arc<tokio::sync::Semaphore>,
    inventory: NodeInventory,
    sessions: Sessions,
    dashboard: Dashboard,
    guard: GuardState,
    /// The throughput table (`throughputs`), loaded once; snapshots' workload types name it.
    table: Option<Arc<ThroughputTable>>,
    /// How the chain's heuristics are built (with the table).
    options: PolicyOptions,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("routing", &self.cfg.routing.mode)
            .field("model", &self.model_state().status())
            .finish_non_exhaustive()
    }
}

fn fallback(from: &str, reason: FallbackReason, detail: impl Into<String>) -> proto::Fallback {
    proto::Fallback {
        from: from.to_string(),
        reason: reason.as_str().into(),
        detail: detail.into(),
    }
}

fn invalid(e: SnapshotError) -> Status {
    Status::invalid_argument(e.to_string())
}

/// Runs `policy` on `world` and shields its answer.
fn run_policy(
    world: &World,
    policy: &mut dyn Policy,
) -> Result<Decision, (FallbackReason, String)> {
    let decision = {
        let ctx = world.context();
        policy.decide(&ctx).map_err(|e| match e {
            PolicyError::InvalidOutput { .. } => (FallbackReason::Nan, e.to_string()),
            _ => (FallbackReason::Error, e.to_string()),
        })?
    };
    shield::check(world, &decision).map_err(|m| (FallbackReason::Shield, m))?;
    Ok(decision)
}

impl Engine {
    /// An engine with the model `cfg` names loaded now (a failure to load is a state, not an
    /// error: the chain answers and `ModelInfo` says why).
    pub fn new(cfg: ServeConfig, metrics: Arc<Metrics>) -> std::io::Result<Engine> {
        let options = cfg.policy_options().map_err(std::io::Error::other)?;
        let state = ModelState::load(&cfg.model, cfg.max_relative_jct);
        metrics.set_model(state.version(), state.status());
        if let ModelState::Failed { path, detail, .. } = &state {
            tracing::warn!(path = %path.display(), %detail, "model not loaded: the fallback chain answers");
        }
        let slots = cfg.model_slots();
        let cfg_inventory_ttl = cfg.inventory_ttl_ms;
        let cfg_sessions = (cfg.max_sessions, cfg.session_ttl_s);
        let log = match &cfg.decision_log.path {
            Some(_) => Some(DecisionLog::start(&cfg.decision_log, Arc::clone(&metrics))?),
            None => None,
        };
        Ok(Engine {
            cfg,
            model: RwLock::new(state),
            metrics,
            log,
            model_override: None,
            requests: AtomicU64::new(0),
            model_slots: Arc::new(tokio::sync::Semaphore::new(slots)),
            inventory: NodeInventory::new(std::time::Duration::from_millis(cfg_inventory_ttl)),
            sessions: Sessions::new(
                cfg_sessions.0,
                std::time::Duration::from_secs(cfg_sessions.1),
            ),
            dashboard: Dashboard::default(),
            guard: GuardState::default(),
            table: options.throughputs.clone(),
            options,
        })
    }

    /// The throughput table snapshots' workload types are read against, if configured.
    pub fn table(&self) -> Option<&Arc<ThroughputTable>> {
        self.table.as_ref()
    }

    /// Replaces the model arm's policy (tests).
    pub fn with_model_policy(mut self, factory: PolicyFactory) -> Self {
        self.model_override = Some(factory);
        self
    }

    pub fn config(&self) -> &ServeConfig {
        &self.cfg
    }
    /// The node agents' latest reports.
    pub fn inventory(&self) -> &NodeInventory {
        &self.inventory
    }
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
    /// What the operators' dashboard shows.
    pub fn dashboard(&self) -> &Dashboard {
        &self.dashboard
    }
    /// The sessions held.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }
    /// Whether the guard holds routing on the baseline, and its last verdict.
    pub fn guard(&self) -> &GuardState {
        &self.guard
    }

    /// The routing in force: the configured mode, or the baseline while the guard holds it
    /// there (with its reason).
    pub fn routing(&self) -> (RoutingMode, Option<Arc<str>>) {
        match self.guard.rerouted() {
            Some(reason) => (RoutingMode::Baseline, Some(reason)),
            None => (self.cfg.routing.mode, None),
        }
    }

    /// The model arm's name and a maker of fresh instances of its policy, for simulating it
    /// (the guard); `None` when no model answers (none configured, cold or failed).
    pub fn model_arm(&self) -> Option<(String, PolicyFactory)> {
        if let Some(f) = &self.model_override {
            return Some(("model:override".into(), Arc::clone(f)));
        }
        let model = Arc::clone(self.model_state().serving().ok()?);
        let name = model.decider();
        let deciding = self.cfg.deciding;
        let factory: PolicyFactory =
            Arc::new(move || Box::new(model.policy().deciding(deciding)) as Box<dyn Policy>);
        Some((name, factory))
    }
    pub fn model_state(&self) -> ModelState {
        self.model
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Loads `path` (empty: the configured model) and swaps it in if it loads; the old model
    /// keeps serving otherwise. Returns the state in force and a message.
    pub async fn reload(&self, path: &str) -> (bool, String) {
        let path = if path.trim().is_empty() {
            self.cfg.model.clone()
        } else {
            path.to_string()
        };
        let bar = self.cfg.max_relative_jct;
        let load_path = path.clone();
        let loaded = tokio::task::spawn_blocking(move || ModelState::load(&load_path, bar))
            .await
            .unwrap_or_else(|e| ModelState::Failed {
                path: path.clone().into(),
                reason: FallbackReason::LoadError,
                detail: format!("loading panicked: {e}"),
            });
        match loaded {
            ModelState::Failed { detail, .. } => {
                Metrics::count(&self.metrics.model_reloads, "result", "failed");
                tracing::warn!(%path, %detail, "reload failed: the old model stays in force");
                let message = format!("reload failed, the old model stays in force: {detail}");
                self.dashboard.reloaded(false, &message);
                (false, message)
            }
            state => {
                let msg = format!("{} is in force ({})", path, state.status());
                self.metrics.set_model(state.version(), state.status());
                *self
                    .model
                    .write()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = state;
                Metrics::count(&self.metrics.model_reloads, "result", "ok");
                tracing::info!(%path, "model reloaded");
                let msg = if self.guard.clear() {
                    self.metrics.guard_switched.set(0);
                    tracing::info!("reload: the guard's switch to the baseline is lifted");
                    format!("{msg}; the guard's switch to the baseline is lifted")
                } else {
                    msg
                };
                self.dashboard.reloaded(true, &msg);
                (true, msg)
            }
        }
    }

    /// The heuristics, in the order they answer: the one the selector follows (while it
    /// follows one), the baseline, then the fallbacks.
    pub fn chain(&self) -> Vec<String> {
        let lead = self.guard.lead().map(|l| l.to_string());
        let mut chain: Vec<String> = Vec::with_capacity(self.cfg.fallback.len() + 2);
        for name in lead
            .into_iter()
            .chain(std::iter::once(self.cfg.baseline.clone()))
            .chain(self.cfg.fallback.iter().cloned())
        {
            if !chain.contains(&name) {
                chain.push(name);
            }
        }
        chain
    }

    /// Decides along the heuristic chain (blocking). Never fails: when every heuristic
    /// fails, the answer is to start nothing, which is always safe.
    fn run_chain(&self, world: &World, mut fallbacks: Vec<proto::Fallback>) -> Answer {
        for name in self.chain() {
            let started = Instant::now();
            let result = build_policy_with(&name, &self.options)
                .map_err(|e| (FallbackReason::Error, e.to_string()))
                .and_then(|mut p| run_policy(world, p.as_mut()));
            Metrics::observe(
                &self.metrics.policy_duration,
                "kind",
                "heuristic",
                started.elapsed().as_secs_f64(),
            );
            match result {
                Ok(decision) => {
                    return Answer {
                        decision,
                        decided_by: name,
                        fallbacks,
                    };
                }
                Err((reason, detail)) => {
                    Metrics::count(&self.metrics.fallbacks, "reason", reason.as_str());
                    fallbacks.push(fallback(&name, reason, detail));
                }
            }
        }
        Answer {
            decision: Decision::default(),
            decided_by: "none: every policy failed, nothing started".into(),
            fallbacks,
        }
    }

    /// Asks the model arm under the deadline.
    async fn run_model(self: &Arc<Self>, world: World) -> Result<(World, Answer), ModelFailure> {
        let (policy_source, decider): (Result<Arc<LoadedModel>, PolicyFactory>, String) =
            match &self.model_override {
                Some(f) => (Err(Arc::clone(f)), "model:override".to_string()),
                None => match self.model_state().serving() {
                    Ok(m) => (Ok(Arc::clone(m)), m.decider()),
                    Err((reason, detail)) => {
                        return Err(ModelFailure {
                            reason,
                            detail,
                            world: Some(Box::new(world)),
                        });
                    }
                },
            };
        // A slot is waited for within the deadline (concurrent requests queue for the cores);
        // none freeing in time means the slots hold computations past their deadline.
        let deadline = Duration::from_secs_f64(self.cfg.deadline_ms / 1000.0);
        let waiting = Instant::now();
        let slot =
            match tokio::time::timeout(deadline, Arc::clone(&self.model_slots).acquire_owned())
                .await
            {
                Ok(Ok(slot)) => slot,
                _ => {
                    return Err(ModelFailure {
                        reason: FallbackReason::Busy,
                        detail: "no model slot freed within the deadline (they hold computations \
                             past their own)"
                            .into(),
                        world: Some(Box::new(world)),
                    });
                }
            };
        let deadline = deadline.saturating_sub(waiting.elapsed());
        if deadline.is_zero() {
            // No time left (or a zero deadline): the timer would race the task; decide now.
            return Err(ModelFailure {
                reason: FallbackReason::Timeout,
                detail: format!("no time left of the {} ms deadline", self.cfg.deadline_ms),
                world: Some(Box::new(world)),
            });
        }
        let metrics = Arc::clone(&self.metrics);
        let deciding = self.cfg.deciding;
        let task = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let started = Instant::now();
            let result = match policy_source {
                Ok(model) => {
                    let mut policy = model.policy().deciding(deciding);
                    let before = policy.passes();
                    let r = run_policy(&world, &mut policy);
                    metrics
                        .model_passes
                        .inc_by(policy.passes().saturating_sub(before));
                    model.give_back(policy);
                    r
                }
                Err(factory) => run_policy(&world, factory().as_mut()),
            };
            Metrics::observe(
                &metrics.policy_duration,
                "kind",
                "model",
                started.elapsed().as_secs_f64(),
            );
            (Box::new(world), result)
        });
        let outcome = tokio::time::timeout(deadline, task).await;
        let fail = |reason, detail: String, world| {
            Err(ModelFailure {
                reason,
                detail,
                world,
            })
        };
        match outcome {
            Err(_) => fail(
                FallbackReason::Timeout,
                format!("no answer within {} ms", self.cfg.deadline_ms),
                None,
            ),
            Ok(Err(join)) => fail(
                FallbackReason::Error,
                format!("the model's task failed: {join}"),
                None,
            ),
            Ok(Ok((world, Ok(decision)))) => Ok((
                *world,
                Answer {
                    decision,
                    decided_by: decider,
                    fallbacks: Vec::new(),
                },
            )),
            Ok(Ok((world, Err((reason, detail))))) => fail(reason, detail, Some(world)),
        }
    }

    /// The model arm with the chain behind it. When the model's task keeps the world (a
    /// timeout), the chain decides on `spare`.
    async fn model_then_chain(
        self: &Arc<Self>,
        world: World,
        spare: Spare,
    ) -> Result<(World, Answer), Status> {
        match self.run_model(world).await {
            Ok(done) => Ok(done),
            Err(failure) => {
                let from = self
                    .model_state()
                    .serving()
                    .map_or_else(|_| "model".to_string(), |m| m.decider());
                Metrics::count(&self.metrics.fallbacks, "reason", failure.reason.as_str());
                let first = fallback(&from, failure.reason, failure.detail);
                let this = Arc::clone(self);
                let world = failure.world.map(|w| *w);
                blocking(move || {
                    let world = match (world, spare) {
                        (Some(w), _) => w,
                        (None, Spare::Copy(w)) => *w,
                        (None, Spare::Rebuild(snap)) => {
                            World::build_typed(&snap, this.table()).map_err(invalid)?
                        }
                        (None, Spare::None) => {
                            return Err(Status::unavailable(
                                "the model kept the cluster past its deadline and no copy was \
                                 made",
                            ));
                        }
                    };
                    let answer = this.run_chain(&world, vec![first]);
                    Ok((world, answer))
                })
                .await
            }
        }
    }

    /// The heuristic chain (blocking task).
    async fn chain_only(
        self: &Arc<Self>,
        world: World,
        fallbacks: Vec<proto::Fallback>,
    ) -> Result<(World, Answer), Status> {
        let this = Arc::clone(self);
        blocking(move || {
            let answer = this.run_chain(&world, fallbacks);
            Ok((world, answer))
        })
        .await
    }

    /// Decides one request: the whole decision path. Logs it when a decision log is set.
    pub async fn decide(
        self: &Arc<Self>,
        request: proto::DecideRequest,
    ) -> Result<proto::DecideResponse, Status> {
        let (response, shadow, snapshot) = self.decide_inner(request).await?;
        self.dashboard.record(&response, shadow.as_ref());
        self.metrics
            .placements
            .inc_by(response.placements.len() as u64);
        self.metrics
            .preemptions
            .inc_by(response.preemptions.len() as u64);
        if let (Some(log), Some(snapshot)) = (&self.log, snapshot) {
            log.record(LogRecord {
                unix_ms: crate::dashboard::unix_ms(),
                snapshot,
                answer: response.clone(),
                shadow,
            });
        }
        Ok(response)
    }

    /// The world a request decides on: its snapshot's, or its session's moved on by its
    /// delta. With the session's lock (held until the answer is stored) and, when a decision
    /// log is kept, the snapshot to log.
    async fn world_of(
        self: &Arc<Self>,
        request: &mut proto::DecideRequest,
    ) -> Result<
        (
            Source,
            Option<tokio::sync::OwnedMutexGuard<Option<Session>>>,
        ),
        Status,
    > {
        let snapshot = request.snapshot.take().map(Arc::new);
        let delta = request.delta.take();
        if request.session.is_empty() {
            if delta.is_some() {
                return Err(Status::invalid_argument(
                    "delta: a delta needs a session (open one with a full snapshot and `session`)",
                ));
            }
            let snapshot = snapshot.ok_or_else(|| Status::invalid_argument("snapshot: missing"))?;
            // Built in the blocking task that decides.
            return Ok((Source::Build(snapshot), None));
        }
        let id = request.session.clone();
        let refused = |status: Status| {
            Metrics::count(&self.metrics.session_requests, "kind", "refused");
            status
        };
        match (snapshot, delta) {
            (Some(snapshot), None) => {
                // Built before the session is made or taken: a snapshot that fails leaves
                // no empty session behind and the old one as it was.
                let snap = Arc::clone(&snapshot);
                let table = self.table.clone();
                let world =
                    blocking(move || World::build_typed(&snap, table.as_ref()).map_err(invalid))
                        .await?;
                let slot = self.sessions.slot(&id, &self.metrics).map_err(refused)?;
                let mut guard = slot.lock_owned().await;
                *guard = Some(Session {
                    world: None,
                    base: Arc::clone(&snapshot),
                    revision: 0,
                });
                Metrics::count(&self.metrics.session_requests, "kind", "snapshot");
                Ok((Source::Ready(world, snapshot), Some(guard)))
            }
            (None, Some(delta)) => {
                let lost = || {
                    refused(Status::failed_precondition(format!(
                        "session {id:?} is not held here (never opened, expired or evicted): \
                         send a full snapshot on it"
                    )))
                };
                let slot = self.sessions.get(&id, &self.metrics).ok_or_else(lost)?;
                let mut guard = slot.lock_owned().await;
                let session = guard.as_mut().ok_or_else(lost)?;
                if delta.revision != session.revision {
                    return Err(refused(Status::failed_precondition(format!(
                        "delta.revision: session {id:?} is at revision {}, the delta follows \
                         {}: send a full snapshot on it",
                        session.revision, delta.revision
                    ))));
                }
                let world = session.world.take().ok_or_else(|| {
                    refused(Status::failed_precondition(format!(
                        "session {id:?} lost its state when an earlier request failed: send a \
                         full snapshot on it"
                    )))
                })?;
                let base = Arc::clone(&session.base);
                Ok((Source::Delta { world, delta, base }, Some(guard)))
            }
            (None, None) => Err(Status::invalid_argument(
                "snapshot: missing (a session request carries a snapshot or a delta)",
            )),
            (Some(_), Some(_)) => Err(Status::invalid_argument(
                "delta: send a snapshot or a delta, not both",
            )),
        }
    }

    /// The answer, the shadow answer if any, and the snapshot to log (when logging).
    async fn decide_inner(
        self: &Arc<Self>,
        mut request: proto::DecideRequest,
    ) -> Result<
        (
            proto::DecideResponse,
            Option<proto::DecideResponse>,
            Option<Arc<proto::Snapshot>>,
        ),
        Status,
    > {
        let started = Instant::now();
        let (source, mut session) = self.world_of(&mut request).await?;
        let logging = self.log.is_some();
        // A bad delta gives the session its world back unchanged; a failure leaves it none.
        let refused = |session: &mut Option<tokio::sync::OwnedMutexGuard<Option<Session>>>,
                       refusal: Refusal| {
            let (world, status) = *refusal;
            if let Some(state) = session.as_mut().and_then(|g| g.as_mut()) {
                state.world = world;
            }
            status
        };
        let is_delta = matches!(source, Source::Delta { .. });
        let n = self.requests.fetch_add(1, Ordering::Relaxed);
        let request_id = if request.request_id.is_empty() {
            format!("r{n}")
        } else {
            request.request_id
        };
        // What the chain decides on if the model keeps the world past its deadline: the
        // snapshot rebuilt, or for a delta (no snapshot) a copy made now.
        let on_session = session.is_some();
        let spare = |world: &World, snapshot: &Option<Arc<proto::Snapshot>>| match snapshot {
            Some(s) => Spare::Rebuild(Arc::clone(s)),
            None if on_session => Spare::Copy(Box::new(world.clone())),
            None => Spare::None,
        };
        let (mode, rerouted) = self.routing();
        Metrics::count(&self.metrics.arm_requests, "arm", mode.as_str());
        let mut shadow = None;
        let (mut response, world, snapshot) = if mode == RoutingMode::Baseline {
            // The heuristic arm moves the world, decides and answers in one blocking task
            // (one thread hop).
            let this = Arc::clone(self);
            let id = request_id.clone();
            let done = blocking(move || {
                Ok(source
                    .materialize(logging, this.table())
                    .map(|(world, snapshot)| {
                        let answer = this.run_chain(&world, Vec::new());
                        let (response, world) =
                            this.finish(world, answer, mode.as_str(), &id, started);
                        (response, world, snapshot)
                    }))
            })
            .await?;
            done.map_err(|e| refused(&mut session, e))?
        } else {
            let table = self.table.clone();
            let (world, snapshot) =
                blocking(move || Ok(source.materialize(logging, table.as_ref())))
                    .await?
                    .map_err(|e| refused(&mut session, e))?;
            let (world, answer) = if mode == RoutingMode::Model {
                let spare = spare(&world, &snapshot);
                self.model_then_chain(world, spare).await?
            } else if mode == RoutingMode::Shadow {
                let copy = world.clone();
                let (model, base) = tokio::join!(
                    self.model_then_chain(copy, Spare::None),
                    self.chain_only(world, Vec::new())
                );
                let base = base?;
                if let Ok((mworld, manswer)) = model {
                    let agree = manswer.decision == base.1.decision;
                    Metrics::count(
                        &self.metrics.shadow_agreement,
                        "agree",
                        if agree { "true" } else { "false" },
                    );
                    let this = Arc::clone(self);
                    let (id, arm) = (request_id.clone(), "shadow-model".to_string());
                    shadow = Some(
                        blocking(move || Ok(this.finish(mworld, manswer, &arm, &id, started).0))
                            .await?,
                    );
                }
                base
            } else {
                self.ab(world, &request_id).await?
            };
            let this = Arc::clone(self);
            let id = request_id.clone();
            let (response, world) =
                blocking(move || Ok(this.finish(world, answer, mode.as_str(), &id, started)))
                    .await?;
            (response, world, snapshot)
        };
        if let Some(reason) = rerouted {
            response.rerouted = reason.to_string();
        }
        if is_delta {
            Metrics::count(&self.metrics.session_requests, "kind", "delta");
        }
        if let Some(state) = session.as_mut().and_then(|g| g.as_mut()) {
            state.world = world;
            state.revision += 1;
            response.session = request.session;
            response.revision = state.revision;
        } else if let (Some(world), Some(snapshot)) = (world, &snapshot) {
            // Kept for the dashboard instead of dropped here.
            self.dashboard.keep_last(world, Arc::clone(snapshot));
        }
        Ok((response, shadow, snapshot))
    }

    /// A/B: the treatment share of pending jobs (by a stable hash of tenant or job id) is
    /// decided by the model arm, the rest by the baseline, one after the other on the same
    /// snapshot; which arm goes first alternates with the request so neither always has the
    /// first pick of free capacity.
    async fn ab(
        self: &Arc<Self>,
        world: World,
        request_id: &str,
    ) -> Result<(World, Answer), Status> {
        let (percent, key) = (self.cfg.routing.percent, self.cfg.routing.key);
        let (world, original, treatment, control) = blocking(move || {
            let (mut t, mut c) = (Vec::new(), Vec::new());
            for id in world.pending() {
                let k = match key {
                    SplitKey::Tenant => world.tenant(id),
                    SplitKey::Job => &world.job(id).name,
                };
                if in_treatment(k, percent) {
                    t.push(id);
                } else {
                    c.push(id);
                }
            }
            let original = world.clone();
            Ok((world, original, t, c))
        })
        .await?;
        self.metrics
            .ab_jobs
            .get_or_create(&vec![("arm", "treatment".to_string())])
            .inc_by(treatment.len() as u64);
        self.metrics
            .ab_jobs
            .get_or_create(&vec![("arm", "control".to_string())])
            .inc_by(control.len() as u64);
        let model_first = Fnv::hash(request_id.as_bytes()) & 1 == 0;
        let mut world = world;
        let mut merged = Answer {
            decision: Decision::default(),
            decided_by: String::new(),
            fallbacks: Vec::new(),
        };
        let mut deciders = Vec::new();
        let order: [bool; 2] = if model_first {
            [true, false]
        } else {
            [false, true]
        };
        for model_arm in order {
            let jobs = if model_arm { &treatment } else { &control };
            if jobs.is_empty() {
                continue;
            }
            let keep: std::collections::HashSet<JobId> = jobs.iter().copied().collect();
            world.retain_pending(|j| keep.contains(&j));
            let (w, answer) = if model_arm {
                let backup = Spare::Copy(Box::new(world.clone()));
                self.model_then_chain(world, backup).await?
            } else {
                let this = Arc::clone(self);
                blocking(move || {
                    let a = this.run_chain(&world, Vec::new());
                    Ok((world, a))
                })
                .await?
            };
            world = w;
            world
                .apply(&answer.decision)
                .map_err(|e| Status::internal(format!("applying a shielded decision: {e}")))?;
            deciders.push(answer.decided_by.clone());
            merged
                .decision
                .preemptions
                .extend(answer.decision.preemptions);
            merged
                .decision
                .placements
                .extend(answer.decision.placements);
            merged.decision.resizes.extend(answer.decision.resizes);
            merged.decision.shares.extend(answer.decision.shares);
            merged.fallbacks.extend(answer.fallbacks);
        }
        // Back to the snapshot's own state, so `finish` applies the merged decision once; the
        // merge is shielded as a whole (an arm may have preempted what the other placed).
        let this = Arc::clone(self);
        merged.decided_by = deciders.join("+");
        blocking(move || {
            let world = original;
            match shield::check(&world, &merged.decision) {
                Ok(()) => Ok((world, merged)),
                Err(detail) => {
                    Metrics::count(&this.metrics.fallbacks, "reason", "shield");
                    let first = fallback(&merged.decided_by, FallbackReason::Shield, detail);
                    let mut fallbacks = merged.fallbacks;
                    fallbacks.push(first);
                    let answer = this.run_chain(&world, fallbacks);
                    Ok((world, answer))
                }
            }
        })
        .await
    }

    /// Applies the answer to its world, explains every job left pending, and builds the reply.
    fn finish(
        &self,
        mut world: World,
        answer: Answer,
        arm: &str,
        request_id: &str,
        started: Instant,
    ) -> (proto::DecideResponse, Option<World>) {
        // The starvation bound sits below whoever decided (`bound.rs`).
        world.set_starvation_bound(self.cfg.starvation_bound);
        let mut answer = answer;
        let (decision, effect, held) =
            crate::bound::apply_held(&mut world, std::mem::take(&mut answer.decision));
        answer.decision = decision;
        if effect != crate::bound::BoundEffect::default() {
            tracing::debug!(
                vetoed = effect.vetoed,
                started = effect.started,
                preempted = effect.preempted,
                "starvation bound"
            );
        }
        let placements = answer
            .decision
            .placements
            .iter()
            .map(|p| world.placement_to_proto(p))
            .collect();
        let preemptions = answer
            .decision
            .preemptions
            .iter()
            .map(|v| world.job(*v).name.clone())
            .collect();
        let shares = (answer.decision.shares.iter())
            .map(|p| world.placement_to_proto(p))
            .collect();
        let resizes = (answer.decision.resizes.iter())
            .map(|p| world.placement_to_proto(p))
            .collect();
        let (pending, world) = match world.apply(&answer.decision) {
            Ok(()) => {
                let mut pending = pending_reasons(&world, &answer.decision);
                crate::bound::reasons(&world, &held, &mut pending);
                (pending, Some(world))
            }
            Err(e) => {
                tracing::error!(error = %e, "a shielded decision did not apply");
                (Vec::new(), None)
            }
        };
        let response = proto::DecideResponse {
            placements,
            preemptions,
            shares,
            resizes,
            pending,
            decided_by: answer.decided_by,
            arm: arm.to_string(),
            fallbacks: answer.fallbacks,
            decision_us: started.elapsed().as_micros() as u64,
            request_id: request_id.to_string(),
            ..Default::default()
        };
        (response, world)
    }

    /// Why one job waits, by the same path `Decide` takes (not logged).
    pub async fn explain(
        self: &Arc<Self>,
        request: proto::ExplainRequest,
    ) -> Result<proto::ExplainResponse, Status> {
        let job = request.job.clone();
        let (response, _, _) = self
            .decide_inner(proto::DecideRequest {
                snapshot: request.snapshot,
                ..Default::default()
            })
            .await?;
        if let Some(p) = (response.placements.iter())
            .chain(&response.shares)
            .find(|p| p.job == job)
        {
            return Ok(proto::ExplainResponse {
                job,
                placed: true,
                placement: Some(p.clone()),
                reason: None,
                decided_by: response.decided_by,
            });
        }
        match response.pending.iter().find(|r| r.job == job) {
            Some(r) => Ok(proto::ExplainResponse {
                job,
                placed: false,
                placement: None,
                reason: Some(r.clone()),
                decided_by: response.decided_by,
            }),
            None => Err(Status::invalid_argument(format!(
                "job: {job:?} is not a pending job of the snapshot"
            ))),
        }
    }

    /// Feasibility and a packing score of candidate nodes for one job.
    pub async fn score(
        self: &Arc<Self>,
        request: proto::ScoreRequest,
    ) -> Result<proto::ScoreResponse, Status> {
        let table = self.table.clone();
        blocking(move || crate::score::score(&request, table.as_ref())).await
    }

    /// What `ModelInfo` answers.
    pub fn info(&self) -> proto::ModelInfoResponse {
        let state = self.model_state();
        let (routing, rerouted) = self.routing();
        let mut info = proto::ModelInfoResponse {
            status: state.status().into(),
            routing: routing.as_str().into(),
            baseline: self.cfg.baseline.clone(),
            fallback_chain: self.chain(),
            path: self.cfg.model.clone(),
            deciding: self.cfg.deciding.as_str().into(),
            ..Default::default()
        };
        match &state {
            ModelState::Serving(m) | ModelState::Cold(m, _) => {
                info.path = m.path.display().to_string();
                info.version = m.version.clone();
                info.feature_schema = m.manifest.feature_schema_version;
                info.trained_on = m
                    .manifest
                    .training
                    .data
                    .iter()
                    .map(|d| d.trace.clone())
                    .collect::<Vec<_>>()
                    .join(", ");
                info.git_revision = m.manifest.training.git_revision.clone();
                info.validation_relative_jct = m.relative_jct;
                info.loaded_at_unix_s = m.loaded_at_unix_s;
                if let ModelState::Cold(_, why) = &state {
                    info.detail = format!("cold start, the baseline answers: {why}");
                }
            }
            ModelState::None => info.detail = "no model configured: the baseline answers".into(),
            ModelState::Failed { path, detail, .. } => {
                info.path = path.display().to_string();
                info.detail = format!("not loaded, the baseline answers: {detail}");
            }
        }
        if let Some(reason) = rerouted {
            let guard = match self.guard.lead() {
                Some(lead) => format!("routing follows {lead} (the guard's selector): {reason}"),
                None => format!("routing switched to the baseline by the guard: {reason}"),
            };
            info.detail = if info.detail.is_empty() {
                guard
            } else {
                format!("{}; {guard}", info.detail)
            };
        }
        info
    }

    /// Whether the service can answer (it always can once built: the chain is the floor).
    pub fn ready(&self) -> (bool, String) {
        let state = self.model_state();
        (
            true,
            format!(
                "ready: model {} ({}), routing {}",
                state.version(),
                state.status(),
                self.routing().0.as_str()
            ),
        )
    }

    /// Flushes the decision log (shutdown).
    pub fn flush(&self) {
        if let Some(log) = &self.log {
            log.flush();
        }
    }
}

/// Whether `key` falls in the treatment share (`percent` of 100), by a stable hash.
pub fn in_treatment(key: &str, percent: f64) -> bool {
    let bucket = (Fnv::hash(key.as_bytes()) % 10_000) as f64;
    bucket < percent * 100.0
}

/// Runs `f` on the blocking pool; a panic inside becomes `INTERNAL`, never a crash.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(Status::new(
            Code::Internal,
            format!("decision task failed: {e}"),
        ))
    })
}
