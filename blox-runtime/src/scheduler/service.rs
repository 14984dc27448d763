//! The `Scheduler` gRPC service: submissions (durable before they are
//! acknowledged), status, cancellation, worker registration, heartbeats,
//! exit reports and metric pushes. Handlers only record what arrived in the
//! shared [`Hub`]; the round driver acts on it.
//!
//! This file holds the handlers; `submission` what a submission is checked
//! against and how refusals read, `callers` which worker a call comes from.

use super::jobs::{info_of, CANCELLED};
use super::{lock, unix_now, Hub, RuntimeConfig, SharedHub, WorkerEntry};
use crate::auth::{principal, Role};
use crate::net::{CheckToken, Security};
use crate::proto::scheduler_server::Scheduler;
use crate::proto::*;
use crate::store::Store;
use crate::validate;
use blox_core::*;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::{Request, Response, Status};

mod callers;
mod submission;

use callers::{caller, worker_known, WORKER};
pub(super) use submission::spec_of;
use submission::{retried, submit_as, table_unavailable, Bounds};

/// A copy of job `id`'s record (it exists: checked by the caller).
fn rec_of(h: &Hub, id: u64) -> JobRecord {
    h.jobs.get(&id).expect("checked by the caller").clone()
}

/// The most samples of one job kept between two rounds (the oldest go).
const MAX_JOB_SAMPLES_PER_ROUND: usize = 1024;

pub(super) struct Service {
    pub(super) hub: SharedHub,
    pub(super) store: Arc<Store>,
    pub(super) start: Instant,
    pub(super) cfg: RuntimeConfig,
    /// The shared checkpoint storage's probe file and its content.
    pub(super) probe: Option<(String, String)>,
    /// How the scheduler reaches workers (the workers' token).
    pub(super) security: Security,
    /// The workers' token (`Register`, `Heartbeat`, `ReportExit`,
    /// `PushMetrics`); users are told apart by the gate
    /// ([`crate::auth::SchedulerGate`]) before a handler runs.
    pub(super) workers: CheckToken,
    /// The round loop's timings (for `Status`).
    pub(super) stats: Arc<std::sync::Mutex<super::RoundStats>>,
    pub(super) metrics: Arc<super::metrics::Metrics>,
    /// The round period: a full queue frees up a round later at the soonest.
    pub(super) round_s: f64,
}

