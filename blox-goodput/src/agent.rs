//! The PolluxAgent (Pollux, OSDI'21, §4.1): runs inside each training job.
//!
//! It keeps a profile of every configuration `(nodes, replicas, atomic batch)`
//! the job has run at (the first measured step times for each), refits θ_sys
//! whenever a new configuration appears, records the gradient statistics of the
//! current epoch, and picks the batch size and accumulation steps with the best
//! goodput for the allocation it is given (`pollux-data.md` §5, §6.6). What the
//! scheduler needs from it travels as job metrics ([`AgentReport`]), the same in
//! simulation and on a real cluster.

use crate::fit::{fit_throughput_with, Observation};
use crate::model::{
    AppLimits, BatchConfig, BatchSearch, GoodputModel, GradStats, ThroughputParams,
};
use std::collections::BTreeMap;

/// The job-side tuner of one job.
#[derive(Clone, Debug)]
pub struct PolluxAgent {
    pub limits: AppLimits,
    /// A global batch the job never adapts away from (the artifact pins ncf at
    /// 32768, `pollux-data.md` §6.1).
    pub fixed_batch: Option<u32>,
    /// Most replicas the job can use (ncf: 1).
    pub replica_cap: Option<u32>,
    pub search: BatchSearch,
    /// The throughput fit's optimiser settings (scipy's defaults, as the
    /// Pollux artifact; the Sia artifact's `tol = 1e-5`:
    /// [`crate::fit::Settings::sia_artifact`]).
    pub fit: crate::fit::Settings,
    profile: BTreeMap<(u32, u32, u32), (f64, f64)>,
    params: Option<ThroughputParams>,
    grad: Option<GradStats>,
    fits: u32,
    /// The GPU type the job runs on ("" until told: one model for all GPUs).
    gpu_type: String,
    /// The profile, fit and limits of every other type it has run on
    /// (heterogeneous clusters, Sia §3.2: one throughput model per type).
    other_types: BTreeMap<String, TypeFit>,
}

/// What the agent knows of one GPU type.
#[derive(Clone, Debug, Default)]
struct TypeFit {
    profile: BTreeMap<(u32, u32, u32), (f64, f64)>,
    params: Option<ThroughputParams>,
}

impl PolluxAgent {
    pub fn new(limits: AppLimits) -> Self {
        PolluxAgent {
            limits,
            fixed_batch: None,
            replica_cap: None,
            search: BatchSearch::Grid50,
            fit: crate::fit::Settings::default(),
            profile: BTreeMap::new(),
            params: None,
            grad: None,
            fits: 0,
            gpu_type: String::new(),
            other_types: BTreeMap::new(),
        }
    }

    /// The job now runs on `gpu_type`, whose atomic batch limits are `limits`:
    /// observations and batch choices use that type's own profile and fit
    /// from now on (a type it ran on before gets its fit back).
    pub fn set_gpu_type(&mut self, gpu_type: &str, limits: AppLimits) {
        if gpu_type != self.gpu_type {
            let old = TypeFit {
                profile: std::mem::take(&mut self.profile),
                params: self.params.take(),
            };
            let prev = std::mem::replace(&mut self.gpu_type, gpu_type.to_string());
            if !prev.is_empty() || !old.profile.is_empty() {
                self.other_types.insert(prev, old);
            }
            let back = self.other_types.remove(gpu_type).unwrap_or_default();
            self.profile = back.profile;
            self.params = back.params;
        }
        self.limits = limits;
    }

    /// The type set by [`Self::set_gpu_type`] ("" if never set).
    pub fn gpu_type(&self) -> &str {
        &self.gpu_type
    }

