//! `blox whatif`: a live scheduler's state, or an event log's at a moment,
//! replayed under other configs (blox_sim::whatif), beside what happened.

use crate::cli::{Connect, WhatifArgs};
use crate::say;
use anyhow::{bail, Context, Result};
use blox_config::{Config, Override};
use blox_core::*;
use blox_runtime::proto::{JobInfo, JobPhase, StatusReply, WorkerInfo};
use blox_sim::whatif::{self, Comparison, History, LiveJob, LivePhase, LiveWorker};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A config to replay under, and its label.
struct Target {
    label: String,
    cfg: Config,
}

/// Every config (and variant), read and checked before anything runs.
fn targets(a: &WhatifArgs) -> Result<Vec<Target>> {
    let common = super::overrides(&a.overrides)?;
    let mut out: Vec<Target> = Vec::new();
    let label_of = |p: &Path| {
        p.file_stem()
            .map_or("config".into(), |s| s.to_string_lossy().into_owned())
    };
    for path in &a.configs {
        // Its cluster may come from the history (a log's nodes, a live
        // scheduler's workers); replays say when neither gives one.
        let cfg = blox_sim::ConfigRequest::new(path)
            .overrides(common.clone())
            .cluster_optional()
            .load()?;
        // Errors name the file and line already.
        registry::build_policies(&cfg.admission, &cfg.scheduling, &cfg.placement)?;
        cfg.profile()?;
        out.push(Target {
            label: label_of(path),
            cfg,
        });
    }
    for v in &a.variants {
        let mut o = common.clone();
        for kv in v.split(',').filter(|s| !s.trim().is_empty()) {
            o.push(Override::parse_cli(kv.trim())?);
        }
        let cfg = blox_sim::ConfigRequest::new(&a.configs[0])
            .overrides(o)
            .cluster_optional()
            .load()
            .with_context(|| format!("--variant {v}"))?;
        registry::build_policies(&cfg.admission, &cfg.scheduling, &cfg.placement)
            .with_context(|| format!("--variant {v}"))?;
        cfg.profile().with_context(|| format!("--variant {v}"))?;
        out.push(Target {
            label: format!("{}[{v}]", label_of(&a.configs[0])),
            cfg,
        });
    }
    // Labels name folders: make them unique.
    for i in 1..out.len() {
        let mut n = 2;
        let base = out[i].label.clone();
        while out[..i].iter().any(|t| t.label == out[i].label) {
            out[i].label = format!("{base}-{n}");
            n += 1;
        }
    }
    Ok(out)
}

