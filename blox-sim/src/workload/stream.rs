//! Production traces read a row at a time (millions of rows; only what a job
//! needs is kept), with or without a header line, and a tally of the rows
//! that could not be mapped onto jobs.

use super::{SimJob, WorkModel, WorkloadError};
use blox_core::JobSpec;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// A CSV file read row by row. Columns are found by name: from the file's
/// header when its first line names every expected column, else in the
/// expected order (the Alibaba PAI tables ship without a header line).
pub struct Stream {
    path: PathBuf,
    reader: csv::Reader<std::fs::File>,
    index: HashMap<String, usize>,
    /// A first line that was data, not a header.
    pending: Option<csv::StringRecord>,
}

fn io(path: &Path, e: impl std::fmt::Display) -> WorkloadError {
    WorkloadError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl Stream {
    pub fn open(path: &Path, expected: &[&str]) -> Result<Stream, WorkloadError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .trim(csv::Trim::All)
            .flexible(true)
            .from_path(path)
            .map_err(|e| io(path, e))?;
        let mut first = csv::StringRecord::new();
        let got = reader.read_record(&mut first).map_err(|e| io(path, e))?;
        let names: Vec<String> = first
            .iter()
            .map(|h| h.trim_start_matches('\u{feff}').to_string())
            .collect();
        let is_header = got && expected.iter().all(|c| names.iter().any(|n| n == c));
        let (index, pending) = if is_header {
            let index = names.into_iter().enumerate().map(|(i, n)| (n, i)).collect();
            (index, None)
        } else {
            let index = expected
                .iter()
                .enumerate()
                .map(|(i, n)| (n.to_string(), i))
                .collect();
            (index, got.then_some(first))
        };
        Ok(Stream {
            path: path.to_path_buf(),
            reader,
            index,
            pending,
        })
    }

    /// Calls `f` on every non-empty row, in file order.
    pub fn for_each(
        mut self,
        mut f: impl FnMut(&Row) -> Result<(), WorkloadError>,
    ) -> Result<(), WorkloadError> {
        let mut rec = csv::StringRecord::new();
        if let Some(first) = self.pending.take() {
            self.visit(&first, &mut f)?;
        }
        loop {
            match self.reader.read_record(&mut rec) {
                Ok(true) => self.visit(&rec, &mut f)?,
                Ok(false) => return Ok(()),
                Err(e) => return Err(io(&self.path, e)),
            }
        }
    }

    fn visit(
        &self,
        rec: &csv::StringRecord,
        f: &mut impl FnMut(&Row) -> Result<(), WorkloadError>,
    ) -> Result<(), WorkloadError> {
        if rec.iter().all(str::is_empty) {
            return Ok(());
        }
        f(&Row {
            path: &self.path,
            line: rec.position().map_or(0, |p| p.line()),
            rec,
            index: &self.index,
        })
    }
}

/// One row of a [`Stream`].
pub struct Row<'a> {
    pub path: &'a Path,
    pub line: u64,
    rec: &'a csv::StringRecord,
    index: &'a HashMap<String, usize>,
}

/// Why a field could not be read (the row is then counted as unmappable).
pub type Unreadable = String;

impl Row<'_> {
    /// The field, or `""` when the row is short.
    pub fn str(&self, column: &str) -> &str {
        self.index
            .get(column)
            .and_then(|&i| self.rec.get(i))
            .unwrap_or("")
    }

    /// A number; `None` when empty or NaN (how the traces write "unknown").
    pub fn opt_f64(&self, column: &str) -> Result<Option<f64>, Unreadable> {
        let s = self.str(column);
        if s.is_empty() || s.eq_ignore_ascii_case("nan") || s.eq_ignore_ascii_case("none") {
            return Ok(None);
        }
        match s.parse::<f64>() {
            Ok(v) if v.is_nan() => Ok(None),
            Ok(v) if v.is_finite() => Ok(Some(v)),
            _ => Err(format!("unreadable `{column}`")),
        }
    }

    /// An error naming this row's file, line and `column`.
    pub fn error(&self, column: &str, message: impl Into<String>) -> WorkloadError {
        WorkloadError::Field {
            path: self.path.to_path_buf(),
            line: self.line,
            column: column.to_string(),
            message: message.into(),
        }
    }
}

/// Rows of a trace that did not become jobs, by reason, with the first line
/// of each (so a user can look at one).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    pub rows: u64,
    pub jobs: u64,
    /// reason → (rows, first line)
    pub skipped: BTreeMap<String, (u64, u64)>,
}

impl Tally {
    pub fn skip(&mut self, reason: impl Into<String>, line: u64) {
        self.skipped.entry(reason.into()).or_insert((0, line)).0 += 1;
    }

