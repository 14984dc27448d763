//! A small dense simplex solver for the linear programs of Gavel-style
//! policies: maximise `c·x` subject to `A·x ≤ b`, `x ≥ 0`, with `b ≥ 0` (so the
//! origin is feasible and one phase suffices). Dantzig's pivoting rule, with
//! Bland's rule after a run of degenerate pivots so that it cannot cycle.

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

    proptest! {
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
