//! Result tables (`jobs.csv`, `rounds.csv`, also as Parquet) and the summary.

use super::summary::Summary;
use blox_core::{Job, JobId, JobStatus, RoundLoop};
use std::path::{Path, PathBuf};

/// Writing a result table or summary failed.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Table {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
}

impl ReportError {
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ReportError + '_ {
        move |source| ReportError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn table<E: std::error::Error + Send + Sync + 'static>(
        path: &Path,
    ) -> impl FnOnce(E) -> ReportError + '_ {
        move |e| ReportError::Table {
            path: path.to_path_buf(),
            source: Box::new(e),
        }
    }
}

/// Why a run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum StopReason {
    /// Every (tracked) job ended.
    Completed,
    /// A limit of the config (`run.max_rounds`, `run.max_time_s`) stopped it.
    Limit(String),
}

/// One row of `jobs.csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRow {
    pub job_id: u64,
    pub name: String,
    pub arrival_s: f64,
    pub first_start_s: Option<f64>,
    pub finish_s: Option<f64>,
    pub jct_s: Option<f64>,
    pub queueing_s: Option<f64>,
    pub responsiveness_s: Option<f64>,
    pub preemptions: u32,
    pub restarts: u32,
    pub gpu_seconds: f64,
    pub num_gpus: u32,
    pub status: JobStatus,
    pub reason: String,
    /// The job's model, if the trace or `assign_models` gave one.
    pub model: String,
    /// Its team (a trace's VC or `team` column), if any.
    pub team: String,
    /// Wall seconds it held GPUs.
    pub run_time_s: f64,
    /// Wall seconds it spent starting (before first iterations).
    pub startup_s: f64,
    /// GPU-seconds of productive service (`gpu_seconds` less start-up).
    pub productive_gpu_seconds: f64,
    /// Launches in a row that ended before their first iteration, at the end.
    pub launches_without_progress: u32,
    /// Seconds spent waiting under each kind of reason
    /// (`blox_core::WaitReason::KINDS`), counted at round ends.
    pub wait_s: [f64; 5],
    /// Productive GPU-seconds lost when it was stopped after its last
    /// checkpoint (preempted, moved, lost with its node).
    pub lost_work_gpu_seconds: f64,
    /// Node failures that stopped it, and the part of its lost work they
    /// cost (`[failures]`).
    pub interruptions: u32,
    pub failure_lost_gpu_seconds: f64,
    /// Effective training time ratio of a finished job: its useful
    /// training time (productive GPU-seconds less those lost to stops, per
    /// requested GPU) over the time since its submission (Kokolis et al.,
    /// HPCA'25, arXiv 2410.21680: productive runtime over wall-clock time).
    pub ettr: Option<f64>,
}

/// [`JobRow::ettr`] of `j`, once it finished ([`Job::ettr`]).
pub fn ettr_of(j: &Job) -> Option<f64> {
    j.ettr()
}

impl JobRow {
    /// With `quantized`, the first start is reported one round late, as the Blox
    /// simulator records it (at the metric collection after the first round run).
    pub fn from_job(j: &Job, quantized: bool, round_s: f64) -> Self {
        let first_start_s = j
            .first_start_s
            .map(|t| if quantized { t + round_s } else { t });
        let jct_s = j.jct_s();
        JobRow {
            job_id: j.id().0,
            name: j.spec.name.clone(),
            arrival_s: j.arrival_s(),
            first_start_s,
            finish_s: j.finish_s,
            jct_s,
            queueing_s: jct_s.map(|jct| (jct - j.run_time_s).max(0.0)),
            responsiveness_s: first_start_s.map(|t| t - j.arrival_s()),
            preemptions: j.preemptions,
            restarts: j.restarts,
            gpu_seconds: j.attained_service_gpu_s + j.startup_gpu_s,
            num_gpus: j.requested_gpus(),
            status: j.status.clone(),
            reason: j.end_reason.clone().unwrap_or_default(),
            model: j.spec.model.clone().unwrap_or_default(),
            team: j.spec.team.clone().unwrap_or_default(),
            run_time_s: j.run_time_s,
            startup_s: j.startup_s,
            productive_gpu_seconds: j.attained_service_gpu_s,
            launches_without_progress: j.launches_without_progress,
            wait_s: j.wait_s,
            lost_work_gpu_seconds: j.lost_work_gpu_s,
            interruptions: j.interruptions,
            failure_lost_gpu_seconds: j.failure_lost_gpu_s,
            ettr: ettr_of(j),
        }
    }

