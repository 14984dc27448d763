//! The job table: every job's record as persisted (status, placement,
//! counters), restored when the scheduler starts and updated after every
//! round from the loop's view (state changes at once, progress every 5 s).

use super::backend::ClusterBackend;
use super::jobs::{state_of, wire_status, CANCELLED};
use super::{lock, spec_of, unix_now, Hub};
use crate::proto::*;
use crate::record::Record;
use crate::store::StoreError;
use blox_core::*;
use rustc_hash::FxHashMap;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Sets `slot` to `job`'s wait reason as the Status RPC gives it, while it
/// waits (`words` reads the last round's order once for all jobs), in
/// place: a round rewrites every waiting job's words, into the buffer they
/// had. Returns whether its kind changed.
fn update_wait(
    words: &blox_core::round::WaitExplainer<'_>,
    job: &blox_core::Job,
    slot: &mut Option<crate::proto::WaitInfo>,
) -> bool {
    use blox_core::WaitReason;
    let Some(r) = job
        .wait
        .filter(|_| !job.status.is_terminal() && !job.is_running())
    else {
        return slot.take().is_some();
    };
    let (asked, position, ordered) = match r {
        WaitReason::WaitingForGpus { asked } => {
            let positions = words.positions();
            let p = positions.get(&job.id()).map(|p| p.0);
            (asked, p, positions.len() as u32)
        }
        WaitReason::BlockedByPlacement { asked } => (asked, None, 0),
        _ => (0, None, 0),
    };
    let w = slot.get_or_insert_with(Default::default);
    let changed = w.kind != r.kind();
    if changed {
        w.kind = r.kind().into();
    }
    words.explain_into(job, &mut w.reason);
    w.asked = asked;
    w.position = position;
    w.ordered = ordered;
    changed
}

/// Jobs and bytes that wait, in all and per user (under borrowed names).
#[derive(Default)]
struct Waiting<'a> {
    per_user: FxHashMap<&'a str, (usize, u64)>,
    total: usize,
    bytes: u64,
}

impl<'a> Waiting<'a> {
    fn add(&mut self, spec: &'a JobSpec, bytes: u64) {
        self.total += 1;
        self.bytes += bytes;
        let u = self
            .per_user
            .entry(spec.user.as_deref().unwrap_or(""))
            .or_default();
        u.0 += 1;
        u.1 += bytes;
    }
}

/// What one pass over the jobs found: the records to write at once
/// (state changes) and with the next flush (progress), jobs that ended,
/// and what waits.
struct Pass<'a> {
    urgent: Vec<u64>,
    dirty: Vec<u64>,
    ended: Vec<(u64, f64)>,
    waiting: Waiting<'a>,
}

/// Why the nodes kept out of service are out (`Status`'s node notes).
fn node_notes(health: &blox_core::health::Health, now_s: f64) -> HashMap<u32, String> {
    health
        .pool
        .iter()
        .map(|n| {
            (
                n.0,
                "a spare: kept out until a node failure stops a job ([cluster] spares)".to_string(),
            )
        })
        .chain(health.held.iter().map(|(n, until)| {
            (
                n.0,
                format!(
                    "quarantined: it failed too often ([cluster.quarantine]); back in {:.0} s",
                    (until - now_s).max(0.0)
                ),
            )
        }))
        .collect()
}

/// What waits, in all and per user (by owned names), as the hub keeps it
/// for the bounds on submissions.
struct WaitingTotals {
    by_user: HashMap<String, usize>,
    bytes_by_user: HashMap<String, u64>,
    total: usize,
    bytes: u64,
}

impl Waiting<'_> {
    /// The counts under owned names (one per user).
    fn totals(self) -> WaitingTotals {
        let by_user = (self.per_user.iter())
            .map(|(u, (n, _))| (u.to_string(), *n))
            .collect();
        let bytes_by_user = (self.per_user.iter())
            .map(|(u, (_, b))| (u.to_string(), *b))
            .collect();
        WaitingTotals {
            by_user,
            bytes_by_user,
            total: self.total,
            bytes: self.bytes,
        }
    }
}

