//! The re-allocation factor (Sia, SOSP'23, §3.3, Eq. 2; the artifact's
//! `sia.py`): a job that holds a configuration loses its restart penalty
//! `S_i` whenever it is moved, so every *other* configuration of its row is
//! scaled by
//!
//! ```text
//! r_i = max(T_i − N_i·S_i, 0) / (T_i + S_i)
//! ```
//!
//! (age `T_i`, restarts so far `N_i`). A job that holds nothing (queued, or
//! preempted last round) loses nothing by starting anywhere: its row is not
//! scaled (`__solve_mip_rescaled` scales a row only when `prev_allocs_v2`
//! has a configuration for the job). Young jobs are not damped: an adaptive
//! job while `T_i < S_i`, a rigid one while its attained service is below
//! `S_i` GPU-seconds (`_compute_rigid_job_goodput_single`).

/// Adaptive (any job that Sia may give several GPU counts) or rigid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Adaptive,
    Rigid,
}

/// What the factor reads of a job.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct History {
    pub kind: Kind,
    /// Seconds since submission.
    pub age_s: f64,
    /// Launches after the first.
    pub restarts: u32,
    /// The model's restart penalty `S_i`, seconds.
    pub penalty_s: f64,
    /// GPU-seconds held so far (rigid jobs' guard).
    pub service_gpu_s: f64,
}

/// `r_i` of Eq. 2 with the artifact's guards for young jobs.
pub fn factor(h: &History) -> f64 {
    let young = match h.kind {
        Kind::Adaptive => h.age_s < h.penalty_s,
        Kind::Rigid => h.service_gpu_s < h.penalty_s,
    };
    if young {
        return 1.0;
    }
    let lost = h.restarts as f64 * h.penalty_s;
    let denom = h.age_s + h.penalty_s;
    if denom <= 0.0 {
        return 1.0;
    }
    (h.age_s - lost).max(0.0) / denom
}

/// The value of configuration `c` in a row after the factor: scaled unless
/// the job holds nothing (`holds` false) or `c` is what it holds (`current`).
pub fn scaled(value: f64, c: u32, holds: bool, current: Option<u32>, factor: f64) -> f64 {
    if !holds || current == Some(c) {
        value
    } else {
        value * factor
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(kind: Kind, age_s: f64, restarts: u32, service_gpu_s: f64) -> History {
        History {
            kind,
            age_s,
            restarts,
            penalty_s: 30.0,
            service_gpu_s,
        }
    }

    #[test]
    fn a_queued_job_is_not_scaled_anywhere() {
        // Old enough that its factor is well below 1, but it holds nothing.
        let f = factor(&h(Kind::Adaptive, 600.0, 3, 0.0));
        assert!((f - (600.0 - 90.0) / 630.0).abs() < 1e-12);
        for c in 0..4 {
            assert_eq!(scaled(2.0, c, false, None, f), 2.0);
        }
    }

    #[test]
    fn a_holding_job_keeps_its_configuration_and_pays_elsewhere() {
        let f = factor(&h(Kind::Adaptive, 600.0, 0, 0.0));
        assert!((f - 600.0 / 630.0).abs() < 1e-12);
        assert_eq!(scaled(2.0, 1, true, Some(1), f), 2.0);
        assert!((scaled(2.0, 0, true, Some(1), f) - 2.0 * f).abs() < 1e-12);
        // Held GPUs that match no configuration: every one is a move.
        assert!((scaled(2.0, 1, true, None, f) - 2.0 * f).abs() < 1e-12);
    }

    #[test]
    fn a_preempted_job_starts_again_without_a_penalty() {
        // Preempted last round: it restarted twice before, but holds nothing.
        let f = factor(&h(Kind::Adaptive, 3600.0, 2, 0.0));
        assert!(f < 1.0);
        assert_eq!(scaled(5.0, 3, false, None, f), 5.0);
    }

    #[test]
    fn young_jobs_are_not_damped() {
        assert_eq!(factor(&h(Kind::Adaptive, 29.0, 0, 0.0)), 1.0);
        assert!(factor(&h(Kind::Adaptive, 30.0, 0, 0.0)) < 1.0);
        // A rigid job's guard is its attained service, not its age.
        assert_eq!(factor(&h(Kind::Rigid, 5000.0, 0, 29.0)), 1.0);
        let f = factor(&h(Kind::Rigid, 5000.0, 1, 120.0));
        assert!((f - 4970.0 / 5030.0).abs() < 1e-12);
    }

    #[test]
    fn restarts_can_use_up_the_whole_age() {
        assert_eq!(factor(&h(Kind::Adaptive, 100.0, 10, 0.0)), 0.0);
    }
}
