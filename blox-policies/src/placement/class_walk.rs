//! The walk that PM-First and PAL share (the PAL artifact's
//! `placement/pmfirst.py` and `placement/pal.py`, `place`), and the GPU
//! classes they read:
//!
//! 1. every running job gives its GPUs back (not sticky: a job is moved
//!    when its best GPUs change; one that gets the same GPUs keeps running);
//! 2. the jobs at the head of the order that fit the cluster together (up
//!    to the first whose GPUs would exceed it) are re-ordered by their
//!    application class, in the factor table's class order, and the rest
//!    follow in order;
//! 3. each job in turn gets GPUs from the placement's chooser, given its
//!    class and the free GPUs;
//! 4. the first job the chooser cannot place ends the round's placement.

use super::gpu_classes::class_factors;
use blox_core::variability::Variability;
use blox_core::*;
use std::collections::HashMap;

/// Classed factors by class, for a cluster of so many GPUs.
type ByClass = (usize, HashMap<String, std::sync::Arc<Vec<f64>>>);

/// The classed factors of every GPU by class ([`super::gpu_classes`]), or
/// those a table gives (`clusters = "file"`), computed once per cluster
/// size.
#[derive(Clone, Debug, Default)]
pub struct ClassedFactors {
    given: Option<std::sync::Arc<Variability>>,
    classed: Option<ByClass>,
}

impl ClassedFactors {
    /// From a placement's `clusters` parameter, if given.
    pub fn from_param(
        p: &Section,
        clusters: Option<&std::path::Path>,
    ) -> Result<Self, ConfigError> {
        let given = match clusters {
            None => None,
            Some(f) => {
                let path = p.resolve_path(f);
                let t = blox_config::variability::read_table(&path)
                    .map_err(|e| p.error_at("clusters", e))?;
                Some(std::sync::Arc::new(t))
            }
        };
        Ok(ClassedFactors {
            given,
            classed: None,
        })
    }

    /// Classed factors for `class` on `cluster`, by GPU id.
    pub fn of(&mut self, cluster: &ClusterState, class: &str) -> std::sync::Arc<Vec<f64>> {
        let n = cluster.num_gpus() as usize;
        if self.classed.as_ref().is_none_or(|(m, _)| *m != n) {
            let mut by_class = HashMap::new();
            if let Some(v) = cluster.variability() {
                for c in v.classes() {
                    let given = self
                        .given
                        .as_ref()
                        .filter(|g| g.gpus() >= n)
                        .and_then(|g| g.column(c));
                    let f = match given {
                        Some(mut f) => {
                            f.truncate(n);
                            f
                        }
                        None => {
                            let mut raw = v.column(c).unwrap_or_default();
                            raw.resize(n, 1.0);
                            class_factors(&raw)
                        }
                    };
                    by_class.insert(c.clone(), std::sync::Arc::new(f));
                }
            }
            self.classed = Some((n, by_class));
        }
        let (_, by_class) = self.classed.as_ref().expect("set above");
        by_class
            .get(class)
            .cloned()
            .unwrap_or_else(|| std::sync::Arc::new(vec![1.0; n]))
    }
}

/// Runs the walk (module docs); `choose(class, free, n)` picks `n` of the
/// free GPUs (by id) for a job of `class`, or says it cannot.
pub fn class_walk(
    schedule: &Schedule,
    jobs: &JobState,
    cluster: &ClusterState,
    choose: impl FnMut(&str, &[GpuId], usize) -> Option<Vec<GpuId>>,
) -> Placement {
    non_sticky_walk(schedule, jobs, cluster, true, choose)
}

