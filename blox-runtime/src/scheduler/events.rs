//! The scheduler's event log: each round's decisions appended to
//! `[runtime] events` (by default `events.jsonl` beside the job table),
//! rotated by size; `blox events` prints it.

use super::{RuntimeConfig, SchedulerError};
use blox_core::round::events::{Event, What};
use blox_eventlog::EventLog;

pub(super) struct EventSink {
    log: EventLog,
    /// A write failed (disk full, file removed): said once, then retried
    /// every round without repeating the warning.
    failing: bool,
}

impl EventSink {
    pub(super) fn open(cfg: &RuntimeConfig) -> Result<EventSink, SchedulerError> {
        let path = cfg.events_path();
        let max = (cfg.events_max_mb * 1_048_576.0) as u64;
        let log = EventLog::append(&path, max, cfg.events_keep)
            .map_err(|e| SchedulerError::Runtime(format!("[runtime] events: {e}")))?;
        tracing::info!(path = %path.display(), "event log");
        Ok(EventSink {
            log,
            failing: false,
        })
    }

    /// Appends a round's events, with the wall-clock time of their round
    /// (`unix0`: the wall-clock time of the loop's time 0) and the workers'
    /// names of joining nodes. A failed write is logged, never fatal: the
    /// cluster keeps running.
    pub(super) fn write(&mut self, events: &mut [Event], nodes: &[String], unix0: f64) {
        if events.is_empty() {
            return;
        }
        for e in events.iter_mut() {
            e.unix_s = Some(unix0 + e.time_s);
            if let What::NodeJoined { node, worker, .. } = &mut e.what {
                *worker = nodes.get(*node as usize).cloned();
            }
        }
        match self.log.write(events) {
            Ok(()) => {
                if self.failing {
                    tracing::info!(path = %self.log.path().display(), "event log written again");
                }
                self.failing = false;
            }
            Err(e) => {
                if !self.failing {
                    tracing::error!("event log: {e}; the round's events are lost");
                }
                self.failing = true;
            }
        }
    }
}
