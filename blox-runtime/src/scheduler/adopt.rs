//! Re-adoption after a scheduler restart. Workers the restarted scheduler
//! does not know register again and report what they still run
//! (`RegisterRequest.running`). The jobs of the job table are held for
//! `worker_timeout_s` meanwhile, so none of them is launched anew.
//!
//! A launch is **adopted** once every rank of it was reported by workers that
//! see the checkpoint storage: those workers join the cluster together, and
//! the job joins the loop as running on their GPUs
//! ([`ClusterEvent::JobAdopted`]) — no checkpoint, no restore, no start-up.
//! A launch that cannot be adopted is **revoked** (it checkpoints) before its
//! worker joins, so its GPUs are free when the loop sees them: one of a job
//! the scheduler does not hold (ended, cancelled, unknown), an older launch of
//! a job beside a newer one, or, when the hold ends, one with a rank missing.
//! A worker with a launch still undecided stays out of the cluster until the
//! hold ends.

use super::backend::{ClusterBackend, Live, Part};
use super::lock;
use crate::proto::*;
use crate::record::LaunchClock;
use blox_core::*;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// A worker that registered with running launches, as the decision sees it.
#[derive(Clone, Debug)]
pub(super) struct Candidate {
    pub worker: String,
    /// It showed it sees the shared checkpoint storage.
    pub verified: bool,
    /// Its GPUs' indices.
    pub gpus: HashSet<u32>,
    pub reports: Vec<RunningLaunch>,
}

/// One launch to adopt: the job, the launch number, and its parts.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Adoption {
    pub job: u64,
    pub launch: u32,
    pub parts: Vec<(String, RunningLaunch)>,
}

/// What to do with the reported launches this round.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Decision {
    pub adopt: Vec<Adoption>,
    /// (worker, job, launch) to revoke.
    pub revoke: Vec<(String, u64, u32)>,
    /// Workers whose every report is decided: they join (once verified).
    pub ready: Vec<String>,
}

fn key(r: &RunningLaunch) -> (u64, u32) {
    r.launch.map_or((0, 0), |l| (l.job_id, l.launch))
}

/// True when the parts' ranks cover exactly `0 .. world_size` of one world.
fn complete(parts: &[(&str, &RunningLaunch)]) -> bool {
    let Some(world) = parts.first().map(|p| p.1.world_size) else {
        return false;
    };
    if parts.iter().any(|p| p.1.world_size != world) {
        return false;
    }
    let mut ranges: Vec<(u32, u32)> = parts
        .iter()
        .map(|p| (p.1.first_rank, p.1.first_rank.saturating_add(p.1.ranks)))
        .collect();
    ranges.sort_unstable();
    let mut next = 0;
    for (a, b) in ranges {
        if a != next {
            return false;
        }
        next = b;
    }
    next == world
}

