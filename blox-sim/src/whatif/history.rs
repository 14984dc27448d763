//! The state a replay starts from ([`History`]), from an event log.

use super::live_log::{join_runs, measured_startups, Joined};
use blox_core::round::events::{Event, GpuPlace, What};
use blox_core::*;
use blox_eventlog::EventLogError;
use std::collections::{BTreeMap, HashMap};

/// A job's work for a replay: its run time at its requested GPUs, and
/// where that came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Work {
    pub duration_s: f64,
    pub from: &'static str,
}

/// A node of the history's cluster: what it offers and when it was there
/// (the history's clock).
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryNode {
    pub spec: NodeSpec,
    pub joined_s: f64,
    pub left_s: Option<f64>,
}

/// A node's failure in the history: when it failed and when it was
/// repaired (`None`: not by the end of the log).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outage {
    pub node: u32,
    pub failed_s: f64,
    pub repaired_s: Option<f64>,
}

/// What happened to a job in the history (after the replay's start).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Actual {
    /// When it first got GPUs (before the replay's start or after).
    pub start_s: Option<f64>,
    pub finish_s: Option<f64>,
    /// It ended without finishing (failed, cancelled, rejected).
    pub ended_otherwise: bool,
}

/// Where a replay starts: the jobs then, those still to come, each one's
/// work, and what happened after (for comparison).
#[derive(Clone, Debug, Default)]
pub struct History {
    /// The replay's start, on the history's clock, and the number of the
    /// history's round then.
    pub at_s: f64,
    pub start_round: u64,
    /// The history's decisions from the start on (an event log's), to
    /// compare the replays with.
    pub tail: Vec<Event>,
    /// Admitted, unfinished jobs then (running ones with their GPUs as
    /// (node, index in node)); progress and service so far filled in.
    pub active: Vec<(Job, Vec<GpuPlace>)>,
    /// Of those running, the ones that share their GPU: thousandths of it.
    pub shares: HashMap<JobId, u32>,
    /// Submitted, not yet admitted then.
    pub waiting: Vec<Job>,
    /// Submitted after the start.
    pub future: Vec<JobSpec>,
    /// Each job's work, where known.
    pub work: HashMap<JobId, Work>,
    /// The cluster's nodes by id, where the history knows them (a live
    /// scheduler's workers, a log's `node_joined` events); `None`: each
    /// config's `[cluster]`. A node the history does not show (`None`: a
    /// log that starts after it joined, or a simulation's starting nodes)
    /// is the config's node of that id.
    pub nodes: Option<Vec<Option<HistoryNode>>>,
    /// Node failures and repairs, in the log's order (facts of the cluster
    /// a replay keeps, whatever its policies).
    pub outages: Vec<Outage>,
    /// The log's first time (its first round).
    pub first_s: f64,
    /// What happened to each job after the start, where the history shows it.
    pub actual: HashMap<JobId, Actual>,
    /// What the history lacks (a log cut short or rotated, …).
    pub notes: Vec<String>,
    /// A live cluster's log: each finished job's start-up per launch as
    /// measured (its `finished` event's `startup_s` over its launches),
    /// which its launches in a replay take in place of the config's
    /// `[sim]` start-up model. (A simulation's log gets its start-ups from
    /// the config that ran it.)
    pub startup: HashMap<JobId, f64>,
}

impl History {
    pub fn work_of(&self, id: JobId) -> Option<Work> {
        self.work.get(&id).copied()
    }

    /// Jobs of the replay whose work is unknown.
    pub fn unknown_work(&self) -> usize {
        self.active
            .iter()
            .map(|(j, _)| j.id())
            .chain(self.waiting.iter().map(|j| j.id()))
            .chain(self.future.iter().map(|s| s.id))
            .filter(|id| !self.work.contains_key(id))
            .count()
    }

    /// Every job of the replay (active, waiting, future), by id.
    pub fn job_ids(&self) -> Vec<JobId> {
        let mut v: Vec<JobId> = self
            .active
            .iter()
            .map(|(j, _)| j.id())
            .chain(self.waiting.iter().map(|j| j.id()))
            .chain(self.future.iter().map(|s| s.id))
            .collect();
        v.sort();
        v
    }

