//! Placement for jobs that share GPUs: FGD ("Beware of Fragmentation",
//! ATC'23, §4) and the baselines its authors compare it with, scored by
//! [`blox_share::policy`] as the authors' simulator scores them.
//!
//! Each round, every scheduled job that does not run yet is placed in the
//! schedule's order, as the reference places arriving tasks:
//!
//! 1. the nodes that fit it: CPU and memory left, its GPU model, and
//!    enough GPUs with its share free (idle GPUs for whole-GPU jobs);
//! 2. the scorer gives each an integer score; the highest wins, ties to
//!    the lowest node id (the reference breaks them by a random prefix of
//!    the node names, which a round loop has no use for);
//! 3. the scorer picks the GPUs there; a job asking for part of one GPU
//!    ([`JobSpec::gpu_milli`]) gets a share of it, others whole GPUs, and a
//!    job asking for none only the node's CPUs and memory
//!    ([`Assignment::on_node`]).
//!
//! A job that fits nowhere waits; jobs behind it may still start. Running
//! jobs keep what they hold: the reference never preempts or moves a task.
//! The fragmentation measure is taken against the task shapes seen so far
//! (the jobs this placement has been asked to place), the most popular
//! covering `target_percent` of them (the reference: 95 % of its trace).
//!
//! Parameters: `scorer` (`fgd`, `best-fit`, `dot-product`, `gpu-packing`,
//! `gpu-clustering`, `random`, `fgd-exact`; default `fgd`),
//! `target_percent` (95), `seed` (42, for `random`).

use super::share_view::{cpu_milli, mib, Figures, Views};
use blox_core::*;
use blox_share::frag::{TargetWorkload, TaskShape};
use blox_share::gorand::GoRand;
use blox_share::node::NodeState;
use blox_share::openb::TaskSpec;
use blox_share::policy::{self, Context, SharePolicy};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// `share` / `fgd` placement.
pub struct SharePlacement {
    scorer: String,
    policy: Box<dyn SharePolicy>,
    rng: GoRand,
    target_percent: f64,
    /// Jobs whose shape is counted, and the counts by shape.
    seen: HashSet<JobId>,
    shapes: HashMap<TaskShape, f64>,
    /// The target workload, built from the first `built_from` jobs seen,
    /// and how many times it was built.
    target: TargetWorkload,
    built_from: usize,
    target_gen: u64,
    views: Views,
    figures: Figures,
}

impl Clone for SharePlacement {
    fn clone(&self) -> Self {
        SharePlacement {
            scorer: self.scorer.clone(),
            policy: policy::by_name(&self.scorer).expect("checked when built"),
            rng: self.rng.clone(),
            target_percent: self.target_percent,
            seen: self.seen.clone(),
            shapes: self.shapes.clone(),
            target: self.target.clone(),
            built_from: self.built_from,
            target_gen: self.target_gen,
            views: self.views.clone(),
            figures: self.figures.clone(),
        }
    }
}

impl SharePlacement {
    /// Scored by `scorer` (a name of [`blox_share::policy::by_name`]).
    pub fn new(scorer: &str, target_percent: f64, seed: i64) -> Result<Self, String> {
        let policy = policy::by_name(scorer).ok_or_else(|| {
            format!(
                "unknown scorer `{scorer}`; expected one of {}, {}",
                policy::NAMES.join(", "),
                policy::VARIANTS.join(", ")
            )
        })?;
        if !(target_percent > 0.0 && target_percent <= 100.0) {
            return Err(format!(
                "target_percent = {target_percent}: a share of the tasks, in (0, 100]"
            ));
        }
        Ok(SharePlacement {
            scorer: scorer.to_string(),
            policy,
            rng: GoRand::new(seed),
            target_percent,
            seen: HashSet::default(),
            shapes: HashMap::default(),
            target: TargetWorkload { types: Vec::new() },
            built_from: 0,
            target_gen: 0,
            views: Views::default(),
            figures: Figures::default(),
        })
    }