    /// Per-type fits as `pollux.<type>.*` job metrics (θ_sys and the largest
    /// replica count profiled there), for every type the job has run on;
    /// empty until a type is set.
    pub fn typed_metrics(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        if self.gpu_type.is_empty() {
            return out;
        }
        let current = (self.gpu_type.as_str(), &self.profile, &self.params);
        let others = self
            .other_types
            .iter()
            .filter(|(t, _)| !t.is_empty())
            .map(|(t, f)| (t.as_str(), &f.profile, &f.params));
        for (t, profile, params) in std::iter::once(current).chain(others) {
            let r = profile.keys().map(|k| k.1).max().unwrap_or(0);
            out.push((format!("pollux.{t}.max_profiled_replicas"), r as f64));
            if let Some(p) = params {
                for (k, v) in PARAM_NAMES.iter().zip(p.to_array()) {
                    out.push((format!("pollux.{t}.{k}"), v));
                }
            }
        }
        out
    }

    /// Records a measured step at `n` nodes, `r` replicas and atomic batch `b`.
    /// The first measurement of a configuration is kept; a new configuration
    /// triggers a refit. Returns whether the model was refitted.
    pub fn observe(&mut self, n: u32, r: u32, b: u32, step_time: f64, sync_time: f64) -> bool {
        if self.profile.contains_key(&(n, r, b)) {
            return false;
        }
        self.profile.insert((n, r, b), (step_time, sync_time));
        let obs: Vec<Observation> = self
            .profile
            .iter()
            .map(|(&(n, r, b), &(step, sync))| Observation {
                nodes: n,
                replicas: r,
                atomic_bsz: b as f64,
                compute_time: step - sync,
                step_time: step,
            })
            .collect();
        self.params = fit_throughput_with(&obs, self.fit);
        self.fits += 1;
        true
    }

    /// Records the gradient statistics of the current epoch and batch size.
    pub fn record_grad(&mut self, grad: GradStats) {
        self.grad = Some(grad);
    }

    /// The gradient statistics last recorded.
    pub fn grad(&self) -> Option<GradStats> {
        self.grad
    }

    pub fn params(&self) -> Option<ThroughputParams> {
        self.params
    }

    /// Number of refits so far.
    pub fn fits(&self) -> u32 {
        self.fits
    }

    /// Largest replica count in the profile (0 before the first step).
    pub fn max_profiled_replicas(&self) -> u32 {
        self.profile.keys().map(|k| k.1).max().unwrap_or(0)
    }

    /// The batch configuration for `r` replicas on `n` nodes (`pollux-data.md`
    /// §6.6): the fixed batch if pinned; before any measurement the smallest
    /// batch the replicas can run; otherwise the goodput-optimal one.
    pub fn choose(&self, n: u32, r: u32) -> BatchConfig {
        let r = r.max(1);
        if let Some(m) = self.fixed_batch {
            return self.limits.fixed_batch(r, m as f64);
        }
        match (self.params, self.grad) {
            (Some(params), Some(grad)) => {
                let model = GoodputModel {
                    params,
                    grad,
                    limits: self.limits,
                };
                self.limits.clamp(r, model.best(n, r, self.search).config)
            }
            _ => {
                let m = (self.limits.m0 as f64).max(self.limits.bmin as f64 * r as f64);
                self.limits.fixed_batch(r, m)
            }
        }
    }

    /// What the scheduler needs to know, as a value.
    pub fn report(&self) -> AgentReport {
        AgentReport {
            limits: self.limits,
            params: self.params,
            grad: self.grad,
            max_profiled_replicas: self.max_profiled_replicas(),
            replica_cap: self.replica_cap,
            fixed_batch: self.fixed_batch,
        }
    }
}

/// The agent's report to the scheduler.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AgentReport {
    pub limits: AppLimits,
    pub params: Option<ThroughputParams>,
    pub grad: Option<GradStats>,
    pub max_profiled_replicas: u32,
    pub replica_cap: Option<u32>,
    pub fixed_batch: Option<u32>,
}

const PARAM_NAMES: [&str; 7] = [
    "alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma",
];

/// The metric names of one GPU type's fit (`pollux.<type>.*`), formatted
/// once: a scheduler that reads them every round keeps one per type.
#[derive(Clone, Debug, PartialEq)]
pub struct TypedKeys {
    params: [String; 7],
    max_profiled: String,
}

