//! The live dashboard (`[runtime] dashboard_listen`): one HTML page,
//! embedded in the binary, that reads the scheduler's JSON API:
//!
//! - `GET /api/status?limit=&after_id=&phase=&q=`: what `Status` answers
//!   (`blox status`), a page of jobs at a time: `phase` takes
//!   comma-separated states, `q` a part of the job's name;
//! - `GET /api/cluster`: every node's GPUs and the job on each, and where
//!   it sits in the topology (`labels`; the page groups nodes by them);
//! - `GET /api/series`: utilisation and queue length per round (the last
//!   [`MAX_POINTS`]) and the policy in force over time (its switches).
//!
//! Read-only. With a users' token, the API needs it; the page itself
//! carries no data and asks for the token. With tenants (`tokens_file`),
//! readers and admins see every job, and a user sees their own jobs only
//! (`/api/status` as `Status` answers them; on `/api/cluster` another
//! tenant's job is an id without a name).

use super::http::{Handler, Request, Response};
use super::{lock, status, RoundStats, SharedHub};
use crate::proto::{JobInfo, JobPhase, StatusRequest};
use blox_core::{RoundLoop, RoundReport};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Rounds kept for the time series.
pub const MAX_POINTS: usize = 3600;
/// Policy changes kept.
const MAX_SWITCHES: usize = 1000;
/// Jobs in a page unless `limit` says otherwise.
const DEFAULT_PAGE: u32 = 50;

const INDEX_HTML: &str = include_str!("index.html");

/// What the loop adds each round: the series and the GPUs' holders.
#[derive(Default)]
pub(in crate::scheduler) struct View {
    points: VecDeque<Value>,
    switches: VecDeque<Value>,
    last_policy: Option<String>,
    cluster: Value,
    round_s: f64,
}

impl View {
    /// Adds the round `r` of `lp`; `nodes` are the workers' names by node.
    pub(in crate::scheduler) fn update(
        &mut self,
        r: &RoundReport,
        lp: &RoundLoop,
        nodes: &[String],
        unix_s: f64,
    ) {
        self.round_s = lp.round_s();
        push_capped(
            &mut self.points,
            MAX_POINTS,
            json!({
                "round": r.round,
                "t": r.time_s,
                "unix_s": unix_s,
                "busy": r.busy_gpus,
                "total": r.total_gpus,
                "queued": r.queued_jobs + r.waiting_jobs,
                "running": r.running_jobs,
            }),
        );
        if self.last_policy.as_deref() != Some(r.policy.as_str()) {
            let switch = json!({
                "round": r.round,
                "t": r.time_s,
                "unix_s": unix_s,
                "policy": r.policy,
            });
            push_capped(&mut self.switches, MAX_SWITCHES, switch);
            self.last_policy = Some(r.policy.clone());
        }
        let nodes_json: Vec<Value> = lp
            .cluster
            .nodes()
            .iter()
            .map(|n| {
                let gpus: Vec<Value> = n
                    .gpus
                    .iter()
                    .filter_map(|g| lp.cluster.gpu(*g))
                    .map(|g| {
                        let job = g.job.map(|j| {
                            let spec = lp.jobs.get(j).map(|x| &x.spec);
                            json!({
                                "id": j.0,
                                "name": spec.map_or("", |s| s.name.as_str()),
                                "user": spec.and_then(|s| s.user.as_deref()),
                            })
                        });
                        // Its slowdown factor for the placements, where
                        // the workers measured one (1: the median GPU).
                        let slowdown = lp
                            .cluster
                            .variability()
                            .and_then(|v| v.factor(g.id, v.class_of(None)));
                        // Jobs sharing it, each with its thousandths.
                        let shares: Vec<Value> = (lp.cluster.shares_on(g.id).iter())
                            .map(|s| {
                                let spec = lp.jobs.get(s.job).map(|x| &x.spec);
                                json!({
                                    "id": s.job.0,
                                    "name": spec.map_or("", |x| x.name.as_str()),
                                    "milli": s.milli,
                                })
                            })
                            .collect();
                        let mut gpu = json!({"gpu": g.local_id, "job": job, "slowdown": slowdown});
                        if !shares.is_empty() {
                            gpu["shares"] = json!(shares);
                        }
                        gpu
                    })
                    .collect();
                let labels: serde_json::Map<String, Value> = lp
                    .cluster
                    .topology()
                    .and_then(|t| t.labels_of(n.id))
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(l, d)| (l.to_string(), json!(d)))
                    .collect();
                json!({
                    "node": n.id.0,
                    "labels": labels,
                    "worker": nodes.get(n.id.index()).map(String::as_str).unwrap_or(""),
                    "gpu_type": n.spec.gpu_type,
                    "online": n.online,
                    "gpus": gpus,
                })
            })
            .collect();
        self.cluster = json!({ "round": r.round, "nodes": nodes_json });
    }
}

