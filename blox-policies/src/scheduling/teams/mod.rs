//! Teams with quotas that lend and borrow (`scheduling.policy = "teams"`),
//! around any scheduling policy ("LAS within teams, fair share across"). As
//! Kueue's cluster queues in one cohort (nominal quota, borrowing and
//! lending limits) and Philly's virtual clusters:
//!
//! 1. the inner policy orders the jobs (those it leaves out follow, oldest
//!    first: a policy that lists only what fits the whole cluster, as
//!    Tiresias does, still lets a team claim its quota);
//! 2. each team's jobs, in that order, fill its nominal `quota` (GPUs):
//!    those are *in quota*;
//! 3. the rest may *borrow* what other teams leave idle — at most
//!    `borrowing_limit` GPUs beyond its quota, and out of each other team's
//!    idle quota at most its `lending_limit` (plus GPUs no quota covers) —
//!    a team at a time, the team with the least dominant share per GPU of
//!    quota first (fair share), each team's jobs in the inner order. A
//!    team's dominant share is its largest attained GPU-time on one GPU type
//!    over that type's GPUs (dominant-resource fairness, each GPU type a
//!    resource; Ghodsi et al., NSDI'11): a team that ran on the scarce type
//!    has had more than one that ran as long on a plentiful one. With one
//!    GPU type it is attained GPU-time per GPU of quota;
//! 4. the schedule lists every in-quota job before every borrowing one, so
//!    the priority walk (placement) preempts borrowers from the bottom up
//!    when an owner's job needs its GPUs back: a lender gets its quota back
//!    in the next round (the loop's start-up protection, `min_run_s`, can
//!    hold a borrower a few rounds more), and a job in quota is never
//!    preempted for a borrower, so there is no preemption loop.
//!
//! Which borrowers stop when a lender takes its quota back (`reclaim`):
//! - `"fair-share"` (default): step 3 is decided afresh every round, so the
//!   borrowers of the team furthest above its fair share stop first, the
//!   last in the inner order first, and a borrower may also stop for a
//!   borrower of a team further below its share;
//! - `"cost"`: running borrowers keep their GPUs while the pool holds them,
//!   and when it shrinks the set that stops is the one that costs least to
//!   stop — the least work since their last checkpoint plus restarts
//!   ([`Job::preemption_cost_gpu_s`]; kueue#8551), chosen exactly
//!   ([`reclaim`]). Fair share then decides
//!   only who borrows the GPUs that are free, as Kueue's reclaim within a
//!   cohort does without fair-sharing preemption.
//!
//! ```toml
//! [scheduling]
//! policy = "teams"
//! within = { policy = "las" }          # the policy inside (and its parameters)
//! default_team = "shared"              # for jobs that name no team (else refused)
//! reclaim = "cost"                     # which borrowers stop first (below)
//! teams = [
//!   { name = "vision", quota = 32, borrowing_limit = 32, lending_limit = 16 },
//!   { name = "speech", quota = 16 },   # limits unset: no limit
//!   { name = "shared", quota = 0 },
//! ]
//! ```
//!
//! A job's team is `JobSpec::team` (a trace's VC or `team` column); a job
//! of a team that is not listed is refused before a run starts.

pub mod reclaim;

use blox_core::*;

use serde::Deserialize;
use std::collections::HashMap;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamConfig {
    pub name: String,
    /// Nominal GPUs.
    pub quota: u32,
    /// Most GPUs beyond its quota it may borrow (unset: no limit).
    pub borrowing_limit: Option<u32>,
    /// Most of its idle quota others may borrow (unset: all of it).
    pub lending_limit: Option<u32>,
}

/// Which borrowers stop when a lender takes its quota back (module docs).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Reclaim {
    /// Borrowing is decided afresh every round by fair share.
    #[default]
    FairShare,
    /// Running borrowers keep their GPUs while they fit; the cheapest to
    /// stop go first.
    Cost,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    within: blox_core::config::Table,
    teams: Vec<TeamConfig>,
    default_team: Option<String>,
    #[serde(default)]
    reclaim: Reclaim,
}

/// Teams around an inner policy (module docs).
pub struct Teams {
    inner: Box<dyn SchedulingPolicy>,
    teams: Vec<TeamConfig>,
    index: HashMap<String, usize>,
    default: Option<usize>,
    /// Productive GPU-seconds each team's jobs attained, ended ones included.
    attained: Vec<f64>,
    /// The same by GPU type.
    by_type: Vec<HashMap<String, f64>>,
    /// Each job's attained service when last seen, and the GPU types it
    /// last held (its service since is theirs).
    seen: HashMap<JobId, (f64, Vec<String>)>,
    /// Which borrowers stop first.
    pub reclaim: Reclaim,
    /// Where the teams were set (`file:line`), for errors.
    pub location: Option<String>,
}

