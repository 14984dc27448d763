//! Sweeps spread over machines: `blox sweep FILE --shard I/N` runs the cells
//! whose position in the sweep file's order is `I` modulo `N` (`0 ≤ I < N`),
//! so N shards cover every cell once, on any machines, in any order, and a
//! shard run again runs the same cells. Each shard's output folder holds its
//! cells' folders, its `sweep.csv` and `shard.toml` (which shard of how many
//! cells). `blox sweep merge DIRS… --out DIR` puts the shards back together:
//! the same `sweep.csv` (rows in the file's order) and cell folders an
//! unsharded run writes, for `blox report`.

use super::{read_rows, write_rows, Cell, SweepError, SweepRow};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Which part of a sweep to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// 0-based.
    pub index: usize,
    pub of: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;

    /// `I/N` with `0 ≤ I < N` (a Kubernetes Indexed Job's
    /// `JOB_COMPLETION_INDEX`; `SLURM_ARRAY_TASK_ID` of `--array=0-(N-1)`).
    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || format!("`{s}`: a shard is I/N with 0 <= I < N, e.g. 0/4");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, of): (usize, usize) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if of == 0 || index >= of {
            return Err(bad());
        }
        Ok(Shard { index, of })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.of)
    }
}

/// What a shard's `shard.toml` records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct ShardInfo {
    shard: Shard,
    /// Cells of the whole sweep.
    cells: usize,
}

impl Shard {
    /// The cells of this shard, in order.
    pub(super) fn select(&self, cells: Vec<Cell>) -> Vec<Cell> {
        cells
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % self.of == self.index)
            .map(|(_, c)| c)
            .collect()
    }

    /// Records which shard `out` holds, of a sweep of `cells` cells.
    pub(super) fn record(&self, out: &Path, cells: usize) -> Result<(), SweepError> {
        let text = toml::to_string(&ShardInfo {
            shard: *self,
            cells,
        })
        .expect("shard info serialises");
        let path = out.join("shard.toml");
        std::fs::write(&path, text).map_err(SweepError::io(&path))
    }
}

/// What a merge did.
#[derive(Clone, Debug)]
pub struct Merged {
    pub rows: Vec<SweepRow>,
    /// `OUT/sweep.csv`.
    pub table: PathBuf,
}

/// Merges the outputs of `--shard I/N` runs (one folder per shard, every
/// shard of one sweep, each once) into `out`: `sweep.csv` with the rows in
/// the sweep file's order, and every cell's folder copied.
pub fn merge(dirs: &[PathBuf], out: &Path) -> Result<Merged, SweepError> {
    let invalid = |path: &Path, message: String| SweepError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let mut parts: Vec<(ShardInfo, Vec<SweepRow>, &PathBuf)> = Vec::new();
    for d in dirs {
        let info_path = d.join("shard.toml");
        let text = std::fs::read_to_string(&info_path).map_err(|e| {
            invalid(
                &info_path,
                format!(
                    "{e} (is {} the output of `blox sweep --shard`?)",
                    d.display()
                ),
            )
        })?;
        let info: ShardInfo =
            toml::from_str(&text).map_err(|e| invalid(&info_path, e.to_string()))?;
        let rows = read_rows(&d.join("sweep.csv"))?;
        let want = (info.cells + info.shard.of - 1 - info.shard.index) / info.shard.of;
        if rows.len() != want {
            return Err(invalid(
                &d.join("sweep.csv"),
                format!(
                    "{} rows, but shard {} of a {}-cell sweep has {want}",
                    rows.len(),
                    info.shard,
                    info.cells
                ),
            ));
        }
        parts.push((info, rows, d));
    }
    let Some((first, _, _)) = parts.first() else {
        return Err(invalid(out, "no shard folders to merge".into()));
    };
    let (of, cells) = (first.shard.of, first.cells);
    let mut by_index: Vec<Option<usize>> = vec![None; of];
    for (k, (info, _, d)) in parts.iter().enumerate() {
        if info.shard.of != of || info.cells != cells {
            return Err(invalid(
                d,
                format!(
                    "shard {} of a {}-cell sweep does not belong with shard {} of a {cells}-cell sweep",
                    info.shard, info.cells, first.shard
                ),
            ));
        }
        if let Some(j) = by_index[info.shard.index].replace(k) {
            return Err(invalid(
                d,
                format!(
                    "shard {} appears twice (also {})",
                    info.shard,
                    parts[j].2.display()
                ),
            ));
        }
    }
    if let Some(missing) = by_index.iter().position(Option::is_none) {
        return Err(invalid(
            out,
            format!("shard {missing}/{of} is missing: merge needs all {of} shards"),
        ));
    }
    // Cell i of the sweep is row i / of of shard i % of.
    let mut rows = Vec::with_capacity(cells);
    for i in 0..cells {
        let (_, shard_rows, _) = &parts[by_index[i % of].expect("checked above")];
        rows.push(shard_rows[i / of].clone());
    }
    std::fs::create_dir_all(out).map_err(SweepError::io(out))?;
    for (_, shard_rows, d) in &parts {
        for r in shard_rows {
            copy_dir(&d.join(&r.dir), &out.join(&r.dir))?;
        }
    }
    let table = out.join("sweep.csv");
    write_rows(&table, &rows)?;
    Ok(Merged { rows, table })
}

/// Copies a cell's folder (files and sub-folders).
fn copy_dir(from: &Path, to: &Path) -> Result<(), SweepError> {
    std::fs::create_dir_all(to).map_err(SweepError::io(to))?;
    for e in std::fs::read_dir(from).map_err(SweepError::io(from))? {
        let e = e.map_err(SweepError::io(from))?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().map_err(SweepError::io(&src))?.is_dir() {
            copy_dir(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst).map_err(SweepError::io(&src))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_refuse_nonsense() {
        assert_eq!("1/4".parse::<Shard>(), Ok(Shard { index: 1, of: 4 }));
        for bad in ["4/4", "1/0", "x/2", "3", "-1/2"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }
}
