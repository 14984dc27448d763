//! Scheduling policies: the priority order of runnable jobs and what each gets
//! (Blox §3.1).

pub mod doubling;
pub mod fifo;
pub mod gavel;
pub mod las;
pub mod loss_termination;
pub mod optimus;
pub mod srtf;
pub mod synergy;
pub mod teams;
pub mod themis;
pub mod tiresias;

/// Runnable jobs by `(key, arrival, id)`, floats by `total_cmp`: the key is
/// read once per job and the sort runs over a contiguous table rather than
/// following a pointer per comparison (issue 39: a large cluster's policy
/// sorts thousands of jobs every round). Ids are distinct, so the order is
/// total and equals a stable sort by the same comparison.
pub fn by_key_then_arrival<'a>(
    jobs: impl Iterator<Item = &'a blox_core::Job>,
    key: impl Fn(&blox_core::Job) -> f64,
) -> Vec<&'a blox_core::Job> {
    let mut keyed: Vec<(f64, f64, blox_core::JobId, &blox_core::Job)> =
        jobs.map(|j| (key(j), j.arrival_s(), j.id(), j)).collect();
    keyed.sort_unstable_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then(a.1.total_cmp(&b.1))
            .then(a.2.cmp(&b.2))
    });
    keyed.into_iter().map(|k| k.3).collect()
}