impl WaitingTotals {
    fn store(self, h: &mut Hub) {
        h.waiting_total = self.total;
        h.waiting_by_user = self.by_user;
        h.waiting_bytes = self.bytes;
        h.waiting_bytes_by_user = self.bytes_by_user;
    }
}

impl ClusterBackend {
    /// Publishes the loop's view of every job (for `Status`) and persists the
    /// changes: state changes at once, progress and service every 5 s.
    pub(super) fn publish(&mut self, lp: &RoundLoop) -> Result<(), StoreError> {
        let now_s = self.now();
        let finished = lp.jobs.finished();
        let fresh = &finished[self.finished_seen.min(finished.len())..];
        self.finished_seen = finished.len();
        let mut h = lock(&self.hub);
        h.rounds = lp.rounds();
        h.policy = lp.policies.label();
        h.node_notes = node_notes(lp.cluster.health(), now_s);
        let workers = self.workers_to_write(&h);
        let Pass {
            urgent,
            dirty,
            ended,
            mut waiting,
        } = self.publish_jobs(&mut h, lp, fresh, now_s);
        for (id, at) in ended {
            h.push_ended(id, at);
        }
        for s in &h.held {
            waiting.add(s, h.jobs.submission_bytes(s.id.0));
        }
        waiting.totals().store(&mut h);
        let uid_holders = self.uid_changes(&mut h);
        let flush = self.last_flush.elapsed() >= Duration::from_secs(5);
        let mut ids = urgent;
        if flush || !ids.is_empty() {
            ids.extend(dirty);
        }
        // What a failed write left unwritten goes again, every round, until
        // the table takes it.
        ids.extend(std::mem::take(&mut self.unwritten));
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() && uid_holders.is_none() {
            drop(h);
            self.write_workers(workers);
            return Ok(());
        }
        let recs: Vec<JobRecord> = ids
            .iter()
            .filter_map(|id| h.jobs.get(id).cloned())
            .collect();
        // Written outside the hub's lock: an fsync must not stall heartbeats.
        drop(h);
        self.write_records(&recs, ids, uid_holders, flush);
        self.write_workers(workers);
        Ok(())
    }