/// Appends `v`, dropping the oldest entry once `q` holds `cap`.
fn push_capped(q: &mut VecDeque<Value>, cap: usize, v: Value) {
    if q.len() == cap {
        q.pop_front();
    }
    q.push_back(v);
}

/// The dashboard's request handler.
pub(in crate::scheduler) fn handler(
    hub: SharedHub,
    view: Arc<Mutex<View>>,
    stats: Arc<Mutex<RoundStats>>,
    access: crate::auth::Access,
) -> Handler {
    Arc::new(move |req: &Request| {
        if req.method != "GET" {
            return Response::text(405, "the dashboard is read-only: GET only\n");
        }
        if req.path == "/" || req.path == "/index.html" {
            return Response {
                code: 200,
                content_type: "text/html; charset=utf-8",
                body: INDEX_HTML.as_bytes().to_vec(),
            };
        }
        if !req.path.starts_with("/api/") {
            return Response::text(404, "the dashboard is at / and its API at /api/\n");
        }
        let Some(who) = access.who(req.bearer()) else {
            return Response::unauthorized();
        };
        match req.path.as_str() {
            "/api/status" => api_status(req, &hub, &stats, &who),
            "/api/cluster" => {
                let v = view.lock().unwrap_or_else(|e| e.into_inner());
                if who.role.sees_all() {
                    Response::json(&v.cluster)
                } else {
                    Response::json(&redacted(&v.cluster, &who))
                }
            }
            "/api/series" => {
                let v = view.lock().unwrap_or_else(|e| e.into_inner());
                Response::json(&json!({
                    "round_s": v.round_s,
                    "points": v.points,
                    "policies": v.switches,
                }))
            }
            _ => Response::text(
                404,
                "the API has /api/status, /api/cluster and /api/series\n",
            ),
        }
    })
}

/// Words of `phase=`, as `blox status` shows them.
const PHASES: [(&str, JobPhase); 7] = [
    ("submitted", JobPhase::Submitted),
    ("queued", JobPhase::Queued),
    ("running", JobPhase::Running),
    ("finished", JobPhase::Finished),
    ("failed", JobPhase::Failed),
    ("rejected", JobPhase::Rejected),
    ("cancelled", JobPhase::Cancelled),
];

fn phase_word(p: i32) -> &'static str {
    PHASES
        .iter()
        .find(|(_, x)| *x as i32 == p)
        .map_or("unknown", |(w, _)| w)
}

/// The cluster view as a user sees it: another tenant's job on a GPU is
/// its id, without its name or user.
fn redacted(cluster: &Value, who: &crate::auth::Principal) -> Value {
    let mut v = cluster.clone();
    let nodes = v.get_mut("nodes").and_then(Value::as_array_mut);
    for n in nodes.into_iter().flatten() {
        let gpus = n.get_mut("gpus").and_then(Value::as_array_mut);
        for g in gpus.into_iter().flatten() {
            let Some(job) = g.get_mut("job").filter(|j| j.is_object()) else {
                continue;
            };
            let owner = job.get("user").and_then(Value::as_str);
            if !who.may_touch(owner) {
                *job = json!({"id": job.get("id").cloned().unwrap_or(Value::Null), "name": "", "user": null});
            }
        }
    }
    v
}

