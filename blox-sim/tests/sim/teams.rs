//! Teams with quotas that borrow (`scheduling.policy = "teams"`): a lender
//! gets its quota back by preemption within a round, no team waits below
//! its quota while another runs on borrowed GPUs (beyond a round), and a job
//! of an unknown team is refused before the run.

use blox_config::Config;
use blox_core::*;
use blox_sim::{SimJob, Simulation};
use proptest::prelude::*;
use std::collections::HashMap;

use blox_policies as _;

fn job(id: u64, arrival: f64, gpus: u32, duration: f64, team: &str) -> SimJob {
    let mut spec = JobSpec::new(id, arrival, gpus).with_duration(duration);
    spec.team = Some(team.into());
    SimJob::of_duration(spec, duration)
}

fn sim(teams: &str, jobs: Vec<SimJob>) -> Result<Simulation, String> {
    sim_with(teams, "", jobs)
}

/// `extra`: more lines of `[scheduling]` (e.g. `reclaim = "cost"`).
fn sim_with(teams: &str, extra: &str, jobs: Vec<SimJob>) -> Result<Simulation, String> {
    sim_within("las", teams, extra, jobs)
}

/// `within`: the policy inside the teams.
fn sim_within(
    within: &str,
    teams: &str,
    extra: &str,
    jobs: Vec<SimJob>,
) -> Result<Simulation, String> {
    let text = format!(
        "[run]\nround_s = 60\n[cluster]\nnodes = 2\ngpus_per_node = 4\n\
         [scheduling]\npolicy = \"teams\"\nwithin = {{ policy = \"{within}\" }}\nteams = [{teams}]\n{extra}\n\
         [placement]\npolicy = \"consolidated\"\n"
    );
    let cfg = Config::parse(&text, "teams.toml", std::path::Path::new("."), &[])
        .map_err(|e| e.to_string())?;
    Simulation::with_jobs(&cfg, jobs).map_err(|e| e.to_string())
}

/// GPUs each team holds now.
fn held(s: &Simulation) -> HashMap<String, u32> {
    let mut m = HashMap::new();
    for j in s.round_loop.jobs.running() {
        *m.entry(j.spec.team.clone().unwrap()).or_default() += j.allocation.len() as u32;
    }
    m
}

#[test]
fn a_lender_gets_its_quota_back_within_a_round() {
    let teams = "{ name = \"a\", quota = 4 }, { name = \"b\", quota = 4 }";
    // B fills the cluster (borrowing A's idle 4); A's work arrives later.
    let mut jobs: Vec<SimJob> = (0..8).map(|i| job(i, 0.0, 1, 36_000.0, "b")).collect();
    jobs.extend((8..12).map(|i| job(i, 900.0, 1, 600.0, "a")));
    let mut s = sim(teams, jobs).unwrap();
    while s.backend.now_s() < 900.0 {
        s.step().unwrap();
    }
    assert_eq!(held(&s).get("b"), Some(&8), "B borrows all idle GPUs");
    // A's jobs are seen at 900 s; the round after, A holds its quota.
    s.step().unwrap();
    s.step().unwrap();
    let h = held(&s);
    assert_eq!((h.get("a"), h.get("b")), (Some(&4), Some(&4)), "{h:?}");
}

#[test]
fn limits_bound_borrowing_and_lending() {
    // B may borrow 2 beyond its quota; A lends at most 1 of its idle 4.
    let teams = "{ name = \"a\", quota = 4, lending_limit = 1 }, { name = \"b\", quota = 4, borrowing_limit = 2 }";
    let jobs: Vec<SimJob> = (0..8).map(|i| job(i, 0.0, 1, 3600.0, "b")).collect();
    let mut s = sim(teams, jobs).unwrap();
    s.step().unwrap();
    assert_eq!(
        held(&s).get("b"),
        Some(&5),
        "4 in quota + the 1 GPU A lends"
    );
}

#[test]
fn a_job_of_an_unknown_team_is_refused_before_the_run() {
    let teams = "{ name = \"a\", quota = 4 }";
    let e = sim(teams, vec![job(0, 0.0, 1, 60.0, "zeta")])
        .err()
        .unwrap();
    assert!(e.contains("team `zeta` is not one of the teams (a)"), "{e}");
    let e = sim(
        "{ name = \"a\", quota = 4 }, { name = \"a\", quota = 2 }",
        vec![],
    )
    .err()
    .unwrap();
    assert!(
        e.contains("teams.toml") && e.contains("listed twice"),
        "{e}"
    );
}