    /// The workers in the cluster, for a restarted scheduler, when they
    /// changed since last written (until the restart hold ends, the
    /// previous run's too: a second restart still waits for them).
    fn workers_to_write(&self, h: &Hub) -> Option<std::collections::BTreeMap<String, String>> {
        let mut workers: std::collections::BTreeMap<String, String> = h
            .workers
            .iter()
            .filter(|(_, w)| w.alive && w.node.is_some())
            .map(|(id, w)| (id.clone(), w.address.clone()))
            .collect();
        if !self.hold_over {
            workers.extend(
                h.restart_workers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone())),
            );
        }
        (workers != self.workers_written).then_some(workers)
    }

    /// Job uids: a launch no longer running has ended (its uid is free
    /// once its nodes say so); the holders go to the table when they
    /// changed. (Before the restart hold ends, launches of the last run
    /// may still be adopted: their uids stay held meanwhile.)
    fn uid_changes(&self, h: &mut Hub) -> Option<Vec<(u32, super::uids::Holder)>> {
        if self.hold_over {
            let running: HashSet<(u64, u32)> = self
                .running
                .iter()
                .map(|(id, l)| (id.0, l.launch()))
                .collect();
            h.uids.end_not_running(&|j, l| running.contains(&(j, l)));
        }
        h.uids.take_changes()
    }

    /// Writes `recs` (the records of `ids`) and the uid holders in one
    /// transaction; a failure is retried with the next round.
    fn write_records(
        &mut self,
        recs: &[JobRecord],
        ids: Vec<u64>,
        uid_holders: Option<Vec<(u32, super::uids::Holder)>>,
        flush: bool,
    ) {
        let timer = self.metrics.table_write_seconds.start_timer();
        let written = self.store.write_with_uids(
            &recs.iter().collect::<Vec<_>>(),
            None,
            uid_holders.as_deref(),
        );
        timer.observe_duration();
        match written {
            Ok(()) => {
                if flush {
                    self.last_flush = Instant::now();
                }
                self.table_recovered();
            }
            // The loop goes on (running jobs keep running, Status answers);
            // the records are written once the table takes them.
            Err(e) => {
                self.table_failed(&e);
                self.unwritten = ids;
                // Written again with the next round; meanwhile the workers'
                // busy lists keep uids in use from being given.
                if uid_holders.is_some() {
                    lock(&self.hub).uids.mark_dirty();
                }
            }
        }
    }

    /// One pass over the loop's jobs (admitted, waiting for admission, and
    /// `fresh`ly ended): each record updated where it changed, the wait
    /// words of every waiting job, and what waits, per user.
    fn publish_jobs<'a>(
        &self,
        h: &mut Hub,
        lp: &'a RoundLoop,
        fresh: &'a [Job],
        now_s: f64,
    ) -> Pass<'a> {
        let mut urgent: Vec<u64> = Vec::new();
        let mut ended: Vec<(u64, f64)> = Vec::new();
        let mut dirty: Vec<u64> = Vec::new();
        let now_unix = unix_now();
        let words = lp.wait_explainer();
        let jobs = lp
            .jobs
            .active()
            .chain(lp.waiting().iter())
            .chain(fresh.iter());
        // What waits, for the bounds on submissions: jobs and bytes (per
        // user, counted under borrowed names: one owned name per user),
        // counted in the same pass.
        let mut waiting = Waiting::default();
        for j in jobs {
            let id = j.id().0;
            if matches!(j.status, JobStatus::Submitted | JobStatus::Queued) {
                waiting.add(&j.spec, h.jobs.submission_bytes(id));
            }
            let Some(mut rec) = h.jobs.get_mut(&id) else {
                continue;
            };
            let record = self.records.get(&j.id());
            let run_time_s = record.map_or(j.run_time_s, |r| r.run_time_s);
            let info = rec.info.as_mut().expect("records carry info");
            let status = wire_status(&j.status);
            let gpus: Vec<String> = j
                .allocation
                .iter()
                .filter(|_| !j.status.is_terminal())
                .map(|g| match self.gpu_map.get(g.index()) {
                    Some((n, i)) => format!("{}:{i}", self.nodes[*n]),
                    None => g.to_string(),
                })
                .collect();
            let reason = j.end_reason.clone().unwrap_or_default();
            let launches = record.map_or(0, |r| r.launches.saturating_sub(r.refused));
            let warning = j.warning.clone().unwrap_or_default();
            let state = state_of(j);
            let changed_state = info.phase() != state
                || info.status != status
                || info.gpus != gpus
                || info.gpu_milli != j.gpu_share.filter(|_| !gpus.is_empty())
                || info.launches != launches
                || info.reason != reason
                || info.warning != warning;
            // The words of a wait (free GPUs, the place in the order) change
            // most rounds: Status always shows the current ones, the job table
            // stores them with the job's other changes or when the kind changes.
            let wait_kind_changed = update_wait(&words, j, &mut info.wait);
            let changed = changed_state
                || wait_kind_changed
                || info.progress != j.progress
                || info.attained_gpu_s != j.attained_service_gpu_s
                || info.startup_gpu_s != j.startup_gpu_s
                || info.lost_work_gpu_s != j.lost_work_gpu_s
                || info.interruptions != j.interruptions
                || (info.first_start_unix_s.is_none() && j.first_start_s.is_some());
            if !changed {
                continue;
            }
            info.status = status.into();
            info.set_phase(state);
            info.gpu_milli = j.gpu_share.filter(|_| !gpus.is_empty());
            info.gpus = gpus;
            info.launches = launches;
            info.preemptions = j.preemptions;
            info.progress = j.progress;
            info.attained_gpu_s = j.attained_service_gpu_s;
            info.reason = reason;
            info.startup_s = j.startup_s;
            info.startup_gpu_s = j.startup_gpu_s;
            info.lost_work_gpu_s = j.lost_work_gpu_s;
            info.interruptions = j.interruptions;
            info.warning = warning;
            if info.first_start_unix_s.is_none() {
                info.first_start_unix_s = j.first_start_s.map(|f| now_unix - (now_s - f).max(0.0));
            }
            if let Some(f) = j.finish_s.filter(|_| j.status.is_terminal()) {
                let at = now_unix - (now_s - f).max(0.0);
                if info.finished_unix_s.is_none() {
                    ended.push((id, at));
                    if let Some(e) = j.ettr().filter(|_| j.status == JobStatus::Finished) {
                        self.metrics.job_ettr.observe(e);
                    }
                }
                info.ettr = j.ettr().filter(|_| j.status == JobStatus::Finished);
                info.finished_unix_s = Some(at);
                info.jct_s = Some((f - j.spec.arrival_s).max(0.0));
            }
            rec.run_time_s = run_time_s;
            if changed_state {
                urgent.push(id);
            } else {
                dirty.push(id);
            }
        }
        Pass {
            urgent,
            dirty,
            ended,
            waiting,
        }
    }

    /// Records the workers in the cluster when they changed; a failure is
    /// logged and tried again next round (a restarted scheduler without the
    /// record only waits out its whole hold).
    fn write_workers(&mut self, workers: Option<std::collections::BTreeMap<String, String>>) {
        let Some(w) = workers else {
            return;
        };
        match self.store.write_workers(&w) {
            Ok(()) => self.workers_written = w,
            Err(e) => tracing::warn!(
                "{e}: the workers in the cluster were not recorded; tried again next round"
            ),
        }
    }

    /// A job table write failed: said once (and in `Status`'s
    /// `last_error`), counted, and retried every round.
    fn table_failed(&mut self, e: &StoreError) {
        self.metrics.table_write_failures.inc();
        let mut h = lock(&self.hub);
        if h.table_error.is_none() {
            tracing::error!("{e}: the job table cannot be written; running jobs go on, new submissions get UNAVAILABLE, and the writes are retried every round");
        }
        h.table_error = Some(e.to_string());
        h.last_error = format!("job table: {e} (retried every round)");
    }

    fn table_recovered(&mut self) {
        let mut h = lock(&self.hub);
        if h.table_error.take().is_some() {
            tracing::info!("the job table takes writes again");
            h.last_error.clear();
        }
    }
}

