//! A live scheduler's state as a [`History`]: what `blox whatif
//! --scheduler` replays. The scheduler's `Status` reply is mapped to the
//! plain records here by the caller (this crate knows no RPC types).

use super::{History, HistoryNode, Work};
use blox_core::round::events::GpuPlace;
use blox_core::*;
use blox_forecast::DurationFrom;

/// Where a live job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LivePhase {
    /// Submitted, not yet admitted.
    Submitted,
    /// Admitted and waiting (queued, or between launches).
    Queued,
    Running,
}

/// A job as a live scheduler reports it, times on the Unix clock.
#[derive(Clone, Debug)]
pub struct LiveJob {
    pub id: u64,
    pub name: String,
    pub requested_gpus: u32,
    pub phase: LivePhase,
    pub submitted_unix_s: f64,
    /// Its first launch (`None`: never launched, or a scheduler too old
    /// to say).
    pub first_start_unix_s: Option<f64>,
    /// Its run time as submitted, if given.
    pub duration_s: Option<f64>,
    pub progress: f64,
    /// Productive GPU-seconds so far, and the part of them lost to
    /// rollbacks to a checkpoint.
    pub attained_gpu_s: f64,
    pub lost_work_gpu_s: f64,
    pub startup_gpu_s: f64,
    pub launches: u32,
    pub preemptions: u32,
    /// The GPUs it holds: (worker id, the GPU's index on the worker).
    pub gpus: Vec<(String, u32)>,
}

/// A worker in the cluster, as the node it is.
#[derive(Clone, Debug)]
pub struct LiveWorker {
    pub id: String,
    /// Its node's number in the scheduler's cluster (the order nodes
    /// joined); `None`: not known (an older scheduler).
    pub node: Option<u32>,
    /// What it offers: GPUs, their type and memory, host, labels.
    pub spec: NodeSpec,
}

impl History {
    /// The state of a live scheduler at Unix time `now`: its unended `jobs`
    /// (times from the earliest submission among them) and the `workers`
    /// in its cluster, there from the start. A job's work is its
    /// `duration_s`, else its productive rate (lost work not counted), as
    /// the scheduler's forecasts compute it.
    pub fn from_live(jobs: &[LiveJob], workers: &[LiveWorker], now: f64) -> History {
        let origin = jobs.iter().map(|j| j.submitted_unix_s).fold(now, f64::min);
        let mut h = History {
            at_s: now - origin,
            ..History::default()
        };
        // Its nodes in the order they joined the cluster (a scheduler that
        // does not say: as given).
        let mut nodes: Vec<&LiveWorker> = workers.iter().collect();
        nodes.sort_by_key(|w| w.node.unwrap_or(u32::MAX));
        h.nodes = Some(
            nodes
                .iter()
                .map(|w| {
                    Some(HistoryNode {
                        spec: w.spec.clone(),
                        joined_s: f64::NEG_INFINITY,
                        left_s: None,
                    })
                })
                .collect(),
        );
        let place = |(w, gpu): &(String, u32)| -> Option<GpuPlace> {
            let node = nodes.iter().position(|x| x.id == *w)? as u32;
            Some(GpuPlace { node, gpu: *gpu })
        };
        for j in jobs {
            let job = job_of(j, origin);
            if let Some(w) = work_of(j) {
                h.work.insert(job.id(), w);
            }
            match j.phase {
                LivePhase::Submitted => h.waiting.push(job),
                LivePhase::Running => {
                    // Past its start-up, running since now as far as the
                    // replay is concerned.
                    let mut job = job;
                    job.last_launch_s = Some(h.at_s);
                    job.first_iteration_s = Some(h.at_s);
                    let places: Option<Vec<GpuPlace>> = j.gpus.iter().map(place).collect();
                    h.active.push((job, places.unwrap_or_default()));
                }
                LivePhase::Queued => h.active.push((job, Vec::new())),
            }
        }
        let no_start = jobs
            .iter()
            .filter(|j| j.launches > 0 && j.first_start_unix_s.is_none())
            .count();
        if no_start > 0 {
            h.notes.push(format!(
                "{no_start} jobs that ran have no first start in the scheduler's reply (a scheduler older than first_start_unix_s): their waits are taken as 0"
            ));
        }
        let unknown = h.unknown_work();
        if unknown > 0 {
            h.notes.push(format!(
                "{unknown} jobs gave no duration_s and have not reported enough progress: their work is unknown, they run on in the replays"
            ));
        }
        h
    }
}

