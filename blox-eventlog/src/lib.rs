//! # blox-eventlog
//!
//! The event log: the round loop's decisions ([`blox_core::round::events`])
//! as JSON lines. The simulator writes `events.jsonl` beside its tables;
//! the scheduler appends to one beside its job table, rotated by size.
//! [`read`] and [`Follow`] read them back (`blox events`), and [`diff`]
//! compares two logs decision by decision (`blox events --diff`).

use blox_core::round::events::{Event, What};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Something wrong with an event log, naming the file (and line).
#[derive(Debug, thiserror::Error)]
pub enum EventLogError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}: not an event: {message}", path.display())]
    Line {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> EventLogError + '_ {
    move |source| EventLogError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Appends events to a JSON-lines file; past `max_bytes` the file moves to
/// `PATH.1` (the older ones to `PATH.2` … `PATH.KEEP`, the oldest dropped)
/// and a new one starts.
pub struct EventLog {
    path: PathBuf,
    out: BufWriter<File>,
    size: u64,
    max_bytes: Option<u64>,
    keep: u32,
    /// Files readable by their owner only (0600): a live scheduler's log
    /// holds every job's argv.
    private: bool,
}

/// Opens `path` for appending, creating it; `private`: mode 0600, also for
/// a file that existed with a wider one.
fn open_log(path: &Path, private: bool, truncate: bool) -> std::io::Result<File> {
    let mut o = std::fs::OpenOptions::new();
    o.create(true);
    if truncate {
        o.write(true).truncate(true);
    } else {
        o.append(true);
    }
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let f = o.open(path)?;
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(f)
}

impl EventLog {
    /// A new, empty log (an existing file is replaced); never rotated.
    pub fn create(path: &Path) -> Result<EventLog, EventLogError> {
        let f = File::create(path).map_err(io(path))?;
        Ok(EventLog {
            path: path.to_path_buf(),
            out: BufWriter::new(f),
            size: 0,
            max_bytes: None,
            keep: 0,
            private: false,
        })
    }

    /// Appends to `path` (created if missing), rotating past `max_bytes`
    /// and keeping `keep` rotated files; every file of it is readable by
    /// its owner only (0600).
    pub fn append(path: &Path, max_bytes: u64, keep: u32) -> Result<EventLog, EventLogError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        let f = open_log(path, true, false).map_err(io(path))?;
        let size = f.metadata().map_err(io(path))?.len();
        Ok(EventLog {
            path: path.to_path_buf(),
            out: BufWriter::new(f),
            size,
            max_bytes: Some(max_bytes.max(1)),
            keep,
            private: true,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `events`, one line each, and flushes (a reader following the
    /// file sees whole rounds); rotates once the file is past its size.
    pub fn write(&mut self, events: &[Event]) -> Result<(), EventLogError> {
        if events.is_empty() {
            return Ok(());
        }
        for e in events {
            let line = serde_json::to_string(e).map_err(|e| EventLogError::Io {
                path: self.path.clone(),
                source: std::io::Error::other(e),
            })?;
            self.out
                .write_all(line.as_bytes())
                .map_err(io(&self.path))?;
            self.out.write_all(b"\n").map_err(io(&self.path))?;
            self.size += line.len() as u64 + 1;
        }
        self.out.flush().map_err(io(&self.path))?;
        if self.max_bytes.is_some_and(|m| self.size >= m) {
            self.rotate()?;
        }
        Ok(())
    }

    fn rotate(&mut self) -> Result<(), EventLogError> {
        let numbered = |i: u32| rotated(&self.path, i);
        // With nothing kept, the file just starts over.
        if self.keep > 0 {
            let _ = std::fs::remove_file(numbered(self.keep));
            for i in (1..self.keep).rev() {
                let from = numbered(i);
                if from.exists() {
                    std::fs::rename(&from, numbered(i + 1)).map_err(io(&from))?;
                }
            }
            std::fs::rename(&self.path, numbered(1)).map_err(io(&self.path))?;
        }
        let f = open_log(&self.path, self.private, true).map_err(io(&self.path))?;
        self.out = BufWriter::new(f);
        self.size = 0;
        Ok(())
    }
}

/// `PATH.i`, the `i`-th newest rotated file.
pub fn rotated(path: &Path, i: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{i}"));
    PathBuf::from(s)
}

/// The rotated files of the log at `path` that exist, oldest first
/// (`PATH.N` … `PATH.1`).
pub fn rotated_files(path: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut i = 1;
    while rotated(path, i).exists() {
        files.push(rotated(path, i));
        i += 1;
    }
    files.reverse();
    files
}

fn parse(path: &Path, line_no: usize, line: &str) -> Result<Event, EventLogError> {
    serde_json::from_str(line).map_err(|e| EventLogError::Line {
        path: path.to_path_buf(),
        line: line_no,
        message: e.to_string(),
    })
}

/// Every event of the log at `path`, oldest first, with its rotated files
/// (`PATH.KEEP` … `PATH.1`, then `PATH`) when `with_rotated`.
pub fn read(path: &Path, with_rotated: bool) -> Result<Vec<Event>, EventLogError> {
    read_files(path, with_rotated, false).map(|(events, _)| events)
}

/// [`read`], tolerating a log cut short: an unreadable last line of the
/// newest file (a write torn by a crash or a full disk) is left out and
/// said in the returned note. Any other bad line is an error.
pub fn read_cut(
    path: &Path,
    with_rotated: bool,
) -> Result<(Vec<Event>, Option<String>), EventLogError> {
    read_files(path, with_rotated, true)
}

/// The events of the log's files, a line at a time; with `torn_tail_ok`
/// a bad last line of the newest file is a note, not an error.
fn read_files(
    path: &Path,
    with_rotated: bool,
    torn_tail_ok: bool,
) -> Result<(Vec<Event>, Option<String>), EventLogError> {
    let mut files = if with_rotated {
        rotated_files(path)
    } else {
        Vec::new()
    };
    files.push(path.to_path_buf());
    let mut out = Vec::new();
    let mut note = None;
    let last_file = files.len() - 1;
    for (k, f) in files.iter().enumerate() {
        let r = BufReader::new(File::open(f).map_err(io(f))?);
        let mut lines = r.lines().enumerate().peekable();
        while let Some((i, line)) = lines.next() {
            let line = line.map_err(io(f))?;
            if line.trim().is_empty() {
                continue;
            }
            match parse(f, i + 1, &line) {
                Ok(e) => out.push(e),
                Err(e) if torn_tail_ok && k == last_file && lines.peek().is_none() => {
                    note = Some(format!(
                        "{e}; the log is cut short there, its last line is left out"
                    ));
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok((out, note))
}

/// Reads the events appended to a log since the last call, across
/// rotations (`blox events --follow`). Only whole lines are returned.
pub struct Follow {
    path: PathBuf,
    pos: u64,
    line_no: usize,
    partial: String,
    #[cfg(unix)]
    inode: u64,
}

impl Follow {
    /// Follows `path` from its current end (`from_start`: from its start).
    pub fn new(path: &Path, from_start: bool) -> Result<Follow, EventLogError> {
        let meta = std::fs::metadata(path).map_err(io(path))?;
        Ok(Follow {
            path: path.to_path_buf(),
            pos: if from_start { 0 } else { meta.len() },
            line_no: 0,
            partial: String::new(),
            #[cfg(unix)]
            inode: std::os::unix::fs::MetadataExt::ino(&meta),
        })
    }

    /// The events written since the last call (none if the file is
    /// missing for a moment while it rotates).
    pub fn poll(&mut self) -> Result<Vec<Event>, EventLogError> {
        let Ok(meta) = std::fs::metadata(&self.path) else {
            return Ok(Vec::new());
        };
        #[cfg(unix)]
        let replaced = std::os::unix::fs::MetadataExt::ino(&meta) != self.inode;
        #[cfg(not(unix))]
        let replaced = false;
        let mut out = Vec::new();
        if replaced || meta.len() < self.pos {
            // Rotated: what was left of the file being read (now `PATH.i`),
            // then the files rotated after it (`PATH.(i-1)` … `PATH.1`,
            // written whole since the last call), then the new file from its
            // start. A file already dropped past `keep` is lost to a reader
            // that polls that rarely.
            #[cfg(unix)]
            if replaced {
                out.extend(self.catch_up()?);
            }
            self.restart();
            #[cfg(unix)]
            {
                self.inode = std::os::unix::fs::MetadataExt::ino(&meta);
            }
        }
        if meta.len() > self.pos {
            let path = self.path.clone();
            out.extend(self.read_new(&path)?);
        }
        Ok(out)
    }

    /// After a rotation: the rest of the file being read, wherever it moved
    /// among `PATH.1` … `PATH.N`, and every file rotated after it.
    #[cfg(unix)]
    fn catch_up(&mut self) -> Result<Vec<Event>, EventLogError> {
        use std::os::unix::fs::MetadataExt;
        let moved_to = (1..)
            .map(|i| (i, rotated(&self.path, i)))
            .map_while(|(i, p)| std::fs::metadata(&p).ok().map(|m| (i, m.ino())))
            .find(|&(_, ino)| ino == self.inode)
            .map(|(i, _)| i);
        let mut out = Vec::new();
        for j in (1..=moved_to.unwrap_or(0)).rev() {
            if Some(j) != moved_to {
                self.restart();
            }
            out.extend(self.read_new(&rotated(&self.path, j))?);
        }
        Ok(out)
    }

    /// Reads the next file from its start.
    fn restart(&mut self) {
        self.pos = 0;
        self.line_no = 0;
        self.partial.clear();
    }

    /// The whole lines of `path` (the followed file, or where it moved) past
    /// `self.pos`.
    fn read_new(&mut self, path: &Path) -> Result<Vec<Event>, EventLogError> {
        let mut f = File::open(path).map_err(io(path))?;
        f.seek(SeekFrom::Start(self.pos)).map_err(io(path))?;
        let mut buf = String::new();
        let n = f.read_to_string(&mut buf).map_err(io(path))?;
        self.pos += n as u64;
        self.partial.push_str(&buf);
        let mut out = Vec::new();
        while let Some(i) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=i).collect();
            self.line_no += 1;
            if !line.trim().is_empty() {
                out.push(parse(path, self.line_no, line.trim_end())?);
            }
        }
        Ok(out)
    }
}

/// How two event logs differ, decision by decision.
#[derive(Debug, Default)]
pub struct EventDiff {
    /// Decisions present in both with the same GPU count and round.
    pub matched: usize,
    /// What differs, one line each, in the first log's order.
    pub differences: Vec<String>,
}

impl EventDiff {
    pub fn is_same(&self) -> bool {
        self.differences.is_empty()
    }
}

/// The key a decision is matched on: job name (or the switch), kind, and
/// which occurrence of that pair it is.
type Key = (String, &'static str, usize);

fn keyed(events: &[Event]) -> Vec<(Key, &Event)> {
    let mut seen: HashMap<(String, &'static str), usize> = HashMap::new();
    events
        .iter()
        .filter_map(|e| {
            let who = match (&e.name, &e.what) {
                (Some(n), _) => n.clone(),
                (None, What::PolicySwitched { from, to }) => format!("{from} -> {to}"),
                // Node joins and departures are the cluster, not decisions.
                _ => return None,
            };
            // Submissions are inputs, not decisions.
            if matches!(e.what, What::Submitted { .. }) {
                return None;
            }
            // A wait reason is matched by its kind (`waiting-for-gpus`, …).
            let kind = match &e.what {
                What::Waiting { wait_kind, .. } => blox_core::wait::WaitReason::KINDS
                    .iter()
                    .copied()
                    .find(|k| k == wait_kind)
                    .unwrap_or("waiting"),
                w => w.kind(),
            };
            let n = seen.entry((who.clone(), kind)).or_default();
            *n += 1;
            Some(((who, kind, *n), e))
        })
        .collect()
}

/// The first round with a job event: rounds are compared from there, so a
/// scheduler that ran idle rounds before the trace started still lines up.
fn origin(events: &[Event]) -> u64 {
    events
        .iter()
        .find(|e| e.job.is_some())
        .map(|e| e.round)
        .unwrap_or(0)
}

/// `e`'s round counted from `origin` (negative before it).
fn rel(e: &Event, origin: u64) -> i64 {
    e.round as i64 - origin as i64
}

fn gpu_count(w: &What) -> Option<usize> {
    match w {
        What::Launched { gpus, .. } | What::Adopted { gpus } => Some(gpus.len()),
        _ => None,
    }
}

/// Compares the decisions of `a` and `b`: jobs are matched by name, each
/// decision by its kind and occurrence; rounds count from each log's first
/// job event and may differ by `slack_rounds`. Times, GPU identities and
/// free-text reasons are not compared (a live cluster numbers its nodes as
/// its workers join); GPU counts are.
pub fn diff(a: &[Event], b: &[Event], slack_rounds: u64) -> EventDiff {
    let (oa, ob) = (origin(a), origin(b));
    diff_with(a, b, slack_rounds, |e| rel(e, oa), |e| rel(e, ob))
}

/// [`diff`] for two logs on one clock (a history and its replay): an
/// event's round is its time's, `(time_s − t0) / round_s` to the nearest
/// round, in both. A live scheduler numbers every round, idle ones too,
/// and a late round's events keep its number; a simulation skips idle
/// rounds without numbering them: times agree where numbers cannot.
pub fn diff_on_clock(
    a: &[Event],
    b: &[Event],
    slack_rounds: u64,
    t0: f64,
    round_s: f64,
) -> EventDiff {
    let on_clock = |e: &Event| {
        let r = ((e.time_s - t0) / round_s).round();
        if r.is_finite() {
            r as i64
        } else {
            0
        }
    };
    diff_with(a, b, slack_rounds, on_clock, on_clock)
}

fn diff_with(
    a: &[Event],
    b: &[Event],
    slack_rounds: u64,
    rel_a: impl Fn(&Event) -> i64,
    rel_b: impl Fn(&Event) -> i64,
) -> EventDiff {
    let in_b = keyed(b);
    // What `a` has not matched yet.
    let mut kb: HashMap<&Key, &Event> = in_b.iter().map(|(k, e)| (k, *e)).collect();
    let mut d = EventDiff::default();
    for (k, ea) in keyed(a) {
        let Some(eb) = kb.remove(&k) else {
            d.differences.push(format!(
                "only in the first: round {} {}",
                rel_a(ea),
                show(&k)
            ));
            continue;
        };
        let (ra, rb) = (rel_a(ea), rel_b(eb));
        let mut why = Vec::new();
        if ra.abs_diff(rb) > slack_rounds {
            why.push(format!("round {ra} against {rb}"));
        }
        if gpu_count(&ea.what) != gpu_count(&eb.what) {
            why.push(format!(
                "{} GPUs against {}",
                gpu_count(&ea.what).unwrap_or(0),
                gpu_count(&eb.what).unwrap_or(0)
            ));
        }
        if why.is_empty() {
            d.matched += 1;
        } else {
            d.differences
                .push(format!("{}: {}", show(&k), why.join(", ")));
        }
    }
    for (k, eb) in &in_b {
        if kb.contains_key(k) {
            d.differences.push(format!(
                "only in the second: round {} {}",
                rel_b(eb),
                show(k)
            ));
        }
    }
    d
}

fn show(k: &Key) -> String {
    let nth = if k.2 > 1 {
        format!(" (#{})", k.2)
    } else {
        String::new()
    };
    format!("{} {}{nth}", k.0, k.1)
}

#[cfg(test)]
mod tests;
