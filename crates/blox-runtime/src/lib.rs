//! # blox-runtime
//!
//! Real backends of the blox round loop. They implement the same mechanism
//! traits the simulator implements — [`blox_core::ClusterManager`],
//! [`blox_core::MetricCollector`], [`blox_core::JobSource`],
//! [`blox_core::PreemptionMechanism`], [`blox_core::LaunchMechanism`] and
//! [`blox_core::RoundClock`] — so `blox_core::RoundLoop` drives real jobs with
//! no change to any policy.
//!
//! - [`local`]: job processes on this machine's GPUs (or logical GPUs), leases
//!   through the job's control directory, checkpoint and resume, crash retries.
//!
//! Not yet here (issue 5): the gRPC scheduler and worker managers for several
//! nodes, NVML discovery, the persistent job table, authentication.

pub mod local;

pub use local::{LocalBackend, LocalConfig};

/// Compile-time check that a type can drive the round loop as a real backend.
pub fn assert_backend<B: blox_core::Backend>() {}

#[cfg(test)]
mod tests {
    #[test]
    fn the_local_backend_drives_the_loop() {
        super::assert_backend::<super::LocalBackend>();
    }
}
