//! The episode loop and what it needs: tool execution, the system prompt, the todo
//! list and the trajectory record.

mod builder;
mod executor;
mod foreign;
mod history;
mod prompt;
mod repeats;
mod session;
mod stream_loop;
mod stuck;
mod todo;
mod trajectory;

pub use builder::{
    build_episode, ContainerSource, Episode, EpisodeError, EpisodeOutcome, EpisodeRequest, ImageContainer, PromptParts,
    RunningEpisode,
};
pub use executor::{ToolExecutor, ToolOutcome};
pub use foreign::ShownLetters;
pub use history::adapt_history;
pub(crate) use prompt::today;
pub use prompt::{render_system_prompt, swap_tool_section, system_prompt};
pub use repeats::{CallRepeats, TurnRepeats};
pub use session::{spawn_session, EpisodeSummary, SessionConfig, SessionHandle};
pub use stream_loop::{LoopCut, StreamLoopDetector};
pub use stuck::{loop_warning, LoopDetector, LoopVerdict};
pub use todo::{TodoItem, TodoList};
pub use trajectory::{EpisodeEndRecord, EpisodeStart, ObservationRecord, TrajectoryWriter, TurnRecord};
