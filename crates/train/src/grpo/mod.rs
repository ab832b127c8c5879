//! GRPO's arithmetic: group advantages, dynamic sampling and the clipped loss.

pub mod advantage;
pub mod loss;

pub use advantage::{group_advantages, is_degenerate, AdvantageKind};
pub use loss::{ppo_loss, truncated_importance, LossInputs, LossSums, PpoSettings};
