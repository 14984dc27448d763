//! Jobs without GPUs (requested_gpus 0) through the simulator, tested as
//! an adversary would: adversarial host needs, nodes exactly full,
//! failures, forks, what-if, determinism, snapshots.

use blox_core::cluster::HostShare;
use blox_core::{JobSpec, JobStatus};
use blox_sim::{load_config, SimJob, Simulation};
use std::path::{Path, PathBuf};

/// One node group per (gpus, cpus, mem, count).
fn cluster_toml(groups: &[(u32, u32, f64, u32)]) -> String {
    let mut s = String::new();
    for (gpus, cpus, mem, count) in groups {
        s += &format!(
            "[[cluster.node_groups]]\ncount = {count}\ngpus = {gpus}\ngpu_type = \"T4\"\ncpus = {cpus}\nhost_mem_gb = {mem:.1}\n"
        );
    }
    s
}

fn write_cfg(dir: &Path, name: &str, groups: &[(u32, u32, f64, u32)], extra: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let text = format!(
        r#"{}
[run]
round_s = 60
seed = 1
{extra}
"#,
        cluster_toml(groups)
    );
    let text = if text.contains("[sim]") {
        text
    } else {
        text + "[sim]\nlaunch_overhead_s = 0\nrestart_overhead_s = 0\n"
    };
    let text = if text.contains("[placement]") {
        text
    } else {
        text + "[placement]\npolicy = \"fgd\"\n"
    };
    let text = if text.contains("[scheduling]") {
        text
    } else {
        text + "[scheduling]\npolicy = \"fifo\"\n"
    };
    std::fs::write(&path, text).unwrap();
    path
}

/// A job: `gpus` GPUs (`milli` for a share), `cpus`/`mem` host need (per
/// GPU, in all without GPUs), running `dur` seconds.
fn job(id: u64, at: f64, gpus: u32, milli: Option<u32>, cpus: f64, mem: f64, dur: f64) -> SimJob {
    let mut s = JobSpec::new(id, at, gpus).with_duration(dur);
    s.name = format!("j{id}");
    s.gpu_milli = milli;
    s.host_need = Some(HostShare {
        cpus_per_gpu: cpus,
        mem_gb_per_gpu: mem,
    });
    SimJob::of_duration(s, dur)
}

fn cpu_job(id: u64, at: f64, cpus: f64, mem: f64, dur: f64) -> SimJob {
    job(id, at, 0, None, cpus, mem, dur)
}

/// Steps to the end, checking the cluster's invariants in full after
/// every round (on the snapshot), and that no node gives out more than it
/// has. Returns the result.
fn run_checked(mut s: Simulation) -> Result<blox_sim::SimResult, String> {
    let mut rounds = 0;
    loop {
        let more = s.step().map_err(|e| chain(&e))?;
        rounds += 1;
        let mut snap = s.snapshot();
        snap.cluster
            .check_all(&snap.jobs)
            .map_err(|e| format!("round {rounds}: {e}"))?;
        for n in snap.cluster.nodes() {
            let (c, m) = snap.cluster.host_used(n.id);
            if c > n.spec.cpus as f64 + 1e-6 || m > n.spec.host_mem_gb + 1e-6 {
                return Err(format!("round {rounds}: {} holds {c} CPUs {m} GiB", n.id));
            }
            if !n.online && !snap.cluster.hosted_on(n.id).is_empty() {
                return Err(format!("round {rounds}: offline {} hosts jobs", n.id));
            }
        }
        // Every running job without GPUs holds its need on its node.
        for j in snap.jobs.running() {
            if j.without_gpus() {
                let h = snap.cluster.host_hold_of(j.id());
                let need = j.spec.host_need.unwrap();
                match h {
                    Some(h)
                        if Some(h.node) == j.host_node
                            && h.cpus == need.cpus_per_gpu
                            && h.mem_gb == need.mem_gb_per_gpu => {}
                    other => {
                        return Err(format!(
                            "round {rounds}: {} runs without GPUs, hold {other:?}, host_node {:?}",
                            j.id(),
                            j.host_node
                        ))
                    }
                }
            }
        }
        if !more || rounds > 100_000 {
            break;
        }
    }
    Ok(s.finish())
}

/// An error with its sources.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        out += &format!(": {c}");
        cur = c.source();
    }
    out
}

