//! Start-up-aware protection (`startup-aware`, the default), and none.
//!
//! A training job spends seconds to minutes starting (importing its
//! framework, initialising devices, restoring its checkpoint) before its
//! first iteration; preempting it then wastes all of it, and a policy that
//! does so every round never lets it start. So a running job keeps its GPUs
//! until it has run `[run] min_run_s` — and at least
//! `min_run_startup_factor` × its own last start-up, what the scheduling
//! policy asked for this round, and (`min_run_until_checkpoint`) its
//! checkpoint interval — past its first iteration, whatever a placement
//! asks; a launch still starting after `max_startup_s` loses that.

use super::{no_keys, Protection, ProtectionInput};
use crate::cluster::ClusterState;
use crate::ids::{GpuId, JobId};
use crate::job::Job;
use crate::job_state::JobState;
use crate::module::{Assignment, Placement};
use crate::round::StartupRules;
use std::collections::HashSet;

/// Jobs keep their GPUs while starting and for a while after (see the
/// module docs).
#[derive(Clone, Copy, Debug)]
pub struct StartupAware {
    rules: StartupRules,
}

/// No protection: a placement's preemptions and moves always run, even of
/// a job still starting. The loop still counts the rounds a job is moved
/// before its first iteration: past `[run] livelock_after` a simulation
/// stops with a livelock; a live scheduler marks the job
/// ([`Job::held_while_starting`]), which only a protection plugin that
/// honours the mark (as `startup-aware` does) turns into keeping it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unprotected;

crate::register_protection!(
    "startup-aware",
    "running jobs keep their GPUs while starting and until [run] min_run_s past their first iteration",
    |params, run| {
        no_keys(params, "startup-aware")?;
        Ok(Box::new(StartupAware::new(StartupRules::from_run(run))))
    }
);

crate::register_protection!(
    "none",
    "every preemption and move a placement asks for runs, even of a job still starting ([run] livelock_after still applies)",
    |params, _run| {
        no_keys(params, "none")?;
        Ok(Box::new(Unprotected))
    }
);

impl Protection for Unprotected {
    fn name(&self) -> &str {
        "none"
    }

    fn protect(&self, _: &ProtectionInput<'_>, placement: Placement) -> Placement {
        placement
    }
}

impl StartupAware {
    pub fn new(rules: StartupRules) -> Self {
        StartupAware { rules }
    }

    /// True if `job` must keep its GPUs now: it runs and is still starting,
    /// or has not run long enough past its first iteration. `asked` is what
    /// the scheduling policy asked for this round.
    pub fn is_protected(&self, job: &Job, now_s: f64, asked: Option<f64>) -> bool {
        if !job.is_running() {
            return false;
        }
        let Some(ran) = job.productive_run_s(now_s) else {
            // A livelocked job (a live cluster) keeps its GPUs until it
            // starts, whatever max_startup_s says.
            if job.held_while_starting {
                return true;
            }
            let starting_for = now_s - job.last_launch_s.unwrap_or(now_s);
            return starting_for < self.rules.max_startup_s;
        };
        let r = &self.rules;
        let need = r
            .min_run_s
            .max(r.min_run_startup_factor * job.last_startup_s.unwrap_or(0.0))
            .max(asked.unwrap_or(0.0))
            .max(if r.until_checkpoint {
                job.checkpoint_interval_s().unwrap_or(0.0)
            } else {
                0.0
            });
        ran < need
    }
}

impl Protection for StartupAware {
    fn name(&self) -> &str {
        "startup-aware"
    }

