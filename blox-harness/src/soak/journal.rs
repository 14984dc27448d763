//! Reads the journal `blox-toy-job --journal` writes (one line per launch
//! start, checkpoint and end) and finds what must never happen: two
//! launches of a job running at once, and a launch resuming from an older
//! checkpoint than earlier launches had written.

use std::collections::BTreeMap;
use std::path::Path;

/// One launch (all its ranks) as the journal saw it.
#[derive(Clone, Debug, Default)]
pub struct LaunchSeen {
    pub job: u64,
    pub generation: u64,
    /// When its first rank started, and the iteration rank 0 resumed at
    /// (`None`: rank 0 never started, e.g. its part was on a worker that
    /// hung, the launch failed and its other ranks were killed at once; a
    /// rank past 0 resumes from its own per-rank file, which a launch of
    /// another shape never wrote, so its 0 says nothing of the job's).
    pub start_s: f64,
    pub resumed_at: Option<u64>,
    /// When its last rank wrote `end` (`None`: killed before it could).
    pub end_s: Option<f64>,
    /// Its last event of any kind.
    pub last_s: f64,
    /// Rank 0's checkpoints: (time, iteration).
    pub checkpoints: Vec<(f64, u64)>,
}

/// What the journal shows.
#[derive(Clone, Debug, Default)]
pub struct JournalReport {
    pub launches: usize,
    /// (job, earlier generation, later generation): the earlier one was
    /// still running when the later one started.
    pub overlaps: Vec<(u64, u64, u64)>,
    /// (job, generation, resumed at, checkpointed before): a launch resumed
    /// from an older checkpoint than was already written.
    pub regressions: Vec<(u64, u64, u64, u64)>,
    /// Lines that could not be read (line number, text).
    pub bad_lines: Vec<(usize, String)>,
    /// Jobs a launch of which did all its work (a `done` line).
    pub done: std::collections::BTreeSet<u64>,
}

/// Reads and checks the journal at `path` (missing: nothing ran).
pub fn check(path: &Path) -> std::io::Result<JournalReport> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    Ok(check_text(&text))
}

/// [`check`] on the journal's text.
pub fn check_text(text: &str) -> JournalReport {
    let mut report = JournalReport::default();
    let mut launches: BTreeMap<(u64, u64), LaunchSeen> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let parsed = (f.len() == 6)
            .then(|| {
                Some((
                    f[0],
                    f[1].parse::<u64>().ok()?,
                    f[2].parse::<u64>().ok()?,
                    f[3].parse::<u32>().ok()?,
                    f[4].parse::<f64>().ok().filter(|t| t.is_finite())?,
                    f[5].parse::<u64>().ok()?,
                ))
            })
            .flatten();
        let Some((event, job, generation, rank, t, iteration)) = parsed else {
            report.bad_lines.push((i + 1, line.to_string()));
            continue;
        };
        let l = launches
            .entry((job, generation))
            .or_insert_with(|| LaunchSeen {
                job,
                generation,
                start_s: f64::INFINITY,
                ..Default::default()
            });
        l.last_s = l.last_s.max(t);
        match event {
            "start" => {
                l.start_s = l.start_s.min(t);
                if rank == 0 {
                    l.resumed_at = Some(iteration);
                }
            }
            "ckpt" if rank == 0 => l.checkpoints.push((t, iteration)),
            "ckpt" => {}
            "done" => {
                report.done.insert(job);
            }
            "end" => l.end_s = Some(l.end_s.map_or(t, |e: f64| e.max(t))),
            _ => report.bad_lines.push((i + 1, line.to_string())),
        }
    }
    report.launches = launches.len();
    let mut by_job: BTreeMap<u64, Vec<LaunchSeen>> = BTreeMap::new();
    for l in launches.into_values() {
        by_job.entry(l.job).or_default().push(l);
    }
    for (job, mut ls) in by_job {
        ls.retain(|l| l.start_s.is_finite());
        ls.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
        for w in ls.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            if a.end_s.unwrap_or(a.last_s) > b.start_s {
                report.overlaps.push((job, a.generation, b.generation));
            }
        }
        for b in &ls {
            let Some(resumed_at) = b.resumed_at else {
                continue;
            };
            let reached = ls
                .iter()
                .flat_map(|a| a.checkpoints.iter())
                .filter(|(t, _)| *t < b.start_s)
                .map(|(_, it)| *it)
                .max();
            if let Some(r) = reached.filter(|r| resumed_at < *r) {
                report.regressions.push((job, b.generation, resumed_at, r));
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_overlaps_and_regressions_and_passes_a_clean_history() {
        let clean = "start 1 10 0 100.0 0\nckpt 1 10 0 101.0 5\nend 1 10 0 102.0 7\n\
                     start 1 11 0 103.0 5\nckpt 1 11 0 104.0 10\nend 1 11 0 105.0 10\n";
        let r = check_text(clean);
        assert_eq!(r.launches, 2);
        assert!(r.overlaps.is_empty() && r.regressions.is_empty(), "{r:?}");
        // Generation 10 was killed without `end` but checkpointed after 11 started.
        let overlap = "start 1 10 0 100.0 0\nstart 1 11 0 103.0 0\nckpt 1 10 0 104.0 30\n";
        assert_eq!(check_text(overlap).overlaps, vec![(1, 10, 11)]);
        // Generation 11 resumed at 0 although 10 had checkpointed 30.
        let regress = "start 2 10 0 100.0 0\nckpt 2 10 0 101.0 30\nend 2 10 0 101.5 31\n\
                       start 2 11 0 103.0 0\n";
        assert_eq!(check_text(regress).regressions, vec![(2, 11, 0, 30)]);
        // Generation 11's rank 0 never started (its part failed, the other
        // ranks were killed): rank 1 at 0 is not the job resuming at 0.
        // Counted as a regression before (a soak with a hung worker).
        let partial = "start 2 10 0 100.0 0\nckpt 2 10 0 101.0 30\nend 2 10 0 101.5 31\n\
                       start 2 11 1 103.0 0\nstart 2 12 0 104.0 30\n";
        let r = check_text(partial);
        assert!(r.regressions.is_empty() && r.overlaps.is_empty(), "{r:?}");
        assert_eq!(r.launches, 3);
        let finished =
            check_text("start 3 10 0 100.0 0\ndone 3 10 0 101.0 20\nend 3 10 0 101.1 20\n");
        assert_eq!(finished.done.into_iter().collect::<Vec<_>>(), vec![3]);
        let bad = check_text("start 1 x 0 1 0\nfoo\n");
        assert_eq!(bad.bad_lines.len(), 2);
    }
}
