//! `blox report` of a `blox pack --out` folder: each pod list's allocation
//! curves (the mean over seeds per policy, as the FGD paper plots them) as
//! SVG and PNG, and `summary.md` with the means beside the published ones.

use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Whether `dir` holds `blox pack` output (its `pack.csv` and `curves.csv`).
pub fn is_pack_dir(dir: &Path) -> bool {
    dir.join("pack.csv").is_file() && dir.join("curves.csv").is_file()
}

/// A policy's place in the plots: the reference's order, then the variants.
fn rank(policy: &str) -> usize {
    super::known_policies()
        .iter()
        .position(|n| *n == policy)
        .unwrap_or(usize::MAX)
}

type Curves = BTreeMap<String, BTreeMap<(usize, String), BTreeMap<String, BTreeMap<u32, f64>>>>;

/// trace → (rank, policy) → seed → arrived percent → allocated percent.
fn read_curves(path: &Path) -> Result<Curves> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    let mut curves = Curves::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let v: Vec<&str> = line.split(',').collect();
        let bad = || {
            anyhow::anyhow!(
                "{} line {}: expected trace,policy,seed,arrived_percent,allocated_percent",
                path.display(),
                i + 1
            )
        };
        if v.len() != 5 {
            return Err(bad());
        }
        let r: u32 = v[3].parse().map_err(|_| bad())?;
        let a: f64 = v[4].parse().map_err(|_| bad())?;
        curves
            .entry(v[0].to_string())
            .or_default()
            .entry((rank(v[1]), v[1].to_string()))
            .or_default()
            .entry(v[2].to_string())
            .or_default()
            .insert(r, a);
    }
    Ok(curves)
}

/// Writes the plots and `summary.md`; returns the files written.
pub fn report_dir(dir: &Path) -> Result<Vec<PathBuf>> {
    let curves = read_curves(&dir.join("curves.csv"))?;
    let mut written = Vec::new();
    for (trace, policies) in &curves {
        let mut series = Vec::new();
        for ((_, policy), seeds) in policies {
            let top = seeds
                .values()
                .flat_map(|c| c.keys())
                .max()
                .copied()
                .unwrap_or(0);
            let mut pts = Vec::new();
            for r in 0..=top {
                let vals: Vec<f64> = seeds.values().filter_map(|c| c.get(&r).copied()).collect();
                if vals.len() == seeds.len() {
                    pts.push((r as f64, vals.iter().sum::<f64>() / vals.len() as f64));
                }
            }
            series.push((policy.clone(), pts));
        }
        let path = dir.join(format!("allocation-{trace}.svg"));
        blox_sim::report::plots::line_chart_scaled(
            &path,
            &format!("GPU allocation, openb {trace}"),
            "arrived GPU demand (% of capacity)",
            "allocated GPUs (% of capacity)",
            &series,
            false,
            false,
        )
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        written.push(path.clone());
        written.push(path.with_extension("png"));
    }
    let means = dir.join("means.csv");
    let mut md = String::from("# blox pack\n\nMean allocation over seeds at the highest arrival, ours and the FGD authors' published figure (`-` where none is published).\n\n");
    if let Ok(text) = std::fs::read_to_string(&means) {
        md.push_str("| pod list | policy | seeds | ours | published | difference |\n|---|---|---|---|---|---|\n");
        for line in text.lines().skip(1) {
            let v: Vec<&str> = line.split(',').collect();
            if v.len() == 6 {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} |",
                    v[0], v[1], v[2], v[3], v[4], v[5]
                );
            }
        }
    }
    md.push_str(
        "\nPlots: `allocation-<pod list>.svg` / `.png`, one curve per policy (mean over seeds).\n",
    );
    let path = dir.join("summary.md");
    std::fs::write(&path, md).with_context(|| path.display().to_string())?;
    written.push(path);
    Ok(written)
}
