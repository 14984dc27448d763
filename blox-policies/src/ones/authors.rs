//! ONES as its authors ran it (SC'21; rules from the authors' implementation,
//! repository `kurisusnowdeng/ones_sc21`, `src/scheduler.py`, `src/monitor.py`,
//! `src/config.py`, where the paper leaves them open).
//!
//! Every round:
//! 1. **Track** each job: epochs, samples, one predictor point per finished
//!    epoch. A job is *executed* once it has finished `warmup_epochs` (3) or run
//!    `warmup_s`; only executed jobs are predicted, scaled and mutated.
//! 2. **Predict** (§3.2.1): `ρ_j ~ Be(α = epochs, β(x_j))` for executed jobs,
//!    remaining work `Y_j = Y_processed (1/ρ_j − 1)` (Eq. 7).
//! 3. **Limits** (§3.3.2): a job's size is 1 GPU when new; a running executed
//!    job at its `max_size` doubles it (at most the cluster), and may grow to
//!    `min(max_size, 4 × requested)`; **scale-down** brakes only the largest
//!    running executed job, only if it holds at least half the cluster and has
//!    run longer than the median job: `max(⌊2n / (0.5·T/T_median + 1)⌋, 1)`,
//!    rounded up to even; a stopped job may resume at its `max_size`.
//! 4. **Evolve** a carried population of K = 8 for `generations` steps:
//!    refresh (drop finished jobs, trim to sizes), K/2 uniform crossovers
//!    (ξ = 0.5 per GPU), K mutations (each executed job dropped with θ = 0.1),
//!    then every candidate is *padded* (idle GPUs to new jobs, one each, then to
//!    jobs by predicted remaining time on one GPU, shortest first, up to their
//!    size, then up to `max_size`) and *reordered* (jobs keep the GPUs they run
//!    on; the rest is packed node by node); keep the K with the smallest
//!    `Σ Y_processed · n · (1/ρ − 1) / X(n)` (Eq. 8).
//! 5. **Update**: a job whose GPUs in the best candidate are all idle starts at
//!    once; the rest of the best candidate is deployed only when every running
//!    job whose placement it changes has finished `update_after_epochs` epochs
//!    since its last change. At a deployment, jobs left waiting to resume have
//!    their size halved.
//!
//! A job's per-GPU batch is its submitted one (global batch / requested GPUs,
//! capped at what fits one GPU); on `n` GPUs it trains at `n ×` that batch
//! with a linearly scaled learning rate. Demands carry concrete GPUs: pair with
//! the `explicit` placement.

use super::predictor::{sample_beta, LogPoint, Predictor, FEATURES};
use super::search::{per_gpu_batch, submitted_batch, Throughput};
use super::{BatchRule, OnesParams};
use blox_core::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// What ONES remembers about a job.
#[derive(Clone, Debug)]
struct Track {
    local_batch: u32,
    /// The submitted global batch, as first seen.
    global_batch: u32,
    /// The monitor's `max_size` (GPUs): starts at 1, doubles on scale-up.
    max_size: u32,
    /// Size a stopped job may resume at (`None`: not waiting to resume).
    resume_size: Option<u32>,
    /// Epochs when its placement last changed.
    epochs_at_change: f64,
    epochs: f64,
    /// Whole epochs already logged for the predictor.
    logged: u64,
    loss_initial: Option<f64>,
    started: bool,
    per_gpu_throughput: Option<f64>,
    log: Vec<LogPoint>,
}

/// This round's view of one job (index = position in arrival order).
#[derive(Clone, Debug)]
struct View {
    id: JobId,
    new: bool,
    executed: bool,
    running: bool,
    /// The ONES size: most GPUs the refresh keeps.
    size: u32,
    /// Most GPUs padding may give (the monitor's `max_size`, capped).
    max_size: u32,
    /// `Y_processed (1/ρ − 1)`, executed jobs only.
    remaining: Option<f64>,
    local_batch: u32,
    throughput: Throughput,
}

