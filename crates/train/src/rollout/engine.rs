//! What samples a rollout's replies, behind one face: the in-process candle sampler or
//! mistral.rs. The policy backend and the training loop talk to either the same way.

use async_trait::async_trait;

use super::sampler::{GenerateRequest, Sampler};
use crate::error::{TensorContext, TrainError};
use crate::model::Qwen3;

/// A token-in/token-out sampler of the policy.
#[async_trait]
pub trait RolloutSampler: Send + Sync {
    /// Queues a request; the answer arrives on its `reply` channel.
    fn submit(&self, request: GenerateRequest) -> Result<(), TrainError>;

    /// Tells the sampler a rollout is over (its cached prefix may go).
    fn close(&self, session: u64);

    /// Makes later requests sample from `policy` as it is now (called after updates).
    async fn load_policy(&self, policy: &Qwen3) -> Result<(), TrainError>;

    /// True when the sampler's numbers are not the trainer's (another engine): its
    /// log-probs then feed the importance weights of the update.
    fn off_policy(&self) -> bool;
}

#[async_trait]
impl RolloutSampler for Sampler {
    fn submit(&self, request: GenerateRequest) -> Result<(), TrainError> {
        Sampler::submit(self, request)
    }

    fn close(&self, session: u64) {
        Sampler::close(self, session);
    }

    async fn load_policy(&self, policy: &Qwen3) -> Result<(), TrainError> {
        // A view of the trainer's weights and live adapters: nothing is copied, and
        // setting it only drops the KV caches computed under the old weights.
        self.set_policy(policy.shared().ctx("viewing the policy")?);
        Ok(())
    }

    fn off_policy(&self) -> bool {
        false
    }
}
