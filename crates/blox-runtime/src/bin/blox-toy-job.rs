//! A dependency-light training job for the local runtime: it "trains" for
//! `--duration-s` seconds of work in iterations of `--iteration-s`, checks its
//! lease at every iteration boundary, checkpoints its iteration counter when
//! the lease is revoked, resumes from it, and reports `progress` and
//! `iteration` metrics. It also checkpoints every `--checkpoint-every`
//! iterations (default 25), as training jobs do, so a crash loses little.
//! `--fail-at F` exits with status 3 once a fraction F of the work is done
//! (crash tests; only on the first launch).
//!
//!     blox-toy-job --duration-s 30 [--iteration-s 0.05] [--checkpoint-every 25] [--fail-at 0.5]

use blox_client::Job;
use std::time::{Duration, Instant};

fn arg(args: &[String], name: &str) -> Option<f64> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(duration) = arg(&args, "--duration-s").filter(|d| *d > 0.0) else {
        eprintln!(
            "usage: blox-toy-job --duration-s SECONDS [--iteration-s SECONDS] [--fail-at FRACTION]"
        );
        std::process::exit(2);
    };
    let step = arg(&args, "--iteration-s").unwrap_or(0.05).max(1e-3);
    let fail_at = arg(&args, "--fail-at");
    let every = arg(&args, "--checkpoint-every").unwrap_or(25.0).max(1.0) as u64;
    let job = match Job::from_env() {
        Ok(j) => j,
        Err(e) => {
            eprintln!("blox-toy-job: {e}");
            std::process::exit(2);
        }
    };
    let total = (duration / step).round().max(1.0) as u64;
    let first_launch = !job.env.resume;
    let start_iter: u64 = job
        .load_checkpoint("iteration")
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if !first_launch {
        eprintln!("blox-toy-job: resumed at iteration {start_iter}");
    }
    let t0 = Instant::now();
    let mut done = start_iter;
    let mut it = job.iterate(start_iter..total);
    for i in &mut it {
        // Sleep to the iteration's deadline, so time does not drift.
        let due = t0 + Duration::from_secs_f64((i + 1 - start_iter) as f64 * step);
        if let Some(left) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(left);
        }
        done = i + 1;
        if let Some(f) = fail_at {
            if first_launch && done as f64 >= f * total as f64 {
                eprintln!("blox-toy-job: failing on purpose at iteration {done}");
                std::process::exit(3);
            }
        }
        if done % every == 0 {
            let _ = job.save_checkpoint("iteration", done.to_string().as_bytes());
        }
        if done % 10 == 0 || done == total {
            let _ = job.push_metric("progress", done as f64 / total as f64);
            let _ = job.push_metric("iteration", done as f64);
        }
    }
    let revoked = it.revoked();
    if let Err(e) = job.save_checkpoint("iteration", done.to_string().as_bytes()) {
        eprintln!("blox-toy-job: {e}");
        std::process::exit(1);
    }
    let _ = job.push_metric("progress", done as f64 / total as f64);
    if revoked {
        eprintln!("blox-toy-job: lease revoked; checkpointed at iteration {done}");
    }
    if !revoked && done >= total {
        if let Err(e) = job.finish() {
            eprintln!("blox-toy-job: {e}");
            std::process::exit(1);
        }
    }
}
