//! Steps 1–4 of a round as data: each job's row of `G` ([`super::matrix`]), its
//! re-allocation factor ([`super::restart`]), the fairness power and `λ_n`, turned
//! into the candidates of the selection program ([`super::solve::Program`]).
//!
//! Choosing configuration `c` for job `i` is worth `λ_n − A_ic` to Sia's
//! minimisation (`p < 0`) and `A_ic − λ_n` to its maximisation (`p > 0`),
//! with `A = round(min(G^p, clip), 2)` (Eq. 1 with its no-allocation term:
//! `Σ A·X + λ_n·(jobs − Σ X)`). Both become one maximisation of the sum of
//! the chosen values; a value ≤ 0 is never worth choosing.

use super::configs::Configs;
use super::matrix::Row;
use super::restart::{self, History};
use super::solve::Program;
use std::collections::HashMap;

/// One job's row, with what it holds now.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRow {
    pub row: Row,
    /// The job holds GPUs now (it held a configuration last round).
    pub holds: bool,
    /// The (type, GPUs) it holds, when on one type.
    pub holding: Option<(usize, u32)>,
    pub history: History,
    /// It restores a checkpoint now and may not be moved.
    pub restoring: bool,
}

/// The objective's constants.
#[derive(Clone, Copy, Debug)]
pub struct Objective {
    pub p: f64,
    pub lambda_n: f64,
    pub clip: f64,
}

impl Objective {
    /// Python's `round(x, 2)` on `min(G^p, clip)`, then the no-allocation
    /// term: the value of choosing a configuration worth `g`.
    pub fn value(&self, g: f64) -> f64 {
        let a = round2(g.powf(self.p).min(self.clip));
        if self.p < 0.0 {
            self.lambda_n - a
        } else {
            a - self.lambda_n
        }
    }
}

/// Python's `round(x, 2)` on the value (half to even).
pub fn round2(x: f64) -> f64 {
    let y = x * 100.0;
    let r = y.round();
    let r = if (y - y.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - y.signum()
    } else {
        r
    };
    r / 100.0
}

