//! The jobs of a trace not yet submitted.

use crate::workload::SimJob;

/// Jobs not yet submitted, kept latest arrival first so that the next one
/// is taken off the end of the buffer. The room the submitted jobs held is
/// given back by trimming the end of the one allocation, in place: a queue
/// taken from the front must instead copy what remains into a smaller
/// buffer, and for a ten-million-job trace that copy (gigabytes, beside
/// the old buffer) was the run's peak of memory.
#[derive(Clone, Debug, Default)]
pub(super) struct Pending {
    latest_first: Vec<SimJob>,
}

/// Jobs' room trimmed at a time, at least (below it, half the buffer).
const TRIM_JOBS: usize = 1 << 16;

impl Pending {
    /// `trace` in arrival order (reversed in place, no copy).
    pub(super) fn new(mut trace: Vec<SimJob>) -> Self {
        trace.reverse();
        Pending {
            latest_first: trace,
        }
    }

    /// The next job to arrive.
    pub(super) fn front(&self) -> Option<&SimJob> {
        self.latest_first.last()
    }

    pub(super) fn pop_front(&mut self) -> Option<SimJob> {
        self.latest_first.pop()
    }

    pub(super) fn len(&self) -> usize {
        self.latest_first.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.latest_first.is_empty()
    }

    /// Gives back the room of submitted jobs once it is worth a call to the
    /// allocator: a large buffer is shrunk where it lies.
    pub(super) fn give_back(&mut self) {
        let (len, cap) = (self.latest_first.len(), self.latest_first.capacity());
        let free = cap - len;
        if free >= TRIM_JOBS || (cap > 1024 && len < cap / 2) {
            self.latest_first.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blox_core::JobSpec;

    #[test]
    fn jobs_leave_in_arrival_order_and_their_room_is_given_back() {
        let n = 3 * TRIM_JOBS;
        let trace: Vec<SimJob> = (0..n as u64)
            .map(|i| SimJob::of_duration(JobSpec::new(i, i as f64, 1), 10.0))
            .collect();
        let mut p = Pending::new(trace);
        assert_eq!(p.len(), n);
        for i in 0..n as u64 {
            assert_eq!(p.front().map(|j| j.spec.id.0), Some(i));
            assert_eq!(p.pop_front().map(|j| j.spec.id.0), Some(i));
            p.give_back();
            assert!(
                p.latest_first.capacity() - p.len() < TRIM_JOBS,
                "room kept after {} of {n} left",
                i + 1
            );
        }
        assert!(p.is_empty() && p.front().is_none() && p.pop_front().is_none());
    }
}