impl Teams {
    pub fn new(
        inner: Box<dyn SchedulingPolicy>,
        teams: Vec<TeamConfig>,
        default_team: Option<&str>,
    ) -> Result<Self, String> {
        let mut index = HashMap::new();
        for (i, t) in teams.iter().enumerate() {
            if index.insert(t.name.clone(), i).is_some() {
                return Err(format!("team `{}` is listed twice", t.name));
            }
        }
        let default = match default_team {
            None => None,
            Some(d) => Some(
                *index
                    .get(d)
                    .ok_or_else(|| format!("default_team `{d}` is not one of the teams"))?,
            ),
        };
        Ok(Teams {
            inner,
            attained: vec![0.0; teams.len()],
            by_type: vec![HashMap::new(); teams.len()],
            teams,
            index,
            default,
            seen: HashMap::new(),
            reclaim: Reclaim::default(),
            location: None,
        })
    }

    /// The team a job runs under.
    pub fn team_of(&self, spec: &JobSpec) -> Option<usize> {
        match &spec.team {
            Some(t) => self.index.get(t).copied(),
            None => self.default,
        }
    }

    /// Attained GPU-seconds by team, ended jobs included.
    pub fn attained(&self) -> &[f64] {
        &self.attained
    }

    /// Each team's dominant share per GPU of quota (module docs).
    fn shares(&self, cluster: &ClusterState) -> Vec<f64> {
        let mut capacity: HashMap<&str, f64> = HashMap::new();
        for g in cluster.gpus() {
            if let Some(t) = cluster.gpu_type(g.id) {
                *capacity.entry(t).or_default() += 1.0;
            }
        }
        let total = f64::from(cluster.num_gpus().max(1));
        (0..self.teams.len())
            .map(|t| {
                let dominant = self.by_type[t]
                    .iter()
                    .filter_map(|(ty, s)| capacity.get(ty.as_str()).map(|c| s / c))
                    .fold(0.0, f64::max);
                dominant * total / f64::from(self.teams[t].quota.max(1))
            })
            .collect()
    }

    fn account(&mut self, jobs: &JobState, cluster: &ClusterState) {
        for j in jobs.active() {
            let team = self.team_of(&j.spec);
            let now = j.attained_service_gpu_s;
            let (before, types) = self.seen.entry(j.id()).or_default();
            // The service since it was last seen was on the GPUs it holds
            // (a job that just stopped: those it held last).
            let same = types.len() == j.allocation.len()
                && types
                    .iter()
                    .zip(&j.allocation)
                    .all(|(t, g)| cluster.gpu_type(*g) == Some(t.as_str()));
            if !j.allocation.is_empty() && !same {
                *types = j
                    .allocation
                    .iter()
                    .filter_map(|g| cluster.gpu_type(*g).map(str::to_string))
                    .collect();
            }
            let delta = (now - std::mem::replace(before, now)).max(0.0);
            if let (Some(t), true) = (team, delta > 0.0) {
                self.attained[t] += delta;
                let per = delta / types.len().max(1) as f64;
                for ty in types.iter() {
                    match self.by_type[t].get_mut(ty) {
                        Some(v) => *v += per,
                        None => {
                            self.by_type[t].insert(ty.clone(), per);
                        }
                    }
                }
            }
        }
        // Ended jobs are forgotten (their service stays counted).
        if self.seen.len() > 2 * jobs.num_active() + 1024 {
            self.seen.retain(|id, _| jobs.get(*id).is_some());
        }
    }
}

impl SchedulingPolicy for Teams {
    /// The teams' attained service (ended jobs' included) goes with the
    /// copy, and the inner policy's own state.
    fn fork(&self) -> Fork<dyn SchedulingPolicy> {
        match self.inner.fork().into_copy("its inner policy") {
            Ok(inner) => Fork::Copy(Box::new(Teams {
                inner,
                teams: self.teams.clone(),
                index: self.index.clone(),
                default: self.default,
                attained: self.attained.clone(),
                by_type: self.by_type.clone(),
                seen: self.seen.clone(),
                reclaim: self.reclaim,
                location: self.location.clone(),
            })),
            Err(why) => Fork::Unforkable(why),
        }
    }

