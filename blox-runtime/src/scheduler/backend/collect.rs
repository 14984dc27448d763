//! Metric collection: each round folds in the metrics, exits and
//! cancellations that arrived, and settles the jobs' records.

use super::*;

impl MetricCollector for ClusterBackend {
    fn collect_metrics(
        &mut self,
        _round: &RoundInfo,
        jobs: &mut JobState,
    ) -> Result<(), BackendError> {
        let (exits, metrics, cancels) = {
            let mut h = lock(&self.hub);
            let cancels: Vec<(u64, String)> = h
                .cancels
                .iter()
                .filter(|(id, _)| jobs.get(JobId(**id)).is_some())
                .map(|(k, v)| (*k, v.clone()))
                .collect();
            for (id, _) in &cancels {
                h.cancels.remove(id);
            }
            (
                std::mem::take(&mut h.exits),
                std::mem::take(&mut h.metrics),
                cancels,
            )
        };
        let now = self.now();
        let mut dropped = 0;
        for s in metrics.into_values().flatten() {
            let l = s.launch.expect("checked on receipt");
            let id = JobId(l.job_id);
            if let Some(live) = self.running.get_mut(&id).filter(|x| x.launch == l.launch) {
                live.clock.on_metric(&s.key, s.value, now);
            }
            if let Some(j) = jobs.get_mut(id) {
                if s.key == metric::PROGRESS {
                    j.progress = s.value.clamp(0.0, 1.0);
                }
                // Distinct keys per job are bounded as in a submission.
                let m = jobs.metrics();
                if m.get(id, &s.key).is_none() && m.key_count(id) >= MAX_JOB_METRIC_KEYS {
                    dropped += 1;
                    continue;
                }
                m.set(id, &s.key, s.value);
            }
        }
        if dropped > 0 {
            lock(&self.hub).metrics_dropped += dropped;
        }
        for (r, at) in exits {
            let l = r.launch.expect("checked on receipt");
            let id = JobId(l.job_id);
            let at_s = self.at_s(at);
            let current = self.running.get(&id).is_some_and(|x| x.launch == l.launch);
            if !current {
                // A launch that was already revoked: only its finish
                // matters, and only while no other launch of the job runs
                // (that one ends the job itself; a stale report must not
                // end it under it or free its GPUs).
                if r.finished && !self.running.contains_key(&id) {
                    self.ended.push(Ended::finished(id, at_s));
                } else {
                    tracing::info!(job = %id, launch = l.launch, finished = r.finished, "exit report of a launch that is not the job's current one: ignored");
                }
                continue;
            }
            if r.finished {
                let live = self.running.get_mut(&id).expect("checked above");
                live.parts_left = live.parts_left.saturating_sub(1);
                if live.parts_left > 0 {
                    continue;
                }
                live.clock.finished();
                let live = self.retire(id, at_s).expect("checked above");
                self.forget_expected(id, &live);
                self.ended.push(Ended::finished(id, at_s));
                self.metrics.exits.with_label_values(&["finished"]).inc();
            } else {
                let live = self.retire(id, at_s).expect("checked above");
                // A failing part takes the others down.
                self.revoke_parts(id, &live, true);
                let reason = (!r.reason.is_empty()).then(|| r.reason.clone());
                let mut e = Ended::crashed(id, at_s, r.code, reason);
                // Fenced by its worker (lease lost): not the job's fault.
                e.blame = !r.fenced;
                self.ended.push(e);
                let outcome = if r.fenced { "fenced" } else { "crashed" };
                self.metrics.exits.with_label_values(&[outcome]).inc();
            }
        }
        for (id, reason) in cancels {
            let id = JobId(id);
            if let Some(live) = self.retire(id, now) {
                self.revoke_parts(id, &live, true);
            }
            if let Some(j) = jobs.get_mut(id) {
                if !j.status.is_terminal() {
                    j.status = JobStatus::Cancelled;
                    j.finish_s = Some(now);
                    j.end_reason = Some(reason);
                }
            }
        }
        let max_startup_s = self.max_startup_s();
        for live in self.running.values_mut() {
            live.clock.advance(now);
            live.clock.give_up_waiting(now, max_startup_s);
        }
        let ended = std::mem::take(&mut self.ended);
        let live = self.running.iter().map(|(id, l)| (*id, &l.clock));
        settle(ended, &mut self.records, live, jobs, self.cfg.max_retries);
        Ok(())
    }
}