/// Puts the job table's records into `hub`: every accepted, unfinished job
/// is queued again (its JCT still counts from its submission, its service so
/// far is kept). Returns the backend's records of those jobs and their count.
pub(super) fn restore(
    hub: &mut Hub,
    records: Vec<JobRecord>,
) -> (rustc_hash::FxHashMap<JobId, Record>, usize) {
    let mut seeded = rustc_hash::FxHashMap::default();
    let mut restored = 0;
    for mut r in records {
        let info = r.info.clone().unwrap_or_default();
        let status = info.status.parse::<JobStatus>();
        if status.is_err() {
            tracing::warn!(
                job = info.id,
                "the job table has an unknown status `{}`; the job is queued again",
                info.status
            );
        }
        if let (Ok(st), Some(i)) = (&status, r.info.as_mut()) {
            // Tables written before `state` existed.
            if i.phase() == JobPhase::Unspecified {
                let mut j = Job::new(JobSpec::new(i.id, 0.0, 1));
                j.status = st.clone();
                // Older tables wrote a cancelled job as failed, "cancelled".
                if j.status == JobStatus::Failed && i.reason == CANCELLED {
                    j.status = JobStatus::Cancelled;
                }
                j.end_reason = Some(i.reason.clone());
                i.set_phase(state_of(&j));
            }
        }
        let ended = status.as_ref().is_ok_and(|s| s.is_terminal());
        if !ended {
            let Some(sub) = r.job.clone() else { continue };
            let arrival = -(unix_now() - info.submitted_unix_s).max(0.0);
            hub.held.push_back(spec_of(info.id, &sub, arrival));
            seeded.insert(
                JobId(info.id),
                Record {
                    launches: info.launches,
                    refused: 0,
                    sent: info.launches,
                    crashes: 0,
                    run_time_s: r.run_time_s,
                    attained_gpu_s: info.attained_gpu_s,
                    startup_s: info.startup_s,
                    startup_gpu_s: info.startup_gpu_s,
                    lost_work_gpu_s: info.lost_work_gpu_s,
                },
            );
            if let Some(i) = r.info.as_mut() {
                // The workers it ran on, by address: once they are back
                // without it, it is queued at once (unknown ones: it waits
                // out the hold).
                let ids: HashSet<&str> = i
                    .gpus
                    .iter()
                    .filter_map(|g| g.rsplit_once(':').map(|(w, _)| w))
                    .collect();
                let on: Option<HashSet<String>> = ids
                    .iter()
                    .map(|w| hub.restart_workers.get(*w).cloned())
                    .collect();
                if let Some(on) = on.filter(|o| !o.is_empty()) {
                    let mut on: Vec<String> = on.into_iter().collect();
                    on.sort();
                    hub.held_on.insert(info.id, on);
                }
                i.status = JobStatus::Submitted.as_str().into();
                i.set_phase(JobPhase::Submitted);
                // Its work so far is kept; what it waits for, said.
                i.wait = Some(WaitInfo {
                    kind: "held".into(),
                    reason: if i.gpus.is_empty() {
                        "the scheduler restarted: queued again once the previous run's workers register again (at most worker_timeout_s)".into()
                    } else {
                        "the scheduler restarted: adopted if its workers still run it, else queued again once they register again (at most worker_timeout_s); its work so far is kept".into()
                    },
                    ..Default::default()
                });
                i.gpus.clear();
                i.gpu_milli = None;
            }
            restored += 1;
        }
        if let Some(j) = r.job.as_ref() {
            if !j.idempotency_key.is_empty() {
                hub.keys.insert(
                    super::key_of(j.user.as_deref(), &j.idempotency_key),
                    info.id,
                );
            }
        }
        let (id, at) = (
            info.id,
            info.finished_unix_s.unwrap_or(info.submitted_unix_s),
        );
        hub.jobs.insert(id, r);
        if ended {
            hub.push_ended(id, at);
        }
    }
    hub.ended
        .make_contiguous()
        .sort_by(|a, b| a.1.total_cmp(&b.1));
    debug_assert_eq!(hub.ended_bytes, hub.ended.iter().map(|e| e.2).sum::<u64>());
    (seeded, restored)
}

