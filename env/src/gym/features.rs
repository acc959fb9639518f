//! The observation: one feature row per candidate action plus global features, in a fixed
//! layout (`FEATURE_SCHEMA_VERSION`) shared by the environment and the decision service.
//!
//! Every feature is finite and clamped to `[-FEATURE_BOUND, FEATURE_BOUND]`; times are
//! log-scaled (`ln(1 + minutes)`), counts `ln(1 + n)`, fractions as they are. Nothing here
//! reads a job's true duration: only its spec (with the user's estimate) and runtime state.
//!
//! Version 2 added `preempts_log` and `victim_gpu_frac` (preemption candidates).
//! Version 3 added the duration view (`predicted_remaining_log_min`, `shortness_rank`,
//! `predictor_samples_log`: the user's estimate, else the online predictor learned from jobs
//! seen to finish) and made `queue_position` a log of the submit-order rank, since candidates
//! now also come from the shortest predicted jobs beyond the head of the queue.
//! Version 4 added Tiresias' view of a job (`las_queue`, `idle_log_min`, `promoted`): its
//! discretized attained-GPU-service queue, how long it has waited since it last ran, and
//! whether that wait has passed `promote_knob` times its attained run time, which sends it
//! back to the first queue. Without them a model could not tell a starved preempted job from
//! a merely well-served one, and over long runs it starved the former (docs/training.md).
//! Version 5 added what reveals the regime (issue 24): the Gittins view of a job
//! (`gittins_log`, `gittins_rank`, `finish_within_hour`, and for a preemption
//! `victim_index_log_ratio`: its index against its victims'), over the run times of jobs seen
//! to finish; and globally their quantiles, whether the index rises or falls with service
//! (`index_trend`: increasing hazard, FIFO/SJF's world, or decreasing, LAS's), and the
//! cluster's recent contention. With them one model can tell when preemption pays.
//! Version 6 added what a scheduler knows of GPU heterogeneity (issue 26): the job's speed on
//! the candidate's GPUs (`speed_log`) and against its fastest allowed model in the cluster
//! (`rate_vs_best`), whether those come from the throughput table (`rates_known`: a typed job,
//! rates visible) or from the GPU models' catalog speeds, the candidate's size against the
//! job's request (`size_ratio`: an elastic job started smaller) and `by_model` (proposed on
//! one GPU model by the per-model proposer).
//! Version 7 added `is_resize`: the candidate grows or shrinks a running elastic job (its
//! `size_ratio` is then the new size over the current one); `is_share`: it starts a job on a
//! GPU a running job holds (its speeds are then the shared rate's), and `partner_rate`: that
//! running job's shared rate over its rate alone (0 when rates are hidden).

use crate::units::SimTime;

/// Bumped whenever a feature is added, removed, reordered or rescaled.
pub const FEATURE_SCHEMA_VERSION: u32 = 7;

/// Rows in an observation: candidate actions, padded, the last one always "wait".
pub const MAX_CANDIDATES: usize = 64;

/// The action index of "wait" (apply nothing more now; let time advance).
pub const WAIT_ACTION: usize = MAX_CANDIDATES - 1;

/// Every feature lies in `[-FEATURE_BOUND, FEATURE_BOUND]`.
pub const FEATURE_BOUND: f32 = 10.0;

