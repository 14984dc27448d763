//! Where a round's time goes (`RoundReport::timings`).

/// Wall-clock seconds of a round's parts (the backend's own work is inside
/// `cluster`, `metrics` and `launch`; the wait for the next round is not
/// counted).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RoundTimings {
    /// Cluster changes (step 1).
    pub cluster_s: f64,
    /// Metric collection, pruning and new submissions (steps 2–4).
    pub metrics_s: f64,
    /// Policy selection and admission (steps 4½–5).
    pub admission_s: f64,
    /// The scheduling policy and the checks of its decision (step 6).
    pub scheduling_s: f64,
    /// The placement policy and the checks of its decision (step 7).
    pub placement_s: f64,
    /// Preemptions and launches through the backend (step 8).
    pub launch_s: f64,
}

impl RoundTimings {
    /// `(name, seconds)` of every part, for exporters.
    pub fn parts(&self) -> [(&'static str, f64); 6] {
        [
            ("cluster", self.cluster_s),
            ("metrics", self.metrics_s),
            ("admission", self.admission_s),
            ("scheduling", self.scheduling_s),
            ("placement", self.placement_s),
            ("launch", self.launch_s),
        ]
    }
}

/// Seconds since `t`, and `t` moved to now.
pub(super) fn lap(t: &mut std::time::Instant) -> f64 {
    let now = std::time::Instant::now();
    let s = now.duration_since(*t).as_secs_f64();
    *t = now;
    s
}
