//! Tiresias: discretised two-dimensional LAS (Tiresias, NSDI'19, §3.1–3.2), as the
//! Pollux artifact configures it for its "Tiresias+TunedJobs" baseline
//! (Pollux, OSDI'21, §5.1; `pollux-data.md` §8.1).
//!
//! Jobs sit in priority queues by attained service (GPU-time). A job starts in
//! Q0; once its executed time × GPUs reaches a queue's threshold it moves to the
//! tail of the next queue. Each round the queues are walked in order and a job
//! runs if its GPUs still fit in the cluster; a job that does not fit is skipped,
//! so smaller later jobs can run (no head-of-line blocking).
//!
//! Starvation handling (Tiresias §3.2, off by default as in the Pollux
//! artifact): with `promote_knob = K`, a job that has waited at least K times
//! its executed time since it last ran goes back to the tail of Q0, and its
//! demotion clock restarts.

use blox_core::*;
use serde::Deserialize;
use std::collections::{BTreeMap, VecDeque};

fn default_thresholds() -> Vec<f64> {
    // pollux-data.md §8.1: two queues, threshold 16 GPU-hours.
    vec![16.0 * 3600.0]
}

/// Parameters: `thresholds_gpu_s` — queue boundaries in GPU-seconds (one fewer
/// than the number of queues).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TiresiasParams {
    #[serde(default = "default_thresholds")]
    pub thresholds_gpu_s: Vec<f64>,
    /// Promote a job waiting ≥ knob × its executed time to Q0; `None`: never.
    #[serde(default)]
    pub promote_knob: Option<f64>,
}

#[derive(Clone, Debug)]
struct Entry {
    queue: usize,
    /// Wall seconds the job has been scheduled to run.
    executed_s: f64,
    running: bool,
    /// When the job last stopped running (or arrived), while it waits.
    waiting_since: Option<f64>,
    /// The GPUs it asks for (fixed for a job's life), for the thresholds.
    gpus: f64,
}

/// A queued job and the GPUs it asks for (read once, when the policy first
/// sees the job, like its thresholds' `gpus`): the walk of the queues needs
/// no lookup of the job.
type Slot = (JobId, u32);

/// The Tiresias scheduler; it keeps its own queues across rounds.
#[derive(Clone, Debug)]
pub struct Tiresias {
    params: TiresiasParams,
    queues: Vec<VecDeque<Slot>>,
    jobs: BTreeMap<JobId, Entry>,
    last_now: Option<f64>,
}

impl Tiresias {
    pub fn new(params: TiresiasParams) -> Self {
        let n = params.thresholds_gpu_s.len() + 1;
        Tiresias {
            params,
            queues: vec![VecDeque::new(); n],
            jobs: BTreeMap::new(),
            last_now: None,
        }
    }
}

