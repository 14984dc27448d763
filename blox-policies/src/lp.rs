//! Linear programs of Gavel-style policies: maximise `c·x` subject to
//! `A·x ≤ b`, `x ≥ 0`.
//!
//! - [`maximize_sparse`]: the one policies use. Rows are sparse and variables
//!   may have upper bounds; it is solved by `microlp` (a maintained, pure-Rust
//!   sparse simplex with LU factorisation), so a program of 1,000 jobs × 3
//!   GPU types holds only its non-zeros.
//! - [`maximize`]: a small dense simplex kept as the reference the sparse one
//!   is tested against (`b ≥ 0`, so the origin is feasible and one phase
//!   suffices; Dantzig's rule, Bland's after a run of degenerate pivots so
//!   that it cannot cycle). Its table is rows × columns: do not use it for
//!   large programs.

/// Solution of [`maximize`].
#[derive(Clone, Debug, PartialEq)]
pub struct Solution {
    pub x: Vec<f64>,
    pub objective: f64,
}

/// Why no solution came back.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LpError {
    #[error("the objective is unbounded")]
    Unbounded,
    #[error("a right-hand side is negative or not finite (b[{0}])")]
    BadRhs(usize),
    #[error("row {0} has {1} coefficients, expected {2}")]
    Shape(usize, usize, usize),
    #[error("no optimum after {0} pivots")]
    IterationLimit(usize),
    #[error("the program is infeasible")]
    Infeasible,
    #[error("variable {0} is out of range (the program has {1})")]
    Variable(usize, usize),
    #[error("a coefficient, bound or right-hand side is not a number (row {0})")]
    NotFinite(usize),
    #[error("the LP solver failed: {0}")]
    Solver(String),
}

/// A sparse program for [`maximize_sparse`]: maximise `c·x` subject to
/// `Σ coeff·x_var ≤ rhs` for every row and `0 ≤ x_j ≤ upper[j]`
/// (`f64::INFINITY`: no bound).
#[derive(Clone, Debug, Default)]
pub struct SparseLp {
    pub c: Vec<f64>,
    pub upper: Vec<f64>,
    /// Rows: (variable, coefficient) pairs (a variable named twice in one
    /// row has its coefficients added) and the right-hand side.
    pub rows: Vec<(Vec<(usize, f64)>, f64)>,
}

impl SparseLp {
    /// A program over `n` variables, each in `[0, ∞)`, objective 0.
    pub fn new(n: usize) -> Self {
        SparseLp {
            c: vec![0.0; n],
            upper: vec![f64::INFINITY; n],
            rows: Vec::new(),
        }
    }

    /// Adds `Σ coeff·x_var ≤ rhs`.
    pub fn le(&mut self, terms: Vec<(usize, f64)>, rhs: f64) {
        self.rows.push((terms, rhs));
    }
}

/// Solves a [`SparseLp`] (see the module docs). Every input is checked
/// first; the solver's own failures (and panics) come back as errors.
pub fn maximize_sparse(lp: &SparseLp) -> Result<Solution, LpError> {
    let n = lp.c.len();
    if lp.upper.len() != n {
        return Err(LpError::Shape(usize::MAX, lp.upper.len(), n));
    }
    if lp.c.iter().any(|v| !v.is_finite()) || lp.upper.iter().any(|v| v.is_nan() || *v < 0.0) {
        return Err(LpError::NotFinite(usize::MAX));
    }
    let mut rows = Vec::with_capacity(lp.rows.len());
    for (i, (terms, rhs)) in lp.rows.iter().enumerate() {
        if !rhs.is_finite() {
            return Err(LpError::NotFinite(i));
        }
        let mut merged: std::collections::BTreeMap<usize, f64> = Default::default();
        for &(v, a) in terms {
            if v >= n {
                return Err(LpError::Variable(v, n));
            }
            if !a.is_finite() {
                return Err(LpError::NotFinite(i));
            }
            *merged.entry(v).or_default() += a;
        }
        rows.push((merged, *rhs));
    }
    let solved = std::panic::catch_unwind(|| {
        let mut p = microlp::Problem::new(microlp::OptimizationDirection::Maximize);
        let vars: Vec<microlp::Variable> =
            lp.c.iter()
                .zip(&lp.upper)
                .map(|(c, u)| p.add_var(*c, (0.0, *u)))
                .collect();
        for (terms, rhs) in &rows {
            let mut e = microlp::LinearExpr::empty();
            for (v, a) in terms {
                e.add(vars[*v], *a);
            }
            p.add_constraint(e, microlp::ComparisonOp::Le, *rhs);
        }
        p.solve().map(|s| Solution {
            objective: s.objective(),
            x: vars.iter().map(|v| s.var_value(*v).max(0.0)).collect(),
        })
    });
    match solved {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(microlp::Error::Infeasible)) => Err(LpError::Infeasible),
        Ok(Err(microlp::Error::Unbounded)) => Err(LpError::Unbounded),
        Ok(Err(e)) => Err(LpError::Solver(e.to_string())),
        Err(_) => Err(LpError::Solver("the solver panicked".into())),
    }
}

