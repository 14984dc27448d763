//! Sia's selection problem (Sia, SOSP'23, §3.3, Eq. 1): choose at most one
//! configuration per job, no more GPUs of a type than the cluster has, to
//! maximise the sum of the chosen (job, configuration) values.
//!
//! A binary program; the artifact hands it to CBC (GLPK in the paper). Here
//! `microlp` (a maintained pure-Rust simplex) solves its linear relaxations
//! and a depth-first branch and bound on top closes the integrality gap: the
//! relaxation of this multiple-choice knapsack has at most a few fractional
//! jobs (one per GPU type's capacity row), so the search is short. It stops at
//! a relative gap of `rel_gap` (CBC's `allowablePercentageGap` in the
//! artifact, 0.01 %), and at its node budget (or, on a live scheduler only,
//! a wall-clock deadline) returns the best schedule found so far (always
//! feasible: rounding down a relaxation keeps every `≤` row), saying it is
//! not proven optimal and which budget stopped it. Without a deadline the
//! result is a function of the program alone: the search visits nodes in a
//! fixed order and the simplex is deterministic.

use std::time::Instant;

/// The program: `jobs` rows, configurations `configs` (GPU type index and
/// GPU count), the GPUs of each type, and the candidate (job, configuration,
/// value) triples. Triples with a value ≤ 0 are never chosen unless forced.
#[derive(Clone, Debug, Default)]
pub struct Program {
    pub jobs: usize,
    /// (GPU type index, GPUs) of each configuration.
    pub configs: Vec<(usize, u32)>,
    /// GPUs of each type.
    pub capacity: Vec<u32>,
    pub candidates: Vec<(u32, u32, f64)>,
    /// (job, configuration) pairs that must be chosen (jobs that may not be
    /// moved this round).
    pub forced: Vec<(u32, u32)>,
}

/// When to stop searching.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A wall-clock safeguard, for live schedulers only (`None` in a
    /// simulation: decisions must not depend on the machine's speed).
    pub deadline: Option<Instant>,
    pub rel_gap: f64,
    /// Branch-and-bound nodes at most: the deterministic budget.
    pub max_nodes: usize,
}

/// What stopped a search before it proved its schedule within the gap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The node budget.
    Nodes,
    /// The wall-clock deadline (live schedulers only).
    Deadline,
}

/// A solved program.
#[derive(Clone, Debug, PartialEq)]
pub struct Solved {
    /// The chosen configuration of each job.
    pub chosen: Vec<Option<u32>>,
    pub objective: f64,
    /// Best bound on the optimum (the root relaxation, tightened by the search).
    pub bound: f64,
    pub nodes: usize,
    /// False when a budget stopped the search first.
    pub proven: bool,
    /// The budget that stopped it, when not proven.
    pub stopped: Option<Stop>,
}

/// Why no schedule came back.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SolveError {
    #[error("the jobs that may not move need more GPUs than there are")]
    Infeasible,
    #[error("configuration {0} or job {1} is out of range")]
    OutOfRange(u32, u32),
    #[error("a value is not a finite number")]
    NotFinite,
    #[error("the LP solver failed: {0}")]
    Solver(String),
}

struct Var {
    job: u32,
    config: u32,
    value: f64,
    var: microlp::Variable,
}

