//! A dependency-light training job for the runtime. It "trains" in
//! iterations, checks its lease at every iteration boundary, checkpoints its
//! iteration counter when the lease is revoked, resumes from it, and reports
//! `progress` and `iteration` metrics. It also checkpoints every
//! `--checkpoint-every` iterations (default 25), as training jobs do, so a
//! crash loses little. `--fail-at F` exits with status 3 once a fraction F of
//! the work is done (crash tests; only on the first launch). `--startup-s S`
//! waits S seconds at every launch before its first iteration, a stand-in
//! for a real job's imports and device initialisation (the lease is not
//! checked meanwhile, as a Python job importing torch cannot either); the
//! first iteration boundary reports the start-up to the scheduler.
//! `--journal FILE` appends one line per event of the launch to FILE (shared
//! by every job of a test; lines are written whole with `O_APPEND`):
//!
//!     start JOB GENERATION RANK UNIX_S ITERATION   resumed at ITERATION
//!     ckpt  JOB GENERATION RANK UNIX_S ITERATION   checkpoint in place
//!     done  JOB GENERATION RANK UNIX_S ITERATION   all work done, about to report it
//!     end   JOB GENERATION RANK UNIX_S ITERATION   about to exit
//!
//! from which a soak test finds overlapping runs, checkpoint regressions and
//! jobs the scheduler counts finished that never did their work.
//! `--attack BACK` (with `--journal`) first plays an attacker on a shared
//! cluster: it reads what credentials it can and forges reports for job
//! `BLOX_JOB_ID − BACK` (`blox_runtime::toy::attack`), then trains as usual.
//!
//! Two ways to set the work:
//!
//!     blox-toy-job --duration-s 30 [--iteration-s 0.05]
//!     blox-toy-job --profile data/pollux/traces --model cifar10 --iterations 2000 [--time-scale 0.01]
//!
//! With a profile, each iteration takes the step time measured for that
//! model (the Pollux artifact's `placements.csv`/`scalability.csv`, through
//! blox-goodput) at the launch's GPUs and batch size (`BLOX_BATCH_SIZE`, else
//! the model's initial batch size), times `--time-scale`; a new batch size
//! from the scheduler changes it at the next boundary. The GPUs are this
//! process's devices on each of `BLOX_WORLD_SIZE` nodes, or, for one process
//! per GPU, `BLOX_WORLD_SIZE` GPUs on one node.

use blox_client::Job;
use blox_goodput::AppProfile;
use std::path::Path;
use std::time::{Duration, Instant};

fn arg(args: &[String], name: &str) -> Option<f64> {
    let i = args.iter().position(|a| a == name)?;
    let v = args.get(i + 1)?;
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() => Some(x),
        _ => fail(format!("`{name}`: `{v}` is not a number"), 2),
    }
}

fn text_arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).map(String::as_str)
}

fn fail(msg: impl std::fmt::Display, code: i32) -> ! {
    eprintln!("blox-toy-job: {msg}");
    std::process::exit(code)
}

const USAGE: &str = "usage: blox-toy-job (--duration-s SECONDS [--iteration-s SECONDS] | --profile DIR --model NAME --iterations N [--time-scale S]) [--startup-s SECONDS] [--checkpoint-every N] [--fail-at FRACTION] [--journal FILE [--attack BACK]]

Runs under a blox worker (blox_client's environment): trains in iterations,
checks its lease at each boundary, checkpoints its iteration counter and
resumes from it, and pushes `progress` and `iteration` metrics.";

/// Flags that take a value.
const FLAGS: [&str; 11] = [
    "--journal",
    "--attack",
    "--duration-s",
    "--iteration-s",
    "--profile",
    "--model",
    "--iterations",
    "--time-scale",
    "--startup-s",
    "--checkpoint-every",
    "--fail-at",
];

/// Rejects unknown flags and flags without a value; `--help` prints usage.
fn check_args(args: &[String]) {
    let mut i = 1;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--help" || a == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        if !FLAGS.contains(&a) {
            fail(format!("unknown argument `{a}`\n{USAGE}"), 2);
        }
        if args.get(i + 1).is_none() {
            fail(format!("`{a}` needs a value\n{USAGE}"), 2);
        }
        i += 2;
    }
}

/// Appends whole lines to the `--journal` file.
struct Journal {
    file: Option<std::fs::File>,
    job: u64,
    generation: u64,
    rank: u32,
}

