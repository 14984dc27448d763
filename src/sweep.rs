//! `blox sweep`: every combination of the [sweep] lists, in parallel.
//!
//! ```toml
//! [sweep]
//! admission = ["accept-all", { policy = "load-based", k = 1.4 }]
//! scheduling = ["fifo", "las"]
//! placement = ["first-free"]
//! jobs_per_hour = [2, 4, 8]     # sets workload.jobs_per_hour
//! seeds = [1, 2, 3]             # sets run.seed
//! ```
//!
//! A list left out keeps the config's own setting. Each entry is a policy name or a
//! table with `policy` and its parameters (replacing that module's section).

use anyhow::{bail, Context, Result};
use blox_core::Config;
use blox_sim::Simulation;
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use std::io::Write;
use std::path::Path;

#[derive(Clone)]
struct Cell {
    admission: toml::Value,
    scheduling: toml::Value,
    placement: toml::Value,
    jobs_per_hour: Option<toml::Value>,
    seed: Option<i64>,
}

fn label(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Table(t) => {
            let name = t.get("policy").and_then(|p| p.as_str()).unwrap_or("?");
            let params: Vec<String> = t
                .iter()
                .filter(|(k, _)| *k != "policy")
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            if params.is_empty() {
                name.to_string()
            } else {
                format!("{name}({})", params.join(","))
            }
        }
        other => other.to_string(),
    }
}

fn list(sweep: &toml::Table, key: &str, default: toml::Value) -> Result<Vec<toml::Value>> {
    match sweep.get(key) {
        None => Ok(vec![default]),
        Some(toml::Value::Array(a)) if !a.is_empty() => Ok(a.clone()),
        Some(_) => bail!("[sweep] `{key}` must be a non-empty list"),
    }
}

