//! Step times of unmeasured placements, interpolated linearly over the
//! tetrahedralisation the Pollux artifact uses.
//!
//! For a placement it has not measured, the artifact interpolates
//! `(step_time, sync_time)` over the points `(num_nodes, num_replicas,
//! local_bsz)` of `placements.csv` (averaged per point, in sorted order) and
//! `scalability.csv` (in file order), with scipy's `LinearNDInterpolator`: a
//! Delaunay tetrahedralisation built by Qhull, then barycentric weights in
//! the tetrahedron that holds the query. The points lie on a grid, so many
//! tetrahedralisations are equally Delaunay and each interpolates differently
//! inside the grid's cells; only Qhull's own choice reproduces the artifact's
//! step times (and so its JCTs, job for job). That choice is data here:
//! `delaunay-points.csv` and `delaunay-simplices.csv` beside the profile,
//! written by `python/tools/qhull_delaunay.py`. They are used only when their
//! points are exactly the profile's, in the same order.

use super::{ProfileError, Table};
use std::path::Path;

/// The files, relative to an application's folder.
pub const POINTS_FILE: &str = "delaunay-points.csv";
pub const SIMPLICES_FILE: &str = "delaunay-simplices.csv";

/// Barycentric tolerance of a first search (scipy's `find_simplex`: 100 ε),
/// then of a broad one (√ε) for queries on a face that rounding put outside.
const EPS: f64 = 100.0 * f64::EPSILON;
const EPS_BROAD: f64 = 1.490_116_119_384_765_6e-8;

/// One tetrahedron: its vertices and the affine map to the barycentric
/// coordinates of its first three (`c = inv · (x − r3)`, `c3 = 1 − Σc`).
#[derive(Clone, Debug)]
struct Simplex {
    v: [usize; 4],
    r3: [f64; 3],
    inv: [[f64; 3]; 3],
    /// Node-count range its vertices span (queries have whole node counts).
    nodes: (f64, f64),
}

/// A tetrahedralisation with the values at its points.
#[derive(Clone, Debug)]
pub struct Tetrahedra {
    simplices: Vec<Simplex>,
    values: Vec<(f64, f64)>,
}

/// `(nodes, replicas, local batch)` and `(step, sync)` at one point.
pub type Point = ([f64; 3], (f64, f64));

impl Tetrahedra {
    /// The tetrahedralisation in `dir`, if its files are there and their
    /// points are exactly `points` (in order); `Ok(None)` when the files are
    /// absent or were made for other points (then the caller interpolates
    /// on its own; the second case is logged).
    pub fn load(dir: &Path, points: &[Point]) -> Result<Option<Tetrahedra>, ProfileError> {
        let (pf, sf) = (dir.join(POINTS_FILE), dir.join(SIMPLICES_FILE));
        if !pf.is_file() || !sf.is_file() {
            return Ok(None);
        }
        let t = Table::read(&pf, &["num_nodes", "num_replicas", "local_bsz"])?;
        let same = t.rows.len() == points.len()
            && (0..t.rows.len()).all(|r| {
                let p = points[r].0;
                ["num_nodes", "num_replicas", "local_bsz"]
                    .iter()
                    .enumerate()
                    .all(|(k, c)| t.f64(r, c).is_ok_and(|x| x == p[k]))
            });
        if !same {
            tracing::warn!(
                file = %pf.display(),
                "the tetrahedralisation was made for other points than this profile's; interpolating on the grid instead"
            );
            return Ok(None);
        }
        let s = Table::read(&sf, &["v0", "v1", "v2", "v3"])?;
        let mut simplices = Vec::with_capacity(s.rows.len());
        for r in 0..s.rows.len() {
            let mut v = [0usize; 4];
            for (k, c) in ["v0", "v1", "v2", "v3"].iter().enumerate() {
                let i = s.u64(r, c)? as usize;
                if i >= points.len() {
                    return Err(ProfileError::Field {
                        path: sf.clone(),
                        line: s.rows[r].0,
                        column: c.to_string(),
                        message: format!("vertex {i}, but {POINTS_FILE} has {}", points.len()),
                    });
                }
                v[k] = i;
            }
            if let Some(x) = Simplex::new(v, points) {
                simplices.push(x);
            }
        }
        Ok(Some(Tetrahedra {
            simplices,
            values: points.iter().map(|p| p.1).collect(),
        }))
    }

    /// `(step, sync)` at `x`, or `None` outside the hull.
    pub fn interpolate(&self, x: [f64; 3]) -> Option<(f64, f64)> {
        for eps in [EPS, EPS_BROAD] {
            for s in &self.simplices {
                if x[0] < s.nodes.0 - eps || x[0] > s.nodes.1 + eps {
                    continue;
                }
                let c = s.barycentric(x);
                if c.iter().all(|&ci| ci >= -eps) {
                    let mut out = (0.0, 0.0);
                    for (k, &vi) in s.v.iter().enumerate() {
                        out.0 += c[k] * self.values[vi].0;
                        out.1 += c[k] * self.values[vi].1;
                    }
                    return Some(out);
                }
            }
        }
        None
    }
}

