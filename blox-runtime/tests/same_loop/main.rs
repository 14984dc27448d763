//! The same round loop in simulation and on the gRPC runtime: traces run
//! on a live scheduler with in-process workers, on real time, and through
//! the simulator, then compared job by job and decision by decision. Its
//! own test binary, and its tests one at a time ([`ONE_AT_A_TIME`]), so
//! that no other test shares the cores while one keeps time.

#[path = "../suite/common/mod.rs"]
mod common;
/// Jobs of whole seconds on FIFO and LAS, preemptions, `blox whatif`.
mod las;
/// Jobs that take seconds to start, protected by the loop.
mod startup;

/// The tests here keep time: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
