//! The learner: PPO over a masked categorical of candidate scores.
//!
//! Owns the pure RL arithmetic (`gae`, `input_baseline`, `masked`), the burn model that scores candidates
//! (`model`), the clipped PPO loss (`ppo`) and the TensorBoard event files training writes
//! (`tensorboard`). Depends on `lachesis-env` only for the observation schema; knows nothing
//! of the simulator's internals. `harness` is the comparison harness (every policy, learned
//! or not, on identical units, with paired statistics and a report).

pub mod gae;
pub mod harness;
pub mod input_baseline;
pub mod manifest;
pub mod masked;
pub mod model;
pub mod policy;
pub mod ppo;
pub mod tensorboard;
pub mod train;

pub use gae::gae;
pub use input_baseline::{InputAdvantages, input_advantages};
pub use manifest::{Manifest, ModelError};
pub use masked::{MASKED_LOGIT, MaskedCategorical};
pub use model::{ObsBatch, Scorer, ScorerConfig};
pub use policy::{Deciding, LearnedPolicy, ScoreCandidates};
pub use ppo::{Minibatch, PpoLoss, PpoLossConfig, ppo_loss};
pub use tensorboard::{ScalarEvent, SummaryWriter, TbError, read_events};