    pub fn is_finished(&self) -> bool {
        self.status == JobStatus::Finished
    }
}

/// One row of `rounds.csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct RoundRow {
    pub time_s: f64,
    pub busy_gpus: u32,
    pub total_gpus: u32,
    pub queued_jobs: u32,
    pub waiting_jobs: u32,
    pub running_jobs: u32,
    /// Fragmentation: the largest job placeable within one innermost
    /// topology domain (one node without a topology).
    pub largest_placeable: u32,
    /// The policies that decided the round (`admission/scheduling/placement`);
    /// changes when a synthesizer switches.
    pub policy: String,
    /// The scheduling policy's note on the round (empty when none): e.g.
    /// Sia's solver out of budget, keeping every allocation.
    pub note: String,
    /// What the placement measured after the round (FGD's fragmentation),
    /// by name: columns after `note`, named by the first round's.
    pub figures: Vec<(&'static str, f64)>,
}

pub use super::figures::figure_names;

impl From<blox_core::RoundReport> for RoundRow {
    /// The `rounds.csv` row of a round, from what the loop reported.
    fn from(r: blox_core::RoundReport) -> Self {
        RoundRow {
            time_s: r.time_s,
            busy_gpus: r.busy_gpus,
            total_gpus: r.total_gpus,
            queued_jobs: r.queued_jobs as u32,
            waiting_jobs: r.waiting_jobs as u32,
            running_jobs: r.running_jobs as u32,
            largest_placeable: r.largest_placeable,
            policy: r.policy,
            note: r.note.unwrap_or_default(),
            figures: r.figures,
        }
    }
}

/// What the summary needs of the loop, so that the loop can go first.
struct LoopFacts {
    num_gpus: u32,
    rounds: u64,
    names: blox_core::PolicyNames,
    spare_swaps: u64,
    quarantines: u64,
}

impl LoopFacts {
    fn of(lp: &RoundLoop) -> Self {
        LoopFacts {
            num_gpus: lp.cluster.num_gpus(),
            rounds: lp.rounds(),
            names: lp.policies.names.clone(),
            spare_swaps: lp.cluster.health().spare_swaps,
            quarantines: lp.cluster.health().quarantines,
        }
    }
}

/// Everything a simulation produces.
#[derive(Clone, Debug)]
pub struct SimResult {
    pub jobs: Vec<JobRow>,
    pub rounds: Vec<RoundRow>,
    pub summary: Summary,
}

pub const JOB_COLUMNS: &[&str] = &[
    "job_id",
    "arrival_s",
    "first_start_s",
    "finish_s",
    "jct_s",
    "queueing_s",
    "responsiveness_s",
    "preemptions",
    "gpu_seconds",
    "status",
    "name",
    "num_gpus",
    "restarts",
    "reason",
    "model",
    "run_time_s",
    "startup_s",
    "productive_gpu_seconds",
    "launches_without_progress",
    "wait_not_admitted_s",
    "wait_for_gpus_s",
    "wait_placement_s",
    "wait_held_s",
    "wait_preempted_s",
    "team",
    "lost_work_gpu_seconds",
    "interruptions",
    "failure_lost_gpu_seconds",
    "ettr",
];

