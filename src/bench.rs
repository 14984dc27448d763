//! `blox bench`: the reference simulations timed end to end (workload generation
//! excluded), with rounds per second and the process's peak memory.
//!
//! - `blox-recipe`: `examples/configs/blox-recipe-fifo.toml` — the Blox recipe,
//!   FIFO at 8 jobs/hour, until jobs 3000–4000 finish;
//! - `philly-10k`: `examples/configs/philly-10k.toml` — 10,000 Philly jobs
//!   (multi-GPU) on 1,024 GPUs, LAS + consolidated placement.

use anyhow::{bail, Result};
use blox_sim::{load_config, Simulation};
use std::path::Path;
use std::time::Instant;

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn one(name: &str, config: &Path, repeat: usize) -> Result<()> {
    let cfg = load_config(config, None, &[])?;
    let mut best = f64::INFINITY;
    let mut summary = None;
    for _ in 0..repeat.max(1) {
        let sim = Simulation::from_config(&cfg)?;
        let t = Instant::now();
        let r = sim.run_to_end()?;
        best = best.min(t.elapsed().as_secs_f64());
        summary = Some(r.summary);
    }
    let s = summary.expect("ran at least once");
    println!(
        "{name:<12} {:>8} rounds  {:>9.3} s  {:>10.0} rounds/s  {:>6} jobs finished  avg JCT {:>7.2} h  peak RSS {:>7.1} MiB",
        s.rounds,
        best,
        s.rounds as f64 / best,
        s.jobs_finished,
        s.avg_jct_s / 3600.0,
        peak_rss_mib().unwrap_or(f64::NAN)
    );
    Ok(())
}

pub fn run(which: &str, repeat: usize, default_config: &Path) -> Result<()> {
    let dir = default_config.parent().unwrap_or(Path::new("."));
    if cfg!(debug_assertions) {
        eprintln!("note: this is a debug build; time with `cargo run --release --no-default-features -- bench`");
    }
    let runs: Vec<(&str, &str)> = match which {
        "blox-recipe" => vec![("blox-recipe", "blox-recipe-fifo.toml")],
        "philly-10k" => vec![("philly-10k", "philly-10k.toml")],
        "all" => vec![
            ("blox-recipe", "blox-recipe-fifo.toml"),
            ("philly-10k", "philly-10k.toml"),
        ],
        other => bail!("unknown benchmark `{other}`; choose blox-recipe, philly-10k or all"),
    };
    for (name, file) in runs {
        one(name, &dir.join(file), repeat)?;
    }
    Ok(())
}