    /// Counts the shape of a job asked for the first time.
    fn count(&mut self, id: JobId, task: &TaskSpec) {
        if self.seen.insert(id) {
            *self.shapes.entry(TaskShape::of(task)).or_insert(0.0) += 1.0;
        }
    }

    /// The target workload, rebuilt once the jobs seen have grown by a
    /// tenth since it was built (or by one, under ten jobs): the shapes'
    /// frequencies move slowly, and every rebuild makes every node's
    /// fragment stale.
    fn target(&mut self) -> &TargetWorkload {
        let n = self.seen.len();
        if n > self.built_from
            && (n >= self.built_from + self.built_from / 10 || self.built_from < 10)
        {
            let shapes = self.shapes.iter().map(|(s, c)| (s.clone(), *c));
            self.target = TargetWorkload::of_counts(shapes, self.target_percent);
            self.built_from = n;
            self.target_gen += 1;
        }
        &self.target
    }
}

/// Thousandths of one GPU `job` asks for at `gpus` GPUs (1000: whole; 0
/// without GPUs).
fn milli_of(job: &Job, gpus: u32) -> u32 {
    match (gpus, job.spec.gpu_milli) {
        (0, _) => 0,
        (1, Some(m)) => m.clamp(1, GPU_MILLI),
        _ => GPU_MILLI,
    }
}

/// CPUs and host memory (GiB) `job` gets in all at `gpus` GPUs, as the
/// loop gives them ([`JobSpec::host_need`], else the node-proportional
/// share, which `proportional` gives per GPU, in part for a share).
pub fn host_of(job: &Job, gpus: u32, proportional: HostShare) -> (f64, f64) {
    if gpus == 0 {
        // A job without GPUs: its own need, in all (the loop refuses one
        // that names none).
        return job.spec.host_in_all();
    }
    let f = f64::from(milli_of(job, gpus)) / f64::from(GPU_MILLI);
    let h = job.spec.host_need.unwrap_or(HostShare {
        cpus_per_gpu: proportional.cpus_per_gpu * f,
        mem_gb_per_gpu: proportional.mem_gb_per_gpu * f,
    });
    (
        h.cpus_per_gpu * f64::from(gpus),
        h.mem_gb_per_gpu * f64::from(gpus),
    )
}

/// What `job` asks for, run at `gpus` GPUs, as a task of the scorers
/// ([`host_of`] in thousandths of a core and MiB).
pub fn task_of(job: &Job, gpus: u32, proportional: HostShare) -> TaskSpec {
    let spec = &job.spec;
    let milli = milli_of(job, gpus);
    let (cpus, mem_gb) = host_of(job, gpus, proportional);
    TaskSpec {
        name: spec.name.clone(),
        cpu_milli: cpu_milli(cpus),
        memory_mib: mib(mem_gb),
        num_gpu: gpus,
        gpu_milli: milli,
        gpu_models: spec.elasticity.gpu_types.clone(),
        creation_s: None,
        deletion_s: None,
    }
}

