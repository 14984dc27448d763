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
//! - [`scheduler`]: the central scheduler over gRPC ([`proto`]): the round
//!   loop on wall-clock rounds, with [`scheduler::ClusterBackend`] driving
//!   worker managers; submissions persisted in an embedded job table
//!   ([`store`]).
//! - [`worker`]: the worker manager of one node: GPU discovery (NVML, or
//!   logical GPUs), job processes ([`process`]), leases, metric forwarding,
//!   exit reports, heartbeats.
//! - `toy`: the example job's attacker modes (Unix), which `blox-harness`'s
//!   soak counts.
//! - [`net`]: the users' and workers' tokens and TLS; [`ctl`]: blocking helpers for tools
//!   (`blox submit`, `blox status`, `blox cancel`).

pub mod auth;
pub mod codec;
pub mod conn;
pub mod ctl;
pub mod local;
pub mod net;
pub mod process;
mod record;
pub mod safe_fs;
pub mod scheduler;
pub mod store;
#[cfg(unix)]
pub mod toy;
pub mod validate;
pub mod worker;

pub use local::{LocalBackend, LocalConfig};

/// Generated protocol types and gRPC stubs (`proto/blox.proto`).
pub mod proto {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("blox.v1");
}
