//! The decisions a round carried out, as events (`RoundReport::events`):
//! what the runtime appends to its event log and the simulator writes to
//! `events.jsonl`, so that a live run and its simulation can be compared
//! decision by decision (`blox events --diff`).
//!
//! Recording is off by default ([`RoundLoop::record_events`]): a run that
//! writes no log pays nothing.
//!
//! [`RoundLoop::record_events`]: super::RoundLoop::record_events

use crate::{ClusterState, GpuId, Job, JobId, JobSpec};
use serde::{Deserialize, Serialize};

/// One decision, as one JSON line: `{"round":3,"time_s":12.0,"job":7,
/// "name":"j7","event":"launched","gpus":[{"node":0,"gpu":1}]}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub round: u64,
    /// The round's time: seconds since the run started (the scheduler's
    /// clock on a cluster, simulated time in the simulator).
    pub time_s: f64,
    /// Wall-clock time, seconds since 1970 (UTC), where the backend keeps
    /// real time (the runtime fills it in; a simulation has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unix_s: Option<f64>,
    /// The job, for job events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobId>,
    /// The job's name (what a live run and its simulation share).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(flatten)]
    pub what: What,
}

/// What happened, tagged `"event"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum What {
    /// The loop saw the job for the first time (what was submitted, for
    /// replays: `blox whatif --events`). An input, not a decision: event
    /// diffs skip it.
    Submitted { spec: Box<JobSpec> },
    /// Admission accepted the job.
    Admitted,
    /// The job will never run: an impossible request or admission said no.
    Rejected { reason: String },
    /// The job started (or restarted) on these GPUs.
    Launched {
        gpus: Vec<GpuPlace>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        batch_size: Option<u32>,
        /// Thousandths of its one GPU, for a job that shares it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        share: Option<u32>,
        /// The node whose CPUs it takes, for a job without GPUs (`gpus`
        /// empty).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<u32>,
    },
    /// A job found running on a worker when the scheduler (re)started.
    Adopted { gpus: Vec<GpuPlace> },
    /// The job was stopped and went back to the queue.
    Preempted { reason: String },
    /// The job lost its GPUs without a decision (its node left, its process
    /// crashed and is retried) and went back to the queue.
    Requeued { reason: String },
    /// The job reached its end; `jct_s` counts from its submission.
    Finished {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        jct_s: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// GPU-seconds of service it attained, past each launch's start-up
        /// (lost work included).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attained_gpu_s: Option<f64>,
        /// Of those, GPU-seconds rolled back to a checkpoint and done again
        /// (`Job::lost_work_gpu_s`): its work, for replays, is
        /// `attained_gpu_s − lost_gpu_s` ([`What::finished_work_gpu_s`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lost_gpu_s: Option<f64>,
        /// Wall seconds it spent starting, over all its launches
        /// (`Job::startup_s`; `None` when none): a replay of a live log
        /// gives its launches the start-up they took.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        startup_s: Option<f64>,
    },
    /// The job ended without reaching its end.
    Failed { reason: String },
    /// Its user cancelled the job.
    Cancelled,
    /// The reason it waits changed kind (`wait_kind` as `WaitReason::kind`;
    /// `reason` in words); not repeated while the kind stays the same.
    Waiting { wait_kind: String, reason: String },
    /// Policy synthesis swapped the policies (`admission/scheduling/placement`).
    PolicySwitched { from: String, to: String },
    /// A node joined with this many GPUs; `worker` names it, where
    /// the backend knows it (the runtime fills it in); `spec` is what it
    /// offers (GPU type, memory, host, topology labels), so a replay of the
    /// log rebuilds the cluster it ran on (logs before it lack it).
    NodeJoined {
        node: u32,
        gpus: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spec: Option<Box<crate::NodeSpec>>,
    },
    /// A node left (scale-down, a worker gone).
    NodeLeft { node: u32 },
    /// A node failed (a failure model's; its jobs were requeued) ...
    NodeFailed { node: u32 },
    /// ... and is back after its repair.
    NodeRepaired { node: u32 },
    /// A repaired node kept out until `until_s` (it failed too often).
    NodeQuarantined { node: u32, until_s: f64 },
    /// A spare node called in for a job hit by a failure (`[cluster] spares`).
    SpareCalled { node: u32 },
}

