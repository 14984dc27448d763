//! `blox sweep`, `blox report` and `blox bench`.

use crate::cli::{ScaleArgs, SoakArgs};
use crate::say;
use anyhow::{Context, Result};
use blox_config::Override;
use blox_sim::sweep::{self, SweepOptions, SweepRow};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

/// `blox sweep FILE --out DIR`: a `[sweep]` config, a `[[grid]]` file, or
/// a `[packing]` grid of FGD packing runs.
pub fn sweep(
    file: &Path,
    out: &Path,
    threads: Option<usize>,
    shard: Option<sweep::Shard>,
    overrides: &[Override],
) -> Result<ExitCode> {
    if let Ok(text) = std::fs::read_to_string(file) {
        if super::pack::sweep_file::is_packing_file(&text) {
            if shard.is_some() || !overrides.is_empty() {
                anyhow::bail!(
                    "{}: a [packing] sweep takes --out and --threads only (set its values in the file)",
                    file.display()
                );
            }
            let args = super::pack::sweep_file::args_of(file, &text, out, threads)?;
            return super::pack::pack(&args)
                .with_context(|| format!("{} ([packing])", file.display()));
        }
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {wide_bar} {pos} cells done, {msg}")
            .expect("valid template"),
    );
    let b = bar.clone();
    let opts = SweepOptions {
        threads,
        on_cell: Some(Arc::new(move |r: &SweepRow| {
            b.inc(1);
            b.set_message(r.dir.clone());
        })),
        shard,
    };
    let started = std::time::Instant::now();
    let outcome = sweep::run_file(file, out, overrides, &opts);
    bar.finish_and_clear();
    let outcome = outcome?;
    eprintln!(
        "{} cells: {} already done, {} to run",
        outcome.rows.len(),
        outcome.reused,
        outcome.ran
    );
    say!(
        "{:<18} {:<34} {:<16} {:>6} {:>5} {:>10} {:>10} {:>7}",
        "grid",
        "policy",
        "workload",
        "jobs/h",
        "seed",
        "avg JCT h",
        "p99 JCT h",
        "util %"
    )?;
    for r in &outcome.rows {
        say!(
            "{:<18} {:<34} {:<16} {:>6} {:>5} {:>10.3} {:>10.2} {:>7.1}",
            r.grid,
            r.policy,
            r.workload,
            r.jobs_per_hour.map(|v| v.to_string()).unwrap_or_default(),
            r.seed.map(|v| v.to_string()).unwrap_or_default(),
            r.avg_jct_s / 3600.0,
            r.p99_jct_s / 3600.0,
            100.0 * r.gpu_utilisation
        )?;
    }
    say!(
        "{} cells ({} run) in {:.2} s; wrote {}",
        outcome.rows.len(),
        outcome.ran,
        started.elapsed().as_secs_f64(),
        outcome.table.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `blox sweep merge DIR… --out DIR`: the shards' outputs as one sweep.
pub fn merge(dirs: &[std::path::PathBuf], out: &Path) -> Result<ExitCode> {
    let m = sweep::merge(dirs, out)?;
    say!(
        "merged {} shards: {} cells; wrote {}",
        dirs.len(),
        m.rows.len(),
        m.table.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `blox report DIR`.
pub fn report(dir: &Path) -> Result<ExitCode> {
    if super::pack::report::is_pack_dir(dir) {
        for f in super::pack::report::report_dir(dir)? {
            say!("wrote {}", f.display())?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    for f in blox_sim::report::report_sweep(dir)? {
        say!("wrote {}", f.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `blox bench WHICH`: simulation benchmarks (blox-sim) and runtime
/// benchmarks (blox-runtime).
pub fn bench(which: &str, repeat: usize, soak: &SoakArgs, scale: &ScaleArgs) -> Result<ExitCode> {
    if which == "soak" {
        return soak_bench(soak);
    }
    if which == "scale" {
        return scale_bench(scale);
    }
    if which == "submit" {
        return submit_bench(soak);
    }
    if !scale.cells.is_empty() || scale.in_process {
        anyhow::bail!("--cell and --in-process apply only to `blox bench scale`");
    }
    if cfg!(debug_assertions) {
        eprintln!("note: this is a debug build; time with `cargo run --release --no-default-features -- bench`");
    }
    let configs = super::default_config()
        .parent()
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let mut failed: Option<std::io::Error> = None;
    let mut print = |line: String| {
        if failed.is_none() {
            if let Err(e) = crate::out::line(format_args!("{line}")) {
                failed = Some(e);
            }
        }
    };
    if blox_harness::runtime_bench::NAMES.contains(&which) {
        blox_harness::runtime_bench::run(which, repeat, &mut print)?;
    } else if which == "all" || blox_harness::sim_bench::NAMES.contains(&which) {
        blox_harness::sim_bench::run(which, repeat, &configs, &mut print)?;
    } else {
        anyhow::bail!(
            "unknown benchmark `{which}`; choose {}, {}, scale, soak, submit or all",
            blox_harness::sim_bench::NAMES.join(", "),
            blox_harness::runtime_bench::NAMES.join(", ")
        );
    }
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// `blox bench submit`: the live scheduler's intake (`--clients`, `--jobs`;
/// default 64 clients, 20,000 jobs).
fn submit_bench(a: &SoakArgs) -> Result<ExitCode> {
    if cfg!(debug_assertions) {
        eprintln!("note: this is a debug build; time with `cargo run --release -- bench submit`");
    }
    let (clients, jobs) = (a.clients.unwrap_or(64), a.jobs.unwrap_or(20_000));
    let r = blox_harness::runtime_bench::submissions(clients, jobs, 1.0, 10)?;
    crate::out::line(format_args!(
        "submit  {} clients, {} jobs: {:.0} submissions/s, latency p50 {:.1} ms p99 {:.1} ms, {} retried; {} lost, {} duplicated; round time p50 {:.1} ms p99 {:.1} ms (1 s rounds); then {} rounds with {} jobs waiting: p50 {:.1} ms p99 {:.1} ms (publishing p50 {:.1} ms); Status of {} jobs: page of 1,000 p50 {:.1} ms, slowest {:.1} ms; peak RSS {:.0} MiB (scheduler and clients, one process)",
        r.clients,
        r.jobs,
        r.per_s,
        1e3 * r.latency_p50_s,
        1e3 * r.latency_p99_s,
        r.retries,
        r.lost,
        r.duplicated,
        1e3 * r.round_p50_s,
        1e3 * r.round_p99_s,
        r.steady_rounds,
        r.waiting,
        1e3 * r.steady_p50_s,
        1e3 * r.steady_p99_s,
        1e3 * r.steady_publish_p50_s,
        r.listed,
        1e3 * r.status_page_p50_s,
        1e3 * r.status_page_max_s,
        r.peak_rss_kib as f64 / 1024.0,
    ))?;
    Ok(if r.lost == 0 && r.duplicated == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `blox bench scale`: the cells of `scale-1m.toml`, each in a child process
/// of its own (so each reports its own peak memory) unless `--in-process`.
fn scale_bench(a: &ScaleArgs) -> Result<ExitCode> {
    use blox_harness::sim_bench::scale::{default_cells, run_cell, Cell};
    if cfg!(debug_assertions) {
        eprintln!("note: this is a debug build; time with `cargo run --release --no-default-features -- bench scale`");
    }
    let cells: Vec<Cell> = if a.cells.is_empty() {
        default_cells()
    } else {
        a.cells
            .iter()
            .map(|c| Cell::parse(c).map_err(|e| anyhow::anyhow!("--cell {e}")))
            .collect::<Result<_>>()?
    };
    let configs = super::default_config()
        .parent()
        .unwrap_or(Path::new("."))
        .to_path_buf();
    for cell in &cells {
        if a.in_process {
            let m =
                run_cell(&configs, cell).with_context(|| format!("scale cell {}", cell.label()))?;
            crate::out::line(format_args!("{}", m.line()))?;
            continue;
        }
        let blox = std::env::current_exe().context("finding this program")?;
        let out = std::process::Command::new(&blox)
            .args(["bench", "scale", "--in-process", "--cell", &cell.label()])
            .stderr(std::process::Stdio::inherit())
            .output()
            .with_context(|| format!("running {}", blox.display()))?;
        if !out.status.success() {
            anyhow::bail!("scale cell {} failed ({})", cell.label(), out.status);
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            crate::out::line(format_args!("{line}"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `blox bench soak`: a scheduler, workers and clients on loopback with
/// faults (blox-runtime's `soak`); exits 1 unless nothing was lost,
/// duplicated, run twice at once or regressed.
fn soak_bench(a: &SoakArgs) -> Result<ExitCode> {
    let blox = std::env::current_exe().context("finding this program")?;
    let toy = blox.with_file_name(format!("blox-toy-job{}", std::env::consts::EXE_SUFFIX));
    if !toy.is_file() {
        anyhow::bail!(
            "blox bench soak runs `blox-toy-job` jobs and expects it beside this program ({}); build it with `cargo build --bins`",
            toy.display()
        );
    }
    let keep = a.out.is_some();
    let dir = a
        .out
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("blox-soak-{}", std::process::id())));
    let mut cfg = blox_harness::soak::SoakConfig::new(blox, toy, dir.clone());
    if a.reduced {
        cfg = cfg.reduced();
    }
    let set = |v: Option<usize>, f: &mut usize| {
        if let Some(v) = v {
            *f = v;
        }
    };
    set(a.jobs, &mut cfg.jobs);
    set(a.clients, &mut cfg.clients);
    set(a.workers, &mut cfg.workers);
    set(a.worker_kills, &mut cfg.worker_kills);
    set(a.scheduler_restarts, &mut cfg.scheduler_restarts);
    set(a.cuts, &mut cfg.cuts);
    set(a.hangs, &mut cfg.hangs);
    set(a.disk_fulls, &mut cfg.disk_fulls);
    set(a.clock_steps, &mut cfg.clock_steps);
    if let Some(p) = &a.policy {
        cfg.policy = p.clone();
    }
    if let Some(s) = a.seed {
        cfg.seed = s;
    }
    cfg.max_time_s = a.max_time_s;
    cfg.teams = a.teams;
    let report = blox_harness::soak::run(&cfg, &mut |line| eprintln!("{line}"))?;
    crate::out::line(format_args!("{report}"))?;
    if report.sound() {
        if !keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "soak: logs, job table and journal kept in {}",
            dir.display()
        );
        Ok(ExitCode::from(1))
    }
}
