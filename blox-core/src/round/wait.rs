//! The end of a round: why each job that is not running waits
//! ([`WaitReason`]), from what the round's modules decided, and the time
//! each job spends under each kind of reason.

use super::events::What;
use super::RoundLoop;
use crate::ids::JobId;
use crate::job::Job;
use crate::wait::{ordinal, HoldCause, WaitReason};
use rustc_hash::FxHashSet;
use std::collections::BTreeMap;

/// What a round decided, as far as the wait reasons need it (kept between
/// rounds to reuse its buffers).
#[derive(Default)]
pub(super) struct Decided {
    /// The scheduling policy's order: (job, GPUs it asked for).
    pub order: Vec<(JobId, u32)>,
    /// Jobs the placement placed (before start-up protection held some).
    pub placed: FxHashSet<JobId>,
    /// Jobs this round's decision preempted.
    pub preempted: FxHashSet<JobId>,
    /// The decision was invalid and dropped: nothing of it ran.
    pub dropped: bool,
}

impl RoundLoop {
    /// Sets every waiting job's reason at `now_s`, counting the time since
    /// the last round under the reason it had, and records a `waiting`
    /// event for each job whose kind of reason changed.
    pub(super) fn set_wait_reasons(&mut self, now_s: f64) {
        let mut d = std::mem::take(&mut self.decided);
        let free = self.cluster.num_free();
        let mut changed: Vec<JobId> = Vec::new();
        // The largest free share by GPU type, read once if a job asking
        // for part of a GPU waits.
        let shares = std::cell::OnceCell::new();
        // CPUs and memory free by node, read once if a job without GPUs
        // waits.
        let hosts = std::cell::OnceCell::new();
        let cluster = &self.cluster;
        for job in self.jobs.active_mut() {
            let reason = if job.is_running() || job.status.is_terminal() {
                None
            } else if d.dropped {
                Some(WaitReason::Held {
                    cause: HoldCause::DecisionDropped,
                })
            } else if !d.preempted.is_empty() && d.preempted.contains(&job.id()) {
                Some(WaitReason::Preempted)
            } else if !d.placed.is_empty() && d.placed.contains(&job.id()) {
                Some(WaitReason::Held {
                    cause: HoldCause::StartupProtection,
                })
            } else if job.without_gpus() {
                let free = hosts.get_or_init(|| host_free(cluster));
                if fits_a_node(free, job) {
                    Some(WaitReason::BlockedByPlacement { asked: 0 })
                } else {
                    Some(WaitReason::WaitingForGpus { asked: 0 })
                }
            } else if let Some(m) = job.spec.gpu_milli {
                let best = shares.get_or_init(|| cluster.largest_free_share());
                if best_share(best, &job.spec.elasticity.gpu_types) >= m {
                    Some(WaitReason::BlockedByPlacement { asked: 1 })
                } else {
                    Some(WaitReason::WaitingForGpus { asked: 1 })
                }
            } else {
                let asked = job.requested_gpus();
                if free >= asked {
                    Some(WaitReason::BlockedByPlacement { asked })
                } else {
                    Some(WaitReason::WaitingForGpus { asked })
                }
            };
            if update(job, reason, now_s) {
                changed.push(job.id());
            }
        }
        let mut new_waiting: Vec<usize> = Vec::new();
        for (i, job) in self.waiting.iter_mut().enumerate() {
            if update(job, Some(WaitReason::NotAdmitted), now_s) {
                new_waiting.push(i);
            }
        }
        // The order stays until the next decision: positions are read from
        // it, by the words below too.
        d.placed.clear();
        d.preempted.clear();
        d.dropped = false;
        self.decided = d;
        if self.events.on() {
            let words = self.wait_explainer();
            let waiting_event = |job: &Job| {
                job.wait.map(|r| What::Waiting {
                    wait_kind: r.kind().into(),
                    reason: words.explain(job).unwrap_or_default(),
                })
            };
            let mut events: Vec<(Result<JobId, usize>, What)> = Vec::new();
            for &id in &changed {
                if let Some(what) = self.jobs.get(id).and_then(waiting_event) {
                    events.push((Ok(id), what));
                }
            }
            for &i in &new_waiting {
                if let Some(what) = waiting_event(&self.waiting[i]) {
                    events.push((Err(i), what));
                }
            }
            for (who, what) in events {
                let job = match who {
                    Ok(id) => self.jobs.get(id),
                    Err(i) => self.waiting.get(i),
                };
                if let Some(job) = job {
                    self.events.job(job, what);
                }
            }
        }
    }

    /// `job`'s place in the scheduling policy's order of the last round
    /// (1-based) and how many jobs it ordered; `None` if it did not order it.
    pub fn wait_position(&self, job: JobId) -> Option<(u32, u32)> {
        let order = &self.decided.order;
        let i = order.iter().position(|(id, _)| *id == job)?;
        Some((i as u32 + 1, order.len() as u32))
    }