/// B runs 8 one-GPU jobs on A's idle quota and its own; at 900 s A needs 2
/// GPUs back. B's even jobs save every minute, its odd ones every 3,000 s
/// (so they have saved nothing yet, and keep their GPUs until they do:
/// `[run] min_run_until_checkpoint`). Which of B's borrowers stop, and
/// what A holds a round later.
fn reclaim(extra: &str) -> (u32, Vec<JobId>, f64) {
    let teams = "{ name = \"a\", quota = 4 }, { name = \"b\", quota = 4 }";
    let mut jobs: Vec<SimJob> = (0..8)
        .map(|i| {
            let mut j = job(i, 0.0, 1, 36_000.0, "b");
            let every = if i % 2 == 0 { 60.0 } else { 3000.0 };
            j.spec
                .metrics
                .insert(metric::CHECKPOINT_INTERVAL_S.into(), every);
            j
        })
        .collect();
    jobs.extend((8..10).map(|i| job(i, 890.0, 1, 600.0, "a")));
    // FIFO inside: B's own order does not change, so only reclaim stops
    // jobs (LAS inside would also rotate B's jobs through its quota).
    let mut s = sim_within("fifo", teams, extra, jobs).unwrap();
    while s.backend.now_s() <= 960.0 {
        s.step().unwrap();
    }
    let a = held(&s).get("a").copied().unwrap_or(0);
    let stopped: Vec<JobId> = s
        .round_loop
        .jobs
        .active()
        .filter(|j| j.preemptions > 0)
        .map(|j| j.id())
        .collect();
    let lost = s.round_loop.jobs.active().map(|j| j.lost_work_gpu_s).sum();
    (a, stopped, lost)
}

#[test]
fn reclaim_by_cost_stops_the_borrowers_cheapest_to_stop() {
    // By cost: two jobs that saved within the minute stop, nothing is lost,
    // and A has its 2 GPUs the round after its jobs arrived.
    let (a, stopped, lost) = reclaim("reclaim = \"cost\"");
    assert_eq!(a, 2);
    assert_eq!(stopped.len(), 2, "{stopped:?}");
    assert!(stopped.iter().all(|j| j.0 % 2 == 0), "{stopped:?}");
    assert_eq!(lost, 0.0);
    // By fair share: B's last two in LAS order stop, one of which has not
    // reached its first checkpoint and keeps its GPU, so A waits for it.
    let (a, stopped, _) = reclaim("");
    assert_eq!(a, 1, "{stopped:?}");
}

#[test]
fn quotas_above_the_cluster_are_refused_before_the_run() {
    let e = sim(
        "{ name = \"a\", quota = 6 }, { name = \"b\", quota = 4 }",
        vec![],
    )
    .err()
    .unwrap();
    assert!(
        e.contains("teams.toml:") && e.contains("sum to 10 GPUs, more than the cluster's 8"),
        "{e}"
    );
    let e = sim_with(
        "{ name = \"a\", quota = 4 }",
        "reclaim = \"cheapest\"",
        vec![],
    )
    .err()
    .unwrap();
    assert!(e.contains("reclaim") || e.contains("cheapest"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Any mix: a team whose queued job fits in its idle quota is not kept
    /// waiting more than a round while another team runs beyond its quota.
    #[test]
    fn no_team_waits_below_its_quota_while_others_borrow(
        quotas in (0u32..5, 0u32..5),
        by_cost in any::<bool>(),
        spec in proptest::collection::vec((0u8..2, 1u32..3, 60.0f64..3000.0, 0.0f64..2000.0), 1..24),
    ) {
        let (qa, qb) = quotas;
        let teams = format!("{{ name = \"t0\", quota = {qa} }}, {{ name = \"t1\", quota = {qb} }}");
        let mut jobs: Vec<SimJob> = spec
            .iter()
            .enumerate()
            .map(|(i, (t, g, d, a))| job(i as u64, *a, *g, *d, &format!("t{t}")))
            .collect();
        jobs.sort_by(|a, b| a.spec.arrival_s.total_cmp(&b.spec.arrival_s));
        let quota: HashMap<String, u32> = [("t0".to_string(), qa), ("t1".to_string(), qb)].into();
        let extra = if by_cost { "reclaim = \"cost\"" } else { "" };
        let mut s = sim_with(&teams, extra, jobs).unwrap();
        let mut starved_before: Vec<JobId> = Vec::new();
        for _ in 0..400 {
            if !s.step().unwrap() {
                break;
            }
            let h = held(&s);
            let borrowing = quota.iter().any(|(t, q)| h.get(t).copied().unwrap_or(0) > *q);
            let starved: Vec<JobId> = s
                .round_loop
                .jobs
                .queued()
                .filter(|j| {
                    let t = j.spec.team.clone().unwrap();
                    h.get(&t).copied().unwrap_or(0) + j.requested_gpus() <= quota[&t]
                })
                .map(|j| j.id())
                .collect();
            if borrowing {
                for id in &starved {
                    prop_assert!(!starved_before.contains(id), "{id} waits below its team's quota for two rounds while another team borrows: {h:?}");
                }
            }
            starved_before = if borrowing { starved } else { Vec::new() };
        }
    }
}
