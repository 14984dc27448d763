//! `blox bench soak --teams`: the same soak with the jobs split among four
//! teams whose quotas share the cluster (`scheduling.policy = "teams"`
//! around the soak's policy), gang placement on a topology of racks
//! (`placement.policy = "topology"`, two workers a rack, `blox worker
//! --labels rack=…`), and a sampler that measures, once a second, how long
//! a team waits below its quota while another runs on borrowed GPUs.

use super::SoakConfig;
use blox_runtime::net::SchedulerClient;
use blox_runtime::proto::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Teams the jobs are dealt to, round robin.
pub const TEAMS: usize = 4;

/// The team of the soak's `k`-th job.
pub fn team_of(k: usize) -> String {
    format!("t{}", k % TEAMS)
}

/// Each team's quota: an equal share of the cluster.
pub fn quota(cfg: &SoakConfig) -> u32 {
    cfg.workers as u32 * cfg.gpus_per_worker / TEAMS as u32
}

/// The `--labels` of worker `i`: two workers a rack.
pub fn labels(i: usize) -> String {
    format!("rack=r{}", i / 2)
}

/// The scheduler config's `[cluster.topology]`, `[scheduling]` and
/// `[placement]` sections.
pub fn sections(cfg: &SoakConfig) -> String {
    let q = quota(cfg);
    let teams: Vec<String> = (0..TEAMS)
        .map(|t| format!("{{ name = \"t{t}\", quota = {q} }}"))
        .collect();
    format!(
        r#"[cluster.topology]
levels = [{{ name = "rack", bandwidth_gbps = 50 }}]

[scheduling]
policy = "teams"
within = {{ policy = "{policy}" }}
teams = [{teams}]

[placement]
policy = "topology"
"#,
        policy = cfg.policy,
        teams = teams.join(", ")
    )
}

/// What the sampler saw.
#[derive(Clone, Debug, Default)]
pub struct QuotaWaits {
    /// Samples taken.
    pub samples: usize,
    /// The longest a team had a queued job that fits in its idle quota
    /// while another team held more than its quota, seconds.
    pub longest_s: f64,
    /// Such time summed over teams, team-seconds.
    pub total_s: f64,
}

/// Samples the running and queued jobs every second until `stop`; `ids`
/// maps the soak's job index to the job id it was given.
pub async fn sample(
    mut client: SchedulerClient,
    ids: Arc<Mutex<HashMap<usize, u64>>>,
    quota: u32,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> QuotaWaits {
    let mut out = QuotaWaits::default();
    let mut streak = [0.0f64; TEAMS];
    let mut last = Instant::now();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let team: HashMap<u64, usize> = ids
            .lock()
            .expect("not poisoned")
            .iter()
            .map(|(k, id)| (*id, k % TEAMS))
            .collect();
        let Some(jobs) = live_jobs(&mut client).await else {
            // The scheduler restarting or cut: no sample.
            streak = [0.0; TEAMS];
            last = Instant::now();
            continue;
        };
        let dt = last.elapsed().as_secs_f64();
        last = Instant::now();
        let mut held = [0u32; TEAMS];
        let mut smallest_queued = [u32::MAX; TEAMS];
        for j in &jobs {
            let Some(&t) = team.get(&j.id) else { continue };
            if j.phase() == JobPhase::Running {
                held[t] += j.gpus.len() as u32;
            } else {
                smallest_queued[t] = smallest_queued[t].min(j.requested_gpus);
            }
        }
        let borrowing = held.iter().any(|h| *h > quota);
        for t in 0..TEAMS {
            let waits = borrowing
                && smallest_queued[t] != u32::MAX
                && held[t] + smallest_queued[t] <= quota;
            streak[t] = if waits { streak[t] + dt } else { 0.0 };
            if waits {
                out.total_s += dt;
            }
            out.longest_s = out.longest_s.max(streak[t]);
        }
        out.samples += 1;
    }
    out
}

/// The queued and running jobs, or `None` if the scheduler did not answer.
async fn live_jobs(client: &mut SchedulerClient) -> Option<Vec<JobInfo>> {
    let mut after = 0;
    let mut out = Vec::new();
    loop {
        let call = client.status(StatusRequest {
            limit: 1000,
            after_id: after,
            phases: vec![JobPhase::Queued as i32, JobPhase::Running as i32],
            ..Default::default()
        });
        let s = tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .ok()?
            .ok()?
            .into_inner();
        out.extend(s.jobs);
        if s.next_after_id == 0 {
            return Some(out);
        }
        after = s.next_after_id;
    }
}
