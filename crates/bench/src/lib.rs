//! `agent bench`: Terminal-Bench runs (TB1 and TB2/Harbor layouts) in containers with
//! our agent, the reference solution or nothing, scored the way the leaderboard does.
//!
//! A run is tasks × attempts trials ([`trial`]); each trial starts its environment
//! ([`env`], images built once per task by [`images`]), runs an agent ([`agents`]),
//! copies the tests in and runs them ([`verify`], parsed by [`pytest`]), and records
//! itself ([`results`]); [`stats`] and [`report`] summarise the run.

pub mod agents;
pub mod atif;
pub mod compose;
pub mod env;
pub mod error;
pub mod generate;
pub mod hostenv;
pub mod images;
pub mod judge;
pub mod pytest;
pub mod report;
pub mod results;
pub mod run;
pub mod solution;
pub mod stats;
pub mod synth;
pub mod task;
pub mod trial;
pub mod validate;
pub mod verify;

pub use agents::{AgentKind, ModelSource};
pub use env::EnvSettings;
pub use error::{BenchError, EnvError, ImageError, TaskError, VerifyError};
pub use hostenv::HostEnv;
pub use images::{standin_table, EngineImages, ImageCache};
pub use results::{FailureMode, ResultsFile, StepRecord, TrialRecord};
pub use run::{run_bench, schedule, BenchOptions, RunSchedule};
pub use task::{discover, BenchTask, Layout, TaskEntry};
pub use trial::{run_trial_with, TrialContext};
pub use verify::Verifier;
pub use verify::{VerifiedBy, VerifyMode};
