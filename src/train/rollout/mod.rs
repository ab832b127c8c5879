//! Rollouts: the policy as a model backend for the agent loop, the in-process sampler,
//! and running groups of rollouts in containers.

pub mod chat;
pub mod collect;
pub mod policy;
pub mod sampler;

pub use collect::{Rollout, RolloutPlan, RolloutRunner, RolloutStatus};
pub use policy::{PolicyBackend, PolicySampling, Recording, Segment};
pub use sampler::{GenerateRequest, Generated, Sampler};
