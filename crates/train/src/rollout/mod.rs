//! Rollouts: the policy as a model backend for the agent loop, its samplers (in-process
//! candle, mistral.rs, llama.cpp), and running groups of rollouts in containers.

pub mod chat;
pub mod collect;
pub mod engine;
pub mod llamacpp_engine;
pub mod mistralrs_engine;
pub mod policy;
pub mod sampler;
pub mod scripted;
pub mod spread;

pub use collect::{Rollout, RolloutPlan, RolloutRunner, RolloutStatus};
pub use engine::RolloutSampler;
pub use llamacpp_engine::LlamaCppEngine;
pub use mistralrs_engine::MistralrsEngine;
pub use policy::{PolicyBackend, PolicySampling, Recording, Segment};
pub use sampler::{GenerateRequest, Generated, Sampler};
pub use scripted::{oracle_replies, ScriptedSampler};
pub use spread::run_spread;
