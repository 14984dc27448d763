//! # blox-harness
//!
//! What measures and shakes blox rather than what runs it: the simulator's
//! and the runtime's benchmarks (`blox bench …`; figures in
//! `docs/PERFORMANCE.md`) and the soak (`blox bench soak`: a scheduler,
//! workers and clients as real processes on loopback, with faults injected;
//! figures in `docs/RELIABILITY.md`), and the bodies of the fuzz targets
//! (`fuzzing`). Kept out of the product crates, which do not depend on it.

pub mod fuzzing;
pub mod runtime_bench;
pub mod sim_bench;
pub mod soak;
