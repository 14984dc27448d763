//! Accepted submissions the loop has not taken yet, with their number and
//! size per user kept as they come and go: the intake's bounds read them on
//! every submission without a walk of the queue (which made the intake
//! quadratic in what arrived within a round).

use blox_core::JobSpec;
use std::collections::{HashMap, VecDeque};

#[derive(Default)]
pub(super) struct Submissions {
    /// Each with its submission's encoded size, bytes.
    q: VecDeque<(JobSpec, u64)>,
    bytes: u64,
    /// By user (`""`: none named): how many, and their bytes.
    by_user: HashMap<String, (usize, u64)>,
}

fn user(s: &JobSpec) -> &str {
    s.user.as_deref().unwrap_or("")
}

impl Submissions {
    pub(super) fn len(&self) -> usize {
        self.q.len()
    }

    /// Bytes of every submission queued.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// How many of `user`'s are queued, and their bytes.
    pub(super) fn of_user(&self, user: &str) -> (usize, u64) {
        self.by_user.get(user).copied().unwrap_or((0, 0))
    }

    fn count_in(&mut self, s: &JobSpec, bytes: u64) {
        self.bytes += bytes;
        let e = self.by_user.entry(user(s).to_string()).or_default();
        e.0 += 1;
        e.1 += bytes;
    }

    fn count_out(&mut self, s: &JobSpec, bytes: u64) {
        self.bytes -= bytes;
        let u = user(s);
        if let Some(e) = self.by_user.get_mut(u) {
            e.0 -= 1;
            e.1 -= bytes;
            if e.0 == 0 {
                self.by_user.remove(u);
            }
        }
    }

    pub(super) fn push_back(&mut self, s: JobSpec, bytes: u64) {
        self.count_in(&s, bytes);
        self.q.push_back((s, bytes));
    }

    pub(super) fn push_front(&mut self, s: JobSpec, bytes: u64) {
        self.count_in(&s, bytes);
        self.q.push_front((s, bytes));
    }

    /// Takes job `id` out, if it is queued.
    pub(super) fn remove(&mut self, id: u64) -> Option<(JobSpec, u64)> {
        let at = self.q.iter().position(|(s, _)| s.id.0 == id)?;
        let (s, b) = self.q.remove(at)?;
        self.count_out(&s, b);
        Some((s, b))
    }

    /// Takes out, in order, every submission `take` accepts; the others
    /// stay, in order.
    pub(super) fn take_where(&mut self, take: impl Fn(&JobSpec) -> bool) -> Vec<JobSpec> {
        let mut out = Vec::new();
        let mut keep = VecDeque::with_capacity(self.q.len());
        for (s, b) in std::mem::take(&mut self.q) {
            if take(&s) {
                self.count_out(&s, b);
                out.push(s);
            } else {
                keep.push_back((s, b));
            }
        }
        self.q = keep;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: u64, user: Option<&str>, gpus: u32) -> JobSpec {
        let mut s = JobSpec::new(id, 0.0, gpus);
        s.user = user.map(str::to_string);
        s
    }

    /// The counts always equal a walk of the queue, through every way in
    /// and out.
    #[test]
    fn the_counts_follow_the_queue() {
        let mut q = Submissions::default();
        let walk = |q: &Submissions, u: &str| {
            q.q.iter()
                .filter(|(s, _)| user(s) == u)
                .fold((0, 0), |(n, b), (_, x)| (n + 1, b + x))
        };
        let check = |q: &Submissions| {
            for u in ["", "ann", "bob"] {
                assert_eq!(q.of_user(u), walk(q, u), "{u}");
            }
            assert_eq!(q.bytes(), q.q.iter().map(|(_, b)| b).sum::<u64>());
        };
        q.push_back(spec(1, Some("ann"), 1), 100);
        q.push_back(spec(2, Some("bob"), 8), 50);
        q.push_front(spec(3, None, 1), 7);
        q.push_back(spec(4, Some("ann"), 8), 30);
        check(&q);
        assert_eq!(q.of_user("ann"), (2, 130));
        let (s, b) = q.remove(2).unwrap();
        assert_eq!((s.id.0, b), (2, 50));
        assert!(q.remove(2).is_none());
        check(&q);
        let taken: Vec<u64> = q
            .take_where(|s| s.requested_gpus <= 4)
            .iter()
            .map(|s| s.id.0)
            .collect();
        assert_eq!(taken, vec![3, 1]);
        check(&q);
        assert_eq!((q.len(), q.bytes(), q.of_user("ann")), (1, 30, (1, 30)));
        assert_eq!(q.of_user(""), (0, 0));
    }
}