    /// Every ordered job's place, as [`RoundLoop::wait_position`] gives it
    /// (for callers that want many).
    pub fn wait_positions(&self) -> std::collections::HashMap<JobId, (u32, u32)> {
        let of = self.decided.order.len() as u32;
        self.decided
            .order
            .iter()
            .enumerate()
            .map(|(i, (id, _))| (*id, (i as u32 + 1, of)))
            .collect()
    }

    /// `job`'s wait reason in words, with the modules' names, the free GPUs
    /// and what the policies say of it; `None` if it does not wait. (For
    /// many jobs, [`RoundLoop::wait_explainer`] reads the order once.)
    pub fn explain_wait(&self, job: &Job) -> Option<String> {
        self.wait_explainer().explain(job)
    }

    /// Explains the waits of many jobs against one reading of the round's
    /// order and free GPUs: each job then costs its own words, not a
    /// search of the order and a count of the GPUs (a scheduler with
    /// 100,000 queued jobs explains each of them every round).
    pub fn wait_explainer(&self) -> WaitExplainer<'_> {
        WaitExplainer {
            lp: self,
            positions: std::cell::OnceCell::new(),
            free_words: std::cell::OnceCell::new(),
            first_unplaced: std::cell::OnceCell::new(),
            shares: std::cell::OnceCell::new(),
            hosts: std::cell::OnceCell::new(),
        }
    }

    /// Free GPUs by type (online nodes), types in name order.
    fn free_by_type(&self) -> Vec<(String, u32)> {
        let mut by: BTreeMap<&str, u32> = BTreeMap::new();
        for n in self.cluster.nodes().iter().filter(|n| n.online) {
            by.entry(n.spec.gpu_type.as_str()).or_default();
        }
        for g in self.cluster.free_gpus() {
            if let Some(t) = self.cluster.gpu_type(g) {
                *by.entry(t).or_default() += 1;
            }
        }
        by.into_iter().map(|(t, n)| (t.to_string(), n)).collect()
    }
}

/// [`RoundLoop::explain_wait`] for many jobs: the order's positions and
/// the free GPUs by type are read once, when first needed.
pub struct WaitExplainer<'a> {
    lp: &'a RoundLoop,
    /// The largest free share by GPU type, for jobs asking part of a GPU.
    shares: std::cell::OnceCell<BTreeMap<&'a str, u32>>,
    /// CPUs and memory free by online node, for jobs without GPUs.
    hosts: std::cell::OnceCell<Vec<(f64, f64)>>,
    positions: std::cell::OnceCell<rustc_hash::FxHashMap<JobId, (u32, u32)>>,
    /// The words every job waiting for GPUs shares this round: the free
    /// GPUs (by type) and the scheduling policy's name.
    free_words: std::cell::OnceCell<String>,
    first_unplaced: std::cell::OnceCell<Option<(JobId, u32, u32)>>,
}

