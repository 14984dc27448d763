//! `blox report DIR`: plots and a markdown summary from a grid sweep's output
//! (`DIR/sweep.csv` and the cells' `jobs.csv`).
//!
//! Per grid: `<grid>-jct-cdf.svg` (CDF of job completion times per policy,
//! all the grid's cells pooled), and either `<grid>-jct-vs-load.svg` and
//! `<grid>-resp-vs-load.svg` (grids with loads) or `<grid>-jct-by-workload.svg`
//! (grids over workloads); `summary.md` holds the tables.

use anyhow::{bail, Context, Result};
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
struct Row {
    grid: String,
    policy: String,
    workload: String,
    load: Option<f64>,
    seed: String,
    finished: f64,
    jobs: f64,
    avg_jct_s: f64,
    p99_jct_s: f64,
    avg_resp_s: f64,
    makespan_s: f64,
    util: f64,
    preemptions: f64,
}

impl Row {
    fn dir(&self, root: &Path) -> PathBuf {
        let mut slug = String::new();
        if !self.workload.is_empty() {
            slug.push_str(&self.workload);
        }
        if let Some(l) = self.load {
            if !slug.is_empty() {
                slug.push('-');
            }
            slug.push_str(&format!("{l}jph"));
        }
        if slug.is_empty() {
            slug.push_str("default");
        }
        if !self.seed.is_empty() {
            slug.push_str(&format!("-s{}", self.seed));
        }
        root.join(&self.grid).join(&self.policy).join(slug)
    }
}

fn read_rows(dir: &Path) -> Result<Vec<Row>> {
    let path = dir.join("sweep.csv");
    let mut rdr =
        csv::Reader::from_path(&path).with_context(|| format!("reading {}", path.display()))?;
    let headers = rdr.headers()?.clone();
    let col = |name: &str| -> Result<usize> {
        headers.iter().position(|h| h == name).with_context(|| {
            format!(
                "{}: no `{name}` column (is it a [[grid]] sweep's output?)",
                path.display()
            )
        })
    };
    let idx: Vec<usize> = [
        "grid",
        "policy",
        "workload",
        "jobs_per_hour",
        "seed",
        "finished",
        "jobs",
        "avg_jct_s",
        "p99_jct_s",
        "avg_responsiveness_s",
        "makespan_s",
        "gpu_utilisation",
        "preemptions",
    ]
    .iter()
    .map(|c| col(c))
    .collect::<Result<_>>()?;
    let mut rows = Vec::new();
    for (line, rec) in rdr.records().enumerate() {
        let rec = rec?;
        let f = |i: usize| rec.get(idx[i]).unwrap_or("").to_string();
        let num = |i: usize| -> Result<f64> {
            f(i).parse::<f64>().with_context(|| {
                format!(
                    "{} line {}: `{}` is not a number",
                    path.display(),
                    line + 2,
                    f(i)
                )
            })
        };
        rows.push(Row {
            grid: f(0),
            policy: f(1),
            workload: f(2),
            load: f(3).parse().ok(),
            seed: f(4),
            finished: num(5)?,
            jobs: num(6)?,
            avg_jct_s: num(7)?,
            p99_jct_s: num(8)?,
            avg_resp_s: num(9)?,
            makespan_s: num(10)?,
            util: num(11)?,
            preemptions: num(12)?,
        });
    }
    if rows.is_empty() {
        bail!("{} has no rows", path.display());
    }
    Ok(rows)
}

