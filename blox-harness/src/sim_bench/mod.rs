//! `blox bench`: the reference simulations timed end to end (workload generation
//! excluded), with rounds per second and the process's peak memory.
//!
//! - `blox-recipe`: `examples/configs/blox-recipe-fifo.toml` — the Blox recipe,
//!   FIFO at 8 jobs/hour, until jobs 3000–4000 finish;
//! - `philly-10k`: `examples/configs/philly-10k.toml` — 10,000 Philly jobs
//!   (multi-GPU) on 1,024 GPUs, LAS + consolidated placement.
//! - `pollux`: `examples/configs/pollux-artifact/pollux.toml` on workload 6 (64
//!   GPUs, wall time of the whole run and PolluxSched's decision time per
//!   round), then PolluxSched alone on 2,048 GPUs (512 nodes) with 400
//!   measured synthetic jobs (decision time per round over 5 rounds).
//! - `ones`: ONES alone on 64 GPUs (16 × 4, 120 jobs, population 64) and on
//!   1,024 GPUs (256 × 4, 1,500 jobs, population 1,024), 8 rounds each with
//!   every decision applied (decision time per round).
//! - `synth`: one policy-synthesizer decision (9 candidates, each forked and
//!   simulated a day ahead) on `examples/configs/synth-philly.toml` (128 GPUs,
//!   Philly recipe at 8 jobs/hour), sampled every 100 rounds from round 1,000
//!   to 2,000 of the run.
//! - `doubling`: the ring doubling heuristic (precompute variant, Pollux
//!   profiles) on 1,024 GPUs (256 × 4) with 400 jobs of the five Pollux
//!   applications, 8 rounds.
//! - `sia`: Sia's decision time at 64, 512 and 2,048 GPUs (the artifact's
//!   heterogeneous cluster scaled 1×, 8×, 32× with its `workloads/scale`
//!   jobs), the first 30 decisions with jobs of each (`--repeat` multiplies).
//! - `forecast`: one `blox status --start` forecast of 10,000 queued jobs on
//!   1,024 GPUs under FIFO, LAS, SRTF and Tiresias, within the default reach
//!   and to the end.
//! - `scale` ([`scale`]): `examples/configs/scale-1m.toml` — up to 1,000,000
//!   Philly-digest jobs on up to 10,000 GPUs under FIFO, LAS, SRTF and
//!   Tiresias, one process per cell (`blox bench scale`).

mod forecast;
pub mod scale;
mod sia;

use blox_core::*;
use blox_sim::{load_config, SimError, Simulation};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A benchmark that could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Selector(#[from] SelectorError),
    #[error("{0}")]
    Setup(String),
}

type Result<T> = std::result::Result<T, BenchError>;

/// Where benchmark lines go.
pub type Out<'a> = &'a mut dyn FnMut(String);

/// The registered scheduling policy `name` with default parameters.
fn scheduling(name: &str, section: &Section) -> Result<Box<dyn SchedulingPolicy>> {
    let e = registry::find_scheduling(name).ok_or_else(|| {
        BenchError::Setup(format!(
            "the `{name}` scheduling policy is not registered (link blox-policies)"
        ))
    })?;
    Ok((e.build)(section)?)
}

/// Wraps a scheduling policy and records how long each decision takes.
struct Timed {
    inner: Box<dyn SchedulingPolicy>,
    times: Arc<Mutex<Vec<f64>>>,
    /// The decisions' notes ([`Schedule::note`]), one per decision that had
    /// one.
    notes: Arc<Mutex<Vec<String>>>,
}

impl SchedulingPolicy for Timed {
    fn schedule(&mut self, round: &RoundInfo, jobs: &JobState, cluster: &ClusterState) -> Schedule {
        let t = Instant::now();
        let s = self.inner.schedule(round, jobs, cluster);
        self.times
            .lock()
            .expect("not poisoned")
            .push(t.elapsed().as_secs_f64());
        if let Some(n) = &s.note {
            self.notes.lock().expect("not poisoned").push(n.clone());
        }
        s
    }

