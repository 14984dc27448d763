//! `[sim]`: the simulator's settings, checked when read.

use serde::Deserialize;

/// `[sim]`: simulator settings.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// Blox compatibility: credit whole rounds and stamp completions (and, in the
    /// reports, first starts) at round boundaries.
    #[serde(default)]
    pub round_quantized: bool,
    /// Seconds between a job's first launch and its first progress.
    #[serde(default)]
    pub launch_overhead_s: f64,
    /// Seconds lost on every relaunch after a preemption or re-allocation
    /// (checkpoint restore; Pollux's artifact uses 30 s).
    #[serde(default)]
    pub restart_overhead_s: f64,
    /// The first round runs at `round_s`, not at 0: jobs are first seen one
    /// interval in, as in the Pollux artifact's simulator (§7.1).
    #[serde(default)]
    pub start_after_first_round: bool,
    /// Injected interference (Pollux Fig. 9): a distributed job touching a node
    /// that hosts two or more distributed jobs runs this fraction slower for the
    /// round (`pollux-data.md` §7.4). Profile-driven jobs only.
    #[serde(default)]
    pub interference: f64,
    /// Cost, seconds, of an elastic change: a running job moved to other GPUs
    /// within a round, or its batch size changed in place. ONES scales jobs in
    /// the background in about 1 s instead of a checkpoint restart (ONES §3.3.1,
    /// §4.3, Fig. 16). Unset: a move costs `restart_overhead_s` like any
    /// restart, and an in-place batch change costs nothing.
    #[serde(default)]
    pub elastic_overhead_s: Option<f64>,
    /// Duration-based jobs have no epochs or samples; for policies that read
    /// them (ONES) they report an epoch every `epoch_s` seconds of work at the
    /// requested GPU count, one sample per GPU-second of work, and throughput
    /// linear in GPUs (the duration model's speedup).
    #[serde(default = "d_epoch_s")]
    pub epoch_s: f64,
    /// Relative speed of each GPU type (heterogeneous clusters, Gavel): a job
    /// runs at the speed of the slowest GPU it holds. Types not listed: 1.
    #[serde(default)]
    pub type_speed: std::collections::BTreeMap<String, f64>,
    /// Start-up of every launch (imports, initialisation, restore before the
    /// first iteration), seconds, by model; overrides `launch_overhead_s`
    /// and `restart_overhead_s` for jobs of that model. A trace's own
    /// `startup_s` column overrides both.
    #[serde(default)]
    pub model_startup_s: std::collections::BTreeMap<String, f64>,
    /// Per-model speeds by GPU type, overriding `type_speed` for that model.
    #[serde(default)]
    pub model_type_speed:
        std::collections::BTreeMap<String, std::collections::BTreeMap<String, f64>>,
    /// Per-GPU-type profiles: each job's agent fits one throughput model over
    /// every GPU type it ran on, as the Sia artifact's heterogeneity-unaware
    /// jobs do, instead of one model per type.
    #[serde(default)]
    pub merge_type_fits: bool,
    /// A job whose GPUs span more than one node runs this many times
    /// slower (the PAL artifact's constant inter-node locality penalty,
    /// `--locality-penalty`, 1.7 there; PAL SC'24 Fig. 12 sweeps 1.0-3.0).
    /// 1: no penalty.
    #[serde(default = "d_locality_penalty")]
    pub locality_penalty: f64,
    /// The most memory a run may need, GiB: a workload whose estimate
    /// (`crate::memory`) is larger is refused before it is drawn or run.
    /// Unset: what this machine has available (`MemAvailable`, or the
    /// cgroup's limit when lower).
    #[serde(default)]
    pub memory_limit_gb: Option<f64>,
}

fn d_locality_penalty() -> f64 {
    1.0
}

impl SimConfig {
    /// Reads and checks `[sim]`: overheads are non-negative seconds, speeds
    /// positive (a speed of 0 would never finish a job), interference a
    /// fraction below 1.
    pub fn from_section(s: &blox_core::Section) -> Result<Self, blox_core::ConfigError> {
        let c: SimConfig = s.parse()?;
        let non_negative = |key: &str, v: f64| {
            if v >= 0.0 && v.is_finite() {
                Ok(())
            } else {
                Err(s.error_at(
                    key,
                    format!("`{key}` must be a non-negative number of seconds"),
                ))
            }
        };
        non_negative("launch_overhead_s", c.launch_overhead_s)?;
        non_negative("restart_overhead_s", c.restart_overhead_s)?;
        if let Some(e) = c.elastic_overhead_s {
            non_negative("elastic_overhead_s", e)?;
        }
        if !(c.epoch_s > 0.0 && c.epoch_s.is_finite()) {
            return Err(s.error_at("epoch_s", "`epoch_s` must be a positive number of seconds"));
        }
        if let Some(m) = c.memory_limit_gb {
            if !(m > 0.0 && m.is_finite()) {
                return Err(s.error_at(
                    "memory_limit_gb",
                    "`memory_limit_gb` must be a positive number of GiB",
                ));
            }
        }
        if !(0.0..1.0).contains(&c.interference) {
            return Err(s.error_at(
                "interference",
                "`interference` must be a fraction in [0, 1)",
            ));
        }
        if !(c.locality_penalty >= 1.0 && c.locality_penalty.is_finite()) {
            return Err(s.error_at(
                "locality_penalty",
                "`locality_penalty` must be a finite factor of at least 1 (1: no penalty)",
            ));
        }
        for (m, v) in &c.model_startup_s {
            non_negative(&format!("model_startup_s.{m}"), *v)?;
        }
        for (t, v) in &c.type_speed {
            if !(*v > 0.0 && v.is_finite()) {
                return Err(s.error_at(
                    &format!("type_speed.{t}"),
                    format!("the speed of `{t}` must be positive (a job there would never finish)"),
                ));
            }
        }
        for (m, types) in &c.model_type_speed {
            for (t, v) in types {
                if !(*v > 0.0 && v.is_finite()) {
                    return Err(s.error_at(
                        &format!("model_type_speed.{m}.{t}"),
                        format!(
                            "the speed of `{m}` on `{t}` must be positive (it would never finish)"
                        ),
                    ));
                }
            }
        }
        Ok(c)
    }

    /// Relative speed of `model` on `gpu_type`.
    pub fn speed(&self, model: Option<&str>, gpu_type: &str) -> f64 {
        model
            .and_then(|m| self.model_type_speed.get(m))
            .and_then(|t| t.get(gpu_type))
            .or_else(|| self.type_speed.get(gpu_type))
            .copied()
            .unwrap_or(1.0)
    }

    /// Every GPU type the speed tables name.
    pub(super) fn speed_types(&self) -> std::collections::BTreeSet<&str> {
        self.type_speed
            .keys()
            .chain(self.model_type_speed.values().flat_map(|t| t.keys()))
            .map(|s| s.as_str())
            .collect()
    }
}

fn d_epoch_s() -> f64 {
    600.0
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            memory_limit_gb: None,
            round_quantized: false,
            launch_overhead_s: 0.0,
            restart_overhead_s: 0.0,
            start_after_first_round: false,
            interference: 0.0,
            elastic_overhead_s: None,
            epoch_s: d_epoch_s(),
            type_speed: Default::default(),
            model_startup_s: Default::default(),
            model_type_speed: Default::default(),
            merge_type_fits: false,
            locality_penalty: 1.0,
        }
    }
}