impl SchedulingPolicy for Tiresias {
    fn fork(&self) -> Fork<dyn SchedulingPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn schedule(&mut self, round: &RoundInfo, jobs: &JobState, cluster: &ClusterState) -> Schedule {
        let elapsed = self.last_now.map_or(0.0, |t| round.now_s - t);
        self.last_now = Some(round.now_s);
        // One pass over the active jobs beside its own (both in id order)
        // finds the jobs it knows that ended or left (forgotten;
        // the queues hold exactly the jobs of `self.jobs`) and the runnable
        // ones it does not know yet (new).
        let mut dead: Vec<JobId> = Vec::new();
        let mut new: Vec<&Job> = Vec::new();
        let mut known = self.jobs.keys().peekable();
        for j in jobs.active() {
            let id = j.id();
            while let Some(k) = known.next_if(|k| **k < id) {
                dead.push(*k);
            }
            if known.next_if(|k| **k == id).is_some() {
                if j.status.is_terminal() {
                    dead.push(id);
                }
            } else if matches!(j.status, JobStatus::Queued | JobStatus::Running) {
                new.push(j);
            }
        }
        dead.extend(known.copied());
        if !dead.is_empty() {
            for id in &dead {
                self.jobs.remove(id);
            }
            for q in &mut self.queues {
                q.retain(|(id, _)| dead.binary_search(id).is_err());
            }
        }
        // New jobs join Q0 in submission order.
        new.sort_by(|a, b| {
            a.arrival_s()
                .total_cmp(&b.arrival_s())
                .then(a.id().cmp(&b.id()))
        });
        for j in new {
            self.jobs.insert(
                j.id(),
                Entry {
                    queue: 0,
                    executed_s: 0.0,
                    running: false,
                    waiting_since: Some(round.now_s),
                    gpus: j.requested_gpus() as f64,
                },
            );
            self.queues[0].push_back((j.id(), j.requested_gpus()));
        }
        // Account the last round and demote: each job leaves its queue for
        // the back of the one its GPU-time reached, in id order. (Moved
        // together: one pass over each queue left, not one per job.)
        let mut moves: Vec<(Slot, usize, usize)> = Vec::new();
        for (id, e) in self.jobs.iter_mut() {
            if e.running {
                e.executed_s += elapsed;
            }
            let (gpus, from) = (e.gpus, e.queue);
            while e.queue < self.params.thresholds_gpu_s.len()
                && e.executed_s * gpus >= self.params.thresholds_gpu_s[e.queue]
            {
                e.queue += 1;
            }
            if e.queue != from {
                moves.push(((*id, gpus as u32), from, e.queue));
            }
        }
        move_to_backs(&mut self.queues, &moves);
        // Starvation: long waiters go back to the top queue.
        if let Some(knob) = self.params.promote_knob {
            moves.clear();
            for (id, e) in self.jobs.iter_mut() {
                let Some(since) = e.waiting_since else {
                    continue;
                };
                if e.queue > 0 && round.now_s - since >= knob * e.executed_s {
                    moves.push(((*id, e.gpus as u32), e.queue, 0));
                    e.queue = 0;
                    e.executed_s = 0.0;
                }
            }
            move_to_backs(&mut self.queues, &moves);
        }
        // Walk the queues; run whatever still fits (every job asks for a
        // GPU at least: once none is left, nothing else does). Every job in
        // them is alive, so none needs looking up.
        let mut free = cluster.num_gpus();
        let mut run: Vec<Slot> = Vec::new();
        for q in &self.queues {
            if free == 0 {
                break;
            }
            for &(id, want) in q {
                if free == 0 {
                    break;
                }
                if want <= free {
                    free -= want;
                    run.push((id, want));
                }
            }
        }
        // Which of its jobs run, by one merge of the sorted ids.
        let mut running: Vec<JobId> = run.iter().map(|r| r.0).collect();
        running.sort_unstable();
        let mut runs = running.iter().peekable();
        for (id, e) in self.jobs.iter_mut() {
            while runs.next_if(|r| *r < id).is_some() {}
            e.running = runs.peek() == Some(&id);
            if e.running {
                e.waiting_since = None;
            } else if e.waiting_since.is_none() {
                e.waiting_since = Some(round.now_s);
            }
        }
        Schedule {
            entries: run
                .into_iter()
                .map(|(id, want)| Demand::new(id, want))
                .collect(),
            ..Schedule::default()
        }
    }

    fn sort_key(&self, job: &Job, jobs: &JobState) -> Option<String> {
        let e = self.jobs.get(&job.id())?;
        let gpus = jobs.get(job.id()).map_or(1, |j| j.requested_gpus()) as f64;
        Some(format!(
            "queue {} of {}, executed {}",
            e.queue + 1,
            self.queues.len(),
            blox_core::wait::gpu_time(e.executed_s * gpus)
        ))
    }
}

/// Takes each `(job, from, to)` out of queue `from` and appends it to queue
/// `to`, in the order given: what moving them one by one does, with one
/// pass over each queue left.
fn move_to_backs(queues: &mut [VecDeque<Slot>], moves: &[(Slot, usize, usize)]) {
    if moves.is_empty() {
        return;
    }
    for (q, queue) in queues.iter_mut().enumerate() {
        let mut leaving: Vec<JobId> = moves.iter().filter(|m| m.1 == q).map(|m| m.0 .0).collect();
        if !leaving.is_empty() {
            leaving.sort_unstable();
            queue.retain(|(id, _)| leaving.binary_search(id).is_err());
        }
    }
    for &(slot, _, to) in moves {
        queues[to].push_back(slot);
    }
}