impl Journal {
    fn open(path: Option<&str>, job: &Job) -> Self {
        let file = path.map(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .unwrap_or_else(|e| fail(format!("--journal {p}: {e}"), 2))
        });
        Journal {
            file,
            job: job.env.job_id,
            generation: job.env.generation,
            rank: job.env.rank,
        }
    }

    fn write(&mut self, event: &str, iteration: u64) {
        use std::io::Write;
        let Some(f) = &mut self.file else { return };
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let line = format!(
            "{event} {} {} {} {t:.6} {iteration}\n",
            self.job, self.generation, self.rank
        );
        // One write per line: O_APPEND keeps lines whole across processes.
        let _ = f.write_all(line.as_bytes());
    }
}

/// Iteration time from a model profile at this launch's GPUs and `batch`.
struct Profiled {
    profile: AppProfile,
    per_node: Vec<u32>,
    scale: f64,
}

impl Profiled {
    fn step(&self, batch: u32) -> f64 {
        let replicas: u32 = self.per_node.iter().sum();
        let local = (batch as f64 / replicas as f64).max(self.profile.limits.bmin as f64);
        let (step, _sync) = self
            .profile
            .step_time_or_nearest(&self.per_node, local)
            .unwrap_or_else(|| {
                fail(
                    format!(
                        "the {} profile has no step time for {:?} GPUs",
                        self.profile.app, self.per_node
                    ),
                    2,
                )
            });
        step * self.scale
    }
}

/// What a real job's gradient all-reduce does to its ranks' pace: no rank
/// goes on to its next iteration before every rank has ended this one, so
/// an exit boundary that one rank proposes at the next iteration is one
/// that no rank has passed (`blox_client::LeaseIter`). Without it the toy job's ranks, which start
/// at different times, drifted apart on a loaded machine, and a rank
/// already past the proposed boundary stopped later than the others.
///
/// Each rank writes the count of iterations it ended in this launch to
/// `step.rank{R}` in the launch's coordination directory. Once the launch
/// is revoked (its lease, or an exit boundary fixed) a rank waits no more:
/// the boundary keeps the ranks together from there, and a rank whose
/// partner died must still stop within the grace. A rank that waits more
/// than 5 s for the others (one crashed) stops waiting for the rest of the
/// launch, as a real job's collective would time out.
struct Collective<'a> {
    job: &'a Job,
    dir: std::path::PathBuf,
    rank: u32,
    world: u32,
    broken: bool,
}

