//! CPU kernels for the trainer's hot path, in their own crate so that they are compiled
//! with optimisations even in the dev profile (the main crate is not, to keep its
//! builds fast); each is tested against candle's composed ops in the main crate.

use std::sync::atomic::{AtomicBool, Ordering};

pub mod frozen;
pub mod fused;

/// Set: the CPU takes the code path every other device takes (no fused kernels, no
/// direct gemm call), so that what a GPU run allocates can be measured on the CPU.
static GENERIC_ONLY: AtomicBool = AtomicBool::new(false);

/// Makes every kernel of this crate take the device-generic path (`true`) or the CPU's own (`false`), process-wide.
pub fn set_generic_only(on: bool) {
    GENERIC_ONLY.store(on, Ordering::Relaxed);
}

/// Whether the CPU kernels are switched off (see [`set_generic_only`]).
pub fn generic_only() -> bool {
    GENERIC_ONLY.load(Ordering::Relaxed)
}
