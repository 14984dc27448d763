//! `blox report DIR`: plots and a markdown summary from a sweep's output
//! (`DIR/sweep.csv` and the cells' `jobs.csv` and `rounds.csv`).
//!
//! Per grid: `<grid>-jct-cdf.svg` (CDF of job completion times per policy,
//! all the grid's cells pooled), and either `<grid>-jct-vs-load.svg` and
//! `<grid>-resp-vs-load.svg` (grids with loads) or `<grid>-jct-by-workload.svg`
//! (grids over workloads); GPU utilisation and queue length over time;
//! the synthesizer's policy timeline where the policy changed; where nodes
//! failed, `<grid>-ettr-by-size.svg` and a table of interruptions and ETTR
//! by job size; `summary.md` holds the tables. Every plot is written as SVG and PNG.

use super::plots::{
    downsample, line_chart, line_chart_scaled, timeline_chart, PlotError, PolicyPoint, Series,
};
use super::ReportError;
use crate::sweep::{slug, SweepRow};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn table_err(path: &Path) -> impl Fn(csv::Error) -> ReportError + '_ {
    move |e| ReportError::Table {
        path: path.to_path_buf(),
        source: Box::new(e),
    }
}

fn plot_err(path: &Path) -> impl FnOnce(PlotError) -> ReportError + '_ {
    move |source| ReportError::Table {
        path: path.to_path_buf(),
        source,
    }
}

/// Finished jobs' completion times (hours) of one cell.
fn jcts_h(cell: &Path) -> Result<Vec<f64>, ReportError> {
    let path = cell.join("jobs.csv");
    let mut rdr = csv::Reader::from_path(&path).map_err(table_err(&path))?;
    let i = rdr
        .headers()
        .map_err(table_err(&path))?
        .iter()
        .position(|h| h == "jct_s")
        .ok_or_else(|| ReportError::Invalid {
            path: path.clone(),
            message: "no jct_s column".into(),
        })?;
    let mut out = Vec::new();
    for rec in rdr.records() {
        if let Some(v) = rec
            .map_err(table_err(&path))?
            .get(i)
            .and_then(|s| s.parse::<f64>().ok())
        {
            out.push(v / 3600.0);
        }
    }
    Ok(out)
}

/// One round of a cell's `rounds.csv`.
struct RoundPoint {
    t_h: f64,
    util_pct: f64,
    /// Admitted jobs without GPUs plus jobs waiting for admission.
    queue: f64,
    policy: String,
}

fn rounds_of(cell: &Path) -> Result<Vec<RoundPoint>, ReportError> {
    let path = cell.join("rounds.csv");
    let mut rdr = csv::Reader::from_path(&path).map_err(table_err(&path))?;
    let h = rdr.headers().map_err(table_err(&path))?.clone();
    let col = |name: &str| {
        h.iter()
            .position(|x| x == name)
            .ok_or_else(|| ReportError::Invalid {
                path: path.clone(),
                message: format!("no {name} column"),
            })
    };
    let (t, busy, total, queued, waiting) = (
        col("time_s")?,
        col("busy_gpus")?,
        col("total_gpus")?,
        col("queued_jobs")?,
        col("waiting_jobs")?,
    );
    let policy = h.iter().position(|x| x == "policy");
    let mut out = Vec::new();
    for rec in rdr.records() {
        let rec = rec.map_err(table_err(&path))?;
        let num = |i: usize| {
            rec.get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        out.push(RoundPoint {
            t_h: num(t) / 3600.0,
            util_pct: 100.0 * num(busy) / num(total).max(1.0),
            queue: num(queued) + num(waiting),
            policy: policy
                .and_then(|i| rec.get(i))
                .unwrap_or_default()
                .to_string(),
        });
    }
    Ok(out)
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Writes the plots and `summary.md` for the sweep output in `dir`.
pub fn report_sweep(dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
    let table = dir.join("sweep.csv");
    let rows = crate::sweep::read_rows(&table).map_err(|e| ReportError::Invalid {
        path: table.clone(),
        message: e.to_string(),
    })?;
    if rows.is_empty() {
        return Err(ReportError::Invalid {
            path: table,
            message: "has no rows".into(),
        });
    }
    let mut grids: BTreeMap<String, Vec<SweepRow>> = BTreeMap::new();
    for r in rows {
        grids.entry(r.grid.clone()).or_default().push(r);
    }
    let mut out = Out {
        dir,
        written: Vec::new(),
        md: String::new(),
    };
    for (grid, rows) in &grids {
        let g = Grid::new(grid, rows);
        out.jct_cdf(&g)?;
        let _ = writeln!(out.md, "## {grid}\n");
        if g.loads.is_empty() {
            out.by_workload(&g)?;
        } else {
            out.by_load(&g)?;
        }
        if rows.iter().any(|r| r.interruptions > 0) {
            out.failures(&g)?;
        }
        out.over_time(&g)?;
        out.md.push('\n');
    }
    let path = dir.join("summary.md");
    std::fs::write(&path, &out.md).map_err(ReportError::io(&path))?;
    out.written.push(path);
    Ok(out.written)
}

/// One grid's cells: its policies in first-seen order, its loads sorted.
struct Grid<'a> {
    name: &'a str,
    rows: &'a [SweepRow],
    policies: Vec<String>,
    loads: Vec<f64>,
}

impl<'a> Grid<'a> {
    fn new(name: &'a str, rows: &'a [SweepRow]) -> Self {
        let mut policies: Vec<String> = Vec::new();
        for r in rows {
            if !policies.contains(&r.policy) {
                policies.push(r.policy.clone());
            }
        }
        let mut loads: Vec<f64> = rows.iter().filter_map(|r| r.jobs_per_hour).collect();
        loads.sort_by(f64::total_cmp);
        loads.dedup();
        Grid {
            name,
            rows,
            policies,
            loads,
        }
    }

    /// The cells of policy `p`.
    fn of<'b>(&'b self, p: &'b str) -> impl Iterator<Item = &'a SweepRow> + 'b {
        self.rows.iter().filter(move |r| r.policy == p)
    }

    /// The cells of policy `p` at load `l`.
    fn at<'b>(&'b self, p: &'b str, l: f64) -> impl Iterator<Item = &'a SweepRow> + 'b {
        self.of(p).filter(move |r| r.jobs_per_hour == Some(l))
    }

    /// A file of this grid in `dir`: `<grid>-<file>.svg`.
    fn svg(&self, dir: &Path, file: &str) -> PathBuf {
        dir.join(format!("{}-{file}.svg", slug(self.name)))
    }
}

