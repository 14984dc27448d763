//! What a worker holds while it runs: its launches (running, starting,
//! stopping), their leases and fencing, the exits and metrics not yet
//! delivered, the job uids in use, and the context its tasks share
//! ([`Shared`]).

use super::{cgroup, uids, WorkerConfig};
use crate::process::{Running, SharedDirs};
use crate::proto::*;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub(super) struct Launch {
    pub(super) launch: u32,
    pub(super) gpus: Vec<u32>,
    /// Thousandths of its one GPU, when it shares the GPU.
    pub(super) gpu_milli: Option<u32>,
    pub(super) run: Running,
    /// How it was launched, for a scheduler that adopts it after a restart.
    pub(super) first_rank: u32,
    pub(super) ranks: u32,
    pub(super) world_size: u32,
    pub(super) generation: u64,
    pub(super) batch_size: Option<u32>,
    pub(super) spawned: Instant,
    /// The start-up it reported ([`blox_client::STARTUP_METRIC`]).
    pub(super) startup_s: Option<f64>,
    /// The uid of its own it runs as (`--job-uids`): the directories it
    /// holds meanwhile are taken back when it is dropped.
    pub(super) uid: Option<u32>,
    /// Parts of it run on other workers too, sharing its checkpoint and
    /// coordination directories: when this part ends, those stay the job's
    /// until the scheduler says every part ended ([`State::kept`]).
    pub(super) shared: bool,
    /// Its cgroups, killed and removed when it is dropped.
    pub(super) group: Option<cgroup::LaunchGroup>,
}

impl Drop for Launch {
    fn drop(&mut self) {
        // Whatever of the launch still runs, in whatever session or
        // process group, ends with it.
        self.run.kill();
        if let Some(g) = self.group.take() {
            cgroup::reap(g, self.uid);
        }
        if self.uid.is_some() {
            self.run.hand_back();
        }
    }
}

impl Launch {
    fn report(&self, job: u64) -> RunningLaunch {
        RunningLaunch {
            launch: Some(LaunchRef {
                job_id: job,
                launch: self.launch,
            }),
            gpus: self.gpus.clone(),
            first_rank: self.first_rank,
            ranks: self.ranks,
            world_size: self.world_size,
            generation: self.generation,
            batch_size: self.batch_size,
            running_s: self.spawned.elapsed().as_secs_f64(),
            startup_s: self.startup_s,
            gpu_milli: self.gpu_milli,
        }
    }
}

/// A launch being started (its directories, cgroup and processes made
/// outside the state's lock): its GPUs and uid are held meanwhile.
///
/// It is reported as running (registration, heartbeats): a scheduler that
/// restarted meanwhile must know of it before it runs, else it could launch
/// the job again elsewhere while this start completes.
pub(super) struct Starting {
    pub(super) launch: u32,
    pub(super) uid: Option<u32>,
    /// Revoked meanwhile: stopped as soon as it runs.
    pub(super) revoked: bool,
    /// What it reports (its GPUs, ranks, generation), and since when.
    pub(super) report: RunningLaunch,
    pub(super) since: Instant,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) worker_id: Option<String>,
    /// Launches being started.
    pub(super) starting: HashMap<u64, Starting>,
    /// Its credential from the scheduler (with `worker_id`): sent on every
    /// report, and required of every call the scheduler makes here.
    pub(super) secret: Option<String>,
    pub(super) launches: HashMap<u64, Launch>,
    /// Exits and metrics not yet delivered to the scheduler (metrics
    /// bounded: the oldest are dropped and counted).
    pub(super) exits: Vec<(ExitReport, Instant)>,
    pub(super) metrics: Vec<MetricSample>,
    pub(super) metrics_dropped: u64,
    /// Fencing: until when this worker may run jobs without hearing from
    /// the scheduler (`None`: not registered, or no lease).
    pub(super) lease_until: Option<Instant>,
    /// The grace a fenced job gets (from the scheduler, with the lease).
    pub(super) fence_grace: Duration,
    /// Grows each time a heartbeat gets through after the lease ran out:
    /// a launch sent under an earlier epoch (before this worker hung or
    /// was cut off) is refused, as the scheduler may have given up on it.
    pub(super) lease_epoch: u64,
    /// The end of the last lease that ran out before a heartbeat renewed
    /// it: a job that stopped itself then (its lease file said so) exits
    /// within the grace after it, and is reported fenced, not crashed,
    /// though the lease holds again by the time it exits.
    pub(super) lapsed_at: Option<Instant>,
    /// Launches being stopped (revoked, taken out of `launches`) whose
    /// processes may still run, saving their last checkpoint: reported as
    /// running until they exited, so the scheduler neither relaunches
    /// their job nor has their shared directories taken back meanwhile.
    pub(super) stopping: std::collections::HashSet<(u64, u32)>,
    /// The shared directories of ended parts of launches on several
    /// workers, still their jobs' while other parts may run: reported to
    /// the scheduler (`HeartbeatRequest.kept`, their uids as busy) until it
    /// answers that every part ended (`HeartbeatReply.take_back`).
    pub(super) kept: Vec<(LaunchRef, SharedDirs)>,
    /// Uids of kept directories being taken back (off the heartbeat: shared
    /// storage may be slow), busy until they are.
    pub(super) returning: Vec<u32>,
    /// Job uids of launches that ended here, until nothing of them is left
    /// (reported as busy meanwhile: `HeartbeatRequest.busy_uids`).
    pub(super) draining: std::collections::BTreeSet<u32>,
    /// The worker shuts down: a launch that finishes starting now is
    /// killed at once.
    pub(super) closing: bool,
}

