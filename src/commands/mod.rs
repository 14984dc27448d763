//! One function per subcommand: read the arguments, call the library, print.

pub mod cluster;
pub mod events;
pub mod local;
pub mod pack;
pub mod study;
pub mod whatif;

use crate::cli::{Command, Overrides, SimArgs};
use crate::say;
use anyhow::{Context, Result};
use blox_config::Override;
use blox_sim::{ConfigRequest, Simulation};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The config `blox sim` runs when given none, relative to this crate.
pub const DEFAULT_CONFIG: &str = "examples/configs/default.toml";

/// The bundled default config: next to the sources this library was built
/// from, else relative to the working directory.
pub fn default_config() -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join(DEFAULT_CONFIG);
    if built.exists() {
        built
    } else {
        PathBuf::from(DEFAULT_CONFIG)
    }
}

/// The `--set` and `--unset` options as overrides, in the order given
/// (every `--set` first, then every `--unset`).
pub fn overrides(o: &Overrides) -> Result<Vec<Override>> {
    let mut out = Vec::new();
    for s in &o.set {
        out.push(Override::parse_cli(s)?);
    }
    for k in &o.unset {
        out.push(Override::unset(k));
    }
    Ok(out)
}

/// The config's policies, and its policy selector if it has a
/// `[synthesizer]` (the same one `blox sim` runs), named alike.
pub fn policies_of(
    cfg: &blox_config::Config,
) -> Result<(
    blox_core::Policies,
    Option<Box<dyn blox_core::PolicySelector>>,
)> {
    let mut policies =
        blox_core::registry::build_policies(&cfg.admission, &cfg.scheduling, &cfg.placement)?;
    let sim = blox_sim::SimConfig::from_section(&cfg.section("sim"))?;
    let selector = blox_sim::synth::Synthesizer::from_config(cfg, &sim)?.map(|s| {
        use blox_sim::synth::module_label;
        policies.names = blox_core::PolicyNames::new(
            module_label(&cfg.admission),
            module_label(&cfg.scheduling),
            module_label(&cfg.placement),
        );
        Box::new(s) as Box<dyn blox_core::PolicySelector>
    });
    Ok((policies, selector))
}

/// Says on stderr which parts of a config `command` does not read (one
/// config may serve the simulator and a cluster, so this is a note, not an
/// error). `unused`: (section, why); `run_keys`: `[run]` keys it ignores.
pub fn note_unused(
    cfg: &blox_config::Config,
    command: &str,
    unused: &[(&str, &str)],
    run_keys: &[&str],
) {
    for (section, why) in unused {
        if cfg.has_section(section) {
            eprintln!("note: `blox {command}` does not read [{section}] ({why})");
        }
    }
    let run = cfg.section("run");
    for key in run_keys {
        if run.table().contains_key(*key) {
            eprintln!(
                "note: `blox {command}` does not read [run] {key} ({})",
                run.location(key)
            );
        }
    }
}

/// Runs one parsed command.
pub fn dispatch(command: Command) -> Result<ExitCode> {
    match command {
        Command::Sim(a) => sim(a),
        Command::Sweep {
            config,
            out,
            threads,
            shard,
            overrides: o,
        } => match config.as_slice() {
            [file] if file.as_os_str() != "merge" => {
                study::sweep(file, &out, threads, shard, &overrides(&o)?)
            }
            [first, dirs @ ..] if first.as_os_str() == "merge" => {
                if shard.is_some() || !o.set.is_empty() || !o.unset.is_empty() {
                    anyhow::bail!("`blox sweep merge` takes the shards' folders and --out only");
                }
                study::merge(dirs, &out)
            }
            _ => anyhow::bail!(
                "`blox sweep` takes one sweep file (or `blox sweep merge DIR… --out DIR`), got {} paths",
                config.len()
            ),
        },
        Command::Pack(args) => pack::pack(&args),
        Command::Report { dir } => study::report(&dir),
        Command::Local {
            config,
            jobs,
            workdir,
            out,
            overrides: o,
        } => local::run(&config, &jobs, &workdir, out.as_deref(), &overrides(&o)?),
        Command::Scheduler {
            config,
            listen,
            state,
            overrides: o,
        } => cluster::scheduler(&config, listen, state, &overrides(&o)?),
        Command::Worker(a) => cluster::worker(a),
        Command::Submit(a) => cluster::submit(a),
        Command::Status {
            connect,
            jobs,
            start,
        } => cluster::status(&connect, &jobs, start),
        Command::Cancel { connect, job } => cluster::cancel(&connect, job),
        Command::Events(a) => events::events(a),
        Command::Whatif(a) => whatif::whatif(a),
        Command::Policies => policies(),
        Command::Bench {
            which,
            repeat,
            soak,
            scale,
        } => study::bench(&which, repeat, &soak, &scale),
    }
}

