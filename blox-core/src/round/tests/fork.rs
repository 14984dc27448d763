//! Forks of a running loop (its jobs' [`JobState::fork`], its policies'
//! [`PolicyForks`], its profile), as a forecast or the synthesizer makes
//! them: a fork continues from the loop's state and its policies' state,
//! and what it does stays out of the loop it came from.

use super::*;
use crate::config::ModuleConfig;
use crate::module::Fork;

/// FIFO that counts the rounds it scheduled and hands a copy to forks, or
/// (`copyable: false`) cannot.
#[derive(Clone)]
struct Counting {
    rounds: u32,
    copyable: bool,
}

impl SchedulingPolicy for Counting {
    fn fork(&self) -> Fork<dyn SchedulingPolicy> {
        if self.copyable {
            Fork::Copy(Box::new(self.clone()))
        } else {
            Fork::Unforkable("its counter lives elsewhere".into())
        }
    }

    fn schedule(&mut self, _: &RoundInfo, jobs: &JobState, _: &ClusterState) -> Schedule {
        self.rounds += 1;
        let mut s = Schedule::in_priority_order(jobs.runnable());
        s.note = Some(format!("round {}", self.rounds));
        s
    }
}

crate::register_scheduling!("counting-test", "FIFO counting its rounds (a test)", |_| {
    Ok(Box::new(Counting {
        rounds: 0,
        copyable: true,
    }))
});

crate::register_admission!("admit-test", "admits everyone (a test)", |_| {
    Ok(Box::new(Admit { hold: false }))
});

crate::register_placement!("first-free-test", "the first free GPUs (a test)", |_| {
    Ok(Box::new(FirstFree { extra: None }))
});

fn counting_loop(copyable: bool) -> RoundLoop {
    let p = policies(
        Admit { hold: false },
        Fifo { fixed: None },
        FirstFree { extra: None },
    );
    let p = Policies {
        scheduling: Box::new(Counting {
            rounds: 0,
            copyable,
        }),
        names: PolicyNames::new("admit", "counting-test", "first-free"),
        ..p
    };
    lp(p, 1, 1)
}

/// A fork of `l`'s loop, as a forecast makes one, and the notes on its
/// policies.
fn fork_of(l: &RoundLoop) -> (RoundLoop, Vec<String>) {
    let m = |kind, name| ModuleConfig::named(kind, name);
    let forks = l.policies.fork();
    let (policies, notes) = forks
        .build(
            &m("admission", "admit-test"),
            &m("scheduling", "counting-test"),
            &m("placement", "first-free-test"),
        )
        .unwrap();
    let fork = RoundLoop::builder(policies, l.cluster.clone(), l.round_s())
        .jobs(l.jobs.fork())
        .profile(l.profile().clone())
        .first_round(l.rounds())
        .fork()
        .build();
    (fork, notes)
}

/// A backend for a fork: `b`'s clock and running jobs, no arrivals.
fn continuing(b: &Fake) -> Fake {
    Fake {
        now: b.now,
        running: b.running.clone(),
        left: b.left.clone(),
        ..Fake::default()
    }
}

#[test]
fn a_fork_continues_the_policies_state_and_leaves_the_loop_alone() {
    // Two one-GPU jobs on one GPU: job 1 runs, job 2 waits.
    let mut b = Fake::with(&[(1, 0.0, 1, 25.0), (2, 0.0, 1, 25.0)]);
    let mut l = counting_loop(true);
    for _ in 0..2 {
        l.run_round(&mut b).unwrap();
    }
    let (mut fork, notes) = fork_of(&l);
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(fork.profile().protection.name(), "startup-aware");
    // The fork runs the rest on a backend of its own: job 1 ends, job 2
    // runs; its policy counts on from the loop's 2 rounds.
    let mut fb = continuing(&b);
    let r = fork.run_round(&mut fb).unwrap();
    assert_eq!(r.note.as_deref(), Some("round 3"));
    assert_eq!(r.round, 2);
    while !fork.is_idle() {
        fork.run_round(&mut fb).unwrap();
    }
    assert_eq!(fork.jobs.finished().len(), 2);
    // The loop it came from saw none of it: job 1 still runs, job 2 waits,
    // and its own policy is at its own round 3 next.
    assert!(l.jobs.get(JobId(1)).unwrap().is_running());
    assert_eq!(l.jobs.get(JobId(2)).unwrap().status, JobStatus::Queued);
    assert!(l.jobs.finished().is_empty());
    let r = l.run_round(&mut b).unwrap();
    assert_eq!(r.note.as_deref(), Some("round 3"));
}

#[test]
fn a_policy_that_cannot_be_copied_starts_afresh_in_the_fork_and_says_so() {
    let mut b = Fake::with(&[(1, 0.0, 1, 100.0)]);
    let mut l = counting_loop(false);
    for _ in 0..3 {
        l.run_round(&mut b).unwrap();
    }
    assert!(!l.policies.fork().complete());
    let (mut fork, notes) = fork_of(&l);
    assert_eq!(
        notes,
        vec!["`counting-test` could not be forked (its counter lives elsewhere): its fork starts afresh"]
    );
    let mut fb = continuing(&b);
    let r = fork.run_round(&mut fb).unwrap();
    assert_eq!(r.note.as_deref(), Some("round 1"));
}
