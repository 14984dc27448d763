//! What if another policy had run? `blox whatif` takes the state of a
//! scheduler at a moment — a live one's (`--scheduler`), or an event log's
//! at `--at` (a cluster's, or a simulation's `events.jsonl`) — and replays
//! what follows under other configs, in the simulator: the jobs active then
//! carry on from their progress, the jobs that arrived later arrive again.
//!
//! A job's work is the trace's where the config's own `[workload]` has the
//! job exactly as the history submitted it (a simulation's log: a
//! profile-driven job keeps its model, batch and target), else what it took
//! where the history shows it (a finished job's productive GPU-seconds over
//! its requested GPUs), else its `duration_s`, else unknown: it runs on in
//! the replay and its JCT is not counted. Replayed under the config that ran, a simulation's log is
//! reproduced decision for decision (`tests/whatif.rs`).

mod history;
mod live;
mod live_log;
mod resume;
mod table;

pub use history::{Actual, History, HistoryNode, Outage, Work};
pub use live::{LiveJob, LivePhase, LiveWorker};
pub use table::{write_predictions, Comparison, Row};

use crate::backend::SimConfig;
use crate::run::{SimError, Simulation};
use crate::workload::{SimJob, WorkModel};
use crate::SimResult;
use blox_config::Config;
use blox_core::*;
use std::path::Path;

/// Run time given to a job of unknown work: it never finishes.
const UNKNOWN_WORK_S: f64 = 1e15;

/// One replay: its config's label and what it produced.
pub struct Replay {
    pub label: String,
    pub result: SimResult,
    /// Notes on what the replay could not carry over (GPUs the config's
    /// cluster lacks, …).
    pub notes: Vec<String>,
    /// Its decisions.
    pub events: Vec<blox_core::round::events::Event>,
    /// Its config's round length.
    pub round_s: f64,
}

impl Replay {
    /// Its decisions against the history's from the start on, rounds
    /// within `slack`, each event's round read from its time on the
    /// history's clock (`None` when the history has no decisions to
    /// compare).
    pub fn against_history(&self, h: &History, slack: u64) -> Option<blox_eventlog::EventDiff> {
        (!h.tail.is_empty()).then(|| {
            blox_eventlog::diff_on_clock(&h.tail, &self.events, slack, h.at_s, self.round_s)
        })
    }
}

/// Replays `h` under `cfg` (its policies, `[run]`, `[sim]`; its `[cluster]`
/// where the history does not know the cluster), writing the replay's
/// decisions to `events` if given.
pub fn replay(
    h: &History,
    cfg: &Config,
    label: &str,
    events: Option<&Path>,
) -> Result<Replay, SimError> {
    let mut policies = registry::build_policies(&cfg.admission, &cfg.scheduling, &cfg.placement)?;
    policies.names = blox_core::PolicyNames::new(
        cfg.admission.policy.clone(),
        cfg.scheduling.policy.clone(),
        cfg.placement.policy.clone(),
    );
    let sim = SimConfig {
        start_after_first_round: false,
        ..SimConfig::from_section(&cfg.section("sim"))?
    };
    let round_s = cfg.run.round_s.get();
    let mut notes = Vec::new();
    let (mut cluster, planned) = replay_cluster(h, cfg, &mut notes)?;
    let work = |j: &JobSpec| h.work_of(j.id).map_or(UNKNOWN_WORK_S, |w| w.duration_s);
    // A job the config's own workload has, submitted exactly as the history
    // shows it (a simulation's log replayed under the config that ran),
    // keeps the trace's work: a profile-driven job its model, batch and
    // target, not the GPU-seconds it took under the policy that ran.
    let (traced, host) = traced_jobs(cfg, &cluster, h);
    let trace = arrivals(h, &traced, work);
    let mut run = cfg.run.clone();
    run.track_jobs = None;
    let hosts_jobs = policies.placement.places_jobs_without_gpus();
    let mut s = Simulation::new(policies, cluster.clone(), run, sim.clone(), Vec::new())?;
    // The jobs active at the start keep their GPUs where the cluster has them.
    let profile = cfg.profile()?;
    let resumed = resume::Resume {
        h,
        profile: &profile,
        hosts_jobs,
        placement: &cfg.placement.policy,
        label,
    };
    let jobs = resumed.active_jobs(&mut cluster, &mut notes);
    profiled_note(h, &traced, &mut notes);
    let mut backend = crate::SimBackend::new(sim, round_s, trace, &cluster);
    if let Some(host) = host {
        backend = backend.with_host_profiles(host);
    }
    backend.start_at(h.at_s);
    backend.plan_nodes(planned);
    for j in jobs.active() {
        match h.startup.get(&j.id()) {
            // Its launches start up as they did in the log (one that had
            // not run yet gets its measured start-up too).
            Some(&s) if j.last_startup_s.is_none() => {
                let mut j = j.clone();
                j.last_startup_s = Some(s);
                backend.adopt(&j, work(&j.spec), h.at_s);
            }
            _ => backend.adopt(j, work(&j.spec), h.at_s),
        }
    }
    s.backend = backend;
    let mut s = s.map_loop(|b| {
        b.jobs(jobs)
            .cluster_state(cluster)
            .profile(profile)
            .first_round(h.start_round)
    });
    if let Some(p) = events {
        s.log_events(p)?;
    }
    s.keep_events();
    // Until every job of known work ended (one of unknown work runs on).
    let unknown = h.unknown_work();
    while s.step()? {
        let lp = &s.round_loop;
        if lp.waiting().is_empty()
            && lp.jobs.num_active() <= unknown
            && s.backend.exhausted()
            && lp.jobs.active().all(|j| h.work_of(j.id()).is_none())
        {
            break;
        }
    }
    let events = s.take_events();
    let result = s.finish();
    Ok(Replay {
        label: label.to_string(),
        result,
        notes,
        events,
        round_s,
    })
}