/// The most kept launches one heartbeat reports (the proto's bound).
const MAX_KEPT_REPORTED: usize = crate::validate::MAX_WORKER_LAUNCHES;

/// The most metric samples a worker holds for the scheduler (when it cannot
/// reach it); older ones are dropped.
const MAX_PENDING_METRICS: usize = 100_000;

impl State {
    /// After a launch that ran as `uid` ended: every process still running
    /// as that uid is killed, unless a launch here holds it again or another
    /// worker on this machine runs a part of the job as it (that worker's
    /// sweep, at its part's end, kills what is left).
    pub(super) fn sweep(&mut self, uid: Option<u32>, contained: bool) {
        if let Some(u) = uid {
            self.draining.insert(u);
            // The launch's cgroup holds all it started: killing it (when
            // the launch is dropped) ends them, and no other worker's.
            if contained {
                return;
            }
            if self.launches.values().any(|l| l.uid == Some(u)) {
                return;
            }
            if uids::held_by_another_worker(u) {
                tracing::debug!(
                    uid = u,
                    "job uid also runs under another worker here: its sweep is left to that worker"
                );
                return;
            }
            uids::kill_all(u);
        }
    }

    pub(super) fn bound_metrics(&mut self) {
        let over = self.metrics.len().saturating_sub(MAX_PENDING_METRICS);
        if over > 0 {
            self.metrics.drain(..over);
            if self.metrics_dropped == 0 {
                tracing::warn!("the scheduler is not taking metrics: the oldest are dropped (at most {MAX_PENDING_METRICS} are kept)");
            }
            self.metrics_dropped += over as u64;
        }
    }

    /// Tells every job here until when its lease holds (its control
    /// directory's `lease` file; [`blox_client::LEASE_FILE`]), so a job
    /// stops itself when this worker cannot renew it, even a worker that
    /// hangs.
    pub(super) fn publish_lease(&self, grace: Duration) {
        let Some(until) = self.lease_until else {
            return;
        };
        for l in self.launches.values() {
            l.run.write_lease(until, grace);
        }
    }

    /// True when the lease ran out: the worker must not run jobs.
    pub(super) fn fenced(&self) -> bool {
        self.lease_until.is_some_and(|t| Instant::now() > t)
    }

    /// Renews the lease until `until`; one that had run out is noted
    /// ([`State::stopped_by_lease`]).
    pub(super) fn renew_lease(&mut self, until: Instant) {
        if self.fenced() {
            self.lapsed_at = self.lease_until;
        }
        self.lease_until = Some(until);
    }

    /// Whether a launch that exited at `at` without finishing stopped
    /// because its lease ran out: now, or in a lapse since renewed (it
    /// exits within the grace after its lease's end; a second of slack).
    pub(super) fn stopped_by_lease(&self, at: Instant) -> bool {
        let window = self.fence_grace + Duration::from_secs(1);
        self.lease_until.is_some_and(|t| at >= t)
            || self.lapsed_at.is_some_and(|t| at >= t && at <= t + window)
    }

    /// The launches running here, as reported when registering again.
    pub(super) fn reports(&self) -> Vec<RunningLaunch> {
        let mut v: Vec<RunningLaunch> = self
            .launches
            .iter()
            .map(|(j, l)| l.report(*j))
            // (One revoked while it starts is killed as it runs: not one
            // to adopt.)
            .chain(
                self.starting
                    .values()
                    .filter(|s| !s.revoked)
                    .map(|s| RunningLaunch {
                        running_s: s.since.elapsed().as_secs_f64(),
                        ..s.report.clone()
                    }),
            )
            .collect();
        v.sort_by_key(|r| r.launch.map(|l| l.job_id));
        v
    }

