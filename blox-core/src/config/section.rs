//! One table of a config, with where each of its keys was written, so that
//! its owner (a policy, the simulator, the runtime) reports mistakes at the
//! user's own file and line, or at the `--set` that caused them.

use super::origin::Origin;
use super::value::{Table, Value};
use super::ConfigError;
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One table of the config, with enough context to report positions.
#[derive(Clone, Debug)]
pub struct Section {
    name: String,
    table: Table,
    origin: Origin,
    /// Folder relative paths in this section are resolved against (the config
    /// file's folder); `None` for sections built in code (the current folder).
    base_dir: Option<PathBuf>,
    /// `[run] seed`, for modules whose own seed defaults to the run's.
    run_seed: Option<u64>,
    /// The config's `[workload]`, for modules whose files default to the
    /// workload's (Optimus's profiles).
    workload: Option<Box<Section>>,
}

impl Section {
    /// A section named `name` holding `table`, whose keys were written at
    /// `origin`; relative paths in it resolve against `base_dir` (`None`:
    /// the current folder). Config readers build sections so.
    pub fn new(name: &str, table: Table, origin: Origin, base_dir: Option<PathBuf>) -> Self {
        Section {
            name: name.to_string(),
            table,
            origin,
            base_dir,
            run_seed: None,
            workload: None,
        }
    }

    /// `[run] seed` of the config this module section came from (`None` for
    /// sections built in code): a policy's own `seed` should default to it,
    /// so that a sweep's seeds reach the policy too.
    pub fn run_seed(&self) -> Option<u64> {
        self.run_seed
    }

    /// This section, knowing the run's seed.
    pub fn with_run_seed(mut self, seed: u64) -> Self {
        self.run_seed = Some(seed);
        self
    }

    /// The config's `[workload]` section, for a module section of a config
    /// that has one: a module may default a file to the workload's (e.g.
    /// the application profiles beside a Pollux-format workload).
    pub fn workload(&self) -> Option<&Section> {
        self.workload.as_deref()
    }

    /// This section, knowing the config's `[workload]`.
    pub fn with_workload(mut self, workload: Option<Section>) -> Self {
        self.workload = workload.map(Box::new);
        self
    }

    /// A section built in code (tests, forks): errors report `<code>`.
    pub fn from_table(name: &str, table: Table) -> Self {
        Section::new(name, table, Origin::code(), None)
    }

    /// An empty section (every parameter at its default).
    pub fn empty(name: &str) -> Self {
        Self::from_table(name, Table::new())
    }

