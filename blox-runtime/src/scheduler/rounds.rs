//! What the live scheduler does after each round of its loop (run by
//! [`blox_core::runner`]): forecasts, the dashboard's view, the event log,
//! round metrics, and publishing the job table.

use super::backend::{ClusterBackend, RoundStats};
use super::dashboard::View;
use super::events::EventSink;
use super::forecast::ForecastHandle;
use super::metrics::Metrics;
use super::{lock, unix_now, SchedulerError};
use blox_core::runner::Driver;
use blox_core::{LoopError, RoundClock, RoundLoop, RoundReport};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The scheduler's driver: runs rounds until `stop` is set.
pub(super) struct LiveRounds {
    pub stop: Arc<AtomicBool>,
    pub metrics: Arc<Metrics>,
    pub forecasts: Option<ForecastHandle>,
    /// The dashboard's view, when it serves one.
    pub view: Option<Arc<Mutex<View>>>,
    pub events: EventSink,
    /// The wall-clock time of the loop's time 0.
    pub unix0: f64,
}

impl Driver<ClusterBackend> for LiveRounds {
    type Stop = ();
    type Error = SchedulerError;

    fn stop(&mut self, _: &RoundLoop, _: &ClusterBackend) -> Option<()> {
        self.stop.load(Ordering::Relaxed).then_some(())
    }

    fn after_round(
        &mut self,
        mut report: RoundReport,
        lp: &mut RoundLoop,
        backend: &mut ClusterBackend,
    ) -> Result<(), SchedulerError> {
        let metrics = &self.metrics;
        metrics
            .largest_placeable
            .set(i64::from(report.largest_placeable));
        if let Some(f) = &self.forecasts {
            f.after_round(lp, &report, backend.now_s(), backend, metrics);
        }
        if let Some(view) = &self.view {
            let mut v = view.lock().unwrap_or_else(|e| e.into_inner());
            v.update(&report, lp, &backend.nodes, unix_now());
        }
        self.events
            .write(&mut report.events, &backend.nodes, self.unix0);
        for (part, secs) in report.timings.parts() {
            metrics
                .round_part_seconds
                .with_label_values(&[part])
                .observe(secs);
        }
        if let Some(e) = &report.invalid {
            lock(&backend.hub).last_error = format!("round {}: {e}", report.round);
        }
        let t = Instant::now();
        backend.publish(lp)?;
        backend.compact(lp)?;
        let mut s = backend.stats.lock().unwrap_or_else(|e| e.into_inner());
        RoundStats::push(&mut s.publish_s, t.elapsed().as_secs_f64());
        s.refresh();
        metrics.rounds.inc();
        if let (Some(b), Some(p)) = (s.busy_s.back(), s.publish_s.back()) {
            metrics.round_seconds.observe(b + p);
        }
        Ok(())
    }

    fn failed(&mut self, _: &RoundLoop, error: LoopError) -> SchedulerError {
        error.into()
    }
}
