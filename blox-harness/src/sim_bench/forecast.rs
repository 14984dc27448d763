//! `blox bench forecast`: one `blox status --start` forecast with 10,000
//! jobs queued (the bar: ≤ 1 s on 2 cores) on 1,024 GPUs (128 × 8)
//! under FIFO, LAS, SRTF and Tiresias: the state after the first round of
//! a burst of 10,000 jobs (1, 2, 4 or 8 GPUs; 2 min to 8 h, log-uniform;
//! fixed seed), forecast with the default reach (`max_wall_s = 1`) and
//! without a wall-clock bound (until every job finished), `repeat` times.

use super::{Out, Result};
use blox_config::Config;
use blox_core::*;
use blox_forecast::Forecaster;
use blox_sim::forecast::SimForecaster;
use blox_sim::{SimConfig, SimJob, Simulation};
use rand::{Rng, SeedableRng};
use std::time::Instant;

const JOBS: u64 = 10_000;

fn jobs() -> Vec<SimJob> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    (0..JOBS)
        .map(|i| {
            let gpus = [1, 1, 1, 2, 2, 4, 8][rng.random_range(0..7)];
            let d = (120f64.ln() + rng.random::<f64>() * (8.0 * 3600.0f64 / 120.0).ln()).exp();
            SimJob::of_duration(JobSpec::new(i, 0.0, gpus).with_duration(d), d)
        })
        .collect()
}

pub(super) fn forecast(repeat: usize, out: Out) -> Result<()> {
    for policy in ["fifo", "las", "srtf", "tiresias"] {
        for (reach, extra) in [
            ("default reach", ""),
            (
                "to the end",
                "max_wall_s = 600\nmax_rounds = 1000000\nhorizon_s = 1e9\n",
            ),
        ] {
            let text = format!(
                "[run]\nround_s = 60\n[cluster]\nnodes = 128\ngpus_per_node = 8\n\
                 [scheduling]\npolicy = \"{policy}\"\n[placement]\npolicy = \"first-free\"\n\
                 [forecast]\n{extra}"
            );
            let cfg = Config::parse(&text, "bench-forecast.toml", std::path::Path::new("."), &[])?;
            let sim = SimConfig::from_section(&cfg.section("sim"))?;
            let fc = SimForecaster::from_config(&cfg, &sim)?
                .ok_or_else(|| super::BenchError::Setup("forecast disabled".into()))?;
            let policies =
                registry::build_policies(&cfg.admission, &cfg.scheduling, &cfg.placement)?;
            let mut s =
                Simulation::new(policies, cfg.cluster_state()?, cfg.run.clone(), sim, jobs())?;
            s.step()?;
            let t = Instant::now();
            let snap = s.snapshot();
            let snap_s = t.elapsed().as_secs_f64();
            let mut best = f64::INFINITY;
            let mut last = None;
            for _ in 0..repeat.max(1) {
                let t = Instant::now();
                let f = fc
                    .forecast(&snap)
                    .map_err(|e| super::BenchError::Setup(e.to_string()))?;
                best = best.min(t.elapsed().as_secs_f64());
                last = Some(f);
            }
            let f = last.expect("ran once");
            let started = f.predictions.iter().filter(|p| p.start_s.is_some()).count();
            let finished = f
                .predictions
                .iter()
                .filter(|p| p.finish_s.is_some())
                .count();
            let waiting = snap
                .jobs
                .active()
                .chain(&snap.waiting)
                .filter(|j| !j.is_running())
                .count();
            out(format!(
                "forecast {policy:<8} {reach:<13}: {:.3} s (snapshot {:.1} ms), {waiting} queued, \
                 {} rounds to {:.1} h ahead, {started} starts and {finished} finishes predicted ({})",
                best,
                snap_s * 1000.0,
                f.rounds,
                (f.reached_s - f.made_at_s) / 3600.0,
                f.stopped
            ));
        }
    }
    Ok(())
}
