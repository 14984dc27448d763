//! Prometheus metrics of the scheduler (`[runtime] metrics_listen`): what
//! the round loop and the service count as it happens (launches,
//! preemptions, exits, heartbeats, lost workers, round and job-table
//! timings) and, at each scrape, what the job table and the workers show
//! (jobs by state, queue length, GPUs by type, workers, the active policy).
//! Served as the text exposition format on `GET /metrics` by a small HTTP/1.1
//! endpoint: one request per connection, bounded in size and time; when the
//! API has a users' token, scrapes need it too (`Authorization: Bearer`,
//! which Prometheus sends with `authorization.credentials_file`).

use super::http::{Request, Response};
use super::jobs::info_of;
use super::Hub;
use crate::proto::JobPhase;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Every metric the scheduler exports (names follow Prometheus's
/// conventions: `blox_` prefix, base units, `_total` counters).
pub struct Metrics {
    registry: Registry,
    pub submissions: IntCounter,
    pub launches: IntCounter,
    pub launch_failures: IntCounter,
    /// Exit reports of launches their sender does not hold (ignored).
    pub stale_reports: IntCounter,
    pub preemptions: IntCounter,
    /// Exits of current launches by outcome: finished, crashed, fenced.
    pub exits: IntCounterVec,
    pub adopted: IntCounter,
    pub heartbeats: IntCounter,
    pub workers_lost: IntCounter,
    /// Node failures the round loop saw (a worker declared gone is a
    /// failed node until it registers again or is forgotten).
    pub failures: IntCounter,
    /// ETTR of each job that ended (`Job::ettr`).
    pub job_ettr: Histogram,
    pub rounds: IntCounter,
    pub round_seconds: Histogram,
    /// A round's parts (`RoundTimings::parts`), by `part`.
    pub round_part_seconds: HistogramVec,
    pub table_write_seconds: Histogram,
    /// Job-table writes of the round loop that failed (a full disk).
    pub table_write_failures: IntCounter,
    /// |actual − first predicted| start and finish, by `what`.
    pub prediction_error: HistogramVec,
    /// Wall time of one forecast (off the round thread).
    pub forecast_seconds: Histogram,
    /// Fragmentation after the last round (`RoundReport::largest_placeable`).
    pub largest_placeable: IntGauge,
    metrics_dropped: IntCounter,
    jobs: IntGaugeVec,
    queue: IntGauge,
    gpus: IntGaugeVec,
    node_gpus: IntGaugeVec,
    workers: IntGaugeVec,
    policy: IntGaugeVec,
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("a valid metric name");
    r.register(Box::new(c.clone())).expect("registered once");
    c
}

fn gauges(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("a valid metric name");
    r.register(Box::new(g.clone())).expect("registered once");
    g
}

fn histogram(r: &Registry, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
        .expect("a valid metric name");
    r.register(Box::new(h.clone())).expect("registered once");
    h
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let r = Registry::new();
        let exits = IntCounterVec::new(
            Opts::new(
                "blox_job_exits_total",
                "Exits of running launches, by outcome (finished, crashed, fenced)",
            ),
            &["outcome"],
        )
        .expect("a valid metric name");
        r.register(Box::new(exits.clone()))
            .expect("registered once");
        let queue = IntGauge::new(
            "blox_queue_length",
            "Accepted jobs waiting for GPUs (submitted or queued)",
        )
        .expect("a valid metric name");
        r.register(Box::new(queue.clone()))
            .expect("registered once");
        let seconds = vec![
            0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ];
        let round_part_seconds = HistogramVec::new(
            HistogramOpts::new(
                "blox_round_part_duration_seconds",
                "A round's parts: cluster (changes), metrics (collection, pruning, submissions), admission (with policy selection), scheduling, placement (each with the checks of its decision), launch (preemptions and launches)",
            )
            .buckets(vec![
                0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            &["part"],
        )
        .expect("a valid metric name");
        r.register(Box::new(round_part_seconds.clone()))
            .expect("registered once");
        let prediction_error = HistogramVec::new(
            HistogramOpts::new(
                "blox_prediction_error_seconds",
                "How far a job's actual start (what=start) or finish (what=finish) was from the first forecast that predicted it, seconds",
            )
            .buckets(vec![
                1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0,
                86400.0,
            ]),
            &["what"],
        )
        .expect("a valid metric name");
        r.register(Box::new(prediction_error.clone()))
            .expect("registered once");
        let largest_placeable = IntGauge::new(
            "blox_largest_placeable_gpus",
            "The largest job that could be placed after the last round within one innermost topology domain (one node without a topology): fragmentation",
        )
        .expect("a valid metric name");
        r.register(Box::new(largest_placeable.clone()))
            .expect("registered once");
        Metrics {
            largest_placeable,
            prediction_error,
            forecast_seconds: histogram(
                &r,
                "blox_forecast_duration_seconds",
                "Wall time of one forecast of starts and finishes (on its own thread)",
                vec![0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0],
            ),
            submissions: counter(&r, "blox_submissions_total", "Jobs accepted by Submit"),
            launches: counter(&r, "blox_launches_total", "Launches that started on their workers"),
            launch_failures: counter(
                &r,
                "blox_launch_failures_total",
                "Launches a worker refused or could not start",
            ),
            stale_reports: counter(
                &r,
                "blox_stale_exit_reports_total",
                "Exit reports of launches their worker does not hold (revoked, replaced or another worker's): ignored",
            ),
            preemptions: counter(&r, "blox_preemptions_total", "Launches revoked by a policy's decision"),
            exits,
            adopted: counter(
                &r,
                "blox_jobs_adopted_total",
                "Running launches adopted after a scheduler restart",
            ),
            heartbeats: counter(&r, "blox_worker_heartbeats_total", "Heartbeats accepted from workers"),
            workers_lost: counter(
                &r,
                "blox_workers_lost_total",
                "Workers declared gone (no heartbeat for worker_timeout_s)",
            ),
            failures: counter(
                &r,
                "blox_failures_total",
                "Node failures: workers declared gone, their jobs back to their last checkpoint",
            ),
            job_ettr: histogram(
                &r,
                "blox_job_ettr",
                "Effective training time ratio of each job that finished: productive time (less start-ups, lost work, checkpoint stalls) over time since submission",
                vec![0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0],
            ),
            rounds: counter(&r, "blox_rounds_total", "Rounds of the scheduling loop"),
            round_seconds: histogram(
                &r,
                "blox_round_duration_seconds",
                "A round's own time: cluster changes, metrics, policies, launches, preemptions, status view and job table (not the wait)",
                seconds.clone(),
            ),
            round_part_seconds,
            table_write_failures: counter(
                &r,
                "blox_table_write_failures_total",
                "Job-table writes of the round loop that failed (retried every round; running jobs go on)",
            ),
            table_write_seconds: histogram(
                &r,
                "blox_job_table_write_seconds",
                "Time of one durable write to the job table",
                seconds,
            ),
            metrics_dropped: counter(
                &r,
                "blox_job_metrics_dropped_total",
                "Metric samples dropped (over a job's bounds, or of launches no longer running)",
            ),
            jobs: gauges(&r, "blox_jobs", "Jobs the scheduler knows, by state", &["state"]),
            queue,
            gpus: gauges(
                &r,
                "blox_gpus",
                "GPUs of the workers in the cluster, by type and state (total, busy)",
                &["gpu_type", "state"],
            ),
            node_gpus: gauges(
                &r,
                "blox_node_gpus",
                "GPUs of each worker in the cluster, by state (total, busy)",
                &["node", "state"],
            ),
            workers: gauges(
                &r,
                "blox_workers",
                "Workers by state (alive: in the cluster; pending: beating, not in it yet; dead: declared gone, listed for an hour)",
                &["state"],
            ),
            policy: gauges(
                &r,
                "blox_policy_info",
                "The active admission/scheduling/placement combination (value 1)",
                &["policy"],
            ),
            registry: r,
        }
    }

    /// Refreshes the values read from the hub and renders every metric in
    /// the text exposition format.
    pub(super) fn render(&self, h: &Hub) -> String {
        let mut by_state: BTreeMap<&'static str, i64> = BTreeMap::new();
        for phase in [
            JobPhase::Submitted,
            JobPhase::Queued,
            JobPhase::Running,
            JobPhase::Finished,
            JobPhase::Failed,
            JobPhase::Rejected,
            JobPhase::Cancelled,
        ] {
            by_state.insert(state_label(phase), h.jobs.count(phase) as i64);
        }
        // GPUs in use: the running jobs' "worker:index" GPUs (through the
        // job table's phase index, not a walk of every job ever submitted).
        let mut busy: BTreeMap<String, i64> = BTreeMap::new();
        let mut busy_on: BTreeMap<&str, i64> = BTreeMap::new();
        for (_, r) in h.jobs.walk_from(0, &[JobPhase::Running as i32]) {
            let info = info_of(r);
            for g in &info.gpus {
                if let Some((w, _)) = g.rsplit_once(':') {
                    *busy_on.entry(w).or_default() += 1;
                }
                let t = g
                    .rsplit_once(':')
                    .and_then(|(w, i)| {
                        let i: u32 = i.parse().ok()?;
                        let w = h.workers.get(w)?;
                        w.gpus.iter().find(|d| d.index == i).map(|d| d.name.clone())
                    })
                    .unwrap_or_else(|| "unknown".into());
                *busy.entry(t).or_default() += 1;
            }
        }
        for (state, n) in &by_state {
            self.jobs.with_label_values(&[state]).set(*n);
        }
        self.queue.set(by_state["submitted"] + by_state["queued"]);
        let mut total: BTreeMap<String, i64> = BTreeMap::new();
        let (mut alive, mut pending, mut dead) = (0, 0, 0);
        self.node_gpus.reset();
        for (name, w) in &h.workers {
            if !w.alive {
                dead += 1;
            } else if w.node.is_some() {
                alive += 1;
                for g in &w.gpus {
                    *total.entry(g.name.clone()).or_default() += 1;
                }
                self.node_gpus
                    .with_label_values(&[name.as_str(), "total"])
                    .set(w.gpus.len() as i64);
                self.node_gpus
                    .with_label_values(&[name.as_str(), "busy"])
                    .set(busy_on.get(name.as_str()).copied().unwrap_or(0));
            } else {
                pending += 1;
            }
        }
        self.gpus.reset();
        for (t, n) in &total {
            self.gpus.with_label_values(&[t, "total"]).set(*n);
            self.gpus
                .with_label_values(&[t, "busy"])
                .set(busy.get(t).copied().unwrap_or(0));
        }
        for (state, n) in [("alive", alive), ("pending", pending), ("dead", dead)] {
            self.workers.with_label_values(&[state]).set(n);
        }
        self.policy.reset();
        self.policy.with_label_values(&[&h.policy]).set(1);
        let dropped = self.metrics_dropped.get();
        if h.metrics_dropped > dropped {
            self.metrics_dropped.inc_by(h.metrics_dropped - dropped);
        }
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("metrics encode as text");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

fn state_label(p: JobPhase) -> &'static str {
    match p {
        JobPhase::Unspecified => "unknown",
        JobPhase::Submitted => "submitted",
        JobPhase::Queued => "queued",
        JobPhase::Running => "running",
        JobPhase::Finished => "finished",
        JobPhase::Failed => "failed",
        JobPhase::Rejected => "rejected",
        JobPhase::Cancelled => "cancelled",
    }
}

/// The handler of `GET /metrics` (served by [`super::http`]); `render`
/// makes the body. With `token`, a request needs `Authorization: Bearer
/// <token>` (401 otherwise).
pub(super) fn handler(
    access: crate::auth::Access,
    render: Arc<dyn Fn() -> String + Send + Sync>,
) -> super::http::Handler {
    Arc::new(move |req| answer(req, &access, &*render))
}

fn answer(req: &Request, access: &crate::auth::Access, render: &dyn Fn() -> String) -> Response {
    if req.method != "GET" {
        return Response::text(405, "only GET /metrics\n");
    }
    if req.path != "/metrics" {
        return Response::text(404, "metrics are at /metrics\n");
    }
    if !req.authorized(access) {
        return Response::unauthorized();
    }
    Response {
        code: 200,
        content_type: "text/plain; version=0.0.4; charset=utf-8",
        body: render().into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_answered_by_path_method_and_token() {
        let render = || "blox_rounds_total 3\n".to_string();
        let code = |r: &Request, token: Option<&str>| {
            let access = match token {
                Some(t) => crate::auth::Access::Shared(Arc::from(t)),
                None => crate::auth::Access::Open,
            };
            answer(r, &access, &render).code
        };
        let get = Request::get("/metrics", &[("host", "x")]);
        assert_eq!(code(&get, None), 200);
        assert_eq!(
            answer(&get, &crate::auth::Access::Open, &render).body,
            b"blox_rounds_total 3\n"
        );
        assert_eq!(code(&get, Some("s3cret")), 401);
        let with = Request::get("/metrics", &[("authorization", "Bearer s3cret")]);
        assert_eq!(code(&with, Some("s3cret")), 200);
        let wrong = Request::get("/metrics", &[("authorization", "Bearer nope")]);
        assert_eq!(code(&wrong, Some("s3cret")), 401);
        assert_eq!(code(&Request::get("/", &[]), None), 404);
        let post = Request::new("POST", "/metrics", Default::default());
        assert_eq!(code(&post, None), 405);
    }
}
