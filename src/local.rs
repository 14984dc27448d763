//! `blox local CONFIG --jobs JOBS.toml`: the config's policies on real job
//! processes on this machine (`blox_runtime::LocalBackend`), with wall-clock
//! rounds of `[run] round_s`; the config's `[cluster]` gives the (logical)
//! GPUs. The same result tables as `blox sim`.
//!
//! ```toml
//! [[job]]
//! name = "resnet-a"              # optional
//! arrival_s = 0                  # seconds after start
//! gpus = 1
//! command = ["target/debug/blox-toy-job", "--duration-s", "20"]
//! duration_s = 20                # optional estimate (SRTF, Optimus, ...)
//! batch_size = 64                # optional
//! user = "alice"                 # optional
//! ```

use anyhow::{bail, Context, Result};
use blox_core::*;
use blox_runtime::{LocalBackend, LocalConfig};
use blox_sim::report::{JobRow, RoundRow, SimResult, Summary};
use serde::Deserialize;
use std::path::Path;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobsFile {
    job: Vec<JobEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobEntry {
    name: Option<String>,
    arrival_s: f64,
    gpus: u32,
    command: Vec<String>,
    duration_s: Option<f64>,
    batch_size: Option<u32>,
    user: Option<String>,
    model: Option<String>,
}

/// Reads and checks the jobs file; errors name the job and field.
fn read_jobs(path: &Path) -> Result<Vec<JobSpec>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file: JobsFile = toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
    let mut out = Vec::new();
    for (i, j) in file.job.into_iter().enumerate() {
        let at = || {
            format!(
                "{}: job {} ({})",
                path.display(),
                i + 1,
                j.name.as_deref().unwrap_or("unnamed")
            )
        };
        if j.command.is_empty() || j.command[0].trim().is_empty() {
            bail!("{}: `command` must name a program (argv, no shell)", at());
        }
        if !(j.arrival_s >= 0.0 && j.arrival_s.is_finite()) {
            bail!(
                "{}: `arrival_s` must be a non-negative number of seconds",
                at()
            );
        }
        if j.gpus == 0 {
            bail!("{}: `gpus` must be at least 1", at());
        }
        if let Some(d) = j.duration_s {
            if !(d > 0.0 && d.is_finite()) {
                bail!("{}: `duration_s` must be positive", at());
            }
        }
        let mut s = JobSpec::new(i as u64, j.arrival_s, j.gpus);
        if let Some(n) = &j.name {
            s.name = n.clone();
        }
        s.command = j.command;
        s.expected_duration_s = j.duration_s;
        s.batch_size = j.batch_size;
        s.user = j.user;
        s.model = j.model;
        out.push(s);
    }
    Ok(out)
}

pub fn run(
    config: &Path,
    jobs: &Path,
    workdir: Option<&Path>,
    out: Option<&Path>,
    set: &[(String, String)],
) -> Result<()> {
    let cfg = blox_sim::load_config(config, None, set)?;
    let specs = read_jobs(jobs)?;
    let cluster = cfg.cluster_state()?;
    let policies = registry::build_policies(&cfg.admission, &cfg.scheduling, &cfg.placement)?;
    let workdir = workdir
        .map(Path::to_path_buf)
        .unwrap_or_else(|| Path::new("blox-local").to_path_buf());
    let n = specs.len();
    let mut backend = LocalBackend::new(LocalConfig::new(&workdir), &cluster, specs)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let round_s = cfg.run.round_s;
    let mut lp = RoundLoop::new(policies, cluster, round_s);
    eprintln!(
        "blox local: {n} jobs on {} GPUs, {round_s} s rounds; job output under {}",
        lp.cluster.num_gpus(),
        workdir.join("jobs").display()
    );
    let mut rounds = Vec::new();
    while !(backend.exhausted() && lp.is_idle()) {
        let r = lp.run_round(&mut backend)?;
        for id in &r.ended {
            if let Some(j) = lp.jobs.finished_job(*id) {
                eprintln!(
                    "  {:>8.1} s  {} {} {}",
                    r.time_s,
                    id,
                    j.status.as_str(),
                    j.end_reason.as_deref().unwrap_or("")
                );
            }
        }
        rounds.push(RoundRow::from(r));
    }
    let mut rows: Vec<JobRow> = lp
        .jobs
        .finished()
        .iter()
        .map(|j| JobRow::from_job(j, false, round_s))
        .collect();
    rows.sort_by_key(|j| j.job_id);
    let all: Vec<&JobRow> = rows.iter().collect();
    let summary = Summary::compute(
        &all,
        &rows,
        lp.cluster.num_gpus(),
        backend.now_s(),
        lp.rounds(),
        lp.policies.names.clone(),
    );
    println!("blox local {}", config.display());
    println!(
        "{:<8} {:<16} {:<9} {:>9} {:>12} {:>11}  reason",
        "job", "name", "status", "JCT s", "queueing s", "preemptions"
    );
    for r in &rows {
        let s = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
        println!(
            "{:<8} {:<16} {:<9} {:>9} {:>12} {:>11}  {}",
            r.job_id,
            r.name,
            r.status,
            s(r.jct_s),
            s(r.queueing_s),
            r.preemptions,
            r.reason
        );
    }
    println!(
        "GPU utilisation {:.1} %, {} rounds of {round_s} s",
        100.0 * summary.gpu_utilisation,
        summary.rounds
    );
    let result = SimResult {
        jobs: rows,
        rounds,
        summary,
    };
    if let Some(dir) = out {
        for f in result.write(dir).map_err(anyhow::Error::msg)? {
            println!("wrote {}", f.display());
        }
    }
    Ok(())
}