/// `blox sim`.
pub fn sim(a: SimArgs) -> Result<ExitCode> {
    let path = a.config.clone().unwrap_or_else(default_config);
    let sweep_file = std::fs::read_to_string(&path)
        .ok()
        .filter(|t| pack::sweep_file::is_packing_file(t) || blox_sim::sweep::grid::is_grid_file(t));
    if sweep_file.is_some() {
        anyhow::bail!(
            "{} is a sweep file ([packing] or [[grid]]): run it with `blox sweep {} --out DIR`",
            path.display(),
            path.display()
        );
    }
    let cfg = ConfigRequest::new(&path)
        .workload(a.workload.clone(), "--workload")
        .overrides(overrides(&a.overrides)?)
        .load()?;
    note_unused(
        &cfg,
        "sim",
        &[
            ("sweep", "`blox sweep` runs its combinations"),
            ("runtime", "it configures `blox scheduler`"),
        ],
        &[],
    );
    let start = std::time::Instant::now();
    let mut simulation = Simulation::from_config(&cfg)?;
    let events = match &a.out {
        Some(dir) if !a.no_events => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let path = dir.join("events.jsonl");
            simulation.log_events(&path)?;
            Some(path)
        }
        _ => None,
    };
    let bar = if a.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new(1000);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {percent}% of tracked jobs done {msg}",
            )
            .expect("valid template"),
        );
        b
    };
    let mut n = 0u64;
    let stepped = (|| {
        while simulation.step()? {
            n += 1;
            if n.is_multiple_of(256) {
                bar.set_position((simulation.fraction_done() * 1000.0) as u64);
            }
        }
        Ok::<_, blox_sim::SimError>(())
    })();
    bar.finish_and_clear();
    stepped?;
    let result = simulation.finish();
    let elapsed = start.elapsed();
    say!("blox sim {}", path.display())?;
    say!("{}", result.summary)?;
    say!(
        "wall time          {:.3} s ({:.0} rounds/s)",
        elapsed.as_secs_f64(),
        result.summary.rounds as f64 / elapsed.as_secs_f64().max(1e-9)
    )?;
    if let Some(dir) = &a.out {
        let files = result
            .write(dir)
            .with_context(|| format!("writing results to {}", dir.display()))?;
        for f in files.iter().chain(&events) {
            say!("wrote {}", f.display())?;
        }
    }
    let s = &result.summary;
    if s.stopped_early() && !(a.allow_unfinished || cfg.run.allow_unfinished) {
        anyhow::bail!(
            "{} stopped the run with {} of {} jobs unfinished (pass --allow-unfinished or set [run] allow_unfinished = true if that is intended)",
            s.stopped_by.as_deref().unwrap_or("a limit"),
            s.unfinished,
            s.jobs_total
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `blox policies`: every registered module of this binary.
pub fn policies() -> Result<ExitCode> {
    use blox_core::extension::{checkpointing_entries, protection_entries, recovery_entries};
    use blox_core::registry::*;
    let kinds: [(&str, Vec<(&str, &str)>); 6] = [
        (
            "admission",
            admission_entries()
                .iter()
                .map(|e| (e.name, e.about))
                .collect(),
        ),
        (
            "scheduling",
            scheduling_entries()
                .iter()
                .map(|e| (e.name, e.about))
                .collect(),
        ),
        (
            "placement",
            placement_entries()
                .iter()
                .map(|e| (e.name, e.about))
                .collect(),
        ),
        (
            "protection",
            protection_entries()
                .iter()
                .map(|e| (e.name, e.about))
                .collect(),
        ),
        (
            "checkpointing",
            checkpointing_entries()
                .iter()
                .map(|e| (e.name, e.about))
                .collect(),
        ),
        (
            "recovery",
            recovery_entries()
                .iter()
                .map(|e| (e.name, e.about))
                .collect(),
        ),
    ];
    let width = kinds
        .iter()
        .flat_map(|(_, v)| v.iter().map(|e| e.0.len()))
        .max()
        .unwrap_or(0);
    for (kind, entries) in kinds {
        say!("{kind}:")?;
        for (name, about) in entries {
            say!("  {name:<width$}  {about}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
