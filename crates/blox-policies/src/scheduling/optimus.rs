//! Optimus+Oracle (Optimus, EuroSys'18, §4–5), as the Pollux artifact configures
//! it as a baseline (Pollux, OSDI'21, §5.1; `pollux-data.md` §8.2).
//!
//! Every job keeps its tuned batch size; Optimus chooses only GPU counts. Each
//! active job (in submission order) first gets one GPU while GPUs last; then
//! GPUs go one at a time to the job whose remaining time drops most from one
//! more GPU, `gain = (T(k) − T(k+1)) · R`, until no gain is positive. As the
//! "Oracle" variant, `T(k)` is the *true* iteration time from the measured
//! profiles (replicas packed 4 per node) and `R` the true remaining iterations
//! at the job's batch size, from its current epoch (reported by the job as the
//! `epoch` metric). Pair with `most-free` placement, `order = "fewest-gpus-first"`.

use blox_core::*;
use blox_goodput::{AppProfile, ProfileCache};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Parameters: `traces_dir` — the per-application profiles (relative to the
/// config file); `gpus_per_node` — packing used for predictions.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimusParams {
    pub traces_dir: PathBuf,
    #[serde(default = "four")]
    pub gpus_per_node: u32,
}

fn four() -> u32 {
    4
}

pub struct Optimus {
    params: OptimusParams,
    cache: ProfileCache,
    /// Predicted iteration time by (app, batch, GPUs).
    memo: HashMap<(String, u32, u32), Option<f64>>,
}

impl Optimus {
    fn profile(&mut self, app: &str) -> Option<Arc<AppProfile>> {
        match self.cache.get(app) {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!("optimus: no profile for `{app}`: {e}; the job gets one GPU");
                None
            }
        }
    }

    /// Predicted time per iteration on `k` GPUs at global batch `m`
    /// (pollux-data.md §8.2: the fixed-batch rule, at least one accumulation
    /// step on a single GPU).
    fn t_pred(&mut self, p: &AppProfile, m: u32, k: u32) -> Option<f64> {
        let key = (p.app.clone(), m, k);
        if let Some(v) = self.memo.get(&key) {
            return *v;
        }
        let g = self.params.gpus_per_node;
        let mut per_node = vec![g; (k / g) as usize];
        if k % g != 0 {
            per_node.push(k % g);
        }
        let c = p.limits.fixed_batch_accumulating_alone(k, m as f64);
        let (b, s) = (c.atomic as f64, c.accum as f64);
        let t = p
            .step_time(&per_node, b)
            .map(|(step, sync)| step + s * (step - sync));
        self.memo.insert(key, t);
        t
    }
}

impl SchedulingPolicy for Optimus {
    fn schedule(
        &mut self,
        _round: &RoundInfo,
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> Schedule {
        let mut order: Vec<&Job> = jobs.runnable().collect();
        order.sort_by(|a, b| {
            a.arrival_s()
                .total_cmp(&b.arrival_s())
                .then(a.id().cmp(&b.id()))
        });
        let mut free = cluster.num_gpus();
        let mut alloc: Vec<u32> = Vec::with_capacity(order.len());
        for _ in &order {
            let g = u32::from(free > 0);
            free -= g;
            alloc.push(g);
        }
        // Per job: profile, batch, max GPUs, remaining iterations.
        let info: Vec<Option<(Arc<AppProfile>, u32, u32, f64)>> = order
            .iter()
            .map(|j| {
                let app = j.spec.model.as_deref()?;
                let p = self.profile(app)?;
                let m = j.spec.batch_size.unwrap_or(p.limits.m0);
                let max = if app == "ncf" {
                    1
                } else {
                    (m / p.limits.bmin).max(1)
                };
                let epoch = jobs.metrics().get(j.id(), "epoch").unwrap_or(0.0) as usize;
                let last = p.max_epochs - 1;
                let remaining = if epoch >= last {
                    1.0
                } else {
                    p.iterations(m as f64, last) - p.iterations(m as f64, epoch)
                };
                Some((p, m, max, remaining))
            })
            .collect();
        while free > 0 {
            let mut best: Option<(usize, f64)> = None;
            for (i, inf) in info.iter().enumerate() {
                let Some((p, m, max, rem)) = inf else {
                    continue;
                };
                let k = alloc[i];
                if k == 0 || k + 1 > *max {
                    continue;
                }
                let (a, b) = (self.t_pred(p, *m, k), self.t_pred(p, *m, k + 1));
                let gain = match (a, b) {
                    (Some(a), Some(b)) => (a - b) * rem,
                    _ => 0.0,
                };
                if gain > 0.0 && best.is_none_or(|(_, g)| gain > g) {
                    best = Some((i, gain));
                }
            }
            let Some((i, _)) = best else { break };
            alloc[i] += 1;
            free -= 1;
        }
        Schedule {
            desired_nodes: None,
            terminate: Vec::new(),
            entries: order
                .iter()
                .zip(alloc)
                .filter(|(_, k)| *k > 0)
                .map(|(j, k)| Demand {
                    job: j.id(),
                    gpus: k,
                    batch_size: None,
                    gpu_ids: None,
                })
                .collect(),
        }
    }
}

blox_core::register_scheduling!(
    "optimus",
    "Optimus+Oracle: GPUs by marginal reduction of remaining time, from true profiles (Optimus §5; Pollux artifact baseline)",
    |p| {
        let params = p.parse::<OptimusParams>()?;
        let dir = p.resolve_path(&params.traces_dir);
        if !dir.is_dir() {
            return Err(p.error_at("traces_dir", format!("{} is not a folder of application profiles", dir.display())));
        }
        Ok(Box::new(Optimus { cache: ProfileCache::new(&dir), params, memo: HashMap::new() }))
    }
);
