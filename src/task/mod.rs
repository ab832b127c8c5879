//! Terminal-Bench tasks: loading the TB1 layout (`task.yaml`, `Dockerfile` or
//! `docker-compose.yaml`, `tests/`, `solution.sh`).

mod tb1;

pub use tb1::{Task, TaskError};