/// A GPU by node and index inside the node (`CUDA_VISIBLE_DEVICES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuPlace {
    pub node: u32,
    pub gpu: u32,
}

impl GpuPlace {
    /// Where `gpus` are, in the order given.
    pub fn of(cluster: &ClusterState, gpus: &[GpuId]) -> Vec<GpuPlace> {
        gpus.iter()
            .map(|g| match cluster.gpu(*g) {
                Some(x) => GpuPlace {
                    node: x.node.0,
                    gpu: x.local_id,
                },
                None => GpuPlace {
                    node: u32::MAX,
                    gpu: g.0,
                },
            })
            .collect()
    }
}

impl What {
    /// A finished job's work in GPU-seconds: its attained service less the
    /// work it lost to checkpoint rollbacks (a log written before
    /// `lost_gpu_s` existed lost none it could say). `None` for other
    /// events, or a `finished` without its service.
    pub fn finished_work_gpu_s(&self) -> Option<f64> {
        match self {
            What::Finished {
                attained_gpu_s: Some(a),
                lost_gpu_s,
                ..
            } => Some((a - lost_gpu_s.unwrap_or(0.0)).max(0.0)),
            _ => None,
        }
    }

    /// The tag as written (`"launched"`), for filters and diffs.
    pub fn kind(&self) -> &'static str {
        match self {
            What::Submitted { .. } => "submitted",
            What::Admitted => "admitted",
            What::Rejected { .. } => "rejected",
            What::Launched { .. } => "launched",
            What::Adopted { .. } => "adopted",
            What::Preempted { .. } => "preempted",
            What::Requeued { .. } => "requeued",
            What::Finished { .. } => "finished",
            What::Failed { .. } => "failed",
            What::Cancelled => "cancelled",
            What::Waiting { .. } => "waiting",
            What::PolicySwitched { .. } => "policy_switched",
            What::NodeJoined { .. } => "node_joined",
            What::NodeLeft { .. } => "node_left",
            What::NodeFailed { .. } => "node_failed",
            What::NodeRepaired { .. } => "node_repaired",
            What::NodeQuarantined { .. } => "node_quarantined",
            What::SpareCalled { .. } => "spare_called",
        }
    }
}