    /// Takes launch `job` out (it ends): its uid counts as busy until
    /// nothing of it is left.
    pub(super) fn take_launch(&mut self, job: u64) -> Option<Launch> {
        let mut l = self.launches.remove(&job)?;
        self.draining.extend(l.uid);
        if let (true, Some(uid)) = (l.shared, l.uid) {
            if let Some(dirs) = l.run.keep_shared(uid) {
                let at = LaunchRef {
                    job_id: job,
                    launch: l.launch,
                };
                self.kept.push((at, dirs));
            }
        }
        Some(l)
    }

    /// The launches whose shared directories are kept here (at most
    /// [`MAX_KEPT_REPORTED`] are reported; the rest next time).
    pub(super) fn kept_refs(&self) -> Vec<LaunchRef> {
        self.kept
            .iter()
            .take(MAX_KEPT_REPORTED)
            .map(|(l, _)| *l)
            .collect()
    }

    /// Takes out the kept directories of `ended` launches (every part
    /// ended), to be taken back.
    pub(super) fn release_kept(&mut self, ended: &[LaunchRef]) -> Vec<SharedDirs> {
        let (out, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.kept)
            .into_iter()
            .partition(|(l, _)| ended.contains(l));
        self.kept = keep;
        let out: Vec<SharedDirs> = out.into_iter().map(|(_, d)| d).collect();
        self.returning.extend(out.iter().map(SharedDirs::uid));
        out
    }

    /// The job uids in use here: the running and starting launches', and
    /// those of ended launches with a process or cgroup left (re-checked
    /// now), or whose leftovers are being removed.
    pub(super) fn busy_uids(&mut self) -> Vec<u32> {
        let reaping = cgroup::draining_uids();
        let held: Vec<u32> = self
            .launches
            .values()
            .filter_map(|l| l.uid)
            .chain(self.starting.values().filter_map(|s| s.uid))
            .chain(self.kept.iter().map(|(_, d)| d.uid()))
            .chain(self.returning.iter().copied())
            .collect();
        let mut done = Vec::new();
        self.draining.retain(|u| {
            let busy = held.contains(u) || reaping.contains(u) || uids::process_of(*u).is_some();
            if !busy {
                done.push(*u);
            }
            busy
        });
        // What the uid left in the node's shared places goes before the
        // uid is reported free (the next holder must not find it).
        for u in done {
            uids::cleanup(u);
        }
        let mut all: Vec<u32> = held
            .into_iter()
            .chain(self.draining.iter().copied())
            .chain(uids::cleaning())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// The launches running or starting here.
    pub(super) fn running(&self) -> Vec<LaunchRef> {
        self.launches
            .iter()
            .map(|(j, l)| (*j, l.launch))
            .chain(self.starting.iter().map(|(j, s)| (*j, s.launch)))
            .chain(self.stopping.iter().copied())
            .map(|(job_id, launch)| LaunchRef { job_id, launch })
            .collect()
    }
}

pub(super) struct Shared {
    pub(super) cfg: WorkerConfig,
    pub(super) job_user: Option<crate::process::JobUser>,
    /// `--job-uids`, checked.
    pub(super) job_uids: Option<(u32, u32)>,
    /// A cgroup per launch, where the host has them.
    pub(super) containment: Option<cgroup::Containment>,
    pub(super) gpus: Vec<GpuDevice>,
    pub(super) address: String,
    pub(super) state: Mutex<State>,
    /// Set (once) when the scheduler refuses this worker for good.
    pub(super) refused: tokio::sync::watch::Sender<Option<String>>,
}

impl Shared {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job that stopped itself because its lease ran out is fenced even
    /// when a late heartbeat renewed the lease before it exited (a worker
    /// starved of CPU: the job read the lease file's end, the renewal came
    /// after). Before, such an exit read as a crash, blamed on the job.
    #[test]
    fn a_job_stopped_by_a_lapsed_lease_is_fenced_after_the_renewal_too() {
        let now = Instant::now();
        let mut st = State {
            lease_until: Some(now - Duration::from_millis(500)),
            fence_grace: Duration::from_secs(2),
            ..State::default()
        };
        assert!(st.fenced() && st.stopped_by_lease(now));
        st.renew_lease(now + Duration::from_secs(10));
        assert!(!st.fenced());
        // Its exit, within the grace after the lapsed lease's end.
        assert!(st.stopped_by_lease(now));
        assert!(st.stopped_by_lease(now + Duration::from_secs(2)));
        // Later, an exit without a finish is the job's own.
        assert!(!st.stopped_by_lease(now + Duration::from_secs(4)));
        // A renewal in time notes no lapse.
        let mut calm = State {
            lease_until: Some(now + Duration::from_secs(1)),
            fence_grace: Duration::from_secs(2),
            ..State::default()
        };
        calm.renew_lease(now + Duration::from_secs(10));
        assert!(!calm.stopped_by_lease(now + Duration::from_secs(1)));
    }
}