impl TypedKeys {
    pub fn new(gpu_type: &str) -> Self {
        TypedKeys {
            params: PARAM_NAMES.map(|k| format!("pollux.{gpu_type}.{k}")),
            max_profiled: format!("pollux.{gpu_type}.max_profiled_replicas"),
        }
    }

    /// The name of the largest replica count profiled on the type.
    pub fn max_profiled(&self) -> &str {
        &self.max_profiled
    }

    /// The job's fit on the type ([`typed_fit`]).
    pub fn fit(&self, get: impl Fn(&str) -> Option<f64>) -> (Option<ThroughputParams>, u32) {
        let mut v = [0.0; 7];
        let mut all = true;
        for (x, k) in v.iter_mut().zip(&self.params) {
            match get(k) {
                Some(y) => *x = y,
                None => all = false,
            }
        }
        let params = all.then(|| ThroughputParams::from_array(v));
        let r = get(&self.max_profiled).unwrap_or(0.0);
        (params, r.max(0.0) as u32)
    }
}

/// A job's fit on one GPU type from its `pollux.<type>.*` metrics
/// ([`PolluxAgent::typed_metrics`]): θ_sys, if it has run there, and the
/// largest replica count profiled there (0 if never).
pub fn typed_fit(
    get: impl Fn(&str) -> Option<f64>,
    gpu_type: &str,
) -> (Option<ThroughputParams>, u32) {
    TypedKeys::new(gpu_type).fit(get)
}

/// The metric names of θ_sys, in [`ThroughputParams::to_array`] order.
pub const PARAM_KEYS: [&str; 7] = [
    "pollux.alpha_c",
    "pollux.beta_c",
    "pollux.alpha_n",
    "pollux.beta_n",
    "pollux.alpha_r",
    "pollux.beta_r",
    "pollux.gamma",
];

impl AgentReport {
    /// The goodput model, once the job has been measured.
    pub fn model(&self) -> Option<GoodputModel> {
        Some(GoodputModel {
            params: self.params?,
            grad: self.grad?,
            limits: self.limits,
        })
    }

    /// As `pollux.*` job metrics.
    pub fn to_metrics(&self) -> Vec<(&'static str, f64)> {
        let mut out = vec![
            ("pollux.m0", self.limits.m0 as f64),
            ("pollux.mmax", self.limits.mmax as f64),
            ("pollux.bmin", self.limits.bmin as f64),
            ("pollux.bmax", self.limits.bmax as f64),
            (
                "pollux.max_profiled_replicas",
                self.max_profiled_replicas as f64,
            ),
        ];
        if let Some(p) = self.params {
            out.extend(PARAM_KEYS.iter().copied().zip(p.to_array()));
        }
        if let Some(g) = self.grad {
            out.push(("pollux.grad_sqr", g.sqr));
            out.push(("pollux.grad_var", g.var));
        }
        if let Some(c) = self.replica_cap {
            out.push(("pollux.replica_cap", c as f64));
        }
        if let Some(m) = self.fixed_batch {
            out.push(("pollux.fixed_batch", m as f64));
        }
        out
    }

