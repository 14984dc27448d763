//! `blox`: simulate, sweep and list composable deep-learning cluster schedulers.

mod bench;
mod cluster;
mod grid;
mod local;
mod report;
mod sweep;

use anyhow::{Context, Result};
use blox_sim::{load_config, Simulation};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};

// Link the built-in policies: they register themselves by name.
use blox_policies as _;

/// The config `blox sim` runs when given none.
pub const DEFAULT_CONFIG: &str = "examples/configs/default.toml";

#[derive(Parser)]
#[command(
    name = "blox",
    version,
    about = "Composable deep-learning cluster schedulers: simulate, sweep, compare"
)]
struct Cli {
    /// Log level filter (e.g. `info`, `debug`, `blox_core=debug`); also RUST_LOG.
    #[arg(long, global = true, default_value = "warn")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one simulation and print its summary.
    Sim {
        /// The config (TOML). Default: the bundled `examples/configs/default.toml`.
        config: Option<PathBuf>,
        /// Replace the config's workload file (format recognised from its header).
        #[arg(long)]
        workload: Option<PathBuf>,
        /// Write jobs.csv, rounds.csv (and .parquet) and summary.txt here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Override a config value: `--set scheduling.policy=las --set run.seed=3`.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// Run policies × loads × seeds from a config's [sweep] section, or whole
    /// configs × workloads × loads × seeds from a file of [[grid]]s (resumable), in parallel.
    Sweep {
        config: PathBuf,
        /// Where `sweep.csv` goes (default: `sweep-out/`).
        #[arg(long, default_value = "sweep-out")]
        out: PathBuf,
        /// Worker threads (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Plots (SVG) and a markdown summary of a [[grid]] sweep's output folder.
    Report {
        /// The folder `blox sweep --out` wrote.
        dir: PathBuf,
    },
    /// Run the config's policies on real job processes on this machine
    /// (wall-clock rounds; `[cluster]` gives the logical GPUs).
    Local {
        config: PathBuf,
        /// The jobs to run: a TOML file of `[[job]]` tables (see `src/local.rs`).
        #[arg(long)]
        jobs: PathBuf,
        /// Where job control, output and checkpoint folders go (default `blox-local/`).
        #[arg(long)]
        workdir: Option<PathBuf>,
        /// Write jobs.csv, rounds.csv and summary.txt here.
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Run the central scheduler: the config's policies on the workers that
    /// register with it, wall-clock rounds of `[run] round_s`, `[runtime]` settings.
    Scheduler {
        #[arg(long)]
        config: PathBuf,
        /// Listen here instead of `[runtime] listen`.
        #[arg(long)]
        listen: Option<String>,
        /// The job table file instead of `[runtime] state`.
        #[arg(long)]
        state: Option<PathBuf>,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Run a worker manager on this node: registers its GPUs with the scheduler
    /// and runs the jobs it is given.
    Worker(cluster::WorkerArgs),
    /// Submit a job to a scheduler: `blox submit --gpus 2 -- train --epochs 3`.
    Submit(cluster::SubmitArgs),
    /// Show a scheduler's jobs (all, or the ones named) and workers.
    Status {
        #[command(flatten)]
        connect: cluster::Connect,
        jobs: Vec<u64>,
    },
    /// Cancel a job (killed if it runs).
    Cancel {
        #[command(flatten)]
        connect: cluster::Connect,
        job: u64,
    },
    /// List every registered module.
    Policies,
    /// Time the reference simulations (build with --release).
    Bench {
        /// Which benchmark: `blox-recipe`, `philly-10k`, `pollux`, `ones`, `doubling`, `synth`, `lease`, `metric-push`, `runtime-round` or `all`.
        #[arg(default_value = "all")]
        which: String,
        /// Repetitions (the best is reported).
        #[arg(long, default_value_t = 3)]
        repeat: usize,
    },
}

fn parse_sets(set: &[String]) -> Result<Vec<(String, String)>> {
    set.iter()
        .map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .with_context(|| format!("--set {s}: expected KEY=VALUE"))
        })
        .collect()
}

/// The bundled default config: next to the sources this binary was built from,
/// else relative to the working directory.
fn default_config() -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join(DEFAULT_CONFIG);
    if built.exists() {
        built
    } else {
        PathBuf::from(DEFAULT_CONFIG)
    }
}

fn sim(
    config: Option<PathBuf>,
    workload: Option<PathBuf>,
    out: Option<PathBuf>,
    set: Vec<String>,
    quiet: bool,
) -> Result<()> {
    let path = config.unwrap_or_else(default_config);
    let cfg = load_config(&path, workload.as_deref(), &parse_sets(&set)?)?;
    let start = std::time::Instant::now();
    let mut simulation = Simulation::from_config(&cfg)?;
    let bar = if quiet {
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
    while simulation.step()? {
        n += 1;
        if n % 256 == 0 {
            bar.set_position((simulation.fraction_done() * 1000.0) as u64);
        }
    }
    bar.finish_and_clear();
    let result = simulation.finish();
    let elapsed = start.elapsed();
    println!("blox sim {}", path.display());
    println!("{}", result.summary);
    println!(
        "wall time          {:.3} s ({:.0} rounds/s)",
        elapsed.as_secs_f64(),
        result.summary.rounds as f64 / elapsed.as_secs_f64().max(1e-9)
    );
    if let Some(dir) = out {
        let files = result
            .write(&dir)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("writing results to {}", dir.display()))?;
        for f in files {
            println!("wrote {}", f.display());
        }
    }
    Ok(())
}

fn policies() {
    use blox_core::registry::*;
    let kinds: [(&str, Vec<(&str, &str)>); 3] = [
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
    ];
    let width = kinds
        .iter()
        .flat_map(|(_, v)| v.iter().map(|e| e.0.len()))
        .max()
        .unwrap_or(0);
    for (kind, entries) in kinds {
        println!("{kind}:");
        for (name, about) in entries {
            println!("  {name:<width$}  {about}");
        }
    }
}

fn main() {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cli.log));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Sim {
            config,
            workload,
            out,
            set,
            quiet,
        } => sim(config, workload, out, set, quiet),
        Command::Sweep {
            config,
            out,
            threads,
            set,
        } => parse_sets(&set).and_then(|s| sweep::run(&config, &out, threads, &s)),
        Command::Report { dir } => report::run(&dir).map(|files| {
            for f in files {
                println!("wrote {}", f.display());
            }
        }),
        Command::Local {
            config,
            jobs,
            workdir,
            out,
            set,
        } => parse_sets(&set)
            .and_then(|s| local::run(&config, &jobs, workdir.as_deref(), out.as_deref(), &s)),
        Command::Scheduler {
            config,
            listen,
            state,
            set,
        } => parse_sets(&set).and_then(|s| cluster::scheduler(&config, listen, state, &s)),
        Command::Worker(a) => cluster::worker(a),
        Command::Submit(a) => cluster::submit(a),
        Command::Status { connect, jobs } => cluster::status(&connect, &jobs),
        Command::Cancel { connect, job } => cluster::cancel(&connect, job),
        Command::Policies => {
            policies();
            Ok(())
        }
        Command::Bench { which, repeat } => bench::run(&which, repeat, &default_config()),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