/// Names of the per-candidate features, in row order.
pub const CANDIDATE_FEATURES: [&str; 41] = [
    "is_wait",                     // 1 for the wait row, 0 otherwise
    "job_gpus_log",                // ln(1 + GPUs of the whole gang)
    "job_gpu_share",               // share of each GPU a task takes (milli / 1000)
    "job_tasks_log",               // ln(1 + tasks)
    "job_cpu_per_task_log",        // ln(1 + cores per task)
    "job_cluster_fraction",        // gang's milli-GPU / cluster's milli-GPU
    "wait_log_min",                // ln(1 + minutes since submit)
    "estimate_log_min",            // ln(1 + estimated minutes), 0 without an estimate
    "has_estimate",                // 1 when the trace has the user's estimate
    "attained_log_min",            // ln(1 + minutes run before (preempted jobs))
    "preemptions_log",             // ln(1 + times preempted)
    "priority_signed_log",         // sign(p) ln(1 + |p|)
    "queue_position_log",          // ln(1 + rank among pending jobs in submit order)
    "nodes_used_log",              // ln(1 + distinct nodes of the placement)
    "cross_node",                  // 1 when the gang spans more nodes than it needs
    "node_gpu_free_after",         // mean free GPU fraction of the used nodes after placing
    "node_gpu_free_min_after",     // least free GPU fraction among them after placing
    "node_cpu_free_after",         // mean free CPU fraction of the used nodes after placing
    "frag_delta_signed_log",       // sign ln(1 + |Δ fragmented GPUs|) on the used nodes
    "by_best_fit",                 // proposed by best-fit
    "by_worst_fit",                // proposed by worst-fit
    "by_fgd_or_other",             // proposed by fgd or most-allocated
    "preempts_log",                // ln(1 + jobs the candidate preempts), 0 for a plain placement
    "victim_gpu_frac",             // GPUs of the jobs it preempts / cluster GPUs
    "predicted_remaining_log_min", // ln(1 + minutes left: estimate or prediction - attained)
    "shortness_rank",              // rank by predicted remaining time among pending / pending
    "las_queue",                   // Tiresias queue by attained GPU service, 0 when promoted
    "idle_log_min",                // ln(1 + minutes since its last run ended, else since submit)
    "promoted",                    // 1 when idle >= promote_knob x attained run time (starved)
    "gittins_log",                 // ln(Gittins index per GPU, per hour), 0 before any sample
    "gittins_rank",                // rank by that index among pending (0 = highest) / pending
    "finish_within_hour",          // P(run time <= attained + 1 h | > attained), learned
    "victim_index_log_ratio",      // ln(its index / its victims' highest), 0 without victims
    "speed_log",                   // ln(speed on these GPUs vs the reference GPU), 0 unknown
    "rate_vs_best",                // speed here / speed on its fastest allowed model (0-1)
    "rates_known",                 // 1 when the speeds are the table's (typed, rates visible)
    "size_ratio",                  // GPUs of this placement / GPUs the job asks for
    "by_model",                    // proposed on one GPU model by the per-model proposer
    "is_resize",                   // 1 when it resizes a running elastic job
    "is_share",                    // 1 when it shares a GPU with a running job
    "partner_rate",                // for a share: the running job's rate shared / alone
];

/// Names of the global features, in order.
pub const GLOBAL_FEATURES: [&str; 17] = [
    "time_of_day_sin",       // sin(2 pi seconds-of-day / 86400) of sim time
    "time_of_day_cos",       // cos of the same
    "queue_len_log",         // ln(1 + pending jobs)
    "running_log",           // ln(1 + running jobs)
    "gpu_alloc_fraction",    // allocated milli-GPU / capacity
    "cpu_alloc_fraction",    // allocated milli-CPU / capacity
    "frag_fraction",         // fragmented GPU capacity (online task mix) / capacity
    "pending_gpu_demand",    // ln(1 + pending gangs' GPUs / cluster GPUs)
    "placed_now_log",        // ln(1 + jobs placed at this instant so far)
    "oldest_wait_log_min",   // ln(1 + minutes the oldest pending job has waited)
    "elapsed_log_min",       // ln(1 + minutes since the episode's first submit)
    "predictor_samples_log", // ln(1 + finished jobs the duration predictor has learned from)
    "run_q10_log_min",       // ln(1 + minutes): 10th percentile of finished jobs' run times
    "run_q50_log_min",       // the median
    "run_q90_log_min",       // the 90th percentile
    "index_trend",           // ln(G(median) / G(0)) of all run times: < 0 LAS-like, > 0 FIFO-like
    "contention_log",        // ln(1 + pending GPUs / cluster GPUs), averaged over the last hour
];

pub const CANDIDATE_WIDTH: usize = CANDIDATE_FEATURES.len();
pub const GLOBAL_WIDTH: usize = GLOBAL_FEATURES.len();

