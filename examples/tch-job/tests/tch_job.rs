//! The tch job under the real round loop (local backend): two jobs share one
//! GPU under LAS, so each is preempted and resumed many times; both finish,
//! resume from their checkpoints, learn, and report a gradient noise scale.
//! Runs only with `--features tch` (libtorch installed; see README.md).
#![cfg(feature = "tch")]

// The built-in policies, registered by name.
use blox_core::*;
use blox_policies as _;
use blox_runtime::{LocalBackend, LocalConfig};

const JOB: &str = env!("CARGO_BIN_EXE_blox-tch-job");

#[test]
fn the_tch_job_is_preempted_resumes_from_its_varstore_and_learns() {
    let policies = registry::build_named("accept-all", "las", "consolidated").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let jobs: Vec<JobSpec> = (0..2)
        .map(|i| {
            let mut s = JobSpec::new(i, 0.0, 1);
            s.command = vec![JOB.into(), "--iterations".into(), "8000".into()];
            s
        })
        .collect();
    let cluster = ClusterState::homogeneous(1, 1);
    let mut b = LocalBackend::new(LocalConfig::new(dir.path()), &cluster, jobs).unwrap();
    let mut lp = RoundLoop::new(policies, cluster, 1.0);
    let t = std::time::Instant::now();
    while !(b.exhausted() && lp.is_idle()) {
        lp.run_round(&mut b).unwrap();
        assert!(t.elapsed().as_secs() < 300, "the jobs did not finish");
    }
    for j in lp.jobs.finished() {
        assert_eq!(j.status, JobStatus::Finished, "{:?}", j.end_reason);
    }
    let launches = b.launches();
    for id in [JobId(0), JobId(1)] {
        assert!(
            launches[&id] > 1,
            "job {id} was never preempted: {launches:?}"
        );
        let jd = blox_runtime::local::job_dir(dir.path(), id);
        let mut losses = Vec::new();
        let mut gns = Vec::new();
        let mut resumed = false;
        for n in 1..=launches[&id] {
            let c = jd.join(format!("launch-{n}"));
            let err = std::fs::read_to_string(c.join("stderr")).unwrap_or_default();
            resumed |= err.contains("resumed at iteration") && n > 1;
            for line in std::fs::read_to_string(c.join("metrics"))
                .unwrap_or_default()
                .lines()
            {
                let mut it = line.split_whitespace();
                match (it.next(), it.next().and_then(|v| v.parse::<f64>().ok())) {
                    (Some("loss"), Some(v)) => losses.push(v),
                    (Some("gns"), Some(v)) => gns.push(v),
                    _ => {}
                }
            }
        }
        assert!(resumed, "job {id} never resumed from its checkpoint");
        let (first, last) = (losses[0], *losses.last().unwrap());
        eprintln!(
            "{id}: {} launches, loss {first:.4} -> {last:.4}, gradient noise scale {:.1} (last)",
            launches[&id],
            gns.last().copied().unwrap_or(f64::NAN)
        );
        assert!(
            last < 0.5 * first,
            "job {id} did not learn: loss {first} -> {last}"
        );
        assert!(
            !gns.is_empty() && gns.iter().all(|g| g.is_finite()),
            "{gns:?}"
        );
    }
}