    fn accepts(&self, job: &JobSpec) -> std::result::Result<(), String> {
        self.inner.accepts(job)
    }

    fn metrics_read(&self) -> Vec<&'static str> {
        self.inner.metrics_read()
    }

    fn requires_placement(&self) -> Option<&'static str> {
        self.inner.requires_placement()
    }

    fn pair_with_placement(&mut self, placement: &str) -> std::result::Result<(), String> {
        self.inner.pair_with_placement(placement)
    }

    fn sort_key(&self, job: &blox_core::Job, jobs: &blox_core::JobState) -> Option<String> {
        self.inner.sort_key(job, jobs)
    }

    fn fits_cluster(&self, cluster: &blox_core::ClusterState) -> std::result::Result<(), String> {
        self.inner.fits_cluster(cluster)
    }
}

/// Median and 95th percentile of `times` (seconds), in milliseconds.
fn percentiles(times: &mut [f64]) -> (f64, f64) {
    let p50 = blox_core::stats::quantile(times, 0.5) * 1000.0;
    (p50, blox_core::stats::quantile_sorted(times, 0.95) * 1000.0)
}

fn pollux(dir: &Path, out: Out) -> Result<()> {
    let config = dir.join("pollux-artifact/pollux.toml");
    let workload = dir.join("../../data/pollux/workloads/workload-6.csv");
    let cfg = load_config(&config, Some(&workload), &[])?;
    let mut sim = Simulation::from_config(&cfg)?;
    let times = Arc::new(Mutex::new(Vec::new()));
    let inner = std::mem::replace(
        &mut sim.round_loop.policies.scheduling,
        Box::new(NoSchedule),
    );
    sim.round_loop.policies.scheduling = Box::new(Timed {
        inner,
        times: times.clone(),
        notes: Default::default(),
    });
    let t = Instant::now();
    let r = sim.run_to_end()?;
    let wall = t.elapsed().as_secs_f64();
    let mut v = times.lock().expect("not poisoned").clone();
    let (p50, p95) = percentiles(&mut v);
    out(format!(
        "pollux-64    {:>8} rounds  {:>9.3} s  {:>10.0} rounds/s  {:>6} jobs finished  avg JCT {:>7.2} h  decision p50 {p50:.1} ms  p95 {p95:.1} ms",
        r.summary.rounds,
        wall,
        r.summary.rounds as f64 / wall,
        r.summary.jobs_finished,
        r.summary.avg_jct_s / 3600.0,
    ));
    // 2,048 GPUs: PolluxSched alone on synthetic measured jobs.
    let cluster = ClusterState::homogeneous(512, 4);
    let mut state = JobState::new();
    for id in 0..400u64 {
        add_measured_job(&mut state, JobSpec::new(id, id as f64, 1));
    }
    let mut sched = scheduling("pollux", &Section::empty("scheduling"))?;
    let mut times = Vec::new();
    for round in 0..5u64 {
        let info = RoundInfo {
            round,
            now_s: 60.0 * (round + 1) as f64,
            round_s: 60.0,
            wall_clock: false,
        };
        let t = Instant::now();
        let _ = sched.schedule(&info, &state, &cluster);
        times.push(t.elapsed().as_secs_f64());
    }
    let (p50, p95) = percentiles(&mut times);
    out(format!("pollux-2048  PolluxSched, 400 jobs on 512 x 4 GPUs, 5 rounds: decision p50 {p50:.1} ms  p95 {p95:.1} ms"));
    Ok(())
}

