//! Predicted starts and finishes on a cluster (`blox status --start`), and
//! how far they drift from what happens.
//!
//! After a round, when the last forecast is done, the round thread takes a
//! [`Snapshot`] of the loop (a copy: a few milliseconds for 10,000 jobs)
//! and hands it to the forecast thread, which runs the [`Forecaster`] (the
//! simulator under the scheduler's own policies) and publishes the
//! predictions for `Status`, the dashboard and `/metrics`. A forecast that
//! fails or panics is logged and leaves the previous predictions; it never
//! holds a round back.
//!
//! Drift: the first prediction made for a job is kept; when the job starts
//! (and finishes), the gap to it goes to the histograms
//! `blox_prediction_error_seconds{what="start"|"finish"}`.

use super::{lock, SharedHub};
use crate::proto::{ForecastInfo, Prediction as ProtoPrediction};
use blox_core::{JobId, JobStatus, RoundLoop, RoundReport};
use blox_forecast::{DurationFrom, Forecaster, Snapshot};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Instant;

/// What the hub keeps of forecasts.
#[derive(Default)]
pub(super) struct Forecasts {
    /// The latest forecast's predictions, by job.
    pub(super) by_job: HashMap<u64, ProtoPrediction>,
    pub(super) info: Option<ForecastInfo>,
    /// The first prediction of each job not yet seen to start / finish
    /// (Unix seconds), for the drift histograms.
    first: HashMap<u64, First>,
    /// Absolute errors observed so far, for the dashboard: (count, sum) of
    /// starts and of finishes.
    pub(super) errors: [(u64, f64); 2],
}

#[derive(Clone, Copy, Default)]
struct First {
    start: Option<f64>,
    finish: Option<f64>,
    /// It started (its first start was judged, or it started unpredicted):
    /// later restarts are not judged.
    started: bool,
}

impl Forecasts {
    /// The latest prediction for job `id`, if a forecast saw it.
    pub(super) fn of(&self, id: u64) -> Option<ProtoPrediction> {
        self.by_job.get(&id).cloned()
    }

    /// Mean absolute error so far of starts and of finishes, with counts.
    pub(super) fn mean_errors(&self) -> [(u64, Option<f64>); 2] {
        self.errors
            .map(|(n, sum)| (n, (n > 0).then(|| sum / n as f64)))
    }
}

/// The round thread's end of the forecast thread.
pub(super) struct ForecastHandle {
    tx: SyncSender<Snapshot>,
    busy: Arc<AtomicBool>,
    /// Unix time of the loop's time 0.
    unix0: f64,
}

/// Starts the forecast thread. `unix0`: Unix time of the loop's time 0.
pub(super) fn spawn(
    forecaster: Arc<dyn Forecaster>,
    hub: SharedHub,
    metrics: Arc<super::metrics::Metrics>,
    unix0: f64,
) -> std::io::Result<ForecastHandle> {
    let (tx, rx) = sync_channel::<Snapshot>(1);
    let busy = Arc::new(AtomicBool::new(false));
    let b = busy.clone();
    std::thread::Builder::new()
        .name("blox-forecast".into())
        .spawn(move || {
            // Ends when the round thread drops its sender.
            while let Ok(snap) = rx.recv() {
                let t = Instant::now();
                let made = unix0 + snap.now_s;

                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    forecaster.forecast(&snap)
                }));
                let took = t.elapsed().as_secs_f64();
                metrics.forecast_seconds.observe(took);
                let mut h = lock(&hub);
                let f = &mut h.forecasts;
                match r {
                    Ok(Ok(fc)) => {
                        f.by_job = fc
                            .predictions
                            .iter()
                            .map(|p| {
                                let pred = ProtoPrediction {
                                    start_unix_s: p.start_s.map(|s| unix0 + s),
                                    finish_unix_s: p.finish_s.map(|s| unix0 + s),
                                    duration_from: p.duration_from.as_str().to_string(),
                                    made_unix_s: made,
                                };
                                (p.job.0, pred)
                            })
                            .collect();
                        // The first prediction of each job is the one judged.
                        for p in &fc.predictions {
                            let running = snap.jobs.get(p.job).is_some_and(|j| j.is_running());
                            let e = f.first.entry(p.job.0).or_default();
                            if running {
                                e.started = true;
                            }
                            if !running && !e.started && e.start.is_none() {
                                e.start = p.start_s.map(|s| unix0 + s);
                            }
                            if e.finish.is_none() && p.duration_from != DurationFrom::Unknown {
                                e.finish = p.finish_s.map(|s| unix0 + s);
                            }
                        }
                        f.info = Some(ForecastInfo {
                            made_unix_s: made,
                            reached_unix_s: unix0 + fc.reached_s,
                            rounds: fc.rounds,
                            stopped: fc.stopped,
                            took_s: took,
                            error: String::new(),
                        });
                    }
                    Ok(Err(e)) => failed(f, made, took, e.to_string()),
                    Err(_) => failed(f, made, took, "the forecast panicked".into()),
                }
                drop(h);
                b.store(false, Ordering::Release);
            }
        })?;
    Ok(ForecastHandle { tx, busy, unix0 })
}

fn failed(f: &mut Forecasts, made: f64, took: f64, error: String) {
    tracing::warn!("{error}; the previous predictions stand");
    let info = f.info.get_or_insert_with(ForecastInfo::default);
    info.made_unix_s = made;
    info.took_s = took;
    info.error = error;
}

impl ForecastHandle {
    /// After a round: judges the first predictions of the jobs that started
    /// or finished in it, and hands a snapshot of `lp` to the forecast
    /// thread if it is idle.
    pub(super) fn after_round(
        &self,
        lp: &RoundLoop,
        report: &RoundReport,
        now_s: f64,
        backend: &super::ClusterBackend,
        metrics: &super::metrics::Metrics,
    ) {
        let hub = &backend.hub;
        if !report.launched.is_empty() || !report.ended.is_empty() {
            let mut h = lock(hub);
            let f = &mut h.forecasts;
            for id in &report.launched {
                let e = f.first.entry(id.0).or_default();
                e.started = true;
                if let Some(p) = e.start.take() {
                    let err = (self.unix0 + report.time_s - p).abs();
                    metrics
                        .prediction_error
                        .with_label_values(&["start"])
                        .observe(err);
                    f.errors[0].0 += 1;
                    f.errors[0].1 += err;
                }
            }
            for id in &report.ended {
                let Some(e) = f.first.remove(&id.0) else {
                    continue;
                };
                f.by_job.remove(&id.0);
                let finished = lp
                    .jobs
                    .finished_job(JobId(id.0))
                    .filter(|j| j.status == JobStatus::Finished)
                    .and_then(|j| j.finish_s);
                if let (Some(p), Some(t)) = (e.finish, finished) {
                    let err = (self.unix0 + t - p).abs();
                    metrics
                        .prediction_error
                        .with_label_values(&["finish"])
                        .observe(err);
                    f.errors[1].0 += 1;
                    f.errors[1].1 += err;
                }
            }
        }
        if self
            .busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let mut snap = Snapshot::of(lp, now_s);
        snap.launch_costs = backend.waits.costs();
        match self.tx.try_send(snap) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.busy.store(false, Ordering::Release);
            }
        }
    }
}