    /// The state of an event log at `at_s` (its first round when `None`;
    /// else its first round at or after `at_s`, on the grid of `round_s`
    /// from its last event before): the decisions before it are carried
    /// out, those from it on replayed.
    /// `sim`: the start-up a launch and a restart cost before they make
    /// progress (the replay config's `[sim]`). Jobs must have `submitted`
    /// events (logs of this version on); a log that starts after its jobs
    /// were submitted (rotated, cut) loses them, which the notes say.
    pub fn from_events(
        events: &[Event],
        at_s: Option<f64>,
        sim: &crate::SimConfig,
        round_s: f64,
    ) -> Result<History, EventLogError> {
        Self::from_events_checkpointed(events, at_s, sim, round_s, None)
    }

    /// [`History::from_events`] for a log whose jobs saved a checkpoint
    /// every `checkpoint_interval_s` from each launch's first iteration
    /// (`[run] checkpoint_interval_s`; a job's own interval in its spec
    /// comes first): a stop rolled a job back to its last one, so that
    /// work does not count as its progress at the start.
    pub fn from_events_checkpointed(
        events: &[Event],
        at_s: Option<f64>,
        sim: &crate::SimConfig,
        round_s: f64,
        checkpoint_interval_s: Option<f64>,
    ) -> Result<History, EventLogError> {
        // A scheduler that restarted starts its clock and rounds again.
        let restarts: Vec<usize> = (1..events.len())
            .filter(|&i| {
                events[i].round < events[i - 1].round || events[i].time_s < events[i - 1].time_s
            })
            .collect();
        let mut notes = Vec::new();
        let joined = join_runs(events, &restarts, round_s);
        let (events, boundaries) = one_history(events, &joined, &restarts, &mut notes);
        let startup = measured_startups(events);
        let live = !startup.is_empty() || events.iter().any(|e| e.unix_s.is_some());
        let first_t = events.first().map_or(0.0, |e| e.time_s);
        let (from, at, start_round) =
            start_of(events, at_s.unwrap_or(first_t), round_s, &boundaries, live);
        let mut walk = Walk {
            sim,
            overheads: (sim.launch_overhead_s, sim.restart_overhead_s),
            checkpoint_interval_s,
            round_s,
            live,
            h: History {
                at_s: at,
                first_s: first_t,
                start_round,
                tail: events[from..].to_vec(),
                notes,
                ..History::default()
            },
            jobs: BTreeMap::new(),
            unknown: BTreeMap::new(),
            nodes: Vec::new(),
            typeless: 0,
        };
        let mut last_t = first_t;
        let mut next_boundary = boundaries.iter().peekable();
        for (i, e) in events.iter().enumerate() {
            // A scheduler restart: what ran stopped with it (a job its
            // workers kept running is adopted below, with no start-up).
            while let Some(&&(b, stopped_at)) = next_boundary.peek() {
                if b > i {
                    break;
                }
                next_boundary.next();
                let end = (boundaries.iter().map(|&(x, _)| x))
                    .find(|&x| x > b)
                    .unwrap_or(events.len());
                walk.scheduler_restarted(&events[b..end], stopped_at);
            }
            last_t = last_t.max(e.time_s);
            if !walk.cluster_event(e) {
                walk.job_event(e, &startup);
            }
        }
        Ok(walk.finish(startup, last_t))
    }
}

/// The part of a log that is one history: a live log's runs joined on the
/// Unix clock its events carry (`joined`, with where each later run
/// starts), or else the last run only.
fn one_history<'a>(
    events: &'a [Event],
    joined: &'a Option<Joined>,
    restarts: &[usize],
    notes: &mut Vec<String>,
) -> (&'a [Event], Vec<(usize, f64)>) {
    match (joined, restarts.last()) {
        (Some(j), _) => {
            notes.push(j.note.clone());
            (&j.events, j.boundaries.clone())
        }
        (None, Some(&i)) => {
            notes.push(format!(
                "the log spans {} scheduler restarts (its clock starts again at each); only the part after the last ({} of {} events) is replayed",
                restarts.len(),
                events.len() - i,
                events.len()
            ));
            (&events[i..], Vec::new())
        }
        (None, None) => (events, Vec::new()),
    }
}