/// Decides the reported launches of `candidates` (alive workers not in the
/// cluster yet). `held` are the restored jobs still held; once `hold_over`,
/// every launch is decided.
pub(super) fn decide(candidates: &[Candidate], held: &HashSet<u64>, hold_over: bool) -> Decision {
    // Every reported part, by job.
    let mut by_job: BTreeMap<u64, Vec<(&str, &RunningLaunch)>> = BTreeMap::new();
    for c in candidates {
        for r in &c.reports {
            by_job.entry(key(r).0).or_default().push((&c.worker, r));
        }
    }
    let verified: HashMap<&str, &Candidate> =
        candidates.iter().map(|c| (c.worker.as_str(), c)).collect();
    let mut revoke = Vec::new();
    // Launches that can be adopted once all their workers may join.
    let mut groups: Vec<Adoption> = Vec::new();
    // Workers with a launch still undecided.
    let mut blocked: BTreeSet<&str> = BTreeSet::new();
    for (job, parts) in &by_job {
        let newest = parts.iter().map(|p| key(p.1).1).max().unwrap_or(0);
        let (current, stale): (Vec<_>, Vec<_>) = parts.iter().partition(|p| key(p.1).1 == newest);
        for (w, r) in stale {
            revoke.push((w.to_string(), *job, key(r).1));
        }
        // Every part on GPUs its worker has, once, by a verified worker.
        let sound = current.iter().all(|(w, r)| {
            verified
                .get(w)
                .is_some_and(|c| c.verified && r.gpus.iter().all(|g| c.gpus.contains(g)))
        });
        let mut workers = HashSet::new();
        let one_part_per_worker = current.iter().all(|(w, _)| workers.insert(*w));
        let adoptable = held.contains(job) && one_part_per_worker && complete(&current);
        if adoptable && sound {
            groups.push(Adoption {
                job: *job,
                launch: newest,
                parts: current
                    .iter()
                    .map(|(w, r)| (w.to_string(), (*r).clone()))
                    .collect(),
            });
        } else if held.contains(job) && !hold_over && one_part_per_worker {
            // A rank may still register, or its worker show the storage.
            blocked.extend(current.iter().map(|(w, _)| *w));
        } else {
            revoke.extend(current.iter().map(|(w, r)| (w.to_string(), *job, key(r).1)));
        }
    }
    // Workers that may join: verified, nothing undecided; a launch is adopted
    // only when all its workers join together.
    let mut ready: BTreeSet<&str> = candidates
        .iter()
        .filter(|c| c.verified && !blocked.contains(c.worker.as_str()))
        .map(|c| c.worker.as_str())
        .collect();
    loop {
        let before = ready.len();
        for g in &groups {
            if !g.parts.iter().all(|(w, _)| ready.contains(w.as_str())) {
                for (w, _) in &g.parts {
                    ready.remove(w.as_str());
                }
            }
        }
        if ready.len() == before {
            break;
        }
    }
    let adopt: Vec<Adoption> = groups
        .into_iter()
        .filter(|g| g.parts.iter().all(|(w, _)| ready.contains(w.as_str())))
        .collect();
    Decision {
        adopt,
        revoke,
        ready: ready.into_iter().map(str::to_string).collect(),
    }
}

impl ClusterBackend {
    /// Decides the launches reported by workers that registered again,
    /// revokes those it cannot adopt (waiting for them to checkpoint) and
    /// returns the adoptions: their workers join the cluster this round,
    /// then [`ClusterBackend::adopted`] turns them into loop events.
    pub(super) fn settle_reports(&mut self) -> Vec<(JobSpec, Adoption)> {
        let mut out = Vec::new();
        let revoke = {
            let mut h = lock(&self.hub);
            let candidates: Vec<Candidate> = h
                .workers
                .iter()
                .filter(|(_, w)| w.alive && w.node.is_none() && !w.reported.is_empty())
                .map(|(id, w)| Candidate {
                    worker: id.clone(),
                    verified: w.verified,
                    gpus: w.gpus.iter().map(|g| g.index).collect(),
                    reports: w.reported.clone(),
                })
                .collect();
            if candidates.is_empty() {
                return out;
            }
            let held: HashSet<u64> = h.held.iter().map(|s| s.id.0).collect();
            let mut d = decide(&candidates, &held, self.hold_over);
            for a in d.adopt {
                match h.held.iter().position(|s| s.id.0 == a.job) {
                    Some(i) => {
                        let spec = h.held.remove(i).expect("found above");
                        out.push((spec, a));
                    }
                    None => d
                        .revoke
                        .extend(a.parts.iter().map(|(w, _)| (w.clone(), a.job, a.launch))),
                }
            }
            for w in &d.ready {
                if let Some(e) = h.workers.get_mut(w) {
                    e.reported.clear();
                }
            }
            for (w, job, launch) in &d.revoke {
                if let Some(e) = h.workers.get_mut(w) {
                    e.reported.retain(|r| key(r) != (*job, *launch));
                }
            }
            // The parts to revoke, by launch, with their workers' clients.
            let mut by_launch: BTreeMap<(u64, u32), Vec<Part>> = BTreeMap::new();
            for (w, job, launch) in d.revoke {
                let gpus = candidates
                    .iter()
                    .find(|c| c.worker == w)
                    .and_then(|c| c.reports.iter().find(|r| key(r) == (job, launch)))
                    .map_or_else(Vec::new, |r| r.gpus.clone());
                if let Some(e) = h.workers.get(&w) {
                    by_launch.entry((job, launch)).or_default().push(Part {
                        worker: w.clone(),
                        client: e.client.clone(),
                        gpus,
                        lease_epoch: e.lease_epoch,
                    });
                }
            }
            by_launch
        };
        if !revoke.is_empty() {
            tracing::info!(
                launches = revoke.len(),
                "revoking launches reported after the restart that cannot be adopted"
            );
        }
        // All at once: each may take its grace to checkpoint.
        let now = self.now();
        let calls: Vec<_> = revoke
            .into_iter()
            .map(|((job, launch), parts)| {
                let live = Live::new(launch, parts, LaunchClock::new(now, 0));
                let calls = self.spawn_revokes(JobId(job), &live, false);
                (JobId(job), live, calls)
            })
            .collect();
        for (id, live, calls) in calls {
            self.rt.block_on(async {
                for c in calls {
                    let _ = c.await;
                }
            });
            self.forget_expected(id, &live);
        }
        out
    }