impl PlacementPolicy for SharePlacement {
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
        let mut out = Placement::default();
        // (A job without GPUs is listed with 0; any other with 0 is not
        // to run.)
        let waiting: Vec<(&Job, u32)> = (schedule.entries.iter())
            .filter_map(|d| jobs.get(d.job).map(|j| (j, d.gpus)))
            .filter(|(j, gpus)| !j.is_running() && (*gpus > 0 || j.without_gpus()))
            .map(|(j, gpus)| (j, if j.without_gpus() { 0 } else { gpus }))
            .collect();
        if waiting.is_empty() {
            return out;
        }
        self.views.refresh(cluster, jobs);
        let mut views = std::mem::take(&mut self.views);
        let proportional = views
            .ids
            .first()
            .and_then(|n| cluster.node(*n))
            .map_or(NodeSpec::with_gpus(1).proportional_share(), |n| {
                n.spec.proportional_share()
            });
        // Every waiting job's shape counts before any is placed: the
        // queue is part of the workload the fragments are measured against.
        for (job, gpus) in &waiting {
            self.count(job.id(), &task_of(job, *gpus, proportional));
        }
        let mut feasible = Vec::new();
        for (job, gpus) in waiting {
            // A job without host needs of its own gets each node's
            // proportional share.
            let on = |v: usize| match job.spec.host_need {
                Some(_) => task_of(job, gpus, proportional),
                None => {
                    let p = cluster
                        .node(views.ids[v])
                        .map(|n| n.spec.proportional_share());
                    task_of(job, gpus, p.unwrap_or(proportional))
                }
            };
            // The exact CPUs and memory it gets on node `v`, and whether
            // they are left there (the loop checks them to a millionth).
            let exact = |v: usize| {
                let p = cluster
                    .node(views.ids[v])
                    .map(|n| n.spec.proportional_share());
                host_of(job, gpus, p.unwrap_or(proportional))
            };
            let room = |v: usize| {
                let (c, m) = exact(v);
                let (lc, lm) = views.host_left[v];
                c <= lc + blox_core::cluster::HOST_EPS / 2.0
                    && m <= lm + blox_core::cluster::HOST_EPS / 2.0
            };
            let task = task_of(job, gpus, proportional);
            // A share goes only where GPUs are shared (not on a node whose
            // worker gives its GPUs whole only).
            let shares = task.num_gpu == 1 && task.gpu_milli < GPU_MILLI;
            let may_share = |v: usize| {
                !shares
                    || cluster
                        .node(views.ids[v])
                        .is_some_and(|n| !n.spec.whole_gpus_only)
            };
            feasible.clear();
            match job.spec.host_need {
                Some(_) => feasible.extend(
                    (0..views.nodes.len())
                        .filter(|&v| may_share(v) && views.nodes[v].fits(&task) && room(v)),
                ),
                None => feasible.extend(
                    (0..views.nodes.len())
                        .filter(|&v| may_share(v) && views.nodes[v].fits(&on(v)) && room(v)),
                ),
            }
            let Some(v) = self.choose(&task, &feasible, &views.nodes) else {
                continue;
            };
            let task = on(v);
            let mut local = self.gpus_on(&task, v, &views.nodes);
            local.sort_unstable();
            if views.nodes[v].take(&task, &local).is_err() {
                // A scorer's GPUs that do not fit: the job waits.
                tracing::warn!(job = %job.id(), scorer = %self.scorer, "GPUs chosen do not fit");
                continue;
            }
            let (c, m) = exact(v);
            views.host_left[v].0 -= c;
            views.host_left[v].1 -= m;
            views.touched(v);
            let Some(node) = cluster.node(views.ids[v]) else {
                continue;
            };
            let gpus: Vec<GpuId> = local
                .iter()
                .filter_map(|l| node.gpus.get(*l as usize).copied())
                .collect();
            if task.num_gpu == 0 {
                out.launch.push(Assignment::on_node(job.id(), node.id));
                continue;
            }
            let share = (task.num_gpu == 1 && task.gpu_milli < GPU_MILLI).then_some(task.gpu_milli);
            out.launch.push(Assignment {
                job: job.id(),
                gpus,
                batch_size: None,
                host: job.spec.host_need,
                share,
                node: None,
            });
        }
        self.views = views;
        out
    }

    fn honours_gpu_types(&self) -> bool {
        true
    }

    /// Jobs without GPUs take CPUs and memory of the node the scorer
    /// chooses, as the reference places its CPU-only tasks.
    fn places_jobs_without_gpus(&self) -> bool {
        true
    }

    /// The paper's fragmentation after the round against the target
    /// workload (§3): `frag_gpus`, the fragment amount in GPUs, and
    /// `frag_percent`, its share of the free GPU capacity.
    fn round_figures(&mut self, cluster: &ClusterState) -> Vec<(&'static str, f64)> {
        self.target();
        self.figures.measure(cluster, &self.target, self.target_gen)
    }

    fn never_places(&self, job: &Job, cluster: &ClusterState) -> Option<String> {
        let gpus = job.requested_gpus();
        let mut empty = false;
        for n in cluster.nodes() {
            let p = n.spec.proportional_share();
            let task = task_of(job, gpus, p);
            let view = NodeState::new(&blox_share::openb::NodeSpec {
                name: String::new(),
                cpu_milli: i64::from(n.spec.cpus) * 1000,
                memory_mib: mib(n.spec.host_mem_gb),
                gpus: n.spec.gpus,
                model: n.spec.gpu_type.clone(),
            });
            if view.fits(&task) {
                return None;
            }
            empty = true;
        }
        empty.then(|| {
            let task = task_of(job, gpus, NodeSpec::with_gpus(1).proportional_share());
            format!(
                "no node could hold it even empty ({} GPU(s) of {} thousandths{}, {:.1} CPUs, {:.1} GiB)",
                task.num_gpu,
                task.gpu_milli,
                match task.gpu_models.is_empty() {
                    true => String::new(),
                    false => format!(" on {}", task.gpu_models.join(" or ")),
                },
                task.cpu_milli as f64 / 1000.0,
                task.memory_mib as f64 / 1024.0
            )
        })
    }
}