pub fn whatif(a: WhatifArgs) -> Result<ExitCode> {
    let targets = targets(&a)?;
    let sim0 = blox_sim::SimConfig::from_section(&targets[0].cfg.section("sim"))?;
    let history = match (&a.events, &a.scheduler) {
        (Some(path), _) => {
            let (events, cut) = blox_eventlog::read_cut(path, true)?;
            if let Some(n) = cut {
                eprintln!("note: {n}");
            }
            if events.is_empty() {
                bail!("{}: no events", path.display());
            }
            // The first config is taken to be the one that ran: its
            // checkpoint interval says what the log's stops rolled back.
            let cfg0 = &targets[0].cfg;
            History::from_events_checkpointed(
                &events,
                a.at,
                &sim0,
                cfg0.run.round_s.get(),
                StartupRules::from_run(&cfg0.run).checkpoint_interval_s,
            )?
        }
        (None, Some(addr)) => live_history(&Connect {
            scheduler: addr.clone(),
            auth: a.auth.clone(),
        })?,
        (None, None) => bail!("give --events FILE or --scheduler ADDR"),
    };
    for n in &history.notes {
        eprintln!("note: {n}");
    }
    let n_jobs = history.job_ids().len();
    say!(
        "what if: {} jobs from {:.0} s ({} running, {} queued, {} waiting for admission, {} arriving later), {} configs",
        n_jobs,
        history.at_s,
        history.active.iter().filter(|(j, _)| j.is_running()).count(),
        history.active.iter().filter(|(j, _)| !j.is_running()).count(),
        history.waiting.len(),
        history.future.len(),
        targets.len()
    )?;
    let mut replays = Vec::new();
    for t in &targets {
        let dir = a.out.as_ref().map(|d| d.join(&t.label));
        if let Some(d) = &dir {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let events = dir.as_ref().map(|d| d.join("events.jsonl"));
        let r = whatif::replay(&history, &t.cfg, &t.label, events.as_deref())
            .with_context(|| format!("replaying under {}", t.label))?;
        for n in &r.notes {
            eprintln!("note: {}: {n}", t.label);
        }
        if let Some(d) = &dir {
            r.result
                .write(d)
                .with_context(|| format!("writing {}", d.display()))?;
        }
        replays.push(r);
    }
    let cmp = Comparison::new(&history, &replays);
    say!("{}", cmp.render().trim_end())?;
    for r in &replays {
        if let Some(d) = r.against_history(&history, 1) {
            say!(
                "{}: {} decisions as in the log, {} not (rounds within 1)",
                r.label,
                d.matched,
                d.differences.len()
            )?;
        }
    }
    if let Some(dir) = &a.out {
        write_out(dir, &history, &replays, &cmp, &targets)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn write_out(
    dir: &Path,
    h: &History,
    replays: &[whatif::Replay],
    cmp: &Comparison,
    targets: &[Target],
) -> Result<()> {
    let csv = dir.join("whatif.csv");
    cmp.write_csv(&csv)
        .with_context(|| format!("writing {}", csv.display()))?;
    let pred = dir.join("predictions.csv");
    whatif::write_predictions(h, replays, &pred)
        .with_context(|| format!("writing {}", pred.display()))?;
    // As a sweep of one grid, so `blox report` draws it.
    let rows: Vec<blox_sim::sweep::SweepRow> = replays
        .iter()
        .zip(targets)
        .zip(cmp.rows.iter().filter(|r| r.label != "actual"))
        .map(|((r, t), row)| {
            let (interruptions, ettr, ettr_by_size) =
                blox_sim::sweep::SweepRow::failure_columns(&r.result.summary);
            blox_sim::sweep::SweepRow {
                grid: "whatif".into(),
                policy: r.label.clone(),
                admission: t.cfg.admission.policy.clone(),
                scheduling: t.cfg.scheduling.policy.clone(),
                placement: t.cfg.placement.policy.clone(),
                workload: String::new(),
                jobs_per_hour: None,
                seed: None,
                dir: r.label.clone(),
                config_hash: String::new(),
                jobs: row.jobs,
                finished: row.finished,
                rejected: r.result.summary.jobs_rejected,
                unfinished: row.jobs - row.finished,
                avg_jct_s: row.avg_jct_s,
                p50_jct_s: row.p50_jct_s,
                p99_jct_s: row.p99_jct_s,
                avg_responsiveness_s: row.avg_wait_s,
                makespan_s: r.result.summary.makespan_s,
                gpu_utilisation: row.utilisation.unwrap_or(f64::NAN),
                preemptions: r.result.summary.preemptions,
                rounds: r.result.summary.rounds,
                wall_s: 0.0,
                interruptions,
                ettr,
                ettr_by_size,
            }
        })
        .collect();
    let sweep_csv = dir.join("sweep.csv");
    blox_sim::sweep::write_rows(&sweep_csv, &rows)?;
    let mut written: Vec<PathBuf> = vec![csv, pred, sweep_csv];
    match blox_sim::report::report_sweep(dir) {
        Ok(files) => written.extend(files),
        Err(e) => eprintln!("note: no plots: {e}"),
    }
    for f in written {
        say!("wrote {}", f.display())?;
    }
    Ok(())
}

/// The state of the scheduler at `c` now: its unended jobs (times from the
/// earliest submission among them), its workers as the cluster.
fn live_history(c: &Connect) -> Result<History> {
    let sec = super::cluster::security_of(c)?;
    let mut ctl = blox_runtime::ctl::Ctl::connect(&c.scheduler, &sec)
        .with_context(|| format!("connecting to {}", c.scheduler))?;
    let r = ctl
        .status_unended(&[])
        .map_err(|e| anyhow::anyhow!("status of {}: {e}", c.scheduler))?;
    Ok(history_of(&r, blox_runtime::ctl::unix_now()))
}

/// [`History`] of a Status reply taken at Unix time `now`
/// ([`History::from_live`]): its jobs, and its workers in the cluster.
pub fn history_of(r: &StatusReply, now: f64) -> History {
    let workers: Vec<LiveWorker> = r
        .workers
        .iter()
        .filter(|w| w.alive)
        .map(|w| LiveWorker {
            id: w.id.clone(),
            node: w.node,
            spec: node_of(w),
        })
        .collect();
    let jobs: Vec<LiveJob> = r.jobs.iter().map(job_of).collect();
    History::from_live(&jobs, &workers, now)
}

/// A worker as the node it is: its GPUs' type and memory (the first GPU's,
/// as the scheduler takes them), host, topology labels and, where it
/// measured every GPU, their relative times (speed-aware placements), and
/// whether its GPUs go whole only (a worker that does not share them).
fn node_of(w: &WorkerInfo) -> NodeSpec {
    let mut spec = NodeSpec::with_gpus(w.gpus.len() as u32);
    if let Some(g) = w.gpus.first() {
        spec.gpu_type = g.name.clone();
        if g.memory_gb > 0.0 {
            spec.gpu_mem_gb = g.memory_gb;
        }
    }
    if w.cpus > 0 {
        spec.cpus = w.cpus;
    }
    if w.host_mem_gb > 0.0 {
        spec.host_mem_gb = w.host_mem_gb;
    }
    spec.labels = w
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !w.gpus.is_empty() && w.gpus.iter().all(|g| g.relative_time > 0.0) {
        spec.gpu_slowdown = w.gpus.iter().map(|g| g.relative_time).collect();
    }
    spec.whole_gpus_only = w.whole_gpus_only;
    spec
}

/// A job of the reply; a GPU it holds is named `worker:index`.
fn job_of(j: &JobInfo) -> LiveJob {
    LiveJob {
        id: j.id,
        name: j.name.clone(),
        requested_gpus: j.requested_gpus,
        phase: match j.phase() {
            JobPhase::Submitted => LivePhase::Submitted,
            JobPhase::Running => LivePhase::Running,
            _ => LivePhase::Queued,
        },
        submitted_unix_s: j.submitted_unix_s,
        first_start_unix_s: j.first_start_unix_s,
        duration_s: j.duration_s,
        progress: j.progress,
        attained_gpu_s: j.attained_gpu_s,
        lost_work_gpu_s: j.lost_work_gpu_s,
        startup_gpu_s: j.startup_gpu_s,
        launches: j.launches,
        preemptions: j.preemptions,
        // All or none: a GPU it does not name clearly, and the replay
        // starts it queued (saying so).
        gpus: j
            .gpus
            .iter()
            .map(|g| {
                let (w, i) = g.rsplit_once(':')?;
                Some((w.to_string(), i.parse().ok()?))
            })
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default(),
    }
}
