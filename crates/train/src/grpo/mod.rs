//! GRPO's arithmetic: group advantages, dynamic sampling, the clipped loss, and the
//! running pass rates that choose which tasks a step draws.

pub mod advantage;
pub mod loss;
pub mod task_stats;

pub use advantage::{group_advantages, is_degenerate, AdvantageKind};
pub use loss::{ppo_loss, truncated_importance, LossInputs, LossSums, PpoSettings};
pub use task_stats::TaskStats;
