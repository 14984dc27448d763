//! # blox-sim
//!
//! The simulation backend of the blox round loop: a virtual clock, deterministic
//! for a seed; workloads from real traces (Philly, Pollux) and generators (the Blox
//! recipe); per-job progress; result tables and a summary. The loop itself is
//! `blox_core::RoundLoop` — the same code that drives a real cluster.

pub mod backend;
pub mod forecast;
mod log_writer;
pub mod memory;
/// `[workload] host_profiles` files (Synergy), read with the workload.
pub use workload::host_profile;
pub mod report;
mod rounds;
pub mod run;
pub mod sweep;
pub mod synth;
pub mod whatif;
pub mod workload;

pub use backend::{SimBackend, SimConfig};
pub use report::{JobRow, ReportError, RoundRow, SimResult, StopReason, Summary};
pub use run::{load_config, ConfigRequest, SimError, Simulation};
pub use workload::{SimJob, WorkModel, WorkloadError};
