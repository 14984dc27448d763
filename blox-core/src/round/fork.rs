//! A loop's policies forked with their state, for the loop's forks: a
//! forecast run on another thread from a snapshot, policy synthesis. A
//! policy that remembers something between rounds (Tiresias's queues, the
//! attained service of a team's ended jobs, ONES's predictor) hands over a
//! copy ([`Fork::Copy`]); a stateless one is built afresh from its config; one
//! that cannot be copied is built afresh too, and the fork says so.

use super::Policies;
use crate::config::{ConfigError, ModuleConfig};
use crate::module::{AdmissionPolicy, Fork, PlacementPolicy, SchedulingPolicy};
use crate::registry;

/// A loop's policies as they were when forked.
pub struct PolicyForks {
    admission: Fork<dyn AdmissionPolicy>,
    scheduling: Fork<dyn SchedulingPolicy>,
    placement: Fork<dyn PlacementPolicy>,
    names: super::PolicyNames,
}

impl Policies {
    /// Each policy's [`Fork`]: copies of the stateful ones.
    pub fn fork(&self) -> PolicyForks {
        PolicyForks {
            admission: self.admission.fork(),
            scheduling: self.scheduling.fork(),
            placement: self.placement.fork(),
            names: self.names.clone(),
        }
    }
}

/// One module's policy for a fork: a copy of the forked one (each fork
/// copies the snapshot's copy again), else a fresh one, with a note when the
/// policy kept state it could not hand over.
fn one<T: ?Sized>(
    forked: &Fork<T>,
    again: impl Fn(&T) -> Fork<T>,
    fresh: impl Fn() -> Result<Box<T>, ConfigError>,
    name: &str,
    notes: &mut Vec<String>,
) -> Result<Box<T>, ConfigError> {
    let copy = match forked {
        Fork::Copy(p) => again(p),
        Fork::Stateless => Fork::Stateless,
        Fork::Unforkable(why) => Fork::Unforkable(why.clone()),
    };
    match copy {
        Fork::Copy(copy) => Ok(copy),
        Fork::Stateless => fresh(),
        Fork::Unforkable(why) => {
            notes.push(format!(
                "`{name}` could not be forked ({why}): its fork starts afresh"
            ));
            fresh()
        }
    }
}

impl PolicyForks {
    /// Policies for one fork (each call makes new copies, so one snapshot
    /// serves any number of forks): the forked policies' copies, fresh ones
    /// from the module configs for the stateless ones. The notes say which
    /// policies kept state they could not hand over.
    pub fn build(
        &self,
        admission: &ModuleConfig,
        scheduling: &ModuleConfig,
        placement: &ModuleConfig,
    ) -> Result<(Policies, Vec<String>), ConfigError> {
        let mut notes = Vec::new();
        let a = one(
            &self.admission,
            |p| p.fork(),
            || registry::build_admission(admission),
            &self.names.admission,
            &mut notes,
        )?;
        let mut s = one(
            &self.scheduling,
            |p| p.fork(),
            || registry::build_scheduling(scheduling),
            &self.names.scheduling,
            &mut notes,
        )?;
        s.pair_with_placement(&self.names.placement)
            .map_err(|message| ConfigError::Incompatible {
                at: placement.location(),
                message,
            })?;
        let p = one(
            &self.placement,
            |p| p.fork(),
            || registry::build_placement(placement),
            &self.names.placement,
            &mut notes,
        )?;
        let policies = Policies {
            admission: a,
            scheduling: s,
            placement: p,
            names: self.names.clone(),
        };
        Ok((policies, notes))
    }

    /// True when every policy handed over a copy or keeps no state.
    pub fn complete(&self) -> bool {
        !matches!(self.admission, Fork::Unforkable(_))
            && !matches!(self.scheduling, Fork::Unforkable(_))
            && !matches!(self.placement, Fork::Unforkable(_))
    }
}