/// Queues a job of `spec` whose PolluxAgent has measured it on one GPU and on
/// 1-8 GPUs (by its id), with its report in the metric store.
fn add_measured_job(state: &mut JobState, spec: JobSpec) {
    let id = spec.id.0;
    let mut job = Job::new(spec);
    job.status = JobStatus::Queued;
    state.insert(job);
    let limits = blox_goodput::AppLimits {
        m0: 128,
        mmax: 4096,
        bmin: 32,
        bmax: 1024,
    };
    let mut a = blox_goodput::PolluxAgent::new(limits);
    let r = 1 + (id % 8) as u32;
    a.observe(1, 1, 128, 0.08, 0.001);
    a.observe(
        r.div_ceil(4),
        r,
        256,
        0.12 + 0.01 * r as f64,
        0.02 * r as f64,
    );
    a.record_grad(blox_goodput::GradStats {
        sqr: 1.0,
        var: 20.0 + id as f64,
    });
    for (k, v) in a.report().to_metrics() {
        state.metrics().set(JobId(id), k, v);
    }
}

/// Synthetic measured jobs for scheduler-only benchmarks: a fitted throughput
/// model, gradient statistics, epochs and samples processed.
fn synthetic_jobs(n: u64) -> JobState {
    let mut state = JobState::new();
    for id in 0..n {
        let mut spec = JobSpec::new(id, id as f64, 1 + (id % 4) as u32);
        spec.batch_size = Some(128 * spec.requested_gpus);
        add_measured_job(&mut state, spec);
        let m = state.metrics();
        let epochs = (id % 13) as f64 * 1.7;
        m.set(JobId(id), metric::EPOCHS_DONE, epochs);
        m.set(JobId(id), metric::SAMPLES_PROCESSED, epochs * 50_000.0);
        m.set(JobId(id), metric::EPOCH_SIZE, 50_000.0);
        m.set(JobId(id), metric::MAX_BATCH_SIZE, 4096.0);
    }
    state
}

/// Applies a schedule whose demands name their GPUs (as `explicit` placement).
fn apply(state: &mut JobState, cluster: &mut ClusterState, s: &Schedule) {
    let ids: Vec<JobId> = state.runnable().map(|j| j.id()).collect();
    for id in ids {
        cluster.release_job(id);
        let j = state.get_mut(id).expect("listed");
        j.allocation.clear();
        j.status = JobStatus::Queued;
    }
    for d in &s.entries {
        let Some(gpus) = d.gpu_ids.clone() else {
            continue;
        };
        if cluster.assign(d.job, &gpus).is_ok() {
            let j = state.get_mut(d.job).expect("scheduled");
            j.allocation = gpus;
            j.status = JobStatus::Running;
            j.launches += 1;
            j.run_time_s += 60.0;
        }
    }
    for j in state.runnable().map(|j| j.id()).collect::<Vec<_>>() {
        let m = state.metrics();
        let e = m.get(j, metric::EPOCHS_DONE).unwrap_or(0.0) + 1.0;
        m.set(j, metric::EPOCHS_DONE, e);
        m.set(j, metric::SAMPLES_PROCESSED, e * 50_000.0);
    }
}

fn ones(out: Out) -> Result<()> {
    for (nodes, jobs) in [(16u32, 120u64), (256, 1500)] {
        let mut cluster = ClusterState::homogeneous(nodes, 4);
        let mut state = synthetic_jobs(jobs);
        let mut sched = scheduling("ones", &Section::empty("scheduling"))?;
        let mut times = Vec::new();
        for round in 0..8u64 {
            let info = RoundInfo {
                round,
                now_s: 60.0 * (round + 1) as f64,
                round_s: 60.0,
                wall_clock: false,
            };
            let t = Instant::now();
            let s = sched.schedule(&info, &state, &cluster);
            times.push(t.elapsed().as_secs_f64());
            apply(&mut state, &mut cluster, &s);
        }
        let (p50, p95) = percentiles(&mut times);
        out(format!(
            "ones-{:<6} ONES (authors' rules: population 8, 10 generations), {jobs} jobs on {nodes} x 4 GPUs, 8 rounds: decision p50 {p50:.1} ms  p95 {p95:.1} ms",
            nodes * 4,
        ));
    }
    Ok(())
}