    fn schedule(&mut self, round: &RoundInfo, jobs: &JobState, cluster: &ClusterState) -> Schedule {
        self.account(jobs, cluster);
        let mut s = self.inner.schedule(round, jobs, cluster);
        // An inner policy may list only what it would run on the whole
        // cluster (Tiresias): the jobs it left out follow, oldest first, so
        // that a team's job can still claim its quota.
        let listed: std::collections::HashSet<JobId> = s.entries.iter().map(|d| d.job).collect();
        let ended: std::collections::HashSet<JobId> = s.terminate.iter().map(|t| t.0).collect();
        let mut rest: Vec<&Job> = jobs
            .runnable()
            .filter(|j| !listed.contains(&j.id()) && !ended.contains(&j.id()))
            .collect();
        rest.sort_by(|a, b| {
            a.arrival_s()
                .total_cmp(&b.arrival_s())
                .then(a.id().cmp(&b.id()))
        });
        s.entries.extend(rest.into_iter().map(Demand::requested));
        let n = self.teams.len();
        // 2. In quota, team by team in the inner order.
        let mut used = vec![0u32; n];
        let mut in_quota = Vec::new();
        let mut over: Vec<Vec<Demand>> = vec![Vec::new(); n];
        for d in std::mem::take(&mut s.entries) {
            let Some(t) = jobs.get(d.job).and_then(|j| self.team_of(&j.spec)) else {
                continue;
            };
            if used[t] + d.gpus <= self.teams[t].quota {
                used[t] += d.gpus;
                in_quota.push(d);
            } else {
                over[t].push(d);
            }
        }
        // 3. What may be borrowed: each team's idle quota up to its lending
        // limit, and the GPUs no quota covers.
        let quota_sum: u32 = self.teams.iter().map(|t| t.quota).sum();
        let mut pool = cluster.num_gpus().saturating_sub(quota_sum);
        for (t, team) in self.teams.iter().enumerate() {
            let idle = team.quota.saturating_sub(used[t]);
            pool += team.lending_limit.map_or(idle, |l| idle.min(l));
        }
        let limit = |t: usize| self.teams[t].borrowing_limit.unwrap_or(u32::MAX);
        let mut borrowing = Vec::new();
        let mut borrowed = vec![0u32; n];
        if self.reclaim == Reclaim::Cost {
            // Running borrowers keep their GPUs while the pool holds them,
            // the costliest to stop first; the rest stop.
            let mut running: Vec<(f64, usize, Demand)> = Vec::new();
            for (t, list) in over.iter_mut().enumerate() {
                for d in std::mem::take(list) {
                    match jobs.get(d.job).filter(|j| j.is_running()) {
                        Some(j) => running.push((j.preemption_cost_gpu_s(round.now_s, 0.0), t, d)),
                        None => list.push(d),
                    }
                }
            }
            // The set that keeps its GPUs is the costliest one that fits
            // (so the set that stops costs least; `reclaim`'s docs).
            running.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.2.job.cmp(&b.2.job)));
            let items: Vec<reclaim::Borrower> = running
                .iter()
                .map(|(cost, t, d)| reclaim::Borrower {
                    cost: *cost,
                    team: *t,
                    gpus: d.gpus,
                })
                .collect();
            let limits: Vec<u32> = (0..n).map(limit).collect();
            let kept = reclaim::keep(&items, pool, &limits);
            for ((_, t, d), k) in running.into_iter().zip(kept) {
                if k {
                    pool -= d.gpus;
                    borrowed[t] += d.gpus;
                    borrowing.push(d);
                }
            }
        }
        // Fair share: the team with the least dominant share borrows first.
        let mut order: Vec<usize> = (0..n).filter(|t| !over[*t].is_empty()).collect();
        let share = self.shares(cluster);
        order.sort_by(|a, b| share[*a].total_cmp(&share[*b]).then(a.cmp(b)));
        for t in order {
            for d in std::mem::take(&mut over[t]) {
                if d.gpus <= pool && borrowed[t] + d.gpus <= limit(t) {
                    pool -= d.gpus;
                    borrowed[t] += d.gpus;
                    borrowing.push(d);
                }
            }
        }
        // 4. Owners first: the walk preempts borrowers from the bottom.
        s.entries = in_quota;
        s.entries.extend(borrowing);
        s
    }

    fn accepts(&self, job: &JobSpec) -> Result<(), String> {
        if self.team_of(job).is_none() {
            let known: Vec<&str> = self.teams.iter().map(|t| t.name.as_str()).collect();
            return Err(match &job.team {
                Some(t) => format!(
                    "its team `{t}` is not one of the teams ({}); add it, or map it with default_team",
                    known.join(", ")
                ),
                None => "it names no team and there is no default_team".to_string(),
            });
        }
        self.inner.accepts(job)
    }

    fn metrics_read(&self) -> Vec<&'static str> {
        self.inner.metrics_read()
    }

    fn fits_cluster(&self, cluster: &ClusterState) -> Result<(), String> {
        let sum: u64 = self.teams.iter().map(|t| u64::from(t.quota)).sum();
        if sum > u64::from(cluster.num_gpus()) {
            let at = self
                .location
                .as_deref()
                .map_or(String::new(), |l| format!(" ({l})"));
            return Err(format!(
                "the teams' quotas{at} sum to {sum} GPUs, more than the cluster's {}: lower them, or lend through borrowing limits instead",
                cluster.num_gpus()
            ));
        }
        self.inner.fits_cluster(cluster)
    }

    fn requires_placement(&self) -> Option<&'static str> {
        self.inner.requires_placement()
    }

    fn pair_with_placement(&mut self, placement: &str) -> Result<(), String> {
        self.inner.pair_with_placement(placement)
    }

    fn sort_key(&self, job: &Job, jobs: &JobState) -> Option<String> {
        let team = self
            .team_of(&job.spec)
            .map_or("?", |t| self.teams[t].name.as_str());
        Some(match self.inner.sort_key(job, jobs) {
            Some(k) => format!("team {team}, {k}"),
            None => format!("team {team}"),
        })
    }
}