impl Simplex {
    /// `None` for a flat tetrahedron (Qhull's triangulated output may hold
    /// some; scipy never answers from them either).
    fn new(v: [usize; 4], points: &[Point]) -> Option<Simplex> {
        let p = |k: usize| points[v[k]].0;
        let r3 = p(3);
        // Columns: vertices 0..3 minus vertex 3.
        let m: [[f64; 3]; 3] =
            std::array::from_fn(|row| std::array::from_fn(|col| p(col)[row] - r3[row]));
        let det = m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
        let norm = |col: usize| (0..3).map(|r| m[r][col] * m[r][col]).sum::<f64>().sqrt();
        let scale = norm(0) * norm(1) * norm(2);
        if !det.is_finite() || det.abs() <= 1e-10 * scale {
            return None;
        }
        let cof = |r: usize, c: usize| {
            let (r1, r2) = ((r + 1) % 3, (r + 2) % 3);
            let (c1, c2) = ((c + 1) % 3, (c + 2) % 3);
            m[r1][c1] * m[r2][c2] - m[r1][c2] * m[r2][c1]
        };
        // inv = adj(m) / det, adj = cofactor matrix transposed.
        let inv = std::array::from_fn(|i| std::array::from_fn(|j| cof(j, i) / det));
        let ns = (0..4).map(|k| p(k)[0]);
        let nodes = (
            ns.clone().fold(f64::INFINITY, f64::min),
            ns.fold(f64::NEG_INFINITY, f64::max),
        );
        Some(Simplex { v, r3, inv, nodes })
    }

    fn barycentric(&self, x: [f64; 3]) -> [f64; 4] {
        let d = [x[0] - self.r3[0], x[1] - self.r3[1], x[2] - self.r3[2]];
        let c: [f64; 3] =
            std::array::from_fn(|i| (0..3).map(|j| self.inv[i][j] * d[j]).sum::<f64>());
        [c[0], c[1], c[2], 1.0 - c[0] - c[1] - c[2]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The unit cube's corners, split in two ways into tetrahedra: inside,
    /// the two interpolate differently, as Qhull's and another valid choice
    /// do on the artifact's grid; on the corners both give the data.
    #[test]
    fn the_simplices_given_decide_the_value_inside_a_cell() {
        let corners: Vec<Point> = (0..8)
            .map(|i| {
                let x = [(i & 1) as f64, ((i >> 1) & 1) as f64, ((i >> 2) & 1) as f64];
                (x, (if i == 3 { 10.0 } else { 0.0 }, i as f64))
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let write_points = || {
            let mut s = String::from("num_nodes,num_replicas,local_bsz\n");
            for (x, _) in &corners {
                s += &format!("{},{},{}\n", x[0], x[1], x[2]);
            }
            std::fs::write(dir.path().join(POINTS_FILE), s).unwrap();
        };
        write_points();
        let mut values = Vec::new();
        // Kuhn's split along the 0–7 diagonal, then along the 1–6 one.
        for split in [
            "0,1,3,7\n0,1,5,7\n0,2,3,7\n0,2,6,7\n0,4,5,7\n0,4,6,7\n",
            "1,6,0,2\n1,6,2,3\n1,6,3,7\n1,6,7,5\n1,6,5,4\n1,6,4,0\n",
        ] {
            std::fs::write(
                dir.path().join(SIMPLICES_FILE),
                format!("v0,v1,v2,v3\n{split}"),
            )
            .unwrap();
            let t = Tetrahedra::load(dir.path(), &corners).unwrap().unwrap();
            for (x, v) in &corners {
                let got = t.interpolate(*x).unwrap();
                assert!((got.0 - v.0).abs() < 1e-12 && (got.1 - v.1).abs() < 1e-12);
            }
            assert_eq!(t.interpolate([1.5, 0.5, 0.5]), None, "outside the hull");
            values.push(t.interpolate([0.6, 0.5, 0.2]).unwrap().0);
        }
        assert!((values[0] - values[1]).abs() > 0.5, "{values:?}");
        // Points that are not the profile's: not used.
        let mut other = corners.clone();
        other[5].0[2] = 2.0;
        assert!(Tetrahedra::load(dir.path(), &other).unwrap().is_none());
        // A vertex past the points: an error naming the file and column.
        std::fs::write(dir.path().join(SIMPLICES_FILE), "v0,v1,v2,v3\n0,1,2,8\n").unwrap();
        let e = Tetrahedra::load(dir.path(), &corners)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(SIMPLICES_FILE) && e.contains("v3") && e.contains("vertex 8"),
            "{e}"
        );
    }
}