impl<'a> Collective<'a> {
    fn new(job: &'a Job) -> Collective<'a> {
        Collective {
            job,
            dir: job.env.coord_dir.clone(),
            rank: job.env.rank,
            world: job.env.world_size,
            broken: job.env.world_size <= 1,
        }
    }

    /// The launch is ending: its lease revoked, or an exit boundary fixed.
    fn ending(&self) -> bool {
        self.job.lease_revoked() || self.dir.join("exit_at").exists()
    }

    /// The ranks' count of ended iterations, read from their files.
    fn ended(&self, rank: u32) -> u64 {
        std::fs::read_to_string(self.dir.join(format!("step.rank{rank}")))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// This rank ended its `k`-th iteration of the launch: says so, then
    /// waits until every rank ended its `k`-th.
    fn end_of_iteration(&mut self, k: u64) {
        if self.broken {
            return;
        }
        let mine = self.dir.join(format!("step.rank{}", self.rank));
        let tmp = self.dir.join(format!(".step.rank{}", self.rank));
        if std::fs::write(&tmp, k.to_string()).is_err() || std::fs::rename(&tmp, &mine).is_err() {
            self.broken = true;
            return;
        }
        let t = Instant::now();
        while (0..self.world).any(|r| r != self.rank && self.ended(r) < k) {
            if self.ending() {
                return;
            }
            if t.elapsed() > Duration::from_secs(5) {
                eprintln!(
                    "blox-toy-job: rank {} stops waiting for the other ranks",
                    self.rank
                );
                self.broken = true;
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    check_args(&args);
    let startup = arg(&args, "--startup-s").unwrap_or(0.0).max(0.0);
    let fail_at = arg(&args, "--fail-at");
    let every = arg(&args, "--checkpoint-every").unwrap_or(25.0).max(1.0) as u64;
    let job = Job::from_env().unwrap_or_else(|e| fail(e, 2));
    if let Some(m) = job.env.gpu_milli {
        // A share of its GPU: say what it was given (its stdout is kept in
        // the launch's control directory).
        let var = |k: &str| std::env::var(k).unwrap_or_default();
        println!(
            "gpu share: {m} thousandths of device {}; {}={} {}={}",
            job.env.devices.join(","),
            blox_client::env::MPS_THREAD_PERCENTAGE,
            var(blox_client::env::MPS_THREAD_PERCENTAGE),
            blox_client::env::MPS_PINNED_MEM_LIMIT,
            var(blox_client::env::MPS_PINNED_MEM_LIMIT)
        );
    }
    #[cfg(unix)]
    if let Some(back) = arg(&args, "--attack") {
        let journal =
            text_arg(&args, "--journal").unwrap_or_else(|| fail("`--attack` needs `--journal`", 2));
        let attack = blox_runtime::toy::attack::Attack {
            job: job.env.job_id,
            victim: job.env.job_id.saturating_sub(back.max(0.0) as u64),
            journal: journal.into(),
            worker_addr: job.env.worker_addr.clone(),
        };
        // Once per job: its relaunches train only.
        if job.env.rank == 0 && !job.env.resume {
            if let Err(e) = attack.run() {
                eprintln!("blox-toy-job: the attack's report: {e}");
            }
        }
    }
    let mut batch = job.env.batch_size;
    let (total, mut step, profiled) = if let Some(dir) = text_arg(&args, "--profile") {
        let model = text_arg(&args, "--model").unwrap_or_else(|| fail(USAGE, 2));
        let iterations = arg(&args, "--iterations")
            .filter(|n| *n >= 1.0)
            .unwrap_or_else(|| fail(USAGE, 2)) as u64;
        let profile = AppProfile::load(Path::new(dir), model)
            .unwrap_or_else(|e| fail(format!("{dir}: {e}"), 2));
        let world = job.env.world_size.max(1);
        let devices = job.env.devices.len().max(1) as u32;
        let per_node = if world > 1 && devices == 1 {
            vec![world]
        } else {
            vec![devices; world as usize]
        };
        let b = *batch.get_or_insert(profile.limits.m0);
        let p = Profiled {
            profile,
            per_node,
            scale: arg(&args, "--time-scale").unwrap_or(1.0).max(0.0),
        };
        let step = p.step(b);
        eprintln!(
            "blox-toy-job: {model} profile, GPUs {:?}, batch {b}: {step:.6} s per iteration",
            p.per_node
        );
        (iterations, step, Some(p))
    } else {
        let duration = arg(&args, "--duration-s")
            .filter(|d| *d > 0.0)
            .unwrap_or_else(|| fail(USAGE, 2));
        let step = arg(&args, "--iteration-s").unwrap_or(0.05).max(1e-3);
        ((duration / step).round().max(1.0) as u64, step, None)
    };
    let first_launch = !job.env.resume;
    let start_iter: u64 = job
        .load_checkpoint("iteration")
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if !first_launch {
        eprintln!("blox-toy-job: resumed at iteration {start_iter}");
    }
    let mut journal = Journal::open(text_arg(&args, "--journal"), &job);
    journal.write("start", start_iter);
    if startup > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(startup));
    }
    let mut due = Instant::now();
    let mut done = start_iter;
    let mut collective = Collective::new(&job);
    let mut it = job.iterate(start_iter..total);
    for i in &mut it {
        if let (Some(b), Some(p)) = (job.new_batch_size(), &profiled) {
            step = p.step(b);
            batch = Some(b);
            job.applied_batch_size(b);
            eprintln!("blox-toy-job: batch {b} from iteration {i}: {step:.6} s per iteration");
        }
        // Sleep to the iteration's deadline, so time does not drift.
        due += Duration::from_secs_f64(step);
        if let Some(left) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(left);
        }
        done = i + 1;
        if let Some(f) = fail_at {
            if first_launch && done as f64 >= f * total as f64 {
                eprintln!("blox-toy-job: failing on purpose at iteration {done}");
                journal.write("end", done);
                std::process::exit(3);
            }
        }
        if done.is_multiple_of(every)
            && job
                .save_checkpoint("iteration", done.to_string().as_bytes())
                .is_ok()
        {
            journal.write("ckpt", done);
        }
        if done.is_multiple_of(10) || done == total {
            let _ = job.push_metric("progress", done as f64 / total as f64);
            let _ = job.push_metric("iteration", done as f64);
            if let Some(b) = batch.filter(|_| profiled.is_some()) {
                let _ = job.push_metric("batch_size", b as f64);
                let _ = job.push_metric("throughput", b as f64 / step.max(1e-12));
            }
        }
        collective.end_of_iteration(done - start_iter);
    }
    let revoked = it.revoked();
    if let Err(e) = job.save_checkpoint("iteration", done.to_string().as_bytes()) {
        eprintln!("blox-toy-job: {e}");
        journal.write("end", done);
        std::process::exit(1);
    }
    journal.write("ckpt", done);
    let _ = job.push_metric("progress", done as f64 / total as f64);
    if revoked {
        eprintln!("blox-toy-job: lease revoked; checkpointed at iteration {done}");
    }
    if !revoked && done >= total {
        // Before the report: a job finished without this line never did
        // its work (the soak counts them).
        journal.write("done", done);
        if let Err(e) = job.finish() {
            eprintln!("blox-toy-job: {e}");
            journal.write("end", done);
            std::process::exit(1);
        }
    }
    journal.write("end", done);
}