impl View {
    /// Samples per second on `n` GPUs over `nodes` nodes.
    fn x(&self, n: u32, nodes: u32) -> Option<f64> {
        self.throughput.at(nodes, n, self.local_batch)
    }

    /// Predicted time to finish on one GPU (padding order).
    fn time_on_one(&self) -> f64 {
        match (self.remaining, self.x(1, 1)) {
            (Some(r), Some(x)) if x > 0.0 => r / x,
            (Some(_), _) => f64::INFINITY,
            // Started but not executed yet: young, so first (as new jobs).
            (None, _) => 0.0,
        }
    }
}

/// A candidate: the job (index into this round's views) on each GPU slot.
type Candidate = Vec<Option<u32>>;

/// What a round decided, for tests and benchmarks.
#[derive(Clone, Debug, Default)]
pub struct Decision {
    /// Eq. 8 score of the best candidate.
    pub score: f64,
    /// Whether the best candidate was deployed in full.
    pub deployed: bool,
    /// The ONES size of each job (GPUs).
    pub sizes: BTreeMap<JobId, u32>,
}

#[derive(Clone)]
pub struct Ones {
    params: OnesParams,
    rng: ChaCha8Rng,
    tracks: HashMap<JobId, Track>,
    predictor: Predictor,
    /// Population by GPU: `(gpu, job)` pairs.
    population: Vec<Vec<(GpuId, JobId)>>,
    /// Run times of jobs that left (for the median of scale-down).
    finished_run_s: Vec<f64>,
    pub last: Decision,
}

impl Ones {
    /// A scheduler; reads `history_file` if set.
    pub fn new(params: OnesParams) -> Result<Self, String> {
        let mut rng = ChaCha8Rng::seed_from_u64(params.seed());
        let mut predictor = Predictor::new(params.history);
        if let Some(path) = &params.history_file {
            for (log, total) in read_history(path)? {
                predictor.add_job(&log, total, &mut rng);
            }
            predictor.refit();
        }
        Ok(Ones {
            rng,
            predictor,
            params,
            tracks: HashMap::new(),
            population: Vec::new(),
            finished_run_s: Vec::new(),
            last: Decision::default(),
        })
    }

    fn k(&self) -> usize {
        self.params.population.unwrap_or(8).max(2)
    }

    /// Finished jobs train the predictor (in id order: the reservoir draws
    /// from the RNG); vanished ones are forgotten.
    fn retire(&mut self, jobs: &JobState) {
        let mut gone: Vec<JobId> = self
            .tracks
            .keys()
            .copied()
            .filter(|id| jobs.get(*id).is_none_or(|j| j.status.is_terminal()))
            .collect();
        gone.sort();
        for id in gone {
            let t = self.tracks.remove(&id).expect("listed above");
            let job = jobs.finished_job(id).or_else(|| jobs.get(id));
            if let Some(j) = job {
                if t.started {
                    self.finished_run_s.push(j.run_time_s);
                }
                if j.status == JobStatus::Finished && !t.log.is_empty() {
                    let total = t.epochs.max(t.log.last().map_or(0.0, |p| p.epochs));
                    self.predictor.job_completed(&t.log, total, &mut self.rng);
                }
            }
        }
    }

