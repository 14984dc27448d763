//! `blox events`: print an event log (the scheduler's or a simulation's),
//! follow it, or compare two decision by decision.

use crate::cli::EventsArgs;
use crate::say;
use anyhow::{Context, Result};
use blox_core::round::events::{Event, What};
use blox_eventlog::{self as event_log, Follow};
use blox_runtime::scheduler::RuntimeConfig;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

pub fn events(a: EventsArgs) -> Result<ExitCode> {
    let path = match (&a.file, &a.config) {
        (Some(f), _) => f.clone(),
        (None, Some(c)) => {
            let cfg = blox_sim::load_config(c, None, &[])?;
            RuntimeConfig::from_config(&cfg)?.events_path()
        }
        (None, None) => RuntimeConfig::default().events_path(),
    };
    let job = a.job.as_deref().map(parse_job).transpose()?;
    let wanted = |e: &Event| job.is_none_or(|j| e.job.map(|x| x.0) == Some(j));
    if let Some(other) = &a.diff {
        let load = |p: &Path| -> Result<Vec<Event>> {
            let all = event_log::read(p, true)?;
            Ok(all.into_iter().filter(|e| wanted(e)).collect())
        };
        let d = event_log::diff(&load(&path)?, &load(other)?, a.slack_rounds);
        for line in &d.differences {
            say!("{line}")?;
        }
        say!(
            "{} decisions match, {} differ ({} against {}, rounds within {})",
            d.matched,
            d.differences.len(),
            path.display(),
            other.display(),
            a.slack_rounds
        )?;
        return Ok(if d.is_same() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    // A restarted scheduler starts its clock and rounds again, and
    // submits and admits the unended jobs of its job table again: said,
    // in the text view, where it happens.
    let mut seen: std::collections::HashSet<(u64, &'static str)> = Default::default();
    let mut last: Option<(u64, f64)> = None;
    let mut restarted = false;
    let mut show = |e: &Event| -> Result<()> {
        restarted |= last.is_some_and(|(r, t)| e.round < r || e.time_s < t);
        last = Some((e.round, e.time_s));
        let again = match (e.job, &e.what) {
            (Some(j), What::Submitted { .. } | What::Admitted) => {
                !seen.insert((j.0, e.what.kind()))
            }
            _ => false,
        };
        if !wanted(e) {
            return Ok(());
        }
        if a.json {
            say!("{}", serde_json::to_string(e)?)?;
            return Ok(());
        }
        if std::mem::take(&mut restarted) {
            say!("-- the scheduler restarted: its rounds and clock start again; it queues the jobs of its job table again (adopting those still running) --")?;
        }
        let note = if again {
            " (again: the restarted scheduler took it from its job table)"
        } else {
            ""
        };
        match e.unix_s {
            Some(u) => say!("{}  {e}{note}", blox_runtime::ctl::utc(u))?,
            None => say!("{e}{note}")?,
        }
        Ok(())
    };
    if !path.exists() && a.follow {
        // As `tail -F`: the scheduler writes its log from its first round.
        eprintln!(
            "blox events: {} is not there yet; waiting for it (Ctrl-C to stop)",
            path.display()
        );
        while !path.exists() {
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    if !path.exists() {
        anyhow::bail!(
            "{}: no event log here (the scheduler writes `[runtime] events`, by default events.jsonl beside its job table; `blox sim --out DIR` writes DIR/events.jsonl)",
            path.display()
        );
    }
    // The rotated files, then the current one through the follower, which
    // `--follow` keeps reading from where it stopped.
    let mut follow = Follow::new(&path, true)?;
    for older in event_log::rotated_files(&path) {
        for e in event_log::read(&older, false)? {
            show(&e)?;
        }
    }
    for e in follow
        .poll()
        .with_context(|| format!("reading {}", path.display()))?
    {
        show(&e)?;
    }
    if a.follow {
        loop {
            std::thread::sleep(Duration::from_millis(250));
            for e in follow.poll()? {
                show(&e)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `7` or `job-7`.
fn parse_job(s: &str) -> Result<u64> {
    s.trim()
        .trim_start_matches("job-")
        .parse()
        .with_context(|| format!("--job {s}: expected a job id such as 7 or job-7"))
}
