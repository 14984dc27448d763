//! The job source: submissions join the loop as the cluster fits them, and
//! jobs restored after a restart once their previous launches stopped.

use super::*;

impl JobSource for ClusterBackend {
    fn poll_submissions(&mut self, _round: &RoundInfo) -> Result<Vec<JobSpec>, BackendError> {
        let mut h = lock(&self.hub);
        // Jobs restored after a restart join once the previous run's
        // launches must have stopped.
        if !h.held.is_empty() && self.hold_over {
            let held = std::mem::take(&mut h.held);
            for s in held.into_iter().rev() {
                let b = submission_bytes(&h, s.id.0);
                h.submissions.push_front(s, b);
            }
            h.held_on.clear();
        } else if !h.held.is_empty() {
            release_early(&mut h);
        }
        let cap = h.cluster_gpus;
        // Jobs larger than the cluster as it is now (workers still joining
        // after a restart) wait here.
        let out = h.submissions.take_where(|s| s.requested_gpus <= cap);
        // They wait in the loop now: counted against the bounds on
        // submissions until the round's end counts them afresh.
        h.waiting_total += out.len();
        for s in &out {
            let user = s.user.clone().unwrap_or_default();
            let bytes = h
                .jobs
                .get(&s.id.0)
                .and_then(|r| r.job.as_ref())
                .map_or(0, |j| prost::Message::encoded_len(j) as u64);
            h.waiting_bytes += bytes;
            *h.waiting_bytes_by_user.entry(user.clone()).or_default() += bytes;
            *h.waiting_by_user.entry(user).or_default() += 1;
        }
        Ok(out)
    }

    fn exhausted(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Queues the held jobs whose previous workers are all back (see
/// `Hub::restart_workers`) and did not report them: a worker registers
/// again only after what its lapsed lease stopped has exited, so nothing of
/// the job runs any more and its GPUs need not sit idle until the hold ends.
fn release_early(h: &mut super::super::Hub) {
    if h.restart_workers.is_empty() {
        return;
    }
    let back: HashSet<&str> = h
        .workers
        .values()
        .filter(|w| w.alive)
        .map(|w| w.address.as_str())
        .collect();
    let everyone = h
        .restart_workers
        .values()
        .all(|a| back.contains(a.as_str()));
    let reported: HashSet<u64> = h
        .workers
        .values()
        .flat_map(|w| w.reported.iter().filter_map(|r| r.launch.map(|l| l.job_id)))
        .chain(h.expected.values().flat_map(|s| s.iter().map(|(j, _)| *j)))
        .chain(h.in_doubt.keys().copied())
        .collect();
    let mut released = Vec::new();
    let mut keep = VecDeque::new();
    for s in std::mem::take(&mut h.held) {
        let id = s.id.0;
        let gone = match h.held_on.get(&id) {
            Some(on) => on.iter().all(|a| back.contains(a.as_str())),
            None => everyone,
        };
        if gone && !reported.contains(&id) {
            h.held_on.remove(&id);
            released.push(s);
        } else {
            keep.push_back(s);
        }
    }
    h.held = keep;
    if !released.is_empty() {
        tracing::info!(
            jobs = released.len(),
            "queued again before the restart hold ends: every worker they ran on registered again without them"
        );
        // Ahead of newer submissions, in id order, as at the hold's end.
        for s in released.into_iter().rev() {
            let b = submission_bytes(h, s.id.0);
            h.submissions.push_front(s, b);
        }
    }
}

/// The encoded size of job `id`'s submission in the job table, bytes (what
/// the intake's byte bounds count).
pub(in crate::scheduler) fn submission_bytes(h: &super::super::Hub, id: u64) -> u64 {
    h.jobs
        .get(&id)
        .and_then(|r| r.job.as_ref())
        .map_or(0, |j| prost::Message::encoded_len(j) as u64)
}