    /// Steps 1–3: bookkeeping, prediction, sizes.
    fn views(&mut self, jobs: &JobState, order: &[&Job], gpus: u32) -> Vec<View> {
        let warm_epochs = self.params.warmup_epochs.unwrap_or(3.0);
        let warm_s = self.params.warmup_s.unwrap_or(600.0);
        let cap = self.params.max_scale_factor.unwrap_or(4);
        let mut views = Vec::with_capacity(order.len());
        for job in order {
            let id = job.id();
            let m = |k: &str| jobs.metrics().get(id, k);
            let t = self.tracks.entry(id).or_insert_with(|| Track {
                local_batch: per_gpu_batch(job, m),
                global_batch: submitted_batch(job),
                max_size: 1,
                resume_size: None,
                epochs_at_change: 0.0,
                epochs: 0.0,
                logged: 0,
                loss_initial: None,
                started: false,
                per_gpu_throughput: None,
                log: Vec::new(),
            });
            t.epochs = m(metric::EPOCHS_DONE)
                .or_else(|| Some(m(metric::SAMPLES_PROCESSED)? / m(metric::EPOCH_SIZE)?))
                .unwrap_or(0.0)
                .max(0.0);
            if let Some(l) = m(metric::LOSS) {
                t.loss_initial.get_or_insert(l);
            }
            let x = features(t, &m);
            // One training point per finished epoch (the authors' train log).
            let whole = t.epochs.floor() as u64;
            if whole > t.logged {
                t.logged = whole;
                t.log.push(LogPoint {
                    x,
                    epochs: t.epochs,
                });
            }
            let alloc = job.allocation.len() as u32;
            let running = job.is_running() && alloc > 0;
            if running {
                t.started = true;
                t.resume_size = None;
                if let Some(x) = m(metric::THROUGHPUT).filter(|x| *x > 0.0) {
                    t.per_gpu_throughput = Some(x / alloc as f64);
                }
            } else if t.started && t.resume_size.is_none() {
                t.resume_size = Some(t.max_size);
            }
            let executed = t.started && (t.epochs >= warm_epochs || job.run_time_s >= warm_s);
            let by_batch = m(metric::MAX_BATCH_SIZE)
                .map_or(u32::MAX, |b| (b.max(1.0) as u32 / t.local_batch).max(1));
            let limit = gpus.min(by_batch).max(1);
            let mut size = if running {
                alloc
            } else {
                t.resume_size.unwrap_or(1)
            };
            if running && executed {
                // Scale-up: a job running at its max_size doubles it.
                if alloc >= t.max_size {
                    t.max_size = (t.max_size.saturating_mul(2)).min(limit);
                }
                size = t
                    .max_size
                    .min(cap.saturating_mul(job.requested_gpus().max(1)));
            }
            let remaining = executed.then(|| {
                let beta = self.predictor.beta(&x);
                let rho = sample_beta(t.epochs.max(1.0), beta, &mut self.rng).clamp(1e-6, 1.0);
                m(metric::SAMPLES_PROCESSED).unwrap_or(0.0) * (1.0 / rho - 1.0)
            });
            let throughput = Throughput::from_metrics(m, t.per_gpu_throughput);
            views.push(View {
                id,
                new: !t.started,
                executed,
                running,
                size: size.clamp(1, limit),
                max_size: t.max_size.clamp(1, limit),
                remaining,
                local_batch: t.local_batch,
                throughput,
            });
        }
        self.scale_down(order, &mut views, gpus);
        views
    }

    /// The brake: only the largest running executed job, only if it holds at
    /// least half the cluster and has run longer than the median job.
    fn scale_down(&self, order: &[&Job], views: &mut [View], gpus: u32) {
        let mut largest: Option<usize> = None;
        for (i, v) in views.iter().enumerate() {
            if v.running && v.executed {
                let n = order[i].allocation.len();
                if largest.is_none_or(|l| order[l].allocation.len() < n) {
                    largest = Some(i);
                }
            }
        }
        let Some(i) = largest else { return };
        let n = order[i].allocation.len() as f64;
        if (n as u32) < gpus / 2 {
            return;
        }
        let mut times: Vec<f64> = self.finished_run_s.clone();
        times.extend(
            views
                .iter()
                .zip(order)
                .filter(|(v, _)| !v.new)
                .map(|(_, j)| j.run_time_s),
        );
        times.sort_by(f64::total_cmp);
        let median = match times.len() {
            0 => return,
            k if k % 2 == 1 => times[k / 2],
            k => 0.5 * (times[k / 2 - 1] + times[k / 2]),
        };
        let run = order[i].run_time_s;
        if median <= 0.0 || run <= median {
            return;
        }
        let f = self.params.scale_down_factor.unwrap_or(0.5);
        let mut size = ((2.0 * n / (f * run / median + 1.0)).floor() as u32).max(1);
        size = size.div_ceil(2) * 2;
        tracing::debug!(job = %views[i].id, from = n, to = size, "ones: scale down");
        views[i].size = size.min(gpus).max(1);
    }
}