/// Solves `p`; see the module docs.
pub fn solve(p: &Program, limits: Limits) -> Result<Solved, SolveError> {
    let forced: std::collections::HashSet<(u32, u32)> = p.forced.iter().copied().collect();
    let mut problem = microlp::Problem::new(microlp::OptimizationDirection::Maximize);
    let mut vars: Vec<Var> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for &(job, config, value) in &p.candidates {
        if job as usize >= p.jobs || config as usize >= p.configs.len() {
            return Err(SolveError::OutOfRange(config, job));
        }
        if !value.is_finite() {
            return Err(SolveError::NotFinite);
        }
        let is_forced = forced.contains(&(job, config));
        if (value <= 0.0 && !is_forced) || !seen.insert((job, config)) {
            continue;
        }
        let bounds = if is_forced { (1.0, 1.0) } else { (0.0, 1.0) };
        let var = problem.add_var(value, bounds);
        vars.push(Var {
            job,
            config,
            value,
            var,
        });
    }
    for &(job, config) in &p.forced {
        if !seen.contains(&(job, config)) {
            if job as usize >= p.jobs || config as usize >= p.configs.len() {
                return Err(SolveError::OutOfRange(config, job));
            }
            let var = problem.add_var(0.0, (1.0, 1.0));
            seen.insert((job, config));
            vars.push(Var {
                job,
                config,
                value: 0.0,
                var,
            });
        }
    }
    let mut empty = Solved {
        chosen: vec![None; p.jobs],
        objective: 0.0,
        bound: 0.0,
        nodes: 0,
        proven: true,
        stopped: None,
    };
    if vars.is_empty() {
        return Ok(empty);
    }
    let mut per_job: Vec<Vec<usize>> = vec![Vec::new(); p.jobs];
    for (i, v) in vars.iter().enumerate() {
        per_job[v.job as usize].push(i);
    }
    for list in per_job.iter().filter(|l| l.len() > 1) {
        let mut e = microlp::LinearExpr::empty();
        for &i in list {
            e.add(vars[i].var, 1.0);
        }
        problem.add_constraint(e, microlp::ComparisonOp::Le, 1.0);
    }
    for (t, &cap) in p.capacity.iter().enumerate() {
        let mut e = microlp::LinearExpr::empty();
        let mut any = false;
        for v in &vars {
            let (ty, gpus) = p.configs[v.config as usize];
            if ty == t {
                e.add(v.var, gpus as f64);
                any = true;
            }
        }
        if any {
            problem.add_constraint(e, microlp::ComparisonOp::Le, cap as f64);
        }
    }
    let root = match run(|| problem.solve())? {
        Ok(s) => s,
        Err(microlp::Error::Infeasible) => return Err(SolveError::Infeasible),
        Err(e) => return Err(SolveError::Solver(e.to_string())),
    };
    let mut best = round_down(p, &vars, &root);
    let mut best_value = value_of(&vars, &best);
    let root_bound = root.objective();
    let close_enough =
        |bound: f64, best: f64| bound <= best + limits.rel_gap * best.abs().max(1e-9);
    let mut stack = vec![root];
    let mut nodes = 0usize;
    let mut open_bound = f64::NEG_INFINITY;
    let mut stopped = None;
    while let Some(node) = stack.pop() {
        nodes += 1;
        let bound = node.objective();
        if close_enough(bound, best_value) {
            continue;
        }
        if nodes > limits.max_nodes {
            stopped = Some(Stop::Nodes);
        } else if limits.deadline.is_some_and(|d| Instant::now() >= d) {
            stopped = Some(Stop::Deadline);
        }
        if stopped.is_some() {
            open_bound = open_bound.max(bound);
            for n in &stack {
                open_bound = open_bound.max(n.objective());
            }
            break;
        }
        // A feasible point from this relaxation.
        let guess = round_down(p, &vars, &node);
        let g = value_of(&vars, &guess);
        if g > best_value {
            best_value = g;
            best = guess;
        }
        // Branch on the most fractional variable: try it at 1 first.
        let frac = vars
            .iter()
            .map(|v| (v, *node.var_value(v.var)))
            .filter(|(_, x)| *x > 1e-6 && *x < 1.0 - 1e-6)
            .min_by(|a, b| (a.1 - 0.5).abs().total_cmp(&(b.1 - 0.5).abs()));
        let Some((v, _)) = frac else {
            continue; // integral: its rounding is itself, already counted
        };
        for val in [0.0, 1.0] {
            let child = node.clone();
            if let Ok(Ok(s)) = run(|| child.fix_var(v.var, val)) {
                if !close_enough(s.objective(), best_value) {
                    stack.push(s);
                }
            }
        }
    }
    let proven = open_bound == f64::NEG_INFINITY;
    for (j, c) in best {
        empty.chosen[j as usize] = Some(c);
    }
    empty.objective = best_value;
    empty.bound = if proven {
        best_value.max(root_bound.min(best_value * (1.0 + limits.rel_gap)))
    } else {
        open_bound.max(best_value)
    };
    empty.nodes = nodes;
    empty.proven = proven;
    empty.stopped = if proven { None } else { stopped };
    Ok(empty)
}

