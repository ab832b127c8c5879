//! A pool of Docker engines, local and remote: their configuration, connecting to each,
//! placing sandboxes by free capacity, noticing an engine that stops answering, and
//! copying the images built here to the engines that lack them.

mod connect;
mod copy;
mod pool;
mod spec;
mod tls;

pub use connect::connect_engine;
pub(crate) use copy::copy_image;
pub use pool::{EnginePool, EngineStatus, Placement, ReviveHook};
pub use spec::EngineSpec;