impl WaitExplainer<'_> {
    /// The first job of the round's order that waits unplaced
    /// (`waiting-for-gpus` or `blocked-by-placement`), if it comes before
    /// `job`: (its id, GPUs asked, place, jobs ordered).
    fn blocker_ahead_of(&self, job: JobId) -> Option<(JobId, u32, u32, u32)> {
        let lp = self.lp;
        let first = self.first_unplaced.get_or_init(|| {
            lp.decided
                .order
                .iter()
                .enumerate()
                .find_map(|(i, &(id, asked))| {
                    let waits = lp.jobs.get(id).and_then(|j| j.wait).is_some_and(|w| {
                        matches!(
                            w,
                            WaitReason::WaitingForGpus { .. }
                                | WaitReason::BlockedByPlacement { .. }
                        )
                    });
                    waits.then_some((id, asked, i as u32 + 1))
                })
        });
        let &(b, asked, p) = first.as_ref()?;
        let &(mine, of) = self.positions().get(&job)?;
        (b != job && p < mine).then_some((b, asked, p, of))
    }

    /// Every ordered job's place ([`RoundLoop::wait_positions`]), read once.
    pub fn positions(&self) -> &rustc_hash::FxHashMap<JobId, (u32, u32)> {
        self.positions.get_or_init(|| {
            let order = &self.lp.decided.order;
            let of = order.len() as u32;
            order
                .iter()
                .enumerate()
                .map(|(i, (id, _))| (*id, (i as u32 + 1, of)))
                .collect()
        })
    }

    /// `job`'s wait reason in words ([`RoundLoop::explain_wait`]).
    pub fn explain(&self, job: &Job) -> Option<String> {
        let mut out = String::new();
        self.explain_into(job, &mut out).then_some(out)
    }

    /// [`WaitExplainer::explain`] into `out` (cleared first, its buffer
    /// kept: a scheduler rewrites 100,000 jobs' words a round); false, and
    /// `out` empty, when `job` does not wait.
    pub fn explain_into(&self, job: &Job, out: &mut String) -> bool {
        use std::fmt::Write;
        out.clear();
        let lp = self.lp;
        if job.without_gpus() && self.explain_without_gpus(job, out) {
            return true;
        }
        // The common case, written in place: a job waiting for GPUs (a
        // scheduler writes these for every waiting job every round).
        if let (Some(WaitReason::WaitingForGpus { .. }), Some(m)) = (job.wait, job.spec.gpu_milli) {
            let best = self.shares.get_or_init(|| lp.cluster.largest_free_share());
            let types = &job.spec.elasticity.gpu_types;
            let _ = write!(
                out,
                "waiting for {} of a{} GPU: the largest free share is {}; `{}`: ",
                f64::from(m) / 1000.0,
                match types.len() {
                    0 => String::new(),
                    _ => format!(" {}", types.join(" or ")),
                },
                f64::from(best_share(best, types)) / 1000.0,
                lp.policies.names.scheduling
            );
            match self.positions().get(&job.id()) {
                Some(&(p, of)) => {
                    let _ = write!(out, "{}{} of {of}", p, crate::wait::ordinal_suffix(p));
                }
                None => {
                    let _ = write!(out, "not among the {} it ordered", lp.decided.order.len());
                }
            }
            return true;
        }
        if let Some(WaitReason::WaitingForGpus { asked }) = job.wait {
            out.push_str("waiting for ");
            push_u32(out, asked);
            out.push_str(if asked == 1 { " GPU" } else { " GPUs" });
            out.push_str(self.free_words.get_or_init(|| {
                let mut w = format!(" ({} free", lp.cluster.num_free());
                let by_type = lp.free_by_type();
                if by_type.len() > 1 {
                    w.push_str(": ");
                    for (i, (t, n)) in by_type.iter().enumerate() {
                        let _ = write!(w, "{}{n} {t}", if i > 0 { ", " } else { "" });
                    }
                }
                let _ = write!(w, "); `{}`: ", lp.policies.names.scheduling);
                w
            }));
            match self.positions().get(&job.id()) {
                Some(&(p, of)) => {
                    push_u32(out, p);
                    out.push_str(crate::wait::ordinal_suffix(p));
                    out.push_str(" of ");
                    push_u32(out, of);
                }
                None => {
                    let _ = write!(out, "not among the {} it ordered", lp.decided.order.len());
                }
            }
            if let Some(k) = lp.policies.scheduling.sort_key(job, &lp.jobs) {
                out.push_str(", ");
                out.push_str(&k);
            }
            return true;
        }
        match self.words(job) {
            Some(w) => {
                *out = w;
                true
            }
            None => false,
        }
    }

    /// A job without GPUs waiting for a node's CPUs and memory: "waiting
    /// for 4.00 CPUs and 8.0 GiB of one node, without GPUs: the most CPUs
    /// free on a node are 2.50 (with 30.0 GiB); `fifo`: 3rd of 9".
    fn explain_without_gpus(&self, job: &Job, out: &mut String) -> bool {
        use std::fmt::Write;
        let (
            Some(WaitReason::WaitingForGpus { .. } | WaitReason::BlockedByPlacement { .. }),
            Some(h),
        ) = (job.wait, job.spec.host_need)
        else {
            return false;
        };
        let lp = self.lp;
        let free = self.hosts.get_or_init(|| host_free(&lp.cluster));
        let most = free
            .iter()
            .copied()
            .fold((0.0f64, 0.0f64), |a, x| if x.0 > a.0 { x } else { a });
        let _ = write!(
            out,
            "waiting for {:.2} CPUs and {:.1} GiB of one node, without GPUs: the most CPUs free on a node are {:.2} (with {:.1} GiB); ",
            h.cpus_per_gpu, h.mem_gb_per_gpu, most.0, most.1
        );
        if fits_a_node(free, job) {
            let _ = write!(out, "`{}` did not place it; ", lp.policies.names.placement);
        }
        let _ = write!(out, "`{}`: ", lp.policies.names.scheduling);
        match self.positions().get(&job.id()) {
            Some(&(p, of)) => {
                let _ = write!(out, "{}{} of {of}", p, crate::wait::ordinal_suffix(p));
            }
            None => {
                let _ = write!(out, "not among the {} it ordered", lp.decided.order.len());
            }
        }
        true
    }

    /// The words of every other wait reason.
    fn words(&self, job: &Job) -> Option<String> {
        let lp = self.lp;
        let super::PolicyNames {
            admission,
            scheduling,
            placement,
        } = &lp.policies.names;
        let free = lp.cluster.num_free();
        Some(match job.wait? {
            WaitReason::NotAdmitted => {
                if let Some(why) = lp.placement_hold(job.id()) {
                    return Some(format!(
                        "held before admission: placement `{placement}` could never place it: {why}"
                    ));
                }
                let why = lp
                    .policies
                    .admission
                    .why_waiting(job, &lp.jobs, &lp.cluster)
                    .unwrap_or_else(|| "not admitted yet".into());
                format!("not admitted by `{admission}`: {why}")
            }
            // (Written in place by `explain_into`, which does not come here.)
            WaitReason::WaitingForGpus { .. } => {
                let mut s = String::new();
                self.explain_into(job, &mut s);
                s
            }
            WaitReason::BlockedByPlacement { asked } => match self.blocker_ahead_of(job.id()) {
                // A job ahead of it in the order was not placed either:
                // a placement that keeps the order places nothing after
                // it, so that job is what this one waits behind.
                Some((b, b_asked, p, of)) => format!(
                    "blocked behind {}{} ({} of {of} in `{scheduling}`'s order, {} asked, {} free in all): `{placement}` did not place it, nor the {} asked after it",
                    b,
                    lp.jobs
                        .get(b)
                        .map(|j| j.spec.name.as_str())
                        .filter(|n| !n.is_empty() && *n != b.0.to_string() && *n != b.to_string())
                        .map_or(String::new(), |n| format!(" `{n}`")),
                    ordinal(p),
                    gpus(b_asked),
                    gpus(free),
                    gpus(asked)
                ),
                None => format!(
                    "blocked by placement `{placement}`: {} free in all, but it did not place the {} asked",
                    gpus(free),
                    gpus(asked)
                ),
            },
            WaitReason::Held {
                cause: HoldCause::StartupProtection,
            } => "held: the GPUs it was placed on belong to jobs still starting or not past min_run_s".into(),
            WaitReason::Held {
                cause: HoldCause::DecisionDropped,
            } => format!(
                "held: this round's decision was dropped ({})",
                lp.last_invalid.as_deref().unwrap_or("invalid")
            ),
            WaitReason::Preempted => {
                format!("preempted this round by `{scheduling}` and `{placement}`")
            }
        })
    }
}