/// What is known of one (job, placement) candidate, in natural units.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CandidateStats {
    pub gpus_total: u64,
    pub gpu_share_milli: u32,
    pub tasks: u32,
    pub cpu_milli_per_task: u64,
    pub gpu_milli_total: u64,
    pub waited: SimTime,
    pub estimate: Option<SimTime>,
    pub attained_ms: u64,
    pub preemptions: u32,
    pub priority: i32,
    pub queue_position: usize,
    pub nodes_used: usize,
    pub cross_node: bool,
    pub gpu_free_after_mean: f64,
    pub gpu_free_after_min: f64,
    pub cpu_free_after_mean: f64,
    /// Change of fragmented capacity on the used nodes, milli-GPU.
    pub frag_delta_milli: f64,
    /// Bit i set when proposer family i proposed it (0 best-fit, 1 worst-fit, 2 others).
    pub proposed_by: u8,
    /// Running jobs the candidate preempts (0 for a plain placement).
    pub victims: usize,
    /// Their GPUs, whole gangs.
    pub victim_gpus: u64,
    /// Predicted remaining run time: the estimate (or the online prediction) minus attained.
    pub predicted_remaining: SimTime,
    /// Rank by predicted remaining time among the pending jobs (0 = shortest).
    pub shortness_rank: usize,
    /// Pending jobs (for `shortness_rank`).
    pub pending: usize,
    /// Its Tiresias queue (attained GPU service; 0 when promoted).
    pub las_queue: usize,
    /// Time since its last run ended (since submission if it never ran).
    pub idle: SimTime,
    /// Starved by Tiresias' promotion rule, hence back in queue 0.
    pub promoted: bool,
    /// Its Gittins index per GPU, per hour (0 before any job has finished).
    pub gittins: f64,
    /// Rank by that index among the pending jobs (0 = highest).
    pub gittins_rank: usize,
    /// The learned chance it finishes within the next hour of running.
    pub finish_within_hour: f64,
    /// Its index over the highest of its victims' (0 without victims).
    pub victim_index_ratio: f64,
    /// Its speed on the candidate's GPUs against the reference GPU (the table's, or the
    /// catalog's for an untyped job or with rates hidden; 0 when unknown).
    pub speed: f64,
    /// That speed over its speed on the fastest GPU model it may use in the cluster.
    pub rate_vs_best: f64,
    /// The speeds are the throughput table's (a typed job, rates visible).
    pub rates_known: bool,
    /// GPUs of the placement over the GPUs the job asks for (below 1: an elastic job started
    /// smaller).
    pub size_ratio: f64,
    /// The GPU model the per-model proposer placed it on (`None`: another proposer's).
    pub model: Option<crate::units::GpuModelId>,
    /// It resizes a running elastic job.
    pub resize: bool,
    /// It starts the job on a GPU a running job holds.
    pub share: bool,
    /// For a share: the running job's rate shared over its rate alone (0: hidden or none).
    pub partner_rate: f64,
}

/// The cluster and queue at a decision point, in natural units.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GlobalStats {
    pub now: SimTime,
    pub pending: usize,
    pub running: usize,
    pub alloc_gpu_milli: u64,
    pub alloc_cpu_milli: u64,
    pub frag_milli: f64,
    pub pending_gpus: u64,
    pub placed_now: u32,
    pub oldest_wait: SimTime,
    pub elapsed: SimTime,
    pub predictor_samples: u64,
    /// Quantiles (10%, 50%, 90%) of finished jobs' run times (0 before any).
    pub run_quantiles: [SimTime; 3],
    /// ln(G(median) / G(0)) over all finished jobs' run times (0 before any).
    pub index_trend: f64,
    /// ln(1 + pending GPUs / cluster GPUs), time-averaged over about the last hour.
    pub contention: f64,
}

/// Turns stats into feature rows; sized by the cluster and the number of jobs considered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Featurizer {
    pub total_gpu_milli: u64,
    pub total_gpus: u64,
    pub total_cpu_milli: u64,
    /// Pending jobs considered per decision (scales `queue_position`).
    pub jobs_considered: usize,
}

fn log_min(t: SimTime) -> f32 {
    if t.ms() == 0 {
        // ln_1p(0) is exactly +0: the common case (never run, no estimate) without libm.
        return 0.0;
    }
    (t.ms() as f64 / 60_000.0).ln_1p() as f32
}

fn log_n(n: f64) -> f32 {
    n.max(0.0).ln_1p() as f32
}

/// `log_n` of a count: small counts (most of them: tasks, GPUs, nodes, victims, queue
/// positions) from a table of `log_n`'s own values, the same bits without a libm call.
fn log_count(n: u64) -> f32 {
    static SMALL: std::sync::LazyLock<[f32; 256]> =
        std::sync::LazyLock::new(|| std::array::from_fn(|i| log_n(i as f64)));
    match usize::try_from(n) {
        Ok(i) if i < 256 => SMALL[i],
        _ => log_n(n as f64),
    }
}

fn signed_log(x: f64) -> f32 {
    (x.signum() * x.abs().ln_1p()) as f32
}

/// `ln(x)` of a positive quantity, 0 for 0 (nothing known) or less.
fn positive_log(x: f64) -> f32 {
    if x > 0.0 { x.ln() as f32 } else { 0.0 }
}

fn ratio(a: f64, b: f64) -> f32 {
    if b > 0.0 { (a / b) as f32 } else { 0.0 }
}

fn clamp<const N: usize>(mut row: [f32; N]) -> [f32; N] {
    for x in &mut row {
        // NaN (never expected) reads as 0; infinities saturate at the bound.
        *x = if x.is_nan() {
            0.0
        } else {
            x.clamp(-FEATURE_BOUND, FEATURE_BOUND)
        };
    }
    row
}

