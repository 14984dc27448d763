//! The simulator as a job source: jobs arrive at their trace times, with
//! what the loop must know of them (profiles' epoch size and batch limits,
//! host-resource profiles) put in their metrics before they are offered.

use super::*;

impl JobSource for SimBackend {
    fn poll_submissions(&mut self, round: &RoundInfo) -> Result<Vec<JobSpec>, BackendError> {
        let mut out = Vec::new();
        let speed_types = self.cfg.speed_types();
        while self
            .trace
            .front()
            .is_some_and(|j| j.spec.arrival_s <= round.now_s + 1e-9)
        {
            let Some(j) = self.trace.pop_front() else {
                break;
            };
            self.profiled |= matches!(j.work, WorkModel::Profile { .. });
            self.jobs.insert(
                j.spec.id,
                SimJobState {
                    duration_s: j.duration_s(),
                    requested_gpus: j.spec.requested_gpus,
                    done_s: 0.0,
                    attained_gpu_s: 0.0,
                    startup_gpu_s: 0.0,
                    startup_s: 0.0,
                    run_time_s: 0.0,
                    own_startup_s: j.startup_s.or_else(|| {
                        j.spec
                            .model
                            .as_ref()
                            .and_then(|m| self.cfg.model_startup_s.get(m))
                            .copied()
                    }),
                    segment: None,
                    finished_at: None,
                    started: false,
                    converge_at: j.converge_at,
                    type_speed: 1.0,
                    stopped_at: None,
                    saved: None,
                    at_launch: None,
                    unreported_first: None,
                    profile: match &j.work {
                        WorkModel::Duration { .. } => None,
                        WorkModel::Profile { app, agent, types } => Some(ProfileRun {
                            app: app.clone(),
                            types: types.clone(),
                            merge_fits: self.cfg.merge_type_fits,
                            tuner: match *agent {
                                BatchAgent::Fixed { batch } => Tuner::Fixed(batch),
                                BatchAgent::Pollux {
                                    fixed_batch,
                                    replica_cap,
                                    search,
                                    fit_tol,
                                } => {
                                    let mut a = PolluxAgent::new(app.limits);
                                    a.search = search;
                                    a.fit = blox_goodput::fit::Settings::with_tol(fit_tol);
                                    a.fixed_batch = fixed_batch;
                                    a.replica_cap = replica_cap;
                                    Tuner::Pollux(Box::new(a))
                                }
                            },
                            epoch: 0,
                            progress: 0.0,
                            batch: BatchConfig {
                                atomic: app.limits.m0,
                                accum: 0,
                            },
                            per_node: Vec::new(),
                            slowdown: 1.0,
                            samples: 0.0,
                            type_speed: 1.0,
                            initial_batch: None,
                        }),
                    },
                },
            );
            self.dirty.push(j.spec.id);
            let id = j.spec.id;
            for &t in &speed_types {
                let v = self.cfg.speed(j.spec.model.as_deref(), t);
                self.static_metrics
                    .push((id, format!("speed.{t}").into(), v));
            }
            match &j.work {
                WorkModel::Profile { app, .. } => {
                    let l = app.limits;
                    // One epoch's samples at the initial batch M0.
                    let size = app.epoch_boundary(1) * l.m0 as f64;
                    self.static_metrics
                        .push((id, metric::EPOCH_SIZE.into(), size));
                    self.static_metrics
                        .push((id, metric::MAX_BATCH_SIZE.into(), l.mmax as f64));
                    self.static_metrics.push((
                        id,
                        metric::MAX_LOCAL_BATCH_SIZE.into(),
                        l.bmax as f64,
                    ));
                }
                WorkModel::Duration { .. } => {
                    let k = j.spec.requested_gpus.max(1) as f64;
                    self.static_metrics
                        .push((id, metric::EPOCH_SIZE.into(), self.cfg.epoch_s * k));
                }
            }
            let mut spec = j.spec;
            // Synergy profiles a job before it is scheduled (optimistic
            // profiling, §4.1): its best share comes with the submission.
            if let Some(h) = spec
                .model
                .as_deref()
                .and_then(|m| self.host_profiles.get(m))
            {
                spec.metrics.extend([
                    (metric::BEST_CPUS_PER_GPU.to_string(), h.best.cpus_per_gpu),
                    (
                        metric::BEST_MEM_GB_PER_GPU.to_string(),
                        h.best.mem_gb_per_gpu,
                    ),
                    (metric::BEST_HOST_SPEEDUP.to_string(), h.best_speedup),
                ]);
            }
            out.push(spec);
        }
        self.trace.give_back();
        Ok(out)
    }

    fn exhausted(&self) -> bool {
        self.trace.is_empty()
    }
}