    /// A table found at `path` inside this section (e.g. the synthesizer's
    /// `scheduling.1`), as a section of its own named `name`, keeping the
    /// positions of its keys.
    pub fn subsection(&self, name: &str, path: &str, table: Table) -> Section {
        let set = self
            .origin
            .set
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix(&format!("{path}."))
                    .map(|r| (r.to_string(), v.clone()))
            })
            .collect();
        let origin = Origin {
            file: self.origin.file.clone(),
            lines: Arc::new(self.origin.lines.under(path)),
            header: self.origin.lines.line(path).unwrap_or(self.origin.header),
            set: Arc::new(set),
            whole: self
                .origin
                .whole
                .clone()
                .or_else(|| self.origin.set.get(path).cloned()),
        };
        let mut sub = Section::new(name, table, origin, self.base_dir.clone());
        sub.run_seed = self.run_seed;
        sub.workload = self.workload.clone();
        sub
    }

    /// `p` resolved against the config file's folder when relative.
    pub fn resolve_path(&self, p: &Path) -> PathBuf {
        match &self.base_dir {
            Some(b) if p.is_relative() => b.join(p),
            _ => p.to_path_buf(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The file the section was written in.
    pub fn file(&self) -> &str {
        &self.origin.file
    }

    /// Deserialises the section into a typed struct (use
    /// `#[serde(deny_unknown_fields)]` so a mistyped key is an error). The
    /// error names the key and where it was written.
    ///
    /// No number in a config may be infinite or NaN (TOML allows `inf` and
    /// `nan`): every seconds, rate and count key means a finite amount, and
    /// one that is not would hang or crash whatever reads it.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        if let Some((key, v)) = non_finite(&self.table, "") {
            return Err(self.error_at(
                &key,
                format!("`{key}` = {v}: numbers in a config must be finite"),
            ));
        }
        Value::Table(self.table.clone()).into_typed().map_err(|e| {
            let path = e.path().map(str::to_string).collect();
            self.explain(path, e.message().trim().to_string())
        })
    }

    /// Turns a deserialisation error at `path` into one that names the key.
    fn explain(&self, path: Vec<String>, message: String) -> ConfigError {
        let unknown = message
            .strip_prefix("unknown field `")
            .and_then(|r| r.split('`').next())
            .map(str::to_string);
        let mut key = path.join(".");
        if let Some(u) = unknown.as_ref().filter(|u| path.last() != Some(u)) {
            key = if key.is_empty() {
                u.clone()
            } else {
                format!("{key}.{u}")
            };
        }
        let mut message =
            if unknown.is_none() && !key.is_empty() && !message.contains(&format!("`{key}`")) {
                format!("`{key}`: {message}")
            } else {
                message
            };
        if unknown.is_some() {
            if let Some(o) = self.origin.set_by("policy") {
                message.push_str(&format!(
                    " (the policy was changed by `{o}`; a parameter of the old policy is removed with --unset {}.{key})",
                    self.name
                ));
            }
        }
        if key.is_empty() {
            self.header_error(message)
        } else {
            self.error_at(&key, message)
        }
    }

    /// An error at `key` (or at the section header if the key is absent).
    pub fn error_at(&self, key: &str, message: impl Into<String>) -> ConfigError {
        let message = message.into();
        if let Some(o) = self.origin.set_by(key) {
            return ConfigError::Override {
                expr: o.to_string(),
                message: format!("[{}] {message}", self.name),
            };
        }
        match self.line_of_key(key) {
            Some(line) => self.field_error(line, message),
            None => self.header_error(message),
        }
    }

    fn header_error(&self, message: String) -> ConfigError {
        if let Some(w) = &self.origin.whole {
            return ConfigError::Override {
                expr: w.clone(),
                message: format!("[{}] {message}", self.name),
            };
        }
        self.field_error(self.origin.header, message)
    }

    fn field_error(&self, line: usize, message: String) -> ConfigError {
        ConfigError::Field {
            file: self.origin.file.to_string(),
            line,
            section: self.name.clone(),
            message,
        }
    }

    /// Line of `key` (a dotted path inside this section) in the file, if it
    /// is written there.
    pub fn line_of_key(&self, key: &str) -> Option<usize> {
        self.origin.lines.line(key)
    }

    /// Line of the section's header (0 when unknown).
    pub fn header_line(&self) -> usize {
        self.origin.header
    }

    /// Where `key` was written: `file:line`, or the override that set it.
    pub fn location(&self, key: &str) -> String {
        if let Some(o) = self.origin.set_by(key) {
            return o.to_string();
        }
        format!(
            "{}:{}",
            self.origin.file,
            self.line_of_key(key).unwrap_or(self.origin.header)
        )
    }

    /// Removes and returns a string-valued key (e.g. `policy`).
    pub fn take_string(&mut self, key: &str) -> Result<Option<String>, ConfigError> {
        match self.table.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => {
                let s = s.clone();
                self.table.remove(key);
                Ok(Some(s))
            }
            Some(Value::Array(a)) if key == "policy" && a.len() > 1 => Err(self.error_at(
                key,
                format!(
                    "`policy` names one module: [{}] is an exclusive extension point, and {} \
                     modules cannot all claim it",
                    self.name,
                    a.len()
                ),
            )),
            Some(other) => Err(self.error_at(
                key,
                format!("`{key}` must be a string, found {}", other.type_str()),
            )),
        }
    }

    /// The same section (names, positions) holding `table` instead.
    pub fn with_table(&self, table: Table) -> Section {
        Section {
            table,
            ..self.clone()
        }
    }
}

/// The first infinite or NaN number in `table` (depth first), with its dotted
/// path (array elements by index).
fn non_finite(table: &Table, prefix: &str) -> Option<(String, f64)> {
    fn walk(v: &Value, path: String) -> Option<(String, f64)> {
        match v {
            Value::Float(f) if !f.is_finite() => Some((path, *f)),
            Value::Table(t) => non_finite(t, &path),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .find_map(|(i, v)| walk(v, format!("{path}.{i}"))),
            _ => None,
        }
    }
    table.iter().find_map(|(k, v)| {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        walk(v, path)
    })
}
