//! The cluster's job uids (`[runtime] job_uids`): the scheduler gives
//! every launch a uid of the range, the same on every node the launch
//! spans (its ranks share its checkpoints), and no two launches that may
//! still have a process anywhere share one.
//!
//! A uid is held from the launch that takes it until every node that
//! launch ran on has beaten, after the launch ended, without listing the
//! uid as busy (`HeartbeatRequest.busy_uids`: the node's launches, and
//! ended launches whose cgroups or processes are not gone). A node that
//! never comes back keeps its uids held: a process of it may still run,
//! and write to shared storage. A job's next launch gets the uid its last
//! one had where that is free (its checkpoints then need no handing
//! over), else the next free uid after the last one given.
//!
//! The holders are kept in the job table ([`crate::store::Store`]) with
//! every round's writes, and a uid any live worker reports busy is never
//! given, so a scheduler that restarts (even before its last write) gives
//! no uid still in use.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Who holds a uid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub job: u64,
    pub launch: u32,
    /// The nodes (worker names) of the launch.
    pub nodes: BTreeSet<String>,
    /// The launch ended: the uid is free once `nodes` is empty (each node
    /// is taken off when it beats without the uid).
    pub ended: bool,
    /// The launch ran on several workers sharing its checkpoints: each
    /// keeps them the job's after its part ends, until told every part
    /// ended (`HeartbeatReply.take_back`), and reports the uid busy
    /// meanwhile; the job is not launched again until they did
    /// ([`UidPool::settling`]).
    #[serde(default)]
    pub shared: bool,
}

/// The cluster's uid range and who holds what.
#[derive(Debug, Default)]
pub struct UidPool {
    range: Option<(u32, u32)>,
    held: BTreeMap<u32, Holder>,
    /// The uid of each job's last launch.
    last: HashMap<u64, u32>,
    /// Uids each live worker's last heartbeat listed as busy, by worker id,
    /// with its node's name (two workers may share one).
    busy: HashMap<String, (String, BTreeSet<u32>)>,
    /// Where the search for a free uid goes on from.
    cursor: u32,
    /// Changed since the last [`UidPool::take_changes`].
    dirty: bool,
}

impl UidPool {
    pub fn new(range: Option<(u32, u32)>) -> UidPool {
        UidPool {
            range,
            cursor: range.map_or(0, |r| r.0),
            ..UidPool::default()
        }
    }

    pub fn range(&self) -> Option<(u32, u32)> {
        self.range
    }

    /// Holders read back from the job table (a restart): the launches that
    /// still ran are decided later (adopted: [`UidPool::adopt`]); until
    /// then every uid stays held.
    pub fn restore(&mut self, holders: Vec<(u32, Holder)>) {
        for (uid, h) in holders {
            if self.range.is_some_and(|r| (r.0..=r.1).contains(&uid)) {
                self.last.insert(h.job, uid);
                self.held.insert(uid, h);
            }
        }
    }

    /// Whether `uid` is neither held nor reported busy by a worker.
    fn free(&self, uid: u32) -> bool {
        !self.held.contains_key(&uid) && !self.busy.values().any(|(_, b)| b.contains(&uid))
    }

    /// A uid for launch `launch` of `job` on `nodes`: its last one where
    /// free, else the next free one. `None`: no range (uids are not
    /// assigned), or every uid is held (`Err` names how many).
    pub fn take(
        &mut self,
        job: u64,
        launch: u32,
        nodes: &[String],
        shared: bool,
    ) -> Result<Option<u32>, String> {
        let Some((first, last)) = self.range else {
            return Ok(None);
        };
        let holder = Holder {
            job,
            launch,
            nodes: nodes.iter().cloned().collect(),
            ended: false,
            shared,
        };
        if let Some(&u) = self.last.get(&job) {
            if self.free(u) {
                self.held.insert(u, holder);
                self.dirty = true;
                return Ok(Some(u));
            }
        }
        let size = u64::from(last - first) + 1;
        let mut u = self.cursor.clamp(first, last);
        for _ in 0..size.min(u64::from(u32::MAX)) {
            if self.free(u) {
                self.held.insert(u, holder);
                self.last.insert(job, u);
                self.cursor = if u == last { first } else { u + 1 };
                self.dirty = true;
                return Ok(Some(u));
            }
            u = if u == last { first } else { u + 1 };
        }
        Err(format!(
            "every uid of [runtime] job_uids {first}-{last} ({size}) is held by a launch that may still run: the job waits (give a larger range)"
        ))
    }

    /// Launch `launch` of `job` ended (or never started): its uid is free
    /// once its nodes have beaten without it.
    pub fn release(&mut self, job: u64, launch: u32) {
        for h in self.held.values_mut() {
            if h.job == job && h.launch == launch && !h.ended {
                h.ended = true;
                self.dirty = true;
            }
        }
        self.settle();
    }

    /// A launch adopted after a restart runs on: its uid is held again as
    /// running (`uid` as the worker reported it, where known).
    pub fn adopt(&mut self, job: u64, launch: u32, nodes: &[String]) {
        for h in self.held.values_mut() {
            if h.job == job && h.launch == launch {
                h.ended = false;
                h.nodes.extend(nodes.iter().cloned());
                self.dirty = true;
            }
        }
    }

