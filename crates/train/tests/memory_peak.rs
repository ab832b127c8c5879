//! The memory plan against what a LoRA step allocates on the code path a GPU takes: the
//! CPU kernels switched off (`agent_train_kernels::set_generic_only`), every allocation
//! counted by this binary's global allocator, the 100M shape with 4,096 scored tokens.
//! Its own test binary: the allocator and the switch are process-wide.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use agent_train::gpu_check::memory::{plan_vs_probe, PeakProbe};
use agent_train::throughput::PerfShape;

/// The system allocator, counting the bytes in use and their highest value.
struct Counting;

static LIVE: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);

fn grew(bytes: usize) {
    let now = LIVE.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(bytes: usize) {
    LIVE.fetch_sub(bytes as u64, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees (and the caller's obligations) carry over; the counters are
// atomics and never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System.alloc` shares.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator (hence from `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`; the caller guarantees `new_size`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            grew(new_size);
            shrank(layout.size());
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

struct Counters;

impl PeakProbe for Counters {
    fn live(&self) -> u64 {
        LIVE.load(Ordering::Relaxed)
    }

    fn reset_peak(&self) {
        PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    fn peak(&self) -> u64 {
        PEAK.load(Ordering::Relaxed)
    }
}

/// One LoRA step of the 100M shape on a 4,097-token sequence (4,096 scored), f32, with
/// the GPU's ops: the measured peak within 15% of the plan's trainer memory.
// Ignored: five minutes on 2 cores, and it fails today: measured 2.02 GiB against a plan
// of 1.15 GiB (2026-12-07); what the plan misses is not yet found. Run it with
// `cargo test --workspace --test memory_peak -- --ignored --nocapture`.
#[test]
#[ignore]
fn the_plan_matches_a_step_on_the_gpu_code_path() {
    agent_train_kernels::set_generic_only(true);
    let check = plan_vs_probe(PerfShape::M100, 4097, &Counters);
    agent_train_kernels::set_generic_only(false);
    let check = check.unwrap_or_else(|e| panic!("the step failed: {e}"));
    println!("{check:?}");
    assert!(
        (check.ratio - 1.0).abs() <= 0.15,
        "measured {:.3} GiB against the plan's {:.3} GiB",
        check.measured_gib,
        check.planned_gib
    );
}