    pub fn skipped_rows(&self) -> u64 {
        self.skipped.values().map(|(n, _)| n).sum()
    }

    /// `N rows: J jobs; skipped: n reason (first on line L), …`.
    pub fn describe(&self) -> String {
        let mut s = format!("{} rows: {} jobs", self.rows, self.jobs);
        if !self.skipped.is_empty() {
            s.push_str("; not mapped: ");
            let parts: Vec<String> = self
                .skipped
                .iter()
                .map(|(why, (n, line))| format!("{n} {why} (first on line {line})"))
                .collect();
            s.push_str(&parts.join(", "));
        }
        s
    }

    /// Logs the tally: a warning when rows were left out, else an info line.
    pub fn log(&self, path: &Path) {
        if self.skipped.is_empty() {
            tracing::info!("{}: {}", path.display(), self.describe());
        } else {
            tracing::warn!("{}: {}", path.display(), self.describe());
        }
    }
}

/// A production-trace row that becomes a job.
pub struct TraceJob {
    pub submit_s: f64,
    /// Line in the trace (orders equal submit times).
    pub line: u64,
    pub name: String,
    pub user: String,
    /// Its team (Helios's VC, PAI's user); empty if none.
    pub team: String,
    pub gpus: u32,
    pub run_s: f64,
}

/// The jobs sorted by submission, ids `0..n` in that order, arrivals relative
/// to the first; each runs `run_s` at its GPU count; the tally counts them.
pub fn in_submit_order(mut kept: Vec<TraceJob>, tally: &mut Tally) -> Vec<SimJob> {
    kept.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s).then(a.line.cmp(&b.line)));
    let t0 = kept.first().map_or(0.0, |k| k.submit_s);
    tally.jobs = kept.len() as u64;
    kept.into_iter()
        .enumerate()
        .map(|(i, k)| {
            let mut spec = JobSpec::new(i as u64, k.submit_s - t0, k.gpus).with_duration(k.run_s);
            if !k.name.is_empty() {
                spec.name = k.name;
            }
            spec.user = (!k.user.is_empty()).then_some(k.user);
            spec.team = (!k.team.is_empty()).then_some(k.team);
            SimJob {
                startup_s: None,
                converge_at: None,
                spec,
                work: WorkModel::Duration {
                    duration_s: k.run_s,
                },
            }
        })
        .collect()
}

/// Seconds since 1970-01-01 of a `YYYY-MM-DD HH:MM:SS` (or `YYYY-MM-DDTHH:MM:SS`)
/// wall-clock time, read as UTC (only differences between times matter).
pub fn parse_datetime(s: &str) -> Option<f64> {
    let s = s.trim();
    let (date, time) = s.split_once([' ', 'T'])?;
    let mut d = date.split('-');
    let (y, m, day): (i64, i64, i64) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    let mut t = time.split(':');
    let (h, min): (i64, i64) = (t.next()?.parse().ok()?, t.next()?.parse().ok()?);
    let sec: f64 = t.next().unwrap_or("0").parse().ok()?;
    if d.next().is_some()
        || t.next().is_some()
        || !(1..=12).contains(&m)
        || !(1..=31).contains(&day)
        || !(0..24).contains(&h)
        || !(0..60).contains(&min)
        || !(0.0..61.0).contains(&sec)
    {
        return None;
    }
    // Days from the civil date (proleptic Gregorian calendar).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days as f64 * 86_400.0 + (h * 3600 + min * 60) as f64 + sec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_are_seconds_since_the_epoch() {
        assert_eq!(parse_datetime("1970-01-01 00:00:00"), Some(0.0));
        assert_eq!(parse_datetime("2020-04-01 00:00:10"), Some(1_585_699_210.0));
        assert_eq!(parse_datetime("2000-03-01T12:30:00"), Some(951_913_800.0));
        // Leap day, and the day after it.
        let a = parse_datetime("2020-02-29 00:00:00").unwrap();
        let b = parse_datetime("2020-03-01 00:00:00").unwrap();
        assert_eq!(b - a, 86_400.0);
        for bad in [
            "",
            "2020-13-01 00:00:00",
            "2020-01-01",
            "yesterday",
            "2020-01-01 25:00:00",
        ] {
            assert_eq!(parse_datetime(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_tally_names_each_reason_with_its_first_line() {
        let mut t = Tally {
            rows: 5,
            jobs: 2,
            ..Default::default()
        };
        t.skip("CPU-only", 3);
        t.skip("CPU-only", 9);
        t.skip("no run time", 4);
        assert_eq!(t.skipped_rows(), 3);
        assert_eq!(
            t.describe(),
            "5 rows: 2 jobs; not mapped: 2 CPU-only (first on line 3), 1 no run time (first on line 4)"
        );
    }
}