blox_core::register_scheduling!(
    "teams",
    "teams with GPU quotas that lend and borrow (reclaimed by preemption), fair share across teams, any policy within (Kueue cohorts, Philly VCs)",
    |p| {
        let params: Params = p.parse()?;
        let mut within = Section::from_table("scheduling.within", params.within);
        let Some(policy) = within.take_string("policy")? else {
            return Err(p.error_at("within", "`within` needs `policy = \"name\"`"));
        };
        if policy == "teams" {
            return Err(p.error_at("within", "teams cannot be within teams"));
        }
        let inner = registry::build_scheduling(&ModuleConfig {
            policy,
            line: 0,
            params: within,
        })?;
        if params.teams.is_empty() {
            return Err(p.error_at("teams", "list at least one team"));
        }
        let mut t = Teams::new(inner, params.teams, params.default_team.as_deref())
            .map_err(|e| p.error_at("teams", e))?;
        t.reclaim = params.reclaim;
        t.location = Some(p.location("teams"));
        Ok(Box::new(t))
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{add, info, job};

    fn team(name: &str, quota: u32, lending_limit: Option<u32>) -> TeamConfig {
        TeamConfig {
            name: name.into(),
            quota,
            borrowing_limit: None,
            lending_limit,
        }
    }

    /// A and B borrow alike (quota 0); C keeps its 6 GPUs (lends none), so
    /// 2 GPUs are there to borrow. A ran 100 GPU-s on one of the 2 A100s,
    /// B as long on one of the 6 K80s, and each has one more job queued.
    #[test]
    fn the_team_with_the_smaller_dominant_share_borrows_first() {
        let mut cluster = ClusterState::new();
        for (ty, n) in [("A100", 2), ("K80", 6)] {
            let mut spec = NodeSpec::with_gpus(n);
            spec.gpu_type = ty.into();
            cluster.add_node(spec);
        }
        let inner = registry::build_scheduling(&ModuleConfig::named("scheduling", "fifo")).unwrap();
        let teams = vec![
            team("a", 0, None),
            team("b", 0, None),
            team("c", 6, Some(0)),
        ];
        let mut p = Teams::new(inner, teams, None).unwrap();
        let mut jobs = JobState::new();
        for (id, t, gpu) in [
            (1, "a", Some(0)),
            (2, "b", Some(2)),
            (3, "a", None),
            (4, "b", None),
        ] {
            let mut j = job(id, id as f64, 1);
            j.spec.team = Some(t.into());
            j.attained_service_gpu_s = if gpu.is_some() { 100.0 } else { 0.0 };
            add(&mut jobs, &mut cluster, j, gpu.as_slice());
        }
        let s = p.schedule(&info(0.0), &jobs, &cluster);
        // Same GPU-time, but A's is half of the A100s, B's a sixth of the
        // K80s: B borrows the 2 GPUs.
        assert_eq!(s.job_order(), vec![JobId(2), JobId(4)]);
        assert_eq!(p.attained(), &[100.0, 100.0, 0.0]);
    }
}
