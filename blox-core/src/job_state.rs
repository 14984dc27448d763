//! `JobState`: every admitted, unfinished job plus the record of finished ones, and a
//! concurrent key→value metric store for what a single policy needs.

use crate::ids::JobId;
use crate::job::{Job, JobStatus};
pub use crate::metric_store::{JobMetrics, MetricStore};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod ended;

/// Admitted jobs (queued or running), finished records and per-job metrics.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct JobState {
    /// Boxed: a B-tree shifts its values on every insert and removal, and
    /// a `Job` is several hundred bytes.
    active: BTreeMap<JobId, Box<Job>>,
    finished: Vec<Job>,
    metrics: MetricStore,
    /// Ids of ended jobs no longer held whole (taken out of `finished`),
    /// so that a decision naming one is still told that it ended.
    #[serde(default, skip_serializing_if = "ended::EndedIds::is_empty")]
    ended_before: ended::EndedIds,
}

impl Clone for JobState {
    /// A full, independent copy (what a forked simulation needs).
    fn clone(&self) -> Self {
        self.fork()
    }
}

impl JobState {
    pub fn new() -> Self {
        Self::default()
    }

    /// Deep copy, metrics included, sharing nothing with `self`.
    pub fn fork(&self) -> Self {
        JobState {
            active: self.active.clone(),
            finished: self.finished.clone(),
            metrics: self.metrics.deep_clone(),
            ended_before: self.ended_before.clone(),
        }
    }

    /// Adds an admitted job (status becomes `Queued` unless already running).
    pub fn insert(&mut self, mut job: Job) {
        if job.status == JobStatus::Submitted {
            job.status = JobStatus::Queued;
        }
        self.active.insert(job.id(), Box::new(job));
    }

    pub fn get(&self, id: JobId) -> Option<&Job> {
        self.active.get(&id).map(|j| &**j)
    }

    pub fn get_mut(&mut self, id: JobId) -> Option<&mut Job> {
        self.active.get_mut(&id).map(|j| &mut **j)
    }

    /// Admitted, unfinished jobs in id order.
    pub fn active(&self) -> impl Iterator<Item = &Job> {
        self.active.values().map(|j| &**j)
    }

    pub fn active_mut(&mut self) -> impl Iterator<Item = &mut Job> {
        self.active.values_mut().map(|j| &mut **j)
    }