    /// Every launch held as running that no longer runs (it exited, was
    /// preempted, failed to start, or was not adopted after a restart):
    /// ended, its uid free once its nodes say so.
    pub fn end_not_running(&mut self, running: &dyn Fn(u64, u32) -> bool) {
        for h in self.held.values_mut() {
            if !h.ended && !running(h.job, h.launch) {
                h.ended = true;
                self.dirty = true;
            }
        }
        self.settle();
    }

    /// A heartbeat of worker `worker` of node `node` listing `busy`: an
    /// ended holder's uid that no live worker of the node lists is no
    /// longer in use there.
    pub fn heard(&mut self, worker: &str, node: &str, busy: &[u32]) {
        let busy: BTreeSet<u32> = busy.iter().copied().collect();
        self.busy
            .insert(worker.to_string(), (node.to_string(), busy));
        let listed = |uid: &u32| {
            self.busy
                .values()
                .any(|(n, b)| n == node && b.contains(uid))
        };
        let mut changed = false;
        for (uid, h) in self.held.iter_mut() {
            if h.ended && h.nodes.contains(node) && !listed(uid) {
                h.nodes.remove(node);
                changed = true;
            }
        }
        self.dirty |= changed;
        self.settle();
    }

    /// A worker went away: its busy list no longer speaks (the holders'
    /// nodes still wait for its node to beat again).
    pub fn gone(&mut self, worker: &str) {
        self.busy.remove(worker);
    }

    /// The job ended for good: its last uid is not kept for it.
    pub fn forget_job(&mut self, job: u64) {
        self.last.remove(&job);
    }

    fn settle(&mut self) {
        let before = self.held.len();
        self.held.retain(|_, h| !(h.ended && h.nodes.is_empty()));
        if self.held.len() != before {
            self.dirty = true;
        }
    }

    /// Writes the holders again with the next round (a write failed).
    pub fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    /// The holders to write, when they changed since the last call.
    pub fn take_changes(&mut self) -> Option<Vec<(u32, Holder)>> {
        if !std::mem::take(&mut self.dirty) {
            return None;
        }
        Some(self.held.iter().map(|(u, h)| (*u, h.clone())).collect())
    }

    /// The nodes that may still keep the shared directories of an earlier
    /// launch of `job` that ran on several workers (one set for each such
    /// launch: the uid is not free there yet). The job's next launch waits
    /// for them, else it could be given its checkpoints while an ended
    /// part's worker is about to take them back. (A launch that stopped
    /// this round is marked ended only when the round is published: it
    /// counts too.)
    pub fn settling(&self, job: u64) -> impl Iterator<Item = &BTreeSet<String>> {
        self.held
            .values()
            .filter(move |h| h.job == job && h.shared && !h.nodes.is_empty())
            .map(|h| &h.nodes)
    }

    /// The uid held by launch `launch` of `job`, if any.
    pub fn of(&self, job: u64, launch: u32) -> Option<u32> {
        self.held
            .iter()
            .find(|(_, h)| h.job == job && h.launch == launch)
            .map(|(u, _)| *u)
    }

    /// Uids held, running and ended (for `Status` and tests).
    pub fn counts(&self) -> (usize, usize) {
        let ended = self.held.values().filter(|h| h.ended).count();
        (self.held.len() - ended, ended)
    }
}