blox_core::register_scheduling!(
    "tiresias",
    "discretised 2D-LAS: priority queues by GPU-time, no head-of-line blocking (Tiresias §3; Pollux artifact baseline)",
    |p| Ok(Box::new(Tiresias::new(p.parse::<TiresiasParams>()?)))
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    fn tiresias(threshold: f64) -> Tiresias {
        Tiresias::new(TiresiasParams {
            thresholds_gpu_s: vec![threshold],
            promote_knob: None,
        })
    }

    #[test]
    fn jobs_that_do_not_fit_are_skipped_not_blocking() {
        let cluster = ClusterState::homogeneous(1, 4);
        let mut state = JobState::new();
        let mut c = cluster.clone();
        add(&mut state, &mut c, job(1, 0.0, 3), &[]);
        add(&mut state, &mut c, job(2, 1.0, 2), &[]);
        add(&mut state, &mut c, job(3, 2.0, 1), &[]);
        let s = tiresias(100.0).schedule(&info(0.0), &state, &cluster);
        assert_eq!(s.job_order(), vec![JobId(1), JobId(3)]);
    }

    #[test]
    fn a_job_past_the_threshold_drops_behind_newer_jobs() {
        let cluster = ClusterState::homogeneous(1, 2);
        let mut state = JobState::new();
        let mut c = cluster.clone();
        add(&mut state, &mut c, job(1, 0.0, 2), &[]);
        let mut t = tiresias(2.0 * 300.0);
        assert_eq!(
            t.schedule(&info(0.0), &state, &cluster).job_order(),
            vec![JobId(1)]
        );
        add(&mut state, &mut c, job(2, 10.0, 2), &[]);
        // Job 1 ran 300 s on 2 GPUs = 600 GPU-s: demoted; job 2 takes the cluster.
        let s = t.schedule(&info(300.0), &state, &cluster);
        assert_eq!(s.job_order(), vec![JobId(2)]);
        // Job 2 is demoted in turn and queues behind job 1 in Q1.
        let s = t.schedule(&info(600.0), &state, &cluster);
        assert_eq!(s.job_order(), vec![JobId(1)]);
    }

    #[test]
    fn a_starving_job_is_promoted_back_to_the_top_queue() {
        let cluster = ClusterState::homogeneous(1, 2);
        let mut state = JobState::new();
        let mut c = cluster.clone();
        add(&mut state, &mut c, job(1, 0.0, 2), &[]);
        let mut t = Tiresias::new(TiresiasParams {
            thresholds_gpu_s: vec![600.0],
            promote_knob: Some(2.0),
        });
        t.schedule(&info(0.0), &state, &cluster);
        add(&mut state, &mut c, job(2, 10.0, 2), &[]);
        // Job 1 ran 300 s on 2 GPUs and is demoted; job 2 runs.
        assert_eq!(
            t.schedule(&info(300.0), &state, &cluster).job_order(),
            vec![JobId(2)]
        );
        // Job 2 ran 300 s: demoted behind job 1 in Q1; job 1 runs.
        assert_eq!(
            t.schedule(&info(600.0), &state, &cluster).job_order(),
            vec![JobId(1)]
        );
        // Job 2 has waited 300 s < 2 × 300 s: still behind.
        assert_eq!(
            t.schedule(&info(900.0), &state, &cluster).job_order(),
            vec![JobId(1)]
        );
        // At 600 s of waiting it is promoted to Q0 and runs ahead of job 1.
        assert_eq!(
            t.schedule(&info(1200.0), &state, &cluster).job_order(),
            vec![JobId(2)]
        );
    }

    proptest::proptest! {
        // Moving jobs together leaves every queue as moving them one at a
        // time (out of its queue, onto the back of the next) does.
        #[test]
        fn moving_together_is_moving_one_by_one(
            start in proptest::collection::vec(0usize..3, 0..30),
            picks in proptest::collection::vec((0usize..30, 0usize..3), 0..12),
        ) {
            let mut queues = vec![VecDeque::new(); 3];
            for (i, q) in start.iter().enumerate() {
                queues[*q].push_back((JobId(i as u64), 1 + i as u32 % 4));
            }
            // Each job moves at most once, in id order (as the round does).
            let mut moves: Vec<(Slot, usize, usize)> = Vec::new();
            let mut seen = std::collections::BTreeSet::new();
            for (i, to) in picks {
                if i < start.len() && seen.insert(i) {
                    moves.push(((JobId(i as u64), 1 + i as u32 % 4), start[i], to));
                }
            }
            moves.sort();
            let mut one_by_one = queues.clone();
            for &(slot, from, to) in &moves {
                one_by_one[from].retain(|x| x.0 != slot.0);
                one_by_one[to].push_back(slot);
            }
            move_to_backs(&mut queues, &moves);
            proptest::prop_assert_eq!(queues, one_by_one);
        }
    }
}
