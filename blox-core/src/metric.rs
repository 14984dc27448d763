//! The names of job metrics: the contract between what sets them (the
//! simulator's backend, a real job through `blox_client`) and the policies
//! that read them. A policy declares the ones it reads
//! ([`crate::SchedulingPolicy::metrics_read`]); `docs/RUNTIME.md` lists what
//! a real job must push for each policy.
//!
//! Values are plain `f64`s in a job's [`crate::MetricStore`] entry. Keys not
//! listed here are allowed (a job may push anything a policy of its own reads).

/// Samples per second the job processes at its current allocation.
pub const THROUGHPUT: &str = "throughput";
/// Training loss, the latest value.
pub const LOSS: &str = "loss";
/// The loss at which `loss-termination` ends the job.
pub const LOSS_TARGET: &str = "loss_target";
/// Fraction of the job's work done, 0 to 1 (a real job's progress; the
/// runtime folds it into the job's attained work).
pub const PROGRESS: &str = "progress";
/// The global batch size the job runs with.
pub const BATCH_SIZE: &str = "batch_size";
/// Iterations done (a real job's counter).
pub const ITERATION: &str = "iteration";
/// Seconds per iteration, the latest.
pub const ITERATION_TIME_S: &str = "iteration_time_s";
/// The gradient noise scale (Pollux's statistical efficiency input).
pub const GNS: &str = "gns";

/// Epochs done, fractional.
pub const EPOCHS_DONE: &str = "epochs_done";
/// The epoch the job is in, from 0.
pub const EPOCH: &str = "epoch";
/// Samples in one epoch.
pub const EPOCH_SIZE: &str = "epoch_size";
/// Samples processed since the job started.
pub const SAMPLES_PROCESSED: &str = "samples_processed";
/// Work done in the profile's units (the doubling heuristic's progress).
pub const PROGRESS_UNITS: &str = "progress_units";
/// The validation metric at the last epoch's end (ONES's convergence
/// predictor).
pub const VAL_METRIC: &str = "val_metric";
/// The largest global batch size the job accepts.
pub const MAX_BATCH_SIZE: &str = "max_batch_size";
/// The largest batch one GPU holds.
pub const MAX_LOCAL_BATCH_SIZE: &str = "max_local_batch_size";
/// Learning-rate scale of the current batch over the initial one.
pub const LR_SCALE: &str = "lr_scale";
/// Batch per GPU per step (Pollux's atomic batch).
pub const ATOMIC_BSZ: &str = "atomic_bsz";
/// Gradient accumulation steps per update.
pub const ACCUM_STEPS: &str = "accum_steps";

/// Seconds between the checkpoints a job saves past its first iteration (a
/// job's own; `[run] checkpoint_interval_s` otherwise). A stop loses the
/// work since the last one ([`crate::Job::uncheckpointed_s`]).
pub const CHECKPOINT_INTERVAL_S: &str = "checkpoint_interval_s";
/// Seconds one checkpoint stalls the job (`[run] checkpoint_save_s`).
pub const CHECKPOINT_SAVE_S: &str = "checkpoint_save_s";

/// CPUs per GPU at which the job runs fastest (Synergy's profile).
pub const BEST_CPUS_PER_GPU: &str = "best_cpus_per_gpu";
/// Host memory (GB) per GPU at which the job runs fastest.
pub const BEST_MEM_GB_PER_GPU: &str = "best_mem_gb_per_gpu";
/// The job's speed-up at its best host share over the proportional one.
pub const BEST_HOST_SPEEDUP: &str = "best_host_speedup";

/// The family of a Pollux goodput agent's report (`pollux.m0`,
/// `pollux.grad_sqr`, `pollux.<gpu type>.alpha_c`, …: `blox_goodput`'s
/// `AgentReport`), as [`crate::SchedulingPolicy::metrics_read`] names it.
pub const POLLUX_AGENT: &str = "pollux.*";
/// The family of per-GPU-type relative speeds (`speed.<gpu type>`) Gavel
/// reads.
pub const SPEED_PER_TYPE: &str = "speed.*";

/// The progress metrics a simulator computes for every running job every
/// round. A backend may leave them out of the store while none of the
/// loop's policies names any of them in its `metrics_read()`
/// ([`crate::MetricStore::withhold`]): publishing them costs a store write
/// per running job per round, the largest part of a replay's time. A policy
/// that reads one without declaring it then stops the run with an error
/// saying so, rather than reading nothing.
pub const PER_ROUND: &[&str] = &[
    SAMPLES_PROCESSED,
    EPOCHS_DONE,
    THROUGHPUT,
    LOSS,
    LOSS_TARGET,
];

/// Whether `key` is `name`, or belongs to the family `name` (`prefix.*`).
///
/// ```
/// use blox_core::metric::{covers, POLLUX_AGENT, LOSS};
/// assert!(covers(POLLUX_AGENT, "pollux.V100.alpha_c"));
/// assert!(covers(LOSS, "loss") && !covers(LOSS, "loss_target"));
/// ```
pub fn covers(name: &str, key: &str) -> bool {
    match name.strip_suffix('*') {
        Some(prefix) => key.starts_with(prefix),
        None => name == key,
    }
}