impl SharePlacement {
    /// The feasible node with the highest score, ties to the first. A
    /// single feasible node is scored too (the reference's scheduler skips
    /// scoring then, and its GPU choice falls back to the first that fits;
    /// here the scorer picks the GPU on every node).
    fn choose(
        &mut self,
        task: &TaskSpec,
        feasible: &[usize],
        nodes: &[NodeState],
    ) -> Option<usize> {
        match feasible {
            [] => None,
            _ => {
                self.target();
                let mut cx = Context {
                    nodes,
                    target: &self.target,
                    rng: &mut self.rng,
                };
                let scores = self.policy.scores(task, feasible, &mut cx);
                let mut best = 0;
                for k in 1..feasible.len() {
                    if scores[k] > scores[best] {
                        best = k;
                    }
                }
                Some(feasible[best])
            }
        }
    }

    /// The GPUs the scorer takes on node `v` (none for a task without).
    fn gpus_on(&mut self, task: &TaskSpec, v: usize, nodes: &[NodeState]) -> Vec<u32> {
        if task.num_gpu == 0 {
            return Vec::new();
        }
        self.target();
        let mut cx = Context {
            nodes,
            target: &self.target,
            rng: &mut self.rng,
        };
        self.policy.gpus(task, v, &mut cx)
    }
}

/// Reads `scorer`, `target_percent` and `seed`.
fn build(
    p: &blox_core::config::Section,
    default_scorer: &str,
) -> Result<Box<dyn PlacementPolicy>, blox_core::config::ConfigError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Keys {
        scorer: Option<String>,
        target_percent: Option<f64>,
        seed: Option<i64>,
    }
    let k: Keys = p.parse()?;
    let pct = k.target_percent.unwrap_or(95.0);
    let s = SharePlacement::new(
        k.scorer.as_deref().unwrap_or(default_scorer),
        pct,
        k.seed.unwrap_or(42),
    )
    .map_err(|e| {
        let key = if e.starts_with("target_percent") {
            "target_percent"
        } else {
            "scorer"
        };
        p.error_at(key, e)
    })?;
    Ok(Box::new(s))
}

blox_core::register_placement!(
    "share",
    "GPUs that jobs share: FGD or a baseline of its paper (`scorer`), a share of one GPU for jobs asking part of one (Weng et al., ATC'23)",
    |p| build(p, "fgd")
);

blox_core::register_placement!(
    "fgd",
    "fragmentation gradient descent: each job where it least grows the expected GPU fragmentation, sharing GPUs (Weng et al., ATC'23 §4)",
    |p| build(p, "fgd")
);

#[cfg(test)]
#[path = "share_tests.rs"]
mod tests;
