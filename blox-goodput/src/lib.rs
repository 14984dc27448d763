//! Pollux's job-side model (Pollux, OSDI'21, §3 and §4.1), shared by the
//! scheduler (`blox-policies`), the simulator (`blox-sim`) and, later, the client
//! library linked into real training jobs.
//!
//! - [`model`]: statistical efficiency from the gradient noise scale (Eq. 7), the
//!   throughput model (Eq. 8–11) with gradient accumulation, goodput, and the
//!   best batch size for an allocation.
//! - [`fit`]: fitting θ_sys to observed step times (RMSLE, bounded quasi-Newton).
//! - [`agent`]: the PolluxAgent — profile of observed configurations, refits,
//!   batch-size choice, and the metrics it reports to the scheduler.
//! - [`profile`]: the Pollux artifact's measured per-application profiles
//!   (step times by placement, training curves by batch size), the ground truth
//!   of the simulator and of oracle baselines.
//! - [`typed`]: the same per GPU type (Sia, SOSP'23): one profile per
//!   (model, type), shared training curves, per-model calibration.
//!
//! Pure `f64` arithmetic; no dependency beyond a CSV reader.

pub mod agent;
pub mod fit;
pub mod model;
pub mod profile;
pub mod typed;

pub use agent::{typed_fit, AgentReport, PolluxAgent, TypedKeys};
pub use fit::{fit_throughput, Observation};
pub use model::{AppLimits, BatchConfig, GoodputModel, GradStats, ThroughputParams};
pub use profile::{
    canonical_placement, profiles_beside, AppProfile, Pipeline, ProfileCache, ProfileError,
};
pub use typed::{TypedCache, TypedProfiles};