/// `FIRST-LAST` as a uid range (0 < FIRST <= LAST).
pub fn parse_range(s: &str) -> Result<(u32, u32), String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("`{s}`: expected FIRST-LAST, e.g. 70000-135535"))?;
    let num = |v: &str| {
        v.trim()
            .parse::<u32>()
            .map_err(|e| format!("`{s}`: `{v}` is not a uid ({e})"))
    };
    let (a, b) = (num(a)?, num(b)?);
    if a == 0 || a > b {
        return Err(format!(
            "`{s}`: give FIRST-LAST with 0 < FIRST <= LAST (uid 0 is root)"
        ));
    }
    Ok((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn nodes(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_uid_is_free_again_only_once_every_node_of_its_launch_beat_without_it() {
        let mut p = UidPool::new(Some((100, 101)));
        let a = p.take(1, 1, &nodes(&["n0", "n1"]), false).unwrap().unwrap();
        let b = p.take(2, 1, &nodes(&["n0"]), false).unwrap().unwrap();
        assert_ne!(a, b);
        let e = p.take(3, 1, &nodes(&["n0"]), false).unwrap_err();
        assert!(e.contains("100-101"), "{e}");
        p.release(1, 1);
        // n0 beats without it, n1 still lists it busy: held.
        p.heard("w0", "n0", &[b]);
        p.heard("w1", "n1", &[a]);
        assert!(p.take(3, 1, &nodes(&["n0"]), false).is_err());
        // n1 now without it: free, and job 3 gets it.
        p.heard("w1", "n1", &[]);
        assert_eq!(p.take(3, 1, &nodes(&["n2"]), false).unwrap(), Some(a));
        // A worker's busy list alone keeps a uid held (a restart that
        // lost the last write).
        let mut q = UidPool::new(Some((100, 100)));
        q.heard("w0", "n0", &[100]);
        assert!(q.take(1, 1, &nodes(&["n0"]), false).is_err());
        q.heard("w0", "n0", &[]);
        assert_eq!(q.take(1, 1, &nodes(&["n0"]), false).unwrap(), Some(100));
        // Two workers of one node: one beating without a uid the other
        // still lists frees nothing.
        let mut r = UidPool::new(Some((7, 7)));
        r.take(1, 1, &nodes(&["n"]), false).unwrap();
        r.release(1, 1);
        r.heard("a", "n", &[7]);
        r.heard("b", "n", &[]);
        assert!(r.take(2, 1, &nodes(&["n"]), false).is_err());
        r.heard("a", "n", &[]);
        assert_eq!(r.take(2, 1, &nodes(&["n"]), false).unwrap(), Some(7));
    }

    #[test]
    fn a_job_gets_its_last_uid_back_where_it_is_free() {
        let mut p = UidPool::new(Some((10, 20)));
        let u = p.take(7, 1, &nodes(&["a"]), false).unwrap().unwrap();
        p.take(8, 1, &nodes(&["a"]), false).unwrap();
        p.release(7, 1);
        p.heard("wa", "a", &[]);
        assert_eq!(p.take(7, 2, &nodes(&["b"]), false).unwrap(), Some(u));
        // No range: no uids.
        assert_eq!(UidPool::new(None).take(1, 1, &[], false).unwrap(), None);
    }

    #[test]
    fn a_shared_launch_settles_once_every_node_beat_without_its_uid() {
        let mut p = UidPool::new(Some((1, 4)));
        let u = p.take(1, 1, &nodes(&["a", "b"]), true).unwrap().unwrap();
        let settling = |p: &UidPool, job| p.settling(job).cloned().collect::<Vec<_>>();
        let ab: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
        // Stopped this round, not yet marked ended: it counts.
        assert_eq!(settling(&p, 1), std::slice::from_ref(&ab));
        p.release(1, 1);
        assert_eq!(settling(&p, 1), [ab]);
        // `a` took its part's directories back; `b` still keeps them.
        p.heard("wa", "a", &[]);
        p.heard("wb", "b", &[u]);
        assert_eq!(settling(&p, 1), [BTreeSet::from(["b".to_string()])]);
        p.heard("wb", "b", &[]);
        assert!(settling(&p, 1).is_empty());
        // A launch on one worker never makes its job wait.
        p.take(2, 1, &nodes(&["a"]), false).unwrap();
        p.release(2, 1);
        assert!(settling(&p, 2).is_empty());
    }

    #[test]
    fn ranges_parse_with_their_errors() {
        assert_eq!(parse_range("70000-70009").unwrap(), (70000, 70009));
        for bad in ["0-5", "9-5", "x-5", "5", "-5"] {
            assert!(parse_range(bad).is_err(), "{bad}");
        }
    }

    proptest! {
        /// Whatever launches start, end and whatever nodes report, no uid
        /// is ever held by two launches, and none is given while a node
        /// of its last launch may still run something of it.
        #[test]
        fn no_uid_is_given_while_a_node_may_still_use_it(
            ops in proptest::collection::vec((0u8..4, 0u64..6, 0usize..3), 1..200)
        ) {
            let names = ["n0", "n1", "n2"];
            let mut p = UidPool::new(Some((1, 4)));
            // Per uid: nodes that may still run a process of it.
            let mut in_use: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
            let mut running: BTreeMap<u64, (u32, u32)> = BTreeMap::new();
            let mut launches = 0u32;
            for (op, job, node) in ops {
                match op {
                    0 if !running.contains_key(&job) => {
                        launches += 1;
                        let on = nodes(&[names[node]]);
                        if let Ok(Some(u)) = p.take(job, launches, &on, false) {
                            prop_assert!(
                                in_use.get(&u).is_none_or(|n| n.is_empty()),
                                "uid {u} given while {:?} may still use it", in_use.get(&u)
                            );
                            prop_assert!(!running.values().any(|(x, _)| *x == u));
                            in_use.entry(u).or_default().insert(names[node].to_string());
                            running.insert(job, (u, launches));
                        }
                    }
                    1 => {
                        if let Some((_, l)) = running.remove(&job) {
                            p.release(job, l);
                        }
                    }
                    _ => {
                        // The node beats: it still runs what is running
                        // there, and (randomly) a leftover of an ended one.
                        let n = names[node];
                        let mut busy: Vec<u32> = running
                            .values()
                            .filter(|(u, _)| in_use.get(u).is_some_and(|s| s.contains(n)))
                            .map(|(u, _)| *u)
                            .collect();
                        let leftover = op == 3;
                        for (u, s) in in_use.iter_mut() {
                            if s.contains(n) && !running.values().any(|(x, _)| x == u) {
                                if leftover {
                                    busy.push(*u);
                                } else {
                                    s.remove(n);
                                }
                            }
                        }
                        p.heard(&format!("w-{n}"), n, &busy);
                    }
                }
            }
        }
    }
}
