//! A `[packing]` sweep file: the FGD paper's grid of packing runs (pod
//! lists × policies × seeds) as `blox sweep FILE --out DIR` runs it, with
//! the outputs and checks of `blox pack` (`pack.csv`, `means.csv`,
//! `curves.csv`, a plot per pod list, each run beside its published
//! allocation). `blox report DIR` redraws the plots.
//!
//! ```toml
//! [packing]
//! traces = "all"        # bundled pod-list names or paths (relative to this file); "all": the 17
//! policies = "all"      # fgd, best-fit, dot-product, gpu-packing, gpu-clustering, random, fgd-exact
//! seeds = "42-51"       # Go's seeds: integers, "A-B" ranges, or a list of either
//! tune = 1.3            # arrived GPU demand / GPU capacity (default 1.3; 0 with timed)
//! # nodes = "nodes.csv" # the node list (default: the bundled one)
//! # timed = true        # tasks arrive and leave at the trace's times
//! # placements = true   # each run's per-task placements too
//! ```

use crate::cli::PackArgs;
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// The keys a `[packing]` table may hold.
const KEYS: [&str; 7] = [
    "traces",
    "policies",
    "seeds",
    "tune",
    "nodes",
    "timed",
    "placements",
];

/// Whether the sweep file is a `[packing]` grid.
pub fn is_packing_file(text: &str) -> bool {
    toml::from_str::<toml::Table>(text).is_ok_and(|t| t.contains_key("packing"))
}

/// Strings of a key that takes one string or a list of strings (numbers
/// too, for seeds).
fn strings(path: &Path, key: &str, v: &toml::Value) -> Result<Vec<String>> {
    let one = |v: &toml::Value| -> Option<String> {
        match v {
            toml::Value::String(s) => Some(s.clone()),
            toml::Value::Integer(i) if key == "seeds" => Some(i.to_string()),
            _ => None,
        }
    };
    let kind = if key == "seeds" {
        "an integer, a string such as \"42-51\", or a list of them"
    } else {
        "a string or a list of strings"
    };
    let bad = || anyhow::anyhow!("{}: [packing] {key}: expected {kind}", path.display());
    let list = match v {
        toml::Value::Array(a) => a.iter().map(|x| one(x).ok_or_else(bad)).collect(),
        other => one(other).map(|s| vec![s]).ok_or_else(bad),
    }?;
    if list.is_empty() {
        bail!("{}: [packing] {key} is empty", path.display());
    }
    // "a, b" in one string, as the command line's comma lists.
    Ok(list
        .iter()
        .flat_map(|s| s.split(',').map(|p| p.trim().to_string()))
        .collect())
}

/// A trace given as a path is read relative to the sweep file's folder.
fn resolve(base: &Path, trace: String) -> String {
    if trace.contains('/') || trace.contains('.') {
        let p = Path::new(&trace);
        if p.is_relative() {
            return base.join(p).display().to_string();
        }
    }
    trace
}

/// The `blox pack` arguments a `[packing]` file stands for.
pub fn args_of(path: &Path, text: &str, out: &Path, threads: Option<usize>) -> Result<PackArgs> {
    let doc: toml::Table =
        toml::from_str(text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    if let Some(other) = doc.keys().find(|k| *k != "packing") {
        bail!(
            "{}: `{other}` beside [packing]: a packing sweep file holds only its [packing] table",
            path.display()
        );
    }
    let Some(toml::Value::Table(t)) = doc.get("packing") else {
        bail!("{}: [packing] must be a table", path.display());
    };
    if let Some(k) = t.keys().find(|k| !KEYS.contains(&k.as_str())) {
        bail!(
            "{}: unknown key [packing] {k}; expected one of {}",
            path.display(),
            KEYS.join(", ")
        );
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let list = |key: &str, default: &str| -> Result<Vec<String>> {
        t.get(key)
            .map_or(Ok(vec![default.to_string()]), |v| strings(path, key, v))
    };
    let flag = |key: &str| -> Result<bool> {
        match t.get(key) {
            None => Ok(false),
            Some(toml::Value::Boolean(b)) => Ok(*b),
            Some(_) => bail!(
                "{}: [packing] {key}: expected true or false",
                path.display()
            ),
        }
    };
    let tune = match t.get("tune") {
        None => None,
        Some(toml::Value::Float(f)) => Some(*f),
        Some(toml::Value::Integer(i)) => Some(*i as f64),
        Some(_) => bail!(
            "{}: [packing] tune: expected a number (a multiple of the GPU capacity)",
            path.display()
        ),
    };
    let nodes = match t.get("nodes") {
        None => None,
        Some(toml::Value::String(s)) => Some(base.join(s)),
        Some(_) => bail!("{}: [packing] nodes: expected a path", path.display()),
    };
    let traces = list("traces", "default")?
        .into_iter()
        .map(|tr| resolve(base, tr))
        .collect();
    Ok(PackArgs {
        trace: traces,
        nodes,
        policy: list("policies", "fgd")?,
        seed: list("seeds", "42")?,
        tune,
        threads,
        out: Some(PathBuf::from(out)),
        placements: flag("placements")?,
        timed: flag("timed")?,
    })
}
