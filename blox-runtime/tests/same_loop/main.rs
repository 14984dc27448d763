//! The same round loop in simulation and on the gRPC runtime: traces run
//! on a live scheduler with in-process workers, on real time, and through
//! the simulator, then compared job by job and decision by decision. Its
//! own test binary, and its tests one at a time ([`ONE_AT_A_TIME`]), so
//! that no other test shares the cores while one keeps time.

#[path = "../suite/common/mod.rs"]
mod common;
/// Jobs of whole seconds on FIFO and LAS, preemptions, `blox whatif`.
mod las;
/// Jobs that take seconds to start, protected by the loop.
mod startup;

/// The tests here keep time: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

use common::{job, toy, Cluster, Trace};
use std::time::{Duration, Instant};

/// How long before its trace time each job is submitted: a job due on a
/// round boundary is then seen in that round, as in simulation. Its JCT is
/// counted from its trace time (subtract this from the scheduler's).
const EARLY: f64 = 0.2;

/// Submits each job of `trace` at its trace time on `c`'s clock (time 0 is
/// a round boundary at least a second away), [`EARLY`] ahead, job `i` as
/// `j{i}` running the toy job with `extra(i)` for its arguments; the ids in
/// trace order.
fn submit_on_time(c: &Cluster, trace: &Trace, extra: impl Fn(usize) -> Vec<String>) -> Vec<u64> {
    let t0 = c.started().elapsed().as_secs_f64().ceil() + 1.0;
    let mut ctl = c.ctl();
    let mut ids = Vec::new();
    for (i, &(a, g, d)) in trace.iter().enumerate() {
        let due = c.started() + Duration::from_secs_f64(t0 + a - EARLY);
        if let Some(left) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(left);
        }
        let mut command = toy(d, &[]);
        command.extend(extra(i));
        ids.push(
            ctl.submit(job(&format!("j{i}"), g, command, Some(d)))
                .unwrap(),
        );
    }
    ids
}