/// Gavel's allocation program on three GPU types: the first decision of a
/// round solves the max-min fairness LP for every job (`N × 3 + 1`
/// variables); later rounds reuse it while the job set is unchanged.
fn gavel(out: Out) -> Result<()> {
    for (nodes, jobs) in [(12u32, 100u64), (48, 1000)] {
        let mut cluster = ClusterState::new();
        for n in 0..nodes {
            let mut spec = NodeSpec::with_gpus(4);
            spec.gpu_type = ["V100", "P100", "K80"][n as usize % 3].into();
            cluster.add_node(spec);
        }
        let state = synthetic_jobs(jobs);
        for id in 0..jobs {
            let m = state.metrics();
            m.set(JobId(id), "speed.V100", 1.0);
            m.set(JobId(id), "speed.P100", 0.3 + 0.1 * (id % 5) as f64);
            m.set(JobId(id), "speed.K80", 0.1 + 0.05 * (id % 7) as f64);
        }
        let mut sched = scheduling("gavel", &Section::empty("scheduling"))?;
        let info = RoundInfo {
            round: 0,
            now_s: 360.0,
            round_s: 360.0,
            wall_clock: false,
        };
        let t = Instant::now();
        let s = sched.schedule(&info, &state, &cluster);
        let solve = t.elapsed().as_secs_f64();
        let t = Instant::now();
        sched.schedule(&info, &state, &cluster);
        let reuse = t.elapsed().as_secs_f64();
        out(format!(
            "gavel-{jobs:<5} Gavel LP, {jobs} jobs on 3 GPU types ({} GPUs): first decision {:.1} ms (solve), next {:.2} ms; {} jobs placed; peak RSS {:.0} MiB",
            nodes * 4,
            solve * 1e3,
            reuse * 1e3,
            s.entries.len(),
            peak_rss_mib().unwrap_or(f64::NAN)
        ));
    }
    Ok(())
}

fn doubling(dir: &Path, out: Out) -> Result<()> {
    let traces = dir.join("../../data/pollux/traces");
    let cluster = ClusterState::homogeneous(256, 4);
    let mut state = JobState::new();
    let apps = [
        ("cifar10", 512),
        ("imagenet", 3200),
        ("bert", 96),
        ("deepspeech2", 320),
        ("yolov3", 64),
    ];
    for id in 0..400u64 {
        let (app, batch) = apps[id as usize % apps.len()];
        let mut job = Job::new(JobSpec::new(id, id as f64, 1));
        job.spec.model = Some(app.into());
        job.spec.batch_size = Some(batch);
        job.status = JobStatus::Queued;
        state.insert(job);
        state
            .metrics()
            .set(JobId(id), metric::EPOCH, (id % 7) as f64);
    }
    let mut table = blox_core::config::Table::new();
    table.insert(
        "traces_dir".into(),
        blox_core::Value::String(traces.display().to_string()),
    );
    let section = Section::from_table("scheduling", table);
    let mut sched = scheduling("doubling", &section)?;
    let mut times = Vec::new();
    for round in 0..8u64 {
        let info = RoundInfo {
            round,
            now_s: 60.0 * (round + 1) as f64,
            round_s: 60.0,
            wall_clock: false,
        };
        let t = Instant::now();
        let s = sched.schedule(&info, &state, &cluster);
        times.push(t.elapsed().as_secs_f64());
        std::hint::black_box(s);
    }
    let (p50, p95) = percentiles(&mut times);
    out(format!("doubling-1024  precompute, 400 jobs on 256 x 4 GPUs, 8 rounds: decision p50 {p50:.1} ms  p95 {p95:.1} ms (first round fits the profiles)"));
    Ok(())
}

struct NoSchedule;

impl SchedulingPolicy for NoSchedule {
    fn schedule(&mut self, _: &RoundInfo, _: &JobState, _: &ClusterState) -> Schedule {
        Schedule::default()
    }
}