#[tonic::async_trait]
impl Scheduler for Service {
    async fn submit(&self, req: Request<SubmitRequest>) -> Result<Response<SubmitReply>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        validate::submit(&r)?;
        let mut j = r.job.expect("checked by validate::submit");
        submit_as(&who, &mut j)?;
        // Keys are each user's own: another user's key is another key.
        let key = (!j.idempotency_key.is_empty())
            .then(|| super::key_of(j.user.as_deref(), &j.idempotency_key));
        let id = {
            let mut h = lock(&self.hub);
            if let Some(answer) = key.as_ref().and_then(|k| retried(&h, k, &j)) {
                return answer.map(|id| Response::new(SubmitReply { job_id: id }));
            }
            let bounds = Bounds {
                cfg: &self.cfg,
                round_s: self.round_s,
            };
            bounds.check(&h, &j)?;
            h.next_job_id += 1;
            let id = h.next_job_id - 1;
            if let Some(k) = &key {
                h.keys.insert(k.clone(), id);
            }
            id
        };
        let spec = spec_of(id, &j, self.start.elapsed().as_secs_f64());
        let bytes = prost::Message::encoded_len(&j) as u64;
        let rec = JobRecord {
            info: Some(JobInfo {
                id,
                name: spec.name.clone(),
                status: JobStatus::Submitted.as_str().into(),
                phase: JobPhase::Submitted.into(),
                requested_gpus: j.gpus,
                submitted_unix_s: unix_now(),
                // Kept once, in the submission: filled in for Status.
                duration_s: j.duration_s,
                ..Default::default()
            }),
            job: Some(j),
            run_time_s: 0.0,
        };
        // Durable before it is acknowledged or scheduled; written outside the
        // hub's lock (an fsync must not stall heartbeats). In a task of its
        // own: a caller that gives up (its deadline passes, its connection
        // drops) drops this handler, but the write and its outcome in the
        // hub still complete. Else the key would stay held by a job neither
        // written nor refused, and every retry be told "being written".
        let (store, hub, metrics) = (self.store.clone(), self.hub.clone(), self.metrics.clone());
        let commit = tokio::spawn(async move {
            let timer = metrics.table_write_seconds.start_timer();
            let written = tokio::task::spawn_blocking(move || store.submit(rec, id + 1))
                .await
                .map_err(|e| Status::internal(e.to_string()))
                .and_then(|r| r.map_err(table_unavailable));
            let mut h = lock(&hub);
            match written {
                Ok(rec) => {
                    timer.observe_duration();
                    h.jobs.insert(id, rec);
                    h.submissions.push_back(spec, bytes);
                    metrics.submissions.inc();
                    tracing::info!(job = id, "submitted");
                    Ok(id)
                }
                Err(e) => {
                    if let Some(k) = &key {
                        h.keys.remove(k);
                    }
                    Err(e)
                }
            }
        });
        let id = commit
            .await
            .map_err(|e| Status::internal(e.to_string()))??;
        Ok(Response::new(SubmitReply { job_id: id }))
    }

    async fn status(&self, req: Request<StatusRequest>) -> Result<Response<StatusReply>, Status> {
        let who = principal(&req)?;
        if who.role == Role::Reader {
            return Err(Status::permission_denied(
                "a reader's token reads /metrics and the dashboard, not Status",
            ));
        }
        let r = req.into_inner();
        validate::status(&r)?;
        // Computed by the round thread, not here: Status is called often.
        let (p50, p99) = {
            let s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
            (s.round_p50_s, s.round_p99_s)
        };
        let h = lock(&self.hub);
        let mut reply = super::status::reply_for(&h, &r, &who)?;
        reply.round_p50_s = p50;
        reply.round_p99_s = p99;
        Ok(Response::new(reply))
    }

    async fn cancel(&self, req: Request<CancelRequest>) -> Result<Response<CancelReply>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        validate::cancel(&r)?;
        let id = r.job_id;
        // Under the lock: check, and either hand the cancellation to the
        // loop or take a job the loop has not seen out of the queue.
        let taken = {
            let mut h = lock(&self.hub);
            // Another tenant's job is not known to this one.
            let Some(rec) = h
                .jobs
                .get(&id)
                .filter(|r| who.may_touch(r.job.as_ref().and_then(|j| j.user.as_deref())))
            else {
                return Err(Status::not_found(format!("job {id} is not known")));
            };
            let info = info_of(rec);
            if info
                .status
                .parse::<JobStatus>()
                .is_ok_and(|s| s.is_terminal())
            {
                // (A cancelled job's status word is "failed", for old
                // clients; its phase says what happened.)
                let how = if info.phase() == JobPhase::Cancelled {
                    "cancelled"
                } else {
                    info.status.as_str()
                };
                return Err(Status::failed_precondition(format!(
                    "job {id} already ended ({how})"
                )));
            }
            let queued = h.submissions.remove(id);
            let held = h.held.iter().position(|s| s.id.0 == id);
            match (queued, held) {
                (Some((spec, _)), _) => Some((spec, rec_of(&h, id), false)),
                (None, Some(pos)) => {
                    let spec = h.held.remove(pos).expect("found above");
                    Some((spec, rec_of(&h, id), true))
                }
                (None, None) => {
                    h.cancels.insert(id, CANCELLED.into());
                    None
                }
            }
        };
        if let Some((spec, mut rec, from_held)) = taken {
            // Not handed to the loop yet: it ends here. It left the queue at
            // once (the loop must not start it); the table is written outside
            // the lock (an fsync must not stall heartbeats), and the status
            // view changes only once the write succeeded.
            let info = rec.info.as_mut().expect("records carry info");
            info.status = super::jobs::wire_status(&JobStatus::Cancelled).into();
            info.set_phase(JobPhase::Cancelled);
            info.reason = CANCELLED.into();
            let now = unix_now();
            info.finished_unix_s = Some(now);
            info.jct_s = Some((now - info.submitted_unix_s).max(0.0));
            // In a task of its own, as a submission's write: a caller that
            // hangs up must not leave the job out of the queue with its
            // status unchanged (it would never run nor end).
            let (store, hub) = (self.store.clone(), self.hub.clone());
            tokio::spawn(async move {
                let written =
                    tokio::task::spawn_blocking(move || store.write(&[&rec], None).map(|_| rec))
                        .await
                        .map_err(|e| Status::internal(e.to_string()))
                        .and_then(|r| r.map_err(table_unavailable));
                let mut h = lock(&hub);
                match written {
                    Ok(rec) => {
                        h.jobs.insert(id, rec);
                        h.push_ended(id, now);
                        Ok(())
                    }
                    Err(e) => {
                        // Nothing changed: it waits where it waited.
                        if from_held {
                            h.held.push_front(spec);
                        } else {
                            let b = super::backend::submission_bytes(&h, id);
                            h.submissions.push_front(spec, b);
                        }
                        Err(e)
                    }
                }
            })
            .await
            .map_err(|e| Status::internal(e.to_string()))??;
        }
        tracing::info!(job = id, "cancel requested");
        Ok(Response::new(CancelReply {}))
    }

    async fn register(
        &self,
        req: Request<RegisterRequest>,
    ) -> Result<Response<RegisterReply>, Status> {
        self.workers.verify(req.metadata(), WORKER)?;
        self.worker_cert(&req)?;
        let r = req.into_inner();
        validate::register(&r)?;
        let secret = crate::net::random_secret()
            .map_err(|e| Status::internal(format!("cannot make a worker credential: {e}")))?;
        let client = self
            .security
            .worker_client_as_scheduler(&r.address, &secret)
            .map_err(|e| Status::invalid_argument(format!("address: {e}")))?;
        let mut h = lock(&self.hub);
        // Job uids: the worker must run launches as the uids this
        // scheduler gives, and hold all of the cluster's range.
        let worker_range = (r.job_uid_first != 0).then_some((r.job_uid_first, r.job_uid_last));
        match (h.uids.range(), worker_range) {
            (Some((a, b)), Some((wa, wb))) if wa > a || wb < b => {
                return Err(Status::invalid_argument(format!(
                    "job_uid_first, job_uid_last: this worker's --job-uids {wa}-{wb} does not hold the cluster's [runtime] job_uids {a}-{b}: start it with --job-uids {a}-{b}"
                )));
            }
            (Some((a, b)), None) => {
                tracing::warn!(name = %r.name, "a worker without --job-uids joins a cluster with [runtime] job_uids {a}-{b}: its jobs run as its --job-user (or its own account)");
            }
            (None, Some((wa, wb))) => {
                return Err(Status::invalid_argument(format!(
                    "job_uid_first, job_uid_last: this worker runs each launch as a uid of its own (--job-uids {wa}-{wb}), but this scheduler assigns none: set [runtime] job_uids = \"{wa}-{wb}\" (one range for the cluster: uids are unique across nodes)"
                )));
            }
            _ => {}
        }
        // Its place in the topology, checked before it is known.
        let labels: std::collections::BTreeMap<String, String> = r
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !labels.is_empty() {
            let at = h.labelled;
            let Some(t) = h.topology.as_mut() else {
                return Err(Status::invalid_argument(
                    "labels: this scheduler's config has no [cluster.topology] to place a worker in",
                ));
            };
            t.add_node(NodeId(at), &labels)
                .map_err(|e| Status::invalid_argument(format!("labels: {e}")))?;
            h.labelled += 1;
        }
        h.next_worker += 1;
        let name = if r.name.is_empty() { "worker" } else { &r.name };
        let id = format!("{name}-{}-{}", h.epoch, h.next_worker);
        tracing::info!(worker = %id, address = %r.address, gpus = r.gpus.len(), running = r.running.len(), "worker registered");
        // What it still runs stays expected (its heartbeats do not stop it)
        // until the round loop adopts or revokes it, before it joins.
        // A launch of a job no longer held cannot be adopted: its job is not
        // launched again until this worker shows it stopped.
        let held: HashSet<u64> = if r.running.is_empty() {
            HashSet::new()
        } else {
            h.held.iter().map(|s| s.id.0).collect()
        };
        for l in r.running.iter().filter_map(|l| l.launch) {
            h.expected
                .entry(id.clone())
                .or_default()
                .insert((l.job_id, l.launch));
            if !held.contains(&l.job_id) {
                h.in_doubt
                    .entry(l.job_id)
                    .or_default()
                    .push((id.clone(), l.launch));
            }
        }
        h.credentials.insert(secret.clone(), id.clone());
        h.workers.insert(
            id.clone(),
            WorkerEntry {
                name: name.to_string(),
                containment: r.containment.clone(),
                address: r.address,
                gpus: r.gpus,
                cpus: r.cpus,
                host_mem_gb: r.host_mem_gb,
                shares_gpus: r.shares_gpus,
                last_seen: Instant::now(),
                alive: true,
                verified: self.probe.is_none(),
                dead_since: None,
                node: None,
                client,
                reported: r.running,
                labels,
                lease_epoch: 0,
            },
        );
        if self.probe.is_none() && h.workers.values().filter(|w| w.alive).count() == 2 {
            tracing::warn!(
                "two workers and no [runtime] checkpoint_dir: each keeps its jobs' checkpoints in its own --workdir, so a job moved to another worker resumes from that worker's (losing the work since); set checkpoint_dir on storage every worker mounts"
            );
        }
        // A cut-off worker stops its jobs (lease, then grace) before this
        // scheduler declares it gone (worker_timeout_s) and relaunches them.
        Ok(Response::new(RegisterReply {
            worker_id: id,
            heartbeat_s: self.cfg.heartbeat_s,
            // Together under worker_timeout_s (checked at load).
            lease_s: self.cfg.lease().0,
            fence_grace_s: self.cfg.lease().1,
            checkpoint_probe_path: self.probe.as_ref().map_or(String::new(), |p| p.0.clone()),
            worker_secret: secret,
        }))
    }

    async fn heartbeat(
        &self,
        req: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatReply>, Status> {
        self.workers.verify(req.metadata(), WORKER)?;
        self.worker_cert(&req)?;
        let md = req.metadata().clone();
        let mut r = req.into_inner();
        validate::heartbeat(&r)?;
        let mut h = lock(&self.hub);
        r.worker_id = caller(&h, &md, &r.worker_id)?;
        let w = worker_known(&mut h, &r.worker_id)?;
        w.last_seen = Instant::now();
        w.lease_epoch = r.lease_epoch;
        let node = w.name.clone();
        if !w.verified {
            let (path, token) = self.probe.as_ref().expect("unverified only with a probe");
            if r.checkpoint_probe != *token {
                return Err(Status::failed_precondition(format!(
                    "checkpoint_probe: this node does not see the shared checkpoint storage ({path} is missing or differs from the scheduler's); mount [runtime] checkpoint_dir at the same path on this node. The worker stays out of the cluster until it does"
                )));
            }
            w.verified = true;
            tracing::info!(worker = %r.worker_id, "the worker sees the shared checkpoint storage");
        }
        // Launches in doubt on this worker that it no longer runs: settled.
        let runs: HashSet<(u64, u32)> = r.running.iter().map(|l| (l.job_id, l.launch)).collect();
        // Reported launches that ended meanwhile are not adopted.
        w.reported.retain(|l| {
            l.launch
                .is_some_and(|l| runs.contains(&(l.job_id, l.launch)))
        });
        h.in_doubt.retain(|job, parts| {
            parts.retain(|(w, l)| w != &r.worker_id || runs.contains(&(*job, *l)));
            !parts.is_empty()
        });
        let expected = h.expected.get(&r.worker_id);
        let stop = r
            .running
            .into_iter()
            .filter(|l| !expected.is_some_and(|e| e.contains(&(l.job_id, l.launch))))
            .collect();
        // What the node still uses of the job uids: the others it ran
        // are free there.
        h.uids.heard(&r.worker_id, &node, &r.busy_uids);
        // Kept shared directories of launches that ended on every worker
        // (no worker is expected to run them, none is in doubt) go back;
        // none while a restarted scheduler holds the previous run's jobs
        // (a launch of them not adopted yet may still run).
        // A job that runs again, or whose launch may still run somewhere,
        // keeps them: its checkpoints are one directory for all its
        // launches (a later launch is given them anew).
        let take_back = if h.held.is_empty() {
            r.kept
                .into_iter()
                .filter(|l| {
                    !h.in_doubt.contains_key(&l.job_id)
                        && !h
                            .expected
                            .values()
                            .any(|e| e.iter().any(|(j, _)| *j == l.job_id))
                })
                .collect()
        } else {
            Vec::new()
        };
        self.metrics.heartbeats.inc();
        Ok(Response::new(HeartbeatReply { stop, take_back }))
    }

    async fn report_exit(&self, req: Request<ExitReport>) -> Result<Response<Ack>, Status> {
        self.workers.verify(req.metadata(), WORKER)?;
        self.worker_cert(&req)?;
        let md = req.metadata().clone();
        let mut r = req.into_inner();
        validate::report_exit(&r)?;
        let mut h = lock(&self.hub);
        r.worker_id = caller(&h, &md, &r.worker_id)?;
        worker_known(&mut h, &r.worker_id)?.last_seen = Instant::now();
        // Only the worker that holds a launch reports its end; a report of
        // a launch this worker does not run (another worker's, or one
        // already revoked or replaced) is logged and ignored, so it can
        // neither end a job nor free GPUs that another launch holds.
        let l = r.launch.expect("checked by validate::report_exit");
        if !h
            .expected
            .get(&r.worker_id)
            .is_some_and(|e| e.contains(&(l.job_id, l.launch)))
        {
            tracing::info!(worker = %r.worker_id, job = l.job_id, launch = l.launch, finished = r.finished, "exit report of a launch this worker does not hold (any more): ignored");
            self.metrics.stale_reports.inc();
            return Ok(Response::new(Ack {}));
        }
        // Any finite age is accepted; one older than the clock reaches back
        // is taken as "now".
        let at = Duration::try_from_secs_f64(r.exited_s_ago)
            .ok()
            .and_then(|d| Instant::now().checked_sub(d))
            .unwrap_or_else(Instant::now);
        h.exits.push((r, at));
        Ok(Response::new(Ack {}))
    }

    async fn push_metrics(&self, req: Request<MetricBatch>) -> Result<Response<Ack>, Status> {
        self.workers.verify(req.metadata(), WORKER)?;
        self.worker_cert(&req)?;
        let md = req.metadata().clone();
        let mut r = req.into_inner();
        validate::push_metrics(&r)?;
        let mut h = lock(&self.hub);
        r.worker_id = caller(&h, &md, &r.worker_id)?;
        worker_known(&mut h, &r.worker_id)?;
        let h = &mut *h;
        let expected = h.expected.get(&r.worker_id);
        let mut dropped = 0u64;
        for s in r.samples {
            let l = s.launch.expect("checked above");
            // Only launches running on this worker: memory is bounded by
            // the running jobs, whatever a worker sends.
            if !expected.is_some_and(|e| e.contains(&(l.job_id, l.launch))) {
                dropped += 1;
                continue;
            }
            let q = h.metrics.entry(l.job_id).or_default();
            if q.len() >= MAX_JOB_SAMPLES_PER_ROUND {
                q.pop_front();
                dropped += 1;
            }
            q.push_back(s);
        }
        h.metrics_dropped += dropped;
        Ok(Response::new(Ack {}))
    }
}
