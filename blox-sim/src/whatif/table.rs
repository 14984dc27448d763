//! The comparison `blox whatif` prints and writes: per config (and for
//! what actually happened, where the history shows it) the JCT, the wait to
//! the first start and the utilisation of the replayed jobs, and every job's
//! predicted start and finish per config (`predictions.csv`).

use super::{History, Replay};
use blox_core::stats::{mean, quantile_sorted};
use blox_core::JobId;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

/// One line of the comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The config's label, or `actual`.
    pub label: String,
    /// Replayed jobs of known work, and how many of them finished.
    pub jobs: usize,
    pub finished: usize,
    pub avg_jct_s: f64,
    pub p50_jct_s: f64,
    pub p99_jct_s: f64,
    /// Submission to first start, averaged over the jobs that started.
    pub avg_wait_s: f64,
    /// Busy GPU-seconds over GPU-seconds from the start to the end of the
    /// replay (`None` for what actually happened).
    pub utilisation: Option<f64>,
}

/// Every replay beside what happened.
pub struct Comparison {
    pub rows: Vec<Row>,
}

fn row(label: &str, jobs: usize, mut jcts: Vec<f64>, waits: &[f64], util: Option<f64>) -> Row {
    jcts.sort_by(f64::total_cmp);
    Row {
        label: label.to_string(),
        jobs,
        finished: jcts.len(),
        avg_jct_s: mean(&jcts),
        p50_jct_s: quantile_sorted(&jcts, 0.5),
        p99_jct_s: quantile_sorted(&jcts, 0.99),
        avg_wait_s: mean(waits),
        utilisation: util,
    }
}

impl Comparison {
    /// Compares `replays` of `h` over its jobs of known work.
    pub fn new(h: &History, replays: &[Replay]) -> Comparison {
        let ids: Vec<JobId> = h
            .job_ids()
            .into_iter()
            .filter(|id| h.work.contains_key(id))
            .collect();
        let arrival: HashMap<JobId, f64> = h
            .active
            .iter()
            .map(|(j, _)| &j.spec)
            .chain(h.waiting.iter().map(|j| &j.spec))
            .chain(&h.future)
            .map(|s| (s.id, s.arrival_s))
            .collect();
        let mut rows = Vec::new();
        // What happened, where the history shows all of it.
        let shown = ids.iter().filter(|id| h.actual.contains_key(id)).count();
        if shown > 0 {
            let mut jcts = Vec::new();
            let mut waits = Vec::new();
            for id in &ids {
                let (Some(a), Some(arr)) = (h.actual.get(id), arrival.get(id)) else {
                    continue;
                };
                if let Some(f) = a.finish_s {
                    jcts.push(f - arr);
                }
                if let Some(s) = a.start_s {
                    waits.push(s - arr);
                }
            }
            rows.push(row("actual", shown, jcts, &waits, None));
        }
        for r in replays {
            let by_id: HashMap<u64, &crate::JobRow> =
                r.result.jobs.iter().map(|j| (j.job_id, j)).collect();
            let mut jcts = Vec::new();
            let mut waits = Vec::new();
            for id in &ids {
                let Some(j) = by_id.get(&id.0) else { continue };
                if let Some(jct) = j.jct_s {
                    jcts.push(jct);
                }
                if let Some(s) = j.first_start_s {
                    waits.push(s - j.arrival_s);
                }
            }
            let (busy, total) = r.result.rounds.iter().fold((0.0, 0.0), |(b, t), x| {
                (b + f64::from(x.busy_gpus), t + f64::from(x.total_gpus))
            });
            let util = (total > 0.0).then(|| busy / total);
            rows.push(row(&r.label, ids.len(), jcts, &waits, util));
        }
        Comparison { rows }
    }