const EPS: f64 = 1e-9;

/// Maximises `c·x` subject to `a·x ≤ b` and `x ≥ 0` (`b ≥ 0`).
pub fn maximize(c: &[f64], a: &[Vec<f64>], b: &[f64]) -> Result<Solution, LpError> {
    let n = c.len();
    let m = a.len();
    for (i, row) in a.iter().enumerate() {
        if row.len() != n {
            return Err(LpError::Shape(i, row.len(), n));
        }
        if !(b[i] >= 0.0 && b[i].is_finite()) {
            return Err(LpError::BadRhs(i));
        }
    }
    let w = n + m + 1; // columns: x, slacks, rhs
    let mut t = vec![0.0; (m + 1) * w];
    for i in 0..m {
        t[i * w..i * w + n].copy_from_slice(&a[i]);
        t[i * w + n + i] = 1.0;
        t[i * w + w - 1] = b[i];
    }
    // Objective row: −c (reduced costs); rhs holds the objective value.
    for j in 0..n {
        t[m * w + j] = -c[j];
    }
    let mut basis: Vec<usize> = (n..n + m).collect();
    let limit = 50 * (n + m) + 1000;
    // Dantzig's rule (most negative reduced cost) while the objective moves;
    // Bland's rule after a run of degenerate pivots, which cannot cycle.
    let mut stalled = 0usize;
    let mut last_obj = f64::NEG_INFINITY;
    for _ in 0..limit {
        let obj = t[m * w + w - 1];
        if obj > last_obj + EPS {
            stalled = 0;
            last_obj = obj;
        } else {
            stalled += 1;
        }
        let bland = stalled > 2 * (n + m).min(64);
        let entering = if bland {
            (0..n + m).find(|&j| t[m * w + j] < -EPS)
        } else {
            (0..n + m)
                .filter(|&j| t[m * w + j] < -EPS)
                .min_by(|&x, &y| t[m * w + x].total_cmp(&t[m * w + y]))
        };
        let Some(e) = entering else {
            let mut x = vec![0.0; n];
            for (i, &bv) in basis.iter().enumerate() {
                if bv < n {
                    x[bv] = t[i * w + w - 1];
                }
            }
            return Ok(Solution {
                objective: t[m * w + w - 1],
                x,
            });
        };
        // Ratio test; ties to the lowest basis index.
        let mut leave: Option<(usize, f64)> = None;
        for i in 0..m {
            let aie = t[i * w + e];
            if aie > EPS {
                let r = t[i * w + w - 1] / aie;
                match leave {
                    Some((l, lr)) if r > lr + EPS || (r > lr - EPS && basis[i] > basis[l]) => {}
                    _ => leave = Some((i, r)),
                }
            }
        }
        let Some((r, _)) = leave else {
            return Err(LpError::Unbounded);
        };
        // Pivot on (r, e).
        let p = t[r * w + e];
        for v in &mut t[r * w..(r + 1) * w] {
            *v /= p;
        }
        let pivot_row: Vec<f64> = t[r * w..(r + 1) * w].to_vec();
        for i in 0..=m {
            if i == r {
                continue;
            }
            let f = t[i * w + e];
            if f.abs() > 0.0 {
                for (v, pr) in t[i * w..(i + 1) * w].iter_mut().zip(&pivot_row) {
                    *v -= f * pr;
                }
            }
        }
        basis[r] = e;
    }
    Err(LpError::IterationLimit(limit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn solves_a_textbook_program() {
        // max 3x + 5y, x ≤ 4, 2y ≤ 12, 3x + 2y ≤ 18 → x = 2, y = 6, 36.
        let s = maximize(
            &[3.0, 5.0],
            &[vec![1.0, 0.0], vec![0.0, 2.0], vec![3.0, 2.0]],
            &[4.0, 12.0, 18.0],
        )
        .unwrap();
        assert!((s.objective - 36.0).abs() < 1e-9);
        assert!((s.x[0] - 2.0).abs() < 1e-9 && (s.x[1] - 6.0).abs() < 1e-9);
    }

    #[test]
    fn a_gavel_sized_program_is_feasible_and_beats_the_uniform_share() {
        // 150 jobs x 3 types: max-min shape with degenerate zero rows.
        let (nj, nk) = (150, 3);
        let nv = nj * nk + 1;
        let mut c = vec![0.0; nv];
        c[nv - 1] = 1.0;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for j in 0..nj {
            let mut row = vec![0.0; nv];
            for k in 0..nk {
                row[j * nk + k] = -(1.0 + ((j * 7 + k * 3) % 5) as f64);
            }
            row[nv - 1] = 1.0;
            a.push(row);
            b.push(0.0);
            let mut row = vec![0.0; nv];
            for k in 0..nk {
                row[j * nk + k] = 1.0;
            }
            a.push(row);
            b.push(1.0);
        }
        for k in 0..nk {
            let mut row = vec![0.0; nv];
            for j in 0..nj {
                row[j * nk + k] = 1.0 + (j % 4) as f64;
            }
            a.push(row);
            b.push(16.0);
        }
        let s = maximize(&c, &a, &b).unwrap();
        // Feasible: every constraint holds and no variable is negative.
        for (row, bi) in a.iter().zip(&b) {
            let lhs: f64 = row.iter().zip(&s.x).map(|(r, x)| r * x).sum();
            assert!(lhs <= bi + 1e-6, "{lhs} > {bi}");
        }
        assert!(s.x.iter().all(|v| *v >= -1e-9));
        // At least as good as a feasible point: every job the same share
        // `alpha` of every type, as much as the busiest type allows.
        let alpha = 16.0 / (0..nj).map(|j| 1.0 + (j % 4) as f64).sum::<f64>();
        assert!(nk as f64 * alpha <= 1.0);
        let worst_uniform = (0..nj)
            .map(|j| {
                (0..nk)
                    .map(|k| alpha * (1.0 + ((j * 7 + k * 3) % 5) as f64))
                    .sum::<f64>()
            })
            .fold(f64::INFINITY, f64::min);
        assert!(
            s.objective >= worst_uniform - 1e-9,
            "{} below the feasible {worst_uniform}",
            s.objective
        );
        assert!((s.objective - s.x[nv - 1]).abs() < 1e-9);
    }

    #[test]
    fn reports_unbounded_programs() {
        assert_eq!(
            maximize(&[1.0, 1.0], &[vec![1.0, -1.0]], &[1.0]),
            Err(LpError::Unbounded)
        );
    }

    #[test]
    fn the_sparse_solver_solves_the_textbook_program_and_checks_its_input() {
        // max 3x + 5y s.t. x ≤ 4, 2y ≤ 12, 3x + 2y ≤ 18: x = 2, y = 6, 36.
        let mut lp = SparseLp::new(2);
        lp.c = vec![3.0, 5.0];
        lp.le(vec![(0, 1.0)], 4.0);
        lp.le(vec![(1, 2.0)], 12.0);
        lp.le(vec![(0, 3.0), (1, 1.0), (1, 1.0)], 18.0);
        let s = maximize_sparse(&lp).unwrap();
        assert!((s.objective - 36.0).abs() < 1e-9, "{s:?}");
        assert!((s.x[0] - 2.0).abs() < 1e-9 && (s.x[1] - 6.0).abs() < 1e-9);
        lp.le(vec![(2, 1.0)], 1.0);
        assert_eq!(maximize_sparse(&lp), Err(LpError::Variable(2, 2)));
        let mut lp = SparseLp::new(1);
        lp.c = vec![1.0];
        assert_eq!(maximize_sparse(&lp), Err(LpError::Unbounded));
        lp.le(vec![(0, f64::NAN)], 1.0);
        assert_eq!(maximize_sparse(&lp), Err(LpError::NotFinite(0)));
        // Bounds: x ≤ 2 by its bound alone.
        let mut lp = SparseLp::new(1);
        lp.c = vec![1.0];
        lp.upper = vec![2.0];
        assert!((maximize_sparse(&lp).unwrap().objective - 2.0).abs() < 1e-9);
    }

    proptest! {
        /// The sparse solver reaches the dense reference's optimum on random
        /// bounded programs, with a feasible point.
        #[test]
        fn the_sparse_solver_agrees_with_the_dense_reference(
            c in prop::collection::vec(0.0f64..5.0, 4),
            a in prop::collection::vec(prop::collection::vec(-1.0f64..3.0, 4), 1..6),
            bs in prop::collection::vec(0.5f64..10.0, 6),
        ) {
            let mut dense_a = a.clone();
            let mut b = bs[..a.len()].to_vec();
            for j in 0..4 {
                let mut row = vec![0.0; 4];
                row[j] = 1.0;
                dense_a.push(row);
                b.push(10.0);
            }
            let dense = maximize(&c, &dense_a, &b).unwrap();
            let mut lp = SparseLp::new(4);
            lp.c = c.clone();
            for (row, bi) in dense_a.iter().zip(&b) {
                lp.le(row.iter().enumerate().filter(|(_, v)| **v != 0.0).map(|(j, v)| (j, *v)).collect(), *bi);
            }
            let sparse = maximize_sparse(&lp).unwrap();
            prop_assert!((sparse.objective - dense.objective).abs() <= 1e-6 * (1.0 + dense.objective.abs()),
                "sparse {} dense {}", sparse.objective, dense.objective);
            for (row, bi) in dense_a.iter().zip(&b) {
                let lhs: f64 = row.iter().zip(&sparse.x).map(|(x, y)| x * y).sum();
                prop_assert!(lhs <= bi + 1e-6);
            }
        }

        /// The solution is feasible and no vertex of a box beats it.
        #[test]
        fn solutions_are_feasible_and_beat_random_feasible_points(
            c in prop::collection::vec(0.0f64..5.0, 3),
            a in prop::collection::vec(prop::collection::vec(0.0f64..3.0, 3), 1..5),
            bs in prop::collection::vec(0.5f64..10.0, 5),
            probe in prop::collection::vec(0.0f64..1.0, 3),
        ) {
            let b = &bs[..a.len()];
            // Bound every variable so the program is bounded.
            let mut a = a.clone();
            let mut b = b.to_vec();
            for j in 0..3 {
                let mut row = vec![0.0; 3];
                row[j] = 1.0;
                a.push(row);
                b.push(10.0);
            }
            let s = maximize(&c, &a, &b).unwrap();
            for (row, bi) in a.iter().zip(&b) {
                let lhs: f64 = row.iter().zip(&s.x).map(|(x, y)| x * y).sum();
                prop_assert!(lhs <= bi + 1e-6);
            }
            prop_assert!(s.x.iter().all(|v| *v >= -1e-9));
            // A random feasible point (scaled into the polytope) is no better.
            let scale = a.iter().zip(&b).map(|(row, bi)| {
                let lhs: f64 = row.iter().zip(&probe).map(|(x, y)| x * y).sum();
                if lhs > 0.0 { bi / lhs } else { f64::INFINITY }
            }).fold(f64::INFINITY, f64::min).min(1e6);
            let val: f64 = c.iter().zip(&probe).map(|(x, y)| x * y * scale).sum();
            prop_assert!(val <= s.objective + 1e-6);
        }
    }
}