/// The mean of `f` over `rows`.
fn mean_of(rows: &[&SweepRow], f: fn(&SweepRow) -> f64) -> f64 {
    mean(&rows.iter().map(|r| f(r)).collect::<Vec<_>>())
}

/// What the report writes: the plots so far, and `summary.md`'s text.
struct Out<'d> {
    dir: &'d Path,
    written: Vec<PathBuf>,
    md: String,
}

impl Out<'_> {
    /// A line chart, linear scales unless `log_x`.
    fn chart(
        &mut self,
        path: PathBuf,
        title: &str,
        x: &str,
        y: &str,
        series: &Series,
        log_x: bool,
    ) -> Result<(), ReportError> {
        line_chart(&path, title, x, y, series, log_x).map_err(plot_err(&path))?;
        self.written.push(path);
        Ok(())
    }

    /// The JCT CDF per policy, every cell of the policy pooled.
    fn jct_cdf(&mut self, g: &Grid) -> Result<(), ReportError> {
        let mut cdf: Series = Vec::new();
        for p in &g.policies {
            let mut all = Vec::new();
            for r in g.of(p) {
                all.extend(jcts_h(&self.dir.join(&r.dir))?);
            }
            all.sort_by(f64::total_cmp);
            let n = all.len().max(1) as f64;
            cdf.push((
                p.clone(),
                all.iter()
                    .enumerate()
                    .map(|(i, v)| (*v, (i + 1) as f64 / n))
                    .collect(),
            ));
        }
        let path = g.svg(self.dir, "jct-cdf");
        self.chart(
            path,
            &format!("{}: JCT CDF (all cells pooled)", g.name),
            "job completion time (hours, log scale)",
            "fraction of jobs",
            &cdf,
            true,
        )
    }

    /// A grid with loads: JCT and responsiveness against load, and the
    /// table of JCT by load with the highest load's other figures.
    fn by_load(&mut self, g: &Grid) -> Result<(), ReportError> {
        let grid = g.name;
        for (metric, file, label) in [
            ("jct", "jct-vs-load", "average JCT (hours)"),
            ("resp", "resp-vs-load", "average responsiveness (hours)"),
        ] {
            let series: Series = (g.policies.iter())
                .map(|p| {
                    let pts = (g.loads.iter())
                        .map(|l| {
                            let v: Vec<f64> = g
                                .at(p, *l)
                                .map(|r| match metric {
                                    "jct" => r.avg_jct_s,
                                    _ => r.avg_responsiveness_s,
                                })
                                .map(|s| s / 3600.0)
                                .collect();
                            (*l, mean(&v))
                        })
                        .collect();
                    (p.clone(), pts)
                })
                .collect();
            let path = g.svg(self.dir, file);
            self.chart(
                path,
                &format!("{grid}: {label} vs load"),
                "load (jobs per hour)",
                label,
                &series,
                false,
            )?;
        }
        let md = &mut self.md;
        let _ = writeln!(
            md,
            "Average JCT (hours) by load (jobs/hour); p99 JCT, responsiveness and makespan at the highest load.\n"
        );
        let mut head = "| policy |".to_string();
        for l in &g.loads {
            let _ = write!(head, " {l} |");
        }
        let hi = *g.loads.last().expect("non-empty");
        let _ = writeln!(
            md,
            "{head} p99 JCT @{hi} | avg resp. @{hi} | makespan @{hi} | finished |"
        );
        let _ = writeln!(md, "|---|{}---|---|---|---|", "---|".repeat(g.loads.len()));
        for p in &g.policies {
            let mut line = format!("| {p} |");
            for l in &g.loads {
                let v: Vec<f64> = g.at(p, *l).map(|r| r.avg_jct_s / 3600.0).collect();
                let _ = write!(line, " {:.3} |", mean(&v));
            }
            let at: Vec<&SweepRow> = g.at(p, hi).collect();
            let _ = writeln!(
                line,
                " {:.2} | {:.3} | {:.1} h | {:.0}/{:.0} |",
                mean_of(&at, |r| r.p99_jct_s / 3600.0),
                mean_of(&at, |r| r.avg_responsiveness_s / 3600.0),
                mean_of(&at, |r| r.makespan_s / 3600.0),
                mean_of(&at, |r| r.finished as f64),
                mean_of(&at, |r| r.jobs as f64)
            );
            md.push_str(&line);
        }
        Ok(())
    }

    /// A grid over workloads: average JCT per workload, and the table of
    /// means over them.
    fn by_workload(&mut self, g: &Grid) -> Result<(), ReportError> {
        let mut workloads: Vec<String> = Vec::new();
        for r in g.rows {
            if !workloads.contains(&r.workload) {
                workloads.push(r.workload.clone());
            }
        }
        let series: Series = (g.policies.iter())
            .map(|p| {
                let pts = (workloads.iter().enumerate())
                    .filter_map(|(i, w)| {
                        g.of(p)
                            .find(|r| &r.workload == w)
                            .map(|r| ((i + 1) as f64, r.avg_jct_s / 3600.0))
                    })
                    .collect();
                (p.clone(), pts)
            })
            .collect();
        let path = g.svg(self.dir, "jct-by-workload");
        self.chart(
            path,
            &format!("{}: average JCT per workload", g.name),
            "workload (index in the sweep)",
            "average JCT (hours)",
            &series,
            false,
        )?;
        let md = &mut self.md;
        if workloads.len() > 1 {
            let _ = writeln!(md, "Means over the {} workloads.\n", workloads.len());
        }
        let _ = writeln!(md, "| policy | avg JCT (h) | p99 JCT (h) | avg responsiveness (h) | makespan (h) | GPU util. | preemptions | finished |");
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
        for p in &g.policies {
            let at: Vec<&SweepRow> = g.of(p).collect();
            let _ = writeln!(
                md,
                "| {p} | {:.3} | {:.2} | {:.3} | {:.2} | {:.1} % | {:.0} | {:.0}/{:.0} |",
                mean_of(&at, |r| r.avg_jct_s / 3600.0),
                mean_of(&at, |r| r.p99_jct_s / 3600.0),
                mean_of(&at, |r| r.avg_responsiveness_s / 3600.0),
                mean_of(&at, |r| r.makespan_s / 3600.0),
                mean_of(&at, |r| 100.0 * r.gpu_utilisation),
                mean_of(&at, |r| r.preemptions as f64),
                mean_of(&at, |r| r.finished as f64),
                mean_of(&at, |r| r.jobs as f64)
            );
        }
        Ok(())
    }

    /// Where nodes failed: interruptions and ETTR, overall and by job
    /// size, as a table and a plot.
    fn failures(&mut self, g: &Grid) -> Result<(), ReportError> {
        let sizes: Vec<&str> = crate::report::summary::SIZE_BUCKETS
            .iter()
            .map(|(l, _, _)| *l)
            .filter(|l| (g.rows.iter()).any(|r| r.ettr_sizes().iter().any(|(x, _)| x == l)))
            .collect();
        let ettr_at = |at: &[&SweepRow], size: &str| -> Option<f64> {
            let v: Vec<f64> = at
                .iter()
                .filter_map(|r| r.ettr_sizes().into_iter().find(|(x, _)| x == size))
                .map(|(_, e)| e)
                .collect();
            (!v.is_empty()).then(|| mean(&v))
        };
        let md = &mut self.md;
        let _ = writeln!(
            md,
            "\nETTR (productive time over time since submission, GPU-time weighted; means over cells) by job size:\n"
        );
        let _ = writeln!(
            md,
            "| policy | interruptions | ETTR | {} |",
            sizes.join(" | ")
        );
        let _ = writeln!(md, "|---|---|---|{}", "---|".repeat(sizes.len()));
        let mut series: Series = Vec::new();
        for p in &g.policies {
            let at: Vec<&SweepRow> = g.of(p).collect();
            let ints = mean_of(&at, |r| r.interruptions as f64);
            let all: Vec<f64> = at.iter().filter_map(|r| r.ettr).collect();
            let fmt = |e: Option<f64>| e.map_or("-".to_string(), |e| format!("{e:.4}"));
            let by: Vec<String> = sizes.iter().map(|sz| fmt(ettr_at(&at, sz))).collect();
            let _ = writeln!(
                md,
                "| {p} | {ints:.0} | {} | {} |",
                fmt((!all.is_empty()).then(|| mean(&all))),
                by.join(" | ")
            );
            let pts = (sizes.iter().enumerate())
                .filter_map(|(i, sz)| ettr_at(&at, sz).map(|e| ((i + 1) as f64, e)))
                .collect();
            series.push((p.clone(), pts));
        }
        let path = g.svg(self.dir, "ettr-by-size");
        self.chart(
            path,
            &format!("{}: ETTR by job size ({})", g.name, sizes.join(", ")),
            "job size (bucket, smallest first)",
            "ETTR",
            &series,
            false,
        )
    }

    /// GPU utilisation and queue length over time, of the highest load (or
    /// the first workload) of each policy; the synthesizer's policy
    /// timeline where the policy changed.
    fn over_time(&mut self, g: &Grid) -> Result<(), ReportError> {
        let pick = |p: &str| -> Option<&SweepRow> {
            let mut mine = g.of(p);
            match g.loads.last() {
                Some(hi) => mine.find(|r| r.jobs_per_hour == Some(*hi)),
                None => mine.next(),
            }
        };
        let mut util: Series = Vec::new();
        let mut queue: Series = Vec::new();
        let mut at = String::new();
        for p in &g.policies {
            let Some(r) = pick(p) else { continue };
            at = match r.jobs_per_hour {
                Some(l) => format!("{l} jobs/hour"),
                None => r.workload.clone(),
            };
            let pts = rounds_of(&self.dir.join(&r.dir))?;
            let u: Vec<(f64, f64)> = pts.iter().map(|x| (x.t_h, x.util_pct)).collect();
            let q: Vec<(f64, f64)> = pts.iter().map(|x| (x.t_h, x.queue)).collect();
            util.push((p.clone(), downsample(&u, 600)));
            queue.push((p.clone(), downsample(&q, 600)));
            let distinct: std::collections::BTreeSet<&str> =
                pts.iter().map(|x| x.policy.as_str()).collect();
            if distinct.len() > 1 {
                self.timelines(g, p)?;
            }
        }
        let grid = g.name;
        for (series, file, label) in [
            (&util, "util-over-time", "GPU utilisation (%)"),
            (&queue, "queue-over-time", "jobs waiting for GPUs"),
        ] {
            let path = g.svg(self.dir, file);
            line_chart_scaled(
                &path,
                &format!("{grid}: {label} over time ({at})"),
                "time (hours)",
                label,
                series,
                false,
                false,
            )
            .map_err(plot_err(&path))?;
            self.written.push(path);
        }
        Ok(())
    }

    /// The synthesizer's policy timeline of each cell of policy `p`.
    fn timelines(&mut self, g: &Grid, p: &str) -> Result<(), ReportError> {
        let grid = g.name;
        for c in g.of(p) {
            let pts = rounds_of(&self.dir.join(&c.dir))?;
            let tag = match c.jobs_per_hour {
                Some(l) => format!("{l}jph"),
                None if c.workload.is_empty() => "default".to_string(),
                None => c.workload.clone(),
            };
            let file = format!("{}-{}-{}-timeline.svg", slug(grid), slug(p), slug(&tag));
            let path = self.dir.join(&file);
            let tl: Vec<PolicyPoint> = pts
                .iter()
                .map(|x| PolicyPoint {
                    t_h: x.t_h,
                    policy: x.policy.clone(),
                })
                .collect();
            timeline_chart(
                &path,
                &format!("{grid}: {p} ({tag}), policies chosen over time"),
                &tl,
            )
            .map_err(plot_err(&path))?;
            self.written.push(path);
            let _ = writeln!(
                self.md,
                "\n{p} ({tag}) switched policies {} times: ![timeline]({file})",
                pts.windows(2)
                    .filter(|w| w[0].policy != w[1].policy)
                    .count()
            );
        }
        Ok(())
    }
}