/// The replay's cluster: the history's nodes where it knows them, else
/// the config's `[cluster]`; with the history's outages (and the nodes
/// joining or leaving later, planned).
fn replay_cluster(
    h: &History,
    cfg: &Config,
    notes: &mut Vec<String>,
) -> Result<(ClusterState, Vec<(f64, ClusterEvent)>), SimError> {
    let (mut cluster, mut planned) = match &h.nodes {
        Some(nodes) => history_cluster(nodes, h.at_s, cfg)?,
        None if !cfg.has_section("cluster") && !cfg.has_section("runtime") => {
            return Err(SimError::Config(ConfigError::Parse {
                file: cfg.file.clone(),
                message: "missing [cluster] section: the history names no nodes (a simulation's log: its starting nodes are its config's), so the replay needs the config's cluster (e.g. nodes = 16, gpus_per_node = 4)".into(),
            }))
        }
        None => (cfg.cluster_state()?, Vec::new()),
    };
    outages(h, cfg, &mut cluster, &mut planned, notes);
    Ok((cluster, planned))
}

/// Jobs still to be admitted, and those arriving later, in order of
/// arrival: the trace's job where `traced` has it, else one of the work
/// the history shows (`work`).
fn arrivals(
    h: &History,
    traced: &std::collections::HashMap<u64, SimJob>,
    work: impl Fn(&JobSpec) -> f64,
) -> Vec<SimJob> {
    let mut trace: Vec<SimJob> = (h.waiting.iter().map(|j| &j.spec))
        .chain(&h.future)
        .map(|spec| match traced.get(&spec.id.0) {
            Some(j) => j.clone(),
            None => SimJob {
                startup_s: h.startup.get(&spec.id).copied(),
                converge_at: None,
                spec: spec.clone(),
                work: WorkModel::Duration {
                    duration_s: work(spec),
                },
            },
        })
        .collect();
    trace.sort_by(|a, b| a.spec.arrival_s.total_cmp(&b.spec.arrival_s));
    trace
}

/// A profile-driven job active at the start continues as a job of the
/// work it took (its goodput model and batch tuner's state are not in the
/// log): a policy that reads goodput decides otherwise for it. Says so.
fn profiled_note(
    h: &History,
    traced: &std::collections::HashMap<u64, SimJob>,
    notes: &mut Vec<String>,
) {
    let profiled = (h.active.iter())
        .filter(|(j, _)| {
            traced
                .get(&j.id().0)
                .is_some_and(|t| matches!(t.work, WorkModel::Profile { .. }))
        })
        .count();
    if profiled > 0 {
        notes.push(format!(
            "{profiled} job(s) active at {:.0} s ran on goodput profiles: the log does not keep their models' state (progress per epoch, batch tuner, throughput fits), so they carry on as jobs of the GPU time they still need at their requested size; decisions about them can differ from the log's. Replay from the log's start (no --at) to keep their profiles",
            h.at_s
        ));
    }
}

/// The jobs of `cfg`'s own workload that the history submitted exactly as
/// the trace has them (same id, name, arrival, GPUs and every other field of
/// the spec), active at the start or later, by id, and the workload's host profiles when any job matched.
/// A config whose workload does not load, or holds other jobs, gives none.
fn traced_jobs(
    cfg: &Config,
    cluster: &ClusterState,
    h: &History,
) -> (
    std::collections::HashMap<u64, SimJob>,
    Option<crate::workload::host_profile::HostProfiles>,
) {
    let mut out = std::collections::HashMap::new();
    if !cfg.has_section("workload") {
        return (out, None);
    }
    let section = cfg.section("workload");
    let Ok(jobs) = crate::workload::load_for(&section, cfg.run.seed, Some(cluster)) else {
        return (out, None);
    };
    let specs: std::collections::HashMap<u64, &JobSpec> = h
        .waiting
        .iter()
        .map(|j| &j.spec)
        .chain(&h.future)
        .chain(h.active.iter().map(|(j, _)| &j.spec))
        .map(|s| (s.id.0, s))
        .collect();
    for j in &jobs {
        if specs.get(&j.spec.id.0).is_some_and(|s| **s == j.spec) {
            out.insert(j.spec.id.0, j.clone());
        }
    }
    let host = if out.is_empty() {
        None
    } else {
        crate::workload::load_host_profiles(&section, &jobs).ok()
    };
    (out, host)
}