/// The `jobs.csv` column of each kind of wait reason, in the order of
/// `WaitReason::KINDS`.
pub const WAIT_COLUMNS: [&str; 5] = [
    "wait_not_admitted_s",
    "wait_for_gpus_s",
    "wait_placement_s",
    "wait_held_s",
    "wait_preempted_s",
];

pub const ROUND_COLUMNS: &[&str] = &[
    "time_s",
    "busy_gpus",
    "queued_jobs",
    "running_jobs",
    "waiting_jobs",
    "total_gpus",
    "policy",
    "largest_placeable",
    "note",
];

/// Rows of the jobs a loop still holds: admitted ones, then those waiting
/// for admission.
fn unended_rows<'a>(
    lp: &'a RoundLoop,
    row: impl Fn(&Job) -> JobRow + 'a,
) -> impl Iterator<Item = JobRow> + 'a {
    lp.jobs.active().chain(lp.waiting()).map(row)
}

impl SimResult {
    /// The tables of a round loop's run: every job it has seen (ended,
    /// admitted, waiting), the rounds it reported, and the summary over the
    /// tracked jobs (`track`: first and last id; `None`: all).
    pub fn from_loop(
        lp: &RoundLoop,
        rounds: Vec<RoundRow>,
        now_s: f64,
        quantized: bool,
        track: Option<[u64; 2]>,
        stop: Option<StopReason>,
    ) -> SimResult {
        let row = |j: &Job| JobRow::from_job(j, quantized, lp.round_s());
        let jobs: Vec<JobRow> = lp
            .jobs
            .finished()
            .iter()
            .map(row)
            .chain(unended_rows(lp, row))
            .collect();
        Self::from_rows(jobs, LoopFacts::of(lp), rounds, now_s, track, stop)
    }

    /// [`SimResult::from_loop`] for a loop that is done, `earlier` being
    /// the rows of the ended jobs it no longer holds: its ended records
    /// become rows a slice at a time and their memory goes as they do, so a
    /// million-job run does not hold every job twice at its end.
    pub fn from_finished_loop(
        mut lp: RoundLoop,
        earlier: Vec<JobRow>,
        rounds: Vec<RoundRow>,
        now_s: f64,
        quantized: bool,
        track: Option<[u64; 2]>,
        stop: Option<StopReason>,
    ) -> SimResult {
        const SLICE: usize = 65_536;
        let round_s = lp.round_s();
        let row = |j: &Job| JobRow::from_job(j, quantized, round_s);
        let mut ended = lp.jobs.take_finished();
        let mut jobs = earlier;
        jobs.reserve_exact(ended.len() + lp.jobs.num_active() + lp.waiting().len());
        while !ended.is_empty() {
            let at = ended.len().saturating_sub(SLICE);
            jobs.extend(ended.drain(at..).map(|j| row(&j)));
            // Every slice: shrinking a block this large gives its tail
            // pages back in place, so the records and the rows are never
            // both held whole (waiting for half to drain held 1.5 times
            // the records at the end of a run).
            ended.shrink_to_fit();
        }
        jobs.extend(unended_rows(&lp, row));
        // The loop (its metrics, its cluster) goes before the summary's
        // own tables are built: the end of a ten-million-job run was its
        // peak of memory.
        let facts = LoopFacts::of(&lp);
        drop(lp);
        Self::from_rows(jobs, facts, rounds, now_s, track, stop)
    }

    fn from_rows(
        mut jobs: Vec<JobRow>,
        lp: LoopFacts,
        rounds: Vec<RoundRow>,
        now_s: f64,
        track: Option<[u64; 2]>,
        stop: Option<StopReason>,
    ) -> SimResult {
        // Ids are distinct: the order is the same whatever order rows came in.
        jobs.sort_unstable_by_key(|j| j.job_id);
        let tracked: Vec<&JobRow> = jobs
            .iter()
            .filter(|j| track.is_none_or(|[a, b]| (a..=b).contains(&JobId(j.job_id).0)))
            .collect();
        let mut summary = Summary::compute(
            &tracked,
            &jobs,
            lp.num_gpus,
            now_s,
            lp.rounds,
            lp.names,
            stop,
        );
        summary.spare_swaps = lp.spare_swaps;
        summary.quarantines = lp.quarantines;
        summary.figures = super::figures::summarise(&rounds);
        SimResult {
            jobs,
            rounds,
            summary,
        }
    }