/// The program of a round: adaptive configurations first (the cluster's,
/// in [`Configs`] order), then one per (type, GPU count) of a rigid job.
pub fn build(
    rows: &[JobRow],
    configs: &Configs,
    objective: Objective,
    hold_restoring: bool,
) -> Program {
    let mut program = Program {
        jobs: rows.len(),
        configs: configs.list.iter().map(|&(t, _, g)| (t, g)).collect(),
        capacity: configs.type_gpus.clone(),
        ..Program::default()
    };
    let mut rigid_config: HashMap<(usize, u32), u32> = HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        let (entries, current): (Vec<(u32, f64)>, Option<u32>) = match &r.row {
            Row::Adaptive(values) => {
                let current = r.holding.and_then(|(t, g)| {
                    configs.of_type[t]
                        .iter()
                        .find(|&&c| configs.list[c].2 == g)
                        .map(|&c| c as u32)
                });
                let e = values
                    .iter()
                    .enumerate()
                    .map(|(c, v)| (c as u32, *v))
                    .collect();
                (e, current)
            }
            Row::Rigid { gpus, per_type } => {
                let mut e = Vec::new();
                let mut current = None;
                for (t, v) in per_type.iter().enumerate() {
                    let next = program.configs.len() as u32;
                    let c = *rigid_config.entry((t, *gpus)).or_insert(next);
                    if c == next {
                        program.configs.push((t, *gpus));
                    }
                    if r.holding == Some((t, *gpus)) {
                        current = Some(c);
                    }
                    if *v > 0.0 {
                        e.push((c, *v));
                    }
                }
                (e, current)
            }
        };
        let factor = restart::factor(&r.history);
        for (c, g) in entries {
            let v = objective.value(restart::scaled(g, c, r.holds, current, factor));
            if v > 0.0 {
                program.candidates.push((i as u32, c, v));
            }
        }
        if let Some(c) = current {
            if hold_restoring && r.restoring {
                program.forced.push((i as u32, c));
            }
        }
    }
    program
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sia::restart::Kind;
    use blox_core::{ClusterState, NodeSpec};
    use std::collections::BTreeMap;

    fn configs() -> Configs {
        let mut c = ClusterState::new();
        c.add_node(NodeSpec::with_gpus(4));
        Configs::of(&c, 64, &BTreeMap::new())
    }

    fn history(age_s: f64, restarts: u32) -> History {
        History {
            kind: Kind::Adaptive,
            age_s,
            restarts,
            penalty_s: 30.0,
            service_gpu_s: 0.0,
        }
    }

    const SIA: Objective = Objective {
        p: -0.5,
        lambda_n: 1.1,
        clip: 3000.0,
    };

    /// The case: a job that holds nothing, two rounds old, is worth
    /// its whole row (1 on one GPU: 1.1 − 1 = 0.1), not a row damped by its
    /// age (which made its least configuration worthless and started it
    /// two rounds late).
    #[test]
    fn a_queued_job_is_worth_its_unscaled_row() {
        let c = configs();
        let rows = [JobRow {
            row: Row::Adaptive(vec![1.0, 1.9, 3.6]),
            holds: false,
            holding: None,
            history: history(120.0, 0),
            restoring: false,
        }];
        let p = build(&rows, &c, SIA, true);
        let want: Vec<(u32, u32, f64)> = [1.0f64, 1.9, 3.6]
            .iter()
            .enumerate()
            .map(|(k, g)| (0, k as u32, 1.1 - round2(g.powf(-0.5))))
            .collect();
        assert_eq!(p.candidates.len(), 3);
        for (got, want) in p.candidates.iter().zip(want) {
            assert_eq!(got.1, want.1);
            assert!((got.2 - want.2).abs() < 1e-12, "{got:?} vs {want:?}");
        }
    }

    /// A job holding 2 GPUs keeps that entry; the others are damped.
    #[test]
    fn a_holding_job_is_damped_everywhere_but_where_it_is() {
        let c = configs();
        let h = history(600.0, 10);
        let f = restart::factor(&h);
        let rows = [JobRow {
            row: Row::Adaptive(vec![1.0, 1.9, 3.6]),
            holds: true,
            holding: Some((0, 2)),
            history: h,
            restoring: true,
        }];
        let p = build(&rows, &c, SIA, true);
        let v = |c: u32| p.candidates.iter().find(|x| x.1 == c).map(|x| x.2);
        assert!((v(1).unwrap() - SIA.value(1.9)).abs() < 1e-12);
        assert!((v(2).unwrap() - SIA.value(3.6 * f)).abs() < 1e-12);
        // Damped below 1, one GPU is no longer worth choosing.
        assert_eq!(v(0), None);
        assert_eq!(p.candidates.len(), 2);
        assert_eq!(p.forced, vec![(0, 1)]);
    }

    /// With p > 0 and λ_n of the opposite sign every configuration a job
    /// can use is worth choosing.
    #[test]
    fn a_positive_p_with_a_negative_lambda_values_every_usable_configuration() {
        let c = configs();
        let rows = [JobRow {
            row: Row::Adaptive(vec![1.0, 1.9, 1e-4]),
            holds: false,
            holding: None,
            history: history(0.0, 0),
            restoring: false,
        }];
        let pos = Objective {
            p: 0.5,
            lambda_n: -1.0,
            clip: 3000.0,
        };
        let p = build(&rows, &c, pos, true);
        assert_eq!(p.candidates.len(), 3);
        assert!((p.candidates[0].2 - 2.0).abs() < 1e-12);
        assert!((p.candidates[1].2 - (round2(1.9f64.sqrt()) + 1.0)).abs() < 1e-12);
    }

    #[test]
    fn a_rigid_job_gets_one_configuration_per_type() {
        let c = configs();
        let rows = [JobRow {
            row: Row::Rigid {
                gpus: 2,
                per_type: vec![2.0],
            },
            holds: false,
            holding: None,
            history: History {
                kind: Kind::Rigid,
                ..history(0.0, 0)
            },
            restoring: false,
        }];
        let p = build(&rows, &c, SIA, true);
        assert_eq!(p.configs.len(), c.list.len() + 1);
        assert_eq!(p.configs.last(), Some(&(0, 2)));
        assert_eq!(p.candidates.len(), 1);
    }
}