    /// `p` without the preemptions and moves of protected jobs: they keep
    /// their GPUs, and launches that needed those GPUs wait for a later
    /// round. Launches whose node's host CPUs and memory the kept jobs
    /// still hold wait too, the last of the node's first, until the rest
    /// passes the placement check.
    fn protect(&self, input: &ProtectionInput<'_>, mut p: Placement) -> Placement {
        let (jobs, now_s) = (input.jobs, input.round.now_s);
        let moved = |p: &Placement, id: JobId| {
            p.launch.iter().any(|a| {
                a.job == id
                    && jobs.get(id).is_some_and(|j| {
                        !same_gpus(&j.allocation, &a.gpus)
                            || j.host_share != a.host
                            || input.cluster.share_of(a.job).map(|s| s.milli) != a.share
                    })
            })
        };
        // Only jobs the placement stops or moves can be kept: those, in id
        // order, rather than every running job checked against the placement.
        let mut touched: Vec<JobId> = p
            .preempt
            .iter()
            .copied()
            .chain(p.launch.iter().map(|a| a.job))
            .collect();
        touched.sort_unstable();
        touched.dedup();
        let kept: Vec<JobId> = touched
            .into_iter()
            .filter_map(|id| jobs.get(id))
            .filter(|j| j.is_running())
            .filter(|j| p.preempt.contains(&j.id()) || moved(&p, j.id()))
            .filter(|j| self.is_protected(j, now_s, input.asked_min_run_s))
            .map(Job::id)
            .collect();
        if kept.is_empty() {
            return p;
        }
        let before = p.launch.len();
        keep_on_their_gpus(&mut p, jobs, input.cluster, &kept);
        tracing::debug!(
            kept = kept.len(),
            deferred = before - p.launch.len(),
            "jobs still starting (or not past min_run_s) keep their GPUs"
        );
        // What is left is a subset of a checked decision, and the kept jobs
        // hold their host shares: the CPUs and memory of a node may no
        // longer cover its launches. Those are deferred, the last of the
        // node's first, until the rest fits; the others run this round.
        let check = input.check();
        let cluster = input.cluster;
        let mut deferred = 0;
        while check.check(&p).is_err() {
            let releasing = releasing(&p);
            let keeps = |holder: JobId| !releasing.contains(&holder);
            let on = |node| {
                move |a: &Assignment| {
                    a.gpus
                        .iter()
                        .any(|g| cluster.gpu(*g).is_some_and(|x| x.node == node))
                }
            };
            let last = match check.host_overflow(&p, &keeps) {
                Ok(Some((node, _, _))) => p.launch.iter().rposition(on(node)),
                _ => None,
            };
            // Not a matter of host shares (it cannot be: launches onto the
            // GPUs of every job that stays went above, and the rest was
            // checked): left as it is, for the loop's check to refuse
            // naming this plugin.
            let Some(last) = last else {
                break;
            };
            p.launch.remove(last);
            deferred += 1;
            // A running job whose move waits keeps its GPUs: launches onto
            // them wait too.
            deferred += defer_onto_staying(&mut p, jobs, cluster);
        }
        if deferred > 0 {
            tracing::info!(
                deferred,
                "launches deferred: the jobs still starting keep their host CPUs and memory"
            );
        }
        p
    }
}

/// Keeps `kept` (running jobs) on their GPUs: drops their preemptions and
/// moves from `p`, and defers every launch that needs a GPU that a job
/// staying where it is still holds — theirs, and, in turn, those of running
/// jobs whose own move was deferred that way. What is left of a checked
/// placement stays valid but for host shares. Returns the launches deferred
/// (the kept jobs' own moves included).
pub fn keep_on_their_gpus(
    p: &mut Placement,
    jobs: &JobState,
    cluster: &ClusterState,
    kept: &[JobId],
) -> usize {
    p.preempt.retain(|id| !kept.contains(id));
    let before = p.launch.len();
    p.launch.retain(|a| !kept.contains(&a.job));
    before - p.launch.len() + defer_onto_staying(p, jobs, cluster)
}

/// Defers, until none is left, every launch onto a GPU held by a running
/// job that `p` neither preempts nor launches again (it stays where it is).
fn defer_onto_staying(p: &mut Placement, jobs: &JobState, cluster: &ClusterState) -> usize {
    let mut deferred = 0;
    loop {
        let releasing = releasing(p);
        let staying =
            |h: JobId| !releasing.contains(&h) && jobs.get(h).is_some_and(|j| j.is_running());
        let stays = |g: &GpuId| cluster.gpu(*g).and_then(|x| x.job).is_some_and(staying);
        // Thousandths of `g` that sharing jobs staying where they are hold.
        let shared = |g: &GpuId| -> u32 {
            if !cluster.has_shares() {
                return 0;
            }
            (cluster.shares_on(*g).iter())
                .filter(|s| staying(s.job))
                .map(|s| s.milli)
                .sum()
        };
        // Thousandths the share launches kept so far give out, by GPU.
        let mut given: std::collections::HashMap<GpuId, u32> = Default::default();
        let before = p.launch.len();
        p.launch.retain(|a| {
            let blocked = a.gpus.iter().any(|g| {
                stays(g)
                    || match a.share {
                        None => shared(g) > 0,
                        Some(m) => {
                            let out = given.get(g).copied().unwrap_or(0);
                            shared(g) + out + m > crate::cluster::GPU_MILLI
                        }
                    }
            });
            if let (false, Some(m), [g]) = (blocked, a.share, a.gpus.as_slice()) {
                *given.entry(*g).or_default() += m;
            }
            !blocked
        });
        let n = before - p.launch.len();
        if n == 0 {
            return deferred;
        }
        deferred += n;
    }
}

/// The running jobs `p` stops or launches again: they give their GPUs up.
fn releasing(p: &Placement) -> HashSet<JobId> {
    p.preempt
        .iter()
        .copied()
        .chain(p.launch.iter().map(|a| a.job))
        .collect()
}

/// The same GPUs, in any order.
pub(crate) fn same_gpus(a: &[GpuId], b: &[GpuId]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    a.sort_unstable();
    b.sort_unstable();
    a == b
}