fn row<'a>(r: &'a blox_sim::SimResult, name: &str) -> &'a blox_sim::JobRow {
    r.jobs.iter().find(|j| j.name == name).unwrap()
}

// ---------------------------------------------------------------------
// Nodes exactly full, over by epsilon.

#[test]
fn a_node_exactly_full_with_a_share_a_whole_gpu_and_cpu_only_jobs() {
    let d = tempfile::tempdir().unwrap();
    let p = write_cfg(d.path(), "full", &[(2, 8, 64.0, 1)], "");
    let cfg = load_config(&p, None, &[]).unwrap();
    let jobs = vec![
        job(0, 0.0, 1, Some(500), 3.0, 8.0, 600.0), // share: 3 CPUs
        job(1, 0.0, 1, None, 2.0, 8.0, 600.0),      // whole: 2 CPUs
        cpu_job(2, 0.0, 3.0, 8.0, 600.0),           // exactly full: 8
        cpu_job(3, 0.0, 1e-7, 0.0, 600.0),          // over by 1e-7 (< HOST_EPS)
        cpu_job(4, 0.0, 1e-3, 0.0, 60.0),           // over: must wait
        job(5, 0.0, 1, Some(100), 0.0, 0.0, 60.0),  // no CPUs: fits the share's GPU
    ];
    let s = Simulation::with_jobs(&cfg, jobs).unwrap();
    let r = run_checked(s).unwrap();
    for j in &r.jobs {
        assert_eq!(j.status, JobStatus::Finished, "{j:?}");
    }
    assert_eq!(row(&r, "j2").queueing_s, Some(0.0));
    assert_eq!(row(&r, "j3").queueing_s, Some(0.0), "within HOST_EPS");
    assert!(
        row(&r, "j4").queueing_s.unwrap() >= 600.0,
        "{:?}",
        row(&r, "j4")
    );
}

#[test]
fn many_tenths_of_a_cpu_fill_a_node_without_drift_breaking_the_checks() {
    // 0.1 summed 80 times is 8.000000000000002: within the slack.
    let d = tempfile::tempdir().unwrap();
    let p = write_cfg(d.path(), "tenths", &[(1, 8, 8.0, 1)], "");
    let cfg = load_config(&p, None, &[]).unwrap();
    let mut jobs: Vec<SimJob> = (0..81)
        .map(|i| cpu_job(i, 0.0, 0.1, 0.1, 120.0 + i as f64))
        .collect();
    jobs.push(job(81, 0.0, 1, Some(500), 0.0, 0.0, 60.0));
    let s = Simulation::with_jobs(&cfg, jobs).unwrap();
    let r = run_checked(s).unwrap();
    let started_at_once = r.jobs.iter().filter(|j| j.queueing_s == Some(0.0)).count();
    assert_eq!(started_at_once, 81, "80 tenths and the share");
    assert!(r.jobs.iter().all(|j| j.status == JobStatus::Finished));
}

#[test]
fn a_cpu_only_job_needing_nothing_runs_anywhere_in_any_number() {
    let d = tempfile::tempdir().unwrap();
    let p = write_cfg(d.path(), "zero", &[(1, 1, 1.0, 1)], "");
    let cfg = load_config(&p, None, &[]).unwrap();
    let jobs: Vec<SimJob> = (0..300).map(|i| cpu_job(i, 0.0, 0.0, 0.0, 60.0)).collect();
    let s = Simulation::with_jobs(&cfg, jobs).unwrap();
    let r = run_checked(s).unwrap();
    assert!(r.jobs.iter().all(|j| j.queueing_s == Some(0.0)));
}

