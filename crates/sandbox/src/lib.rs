//! Docker sandboxes through bollard: one container per episode, a persistent shell in
//! it, byte-exact file operations, local images without any registry, and clean-up of
//! every container a run creates.

mod container;
mod docker;
mod error;
mod exec;
mod files;
mod image;
mod network;
mod output;
mod prune;
mod shell;

pub use container::{
    cleanup_registered, ContainerConfig, ContainerProcess, Sandbox, LABEL_EPISODE, LABEL_OWNER, LABEL_RUN,
};
pub use docker::{connect, Engine};
pub use error::SandboxError;
pub use exec::{exec_capture, exec_streaming, ExecOutput, StreamedExit};
pub use files::{resolve_path, FileData, FileKind, MAX_FILE_BYTES};
pub use image::{
    build_base_image, build_task_image, build_task_image_with, docker_name_part, image_exists, resolve_image,
    BaseImageOptions, BuildEnv, ImageMap, BASE_IMAGE, CA_BUNDLE_PATH,
};
pub use network::{remove_run_networks, Network};
pub use output::{sanitize, OutputCollector};
pub use prune::{owner_label, prune, remove_own_settled, remove_run, remove_run_settled, PruneScope};
pub use shell::{shell_quote, CommandResult, Shell};
