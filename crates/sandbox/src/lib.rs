//! Docker sandboxes through bollard: one container per episode, a persistent shell in
//! it, byte-exact file operations, local images without any registry, and clean-up of
//! every container, network and volume a run creates.

pub mod beneath;
mod build;
mod confined;
mod container;
mod copy_out;
mod docker;
mod egress;
mod engines;
mod error;
mod exec;
mod files;
mod image;
mod mount;
mod network;
mod output;
mod port;
mod prune;
mod reference;
mod shell;
mod standin;
mod stdio;
mod volume;
mod workspace;

pub use build::{
    build_task_image, build_task_image_with, dockerfile_from_images, BuildEnv, BuilderChoice, CA_BUNDLE_PATH,
};
pub use confined::{
    confined_path, pack_confined, read_confined, walk as walk_confined, NodeMeta, OutsideLinks, TreeError, TreeLimits,
    TreeNode, TreeOptions,
};
pub use container::{
    cleanup_registered, ContainerConfig, ContainerProcess, Sandbox, LABEL_EPISODE, LABEL_OWNER, LABEL_RUN,
};
pub use copy_out::{unpack_hostile, CopiedOut};
pub use docker::{connect, Engine};
pub use egress::{parse_allow, Egress, TAG as EGRESS_TAG};
pub use engines::{connect_engine, EnginePool, EngineSpec, EngineStatus, Placement, ReviveHook};
pub use error::SandboxError;
pub use exec::{exec_capture, exec_streaming, ExecOutput, StreamedExit};
pub use files::{resolve_path, FileData, FileKind, MAX_FILE_BYTES};
pub use image::{
    build_base_image, docker_name_part, image_exists, resolve_image, resolve_image_with, BaseImageOptions, ImageMap,
    BASE_IMAGE,
};
pub use mount::Mount;
pub use network::{remove_run_networks, Network};
pub use output::{sanitize, OutputCollector};
pub use port::{PublishedPort, PUBLISH_ADDRESS};
pub use prune::{
    cleanup_run, count_running, owner_label, prune, remove_own_settled, remove_run, remove_run_settled, PruneScope,
    Removed,
};
pub use reference::ImageRef;
pub use shell::{shell_quote, CommandResult, Shell};
pub use standin::{build_standins, standin_for, standins, Standin, TRIXIE_BASE_IMAGE};
pub use stdio::{ExecReader, ExecStdio, ExecWriter, StderrTail};
pub use volume::Volume;
pub use workspace::{
    nested_repositories, refuse_dangerous_workspace, Protected, RepoListing, WorkspaceRefused, GIT_CONTROL_PATHS,
    MAX_REPO_WALK_DEPTH, MAX_REPO_WALK_ENTRIES, ROOT_CONTROL_PATHS,
};
