//! Metrics on demand: the simulator publishes the per-round
//! progress metrics (`metric::PER_ROUND`) only while a policy of the loop
//! declares it reads one. A policy that declares them reads what it always
//! read, from whichever round it starts declaring; one that reads them
//! without declaring is stopped with an error that names it, the key and
//! the fix, instead of reading nothing.

use blox_core::*;
use blox_sim::{SimConfig, SimJob, Simulation};
use std::sync::{Arc, Mutex};

use blox_policies as _;

/// FIFO that reads every running job's epochs done and throughput each
/// round from its round `from` on, and declares them then if `declares`.
struct Reader {
    fifo: Box<dyn SchedulingPolicy>,
    rounds: u64,
    from: u64,
    declares: bool,
    seen: Arc<Mutex<Seen>>,
}

impl SchedulingPolicy for Reader {
    fn schedule(&mut self, round: &RoundInfo, jobs: &JobState, cluster: &ClusterState) -> Schedule {
        self.rounds += 1;
        if self.rounds <= self.from {
            return self.fifo.schedule(round, jobs, cluster);
        }
        // Waiting jobs too: they have epochs done (zero, or where a
        // preemption left them) but no throughput.
        for j in jobs.active() {
            let m = jobs.metrics();
            let e = m.get(j.id(), metric::EPOCHS_DONE);
            let t = m.get(j.id(), metric::THROUGHPUT);
            let running = j.is_running();
            self.seen
                .lock()
                .unwrap()
                .push((round.round, j.id(), running, e, t));
        }
        self.fifo.schedule(round, jobs, cluster)
    }

    fn metrics_read(&self) -> Vec<&'static str> {
        if self.declares && self.rounds >= self.from {
            vec![metric::EPOCHS_DONE, metric::THROUGHPUT]
        } else {
            Vec::new()
        }
    }
}

type Seen = Vec<(u64, JobId, bool, Option<f64>, Option<f64>)>;

fn run(from: u64, declares: bool) -> (Result<(), String>, Seen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut p = registry::build_named("accept-all", "fifo", "first-free").unwrap();
    p.scheduling = Box::new(Reader {
        fifo: registry::build_named("accept-all", "fifo", "first-free")
            .unwrap()
            .scheduling,
        rounds: 0,
        from,
        declares,
        seen: seen.clone(),
    });
    p.names.scheduling = "reader".into();
    let jobs: Vec<SimJob> = (0..12)
        .map(|i| {
            let d = 900.0 + 300.0 * i as f64;
            SimJob::of_duration(
                JobSpec::new(i, 40.0 * i as f64, 1 + (i % 3) as u32).with_duration(d),
                d,
            )
        })
        .collect();
    let run = RunConfig {
        round_s: Positive::of(60.0),
        ..RunConfig::default()
    };
    let sim_cfg = SimConfig {
        epoch_s: 120.0,
        ..SimConfig::default()
    };
    let r = (|| {
        let mut s = Simulation::new(p, ClusterState::homogeneous(2, 4), run, sim_cfg, jobs)
            .map_err(|e| error_chain(&e))?;
        while s.step().map_err(|e| error_chain(&e))? {}
        Ok(())
    })();
    let seen = seen.lock().unwrap().clone();
    (r, seen)
}

#[test]
fn a_policy_that_declares_its_metrics_reads_them_every_round() {
    let (r, seen) = run(0, true);
    r.unwrap();
    assert!(seen.len() > 50, "{} reads", seen.len());
    let mut first = std::collections::HashMap::new();
    for (round, job, running, e, t) in &seen {
        // Every job has its epochs done from the round after its
        // submission (the collection that follows it); a running one its
        // throughput.
        if *first.entry(*job).or_insert(*round) < *round {
            assert!(e.is_some(), "round {round}: {job} has no epochs done");
        }
        if *running {
            let t = t.unwrap_or_else(|| panic!("round {round}: {job} has no throughput"));
            assert!(t >= 1.0, "round {round}: {job} throughput {t}");
        }
    }
    assert!(seen.iter().any(|s| !s.2), "no job waited");
    // Epochs done grow while a job runs.
    let of = |j: u64| -> Vec<f64> {
        seen.iter()
            .filter(|s| s.1 == JobId(j) && s.2)
            .map(|s| s.3.unwrap())
            .collect()
    };
    let e = of(3);
    assert!(e.len() > 5 && e.windows(2).all(|w| w[1] >= w[0]) && e.last() > e.first());
}

#[test]
fn declaring_later_reads_what_declaring_from_the_start_reads() {
    let (r, all) = run(0, true);
    r.unwrap();
    let (r, late) = run(7, true);
    r.unwrap();
    // From round 7 on the late declarer sees exactly the same values,
    // jobs that have run for many rounds included (published again at
    // once when a policy starts reading them).
    let from = |s: &Seen| -> Seen { s.iter().filter(|x| x.0 >= 7).cloned().collect() };
    assert_eq!(from(&all), from(&late));
    let late = from(&late);
    assert!(late.iter().any(|x| x.3.unwrap() > 1.0));
    assert!(late.iter().any(|x| !x.2), "no job waited from round 7 on");
}

#[test]
fn reading_a_progress_metric_without_declaring_it_stops_the_run_and_says_why() {
    let (r, _) = run(3, false);
    let e = r.expect_err("an undeclared read is refused");
    for part in [
        "scheduling policy `reader`",
        "metric `epochs_done`",
        "metrics_read()",
    ] {
        assert!(e.contains(part), "{part:?} not in: {e}");
    }
}
