//! Charts for reports, as SVG and PNG (plotters, with a bundled font so PNG
//! text renders the same on every machine).

use plotters::prelude::*;
use std::path::Path;

/// A drawing error, boxed.
pub type PlotError = Box<dyn std::error::Error + Send + Sync>;

/// One point of the active-policy timeline: time (hours) and the policy label.
pub struct PolicyPoint {
    pub t_h: f64,
    pub policy: String,
}

/// At most `n` points: means over equal runs of rounds.
pub fn downsample(pts: &[(f64, f64)], n: usize) -> Vec<(f64, f64)> {
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
pub fn timeline_chart(path: &Path, title: &str, pts: &[PolicyPoint]) -> Result<(), PlotError> {
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
    ) -> Result<(), PlotError>
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

/// Named lines of (x, y) points.
pub type Series = Vec<(String, Vec<(f64, f64)>)>;

fn draw<
    'a,
    DB: DrawingBackend + 'a,
    X: plotters::coord::ranged1d::Ranged<ValueType = f64>,
    Y: plotters::coord::ranged1d::Ranged<ValueType = f64>,
>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    series: &Series,
    legend: SeriesLabelPosition,
) -> Result<(), PlotError>
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
            include_bytes!("../../assets/fonts/DejaVuSans.ttf"),
        );
    });
}

/// A line chart as SVG and PNG; `log_x` for CDFs of heavy-tailed times.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &Series,
    log_x: bool,
) -> Result<(), PlotError> {
    line_chart_scaled(path, title, x_desc, y_desc, series, log_x, true)
}

/// `auto_log_y`: a log y axis when the values span more than 5×.
pub fn line_chart_scaled(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &Series,
    log_x: bool,
    auto_log_y: bool,
) -> Result<(), PlotError> {
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
) -> Result<(), PlotError>
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
        return Err(format!("{title}: nothing to plot").into());
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