impl ClusterBackend {
    /// Forgets ended jobs past their retention (the oldest first, and any
    /// beyond `retention_jobs`): from the job table, the status view, the
    /// idempotency keys and the loop's record of ended jobs.
    pub(super) fn compact(&mut self, lp: &mut RoundLoop) -> Result<(), StoreError> {
        let dropped = lp.jobs.forget_finished(FINISHED_KEPT_BY_THE_LOOP);
        self.finished_seen = self.finished_seen.saturating_sub(dropped);
        let cutoff = unix_now() - self.cfg.retention_s;
        let popped: Vec<(u64, f64, u64)> = {
            let mut h = lock(&self.hub);
            let mut popped = Vec::new();
            while let Some(&(id, at, bytes)) = h.ended.front() {
                if h.ended.len() <= self.cfg.retention_jobs
                    && at >= cutoff
                    && h.ended_bytes <= self.cfg.retention_bytes as u64
                {
                    break;
                }
                h.ended.pop_front();
                h.ended_bytes -= bytes;
                popped.push((id, at, bytes));
            }
            popped
        };
        let ids: Vec<u64> = popped.iter().map(|p| p.0).collect();
        if ids.is_empty() {
            return Ok(());
        }
        // Gone from disk first: a crash now loses nothing still wanted. A
        // table that takes no writes keeps them all until it does.
        if let Err(e) = self.store.remove(&ids) {
            self.table_failed(&e);
            let mut h = lock(&self.hub);
            for p in popped.into_iter().rev() {
                h.ended_bytes += p.2;
                h.ended.push_front(p);
            }
            return Ok(());
        }
        let mut h = lock(&self.hub);
        for id in &ids {
            if let Some(r) = h.jobs.remove(id) {
                if let Some(j) = r.job.as_ref() {
                    h.keys
                        .remove(&super::key_of(j.user.as_deref(), &j.idempotency_key));
                }
            }
            self.records.remove(&JobId(*id));
        }
        h.compacted += ids.len() as u64;
        tracing::debug!(
            jobs = ids.len(),
            "ended jobs past their retention forgotten"
        );
        Ok(())
    }
}

/// Ended jobs the loop keeps (policies do not read them; `Status` reads the
/// job table).
const FINISHED_KEPT_BY_THE_LOOP: usize = 1000;