    /// Writes `jobs.csv`, `rounds.csv` (and `.parquet` with the `polars` feature)
    /// and `summary.txt` into `dir`.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
        std::fs::create_dir_all(dir).map_err(ReportError::io(dir))?;
        let mut written = writer::write(self, dir)?;
        let summary = dir.join("summary.txt");
        std::fs::write(&summary, format!("{}\n", self.summary))
            .map_err(ReportError::io(&summary))?;
        written.push(summary);
        Ok(written)
    }
}

#[cfg(feature = "polars")]
mod writer {
    use super::*;
    use polars::prelude::*;

    fn jobs_frame(j: &[JobRow]) -> PolarsResult<DataFrame> {
        let mut columns = vec![
            Column::new(
                "job_id".into(),
                j.iter().map(|x| x.job_id).collect::<Vec<_>>(),
            ),
            Column::new(
                "arrival_s".into(),
                j.iter().map(|x| x.arrival_s).collect::<Vec<_>>(),
            ),
            Column::new(
                "first_start_s".into(),
                j.iter().map(|x| x.first_start_s).collect::<Vec<_>>(),
            ),
            Column::new(
                "finish_s".into(),
                j.iter().map(|x| x.finish_s).collect::<Vec<_>>(),
            ),
            Column::new(
                "jct_s".into(),
                j.iter().map(|x| x.jct_s).collect::<Vec<_>>(),
            ),
            Column::new(
                "queueing_s".into(),
                j.iter().map(|x| x.queueing_s).collect::<Vec<_>>(),
            ),
            Column::new(
                "responsiveness_s".into(),
                j.iter().map(|x| x.responsiveness_s).collect::<Vec<_>>(),
            ),
            Column::new(
                "preemptions".into(),
                j.iter().map(|x| x.preemptions).collect::<Vec<_>>(),
            ),
            Column::new(
                "gpu_seconds".into(),
                j.iter().map(|x| x.gpu_seconds).collect::<Vec<_>>(),
            ),
            Column::new(
                "status".into(),
                j.iter().map(|x| x.status.as_str()).collect::<Vec<_>>(),
            ),
            Column::new(
                "name".into(),
                j.iter().map(|x| x.name.clone()).collect::<Vec<_>>(),
            ),
            Column::new(
                "num_gpus".into(),
                j.iter().map(|x| x.num_gpus).collect::<Vec<_>>(),
            ),
            Column::new(
                "restarts".into(),
                j.iter().map(|x| x.restarts).collect::<Vec<_>>(),
            ),
            Column::new(
                "reason".into(),
                j.iter().map(|x| x.reason.clone()).collect::<Vec<_>>(),
            ),
            Column::new(
                "model".into(),
                j.iter().map(|x| x.model.clone()).collect::<Vec<_>>(),
            ),
            Column::new(
                "run_time_s".into(),
                j.iter().map(|x| x.run_time_s).collect::<Vec<_>>(),
            ),
            Column::new(
                "startup_s".into(),
                j.iter().map(|x| x.startup_s).collect::<Vec<_>>(),
            ),
            Column::new(
                "productive_gpu_seconds".into(),
                j.iter()
                    .map(|x| x.productive_gpu_seconds)
                    .collect::<Vec<_>>(),
            ),
            Column::new(
                "launches_without_progress".into(),
                j.iter()
                    .map(|x| x.launches_without_progress)
                    .collect::<Vec<_>>(),
            ),
        ];
        for (k, name) in WAIT_COLUMNS.iter().enumerate() {
            columns.push(Column::new(
                (*name).into(),
                j.iter().map(|x| x.wait_s[k]).collect::<Vec<_>>(),
            ));
        }
        columns.push(Column::new(
            "team".into(),
            j.iter().map(|x| x.team.clone()).collect::<Vec<_>>(),
        ));
        columns.push(Column::new(
            "lost_work_gpu_seconds".into(),
            j.iter()
                .map(|x| x.lost_work_gpu_seconds)
                .collect::<Vec<_>>(),
        ));
        columns.push(Column::new(
            "interruptions".into(),
            j.iter().map(|x| x.interruptions).collect::<Vec<_>>(),
        ));
        columns.push(Column::new(
            "failure_lost_gpu_seconds".into(),
            j.iter()
                .map(|x| x.failure_lost_gpu_seconds)
                .collect::<Vec<_>>(),
        ));
        columns.push(Column::new(
            "ettr".into(),
            j.iter().map(|x| x.ettr).collect::<Vec<_>>(),
        ));
        DataFrame::new_infer_height(columns)
    }

