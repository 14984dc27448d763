//! The trace's own times: each task arrives at its creation time and leaves
//! at its deletion time; a task that fits nowhere when it arrives fails. The
//! order of equal times is the reference's (`simulator.go`, its replay of
//! timed pods): the tasks as the packing experiment orders them (shuffled,
//! inflated), each split into an arrival and, if it has one, a departure,
//! stably sorted by time.

use crate::openb::{NodeSpec, TaskSpec, GPU_MILLI};
use crate::packing::{start, PackingError, PackingSetup};
use crate::policy::SharePolicy;

/// One arrival or departure.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedEvent {
    /// When, seconds.
    pub time_s: i64,
    /// The task.
    pub task: String,
    /// True for an arrival, false for a departure.
    pub arrival: bool,
    /// The node (index into [`TimedRun::nodes`]) the task holds; `None` for
    /// an arrival that failed, or a departure of a task that never ran.
    pub node: Option<usize>,
    /// Its GPUs there.
    pub gpus: Vec<u32>,
    /// GPU thousandths allocated after the event.
    pub used_milli: i64,
    /// The cluster's fragment ratio after the event, percent.
    pub frag_percent: f64,
    /// For an arrival that failed: why no node took it.
    pub why: Option<String>,
}

/// A finished timed run.
#[derive(Debug, Clone)]
pub struct TimedRun {
    /// Node names, name-sorted.
    pub nodes: Vec<String>,
    /// Every event in order.
    pub events: Vec<TimedEvent>,
    /// GPUs in the cluster.
    pub total_gpus: u32,
    /// Tasks placed and failed.
    pub placed: usize,
    /// See `placed`.
    pub failed: usize,
    /// GPU allocation averaged over time from the first to the last event, percent.
    pub mean_allocated_percent: f64,
    /// The highest allocation, percent.
    pub peak_allocated_percent: f64,
}

/// Runs the tasks by their times.
pub fn run_timed(
    node_specs: &[NodeSpec],
    tasks: &[TaskSpec],
    policy: &mut dyn SharePolicy,
    setup: &PackingSetup,
) -> Result<TimedRun, PackingError> {
    if let Some(t) = tasks.iter().find(|t| t.creation_s.is_none()) {
        return Err(PackingError::NoTimes(t.name.clone()));
    }
    let (list, mut placer) = start(node_specs, tasks, policy, setup)?;
    // (time, task index, arrival), stably sorted by time.
    let mut order: Vec<(i64, usize, bool)> = Vec::with_capacity(list.len() * 2);
    for (i, t) in list.iter().enumerate() {
        order.push((t.creation_s.unwrap_or(0), i, true));
        if let Some(d) = t.deletion_s {
            order.push((d, i, false));
        }
    }
    order.sort_by_key(|e| e.0);
    let capacity = placer.total_gpus() as f64 * GPU_MILLI as f64;
    let mut held: Vec<Option<(usize, Vec<u32>)>> = vec![None; list.len()];
    let (mut used, mut placed, mut failed) = (0i64, 0usize, 0usize);
    let (mut area, mut peak) = (0.0f64, 0i64);
    let mut events = Vec::with_capacity(order.len());
    for (k, &(time, i, arrival)) in order.iter().enumerate() {
        if k > 0 {
            area += used as f64 * (time - order[k - 1].0) as f64;
        }
        let task = &list[i];
        let mut why = None;
        let (node, gpus) = if arrival {
            match placer.place(task)? {
                Some((n, g)) => {
                    placed += 1;
                    used += task.total_gpu_milli();
                    held[i] = Some((n, g.clone()));
                    (Some(n), g)
                }
                None => {
                    failed += 1;
                    why = Some(placer.why_not(task));
                    (None, Vec::new())
                }
            }
        } else if let Some((n, g)) = held[i].take() {
            placer.remove(task, n, &g);
            used -= task.total_gpu_milli();
            (Some(n), g)
        } else {
            (None, Vec::new())
        };
        peak = peak.max(used);
        events.push(TimedEvent {
            time_s: time,
            task: task.name.clone(),
            arrival,
            node,
            gpus,
            used_milli: used,
            frag_percent: placer.frag().1,
            why,
        });
    }
    let span = match (order.first(), order.last()) {
        (Some(a), Some(b)) if b.0 > a.0 => (b.0 - a.0) as f64,
        _ => 0.0,
    };
    Ok(TimedRun {
        total_gpus: placer.total_gpus(),
        nodes: placer.node_names,
        events,
        placed,
        failed,
        mean_allocated_percent: if span > 0.0 && capacity > 0.0 {
            100.0 * area / span / capacity
        } else {
            0.0
        },
        peak_allocated_percent: if capacity > 0.0 {
            100.0 * peak as f64 / capacity
        } else {
            0.0
        },
    })
}
