//! `blox local CONFIG --jobs JOBS.toml`: the config's policies on real job
//! processes on this machine (`blox_runtime::LocalBackend`), with wall-clock
//! rounds of `[run] round_s`; the config's `[cluster]` gives the (logical)
//! GPUs. The same result tables as `blox sim`, and with `--out` the same
//! event log (`events.jsonl`).

use crate::say;
use anyhow::{Context, Result};
use blox_config::Override;
use blox_core::*;
use blox_runtime::local::{read_jobs_file, run_until_done};
use blox_runtime::{LocalBackend, LocalConfig};
use blox_sim::{ConfigRequest, RoundRow, SimResult, StopReason};
use std::path::Path;
use std::process::ExitCode;

pub fn run(
    config: &Path,
    jobs: &Path,
    workdir: &Path,
    out: Option<&Path>,
    overrides: &[Override],
) -> Result<ExitCode> {
    let cfg = ConfigRequest::new(config)
        .overrides(overrides.to_vec())
        .load()?;
    let synth = cfg.has_section("synthesizer");
    super::note_unused(
        &cfg,
        "local",
        &[
            ("workload", "jobs come from --jobs"),
            ("sweep", "`blox sweep` runs its combinations"),
            ("runtime", "it configures `blox scheduler`"),
            (
                if synth { "" } else { "sim" },
                "overheads are real here; only policy synthesis's forks use it",
            ),
        ],
        &["max_time_s", "max_rounds", "track_jobs", "allow_unfinished"],
    );
    let specs = read_jobs_file(jobs)?;
    let cluster = cfg.cluster_state()?;
    let (policies, selector) = super::policies_of(&cfg)?;
    let n = specs.len();
    let profile = cfg.profile()?;
    let local = LocalConfig {
        max_startup_s: profile.rules.max_startup_s,
        ..LocalConfig::new(workdir)
    };
    let mut backend = LocalBackend::new(local, &cluster, specs)?;
    let round_s = cfg.run.round_s.get();
    let mut lp = RoundLoop::builder(policies, cluster, round_s)
        .selector(selector)
        .profile(profile);
    if out.is_some() {
        lp = lp.record_events();
    }
    let mut lp = lp.build();
    eprintln!(
        "blox local: {n} jobs on {} GPUs, {round_s} s rounds; job output under {}",
        lp.cluster.num_gpus(),
        workdir.join("jobs").display()
    );
    // With --out, the decisions go to events.jsonl as in `blox sim --out`.
    let mut events = match out {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            Some(blox_eventlog::EventLog::create(&dir.join("events.jsonl"))?)
        }
        None => None,
    };
    let mut event_error = None;
    let reports = run_until_done(&mut lp, &mut backend, |r, lp| {
        if let Some(log) = &mut events {
            if let Err(e) = log.write(&r.events) {
                event_error.get_or_insert(e);
            }
        }
        for id in &r.ended {
            if let Some(j) = lp.jobs.finished_job(*id) {
                eprintln!(
                    "  {:>8.1} s  {} {} {}",
                    r.time_s,
                    id,
                    j.status,
                    j.end_reason.as_deref().unwrap_or("")
                );
            }
        }
    })?;
    let rounds = reports.into_iter().map(RoundRow::from).collect();
    let result = SimResult::from_loop(
        &lp,
        rounds,
        backend.now_s(),
        false,
        None,
        Some(StopReason::Completed),
    );
    say!("blox local {}", config.display())?;
    say!(
        "{:<8} {:<16} {:<9} {:>9} {:>12} {:>11}  reason",
        "job",
        "name",
        "status",
        "JCT s",
        "queueing s",
        "preemptions"
    )?;
    for r in &result.jobs {
        let s = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
        say!(
            "{:<8} {:<16} {:<9} {:>9} {:>12} {:>11}  {}",
            r.job_id,
            r.name,
            r.status,
            s(r.jct_s),
            s(r.queueing_s),
            r.preemptions,
            r.reason
        )?;
    }
    say!(
        "GPU utilisation {:.1} %, {} rounds of {round_s} s",
        100.0 * result.summary.gpu_utilisation,
        result.summary.rounds
    )?;
    if let Some(e) = event_error {
        return Err(e.into());
    }
    if let Some(dir) = out {
        for f in result.write(dir)? {
            say!("wrote {}", f.display())?;
        }
        if let Some(log) = &events {
            say!("wrote {}", log.path().display())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
