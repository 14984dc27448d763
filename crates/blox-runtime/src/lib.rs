//! # blox-runtime (skeleton)
//!
//! The real-cluster backend of the blox round loop. It will implement the same
//! mechanism traits the simulator implements — [`blox_core::ClusterManager`],
//! [`blox_core::MetricCollector`], [`blox_core::JobSource`],
//! [`blox_core::PreemptionMechanism`], [`blox_core::LaunchMechanism`] and
//! [`blox_core::RoundClock`] — over gRPC to worker managers, so that
//! `blox_core::RoundLoop` drives real jobs with no change to any policy.
//!
//! Nothing here runs yet; this crate only fixes that contract at compile time.

/// Compile-time check that a type can drive the round loop as a real backend.
pub fn assert_backend<B: blox_core::Backend>() {}