fn job_of(j: &LiveJob, origin: f64) -> Job {
    let mut spec = JobSpec::new(j.id, j.submitted_unix_s - origin, j.requested_gpus);
    spec.name = j.name.clone();
    spec.expected_duration_s = j.duration_s;
    let mut job = Job::new(spec);
    job.status = match j.phase {
        LivePhase::Running => JobStatus::Running,
        LivePhase::Submitted => JobStatus::Submitted,
        LivePhase::Queued => JobStatus::Queued,
    };
    job.progress = j.progress.clamp(0.0, 1.0);
    job.attained_service_gpu_s = j.attained_gpu_s;
    job.startup_gpu_s = j.startup_gpu_s;
    job.launches = j.launches;
    job.preemptions = j.preemptions;
    // Its real first start (a scheduler before `first_start_unix_s`
    // existed: none, and a job that ran is taken to have started on
    // submission, waiting 0, never less).
    job.first_start_s = match j.first_start_unix_s {
        Some(t) => Some((t - origin).max(job.spec.arrival_s)),
        None => (j.launches > 0).then_some(job.spec.arrival_s),
    };
    job
}

/// Its run time at its requested GPUs, as the scheduler's forecasts compute
/// it ([`DurationFrom::from_parts`], the default `min_progress` of 0.01):
/// `duration_s`, else its productive rate (lost work not counted).
fn work_of(j: &LiveJob) -> Option<Work> {
    let (d, from) = DurationFrom::from_parts(
        j.duration_s.filter(|d| *d > 0.0),
        j.attained_gpu_s,
        j.lost_work_gpu_s,
        j.progress,
        j.requested_gpus,
        0.01,
    );
    d.map(|duration_s| Work {
        duration_s,
        from: from.as_str(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(id: &str, node: u32, gpus: u32, gpu_type: &str) -> LiveWorker {
        let mut spec = NodeSpec::with_gpus(gpus);
        spec.gpu_type = gpu_type.into();
        LiveWorker {
            id: id.into(),
            node: Some(node),
            spec,
        }
    }

    fn job(id: u64, phase: LivePhase, gpus: Vec<(String, u32)>) -> LiveJob {
        LiveJob {
            id,
            name: format!("j{id}"),
            requested_gpus: gpus.len().max(1) as u32,
            phase,
            submitted_unix_s: 1000.0 + id as f64,
            first_start_unix_s: (phase == LivePhase::Running).then_some(1010.0),
            duration_s: Some(60.0),
            progress: 0.5,
            attained_gpu_s: 30.0,
            lost_work_gpu_s: 0.0,
            startup_gpu_s: 0.0,
            launches: u32::from(phase == LivePhase::Running),
            preemptions: 0,
            gpus,
        }
    }

    #[test]
    fn workers_are_the_nodes_in_the_order_they_joined_and_jobs_sit_on_their_gpus() {
        // Listed by id (as Status does), joined in the other order.
        let workers = [worker("a", 1, 4, "K80"), worker("b", 0, 8, "A100")];
        let jobs = [
            job(
                1,
                LivePhase::Running,
                vec![("a".into(), 2), ("a".into(), 3)],
            ),
            job(2, LivePhase::Queued, vec![]),
            job(3, LivePhase::Submitted, vec![]),
        ];
        let h = History::from_live(&jobs, &workers, 1100.0);
        assert_eq!(h.at_s, 99.0);
        let types: Vec<&str> = h
            .nodes
            .as_ref()
            .unwrap()
            .iter()
            .map(|n| n.as_ref().unwrap().spec.gpu_type.as_str())
            .collect();
        assert_eq!(types, ["A100", "K80"]);
        let (running, places) = &h.active[0];
        assert_eq!(running.id(), JobId(1));
        assert_eq!(
            places,
            &[GpuPlace { node: 1, gpu: 2 }, GpuPlace { node: 1, gpu: 3 }]
        );
        assert_eq!(running.first_start_s, Some(9.0));
        assert_eq!(h.active[1].0.status, JobStatus::Queued);
        assert_eq!(h.waiting[0].id(), JobId(3));
        assert_eq!(h.work_of(JobId(2)).unwrap().duration_s, 60.0);
        assert!(h.notes.is_empty(), "{:?}", h.notes);
    }
}
