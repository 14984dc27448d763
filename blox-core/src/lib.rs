//! # blox-core
//!
//! The vocabulary every blox crate speaks: shared job and cluster state, one trait
//! per scheduler abstraction (Blox, EuroSys'24, §3), the round loop that chains them,
//! the registry of named modules, and what a config's sections hold once read
//! (reading the TOML file is `blox-config`'s). No I/O, no async, no heavy
//! dependencies: a policy crate that depends only on `blox-core` builds in seconds.

pub mod cluster;
pub mod config;
pub mod extension;
pub mod health;
pub mod ids;
pub mod job;
pub mod job_state;
pub mod metric;
pub mod metric_store;
pub mod module;
pub mod registry;
pub mod round;
pub mod runner;
pub mod stats;
pub mod topology;
pub mod variability;
pub mod wait;
pub mod walk;

pub use cluster::{
    ClusterError, ClusterState, Gpu, GpuShare, HostHold, HostShare, Node, NodeSpec, GPU_MILLI,
};
pub use config::{
    CheckpointRule, ConfigError, ModuleConfig, NonNegative, Positive, RunConfig, Section, Value,
};
pub use extension::{Checkpointing, Profile, Protection, ProtectionInput, Recovery};
pub use ids::{GpuId, JobId, NodeId};
pub use job::{checkpoint_at, Adaptivity, Elasticity, Job, JobSpec, JobStatus};
pub use job_state::{JobMetrics, JobState, MetricStore};
pub use module::{accepts_resizable, describe as describe_elasticity};
pub use module::{
    AdmissionDecision, AdmissionPolicy, Assignment, Backend, BackendError, ClusterEvent,
    ClusterManager, Demand, Fork, JobSource, LaunchMechanism, MetricCollector, Placement,
    PlacementPolicy, PreemptionMechanism, RoundClock, RoundInfo, Schedule, SchedulingPolicy,
};
pub use round::{
    error_chain, LoopBuilder, LoopError, OnInvalidDecision, PlacementCheck, Policies, PolicyForks,
    PolicyNames, PolicySelector, RoundLoop, RoundReport, RoundTimings, SelectorError, StartupRules,
};

pub use wait::WaitReason;
pub use walk::{priority_walk, FreeGpus, WalkParams};

/// `docs/WRITING-POLICIES.md`: the contract of every extension point, with
/// an example of each (compiled and run as this crate's doc tests).
#[doc = include_str!("../../docs/WRITING-POLICIES.md")]
pub mod writing_policies {}

/// Re-exported so policy crates can register without depending on `inventory`.
pub use inventory;