    /// Reads a report back from job metrics; `None` when the job runs no agent.
    pub fn from_metrics(get: impl Fn(&str) -> Option<f64>) -> Option<AgentReport> {
        let limits = AppLimits {
            m0: get("pollux.m0")? as u32,
            mmax: get("pollux.mmax")? as u32,
            bmin: get("pollux.bmin")? as u32,
            bmax: get("pollux.bmax")? as u32,
        };
        let params: Option<Vec<f64>> = PARAM_KEYS.iter().map(|k| get(k)).collect();
        let params = params.map(|v| ThroughputParams::from_array(std::array::from_fn(|i| v[i])));
        let grad = match (get("pollux.grad_sqr"), get("pollux.grad_var")) {
            (Some(sqr), Some(var)) => Some(GradStats { sqr, var }),
            _ => None,
        };
        Some(AgentReport {
            limits,
            params,
            grad,
            max_profiled_replicas: get("pollux.max_profiled_replicas").unwrap_or(0.0) as u32,
            replica_cap: get("pollux.replica_cap").map(|v| v as u32),
            fixed_batch: get("pollux.fixed_batch").map(|v| v as u32),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> AppLimits {
        AppLimits {
            m0: 128,
            mmax: 4096,
            bmin: 32,
            bmax: 1024,
        }
    }

    #[test]
    fn first_measurement_of_a_configuration_is_kept() {
        let mut a = PolluxAgent::new(limits());
        assert!(a.observe(1, 1, 128, 0.2, 0.01));
        assert!(!a.observe(1, 1, 128, 9.0, 0.01));
        assert_eq!(a.fits(), 1);
        assert!(a.observe(1, 2, 64, 0.2, 0.05));
        assert_eq!(a.max_profiled_replicas(), 2);
    }

    #[test]
    fn a_new_job_runs_the_smallest_batch_its_replicas_allow() {
        let a = PolluxAgent::new(limits());
        assert_eq!(a.choose(1, 1).global(1), 128);
        assert_eq!(a.choose(2, 8).global(8), 256);
    }

    #[test]
    fn report_round_trips_through_metrics() {
        let mut a = PolluxAgent::new(limits());
        a.observe(1, 1, 128, 0.2, 0.01);
        a.record_grad(GradStats {
            sqr: 2.0,
            var: 30.0,
        });
        a.replica_cap = Some(1);
        let r = a.report();
        let m: BTreeMap<&str, f64> = r.to_metrics().into_iter().collect();
        let back = AgentReport::from_metrics(|k| m.get(k).copied()).unwrap();
        assert_eq!(back, r);
        assert!(back.model().is_some());
    }

    #[test]
    fn each_gpu_type_keeps_its_own_fit() {
        let mut a = PolluxAgent::new(limits());
        a.set_gpu_type("fast", limits());
        a.observe(1, 1, 128, 0.1, 0.01);
        a.observe(1, 2, 128, 0.12, 0.02);
        let fast = a.params().unwrap();
        a.set_gpu_type(
            "slow",
            AppLimits {
                bmax: 256,
                ..limits()
            },
        );
        assert!(a.params().is_none(), "a new type starts without a fit");
        assert_eq!(a.max_profiled_replicas(), 0);
        a.observe(1, 1, 128, 0.4, 0.01);
        assert_eq!(a.limits.bmax, 256);
        a.set_gpu_type("fast", limits());
        assert_eq!(a.params(), Some(fast), "the fast type's fit comes back");
        let m: BTreeMap<String, f64> = a.typed_metrics().into_iter().collect();
        let (p, r) = typed_fit(|k| m.get(k).copied(), "fast");
        assert_eq!((p, r), (Some(fast), 2));
        let (p, r) = typed_fit(|k| m.get(k).copied(), "slow");
        assert!(p.is_some());
        assert_eq!(r, 1);
        assert_eq!(typed_fit(|k| m.get(k).copied(), "other"), (None, 0));
    }

    #[test]
    fn an_untyped_agent_reports_no_typed_metrics() {
        let mut a = PolluxAgent::new(limits());
        a.observe(1, 1, 128, 0.2, 0.01);
        assert!(a.typed_metrics().is_empty());
    }

    #[test]
    fn chosen_global_batch_never_exceeds_the_limit() {
        let mut a = PolluxAgent::new(limits());
        a.observe(1, 1, 128, 0.2, 0.01);
        a.observe(1, 1, 256, 0.35, 0.01);
        a.record_grad(GradStats { sqr: 1.0, var: 1e6 });
        for r in 1..=16u32 {
            let c = a.choose(r.div_ceil(4), r);
            assert!(c.global(r) <= 4096, "{r}: {c:?}");
            assert!(c.atomic <= 1024);
        }
    }
}
