//! The user's folder as a sandbox's workspace: which folders may never be one, the
//! control files kept read-only inside the sandbox, and the repositories found below it.

mod guard;
mod refuse;
mod repos;

pub(crate) use guard::WorkspaceGuard;
pub use guard::{GIT_CONTROL_PATHS, ROOT_CONTROL_PATHS};
pub use refuse::{refuse_dangerous_workspace, Protected, WorkspaceRefused};
pub use repos::{nested_repositories, RepoListing, MAX_REPO_WALK_DEPTH, MAX_REPO_WALK_ENTRIES};