/// Predictor features `{log ‖D‖, L_initial, epochs, 1 − L/L_initial, metric}`
/// (the authors' inputs); absent ones are 0 and carry no weight.
fn features(t: &Track, m: &impl Fn(&str) -> Option<f64>) -> [f64; FEATURES] {
    let ratio = match (t.loss_initial, m(metric::LOSS)) {
        (Some(l0), Some(l)) if l0 > 0.0 => 1.0 - l / l0,
        _ => 0.0,
    };
    [
        m(metric::EPOCH_SIZE)
            .filter(|s| *s > 0.0)
            .map_or(0.0, f64::ln),
        t.loss_initial.unwrap_or(0.0),
        t.epochs,
        ratio,
        m(metric::VAL_METRIC).unwrap_or(0.0),
    ]
}

/// Reads a job history: `job,epoch,epoch_size,total_epochs` and optional
/// `initial_loss,loss,val_metric`, one row per finished epoch.
pub fn read_history(path: &Path) -> Result<Vec<(Vec<LogPoint>, f64)>, String> {
    let at = |line: u64, what: String| format!("{}:{line}: {what}", path.display());
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .flexible(true)
        .from_path(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .iter()
        .map(str::to_string)
        .collect();
    if header.iter().all(|h| h.is_empty()) {
        return Err(format!("{}: empty file", path.display()));
    }
    let col = |name: &str| header.iter().position(|h| h == name);
    let need = ["job", "epoch", "epoch_size", "total_epochs"];
    let idx: Vec<usize> = need
        .iter()
        .map(|n| col(n).ok_or_else(|| at(1, format!("missing column `{n}`"))))
        .collect::<Result<_, _>>()?;
    let opt = [col("initial_loss"), col("loss"), col("val_metric")];
    let mut jobs: BTreeMap<String, (Vec<LogPoint>, f64)> = BTreeMap::new();
    for row in reader.records() {
        let f = row.map_err(|e| format!("{}: {e}", path.display()))?;
        let line = f.position().map_or(0, |p| p.line());
        if f.iter().all(str::is_empty) {
            continue;
        }
        let num = |i: usize, name: &str| -> Result<f64, String> {
            f.get(i)
                .and_then(|s| s.parse::<f64>().ok())
                .filter(|v| v.is_finite())
                .ok_or_else(|| at(line, format!("column `{name}`: not a finite number")))
        };
        let epoch = num(idx[1], "epoch")?;
        let size = num(idx[2], "epoch_size")?;
        let total = num(idx[3], "total_epochs")?;
        if epoch < 0.0 || size <= 0.0 || total < epoch {
            return Err(at(
                line,
                "need 0 <= epoch <= total_epochs and epoch_size > 0".into(),
            ));
        }
        let o = |j: usize| {
            opt[j]
                .and_then(|i| f.get(i)?.parse::<f64>().ok())
                .filter(|v| v.is_finite())
        };
        let (l0, l) = (o(0), o(1));
        let ratio = match (l0, l) {
            (Some(l0), Some(l)) if l0 > 0.0 => 1.0 - l / l0,
            _ => 0.0,
        };
        let x = [
            size.ln(),
            l0.unwrap_or(0.0),
            epoch,
            ratio,
            o(2).unwrap_or(0.0),
        ];
        let job = f
            .get(idx[0])
            .filter(|s| !s.is_empty())
            .ok_or_else(|| at(line, "column `job`: missing".into()))?;
        let e = jobs.entry(job.to_string()).or_insert((Vec::new(), total));
        e.0.push(LogPoint { x, epochs: epoch });
        e.1 = e.1.max(total);
    }
    Ok(jobs.into_values().collect())
}

mod evolve;

impl SchedulingPolicy for Ones {
    fn fork(&self) -> Fork<dyn SchedulingPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn schedule(
        &mut self,
        _round: &RoundInfo,
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> Schedule {
        self.retire(jobs);
        let mut order: Vec<&Job> = jobs.runnable().collect();
        crate::scheduling::fifo::sort_by_arrival(&mut order);
        let online: Vec<&Node> = cluster
            .nodes()
            .iter()
            .filter(|n| n.online && !n.gpus.is_empty())
            .collect();
        let slots: Vec<(GpuId, u32)> = online
            .iter()
            .enumerate()
            .flat_map(|(k, n)| n.gpus.iter().map(move |g| (*g, k as u32)))
            .collect();
        let views = self.views(jobs, &order, slots.len() as u32);
        self.last = Decision {
            sizes: views.iter().map(|v| (v.id, v.size)).collect(),
            ..Decision::default()
        };
        if order.is_empty() || slots.is_empty() {
            self.population.clear();
            return Schedule::default();
        }
        let mut search = evolve::Search::new(&views, &order, &slots, &self.params);
        let current = search.current();
        let carried: Vec<Candidate> = self.population.iter().map(|g| search.encode(g)).collect();
        let k = self.k();
        let pop = search.run(
            carried,
            k,
            self.params.generations.unwrap_or(10).max(1),
            &mut self.rng,
        );
        self.population = pop.iter().map(|c| search.decode(c)).collect();
        let best = &pop[0];
        self.last.score = search.score(best);
        let pad = self.params.pad_while_gated.unwrap_or(true);
        let (deploy, full) = search.update(&current, best, pad, |i| {
            let t = &self.tracks[&views[i].id];
            t.epochs - t.epochs_at_change >= self.params.update_after_epochs
        });
        self.last.deployed = full;
        let mut entries = Vec::new();
        for (i, gpus) in deploy {
            let v = &views[i];
            let t = self.tracks.get_mut(&v.id).expect("tracked");
            let moved = !order[i].is_running() || {
                let mut a = order[i].allocation.clone();
                let mut b = gpus.clone();
                a.sort();
                b.sort();
                a != b
            };
            if moved {
                t.epochs_at_change = t.epochs;
            }
            entries.push(Demand {
                job: v.id,
                gpus: gpus.len() as u32,
                batch_size: Some(match self.params.batch.unwrap_or_default() {
                    BatchRule::PerGpu => t.local_batch * gpus.len() as u32,
                    BatchRule::Submitted => t.global_batch,
                }),
                gpu_ids: Some(gpus),
                host: None,
            });
        }
        if full {
            // Jobs left waiting to resume are scaled in (halved).
            let placed: std::collections::HashSet<JobId> = entries.iter().map(|d| d.job).collect();
            for v in &views {
                let t = self.tracks.get_mut(&v.id).expect("tracked");
                if let Some(s) = t.resume_size.filter(|_| !placed.contains(&v.id)) {
                    if s > 1 {
                        t.resume_size = Some(s / 2);
                        t.max_size = s / 2;
                    }
                }
            }
        }
        Schedule {
            min_run_s: None,
            note: None,
            entries,
            desired_nodes: None,
            terminate: Vec::new(),
        }
    }

    /// ONES resizes jobs and their batch sizes, on any GPU type.
    fn accepts(&self, job: &JobSpec) -> Result<(), String> {
        accepts_resizable(job, "ones", true)
    }

    fn metrics_read(&self) -> Vec<&'static str> {
        vec![
            metric::EPOCHS_DONE,
            metric::SAMPLES_PROCESSED,
            metric::EPOCH_SIZE,
            metric::LOSS,
            metric::THROUGHPUT,
            metric::MAX_BATCH_SIZE,
            metric::MAX_LOCAL_BATCH_SIZE,
            metric::VAL_METRIC,
        ]
    }

    fn requires_placement(&self) -> Option<&'static str> {
        Some("explicit")
    }
}

#[cfg(test)]
mod tests;
