//! `lachesis bench infer`: the cost of one decision of the learned policy, the `Scorer`'s
//! forward over one decision point's candidates (inference, no autodiff) and the masked argmax
//! read back, on one core. Prints the median and p99 and the ratio to the 1 ms target.

use anyhow::{Result, ensure};
use burn::module::Module;
use burn::tensor::{Bool, Device, Tensor, TensorData};
use lachesis_agent::{Scorer, ScorerConfig};
use lachesis_env::gym::{CANDIDATE_WIDTH, GLOBAL_WIDTH};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::time::Instant;

/// The target: one decision in under a millisecond on one core.
const TARGET_US: f64 = 1000.0;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Candidates scored per decision.
    #[arg(long, default_value_t = 256)]
    candidates: usize,
    /// Timed decisions; the median and p99 are printed.
    #[arg(long, default_value_t = 2000)]
    repeats: usize,
    /// Untimed decisions first.
    #[arg(long, default_value_t = 100)]
    warmup: usize,
    /// Width of the Scorer's hidden layers.
    #[arg(long, default_value_t = 64)]
    hidden: usize,
    /// Seed of the feature values and of the weights' init.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// One decision point's input as the environment hands it over: flat rows, globals, mask.
struct Input {
    candidates: Vec<f32>,
    global: Vec<f32>,
    mask: Vec<bool>,
}

impl Input {
    /// Features uniform in [-1, 1]; every fourth candidate masked, the last one (wait) legal.
    fn random(n: usize, seed: u64) -> Input {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut draw =
            |k: usize| -> Vec<f32> { (0..k).map(|_| rng.random_range(-1.0f32..=1.0f32)).collect() };
        Input {
            candidates: draw(n * CANDIDATE_WIDTH),
            global: draw(GLOBAL_WIDTH),
            mask: (0..n).map(|i| i % 4 != 3 || i + 1 == n).collect(),
        }
    }
}

/// The whole decision: tensors from the input, forward, masked argmax, read back.
fn decide(model: &Scorer, input: &Input, device: &Device) -> Vec<i64> {
    let n = input.mask.len();
    let candidates = Tensor::<3>::from_data(
        TensorData::new(input.candidates.clone(), [1, n, CANDIDATE_WIDTH]),
        device,
    );
    let global = Tensor::<2>::from_data(
        TensorData::new(input.global.clone(), [1, GLOBAL_WIDTH]),
        device,
    );
    let mask = Tensor::<2, Bool>::from_data(TensorData::new(input.mask.clone(), [1, n]), device);
    let out = model.forward(candidates, global, mask);
    out.logits.argmax(1).into_data().iter::<i64>().collect()
}

/// Threads of this process (Linux), to show the run stayed on one.
fn process_threads() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

/// The nearest-rank `p` quantile (0-1) of `sorted`, which must not be empty.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub fn run(args: &Args) -> Result<()> {
    ensure!(
        args.candidates > 0 && args.repeats > 0,
        "--candidates and --repeats must be at least 1"
    );
    let device = Device::flex();
    device.seed(args.seed);
    let model = ScorerConfig::new()
        .with_hidden(args.hidden)
        .init(&device)
        .valid();
    let input = Input::random(args.candidates, args.seed);
    let chosen = decide(&model, &input, &device);
    let legal = chosen
        .first()
        .and_then(|a| usize::try_from(*a).ok())
        .is_some_and(|a| input.mask.get(a).copied().unwrap_or(false));
    ensure!(legal, "the argmax chose a masked action: {chosen:?}");
    for _ in 0..args.warmup {
        decide(&model, &input, &device);
    }
    let mut us = Vec::with_capacity(args.repeats);
    for _ in 0..args.repeats {
        let started = Instant::now();
        std::hint::black_box(decide(&model, std::hint::black_box(&input), &device));
        us.push(started.elapsed().as_secs_f64() * 1e6);
    }
    us.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&us, 0.5), percentile(&us, 0.99));
    outln!(
        "Scorer (hidden {}) on burn flex, {} candidates x {} features, {} legal; \
         {} decisions after {} warm-up; process threads: {}",
        args.hidden,
        args.candidates,
        CANDIDATE_WIDTH,
        input.mask.iter().filter(|m| **m).count(),
        args.repeats,
        args.warmup,
        process_threads().map_or_else(|| "unknown".to_string(), |t| t.to_string())
    );
    outln!(
        "decision: median {p50:.1} us, p99 {p99:.1} us, best {:.1} us; median is {:.3}x the 1 ms \
         target ({:.0} decisions/s)",
        us[0],
        p50 / TARGET_US,
        1e6 / p50
    );
    Ok(())
}