impl Featurizer {
    /// The wait row: `is_wait` set, everything else 0.
    pub fn wait_row(&self) -> [f32; CANDIDATE_WIDTH] {
        let mut row = [0.0; CANDIDATE_WIDTH];
        row[0] = 1.0;
        row
    }

    pub fn candidate_row(&self, c: &CandidateStats) -> [f32; CANDIDATE_WIDTH] {
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        clamp([
            0.0,
            log_count(c.gpus_total),
            c.gpu_share_milli as f32 / 1000.0,
            log_count(c.tasks as u64),
            log_n(c.cpu_milli_per_task as f64 / 1000.0),
            ratio(c.gpu_milli_total as f64, self.total_gpu_milli as f64),
            log_min(c.waited),
            c.estimate.map_or(0.0, log_min),
            flag(c.estimate.is_some()),
            log_min(SimTime(c.attained_ms)),
            log_count(c.preemptions as u64),
            signed_log(c.priority as f64),
            log_count(c.queue_position as u64),
            log_count(c.nodes_used as u64),
            flag(c.cross_node),
            c.gpu_free_after_mean as f32,
            c.gpu_free_after_min as f32,
            c.cpu_free_after_mean as f32,
            signed_log(c.frag_delta_milli / 1000.0),
            flag(c.proposed_by & 1 != 0),
            flag(c.proposed_by & 2 != 0),
            flag(c.proposed_by & 4 != 0),
            log_count(c.victims as u64),
            ratio(c.victim_gpus as f64, self.total_gpus as f64),
            log_min(c.predicted_remaining),
            ratio(c.shortness_rank as f64, c.pending as f64),
            c.las_queue as f32,
            log_min(c.idle),
            flag(c.promoted),
            positive_log(c.gittins),
            ratio(c.gittins_rank as f64, c.pending as f64),
            c.finish_within_hour as f32,
            positive_log(c.victim_index_ratio),
            positive_log(c.speed),
            c.rate_vs_best as f32,
            flag(c.rates_known),
            c.size_ratio as f32,
            flag(c.proposed_by & 8 != 0),
            flag(c.resize),
            flag(c.share),
            c.partner_rate as f32,
        ])
    }

    pub fn global_row(&self, g: &GlobalStats) -> [f32; GLOBAL_WIDTH] {
        let day = (g.now.ms() % 86_400_000) as f64 / 86_400_000.0 * std::f64::consts::TAU;
        clamp([
            day.sin() as f32,
            day.cos() as f32,
            log_count(g.pending as u64),
            log_count(g.running as u64),
            ratio(g.alloc_gpu_milli as f64, self.total_gpu_milli as f64),
            ratio(g.alloc_cpu_milli as f64, self.total_cpu_milli as f64),
            ratio(g.frag_milli, self.total_gpu_milli as f64),
            log_n(ratio(g.pending_gpus as f64, self.total_gpus as f64) as f64),
            log_count(g.placed_now as u64),
            log_min(g.oldest_wait),
            log_min(g.elapsed),
            log_count(g.predictor_samples),
            log_min(g.run_quantiles[0]),
            log_min(g.run_quantiles[1]),
            log_min(g.run_quantiles[2]),
            g.index_trend as f32,
            g.contention as f32,
        ])
    }
}

/// What the agent sees: `MAX_CANDIDATES` rows of `CANDIDATE_WIDTH` features (row-major,
/// padding rows 0), the global features, and which rows are legal actions.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub candidates: Vec<f32>,
    pub global: Vec<f32>,
    /// `mask[a]`: action `a` is legal. Never all false: `mask[WAIT_ACTION]` is true unless the
    /// environment is work-conserving, nothing is running and a candidate is legal.
    pub mask: Vec<bool>,
}

