//! How often jobs that name no interval save: a fixed interval (`fixed`,
//! the default: `[run] checkpoint_interval_s`, or only when stopped), or
//! Young and Daly's for the job's size and the failures seen so far
//! (`young-daly`: √(2δM) + δ, δ what one checkpoint costs the job, M its
//! mean time to failure; Young, CACM 1974; Daly, FGCS 2006).

use super::{no_keys, Checkpointing};
use crate::config::{ConfigError, RunConfig};
use crate::health::{Health, LLAMA3_GPU_MTBF_H};
use crate::job::Job;
use crate::metric::{CHECKPOINT_INTERVAL_S, CHECKPOINT_SAVE_S};

/// `[run] checkpoint_interval_s` and `checkpoint_save_s` for jobs that name
/// none.
#[derive(Clone, Copy, Debug, Default)]
pub struct FixedCheckpoints {
    /// Seconds one checkpoint stalls a job that names no cost of its own.
    pub save_s: Option<f64>,
    /// The interval of jobs that name none (`None`: they save when stopped).
    pub interval_s: Option<f64>,
}

/// Young/Daly's interval, chosen at each launch.
#[derive(Clone, Copy, Debug)]
pub struct YoungDaly {
    /// Seconds one checkpoint stalls a job that names no cost of its own.
    pub save_s: Option<f64>,
    /// The per-GPU MTBF assumed before any failure is seen, seconds.
    pub prior_s: f64,
}

crate::register_checkpointing!(
    "fixed",
    "jobs that name no interval save every [run] checkpoint_interval_s (unset: when stopped)",
    |params, run| {
        no_keys(params, "fixed")?;
        Ok(Box::new(FixedCheckpoints {
            save_s: save_s(run),
            interval_s: run.checkpoint_interval_s.map(|v| v.get()),
        }))
    }
);

crate::register_checkpointing!(
    "young-daly",
    "jobs that name no interval save every sqrt(2 x save x MTTF) + save, chosen at each launch",
    |params, run| {
        no_keys(params, "young-daly")?;
        young_daly(params, run).map(|y| Box::new(y) as Box<dyn Checkpointing>)
    }
);

fn save_s(run: &RunConfig) -> Option<f64> {
    run.checkpoint_save_s.map(|v| v.get()).filter(|v| *v > 0.0)
}

fn young_daly(params: &crate::config::Section, run: &RunConfig) -> Result<YoungDaly, ConfigError> {
    if run.checkpoint_interval_s.is_some() {
        return Err(params.error_at(
            "policy",
            "`young-daly` chooses each job's interval: leave out [run] checkpoint_interval_s",
        ));
    }
    let Some(save_s) = save_s(run) else {
        return Err(params.error_at(
            "policy",
            "`young-daly` weighs what a checkpoint costs: set [run] checkpoint_save_s \
             (seconds a job stalls to save, > 0)",
        ));
    };
    Ok(YoungDaly {
        save_s: Some(save_s),
        prior_s: run
            .checkpoint_gpu_mtbf_h
            .map_or(LLAMA3_GPU_MTBF_H, |v| v.get())
            * 3600.0,
    })
}

/// The run's checkpoint cost and interval for a job that names none.
fn defaults(job: &mut Job, save_s: Option<f64>, interval_s: Option<f64>) {
    let m = &mut job.spec.metrics;
    if let Some(save) = save_s {
        m.entry(CHECKPOINT_SAVE_S.to_string()).or_insert(save);
    }
    if let Some(every) = interval_s {
        m.entry(CHECKPOINT_INTERVAL_S.to_string()).or_insert(every);
    }
}

impl Checkpointing for FixedCheckpoints {
    fn name(&self) -> &str {
        "fixed"
    }

    fn at_submission(&self, job: &mut Job) {
        defaults(job, self.save_s, self.interval_s);
    }

    fn at_launch(&self, _: &Job, _: usize, _: &Health) -> Option<f64> {
        None
    }
}

impl Checkpointing for YoungDaly {
    fn name(&self) -> &str {
        "young-daly"
    }

    fn at_submission(&self, job: &mut Job) {
        defaults(job, self.save_s, None);
        if !job.spec.metrics.contains_key(CHECKPOINT_INTERVAL_S) {
            job.auto_checkpoint = true;
        }
    }

    /// √(2δM) + δ: δ what a checkpoint costs the job, M the per-GPU MTBF
    /// estimated so far over its `gpus` (independent GPUs in series).
    fn at_launch(&self, job: &Job, gpus: usize, health: &Health) -> Option<f64> {
        let save = job
            .spec
            .metrics
            .get(CHECKPOINT_SAVE_S)
            .copied()
            .filter(|v| *v > 0.0)?;
        let mttf_s = health.gpu_mtbf_s(self.prior_s) / gpus.max(1) as f64;
        Some((2.0 * save * mttf_s).sqrt() + save)
    }
}