    fn rounds_frame(names: &[&'static str], x: &[RoundRow]) -> PolarsResult<DataFrame> {
        let figures = names.iter().map(|n| {
            Column::new(
                (*n).into(),
                x.iter().map(|r| r.figure(n)).collect::<Vec<_>>(),
            )
        });
        DataFrame::new_infer_height(
            vec![
                Column::new(
                    "time_s".into(),
                    x.iter().map(|r| r.time_s).collect::<Vec<_>>(),
                ),
                Column::new(
                    "busy_gpus".into(),
                    x.iter().map(|r| r.busy_gpus).collect::<Vec<_>>(),
                ),
                Column::new(
                    "queued_jobs".into(),
                    x.iter().map(|r| r.queued_jobs).collect::<Vec<_>>(),
                ),
                Column::new(
                    "running_jobs".into(),
                    x.iter().map(|r| r.running_jobs).collect::<Vec<_>>(),
                ),
                Column::new(
                    "waiting_jobs".into(),
                    x.iter().map(|r| r.waiting_jobs).collect::<Vec<_>>(),
                ),
                Column::new(
                    "total_gpus".into(),
                    x.iter().map(|r| r.total_gpus).collect::<Vec<_>>(),
                ),
                Column::new(
                    "policy".into(),
                    x.iter().map(|r| r.policy.clone()).collect::<Vec<_>>(),
                ),
                Column::new(
                    "largest_placeable".into(),
                    x.iter().map(|r| r.largest_placeable).collect::<Vec<_>>(),
                ),
                Column::new(
                    "note".into(),
                    x.iter().map(|r| r.note.clone()).collect::<Vec<_>>(),
                ),
            ]
            .into_iter()
            .chain(figures)
            .collect(),
        )
    }

    /// Rows per batch: the tables stream to disk a batch at a time, so a
    /// million-job run never holds a second full copy of its table.
    const BATCH_ROWS: usize = 64 * 1024;

    /// Writes `stem.csv` and `stem.parquet` from `rows`, a batch at a time.
    fn save<T>(
        rows: &[T],
        frame: &dyn Fn(&[T]) -> PolarsResult<DataFrame>,
        dir: &Path,
        stem: &str,
        out: &mut Vec<PathBuf>,
    ) -> Result<(), ReportError> {
        let csv = dir.join(format!("{stem}.csv"));
        let pq = dir.join(format!("{stem}.parquet"));
        let schema = frame(&rows[..0])
            .map_err(ReportError::table(&csv))?
            .schema()
            .as_ref()
            .clone();
        let f = std::fs::File::create(&csv).map_err(ReportError::io(&csv))?;
        let mut csv_w = CsvWriter::new(std::io::BufWriter::new(f))
            .include_header(true)
            .batched(&schema)
            .map_err(ReportError::table(&csv))?;
        let f = std::fs::File::create(&pq).map_err(ReportError::io(&pq))?;
        let mut pq_w = ParquetWriter::new(f)
            .batched(&schema)
            .map_err(ReportError::table(&pq))?;
        for chunk in rows.chunks(BATCH_ROWS) {
            let df = frame(chunk).map_err(ReportError::table(&csv))?;
            csv_w.write_batch(&df).map_err(ReportError::table(&csv))?;
            pq_w.write_batch(&df).map_err(ReportError::table(&pq))?;
        }
        csv_w.finish().map_err(ReportError::table(&csv))?;
        pq_w.finish().map_err(ReportError::table(&pq))?;
        out.push(csv);
        out.push(pq);
        Ok(())
    }

    pub fn write(r: &SimResult, dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
        let mut out = Vec::new();
        save(&r.jobs, &jobs_frame, dir, "jobs", &mut out)?;
        let names = figure_names(&r.rounds);
        save(
            &r.rounds,
            &|x| rounds_frame(&names, x),
            dir,
            "rounds",
            &mut out,
        )?;
        Ok(out)
    }
}

#[cfg(not(feature = "polars"))]
mod writer {
    //! Without polars: the same CSV columns through the `csv` crate, no Parquet.
    use super::*;