/// Where a replay from `want` starts: the index of the first event from
/// then on, the time and the round number. It is the log's first round at
/// or after `want`: one with events, or one between them on the grid of
/// `round_s`.
fn start_of(
    events: &[Event],
    want: f64,
    round_s: f64,
    boundaries: &[(usize, f64)],
    live: bool,
) -> (usize, f64, u64) {
    let from = events
        .iter()
        .position(|e| e.time_s >= want)
        .unwrap_or(events.len());
    let (mut at, mut start_round) = match events.get(from) {
        Some(e) => (e.time_s, e.round),
        None => (want, events.last().map_or(0, |e| e.round + 1)),
    };
    if let Some(prev) = from.checked_sub(1).map(|i| &events[i]) {
        let n = ((want - prev.time_s) / round_s).ceil().max(1.0);
        let t = prev.time_s + n * round_s;
        if t < at || from == events.len() {
            at = t;
            start_round = prev.round + n as u64;
        }
    }
    // A live scheduler's rounds keep to a grid of `round_s` but each
    // starts a little late (milliseconds; more when a round waits): the
    // replay's grid is the log's least late rounds', not that of the
    // round it starts at (a job submitted just after that round's grid
    // time is seen by the next round, as it was).
    if live {
        let late = |t: f64| {
            let k = (t - at) / round_s;
            (k - k.round()) * round_s
        };
        // The grid of the scheduler run the start falls in (each run of a
        // restarted scheduler keeps its own).
        let run_start = (boundaries.iter().map(|&(b, _)| b))
            .filter(|&b| b <= from)
            .max()
            .unwrap_or(0);
        let run_end = (boundaries.iter().map(|&(b, _)| b))
            .find(|&b| b > from)
            .unwrap_or(events.len());
        at += events[run_start..run_end]
            .iter()
            .map(|e| late(e.time_s))
            .fold(0.0_f64, f64::min);
    }
    (from, at, start_round)
}

/// The walk over a log's events: each job tracked, the cluster's nodes and
/// outages, into the history it fills.
struct Walk<'s> {
    sim: &'s crate::SimConfig,
    /// The start-up of a launch and of a restart (the config's `[sim]`).
    overheads: (f64, f64),
    checkpoint_interval_s: Option<f64>,
    round_s: f64,
    /// A live cluster's log (measured start-ups or Unix times).
    live: bool,
    h: History,
    jobs: BTreeMap<JobId, Tracked>,
    /// Jobs with decisions but no `submitted` event: how many events.
    unknown: BTreeMap<JobId, usize>,
    nodes: Vec<Option<HistoryNode>>,
    /// Nodes that joined without their GPU type.
    typeless: usize,
}

