//! CPU kernels for the trainer's hot path, in their own crate so that they are compiled
//! with optimisations even in the dev profile (the main crate is not, to keep its
//! builds fast); each is tested against candle's composed ops in the main crate.

pub mod frozen;
pub mod fused;