fn api_status(
    req: &Request,
    hub: &SharedHub,
    stats: &Mutex<RoundStats>,
    who: &crate::auth::Principal,
) -> Response {
    let bad = |m: String| Response::text(400, m + "\n");
    let limit = match req.param("limit").filter(|s| !s.is_empty()) {
        None => DEFAULT_PAGE,
        Some(s) => match s.parse::<u32>() {
            Ok(n) if n > 0 => n,
            _ => return bad(format!("limit={s}: expected a number of jobs, at least 1")),
        },
    };
    let after_id = match req.param("after_id").filter(|s| !s.is_empty()) {
        None => 0,
        Some(s) => match s.parse::<u64>() {
            Ok(n) => n,
            Err(_) => return bad(format!("after_id={s}: expected a job id")),
        },
    };
    let mut phases = Vec::new();
    for w in req.param("phase").unwrap_or_default().split(',') {
        let w = w.trim();
        if w.is_empty() {
            continue;
        }
        match PHASES.iter().find(|(x, _)| x.eq_ignore_ascii_case(w)) {
            Some((_, p)) => phases.push(*p as i32),
            None => {
                let words: Vec<&str> = PHASES.iter().map(|(x, _)| *x).collect();
                return bad(format!("phase={w}: expected one of {}", words.join(", ")));
            }
        }
    }
    let q = req.param("q").unwrap_or_default().to_lowercase();
    // The dashboard lists the first page of workers (up to 1000).
    let r = StatusRequest {
        job_ids: Vec::new(),
        limit,
        after_id,
        phases,
        ..Default::default()
    };
    let (p50, p99) = {
        let s = stats.lock().unwrap_or_else(|e| e.into_inner());
        (s.round_p50_s, s.round_p99_s)
    };
    let (reply, errors) = {
        let h = lock(hub);
        (
            status::reply_matching(&h, &r, (!q.is_empty()).then_some(q.as_str()), who),
            h.forecasts.mean_errors(),
        )
    };
    let reply = match reply {
        Ok(r) => r,
        Err(e) => return bad(e.message().to_string()),
    };
    let workers: Vec<Value> = reply
        .workers
        .iter()
        .map(|w| {
            json!({
                "id": w.id,
                "address": w.address,
                "gpus": w.gpus.iter().map(|g| json!({
                    "index": g.index, "name": g.name, "memory_gb": g.memory_gb,
                })).collect::<Vec<_>>(),
                "alive": w.alive,
                "last_heartbeat_s_ago": w.last_heartbeat_s_ago,
                "problem": w.problem,
            })
        })
        .collect();
    Response::json(&json!({
        "rounds": reply.rounds,
        "policy": reply.policy,
        "last_error": reply.last_error,
        "round_p50_s": p50,
        "round_p99_s": p99,
        "total_jobs": reply.total_jobs,
        "compacted_jobs": reply.compacted_jobs,
        "metrics_dropped": reply.metrics_dropped,
        "next_after_id": reply.next_after_id,
        "jobs": reply.jobs.iter().map(job_json).collect::<Vec<_>>(),
        "workers": workers,
        "forecast": reply.forecast.as_ref().map(|f| json!({
            "made_unix_s": f.made_unix_s,
            "reached_unix_s": f.reached_unix_s,
            "rounds": f.rounds,
            "stopped": f.stopped,
            "took_s": f.took_s,
            "error": f.error,
        })),
        "prediction_error": {
            "start": {"count": errors[0].0, "mean_abs_s": errors[0].1},
            "finish": {"count": errors[1].0, "mean_abs_s": errors[1].1},
        },
    }))
}

fn job_json(j: &JobInfo) -> Value {
    json!({
        "id": j.id,
        "name": j.name,
        "state": phase_word(j.phase),
        "requested_gpus": j.requested_gpus,
        "gpus": j.gpus,
        "gpu_milli": j.gpu_milli,
        "progress": j.progress,
        "attained_gpu_s": j.attained_gpu_s,
        "launches": j.launches,
        "preemptions": j.preemptions,
        "reason": j.reason,
        "warning": j.warning,
        "wait_kind": j.wait.as_ref().map(|w| w.kind.as_str()),
        "wait": j.wait.as_ref().map(|w| w.reason.as_str()),
        "submitted_unix_s": j.submitted_unix_s,
        "finished_unix_s": j.finished_unix_s,
        "jct_s": j.jct_s,
        "startup_s": j.startup_s,
        "lost_work_gpu_s": j.lost_work_gpu_s,
        "interruptions": j.interruptions,
        "ettr": j.ettr,
        "command": j.command,
        "predicted_start_unix_s": j.prediction.as_ref().and_then(|p| p.start_unix_s),
        "predicted_finish_unix_s": j.prediction.as_ref().and_then(|p| p.finish_unix_s),
        "duration_from": j.prediction.as_ref().map(|p| p.duration_from.as_str()),
    })
}
