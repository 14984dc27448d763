//! Where a section's keys were written: the file, each key's line, and the
//! `--set` overrides that changed them. A config reader fills these in; a
//! [`super::Section`] uses them to name the place of every mistake.

use std::collections::HashMap;
use std::sync::Arc;

/// The line of every key of a config file, by dotted path
/// (`scheduling.policy`, `cluster.node_groups.0.count`).
#[derive(Clone, Debug, Default)]
pub struct KeyLines {
    lines: HashMap<String, usize>,
}

impl KeyLines {
    /// Key lines from `(dotted path, line)` pairs; the first line given for
    /// a path is kept.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, usize)>) -> Self {
        let mut lines = HashMap::new();
        for (k, v) in pairs {
            lines.entry(k).or_insert(v);
        }
        KeyLines { lines }
    }

    /// Line (from 1) of the key at `path`.
    pub fn line(&self, path: &str) -> Option<usize> {
        self.lines.get(path).copied()
    }

    /// The keys under `prefix.`, with the prefix removed.
    pub fn under(&self, prefix: &str) -> KeyLines {
        let p = format!("{prefix}.");
        KeyLines {
            lines: self
                .lines
                .iter()
                .filter_map(|(k, v)| k.strip_prefix(&p).map(|r| (r.to_string(), *v)))
                .collect(),
        }
    }
}

/// Where a section's keys come from, for error messages.
#[derive(Clone, Debug, Default)]
pub struct Origin {
    /// The file, as messages name it.
    pub file: Arc<str>,
    /// The section's keys' lines (section-relative paths).
    pub lines: Arc<KeyLines>,
    /// Line of the section header (0: unknown).
    pub header: usize,
    /// Keys changed by an override (section-relative path → origin).
    pub set: Arc<HashMap<String, String>>,
    /// The whole section came from an override.
    pub whole: Option<String>,
}

impl Origin {
    /// A section built in code: errors name `<code>`.
    pub fn code() -> Self {
        Origin {
            file: Arc::from("<code>"),
            ..Default::default()
        }
    }

    /// A section written in `file`, its keys at `lines`, its header at `header`.
    pub fn in_file(file: Arc<str>, lines: KeyLines, header: usize) -> Self {
        Origin {
            file,
            lines: Arc::new(lines),
            header,
            ..Default::default()
        }
    }

    /// The override that wrote `key` (or a table above it), if any.
    pub fn set_by(&self, key: &str) -> Option<&str> {
        if let Some(w) = &self.whole {
            return Some(w);
        }
        let mut k = key;
        loop {
            if let Some(o) = self.set.get(k) {
                return Some(o);
            }
            match k.rsplit_once('.') {
                Some((head, _)) => k = head,
                None => return None,
            }
        }
    }
}