    /// The admitted jobs among `ids` (sorted, without repeats), in id order:
    /// one walk over the active jobs between the first and the last id
    /// instead of a lookup per id (a simulator reporting every running
    /// job's progress every round).
    pub fn active_mut_among<'a>(
        &'a mut self,
        ids: &'a [JobId],
    ) -> impl Iterator<Item = &'a mut Job> + 'a {
        debug_assert!(ids.windows(2).all(|w| w[0] < w[1]));
        let range = match (ids.first(), ids.last()) {
            (Some(&a), Some(&b)) => Some(self.active.range_mut(a..=b)),
            _ => None,
        };
        let mut want = ids.iter().peekable();
        range.into_iter().flatten().filter_map(move |(id, job)| {
            while want.next_if(|w| **w < *id).is_some() {}
            want.next_if(|w| **w == *id).map(|_| &mut **job)
        })
    }

    /// Jobs a scheduler may run this round (queued or running), in id order.
    pub fn runnable(&self) -> impl Iterator<Item = &Job> {
        self.active
            .values()
            .map(|j| &**j)
            .filter(|j| matches!(j.status, JobStatus::Queued | JobStatus::Running))
    }

    pub fn running(&self) -> impl Iterator<Item = &Job> {
        self.active
            .values()
            .map(|j| &**j)
            .filter(|j| j.is_running())
    }

    pub fn queued(&self) -> impl Iterator<Item = &Job> {
        self.active
            .values()
            .map(|j| &**j)
            .filter(|j| j.status == JobStatus::Queued)
    }

    /// Jobs that have ended (finished, failed or rejected), in the order they
    /// ended. A long run keeps only the newest whole: the live scheduler
    /// its last 1,000, a simulation its last 4,096 and every job that ended
    /// in the round just run (the rest are already its table rows). A
    /// policy that learns from ended jobs reads them in the round they end.
    pub fn finished(&self) -> &[Job] {
        &self.finished
    }

    /// Takes the ended records out (a run that is done, turning them into
    /// its tables); their metrics stay.
    pub fn take_finished(&mut self) -> Vec<Job> {
        self.note_ended_before(self.finished.len());
        std::mem::take(&mut self.finished)
    }

    /// Takes the oldest ended records out, in the order they ended, leaving
    /// the newest `keep`; unlike [`forget_finished`](Self::forget_finished)
    /// their metrics stay. A simulation turns them into table rows as it
    /// goes instead of holding every ended job whole (ten million of them
    /// are 6 GB).
    pub fn drain_finished_oldest(&mut self, keep: usize) -> std::vec::Drain<'_, Job> {
        let n = self.finished.len().saturating_sub(keep);
        self.note_ended_before(n);
        self.finished.drain(..n)
    }

    /// Remembers the ids of the oldest `n` ended records, about to go.
    fn note_ended_before(&mut self, n: usize) {
        for j in &self.finished[..n] {
            self.ended_before.insert(j.id().0);
        }
    }

    /// Records a job that never became active (e.g. rejected at submission).
    pub fn record_ended(&mut self, job: Job) {
        debug_assert!(job.status.is_terminal());
        self.metrics.archive(job.id());
        self.finished.push(job);
    }

    pub fn num_active(&self) -> usize {
        self.active.len()
    }

    pub fn is_empty(&self) -> bool {
        self.active.is_empty()
    }

    /// The concurrent metric store (clone the handle to push from another thread).
    pub fn metrics(&self) -> &MetricStore {
        &self.metrics
    }

    /// Moves every job with a terminal status to the finished record and returns
    /// their ids (step 3 of the round). Their metrics stay readable.
    pub fn prune_finished(&mut self) -> Vec<JobId> {
        self.prune_finished_and_requeued().0
    }

    /// [`prune_finished`](Self::prune_finished), and in the same pass over
    /// the active jobs, the queued jobs that still hold an allocation (a
    /// backend sent them back while they held GPUs): the loop's step 3
    /// looks at every active job once, not twice.
    pub fn prune_finished_and_requeued(&mut self) -> (Vec<JobId>, Vec<JobId>) {
        let mut done = Vec::new();
        let mut requeued = Vec::new();
        for j in self.active.values() {
            if j.status.is_terminal() {
                done.push(j.id());
            } else if j.status == JobStatus::Queued
                && (!j.allocation.is_empty() || j.host_node.is_some())
            {
                requeued.push(j.id());
            }
        }
        self.move_to_finished(&done);
        (done, requeued)
    }

    fn move_to_finished(&mut self, done: &[JobId]) {
        for id in done {
            if let Some(job) = self.active.remove(id) {
                self.finished.push(*job);
                self.metrics.archive(*id);
            }
        }
    }

    /// Forgets the oldest ended records (and their metrics) beyond the newest
    /// `keep`, returning how many went. For a scheduler that runs for
    /// months; a simulation keeps their metrics and turns the records into
    /// its table rows instead ([`drain_finished_oldest`](Self::drain_finished_oldest)).
    pub fn forget_finished(&mut self, keep: usize) -> usize {
        let n = self.finished.len().saturating_sub(keep);
        self.note_ended_before(n);
        for j in self.finished.drain(..n) {
            self.metrics.remove_job(j.id());
        }
        n
    }

    /// Finished record of a job, if it has ended. Searched from the most
    /// recent end backwards: callers ask about jobs that ended lately.
    pub fn finished_job(&self, id: JobId) -> Option<&Job> {
        self.finished.iter().rev().find(|j| j.id() == id)
    }

    /// Whether job `id` has ended, its record still held or not (a
    /// decision naming a job that ended long ago is told so; an id cannot
    /// come back). Ids of records no longer held cost one entry per run
    /// of consecutive ids.
    pub fn has_ended(&self, id: JobId) -> bool {
        self.ended_before.contains(id.0) || self.finished_job(id).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobSpec;

    #[test]
    fn metrics_can_be_pushed_from_another_thread_while_state_is_read() {
        let mut state = JobState::new();
        state.insert(Job::new(JobSpec::new(1, 0.0, 1)));
        let handle = state.metrics().clone();
        let t = std::thread::spawn(move || {
            for i in 0..1000 {
                handle.add(JobId(1), "iterations", 1.0);
                handle.set(JobId(1), "loss", 1.0 / (i + 1) as f64);
            }
        });
        // The round keeps reading state while the pusher writes.
        for _ in 0..100 {
            assert_eq!(state.runnable().count(), 1);
        }
        t.join().unwrap();
        assert_eq!(state.metrics().get(JobId(1), "iterations"), Some(1000.0));
    }

    #[test]
    fn a_job_stays_ended_after_its_record_goes() {
        let mut state = JobState::new();
        for id in 0..6 {
            let mut job = Job::new(JobSpec::new(id, 0.0, 1));
            job.status = JobStatus::Finished;
            state.record_ended(job);
        }
        state.insert(Job::new(JobSpec::new(9, 0.0, 1)));
        assert_eq!(state.drain_finished_oldest(4).count(), 2);
        assert_eq!(state.forget_finished(2), 2);
        assert_eq!(state.finished().len(), 2);
        for id in 0..6 {
            assert!(state.has_ended(JobId(id)), "job-{id}");
        }
        assert!(!state.has_ended(JobId(9)) && !state.has_ended(JobId(6)));
        assert!(state.fork().has_ended(JobId(0)));
        state.take_finished();
        assert!(state.has_ended(JobId(5)));
        // Six ids in a row: one run.
        assert_eq!(state.ended_before.runs(), 1);
    }

    #[test]
    fn fork_is_independent_of_the_original() {
        let mut state = JobState::new();
        state.insert(Job::new(JobSpec::new(7, 0.0, 2)));
        state.metrics().set(JobId(7), "loss", 2.0);
        let fork = state.fork();
        state.metrics().set(JobId(7), "loss", 1.0);
        state.get_mut(JobId(7)).unwrap().progress = 0.5;
        assert_eq!(fork.metrics().get(JobId(7), "loss"), Some(2.0));
        assert_eq!(fork.get(JobId(7)).unwrap().progress, 0.0);
    }

    #[test]
    fn literal_and_owned_metric_names_are_the_same_metric() {
        let store = MetricStore::default();
        let id = JobId(3);
        store.update(id, |m| {
            m.set_static("throughput", 1.0);
            m.set_static("epochs_done", 2.0);
        });
        // A name built at run time finds the literal's entry, and back.
        let name = String::from("through") + "put";
        store.set(id, &name, 5.0);
        assert_eq!(store.get(id, "throughput"), Some(5.0));
        store.update(id, |m| m.set_static("throughput", 6.0));
        assert_eq!(store.get(id, &name), Some(6.0));
        assert_eq!(store.key_count(id), 2);
        store.update(id, |m| {
            m.remove(&name);
            assert_eq!(m.get("throughput"), None);
            assert_eq!(m.get("epochs_done"), Some(2.0));
        });
        store.add(id, "epochs_done", 1.0);
        let all = store.of_job(id);
        assert_eq!(
            all.into_iter().collect::<Vec<_>>(),
            vec![("epochs_done".to_string(), 3.0)]
        );
        // Survives a fork.
        let copy = store.deep_clone();
        store.set(id, "epochs_done", 9.0);
        assert_eq!(copy.get(id, "epochs_done"), Some(3.0));
    }

    #[test]
    fn prune_moves_terminal_jobs_to_the_record() {
        let mut state = JobState::new();
        state.insert(Job::new(JobSpec::new(1, 0.0, 1)));
        state.insert(Job::new(JobSpec::new(2, 0.0, 1)));
        state.get_mut(JobId(1)).unwrap().status = JobStatus::Finished;
        assert_eq!(state.prune_finished(), vec![JobId(1)]);
        assert_eq!(state.num_active(), 1);
        assert_eq!(state.finished()[0].id(), JobId(1));
        state.metrics().set(JobId(1), "loss", 1.0);
        assert_eq!(state.forget_finished(1), 0);
        assert_eq!(state.forget_finished(0), 1);
        assert!(state.finished().is_empty());
        assert_eq!(state.metrics().get(JobId(1), "loss"), None);
    }
}