#[test]
fn a_cpu_only_job_bigger_than_any_node_is_rejected_at_submission() {
    // As a job asking for more GPUs than the cluster has: rejected with
    // the largest node's figures, the rest of the run unaffected. Too many
    // CPUs, too much memory, or each fitting a different node.
    let d = tempfile::tempdir().unwrap();
    let p = write_cfg(d.path(), "huge", &[(2, 8, 64.0, 2), (1, 16, 512.0, 1)], "");
    let cfg = load_config(&p, None, &[]).unwrap();
    let jobs = vec![
        cpu_job(0, 0.0, 1e300, 1.0, 60.0),
        job(1, 0.0, 1, None, 1.0, 1.0, 60.0),
        cpu_job(2, 0.0, 1.0, 513.0, 60.0),
        cpu_job(3, 0.0, 17.0, 100.0, 60.0),
        cpu_job(4, 0.0, 16.0, 512.0, 60.0),
        // Over by less than the cluster's checks allow (HOST_EPS): it fits.
        cpu_job(5, 0.0, 16.0 + 5e-7, 512.0, 60.0),
    ];
    let s = Simulation::with_jobs(&cfg, jobs).unwrap();
    let r = run_checked(s).unwrap();
    for name in ["j0", "j2", "j3"] {
        let j = row(&r, name);
        assert_eq!(j.status, JobStatus::Rejected, "{name}: {j:?}");
        assert!(
            j.reason.contains("no node has both")
                && j.reason.contains("the most CPUs a node has: 16"),
            "{name}: {}",
            j.reason
        );
    }
    assert_eq!(row(&r, "j1").status, JobStatus::Finished);
    // Exactly the largest node's CPUs and memory: it runs there.
    assert_eq!(row(&r, "j4").status, JobStatus::Finished);
    assert_eq!(
        row(&r, "j5").status,
        JobStatus::Finished,
        "{:?}",
        row(&r, "j5")
    );
}

#[test]
fn adversarial_host_needs_are_refused_before_the_run() {
    let d = tempfile::tempdir().unwrap();
    let p = write_cfg(d.path(), "adv", &[(2, 8, 64.0, 1)], "");
    let cfg = load_config(&p, None, &[]).unwrap();
    for (c, m) in [
        (f64::NAN, 1.0),
        (1.0, f64::NAN),
        (f64::INFINITY, 1.0),
        (-1.0, 1.0),
        (1.0, -0.0001),
        (f64::NEG_INFINITY, 0.0),
    ] {
        let jobs = vec![cpu_job(0, 0.0, c, m, 60.0)];
        match Simulation::with_jobs(&cfg, jobs) {
            Err(e) => assert!(e.to_string().contains("host_need"), "{e}"),
            Ok(s) => {
                let r = run_checked(s).unwrap();
                let j = row(&r, "j0");
                assert_eq!(j.status, JobStatus::Rejected, "{c} {m}: {j:?}");
            }
        }
    }
    // -0.0: a negative zero is not negative.
    let s = Simulation::with_jobs(&cfg, vec![cpu_job(0, 0.0, -0.0, -0.0, 60.0)]).unwrap();
    let r = run_checked(s).unwrap();
    assert_eq!(row(&r, "j0").status, JobStatus::Finished);
}

#[test]
fn a_job_without_gpus_and_without_host_need_is_rejected_not_fatal() {
    let d = tempfile::tempdir().unwrap();
    let p = write_cfg(d.path(), "noneed", &[(2, 8, 64.0, 1)], "");
    let cfg = load_config(&p, None, &[]).unwrap();
    let mut s0 = JobSpec::new(0, 0.0, 0).with_duration(60.0);
    s0.name = "j0".into();
    let jobs = vec![
        SimJob::of_duration(s0, 60.0),
        job(1, 0.0, 1, None, 1.0, 1.0, 60.0),
    ];
    let s = Simulation::with_jobs(&cfg, jobs).unwrap();
    let r = run_checked(s).unwrap();
    assert_eq!(row(&r, "j0").status, JobStatus::Rejected);
    assert_eq!(row(&r, "j1").status, JobStatus::Finished);
}

#[test]
fn a_gpu_job_whose_host_need_no_node_has_is_rejected_once_nothing_else_can_change() {
    let d = tempfile::tempdir().unwrap();
    let p = write_cfg(d.path(), "huge_gpu", &[(2, 8, 64.0, 2)], "");
    let cfg = load_config(&p, None, &[]).unwrap();
    let jobs = vec![
        job(0, 0.0, 1, None, 100.0, 1.0, 60.0),
        job(1, 0.0, 1, None, 1.0, 1.0, 2.0 * 3600.0),
    ];
    let s = Simulation::with_jobs(&cfg, jobs).unwrap();
    // Not rejected at submission (a GPU job's host need is per GPU, and
    // whether a placement honours it is the placement's): held back with
    // the placement's words while anything else runs, then rejected with
    // them once nothing can change (no node to come back or be added); the
    // run ends with the other job's results, not in a stall.
    let r = run_checked(s).unwrap();
    let held = row(&r, "j0");
    assert_eq!(held.status, JobStatus::Rejected, "{held:?}");
    assert!(
        held.reason
            .starts_with("placement `fgd` could never place it: no node could hold it even empty"),
        "{}",
        held.reason
    );
    let other = row(&r, "j1");
    assert_eq!(other.status, JobStatus::Finished);
    assert!(
        held.finish_s.unwrap() >= other.finish_s.unwrap(),
        "{held:?}"
    );
}