    /// The table, for people, in the unit that fits its times.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<28} {:>6} {:>8} {:>10} {:>10} {:>10} {:>10} {:>6}",
            "config", "jobs", "finished", "avg JCT", "p50 JCT", "p99 JCT", "avg wait", "util"
        );
        // One unit for the table, the one that shows its largest time with
        // a few digits: seconds up to 2 minutes, minutes up to 2 hours,
        // hours beyond (a run of minutes read "0.03 h" everywhere).
        let largest = self
            .rows
            .iter()
            .flat_map(|r| [r.avg_jct_s, r.p50_jct_s, r.p99_jct_s, r.avg_wait_s])
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        let (div, unit, places) = time_unit(largest);
        let h = |s: f64| {
            if s.is_nan() {
                "-".to_string()
            } else {
                format!("{:.*} {unit}", places, s / div)
            }
        };
        for r in &self.rows {
            let _ = writeln!(
                out,
                "{:<28} {:>6} {:>8} {:>10} {:>10} {:>10} {:>10} {:>6}",
                r.label,
                r.jobs,
                r.finished,
                h(r.avg_jct_s),
                h(r.p50_jct_s),
                h(r.p99_jct_s),
                h(r.avg_wait_s),
                r.utilisation
                    .map_or("-".to_string(), |u| format!("{:.0}%", 100.0 * u))
            );
        }
        out
    }

    /// `whatif.csv`: the rows.
    pub fn write_csv(&self, path: &Path) -> std::io::Result<()> {
        let mut s = String::from(
            "config,jobs,finished,avg_jct_s,p50_jct_s,p99_jct_s,avg_wait_s,utilisation\n",
        );
        let num = |v: f64| {
            if v.is_nan() {
                String::new()
            } else {
                format!("{v}")
            }
        };
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{}",
                csv_field(&r.label),
                r.jobs,
                r.finished,
                num(r.avg_jct_s),
                num(r.p50_jct_s),
                num(r.p99_jct_s),
                num(r.avg_wait_s),
                r.utilisation.map_or(String::new(), |u| format!("{u}"))
            );
        }
        std::fs::write(path, s)
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// `predictions.csv`: every replayed job's start and finish under each
/// config (and what happened, as config `actual`).
pub fn write_predictions(h: &History, replays: &[Replay], path: &Path) -> std::io::Result<()> {
    let mut s =
        String::from("job_id,name,arrival_s,config,start_s,finish_s,jct_s,work_s,work_from\n");
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v}"));
    let specs: HashMap<JobId, &blox_core::JobSpec> = h
        .active
        .iter()
        .map(|(j, _)| &j.spec)
        .chain(h.waiting.iter().map(|j| &j.spec))
        .chain(&h.future)
        .map(|s| (s.id, s))
        .collect();
    let rows: Vec<HashMap<u64, &crate::JobRow>> = replays
        .iter()
        .map(|r| r.result.jobs.iter().map(|j| (j.job_id, j)).collect())
        .collect();
    for id in h.job_ids() {
        let spec = specs[&id];
        let work = h.work_of(id);
        let mut line = |config: &str, start: Option<f64>, finish: Option<f64>| {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{},{}",
                id.0,
                csv_field(&spec.name),
                spec.arrival_s,
                csv_field(config),
                opt(start),
                opt(finish),
                opt(finish.map(|f| f - spec.arrival_s)),
                opt(work.map(|w| w.duration_s)),
                work.map_or("unknown", |w| w.from)
            );
        };
        if let Some(a) = h.actual.get(&id) {
            line("actual", a.start_s, a.finish_s);
        }
        for (r, by_id) in replays.iter().zip(&rows) {
            if let Some(j) = by_id.get(&id.0) {
                let finish = j.jct_s.and(j.finish_s);
                line(&r.label, j.first_start_s, finish);
            }
        }
    }
    std::fs::write(path, s)
}

/// The unit for times up to `largest` seconds: (divisor, name, decimals).
pub fn time_unit(largest: f64) -> (f64, &'static str, usize) {
    if largest < 1000.0 {
        (1.0, "s", 1)
    } else if largest < 7200.0 {
        (60.0, "min", 2)
    } else {
        (3600.0, "h", 2)
    }
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn times_are_shown_in_a_unit_that_shows_their_differences() {
        assert_eq!(time_unit(45.0).1, "s");
        assert_eq!(time_unit(107.0).1, "s");
        assert_eq!(time_unit(1800.0).1, "min");
        assert_eq!(time_unit(30_000.0).1, "h");
        // The run: JCTs of about two minutes were all "0.03 h".
        let (div, unit, places) = time_unit(110.0);
        assert_eq!(format!("{:.*} {unit}", places, 107.4 / div), "107.4 s");
        assert_eq!(format!("{:.*} {unit}", places, 98.0 / div), "98.0 s");
        // An operator's live run: 65.9 s and 64.2 s beside a p99 of
        // minutes both read "1.1 min".
        let (div, unit, places) = time_unit(400.0);
        assert_ne!(
            format!("{:.*} {unit}", places, 65.9 / div),
            format!("{:.*} {unit}", places, 64.2 / div)
        );
        let (div, unit, places) = time_unit(3000.0);
        assert_ne!(
            format!("{:.*} {unit}", places, 65.9 / div),
            format!("{:.*} {unit}", places, 64.2 / div)
        );
    }
}