impl Walk<'_> {
    /// A live log's cluster changes take effect in their round, at its
    /// time on the grid (the round that saw a node join placed on it).
    fn on_grid(&self, t: f64) -> f64 {
        if self.live {
            let at = self.h.at_s;
            at + ((t - at) / self.round_s).round() * self.round_s
        } else {
            t
        }
    }

    /// The scheduler stopped at `stopped_at` and its next run logged
    /// `run`: what ran stopped with it, but the jobs that run adopted
    /// (before launching them again) ran on through the restart.
    fn scheduler_restarted(&mut self, run: &[Event], stopped_at: f64) {
        let mut adopted = std::collections::HashSet::new();
        let mut relaunched = std::collections::HashSet::new();
        for e in run {
            match (&e.what, e.job) {
                (What::Adopted { .. }, Some(j)) if !relaunched.contains(&j) => {
                    adopted.insert(j);
                }
                (What::Launched { .. }, Some(j)) => {
                    relaunched.insert(j);
                }
                _ => {}
            }
        }
        let at = self.h.at_s;
        for (id, t) in self.jobs.iter_mut() {
            if !adopted.contains(id) {
                t.restarted(stopped_at, at);
            }
        }
    }

    /// A node joined, left, failed or was repaired: taken in, and true;
    /// false for any other event.
    fn cluster_event(&mut self, e: &Event) -> bool {
        match &e.what {
            What::NodeJoined {
                node, gpus, spec, ..
            } => {
                let n = *node as usize;
                if self.nodes.len() <= n {
                    self.nodes.resize(n + 1, None);
                }
                let spec = match spec {
                    Some(s) => (**s).clone(),
                    None => {
                        self.typeless += 1;
                        NodeSpec::with_gpus(*gpus)
                    }
                };
                // A node that joined again after a restart is the node it
                // was (the runs are joined).
                if self.nodes[n].as_ref().is_some_and(|x| x.left_s.is_none()) {
                    return true;
                }
                self.nodes[n] = Some(HistoryNode {
                    spec,
                    joined_s: self.on_grid(e.time_s),
                    left_s: None,
                });
            }
            What::NodeLeft { node } => {
                let t = self.on_grid(e.time_s);
                if let Some(Some(n)) = self.nodes.get_mut(*node as usize) {
                    n.left_s = Some(t);
                }
            }
            What::NodeFailed { node } => {
                let failed_s = self.on_grid(e.time_s);
                self.h.outages.push(Outage {
                    node: *node,
                    failed_s,
                    repaired_s: None,
                });
            }
            What::NodeRepaired { node } => {
                let t = self.on_grid(e.time_s);
                if let Some(o) = (self.h.outages.iter_mut().rev())
                    .find(|o| o.node == *node && o.repaired_s.is_none())
                {
                    o.repaired_s = Some(t);
                }
            }
            _ => return false,
        }
        true
    }

    /// A job's event: its submission starts tracking it, the others are
    /// applied to it (`startup`: a live log's measured start-ups).
    fn job_event(&mut self, e: &Event, startup: &HashMap<JobId, f64>) {
        let Some(id) = e.job else { return };
        if let What::Submitted { spec } = &e.what {
            // Submitted again by a restarted scheduler: the job it was.
            if self.jobs.contains_key(&id) {
                return;
            }
            if e.time_s >= self.h.at_s {
                self.h.future.push((**spec).clone());
            }
            let mut t = Tracked::new((**spec).clone(), e.time_s);
            t.every = t.job.checkpoint_interval_s().or(self.checkpoint_interval_s);
            self.jobs.insert(id, t);
            return;
        }
        let Some(t) = self.jobs.get_mut(&id) else {
            *self.unknown.entry(id).or_default() += 1;
            return;
        };
        if let What::Launched { gpus, .. } | What::Adopted { gpus } = &e.what {
            // Its speed on the GPUs it got (the slowest's type, by the
            // config's `[sim]` speeds): its work is time at speed 1.
            let default = NodeSpec::with_gpus(1).gpu_type;
            t.speed = gpus
                .iter()
                .map(|g| {
                    let ty = (self.nodes.get(g.node as usize))
                        .and_then(|n| n.as_ref())
                        .map_or(default.as_str(), |n| n.spec.gpu_type.as_str());
                    self.sim.speed(t.job.spec.model.as_deref(), ty)
                })
                .fold(f64::INFINITY, f64::min);
            if !t.speed.is_finite() || t.speed <= 0.0 {
                t.speed = 1.0;
            }
        }
        let own = startup.get(&id).map(|&s| (s, s));
        t.apply(e, self.h.at_s, own.unwrap_or(self.overheads));
    }

    /// The history at the start: each job's state then, its work and what
    /// happened after, with notes on what the log lacks (`last_t`: its
    /// last event's time).
    fn finish(self, startup: HashMap<JobId, f64>, last_t: f64) -> History {
        let Walk {
            mut h,
            jobs,
            unknown,
            nodes,
            typeless,
            ..
        } = self;
        let at = h.at_s;
        h.startup = startup;
        if typeless > 0 {
            let d = NodeSpec::with_gpus(1);
            h.notes.push(format!(
                "{typeless} nodes joined without their GPU type or labels in the log (a log from before blox recorded them): replayed as `{}` GPUs of {} GiB with no topology labels",
                d.gpu_type, d.gpu_mem_gb
            ));
        }
        if !nodes.is_empty() {
            h.nodes = Some(nodes);
        }
        if at > last_t {
            h.notes.push(format!(
                "the log ends at {last_t:.0} s, before --at {at:.0} s: jobs then unfinished are replayed from where the log left them"
            ));
        }
        if !unknown.is_empty() {
            let ids: Vec<String> = unknown.keys().take(5).map(|j| j.to_string()).collect();
            h.notes.push(format!(
                "{} jobs have decisions but no `submitted` event (the log starts after they were submitted: rotated, cut, or written before blox recorded submissions), left out: {}{}",
                unknown.len(),
                ids.join(", "),
                if unknown.len() > 5 { ", …" } else { "" }
            ));
        }
        let mut unknown_work = 0;
        for (id, t) in jobs {
            if let Some(w) = t.work() {
                h.work.insert(id, w);
            } else {
                unknown_work += 1;
            }
            h.actual.insert(id, t.actual);
            if t.spec_future(at) {
                continue;
            }
            let work = h.work.get(&id).map(|w| w.duration_s);
            let share = t.share;
            match t.state_at(at, work) {
                State::Ended => {}
                State::Waiting(j) => h.waiting.push(j),
                State::Active(j, places) => {
                    if let Some(m) = share.filter(|_| j.is_running()) {
                        h.shares.insert(id, m);
                    }
                    h.active.push((j, places))
                }
            }
        }
        if unknown_work > 0 {
            h.notes.push(format!(
                "{unknown_work} jobs neither finished in the log nor gave duration_s: their work is unknown, they run on in the replays and their JCTs are not counted"
            ));
        }
        h.future.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
        h
    }
}

#[path = "tracked.rs"]
mod tracked;
use tracked::{State, Tracked};

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