pub fn run(
    config: &Path,
    out: &Path,
    threads: Option<usize>,
    sets: &[(String, String)],
) -> Result<()> {
    let text =
        std::fs::read_to_string(config).with_context(|| format!("reading {}", config.display()))?;
    if crate::grid::is_grid_file(&text) {
        if !sets.is_empty() {
            bail!("--set applies to [sweep] files; a [[grid]] file sets values per grid (`set = {{ ... }}`)");
        }
        return crate::grid::run(config, out, threads).map(|_| ());
    }
    let base_dir = config.parent().unwrap_or(Path::new(".")).to_path_buf();
    let file = config.display().to_string();
    // Validate the base config (and its [sweep] keys) before running anything.
    let base = Config::parse(&text, &file, &base_dir, sets)?;
    let sweep_section = base.section("sweep");
    let sweep = sweep_section.table().clone();
    for key in sweep.keys() {
        if ![
            "admission",
            "scheduling",
            "placement",
            "jobs_per_hour",
            "seeds",
        ]
        .contains(&key.as_str())
        {
            return Err(sweep_section
                .error_at(key, format!("unknown key `{key}`; expected admission, scheduling, placement, jobs_per_hour, seeds"))
                .into());
        }
    }
    let mut doc: toml::Table = toml::from_str(&text)?;
    doc.remove("sweep");
    for (k, v) in sets {
        blox_core::config::apply_override(&mut doc, k, v)?;
    }
    let current = |name: &str| -> toml::Value {
        let policy = match name {
            "admission" => &base.admission.policy,
            "scheduling" => &base.scheduling.policy,
            _ => &base.placement.policy,
        };
        match doc.get(name) {
            Some(toml::Value::Table(t)) if t.contains_key("policy") => {
                toml::Value::Table(t.clone())
            }
            _ => toml::Value::String(policy.clone()),
        }
    };
    let mut cells = Vec::new();
    for a in list(&sweep, "admission", current("admission"))? {
        for s in list(&sweep, "scheduling", current("scheduling"))? {
            for p in list(&sweep, "placement", current("placement"))? {
                for l in list(&sweep, "jobs_per_hour", toml::Value::Boolean(false))? {
                    for seed in list(&sweep, "seeds", toml::Value::Integer(base.run.seed as i64))? {
                        cells.push(Cell {
                            admission: a.clone(),
                            scheduling: s.clone(),
                            placement: p.clone(),
                            jobs_per_hour: (!matches!(l, toml::Value::Boolean(false)))
                                .then(|| l.clone()),
                            seed: seed.as_integer(),
                        });
                    }
                }
            }
        }
    }
    // Build every cell's config first: a bad cell fails before anything runs.
    let configs: Vec<(Cell, Config)> = cells
        .into_iter()
        .map(|cell| {
            let mut d = doc.clone();
            for (name, v) in [
                ("admission", &cell.admission),
                ("scheduling", &cell.scheduling),
                ("placement", &cell.placement),
            ] {
                let section = match v {
                    toml::Value::String(s) => {
                        let mut t = toml::Table::new();
                        t.insert("policy".into(), toml::Value::String(s.clone()));
                        // Keep the config's parameters when it names the same policy.
                        if let Some(toml::Value::Table(orig)) = doc.get(name) {
                            if orig.get("policy").and_then(|p| p.as_str()) == Some(s) {
                                t = orig.clone();
                            }
                        }
                        t
                    }
                    toml::Value::Table(t) => t.clone(),
                    _ => bail!("[sweep] {name}: entries must be names or tables"),
                };
                d.insert(name.to_string(), toml::Value::Table(section));
            }
            if let Some(l) = &cell.jobs_per_hour {
                d.entry("workload".to_string())
                    .or_insert_with(|| toml::Value::Table(Default::default()))
                    .as_table_mut()
                    .context("[workload] must be a table")?
                    .insert("jobs_per_hour".into(), l.clone());
            }
            if let Some(seed) = cell.seed {
                d.entry("run".to_string())
                    .or_insert_with(|| toml::Value::Table(Default::default()))
                    .as_table_mut()
                    .context("[run] must be a table")?
                    .insert("seed".into(), toml::Value::Integer(seed));
            }
            let cfg = Config::parse(
                &toml::to_string(&d)?,
                &format!("{file} (sweep cell)"),
                &base_dir,
                &[],
            )?;
            blox_core::registry::build_policies(&cfg.admission, &cfg.scheduling, &cfg.placement)?;
            Ok((cell, cfg))
        })
        .collect::<Result<_>>()?;

    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()?;
    let bar = ProgressBar::new(configs.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {wide_bar} {pos}/{len} cells")
            .expect("valid template"),
    );
    let started = std::time::Instant::now();
    let results: Vec<Result<(Cell, blox_sim::Summary)>> = pool.install(|| {
        configs
            .par_iter()
            .map(|(cell, cfg)| {
                let r = Simulation::from_config(cfg)?.run_to_end()?;
                bar.inc(1);
                Ok((cell.clone(), r.summary))
            })
            .collect()
    });
    bar.finish_and_clear();
    std::fs::create_dir_all(out)?;
    let path = out.join("sweep.csv");
    let mut f = std::fs::File::create(&path)?;
    writeln!(
        f,
        "admission,scheduling,placement,jobs_per_hour,seed,jobs,finished,avg_jct_s,p50_jct_s,p99_jct_s,avg_responsiveness_s,makespan_s,gpu_utilisation,rounds"
    )?;
    println!(
        "{:<24} {:<12} {:<14} {:>8} {:>5} {:>12} {:>12}",
        "admission", "scheduling", "placement", "jobs/h", "seed", "avg JCT (h)", "avg resp (h)"
    );
    for r in results {
        let (c, s) = r?;
        let load = c
            .jobs_per_hour
            .as_ref()
            .map(|v| v.to_string())
            .unwrap_or_default();
        let seed = c.seed.map(|v| v.to_string()).unwrap_or_default();
        let quote = |s: String| format!("\"{}\"", s.replace('"', "'"));
        writeln!(
            f,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            quote(label(&c.admission)),
            quote(label(&c.scheduling)),
            quote(label(&c.placement)),
            load,
            seed,
            s.jobs_total,
            s.jobs_finished,
            s.avg_jct_s,
            s.p50_jct_s,
            s.p99_jct_s,
            s.avg_responsiveness_s,
            s.makespan_s,
            s.gpu_utilisation,
            s.rounds
        )?;
        println!(
            "{:<24} {:<12} {:<14} {:>8} {:>5} {:>12.2} {:>12.2}",
            label(&c.admission),
            label(&c.scheduling),
            label(&c.placement),
            load,
            seed,
            s.avg_jct_s / 3600.0,
            s.avg_responsiveness_s / 3600.0
        );
    }
    println!(
        "{} cells in {:.2} s; wrote {}",
        configs.len(),
        started.elapsed().as_secs_f64(),
        path.display()
    );
    Ok(())
}