/// Finished jobs' completion times (hours) of one cell.
fn jcts_h(cell: &Path) -> Result<Vec<f64>> {
    let path = cell.join("jobs.csv");
    let mut rdr =
        csv::Reader::from_path(&path).with_context(|| format!("reading {}", path.display()))?;
    let i = rdr
        .headers()?
        .iter()
        .position(|h| h == "jct_s")
        .with_context(|| format!("{}: no jct_s column", path.display()))?;
    let mut out = Vec::new();
    for rec in rdr.records() {
        if let Some(v) = rec?.get(i).and_then(|s| s.parse::<f64>().ok()) {
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

fn rounds_of(cell: &Path) -> Result<Vec<RoundPoint>> {
    let path = cell.join("rounds.csv");
    let mut rdr =
        csv::Reader::from_path(&path).with_context(|| format!("reading {}", path.display()))?;
    let h = rdr.headers()?.clone();
    let col = |name: &str| {
        h.iter()
            .position(|x| x == name)
            .with_context(|| format!("{}: no {name} column", path.display()))
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
        let rec = rec?;
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

/// At most `n` points: means over equal runs of rounds.
fn downsample(pts: &[(f64, f64)], n: usize) -> Vec<(f64, f64)> {
    if pts.len() <= n {
        return pts.to_vec();
    }
    pts.chunks(pts.len().div_ceil(n))
        .map(|c| {
            let k = c.len() as f64;
            (
                c.iter().map(|p| p.0).sum::<f64>() / k,
                c.iter().map(|p| p.1).sum::<f64>() / k,
            )
        })
        .collect()
}

/// The active policy combination over time, as SVG and PNG.
fn timeline_chart(path: &Path, title: &str, pts: &[RoundPoint]) -> Result<()> {
    register_font();
    let mut labels: Vec<String> = Vec::new();
    for p in pts {
        if !labels.contains(&p.policy) {
            labels.push(p.policy.clone());
        }
    }
    labels.sort();
    let idx = |s: &str| labels.iter().position(|l| l == s).unwrap_or(0) as f64;
    // A step line: one point where each stretch starts and ends.
    let mut line: Vec<(f64, f64)> = Vec::new();
    for (i, p) in pts.iter().enumerate() {
        let y = idx(&p.policy);
        if i > 0 && pts[i - 1].policy != p.policy {
            line.push((p.t_h, idx(&pts[i - 1].policy)));
        }
        if i == 0 || pts[i - 1].policy != p.policy || i + 1 == pts.len() {
            line.push((p.t_h, y));
        }
    }
    let t1 = pts.last().map_or(1.0, |p| p.t_h).max(1e-3);
    fn on<DB: DrawingBackend>(
        root: DrawingArea<DB, plotters::coord::Shift>,
        title: &str,
        labels: &[String],
        line: &[(f64, f64)],
        t1: f64,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE)?;
        let n = labels.len().max(1) as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(18)
            .x_label_area_size(50)
            .y_label_area_size(330)
            .build_cartesian_2d(0.0..t1 * 1.02, -0.5..(n - 0.5))?;
        let labels_owned: Vec<String> = labels.to_vec();
        chart
            .configure_mesh()
            .x_desc("time (hours)")
            .y_desc("active admission/scheduling/placement")
            .y_labels(labels.len().max(1))
            .y_label_formatter(&move |y: &f64| {
                let i = y.round();
                if (y - i).abs() < 1e-6 && i >= 0.0 {
                    labels_owned.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .axis_desc_style(("sans-serif", 16))
            .label_style(("sans-serif", 14))
            .draw()?;
        chart.draw_series(LineSeries::new(
            line.iter().copied(),
            Palette99::pick(0).to_rgba().stroke_width(3),
        ))?;
        root.present()?;
        Ok(())
    }
    on(
        SVGBackend::new(path, (1100, 450)).into_drawing_area(),
        title,
        &labels,
        &line,
        t1,
    )?;
    let png = path.with_extension("png");
    on(
        BitMapBackend::new(&png, (1650, 675)).into_drawing_area(),
        title,
        &labels,
        &line,
        t1,
    )
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

type Series = Vec<(String, Vec<(f64, f64)>)>;

fn draw<
    'a,
    DB: DrawingBackend + 'a,
    X: plotters::coord::ranged1d::Ranged<ValueType = f64>,
    Y: plotters::coord::ranged1d::Ranged<ValueType = f64>,
>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    series: &Series,
    legend: SeriesLabelPosition,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    for (i, (name, s)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(s.iter().copied(), color.stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(legend)
        .label_font(("sans-serif", 14))
        .draw()?;
    Ok(())
}

/// The bundled font (DejaVu Sans, `assets/fonts/`), so PNG text renders the
/// same on any machine.
fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            include_bytes!("../assets/fonts/DejaVuSans.ttf"),
        );
    });
}

/// A line chart as SVG and PNG; `log_x` for CDFs of heavy-tailed times.
fn line_chart(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &Series,
    log_x: bool,
) -> Result<()> {
    line_chart_scaled(path, title, x_desc, y_desc, series, log_x, true)
}

/// `auto_log_y`: a log y axis when the values span more than 5×.
fn line_chart_scaled(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &Series,
    log_x: bool,
    auto_log_y: bool,
) -> Result<()> {
    register_font();
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    line_chart_on(root, title, x_desc, y_desc, series, log_x, auto_log_y)?;
    let png = path.with_extension("png");
    let root = BitMapBackend::new(&png, (1440, 900)).into_drawing_area();
    line_chart_on(root, title, x_desc, y_desc, series, log_x, auto_log_y)
}

fn line_chart_on<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &Series,
    log_x: bool,
    auto_log_y: bool,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let pts = series.iter().flat_map(|s| s.1.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    let mut y0 = f64::INFINITY;
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
        if y > 0.0 {
            y0 = y0.min(y);
        }
    }
    // CDFs end at the top right; other charts keep their legend there.
    let legend_at = || {
        if log_x {
            SeriesLabelPosition::LowerRight
        } else {
            SeriesLabelPosition::UpperRight
        }
    };
    // Values spanning a wide range read better on a log scale.
    let log_y = auto_log_y && !log_x && y0.is_finite() && y1 / y0 > 5.0;
    if !x0.is_finite() {
        bail!("{title}: nothing to plot");
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 > 0.0 { y1 * 1.08 } else { 1.0 };
    root.fill(&WHITE)?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 22))
        .margin(18)
        .x_label_area_size(50)
        .y_label_area_size(70);
    if log_x {
        let lo = x0.max(1e-3);
        let mut chart = builder.build_cartesian_2d((lo..x1 * 1.05).log_scale(), 0.0..y1)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .axis_desc_style(("sans-serif", 16))
            .label_style(("sans-serif", 13))
            .draw()?;
        draw(&mut chart, series, legend_at())?;
    } else if log_y {
        let pad = (x1 - x0) * 0.03;
        let mut chart =
            builder.build_cartesian_2d((x0 - pad)..(x1 + pad), (y0 * 0.8..y1 * 1.3).log_scale())?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(format!("{y_desc}, log scale"))
            .axis_desc_style(("sans-serif", 16))
            .label_style(("sans-serif", 13))
            .draw()?;
        draw(&mut chart, series, legend_at())?;
    } else {
        let pad = (x1 - x0) * 0.03;
        let mut chart = builder.build_cartesian_2d((x0 - pad)..(x1 + pad), 0.0..y1)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .axis_desc_style(("sans-serif", 16))
            .label_style(("sans-serif", 13))
            .draw()?;
        draw(&mut chart, series, legend_at())?;
    }
    root.present()?;
    Ok(())
}

/// Writes the plots and `summary.md` for the sweep output in `dir`.
pub fn run(dir: &Path) -> Result<Vec<PathBuf>> {
    let rows = read_rows(dir)?;
    let mut grids: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    for r in rows {
        grids.entry(r.grid.clone()).or_default().push(r);
    }
    let mut written = Vec::new();
    let mut md = String::new();
    for (grid, rows) in &grids {
        // Policies in first-seen order.
        let mut policies: Vec<String> = Vec::new();
        for r in rows {
            if !policies.contains(&r.policy) {
                policies.push(r.policy.clone());
            }
        }
        // JCT CDF, every cell of the policy pooled.
        let mut cdf: Series = Vec::new();
        for p in &policies {
            let mut all = Vec::new();
            for r in rows.iter().filter(|r| &r.policy == p) {
                all.extend(jcts_h(&r.dir(dir))?);
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
        let path = dir.join(format!("{grid}-jct-cdf.svg"));
        line_chart(
            &path,
            &format!("{grid}: JCT CDF (all cells pooled)"),
            "job completion time (hours, log scale)",
            "fraction of jobs",
            &cdf,
            true,
        )?;
        written.push(path);
        let loads: Vec<f64> = {
            let mut l: Vec<f64> = rows.iter().filter_map(|r| r.load).collect();
            l.sort_by(f64::total_cmp);
            l.dedup();
            l
        };
        let _ = writeln!(md, "## {grid}\n");
        if !loads.is_empty() {
            for (metric, file, label) in [
                ("jct", "jct-vs-load", "average JCT (hours)"),
                ("resp", "resp-vs-load", "average responsiveness (hours)"),
            ] {
                let series: Series = policies
                    .iter()
                    .map(|p| {
                        let pts = loads
                            .iter()
                            .map(|l| {
                                let v: Vec<f64> = rows
                                    .iter()
                                    .filter(|r| &r.policy == p && r.load == Some(*l))
                                    .map(|r| if metric == "jct" { r.avg_jct_s } else { r.avg_resp_s } / 3600.0)
                                    .collect();
                                (*l, mean(&v))
                            })
                            .collect();
                        (p.clone(), pts)
                    })
                    .collect();
                let path = dir.join(format!("{grid}-{file}.svg"));
                line_chart(
                    &path,
                    &format!("{grid}: {label} vs load"),
                    "load (jobs per hour)",
                    label,
                    &series,
                    false,
                )?;
                written.push(path);
            }
            let _ = writeln!(
                md,
                "Average JCT (hours) by load (jobs/hour); p99 JCT, responsiveness and makespan at the highest load.\n"
            );
            let mut head = "| policy |".to_string();
            for l in &loads {
                let _ = write!(head, " {l} |");
            }
            let hi = *loads.last().expect("non-empty");
            let _ = writeln!(
                md,
                "{head} p99 JCT @{hi} | avg resp. @{hi} | makespan @{hi} | finished |"
            );
            let _ = writeln!(md, "|---|{}---|---|---|---|", "---|".repeat(loads.len()));
            for p in &policies {
                let mut line = format!("| {p} |");
                for l in &loads {
                    let v: Vec<f64> = rows
                        .iter()
                        .filter(|r| &r.policy == p && r.load == Some(*l))
                        .map(|r| r.avg_jct_s / 3600.0)
                        .collect();
                    let _ = write!(line, " {:.3} |", mean(&v));
                }
                let at: Vec<&Row> = rows
                    .iter()
                    .filter(|r| &r.policy == p && r.load == Some(hi))
                    .collect();
                let m = |f: fn(&Row) -> f64| mean(&at.iter().map(|r| f(r)).collect::<Vec<_>>());
                let _ = writeln!(
                    line,
                    " {:.2} | {:.3} | {:.1} h | {:.0}/{:.0} |",
                    m(|r| r.p99_jct_s / 3600.0),
                    m(|r| r.avg_resp_s / 3600.0),
                    m(|r| r.makespan_s / 3600.0),
                    m(|r| r.finished),
                    m(|r| r.jobs)
                );
                md.push_str(&line);
            }
        } else {
            let workloads: Vec<String> = {
                let mut w: Vec<String> = Vec::new();
                for r in rows {
                    if !w.contains(&r.workload) {
                        w.push(r.workload.clone());
                    }
                }
                w
            };
            let series: Series = policies
                .iter()
                .map(|p| {
                    let pts = workloads
                        .iter()
                        .enumerate()
                        .filter_map(|(i, w)| {
                            rows.iter()
                                .find(|r| &r.policy == p && &r.workload == w)
                                .map(|r| ((i + 1) as f64, r.avg_jct_s / 3600.0))
                        })
                        .collect();
                    (p.clone(), pts)
                })
                .collect();
            let path = dir.join(format!("{grid}-jct-by-workload.svg"));
            line_chart(
                &path,
                &format!("{grid}: average JCT per workload"),
                "workload (index in the sweep)",
                "average JCT (hours)",
                &series,
                false,
            )?;
            written.push(path);
            if workloads.len() > 1 {
                let _ = writeln!(md, "Means over the {} workloads.\n", workloads.len());
            }
            let _ = writeln!(md, "| policy | avg JCT (h) | p99 JCT (h) | avg responsiveness (h) | makespan (h) | GPU util. | preemptions | finished |");
            let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
            for p in &policies {
                let at: Vec<&Row> = rows.iter().filter(|r| &r.policy == p).collect();
                let m = |f: fn(&Row) -> f64| mean(&at.iter().map(|r| f(r)).collect::<Vec<_>>());
                let _ = writeln!(
                    md,
                    "| {p} | {:.3} | {:.2} | {:.3} | {:.2} | {:.1} % | {:.0} | {:.0}/{:.0} |",
                    m(|r| r.avg_jct_s / 3600.0),
                    m(|r| r.p99_jct_s / 3600.0),
                    m(|r| r.avg_resp_s / 3600.0),
                    m(|r| r.makespan_s / 3600.0),
                    m(|r| 100.0 * r.util),
                    m(|r| r.preemptions),
                    m(|r| r.finished),
                    m(|r| r.jobs)
                );
            }
        }
        // GPU utilisation and queue length over time: the highest load (or the
        // first workload) of each policy.
        let pick = |p: &String| -> Option<&Row> {
            let mine = rows.iter().filter(|r| &r.policy == p);
            match loads.last() {
                Some(hi) => mine.filter(|r| r.load == Some(*hi)).next(),
                None => mine.into_iter().next(),
            }
        };
        let mut util: Series = Vec::new();
        let mut queue: Series = Vec::new();
        let mut at = String::new();
        for p in &policies {
            let Some(r) = pick(p) else { continue };
            at = match r.load {
                Some(l) => format!("{l} jobs/hour"),
                None => r.workload.clone(),
            };
            let pts = rounds_of(&r.dir(dir))?;
            let u: Vec<(f64, f64)> = pts.iter().map(|x| (x.t_h, x.util_pct)).collect();
            let q: Vec<(f64, f64)> = pts.iter().map(|x| (x.t_h, x.queue)).collect();
            util.push((p.clone(), downsample(&u, 600)));
            queue.push((p.clone(), downsample(&q, 600)));
            // The synthesizer's policy timeline, where the policy changed.
            let distinct: std::collections::BTreeSet<&str> =
                pts.iter().map(|x| x.policy.as_str()).collect();
            if distinct.len() > 1 {
                for c in rows.iter().filter(|c| &c.policy == p) {
                    let pts = rounds_of(&c.dir(dir))?;
                    let tag = match c.load {
                        Some(l) => format!("{l}jph"),
                        None if c.workload.is_empty() => "default".to_string(),
                        None => c.workload.clone(),
                    };
                    let path = dir.join(format!("{grid}-{p}-{tag}-timeline.svg"));
                    timeline_chart(
                        &path,
                        &format!("{grid}: {p} ({tag}), policies chosen over time"),
                        &pts,
                    )?;
                    written.push(path);
                    let _ = writeln!(
                        md,
                        "\n{p} ({tag}) switched policies {} times: ![timeline]({grid}-{p}-{tag}-timeline.svg)",
                        pts.windows(2).filter(|w| w[0].policy != w[1].policy).count()
                    );
                }
            }
        }
        for (series, file, label) in [
            (&util, "util-over-time", "GPU utilisation (%)"),
            (&queue, "queue-over-time", "jobs waiting for GPUs"),
        ] {
            let path = dir.join(format!("{grid}-{file}.svg"));
            line_chart_scaled(
                &path,
                &format!("{grid}: {label} over time ({at})"),
                "time (hours)",
                label,
                series,
                false,
                false,
            )?;
            written.push(path);
        }
        md.push('\n');
    }
    let path = dir.join("summary.md");
    std::fs::write(&path, md)?;
    written.push(path);
    Ok(written)
}
