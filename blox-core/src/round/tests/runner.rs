//! The runner ([`crate::runner`]) and the loop's builder, on the scripted
//! backend.

use super::*;

/// Stops after `n` rounds; counts the rounds it saw end.
struct Rounds {
    n: u64,
    seen: Vec<u64>,
}

impl crate::runner::Driver<Fake> for Rounds {
    type Stop = &'static str;
    type Error = String;

    fn stop(&mut self, l: &RoundLoop, _: &Fake) -> Option<&'static str> {
        (l.rounds() >= self.n).then_some("enough")
    }

    fn after_round(
        &mut self,
        r: RoundReport,
        _: &mut RoundLoop,
        _: &mut Fake,
    ) -> Result<(), String> {
        self.seen.push(r.round);
        Ok(())
    }

    fn failed(&mut self, l: &RoundLoop, e: LoopError) -> String {
        format!("round {}: {}", l.rounds(), error_chain(&e))
    }
}

#[test]
fn the_runner_runs_rounds_until_its_driver_says_stop() {
    use crate::runner::{run, step, Step};
    let mut b = Fake::with(&[(1, 0.0, 1, 1000.0)]);
    let mut l = lp(plain(), 1, 2);
    let mut d = Rounds {
        n: 3,
        seen: Vec::new(),
    };
    assert_eq!(run(&mut l, &mut b, &mut d), Ok("enough"));
    assert_eq!(d.seen, [0, 1, 2]);
    // Stopped: a step runs no round.
    assert_eq!(step(&mut l, &mut b, &mut d), Ok(Step::Stopped("enough")));
    assert_eq!((l.rounds(), b.now), (3, 30.0));
    d.n = 4;
    assert_eq!(step(&mut l, &mut b, &mut d), Ok(Step::Ran));
    assert_eq!(d.seen, [0, 1, 2, 3]);
}

#[test]
fn until_done_ends_where_a_hand_written_loop_does() {
    let jobs = [(1, 0.0, 2, 25.0), (2, 5.0, 1, 40.0), (3, 12.0, 2, 8.0)];
    let (mut b1, mut l1) = (Fake::with(&jobs), lp(plain(), 1, 2));
    let by_hand = run(&mut l1, &mut b1, 100);
    let (mut b2, mut l2) = (Fake::with(&jobs), lp(plain(), 1, 2));
    let mut reports = Vec::new();
    crate::runner::run(
        &mut l2,
        &mut b2,
        &mut crate::runner::UntilDone(|r: RoundReport, _: &RoundLoop| reports.push(r)),
    )
    .unwrap();
    let summary = |rs: &[RoundReport]| -> Vec<(u64, Vec<JobId>, Vec<JobId>)> {
        rs.iter()
            .map(|r| (r.round, r.launched.clone(), r.ended.clone()))
            .collect()
    };
    assert_eq!(summary(&reports), summary(&by_hand));
    assert!(l2.is_idle() && b2.exhausted());
    assert_eq!(b1.launches, b2.launches);
}

#[test]
fn a_failed_round_reaches_the_driver() {
    let p = scheduling_an_unknown_job();
    let mut b = Fake::with(&[(1, 0.0, 1, 5.0)]);
    let mut l = lp(p, 1, 2);
    let mut d = Rounds {
        n: 10,
        seen: Vec::new(),
    };
    let e = crate::runner::run(&mut l, &mut b, &mut d).unwrap_err();
    assert!(e.contains("fifo"), "{e}");
    assert!(d.seen.is_empty());
}

#[test]
fn a_built_loop_starts_where_its_builder_says() {
    let p = policies(
        Admit { hold: false },
        Fifo { fixed: None },
        FirstFree { extra: None },
    );
    let rules = StartupRules {
        min_run_s: 42.0,
        ..StartupRules::off()
    };
    let mut l = RoundLoop::builder(p, ClusterState::homogeneous(1, 2), 10.0)
        .startup(rules)
        .on_invalid(OnInvalidDecision::SkipRound)
        .first_round(7)
        .record_events()
        .build();
    let mut b = Fake::with(&[(1, 0.0, 1, 5.0)]);
    let r = l.run_round(&mut b).unwrap();
    assert_eq!(r.round, 7);
    assert!(!r.events.is_empty(), "events recorded");
    // Rebuilt from its builder: the same policies and rules, its jobs kept.
    let l = l.into_builder().first_round(20).build();
    assert_eq!(l.startup(), rules);
    assert_eq!(l.policies.names.scheduling, "fifo");
    assert_eq!(l.rounds(), 20);
    assert!(l.jobs.get(JobId(1)).is_some());
}
