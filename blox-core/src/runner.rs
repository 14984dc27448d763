//! The runner: one library call runs a [`RoundLoop`] on a [`Backend`], for
//! every driver. A driver (the simulator, the live scheduler, the local
//! runner, the synthesizer's and forecasts' forks, a what-if replay) is a
//! [`Driver`]: it says when the run stops and what follows each round
//! (logging its decisions, publishing state, counting what it measures);
//! the rounds themselves are the loop's. Build the loop with
//! [`RoundLoop::builder`], then [`run`] it, or [`step`] it a round at a
//! time.
//!
//! ```
//! use blox_core::runner::{self, Driver};
//! use blox_core::*;
//!
//! /// Stops after `n` rounds and counts the jobs that ended.
//! struct Rounds { n: u64, ended: usize }
//!
//! impl<B: Backend + ?Sized> Driver<B> for Rounds {
//!     type Stop = u64;
//!     type Error = LoopError;
//!     fn stop(&mut self, lp: &RoundLoop, _: &B) -> Option<u64> {
//!         (lp.rounds() >= self.n).then_some(lp.rounds())
//!     }
//!     fn after_round(&mut self, r: RoundReport, _: &mut RoundLoop, _: &mut B) -> Result<(), LoopError> {
//!         self.ended += r.ended.len();
//!         Ok(())
//!     }
//!     fn failed(&mut self, _: &RoundLoop, e: LoopError) -> LoopError {
//!         e
//!     }
//! }
//! # fn go<B: Backend>(lp: &mut RoundLoop, backend: &mut B) -> Result<(), LoopError> {
//! let mut d = Rounds { n: 100, ended: 0 };
//! let rounds = runner::run(lp, backend, &mut d)?;
//! # Ok(()) }
//! ```

use crate::module::Backend;
use crate::round::{LoopError, RoundLoop, RoundReport};

/// What a driver adds to the round loop.
pub trait Driver<B: Backend + ?Sized> {
    /// Why a run stopped.
    type Stop;
    /// The driver's error; a round's failure becomes one through
    /// [`Driver::failed`].
    type Error;

    /// Checked before every round: `Some(why)` ends the run there.
    fn stop(&mut self, lp: &RoundLoop, backend: &B) -> Option<Self::Stop>;

    /// What follows a round, given its report.
    fn after_round(
        &mut self,
        report: RoundReport,
        lp: &mut RoundLoop,
        backend: &mut B,
    ) -> Result<(), Self::Error>;

    /// A round failed with `error` (the loop's state is as the round left
    /// it; [`RoundLoop::rounds`] names it).
    fn failed(&mut self, lp: &RoundLoop, error: LoopError) -> Self::Error;
}

/// What one [`step`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Step<S> {
    /// It ran a round.
    Ran,
    /// The driver's stop condition held: no round ran.
    Stopped(S),
}

/// Runs one round unless the driver says stop.
pub fn step<B, D>(
    lp: &mut RoundLoop,
    backend: &mut B,
    driver: &mut D,
) -> Result<Step<D::Stop>, D::Error>
where
    B: Backend + ?Sized,
    D: Driver<B> + ?Sized,
{
    if let Some(why) = driver.stop(lp, backend) {
        return Ok(Step::Stopped(why));
    }
    match lp.run_round(backend) {
        Ok(report) => driver.after_round(report, lp, backend).map(|()| Step::Ran),
        Err(e) => Err(driver.failed(lp, e)),
    }
}

/// Runs rounds until the driver says stop; returns why.
pub fn run<B, D>(lp: &mut RoundLoop, backend: &mut B, driver: &mut D) -> Result<D::Stop, D::Error>
where
    B: Backend + ?Sized,
    D: Driver<B> + ?Sized,
{
    loop {
        if let Step::Stopped(why) = step(lp, backend, driver)? {
            return Ok(why);
        }
    }
}

/// True once nothing more can happen: every submission was read and no job
/// is waiting, queued or running (the usual end of a finite run).
pub fn all_done<B: Backend + ?Sized>(lp: &RoundLoop, backend: &B) -> bool {
    backend.exhausted() && lp.is_idle()
}

/// A driver that runs until [`all_done`] and hands each round's report to
/// its function (with the loop after the round).
pub struct UntilDone<F>(pub F);

impl<B, F> Driver<B> for UntilDone<F>
where
    B: Backend + ?Sized,
    F: FnMut(RoundReport, &RoundLoop),
{
    type Stop = ();
    type Error = LoopError;

    fn stop(&mut self, lp: &RoundLoop, backend: &B) -> Option<()> {
        all_done(lp, backend).then_some(())
    }

    fn after_round(
        &mut self,
        report: RoundReport,
        lp: &mut RoundLoop,
        _: &mut B,
    ) -> Result<(), LoopError> {
        (self.0)(report, lp);
        Ok(())
    }

    fn failed(&mut self, _: &RoundLoop, error: LoopError) -> LoopError {
        error
    }
}