/// Runs the solver, turning a panic inside it into an error.
fn run<T>(f: impl FnOnce() -> T) -> Result<T, SolveError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|_| SolveError::Solver("the solver panicked".into()))
}

fn value_of(vars: &[Var], chosen: &[(u32, u32)]) -> f64 {
    chosen
        .iter()
        .map(|&(j, c)| {
            vars.iter()
                .find(|v| v.job == j && v.config == c)
                .map_or(0.0, |v| v.value)
        })
        .sum()
}

/// A feasible schedule from a relaxation: every variable at 1 (forced ones
/// included), then the fractional jobs greedily, best value first, where
/// their GPUs still fit.
fn round_down(p: &Program, vars: &[Var], s: &microlp::Solution) -> Vec<(u32, u32)> {
    let mut left: Vec<i64> = p.capacity.iter().map(|&c| c as i64).collect();
    let mut taken = vec![false; p.jobs];
    let mut out = Vec::new();
    for v in vars {
        if *s.var_value(v.var) > 1.0 - 1e-6 && !taken[v.job as usize] {
            let (t, g) = p.configs[v.config as usize];
            left[t] -= g as i64;
            taken[v.job as usize] = true;
            out.push((v.job, v.config));
        }
    }
    let mut rest: Vec<&Var> = vars
        .iter()
        .filter(|v| !taken[v.job as usize] && v.value > 0.0 && *s.var_value(v.var) > 1e-6)
        .collect();
    rest.sort_by(|a, b| b.value.total_cmp(&a.value));
    for v in rest {
        let (t, g) = p.configs[v.config as usize];
        if !taken[v.job as usize] && left[t] >= g as i64 {
            left[t] -= g as i64;
            taken[v.job as usize] = true;
            out.push((v.job, v.config));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            deadline: None,
            rel_gap: 1e-9,
            max_nodes: 100_000,
        }
    }

    /// Every choice by enumeration (small programs only).
    fn brute(p: &Program) -> f64 {
        let mut options: Vec<Vec<(u32, f64)>> = vec![vec![]; p.jobs];
        for &(j, c, v) in &p.candidates {
            options[j as usize].push((c, v));
        }
        let mut best = f64::NEG_INFINITY;
        let mut pick = vec![0usize; p.jobs];
        loop {
            let mut used = vec![0u32; p.capacity.len()];
            let mut value = 0.0;
            let mut ok = true;
            for j in 0..p.jobs {
                if pick[j] > 0 {
                    let (c, v) = options[j][pick[j] - 1];
                    let (t, g) = p.configs[c as usize];
                    used[t] += g;
                    value += v;
                }
                let forced = p.forced.iter().find(|f| f.0 as usize == j);
                if let Some(f) = forced {
                    ok &= pick[j] > 0 && options[j][pick[j] - 1].0 == f.1;
                }
            }
            ok &= used.iter().zip(&p.capacity).all(|(u, c)| u <= c);
            if ok {
                best = best.max(value);
            }
            let mut k = 0;
            loop {
                if k == p.jobs {
                    return best;
                }
                pick[k] += 1;
                if pick[k] <= options[k].len() {
                    break;
                }
                pick[k] = 0;
                k += 1;
            }
        }
    }

    /// Sia Table 1: two jobs, configurations (1,1,A), (1,2,A), (1,1,B),
    /// (1,2,B), (1,4,B); the optimum gives J1 (1,4,B) and J2 (1,2,A).
    #[test]
    fn the_papers_example_picks_the_bold_entries() {
        let g = [[1.0, 1.5, 1.5, 2.5, 3.5], [1.2, 2.1, 1.0, 1.9, 3.6]];
        let configs = vec![(0, 1), (0, 2), (1, 1), (1, 2), (1, 4)];
        let mut candidates = Vec::new();
        for (j, row) in g.iter().enumerate() {
            for (c, v) in row.iter().enumerate() {
                candidates.push((j as u32, c as u32, *v));
            }
        }
        let p = Program {
            jobs: 2,
            configs,
            capacity: vec![2, 4],
            candidates,
            forced: vec![],
        };
        let s = solve(&p, limits()).unwrap();
        assert_eq!(s.chosen, vec![Some(4), Some(1)]);
        assert!((s.objective - 5.6).abs() < 1e-9);
        assert!(s.proven);
    }

    #[test]
    fn a_forced_job_keeps_its_configuration_even_when_it_costs() {
        let p = Program {
            jobs: 2,
            configs: vec![(0, 4)],
            capacity: vec![4],
            candidates: vec![(0, 0, 1.0), (1, 0, 5.0)],
            forced: vec![(0, 0)],
        };
        let s = solve(&p, limits()).unwrap();
        assert_eq!(s.chosen, vec![Some(0), None]);
        let too_many = Program {
            forced: vec![(0, 0), (1, 0)],
            ..p
        };
        assert_eq!(solve(&too_many, limits()), Err(SolveError::Infeasible));
    }

    #[test]
    fn a_passed_deadline_still_returns_a_feasible_schedule() {
        let mut p = Program {
            jobs: 30,
            configs: vec![(0, 1), (0, 2), (0, 4), (1, 1), (1, 8)],
            capacity: vec![7, 9],
            ..Program::default()
        };
        for j in 0..30u32 {
            for c in 0..5u32 {
                p.candidates
                    .push((j, c, 1.0 + ((j * 7 + c * 13) % 11) as f64 / 10.0));
            }
        }
        let s = solve(
            &p,
            Limits {
                deadline: Some(Instant::now()),
                ..limits()
            },
        )
        .unwrap();
        let mut used = [0u32; 2];
        for c in s.chosen.iter().flatten() {
            let (t, g) = p.configs[*c as usize];
            used[t] += g;
        }
        assert!(used[0] <= 7 && used[1] <= 9);
        assert!(s.objective > 0.0);
        // A fractional relaxation (two 2-GPU jobs, 3 GPUs) is not proven by
        // the deadline: Sia then keeps every allocation.
        let p = Program {
            jobs: 2,
            configs: vec![(0, 2)],
            capacity: vec![3],
            candidates: vec![(0, 0, 1.0), (1, 0, 1.0)],
            forced: vec![],
        };
        let hurried = Limits {
            deadline: Some(Instant::now()),
            ..limits()
        };
        let s = solve(&p, hurried).unwrap();
        assert!(!s.proven);
        assert_eq!(s.stopped, Some(Stop::Deadline));
        // The node budget stops it the same way, on any machine.
        let budget = Limits {
            max_nodes: 0,
            ..limits()
        };
        let s = solve(&p, budget).unwrap();
        assert_eq!(s.stopped, Some(Stop::Nodes));
        assert_eq!(s.chosen.iter().flatten().count(), 1);
        assert_eq!(s.chosen.iter().flatten().count(), 1);
        assert!(solve(&p, limits()).unwrap().proven);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(60))]
        /// Branch and bound finds the enumerated optimum of random programs.
        #[test]
        fn branch_and_bound_matches_enumeration(
            jobs in 1usize..5,
            caps in proptest::collection::vec(0u32..9, 2),
            vals in proptest::collection::vec(-0.5f64..3.0, 20),
        ) {
            let configs = vec![(0, 1), (0, 2), (0, 4), (1, 1), (1, 3)];
            let mut candidates = Vec::new();
            for j in 0..jobs {
                for c in 0..configs.len() {
                    let v = vals[(j * configs.len() + c) % vals.len()];
                    candidates.push((j as u32, c as u32, (v * 100.0).round() / 100.0));
                }
            }
            let p = Program { jobs, configs, capacity: caps, candidates, forced: vec![] };
            let s = solve(&p, limits()).unwrap();
            let want = brute(&Program {
                candidates: p.candidates.iter().copied().filter(|c| c.2 > 0.0).collect(),
                ..p.clone()
            }).max(0.0);
            proptest::prop_assert!((s.objective - want).abs() < 1e-6, "{} vs {}", s.objective, want);
        }
    }
}