    /// Turns the adoptions of [`ClusterBackend::settle_reports`] into loop
    /// events, once their workers joined as nodes: the jobs run on, and
    /// their next launch resumes from the newest checkpoint.
    pub(super) fn adopted(&mut self, adopted: Vec<(JobSpec, Adoption)>) -> Vec<ClusterEvent> {
        let mut events = Vec::new();
        let now = self.now();
        for (spec, a) in adopted {
            let id = spec.id;
            let mut parts = Vec::new();
            let mut gpus = Vec::new();
            {
                let h = lock(&self.hub);
                for (w, r) in &a.parts {
                    let (Some(e), Some(node)) =
                        (h.workers.get(w), h.workers.get(w).and_then(|e| e.node))
                    else {
                        continue;
                    };
                    for g in &r.gpus {
                        if let Some(i) = self.gpu_map.iter().position(|m| *m == (node.index(), *g))
                        {
                            gpus.push(GpuId(i as u32));
                        }
                    }
                    parts.push(Part {
                        worker: w.clone(),
                        client: e.client.clone(),
                        gpus: r.gpus.clone(),
                        lease_epoch: e.lease_epoch,
                    });
                }
            }
            let past_startup = a.parts.iter().any(|(_, r)| r.startup_s.is_some());
            let batch_size = a.parts.iter().find_map(|(_, r)| r.batch_size);
            let mut clock = LaunchClock::new(now, gpus.len() as u32);
            if past_startup {
                clock.first_iteration_s = Some(now);
            }
            let live = Live::new(a.launch, parts, clock);
            let rec = self.records.entry(id).or_default();
            // The table may have missed launches made after its last write.
            rec.launches = rec.launches.max(a.launch);
            tracing::info!(job = %id, launch = a.launch, gpus = gpus.len(), "adopted: it runs on after the restart");
            self.running.insert(id, live);
            self.metrics.adopted.inc();
            let share = a.parts.iter().find_map(|(_, r)| r.gpu_milli);
            events.push(ClusterEvent::JobAdopted {
                spec,
                gpus,
                batch_size,
                past_startup,
                share,
            });
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(
        job: u64,
        launch: u32,
        gpus: &[u32],
        first: u32,
        ranks: u32,
        world: u32,
    ) -> RunningLaunch {
        RunningLaunch {
            launch: Some(LaunchRef {
                job_id: job,
                launch,
            }),
            gpus: gpus.to_vec(),
            first_rank: first,
            ranks,
            world_size: world,
            ..Default::default()
        }
    }

    fn cand(w: &str, verified: bool, reports: Vec<RunningLaunch>) -> Candidate {
        Candidate {
            worker: w.into(),
            verified,
            gpus: (0..8).collect(),
            reports,
        }
    }

    fn held(ids: &[u64]) -> HashSet<u64> {
        ids.iter().copied().collect()
    }

    #[test]
    fn a_job_whose_every_rank_is_reported_is_adopted_with_all_its_workers() {
        let c = vec![
            cand(
                "a",
                true,
                vec![report(1, 3, &[0, 1], 0, 1, 2), report(2, 1, &[2], 0, 1, 1)],
            ),
            cand("b", true, vec![report(1, 3, &[4, 5], 1, 1, 2)]),
        ];
        let d = decide(&c, &held(&[1, 2]), false);
        assert!(d.revoke.is_empty(), "{d:?}");
        assert_eq!(d.ready, vec!["a", "b"]);
        let jobs: Vec<u64> = d.adopt.iter().map(|a| a.job).collect();
        assert_eq!(jobs, vec![1, 2]);
        assert_eq!(d.adopt[0].parts.len(), 2);
    }

    #[test]
    fn a_missing_rank_blocks_its_workers_until_the_hold_ends_then_the_rest_is_revoked() {
        let c = vec![
            cand(
                "a",
                true,
                vec![report(1, 3, &[0], 0, 1, 2), report(2, 1, &[2], 0, 1, 1)],
            ),
            cand("b", true, vec![report(5, 1, &[0], 0, 1, 1)]),
        ];
        let d = decide(&c, &held(&[1, 2, 5]), false);
        // `a` waits (job 1's rank 1 may still register); `b` joins with job 5.
        assert_eq!(d.ready, vec!["b"]);
        assert_eq!(d.adopt.iter().map(|a| a.job).collect::<Vec<_>>(), vec![5]);
        assert!(d.revoke.is_empty());
        // The hold ends: job 1's part is revoked, job 2 adopted, `a` joins.
        let c = vec![c[0].clone()];
        let d = decide(&c, &held(&[1, 2]), true);
        assert_eq!(d.revoke, vec![("a".to_string(), 1, 3)]);
        assert_eq!(d.adopt.iter().map(|a| a.job).collect::<Vec<_>>(), vec![2]);
        assert_eq!(d.ready, vec!["a"]);
    }

    #[test]
    fn launches_of_jobs_not_held_and_stale_launches_are_revoked_at_once() {
        let c = vec![
            cand(
                "a",
                true,
                vec![report(1, 2, &[0], 0, 1, 1), report(9, 1, &[1], 0, 1, 1)],
            ),
            cand("b", true, vec![report(1, 3, &[0], 0, 1, 1)]),
        ];
        // Job 9 is not held (ended or unknown); job 1 runs twice: the older
        // launch goes, the newer is adopted.
        let d = decide(&c, &held(&[1]), false);
        let mut rv = d.revoke.clone();
        rv.sort();
        assert_eq!(rv, vec![("a".to_string(), 1, 2), ("a".to_string(), 9, 1)]);
        assert_eq!(d.adopt.len(), 1);
        assert_eq!((d.adopt[0].job, d.adopt[0].launch), (1, 3));
        assert_eq!(d.ready, vec!["a", "b"]);
    }

    #[test]
    fn a_worker_that_does_not_see_the_storage_adopts_nothing_and_its_launches_go_at_the_end() {
        let c = vec![cand("a", false, vec![report(1, 1, &[0], 0, 1, 1)])];
        let d = decide(&c, &held(&[1]), false);
        assert_eq!(d, Decision::default());
        let d = decide(&c, &held(&[1]), true);
        assert_eq!(d.revoke, vec![("a".to_string(), 1, 1)]);
        assert!(d.adopt.is_empty() && d.ready.is_empty());
    }

    #[test]
    fn overlapping_or_gapped_ranks_and_foreign_gpus_are_not_adopted() {
        // Ranks 0..2 and 1..2 of 2: overlap.
        let c = vec![
            cand("a", true, vec![report(1, 1, &[0, 1], 0, 2, 2)]),
            cand("b", true, vec![report(1, 1, &[0], 1, 1, 2)]),
        ];
        let d = decide(&c, &held(&[1]), true);
        assert!(d.adopt.is_empty());
        assert_eq!(d.revoke.len(), 2);
        // A GPU the worker does not have.
        let mut a = cand("a", true, vec![report(2, 1, &[7], 0, 1, 1)]);
        a.gpus = (0..4).collect();
        let d = decide(&[a], &held(&[2]), true);
        assert!(d.adopt.is_empty());
        assert_eq!(d.revoke, vec![("a".to_string(), 2, 1)]);
    }
}
