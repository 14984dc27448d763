//! Fault injection and `blox bench soak`: a scheduler, workers and many
//! clients as real processes on loopback, with worker kills, scheduler
//! restarts and network cuts ([`proxy::CutProxy`]) during the run; the
//! journal of toy-job launches ([`journal`]) shows overlapping runs and
//! checkpoint regressions; attacker jobs (`blox_runtime::toy::attack`) try to steal a
//! credential and forge reports. Figures: docs/RELIABILITY.md.

mod faults;
mod isolation;
pub mod journal;
pub mod ports;
mod procs;
pub mod proxy;
mod report;
mod run;
mod start;
pub mod teams;

pub use report::{AttackReport, SoakConfig, SoakReport};
pub use run::run;

/// A soak that could not run (a binary missing, a port, a process).
#[derive(Debug, thiserror::Error)]
#[error("soak: {0}")]
pub struct SoakError(pub String);

fn err(e: impl std::fmt::Display) -> SoakError {
    SoakError(e.to_string())
}
