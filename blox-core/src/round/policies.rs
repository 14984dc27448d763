//! The three policies a loop composes, and the module that may swap them
//! between rounds (policy synthesis).

use super::SelectorError;
use crate::cluster::ClusterState;
use crate::job::Job;
use crate::job_state::JobState;
use crate::module::{AdmissionPolicy, PlacementPolicy, RoundInfo, SchedulingPolicy};

/// The three policies of a composed scheduler, with the names they were built from.
pub struct Policies {
    pub admission: Box<dyn AdmissionPolicy>,
    pub scheduling: Box<dyn SchedulingPolicy>,
    pub placement: Box<dyn PlacementPolicy>,
    /// Registered names, for messages and reports.
    pub names: PolicyNames,
}

/// The names of a loop's three policies (as registered, or as a config
/// labels them), for messages and reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyNames {
    pub admission: String,
    pub scheduling: String,
    pub placement: String,
}

impl PolicyNames {
    pub fn new(
        admission: impl Into<String>,
        scheduling: impl Into<String>,
        placement: impl Into<String>,
    ) -> Self {
        PolicyNames {
            admission: admission.into(),
            scheduling: scheduling.into(),
            placement: placement.into(),
        }
    }
}

impl std::fmt::Display for PolicyNames {
    /// `admission/scheduling/placement`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.admission, self.scheduling, self.placement
        )
    }
}

/// Policy synthesis (Blox, EuroSys'24, §5.2): a module that may swap the
/// admission, scheduling and placement policies between rounds, from what the
/// scheduler knows now. The loop asks it after new submissions arrive and
/// before admission (step 4½).
pub trait PolicySelector: Send {
    /// Its registered name, for messages.
    fn name(&self) -> &str;

    /// New policies to use from this round on, or `None` to keep `active`.
    /// `waiting` are the submitted, not yet admitted jobs.
    fn select(
        &mut self,
        round: &RoundInfo,
        jobs: &JobState,
        cluster: &ClusterState,
        waiting: &[Job],
        active: &Policies,
    ) -> Result<Option<Policies>, SelectorError>;
}

impl Policies {
    /// `admission/scheduling/placement`.
    pub fn label(&self) -> String {
        self.names.to_string()
    }

    /// The job metrics the three policies read, together.
    pub fn metrics_read(&self) -> Vec<&'static str> {
        let mut m = self.admission.metrics_read();
        m.extend(self.scheduling.metrics_read());
        m.extend(self.placement.metrics_read());
        m.sort_unstable();
        m.dedup();
        m
    }
}
