//! Where config values come from: the lines of keys in a TOML file (from the
//! parser's spans), `--set`/`--unset` overrides, and whole sections supplied
//! by another file (a sweep's `sections.*`).

use blox_core::config::{ConfigError, KeyLines};
use std::path::PathBuf;
use toml::de::{DeTable, DeValue};

/// The line of every key of a TOML document, by dotted path
/// (`scheduling.policy`, `cluster.node_groups.0.count`), read from the
/// parser's spans. A document that does not parse gives whatever could be
/// recovered (its parse error is reported elsewhere).
pub fn key_lines(source: &str) -> KeyLines {
    let starts: Vec<usize> = std::iter::once(0)
        .chain(source.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let line_at = |offset: usize| starts.partition_point(|&s| s <= offset);
    let (doc, _errors) = DeTable::parse_recoverable(source);
    let mut out = Vec::new();
    walk(doc.get_ref(), "", &line_at, &mut out);
    KeyLines::from_pairs(out)
}

fn walk(
    table: &DeTable<'_>,
    prefix: &str,
    line_at: &dyn Fn(usize) -> usize,
    out: &mut Vec<(String, usize)>,
) {
    for (k, v) in table.iter() {
        let path = if prefix.is_empty() {
            k.get_ref().to_string()
        } else {
            format!("{prefix}.{}", k.get_ref())
        };
        out.push((path.clone(), line_at(k.span().start)));
        walk_value(v.get_ref(), &path, line_at, out);
    }
}

fn walk_value(
    v: &DeValue<'_>,
    path: &str,
    line_at: &dyn Fn(usize) -> usize,
    out: &mut Vec<(String, usize)>,
) {
    if let Some(t) = v.as_table() {
        walk(t, path, line_at, out);
    } else if let Some(a) = v.as_array() {
        for (i, item) in a.iter().enumerate() {
            let p = format!("{path}.{i}");
            out.push((p.clone(), line_at(item.span().start)));
            walk_value(item.get_ref(), &p, line_at, out);
        }
    }
}

/// One change to a config before it is read: `--set key=value` (the value in
/// TOML syntax; anything that is not valid TOML is taken as a string), or
/// `--set key=` / `--unset key`, which removes the key.
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    /// Dotted path, `section.key` (`scheduling.policy`, `run.seed`).
    pub key: String,
    /// `None` removes the key.
    pub value: Option<String>,
    /// Where it was given, for messages (`--set run.seed=3`, or a sweep file).
    pub origin: String,
}

impl Override {
    /// `key = value`, given on the command line.
    pub fn set(key: &str, value: &str) -> Self {
        let (key, value) = (key.trim(), value.trim());
        if value.is_empty() {
            return Override::unset(key).with_origin(format!("--set {key}="));
        }
        Override {
            key: key.to_string(),
            value: Some(value.to_string()),
            origin: format!("--set {key}={value}"),
        }
    }

    /// Removes `key`, given on the command line.
    pub fn unset(key: &str) -> Self {
        Override {
            key: key.trim().to_string(),
            value: None,
            origin: format!("--unset {}", key.trim()),
        }
    }

    /// Parses `KEY=VALUE` (`KEY=` removes the key).
    pub fn parse_cli(expr: &str) -> Result<Self, ConfigError> {
        let (k, v) = expr.split_once('=').ok_or_else(|| ConfigError::Override {
            expr: format!("--set {expr}"),
            message: "expected KEY=VALUE (or KEY= to remove the key)".into(),
        })?;
        Ok(Override::set(k, v))
    }

    /// The same change, reported as coming from `origin`.
    pub fn with_origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = origin.into();
        self
    }

    fn error(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::Override {
            expr: self.origin.clone(),
            message: message.into(),
        }
    }

    /// Applies the change to `doc`.
    pub fn apply(&self, doc: &mut toml::Table) -> Result<(), ConfigError> {
        let parts: Vec<&str> = self.key.split('.').collect();
        if parts.iter().any(|p| p.trim().is_empty()) {
            return Err(self.error("the key must be a dotted path like `scheduling.policy`"));
        }
        let mut table = doc;
        for p in &parts[..parts.len() - 1] {
            if self.value.is_none() && !table.contains_key(*p) {
                return Err(self.error(format!("there is no `{}` to remove", self.key)));
            }
            let entry = table
                .entry(p.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            table = match entry {
                toml::Value::Table(t) => t,
                other => {
                    return Err(self.error(format!("`{p}` is a {}, not a table", other.type_str())))
                }
            };
        }
        let last = parts[parts.len() - 1];
        match &self.value {
            None => {
                if table.remove(last).is_none() {
                    return Err(self.error(format!("there is no `{}` to remove", self.key)));
                }
            }
            Some(v) => {
                let parsed = toml::from_str::<toml::Table>(&format!("v = {v}"))
                    .ok()
                    .and_then(|mut t| t.remove("v"))
                    .unwrap_or_else(|| toml::Value::String(v.clone()));
                table.insert(last.to_string(), parsed);
            }
        }
        Ok(())
    }
}

/// A whole section that replaces the config file's own (a sweep file's
/// `sections.workload = { ... }`); its errors name where it was written and
/// its relative paths resolve against that file's folder.
#[derive(Clone, Debug)]
pub struct SectionSource {
    pub name: String,
    pub table: toml::Table,
    /// The file it was written in.
    pub file: String,
    /// Its keys' lines in that file (relative to the section).
    pub lines: KeyLines,
    /// Line of the section itself in that file.
    pub line: usize,
    /// Folder its relative paths are resolved against.
    pub base_dir: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_lines_come_from_the_parser_not_a_text_search() {
        let src = "# policy = \"x\" in a comment\n[run]\nround_s = 60\n\n[scheduling]\n\"policy\" = \"las\"\nnested = { a = 1 }\n[[cluster.node_groups]]\ncount = 2\n[[cluster.node_groups]]\ncount = 3\n";
        let l = key_lines(src);
        assert_eq!(l.line("run"), Some(2));
        assert_eq!(l.line("run.round_s"), Some(3));
        assert_eq!(l.line("scheduling.policy"), Some(6));
        assert_eq!(l.line("scheduling.nested.a"), Some(7));
        assert_eq!(l.line("cluster.node_groups.1.count"), Some(11));
        assert_eq!(l.under("scheduling").line("policy"), Some(6));
    }

    #[test]
    fn an_empty_value_removes_the_key() {
        let mut doc: toml::Table = toml::from_str("[admission]\npolicy = \"x\"\nk = 1\n").unwrap();
        Override::set("admission.k", "").apply(&mut doc).unwrap();
        assert!(!doc["admission"].as_table().unwrap().contains_key("k"));
        let e = Override::unset("admission.k").apply(&mut doc).unwrap_err();
        assert!(e.to_string().contains("no `admission.k` to remove"), "{e}");
        Override::set("run.seed", "3").apply(&mut doc).unwrap();
        assert_eq!(doc["run"]["seed"].as_integer(), Some(3));
    }
}