/// The walk without step 2's re-ordering when `by_class` is false (the
/// artifact's Packed-Non-Sticky and Random-Non-Sticky).
pub fn non_sticky_walk(
    schedule: &Schedule,
    jobs: &JobState,
    cluster: &ClusterState,
    by_class: bool,
    mut choose: impl FnMut(&str, &[GpuId], usize) -> Option<Vec<GpuId>>,
) -> Placement {
    let mut out = Placement::default();
    // Without factors (a simulation refuses that; a live cluster whose
    // workers measured nothing) every GPU is alike, one class.
    let v = cluster.variability();
    let class_of = |job: &Job| v.map_or("", |v| v.class_of(job.spec.model.as_deref()));
    // 1. The free GPUs, and those of every running job: each gives them
    // back (listed ones by re-placement, the others by their preemption).
    let listed: std::collections::HashSet<JobId> = schedule.entries.iter().map(|d| d.job).collect();
    let mut free = vec![false; cluster.gpus().len()];
    for g in cluster.free_gpus() {
        free[g.index()] = true;
    }
    for job in jobs.running() {
        // (A shared GPU stays its other sharers' when one stops.)
        for g in job.allocation.iter().filter(|g| !cluster.is_shared(**g)) {
            free[g.index()] = true;
        }
        if !listed.contains(&job.id()) {
            out.preempt.push(job.id());
        }
    }
    // 2. The head that fits the cluster, by class; then the rest.
    let total = u64::from(cluster.num_gpus());
    let class_rank = |job: JobId| match (v, jobs.get(job)) {
        (Some(v), Some(j)) => {
            let class = class_of(j);
            v.classes()
                .iter()
                .position(|c| c == class)
                .unwrap_or(usize::MAX)
        }
        _ => 0,
    };
    let mut sum = 0u64;
    let mut head = Vec::new();
    for d in &schedule.entries {
        sum += u64::from(d.gpus);
        if sum > total {
            break;
        }
        head.push(d);
    }
    let cut = head.len();
    if by_class {
        head.sort_by_key(|d| class_rank(d.job));
    }
    let order: Vec<&Demand> = head
        .into_iter()
        .chain(schedule.entries[cut..].iter())
        .collect();
    // 3. The chooser's GPUs.
    let mut placed: HashMap<JobId, Vec<GpuId>> = HashMap::new();
    for d in order {
        let Some(job) = jobs.get(d.job) else { continue };
        let class = class_of(job).to_string();
        let candidates: Vec<GpuId> = cluster
            .gpus()
            .iter()
            .map(|g| g.id)
            .filter(|g| free[g.index()])
            .collect();
        let Some(gpus) = choose(&class, &candidates, d.gpus as usize) else {
            // 4. No backfilling.
            break;
        };
        for g in &gpus {
            free[g.index()] = false;
        }
        placed.insert(d.job, gpus.clone());
        out.launch.push(Assignment {
            job: d.job,
            gpus,
            batch_size: d.batch_size,
            host: None,
            share: None,
            node: None,
        });
    }
    // Running jobs: the same GPUs keep running; others are moved (in
    // `launch`) or stopped.
    out.launch.retain(|a| {
        jobs.get(a.job).is_none_or(|j| {
            !(j.is_running() && {
                let mut x = j.allocation.clone();
                let mut y = a.gpus.clone();
                x.sort();
                y.sort();
                x == y
            })
        })
    });
    for job in jobs.running() {
        if listed.contains(&job.id()) && !placed.contains_key(&job.id()) {
            out.preempt.push(job.id());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::test_util::*;
    use blox_core::variability::Variability;
    use blox_core::*;
    use proptest::prelude::*;

    proptest! {
        // Whatever the load and the factors, PM-First, PAL, Random- and
        // Packed-Non-Sticky give no GPU to two jobs, use no GPU that a job
        // outside the decision still holds, give each job what it asked,
        // stop every running job the order leaves out or does not place,
        // and place a prefix of their walk (no backfill).
        #[test]
        fn the_non_sticky_placements_keep_the_rules(
            sizes in proptest::collection::vec(1u32..7, 1..14),
            running in proptest::collection::vec(any::<bool>(), 14),
            listed in proptest::collection::vec(any::<bool>(), 14),
            factors in proptest::collection::vec(0.5f64..3.0, 16),
            which in 0usize..4,
        ) {
            let mut cluster = ClusterState::homogeneous(4, 4);
            let rows: Vec<Vec<f64>> = factors.iter().map(|f| vec![*f]).collect();
            cluster.set_variability(Some(
                Variability::new(vec!["c".into()], rows, Default::default(), "c".into()).unwrap(),
            ));
            let mut state = JobState::new();
            let mut next = 0u32;
            for (i, &n) in sizes.iter().enumerate() {
                let j = job(i as u64, i as f64, n);
                if running[i] && next + n <= 16 {
                    add(&mut state, &mut cluster, j, &(next..next + n).collect::<Vec<_>>());
                    next += n;
                } else {
                    add(&mut state, &mut cluster, j, &[]);
                }
            }
            let order: Vec<&Job> = state
                .runnable()
                .filter(|j| listed[j.id().0 as usize])
                .collect();
            let schedule = Schedule::in_priority_order(order);
            let name = ["pm-first", "pal", "packed-non-sticky", "random-non-sticky"][which];
            let mut p = registry::build_placement(&ModuleConfig::named("placement", name)).unwrap();
            let d = p.place(&info(0.0), &schedule, &state, &cluster);
            let mut used = std::collections::HashSet::new();
            let launched: std::collections::HashSet<JobId> = d.launch.iter().map(|a| a.job).collect();
            for a in &d.launch {
                let j = state.get(a.job).unwrap();
                prop_assert_eq!(a.gpus.len() as u32, j.spec.requested_gpus);
                for g in &a.gpus {
                    prop_assert!(used.insert(*g), "{g:?} twice");
                }
            }
            for j in state.running() {
                let stops = d.preempt.contains(&j.id());
                let moves = launched.contains(&j.id());
                if !stops && !moves {
                    // It keeps its GPUs: nobody else may get them.
                    for g in &j.allocation {
                        prop_assert!(used.insert(*g), "{g:?} of job {} kept and given", j.id());
                    }
                }
                prop_assert!(!(stops && moves));
            }
            // Every job the order lists and the placement leaves out ends
            // the walk: those placed come before it (for PM-First and PAL,
            // in the order re-sorted by class: all one class here).
            let pos: Vec<bool> = schedule
                .entries
                .iter()
                .map(|e| {
                    launched.contains(&e.job)
                        || state.get(e.job).is_some_and(|j| {
                            j.is_running() && !d.preempt.contains(&e.job)
                        })
                })
                .collect();
            if let Some(first_out) = pos.iter().position(|p| !p) {
                prop_assert!(pos[first_out..].iter().all(|p| !p), "{pos:?}");
            }
        }
    }
}