impl std::fmt::Display for Event {
    /// One line for people: `t=12.0 s  round 3  job-7 (j7)  launched on 0:1,0:2`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "t={:.1} s  round {}  ", self.time_s, self.round)?;
        if let Some(j) = self.job {
            write!(f, "{j}")?;
            match &self.name {
                Some(n) if *n != j.0.to_string() => write!(f, " ({n})  ")?,
                _ => write!(f, "  ")?,
            }
        }
        match &self.what {
            What::Launched { gpus, .. } | What::Adopted { gpus } => {
                let places: Vec<String> = gpus
                    .iter()
                    .map(|p| format!("{}:{}", p.node, p.gpu))
                    .collect();
                if let What::Launched { node: Some(n), .. } = &self.what {
                    write!(f, "{} on node-{n} without GPUs", self.what.kind())?;
                } else {
                    write!(f, "{} on {}", self.what.kind(), places.join(","))?;
                }
                if let What::Launched {
                    batch_size, share, ..
                } = &self.what
                {
                    if let Some(m) = share {
                        write!(f, " ({m} thousandths)")?;
                    }
                    if let Some(b) = batch_size {
                        write!(f, " (batch size {b})")?;
                    }
                }
                Ok(())
            }
            What::Rejected { reason }
            | What::Preempted { reason }
            | What::Requeued { reason }
            | What::Failed { reason } => write!(f, "{}: {reason}", self.what.kind()),
            What::Finished { jct_s, reason, .. } => {
                write!(f, "finished")?;
                if let Some(j) = jct_s {
                    write!(f, ", JCT {j:.1} s")?;
                }
                if let Some(r) = reason {
                    write!(f, " ({r})")?;
                }
                Ok(())
            }
            What::Cancelled => write!(f, "cancelled"),
            What::Waiting { reason, .. } => write!(f, "waiting: {reason}"),
            What::PolicySwitched { from, to } => write!(f, "policies switched: {from} -> {to}"),
            What::NodeJoined {
                node,
                gpus,
                worker,
                spec,
            } => {
                write!(f, "node {node} joined with {gpus} GPUs")?;
                if let Some(s) = spec {
                    write!(f, " of type {}", s.gpu_type)?;
                }
                match worker {
                    Some(n) => write!(f, " (worker {n})"),
                    None => Ok(()),
                }
            }
            What::NodeLeft { node } => write!(f, "node {node} left"),
            What::NodeFailed { node } => write!(f, "node {node} failed"),
            What::NodeRepaired { node } => write!(f, "node {node} repaired"),
            What::NodeQuarantined { node, until_s } => {
                write!(f, "node {node} quarantined until {until_s:.0} s")
            }
            What::SpareCalled { node } => write!(f, "spare node {node} called in"),
            What::Admitted => write!(f, "admitted"),
            What::Submitted { spec } => {
                write!(f, "submitted for {} GPUs", spec.requested_gpus)?;
                match spec.expected_duration_s {
                    Some(d) => write!(f, ", {d:.0} s"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// The events of the round being run (`None` while recording is off), and
/// the round they belong to.
#[derive(Default)]
pub(super) struct Recorder {
    events: Option<Vec<Event>>,
    round: u64,
    time_s: f64,
}

impl Recorder {
    pub(super) fn set_on(&mut self, on: bool) {
        self.events = on.then(Vec::new);
    }

    pub(super) fn on(&self) -> bool {
        self.events.is_some()
    }

    /// Events from now on belong to `round`, at `time_s`.
    pub(super) fn start_round(&mut self, round: u64, time_s: f64) {
        self.round = round;
        self.time_s = time_s;
    }

    /// Records a job event (the job's id and name from `job`).
    pub(super) fn job(&mut self, job: &Job, what: What) {
        self.push(Some(job), what);
    }

    /// Records an event that names no job.
    pub(super) fn other(&mut self, what: What) {
        self.push(None, what);
    }

    fn push(&mut self, job: Option<&Job>, what: What) {
        if let Some(v) = &mut self.events {
            v.push(Event {
                round: self.round,
                time_s: self.time_s,
                unix_s: None,
                job: job.map(|j| j.id()),
                name: job.map(|j| j.spec.name.clone()),
                what,
            });
        }
    }

    /// This round's events, leaving the recorder as it was and empty.
    pub(super) fn take(&mut self) -> Vec<Event> {
        // The next round starts with room for as many (a round's events
        // leave with its report, so the buffer is new every round).
        self.events
            .as_mut()
            .map(|v| {
                let n = v.len();
                std::mem::replace(v, Vec::with_capacity(n))
            })
            .unwrap_or_default()
    }

    /// Records how the jobs `ids` (just pruned) ended.
    pub(super) fn ended(&mut self, jobs: &crate::JobState, ids: &[JobId]) {
        if !self.on() {
            return;
        }
        for id in ids {
            let Some(job) = jobs.finished_job(*id) else {
                continue;
            };
            let reason = job.end_reason.clone();
            let what = match job.status {
                crate::JobStatus::Finished => What::Finished {
                    jct_s: job.jct_s(),
                    reason,
                    attained_gpu_s: Some(job.attained_service_gpu_s),
                    lost_gpu_s: (job.lost_work_gpu_s > 0.0).then_some(job.lost_work_gpu_s),
                    startup_s: (job.startup_s > 0.0).then_some(job.startup_s),
                },
                crate::JobStatus::Cancelled => What::Cancelled,
                _ => What::Failed {
                    reason: reason.unwrap_or_else(|| "ended".into()),
                },
            };
            self.job(job, what);
        }
    }
}