// ---------------------------------------------------------------------
// Failures and repairs.

fn failures_cfg(dir: &Path, extra: &str) -> blox_config::Config {
    let p = write_cfg(
        dir,
        "fail",
        &[(1, 8, 64.0, 3)],
        &format!(
            "checkpoint_interval_s = 60\n[failures]\nmodel = \"exponential\"\ngpu_mtbf_h = 0.1\nrepair_h = 0.01\nseed = 3\n{extra}"
        ),
    );
    load_config(&p, None, &[]).unwrap()
}

#[test]
fn a_long_cpu_only_job_on_failing_nodes_keeps_its_work_and_finishes() {
    // Nodes fail every ~6 minutes; a job checkpointing every minute keeps
    // most of its work. One with GPUs and one without, side by side.
    let d = tempfile::tempdir().unwrap();
    let cfg = failures_cfg(d.path(), "");
    let jobs = vec![
        cpu_job(0, 0.0, 4.0, 8.0, 6.0 * 3600.0),
        job(1, 0.0, 1, None, 2.0, 8.0, 6.0 * 3600.0),
    ];
    let s = Simulation::with_jobs(&cfg, jobs).unwrap();
    let r = run_checked(s).unwrap();
    for j in &r.jobs {
        eprintln!(
            "{} {:?} jct {:?} interruptions {} restarts {}",
            j.name, j.status, j.jct_s, j.interruptions, j.restarts
        );
        assert_eq!(j.status, JobStatus::Finished, "{j:?}");
    }
}

#[test]
fn cpu_only_jobs_beside_shares_on_failing_nodes_hold_the_invariants() {
    let d = tempfile::tempdir().unwrap();
    let cfg = failures_cfg(d.path(), "");
    let mut jobs = Vec::new();
    for i in 0..60u64 {
        let at = (i / 3) as f64 * 120.0;
        jobs.push(match i % 3 {
            0 => cpu_job(i, at, 2.5, 16.0, 900.0),
            1 => job(i, at, 1, Some(300), 1.5, 8.0, 900.0),
            _ => job(i, at, 1, Some(700), 2.0, 8.0, 600.0),
        });
    }
    let s = Simulation::with_jobs(&cfg, jobs).unwrap();
    let r = run_checked(s).unwrap();
    assert!(r.jobs.iter().all(|j| j.status == JobStatus::Finished));
}

#[test]
fn the_no_progress_guard_counts_a_cpu_only_jobs_work_as_none() {
    // Same failures; the job without GPUs is watched: its progress rises
    // well past half while the guard says it kept no work.
    let d = tempfile::tempdir().unwrap();
    let cfg = failures_cfg(d.path(), "");
    let jobs = vec![cpu_job(0, 0.0, 4.0, 8.0, 6.0 * 3600.0)];
    let mut s = Simulation::with_jobs(&cfg, jobs).unwrap();
    let mut best = 0.0f64;
    let mut interruptions = 0;
    let err = loop {
        match s.step() {
            Ok(true) => {}
            Ok(false) => break None,
            Err(e) => break Some(e.to_string()),
        }
        let snap = s.snapshot();
        if let Some(j) = snap.jobs.get(blox_core::JobId(0)) {
            best = best.max(j.progress);
            interruptions = j.interruptions;
        }
    };
    eprintln!("progress {best:.3} after {interruptions} interruptions; {err:?}");
    assert!(
        err.is_none(),
        "stopped at progress {best:.3} ({interruptions} interruptions): {err:?}"
    );
}

// ---------------------------------------------------------------------
// openb lists: determinism, what-if, forecasts, snapshots.

/// openb pod lists with tasks without GPUs: determinism, what-if,
/// forecasts, snapshots, every policy and scorer.
mod lists;