    fn opt(v: Option<f64>) -> String {
        v.map(|x| x.to_string()).unwrap_or_default()
    }

    pub fn write(r: &SimResult, dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
        let jobs = dir.join("jobs.csv");
        let mut w = csv::Writer::from_path(&jobs).map_err(ReportError::table(&jobs))?;
        w.write_record(JOB_COLUMNS)
            .map_err(ReportError::table(&jobs))?;
        for j in &r.jobs {
            let fixed = [
                j.job_id.to_string(),
                j.arrival_s.to_string(),
                opt(j.first_start_s),
                opt(j.finish_s),
                opt(j.jct_s),
                opt(j.queueing_s),
                opt(j.responsiveness_s),
                j.preemptions.to_string(),
                j.gpu_seconds.to_string(),
                j.status.as_str().to_string(),
                j.name.clone(),
                j.num_gpus.to_string(),
                j.restarts.to_string(),
                j.reason.clone(),
                j.model.clone(),
                j.run_time_s.to_string(),
                j.startup_s.to_string(),
                j.productive_gpu_seconds.to_string(),
                j.launches_without_progress.to_string(),
            ];
            let waits = j.wait_s.iter().map(|s| s.to_string());
            w.write_record(fixed.into_iter().chain(waits).chain([
                j.team.clone(),
                j.lost_work_gpu_seconds.to_string(),
                j.interruptions.to_string(),
                j.failure_lost_gpu_seconds.to_string(),
                opt(j.ettr),
            ]))
            .map_err(ReportError::table(&jobs))?;
        }
        w.flush().map_err(ReportError::io(&jobs))?;
        let rounds = dir.join("rounds.csv");
        let mut w = csv::Writer::from_path(&rounds).map_err(ReportError::table(&rounds))?;
        let names = figure_names(&r.rounds);
        let header = ROUND_COLUMNS.iter().chain(&names);
        w.write_record(header)
            .map_err(ReportError::table(&rounds))?;
        for x in &r.rounds {
            let figures = names.iter().map(|n| opt(x.figure(n)));
            w.write_record(
                [
                    x.time_s.to_string(),
                    x.busy_gpus.to_string(),
                    x.queued_jobs.to_string(),
                    x.running_jobs.to_string(),
                    x.waiting_jobs.to_string(),
                    x.total_gpus.to_string(),
                    x.policy.clone(),
                    x.largest_placeable.to_string(),
                    x.note.clone(),
                ]
                .into_iter()
                .chain(figures),
            )
            .map_err(ReportError::table(&rounds))?;
        }
        w.flush().map_err(ReportError::io(&rounds))?;
        Ok(vec![jobs, rounds])
    }
}