fn synth(dir: &Path, out: Out) -> Result<()> {
    let cfg = load_config(&dir.join("synth-philly.toml"), None, &[])?;
    let mut sim = Simulation::from_config(&cfg)?;
    let mut synth = blox_sim::synth::Synthesizer::from_config(&cfg, &sim.sim)?
        .ok_or_else(|| BenchError::Setup("synth-philly.toml has no [synthesizer]".into()))?;
    // The live run keeps its starting policies; decisions are only timed.
    drop(sim.round_loop.take_selector());
    let mut times = Vec::new();
    let mut known = Vec::new();
    while sim.round_loop.rounds() < 2000 {
        if !sim.step()? {
            break;
        }
        let r = sim.round_loop.rounds();
        if r >= 1000 && r % 100 == 0 {
            let info = RoundInfo {
                round: 0,
                now_s: sim.backend.now_s(),
                round_s: sim.round_loop.round_s(),
                wall_clock: false,
            };
            let lp = &sim.round_loop;
            let t = Instant::now();
            synth.select(&info, &lp.jobs, &lp.cluster, lp.waiting(), &lp.policies)?;
            times.push(t.elapsed().as_secs_f64());
            known.push(lp.jobs.num_active() + lp.waiting().len());
        }
    }
    let (p50, p95) = percentiles(&mut times);
    known.sort_unstable();
    out(format!(
        "synth        {} candidates, 128 GPUs, {}-{} known jobs, {} decisions: p50 {p50:.1} ms  p95 {p95:.1} ms ({} threads)",
        synth.candidates().len(),
        known.first().unwrap_or(&0),
        known.last().unwrap_or(&0),
        times.len(),
        rayon::current_num_threads()
    ));
    Ok(())
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn one(name: &str, config: &Path, repeat: usize, out: Out) -> Result<()> {
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
    out(format!(
        "{name:<12} {:>8} rounds  {:>9.3} s  {:>10.0} rounds/s  {:>6} jobs finished  avg JCT {:>7.2} h  peak RSS {:>7.1} MiB",
        s.rounds,
        best,
        s.rounds as f64 / best,
        s.jobs_finished,
        s.avg_jct_s / 3600.0,
        peak_rss_mib().unwrap_or(f64::NAN)
    ));
    Ok(())
}

/// The simulation benchmarks, by name.
pub const NAMES: &[&str] = &[
    "blox-recipe",
    "philly-10k",
    "pollux",
    "ones",
    "gavel",
    "doubling",
    "synth",
    "sia",
    "forecast",
];

/// Runs benchmark `which` (one of [`NAMES`], or `all` for the two reference
/// replays) with the configs under `configs_dir` (the repository's
/// `examples/configs`), `repeat` times where it repeats; each result line
/// goes to `out`.
pub fn run(which: &str, repeat: usize, configs_dir: &Path, out: Out) -> Result<()> {
    let dir = configs_dir;
    let runs: Vec<(&str, &str)> = match which {
        "blox-recipe" => vec![("blox-recipe", "blox-recipe-fifo.toml")],
        "philly-10k" => vec![("philly-10k", "philly-10k.toml")],
        "all" => vec![
            ("blox-recipe", "blox-recipe-fifo.toml"),
            ("philly-10k", "philly-10k.toml"),
        ],
        "pollux" => return pollux(dir, out),
        "ones" => return ones(out),
        "gavel" => return gavel(out),
        "doubling" => return doubling(dir, out),
        "synth" => return synth(dir, out),
        "sia" => return sia::sia(dir, repeat.max(1) * 30, out),
        "forecast" => return forecast::forecast(repeat, out),
        other => {
            return Err(BenchError::Setup(format!(
                "unknown simulation benchmark `{other}`; choose {} or all",
                NAMES.join(", ")
            )))
        }
    };
    for (name, file) in runs {
        one(name, &dir.join(file), repeat, &mut *out)?;
    }
    Ok(())
}
