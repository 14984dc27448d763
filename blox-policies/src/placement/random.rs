//! Random-Sticky and Random-Non-Sticky, baselines of the PAL artifact
//! (`hal-uw/blox-pal`, branch `artifact`, `placement/random_sticky.py`,
//! `placement/random_nonsticky.py`): a job gets `n` GPUs sampled uniformly
//! from the free ones (`random.sample` over them in id order). Sticky:
//! running jobs keep theirs, with Blox's priority walk (preemption from the
//! bottom, no backfill); non-sticky: every job is placed afresh each round.
//!
//! The draws are CPython's ([`super::py_random`]), so that a run can match
//! the artifact's: it samples from the interpreter's global generator,
//! which its cluster state seeded 42 and then drew from once per GPU and
//! class for the GPUs' factors. Parameters: `seed` (42), `skip_per_gpu`
//! (the lengths of the sequences drawn from once per GPU before placing;
//! `[1403, 1095, 1095, 880]` for the artifact's profiles; default none).

use super::class_walk::non_sticky_walk;
use super::py_random::PyRandom;
use blox_core::walk::{priority_walk, WalkParams};
use blox_core::*;
use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    #[serde(default = "d_seed")]
    seed: u64,
    #[serde(default)]
    skip_per_gpu: Vec<u32>,
}

fn d_seed() -> u64 {
    42
}

/// Uniformly sampled GPUs.
#[derive(Clone, Debug)]
pub struct RandomPlacement {
    sticky: bool,
    seed: u64,
    skip_per_gpu: Vec<u32>,
    rng: Option<PyRandom>,
}

impl RandomPlacement {
    fn rng(&mut self, cluster: &ClusterState) -> &mut PyRandom {
        let (seed, skip) = (self.seed, &self.skip_per_gpu);
        self.rng.get_or_insert_with(|| {
            let mut r = PyRandom::new(seed);
            for _ in 0..cluster.num_gpus() {
                for n in skip {
                    r.below(*n);
                }
            }
            r
        })
    }
}

impl PlacementPolicy for RandomPlacement {
    fn fork(&self) -> Fork<dyn PlacementPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn place(
        &mut self,
        _round: &RoundInfo,
        schedule: &Schedule,
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> Placement {
        let sticky = self.sticky;
        let rng = self.rng(cluster);
        if sticky {
            priority_walk(
                &WalkParams::default(),
                schedule,
                jobs,
                cluster,
                |free, _, n| {
                    let pool: Vec<GpuId> = free.iter().collect();
                    Some(rng.sample(&pool, n as usize))
                },
            )
        } else {
            non_sticky_walk(schedule, jobs, cluster, false, |_, free, n| {
                (free.len() >= n).then(|| rng.sample(free, n))
            })
        }
    }
}

fn build(p: &Section, sticky: bool) -> Result<Box<dyn PlacementPolicy>, ConfigError> {
    let params: Params = p.parse()?;
    if let Some(i) = params.skip_per_gpu.iter().position(|n| *n == 0) {
        return Err(p.error_at(
            "skip_per_gpu",
            format!("skip_per_gpu[{i}] = 0: a draw needs a sequence of at least 1"),
        ));
    }
    Ok(Box::new(RandomPlacement {
        sticky,
        seed: params.seed,
        skip_per_gpu: params.skip_per_gpu,
        rng: None,
    }))
}

blox_core::register_placement!(
    "random-sticky",
    "uniformly sampled free GPUs (CPython's generator), running jobs keep theirs (the PAL artifact's Random-Sticky baseline)",
    |p| build(p, true)
);

blox_core::register_placement!(
    "random-non-sticky",
    "uniformly sampled free GPUs (CPython's generator), every job placed afresh each round (the PAL artifact's Random-Non-Sticky baseline)",
    |p| build(p, false)
);