/// The history's node failures, kept whatever the replay's policies: those
/// before the start are in the cluster's health (its failure record for
/// quarantine and the failure rate Young/Daly reads; nodes still down then
/// start offline), the later ones, and the repairs, come at their times. A
/// config's `[failures]` draws none in a replay (said in a note): the
/// cluster fails as it did.
fn outages(
    h: &History,
    cfg: &Config,
    cluster: &mut ClusterState,
    planned: &mut Vec<(f64, ClusterEvent)>,
    notes: &mut Vec<String>,
) {
    if cfg.has_section("failures") {
        notes.push(if h.outages.is_empty() {
            "[failures] draws no failures in a what-if: nodes fail as in the history, which shows none".to_string()
        } else {
            format!(
                "[failures] draws no failures in a what-if: the history's {} node failures come at their times",
                h.outages.len()
            )
        });
    }
    if h.outages.is_empty() {
        return;
    }
    let at = h.at_s;
    // GPUs up before the start, for the failure rate the loop estimates:
    // each node's GPUs from its join (the log's start for the config's
    // nodes) to its leave, less its outages.
    let mut changes: Vec<(f64, f64)> = Vec::new();
    for n in cluster.nodes() {
        let gpus = n.gpus.len() as f64;
        let hn = h
            .nodes
            .as_ref()
            .and_then(|v| v.get(n.id.index()))
            .and_then(|x| x.as_ref());
        let (joined, left) = hn.map_or((h.first_s, None), |x| (x.joined_s, x.left_s));
        changes.push((joined.max(h.first_s), gpus));
        if let Some(l) = left {
            changes.push((l, -gpus));
        }
    }
    for o in &h.outages {
        let gpus = cluster
            .nodes()
            .get(o.node as usize)
            .map_or(0.0, |n| n.gpus.len() as f64);
        changes.push((o.failed_s, -gpus));
        if let Some(r) = o.repaired_s {
            changes.push((r, gpus));
        }
    }
    changes.retain(|(t, _)| *t < at);
    changes.sort_by(|a, b| a.0.total_cmp(&b.0));
    let health = cluster.health_mut();
    let mut up = 0.0f64;
    for (t, d) in changes {
        health.count_uptime(t, up.max(0.0) as u32);
        up += d;
    }
    health.count_uptime(at, up.max(0.0) as u32);
    for o in &h.outages {
        let node = NodeId(o.node);
        if o.failed_s < at {
            cluster.health_mut().note_failure(node, o.failed_s);
            match o.repaired_s {
                Some(r) if r < at => {
                    cluster.health_mut().down.remove(&node);
                }
                _ => {
                    if cluster.remove_node(node).is_err() {
                        notes.push(format!(
                            "the history's node {} was down at the start, but the replay's cluster has no such node",
                            o.node
                        ));
                    }
                }
            }
        } else {
            planned.push((o.failed_s, ClusterEvent::NodeFailed(node)));
        }
        if let Some(r) = o.repaired_s.filter(|r| *r >= at) {
            planned.push((r, ClusterEvent::NodeRepaired(node)));
        }
    }
}

/// The cluster a history ran on, as it was at `at_s` (nodes that left by
/// then are there, offline, so node ids stay the history's), and the nodes
/// that join or leave after it, at their times. A node the history does not
/// show is the config's node of that id (a simulation logs only the nodes
/// that joined after its start). The config's `[cluster.topology]` levels
/// place nodes by their labels.
fn history_cluster(
    nodes: &[Option<HistoryNode>],
    at_s: f64,
    cfg: &Config,
) -> Result<(ClusterState, Vec<(f64, ClusterEvent)>), SimError> {
    let base = if nodes.iter().any(Option::is_none) {
        Some(cfg.cluster_state()?)
    } else {
        None
    };
    let mut c = ClusterState::new();
    if let Some(levels) = cfg.topology_levels()? {
        c.set_topology(blox_core::topology::Topology::empty(levels).ok());
    }
    let mut planned = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let id = NodeId(i as u32);
        let (spec, joined, left) = match n {
            Some(n) => (n.spec.clone(), n.joined_s, n.left_s),
            None => {
                let spec = base
                    .as_ref()
                    .and_then(|b| b.nodes().get(i))
                    .map_or_else(|| NodeSpec::with_gpus(0), |n| n.spec.clone());
                (spec, f64::NEG_INFINITY, None)
            }
        };
        if joined > at_s {
            planned.push((joined, ClusterEvent::NodeAdded(spec)));
        } else {
            c.add_node(spec);
        }
        match left {
            Some(t) if t <= at_s && joined <= at_s => {
                // Just added: it exists.
                let _ = c.remove_node(id);
            }
            Some(t) => planned.push((t, ClusterEvent::NodeRemoved(id))),
            None => {}
        }
    }
    Ok((c, planned))
}
