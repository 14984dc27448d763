//! What the job reports to the worker through its report directory:
//! `done`, its `metrics` lines, and the refusal of a file that is not the
//! job's own plain file ([`Running::refusal`]).

use super::{Exit, Running};

/// The most bytes of the job's `metrics` read in one poll, and the longest
/// line taken (a longer one is skipped).
const METRICS_READ_BYTES: usize = 1 << 20;
const METRIC_LINE_BYTES: usize = 4096;

impl Running {
    /// True when the job marked itself done (a plain file `done` of its
    /// own in its report directory) and exited cleanly.
    pub fn finished(&self, exit: &Exit) -> bool {
        exit.code == Some(0) && self.marked_done()
    }

    /// True when the job marked itself done (see [`Running::finished`]); a
    /// `done` that is not the job's plain file is refused
    /// ([`Running::refusal`]).
    pub fn marked_done(&self) -> bool {
        match self.report.open_job_file("done", self.owner) {
            Ok(found) => found.is_some(),
            Err(e) => {
                self.refuse(e);
                false
            }
        }
    }

    /// Why a file of the job's was refused, if one was: the worker ends
    /// the launch, and reports this as its reason (the job's fault).
    pub fn refusal(&self) -> Option<String> {
        self.refusal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn refuse(&self, why: String) {
        let mut r = self.refusal.lock().unwrap_or_else(|e| e.into_inner());
        if r.is_none() {
            tracing::warn!(dir = %self.control.display(), "{why}: the launch is ended");
            *r = Some(why);
        }
    }

    /// Feeds the metric lines written since the last call to `sink`: at
    /// most 1 MiB a call, from the job's own plain `metrics` file (a link
    /// or another's file is refused: [`Running::refusal`]); a line still being
    /// written is read next time, a malformed one or one over 4 KiB is
    /// logged (cut short) and skipped.
    pub fn read_metrics(&mut self, job: u64, mut sink: impl FnMut(&str, f64)) {
        let chunk = match self.report.read_job_file(
            "metrics",
            self.owner,
            self.metrics_offset,
            METRICS_READ_BYTES,
        ) {
            Ok(Some(c)) => c,
            Ok(None) => return,
            Err(e) => {
                let _ = job;
                self.refuse(e);
                return;
            }
        };
        let mut rest = &chunk[..];
        // Bad lines are counted and said once a call (the first of them):
        // a job writing millions must not flood the worker's log.
        let (mut bad, mut first_bad) = (0usize, None);
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            let line = &rest[..end];
            rest = &rest[end + 1..];
            self.metrics_offset += end as u64 + 1;
            let text = std::str::from_utf8(line)
                .ok()
                .filter(|_| line.len() <= METRIC_LINE_BYTES);
            let mut it = text.unwrap_or("").split_whitespace();
            match (it.next(), it.next().map(str::parse::<f64>), it.next()) {
                // What the scheduler takes: a key of at most 128 bytes, a
                // finite value.
                (Some(k), Some(Ok(v)), None)
                    if v.is_finite() && k.len() <= crate::validate::MAX_KEY_BYTES =>
                {
                    sink(k, v)
                }
                _ => {
                    bad += 1;
                    first_bad.get_or_insert_with(|| {
                        String::from_utf8_lossy(&line[..line.len().min(200)])
                            .trim()
                            .to_string()
                    });
                }
            }
        }
        if let Some(first) = first_bad {
            tracing::warn!(job, lines = bad, first = %first, "bad metric lines ignored (a key of at most 128 bytes and a finite number each)");
        }
        // A partial line longer than any metric line is no metric: skipped
        // whole, so the reader never stalls on it.
        if rest.len() > METRIC_LINE_BYTES {
            tracing::warn!(job, bytes = rest.len(), "metric line too long; skipped");
            self.metrics_offset += rest.len() as u64;
        }
    }
}