impl Observation {
    /// Only the wait row legal (and set), padding elsewhere, with these global features.
    pub fn waiting_only(featurizer: &Featurizer, global: &[f32; GLOBAL_WIDTH]) -> Self {
        let mut obs = Observation {
            candidates: vec![0.0; MAX_CANDIDATES * CANDIDATE_WIDTH],
            global: global.to_vec(),
            mask: vec![false; MAX_CANDIDATES],
        };
        obs.mask[WAIT_ACTION] = true;
        obs.candidates[WAIT_ACTION * CANDIDATE_WIDTH..(WAIT_ACTION + 1) * CANDIDATE_WIDTH]
            .copy_from_slice(&featurizer.wait_row());
        obs
    }
    /// The row of action `a`.
    pub fn row(&self, a: usize) -> &[f32] {
        &self.candidates[a * CANDIDATE_WIDTH..(a + 1) * CANDIDATE_WIDTH]
    }
    /// Legal actions, ascending.
    pub fn legal_actions(&self) -> impl Iterator<Item = usize> + '_ {
        self.mask
            .iter()
            .enumerate()
            .filter(|(_, m)| **m)
            .map(|(a, _)| a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table and the zero shortcut give `log_n`'s and `ln_1p`'s own bits, around the
    /// table's end and far past it.
    #[test]
    fn counts_and_zero_times_log_as_computed() {
        for n in (0..600u64).chain([1 << 20, u64::from(u32::MAX), u64::MAX]) {
            assert_eq!(
                log_count(n).to_bits(),
                log_n(n as f64).to_bits(),
                "log_count({n})"
            );
        }
        assert_eq!(
            log_min(SimTime(0)).to_bits(),
            ((0.0f64 / 60_000.0).ln_1p() as f32).to_bits()
        );
        assert_eq!(
            log_min(SimTime(90_000)).to_bits(),
            (1.5f64.ln_1p() as f32).to_bits()
        );
    }

    #[test]
    fn rows_are_scaled_and_bounded() {
        let f = Featurizer {
            total_gpu_milli: 32_000,
            total_gpus: 32,
            total_cpu_milli: 256_000,
            jobs_considered: 16,
        };
        // A 2x4-GPU gang waiting 59 min (ln 60), one hour estimate, priority -3.
        let c = CandidateStats {
            gpus_total: 8,
            gpu_share_milli: 1000,
            tasks: 2,
            gpu_milli_total: 8000,
            waited: SimTime::from_secs(59 * 60),
            estimate: Some(SimTime::from_secs(59 * 60)),
            priority: -3,
            queue_position: 4,
            frag_delta_milli: f64::INFINITY,
            victims: 2,
            victim_gpus: 8,
            ..CandidateStats::default()
        };
        let row = f.candidate_row(&c);
        assert!((row[1] - 9f32.ln()).abs() < 1e-6);
        assert_eq!(row[5], 0.25);
        assert!((row[6] - 60f32.ln()).abs() < 1e-5);
        assert_eq!(row[8], 1.0);
        assert!((row[11] + 4f32.ln()).abs() < 1e-6);
        assert!((row[12] - 5f32.ln()).abs() < 1e-6);
        // Preempting two jobs of 8 GPUs in all.
        assert!((row[22] - 3f32.ln()).abs() < 1e-6);
        assert_eq!(row[23], 0.25);
        assert_eq!(&row[26..], &[0.0; 15]);
        // Twice the reference speed, at half its best, from the table, started at half size,
        // by the per-model proposer.
        let typed = f.candidate_row(&CandidateStats {
            speed: 2.0,
            rate_vs_best: 0.5,
            rates_known: true,
            size_ratio: 0.5,
            proposed_by: 8,
            ..c
        });
        assert!((typed[33] - 2f32.ln()).abs() < 1e-6);
        assert_eq!(&typed[34..], &[0.5, 1.0, 0.5, 1.0, 0.0, 0.0, 0.0]);
        assert_eq!(typed[21], 0.0, "by_model is not by_fgd_or_other");
        let gittins = f.candidate_row(&CandidateStats {
            gittins: 2.0,
            gittins_rank: 4,
            pending: 16,
            finish_within_hour: 0.3,
            victim_index_ratio: 0.5,
            ..c
        });
        assert!((gittins[29] - 2f32.ln()).abs() < 1e-6);
        assert_eq!((gittins[30], gittins[31]), (0.25, 0.3));
        assert!((gittins[32] + 2f32.ln()).abs() < 1e-6);
        let promoted = f.candidate_row(&CandidateStats {
            las_queue: 2,
            idle: SimTime::from_secs(59 * 60),
            promoted: true,
            ..c
        });
        assert_eq!(promoted[26], 2.0);
        assert!((promoted[27] - 60f32.ln()).abs() < 1e-5);
        assert_eq!(promoted[28], 1.0);
        // Infinite input: clamped to the bound; all finite.
        assert_eq!(row[18], FEATURE_BOUND);
        assert!(
            row.iter()
                .all(|x| x.is_finite() && x.abs() <= FEATURE_BOUND)
        );
        let g = f.global_row(&GlobalStats {
            now: SimTime::from_secs(6 * 3600),
            alloc_gpu_milli: 16_000,
            ..GlobalStats::default()
        });
        assert!((g[0] - 1.0).abs() < 1e-6 && g[1].abs() < 1e-6);
        assert_eq!(g[4], 0.5);
        assert_eq!(f.wait_row()[0], 1.0);
    }
}