/// CPUs and memory (GiB) free on each online node, by node id.
fn host_free(cluster: &crate::cluster::ClusterState) -> Vec<(f64, f64)> {
    (cluster.nodes().iter())
        .filter(|n| n.online)
        .map(|n| cluster.host_free(n.id))
        .collect()
}

/// Whether some node has the CPUs and memory `job` (without GPUs) asks.
fn fits_a_node(free: &[(f64, f64)], job: &Job) -> bool {
    let eps = crate::cluster::HOST_EPS;
    job.spec.host_need.is_some_and(|h| {
        free.iter()
            .any(|&(c, m)| h.cpus_per_gpu <= c + eps && h.mem_gb_per_gpu <= m + eps)
    })
}

/// The largest free share (thousandths) of the GPU types a job may use.
fn best_share(by_type: &std::collections::BTreeMap<&str, u32>, types: &[String]) -> u32 {
    (by_type.iter())
        .filter(|(t, _)| types.is_empty() || types.iter().any(|x| x == *t))
        .map(|(_, m)| *m)
        .max()
        .unwrap_or(0)
}

/// Appends `n` in decimal (what `write!` writes, without its machinery).
fn push_u32(out: &mut String, n: u32) {
    out.push_str(itoa::Buffer::new().format(n));
}

/// `1 GPU`, `4 GPUs`.
fn gpus(n: u32) -> String {
    if n == 1 {
        "1 GPU".into()
    } else {
        format!("{n} GPUs")
    }
}

/// Counts the time since `job`'s reason was last counted under that reason
/// and sets `reason`; whether the kind changed to a new reason.
fn update(job: &mut Job, reason: Option<WaitReason>, now_s: f64) -> bool {
    if let (Some(r), Some(t)) = (job.wait, job.wait_counted_s) {
        job.wait_s[r.index()] += (now_s - t).max(0.0);
    }
    let changed = reason.is_some() && job.wait.map(|r| r.index()) != reason.map(|r| r.index());
    job.wait = reason;
    job.wait_counted_s = reason.map(|_| now_s);
    changed
}

#[cfg(test)]
mod tests {
    proptest::proptest! {
        /// The words' numbers read as `write!` writes them.
        #[test]
        fn push_u32_writes_what_display_writes(n in proptest::num::u32::ANY) {
            let mut out = String::from("x");
            super::push_u32(&mut out, n);
            proptest::prop_assert_eq!(out, format!("x{n}"));
        }
    }

    #[test]
    fn push_u32_edges() {
        for n in [0, 9, 10, 99, 100, u32::MAX] {
            let mut out = String::new();
            super::push_u32(&mut out, n);
            assert_eq!(out, n.to_string());
        }
    }
}
